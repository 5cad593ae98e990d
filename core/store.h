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
    int (*reader_open)(void *impl, int64_t offset, const char *lane, void **reader,
                       sl_error *err);
    int (*reader_next)(void *reader, sl_record *rec, sl_error *err);
    void (*reader_close)(void *reader);
    /* First offset whose timestamp is >= ts_ms (the end offset if none). */
    int (*offset_for_time)(void *impl, int64_t ts_ms, int64_t *offset, sl_error *err);
    int64_t (*start_offset)(void *impl);
    int64_t (*end_offset)(void *impl);
    /* Applies retention as of now_ms. */
    int (*retain)(void *impl, int64_t now_ms, sl_error *err);
    /* Flushes and frees the backend. */
    void (*close)(void *impl);
} sl_store_ops;

/* A partition's store: the table and the backend's state. */
typedef struct sl_store {
    const sl_store_ops *ops;
    void *impl;
    void *data; /* for the owner */
} sl_store;

/* Opens (creating if needed) the embedded log in dir as a store. Returns 0
 * or an SL_E… code with err (nothing left open). */
int sl_store_open_log(sl_store *st, const char *dir, const sl_log_config *cfg, sl_error *err);

/* The embedded log's table, for code that wants to recognise it. */
extern const sl_store_ops sl_store_log_ops;

#endif
