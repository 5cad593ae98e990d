/*
 * tests/integration/test_server_api.c — the HTTP API of the real `bin/sluice
 * serve`, driven with libcurl: the content modes, every error code, lanes,
 * partitioning, long-polling, from=, the listings of sets and /metrics
 * (issue 3, section 6). The faults (restarts, crashes, back-pressure, slow
 * clients) are in test_server_faults.c; the harness is itest.h.
 */
#include "itest.h"
#include "core/base/clock.h"

#include "core/base/buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Asserts that entry i failed with code and, if want is given, that its
 * message contains want. */
static void expect_entry_error(json_t *answer, size_t i, const char *code, const char *want)
{
    const char *e = json_string_value(json_object_get(it_result(answer, i), "error"));
    const char *m = json_string_value(json_object_get(it_result(answer, i), "message"));
    if (!e || strcmp(e, code) != 0)
        fail_msg("entry %zu: want %s, got %s (%s)", i, code, e ? e : "success", m ? m : "");
    if (want && !strstr(m, want))
        fail_msg("entry %zu: message \"%s\" does not mention %s", i, m, want);
}

/* The served form of a posted compact event that already had a time. */
static char *decorated(const char *posted, const char *set, int part, int64_t off)
{
    char *s;
    if (asprintf(&s, "%.*s,\"sluiceset\":\"%s\",\"sluicepartition\":%d,\"sluiceoffset\":%lld}",
                 (int)strlen(posted) - 1, posted, set, part, (long long)off) < 0)
        fail_msg("out of memory");
    return s;
}

/* Asserts that the event stored at (part, off) is exactly want. */
static void expect_stored(it_server *s, const char *set, int part, int64_t off, const char *want)
{
    char q[64];
    snprintf(q, sizeof q, "offset=%lld&max=1&lane=*", (long long)off);
    it_evs e = it_read_events(s, set, part, q);
    if (e.n != 1)
        fail_msg("%s/%d offset %lld: %zu events", set, part, (long long)off, e.n);
    if (strcmp(e.v[0].text, want) != 0)
        fail_msg("%s/%d offset %lld holds\n  %s\nwant\n  %s", set, part, (long long)off,
                 e.v[0].text, want);
    it_evs_free(&e);
}

/* ---- content modes -------------------------------------------------------- */

static void test_content_modes(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);

    /* Structured: stored as posted, plus the attributes sluice adds on read. */
    const char *st = "{\"specversion\":\"1.0\",\"id\":\"s1\",\"source\":\"/itest\",\"type\":\"t\","
                     "\"time\":\"2024-05-01T10:00:00.000Z\",\"subject\":\"x\","
                     "\"data\":{\"a\":[1,2.5,{\"b\":null}],\"s\":\"caf\\u00e9\"}}";
    int p;
    int64_t o;
    it_post_one(s, "modes", st, &p, &o);
    char *want = decorated(st, "modes", p, o);
    expect_stored(s, "modes", p, o, want);
    free(want);

    /* Batched: a JSON array, results in order. */
    const char *ev[3] = {
        "{\"specversion\":\"1.0\",\"id\":\"b0\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-05-01T10:00:01.000Z\"}",
        "{\"specversion\":\"1.0\",\"id\":\"b1\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-05-01T10:00:02.000Z\",\"data\":\"text\"}",
        "{\"specversion\":\"1.0\",\"id\":\"b2\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-05-01T10:00:03.000Z\",\"data_base64\":\"AAE=\"}"};
    char *batch;
    assert_true(asprintf(&batch, "[%s, %s,\n%s]", ev[0], ev[1], ev[2]) > 0);
    it_resp r = it_post(s, "modes", IT_CT_BATCH, NULL, batch, SIZE_MAX);
    json_t *a = it_expect_results(&r, 3, 0);
    for (size_t i = 0; i < 3; i++) {
        want = decorated(ev[i], "modes", it_res_part(a, i), it_res_off(a, i));
        expect_stored(s, "modes", it_res_part(a, i), it_res_off(a, i), want);
        free(want);
    }
    json_decref(a);
    it_resp_free(&r);
    free(batch);

    /* Binary: ce-* headers (percent-decoded) are the attributes, the body is data. */
    static const struct {
        const char *ctype, *body;
        size_t len;
        const char *field, *value; /* data as JSON text, or data_base64; len 0: strlen */
    } bin[] = {
        {"application/json", "{\"k\": [1, 2], \"t\": \"x\"}", 0, "data",
         "{\"k\":[1,2],\"t\":\"x\"}"},
        {"text/plain", "h\xc3\xa9llo w\xc3\xb6rld", 0, "data", "\"h\xc3\xa9llo w\xc3\xb6rld\""},
        {"application/octet-stream",
         "\x00\x01\xfe\xff"
         "A",
         5, "data_base64", "\"AAH+/0E=\""},
    };
    for (size_t i = 0; i < sizeof bin / sizeof *bin; i++) {
        char id[32];
        snprintf(id, sizeof id, "ce-id: bin%zu", i);
        const char *hdrs[] = {"ce-specversion: 1.0",
                              id,
                              "ce-source: /itest",
                              "ce-type: itest.binary",
                              "ce-subject: caf%C3%A9",
                              "ce-myext: hello%20world%21",
                              NULL};
        r = it_post(s, "modes", bin[i].ctype, hdrs, bin[i].body,
                    bin[i].len ? bin[i].len : SIZE_MAX);
        a = it_expect_results(&r, 1, 0);
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)it_res_off(a, 0));
        it_evs e = it_read_events(s, "modes", it_res_part(a, 0), q);
        assert_int_equal(e.n, 1);
        json_t *got = json_loads(e.v[0].text, 0, NULL);
        json_t *wantv = json_loads(bin[i].value, JSON_DECODE_ANY, NULL);
        assert_non_null(got);
        assert_non_null(wantv);
        assert_string_equal(json_string_value(json_object_get(got, "id")), id + 7);
        assert_string_equal(json_string_value(json_object_get(got, "subject")), "caf\xc3\xa9");
        assert_string_equal(json_string_value(json_object_get(got, "myext")), "hello world!");
        assert_string_equal(json_string_value(json_object_get(got, "type")), "itest.binary");
        assert_string_equal(json_string_value(json_object_get(got, "datacontenttype")),
                            bin[i].ctype);
        if (!json_equal(json_object_get(got, bin[i].field), wantv))
            fail_msg("binary %s: %s is not %s in %s", bin[i].ctype, bin[i].field, bin[i].value,
                     e.v[0].text);
        assert_null(json_object_get(got, strcmp(bin[i].field, "data") ? "data" : "data_base64"));
        json_decref(got);
        json_decref(wantv);
        it_evs_free(&e);
        json_decref(a);
        it_resp_free(&r);
    }

    /* NDJSON: blank and whitespace-only lines are skipped, CRLF is fine, the
     * last line may lack its newline. */
    const char *nd =
        "{\"specversion\":\"1.0\",\"id\":\"n0\",\"source\":\"/itest\",\"type\":\"t\"}\r\n"
        "\r\n"
        "   \t\n"
        "\n"
        "{\"specversion\":\"1.0\",\"id\":\"n1\",\"source\":\"/itest\",\"type\":\"t\"}\n"
        "{\"specversion\":\"1.0\",\"id\":\"n2\",\"source\":\"/itest\",\"type\":\"t\"}";
    r = it_post(s, "modes", IT_CT_NDJSON, NULL, nd, SIZE_MAX);
    a = it_expect_results(&r, 3, 0);
    for (size_t i = 0; i < 3; i++) {
        char q[64], id[8];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)it_res_off(a, i));
        snprintf(id, sizeof id, "n%zu", i);
        it_evs e = it_read_events(s, "modes", it_res_part(a, i), q);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, id);
        /* sluice filled in the missing time. */
        json_t *got = json_loads(e.v[0].text, 0, NULL);
        const char *t = json_string_value(json_object_get(got, "time"));
        assert_non_null(t);
        assert_int_equal(strlen(t), 24);
        assert_int_equal(t[23], 'Z');
        json_decref(got);
        it_evs_free(&e);
    }
    json_decref(a);
    it_resp_free(&r);
    /* Other NDJSON media types and Content-Type parameters are accepted. */
    r = it_post(s, "modes", "application/x-ndjson; charset=utf-8", NULL, nd, SIZE_MAX);
    json_decref(it_expect_results(&r, 3, 0));
    it_resp_free(&r);
    r = it_post(s, "modes", "Application/JSONL", NULL, nd, SIZE_MAX);
    json_decref(it_expect_results(&r, 3, 0));
    it_resp_free(&r);
    s->passed = true;
}

/* The HTTP binding maps Content-Type to datacontenttype directly, parameters
 * included. */
static void test_binary_keeps_content_type(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    const char *hdrs[] = {"ce-specversion: 1.0", "ce-id: t1", "ce-source: /itest", "ce-type: t",
                          NULL};
    it_resp r = it_post(s, "ctype", "text/plain; charset=utf-8", hdrs, "hello", SIZE_MAX);
    json_t *a = it_expect_results(&r, 1, 0);
    it_evs e = it_read_events(s, "ctype", it_res_part(a, 0), "");
    assert_int_equal(e.n, 1);
    json_t *got = json_loads(e.v[0].text, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(got, "data")), "hello");
    const char *dct = json_string_value(json_object_get(got, "datacontenttype"));
    if (!dct || strcmp(dct, "text/plain; charset=utf-8") != 0)
        fail_msg("datacontenttype is \"%s\", want the whole Content-Type "
                 "\"text/plain; charset=utf-8\"",
                 dct ? dct : "(none)");
    json_decref(got);
    it_evs_free(&e);
    json_decref(a);
    it_resp_free(&r);
    s->passed = true;
}

/* ---- errors ----------------------------------------------------------------- */

static void test_request_errors(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char *ok = it_event("ok", NULL);
    int p;
    int64_t o;
    it_post_one(s, "errs", ok, &p, &o);
    it_resp r;

    /* 400: bodies that cannot be parsed at all. */
    static const struct {
        const char *ctype, *body, *code;
    } bad[] = {
        {IT_CT_CE, "{\"specversion\":", "InvalidJson"},
        {IT_CT_CE, "", "InvalidJson"},
        {IT_CT_CE, "{} {}", "InvalidJson"},
        {IT_CT_BATCH, "[{\"specversion\":\"1.0\"},", "InvalidJson"},
        {IT_CT_BATCH, "", "InvalidJson"},
        {IT_CT_BATCH, "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/s\",\"type\":\"t\"}",
         "InvalidBatch"},
        {IT_CT_BATCH, "\"not an array\"", "InvalidBatch"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = it_post(s, "errs", bad[i].ctype, NULL, bad[i].body, SIZE_MAX);
        it_expect_error(&r, 400, bad[i].code);
        it_resp_free(&r);
    }

    /* 413: a body over the 10 MiB request limit (also with chunked upload,
     * where no Content-Length warns the server). */
    size_t big = (10u << 20) + 1;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    r = it_post(s, "errs", IT_CT_NDJSON, NULL, huge, big);
    it_expect_error(&r, 413, "RequestTooLarge");
    it_resp_free(&r);
    const char *chunked[] = {"Transfer-Encoding: chunked", NULL};
    r = it_post(s, "errs", IT_CT_NDJSON, chunked, huge, big);
    it_expect_error(&r, 413, "RequestTooLarge");
    it_resp_free(&r);
    free(huge);

    /* 415: not one of the formats and no ce-specversion for binary mode. */
    r = it_post(s, "errs", "application/json", NULL, ok, SIZE_MAX);
    it_expect_error(&r, 415, "UnsupportedMediaType");
    it_resp_free(&r);
    r = it_post(s, "errs", NULL, NULL, ok, SIZE_MAX);
    it_expect_error(&r, 415, "UnsupportedMediaType");
    it_resp_free(&r);
    const char *ce_id_only[] = {"ce-id: 1", NULL};
    r = it_post(s, "errs", "text/plain", ce_id_only, "x", SIZE_MAX);
    it_expect_error(&r, 415, "UnsupportedMediaType");
    it_resp_free(&r);

    /* 400: a bad X-Sluice-Lane refuses the whole request. */
    static const char *const lanes[] = {
        "X-Sluice-Lane: UPPER", "X-Sluice-Lane: has space", "X-Sluice-Lane: under_score",
        "X-Sluice-Lane: 123456789012345678901234567890123", "X-Sluice-Lane: *"};
    for (size_t i = 0; i < sizeof lanes / sizeof *lanes; i++) {
        const char *h[] = {lanes[i], NULL};
        r = it_post(s, "errs", IT_CT_CE, h, ok, SIZE_MAX);
        it_expect_error(&r, 400, "InvalidLane");
        it_resp_free(&r);
    }

    /* Reads: unknown set and partition, offsets past the end, bad parameters. */
    r = it_get(s, "/v1/sets/nosuchset/events");
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/nosuchset");
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/errs/events?partition=4");
    it_expect_error(&r, 404, "NoSuchPartition");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/errs/events?partition=-1"); /* not a partition number */
    it_expect_error(&r, 400, "InvalidParameter");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/errs/events?partition=%d&offset=%lld", p, (long long)o + 2);
    it_expect_error(&r, 416, "OffsetOutOfRange");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/errs/events?partition=%d&offset=9223372036854775807", p);
    it_expect_error(&r, 416, "OffsetOutOfRange");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/errs/events?partition=%d&offset=%lld", p, (long long)o + 1);
    assert_int_equal(r.status, 200); /* the end offset itself is fine: nothing yet */
    it_resp_free(&r);
    static const char *const params[] = {"offset=abc",
                                         "offset=-1",
                                         "max=0",
                                         "max=-5",
                                         "wait_ms=60001",
                                         "from=yesterday",
                                         "offset=0&from=end",
                                         "from=2024-13-01T00:00:00Z"};
    for (size_t i = 0; i < sizeof params / sizeof *params; i++) {
        r = it_get(s, "/v1/sets/errs/events?partition=%d&%s", p, params[i]);
        it_expect_error(&r, 400, "InvalidParameter");
        it_resp_free(&r);
    }
    /* A max above what a response carries is read as that limit. */
    r = it_get(s, "/v1/sets/errs/events?partition=%d&offset=0&max=100000000", p);
    assert_int_equal(r.status, 200);
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/errs/events?lane=BAD");
    it_expect_error(&r, 400, "InvalidLane");
    it_resp_free(&r);

    /* 404 for unknown paths, 405 for a method a resource does not take. */
    r = it_get(s, "/v2/sets");
    it_expect_error(&r, 404, "NotFound");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/errs/events/extra");
    it_expect_error(&r, 404, "NotFound");
    it_resp_free(&r);
    static const struct {
        const char *method, *path;
    } m405[] = {{"DELETE", "/v1/sets/errs/events"},
                {"PUT", "/v1/sets/errs/events"},
                {"POST", "/v1/sets/errs"},
                {"DELETE", "/v1/sets/errs"}};
    for (size_t i = 0; i < sizeof m405 / sizeof *m405; i++) {
        if (it_http(NULL, s->port, &(it_call){.method = m405[i].method, .path = m405[i].path}, &r))
            fail_msg("%s %s: %s", m405[i].method, m405[i].path, r.err);
        it_expect_error(&r, 405, "MethodNotAllowed");
        it_resp_free(&r);
    }

    /* After all that, the one good event is still the only one. */
    it_evs e = it_read_all(s, "errs", p, "*");
    assert_int_equal(e.n, 1);
    assert_string_equal(e.v[0].id, "ok");
    it_evs_free(&e);
    free(ok);
    s->passed = true;
}

/* 405 also for the fixed resources /healthz and /metrics (they exist: 404
 * would say they do not). */
static void test_wrong_method_on_fixed_paths(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    static const char *const paths[] = {"/healthz", "/metrics", "/v1/sets"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        it_resp r;
        if (it_http(
                NULL, s->port,
                &(it_call){
                    .method = "POST", .path = paths[i], .ctype = IT_CT_CE, .body = "{}", .len = 2},
                &r))
            fail_msg("POST %s: %s", paths[i], r.err);
        it_expect_error(&r, 405, "MethodNotAllowed");
        it_resp_free(&r);
    }
    s->passed = true;
}

/* Set names are never paths: 400 InvalidSetName however they are spelled. */
static void test_invalid_set_names(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char *ok = it_event("x", NULL);
    char long_name[130];
    memset(long_name, 'n', 129);
    long_name[129] = '\0';
    /* A leading dot too: it would make a hidden directory ls and globs miss. */
    const char *names[] = {"..",    "%2E%2E",        ".",       long_name, "a%20b", "caf%C3%A9",
                           "a%2Fb", "..%2F..%2Fetc", ".hidden", "%2Ex",    "...x"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        it_resp r = it_post(s, names[i], IT_CT_CE, NULL, ok, SIZE_MAX);
        if (r.status != 400)
            fail_msg("POST to set \"%s\": want 400 InvalidSetName, got %ld: %s", names[i], r.status,
                     it_body(&r));
        it_expect_error(&r, 400, "InvalidSetName");
        it_resp_free(&r);
        r = it_get(s, "/v1/sets/%s/events", names[i]);
        it_expect_error(&r, 400, "InvalidSetName");
        it_resp_free(&r);
    }
    /* 128 characters is fine, and nothing escaped the data dir. */
    long_name[128] = '\0';
    it_resp r = it_post(s, long_name, IT_CT_CE, NULL, ok, SIZE_MAX);
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);
    r = it_get(s, "/v1/sets");
    json_t *j = it_parse_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "sets")), 1);
    json_decref(j);
    it_resp_free(&r);
    free(ok);
    s->passed = true;
}

static void test_no_auto_create(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--no-auto-create", NULL);
    char *ok = it_event("x", NULL);
    it_resp r = it_post(s, "newset", IT_CT_CE, NULL, ok, SIZE_MAX);
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);
    r = it_post(s, "newset", IT_CT_NDJSON, NULL, ok, SIZE_MAX);
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets/newset/events");
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);
    r = it_get(s, "/v1/sets");
    assert_int_equal(r.status, 200);
    json_t *j = it_parse_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "sets")), 0);
    json_decref(j);
    it_resp_free(&r);
    free(ok);
    s->passed = true;
}

/* Bad entries fail alone, each with its code, message and index. */
static void test_entry_errors(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    const char *lane_b[] = {"X-Sluice-Lane: b", NULL};
    const char *batch =
        "[{\"specversion\":\"1.0\",\"id\":\"ok0\",\"source\":\"/s\",\"type\":\"t\"},"
        "{\"specversion\":\"0.3\",\"id\":\"1\",\"source\":\"/s\",\"type\":\"t\"},"
        "{\"specversion\":\"1.0\",\"id\":\"2\",\"type\":\"t\"},"
        "{\"specversion\":\"1.0\",\"id\":\"3\",\"source\":\"/"
        "s\",\"type\":\"t\",\"lane\":\"Bad_L\"},"
        "{\"specversion\":\"1.0\",\"id\":\"4\",\"source\":\"/s\",\"type\":\"t\",\"lane\":\"a\"},"
        "42,"
        "{\"specversion\":\"1.0\",\"id\":7,\"source\":\"/s\",\"type\":\"t\"},"
        "{\"specversion\":\"1.0\",\"id\":\"8\",\"source\":\"/s\",\"type\":\"t\",\"Upper\":1},"
        "{\"specversion\":\"1.0\",\"id\":\"ok9\",\"source\":\"/s\",\"type\":\"t\",\"lane\":\"b\"}]";
    it_resp r = it_post(s, "entries", IT_CT_BATCH, lane_b, batch, SIZE_MAX);
    json_t *a = it_expect_results(&r, 2, 7);
    expect_entry_error(a, 1, "InvalidEvent", "specversion");
    expect_entry_error(a, 2, "MissingAttribute", "source");
    expect_entry_error(a, 3, "InvalidLane", "Bad_L");
    expect_entry_error(a, 4, "LaneConflict", "\"a\"");
    expect_entry_error(a, 5, "InvalidEvent", NULL);
    expect_entry_error(a, 6, "InvalidEvent", "id");
    expect_entry_error(a, 7, "InvalidEvent", "Upper");
    /* The good ones took the request's lane. */
    for (size_t i = 0; i < 9; i += 8) {
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1&lane=b", (long long)it_res_off(a, i));
        it_evs e = it_read_events(s, "entries", it_res_part(a, i), q);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, i ? "ok9" : "ok0");
        assert_string_equal(e.v[0].lane, "b");
        it_evs_free(&e);
    }
    json_decref(a);
    it_resp_free(&r);

    /* NDJSON: a line that is not JSON, an event over 1 MiB inside a smaller
     * request, and the message of MissingAttribute names every attribute. */
    size_t big = (1u << 20) + 1000;
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"n0\",\"source\":\"/s\",\"type\":\"t\"}\n"
                      "{\"specversion\":\"1.0\",\"id\":\"n1\",\n"
                      "{\"specversion\":\"1.0\",\"id\":\"n2\",\"source\":\"/s\",\"type\":\"t\","
                      "\"data\":\"");
    sl_buf_reserve(&b, big);
    memset(b.data + b.len, 'x', big);
    b.len += big;
    sl_buf_printf(&b, "\"}\n{\"specversion\":\"1.0\",\"source\":\"/s\"}\n"
                      "{\"specversion\":\"1.0\",\"id\":\"n4\",\"source\":\"/s\",\"type\":\"t\"}\n");
    r = it_post(s, "entries", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    a = it_expect_results(&r, 2, 3);
    expect_entry_error(a, 1, "InvalidJson", NULL);
    expect_entry_error(a, 2, "TooLarge", NULL);
    expect_entry_error(a, 3, "MissingAttribute", "id");
    expect_entry_error(a, 3, "MissingAttribute", "type");
    for (size_t i = 0; i < 5; i += 4) {
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)it_res_off(a, i));
        it_evs e = it_read_events(s, "entries", it_res_part(a, i), q);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, i ? "n4" : "n0");
        it_evs_free(&e);
    }
    json_decref(a);
    it_resp_free(&r);
    sl_buf_free(&b);

    /* Binary mode: the one event is the request, so its refusal is the
     * answer (a 4xx a CloudEvents emitter reports), naming the attribute. */
    const char *hdrs[] = {"ce-specversion: 1.0", "ce-source: /s", "ce-type: t", NULL};
    r = it_post(s, "entries", "application/json", hdrs, "{}", SIZE_MAX);
    it_expect_error(&r, 400, "MissingAttribute");
    assert_non_null(strstr(it_body(&r), "\\\"id\\\""));
    it_resp_free(&r);

    /* /metrics counts the rejections by reason. */
    r = it_get(s, "/metrics");
    assert_true(it_metric(it_body(&r), "sluice_events_rejected_total{reason=\"InvalidEvent\"}") >=
                4);
    assert_true(it_metric(it_body(&r), "sluice_events_rejected_total{reason=\"TooLarge\"}") >= 1);
    assert_true(it_metric(it_body(&r), "sluice_events_rejected_total{reason=\"LaneConflict\"}") >=
                1);
    it_resp_free(&r);
    s->passed = true;
}

/* A batch with failures: the rest is stored, byte for byte, at the offsets
 * the answer gave. */
static void test_partial_batch(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    const char *ev[] = {
        "{\"specversion\":\"1.0\",\"id\":\"p0\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-01-01T00:00:00.000Z\",\"partitionkey\":\"k1\",\"data\":{\"n\":0}}",
        "{\"specversion\":\"1.0\",\"source\":\"/itest\",\"type\":\"t\"}",
        "{\"specversion\":\"1.0\",\"id\":\"p2\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-01-01T00:00:02.000Z\",\"subject\":\"s\",\"data\":[1,\"two\",null]}",
        "[]",
        "{\"specversion\":\"1.0\",\"id\":\"p4\",\"source\":\"/itest\",\"type\":\"t\","
        "\"data\":\"no time given\"}",
        "{\"specversion\":\"1.0\",\"id\":\"p5\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"not a time\"}",
        "{\"specversion\":\"1.0\",\"id\":\"p6\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-01-01T00:00:06.000Z\",\"ext1\":true,\"ext2\":-5}"};
    size_t n = sizeof ev / sizeof *ev;
    sl_buf b = SL_BUF_INIT;
    for (size_t i = 0; i < n; i++)
        sl_buf_printf(&b, "%s%s", i ? "," : "[", ev[i]);
    sl_buf_printf(&b, "]");
    it_resp r = it_post(s, "partial", IT_CT_BATCH, NULL, (const char *)b.data, b.len);
    json_t *a = it_expect_results(&r, 4, 3);
    expect_entry_error(a, 1, "MissingAttribute", "id");
    expect_entry_error(a, 3, "InvalidEvent", NULL);
    expect_entry_error(a, 5, "InvalidEvent", "time");
    static const size_t good[] = {0, 2, 6};
    for (size_t k = 0; k < 3; k++) {
        size_t i = good[k];
        char *want = decorated(ev[i], "partial", it_res_part(a, i), it_res_off(a, i));
        expect_stored(s, "partial", it_res_part(a, i), it_res_off(a, i), want);
        free(want);
    }
    /* Without a time, the stored event is the posted one plus "time" (now). */
    char q[64];
    snprintf(q, sizeof q, "offset=%lld&max=1", (long long)it_res_off(a, 4));
    it_evs e = it_read_events(s, "partial", it_res_part(a, 4), q);
    assert_int_equal(e.n, 1);
    size_t plen = strlen(ev[4]) - 1;
    if (strncmp(e.v[0].text, ev[4], plen) != 0 || strncmp(e.v[0].text + plen, ",\"time\":\"", 9))
        fail_msg("stored %s, want %s plus time", e.v[0].text, ev[4]);
    it_evs_free(&e);
    json_decref(a);
    it_resp_free(&r);
    sl_buf_free(&b);
    s->passed = true;
}

/* One GET in a thread of its own (a long-poll to wait on). */
typedef struct poller {
    pthread_t thread;
    int port;
    char path[256];
    it_resp r;
    double done; /* it_mono() when the answer was complete */
    _Atomic bool finished;
} poller;

static void *poller_main(void *arg)
{
    poller *pl = arg;
    it_http(NULL, pl->port, &(it_call){.path = pl->path}, &pl->r);
    pl->done = it_mono();
    atomic_store(&pl->finished, true);
    return NULL;
}

/* ---- lanes and partitioning --------------------------------------------------- */

static void test_lane_header(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char *base = it_event("base0", ",\"partitionkey\":\"lk\"");
    int p;
    int64_t o;
    it_post_one(s, "lanes", base, &p, &o);
    const char *fx[] = {"X-Sluice-Lane: feature-x", NULL};
    const char *nd = "{\"specversion\":\"1.0\",\"id\":\"fx0\",\"source\":\"/s\",\"type\":\"t\","
                     "\"partitionkey\":\"lk\"}\n"
                     "{\"specversion\":\"1.0\",\"id\":\"fx1\",\"source\":\"/s\",\"type\":\"t\","
                     "\"partitionkey\":\"lk\",\"lane\":\"\"}\n";
    it_resp r = it_post(s, "lanes", IT_CT_NDJSON, fx, nd, SIZE_MAX);
    json_t *a = it_expect_results(&r, 2, 0);
    assert_int_equal(it_res_part(a, 0), p);
    json_decref(a);
    it_resp_free(&r);
    free(base);
    base = it_event("base1", ",\"partitionkey\":\"lk\"");
    it_post_one(s, "lanes", base, &p, &o);
    free(base);

    /* The default reader sees the base lane only, and next_offset moves past
     * the lane's events. */
    it_evs e = it_read_events(s, "lanes", p, "from=beginning");
    assert_int_equal(e.n, 2);
    assert_string_equal(e.v[0].id, "base0");
    assert_string_equal(e.v[1].id, "base1");
    assert_int_equal(e.next, 4);
    it_evs_free(&e);
    e = it_read_events(s, "lanes", p, "offset=1");
    assert_int_equal(e.n, 1);
    assert_string_equal(e.v[0].id, "base1");
    it_evs_free(&e);
    e = it_read_events(s, "lanes", p, "lane=feature-x");
    assert_int_equal(e.n, 2);
    assert_string_equal(e.v[0].id, "fx0");
    assert_string_equal(e.v[1].id, "fx1");
    assert_string_equal(e.v[0].lane, "feature-x");
    assert_string_equal(e.v[1].lane, "feature-x");
    it_evs_free(&e);
    e = it_read_events(s, "lanes", p, "lane=*");
    assert_int_equal(e.n, 4);
    static const char *const order[] = {"base0", "fx0", "fx1", "base1"};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(e.v[i].id, order[i]);
        assert_int_equal(e.v[i].offset, (int64_t)i);
    }
    it_evs_free(&e);
    e = it_read_events(s, "lanes", p, "lane=other");
    assert_int_equal(e.n, 0);
    assert_int_equal(e.next, 4);
    it_evs_free(&e);

    /* A long-poll on the lane is not answered by a base-lane event, only by
     * one of its own lane. */
    poller pl = {.port = s->port};
    snprintf(pl.path, sizeof pl.path,
             "/v1/sets/lanes/events?partition=%d&offset=4&lane=feature-x&wait_ms=8000", p);
    double t0 = it_mono();
    assert_int_equal(pthread_create(&pl.thread, NULL, poller_main, &pl), 0);
    it_sleep_ms(300);
    base = it_event("base2", ",\"partitionkey\":\"lk\"");
    it_post_one(s, "lanes", base, &p, &o);
    free(base);
    it_sleep_ms(300);
    bool early = atomic_load(&pl.finished);
    char *fx2 = it_event("fx2", ",\"partitionkey\":\"lk\"");
    r = it_post(s, "lanes", IT_CT_CE, fx, fx2, SIZE_MAX);
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);
    free(fx2);
    pthread_join(pl.thread, NULL);
    if (early)
        fail_msg("the lane long-poll was answered by a base-lane event: %s", it_body(&pl.r));
    if (pl.r.status != 200 || !it_parse_events(it_body(&pl.r), pl.r.body.len, &e))
        fail_msg("lane long-poll answered %ld: %s", pl.r.status, it_body(&pl.r));
    assert_int_equal(e.n, 1);
    assert_string_equal(e.v[0].id, "fx2");
    assert_int_equal(e.v[0].offset, 5);
    assert_true(pl.done - t0 < 5);
    it_evs_free(&e);
    it_resp_free(&pl.r);
    s->passed = true;
}

static void test_partitioning(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL); /* 4 partitions */
    /* Same partitionkey, same partition, across requests. */
    int first = -1;
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "pk%d", i);
        char *ev = it_event(id, ",\"partitionkey\":\"user-42\",\"subject\":\"other\"");
        int p;
        int64_t o;
        it_post_one(s, "parts", ev, &p, &o);
        free(ev);
        if (first < 0)
            first = p;
        assert_int_equal(p, first);
    }
    /* Without partitionkey the subject decides, exactly as the same string
     * given as partitionkey would. */
    bool used[4] = {false};
    for (int i = 0; i < 12; i++) {
        char id[16], key[64];
        snprintf(id, sizeof id, "sub%d", i);
        snprintf(key, sizeof key, ",\"subject\":\"order-%d\"", i);
        sl_buf b = SL_BUF_INIT;
        char *e1 = it_event(id, key);
        snprintf(key, sizeof key, ",\"partitionkey\":\"order-%d\"", i);
        char *e2 = it_event(id, key);
        sl_buf_printf(&b, "%s\n%s\n%s\n", e1, e2, e1);
        it_resp r = it_post(s, "parts", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
        json_t *a = it_expect_results(&r, 3, 0);
        if (it_res_part(a, 0) != it_res_part(a, 1) || it_res_part(a, 0) != it_res_part(a, 2))
            fail_msg("subject order-%d went to %d, %d, %d", i, it_res_part(a, 0), it_res_part(a, 1),
                     it_res_part(a, 2));
        used[it_res_part(a, 0)] = true;
        json_decref(a);
        it_resp_free(&r);
        sl_buf_free(&b);
        free(e1);
        free(e2);
    }
    int nused = used[0] + used[1] + used[2] + used[3];
    assert_true(nused >= 2); /* 12 keys on one partition: 4^-11 */
    /* No key: round robin, so 40 events fill 4 partitions evenly. */
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 40; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"rr%d\",\"source\":\"/s\","
                      "\"type\":\"t\"}\n",
                      i);
    it_resp r = it_post(s, "parts", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_t *a = it_expect_results(&r, 40, 0);
    int count[4] = {0};
    for (size_t i = 0; i < 40; i++)
        count[it_res_part(a, i)]++;
    for (int p = 0; p < 4; p++)
        if (count[p] != 10)
            fail_msg("round robin put %d, %d, %d, %d events on the 4 partitions", count[0],
                     count[1], count[2], count[3]);
    json_decref(a);
    it_resp_free(&r);
    sl_buf_free(&b);
    s->passed = true;
}

/* ---- long-polling ------------------------------------------------------------- */

/* A GET waiting on a partition answers within 50 ms of a publish to it
 * (measured from the publisher's answer to the reader's). */
static void test_long_poll_wakes(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char *ev = it_event("first", ",\"partitionkey\":\"lp\"");
    int p;
    int64_t o;
    it_post_one(s, "lp", ev, &p, &o);
    free(ev);
    double best = 1e9;
    for (int attempt = 0; attempt < 3 && best >= 0.050; attempt++) {
        poller pl = {.port = s->port};
        snprintf(pl.path, sizeof pl.path, "/v1/sets/lp/events?partition=%d&from=end&wait_ms=5000",
                 p);
        double t0 = it_mono();
        assert_int_equal(pthread_create(&pl.thread, NULL, poller_main, &pl), 0);
        it_sleep_ms(300); /* let the GET reach the server and be suspended */
        char id[16];
        snprintf(id, sizeof id, "wake%d", attempt);
        ev = it_event(id, ",\"partitionkey\":\"lp\"");
        int p2;
        it_post_one(s, "lp", ev, &p2, &o);
        double posted = it_mono();
        free(ev);
        pthread_join(pl.thread, NULL);
        assert_int_equal(p2, p);
        it_evs e = {0};
        if (pl.r.status != 200 || !it_parse_events(it_body(&pl.r), pl.r.body.len, &e))
            fail_msg("long-poll answered %ld: %s %s", pl.r.status, it_body(&pl.r), pl.r.err);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, id);
        assert_int_equal(e.next, o + 1);
        /* It did wait (was not answered before the publish). */
        assert_true(pl.done - t0 >= 0.25);
        double lag = pl.done - posted;
        printf("long-poll attempt %d: answered %.1f ms after the publish's answer\n", attempt,
               lag * 1e3);
        best = lag < best ? lag : best;
        it_evs_free(&e);
        it_resp_free(&pl.r);
    }
    if (best >= 0.050)
        fail_msg("long-poll woke %.1f ms after the publish (best of 3), want < 50 ms", best * 1e3);
    s->passed = true;
}

/* With nothing published, a long-poll answers an empty list after wait_ms. */
static void test_long_poll_timeout(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char *ev = it_event("only", ",\"partitionkey\":\"to\"");
    int p;
    int64_t o;
    it_post_one(s, "lpt", ev, &p, &o);
    free(ev);
    double t0 = it_mono();
    it_resp r =
        it_get(s, "/v1/sets/lpt/events?partition=%d&offset=%lld&wait_ms=1000", p, (long long)o + 1);
    double took = it_mono() - t0;
    it_evs e = {0};
    assert_int_equal(r.status, 200);
    assert_true(it_parse_events(it_body(&r), r.body.len, &e));
    assert_int_equal(e.n, 0);
    assert_int_equal(e.next, o + 1);
    if (took < 0.9 || took > 5)
        fail_msg("wait_ms=1000 answered after %.3f s", took);
    it_resp_free(&r);
    /* A lane without events times out too (its reader is at the end). */
    t0 = it_mono();
    r = it_get(s, "/v1/sets/lpt/events?partition=%d&lane=feature&wait_ms=600", p);
    took = it_mono() - t0;
    it_evs_free(&e);
    assert_true(it_parse_events(it_body(&r), r.body.len, &e));
    assert_int_equal(e.n, 0);
    if (took < 0.54 || took > 5)
        fail_msg("wait_ms=600 answered after %.3f s", took);
    it_resp_free(&r);
    it_evs_free(&e);
    s->passed = true;
}

/* from=beginning|end|RFC 3339 time. */
/* from=TIME finds the first event sluice received at or after TIME: the
 * record timestamp is the receipt time, so an event's own (old) time
 * attribute does not move it. */
static void test_from(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    static const char *const ids[] = {"ta", "tb", "tc"};
    static const char *const own_time[] = {"", "", ",\"time\":\"2020-01-01T00:00:00Z\""};
    int64_t before[3], p = -1;
    for (int i = 0; i < 3; i++) {
        struct timespec pause = {0, 40 * 1000000};
        nanosleep(&pause, NULL);
        before[i] = sl_clock_now_ms();
        nanosleep(&pause, NULL);
        char ev[256];
        snprintf(ev, sizeof ev,
                 "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/s\","
                 "\"type\":\"t\",\"partitionkey\":\"tk\"%s}\n",
                 ids[i], own_time[i]);
        it_resp r = it_post(s, "from", IT_CT_NDJSON, NULL, ev, SIZE_MAX);
        json_t *a = it_expect_results(&r, 1, 0);
        if (p < 0)
            p = it_res_part(a, 0);
        assert_int_equal(it_res_part(a, 0), p);
        json_decref(a);
        it_resp_free(&r);
    }
    char t0[40], t1[40], t2[40], later[40], q[4][64];
    sl_time_format_rfc3339(before[0], t0);
    sl_time_format_rfc3339(before[1], t1);
    sl_time_format_rfc3339(before[2], t2);
    sl_time_format_rfc3339(sl_clock_now_ms() + 60000, later);
    snprintf(q[0], sizeof q[0], "from=%s", t0);
    snprintf(q[1], sizeof q[1], "from=%s", t1);
    snprintf(q[2], sizeof q[2], "from=%s", t2);
    snprintf(q[3], sizeof q[3], "from=%s", later);
    const struct {
        const char *query;
        const char *first; /* id of the first event, NULL for none */
        size_t n;
    } cases[] = {
        {"", "ta", 3},
        {"from=beginning", "ta", 3},
        {"from=end", NULL, 0},
        {"from=2019-12-31T23:59:59.999Z", "ta", 3}, /* tc's own 2020 time does not count */
        {q[0], "ta", 3},
        {q[1], "tb", 2},
        {q[2], "tc", 1},
        {q[3], NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        it_evs e = it_read_events(s, "from", (int)p, cases[i].query);
        if (e.n != cases[i].n || (e.n && strcmp(e.v[0].id, cases[i].first) != 0))
            fail_msg("%s: %zu events starting with %s, want %zu starting with %s", cases[i].query,
                     e.n, e.n ? e.v[0].id : "-", cases[i].n, cases[i].first ? cases[i].first : "-");
        if (!e.n)
            assert_int_equal(e.next, 3);
        it_evs_free(&e);
    }
    s->passed = true;
}

/* ---- listings and metrics --------------------------------------------------------- */

static void test_sets_and_metrics(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    it_resp r = it_get(s, "/v1/sets");
    assert_int_equal(r.status, 200);
    assert_string_equal(it_body(&r), "{\"sets\":[],\"auto_created\":0}\n");
    it_resp_free(&r);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 5; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"m%d\",\"source\":\"/s\","
                      "\"type\":\"t\"}\n",
                      i);
    sl_buf_printf(&b, "{\"bad\":1}\n");
    r = it_post(s, "metrics-a", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_decref(it_expect_results(&r, 5, 1));
    it_resp_free(&r);
    sl_buf_free(&b);
    char *ev = it_event("m5", NULL);
    int p;
    int64_t o;
    it_post_one(s, "metrics-a", ev, &p, &o);
    it_post_one(s, "metrics-a", ev, &p, &o);
    it_post_one(s, "metrics-b", ev, &p, &o);
    free(ev);
    r = it_post(s, "metrics-a", IT_CT_CE, NULL, "{", SIZE_MAX);
    it_resp_free(&r);

    r = it_get(s, "/v1/sets");
    json_t *j = it_parse_json(&r);
    json_t *sets = json_object_get(j, "sets");
    assert_int_equal(json_array_size(sets), 2);
    json_t *sa = json_array_get(sets, 0);
    assert_string_equal(json_string_value(json_object_get(sa, "name")), "metrics-a");
    assert_int_equal(json_integer_value(json_object_get(sa, "partitions")), 4);
    assert_string_equal(json_string_value(json_object_get(sa, "ack")), "durable");
    assert_string_equal(json_string_value(json_object_get(sa, "compression")), "none");
    assert_int_equal(json_integer_value(json_object_get(sa, "events")), 7);
    assert_true(json_integer_value(json_object_get(sa, "bytes")) > 7 * 60);
    assert_int_equal(json_integer_value(json_object_get(sa, "max_event_bytes")), 1 << 20);
    assert_true(json_is_boolean(json_object_get(sa, "generate_ids")));
    assert_true(json_is_integer(json_object_get(sa, "retention_ms")));
    assert_true(json_is_integer(json_object_get(sa, "retention_bytes")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(sets, 1), "name")),
                        "metrics-b");
    json_decref(j);
    it_resp_free(&r);

    r = it_get(s, "/v1/sets/metrics-a");
    assert_int_equal(r.status, 200);
    j = it_parse_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "name")), "metrics-a");
    json_t *pi = json_object_get(j, "partition_info");
    assert_int_equal(json_array_size(pi), 4);
    json_int_t events = 0, bytes = 0;
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_array_get(pi, i);
        assert_int_equal(json_integer_value(json_object_get(e, "partition")), (json_int_t)i);
        json_int_t start = json_integer_value(json_object_get(e, "start_offset"));
        json_int_t end = json_integer_value(json_object_get(e, "end_offset"));
        assert_int_equal(start, 0);
        assert_true(end >= start);
        events += end - start;
        bytes += json_integer_value(json_object_get(e, "bytes"));
        assert_true(json_integer_value(json_object_get(e, "segments")) >= 1);
        /* The listing agrees with what a read says. */
        it_evs got = it_read_all(s, "metrics-a", (int)i, "*");
        assert_int_equal(got.n, (size_t)end);
        it_evs_free(&got);
    }
    assert_int_equal(events, 7);
    assert_int_equal(bytes, json_integer_value(json_object_get(j, "bytes")));
    assert_int_equal(json_integer_value(json_object_get(j, "events")), 7);
    assert_true(json_is_integer(json_object_get(j, "buffer_bytes")));
    assert_true(json_is_integer(json_object_get(j, "linger_ms")));
    json_decref(j);
    it_resp_free(&r);

    r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    assert_true(strncmp(r.ctype, "text/plain", 10) == 0);
    const char *t = it_body(&r);
    assert_true(it_metric(t, "sluice_events_in_total{set=\"metrics-a\"}") == 7);
    assert_true(it_metric(t, "sluice_events_in_total{set=\"metrics-b\"}") == 1);
    assert_true(it_metric(t, "sluice_bytes_in_total{set=\"metrics-a\"}") > 0);
    assert_true(it_metric(t, "sluice_events_rejected_total{reason=\"MissingAttribute\"}") == 1);
    assert_true(it_metric(t, "sluice_http_requests_total{code=\"200\"}") >= 8);
    assert_true(it_metric(t, "sluice_http_requests_total{code=\"400\"}") == 1);
    assert_non_null(strstr(t, "# TYPE sluice_events_in_total counter"));
    assert_non_null(strstr(t, "# TYPE sluice_http_requests_total counter"));
    double parts = 0;
    for (int i = 0; i < 4; i++) {
        char name[128];
        snprintf(name, sizeof name,
                 "sluice_partition_end_offset{set=\"metrics-a\","
                 "partition=\"%d\"}",
                 i);
        double v = it_metric(t, name);
        assert_true(v >= 0);
        parts += v;
    }
    assert_true(parts == 7);
    it_resp_free(&r);
    s->passed = true;
}

/* ---- main ------------------------------------------------------------------------ */

/* A read with a large max answers every event asked for: past 1 MiB the
 * answer is streamed from the log as it is sent (chunked), in order, with
 * the right next_offset; small reads stay exact. */
static void test_big_read(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--partitions", "1", NULL);
    enum { N = 30000, PER = 5000 };
    char pad[301];
    memset(pad, 'p', 300);
    pad[300] = '\0';
    for (int k = 0; k < N / PER; k++) {
        sl_buf b = SL_BUF_INIT;
        for (int i = 0; i < PER; i++)
            sl_buf_printf(&b,
                          "{\"specversion\":\"1.0\",\"id\":\"b%d\",\"source\":\"/t\","
                          "\"type\":\"t\",\"data\":{\"pad\":\"%s\"}}\n",
                          k * PER + i, pad);
        json_decref(it_post_all(s, "big", NULL, &b, PER));
        sl_buf_free(&b);
    }
    static const struct {
        int64_t from, max, want;
    } reads[] = {{0, 1000000, N}, {0, 10, 10}, {100, 25000, 25000}, {29990, 1000000, 10}};
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++) {
        it_resp r = it_get(s, "/v1/sets/big/events?partition=0&offset=%lld&max=%lld",
                           (long long)reads[i].from, (long long)reads[i].max);
        assert_int_equal(r.status, 200);
        json_t *j = it_parse_json(&r);
        json_t *evs = json_object_get(j, "events");
        if (json_array_size(evs) != (size_t)reads[i].want)
            fail_msg("offset %lld max %lld: %zu events (%zu bytes), want %lld",
                     (long long)reads[i].from, (long long)reads[i].max, json_array_size(evs),
                     r.body.len, (long long)reads[i].want);
        for (size_t k = 0; k < json_array_size(evs); k++) {
            json_t *e = json_array_get(evs, k);
            char id[16];
            snprintf(id, sizeof id, "b%lld", (long long)(reads[i].from + (int64_t)k));
            if (json_integer_value(json_object_get(e, "sluiceoffset")) !=
                    reads[i].from + (json_int_t)k ||
                strcmp(json_string_value(json_object_get(e, "id")), id) != 0)
                fail_msg("read %zu: event %zu is not %s at offset %lld", i, k, id,
                         (long long)(reads[i].from + (int64_t)k));
        }
        assert_int_equal(json_integer_value(json_object_get(j, "next_offset")),
                         reads[i].from + reads[i].want);
        json_decref(j);
        it_resp_free(&r);
    }
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_server_api"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_content_modes),
        T(test_binary_keeps_content_type),
        T(test_request_errors),
        T(test_wrong_method_on_fixed_paths),
        T(test_invalid_set_names),
        T(test_no_auto_create),
        T(test_entry_errors),
        T(test_partial_batch),
        T(test_lane_header),
        T(test_partitioning),
        T(test_long_poll_wakes),
        T(test_long_poll_timeout),
        T(test_from),
        T(test_sets_and_metrics),
        T(test_big_read),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
