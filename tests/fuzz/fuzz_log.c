/*
 * tests/fuzz/fuzz_log.c — log recovery from fuzzed segment files
 * (core/log/segment.c, core/log/log.c, core/log/log_reader.c, core/log/log_verify.c).
 *
 * Input: one flag byte, then up to six parts separated by "SLFZ":
 *   0 00000000000000000000.log        1 its .index      2 its .timeindex
 *   3 its .lanes                      4 00000000000000000010.log
 *   5 00000000000000000010.index
 * Flags: bit 0 a .clean file (the last shutdown was clean), bit 1 full
 * recovery (sluice log recover), bit 2 fix every batch's length-consistent
 * CRC in the .log parts (so mutations get past the checksum), bit 3
 * renumber the batches' base offsets consecutively (from the file's base),
 * bit 4 append a batch after opening.
 *
 * The files go into a scratch directory; sl_log_verify looks at them as
 * they are, sl_log_open recovers them, every record is read (every lane,
 * the base lane, one named lane), a time look-up and a slice are made, and
 * the log is closed. After a full recovery, sl_log_verify must find nothing
 * damaged and a second open must see the same offsets.
 */
#include "core/log/batch.h"
#include "core/base/crc32c.h"
#include "core/log/log.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
    "00000000000000000000.log",   "00000000000000000000.index", "00000000000000000000.timeindex",
    "00000000000000000000.lanes", "00000000000000000010.log",   "00000000000000000010.index",
};
#define NPARTS (sizeof names / sizeof *names)

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* Walks the batches of a .log part fixing CRCs and/or base offsets, as far
 * as their lengths chain. */
static void fix_log(uint8_t *p, size_t len, int64_t base, bool crc, bool renumber)
{
    size_t pos = 0;
    int64_t next = base;
    while (len - pos >= SL_BATCH_HEADER_SIZE) {
        uint32_t blen = be32(p + pos + SL_BATCH_OFF_LENGTH);
        if (blen < SL_BATCH_HEADER_SIZE - SL_BATCH_LOG_OVERHEAD ||
            blen > len - pos - SL_BATCH_LOG_OVERHEAD)
            break;
        size_t total = SL_BATCH_LOG_OVERHEAD + blen;
        if (renumber) {
            put_be64(p + pos, (uint64_t)next);
            next += (int64_t)be32(p + pos + SL_BATCH_OFF_LAST_DELTA) + 1;
        }
        if (crc)
            put_be32(p + pos + SL_BATCH_OFF_CRC, sl_crc32c(0, p + pos + SL_BATCH_OFF_ATTRIBUTES,
                                                           total - SL_BATCH_OFF_ATTRIBUTES));
        pos += total;
    }
}

static void read_all(sl_log *log, const char *lane)
{
    sl_log_reader *r;
    sl_error err = {0};
    int64_t start = sl_log_start_offset(log), end = sl_log_end_offset(log);
    FZ_CHECK(start <= end, "start %lld > end %lld", (long long)start, (long long)end);
    if (sl_log_reader_open(log, start, lane, &r, &err) != 0)
        return;
    sl_record rec;
    int rc;
    int64_t last = -1;
    size_t n = 0;
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0 && n++ < 100000) {
        FZ_CHECK(rec.offset > last, "offsets go back: %lld after %lld", (long long)rec.offset,
                 (long long)last);
        FZ_CHECK(rec.offset >= start && rec.offset < end, "offset %lld outside [%lld, %lld)",
                 (long long)rec.offset, (long long)start, (long long)end);
        last = rec.offset;
    }
    FZ_CHECK(rc == 0 || rc == SL_EEOF || rc == SL_ECORRUPT || rc == SL_EIO, "next: %d", rc);
    sl_log_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const char *dir = fz_tmpdir();
    fz_clear_dir(dir);
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    char path[1024];
    for (size_t i = 0; i < NPARTS && p <= end; i++) {
        const char *sep = fz_find(p, end, "SLFZ", 4);
        size_t n = (size_t)((sep ? sep : end) - p);
        uint8_t *part = (uint8_t *)fz_dup(p, n, false);
        if (i == 0 || i == 4)
            fix_log(part, n, i ? 10 : 0, flags & 4, flags & 8);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FZ_CHECK(fz_write_file(path, part, n) == 0, "write %s", path);
        free(part);
        if (!sep)
            break;
        p = sep + 4;
    }
    if (flags & 1) {
        snprintf(path, sizeof path, "%s/.clean", dir);
        fz_write_file(path, "", 0);
    }
    sl_error err = {0};
    sl_log_verify_report vr;
    int rc = sl_log_verify(dir, &vr, &err);
    FZ_CHECK(rc == 0, "verify before open: %d %s", rc, err.msg);

    sl_log_config cfg;
    sl_log_config_default(&cfg);
    cfg.segment_bytes = 1 << 20;
    cfg.index_interval_bytes = 64; /* an index entry every few batches */
    bool full = flags & 2;
    sl_log_open_options o = {.full_recovery = full};
    sl_log *log = NULL;
    rc = sl_log_open(dir, &cfg, &o, &log, &err);
    if (rc) {
        FZ_CHECK(rc != SL_ENOMEM, "open: out of memory");
        return 0;
    }
    read_all(log, NULL);
    read_all(log, "");
    read_all(log, "lane-a");
    int64_t off;
    sl_log_offset_for_time(log, 1700000000000, &off, &err);
    sl_log_offset_for_time(log, 0, &off, &err);
    sl_log_slice sl;
    if (sl_log_slice_get(log, sl_log_start_offset(log), NULL, 1 << 16, &sl, &err) == 0)
        sl_log_slice_release(&sl);
    if (flags & 16) {
        sl_batch_builder b;
        sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
        sl_batch out;
        int64_t base;
        if (sl_batch_builder_reset(&b, "") == 0 &&
            sl_batch_builder_add(&b, 1700000000000, "k", 1, "{\"id\":\"x\"}", 10) == 0 &&
            sl_batch_builder_finish(&b, &out, &err) == 0) {
            rc = sl_log_append(log, &out, &base, &err);
            FZ_CHECK(rc == 0, "append after recovery: %s", err.msg);
            FZ_CHECK(base + 1 == sl_log_end_offset(log), "end after append");
        }
        sl_batch_builder_free(&b);
    }
    int64_t start = sl_log_start_offset(log), next = sl_log_end_offset(log);
    sl_log_close(log);
    if (!full)
        return 0;
    rc = sl_log_verify(dir, &vr, &err);
    FZ_CHECK(rc == 0 && !vr.damaged, "verify after a full recovery: %s", vr.where);
    log = NULL;
    rc = sl_log_open(dir, &cfg, &o, &log, &err);
    FZ_CHECK(rc == 0, "reopen after a full recovery: %s", err.msg);
    FZ_CHECK(sl_log_start_offset(log) == start && sl_log_end_offset(log) == next,
             "reopen: [%lld, %lld) became [%lld, %lld)", (long long)start, (long long)next,
             (long long)sl_log_start_offset(log), (long long)sl_log_end_offset(log));
    sl_log_close(log);
    return 0;
}
