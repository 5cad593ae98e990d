/*
 * core/log/log_reader.c — reading a partition: record-by-record readers with a
 * lane filter, and zero-copy byte ranges of stored batches (see core/log/log.h).
 *
 * A reader holds a reference on the segment it is in, so retention may
 * delete that segment underneath it: the open file stays readable until the
 * reader moves on. It reads only below the segment's published size, so a
 * batch being written is never seen half-done.
 */
#include "core/log/log_internal.h"
#include "core/base/lane_name.h"

#include <inttypes.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_CHUNK (1u << 20) /* largest pread when a segment is not mapped */

/* Mapped pages a reader has passed are released every so many bytes, so a
 * process that reads a lot does not keep the whole log resident (they stay
 * in the page cache; only this mapping lets go of them). */
#define RELEASE_EVERY (8u << 20)

struct sl_log_reader {
    sl_log *log;
    sl_segment *seg;
    uint64_t released; /* mapped bytes of seg below this were released */
    sl_segment_cursor cur;
    sl_batch_reader br;
    bool in_batch;
    int64_t next; /* next offset wanted */
    bool filter;  /* only records of lane */
    char lane[SL_LANE_MAX + 1];
};

static int check_range(sl_log *log, int64_t offset, sl_error *err)
{
    int64_t start = sl_log_start_offset(log), end = sl_log_end_offset(log);
    if (offset < start || offset > end)
        return sl_error_set(err, SL_ERANGE,
                            "offset %" PRId64 " is outside the log [%" PRId64 ", %" PRId64 "]",
                            offset, start, end);
    return 0;
}

int sl_log_reader_open(sl_log *log, int64_t offset, const char *lane, sl_log_reader **out,
                       sl_error *err)
{
    if (lane && !sl_lane_valid(lane, strlen(lane)))
        return sl_error_set(err, SL_EINVAL, "invalid lane \"%s\"", lane);
    int rc = check_range(log, offset, err);
    if (rc)
        return rc;
    sl_log_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SL_ENOMEM;
    r->log = log;
    r->next = offset;
    r->filter = lane != NULL;
    if (lane)
        snprintf(r->lane, sizeof r->lane, "%s", lane);
    r->seg = sl__log_find(log, offset, false);
    r->released = sl_segment_seek(r->seg, offset);
    sl_segment_cursor_init_seg(&r->cur, r->seg, sl_segment_seek(r->seg, offset),
                               sl_segment_size(r->seg), READ_CHUNK);
    sl_batch_reader_init(&r->br);
    *out = r;
    return 0;
}

const sl_batch_info *sl_log_reader_batch(const sl_log_reader *r)
{
    return &r->br.info;
}

int64_t sl_log_reader_position(const sl_log_reader *r)
{
    return r->next;
}

/* The kernel maps cached pages around a faulting one ("fault-around", 64 KiB
 * by default), so a reader's pages extend past the bytes it read: releases
 * cover whole windows of this size. */
#define FAULT_AROUND (64u << 10)

/* Releases the reader's view of mapped pages from r->released to upto (with
 * done, to the end of upto's fault-around window: the reader is finished). */
static void release_pages(sl_log_reader *r, uint64_t upto, bool done)
{
    if (!r->seg->map)
        return;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t from = r->released / FAULT_AROUND * FAULT_AROUND;
    uint64_t to =
        done ? (upto + FAULT_AROUND - 1) / FAULT_AROUND * FAULT_AROUND : upto / page * page;
    if (to > r->seg->map_len)
        to = r->seg->map_len / page * page;
    if (to > from) {
        madvise((void *)(r->seg->map + from), (size_t)(to - from), MADV_DONTNEED);
        r->released = to;
    }
}

void sl_log_reader_close(sl_log_reader *r)
{
    if (!r)
        return;
    release_pages(r, r->cur.pos, true);
    sl_segment_cursor_free(&r->cur);
    sl_batch_reader_free(&r->br);
    sl_segment_unref(r->seg);
    free(r);
}

/* Moves to the next segment once this one is finished; false when there is
 * none yet. */
static bool next_segment(sl_log_reader *r)
{
    sl_segment *n = sl__log_find(r->log, r->seg->base, true);
    if (!n)
        return false;
    /* The old segment is sealed once a newer one exists: re-check its size. */
    if (r->cur.pos < sl_segment_size(r->seg)) {
        sl_segment_unref(n);
        return true;
    }
    release_pages(r, r->cur.pos, true);
    sl_segment_unref(r->seg);
    r->seg = n;
    r->released = 0;
    if (n->base > r->next)
        r->next = n->base;
    sl_segment_cursor_free(&r->cur);
    sl_segment_cursor_init_seg(&r->cur, n, sl_segment_seek(n, r->next), sl_segment_size(n),
                               READ_CHUNK);
    return true;
}

/* With a lane filter, jumps over runs of batches of other lanes, moving the
 * reader's position past the offsets it skipped. next_at is the segment's
 * next offset read before its size: at or below the offset at the limit. */
static void skip_other_lanes(sl_log_reader *r, int64_t next_at)
{
    char lane[SL_LANE_MAX + 1];
    uint64_t run_end;
    int64_t run_end_off;
    while (r->cur.pos < r->cur.limit &&
           sl_segment_lane_at(r->seg, r->cur.pos, lane, &run_end, &run_end_off) == 0 &&
           strcmp(lane, r->lane) != 0) {
        if (run_end < r->cur.limit) {
            r->cur.pos = run_end;
            if (run_end_off > r->next)
                r->next = run_end_off;
        } else {
            r->cur.pos = r->cur.limit;
            if (next_at > r->next)
                r->next = next_at;
        }
    }
}

int sl_log_reader_next(sl_log_reader *r, sl_record *rec, sl_error *err)
{
    for (;;) {
        if (r->in_batch) {
            int rc = sl_batch_reader_next(&r->br, rec, err);
            if (rc == 0) {
                if (rec->offset < r->next)
                    continue;
                r->next = rec->offset + 1;
                if (r->filter && (rec->lane_len != strlen(r->lane) ||
                                  memcmp(rec->lane, r->lane, rec->lane_len) != 0))
                    continue;
                return 0;
            }
            r->in_batch = false;
            if (rc != SL_EEOF)
                return rc;
        }
        int64_t next_at = sl_segment_next_offset(r->seg);
        r->cur.limit = sl_segment_size(r->seg);
        if (r->filter)
            skip_other_lanes(r, next_at);
        const uint8_t *p;
        sl_batch_info in;
        sl_error why;
        uint64_t at = r->cur.pos;
        int rc = sl_segment_cursor_next(&r->cur, &p, &in, 1, &why);
        if (rc == SL_EEOF) {
            if (next_segment(r))
                continue;
            return SL_EEOF;
        }
        if (rc)
            return sl_error_set(err, rc == SL_EPARTIAL ? SL_ECORRUPT : rc,
                                "%s.log: byte %" PRIu64 ": %s", r->seg->stem, at, why.msg);
        /* baseOffset is not covered by the CRC, and recovery after a clean
         * shutdown trusts batches before the last index entry: a damaged one
         * must not hand out offsets past the segment's end (found by
         * fuzzing: tests/fuzz/regress/log/). The end is read after the size
         * the cursor used, so it covers every batch within it. */
        if (in.base_offset >=
            sl_segment_next_offset(r->seg) - in.last_offset_delta) /* no overflow */
            return sl_error_set(err, SL_ECORRUPT,
                                "%s.log: byte %" PRIu64 ": base offset %" PRId64
                                " is past the segment's end",
                                r->seg->stem, at, in.base_offset);
        if (in.base_offset + in.last_offset_delta < r->next)
            continue; /* wholly before the wanted offset */
        if ((rc = sl_batch_reader_open(&r->br, p, sl_batch_size(&in), &why)))
            return sl_error_set(err, rc, "%s.log: byte %" PRIu64 ": %s", r->seg->stem, at, why.msg);
        if (in.base_offset > r->next)
            r->next = in.base_offset; /* a gap in the offsets */
        r->in_batch = true;
        /* Records point into this batch: release only what lies before it. */
        if (at - r->released >= RELEASE_EVERY)
            release_pages(r, at, false);
    }
}

/* ---- zero-copy slices --------------------------------------------------- */

static int read_header(sl_segment *s, uint64_t pos, sl_batch_info *in, sl_error *err)
{
    uint8_t h[SL_BATCH_HEADER_SIZE];
    int rc = sl_segment_pread(s, h, sizeof h, pos, err);
    if (!rc && (rc = sl_batch_header(h, sizeof h, in, err)))
        rc = sl_error_set(err, SL_ECORRUPT, "%s.log: byte %" PRIu64 ": bad batch header", s->stem,
                          pos);
    return rc;
}

int sl_log_slice_get(sl_log *log, int64_t offset, const char *lane, size_t max_bytes,
                     sl_log_slice *out, sl_error *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    int rc = check_range(log, offset, err);
    if (rc)
        return rc;
    sl_segment *s = sl__log_find(log, offset, false);
    for (;;) {
        uint64_t size = sl_segment_size(s), pos = sl_segment_seek(s, offset);
        sl_batch_info in;
        bool started = false;
        char run_lane[SL_LANE_MAX + 1];
        uint64_t run_end = 0;
        int64_t run_end_off;
        while (pos < size) {
            if (lane && pos >= run_end) {
                if (sl_segment_lane_at(s, pos, run_lane, &run_end, &run_end_off))
                    break;
                if (strcmp(run_lane, lane) != 0) {
                    if (started)
                        break;
                    pos = run_end;
                    continue;
                }
            }
            if ((rc = read_header(s, pos, &in, err)))
                goto done;
            /* As in sl_log_reader_next: a damaged baseOffset must not move
             * the caller past the end (found by fuzzing). */
            if (in.base_offset >= sl_segment_next_offset(s) - in.last_offset_delta) {
                rc = sl_error_set(err, SL_ECORRUPT,
                                  "%s.log: byte %" PRIu64 ": base offset %" PRId64
                                  " is past the segment's end",
                                  s->stem, pos, in.base_offset);
                goto done;
            }
            uint64_t bsize = sl_batch_size(&in);
            if (in.base_offset + in.last_offset_delta < offset && !started) {
                pos += bsize;
                continue;
            }
            if (started && out->len + bsize > max_bytes)
                break;
            if (!started) {
                out->pos = pos;
                out->first_offset = in.base_offset;
                started = true;
            }
            out->len += bsize;
            out->next_offset = in.base_offset + in.last_offset_delta + 1;
            out->compressed |= (in.attributes & 7) != 0;
            pos += bsize;
        }
        if (started)
            break;
        sl_segment *n = sl__log_find(log, s->base, true);
        if (!n)
            break;
        sl_segment_unref(s);
        s = n;
    }
done:
    if (rc || !out->len) {
        sl_segment_unref(s);
        out->seg = NULL;
        out->first_offset = out->next_offset = offset;
        return rc;
    }
    out->fd = s->fd;
    out->seg = s;
    return 0;
}

void sl_log_slice_release(sl_log_slice *sl)
{
    sl_segment_unref(sl->seg);
    sl->seg = NULL;
    sl->fd = -1;
}
