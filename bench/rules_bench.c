/*
 * bench/rules_bench.c — the rule engine's per-core throughput against the
 * same run's jansson parse+serialize (json_loads + json_dumps) of the same
 * event: EventBridge pattern matching (one 3-field pattern; a set of 100
 * patterns against one event), a Lua transform and a Lua filter through the
 * real rule path (sl_rule_eval) with the event as a lazy copy-on-write proxy
 * (rules/luaproxy.h, the default) and as tables (rules/luajson.h, the
 * SLUICE_LUA_TABLES=1 path), and Lua filters fed by the table conversion
 * against a read-only lazy proxy written here (the first measurement that
 * led to rules/luaproxy.c; kept as a reference). How to read the table:
 * bench/README.md.
 *
 * Everything runs on one thread, so every figure is per core. Each figure is
 * the median of SLUICE_BENCH_REPS timed runs (default 5) of
 * SLUICE_BENCH_RUN_MS milliseconds each (default 120); sluice and the
 * reference take turns. SLUICE_BENCH_ROWS (comma list of match, ruleset,
 * transform, filter, proxy, diag, scale) runs only some rows, for profiling.
 *
 * Rows 2b and 6 measure the combined matcher (rules/pattern_set.h): the 100
 * patterns of row 2 as one set, and the matcher alone with 1, 10, 100 and
 * 1,000 patterns, 1,000 against 1 in the same run (goal: >= 0.5x), plus
 * the memory the 1,000-pattern set holds (goal: < 16 MiB).
 *
 * Exits 0 when it measured everything, goals met or not; 1 on any error.
 */
#include "bench/tsv.h"
#include "server/config.h"
#include "core/base/json.h"
#include "rules/luajson.h"
#include "rules/pattern.h"
#include "rules/pattern_set.h"
#include "rules/rule.h"
#include "rules/sandbox.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 9
#define RULESET_N 100
#define RULESET_MATCHES 5 /* patterns of the rule set that match EVENT_MATCH */
#define CHUNK 64          /* operations between two looks at the clock */
#define SCALE_MAX 1000    /* rows 6: the largest set of patterns */
#define SCALE_EVENTS 16   /* rows 6: parsed events taken in turn */
#define SCALE_SIZES 5     /* 1, 10, 100, 1,000 of the mix; 1,000 exact types */
#define WARMUP_S 0.02

/* A realistic stored CloudEvent (compact, as sluice stores events), and the
 * same event with an amount that fails the single pattern's last field. */
#define EVENT_HEAD                                                                                 \
    "{\"specversion\":\"1.0\",\"id\":\"8f14e45f-ceea-467f-a0e6-1f3b0a7c2d91\","                    \
    "\"source\":\"/shop/eu-west/checkout\",\"type\":\"order.created\","                            \
    "\"subject\":\"order/100234\",\"time\":\"2024-05-14T09:21:37.412Z\","                          \
    "\"datacontenttype\":\"application/json\",\"data\":{\"order_id\":100234,\"amount\":"
#define EVENT_TAIL                                                                                 \
    ",\"currency\":\"EUR\",\"items\":3,\"customer\":{\"id\":\"c-5521\",\"tier\":\"gold\","         \
    "\"country\":\"DE\",\"email\":\"anna.schmidt@example.com\"},\"channel\":\"web\","              \
    "\"coupon\":null}}"
static const char EVENT_MATCH[] = EVENT_HEAD "149.9" EVENT_TAIL;
static const char EVENT_MISS[] = EVENT_HEAD "42.5" EVENT_TAIL;

static const char PATTERN_ONE[] =
    "{\"type\":[\"order.created\"],\"source\":[{\"prefix\":\"/shop\"}],"
    "\"data\":{\"amount\":[{\"numeric\":[\">\",100]}]}}";

/* The config of rows 3 and 5: the transform of the issue, alone and behind
 * the pattern of row 1, and the filter of row 4 as a rule. The target is
 * never opened by a rule VM. */
static const char CONFIG_SRC[] =
    "set \"orders\" { }\n"
    "rule \"vip\" {\n"
    "  set = \"orders\",\n"
    "  transform = function(e) e.data.vip = true; return e end,\n"
    "  target = target.file { path = \"/dev/null\" },\n"
    "}\n"
    "rule \"vip_matched\" {\n"
    "  set = \"orders\",\n"
    "  match = [[{\"type\":[\"order.created\"],\"source\":[{\"prefix\":\"/shop\"}],"
    "\"data\":{\"amount\":[{\"numeric\":[\">\",100]}]}}]],\n"
    "  transform = function(e) e.data.vip = true; return e end,\n"
    "  target = target.file { path = \"/dev/null\" },\n"
    "}\n"
    "rule \"big\" {\n"
    "  set = \"orders\",\n"
    "  filter = function(e) return e.data.amount > 100 end,\n"
    "  target = target.file { path = \"/dev/null\" },\n"
    "}\n";

/* The Lua functions of rows 4 and of the notes. */
static const char FILTER_SRC[] = "return function(e) return e.data.amount > 100 end";
static const char FIVE_SRC[] = "return function(e)\n"
                               "  local d = e.data\n"
                               "  local c = d.customer\n"
                               "  return e.type == 'order.created' and d.amount > 100 and\n"
                               "         d.currency == 'EUR' and c.tier == 'gold' and\n"
                               "         e.subject ~= nil\n"
                               "end";
static const char TRUE_SRC[] = "return function(e) return true end";

/* ---- small helpers ------------------------------------------------------ */

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* CPU time of this thread: the rates are per core even when other
 * processes take the CPU away from us for a while. */
static double cpu_s(void)
{
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static int env_int(const char *name, int def, int lo, int hi, int *out, sl_error *err)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return sl_error_set(err, SL_EINVAL, "%s=%s: expected an integer in %d..%d", name, s, lo,
                            hi);
    *out = (int)v;
    return 0;
}

typedef struct event {
    const char *json;
    size_t len;
} event;

/* ---- the lazy proxy (for the comparison of rows 4 only) -------------------
 *
 * A full userdata holding a token of the event's JSON text: the root object
 * or a container inside it. __index scans the container with the core/base/json.h
 * iterator on every access (no cache): scalars come back as Lua values (JSON
 * null as sluice.null), objects and arrays as new proxies. It is read-only
 * and points into the caller's buffer, so a product version would also need
 * copy-on-write for transforms and a way to invalidate proxies a script kept
 * after the event's buffer went away; neither is needed to time reads. */

typedef struct proxy {
    const char *p; /* the container's text, brackets included */
    size_t len;
    sl_json_type type; /* SL_JSON_OBJECT or SL_JSON_ARRAY */
} proxy;

/* Upvalues of __index and __len: the proxy metatable, sluice.null. */
#define UV_MT lua_upvalueindex(1)
#define UV_NULL lua_upvalueindex(2)

static void proxy_push_number(lua_State *L, const sl_json_tok *v)
{
    if ((v->flags & SL_JSON_INTEGER) && v->len <= 18) {
        /* At most 18 digits: fits an int64 without overflow checks. */
        const char *s = v->p, *e = v->p + v->len;
        bool neg = *s == '-';
        int64_t n = 0;
        for (s += neg; s < e; s++)
            n = n * 10 + (*s - '0');
        lua_pushinteger(L, neg ? -n : n);
        return;
    }
    char buf[64];
    if (v->len >= sizeof buf) {
        lua_pushnumber(L, 0); /* not in this benchmark's events */
        return;
    }
    memcpy(buf, v->p, v->len);
    buf[v->len] = '\0';
    if (v->flags & SL_JSON_INTEGER) {
        errno = 0;
        long long n = strtoll(buf, NULL, 10);
        if (!errno) {
            lua_pushinteger(L, (lua_Integer)n);
            return;
        }
    }
    lua_pushnumber(L, strtod(buf, NULL));
}

static void proxy_push(lua_State *L, const sl_json_tok *v)
{
    switch (v->type) {
    case SL_JSON_NULL:
        lua_pushvalue(L, UV_NULL);
        break;
    case SL_JSON_FALSE:
    case SL_JSON_TRUE:
        lua_pushboolean(L, v->type == SL_JSON_TRUE);
        break;
    case SL_JSON_NUMBER:
        proxy_push_number(L, v);
        break;
    case SL_JSON_STRING:
        if (!(v->flags & SL_JSON_ESCAPED)) {
            lua_pushlstring(L, v->p + 1, v->len - 2);
        } else {
            luaL_Buffer b;
            size_t n = 0;
            char *w = luaL_buffinitsize(L, &b, v->len - 2);
            sl_json_unescape(v, w, v->len - 2, &n);
            luaL_pushresultsize(&b, n);
        }
        break;
    case SL_JSON_OBJECT:
    case SL_JSON_ARRAY: {
        proxy *c = lua_newuserdatauv(L, sizeof *c, 0);
        *c = (proxy){v->p, v->len, v->type};
        lua_pushvalue(L, UV_MT);
        lua_setmetatable(L, -2);
        break;
    }
    default:
        lua_pushnil(L);
    }
}

/* Whether the key token (a validated string) decodes to [k, k + klen). */
static bool key_equals(const sl_json_tok *key, const char *k, size_t klen)
{
    if (!(key->flags & SL_JSON_ESCAPED))
        return key->len - 2 == klen && memcmp(key->p + 1, k, klen) == 0;
    char tmp[64];
    size_t pos = 0, off = 0, n;
    while ((n = sl_json_unescape_part(key, &pos, tmp, sizeof tmp)) > 0) {
        if (off + n > klen || memcmp(tmp, k + off, n) != 0)
            return false;
        off += n;
    }
    return off == klen;
}

static int proxy_index(lua_State *L)
{
    const proxy *px = lua_touserdata(L, 1);
    sl_json_tok self = {.type = px->type, .p = px->p, .len = px->len}, key, val;
    sl_json_iter it;
    sl_json_iter_init(&it, &self);
    if (px->type == SL_JSON_OBJECT && lua_type(L, 2) == LUA_TSTRING) {
        size_t klen;
        const char *k = lua_tolstring(L, 2, &klen);
        while (sl_json_iter_member(&it, &key, &val))
            if (key_equals(&key, k, klen)) {
                proxy_push(L, &val);
                return 1;
            }
    } else if (px->type == SL_JSON_ARRAY && lua_isinteger(L, 2)) {
        lua_Integer want = lua_tointeger(L, 2);
        for (lua_Integer i = 1; want >= 1 && sl_json_iter_elem(&it, &val); i++)
            if (i == want) {
                proxy_push(L, &val);
                return 1;
            }
    }
    lua_pushnil(L);
    return 1;
}

static int proxy_len(lua_State *L)
{
    const proxy *px = lua_touserdata(L, 1);
    sl_json_tok self = {.type = px->type, .p = px->p, .len = px->len}, val;
    sl_json_iter it;
    lua_Integer n = 0;
    sl_json_iter_init(&it, &self);
    if (px->type == SL_JSON_ARRAY)
        while (sl_json_iter_elem(&it, &val))
            n++;
    lua_pushinteger(L, n);
    return 1;
}

/* Creates the proxy metatable in L (sandboxed, so sluice.null is fetched
 * through a sandboxed chunk). Returns its registry reference, or LUA_NOREF. */
static int proxy_setup(lua_State *L, sl_error *err)
{
    static const char get_null[] = "return sluice.null";
    if (sl_sandbox_load(L, get_null, sizeof get_null - 1, "=proxy", err) ||
        sl_sandbox_call(L, 0, 1, err))
        return LUA_NOREF;
    int null_idx = lua_gettop(L);
    lua_createtable(L, 0, 3);
    int mt = lua_gettop(L);
    lua_pushliteral(L, "rules_bench.proxy");
    lua_setfield(L, mt, "__name");
    lua_pushvalue(L, mt);
    lua_pushvalue(L, null_idx);
    lua_pushcclosure(L, proxy_index, 2);
    lua_setfield(L, mt, "__index");
    lua_pushvalue(L, mt);
    lua_pushvalue(L, null_idx);
    lua_pushcclosure(L, proxy_len, 2);
    lua_setfield(L, mt, "__len");
    int ref = luaL_ref(L, LUA_REGISTRYINDEX); /* pops mt */
    lua_pop(L, 1);                            /* null */
    return ref;
}

/* Validates the event (the iterator must only see validated text, and
 * sl_luajson_push validates too, so both sides pay for it) and pushes a
 * proxy of its root object. */
static int proxy_push_root(lua_State *L, int mt_ref, const event *e, sl_error *err)
{
    sl_json_tok tok;
    int rc = sl_json_validate(e->json, e->len, 128, &tok, err);
    if (rc)
        return rc;
    if (tok.type != SL_JSON_OBJECT)
        return sl_error_set(err, SL_EINVAL, "the event is not an object");
    proxy *px = lua_newuserdatauv(L, sizeof *px, 0);
    *px = (proxy){tok.p, tok.len, SL_JSON_OBJECT};
    lua_rawgeti(L, LUA_REGISTRYINDEX, mt_ref);
    lua_setmetatable(L, -2);
    return 0;
}

/* ---- the benchmark state and its operations ------------------------------ */

typedef struct bench {
    event match, miss;
    sl_evview pev; /* a parsed event, for rows 1a, 1b and 2 */
    sl_pattern *one;
    sl_pattern *set[RULESET_N];
    char *set_json[RULESET_N];
    sl_config *cfg;
    sl_rule_vm *vm;        /* events as proxies (the default) */
    sl_rule_vm *vm_tables; /* events as tables */
    size_t rule_vip, rule_vip_matched, rule_big;
    sl_rule_out out;
    lua_State *L; /* rows 4 and the notes: a sandbox of its own */
    int ref_filter, ref_five, ref_true, ref_mt;
    int enc_idx; /* stack slot of a decoded event, for the encode note */
    sl_buf enc;
    uint64_t sink; /* results are summed here so that nothing is skipped */
    /* Row 2b: the patterns of row 2 as one set. */
    sl_pattern_set *ruleset;
    sl_pattern_set_scratch *ruleset_scr;
    /* Rows 6: sets of the first 1, 10, 100, 1,000 patterns of scale_pat,
     * each with the events it is matched against (parsed once). */
    sl_pattern *scale_pat[SCALE_MAX];
    sl_pattern *type_pat[SCALE_MAX]; /* row 6f: {"type": ["t.<5k>"]} */
    struct scale {
        sl_pattern_set *set;
        sl_pattern_set_scratch *scr;
        sl_evview views[SCALE_EVENTS];
        char *texts[SCALE_EVENTS];
        size_t next;
    } scale[SCALE_SIZES];
    uint32_t scale_out[SCALE_MAX];
} bench;

static const size_t scale_n[SCALE_SIZES] = {1, 10, 100, 1000, 1000};

typedef int (*op_fn)(bench *B, const event *e, size_t n, sl_error *err);

static int op_jansson(bench *B, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        json_error_t je;
        json_t *j = json_loads(e->json, 0, &je);
        if (!j)
            return sl_error_set(err, SL_EPARSE, "jansson: %s", je.text);
        char *s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (!s)
            return sl_error_set(err, SL_ENOMEM, "jansson: json_dumps failed");
        B->sink += (unsigned char)s[1];
        free(s);
    }
    return 0;
}

static int op_jansson_load(bench *B, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        json_error_t je;
        json_t *j = json_loads(e->json, 0, &je);
        if (!j)
            return sl_error_set(err, SL_EPARSE, "jansson: %s", je.text);
        B->sink += json_object_size(j);
        json_decref(j);
    }
    return 0;
}

/* Rows 1a/1b: the pattern against an event parsed once (the goal's "on
 * parsed events"); row 1c pays the parse (with strict validation) too. */
static int op_match_one(bench *B, const event *e, size_t n, sl_error *err)
{
    int rc = sl_evview_parse(&B->pev, e->json, e->len, false, err);
    for (size_t i = 0; !rc && i < n; i++)
        B->sink += sl_pattern_match_event(B->one, &B->pev);
    return rc;
}

static int op_match_text(bench *B, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        bool m = false;
        int rc = sl_pattern_match(B->one, e->json, e->len, &m, err);
        if (rc)
            return rc;
        B->sink += m;
    }
    return 0;
}

/* Row 2: each event parsed once (as the rule runner does, without the
 * strict validation ingest already did), then all 100 patterns. */
static int op_ruleset(bench *B, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = sl_evview_parse(&B->pev, e->json, e->len, false, err);
        if (rc)
            return rc;
        for (size_t k = 0; k < RULESET_N; k++)
            B->sink += sl_pattern_match_event(B->set[k], &B->pev);
    }
    return 0;
}

/* Row 2b: the same, the 100 patterns matched as one set. */
static int op_ruleset_set(bench *B, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = sl_evview_parse(&B->pev, e->json, e->len, false, err);
        if (rc)
            return rc;
        B->sink += sl_pattern_set_match(B->ruleset, &B->pev, B->ruleset_scr, B->scale_out);
    }
    return 0;
}

/* Rows 6: the matcher alone, events already parsed, taken in turn. */
static int op_scale(bench *B, size_t which, size_t n)
{
    struct scale *S = &B->scale[which];
    for (size_t i = 0; i < n; i++) {
        const sl_evview *v = &S->views[S->next++ % SCALE_EVENTS];
        B->sink += sl_pattern_set_match(S->set, v, S->scr, B->scale_out);
    }
    return 0;
}

static int op_scale1(bench *B, const event *e, size_t n, sl_error *err)
{
    (void)e, (void)err;
    return op_scale(B, 0, n);
}

static int op_scale10(bench *B, const event *e, size_t n, sl_error *err)
{
    (void)e, (void)err;
    return op_scale(B, 1, n);
}

static int op_scale100(bench *B, const event *e, size_t n, sl_error *err)
{
    (void)e, (void)err;
    return op_scale(B, 2, n);
}

static int op_scale1000(bench *B, const event *e, size_t n, sl_error *err)
{
    (void)e, (void)err;
    return op_scale(B, 3, n);
}

static int op_scale_types(bench *B, const event *e, size_t n, sl_error *err)
{
    (void)e, (void)err;
    return op_scale(B, 4, n);
}

static int eval_rule(bench *B, sl_rule_vm *vm, size_t rule, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        sl_rule_outcome oc;
        sl_rule_out_reset(&B->out);
        int rc = sl_rule_eval(vm, rule, e->json, e->len, NULL, &B->out, &oc, err);
        if (rc)
            return rc;
        if (oc != SL_RULE_MATCHED)
            return sl_error_set(err, SL_EINVAL, "rule %zu: outcome %d, expected a match", rule,
                                (int)oc);
        B->sink += B->out.data.len;
    }
    return 0;
}

static int op_transform(bench *B, const event *e, size_t n, sl_error *err)
{
    return eval_rule(B, B->vm, B->rule_vip, e, n, err);
}

static int op_transform_tables(bench *B, const event *e, size_t n, sl_error *err)
{
    return eval_rule(B, B->vm_tables, B->rule_vip, e, n, err);
}

static int op_transform_matched(bench *B, const event *e, size_t n, sl_error *err)
{
    return eval_rule(B, B->vm, B->rule_vip_matched, e, n, err);
}

static int op_transform_matched_tables(bench *B, const event *e, size_t n, sl_error *err)
{
    return eval_rule(B, B->vm_tables, B->rule_vip_matched, e, n, err);
}

/* Rows 5: the filter of row 4a as a rule (the event passes and is added to
 * the output as it is). */
static int op_filter_rule(bench *B, const event *e, size_t n, sl_error *err)
{
    return eval_rule(B, B->vm, B->rule_big, e, n, err);
}

static int op_filter_rule_tables(bench *B, const event *e, size_t n, sl_error *err)
{
    return eval_rule(B, B->vm_tables, B->rule_big, e, n, err);
}

/* Calls the function ref with the event as a table (sl_luajson_push), the
 * way rules/rule.c calls a filter. */
static int lua_table_call(bench *B, int ref, const event *e, size_t n, sl_error *err)
{
    lua_State *L = B->L;
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        int rc = sl_luajson_push(L, e->json, e->len, err);
        if (rc) {
            lua_pop(L, 1);
            return rc;
        }
        if ((rc = sl_sandbox_call(L, 1, 1, err)))
            return rc;
        B->sink += (uint64_t)lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    return 0;
}

/* The same call with a lazy proxy of the event as the argument. */
static int lua_proxy_call(bench *B, int ref, const event *e, size_t n, sl_error *err)
{
    lua_State *L = B->L;
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        int rc = proxy_push_root(L, B->ref_mt, e, err);
        if (rc) {
            lua_pop(L, 1);
            return rc;
        }
        if ((rc = sl_sandbox_call(L, 1, 1, err)))
            return rc;
        B->sink += (uint64_t)lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    return 0;
}

static int op_filter_table(bench *B, const event *e, size_t n, sl_error *err)
{
    return lua_table_call(B, B->ref_filter, e, n, err);
}

static int op_filter_proxy(bench *B, const event *e, size_t n, sl_error *err)
{
    return lua_proxy_call(B, B->ref_filter, e, n, err);
}

static int op_five_table(bench *B, const event *e, size_t n, sl_error *err)
{
    return lua_table_call(B, B->ref_five, e, n, err);
}

static int op_five_proxy(bench *B, const event *e, size_t n, sl_error *err)
{
    return lua_proxy_call(B, B->ref_five, e, n, err);
}

/* ---- the parts, for the notes --------------------------------------------- */

static int op_validate(bench *B, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        sl_json_tok tok;
        int rc = sl_json_validate(e->json, e->len, SL_JSON_DEPTH_LIMIT, &tok, err);
        if (rc)
            return rc;
        B->sink += tok.len;
    }
    return 0;
}

static int op_push(bench *B, const event *e, size_t n, sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = sl_luajson_push(B->L, e->json, e->len, err);
        if (rc)
            return rc;
        lua_pop(B->L, 1);
    }
    return 0;
}

static int op_call_empty(bench *B, const event *e, size_t n, sl_error *err)
{
    (void)e;
    lua_State *L = B->L;
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, B->ref_true);
        lua_pushnil(L);
        int rc = sl_sandbox_call(L, 1, 1, err);
        if (rc)
            return rc;
        B->sink += (uint64_t)lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    return 0;
}

static int op_encode(bench *B, const event *e, size_t n, sl_error *err)
{
    (void)e;
    for (size_t i = 0; i < n; i++) {
        B->enc.len = 0;
        int rc = sl_luajson_encode(B->L, B->enc_idx, &B->enc, err);
        if (rc)
            return rc;
        B->sink += B->enc.len;
    }
    return 0;
}

/* ---- timing --------------------------------------------------------------- */

typedef struct sample {
    double v[MAX_REPS];
    int n;
} sample;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double sample_median(const sample *s)
{
    double v[MAX_REPS];
    memcpy(v, s->v, sizeof v);
    qsort(v, (size_t)s->n, sizeof *v, cmp_double);
    return s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
}

static double sample_min(const sample *s)
{
    double m = s->v[0];
    for (int i = 1; i < s->n; i++)
        m = s->v[i] < m ? s->v[i] : m;
    return m;
}

static double sample_max(const sample *s)
{
    double m = s->v[0];
    for (int i = 1; i < s->n; i++)
        m = s->v[i] > m ? s->v[i] : m;
    return m;
}

/* The lowest share of wall time the thread was on a CPU, over all timed
 * runs (a low share means a busy machine: the rates use CPU time). */
static double min_cpu_share = 1.0;

/* Runs fn in chunks of CHUNK operations for at least secs of wall time;
 * *ops_s gets the operations per second of thread CPU time. */
static int run_for(bench *B, op_fn fn, const event *e, double secs, double *ops_s, sl_error *err)
{
    size_t total = 0;
    double t0 = now_s(), c0 = cpu_s(), t;
    do {
        int rc = fn(B, e, CHUNK, err);
        if (rc)
            return rc;
        total += CHUNK;
        t = now_s();
    } while (t - t0 < secs);
    double cpu = cpu_s() - c0;
    if (secs > WARMUP_S && cpu / (t - t0) < min_cpu_share)
        min_cpu_share = cpu / (t - t0);
    *ops_s = (double)total / cpu;
    return 0;
}

typedef struct row {
    const char *id;   /* key in the last line; NULL = not there */
    const char *name; /* the figure */
    const char *unit; /* what one operation is */
    unsigned group;   /* for SLUICE_BENCH_ROWS */
    int batch;        /* rows of one batch are timed in turns, with one reference */
    op_fn sl;
    bool miss;            /* runs on EVENT_MISS (else EVENT_MATCH) */
    double goal;          /* absolute operations/s; 0 = none */
    op_fn ref_fn;         /* the batch's reference (NULL: jansson parse+serialize) */
    const char *ref_name; /* its name, with ref_fn */
    double goal_ratio;    /* sluice / reference at least this; 0 = none */
    sample s, ref;
} row;

typedef struct part {
    const char *name;
    unsigned group;
    op_fn fn;
    sample s; /* operations/s */
} part;

enum {
    G_MATCH = 1,
    G_RULESET = 2,
    G_TRANSFORM = 4,
    G_PROXY = 8,
    G_DIAG = 16,
    G_FILTER = 32,
    G_SCALE = 64
};

/* The rows r[0..n) of one batch and the reference: a warm-up of each side,
 * then reps rounds in which every side runs once, the order rotating from
 * round to round so that no side always follows the same one. The
 * reference's samples are given to every row of the batch. */
static int measure_batch(bench *B, row *r, size_t n, int reps, double secs, sl_error *err)
{
    const event *e = r[0].miss ? &B->miss : &B->match;
    op_fn ref = r[0].ref_fn ? r[0].ref_fn : op_jansson;
    double v;
    int rc;
    for (size_t i = 0; i <= n; i++)
        if ((rc = run_for(B, i < n ? r[i].sl : ref, e, WARMUP_S, &v, err)))
            return rc;
    for (int k = 0; k < reps; k++) {
        for (size_t j = 0; j <= n; j++) {
            size_t i = (j + (size_t)k) % (n + 1); /* i == n: the reference */
            if ((rc = run_for(B, i < n ? r[i].sl : ref, e, secs, &v, err)))
                return rc;
            for (size_t q = 0; q < n; q++) {
                sample *s = i < n ? (q == i ? &r[q].s : NULL) : &r[q].ref;
                if (s)
                    s->v[s->n++] = v;
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "  %-60s %10.0f /s   ref %10.0f /s\n", r[i].name, sample_median(&r[i].s),
                sample_median(&r[i].ref));
    return 0;
}

static int measure_part(bench *B, part *p, int reps, double secs, sl_error *err)
{
    double v;
    int rc = run_for(B, p->fn, &B->match, WARMUP_S, &v, err);
    for (int k = 0; !rc && k < reps; k++)
        if (!(rc = run_for(B, p->fn, &B->match, secs, &v, err)))
            p->s.v[p->s.n++] = v;
    return rc;
}

/* Median over the rounds of a[k] / b[k]: the two rows ran in the same
 * rounds, so the ratio of each round is a paired comparison. */
static double paired_ratio(const row *a, const row *b)
{
    sample q = {.n = a->s.n < b->s.n ? a->s.n : b->s.n};
    for (int k = 0; k < q.n; k++)
        q.v[k] = b->s.v[k] > 0 ? a->s.v[k] / b->s.v[k] : 0;
    return q.n ? sample_median(&q) : 0;
}

/* ---- setup and checks ------------------------------------------------------ */

/* The rule set of row 2: ten kinds of pattern, ten of each, as a real rule
 * set of one event source would have them; RULESET_MATCHES of them match
 * EVENT_MATCH. */
static int ruleset_json(int i, char *out, size_t size)
{
    static const char *const types[10] = {
        "order.shipped",   "order.refunded", "payment.failed", "user.signup",    "cart.abandoned",
        "order.cancelled", "invoice.paid",   "stock.low",      "order.returned", "order.created"};
    static const char *const prefixes[10] = {"/billing",   "/crm",  "/shop/us-",
                                             "/warehouse", "/auth", "/shop/ap-",
                                             "/search",    "/mail", "/shop/eu-west/returns",
                                             "/shop/eu-"};
    static const char *const tiers[10] = {"platinum", "silver",  "bronze", "staff", "gold",
                                          "trial",    "partner", "vip",    "basic", "premium"};
    static const char *const currencies[10] = {"USD", "GBP", "JPY", "CHF", "SEK",
                                               "NOK", "DKK", "PLN", "CZK", "HUF"};
    static const char *const channels[10] = {"APP",    "POS",   "Phone", "kiosk", "B2B",
                                             "market", "email", "fax",   "chat",  "Partner"};
    int j = i / 10;
    switch (i % 10) {
    case 0: /* j = 9 matches */
        return snprintf(out, size, "{\"type\":[\"%s\"]}", types[j]);
    case 1: /* j = 9 matches */
        return snprintf(out, size,
                        "{\"source\":[{\"prefix\":\"%s\"}],\"type\":[\"order.created\"]}",
                        prefixes[j]);
    case 2:
        return snprintf(out, size, "{\"data\":{\"amount\":[{\"numeric\":[\">=\",%d,\"<\",%d]}]}}",
                        1000 * (j + 1), 1000 * (j + 1) + 500);
    case 3:
        return snprintf(out, size,
                        "{\"type\":[{\"anything-but\":[\"order.created\",\"order.v%d\"]}],"
                        "\"source\":[{\"prefix\":\"/shop\"}]}",
                        j);
    case 4: /* j = 4 ("gold") matches */
        return snprintf(out, size, "{\"data\":{\"customer\":{\"tier\":[\"%s\"]}}}", tiers[j]);
    case 5:
        return snprintf(out, size,
                        "{\"data\":{\"currency\":[\"%s\"],\"amount\":[{\"numeric\":[\">\",%d]}]}}",
                        currencies[j], 10 * j);
    case 6:
        if (j % 2)
            return snprintf(out, size, "{\"data\":{\"refund_id%d\":[{\"exists\":true}]}}", j);
        return snprintf(out, size, "{\"subject\":[{\"wildcard\":\"invoice/*/%d\"}]}", j);
    case 7: /* j = 0 matches (DE is anything but US) */
        return snprintf(out, size,
                        "{\"data\":{\"customer\":{\"country\":[{\"anything-but\":[\"%s\"]}]}},"
                        "\"type\":[{\"prefix\":\"order.\"}]}",
                        j ? "DE" : "US");
    case 8:
        return snprintf(out, size, "{\"data\":{\"channel\":[{\"equals-ignore-case\":\"%s\"}]}}",
                        channels[j]);
    default: /* j = 5 matches */
        if (j == 5)
            return snprintf(
                out, size, "{\"data\":{\"customer\":{\"email\":[{\"suffix\":\"@example.com\"}]}}}");
        return snprintf(out, size,
                        "{\"data\":{\"customer\":{\"email\":[{\"suffix\":\"@corp%d.test\"}]}}}", j);
    }
}

static int compile(const char *json, sl_pattern **out, sl_error *err);
static int check(bool ok, const char *what, sl_error *err);

/* Rows 6: pattern i of the mix (ten kinds would be as good; these
 * are the operators a rule set of one source uses most): exact type,
 * source prefix, numeric = on data.n, exists + exact, anything-but +
 * exact. Each matches exactly the event scale_event_json(i) writes. */
static int scale_json(size_t i, char *out, size_t size)
{
    switch (i % 5) {
    case 0:
        return snprintf(out, size, "{\"type\":[\"t.%zu\"]}", i);
    case 1:
        return snprintf(out, size, "{\"source\":[{\"prefix\":\"/src/%zu/\"}]}", i);
    case 2:
        return snprintf(out, size, "{\"data\":{\"n\":[{\"numeric\":[\"=\",%zu]}]}}", i);
    case 3:
        return snprintf(out, size, "{\"type\":[\"e.%zu\"],\"data\":{\"flag\":[{\"exists\":true}]}}",
                        i);
    default:
        return snprintf(out, size,
                        "{\"type\":[\"a.%zu\"],\"source\":[{\"anything-but\":\"/nowhere\"}]}", i);
    }
}

/* The event of pattern i: a CloudEvent like EVENT_MATCH whose type, source
 * and data.n only pattern i accepts. */
static int scale_event_json(size_t i, char *out, size_t size)
{
    char type[32], src[32];
    long n = -1;
    snprintf(type, sizeof type, "x.%zu", i);
    snprintf(src, sizeof src, "/shop/eu-west/checkout");
    switch (i % 5) {
    case 0:
        snprintf(type, sizeof type, "t.%zu", i);
        break;
    case 1:
        snprintf(src, sizeof src, "/src/%zu/checkout", i);
        break;
    case 2:
        n = (long)i;
        break;
    case 3:
        snprintf(type, sizeof type, "e.%zu", i);
        break;
    default:
        snprintf(type, sizeof type, "a.%zu", i);
        break;
    }
    return snprintf(out, size,
                    "{\"specversion\":\"1.0\",\"id\":\"8f14e45f-ceea-467f-a0e6-1f3b0a7c2d91\","
                    "\"source\":\"%s\",\"type\":\"%s\",\"subject\":\"order/100234\","
                    "\"time\":\"2024-05-14T09:21:37.412Z\",\"datacontenttype\":"
                    "\"application/json\",\"data\":{\"order_id\":100234,\"n\":%ld,"
                    "\"amount\":149.9,\"currency\":\"EUR\",\"customer\":{\"id\":\"c-5521\","
                    "\"tier\":\"gold\"}%s}}",
                    src, type, n, i % 5 == 3 ? ",\"flag\":true" : "");
}

/* Rows 6 and 2b: the sets, their events, and a check that each event
 * matches exactly its own pattern (and the set agrees with one by one). */
static int setup_sets(bench *B, sl_error *err)
{
    int rc;
    char buf[1024];
    for (size_t i = 0; i < SCALE_MAX; i++) {
        scale_json(i, buf, sizeof buf);
        if ((rc = compile(buf, &B->scale_pat[i], err)))
            return rc;
    }
    for (size_t i = 0; i < SCALE_MAX; i++) {
        snprintf(buf, sizeof buf, "{\"type\":[\"t.%zu\"]}", 5 * i);
        if ((rc = compile(buf, &B->type_pat[i], err)))
            return rc;
    }
    for (size_t k = 0; k < SCALE_SIZES; k++) {
        struct scale *S = &B->scale[k];
        size_t n = scale_n[k];
        bool types = k == SCALE_SIZES - 1; /* row 6f */
        sl_pattern **pats = types ? B->type_pat : B->scale_pat;
        if ((rc = sl_pattern_set_build((const sl_pattern *const *)pats, n, &S->set, err)))
            return rc;
        if (!(S->scr = sl_pattern_set_scratch_new(S->set)))
            return SL_ENOMEM;
        for (size_t j = 0; j < SCALE_EVENTS; j++) {
            /* The events spread over the set's patterns, one match each,
             * the five kinds in turn. */
            size_t target = j * n / SCALE_EVENTS;
            if (!types && target - target % 5 + j % 5 < n)
                target = target - target % 5 + j % 5;
            /* row 6f: pattern k is the type of mix pattern 5k */
            size_t len = (size_t)scale_event_json(types ? 5 * target : target, buf, sizeof buf);
            sl_evview *v = &S->views[j];
            sl_evview_init(v);
            /* The view points into its text: keep a copy per view. */
            char *text = malloc(len + 1);
            if (!text)
                return SL_ENOMEM;
            memcpy(text, buf, len + 1);
            S->texts[j] = text;
            if ((rc = sl_evview_parse(v, text, len, true, err)))
                return rc;
            size_t m = sl_pattern_set_match(S->set, v, S->scr, B->scale_out);
            if ((rc = check(m == 1 && B->scale_out[0] == target,
                            "each event of rows 6 matches exactly its own pattern", err)))
                return rc;
            for (size_t p = 0; p < n; p++)
                if ((rc = check(sl_pattern_match_event(pats[p], v) == (p == target),
                                "rows 6: the set agrees with one-by-one matching", err)))
                    return rc;
        }
    }
    if ((rc = sl_pattern_set_build((const sl_pattern *const *)B->set, RULESET_N, &B->ruleset, err)))
        return rc;
    if (!(B->ruleset_scr = sl_pattern_set_scratch_new(B->ruleset)))
        return SL_ENOMEM;
    return 0;
}

static int compile(const char *json, sl_pattern **out, sl_error *err)
{
    int rc = sl_pattern_compile(json, strlen(json), out, err);
    if (rc && err) {
        char msg[SL_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        sl_error_set(err, rc, "pattern %.200s: %s", json, msg);
    }
    return rc;
}

/* Loads a Lua function returned by src into L and references it. */
static int load_fn(lua_State *L, const char *src, int *ref, sl_error *err)
{
    int rc = sl_sandbox_load(L, src, strlen(src), "=rules_bench", err);
    if (!rc)
        rc = sl_sandbox_call(L, 0, 1, err);
    if (rc)
        return rc;
    *ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

/* Writes CONFIG_SRC to a temporary file, loads it with sl_config_load and
 * removes the file again (the config keeps its source). */
static int load_config(bench *B, sl_error *err)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/rules_bench.XXXXXX.lua", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemps(path, 4);
    if (fd < 0)
        return sl_error_errno(err, errno, "create %s", path);
    size_t len = sizeof CONFIG_SRC - 1;
    ssize_t w = write(fd, CONFIG_SRC, len);
    close(fd);
    if (w != (ssize_t)len) {
        unlink(path);
        return sl_error_errno(err, w < 0 ? errno : EIO, "write %s", path);
    }
    sl_buf diag = SL_BUF_INIT;
    int rc = sl_config_load(path, &B->cfg, &diag);
    unlink(path);
    if (rc) {
        sl_error_set(err, rc, "config: %.*s", (int)(diag.len < 400 ? diag.len : 400),
                     diag.data ? (const char *)diag.data : "");
        sl_buf_free(&diag);
        return rc;
    }
    sl_buf_free(&diag);
    const sl_rule_config *a = sl_config_rule(B->cfg, "vip"),
                         *b = sl_config_rule(B->cfg, "vip_matched"),
                         *c = sl_config_rule(B->cfg, "big");
    if (!a || !b || !c)
        return sl_error_set(err, SL_EINVAL, "config: rules missing");
    B->rule_vip = (size_t)(a - B->cfg->rules);
    B->rule_vip_matched = (size_t)(b - B->cfg->rules);
    B->rule_big = (size_t)(c - B->cfg->rules);
    sl_ruleset rs;
    sl_config_ruleset(B->cfg, &rs);
    if ((rc = sl_rule_vm_new(&rs, &B->vm, err)) || (rc = sl_rule_vm_new(&rs, &B->vm_tables, err)))
        return rc;
    sl_rule_vm_use_tables(B->vm, false); /* whatever SLUICE_LUA_TABLES says */
    sl_rule_vm_use_tables(B->vm_tables, true);
    return 0;
}

static int check(bool ok, const char *what, sl_error *err)
{
    return ok ? 0 : sl_error_set(err, SL_EINVAL, "self-check failed: %s", what);
}

/* Compiles and loads everything, and checks once, untimed, that every
 * operation gives the expected answer. */
static int setup(bench *B, int *ruleset_hits, sl_error *err)
{
    B->match = (event){EVENT_MATCH, sizeof EVENT_MATCH - 1};
    B->miss = (event){EVENT_MISS, sizeof EVENT_MISS - 1};
    B->ref_filter = B->ref_five = B->ref_true = B->ref_mt = LUA_NOREF;
    int rc;
    if ((rc = compile(PATTERN_ONE, &B->one, err)))
        return rc;
    for (int i = 0; i < RULESET_N; i++) {
        char buf[512];
        ruleset_json(i, buf, sizeof buf);
        if (!(B->set_json[i] = strdup(buf)))
            return SL_ENOMEM;
        if ((rc = compile(buf, &B->set[i], err)))
            return rc;
    }
    if ((rc = load_config(B, err)) || (rc = sl_sandbox_new(NULL, &B->L, err)))
        return rc;
    if ((rc = load_fn(B->L, FILTER_SRC, &B->ref_filter, err)) ||
        (rc = load_fn(B->L, FIVE_SRC, &B->ref_five, err)) ||
        (rc = load_fn(B->L, TRUE_SRC, &B->ref_true, err)))
        return rc;
    if ((B->ref_mt = proxy_setup(B->L, err)) == LUA_NOREF)
        return err && err->code ? err->code : SL_ENOMEM;

    sl_evview_init(&B->pev);
    /* The answers. */
    bool m = false;
    if ((rc = sl_pattern_match(B->one, B->match.json, B->match.len, &m, err)) ||
        (rc = check(m, "the single pattern matches EVENT_MATCH", err)) ||
        (rc = sl_pattern_match(B->one, B->miss.json, B->miss.len, &m, err)) ||
        (rc = check(!m, "the single pattern does not match EVENT_MISS", err)))
        return rc;
    *ruleset_hits = 0;
    for (int i = 0; i < RULESET_N; i++) {
        if ((rc = sl_pattern_match(B->set[i], B->match.json, B->match.len, &m, err)))
            return rc;
        *ruleset_hits += m;
    }
    if ((rc = setup_sets(B, err)))
        return rc;
    if ((rc = sl_evview_parse(&B->pev, B->match.json, B->match.len, true, err)) ||
        (rc = check(sl_pattern_set_match(B->ruleset, &B->pev, B->ruleset_scr, B->scale_out) ==
                        (size_t)*ruleset_hits,
                    "the set of row 2b matches as many patterns as row 2", err)))
        return rc;
    uint64_t s0 = B->sink;
    op_fn rule_ops[4] = {op_transform, op_transform_tables, op_transform_matched,
                         op_transform_matched_tables};
    for (int k = 0; k < 4; k++) {
        if ((rc = rule_ops[k](B, &B->match, 1, err)))
            return rc;
        if ((rc = check(B->out.n == 1 &&
                            memmem(B->out.data.data, B->out.data.len, "\"vip\":true", 10),
                        "the transform adds \"vip\":true", err)))
            return rc;
    }
    op_fn filter_ops[2] = {op_filter_rule, op_filter_rule_tables};
    for (int k = 0; k < 2; k++) {
        sl_rule_outcome oc;
        sl_rule_out_reset(&B->out);
        if ((rc = filter_ops[k](B, &B->match, 1, err)) ||
            (rc = check(B->out.n == 1 && B->out.data.len == B->match.len,
                        "the filter rule passes EVENT_MATCH as it is", err)) ||
            (rc = sl_rule_eval(k ? B->vm_tables : B->vm, B->rule_big, B->miss.json, B->miss.len,
                               NULL, &B->out, &oc, err)) ||
            (rc = check(oc == SL_RULE_FILTERED, "the filter rule drops EVENT_MISS", err)))
            return rc;
    }
    op_fn lua_ops[4] = {op_filter_table, op_filter_proxy, op_five_table, op_five_proxy};
    for (int k = 0; k < 4; k++) {
        s0 = B->sink;
        if ((rc = lua_ops[k](B, &B->match, 1, err)) ||
            (rc = check(B->sink == s0 + 1, "the Lua functions return true on EVENT_MATCH", err)) ||
            (rc = lua_ops[k](B, &B->miss, 1, err)) ||
            (rc = check(B->sink == s0 + 1, "the Lua functions return false on EVENT_MISS", err)))
            return rc;
    }
    /* A decoded event stays on the stack for the encode note. */
    if ((rc = sl_luajson_push(B->L, B->match.json, B->match.len, err)))
        return rc;
    B->enc_idx = lua_gettop(B->L);
    return 0;
}

static void teardown(bench *B)
{
    sl_evview_free(&B->pev);
    sl_pattern_free(B->one);
    for (int i = 0; i < RULESET_N; i++) {
        sl_pattern_free(B->set[i]);
        free(B->set_json[i]);
    }
    sl_pattern_set_scratch_free(B->ruleset_scr);
    sl_pattern_set_free(B->ruleset);
    for (size_t k = 0; k < SCALE_SIZES; k++) {
        sl_pattern_set_scratch_free(B->scale[k].scr);
        sl_pattern_set_free(B->scale[k].set);
        for (size_t j = 0; j < SCALE_EVENTS; j++) {
            sl_evview_free(&B->scale[k].views[j]);
            free(B->scale[k].texts[j]);
        }
    }
    for (size_t i = 0; i < SCALE_MAX; i++) {
        sl_pattern_free(B->scale_pat[i]);
        sl_pattern_free(B->type_pat[i]);
    }
    sl_rule_out_free(&B->out);
    sl_rule_vm_free(B->vm);
    sl_rule_vm_free(B->vm_tables);
    sl_config_free(B->cfg);
    sl_sandbox_close(B->L);
    sl_buf_free(&B->enc);
}

/* ---- the report -------------------------------------------------------------- */

static void fmt_rate(char *out, size_t size, double v)
{
    if (v >= 1e6)
        snprintf(out, size, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(out, size, "%.0fk", v / 1e3);
    else
        snprintf(out, size, "%.0f", v);
}

static void fmt_noise(char *out, size_t size, const sample *s)
{
    char a[32], b[32];
    fmt_rate(a, sizeof a, sample_min(s));
    fmt_rate(b, sizeof b, sample_max(s));
    snprintf(out, size, "%s..%s", a, b);
}

static void machine_line(int reps, int run_ms)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char *v = strchr(line, ':');
                if (v) {
                    v += 1 + (v[1] == ' ');
                    snprintf(model, sizeof model, "%.*s", (int)strcspn(v, "\n"), v);
                }
                break;
            }
        fclose(f);
    }
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0)
        load[0] = load[1] = load[2] = 0;
    printf("rules_bench: patterns and Lua rules on one core vs jansson parse+serialize of the "
           "same event, measured in the same run\n\n");
    printf("- machine: %s, nproc %ld, load average %.2f %.2f %.2f\n", model,
           sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
    printf("- libraries: %s, jansson %s\n", LUA_RELEASE, JANSSON_VERSION);
    printf("- event: a compact CloudEvent of %zu bytes (%zu for the non-matching variant), "
           "nested data object\n",
           sizeof EVENT_MATCH - 1, sizeof EVENT_MISS - 1);
    printf("- figures: one thread, operations per second of its CPU time; median of %d runs of "
           "%d ms per side, sides taking turns; noise = min..max of the runs\n",
           reps, run_ms);
    printf("- the thread was on a CPU for at least %.0f%% of the wall time of every timed run\n\n",
           100 * min_cpu_share);
}

/* Reads a proxy / table ratio. */
static const char *verdict(double r)
{
    if (r >= 1.1)
        return "the proxy is clearly faster";
    if (r <= 1 / 1.1)
        return "tables are clearly faster";
    return "within 10%, no clear winner";
}

/* The median over the rounds of sluice / reference (both ran in every
 * round of the batch, so each round's ratio is a paired comparison). */
static double row_ratio(const row *r)
{
    sample q = {.n = r->s.n < r->ref.n ? r->s.n : r->ref.n};
    for (int k = 0; k < q.n; k++)
        q.v[k] = r->ref.v[k] > 0 ? r->s.v[k] / r->ref.v[k] : 0;
    return q.n ? sample_median(&q) : 0;
}

static void print_report(const row *rows, size_t nrows, const part *parts, size_t nparts,
                         int ruleset_hits, int reps, int run_ms, size_t set_bytes)
{
    machine_line(reps, run_ms);
    printf("| figure | sluice | same-run reference (jansson json_loads+json_dumps, events/s) | "
           "ratio | goal | met? | noise sluice | noise ref |\n");
    printf("|---|---:|---:|---:|---:|---|---|---|\n");
    int missed = 0;
    double med[32] = {0};
    for (size_t i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (!r->s.n)
            continue;
        double sl = sample_median(&r->s), ref = sample_median(&r->ref);
        med[i] = sl;
        char a[32], b[96], goal[48] = "-", met[8] = "-", ns[48], nr[48];
        fmt_rate(a, sizeof a, sl);
        fmt_rate(b, sizeof b, ref);
        fmt_noise(ns, sizeof ns, &r->s);
        fmt_noise(nr, sizeof nr, &r->ref);
        double ratio = r->ref_fn ? row_ratio(r) : ref > 0 ? sl / ref : 0;
        int ok = SL_BENCH_NO_GOAL;
        if (r->goal > 0) {
            char g[32];
            fmt_rate(g, sizeof g, r->goal);
            snprintf(goal, sizeof goal, ">= %s/s", g);
            ok = sl >= r->goal;
        } else if (r->goal_ratio > 0) {
            snprintf(goal, sizeof goal, ">= %.2fx", r->goal_ratio);
            ok = ratio >= r->goal_ratio;
        }
        if (ok != SL_BENCH_NO_GOAL) {
            snprintf(met, sizeof met, "%s", ok ? "yes" : "MISS");
            missed += !ok;
        }
        if (r->ref_fn) /* the table's reference column names jansson: say which */
            snprintf(b + strlen(b), sizeof b - strlen(b), " (%s)", r->ref_name);
        printf("| %s | %s %s/s | %s | %.2f | %s | %s | %s | %s |\n", r->name, a, r->unit, b, ratio,
               goal, met, ns, nr);
        char key[64], unit[32], tgoal[48] = "";
        snprintf(key, sizeof key, "rules.%s", r->id);
        snprintf(unit, sizeof unit, "%s/s", r->unit);
        if (r->goal > 0)
            snprintf(tgoal, sizeof tgoal, "%s per core", goal);
        else if (r->goal_ratio > 0)
            snprintf(tgoal, sizeof tgoal, "%s (paired)", goal);
        sl_bench_tsv_row(key, r->name, unit, sl,
                         r->ref_fn ? r->ref_name : "jansson parse+serialize", ref,
                         r->ref_fn || ref > 0 ? ratio : NAN, tgoal, ok);
        if (r->sl == op_ruleset) {
            fmt_rate(a, sizeof a, sl * RULESET_N);
            printf("| 2 … the same, counted per pattern | %s pattern evaluations/s | - | - | - | - "
                   "| | |\n",
                   a);
        }
    }

    if (set_bytes) {
        double mib = (double)set_bytes / (1024.0 * 1024.0);
        bool ok = mib < 16;
        missed += !ok;
        printf(
            "| 6e sl_pattern_set_bytes, 1,000 patterns of rows 6 | %.2f MiB | - | - | < 16 MiB | "
            "%s | | |\n",
            mib, ok ? "yes" : "MISS");
        sl_bench_tsv_row("rules.set1000_mib", "6e sl_pattern_set_bytes, 1,000 patterns of rows 6",
                         "MiB", mib, "-", NAN, NAN, "< 16 MiB", ok);
    }

    printf("\nnotes\n\n");
    printf("- Rows 1a/1b match a ~%zu-byte event parsed once (sl_evview_parse: a flat "
           "array of decoded values; sl_pattern_match_event\n"
           "  never allocates). Row 1c pays strict validation + parse + match per call "
           "(sl_pattern_match, what POST /v1/patterns/test does).\n"
           "  Row 2 parses each event once without validation (the rule runner's path: "
           "stored events were validated at ingest), then runs 100 patterns.\n",
           sizeof EVENT_MATCH - 1);
    printf("- Row 2: %d of the %d patterns match the event; events/s counts the event once per "
           "pass over all %d patterns.\n",
           ruleset_hits, RULESET_N, RULESET_N);
    printf("- Row 2b: the same parse and the same 100 patterns built into one sl_pattern_set "
           "(rules/pattern_set.h): the event's leaves are\n"
           "  walked once, the patterns whose anchors hit are verified with "
           "sl_pattern_match_event (docs/config.md, \"Many rules, one match\").\n");
    printf("- Rows 6: sl_pattern_set_match on %d events parsed beforehand (few enough to stay "
           "in the L1 cache, as the event the rule runner\n"
           "  has just parsed is), taken in turn; the "
           "sets hold the first 1, 10, 100, 1,000 patterns of\n"
           "  the issue's mix (exact type, source prefix, numeric = on data.n, exists + exact, "
           "anything-but + exact) and each event\n"
           "  matches exactly one pattern of its set (checked at setup, with one-by-one "
           "matching). 6b-6d ran in turns with 6a's operation as\n"
           "  their reference; their ratio is the median of the per-round ratios. 6e: what the "
           "set of 6d holds (sl_pattern_set_bytes).\n"
           "  6f: 1,000 patterns {\"type\": [\"t.N\"]}, the kind of 6a's one: the cost of the "
           "number of patterns alone. 6a's pattern needs no check after\n"
           "  its anchor hits and names one top-level field; the mix of 6b-6d also names source "
           "and data.n (the walk goes through data's members)\n"
           "  and two events in five need a check (exists + exact, anything-but + exact): "
           "that, not the count, is what 6d pays over 6a.\n",
           SCALE_EVENTS);
    printf("- Rows 3: sl_rule_eval() on a rule VM from sl_config_load(), payload appended to an "
           "sl_rule_out. Proxy (3a/3b, the default):\n"
           "  the event parsed once (sl_evview_parse, no validation), a lazy copy-on-write "
           "proxy to the transform (rules/luaproxy.h),\n"
           "  the result encoded with untouched members copied as text. Tables (3c/3d): "
           "sl_luajson_push, transform, sl_luajson_encode.\n"
           "  Both in the sandbox (budget hook armed per call). 3b/3d add the row-1 pattern in "
           "front, as a rule with match does.\n"
           "- Rows 5: the filter of 4a as a rule (no transform: a passing event is added as it "
           "is), proxy against tables.\n");
    printf("- Rows 4: the same sandboxed function, called with sl_sandbox_call, gets the event "
           "either as a table (sl_luajson_push: the\n"
           "  whole event decoded into tables) or as a lazy proxy (written in this file: "
           "sl_json_validate once, then every field access\n"
           "  scans its container's text). 4c/4d read type, data.amount, data.currency, "
           "data.customer.tier and subject.\n");
    const row *ft = NULL, *fp = NULL, *tt = NULL, *tp = NULL;
    for (size_t i = 0; i < nrows; i++) {
        if (rows[i].sl == op_filter_table)
            ft = &rows[i];
        else if (rows[i].sl == op_filter_proxy)
            fp = &rows[i];
        else if (rows[i].sl == op_five_table)
            tt = &rows[i];
        else if (rows[i].sl == op_five_proxy)
            tp = &rows[i];
    }
    const row *t3a = NULL, *t3c = NULL, *f5a = NULL, *f5b = NULL;
    for (size_t i = 0; i < nrows; i++) {
        if (rows[i].sl == op_transform)
            t3a = &rows[i];
        else if (rows[i].sl == op_transform_tables)
            t3c = &rows[i];
        else if (rows[i].sl == op_filter_rule)
            f5a = &rows[i];
        else if (rows[i].sl == op_filter_rule_tables)
            f5b = &rows[i];
    }
    double pt = 0, pr = 0;
    if (t3a && t3c && t3a->s.n && t3c->s.n)
        pt = paired_ratio(t3a, t3c);
    if (f5a && f5b && f5a->s.n && f5b->s.n)
        pr = paired_ratio(f5a, f5b);
    if (pt > 0 || pr > 0)
        printf("- sl_rule_eval, proxy / tables (median of the per-round ratios): %.2fx for the "
               "transform (3a/3c: %s), %.2fx for the filter\n"
               "  rule (5a/5b: %s).\n",
               pt, verdict(pt), pr, verdict(pr));
    double pf = 0, p5 = 0;
    if (ft && fp && ft->s.n && fp->s.n) {
        pf = paired_ratio(fp, ft);
        p5 = paired_ratio(tp, tt);
        printf("- Rows 4, this file's read-only proxy / table (median of the per-round ratios; "
               "4a/4b and 4c/4d ran in turns): %.2fx for the\n"
               "  one-field filter, %.2fx for the five-field read (above 1: the proxy is faster). "
               "Filter: %s; five fields: %s.\n"
               "  This proxy pays for sl_json_validate as sl_luajson_push does and rescans text on "
               "every access; the product's proxy\n"
               "  (rows 3 and 5) reads the parse of the event instead.\n",
               pf, p5, verdict(pf), verdict(p5));
    }
    bool any_part = false;
    for (size_t i = 0; i < nparts; i++)
        any_part |= parts[i].s.n > 0;
    if (any_part) {
        printf("- Where the time goes (median ns per operation on the %zu-byte event, same run):\n",
               sizeof EVENT_MATCH - 1);
        for (size_t i = 0; i < nparts; i++)
            if (parts[i].s.n)
                printf("  - %-62s %8.0f ns\n", parts[i].name, 1e9 / sample_median(&parts[i].s));
    }

    printf("\nrules_bench:");
    for (size_t i = 0; i < nrows; i++)
        if (rows[i].id && rows[i].s.n)
            printf(" %s=%.0f", rows[i].id, med[i]);
    if (pf > 0)
        printf(" proxy_vs_table_filter=%.2f proxy_vs_table_five=%.2f", pf, p5);
    if (pt > 0)
        printf(" rule_proxy_vs_tables_transform=%.2f", pt);
    if (pr > 0)
        printf(" rule_proxy_vs_tables_filter=%.2f", pr);
    printf(" goals_missed=%d\n", missed);
}

static int parse_groups(unsigned *out, sl_error *err)
{
    static const struct {
        const char *name;
        unsigned bit;
    } groups[] = {{"match", G_MATCH},   {"ruleset", G_RULESET}, {"transform", G_TRANSFORM},
                  {"filter", G_FILTER}, {"proxy", G_PROXY},     {"diag", G_DIAG},
                  {"scale", G_SCALE}};
    const char *s = getenv("SLUICE_BENCH_ROWS");
    if (!s || !*s) {
        *out = G_MATCH | G_RULESET | G_TRANSFORM | G_FILTER | G_PROXY | G_DIAG | G_SCALE;
        return 0;
    }
    *out = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        size_t i = 0;
        for (; i < sizeof groups / sizeof *groups; i++)
            if (strlen(groups[i].name) == len && strncmp(s, groups[i].name, len) == 0)
                break;
        if (i == sizeof groups / sizeof *groups)
            return sl_error_set(err, SL_EINVAL,
                                "SLUICE_BENCH_ROWS: unknown group \"%.*s\" "
                                "(match, ruleset, transform, filter, proxy, diag, scale)",
                                (int)len, s);
        *out |= groups[i].bit;
        s += len + (s[len] == ',');
    }
    return 0;
}

int main(void)
{
    static bench B;
    static row rows[] = {
        {.id = "match_mps",
         .batch = 1,
         .name = "1a single pattern, 3 fields, matching event",
         .unit = "matches",
         .group = G_MATCH,
         .sl = op_match_one,
         .goal = 5e6},
        {.id = "nomatch_mps",
         .batch = 2,
         .name = "1b single pattern, 3 fields, non-matching event",
         .unit = "matches",
         .group = G_MATCH,
         .sl = op_match_one,
         .miss = true,
         .goal = 5e6},
        {.id = "match_text_mps",
         .batch = 7,
         .name = "1c the same from the JSON text (sl_pattern_match: validate + parse + match)",
         .unit = "matches",
         .group = G_MATCH,
         .sl = op_match_text},
        {.id = "ruleset_eps",
         .batch = 3,
         .name = "2 rule set of 100 patterns against one event",
         .unit = "events",
         .group = G_RULESET,
         .sl = op_ruleset},
        {.id = "ruleset_set_eps",
         .batch = 3,
         .name = "2b the same 100 patterns as one set (sl_pattern_set_match)",
         .unit = "events",
         .group = G_RULESET,
         .sl = op_ruleset_set},
        {.id = "transform_eps",
         .batch = 4,
         .name = "3a Lua transform `e.data.vip = true` (sl_rule_eval, proxy)",
         .unit = "events",
         .group = G_TRANSFORM,
         .sl = op_transform,
         .goal = 5e5},
        {.id = "transform_tables_eps",
         .batch = 4,
         .name = "3c the same, event as tables (SLUICE_LUA_TABLES=1)",
         .unit = "events",
         .group = G_TRANSFORM,
         .sl = op_transform_tables},
        {.id = "match_transform_eps",
         .batch = 4,
         .name = "3b pattern of row 1 + the transform (sl_rule_eval, proxy)",
         .unit = "events",
         .group = G_TRANSFORM,
         .sl = op_transform_matched},
        {.id = "match_transform_tables_eps",
         .batch = 4,
         .name = "3d the same, event as tables",
         .unit = "events",
         .group = G_TRANSFORM,
         .sl = op_transform_matched_tables},
        {.id = "filter_table_eps",
         .batch = 5,
         .name = "4a filter `e.data.amount > 100`, table (sl_luajson_push)",
         .unit = "events",
         .group = G_PROXY,
         .sl = op_filter_table},
        {.id = "filter_proxy_eps",
         .batch = 5,
         .name = "4b filter `e.data.amount > 100`, lazy proxy",
         .unit = "events",
         .group = G_PROXY,
         .sl = op_filter_proxy},
        {.id = "five_table_eps",
         .batch = 6,
         .name = "4c read 5 fields, table (sl_luajson_push)",
         .unit = "events",
         .group = G_PROXY,
         .sl = op_five_table},
        {.id = "five_proxy_eps",
         .batch = 6,
         .name = "4d read 5 fields, lazy proxy",
         .unit = "events",
         .group = G_PROXY,
         .sl = op_five_proxy},
        {.id = "filter_rule_eps",
         .batch = 8,
         .name = "5a filter `e.data.amount > 100` as a rule (sl_rule_eval, proxy)",
         .unit = "events",
         .group = G_FILTER,
         .sl = op_filter_rule},
        {.id = "filter_rule_tables_eps",
         .batch = 8,
         .name = "5b the same, event as tables",
         .unit = "events",
         .group = G_FILTER,
         .sl = op_filter_rule_tables},
        {.id = "set1_eps",
         .batch = 9,
         .name = "6a matcher alone, 1 pattern (sl_pattern_set_match, event parsed)",
         .unit = "events",
         .group = G_SCALE,
         .sl = op_scale1},
        {.id = "set10_eps",
         .batch = 10,
         .name = "6b matcher alone, 10 patterns (ref: 6a, 1 pattern)",
         .unit = "events",
         .group = G_SCALE,
         .sl = op_scale10,
         .ref_fn = op_scale1,
         .ref_name = "matcher alone, 1 pattern"},
        {.id = "set100_eps",
         .batch = 10,
         .name = "6c matcher alone, 100 patterns (ref: 6a, 1 pattern)",
         .unit = "events",
         .group = G_SCALE,
         .sl = op_scale100,
         .ref_fn = op_scale1,
         .ref_name = "matcher alone, 1 pattern"},
        {.id = "set1000_eps",
         .batch = 10,
         .name = "6d matcher alone, 1,000 patterns (ref: 6a, 1 pattern)",
         .unit = "events",
         .group = G_SCALE,
         .sl = op_scale1000,
         .ref_fn = op_scale1,
         .ref_name = "matcher alone, 1 pattern",
         .goal_ratio = 0.5},
        {.id = "set1000_types_eps",
         .batch = 10,
         .name = "6f matcher alone, 1,000 exact type patterns (ref: 6a, 1 pattern)",
         .unit = "events",
         .group = G_SCALE,
         .sl = op_scale_types,
         .ref_fn = op_scale1,
         .ref_name = "matcher alone, 1 pattern"},
    };
    static part parts[] = {
        {.name = "sl_json_validate (strict validation, part of every match)",
         .group = G_DIAG,
         .fn = op_validate},
        {.name = "sl_luajson_push + pop (event -> Lua tables)", .group = G_DIAG, .fn = op_push},
        {.name = "sl_sandbox_call of `function(e) return true end`",
         .group = G_DIAG,
         .fn = op_call_empty},
        {.name = "sl_luajson_encode of the decoded event (tables -> JSON)",
         .group = G_DIAG,
         .fn = op_encode},
        {.name = "jansson json_loads + json_decref (the reference's parse half)",
         .group = G_DIAG,
         .fn = op_jansson_load},
    };
    const size_t nrows = sizeof rows / sizeof *rows, nparts = sizeof parts / sizeof *parts;
    sl_error err = {0};
    unsigned groups;
    int reps, run_ms, hits = 0, rc;
    if ((rc = parse_groups(&groups, &err)) ||
        (rc = env_int("SLUICE_BENCH_REPS", 5, 1, MAX_REPS, &reps, &err)) ||
        (rc = env_int("SLUICE_BENCH_RUN_MS", 120, 10, 2000, &run_ms, &err)) ||
        (rc = setup(&B, &hits, &err)))
        goto fail;
    double secs = run_ms / 1000.0;
    for (size_t i = 0, j; i < nrows; i = j) {
        for (j = i + 1; j < nrows && rows[j].batch == rows[i].batch; j++)
            ;
        if ((rows[i].group & groups) && (rc = measure_batch(&B, &rows[i], j - i, reps, secs, &err)))
            goto fail;
    }
    for (size_t i = 0; i < nparts; i++)
        if ((parts[i].group & groups) && (rc = measure_part(&B, &parts[i], reps, secs, &err)))
            goto fail;
    print_report(rows, nrows, parts, nparts, hits, reps, run_ms,
                 (groups & G_SCALE) ? sl_pattern_set_bytes(B.scale[3].set) : 0);
    fflush(stdout);
    teardown(&B);
    return 0;
fail:
    fprintf(stderr, "rules_bench: %s%s%s\n", sl_strerror(rc), err.msg[0] ? ": " : "", err.msg);
    teardown(&B);
    return 1;
}
