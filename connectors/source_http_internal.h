/*
 * connectors/source_http_internal.h — what the files of the HTTP source
 * share: the server and request structs, and response helpers. Not a public
 * interface (see source_http.h).
 */
#ifndef SL_SOURCE_HTTP_INTERNAL_H
#define SL_SOURCE_HTTP_INTERNAL_H

#include "connectors/source_http.h"
#include "core/buf.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SL_HTTP_STATUS_MAX 600

typedef struct sl_http_req sl_http_req;

struct sl_http {
    sl_http_options opts;
    sl_sets *sets;
    sl_databus *bus;
    struct MHD_Daemon *d;
    uint16_t port;
    _Atomic bool stopping;
    _Atomic int active;          /* requests not yet completed */
    _Atomic int conns;           /* open connections */
    _Atomic uint64_t body_bytes; /* request bodies held in memory right now */
    _Atomic uint64_t status[SL_HTTP_STATUS_MAX];
    _Atomic uint64_t rejected[16]; /* per sl_event_status (source_http_ingest.c) */
    sl_http_hooks hooks;
    /* Suspended long-polls, woken by appends or their deadline. */
    pthread_mutex_t poll_lock;
    pthread_cond_t poll_cond;
    sl_http_req *polls;
    pthread_t timer;
    bool timer_started;
};

struct sl_http_req {
    sl_http *h;
    struct MHD_Connection *conn;
    bool post;
    sl_buf body;
    bool too_big;
    bool overloaded;      /* the server-wide body memory cap was reached */
    bool close;           /* close the connection after the answer */
    int64_t start_ns;     /* when the headers were complete */
    _Atomic int refs;     /* MHD's, plus one while the Databus holds it */
    pthread_mutex_t lock; /* orders suspend before resume */
    bool suspended;
    bool ready;      /* a waited-for event happened; answer on the next call */
    int wait_status; /* result of a durable wait */
    sl_buf resp;     /* response prepared before a durable wait */
    int resp_status;
    /* Told the outcome of a durable wait, from the Databus's thread, before
     * the request is resumed (sl__http_publish_json()). */
    void (*published)(void *ctx, int status);
    void *published_ctx;
    /* long-poll state */
    sl_http_req *next_poll, **prev_poll;
    sl_set *poll_set;
    int32_t poll_part;
    int64_t poll_pos;
    int64_t poll_deadline_ns;
};

/* Queues a response with body (taken over, even on failure) and status. */
enum MHD_Result sl__http_reply(sl_http_req *r, unsigned status, sl_buf *body,
                               const char *content_type, unsigned retry_after);

/* Queues {"error":code,"message":msg} with status. */
enum MHD_Result sl__http_error(sl_http_req *r, unsigned status, const char *code, const char *fmt,
                               ...) __attribute__((format(printf, 4, 5)));

/* POST /v1/sets/{set}/events (source_http_ingest.c). */
enum MHD_Result sl__http_ingest(sl_http_req *r, const char *set_name);

/* The outcome of sl__http_publish_json(): 0 when the event is stored (for a
 * durable set: synced), else the SL_E… code (not stored, or for a failed
 * sync: unknown). Called exactly once, possibly on the Databus's thread. */
typedef void sl__http_published_fn(void *ctx, int status);

/* Publishes one structured-mode CloudEvent json[0..len) (borrowed) into
 * set_name through ingest's path: the set looked up (or auto-created) as
 * ingest does, the event parsed, validated (the validate hook), encoded and
 * published, waiting for the sync of a durable set with the request
 * suspended. Answers the request: 200 {"id","set","partition","offset"}
 * once stored; 400/413 with the event's status name (InvalidEvent,
 * SchemaViolation, TooLarge, …) when the event is refused; ingest's
 * whole-request errors (404 NoSuchSet, 503 Backpressure, 500 NotConfirmed,
 * …) otherwise. done (may be NULL) is called exactly once with the outcome,
 * before the answer is queued. */
enum MHD_Result sl__http_publish_json(sl_http_req *r, const char *set_name, const char *json,
                                      size_t len, sl__http_published_fn *done, void *done_ctx);

/* POST /v1/webhooks/{name} (source_http_webhook.c). */
enum MHD_Result sl__http_webhook(sl_http_req *r, const char *name);

/* GET /v1/sets/{set}/events (source_http_read.c). */
enum MHD_Result sl__http_read(sl_http_req *r, const char *set_name);

/* GET /v1/sets, /v1/sets/{set}, /metrics (source_http_read.c). */
enum MHD_Result sl__http_list_sets(sl_http_req *r);
enum MHD_Result sl__http_show_set(sl_http_req *r, const char *set_name);
enum MHD_Result sl__http_metrics(sl_http_req *r);

/* GET /v1/rules and POST /v1/patterns/test (source_http_rules.c). */
enum MHD_Result sl__http_rules(sl_http_req *r);

/* GET /v1/sources (source_http_rules.c). */
enum MHD_Result sl__http_sources(sl_http_req *r);
/* GET /v1/lanes, DELETE /v1/lanes/{lane} (source_http_rules.c). */
enum MHD_Result sl__http_lanes(sl_http_req *r);
enum MHD_Result sl__http_lane_drop(sl_http_req *r, const char *lane);
enum MHD_Result sl__http_pattern_test(sl_http_req *r);
/* source_http_rules.c: POST /v1/rules/{rule}/replay, GET …/replays */
enum MHD_Result sl__http_replay(sl_http_req *r, const char *rule);
enum MHD_Result sl__http_replays(sl_http_req *r, const char *rule);
/* source_http_redrive.c: POST /v1/sets/{dlq}/redrive */
enum MHD_Result sl__http_redrive(sl_http_req *r, const char *set_name);

/* Drops a request reference; frees it at zero. */
void sl__http_req_release(sl_http_req *r);

/* Suspends r as a long-poll on (set, part) until pos < end or deadline; the
 * caller holds nothing. Returns false when data arrived meanwhile (answer
 * now instead). */
bool sl__http_poll_wait(sl_http_req *r, sl_set *set, int32_t part, int64_t pos,
                        int64_t deadline_ns);

#endif
