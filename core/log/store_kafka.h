/*
 * core/log/store_kafka.h — event set partitions stored on a Kafka topic
 * (ARCHITECTURE.md §10, docs/scale-out.md).
 *
 * One sl_kstore_topic per Kafka-backed set and router: an idempotent
 * librdkafka producer (enable.idempotence, acks=all, the murmur2_random
 * partitioner; linger, batch size and compression from the set), a reader
 * client, and the partitions' watermarks. Each partition is an sl_store of
 * the remote kind (core/log/store.h, version 2):
 *
 *   - append produces the batch's records (key = partition key, value = the
 *     CloudEvent JSON, header "lane" for a lane's events, the record's
 *     timestamp): the same bytes as a local log's record. The base it
 *     returns is a local sequence number; the delivery reports tell the
 *     offsets (offset_of) and call on_durable in order. An append that
 *     would pass max_inflight_bytes of records not reported yet produces
 *     nothing and returns SL_EFULL (the Databus keeps them and refuses new
 *     writes with 503 meanwhile: back-pressure, never a drop).
 *   - a record that fails for a durable set (ack = "durable": message
 *     timeout delivery_timeout_ms) has its failure as outcome, so that its
 *     publisher is told; for a buffer set (answered already) the producer
 *     retries without a time limit, and a record failed for good (e.g. a
 *     record too large for the broker) is produced again every second (up to
 *     max_inflight_bytes, counted, logged once per minute).
 *   - readers fetch from the partition at an offset (lane filter as the
 *     log's), return SL_EEOF when caught up, and on_data fires when records
 *     arrive for a reader that was caught up; reader_position is past the
 *     last record returned.
 *   - start and end offsets are the cached low and high watermarks
 *     (refreshed in the background, never a blocking call);
 *     offset_for_time asks the cluster (ListOffsets by timestamp).
 *   - retention is the topic's (retain does nothing); stat reports 0.
 *
 * Thread-safety: append from one thread at a time per partition (the
 * Databus writer); readers from any thread, each reader by one thread at a
 * time; the rest from anywhere. on_durable is called from the topic's one
 * poll thread only (never inside append), on_data from librdkafka's
 * threads; neither after the partition's store closed.
 */
#ifndef SL_STORE_KAFKA_H
#define SL_STORE_KAFKA_H

#include "core/base/kafka_admin.h"
#include "core/log/batch.h"
#include "core/log/store.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_kstore_options {
    const char *set;         /* the set's name, for messages and metrics */
    const char *topic;       /* its topic */
    int32_t partitions;      /* declared: the topic must have at least this many */
    int replication;         /* for a topic sluice creates; -1: the cluster's default */
    bool durable;            /* ack = "durable" (see above) */
    sl_codec compression;    /* -> compression.codec */
    uint32_t linger_ms;      /* -> linger.ms */
    uint32_t batch_bytes;    /* -> batch.size */
    uint64_t max_inflight_bytes; /* 0: 64 MiB */
    sl_store_durable_fn *on_durable;
    sl_store_data_fn *on_data;
    void *ctx; /* of both callbacks */
} sl_kstore_options;

typedef struct sl_kstore_topic sl_kstore_topic;

/* Makes sure the topic exists (sl_kafka_ensure_topic: created when
 * missing) with at least o->partitions partitions — fewer is SL_EINVAL with
 * "set S: topic T has N partitions, the set declares M" — and starts the
 * producer and reader client. Returns 0 with *out, or an SL_E… code with
 * err (nothing left running). */
int sl_kstore_open(const sl_kafka_cluster *cl, const sl_kstore_options *o, sl_kstore_topic **out,
                   sl_error *err);

/* Opens partition p (0 <= p < o->partitions) as a store of t; each holds a
 * reference on t, dropped by its sl_store_close(). Returns 0 or an SL_E…
 * code with err. */
int sl_kstore_partition(sl_kstore_topic *t, int32_t p, sl_store *st, sl_error *err);

/* Drops sl_kstore_open()'s reference: t is freed (its producer flushed for
 * at most delivery_timeout_ms, what is left reported lost in the log) when
 * the last partition store closes too. NULL is ignored. */
void sl_kstore_release(sl_kstore_topic *t);

/* The partitions the topic has on the cluster (>= the declared ones). */
int32_t sl_kstore_topic_partitions(const sl_kstore_topic *t);
const char *sl_kstore_topic_name(const sl_kstore_topic *t);

typedef struct sl_kstore_stats {
    uint64_t produced;       /* records handed to the producer */
    uint64_t delivered;      /* acknowledged by the cluster */
    uint64_t failed;         /* delivery reports with an error */
    uint64_t retried;        /* records produced again after a failure (buffer sets) */
    uint64_t inflight_bytes; /* produced, not reported yet */
    uint64_t fetched_records, fetched_bytes; /* returned by readers (key + value + headers) */
} sl_kstore_stats;

void sl_kstore_stats_get(const sl_kstore_topic *t, sl_kstore_stats *out);

/* The first offset whose timestamp is >= ts_ms from a ListOffsets answer:
 * answer is the offset the cluster gave (-1: none, as librdkafka's mock
 * always says), end the partition's high watermark. Split out so that the
 * rule is tested without a cluster that implements time lookups. */
int64_t sl_kstore_time_offset(int64_t answer, int64_t end);

/* The store table of this backend, for code that wants to recognise it. */
extern const sl_store_ops sl_store_kafka_ops;

#endif
