/*
 * core/log/log_verify.c — sl_log_verify(): a read-only check of a partition on
 * disk, for `sluice log verify`. It trusts nothing: every batch's header and
 * CRC, every record, the offset order across segments, and whether the
 * offset index, time index and lane sidecar agree with the log.
 */
#include "core/log/log_internal.h"
#include "core/base/varint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct verify_ctx {
    sl_log_verify_report *rep;
    char stem[4096];
} verify_ctx;

static void damage(verify_ctx *v, const char *ext, uint64_t byte, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void damage(verify_ctx *v, const char *ext, uint64_t byte, const char *fmt, ...)
{
    if (v->rep->damaged)
        return;
    char why[SL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(v->rep->where, sizeof v->rep->where, "%s%s: byte %" PRIu64 ": %s", v->stem, ext, byte,
             why);
    v->rep->damaged = true;
}

/* Reads a whole small file; NULL with *len 0 when it does not exist. */
static uint8_t *slurp(const char *path, size_t *len, bool *missing)
{
    *len = 0;
    *missing = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        return NULL;
    }
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1)) &&
        pread(fd, buf, (size_t)st.st_size, 0) == st.st_size) {
        *len = (size_t)st.st_size;
    } else {
        free(buf);
        buf = NULL;
    }
    close(fd);
    return buf;
}

/* Batch starts and lanes seen in the .log, for checking the companions. */
typedef struct batch_pos {
    uint32_t pos;
    uint32_t rel;
    char lane[SL_LANE_MAX + 1];
} batch_pos;

static void check_offset_index(verify_ctx *v, const batch_pos *b, size_t nb)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.index", v->stem);
    size_t len;
    bool missing;
    uint8_t *ix = slurp(path, &len, &missing);
    if (missing) {
        damage(v, ".index", 0, "missing (it is rebuilt on open)");
        return;
    }
    size_t n = len / SL_OFFSET_ENTRY, j = 0;
    for (size_t i = 0; i < n && !v->rep->damaged; i++) {
        uint32_t rel = sl_be32_get(ix + i * SL_OFFSET_ENTRY);
        uint32_t pos = sl_be32_get(ix + i * SL_OFFSET_ENTRY + 4);
        if (rel == 0 && pos == 0 && (i > 0 || nb == 0)) {
            /* Preallocated space of a segment that is still active. */
            for (size_t k = i * SL_OFFSET_ENTRY; k < len && !v->rep->damaged; k++)
                if (ix[k])
                    damage(v, ".index", k, "data after the preallocated zero entries");
            break;
        }
        while (j < nb && b[j].pos < pos)
            j++;
        if (j == nb || b[j].pos != pos || b[j].rel != rel)
            damage(v, ".index", i * SL_OFFSET_ENTRY,
                   "entry %zu (offset +%" PRIu32 ", position %" PRIu32
                   ") does not point at that batch",
                   i, rel, pos);
    }
    free(ix);
}

static void check_time_index(verify_ctx *v, int64_t max_rel, int64_t max_ts)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.timeindex", v->stem);
    size_t len;
    bool missing;
    uint8_t *ix = slurp(path, &len, &missing);
    if (missing) {
        damage(v, ".timeindex", 0, "missing (it is rebuilt on open)");
        return;
    }
    size_t n = len / SL_TIME_ENTRY;
    int64_t pts = INT64_MIN;
    for (size_t i = 0; i < n && !v->rep->damaged; i++) {
        int64_t ts = (int64_t)sl_be64_get(ix + i * SL_TIME_ENTRY);
        uint32_t rel = sl_be32_get(ix + i * SL_TIME_ENTRY + 8);
        if (ts == 0 && rel == 0 && (i > 0 || max_rel < 0))
            break; /* preallocated space of an active segment */
        if (ts <= pts || (int64_t)rel > max_rel || ts > max_ts)
            damage(v, ".timeindex", i * SL_TIME_ENTRY,
                   "entry %zu (time %" PRId64 ", offset +%" PRIu32
                   ") is out of order or beyond the log",
                   i, ts, rel);
        pts = ts;
    }
    free(ix);
}

static void check_lanes(verify_ctx *v, const batch_pos *b, size_t nb)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.lanes", v->stem);
    size_t len;
    bool missing;
    uint8_t *lx = slurp(path, &len, &missing);
    if (missing) {
        if (nb)
            damage(v, ".lanes", 0, "missing (it is rebuilt on open)");
        return;
    }
    if (len % SL_LANES_ENTRY)
        damage(v, ".lanes", len - len % SL_LANES_ENTRY, "partial entry");
    /* Expected runs: a new entry wherever the lane changes. */
    size_t r = 0, n = len / SL_LANES_ENTRY;
    for (size_t i = 0; i < nb && !v->rep->damaged; i++) {
        if (i > 0 && strcmp(b[i].lane, b[i - 1].lane) == 0)
            continue;
        const uint8_t *e = lx + r * SL_LANES_ENTRY;
        if (r >= n || sl_be32_get(e + 4) != b[i].pos || e[8] != strlen(b[i].lane) ||
            memcmp(e + 9, b[i].lane, e[8]) != 0)
            damage(v, ".lanes", r * SL_LANES_ENTRY,
                   "does not record lane \"%s\" of the batch "
                   "at byte %" PRIu32,
                   b[i].lane, b[i].pos);
        r++;
    }
    if (!v->rep->damaged && r < n)
        damage(v, ".lanes", r * SL_LANES_ENTRY, "entries past the last batch");
    free(lx);
}

/* Checks one segment; *next is the offset the segment must not go below. */
static int verify_segment(verify_ctx *v, int64_t base, int64_t *next, sl_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.log", v->stem);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_error_errno(err, errno, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return sl_error_errno(err, errno, "stat %s", path);
    }
    sl_segment_cursor c;
    sl_batch_reader br;
    sl_segment_cursor_init(&c, fd, 0, (uint64_t)st.st_size, 0);
    sl_batch_reader_init(&br);
    batch_pos *bp = NULL;
    size_t nb = 0, cap = 0;
    int64_t max_ts = INT64_MIN, last_rel = -1;
    int rc = 0;
    if (base < *next)
        damage(v, ".log", 0,
               "base offset %" PRId64 " overlaps the previous segment (ends at %" PRId64 ")", base,
               *next);
    while (!v->rep->damaged) {
        const uint8_t *p;
        sl_batch_info in;
        sl_error why = {0};
        uint64_t at = c.pos;
        rc = sl_segment_cursor_next(&c, &p, &in, 1, &why);
        if (rc == SL_EEOF) {
            rc = 0;
            break;
        }
        if (rc == SL_EIO || rc == SL_ENOMEM) {
            sl_error_set(err, rc, "%s", why.msg);
            break;
        }
        rc = 0;
        char lane[SL_LANE_MAX + 1] = "";
        if (why.code || (why.code = sl_batch_lane(&br, p, sl_batch_size(&in), lane, &why)) ||
            (why.code = sl_batch_validate(&br, p, sl_batch_size(&in), lane, &why))) {
            damage(v, ".log", at, "%s", why.msg[0] ? why.msg : "bad batch");
            break;
        }
        if (in.base_offset < (nb ? *next : base) ||
            in.base_offset + in.last_offset_delta - base > (int64_t)UINT32_MAX) {
            damage(v, ".log", at,
                   "batch base offset %" PRId64 " is out of order (expected >= %" PRId64 ")",
                   in.base_offset, nb ? *next : base);
            break;
        }
        if (nb == cap && SL_GROW(bp, cap, 256)) {
            rc = SL_ENOMEM;
            break;
        }
        bp[nb].pos = (uint32_t)at;
        bp[nb].rel = (uint32_t)(in.base_offset - base);
        memcpy(bp[nb].lane, lane, sizeof lane);
        nb++;
        if (v->rep->first_offset < 0)
            v->rep->first_offset = in.base_offset;
        *next = in.base_offset + in.last_offset_delta + 1;
        last_rel = in.base_offset + in.last_offset_delta - base;
        if (in.max_ts > max_ts)
            max_ts = in.max_ts;
        v->rep->batches++;
        v->rep->records += (uint64_t)in.count;
        v->rep->bytes += sl_batch_size(&in);
    }
    if (!rc && !v->rep->damaged) {
        check_offset_index(v, bp, nb);
        check_time_index(v, last_rel, max_ts);
        check_lanes(v, bp, nb);
    }
    free(bp);
    sl_segment_cursor_free(&c);
    sl_batch_reader_free(&br);
    close(fd);
    return rc;
}

int sl_log_verify(const char *dir, sl_log_verify_report *rep, sl_error *err)
{
    memset(rep, 0, sizeof *rep);
    rep->first_offset = -1;
    int64_t *bases;
    size_t n;
    int rc = sl__log_list_bases(dir, &bases, &n, err);
    if (rc)
        return rc;
    verify_ctx v = {.rep = rep};
    int64_t next = n ? bases[0] : 0;
    for (size_t i = 0; i < n && !rc && !rep->damaged; i++) {
        sl_segment_stem(v.stem, sizeof v.stem, dir, bases[i]);
        rc = verify_segment(&v, bases[i], &next, err);
        rep->segments++;
    }
    rep->next_offset = next;
    if (rep->first_offset < 0)
        rep->first_offset = next;
    free(bases);
    return rc;
}
