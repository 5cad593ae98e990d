/*
 * tests/unit/test_kgroup.c — a Kafka-backed set's consumer group and the
 * cursor table (core/bus/kgroup.h) on librdkafka's in-process mock cluster:
 * one member gets every partition; a second one joining splits them, the
 * first committing what its revocation returned, no partition owned by
 * both at any moment the callbacks see; a member leaving gives its
 * partitions back with the offsets it committed; the periodic commit covers
 * owned partitions only and only when they moved; the cursor table's puts,
 * catch-up of a second instance, other writers' records, malformed values,
 * and the key format.
 *
 * The mock has no CreateTopics: topics are made with
 * rd_kafka_mock_topic_create(). It does not check that a commit comes from
 * the partition's owner, nor compact: both are sluice's or Kafka's.
 */
#include "testutil.h"

#include "core/base/clock.h"
#include "core/base/slog.h"
#include "core/bus/kgroup.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NP 6
#define WAIT_MS 30000

static rd_kafka_t *g_mrk;
static rd_kafka_mock_cluster_t *g_mc;
static rd_kafka_t *g_raw; /* raw_put()'s producer */
static sl_kafka_cluster g_cl;

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk, (void)level, (void)fac, (void)buf;
}

/* ---- members: what their callbacks saw ------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_owner[NP]; /* the member that was told last it owns p; -1: none */
static int g_conflicts; /* an assignment of a partition another member owned */

typedef struct member {
    int id;
    sl_kgroup *g;
    int64_t revoke_base; /* on_revoke commits revoke_base + p (-1: nothing) */
    int64_t commit_base; /* committable answers commit_base + p (-1: nothing) */
    bool has[NP];
    int64_t got[NP]; /* committed[] of the last on_assign of p */
    int assigns, revokes, lost;
    int asked_unowned;               /* committable asked about a partition not owned */
    const sl_kafka_cluster *cluster; /* NULL: g_cl */
} member;

static member g_m[2]; /* the members of a test, stopped by its teardown */

static void m_assign(void *ctx, const int32_t *parts, const int64_t *committed, size_t n)
{
    member *m = ctx;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i];
        if (g_owner[p] != -1 && g_owner[p] != m->id)
            g_conflicts++;
        g_owner[p] = m->id;
        m->has[p] = true;
        m->got[p] = committed[i];
    }
    m->assigns++;
    pthread_mutex_unlock(&g_mu);
}

static void m_revoke(void *ctx, const int32_t *parts, size_t n, bool lost, int64_t *commit)
{
    member *m = ctx;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i];
        if (g_owner[p] == m->id)
            g_owner[p] = -1;
        m->has[p] = false;
        commit[i] = m->revoke_base >= 0 ? m->revoke_base + p : -1;
    }
    m->revokes++;
    m->lost += lost;
    pthread_mutex_unlock(&g_mu);
}

static void m_committable(void *ctx, const int32_t *parts, size_t n, int64_t *commit)
{
    member *m = ctx;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < n; i++) {
        if (!sl_kgroup_owns(m->g, parts[i]) || !m->has[parts[i]])
            m->asked_unowned++;
        commit[i] = m->commit_base >= 0 ? m->commit_base + parts[i] : -1;
    }
    pthread_mutex_unlock(&g_mu);
}

static void m_start(member *m, int id, const char *group, const char *topic, int interval_ms)
{
    m->id = id;
    for (int p = 0; p < NP; p++)
        m->got[p] = -2;
    sl_kgroup_options o = {.cluster = m->cluster ? m->cluster : &g_cl,
                           .set = topic,
                           .group = group,
                           .topic = topic,
                           .partitions = NP,
                           .commit_interval_ms = interval_ms,
                           .on_assign = m_assign,
                           .on_revoke = m_revoke,
                           .committable = m_committable,
                           .ctx = m};
    sl_error err = {0};
    if (sl_kgroup_start(&o, &m->g, &err))
        fail_msg("sl_kgroup_start: %s", err.msg);
}

static int owned_by(const member *m)
{
    pthread_mutex_lock(&g_mu);
    int n = 0;
    for (int p = 0; p < NP; p++)
        n += m->has[p];
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Waits (at most WAIT_MS) until a owns na and b (may be NULL) nb
 * partitions, as their callbacks were told and as sl_kgroup_owns says. */
static void wait_split(member *a, int na, member *b, int nb)
{
    int64_t end = sl_clock_mono_ms() + WAIT_MS;
    for (;;) {
        int oa = owned_by(a), ob = b ? owned_by(b) : 0;
        sl_kgroup_info ia, ib = {0};
        sl_kgroup_info_get(a->g, &ia);
        if (b)
            sl_kgroup_info_get(b->g, &ib);
        if (oa == na && ob == nb && ia.owned == na && (!b || ib.owned == nb))
            return;
        if (sl_clock_mono_ms() > end)
            fail_msg("waited for %d/%d partitions, have %d/%d", na, nb, oa, ob);
        usleep(50 * 1000);
    }
}

/* Waits until m's periodic commits of the partitions it owns are known
 * committed at base + p. */
static void wait_committed(member *m, int64_t base)
{
    int64_t end = sl_clock_mono_ms() + WAIT_MS;
    for (bool done = false; !done;) {
        if (sl_clock_mono_ms() > end)
            fail_msg("waited for the commits of member %d", m->id);
        usleep(100 * 1000);
        done = true;
        pthread_mutex_lock(&g_mu);
        for (int p = 0; p < NP; p++)
            if (m->has[p])
                done = done && sl_kgroup_committed(m->g, p) == base + p;
        pthread_mutex_unlock(&g_mu);
    }
}

static void m_stop(member *m)
{
    sl_kgroup_stop(m->g);
    m->g = NULL;
}

static void reset_owners(void)
{
    pthread_mutex_lock(&g_mu);
    for (int p = 0; p < NP; p++)
        g_owner[p] = -1;
    g_conflicts = 0;
    pthread_mutex_unlock(&g_mu);
}

/* The group's committed offsets of topic as a third client reads them. */
static void committed_of(const char *group, const char *topic, int64_t out[NP])
{
    char es[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(conf, "bootstrap.servers", g_cl.brokers, es, sizeof es), 0);
    assert_int_equal(rd_kafka_conf_set(conf, "group.id", group, es, sizeof es), 0);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(NP);
    for (int p = 0; p < NP; p++)
        rd_kafka_topic_partition_list_add(l, topic, p);
    assert_int_equal(rd_kafka_committed(rk, l, 10000), 0);
    for (int p = 0; p < NP; p++)
        out[p] = l->elems[p].offset >= 0 ? l->elems[p].offset : -1;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

/* ---- the tests ------------------------------------------------------------ */

/* A record written by something else than sl_kcursors (its value as is),
 * acknowledged before this returns. */
static void raw_put(const char *topic, const char *key, const char *value)
{
    char es[512];
    if (!g_raw) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        assert_int_equal(rd_kafka_conf_set(conf, "bootstrap.servers", g_cl.brokers, es, sizeof es),
                         0);
        rd_kafka_conf_set_log_cb(conf, quiet_log);
        assert_non_null(g_raw = rd_kafka_new(RD_KAFKA_PRODUCER, conf, es, sizeof es));
    }
    assert_int_equal(
        rd_kafka_producev(g_raw, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(key, strlen(key)),
                          RD_KAFKA_V_VALUE((void *)value, strlen(value)), RD_KAFKA_V_END),
        0);
    assert_int_equal(rd_kafka_flush(g_raw, 10000), 0);
}

/* (a) One member gets all partitions, nothing committed yet, and no
 * record (they are paused); (f) a lost assignment (the coordinator forgot
 * the member, as when its session timed out) commits nothing: the
 * partitions come back with the offsets committed before; leaving commits
 * what the revocation returned. */
static void test_one_member(void **state)
{
    (void)state;
    reset_owners();
    assert_int_equal(rd_kafka_mock_topic_create(g_mc, "kg.a", NP, 1), 0);
    for (int i = 0; i < 30; i++) { /* records in every partition, read from the start */
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        raw_put("kg.a", k, "{}");
    }
    member *m = &g_m[0];
    m->revoke_base = 500;
    m->commit_base = -1;
    char prop[] = "auto.offset.reset=earliest";
    char *props[] = {prop};
    sl_kafka_cluster cl = g_cl;
    cl.props = props;
    cl.nprops = 1;
    m->cluster = &cl;
    m_start(m, 1, "sluice.set.a", "kg.a", 200);
    wait_split(m, NP, NULL, 0);
    usleep(500 * 1000); /* time to fetch, were the partitions not paused */
    for (int p = 0; p < NP; p++) {
        assert_true(sl_kgroup_owns(m->g, p));
        assert_int_equal(m->got[p], -1);
        assert_int_equal(sl_kgroup_committed(m->g, p), -1);
    }
    assert_false(sl_kgroup_owns(m->g, NP));
    assert_false(sl_kgroup_owns(m->g, -1));
    sl_kgroup_info info;
    sl_kgroup_info_get(m->g, &info);
    assert_string_equal(info.group, "sluice.set.a");
    assert_true(info.generation >= 1);
    assert_int_equal(info.owned, NP);
    assert_int_equal(info.rebalances, 1);
    assert_int_equal(info.stray_records, 0);
    assert_int_equal(info.commits, 0);

    /* (f) */
    pthread_mutex_lock(&g_mu);
    m->commit_base = 10;
    pthread_mutex_unlock(&g_mu);
    wait_committed(m, 10);
    pthread_mutex_lock(&g_mu);
    m->commit_base = -1;
    pthread_mutex_unlock(&g_mu);
    /* The next heartbeat is answered UNKNOWN_MEMBER_ID (ApiKey 12). */
    rd_kafka_mock_push_request_errors(g_mc, 12, 1, RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID);
    int64_t end = sl_clock_mono_ms() + WAIT_MS;
    for (;;) {
        pthread_mutex_lock(&g_mu);
        bool back = m->lost >= 1 && m->assigns >= 2;
        pthread_mutex_unlock(&g_mu);
        if (back)
            break;
        assert_true(sl_clock_mono_ms() < end);
        usleep(100 * 1000);
    }
    wait_split(m, NP, NULL, 0);
    int64_t c[NP];
    for (int p = 0; p < NP; p++)
        assert_int_equal(m->got[p], 10 + p); /* not 500 + p */
    committed_of("sluice.set.a", "kg.a", c);
    for (int p = 0; p < NP; p++)
        assert_int_equal(c[p], 10 + p);
    sl_kgroup_info_get(m->g, &info);
    assert_int_equal(info.stray_records, 0);
    assert_true(info.rebalances >= 2);

    pthread_mutex_lock(&g_mu);
    m->revoke_base = 40;
    int revokes = m->revokes;
    pthread_mutex_unlock(&g_mu);
    m_stop(m); /* the revocation commits 40 + p */
    assert_int_equal(m->revokes, revokes + 1);
    assert_int_equal(m->lost, 1);
    committed_of("sluice.set.a", "kg.a", c);
    for (int p = 0; p < NP; p++)
        assert_int_equal(c[p], 40 + p);
    assert_int_equal(g_conflicts, 0);
}

/* (b) A second member splits the partitions, starting from the first
 * one's commits; (c) its leaving gives them back with the offsets its
 * revocation committed. (The first member's revocation commits too, but
 * the mock refuses any commit while the group is rebalancing, which Kafka
 * accepts from the current generation: what b starts from is a's periodic
 * commit here.) */
static void test_rebalance(void **state)
{
    (void)state;
    reset_owners();
    assert_int_equal(rd_kafka_mock_topic_create(g_mc, "kg.b", NP, 1), 0);
    member *a = &g_m[0], *b = &g_m[1];
    a->revoke_base = a->commit_base = 100;
    b->revoke_base = b->commit_base = 200;
    m_start(a, 1, "sluice.set.b", "kg.b", 200);
    wait_split(a, NP, NULL, 0);
    wait_committed(a, 100);
    m_start(b, 2, "sluice.set.b", "kg.b", 200);
    wait_split(a, NP / 2, b, NP / 2);
    assert_int_equal(g_conflicts, 0);
    assert_true(a->revokes >= 1);
    assert_int_equal(a->lost, 0);
    for (int p = 0; p < NP; p++) {
        assert_true(sl_kgroup_owns(a->g, p) != sl_kgroup_owns(b->g, p));
        assert_true(sl_kgroup_owns(b->g, p) == b->has[p]);
        if (b->has[p])
            assert_int_equal(b->got[p], 100 + p); /* b starts where a committed */
    }
    wait_committed(b, 200);
    int64_t c[NP];
    committed_of("sluice.set.b", "kg.b", c);
    for (int p = 0; p < NP; p++)
        assert_int_equal(c[p], (b->has[p] ? 200 : 100) + p);

    /* Only b's revocation commits from now on. */
    bool b_had[NP];
    pthread_mutex_lock(&g_mu);
    memcpy(b_had, b->has, sizeof b_had);
    a->commit_base = -1;
    b->commit_base = -1;
    b->revoke_base = 300;
    pthread_mutex_unlock(&g_mu);
    m_stop(b);
    assert_int_equal(b->lost, 0);
    wait_split(a, NP, NULL, 0);
    assert_int_equal(g_conflicts, 0);
    for (int p = 0; p < NP; p++)
        assert_int_equal(a->got[p], (b_had[p] ? 300 : 100) + p);
    committed_of("sluice.set.b", "kg.b", c);
    for (int p = 0; p < NP; p++)
        assert_int_equal(c[p], (b_had[p] ? 300 : 100) + p);
    m_stop(a);
}

/* (d) The periodic commit: owned partitions only, and only what moved. */
static void test_committable(void **state)
{
    (void)state;
    reset_owners();
    assert_int_equal(rd_kafka_mock_topic_create(g_mc, "kg.d", NP, 1), 0);
    member *a = &g_m[0], *b = &g_m[1];
    a->revoke_base = b->revoke_base = -1;
    a->commit_base = 1000;
    b->commit_base = 2000;
    m_start(a, 1, "sluice.set.d", "kg.d", 200);
    wait_split(a, NP, NULL, 0);
    wait_committed(a, 1000);
    int64_t c[NP];
    committed_of("sluice.set.d", "kg.d", c);
    for (int p = 0; p < NP; p++)
        assert_int_equal(c[p], 1000 + p);

    m_start(b, 2, "sluice.set.d", "kg.d", 200);
    wait_split(a, NP / 2, b, NP / 2);
    wait_committed(b, 2000);
    /* Settled: nothing moves, so nothing more is committed. */
    sl_kgroup_info ia0, ib0, ia1, ib1;
    usleep(300 * 1000);
    sl_kgroup_info_get(a->g, &ia0);
    sl_kgroup_info_get(b->g, &ib0);
    usleep(1200 * 1000); /* six commit intervals */
    sl_kgroup_info_get(a->g, &ia1);
    sl_kgroup_info_get(b->g, &ib1);
    assert_int_equal(ia1.commits, ia0.commits);
    assert_int_equal(ib1.commits, ib0.commits);
    assert_true(ia1.commits >= 1 && ib1.commits >= 1);
    committed_of("sluice.set.d", "kg.d", c);
    for (int p = 0; p < NP; p++)
        assert_int_equal(c[p], (b->has[p] ? 2000 : 1000) + p);
    assert_int_equal(a->asked_unowned + b->asked_unowned, 0);
    assert_int_equal(g_conflicts, 0);
    m_stop(a);
    m_stop(b);
}

/* (e) The cursor table. */
static void test_kcursors(void **state)
{
    (void)state;
    const char *topic = "sluice.cursors";
    assert_int_equal(rd_kafka_mock_topic_create(g_mc, topic, 1, 1), 0);
    char key[128];
    sl_kcursors_key(key, sizeof key, "orders", "r1", "", 3);
    assert_string_equal(key, "orders/r1//3");
    sl_kcursors_key(key, sizeof key, "orders", "r1", "boe-a", 0);
    assert_string_equal(key, "orders/r1/boe-a/0");

    sl_error err = {0};
    sl_kcursors *k1 = NULL, *k2 = NULL;
    if (sl_kcursors_open(&g_cl, topic, &k1, &err))
        fail_msg("sl_kcursors_open: %s", err.msg);
    int64_t off = -1;
    assert_int_equal(sl_kcursors_get(k1, "orders/r1//3", 0, &off), SL_ENOENT);
    assert_int_equal(sl_kcursors_get(k1, "orders/r1//3", 5000, &off), SL_ENOENT);
    /* Many puts of one key: the table has the latest at once and keeps it
     * while the older records come back. */
    for (int i = 1; i <= 200; i++)
        assert_int_equal(sl_kcursors_put(k1, "orders/r1//3", i), 0);
    assert_int_equal(sl_kcursors_put(k1, "orders/r1/boe-a/0", 7), 0);
    assert_int_equal(sl_kcursors_get(k1, "orders/r1//3", 0, &off), 0);
    assert_int_equal(off, 200);
    assert_int_equal(sl_kcursors_flush(k1, 10000, &err), 0);
    assert_int_equal(sl_kcursors_get(k1, "orders/r1//3", 5000, &off), 0);
    assert_int_equal(off, 200);
    assert_int_equal(sl_kcursors_put(k1, "x", -1), SL_EINVAL);

    /* A second router catches up before it answers. */
    if (sl_kcursors_open(&g_cl, topic, &k2, &err))
        fail_msg("sl_kcursors_open: %s", err.msg);
    assert_int_equal(sl_kcursors_get(k2, "orders/r1//3", 10000, &off), 0);
    assert_int_equal(off, 200);
    assert_int_equal(sl_kcursors_get(k2, "orders/r1/boe-a/0", 10000, &off), 0);
    assert_int_equal(off, 7);
    assert_int_equal(sl_kcursors_get(k2, "orders/r2//3", 10000, &off), SL_ENOENT);

    /* It takes over and writes: the first one sees it. */
    assert_int_equal(sl_kcursors_put(k2, "orders/r1//3", 250), 0);
    assert_int_equal(sl_kcursors_flush(k2, 10000, &err), 0);
    assert_int_equal(sl_kcursors_get(k1, "orders/r1//3", 10000, &off), 0);
    assert_int_equal(off, 250);

    /* Malformed values are ignored; a tombstone removes the value. */
    raw_put(topic, "orders/bad//0", "12x");
    raw_put(topic, "orders/good//0", "42");
    raw_put(topic, "orders/gone//0", "5");
    raw_put(topic, "orders/gone//0", ""); /* no value: a tombstone */
    assert_int_equal(sl_kcursors_get(k1, "orders/bad//0", 10000, &off), SL_ENOENT);
    assert_int_equal(sl_kcursors_get(k1, "orders/gone//0", 10000, &off), SL_ENOENT);
    assert_int_equal(sl_kcursors_get(k1, "orders/good//0", 10000, &off), 0);
    assert_int_equal(off, 42);

    /* A put the cluster refuses fails the next flush, once. */
    rd_kafka_mock_push_request_errors(g_mc, 0 /* Produce */, 1,
                                      RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
    assert_int_equal(sl_kcursors_put(k1, "orders/r3//0", 1), 0);
    err = (sl_error){0};
    assert_int_equal(sl_kcursors_flush(k1, 10000, &err), SL_EIO);
    assert_non_null(strstr(err.msg, "sluice.cursors"));
    assert_int_equal(sl_kcursors_put(k1, "orders/r3//0", 2), 0);
    assert_int_equal(sl_kcursors_flush(k1, 10000, &err), 0);
    assert_int_equal(sl_kcursors_get(k2, "orders/r3//0", 10000, &off), 0);
    assert_int_equal(off, 2);

    /* A cluster that does not answer: what the table has, said so. */
    for (int b = 1; b <= 3; b++)
        assert_int_equal(rd_kafka_mock_broker_set_down(g_mc, b), 0);
    assert_int_equal(sl_kcursors_get(k1, "orders/r1//3", 300, &off), SL_ETIMEDOUT);
    assert_int_equal(off, 250);
    assert_int_equal(sl_kcursors_get(k1, "orders/r9//3", 300, &off), SL_ENOENT);
    for (int b = 1; b <= 3; b++)
        assert_int_equal(rd_kafka_mock_broker_set_up(g_mc, b), 0);

    sl_kcursors_close(k2);
    sl_kcursors_close(k1);
    sl_kcursors_close(NULL);
    sl_kgroup_stop(NULL);
}

static void test_errors(void **state)
{
    (void)state;
    sl_kgroup *g = NULL;
    sl_error err = {0};
    sl_kgroup_options o = {.cluster = &g_cl, .group = "g", .topic = "t", .partitions = 0};
    assert_int_equal(sl_kgroup_start(&o, &g, &err), SL_EINVAL);
    assert_null(g);
    sl_kafka_cluster bad = g_cl;
    char prop[] = "no.such.property=1";
    char *props[] = {prop};
    bad.props = props;
    bad.nprops = 1;
    o.partitions = 1;
    o.cluster = &bad;
    assert_int_equal(sl_kgroup_start(&o, &g, &err), SL_EINVAL);
    assert_null(g);
    assert_int_equal(sl_kgroup_committed(NULL, 0), -1);
    assert_false(sl_kgroup_owns(NULL, 0));

    /* A cluster that is not there: the start does not wait for it, nor
     * does the stop. */
    sl_kafka_cluster none = {.brokers = "127.0.0.1:1", .session_timeout_ms = 6000};
    member *m = &g_m[0];
    m->cluster = &none;
    m->revoke_base = m->commit_base = -1;
    m_start(m, 1, "sluice.set.none", "kg.none", 0);
    usleep(300 * 1000);
    sl_kgroup_info info;
    sl_kgroup_info_get(m->g, &info);
    assert_int_equal(info.owned, 0);
    assert_int_equal(info.generation, -1);
    assert_int_equal(info.members, -1);
    m_stop(m);
}

static int setup(void **state)
{
    (void)state;
    sl_slog_configure(SL_SLOG_LOGFMT, SL_SLOG_WARN);
    char es[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    g_mrk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, es, sizeof es);
    if (!g_mrk)
        return -1;
    g_mc = rd_kafka_mock_cluster_new(g_mrk, 3);
    if (!g_mc)
        return -1;
    g_cl = (sl_kafka_cluster){.brokers = rd_kafka_mock_cluster_bootstraps(g_mc),
                              .client_id = "kgroup-test",
                              .session_timeout_ms = 6000};
    return 0;
}

static int test_setup(void **state)
{
    (void)state;
    memset(g_m, 0, sizeof g_m);
    return 0;
}

/* Stops what a failed test left running (its callbacks use g_m). */
static int test_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        if (g_m[i].g)
            m_stop(&g_m[i]);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_raw)
        rd_kafka_destroy(g_raw);
    rd_kafka_mock_cluster_destroy(g_mc);
    rd_kafka_destroy(g_mrk);
    return 0;
}

int main(void)
{
    if (getenv("KGROUP_TEST")) /* one test by name, when debugging */
        cmocka_set_test_filter(getenv("KGROUP_TEST"));
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)
        T(test_errors),      T(test_one_member), T(test_rebalance),
        T(test_committable), T(test_kcursors),
#undef T
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
