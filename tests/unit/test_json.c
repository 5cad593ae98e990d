/*
 * tests/unit/test_json.c — the non-allocating JSON scanner: an RFC 8259
 * corpus of valid and invalid documents (numbers, every escape, surrogates,
 * malformed UTF-8, nesting limits, trailing data), error offsets, partial
 * input, iteration, unescaping, compaction and string output checked against
 * jansson as an oracle, a random mutation run against jansson, and every
 * input replayed right before a PROT_NONE page so a one-byte over-read
 * crashes.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/base/json.h"

/* ---- oracle ------------------------------------------------------------ */

static json_t *jparse(const char *s, size_t n)
{
    json_error_t e;
    return json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &e);
}

static int check(const char *s, size_t n, int depth, sl_json_tok *tok, sl_error *err)
{
    static tu_guard g;
    const char *p = tu_guard_put(&g, s, n);
    int rc = sl_json_validate(p, n, depth, tok, err);
    if (rc == 0) { /* the token must point into the guarded copy */
        assert_true(tok->p >= p && tok->p + tok->len <= p + n);
        tok->p = s + (tok->p - p);
    }
    return rc;
}

/* The same token, copied so its last byte is the last readable one: the
 * operations under test (iterate, unescape, compact) run on this copy. */
static sl_json_tok at_guard(const sl_json_tok *t)
{
    static tu_guard g;
    sl_json_tok c = *t;
    c.p = tu_guard_put(&g, t->p, t->len);
    return c;
}

/* ---- corpus -------------------------------------------------------------- */

static const struct {
    const char *json;
    sl_json_type type;
} valid[] = {
    {"0", SL_JSON_NUMBER},
    {"-0", SL_JSON_NUMBER},
    {"1e5", SL_JSON_NUMBER},
    {"-0.0e-0", SL_JSON_NUMBER},
    {"1E+2", SL_JSON_NUMBER},
    {"123456789012345678901234567890", SL_JSON_NUMBER},
    {"0.5", SL_JSON_NUMBER},
    {"-12.75e3", SL_JSON_NUMBER},
    {" \t\r\n42 \t\r\n", SL_JSON_NUMBER},
    {"true", SL_JSON_TRUE},
    {"false", SL_JSON_FALSE},
    {"null", SL_JSON_NULL},
    {"\"\"", SL_JSON_STRING},
    {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", SL_JSON_STRING},
    {"\"\\u0000\\u001f\\u00e9\\u20AC\\uFFFF\"", SL_JSON_STRING},
    {"\"\\ud83d\\ude00\"", SL_JSON_STRING},
    {"\"\\uDBFF\\uDFFF\"", SL_JSON_STRING},
    {"\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf \xed\x9f\xbf \xee\x80\x80\"",
     SL_JSON_STRING},
    {"\"\x7f\"", SL_JSON_STRING},
    {"\"a long plain string that crosses several eight-byte words\"", SL_JSON_STRING},
    {"[]", SL_JSON_ARRAY},
    {"[ ]", SL_JSON_ARRAY},
    {"{}", SL_JSON_OBJECT},
    {"{ }", SL_JSON_OBJECT},
    {"[1,\"a\",true,false,null,{},[],-1.5e-7]", SL_JSON_ARRAY},
    {"{\"a\":{\"b\":[{\"c\":null}]},\"\":0}", SL_JSON_OBJECT},
    {"{\"a\":1,\"a\":2}", SL_JSON_OBJECT}, /* duplicates are the caller's business */
    {" { \"k\" : [ 1 , 2 ] , \"s\" : \"x y\" } ", SL_JSON_OBJECT},
};

static const struct {
    const char *json;
    int code;
    size_t at; /* byte offset the message must name */
    const char *why;
} invalid[] = {
    {"", SL_EPARTIAL, 0, "end of input"},
    {"   ", SL_EPARTIAL, 3, "end of input"},
    {"01", SL_EPARSE, 0, "leading zero"},
    {"-01", SL_EPARSE, 1, "leading zero"},
    {"[01]", SL_EPARSE, 1, "leading zero"},
    {"1.", SL_EPARTIAL, 2, "end of input"},
    {"[1.]", SL_EPARSE, 3, "digit after '.'"},
    {"1.e5", SL_EPARSE, 2, "digit after '.'"},
    {".5", SL_EPARSE, 0, "expected a JSON value"},
    {"+1", SL_EPARSE, 0, "expected a JSON value"},
    {"-", SL_EPARTIAL, 1, "end of input"},
    {"-a", SL_EPARSE, 1, "digit after '-'"},
    {"1e", SL_EPARTIAL, 2, "end of input"},
    {"1e+", SL_EPARTIAL, 3, "end of input"},
    {"[1e+]", SL_EPARSE, 4, "exponent"},
    {"0x10", SL_EPARSE, 1, "unexpected data"},
    {"NaN", SL_EPARSE, 0, "expected a JSON value"},
    {"Infinity", SL_EPARSE, 0, "expected a JSON value"},
    {"tru", SL_EPARTIAL, 3, "end of input"},
    {"trUe", SL_EPARSE, 0, "invalid literal"},
    {"nul", SL_EPARTIAL, 3, "end of input"},
    {"\"abc", SL_EPARTIAL, 4, "inside a string"},
    {"\"\\", SL_EPARTIAL, 2, "escape"},
    {"\"\\x\"", SL_EPARSE, 1, "invalid escape"},
    {"\"\\u12\"", SL_EPARSE, 5, "hex digit"},
    {"\"\\u12", SL_EPARTIAL, 5, "\\u escape"},
    {"\"\\ud800\"", SL_EPARSE, 1, "unpaired surrogate"},
    {"\"\\ud800\\u0041\"", SL_EPARSE, 1, "unpaired surrogate"},
    {"\"\\udc00\"", SL_EPARSE, 1, "unpaired surrogate"},
    {"\"\\ud800", SL_EPARTIAL, 7, "surrogate pair"},
    {"\"\\ud800\\", SL_EPARTIAL, 8, "surrogate pair"},
    {"\"\\ud800\\ud800\"", SL_EPARSE, 1, "unpaired surrogate"},
    {"\"a\tb\"", SL_EPARSE, 2, "control character 0x09"},
    {"\"a\nb\"", SL_EPARSE, 2, "control character"},
    {"\"\x80\"", SL_EPARSE, 1, "invalid UTF-8"},
    {"\"\xc0\x80\"", SL_EPARSE, 1, "invalid UTF-8"},         /* overlong NUL */
    {"\"\xc1\xbf\"", SL_EPARSE, 1, "invalid UTF-8"},         /* overlong */
    {"\"\xe0\x80\xaf\"", SL_EPARSE, 2, "invalid UTF-8"},     /* overlong '/' */
    {"\"\xf0\x80\x80\xaf\"", SL_EPARSE, 2, "invalid UTF-8"}, /* overlong '/' */
    {"\"\xed\xa0\x80\"", SL_EPARSE, 2, "invalid UTF-8"},     /* U+D800 */
    {"\"\xed\xbf\xbf\"", SL_EPARSE, 2, "invalid UTF-8"},     /* U+DFFF */
    {"\"\xf4\x90\x80\x80\"", SL_EPARSE, 2, "invalid UTF-8"}, /* U+110000 */
    {"\"\xf5\x80\x80\x80\"", SL_EPARSE, 1, "invalid UTF-8"},
    {"\"\xfe\"", SL_EPARSE, 1, "invalid UTF-8"},
    {"\"\xff\"", SL_EPARSE, 1, "invalid UTF-8"},
    {"\"\xc3\"", SL_EPARSE, 2, "continuation"},
    {"\"\xe2\x82\"", SL_EPARSE, 3, "continuation"},
    {"\"\xe2\x82", SL_EPARTIAL, 3, "UTF-8"},
    {"[", SL_EPARTIAL, 1, "end of input"},
    {"[1,", SL_EPARTIAL, 3, "end of input"},
    {"[1,]", SL_EPARSE, 3, "expected a JSON value"},
    {"[1 2]", SL_EPARSE, 3, "',' or ']'"},
    {"[1}", SL_EPARSE, 2, "',' or ']'"},
    {"{\"a\":1]", SL_EPARSE, 6, "',' or '}'"},
    {"{", SL_EPARTIAL, 1, "end of input"},
    {"{\"a\"", SL_EPARTIAL, 4, "end of input"},
    {"{\"a\" 1}", SL_EPARSE, 5, "':'"},
    {"{\"a\":}", SL_EPARSE, 5, "expected a JSON value"},
    {"{\"a\":1,}", SL_EPARSE, 7, "member name"},
    {"{1:2}", SL_EPARSE, 1, "member name"},
    {"{'a':1}", SL_EPARSE, 1, "member name"},
    {"1 2", SL_EPARSE, 2, "unexpected data"},
    {"{} x", SL_EPARSE, 3, "unexpected data"},
    {"\"a\"\"b\"", SL_EPARSE, 3, "unexpected data"},
    {"nullx", SL_EPARSE, 4, "unexpected data"},
    {"[\"a\",\x01]", SL_EPARSE, 5, "byte 0x01"},
    {"\xef\xbb\xbf{}", SL_EPARSE, 0, "byte 0xef"}, /* RFC 8259 §8.1: no BOM */
};

static void test_valid_corpus(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        const char *s = valid[i].json;
        size_t n = strlen(s);
        sl_json_tok tok;
        sl_error err = {0};
        int rc = check(s, n, 64, &tok, &err);
        if (rc)
            fail_msg("valid[%zu] %s refused: %s", i, s, err.msg);
        assert_int_equal(tok.type, valid[i].type);
        json_t *j = jparse(s, n);
        if (!j)
            fail_msg("jansson refuses valid[%zu] %s", i, s);
        json_decref(j);
        /* The token is the value without surrounding whitespace. */
        const char *t = s;
        while (*t == ' ' || *t == '\t' || *t == '\r' || *t == '\n')
            t++;
        assert_ptr_equal(tok.p, t);
        size_t tl = strlen(t);
        while (tl &&
               (t[tl - 1] == ' ' || t[tl - 1] == '\t' || t[tl - 1] == '\r' || t[tl - 1] == '\n'))
            tl--;
        assert_int_equal(tok.len, tl);
    }
}

static void test_invalid_corpus(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        const char *s = invalid[i].json;
        size_t n = strlen(s);
        sl_json_tok tok;
        sl_error err = {0};
        int rc = check(s, n, 64, &tok, &err);
        char want[32];
        snprintf(want, sizeof want, "byte %zu: ", invalid[i].at);
        if (rc != invalid[i].code || strncmp(err.msg, want, strlen(want)) != 0 ||
            !strstr(err.msg, invalid[i].why))
            fail_msg("invalid[%zu] %s: rc %d (%s), want %d at byte %zu with \"%s\"", i, s, rc,
                     err.msg, invalid[i].code, invalid[i].at, invalid[i].why);
        assert_int_equal(err.code, rc);
        json_t *j = jparse(s, n);
        if (j)
            fail_msg("jansson accepts invalid[%zu] %s", i, s);
    }
}

static void test_flags_and_next(void **state)
{
    (void)state;
    sl_json_tok t;
    const char *next;
    const char *s = "  12 , x";
    assert_int_equal(sl_json_value(s, s + strlen(s), 8, &t, &next, NULL), 0);
    assert_int_equal(t.type, SL_JSON_NUMBER);
    assert_true(t.flags & SL_JSON_INTEGER);
    assert_ptr_equal(next, s + 4); /* trailing whitespace is not skipped */
    s = "-1.5";
    assert_int_equal(sl_json_value(s, s + 4, 8, &t, &next, NULL), 0);
    assert_false(t.flags & SL_JSON_INTEGER);
    s = "\"a\\nb\"";
    assert_int_equal(sl_json_value(s, s + 6, 8, &t, &next, NULL), 0);
    assert_true(t.flags & SL_JSON_ESCAPED);
    s = "\"ab\"";
    assert_int_equal(sl_json_value(s, s + 4, 8, &t, &next, NULL), 0);
    assert_int_equal(t.flags, 0);
    s = "{\"a\":[1,2]}";
    assert_int_equal(sl_json_value(s, s + strlen(s), 8, &t, &next, NULL), 0);
    assert_int_equal(t.flags, 0);
    s = "{\"a\":[1, 2]}";
    assert_int_equal(sl_json_value(s, s + strlen(s), 8, &t, &next, NULL), 0);
    assert_int_equal(t.flags, SL_JSON_SPACED);
    s = "{\"a b\":\"c d\"}"; /* spaces inside strings do not count */
    assert_int_equal(sl_json_value(s, s + strlen(s), 8, &t, &next, NULL), 0);
    assert_int_equal(t.flags, 0);

    /* On failure *next points at the offending byte; offsets are from base. */
    sl_error err = {0};
    static const char whole[] = "0123456789[1,2,01]";
    const char *doc = whole + 10;
    assert_int_equal(sl_json_value(doc, doc + 8, 8, &t, &next, &err), SL_EPARSE);
    assert_ptr_equal(next, doc + 5);
    assert_int_equal(sl_json_value_from(whole, doc, doc + 8, 8, &t, &next, &err), SL_EPARSE);
    assert_string_equal(err.msg, "byte 15: leading zero in number");
    assert_int_equal(sl_json_value(doc, doc + 5, 8, &t, &next, &err), SL_EPARTIAL);
    assert_ptr_equal(next, doc + 5);

    /* Too deep: *next is the bracket that went one level too far. */
    const char *deep = " [[1]]";
    assert_int_equal(sl_json_value(deep, deep + 6, 1, &t, &next, &err), SL_EPARSE);
    assert_ptr_equal(next, deep + 2);
    assert_string_equal(err.msg, "byte 2: nesting deeper than 1 level");

    /* A number running to the end of the input is complete. */
    assert_int_equal(sl_json_value(doc + 1, doc + 2, 8, &t, &next, NULL), 0);
    assert_int_equal(t.len, 1);

    /* Success leaves err untouched. */
    sl_error keep = {.code = 7, .msg = "keep"};
    assert_int_equal(sl_json_validate("[]", 2, 4, &t, &keep), 0);
    assert_string_equal(keep.msg, "keep");

    /* Only whether it is JSON: no token wanted. */
    assert_int_equal(sl_json_validate("{\"a\":[1]}", 9, 4, NULL, NULL), 0);
    assert_int_equal(sl_json_validate("{\"a\":", 5, 4, NULL, NULL), SL_EPARTIAL);
}

static void test_depth(void **state)
{
    (void)state;
    char buf[6 * 1100 + 8];
    for (int d = 0; d <= 1030; d += (d < 70 ? 1 : 97)) {
        for (int obj = 0; obj < 2; obj++) {
            size_t n = 0;
            for (int i = 0; i < d; i++)
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", obj ? "{\"k\":" : "[");
            buf[n++] = '1';
            for (int i = 0; i < d; i++)
                buf[n++] = obj ? '}' : ']';
            sl_json_tok t;
            sl_error err = {0};
            int limit = d <= SL_JSON_DEPTH_LIMIT ? d : SL_JSON_DEPTH_LIMIT;
            int rc = check(buf, n, d, &t, &err);
            if (d <= SL_JSON_DEPTH_LIMIT) {
                assert_int_equal(rc, 0);
            } else {
                assert_int_equal(rc, SL_EPARSE);
                assert_non_null(strstr(err.msg, "nesting deeper than 1024"));
            }
            if (d == 0)
                continue;
            rc = check(buf, n, limit - 1, &t, &err);
            assert_int_equal(rc, SL_EPARSE);
            char want[64];
            snprintf(want, sizeof want, "nesting deeper than %d level", limit - 1);
            assert_non_null(strstr(err.msg, want));
        }
    }
    /* Negative depth means scalars only. */
    sl_json_tok t;
    assert_int_equal(sl_json_validate("[]", 2, -5, &t, NULL), SL_EPARSE);
    assert_int_equal(sl_json_validate("7", 1, -5, &t, NULL), 0);
}

/* Every prefix of a valid document is partial (or, for a bare number, a
 * complete shorter value); never an over-read at the guard. */
static void test_truncations(void **state)
{
    (void)state;
    const char *doc = "{\"a\\u00e9\\ud83d\\ude00\":[true,false,null,-1.25e+10,\"\xf0\x9f\x98\x80"
                      "\"],\"b\":{}}";
    size_t n = strlen(doc);
    for (size_t k = 0; k < n; k++) {
        sl_json_tok t;
        sl_error err = {0};
        int rc = check(doc, k, 64, &t, &err);
        if (rc != SL_EPARTIAL)
            fail_msg("prefix of %zu bytes: rc %d (%s)", k, rc, err.msg);
    }
}

static void test_iterate(void **state)
{
    (void)state;
    const char *s = "{ \"a\" : 1 , \"b\\\"\":[1, {\"x\":\"]}\"}], \"c\":\"s\\n\", \"d\":-2.5e1,"
                    "\"e\":true,\"f\":null,\"g\":{} }";
    sl_json_tok obj, k, v;
    assert_int_equal(check(s, strlen(s), 8, &obj, NULL), 0);
    obj = at_guard(&obj);
    sl_json_iter it;
    sl_json_iter_init(&it, &obj);
    static const struct {
        const char *key, *val;
        sl_json_type type;
        uint32_t flags;
    } want[] = {
        {"\"a\"", "1", SL_JSON_NUMBER, SL_JSON_INTEGER},
        {"\"b\\\"\"", "[1, {\"x\":\"]}\"}]", SL_JSON_ARRAY, SL_JSON_SPACED},
        {"\"c\"", "\"s\\n\"", SL_JSON_STRING, SL_JSON_ESCAPED},
        {"\"d\"", "-2.5e1", SL_JSON_NUMBER, 0},
        {"\"e\"", "true", SL_JSON_TRUE, 0},
        {"\"f\"", "null", SL_JSON_NULL, 0},
        {"\"g\"", "{}", SL_JSON_OBJECT, 0},
    };
    size_t i = 0;
    while (sl_json_iter_member(&it, &k, &v)) {
        assert_true(i < sizeof want / sizeof want[0]);
        assert_int_equal(k.type, SL_JSON_STRING);
        assert_int_equal(k.len, strlen(want[i].key));
        assert_memory_equal(k.p, want[i].key, k.len);
        assert_int_equal(v.len, strlen(want[i].val));
        assert_memory_equal(v.p, want[i].val, v.len);
        assert_int_equal(v.type, want[i].type);
        assert_int_equal(v.flags, want[i].flags);
        i++;
    }
    assert_int_equal(i, 7);
    assert_false(sl_json_iter_member(&it, &k, &v));

    const char *a = "[ ]";
    assert_int_equal(check(a, 3, 8, &obj, NULL), 0);
    sl_json_iter_init(&it, &obj);
    assert_false(sl_json_iter_elem(&it, &v));
    a = "[\"x,]\",[[]] ,3]";
    assert_int_equal(check(a, strlen(a), 8, &obj, NULL), 0);
    obj = at_guard(&obj);
    sl_json_iter_init(&it, &obj);
    assert_true(sl_json_iter_elem(&it, &v));
    assert_int_equal(v.len, 5);
    assert_true(sl_json_iter_elem(&it, &v));
    assert_int_equal(v.type, SL_JSON_ARRAY);
    assert_int_equal(v.len, 4);
    assert_true(sl_json_iter_elem(&it, &v));
    assert_int_equal(v.len, 1);
    assert_false(sl_json_iter_elem(&it, &v));
}

static void test_unescape(void **state)
{
    (void)state;
    const char *s = "\"q\\\"b\\\\s\\/b\\bf\\fn\\nr\\rt\\tu\\u0041\\u00e9\\u20ac\\ud83d\\ude00"
                    "\\u0000z\xc3\xa9\"";
    const char want[] = "q\"b\\s/b\bf\fn\nr\rt\tuA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
                        "\0z\xc3\xa9";
    sl_json_tok t;
    assert_int_equal(check(s, strlen(s), 1, &t, NULL), 0);
    t = at_guard(&t);
    char out[128];
    size_t n = 0;
    assert_int_equal(sl_json_unescape(&t, out, sizeof out, &n), 0);
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(out, want, n);
    /* The documented bound: len - 2 always fits. */
    assert_int_equal(sl_json_unescape(&t, out, t.len - 2, &n), 0);
    assert_int_equal(sl_json_unescape(&t, out, 5, &n), SL_ETOOBIG);
    assert_int_equal(n, 5);
    assert_memory_equal(out, want, 5);

    /* Streaming through a 4-byte buffer gives the same bytes. */
    char acc[128];
    size_t pos = 0, total = 0, got;
    while ((got = sl_json_unescape_part(&t, &pos, acc + total, 4)) > 0)
        total += got;
    assert_int_equal(pos, t.len);
    assert_int_equal(total, sizeof want - 1);
    assert_memory_equal(acc, want, total);

    /* Agreement with jansson on the decoded text. */
    json_t *j = jparse(s, strlen(s));
    assert_non_null(j);
    assert_int_equal(json_string_length(j), n = sizeof want - 1);
    assert_memory_equal(json_string_value(j), want, n);
    json_decref(j);

    sl_json_tok e;
    assert_int_equal(check("\"\"", 2, 1, &e, NULL), 0);
    assert_int_equal(sl_json_unescape(&e, out, 0, &n), 0);
    assert_int_equal(n, 0);
    sl_json_tok num;
    assert_int_equal(check("12", 2, 1, &num, NULL), 0);
    assert_int_equal(sl_json_unescape(&num, out, sizeof out, &n), SL_EINVAL);
}

/* Reference compaction: drop whitespace outside strings, byte by byte. */
static size_t ref_compact(const char *p, size_t n, char *out)
{
    size_t k = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_str) {
            in_str = esc || c != '"';
            esc = !esc && c == '\\';
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            continue;
        } else {
            in_str = c == '"';
        }
        out[k++] = c;
    }
    return k;
}

static const char *spaced_docs[] = {
    " { \"a\" : [ 1 , 2 , { \"b\" : \"x y\\\" z\" } ] ,\n\t\"c\" : null } ",
    "[\r\n]",
    "\"  keep  \"",
    "{\"already\":\"compact\",\"n\":[1,2.5e3,true]}",
    "  -0.5  ",
    "{ \"\\\\\" : \"\\\\\" , \"x\" : \"\\u0020 \" }",
};

static void test_compact(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof spaced_docs / sizeof spaced_docs[0]; i++) {
        const char *s = spaced_docs[i];
        sl_json_tok t;
        assert_int_equal(check(s, strlen(s), 16, &t, NULL), 0);
        sl_buf out = SL_BUF_INIT;
        assert_int_equal(sl_buf_append(&out, "<", 1), 0);
        sl_json_tok g = at_guard(&t);
        assert_int_equal(sl_json_compact(g.p, g.len, &out), 0);
        const char *c = (const char *)out.data + 1;
        size_t cn = out.len - 1;
        /* Still valid, no spacing flag, equal to the original for jansson. */
        sl_json_tok ct;
        assert_int_equal(check(c, cn, 16, &ct, NULL), 0);
        assert_int_equal(ct.flags & SL_JSON_SPACED, 0);
        json_t *a = jparse(s, strlen(s)), *b = jparse(c, cn);
        assert_non_null(a);
        assert_non_null(b);
        assert_true(json_equal(a, b));
        /* Byte-identical to the input minus whitespace outside strings. */
        char ref[256];
        size_t rn = ref_compact(t.p, t.len, ref);
        assert_int_equal(cn, rn);
        assert_memory_equal(c, ref, rn);
        json_decref(a);
        json_decref(b);
        /* Compacting again changes nothing. */
        sl_buf again = SL_BUF_INIT;
        assert_int_equal(sl_json_compact(c, cn, &again), 0);
        assert_int_equal(again.len, cn);
        assert_memory_equal(again.data, c, cn);
        sl_buf_free(&again);
        sl_buf_free(&out);
    }
}

static void gen_ws(char *b, size_t *n, unsigned *seed)
{
    static const char ws[] = " \t\r\n";
    int k = (int)(rand_r(seed) % 4) == 0 ? (int)(rand_r(seed) % 12) : 0;
    while (k--)
        b[(*n)++] = ws[rand_r(seed) % 4];
}

/* A random value with random spacing, strings of every length with escapes
 * and multi-byte characters at every alignment. */
static void gen_value(char *b, size_t *n, int depth, unsigned *seed)
{
    static const char *pieces[] = {
        "a", "\\\"", "\\\\", "\\n",   "\\u00e9", "\xc3\xa9", "\xf0\x9f\x98\x80",
        " ", "\\/",  "x y",  "}]{[,:"};
    int kind = (int)(rand_r(seed) % (depth > 0 ? 6 : 3));
    gen_ws(b, n, seed);
    if (kind == 0) {
        *n += (size_t)sprintf(b + *n, "%d", (int)(rand_r(seed) % 2000) - 1000);
    } else if (kind <= 2) {
        b[(*n)++] = '"';
        int len = (int)(rand_r(seed) % 40);
        for (int i = 0; i < len; i++) {
            const char *pc = pieces[rand_r(seed) % (sizeof pieces / sizeof pieces[0])];
            *n += (size_t)sprintf(b + *n, "%s", pc);
        }
        b[(*n)++] = '"';
    } else {
        bool obj = kind == 3;
        int count = (int)(rand_r(seed) % 5);
        b[(*n)++] = obj ? '{' : '[';
        for (int i = 0; i < count; i++) {
            if (i)
                b[(*n)++] = ',';
            if (obj) {
                gen_ws(b, n, seed);
                *n += (size_t)sprintf(b + *n, "\"k%d\"", i);
                gen_ws(b, n, seed);
                b[(*n)++] = ':';
            }
            gen_value(b, n, depth - 1, seed);
        }
        gen_ws(b, n, seed);
        b[(*n)++] = obj ? '}' : ']';
    }
    gen_ws(b, n, seed);
}

static void test_compact_random(void **state)
{
    (void)state;
    static char doc[1 << 16], ref[1 << 16];
    unsigned seed = 99;
    sl_buf out = SL_BUF_INIT;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 0;
        gen_value(doc, &n, 4, &seed);
        assert_true(n < sizeof doc);
        sl_json_tok t;
        sl_error err = {0};
        if (check(doc, n, 16, &t, &err))
            fail_msg("generated %.*s: %s", (int)n, doc, err.msg);
        sl_json_tok g = at_guard(&t);
        out.len = 0;
        assert_int_equal(sl_json_compact(g.p, g.len, &out), 0);
        size_t rn = ref_compact(t.p, t.len, ref);
        assert_int_equal(out.len, rn);
        assert_memory_equal(out.data, ref, rn);
        assert_int_equal(!!(t.flags & SL_JSON_SPACED),
                         (t.type == SL_JSON_OBJECT || t.type == SL_JSON_ARRAY) && rn != t.len);
    }
    sl_buf_free(&out);
}

static void test_put_string(void **state)
{
    (void)state;
    char in[200];
    size_t n = 0;
    for (int c = 1; c < 0x80; c++)
        in[n++] = (char)c;
    memcpy(in + n, "\xc3\xa9\xf0\x9f\x98\x80", 6);
    n += 6;
    in[n++] = '\0';
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_json_put_string(&out, in, n), 0);
    sl_json_tok t;
    assert_int_equal(check((char *)out.data, out.len, 1, &t, NULL), 0);
    assert_int_equal(t.type, SL_JSON_STRING);
    json_t *j = jparse((char *)out.data, out.len);
    assert_non_null(j);
    assert_int_equal(json_string_length(j), n);
    assert_memory_equal(json_string_value(j), in, n);
    json_decref(j);
    assert_non_null(memmem(out.data, out.len, "\\n\\u000b\\f\\r", 11));
    assert_non_null(memmem(out.data, out.len, "\\u0000\"", 7));

    size_t before = out.len;
    assert_int_equal(sl_json_put_string(&out, "\xc0\x80", 2), SL_EINVAL);
    assert_int_equal(sl_json_put_string(&out, "a\xed\xa0\x80", 4), SL_EINVAL);
    assert_int_equal(out.len, before);
    sl_buf_free(&out);
    assert_int_equal(sl_json_put_string(&out, "", 0), 0);
    assert_int_equal(out.len, 2);
    assert_memory_equal(out.data, "\"\"", 2);
    sl_buf_free(&out);

    assert_true(sl_json_utf8_valid("", 0));
    assert_true(sl_json_utf8_valid("plain ascii text here", 21));
    assert_false(sl_json_utf8_valid("plain ascii text \xff", 18));
    assert_false(sl_json_utf8_valid("\xe2\x82", 2));
}

/* Mutations of valid documents: accept/refuse must agree with jansson, and
 * accepted values must compact to something jansson finds equal. */
static void test_random_vs_jansson(void **state)
{
    (void)state;
    static const char *seeds[] = {
        "{\"a\":[1,-2.5e3,true,false,null],\"b\":{\"c\":\"d\\u00e9\\n\"},\"e\":\"\xc3\xa9\"}",
        "[0,{},[],\"\\ud83d\\ude00\",-0.0,1E+2]",
        " { \"specversion\" : \"1.0\" , \"data\" : { \"x\" : [ 1 , 2 ] } } ",
    };
    static const char pool[] = "{}[]\",:\\/0123456789-+.eEtrufalsn u\x80\xc3\xa9\xed\xf0\x01\t";
    unsigned seed = 12345;
    char buf[256];
    sl_buf out = SL_BUF_INIT;
    int accepted = 0;
    for (int iter = 0; iter < 60000; iter++) {
        const char *s = seeds[iter % 3];
        size_t n = strlen(s);
        memcpy(buf, s, n);
        int muts = 1 + (int)(rand_r(&seed) % 3);
        for (int m = 0; m < muts; m++) {
            size_t at = rand_r(&seed) % n;
            int op = (int)(rand_r(&seed) % 3);
            char c = pool[rand_r(&seed) % (sizeof pool - 1)];
            if (op == 0) {
                buf[at] = c;
            } else if (op == 1 && n + 1 < sizeof buf) {
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = c;
                n++;
            } else if (n > 1) {
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
            }
        }
        sl_json_tok t;
        sl_error err = {0};
        int rc = check(buf, n, 64, &t, &err);
        json_t *j = jparse(buf, n);
        if ((rc == 0) != (j != NULL))
            fail_msg("disagreement on %.*s: ours %d (%s), jansson %s", (int)n, buf, rc, err.msg,
                     j ? "accepts" : "refuses");
        if (j) {
            accepted++;
            out.len = 0;
            assert_int_equal(sl_json_compact(t.p, t.len, &out), 0);
            json_t *c = jparse((char *)out.data, out.len);
            assert_non_null(c);
            assert_true(json_equal(j, c));
            json_decref(c);
            json_decref(j);
        }
    }
    assert_true(accepted > 100);
    sl_buf_free(&out);
}

static void test_type_names(void **state)
{
    (void)state;
    assert_string_equal(sl_json_type_name(SL_JSON_OBJECT), "object");
    assert_string_equal(sl_json_type_name(SL_JSON_TRUE), "boolean");
    assert_string_equal(sl_json_type_name(SL_JSON_NONE), "nothing");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_corpus),      cmocka_unit_test(test_invalid_corpus),
        cmocka_unit_test(test_flags_and_next),    cmocka_unit_test(test_depth),
        cmocka_unit_test(test_truncations),       cmocka_unit_test(test_iterate),
        cmocka_unit_test(test_unescape),          cmocka_unit_test(test_compact),
        cmocka_unit_test(test_compact_random),    cmocka_unit_test(test_put_string),
        cmocka_unit_test(test_random_vs_jansson), cmocka_unit_test(test_type_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
