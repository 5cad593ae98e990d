/*
 * tests/unit/test_runner_kafka.c — the rule runner over a set whose rules run
 * in a consumer group (rules/runner_kafka.c), without Kafka: a local set that
 * the runner's kafka ops mark as group-run (group_run), an in-memory cursor
 * table behind the same ops, and sl_runner_kafka_assign/revoke/committable
 * called as the group would. A test target records what each rule delivered
 * and can fail or hold its deliveries.
 *
 * Checked: nothing runs before an assignment nor on a partition not owned;
 * where a run starts (the table, else the group's offset, else where a new
 * rule starts); committable's offsets (the slowest rule) and the table
 * writes; a revoke waits for a turn in progress and counts what it
 * delivered, gives up payloads waiting for a retry, and writes nothing when
 * the assignment was lost; GET /v1/rules shows the group and the owned
 * partitions only.
 */
#include "testutil.h"

#include "core/base/buf.h"
#include "core/bus/connector.h"
#include "core/bus/databus.h"
#include "core/bus/kgroup.h"
#include "core/bus/set.h"
#include "core/log/store_kafka.h"
#include "rules/runner.h"
#include "server/config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- until core/log/store_kafka.c is merged ------------------------------------
 * The registry refers to the Kafka store (core/bus/set.c); this test opens
 * no Kafka-backed set. Weak: the real ones win once they exist. */
__attribute__((weak)) int sl_kstore_open(const sl_kafka_cluster *cl, const sl_kstore_options *o,
                                         sl_kstore_topic **out, sl_error *err)
{
    (void)cl;
    (void)o;
    (void)out;
    return sl_error_set(err, SL_EINVAL, "test: no Kafka store");
}

__attribute__((weak)) int sl_kstore_partition(sl_kstore_topic *t, int32_t p, sl_store *st,
                                              sl_error *err)
{
    (void)t;
    (void)p;
    (void)st;
    return sl_error_set(err, SL_EINVAL, "test: no Kafka store");
}

__attribute__((weak)) void sl_kstore_release(sl_kstore_topic *t)
{
    (void)t;
}

/* ---- the test target: per rule, what it delivered --------------------------- */

#define MAXREC 4096

typedef struct tt_rule {
    char name[16];
    int64_t got[2][MAXREC]; /* offsets delivered per partition, in order */
    size_t ngot[2];
    size_t nlane; /* of them, payloads of a lane's events */
    bool fail;    /* answer SL_EIO (retryable) */
    bool hold;    /* wait in deliver() until released */
    bool held;    /* a deliver() call is waiting */
} tt_rule;

static pthread_mutex_t tt_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tt_cond = PTHREAD_COND_INITIALIZER;
static tt_rule tt_rules[2];

static int tt_open(const sl_target_config *cfg, const sl_target_env *env, void **impl,
                   sl_error *err)
{
    (void)cfg;
    (void)err;
    tt_rule *t = &tt_rules[env->rule[0] == 'a' ? 0 : 1];
    snprintf(t->name, sizeof t->name, "%s", env->rule);
    *impl = t;
    return 0;
}

static int64_t field(const char *data, size_t len, const char *name)
{
    char buf[8192];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, data, n);
    buf[n] = '\0';
    const char *at = strstr(buf, name);
    return at ? strtoll(at + strlen(name), NULL, 10) : -1;
}

static void tt_deliver(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                       void *ctx)
{
    tt_rule *t = impl;
    pthread_mutex_lock(&tt_lock);
    while (t->hold) {
        t->held = true;
        pthread_cond_broadcast(&tt_cond);
        pthread_cond_wait(&tt_cond, &tt_lock);
    }
    t->held = false;
    bool fail = t->fail;
    if (!fail)
        for (size_t i = 0; i < n; i++) {
            int64_t p = field(d[i].data, d[i].len, "\"sluicepartition\":");
            int64_t o = field(d[i].data, d[i].len, "\"sluiceoffset\":");
            if (p >= 0 && p < 2 && t->ngot[p] < MAXREC)
                t->got[p][t->ngot[p]++] = o;
            t->nlane += d[i].lane && d[i].lane[0];
        }
    pthread_mutex_unlock(&tt_lock);
    for (size_t i = 0; i < n; i++)
        done(ctx, i, fail ? SL_EIO : 0, fail ? "test: failing" : NULL);
}

static void tt_close(void *impl)
{
    (void)impl;
}

static const sl_target_ops tt_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "test",
    .open = tt_open,
    .deliver = tt_deliver,
    .close = tt_close,
};

/* ---- the cursor table and the group, in memory ---------------------------------- */

typedef struct tcur {
    char key[256];
    int64_t off;
} tcur;

static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static tcur tab[64];
static size_t ntab;
static unsigned nputs, nflushes;

static int tab_get(struct sl_kcursors *k, const char *key, int64_t wait_ms, int64_t *off)
{
    (void)k;
    (void)wait_ms;
    int rc = SL_ENOENT;
    pthread_mutex_lock(&tab_lock);
    for (size_t i = 0; i < ntab; i++)
        if (strcmp(tab[i].key, key) == 0) {
            *off = tab[i].off;
            rc = 0;
        }
    pthread_mutex_unlock(&tab_lock);
    return rc;
}

static int tab_put(struct sl_kcursors *k, const char *key, int64_t off)
{
    (void)k;
    pthread_mutex_lock(&tab_lock);
    nputs++;
    size_t i = 0;
    while (i < ntab && strcmp(tab[i].key, key) != 0)
        i++;
    if (i == ntab && ntab < 64)
        snprintf(tab[ntab++].key, sizeof tab->key, "%s", key);
    if (i < 64)
        tab[i].off = off;
    pthread_mutex_unlock(&tab_lock);
    return 0;
}

static int tab_flush(struct sl_kcursors *k, int64_t wait_ms, sl_error *err)
{
    (void)k;
    (void)wait_ms;
    (void)err;
    pthread_mutex_lock(&tab_lock);
    nflushes++;
    pthread_mutex_unlock(&tab_lock);
    return 0;
}

/* The table's value of key, -1 when absent. */
static int64_t tab_at(const char *key)
{
    int64_t v = -1;
    tab_get(NULL, key, 0, &v);
    return v;
}

static void group_info(struct sl_kgroup *g, struct sl_kgroup_info *out)
{
    (void)g;
    *out = (sl_kgroup_info){.group = "sluice.set.in", .generation = 1, .members = 2};
}

static int64_t group_committed(struct sl_kgroup *g, int32_t p)
{
    (void)g;
    return p == 0 ? 42 : -1;
}

static bool group_run(const sl_set *set)
{
    return strcmp(set->name, "in") == 0;
}

static sl_runner_kafka_ops kops = {
    /* revoke_wait_ms: changed by a test */
    .cursor_get = tab_get,
    .cursor_put = tab_put,
    .cursor_flush = tab_flush,
    .group_info = group_info,
    .group_committed = group_committed,
    .group_run = group_run,
};

/* ---- fixture ------------------------------------------------------------------ */

typedef struct fx {
    char *dir;
    sl_config *cfg;
    sl_databus *bus;
    sl_sets *sets;
    sl_set *in;
    sl_runner *runner;
    int fake_kc, fake_group;       /* addresses only */
    const sl_target_ops *file_ops; /* put back before the config is freed (it frees their conf) */
} fx;

static const char *config_text;
static const char *config_plain = "set \"in\" { partitions = 2 }\n"
                                  "rule \"a\" { set = \"in\", start = \"beginning\",\n"
                                  "  target = target.file { path = \"a.ndjson\" } }\n"
                                  "rule \"b\" { set = \"in\", start = \"beginning\",\n"
                                  "  retry = { initial = \"20ms\", max = \"40ms\" },\n"
                                  "  target = target.file { path = \"b.ndjson\" } }\n";

static const char *config_lanes = "set \"in\" { partitions = 2 }\n"
                                  "lane \"fx\" { env = \"boe\" }\n"
                                  "rule \"a\" { set = \"in\", start = \"beginning\",\n"
                                  "  target = target.file { path = \"a.ndjson\" } }\n"
                                  "rule \"b\" { set = \"in\",\n"
                                  "  target = target.file { path = \"b.ndjson\" } }\n";

static int fx_setup(void **state)
{
    if (!config_text)
        config_text = config_plain;
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->dir = tu_tmpdir();
    memset(tt_rules, 0, sizeof tt_rules);
    ntab = nputs = nflushes = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/sluice.lua", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(config_text, fp);
    fclose(fp);
    sl_buf d = SL_BUF_INIT;
    if (sl_config_load(path, &f->cfg, &d)) {
        sl_buf_append(&d, "", 1);
        fail_msg("config: %s", (char *)d.data);
    }
    sl_buf_free(&d);
    f->file_ops = f->cfg->rules[0].targets[0].ops;
    for (size_t i = 0; i < f->cfg->nrules; i++)
        f->cfg->rules[i].targets[0].ops = &tt_ops;
    sl_error err = {0};
    sl_databus_options bo = {0};
    if (sl_databus_start(&bo, &f->bus, &err))
        fail_msg("sl_databus_start: %s", err.msg);
    sl_sets_options so = {.data_dir = f->dir,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = f->bus};
    sl_set_config_default(&so.defaults);
    if (sl_sets_open(&so, &f->sets, &err))
        fail_msg("sl_sets_open: %s", err.msg);
    sl_set_config sc = f->cfg->sets[0].cfg;
    sc.ack = SL_ACK_BUFFER;
    if (sl_sets_define(f->sets, "in", &sc, &f->in, &err))
        fail_msg("sl_sets_define: %s", err.msg);
    sl_runner_options ro = {.sets = f->sets,
                            .bus = f->bus,
                            .data_dir = f->dir,
                            .workers = 2,
                            .kcursors = (struct sl_kcursors *)&f->fake_kc,
                            .kafka = &kops};
    sl_config_ruleset(f->cfg, &ro.rules);
    if (sl_runner_start(&ro, &f->runner, &err))
        fail_msg("sl_runner_start: %s", err.msg);
    sl_databus_set_on_append(f->bus, sl_runner_on_append, f->runner);
    sl_runner_kafka_group(f->runner, f->in, (struct sl_kgroup *)&f->fake_group);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    sl_databus_set_on_append(f->bus, NULL, NULL);
    sl_runner_free(f->runner);
    sl_databus_free(f->bus);
    sl_sets_close(f->sets);
    for (size_t i = 0; i < f->cfg->nrules; i++)
        f->cfg->rules[i].targets[0].ops = f->file_ops;
    sl_config_free(f->cfg);
    config_text = NULL;
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int fx_setup_lanes(void **state)
{
    config_text = config_lanes;
    return fx_setup(state);
}

/* Appends n events of lane to partition p and waits until they are stored. */
static void publish_lane(fx *f, int32_t p, int n, const char *lane)
{
    char key[16];
    for (int k = 0;; k++) {
        snprintf(key, sizeof key, "k%d", k);
        if (sl_databus_partition(f->in, key, strlen(key)) == p)
            break;
    }
    int64_t want = sl_store_end_offset(&f->in->parts[p]) + n;
    for (int i = 0; i < n; i++) {
        char ev[160];
        int len = snprintf(ev, sizeof ev,
                           "{\"specversion\":\"1.0\",\"id\":\"e%d-%d-%lld\",\"source\":\"t\","
                           "\"type\":\"x\"}",
                           p, i, (long long)want);
        sl_databus_event e = {.value = ev,
                              .value_len = (size_t)len,
                              .key = key,
                              .key_len = strlen(key),
                              .lane = lane};
        sl_databus_result res;
        sl_error err = {0};
        if (sl_databus_publish(f->bus, f->in, &e, 1, &res, NULL, NULL, &err) < 0)
            fail_msg("publish: %s", err.msg);
    }
    for (int i = 0; i < 1000 && sl_store_end_offset(&f->in->parts[p]) < want; i++)
        sleep_ms(10);
    assert_int_equal(sl_store_end_offset(&f->in->parts[p]), want);
}

static void publish(fx *f, int32_t p, int n)
{
    publish_lane(f, p, n, "");
}

static size_t got(int rule, int32_t p)
{
    pthread_mutex_lock(&tt_lock);
    size_t n = tt_rules[rule].ngot[p];
    pthread_mutex_unlock(&tt_lock);
    return n;
}

/* Waits (bounded) until rule delivered n payloads of p; asserts it did. */
static void wait_got(int rule, int32_t p, size_t n)
{
    for (int i = 0; i < 1000 && got(rule, p) < n; i++)
        sleep_ms(10);
    assert_int_equal(got(rule, p), n);
}

/* Offsets rule delivered on p are exactly [from, to), in order. */
static void expect_offsets(int rule, int32_t p, int64_t from, int64_t to)
{
    pthread_mutex_lock(&tt_lock);
    tt_rule *t = &tt_rules[rule];
    size_t n = t->ngot[p];
    int64_t first = n ? t->got[p][0] : -1;
    bool inorder = true;
    for (size_t i = 0; i < n; i++)
        inorder = inorder && t->got[p][i] == from + (int64_t)i;
    pthread_mutex_unlock(&tt_lock);
    if (n != (size_t)(to - from) || !inorder)
        fail_msg("rule %d partition %d: %zu payloads from %lld, want [%lld, %lld)", rule, p, n,
                 (long long)first, (long long)from, (long long)to);
}

static char *rules_json(fx *f)
{
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_runner_rules_json(f->runner, &b), 0);
    sl_buf_append(&b, "", 1);
    return (char *)b.data;
}

/* ---- tests -------------------------------------------------------------------- */

/* Nothing before an assignment; then only the owned partition, from where a
 * new rule starts; committable gives the slowest rule's cursor and writes
 * the table; /v1/rules lists the group and the owned partition only. */
static void test_assign_gates(void **state)
{
    fx *f = *state;
    publish(f, 0, 5);
    publish(f, 1, 4);
    sleep_ms(200); /* a turn that should not happen would have happened by now */
    assert_int_equal(got(0, 0) + got(0, 1) + got(1, 0) + got(1, 1), 0);

    int32_t p0 = 0;
    int64_t none = -1;
    sl_runner_kafka_assign(f->runner, f->in, &p0, &none, 1);
    wait_got(0, 0, 5);
    wait_got(1, 0, 5);
    expect_offsets(0, 0, 0, 5); /* start = "beginning": from the start */
    expect_offsets(1, 0, 0, 5);
    publish(f, 1, 1); /* a wake-up of a partition not owned queues nothing */
    sleep_ms(200);
    assert_int_equal(got(0, 1) + got(1, 1), 0);

    int32_t both[2] = {0, 1};
    int64_t commit[2];
    for (int i = 0; i < 1000; i++) { /* the turns' commits land after the deliveries */
        sl_runner_kafka_committable(f->runner, f->in, both, 2, commit);
        if (commit[0] == 5)
            break;
        sleep_ms(10);
    }
    assert_int_equal(commit[0], 5);
    assert_int_equal(commit[1], -1);
    assert_int_equal(tab_at("in/a//0"), 5);
    assert_int_equal(tab_at("in/b//0"), 5);
    assert_int_equal(tab_at("in/a//1"), -1);

    char *js = rules_json(f);
    assert_non_null(strstr(js, "\"group\":\"sluice.set.in\",\"members\":2"));
    assert_non_null(strstr(js, "{\"partition\":0,\"cursor\":5,\"end\":5,\"lag\":0"));
    assert_non_null(strstr(js, "\"committed\":42"));
    assert_null(strstr(js, "\"partition\":1"));
    free(js);
}

/* The table's cursor wins over the group's offset, which wins over a new
 * rule's start; the two rules at different places still get exactly their
 * events (one shares, the other catches up alone). */
static void test_assign_positions(void **state)
{
    fx *f = *state;
    publish(f, 1, 6);
    tab_put(NULL, "in/a//1", 4);
    int32_t p1 = 1;
    int64_t committed = 2;
    sl_runner_kafka_assign(f->runner, f->in, &p1, &committed, 1);
    wait_got(0, 1, 2);
    wait_got(1, 1, 4);
    expect_offsets(0, 1, 4, 6); /* the table */
    expect_offsets(1, 1, 2, 6); /* the group's offset */
    publish(f, 1, 3);           /* both go on, the wake-ups now reach them */
    wait_got(0, 1, 5);
    wait_got(1, 1, 7);
    expect_offsets(0, 1, 4, 9);
    expect_offsets(1, 1, 2, 9);
}

/* A failing target's payloads wait in its pool and hold its cursor; the
 * revoke gives them up, commits the slowest rule's cursor, writes both
 * cursors and flushes; afterwards nothing of the partition runs. A second
 * assignment starts again from the table. */
static void test_revoke_pool(void **state)
{
    fx *f = *state;
    int32_t p0 = 0;
    int64_t none = -1;
    sl_runner_kafka_assign(f->runner, f->in, &p0, &none, 1);
    publish(f, 0, 3);
    wait_got(0, 0, 3);
    wait_got(1, 0, 3);
    pthread_mutex_lock(&tt_lock);
    tt_rules[1].fail = true;
    pthread_mutex_unlock(&tt_lock);
    publish(f, 0, 4);
    wait_got(0, 0, 7);
    char *js = NULL;
    for (int i = 0; i < 1000; i++) { /* rule b retries them: its pool holds 4 */
        free(js);
        js = rules_json(f);
        if (strstr(js, "\"retrying\":4"))
            break;
        sleep_ms(10);
    }
    assert_non_null(strstr(js, "\"retrying\":4"));
    free(js);
    unsigned flushes = nflushes;
    int64_t commit = -2;
    sl_runner_kafka_revoke(f->runner, f->in, &p0, 1, false, &commit);
    assert_int_equal(commit, 3); /* rule b's: its payloads from offset 3 were not delivered */
    assert_int_equal(tab_at("in/a//0"), 7);
    assert_int_equal(tab_at("in/b//0"), 3);
    assert_true(nflushes > flushes);
    js = rules_json(f);
    assert_non_null(strstr(js, "\"retrying\":0"));
    assert_non_null(strstr(js, "\"partitions\":[]"));
    free(js);
    pthread_mutex_lock(&tt_lock);
    tt_rules[1].fail = false;
    pthread_mutex_unlock(&tt_lock);
    publish(f, 0, 1);
    sleep_ms(200);
    assert_int_equal(got(0, 0), 7);
    assert_int_equal(got(1, 0), 3);
    int64_t c2;
    sl_runner_kafka_committable(f->runner, f->in, &p0, 1, &c2);
    assert_int_equal(c2, -1); /* not owned */

    /* Back: each rule from its cursor in the table (the group's offset is older). */
    int64_t old = 0;
    sl_runner_kafka_assign(f->runner, f->in, &p0, &old, 1);
    wait_got(0, 0, 8);
    wait_got(1, 0, 8);
    pthread_mutex_lock(&tt_lock);
    bool ok =
        tt_rules[0].got[0][7] == 7 && tt_rules[1].got[0][3] == 3 && tt_rules[1].got[0][7] == 7;
    pthread_mutex_unlock(&tt_lock);
    assert_true(ok);
}

typedef struct revoke_call {
    fx *f;
    int32_t part;
    bool lost;
    int64_t commit;
    bool done;
} revoke_call;

static void *revoke_thread(void *arg)
{
    revoke_call *rc = arg;
    sl_runner_kafka_revoke(rc->f->runner, rc->f->in, &rc->part, 1, rc->lost, &rc->commit);
    pthread_mutex_lock(&tt_lock);
    rc->done = true;
    pthread_cond_broadcast(&tt_cond);
    pthread_mutex_unlock(&tt_lock);
    return NULL;
}

/* A revoke returns only once the delivery in progress finished, and counts
 * it in the commit; a lost assignment writes no cursor and flushes nothing. */
static void test_revoke_waits(void **state)
{
    fx *f = *state;
    int32_t p1 = 1;
    int64_t none = -1;
    sl_runner_kafka_assign(f->runner, f->in, &p1, &none, 1);
    publish(f, 1, 2);
    wait_got(0, 1, 2);
    wait_got(1, 1, 2);
    pthread_mutex_lock(&tt_lock);
    tt_rules[0].hold = true;
    pthread_mutex_unlock(&tt_lock);
    publish(f, 1, 3);
    pthread_mutex_lock(&tt_lock);
    for (int i = 0; i < 1000 && !tt_rules[0].held; i++) {
        pthread_mutex_unlock(&tt_lock);
        sleep_ms(10);
        pthread_mutex_lock(&tt_lock);
    }
    assert_true(tt_rules[0].held);
    pthread_mutex_unlock(&tt_lock);
    revoke_call rc = {.f = f, .part = 1, .commit = -2};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, revoke_thread, &rc), 0);
    sleep_ms(200);
    pthread_mutex_lock(&tt_lock);
    assert_false(rc.done); /* rule a's delivery still runs */
    tt_rules[0].hold = false;
    pthread_cond_broadcast(&tt_cond);
    pthread_mutex_unlock(&tt_lock);
    pthread_join(th, NULL);
    assert_int_equal(got(0, 1), 5);
    /* Rule a's turn finished during the revoke: its cursor counts. Rule b
     * may or may not have read the last three before (it shares or not). */
    int64_t b = tab_at("in/b//1");
    assert_int_equal(tab_at("in/a//1"), 5);
    assert_true(b == 2 || b == 5);
    assert_int_equal(rc.commit, b);
    assert_int_equal((int64_t)got(1, 1), b);

    /* Lost: the cursor that moved since it was written stays unwritten,
     * nothing is flushed. */
    sl_runner_kafka_assign(f->runner, f->in, &p1, &none, 1);
    publish(f, 1, 2);
    wait_got(0, 1, 7);
    wait_got(1, 1, 7);
    int64_t commit = -2;
    for (int i = 0; i < 1000; i++) { /* writes both cursors at 7 */
        sl_runner_kafka_committable(f->runner, f->in, &p1, 1, &commit);
        if (commit == 7)
            break;
        sleep_ms(10);
    }
    assert_int_equal(commit, 7);
    publish(f, 1, 1);
    wait_got(0, 1, 8);
    wait_got(1, 1, 8);
    char *js = NULL;
    for (int i = 0; i < 1000; i++) { /* both turns committed 8 */
        free(js);
        js = rules_json(f);
        char *b_at = strstr(js, "\"name\":\"b\"");
        char *a8 = strstr(js, "\"partition\":1,\"cursor\":8");
        if (a8 && b_at && a8 < b_at && strstr(b_at, "\"partition\":1,\"cursor\":8"))
            break;
        sleep_ms(10);
    }
    free(js);
    sleep_ms(100); /* a turn's put (within a second of the last one: none) is over */
    unsigned puts = nputs, flushes = nflushes;
    int64_t a_before = tab_at("in/a//1");
    rc = (revoke_call){.f = f, .part = 1, .lost = true, .commit = -2};
    revoke_thread(&rc);
    assert_int_equal(rc.commit, 8); /* what the group would commit (it does not: lost) */
    assert_int_equal(nflushes, flushes);
    assert_int_equal(nputs, puts);
    assert_int_equal(tab_at("in/a//1"), a_before);
    publish(f, 1, 1);
    sleep_ms(200);
    assert_int_equal(got(0, 1), 8);
}

/* A revoke that stops waiting for a hung delivery: the late turn's result
 * moves no cursor, and an assignment meanwhile starts once it ended, from
 * the table (what the late turn delivered is delivered again). */
static void test_late_turn(void **state)
{
    fx *f = *state;
    int32_t p0 = 0;
    int64_t none = -1, commit = -2;
    sl_runner_kafka_assign(f->runner, f->in, &p0, &none, 1);
    publish(f, 0, 2);
    wait_got(0, 0, 2);
    wait_got(1, 0, 2);
    for (int i = 0; i < 1000; i++) {
        sl_runner_kafka_committable(f->runner, f->in, &p0, 1, &commit);
        if (commit == 2)
            break;
        sleep_ms(10);
    }
    assert_int_equal(commit, 2);
    pthread_mutex_lock(&tt_lock);
    tt_rules[0].hold = true;
    pthread_mutex_unlock(&tt_lock);
    publish(f, 0, 3);
    pthread_mutex_lock(&tt_lock);
    for (int i = 0; i < 1000 && !tt_rules[0].held; i++) {
        pthread_mutex_unlock(&tt_lock);
        sleep_ms(10);
        pthread_mutex_lock(&tt_lock);
    }
    assert_true(tt_rules[0].held);
    pthread_mutex_unlock(&tt_lock);
    kops.revoke_wait_ms = 100;
    sl_runner_kafka_revoke(f->runner, f->in, &p0, 1, false, &commit);
    kops.revoke_wait_ms = 0;
    assert_int_equal(commit, 2); /* rule a's turn had not finished */
    assert_int_equal(tab_at("in/a//0"), 2);
    sl_runner_kafka_assign(f->runner, f->in, &p0, &none, 1); /* deferred */
    pthread_mutex_lock(&tt_lock);
    tt_rules[0].hold = false;
    pthread_cond_broadcast(&tt_cond);
    pthread_mutex_unlock(&tt_lock);
    /* The late turn delivers 2..4, then the new ownership from the table's 2. */
    wait_got(0, 0, 8);
    pthread_mutex_lock(&tt_lock);
    const int64_t want[8] = {0, 1, 2, 3, 4, 2, 3, 4};
    bool ok = true;
    for (int i = 0; i < 8; i++)
        ok = ok && tt_rules[0].got[0][i] == want[i];
    pthread_mutex_unlock(&tt_lock);
    assert_true(ok);
    size_t b = got(1, 0);
    assert_true(b == 5 || b == 8); /* rule b: in the late turn (again from 2) or before */
    for (int i = 0; i < 1000; i++) {
        sl_runner_kafka_committable(f->runner, f->in, &p0, 1, &commit);
        if (commit == 5)
            break;
        sleep_ms(10);
    }
    assert_int_equal(commit, 5);
    assert_int_equal(tab_at("in/a//0"), 5);
}

/* Lane runs: their own keys in the table, positioned like a local set's
 * lane runs (a new rule with start = "beginning": from the start), counted
 * in the slowest cursor, back from the table after a revoke. */
static void test_lanes(void **state)
{
    fx *f = *state;
    publish(f, 0, 2);
    publish_lane(f, 0, 2, "fx");
    int32_t p0 = 0;
    int64_t none = -1, commit = -2;
    sl_runner_kafka_assign(f->runner, f->in, &p0, &none, 1);
    wait_got(0, 0, 4);              /* rule a from the start: its base run 2, its lane run 2 */
    assert_int_equal(got(1, 0), 0); /* rule b starts at the end (start = "end") */
    publish(f, 0, 1);
    publish_lane(f, 0, 1, "fx");
    wait_got(0, 0, 6);
    wait_got(1, 0, 2);
    pthread_mutex_lock(&tt_lock);
    size_t la = tt_rules[0].nlane, lb = tt_rules[1].nlane;
    pthread_mutex_unlock(&tt_lock);
    assert_int_equal(la, 3);
    assert_int_equal(lb, 1);
    for (int i = 0; i < 1000; i++) {
        sl_runner_kafka_committable(f->runner, f->in, &p0, 1, &commit);
        if (commit == 6 && tab_at("in/b/fx/0") == 6 && tab_at("in/a/fx/0") == 6)
            break;
        sleep_ms(10);
    }
    assert_int_equal(commit, 6);
    assert_int_equal(tab_at("in/a/fx/0"), 6);
    assert_int_equal(tab_at("in/b/fx/0"), 6);
    sl_runner_kafka_revoke(f->runner, f->in, &p0, 1, false, &commit);
    assert_int_equal(commit, 6);
    tab_put(NULL, "in/b/fx/0", 3); /* rule b's lane run: as if another router had it at 3 */
    sl_runner_kafka_assign(f->runner, f->in, &p0, &none, 1);
    wait_got(1, 0, 4); /* offsets 3 (lane) and 5 (lane) again, nothing of the base lane */
    pthread_mutex_lock(&tt_lock);
    bool ok = tt_rules[1].got[0][2] == 3 && tt_rules[1].got[0][3] == 5 && tt_rules[1].nlane == 3;
    pthread_mutex_unlock(&tt_lock);
    assert_true(ok);
    assert_int_equal(got(0, 0), 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_assign_gates, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_assign_positions, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_revoke_pool, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_revoke_waits, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_late_turn, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lanes, fx_setup_lanes, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
