/*
 * core/log/log.c — a partition's log: segment list, append and roll, sync,
 * retention, time lookup, and open-time recovery (see core/log/log.h).
 */
#include "core/log/log.h"
#include "core/base/lane_name.h"
#include "core/log/log_internal.h"
#include "core/base/clock.h"
#include "core/base/varint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void sl_log_config_default(sl_log_config *cfg)
{
    cfg->segment_bytes = 128ull << 20;
    cfg->segment_ms = 7ll * 24 * 3600 * 1000;
    cfg->index_interval_bytes = 4096;
    cfg->retention_ms = 7ll * 24 * 3600 * 1000;
    cfg->retention_bytes = -1;
}

static void notify(const sl_log_open_options *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void notify(const sl_log_open_options *o, const char *fmt, ...)
{
    if (!o || !o->notify)
        return;
    char msg[SL_ERROR_MAX * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->notify(o->notify_ctx, msg);
}

/* Index capacity for an active segment: one entry per interval plus slack. */
static size_t index_capacity(const sl_log_config *cfg)
{
    return (size_t)(cfg->segment_bytes / cfg->index_interval_bytes) + 2;
}

static int mkdirs(const char *dir)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int sl__log_list_bases(const char *dir, int64_t **out, size_t *n, sl_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return sl_error_errno(err, errno, "open directory %s", dir);
    int64_t *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        if (strlen(name) != SL_SEGMENT_NAME_LEN + 4 || strcmp(name + SL_SEGMENT_NAME_LEN, ".log"))
            continue;
        int64_t base = 0;
        int ok = 1;
        for (int i = 0; i < SL_SEGMENT_NAME_LEN; i++) {
            if (name[i] < '0' || name[i] > '9' || base > (INT64_MAX - 9) / 10) {
                ok = 0;
                break;
            }
            base = base * 10 + (name[i] - '0');
        }
        if (!ok)
            continue;
        if (cnt == cap && SL_GROW(v, cap, 16)) {
            free(v);
            closedir(d);
            return SL_ENOMEM;
        }
        v[cnt++] = base;
    }
    closedir(d);
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_i64);
    *out = v;
    *n = cnt;
    return 0;
}

static int segs_push(sl_log *log, sl_segment *s)
{
    if (log->n == log->cap && sl_grow(&log->segs, &log->cap, sizeof *log->segs, 16))
            return SL_ENOMEM;
    log->segs[log->n++] = s;
    return 0;
}

static void report_segment(const sl_log_open_options *o, const sl_segment *s,
                           const sl_segment_report *rep)
{
    if (rep->truncated_at != UINT64_MAX)
        notify(o, "truncated %" PRIu64 " bytes: %s", rep->truncated_bytes, rep->reason);
    if (rep->rebuilt_index)
        notify(o, "%s.index: rebuilt from the log", s->stem);
    if (rep->rebuilt_timeindex)
        notify(o, "%s.timeindex: rebuilt from the log", s->stem);
    if (rep->rebuilt_lanes)
        notify(o, "%s.lanes: rebuilt from the log", s->stem);
}

/* Deletes the files of segments bases[from..n). */
static void remove_segments(const char *dir, const int64_t *bases, size_t from, size_t n,
                            const sl_log_open_options *o)
{
    static const char *const exts[] = {".log", ".index", ".timeindex", ".lanes"};
    for (size_t i = from; i < n; i++) {
        char stem[4096], path[4200];
        sl_segment_stem(stem, sizeof stem, dir, bases[i]);
        for (size_t k = 0; k < sizeof exts / sizeof *exts; k++) {
            snprintf(path, sizeof path, "%s%s", stem, exts[k]);
            unlink(path);
        }
        notify(o, "%s.log: removed, it follows a truncated segment", stem);
    }
}

/* Opens every segment found on disk, oldest first; a segment cut short by
 * recovery ends the log (later ones would leave a hole of lost offsets). */
static int open_segments(sl_log *log, bool clean, const sl_log_open_options *o, sl_error *err)
{
    int64_t *bases;
    size_t n;
    int rc = sl__log_list_bases(log->dir, &bases, &n, err);
    if (rc)
        return rc;
    size_t cap = index_capacity(&log->cfg);
    uint32_t iv = log->cfg.index_interval_bytes;
    uint64_t mb = log->cfg.segment_bytes;
    for (size_t i = 0; i < n && !rc; i++) {
        bool last = i + 1 == n;
        /* After a crash, closed segments that may hold unsynced bytes (those
         * past the recovery point) could have lost any page, not just the
         * tail: check every batch of them. */
        bool unsynced = !clean && !last && bases[i + 1] > log->recovery_point;
        sl_segment_mode mode = (o && o->full_recovery) || unsynced ? SL_SEG_FULL
                               : !last                             ? SL_SEG_CLOSED
                               : clean                             ? SL_SEG_ACTIVE
                                                                   : SL_SEG_ACTIVE_DIRTY;
        sl_segment *s;
        sl_segment_report rep;
        rc = sl_segment_open(log->dir, bases[i], mode, cap, iv, mb, &s, &rep, err);
        if (rc)
            break;
        report_segment(o, s, &rep);
        if (log->n && sl_segment_next_offset(log->segs[log->n - 1]) > s->base &&
            sl_segment_size(s) == 0) {
            /* An empty file named inside an earlier segment's range holds no
             * offsets: remove it alone. */
            notify(o, "%s.log: removed, an empty segment inside the previous one", s->stem);
            s->deleted = true;
            sl_segment_unref(s);
            continue;
        }
        if (log->n && sl_segment_next_offset(log->segs[log->n - 1]) > s->base) {
            notify(o,
                   "%s.log: overlaps the previous segment; it and later segments are "
                   "dropped",
                   s->stem);
            s->deleted = true;
            sl_segment_unref(s);
            remove_segments(log->dir, bases, i + 1, n, o);
            break;
        }
        if ((rc = segs_push(log, s))) {
            sl_segment_unref(s);
            break;
        }
        if (rep.truncated_at != UINT64_MAX && !last) {
            remove_segments(log->dir, bases, i + 1, n, o);
            break;
        }
    }
    free(bases);
    if (rc)
        return rc;
    if (log->n) {
        /* The newest segment becomes active again; reopen it writable. */
        sl_segment *s = log->segs[log->n - 1];
        if (!s->active) {
            int64_t base = s->base;
            sl_segment_report rep;
            sl_segment_unref(s);
            log->n--;
            rc = sl_segment_open(log->dir, base, SL_SEG_ACTIVE, cap, iv, mb, &s, &rep, err);
            if (rc)
                return rc;
            report_segment(o, s, &rep);
            if ((rc = segs_push(log, s))) {
                sl_segment_unref(s);
                return rc;
            }
        }
        return 0;
    }
    sl_segment *s;
    if ((rc = sl_segment_create(log->dir, 0, cap, mb, &s, err)))
        return rc;
    if ((rc = segs_push(log, s)))
        sl_segment_unref(s);
    log->dir_dirty = true;
    return rc;
}

/* The recovery point file holds one 20-digit offset: every byte of every
 * segment below it was fdatasync'ed. It is written (not synced) only after
 * that sync, so a stale value is lower, never higher: safe. */
static int64_t read_recovery_point(const char *dir)
{
    char path[4200], buf[32] = {0};
    snprintf(path, sizeof path, "%s/.recovery-point", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    char *end;
    long long v = n > 0 ? strtoll(buf, &end, 10) : 0;
    return n > 0 && end != buf && v > 0 ? v : 0;
}

static void write_recovery_point(sl_log *log, int64_t rp)
{
    char path[4200], buf[32];
    snprintf(path, sizeof path, "%s/.recovery-point", log->dir);
    int len = snprintf(buf, sizeof buf, "%020lld\n", (long long)rp);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (pwrite(fd, buf, (size_t)len, 0) == len)
        log->recovery_point = rp;
    close(fd);
}

int sl_log_open(const char *dir, const sl_log_config *cfg, const sl_log_open_options *opts,
                sl_log **out, sl_error *err)
{
    if (!cfg->segment_bytes || cfg->segment_bytes > UINT32_MAX || !cfg->index_interval_bytes)
        return sl_error_set(err, SL_EINVAL,
                            "segment_bytes must be 1..4294967295 and "
                            "index_interval_bytes at least 1");
    struct stat st;
    if (stat(dir, &st) < 0) {
        if (errno != ENOENT || !opts || !opts->create)
            return sl_error_errno(err, errno, "partition directory %s", dir);
        if (mkdirs(dir) < 0)
            return sl_error_errno(err, errno, "create partition directory %s", dir);
    } else if (!S_ISDIR(st.st_mode)) {
        return sl_error_set(err, SL_EINVAL, "%s is not a directory", dir);
    }
    sl_log *log = calloc(1, sizeof *log);
    if (!log)
        return SL_ENOMEM;
    log->cfg = *cfg;
    log->lock_fd = log->dir_fd = -1;
    pthread_rwlock_init(&log->lock, NULL);
    pthread_mutex_init(&log->wlock, NULL);
    pthread_mutex_init(&log->sync_lock, NULL);
    int rc;
    char path[4200];
    if (!(log->dir = strdup(dir))) {
        rc = SL_ENOMEM;
        goto fail;
    }
    if ((log->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        rc = sl_error_errno(err, errno, "open directory %s", dir);
        goto fail;
    }
    snprintf(path, sizeof path, "%s/.lock", dir);
    if ((log->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        rc = sl_error_errno(err, errno, "open %s", path);
        goto fail;
    }
    if (flock(log->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        rc = errno == EWOULDBLOCK
                 ? sl_error_set(err, SL_EEXIST, "%s is in use by another process", dir)
                 : sl_error_errno(err, errno, "lock %s", path);
        goto fail;
    }
    snprintf(path, sizeof path, "%s/.clean", dir);
    bool clean = access(path, F_OK) == 0;
    if (clean && unlink(path) < 0) {
        rc = sl_error_errno(err, errno, "remove %s", path);
        goto fail;
    }
    log->recovery_point = read_recovery_point(dir);
    if ((rc = open_segments(log, clean, opts, err)))
        goto fail;
    /* Every closed segment is now checked and, if it was repaired, synced. */
    if (!clean || (opts && opts->full_recovery))
        write_recovery_point(log, log->segs[log->n - 1]->base);
    sl_segment *first = log->segs[0], *last = log->segs[log->n - 1];
    atomic_init(&log->start, first->base);
    atomic_init(&log->end, sl_segment_next_offset(last));
    *out = log;
    return 0;
fail:
    for (size_t i = 0; i < log->n; i++)
        sl_segment_unref(log->segs[i]);
    free(log->segs);
    if (log->lock_fd >= 0)
        close(log->lock_fd);
    if (log->dir_fd >= 0)
        close(log->dir_fd);
    pthread_rwlock_destroy(&log->lock);
    pthread_mutex_destroy(&log->wlock);
    pthread_mutex_destroy(&log->sync_lock);
    free(log->dir);
    free(log);
    return rc;
}

int64_t sl_log_start_offset(sl_log *log)
{
    return atomic_load_explicit(&log->start, memory_order_acquire);
}

int64_t sl_log_end_offset(sl_log *log)
{
    return atomic_load_explicit(&log->end, memory_order_acquire);
}

uint64_t sl_log_size_bytes(sl_log *log)
{
    uint64_t total = 0;
    pthread_rwlock_rdlock(&log->lock);
    for (size_t i = 0; i < log->n; i++)
        total += sl_segment_size(log->segs[i]);
    pthread_rwlock_unlock(&log->lock);
    return total;
}

size_t sl_log_segment_count(sl_log *log)
{
    pthread_rwlock_rdlock(&log->lock);
    size_t n = log->n;
    pthread_rwlock_unlock(&log->lock);
    return n;
}

/* First word of the summary a clean close leaves in .clean. */
#define CLEAN_MAGIC "sluice-clean-v1"

int sl_log_clean_summary(const char *dir, sl_log_summary *out, sl_error *err)
{
    char path[4200], text[512];
    snprintf(path, sizeof path, "%s/.clean", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_error_set(err, SL_ENOENT, "%s: no clean-close marker", dir);
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    sl_log_summary s;
    char magic[32], nl = 0;
    long long v[10];
    int got = sscanf(text, "%31s %lld %lld %lld %lld %lld %lld %lld %lld %lld%c", magic, &v[0],
                     &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &nl);
    if (got != 11 || nl != '\n' || strcmp(magic, CLEAN_MAGIC) != 0 || v[0] < 0 || v[1] < v[0] ||
        v[2] < 0 || v[3] < 1 || v[4] < 0 || v[6] < 0 || v[8] < v[0] || v[8] > v[1])
        return sl_error_set(err, SL_ENOENT, "%s: the clean-close marker holds no summary", dir);
    s.start = v[0];
    s.end = v[1];
    s.bytes = (uint64_t)v[2];
    s.segments = (uint64_t)v[3];
    s.first_bytes = (uint64_t)v[4];
    s.first_max_ts = v[5];
    s.active_bytes = (uint64_t)v[6];
    s.active_max_ts = v[7];
    s.active_base = v[8];
    /* The one check that costs no descriptor: the active segment, where
     * appends and damage happen, is still the size the close left. */
    struct stat st;
    sl_segment_stem(path, sizeof path - 8, dir, s.active_base);
    strcat(path, ".log");
    if (stat(path, &st) < 0 || (uint64_t)st.st_size != s.active_bytes)
        return sl_error_set(err, SL_ENOENT, "%s: changed since its clean close", path);
    *out = s;
    return 0;
}

void sl_log_summarize(sl_log *log, sl_log_summary *out)
{
    pthread_rwlock_rdlock(&log->lock);
    const sl_segment *first = log->segs[0], *active = log->segs[log->n - 1];
    out->bytes = 0;
    for (size_t i = 0; i < log->n; i++)
        out->bytes += sl_segment_size(log->segs[i]);
    out->segments = log->n;
    out->first_bytes = sl_segment_size(first);
    out->first_max_ts = atomic_load(&first->max_ts);
    out->active_bytes = sl_segment_size(active);
    out->active_max_ts = atomic_load(&active->max_ts);
    out->active_base = active->base;
    out->start = sl_log_start_offset(log);
    out->end = sl_log_end_offset(log);
    pthread_rwlock_unlock(&log->lock);
}

/* Mirrors the first step of sl_log_retain(): retention goes oldest first and
 * stops at the first segment it keeps, so the oldest (and the active one,
 * which an expired log rolls) decide whether it would do anything. */
bool sl_log_retain_due(const sl_log_config *c, const sl_log_summary *s, int64_t now_ms)
{
    bool ms = c->retention_ms >= 0;
    if (ms && s->active_bytes && s->active_max_ts < now_ms - c->retention_ms)
        return true;
    if (s->segments < 2)
        return false;
    if (ms && s->first_max_ts < now_ms - c->retention_ms)
        return true;
    return c->retention_bytes >= 0 && s->bytes > (uint64_t)c->retention_bytes &&
           s->bytes - s->first_bytes >= (uint64_t)c->retention_bytes;
}

sl_segment *sl__log_active(sl_log *log)
{
    return log->segs[log->n - 1];
}

/* Seals the active segment and starts a new one at the end offset. Called
 * with wlock held. */
static int roll(sl_log *log, sl_error *err)
{
    sl_segment *old = sl__log_active(log), *s;
    /* No fdatasync here: the old segment's bytes are synced by the next
     * sl_log_sync() (which covers every closed segment still unsynced), so
     * rolling costs no disk wait. */
    int rc = sl_segment_seal(old, false, err);
    if (rc)
        return rc;
    rc = sl_segment_create(log->dir, sl_log_end_offset(log), index_capacity(&log->cfg),
                           log->cfg.segment_bytes, &s, err);
    if (rc)
        return rc;
    pthread_rwlock_wrlock(&log->lock);
    rc = segs_push(log, s);
    pthread_rwlock_unlock(&log->lock);
    if (rc) {
        s->deleted = true;
        sl_segment_unref(s);
        return rc;
    }
    log->dir_dirty = true;
    return 0;
}

int sl_log_roll(sl_log *log, sl_error *err)
{
    pthread_mutex_lock(&log->wlock);
    int rc = sl_segment_size(sl__log_active(log)) ? roll(log, err) : 0;
    pthread_mutex_unlock(&log->wlock);
    return rc;
}

static bool needs_roll(sl_log *log, const sl_segment *s, size_t len, int64_t last_delta)
{
    uint64_t size = sl_segment_size(s);
    if (size == 0)
        return false;
    if (size + len > log->cfg.segment_bytes)
        return true;
    if (log->cfg.segment_ms > 0 && sl_clock_now_ms() - s->created_ms >= log->cfg.segment_ms)
        return true;
    if (sl_index_count(&s->oidx) + 1 >= s->oidx.max_entries)
        return true;
    return sl_log_end_offset(log) + last_delta - s->base > (int64_t)UINT32_MAX;
}

int sl_log_append(sl_log *log, sl_batch *b, int64_t *base_offset, sl_error *err)
{
    sl_batch_info in;
    int rc = sl_batch_header(b->data, b->len, &in, err);
    if (rc == SL_EPARTIAL || (!rc && sl_batch_size(&in) != b->len))
        rc = sl_error_set(err, SL_EINVAL, "batch length does not match its header");
    if (rc)
        return rc;
    if (!b->lane || !sl_lane_valid(b->lane, strlen(b->lane)))
        return sl_error_set(err, SL_EINVAL, "invalid lane");
    pthread_mutex_lock(&log->wlock);
    if (needs_roll(log, sl__log_active(log), b->len, in.last_offset_delta) &&
        (rc = roll(log, err))) {
        pthread_mutex_unlock(&log->wlock);
        return rc;
    }
    int64_t base = sl_log_end_offset(log);
    sl_be64_put(b->data + SL_BATCH_OFF_BASE_OFFSET, (uint64_t)base);
    rc = sl_segment_append(sl__log_active(log), b, log->cfg.index_interval_bytes, err);
    if (!rc) {
        atomic_store_explicit(&log->end, base + (int64_t)in.last_offset_delta + 1,
                              memory_order_release);
        *base_offset = base;
    }
    pthread_mutex_unlock(&log->wlock);
    return rc;
}

int sl_log_sync(sl_log *log, sl_error *err)
{
    pthread_mutex_lock(&log->sync_lock);
    /* The active segment, plus every closed one that rolled since the last
     * sync (they sit right before it: older ones were synced earlier). */
    pthread_rwlock_rdlock(&log->lock);
    size_t first = log->n - 1;
    while (first > 0 && log->segs[first - 1]->synced != sl_segment_size(log->segs[first - 1]))
        first--;
    size_t n = log->n - first;
    sl_segment *stack[8], **todo = n <= 8 ? stack : malloc(n * sizeof *todo);
    if (!todo) {
        pthread_rwlock_unlock(&log->lock);
        pthread_mutex_unlock(&log->sync_lock);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        todo[i] = log->segs[first + i];
        sl_segment_ref(todo[i]);
    }
    bool dir = atomic_exchange(&log->dir_dirty, false);
    pthread_rwlock_unlock(&log->lock);
    int rc = 0;
    for (size_t i = 0; i < n; i++) { /* oldest first */
        if (!rc)
            rc = sl_segment_sync(todo[i], err);
    }
    if (!rc && dir && fsync(log->dir_fd) < 0)
        rc = sl_error_errno(err, errno, "fsync directory %s", log->dir);
    if (rc && dir)
        log->dir_dirty = true;
    /* Closed segments became durable: move the recovery point to the base of
     * the active segment as it was when this sync started. */
    if (!rc && n > 1)
        write_recovery_point(log, todo[n - 1]->base);
    for (size_t i = 0; i < n; i++)
        sl_segment_unref(todo[i]);
    if (todo != stack)
        free(todo);
    pthread_mutex_unlock(&log->sync_lock);
    return rc;
}

int sl_log_retain(sl_log *log, int64_t now_ms, int *deleted, sl_error *err)
{
    int rc = 0, n_del = 0;
    pthread_mutex_lock(&log->wlock);
    const sl_log_config *c = &log->cfg;
    sl_segment *a = sl__log_active(log);
    /* An expired active segment is rolled so that it can go too. If the
     * roll fails (a full disk: a new segment cannot be created), the closed
     * segments that are due are deleted all the same: that frees the space. */
    if (c->retention_ms >= 0 && sl_segment_size(a) && a->max_ts < now_ms - c->retention_ms)
        rc = roll(log, err);
    uint64_t total = 0;
    pthread_rwlock_wrlock(&log->lock);
    for (size_t i = 0; i < log->n; i++)
        total += sl_segment_size(log->segs[i]);
    size_t drop = 0;
    while (drop + 1 < log->n) {
        sl_segment *s = log->segs[drop];
        uint64_t size = sl_segment_size(s);
        bool old = c->retention_ms >= 0 && s->max_ts < now_ms - c->retention_ms;
        bool big = c->retention_bytes >= 0 && total - size >= (uint64_t)c->retention_bytes &&
                   total > (uint64_t)c->retention_bytes;
        if (!old && !big)
            break;
        total -= size;
        drop++;
    }
    for (size_t i = 0; i < drop; i++) {
        log->segs[i]->deleted = true;
        sl_segment_unref(log->segs[i]);
    }
    if (drop) {
        memmove(log->segs, log->segs + drop, (log->n - drop) * sizeof *log->segs);
        log->n -= drop;
        atomic_store_explicit(&log->start, log->segs[0]->base, memory_order_release);
        log->dir_dirty = true;
    }
    n_del = (int)drop;
    pthread_rwlock_unlock(&log->lock);
    pthread_mutex_unlock(&log->wlock);
    if (deleted)
        *deleted = n_del;
    return rc;
}

sl_segment *sl__log_find(sl_log *log, int64_t offset, bool after)
{
    pthread_rwlock_rdlock(&log->lock);
    size_t lo = 0, hi = log->n;
    while (lo < hi) { /* first segment with base > offset */
        size_t mid = (lo + hi) / 2;
        if (log->segs[mid]->base <= offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    sl_segment *s = NULL;
    if (after)
        s = lo < log->n ? log->segs[lo] : NULL;
    else
        s = lo > 0 ? log->segs[lo - 1] : log->segs[0];
    if (s)
        sl_segment_ref(s);
    pthread_rwlock_unlock(&log->lock);
    return s;
}

int sl_log_offset_for_time(sl_log *log, int64_t ts, int64_t *offset, sl_error *err)
{
    int64_t at = sl_log_start_offset(log);
    for (sl_segment *s = sl__log_find(log, at, false); s;) {
        if (s->max_ts >= ts) {
            sl_segment_cursor c;
            sl_batch_reader br;
            sl_segment_cursor_init_seg(&c, s, sl_segment_seek_time(s, ts), sl_segment_size(s),
                                       64 << 10);
            sl_batch_reader_init(&br);
            int rc;
            const uint8_t *p;
            sl_batch_info in;
            while (!(rc = sl_segment_cursor_next(&c, &p, &in, 1, err))) {
                if (in.max_ts < ts)
                    continue;
                sl_record rec;
                rc = sl_batch_reader_open(&br, p, sl_batch_size(&in), err);
                while (!rc && !(rc = sl_batch_reader_next(&br, &rec, err)))
                    if (rec.timestamp >= ts)
                        break;
                if (!rc) {
                    *offset = rec.offset;
                    break;
                }
                if (rc != SL_EEOF)
                    break;
            }
            sl_segment_cursor_free(&c);
            sl_batch_reader_free(&br);
            if (rc != SL_EEOF) {
                sl_segment_unref(s);
                return rc;
            }
        }
        sl_segment *next = sl__log_find(log, s->base, true);
        sl_segment_unref(s);
        s = next;
    }
    *offset = sl_log_end_offset(log);
    return 0;
}

void sl_log_close(sl_log *log)
{
    if (!log)
        return;
    sl_segment *a = sl__log_active(log);
    int rc = sl_log_sync(log, NULL);
    /* Trim the active indexes so the files hold exactly the used entries. */
    if (!rc)
        rc = sl_segment_seal(a, true, NULL);
    if (!rc)
        write_recovery_point(log, sl_log_end_offset(log));
    if (!rc && log->dir_dirty)
        rc = fsync(log->dir_fd) < 0 ? SL_EIO : 0;
    if (!rc) {
        char path[4200], text[512];
        snprintf(path, sizeof path, "%s/.clean", log->dir);
        sl_log_summary sum;
        sl_log_summarize(log, &sum);
        int len =
            snprintf(text, sizeof text,
                     "%s %" PRId64 " %" PRId64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64
                     " %" PRIu64 " %" PRId64 " %" PRId64 "\n",
                     CLEAN_MAGIC, sum.start, sum.end, sum.bytes, sum.segments, sum.first_bytes,
                     sum.first_max_ts, sum.active_bytes, sum.active_max_ts, sum.active_base);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            /* A short write leaves a marker that does not parse: the next
             * start then opens the log instead of trusting it (still clean). */
            if (write(fd, text, (size_t)len) != len && ftruncate(fd, 0) < 0)
                unlink(path);
            /* Not synced: everything it vouches for already is (above), so
             * losing the marker in a power cut costs only a full check of
             * the active segment at the next open, never data; and a
             * partition that parks often would pay two fsyncs per park. */
            close(fd);
        }
    }
    for (size_t i = 0; i < log->n; i++)
        sl_segment_unref(log->segs[i]);
    free(log->segs);
    close(log->lock_fd);
    close(log->dir_fd);
    pthread_rwlock_destroy(&log->lock);
    pthread_mutex_destroy(&log->wlock);
    pthread_mutex_destroy(&log->sync_lock);
    free(log->dir);
    free(log);
}
