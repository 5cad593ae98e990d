/*
 * core/bus/set.h — the registry of event sets.
 *
 * An event set is a named, partitioned log: DATA/sets/<name>/set.json holds
 * its configuration and DATA/sets/<name>/<partition>/ each partition's log
 * (core/log/log.h), reached only through the store interface (core/log/store.h) so
 * that another backend can take its place. Names are [A-Za-z0-9._-]{1,128} and never begin
 * with "." (so never "." or ".."): a name can never reach outside DATA/sets, nor become a hidden
 * directory that ls and globs miss. Sets are created on first use when the registry allows it
 * (auto-created: counted against max_auto_sets, overall and per client, and marked so in set.json
 * with "auto_created_by"), or declared (sl_sets_define(), sl_sets_declare(): never counted),
 * persist across restarts, and are never freed while the registry is open, so an sl_set pointer
 * stays valid until sl_sets_close(). A set whose creation fails midway leaves nothing behind.
 */
#ifndef SL_SET_H
#define SL_SET_H

#include "core/log/batch.h"
#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/log/log.h"
#include "core/log/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SL_SET_NAME_MAX 128
#define SL_SET_CLIENT_MAX 95 /* longest client an auto-created set is charged to */

typedef enum sl_ack {
    SL_ACK_BUFFER,  /* answer once the event is in the Databus buffer */
    SL_ACK_DURABLE, /* answer after the fdatasync that covers it */
} sl_ack;

/* Where a set's partitions live (docs/scale-out.md). */
typedef enum sl_backend {
    SL_BACKEND_LOG,   /* the embedded log in DATA/sets/<name> (the default) */
    SL_BACKEND_KAFKA, /* a topic on the cluster of sl_sets_options.kafka */
} sl_backend;

#define SL_SET_TOPIC_MAX 249 /* Kafka's longest topic name */

typedef struct sl_set_config {
    int32_t partitions; /* 1..1024 */
    sl_ack ack;
    sl_codec compression;
    sl_log_config log;        /* segment size and age, retention */
    uint32_t max_event_bytes; /* largest stored event (EventBridge's 1 MiB by default) */
    bool generate_ids;        /* give events without an id a UUIDv7 instead of refusing them */
    uint32_t linger_ms;       /* how long the Databus waits to fill a batch */
    uint32_t batch_bytes;     /* largest batch the Databus builds */
    uint64_t buffer_bytes;    /* per-partition buffer; beyond it, publishers get 503 */
    /* Kafka-backed sets only (never in set.json: such a set has no
     * directory; the config declares it at every start). */
    sl_backend backend;
    char topic[SL_SET_TOPIC_MAX + 1]; /* "": topic_prefix .. name */
    int replication;                  /* for a topic sluice creates; -1: the cluster's default */
} sl_set_config;

/* 4 partitions, ack durable, no compression, log defaults, 1 MiB events,
 * no generated ids, linger 2 ms, 1 MiB batches, 8 MiB buffer per partition. */
void sl_set_config_default(sl_set_config *cfg);

/* True when a and b hold the same settings (padding aside). */
bool sl_set_config_equal(const sl_set_config *a, const sl_set_config *b);

typedef struct sl_set sl_set;

/* Per-set counters, updated with relaxed atomics; read by /metrics. */
typedef struct sl_set_stats {
    _Atomic uint64_t events_in;
    _Atomic uint64_t bytes_in;
} sl_set_stats;

struct sl_set {
    char name[SL_SET_NAME_MAX + 1];
    sl_set_config cfg;
    int32_t nparts;
    sl_store *parts; /* one store per partition (the embedded log today) */
    sl_set_stats stats;
    void *bus;   /* the Databus's per-set state (core/bus/databus.c) */
    bool opened; /* on_open accepted it: on_close is due */
    /* The client an auto-created set is charged to ("key:NAME", "ip:ADDR",
     * "" for none); auto_created false for a declared set. Written under
     * the registry's creation lock. */
    bool auto_created;
    char auto_client[SL_SET_CLIENT_MAX + 1];
    /* Kafka-backed (cfg.backend == SL_BACKEND_KAFKA): its topic's stores and
     * the topic's name on the cluster; NULL for a local set. */
    struct sl_kstore_topic *ktopic;
    struct sl_sets *reg; /* its registry (Kafka-backed sets' callbacks) */
    _Atomic bool deleted; /* sl_sets_delete() took it away: refuse every use */
};

/* True for a set whose partitions are on a Kafka cluster. */
static inline bool sl_set_remote(const sl_set *s)
{
    return s->ktopic != NULL;
}

typedef struct sl_sets sl_sets;

/* 1 when name is a valid set name: 1-128 of A-Z a-z 0-9 . _ -, not beginning with ".". */
int sl_set_name_valid(const char *name);

typedef struct sl_sets_options {
    const char *data_dir;
    sl_set_config defaults; /* what new sets get */
    bool auto_create;       /* sl_sets_get(…, create = true) may create sets */
    /* Auto-created sets at most (0: no cap), and of those at most
     * max_auto_sets_per_client charged to one client (0: no per-client cap).
     * Declared sets do not count. */
    size_t max_auto_sets, max_auto_sets_per_client;
    /* Called once for every set opened or created, before anyone can use it
     * (the Databus attaches its per-set state here); non-zero refuses the set. */
    int (*on_open)(sl_set *set, void *ctx, sl_error *err);
    /* Called before a set that on_open accepted is freed (the Databus
     * detaches here). May be NULL. */
    void (*on_close)(sl_set *set, void *ctx);
    void *ctx;
    sl_log_notify_fn *notify; /* recovery notices of the partition logs */
    void *notify_ctx;
    /* Most partitions kept open at once; the least recently used idle one
     * parks beyond it (core/log/store.h). 0: sl_sets_default_max_open(). */
    size_t max_open_partitions;
    /* The cluster of Kafka-backed sets (server { kafka = … }); NULL: none
     * may be defined. Must outlive the registry. */
    const struct sl_kafka_cluster *kafka;
    /* Records arrived on a Kafka-backed set's partition for a reader that
     * was caught up (written by any router): the rule runner's wake-up, as
     * the Databus's on_append is for local sets. From a librdkafka thread;
     * may be NULL. */
    void (*on_remote_data)(sl_set *set, int32_t partition, void *ctx);
    void *remote_ctx;
} sl_sets_options;

/* Descriptors a partition is counted for when sizing the default limit: 6
 * with one segment, one more per closed segment, plus room for connections. */
#define SL_SETS_FDS_PER_PARTITION 16

/* The default max_open_partitions: the soft RLIMIT_NOFILE / 16, at least 16. */
size_t sl_sets_default_max_open(void);

/* Opens DATA/sets (creating it) and every set found there, holding DATA/.lock
 * (flock) until sl_sets_close(): a second registry on the same data directory
 * fails with SL_EEXIST. Returns 0 or an SL_E… code with err; nothing is left
 * open on error. */
int sl_sets_open(const sl_sets_options *opts, sl_sets **out, sl_error *err);

/* Finds set name; with create, auto-creates it with the defaults when
 * missing and auto_create allows it, charged to no client (see
 * sl_sets_create_auto()). Returns 0 with *out, SL_EINVAL for a bad name,
 * SL_ENOENT for a missing set that may not be created, SL_ELIMIT over
 * max_auto_sets, or another SL_E… code with err. */
int sl_sets_get(sl_sets *sets, const char *name, bool create, sl_set **out, sl_error *err);

/* Finds set name, or auto-creates it with the defaults charged to client
 * (NULL or "": none; only the overall cap applies). Callers create only for
 * a request holding an event about to be stored (parsed with
 * sl_sets_defaults() first). Returns 0 with *out; SL_EINVAL for a bad name;
 * SL_ENOENT when auto_create is off; SL_ELIMIT with err naming the limit
 * when max_auto_sets, or client's max_auto_sets_per_client, sets were
 * auto-created already; another SL_E… code with err (nothing is left on
 * disk then). */
int sl_sets_create_auto(sl_sets *sets, const char *name, const char *client, sl_set **out,
                        sl_error *err);

/* Finds set name, or creates it with the defaults as a declared set (a set
 * the config names: never counted against max_auto_sets, whatever
 * auto_create says). Returns like sl_sets_get(). */
int sl_sets_declare(sl_sets *sets, const char *name, sl_set **out, sl_error *err);

/* What a set created now would get (the registry's defaults). */
const sl_set_config *sl_sets_defaults(const sl_sets *sets);

/* Whether missing sets may be auto-created at all (auto_create). */
bool sl_sets_auto_creates(const sl_sets *sets);

/* Auto-created sets right now. */
size_t sl_sets_auto_count(sl_sets *sets);

/* A Kafka-backed set (cfg->backend == SL_BACKEND_KAFKA) is never on disk:
 * sl_sets_define() opens its topic (created when missing, refused when it
 * has fewer partitions than declared: core/log/store_kafka.h) at every
 * start; the name of a local set cannot be given to it (SL_EEXIST: migrate
 * instead, docs/scale-out.md). Its durable publishes complete with the
 * delivery reports (sl_databus_remote_durable()). */

/* Creates a set with an explicit configuration (for config files); an
 * existing set keeps its partitions, the rest of cfg replaces its settings
 * (and its set.json), and an auto-created one becomes declared. Call it before events flow to the
 * set: the Databus reads the settings without a lock. Returns 0 or an SL_E… code with err. */
int sl_sets_define(sl_sets *sets, const char *name, const sl_set_config *cfg, sl_set **out,
                   sl_error *err);

/* Deletes set name and its data (DeleteTopics, DELETE /v1/sets/{set}):
 * takes it out of the registry (a name look-up no longer finds it and the
 * name may be created again), lets the set's on_close run (the Databus
 * answers what was queued for it with SL_ENOENT and refuses new publishes
 * to it), closes its stores and removes DATA/sets/<name>. The sl_set
 * itself stays allocated until sl_sets_close(), so a pointer held by a
 * reader or publisher stays valid: such users see SL_ENOENT from then on
 * (set->deleted). Returns 0, SL_ENOENT for no such set, SL_EINVAL for a
 * Kafka-backed set (its topic is the cluster's), or SL_EIO with err when
 * the directory could not be removed (the set is gone from the registry
 * all the same). */
int sl_sets_delete(sl_sets *sets, const char *name, sl_error *err);

/* Calls fn for every set, in name order, under the registry's read lock. */
void sl_sets_each(sl_sets *sets, void (*fn)(sl_set *set, void *ctx), void *ctx);

/* Number of sets. */
size_t sl_sets_count(sl_sets *sets);

/* Applies retention to every partition of every set. */
void sl_sets_retain(sl_sets *sets, int64_t now_ms);

/* Parks every partition unused for idle_ms (that no reader or writer holds).
 * Returns how many it parked. */
size_t sl_sets_park_idle(sl_sets *sets, int64_t idle_ms);

/* Descriptor and partition figures for /metrics and logs. */
typedef struct sl_sets_fd_info {
    uint64_t open_fds; /* entries of /proc/self/fd; 0 where there is none */
    uint64_t fd_limit; /* soft RLIMIT_NOFILE; 0 when unlimited */
    uint64_t sets;
    uint64_t partitions_open, partitions_parked, max_open_partitions;
    uint64_t parks, reopens;
} sl_sets_fd_info;

void sl_sets_fd_stats(sl_sets *sets, sl_sets_fd_info *out);

/* Appends the /metrics families of the registry (descriptors, limit, sets,
 * open and parked partitions), each with its HELP and TYPE. Returns 0 or
 * SL_ENOMEM. */
int sl_sets_metrics(sl_sets *sets, sl_buf *out);

/* Closes every log (cleanly) and frees the registry. NULL is ignored. */
void sl_sets_close(sl_sets *sets);

#endif
