/*
 * tests/unit/test_store_park.c — pooled stores (core/log/store.h): a parked
 * partition gives back its descriptors and keeps its data, offsets, readers
 * and retention; the pool's limit parks the least recently used; appends go
 * on while another thread parks.
 */
#include "testutil.h"
#include "core/log/store.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

/* Appends n one-record batches, values {"i":first+k}, timestamps ts0 + k,
 * lane "lane-a" for odd offsets; asserts they land in order. */
static void store_append(const sl_store *st, int64_t first, int n, int64_t ts0)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    sl_error err = {0};
    for (int k = 0; k < n; k++) {
        int64_t i = first + k;
        char v[64];
        int len = snprintf(v, sizeof v, "{\"i\":%lld}", (long long)i);
        assert_int_equal(sl_batch_builder_reset(&b, i % 2 ? "lane-a" : ""), 0);
        assert_int_equal(sl_batch_builder_add(&b, ts0 + k, NULL, 0, v, (size_t)len), 0);
        sl_batch batch;
        int64_t base = -1;
        assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
        int rc = sl_store_append(st, &batch, &base, &err);
        if (rc)
            fail_msg("append %lld: %s", (long long)i, err.msg);
        assert_int_equal(base, i);
    }
    sl_batch_builder_free(&b);
}

/* Reads every record from offset (lane NULL = all) until SL_EEOF, checking
 * that the values are {"i":offset}; returns how many. */
static int64_t store_read(const sl_store *st, int64_t offset, const char *lane)
{
    void *r;
    sl_error err = {0};
    assert_int_equal(sl_store_reader_open(st, offset, lane, &r, &err), 0);
    int64_t n = 0;
    sl_record rec;
    int rc;
    while ((rc = sl_store_reader_next(st, r, &rec, &err)) == 0) {
        char want[64];
        int len = snprintf(want, sizeof want, "{\"i\":%lld}", (long long)rec.offset);
        assert_int_equal(rec.value_len, (size_t)len);
        assert_memory_equal(rec.value, want, (size_t)len);
        n++;
    }
    assert_int_equal(rc, SL_EEOF);
    sl_store_reader_close(st, r);
    return n;
}

static void test_park_keeps_data(void **state)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/p0", (const char *)*state);
    sl_log_config cfg = tu_config(4096); /* several segments */
    sl_store_pool *pool;
    assert_int_equal(sl_store_pool_new(16, &pool), 0);
    sl_store st;
    sl_error err = {0};
    int fds0 = open_fds();
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, false, pool, &err), 0);
    store_append(&st, 0, 200, 1000);
    assert_int_equal(sl_store_sync(&st, &err), 0);
    uint64_t bytes, segs, bytes2, segs2;
    sl_store_stat(&st, &bytes, &segs);
    assert_true(segs > 2);
    int64_t t150;
    assert_int_equal(sl_store_offset_for_time(&st, 1150, &t150, &err), 0);
    assert_int_equal(t150, 150);
    int fds_open = open_fds();
    assert_true(fds_open > fds0 + 4);

    assert_false(sl_store_parked(&st));
    assert_int_equal(sl_store_park(&st, &err), 0);
    assert_true(sl_store_parked(&st));
    assert_int_equal(open_fds(), fds0); /* every descriptor given back */
    /* Listings and end-offset checks are answered without reopening. */
    assert_int_equal(sl_store_start_offset(&st), 0);
    assert_int_equal(sl_store_end_offset(&st), 200);
    sl_store_stat(&st, &bytes2, &segs2);
    assert_int_equal(bytes2, bytes);
    assert_int_equal(segs2, segs);
    assert_int_equal(sl_store_sync(&st, &err), 0);            /* synced before it parked */
    assert_int_equal(sl_store_retain(&st, 1 << 30, &err), 0); /* nothing due: stays parked */
    assert_true(sl_store_parked(&st));
    sl_store_pool_stats ps;
    sl_store_pool_stats_get(pool, &ps);
    assert_int_equal(ps.stores, 1);
    assert_int_equal(ps.open, 0);
    assert_int_equal(ps.parks, 1);

    /* A reader at the end does not wake it; one with records to read does. */
    void *r;
    sl_record rec;
    assert_int_equal(sl_store_reader_open(&st, 200, NULL, &r, &err), 0);
    assert_int_equal(sl_store_reader_next(&st, r, &rec, &err), SL_EEOF);
    assert_true(sl_store_parked(&st));
    sl_store_reader_close(&st, r);
    assert_int_equal(sl_store_reader_open(&st, 201, NULL, &r, &err), SL_ERANGE);
    assert_int_equal(store_read(&st, 0, NULL), 200);
    assert_false(sl_store_parked(&st));
    /* Reopened, a closed segment holds one descriptor (its .log; indexes
     * and lane runs are mapped or in memory), the active one four, the
     * partition two (directory and .lock). */
    assert_int_equal(open_fds(), fds0 + 2 + 4 + (int)(segs - 1));
    assert_int_equal(store_read(&st, 0, "lane-a"), 100);
    assert_int_equal(sl_store_park(&st, &err), 0);
    assert_int_equal(sl_store_offset_for_time(&st, 1150, &t150, &err), 0);
    assert_int_equal(t150, 150);

    /* Appends reopen it and go on at the next offset. */
    assert_int_equal(sl_store_park(&st, &err), 0);
    store_append(&st, 200, 10, 2000);
    assert_int_equal(sl_store_end_offset(&st), 210);
    assert_int_equal(store_read(&st, 0, NULL), 210);
    sl_store_pool_stats_get(pool, &ps);
    assert_true(ps.reopens >= 3);
    sl_store_close(&st);
    assert_int_equal(open_fds(), fds0);

    /* A park is a clean close: the next open has nothing to repair. */
    sl_log *log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_end_offset(log), 210);
    sl_log_close(log);
    tu_check_companions(dir, "after parks");
    sl_store_pool_free(pool);
}

static void test_reader_across_park(void **state)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/p0", (const char *)*state);
    sl_log_config cfg = tu_config(4096);
    sl_store_pool *pool;
    assert_int_equal(sl_store_pool_new(16, &pool), 0);
    sl_store st;
    sl_error err = {0};
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, false, pool, &err), 0);
    store_append(&st, 0, 50, 1000);
    void *r;
    sl_record rec;
    assert_int_equal(sl_store_reader_open(&st, 0, "", &r, &err), 0); /* base lane: even */
    for (int64_t want = 0; want < 20; want += 2) {
        assert_int_equal(sl_store_reader_next(&st, r, &rec, &err), 0);
        assert_int_equal(rec.offset, want);
    }
    /* A reader in the middle of its records holds the log open. */
    assert_int_equal(sl_store_park(&st, &err), SL_EDEFERRED);
    assert_int_equal(sl_store_pool_sweep(pool, 0), 0);
    assert_false(sl_store_parked(&st));
    int rc;
    int64_t last = 18;
    while ((rc = sl_store_reader_next(&st, r, &rec, &err)) == 0)
        last = rec.offset;
    assert_int_equal(rc, SL_EEOF);
    assert_int_equal(last, 48);
    assert_int_equal(sl_store_reader_position(&st, r), 50);
    /* Caught up, it lets go: the store parks under it. */
    assert_int_equal(sl_store_pool_sweep(pool, 0), 1);
    assert_true(sl_store_parked(&st));
    assert_int_equal(sl_store_reader_next(&st, r, &rec, &err), SL_EEOF);
    assert_int_equal(sl_store_reader_position(&st, r), 50);
    store_append(&st, 50, 10, 3000);
    assert_int_equal(sl_store_park(&st, &err), 0);
    /* ... and goes on where it was, with its lane, when more arrives. */
    for (int64_t want = 50; want < 60; want += 2) {
        assert_int_equal(sl_store_reader_next(&st, r, &rec, &err), 0);
        assert_int_equal(rec.offset, want);
    }
    assert_int_equal(sl_store_reader_next(&st, r, &rec, &err), SL_EEOF);
    assert_int_equal(sl_store_reader_position(&st, r), 60);
    sl_store_reader_close(&st, r);
    sl_store_close(&st);
    sl_store_pool_free(pool);
}

static void test_lru_limit(void **state)
{
    sl_log_config cfg = tu_config(64 << 10);
    sl_store_pool *pool;
    assert_int_equal(sl_store_pool_new(2, &pool), 0);
    sl_store st[4];
    sl_error err = {0};
    for (int i = 0; i < 3; i++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/p%d", (const char *)*state, i);
        assert_int_equal(sl_store_open_pooled(&st[i], dir, &cfg, NULL, false, pool, &err), 0);
        store_append(&st[i], 0, 5 + i, 1000);
    }
    /* Opening the third parked the least recently used: the first. */
    assert_true(sl_store_parked(&st[0]));
    assert_false(sl_store_parked(&st[1]));
    assert_false(sl_store_parked(&st[2]));
    store_append(&st[1], 6, 1, 1000); /* 1 is now the most recent */
    store_append(&st[0], 5, 1, 1000); /* reopens 0: 2 is the oldest open */
    assert_false(sl_store_parked(&st[0]));
    assert_false(sl_store_parked(&st[1]));
    assert_true(sl_store_parked(&st[2]));
    sl_store_pool_stats ps;
    sl_store_pool_stats_get(pool, &ps);
    assert_int_equal(ps.open, 2);
    assert_int_equal(ps.stores, 3);

    /* Pinned stores are never parked: two readers in the middle of their
     * records keep 0 and 1 open, so reopening 2 goes past the limit ... */
    void *r0, *r1;
    sl_record rec;
    assert_int_equal(sl_store_reader_open(&st[0], 0, NULL, &r0, &err), 0);
    assert_int_equal(sl_store_reader_next(&st[0], r0, &rec, &err), 0);
    assert_int_equal(sl_store_reader_open(&st[1], 0, NULL, &r1, &err), 0);
    assert_int_equal(sl_store_reader_next(&st[1], r1, &rec, &err), 0);
    assert_int_equal(store_read(&st[2], 0, NULL), 7);
    sl_store_pool_stats_get(pool, &ps);
    assert_int_equal(ps.open, 3);
    assert_false(sl_store_parked(&st[0]));
    assert_false(sl_store_parked(&st[1]));
    /* ... until they let go: the next reopening parks back to the limit. */
    sl_store_reader_close(&st[0], r0);
    sl_store_reader_close(&st[1], r1);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/p3", (const char *)*state);
    assert_int_equal(sl_store_open_pooled(&st[3], dir, &cfg, NULL, false, pool, &err), 0);
    sl_store_pool_stats_get(pool, &ps);
    assert_int_equal(ps.open, 2);
    assert_int_equal(ps.stores, 4);
    /* A lower limit applies at once. */
    sl_store_pool_set_max(pool, 1);
    sl_store_pool_stats_get(pool, &ps);
    assert_int_equal(ps.open, 1);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(store_read(&st[i], 0, NULL), i == 3 ? 0 : i < 2 ? 6 + i : 7);
        sl_store_pool_stats_get(pool, &ps);
        assert_int_equal(ps.open, 1);
    }
    for (int i = 0; i < 4; i++)
        sl_store_close(&st[i]);
    sl_store_pool_stats_get(pool, &ps);
    assert_int_equal(ps.stores, 0);
    assert_int_equal(ps.open, 0);
    sl_store_pool_free(pool);
}

static void test_retention_of_parked(void **state)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/p0", (const char *)*state);
    sl_log_config cfg = tu_config(4096);
    cfg.retention_ms = 1000;
    sl_store_pool *pool;
    assert_int_equal(sl_store_pool_new(16, &pool), 0);
    sl_store st;
    sl_error err = {0};
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, false, pool, &err), 0);
    store_append(&st, 0, 100, 10000);    /* old: timestamps 10000.. */
    store_append(&st, 100, 100, 100000); /* new: 100000.. */
    uint64_t bytes, segs;
    sl_store_stat(&st, &bytes, &segs);
    assert_true(segs > 3);
    assert_int_equal(sl_store_park(&st, &err), 0);
    /* Nothing is due yet at 10500: it stays parked. */
    assert_int_equal(sl_store_retain(&st, 10500, &err), 0);
    assert_true(sl_store_parked(&st));
    assert_int_equal(sl_store_start_offset(&st), 0);
    /* At 50000 the old segments are due: it reopens and deletes them. */
    assert_int_equal(sl_store_retain(&st, 50000, &err), 0);
    assert_false(sl_store_parked(&st));
    int64_t start = sl_store_start_offset(&st);
    assert_true(start > 0 && start <= 100);
    assert_int_equal(sl_store_end_offset(&st), 200);
    assert_int_equal(store_read(&st, start, NULL), 200 - start);
    /* The same answer as a log that was never parked would give. */
    sl_log_summary sum;
    assert_int_equal(sl_store_park(&st, &err), 0);
    sl_log *log = sl_store_log(&st);
    assert_non_null(log);
    sl_log_summarize(log, &sum);
    assert_false(sl_log_retain_due(&cfg, &sum, 50000));
    assert_true(sl_log_retain_due(&cfg, &sum, 200000)); /* everything expired: roll */
    int deleted = 0;
    assert_int_equal(sl_log_retain(log, 50000, &deleted, &err), 0);
    assert_int_equal(deleted, 0);
    sl_store_close(&st);
    sl_store_pool_free(pool);
}

/* A cleanly closed log starts parked from the summary in .clean, costing no
 * descriptor; one whose active segment changed since (or an older, empty
 * marker) is opened and checked instead. */
static void test_start_parked(void **state)
{
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/p0", (const char *)*state);
    sl_log_config cfg = tu_config(4096);
    sl_store_pool *pool;
    assert_int_equal(sl_store_pool_new(16, &pool), 0);
    sl_store st;
    sl_error err = {0};
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, true, pool, &err), 0);
    assert_false(sl_store_parked(&st)); /* new: nothing to trust yet */
    store_append(&st, 0, 120, 1000);
    uint64_t bytes, segs, b2, s2;
    sl_store_stat(&st, &bytes, &segs);
    sl_store_close(&st);

    int fds0 = open_fds();
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, true, pool, &err), 0);
    assert_true(sl_store_parked(&st));
    assert_int_equal(open_fds(), fds0);
    assert_int_equal(sl_store_start_offset(&st), 0);
    assert_int_equal(sl_store_end_offset(&st), 120);
    sl_store_stat(&st, &b2, &s2);
    assert_int_equal(b2, bytes);
    assert_int_equal(s2, segs);
    assert_int_equal(store_read(&st, 0, NULL), 120);
    assert_false(sl_store_parked(&st));
    store_append(&st, 120, 5, 2000);
    sl_store_close(&st);

    /* Bytes added to the active segment behind the summary's back. */
    sl_log_summary sum;
    assert_int_equal(sl_log_clean_summary(dir, &sum, &err), 0);
    assert_int_equal(sum.end, 125);
    tu_seg_path(path, sizeof path, dir, sum.active_base, ".log");
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs("garbage", f);
    fclose(f);
    assert_int_equal(sl_log_clean_summary(dir, &sum, &err), SL_ENOENT);
    assert_non_null(strstr(err.msg, "changed since its clean close"));
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, true, pool, &err), 0);
    assert_false(sl_store_parked(&st)); /* opened: recovery cut the garbage */
    assert_int_equal(sl_store_end_offset(&st), 125);
    sl_store_close(&st);

    /* A marker from before summaries (empty) is no summary. */
    snprintf(path, sizeof path, "%s/.clean", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, true, pool, &err), 0);
    assert_false(sl_store_parked(&st));
    assert_int_equal(store_read(&st, 0, NULL), 125);
    sl_store_close(&st);
    sl_store_pool_free(pool);
}

typedef struct race {
    sl_store *st;
    sl_store_pool *pool;
    _Atomic int done;
    int64_t n;
    int64_t parks;
} race;

static void *appender(void *arg)
{
    race *r = arg;
    for (int64_t i = 0; i < r->n; i += 50) {
        store_append(r->st, i, 50, 1000 + i);
        if (i % 500 == 0) {
            sl_error err = {0};
            assert_int_equal(sl_store_sync(r->st, &err), 0);
        }
    }
    atomic_store(&r->done, 1);
    return NULL;
}

static void *parker(void *arg)
{
    race *r = arg;
    sl_error err = {0};
    while (!atomic_load(&r->done)) {
        int rc = sl_store_park(r->st, &err);
        assert_true(rc == 0 || rc == SL_EDEFERRED);
        r->parks += rc == 0;
        (void)sl_store_end_offset(r->st);
        uint64_t b, s;
        sl_store_stat(r->st, &b, &s);
        r->parks += (int64_t)sl_store_pool_sweep(r->pool, 0);
        usleep(200);
    }
    return NULL;
}

/* A tail reader, as a rule runs: reads to the end, waits, reads on. */
static void *tailer(void *arg)
{
    race *r = arg;
    void *rd;
    sl_error err = {0};
    assert_int_equal(sl_store_reader_open(r->st, 0, NULL, &rd, &err), 0);
    int64_t next = 0;
    while (next < r->n) {
        sl_record rec;
        int rc = sl_store_reader_next(r->st, rd, &rec, &err);
        if (rc == SL_EEOF) {
            sched_yield();
            continue;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(rec.offset, next);
        next++;
    }
    sl_store_reader_close(r->st, rd);
    return NULL;
}

static void test_append_while_parking(void **state)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/p0", (const char *)*state);
    sl_log_config cfg = tu_config(64 << 10);
    sl_store_pool *pool;
    assert_int_equal(sl_store_pool_new(16, &pool), 0);
    sl_store st;
    sl_error err = {0};
    assert_int_equal(sl_store_open_pooled(&st, dir, &cfg, NULL, false, pool, &err), 0);
    race r = {.st = &st, .pool = pool, .n = 20000 * tu_soak()};
    pthread_t a, p, t;
    assert_int_equal(pthread_create(&t, NULL, tailer, &r), 0);
    assert_int_equal(pthread_create(&p, NULL, parker, &r), 0);
    assert_int_equal(pthread_create(&a, NULL, appender, &r), 0);
    pthread_join(a, NULL);
    pthread_join(p, NULL);
    pthread_join(t, NULL);
    print_message("parked %lld times during %lld appends\n", (long long)r.parks, (long long)r.n);
    assert_true(r.parks > 0);
    assert_int_equal(sl_store_end_offset(&st), r.n);
    assert_int_equal(store_read(&st, 0, NULL), r.n);
    sl_store_close(&st);
    sl_log *log = tu_open_log(dir, &cfg);
    assert_int_equal(sl_log_end_offset(log), r.n);
    sl_log_close(log);
    tu_check_companions(dir, "after racing parks");
    sl_store_pool_free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_park_keeps_data, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_reader_across_park, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_lru_limit, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_retention_of_parked, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_start_parked, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_append_while_parking, tu_tmp_setup, tu_tmp_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
