/*
 * tests/integration/itest.h — harness shared by the integration tests: starts
 * the real `bin/sluice serve` as a child process, talks HTTP to it with
 * libcurl, and checks its JSON answers and the events it serves.
 *
 * Every test gets a temp dir and starts its own server on a free port (output
 * in DIR/server.log, printed when the test fails); the teardown kills it and
 * removes the dir. Helper threads never assert (cmocka cannot fail from
 * another thread): only the functions marked "never asserts" may be called
 * from them; the others fail the current test and belong to the main thread.
 */
#ifndef SL_ITEST_H
#define SL_ITEST_H

#include "testutil.h" /* cmocka, tu_tmpdir() */

#include "core/base/buf.h"

#include <curl/curl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IT_CT_CE "application/cloudevents+json"
#define IT_CT_BATCH "application/cloudevents-batch+json"
#define IT_CT_NDJSON "application/x-ndjson"
#define IT_MAX_ARGS 24 /* extra serve arguments, the final NULL included */

/* ---- the program ------------------------------------------------------------ */

/* Call first in main(): ignores SIGPIPE, finds bin/sluice ($SLUICE_BIN, else
 * three levels above this binary, else ./bin/sluice), reads SLUICE_SOAK, seeds
 * rand() from $ITEST_SEED or the clock (printed, prefixed with prog) and
 * initializes libcurl. Returns 0, or -1 after a message on stderr when
 * bin/sluice is not found (nothing to clean up then). */
int it_init(const char *prog);

/* Call last in main(), after the cmocka group: releases libcurl. */
void it_cleanup(void);

/* True when SLUICE_SOAK is set: the crash loops run longer. */
bool it_soak(void);

/* True when SLUICE_VALGRIND is set (make soak): every server the harness
 * starts runs under `valgrind --error-exitcode=1 --leak-check=full` with
 * tests/integration/valgrind.supp, writing DIR/valgrind-PID.log; the
 * teardown stops it with SIGTERM (so that the leak check runs) and fails
 * the test when any of those logs reports an error. */
bool it_valgrind(void);

/* How many times longer waits should be: 1, or under valgrind
 * $SLUICE_VALGRIND_SCALE (default 10). The harness's own waits (start-up,
 * stop, it_wait_*, HTTP timeouts, it_run) are scaled already; a test scales
 * only the waits it makes itself. Never asserts. */
double it_scale(void);

/* CLOCK_MONOTONIC in seconds. Never asserts. */
double it_mono(void);

/* Sleeps ms milliseconds, resuming after signals. Never asserts. */
void it_sleep_ms(long ms);

/* ---- HTTP with libcurl ------------------------------------------------------ */

/* One answer. Zero it (it_http() does) before use; release with it_resp_free(). */
typedef struct it_resp {
    long status;     /* 0 when the exchange failed (err says why) */
    sl_buf body;     /* NUL-terminated once finished */
    char ctype[128]; /* Content-Type */
    char retry_after[32];
    double secs; /* how long the exchange took */
    char err[CURL_ERROR_SIZE];
} it_resp;

/* One request; the strings are borrowed for the exchange only. */
typedef struct it_call {
    const char *method;      /* default: POST with a body, else GET */
    const char *path;        /* "/v1/…", sent as is (no dot-segment removal) */
    const char *ctype;       /* Content-Type; NULL sends none */
    const char *const *hdrs; /* more headers, NULL-terminated; may be NULL */
    const void *body;
    size_t len;
    long timeout_ms; /* default 30 s */
} it_call;

/* The body as a string ("" when there is none); points into r. Never asserts. */
const char *it_body(const it_resp *r);

/* Frees r's body (r itself belongs to the caller). Never asserts. */
void it_resp_free(it_resp *r);

/* Sets c up for one exchange of k with 127.0.0.1:port into *r, which it
 * zeroes (for curl multi handles). The caller runs c, then calls
 * it_http_finish() and frees *hl with curl_slist_free_all(). Never asserts. */
void it_http_prepare(CURL *c, int port, const it_call *k, it_resp *r, struct curl_slist **hl);

/* Completes *r after c ran with result rc: status (0 and err on failure) and
 * a NUL-terminated body. Never asserts. */
void it_http_finish(CURL *c, CURLcode rc, it_resp *r);

/* One exchange on c (NULL: a fresh connection, closed after). Never asserts,
 * so threads may use it. Returns 0 when an answer came, -1 otherwise
 * (r->err). Either way the caller frees *r with it_resp_free(). */
int it_http(CURL *c, int port, const it_call *k, it_resp *r);

/* GET path with a short timeout; the status, or 0 when nothing answered.
 * Never asserts. */
long it_status_of(int port, const char *path);

/* ---- the server process ----------------------------------------------------- */

/* One server and its temp dir; made by it_setup(), freed by it_teardown(). */
typedef struct it_server {
    char *dir; /* temp dir holding data/ and server.log */
    char data[PATH_MAX];
    char log[PATH_MAX];
    pid_t pid; /* 0 when not running */
    int port;
    const char *args[IT_MAX_ARGS]; /* extra serve arguments, NULL-terminated */
    bool passed;                   /* set by the test at its end; else the log is shown */
} it_server;

/* cmocka setup: *state becomes a fresh it_server (not started) with its own
 * temp dir. Always returns 0 (fails the test when the dir cannot be made). */
int it_setup(void **state);

/* cmocka teardown: kills the server, prints its log unless s->passed, removes
 * the temp dir and frees the it_server. Returns 0. */
int it_teardown(void **state);

/* Starts the server with extra serve arguments (string literals or strings
 * that outlive s; NULL-terminated) on a free port, and waits until /healthz
 * answers 200. Fails the test (after printing the log) when it does not. */
void it_srv_start(it_server *s, ...);

/* Starts the server again on s's data dir and arguments, on a new port;
 * fails the test like it_srv_start(). */
void it_srv_restart(it_server *s);

/* Sends sig, then reaps the server, waiting up to secs before SIGKILL.
 * Returns the wait status, or -1 when it had to be killed or was not
 * running. s->pid is 0 after. Never asserts. */
int it_srv_stop(it_server *s, int sig, double secs);

/* Whether a line of the server log contains text. Never asserts. */
bool it_log_contains(const it_server *s, const char *text);

/* How many lines of the server log contain text (0 when there is no log
 * yet). Never asserts. */
int it_log_count(const it_server *s, const char *text);

/* A free loopback port (bound to port 0, then released), or -1. Never
 * asserts. */
int it_free_port(void);

/* bin/sluice, as it_init() found it (an absolute path, valid until exit). */
const char *it_bin(void);

/* ---- configured servers (main thread only) ----------------------------------- */

/* The server logs this line once it is completely wired (rules woken by
 * appends, schemas checked). /healthz answers 200 a little earlier, so the
 * tests of rules wait for this line to test one thing at a time. */
#define IT_READY_LINE "listening on http" /* http:// or https:// */

/* Writes DIR/name (s's temp dir) into out, a buffer of PATH_MAX bytes. */
void it_path(char *out, const it_server *s, const char *name);

/* Writes the printf-formatted text to path, replacing the file: written to
 * PATH.tmp, then renamed, so that a server reloading it never reads half a
 * file. Fails the test when it cannot (PATH.tmp may be left behind then). */
void it_write_file(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* it_write_file() of DIR/sluice.lua; path (PATH_MAX bytes) gets its name,
 * for it_start_config(). */
void it_write_config(it_server *s, char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Starts the server with `-c cfg` (a string that outlives s) like
 * it_srv_start(), then waits up to secs until the log holds one more
 * IT_READY_LINE than before the start. Fails the test when it does not. */
void it_start_config(it_server *s, const char *cfg, double secs);

/* it_srv_restart() (same data dir and arguments, a new port), then waits up
 * to secs until the log holds one more IT_READY_LINE than before the
 * restart. Fails the test when it does not. */
void it_restart(it_server *s, double secs);

/* Runs bin/sluice with args (NULL-terminated, at most 15), $SLUICE_SERVER
 * unset, stdin from in_path (NULL: /dev/null). Its stdout goes to *out and
 * its stderr to *err, or both (interleaved as written) to *out when err is
 * NULL; the texts are NUL-terminated and the caller frees them with free()
 * (also on -1). The output passes through DIR/cli.out and DIR/cli.err.
 * Kills it after secs. Returns its exit status, or -1 when it did not exit
 * normally in time. Fails the test when it cannot be started. */
int it_run(const it_server *s, const char *in_path, char **out, char **err, const char *const *args,
           double secs);

/* POSTs the NDJSON in b (n events) to SET with Content-Type IT_CT_NDJSON
 * and the NULL-terminated hdrs (may be NULL); asserts that all n were
 * accepted (it_expect_results()) and returns the answer; caller frees with
 * json_decref(). */
json_t *it_post_all(it_server *s, const char *set, const char *const *hdrs, const sl_buf *b,
                    size_t n);

/* ---- GET /v1/rules (main thread only) ---------------------------------------- */

/* GET /v1/rules, parsed; fails the test unless it answers 200 with a
 * "rules" list. Caller frees with json_decref(). */
json_t *it_rules(it_server *s);

/* The entry of rule name in an it_rules() answer (borrowed from rules), or
 * NULL when it is not listed. Never asserts. */
json_t *it_rule_in(json_t *rules, const char *name);

/* The entry of rule name from a fresh it_rules(); fails the test like
 * it_rules() or when the rule is not listed. Caller frees with
 * json_decref(). */
json_t *it_rule(it_server *s, const char *name);

/* Counter key of a rule entry ("delivered", "lag", …); fails the test
 * (showing the entry) when it is not an integer. */
json_int_t it_rule_int(json_t *rule, const char *key);

/* The committed cursor of partition p of a rule entry; fails the test when
 * it has none. */
int64_t it_rule_cursor(json_t *rule, int p);

/* Fails the test with the printf-formatted message, a colon and the rule
 * entry as compact JSON. */
void it_fail_rule(json_t *rule, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Polls it_rule() every 20 ms until counter key of rule name is at least
 * want; after secs fails the test with the entry. */
void it_wait_rule_int(it_server *s, const char *name, const char *key, json_int_t want,
                      double secs);

/* Polls GET /v1/rules every 20 ms until every rule has lag 0 and nothing
 * waiting for a retry (retrying 0 where the entry has it), twice in a row:
 * everything posted before the call has been delivered or given up on.
 * After secs fails the test with the last answer. */
void it_wait_caught_up(it_server *s, double secs);

/* ---- requests with assertions (main thread only) ---------------------------- */

/* GET of the printf-formatted path; fails the test when nothing answered.
 * The caller frees the answer with it_resp_free(). */
it_resp it_get(it_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* POSTs len bytes of data (strlen when len is SIZE_MAX) to
 * /v1/sets/SET/events with Content-Type ctype (NULL: none) and the
 * NULL-terminated hdrs (may be NULL); fails the test when nothing answered.
 * The caller frees the answer with it_resp_free(). */
it_resp it_post(it_server *s, const char *set, const char *ctype, const char *const *hdrs,
                const char *data, size_t len);

/* The body parsed as JSON; fails the test when it is not. Caller frees with
 * json_decref(). */
json_t *it_parse_json(const it_resp *r);

/* Asserts an error answer: status, and a JSON body {"error":code,"message":…}
 * with a useful message (any code when code is NULL). */
void it_expect_error(const it_resp *r, long status, const char *code);

/* Asserts a publish answer {"accepted":A,"failed":F,"results":[…]}: one
 * result per entry in input order, each {partition, offset} or {error,
 * message, index = its position}. Returns the parsed answer; caller frees
 * with json_decref(). */
json_t *it_expect_results(const it_resp *r, size_t accepted, size_t failed);

/* Entry i of a publish answer's results (borrowed from answer; NULL when
 * there is none). */
json_t *it_result(json_t *answer, size_t i);

/* The partition and offset of entry i of a publish answer (0 when absent). */
int it_res_part(json_t *answer, size_t i);
int64_t it_res_off(json_t *answer, size_t i);

/* A structured event with this id, source "/itest" and type "itest"; extra
 * (may be NULL) is appended inside the object, e.g. ",\"subject\":\"x\"".
 * Caller frees with free(). */
char *it_event(const char *id, const char *extra);

/* Posts one structured event (ev is borrowed), asserts it was accepted, and
 * returns where it went in *part and *off. */
void it_post_one(it_server *s, const char *set, const char *ev, int *part, int64_t *off);

/* ---- reading events back ---------------------------------------------------- */

/* One event as served: its exact bytes, and what the checks look at. */
typedef struct it_rawev {
    char *text;     /* owned by the it_evs holding it */
    int64_t offset; /* sluiceoffset */
    int part;       /* sluicepartition */
    char id[128];
    char lane[40]; /* "" when none */
} it_rawev;

/* A list of served events; start from {0}, release with it_evs_free(). */
typedef struct it_evs {
    it_rawev *v;
    size_t n, cap;
    int64_t next; /* next_offset of the last page */
} it_evs;

/* Frees every event and the list, and zeroes *e (reusable after). Never
 * asserts. */
void it_evs_free(it_evs *e);

/* Adds the events of a GET answer {"events":[…],"next_offset":K} (len bytes
 * at b) to out, keeping each event's exact bytes, and sets out->next. Never
 * asserts; false on a bad shape (out may hold some events then: free it). */
bool it_parse_events(const char *b, size_t len, it_evs *out);

/* GET /v1/sets/SET/events?partition=P&QUERY (query may be ""); asserts a 200
 * of the right shape. Caller frees with it_evs_free(). */
it_evs it_read_events(it_server *s, const char *set, int part, const char *query);

/* Every event of a partition (lane: "*" for all), following next_offset;
 * asserts every page. Caller frees with it_evs_free(). */
it_evs it_read_all(it_server *s, const char *set, int part, const char *lane);

/* ---- the Kafka mock cluster (tests/tools/kafka_mock.c) ------------------------ */

/* A running build/rel/tools/kafka_mock, driven through its stdin. */
typedef struct it_kmock {
    pid_t pid;
    FILE *in, *out;
    char boot[512]; /* bootstrap.servers */
} it_kmock;

/* Starts the mock with args (NULL-terminated, e.g. "--brokers", "3",
 * "--topic", "t:2"); fails the test when it does not print its bootstrap
 * line. */
void it_kmock_start(it_kmock *m, const char *const *args);

/* Sends one command line ("down 1", "error 8 12 1", …); fails the test
 * unless the mock answers "ok". */
void it_kmock_cmd(it_kmock *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Stops the mock (end of stdin, SIGKILL after 5 s). Zeroes *m. */
void it_kmock_stop(it_kmock *m);

/* ---- acknowledged events (load writers record them, threads share them) ----- */

typedef struct it_ack {
    int part;
    int64_t offset;
    char id[48];
} it_ack;

/* Zero-initialise with a PTHREAD_MUTEX_INITIALIZER lock; the caller frees v. */
typedef struct it_acks {
    pthread_mutex_t lock;
    it_ack *v;
    size_t n, cap;
} it_acks;

/* Records that id was acknowledged at part/off (thread-safe). */
void it_acks_add(it_acks *a, int part, int64_t off, const char *id);

/* How many were recorded so far (thread-safe). */
size_t it_acks_count(it_acks *a);

/* The value of the Prometheus sample in text whose line starts with name
 * (labels included, e.g. "sluice_events_in_total{set=\"x\"}"), or -1. Never
 * asserts. */
double it_metric(const char *text, const char *name);

#endif
