/*
 * tests/unit/test_ce_binding.c — core/bus/ce_binding: attribute look-up,
 * `{attr}` templates and their syntax check, the attributes binary mode
 * sends as headers, and binary-mode data (JSON, text, base64 with JSON
 * escapes); plus target.kafka's check() and a producer that refuses
 * payloads before any broker is reached (its bookkeeping freed, under ASan).
 */
#include "testutil.h"

#include "core/bus/ce_binding.h"
#include "connectors/target_kafka.h"
#include "core/bus/connector.h"
#include "core/base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static sl_event g_ev;

static const sl_event *parse(const char *json)
{
    sl_error err = {0};
    sl_event_status st = sl_event_parse(json, strlen(json), NULL, &g_ev, &err);
    if (st != SL_EVENT_OK)
        fail_msg("parse: %s", err.msg);
    return &g_ev;
}

static const char ev1[] =
    "{\"specversion\":\"1.0\",\"id\":\"e1\",\"source\":\"/s\",\"type\":\"t.x\","
    "\"subject\":\"a b/\\u00e9\",\"partitionkey\":\"pk\",\"region\":\"eu\",\"n\":7,"
    "\"ok\":true,\"datacontenttype\":\"application/json\",\"data\":{\"k\":[1,2]},"
    "\"sluiceset\":\"in\",\"sluicepartition\":1,\"sluiceoffset\":5}";

static void test_attr(void **state)
{
    (void)state;
    const sl_event *ev = parse(ev1);
    sl_json_tok tok;
    size_t len = 0;
    assert_true(sl_ce_attr(ev, "subject", 7, &tok));
    char *v = sl_ce_attr_text(&tok, &len);
    assert_string_equal(v, "a b/\xc3\xa9");
    assert_int_equal(len, strlen("a b/\xc3\xa9"));
    free(v);
    assert_true(sl_ce_attr(ev, "n", 1, &tok));
    v = sl_ce_attr_text(&tok, &len);
    assert_string_equal(v, "7");
    free(v);
    assert_false(sl_ce_attr(ev, "time", 4, &tok));
    assert_false(sl_ce_attr(ev, "data", 4, &tok));
    assert_false(sl_ce_attr(ev, "sluiceset", 9, &tok));
    assert_false(sl_ce_attr(ev, "nope", 4, &tok));
}

static int upper(sl_buf *out, const char *v, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = v[i] >= 'a' && v[i] <= 'z' ? (char)(v[i] - 32) : v[i];
        if (sl_buf_append(out, &c, 1))
            return SL_ENOMEM;
    }
    return 0;
}

static void test_expand(void **state)
{
    (void)state;
    const sl_event *ev = parse(ev1);
    char *out = NULL;
    const char *miss = NULL;
    size_t len = 0, mlen = 0;
    assert_int_equal(sl_ce_expand("o-{type}-{region}.{n}", ev, NULL, &out, &len, &miss, &mlen), 0);
    assert_string_equal(out, "o-t.x-eu.7");
    assert_int_equal(len, 10);
    free(out);
    assert_int_equal(sl_ce_expand("{region}", ev, upper, &out, NULL, &miss, &mlen), 0);
    assert_string_equal(out, "EU");
    free(out);
    out = NULL;
    assert_int_equal(sl_ce_expand("x-{tenant}-{type}", ev, NULL, &out, NULL, &miss, &mlen),
                     SL_EINVAL);
    assert_null(out);
    assert_int_equal(mlen, 6);
    assert_memory_equal(miss, "tenant", 6);
    assert_int_equal(sl_ce_expand("plain", NULL, NULL, &out, NULL, &miss, &mlen), 0);
    assert_string_equal(out, "plain");
    free(out);
    assert_int_equal(sl_ce_expand("{id}", NULL, NULL, &out, NULL, &miss, &mlen), SL_EINVAL);
    assert_true(sl_ce_has_placeholder("a{b}"));
    assert_false(sl_ce_has_placeholder("a{b"));
    assert_false(sl_ce_has_placeholder("ab"));
}

static void test_template_check(void **state)
{
    (void)state;
    sl_error err = {0};
    assert_int_equal(sl_ce_template_check("orders-{type}-{lane}", &err), 0);
    assert_int_equal(sl_ce_template_check("plain.topic", &err), 0);
    const char *bad[] = {"a-{type", "a-type}", "a-{}", "a-{Type}", "a-{ty{pe}}", "{a-b}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&err, 0, sizeof err);
        if (sl_ce_template_check(bad[i], &err) != SL_EINVAL || !strstr(err.msg, bad[i]))
            fail_msg("template %s: accepted or not named: %s", bad[i], err.msg);
    }
}

static int collect(void *ud, const char *name, size_t nlen, const char *v, size_t vlen)
{
    sl_buf_printf(ud, "%.*s=%.*s;", (int)nlen, name, (int)vlen, v);
    return 0;
}

static int stop_at_type(void *ud, const char *name, size_t nlen, const char *v, size_t vlen)
{
    (void)ud;
    (void)v;
    (void)vlen;
    return nlen == 4 && memcmp(name, "type", 4) == 0 ? SL_EIO : 0;
}

static void test_binary_attrs(void **state)
{
    (void)state;
    const sl_event *ev = parse(ev1);
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_ce_binary_attrs(ev, collect, &b), 0);
    sl_buf_append(&b, "", 1);
    assert_string_equal((const char *)b.data, "specversion=1.0;id=e1;source=/s;type=t.x;"
                                              "subject=a b/\xc3\xa9;partitionkey=pk;region=eu;n=7;"
                                              "ok=true;");
    sl_buf_free(&b);
    assert_int_equal(sl_ce_binary_attrs(ev, stop_at_type, NULL), SL_EIO);
    bool oom = true;
    char *ct = sl_ce_content_type(ev, &oom);
    assert_false(oom);
    assert_string_equal(ct, "application/json");
    free(ct);
    ct = sl_ce_content_type(parse("{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/s\","
                                  "\"type\":\"t\"}"),
                            &oom);
    assert_null(ct);
    assert_false(oom);
}

static void expect_data(const char *json, const char *want)
{
    const sl_event *ev = parse(json);
    bool oom = false;
    char *ct = sl_ce_content_type(ev, &oom);
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_ce_binary_data(ev, ct, &b), 0);
    if (b.len != strlen(want) || (b.len && memcmp(b.data, want, b.len)))
        fail_msg("%s: data is \"%.*s\", want \"%s\"", json, (int)b.len, (const char *)b.data, want);
    sl_buf_free(&b);
    free(ct);
}

static void test_binary_data(void **state)
{
    (void)state;
    const char *head = "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/s\",\"type\":\"t\"";
    char json[512];
    snprintf(json, sizeof json, "%s,\"data\":{\"a\": [1, \"x\"]}}", head);
    expect_data(json, "{\"a\": [1, \"x\"]}");
    snprintf(json, sizeof json, "%s,\"datacontenttype\":\"text/plain\",\"data\":\"hi \\\"x\\\"\"}",
             head);
    expect_data(json, "hi \"x\"");
    snprintf(json, sizeof json, "%s,\"data\":\"json string\"}", head);
    expect_data(json, "\"json string\"");
    snprintf(json, sizeof json, "%s,\"data_base64\":\"\\u0061\\u0047\\u006b\\u002B\"}", head);
    expect_data(json, "hi>");
    snprintf(json, sizeof json, "%s}", head);
    expect_data(json, "");
}

/* ---- target.kafka without a broker ---------------------------------------------- */

static int64_t clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The Kafka keys of a config made by kcfg() (each gets its own, from a pool
 * that lives as long as the test, as a config outlives its targets). */
#define K(c) ((sl_target_kafka_conf *)(c).conf)

static sl_target_config kcfg(void)
{
    static sl_target_kafka_conf pool[32];
    static size_t used;
    assert_true(used < sizeof pool / sizeof *pool);
    sl_target_kafka_conf *k = &pool[used++];
    *k = (sl_target_kafka_conf){.timeout_ms = 1000, .body = SL_HTTP_BODY_BINARY};
    sl_target_config c = {
        .ops = &sl_target_kafka_ops, .kind_name = "kafka", .ordered = true, .conf = k};
    K(c)->brokers = (char *)"127.0.0.1:1";
    K(c)->topic = (char *)"t-{type}";
    return c;
}

static void test_kafka_check(void **state)
{
    (void)state;
    const sl_target_ops *ops = &sl_target_kafka_ops;
    assert_non_null(ops);
    assert_non_null(ops->check);
    sl_target_config c = kcfg();
    sl_error err = {0};
    assert_int_equal(ops->check(&c, &err), 0);
    char p1[] = "linger.ms=1", p2[] = "no.such.property=1";
    char *props[] = {p1, p2};
    K(c)->properties = props;
    K(c)->nproperties = 2;
    assert_int_equal(ops->check(&c, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "no.such.property"));
    K(c)->nproperties = 1;
    K(c)->compression = (char *)"brotli";
    assert_int_equal(ops->check(&c, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "brotli"));
    K(c)->compression = NULL;
    K(c)->topic = (char *)"bad topic";
    assert_int_equal(ops->check(&c, &err), SL_EINVAL);
    K(c)->topic = (char *)"t-{type";
    assert_int_equal(ops->check(&c, &err), SL_EINVAL);
    K(c)->topic = (char *)"t";
    K(c)->key = (char *)"{a}{";
    assert_int_equal(ops->check(&c, &err), SL_EINVAL);
}

typedef struct got {
    int n, status[4];
    char reason[4][SL_ERROR_MAX];
} got;

static void on_done(void *ctx, size_t i, int status, const char *reason)
{
    got *g = ctx;
    g->n++;
    g->status[i] = status;
    snprintf(g->reason[i], sizeof g->reason[i], "%s", reason ? reason : "");
}

/* Payloads refused before they reach librdkafka complete at once; close()
 * with nothing outstanding frees everything (ASan checks); after cancel()
 * every payload completes "shutting down". */
static void test_kafka_refusals(void **state)
{
    (void)state;
    const sl_target_ops *ops = &sl_target_kafka_ops;
    sl_target_config c = kcfg();
    sl_target_env env = {.rule = "r"};
    void *impl = NULL;
    sl_error err = {0};
    assert_int_equal(ops->open(&c, &env, &impl, &err), 0);
    const char *notce = "{\"x\":1}";
    const char *bad_topic = "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/s\","
                            "\"type\":\"a b\"}";
    const char *no_type_attr = "not json";
    sl_delivery d[3] = {{notce, strlen(notce), ""},
                        {bad_topic, strlen(bad_topic), ""},
                        {no_type_attr, strlen(no_type_attr), "blue"}};
    got g = {0};
    ops->deliver(impl, d, 3, on_done, &g);
    assert_int_equal(g.n, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(g.status[i], SL_EINVAL);
    assert_non_null(strstr(g.reason[0], "CloudEvent"));
    assert_non_null(strstr(g.reason[1], "not a valid topic name"));
    /* Refusals are not a health problem; the unreachable broker of this
     * test may be, once librdkafka noticed it (timing). */
    char msg[256];
    if (ops->health(impl, msg, sizeof msg))
        assert_non_null(strstr(msg, "broker"));
    ops->cancel(impl);
    memset(&g, 0, sizeof g);
    ops->deliver(impl, d, 1, on_done, &g);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.status[0], SL_ESHUTDOWN);
    ops->close(impl);
}

/* librdkafka's queue is full (no broker, room for 2 records): deliver()
 * waits it out for at most the record timeout, then completes the record
 * retryable with a reason naming the topic, and (ordered) the rest of the
 * call too without waiting again; close() completes the queued two. */
static void test_kafka_queue_full(void **state)
{
    (void)state;
    const sl_target_ops *ops = &sl_target_kafka_ops;
    sl_target_config c = kcfg();
    char p1[] = "queue.buffering.max.messages=2";
    char *props[] = {p1};
    K(c)->properties = props;
    K(c)->nproperties = 1;
    sl_target_env env = {.rule = "r"};
    void *impl = NULL;
    sl_error err = {0};
    const char *ev = "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/s\",\"type\":\"x\"}";
    sl_delivery d[4];
    for (int i = 0; i < 4; i++)
        d[i] = (sl_delivery){ev, strlen(ev), ""};
    got g;
    double took = 0;
    /* On a loaded machine librdkafka may let a queued record go (failed)
     * before the third is produced, so the queue is not full that time:
     * such an attempt is repeated, a few times at most. */
    for (int attempt = 0; attempt < 3; attempt++) {
        memset(&g, 0, sizeof g);
        assert_int_equal(ops->open(&c, &env, &impl, &err), 0);
        double t0 = (double)clock_ms();
        ops->deliver(impl, d, 4, on_done, &g);
        took = (double)clock_ms() - t0;
        if (g.n == 2 && g.status[2] != 0)
            break;
        ops->close(impl);
    }
    assert_int_equal(g.n, 2); /* the first two wait in librdkafka's queue */
    assert_int_equal(g.status[2], SL_EIO);
    assert_non_null(strstr(g.reason[2], "t-x"));
    assert_non_null(strstr(g.reason[2], "ueue full"));
    assert_int_equal(g.status[3], SL_EDEFERRED); /* held behind it, not sent */
    if (took > 3000)
        fail_msg("deliver() took %.0f ms on a full queue (timeout 1 s)", took);
    ops->close(impl);
    assert_int_equal(g.n, 4);
    assert_int_not_equal(g.status[0], 0);
    assert_int_not_equal(g.status[1], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attr),           cmocka_unit_test(test_expand),
        cmocka_unit_test(test_template_check), cmocka_unit_test(test_binary_attrs),
        cmocka_unit_test(test_binary_data),    cmocka_unit_test(test_kafka_check),
        cmocka_unit_test(test_kafka_refusals), cmocka_unit_test(test_kafka_queue_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
