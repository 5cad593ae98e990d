/*
 * tests/integration/test_target_http.c — target.http of the real
 * `bin/sluice serve -c FILE.lua` against the in-process test receiver
 * (receiver.h) on 127.0.0.1 (issue 5 §2, §6): structured payloads byte for
 * byte, the URL template, headers and auth, binary mode, batches, lane
 * headers, 500 then success, 429 with Retry-After, permanent 400s, and the
 * receiver down for a while. The harness is itest.h.
 */
#include "itest.h"

#include "core/base/buf.h"
#include "receiver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>

#define WAIT_S 20.0 /* every wait gives up after this long */

/* ---- the receiver (receiver.h) -------------------------------------------------- */

static rx_receiver *g_rx;

/* Request i; fails the test when there is none. */
static const rx_req *req(size_t i)
{
    const rx_req *r = rx_req_at(g_rx, i);
    if (!r)
        fail_msg("the receiver holds %zu requests, not %zu", rx_count(g_rx), i + 1);
    return r;
}

static void expect_hdr(const rx_req *r, const char *name, const char *want)
{
    char buf[4096];
    const char *v = rx_header(r, name, buf, sizeof buf);
    if (!v || strcmp(v, want))
        fail_msg("%s %s: header %s is \"%s\", want \"%s\"; headers:\n%s", r->method, r->path, name,
                 v ? v : "(none)", want, r->headers);
}

static int setup(void **state)
{
    g_rx = rx_new();
    if (!g_rx || rx_start(g_rx, 0))
        fail_msg("cannot start the HTTP receiver");
    return it_setup(state);
}

static int teardown(void **state)
{
    rx_free(g_rx);
    g_rx = NULL;
    return it_teardown(state);
}

/* ---- waits ----------------------------------------------------------------------- */

/* Waits until the receiver holds at least n requests. */
static void wait_requests(size_t n)
{
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(10))
        if (rx_count(g_rx) >= n)
            return;
    fail_msg("the receiver got %zu requests, not %zu, within %.0f s", rx_count(g_rx), n, WAIT_S);
}

static void add_event(sl_buf *b, const char *id, const char *type, const char *extra)
{
    sl_buf_printf(b,
                  "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/shop\",\"type\":\"%s\","
                  "\"data\":{\"n\":\"%s\"}%s}\n",
                  id, type, id, extra ? extra : "");
}

/* The exact stored text of every event in set (both partitions), by id. */
static char *stored_text(it_evs *ev, size_t nev, const char *id)
{
    for (size_t p = 0; p < nev; p++)
        for (size_t i = 0; i < ev[p].n; i++)
            if (strcmp(ev[p].v[i].id, id) == 0)
                return ev[p].v[i].text;
    return NULL;
}

/* ---- tests ----------------------------------------------------------------------- */

/* Structured mode: every matching event arrives once, byte for byte as the
 * payload, at the templated URL, with the configured headers, the bearer
 * token and the lane headers for lane events; in order per partition. */
static void test_structured(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"orders\" { partitions = 2 }\n"
                    "rule \"hook\" {\n"
                    "  set = \"orders\",\n"
                    "  match = { type = { \"order.created\" } },\n"
                    "  target = target.http { url = \"http://127.0.0.1:%d/hook/{subject}\",\n"
                    "    headers = { [\"X-Custom\"] = \"yes\" },\n"
                    "    auth = { bearer = \"tok123\" .. string.rep(\"x\", 1500) } },\n"
                    "}\n",
                    rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    static char bearer[1600];
    int bl = snprintf(bearer, sizeof bearer, "Bearer tok123");
    memset(bearer + bl, 'x', 1500);
    bearer[bl + 1500] = '\0';
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 30; i++) {
        char id[16], extra[64];
        snprintf(id, sizeof id, "e%d", i);
        snprintf(extra, sizeof extra, ",\"subject\":\"s %d/x\"", i % 5);
        add_event(&b, id, i % 3 == 2 ? "order.cancelled" : "order.created", extra);
    }
    json_decref(it_post_all(s, "orders", NULL, &b, 30));
    b.len = 0;
    add_event(&b, "lane1", "order.created", ",\"subject\":\"l\"");
    const char *lane_hdr[] = {"X-Sluice-Lane: beta", NULL};
    json_decref(it_post_all(s, "orders", lane_hdr, &b, 1));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    wait_requests(21);
    it_sleep_ms(100);
    assert_int_equal(rx_count(g_rx), 21);

    it_evs ev[2] = {it_read_all(s, "orders", 0, "*"), it_read_all(s, "orders", 1, "*")};
    int64_t last[2] = {-1, -1};
    bool seen[31] = {false};
    for (size_t i = 0; i < rx_count(g_rx); i++) {
        const rx_req *r = req(i);
        json_t *j = json_loads(r->body, 0, NULL);
        if (!j)
            fail_msg("request %zu: body is not JSON: %s", i, r->body);
        const char *id = json_string_value(json_object_get(j, "id"));
        const char *subj = json_string_value(json_object_get(j, "subject"));
        assert_non_null(id);
        char *want = stored_text(ev, 2, id);
        if (!want || strcmp(want, r->body))
            fail_msg("request %zu: body differs from the event:\n%s\n%s", i, r->body,
                     want ? want : "(no such event)");
        assert_string_equal(r->method, "POST");
        expect_hdr(r, "content-type", "application/cloudevents+json");
        expect_hdr(r, "authorization", bearer); /* long tokens are sent whole */
        expect_hdr(r, "x-custom", "yes");
        char path[128];
        if (strcmp(id, "lane1") == 0) {
            seen[30] = true;
            expect_hdr(r, "x-sluice-lane", "beta");
            expect_hdr(r, "baggage", "lane=beta");
            snprintf(path, sizeof path, "/hook/l");
        } else {
            int k = atoi(id + 1);
            if (k % 3 == 2 || seen[k])
                fail_msg("request %zu: event %s should not arrive (again)", i, id);
            seen[k] = true;
            char buf[64];
            if (rx_header(r, "x-sluice-lane", buf, sizeof buf) ||
                rx_header(r, "baggage", buf, sizeof buf))
                fail_msg("request %zu: a base-lane event has lane headers:\n%s", i, r->headers);
            snprintf(path, sizeof path, "/hook/s%%20%d%%2Fx", k % 5);
        }
        if (strcmp(r->path, path))
            fail_msg("request %zu (subject %s): path %s, want %s", i, subj, r->path, path);
        json_int_t p = json_integer_value(json_object_get(j, "sluicepartition"));
        json_int_t off = json_integer_value(json_object_get(j, "sluiceoffset"));
        /* Order holds per partition within a lane; each lane is delivered by
         * its own consumer (docs/lanes.md), so only the base events are
         * compared here (lane1 is the lane's only event). */
        if (strcmp(id, "lane1") != 0) {
            if (off <= last[p])
                fail_msg("partition %lld: offset %lld arrived after %lld", (long long)p,
                         (long long)off, (long long)last[p]);
            last[p] = off;
        }
        json_decref(j);
    }
    json_t *st = it_rule(s, "hook");
    assert_int_equal(it_rule_int(st, "delivered"), 21);
    assert_int_equal(it_rule_int(st, "failed"), 0);
    json_decref(st);
    it_evs_free(&ev[0]);
    it_evs_free(&ev[1]);
    s->passed = true;
}

/* Binary mode with data_base64 written with JSON escapes (as .NET's
 * serializer writes '+'): the body is the decoded bytes, not the escapes. */
static void test_binary_base64_escapes(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"orders\" { partitions = 1 }\n"
        "rule \"bin\" { set = \"orders\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/b64\", body = \"binary\" } }\n",
        rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    /* "aGk+" escaped as \u0061\u0047\u006b\u002B: the bytes "hi>" */
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"e1\",\"source\":\"/s\",\"type\":\"t\","
                      "\"datacontenttype\":\"text/plain\","
                      "\"data_base64\":\"\\u0061\\u0047\\u006b\\u002B\"}\n");
    json_decref(it_post_all(s, "orders", NULL, &b, 1));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 1);
    assert_string_equal(req(0)->path, "/b64");
    assert_string_equal(req(0)->body, "hi>");
    s->passed = true;
}

/* Binary mode (data as the body, attributes as ce-* headers) and batch mode
 * (JSON arrays of at most `batch` events). */
static void test_binary_and_batch(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"orders\" { partitions = 1 }\n"
        "rule \"bin\" { set = \"orders\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/bin/{id}\", body = "
        "\"binary\", method = \"PUT\",\n"
        "    auth = { basic = { user = \"u\", password = \"p\" } } } }\n"
        "rule \"batch\" { set = \"orders\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/batch\", batch = 4 } }\n"
        "rule \"data\" { set = \"orders\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/data\", body = \"data\",\n"
        "    auth = { api_key = { header = \"X-Api-Key\", value = \"k1\" } } } }\n",
        rx_port(g_rx), rx_port(g_rx), rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 10; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        add_event(&b, id, "order.created",
                  ",\"subject\":\"caf\xc3\xa9 x\",\"datacontenttype\":\"application/json\","
                  "\"region\":\"eu\"");
    }
    json_decref(it_post_all(s, "orders", NULL, &b, 10));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    size_t nbin = 0, nbatch = 0, batched = 0, ndata = 0;
    bool seen[10] = {false};
    for (size_t i = 0; i < rx_count(g_rx); i++) {
        const rx_req *r = req(i);
        if (strncmp(r->path, "/bin/", 5) == 0) {
            nbin++;
            assert_string_equal(r->method, "PUT");
            char want[128], id[16];
            snprintf(id, sizeof id, "%s", r->path + 5);
            snprintf(want, sizeof want, "{\"n\":\"%s\"}", id);
            assert_string_equal(r->body, want);
            expect_hdr(r, "content-type", "application/json");
            expect_hdr(r, "ce-id", id);
            expect_hdr(r, "ce-specversion", "1.0");
            expect_hdr(r, "ce-source", "/shop");
            expect_hdr(r, "ce-type", "order.created");
            expect_hdr(r, "ce-subject", "caf%C3%A9%20x");
            expect_hdr(r, "ce-region", "eu");
            expect_hdr(r, "authorization", "Basic dTpw");
        } else if (strcmp(r->path, "/data") == 0) {
            ndata++;
            expect_hdr(r, "content-type", "application/json");
            expect_hdr(r, "x-api-key", "k1");
            json_t *j = json_loads(r->body, 0, NULL);
            if (!json_is_object(j) || !json_object_get(j, "sluiceoffset"))
                fail_msg("data mode: the body is not the payload: %s", r->body);
            json_decref(j);
        } else {
            assert_string_equal(r->path, "/batch");
            nbatch++;
            expect_hdr(r, "content-type", "application/cloudevents-batch+json");
            json_t *a = json_loads(r->body, 0, NULL);
            if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > 4)
                fail_msg("batch request %zu is not an array of 1..4 events: %s", i, r->body);
            json_t *e;
            size_t k;
            json_array_foreach(a, k, e)
            {
                const char *id = json_string_value(json_object_get(e, "id"));
                int n = id ? atoi(id + 1) : -1;
                if (n < 0 || n >= 10 || seen[n])
                    fail_msg("batch: unexpected or repeated event %s", id ? id : "?");
                seen[n] = true;
                batched++;
            }
            json_decref(a);
        }
    }
    assert_int_equal(nbin, 10);
    assert_int_equal(ndata, 10);
    assert_int_equal(batched, 10);
    if (nbatch < 3 || nbatch > 10)
        fail_msg("%zu batch requests for 10 events with batch = 4", nbatch);
    s->passed = true;
}

static const char one_rule_cfg[] =
    "lanes.auto = true\n"
    "set \"orders\" { partitions = %d }\n"
    "rule \"hook\" { set = \"orders\",\n"
    "  target = target.http { url = \"http://127.0.0.1:%d/h/{subject}\", timeout = \"2s\" } }\n";

/* 500 for the first two requests, then success: everything arrives, the
 * rule counts retries, nothing failed. */
static void test_500_then_success(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, one_rule_cfg, 1, rx_port(g_rx));
    rx_fail(g_rx, 2, 500, "boom", NULL);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 10; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        add_event(&b, id, "t", ",\"subject\":\"k\"");
    }
    json_decref(it_post_all(s, "orders", NULL, &b, 10));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 12); /* two refused, then the ten in order */
    for (int i = 0; i < 10; i++) {
        char want[16];
        snprintf(want, sizeof want, "\"r%d\"", i);
        if (!strstr(req(i + 2)->body, want))
            fail_msg("request %d is not event r%d: %s", i + 2, i, req(i + 2)->body);
    }
    json_t *st = it_rule(s, "hook");
    if (it_rule_int(st, "retries") < 2 || it_rule_int(st, "failed") != 0 ||
        it_rule_int(st, "delivered") != 10)
        it_fail_rule(st, "want retries >= 2, failed 0, delivered 10");
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (!le || !strstr(le, "HTTP 500"))
        fail_msg("last_error does not name the status: %s", le ? le : "(none)");
    json_decref(st);
    s->passed = true;
}

/* 429 with Retry-After: 2: nothing is sent for two seconds, then all arrives. */
static void test_429_retry_after(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, one_rule_cfg, 1, rx_port(g_rx));
    rx_fail(g_rx, 1, 429, "slow down", "2");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "q%d", i);
        add_event(&b, id, "t", ",\"subject\":\"k\"");
    }
    json_decref(it_post_all(s, "orders", NULL, &b, 3));
    sl_buf_free(&b);
    wait_requests(4);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 4);
    double gap = req(1)->at - req(0)->at;
    if (gap < 1.95)
        fail_msg("the request after a 429 with Retry-After: 2 came %.3f s later", gap);
    json_t *st = it_rule(s, "hook");
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (!le || !strstr(le, "Retry-After: 2"))
        fail_msg("last_error does not report Retry-After: %s", le ? le : "(none)");
    assert_int_equal(it_rule_int(st, "delivered"), 3);
    json_decref(st);
    s->passed = true;
}

/* 503 with Retry-After as an HTTP date two seconds ahead: honoured too. */
static void test_503_retry_after_date(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], date[64];
    it_write_config(s, cfg, one_rule_cfg, 1, rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    time_t when = time(NULL) + 2;
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&when, &tm));
    rx_fail(g_rx, 1, 503, "maintenance", date);
    sl_buf b = SL_BUF_INIT;
    add_event(&b, "m0", "t", ",\"subject\":\"k\"");
    json_decref(it_post_all(s, "orders", NULL, &b, 1));
    sl_buf_free(&b);
    wait_requests(2);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 2);
    double gap = req(1)->at - req(0)->at;
    if (gap < 1.0) /* whole seconds in the date: at least 2 s minus the rounding */
        fail_msg("the request after a 503 with Retry-After: %s came %.3f s later", date, gap);
    s->passed = true;
}

/* A receiver slower than `timeout`: the request times out and is retried. */
static void test_timeout(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"orders\" { partitions = 1 }\n"
        "rule \"hook\" { set = \"orders\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/slow\", timeout = \"300ms\" "
        "} }\n",
        rx_port(g_rx));
    rx_script(g_rx, &(rx_rule){.n = 1, .status = 200, .body = "late", .delay_ms = 1000});
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    add_event(&b, "s0", "t", "");
    json_decref(it_post_all(s, "orders", NULL, &b, 1));
    sl_buf_free(&b);
    wait_requests(2);
    it_wait_caught_up(s, WAIT_S);
    json_t *st = it_rule(s, "hook");
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (it_rule_int(st, "retries") < 1 || it_rule_int(st, "delivered") != 1 || !le ||
        !strstr(le, "imed out"))
        it_fail_rule(st, "want a timeout retried, then delivered");
    json_decref(st);
    s->passed = true;
}

/* rate = 5: ten requests take at least 1.8 s. */
static void test_rate(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"orders\" { partitions = 2 }\n"
                    "rule \"hook\" { set = \"orders\",\n"
                    "  target = target.http { url = \"http://127.0.0.1:%d/r\", rate = 5 } }\n",
                    rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 10; i++) {
        char id[16], extra[48];
        snprintf(id, sizeof id, "t%d", i);
        snprintf(extra, sizeof extra, ",\"subject\":\"k%d\"", i);
        add_event(&b, id, "t", extra);
    }
    json_decref(it_post_all(s, "orders", NULL, &b, 10));
    sl_buf_free(&b);
    wait_requests(10);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 10);
    double span = req(9)->at - req(0)->at;
    if (span < 1.7)
        fail_msg("rate = 5: ten requests within %.3f s", span);
    s->passed = true;
}

/* Posts one event whose request the receiver answers after slow_ms, sends
 * SIGTERM once the request is in flight, and checks that the server exits
 * cleanly within limit seconds. */
static void shutdown_inflight(it_server *s, const char *tmpl, int slow_ms, double limit)
{
    char cfg[PATH_MAX];
    it_write_config(s, cfg, tmpl, 1, rx_port(g_rx));
    rx_script(g_rx, &(rx_rule){.n = 1, .status = 200, .body = "late", .delay_ms = slow_ms});
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    add_event(&b, "x0", "t", ",\"subject\":\"k\"");
    json_decref(it_post_all(s, "orders", NULL, &b, 1));
    sl_buf_free(&b);
    wait_requests(1);
    double t0 = it_mono();
    int st = it_srv_stop(s, SIGTERM, 15);
    double took = it_mono() - t0;
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || took > limit)
        fail_msg("SIGTERM with a request in flight: wait status %d after %.1f s (want < %.0f s)",
                 st, took, limit);
    if (it_log_contains(s, "Sanitizer"))
        fail_msg("the sanitizer complained");
    s->passed = true;
}

/* SIGTERM while a request hangs: the server still exits cleanly, within the
 * request's timeout (2 s). */
static void test_shutdown_inflight(void **state)
{
    shutdown_inflight(*state, one_rule_cfg, 4000, 5);
}

/* SIGTERM while an endpoint hangs far longer than a shutdown may take: the
 * target is told to hurry (cancel), so the server exits within its grace
 * instead of the request's 60 s timeout. */
static const char long_timeout_cfg[] =
    "lanes.auto = true\n"
    "set \"orders\" { partitions = %d }\n"
    "rule \"hook\" { set = \"orders\",\n"
    "  target = target.http { url = \"http://127.0.0.1:%d/h/{subject}\", timeout = \"60s\" } }\n";

static void test_shutdown_hung_endpoint(void **state)
{
    shutdown_inflight(*state, long_timeout_cfg, 8000, 5);
}

/* 400 is permanent: counted failed, not retried, the next events delivered;
 * a payload without the URL template's attribute is refused the same way. */
static void test_400_permanent(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, one_rule_cfg, 1, rx_port(g_rx));
    rx_fail(g_rx, 1, 400, "bad field x", NULL);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "p%d", i);
        add_event(&b, id, "t", ",\"subject\":\"k\"");
    }
    json_decref(it_post_all(s, "orders", NULL, &b, 5));
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 5);
    json_t *st = it_rule(s, "hook");
    if (it_rule_int(st, "failed") != 1 || it_rule_int(st, "delivered") != 4 ||
        it_rule_int(st, "retries"))
        it_fail_rule(st, "want failed 1, delivered 4, retries 0");
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (!le || !strstr(le, "HTTP 400: bad field x"))
        fail_msg("last_error does not quote the answer: %s", le ? le : "(none)");
    json_decref(st);

    b.len = 0;
    add_event(&b, "nosubj", "t", "");
    add_event(&b, "p5", "t", ",\"subject\":\"k\"");
    json_decref(it_post_all(s, "orders", NULL, &b, 2));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 6);
    st = it_rule(s, "hook");
    assert_int_equal(it_rule_int(st, "failed"), 2);
    assert_int_equal(it_rule_int(st, "delivered"), 5);
    le = json_string_value(json_object_get(st, "last_error"));
    if (!le || !strstr(le, "\"subject\""))
        fail_msg("last_error does not name the missing attribute: %s", le ? le : "(none)");
    json_decref(st);
    s->passed = true;
}

/* The receiver is down for two seconds: every event arrives after it comes
 * back, in order per partition. */
static void test_receiver_down(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, one_rule_cfg, 2, rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    rx_stop(g_rx);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 40; i++) {
        char id[16], extra[48];
        snprintf(id, sizeof id, "d%d", i);
        snprintf(extra, sizeof extra, ",\"subject\":\"k%d\"", i % 7);
        add_event(&b, id, "t", extra);
    }
    json_t *a = it_post_all(s, "orders", NULL, &b, 40);
    sl_buf_free(&b);
    it_sleep_ms(2000);
    if (rx_restart(g_rx))
        fail_msg("cannot restart the receiver on port %d", rx_port(g_rx));
    it_wait_caught_up(s, WAIT_S);
    bool seen[40] = {false};
    int64_t last[2] = {-1, -1};
    for (size_t i = 0; i < rx_count(g_rx); i++) {
        json_t *j = json_loads(req(i)->body, 0, NULL);
        const char *id = json_string_value(json_object_get(j, "id"));
        int k = id ? atoi(id + 1) : -1;
        assert_true(k >= 0 && k < 40);
        int p = it_res_part(a, (size_t)k);
        int64_t off = it_res_off(a, (size_t)k);
        if (!seen[k] && off <= last[p])
            fail_msg("partition %d: event %s (offset %lld) after offset %lld", p, id,
                     (long long)off, (long long)last[p]);
        if (!seen[k])
            last[p] = off;
        seen[k] = true;
        json_decref(j);
    }
    for (int k = 0; k < 40; k++)
        if (!seen[k])
            fail_msg("event d%d was not delivered", k);
    json_t *st = it_rule(s, "hook");
    if (it_rule_int(st, "retries") < 1 || it_rule_int(st, "failed") != 0)
        it_fail_rule(st, "want retries >= 1, failed 0");
    json_decref(st);
    json_decref(a);
    s->passed = true;
}

/* ordered = false: the requests of one call go out side by side (up to
 * `concurrency`) instead of one after another, and a retryable failure of
 * one does not hold back or resend the others. The receiver answers each
 * request after 400 ms, so requests sent one by one would arrive at least
 * 400 ms apart; several arriving within one answer's time were in flight
 * at once. */
static void test_unordered_concurrent(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"orders\" { partitions = 1 }\n"
        "rule \"fast\" { set = \"orders\", ordered = false,\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/u\", concurrency = 4 } }\n",
        rx_port(g_rx));
    enum { DELAY_MS = 400, N = 8 };
    rx_set_delay(g_rx, DELAY_MS);
    rx_fail_marker(g_rx, "\"u2\"", 1, 500, "once");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "u%d", i);
        add_event(&b, id, "t", ",\"subject\":\"k\"");
    }
    json_decref(it_post_all(s, "orders", NULL, &b, N));
    sl_buf_free(&b);
    wait_requests(N + 1);
    it_wait_caught_up(s, WAIT_S);
    size_t n = rx_count(g_rx);
    int most = 0;
    for (size_t i = 0; i < n; i++) {
        int together = 0; /* the 500 is answered at once: only the slow 200s count */
        for (size_t j = 0; j < n; j++)
            if (req(i)->status == 200 && req(j)->status == 200 && req(j)->at >= req(i)->at &&
                req(j)->at - req(i)->at < DELAY_MS / 1000.0 * 0.75)
                together++;
        if (together > most)
            most = together;
    }
    if (most < 2)
        fail_msg("ordered = false, concurrency = 4: never more than one request in flight");
    if (most > 4)
        fail_msg("concurrency = 4, but %d requests were in flight at once", most);
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "\"u%d\"", i);
        size_t got = rx_count_matching(g_rx, id, false), ok = rx_count_matching(g_rx, id, true);
        if (ok != 1 || got != (i == 2 ? 2u : 1u))
            fail_msg("event u%d: %zu requests, %zu answered 2xx (want %d and 1)", i, got, ok,
                     i == 2 ? 2 : 1);
    }
    json_t *st = it_rule(s, "fast");
    if (it_rule_int(st, "delivered") != N || it_rule_int(st, "failed") != 0)
        it_fail_rule(st, "want delivered %d, failed 0", N);
    json_decref(st);
    s->passed = true;
}

/* ---- HTTPS (tls_verify, ca_file) ------------------------------------------------ */

/* Makes a self-signed certificate for name, restarts the receiver serving
 * HTTPS with it on a free port, and writes the certificate to DIR/NAME.pem;
 * ca (PATH_MAX bytes) gets that path, for ca_file. */
static void serve_tls(it_server *s, const char *name, char *ca)
{
    char *cert, *key;
    if (rx_make_cert(name, &cert, &key))
        fail_msg("cannot make a certificate for %s", name);
    rx_stop(g_rx);
    if (rx_start_tls(g_rx, 0, cert, key))
        fail_msg("cannot start the HTTPS receiver");
    char file[128];
    snprintf(file, sizeof file, "%s.pem", name);
    it_path(ca, s, file);
    it_write_file(ca, "%s", cert);
    free(cert);
    free(key);
}

/* Posts n events "IDk" (k = 0 … n-1) with subject "k" to "orders". */
static void post_n(it_server *s, const char *id, int n)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++) {
        char ev[32];
        snprintf(ev, sizeof ev, "%s%d", id, i);
        add_event(&b, ev, "t", ",\"subject\":\"k\"");
    }
    json_decref(it_post_all(s, "orders", NULL, &b, (size_t)n));
    sl_buf_free(&b);
}

/* Each of the n events "IDk" arrived exactly once, answered 200. */
static void expect_each_once(const char *id, int n)
{
    for (int i = 0; i < n; i++) {
        char want[40];
        snprintf(want, sizeof want, "\"%s%d\"", id, i);
        size_t got = rx_count_matching(g_rx, want, false);
        if (got != 1 || rx_count_matching(g_rx, want, true) != 1)
            fail_msg("event %s%d arrived %zu times over TLS (want once, answered 200)", id, i, got);
    }
}

/* Waits until rule name has retried at least 3 times, then checks that it
 * delivered nothing, gave nothing up (failed, dead_lettered, discarded 0,
 * the dlq set empty) and that last_error holds want, curl's reason. */
static void expect_tls_refused(it_server *s, const char *name, const char *want)
{
    it_wait_rule_int(s, name, "retries", 3, 10);
    json_t *st = it_rule(s, name);
    if (it_rule_int(st, "delivered") || it_rule_int(st, "failed") ||
        it_rule_int(st, "dead_lettered") || it_rule_int(st, "discarded"))
        it_fail_rule(st, "want delivered, failed, dead_lettered, discarded 0");
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (!le || !strstr(le, want))
        it_fail_rule(st, "last_error does not say \"%s\"", want);
    json_decref(st);
    it_evs dl = it_read_all(s, "dlq", 0, "*");
    if (dl.n)
        fail_msg("%zu events were dead-lettered, want none: %s", dl.n, dl.v[0].text);
    it_evs_free(&dl);
}

/* A short retry policy, so that a refused target retries a few times a
 * second, and a dead-letter set that must stay empty. */
#define TLS_RETRY                                                                                  \
    "  retry = { attempts = 1000, initial = \"50ms\", max = \"200ms\" }, dlq = \"dlq\",\n"
#define TLS_SETS "set \"orders\" { partitions = 1 }\nset \"dlq\" { partitions = 1 }\n"

/* https:// with ca_file naming the receiver's self-signed certificate:
 * verified and delivered, every body received over TLS. */
static void test_tls_ca_file(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], ca[PATH_MAX];
    serve_tls(s, "127.0.0.1", ca);
    it_write_config(s, cfg,
                    TLS_SETS "rule \"hook\" { set = \"orders\",\n" TLS_RETRY
                             "  target = target.http { url = \"https://127.0.0.1:%d/hook\",\n"
                             "    ca_file = \"%s\" } }\n",
                    rx_port(g_rx), ca);
    it_start_config(s, cfg, WAIT_S);
    post_n(s, "c", 5);
    wait_requests(5);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 5);
    expect_each_once("c", 5);
    assert_string_equal(req(0)->path, "/hook");
    json_t *st = it_rule(s, "hook");
    if (it_rule_int(st, "delivered") != 5 || it_rule_int(st, "retries") ||
        it_rule_int(st, "failed"))
        it_fail_rule(st, "want delivered 5, retries 0, failed 0");
    json_decref(st);
    s->passed = true;
}

/* The same without ca_file: verified against the system CAs, which do not
 * know the certificate, so nothing is delivered; a TLS error is retryable,
 * so the rule retries and gives nothing up. The server then stops cleanly
 * with the events still waiting. */
static void test_tls_untrusted(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], ca[PATH_MAX];
    serve_tls(s, "127.0.0.1", ca);
    it_write_config(s, cfg,
                    TLS_SETS "rule \"hook\" { set = \"orders\",\n" TLS_RETRY
                             "  target = target.http { url = \"https://127.0.0.1:%d/hook\" } }\n",
                    rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    post_n(s, "u", 2);
    expect_tls_refused(s, "hook", "certificate");
    assert_int_equal(rx_count(g_rx), 0); /* no request got past the handshake */
    /* The failing target says so in GET /v1/rules (health). */
    json_t *st = it_rule(s, "hook");
    json_t *h = json_array_get(json_object_get(st, "health"), 0);
    const char *why = json_string_value(json_object_get(h, "reason"));
    if (!json_is_false(json_object_get(h, "healthy")) || !why || !strstr(why, "certificate"))
        it_fail_rule(st, "want the target unhealthy, with the certificate problem as reason");
    json_decref(st);
    double t0 = it_mono();
    int ws = it_srv_stop(s, SIGTERM, 10);
    if (ws < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("SIGTERM while retrying a TLS error: wait status %d after %.1f s", ws,
                 it_mono() - t0);
    s->passed = true;
}

/* tls_verify = false without ca_file: the unknown certificate is accepted. */
static void test_tls_no_verify(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], ca[PATH_MAX];
    serve_tls(s, "127.0.0.1", ca);
    it_write_config(s, cfg,
                    TLS_SETS "rule \"hook\" { set = \"orders\",\n" TLS_RETRY
                             "  target = target.http { url = \"https://127.0.0.1:%d/hook\",\n"
                             "    tls_verify = false } }\n",
                    rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    post_n(s, "n", 5);
    wait_requests(5);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(g_rx), 5);
    expect_each_once("n", 5);
    json_t *st = it_rule(s, "hook");
    if (it_rule_int(st, "delivered") != 5 || it_rule_int(st, "retries"))
        it_fail_rule(st, "want delivered 5, retries 0");
    if (!json_is_true(json_object_get(json_array_get(json_object_get(st, "health"), 0), "healthy")))
        it_fail_rule(st, "want the target healthy");
    json_decref(st);
    s->passed = true;
}

/* A certificate for another name (example.invalid), trusted through
 * ca_file: the chain is fine but the host name is not, so the rule that
 * verifies is refused (retryable), while tls_verify = false delivers. */
static void test_tls_wrong_name(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], ca[PATH_MAX];
    serve_tls(s, "example.invalid", ca);
    it_write_config(s, cfg,
                    TLS_SETS "rule \"strict\" { set = \"orders\",\n" TLS_RETRY
                             "  target = target.http { url = \"https://127.0.0.1:%d/strict\",\n"
                             "    ca_file = \"%s\" } }\n"
                             "rule \"lax\" { set = \"orders\",\n" TLS_RETRY
                             "  target = target.http { url = \"https://127.0.0.1:%d/lax\",\n"
                             "    ca_file = \"%s\", tls_verify = false } }\n",
                    rx_port(g_rx), ca, rx_port(g_rx), ca);
    it_start_config(s, cfg, WAIT_S);
    post_n(s, "w", 3);
    it_wait_rule_int(s, "lax", "delivered", 3, WAIT_S);
    expect_tls_refused(s, "strict", "host name");
    expect_each_once("w", 3);
    for (size_t i = 0; i < rx_count(g_rx); i++)
        if (strcmp(req(i)->path, "/lax"))
            fail_msg("request %zu went to %s past host-name verification", i, req(i)->path);
    json_t *st = it_rule(s, "lax");
    if (it_rule_int(st, "delivered") != 3 || it_rule_int(st, "retries"))
        it_fail_rule(st, "want delivered 3, retries 0");
    json_decref(st);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    if (it_init("test_target_http"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_structured),
        T(test_binary_and_batch),
        T(test_binary_base64_escapes),
        T(test_500_then_success),
        T(test_429_retry_after),
        T(test_503_retry_after_date),
        T(test_timeout),
        T(test_rate),
        T(test_shutdown_inflight),
        T(test_shutdown_hung_endpoint),
        T(test_400_permanent),
        T(test_receiver_down),
        T(test_unordered_concurrent),
        T(test_tls_ca_file),
        T(test_tls_untrusted),
        T(test_tls_no_verify),
        T(test_tls_wrong_name),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
