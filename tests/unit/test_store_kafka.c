/*
 * tests/unit/test_store_kafka.c — the Kafka-backed partition store
 * (core/log/store_kafka.h) against librdkafka's in-process mock cluster:
 * appends and their delivery outcomes, offsets, readers with lane filters
 * and on_data, two readers of one partition, watermarks seen from a second
 * router, a topic with too few partitions, back-pressure while the brokers
 * are down, a durable set's failures and a buffer set's retries.
 */
#include "testutil.h"
#include "core/base/slog.h"
#include "core/log/store_kafka.h"
#include "core/log/store_kafka_internal.h" /* the producer, for a fatal error */

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_MS 10000 /* the longest any wait of these tests may take */
#define NP 4

/* ---- the mock cluster ---------------------------------------------------------- */

typedef struct mock {
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mc;
    sl_kafka_cluster cl;
} mock;

/* Fast reconnection: the tests take brokers down and up. */
static char p1[] = "reconnect.backoff.ms=20", p2[] = "reconnect.backoff.max.ms=200",
            p3[] = "retry.backoff.ms=50";
static char *test_props[] = {p1, p2, p3};

static void mock_start(mock *m)
{
    char es[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", es, sizeof es);
    m->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, es, sizeof es);
    assert_non_null(m->rk);
    m->mc = rd_kafka_mock_cluster_new(m->rk, 3);
    assert_non_null(m->mc);
    m->cl = (sl_kafka_cluster){
        .brokers = rd_kafka_mock_cluster_bootstraps(m->mc),
        .client_id = "test",
        .props = test_props,
        .nprops = sizeof test_props / sizeof test_props[0],
    };
}

static void mock_stop(mock *m)
{
    rd_kafka_mock_cluster_destroy(m->mc);
    rd_kafka_destroy(m->rk);
}

static void brokers(mock *m, bool up)
{
    for (int id = 1; id <= 3; id++)
        assert_int_equal(up ? rd_kafka_mock_broker_set_up(m->mc, id)
                            : rd_kafka_mock_broker_set_down(m->mc, id),
                         0);
}

/* ---- the owner's side: callbacks and waiting ------------------------------------------- */

typedef struct owner {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t durable[NP];
    int data[NP];
} owner;

static void owner_init(owner *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
}

static void owner_free(owner *o)
{
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
}

static void on_durable(void *ctx, int32_t p, int64_t seq_end)
{
    owner *o = ctx;
    pthread_mutex_lock(&o->mu);
    assert_true(seq_end > o->durable[p]); /* never goes back, never repeats */
    o->durable[p] = seq_end;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void on_data(void *ctx, int32_t p)
{
    owner *o = ctx;
    pthread_mutex_lock(&o->mu);
    o->data[p]++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits until partition p is durable up to end; false after WAIT_MS. */
static bool wait_durable(owner *o, int32_t p, int64_t end)
{
    struct timespec ts;
    deadline(&ts, WAIT_MS);
    pthread_mutex_lock(&o->mu);
    int rc = 0;
    while (o->durable[p] < end && rc == 0)
        rc = pthread_cond_timedwait(&o->cv, &o->mu, &ts);
    bool ok = o->durable[p] >= end;
    pthread_mutex_unlock(&o->mu);
    return ok;
}

/* Waits until on_data has been called more than seen times for p. */
static bool wait_data(owner *o, int32_t p, int seen)
{
    struct timespec ts;
    deadline(&ts, WAIT_MS);
    pthread_mutex_lock(&o->mu);
    int rc = 0;
    while (o->data[p] <= seen && rc == 0)
        rc = pthread_cond_timedwait(&o->cv, &o->mu, &ts);
    bool ok = o->data[p] > seen;
    pthread_mutex_unlock(&o->mu);
    return ok;
}

static int data_count(owner *o, int32_t p)
{
    pthread_mutex_lock(&o->mu);
    int n = o->data[p];
    pthread_mutex_unlock(&o->mu);
    return n;
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

/* ---- records ---------------------------------------------------------------- */

/* Record i: key "k<i>", value "{\"i\":<i>}", timestamp 1000 + i. */
static void append(const sl_store *st, const char *lane, int first, int count, int64_t *base)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, lane), 0);
    for (int i = first; i < first + count; i++) {
        char k[32], v[64];
        int kn = snprintf(k, sizeof k, "k%d", i), vn = snprintf(v, sizeof v, "{\"i\":%d}", i);
        assert_int_equal(sl_batch_builder_add(&b, 1000 + i, k, (size_t)kn, v, (size_t)vn), 0);
    }
    sl_batch batch;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
    assert_int_equal(sl_store_append(st, &batch, base, &err), 0);
    sl_batch_builder_free(&b);
}

typedef struct got {
    int64_t offset, ts;
    int i; /* from the value */
    char key[32], lane[SL_LANE_MAX + 1];
} got;

/* Reads n records (waiting for the fetches), then expects SL_EEOF. */
static void read_n(const sl_store *st, void *r, got *out, int n)
{
    sl_error err = {0};
    int have = 0;
    for (int waited = 0; have < n;) {
        sl_record rec;
        int rc = sl_store_reader_next(st, r, &rec, &err);
        if (rc == SL_EEOF) {
            assert_true(waited < WAIT_MS);
            sleep_ms(10);
            waited += 10;
            continue;
        }
        assert_int_equal(rc, 0);
        got *g = &out[have++];
        g->offset = rec.offset;
        g->ts = rec.timestamp;
        assert_non_null(rec.value);
        assert_int_equal(sscanf((const char *)rec.value, "{\"i\":%d}", &g->i), 1);
        assert_true(rec.key_len < sizeof g->key);
        memcpy(g->key, rec.key, rec.key_len);
        g->key[rec.key_len] = '\0';
        assert_true(rec.lane_len <= SL_LANE_MAX);
        memcpy(g->lane, rec.lane, rec.lane_len);
        g->lane[rec.lane_len] = '\0';
    }
    /* Caught up: nothing more (a PARTITION_EOF or an empty queue). */
    sl_record rec;
    for (int k = 0; k < 10; k++) {
        int rc = sl_store_reader_next(st, r, &rec, &err);
        assert_int_equal(rc, SL_EEOF);
        sleep_ms(2);
    }
}

static void check_got(const got *g, int64_t offset, int i, const char *lane)
{
    char key[32];
    snprintf(key, sizeof key, "k%d", i);
    assert_int_equal(g->offset, offset);
    assert_int_equal(g->i, i);
    assert_int_equal(g->ts, 1000 + i);
    assert_string_equal(g->key, key);
    assert_string_equal(g->lane, lane);
}

static sl_kstore_options options(const char *topic, int32_t parts, bool durable, owner *o)
{
    return (sl_kstore_options){
        .set = "orders",
        .topic = topic,
        .partitions = parts,
        .replication = -1,
        .durable = durable,
        .compression = SL_CODEC_NONE,
        .linger_ms = 5,
        .on_durable = on_durable,
        .on_data = on_data,
        .ctx = o,
    };
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_time_offset(void **state)
{
    (void)state;
    assert_int_equal(sl_kstore_time_offset(-1, 10), 10); /* none: the end */
    assert_int_equal(sl_kstore_time_offset(-1, 0), 0);
    assert_int_equal(sl_kstore_time_offset(5, 10), 5);
    assert_int_equal(sl_kstore_time_offset(0, 10), 0);
    assert_int_equal(sl_kstore_time_offset(12, 10), 12); /* the cluster knows better */
}

static void test_roundtrip(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.orders", 2, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.orders", 2, true, &o);
    sl_kstore_topic *t = NULL;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
    assert_int_equal(sl_kstore_topic_partitions(t), 2);
    assert_string_equal(sl_kstore_topic_name(t), "sluice.orders");
    sl_store st[2];
    for (int p = 0; p < 2; p++)
        assert_int_equal(sl_kstore_partition(t, p, &st[p], &err), 0);
    assert_int_equal(sl_kstore_partition(t, 0, &(sl_store){0}, &err), SL_EEXIST);
    assert_int_equal(sl_kstore_partition(t, 2, &(sl_store){0}, &err), SL_EINVAL);
    assert_true(sl_store_remote(&st[0]));
    assert_string_equal(st[0].ops->name, "kafka");
    assert_int_equal(st[0].ops->abi_version, SL_STORE_ABI_VERSION);
    assert_int_equal(sl_store_end_offset(&st[0]), 0);
    assert_int_equal(sl_store_next_seq(&st[0]), 0);

    int64_t base;
    append(&st[0], "", 0, 5, &base);
    assert_int_equal(base, 0);
    append(&st[0], "blue", 5, 3, &base);
    assert_int_equal(base, 5);
    append(&st[1], "", 100, 4, &base);
    assert_int_equal(base, 0);
    assert_int_equal(sl_store_next_seq(&st[0]), 8);
    assert_true(wait_durable(&o, 0, 8));
    assert_true(wait_durable(&o, 1, 4));
    assert_int_equal(sl_store_outcome(&st[0], 0, 8, &err), 0);
    assert_int_equal(sl_store_outcome(&st[1], 0, 4, &err), 0);
    assert_int_equal(sl_store_outcome(&st[0], 0, 9, &err), SL_ERANGE);
    for (int64_t s = 0; s < 8; s++) {
        int64_t off = -1;
        assert_int_equal(sl_store_offset_of(&st[0], s, &off, &err), 0);
        assert_int_equal(off, s); /* a fresh partition: Kafka's offsets from 0 */
    }
    int64_t off;
    assert_int_equal(sl_store_offset_of(&st[0], 8, &off, &err), SL_ERANGE);
    sl_store_release(&st[0], 5);
    assert_int_equal(sl_store_offset_of(&st[0], 4, &off, &err), SL_ERANGE);
    assert_int_equal(sl_store_offset_of(&st[0], 5, &off, &err), 0);
    assert_int_equal(off, 5);
    assert_int_equal(sl_store_outcome(&st[0], 0, 8, &err), SL_ERANGE); /* released */
    assert_int_equal(sl_store_end_offset(&st[0]), 8);
    assert_int_equal(sl_store_end_offset(&st[1]), 4);
    assert_int_equal(sl_store_sync(&st[0], &err), 0);
    assert_int_equal(sl_store_retain(&st[0], 0, &err), 0);
    uint64_t bytes = 1, segs = 1;
    sl_store_stat(&st[0], &bytes, &segs);
    assert_int_equal(bytes, 0);
    assert_int_equal(segs, 0);

    /* Every lane. */
    void *r;
    got g[16];
    assert_int_equal(sl_store_reader_open(&st[0], 0, NULL, &r, &err), 0);
    assert_int_equal(sl_store_reader_position(&st[0], r), 0);
    read_n(&st[0], r, g, 8);
    for (int i = 0; i < 8; i++)
        check_got(&g[i], i, i, i < 5 ? "" : "blue");
    assert_int_equal(sl_store_reader_position(&st[0], r), 8);

    /* Caught up: a new append wakes the reader through on_data. */
    int seen = data_count(&o, 0);
    append(&st[0], "", 8, 2, &base);
    assert_int_equal(base, 8);
    assert_true(wait_data(&o, 0, seen));
    read_n(&st[0], r, g, 2);
    check_got(&g[0], 8, 8, "");
    check_got(&g[1], 9, 9, "");
    sl_store_reader_close(&st[0], r);

    /* The base lane only, and one lane; positions past what was skipped. */
    assert_int_equal(sl_store_reader_open(&st[0], 0, "", &r, &err), 0);
    read_n(&st[0], r, g, 7);
    for (int i = 0; i < 7; i++)
        check_got(&g[i], i < 5 ? i : i + 3, i < 5 ? i : i + 3, "");
    assert_int_equal(sl_store_reader_position(&st[0], r), 10);
    sl_store_reader_close(&st[0], r);
    assert_int_equal(sl_store_reader_open(&st[0], 2, "blue", &r, &err), 0);
    read_n(&st[0], r, g, 3);
    for (int i = 0; i < 3; i++)
        check_got(&g[i], 5 + i, 5 + i, "blue");
    assert_int_equal(sl_store_reader_position(&st[0], r), 10);
    sl_store_reader_close(&st[0], r);

    /* Two readers of one partition at once (the second has a handle of its
     * own), and one of the other partition. */
    void *r1, *r2, *r3;
    assert_int_equal(sl_store_reader_open(&st[0], 0, NULL, &r1, &err), 0);
    assert_int_equal(sl_store_reader_open(&st[0], 6, NULL, &r2, &err), 0);
    assert_int_equal(sl_store_reader_open(&st[1], 0, NULL, &r3, &err), 0);
    got g2[16];
    read_n(&st[0], r2, g2, 4);
    read_n(&st[0], r1, g, 10);
    for (int i = 0; i < 10; i++)
        check_got(&g[i], i, i, i >= 5 && i < 8 ? "blue" : "");
    for (int i = 0; i < 4; i++)
        check_got(&g2[i], 6 + i, 6 + i, i < 2 ? "blue" : "");
    read_n(&st[1], r3, g, 4);
    for (int i = 0; i < 4; i++)
        check_got(&g[i], i, 100 + i, "");
    sl_store_reader_close(&st[0], r1);
    sl_store_reader_close(&st[0], r2);
    sl_store_reader_close(&st[1], r3);

    /* The mock answers no time look-up: the end offset. */
    assert_int_equal(sl_store_offset_for_time(&st[0], 1003, &off, &err), 0);
    assert_int_equal(off, 10);

    sl_kstore_stats s;
    sl_kstore_stats_get(t, &s);
    assert_int_equal(s.produced, 14);
    assert_int_equal(s.delivered, 14);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.inflight_bytes, 0);
    assert_true(s.fetched_records >= 10 + 7 + 3 + 14 + 4);
    assert_true(s.fetched_bytes > s.fetched_records * 8);

    sl_kstore_release(t);
    sl_store_close(&st[0]);
    sl_store_close(&st[1]);
    owner_free(&o);
    mock_stop(&m);
}

/* A second router on the same topic: its records show in the first one's
 * end offset through the watermark refresh. */
static void test_watermarks(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.wm", 2, 3), 0);
    owner o1, o2;
    owner_init(&o1);
    owner_init(&o2);
    sl_kstore_options opt1 = options("sluice.wm", 2, true, &o1);
    sl_kstore_options opt2 = options("sluice.wm", 2, true, &o2);
    opt2.compression = SL_CODEC_ZSTD;
    sl_kstore_topic *t1, *t2;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt1, &t1, &err), 0);
    assert_int_equal(sl_kstore_open(&m.cl, &opt2, &t2, &err), 0);
    sl_store a, b;
    assert_int_equal(sl_kstore_partition(t1, 1, &a, &err), 0);
    assert_int_equal(sl_kstore_partition(t2, 1, &b, &err), 0);
    int64_t base;
    append(&b, "", 0, 6, &base);
    assert_true(wait_durable(&o2, 1, 6));
    int waited = 0;
    while (sl_store_end_offset(&a) < 6 && waited < WAIT_MS) {
        sleep_ms(20);
        waited += 20;
    }
    assert_int_equal(sl_store_end_offset(&a), 6);
    assert_int_equal(sl_store_start_offset(&a), 0);
    /* And a store opened now starts from the topic's watermarks. */
    sl_kstore_topic *t3;
    assert_int_equal(sl_kstore_open(&m.cl, &opt1, &t3, &err), 0);
    sl_store c;
    assert_int_equal(sl_kstore_partition(t3, 1, &c, &err), 0);
    assert_int_equal(sl_store_end_offset(&c), 6);
    /* Its sequence numbers are its own; the offsets are the topic's. */
    append(&c, "", 6, 1, &base);
    assert_int_equal(base, 0);
    assert_true(wait_durable(&o1, 1, 1));
    int64_t off;
    assert_int_equal(sl_store_offset_of(&c, 0, &off, &err), 0);
    assert_int_equal(off, 6);
    /* What both wrote, zstd-compressed by the second, read by the first. */
    void *r;
    got g[8];
    assert_int_equal(sl_store_reader_open(&a, 0, "", &r, &err), 0);
    read_n(&a, r, g, 7);
    for (int i = 0; i < 7; i++)
        check_got(&g[i], i, i, "");
    /* With a reader fetching, the end comes from the fetch answers. */
    append(&b, "", 7, 3, &base);
    assert_true(wait_durable(&o2, 1, 9));
    for (waited = 0; sl_store_end_offset(&a) < 10 && waited < WAIT_MS; waited += 20)
        sleep_ms(20);
    assert_int_equal(sl_store_end_offset(&a), 10);
    read_n(&a, r, g, 3);
    for (int i = 0; i < 3; i++)
        check_got(&g[i], 7 + i, 7 + i, "");
    sl_store_reader_close(&a, r);
    void *impl = c.impl;
    sl_store_close(&c);
    /* t3 still holds the partition (its open reference): appends say closed. */
    assert_int_equal(sl_store_kafka_ops.append(impl, &(sl_batch){0}, &base, &err), SL_ECLOSED);
    sl_kstore_release(t3);
    sl_store_close(&a);
    sl_store_close(&b);
    sl_kstore_release(t1);
    sl_kstore_release(t2);
    owner_free(&o1);
    owner_free(&o2);
    mock_stop(&m);
}

static void test_too_few_partitions(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.small", 1, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.small", 2, true, &o);
    sl_kstore_topic *t = (sl_kstore_topic *)1;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), SL_EINVAL);
    assert_null(t);
    assert_string_equal(err.msg, "set orders: topic sluice.small has 1 partitions, the set "
                                 "declares 2");
    /* Fewer declared is fine; settings past librdkafka's bounds are clamped. */
    opt.partitions = 1;
    opt.linger_ms = UINT32_MAX;
    opt.batch_bytes = UINT32_MAX;
    opt.compression = SL_CODEC_ZSTD;
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.big", 3, 3), 0);
    opt.topic = "sluice.big";
    int rc = sl_kstore_open(&m.cl, &opt, &t, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(sl_kstore_topic_partitions(t), 3);
    sl_kstore_release(t);
    owner_free(&o);
    mock_stop(&m);
}

/* A buffer set: appends past max_inflight_bytes are refused while the
 * brokers are down, and taken again once they are back. */
static void test_full_while_down(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.full", 1, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.full", 1, false, &o);
    opt.max_inflight_bytes = 100;
    sl_kstore_topic *t;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
    sl_store st;
    assert_int_equal(sl_kstore_partition(t, 0, &st, &err), 0);
    int64_t base;
    append(&st, "", 0, 1, &base);
    assert_true(wait_durable(&o, 0, 1));
    brokers(&m, false);
    /* Nothing in flight: a batch passes even when larger than the limit. */
    append(&st, "", 1, 20, &base);
    assert_int_equal(base, 1);
    sl_kstore_stats s;
    sl_kstore_stats_get(t, &s);
    assert_true(s.inflight_bytes > 100);
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
    assert_int_equal(sl_batch_builder_add(&b, 2000, "k", 1, "{\"i\":11}", 8), 0);
    sl_batch batch;
    assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sl_store_append(&st, &batch, &base, &err), SL_EFULL);
        assert_non_null(strstr(err.msg, "max_inflight_bytes 100"));
        sleep_ms(100);
    }
    assert_int_equal(sl_store_next_seq(&st), 21); /* nothing numbered */
    sl_kstore_stats_get(t, &s);
    assert_int_equal(s.produced, 21);
    brokers(&m, true);
    assert_true(wait_durable(&o, 0, 21));
    assert_int_equal(sl_store_outcome(&st, 0, 21, &err), 0);
    assert_int_equal(sl_store_append(&st, &batch, &base, &err), 0);
    assert_int_equal(base, 21);
    assert_true(wait_durable(&o, 0, 22));
    int64_t off;
    assert_int_equal(sl_store_offset_of(&st, 21, &off, &err), 0);
    assert_int_equal(off, 21);
    sl_batch_builder_free(&b);
    sl_store_close(&st);
    sl_kstore_release(t);
    owner_free(&o);
    mock_stop(&m);
}

/* A durable set: records not acknowledged within delivery_timeout_ms fail,
 * and say so through outcome() and offset_of(); the next ones succeed. */
static void test_durable_failure(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    m.cl.delivery_timeout_ms = 1000;
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.dur", 1, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.dur", 1, true, &o);
    sl_kstore_topic *t;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
    sl_store st;
    assert_int_equal(sl_kstore_partition(t, 0, &st, &err), 0);
    int64_t base;
    append(&st, "", 0, 2, &base);
    assert_true(wait_durable(&o, 0, 2));
    brokers(&m, false);
    append(&st, "blue", 2, 3, &base);
    assert_int_equal(base, 2);
    assert_true(wait_durable(&o, 0, 5));
    assert_int_equal(sl_store_outcome(&st, 0, 2, &err), 0);
    err = (sl_error){0};
    assert_int_equal(sl_store_outcome(&st, 0, 5, &err), SL_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "topic sluice.dur partition 0"));
    int64_t off;
    assert_int_equal(sl_store_offset_of(&st, 3, &off, &err), SL_ETIMEDOUT);
    assert_int_equal(sl_store_offset_of(&st, 1, &off, &err), 0);
    assert_int_equal(off, 1);
    sl_kstore_stats s;
    sl_kstore_stats_get(t, &s);
    assert_int_equal(s.failed, 3);
    assert_int_equal(s.inflight_bytes, 0);
    sl_store_release(&st, 5);
    brokers(&m, true);
    append(&st, "", 5, 2, &base);
    assert_int_equal(base, 5);
    assert_true(wait_durable(&o, 0, 7));
    assert_int_equal(sl_store_outcome(&st, 5, 7, &err), 0);
    assert_int_equal(sl_store_offset_of(&st, 5, &off, &err), 0);
    assert_int_equal(off, 2); /* the failed ones took no offset */
    sl_store_close(&st);
    sl_kstore_release(t);
    owner_free(&o);
    mock_stop(&m);
}

/* A buffer set: a record the cluster refuses is not a failure; it is
 * produced again a second later and lands in the partition. */
static void test_buffer_retry(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.buf", 1, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.buf", 1, false, &o);
    sl_kstore_topic *t;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
    sl_store st;
    assert_int_equal(sl_kstore_partition(t, 0, &st, &err), 0);
    int64_t base;
    append(&st, "", 0, 1, &base);
    assert_true(wait_durable(&o, 0, 1));
    rd_kafka_mock_push_request_errors(m.mc, 0 /* Produce */, 1,
                                      RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
    append(&st, "blue", 1, 1, &base);
    assert_true(wait_durable(&o, 0, 2));
    assert_int_equal(sl_store_outcome(&st, 0, 2, &err), 0);
    int64_t off;
    assert_int_equal(sl_store_offset_of(&st, 1, &off, &err), SL_ERANGE); /* not known */
    void *r;
    got g[4];
    assert_int_equal(sl_store_reader_open(&st, 0, NULL, &r, &err), 0);
    read_n(&st, r, g, 2);
    check_got(&g[0], 0, 0, "");
    check_got(&g[1], 1, 1, "blue");
    sl_store_reader_close(&st, r);
    sl_kstore_stats s;
    sl_kstore_stats_get(t, &s);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.retried, 1);
    assert_int_equal(s.delivered, 2);
    sl_store_close(&st);
    sl_kstore_release(t);
    owner_free(&o);
    mock_stop(&m);
}

/* A buffer set's retry list holds at most max_inflight_bytes: records past
 * it are counted lost; the rest are stored once the cluster takes them. */
static void test_buffer_lost(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.lost", 1, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.lost", 1, false, &o);
    opt.max_inflight_bytes = 30; /* three records of 10 bytes: "k1" + "{\"i\":1}" */
    sl_kstore_topic *t;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
    sl_store st;
    assert_int_equal(sl_kstore_partition(t, 0, &st, &err), 0);
    rd_kafka_mock_push_request_errors(m.mc, 0 /* Produce */, 2,
                                      RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
                                      RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
    int64_t base;
    append(&st, "", 1, 5, &base);
    assert_true(wait_durable(&o, 0, 5));
    assert_int_equal(sl_store_outcome(&st, 0, 5, &err), 0); /* answered: not failures */
    void *r;
    got g[4];
    assert_int_equal(sl_store_reader_open(&st, 0, NULL, &r, &err), 0);
    read_n(&st, r, g, 3);
    for (int i = 0; i < 3; i++)
        check_got(&g[i], i, 1 + i, "");
    sl_store_reader_close(&st, r);
    assert_int_equal(atomic_load(&t->lost), 2);
    sl_kstore_stats s;
    sl_kstore_stats_get(t, &s);
    assert_int_equal(s.delivered, 3);
    assert_true(s.retried >= 3);
    sl_store_close(&st);
    sl_kstore_release(t);
    owner_free(&o);
    mock_stop(&m);
}

/* Closing with records the cluster never acknowledged: bounded by the
 * delivery timeout, what is left is dropped and counted, nothing leaks. */
static void test_close_pending(void **state)
{
    (void)state;
    for (int durable = 0; durable < 2; durable++) {
        mock m;
        mock_start(&m);
        m.cl.delivery_timeout_ms = 500;
        assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.close", 1, 3), 0);
        owner o;
        owner_init(&o);
        sl_kstore_options opt = options("sluice.close", 1, durable, &o);
        sl_kstore_topic *t;
        sl_error err = {0};
        assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
        sl_store st;
        assert_int_equal(sl_kstore_partition(t, 0, &st, &err), 0);
        int64_t base;
        append(&st, "", 0, 1, &base);
        assert_true(wait_durable(&o, 0, 1));
        void *r1, *r2; /* the shared reader client and one of its own */
        assert_int_equal(sl_store_reader_open(&st, 0, NULL, &r1, &err), 0);
        assert_int_equal(sl_store_reader_open(&st, 0, NULL, &r2, &err), 0);
        got g[1];
        read_n(&st, r1, g, 1);
        brokers(&m, false);
        append(&st, "blue", 1, 4, &base);
        sl_record rec;
        int rc = sl_store_reader_next(&st, r2, &rec, &err);
        assert_true(rc == 0 || rc == SL_EEOF);
        sl_store_reader_close(&st, r2);
        sl_store_reader_close(&st, r1);
        sl_kstore_release(t);
        sl_store_close(&st); /* the last reference: flush, give up, free */
        owner_free(&o);
        mock_stop(&m);
    }
}

/* A record librdkafka refuses (larger than message.max.bytes) fails alone:
 * the records around it in its batch are stored (durable set), or it is
 * counted lost after one more try (buffer set). */
static void test_record_too_large(void **state)
{
    (void)state;
    static char small[] = "message.max.bytes=2000";
    char *props[] = {p1, p2, p3, small};
    for (int durable = 1; durable >= 0; durable--) {
        mock m;
        mock_start(&m);
        m.cl.props = props;
        m.cl.nprops = 4;
        assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.large", 1, 3), 0);
        owner o;
        owner_init(&o);
        sl_kstore_options opt = options("sluice.large", 1, durable, &o);
        sl_kstore_topic *t;
        sl_error err = {0};
        assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
        sl_store st;
        assert_int_equal(sl_kstore_partition(t, 0, &st, &err), 0);
        sl_batch_builder b;
        sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
        assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
        static char big[5000];
        memset(big, 'x', sizeof big);
        assert_int_equal(sl_batch_builder_add(&b, 1000, "k0", 2, "{\"i\":0}", 7), 0);
        assert_int_equal(sl_batch_builder_add(&b, 1001, "k1", 2, big, sizeof big), 0);
        assert_int_equal(sl_batch_builder_add(&b, 1002, "k2", 2, "{\"i\":2}", 7), 0);
        sl_batch batch;
        assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
        int64_t base, off;
        assert_int_equal(sl_store_append(&st, &batch, &base, &err), 0);
        assert_true(wait_durable(&o, 0, 3));
        if (durable) {
            assert_int_equal(sl_store_outcome(&st, 0, 3, &err), SL_ETOOBIG);
            assert_int_equal(sl_store_offset_of(&st, 1, &off, &err), SL_ETOOBIG);
            assert_int_equal(sl_store_offset_of(&st, 2, &off, &err), 0);
            assert_int_equal(off, 1);
        } else {
            assert_int_equal(sl_store_outcome(&st, 0, 3, &err), 0);
            for (int waited = 0; atomic_load(&t->lost) == 0 && waited < WAIT_MS; waited += 20)
                sleep_ms(20);
            assert_int_equal(atomic_load(&t->lost), 1);
        }
        assert_int_equal(sl_store_offset_of(&st, 0, &off, &err), 0);
        assert_int_equal(off, 0);
        sl_batch_builder_free(&b);
        sl_store_close(&st);
        sl_kstore_release(t);
        owner_free(&o);
        mock_stop(&m);
    }
}

/* Thousands of records: the ring of outcomes grows (nothing released),
 * then wraps around (released as they become durable); every seq keeps its
 * offset, and a reader gets them all back in order. */
static void test_many(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.many", 2, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.many", 2, true, &o);
    opt.compression = SL_CODEC_ZSTD;
    sl_kstore_topic *t;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
    sl_store st[2];
    for (int p = 0; p < 2; p++)
        assert_int_equal(sl_kstore_partition(t, p, &st[p], &err), 0);
    int64_t base;
    for (int i = 0; i < 3000; i += 100) {
        append(&st[0], i % 200 ? "red" : "", i, 100, &base);
        assert_int_equal(base, i);
        append(&st[1], "", i, 100, &base);
    }
    assert_true(wait_durable(&o, 0, 3000));
    assert_true(wait_durable(&o, 1, 3000));
    assert_int_equal(sl_store_outcome(&st[0], 0, 3000, &err), 0);
    for (int64_t s = 0; s < 3000; s++) {
        int64_t off;
        assert_int_equal(sl_store_offset_of(&st[0], s, &off, &err), 0);
        assert_int_equal(off, s);
    }
    sl_store_release(&st[0], 3000);
    sl_store_release(&st[1], 3000);
    for (int round = 0; round < 5; round++) {
        int first = 3000 + round * 1000;
        for (int i = first; i < first + 1000; i += 250)
            append(&st[0], "", i, 250, &base);
        assert_true(wait_durable(&o, 0, first + 1000));
        int64_t off;
        assert_int_equal(sl_store_offset_of(&st[0], first + 999, &off, &err), 0);
        assert_int_equal(off, first + 999);
        assert_int_equal(sl_store_outcome(&st[0], first, first + 1000, &err), 0);
        sl_store_release(&st[0], first + 1000);
    }
    void *r;
    got *g = malloc(8000 * sizeof *g);
    assert_non_null(g);
    assert_int_equal(sl_store_reader_open(&st[0], 0, NULL, &r, &err), 0);
    read_n(&st[0], r, g, 8000);
    for (int i = 0; i < 8000; i++)
        check_got(&g[i], i, i, i < 3000 && (i / 100) % 2 ? "red" : "");
    sl_store_reader_close(&st[0], r);
    free(g);
    sl_kstore_stats s;
    sl_kstore_stats_get(t, &s);
    assert_int_equal(s.produced, 11000);
    assert_int_equal(s.delivered, 11000);
    sl_store_close(&st[0]);
    sl_store_close(&st[1]);
    sl_kstore_release(t);
    owner_free(&o);
    mock_stop(&m);
}

/* A fatal producer error (librdkafka's test hook): a new producer takes
 * over, and records go on being stored. */
static void test_fatal(void **state)
{
    (void)state;
    mock m;
    mock_start(&m);
    assert_int_equal(rd_kafka_mock_topic_create(m.mc, "sluice.fatal", 1, 3), 0);
    owner o;
    owner_init(&o);
    sl_kstore_options opt = options("sluice.fatal", 1, true, &o);
    sl_kstore_topic *t;
    sl_error err = {0};
    assert_int_equal(sl_kstore_open(&m.cl, &opt, &t, &err), 0);
    sl_store st;
    assert_int_equal(sl_kstore_partition(t, 0, &st, &err), 0);
    int64_t base;
    append(&st, "", 0, 2, &base);
    assert_true(wait_durable(&o, 0, 2));
    pthread_rwlock_rdlock(&t->pl);
    rd_kafka_t *old = t->prod;
    assert_int_equal(
        rd_kafka_test_fatal_error(old, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, "a test"),
        0);
    pthread_rwlock_unlock(&t->pl);
    bool replaced = false;
    for (int waited = 0; !replaced && waited < WAIT_MS; waited += 20) {
        sleep_ms(20);
        pthread_rwlock_rdlock(&t->pl);
        replaced = t->prod != old;
        pthread_rwlock_unlock(&t->pl);
    }
    assert_true(replaced);
    append(&st, "", 2, 3, &base);
    assert_int_equal(base, 2);
    assert_true(wait_durable(&o, 0, 5));
    assert_int_equal(sl_store_outcome(&st, 0, 5, &err), 0);
    int64_t off;
    assert_int_equal(sl_store_offset_of(&st, 4, &off, &err), 0);
    assert_int_equal(off, 4);
    sl_store_close(&st);
    sl_kstore_release(t);
    owner_free(&o);
    mock_stop(&m);
}

int main(void)
{
    sl_slog_configure(SL_SLOG_LOGFMT, SL_SLOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_time_offset),      cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_watermarks),       cmocka_unit_test(test_too_few_partitions),
        cmocka_unit_test(test_full_while_down),  cmocka_unit_test(test_durable_failure),
        cmocka_unit_test(test_buffer_retry),     cmocka_unit_test(test_buffer_lost),
        cmocka_unit_test(test_record_too_large), cmocka_unit_test(test_many),
        cmocka_unit_test(test_close_pending),    cmocka_unit_test(test_fatal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
