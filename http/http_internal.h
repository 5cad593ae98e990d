/*
 * http/http_internal.h — what the files of the HTTP API (http/) share:
 * the server and request structs, response helpers, and each file's
 * handlers (the routes[] table of http/http.c calls them). Not a public
 * interface (see http/http.h).
 */
#ifndef SL_HTTP_INTERNAL_H
#define SL_HTTP_INTERNAL_H

#include "http/http.h"
#include "core/bus/auth.h"
#include "core/bus/databus.h"
#include "core/bus/waits.h"
#include "core/base/buf.h"
#include "core/base/ratelimit.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SL_HTTP_STATUS_MAX 600
/* Connections accepted beyond max_connections, so that those get a 503
 * answer instead of a closed socket (http_auth.c, the accept policy). */
#define SL_HTTP_CONN_HEADROOM 256
/* Longest X-Request-Id taken from a client; longer ones are replaced. */
#define SL_HTTP_REQUEST_ID_MAX 64

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
    /* the part of body_bytes held by requests without an API key on a server
     * with keys (webhooks): at most a quarter of max_body_memory, so that
     * strangers cannot starve key holders (docs/security.md) */
    _Atomic uint64_t open_body_bytes;
    bool loopback; /* the listen address is loopback (Host/Origin checks without keys) */
    _Atomic uint64_t status[SL_HTTP_STATUS_MAX];
    _Atomic uint64_t rejected[16]; /* per sl_event_status (http_ingest.c) */
    sl_http_hooks hooks;
    /* security (http_auth.c): keys (borrowed, NULL or empty: open),
     * the per-client publish rate, TLS material read at start */
    const sl_auth *_Atomic auth; /* swapped by sl_http_set_auth() */
    sl_ratelimit *rl;
    char *tls_cert_pem, *tls_key_pem;
    /* open connections per client address (max_connections_per_ip) */
    pthread_mutex_t ip_lock;
    struct sl_http_ip *ips[1024];
    /* Where long-polls wait (core/bus/waits.h), borrowed from opts. */
    sl_waits *waits;
    bool stopped; /* sl_http_stop() ran: threads joined, the daemon gone */
};

/* A durable publish to a Kafka-backed set: the answer prepared with
 * blanks (SLOT_W bytes each) that the delivery reports fill
 * (http_ingest.c remote_answer()). */
#define SLOT_W 40
typedef struct sl_kafka_answer {
    sl_set *set;
    sl_databus_result *res; /* in input order */
    size_t n;
    size_t *slots; /* where each event's blank starts in resp */
    size_t *index; /* its index in the request */
    size_t nslots;
    size_t counts; /* the "accepted"/"failed" blanks (batches) */
    size_t accepted, failed;
    bool single;
    char why[256]; /* the failure, when nothing was stored */
} sl_kafka_answer;

void sl__http_kafka_answer_free(sl_kafka_answer *ka);

struct sl_http_req {
    sl_http *h;
    struct MHD_Connection *conn;
    bool post;
    sl_buf body;
    bool too_big;
    bool overloaded;  /* the server-wide body memory cap was reached */
    bool close;       /* close the connection after the answer */
    bool open_body;   /* no key on a server with keys: body counts in open_body_bytes */
    int64_t start_ns; /* when the headers were complete */
    /* Authorization (http_auth.c), decided with the headers: the
     * key used (NULL: none needed or none configured) and, for a refused
     * request, its answer, sent at once without reading the body. */
    const sl_auth_key *key;
    unsigned deny_status;
    char deny_code[32];
    char deny_msg[320];
    /* The request id: the client's valid X-Request-Id, else one made up;
     * echoed in X-Request-Id, put in JSON error bodies and log lines.
     * method and url are libmicrohttpd's (valid until the request ends). */
    char request_id[SL_HTTP_REQUEST_ID_MAX + 1];
    const char *method, *url;
    _Atomic int refs;     /* MHD's, plus one while the Databus holds it */
    pthread_mutex_t lock; /* orders suspend before resume */
    bool suspended;
    bool ready;      /* a waited-for event happened; answer on the next call */
    int wait_status; /* result of a durable wait */
    sl_buf resp;     /* response prepared before a durable wait */
    int resp_status;
    sl_kafka_answer *kafka; /* its blanks, for a Kafka-backed set; NULL otherwise */
    /* Answers a request resumed after a durable wait in place of the
     * ingest answer (the EventBridge API's PutEvents); NULL: ingest's. */
    enum MHD_Result (*resumed)(sl_http_req *r);
    bool aws; /* an EventBridge API call (http/aws.c): its own SigV4, no API key */
    /* Told the outcome of a durable wait, from the Databus's thread, before
     * the request is resumed (sl__http_publish_json()). */
    void (*published)(void *ctx, int status);
    void *published_ctx;
    /* long-poll state: where the read goes on, and when it gives up (0:
     * not a long-poll yet); the waiter while suspended */
    int64_t poll_pos;
    int64_t poll_deadline_ns;
    sl_wait wait;
};

/* Queues a response with body (taken over, even on failure) and status.
 * Every response carries X-Request-Id; a JSON error body ({"error":…}) gets
 * "request_id" added; 5xx answers are logged (every answer at debug). */
enum MHD_Result sl__http_reply(sl_http_req *r, unsigned status, sl_buf *body,
                               const char *content_type, unsigned retry_after);

/* sl__http_reply() with more headers: hdrs holds name, value, name, value,
 * …, NULL (may be NULL). */
enum MHD_Result sl__http_reply_hdrs(sl_http_req *r, unsigned status, sl_buf *body,
                                    const char *content_type, const char *const *hdrs);

/* Queues resp (a callback response: a body made while it is sent) with
 * status and the headers every answer carries; logs it like
 * sl__http_reply(). Drops the caller's reference to resp. */
enum MHD_Result sl__http_reply_stream(sl_http_req *r, unsigned status, struct MHD_Response *resp,
                                      const char *content_type);

/* Appends s as the inside of a JSON string, always valid JSON: quotes,
 * backslashes and control characters escaped, bytes that are not UTF-8 as
 * U+FFFD (http.c). */
void sl__http_put_json_text(sl_buf *b, const char *s);

/* Queues {"error":code,"message":msg,"request_id":id} with status. */
enum MHD_Result sl__http_error(sl_http_req *r, unsigned status, const char *code, const char *fmt,
                               ...) __attribute__((format(printf, 4, 5)));

/* GET /ui/… (http_console.c): the web console's files; rest is the path
 * after "/ui" ("" or "/…"). */
enum MHD_Result sl__http_ui(sl_http_req *r, const char *rest);

/* Admission of a request on its first call, from the headers alone and
 * before any body is read (http_auth.c): the connection limits
 * (503), the Host/Origin checks of an open loopback server (403), the API
 * key (401/403, fills r->key), and the key-free routes' method and webhook
 * name (405/404). A refused request is answered at once (true, with *ret)
 * and its connection closed, so its body is never read. */
bool sl__http_admit(sl_http_req *r, const char *method, const char *url, enum MHD_Result *ret);

/* libmicrohttpd's accept policy: refuses (closes at accept) a connection
 * from an address that already has max_connections_per_ip open, or past
 * the server-wide cap. */
enum MHD_Result sl__http_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* The per-client publish rate: admits n events (true), or answers 429
 * TooManyRequests with Retry-After (false, with *ret). Always true when no
 * rate is configured. */
bool sl__http_rate_admit(sl_http_req *r, size_t n, enum MHD_Result *ret);

/* The client r counts as for the publish rate and the sets it may create
 * on first use (server.rate, server.max_auto_sets_per_client): "key:NAME"
 * with an API key, else "ip:ADDRESS", an IPv6 address standing for its /64
 * ("ip:2001:db8::/64"). */
void sl__http_client_of(sl_http_req *r, char *out, size_t cap);

/* Connection accounting per client address (MHD's NOTIFY_CONNECTION):
 * counts c under its IP address, keeping the count's entry in
 * *socket_context; closed() uncounts it. Cheap when no limit is set (no
 * work at all). */
void sl__http_conn_opened(sl_http *h, struct MHD_Connection *c, void **socket_context);
void sl__http_conn_closed(sl_http *h, void **socket_context);

/* Whether method+url is an EventBridge API call (POST / or /eventbridge/
 * with X-Amz-Target: AWSEvents.*, the API on): http/aws.c. */
bool sl__http_aws_request(sl_http_req *r, const char *method, const char *url);

/* Answers an EventBridge API call, its body complete (http/aws.c). */
enum MHD_Result sl__http_aws(sl_http_req *r);

/* POST /v1/sets/{set}/events (http_ingest.c). */
enum MHD_Result sl__http_ingest(sl_http_req *r, const char *set_name);

/* The outcome of sl__http_publish_json(): 0 when the event is stored (for a
 * durable set: synced), else the SL_E… code (not stored, or for a failed
 * sync: unknown). Called exactly once, possibly on the Databus's thread. */
typedef void sl__http_published_fn(void *ctx, int status);

/* Publishes one structured-mode CloudEvent json[0..len) (borrowed) into
 * set_name through ingest's path: the set looked up as ingest does (a
 * missing one auto-created only once the event passed its checks), the
 * event parsed, validated (the validate hook), encoded and published,
 * waiting for the sync of a durable set with the request suspended. Answers
 * the request: 200 {"id","set","partition","offset","ack"} once stored;
 * 400/413/422 with the event's status name (InvalidEvent, TooLarge,
 * SchemaViolation, …) when the event is refused; ingest's whole-request
 * errors (404 NoSuchSet, 507 SetLimit, 503 Backpressure, 500 NotConfirmed,
 * …) otherwise. done (may be NULL) is called exactly once with the outcome,
 * before the answer is queued. */
enum MHD_Result sl__http_publish_json(sl_http_req *r, const char *set_name, const char *json,
                                      size_t len, sl__http_published_fn *done, void *done_ctx);

/* Whether r, a redrive into set `to`, may proceed: true, or false with a
 * 403 answered into *ret when r's key lacks publish on `to`
 * (http_auth.c). Always true without keys. */
bool sl__http_redrive_allowed(sl_http_req *r, const char *to, enum MHD_Result *ret);

/* POST /v1/webhooks/{name} (http_webhook.c). */
enum MHD_Result sl__http_webhook(sl_http_req *r, const char *name);

/* GET /v1/sets/{set}/events (http_read.c). */
enum MHD_Result sl__http_read(sl_http_req *r, const char *set_name);

/* GET /v1/sets, /v1/sets/{set}, /metrics (http_read.c). */
enum MHD_Result sl__http_list_sets(sl_http_req *r);
enum MHD_Result sl__http_show_set(sl_http_req *r, const char *set_name);
enum MHD_Result sl__http_metrics(sl_http_req *r);

/* GET /v1/rules (http_admin.c). */
enum MHD_Result sl__http_rules(sl_http_req *r);

/* GET /v1/sources (http_admin.c). */
enum MHD_Result sl__http_sources(sl_http_req *r);
/* GET /v1/schedules (http_admin.c). */
enum MHD_Result sl__http_schedules(sl_http_req *r);

enum MHD_Result sl__http_groups(sl_http_req *r);
/* GET /v1/lanes, DELETE /v1/lanes/{lane}, POST /v1/patterns/test (http_admin.c). */
enum MHD_Result sl__http_lanes(sl_http_req *r);
enum MHD_Result sl__http_lane_drop(sl_http_req *r, const char *lane);
enum MHD_Result sl__http_pattern_test(sl_http_req *r);
/* http_admin.c: POST /v1/rules/{rule}/replay, GET …/replays */
enum MHD_Result sl__http_replay(sl_http_req *r, const char *rule);
enum MHD_Result sl__http_replays(sl_http_req *r, const char *rule);
/* http_redrive.c: POST /v1/sets/{dlq}/redrive */
enum MHD_Result sl__http_redrive(sl_http_req *r, const char *set_name);

/* Drops a request reference; frees it at zero. */
void sl__http_req_release(sl_http_req *r);

/* For a worker that answered a suspended request: called with r->lock
 * held, after the answer is in r. Marks it ready, resumes the connection if
 * it is suspended, unlocks r->lock and drops the worker's reference (r may
 * be freed on return). */
void sl__http_req_answered(sl_http_req *r);

/* Suspends r as a long-poll on (set, part) until pos < end or deadline
 * (core/bus/waits.h), resumed with r->ready set; the caller holds nothing.
 * Returns false when data arrived meanwhile or the server is stopping
 * (answer now instead). */
bool sl__http_poll_wait(sl_http_req *r, sl_set *set, int32_t part, int64_t pos,
                        int64_t deadline_ns);

#endif
