/*
 * http/http.h — the HTTP API (libmicrohttpd): CloudEvents ingest into the
 * Databus, reading events back with long-polling, set listings, health and
 * metrics, the rules, lanes, sources, replays, pattern tests, redrive,
 * webhooks and the web console. The routes are the routes[] table of
 * http/http.c; the reference is docs/http-api.md.
 *
 * Threads: libmicrohttpd's epoll thread pool runs the handlers; a request
 * that has to wait (a durable publish until its fsync, a long-poll until data
 * arrives) is suspended, not parked on a thread, and resumed by the Databus
 * writer or the long-poll registry (core/bus/waits.h: an append, or its
 * timer thread). Thousands of waiting consumers therefore
 * cost memory, not threads.
 */
#ifndef SL_HTTP_H
#define SL_HTTP_H

#include "connectors/source_webhook.h"
#include "core/bus/databus.h"
#include "core/base/err.h"
#include "core/bus/set.h"
#include "core/bus/waits.h"

#include <stdint.h>

struct sl_event;

/* What the server beyond the HTTP layer provides (the config and the rule
 * runner, which can change on reload). Every hook may be NULL. */
typedef struct sl_http_hooks {
    void *ctx;
    /* Checks an event bound for set against its type's schema and admits
     * its lane (core/bus/lanes.h): 0, or the sl_event_status that refuses it
     * (SL_EVENT_SCHEMA_VIOLATION, SL_EVENT_UNKNOWN_LANE,
     * SL_EVENT_LANE_DROPPED) with err saying why. Called by ingest threads
     * for every event. */
    int (*validate)(void *ctx, const sl_set *set, const struct sl_event *ev, sl_error *err);
    /* The body of GET /v1/rules. */
    int (*rules_json)(void *ctx, sl_buf *out);
    /* Extra /metrics lines. */
    int (*metrics)(void *ctx, sl_buf *out);
    /* POST /v1/rules/{rule}/replay: starts re-delivering the events of rule
     * stored in [from_ms, to_ms) to its targets; out gets the replay as JSON.
     * SL_ENOENT for an unknown rule, SL_EINVAL for a bad window (err says
     * why). */
    int (*replay)(void *ctx, const char *rule, int64_t from_ms, int64_t to_ms, sl_buf *out,
                  sl_error *err);
    /* GET /v1/rules/{rule}/replays (rule NULL: every rule's). */
    int (*replays_json)(void *ctx, const char *rule, sl_buf *out);
    /* POST /v1/sets/{dlq}/redrive: moves up to max (0: all) events of a
     * dead-letter set to set `to`; out gets the counts as JSON. SL_ENOENT
     * for an unknown set, SL_EINVAL with err for a bad request. */
    int (*redrive)(void *ctx, const char *dlq, const char *to, uint64_t max, sl_buf *out,
                   sl_error *err);
    /* POST /v1/webhooks/{name}: verifies and maps the request into res
     * (connectors/source_webhook.h). SL_ENOENT when no source.webhook has
     * that name. */
    int (*webhook)(void *ctx, const char *name, sl_webhook_header_fn *get, void *hctx,
                   const char *body, size_t len, sl_webhook_result *res);
    /* Whether a source.webhook is named name: asked with the headers of
     * POST /v1/webhooks/{name}, so that a request to no webhook is answered
     * 404 before its body is read. NULL: every name may be one. */
    bool (*webhook_known)(void *ctx, const char *name);
    /* After a STORE: whether the event was stored (its delivery id is then
     * remembered for dedupe) or not. */
    void (*webhook_stored)(void *ctx, const char *name, const sl_webhook_result *res, bool stored);
    /* The body of GET /v1/sources. */
    int (*sources_json)(void *ctx, sl_buf *out);
    /* The Kafka listener's part (kafka/kafka.h; server/ wires it, http/
     * does not use kafka/), with its own ctx: the body of GET /v1/groups
     * (NULL: {"groups": []}) and more /metrics lines. */
    void *kafka_ctx;
    int (*groups_json)(void *kafka_ctx, sl_buf *out);
    int (*kafka_metrics)(void *kafka_ctx, sl_buf *out);
    /* The body of GET /v1/lanes. */
    int (*lanes_json)(void *ctx, sl_buf *out);
    /* DELETE /v1/lanes/{lane} (`sluice lane drop`): 0, SL_ENOENT for a lane
     * that is not known, SL_EINVAL for a bad name, with err. */
    int (*lane_drop)(void *ctx, const char *lane, sl_error *err);
    /* The body of GET /v1/schedules, with its own ctx (server/schedule.h's
     * scheduler; NULL: {"schedules": []}). */
    void *schedules_ctx;
    int (*schedules_json)(void *schedules_ctx, sl_buf *out);
    /* Whether set may be deleted (DeleteEventBus): 0, or SL_EBUSY with err
     * saying what uses it (a declared set, a rule reading it). NULL: any. */
    int (*may_delete)(void *ctx, const sl_set *set, sl_error *err);
} sl_http_hooks;

typedef struct sl_http_options {
    const char *host;           /* listen address, e.g. "127.0.0.1" */
    uint16_t port;              /* 0 picks a free port (see sl_http_port) */
    uint64_t max_request_bytes; /* larger bodies get 413; default 10 MiB */
    unsigned threads;           /* handler threads; default: number of CPUs */
    unsigned max_connections;   /* default 4096 */
    unsigned idle_timeout_s;    /* idle or slow connections are closed; default 30 */
    unsigned request_timeout_s; /* a body must arrive within this; default 60 */
    uint64_t max_body_memory;   /* all request bodies in memory at once; default 256 MiB */
    /* Security (docs/security.md). */
    const struct sl_auth *auth;        /* API keys (core/bus/auth.h), borrowed: must outlive the server;
                                        * NULL or none: every request is allowed */
    const char *tls_cert;              /* PEM certificate file: serve HTTPS (with tls_key) */
    const char *tls_key;               /* PEM private key file of tls_cert */
    unsigned max_connections_per_ip;   /* 0: unlimited */
    uint64_t max_batch;                /* events in one publish request; default 10000 (413) */
    double rate;                       /* events a second per client (key, or IP); 0: unlimited */
    double burst;                      /* bucket size; 0: rate */
    const struct sl_http_hooks *hooks; /* may be NULL; copied, in place before the port opens */
    /* Where long-polls wait (core/bus/waits.h; required), borrowed: the
     * server feeds it appends, and stops it (waking every long-poll) after
     * sl_http_quiesce() and before sl_http_stop(). */
    sl_waits *waits;
    /* The EventBridge API on POST / (http/aws.h), borrowed; NULL: off. */
    struct sl_aws *aws;
} sl_http_options;

typedef struct sl_http sl_http;

/* Starts listening. Returns 0 or an SL_E… code with err (e.g. the port is
 * taken). sets and bus must outlive the server. */
int sl_http_start(const sl_http_options *opts, sl_sets *sets, sl_databus *bus, sl_http **out,
                  sl_error *err);

/* Puts another API key table in force (a config reload); NULL opens the
 * API. Requests already past their check keep the key they were given: the
 * previous table must stay alive until sl_http_stop() has returned. */
void sl_http_set_auth(sl_http *h, const struct sl_auth *auth);

/* The port actually bound. */
uint16_t sl_http_port(const sl_http *h);

/* Stops accepting connections: new ones are closed at once, in-flight
 * requests finish. */
void sl_http_quiesce(sl_http *h);

/* Answers every waiting request and stops the threads: no request is served
 * from then on (long-polls are answered once opts.waits was stopped). Frees
 * nothing (the server stays valid: sl_http_port() and a second stop are
 * harmless); release it with sl_http_free(). NULL is ignored. */
void sl_http_stop(sl_http *h);

/* Stops the server if needed and frees it. NULL is ignored. */
void sl_http_free(sl_http *h);

#endif
