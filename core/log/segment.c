/*
 * core/log/segment.c — one log segment: its .log file, the sparse offset and time
 * indexes, the lane sidecar, and the recovery that validates and repairs all
 * four when a segment is opened (format in core/log/segment.h).
 */
#include "core/log/segment.h"
#include "core/base/lane_name.h"
#include "core/base/clock.h"
#include "core/base/varint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CURSOR_FIRST_CHUNK (16u << 10)
#define CURSOR_MAX_CHUNK (1u << 20)

void sl_segment_cursor_init(sl_segment_cursor *c, int fd, uint64_t pos, uint64_t limit,
                            size_t max_chunk)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->pos = c->buf_pos = pos;
    c->limit = limit;
    c->max_chunk = max_chunk ? max_chunk : CURSOR_MAX_CHUNK;
    c->chunk = CURSOR_FIRST_CHUNK < c->max_chunk ? CURSOR_FIRST_CHUNK : c->max_chunk;
}

void sl_segment_cursor_init_seg(sl_segment_cursor *c, const sl_segment *s, uint64_t pos,
                                uint64_t limit, size_t max_chunk)
{
    sl_segment_cursor_init(c, s->fd, pos, limit, max_chunk);
    c->map = s->map;
    c->map_len = s->map ? s->map_len : 0;
}

void sl_segment_cursor_free(sl_segment_cursor *c)
{
    sl_buf_free(&c->buf);
}

/* Makes [c->pos, c->pos + want) available and returns a pointer to it: in
 * the mapping when it covers the range, else in the buffer, keeping bytes
 * already buffered and reading ahead one chunk (never past the limit).
 * Returns NULL with *rc set on failure; *avail gets the bytes available. */
static const uint8_t *cursor_fill(sl_segment_cursor *c, size_t want, size_t *avail, int *rc,
                                  sl_error *err)
{
    uint64_t left = c->limit - c->pos;
    if (c->map && c->limit <= c->map_len) {
        *avail = (size_t)left;
        return c->map + c->pos;
    }
    if (c->pos >= c->buf_pos && c->pos + want <= c->buf_pos + c->buf.len) {
        *avail = (size_t)(c->buf_pos + c->buf.len - c->pos);
        return c->buf.data + (c->pos - c->buf_pos);
    }
    size_t keep = 0;
    if (c->pos >= c->buf_pos && c->pos < c->buf_pos + c->buf.len) {
        keep = (size_t)(c->buf_pos + c->buf.len - c->pos);
        memmove(c->buf.data, c->buf.data + (c->pos - c->buf_pos), keep);
    }
    size_t n = want > c->chunk ? want : c->chunk;
    if (n > left)
        n = (size_t)left;
    c->buf.len = keep;
    c->buf_pos = c->pos;
    if (n > keep && sl_buf_reserve(&c->buf, n - keep)) {
        *rc = SL_ENOMEM;
        return NULL;
    }
    while (c->buf.len < n) {
        ssize_t r =
            pread(c->fd, c->buf.data + c->buf.len, n - c->buf.len, (off_t)(c->pos + c->buf.len));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            *rc = sl_error_errno(err, errno, "read at byte %" PRIu64, c->pos + c->buf.len);
            return NULL;
        }
        if (r == 0)
            break;
        c->buf.len += (size_t)r;
    }
    if (c->chunk < c->max_chunk) /* sequential reading: read more at a time */
        c->chunk *= 2;
    *avail = c->buf.len;
    return c->buf.data;
}

int sl_segment_cursor_next(sl_segment_cursor *c, const uint8_t **p, sl_batch_info *info, int verify,
                           sl_error *err)
{
    if (c->pos >= c->limit)
        return SL_EEOF;
    int rc = 0;
    size_t avail;
    const uint8_t *b = cursor_fill(c, SL_BATCH_HEADER_SIZE, &avail, &rc, err);
    if (!b)
        return rc;
    rc = sl_batch_header(b, avail, info, err);
    if (rc == SL_EPARTIAL)
        return sl_error_set(err, SL_EPARTIAL,
                            "%" PRIu64 " bytes at the end are too few for a "
                            "batch header",
                            c->limit - c->pos);
    if (rc)
        return rc;
    size_t size = sl_batch_size(info);
    if (size > c->limit - c->pos)
        return sl_error_set(err, SL_EPARTIAL,
                            "batch of %zu bytes extends past the end "
                            "(%" PRIu64 " bytes left)",
                            size, c->limit - c->pos);
    if (avail < size && !(b = cursor_fill(c, size, &avail, &rc, err)))
        return rc;
    if (avail < size)
        return sl_error_set(err, SL_EPARTIAL, "file ends inside a batch of %zu bytes", size);
    if (verify && (rc = sl_batch_check(b, size, info, err)))
        return rc;
    *p = b;
    c->pos += size;
    return 0;
}

/* ---- small helpers ----------------------------------------------------- */

void sl_segment_stem(char *out, size_t size, const char *dir, int64_t base)
{
    snprintf(out, size, "%s/%020" PRId64, dir, base);
}

static char *path_with(const sl_segment *s, const char *ext)
{
    size_t n = strlen(s->stem) + strlen(ext) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s", s->stem, ext);
    return p;
}

uint64_t sl_segment_size(const sl_segment *s)
{
    return atomic_load_explicit(&s->size, memory_order_acquire);
}

int64_t sl_segment_next_offset(const sl_segment *s)
{
    return atomic_load_explicit(&s->next, memory_order_acquire);
}

int sl_segment_pread(const sl_segment *s, void *buf, size_t len, uint64_t pos, sl_error *err)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(s->fd, (char *)buf + got, len - got, (off_t)(pos + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return sl_error_errno(err, r < 0 ? errno : EIO, "%s.log: read at byte %" PRIu64,
                                  s->stem, pos + got);
        got += (size_t)r;
    }
    return 0;
}

static void oidx_get(const sl_segment *s, size_t i, uint32_t *rel, uint32_t *pos)
{
    const uint8_t *e = sl_index_entry(&s->oidx, i);
    *rel = sl_be32_get(e);
    *pos = sl_be32_get(e + 4);
}

static void tidx_get(const sl_segment *s, size_t i, int64_t *ts, uint32_t *rel)
{
    const uint8_t *e = sl_index_entry(&s->tidx, i);
    *ts = (int64_t)sl_be64_get(e);
    *rel = sl_be32_get(e + 8);
}

static int64_t tidx_last_ts(const sl_segment *s)
{
    size_t n = sl_index_count(&s->tidx);
    int64_t ts = INT64_MIN;
    uint32_t rel;
    if (n)
        tidx_get(s, n - 1, &ts, &rel);
    return ts;
}

/* ---- lane runs --------------------------------------------------------- */

static int runs_push(sl_segment *s, uint32_t rel, uint32_t pos, const char *lane)
{
    pthread_mutex_lock(&s->runs_lock);
    if (s->nruns == s->cap_runs && sl_grow(&s->runs, &s->cap_runs, sizeof *s->runs, 8)) {
        pthread_mutex_unlock(&s->runs_lock);
        return SL_ENOMEM;
    }
    sl_lane_run *r = &s->runs[s->nruns];
    r->rel = rel;
    r->pos = pos;
    snprintf(r->lane, sizeof r->lane, "%s", lane);
    s->nruns++;
    pthread_mutex_unlock(&s->runs_lock);
    return 0;
}

static void runs_truncate_from(sl_segment *s, uint64_t pos)
{
    pthread_mutex_lock(&s->runs_lock);
    while (s->nruns && s->runs[s->nruns - 1].pos >= pos)
        s->nruns--;
    pthread_mutex_unlock(&s->runs_lock);
}

/* Writes run i to the sidecar. */
static int runs_write(sl_segment *s, size_t i, sl_error *err)
{
    uint8_t e[SL_LANES_ENTRY] = {0};
    const sl_lane_run *r = &s->runs[i];
    size_t len = strlen(r->lane);
    sl_be32_put(e, r->rel);
    sl_be32_put(e + 4, r->pos);
    e[8] = (uint8_t)len;
    memcpy(e + 9, r->lane, len);
    if (pwrite(s->lanes_fd, e, sizeof e, (off_t)(i * SL_LANES_ENTRY)) != (ssize_t)sizeof e)
        return sl_error_errno(err, errno, "%s.lanes: write", s->stem);
    s->lanes_dirty = true;
    return 0;
}

/* Loads the sidecar; returns 1 when it is present and consistent with a log
 * of file_size bytes, 0 when it must be rebuilt. */
static int runs_load(sl_segment *s, uint64_t file_size)
{
    struct stat st;
    if (fstat(s->lanes_fd, &st) < 0 || st.st_size % SL_LANES_ENTRY)
        return 0;
    size_t n = (size_t)st.st_size / SL_LANES_ENTRY;
    if (n == 0)
        return file_size == 0;
    uint8_t *all = malloc((size_t)st.st_size);
    if (!all)
        return 0;
    int ok = pread(s->lanes_fd, all, (size_t)st.st_size, 0) == st.st_size;
    for (size_t i = 0; ok && i < n; i++) {
        const uint8_t *e = all + i * SL_LANES_ENTRY;
        uint32_t rel = sl_be32_get(e), pos = sl_be32_get(e + 4);
        char lane[SL_LANE_MAX + 1] = {0};
        if (e[8] > SL_LANE_MAX || !sl_lane_valid((const char *)e + 9, e[8])) {
            ok = 0;
            break;
        }
        memcpy(lane, e + 9, e[8]);
        if ((i == 0 && pos != 0) || (i && (pos <= s->runs[i - 1].pos || rel <= s->runs[i - 1].rel ||
                                           strcmp(lane, s->runs[i - 1].lane) == 0)))
            ok = 0;
        else if (runs_push(s, rel, pos, lane))
            ok = 0;
    }
    free(all);
    if (!ok)
        s->nruns = 0;
    return ok;
}

int sl_segment_lane_at(sl_segment *s, uint64_t pos, char *lane, uint64_t *run_end,
                       int64_t *run_end_offset)
{
    pthread_mutex_lock(&s->runs_lock);
    size_t lo = 0, hi = s->nruns; /* find the last run with run.pos <= pos */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->runs[mid].pos <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    int rc = SL_ENOENT;
    if (lo > 0) {
        memcpy(lane, s->runs[lo - 1].lane, SL_LANE_MAX + 1);
        *run_end = lo < s->nruns ? s->runs[lo].pos : UINT64_MAX;
        *run_end_offset = lo < s->nruns ? s->base + s->runs[lo].rel : INT64_MAX;
        rc = 0;
    }
    pthread_mutex_unlock(&s->runs_lock);
    return rc;
}

/* ---- lookups ----------------------------------------------------------- */

uint64_t sl_segment_seek(const sl_segment *s, int64_t offset)
{
    if (offset <= s->base)
        return 0;
    uint64_t target = (uint64_t)(offset - s->base);
    size_t lo = 0, hi = sl_index_count(&s->oidx);
    while (lo < hi) { /* last entry with rel <= target */
        size_t mid = (lo + hi) / 2;
        uint32_t rel, pos;
        oidx_get(s, mid, &rel, &pos);
        if (rel <= target)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    uint32_t rel, pos;
    oidx_get(s, lo - 1, &rel, &pos);
    return pos;
}

uint64_t sl_segment_seek_time(const sl_segment *s, int64_t ts)
{
    size_t lo = 0, hi = sl_index_count(&s->tidx);
    while (lo < hi) { /* last entry whose max timestamp is still below ts */
        size_t mid = (lo + hi) / 2;
        int64_t t;
        uint32_t rel;
        tidx_get(s, mid, &t, &rel);
        if (t < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    int64_t t;
    uint32_t rel;
    tidx_get(s, lo - 1, &t, &rel);
    return sl_segment_seek(s, s->base + rel);
}

/* ---- writing ----------------------------------------------------------- */

/* Records the batch at pos in the indexes when it starts a new index
 * interval, and tracks the segment's largest timestamp. */
static void index_batch(sl_segment *s, uint64_t pos, uint32_t rel, int64_t max_ts,
                        uint32_t interval)
{
    if (max_ts > s->max_ts)
        s->max_ts = max_ts;
    size_t n = sl_index_count(&s->oidx);
    if (n && (pos <= s->last_index_pos || pos - s->last_index_pos < interval))
        return;
    uint8_t e[SL_TIME_ENTRY];
    sl_be32_put(e, rel);
    sl_be32_put(e + 4, (uint32_t)pos);
    if (sl_index_append(&s->oidx, e))
        return; /* full: the log rolls before this can matter */
    s->last_index_pos = pos;
    if (s->max_ts > tidx_last_ts(s)) {
        sl_be64_put(e, (uint64_t)s->max_ts);
        sl_be32_put(e + 8, rel);
        sl_index_append(&s->tidx, e);
    }
}

/* Adds a lane run when the batch at pos changes the lane. */
static int lane_batch(sl_segment *s, uint64_t pos, uint32_t rel, const char *lane, sl_error *err)
{
    if (s->nruns &&
        (pos <= s->runs[s->nruns - 1].pos || strcmp(s->runs[s->nruns - 1].lane, lane) == 0))
        return 0;
    if (runs_push(s, rel, (uint32_t)pos, lane))
        return SL_ENOMEM;
    int rc = runs_write(s, s->nruns - 1, err);
    if (rc) {
        pthread_mutex_lock(&s->runs_lock);
        s->nruns--;
        pthread_mutex_unlock(&s->runs_lock);
    }
    return rc;
}

int sl_segment_append(sl_segment *s, const sl_batch *b, uint32_t index_interval, sl_error *err)
{
    uint64_t pos = sl_segment_size(s);
    int64_t base = (int64_t)sl_be64_get(b->data);
    int64_t next = base + (int64_t)(int32_t)sl_be32_get(b->data + SL_BATCH_OFF_LAST_DELTA) + 1;
    uint32_t rel = (uint32_t)(base - s->base);
    size_t done = 0;
    while (done < b->len) {
        ssize_t w = pwrite(s->fd, b->data + done, b->len - done, (off_t)(pos + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            /* Cut a partial write so the file ends on a batch boundary. */
            if (ftruncate(s->fd, (off_t)pos) < 0) {
                /* Recovery on the next open removes the torn bytes. */
            }
            return sl_error_errno(err, e, "%s.log: append at byte %" PRIu64, s->stem, pos);
        }
        done += (size_t)w;
    }
    int rc = lane_batch(s, pos, rel, b->lane, err);
    if (rc) {
        if (ftruncate(s->fd, (off_t)pos) < 0) {
            /* As above: a torn tail is cut on the next open. */
        }
        return rc;
    }
    index_batch(s, pos, rel, b->max_ts, index_interval);
    if (pos == 0)
        s->created_ms = sl_clock_now_ms();
    atomic_store_explicit(&s->next, next, memory_order_release);
    atomic_store_explicit(&s->size, pos + b->len, memory_order_release);
    return 0;
}

int sl_segment_sync(sl_segment *s, sl_error *err)
{
    uint64_t size = sl_segment_size(s);
    if (size != s->synced && fdatasync(s->fd) < 0)
        return sl_error_errno(err, errno, "%s.log: fdatasync", s->stem);
    s->synced = size;
    /* Clear before syncing: a run written meanwhile sets it again and is
     * synced next time, never lost. */
    if (atomic_exchange(&s->lanes_dirty, false) && s->lanes_fd >= 0 && fdatasync(s->lanes_fd) < 0) {
        s->lanes_dirty = true;
        return sl_error_errno(err, errno, "%s.lanes: fdatasync", s->stem);
    }
    return 0;
}

int sl_segment_seal(sl_segment *s, bool sync, sl_error *err)
{
    if (!s->active)
        return 0;
    /* A last time entry makes the time index's final timestamp the segment's
     * maximum, which sl_segment_open() then reads without scanning. */
    size_t n = sl_index_count(&s->oidx);
    if (s->max_ts > tidx_last_ts(s) && n) {
        uint32_t rel, pos;
        oidx_get(s, n - 1, &rel, &pos);
        uint8_t e[SL_TIME_ENTRY];
        int64_t next = sl_segment_next_offset(s);
        sl_be64_put(e, (uint64_t)s->max_ts);
        sl_be32_put(e + 8, next > s->base ? (uint32_t)(next - 1 - s->base) : 0);
        sl_index_append(&s->tidx, e);
    }
    int rc = sync ? sl_index_sync(&s->oidx, err) : 0;
    if (!rc && sync)
        rc = sl_index_sync(&s->tidx, err);
    if (!rc)
        rc = sl_index_seal(&s->oidx, err);
    if (!rc)
        rc = sl_index_seal(&s->tidx, err);
    if (!rc && sync)
        rc = sl_segment_sync(s, err);
    if (!rc)
        s->active = false;
    return rc;
}

/* ---- lifecycle --------------------------------------------------------- */

static sl_segment *seg_new(const char *dir, int64_t base)
{
    sl_segment *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    size_t n = strlen(dir) + SL_SEGMENT_NAME_LEN + 2;
    s->stem = malloc(n);
    if (!s->stem) {
        free(s);
        return NULL;
    }
    sl_segment_stem(s->stem, n, dir, base);
    s->base = base;
    s->fd = s->lanes_fd = -1;
    s->oidx.fd = s->tidx.fd = -1;
    s->max_ts = INT64_MIN;
    atomic_init(&s->size, 0);
    atomic_init(&s->next, base);
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->runs_lock, NULL);
    return s;
}

/* Maps the .log read-only for readers, at least map_bytes long. A failed
 * mapping only means readers use pread(). */
static void seg_map(sl_segment *s, uint64_t map_bytes, uint64_t file_size)
{
    uint64_t len = map_bytes > file_size ? map_bytes : file_size;
    if (len == 0 || len > SIZE_MAX / 2)
        return;
    void *m = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, s->fd, 0);
    if (m == MAP_FAILED)
        return;
    s->map = m;
    s->map_len = len;
}

static void seg_destroy(sl_segment *s)
{
    if (s->map)
        munmap((void *)s->map, (size_t)s->map_len);
    if (s->fd >= 0)
        close(s->fd);
    if (s->lanes_fd >= 0)
        close(s->lanes_fd);
    sl_index_close(&s->oidx);
    sl_index_close(&s->tidx);
    if (s->deleted) {
        static const char *const exts[] = {".log", ".index", ".timeindex", ".lanes"};
        for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
            char *p = path_with(s, exts[i]);
            if (p)
                unlink(p);
            free(p);
        }
    }
    pthread_mutex_destroy(&s->runs_lock);
    free(s->runs);
    free(s->stem);
    free(s);
}

void sl_segment_ref(sl_segment *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void sl_segment_unref(sl_segment *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        seg_destroy(s);
}

/* Opens the .log, both indexes (capacity cap entries) and the sidecar. */
static int seg_open_files(sl_segment *s, int create, size_t cap, sl_error *err)
{
    char *p = path_with(s, ".log");
    if (!p)
        return SL_ENOMEM;
    s->fd = open(p, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0644);
    int rc = s->fd < 0 ? sl_error_errno(err, errno, "open %s", p) : 0;
    free(p);
    if (rc)
        return rc;
    static const char *const exts[] = {".index", ".timeindex"};
    sl_index *ixs[] = {&s->oidx, &s->tidx};
    size_t sizes[] = {SL_OFFSET_ENTRY, SL_TIME_ENTRY};
    for (int i = 0; i < 2 && !rc; i++) {
        if (!(p = path_with(s, exts[i])))
            return SL_ENOMEM;
        if (create)
            unlink(p);
        rc = sl_index_open(ixs[i], p, sizes[i], cap, 1, err);
        free(p);
    }
    if (rc)
        return rc;
    if (!(p = path_with(s, ".lanes")))
        return SL_ENOMEM;
    s->lanes_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | (create ? O_TRUNC : 0), 0644);
    rc = s->lanes_fd < 0 ? sl_error_errno(err, errno, "open %s", p) : 0;
    free(p);
    return rc;
}

int sl_segment_create(const char *dir, int64_t base, size_t max_index_entries, uint64_t map_bytes,
                      sl_segment **out, sl_error *err)
{
    sl_segment *s = seg_new(dir, base);
    if (!s)
        return SL_ENOMEM;
    int rc = seg_open_files(s, 1, max_index_entries, err);
    if (rc) {
        seg_destroy(s);
        return rc;
    }
    seg_map(s, map_bytes, 0);
    s->active = true;
    s->created_ms = sl_clock_now_ms();
    *out = s;
    return 0;
}

/* Length of the prefix of the offset index that is strictly increasing and
 * inside the file; a crash can leave zeroed or stale entries after it. */
static size_t oidx_valid_prefix(const sl_segment *s, uint64_t file_size)
{
    size_t n = sl_index_count(&s->oidx), i;
    uint32_t prel = 0, ppos = 0;
    for (i = 0; i < n; i++) {
        uint32_t rel, pos;
        oidx_get(s, i, &rel, &pos);
        if (pos >= file_size || (i == 0 && pos != 0) || (i && (rel <= prel || pos <= ppos)))
            break;
        prel = rel;
        ppos = pos;
    }
    return i;
}

static size_t tidx_valid_prefix(const sl_segment *s)
{
    size_t n = sl_index_count(&s->tidx), i;
    int64_t pts = INT64_MIN;
    uint32_t prel = 0;
    for (i = 0; i < n; i++) {
        int64_t ts;
        uint32_t rel;
        tidx_get(s, i, &ts, &rel);
        if (ts <= pts || (i && rel < prel))
            break;
        pts = ts;
        prel = rel;
    }
    return i;
}

/* Drops offset index entries from the end until the last one points at a
 * batch header with the offset it claims. */
static void oidx_trust_last(sl_segment *s)
{
    size_t n = sl_index_count(&s->oidx);
    while (n) {
        uint32_t rel, pos;
        oidx_get(s, n - 1, &rel, &pos);
        uint8_t h[SL_BATCH_HEADER_SIZE];
        sl_batch_info info;
        if (sl_segment_pread(s, h, sizeof h, pos, NULL) == 0 &&
            sl_batch_header(h, sizeof h, &info, NULL) == 0 &&
            info.base_offset == s->base + (int64_t)rel)
            break;
        n--;
    }
    sl_index_truncate(&s->oidx, n);
}

/* Reads batches from pos to the end of the file, re-creating index entries
 * and lane runs past what is already recorded; stops at the first batch that
 * is torn, corrupt or out of order and cuts the file there. */
static int scan_tail(sl_segment *s, uint64_t pos, uint64_t file_size, int full, uint32_t interval,
                     sl_segment_report *rep, sl_error *err)
{
    sl_segment_cursor c;
    sl_batch_reader br;
    sl_segment_cursor_init(&c, s->fd, pos, file_size, 0);
    sl_batch_reader_init(&br);
    int64_t next = pos == 0 ? s->base : -1;
    int rc = 0;
    for (;;) {
        const uint8_t *p;
        sl_batch_info in;
        sl_error why = {0};
        uint64_t at = c.pos;
        rc = sl_segment_cursor_next(&c, &p, &in, 1, &why);
        if (rc == SL_EEOF) {
            rc = 0;
            break;
        }
        if (rc == 0 && (in.base_offset < (next < 0 ? s->base : next) ||
                        in.base_offset + in.last_offset_delta - s->base > (int64_t)UINT32_MAX)) {
            rc = sl_error_set(&why, SL_ECORRUPT,
                              "base offset %" PRId64 " is out of order "
                              "(expected at least %" PRId64 ")",
                              in.base_offset, next < 0 ? s->base : next);
        }
        char lane[SL_LANE_MAX + 1] = "";
        int need_lane = !s->nruns || at > s->runs[s->nruns - 1].pos;
        if (rc == 0 && (need_lane || full))
            rc = sl_batch_lane(&br, p, sl_batch_size(&in), lane, &why);
        if (rc == 0 && full)
            rc = sl_batch_validate(&br, p, sl_batch_size(&in), lane, &why);
        if (rc == SL_EIO || rc == SL_ENOMEM) {
            sl_error_set(err, rc, "%s", why.msg);
            break;
        }
        if (rc) { /* the tail from here on is not a valid batch: cut it */
            rep->truncated_at = at;
            rep->truncated_bytes = file_size - at;
            snprintf(rep->reason, sizeof rep->reason, "%s.log: byte %" PRIu64 ": %s", s->stem, at,
                     why.msg);
            rc = 0;
            break;
        }
        uint32_t rel = (uint32_t)(in.base_offset - s->base);
        if (need_lane && (rc = lane_batch(s, at, rel, lane, err)))
            break;
        index_batch(s, at, rel, in.max_ts, interval);
        next = in.base_offset + in.last_offset_delta + 1;
        atomic_store(&s->next, next);
        atomic_store(&s->size, c.pos);
    }
    sl_segment_cursor_free(&c);
    sl_batch_reader_free(&br);
    return rc;
}

/* Cuts the .log and every companion back to what scan_tail() accepted. */
static int cut_tail(sl_segment *s, uint64_t size, sl_error *err)
{
    if (ftruncate(s->fd, (off_t)size) < 0)
        return sl_error_errno(err, errno, "%s.log: truncate to %" PRIu64, s->stem, size);
    if (fdatasync(s->fd) < 0)
        return sl_error_errno(err, errno, "%s.log: fdatasync", s->stem);
    size_t n = sl_index_count(&s->oidx);
    while (n) {
        uint32_t rel, pos;
        oidx_get(s, n - 1, &rel, &pos);
        if (pos < size)
            break;
        n--;
    }
    sl_index_truncate(&s->oidx, n);
    int64_t last_rel = sl_segment_next_offset(s) - 1 - s->base;
    n = sl_index_count(&s->tidx);
    while (n) {
        int64_t ts;
        uint32_t rel;
        tidx_get(s, n - 1, &ts, &rel);
        if ((int64_t)rel <= last_rel)
            break;
        n--;
    }
    sl_index_truncate(&s->tidx, n);
    runs_truncate_from(s, size > 0 ? size : 1);
    if (size == 0)
        s->nruns = 0;
    if (ftruncate(s->lanes_fd, (off_t)(s->nruns * SL_LANES_ENTRY)) < 0)
        return sl_error_errno(err, errno, "%s.lanes: truncate", s->stem);
    return 0;
}

int sl_segment_open(const char *dir, int64_t base, sl_segment_mode mode, size_t max_index_entries,
                    uint32_t index_interval, uint64_t map_bytes, sl_segment **out,
                    sl_segment_report *rep, sl_error *err)
{
    memset(rep, 0, sizeof *rep);
    rep->truncated_at = UINT64_MAX;
    sl_segment *s = seg_new(dir, base);
    if (!s)
        return SL_ENOMEM;
    char *p = path_with(s, ".log");
    struct stat st;
    int rc = !p ? SL_ENOMEM : stat(p, &st) < 0 ? sl_error_errno(err, errno, "stat %s", p) : 0;
    free(p);
    if (rc)
        goto fail;
    uint64_t file_size = (uint64_t)st.st_size;
    size_t cap = (size_t)(file_size / (index_interval ? index_interval : 1)) + 2;
    if (cap < max_index_entries && mode != SL_SEG_CLOSED)
        cap = max_index_entries;
    if ((rc = seg_open_files(s, 0, cap, err)))
        goto fail;

    /* The indexes are kept only when both are wholly consistent (a strictly
     * increasing prefix filling the file, inside the log); anything else —
     * a lost, zeroed, truncated or garbage file — rebuilds both from byte 0,
     * since the time index is only right when built along the offset index. */
    size_t on = sl_index_count(&s->oidx), og = oidx_valid_prefix(s, file_size);
    size_t tn = sl_index_count(&s->tidx), tg = tidx_valid_prefix(s);
    bool rebuild =
        mode == SL_SEG_FULL || og < on || tg < tn || (file_size > 0 && (og == 0 || tg == 0));
    if (rebuild) {
        sl_index_truncate(&s->oidx, 0);
        sl_index_truncate(&s->tidx, 0);
    } else {
        oidx_trust_last(s);
    }
    rep->rebuilt_index = rep->rebuilt_timeindex = rebuild && file_size > 0;
    int runs_ok = mode != SL_SEG_FULL && mode != SL_SEG_ACTIVE_DIRTY && runs_load(s, file_size);
    rep->rebuilt_lanes = !runs_ok && file_size > 0;

    /* Scan from the last good index entry, or from byte 0 when anything is
     * rebuilt or the segment may have lost pages in a crash. */
    uint64_t start = 0;
    if (runs_ok && !rebuild && sl_index_count(&s->oidx)) {
        uint32_t rel, pos;
        oidx_get(s, sl_index_count(&s->oidx) - 1, &rel, &pos);
        start = pos;
        s->last_index_pos = pos;
        atomic_store(&s->next, base + rel);
        /* Time entries and lane runs past the scan start are derived again by
         * the scan; dropping them first means none can outlive batches that a
         * shorter file no longer has. */
        size_t tn2 = sl_index_count(&s->tidx);
        while (tn2) {
            int64_t ts;
            uint32_t trel;
            tidx_get(s, tn2 - 1, &ts, &trel);
            if (trel <= rel)
                break;
            tn2--;
        }
        sl_index_truncate(&s->tidx, tn2);
        runs_truncate_from(s, (uint64_t)pos + 1);
        if (ftruncate(s->lanes_fd, (off_t)(s->nruns * SL_LANES_ENTRY)) < 0) {
            rc = sl_error_errno(err, errno, "%s.lanes: truncate", s->stem);
            goto fail;
        }
        s->max_ts = tidx_last_ts(s);
    } else {
        sl_index_truncate(&s->oidx, 0);
        sl_index_truncate(&s->tidx, 0);
        s->nruns = 0;
        if (ftruncate(s->lanes_fd, 0) < 0) {
            rc = sl_error_errno(err, errno, "%s.lanes: truncate", s->stem);
            goto fail;
        }
    }
    atomic_store(&s->size, start);
    rc = scan_tail(s, start, file_size, mode == SL_SEG_FULL, index_interval, rep, err);
    if (rc)
        goto fail;
    if (rep->truncated_at != UINT64_MAX && (rc = cut_tail(s, rep->truncated_at, err)))
        goto fail;
    s->synced = sl_segment_size(s);
    if (rep->rebuilt_lanes && s->nruns && (rc = sl_segment_sync(s, err)))
        goto fail;
    s->active = true;
    s->created_ms = sl_clock_now_ms();
    if (mode == SL_SEG_CLOSED || mode == SL_SEG_FULL) {
        if ((rc = sl_segment_seal(s, mode == SL_SEG_FULL, err)))
            goto fail;
        /* Its lane runs are in memory and nothing appends to it again: the
         * sidecar's descriptor goes (synced first if recovery rewrote it). */
        if (atomic_exchange(&s->lanes_dirty, false) && fdatasync(s->lanes_fd) < 0) {
            rc = sl_error_errno(err, errno, "%s.lanes: fdatasync", s->stem);
            goto fail;
        }
        close(s->lanes_fd);
        s->lanes_fd = -1;
    }
    seg_map(s, s->active ? map_bytes : 0, sl_segment_size(s));
    *out = s;
    return 0;
fail:
    seg_destroy(s);
    return rc;
}
