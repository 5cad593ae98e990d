/*
 * core/bus/databus.h — the one write path for every source (ARCHITECTURE.md §5).
 *
 * Publishers hand over ready-to-store events; the Databus picks each event's
 * partition, assigns its offset at once (it is the only writer of every
 * partition, so offsets are known before the bytes reach the disk), and
 * queues it in a bounded per-partition buffer. One writer thread drains the
 * buffers in lane-homogeneous batches (linger_ms / batch_bytes of the set)
 * and appends them; it never waits for the disk. A syncer thread fdatasyncs
 * each partition with new data (durable sets at once, buffer sets every
 * buffer_sync_ms): one sync covers everything appended before it began and
 * completes every durable waiter it covers (group commit), while the writer
 * goes on appending the next batches.
 *
 * A full buffer refuses new events (SL_EFULL, which HTTP turns into 503 +
 * Retry-After). A failing disk: events already answered (ack = "buffer") are
 * never dropped: they stay queued and are retried, new ones are refused
 * meanwhile (SL_ENOSPC / SL_EIO). For ack = "durable", an append that fails
 * with a full disk drops the partition's unwritten events (their publishers
 * get done(ctx, SL_ENOSPC); some of a publish's events may already be
 * stored, so a retry is at-least-once) and the partition's next offset goes
 * back to the written end, to be handed out again; other disk errors keep
 * the events queued and retried. sl_databus_stop() drains everything it can
 * to disk and syncs.
 */
#ifndef SL_DATABUS_H
#define SL_DATABUS_H

#include "core/base/err.h"
#include "core/base/metrics.h"
#include "core/bus/set.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sl_databus sl_databus;

/* One event to publish. The bytes are copied during sl_databus_publish(). */
typedef struct sl_databus_event {
    const void *value; /* the stored CloudEvent JSON; a raw record's NULL: a null value (a Kafka tombstone) */
    size_t value_len;
    const void *key; /* partition key; NULL for round robin */
    size_t key_len;
    const char *lane; /* "" for base */
    int64_t ts_ms;
    /* A record that arrived as a Kafka record (the Kafka listener's
     * Produce) keeps exactly its own headers: with raw, the stored record
     * gets headers[0..headers_len) (header_count entries, Kafka's record
     * header encoding after the count) and nothing else; its lane header,
     * if any, is among them and lane must name the same lane. Without raw
     * (every other publisher: the value is a CloudEvent), the Databus writes
     * the headers every stored CloudEvent gets: content-type:
     * application/cloudevents+json (the CloudEvents Kafka binding's
     * structured mode), then lane for a non-base lane
     * (docs/storage-format.md). */
    bool raw;
    const void *headers;
    size_t headers_len;
    int32_t header_count;
    /* A whole record batch to store as it is (the Kafka listener's Produce,
     * sl_databus_publish_part() only): value[0..value_len) is a checked
     * batch (magic 2, CRC, the set's codec) of count records all of lane,
     * offset deltas 0..count-1, ts_ms its max timestamp. It takes count
     * offsets (its result is the first); the log writes its baseOffset and
     * nothing else of it changes. */
    bool batch;
    int32_t count;
} sl_databus_event;

typedef struct sl_databus_result {
    int32_t partition;
    /* The offset; for a Kafka-backed set (a remote store) a local sequence
     * number until sl_databus_offsets() translates it. */
    int64_t offset;
    int status; /* sl_databus_offsets(): 0 stored, else why not */
} sl_databus_result;

/* Completion of a durable publish: status 0 once every event of it is on
 * disk, or SL_ESHUTDOWN if the process stops first (events already queued are
 * still written by the drain). Called from the syncer thread: return fast. */
typedef void sl_databus_done_fn(void *ctx, int status);

/* Called by the writer thread after each append of a partition, with the
 * new end offset (long-polling readers wake up here) and the lane of what
 * was appended ("" base; NULL when the append held several lanes), so that
 * the consumers of other lanes need not wake. */
typedef void sl_databus_append_fn(void *ctx, sl_set *set, int32_t partition, int64_t end,
                                  const char *lane);

typedef struct sl_databus_options {
    sl_databus_append_fn *on_append;
    void *ctx;
    int64_t buffer_sync_ms; /* how often ack = "buffer" sets are fdatasync'ed; 0 = 1000 */
} sl_databus_options;

typedef struct sl_databus_stats {
    sl_histogram append; /* time of one sl_log_append */
    sl_histogram fsync;  /* time of one sl_log_sync */
    _Atomic uint64_t batches;
    _Atomic uint64_t syncs;
    _Atomic uint64_t full; /* publishes refused because a buffer was full */
} sl_databus_stats;

/* Starts the writer thread. Returns 0 or an SL_E… code with err. */
int sl_databus_start(const sl_databus_options *opts, sl_databus **out, sl_error *err);

/* Gives a set its buffers; call once per set before publishing to it (fits
 * sl_sets_options.on_open: pass the bus as ctx). */
int sl_databus_attach(sl_set *set, void *bus, sl_error *err);

/* Takes the set's buffers away from the bus (fits sl_sets_options.on_close):
 * waits until the writer is not holding its frames, answers its durable
 * waiters with SL_ESHUTDOWN and reports events still queued (they are
 * dropped: call sl_databus_stop() first to write everything). No-op for a
 * set that is not attached. */
void sl_databus_detach(sl_set *set, void *bus);

/* Partition for a key: a stable hash of key (murmur2, like Kafka's default
 * partitioner) modulo the set's partitions, or round robin for NULL. */
int32_t sl_databus_partition(sl_set *set, const void *key, size_t key_len);

/* Queues n events for set, filling results[i] with each event's partition
 * and offset. All or nothing: returns SL_EFULL (nothing queued) when any
 * partition's buffer cannot take its share, SL_ESHUTDOWN while stopping,
 * SL_ENOSPC/SL_EIO while the partition's disk is failing, with err.
 * SL_ETOOBIG when one partition's share is larger than its whole buffer (it
 * could never be accepted: send fewer events per request).
 * On success returns 0 when the publish is complete (ack = "buffer"), or 1
 * when done(ctx, status) will be called exactly once later (ack = "durable"). */
int sl_databus_publish(sl_databus *bus, sl_set *set, const sl_databus_event *evs, size_t n,
                       sl_databus_result *results, sl_databus_done_fn *done, void *ctx,
                       sl_error *err);

/* sl_databus_publish() with this publish's own durability: ack =
 * SL_ACK_DURABLE on an ack = "buffer" set makes it a durable publish
 * (returns 1; done is called once the fdatasync covering its events is
 * done, which the bus runs at once for it rather than at the next
 * buffer_sync_ms). A publish never gets less than its set's: SL_ACK_BUFFER
 * on a durable set is durable. sl_databus_publish() passes the set's ack.
 * On a buffer set, a full disk keeps such events queued and retried (as for
 * every buffer set) rather than dropping them: done waits for the disk. */
int sl_databus_publish_ack(sl_databus *bus, sl_set *set, sl_ack ack, const sl_databus_event *evs,
                           size_t n, sl_databus_result *results, sl_databus_done_fn *done,
                           void *ctx, sl_error *err);

/* sl_databus_publish_ack() for a caller that reports each event's outcome
 * itself: on a Kafka-backed set (remote store) done(ctx, 0) comes once every
 * event has its outcome, some perhaps failed; done then calls
 * sl_databus_offsets() on its results (still valid in done, not after).
 * On a local set it is sl_databus_publish_ack(). */
int sl_databus_publish_entries(sl_databus *bus, sl_set *set, sl_ack ack,
                               const sl_databus_event *evs, size_t n, sl_databus_result *results,
                               sl_databus_done_fn *done, void *ctx, sl_error *err);

/* sl_databus_publish_ack() into partition part of a local set, whatever
 * the events' keys say (a Kafka client picks its partition), with ack as
 * given even below the set's: SL_ACK_BUFFER on a durable set answers once
 * the events are queued (a Kafka client's acks=1, the leader's
 * acknowledgement, which never waits for a flush; the set's fsyncs still
 * follow). SL_ERANGE with err for a partition the set does not have,
 * SL_EINVAL for a Kafka-backed set. Otherwise as sl_databus_publish_ack(). */
int sl_databus_publish_part(sl_databus *bus, sl_set *set, int32_t part, sl_ack ack,
                            const sl_databus_event *evs, size_t n, sl_databus_result *results,
                            sl_databus_done_fn *done, void *ctx, sl_error *err);

/* Inside done of sl_databus_publish_entries(): turns results[0..n) of a
 * remote set into stored offsets, status 0, or the failure's code with
 * offset -1 and, in err, the first failure's message. No-op for a local
 * set. Returns the number of failed events. */
size_t sl_databus_offsets(sl_set *set, sl_databus_result *results, size_t n, sl_error *err);

/* A remote store's on_durable (fits sl_store_durable_fn with the set as
 * ctx, by way of the registry): every event of set's partition below
 * seq_end has its outcome; answers the durable publishes it completes. */
void sl_databus_remote_durable(sl_set *set, int32_t partition, int64_t seq_end);

/* The next offset the bus will assign in a partition: offsets below it and
 * at or above the log's end offset are accepted but not yet written. It can
 * move back (to the log's end) when a durable partition drops its unwritten
 * events on a full disk: never start reading past the log's end from it. */
int64_t sl_databus_next_offset(sl_set *set, int32_t partition);

/* Bytes buffered (queued or being written) for set, and the limit. */
void sl_databus_fill(sl_set *set, uint64_t *bytes, uint64_t *limit);

/* For a publisher refused with SL_EFULL that would rather wait than poll:
 * returns once the writer has freed room in some buffer (retry then; another
 * publisher may have taken it), after ms milliseconds, or at once while the
 * bus is stopping. While a publisher waits, no buffer lingers: the writer
 * writes what is queued at once. */
void sl_databus_wait_room(sl_databus *bus, int64_t ms);

const sl_databus_stats *sl_databus_get_stats(const sl_databus *bus);

/* Sets (or replaces) the append callback after start. */
void sl_databus_set_on_append(sl_databus *bus, sl_databus_append_fn *fn, void *ctx);

/* Refuses new publishes (SL_ESHUTDOWN), writes and syncs everything queued,
 * completes every waiter and stops the writer thread. The bus stays valid
 * for late publishers until sl_databus_free(). NULL is ignored. */
void sl_databus_stop(sl_databus *bus);

/* Stops the bus if needed and frees it. NULL is ignored. */
void sl_databus_free(sl_databus *bus);

#endif
