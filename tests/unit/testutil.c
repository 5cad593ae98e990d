/*
 * tests/unit/testutil.c — shared helpers for the unit tests.
 */
#include "testutil.h"
#include "core/log/log_internal.h"
#include "core/log/segment.h"
#include "core/base/varint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

char *tu_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/sluice-test-XXXXXX", t && *t ? t : "/tmp");
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_rmdir(char *dir)
{
    if (!dir)
        return;
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

size_t tu_value(char *buf, size_t size, int64_t i)
{
    int n = snprintf(buf, size + 64, "{\"n\":%lld,\"pad\":\"", (long long)i);
    size_t len = (size_t)n;
    size_t pad = size > len + 2 ? size - len - 2 : 0;
    for (size_t k = 0; k < pad; k++)
        buf[len++] = (char)('a' + (i + (int64_t)k) % 26);
    buf[len++] = '"';
    buf[len++] = '}';
    return len;
}

void tu_append(sl_log *log, int64_t first, int64_t count, int per_batch, size_t value_size,
               int64_t ts0, const char *lane, sl_codec codec)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 0);
    char *v = malloc(value_size + 64);
    assert_non_null(v);
    int64_t i = first, end = first + count;
    while (i < end) {
        assert_int_equal(sl_batch_builder_reset(&b, lane), 0);
        for (int k = 0; k < per_batch && i < end; k++, i++) {
            size_t len = tu_value(v, value_size, i);
            char key[32];
            int kl = snprintf(key, sizeof key, "k%lld", (long long)(i % 7));
            assert_int_equal(sl_batch_builder_add(&b, ts0 + i, key, (size_t)kl, v, len), 0);
        }
        sl_batch batch;
        sl_error err = {0};
        assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
        int64_t base = -1;
        int64_t expect = sl_log_end_offset(log);
        int rc = sl_log_append(log, &batch, &base, &err);
        if (rc)
            fail_msg("append: %s", err.msg);
        assert_int_equal(base, expect);
    }
    free(v);
    sl_batch_builder_free(&b);
}

int64_t tu_read_all(sl_log *log, int64_t offset, const char *lane, size_t value_size)
{
    sl_log_reader *r;
    sl_error err = {0};
    int rc = sl_log_reader_open(log, offset, lane, &r, &err);
    if (rc)
        fail_msg("reader_open: %s", err.msg);
    char *v = malloc(value_size + 64);
    assert_non_null(v);
    int64_t n = 0, prev = offset - 1;
    sl_record rec;
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
        assert_true(rec.offset > prev);
        prev = rec.offset;
        size_t len = tu_value(v, value_size, rec.offset);
        assert_int_equal(rec.value_len, len);
        assert_memory_equal(rec.value, v, len);
        n++;
    }
    if (rc != SL_EEOF)
        fail_msg("reader_next: %s", err.msg);
    free(v);
    sl_log_reader_close(r);
    return n;
}

sl_log_config tu_config(uint64_t seg)
{
    sl_log_config c;
    sl_log_config_default(&c);
    c.segment_bytes = seg;
    c.segment_ms = 0;
    c.retention_ms = -1;
    c.retention_bytes = -1;
    return c;
}

int64_t tu_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

typedef struct batch_meta {
    uint64_t pos;
    int64_t base, last; /* first and last offset */
    int64_t run_max_ts; /* largest timestamp up to and including this batch */
    char lane[SL_LANE_MAX + 1];
} batch_meta;

uint8_t *tu_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    assert_non_null(buf);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return buf;
}

/* Checks, for every segment of the closed log in dir, that the .log holds only
 * whole valid batches and that .index, .timeindex and .lanes say exactly what
 * core/log/segment.h says they say about it. Independent of sl_log_verify(). */
void tu_check_companions(const char *dir, const char *when)
{
    int64_t *bases = NULL;
    size_t nseg = 0;
    sl_error err = {0};
    assert_int_equal(sl__log_list_bases(dir, &bases, &nseg, &err), 0);
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    for (size_t s = 0; s < nseg; s++) {
        char stem[4096], p[4200];
        snprintf(stem, sizeof stem, "%s/%020" PRId64, dir, bases[s]);
        size_t len, ilen, tlen, llen;
        snprintf(p, sizeof p, "%s.log", stem);
        uint8_t *log = tu_read_file(p, &len);
        snprintf(p, sizeof p, "%s.index", stem);
        uint8_t *ix = tu_read_file(p, &ilen);
        snprintf(p, sizeof p, "%s.timeindex", stem);
        uint8_t *tx = tu_read_file(p, &tlen);
        snprintf(p, sizeof p, "%s.lanes", stem);
        uint8_t *lx = tu_read_file(p, &llen);
        if (ilen % SL_OFFSET_ENTRY || tlen % SL_TIME_ENTRY || llen % SL_LANES_ENTRY)
            fail_msg("%s: %s: companion sizes %zu/%zu/%zu are not whole entries", when, stem, ilen,
                     tlen, llen);

        batch_meta *bm = NULL;
        size_t nb = 0, cap = 0;
        int64_t run_max = INT64_MIN, next = bases[s];
        for (uint64_t pos = 0; pos < len;) {
            sl_batch_info in;
            err.msg[0] = '\0';
            if (sl_batch_check(log + pos, len - pos, &in, &err))
                fail_msg("%s: %s.log: byte %" PRIu64 ": not a whole valid batch: %s", when, stem,
                         pos, err.msg);
            if (in.base_offset < next)
                fail_msg("%s: %s.log: byte %" PRIu64 ": offset %" PRId64 " goes backwards", when,
                         stem, pos, in.base_offset);
            if (nb == cap) {
                cap = cap ? cap * 2 : 256;
                bm = realloc(bm, cap * sizeof *bm);
                assert_non_null(bm);
            }
            batch_meta *m = &bm[nb++];
            if (in.max_ts > run_max)
                run_max = in.max_ts;
            m->pos = pos;
            m->base = in.base_offset;
            m->last = in.base_offset + in.last_offset_delta;
            m->run_max_ts = run_max;
            if (sl_batch_lane(&br, log + pos, sl_batch_size(&in), m->lane, &err))
                fail_msg("%s: %s.log: byte %" PRIu64 ": %s", when, stem, pos, err.msg);
            next = m->last + 1;
            pos += sl_batch_size(&in);
        }

        /* Offset index: increasing entries, each at a batch with its offset. */
        size_t b = 0;
        for (size_t i = 0; i < ilen / SL_OFFSET_ENTRY; i++) {
            uint32_t rel = sl_be32_get(ix + i * 8), pos = sl_be32_get(ix + i * 8 + 4);
            while (b < nb && bm[b].pos < pos)
                b++;
            if (b == nb || bm[b].pos != pos || bm[b].base - bases[s] != (int64_t)rel)
                fail_msg("%s: %s.index: entry %zu {%u, %u} is not a batch of the log", when, stem,
                         i, rel, pos);
        }
        /* Time index: inside the segment, increasing, and each timestamp
         * reached by a record at or before the offset it names. */
        int64_t prev_ts = INT64_MIN;
        uint32_t prev_rel = 0;
        for (size_t i = 0; i < tlen / SL_TIME_ENTRY; i++) {
            int64_t ts = (int64_t)sl_be64_get(tx + i * 12);
            uint32_t rel = sl_be32_get(tx + i * 12 + 8);
            int64_t off = bases[s] + rel;
            size_t k = 0;
            while (k < nb && bm[k].last < off)
                k++;
            if (k == nb || ts <= prev_ts || rel < prev_rel || ts > bm[k].run_max_ts)
                fail_msg("%s: %s.timeindex: entry %zu {ts %" PRId64 ", rel %u} does not fit "
                         "the log (%zu batches, offsets up to %" PRId64 ")",
                         when, stem, i, ts, rel, nb, next - 1);
            prev_ts = ts;
            prev_rel = rel;
        }
        if (nb && (tlen == 0 || prev_ts != run_max))
            fail_msg("%s: %s.timeindex: ends at ts %" PRId64 ", the segment's newest record has "
                     "%" PRId64,
                     when, stem, tlen ? prev_ts : INT64_MIN, run_max);
        /* Lane sidecar: exactly one entry per run of batches with one lane. */
        size_t r = 0;
        for (size_t k = 0; k < nb; k++) {
            if (k && strcmp(bm[k].lane, bm[k - 1].lane) == 0)
                continue;
            uint8_t want[SL_LANES_ENTRY] = {0};
            size_t ll = strlen(bm[k].lane);
            sl_be32_put(want, (uint32_t)(bm[k].base - bases[s]));
            sl_be32_put(want + 4, (uint32_t)bm[k].pos);
            want[8] = (uint8_t)ll;
            memcpy(want + 9, bm[k].lane, ll);
            if (r >= llen / SL_LANES_ENTRY || memcmp(lx + r * SL_LANES_ENTRY, want, sizeof want))
                fail_msg("%s: %s.lanes: entry %zu does not describe the run of lane \"%s\" at "
                         "byte %" PRIu64,
                         when, stem, r, bm[k].lane, bm[k].pos);
            r++;
        }
        if (r != llen / SL_LANES_ENTRY)
            fail_msg("%s: %s.lanes: %zu entries, the log has %zu lane runs", when, stem,
                     llen / SL_LANES_ENTRY, r);
        free(bm);
        free(log);
        free(ix);
        free(tx);
        free(lx);
    }
    sl_batch_reader_free(&br);
    free(bases);
}

/* ---- the partition log tests ---------------------------------------------- */

/* SLUICE_SOAK=N multiplies the sizes of the bigger tests. */
int64_t tu_soak(void)
{
    const char *s = getenv("SLUICE_SOAK");
    long v = s ? strtol(s, NULL, 10) : 0;
    return v > 1 ? v : 1;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

uint64_t tu_rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Each test gets a fresh directory in *state, removed even when it fails. */
int tu_tmp_setup(void **state)
{
    *state = tu_tmpdir();
    return 0;
}

int tu_tmp_teardown(void **state)
{
    tu_rmdir(*state);
    return 0;
}

sl_log *tu_open_log(const char *dir, const sl_log_config *cfg)
{
    sl_log_open_options o = {.create = true};
    sl_log *log = NULL;
    sl_error err = {0};
    int rc = sl_log_open(dir, cfg, &o, &log, &err);
    if (rc)
        fail_msg("open %s: %s", dir, err.msg);
    return log;
}

void tu_seg_path(char *out, size_t size, const char *dir, int64_t base, const char *ext)
{
    snprintf(out, size, "%s/%020lld%s", dir, (long long)base, ext);
}

int tu_seg_exists(const char *dir, int64_t base, const char *ext)
{
    char p[4200];
    tu_seg_path(p, sizeof p, dir, base, ext);
    return access(p, F_OK) == 0;
}

/* Reads a whole file (caller frees); NULL when it does not exist. */
uint8_t *tu_slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
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

static int cmp_seg(const void *a, const void *b)
{
    int64_t x = ((const tu_dseg *)a)->base, y = ((const tu_dseg *)b)->base;
    return (x > y) - (x < y);
}

/* Lists the *.log files (asserting their names are 20 digits), checks every
 * batch's CRC, that each segment starts with the batch its name says and
 * that offsets continue from one batch to the next. */
void tu_disk_scan(const char *dir, tu_disk *d)
{
    memset(d, 0, sizeof *d);
    DIR *dh = opendir(dir);
    assert_non_null(dh);
    struct dirent *e;
    size_t cap = 0;
    while ((e = readdir(dh))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".log") != 0)
            continue;
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
        tu_seg_path(p, sizeof p, dir, d->segs[s].base, ".log");
        size_t len;
        uint8_t *buf = tu_slurp(p, &len);
        assert_non_null(buf);
        d->segs[s].size = len;
        if (next >= 0 && len)
            assert_int_equal(d->segs[s].base, next);
        size_t pos = 0;
        while (pos < len) {
            sl_batch_info in;
            sl_error err = {0};
            int rc = sl_batch_check(buf + pos, len - pos, &in, &err);
            if (rc)
                fail_msg("%s: byte %zu: %d %s", p, pos, rc, err.msg);
            if (pos == 0)
                assert_int_equal(in.base_offset, d->segs[s].base);
            if (next >= 0)
                assert_int_equal(in.base_offset, next);
            next = in.base_offset + in.last_offset_delta + 1;
            if (d->nb == bcap) {
                bcap = bcap ? bcap * 2 : 256;
                d->b = realloc(d->b, bcap * sizeof *d->b);
                assert_non_null(d->b);
            }
            tu_dbatch *b = &d->b[d->nb++];
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

void tu_disk_free(tu_disk *d)
{
    free(d->segs);
    free(d->b);
    memset(d, 0, sizeof *d);
}

uint64_t tu_disk_bytes(const tu_disk *d)
{
    uint64_t t = 0;
    for (size_t i = 0; i < d->nsegs; i++)
        t += d->segs[i].size;
    return t;
}

/* Appends records [first, first + n) with values tu_value(i, vsize), key
 * "k<i%7>", timestamps ts[i - first] (or ts0 + i) and lane, as one batch;
 * asserts it lands at first. */
void tu_append_batch(sl_log *log, sl_batch_builder *b, int64_t first, int n, size_t vsize,
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

uint64_t tu_file_sum(const char *dir)
{
    tu_disk d;
    tu_disk_scan(dir, &d);
    uint64_t t = tu_disk_bytes(&d);
    tu_disk_free(&d);
    return t;
}

/* One .lanes sidecar entry, as core/log/segment.h lays it out. */
#define LANES_ENTRY 48

/* The .lanes sidecar of each segment holds one entry per run of batches of
 * one lane: {rel, pos, len, lane, zeros}. */
void tu_check_sidecars(const char *dir, const tu_disk *d)
{
    for (size_t s = 0; s < d->nsegs; s++) {
        char p[4200];
        tu_seg_path(p, sizeof p, dir, d->segs[s].base, ".lanes");
        size_t len;
        uint8_t *e = tu_slurp(p, &len);
        assert_non_null(e);
        assert_int_equal(len % LANES_ENTRY, 0);
        size_t k = 0;
        const char *prev = NULL;
        for (size_t i = 0; i < d->nb; i++) {
            const tu_dbatch *b = &d->b[i];
            if (b->seg != s || (prev && strcmp(prev, b->lane) == 0)) {
                if (b->seg == s)
                    prev = b->lane;
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

const char *tu_guard_put(tu_guard *g, const void *s, size_t n)
{
    if (!g->map || g->size < n) {
        tu_guard_free(g);
        g->page = (size_t)sysconf(_SC_PAGESIZE);
        g->size = (n / g->page + 1) * g->page;
        g->map = mmap(NULL, g->size + g->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
        assert_true(g->map != MAP_FAILED);
        assert_int_equal(mprotect(g->map + g->size, g->page, PROT_NONE), 0);
    }
    char *p = g->map + g->size - n;
    memcpy(p, s, n);
    return p;
}

void tu_guard_free(tu_guard *g)
{
    if (g->map)
        munmap(g->map, g->size + g->page);
    g->map = NULL;
    g->size = 0;
}
