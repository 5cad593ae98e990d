/*
 * tests/integration/test_http_params.c — the edges of the HTTP API that
 * issue 16 §5 found, on the real `bin/sluice serve`: query parameters an
 * endpoint does not take are refused (every endpoint), `?ack=` per publish
 * (more durability than the set's, never less), and binary-mode text
 * payloads stored as text and delivered back byte for byte by target.http's
 * binary mode. The harness is itest.h; the receiver receiver.h.
 */
#include "itest.h"

#include "core/base/buf.h"
#include "receiver.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_S 20.0

/* The error message of an answer ("" when there is none). */
static const char *message_of(json_t *j)
{
    const char *m = json_string_value(json_object_get(j, "message"));
    return m ? m : "";
}

/* Asserts r is a 400 with code whose message holds every string of want
 * (NULL-terminated). */
static void expect_400(const it_resp *r, const char *what, const char *code,
                       const char *const *want)
{
    it_expect_error(r, 400, code);
    json_t *j = it_parse_json(r);
    for (size_t i = 0; want && want[i]; i++)
        if (!strstr(message_of(j), want[i]))
            fail_msg("%s: the message \"%s\" does not say \"%s\"", what, message_of(j), want[i]);
    json_decref(j);
}

static it_resp call(it_server *s, const char *method, const char *path, const char *ctype,
                    const char *body)
{
    it_resp r;
    it_call k = {.method = method,
                 .path = path,
                 .ctype = ctype,
                 .body = body,
                 .len = body ? strlen(body) : 0};
    if (it_http(NULL, s->port, &k, &r))
        fail_msg("%s %s: %s", method, path, r.err);
    return r;
}

/* ---- unknown query parameters -------------------------------------------------- */

/* Every endpoint refuses a parameter it does not take, before doing
 * anything: nothing is stored, redriven, replayed or dropped. The message
 * names the parameter and what the endpoint takes. */
static void test_unknown_parameters(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"base\" { partitions = 1 }\n"
                    "set \"copy\" { partitions = 1 }\n"
                    "rule \"r1\" { set = \"base\", target = target.set { set = \"copy\" } }\n");
    it_start_config(s, cfg, WAIT_S);
    char *ev = it_event("e1", NULL);
    int p;
    int64_t off;
    it_post_one(s, "base", ev, &p, &off);

    /* the acceptance check of issue 16 */
    it_resp r = it_get(s, "/v1/sets/base/events?partition=0&offset=0&maxx=5");
    expect_400(
        &r, "maxx", "UnknownParameter",
        (const char *const[]){"\"maxx\"", "partition, offset, from, max, wait_ms, lane", NULL});
    it_resp_free(&r);

    static const struct {
        const char *method, *path, *takes;
    } eps[] = {
        {"GET", "/v1/sets/base/events", "only partition, offset"},
        {"POST", "/v1/sets/base/events", "only ack"},
        {"GET", "/v1/sets", "no query parameters"},
        {"GET", "/v1/sets/base", "no query parameters"},
        {"POST", "/v1/sets/base/redrive", "only to, max"},
        {"GET", "/v1/rules", "no query parameters"},
        {"POST", "/v1/rules/r1/replay", "only from, to"},
        {"GET", "/v1/rules/r1/replays", "no query parameters"},
        {"GET", "/v1/lanes", "no query parameters"},
        {"DELETE", "/v1/lanes/feature-x", "no query parameters"},
        {"GET", "/v1/sources", "no query parameters"},
        {"POST", "/v1/patterns/test", "no query parameters"},
        {"GET", "/healthz", "no query parameters"},
        {"GET", "/metrics", "no query parameters"},
        {"GET", "/ui/", "no query parameters"},
        {"GET", "/ui/app.js", "no query parameters"},
    };
    for (size_t i = 0; i < sizeof eps / sizeof *eps; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s?bogus=1&durable", eps[i].path);
        const char *body = strcmp(eps[i].method, "POST") ? NULL : ev;
        r = call(s, eps[i].method, path, body ? IT_CT_CE : NULL, body);
        char what[300];
        snprintf(what, sizeof what, "%s %s", eps[i].method, path);
        expect_400(&r, what, "UnknownParameter",
                   (const char *const[]){"parameters \"bogus\", \"durable\"", eps[i].takes, NULL});
        it_resp_free(&r);
    }
    /* Refused with the headers, before the body is read: a body over
     * --max-request (10 MiB) gets the 400, not 413, and no set is made. */
    size_t big = 11u << 20;
    char *zeros = calloc(1, big);
    assert_non_null(zeros);
    it_call k = {.method = "POST",
                 .path = "/v1/sets/never/events?foo=1",
                 .ctype = IT_CT_CE,
                 .body = zeros,
                 .len = big};
    if (it_http(NULL, s->port, &k, &r))
        fail_msg("POST of 11 MiB with ?foo=1: %s", r.err);
    it_expect_error(&r, 400, "UnknownParameter");
    it_resp_free(&r);
    free(zeros);
    r = it_get(s, "/v1/sets/never");
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);

    /* Nothing was stored by the refused publish. */
    it_evs e = it_read_all(s, "base", 0, "*");
    assert_int_equal(e.n, 1);
    it_evs_free(&e);

    /* Repeated, valueless and empty-named parameters. */
    r = it_get(s, "/v1/sets/base/events?partition=0&max=1&max=2");
    expect_400(&r, "max twice", "InvalidParameter",
               (const char *const[]){"\"max\"", "more than once", NULL});
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/base/events?partition");
    expect_400(&r, "no value", "InvalidParameter",
               (const char *const[]){"\"partition\"", "no value", NULL});
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/base/events?=5");
    expect_400(&r, "empty name", "UnknownParameter", (const char *const[]){"\"\"", NULL});
    it_resp_free(&r);
    r = it_post(s, "base", IT_CT_CE, NULL, ev, SIZE_MAX); /* (no query at all) */
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);

    /* What the endpoints take still works, empty pieces included. */
    r = it_get(s, "/v1/sets/base/events?&partition=0&&offset=0&max=5&lane=*&");
    assert_int_equal(r.status, 200);
    json_t *j = it_parse_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "events")), 2);
    json_decref(j);
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/base/events?from=beginning&wait_ms=0");
    assert_int_equal(r.status, 200);
    it_resp_free(&r);
    free(ev);
    s->passed = true;
}

/* ---- ?ack= ----------------------------------------------------------------------- */

/* The fdatasyncs the server made so far (/metrics). */
static double fsyncs(it_server *s)
{
    it_resp r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    double n = it_metric(it_body(&r), "sluice_fsync_seconds_count");
    it_resp_free(&r);
    return n;
}

static const char *ack_of(const it_resp *r)
{
    json_t *j = it_parse_json(r);
    static char ack[32];
    const char *a = json_string_value(json_object_get(j, "ack"));
    snprintf(ack, sizeof ack, "%s", a ? a : "(none)");
    json_decref(j);
    return ack;
}

static void test_ack_per_request(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    /* lazy lingers a minute: without a durable publish of its own, nothing
     * would be written (let alone synced) while the test runs. */
    it_write_config(s, cfg,
                    "set \"lazy\" { partitions = 1, ack = \"buffer\", linger = \"60s\" }\n"
                    "set \"strict\" { partitions = 1 }\n");
    it_start_config(s, cfg, WAIT_S);
    char *ev = it_event("a1", NULL);

    it_resp r = call(s, "POST", "/v1/sets/lazy/events", IT_CT_CE, ev);
    json_decref(it_expect_results(&r, 1, 0));
    assert_string_equal(ack_of(&r), "buffer");
    it_resp_free(&r);

    /* ?ack=durable on a buffer set: answered once its events (and the
     * buffered one before them) are appended and synced. */
    double before = fsyncs(s);
    r = call(s, "POST", "/v1/sets/lazy/events?ack=durable", IT_CT_CE, ev);
    json_t *a = it_expect_results(&r, 1, 0);
    assert_string_equal(ack_of(&r), "durable");
    assert_int_equal(it_res_off(a, 0), 1);
    json_decref(a);
    it_resp_free(&r);
    double after = fsyncs(s);
    if (!(after > before))
        fail_msg("?ack=durable was answered with %g fdatasyncs, as many as before", after);
    r = it_get(s, "/v1/sets/lazy/events?partition=0&offset=0&max=10");
    a = it_parse_json(&r);
    if (json_array_size(json_object_get(a, "events")) != 2)
        fail_msg("after ?ack=durable the log holds: %s", it_body(&r));
    json_decref(a);
    it_resp_free(&r);

    /* batches and NDJSON say it too */
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "%s\n%s\n", ev, ev);
    r = call(s, "POST", "/v1/sets/lazy/events?ack=durable", "application/x-ndjson",
             (const char *)b.data);
    json_decref(it_expect_results(&r, 2, 0));
    assert_string_equal(ack_of(&r), "durable");
    it_resp_free(&r);
    sl_buf_free(&b);

    /* never less than the set's */
    r = call(s, "POST", "/v1/sets/strict/events?ack=buffer", IT_CT_CE, ev);
    json_decref(it_expect_results(&r, 1, 0));
    assert_string_equal(ack_of(&r), "durable");
    it_resp_free(&r);
    r = call(s, "POST", "/v1/sets/lazy/events?ack=buffer", IT_CT_CE, ev);
    json_decref(it_expect_results(&r, 1, 0));
    assert_string_equal(ack_of(&r), "buffer");
    it_resp_free(&r);

    /* a bad value: named, nothing stored */
    static const char *const bad[] = {"bogus", "", "Durable"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[128], quoted[32];
        snprintf(path, sizeof path, "/v1/sets/strict/events?ack=%s", bad[i]);
        snprintf(quoted, sizeof quoted, "ack \"%s\"", bad[i]);
        r = call(s, "POST", path, IT_CT_CE, ev);
        expect_400(&r, path, "InvalidParameter", (const char *const[]){quoted, NULL});
        it_resp_free(&r);
    }
    it_evs e = it_read_all(s, "strict", 0, "*");
    assert_int_equal(e.n, 1);
    it_evs_free(&e);
    free(ev);
    s->passed = true;
}

/* ---- binary-mode text payloads ------------------------------------------------ */

/* One record read back from the mock cluster: its value, and the ce_id and
 * content-type headers. */
typedef struct krec {
    char id[32], ctype[256];
    char *value;
    size_t len;
} krec;

static void header_text(rd_kafka_headers_t *hs, const char *name, char *out, size_t cap)
{
    const void *v;
    size_t n;
    out[0] = '\0';
    if (hs && !rd_kafka_header_get_last(hs, name, &v, &n) && v)
        snprintf(out, cap, "%.*s", (int)n, (const char *)v);
}

/* Every record of topic (one partition) once it holds want, read with a
 * librdkafka consumer from the beginning; fails the test after WAIT_S.
 * Returns how many were read into out[0..cap). */
static size_t consume(const char *boot, const char *topic, krec *out, size_t cap, size_t want)
{
    char es[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", boot, es, sizeof es);
    rd_kafka_conf_set(conf, "group.id", "itest", es, sizeof es);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", es, sizeof es);
    rd_kafka_conf_set(conf, "log_level", "0", es, sizeof es);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *pl = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(pl, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, pl);
    rd_kafka_topic_partition_list_destroy(pl);
    size_t n = 0;
    for (double end = it_mono() + WAIT_S; n < want && it_mono() < end;) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (!m->err && n < cap) {
            krec *r = &out[n++];
            rd_kafka_headers_t *hs = NULL;
            rd_kafka_message_headers(m, &hs);
            header_text(hs, "ce_id", r->id, sizeof r->id);
            header_text(hs, "content-type", r->ctype, sizeof r->ctype);
            r->len = m->payload ? m->len : 0;
            r->value = malloc(r->len + 1);
            assert_non_null(r->value);
            if (r->len)
                memcpy(r->value, m->payload, r->len);
            r->value[r->len] = '\0';
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (n < want)
        fail_msg("topic %s: %zu records, want %zu", topic, n, want);
    return n;
}

/* Textual bodies are stored as a JSON string `data` (the CloudEvents JSON
 * format), others as data_base64; target.http's binary mode gives back the
 * same bytes and Content-Type either way. */
static void test_binary_text_round_trip(void **state)
{
    it_server *s = *state;
    rx_receiver *rx = rx_new();
    assert_non_null(rx);
    assert_int_equal(rx_start(rx, 0), 0);
    it_kmock mk;
    it_kmock_start(&mk, (const char *const[]){"--brokers", "1", "--topic", "txt:1", NULL});
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "set \"bin\" { partitions = 1 }\n"
                    "rule \"out\" { set = \"bin\",\n"
                    "  target = target.http { url = \"http://127.0.0.1:%d/{id}\", body = "
                    "\"binary\" } }\n"
                    "rule \"kout\" { set = \"bin\", target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"txt\", properties = { [\"linger.ms\"] = 1 } } }\n",
                    rx_port(rx), mk.boot);
    it_start_config(s, cfg, WAIT_S);
    static const struct {
        const char *ctype, *body;
        size_t len;
        const char *field; /* stored as: "data" (a string), "json" (data as JSON), "data_base64" */
    } cases[] = {
        {"application/xml", "<order id=\"1\">\r\n  <n>caf\xc3\xa9</n>\n</order>\n", 0, "data"},
        {"text/plain; charset=utf-8", "h\xc3\xa9llo \"w\xc3\xb6rld\" \\ \t\x01 \xf0\x9f\x98\x80", 0,
         "data"},
        {"text/csv", "a,b\n1,\xc3\xa9\n", 0, "data"},
        {"application/soap+xml", "<e/>", 0, "data"},
        {"text/plain", "bad \xff\xfe utf-8", 0, "data_base64"},
        {"application/octet-stream",
         "\x00\x01\xfe\xff"
         "A",
         5, "data_base64"},
        {"text/plain; charset=iso-8859-1", "caf\xe9", 0, "data_base64"},
        /* mentions json but is text: goes out as the text, not as a quoted JSON string */
        {"text/x-json5", "{a: 1}", 0, "data"},
        {"application/problem+json", "{\"a\":1}", 0, "json"},
    };
    size_t n = sizeof cases / sizeof *cases;
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "ce-id: t%zu", i);
        const char *hdrs[] = {"ce-specversion: 1.0", id, "ce-source: /itest", "ce-type: t", NULL};
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].body);
        it_resp r = it_post(s, "bin", cases[i].ctype, hdrs, cases[i].body, len);
        json_t *a = it_expect_results(&r, 1, 0);
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)it_res_off(a, 0));
        it_evs e = it_read_events(s, "bin", 0, q);
        assert_int_equal(e.n, 1);
        json_t *got = json_loads(e.v[0].text, 0, NULL);
        assert_non_null(got);
        bool as_json = strcmp(cases[i].field, "json") == 0;
        const char *field = as_json ? "data" : cases[i].field;
        const char *other = strcmp(field, "data") ? "data" : "data_base64";
        json_t *v = json_object_get(got, field);
        if (!v || json_object_get(got, other))
            fail_msg("%s: stored as %s, want %s", cases[i].ctype, e.v[0].text, cases[i].field);
        if (as_json && !json_is_object(v))
            fail_msg("%s: data is not the body as JSON: %s", cases[i].ctype, e.v[0].text);
        if (strcmp(cases[i].field, "data") == 0 &&
            (!json_is_string(v) || json_string_length(v) != len ||
             memcmp(json_string_value(v), cases[i].body, len) != 0))
            fail_msg("%s: data is not the body as a string: %s", cases[i].ctype, e.v[0].text);
        json_decref(got);
        it_evs_free(&e);
        json_decref(a);
        it_resp_free(&r);
    }
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(rx_count(rx), n);
    for (size_t i = 0; i < n; i++) {
        char path[16];
        snprintf(path, sizeof path, "/t%zu", i);
        const rx_req *q = NULL;
        for (size_t k = 0; k < rx_count(rx) && !q; k++)
            if (strcmp(rx_req_at(rx, k)->path, path) == 0)
                q = rx_req_at(rx, k);
        if (!q)
            fail_msg("no delivery of t%zu", i);
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].body);
        if (q->body_len != len || memcmp(q->body, cases[i].body, len) != 0)
            fail_msg("%s: delivered %zu bytes \"%s\", not the %zu bytes sent", cases[i].ctype,
                     q->body_len, q->body, len);
        char ct[256];
        const char *got = rx_header(q, "content-type", ct, sizeof ct);
        if (!got || strcmp(got, cases[i].ctype) != 0)
            fail_msg("t%zu: delivered Content-Type \"%s\", want \"%s\"", i, got ? got : "(none)",
                     cases[i].ctype);
    }
    /* target.kafka's binary mode: the same bytes as the value, the type as
     * the content-type header */
    krec recs[16];
    memset(recs, 0, sizeof recs);
    size_t nk = consume(mk.boot, "txt", recs, 16, n);
    for (size_t i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "t%zu", i);
        const krec *k = NULL;
        for (size_t j = 0; j < nk && !k; j++)
            if (strcmp(recs[j].id, id) == 0)
                k = &recs[j];
        if (!k)
            fail_msg("no Kafka record with ce_id %s", id);
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].body);
        if (k->len != len || memcmp(k->value, cases[i].body, len) != 0)
            fail_msg("%s: Kafka record value \"%s\" (%zu bytes), not the %zu bytes sent",
                     cases[i].ctype, k->value, k->len, len);
        if (strcmp(k->ctype, cases[i].ctype) != 0)
            fail_msg("%s: Kafka record content-type \"%s\"", cases[i].ctype, k->ctype);
    }
    for (size_t j = 0; j < nk; j++)
        free(recs[j].value);
    it_kmock_stop(&mk);
    rx_free(rx);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_http_params"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_unknown_parameters),
        T(test_ack_per_request),
        T(test_binary_text_round_trip),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
