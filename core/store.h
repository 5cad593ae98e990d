/*
 * core/store.h — the storage interface behind an event set partition.
 *
 * An event set reaches its data only through this table, so that a later
 * backend (an external Kafka cluster: many stateless sluice routers over one
 * cluster, rule cursors as consumer groups) can replace the embedded log
 * without touching the Databus or the rule runner. The embedded backend is
 * core/log.h, opened with sl_store_open_log().
 *
 * Like every sluice vtable, the first field is the ABI version; a caller
 * reads a field only when the version says it exists.
 */
#ifndef SL_STORE_H
#define SL_STORE_H

#include "core/batch.h"
#include "core/err.h"
#include "core/log.h"

#include <stdint.h>

#define SL_STORE_ABI_VERSION 1

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
} sl_store_ops;

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

/* Closes the store (NULL ops: nothing to do). */
void sl_store_close(sl_store *st);

/* The embedded log's table, for code that wants to recognise it. */
extern const sl_store_ops sl_store_log_ops;

#endif
