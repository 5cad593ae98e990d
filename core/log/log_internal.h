/*
 * core/log/log_internal.h — the sl_log struct and helpers shared by the files of
 * the log module (log.c, log_reader.c, log_verify.c); not a public interface.
 */
#ifndef SL_LOG_INTERNAL_H
#define SL_LOG_INTERNAL_H

#include "core/log/log.h"
#include "core/log/segment.h"

#include <pthread.h>
#include <stdatomic.h>

struct sl_log {
    char *dir;
    sl_log_config cfg;
    int dir_fd;
    int lock_fd;           /* holds the flock for the process's lifetime */
    pthread_rwlock_t lock; /* guards segs/n/cap (readers look segments up under it) */
    pthread_mutex_t wlock; /* serialises appenders, roll and retention */
    pthread_mutex_t sync_lock;
    sl_segment **segs; /* oldest first; the last is active */
    size_t n, cap;
    _Atomic int64_t start;
    _Atomic int64_t end;
    int64_t recovery_point; /* every offset below it is known synced (.recovery-point) */
    _Atomic bool dir_dirty; /* segment files created or removed since the last sync */
};

/* The active segment; call with lock or wlock held. */
sl_segment *sl__log_active(sl_log *log);

/* With after == false: a new reference to the segment holding offset (the
 * first segment when offset is below it). With after == true: the first
 * segment whose base is above offset, or NULL. */
sl_segment *sl__log_find(sl_log *log, int64_t offset, bool after);

/* Base offsets of the *.log files in dir, sorted; caller frees *out. */
int sl__log_list_bases(const char *dir, int64_t **out, size_t *n, sl_error *err);

#endif
