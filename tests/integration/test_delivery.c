/*
 * tests/integration/test_delivery.c — the delivery guarantees of the real
 * `bin/sluice serve -c FILE.lua` against real HTTP endpoints (issue 5 §4,
 * §6): every status class, Retry-After, retries exhausted into the
 * dead-letter set with its attributes, permanent 4xx into it at once,
 * discarding without a dlq, a target down during a steady stream, sluice
 * SIGKILLed in the middle of delivery, a slow target beside a fast one, a
 * failing event holding its partition only, `ordered = false`, and a retry
 * on one of two targets.
 *
 * The endpoints are receiver.h's, in this process; the harness is itest.h.
 * Every wait is bounded (WAIT_S); the assertions are on outcomes (requests
 * received, events stored, counters), not on timing, except lower bounds
 * ("no request before Retry-After"). SLUICE_SOAK=1 makes the outage 30 s.
 */
#include "itest.h"

#include "core/base/buf.h"
#include "receiver.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_S 20.0 /* every wait gives up after this long */

/* The retry policy of most tests, short back-offs so that tests are fast; a
 * format taking the attempts (%d). */
#define RETRY                                                                                      \
    "  retry = { attempts = %d, max_age = \"24h\", backoff = \"exponential\",\n"                   \
    "            initial = \"50ms\", max = \"500ms\" },\n"

static rx_receiver *g_rx, *g_rx2; /* two endpoints; g_rx2 for the tests with two */

static int setup(void **state)
{
    g_rx = rx_new();
    g_rx2 = rx_new();
    if (!g_rx || !g_rx2 || rx_start(g_rx, 0) || rx_start(g_rx2, 0))
        fail_msg("cannot start the HTTP receivers");
    return it_setup(state);
}

static int teardown(void **state)
{
    it_teardown(state); /* the server first: no new requests while receivers stop */
    rx_free(g_rx);
    rx_free(g_rx2);
    g_rx = g_rx2 = NULL;
    return 0;
}

/* ---- waits and counters ---------------------------------------------------------- */

/* Waits until the receiver accepted (2xx) n requests holding needle. */
static void wait_ok(rx_receiver *rx, const char *needle, size_t n)
{
    if (!rx_wait_matching(rx, needle, true, n, WAIT_S))
        fail_msg("the receiver accepted %zu requests with %s, not %zu, within %.0f s",
                 rx_count_matching(rx, needle, true), needle ? needle : "anything", n, WAIT_S);
}

/* The value of a Prometheus sample of GET /metrics, or -1. */
static double metric(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/metrics");
    double v = it_metric(it_body(&r), name);
    it_resp_free(&r);
    return v;
}

/* ---- events ---------------------------------------------------------------------- */

/* One event as an NDJSON line: id, partition key, data {"seq":seq,"id":id}. */
static void add_ev(sl_buf *b, const char *id, const char *key, long seq)
{
    sl_buf_printf(b,
                  "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/dlv\",\"type\":"
                  "\"dlv.test\",\"partitionkey\":\"%s\",\"data\":{\"seq\":%ld,\"id\":\"%s\"}}\n",
                  id, key, seq, id);
}

/* Posts one event (id, key, seq) and returns its offset. */
static int64_t post_ev(it_server *s, const char *set, const char *const *hdrs, const char *id,
                       const char *key, long seq)
{
    sl_buf b = SL_BUF_INIT;
    add_ev(&b, id, key, seq);
    json_t *a = it_post_all(s, set, hdrs, &b, 1);
    int64_t off = it_res_off(a, 0);
    json_decref(a);
    sl_buf_free(&b);
    return off;
}

/* The needle that finds the requests of event id: "\"id\":\"ID\"". */
static const char *id_needle(const char *id, char *buf, size_t cap)
{
    snprintf(buf, cap, "\"id\":\"%s\"", id);
    return buf;
}

/* Requests, and accepted (2xx) requests, that carried event id. */
static size_t tries_of(rx_receiver *rx, const char *id)
{
    char n[160];
    return rx_count_matching(rx, id_needle(id, n, sizeof n), false);
}

static size_t oks_of(rx_receiver *rx, const char *id)
{
    char n[160];
    return rx_count_matching(rx, id_needle(id, n, sizeof n), true);
}

/* Index of the first request (from `from`) carrying event id, or SIZE_MAX. */
static size_t first_req(rx_receiver *rx, const char *id, size_t from, bool ok_only)
{
    char n[160];
    id_needle(id, n, sizeof n);
    for (size_t i = from; i < rx_count(rx); i++) {
        const rx_req *q = rx_req_at(rx, i);
        if (strstr(q->body, n) && (!ok_only || (q->status >= 200 && q->status < 300)))
            return i;
    }
    return SIZE_MAX;
}

static size_t last_req(rx_receiver *rx, const char *id)
{
    char n[160];
    id_needle(id, n, sizeof n);
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < rx_count(rx); i++)
        if (strstr(rx_req_at(rx, i)->body, n))
            last = i;
    return last;
}

/* Every event of set partition 0 (all lanes); caller frees with it_evs_free(). */
static it_evs dlq_events(it_server *s, const char *set)
{
    return it_read_all(s, set, 0, "*");
}

/* The parsed event with id in e; NULL when absent (caller json_decref()s). */
static json_t *find_ev(const it_evs *e, const char *id)
{
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->v[i].id, id) == 0)
            return json_loads(e->v[i].text, 0, NULL);
    return NULL;
}

/* Seconds since the epoch of an RFC 3339 time, or -1 when it is not one. */
static double rfc3339(const char *t)
{
    struct tm tm = {0};
    const char *p = t ? strptime(t, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!p)
        return -1;
    double frac = 0;
    if (*p == '.') {
        char *e;
        frac = strtod(p, &e);
        if (e == p + 1)
            return -1;
        p = e;
    }
    long tz = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        tz = (atol(p + 1) * 60 + atol(p + 4)) * 60 * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -1;
    }
    return *p ? -1 : (double)timegm(&tm) - (double)tz + frac;
}

/* Checks a dead letter: the source event (id, source, type, data,
 * partitionkey, lane) plus the five sluice* attributes. attempts < 0 means
 * "at least 2"; since is the wall clock before the event was posted. */
static void expect_dead_letter(json_t *ev, const char *id, const char *key, long seq,
                               const char *lane, const char *err_has, json_int_t attempts,
                               time_t since)
{
    if (!ev)
        fail_msg("event %s is not in the dlq set", id);
    char *d = json_dumps(ev, JSON_COMPACT);
#define DL_CHECK(cond, what)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_msg("dead letter of %s: %s: %s", id, what, d);                                    \
    } while (0)
    const char *v;
    DL_CHECK((v = json_string_value(json_object_get(ev, "id"))) && !strcmp(v, id), "id");
    DL_CHECK((v = json_string_value(json_object_get(ev, "source"))) && !strcmp(v, "/dlv"),
             "source");
    DL_CHECK((v = json_string_value(json_object_get(ev, "type"))) && !strcmp(v, "dlv.test"),
             "type");
    DL_CHECK((v = json_string_value(json_object_get(ev, "partitionkey"))) && !strcmp(v, key),
             "partitionkey");
    json_t *data = json_object_get(ev, "data");
    DL_CHECK(json_integer_value(json_object_get(data, "seq")) == seq &&
                 (v = json_string_value(json_object_get(data, "id"))) && !strcmp(v, id),
             "data differs from the source event's");
    v = json_string_value(json_object_get(ev, "lane"));
    if (lane)
        DL_CHECK(v && !strcmp(v, lane), "lane");
    else
        DL_CHECK(!v, "a base-lane event got a lane");
    v = json_string_value(json_object_get(ev, "sluiceerror"));
    DL_CHECK(v && strstr(v, err_has), "sluiceerror does not name the failure");
    json_t *at = json_object_get(ev, "sluiceattempts");
    DL_CHECK(json_is_integer(at), "sluiceattempts is not an integer");
    if (attempts >= 0)
        DL_CHECK(json_integer_value(at) == attempts, "sluiceattempts");
    else
        DL_CHECK(json_integer_value(at) >= 2, "sluiceattempts < 2");
    DL_CHECK((v = json_string_value(json_object_get(ev, "sluicerule"))) && !strcmp(v, "r"),
             "sluicerule");
    DL_CHECK((v = json_string_value(json_object_get(ev, "sluicetarget"))) && !strcmp(v, "http"),
             "sluicetarget");
    double t = rfc3339(json_string_value(json_object_get(ev, "sluicefailedat")));
    DL_CHECK(t >= (double)since - 2 && t <= (double)time(NULL) + 2,
             "sluicefailedat is not an RFC 3339 time of this test");
#undef DL_CHECK
    free(d);
}

/* ---- what the receiver accepted of a stream -------------------------------------- */

/* The requests a receiver got for events "PREFIX<seq>", seq < n. */
typedef struct tally {
    int n;
    int *ok;      /* 2xx answers per seq */
    int *part;    /* sluicepartition of seq; -1 before it arrived */
    int64_t *off; /* sluiceoffset of seq */
    long dups;    /* 2xx answers beyond the first, in all */
} tally;

static void tally_free(tally *t)
{
    free(t->ok);
    free(t->part);
    free(t->off);
    memset(t, 0, sizeof *t);
}

/* Reads every request of rx; fails on a body that is not such an event, and
 * on an event accepted for the first time before an earlier one of its
 * partition (per-partition order, duplicates aside). */
static tally tally_of(rx_receiver *rx, const char *prefix, int n)
{
    tally t = {.n = n,
               .ok = calloc((size_t)n, sizeof(int)),
               .part = malloc((size_t)n * sizeof(int)),
               .off = calloc((size_t)n, sizeof(int64_t))};
    assert_true(t.ok && t.part && t.off);
    for (int i = 0; i < n; i++)
        t.part[i] = -1;
    int64_t last[64];
    for (int p = 0; p < 64; p++)
        last[p] = -1;
    size_t plen = strlen(prefix), nreq = rx_count(rx);
    for (size_t i = 0; i < nreq; i++) {
        const rx_req *q = rx_req_at(rx, i);
        json_t *j = json_loads(q->body, 0, NULL);
        const char *id = json_string_value(json_object_get(j, "id"));
        json_t *jp = json_object_get(j, "sluicepartition"),
               *jo = json_object_get(j, "sluiceoffset");
        if (!id || strncmp(id, prefix, plen) || !json_is_integer(jp) || !json_is_integer(jo))
            fail_msg("request %zu is not an event %s…: %.300s", i, prefix, q->body);
        int seq = atoi(id + plen), p = (int)json_integer_value(jp);
        int64_t off = (int64_t)json_integer_value(jo);
        if (seq < 0 || seq >= n || p < 0 || p >= 64)
            fail_msg("request %zu: unexpected event %s (partition %d)", i, id, p);
        json_t *data = json_object_get(j, "data");
        if (json_integer_value(json_object_get(data, "seq")) != seq)
            fail_msg("request %zu: event %s carries another sequence: %.300s", i, id, q->body);
        t.part[seq] = p;
        t.off[seq] = off;
        if (q->status >= 200 && q->status < 300) {
            if (t.ok[seq]++) {
                t.dups++;
            } else {
                if (off <= last[p])
                    fail_msg("partition %d: event %s (offset %lld) accepted after offset %lld", p,
                             id, (long long)off, (long long)last[p]);
                last[p] = off;
            }
        }
        json_decref(j);
    }
    return t;
}

/* Seqs of t that the receiver never accepted. */
static int tally_missing(const tally *t, int *first)
{
    int missing = 0;
    *first = -1;
    for (int i = 0; i < t->n; i++)
        if (!t->ok[i]) {
            if (*first < 0)
                *first = i;
            missing++;
        }
    return missing;
}

/* Waits until every one of the n events "PREFIX<seq>" was accepted once. */
static void wait_all_accepted(rx_receiver *rx, const char *prefix, int n, double secs)
{
    int missing = n, first = -1;
    for (double end = it_mono() + secs;; it_sleep_ms(50)) {
        /* Cheap count first: the full tally parses every request. */
        if (rx_count_matching(rx, NULL, true) >= (size_t)n) {
            tally t = tally_of(rx, prefix, n);
            missing = tally_missing(&t, &first);
            tally_free(&t);
            if (!missing)
                return;
        }
        if (it_mono() > end)
            break;
    }
    fail_msg("%d of %d events were never accepted within %.0f s (the first: %s%d)", missing, n,
             secs, prefix, first);
}

/* ---- tests ----------------------------------------------------------------------- */

static const char one_part_cfg[] = "lanes.auto = true\n"
                                   "set \"in\" { partitions = 1 }\n"
                                   "set \"in-dlq\" { partitions = 1 }\n"
                                   "rule \"r\" {\n"
                                   "  set = \"in\",\n"
                                   "  target = target.http { url = \"http://127.0.0.1:%d/hook\", "
                                   "timeout = \"2s\" },\n" RETRY "  dlq = \"in-dlq\",\n"
                                   "}\n";

/* (1) Every status class: 2xx is delivered at once; 500, 502, 503, 504, 408
 * and 429 are retried and then delivered; so is an event whose connection
 * is closed without an answer (twice: libcurl itself sends a request again
 * once when a reused connection dies, which sluice does not see). Each event
 * is accepted once, and `retries` counts the retry deliveries. */
static void test_status_classes(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, one_part_cfg, rx_port(g_rx), 4);
    it_start_config(s, cfg, WAIT_S);
    static const unsigned codes[] = {200, 201, 202, 204, 500, 502, 503, 504, 408, 429, RX_DROP};
    size_t ncodes = sizeof codes / sizeof *codes, nfail = 0;
    for (size_t i = 0; i < ncodes; i++) {
        char id[32], n[64];
        snprintf(id, sizeof id, "c%zu-%u", i, codes[i]);
        bool ok = codes[i] >= 200 && codes[i] < 300;
        nfail += !ok && codes[i] != RX_DROP;
        rx_fail(g_rx, codes[i] == RX_DROP ? 2 : 1, codes[i], ok ? "" : "not now", NULL);
        post_ev(s, "in", NULL, id, "k", (long)i);
        wait_ok(g_rx, id_needle(id, n, sizeof n), 1);
    }
    it_wait_caught_up(s, WAIT_S);
    it_sleep_ms(200); /* a late duplicate would show now */
    for (size_t i = 0; i < ncodes; i++) {
        char id[32];
        snprintf(id, sizeof id, "c%zu-%u", i, codes[i]);
        size_t tries = tries_of(g_rx, id), oks = oks_of(g_rx, id);
        size_t want = codes[i] == RX_DROP ? 3 : codes[i] < 300 ? 1 : 2;
        if (oks != 1 || tries != want)
            fail_msg("answer %u (0: dropped): event %s was sent %zu times, accepted %zu times "
                     "(want %zu, 1)",
                     codes[i], id, tries, oks, want);
    }
    json_t *st = it_rule(s, "r");
    if (it_rule_int(st, "delivered") != (json_int_t)ncodes || it_rule_int(st, "failed") != 0 ||
        it_rule_int(st, "dead_lettered") != 0 || it_rule_int(st, "discarded") != 0 ||
        it_rule_int(st, "retrying") != 0)
        it_fail_rule(st, "want delivered 11, failed/dead_lettered/discarded/retrying 0");
    /* One retry per failed status, and one or two for the dropped pair. */
    json_int_t retries = it_rule_int(st, "retries");
    if (retries < (json_int_t)nfail + 1 || retries > (json_int_t)nfail + 2)
        it_fail_rule(st, "want retries 7 or 8");
    const char *dlq = json_string_value(json_object_get(st, "dlq"));
    if (!dlq || strcmp(dlq, "in-dlq"))
        it_fail_rule(st, "\"dlq\" is not \"in-dlq\"");
    json_decref(st);
    it_evs dl = dlq_events(s, "in-dlq");
    assert_int_equal(dl.n, 0);
    it_evs_free(&dl);
    s->passed = true;
}

/* One phase of test_retry_after: the first request gets status with
 * Retry-After: 1; every later request of the target (both partitions) comes
 * at least a second after it, and everything is accepted once. */
static void retry_after_phase(it_server *s, unsigned status, const char *prefix)
{
    rx_clear(g_rx);
    rx_fail(g_rx, 1, status, "later, please", "1");
    char id[32];
    snprintf(id, sizeof id, "%s0", prefix);
    post_ev(s, "in", NULL, id, "k0", 0);
    if (!rx_wait(g_rx, 1, WAIT_S))
        fail_msg("HTTP %u phase: no request arrived", status);
    it_sleep_ms(100); /* the answer reaches sluice before the next events exist */
    sl_buf b = SL_BUF_INIT;
    for (int i = 1; i < 7; i++) {
        char key[16];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        snprintf(key, sizeof key, "k%d", i);
        add_ev(&b, id, key, i);
    }
    json_decref(it_post_all(s, "in", NULL, &b, 6));
    sl_buf_free(&b);
    wait_all_accepted(g_rx, prefix, 7, WAIT_S);
    double t0 = rx_req_at(g_rx, 0)->at;
    for (size_t i = 1; i < rx_count(g_rx); i++) {
        double gap = rx_req_at(g_rx, i)->at - t0;
        if (gap < 0.95)
            fail_msg("HTTP %u with Retry-After: 1: request %zu came %.3f s after it", status, i,
                     gap);
    }
    tally t = tally_of(g_rx, prefix, 7);
    if (t.dups)
        fail_msg("HTTP %u phase: %ld duplicate deliveries", status, t.dups);
    tally_free(&t);
}

/* (2) Retry-After on 429 and 503 pauses the target: no request at all
 * before it (a lower bound, safe to assert), then every event once; the
 * pause does not spend the events' attempts (nothing dead-lettered with
 * attempts = 4). */
static void test_retry_after(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 2 }\n"
        "set \"in-dlq\" { partitions = 1 }\n"
        "rule \"r\" {\n"
        "  set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/hook\", timeout = \"2s\" },\n" RETRY
        "  dlq = \"in-dlq\",\n"
        "}\n",
        rx_port(g_rx), 4);
    it_start_config(s, cfg, WAIT_S);
    retry_after_phase(s, 429, "a");
    retry_after_phase(s, 503, "b");
    it_wait_caught_up(s, WAIT_S);
    json_t *st = it_rule(s, "r");
    if (it_rule_int(st, "delivered") != 14 || it_rule_int(st, "failed") != 0 ||
        it_rule_int(st, "dead_lettered") != 0)
        it_fail_rule(st, "want delivered 14, failed 0, dead_lettered 0 (a Retry-After pause "
                         "must not use up attempts)");
    json_decref(st);
    s->passed = true;
}

/* (3) An event that always gets 500 is delivered `attempts` times, then
 * written to the dlq set with its five attributes; the events around it
 * are delivered, the later one only after it (ordered), and the cursor
 * moves past all three. */
static void test_exhausted_to_dlq(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, one_part_cfg, rx_port(g_rx), 4);
    rx_fail_marker(g_rx, "doomed", -1, 500, "always broken");
    it_start_config(s, cfg, WAIT_S);
    time_t since = time(NULL);
    sl_buf b = SL_BUF_INIT;
    add_ev(&b, "ok-0", "k", 0);
    add_ev(&b, "doomed-1", "k", 1);
    add_ev(&b, "ok-2", "k", 2);
    json_decref(it_post_all(s, "in", NULL, &b, 3));
    sl_buf_free(&b);
    it_wait_rule_int(s, "r", "dead_lettered", 1, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    it_sleep_ms(200);
    if (tries_of(g_rx, "doomed-1") != 4)
        fail_msg("the doomed event was sent %zu times, want attempts = 4",
                 tries_of(g_rx, "doomed-1"));
    if (oks_of(g_rx, "ok-0") != 1 || oks_of(g_rx, "ok-2") != 1)
        fail_msg("ok-0 accepted %zu times, ok-2 %zu times (want 1 and 1)", oks_of(g_rx, "ok-0"),
                 oks_of(g_rx, "ok-2"));
    size_t last_doomed = last_req(g_rx, "doomed-1"), ok2 = first_req(g_rx, "ok-2", 0, false);
    if (ok2 < last_doomed)
        fail_msg("ordered: ok-2 was sent (request %zu) before the doomed event's last attempt "
                 "(request %zu)",
                 ok2, last_doomed);

    it_evs dl = dlq_events(s, "in-dlq");
    if (dl.n != 1)
        fail_msg("the dlq set holds %zu events, want 1", dl.n);
    json_t *ev = find_ev(&dl, "doomed-1");
    expect_dead_letter(ev, "doomed-1", "k", 1, NULL, "HTTP 500", 4, since);
    json_decref(ev);
    it_evs_free(&dl);

    json_t *st = it_rule(s, "r");
    if (it_rule_int(st, "dead_lettered") != 1 || it_rule_int(st, "failed") != 1 ||
        it_rule_int(st, "discarded") != 0 || it_rule_int(st, "delivered") != 2 ||
        it_rule_int(st, "retrying") != 0 || it_rule_cursor(st, 0) != 3)
        it_fail_rule(st, "want dead_lettered 1, failed 1, discarded 0, delivered 2, retrying 0, "
                         "cursor 3");
    /* Retry deliveries made: doomed-1's requests 2 to 4. ok-2 waited behind
     * it unsent; its one request is not a retry. */
    if (it_rule_int(st, "retries") != 3)
        it_fail_rule(st, "want retries 3 (doomed-1 sent 4 times; ok-2 sent once)");
    json_decref(st);
    if (metric(s, "sluice_rule_dead_lettered_total{rule=\"r\"}") != 1 ||
        metric(s, "sluice_rule_discarded_total{rule=\"r\"}") != 0)
        fail_msg("/metrics: want sluice_rule_dead_lettered_total 1 and discarded_total 0, got "
                 "%g and %g",
                 metric(s, "sluice_rule_dead_lettered_total{rule=\"r\"}"),
                 metric(s, "sluice_rule_discarded_total{rule=\"r\"}"));
    s->passed = true;
}

/* (3b) max_age ends the retries of an event long before `attempts`: with
 * max_age = 1s it is dead-lettered after a few attempts, and
 * sluiceattempts says how many requests were made. */
static void test_max_age_to_dlq(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 1 }\n"
        "set \"in-dlq\" { partitions = 1 }\n"
        "rule \"r\" {\n"
        "  set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/hook\", timeout = \"2s\" },\n"
        "  retry = { attempts = 1000, max_age = \"1s\", backoff = \"fixed\",\n"
        "            initial = \"200ms\", max = \"200ms\" },\n"
        "  dlq = \"in-dlq\",\n"
        "}\n",
        rx_port(g_rx));
    rx_fail_marker(g_rx, "doomed", -1, 503, "still down");
    it_start_config(s, cfg, WAIT_S);
    time_t since = time(NULL);
    post_ev(s, "in", NULL, "doomed-0", "k", 0);
    post_ev(s, "in", NULL, "ok-1", "k", 1);
    it_wait_rule_int(s, "r", "dead_lettered", 1, WAIT_S);
    wait_ok(g_rx, "\"ok-1\"", 1);
    it_wait_caught_up(s, WAIT_S);
    size_t tries = tries_of(g_rx, "doomed-0");
    if (!tries)
        fail_msg("the doomed event was dead-lettered without a request");
    const rx_req *first = rx_req_at(g_rx, first_req(g_rx, "doomed-0", 0, false));
    const rx_req *last = rx_req_at(g_rx, last_req(g_rx, "doomed-0"));
    double span = last->at - first->at;
    if (tries < 2 || tries > 100 || span > 5)
        fail_msg("max_age = 1s: %zu attempts over %.2f s", tries, span);
    it_evs dl = dlq_events(s, "in-dlq");
    json_t *ev = find_ev(&dl, "doomed-0");
    expect_dead_letter(ev, "doomed-0", "k", 0, NULL, "HTTP 503", (json_int_t)tries, since);
    json_decref(ev);
    assert_int_equal(dl.n, 1);
    it_evs_free(&dl);
    s->passed = true;
}

/* (4) Permanent 4xx (400, 422): one attempt, then the dlq at once with
 * sluiceattempts 1 and the status in sluiceerror; a lane event keeps its
 * lane there; no retries; the events after them are delivered. */
static void test_permanent_to_dlq(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, one_part_cfg, rx_port(g_rx), 4);
    rx_fail_marker(g_rx, "poison", -1, 400, "bad field x");
    rx_fail_marker(g_rx, "teapot", -1, 422, "unprocessable");
    it_start_config(s, cfg, WAIT_S);
    time_t since = time(NULL);
    const char *lane[] = {"X-Sluice-Lane: beta", NULL};
    post_ev(s, "in", NULL, "ok-0", "k", 0);
    post_ev(s, "in", lane, "poison-1", "k", 1);
    post_ev(s, "in", NULL, "teapot-2", "k", 2);
    post_ev(s, "in", NULL, "ok-3", "k", 3);
    it_wait_rule_int(s, "r", "dead_lettered", 2, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    it_sleep_ms(200);
    if (tries_of(g_rx, "poison-1") != 1 || tries_of(g_rx, "teapot-2") != 1)
        fail_msg("permanent failures were sent %zu (400) and %zu (422) times, want 1 each",
                 tries_of(g_rx, "poison-1"), tries_of(g_rx, "teapot-2"));
    if (oks_of(g_rx, "ok-0") != 1 || oks_of(g_rx, "ok-3") != 1)
        fail_msg("ok-0 accepted %zu times, ok-3 %zu times (want 1 and 1)", oks_of(g_rx, "ok-0"),
                 oks_of(g_rx, "ok-3"));

    it_evs dl = dlq_events(s, "in-dlq");
    if (dl.n != 2)
        fail_msg("the dlq set holds %zu events, want 2", dl.n);
    json_t *ev = find_ev(&dl, "poison-1");
    expect_dead_letter(ev, "poison-1", "k", 1, "beta", "HTTP 400", 1, since);
    json_decref(ev);
    ev = find_ev(&dl, "teapot-2");
    expect_dead_letter(ev, "teapot-2", "k", 2, NULL, "HTTP 422", 1, since);
    json_decref(ev);
    it_evs_free(&dl);
    /* The lane is the record's too, not only an attribute. */
    it_evs beta = it_read_events(s, "in-dlq", 0, "offset=0&max=1000&lane=beta");
    if (beta.n != 1 || strcmp(beta.v[0].id, "poison-1"))
        fail_msg("the dlq set's lane beta holds %zu events, want poison-1 alone", beta.n);
    it_evs_free(&beta);

    json_t *st = it_rule(s, "r");
    if (it_rule_int(st, "dead_lettered") != 2 || it_rule_int(st, "failed") != 2 ||
        it_rule_int(st, "delivered") != 2 || it_rule_int(st, "retries") != 0 ||
        it_rule_cursor(st, 0) != 4)
        it_fail_rule(st, "want dead_lettered 2, failed 2, delivered 2, retries 0, cursor 4");
    json_decref(st);
    s->passed = true;
}

/* (5) Without a dlq, failed events are discarded and counted (rule JSON and
 * /metrics), and nothing is stored anywhere for them. */
static void test_no_dlq_discards(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 1 }\n"
        "rule \"r\" {\n"
        "  set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/hook\", timeout = \"2s\" },\n" RETRY
        "}\n",
        rx_port(g_rx), 2);
    rx_fail_marker(g_rx, "poison", -1, 400, "bad field x");
    rx_fail_marker(g_rx, "doomed", -1, 500, "always broken");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    add_ev(&b, "ok-0", "k", 0);
    add_ev(&b, "poison-1", "k", 1);
    add_ev(&b, "doomed-2", "k", 2);
    add_ev(&b, "ok-3", "k", 3);
    json_decref(it_post_all(s, "in", NULL, &b, 4));
    sl_buf_free(&b);
    it_wait_rule_int(s, "r", "discarded", 2, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    if (tries_of(g_rx, "poison-1") != 1 || tries_of(g_rx, "doomed-2") != 2)
        fail_msg("poison sent %zu times (want 1), doomed %zu times (want attempts = 2)",
                 tries_of(g_rx, "poison-1"), tries_of(g_rx, "doomed-2"));
    json_t *st = it_rule(s, "r");
    if (it_rule_int(st, "discarded") != 2 || it_rule_int(st, "failed") != 2 ||
        it_rule_int(st, "dead_lettered") != 0 || it_rule_int(st, "delivered") != 2 ||
        !json_is_null(json_object_get(st, "dlq")) || it_rule_cursor(st, 0) != 4)
        it_fail_rule(st, "want discarded 2, failed 2, dead_lettered 0, delivered 2, dlq null, "
                         "cursor 4");
    if (it_rule_int(st, "retries") != 1)
        it_fail_rule(st, "want retries 1 (doomed-2 sent twice; ok-3 sent once)");
    json_decref(st);
    if (metric(s, "sluice_rule_discarded_total{rule=\"r\"}") != 2 ||
        metric(s, "sluice_rule_dead_lettered_total{rule=\"r\"}") != 0)
        fail_msg("/metrics: want sluice_rule_discarded_total 2 and dead_lettered_total 0");
    /* Nothing stored: "in" holds its 4 events, and no other set any. */
    it_resp r = it_get(s, "/v1/sets");
    json_t *j = it_parse_json(&r);
    json_t *sets = json_object_get(j, "sets"), *e;
    size_t i;
    json_array_foreach(sets, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        json_int_t n = json_integer_value(json_object_get(e, "events"));
        if (name && strcmp(name, "in") == 0 ? n != 4 : n != 0)
            fail_msg("GET /v1/sets: set %s holds %lld events: %s", name ? name : "?", (long long)n,
                     it_body(&r));
    }
    json_decref(j);
    it_resp_free(&r);
    s->passed = true;
}

/* A steady stream of events "s<seq>" (keys k0..k6) posted by a thread. */
typedef struct stream {
    it_server *s;
    pthread_t thread;
    atomic_bool stop;
    atomic_int posted, failed; /* accepted posts; posts that were not */
    int *part;                 /* partition of seq, from the publish answer */
    int cap;
    double max_secs; /* the slowest post */
} stream;

static void *stream_main(void *arg)
{
    stream *st = arg;
    CURL *c = curl_easy_init();
    sl_buf b = SL_BUF_INIT;
    for (int seq = 0; seq < st->cap && !atomic_load(&st->stop); seq++) {
        char id[32], key[16], path[64];
        snprintf(id, sizeof id, "s%d", seq);
        snprintf(key, sizeof key, "k%d", seq % 7);
        snprintf(path, sizeof path, "/v1/sets/in/events");
        b.len = 0;
        add_ev(&b, id, key, seq);
        it_resp r;
        it_call k = {.path = path, .ctype = IT_CT_NDJSON, .body = b.data, .len = b.len};
        json_t *j = NULL;
        if (it_http(c, st->s->port, &k, &r) == 0 && r.status == 200)
            j = json_loads(it_body(&r), 0, NULL);
        json_t *res = json_array_get(json_object_get(j, "results"), 0);
        if (json_integer_value(json_object_get(j, "accepted")) == 1 && res) {
            st->part[seq] = (int)json_integer_value(json_object_get(res, "partition"));
            atomic_store(&st->posted, seq + 1);
        } else {
            atomic_fetch_add(&st->failed, 1);
            atomic_store(&st->stop, true); /* seqs must stay dense */
        }
        if (r.secs > st->max_secs)
            st->max_secs = r.secs;
        json_decref(j);
        it_resp_free(&r);
        it_sleep_ms(10);
    }
    sl_buf_free(&b);
    curl_easy_cleanup(c);
    return NULL;
}

/* (6) The target is down for a while (5 s; 30 s with SLUICE_SOAK=1) during
 * a steady stream, then back: ingest went on, every event is delivered, in
 * order per partition, none lost; duplicates are counted, printed and at
 * most one in-flight request per partition. */
static void test_target_down(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 2 }\n"
        "set \"in-dlq\" { partitions = 1 }\n"
        "rule \"r\" {\n"
        "  set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/hook\", timeout = \"2s\" },\n" RETRY
        "  dlq = \"in-dlq\",\n"
        "}\n",
        rx_port(g_rx), 1000);
    it_start_config(s, cfg, WAIT_S);
    long outage_ms = it_soak() ? 30000 : 5000;
    stream st = {.s = s, .cap = 100000};
    st.part = calloc((size_t)st.cap, sizeof(int));
    assert_non_null(st.part);
    pthread_create(&st.thread, NULL, stream_main, &st);
    it_sleep_ms(1000);
    rx_stop(g_rx);
    int before = atomic_load(&st.posted);
    it_sleep_ms(outage_ms);
    int during = atomic_load(&st.posted) - before;
    /* GET /v1/rules says the target is failing while it is down... */
    json_t *hs = it_rule(s, "r");
    json_t *h = json_array_get(json_object_get(hs, "health"), 0);
    if (!json_is_false(json_object_get(h, "healthy")) ||
        !json_is_string(json_object_get(h, "reason")))
        it_fail_rule(hs, "want the target unhealthy, with a reason, while it is down");
    json_decref(hs);
    if (rx_restart(g_rx))
        fail_msg("cannot restart the receiver on port %d", rx_port(g_rx));
    it_sleep_ms(1000);
    atomic_store(&st.stop, true);
    pthread_join(st.thread, NULL);
    int n = atomic_load(&st.posted);
    printf("target down %.0f s: %d events posted (%d during the outage), slowest post %.3f s\n",
           (double)outage_ms / 1000, n, during, st.max_secs);
    if (atomic_load(&st.failed) || during < 10)
        fail_msg("ingest did not go on while the target was down: %d posts failed, %d accepted "
                 "during the outage",
                 atomic_load(&st.failed), during);
    wait_all_accepted(g_rx, "s", n, WAIT_S + (double)outage_ms / 1000);
    it_wait_caught_up(s, WAIT_S);
    tally t = tally_of(g_rx, "s", n);
    for (int i = 0; i < n; i++)
        if (t.part[i] != st.part[i])
            fail_msg("event s%d arrived as partition %d, was posted to %d", i, t.part[i],
                     st.part[i]);
    printf("target down: %d events, %ld duplicate deliveries\n", n, t.dups);
    if (t.dups > 2)
        fail_msg("%ld duplicates: more than one in-flight request per partition", t.dups);
    tally_free(&t);
    free(st.part);
    json_t *rs = it_rule(s, "r");
    if (it_rule_int(rs, "retries") < 1 || it_rule_int(rs, "failed") != 0 ||
        it_rule_int(rs, "dead_lettered") != 0 || it_rule_int(rs, "delivered") < n)
        it_fail_rule(rs, "want retries >= 1, failed 0, dead_lettered 0, delivered >= all");
    /* ... and healthy again once it answers. */
    if (!json_is_true(json_object_get(json_array_get(json_object_get(rs, "health"), 0), "healthy")))
        it_fail_rule(rs, "want the target healthy again after the outage");
    json_decref(rs);
    s->passed = true;
}

/* (7) sluice is SIGKILLed while it delivers to a slow target, and started
 * again on the same data dir: every event is accepted at least once; the
 * duplicates of a partition are a contiguous run at or past the cursor it
 * had committed before the kill (a first wave, delivered and committed
 * before, is not sent again), and no event is accepted more than twice. */
static void test_sigkill_mid_delivery(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 2 }\n"
        "set \"in-dlq\" { partitions = 1 }\n"
        "rule \"r\" {\n"
        "  set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/hook\", timeout = \"5s\" },\n" RETRY
        "  dlq = \"in-dlq\",\n"
        "}\n",
        rx_port(g_rx), 1000);
    rx_set_delay(g_rx, 40);
    it_start_config(s, cfg, WAIT_S);
    enum { N = 200, W1 = 30 }; /* W1 events first, the rest after they are committed */
    json_t *ans[2];
    for (int w = 0; w < 2; w++) {
        sl_buf b = SL_BUF_INIT;
        for (int i = w ? W1 : 0; i < (w ? N : W1); i++) {
            char id[16], key[16];
            snprintf(id, sizeof id, "s%d", i);
            snprintf(key, sizeof key, "k%d", i % 7);
            add_ev(&b, id, key, i);
        }
        ans[w] = it_post_all(s, "in", NULL, &b, w ? N - W1 : W1);
        sl_buf_free(&b);
        if (!w) {
            wait_all_accepted(g_rx, "s", W1, WAIT_S);
            it_wait_caught_up(s, WAIT_S);
        }
    }
    if (!rx_wait(g_rx, W1 + 40, WAIT_S))
        fail_msg("delivery of the second wave did not start");
    json_t *rs = it_rule(s, "r");
    int64_t cur[2] = {it_rule_cursor(rs, 0), it_rule_cursor(rs, 1)};
    json_decref(rs);
    it_srv_stop(s, SIGKILL, 5);
    size_t at_kill = rx_count(g_rx);
    it_sleep_ms(100); /* the requests in flight are answered, to nobody */
    it_srv_restart(s);
    wait_all_accepted(g_rx, "s", N, WAIT_S + 10);
    it_wait_caught_up(s, WAIT_S);
    tally t = tally_of(g_rx, "s", N);
    long dups[2] = {0, 0};
    int64_t lo[2] = {INT64_MAX, INT64_MAX}, hi[2] = {-1, -1};
    for (int i = 0; i < N; i++) {
        int p = t.part[i];
        json_t *a = ans[i >= W1];
        size_t k = (size_t)(i >= W1 ? i - W1 : i);
        assert_true(p == it_res_part(a, k) && t.off[i] == it_res_off(a, k));
        if (t.ok[i] > 2)
            fail_msg("event s%d was accepted %d times after one crash", i, t.ok[i]);
        if (t.ok[i] < 2)
            continue;
        dups[p]++;
        if (t.off[i] < cur[p])
            fail_msg("partition %d: event s%d (offset %lld) was delivered again though the "
                     "cursor was at %lld before the kill",
                     p, i, (long long)t.off[i], (long long)cur[p]);
        lo[p] = t.off[i] < lo[p] ? t.off[i] : lo[p];
        hi[p] = t.off[i] > hi[p] ? t.off[i] : hi[p];
    }
    for (int p = 0; p < 2; p++)
        if (dups[p] && hi[p] - lo[p] + 1 != dups[p])
            fail_msg("partition %d: the %ld duplicates span offsets %lld..%lld: not one run", p,
                     dups[p], (long long)lo[p], (long long)hi[p]);
    printf("SIGKILL after %zu requests (cursors %lld, %lld): duplicates %ld + %ld\n", at_kill,
           (long long)cur[0], (long long)cur[1], dups[0], dups[1]);
    tally_free(&t);
    json_decref(ans[0]);
    json_decref(ans[1]);
    s->passed = true;
}

/* (8) A slow target (each answer 500 ms late) makes only its own rule lag:
 * posts stay fast, and another rule on the same set delivers everything to
 * a fast endpoint while the slow one is far behind. */
static void test_slow_target_isolated(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 2 }\n"
        "rule \"slow\" { set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/slow\", timeout = \"10s\" },\n" RETRY
        "}\n"
        "rule \"fast\" { set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/fast\", timeout = \"10s\" },\n" RETRY
        "}\n",
        rx_port(g_rx), 1000, rx_port(g_rx2), 1000);
    rx_set_delay(g_rx, 500);
    it_start_config(s, cfg, WAIT_S);
    enum { N = 60 };
    double lat[N], worst = 0, sum = 0;
    for (int i = 0; i < N; i++) {
        char id[16], key[16];
        snprintf(id, sizeof id, "s%d", i);
        snprintf(key, sizeof key, "k%d", i % 7);
        double t0 = it_mono();
        post_ev(s, "in", NULL, id, key, i);
        lat[i] = it_mono() - t0;
        worst = lat[i] > worst ? lat[i] : worst;
        sum += lat[i];
    }
    wait_all_accepted(g_rx2, "s", N, WAIT_S);
    size_t slow_got = rx_count(g_rx);
    json_t *st = it_rule(s, "slow");
    json_int_t slow_lag = it_rule_int(st, "lag");
    json_decref(st);
    int under = 0;
    for (int i = 0; i < N; i++)
        under += lat[i] < 0.25;
    printf("slow target: posts %.1f ms on average, %.1f ms at worst; the slow rule had %zu "
           "requests (lag %lld) when the fast one had all %d\n",
           sum / N * 1000, worst * 1000, slow_got, (long long)slow_lag, N);
    if (slow_got >= N / 2 || slow_lag < N / 2)
        fail_msg("the fast rule did not get ahead of the slow one (%zu requests, lag %lld)",
                 slow_got, (long long)slow_lag);
    /* A post waiting for the slow target would take >= 500 ms, every one. */
    if (under < N * 9 / 10 || worst > 2.0)
        fail_msg("ingest slowed down: %d of %d posts under 250 ms, the worst %.3f s", under, N,
                 worst);
    /* ordered: a partition's requests go one after another, so at most one
     * per partition waits for the slow answers at any time. */
    if (rx_max_in_flight(g_rx) > 2)
        fail_msg("ordered rule on 2 partitions: %d requests in flight at once",
                 rx_max_in_flight(g_rx));
    tally t = tally_of(g_rx2, "s", N);
    if (t.dups)
        fail_msg("the fast endpoint got %ld duplicates", t.dups);
    tally_free(&t);
    s->passed = true;
}

/* (8b) ordered = true: an event waiting for its retry holds the later
 * events of its partition for that rule only; the other partition, another
 * rule on the same set and ingest go on, and once it is delivered its
 * partition follows, in order. */
static void test_ordered_holds_one_partition(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 2 }\n"
        "set \"in-dlq\" { partitions = 1 }\n"
        "rule \"r\" { set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/r\", timeout = \"2s\" },\n" RETRY
        "  dlq = \"in-dlq\" }\n"
        "rule \"other\" { set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/o\", timeout = \"2s\" },\n" RETRY
        "}\n",
        rx_port(g_rx), 1000, rx_port(g_rx2), 1000);
    rx_fail_marker(g_rx, "\"id\":\"s0\"", -1, 503, "busy");
    it_start_config(s, cfg, WAIT_S);
    enum { N = 21 };
    sl_buf b = SL_BUF_INIT;
    add_ev(&b, "s0", "kp", 0);
    json_t *a = it_post_all(s, "in", NULL, &b, 1);
    int hp = it_res_part(a, 0); /* the partition s0 holds */
    int64_t held = it_res_off(a, 0);
    json_decref(a);
    if (!rx_wait_matching(g_rx, "\"id\":\"s0\"", false, 2, WAIT_S))
        fail_msg("the failing event was not tried twice");
    b.len = 0;
    for (int i = 1; i < N; i++) {
        char id[16], key[16];
        snprintf(id, sizeof id, "s%d", i);
        snprintf(key, sizeof key, "k%d", i);
        add_ev(&b, id, key, i);
    }
    a = it_post_all(s, "in", NULL, &b, N - 1);
    sl_buf_free(&b);
    int part[N];
    part[0] = hp;
    size_t in_held = 0, elsewhere = 0;
    for (int i = 1; i < N; i++) {
        part[i] = it_res_part(a, (size_t)(i - 1));
        in_held += part[i] == hp;
        elsewhere += part[i] != hp;
    }
    json_decref(a);
    if (!in_held || !elsewhere)
        fail_msg("the keys did not spread over both partitions (%zu and %zu)", in_held, elsewhere);
    /* The other partition, and the other rule, get everything meanwhile. */
    for (int i = 1; i < N; i++) {
        char n[32];
        snprintf(n, sizeof n, "\"id\":\"s%d\"", i);
        if (part[i] != hp)
            wait_ok(g_rx, n, 1);
        wait_ok(g_rx2, n, 1);
    }
    wait_ok(g_rx2, "\"id\":\"s0\"", 1);
    it_sleep_ms(300); /* time enough for a wrong request to arrive */
    for (int i = 1; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        if (part[i] == hp && tries_of(g_rx, id))
            fail_msg("ordered: %s (partition %d) was sent while s0 of its partition waited", id,
                     hp);
    }
    json_t *st = it_rule(s, "r");
    if (it_rule_cursor(st, hp) != held || it_rule_int(st, "retrying") < 1)
        it_fail_rule(st, "while s0 waits: want its partition's cursor at it, retrying >= 1");
    json_decref(st);
    rx_unscript(g_rx);
    wait_all_accepted(g_rx, "s", N, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    tally t = tally_of(g_rx, "s", N); /* fails on a partition out of order */
    if (t.dups)
        fail_msg("%ld duplicates", t.dups);
    tally_free(&t);
    s->passed = true;
}

/* (9) ordered = false: an event failing with 503 does not hold the later
 * events of its partition (they are accepted while it waits), the cursor
 * stays at it meanwhile (a crash repeats, never loses), and it is delivered
 * in the end. */
static void test_unordered_poison(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 1 }\n"
        "set \"in-dlq\" { partitions = 1 }\n"
        "rule \"r\" {\n"
        "  set = \"in\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/hook\", timeout = \"2s\" },\n" RETRY
        "  dlq = \"in-dlq\",\n"
        "  ordered = false,\n"
        "}\n",
        rx_port(g_rx), 1000);
    rx_fail_marker(g_rx, "poison", -1, 503, "busy");
    it_start_config(s, cfg, WAIT_S);
    enum { N = 11 };
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "%s%d", i ? "s" : "poison-s", i);
        add_ev(&b, id, "k", i);
    }
    json_decref(it_post_all(s, "in", NULL, &b, N));
    sl_buf_free(&b);
    for (int i = 1; i < N; i++) {
        char n[32];
        snprintf(n, sizeof n, "\"id\":\"s%d\"", i);
        wait_ok(g_rx, n, 1);
    }
    if (!rx_wait_matching(g_rx, "poison", false, 3, WAIT_S))
        fail_msg("the failing event was tried %zu times, want 3 or more",
                 rx_count_matching(g_rx, "poison", false));
    json_t *st = it_rule(s, "r");
    if (oks_of(g_rx, "poison-s0") != 0 || it_rule_cursor(st, 0) != 0 ||
        it_rule_int(st, "retrying") != 1)
        it_fail_rule(st, "while the failing event (offset 0) waits: want cursor 0, retrying 1");
    json_decref(st);
    rx_unscript(g_rx); /* the endpoint recovers */
    wait_ok(g_rx, "poison", 1);
    it_wait_caught_up(s, WAIT_S);
    it_sleep_ms(200);
    for (int i = 1; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        if (oks_of(g_rx, id) != 1)
            fail_msg("event %s accepted %zu times, want once", id, oks_of(g_rx, id));
    }
    if (oks_of(g_rx, "poison-s0") != 1)
        fail_msg("the failing event was accepted %zu times, want once", oks_of(g_rx, "poison-s0"));
    st = it_rule(s, "r");
    if (it_rule_int(st, "delivered") != N || it_rule_int(st, "failed") != 0 ||
        it_rule_int(st, "dead_lettered") != 0 || it_rule_int(st, "retries") < 3 ||
        it_rule_int(st, "retrying") != 0 || it_rule_cursor(st, 0) != N)
        it_fail_rule(st, "want delivered 11, failed 0, dead_lettered 0, retries >= 3, retrying 0, "
                         "cursor 11");
    json_decref(st);
    s->passed = true;
}

/* (10) A rule with two targets, the second failing twice with 500: the
 * first target gets every event exactly once (what it accepted is not
 * sent again), the second gets each accepted once after its retries. */
static void test_two_targets_no_resend(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "set \"in-dlq\" { partitions = 1 }\n"
                    "rule \"r\" {\n"
                    "  set = \"in\",\n"
                    "  targets = {\n"
                    "    target.http { url = \"http://127.0.0.1:%d/a\", timeout = \"2s\" },\n"
                    "    target.http { url = \"http://127.0.0.1:%d/b\", timeout = \"2s\" },\n"
                    "  },\n" RETRY "  dlq = \"in-dlq\",\n"
                    "}\n",
                    rx_port(g_rx), rx_port(g_rx2), 4);
    rx_fail(g_rx2, 2, 500, "boom", NULL);
    it_start_config(s, cfg, WAIT_S);
    enum { N = 5 };
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        add_ev(&b, id, "k", i);
    }
    json_decref(it_post_all(s, "in", NULL, &b, N));
    sl_buf_free(&b);
    wait_all_accepted(g_rx, "s", N, WAIT_S);
    wait_all_accepted(g_rx2, "s", N, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    it_sleep_ms(200);
    tally ta = tally_of(g_rx, "s", N), tb = tally_of(g_rx2, "s", N);
    if (rx_count(g_rx) != N || ta.dups)
        fail_msg("the target that succeeded got %zu requests (%ld duplicates) for %d events",
                 rx_count(g_rx), ta.dups, N);
    if (rx_count(g_rx2) != N + 2 || tb.dups)
        fail_msg("the failing target got %zu requests (%ld duplicates), want %d", rx_count(g_rx2),
                 tb.dups, N + 2);
    tally_free(&ta);
    tally_free(&tb);
    json_t *st = it_rule(s, "r");
    if (it_rule_int(st, "failed") != 0 || it_rule_int(st, "dead_lettered") != 0 ||
        it_rule_int(st, "retries") < 2)
        it_fail_rule(st, "want failed 0, dead_lettered 0, retries >= 2");
    json_decref(st);
    s->passed = true;
}

/* One event refused (400) by the first target and failing for good (503) at
 * the second gets one dead letter naming both, once both gave up; the dead
 * letter is the stored event byte for byte (numbers keep their text). */
static void test_one_letter_per_event(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "set \"in-dlq\" { partitions = 1 }\n"
                    "rule \"r\" {\n"
                    "  set = \"in\",\n"
                    "  targets = {\n"
                    "    target.http { url = \"http://127.0.0.1:%d/a\", timeout = \"2s\" },\n"
                    "    target.http { url = \"http://127.0.0.1:%d/b\", timeout = \"2s\" },\n"
                    "  },\n" RETRY "  dlq = \"in-dlq\",\n"
                    "}\n",
                    rx_port(g_rx), rx_port(g_rx2), 3);
    rx_fail(g_rx, 100, 400, "no", NULL);
    rx_fail(g_rx2, 100, 503, "down", NULL);
    it_start_config(s, cfg, WAIT_S);
    const char *ev = "{\"specversion\":\"1.0\",\"id\":\"x1\",\"source\":\"/dlv\",\"type\":\"t\","
                     "\"data\":{\"f\":0.1,\"g\":1.50,\"e\":1e2}}";
    it_resp r = it_post(s, "in", IT_CT_CE, NULL, ev, SIZE_MAX);
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);
    it_wait_rule_int(s, "r", "dead_lettered", 1, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    it_evs d = dlq_events(s, "in-dlq");
    if (d.n != 1)
        fail_msg("want one dead letter for the event, found %zu", d.n);
    const char *t = d.v[0].text;
    if (!strstr(t, "\"data\":{\"f\":0.1,\"g\":1.50,\"e\":1e2}"))
        fail_msg("the dead letter changed the event's data: %s", t);
    if (!strstr(t, "\"sluicetarget\":\"http#1,http#2\"") || !strstr(t, "\"sluiceattempts\":3"))
        fail_msg("want sluicetarget http#1,http#2 and 3 attempts: %s", t);
    it_evs_free(&d);
    rx_unscript(g_rx);
    rx_unscript(g_rx2);
    s->passed = true;
}

/* A rule whose retry is due is not kept waiting by another rule's slow
 * target holding the workers: the flaky rule fails first (503 with
 * Retry-After: 1), then the slow rule's requests take a worker per
 * partition; the retry must still go out while they are unanswered (the
 * pool grows, and waiting workers queue due retries). */
static void test_retry_beside_slow_target(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "server { workers = 1 }\n"
        "set \"in\" { partitions = 4 }\n"
        "rule \"slow\" { set = \"in\", match = { type = { \"slow\" } },\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/slow\", timeout = \"20s\" } }\n"
        "rule \"flaky\" { set = \"in\", match = { type = { \"flaky\" } },\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/flaky\", timeout = \"5s\" },\n" RETRY
        "}\n",
        rx_port(g_rx), rx_port(g_rx2), 50);
    rx_set_delay(g_rx, 6000);
    rx_fail(g_rx2, 1, 503, "once", "1");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"f1\",\"source\":\"/dlv\",\"type\":"
                      "\"flaky\"}\n");
    json_decref(it_post_all(s, "in", NULL, &b, 1));
    if (!rx_wait(g_rx2, 1, WAIT_S))
        fail_msg("the flaky rule sent nothing");
    b.len = 0;
    for (int i = 0; i < 8; i++) /* most likely on every partition: a worker each */
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"s%d\",\"source\":\"/dlv\",\"type\":"
                      "\"slow\",\"partitionkey\":\"k%d\"}\n",
                      i, i);
    json_decref(it_post_all(s, "in", NULL, &b, 8));
    sl_buf_free(&b);
    wait_ok(g_rx2, "\"id\":\"f1\"", 1);
    /* Not a timing assertion: the order of two outcomes. */
    json_t *st = it_rule(s, "slow");
    if (it_rule_int(st, "delivered") != 0)
        it_fail_rule(st, "the flaky rule's retry waited for the slow target's answers");
    json_decref(st);
    rx_set_delay(g_rx, 0);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    if (it_init("test_delivery"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_status_classes),       T(test_retry_after),
        T(test_exhausted_to_dlq),     T(test_max_age_to_dlq),
        T(test_permanent_to_dlq),     T(test_no_dlq_discards),
        T(test_target_down),          T(test_sigkill_mid_delivery),
        T(test_slow_target_isolated), T(test_ordered_holds_one_partition),
        T(test_unordered_poison),     T(test_two_targets_no_resend),
        T(test_one_letter_per_event), T(test_retry_beside_slow_target),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
