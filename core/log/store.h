/*
 * core/log/store.h — the storage interface behind an event set partition.
 *
 * An event set reaches its data only through this table, so that a later
 * backend (an external Kafka cluster: many stateless sluice routers over one
 * cluster, rule cursors as consumer groups) can replace the embedded log
 * without touching the Databus or the rule runner. The embedded backend is
 * core/log/log.h, opened with sl_store_open_log().
 *
 * Like every sluice vtable, the first field is the ABI version; a caller
 * reads a field only when the version says it exists.
 */
#ifndef SL_STORE_H
#define SL_STORE_H

#include "core/log/batch.h"
#include "core/base/err.h"
#include "core/log/log.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_STORE_ABI_VERSION 2

typedef struct sl_store_ops {
    uint32_t abi_version; /* SL_STORE_ABI_VERSION */
    const char *name;     /* "log", "kafka", … */

    /* Appends a finished batch; the backend assigns and returns its base
     * offset (see sl_log_append). */
    int (*append)(void *impl, sl_batch *b, int64_t *base_offset, sl_error *err);
    /* Makes everything appended so far durable. */
    int (*sync)(void *impl, sl_error *err);
    /* Record-by-record reading from offset; lane "" base, NULL every lane.
     * reader_next returns 0, SL_EEOF when caught up, or an error. */
    int (*reader_open)(void *impl, int64_t offset, const char *lane, void **reader, sl_error *err);
    int (*reader_next)(void *reader, sl_record *rec, sl_error *err);
    /* The offset the reader looks at next (past records it skipped). */
    int64_t (*reader_position)(void *reader);
    void (*reader_close)(void *reader);
    /* First offset whose timestamp is >= ts_ms (the end offset if none). */
    int (*offset_for_time)(void *impl, int64_t ts_ms, int64_t *offset, sl_error *err);
    int64_t (*start_offset)(void *impl);
    int64_t (*end_offset)(void *impl);
    /* Applies retention as of now_ms. */
    int (*retain)(void *impl, int64_t now_ms, sl_error *err);
    /* Bytes stored and storage units (segments for the log; 0 if none). */
    void (*stat)(void *impl, uint64_t *bytes, uint64_t *segments);
    /* Flushes and frees the backend. */
    void (*close)(void *impl);

    /* ---- version 2: remote backends (a Kafka topic's partition) ----------
     *
     * A remote store assigns offsets itself, and later: append() returns a
     * local *sequence number* as the base (records are numbered on, one per
     * record, from next_seq()), sync() is never called, and the store tells
     * its owner through the on_durable callback it was opened with when
     * every record below a sequence number has its outcome (a delivery
     * report: stored with an offset, or failed). Local backends set remote
     * false and leave the rest NULL. This is the narrowest extension the
     * Databus needs: it keeps numbering, batching and waiting for publishers;
     * only the meaning of "durable" and of an offset moves to the backend. */
    bool remote;
    /* The sequence number the next append gets (a local log: its end offset). */
    int64_t (*next_seq)(void *impl);
    /* 0 when every record of [from, to) is stored; otherwise the first
     * failure's code with err (SL_EIO, SL_ETIMEDOUT, …). Only for sequence
     * numbers whose outcome is known and not released. */
    int (*outcome)(void *impl, int64_t from, int64_t to, sl_error *err);
    /* The offset record seq was stored at: 0 with *offset; the failure's code
     * when it was not stored; SL_ERANGE when released or not known yet. */
    int (*offset_of)(void *impl, int64_t seq, int64_t *offset, sl_error *err);
    /* The owner needs no outcome below seq any more. */
    void (*release)(void *impl, int64_t seq);
} sl_store_ops;

/* What a remote store calls (from its own thread) when every record below
 * seq_end has its outcome; partition is the store's. Must return fast. */
typedef void sl_store_durable_fn(void *ctx, int32_t partition, int64_t seq_end);
/* What a remote store calls (from its own thread) when records arrive for a
 * reader that was caught up (the local log's equivalent is the Databus's
 * on_append), so consumers need not poll. Must return fast. */
typedef void sl_store_data_fn(void *ctx, int32_t partition);

/* A partition's store: the table and the backend's state. */
typedef struct sl_store {
    const sl_store_ops *ops;
    void *impl;
    void *data; /* for the owner */
} sl_store;

/* Opens (creating if needed) the embedded log in dir as a store; opts as for
 * sl_log_open() (NULL: create, no notices). Returns 0 or an SL_E… code with
 * err (nothing left open). */
int sl_store_open_log(sl_store *st, const char *dir, const sl_log_config *cfg,
                      const sl_log_open_options *opts, sl_error *err);

/* Call-site shorthands for st->ops->fn(st->impl, …); same contracts. */
int sl_store_append(const sl_store *st, sl_batch *b, int64_t *base_offset, sl_error *err);
int sl_store_sync(const sl_store *st, sl_error *err);
int sl_store_reader_open(const sl_store *st, int64_t offset, const char *lane, void **reader,
                         sl_error *err);
int sl_store_reader_next(const sl_store *st, void *reader, sl_record *rec, sl_error *err);
int64_t sl_store_reader_position(const sl_store *st, void *reader);
void sl_store_reader_close(const sl_store *st, void *reader);
int sl_store_offset_for_time(const sl_store *st, int64_t ts_ms, int64_t *offset, sl_error *err);
int64_t sl_store_start_offset(const sl_store *st);
int64_t sl_store_end_offset(const sl_store *st);
int sl_store_retain(const sl_store *st, int64_t now_ms, sl_error *err);
void sl_store_stat(const sl_store *st, uint64_t *bytes, uint64_t *segments);

/* Remote stores (version 2): false for a local one. */
bool sl_store_remote(const sl_store *st);
int64_t sl_store_next_seq(const sl_store *st);
int sl_store_outcome(const sl_store *st, int64_t from, int64_t to, sl_error *err);
int sl_store_offset_of(const sl_store *st, int64_t seq, int64_t *offset, sl_error *err);
void sl_store_release(const sl_store *st, int64_t seq);

/* Closes the store (NULL ops: nothing to do). */
void sl_store_close(sl_store *st);

/* ---- parking: open files in proportion to activity ----------------------
 *
 * A pooled store (sl_store_open_pooled) is the embedded log behind a thin
 * layer that can *park* it: close it cleanly (sl_log_close: synced, indexes
 * trimmed, .clean written, descriptors, mappings and the partition's .lock
 * released) while keeping a summary (sl_log_summary) that answers start and
 * end offsets, sizes and retention decisions. The next use that needs the
 * data (an append, a read past the summary's end, a time lookup, retention
 * that is due) reopens it through the ordinary clean sl_log_open() path.
 *
 * Users that need the live log pin it for the call (append, sync, time
 * lookups) or, for a reader, while it has records to read: a reader that
 * caught up (SL_EEOF) lets go and reopens at its position when more arrives,
 * so an idle consumer does not keep its partition open. Pins are atomic
 * counters, with no lock on the append path; only unpinned partitions park.
 *
 * A pool holds every pooled store of a registry and keeps at most max_open
 * of them open, parking the least recently used unpinned one when a reopen
 * goes past it (pinned ones are never parked, so the limit can be passed
 * while more partitions than that are in use at once), and parks those idle
 * longer than a given time in sl_store_pool_sweep(). Thread-safe. */
typedef struct sl_store_pool sl_store_pool;

typedef struct sl_store_pool_stats {
    uint64_t stores;  /* pooled stores (open + parked) */
    uint64_t open;    /* of them open now */
    uint64_t parks;   /* parkings since the pool was made */
    uint64_t reopens; /* reopenings of parked stores since then */
} sl_store_pool_stats;

/* A pool keeping at most max_open (>= 1) stores open. Returns 0 or SL_ENOMEM. */
int sl_store_pool_new(size_t max_open, sl_store_pool **out);

/* Changes the limit; parks stores at once when more than that are open. */
void sl_store_pool_set_max(sl_store_pool *pool, size_t max_open);
size_t sl_store_pool_max(sl_store_pool *pool);

/* Parks every open unpinned store unused for idle_ms or longer. Returns how
 * many it parked. */
size_t sl_store_pool_sweep(sl_store_pool *pool, int64_t idle_ms);

void sl_store_pool_stats_get(sl_store_pool *pool, sl_store_pool_stats *out);

/* Frees the pool; every store in it must be closed first. NULL is ignored. */
void sl_store_pool_free(sl_store_pool *pool);

/* Opens (creating if opts say so) the embedded log in dir as a store of pool.
 * With parked, a log that was closed cleanly starts parked, from the summary
 * its close left (sl_log_clean_summary: no descriptor is opened, recovery
 * waits for the first use); otherwise it starts open, and may park the
 * pool's least recently used store. cfg is copied; opts (may be NULL:
 * create) serve the reopenings too, which never create. Returns 0 or an
 * SL_E… code with err (nothing left open). */
int sl_store_open_pooled(sl_store *st, const char *dir, const sl_log_config *cfg,
                         const sl_log_open_options *opts, bool parked, sl_store_pool *pool,
                         sl_error *err);

/* Parks a pooled store now. Returns 0 (parked, or already parked), SL_EDEFERRED
 * when it is pinned, SL_EINVAL for a store that is not pooled, or the error of
 * the sync before the close (the store stays open). */
int sl_store_park(const sl_store *st, sl_error *err);

/* The embedded log behind st (a pooled store is reopened when parked), for
 * tests and tools that reach under the interface; valid until the store parks
 * or closes. NULL for another backend or when the reopening failed. */
sl_log *sl_store_log(const sl_store *st);

/* sl_log_slice_get() on a local store (a parked pooled store is reopened
 * when the offset is inside the log, not at its end): the stored batches
 * holding offset and after, of lane ("" base, NULL every lane), up to
 * max_bytes (at least one batch), for sending them unchanged. Returns 0
 * (len 0 at the end), SL_ERANGE outside [start, end], SL_EINVAL for a
 * remote store, or the read's or reopening's error, with err. Release the
 * slice with sl_log_slice_release(). */
int sl_store_slice_get(const sl_store *st, int64_t offset, const char *lane, size_t max_bytes,
                       sl_log_slice *out, sl_error *err);

/* True when st is a pooled store that is parked now. */
bool sl_store_parked(const sl_store *st);

/* The embedded log's table, for code that wants to recognise it. */
extern const sl_store_ops sl_store_log_ops;

#endif
