/*
 * tests/unit/test_event.c — the CloudEvents model: every status with its
 * message, null handling, the exact stored form (time/id/lane fills, dropped
 * members), lane conflicts, read decoration, HTTP binary mode with
 * percent-decoding, UUIDv7 layout and ordering, and RFC 3339 parsing and
 * formatting. Every parse runs on input placed right before a PROT_NONE page.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/bus/event.h"

#define NOW_MS 1714564800250LL /* 2024-05-01T12:00:00.250Z */
#define NOW_TEXT "2024-05-01T12:00:00.250Z"

/* Copies n bytes to end exactly at a PROT_NONE page, in one of two slots;
 * valid until the next call for the same slot. */
static const char *guarded_in(int slot, const char *s, size_t n)
{
    static char *map[2];
    static size_t size[2], page;
    if (!map[slot] || size[slot] < n) {
        if (map[slot])
            munmap(map[slot], size[slot] + page);
        page = (size_t)sysconf(_SC_PAGESIZE);
        size[slot] = (n / page + 1) * page;
        map[slot] = mmap(NULL, size[slot] + page, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(map[slot] != MAP_FAILED);
        assert_int_equal(mprotect(map[slot] + size[slot], page, PROT_NONE), 0);
    }
    return memcpy(map[slot] + size[slot] - n, s, n);
}

static const char *guarded(const char *s, size_t n)
{
    return guarded_in(0, s, n);
}

static sl_event_status parse(const char *s, const sl_event_limits *lim, sl_event *ev, sl_error *err)
{
    size_t n = strlen(s);
    return sl_event_parse(guarded(s, n), n, lim, ev, err);
}

/* Parses, optionally applies a lane, encodes; returns the stored text
 * (caller frees). */
static char *store(const char *s, const sl_event_limits *lim, const char *lane)
{
    sl_event ev;
    sl_error err = {0};
    sl_event_status st = parse(s, lim, &ev, &err);
    if (st == SL_EVENT_OK)
        st = sl_event_apply_lane(&ev, lane, &err);
    if (st != SL_EVENT_OK)
        fail_msg("%s: %s: %s", s, sl_event_status_name(st), err.msg);
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_buf_append(&out, "prefix|", 7), 0);
    assert_int_equal(sl_event_encode(&ev, &(sl_event_fill){.now_ms = NOW_MS}, &out), 0);
    assert_memory_equal(out.data, "prefix|", 7);
    char *r = strndup((char *)out.data + 7, out.len - 7);
    sl_buf_free(&out);
    return r;
}

#define BASE "\"specversion\":\"1.0\",\"id\":\"e1\",\"source\":\"/s\",\"type\":\"t\""

static const char typical[] =
    "{\n  \"specversion\" : \"1.0\",\n  \"id\" : \"evt-0001\",\n  \"source\" : \"/orders\",\n"
    "  \"type\" : \"com.example.order.created\",\n  \"time\" : \"2024-05-01T12:00:00.250Z\",\n"
    "  \"subject\" : \"order-42\",\n  \"datacontenttype\" : \"application/json\",\n"
    "  \"comexampleext\" : \"v\", \"count\" : -2147483648, \"flag\" : true,\n"
    "  \"partitionkey\" : \"cust-\\u0037\", \"lane\" : \"canary-1\",\n"
    "  \"data\" : { \"a\" : [ 1, 2 ], \"b\" : \"x\" }\n}\n";

static void test_parse_typical(void **state)
{
    (void)state;
    sl_event ev;
    sl_error err = {0};
    assert_int_equal(parse(typical, NULL, &ev, &err), SL_EVENT_OK);
    char buf[64];
    size_t n;
    assert_int_equal(sl_json_unescape(&ev.id, buf, sizeof buf, &n), 0);
    assert_memory_equal(buf, "evt-0001", n);
    assert_int_equal(ev.type.len, strlen("\"com.example.order.created\""));
    assert_true(ev.has_time);
    assert_int_equal(ev.time_ms, NOW_MS);
    assert_string_equal(ev.lane, "canary-1");
    assert_int_equal(ev.data.type, SL_JSON_OBJECT);
    assert_int_equal(ev.data_base64.type, SL_JSON_NONE);
    assert_int_equal(ev.dataschema.type, SL_JSON_NONE);
    assert_int_equal(ev.n_ext, 3);
    assert_int_equal(ev.ext[0].name_len, 13);
    assert_memory_equal(ev.ext[0].name, "comexampleext", 13);
    assert_int_equal(ev.ext[1].value.type, SL_JSON_NUMBER);
    assert_int_equal(ev.ext[2].value.type, SL_JSON_TRUE);
    /* The routing key is the decoded partitionkey. */
    assert_int_equal(ev.key_len, 6);
    assert_memory_equal(ev.key, "cust-7", 6);

    /* Stored form: compact, everything kept, nothing added. */
    char *s = store(typical, NULL, NULL);
    json_error_t je;
    json_t *a = json_loads(typical, 0, &je), *b = json_loads(s, 0, &je);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(json_equal(a, b));
    assert_null(strchr(s, '\n'));
    assert_null(strstr(s, "\" :"));
    json_decref(a);
    json_decref(b);
    free(s);

    /* Without partitionkey the subject routes; without either, nothing. */
    assert_int_equal(parse("{" BASE ",\"subject\":\"s\\/1\"}", NULL, &ev, NULL), SL_EVENT_OK);
    assert_int_equal(ev.key_len, 3);
    assert_memory_equal(ev.key, "s/1", 3);
    assert_int_equal(parse("{" BASE "}", NULL, &ev, NULL), SL_EVENT_OK);
    assert_null(ev.key);
    assert_false(ev.has_time);
    assert_string_equal(ev.lane, "");
}

static const struct {
    const char *json;
    sl_event_status st;
    const char *msg; /* must appear in the message */
} cases[] = {
    /* InvalidJson: syntax anywhere beats any semantic problem. */
    {"", SL_EVENT_INVALID_JSON, "byte 0: unexpected end of input"},
    {"{\"specversion\":\"1.0\"", SL_EVENT_INVALID_JSON, "byte 20: unexpected end of input"},
    {"{" BASE ",}", SL_EVENT_INVALID_JSON, "expected a member name"},
    {"{" BASE "} x", SL_EVENT_INVALID_JSON, "byte 57: expected the end of the event, found 'x'"},
    {"{" BASE "}{}", SL_EVENT_INVALID_JSON, "byte 56: expected the end of the event"},
    {"{\"id\":01}", SL_EVENT_INVALID_JSON, "byte 6: leading zero"},
    {"{\"id\" 1}", SL_EVENT_INVALID_JSON, "':' after a member name"},
    {"{\"id\":5, \"x\":}", SL_EVENT_INVALID_JSON, "byte 13: expected a JSON value"},
    {"{\"id\":\"a\" \"b\":1}", SL_EVENT_INVALID_JSON, "',' or '}'"},
    {"[1,", SL_EVENT_INVALID_JSON, "unexpected end of input"},
    {"{\"subject\":\"\xc0\xaf\"}", SL_EVENT_INVALID_JSON, "invalid UTF-8"},
    /* InvalidEvent */
    {"[]", SL_EVENT_INVALID_EVENT, "an event must be a JSON object, not an array"},
    {" \"x\" ", SL_EVENT_INVALID_EVENT, "an event must be a JSON object, not a string"},
    {"{\"specversion\":\"1.0\",\"id\":5,\"source\":\"/s\",\"type\":\"t\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"id\": must be a string, not 5"},
    {"{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":[\"/s\"],\"type\":\"t\"}",
     SL_EVENT_INVALID_EVENT, "attribute \"source\": must be a string, not an array"},
    {"{\"specversion\":\"0.3\",\"id\":\"1\",\"source\":\"/s\",\"type\":\"t\"}",
     SL_EVENT_INVALID_EVENT, "attribute \"specversion\": must be \"1.0\""},
    {"{\"specversion\":1.0,\"id\":\"1\",\"source\":\"/s\",\"type\":\"t\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"specversion\": must be a string, not 1.0"},
    {"{\"specversion\":\"1.0\",\"id\":\"\",\"source\":\"/s\",\"type\":\"t\"}",
     SL_EVENT_INVALID_EVENT, "attribute \"id\": must be a non-empty string"},
    {"{" BASE ",\"time\":\"2024-02-30T00:00:00Z\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"time\": \"2024-02-30T00:00:00Z\" is not an RFC 3339 timestamp"},
    {"{" BASE ",\"time\":\"yesterday\"}", SL_EVENT_INVALID_EVENT, "RFC 3339"},
    {"{" BASE ",\"time\":1714564800}", SL_EVENT_INVALID_EVENT,
     "attribute \"time\": must be a string"},
    {"{" BASE ",\"data\":1,\"data_base64\":\"AA==\"}", SL_EVENT_INVALID_EVENT,
     "\"data\" or \"data_base64\", not both"},
    {"{" BASE ",\"data_base64\":\"abc\"}", SL_EVENT_INVALID_EVENT, "invalid base64"},
    {"{" BASE ",\"data_base64\":\"ab=c\"}", SL_EVENT_INVALID_EVENT, "padding"},
    {"{" BASE ",\"data_base64\":\"a*==\"}", SL_EVENT_INVALID_EVENT, "not a base64 character"},
    {"{" BASE ",\"data_base64\":5}", SL_EVENT_INVALID_EVENT, "must be a string"},
    {"{" BASE ",\"Foo\":\"x\"}", SL_EVENT_INVALID_EVENT,
     "member \"Foo\": not a valid attribute name"},
    {"{" BASE ",\"foo_bar\":\"x\"}", SL_EVENT_INVALID_EVENT, "member \"foo_bar\""},
    {"{" BASE ",\"\":\"x\"}", SL_EVENT_INVALID_EVENT, "member \"\": not a valid"},
    {"{" BASE ",\"ext\":{\"a\":1}}", SL_EVENT_INVALID_EVENT,
     "attribute \"ext\": must be a string, integer or boolean, not an object"},
    {"{" BASE ",\"ext\":1.5}", SL_EVENT_INVALID_EVENT,
     "attribute \"ext\": 1.5 is not an integer in the 32-bit range"},
    {"{" BASE ",\"ext\":2147483648}", SL_EVENT_INVALID_EVENT, "32-bit"},
    {"{" BASE ",\"ext\":-2147483649}", SL_EVENT_INVALID_EVENT, "32-bit"},
    {"{" BASE ",\"ext\":1e3}", SL_EVENT_INVALID_EVENT, "32-bit"},
    {"{" BASE ",\"id\":\"again\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"id\" appears more than once"},
    {"{" BASE ",\"\\u0069d\":\"again\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"id\" appears more than once"},
    {"{" BASE ",\"ext\":1,\"ext\":2}", SL_EVENT_INVALID_EVENT,
     "attribute \"ext\" appears more than once"},
    {"{" BASE ",\"e\\u0078t\":1,\"ext\":2}", SL_EVENT_INVALID_EVENT,
     "attribute \"ext\" appears more than once"},
    {"{" BASE ",\"subject\":null,\"subject\":\"x\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"subject\" appears more than once"},
    {"{" BASE ",\"subject\":\"a\\nb\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"subject\": contains U+000A"},
    {"{" BASE ",\"subject\":\"a\\u0085\"}", SL_EVENT_INVALID_EVENT, "contains U+0085"},
    {"{" BASE ",\"subject\":\"a\xc2\x9f\"}", SL_EVENT_INVALID_EVENT, "contains U+009F"},
    {"{" BASE ",\"subject\":\"a\x7f\"}", SL_EVENT_INVALID_EVENT, "contains U+007F"},
    {"{" BASE ",\"ext\":\"\xef\xbf\xbf\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"ext\": contains U+FFFF"},
    {"{" BASE ",\"ext\":\"\\ufdd0\"}", SL_EVENT_INVALID_EVENT, "contains U+FDD0"},
    {"{" BASE ",\"ext\":\"\\ud83f\\udfff\"}", SL_EVENT_INVALID_EVENT, "contains U+1FFFF"},
    {"{" BASE ",\"subject\":\"\"}", SL_EVENT_INVALID_EVENT, "non-empty"},
    {"{" BASE ",\"dataschema\":\"/schemas/1\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"dataschema\": \"/schemas/1\" is not an absolute URI"},
    {"{" BASE ",\"datacontenttype\":\"json\"}", SL_EVENT_INVALID_EVENT,
     "attribute \"datacontenttype\": \"json\" is not a media type"},
    {"{" BASE ",\"partitionkey\":7}", SL_EVENT_INVALID_EVENT,
     "attribute \"partitionkey\": must be a string"},
    /* The first semantic problem is the one reported. */
    {"{\"id\":5,\"source\":6}", SL_EVENT_INVALID_EVENT, "attribute \"id\""},
    /* MissingAttribute */
    {"{\"specversion\":\"1.0\",\"source\":\"/s\",\"type\":\"t\"}", SL_EVENT_MISSING_ATTRIBUTE,
     "missing required attribute \"id\""},
    {"{\"specversion\":\"1.0\",\"id\":null,\"source\":\"/s\",\"type\":\"t\"}",
     SL_EVENT_MISSING_ATTRIBUTE, "missing required attribute \"id\""},
    {"{\"specversion\":\"1.0\",\"id\":\"1\",\"data\":{}}", SL_EVENT_MISSING_ATTRIBUTE,
     "missing required attributes \"source\", \"type\""},
    {" { } ", SL_EVENT_MISSING_ATTRIBUTE,
     "missing required attributes \"specversion\", \"id\", \"source\", \"type\""},
    /* InvalidLane */
    {"{" BASE ",\"lane\":\"Prod\"}", SL_EVENT_INVALID_LANE,
     "attribute \"lane\": \"Prod\" is not a lane name"},
    {"{" BASE ",\"lane\":\"a_b\"}", SL_EVENT_INVALID_LANE, "not a lane name"},
    {"{" BASE ",\"lane\":\"abcdefghijklmnopqrstuvwxyz0123456\"}", SL_EVENT_INVALID_LANE,
     "not a lane name"},
    {"{" BASE ",\"lane\":5}", SL_EVENT_INVALID_LANE, "attribute \"lane\": 5 is not a lane name"},
};

static void test_statuses(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_event ev;
        sl_error err = {0};
        sl_event_status st = parse(cases[i].json, NULL, &ev, &err);
        if (st != cases[i].st || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu %s: got %s \"%s\", want %s \"%s\"", i, cases[i].json,
                     sl_event_status_name(st), err.msg, sl_event_status_name(cases[i].st),
                     cases[i].msg);
    }
    /* Every truncation of a valid event is InvalidJson, never an over-read. */
    size_t n = strlen(typical);
    while (n > 0 && typical[n - 1] == '\n')
        n--;
    for (size_t k = 0; k < n; k++) {
        sl_event ev;
        assert_int_equal(sl_event_parse(guarded(typical, k), k, NULL, &ev, NULL),
                         SL_EVENT_INVALID_JSON);
    }
    /* Valid edge values. */
    sl_event ev;
    sl_error err = {0};
    const char *ok[] = {
        "{" BASE ",\"ext\":-2147483648,\"e2\":2147483647,\"e3\":false,\"e4\":\"\"}",
        "{" BASE ",\"lane\":\"\",\"data_base64\":\"\"}",
        "{" BASE ",\"lane\":\"abcdefghijklmnopqrstuvwxyz012345\"}",
        "{" BASE ",\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\":1}",
        "{" BASE ",\"dataschema\":\"urn:x\",\"datacontenttype\":\"text/plain; charset=utf-8\"}",
        "{" BASE ",\"data_base64\":\"AAEC/w==\",\"x1\":\"\\ud83d\\ude00\"}",
        "{" BASE ",\"data\":null,\"data_base64\":null}",
        "{" BASE ",\"time\":\"2024-05-01t14:00:00.250123+02:00\"}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (parse(ok[i], NULL, &ev, &err) != SL_EVENT_OK)
            fail_msg("%s: %s", ok[i], err.msg);
    assert_int_equal(ev.time_ms, NOW_MS);

    /* Members beyond the limit. */
    char big[4096];
    size_t b = (size_t)snprintf(big, sizeof big, "{" BASE);
    for (int i = 0; i < SL_EVENT_MAX_MEMBERS; i++)
        b += (size_t)snprintf(big + b, sizeof big - b, ",\"x%d\":%d", i, i);
    snprintf(big + b, sizeof big - b, "}");
    assert_int_equal(parse(big, NULL, &ev, &err), SL_EVENT_INVALID_EVENT);
    assert_non_null(strstr(err.msg, "at most 64 members"));

    assert_string_equal(sl_event_status_name(SL_EVENT_OK), "OK");
    assert_string_equal(sl_event_status_name(SL_EVENT_LANE_CONFLICT), "LaneConflict");
    assert_string_equal(sl_event_status_name(SL_EVENT_STATUS_COUNT), "Unknown");
}

static void test_limits(void **state)
{
    (void)state;
    sl_event ev;
    sl_error err = {0};
    const char *e = "{" BASE ",\"data\":[[[1]]]}";
    size_t n = strlen(e);
    sl_event_limits lim = {.max_bytes = n};
    assert_int_equal(parse(e, &lim, &ev, &err), SL_EVENT_OK);
    lim.max_bytes = n - 1;
    assert_int_equal(parse(e, &lim, &ev, &err), SL_EVENT_TOO_LARGE);
    char want[80];
    snprintf(want, sizeof want, "event is %zu bytes; the limit is %zu", n, n - 1);
    assert_string_equal(err.msg, want);
    assert_int_equal(err.code, SL_ETOOBIG);

    /* Depth counts the event object: [[[1]]] inside it is 4 levels. */
    lim = (sl_event_limits){.max_depth = 4};
    assert_int_equal(parse(e, &lim, &ev, &err), SL_EVENT_OK);
    lim.max_depth = 3;
    assert_int_equal(parse(e, &lim, &ev, &err), SL_EVENT_INVALID_JSON);
    assert_string_equal(err.msg, "byte 65: nesting deeper than 3 levels");

    /* The default limit is 1 MiB. */
    size_t big = SL_EVENT_MAX_BYTES_DEFAULT + 1;
    char *huge = malloc(big);
    assert_non_null(huge);
    memset(huge, ' ', big);
    assert_int_equal(sl_event_parse(huge, big, NULL, &ev, &err), SL_EVENT_TOO_LARGE);
    free(huge);

    /* generate_ids allows a missing (or null) id, never an empty one. */
    lim = (sl_event_limits){.generate_ids = true};
    assert_int_equal(
        parse("{\"specversion\":\"1.0\",\"source\":\"s\",\"type\":\"t\"}", &lim, &ev, &err),
        SL_EVENT_OK);
    assert_int_equal(ev.id.type, SL_JSON_NONE);
    assert_int_equal(parse("{\"specversion\":\"1.0\",\"id\":\"\",\"source\":\"s\",\"type\":\"t\"}",
                           &lim, &ev, &err),
                     SL_EVENT_INVALID_EVENT);
    assert_int_equal(parse("{\"specversion\":\"1.0\",\"type\":\"t\"}", &lim, &ev, &err),
                     SL_EVENT_MISSING_ATTRIBUTE);
    assert_string_equal(err.msg, "missing required attribute \"source\"");
}

static bool is_uuid7(const char *u, int64_t ms)
{
    if (strlen(u) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash != (u[i] == '-') || (!dash && !strchr("0123456789abcdef", u[i])))
            return false;
    }
    char ts[16];
    snprintf(ts, sizeof ts, "%012llx", (unsigned long long)ms);
    return u[14] == '7' && strchr("89ab", u[19]) && memcmp(u, ts, 8) == 0 &&
           memcmp(u + 9, ts + 8, 4) == 0;
}

static void test_encode_fills(void **state)
{
    (void)state;
    sl_event_limits gen = {.generate_ids = true};
    /* Spaced input, no id, no time: compacted, then id and time appended. */
    char *s = store(" { \"specversion\" : \"1.0\" , \"source\" : \"/s\" , \"type\" : \"t\" , "
                    "\"data\" : { \"a\" : [ 1 , \"x y\" ] } } ",
                    &gen, NULL);
    const char *head = "{\"specversion\":\"1.0\",\"source\":\"/s\",\"type\":\"t\","
                       "\"data\":{\"a\":[1,\"x y\"]},\"id\":\"";
    const char *tail = "\",\"time\":\"" NOW_TEXT "\"}";
    assert_int_equal(strlen(s), strlen(head) + 36 + strlen(tail));
    assert_memory_equal(s, head, strlen(head));
    assert_string_equal(s + strlen(head) + 36, tail);
    char id[37];
    memcpy(id, s + strlen(head), 36);
    id[36] = '\0';
    assert_true(is_uuid7(id, NOW_MS));
    free(s);

    /* Compact input with id and time: stored byte for byte. */
    const char *c = "{" BASE ",\"time\":\"2020-01-01T00:00:00Z\",\"data\":\"x\"}";
    s = store(c, NULL, NULL);
    assert_string_equal(s, c);
    free(s);

    /* A request lane is added to an event without one. */
    s = store("{" BASE ",\"time\":\"2020-01-01T00:00:00Z\"}", NULL, "blue");
    assert_string_equal(s, "{" BASE ",\"time\":\"2020-01-01T00:00:00Z\",\"lane\":\"blue\"}");
    free(s);

    /* Nulls, sluice* members and an explicit "" lane replaced by the request
     * lane are dropped; data: null is a payload and stays. */
    s = store("{\"specversion\":\"1.0\", \"id\":\"1\",\"subject\":null,\"sluiceset\":\"x\","
              "\"source\":\"s\",\"sluicepartition\":0,\"type\":\"t\",\"lane\":\"\","
              "\"sluiceoffset\":3,\"time\":null,\"ext\":null,\"data\":null}",
              NULL, "blue");
    assert_string_equal(s, "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"s\",\"type\":\"t\","
                           "\"data\":null,\"time\":\"" NOW_TEXT "\",\"lane\":\"blue\"}");
    free(s);
    /* Without a request lane the explicit "" lane stays. */
    s = store("{" BASE ",\"lane\":\"\",\"time\":\"2020-01-01T00:00:00Z\"}", NULL, NULL);
    assert_string_equal(s, "{" BASE ",\"lane\":\"\",\"time\":\"2020-01-01T00:00:00Z\"}");
    free(s);
    /* A null id with generation on gets a fresh one. */
    s = store("{\"specversion\":\"1.0\",\"id\":null,\"source\":\"s\",\"type\":\"t\","
              "\"time\":\"2020-01-01T00:00:00Z\"}",
              &gen, NULL);
    assert_int_equal(strlen(s), strlen("{\"specversion\":\"1.0\",\"source\":\"s\",\"type\":\"t\","
                                       "\"time\":\"2020-01-01T00:00:00Z\",\"id\":\"\"}") +
                                    36);
    free(s);
}

static void test_lanes(void **state)
{
    (void)state;
    sl_event ev;
    sl_error err = {0};
    const char *e = "{" BASE ",\"lane\":\"green\"}";
    assert_int_equal(parse(e, NULL, &ev, &err), SL_EVENT_OK);
    assert_int_equal(sl_event_apply_lane(&ev, NULL, &err), SL_EVENT_OK);
    assert_int_equal(sl_event_apply_lane(&ev, "", &err), SL_EVENT_OK);
    assert_int_equal(sl_event_apply_lane(&ev, "green", &err), SL_EVENT_OK);
    assert_false(ev.lane_applied);
    assert_int_equal(sl_event_apply_lane(&ev, "blue", &err), SL_EVENT_LANE_CONFLICT);
    assert_string_equal(err.msg,
                        "the event's lane \"green\" differs from the lane \"blue\" set for the "
                        "request");
    assert_string_equal(ev.lane, "green");
    assert_int_equal(sl_event_apply_lane(&ev, "Blue!", &err), SL_EVENT_INVALID_LANE);
    assert_non_null(strstr(err.msg, "the lane \"Blue!\" set for the request is not a lane"));
    assert_int_equal(sl_event_apply_lane(&ev, "a\nb", &err), SL_EVENT_INVALID_LANE);
    assert_non_null(strstr(err.msg, "the lane set for the request is not a lane name"));
    assert_null(strchr(err.msg, '\n'));
    char long_lane[40];
    memset(long_lane, 'a', 33);
    long_lane[33] = '\0';
    assert_int_equal(sl_event_apply_lane(&ev, long_lane, &err), SL_EVENT_INVALID_LANE);

    /* Applying twice: the second, different lane conflicts with the first. */
    assert_int_equal(parse("{" BASE "}", NULL, &ev, &err), SL_EVENT_OK);
    assert_int_equal(sl_event_apply_lane(&ev, "x-1", &err), SL_EVENT_OK);
    assert_string_equal(ev.lane, "x-1");
    assert_int_equal(sl_event_apply_lane(&ev, "x-2", &err), SL_EVENT_LANE_CONFLICT);
}

static void test_decorate(void **state)
{
    (void)state;
    sl_buf out = SL_BUF_INIT;
    const char *st = "{\"id\":\"1\"}";
    assert_int_equal(sl_event_decorate(st, strlen(st), "orders", 3, 42, &out), 0);
    assert_int_equal(out.len, strlen("{\"id\":\"1\",\"sluiceset\":\"orders\",\"sluicepartition\":"
                                     "3,\"sluiceoffset\":42}"));
    assert_memory_equal(out.data,
                        "{\"id\":\"1\",\"sluiceset\":\"orders\",\"sluicepartition\":3,"
                        "\"sluiceoffset\":42}",
                        out.len);
    out.len = 0;
    assert_int_equal(sl_event_decorate("{}", 2, "a\"b", 0, 9007199254740993LL, &out), 0);
    const char *w = "{\"sluiceset\":\"a\\\"b\",\"sluicepartition\":0,\"sluiceoffset\":"
                    "9007199254740993}";
    assert_int_equal(out.len, strlen(w));
    assert_memory_equal(out.data, w, out.len);
    /* The widest numbers fit whole (this once over-read a 64-byte buffer). */
    out.len = 0;
    assert_int_equal(sl_event_decorate("{}", 2, "s", INT32_MIN, INT64_MIN, &out), 0);
    const char *wide = "{\"sluiceset\":\"s\",\"sluicepartition\":-2147483648,"
                       "\"sluiceoffset\":-9223372036854775808}";
    assert_int_equal(out.len, strlen(wide));
    assert_memory_equal(out.data, wide, out.len);
    size_t keep = out.len;
    assert_int_equal(sl_event_decorate("[1]", 3, "s", 0, 0, &out), SL_EINVAL);
    assert_int_equal(sl_event_decorate("{", 1, "s", 0, 0, &out), SL_EINVAL);
    assert_int_equal(sl_event_decorate(st, strlen(st), "\xff", 0, 0, &out), SL_EINVAL);
    assert_int_equal(out.len, keep);
    sl_buf_free(&out);

    /* A decorated event, read back and published again, loses the sluice*
     * members on encode. */
    char *s = store("{" BASE ",\"time\":\"2020-01-01T00:00:00Z\",\"sluiceset\":\"o\","
                    "\"sluicepartition\":1,\"sluiceoffset\":2}",
                    NULL, NULL);
    assert_string_equal(s, "{" BASE ",\"time\":\"2020-01-01T00:00:00Z\"}");
    free(s);
}

/* Runs binary mode; on OK checks the result parses and returns it. */
static sl_event_status binary(const sl_event_header *h, size_t n, const char *ct, const char *body,
                              size_t blen, char **json, sl_error *err)
{
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_buf_append(&out, "X", 1), 0);
    /* The body ends at a guard page, and so does the last header's value. */
    sl_event_header hh[16];
    assert_true(n <= 16);
    memcpy(hh, h, n * sizeof *h);
    if (n)
        hh[n - 1].value = guarded_in(0, h[n - 1].value, h[n - 1].value_len);
    sl_event_status st = sl_event_from_binary(hh, n, ct, blen ? guarded_in(1, body, blen) : body,
                                              blen, NULL, &out, err);
    if (st != SL_EVENT_OK) {
        assert_int_equal(out.len, 1); /* unchanged on error */
        sl_buf_free(&out);
        return st;
    }
    *json = strndup((char *)out.data + 1, out.len - 1);
    sl_buf_free(&out);
    sl_event ev;
    sl_error perr = {0};
    if (sl_event_parse(*json, strlen(*json), NULL, &ev, &perr) != SL_EVENT_OK)
        fail_msg("binary result %s does not parse: %s", *json, perr.msg);
    return st;
}

#define H(n, v)                                                                                    \
    {                                                                                              \
        n, sizeof n - 1, v, sizeof v - 1                                                           \
    }

static void test_binary(void **state)
{
    (void)state;
    sl_event_header h[] = {
        H("CE-SpecVersion", "1.0"), H("ce-id", " caf%C3%A9 "),
        H("Ce-Source", "/src%2Fx"), H("ce-type", "t"),
        H("Host", "example.com"),   H("ce-subject", "\"q \\\"x\\\" %41\""),
        H("ce-count", "5"),         H("ce-lane", "blue"),
    };
    char *j = NULL;
    sl_error err = {0};
    const char *body = "{ \"x\" : [ 1, 2 ] }";
    assert_int_equal(binary(h, 8, "application/json; charset=utf-8", body, strlen(body), &j, &err),
                     SL_EVENT_OK);
    assert_string_equal(j, "{\"specversion\":\"1.0\",\"id\":\"caf\xc3\xa9\",\"source\":\"/src/x\","
                           "\"type\":\"t\",\"subject\":\"q \\\"x\\\" A\",\"count\":\"5\","
                           "\"lane\":\"blue\",\"datacontenttype\":\"application/json; "
                           "charset=utf-8\",\"data\":{\"x\":[1,2]}}");
    free(j);

    /* Body kinds. */
    static const struct {
        const char *ct, *body;
        size_t len;
        const char *tail;
    } kinds[] = {
        {"text/plain", "h\xc3\xa9llo \"w\"", 10,
         "\"datacontenttype\":\"text/plain\",\"data\":\"h\xc3\xa9llo \\\"w\\\"\"}"},
        {"TEXT/csv", "a\xff", 2, "\"datacontenttype\":\"TEXT/csv\",\"data_base64\":\"Yf8=\"}"},
        {"application/octet-stream", "\x00\x01\x02\xff", 4,
         "\"datacontenttype\":\"application/octet-stream\",\"data_base64\":\"AAEC/w==\"}"},
        {"application/json", "{", 1,
         "\"datacontenttype\":\"application/json\",\"data_base64\":\"ew==\"}"},
        {"application/vnd.foo+json", " [1] ", 5,
         "\"datacontenttype\":\"application/vnd.foo+json\",\"data\":[1]}"},
        {"application/json", "\"s\"", 3,
         "\"datacontenttype\":\"application/json\",\"data\":\"s\"}"},
        {NULL, "abc", 3, "\"type\":\"t\",\"data_base64\":\"YWJj\"}"},
        {"text/plain", "", 0, "\"datacontenttype\":\"text/plain\"}"},
        /* textual types other than text: a string, as the CloudEvents
         * JSON format's application/xml example */
        {"application/xml", "<a b=\"1\"/>\n", 11,
         "\"datacontenttype\":\"application/xml\",\"data\":\"<a b=\\\"1\\\"/>\\n\"}"},
        {"image/svg+xml", "<svg/>", 6,
         "\"datacontenttype\":\"image/svg+xml\",\"data\":\"<svg/>\"}"},
        {"application/x-www-form-urlencoded", "a=1&b=%20", 9,
         "\"datacontenttype\":\"application/x-www-form-urlencoded\",\"data\":\"a=1&b=%20\"}"},
        {"application/vnd.x; charset=UTF-8", "\xc3\xa9", 2,
         "\"datacontenttype\":\"application/vnd.x; charset=UTF-8\",\"data\":\"\xc3\xa9\"}"},
        {"application/xml", "<a>\xff</a>", 8,
         "\"datacontenttype\":\"application/xml\",\"data_base64\":\"PGE+/zwvYT4=\"}"},
        /* another charset: bytes, even when they happen to be valid UTF-8 */
        {"text/plain; charset=\"iso-8859-1\"", "\xc3\xa9", 2,
         "\"datacontenttype\":\"text/plain; "
         "charset=\\\"iso-8859-1\\\"\",\"data_base64\":\"w6k=\"}"},
        {"text/plain; charset=us-ascii", "ok", 2,
         "\"datacontenttype\":\"text/plain; charset=us-ascii\",\"data\":\"ok\"}"},
        {"application/xmlx", "<a/>", 4,
         "\"datacontenttype\":\"application/xmlx\",\"data_base64\":\"PGEvPg==\"}"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        assert_int_equal(binary(h, 4, kinds[i].ct, kinds[i].body, kinds[i].len, &j, &err),
                         SL_EVENT_OK);
        size_t jl = strlen(j), tl = strlen(kinds[i].tail);
        if (jl < tl || strcmp(j + jl - tl, kinds[i].tail) != 0)
            fail_msg("kind %zu: %s does not end with %s", i, j, kinds[i].tail);
        free(j);
    }

    /* Bad headers. */
    static const struct {
        sl_event_header h;
        const char *msg;
    } bad[] = {
        {H("ce-id", "%ZZ"), "header ce-id: invalid percent-encoding"},
        {H("ce-id", "abc%4"), "invalid percent-encoding"},
        {H("ce-id", "%"), "invalid percent-encoding"},
        {H("ce-id", "%C0%A0"), "not valid UTF-8"},
        {H("ce-id", "%ED%A0%80"), "not valid UTF-8"},
        {H("ce-id", "\xff"), "not valid UTF-8"},
        {H("ce-datacontenttype", "text/plain"), "header ce-datacontenttype: not allowed"},
        {H("ce-data", "x"), "the data travels in the body"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_event_header hh[2] = {h[0], bad[i].h};
        sl_event_status st = binary(hh, 2, "text/plain", "x", 1, &j, &err);
        if (st != SL_EVENT_INVALID_EVENT || !strstr(err.msg, bad[i].msg))
            fail_msg("bad[%zu]: %s \"%s\"", i, sl_event_status_name(st), err.msg);
    }
    /* Attribute validation happens in the parse that follows. */
    sl_event_header up[] = {H("ce-Foo_Bar", "x")};
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_event_from_binary(up, 1, NULL, NULL, 0, NULL, &out, &err), SL_EVENT_OK);
    sl_event ev;
    assert_int_equal(sl_event_parse((char *)out.data, out.len, NULL, &ev, &err),
                     SL_EVENT_INVALID_EVENT);
    assert_non_null(strstr(err.msg, "\"foo_bar\""));
    sl_buf_free(&out);

    /* Over the limit. */
    sl_event_limits lim = {.max_bytes = 4};
    assert_int_equal(sl_event_from_binary(h, 4, NULL, "12345", 5, &lim, &out, &err),
                     SL_EVENT_TOO_LARGE);
    assert_int_equal(out.len, 0);
}

static void test_uuid7(void **state)
{
    (void)state;
    char prev[37] = "", u[37];
    /* Many in one millisecond, then across milliseconds: always increasing. */
    for (int i = 0; i < 3000; i++) {
        int64_t ms = NOW_MS + (i < 1000 ? 0 : i);
        sl_event_uuid7(ms, u);
        if (!is_uuid7(u, ms))
            fail_msg("bad uuid %s", u);
        if (strcmp(prev, u) >= 0)
            fail_msg("%s not after %s", u, prev);
        memcpy(prev, u, sizeof u);
    }
    /* Past the 12-bit counter in one millisecond: still increasing, the
     * timestamp runs ahead. */
    for (int i = 0; i < 6000; i++) {
        sl_event_uuid7(NOW_MS + 5000, u);
        if (strcmp(prev, u) >= 0)
            fail_msg("%s not after %s", u, prev);
        memcpy(prev, u, sizeof u);
    }
    assert_false(is_uuid7(u, NOW_MS + 5000));
    assert_true(is_uuid7(u, NOW_MS + 5001) || is_uuid7(u, NOW_MS + 5002));
    /* A clock that went back is followed, not the old timestamp. */
    sl_event_uuid7(0, u);
    assert_true(is_uuid7(u, 0));
    assert_memory_equal(u, "00000000-0000-7", 15);
    /* Different random bits for two ids in different milliseconds. */
    char a[37], b[37];
    sl_event_uuid7(1, a);
    sl_event_uuid7(2, b);
    assert_memory_not_equal(a + 19, b + 19, 17);
}

static void test_rfc3339(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t ms;
    } good[] = {
        {"1970-01-01T00:00:00Z", 0},
        {NOW_TEXT, NOW_MS},
        {"2024-05-01T12:00:00.25Z", NOW_MS},
        {"2024-05-01T12:00:00.2509999999999999999999999Z", NOW_MS},
        {"2024-05-01t14:00:00.250+02:00", NOW_MS},
        {"2024-05-01T11:30:00.250-00:30", NOW_MS},
        {"2024-05-01T12:00:00.250-00:00", NOW_MS},
        {"2024-02-29T13:45:00.123456789+01:00", 1709210700123LL},
        {"1969-12-31T23:59:59.999z", -1},
        {"0000-01-01T00:00:00Z", -62167219200000LL},
        {"9999-12-31T23:59:59.999Z", 253402300799999LL},
        {"2000-02-29T00:00:00Z", 951782400000LL},
        {"2016-12-31T23:59:60Z", 1483228800000LL},
        {"2017-01-01T05:29:60+05:30", 1483228800000LL},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t ms = 7;
        if (sl_time_parse_rfc3339(good[i].s, strlen(good[i].s), &ms) != 0 || ms != good[i].ms)
            fail_msg("%s: got %lld, want %lld", good[i].s, (long long)ms, (long long)good[i].ms);
    }
    static const char *bad[] = {
        "",
        "1900-02-29T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "2024-04-31T00:00:00Z",
        "2024-13-01T00:00:00Z",
        "2024-00-10T00:00:00Z",
        "2024-01-00T00:00:00Z",
        "2024-01-01T24:00:00Z",
        "2024-01-01T23:60:00Z",
        "2024-01-01T23:59:61Z",
        "2024-01-01T23:58:60Z",
        "2024-01-01T23:59:60+01:00",
        "2024-01-01 12:00:00Z",
        "2024-01-01T12:00Z",
        "2024-01-01T12:00:00",
        "2024-01-01T12:00:00+0100",
        "2024-01-01T12:00:00+01",
        "2024-01-01T12:00:00+24:00",
        "2024-01-01T12:00:00+01:60",
        "2024-01-01T12:00:00.Z",
        "2024-01-01T12:00:00,5Z",
        "2024-01-01T12:00:00Zx",
        "2024-01-01T12:00:00Z ",
        "2024-1-01T12:00:00Z",
        "+2024-01-01T12:00:00Z",
        "2024-01-01T12:00:00UTC",
        "2024-01-01",
        "20240101T120000Z",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ms = 7;
        if (sl_time_parse_rfc3339(bad[i], strlen(bad[i]), &ms) != SL_EINVAL || ms != 7)
            fail_msg("%s accepted", bad[i]);
    }
    /* Length is honoured: a valid prefix does not make a longer string valid,
     * and the parser does not read past len. */
    const char *g = guarded("2024-05-01T12:00:00Z", 20);
    int64_t ms;
    assert_int_equal(sl_time_parse_rfc3339(g, 20, &ms), 0);
    for (size_t k = 0; k < 20; k++) {
        g = guarded("2024-05-01T12:00:00Z", k);
        assert_int_equal(sl_time_parse_rfc3339(g, k, &ms), SL_EINVAL);
    }
    g = guarded("2024-05-01T12:00:00.", 20);
    assert_int_equal(sl_time_parse_rfc3339(g, 20, &ms), SL_EINVAL);

    char out[SL_TIME_RFC3339_MAX];
    assert_int_equal(sl_time_format_rfc3339(0, out), 24);
    assert_string_equal(out, "1970-01-01T00:00:00.000Z");
    assert_int_equal(sl_time_format_rfc3339(-1, out), 24);
    assert_string_equal(out, "1969-12-31T23:59:59.999Z");
    sl_time_format_rfc3339(NOW_MS, out);
    assert_string_equal(out, NOW_TEXT);
    assert_int_equal(sl_time_format_rfc3339(253402300800000LL, out), 0); /* year 10000 */
    assert_string_equal(out, "");
    assert_int_equal(sl_time_format_rfc3339(-62167219200001LL, out), 0); /* year -1 */

    /* Round trips over the whole range, checked against gmtime_r. */
    unsigned seed = 7;
    for (int i = 0; i < 20000; i++) {
        int64_t lo = -62167219200000LL, hi = 253402300799999LL;
        uint64_t r =
            (uint64_t)rand_r(&seed) << 42 ^ (uint64_t)rand_r(&seed) << 21 ^ (uint64_t)rand_r(&seed);
        int64_t v = lo + (int64_t)(r % (uint64_t)(hi - lo + 1));
        size_t n = sl_time_format_rfc3339(v, out);
        assert_int_equal(n, 24);
        int64_t back;
        assert_int_equal(sl_time_parse_rfc3339(out, n, &back), 0);
        assert_true(back == v);
        time_t t = (time_t)(v >= 0 ? v / 1000 : (v - 999) / 1000);
        struct tm tm;
        assert_non_null(gmtime_r(&t, &tm));
        char ref[40];
        snprintf(ref, sizeof ref, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (int)(((v % 1000) + 1000) % 1000));
        assert_string_equal(out, ref);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_typical), cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_limits),        cmocka_unit_test(test_encode_fills),
        cmocka_unit_test(test_lanes),         cmocka_unit_test(test_decorate),
        cmocka_unit_test(test_binary),        cmocka_unit_test(test_uuid7),
        cmocka_unit_test(test_rfc3339),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
