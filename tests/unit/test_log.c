/*
 * tests/unit/test_log.c — writing the partition log (core/log/log.h): append and
 * read back across segment rolls, reopening and the clean marker, time
 * lookups, retention, codecs, big records, rolls by size and age, the error
 * paths, and recovery after a crash. Every check looks at what really
 * happened: records read back, bytes and files on disk. The read side
 * (offset lookups, lanes, tailing readers, slices) is in test_log_read.c.
 */
#include "testutil.h"

#include "core/base/crc32c.h"
#include "core/log/log_internal.h" /* to see which segments are synced */
#include "core/base/varint.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

static char *path_of(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Copies the segment files of dir (not .lock, .clean, .recovery-point) into
 * a new directory copy: what a crash at this moment would leave on disk. */
static void copy_segments(const char *dir, const char *copy)
{
    assert_int_equal(mkdir(copy, 0755), 0);
    DIR *dh = opendir(dir);
    assert_non_null(dh);
    struct dirent *e;
    while ((e = readdir(dh))) {
        if (e->d_name[0] == '.')
            continue;
        char src[4200], dst[4200];
        snprintf(src, sizeof src, "%s/%s", dir, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", copy, e->d_name);
        size_t len;
        uint8_t *buf = tu_slurp(src, &len);
        assert_non_null(buf);
        int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, buf, len), (ssize_t)len);
        close(fd);
        free(buf);
    }
    closedir(dh);
}

/* ---- round trips and reopening ------------------------------------------- */

static void test_roll_round_trip(void **state)
{
    char *root = *state;
    char *dir = path_of(root, "nested/part-0"); /* created with its parents */
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 6000 * tu_soak();
    tu_append(log, 0, n, 37, 100, 1000, "", SL_CODEC_NONE);
    assert_int_equal(sl_log_end_offset(log), n);
    assert_int_equal(sl_log_start_offset(log), 0);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), n);
    assert_int_equal(tu_read_all(log, 1234, NULL, 100), n - 1234);
    assert_int_equal(tu_read_all(log, n, NULL, 100), 0);

    tu_disk d;
    tu_disk_scan(dir, &d);
    assert_true(d.nsegs >= 8);
    assert_int_equal(sl_log_segment_count(log), d.nsegs);
    assert_int_equal(sl_log_size_bytes(log), tu_disk_bytes(&d));
    assert_int_equal(d.segs[0].base, 0);
    for (size_t s = 0; s < d.nsegs; s++) {
        assert_true(d.segs[s].size <= cfg.segment_bytes);
        assert_true(d.segs[s].size > 0);
        assert_true(tu_seg_exists(dir, d.segs[s].base, ".index"));
        assert_true(tu_seg_exists(dir, d.segs[s].base, ".timeindex"));
        assert_true(tu_seg_exists(dir, d.segs[s].base, ".lanes"));
        /* A segment rolled only when the next batch would not fit. */
        if (s + 1 < d.nsegs) {
            size_t next_first = 0;
            while (d.b[next_first].seg != s + 1)
                next_first++;
            assert_true(d.segs[s].size + d.b[next_first].size > cfg.segment_bytes);
        }
    }
    tu_dbatch *last = &d.b[d.nb - 1];
    assert_int_equal(last->base + last->lod + 1, n);
    tu_disk_free(&d);
    sl_log_close(log);
    free(dir);
}

/* Checks the offset index of every segment: entries strictly increasing,
 * each pointing at a batch with the offset it claims, the first at byte 0;
 * and the time index: timestamps strictly increasing, offsets not
 * decreasing. */
static void check_indexes(const char *dir, const tu_disk *d)
{
    for (size_t s = 0; s < d->nsegs; s++) {
        char p[4200];
        tu_seg_path(p, sizeof p, dir, d->segs[s].base, ".index");
        size_t len;
        uint8_t *ix = tu_slurp(p, &len);
        assert_non_null(ix);
        assert_int_equal(len % 8, 0);
        if (d->segs[s].size)
            assert_true(len >= 8);
        size_t bi = 0;
        while (bi < d->nb && d->b[bi].seg != s)
            bi++;
        uint32_t prel = 0, ppos = 0;
        for (size_t i = 0; i < len / 8; i++) {
            uint32_t rel = sl_be32_get(ix + 8 * i), pos = sl_be32_get(ix + 8 * i + 4);
            if (i == 0) {
                assert_int_equal(pos, 0);
            } else {
                assert_true(rel > prel);
                assert_true(pos > ppos);
            }
            while (bi < d->nb && d->b[bi].seg == s && d->b[bi].pos < pos)
                bi++;
            assert_true(bi < d->nb && d->b[bi].seg == s);
            assert_int_equal(d->b[bi].pos, pos);
            assert_int_equal(d->b[bi].base, d->segs[s].base + rel);
            prel = rel;
            ppos = pos;
        }
        free(ix);
        tu_seg_path(p, sizeof p, dir, d->segs[s].base, ".timeindex");
        uint8_t *tx = tu_slurp(p, &len);
        assert_non_null(tx);
        assert_int_equal(len % 12, 0);
        int64_t pts = INT64_MIN;
        for (size_t i = 0; i < len / 12; i++) {
            int64_t ts = (int64_t)sl_be64_get(tx + 12 * i);
            uint32_t rel = sl_be32_get(tx + 12 * i + 8);
            assert_true(ts > pts);
            if (i)
                assert_true(rel >= sl_be32_get(tx + 12 * (i - 1) + 8));
            /* The entry holds the largest timestamp up to that offset. */
            int64_t max = INT64_MIN;
            for (size_t k = 0; k < d->nb; k++)
                if (d->b[k].seg == s && d->b[k].base <= d->segs[s].base + rel &&
                    d->b[k].max_ts > max)
                    max = d->b[k].max_ts;
            assert_int_equal(ts, max);
            pts = ts;
        }
        free(tx);
    }
}

static void test_reopen_and_clean_marker(void **state)
{
    char *dir = *state;
    char *clean = path_of(dir, ".clean");
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = tu_open_log(dir, &cfg);
    assert_false(exists(clean));
    char *lock = path_of(dir, ".lock");
    assert_true(exists(lock));
    free(lock);
    tu_append(log, 0, 9000, 50, 100, 0, "", SL_CODEC_NONE);
    assert_false(exists(clean));
    size_t segs = sl_log_segment_count(log);
    assert_true(segs >= 2);
    sl_log_close(log);
    assert_true(exists(clean));

    /* The indexes are trimmed to their entries on close and agree with the
     * log; the active one was preallocated for a full segment. */
    tu_disk d;
    tu_disk_scan(dir, &d);
    check_indexes(dir, &d);
    char p[4200];
    tu_seg_path(p, sizeof p, dir, d.segs[d.nsegs - 1].base, ".index");
    int64_t isz = tu_file_size(p);
    uint64_t asz = d.segs[d.nsegs - 1].size;
    assert_true(asz < cfg.segment_bytes / 2);
    /* About one entry per 4 KiB, not the preallocated capacity. */
    assert_true(isz / 8 >= (int64_t)(asz / (4096 + 8192)));
    assert_true(isz / 8 <= (int64_t)(asz / 4096 + 1));
    uint64_t bytes = tu_disk_bytes(&d);
    size_t nseg = d.nsegs;
    tu_seg_path(p, sizeof p, dir, d.segs[nseg - 1].base, ".log");
    size_t before_len;
    uint8_t *before = tu_slurp(p, &before_len);
    tu_disk_free(&d);

    log = tu_open_log(dir, &cfg);
    assert_false(exists(clean));
    assert_int_equal(sl_log_start_offset(log), 0);
    assert_int_equal(sl_log_end_offset(log), 9000);
    assert_int_equal(sl_log_segment_count(log), segs);
    assert_int_equal(sl_log_size_bytes(log), bytes);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 9000);
    tu_append(log, 9000, 3000, 50, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 12000);
    assert_int_equal(tu_read_all(log, 8990, NULL, 100), 3010);
    sl_log_close(log);
    assert_true(exists(clean));

    /* The old active segment's bytes were kept as they were. */
    size_t after_len;
    uint8_t *after = tu_slurp(p, &after_len);
    assert_true(after_len >= before_len);
    assert_memory_equal(after, before, before_len);
    free(before);
    free(after);

    /* Open and close without appending: nothing changes, no new segment. */
    log = tu_open_log(dir, &cfg);
    sl_log_close(log);
    log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_end_offset(log), 12000);
    tu_disk_scan(dir, &d);
    assert_int_equal(sl_log_segment_count(log), d.nsegs);
    assert_int_equal(sl_log_size_bytes(log), tu_disk_bytes(&d));
    assert_int_equal(d.b[d.nb - 1].base + d.b[d.nb - 1].lod + 1, 12000);
    tu_disk_free(&d);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 12000);
    sl_log_close(log);
    tu_disk_scan(dir, &d);
    check_indexes(dir, &d);
    tu_disk_free(&d);
    free(clean);
}

/* ---- time lookup ------------------------------------------------------------ */

static int64_t brute_time(const int64_t *ts, int64_t n, int64_t q)
{
    for (int64_t i = 0; i < n; i++)
        if (ts[i] >= q)
            return i;
    return n;
}

static void check_time(sl_log *log, int64_t q, int64_t want)
{
    int64_t got = -1;
    sl_error err = {0};
    int rc = sl_log_offset_for_time(log, q, &got, &err);
    if (rc)
        fail_msg("offset_for_time(%lld): %s", (long long)q, err.msg);
    if (got != want)
        fail_msg("offset_for_time(%lld) = %lld, want %lld", (long long)q, (long long)got,
                 (long long)want);
}

/* Appends records with the given timestamps in batches of 1..40. */
static void append_with_ts(sl_log *log, const int64_t *ts, int64_t n, size_t vsize)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    int64_t i = 0;
    while (i < n) {
        int k = 1 + (int)(tu_rng() % 40);
        if (k > n - i)
            k = (int)(n - i);
        tu_append_batch(log, &b, i, k, vsize, ts + i, 0, "");
        i += k;
    }
    sl_batch_builder_free(&b);
}

static void test_time_lookup(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 20000;
    int64_t *ts = malloc((size_t)n * sizeof *ts);
    assert_non_null(ts);
    for (int64_t i = 0; i < n; i++)
        ts[i] = 1000000 + 10 * i; /* increasing, with room between */
    append_with_ts(log, ts, n, 100);
    assert_true(sl_log_segment_count(log) > 5);
    for (int pass = 0; pass < 2; pass++) {
        check_time(log, INT64_MIN, 0);
        check_time(log, 0, 0);
        check_time(log, ts[0] - 1, 0);
        check_time(log, ts[0], 0);
        for (int64_t i = 0; i < n; i += 997) {
            check_time(log, ts[i], i);         /* inside */
            check_time(log, ts[i] + 5, i + 1); /* between two records */
            check_time(log, ts[i] - 5, i);
        }
        check_time(log, ts[n - 1], n - 1);
        check_time(log, ts[n - 1] + 1, n); /* after: the end offset */
        check_time(log, INT64_MAX, n);
        sl_log_close(log);
        log = tu_open_log(dir, &cfg); /* again with the indexes from disk */
    }
    sl_log_close(log);
    free(ts);
}

/* Timestamps that jump around: the contract is the first offset whose
 * timestamp is >= ts, checked against a scan of all of them. */
static void test_time_lookup_unordered(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    cfg.index_interval_bytes = 1024;
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 20000;
    int64_t *ts = malloc((size_t)n * sizeof *ts);
    assert_non_null(ts);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = tu_rng();
        if (r % 100 == 0)
            ts[i] = 1000000 + (int64_t)(r >> 20) % 400000; /* far ahead or behind */
        else
            ts[i] = 1000000 + 10 * i + (int64_t)((r >> 8) % 5000) - 2500;
        if (i >= 12000 && i < 12600)
            ts[i] = 5000; /* a run from long ago */
        lo = ts[i] < lo ? ts[i] : lo;
        hi = ts[i] > hi ? ts[i] : hi;
    }
    append_with_ts(log, ts, n, 100);
    for (int pass = 0; pass < 2; pass++) {
        check_time(log, lo - 1, 0);
        check_time(log, lo, brute_time(ts, n, lo));
        check_time(log, hi, brute_time(ts, n, hi));
        check_time(log, hi + 1, n);
        for (int64_t i = 0; i < n; i += 997) {
            check_time(log, ts[i], brute_time(ts, n, ts[i]));
            check_time(log, ts[i] + 1, brute_time(ts, n, ts[i] + 1));
            check_time(log, ts[i] - 1, brute_time(ts, n, ts[i] - 1));
        }
        for (int k = 0; k < 400; k++) {
            int64_t q = lo - 10 + (int64_t)(tu_rng() % (uint64_t)(hi - lo + 20));
            check_time(log, q, brute_time(ts, n, q));
        }
        sl_log_close(log);
        log = tu_open_log(dir, &cfg);
    }
    sl_log_close(log);
    free(ts);
}

/* ---- retention -------------------------------------------------------------- */

static void test_retention_bytes(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    cfg.retention_bytes = 200 << 10;
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 10000;
    tu_append(log, 0, n, 20, 100, 1000, "", SL_CODEC_NONE);
    tu_disk d;
    tu_disk_scan(dir, &d);
    assert_true(d.nsegs > 10);

    /* Kafka's rule: drop the oldest segment while what remains is still at
     * least retention_bytes; never the active segment. */
    uint64_t total = tu_disk_bytes(&d);
    size_t drop = 0;
    while (drop + 1 < d.nsegs && total - d.segs[drop].size >= (uint64_t)cfg.retention_bytes) {
        total -= d.segs[drop].size;
        drop++;
    }
    assert_true(drop >= 2);

    /* A reader inside the first segment, before retention. */
    sl_log_reader *r0;
    sl_error err = {0};
    assert_int_equal(sl_log_reader_open(log, 0, NULL, &r0, &err), 0);
    sl_record rec;
    char v[256];
    for (int64_t i = 0; i < 10; i++) {
        assert_int_equal(sl_log_reader_next(r0, &rec, &err), 0);
        assert_int_equal(rec.offset, i);
    }

    int deleted = -1;
    assert_int_equal(sl_log_retain(log, 1 << 30, &deleted, &err), 0);
    assert_int_equal(deleted, drop);
    int64_t start = d.segs[drop].base;
    assert_int_equal(sl_log_start_offset(log), start);
    assert_int_equal(sl_log_end_offset(log), n);
    assert_int_equal(sl_log_segment_count(log), d.nsegs - drop);
    assert_int_equal(sl_log_size_bytes(log), total);
    assert_true(sl_log_size_bytes(log) >= (uint64_t)cfg.retention_bytes);
    /* Segments no reader holds are gone at once, with their companions. */
    static const char *const exts[] = {".log", ".index", ".timeindex", ".lanes"};
    for (size_t s = 1; s < drop; s++)
        for (size_t e = 0; e < 4; e++)
            assert_false(tu_seg_exists(dir, d.segs[s].base, exts[e]));
    for (size_t s = drop; s < d.nsegs; s++)
        assert_true(tu_seg_exists(dir, d.segs[s].base, ".log"));

    /* Below the start is out of range now. */
    sl_log_reader *r;
    assert_int_equal(sl_log_reader_open(log, start - 1, NULL, &r, &err), SL_ERANGE);
    assert_int_equal(sl_log_reader_open(log, 0, NULL, &r, &err), SL_ERANGE);
    sl_log_slice sl;
    assert_int_equal(sl_log_slice_get(log, start - 1, NULL, 1 << 20, &sl, &err), SL_ERANGE);
    assert_int_equal(tu_read_all(log, start, NULL, 100), n - start);
    int64_t at = -1;
    assert_int_equal(sl_log_offset_for_time(log, 0, &at, &err), 0);
    assert_int_equal(at, start);

    /* The early reader finishes its deleted segment, then goes on at the new
     * start. */
    int64_t want = 10;
    int rc;
    while ((rc = sl_log_reader_next(r0, &rec, &err)) == 0) {
        if (want == d.segs[1].base)
            want = start; /* the deleted segments after the first are skipped */
        if (rec.offset != want)
            fail_msg("early reader: got %lld, want %lld", (long long)rec.offset, (long long)want);
        size_t len = tu_value(v, 100, want);
        assert_int_equal(rec.value_len, len);
        assert_memory_equal(rec.value, v, len);
        want++;
    }
    assert_int_equal(rc, SL_EEOF);
    assert_int_equal(want, n);
    sl_log_reader_close(r0);
    for (size_t e = 0; e < 4; e++)
        assert_false(tu_seg_exists(dir, 0, exts[e]));

    /* Nothing more to drop. */
    assert_int_equal(sl_log_retain(log, 1 << 30, &deleted, &err), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(sl_log_start_offset(log), start);
    tu_disk_free(&d);
    sl_log_close(log);

    /* The start survives a reopen. */
    log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_start_offset(log), start);
    assert_int_equal(sl_log_end_offset(log), n);
    assert_int_equal(tu_read_all(log, start, NULL, 100), n - start);
    sl_log_close(log);
}

static void test_retention_time(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    cfg.retention_ms = 1000;
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 8000, t0 = 1700000000000;
    tu_append(log, 0, n, 25, 100, t0, "", SL_CODEC_NONE); /* record i at t0 + i */
    tu_disk d;
    tu_disk_scan(dir, &d);
    assert_true(d.nsegs > 6);
    int64_t seg_max[64];
    assert_true(d.nsegs <= 64);
    for (size_t s = 0; s < d.nsegs; s++)
        seg_max[s] = INT64_MIN;
    for (size_t i = 0; i < d.nb; i++)
        if (d.b[i].max_ts > seg_max[d.b[i].seg])
            seg_max[d.b[i].seg] = d.b[i].max_ts;

    /* Nothing is older than retention yet. */
    int deleted = -1;
    sl_error err = {0};
    assert_int_equal(sl_log_retain(log, seg_max[0] + 1000, &deleted, &err), 0);
    assert_int_equal(deleted, 0);

    /* Segments 0..2 hold only records older than now - 1000. */
    int64_t now = seg_max[2] + 1001;
    assert_int_equal(sl_log_retain(log, now, &deleted, &err), 0);
    assert_int_equal(deleted, 3);
    assert_int_equal(sl_log_start_offset(log), d.segs[3].base);
    assert_int_equal(sl_log_segment_count(log), d.nsegs - 3);
    for (size_t s = 0; s < 3; s++)
        assert_false(tu_seg_exists(dir, d.segs[s].base, ".log"));
    assert_int_equal(tu_read_all(log, d.segs[3].base, NULL, 100), n - d.segs[3].base);
    int64_t at = -1;
    assert_int_equal(sl_log_offset_for_time(log, t0, &at, &err), 0);
    assert_int_equal(at, d.segs[3].base);

    /* Far in the future everything expires, the active segment too: an
     * empty segment at the end offset remains. */
    assert_int_equal(sl_log_retain(log, t0 + 100000000, &deleted, &err), 0);
    assert_int_equal(deleted, d.nsegs - 3);
    assert_int_equal(sl_log_segment_count(log), 1);
    assert_int_equal(sl_log_start_offset(log), n);
    assert_int_equal(sl_log_end_offset(log), n);
    assert_int_equal(sl_log_size_bytes(log), 0);
    tu_disk_free(&d);
    tu_disk_scan(dir, &d);
    assert_int_equal(d.nsegs, 1);
    assert_int_equal(d.segs[0].base, n);
    assert_int_equal(d.segs[0].size, 0);
    tu_disk_free(&d);
    sl_log_reader *r;
    assert_int_equal(sl_log_reader_open(log, n - 1, NULL, &r, &err), SL_ERANGE);
    assert_int_equal(tu_read_all(log, n, NULL, 100), 0);
    assert_int_equal(sl_log_offset_for_time(log, t0, &at, &err), 0);
    assert_int_equal(at, n);

    /* Appends go on at the end offset. */
    tu_append(log, n, 300, 25, 100, t0 + 200000000, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, n, NULL, 100), 300);
    tu_disk_scan(dir, &d);
    assert_int_equal(d.nsegs, 1);
    assert_int_equal(d.segs[0].base, n);
    tu_disk_free(&d);
    sl_log_close(log);
    log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_start_offset(log), n);
    assert_int_equal(sl_log_end_offset(log), n + 300);
    sl_log_close(log);
}

/* An expired active segment cannot be rolled (out of file descriptors here,
 * a full disk in production): the expired closed segments are deleted all
 * the same, since deleting them is what frees the space. */
static void test_retention_roll_fails(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    cfg.retention_ms = 1000;
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 4000, t0 = 1700000000000;
    tu_append(log, 0, n, 25, 100, t0, "", SL_CODEC_NONE);
    size_t nsegs = sl_log_segment_count(log);
    assert_true(nsegs > 2);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int fd = dup(0);
    assert_true(fd >= 0);
    close(fd);
    lim = old;
    lim.rlim_cur = (rlim_t)fd;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int deleted = -1;
    sl_error err = {0};
    int rc = sl_log_retain(log, t0 + 100000000, &deleted, &err);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_not_equal(rc, 0);
    assert_int_equal(deleted, (int)nsegs - 1);
    assert_int_equal(sl_log_segment_count(log), 1);
    assert_int_equal(sl_log_end_offset(log), n);
    sl_log_close(log);
}

/* ---- codecs and big records ----------------------------------------------- */

static void test_codecs(void **state)
{
    char *root = *state;
    static const char *const names[] = {"none", "zstd", "mixed"};
    uint64_t sizes[3];
    const int64_t n = 5000;
    for (int m = 0; m < 3; m++) {
        char *dir = path_of(root, names[m]);
        sl_log_config cfg = tu_config(256 << 10);
        sl_log *log = tu_open_log(dir, &cfg);
        if (m < 2) {
            tu_append(log, 0, n, 50, 300, 0, "", m ? SL_CODEC_ZSTD : SL_CODEC_NONE);
        } else {
            for (int64_t i = 0, k = 0; i < n; i += 50, k++)
                tu_append(log, i, 50, 50, 300, 0, "", k % 2 ? SL_CODEC_ZSTD : SL_CODEC_NONE);
        }
        assert_int_equal(tu_read_all(log, 0, NULL, 300), n);
        assert_int_equal(tu_read_all(log, 2525, NULL, 300), n - 2525);
        sizes[m] = sl_log_size_bytes(log);
        tu_disk d;
        tu_disk_scan(dir, &d);
        assert_int_equal(tu_disk_bytes(&d), sizes[m]);
        assert_int_equal(d.nb, n / 50);
        for (size_t i = 0; i < d.nb; i++) {
            int want = m == 0 ? 0 : m == 1 ? 4 : (i % 2 ? 4 : 0);
            assert_int_equal(d.b[i].codec, want);
        }
        tu_disk_free(&d);
        sl_log_close(log);
        log = tu_open_log(dir, &cfg);
        assert_int_equal(tu_read_all(log, 0, NULL, 300), n);
        sl_log_close(log);
        free(dir);
    }
    /* tu_value() pads with a repeating alphabet: zstd shrinks it a lot. */
    assert_true(sizes[1] * 3 < sizes[0]);
    assert_true(sizes[1] < sizes[2] && sizes[2] < sizes[0]);
}

/* Values of a given length derived from their offset, so any byte can be
 * checked after reading back. */
static void big_value(uint8_t *out, size_t len, int64_t offset)
{
    uint64_t x = 0x9E3779B97F4A7C15u * (uint64_t)(offset + 1);
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        out[i] = (i / 4096) % 2 ? (uint8_t)(x >> (8 * (i % 8))) : (uint8_t)('a' + i % 3);
    }
}

static void test_big_records(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = tu_open_log(dir, &cfg);
    const size_t mib = 1u << 20;
    /* Batches: {records, value length}; the 4 x 1 MiB batch is bigger than a
     * segment. */
    static const struct {
        int records;
        size_t len;
        sl_codec codec;
    } plan[] = {
        {3, 100, SL_CODEC_NONE},  {1, 1u << 20, SL_CODEC_NONE},       {4, 1u << 20, SL_CODEC_NONE},
        {2, 50, SL_CODEC_NONE},   {1, 1u << 20, SL_CODEC_ZSTD},       {4, 1u << 20, SL_CODEC_ZSTD},
        {5, 1000, SL_CODEC_ZSTD}, {2, (1u << 20) + 7, SL_CODEC_NONE},
    };
    const size_t nplan = sizeof plan / sizeof *plan;
    size_t lens[64];
    int64_t total = 0;
    uint8_t *v = malloc(mib + 64);
    assert_non_null(v);
    sl_batch_builder bs[2];
    sl_batch_builder_init(&bs[0], SL_CODEC_NONE, 0);
    sl_batch_builder_init(&bs[1], SL_CODEC_ZSTD, 0);
    for (size_t p = 0; p < nplan; p++) {
        sl_batch_builder *b = &bs[plan[p].codec == SL_CODEC_ZSTD];
        assert_int_equal(sl_batch_builder_reset(b, ""), 0);
        for (int k = 0; k < plan[p].records; k++) {
            big_value(v, plan[p].len, total + k);
            lens[total + k] = plan[p].len;
            assert_int_equal(sl_batch_builder_add(b, total + k, NULL, 0, v, plan[p].len), 0);
        }
        sl_batch batch;
        sl_error err = {0};
        assert_int_equal(sl_batch_builder_finish(b, &batch, &err), 0);
        int64_t base;
        assert_int_equal(sl_log_append(log, &batch, &base, &err), 0);
        assert_int_equal(base, total);
        total += plan[p].records;
    }
    sl_batch_builder_free(&bs[0]);
    sl_batch_builder_free(&bs[1]);
    assert_int_equal(sl_log_end_offset(log), total);

    for (int pass = 0; pass < 2; pass++) {
        for (int64_t from = 0; from < total; from += 3) {
            sl_log_reader *r;
            sl_error err = {0};
            assert_int_equal(sl_log_reader_open(log, from, NULL, &r, &err), 0);
            sl_record rec;
            int64_t want = from;
            int rc;
            while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
                assert_int_equal(rec.offset, want);
                assert_int_equal(rec.timestamp, want);
                assert_int_equal(rec.value_len, lens[want]);
                big_value(v, lens[want], want);
                assert_memory_equal(rec.value, v, lens[want]);
                want++;
            }
            assert_int_equal(rc, SL_EEOF);
            assert_int_equal(want, total);
            sl_log_reader_close(r);
        }
        tu_disk d;
        tu_disk_scan(dir, &d);
        assert_int_equal(d.nb, nplan);
        assert_int_equal(sl_log_size_bytes(log), tu_disk_bytes(&d));
        /* A segment passes the limit only when one batch alone is bigger. */
        for (size_t s = 0; s < d.nsegs; s++) {
            size_t in_seg = 0;
            for (size_t i = 0; i < d.nb; i++)
                in_seg += d.b[i].seg == s;
            assert_true(in_seg >= 1);
            if (d.segs[s].size > cfg.segment_bytes)
                assert_int_equal(in_seg, 1);
        }
        tu_disk_free(&d);
        sl_log_close(log);
        log = tu_open_log(dir, &cfg);
    }
    sl_log_close(log);
    free(v);
}

/* ---- roll, counts, sizes ---------------------------------------------------- */

static void test_roll_and_counts(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = tu_open_log(dir, &cfg);
    sl_error err = {0};
    assert_int_equal(sl_log_segment_count(log), 1);
    assert_int_equal(sl_log_size_bytes(log), 0);
    assert_true(tu_seg_exists(dir, 0, ".log"));
    assert_int_equal(sl_log_roll(log, &err), 0); /* empty: nothing to roll */
    assert_int_equal(sl_log_segment_count(log), 1);

    int64_t end = 0;
    for (int round = 1; round <= 5; round++) {
        tu_append(log, end, 10 * round, 7, 100, 0, "", SL_CODEC_NONE);
        end += 10 * round;
        assert_int_equal(sl_log_size_bytes(log), tu_file_sum(dir));
        assert_int_equal(sl_log_roll(log, &err), 0);
        assert_int_equal(sl_log_segment_count(log), (size_t)round + 1);
        assert_true(tu_seg_exists(dir, end, ".log"));
        char p[4200];
        tu_seg_path(p, sizeof p, dir, end, ".log");
        assert_int_equal(tu_file_size(p), 0);
        assert_int_equal(sl_log_roll(log, &err), 0); /* the new one is empty */
        assert_int_equal(sl_log_segment_count(log), (size_t)round + 1);
        assert_int_equal(sl_log_size_bytes(log), tu_file_sum(dir));
        assert_int_equal(sl_log_sync(log, &err), 0);
    }
    tu_append(log, end, 3, 3, 100, 0, "", SL_CODEC_NONE);
    tu_disk d;
    tu_disk_scan(dir, &d); /* each segment starts with the batch its name says */
    assert_int_equal(d.nsegs, 6);
    assert_int_equal(d.segs[5].base, end);
    assert_int_equal(d.b[d.nb - 1].base, end);
    assert_int_equal(sl_log_size_bytes(log), tu_disk_bytes(&d));
    tu_disk_free(&d);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), end + 3);
    sl_log_close(log);

    /* An empty active segment after a roll survives a reopen. */
    log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_roll(log, &err), 0);
    assert_int_equal(sl_log_segment_count(log), 7);
    sl_log_close(log);
    log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_segment_count(log), 7);
    assert_int_equal(sl_log_end_offset(log), end + 3);
    tu_append(log, end + 3, 4, 4, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), end + 7);
    assert_true(tu_seg_exists(dir, end + 3, ".log"));
    sl_log_close(log);
}

/* segment_ms rolls a segment once it is that old, at the next append. */
static void test_segment_age_roll(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    cfg.segment_ms = 300;
    sl_log *log = tu_open_log(dir, &cfg);
    tu_append(log, 0, 10, 10, 100, 0, "", SL_CODEC_NONE);
    tu_append(log, 10, 10, 10, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(sl_log_segment_count(log), 1);
    usleep(350 * 1000);
    tu_append(log, 20, 10, 10, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(sl_log_segment_count(log), 2);
    assert_true(tu_seg_exists(dir, 20, ".log"));
    tu_append(log, 30, 10, 10, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(sl_log_segment_count(log), 2);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 40);
    sl_log_close(log);
}

/* ---- errors ------------------------------------------------------------------- */

static void test_errors(void **state)
{
    char *root = *state;
    char *missing = path_of(root, "missing");
    char *nested = path_of(root, "a/b/c");
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = NULL, *log2 = NULL;
    sl_error err = {0};

    /* Missing directory without create. */
    assert_int_equal(sl_log_open(missing, &cfg, NULL, &log, &err), SL_ENOENT);
    assert_true(err.msg[0] != '\0');
    sl_log_open_options o = {.create = false};
    assert_int_equal(sl_log_open(missing, &cfg, &o, &log, &err), SL_ENOENT);
    assert_false(exists(missing));

    /* Bad configuration, a file instead of a directory. */
    sl_log_config bad = cfg;
    bad.segment_bytes = 0;
    o.create = true;
    assert_int_equal(sl_log_open(nested, &bad, &o, &log, &err), SL_EINVAL);
    bad = cfg;
    bad.index_interval_bytes = 0;
    assert_int_equal(sl_log_open(nested, &bad, &o, &log, &err), SL_EINVAL);
    char *file = path_of(root, "file");
    int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(sl_log_open(file, &cfg, &o, &log, &err), SL_EINVAL);

    /* Created with its parents; a second open in this process is refused. */
    assert_int_equal(sl_log_open(nested, &cfg, &o, &log, &err), 0);
    memset(&err, 0, sizeof err);
    assert_int_equal(sl_log_open(nested, &cfg, &o, &log2, &err), SL_EEXIST);
    assert_true(err.msg[0] != '\0');
    /* ...and the refusal did not disturb the first. */
    tu_append(log, 0, 100, 10, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 100);
    char *clean = path_of(nested, ".clean");
    assert_false(exists(clean));

    /* Appends that do not match their header. */
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
    assert_int_equal(sl_batch_builder_add(&b, 1, NULL, 0, "value", 5), 0);
    sl_batch batch;
    assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
    uint8_t *big = calloc(1, batch.len + 16);
    assert_non_null(big);
    memcpy(big, batch.data, batch.len);
    uint64_t size = sl_log_size_bytes(log);
    int64_t base = -7;
    sl_batch t = batch;
    t.data = big;
    static const size_t deltas[] = {1, 16};
    for (size_t i = 0; i < 2; i++) {
        t.len = batch.len + deltas[i];
        assert_int_equal(sl_log_append(log, &t, &base, &err), SL_EINVAL);
        t.len = batch.len - deltas[i];
        assert_int_equal(sl_log_append(log, &t, &base, &err), SL_EINVAL);
    }
    t.len = 20; /* not even a header */
    assert_int_equal(sl_log_append(log, &t, &base, &err), SL_EINVAL);
    t.len = batch.len;
    t.lane = "Not A Lane";
    assert_int_equal(sl_log_append(log, &t, &base, &err), SL_EINVAL);
    t.lane = "";
    big[16] = 1; /* bad magic */
    assert_true(sl_log_append(log, &t, &base, &err) < 0);
    big[16] = 2;
    assert_int_equal(base, -7);
    assert_int_equal(sl_log_end_offset(log), 100);
    assert_int_equal(sl_log_size_bytes(log), size);
    assert_int_equal(tu_file_sum(nested), size);
    /* Still writable. */
    assert_int_equal(sl_log_append(log, &t, &base, &err), 0);
    assert_int_equal(base, 100);
    assert_int_equal(sl_log_end_offset(log), 101);
    free(big);
    sl_batch_builder_free(&b);

    /* Readers and slices outside the log. */
    sl_log_reader *r = NULL;
    assert_int_equal(sl_log_reader_open(log, 102, NULL, &r, &err), SL_ERANGE);
    assert_int_equal(sl_log_reader_open(log, 1000000, NULL, &r, &err), SL_ERANGE);
    assert_int_equal(sl_log_reader_open(log, -1, NULL, &r, &err), SL_ERANGE);
    assert_int_equal(sl_log_reader_open(log, 0, "UPPER", &r, &err), SL_EINVAL);
    assert_int_equal(sl_log_reader_open(log, 101, NULL, &r, &err), 0);
    sl_record rec;
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    assert_int_equal(sl_log_reader_position(r), 101);
    sl_log_reader_close(r);
    sl_log_slice sl;
    assert_int_equal(sl_log_slice_get(log, 102, NULL, 4096, &sl, &err), SL_ERANGE);

    sl_log_close(log);
    sl_log_close(NULL);
    /* Once closed, the directory can be opened again. */
    assert_int_equal(sl_log_open(nested, &cfg, &o, &log, &err), 0);
    assert_int_equal(sl_log_end_offset(log), 101);
    assert_false(exists(clean));
    sl_log_close(log);
    assert_true(exists(clean));
    free(clean);
    free(file);
    free(missing);
    free(nested);
}

/* ---- recovery of companions ---------------------------------------------- */

static void count_notice(void *ctx, const char *msg)
{
    (void)msg;
    (*(int *)ctx)++;
}

/* A copy of a partition taken while it is open looks like a crash: no
 * .clean, preallocated indexes, and here a torn batch at the end. Opening it
 * cuts the torn bytes, says so, and keeps every whole batch. */
static void test_crash_copy(void **state)
{
    char *root = *state;
    char *dir = path_of(root, "live"), *copy = path_of(root, "copy");
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
    tu_append(log, 0, 5000, 25, 100, 0, "", SL_CODEC_NONE);
    sl_error err = {0};
    assert_int_equal(sl_log_sync(log, &err), 0);
    copy_segments(dir, copy);
    size_t nseg = sl_log_segment_count(log);
    sl_log_close(log);

    /* Tear the last batch of the copy: keep only its first 40 bytes. */
    tu_disk d;
    tu_disk_scan(copy, &d);
    const tu_dbatch *last = &d.b[d.nb - 1];
    char p[4200];
    tu_seg_path(p, sizeof p, copy, d.segs[last->seg].base, ".log");
    assert_int_equal(truncate(p, (off_t)(last->pos + 40)), 0);
    int64_t want_end = last->base;
    tu_disk_free(&d);

    int notices = 0;
    sl_log_open_options o = {.notify = count_notice, .notify_ctx = &notices};
    assert_int_equal(sl_log_open(copy, &cfg, &o, &log, &err), 0);
    assert_true(notices >= 1);
    assert_int_equal(sl_log_end_offset(log), want_end);
    assert_int_equal(sl_log_segment_count(log), nseg);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), want_end);
    tu_append(log, want_end, 500, 25, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), want_end + 500);
    sl_log_close(log);
    tu_disk_scan(copy, &d);
    check_indexes(copy, &d);
    tu_check_sidecars(copy, &d);
    tu_disk_free(&d);

    /* A clean reopen has nothing to repair or report. */
    notices = 0;
    assert_int_equal(sl_log_open(copy, &cfg, &o, &log, &err), 0);
    assert_int_equal(notices, 0);
    assert_int_equal(sl_log_end_offset(log), want_end + 500);
    sl_log_close(log);
    sl_log_verify_report rep;
    assert_int_equal(sl_log_verify(copy, &rep, &err), 0);
    if (rep.damaged)
        fail_msg("verify: %s", rep.where);
    assert_int_equal(rep.records, want_end + 500);
    free(dir);
    free(copy);
}

/* Reads the .recovery-point file: the offset below which everything was
 * fdatasync'ed; -1 when there is none. */
static int64_t recovery_point(const char *dir)
{
    char *p = path_of(dir, ".recovery-point");
    size_t len;
    uint8_t *buf = tu_slurp(p, &len);
    free(p);
    if (!buf)
        return -1;
    buf[len] = '\0';
    int64_t v = strtoll((const char *)buf, NULL, 10);
    free(buf);
    return v;
}

/* sl_log_sync() makes everything appended so far durable, however many
 * segments rolled (without syncing) since the last sync, and only then
 * moves the recovery point past them. */
static void test_sync_after_many_rolls(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(16 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
    for (int round = 0; round < 2; round++) {
        int64_t end = sl_log_end_offset(log);
        tu_append(log, end, 3000, 20, 100, 0, "", SL_CODEC_NONE); /* ~20 segments */
        assert_true(sl_log_segment_count(log) >= (size_t)(20 * (round + 1)));
        sl_error err = {0};
        assert_int_equal(sl_log_sync(log, &err), 0);
        int64_t rp = recovery_point(dir);
        for (size_t i = 0; i < log->n; i++) {
            sl_segment *sg = log->segs[i];
            if (sg->synced != sl_segment_size(sg))
                fail_msg("after sl_log_sync, segment %lld has %llu of %llu bytes synced "
                         "(recovery point %lld)",
                         (long long)sg->base, (unsigned long long)sg->synced,
                         (unsigned long long)sl_segment_size(sg), (long long)rp);
        }
        assert_int_equal(rp, log->segs[log->n - 1]->base);
    }
    sl_log_close(log);
}

/* After a crash, closed segments that were never synced get every batch
 * checked: damage in the middle of one (not its tail) is found on open, the
 * log ends before it and later segments go. */
static void test_crash_unsynced_segment_damage(void **state)
{
    char *root = *state;
    char *dir = path_of(root, "live"), *copy = path_of(root, "copy");
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
    tu_append(log, 0, 4000, 20, 100, 0, "", SL_CODEC_NONE); /* no sync at all */
    assert_true(sl_log_segment_count(log) >= 4);
    /* The crash: a copy of the files as they are now, no .clean. */
    copy_segments(dir, copy);
    sl_log_close(log);

    /* Damage a batch in the first third of segment 1. */
    tu_disk d;
    tu_disk_scan(copy, &d);
    size_t bi = 0;
    while (d.b[bi].seg != 1)
        bi++;
    bi += 3;
    assert_true(d.b[bi].seg == 1 && d.b[bi].pos + d.b[bi].size < d.segs[1].size / 3);
    char p[4200];
    tu_seg_path(p, sizeof p, copy, d.segs[1].base, ".log");
    int fd = open(p, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    uint8_t c = 0x5A;
    assert_int_equal(pwrite(fd, &c, 1, (off_t)(d.b[bi].pos + d.b[bi].size / 2)), 1);
    close(fd);

    int64_t cut = d.b[bi].base;
    tu_disk_free(&d);
    int notices = 0;
    sl_log_open_options o = {.notify = count_notice, .notify_ctx = &notices};
    sl_error err = {0};
    assert_int_equal(sl_log_open(copy, &cfg, &o, &log, &err), 0);
    assert_true(notices >= 1);
    assert_int_equal(sl_log_end_offset(log), cut);
    assert_int_equal(sl_log_segment_count(log), 2);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), cut);
    tu_append(log, cut, 100, 20, 100, 0, "", SL_CODEC_NONE);
    sl_log_close(log);
    tu_disk_scan(copy, &d); /* the later segments are gone, offsets continue */
    assert_int_equal(d.nsegs, 2);
    assert_int_equal(d.b[d.nb - 1].base + d.b[d.nb - 1].lod + 1, cut + 100);
    check_indexes(copy, &d);
    tu_disk_free(&d);
    free(dir);
    free(copy);
}

/* A closed segment whose time index was lost: reopening must rebuild what
 * the lookups and retention rely on. The largest timestamp of the segment
 * sits in its first batch here, far from its tail. */
static void test_lost_timeindex(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 3000;
    int64_t *ts = malloc((size_t)n * sizeof *ts);
    assert_non_null(ts);
    for (int64_t i = 0; i < n; i++)
        ts[i] = 1000000 + i;
    ts[0] = 9000000; /* newest record first */
    append_with_ts(log, ts, n, 100);
    assert_true(sl_log_segment_count(log) >= 3);
    check_time(log, 8000000, 0);
    sl_log_close(log);

    char p[4200];
    tu_seg_path(p, sizeof p, dir, 0, ".timeindex");
    assert_int_equal(unlink(p), 0);
    log = tu_open_log(dir, &cfg);
    check_time(log, 8000000, 0);
    check_time(log, 9000000, 0);
    check_time(log, 9000001, n);
    for (int64_t i = 1; i < n; i += 97)
        check_time(log, ts[i], brute_time(ts, n, ts[i]));
    /* Time retention must not drop the segment holding the newest record. */
    sl_log_close(log);
    cfg.retention_ms = 1000;
    log = tu_open_log(dir, &cfg);
    int deleted = -1;
    sl_error err = {0};
    assert_int_equal(sl_log_retain(log, 1000000 + n + 5000, &deleted, &err), 0);
    assert_int_equal(sl_log_start_offset(log), 0);
    assert_int_equal(deleted, 0);
    sl_log_close(log);
    free(ts);
}

/* A batch spanning INT32_MAX + 1 offsets (one record, lastOffsetDelta
 * INT32_MAX) moves the end offset by exactly that much. */
static void test_max_offset_delta(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = tu_open_log(dir, &cfg);
    tu_append(log, 0, 10, 10, 100, 0, "", SL_CODEC_NONE);
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
    char v[256];
    size_t len = tu_value(v, 100, 10);
    assert_int_equal(sl_batch_builder_add(&b, 10, NULL, 0, v, len), 0);
    sl_batch batch;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
    sl_be32_put(batch.data + SL_BATCH_OFF_LAST_DELTA, (uint32_t)INT32_MAX);
    sl_be32_put(batch.data + SL_BATCH_OFF_CRC, sl_crc32c(0, batch.data + 21, batch.len - 21));
    int64_t base = -1;
    int rc = sl_log_append(log, &batch, &base, &err);
    if (rc)
        fail_msg("append: %d %s", rc, err.msg);
    assert_int_equal(base, 10);
    assert_int_equal(sl_log_end_offset(log), 10 + (int64_t)INT32_MAX + 1);
    sl_batch_builder_free(&b);
    sl_log_close(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roll_round_trip, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_reopen_and_clean_marker, tu_tmp_setup,
                                        tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_time_lookup, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_time_lookup_unordered, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_retention_bytes, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_retention_time, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_retention_roll_fails, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_codecs, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_big_records, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_roll_and_counts, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_segment_age_roll, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_errors, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_crash_copy, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_crash_unsynced_segment_damage, tu_tmp_setup,
                                        tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_sync_after_many_rolls, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_lost_timeindex, tu_tmp_setup, tu_tmp_teardown),
        /* Last: under UBSan a failure here aborts the process. */
        cmocka_unit_test_setup_teardown(test_max_offset_delta, tu_tmp_setup, tu_tmp_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
