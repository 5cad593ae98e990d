/*
 * tests/unit/test_recovery.c — what sl_log_open() repairs and what
 * sl_log_verify() reports: tails torn at every byte of the last batch, garbage
 * after the last batch, flipped bits found by full recovery (and only
 * reported, never silently served, otherwise), missing and damaged indexes and
 * lane sidecars, empty and stray segment files, and verify's counts.
 *
 * Every damage is applied to a copy of a log that was closed cleanly (or, for
 * crash states, copied while open), so each case starts from known bytes.
 * Record values are tu_value(offset), so any record read back can be checked
 * without keeping the originals. After every repair the closed log must pass
 * both sl_log_verify() and tu_check_companions(), this file's own reading of the
 * index, time index and lane sidecar against the .log.
 *
 * SLUICE_SOAK=1 takes more snapshots of a longer-running live log.
 */
#include "testutil.h"

#include "core/log/log_internal.h"
#include "core/base/varint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VSIZE 100
#define TS0 1700000000000LL
#define PATH_MAX_LEN 4200

/* ---- small file helpers -------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rnd() >> 24);
}

static void seg_file(char *out, size_t size, const char *dir, int64_t base, const char *ext)
{
    snprintf(out, size, "%s/%020" PRId64 "%s", dir, base, ext);
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        fail_msg("create %s: %s", path, strerror(errno));
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static void append_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static void truncate_file(const char *path, int64_t size)
{
    if (truncate(path, (off_t)size) != 0)
        fail_msg("truncate %s: %s", path, strerror(errno));
}

static void flip_bit(const char *path, uint64_t pos, int bit)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, (off_t)pos), 1);
    b ^= (uint8_t)(1u << bit);
    assert_int_equal(pwrite(fd, &b, 1, (off_t)pos), 1);
    close(fd);
}

/* Copies every regular file of src (but the lock) into dst. */
static void copy_dir(const char *src, const char *dst)
{
    DIR *d = opendir(src);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".clean") != 0)
            continue;
        char from[PATH_MAX_LEN], to[PATH_MAX_LEN];
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
        size_t len;
        uint8_t *data = tu_read_file(from, &len);
        write_file(to, data, len);
        free(data);
    }
    closedir(d);
}

/* Sorted base offsets of the segments in dir; caller frees. */
static int64_t *list_bases(const char *dir, size_t *n)
{
    int64_t *bases = NULL;
    sl_error err = {0};
    if (sl__log_list_bases(dir, &bases, n, &err))
        fail_msg("list %s: %s", dir, err.msg);
    return bases;
}

/* One batch as found by walking a .log file header by header. */
typedef struct batch_loc {
    uint64_t pos;
    uint64_t size;
    int64_t base;
    int32_t count;
} batch_loc;

/* Walks the .log at path (which must hold only whole, valid headers) and
 * returns its batches; caller frees. */
static batch_loc *scan_batches(const char *path, size_t *n)
{
    size_t len;
    uint8_t *data = tu_read_file(path, &len);
    batch_loc *v = NULL;
    size_t cnt = 0, cap = 0, pos = 0;
    while (pos < len) {
        sl_batch_info in;
        assert_int_equal(sl_batch_header(data + pos, len - pos, &in, NULL), 0);
        assert_true(pos + sl_batch_size(&in) <= len);
        if (cnt == cap) {
            cap = cap ? cap * 2 : 64;
            v = realloc(v, cap * sizeof *v);
            assert_non_null(v);
        }
        v[cnt++] = (batch_loc){pos, sl_batch_size(&in), in.base_offset, in.last_offset_delta + 1};
        pos += sl_batch_size(&in);
    }
    free(data);
    *n = cnt;
    return v;
}

/* ---- an independent look at the companions -------------------------------- */

/* ---- log helpers --------------------------------------------------------- */

/* The damage being tested, named in failure messages. */
static char g_case[256];

typedef struct notes {
    int n;
    char all[16384];
} notes;

static void on_notify(void *ctx, const char *msg)
{
    notes *nt = ctx;
    size_t used = strlen(nt->all);
    snprintf(nt->all + used, sizeof nt->all - used, "%s\n", msg);
    nt->n++;
}

static sl_log *open_log(const char *dir, const sl_log_config *cfg, bool full, notes *nt)
{
    if (nt)
        memset(nt, 0, sizeof *nt);
    sl_log_open_options o = {
        .create = true, .full_recovery = full, .notify = nt ? on_notify : NULL, .notify_ctx = nt};
    sl_log *log = NULL;
    sl_error err = {0};
    int rc = sl_log_open(dir, cfg, &o, &log, &err);
    if (rc)
        fail_msg("open %s: %s (%s)", dir, err.msg, sl_strerror(rc));
    return log;
}

static sl_log_verify_report verify_dir(const char *dir)
{
    sl_log_verify_report rep;
    memset(&rep, 0, sizeof rep);
    sl_error err = {0};
    int rc = sl_log_verify(dir, &rep, &err);
    if (rc)
        fail_msg("verify %s: %s (%s)", dir, err.msg, sl_strerror(rc));
    return rep;
}

/* sl_log_verify() and tu_check_companions() both find the closed log healthy. */
static sl_log_verify_report verify_clean(const char *dir)
{
    sl_log_verify_report rep = verify_dir(dir);
    if (rep.damaged)
        fail_msg("%s: verify reports damage: %s", g_case, rep.where);
    tu_check_companions(dir, g_case);
    return rep;
}

static void remove_clean(const char *dir)
{
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s/.clean", dir);
    unlink(p);
}

/* Reads from offset with a fresh reader and checks that the first n records
 * are offset, offset + 1, … with the values tu_value() gives. */
static void expect_records(sl_log *log, int64_t offset, int64_t n)
{
    sl_log_reader *r;
    sl_error err = {0};
    int rc = sl_log_reader_open(log, offset, NULL, &r, &err);
    if (rc)
        fail_msg("%s: reader_open(%" PRId64 "): %s", g_case, offset, err.msg);
    char v[VSIZE + 64];
    for (int64_t i = 0; i < n; i++) {
        sl_record rec;
        rc = sl_log_reader_next(r, &rec, &err);
        if (rc)
            fail_msg("%s: reader_next at %" PRId64 " (opened at %" PRId64 "): %s (%s)", g_case,
                     offset + i, offset, err.msg, sl_strerror(rc));
        assert_int_equal(rec.offset, offset + i);
        size_t len = tu_value(v, VSIZE, rec.offset);
        assert_int_equal(rec.value_len, len);
        assert_memory_equal(rec.value, v, len);
    }
    sl_log_reader_close(r);
}

static void expect_time(sl_log *log, int64_t ts, int64_t want)
{
    int64_t got = -1;
    sl_error err = {0};
    int rc = sl_log_offset_for_time(log, ts, &got, &err);
    if (rc)
        fail_msg("%s: offset_for_time(%" PRId64 "): %s", g_case, ts, err.msg);
    if (got != want)
        fail_msg("%s: offset_for_time(%" PRId64 ") = %" PRId64 ", expected %" PRId64, g_case, ts,
                 got, want);
}

/* ---- torn tail ----------------------------------------------------------- */

/* Records 0-19 base lane, 20-29 lane "a", 30-41 one last batch in lane "b". */
#define TORN_LAST_BASE 30
#define TORN_END 42

static void build_torn_log(const char *dir, const sl_log_config *cfg, sl_codec codec)
{
    sl_log *log = open_log(dir, cfg, false, NULL);
    tu_append(log, 0, 20, 5, VSIZE, TS0, "", codec);
    tu_append(log, 20, 10, 5, VSIZE, TS0, "a", codec);
    tu_append(log, 30, 12, 12, VSIZE, TS0, "b", codec);
    assert_int_equal(sl_log_end_offset(log), TORN_END);
    sl_log_close(log);
}

/* index_interval 128 gives (nearly) every batch an index entry, so the lost
 * batch has one; 1 MiB gives only the first batch one, so only the lane
 * sidecar and the time index still describe the lost batch. */
static void torn_tail(sl_codec codec, uint32_t index_interval)
{
    sl_log_config cfg = tu_config(1 << 20);
    cfg.index_interval_bytes = index_interval;
    char *pristine = tu_tmpdir();
    build_torn_log(pristine, &cfg, codec);
    char log_path[PATH_MAX_LEN];
    seg_file(log_path, sizeof log_path, pristine, 0, ".log");
    size_t nb;
    batch_loc *b = scan_batches(log_path, &nb);
    const batch_loc *last = &b[nb - 1];
    assert_int_equal(last->base, TORN_LAST_BASE);
    int64_t appended_ts = TS0 + 1000000;

    for (uint64_t k = last->pos; k < last->pos + last->size; k++) {
        char *work = tu_tmpdir();
        copy_dir(pristine, work);
        seg_file(log_path, sizeof log_path, work, 0, ".log");
        truncate_file(log_path, (int64_t)k);
        bool crash = (k - last->pos) % 2 == 1;
        if (crash)
            remove_clean(work);
        snprintf(g_case, sizeof g_case, "%s log, index interval %u, cut at byte %" PRIu64 " (%s)",
                 sl_codec_name(codec), index_interval, k, crash ? "crash" : "clean");

        notes nt;
        sl_log *log = open_log(work, &cfg, false, &nt);
        if (sl_log_end_offset(log) != TORN_LAST_BASE)
            fail_msg("%s: end offset %" PRId64 ", expected %d", g_case, sl_log_end_offset(log),
                     TORN_LAST_BASE);
        assert_int_equal(tu_file_size(log_path), (int64_t)last->pos);
        if (k > last->pos && !strstr(nt.all, "truncated"))
            fail_msg("%s: no notification of the truncation", g_case);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), TORN_LAST_BASE);

        /* The new batch takes the lost offsets, in another lane than the lost
         * batch, so a stale lane run or time entry would show. */
        tu_append(log, TORN_LAST_BASE, 7, 7, VSIZE, appended_ts, "", codec);
        assert_int_equal(sl_log_end_offset(log), TORN_LAST_BASE + 7);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), TORN_LAST_BASE + 7);
        int64_t base_lane = tu_read_all(log, 0, "", VSIZE);
        if (base_lane != 27)
            fail_msg("%s: base-lane read after the append returned %" PRId64
                     " records, expected 27 (a lane run of the lost batch survived)",
                     g_case, base_lane);
        assert_int_equal(tu_read_all(log, 0, "a", VSIZE), 10);
        assert_int_equal(tu_read_all(log, 0, "b", VSIZE), 0);
        assert_int_equal(tu_read_all(log, TORN_LAST_BASE, "", VSIZE), 7);
        expect_time(log, TS0 + 5, 5);
        expect_time(log, appended_ts + TORN_LAST_BASE + 3, TORN_LAST_BASE + 3);
        expect_time(log, appended_ts + TORN_LAST_BASE + 100, TORN_LAST_BASE + 7);
        sl_log_close(log);

        sl_log_verify_report rep = verify_dir(work);
        if (rep.damaged)
            fail_msg("%s: verify after recovery: %s", g_case, rep.where);
        tu_check_companions(work, g_case);
        assert_int_equal(rep.next_offset, TORN_LAST_BASE + 7);
        assert_int_equal(rep.records, TORN_LAST_BASE + 7);
        tu_rmdir(work);
    }
    free(b);
    tu_rmdir(pristine);
}

static void test_torn_tail_none(void **state)
{
    (void)state;
    torn_tail(SL_CODEC_NONE, 128);
}

static void test_torn_tail_zstd(void **state)
{
    (void)state;
    torn_tail(SL_CODEC_ZSTD, 128);
}

static void test_torn_tail_sparse_index(void **state)
{
    (void)state;
    torn_tail(SL_CODEC_NONE, 1 << 20);
    torn_tail(SL_CODEC_ZSTD, 1 << 20);
}

/* ---- garbage after the last batch ----------------------------------------- */

enum { GARBAGE_RANDOM, GARBAGE_HUGE_HEADER, GARBAGE_BAD_CRC, GARBAGE_REPLAY, GARBAGE_KINDS };

static const char *const garbage_names[] = {"random bytes", "header with a huge length",
                                            "whole batch with a bad CRC",
                                            "copy of an earlier batch"};

static void append_garbage(const char *log_path, int kind, const batch_loc *first, int64_t end)
{
    uint8_t buf[4096];
    size_t len = 0;
    switch (kind) {
    case GARBAGE_RANDOM:
        len = 3000;
        fill_random(buf, len);
        break;
    case GARBAGE_HUGE_HEADER: {
        /* Looks like the next batch but claims 48 MiB that are not there. */
        fill_random(buf, 600);
        memset(buf, 0, SL_BATCH_HEADER_SIZE);
        sl_be64_put(buf + SL_BATCH_OFF_BASE_OFFSET, (uint64_t)end);
        sl_be32_put(buf + SL_BATCH_OFF_LENGTH, 48u << 20);
        buf[SL_BATCH_OFF_MAGIC] = 2;
        sl_be32_put(buf + SL_BATCH_OFF_LAST_DELTA, 4);
        sl_be64_put(buf + SL_BATCH_OFF_BASE_TS, (uint64_t)(TS0 + end));
        sl_be64_put(buf + SL_BATCH_OFF_MAX_TS, (uint64_t)(TS0 + end + 4));
        sl_be32_put(buf + SL_BATCH_OFF_COUNT, 5);
        len = 600;
        break;
    }
    case GARBAGE_BAD_CRC:
    case GARBAGE_REPLAY: {
        /* The first batch again: as is (offsets going backwards), or with the
         * next offset and one record byte changed (the CRC no longer fits). */
        size_t flen;
        uint8_t *data = tu_read_file(log_path, &flen);
        assert_true(first->size <= sizeof buf);
        memcpy(buf, data + first->pos, first->size);
        free(data);
        len = first->size;
        if (kind == GARBAGE_BAD_CRC) {
            sl_be64_put(buf + SL_BATCH_OFF_BASE_OFFSET, (uint64_t)end);
            buf[len - 3] ^= 0x10;
        }
        break;
    }
    default:
        fail();
    }
    append_file(log_path, buf, len);
}

static void test_garbage_after_last_batch(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(1 << 20);
    char *pristine = tu_tmpdir();
    build_torn_log(pristine, &cfg, SL_CODEC_NONE);
    char log_path[PATH_MAX_LEN];
    seg_file(log_path, sizeof log_path, pristine, 0, ".log");
    int64_t good_size = tu_file_size(log_path);
    size_t nb;
    batch_loc *b = scan_batches(log_path, &nb);

    for (int kind = 0; kind < GARBAGE_KINDS; kind++) {
        for (int crash = 0; crash < 2; crash++) {
            char *work = tu_tmpdir();
            copy_dir(pristine, work);
            seg_file(log_path, sizeof log_path, work, 0, ".log");
            append_garbage(log_path, kind, &b[0], TORN_END);
            snprintf(g_case, sizeof g_case, "%s after the last batch (%s)", garbage_names[kind],
                     crash ? "crash" : "clean");
            assert_true(tu_file_size(log_path) > good_size);
            if (crash)
                remove_clean(work);
            sl_log_verify_report rep = verify_dir(work);
            if (!rep.damaged)
                fail_msg("%s: verify did not notice the garbage", garbage_names[kind]);

            notes nt;
            sl_log *log = open_log(work, &cfg, false, &nt);
            if (tu_file_size(log_path) != good_size)
                fail_msg("%s (%s): .log is %" PRId64 " bytes after open, expected %" PRId64,
                         garbage_names[kind], crash ? "crash" : "clean", tu_file_size(log_path),
                         good_size);
            assert_int_equal(sl_log_end_offset(log), TORN_END);
            if (!strstr(nt.all, "truncated"))
                fail_msg("%s: no notification of the truncation", garbage_names[kind]);
            assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), TORN_END);
            tu_append(log, TORN_END, 9, 3, VSIZE, TS0, "b", SL_CODEC_ZSTD);
            assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), TORN_END + 9);
            assert_int_equal(tu_read_all(log, 0, "b", VSIZE), 12 + 9);
            sl_log_close(log);
            rep = verify_clean(work);
            assert_int_equal(rep.next_offset, TORN_END + 9);
            tu_rmdir(work);
        }
    }
    free(b);
    tu_rmdir(pristine);
}

/* ---- flipped bits ---------------------------------------------------------- */

/* Batches of 8 records from offset first, lanes changing every 10 batches,
 * every third batch zstd. */
static void build_batches(sl_log *log, int64_t first, int batches, sl_codec codec)
{
    static const char *const lanes[] = {"", "x", "", "y"};
    for (int i = 0; i < batches; i++)
        tu_append(log, first + i * 8, 8, 8, VSIZE, TS0, lanes[(i / 10) % 4],
                  i % 3 == 2 ? SL_CODEC_ZSTD : codec);
}

static void flip_in_last_segment(sl_codec codec)
{
    sl_log_config cfg = tu_config(1 << 20);
    char *dir = tu_tmpdir();
    sl_log *log = open_log(dir, &cfg, false, NULL);
    build_batches(log, 0, 60, codec);
    int64_t end = sl_log_end_offset(log);
    sl_log_close(log);

    char log_path[PATH_MAX_LEN];
    seg_file(log_path, sizeof log_path, dir, 0, ".log");
    int64_t size = tu_file_size(log_path);
    size_t nb;
    batch_loc *b = scan_batches(log_path, &nb);
    assert_int_equal(nb, 60);
    const batch_loc victim = b[30];
    free(b);
    /* A bit in the records, so the header still parses and only the CRC
     * (or the zstd frame) can tell. */
    flip_bit(log_path, victim.pos + SL_BATCH_HEADER_SIZE + (victim.size - SL_BATCH_HEADER_SIZE) / 2,
             3);

    snprintf(g_case, sizeof g_case, "%s segment, bit flipped at byte %" PRIu64,
             sl_codec_name(codec),
             victim.pos + SL_BATCH_HEADER_SIZE + (victim.size - SL_BATCH_HEADER_SIZE) / 2);
    /* verify names the batch. */
    sl_log_verify_report rep = verify_dir(dir);
    assert_true(rep.damaged);
    char want[128];
    snprintf(want, sizeof want, "byte %" PRIu64 ":", victim.pos);
    if (!strstr(rep.where, want) || !strstr(rep.where, "00000000000000000000.log"))
        fail_msg("verify says \"%s\", expected the .log and \"%s\"", rep.where, want);

    /* A crash copy: the active segment is CRC-checked from its start. */
    char *crash = tu_tmpdir();
    copy_dir(dir, crash);
    remove_clean(crash);

    /* A normal open after a clean close only tail-checks: nothing is lost,
     * and a reader reaching the batch gets SL_ECORRUPT, not garbage. */
    notes nt;
    log = open_log(dir, &cfg, false, &nt);
    assert_int_equal(sl_log_end_offset(log), end);
    assert_int_equal(tu_file_size(log_path), size);
    expect_records(log, 0, victim.base);
    expect_records(log, victim.base / 2, victim.base - victim.base / 2);
    sl_log_reader *r;
    sl_error err = {0};
    assert_int_equal(sl_log_reader_open(log, 0, NULL, &r, &err), 0);
    sl_record rec;
    int rc;
    int64_t n = 0;
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
        assert_int_equal(rec.offset, n);
        n++;
    }
    assert_int_equal(rc, SL_ECORRUPT);
    assert_int_equal(n, victim.base);
    if (!strstr(err.msg, want))
        fail_msg("reader error \"%s\" does not name \"%s\"", err.msg, want);
    /* Asking again does not skip the damage. */
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_ECORRUPT);
    sl_log_reader_close(r);
    /* A reader starting at the damaged batch fails the same way. */
    assert_int_equal(sl_log_reader_open(log, victim.base + 1, NULL, &r, &err), 0);
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_ECORRUPT);
    sl_log_reader_close(r);
    sl_log_close(log);
    assert_true(verify_dir(dir).damaged);

    /* Full recovery cuts at the damaged batch. */
    log = open_log(dir, &cfg, true, &nt);
    assert_true(nt.n > 0);
    if (!strstr(nt.all, want))
        fail_msg("notifications do not name \"%s\": %s", want, nt.all);
    assert_int_equal(sl_log_end_offset(log), victim.base);
    assert_int_equal(tu_file_size(log_path), (int64_t)victim.pos);
    assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), victim.base);
    tu_append(log, victim.base, 20, 4, VSIZE, TS0, "x", codec);
    assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), victim.base + 20);
    sl_log_close(log);
    rep = verify_clean(dir);
    assert_int_equal(rep.next_offset, victim.base + 20);
    assert_int_equal(rep.records, victim.base + 20);

    /* After a crash, a normal open CRC-checks the whole active segment. */
    log = open_log(crash, &cfg, false, &nt);
    assert_int_equal(sl_log_end_offset(log), victim.base);
    assert_true(strstr(nt.all, want) != NULL);
    seg_file(log_path, sizeof log_path, crash, 0, ".log");
    assert_int_equal(tu_file_size(log_path), (int64_t)victim.pos);
    assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), victim.base);
    sl_log_close(log);
    verify_clean(crash);

    tu_rmdir(crash);
    tu_rmdir(dir);
}

static void test_flip_last_segment_none(void **state)
{
    (void)state;
    flip_in_last_segment(SL_CODEC_NONE);
}

static void test_flip_last_segment_zstd(void **state)
{
    (void)state;
    flip_in_last_segment(SL_CODEC_ZSTD);
}

static void test_flip_closed_segment_full_recovery(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(64 << 10);
    char *dir = tu_tmpdir();
    sl_log *log = open_log(dir, &cfg, false, NULL);
    build_batches(log, 0, 300, SL_CODEC_NONE);
    int64_t end = sl_log_end_offset(log);
    sl_log_close(log);
    size_t nseg;
    int64_t *bases = list_bases(dir, &nseg);
    assert_true(nseg >= 4);

    char p[PATH_MAX_LEN];
    seg_file(p, sizeof p, dir, bases[1], ".log");
    size_t nb;
    batch_loc *b = scan_batches(p, &nb);
    assert_true(nb > 10);
    const batch_loc victim = b[nb / 2];
    free(b);
    flip_bit(p, victim.pos + victim.size - 20, 6);

    sl_log_verify_report rep = verify_dir(dir);
    assert_true(rep.damaged);
    char want[128], seg_name[64];
    snprintf(want, sizeof want, "byte %" PRIu64 ":", victim.pos);
    snprintf(seg_name, sizeof seg_name, "%020" PRId64 ".log", bases[1]);
    if (!strstr(rep.where, want) || !strstr(rep.where, seg_name))
        fail_msg("verify says \"%s\", expected %s and \"%s\"", rep.where, seg_name, want);

    /* A normal open tail-checks closed segments only: nothing is cut. */
    notes nt;
    log = open_log(dir, &cfg, false, &nt);
    assert_int_equal(sl_log_end_offset(log), end);
    assert_int_equal(sl_log_segment_count(log), nseg);
    expect_records(log, 0, victim.base);
    sl_log_close(log);

    log = open_log(dir, &cfg, true, &nt);
    if (sl_log_end_offset(log) != victim.base)
        fail_msg("end offset %" PRId64 " after full recovery, expected %" PRId64 "; notes:\n%s",
                 sl_log_end_offset(log), victim.base, nt.all);
    assert_int_equal(sl_log_segment_count(log), 2);
    assert_true(strstr(nt.all, want) != NULL);
    assert_true(strstr(nt.all, "removed") != NULL);
    assert_int_equal(tu_file_size(p), (int64_t)victim.pos);
    static const char *const exts[] = {".log", ".index", ".timeindex", ".lanes"};
    for (size_t i = 0; i < nseg; i++) {
        for (size_t e = 0; e < 4; e++) {
            seg_file(p, sizeof p, dir, bases[i], exts[e]);
            if (file_exists(p) != (i < 2))
                fail_msg("%s %s after full recovery", p, i < 2 ? "is missing" : "still exists");
        }
    }
    assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), victim.base);
    tu_append(log, victim.base, 30, 6, VSIZE, TS0, "y", SL_CODEC_ZSTD);
    assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), victim.base + 30);
    assert_int_equal(tu_read_all(log, victim.base, "y", VSIZE), 30);
    sl_log_close(log);
    rep = verify_clean(dir);
    assert_int_equal(rep.segments, 2);
    assert_int_equal(rep.next_offset, victim.base + 30);
    free(bases);
    tu_rmdir(dir);
}

/* ---- indexes and lane sidecars --------------------------------------------- */

typedef struct lane_counts {
    int64_t base, a, b;
} lane_counts;

/* Several segments of records in lanes "", "a" and "b" (runs of 40 records,
 * batches of 8, codecs alternating), timestamps TS0 + offset. */
static int64_t build_lanes_log(const char *dir, const sl_log_config *cfg, lane_counts *lc)
{
    static const char *const lanes[] = {"", "a", "b", "a"};
    memset(lc, 0, sizeof *lc);
    sl_log *log = open_log(dir, cfg, false, NULL);
    int64_t off = 0;
    for (int g = 0; g < 70; g++) {
        const char *lane = lanes[g % 4];
        tu_append(log, off, 40, 8, VSIZE, TS0, lane, g % 2 ? SL_CODEC_ZSTD : SL_CODEC_NONE);
        off += 40;
        int64_t *c = !*lane ? &lc->base : lane[0] == 'a' ? &lc->a : &lc->b;
        *c += 40;
    }
    sl_log_close(log);
    return off;
}

/* Offset lookups, lane-filtered reads and time lookups all over the log. */
static void check_lookups(sl_log *log, int64_t end, const lane_counts *lc, int step)
{
    assert_int_equal(sl_log_end_offset(log), end);
    for (int64_t o = 0; o < end; o += step)
        expect_records(log, o, o + 3 < end ? 3 : end - o);
    assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), end);
    assert_int_equal(tu_read_all(log, 0, "", VSIZE), lc->base);
    assert_int_equal(tu_read_all(log, 0, "a", VSIZE), lc->a);
    assert_int_equal(tu_read_all(log, 0, "b", VSIZE), lc->b);
    /* From inside a run of "a" (records 40-79 are lane "a"). */
    assert_int_equal(tu_read_all(log, 50, "a", VSIZE), lc->a - 10);
    for (int64_t o = 0; o < end; o += step * 3)
        expect_time(log, TS0 + o, o);
    expect_time(log, 0, 0);
    expect_time(log, TS0 + end, end);
}

static const char *const companions[] = {".index", ".timeindex", ".lanes"};

typedef struct saved_file {
    uint8_t *data;
    size_t len;
} saved_file;

static void test_deleted_companions_rebuilt(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(64 << 10);
    cfg.index_interval_bytes = 1024;
    char *pristine = tu_tmpdir();
    lane_counts lc;
    int64_t end = build_lanes_log(pristine, &cfg, &lc);
    size_t nseg;
    int64_t *bases = list_bases(pristine, &nseg);
    assert_true(nseg >= 4);

    for (int crash = 0; crash < 2; crash++) {
        char *dir = tu_tmpdir();
        copy_dir(pristine, dir);
        if (crash)
            remove_clean(dir);
        snprintf(g_case, sizeof g_case, "companions deleted (%s)", crash ? "crash" : "clean");
        saved_file *saved = calloc(nseg * 3, sizeof *saved);
        assert_non_null(saved);
        char p[PATH_MAX_LEN];
        for (size_t i = 0; i < nseg; i++) {
            for (int e = 0; e < 3; e++) {
                seg_file(p, sizeof p, dir, bases[i], companions[e]);
                saved[i * 3 + e].data = tu_read_file(p, &saved[i * 3 + e].len);
                assert_int_equal(unlink(p), 0);
            }
        }
        notes nt;
        sl_log *log = open_log(dir, &cfg, false, &nt);
        assert_int_equal(sl_log_segment_count(log), nseg);
        for (size_t i = 0; i < nseg; i++) {
            for (int e = 0; e < 3; e++) {
                seg_file(p, sizeof p, dir, bases[i], companions[e]);
                if (!file_exists(p))
                    fail_msg("%s was not rebuilt", p);
            }
        }
        assert_true(strstr(nt.all, "rebuilt") != NULL);
        check_lookups(log, end, &lc, 5);
        sl_log_close(log);

        /* Rebuilding is deterministic: the same bytes as written by appending. */
        for (size_t i = 0; i < nseg; i++) {
            for (int e = 0; e < 3; e++) {
                seg_file(p, sizeof p, dir, bases[i], companions[e]);
                size_t len;
                uint8_t *now = tu_read_file(p, &len);
                if (len != saved[i * 3 + e].len || memcmp(now, saved[i * 3 + e].data, len) != 0)
                    fail_msg("%s: rebuilt file differs from the original (%zu vs %zu bytes)", p,
                             len, saved[i * 3 + e].len);
                free(now);
                free(saved[i * 3 + e].data);
            }
        }
        free(saved);
        sl_log_verify_report rep = verify_clean(dir);
        assert_int_equal(rep.segments, nseg);
        assert_int_equal(rep.next_offset, end);
        tu_rmdir(dir);
    }
    free(bases);
    tu_rmdir(pristine);
}

enum { DAMAGE_RANDOM, DAMAGE_ZERO, DAMAGE_ODD, DAMAGE_KINDS };
static const char *const damage_names[] = {"random bytes", "zeros", "odd size"};

static void damage_file(const char *path, int kind)
{
    int64_t size = tu_file_size(path);
    assert_true(size >= 0);
    uint8_t *buf = calloc(1, (size_t)size + 1);
    assert_non_null(buf);
    switch (kind) {
    case DAMAGE_RANDOM:
        fill_random(buf, (size_t)size);
        write_file(path, buf, (size_t)size);
        break;
    case DAMAGE_ZERO:
        write_file(path, buf, (size_t)size);
        break;
    case DAMAGE_ODD:
        truncate_file(path, size > 2 ? (size / 2) | 1 : 1);
        break;
    default:
        fail();
    }
    free(buf);
}

static void damaged_companion(const char *ext)
{
    sl_log_config cfg = tu_config(64 << 10);
    cfg.index_interval_bytes = 1024;
    char *pristine = tu_tmpdir();
    lane_counts lc;
    int64_t end = build_lanes_log(pristine, &cfg, &lc);
    size_t nseg;
    int64_t *bases = list_bases(pristine, &nseg);

    for (int kind = 0; kind < DAMAGE_KINDS; kind++) {
        for (int crash = 0; crash < 2; crash++) {
            char *dir = tu_tmpdir();
            copy_dir(pristine, dir);
            if (crash)
                remove_clean(dir);
            char p[PATH_MAX_LEN];
            for (size_t i = 0; i < nseg; i++) {
                seg_file(p, sizeof p, dir, bases[i], ext);
                damage_file(p, kind);
            }
            snprintf(g_case, sizeof g_case, "%s: %s (%s)", ext, damage_names[kind],
                     crash ? "crash" : "clean");
            sl_log *log = open_log(dir, &cfg, false, NULL);
            assert_int_equal(sl_log_segment_count(log), nseg);
            check_lookups(log, end, &lc, 3);
            sl_log_close(log);
            sl_log_verify_report rep = verify_dir(dir);
            if (rep.damaged)
                fail_msg("%s: verify after reopen: %s", g_case, rep.where);
            tu_check_companions(dir, g_case);
            assert_int_equal(rep.next_offset, end);

            /* Still right when reopened once more, and retention, which goes
             * by each segment's newest timestamp, deletes nothing of records
             * written within the hour. */
            sl_log_config keep = cfg;
            keep.retention_ms = 3600 * 1000;
            log = open_log(dir, &keep, false, NULL);
            check_lookups(log, end, &lc, 17);
            int deleted = -1;
            sl_error err = {0};
            assert_int_equal(sl_log_retain(log, TS0 + end + 1000, &deleted, &err), 0);
            if (deleted != 0)
                fail_msg("%s: retention deleted %d segments of fresh records", g_case, deleted);
            assert_int_equal(sl_log_start_offset(log), 0);
            /* A hundred days on, every record has expired. */
            assert_int_equal(sl_log_retain(log, TS0 + 100ll * 86400 * 1000, &deleted, &err), 0);
            if (sl_log_start_offset(log) != end)
                fail_msg("%s: retention 100 days later kept offsets from %" PRId64 " (end %" PRId64
                         ")",
                         g_case, sl_log_start_offset(log), end);
            sl_log_close(log);
            tu_rmdir(dir);
        }
    }
    free(bases);
    tu_rmdir(pristine);
}

static void test_garbage_index(void **state)
{
    (void)state;
    damaged_companion(".index");
}

static void test_garbage_timeindex(void **state)
{
    (void)state;
    damaged_companion(".timeindex");
}

static void test_garbage_lanes(void **state)
{
    (void)state;
    damaged_companion(".lanes");
}

/* ---- crash states taken from a live log ---------------------------------- */

/* A copy of the partition taken while the log is open is what a kill -9 at
 * that moment leaves on disk (the page cache survives a killed process):
 * no .clean, preallocated indexes, possibly a fresh empty segment after a
 * roll. Cutting the copy's active .log back to an earlier batch boundary adds
 * a lost page cache: the companions may then describe batches that are gone.
 * Every such state must reopen to exactly the batches that are still there. */
static void test_snapshots_of_live_log(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(24 << 10);
    cfg.index_interval_bytes = 512;
    static const char *const lanes[] = {"", "", "a", "b"};
    int batches = getenv("SLUICE_SOAK") ? 500 : 120;
    char *dir = tu_tmpdir();
    sl_log *log = open_log(dir, &cfg, false, NULL);
    int64_t off = 0;
    for (int i = 0; i < batches; i++) {
        int n = 1 + (int)(rnd() % 17);
        const char *lane = lanes[(i / 3) % 4];
        tu_append(log, off, n, n, VSIZE, TS0, lane, i % 4 == 1 ? SL_CODEC_ZSTD : SL_CODEC_NONE);
        off += n;
        if (i % 7 == 6) {
            sl_error err = {0};
            assert_int_equal(sl_log_roll(log, &err), 0); /* an empty active segment */
        }
        if (i % 2 == 0 && i % 7 != 6)
            continue;
        for (int lost = 0; lost < 2; lost++) {
            char *snap = tu_tmpdir();
            copy_dir(dir, snap);
            int64_t expect_end = off;
            size_t nseg;
            int64_t *bases = list_bases(snap, &nseg);
            char p[PATH_MAX_LEN];
            seg_file(p, sizeof p, snap, bases[nseg - 1], ".log");
            if (lost) {
                /* Lose the last one or two whole batches of the active segment. */
                size_t nb;
                batch_loc *b = scan_batches(p, &nb);
                if (nb == 0) {
                    free(b);
                    free(bases);
                    tu_rmdir(snap);
                    continue;
                }
                size_t keep = nb > 1 && rnd() % 2 ? nb - 2 : nb - 1;
                truncate_file(p, (int64_t)b[keep].pos);
                expect_end = b[keep].base;
                free(b);
            }
            free(bases);
            snprintf(g_case, sizeof g_case, "snapshot after batch %d%s (end %" PRId64 ")", i,
                     lost ? ", last batches lost" : "", expect_end);
            notes nt;
            sl_log *rec = open_log(snap, &cfg, false, &nt);
            if (sl_log_end_offset(rec) != expect_end)
                fail_msg("%s: end offset %" PRId64 " after recovery", g_case,
                         sl_log_end_offset(rec));
            assert_int_equal(tu_read_all(rec, 0, NULL, VSIZE), expect_end);
            int64_t by_lane = 0;
            for (int l = 1; l < 4; l++)
                by_lane += tu_read_all(rec, 0, lanes[l], VSIZE);
            assert_int_equal(by_lane, expect_end);
            expect_time(rec, TS0 + expect_end / 2, expect_end / 2);
            /* The recovered log goes on: new batches in a new lane. */
            tu_append(rec, expect_end, 9, 3, VSIZE, TS0 + 10000000, "c", SL_CODEC_NONE);
            assert_int_equal(tu_read_all(rec, 0, "c", VSIZE), 9);
            expect_time(rec, TS0 + 10000000 + expect_end, expect_end);
            sl_log_close(rec);
            sl_log_verify_report rep = verify_clean(snap);
            assert_int_equal(rep.next_offset, expect_end + 9);
            tu_rmdir(snap);
        }
    }
    sl_log_close(log);
    verify_clean(dir);
    tu_rmdir(dir);
}

/* ---- empty and stray files -------------------------------------------------- */

static void test_empty_active_segment(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(1 << 20);
    for (int crash = 0; crash < 2; crash++) {
        char *dir = tu_tmpdir();
        sl_log *log = open_log(dir, &cfg, false, NULL);
        tu_append(log, 0, 50, 10, VSIZE, TS0, "a", SL_CODEC_NONE);
        sl_error err = {0};
        assert_int_equal(sl_log_roll(log, &err), 0);
        assert_int_equal(sl_log_segment_count(log), 2);
        sl_log_close(log);
        char p[PATH_MAX_LEN];
        seg_file(p, sizeof p, dir, 50, ".log");
        assert_int_equal(tu_file_size(p), 0);
        if (crash)
            remove_clean(dir);
        snprintf(g_case, sizeof g_case, "empty active segment (%s)", crash ? "crash" : "clean");

        log = open_log(dir, &cfg, false, NULL);
        assert_int_equal(sl_log_end_offset(log), 50);
        assert_int_equal(sl_log_segment_count(log), 2);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 50);
        assert_int_equal(tu_read_all(log, 50, NULL, VSIZE), 0);
        expect_time(log, TS0 + 1000, 50);
        tu_append(log, 50, 10, 5, VSIZE, TS0, "", SL_CODEC_NONE);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 60);
        assert_int_equal(tu_read_all(log, 0, "", VSIZE), 10);
        assert_int_equal(tu_read_all(log, 0, "a", VSIZE), 50);
        sl_log_close(log);
        sl_log_verify_report rep = verify_clean(dir);
        assert_int_equal(rep.segments, 2);
        assert_int_equal(rep.next_offset, 60);
        tu_rmdir(dir);
    }
}

/* The active .log lost all its bytes (a file system that kept the
 * companions but not the data) while .clean says the shutdown was clean. */
static void test_active_log_emptied(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(1 << 20);
    cfg.index_interval_bytes = 256;
    for (int crash = 0; crash < 2; crash++) {
        char *dir = tu_tmpdir();
        sl_log *log = open_log(dir, &cfg, false, NULL);
        tu_append(log, 0, 40, 10, VSIZE, TS0, "a", SL_CODEC_NONE);
        sl_log_close(log);
        char p[PATH_MAX_LEN];
        seg_file(p, sizeof p, dir, 0, ".log");
        truncate_file(p, 0);
        if (crash)
            remove_clean(dir);
        snprintf(g_case, sizeof g_case, "active .log emptied (%s)", crash ? "crash" : "clean");

        log = open_log(dir, &cfg, false, NULL);
        assert_int_equal(sl_log_end_offset(log), 0);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 0);
        expect_time(log, TS0, 0);
        tu_append(log, 0, 20, 10, VSIZE, TS0 + 5000, "", SL_CODEC_NONE);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 20);
        int64_t base_lane = tu_read_all(log, 0, "", VSIZE);
        if (base_lane != 20)
            fail_msg("%s: base-lane read returned %" PRId64 " of the 20 new records: the "
                     "lane sidecar still describes the lost bytes",
                     g_case, base_lane);
        assert_int_equal(tu_read_all(log, 0, "a", VSIZE), 0);
        expect_time(log, TS0 + 5003, 3);
        sl_log_close(log);
        sl_log_verify_report rep = verify_dir(dir);
        if (rep.damaged)
            fail_msg("%s: verify: %s", g_case, rep.where);
        tu_check_companions(dir, g_case);
        tu_rmdir(dir);
    }
}

static void test_stray_segment_after_last(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(32 << 10);
    for (int variant = 0; variant < 4; variant++) {
        bool crash = variant & 1, far = variant & 2;
        char *dir = tu_tmpdir();
        sl_log *log = open_log(dir, &cfg, false, NULL);
        tu_append(log, 0, 600, 10, VSIZE, TS0, "", SL_CODEC_NONE);
        size_t nseg = sl_log_segment_count(log);
        assert_true(nseg >= 2);
        sl_log_close(log);
        /* As a crash right after a roll leaves it (at the end offset), or
         * further on. */
        int64_t stray = far ? 600 + 1000 : 600;
        char p[PATH_MAX_LEN];
        seg_file(p, sizeof p, dir, stray, ".log");
        write_file(p, "", 0);
        if (crash)
            remove_clean(dir);
        snprintf(g_case, sizeof g_case, "stray segment at %" PRId64 " (%s)", stray,
                 crash ? "crash" : "clean");

        log = open_log(dir, &cfg, false, NULL);
        int64_t end = sl_log_end_offset(log);
        if (!far)
            assert_int_equal(end, 600);
        else if (end != 600 && end != stray)
            fail_msg("end offset %" PRId64 " with a stray segment at %" PRId64, end, stray);
        expect_records(log, 0, 600);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 600);
        tu_append(log, end, 30, 10, VSIZE, TS0, "a", SL_CODEC_ZSTD);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 630);
        assert_int_equal(tu_read_all(log, end, "a", VSIZE), 30);
        sl_log_close(log);
        sl_log_verify_report rep = verify_clean(dir);
        assert_int_equal(rep.records, 630);
        assert_int_equal(rep.next_offset, end + 30);

        log = open_log(dir, &cfg, false, NULL);
        assert_int_equal(sl_log_end_offset(log), end + 30);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 630);
        sl_log_close(log);
        tu_rmdir(dir);
    }
}

/* An empty .log whose name falls inside an earlier segment's offsets holds no
 * batch, so no offset of it overlaps anything: open must drop (or ignore) that
 * file alone and keep every real segment after it. */
static void test_stray_empty_segment_inside_range(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(32 << 10);
    char *dir = tu_tmpdir();
    sl_log *log = open_log(dir, &cfg, false, NULL);
    tu_append(log, 0, 600, 10, VSIZE, TS0, "", SL_CODEC_NONE);
    size_t nseg = sl_log_segment_count(log);
    assert_true(nseg >= 3);
    sl_log_close(log);
    char p[PATH_MAX_LEN];
    seg_file(p, sizeof p, dir, 5, ".log");
    write_file(p, "", 0);
    snprintf(g_case, sizeof g_case, "empty stray segment 5 inside segment 0");

    notes nt;
    log = open_log(dir, &cfg, false, &nt);
    if (sl_log_end_offset(log) != 600)
        fail_msg("%s: end offset %" PRId64 " after open, expected 600; repairs:\n%s", g_case,
                 sl_log_end_offset(log), nt.all);
    assert_int_equal(sl_log_segment_count(log), nseg);
    assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 600);
    tu_append(log, 600, 10, 10, VSIZE, TS0, "", SL_CODEC_NONE);
    sl_log_close(log);
    sl_log_verify_report rep = verify_clean(dir);
    assert_int_equal(rep.records, 610);
    tu_rmdir(dir);
}

static void test_dir_with_only_lock(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(1 << 20);
    for (int with_lock = 0; with_lock < 2; with_lock++) {
        char *dir = tu_tmpdir();
        char p[PATH_MAX_LEN];
        if (with_lock) {
            snprintf(p, sizeof p, "%s/.lock", dir);
            write_file(p, "", 0);
        }
        sl_log *log = NULL;
        sl_error err = {0};
        int rc = sl_log_open(dir, &cfg, NULL, &log, &err);
        if (rc)
            fail_msg("open: %s", err.msg);
        assert_int_equal(sl_log_start_offset(log), 0);
        assert_int_equal(sl_log_end_offset(log), 0);
        assert_int_equal(sl_log_segment_count(log), 1);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 0);
        tu_append(log, 0, 25, 5, VSIZE, TS0, "", SL_CODEC_NONE);
        assert_int_equal(tu_read_all(log, 0, NULL, VSIZE), 25);
        sl_log_close(log);
        sl_log_verify_report rep = verify_clean(dir);
        assert_int_equal(rep.segments, 1);
        assert_int_equal(rep.records, 25);
        tu_rmdir(dir);
    }

    /* No directory and no create: SL_ENOENT, nothing created. */
    char *dir = tu_tmpdir();
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s/missing", dir);
    sl_log *log = NULL;
    sl_error err = {0};
    assert_int_equal(sl_log_open(p, &cfg, NULL, &log, &err), SL_ENOENT);
    assert_false(file_exists(p));
    sl_log_verify_report rep;
    assert_true(sl_log_verify(p, &rep, &err) < 0);
    tu_rmdir(dir);
}

/* ---- sl_log_verify on healthy logs ---------------------------------------- */

static void expect_counts(const char *dir, int64_t first, int64_t next, int64_t records)
{
    size_t nseg;
    int64_t *bases = list_bases(dir, &nseg);
    uint64_t batches = 0, bytes = 0;
    for (size_t i = 0; i < nseg; i++) {
        char p[PATH_MAX_LEN];
        seg_file(p, sizeof p, dir, bases[i], ".log");
        size_t nb;
        free(scan_batches(p, &nb));
        batches += nb;
        bytes += (uint64_t)tu_file_size(p);
    }
    free(bases);
    sl_log_verify_report rep = verify_clean(dir);
    assert_int_equal(rep.segments, nseg);
    assert_int_equal(rep.batches, batches);
    assert_int_equal(rep.records, (uint64_t)records);
    assert_int_equal(rep.bytes, bytes);
    assert_int_equal(rep.first_offset, first);
    assert_int_equal(rep.next_offset, next);
    assert_false(rep.damaged);
}

static void test_verify_clean_counts(void **state)
{
    (void)state;
    sl_log_config cfg = tu_config(48 << 10);
    char *dir = tu_tmpdir();
    sl_log *log = open_log(dir, &cfg, false, NULL);
    int64_t off = 0;
    for (int g = 0; g < 40; g++) {
        int per = 1 + g % 13, n = 20 + g * 3;
        tu_append(log, off, n, per, VSIZE, TS0, g % 3 ? "" : "lane-3",
                  g % 2 ? SL_CODEC_ZSTD : SL_CODEC_NONE);
        off += n;
    }
    assert_true(sl_log_segment_count(log) >= 4);
    sl_log_close(log);
    expect_counts(dir, 0, off, off);

    /* After retention dropped the oldest segments, counts start there. */
    cfg.retention_bytes = 100 << 10;
    log = open_log(dir, &cfg, false, NULL);
    int deleted = 0;
    sl_error err = {0};
    assert_int_equal(sl_log_retain(log, TS0, &deleted, &err), 0);
    assert_true(deleted > 0);
    int64_t start = sl_log_start_offset(log);
    assert_true(start > 0);
    sl_log_close(log);
    expect_counts(dir, start, off, off - start);
    tu_rmdir(dir);
}

static int reset_case(void **state)
{
    (void)state;
    snprintf(g_case, sizeof g_case, "-");
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_torn_tail_none, reset_case),
        cmocka_unit_test_setup(test_torn_tail_zstd, reset_case),
        cmocka_unit_test_setup(test_torn_tail_sparse_index, reset_case),
        cmocka_unit_test_setup(test_garbage_after_last_batch, reset_case),
        cmocka_unit_test_setup(test_flip_last_segment_none, reset_case),
        cmocka_unit_test_setup(test_flip_last_segment_zstd, reset_case),
        cmocka_unit_test_setup(test_flip_closed_segment_full_recovery, reset_case),
        cmocka_unit_test_setup(test_deleted_companions_rebuilt, reset_case),
        cmocka_unit_test_setup(test_garbage_index, reset_case),
        cmocka_unit_test_setup(test_garbage_timeindex, reset_case),
        cmocka_unit_test_setup(test_garbage_lanes, reset_case),
        cmocka_unit_test_setup(test_snapshots_of_live_log, reset_case),
        cmocka_unit_test_setup(test_empty_active_segment, reset_case),
        cmocka_unit_test_setup(test_active_log_emptied, reset_case),
        cmocka_unit_test_setup(test_stray_segment_after_last, reset_case),
        cmocka_unit_test_setup(test_stray_empty_segment_inside_range, reset_case),
        cmocka_unit_test_setup(test_dir_with_only_lock, reset_case),
        cmocka_unit_test_setup(test_verify_clean_counts, reset_case),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
