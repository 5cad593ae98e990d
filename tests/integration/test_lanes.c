/*
 * tests/integration/test_lanes.c — lanes end to end (ARCHITECTURE.md §7,
 * issue 7 §1, §2, §4) against the real `bin/sluice serve -c FILE.lua`:
 *
 *   routing    the exact routing table of two rules over base, a boe lane
 *              with an override, a boe lane without one (base rule, lane
 *              headers kept), a ppe lane without one (nowhere, counted) and
 *              a ppe lane whose override replaces match and target; the
 *              counters of GET /v1/lanes and /metrics
 *   sources    X-Sluice-Lane, baggage, the lane attribute; conflicts per
 *              entry and per request; undeclared and invalid lanes
 *   auto       lanes.auto: an undeclared lane is registered, falls back to
 *              base and survives a restart
 *   isolation  a lane override failing forever blocks neither base nor
 *              other lanes, and catches up once its target is back
 *   drop       `sluice lane drop` of a declared and of an auto lane, and of
 *              a lane whose override is failing and retrying
 *   readers    GET …/events and `sluice tail` see only the lane asked for
 *   soak       base, two boe lanes and a ppe lane through HTTP (threads),
 *              Kafka in (the mock cluster, `lane` record headers) and two
 *              Databus agents (per-line lanes; --lane) at once: the exact
 *              routing table, nothing lost
 *
 * Deliveries are recorded by receiver.h endpoints in this process and
 * checked by event id: every id where it belongs exactly once, nowhere else.
 * SLUICE_SOAK=1 makes the soak 60 s instead of 10 s. ITEST_ONLY=NAME runs
 * one test.
 */
#include "itest.h"

#include "core/base/buf.h"
#include "receiver.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 30.0 /* every wait gives up after this long */

/* Short back-offs, retried for as long as the test runs. */
#define RETRY                                                                                      \
    "  retry = { attempts = 1000, max_age = \"forever\", backoff = \"exponential\",\n"             \
    "            initial = \"20ms\", max = \"200ms\" },\n"

/* ---- receivers ------------------------------------------------------------------- */

enum { RX_BASE, RX_LANE, RX_AUDIT, RX_PPE, RX_N };
static rx_receiver *g_rx[RX_N];
static const char *const g_rx_name[RX_N] = {"base", "lane override", "audit", "ppe override"};
static it_kmock g_mk;
static pid_t g_agent[2]; /* the Databus agents of the soak, 0 when none */

static int setup(void **state)
{
    for (int i = 0; i < RX_N; i++) {
        g_rx[i] = rx_new();
        if (!g_rx[i] || rx_start(g_rx[i], 0))
            fail_msg("cannot start the HTTP receivers");
    }
    return it_setup(state);
}

static void stop_agents(void)
{
    for (int a = 0; a < 2; a++) {
        if (!g_agent[a])
            continue;
        kill(g_agent[a], SIGTERM);
        int st;
        for (int i = 0; i < 100 && waitpid(g_agent[a], &st, WNOHANG) == 0; i++)
            it_sleep_ms(50);
        if (waitpid(g_agent[a], &st, WNOHANG) == 0) {
            kill(g_agent[a], SIGKILL);
            waitpid(g_agent[a], &st, 0);
        }
        g_agent[a] = 0;
    }
}

static int teardown(void **state)
{
    stop_agents();
    it_teardown(state); /* the server first: no new requests while receivers stop */
    it_kmock_stop(&g_mk);
    for (int i = 0; i < RX_N; i++) {
        rx_free(g_rx[i]);
        g_rx[i] = NULL;
    }
    return 0;
}

/* "http://127.0.0.1:PORT/hook" of receiver i, in a static buffer of its own. */
static const char *url(int i)
{
    static char u[RX_N][64];
    snprintf(u[i], sizeof u[i], "http://127.0.0.1:%d/hook", rx_port(g_rx[i]));
    return u[i];
}

/* ---- events ---------------------------------------------------------------------- */

/* One event as an NDJSON line; lane (may be NULL) as its lane attribute. */
static void add_ev(sl_buf *b, const char *id, const char *type, const char *lane)
{
    sl_buf_printf(b, "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/lanes\",\"type\":\"%s\"",
                  id, type);
    if (lane)
        sl_buf_printf(b, ",\"lane\":\"%s\"", lane);
    sl_buf_printf(b, ",\"data\":{\"id\":\"%s\"}}\n", id);
}

/* Posts n events "PREFIX-i" (i in [from, from + n)) with the header
 * "X-Sluice-Lane: lane" (none when lane is NULL or ""), types alternating
 * order (even i) and refund (odd i); asserts all were accepted and adds
 * id -> lane to want (may be NULL). */
static void post_lane(it_server *s, const char *prefix, int from, int n, const char *lane,
                      json_t *want)
{
    sl_buf b = SL_BUF_INIT;
    char id[96], hdr[96];
    for (int i = from; i < from + n; i++) {
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        add_ev(&b, id, i % 2 ? "refund" : "order", NULL);
        if (want)
            json_object_set_new(want, id, json_string(lane ? lane : ""));
    }
    snprintf(hdr, sizeof hdr, "X-Sluice-Lane: %s", lane ? lane : "");
    const char *hdrs[] = {hdr, NULL};
    json_decref(it_post_all(s, "orders", lane && *lane ? hdrs : NULL, &b, (size_t)n));
    sl_buf_free(&b);
}

/* Copies the ids of src whose type (the event's i parity in post_lane) and
 * lane fit into dst: type NULL takes every type. */
static void want_add(json_t *dst, json_t *src, const char *lane, const char *type)
{
    const char *id;
    json_t *v;
    json_object_foreach(src, id, v)
    {
        if (strcmp(json_string_value(v), lane))
            continue;
        if (type) {
            long i = atol(strrchr(id, '-') + 1);
            if (strcmp(type, i % 2 ? "refund" : "order"))
                continue;
        }
        json_object_set(dst, id, v);
    }
}

/* ---- what the receivers got ------------------------------------------------------- */

/* The 2xx deliveries of a receiver by event id, read incrementally. */
typedef struct tally {
    rx_receiver *rx;
    size_t next;   /* requests looked at */
    json_t *n;     /* id -> times delivered */
    json_t *lane;  /* id -> lane attribute it was delivered with ("" none) */
    size_t failed; /* requests answered other than 2xx */
    char bad[512]; /* the first request whose lane headers do not fit its events */
} tally;

static void tally_init(tally *t, rx_receiver *rx)
{
    memset(t, 0, sizeof *t);
    t->rx = rx;
    t->n = json_object();
    t->lane = json_object();
}

static void tally_free(tally *t)
{
    json_decref(t->n);
    json_decref(t->lane);
    memset(t, 0, sizeof *t);
}

/* One delivered event: counts it, and checks the request's lane headers
 * against its lane attribute (X-Sluice-Lane: LANE and a baggage member
 * lane=LANE for a lane event, neither for a base event). */
static void tally_event(tally *t, const rx_req *q, json_t *ev)
{
    const char *id = json_string_value(json_object_get(ev, "id"));
    const char *lane = json_string_value(json_object_get(ev, "lane"));
    if (!id) {
        if (!t->bad[0])
            snprintf(t->bad, sizeof t->bad, "a delivered event without id: %.200s", q->body);
        return;
    }
    lane = lane ? lane : "";
    json_t *c = json_object_get(t->n, id);
    json_object_set_new(t->n, id, json_integer(c ? json_integer_value(c) + 1 : 1));
    json_object_set_new(t->lane, id, json_string(lane));
    char h[256], g[1024], want[64];
    const char *hv = rx_header(q, "x-sluice-lane", h, sizeof h);
    const char *gv = rx_header(q, "baggage", g, sizeof g);
    snprintf(want, sizeof want, "lane=%s", lane);
    bool ok = *lane ? hv && strcmp(hv, lane) == 0 && gv && strstr(gv, want) : !hv && !gv;
    if (!ok && !t->bad[0])
        snprintf(t->bad, sizeof t->bad,
                 "event %s of lane \"%s\" came with X-Sluice-Lane %s%s%s and baggage %s%s%s", id,
                 lane, hv ? "\"" : "", hv ? hv : "(none)", hv ? "\"" : "", gv ? "\"" : "",
                 gv ? gv : "(none)", gv ? "\"" : "");
}

static void tally_update(tally *t)
{
    const rx_req *q;
    while ((q = rx_req_at(t->rx, t->next)) != NULL) {
        t->next++;
        if (q->status < 200 || q->status > 299) {
            t->failed++;
            continue;
        }
        json_t *j = json_loadb(q->body, q->body_len, 0, NULL);
        if (json_is_object(j)) {
            tally_event(t, q, j);
        } else if (json_is_array(j)) {
            size_t i;
            json_t *ev;
            json_array_foreach(j, i, ev) tally_event(t, q, ev);
        } else if (!t->bad[0]) {
            snprintf(t->bad, sizeof t->bad, "a delivery that is not JSON: %.200s", q->body);
        }
        json_decref(j);
    }
}

/* How many ids of want t has seen. */
static size_t tally_have(tally *t, json_t *want)
{
    size_t n = 0;
    const char *id;
    json_t *v;
    json_object_foreach(want, id, v)
    {
        n += json_object_get(t->n, id) != NULL;
    }
    return n;
}

/* Waits until every receiver i got every id of want[i] (NULL: none
 * expected), up to secs; returns without failing (the exact check says what
 * is missing). */
static void wait_deliveries(tally *t, json_t *const *want, double secs)
{
    for (double end = it_mono() + secs;; it_sleep_ms(50)) {
        bool all = true;
        for (int i = 0; i < RX_N; i++) {
            if (!t[i].rx || !want[i])
                continue;
            tally_update(&t[i]);
            all &= tally_have(&t[i], want[i]) == json_object_size(want[i]);
        }
        if (all || it_mono() > end)
            return;
    }
}

/* Appends up to 5 keys of a JSON object to a message. */
static void some_keys(sl_buf *m, json_t *o)
{
    const char *id;
    json_t *v;
    int k = 0;
    json_object_foreach(o, id, v)
    {
        if (k++ == 5) {
            sl_buf_printf(m, " …");
            break;
        }
        sl_buf_printf(m, " %s", id);
    }
}

/* Asserts that receiver t got exactly the ids of want (id -> lane), each
 * once and with its lane, with fitting lane headers. */
static void expect_exact(tally *t, const char *name, json_t *want)
{
    tally_update(t);
    json_t *missing = json_object(), *leaked = json_object(), *dup = json_object(),
           *wrong = json_object();
    const char *id;
    json_t *v;
    json_object_foreach(want, id, v)
    {
        json_t *c = json_object_get(t->n, id);
        if (!c)
            json_object_set(missing, id, v);
        else if (json_integer_value(c) != 1)
            json_object_set(dup, id, c);
        else if (strcmp(json_string_value(json_object_get(t->lane, id)), json_string_value(v)))
            json_object_set(wrong, id, v);
    }
    json_object_foreach(t->n, id, v)
    {
        if (!json_object_get(want, id))
            json_object_set(leaked, id, json_object_get(t->lane, id));
    }
    if (json_object_size(missing) || json_object_size(leaked) || json_object_size(dup) ||
        json_object_size(wrong) || t->bad[0]) {
        sl_buf m = SL_BUF_INIT;
        sl_buf_printf(&m, "%s target: want %zu events, got %zu: missing %zu [", name,
                      json_object_size(want), json_object_size(t->n), json_object_size(missing));
        some_keys(&m, missing);
        sl_buf_printf(&m, " ], leaked %zu [", json_object_size(leaked));
        some_keys(&m, leaked);
        sl_buf_printf(&m, " ] (lanes:");
        int k = 0;
        json_object_foreach(leaked, id, v)
        {
            if (k++ < 5)
                sl_buf_printf(&m, " \"%s\"", json_string_value(v));
        }
        sl_buf_printf(&m, "), delivered more than once %zu [", json_object_size(dup));
        some_keys(&m, dup);
        sl_buf_printf(&m, " ], with the wrong lane %zu [", json_object_size(wrong));
        some_keys(&m, wrong);
        sl_buf_printf(&m, " ]; %s", t->bad[0] ? t->bad : "headers fine");
        sl_buf_append(&m, "", 1);
        fail_msg("%s", (const char *)m.data);
    }
    json_decref(missing);
    json_decref(leaked);
    json_decref(dup);
    json_decref(wrong);
}

/* ---- GET /v1/lanes and /metrics ----------------------------------------------------- */

static json_t *lanes_get(it_server *s)
{
    it_resp r = it_get(s, "/v1/lanes");
    if (r.status != 200)
        fail_msg("GET /v1/lanes answered %ld: %s", r.status, it_body(&r));
    json_t *j = it_parse_json(&r);
    it_resp_free(&r);
    if (!json_is_array(json_object_get(j, "lanes")) || !json_is_boolean(json_object_get(j, "auto")))
        fail_msg("GET /v1/lanes: no \"lanes\" list or \"auto\" flag");
    return j;
}

/* The entry of lane name in a lanes_get() answer (borrowed), or NULL. */
static json_t *lane_of(json_t *j, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(j, "lanes"), i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && strcmp(n, name) == 0)
            return e;
    }
    return NULL;
}

/* The run of rule in lane's entry (borrowed), or NULL. */
static json_t *lane_rule(json_t *j, const char *lane, const char *rule)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(lane_of(j, lane), "rules"), i, e)
    {
        const char *n = json_string_value(json_object_get(e, "rule"));
        if (n && strcmp(n, rule) == 0)
            return e;
    }
    return NULL;
}

/* Integer key of o; fails the test (showing the whole answer) when absent. */
static json_int_t jint(json_t *all, json_t *o, const char *key, const char *what)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) {
        char *d = json_dumps(all, JSON_COMPACT);
        fail_msg("%s: no integer \"%s\" in GET /v1/lanes: %s", what, key, d);
    }
    return json_integer_value(v);
}

/* Asserts an integer member of the lane's entry (rule NULL) or of its run
 * of rule. */
static void expect_lane_int(json_t *j, const char *lane, const char *rule, const char *key,
                            json_int_t want)
{
    char what[160];
    snprintf(what, sizeof what, "lane \"%s\"%s%s", lane, rule ? ", rule " : "", rule ? rule : "");
    json_t *o = rule ? lane_rule(j, lane, rule) : lane_of(j, lane);
    if (!o) {
        char *d = json_dumps(j, JSON_COMPACT);
        fail_msg("%s is not in GET /v1/lanes: %s", what, d);
    }
    json_int_t got = jint(j, o, key, what);
    if (got != want) {
        char *d = json_dumps(o, JSON_COMPACT);
        fail_msg("%s: %s is %lld, want %lld: %s", what, key, (long long)got, (long long)want, d);
    }
}

static void expect_lane_str(json_t *j, const char *lane, const char *rule, const char *key,
                            const char *want)
{
    json_t *o = rule ? lane_rule(j, lane, rule) : lane_of(j, lane);
    const char *got = json_string_value(json_object_get(o, key));
    if (!got || strcmp(got, want)) {
        char *d = json_dumps(o ? o : j, JSON_COMPACT);
        fail_msg("lane \"%s\"%s%s: %s is %s, want \"%s\": %s", lane, rule ? ", rule " : "",
                 rule ? rule : "", key, got ? got : "(none)", want, d);
    }
}

/* Polls GET /v1/lanes until every run of every lane has lag 0 and nothing
 * waiting for a retry, twice in a row, and the rules of GET /v1/rules too. */
static void wait_lanes_idle(it_server *s, double secs)
{
    it_wait_caught_up(s, secs);
    int calm = 0;
    char *last = NULL;
    for (double end = it_mono() + secs; it_mono() < end; it_sleep_ms(20)) {
        json_t *j = lanes_get(s);
        free(last);
        last = json_dumps(j, JSON_COMPACT);
        bool busy = false;
        size_t i, k;
        json_t *l, *r;
        json_array_foreach(json_object_get(j, "lanes"), i, l)
        {
            json_array_foreach(json_object_get(l, "rules"), k, r)
            {
                busy |= json_integer_value(json_object_get(r, "lag")) != 0;
                busy |= json_integer_value(json_object_get(r, "retrying")) != 0;
            }
        }
        json_decref(j);
        calm = busy ? 0 : calm + 1;
        if (calm == 2) {
            free(last);
            return;
        }
    }
    fail_msg("the lanes did not catch up within %.0f s: %s", secs, last ? last : "");
}

/* A Prometheus sample of GET /metrics, or -1. */
static double metric(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/metrics");
    double v = it_metric(it_body(&r), name);
    it_resp_free(&r);
    return v;
}

static void expect_metric(it_server *s, const char *name, double want)
{
    double got = metric(s, name);
    if (got != want) {
        it_resp r = it_get(s, "/metrics");
        fprintf(stderr, "%s", it_body(&r));
        it_resp_free(&r);
        fail_msg("%s is %g, want %g (the metrics are above)", name, got, want);
    }
}

/* ---- a) the routing table ------------------------------------------------------- */

/* Two rules over base, feature-x (boe, override of billing), feature-y
 * (boe, no override), release-1 (ppe, no override) and release-2 (ppe, an
 * audit override replacing match and target). Every event where it belongs
 * exactly once, nowhere else; the counters of GET /v1/lanes and /metrics. */
static void test_routing(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "set \"orders\" { partitions = 2 }\n"
                    "lane \"feature-x\" { env = \"boe\" }\n"
                    "lane \"feature-y\" { env = \"boe\" }\n"
                    "lane \"release-1\" { env = \"ppe\" }\n"
                    "lane \"release-2\" { env = \"ppe\", fallback = \"none\" }\n"
                    "rule \"billing\" {\n"
                    "  set = \"orders\",\n"
                    "  target = target.http { url = \"%s\" },\n"
                    "  lanes = { [\"feature-x\"] = { target = target.http { url = \"%s\" } } },\n"
                    "}\n"
                    "rule \"audit\" {\n"
                    "  set = \"orders\",\n"
                    "  match = { type = { \"order\" } },\n"
                    "  target = target.http { url = \"%s\" },\n"
                    "  lanes = { [\"release-2\"] = { match = { type = { \"refund\" } },\n"
                    "                              target = target.http { url = \"%s\" } } },\n"
                    "}\n",
                    url(RX_BASE), url(RX_LANE), url(RX_AUDIT), url(RX_PPE));
    it_start_config(s, cfg, WAIT_S);
    json_t *sent = json_object(); /* id -> lane */
    post_lane(s, "b", 0, 40, "", sent);
    post_lane(s, "fx", 0, 30, "feature-x", sent);
    post_lane(s, "fy", 0, 20, "feature-y", sent);
    post_lane(s, "r1", 0, 20, "release-1", sent);
    post_lane(s, "r2", 0, 20, "release-2", sent);

    json_t *want[RX_N];
    for (int i = 0; i < RX_N; i++)
        want[i] = json_object();
    want_add(want[RX_BASE], sent, "", NULL); /* billing: base, and feature-y by fallback */
    want_add(want[RX_BASE], sent, "feature-y", NULL);
    want_add(want[RX_LANE], sent, "feature-x", NULL); /* billing's feature-x override */
    want_add(want[RX_AUDIT], sent, "", "order");      /* audit's match, base and boe lanes */
    want_add(want[RX_AUDIT], sent, "feature-x", "order");
    want_add(want[RX_AUDIT], sent, "feature-y", "order");
    want_add(want[RX_PPE], sent, "release-2", "refund"); /* the override's own match */
    tally t[RX_N];
    for (int i = 0; i < RX_N; i++)
        tally_init(&t[i], g_rx[i]);
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    it_sleep_ms(500); /* anything that would leak has had time to */
    for (int i = 0; i < RX_N; i++)
        expect_exact(&t[i], g_rx_name[i], want[i]);

    json_t *j = lanes_get(s);
    if (json_is_true(json_object_get(j, "auto")))
        fail_msg("GET /v1/lanes says auto without lanes.auto");
    expect_lane_str(j, "", NULL, "env", "base");
    expect_lane_str(j, "feature-x", NULL, "env", "boe");
    expect_lane_str(j, "feature-x", NULL, "fallback", "base");
    expect_lane_str(j, "release-1", NULL, "env", "ppe");
    expect_lane_str(j, "release-1", NULL, "fallback", "none");
    expect_lane_str(j, "release-2", NULL, "fallback", "none");
    const struct {
        const char *lane;
        json_int_t in, delivered, unrouted;
        const char *billing, *audit; /* modes */
        json_int_t bd, ad, bu, au;   /* delivered, unrouted per rule */
    } L[] = {
        {"", 40, 60, 0, "base", "base", 40, 20, 0, 0},
        {"feature-x", 30, 45, 0, "override", "fallback", 30, 15, 0, 0},
        {"feature-y", 20, 30, 0, "fallback", "fallback", 20, 10, 0, 0},
        {"release-1", 20, 0, 40, "unrouted", "unrouted", 0, 0, 20, 20},
        {"release-2", 20, 10, 20, "unrouted", "override", 0, 10, 20, 0},
    };
    for (size_t i = 0; i < sizeof L / sizeof *L; i++) {
        expect_lane_int(j, L[i].lane, NULL, "events_in", L[i].in);
        expect_lane_int(j, L[i].lane, NULL, "delivered", L[i].delivered);
        expect_lane_int(j, L[i].lane, NULL, "unrouted", L[i].unrouted);
        expect_lane_str(j, L[i].lane, "billing", "mode", L[i].billing);
        expect_lane_str(j, L[i].lane, "audit", "mode", L[i].audit);
        expect_lane_int(j, L[i].lane, "billing", "delivered", L[i].bd);
        expect_lane_int(j, L[i].lane, "audit", "delivered", L[i].ad);
        expect_lane_int(j, L[i].lane, "billing", "unrouted", L[i].bu);
        expect_lane_int(j, L[i].lane, "audit", "unrouted", L[i].au);
        expect_lane_int(j, L[i].lane, "billing", "failed", 0);
        expect_lane_int(j, L[i].lane, "audit", "dead_lettered", 0);
        char name[128];
        snprintf(name, sizeof name, "sluice_lane_events_in_total{lane=\"%s\"}", L[i].lane);
        expect_metric(s, name, (double)L[i].in);
    }
    json_decref(j);
    /* GET /v1/rules lists the lane runs of each rule too, and its counts
     * are those of all its runs: 40 base + 30 feature-x + 20 feature-y. */
    json_t *rule = it_rule(s, "billing");
    if (json_array_size(json_object_get(rule, "lanes")) != 4)
        it_fail_rule(rule, "billing lists %zu lane runs, want its 4 lanes",
                     json_array_size(json_object_get(rule, "lanes")));
    if (it_rule_int(rule, "delivered") != 90 || it_rule_int(rule, "read") != 130 ||
        it_rule_int(rule, "lag") != 0)
        it_fail_rule(rule, "billing: want delivered 90 and read 130 (all lanes), lag 0");
    json_decref(rule);

    expect_metric(s, "sluice_lane_unrouted_total{rule=\"billing\",lane=\"release-1\"}", 20);
    expect_metric(s, "sluice_lane_unrouted_total{rule=\"audit\",lane=\"release-1\"}", 20);
    expect_metric(s, "sluice_lane_unrouted_total{rule=\"billing\",lane=\"release-2\"}", 20);
    expect_metric(s, "sluice_rule_delivered_total{rule=\"billing\"}", 40);
    expect_metric(s, "sluice_rule_delivered_total{rule=\"billing\",lane=\"feature-x\"}", 30);
    expect_metric(s, "sluice_rule_delivered_total{rule=\"billing\",lane=\"feature-y\"}", 20);
    expect_metric(s, "sluice_rule_delivered_total{rule=\"audit\",lane=\"release-2\"}", 10);
    for (int i = 0; i < RX_N; i++) {
        tally_free(&t[i]);
        json_decref(want[i]);
    }
    json_decref(sent);
    s->passed = true;
}

/* ---- b) lane sources ------------------------------------------------------------ */

/* POSTs body (NDJSON) with hdrs; returns the answer parsed after asserting
 * accepted/failed. */
static json_t *post_expect(it_server *s, const char *const *hdrs, const char *body, size_t acc,
                           size_t failed)
{
    it_resp r = it_post(s, "orders", IT_CT_NDJSON, hdrs, body, SIZE_MAX);
    json_t *a = it_expect_results(&r, acc, failed);
    it_resp_free(&r);
    return a;
}

/* Asserts entry i of a publish answer failed with code. */
static void expect_entry_error(json_t *a, size_t i, const char *code)
{
    const char *got = json_string_value(json_object_get(it_result(a, i), "error"));
    if (!got || strcmp(got, code)) {
        char *d = json_dumps(a, JSON_COMPACT);
        fail_msg("entry %zu: error %s, want %s: %s", i, got ? got : "(none)", code, d);
    }
}

/* The lanes of every event of set orders (2 partitions) read with lane
 * (NULL: the default): id -> lane. Follows next_offset to the end. */
static json_t *read_lane(it_server *s, const char *lane)
{
    json_t *o = json_object();
    for (int p = 0; p < 2; p++) {
        it_resp sr = it_get(s, "/v1/sets/orders");
        json_t *sj = it_parse_json(&sr);
        it_resp_free(&sr);
        json_int_t end = json_integer_value(json_object_get(
            json_array_get(json_object_get(sj, "partition_info"), (size_t)p), "end_offset"));
        json_decref(sj);
        int64_t off = 0;
        for (int page = 0; off < end && page < 1000; page++) {
            char q[128];
            snprintf(q, sizeof q, "offset=%lld&max=7%s%s", (long long)off, lane ? "&lane=" : "",
                     lane ? lane : "");
            it_evs e = it_read_events(s, "orders", p, q);
            for (size_t i = 0; i < e.n; i++)
                json_object_set_new(o, e.v[i].id, json_string(e.v[i].lane));
            if (e.next <= off)
                fail_msg("reading partition %d at %lld: next_offset %lld does not move", p,
                         (long long)off, (long long)e.next);
            off = e.next;
            it_evs_free(&e);
        }
    }
    return o;
}

/* Lane of event id as stored ("" base); fails when it is not stored. */
static const char *stored_lane(json_t *all, const char *id)
{
    const char *l = json_string_value(json_object_get(all, id));
    if (!l)
        fail_msg("event %s is not stored", id);
    return l;
}

static void expect_stored(json_t *all, const char *id, const char *lane)
{
    const char *got = stored_lane(all, id);
    if (strcmp(got, lane))
        fail_msg("event %s is stored in lane \"%s\", want \"%s\"", id, got, lane);
}

/* X-Sluice-Lane, the lane member of baggage, the lane attribute; conflicts
 * refused per entry (attribute vs header) or whole (header vs baggage);
 * undeclared and invalid lanes refused; what was accepted is routed by the
 * lane it was stored with. */
static void test_sources(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "set \"orders\" { partitions = 2 }\n"
                    "lane \"feature-x\" { env = \"boe\" }\n"
                    "lane \"feature-y\" { env = \"boe\" }\n"
                    "rule \"billing\" {\n"
                    "  set = \"orders\",\n"
                    "  target = target.http { url = \"%s\" },\n"
                    "  lanes = { [\"feature-x\"] = { target = target.http { url = \"%s\" } } },\n"
                    "}\n",
                    url(RX_BASE), url(RX_LANE));
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    json_t *a;

    /* 1. X-Sluice-Lane. */
    add_ev(&b, "h-1", "order", NULL);
    add_ev(&b, "h-2", "order", NULL);
    add_ev(&b, "h-3", "order", "feature-x"); /* the same lane twice is no conflict */
    sl_buf_append(&b, "", 1);
    const char *hx[] = {"X-Sluice-Lane: feature-x", NULL};
    json_decref(post_expect(s, hx, (const char *)b.data, 3, 0));
    b.len = 0;
    /* 2. The lane member of a W3C baggage header, among others. */
    add_ev(&b, "g-1", "order", NULL);
    add_ev(&b, "g-2", "order", NULL);
    sl_buf_append(&b, "", 1);
    const char *hb[] = {"baggage: userid=alice,lane=feature-x;ttl=1, region=eu", NULL};
    json_decref(post_expect(s, hb, (const char *)b.data, 2, 0));
    b.len = 0;
    /* 3. The lane attribute alone; feature-y falls back to base. */
    add_ev(&b, "a-1", "order", "feature-x");
    add_ev(&b, "a-2", "order", "feature-y");
    add_ev(&b, "a-3", "order", NULL);
    sl_buf_append(&b, "", 1);
    json_decref(post_expect(s, NULL, (const char *)b.data, 3, 0));
    b.len = 0;
    /* 4. Header and baggage naming the same lane agree. */
    add_ev(&b, "hg-1", "order", NULL);
    sl_buf_append(&b, "", 1);
    const char *hxb[] = {"X-Sluice-Lane: feature-x", "baggage: lane=feature-x", NULL};
    json_decref(post_expect(s, hxb, (const char *)b.data, 1, 0));
    b.len = 0;
    /* 5. Attribute against header: that entry alone is refused (the
     * others take the header's lane or agree with it). */
    add_ev(&b, "c-1", "order", NULL);
    add_ev(&b, "c-2", "order", "feature-y");
    add_ev(&b, "c-3", "order", "feature-x");
    sl_buf_append(&b, "", 1);
    a = post_expect(s, hx, (const char *)b.data, 2, 1);
    expect_entry_error(a, 1, "LaneConflict");
    json_decref(a);
    b.len = 0;
    /* 6. Header against baggage: the whole request is refused. */
    add_ev(&b, "x-1", "order", NULL);
    sl_buf_append(&b, "", 1);
    const char *hconf[] = {"X-Sluice-Lane: feature-x", "baggage: lane=feature-y", NULL};
    it_resp r = it_post(s, "orders", IT_CT_NDJSON, hconf, (const char *)b.data, SIZE_MAX);
    it_expect_error(&r, 400, "LaneConflict");
    it_resp_free(&r);
    b.len = 0;
    /* 7. An undeclared lane, as attribute or header, refused per entry. */
    add_ev(&b, "u-1", "order", "nope");
    add_ev(&b, "u-2", "order", NULL);
    sl_buf_append(&b, "", 1);
    a = post_expect(s, NULL, (const char *)b.data, 1, 1);
    expect_entry_error(a, 0, "UnknownLane");
    json_decref(a);
    b.len = 0;
    add_ev(&b, "u-3", "order", NULL);
    sl_buf_append(&b, "", 1);
    const char *hn[] = {"X-Sluice-Lane: nope", NULL};
    a = post_expect(s, hn, (const char *)b.data, 0, 1);
    expect_entry_error(a, 0, "UnknownLane");
    json_decref(a);
    /* 8. An invalid lane name in the header: 400 InvalidLane. */
    const char *hbad[] = {"X-Sluice-Lane: Not_A_Lane", NULL};
    r = it_post(s, "orders", IT_CT_NDJSON, hbad, (const char *)b.data, SIZE_MAX);
    it_expect_error(&r, 400, "InvalidLane");
    it_resp_free(&r);
    sl_buf_free(&b);

    /* What was stored, in which lane, and where it went. */
    json_t *all = read_lane(s, "*");
    const char *fx[] = {"h-1", "h-2", "h-3", "g-1", "g-2", "a-1", "hg-1", "c-1", "c-3"};
    const char *fy[] = {"a-2"}, *base[] = {"a-3", "u-2"};
    const char *refused[] = {"c-2", "x-1", "u-1", "u-3"};
    json_t *want[RX_N] = {json_object(), json_object(), NULL, NULL};
    for (size_t i = 0; i < sizeof fx / sizeof *fx; i++) {
        expect_stored(all, fx[i], "feature-x");
        json_object_set_new(want[RX_LANE], fx[i], json_string("feature-x"));
    }
    for (size_t i = 0; i < sizeof fy / sizeof *fy; i++) {
        expect_stored(all, fy[i], "feature-y");
        json_object_set_new(want[RX_BASE], fy[i], json_string("feature-y"));
    }
    for (size_t i = 0; i < sizeof base / sizeof *base; i++) {
        expect_stored(all, base[i], "");
        json_object_set_new(want[RX_BASE], base[i], json_string(""));
    }
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (json_object_get(all, refused[i]))
            fail_msg("refused event %s is stored", refused[i]);
    if (json_object_size(all) != 12)
        fail_msg("the set holds %zu events, want 12", json_object_size(all));
    json_decref(all);
    tally t[RX_N] = {0};
    tally_init(&t[RX_BASE], g_rx[RX_BASE]);
    tally_init(&t[RX_LANE], g_rx[RX_LANE]);
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    it_sleep_ms(300);
    expect_exact(&t[RX_BASE], "base", want[RX_BASE]);
    expect_exact(&t[RX_LANE], "feature-x", want[RX_LANE]);
    tally_free(&t[RX_BASE]);
    tally_free(&t[RX_LANE]);
    json_decref(want[RX_BASE]);
    json_decref(want[RX_LANE]);
    s->passed = true;
}

/* ---- b') lanes.auto ---------------------------------------------------------------- */

/* With lanes.auto an undeclared lane is accepted and registered as a boe
 * lane falling back to base; it is still there, and still routed, after a
 * restart, and nothing is delivered twice. */
static void test_auto(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"orders\" { partitions = 2 }\n"
                    "lane \"release-1\" { env = \"ppe\" }\n"
                    "rule \"billing\" {\n"
                    "  set = \"orders\",\n"
                    "  target = target.http { url = \"%s\" },\n"
                    "}\n",
                    url(RX_BASE));
    it_start_config(s, cfg, WAIT_S);
    json_t *want[RX_N] = {json_object(), NULL, NULL, NULL};
    post_lane(s, "b", 0, 5, "", want[RX_BASE]);
    post_lane(s, "auto", 0, 6, "auto-a", want[RX_BASE]);
    post_lane(s, "r1", 0, 4, "release-1", NULL); /* declared ppe: unrouted still */
    tally t[RX_N] = {0};
    tally_init(&t[RX_BASE], g_rx[RX_BASE]);
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    json_t *j = lanes_get(s);
    if (!json_is_true(json_object_get(j, "auto")))
        fail_msg("GET /v1/lanes: \"auto\" is not true with lanes.auto = true");
    json_t *l = lane_of(j, "auto-a");
    if (!l || !json_is_true(json_object_get(l, "auto")) ||
        json_is_true(json_object_get(l, "declared")) || json_is_true(json_object_get(l, "dropped")))
        fail_msg("auto-a is not listed as an auto lane: %s",
                 l ? json_dumps(l, JSON_COMPACT) : "(absent)");
    expect_lane_str(j, "auto-a", NULL, "env", "boe");
    expect_lane_str(j, "auto-a", NULL, "fallback", "base");
    expect_lane_str(j, "auto-a", "billing", "mode", "fallback");
    expect_lane_int(j, "auto-a", NULL, "events_in", 6);
    expect_lane_int(j, "auto-a", NULL, "delivered", 6);
    expect_lane_int(j, "release-1", NULL, "unrouted", 4);
    json_decref(j);

    if (it_srv_stop(s, SIGTERM, 10) != 0)
        fail_msg("sluice serve did not stop cleanly on SIGTERM");
    it_restart(s, WAIT_S);
    j = lanes_get(s);
    l = lane_of(j, "auto-a");
    if (!l || !json_is_true(json_object_get(l, "auto")))
        fail_msg("after a restart auto-a is not listed as an auto lane: %s",
                 json_dumps(j, JSON_COMPACT));
    json_decref(j);
    /* Now by attribute; and the cursors of auto-a came back where they were. */
    sl_buf b = SL_BUF_INIT;
    char id[32];
    for (int i = 6; i < 10; i++) {
        snprintf(id, sizeof id, "auto-%d", i);
        add_ev(&b, id, "order", "auto-a");
        json_object_set_new(want[RX_BASE], id, json_string("auto-a"));
    }
    sl_buf_append(&b, "", 1);
    json_decref(post_expect(s, NULL, (const char *)b.data, 4, 0));
    sl_buf_free(&b);
    post_lane(s, "b", 5, 3, "", want[RX_BASE]);
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    it_sleep_ms(300);
    expect_exact(&t[RX_BASE], "base", want[RX_BASE]);
    j = lanes_get(s);
    expect_lane_int(j, "auto-a", NULL, "events_in", 4); /* since the restart */
    expect_lane_str(j, "auto-a", "billing", "mode", "fallback");
    json_decref(j);
    tally_free(&t[RX_BASE]);
    json_decref(want[RX_BASE]);
    s->passed = true;
}

/* ---- c) isolation under failure ------------------------------------------------------ */

/* feature-x's override target answers 500 forever: base events and
 * feature-y's (fallback) keep flowing to the base target meanwhile, GET
 * /v1/lanes shows feature-x behind; once the target is back, feature-x
 * catches up with nothing lost or doubled. */
static void test_isolation(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "set \"orders\" { partitions = 2 }\n"
                    "lane \"feature-x\" { env = \"boe\" }\n"
                    "lane \"feature-y\" { env = \"boe\" }\n"
                    "rule \"billing\" {\n"
                    "  set = \"orders\",\n"
                    "  target = target.http { url = \"%s\" },\n" RETRY
                    "  lanes = { [\"feature-x\"] = { target = target.http { url = \"%s\" } } },\n"
                    "}\n",
                    url(RX_BASE), url(RX_LANE));
    if (rx_fail(g_rx[RX_LANE], -1, 500, "broken test target", NULL))
        fail_msg("cannot script the receiver");
    it_start_config(s, cfg, WAIT_S);
    json_t *want[RX_N] = {json_object(), json_object(), NULL, NULL};
    post_lane(s, "fx", 0, 20, "feature-x", want[RX_LANE]);
    if (!rx_wait(g_rx[RX_LANE], 2, WAIT_S))
        fail_msg("the feature-x target was never tried");
    tally t[RX_N] = {0};
    tally_init(&t[RX_BASE], g_rx[RX_BASE]);
    tally_init(&t[RX_LANE], g_rx[RX_LANE]);
    for (int k = 0; k < 5; k++) {
        post_lane(s, "b", k * 20, 20, "", want[RX_BASE]);
        post_lane(s, "fy", k * 4, 4, "feature-y", want[RX_BASE]);
        it_sleep_ms(100);
    }
    json_t *only_base[RX_N] = {want[RX_BASE], NULL, NULL, NULL};
    wait_deliveries(t, only_base, WAIT_S);
    /* Every base and feature-y event is in while feature-x still fails. */
    tally_update(&t[RX_BASE]);
    if (tally_have(&t[RX_BASE], want[RX_BASE]) != json_object_size(want[RX_BASE]))
        fail_msg("the base target got %zu of %zu events while feature-x's target failed",
                 tally_have(&t[RX_BASE], want[RX_BASE]), json_object_size(want[RX_BASE]));
    tally_update(&t[RX_LANE]);
    if (json_object_size(t[RX_LANE].n) || t[RX_LANE].failed < 2)
        fail_msg("feature-x's target: %zu accepted, %zu refused; want 0 accepted",
                 json_object_size(t[RX_LANE].n), t[RX_LANE].failed);
    json_t *j = lanes_get(s);
    json_t *fr = lane_rule(j, "feature-x", "billing");
    json_int_t behind = jint(j, fr, "lag", "feature-x") + jint(j, fr, "retrying", "feature-x");
    if (behind <= 0 || jint(j, fr, "delivered", "feature-x") != 0)
        fail_msg("feature-x's run of billing is not shown behind: %s",
                 json_dumps(fr, JSON_COMPACT));
    const char *le = json_string_value(json_object_get(fr, "last_error"));
    if (!le || !strstr(le, "500"))
        fail_msg("feature-x's last_error does not name the 500: %s", json_dumps(fr, JSON_COMPACT));
    expect_lane_int(j, "", "billing", "lag", 0);
    expect_lane_int(j, "", "billing", "retrying", 0);
    expect_lane_int(j, "", "billing", "delivered", 100);
    expect_lane_int(j, "feature-y", "billing", "delivered", 20);
    json_decref(j);
    /* GET /v1/rules: the base partitions are caught up (lag 0); the counts
     * add up the lanes: 100 base + 20 feature-y delivered, none of
     * feature-x's. */
    json_t *rule = it_rule(s, "billing");
    if (it_rule_int(rule, "lag") != 0 || it_rule_int(rule, "delivered") != 120)
        it_fail_rule(rule, "billing: want lag 0 and delivered 120 while feature-x fails");
    json_decref(rule);

    rx_unscript(g_rx[RX_LANE]); /* the test target is fixed */
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    it_sleep_ms(300);
    expect_exact(&t[RX_BASE], "base", want[RX_BASE]);
    expect_exact(&t[RX_LANE], "feature-x", want[RX_LANE]);
    j = lanes_get(s);
    expect_lane_int(j, "feature-x", "billing", "delivered", 20);
    expect_lane_int(j, "feature-x", "billing", "dead_lettered", 0);
    json_decref(j);
    for (int i = 0; i < 2; i++) {
        tally_free(&t[i]);
        json_decref(want[i]);
    }
    s->passed = true;
}

/* ---- d) sluice lane drop ----------------------------------------------------------- */

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DATA/rules/RULE/SET/lanes/LANE into out (PATH_MAX bytes). */
static void cursor_dir(char *out, const it_server *s, const char *rule, const char *lane)
{
    snprintf(out, PATH_MAX, "%s/rules/%s/orders/lanes/%s", s->data, rule, lane);
}

/* Waits up to secs until the dir is gone; fails the test when it is not. */
static void expect_dir_gone(const char *dir, double secs)
{
    for (double end = it_mono() + secs; is_dir(dir); it_sleep_ms(50))
        if (it_mono() > end)
            fail_msg("%s is still there", dir);
}

/* Runs `sluice lane drop LANE --server URL`; returns its exit status with
 * its output in *out (caller frees). */
static int lane_drop(it_server *s, const char *lane, char **out)
{
    char srv[64];
    snprintf(srv, sizeof srv, "http://127.0.0.1:%d", s->port);
    return it_run(s, NULL, out, NULL,
                  (const char *const[]){"lane", "drop", lane, "--server", srv, NULL}, WAIT_S);
}

/* A lane is dropped or absent in GET /v1/lanes. */
static void expect_lane_gone(it_server *s, const char *lane)
{
    json_t *j = lanes_get(s);
    json_t *l = lane_of(j, lane);
    if (l && !json_is_true(json_object_get(l, "dropped")))
        fail_msg("lane %s is still listed as live after the drop: %s", lane,
                 json_dumps(l, JSON_COMPACT));
    json_decref(j);
}

/* Dropping a declared lane: the CLI says so, its cursors go, its events are
 * refused (LaneDropped), base keeps flowing. Dropping an auto lane: it comes
 * back as a new lane with the next events, and only those are delivered. */
static void test_drop(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], dir[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"orders\" { partitions = 2 }\n"
                    "lane \"feature-x\" { env = \"boe\" }\n"
                    "rule \"billing\" {\n"
                    "  set = \"orders\",\n"
                    "  target = target.http { url = \"%s\" },\n"
                    "  lanes = { [\"feature-x\"] = { target = target.http { url = \"%s\" } } },\n"
                    "}\n",
                    url(RX_BASE), url(RX_LANE));
    it_start_config(s, cfg, WAIT_S);
    json_t *want[RX_N] = {json_object(), json_object(), NULL, NULL};
    post_lane(s, "fx", 0, 6, "feature-x", want[RX_LANE]);
    post_lane(s, "b", 0, 6, "", want[RX_BASE]);
    post_lane(s, "z", 0, 3, "auto-z", want[RX_BASE]);
    tally t[RX_N] = {0};
    tally_init(&t[RX_BASE], g_rx[RX_BASE]);
    tally_init(&t[RX_LANE], g_rx[RX_LANE]);
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    cursor_dir(dir, s, "billing", "feature-x");
    if (!is_dir(dir))
        fail_msg("feature-x's cursors are not in %s", dir);
    char zdir[PATH_MAX];
    cursor_dir(zdir, s, "billing", "auto-z");
    if (!is_dir(zdir))
        fail_msg("auto-z's cursors are not in %s", zdir);

    /* The declared lane. */
    char *out = NULL;
    int rc = lane_drop(s, "feature-x", &out);
    if (rc != 0)
        fail_msg("sluice lane drop feature-x exited %d: %s", rc, out);
    if (!strstr(out, "feature-x"))
        fail_msg("sluice lane drop feature-x does not name the lane: %s", out);
    free(out);
    expect_lane_gone(s, "feature-x");
    expect_dir_gone(dir, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    add_ev(&b, "fx-late-1", "order", NULL);
    add_ev(&b, "fx-late-2", "order", NULL);
    sl_buf_append(&b, "", 1);
    const char *hx[] = {"X-Sluice-Lane: feature-x", NULL};
    json_t *a = post_expect(s, hx, (const char *)b.data, 0, 2);
    expect_entry_error(a, 0, "LaneDropped");
    expect_entry_error(a, 1, "LaneDropped");
    json_decref(a);
    b.len = 0;
    add_ev(&b, "fx-late-3", "order", "feature-x");
    add_ev(&b, "b-late", "order", NULL);
    json_object_set_new(want[RX_BASE], "b-late", json_string(""));
    sl_buf_append(&b, "", 1);
    a = post_expect(s, NULL, (const char *)b.data, 1, 1);
    expect_entry_error(a, 0, "LaneDropped");
    json_decref(a);
    sl_buf_free(&b);
    post_lane(s, "b", 6, 6, "", want[RX_BASE]);

    /* Unknown lanes and the base lane cannot be dropped. */
    rc = lane_drop(s, "nope", &out);
    if (rc == 0)
        fail_msg("sluice lane drop nope exited 0: %s", out);
    free(out);
    it_resp r = {0};
    it_http(NULL, s->port, &(it_call){.method = "DELETE", .path = "/v1/lanes/nope"}, &r);
    it_expect_error(&r, 404, "NoSuchLane");
    it_resp_free(&r);

    /* The auto lane: dropped, its cursors gone, then it comes back new. */
    rc = lane_drop(s, "auto-z", &out);
    if (rc != 0)
        fail_msg("sluice lane drop auto-z exited %d: %s", rc, out);
    free(out);
    expect_lane_gone(s, "auto-z");
    expect_dir_gone(zdir, WAIT_S);
    post_lane(s, "z", 3, 2, "auto-z", want[RX_BASE]);
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    it_sleep_ms(500);
    expect_exact(&t[RX_BASE], "base", want[RX_BASE]); /* z-0..2 once, z-3, z-4 */
    expect_exact(&t[RX_LANE], "feature-x", want[RX_LANE]);
    json_t *j = lanes_get(s);
    json_t *l = lane_of(j, "auto-z");
    if (!l || json_is_true(json_object_get(l, "dropped")) ||
        !json_is_true(json_object_get(l, "auto")))
        fail_msg("auto-z is not back as an auto lane: %s", json_dumps(j, JSON_COMPACT));
    expect_lane_int(j, "auto-z", "billing", "delivered", 2);
    json_decref(j);
    if (!is_dir(zdir))
        fail_msg("auto-z's new cursors are not in %s", zdir);
    /* A dropped declared lane stays dropped across a restart. */
    if (it_srv_stop(s, SIGTERM, 10) != 0)
        fail_msg("sluice serve did not stop cleanly on SIGTERM");
    it_restart(s, WAIT_S);
    expect_lane_gone(s, "feature-x");
    b = (sl_buf)SL_BUF_INIT;
    add_ev(&b, "fx-late-4", "order", NULL);
    sl_buf_append(&b, "", 1);
    a = post_expect(s, hx, (const char *)b.data, 0, 1);
    expect_entry_error(a, 0, "LaneDropped");
    json_decref(a);
    sl_buf_free(&b);
    for (int i = 0; i < 2; i++) {
        tally_free(&t[i]);
        json_decref(want[i]);
    }
    s->passed = true;
}

/* Dropping a lane whose override is failing and retrying: the drop
 * answers at once, the retries stop (the broken target hears nothing
 * more), the cursors go, base keeps flowing, and the server stops cleanly
 * afterwards. */
static void test_drop_busy(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], dir[PATH_MAX];
    it_write_config(s, cfg,
                    "set \"orders\" { partitions = 2 }\n"
                    "lane \"feature-x\" { env = \"boe\" }\n"
                    "rule \"billing\" {\n"
                    "  set = \"orders\",\n"
                    "  target = target.http { url = \"%s\" },\n" RETRY
                    "  lanes = { [\"feature-x\"] = { target = target.http { url = \"%s\" } } },\n"
                    "}\n",
                    url(RX_BASE), url(RX_LANE));
    if (rx_fail(g_rx[RX_LANE], -1, 500, "broken test target", NULL))
        fail_msg("cannot script the receiver");
    it_start_config(s, cfg, WAIT_S);
    json_t *want[RX_N] = {json_object(), NULL, NULL, NULL};
    post_lane(s, "fx", 0, 20, "feature-x", NULL);
    post_lane(s, "b", 0, 10, "", want[RX_BASE]);
    if (!rx_wait(g_rx[RX_LANE], 4, WAIT_S))
        fail_msg("the feature-x target was not retried");
    cursor_dir(dir, s, "billing", "feature-x");
    if (!is_dir(dir))
        fail_msg("feature-x's cursors are not in %s", dir);
    char *out = NULL;
    double t0 = it_mono();
    int rc = lane_drop(s, "feature-x", &out);
    if (rc != 0)
        fail_msg("sluice lane drop feature-x exited %d while its target fails: %s", rc, out);
    free(out);
    if (it_mono() - t0 > 5)
        fail_msg("sluice lane drop took %.1f s while the lane was retrying", it_mono() - t0);
    expect_lane_gone(s, "feature-x");
    expect_dir_gone(dir, WAIT_S);
    it_sleep_ms(300); /* a request already on its way may still arrive */
    size_t tries = rx_count(g_rx[RX_LANE]);
    it_sleep_ms(1500); /* several back-offs (at most 200 ms each) */
    if (rx_count(g_rx[RX_LANE]) != tries)
        fail_msg("feature-x's target got %zu more requests after the drop",
                 rx_count(g_rx[RX_LANE]) - tries);
    post_lane(s, "b", 10, 10, "", want[RX_BASE]);
    tally t[RX_N] = {0};
    tally_init(&t[RX_BASE], g_rx[RX_BASE]);
    wait_deliveries(t, want, WAIT_S);
    wait_lanes_idle(s, WAIT_S);
    expect_exact(&t[RX_BASE], "base", want[RX_BASE]);
    json_t *rule = it_rule(s, "billing");
    if (it_rule_int(rule, "retrying") != 0)
        it_fail_rule(rule, "billing still counts retries of the dropped lane");
    json_decref(rule);
    if (it_srv_stop(s, SIGTERM, 10) != 0)
        fail_msg("sluice serve did not stop cleanly after the drop");
    tally_free(&t[RX_BASE]);
    json_decref(want[RX_BASE]);
    s->passed = true;
}

/* ---- e) readers -------------------------------------------------------------------- */

/* The ids of `sluice tail orders --from beginning [--lane L]` as id -> lane. */
static json_t *tail_ids(it_server *s, const char *lane)
{
    char srv[64];
    snprintf(srv, sizeof srv, "http://127.0.0.1:%d", s->port);
    char *out = NULL, *err = NULL;
    const char *args[] = {
        "tail", "orders", "--from", "beginning", "--server", srv, lane ? "--lane" : NULL,
        lane,   NULL};
    int rc = it_run(s, NULL, &out, &err, args, WAIT_S);
    if (rc != 0)
        fail_msg("sluice tail --lane %s exited %d: %s%s", lane ? lane : "(none)", rc, out, err);
    json_t *o = json_object();
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *ev = json_loads(line, 0, NULL);
        const char *id = json_string_value(json_object_get(ev, "id"));
        if (!id)
            fail_msg("sluice tail printed a line that is not an event: %s", line);
        const char *l = json_string_value(json_object_get(ev, "lane"));
        json_object_set_new(o, id, json_string(l ? l : ""));
        json_decref(ev);
    }
    free(out);
    free(err);
    return o;
}

/* Asserts that got (id -> lane) is exactly the ids of sent in lane (NULL:
 * every lane), each with its lane. */
static void expect_view(const char *what, json_t *got, json_t *sent, const char *lane)
{
    json_t *want = json_object();
    const char *id;
    json_t *v;
    json_object_foreach(sent, id, v)
    {
        if (!lane || strcmp(json_string_value(v), lane) == 0)
            json_object_set(want, id, v);
    }
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS),
             *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        fail_msg("%s: got %s, want %s", what, g, w);
    }
    json_decref(want);
}

/* GET …/events and `sluice tail` serve the base lane by default, one lane
 * with lane=L / --lane L, and every lane with *. */
static void test_readers(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "set \"orders\" { partitions = 2 }\n"
                    "lane \"feature-x\" { env = \"boe\" }\n"
                    "lane \"feature-y\" { env = \"boe\" }\n");
    it_start_config(s, cfg, WAIT_S);
    json_t *sent = json_object();
    /* Interleaved, so lane reads must skip over the others' events. */
    for (int k = 0; k < 4; k++) {
        post_lane(s, "b", k * 5, 5, "", sent);
        post_lane(s, "fx", k * 3, 3, "feature-x", sent);
        post_lane(s, "fy", k * 2, 2, "feature-y", sent);
    }
    json_t *g = read_lane(s, NULL);
    expect_view("GET events (default lane)", g, sent, "");
    json_decref(g);
    g = read_lane(s, "feature-x");
    expect_view("GET events?lane=feature-x", g, sent, "feature-x");
    json_decref(g);
    g = read_lane(s, "feature-y");
    expect_view("GET events?lane=feature-y", g, sent, "feature-y");
    json_decref(g);
    g = read_lane(s, "*");
    expect_view("GET events?lane=*", g, sent, NULL);
    json_decref(g);
    /* from=beginning without an offset, one page holding everything. */
    for (int p = 0; p < 2; p++) {
        it_evs e = it_read_events(s, "orders", p, "from=beginning&max=1000&lane=feature-x");
        for (size_t i = 0; i < e.n; i++)
            if (strcmp(e.v[i].lane, "feature-x"))
                fail_msg("?from=beginning&lane=feature-x served %s of lane \"%s\"", e.v[i].id,
                         e.v[i].lane);
        it_evs_free(&e);
        e = it_read_events(s, "orders", p, "from=beginning&max=1000");
        for (size_t i = 0; i < e.n; i++)
            if (e.v[i].lane[0])
                fail_msg("?from=beginning served %s of lane \"%s\"", e.v[i].id, e.v[i].lane);
        it_evs_free(&e);
    }
    /* A lane nobody declared reads as empty, not as base. */
    g = read_lane(s, "nope");
    if (json_object_size(g))
        fail_msg("GET events?lane=nope served %zu events", json_object_size(g));
    json_decref(g);
    g = tail_ids(s, NULL);
    expect_view("sluice tail orders", g, sent, "");
    json_decref(g);
    g = tail_ids(s, "feature-x");
    expect_view("sluice tail orders --lane feature-x", g, sent, "feature-x");
    json_decref(g);
    g = tail_ids(s, "*");
    expect_view("sluice tail orders --lane *", g, sent, NULL);
    json_decref(g);
    json_decref(sent);
    s->passed = true;
}

/* ---- f) the mixed-lane soak ------------------------------------------------------------ */

/* Lanes of the soak; the index is the lane's code in producers. */
static const char *const g_soak_lane[] = {"", "", "feature-x", "feature-y", "release-1"};
#define SOAK_LANES (sizeof g_soak_lane / sizeof *g_soak_lane)

typedef struct soak {
    int port;           /* the server */
    double until;       /* producers stop then (it_mono()) */
    atomic_bool stop;   /* a producer failed: everyone stops */
    pthread_mutex_t mu; /* guards sent and err */
    json_t *sent;       /* id -> lane, every event the bus accepted */
    char err[512];      /* the first producer failure */
    char dir[PATH_MAX]; /* the test's temp dir */
    char boot[512];     /* Kafka bootstrap */
    atomic_long n_http, n_kafka, n_agent;
} soak;

/* Records a producer failure (never asserts: called from threads). */
static void soak_fail(soak *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void soak_fail(soak *k, const char *fmt, ...)
{
    pthread_mutex_lock(&k->mu);
    if (!k->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k->err, sizeof k->err, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&k->mu);
    atomic_store(&k->stop, true);
}

static bool soak_going(soak *k)
{
    return !atomic_load(&k->stop) && it_mono() < k->until;
}

/* Moves the ids of local (id -> lane) into k->sent and empties local. */
static void soak_commit(soak *k, json_t *local)
{
    pthread_mutex_lock(&k->mu);
    json_object_update(k->sent, local);
    pthread_mutex_unlock(&k->mu);
    json_object_clear(local);
}

typedef struct http_arg {
    soak *k;
    int t; /* thread number */
} http_arg;

/* One HTTP producer: batches of 20 events of one lane, named by the
 * X-Sluice-Lane header, by baggage, or by each event's lane attribute in
 * turn; 503s are retried with the same body. */
static void *http_thread(void *p)
{
    http_arg *a = p;
    soak *k = a->k;
    CURL *c = curl_easy_init();
    json_t *local = json_object();
    sl_buf b = SL_BUF_INIT;
    char id[64], hdr[96];
    for (long seq = 0, n = 0; c && soak_going(k); seq++) {
        const char *lane = g_soak_lane[(seq + a->t) % SOAK_LANES];
        int how = (int)((seq / SOAK_LANES) % 3); /* 0 header, 1 baggage, 2 attribute */
        b.len = 0;
        for (int i = 0; i < 20; i++, n++) {
            snprintf(id, sizeof id, "h%d-%ld", a->t, n);
            add_ev(&b, id, "order", *lane && how == 2 ? lane : NULL);
            json_object_set_new(local, id, json_string(lane));
        }
        hdr[0] = '\0';
        if (*lane && how == 0)
            snprintf(hdr, sizeof hdr, "X-Sluice-Lane: %s", lane);
        else if (*lane && how == 1)
            snprintf(hdr, sizeof hdr, "baggage: lane=%s", lane);
        const char *hdrs[] = {hdr, NULL};
        it_call call = {.path = "/v1/sets/orders/events",
                        .ctype = IT_CT_NDJSON,
                        .hdrs = hdr[0] ? hdrs : NULL,
                        .body = b.data,
                        .len = b.len};
        for (int tries = 0;; tries++) {
            it_resp r;
            int rc = it_http(c, k->port, &call, &r);
            json_t *j = rc == 0 && r.status == 200 ? json_loads(it_body(&r), 0, NULL) : NULL;
            bool ok = json_integer_value(json_object_get(j, "accepted")) == 20;
            bool again = rc == 0 && r.status == 503 && tries < 100;
            if (!ok && !again)
                soak_fail(k, "HTTP producer %d: answer %ld: %.300s %s", a->t, r.status, it_body(&r),
                          r.err);
            json_decref(j);
            it_resp_free(&r);
            if (!again || ok)
                break;
            it_sleep_ms(50);
        }
        if (atomic_load(&k->stop))
            break;
        atomic_fetch_add(&k->n_http, 20);
        soak_commit(k, local);
        it_sleep_ms(25);
    }
    if (!c)
        soak_fail(k, "curl_easy_init failed");
    curl_easy_cleanup(c);
    sl_buf_free(&b);
    json_decref(local);
    return NULL;
}

/* Kafka in: every 200 ms, 10 records per lane to topic lin with kcat, a
 * `lane` record header on the lane ones. */
static void *kafka_thread(void *p)
{
    soak *k = p;
    json_t *local = json_object();
    char path[PATH_MAX + 32], cmd[2 * PATH_MAX + 256], id[64];
    long n = 0;
    while (soak_going(k)) {
        for (size_t l = 1; l < SOAK_LANES && soak_going(k); l++) {
            const char *lane = g_soak_lane[l];
            snprintf(path, sizeof path, "%s/kafka-%zu.ndjson", k->dir, l);
            FILE *f = fopen(path, "w");
            if (!f) {
                soak_fail(k, "cannot write %s", path);
                break;
            }
            sl_buf b = SL_BUF_INIT;
            for (int i = 0; i < 10; i++, n++) {
                snprintf(id, sizeof id, "k-%ld", n);
                add_ev(&b, id, "order", NULL);
                json_object_set_new(local, id, json_string(lane));
            }
            fwrite(b.data, 1, b.len, f);
            fclose(f);
            sl_buf_free(&b);
            char h[64] = "";
            if (*lane)
                snprintf(h, sizeof h, "-H 'lane=%s'", lane);
            snprintf(cmd, sizeof cmd, "timeout 30 kcat -P -q -b '%s' -t lin %s -l '%s'", k->boot, h,
                     path);
            int st = system(cmd);
            if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                soak_fail(k, "kcat failed (%d): %s", st, cmd);
                break;
            }
            atomic_fetch_add(&k->n_kafka, 10);
            soak_commit(k, local);
        }
        it_sleep_ms(200);
    }
    json_decref(local);
    return NULL;
}

/* One Databus agent and the thread writing to it. */
typedef struct agent_arg {
    soak *k;
    int idx;             /* 0 or 1: its g_agent slot, "a0-", "a1-" ids */
    const char *lane;    /* its --lane, NULL for none */
    char sock[PATH_MAX]; /* its socket */
} agent_arg;

/* Writes to an agent: lines of 20 events. Without --lane, the lanes in
 * turn, each as the line's "lane" member; with --lane L, every line
 * without a lane member except one in four, which names L again. One
 * answer line per line, in order. */
static void *agent_thread(void *p)
{
    agent_arg *ag = p;
    soak *k = ag->k;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", ag->sock);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        soak_fail(k, "cannot connect to the agent at %s: %s", ag->sock, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    FILE *in = fdopen(dup(fd), "r");
    json_t *local = json_object();
    sl_buf b = SL_BUF_INIT;
    char id[64], line[1024];
    long n = 0;
    for (long seq = 0; in && soak_going(k); seq++) {
        b.len = 0;
        for (int i = 0; i < 20; i++, n++) {
            const char *lane = ag->lane ? ag->lane : g_soak_lane[(size_t)(n % (long)SOAK_LANES)];
            snprintf(id, sizeof id, "a%d-%ld", ag->idx, n);
            sl_buf_printf(&b, "{\"set\":\"orders\"");
            if (*lane && (!ag->lane || n % 4 == 0))
                sl_buf_printf(&b, ",\"lane\":\"%s\"", lane);
            sl_buf_printf(&b, ",\"event\":");
            add_ev(&b, id, "order", NULL); /* ends with "\n": close the object before it */
            b.len--;
            sl_buf_printf(&b, "}\n");
            json_object_set_new(local, id, json_string(lane));
        }
        size_t off = 0;
        while (off < b.len) {
            ssize_t w = write(fd, b.data + off, b.len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                soak_fail(k, "writing to the agent: %s", strerror(errno));
                goto out;
            }
            off += (size_t)w;
        }
        for (int i = 0; i < 20; i++) {
            if (!fgets(line, sizeof line, in)) {
                soak_fail(k, "the agent closed the connection after %ld lines", n - 20 + i);
                goto out;
            }
            json_t *j = json_loads(line, 0, NULL);
            bool ok = json_is_true(json_object_get(j, "ok"));
            json_decref(j);
            if (!ok) {
                soak_fail(k, "the agent refused line %ld: %s", n - 20 + i, line);
                goto out;
            }
        }
        atomic_fetch_add(&k->n_agent, 20);
        soak_commit(k, local);
        it_sleep_ms(25);
    }
out:
    if (in)
        fclose(in);
    close(fd);
    sl_buf_free(&b);
    json_decref(local);
    return NULL;
}

/* Whether this build has the agent (says why not). */
static bool have_agent(it_server *s)
{
    char *out = NULL;
    int rc = it_run(s, NULL, &out, NULL, (const char *const[]){"databus", "--help", NULL}, 10);
    free(out);
    if (rc != 0)
        fprintf(stderr, "test_soak: `sluice databus --help` exited %d: soak without the agent\n",
                rc);
    return rc == 0;
}

/* Starts `sluice databus` (with --lane when ag->lane) on DIR/agent-N.sock,
 * forwarding to the server; fails the test when it does not listen. */
static void start_agent(it_server *s, agent_arg *ag)
{
    char listen[PATH_MAX + 8], up[64], spool[PATH_MAX], log[PATH_MAX], name[32];
    snprintf(name, sizeof name, "agent-%d.sock", ag->idx);
    it_path(ag->sock, s, name);
    snprintf(name, sizeof name, "agent-%d-spool", ag->idx);
    it_path(spool, s, name);
    snprintf(name, sizeof name, "agent-%d.log", ag->idx);
    it_path(log, s, name);
    snprintf(listen, sizeof listen, "unix:%s", ag->sock);
    snprintf(up, sizeof up, "http://127.0.0.1:%d", s->port);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0)
            _exit(126);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (ag->lane)
            execl(it_bin(), it_bin(), "databus", "--listen", listen, "--upstream", up, "--spool",
                  spool, "--lane", ag->lane, (char *)NULL);
        else
            execl(it_bin(), it_bin(), "databus", "--listen", listen, "--upstream", up, "--spool",
                  spool, (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    g_agent[ag->idx] = pid;
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(20)) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", ag->sock);
        bool up_now = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (fd >= 0)
            close(fd);
        if (up_now)
            return;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            g_agent[ag->idx] = 0;
            break;
        }
    }
    FILE *f = fopen(log, "r");
    char buf[2048] = "";
    if (f) {
        size_t r = fread(buf, 1, sizeof buf - 1, f);
        buf[r] = '\0';
        fclose(f);
    }
    fail_msg("the agent did not listen on %s: %s", ag->sock, buf);
}

/* Base, feature-x (boe, override of billing), feature-y (boe, no override)
 * and release-1 (ppe, an override of audit only) through HTTP (three
 * threads, the lane by header, baggage or attribute), Kafka in (records
 * with `lane` headers) and two Databus agents (one stamping each line's
 * lane, one started with --lane feature-y) at once, for 10 s (60 s with
 * SLUICE_SOAK): the exact routing table at the end, nothing lost, nothing
 * leaked, nothing twice, and GET /v1/lanes counts what was sent. */
static void test_soak(void **state)
{
    it_server *s = *state;
    it_kmock_start(&g_mk, (const char *const[]){"--brokers", "1", "--topic", "lin:2", NULL});
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "set \"orders\" { partitions = 4 }\n"
        "lane \"feature-x\" { env = \"boe\" }\n"
        "lane \"feature-y\" { env = \"boe\" }\n"
        "lane \"release-1\" { env = \"ppe\" }\n"
        "rule \"billing\" {\n"
        "  set = \"orders\",\n"
        "  target = target.http { url = \"%s\", batch = 10 },\n" RETRY
        "  lanes = { [\"feature-x\"] = { target = target.http { url = \"%s\", batch = 10 } } },\n"
        "}\n"
        "rule \"audit\" {\n"
        "  set = \"orders\",\n"
        "  target = target.http { url = \"%s\", batch = 10 },\n" RETRY
        "  lanes = { [\"release-1\"] = { target = target.http { url = \"%s\", batch = 10 } } },\n"
        "}\n"
        "source.kafka { name = \"kin\", brokers = \"%s\", topics = { \"lin\" }, set = \"orders\",\n"
        "  start = \"beginning\" }\n",
        url(RX_BASE), url(RX_LANE), url(RX_AUDIT), url(RX_PPE), g_mk.boot);
    it_start_config(s, cfg, WAIT_S);

    static soak k; /* big: not on the stack */
    memset(&k, 0, sizeof k);
    pthread_mutex_init(&k.mu, NULL);
    k.port = s->port;
    k.sent = json_object();
    snprintf(k.dir, sizeof k.dir, "%s", s->dir);
    snprintf(k.boot, sizeof k.boot, "%s", g_mk.boot);
    bool agent = have_agent(s);
    agent_arg ag[2] = {{.k = &k, .idx = 0}, {.k = &k, .idx = 1, .lane = "feature-y"}};
    for (int i = 0; agent && i < 2; i++)
        start_agent(s, &ag[i]);
    double secs = it_soak() ? 60 : 10;
    k.until = it_mono() + secs;
    enum { HTTP_THREADS = 3 };
    pthread_t th[HTTP_THREADS + 3];
    http_arg ha[HTTP_THREADS];
    int nth = 0;
    for (int i = 0; i < HTTP_THREADS; i++) {
        ha[i] = (http_arg){.k = &k, .t = i};
        if (pthread_create(&th[nth++], NULL, http_thread, &ha[i]))
            fail_msg("pthread_create failed");
    }
    if (pthread_create(&th[nth++], NULL, kafka_thread, &k))
        fail_msg("pthread_create failed");
    for (int i = 0; agent && i < 2; i++)
        if (pthread_create(&th[nth++], NULL, agent_thread, &ag[i]))
            fail_msg("pthread_create failed");
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (k.err[0])
        fail_msg("a producer failed: %s", k.err);
    fprintf(stderr, "test_soak: %.0f s: %ld events by HTTP, %ld by Kafka, %ld by the agent%s\n",
            secs, atomic_load(&k.n_http), atomic_load(&k.n_kafka), atomic_load(&k.n_agent),
            agent ? "" : " (no agent)");
    if (atomic_load(&k.n_http) == 0 || atomic_load(&k.n_kafka) == 0 ||
        (agent && atomic_load(&k.n_agent) == 0))
        fail_msg("a producer sent nothing");

    json_t *want[RX_N];
    for (int i = 0; i < RX_N; i++)
        want[i] = json_object();
    want_add(want[RX_BASE], k.sent, "", NULL);
    want_add(want[RX_BASE], k.sent, "feature-y", NULL);
    want_add(want[RX_LANE], k.sent, "feature-x", NULL);
    want_add(want[RX_AUDIT], k.sent, "", NULL);
    want_add(want[RX_AUDIT], k.sent, "feature-x", NULL);
    want_add(want[RX_AUDIT], k.sent, "feature-y", NULL);
    want_add(want[RX_PPE], k.sent, "release-1", NULL);
    json_int_t per_lane[SOAK_LANES] = {0};
    {
        const char *id;
        json_t *v;
        json_object_foreach(k.sent, id, v)
        {
            for (size_t l = 1; l < SOAK_LANES; l++)
                if (strcmp(json_string_value(v), g_soak_lane[l]) == 0)
                    per_lane[l]++;
        }
    }
    tally t[RX_N];
    for (int i = 0; i < RX_N; i++)
        tally_init(&t[i], g_rx[i]);
    wait_deliveries(t, want, 60);
    wait_lanes_idle(s, WAIT_S);
    it_sleep_ms(500);
    for (int i = 0; i < RX_N; i++)
        expect_exact(&t[i], g_rx_name[i], want[i]);
    json_t *j = lanes_get(s);
    const json_int_t nb = per_lane[1], nfx = per_lane[2], nfy = per_lane[3], nr1 = per_lane[4];
    expect_lane_int(j, "", NULL, "events_in", nb);
    expect_lane_int(j, "feature-x", NULL, "events_in", nfx);
    expect_lane_int(j, "feature-y", NULL, "events_in", nfy);
    expect_lane_int(j, "release-1", NULL, "events_in", nr1);
    expect_lane_int(j, "", NULL, "delivered", 2 * nb);
    expect_lane_int(j, "feature-x", NULL, "delivered", 2 * nfx);
    expect_lane_int(j, "feature-y", NULL, "delivered", 2 * nfy);
    expect_lane_int(j, "release-1", NULL, "delivered", nr1);
    expect_lane_int(j, "release-1", NULL, "unrouted", nr1);
    expect_lane_int(j, "release-1", "billing", "unrouted", nr1);
    json_decref(j);
    char m[128];
    snprintf(m, sizeof m, "sluice_lane_unrouted_total{rule=\"billing\",lane=\"release-1\"}");
    expect_metric(s, m, (double)nr1);
    fprintf(stderr,
            "test_soak: routed exactly: base %lld, feature-x %lld, feature-y %lld, "
            "release-1 %lld\n",
            (long long)nb, (long long)nfx, (long long)nfy, (long long)nr1);
    for (int i = 0; i < RX_N; i++) {
        tally_free(&t[i]);
        json_decref(want[i]);
    }
    json_decref(k.sent);
    pthread_mutex_destroy(&k.mu);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    if (it_init("test_lanes"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_routing), T(test_sources),   T(test_auto),    T(test_isolation),
        T(test_drop),    T(test_drop_busy), T(test_readers), T(test_soak),
    };
    /* ITEST_ONLY=NAME runs that test alone. */
    const char *only = getenv("ITEST_ONLY");
    struct CMUnitTest one[1];
    size_t n_one = 0;
    for (size_t i = 0; only && i < sizeof tests / sizeof *tests; i++)
        if (strcmp(tests[i].name, only) == 0)
            one[n_one++] = tests[i];
    int rc = only ? _cmocka_run_group_tests("test_lanes", one, n_one, NULL, NULL)
                  : cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
