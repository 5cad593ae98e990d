/*
 * core/bus/kgroup.h — the routers of a Kafka-backed set as one consumer
 * group, and the rules' cursors in a compacted topic (ARCHITECTURE.md §10,
 * docs/scale-out.md).
 *
 * sl_kgroup: one per Kafka-backed set that rules read, per router. It joins
 * the group PREFIX..SET (sluice.set.<set>) on the set's topic with an eager
 * assignor ("range,roundrobin": cooperative-sticky aborts on librdkafka
 * < 2.3, librdkafka #4312), the cluster's session timeout (heartbeats at a
 * third of it, at most 3 s) and no automatic commit, and only decides
 * ownership: it never reads records itself (the partitions it is given are
 * paused at once; the rule runner reads through the partition stores,
 * core/log/store_kafka.h; a record that arrives anyway is dropped and
 * counted, info.stray_records). Its thread polls the consumer, so every
 * callback runs there, the last revocation at sl_kgroup_stop() too; a
 * callback may block (the group waits for it, up to max.poll.interval.ms,
 * 300 s) but must not call sl_kgroup_stop():
 *
 *   - on_assign(parts): these partitions are this router's now (owns() is
 *     true before the call). committed[i] is the group's committed offset
 *     for parts[i] (-1: none, or it could not be fetched within 5 s: logged),
 *     fetched before the call, so the callee can start where the slowest
 *     rule was even without the cursor topic. Partitions the topic has
 *     beyond the set's are assigned to the router but never passed on.
 *   - on_revoke(parts, lost): they are not any more (owns() is false
 *     before the call). The callee returns once it stopped reading them and
 *     its deliveries of them finished or were abandoned, with commit[i] the
 *     offset to commit for parts[i] (the slowest rule's cursor; -1, the
 *     value it gets: nothing). Unless lost (the assignment was lost:
 *     another router may own them already), those are committed
 *     synchronously (waiting at most 5 s) before the rebalance goes on; a
 *     lost assignment, or a rebalance librdkafka reports as failed, commits
 *     nothing. Kafka accepts that commit from the generation that is
 *     ending; librdkafka's mock refuses every commit while the group
 *     rebalances, so on it only a leaving router's revocation commits.
 *   - committable(parts): asked every commit_interval_ms for the owned
 *     partitions' offsets (as on_revoke's commit), committed asynchronously
 *     and only for partitions still owned whose offset differs from the
 *     last one known committed (sluice checks ownership itself: librdkafka's
 *     mock does not). A failed one is tried again at the next interval.
 *
 * Errors of the cluster are logged (slog, component "kafka") at most once
 * per 10 s per kind; a fatal error once, as an error.
 *
 * sl_kcursors: the compacted topic PREFIX..cursors, one per router. Keys
 * are "SET/RULE/LANE/PARTITION" (LANE "" for the base lane), values the
 * next offset to deliver as decimal text (anything else is ignored, with a
 * log line; an empty value, a tombstone, removes the key). It is made with
 * one partition when missing (an existing one may have more: all are
 * read). It reads the whole topic from the beginning into a table and keeps
 * following it (every router writes there); put() produces asynchronously
 * (idempotent, acks=all) and changes the table at once. Each record names
 * its writer (header "sluice-writer": a UUID per instance and the put's
 * sequence), so that a key this instance put keeps its value until its own
 * latest record is read back, whatever older records come back first: the
 * table ends up with the topic's latest record per key.
 */
#ifndef SL_KGROUP_H
#define SL_KGROUP_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/base/kafka_admin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_kgroup sl_kgroup;

typedef struct sl_kgroup_options {
    const sl_kafka_cluster *cluster;
    const char *set;   /* for messages */
    const char *group; /* PREFIX..SET */
    const char *topic;
    int32_t partitions;     /* the set's (the topic may have more: they are ignored) */
    int commit_interval_ms; /* 0: 1000 */
    void (*on_assign)(void *ctx, const int32_t *parts, const int64_t *committed, size_t n);
    void (*on_revoke)(void *ctx, const int32_t *parts, size_t n, bool lost, int64_t *commit);
    void (*committable)(void *ctx, const int32_t *parts, size_t n, int64_t *commit);
    void *ctx;
} sl_kgroup_options;

/* Starts the consumer and its thread (joining the group happens there: the
 * first assignment comes seconds later). The options' strings are copied;
 * the callbacks and ctx must outlive the group. Returns 0 with *out, or
 * SL_EINVAL (a bad option or property) / SL_ENOMEM / SL_EIO with err. */
int sl_kgroup_start(const sl_kgroup_options *o, sl_kgroup **out, sl_error *err);

/* Leaves the group: on_revoke for what it owns (committed), then closes
 * and frees; no callback runs after it returns. NULL is ignored. */
void sl_kgroup_stop(sl_kgroup *g);

/* Whether partition p is this router's now (cheap, any thread). */
bool sl_kgroup_owns(const sl_kgroup *g, int32_t p);

typedef struct sl_kgroup_info {
    const char *group;
    int32_t generation;  /* as of the last assignment; -1 before the first */
    int members;         /* in the group as last described, every 5 s (-1: not known
                            yet, or the cluster cannot describe groups: the mock) */
    int32_t owned;       /* partitions this router owns */
    uint64_t rebalances; /* assignments since start */
    uint64_t commits, commit_failures;
    uint64_t stray_records; /* records the consumer got although paused (dropped) */
} sl_kgroup_info;

void sl_kgroup_info_get(sl_kgroup *g, sl_kgroup_info *out);

/* The group's committed offset of p as last committed or fetched by this
 * router (-1: none known; any thread). */
int64_t sl_kgroup_committed(sl_kgroup *g, int32_t p);

typedef struct sl_kcursors sl_kcursors;

/* Makes sure the cursor topic exists (compacted, one partition; created
 * when missing, sl_kafka_ensure_topic, waiting at most 10 s) and starts
 * following it. Returns 0 with *out, or an SL_E… code with err. */
int sl_kcursors_open(const sl_kafka_cluster *cl, const char *topic, sl_kcursors **out,
                     sl_error *err);

/* The latest offset stored under key. It first waits (up to wait_ms; 0:
 * not at all) until the table has read the topic up to its end as of this
 * call (the high watermarks, asked of the cluster by a thread of the
 * table's, so that wait_ms holds even when the cluster does not answer),
 * so that a router taking a partition over sees what the previous owner
 * wrote and flushed. Returns 0 with *offset, SL_ENOENT when the key has no
 * value, SL_ETIMEDOUT when the table could not catch up (then *offset is
 * what it has, or SL_ENOENT still wins when it has nothing). Any thread. */
int sl_kcursors_get(sl_kcursors *k, const char *key, int64_t wait_ms, int64_t *offset);

/* Stores offset under key (asynchronous produce; the table at once). Any
 * thread. Returns 0, SL_EINVAL (an empty key, one over 1024 bytes, or a
 * negative offset), or SL_EFULL (librdkafka's queue is full: try again
 * later) / SL_ENOMEM, the table then unchanged. */
int sl_kcursors_put(sl_kcursors *k, const char *key, int64_t offset);

/* Waits up to wait_ms until every put so far is acknowledged. Returns 0 or
 * SL_ETIMEDOUT / SL_EIO (a put failed since the last flush: the table has
 * its value, the cluster not) with err. */
int sl_kcursors_flush(sl_kcursors *k, int64_t wait_ms, sl_error *err);

/* Flushes (bounded) and closes. NULL is ignored. */
void sl_kcursors_close(sl_kcursors *k);

/* Writes the key of (set, rule, lane, partition) into buf. */
void sl_kcursors_key(char *buf, size_t cap, const char *set, const char *rule, const char *lane,
                     int32_t partition);

#endif
