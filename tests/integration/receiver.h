/*
 * tests/integration/receiver.h — an in-process HTTP endpoint for the
 * integration tests (libmicrohttpd on 127.0.0.1): it records every request
 * (method, path, headers, body, arrival time, the answer it got) and answers
 * as the test scripted it: a status for the first N requests or for bodies
 * holding a marker, Retry-After, a delay, or a dropped connection. It can be
 * stopped and started again on the same port to play an outage. It serves
 * plain HTTP (rx_start()) or HTTPS with a given certificate (rx_start_tls(),
 * e.g. one from rx_make_cert()).
 *
 * Every function is thread-safe: the daemon's threads record while the test
 * reads. Nothing here asserts (the test decides what a failure means).
 */
#ifndef SL_RECEIVER_H
#define SL_RECEIVER_H

#include <stdbool.h>
#include <stddef.h>

#define RX_DROP 0u      /* as a status: close the connection without an answer */
#define RX_MAX_RULES 16 /* scripted answers held at once */

/* One request as received. Immutable once recorded; valid until rx_clear(),
 * rx_reset() or rx_free(). */
typedef struct rx_req {
    char method[16];
    char *path;    /* as sent: percent-encoding is kept */
    char *headers; /* "name: value\n" lines, names lowercased */
    char *body;    /* NUL-terminated (the body may hold NULs: see body_len) */
    size_t body_len;
    double at;       /* CLOCK_MONOTONIC s (it_mono()) when the whole request was in */
    unsigned status; /* the answer it was given; RX_DROP when none */
} rx_req;

/* A scripted answer. Rules are tried in the order they were added; the
 * first one that still has uses left and whose marker (if any) is in the
 * body answers the request. Requests no rule takes get 200 "ok" after the
 * receiver's delay (rx_set_delay()). */
typedef struct rx_rule {
    int n;                   /* requests it answers; -1: every one */
    unsigned status;         /* e.g. 500, 429, 400; RX_DROP drops the connection */
    const char *marker;      /* NULL: any request; else only bodies containing it */
    const char *body;        /* answer text; NULL: "scripted" (at most 255 bytes) */
    const char *retry_after; /* Retry-After value; NULL: none */
    int delay_ms;            /* waits this long before answering (or dropping) */
} rx_rule;

typedef struct rx_receiver rx_receiver;

/* A stopped receiver with no requests and no script; NULL when out of
 * memory. Free with rx_free(). */
rx_receiver *rx_new(void);

/* Stops the receiver if it runs and frees it with its records. */
void rx_free(rx_receiver *rx);

/* Starts listening on 127.0.0.1:port (0: a free port, then rx_port() tells
 * which). Returns 0, or -1 when it runs already or the port cannot be
 * bound (nothing changed then). Records and script are kept across a stop
 * and a start. */
int rx_start(rx_receiver *rx, int port);

/* Starts serving HTTPS on 127.0.0.1:port (0: a free port) with the
 * certificate chain cert_pem and the private key key_pem, both PEM text
 * (copied). Everything else works as with rx_start(). Returns 0, or -1 when
 * it runs already, the port cannot be bound, libmicrohttpd has no TLS or
 * refuses the pair (nothing changed then). */
int rx_start_tls(rx_receiver *rx, int port, const char *cert_pem, const char *key_pem);

/* Starts again on the port it had (the outage is over), with HTTPS and the
 * same certificate when the last successful start was rx_start_tls().
 * Returns as rx_start(). */
int rx_restart(rx_receiver *rx);

/* Stops listening: new connections are refused, open ones are closed once
 * their request is answered (a delayed answer is waited for). Does nothing
 * when it is not running. */
void rx_stop(rx_receiver *rx);

/* Makes a self-signed certificate for name, valid for a day (from a minute
 * ago), with a fresh EC P-256 key: CN = name and a subjectAltName IP:name
 * when name is an IPv4 or IPv6 address, else DNS:name; basicConstraints
 * CA:TRUE, so that the certificate is its own CA bundle. On success returns
 * 0 and sets *cert_pem and *key_pem (PKCS#8) to NUL-terminated PEM text the
 * caller frees with free(); on error returns -1 with both set to NULL. */
int rx_make_cert(const char *name, char **cert_pem, char **key_pem);

/* The port it listens on (or last listened on); 0 before the first start. */
int rx_port(const rx_receiver *rx);

/* Adds a scripted answer (strings are copied). Returns 0, or -1 when
 * RX_MAX_RULES are in use. */
int rx_script(rx_receiver *rx, const rx_rule *rule);

/* Shorthand: the next n requests get status (body and retry_after may be
 * NULL). Returns as rx_script(). */
int rx_fail(rx_receiver *rx, int n, unsigned status, const char *body, const char *retry_after);

/* Shorthand: n requests (-1: all) whose body holds marker get status.
 * Returns as rx_script(). */
int rx_fail_marker(rx_receiver *rx, const char *marker, int n, unsigned status, const char *body);

/* Delays every answer that no rule gives (a slow target) by ms. */
void rx_set_delay(rx_receiver *rx, int ms);

/* Forgets the script and the delay: from now on every request gets 200. */
void rx_unscript(rx_receiver *rx);

/* Forgets the recorded requests (pointers from rx_req_at() die). */
void rx_clear(rx_receiver *rx);

/* rx_unscript() and rx_clear(). */
void rx_reset(rx_receiver *rx);

/* How many requests were recorded. */
size_t rx_count(rx_receiver *rx);

/* The most requests that were being answered at once (recorded, answer not
 * yet queued: a delay holds them) since the start or rx_clear(). */
int rx_max_in_flight(rx_receiver *rx);

/* Request i in arrival order; NULL when there is none. */
const rx_req *rx_req_at(rx_receiver *rx, size_t i);

/* How many recorded requests hold needle in their body (NULL: any) and,
 * when ok_only, were answered 2xx. */
size_t rx_count_matching(rx_receiver *rx, const char *needle, bool ok_only);

/* Waits up to secs until at least n requests were recorded; true when they
 * were. */
bool rx_wait(rx_receiver *rx, size_t n, double secs);

/* Waits up to secs until rx_count_matching(needle, ok_only) >= n. */
bool rx_wait_matching(rx_receiver *rx, const char *needle, bool ok_only, size_t n, double secs);

/* The value of header name (lowercase) of r, copied into buf; NULL when the
 * request has no such header. */
const char *rx_header(const rx_req *r, const char *name, char *buf, size_t cap);

#endif
