/*
 * tests/unit/test_luaproxy.c — events as lazy copy-on-write Lua proxies
 * (rules/luaproxy.h): reading every JSON type with the luajson rules, child
 * proxies and their identity, writes, deletes and new keys at every level,
 * arrays (append, insert, remove, length, holes), pairs/ipairs/next/type/
 * rawget/rawset/rawlen/getmetatable, repeated keys, big objects and arrays
 * (the map and index paths), stale proxies kept in globals, sluice.table,
 * escapes and number spellings kept when untouched, encode errors, memory
 * caps; a differential test of ~40 transforms on a corpus of events against
 * the tables path (sl_luajson_push + the same function + sl_luajson_encode),
 * compared structurally (and byte for byte with the input when nothing
 * changed); and the rule VM (sl_rule_eval, sl_rule_eval_batch) in both modes.
 * Event texts are placed right before a PROT_NONE page.
 */
#include "testutil.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "server/config.h"
#include "core/base/json.h"
#include "rules/luajson.h"
#include "rules/luaproxy.h"
#include "rules/pattern.h"
#include "rules/rule.h"
#include "rules/sandbox.h"

/* ---- fixture ---------------------------------------------------------------- */

typedef struct fx {
    lua_State *L;
    sl_luaproxy *px;
    sl_evview ev[3];
    tu_guard g[3];
} fx;

static lua_State *new_state(size_t mem, sl_luaproxy **px)
{
    sl_sandbox_options o = {.mem_bytes = mem, .instructions = 50000000};
    lua_State *L = NULL;
    sl_error err = {0};
    if (sl_sandbox_new(&o, &L, &err))
        fail_msg("sl_sandbox_new: %s", err.msg);
    if (sl_luaproxy_install(L, px, &err))
        fail_msg("sl_luaproxy_install: %s", err.msg);
    return L;
}

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->L = new_state(64u << 20, &f->px);
    for (int i = 0; i < 3; i++)
        sl_evview_init(&f->ev[i]);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    sl_sandbox_close(f->L);
    for (int i = 0; i < 3; i++) {
        sl_evview_free(&f->ev[i]);
        tu_guard_free(&f->g[i]);
    }
    free(f);
    return 0;
}

/* Pushes the function returned by the chunk src. */
static void load_fn(lua_State *L, const char *src)
{
    sl_error err = {0};
    if (sl_sandbox_load(L, src, strlen(src), "=test", &err) || sl_sandbox_call(L, 0, 1, &err))
        fail_msg("loading %s: %s", src, err.msg);
    assert_int_equal(lua_type(L, -1), LUA_TFUNCTION);
}

/* Parses json into f->ev[slot] (the text before a guard page). */
static void parse(fx *f, int slot, const char *json)
{
    size_t n = strlen(json);
    sl_error err = {0};
    const char *p = tu_guard_put(&f->g[slot], json, n);
    if (sl_evview_parse(&f->ev[slot], p, n, true, &err))
        fail_msg("parse %s: %s", json, err.msg);
}

/* Encodes the value on top (popped); returns the text (caller frees) or
 * NULL with *rc and err. */
static char *encode_pop(lua_State *L, int *rc, sl_error *err)
{
    sl_buf b = SL_BUF_INIT;
    int top = lua_gettop(L);
    *rc = sl_luajson_encode(L, -1, &b, err);
    assert_int_equal(lua_gettop(L), top);
    lua_pop(L, 1);
    if (*rc) {
        sl_buf_free(&b);
        return NULL;
    }
    assert_int_equal(sl_buf_append(&b, "", 1), 0);
    return (char *)b.data;
}

/* Runs `return function(e) <body> end` on a proxy of json; returns the
 * encoded result (caller frees; "nil" for nil) or NULL with *rc and err. */
static char *run_proxy(fx *f, const char *json, const char *fn_src, int *rc, sl_error *err)
{
    parse(f, 0, json);
    load_fn(f->L, fn_src);
    const sl_evview *one = &f->ev[0];
    *rc = sl_luaproxy_call(f->L, f->px, &one, 1, false, err);
    if (*rc)
        return NULL;
    char *out;
    if (lua_isnil(f->L, -1)) {
        lua_pop(f->L, 1);
        out = strdup("nil");
    } else {
        out = encode_pop(f->L, rc, err);
    }
    sl_luaproxy_release(f->px);
    return out;
}

/* The same with the event as tables (the old path). */
static char *run_table(fx *f, const char *json, const char *fn_src, int *rc, sl_error *err)
{
    load_fn(f->L, fn_src);
    *rc = sl_luajson_push(f->L, json, strlen(json), err);
    assert_int_equal(*rc, 0);
    *rc = sl_sandbox_call(f->L, 1, 1, err);
    if (*rc)
        return NULL;
    if (lua_isnil(f->L, -1)) {
        lua_pop(f->L, 1);
        return strdup("nil");
    }
    return encode_pop(f->L, rc, err);
}

/* Asserts that the function body returns the text want on json. */
static void expect(fx *f, const char *json, const char *body, const char *want)
{
    char src[8192];
    snprintf(src, sizeof src, "return function(e) %s end", body);
    int rc;
    sl_error err = {0};
    char *got = run_proxy(f, json, src, &rc, &err);
    if (!got)
        fail_msg("%s: %s", body, err.msg);
    if (strcmp(got, want) != 0)
        fail_msg("%s\n  got  %s\n  want %s", body, got, want);
    free(got);
}

/* Asserts that the function body returns true on json (each check line of
 * body is an assert()). */
static void check(fx *f, const char *json, const char *body)
{
    expect(f, json, body, "true");
}

/* Asserts that the body fails with a message containing msg (rc: the code
 * of the call, or of the encoding when encode is set). */
static void expect_error(fx *f, const char *json, const char *body, int code, const char *msg)
{
    char src[8192];
    snprintf(src, sizeof src, "return function(e) %s end", body);
    int rc = 0;
    sl_error err = {0};
    char *got = run_proxy(f, json, src, &rc, &err);
    if (got)
        fail_msg("%s: succeeded with %s, want an error with \"%s\"", body, got, msg);
    if (rc != code || !strstr(err.msg, msg))
        fail_msg("%s: error %d \"%s\", want %d with \"%s\"", body, rc, err.msg, code, msg);
    sl_luaproxy_release(f->px);
}

/* ---- structural comparison (the rules of rules/luajson.h) --------------------- */

/* A number's kind: 1 an integer that fits an int64 (*i), 2 a float (*d). */
static int num_kind(const sl_evview_value *v, long long *i, double *d)
{
    char buf[512];
    size_t n = v->len < sizeof buf - 1 ? v->len : sizeof buf - 1;
    memcpy(buf, v->s, n);
    buf[n] = '\0';
    if (strcspn(buf, ".eE") == n) {
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, 10);
        if (!errno && *end == '\0') {
            *i = x;
            return 1;
        }
    }
    *d = sl_evview_num(v);
    return 2;
}

static bool same(const sl_evview *a, uint32_t i, const sl_evview *b, uint32_t j);

/* The last member of object o named like member m (of another event), or
 * UINT32_MAX. */
static uint32_t last_named(const sl_evview *ev, uint32_t o, const char *k, uint32_t kl)
{
    uint32_t found = UINT32_MAX;
    for (uint32_t c = ev->v[o].first; c != UINT32_MAX; c = ev->v[c].next)
        if (ev->v[c].klen == kl && memcmp(ev->v[c].key, k, kl) == 0)
            found = c;
    return found;
}

static bool same_members(const sl_evview *a, uint32_t i, const sl_evview *b, uint32_t j)
{
    for (uint32_t c = a->v[i].first; c != UINT32_MAX; c = a->v[c].next) {
        uint32_t o = last_named(b, j, a->v[c].key, a->v[c].klen);
        uint32_t l = last_named(a, i, a->v[c].key, a->v[c].klen);
        if (o == UINT32_MAX || !same(a, l, b, o))
            return false;
    }
    return true;
}

static bool same(const sl_evview *a, uint32_t i, const sl_evview *b, uint32_t j)
{
    const sl_evview_value *x = &a->v[i], *y = &b->v[j];
    if (x->type != y->type)
        return false;
    switch (x->type) {
    case SL_JSON_STRING:
        return x->len == y->len && memcmp(x->s, y->s, x->len) == 0;
    case SL_JSON_NUMBER: {
        long long xi = 0, yi = 0;
        double xd = 0, yd = 0;
        int kx = num_kind(x, &xi, &xd), ky = num_kind(y, &yi, &yd);
        return kx == ky && (kx == 1 ? xi == yi : xd == yd);
    }
    case SL_JSON_ARRAY: {
        uint32_t c = x->first, d = y->first;
        for (; c != UINT32_MAX && d != UINT32_MAX; c = a->v[c].next, d = b->v[d].next)
            if (!same(a, c, b, d))
                return false;
        return c == UINT32_MAX && d == UINT32_MAX;
    }
    case SL_JSON_OBJECT:
        return same_members(a, i, b, j) && same_members(b, j, a, i);
    default:
        return true;
    }
}

/* Whether two JSON texts hold the same value (repeated keys: the last). */
static bool same_json(const char *x, const char *y)
{
    if (strcmp(x, "nil") == 0 || strcmp(y, "nil") == 0)
        return strcmp(x, y) == 0;
    sl_evview a, b;
    sl_evview_init(&a);
    sl_evview_init(&b);
    sl_error err = {0};
    /* Texts that are not objects are wrapped so the parser takes them. */
    char *wx = malloc(strlen(x) + 8), *wy = malloc(strlen(y) + 8);
    sprintf(wx, "{\"v\":%s}", x);
    sprintf(wy, "{\"v\":%s}", y);
    if (sl_evview_parse(&a, wx, strlen(wx), true, &err) ||
        sl_evview_parse(&b, wy, strlen(wy), true, &err))
        fail_msg("not JSON: %s / %s: %s", x, y, err.msg);
    bool ok = same(&a, 0, &b, 0);
    sl_evview_free(&a);
    sl_evview_free(&b);
    free(wx);
    free(wy);
    return ok;
}

/* ---- reading ------------------------------------------------------------------- */

static const char TYPES[] =
    "{\"s\":\"text\",\"esc\":\"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\",\"i\":42,\"neg\":-7,"
    "\"zero\":0,\"f\":1.5,\"exp\":1e2,\"fz\":3.0,\"big\":12345678901234567890,"
    "\"max\":9223372036854775807,\"min\":-9223372036854775808,\"over\":9223372036854775808,"
    "\"t\":true,\"fa\":false,\"n\":null,\"o\":{\"x\":1},\"a\":[1,\"two\",[3],{\"four\":4}],"
    "\"eo\":{},\"ea\":[],\"empty\":\"\"}";

static void test_read_types(void **state)
{
    fx *f = *state;
    check(f, TYPES,
          "assert(e.s == 'text' and type(e.s) == 'string')\n"
          "assert(e.esc == 'a\"b\\\\c\\n\\xc3\\xa9\\xf0\\x9f\\x98\\x80')\n"
          "assert(math.type(e.i) == 'integer' and e.i == 42 and e.neg == -7)\n"
          "assert(math.type(e.zero) == 'integer')\n"
          "assert(math.type(e.f) == 'float' and e.f == 1.5)\n"
          "assert(math.type(e.exp) == 'float' and e.exp == 100)\n"
          "assert(math.type(e.fz) == 'float' and e.fz == 3)\n"
          "assert(math.type(e.big) == 'float' and e.big == 12345678901234567890.0)\n"
          "assert(e.max == math.maxinteger and e.min == math.mininteger)\n"
          "assert(math.type(e.over) == 'float')\n"
          "assert(e.t == true and e.fa == false and e.n == sluice.null)\n"
          "assert(e.missing == nil and e.empty == '')\n"
          "assert(type(e.o) == 'table' and e.o.x == 1 and e.o.y == nil)\n"
          "assert(type(e.a) == 'table' and #e.a == 4 and e.a[1] == 1 and e.a[2] == 'two')\n"
          "assert(e.a[3][1] == 3 and e.a[4].four == 4 and e.a[5] == nil and e.a[0] == nil)\n"
          "assert(e.a[1.0] == 1 and e.a['1'] == nil and e[1] == nil)\n"
          "assert(#e.ea == 0 and next(e.eo) == nil and next(e.ea) == nil and #e == 0)\n"
          "return true");
    /* Unchanged, everything comes back as written. */
    expect(f, TYPES, "return e", TYPES);
    expect(f, TYPES, "local x = e.o.x, e.a[4].four, e.esc; return e", TYPES);
}

static void test_children(void **state)
{
    fx *f = *state;
    const char *ev = "{\"data\":{\"c\":{\"id\":1}},\"list\":[{\"k\":1},{\"k\":2}]}";
    check(f, ev,
          "assert(e.data == e.data and rawequal(e.data.c, e.data.c))\n"
          "assert(e.list[1] == e.list[1] and e.list[1] ~= e.list[2])\n"
          "local d = e.data; d.x = 1; e.data.y = 2\n"
          "assert(d.y == 2 and e.data.x == 1)\n"
          "local c = d.c; e.data.c.id = 5; assert(c.id == 5)\n"
          "local l1 = e.list[1]; table.remove(e.list, 1)\n"
          "assert(e.list[1].k == 2 and l1.k == 1)\n"
          "return true");
    expect(f, ev, "local d = e.data; d.x = 1; e.data.y = 2; d.c.id = 5; return e",
           "{\"data\":{\"c\":{\"id\":5},\"x\":1,\"y\":2},\"list\":[{\"k\":1},{\"k\":2}]}");
    /* The same child under two keys encodes twice, with its changes. */
    expect(f, ev, "e.copy = e.data; e.data.c.id = 9; return e",
           "{\"data\":{\"c\":{\"id\":9}},\"list\":[{\"k\":1},{\"k\":2}],"
           "\"copy\":{\"c\":{\"id\":9}}}");
    /* Proxies inside new tables, and a new table replacing a child. */
    expect(f, ev, "return {e.data.c, {inner = e.list[2]}}", "[{\"id\":1},{\"inner\":{\"k\":2}}]");
    expect(f, ev, "e.data = {fresh = true}; return e",
           "{\"data\":{\"fresh\":true},\"list\":[{\"k\":1},{\"k\":2}]}");
}

static void test_writes(void **state)
{
    fx *f = *state;
    const char *ev = "{\"a\":1,\"b\":{\"c\":2,\"d\":[1,2]},\"e\":\"x\"}";
    expect(f, ev, "e.a = 10; return e", "{\"a\":10,\"b\":{\"c\":2,\"d\":[1,2]},\"e\":\"x\"}");
    expect(f, ev, "e.a = nil; return e", "{\"b\":{\"c\":2,\"d\":[1,2]},\"e\":\"x\"}");
    expect(f, ev, "e.e = nil; e.a = nil; e.b = nil; return e", "{}");
    expect(f, ev, "e.z = 1; e.y = 2; e.z = 3; return e",
           "{\"a\":1,\"b\":{\"c\":2,\"d\":[1,2]},\"e\":\"x\",\"z\":3,\"y\":2}");
    /* A deleted added key keeps its place when it comes back. */
    expect(f, ev, "e.z = 1; e.y = 2; e.z = nil; assert(e.z == nil); e.z = 4; return e",
           "{\"a\":1,\"b\":{\"c\":2,\"d\":[1,2]},\"e\":\"x\",\"z\":4,\"y\":2}");
    expect(f, ev, "e.a = nil; e.a = 'back'; return e",
           "{\"a\":\"back\",\"b\":{\"c\":2,\"d\":[1,2]},\"e\":\"x\"}");
    expect(f, ev, "e.b.c = nil; e.b.n = sluice.null; e.b.d[2] = 20; return e",
           "{\"a\":1,\"b\":{\"d\":[1,20],\"n\":null},\"e\":\"x\"}");
    expect(f, ev, "e.b.d = sluice.array(); return e",
           "{\"a\":1,\"b\":{\"c\":2,\"d\":[]},\"e\":\"x\"}");
    expect(f, ev, "e.a = 1.0; e.e = 'q\"\\n'; return e",
           "{\"a\":1.0,\"b\":{\"c\":2,\"d\":[1,2]},\"e\":\"q\\\"\\n\"}");
    /* Reading after writing sees the writes; deleting a missing key is no-op. */
    check(f, ev,
          "e.a = nil; e.nope = nil; e.q = false\n"
          "assert(e.a == nil and e.nope == nil and e.q == false)\n"
          "local b = e.b; e.b = 5; assert(e.b == 5 and b.c == 2)\n"
          "return true");
    expect_error(f, ev, "e[nil] = 1", SL_ESCRIPT, "index is nil");
    expect_error(f, ev, "e[0/0] = 1", SL_ESCRIPT, "index is NaN");
}

static void test_arrays(void **state)
{
    fx *f = *state;
    const char *ev = "{\"l\":[1,2,3],\"o\":[{\"a\":1},{\"a\":2}],\"s\":[\"b\",\"a\",\"c\"],"
                     "\"e\":[]}";
    expect(f, ev, "e.l[#e.l + 1] = 4; e.e[#e.e + 1] = 'x'; return {e.l, e.e}",
           "[[1,2,3,4],[\"x\"]]");
    expect(f, ev, "table.insert(e.l, 1, 0); table.insert(e.l, 9); return e.l", "[0,1,2,3,9]");
    expect(f, ev, "table.insert(e.l, 2, 'mid'); return e.l", "[1,\"mid\",2,3]");
    expect(f, ev, "local x = table.remove(e.l); assert(x == 3); return e.l", "[1,2]");
    expect(f, ev, "local x = table.remove(e.l, 1); assert(x == 1 and #e.l == 2); return e.l",
           "[2,3]");
    expect(f, ev, "table.remove(e.l); table.remove(e.l); table.remove(e.l); return {e.l, #e.l}",
           "[[],0]");
    expect(f, ev, "table.remove(e.o, 1); e.o[1].a = 7; return e.o", "[{\"a\":7}]");
    expect(f, ev, "table.sort(e.s); return e.s", "[\"a\",\"b\",\"c\"]");
    expect(f, ev, "return table.concat(e.s, ',') .. #e.s", "\"b,a,c3\"");
    expect(f, ev, "e.l[3] = nil; e.l[2] = nil; return {#e.l, e.l}", "[1,[1]]");
    expect(f, ev, "e.l[3] = nil; e.l[4] = 9; return #e.l", "2");
    expect_error(f, ev, "e.l[3] = nil; e.l[4] = 9; return e.l", SL_EINVAL, "holes");
    expect(f, ev, "local a, b, c = table.unpack(e.l); return {c, b, a}", "[3,2,1]");
    check(f, ev,
          "local n, s = 0, 0\n"
          "for i, v in ipairs(e.l) do n = n + 1; s = s + v; assert(i == v) end\n"
          "assert(n == 3 and s == 6 and rawlen(e.l) == 3 and #e.o == 2)\n"
          "assert(getmetatable(e.l) == sluice.array and getmetatable(e) == nil)\n"
          "for i, o in ipairs(e.o) do assert(o.a == i) end\n"
          "return true");
    /* Holes and elements past the end encode as tables would: refused. */
    expect_error(f, ev, "e.l[2] = nil; return e", SL_EINVAL, "holes");
    expect_error(f, ev, "e.l[5] = 1; return e", SL_EINVAL, "holes");
    expect_error(f, ev, "e.l.name = 1; return e", SL_EINVAL, "string key");
    /* ... unless the gap is filled. */
    expect(f, ev, "e.l[5] = 5; e.l[4] = 4; return {#e.l, e.l}", "[5,[1,2,3,4,5]]");
    expect(f, ev, "e.l[2] = nil; e.l[2] = 'two'; return e.l", "[1,\"two\",3]");
    /* A big array: index lookups stay right. */
    char big[40000];
    size_t o = (size_t)snprintf(big, sizeof big, "{\"a\":[");
    for (int i = 1; i <= 5000; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s%d", i > 1 ? "," : "", i);
    snprintf(big + o, sizeof big - o, "]}");
    check(f, big,
          "local a = e.a; assert(#a == 5000 and a[4321] == 4321)\n"
          "local s = 0 for i, v in ipairs(a) do s = s + v end assert(s == 5000 * 5001 // 2)\n"
          "table.remove(a, 1); assert(a[1] == 2 and #a == 4999)\n"
          "return true");
}

static void test_iteration(void **state)
{
    fx *f = *state;
    const char *ev = "{\"z\":1,\"y\":{\"q\":1},\"x\":[1],\"w\":null}";
    /* pairs: the text's order, then added keys; deleted ones left out. */
    expect(f, ev,
           "e.y = nil; e.new = 'n'; e.z = 2\n"
           "local ks = {} for k, v in pairs(e) do ks[#ks + 1] = k .. '=' .. type(v) end\n"
           "return table.concat(ks, ' ')",
           "\"z=number x=table w=userdata new=string\"");
    expect(f, ev,
           "local ks, k = {}, nil\n"
           "repeat k = next(e, k); ks[#ks + 1] = k until k == nil\n"
           "return table.concat(ks, ',')",
           "\"z,y,x,w\"");
    check(f, ev,
          "assert(type(e) == 'table' and type(e.y) == 'table' and type(e.x) == 'table')\n"
          "assert(type(nil) == 'nil' and type(1) == 'number' and type({}) == 'table')\n"
          "assert(rawget(e, 'z') == 1 and rawget(e.x, 1) == 1 and rawget({5}, 1) == 5)\n"
          "assert(rawset(e, 'r', 3) == e and e.r == 3)\n"
          "assert(rawlen(e) == 0 and rawlen(e.x) == 1 and rawlen('abc') == 3)\n"
          "assert(rawequal(e.y, e.y) and not rawequal(e.y, e.x))\n"
          "assert(next({}) == nil and next({1}) == 1)\n"
          "local n = 0 for k, v in pairs(e.x) do n = n + 1; assert(k == 1 and v == 1) end\n"
          "assert(n == 1)\n"
          "for k in pairs(e) do e[k] = nil end\n" /* clearing during traversal is allowed */
          "assert(next(e) == nil)\n"
          "assert(tostring(e):find('^sluice.event: ') ~= nil)\n"
          "return true");
    expect(f, ev, "for k in pairs(e) do e[k] = nil end; return e", "{}");
    expect_error(f, ev, "return next(e, 'nope')", SL_ESCRIPT, "invalid key to 'next'");
    /* Integer keys added to an object: # and next see them; it encodes as a
     * table would (mixed keys are refused, an emptied object is an array). */
    check(f, "{}", "e[1] = 'a'; e[2] = 'b'; assert(#e == 2 and rawlen(e) == 2); return true");
    expect(f, "{}", "e[1] = 'a'; e[2] = 'b'; return e", "[\"a\",\"b\"]");
    expect_error(f, ev, "e[1] = 'a'; return e", SL_EINVAL, "mixes");
}

static void test_sluice_table(void **state)
{
    fx *f = *state;
    const char *ev = "{\"a\":{\"b\":[1,{\"c\":null}]},\"d\":\"x\",\"e\":[]}";
    check(f, ev,
          "e.a.b[3] = 'new'; e.d = nil; e.z = 1\n"
          "local t = sluice.table(e)\n"
          "assert(rawequal(getmetatable(t), nil) and getmetatable(t.a.b) == sluice.array)\n"
          "assert(getmetatable(t.e) == sluice.array)\n"
          "assert(t.a.b[1] == 1 and t.a.b[2].c == sluice.null and t.a.b[3] == 'new')\n"
          "assert(t.d == nil and t.z == 1 and #t.a.b == 3)\n"
          "assert(rawget(t, 'a') ~= nil and not rawequal(t.a, e.a))\n"
          "t.a.b[1] = 99; assert(e.a.b[1] == 1)\n" /* a copy */
          "assert(sluice.table(5) == 5 and sluice.table(nil) == nil)\n"
          "local plain = {1}; assert(sluice.table(plain) == plain)\n"
          "assert(sluice.json.encode(sluice.table(e)) ~= nil)\n"
          "return true");
    expect(f, ev, "return sluice.table(e.a)", "{\"b\":[1,{\"c\":null}]}");
    expect_error(f, ev, "e.a.self = e; return sluice.table(e)", SL_ESCRIPT, "deeper than");
}

static void test_stale(void **state)
{
    fx *f = *state;
    const char *ev = "{\"id\":\"1\",\"data\":{\"x\":1},\"l\":[1]}";
    check(f, ev, "kept = e; kept_data = e.data; kept_list = e.l; return true");
    static const char *const uses[] = {
        "return kept.id",
        "return kept_data.x",
        "kept.id = 1",
        "return #kept_list",
        "for k in pairs(kept) do end",
        "return next(kept)",
        "return rawget(kept, 'id')",
        "return sluice.table(kept)",
        "return kept_list[1]",
    };
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++)
        expect_error(f, ev, uses[i], SL_ESCRIPT, "event proxy used after its call returned");
    /* Encoding one fails too, and type() still answers. */
    expect_error(f, ev, "return {old = kept_data}", SL_EINVAL,
                 "$.old: event proxy used after its call returned");
    check(f, ev, "return type(kept) == 'table'");
    /* A proxy returned and encoded before the generation moves on is fine;
     * sl_luaproxy_release ends it even without another call. */
    parse(f, 0, ev);
    load_fn(f->L, "return function(e) return e end");
    const sl_evview *one = &f->ev[0];
    sl_error err = {0};
    assert_int_equal(sl_luaproxy_call(f->L, f->px, &one, 1, false, &err), 0);
    sl_luaproxy_release(f->px);
    int rc;
    assert_null(encode_pop(f->L, &rc, &err));
    assert_int_equal(rc, SL_EINVAL);
    assert_non_null(strstr(err.msg, "after its call returned"));
}

static void test_text_kept(void **state)
{
    fx *f = *state;
    /* Escapes, number spellings and spacing inside untouched values survive;
     * escaped keys too, also when a sibling changed. */
    const char *ev = "{\"s\":\"\\u00e9\\/\",\"n\":1E+2,\"b\":123456789012345678901234567890,"
                     "\"f\":0.10,\"k\\u0065y\":{ \"a\" : [ 1 , 2 ] },\"m\":-0}";
    expect(f, ev, "return e", ev);
    expect(f, ev, "e.added = 1; return e",
           "{\"s\":\"\\u00e9\\/\",\"n\":1E+2,\"b\":123456789012345678901234567890,"
           "\"f\":0.10,\"k\\u0065y\":{ \"a\" : [ 1 , 2 ] },\"m\":-0,\"added\":1}");
    expect(f, ev, "e.s = nil; e.key.a[3] = 3; return e",
           "{\"n\":1E+2,\"b\":123456789012345678901234567890,\"f\":0.10,"
           "\"key\":{\"a\":[1 , 2,3]},\"m\":-0}");
    check(f, ev,
          "assert(e.s == '\\xc3\\xa9/' and e.key.a[2] == 2 and e['k\\x65y'] ~= nil)\n"
          "assert(math.type(e.n) == 'float' and e.n == 100 and math.type(e.m) == 'integer')\n"
          "assert(math.type(e.b) == 'float' and e.f == 0.1)\n"
          "return true");
    /* A changed value is encoded from Lua: the text is gone. */
    expect(f, ev, "e.n = e.n; e.s = e.s; return {e.n, e.s}", "[100.0,\"\xc3\xa9/\"]");
}

static void test_duplicates(void **state)
{
    fx *f = *state;
    const char *ev = "{\"a\":1,\"b\":2,\"a\":3,\"type\":4,\"time\":5,\"data\":6}";
    /* Untouched, or touched elsewhere: as written; read: the last; a
     * written or deleted key, or an iterated object: the last only. */
    expect(f, ev, "return e", ev);
    expect(f, ev, "e.x = 0; return e",
           "{\"a\":1,\"b\":2,\"a\":3,\"type\":4,\"time\":5,\"data\":6,\"x\":0}");
    check(f, ev,
          "assert(e.a == 3)\n"
          "local n = 0 for k, v in pairs(e) do n = n + 1; if k == 'a' then assert(v == 3) end end\n"
          "assert(n == 5)\n"
          "return true");
    expect(f, ev, "for k in pairs(e) do end e.x = 0; return e",
           "{\"b\":2,\"a\":3,\"type\":4,\"time\":5,\"data\":6,\"x\":0}");
    expect(f, ev, "e.a = 9; return e", "{\"b\":2,\"a\":9,\"type\":4,\"time\":5,\"data\":6}");
    expect(f, ev, "e.a = nil; return e", "{\"b\":2,\"type\":4,\"time\":5,\"data\":6}");
    /* The same with more members than the pairwise look handles. */
    char big[8192];
    size_t o = (size_t)snprintf(big, sizeof big, "{");
    for (int i = 0; i < 100; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "\"k%d\":%d,", i % 70, i);
    snprintf(big + o - 1, sizeof big - o + 1, "}");
    check(f, big,
          "assert(e.k5 == 75 and e.k69 == 69 and e.k0 == 70 and e.k70 == nil)\n"
          "local n = 0 for k, v in pairs(e) do n = n + 1 end assert(n == 70)\n"
          "e.k5 = 'five'; local t = sluice.json.decode(sluice.json.encode(e))\n"
          "n = 0 for k, v in pairs(t) do n = n + 1 end assert(n == 70 and t.k5 == 'five')\n"
          "assert(t.k1 == 71 and t.k29 == 99 and t.k30 == 30)\n"
          "return true");
    /* Deleting or writing a repeated key without iterating first. */
    check(f, big,
          "e.k5 = nil; e.k6 = 'six'; local t = sluice.json.decode(sluice.json.encode(e))\n"
          "assert(t.k5 == nil and t.k6 == 'six' and t.k7 == 77)\n"
          "return true");
}

static void test_big_objects(void **state)
{
    fx *f = *state;
    char big[16384];
    size_t o = (size_t)snprintf(big, sizeof big, "{");
    for (int i = 0; i < 300; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s\"m%d\":%d", i ? "," : "", i, i);
    snprintf(big + o, sizeof big - o, "}");
    check(f, big,
          "for i = 0, 299 do assert(e['m' .. i] == i) end\n"
          "assert(e.m300 == nil)\n"
          "for i = 1, 40 do e['add' .. i] = i end\n" /* many added keys: the map */
          "for i = 1, 40 do assert(e['add' .. i] == i) end\n"
          "e.add7 = nil; e.m7 = nil; e.m8 = 'x'\n"
          "local n, last = 0, nil\n"
          "for k, v in pairs(e) do n = n + 1; last = k end\n"
          "assert(n == 300 - 1 + 40 - 1 and last == 'add40')\n"
          "local k, c = nil, 0 repeat k = next(e, k); c = c + 1 until k == nil\n"
          "assert(c == n + 1)\n"
          "local t = sluice.json.decode(sluice.json.encode(e))\n"
          "assert(t.m8 == 'x' and t.m7 == nil and t.add7 == nil and t.add8 == 8)\n"
          "return true");
    /* Many added keys on an array (keys that are not positive integers). */
    check(f, "{\"a\":[1]}",
          "for i = 1, 20 do e.a['k' .. i] = i; e.a[-i] = i end\n"
          "assert(e.a.k20 == 20 and e.a[-3] == 3 and #e.a == 1)\n"
          "local n = 0 for k in pairs(e.a) do n = n + 1 end assert(n == 41)\n"
          "return true");
}

static void test_encode_errors(void **state)
{
    fx *f = *state;
    const char *ev = "{\"data\":{\"x\":1}}";
    expect_error(f, ev, "e.data.fn = print; return e", SL_EINVAL, "$.data.fn: a function");
    expect_error(f, ev, "e.data.x = 0/0; return e", SL_EINVAL, "$.data.x: NaN");
    expect_error(f, ev, "e.data.self = e; return e", SL_EINVAL, "nesting deeper than 128");
    expect_error(f, ev, "e.data.s = '\\xff'; return e", SL_EINVAL, "UTF-8");
    expect_error(f, ev, "error('boom')", SL_ESCRIPT, "boom");
    expect_error(f, ev, "setmetatable(e, {})", SL_ESCRIPT, "table expected");
}

/* Runs fn with a list of proxies of three events (transform_batch). */
static void test_list_call(void **state)
{
    fx *f = *state;
    parse(f, 0, "{\"n\":1}");
    parse(f, 1, "{\"n\":2,\"keep\":[1]}");
    parse(f, 2, "{\"n\":3}");
    load_fn(f->L,
            "return function(list)\n"
            "  assert(type(list) == 'table' and #list == 3 and getmetatable(list) == nil)\n"
            "  local out = {}\n"
            "  for i, e in ipairs(list) do e.i = i; if e.n ~= 2 then out[#out + 1] = e end end\n"
            "  out[#out + 1] = list[2].keep\n"
            "  return out\n"
            "end");
    const sl_evview *evs[3] = {&f->ev[0], &f->ev[1], &f->ev[2]};
    sl_error err = {0};
    assert_int_equal(sl_luaproxy_call(f->L, f->px, evs, 3, true, &err), 0);
    int rc;
    char *got = encode_pop(f->L, &rc, &err);
    assert_non_null(got);
    assert_string_equal(got, "[{\"n\":1,\"i\":1},{\"n\":3,\"i\":3},[1]]");
    free(got);
    sl_luaproxy_release(f->px);
}

/* Memory caps: every size of cap either works or fails with SL_ENOMEM, and
 * the state goes on working. */
static void test_memory_cap(void **state)
{
    (void)state;
    sl_luaproxy *px;
    lua_State *L = new_state(1u << 20, &px);
    sl_evview ev;
    sl_evview_init(&ev);
    char big[20000];
    size_t o = (size_t)snprintf(big, sizeof big, "{");
    for (int i = 0; i < 500; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s\"m%d\":[%d]", i ? "," : "", i, i);
    snprintf(big + o, sizeof big - o, "}");
    sl_error err = {0};
    assert_int_equal(sl_evview_parse(&ev, big, strlen(big), true, &err), 0);
    int oom = 0, ok = 0;
    for (int waste = 0; waste < 1100; waste += 25) {
        char src[512];
        snprintf(src, sizeof src,
                 "return function(e)\n"
                 "  local hog = string.rep('x', %d * 1024)\n"
                 "  local t = {} for i = 0, 499 do t[#t + 1] = e['m' .. i]; e['n' .. i] = i end\n"
                 "  return sluice.table(e)\n"
                 "end",
                 waste);
        if (sl_sandbox_load(L, src, strlen(src), "=cap", &err) || sl_sandbox_call(L, 0, 1, &err))
            fail_msg("%s", err.msg);
        const sl_evview *one = &ev;
        int rc = sl_luaproxy_call(L, px, &one, 1, false, &err);
        if (rc == 0) {
            ok++;
            lua_pop(L, 1);
        } else {
            assert_int_equal(rc, SL_ENOMEM);
            oom++;
        }
        sl_luaproxy_release(px);
    }
    assert_true(ok > 0 && oom > 0);
    load_fn(L, "return function(e) return e.m1[1] end");
    const sl_evview *one = &ev;
    assert_int_equal(sl_luaproxy_call(L, px, &one, 1, false, &err), 0);
    assert_int_equal(lua_tointeger(L, -1), 1);
    lua_pop(L, 1);
    sl_evview_free(&ev);
    sl_sandbox_close(L);
}

/* ---- the differential test --------------------------------------------------- */

static const char *const CORPUS[] = {
    "{\"specversion\":\"1.0\",\"id\":\"8f14e45f-ceea-467f-a0e6-1f3b0a7c2d91\","
    "\"source\":\"/shop/eu-west/checkout\",\"type\":\"order.created\","
    "\"subject\":\"order/100234\",\"time\":\"2024-05-14T09:21:37.412Z\","
    "\"datacontenttype\":\"application/json\",\"data\":{\"order_id\":100234,\"amount\":149.9,"
    "\"currency\":\"EUR\",\"items\":3,\"customer\":{\"id\":\"c-5521\",\"tier\":\"gold\","
    "\"country\":\"DE\",\"email\":\"anna.schmidt@example.com\"},\"channel\":\"web\","
    "\"coupon\":null}}",
    "{\"id\":\"2\",\"type\":\"list\",\"list\":[3,1,2],\"data\":{\"tags\":[\"a\",\"b\"],"
    "\"lines\":[{\"sku\":\"x\",\"q\":1},{\"sku\":\"y\",\"q\":2.5}]}}",
    "{\"id\":\"3\",\"type\":\"escapes\",\"data\":{\"msg\":\"line\\nnext \\\"q\\\" \\u00e9 "
    "\\ud83d\\ude00 \\/ \\\\\",\"k\\u00e9y\":\"v\"},\"list\":[\"\\t\",\"\"]}",
    "{\"id\":\"4\",\"type\":\"numbers\",\"data\":{\"i\":-42,\"f\":1.5e-7,\"e\":1E+2,\"z\":0.0,"
    "\"big\":123456789012345678901,\"max\":9223372036854775807,\"neg0\":-0,\"h\":1e300},"
    "\"list\":[0,-1,2.25,1e2]}",
    "{\"id\":\"5\",\"type\":\"empty\",\"data\":{},\"list\":[],\"n\":null,\"t\":true,"
    "\"f\":false,\"s\":\"\"}",
    "{\"id\":\"6\",\"type\":\"dups\",\"data\":{\"a\":1,\"a\":{\"b\":2}},\"list\":[[1,[2,[3]]]]}",
    "{ \"id\" : \"7\" , \"type\" : \"spaced\" , \"data\" : { \"x\" : [ 1 , 2 ] } ,"
    " \"list\" : [ {\"a\": 1} ] }",
    "{\"id\":\"8\",\"data\":{\"deep\":{\"deeper\":{\"deepest\":{\"v\":[{\"w\":1}]}}}},"
    "\"list\":[\"x\",\"y\",\"z\",\"w\"]}",
};

static const char *const TRANSFORMS[] = {
    "return e",
    "local x = e.data; return e",
    "e.data.vip = true; return e",
    "e.data = nil; return e",
    "e.type = (e.type or 'none') .. '.v2'; return e",
    "e.extra = {a = 1, b = {2, 3}, c = sluice.array(), d = {}}; return e",
    "for k, v in pairs(e) do if type(v) == 'string' then e[k] = v:upper() end end; return e",
    "local out = {} for k, v in pairs(e) do out[k] = v end return out",
    "return {e, e}",
    "return nil",
    "return {}",
    "e.list = e.list or sluice.array(); e.list[#e.list + 1] = 42; return e",
    "if e.list then table.insert(e.list, 1, 'first') end return e",
    "if e.list and #e.list > 0 then table.remove(e.list) end return e",
    "if e.list and #e.list > 0 then table.remove(e.list, 1) end return e",
    "return sluice.table(e)",
    "e.copy = e.data; return e",
    "e.json = sluice.json.decode(sluice.json.encode(e)); return e",
    "local function walk(t) for k, v in pairs(t) do\n"
    "  if type(v) == 'number' then t[k] = v + 1 elseif type(v) == 'table' then walk(v) end\n"
    "end end walk(e) return e",
    "for k in pairs(e) do if k:sub(1, 1) == 'd' then e[k] = nil end end return e",
    "local n, k = 0, next(e) while k do n = n + 1; k = next(e, k) end e.count = n return e",
    "rawset(e, 'r', rawget(e, 'id')); e.len = e.list and rawlen(e.list) or -1; return e",
    "local s = 0 for i, v in ipairs(e.list or {}) do if type(v) == 'number' then s = s + v end "
    "end\n"
    "e.sum = s return e",
    "e.len = #e; e.is_arr = e.list ~= nil and getmetatable(e.list) == sluice.array\n"
    "e.obj = getmetatable(e) == nil return e",
    "if type(e.data) == 'table' then e.data.nested = {deeper = {e.data.customer or 1}} end\n"
    "return e",
    "e.data = sluice.null; return e",
    "error('boom')",
    "return e.list",
    "return e.data",
    "if type(e.data) == 'table' and type(e.data.amount) == 'number' then\n"
    "  e.data.amount = e.data.amount * 1.0 end return e",
    "e.msg = 'quote \" backslash \\\\ newline \\n tab \\t \\xc3\\xa9'; return e",
    "e[1] = 'x'; return e",
    "if e.list and #e.list >= 3 then e.list[2] = nil end return e",
    "if e.list then e.list[#e.list + 2] = 1 end return e",
    "if e.list then table.sort(e.list, function(a, b) return tostring(a) < tostring(b) end) end\n"
    "return e",
    "local t = {} for i = 1, 3 do t[i] = e end return t",
    "e.id = nil; e.id = 'again'; e.gone = 1; e.gone = nil; return e",
    "if type(e.data) == 'table' then for k in pairs(e.data) do e.data[k] = nil end end return e",
    "local d = e.data; e.data = {wrapped = d}; return e",
    "return {count = #(e.list or {}), first = e.list and e.list[1] or sluice.null}",
};

static void test_differential(void **state)
{
    fx *f = *state;
    size_t compared = 0, failed_both = 0;
    for (size_t t = 0; t < sizeof TRANSFORMS / sizeof *TRANSFORMS; t++) {
        char src[4096];
        snprintf(src, sizeof src, "return function(e) %s end", TRANSFORMS[t]);
        for (size_t c = 0; c < sizeof CORPUS / sizeof *CORPUS; c++) {
            int rp = 0, rt = 0;
            sl_error ep = {0}, et = {0};
            char *p = run_proxy(f, CORPUS[c], src, &rp, &ep);
            char *q = run_table(f, CORPUS[c], src, &rt, &et);
            if (!p != !q)
                fail_msg("transform %zu on event %zu: proxy %s, tables %s\n  %s", t, c,
                         p ? p : ep.msg, q ? q : et.msg, TRANSFORMS[t]);
            if (!p) {
                if (rp != rt)
                    fail_msg("transform %zu on event %zu: proxy error %d (%s), tables %d (%s)", t,
                             c, rp, ep.msg, rt, et.msg);
                failed_both++;
                continue;
            }
            if (!same_json(p, q))
                fail_msg("transform %zu on event %zu differs:\n  proxy  %s\n  tables %s\n  %s", t,
                         c, p, q, TRANSFORMS[t]);
            /* Nothing changed: the proxy gives the event back as written
             * (the spaced event keeps its spacing where nothing was read). */
            if (t == 0 && strcmp(p, CORPUS[c]) != 0)
                fail_msg("return e changed event %zu:\n  %s\n  %s", c, p, CORPUS[c]);
            if (t == 1 && c != 6 && strcmp(p, CORPUS[c]) != 0)
                fail_msg("reading changed event %zu:\n  %s\n  %s", c, p, CORPUS[c]);
            compared++;
            free(p);
            free(q);
        }
    }
    assert_true(compared > 250);
    assert_true(failed_both >= sizeof CORPUS / sizeof *CORPUS); /* error('boom') at least */
}

/* ---- the rule VM --------------------------------------------------------------- */

static const char VM_CONFIG[] =
    "set \"s\" { }\n"
    "rule \"vip\" { set = \"s\", transform = function(e) e.data.vip = true; return e end,\n"
    "  target = target.file { path = \"/dev/null\" } }\n"
    "rule \"flt\" { set = \"s\", match = [[{\"type\":[\"keep\"]}]],\n"
    "  filter = function(e) return e.data.n > 1 end,\n"
    "  target = target.file { path = \"/dev/null\" } }\n"
    "rule \"fan\" { set = \"s\", transform = function(e) return e.data.items end,\n"
    "  target = target.file { path = \"/dev/null\" } }\n"
    "rule \"drop\" { set = \"s\", transform = function(e) if e.data.n == 1 then return nil end\n"
    "  return {e, {id = e.id .. '-copy'}} end, target = target.file { path = \"/dev/null\" } }\n"
    "rule \"batch\" { set = \"s\", filter = function(e) return e.data.n ~= 3 end,\n"
    "  transform_batch = function(list) local out = {}\n"
    "    for i, e in ipairs(list) do e.data.pos = i; out[#out + 1] = e end\n"
    "    out[#out + 1] = {summary = #list} return out end,\n"
    "  target = target.file { path = \"/dev/null\" } }\n"
    "rule \"bad\" { set = \"s\", transform = function(e) return 5 end,\n"
    "  target = target.file { path = \"/dev/null\" } }\n"
    "rule \"stash\" { set = \"s\", transform = function(e)\n"
    "  if kept then local x = kept.id end kept = e return e end,\n"
    "  target = target.file { path = \"/dev/null\" } }\n";

static const char *const VM_EVENTS[] = {
    "{\"id\":\"a\",\"type\":\"keep\",\"data\":{\"n\":1,\"items\":[{\"i\":1},{\"i\":2}]}}",
    "{\"id\":\"b\",\"type\":\"keep\",\"data\":{\"n\":2,\"items\":[]}}",
    "{\"id\":\"c\",\"type\":\"skip\",\"data\":{\"n\":3,\"items\":[{\"i\":3}]}}",
};

/* Evaluates rule on every event in one mode; returns the payloads and
 * outcomes as one string (caller frees). */
static char *vm_run(sl_rule_vm *vm, size_t rule, bool batch)
{
    sl_rule_out out = {0};
    char *res = calloc(1, 65536);
    size_t o = 0;
    size_t n = sizeof VM_EVENTS / sizeof *VM_EVENTS;
    size_t lens[3];
    for (size_t i = 0; i < n; i++)
        lens[i] = strlen(VM_EVENTS[i]);
    sl_error err = {0};
    if (batch) {
        size_t passed = 0;
        int rc = sl_rule_eval_batch(vm, rule, VM_EVENTS, lens, n, NULL, &out, &passed, &err);
        o += (size_t)snprintf(res + o, 65536 - o, "rc=%d passed=%zu %s\n", rc, passed,
                              rc ? err.msg : "");
    } else {
        for (size_t i = 0; i < n; i++) {
            sl_rule_outcome oc = SL_RULE_NO_MATCH;
            size_t before = out.n;
            int rc = sl_rule_eval(vm, rule, VM_EVENTS[i], lens[i], NULL, &out, &oc, &err);
            o += (size_t)snprintf(res + o, 65536 - o, "rc=%d oc=%d n=%zu %s\n", rc,
                                  rc ? -1 : (int)oc, out.n - before, rc ? err.msg : "");
        }
    }
    for (size_t i = 0; i < out.n; i++) {
        size_t len;
        const char *p = sl_rule_out_get(&out, i, &len);
        o += (size_t)snprintf(res + o, 65536 - o, "%.*s\n", (int)len, p);
    }
    sl_rule_out_free(&out);
    return res;
}

/* The payload lines of two runs hold the same JSON, line by line, and the
 * outcome lines are equal (messages aside). */
static void vm_compare(const char *rule, const char *a, const char *b)
{
    char *x = strdup(a), *y = strdup(b), *sx, *sy;
    char *lx = strtok_r(x, "\n", &sx), *ly = strtok_r(y, "\n", &sy);
    for (; lx && ly; lx = strtok_r(NULL, "\n", &sx), ly = strtok_r(NULL, "\n", &sy)) {
        if (strncmp(lx, "rc=", 3) == 0) {
            /* "rc=… oc=… n=…": the same; the messages may differ. */
            size_t k = 0;
            for (int sp = 0; lx[k] && sp < 3; k++)
                sp += lx[k] == ' ';
            if (strncmp(lx, ly, k) != 0)
                fail_msg("rule %s: %s / %s", rule, lx, ly);
        } else if (!same_json(lx, ly)) {
            fail_msg("rule %s: payloads differ:\n  proxy  %s\n  tables %s", rule, lx, ly);
        }
    }
    if (lx || ly)
        fail_msg("rule %s: different numbers of lines:\n%s---\n%s", rule, a, b);
    free(x);
    free(y);
}

static void test_rule_vm(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/c.lua", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(VM_CONFIG, fp);
    fclose(fp);
    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT;
    if (sl_config_load(path, &cfg, &diag))
        fail_msg("config: %.*s", (int)diag.len, (const char *)diag.data);
    sl_buf_free(&diag);
    sl_rule_vm *vp = NULL, *vt = NULL;
    sl_error err = {0};
    sl_ruleset rs;
    sl_config_ruleset(cfg, &rs);
    assert_int_equal(sl_rule_vm_new(&rs, &vp, &err), 0);
    assert_int_equal(sl_rule_vm_new(&rs, &vt, &err), 0);
    sl_rule_vm_use_tables(vt, true);
    static const struct {
        const char *name;
        bool batch;
        const char *want; /* the proxy run, exactly */
    } cases[] = {
        {"vip", false,
         "rc=0 oc=3 n=1 \nrc=0 oc=3 n=1 \nrc=0 oc=3 n=1 \n"
         "{\"id\":\"a\",\"type\":\"keep\",\"data\":{\"n\":1,\"items\":[{\"i\":1},{\"i\":2}],"
         "\"vip\":true}}\n"
         "{\"id\":\"b\",\"type\":\"keep\",\"data\":{\"n\":2,\"items\":[],\"vip\":true}}\n"
         "{\"id\":\"c\",\"type\":\"skip\",\"data\":{\"n\":3,\"items\":[{\"i\":3}],\"vip\":true}}"
         "\n"},
        {"flt", false,
         "rc=0 oc=1 n=0 \nrc=0 oc=3 n=1 \nrc=0 oc=0 n=0 \n"
         "{\"id\":\"b\",\"type\":\"keep\",\"data\":{\"n\":2,\"items\":[]}}\n"},
        {"fan", false,
         "rc=0 oc=3 n=2 \nrc=0 oc=2 n=0 \nrc=0 oc=3 n=1 \n{\"i\":1}\n{\"i\":2}\n{\"i\":3}\n"},
        {"drop", false, NULL},
        {"batch", true,
         "rc=0 passed=2 \n"
         "{\"id\":\"a\",\"type\":\"keep\",\"data\":{\"n\":1,\"items\":[{\"i\":1},{\"i\":2}],"
         "\"pos\":1}}\n"
         "{\"id\":\"b\",\"type\":\"keep\",\"data\":{\"n\":2,\"items\":[],\"pos\":2}}\n"
         "{\"summary\":2}\n"},
        {"bad", false, NULL},
        {"stash", false, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t rule = (size_t)(sl_config_rule(cfg, cases[i].name) - cfg->rules);
        char *a = vm_run(vp, rule, cases[i].batch);
        char *b = vm_run(vt, rule, cases[i].batch);
        if (cases[i].want && strcmp(a, cases[i].want) != 0)
            fail_msg("rule %s:\n%s\nwant\n%s", cases[i].name, a, cases[i].want);
        if (strcmp(cases[i].name, "bad") == 0)
            assert_non_null(strstr(a, "transform returned a number"));
        if (strcmp(cases[i].name, "stash") == 0) {
            /* The proxy kept by the first call fails the next ones. */
            assert_non_null(strstr(a, "event proxy used after its call returned"));
            free(a);
            free(b);
            continue;
        }
        vm_compare(cases[i].name, a, b);
        free(a);
        free(b);
    }
    /* Unmatched events are not parsed for nothing, and an event that is not
     * JSON fails with the rule's name. */
    sl_rule_out out = {0};
    sl_rule_outcome oc;
    size_t vip = (size_t)(sl_config_rule(cfg, "vip") - cfg->rules);
    assert_int_equal(sl_rule_eval(vp, vip, "{\"x\":", 5, NULL, &out, &oc, &err), SL_EPARSE);
    assert_non_null(strstr(err.msg, "rule \"vip\""));
    assert_int_equal(out.n, 0);
    sl_rule_out_free(&out);
    sl_rule_vm_free(vp);
    sl_rule_vm_free(vt);
    sl_config_free(cfg);
    tu_rmdir(dir);
}

/* Lane overrides (server/config.h): rule VMs number them after the rules; an
 * override's functions replace the base's, the others are inherited. */
static const char LANE_CONFIG[] =
    "set \"s\" { }\n"
    "lane \"a\" { }\nlane \"b\" { }\nlane \"c\" { }\nlane \"d\" { }\n"
    "rule \"r\" { set = \"s\", filter = function(e) return e.data.n > 1 end,\n"
    "  transform = function(e) e.data.by = 'base'; return e end,\n"
    "  target = target.file { path = \"/dev/null\" },\n"
    "  lanes = {\n"
    "    a = { transform = function(e) e.data.by = 'a'; return e end },\n"
    "    b = { target = target.file { path = \"/dev/null\" } },\n"
    "    c = { filter = function(e) return e.data.n == 1 end },\n"
    "    d = { transform_batch = function(l) return {{n = #l}} end },\n"
    "  } }\n";

/* Runs rule (by number) on events n = 1 and n = 2; returns the payloads,
 * one per line (caller frees). */
static char *lane_run(sl_rule_vm *vm, size_t rule, bool batch)
{
    static const char *const evs[] = {"{\"id\":\"1\",\"type\":\"t\",\"data\":{\"n\":1}}",
                                      "{\"id\":\"2\",\"type\":\"t\",\"data\":{\"n\":2}}"};
    size_t lens[2] = {strlen(evs[0]), strlen(evs[1])};
    sl_rule_out out = {0};
    sl_error err = {0};
    if (batch) {
        size_t passed = 0;
        if (sl_rule_eval_batch(vm, rule, evs, lens, 2, NULL, &out, &passed, &err))
            fail_msg("rule %zu: %s", rule, err.msg);
    } else {
        for (size_t i = 0; i < 2; i++) {
            sl_rule_outcome oc;
            if (sl_rule_eval(vm, rule, evs[i], lens[i], NULL, &out, &oc, &err))
                fail_msg("rule %zu: %s", rule, err.msg);
        }
    }
    sl_buf b = SL_BUF_INIT;
    for (size_t i = 0; i < out.n; i++) {
        size_t len;
        const char *p = sl_rule_out_get(&out, i, &len);
        assert_int_equal(sl_buf_append(&b, p, len), 0);
        assert_int_equal(sl_buf_append(&b, "\n", 1), 0);
    }
    assert_int_equal(sl_buf_append(&b, "", 1), 0);
    sl_rule_out_free(&out);
    return (char *)b.data;
}

static void test_rule_vm_lanes(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/c.lua", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(LANE_CONFIG, fp);
    fclose(fp);
    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT;
    if (sl_config_load(path, &cfg, &diag))
        fail_msg("config: %.*s", (int)diag.len, (const char *)diag.data);
    sl_buf_free(&diag);
    assert_int_equal(cfg->noverrides, 4);
    static const struct {
        const char *lane; /* NULL: the base rule */
        bool batch;
        const char *want;
    } cases[] = {
        {NULL, false, "{\"id\":\"2\",\"type\":\"t\",\"data\":{\"n\":2,\"by\":\"base\"}}\n"},
        {"a", false, "{\"id\":\"2\",\"type\":\"t\",\"data\":{\"n\":2,\"by\":\"a\"}}\n"},
        {"b", false, "{\"id\":\"2\",\"type\":\"t\",\"data\":{\"n\":2,\"by\":\"base\"}}\n"},
        {"c", false, "{\"id\":\"1\",\"type\":\"t\",\"data\":{\"n\":1,\"by\":\"base\"}}\n"},
        {"d", true, "{\"n\":1}\n"},
        {NULL, false, "{\"id\":\"2\",\"type\":\"t\",\"data\":{\"n\":2,\"by\":\"base\"}}\n"},
    };
    for (int tables = 0; tables < 2; tables++) {
        sl_rule_vm *vm = NULL;
        sl_error err = {0};
        sl_ruleset rs;
        sl_config_ruleset(cfg, &rs);
        assert_int_equal(sl_rule_vm_new(&rs, &vm, &err), 0);
        sl_rule_vm_use_tables(vm, tables);
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            size_t rule = 0;
            if (cases[i].lane)
                assert_non_null(sl_config_override(cfg, 0, cases[i].lane, &rule));
            char *got = lane_run(vm, rule, cases[i].batch);
            /* One payload each; tables may order members differently. */
            char *nl = strchr(got, '\n');
            char want[256];
            snprintf(want, sizeof want, "%s", cases[i].want);
            want[strcspn(want, "\n")] = '\0';
            if (!nl || nl[1] || (*nl = '\0', !same_json(got, want)))
                fail_msg("lane %s (%s):\n%swant\n%s", cases[i].lane ? cases[i].lane : "base",
                         tables ? "tables" : "proxies", got, cases[i].want);
            free(got);
        }
        sl_rule_vm_free(vm);
    }
    sl_config_free(cfg);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_types, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_children, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_writes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_arrays, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_iteration, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_sluice_table, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_stale, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_text_kept, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_duplicates, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_big_objects, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_encode_errors, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_list_call, fx_setup, fx_teardown),
        cmocka_unit_test(test_memory_cap),
        cmocka_unit_test_setup_teardown(test_differential, fx_setup, fx_teardown),
        cmocka_unit_test(test_rule_vm),
        cmocka_unit_test(test_rule_vm_lanes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
