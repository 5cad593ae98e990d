/*
 * tests/unit/test_log.c — the partition log (core/log.h): append and read
 * back across segment rolls, offset and time lookups, reopening, retention,
 * codecs, big records, lanes and their sidecar, readers tailing a live
 * writer, zero-copy slices, and the error paths. Every check looks at what
 * really happened: records read back, bytes and files on disk.
 */
#include "testutil.h"

#include "core/crc32c.h"
#include "core/log_internal.h" /* to see which segments are synced */
#include "core/varint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

/* One .lanes sidecar entry, as core/segment.h lays it out. */
#define LANES_ENTRY 48

/* SLUICE_SOAK=N multiplies the sizes of the bigger tests. */
static int64_t soak(void)
{
    const char *s = getenv("SLUICE_SOAK");
    long v = s ? strtol(s, NULL, 10) : 0;
    return v > 1 ? v : 1;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Each test gets a fresh directory in *state, removed even when it fails. */
static int tmp_setup(void **state)
{
    *state = tu_tmpdir();
    return 0;
}

static int tmp_teardown(void **state)
{
    tu_rmdir(*state);
    return 0;
}

static sl_log *open_log(const char *dir, const sl_log_config *cfg)
{
    sl_log_open_options o = {.create = true};
    sl_log *log = NULL;
    sl_error err = {0};
    int rc = sl_log_open(dir, cfg, &o, &log, &err);
    if (rc) fail_msg("open %s: %s", dir, err.msg);
    return log;
}

static char *path_of(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void seg_path(char *out, size_t size, const char *dir, int64_t base, const char *ext)
{
    snprintf(out, size, "%s/%020lld%s", dir, (long long)base, ext);
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static int seg_exists(const char *dir, int64_t base, const char *ext)
{
    char p[4200];
    seg_path(p, sizeof p, dir, base, ext);
    return exists(p);
}

/* Reads a whole file (caller frees); NULL when it does not exist. */
static uint8_t *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    assert_non_null(buf);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return buf;
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
        if (e->d_name[0] == '.') continue;
        char src[4200], dst[4200];
        snprintf(src, sizeof src, "%s/%s", dir, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", copy, e->d_name);
        size_t len;
        uint8_t *buf = slurp(src, &len);
        assert_non_null(buf);
        int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, buf, len), (ssize_t)len);
        close(fd);
        free(buf);
    }
    closedir(dh);
}

/* What the files of a partition hold, read straight from disk. */
typedef struct dbatch {
    int64_t base;
    int32_t lod, count;
    int64_t max_ts;
    int codec;
    char lane[SL_LANE_MAX + 1];
    uint64_t pos, size;
    size_t seg;
} dbatch;

typedef struct dseg {
    int64_t base;
    uint64_t size;
} dseg;

typedef struct disk {
    dseg *segs;
    size_t nsegs;
    dbatch *b;
    size_t nb;
} disk;

static int cmp_seg(const void *a, const void *b)
{
    int64_t x = ((const dseg *)a)->base, y = ((const dseg *)b)->base;
    return (x > y) - (x < y);
}

/* Lists the *.log files (asserting their names are 20 digits), checks every
 * batch's CRC, that each segment starts with the batch its name says and
 * that offsets continue from one batch to the next. */
static void disk_scan(const char *dir, disk *d)
{
    memset(d, 0, sizeof *d);
    DIR *dh = opendir(dir);
    assert_non_null(dh);
    struct dirent *e;
    size_t cap = 0;
    while ((e = readdir(dh))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".log") != 0) continue;
        assert_int_equal(n, 24);
        int64_t base = 0;
        for (int i = 0; i < 20; i++) {
            assert_true(e->d_name[i] >= '0' && e->d_name[i] <= '9');
            base = base * 10 + (e->d_name[i] - '0');
        }
        if (d->nsegs == cap) {
            cap = cap ? cap * 2 : 16;
            d->segs = realloc(d->segs, cap * sizeof *d->segs);
            assert_non_null(d->segs);
        }
        d->segs[d->nsegs].base = base;
        d->segs[d->nsegs].size = 0;
        d->nsegs++;
    }
    closedir(dh);
    qsort(d->segs, d->nsegs, sizeof *d->segs, cmp_seg);
    size_t bcap = 0;
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    int64_t next = -1;
    for (size_t s = 0; s < d->nsegs; s++) {
        char p[4200];
        seg_path(p, sizeof p, dir, d->segs[s].base, ".log");
        size_t len;
        uint8_t *buf = slurp(p, &len);
        assert_non_null(buf);
        d->segs[s].size = len;
        if (next >= 0 && len) assert_int_equal(d->segs[s].base, next);
        size_t pos = 0;
        while (pos < len) {
            sl_batch_info in;
            sl_error err = {0};
            int rc = sl_batch_check(buf + pos, len - pos, &in, &err);
            if (rc) fail_msg("%s: byte %zu: %d %s", p, pos, rc, err.msg);
            if (pos == 0) assert_int_equal(in.base_offset, d->segs[s].base);
            if (next >= 0) assert_int_equal(in.base_offset, next);
            next = in.base_offset + in.last_offset_delta + 1;
            if (d->nb == bcap) {
                bcap = bcap ? bcap * 2 : 256;
                d->b = realloc(d->b, bcap * sizeof *d->b);
                assert_non_null(d->b);
            }
            dbatch *b = &d->b[d->nb++];
            b->base = in.base_offset;
            b->lod = in.last_offset_delta;
            b->count = in.count;
            b->max_ts = in.max_ts;
            b->codec = in.attributes & 7;
            b->pos = pos;
            b->size = sl_batch_size(&in);
            b->seg = s;
            assert_int_equal(sl_batch_lane(&br, buf + pos, b->size, b->lane, &err), 0);
            pos += b->size;
        }
        free(buf);
    }
    sl_batch_reader_free(&br);
}

static void disk_free(disk *d)
{
    free(d->segs);
    free(d->b);
    memset(d, 0, sizeof *d);
}

static uint64_t disk_bytes(const disk *d)
{
    uint64_t t = 0;
    for (size_t i = 0; i < d->nsegs; i++)
        t += d->segs[i].size;
    return t;
}

/* Appends records [first, first + n) with values tu_value(i, vsize), key
 * "k<i%7>", timestamps ts[i - first] (or ts0 + i) and lane, as one batch;
 * asserts it lands at first. */
static void append_batch(sl_log *log, sl_batch_builder *b, int64_t first, int n, size_t vsize,
                         const int64_t *ts, int64_t ts0, const char *lane)
{
    char *v = malloc(vsize + 64);
    assert_non_null(v);
    assert_int_equal(sl_batch_builder_reset(b, lane), 0);
    for (int k = 0; k < n; k++) {
        int64_t i = first + k;
        size_t len = tu_value(v, vsize, i);
        char key[16];
        int kl = snprintf(key, sizeof key, "k%d", (int)(i % 7));
        assert_int_equal(sl_batch_builder_add(b, ts ? ts[k] : ts0 + i, key, (size_t)kl, v, len), 0);
    }
    sl_batch batch;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(b, &batch, &err), 0);
    int64_t base = -1;
    if (sl_log_append(log, &batch, &base, &err))
        fail_msg("append at %lld: %s", (long long)first, err.msg);
    assert_int_equal(base, first);
    assert_int_equal(sl_log_end_offset(log), first + n);
    free(v);
}

/* Opens a reader at offset and checks the first record it returns. */
static void expect_first(sl_log *log, int64_t offset, const char *lane, int64_t want, size_t vsize,
                         char *vbuf)
{
    sl_log_reader *r;
    sl_error err = {0};
    int rc = sl_log_reader_open(log, offset, lane, &r, &err);
    if (rc) fail_msg("reader_open %lld: %s", (long long)offset, err.msg);
    sl_record rec;
    rc = sl_log_reader_next(r, &rec, &err);
    if (want < 0) {
        assert_int_equal(rc, SL_EEOF);
    } else {
        if (rc) fail_msg("reader at %lld: rc %d %s", (long long)offset, rc, err.msg);
        if (rec.offset != want)
            fail_msg("reader at %lld returned %lld, want %lld", (long long)offset,
                     (long long)rec.offset, (long long)want);
        size_t len = tu_value(vbuf, vsize, want);
        assert_int_equal(rec.value_len, len);
        assert_memory_equal(rec.value, vbuf, len);
    }
    sl_log_reader_close(r);
}

static uint64_t file_sum(const char *dir)
{
    disk d;
    disk_scan(dir, &d);
    uint64_t t = disk_bytes(&d);
    disk_free(&d);
    return t;
}

/* ---- round trips and lookups ---------------------------------------------- */

static void test_roll_round_trip(void **state)
{
    char *root = *state;
    char *dir = path_of(root, "nested/part-0"); /* created with its parents */
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = open_log(dir, &cfg);
    const int64_t n = 6000 * soak();
    tu_append(log, 0, n, 37, 100, 1000, "", SL_CODEC_NONE);
    assert_int_equal(sl_log_end_offset(log), n);
    assert_int_equal(sl_log_start_offset(log), 0);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), n);
    assert_int_equal(tu_read_all(log, 1234, NULL, 100), n - 1234);
    assert_int_equal(tu_read_all(log, n, NULL, 100), 0);

    disk d;
    disk_scan(dir, &d);
    assert_true(d.nsegs >= 8);
    assert_int_equal(sl_log_segment_count(log), d.nsegs);
    assert_int_equal(sl_log_size_bytes(log), disk_bytes(&d));
    assert_int_equal(d.segs[0].base, 0);
    for (size_t s = 0; s < d.nsegs; s++) {
        assert_true(d.segs[s].size <= cfg.segment_bytes);
        assert_true(d.segs[s].size > 0);
        assert_true(seg_exists(dir, d.segs[s].base, ".index"));
        assert_true(seg_exists(dir, d.segs[s].base, ".timeindex"));
        assert_true(seg_exists(dir, d.segs[s].base, ".lanes"));
        /* A segment rolled only when the next batch would not fit. */
        if (s + 1 < d.nsegs) {
            size_t next_first = 0;
            while (d.b[next_first].seg != s + 1)
                next_first++;
            assert_true(d.segs[s].size + d.b[next_first].size > cfg.segment_bytes);
        }
    }
    dbatch *last = &d.b[d.nb - 1];
    assert_int_equal(last->base + last->lod + 1, n);
    disk_free(&d);
    sl_log_close(log);
    free(dir);
}

static void test_offset_lookup_every_offset(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = open_log(dir, &cfg);
    const int64_t n = 100000 * soak();
    tu_append(log, 0, n, 100, 100, 0, "", SL_CODEC_NONE);
    assert_true(sl_log_segment_count(log) >= 10);
    char v[256];
    for (int64_t o = 0; o < n; o++)
        expect_first(log, o, NULL, o, 100, v);
    expect_first(log, n, NULL, -1, 100, v);
    /* The lane-filtered path seeks the same way. */
    for (int64_t o = 0; o < n; o += 101)
        expect_first(log, o, "", o, 100, v);
    sl_log_close(log);

    /* After reopening, the indexes come from disk. */
    log = open_log(dir, &cfg);
    for (int64_t o = 0; o < n; o += 97)
        expect_first(log, o, NULL, o, 100, v);
    expect_first(log, n - 1, NULL, n - 1, 100, v);
    sl_log_close(log);
}

/* Checks the offset index of every segment: entries strictly increasing,
 * each pointing at a batch with the offset it claims, the first at byte 0;
 * and the time index: timestamps strictly increasing, offsets not
 * decreasing. */
static void check_indexes(const char *dir, const disk *d)
{
    for (size_t s = 0; s < d->nsegs; s++) {
        char p[4200];
        seg_path(p, sizeof p, dir, d->segs[s].base, ".index");
        size_t len;
        uint8_t *ix = slurp(p, &len);
        assert_non_null(ix);
        assert_int_equal(len % 8, 0);
        if (d->segs[s].size) assert_true(len >= 8);
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
        seg_path(p, sizeof p, dir, d->segs[s].base, ".timeindex");
        uint8_t *tx = slurp(p, &len);
        assert_non_null(tx);
        assert_int_equal(len % 12, 0);
        int64_t pts = INT64_MIN;
        for (size_t i = 0; i < len / 12; i++) {
            int64_t ts = (int64_t)sl_be64_get(tx + 12 * i);
            uint32_t rel = sl_be32_get(tx + 12 * i + 8);
            assert_true(ts > pts);
            if (i) assert_true(rel >= sl_be32_get(tx + 12 * (i - 1) + 8));
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
    sl_log *log = open_log(dir, &cfg);
    assert_false(exists(clean));
    char *lock = path_of(dir, ".lock");
    assert_true(exists(lock));
    free(lock);
    tu_append(log, 0, 12000, 50, 100, 0, "", SL_CODEC_NONE);
    assert_false(exists(clean));
    size_t segs = sl_log_segment_count(log);
    assert_true(segs >= 2);
    sl_log_close(log);
    assert_true(exists(clean));

    /* The indexes are trimmed to their entries on close and agree with the
     * log; the active one was preallocated for a full segment. */
    disk d;
    disk_scan(dir, &d);
    check_indexes(dir, &d);
    char p[4200];
    seg_path(p, sizeof p, dir, d.segs[d.nsegs - 1].base, ".index");
    int64_t isz = tu_file_size(p);
    uint64_t asz = d.segs[d.nsegs - 1].size;
    assert_true(asz < cfg.segment_bytes / 2);
    /* About one entry per 4 KiB, not the preallocated capacity. */
    assert_true(isz / 8 >= (int64_t)(asz / (4096 + 8192)));
    assert_true(isz / 8 <= (int64_t)(asz / 4096 + 1));
    uint64_t bytes = disk_bytes(&d);
    size_t nseg = d.nsegs;
    seg_path(p, sizeof p, dir, d.segs[nseg - 1].base, ".log");
    size_t before_len;
    uint8_t *before = slurp(p, &before_len);
    disk_free(&d);

    log = open_log(dir, &cfg);
    assert_false(exists(clean));
    assert_int_equal(sl_log_start_offset(log), 0);
    assert_int_equal(sl_log_end_offset(log), 12000);
    assert_int_equal(sl_log_segment_count(log), segs);
    assert_int_equal(sl_log_size_bytes(log), bytes);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 12000);
    tu_append(log, 12000, 3000, 50, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 15000);
    assert_int_equal(tu_read_all(log, 11990, NULL, 100), 3010);
    sl_log_close(log);
    assert_true(exists(clean));

    /* The old active segment's bytes were kept as they were. */
    size_t after_len;
    uint8_t *after = slurp(p, &after_len);
    assert_true(after_len >= before_len);
    assert_memory_equal(after, before, before_len);
    free(before);
    free(after);

    /* Open and close without appending: nothing changes, no new segment. */
    log = open_log(dir, &cfg);
    sl_log_close(log);
    log = open_log(dir, &cfg);
    assert_int_equal(sl_log_end_offset(log), 15000);
    disk_scan(dir, &d);
    assert_int_equal(sl_log_segment_count(log), d.nsegs);
    assert_int_equal(sl_log_size_bytes(log), disk_bytes(&d));
    assert_int_equal(d.b[d.nb - 1].base + d.b[d.nb - 1].lod + 1, 15000);
    disk_free(&d);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), 15000);
    sl_log_close(log);
    disk_scan(dir, &d);
    check_indexes(dir, &d);
    disk_free(&d);
    free(clean);
}

/* ---- time lookup ------------------------------------------------------------ */

static int64_t brute_time(const int64_t *ts, int64_t n, int64_t q)
{
    for (int64_t i = 0; i < n; i++)
        if (ts[i] >= q) return i;
    return n;
}

static void check_time(sl_log *log, int64_t q, int64_t want)
{
    int64_t got = -1;
    sl_error err = {0};
    int rc = sl_log_offset_for_time(log, q, &got, &err);
    if (rc) fail_msg("offset_for_time(%lld): %s", (long long)q, err.msg);
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
        int k = 1 + (int)(rng() % 40);
        if (k > n - i) k = (int)(n - i);
        append_batch(log, &b, i, k, vsize, ts + i, 0, "");
        i += k;
    }
    sl_batch_builder_free(&b);
}

static void test_time_lookup(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = open_log(dir, &cfg);
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
        log = open_log(dir, &cfg); /* again with the indexes from disk */
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
    sl_log *log = open_log(dir, &cfg);
    const int64_t n = 20000;
    int64_t *ts = malloc((size_t)n * sizeof *ts);
    assert_non_null(ts);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng();
        if (r % 100 == 0)
            ts[i] = 1000000 + (int64_t)(r >> 20) % 400000; /* far ahead or behind */
        else
            ts[i] = 1000000 + 10 * i + (int64_t)((r >> 8) % 5000) - 2500;
        if (i >= 12000 && i < 12600) ts[i] = 5000; /* a run from long ago */
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
            int64_t q = lo - 10 + (int64_t)(rng() % (uint64_t)(hi - lo + 20));
            check_time(log, q, brute_time(ts, n, q));
        }
        sl_log_close(log);
        log = open_log(dir, &cfg);
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
    sl_log *log = open_log(dir, &cfg);
    const int64_t n = 10000;
    tu_append(log, 0, n, 20, 100, 1000, "", SL_CODEC_NONE);
    disk d;
    disk_scan(dir, &d);
    assert_true(d.nsegs > 10);

    /* Kafka's rule: drop the oldest segment while what remains is still at
     * least retention_bytes; never the active segment. */
    uint64_t total = disk_bytes(&d);
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
            assert_false(seg_exists(dir, d.segs[s].base, exts[e]));
    for (size_t s = drop; s < d.nsegs; s++)
        assert_true(seg_exists(dir, d.segs[s].base, ".log"));

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
        assert_false(seg_exists(dir, 0, exts[e]));

    /* Nothing more to drop. */
    assert_int_equal(sl_log_retain(log, 1 << 30, &deleted, &err), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(sl_log_start_offset(log), start);
    disk_free(&d);
    sl_log_close(log);

    /* The start survives a reopen. */
    log = open_log(dir, &cfg);
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
    sl_log *log = open_log(dir, &cfg);
    const int64_t n = 8000, t0 = 1700000000000;
    tu_append(log, 0, n, 25, 100, t0, "", SL_CODEC_NONE); /* record i at t0 + i */
    disk d;
    disk_scan(dir, &d);
    assert_true(d.nsegs > 6);
    int64_t seg_max[64];
    assert_true(d.nsegs <= 64);
    for (size_t s = 0; s < d.nsegs; s++)
        seg_max[s] = INT64_MIN;
    for (size_t i = 0; i < d.nb; i++)
        if (d.b[i].max_ts > seg_max[d.b[i].seg]) seg_max[d.b[i].seg] = d.b[i].max_ts;

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
        assert_false(seg_exists(dir, d.segs[s].base, ".log"));
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
    disk_free(&d);
    disk_scan(dir, &d);
    assert_int_equal(d.nsegs, 1);
    assert_int_equal(d.segs[0].base, n);
    assert_int_equal(d.segs[0].size, 0);
    disk_free(&d);
    sl_log_reader *r;
    assert_int_equal(sl_log_reader_open(log, n - 1, NULL, &r, &err), SL_ERANGE);
    assert_int_equal(tu_read_all(log, n, NULL, 100), 0);
    assert_int_equal(sl_log_offset_for_time(log, t0, &at, &err), 0);
    assert_int_equal(at, n);

    /* Appends go on at the end offset. */
    tu_append(log, n, 300, 25, 100, t0 + 200000000, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, n, NULL, 100), 300);
    disk_scan(dir, &d);
    assert_int_equal(d.nsegs, 1);
    assert_int_equal(d.segs[0].base, n);
    disk_free(&d);
    sl_log_close(log);
    log = open_log(dir, &cfg);
    assert_int_equal(sl_log_start_offset(log), n);
    assert_int_equal(sl_log_end_offset(log), n + 300);
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
        sl_log *log = open_log(dir, &cfg);
        if (m < 2) {
            tu_append(log, 0, n, 50, 300, 0, "", m ? SL_CODEC_ZSTD : SL_CODEC_NONE);
        } else {
            for (int64_t i = 0, k = 0; i < n; i += 50, k++)
                tu_append(log, i, 50, 50, 300, 0, "", k % 2 ? SL_CODEC_ZSTD : SL_CODEC_NONE);
        }
        assert_int_equal(tu_read_all(log, 0, NULL, 300), n);
        assert_int_equal(tu_read_all(log, 2525, NULL, 300), n - 2525);
        sizes[m] = sl_log_size_bytes(log);
        disk d;
        disk_scan(dir, &d);
        assert_int_equal(disk_bytes(&d), sizes[m]);
        assert_int_equal(d.nb, n / 50);
        for (size_t i = 0; i < d.nb; i++) {
            int want = m == 0 ? 0 : m == 1 ? 4 : (i % 2 ? 4 : 0);
            assert_int_equal(d.b[i].codec, want);
        }
        disk_free(&d);
        sl_log_close(log);
        log = open_log(dir, &cfg);
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
    sl_log *log = open_log(dir, &cfg);
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
        disk d;
        disk_scan(dir, &d);
        assert_int_equal(d.nb, nplan);
        assert_int_equal(sl_log_size_bytes(log), disk_bytes(&d));
        /* A segment passes the limit only when one batch alone is bigger. */
        for (size_t s = 0; s < d.nsegs; s++) {
            size_t in_seg = 0;
            for (size_t i = 0; i < d.nb; i++)
                in_seg += d.b[i].seg == s;
            assert_true(in_seg >= 1);
            if (d.segs[s].size > cfg.segment_bytes) assert_int_equal(in_seg, 1);
        }
        disk_free(&d);
        sl_log_close(log);
        log = open_log(dir, &cfg);
    }
    sl_log_close(log);
    free(v);
}

/* ---- lanes -------------------------------------------------------------- */

/* Lane of every offset, built by the lane test's writer. */
typedef struct lane_plan {
    int64_t n;
    char *lane_of; /* 0 = "", 1 = "a", 2 = "b" */
} lane_plan;

static const char *const lane_names[] = {"", "a", "b", "c"};

static int lane_index(const char *lane)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(lane, lane_names[i])) return i;
    fail_msg("unexpected lane \"%s\"", lane);
    return -1;
}

static void build_lanes(sl_log *log, lane_plan *lp, int64_t n, int codecs)
{
    lp->n = n;
    lp->lane_of = malloc((size_t)n);
    assert_non_null(lp->lane_of);
    sl_batch_builder bs[2];
    sl_batch_builder_init(&bs[0], SL_CODEC_NONE, 0);
    sl_batch_builder_init(&bs[1], SL_CODEC_ZSTD, 0);
    int64_t i = 0;
    int lane = 0, batch = 0;
    while (i < n) {
        /* Runs of 1..4 batches per lane, each batch of 1..30 records. */
        int run = 1 + (int)(rng() % 4);
        for (int r = 0; r < run && i < n; r++, batch++) {
            int k = 1 + (int)(rng() % 30);
            if (k > n - i) k = (int)(n - i);
            sl_batch_builder *b = &bs[codecs && batch % 3 == 0];
            append_batch(log, b, i, k, 80, NULL, 0, lane_names[lane]);
            memset(lp->lane_of + i, lane, (size_t)k);
            i += k;
        }
        lane = (lane + 1 + (int)(rng() % 2)) % 3;
    }
    sl_batch_builder_free(&bs[0]);
    sl_batch_builder_free(&bs[1]);
}

/* A reader of lane from offset sees exactly that lane's records from there. */
static void check_lane_reader(sl_log *log, const lane_plan *lp, int64_t from, const char *lane)
{
    sl_log_reader *r;
    sl_error err = {0};
    assert_int_equal(sl_log_reader_open(log, from, lane, &r, &err), 0);
    char v[256];
    sl_record rec;
    int64_t want = from;
    int rc;
    for (;;) {
        while (want < lp->n && lane && strcmp(lane_names[(int)lp->lane_of[want]], lane) != 0)
            want++;
        rc = sl_log_reader_next(r, &rec, &err);
        if (rc) break;
        if (rec.offset != want)
            fail_msg("lane \"%s\" from %lld: got %lld, want %lld", lane ? lane : "(all)",
                     (long long)from, (long long)rec.offset, (long long)want);
        const char *ln = lane_names[(int)lp->lane_of[want]];
        assert_int_equal(rec.lane_len, strlen(ln));
        assert_memory_equal(rec.lane, ln, rec.lane_len);
        size_t len = tu_value(v, 80, want);
        assert_int_equal(rec.value_len, len);
        assert_memory_equal(rec.value, v, len);
        want++;
    }
    if (rc != SL_EEOF)
        fail_msg("lane \"%s\" from %lld: rc %d %s", lane ? lane : "(all)", (long long)from, rc,
                 err.msg);
    assert_int_equal(want, lp->n);
    sl_log_reader_close(r);
}

/* The .lanes sidecar of each segment holds one entry per run of batches of
 * one lane: {rel, pos, len, lane, zeros}. */
static void check_sidecars(const char *dir, const disk *d)
{
    for (size_t s = 0; s < d->nsegs; s++) {
        char p[4200];
        seg_path(p, sizeof p, dir, d->segs[s].base, ".lanes");
        size_t len;
        uint8_t *e = slurp(p, &len);
        assert_non_null(e);
        assert_int_equal(len % LANES_ENTRY, 0);
        size_t k = 0;
        const char *prev = NULL;
        for (size_t i = 0; i < d->nb; i++) {
            const dbatch *b = &d->b[i];
            if (b->seg != s || (prev && strcmp(prev, b->lane) == 0)) {
                if (b->seg == s) prev = b->lane;
                continue;
            }
            prev = b->lane;
            assert_true((k + 1) * LANES_ENTRY <= len);
            const uint8_t *x = e + k * LANES_ENTRY;
            size_t ll = strlen(b->lane);
            assert_int_equal(sl_be32_get(x), b->base - d->segs[s].base);
            assert_int_equal(sl_be32_get(x + 4), b->pos);
            assert_int_equal(x[8], ll);
            assert_memory_equal(x + 9, b->lane, ll);
            for (size_t z = 9 + ll; z < LANES_ENTRY; z++)
                assert_int_equal(x[z], 0);
            k++;
        }
        assert_int_equal(k * LANES_ENTRY, len);
        free(e);
    }
}

/* Flips one byte in the records of every batch whose lane is in mask (bit
 * per lane index), or restores them; the log stays open. */
static void damage_lanes(const char *dir, const disk *d, unsigned mask)
{
    for (size_t i = 0; i < d->nb; i++) {
        const dbatch *b = &d->b[i];
        int li = lane_index(b->lane);
        if (!(mask & (1u << li))) continue;
        char p[4200];
        seg_path(p, sizeof p, dir, d->segs[b->seg].base, ".log");
        int fd = open(p, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        uint8_t c;
        off_t at = (off_t)(b->pos + b->size - 1);
        assert_int_equal(pread(fd, &c, 1, at), 1);
        c ^= 0x55;
        assert_int_equal(pwrite(fd, &c, 1, at), 1);
        close(fd);
    }
}

static void test_lanes(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = open_log(dir, &cfg);
    lane_plan lp;
    build_lanes(log, &lp, 20000, 1);
    assert_true(sl_log_segment_count(log) > 5);

    check_lane_reader(log, &lp, 0, NULL);
    for (int l = 0; l < 3; l++) {
        check_lane_reader(log, &lp, 0, lane_names[l]);
        for (int64_t o = 1; o < lp.n; o += 1503)
            check_lane_reader(log, &lp, o, lane_names[l]);
    }
    /* The first record of a lane reader opened at any offset. */
    char v[256];
    for (int64_t o = 0; o < lp.n; o += 211) {
        for (int l = 0; l < 3; l++) {
            int64_t want = o;
            while (want < lp.n && lp.lane_of[want] != l)
                want++;
            expect_first(log, o, lane_names[l], want < lp.n ? want : -1, 80, v);
        }
    }

    disk d;
    disk_scan(dir, &d);
    check_sidecars(dir, &d);

    /* A lane reader skips other lanes' batches without reading them: damage
     * every "a" batch on disk and read the other lanes. */
    damage_lanes(dir, &d, 1u << 1);
    check_lane_reader(log, &lp, 0, "");
    check_lane_reader(log, &lp, 0, "b");
    sl_log_reader *r;
    sl_error err = {0};
    sl_record rec;
    int rc;
    assert_int_equal(sl_log_reader_open(log, 0, "a", &r, &err), 0);
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
    }
    assert_int_equal(rc, SL_ECORRUPT);
    sl_log_reader_close(r);
    assert_int_equal(sl_log_reader_open(log, 0, NULL, &r, &err), 0);
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
    }
    assert_int_equal(rc, SL_ECORRUPT);
    sl_log_reader_close(r);

    /* A lane with no records: every batch damaged, and still a clean EEOF. */
    damage_lanes(dir, &d, (1u << 0) | (1u << 2));
    assert_int_equal(sl_log_reader_open(log, 0, "c", &r, &err), 0);
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    sl_log_reader_close(r);
    damage_lanes(dir, &d, 7); /* restore */
    check_lane_reader(log, &lp, 0, NULL);

    /* Records appended after the lane reader caught up reach it. */
    assert_int_equal(sl_log_reader_open(log, 0, "c", &r, &err), 0);
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    append_batch(log, &b, lp.n, 5, 80, NULL, 0, "c");
    append_batch(log, &b, lp.n + 5, 5, 80, NULL, 0, "");
    append_batch(log, &b, lp.n + 10, 5, 80, NULL, 0, "c");
    sl_batch_builder_free(&b);
    for (int64_t want = lp.n; want < lp.n + 15; want++) {
        if (want == lp.n + 5) want += 5;
        assert_int_equal(sl_log_reader_next(r, &rec, &err), 0);
        assert_int_equal(rec.offset, want);
        assert_int_equal(rec.lane_len, 1);
        assert_memory_equal(rec.lane, "c", 1);
    }
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    sl_log_reader_close(r);
    disk_free(&d);

    /* Invalid lane names are refused. */
    assert_int_equal(sl_log_reader_open(log, 0, "A", &r, &err), SL_EINVAL);
    assert_int_equal(sl_log_reader_open(log, 0, "a b", &r, &err), SL_EINVAL);

    /* The sidecars survive a reopen, and are rebuilt when lost. */
    sl_log_close(log);
    disk_scan(dir, &d);
    check_sidecars(dir, &d);
    for (size_t s = 0; s < d.nsegs; s++) {
        char p[4200];
        seg_path(p, sizeof p, dir, d.segs[s].base, ".lanes");
        assert_int_equal(unlink(p), 0);
    }
    log = open_log(dir, &cfg);
    check_sidecars(dir, &d);
    lp.lane_of = realloc(lp.lane_of, (size_t)lp.n + 15);
    assert_non_null(lp.lane_of);
    memset(lp.lane_of + lp.n, 3, 5);
    memset(lp.lane_of + lp.n + 5, 0, 5);
    memset(lp.lane_of + lp.n + 10, 3, 5);
    lp.n += 15;
    check_lane_reader(log, &lp, 0, NULL);
    for (int l = 0; l < 4; l++)
        check_lane_reader(log, &lp, 0, lane_names[l]);
    disk_free(&d);
    sl_log_close(log);

    sl_log_verify_report rep;
    sl_error verr = {0};
    assert_int_equal(sl_log_verify(dir, &rep, &verr), 0);
    if (rep.damaged) fail_msg("verify: %s", rep.where);
    assert_int_equal(rep.records, lp.n);
    assert_int_equal(rep.first_offset, 0);
    assert_int_equal(rep.next_offset, lp.n);
    free(lp.lane_of);
}

/* ---- readers tailing a writer ------------------------------------------------ */

#define TAIL_BATCH(k) (1 + (int)(((k)*7) % 50))
#define TAIL_LANE(k) ((k) % 5 == 4 ? "x" : "")

typedef struct tail_shared {
    sl_log *log;
    int64_t n;
    uint8_t *boundary; /* [n + 1]: 1 where a batch starts (and at n) */
    uint8_t *is_x;     /* [n]: record in lane "x" */
    atomic_bool writer_done;
    atomic_int failures;
} tail_shared;

typedef struct tail_reader {
    tail_shared *sh;
    const char *lane; /* NULL or "x" */
    int64_t from;
    int64_t seen;
    int64_t caught_up; /* times it got SL_EEOF before the end */
    char why[256];
} tail_reader;

static void tail_fail(tail_reader *t, const char *fmt, long long a, long long b)
{
    if (!t->why[0]) snprintf(t->why, sizeof t->why, fmt, a, b);
    atomic_fetch_add(&t->sh->failures, 1);
}

static void *tail_reader_main(void *arg)
{
    tail_reader *t = arg;
    tail_shared *sh = t->sh;
    sl_log_reader *r;
    sl_error err = {0};
    if (sl_log_reader_open(sh->log, t->from, t->lane, &r, &err)) {
        tail_fail(t, "open at %lld: rc %lld", (long long)t->from, 0);
        return NULL;
    }
    char *v = malloc(200);
    int64_t want = t->from, last = -1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (t->lane)
            while (want < sh->n && !sh->is_x[want])
                want++;
        sl_record rec;
        int rc = sl_log_reader_next(r, &rec, &err);
        if (rc == 0) {
            if (rec.offset != want) {
                tail_fail(t, "got offset %lld, want %lld", (long long)rec.offset, (long long)want);
                break;
            }
            size_t len = tu_value(v, 100, want);
            if (rec.value_len != len || memcmp(rec.value, v, len) != 0) {
                tail_fail(t, "value of %lld differs (len %lld)", (long long)want,
                          (long long)rec.value_len);
                break;
            }
            last = want;
            want++;
            t->seen++;
            continue;
        }
        if (rc != SL_EEOF) {
            tail_fail(t, "reader_next at %lld: rc %lld", (long long)want, (long long)rc);
            break;
        }
        /* Caught up: what was returned must end on a batch boundary. */
        if (last >= 0 && !sh->boundary[last + 1]) {
            tail_fail(t, "EEOF after %lld, inside a batch (want %lld)", (long long)last,
                      (long long)want);
            break;
        }
        if (want >= sh->n) break;
        t->caught_up++;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 120) {
            tail_fail(t, "timed out at %lld of %lld", (long long)want, (long long)sh->n);
            break;
        }
        if (atomic_load(&sh->writer_done) && sl_log_end_offset(sh->log) >= sh->n) {
            /* Everything is written: one more EEOF means a record was lost. */
            rc = sl_log_reader_next(r, &rec, &err);
            if (rc == SL_EEOF) {
                tail_fail(t, "writer done but reader stuck at %lld (end %lld)", (long long)want,
                          (long long)sl_log_end_offset(sh->log));
                break;
            }
            if (rc == 0) {
                if (rec.offset != want) {
                    tail_fail(t, "got offset %lld, want %lld", (long long)rec.offset,
                              (long long)want);
                    break;
                }
                last = want++;
                t->seen++;
            }
            continue;
        }
        sched_yield();
    }
    free(v);
    sl_log_reader_close(r);
    return NULL;
}

typedef struct tail_writer {
    tail_shared *sh;
    char why[256];
} tail_writer;

static void *tail_writer_main(void *arg)
{
    tail_writer *w = arg;
    tail_shared *sh = w->sh;
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    char v[200];
    int64_t i = 0;
    for (int k = 0; i < sh->n; k++) {
        int cnt = TAIL_BATCH(k);
        if (cnt > sh->n - i) cnt = (int)(sh->n - i);
        sl_batch_builder_reset(&b, TAIL_LANE(k));
        for (int j = 0; j < cnt; j++) {
            size_t len = tu_value(v, 100, i + j);
            sl_batch_builder_add(&b, i + j, NULL, 0, v, len);
        }
        sl_batch batch;
        sl_error err = {0};
        int64_t base = -1;
        if (sl_batch_builder_finish(&b, &batch, &err) ||
            sl_log_append(sh->log, &batch, &base, &err) || base != i) {
            snprintf(w->why, sizeof w->why, "append at %lld: %s", (long long)i, err.msg);
            atomic_fetch_add(&sh->failures, 1);
            break;
        }
        i += cnt;
        if (k % 16 == 0) sched_yield();
    }
    sl_batch_builder_free(&b);
    atomic_store(&sh->writer_done, true);
    return NULL;
}

typedef struct tail_syncer {
    tail_shared *sh;
    int syncs;
    int rc;
} tail_syncer;

static void *tail_syncer_main(void *arg)
{
    tail_syncer *s = arg;
    while (!atomic_load(&s->sh->writer_done)) {
        sl_error err;
        int rc = sl_log_sync(s->sh->log, &err);
        if (rc && !s->rc) s->rc = rc;
        s->syncs++;
        usleep(2000);
    }
    return NULL;
}

static void test_tailing_readers(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = open_log(dir, &cfg);
    tail_shared sh = {.log = log, .n = 50000 * soak()};
    atomic_init(&sh.writer_done, false);
    atomic_init(&sh.failures, 0);
    sh.boundary = calloc((size_t)sh.n + 1, 1);
    sh.is_x = calloc((size_t)sh.n, 1);
    assert_non_null(sh.boundary);
    assert_non_null(sh.is_x);
    int64_t nx = 0;
    for (int64_t i = 0, k = 0; i < sh.n; k++) {
        int cnt = TAIL_BATCH(k);
        if (cnt > sh.n - i) cnt = (int)(sh.n - i);
        sh.boundary[i] = 1;
        if (TAIL_LANE(k)[0]) {
            memset(sh.is_x + i, 1, (size_t)cnt);
            nx += cnt;
        }
        i += cnt;
    }
    sh.boundary[sh.n] = 1;

    enum { NREADERS = 4 };
    tail_reader rd[NREADERS] = {
        {.sh = &sh, .lane = NULL},
        {.sh = &sh, .lane = NULL},
        {.sh = &sh, .lane = "x"},
        {.sh = &sh, .lane = NULL},
    };
    pthread_t th[NREADERS + 2];
    for (int i = 0; i < NREADERS - 1; i++)
        assert_int_equal(pthread_create(&th[i], NULL, tail_reader_main, &rd[i]), 0);
    tail_writer w = {.sh = &sh};
    tail_syncer sy = {.sh = &sh};
    assert_int_equal(pthread_create(&th[NREADERS], NULL, tail_writer_main, &w), 0);
    assert_int_equal(pthread_create(&th[NREADERS + 1], NULL, tail_syncer_main, &sy), 0);
    /* The last reader joins late, at whatever the end is then. */
    while (sl_log_end_offset(log) < sh.n / 3)
        sched_yield();
    rd[NREADERS - 1].from = sl_log_end_offset(log);
    assert_int_equal(pthread_create(&th[NREADERS - 1], NULL, tail_reader_main, &rd[NREADERS - 1]),
                     0);
    for (int i = 0; i < NREADERS + 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);

    if (w.why[0]) fail_msg("writer: %s", w.why);
    for (int i = 0; i < NREADERS; i++)
        if (rd[i].why[0]) fail_msg("reader %d: %s", i, rd[i].why);
    assert_int_equal(atomic_load(&sh.failures), 0);
    assert_int_equal(sy.rc, 0);
    assert_true(sy.syncs > 0);
    assert_int_equal(rd[0].seen, sh.n);
    assert_int_equal(rd[1].seen, sh.n);
    assert_int_equal(rd[2].seen, nx);
    assert_int_equal(rd[3].seen, sh.n - rd[3].from);
    assert_true(rd[0].caught_up > 0 && rd[1].caught_up > 0); /* they really tailed */
    assert_true(sl_log_segment_count(log) > 20);
    assert_int_equal(sl_log_size_bytes(log), file_sum(dir));
    sl_log_close(log);
    free(sh.boundary);
    free(sh.is_x);
}

/* ---- slices ------------------------------------------------------------------ */

/* Checks one slice against the batches on disk. */
static void check_slice(sl_log *log, const disk *d, int64_t offset, const char *lane,
                        size_t max_bytes)
{
    sl_log_slice sl;
    sl_error err = {0};
    int rc = sl_log_slice_get(log, offset, lane, max_bytes, &sl, &err);
    if (rc) fail_msg("slice at %lld: %s", (long long)offset, err.msg);
    /* The first batch of the lane holding offset or after it. */
    size_t first = 0;
    while (first < d->nb && (d->b[first].base + d->b[first].lod < offset ||
                             (lane && strcmp(d->b[first].lane, lane) != 0)))
        first++;
    if (first == d->nb) {
        assert_int_equal(sl.len, 0);
        sl_log_slice_release(&sl);
        return;
    }
    const dbatch *fb = &d->b[first];
    assert_true(sl.len > 0);
    assert_int_equal(sl.pos, fb->pos);
    assert_int_equal(sl.first_offset, fb->base);
    uint8_t *buf = malloc(sl.len);
    assert_non_null(buf);
    assert_int_equal(pread(sl.fd, buf, sl.len, (off_t)sl.pos), (ssize_t)sl.len);
    size_t at = 0, i = first;
    bool compressed = false;
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    while (at < sl.len) {
        sl_batch_info in;
        assert_int_equal(sl_batch_check(buf + at, sl.len - at, &in, &err), 0);
        assert_true(i < d->nb && d->b[i].seg == fb->seg);
        assert_int_equal(in.base_offset, d->b[i].base);
        assert_int_equal(sl_batch_size(&in), d->b[i].size);
        char bl[SL_LANE_MAX + 1];
        assert_int_equal(sl_batch_lane(&br, buf + at, d->b[i].size, bl, &err), 0);
        if (lane) assert_string_equal(bl, lane);
        compressed |= (in.attributes & 7) != 0;
        at += d->b[i].size;
        i++;
    }
    sl_batch_reader_free(&br);
    assert_int_equal(at, sl.len);
    size_t nbatches = i - first;
    assert_int_equal(sl.next_offset, d->b[i - 1].base + d->b[i - 1].lod + 1);
    assert_int_equal(sl.compressed, compressed);
    if (nbatches > 1) assert_true(sl.len <= max_bytes);
    /* As much as fits: the next batch is in another segment or lane, or too big. */
    if (i < d->nb && d->b[i].seg == fb->seg && (!lane || !strcmp(d->b[i].lane, lane)))
        assert_true(sl.len + d->b[i].size > max_bytes);
    free(buf);
    sl_log_slice_release(&sl);
}

static void test_slices(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = open_log(dir, &cfg);
    lane_plan lp;
    build_lanes(log, &lp, 8000, 1);
    disk d;
    disk_scan(dir, &d);
    static const size_t maxes[] = {1, 4096, 1 << 20};
    static const char *const lanes[] = {NULL, "", "a", "b", "zz"};
    for (int64_t o = 0; o < lp.n; o += 37)
        for (size_t m = 0; m < 3; m++)
            for (size_t l = 0; l < 5; l++)
                check_slice(log, &d, o, lanes[l], maxes[m]);
    for (size_t i = 0; i < d.nb; i++) /* at every batch start and end */
        for (size_t l = 0; l < 3; l++) {
            check_slice(log, &d, d.b[i].base, lanes[l], 4096);
            check_slice(log, &d, d.b[i].base + d.b[i].lod, lanes[l], 4096);
        }

    /* At the end: nothing yet. Past it: out of range. */
    sl_log_slice sl;
    sl_error err = {0};
    assert_int_equal(sl_log_slice_get(log, lp.n, NULL, 4096, &sl, &err), 0);
    assert_int_equal(sl.len, 0);
    assert_int_equal(sl.first_offset, lp.n);
    assert_int_equal(sl.next_offset, lp.n);
    sl_log_slice_release(&sl);
    assert_int_equal(sl_log_slice_get(log, lp.n + 1, NULL, 4096, &sl, &err), SL_ERANGE);
    assert_int_equal(sl_log_slice_get(log, -1, NULL, 4096, &sl, &err), SL_ERANGE);

    /* Walking the log slice by slice decodes every record once. */
    int64_t o = 0, seen = 0;
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    for (;;) {
        assert_int_equal(sl_log_slice_get(log, o, NULL, 16 << 10, &sl, &err), 0);
        if (!sl.len) {
            sl_log_slice_release(&sl);
            break;
        }
        uint8_t *buf = malloc(sl.len);
        assert_non_null(buf);
        assert_int_equal(pread(sl.fd, buf, sl.len, (off_t)sl.pos), (ssize_t)sl.len);
        for (size_t at = 0; at < sl.len;) {
            sl_batch_info in;
            assert_int_equal(sl_batch_check(buf + at, sl.len - at, &in, &err), 0);
            assert_int_equal(sl_batch_reader_open(&br, buf + at, sl_batch_size(&in), &err), 0);
            sl_record rec;
            while (sl_batch_reader_next(&br, &rec, &err) == 0) {
                assert_int_equal(rec.offset, seen);
                seen++;
            }
            at += sl_batch_size(&in);
        }
        free(buf);
        assert_int_equal(sl.next_offset, seen);
        o = sl.next_offset;
        sl_log_slice_release(&sl);
    }
    sl_batch_reader_free(&br);
    assert_int_equal(seen, lp.n);

    /* A slice keeps its segment readable after retention deletes it. */
    sl_log_close(log);
    cfg.retention_bytes = 0;
    log = open_log(dir, &cfg);
    assert_int_equal(sl_log_slice_get(log, 0, NULL, 1 << 20, &sl, &err), 0);
    uint64_t len0 = sl.len, pos0 = sl.pos;
    int fd0 = sl.fd;
    int deleted = 0;
    assert_int_equal(sl_log_retain(log, 0, &deleted, &err), 0);
    assert_true(deleted > 0);
    assert_false(seg_exists(dir, d.segs[1].base, ".log"));
    uint8_t *buf = malloc(len0);
    assert_non_null(buf);
    assert_int_equal(pread(fd0, buf, len0, (off_t)pos0), (ssize_t)len0);
    sl_batch_info in;
    assert_int_equal(sl_batch_check(buf, len0, &in, &err), 0);
    assert_int_equal(in.base_offset, 0);
    free(buf);
    sl_log_slice_release(&sl);
    assert_false(seg_exists(dir, 0, ".log"));
    disk_free(&d);
    sl_log_close(log);
    free(lp.lane_of);
}

/* ---- roll, counts, sizes ---------------------------------------------------- */

static void test_roll_and_counts(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = open_log(dir, &cfg);
    sl_error err = {0};
    assert_int_equal(sl_log_segment_count(log), 1);
    assert_int_equal(sl_log_size_bytes(log), 0);
    assert_true(seg_exists(dir, 0, ".log"));
    assert_int_equal(sl_log_roll(log, &err), 0); /* empty: nothing to roll */
    assert_int_equal(sl_log_segment_count(log), 1);

    int64_t end = 0;
    for (int round = 1; round <= 5; round++) {
        tu_append(log, end, 10 * round, 7, 100, 0, "", SL_CODEC_NONE);
        end += 10 * round;
        assert_int_equal(sl_log_size_bytes(log), file_sum(dir));
        assert_int_equal(sl_log_roll(log, &err), 0);
        assert_int_equal(sl_log_segment_count(log), (size_t)round + 1);
        assert_true(seg_exists(dir, end, ".log"));
        char p[4200];
        seg_path(p, sizeof p, dir, end, ".log");
        assert_int_equal(tu_file_size(p), 0);
        assert_int_equal(sl_log_roll(log, &err), 0); /* the new one is empty */
        assert_int_equal(sl_log_segment_count(log), (size_t)round + 1);
        assert_int_equal(sl_log_size_bytes(log), file_sum(dir));
        assert_int_equal(sl_log_sync(log, &err), 0);
    }
    tu_append(log, end, 3, 3, 100, 0, "", SL_CODEC_NONE);
    disk d;
    disk_scan(dir, &d); /* each segment starts with the batch its name says */
    assert_int_equal(d.nsegs, 6);
    assert_int_equal(d.segs[5].base, end);
    assert_int_equal(d.b[d.nb - 1].base, end);
    assert_int_equal(sl_log_size_bytes(log), disk_bytes(&d));
    disk_free(&d);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), end + 3);
    sl_log_close(log);

    /* An empty active segment after a roll survives a reopen. */
    log = open_log(dir, &cfg);
    assert_int_equal(sl_log_roll(log, &err), 0);
    assert_int_equal(sl_log_segment_count(log), 7);
    sl_log_close(log);
    log = open_log(dir, &cfg);
    assert_int_equal(sl_log_segment_count(log), 7);
    assert_int_equal(sl_log_end_offset(log), end + 3);
    tu_append(log, end + 3, 4, 4, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(tu_read_all(log, 0, NULL, 100), end + 7);
    assert_true(seg_exists(dir, end + 3, ".log"));
    sl_log_close(log);
}

/* segment_ms rolls a segment once it is that old, at the next append. */
static void test_segment_age_roll(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    cfg.segment_ms = 300;
    sl_log *log = open_log(dir, &cfg);
    tu_append(log, 0, 10, 10, 100, 0, "", SL_CODEC_NONE);
    tu_append(log, 10, 10, 10, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(sl_log_segment_count(log), 1);
    usleep(350 * 1000);
    tu_append(log, 20, 10, 10, 100, 0, "", SL_CODEC_NONE);
    assert_int_equal(sl_log_segment_count(log), 2);
    assert_true(seg_exists(dir, 20, ".log"));
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
    assert_int_equal(file_sum(nested), size);
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

/* A lane reader's position moves past the batches it skips, so a caller that
 * saves it to resume later does not rescan them. */
static void test_lane_reader_position(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = open_log(dir, &cfg);
    tu_append(log, 0, 100, 10, 100, 0, "a", SL_CODEC_NONE);
    tu_append(log, 100, 3000, 30, 100, 0, "", SL_CODEC_NONE); /* several segments */
    sl_log_reader *r;
    sl_error err = {0};
    sl_record rec;
    assert_int_equal(sl_log_reader_open(log, 0, "a", &r, &err), 0);
    for (int64_t i = 0; i < 100; i++) {
        assert_int_equal(sl_log_reader_next(r, &rec, &err), 0);
        assert_int_equal(rec.offset, i);
        assert_int_equal(sl_log_reader_position(r), i + 1);
    }
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    assert_int_equal(sl_log_reader_position(r), 3100);
    sl_log_reader_close(r);
    assert_int_equal(sl_log_reader_open(log, 0, "zz", &r, &err), 0);
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    assert_int_equal(sl_log_reader_position(r), 3100);
    sl_log_reader_close(r);
    assert_int_equal(sl_log_reader_open(log, 0, NULL, &r, &err), 0);
    while (sl_log_reader_next(r, &rec, &err) == 0) {
    }
    assert_int_equal(sl_log_reader_position(r), 3100);
    sl_log_reader_close(r);
    sl_log_close(log);
}

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
    sl_log *log = open_log(dir, &cfg);
    tu_append(log, 0, 5000, 25, 100, 0, "", SL_CODEC_NONE);
    sl_error err = {0};
    assert_int_equal(sl_log_sync(log, &err), 0);
    copy_segments(dir, copy);
    size_t nseg = sl_log_segment_count(log);
    sl_log_close(log);

    /* Tear the last batch of the copy: keep only its first 40 bytes. */
    disk d;
    disk_scan(copy, &d);
    const dbatch *last = &d.b[d.nb - 1];
    char p[4200];
    seg_path(p, sizeof p, copy, d.segs[last->seg].base, ".log");
    assert_int_equal(truncate(p, (off_t)(last->pos + 40)), 0);
    int64_t want_end = last->base;
    disk_free(&d);

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
    disk_scan(copy, &d);
    check_indexes(copy, &d);
    check_sidecars(copy, &d);
    disk_free(&d);

    /* A clean reopen has nothing to repair or report. */
    notices = 0;
    assert_int_equal(sl_log_open(copy, &cfg, &o, &log, &err), 0);
    assert_int_equal(notices, 0);
    assert_int_equal(sl_log_end_offset(log), want_end + 500);
    sl_log_close(log);
    sl_log_verify_report rep;
    assert_int_equal(sl_log_verify(copy, &rep, &err), 0);
    if (rep.damaged) fail_msg("verify: %s", rep.where);
    assert_int_equal(rep.records, want_end + 500);
    free(dir);
    free(copy);
}

/* Batches whose lastOffsetDelta leaves room past their records (as after
 * compaction): offsets follow lastOffsetDelta, readers skip the gaps. */
static void test_offset_gaps(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = open_log(dir, &cfg);
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    int64_t base_of[200], expect_end = 0;
    char v[256];
    for (int k = 0; k < 200; k++) {
        assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
        for (int j = 0; j < 3; j++) {
            size_t len = tu_value(v, 100, expect_end + j);
            assert_int_equal(sl_batch_builder_add(&b, expect_end + j, NULL, 0, v, len), 0);
        }
        sl_batch batch;
        sl_error err = {0};
        assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
        int gap = k % 4; /* lastOffsetDelta = 2 + gap */
        sl_be32_put(batch.data + SL_BATCH_OFF_LAST_DELTA, (uint32_t)(2 + gap));
        sl_be32_put(batch.data + SL_BATCH_OFF_CRC, sl_crc32c(0, batch.data + 21, batch.len - 21));
        int64_t base;
        assert_int_equal(sl_log_append(log, &batch, &base, &err), 0);
        assert_int_equal(base, expect_end);
        base_of[k] = base;
        expect_end += 3 + gap;
        assert_int_equal(sl_log_end_offset(log), expect_end);
    }
    sl_batch_builder_free(&b);
    for (int pass = 0; pass < 2; pass++) {
        /* From every offset, the first record is the next one that exists. */
        for (int64_t o = 0; o < expect_end; o++) {
            int k = 0;
            while (k < 199 && base_of[k + 1] <= o)
                k++;
            int64_t want = o <= base_of[k] + 2 ? o : (k < 199 ? base_of[k + 1] : -1);
            sl_log_reader *r;
            sl_error err = {0};
            assert_int_equal(sl_log_reader_open(log, o, NULL, &r, &err), 0);
            sl_record rec;
            int rc = sl_log_reader_next(r, &rec, &err);
            if (want < 0) {
                assert_int_equal(rc, SL_EEOF);
            } else {
                assert_int_equal(rc, 0);
                assert_int_equal(rec.offset, want);
            }
            sl_log_reader_close(r);
        }
        sl_log_close(log);
        log = open_log(dir, &cfg);
        assert_int_equal(sl_log_end_offset(log), expect_end);
    }
    sl_log_close(log);
}

/* Reads the .recovery-point file: the offset below which everything was
 * fdatasync'ed; -1 when there is none. */
static int64_t recovery_point(const char *dir)
{
    char *p = path_of(dir, ".recovery-point");
    size_t len;
    uint8_t *buf = slurp(p, &len);
    free(p);
    if (!buf) return -1;
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
    sl_log *log = open_log(dir, &cfg);
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
    sl_log *log = open_log(dir, &cfg);
    tu_append(log, 0, 4000, 20, 100, 0, "", SL_CODEC_NONE); /* no sync at all */
    assert_true(sl_log_segment_count(log) >= 4);
    /* The crash: a copy of the files as they are now, no .clean. */
    copy_segments(dir, copy);
    sl_log_close(log);

    /* Damage a batch in the first third of segment 1. */
    disk d;
    disk_scan(copy, &d);
    size_t bi = 0;
    while (d.b[bi].seg != 1)
        bi++;
    bi += 3;
    assert_true(d.b[bi].seg == 1 && d.b[bi].pos + d.b[bi].size < d.segs[1].size / 3);
    char p[4200];
    seg_path(p, sizeof p, copy, d.segs[1].base, ".log");
    int fd = open(p, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    uint8_t c = 0x5A;
    assert_int_equal(pwrite(fd, &c, 1, (off_t)(d.b[bi].pos + d.b[bi].size / 2)), 1);
    close(fd);

    int64_t cut = d.b[bi].base;
    disk_free(&d);
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
    disk_scan(copy, &d); /* the later segments are gone, offsets continue */
    assert_int_equal(d.nsegs, 2);
    assert_int_equal(d.b[d.nb - 1].base + d.b[d.nb - 1].lod + 1, cut + 100);
    check_indexes(copy, &d);
    disk_free(&d);
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
    sl_log *log = open_log(dir, &cfg);
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
    seg_path(p, sizeof p, dir, 0, ".timeindex");
    assert_int_equal(unlink(p), 0);
    log = open_log(dir, &cfg);
    check_time(log, 8000000, 0);
    check_time(log, 9000000, 0);
    check_time(log, 9000001, n);
    for (int64_t i = 1; i < n; i += 97)
        check_time(log, ts[i], brute_time(ts, n, ts[i]));
    /* Time retention must not drop the segment holding the newest record. */
    sl_log_close(log);
    cfg.retention_ms = 1000;
    log = open_log(dir, &cfg);
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
    sl_log *log = open_log(dir, &cfg);
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
    if (rc) fail_msg("append: %d %s", rc, err.msg);
    assert_int_equal(base, 10);
    assert_int_equal(sl_log_end_offset(log), 10 + (int64_t)INT32_MAX + 1);
    sl_batch_builder_free(&b);
    sl_log_close(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roll_round_trip, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_offset_lookup_every_offset, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_reopen_and_clean_marker, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_time_lookup, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_time_lookup_unordered, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_retention_bytes, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_retention_time, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_codecs, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_big_records, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_lanes, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_tailing_readers, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_slices, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_roll_and_counts, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_segment_age_roll, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_errors, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_offset_gaps, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_lane_reader_position, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_crash_copy, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_crash_unsynced_segment_damage, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test_setup_teardown(test_sync_after_many_rolls, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_lost_timeindex, tmp_setup, tmp_teardown),
        /* Last: under UBSan a failure here aborts the process. */
        cmocka_unit_test_setup_teardown(test_max_offset_delta, tmp_setup, tmp_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
