/*
 * client/client_internal.h — what the files of libsluice share: the client
 * handle, the queued message, the hand-off between sending threads and the
 * I/O thread, and the small JSON scanner.
 *
 * Every name shared between files starts with sl_client__ (hidden in the
 * shared library by -fvisibility=hidden; in the static library the prefix
 * keeps them clear of an application's names). Nothing here includes the
 * server's core/ headers: the library is built from client/ alone.
 */
#ifndef SL_CLIENT_INTERNAL_H
#define SL_CLIENT_INTERNAL_H

#include "sluice.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_CLIENT_SET_MAX 128
#define SL_CLIENT_LANE_MAX 32
#define SL_CLIENT_ADDR_MAX 1024

/* Back-off between retries: doubles from the first to the cap. */
#define SL_CLIENT_BACKOFF_MIN_MS 50
#define SL_CLIENT_BACKOFF_MAX_MS 2000

/* One queued event. The transport's wire form (`line`, newline included) is
 * built by sl_client_send() so the I/O thread only concatenates. */
typedef struct sl_client_msg {
    struct sl_client_msg *next;          /* in one transport queue (msgq) */
    struct sl_client_msg *oprev, *onext; /* in the client's list of unfinished, by id */
    uint64_t id;
    size_t cost;     /* what it counts against queue_bytes */
    size_t line_len; /* bytes of line, the final '\n' included */
    char set[SL_CLIENT_SET_MAX + 1];
    char lane[SL_CLIENT_LANE_MAX + 1]; /* "" = base */
    char line[];
} sl_client_msg;

/* A FIFO of messages, linked through next. */
typedef struct sl_client_msgq {
    sl_client_msg *head, *tail;
    size_t n, bytes; /* messages, bytes of their lines */
} sl_client_msgq;

void sl_client__q_push(sl_client_msgq *q, sl_client_msg *m);
sl_client_msg *sl_client__q_pop(sl_client_msgq *q);
/* Moves all of from in front of q (from becomes empty): retried messages go
 * back before the newer ones to keep the order. */
void sl_client__q_prepend(sl_client_msgq *q, sl_client_msgq *from);
/* Moves all of from after q (from becomes empty). */
void sl_client__q_concat(sl_client_msgq *q, sl_client_msgq *from);

typedef enum sl_client_kind { SL_CLIENT_HTTP, SL_CLIENT_AGENT } sl_client_kind;

struct sl_client {
    /* Fixed after open. */
    sl_client_kind kind;
    char addr[SL_CLIENT_ADDR_MAX]; /* http(s) base URL without trailing '/', or socket path,
                                      or "HOST:PORT" for tcp */
    bool tcp;                      /* agent over TCP rather than a UNIX socket */
    sl_client_delivery_fn *on_delivery;
    void *opaque;
    size_t queue_bytes, batch_bytes;
    int linger_ms, timeout_ms;
    char lane[SL_CLIENT_LANE_MAX + 1]; /* default lane, "" = base */
    int wake_rd, wake_wr;              /* pipe waking the I/O thread */
    pthread_t thread;

    /* Shared, under lock. */
    pthread_mutex_t lock;
    pthread_cond_t cond;          /* signalled when messages finish */
    sl_client_msgq incoming;      /* sent, not yet taken by the I/O thread */
    sl_client_msg *ohead, *otail; /* every unfinished message, by id */
    uint64_t next_id;
    size_t queued;    /* cost of the unfinished messages */
    uint64_t *failed; /* ids that failed, not yet counted by a flush */
    size_t nfailed, capfailed;
    uint64_t failed_lost; /* failures not kept in failed (no memory) */
    int flushers;         /* threads in sl_client_flush() */
    bool wake_pending;    /* a byte is (about to be) in the pipe */
    bool closing;         /* sl_client_close() began: sends refused */
    bool stopping;        /* the I/O thread must fail everything and return */
};

/* What the I/O thread learns each time it takes the incoming messages. */
typedef struct sl_client_take {
    bool flushing; /* a flush waits: send without lingering */
    bool stopping;
} sl_client_take;

/* Moves every incoming message to the end of q and empties the wake pipe.
 * I/O thread only. */
void sl_client__take(sl_client *c, sl_client_msgq *q, sl_client_take *t);

/* Reports m's result (the callback), then forgets and frees it. status 0: ok;
 * error/message may be NULL (defaults from the status). I/O thread only. */
void sl_client__done(sl_client *c, sl_client_msg *m, int status, const char *error,
                     const char *message);

/* sl_client__done() of every message of q, which becomes empty. */
void sl_client__done_all(sl_client *c, sl_client_msgq *q, int status, const char *error,
                         const char *message);

/* CLOCK_MONOTONIC in milliseconds. */
int64_t sl_client__now_ms(void);

/* The next back-off after cur (0: the first). */
int sl_client__backoff(int cur);

/* When to retry after backoff_ms: now + backoff_ms ± 20 %. I/O thread only. */
int64_t sl_client__retry_at(int backoff_ms);

/* The I/O thread bodies of the transports: they run until c->stopping, then
 * fail every message they hold with SL_CLIENT_ESHUTDOWN and return. */
void sl_client__http_run(sl_client *c);
void sl_client__agent_run(sl_client *c);

/* The agent transport gives a connection up when lines await answers, all is
 * written, and nothing was read from or taken by the socket for
 * max(timeout_ms, this) ms. 60000; tests lower it (set it before opening the
 * client: the I/O thread reads it unlocked). */
extern int sl_client__agent_stall_min_ms;

/* ---- a small JSON scanner (client_json.c) -----------------------------------
 * Enough to check that an event is one object and to read the server's and
 * agent's answers; pointers into the caller's text, no allocation. */

/* Copies the n bytes of s into out (n bytes) when s is exactly one JSON object
 * (whitespace around allowed): brackets balanced and matched, strings closed,
 * no raw control character in a string. Line breaks outside strings become
 * spaces so the object fits on one NDJSON line. Returns 0, or -1 (out then
 * holds garbage). A structural check only: the server validates for real. */
int sl_client__json_copy_object(const char *s, size_t n, char *out);

/* The first byte at or after p that is not JSON whitespace (end if none). */
const char *sl_client__json_ws(const char *p, const char *end);

/* Reads the JSON string starting at p (its '"'), decoding escapes into out
 * (outlen bytes, truncated, always NUL-terminated; out may be NULL to skip).
 * Returns the byte after the closing quote, or NULL when malformed. */
const char *sl_client__json_str(const char *p, const char *end, char *out, size_t outlen);

/* Skips one JSON value at p (after whitespace). Returns the byte after it, or
 * NULL when malformed or nested more than 64 deep. */
const char *sl_client__json_skip(const char *p, const char *end);

#endif
