/*
 * tests/unit/test_log_read.c — reading the partition log (core/log/log.h): a
 * reader opened at every offset, offset gaps, lanes and their sidecar,
 * readers tailing a live writer, and zero-copy slices. Every check looks at
 * what really happened: records read back, bytes and files on disk. The
 * write side (rolls, reopening, time, retention, errors, recovery) is in
 * test_log.c.
 */
#include "testutil.h"

#include "core/base/crc32c.h"
#include "core/base/varint.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

/* Opens a reader at offset and checks the first record it returns. */
static void expect_first(sl_log *log, int64_t offset, const char *lane, int64_t want, size_t vsize,
                         char *vbuf)
{
    sl_log_reader *r;
    sl_error err = {0};
    int rc = sl_log_reader_open(log, offset, lane, &r, &err);
    if (rc)
        fail_msg("reader_open %lld: %s", (long long)offset, err.msg);
    sl_record rec;
    rc = sl_log_reader_next(r, &rec, &err);
    if (want < 0) {
        assert_int_equal(rc, SL_EEOF);
    } else {
        if (rc)
            fail_msg("reader at %lld: rc %d %s", (long long)offset, rc, err.msg);
        if (rec.offset != want)
            fail_msg("reader at %lld returned %lld, want %lld", (long long)offset,
                     (long long)rec.offset, (long long)want);
        size_t len = tu_value(vbuf, vsize, want);
        assert_int_equal(rec.value_len, len);
        assert_memory_equal(rec.value, vbuf, len);
    }
    sl_log_reader_close(r);
}

/* ---- offset lookups --------------------------------------------------------- */

static void test_offset_lookup_every_offset(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(1 << 20);
    sl_log *log = tu_open_log(dir, &cfg);
    const int64_t n = 100000 * tu_soak();
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
    log = tu_open_log(dir, &cfg);
    for (int64_t o = 0; o < n; o += 97)
        expect_first(log, o, NULL, o, 100, v);
    expect_first(log, n - 1, NULL, n - 1, 100, v);
    sl_log_close(log);
}

/* Batches whose lastOffsetDelta leaves room past their records (as after
 * compaction): offsets follow lastOffsetDelta, readers skip the gaps. */
static void test_offset_gaps(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
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
        log = tu_open_log(dir, &cfg);
        assert_int_equal(sl_log_end_offset(log), expect_end);
    }
    sl_log_close(log);
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
        if (!strcmp(lane, lane_names[i]))
            return i;
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
        int run = 1 + (int)(tu_rng() % 4);
        for (int r = 0; r < run && i < n; r++, batch++) {
            int k = 1 + (int)(tu_rng() % 30);
            if (k > n - i)
                k = (int)(n - i);
            sl_batch_builder *b = &bs[codecs && batch % 3 == 0];
            tu_append_batch(log, b, i, k, 80, NULL, 0, lane_names[lane]);
            memset(lp->lane_of + i, lane, (size_t)k);
            i += k;
        }
        lane = (lane + 1 + (int)(tu_rng() % 2)) % 3;
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
        if (rc)
            break;
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

/* Flips one byte in the records of every batch whose lane is in mask (bit
 * per lane index), or restores them; the log stays open. */
static void damage_lanes(const char *dir, const tu_disk *d, unsigned mask)
{
    for (size_t i = 0; i < d->nb; i++) {
        const tu_dbatch *b = &d->b[i];
        int li = lane_index(b->lane);
        if (!(mask & (1u << li)))
            continue;
        char p[4200];
        tu_seg_path(p, sizeof p, dir, d->segs[b->seg].base, ".log");
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
    sl_log *log = tu_open_log(dir, &cfg);
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

    tu_disk d;
    tu_disk_scan(dir, &d);
    tu_check_sidecars(dir, &d);

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
    tu_append_batch(log, &b, lp.n, 5, 80, NULL, 0, "c");
    tu_append_batch(log, &b, lp.n + 5, 5, 80, NULL, 0, "");
    tu_append_batch(log, &b, lp.n + 10, 5, 80, NULL, 0, "c");
    sl_batch_builder_free(&b);
    for (int64_t want = lp.n; want < lp.n + 15; want++) {
        if (want == lp.n + 5)
            want += 5;
        assert_int_equal(sl_log_reader_next(r, &rec, &err), 0);
        assert_int_equal(rec.offset, want);
        assert_int_equal(rec.lane_len, 1);
        assert_memory_equal(rec.lane, "c", 1);
    }
    assert_int_equal(sl_log_reader_next(r, &rec, &err), SL_EEOF);
    sl_log_reader_close(r);
    tu_disk_free(&d);

    /* Invalid lane names are refused. */
    assert_int_equal(sl_log_reader_open(log, 0, "A", &r, &err), SL_EINVAL);
    assert_int_equal(sl_log_reader_open(log, 0, "a b", &r, &err), SL_EINVAL);

    /* The sidecars survive a reopen, and are rebuilt when lost. */
    sl_log_close(log);
    tu_disk_scan(dir, &d);
    tu_check_sidecars(dir, &d);
    for (size_t s = 0; s < d.nsegs; s++) {
        char p[4200];
        tu_seg_path(p, sizeof p, dir, d.segs[s].base, ".lanes");
        assert_int_equal(unlink(p), 0);
    }
    log = tu_open_log(dir, &cfg);
    tu_check_sidecars(dir, &d);
    lp.lane_of = realloc(lp.lane_of, (size_t)lp.n + 15);
    assert_non_null(lp.lane_of);
    memset(lp.lane_of + lp.n, 3, 5);
    memset(lp.lane_of + lp.n + 5, 0, 5);
    memset(lp.lane_of + lp.n + 10, 3, 5);
    lp.n += 15;
    check_lane_reader(log, &lp, 0, NULL);
    for (int l = 0; l < 4; l++)
        check_lane_reader(log, &lp, 0, lane_names[l]);
    tu_disk_free(&d);
    sl_log_close(log);

    sl_log_verify_report rep;
    sl_error verr = {0};
    assert_int_equal(sl_log_verify(dir, &rep, &verr), 0);
    if (rep.damaged)
        fail_msg("verify: %s", rep.where);
    assert_int_equal(rep.records, lp.n);
    assert_int_equal(rep.first_offset, 0);
    assert_int_equal(rep.next_offset, lp.n);
    free(lp.lane_of);
}

/* A lane reader's position moves past the batches it skips, so a caller that
 * saves it to resume later does not rescan them. */
static void test_lane_reader_position(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
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
    if (!t->why[0])
        snprintf(t->why, sizeof t->why, fmt, a, b);
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
        if (want >= sh->n)
            break;
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
        if (cnt > sh->n - i)
            cnt = (int)(sh->n - i);
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
        if (k % 16 == 0)
            sched_yield();
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
        if (rc && !s->rc)
            s->rc = rc;
        s->syncs++;
        usleep(2000);
    }
    return NULL;
}

static void test_tailing_readers(void **state)
{
    char *dir = *state;
    sl_log_config cfg = tu_config(64 << 10);
    sl_log *log = tu_open_log(dir, &cfg);
    tail_shared sh = {.log = log, .n = 50000 * tu_soak()};
    atomic_init(&sh.writer_done, false);
    atomic_init(&sh.failures, 0);
    sh.boundary = calloc((size_t)sh.n + 1, 1);
    sh.is_x = calloc((size_t)sh.n, 1);
    assert_non_null(sh.boundary);
    assert_non_null(sh.is_x);
    int64_t nx = 0;
    for (int64_t i = 0, k = 0; i < sh.n; k++) {
        int cnt = TAIL_BATCH(k);
        if (cnt > sh.n - i)
            cnt = (int)(sh.n - i);
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

    if (w.why[0])
        fail_msg("writer: %s", w.why);
    for (int i = 0; i < NREADERS; i++)
        if (rd[i].why[0])
            fail_msg("reader %d: %s", i, rd[i].why);
    assert_int_equal(atomic_load(&sh.failures), 0);
    assert_int_equal(sy.rc, 0);
    assert_true(sy.syncs > 0);
    assert_int_equal(rd[0].seen, sh.n);
    assert_int_equal(rd[1].seen, sh.n);
    assert_int_equal(rd[2].seen, nx);
    assert_int_equal(rd[3].seen, sh.n - rd[3].from);
    assert_true(rd[0].caught_up > 0 && rd[1].caught_up > 0); /* they really tailed */
    assert_true(sl_log_segment_count(log) > 20);
    assert_int_equal(sl_log_size_bytes(log), tu_file_sum(dir));
    sl_log_close(log);
    free(sh.boundary);
    free(sh.is_x);
}

/* ---- slices ------------------------------------------------------------------ */

/* Checks one slice against the batches on disk. */
static void check_slice(sl_log *log, const tu_disk *d, int64_t offset, const char *lane,
                        size_t max_bytes)
{
    sl_log_slice sl;
    sl_error err = {0};
    int rc = sl_log_slice_get(log, offset, lane, max_bytes, &sl, &err);
    if (rc)
        fail_msg("slice at %lld: %s", (long long)offset, err.msg);
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
    const tu_dbatch *fb = &d->b[first];
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
        if (lane)
            assert_string_equal(bl, lane);
        compressed |= (in.attributes & 7) != 0;
        at += d->b[i].size;
        i++;
    }
    sl_batch_reader_free(&br);
    assert_int_equal(at, sl.len);
    size_t nbatches = i - first;
    assert_int_equal(sl.next_offset, d->b[i - 1].base + d->b[i - 1].lod + 1);
    assert_int_equal(sl.compressed, compressed);
    if (nbatches > 1)
        assert_true(sl.len <= max_bytes);
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
    sl_log *log = tu_open_log(dir, &cfg);
    lane_plan lp;
    build_lanes(log, &lp, 8000, 1);
    tu_disk d;
    tu_disk_scan(dir, &d);
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
    log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_slice_get(log, 0, NULL, 1 << 20, &sl, &err), 0);
    uint64_t len0 = sl.len, pos0 = sl.pos;
    int fd0 = sl.fd;
    int deleted = 0;
    assert_int_equal(sl_log_retain(log, 0, &deleted, &err), 0);
    assert_true(deleted > 0);
    assert_false(tu_seg_exists(dir, d.segs[1].base, ".log"));
    uint8_t *buf = malloc(len0);
    assert_non_null(buf);
    assert_int_equal(pread(fd0, buf, len0, (off_t)pos0), (ssize_t)len0);
    sl_batch_info in;
    assert_int_equal(sl_batch_check(buf, len0, &in, &err), 0);
    assert_int_equal(in.base_offset, 0);
    free(buf);
    sl_log_slice_release(&sl);
    assert_false(tu_seg_exists(dir, 0, ".log"));
    tu_disk_free(&d);
    sl_log_close(log);
    free(lp.lane_of);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_offset_lookup_every_offset, tu_tmp_setup,
                                        tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_lanes, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_tailing_readers, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_slices, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_offset_gaps, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_lane_reader_position, tu_tmp_setup, tu_tmp_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
