/*
 * tests/integration/test_lanes_reload.c — lanes across config reloads and
 * restarts (docs/lanes.md): a lane declared by a reload while its events keep
 * coming loses none of them and leaks none to the base target; a lane's
 * cursors survive a restart (nothing delivered twice, nothing skipped); an
 * override removed by a reload hands the lane to the base rule's fallback
 * from where the override stopped.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_S 30.0

/* The ids in an NDJSON file a target.file wrote, with how often each came. */
typedef struct idcount {
    char id[64];
    int n;
} idcount;

typedef struct ids {
    idcount *v;
    size_t n;
} ids;

static void ids_free(ids *x)
{
    free(x->v);
    x->v = NULL;
    x->n = 0;
}

static int ids_count(const ids *x, const char *id)
{
    for (size_t i = 0; i < x->n; i++)
        if (strcmp(x->v[i].id, id) == 0)
            return x->v[i].n;
    return 0;
}

static ids read_ids(const char *path)
{
    ids x = {0};
    FILE *f = fopen(path, "r");
    if (!f)
        return x;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        const char *id = json_string_value(json_object_get(j, "id"));
        if (id) {
            size_t i = 0;
            while (i < x.n && strcmp(x.v[i].id, id))
                i++;
            if (i == x.n) {
                x.v = realloc(x.v, (x.n + 1) * sizeof *x.v);
                assert_non_null(x.v);
                snprintf(x.v[x.n].id, sizeof x.v[x.n].id, "%s", id);
                x.v[x.n++].n = 0;
            }
            x.v[i].n++;
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    return x;
}

#define CFG_V1                                                                                     \
    "set \"orders\" { partitions = 2 }\n"                                                          \
    "rule \"r\" { set = \"orders\", target = target.file { path = \"base.ndjson\" } }\n"

#define CFG_V2                                                                                     \
    "set \"orders\" { partitions = 2 }\n"                                                          \
    "lane \"fx\" { env = \"boe\" }\n"                                                              \
    "rule \"r\" { set = \"orders\", target = target.file { path = \"base.ndjson\" },\n"            \
    "  lanes = { [\"fx\"] = { target = target.file { path = \"fx.ndjson\" } } } }\n"

/* CFG_V2 without the override: fx falls back to the base rule. */
#define CFG_V3                                                                                     \
    "set \"orders\" { partitions = 2 }\n"                                                          \
    "lane \"fx\" { env = \"boe\" }\n"                                                              \
    "rule \"r\" { set = \"orders\", target = target.file { path = \"base.ndjson\" } }\n"

/* A thread posting one fx event at a time until told to stop; it keeps the
 * ids the server accepted. UnknownLane answers (before the reload) are
 * counted, anything else is a failure. */
typedef struct writer {
    int port;
    const char *lane;
    const char *prefix;
    _Atomic bool stop;
    char (*accepted)[32];
    size_t naccepted, cap;
    int unknown, other;
    char last_error[512];
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    CURL *c = curl_easy_init();
    char hdr[64];
    snprintf(hdr, sizeof hdr, "X-Sluice-Lane: %s", w->lane);
    const char *hdrs[] = {hdr, NULL};
    for (int i = 0; !atomic_load(&w->stop) && w->naccepted < w->cap; i++) {
        char id[32], body[256];
        snprintf(id, sizeof id, "%s-%d", w->prefix, i);
        snprintf(body, sizeof body,
                 "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/t\",\"type\":\"t\"}", id);
        it_call k = {.path = "/v1/sets/orders/events",
                     .ctype = IT_CT_CE,
                     .hdrs = hdrs,
                     .body = body,
                     .len = strlen(body)};
        it_resp r;
        int rc = it_http(c, w->port, &k, &r);
        /* 200 when stored; the one event's refusal is the answer (422). */
        if (!rc && r.status == 200 && strstr(it_body(&r), "\"accepted\":1"))
            snprintf(w->accepted[w->naccepted++], 32, "%s", id);
        else if (!rc && r.status == 422 && strstr(it_body(&r), "\"UnknownLane\""))
            w->unknown++;
        else {
            w->other++;
            snprintf(w->last_error, sizeof w->last_error, "%ld %s %s", r.status, it_body(&r),
                     r.err);
        }
        it_resp_free(&r);
    }
    curl_easy_cleanup(c);
    return NULL;
}

static void post_base(it_server *s, const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        char *ev = it_event(id, NULL);
        int part;
        int64_t off;
        it_post_one(s, "orders", ev, &part, &off);
        free(ev);
    }
}

/* Posts n events of lane fx with ids PREFIX0 … PREFIX(n-1), all accepted. */
static void post_fx(it_server *s, const char *prefix, int n)
{
    const char *hdrs[] = {"X-Sluice-Lane: fx", NULL};
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++)
        assert_int_equal(sl_buf_printf(&b,
                                       "{\"specversion\":\"1.0\",\"id\":\"%s%d\",\"source\":"
                                       "\"/t\",\"type\":\"t\"}\n",
                                       prefix, i),
                         0);
    json_decref(it_post_all(s, "orders", hdrs, &b, (size_t)n));
    sl_buf_free(&b);
}

static void test_reload_declares_lane_under_traffic(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], base_path[PATH_MAX], fx_path[PATH_MAX];
    it_write_config(s, cfg, CFG_V1);
    it_path(base_path, s, "base.ndjson");
    it_path(fx_path, s, "fx.ndjson");
    it_start_config(s, cfg, WAIT_S);
    post_base(s, "b1", 20);

    writer w = {.port = s->port, .lane = "fx", .prefix = "fx", .cap = 100000};
    w.accepted = calloc(w.cap, sizeof *w.accepted);
    assert_non_null(w.accepted);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
    it_sleep_ms(300); /* fx is not declared yet: refused */
    it_write_config(s, cfg, CFG_V2);
    kill(s->pid, SIGHUP);
    double t0 = it_mono();
    while (it_mono() - t0 < WAIT_S && w.naccepted < 200)
        it_sleep_ms(20);
    post_base(s, "b2", 20);
    it_sleep_ms(300);
    atomic_store(&w.stop, true);
    pthread_join(t, NULL);
    if (w.other)
        fail_msg("%d fx posts failed otherwise than UnknownLane, last: %s", w.other, w.last_error);
    if (!w.unknown || w.naccepted < 200)
        fail_msg("want fx refused before the reload and accepted after: %d refused, %zu "
                 "accepted",
                 w.unknown, w.naccepted);
    it_wait_caught_up(s, WAIT_S);

    ids fx = read_ids(fx_path), base = read_ids(base_path);
    for (size_t i = 0; i < w.naccepted; i++) {
        if (ids_count(&fx, w.accepted[i]) != 1)
            fail_msg("accepted %s reached the fx target %d times, want once", w.accepted[i],
                     ids_count(&fx, w.accepted[i]));
        if (ids_count(&base, w.accepted[i]))
            fail_msg("lane event %s leaked to the base target", w.accepted[i]);
    }
    if (fx.n != w.naccepted)
        fail_msg("the fx target holds %zu events, %zu were accepted", fx.n, w.naccepted);
    if (base.n != 40)
        fail_msg("the base target holds %zu events, want the 40 base ones", base.n);
    ids_free(&fx);
    ids_free(&base);

    /* GET /v1/lanes counts the lane. */
    it_resp r = it_get(s, "/v1/lanes");
    json_t *j = it_parse_json(&r);
    json_t *lanes = json_object_get(j, "lanes");
    bool found = false;
    for (size_t i = 0; i < json_array_size(lanes); i++) {
        json_t *l = json_array_get(lanes, i);
        if (strcmp(json_string_value(json_object_get(l, "name")), "fx"))
            continue;
        found = true;
        assert_int_equal(json_integer_value(json_object_get(l, "events_in")), w.naccepted);
        assert_int_equal(json_integer_value(json_object_get(l, "delivered")), w.naccepted);
    }
    assert_true(found);
    json_decref(j);
    it_resp_free(&r);
    free(w.accepted);
    s->passed = true;
}

/* Restart keeps a lane's cursors; removing the override hands the lane to
 * the base rule from where the override stopped. */
static void test_restart_and_override_removed(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], base_path[PATH_MAX], fx_path[PATH_MAX];
    it_write_config(s, cfg, CFG_V2);
    it_path(base_path, s, "base.ndjson");
    it_path(fx_path, s, "fx.ndjson");
    it_start_config(s, cfg, WAIT_S);
    post_fx(s, "fx-a", 50);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(it_srv_stop(s, SIGTERM, WAIT_S), 0);
    it_restart(s, WAIT_S);
    post_fx(s, "fx-b", 30);
    it_wait_caught_up(s, WAIT_S);
    ids fx = read_ids(fx_path);
    if (fx.n != 80)
        fail_msg("the fx target holds %zu distinct events after the restart, want 80", fx.n);
    for (size_t i = 0; i < fx.n; i++)
        if (fx.v[i].n != 1)
            fail_msg("%s reached the fx target %d times (a restart delivered it again)", fx.v[i].id,
                     fx.v[i].n);
    ids_free(&fx);

    /* The override goes: fx falls back to base, from where it was. */
    it_write_config(s, cfg, CFG_V3);
    kill(s->pid, SIGHUP);
    double t0 = it_mono();
    while (!it_log_contains(s, "reload") && it_mono() - t0 < WAIT_S)
        it_sleep_ms(20);
    it_sleep_ms(500);
    post_fx(s, "fx-c", 10);
    it_wait_caught_up(s, WAIT_S);
    ids base = read_ids(base_path);
    fx = read_ids(fx_path);
    if (base.n != 10 || fx.n != 80)
        fail_msg("after the override went: base target %zu events (want the 10 new fx ones), fx "
                 "target %zu (want 80)",
                 base.n, fx.n);
    for (int i = 0; i < 10; i++) {
        char id[32];
        snprintf(id, sizeof id, "fx-c%d", i);
        assert_int_equal(ids_count(&base, id), 1);
    }
    ids_free(&base);
    ids_free(&fx);
    s->passed = true;
}

/* One request mixing lanes event by event: each entry's result names where
 * that very event is stored (the events are handed to the Databus grouped
 * by lane, the results put back in input order), and each lane keeps its
 * order. */
static void test_mixed_request_results(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "lanes.auto = true\nset \"orders\" { partitions = 1 }\n");
    it_start_config(s, cfg, WAIT_S);
    static const char *const lanes[] = {"", "fx", "", "fy", "fx", "", "fy", "fx"};
    enum { N = sizeof lanes / sizeof *lanes };
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < N; i++)
        assert_int_equal(sl_buf_printf(&b,
                                       "{\"specversion\":\"1.0\",\"id\":\"m%d\",\"source\":"
                                       "\"/t\",\"type\":\"t\"%s%s%s}\n",
                                       i, *lanes[i] ? ",\"lane\":\"" : "", lanes[i],
                                       *lanes[i] ? "\"" : ""),
                         0);
    json_t *ans = it_post_all(s, "orders", NULL, &b, N);
    sl_buf_free(&b);
    it_evs all = it_read_events(s, "orders", 0, "offset=0&max=100&lane=*");
    assert_int_equal(all.n, N);
    int64_t last_of[3] = {-1, -1, -1}; /* "", fx, fy */
    for (int i = 0; i < N; i++) {
        int64_t off = it_res_off(ans, (size_t)i);
        char id[16];
        snprintf(id, sizeof id, "m%d", i);
        const it_rawev *ev = NULL;
        for (size_t j = 0; j < all.n; j++)
            if (all.v[j].offset == off)
                ev = &all.v[j];
        if (!ev || strcmp(ev->id, id) || strcmp(ev->lane, lanes[i]))
            fail_msg("entry %d (%s, lane \"%s\") says offset %lld, which holds %s", i, id, lanes[i],
                     (long long)off, ev ? ev->id : "nothing");
        int l = !*lanes[i] ? 0 : strcmp(lanes[i], "fx") == 0 ? 1 : 2;
        if (off <= last_of[l])
            fail_msg("lane \"%s\" lost its order: %s at %lld after %lld", lanes[i], id,
                     (long long)off, (long long)last_of[l]);
        last_of[l] = off;
    }
    it_evs_free(&all);
    json_decref(ans);
    s->passed = true;
}

int main(void)
{
    if (it_init("test_lanes_reload"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reload_declares_lane_under_traffic, it_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_restart_and_override_removed, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_mixed_request_results, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
