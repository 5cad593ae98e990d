/*
 * kafka/kafka.h — the Kafka wire-protocol listener: event sets served as
 * Kafka topics, with sluice as the only broker (node 0), controller, leader of
 * every partition and group coordinator (docs/kafka-protocol.md).
 *
 * What it owns:
 *   kafka/kproto.c     primitive types, headers, API names
 *   kafka/klisten.c    the epoll thread(s): connections, framing, bounded
 *                      buffers, idle timeouts, in-order responses, zero-copy
 *                      file chunks (sendfile), SASL/PLAIN gate
 *   kafka/kapi.c       the API table (keys, versions, rights) and dispatch,
 *                      ApiVersions, SaslHandshake, SaslAuthenticate
 *   kafka/kmeta.c      Metadata, CreateTopics, DeleteTopics
 *   kafka/kproduce.c   Produce, InitProducerId, idempotent-producer state
 *   kafka/kfetch.c     Fetch (long-poll, lanes), ListOffsets
 *   kafka/kcoord.c     the group coordinator: FindCoordinator, Join/Sync/
 *                      Heartbeat/Leave, OffsetCommit/Fetch, Describe/ListGroups
 *   kafka/kidem.c      idempotent producers' sequence checks
 *   kafka/koffsets.c   committed offsets, GET /v1/groups
 *   kafka/ktls.c       TLS (server.tls_cert / tls_key)
 *   kafka/kafka.c      start/stop, the pieces' lifecycle, metrics
 *
 * Threads: the listener's I/O threads parse requests and run handlers; work
 * that has to wait (an acks=-1 Produce until its fsync, a Fetch until data or
 * max_wait_ms, a JoinGroup until the rebalance) is parked on its request and
 * resumed from the thread that completes it. Responses leave each connection
 * in request order, as the protocol requires.
 */
#ifndef SL_KAFKA_H
#define SL_KAFKA_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/bus/databus.h"
#include "core/bus/set.h"
#include "core/bus/waits.h"

#include <stdbool.h>
#include <stdint.h>

struct sl_event;
struct sl_auth;

/* What the server beyond the listener provides; every hook may be NULL. */
typedef struct sl_kafka_hooks {
    void *ctx;
    /* As sl_http_hooks.validate: the schema of the event's type and its
     * lane's admission; 0 or an sl_event_status with err. Called from the
     * listener threads for every CloudEvents record produced. */
    int (*validate)(void *ctx, const sl_set *set, const struct sl_event *ev, sl_error *err);
    /* Whether the set has a JSON Schema for events of type[0..len): a
     * Kafka client's plain record (type sluice.kafka.record) whose type has
     * none is admitted by its lane alone, without building its event. NULL:
     * every record's event is built and validated. */
    bool (*has_schema)(void *ctx, const sl_set *set, const char *type, size_t len);
    /* Whether a set may be deleted over DeleteTopics (a set the config
     * declares or that rules read may not): 0, or SL_EBUSY with err saying
     * who uses it. NULL: every set may be. */
    int (*may_delete)(void *ctx, const sl_set *set, sl_error *err);
} sl_kafka_hooks;

typedef struct sl_kafka_options {
    const char *host; /* listen address, e.g. "127.0.0.1" */
    uint16_t port;    /* 0 picks a free port (sl_kafka_port) */
    /* What Metadata tells clients to connect to; NULL/"" host: the listen
     * host, 0 port: the bound port. */
    const char *advertised_host;
    uint16_t advertised_port;
    const char *data_dir; /* DATA: DATA/kafka/ keeps producer ids and group offsets */
    /* API keys (core/bus/auth.h), borrowed, as for HTTP: with keys, every
     * connection must pass SASL/PLAIN (user = key name, password = token)
     * before any request but ApiVersions and the SASL ones. NULL or none:
     * no authentication. */
    const struct sl_auth *auth;
    /* PEM certificate (chain) and key files: connections speak TLS (clients
     * use security.protocol SSL or SASL_SSL). NULL: plain TCP. */
    const char *tls_cert, *tls_key;
    uint64_t max_request_bytes; /* larger frames close the connection; default 100 MiB */
    unsigned max_connections;   /* default 4096 */
    unsigned idle_timeout_s;    /* connections idle this long are closed; default 600 */
    unsigned threads;           /* I/O threads; default 2 */
    sl_waits *waits;            /* long-polls of Fetch (required), borrowed */
    const sl_kafka_hooks *hooks; /* copied; may be NULL */
} sl_kafka_options;

typedef struct sl_kafka sl_kafka;

/* Opens DATA/kafka (producer and group state: loaded here), binds and starts
 * the threads. sets, bus and waits must outlive the listener. Returns 0 with
 * *out, or an SL_E… code with err (the port is taken, the state is
 * unreadable …); nothing is left behind on error. */
int sl_kafka_start(const sl_kafka_options *opts, sl_sets *sets, sl_databus *bus, sl_kafka **out,
                   sl_error *err);

/* The port actually bound. */
uint16_t sl_kafka_port(const sl_kafka *k);

/* Another API key table (a reload), as sl_http_set_auth(): connections
 * already authenticated keep their key; the old table must live until
 * sl_kafka_stop() returned. */
void sl_kafka_set_auth(sl_kafka *k, const struct sl_auth *auth);

/* The body of GET /v1/groups: {"groups": [{"group", "state", "protocol",
 * "generation", "members": [{"member_id", "client_id", "host",
 * "assignment": [{"topic", "partitions": [..]}]}], "offsets": [{"topic",
 * "partition", "committed", "end", "lag"}]}]}. Returns 0 or SL_ENOMEM. */
int sl_kafka_groups_json(sl_kafka *k, sl_buf *out);

/* Appends the listener's /metrics families (HELP and TYPE each). */
int sl_kafka_metrics(sl_kafka *k, sl_buf *out);

/* Stops accepting, answers what is parked (Fetch long-polls at once,
 * durable Produces once the Databus completed them), closes every
 * connection and joins the threads (group offsets are saved at each
 * commit; producer state is saved by sl_kafka_free()). Call
 * before sl_databus_stop() returns its waiters and before sl_waits_stop().
 * NULL is ignored; a second call is harmless. */
void sl_kafka_stop(sl_kafka *k);

/* Stops if needed and frees. NULL is ignored. */
void sl_kafka_free(sl_kafka *k);

#endif
