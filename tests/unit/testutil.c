/*
 * tests/unit/testutil.c — shared helpers for the unit tests.
 */
#include "testutil.h"
#include "core/log_internal.h"
#include "core/segment.h"
#include "core/varint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    if (fd < 0) fail_msg("open %s: %s", path, strerror(errno));
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
 * core/segment.h says they say about it. Independent of sl_log_verify(). */
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
            if (in.max_ts > run_max) run_max = in.max_ts;
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
            if (k && strcmp(bm[k].lane, bm[k - 1].lane) == 0) continue;
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
