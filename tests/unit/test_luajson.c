/*
 * tests/unit/test_luajson.c — JSON <-> Lua values (rules/luajson.h): round
 * trips that keep integers, floats, null, empty arrays and objects, escapes
 * and UTF-8; big integers, negative zero and exotic floats; random documents
 * checked against jansson as an oracle and random numbers against strtod();
 * decode errors with their byte offsets (every input replayed right before a
 * PROT_NONE page) and the same accept/refuse verdict as core/base/json.h; encode
 * errors naming the path; sluice.json from Lua; and every allocation of a
 * decode failed in turn.
 */
#include "testutil.h"

#include <jansson.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/base/json.h"
#include "rules/luajson.h"
#include "rules/sandbox.h"

/* ---- helpers --------------------------------------------------------------- */

static tu_guard g_guard;

/* sl_luajson_push() of [s, s + n) placed before the guard page; checks that
 * exactly one value is pushed on success and nothing on failure. */
static int push(lua_State *L, const char *s, size_t n, sl_error *err)
{
    int top = lua_gettop(L);
    int rc = sl_luajson_push(L, tu_guard_put(&g_guard, s, n), n, err);
    assert_int_equal(lua_gettop(L), rc == 0 ? top + 1 : top);
    return rc;
}

/* Encodes the value on top into a NUL-terminated string (caller frees);
 * asserts success and that the stack is unchanged. */
static char *encode_top(lua_State *L)
{
    sl_buf b = SL_BUF_INIT;
    sl_error err = {0};
    int top = lua_gettop(L);
    int rc = sl_luajson_encode(L, -1, &b, &err);
    if (rc)
        fail_msg("encode: %s", err.msg);
    assert_int_equal(lua_gettop(L), top);
    assert_int_equal(sl_buf_append(&b, "", 1), 0);
    return (char *)b.data;
}

/* Decodes s and encodes it back; returns the text (caller frees). */
static char *round_trip(lua_State *L, const char *s, size_t n)
{
    sl_error err = {0};
    if (push(L, s, n, &err))
        fail_msg("decode %.*s: %s", (int)n, s, err.msg);
    char *out = encode_top(L);
    lua_pop(L, 1);
    return out;
}

/* Runs a sandboxed chunk with one result; fails the test on any error. */
static void run(lua_State *L, const char *src)
{
    sl_error err = {0};
    if (sl_sandbox_load(L, src, strlen(src), "=test", &err) || sl_sandbox_call(L, 0, 1, &err))
        fail_msg("%s", err.msg);
}

static int state_setup(void **state)
{
    lua_State *L;
    sl_error err;
    if (sl_sandbox_new(NULL, &L, &err))
        return -1;
    *state = L;
    return 0;
}

static int state_teardown(void **state)
{
    sl_sandbox_close(*state);
    return 0;
}

/* ---- round trips ----------------------------------------------------------- */

static const struct {
    const char *in, *out;
} canonical[] = {
    {"0", "0"},
    {"-0", "0"},
    {"42", "42"},
    {"-7", "-7"},
    {"3.0", "3.0"},
    {"3.5", "3.5"},
    {"-0.0", "-0.0"},
    {"0.0", "0.0"},
    {"0e0", "0.0"},
    {"1E2", "100.0"},
    {"0.1", "0.1"},
    {"-2.5", "-2.5"},
    {"123456.789", "123456.789"},
    {"0.000123", "0.000123"},
    {"1e-5", "0.00001"},
    {"1.5e-7", "1.5e-07"},
    {"1e15", "1e+15"},
    {"999999999999999.9", "999999999999999.9"},
    {"1e300", "1e+300"},
    {"-1e300", "-1e+300"},
    {"1.7976931348623157e308", "1.7976931348623157e+308"},
    {"2.2250738585072014e-308", "2.2250738585072014e-308"},
    {"5e-324", "4.94065645841247e-324"},
    {"0.30000000000000004", "0.30000000000000004"},
    {"9007199254740993", "9007199254740993"},
    {"9223372036854775807", "9223372036854775807"},
    {"-9223372036854775808", "-9223372036854775808"},
    {"9223372036854775808", "9.223372036854776e+18"},
    {"-9223372036854775809", "-9.223372036854776e+18"},
    {"123456789012345678901234567890", "1.2345678901234568e+29"},
    {"null", "null"},
    {"true", "true"},
    {"false", "false"},
    {"[]", "[]"},
    {"{}", "{}"},
    {" [ ] ", "[]"},
    {"[[]]", "[[]]"},
    {"[{}]", "[{}]"},
    {"{\"a\":[]}", "{\"a\":[]}"},
    {"{\"a\":{}}", "{\"a\":{}}"},
    {"[null,null]", "[null,null]"},
    {"{\"a\":null}", "{\"a\":null}"},
    {" [ 1 , 2 ]\n", "[1,2]"},
    {"[1,2.0,\"x\",null,true,false,[],{}]", "[1,2.0,\"x\",null,true,false,[],{}]"},
    {"{\"\":0}", "{\"\":0}"},
    {"\"\"", "\"\""},
    {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\\"\\\\/\\b\\f\\n\\r\\t\""},
    {"\"\\u0000\\u001f\\u0020\\u007f\"", "\"\\u0000\\u001f \x7f\""},
    {"\"\\u00e9\\u20AC\\ud83d\\ude00\\uDBFF\\uDFFF\"",
     "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\""},
    {"\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
     "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
    {"\"a long plain string that crosses several eight-byte words\"",
     "\"a long plain string that crosses several eight-byte words\""},
    {"{\"k\\u0041\":\"\\n\"}", "{\"kA\":\"\\n\"}"},
    {"[[[[[[[[[[1]]]]]]]]]]", "[[[[[[[[[[1]]]]]]]]]]"},
    {"{\"a\":{\"b\":{\"c\":[1,{\"d\":null}]}}}", "{\"a\":{\"b\":{\"c\":[1,{\"d\":null}]}}}"},
};

static void test_canonical(void **state)
{
    lua_State *L = *state;
    for (size_t i = 0; i < sizeof canonical / sizeof canonical[0]; i++) {
        char *out = round_trip(L, canonical[i].in, strlen(canonical[i].in));
        if (strcmp(out, canonical[i].out) != 0)
            fail_msg("%s: got %s, want %s", canonical[i].in, out, canonical[i].out);
        /* The canonical form is a fixed point. */
        char *again = round_trip(L, out, strlen(out));
        assert_string_equal(again, out);
        free(again);
        free(out);
    }
    assert_int_equal(lua_gettop(L), 0);
}

/* Types as Lua sees them, and sluice.json from Lua. */
static void test_lua_side(void **state)
{
    lua_State *L = *state;
    run(L,
        "local d, e = sluice.json.decode, sluice.json.encode\n"
        "assert(math.type(d('3')) == 'integer')\n"
        "assert(math.type(d('3.0')) == 'float')\n"
        "assert(math.type(d('1e2')) == 'float')\n"
        "assert(math.type(d('-0')) == 'integer')\n"
        "assert(1 / d('-0.0') == -math.huge)\n"
        "assert(d('9223372036854775807') == math.maxinteger)\n"
        "assert(d('-9223372036854775808') == math.mininteger)\n"
        "assert(math.type(d('9223372036854775808')) == 'float')\n"
        "assert(d('null') == sluice.null and rawequal(d('null'), sluice.null))\n"
        "assert(d('{\"a\":null}').a == sluice.null)\n"
        "assert(type(sluice.null) == 'userdata' and tostring(sluice.null) == 'null')\n"
        "assert(getmetatable(sluice.null) == 'sluice.null')\n"
        "assert(getmetatable(d('[]')) == sluice.array)\n"
        "assert(getmetatable(d('[1]')) == sluice.array)\n"
        "assert(getmetatable(d('{}')) == nil)\n"
        "assert(#d('[1,2,3]') == 3 and d('[1,2,3]')[3] == 3)\n"
        "assert(d('{\"a\":1,\"a\":2}').a == 2)\n"
        "assert(d('\"\\\\u0000\"') == '\\0')\n"
        "assert(e({}) == '{}' and e(sluice.array()) == '[]')\n"
        "local a = {1, 2}\n"
        "assert(sluice.array(a) == a and getmetatable(a) == sluice.array)\n"
        "assert(e(sluice.array{1, 2}) == '[1,2]' and e({1, 2}) == '[1,2]')\n"
        "assert(e(3) == '3' and e(3.0) == '3.0' and e(-0.0) == '-0.0')\n"
        "assert(e(nil) == 'null' and e(true) == 'true' and e(sluice.null) == 'null')\n"
        "assert(e('a\\0b\\1\"\\\\') == '\"a\\\\u0000b\\\\u0001\\\\\"\\\\\\\\\"')\n"
        "local t = {} t[3] = 3 t[2] = 2 t[1] = 1\n"
        "assert(e(t) == '[1,2,3]')\n"
        "local ev = d('{\"id\":\"1\",\"data\":{\"n\":1.5,\"tags\":[],\"x\":null}}')\n"
        "ev.data.n = ev.data.n * 2\n"
        "local back = d(e(ev))\n"
        "assert(back.data.n == 3.0 and math.type(back.data.n) == 'float')\n"
        "assert(getmetatable(back.data.tags) == sluice.array and back.data.x == sluice.null)\n"
        "local ok, msg = pcall(d, '[1,]')\n"
        "assert(not ok and msg:find('json.decode: byte 3: unexpected character', 1, true), msg)\n"
        "ok, msg = pcall(e, {f = print})\n"
        "assert(not ok and msg:find('json.encode: $.f: a function cannot be encoded', 1, true),"
        " msg)\n"
        "ok, msg = pcall(d)\n"
        "assert(not ok)\n"
        "return true");
    assert_true(lua_toboolean(L, -1));
    lua_pop(L, 1);
}

/* Containers bigger than the parser's collection batch, long escaped strings
 * (decoded through a luaL_Buffer) and long numbers. */
static void test_big_values(void **state)
{
    lua_State *L = *state;
    sl_buf b = SL_BUF_INIT;
    for (int kind = 0; kind < 2; kind++) {
        b.len = 0;
        sl_buf_append(&b, kind ? "{" : "[", 1);
        for (int i = 0; i < 1000; i++) {
            char tmp[64];
            int n = kind ? snprintf(tmp, sizeof tmp, "%s\"k%d\":%d", i ? "," : "", i, i)
                         : snprintf(tmp, sizeof tmp, "%s%d", i ? "," : "", i * 3);
            sl_buf_append(&b, tmp, (size_t)n);
        }
        sl_buf_append(&b, kind ? "}" : "]", 1);
        sl_error err;
        assert_int_equal(push(L, (char *)b.data, b.len, &err), 0);
        if (kind == 0) {
            assert_int_equal(lua_rawlen(L, -1), 1000);
            lua_rawgeti(L, -1, 1000);
            assert_int_equal(lua_tointeger(L, -1), 2997);
            lua_pop(L, 1);
            char *out = encode_top(L);
            assert_true(strlen(out) == b.len && memcmp(out, b.data, b.len) == 0);
            free(out);
        } else {
            lua_getfield(L, -1, "k999");
            assert_int_equal(lua_tointeger(L, -1), 999);
            lua_pop(L, 1);
            char *out = encode_top(L);
            json_t *want = json_loadb((char *)b.data, b.len, 0, NULL);
            json_t *got = json_loads(out, 0, NULL);
            assert_non_null(got);
            assert_true(json_equal(want, got));
            json_decref(want);
            json_decref(got);
            free(out);
        }
        lua_pop(L, 1);
    }

    /* 2000 bytes with escapes everywhere: over the stack buffer. */
    b.len = 0;
    sl_buf_append(&b, "\"", 1);
    for (int i = 0; i < 250; i++)
        sl_buf_append(&b, "ab\\n\\u00e9\\\"", 12);
    sl_buf_append(&b, "\"", 1);
    sl_error err;
    assert_int_equal(push(L, (char *)b.data, b.len, &err), 0);
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    assert_int_equal(n, 250 * 6);
    assert_memory_equal(s, "ab\n\xc3\xa9\"", 6);
    assert_memory_equal(s + 249 * 6, "ab\n\xc3\xa9\"", 6);
    char *out = encode_top(L);
    assert_int_equal(strlen(out), 2 + 250 * 8);
    free(out);
    lua_pop(L, 1);

    /* Numbers longer than the stack copy. */
    b.len = 0;
    sl_buf_append(&b, "0.", 2);
    for (int i = 0; i < 99; i++)
        sl_buf_append(&b, "0", 1);
    sl_buf_append(&b, "1", 1);
    assert_int_equal(push(L, (char *)b.data, b.len, &err), 0);
    assert_false(lua_isinteger(L, -1));
    assert_true(lua_tonumber(L, -1) == 1e-100);
    lua_pop(L, 1);
    b.len = 0;
    sl_buf_append(&b, "-1", 2);
    for (int i = 0; i < 80; i++)
        sl_buf_append(&b, "0", 1);
    assert_int_equal(push(L, (char *)b.data, b.len, &err), 0);
    assert_false(lua_isinteger(L, -1));
    assert_true(lua_tonumber(L, -1) == -1e80);
    lua_pop(L, 1);
    sl_buf_free(&b);
}

/* 128 levels are allowed both ways, 129 refused. */
static void test_depth(void **state)
{
    lua_State *L = *state;
    char doc[300];
    for (int depth = 127; depth <= 129; depth++) {
        memset(doc, '[', (size_t)depth);
        memset(doc + depth, ']', (size_t)depth);
        sl_error err = {0};
        int rc = push(L, doc, 2 * (size_t)depth, &err);
        if (depth <= 128) {
            assert_int_equal(rc, 0);
            char *out = encode_top(L);
            assert_int_equal(strlen(out), 2 * (size_t)depth);
            free(out);
            lua_pop(L, 1);
        } else {
            assert_int_equal(rc, SL_EPARSE);
            assert_non_null(strstr(err.msg, "byte 128: nesting deeper than 128"));
        }
    }
    /* The same through tables built in Lua. */
    run(L, "local r = {} local t = r for i = 2, 129 do local n = {} t[1] = n t = n end return r");
    sl_buf b = SL_BUF_INIT;
    sl_error err = {0};
    assert_int_equal(sl_luajson_encode(L, -1, &b, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "nesting deeper than 128"));
    lua_rawgeti(L, -1, 1); /* 128 levels */
    b.len = 0;
    assert_int_equal(sl_luajson_encode(L, -1, &b, &err), 0);
    lua_pop(L, 2);
    sl_buf_free(&b);
}

/* ---- random documents against jansson ------------------------------------- */

static double rand_double(void)
{
    for (;;) {
        uint64_t bits = tu_rng();
        double d;
        switch (bits % 4) {
        case 0: /* any finite double */
            memcpy(&d, &bits, sizeof d);
            break;
        case 1: /* a few decimals */
            d = (double)(int64_t)(tu_rng() % 2000001 - 1000000) / 1000.0;
            break;
        case 2: /* integral floats */
            d = (double)(int64_t)(tu_rng() % 20001 - 10000);
            break;
        default: /* small and large magnitudes */
            d = ldexp((double)(tu_rng() % 1000000), (int)(tu_rng() % 200) - 100);
        }
        if (isfinite(d))
            return d;
    }
}

static json_t *rand_json(int depth)
{
    unsigned pick = (unsigned)(tu_rng() % (depth > 4 ? 6 : 8));
    switch (pick) {
    case 0:
        return json_null();
    case 1:
        return json_boolean(tu_rng() & 1);
    case 2: {
        uint64_t r = tu_rng();
        json_int_t v = (json_int_t)(r % 3 == 0 ? r : r % 2001) - (r % 3 == 0 ? 0 : 1000);
        return json_integer(v);
    }
    case 3:
        return json_real(rand_double());
    case 4:
    case 5: {
        static const char *const pieces[] = {"a",
                                             "Z",
                                             " ",
                                             "\"",
                                             "\\",
                                             "/",
                                             "\n",
                                             "\t",
                                             "\x01",
                                             "\x1f",
                                             "\x7f",
                                             "\xc3\xa9",
                                             "\xe2\x82\xac",
                                             "\xf0\x9f\x98\x80",
                                             "0123456789",
                                             ""};
        char s[256];
        size_t n = 0;
        int k = (int)(tu_rng() % 12);
        for (int i = 0; i < k; i++) {
            const char *p = pieces[tu_rng() % (sizeof pieces / sizeof pieces[0])];
            size_t l = strlen(p);
            memcpy(s + n, p, l);
            n += l;
        }
        if (tu_rng() % 8 == 0) /* with an embedded NUL */
            s[n++] = '\0';
        return json_stringn(s, n);
    }
    case 6: {
        json_t *a = json_array();
        int n = (int)(tu_rng() % 6);
        for (int i = 0; i < n; i++)
            json_array_append_new(a, rand_json(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        int n = (int)(tu_rng() % 6);
        for (int i = 0; i < n; i++) {
            char key[16];
            snprintf(key, sizeof key, "k%d%s", (int)(tu_rng() % 20), i % 3 ? "" : "\xc3\xa9");
            json_object_set_new(o, key, rand_json(depth + 1));
        }
        return o;
    }
    }
}

static void test_random_vs_jansson(void **state)
{
    lua_State *L = *state;
    for (int i = 0; i < 3000; i++) {
        json_t *j = rand_json(0);
        char *text = json_dumps(j, JSON_ENCODE_ANY | (i % 2 ? JSON_COMPACT : JSON_INDENT(1)));
        assert_non_null(text);
        sl_error err = {0};
        if (push(L, text, strlen(text), &err))
            fail_msg("%s: %s", text, err.msg);
        char *out = encode_top(L);
        lua_pop(L, 1);
        json_error_t je;
        json_t *back = json_loads(out, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!back)
            fail_msg("jansson refuses our %s: %s", out, je.text);
        /* json_equal() also tells integers from reals. */
        if (!json_equal(j, back))
            fail_msg("%s\nbecame %s", text, out);
        json_decref(back);
        json_decref(j);
        free(text);
        free(out);
    }
}

/* Decoded numbers are exactly what strtod() gives (and integers stay
 * integers); encoded floats read back bit for bit and as floats. */
static void test_numbers(void **state)
{
    lua_State *L = *state;
    char s[80];
    for (int i = 0; i < 200000; i++) {
        size_t n = 0;
        if (tu_rng() & 1)
            s[n++] = '-';
        int digits = 1 + (int)(tu_rng() % 22);
        for (int d = 0; d < digits; d++)
            s[n++] = (char)('0' + (d == 0 && digits > 1 ? 1 + tu_rng() % 9 : tu_rng() % 10));
        bool integer = true;
        if (tu_rng() % 3) {
            integer = false;
            s[n++] = '.';
            int frac = 1 + (int)(tu_rng() % 20);
            for (int d = 0; d < frac; d++)
                s[n++] = (char)('0' + tu_rng() % 10);
        }
        if (tu_rng() % 3 == 0) {
            integer = false;
            n += (size_t)snprintf(s + n, sizeof s - n, "e%d", (int)(tu_rng() % 700) - 350);
        }
        s[n] = '\0';
        sl_error err;
        assert_int_equal(push(L, s, n, &err), 0);
        double want = strtod(s, NULL);
        if (integer && digits <= 18) {
            assert_true(lua_isinteger(L, -1));
            assert_int_equal(lua_tointeger(L, -1), strtoll(s, NULL, 10));
        } else if (!integer) {
            assert_false(lua_isinteger(L, -1));
            double got = (double)lua_tonumber(L, -1);
            if (memcmp(&got, &want, sizeof got) != 0)
                fail_msg("%s: got %.17g, want %.17g", s, got, want);
        }
        lua_pop(L, 1);
    }
    for (int i = 0; i < 200000; i++) {
        double d = i == 0 ? -0.0 : rand_double();
        lua_pushnumber(L, d);
        char *out = encode_top(L);
        lua_pop(L, 1);
        double back = strtod(out, NULL);
        if (memcmp(&back, &d, sizeof d) != 0)
            fail_msg("%.17g encoded as %s", d, out);
        assert_true(strpbrk(out, ".e") != NULL);
        char longest[40];
        if (strlen(out) > (size_t)snprintf(longest, sizeof longest, "%.17g", d) + 4)
            fail_msg("%s is longer than %s", out, longest);
        free(out);
    }
}

/* ---- errors ---------------------------------------------------------------- */

static const struct {
    const char *json;
    size_t len; /* 0: strlen */
    size_t at;
    const char *why;
} bad[] = {
    {"", 0, 0, "unexpected end of input"},
    {"   ", 0, 3, "unexpected end of input"},
    {"01", 0, 0, "invalid number: leading zero"},
    {"[-01]", 0, 2, "invalid number: leading zero"},
    {"[1,]", 0, 3, "unexpected character"},
    {"[1 2]", 0, 3, "expected ',' or ']'"},
    {"[1", 0, 2, "expected ',' or ']'"},
    {"{\"a\" 1}", 0, 5, "expected ':'"},
    {"{\"a\":1,}", 0, 7, "expected a string key"},
    {"{\"a\":1", 0, 6, "expected ',' or '}'"},
    {"{1:2}", 0, 1, "expected a string key"},
    {"\"abc", 0, 0, "unterminated string"},
    {"\"ab\\", 0, 0, "unterminated string"},
    {"\"\\x\"", 0, 1, "bad escape"},
    {"\"\\u12\"", 0, 1, "bad \\u escape"},
    {"\"\\u12g4\"", 0, 1, "bad \\u escape"},
    {"\"\\ud800\"", 0, 1, "high surrogate without a low surrogate"},
    {"\"ab\\ud800\\u0041\"", 0, 3, "high surrogate without a low surrogate"},
    {"\"\\udc00\"", 0, 1, "lone low surrogate"},
    {"\"\x01\"", 0, 1, "control character in string"},
    {"\"a\\n\x1f\"", 0, 4, "control character in string"},
    {"\"\xc0\xaf\"", 0, 1, "invalid UTF-8"},
    {"\"abc\xed\xa0\x80\"", 0, 4, "invalid UTF-8"},
    {"\"\xf4\x90\x80\x80\"", 0, 1, "invalid UTF-8"},
    {"\"\xe2\x82\"", 0, 1, "invalid UTF-8"},
    {"\"\xe2\x82", 0, 1, "invalid UTF-8"},
    {"\"\xff\"", 0, 1, "invalid UTF-8"},
    {"\"\\n\xff\"", 0, 3, "invalid UTF-8"},
    {"1.", 0, 2, "invalid number: digits expected after '.'"},
    {"1.e5", 0, 2, "invalid number: digits expected after '.'"},
    {"1e", 0, 2, "invalid number: digits expected in the exponent"},
    {"1e+", 0, 3, "invalid number: digits expected in the exponent"},
    {"-", 0, 1, "invalid number"},
    {"-a", 0, 1, "invalid number"},
    {"+1", 0, 0, "unexpected character"},
    {".5", 0, 0, "unexpected character"},
    {"NaN", 0, 0, "unexpected character"},
    {"tru", 0, 0, "invalid literal"},
    {"nul", 0, 0, "invalid literal"},
    {"nulll", 0, 4, "unexpected data after the JSON value"},
    {"[1] x", 0, 4, "unexpected data after the JSON value"},
    {"1 2", 0, 2, "unexpected data after the JSON value"},
    {"\xef\xbb\xbf{}", 0, 0, "unexpected character"},
    {"[\0]", 3, 1, "unexpected character"},
    {"\"a\0b\"", 5, 2, "control character in string"},
};

static void test_decode_errors(void **state)
{
    lua_State *L = *state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = bad[i].len ? bad[i].len : strlen(bad[i].json);
        sl_error err = {0};
        int rc = push(L, bad[i].json, n, &err);
        if (rc != SL_EPARSE)
            fail_msg("%s: rc %d", bad[i].json, rc);
        char want[160];
        snprintf(want, sizeof want, "byte %zu: %s", bad[i].at, bad[i].why);
        if (!strstr(err.msg, want))
            fail_msg("%s: got \"%s\", want \"%s\"", bad[i].json, err.msg, want);
        assert_int_equal(err.code, SL_EPARSE);
        /* No prefix reads past its end. */
        for (size_t k = 0; k < n; k++)
            if (push(L, bad[i].json, k, &err) == 0) /* "1" of "1 2" */
                lua_pop(L, 1);
    }
    assert_int_equal(lua_gettop(L), 0);
}

/* Random mutations of valid documents: accepted exactly when core/base/json.h
 * accepts them (the same grammar, UTF-8 and depth rules). */
static void test_same_verdict_as_core(void **state)
{
    lua_State *L = *state;
    static const char *const seeds[] = {
        "{\"a\":[1,2.5,-3e-2,true,false,null],\"b\":{\"c\":\"x\\u00e9\\n\\ud83d\\ude00\"}}",
        "[0,-0,0.0,1E+2,\"caf\xc3\xa9\",[],{},[[{}]]]",
        "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\uffff\"",
        "  {\"k\" : [ 1 , 2 ] , \"s\" : \"x y\" }  ",
    };
    static const char alphabet[] = "{}[]\",:\\0123456789.eE+-tfnulrsa \t\n\x01\x7f\xc3\xa9\xed\xf0";
    char doc[256];
    for (int i = 0; i < 60000; i++) {
        const char *seed = seeds[tu_rng() % (sizeof seeds / sizeof seeds[0])];
        size_t n = strlen(seed);
        memcpy(doc, seed, n);
        int edits = 1 + (int)(tu_rng() % 3);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t at = (size_t)(tu_rng() % n);
            char c = alphabet[tu_rng() % (sizeof alphabet - 1)];
            switch (tu_rng() % 3) {
            case 0:
                doc[at] = c;
                break;
            case 1:
                memmove(doc + at, doc + at + 1, n - at - 1);
                n--;
                break;
            default:
                if (n < sizeof doc - 1) {
                    memmove(doc + at + 1, doc + at, n - at);
                    doc[at] = c;
                    n++;
                }
            }
        }
        sl_json_tok tok;
        int core = sl_json_validate(doc, n, 128, &tok, NULL);
        sl_error err = {0};
        int ours = push(L, doc, n, &err);
        if ((core == 0) != (ours == 0))
            fail_msg("core %d, luajson %d (%s) for: %.*s", core, ours, err.msg, (int)n, doc);
        if (ours == 0)
            lua_pop(L, 1);
    }
}

static const struct {
    const char *src;
    const char *msg;
} enc_bad[] = {
    {"return {a = {b = 0/0}}", "$.a.b: NaN cannot be encoded"},
    {"return {a = {1, 2, math.huge}}", "$.a[3]: inf cannot be encoded"},
    {"return {-math.huge}", "$[1]: -inf cannot be encoded"},
    {"return {f = print}", "$.f: a function cannot be encoded"},
    {"return {co = coroutine.create(print)}", "$.co: a thread cannot be encoded"},
    {"return print", "$: a function cannot be encoded"},
    {"local t = {} t.self = t return t", "nesting deeper than 128"},
    {"local t = {} t[1] = t return {x = t}", "nesting deeper than 128"},
    /* a deep path keeps its first and last levels, and the reason */
    {"local t = {} t.self = t return t",
     "$.self.self.self.self…(121 levels)….self.self.self: nesting deeper than 128"},
    {"return {a = {b = {c = {d = {e = {f = {g = {h = 0/0}}}}}}}}", "$.a.b.c.d.e.f.g.h: NaN"},
    {"return {a = {b = {c = {d = {e = {f = {g = {h = {i = {j = 0/0}}}}}}}}}}",
     "$.a.b.c.d…(3 levels)….h.i.j: NaN cannot be encoded"},
    {"return {1, 2, x = 3}", "$: table mixes integer keys with string keys"},
    {"return {a = {x = 1, [1] = 2, [2] = 3}}", "$.a: table mixes"},
    {"return {[1] = 1, [3] = 3}", "$: array with holes"},
    {"return {[0] = 1}", "$: array key below 1"},
    {"return {[-1] = 1, [1] = 2}", "keys must be exactly 1..n"},
    {"return {[1.5] = 1}", "$: table key of type float"},
    {"return {[true] = 1}", "$: table key of type boolean"},
    {"return {{}, {[{}] = 1}}", "$[2]: table key of type table"},
    {"local a = sluice.array() a.x = 1 return a", "$: array (sluice.array) with a string key"},
    {"local a = sluice.array{1} a.x = 1 return {list = a}", "$.list: table mixes"},
    {"return {['a b'] = {0/0}}", "$[\"a b\"][1]: NaN cannot be encoded"},
    {"return {['1x'] = {n = 0/0}}", "$[\"1x\"].n: NaN"},
    {"return {s = '\\xff'}", "$.s: string is not valid UTF-8"},
    {"return {s = 'ok\\xed\\xa0\\x80'}", "$.s: string is not valid UTF-8"},
    {"return {['\\xc0'] = 1}", "string is not valid UTF-8"},
};

static void test_encode_errors(void **state)
{
    lua_State *L = *state;
    for (size_t i = 0; i < sizeof enc_bad / sizeof enc_bad[0]; i++) {
        run(L, enc_bad[i].src);
        sl_buf b = SL_BUF_INIT;
        sl_error err = {0};
        int rc = sl_luajson_encode(L, -1, &b, &err);
        if (rc != SL_EINVAL || !strstr(err.msg, enc_bad[i].msg))
            fail_msg("%s: rc %d, \"%s\", want \"%s\"", enc_bad[i].src, rc, err.msg, enc_bad[i].msg);
        assert_int_equal(lua_gettop(L), 1);
        /* A NULL err is allowed. */
        assert_int_equal(sl_luajson_encode(L, -1, &b, NULL), SL_EINVAL);
        lua_pop(L, 1);
        sl_buf_free(&b);
    }
}

/* ---- states and memory ----------------------------------------------------- */

/* A plain state (no sandbox, no helpers) works: sluice.null and the array
 * metatable are created on first use. */
static void test_plain_state(void **state)
{
    (void)state;
    lua_State *L = luaL_newstate();
    sl_buf b = SL_BUF_INIT;
    sl_error err;
    lua_newtable(L);
    assert_int_equal(sl_luajson_encode(L, -1, &b, &err), 0);
    lua_pop(L, 1);
    char *out = round_trip(L, "[null,{\"a\":[]}]", 15);
    assert_string_equal(out, "[null,{\"a\":[]}]");
    free(out);
    lua_newtable(L);
    sl_luajson_register(L);
    lua_getfield(L, -1, "null");
    assert_int_equal(push(L, "null", 4, &err), 0);
    assert_true(lua_rawequal(L, -1, -2));
    lua_settop(L, 0);
    sl_buf_free(&b);
    lua_close(L);
}

/* An allocator that fails once `budget` more allocations have succeeded. */
static long alloc_budget = -1;

static void *failing_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (ptr == NULL || nsize > osize) {
        if (alloc_budget == 0)
            return NULL;
        if (alloc_budget > 0)
            alloc_budget--;
    }
    return realloc(ptr, nsize);
}

/* Every allocation of a decode fails in turn: SL_ENOMEM with nothing pushed,
 * and the state still works (and ASan sees no leak). */
static void test_out_of_memory(void **state)
{
    (void)state;
    static const char doc[] =
        "{\"specversion\":\"1.0\",\"id\":\"x\",\"data\":{\"list\":[1,2,3,{\"k\":null}],"
        "\"long\":\"\\u00e9 a string that is long enough to need a buffer of its own, "
        "a string that is long enough to need a buffer of its own, a string that is long "
        "enough to need a buffer of its own, a string that is long enough to need a "
        "buffer of its own, a string that is long enough\"}}";
    bool done = false;
    for (long n = 0; n < 1000 && !done; n++) {
        alloc_budget = -1;
        lua_State *L = lua_newstate(failing_alloc, NULL);
        assert_non_null(L);
        lua_gc(L, LUA_GCSTOP);
        alloc_budget = n;
        sl_error err = {0};
        int rc = sl_luajson_push(L, doc, sizeof doc - 1, &err);
        alloc_budget = -1;
        if (rc == 0) {
            assert_int_equal(lua_gettop(L), 1);
            done = true;
        } else {
            assert_int_equal(rc, SL_ENOMEM);
            assert_int_equal(lua_gettop(L), 0);
            assert_int_equal(sl_luajson_push(L, doc, sizeof doc - 1, &err), 0);
        }
        char *out = encode_top(L);
        assert_non_null(strstr(out, "\"list\":[1,2,3,{\"k\":null}]"));
        free(out);
        lua_close(L);
    }
    assert_true(done);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_canonical, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_lua_side, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_big_values, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_depth, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_random_vs_jansson, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_numbers, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_decode_errors, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_same_verdict_as_core, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_encode_errors, state_setup, state_teardown),
        cmocka_unit_test(test_plain_state),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
