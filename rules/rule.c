/*
 * rules/rule.c — one rule applied to events inside a worker's Lua state.
 *
 * Each event is parsed once (sl_evview, without validation: events
 * come from the log, validated at ingest) for the rule's pattern and, by
 * default, handed to the Lua functions as a proxy over that parse
 * (rules/luaproxy.h); transform results are encoded before the proxies'
 * generation moves on. sl_rule_vm_use_tables() switches to the older path
 * that decodes the event into tables for every call (rules/luajson.h).
 */
#include "rules/rule.h"

#include "core/base/json.h"
#include "rules/lua_embed.h"
#include "rules/luajson.h"
#include "rules/luaproxy.h"
#include "rules/sandbox.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* transform_batch with proxies: a parsed event of the batch keeps at most
 * this much room between batches. */
#define BATCH_KEEP_VALUES 4096
#define BATCH_KEEP_BYTES (64u << 10)

typedef struct rule_refs {
    int filter, transform, batch; /* registry references or LUA_NOREF */
} rule_refs;

struct sl_rule_vm {
    sl_ruleset rs; /* the view it was built from (a copy) */
    lua_State *L;
    sl_luaproxy *px; /* the state's event proxies */
    bool tables;     /* events reach Lua as tables, not proxies */
    sl_evview pev;   /* reused for every event */
    /* transform_batch with proxies: one parsed event per event that passed
     * (allocated on first need, reused), and the index of that event. */
    sl_evview **bev;
    size_t *bidx;
    size_t bcap;
    sl_buf enc;      /* encoding buffer, reused */
    rule_refs *refs; /* one per rule config: rs.rules, then rs.overrides (sl_ruleset_rule_at) */
    int *parse;      /* one per source i of rs: its parse function, or LUA_NOREF */
};

static int ref_field(lua_State *L, int body, const char *name)
{
    lua_getfield(L, body, name);
    if (lua_type(L, -1) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return LUA_NOREF;
    }
    return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* The functions of override o (number i) of the rule whose body is at body:
 * each from the override's table when it gives it, else from the base's;
 * an override giving transform or transform_batch replaces both (as
 * server/config.c merges them). */
static void override_refs(lua_State *L, int body, const sl_rule_config *o, rule_refs *refs)
{
    lua_getfield(L, body, "lanes");
    if (lua_istable(L, -1))
        lua_getfield(L, -1, o->lane);
    else
        lua_pushnil(L);
    int own = lua_gettop(L);
    if (!lua_istable(L, own)) { /* the checked config says it is there: keep the base's */
        lua_pop(L, 2);
        refs->filter = ref_field(L, body, "filter");
        refs->transform = ref_field(L, body, "transform");
        refs->batch = ref_field(L, body, "transform_batch");
        return;
    }
    lua_getfield(L, own, "filter");
    bool own_filter = !lua_isnil(L, -1);
    lua_getfield(L, own, "transform");
    lua_getfield(L, own, "transform_batch");
    bool own_transform = !lua_isnil(L, -1) || !lua_isnil(L, -2);
    lua_pop(L, 3);
    refs->filter = ref_field(L, own_filter ? own : body, "filter");
    refs->transform = ref_field(L, own_transform ? own : body, "transform");
    refs->batch = ref_field(L, own_transform ? own : body, "transform_batch");
    lua_pop(L, 2);
}

int sl_rule_vm_new(const sl_ruleset *rs, sl_rule_vm **out, sl_error *err)
{
    sl_rule_vm *vm = calloc(1, sizeof *vm);
    size_t nconf = rs->nrules + rs->noverrides;
    if (!vm || !(vm->refs = calloc(nconf + 1, sizeof *vm->refs)) ||
        !(vm->parse = calloc(rs->nsources + 1, sizeof *vm->parse))) {
        if (vm)
            free(vm->refs);
        free(vm);
        return sl_error_set(err, SL_ENOMEM, "rule worker: out of memory");
    }
    vm->rs = *rs;
    sl_evview_init(&vm->pev);
    for (size_t i = 0; i < nconf; i++)
        vm->refs[i] = (rule_refs){LUA_NOREF, LUA_NOREF, LUA_NOREF};
    for (size_t i = 0; i < rs->nsources; i++)
        vm->parse[i] = LUA_NOREF;
    sl_sandbox_options so = {.mem_bytes = rs->lua_memory,
                             .instructions = rs->lua_instructions,
                             .privileged_src = sl_lua_src_prelude,
                             .privileged_len = sl_lua_src_prelude_len,
                             .privileged_name = "=prelude"};
    char chunkname[4096];
    snprintf(chunkname, sizeof chunkname, "@%s", rs->path);
    const char *tables = getenv("SLUICE_LUA_TABLES");
    vm->tables = tables && strcmp(tables, "1") == 0;
    int rc = sl_sandbox_new(&so, &vm->L, err);
    /* Before the config runs, so that its functions see the proxy-aware
     * type, next, rawget… even when they keep them in locals. */
    if (!rc)
        rc = sl_luaproxy_install(vm->L, &vm->px, err);
    if (!rc)
        rc = sl_sandbox_load(vm->L, rs->source, rs->source_len, chunkname, err);
    if (!rc)
        rc = sl_sandbox_call(vm->L, 0, 0, err);
    if (rc) {
        sl_rule_vm_free(vm);
        return rc;
    }
    /* The declarations come out in file order, like the checked config's;
     * rules are found by name all the same. */
    lua_State *L = vm->L;
    lua_getglobal(L, "__sluice_decls");
    lua_call(L, 0, 1);
    size_t nsource = 0; /* sources are found by their place among the sources */
    for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
        lua_geti(L, -1, i);
        lua_getfield(L, -1, "kind");
        lua_getfield(L, -2, "name");
        const char *kind = lua_tostring(L, -2), *name = lua_tostring(L, -1);
        if (kind && strcmp(kind, "source") == 0) {
            size_t si = nsource++;
            if (si < rs->nsources) {
                lua_getfield(L, -3, "body");
                if (lua_istable(L, -1))
                    vm->parse[si] = ref_field(L, lua_gettop(L), "parse");
                lua_pop(L, 1);
            }
        }
        for (size_t r = 0; name && kind && strcmp(kind, "rule") == 0 && r < rs->nrules; r++) {
            if (strcmp(rs->rules[r].name, name))
                continue;
            lua_getfield(L, -3, "body");
            int body = lua_gettop(L);
            vm->refs[r].filter = ref_field(L, body, "filter");
            vm->refs[r].transform = ref_field(L, body, "transform");
            vm->refs[r].batch = ref_field(L, body, "transform_batch");
            for (size_t o = 0; o < rs->noverrides; o++)
                if (rs->overrides[o].base == r)
                    override_refs(L, body, &rs->overrides[o], &vm->refs[rs->nrules + o]);
            lua_pop(L, 1);
        }
        lua_pop(L, 3);
    }
    lua_pop(L, 1);
    *out = vm;
    return 0;
}

void sl_rule_vm_free(sl_rule_vm *vm)
{
    if (!vm)
        return;
    sl_sandbox_close(vm->L);
    sl_evview_free(&vm->pev);
    for (size_t i = 0; i < vm->bcap; i++) {
        if (vm->bev[i])
            sl_evview_free(vm->bev[i]);
        free(vm->bev[i]);
    }
    free(vm->bev);
    free(vm->bidx);
    sl_buf_free(&vm->enc);
    free(vm->refs);
    free(vm->parse);
    free(vm);
}

void sl_rule_vm_use_tables(sl_rule_vm *vm, bool tables)
{
    vm->tables = tables;
}

void sl_rule_out_reset(sl_rule_out *o)
{
    o->data.len = 0;
    o->n = 0;
}

void sl_rule_out_free(sl_rule_out *o)
{
    sl_buf_free(&o->data);
    free(o->ends);
    memset(o, 0, sizeof *o);
}

const char *sl_rule_out_get(const sl_rule_out *o, size_t i, size_t *len)
{
    size_t start = i ? o->ends[i - 1] : 0;
    *len = o->ends[i] - start;
    return (const char *)o->data.data + start;
}

/* Closes the payload that ends at data.len. */
static int out_close(sl_rule_out *o)
{
    if (o->n == o->cap && sl_grow(&o->ends, &o->cap, sizeof *o->ends, 16))
            return SL_ENOMEM;
    o->ends[o->n++] = o->data.len;
    return 0;
}

/* Adds one payload: the event JSON as is, or through the input transformer. */
static int out_add(const sl_rule_config *rc, const char *json, size_t len, const sl_input_ctx *ictx,
                   sl_rule_out *o, sl_error *err)
{
    int rc2 = rc->input ? sl_input_apply(rc->input, json, len, ictx, &o->data, err)
                        : sl_buf_append(&o->data, json, len);
    return rc2 ? rc2 : out_close(o);
}

/* Encodes the event table (or proxy) at idx and adds it. */
static int out_add_lua(sl_rule_vm *vm, const sl_rule_config *rc, int idx, const sl_input_ctx *ictx,
                       sl_rule_out *o, sl_error *err)
{
    sl_buf *tmp = &vm->enc;
    lua_State *L = vm->L;
    if (!lua_istable(L, idx) && !sl_luaproxy_kind(L, vm->px, idx))
        return sl_error_set(err, SL_EINVAL,
                            "rule \"%s\": transform returned a %s, not an event "
                            "table",
                            rc->name, luaL_typename(L, idx));
    tmp->len = 0;
    int r = sl_luajson_encode(L, idx, tmp, err);
    if (!r)
        r = out_add(rc, (const char *)tmp->data, tmp->len, ictx, o, err);
    if (tmp->cap > ((size_t)1 << 20)) /* keep the room of usual events only */
        sl_buf_free(tmp);
    return r;
}

/* Adds what a transform returned (at the top of the stack): an event, a
 * list of events, or nil. */
static int take_transformed_raw(sl_rule_vm *vm, const sl_rule_config *rc, const sl_input_ctx *ictx,
                                sl_rule_out *o, sl_error *err)
{
    lua_State *L = vm->L;
    int top = lua_gettop(L);
    if (lua_isnil(L, top))
        return 0;
    int kind = sl_luaproxy_kind(L, vm->px, top);
    if (kind == SL_JSON_OBJECT)
        return out_add_lua(vm, rc, top, ictx, o, err);
    if (kind == SL_JSON_ARRAY) {
        /* An array of the event, returned as a list of events. */
        int r = sl_luaproxy_to_list(L, vm->px, top, err);
        if (r && err) {
            char msg[SL_ERROR_MAX];
            snprintf(msg, sizeof msg, "%s", err->msg);
            sl_error_set(err, r, "rule \"%s\": transform: %s", rc->name, msg);
        }
        if (r)
            return r;
    }
    if (!lua_istable(L, top))
        return sl_error_set(err, SL_EINVAL,
                            "rule \"%s\": transform returned a %s; want an "
                            "event, a list of events or nil",
                            rc->name, luaL_typename(L, top));
    int r = 0;
    lua_rawgeti(L, top, 1);
    bool list = !lua_isnil(L, -1);
    lua_pop(L, 1);
    /* A list built by the script may be empty ({} is an empty list here:
     * an event always has members). */
    lua_pushnil(L);
    bool empty = lua_next(L, top) == 0;
    if (!empty)
        lua_pop(L, 2);
    if (list) {
        for (lua_Integer i = 1, n = luaL_len(L, top); !r && i <= n; i++) {
            lua_rawgeti(L, top, i);
            r = out_add_lua(vm, rc, lua_gettop(L), ictx, o, err);
            lua_pop(L, 1);
        }
    } else if (!empty) {
        r = out_add_lua(vm, rc, top, ictx, o, err);
    }
    return r;
}

/* What take_transformed() hands to its protected call. */
typedef struct take_args {
    sl_rule_vm *vm;
    const sl_rule_config *rc;
    const sl_input_ctx *ictx;
    sl_rule_out *o;
    sl_error *err;
    int rc_out;
} take_args;

static int take_protected(lua_State *L)
{
    take_args *a = lua_touserdata(L, 1);
    lua_settop(L, 2); /* the value on top, as take_transformed_raw() wants it */
    a->rc_out = take_transformed_raw(a->vm, a->rc, a->ictx, a->o, a->err);
    return 0;
}

/* take_transformed_raw() on the value at the top of the stack, inside the
 * sandbox's protected call: the returned tables may carry metamethods
 * (__len, __index…) written by the script, which may raise or loop. Leaves
 * the stack as it was; on error the payloads added are taken back. */
static int take_transformed(sl_rule_vm *vm, const sl_rule_config *rc, const sl_input_ctx *ictx,
                            sl_rule_out *o, sl_error *err)
{
    lua_State *L = vm->L;
    /* An event proxy (what most transforms return) is encoded without
     * metamethods, Lua errors or Lua code (rules/luajson.h): it needs no
     * protected call, which was a sixth of the cost of taking it. */
    if (lua_type(L, -1) == LUA_TUSERDATA && sl_luaproxy_kind(L, vm->px, -1) == SL_JSON_OBJECT)
        return out_add_lua(vm, rc, lua_gettop(L), ictx, o, err);
    size_t n0 = o->n, len0 = o->data.len;
    take_args a = {vm, rc, ictx, o, err, 0};
    if (!lua_checkstack(L, 3))
        return sl_error_set(err, SL_ENOMEM, "rule \"%s\": Lua stack", rc->name);
    lua_pushcfunction(L, take_protected);
    lua_pushlightuserdata(L, &a);
    lua_pushvalue(L, -3);
    sl_error e = {0};
    int r = sl_sandbox_call(L, 2, 0, &e);
    if (r) {
        o->n = n0;
        o->data.len = len0;
        return sl_error_set(err, r, "rule \"%s\": transform result: %s", rc->name, e.msg);
    }
    return a.rc_out;
}

static int push_event(sl_rule_vm *vm, const sl_rule_config *rc, const char *event, size_t len,
                      sl_error *err)
{
    int r = sl_luajson_push(vm->L, event, len, err);
    if (r && err)
        sl_error_set(err, r, "rule \"%s\": the event is not JSON: %s", rc->name, err->msg);
    return r;
}

/* Calls the function behind ref with the value at the top as its argument
 * (consumed); leaves one result. */
static int call_ref(sl_rule_vm *vm, const sl_rule_config *rc, int ref, const char *fn,
                    sl_error *err)
{
    lua_State *L = vm->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_insert(L, -2);
    int r = sl_sandbox_call(L, 1, 1, err);
    if (r && err) {
        char msg[SL_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        sl_error_set(err, r, "rule \"%s\": %s: %s", rc->name, fn, msg);
    }
    return r;
}

/* Calls the function behind ref with proxies of evs[0..n) (one proxy, or a
 * list when list); leaves one result. */
static int call_proxy(sl_rule_vm *vm, const sl_rule_config *rc, int ref, const char *fn,
                      const sl_evview *const *evs, size_t n, bool list, sl_error *err)
{
    lua_State *L = vm->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    int r = sl_luaproxy_call(L, vm->px, evs, n, list, err);
    if (r && err) {
        char msg[SL_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        sl_error_set(err, r, "rule \"%s\": %s: %s", rc->name, fn, msg);
    }
    return r;
}

/* Match and filter; with proxies, the event is parsed into pev (for the
 * calls that follow too). Returns 0 with *outcome NO_MATCH, FILTERED or
 * MATCHED (passed). */
static int admit(sl_rule_vm *vm, const sl_rule_config *rc, const rule_refs *refs, const char *event,
                 size_t len, bool matched, sl_evview *pev, sl_rule_outcome *outcome,
                 sl_error *err)
{
    bool lua =
        refs->filter != LUA_NOREF || refs->transform != LUA_NOREF || refs->batch != LUA_NOREF;
    const sl_pattern *pattern = matched ? NULL : rc->pattern;
    if (pattern || (lua && !vm->tables)) {
        /* Events reach rules from the log, where ingest validated them. */
        int r = sl_evview_parse(pev, event, len, false, err);
        if (r && err) {
            char msg[SL_ERROR_MAX];
            snprintf(msg, sizeof msg, "%s", err->msg);
            sl_error_set(err, r, "rule \"%s\": %s", rc->name, msg);
        }
        if (r)
            return r;
        if (pattern && !sl_pattern_match_event(pattern, pev)) {
            *outcome = SL_RULE_NO_MATCH;
            return 0;
        }
    }
    if (refs->filter != LUA_NOREF) {
        int r;
        if (vm->tables) {
            r = push_event(vm, rc, event, len, err);
            if (!r)
                r = call_ref(vm, rc, refs->filter, "filter", err);
        } else {
            const sl_evview *one = pev;
            r = call_proxy(vm, rc, refs->filter, "filter", &one, 1, false, err);
        }
        if (r)
            return r;
        bool keep = lua_toboolean(vm->L, -1);
        lua_pop(vm->L, 1);
        sl_luaproxy_release(vm->px);
        if (!keep) {
            *outcome = SL_RULE_FILTERED;
            return 0;
        }
    }
    *outcome = SL_RULE_MATCHED;
    return 0;
}

static int eval_one(sl_rule_vm *vm, size_t rule, const char *event, size_t len, bool matched,
                    const sl_input_ctx *ictx, sl_rule_out *out, sl_rule_outcome *outcome,
                    sl_error *err)
{
    const sl_rule_config *rc = sl_ruleset_rule_at(&vm->rs, rule);
    const rule_refs *refs = &vm->refs[rule];
    size_t n0 = out->n, len0 = out->data.len;
    sl_rule_outcome oc;
    int r = admit(vm, rc, refs, event, len, matched, &vm->pev, &oc, err);
    if (r || oc != SL_RULE_MATCHED) {
        if (!r)
            *outcome = oc;
        return r;
    }
    if (refs->transform != LUA_NOREF) {
        int top = lua_gettop(vm->L);
        if (vm->tables) {
            r = push_event(vm, rc, event, len, err);
            if (!r)
                r = call_ref(vm, rc, refs->transform, "transform", err);
        } else {
            const sl_evview *one = &vm->pev;
            r = call_proxy(vm, rc, refs->transform, "transform", &one, 1, false, err);
        }
        if (!r)
            r = take_transformed(vm, rc, ictx, out, err);
        lua_settop(vm->L, top);
        sl_luaproxy_release(vm->px);
    } else {
        r = out_add(rc, event, len, ictx, out, err);
    }
    if (r) {
        out->n = n0;
        out->data.len = len0;
        return r;
    }
    *outcome = out->n > n0 ? SL_RULE_MATCHED : SL_RULE_DROPPED;
    return 0;
}

int sl_rule_eval(sl_rule_vm *vm, size_t rule, const char *event, size_t len,
                 const sl_input_ctx *ictx, sl_rule_out *out, sl_rule_outcome *outcome,
                 sl_error *err)
{
    return eval_one(vm, rule, event, len, false, ictx, out, outcome, err);
}

int sl_rule_eval_matched(sl_rule_vm *vm, size_t rule, const char *event, size_t len,
                         const sl_input_ctx *ictx, sl_rule_out *out, sl_rule_outcome *outcome,
                         sl_error *err)
{
    return eval_one(vm, rule, event, len, true, ictx, out, outcome, err);
}

/* Room for n parsed events of a batch. */
static int batch_grow(sl_rule_vm *vm, size_t n)
{
    if (n <= vm->bcap)
        return 0;
    sl_evview **g = realloc(vm->bev, n * sizeof *g);
    if (!g)
        return SL_ENOMEM;
    vm->bev = g;
    size_t *gi = realloc(vm->bidx, n * sizeof *gi);
    if (!gi)
        return SL_ENOMEM;
    vm->bidx = gi;
    for (; vm->bcap < n; vm->bcap++) {
        if (!(vm->bev[vm->bcap] = malloc(sizeof **vm->bev)))
            return SL_ENOMEM;
        sl_evview_init(vm->bev[vm->bcap]);
    }
    return 0;
}

/* sl_rule_eval_batch with proxies: each event that passes keeps its own
 * parse, and transform_batch gets a list of proxies. */
static int eval_batch_proxies(sl_rule_vm *vm, const sl_rule_config *rc, const rule_refs *refs,
                              const char *const *events, const size_t *lens, size_t n,
                              const sl_input_ctx *ictx, sl_rule_out *out, size_t *passed,
                              sl_error *err)
{
    lua_State *L = vm->L;
    int top = lua_gettop(L);
    size_t np = 0;
    int r = 0;
    for (size_t i = 0; !r && i < n; i++) {
        if ((r = batch_grow(vm, np + 1))) {
            sl_error_set(err, r, "rule \"%s\": out of memory", rc->name);
            break;
        }
        sl_rule_outcome oc;
        r = admit(vm, rc, refs, events[i], lens[i], false, vm->bev[np], &oc, err);
        if (!r && oc == SL_RULE_MATCHED)
            vm->bidx[np++] = i;
    }
    if (!r && np && refs->batch != LUA_NOREF) {
        r = call_proxy(vm, rc, refs->batch, "transform_batch", (const sl_evview *const *)vm->bev,
                       np, true, err);
        if (!r)
            r = take_transformed(vm, rc, ictx, out, err);
    } else if (!r) {
        for (size_t i = 0; !r && i < np; i++)
            r = out_add(rc, events[vm->bidx[i]], lens[vm->bidx[i]], ictx, out, err);
    }
    lua_settop(L, top);
    sl_luaproxy_release(vm->px);
    /* Every slot would otherwise keep the room of the biggest event it ever
     * held: big ones give it back (small events fit the inline array). */
    for (size_t i = 0; i < np; i++)
        if (vm->bev[i]->cap > BATCH_KEEP_VALUES || vm->bev[i]->scratch_cap > BATCH_KEEP_BYTES)
            sl_evview_free(vm->bev[i]);
    if (!r)
        *passed = np;
    return r;
}

int sl_rule_eval_batch(sl_rule_vm *vm, size_t rule, const char *const *events, const size_t *lens,
                       size_t n, const sl_input_ctx *ictx, sl_rule_out *out, size_t *passed,
                       sl_error *err)
{
    const sl_rule_config *rc = sl_ruleset_rule_at(&vm->rs, rule);
    const rule_refs *refs = &vm->refs[rule];
    lua_State *L = vm->L;
    int top = lua_gettop(L);
    size_t n0 = out->n, len0 = out->data.len, np = 0;
    int r = 0;
    if (!lua_checkstack(L, 4))
        return sl_error_set(err, SL_ENOMEM, "rule \"%s\": Lua stack", rc->name);
    if (!vm->tables) {
        r = eval_batch_proxies(vm, rc, refs, events, lens, n, ictx, out, passed, err);
        if (r) {
            out->n = n0;
            out->data.len = len0;
        }
        return r;
    }
    lua_createtable(L, (int)(n < 1024 ? n : 1024), 0);
    int list = lua_gettop(L);
    for (size_t i = 0; !r && i < n; i++) {
        sl_rule_outcome oc;
        r = admit(vm, rc, refs, events[i], lens[i], false, &vm->pev, &oc, err);
        if (!r && oc == SL_RULE_MATCHED && !(r = push_event(vm, rc, events[i], lens[i], err)))
            lua_rawseti(L, list, (lua_Integer)++np);
    }
    if (!r && np && refs->batch != LUA_NOREF) {
        r = call_ref(vm, rc, refs->batch, "transform_batch", err);
        if (!r)
            r = take_transformed(vm, rc, ictx, out, err);
    } else if (!r && np) {
        for (size_t i = 1; !r && i <= np; i++) {
            lua_rawgeti(L, list, (lua_Integer)i);
            r = out_add_lua(vm, rc, lua_gettop(L), ictx, out, err);
            lua_pop(L, 1);
        }
    }
    lua_settop(L, top);
    if (r) {
        out->n = n0;
        out->data.len = len0;
        return r;
    }
    *passed = np;
    return 0;
}

/* ---- source.file's parse functions ------------------------------------------ */

bool sl_rule_vm_has_parse(const sl_rule_vm *vm, size_t source)
{
    return source < vm->rs.nsources && vm->parse[source] != LUA_NOREF;
}

/* The name of source i, for messages. */
static const char *source_name(const sl_rule_vm *vm, size_t i)
{
    return vm->rs.source_name ? vm->rs.source_name(vm->rs.source_ctx, i) : "?";
}

int sl_rule_vm_parse(sl_rule_vm *vm, size_t source, const char *line, size_t len, sl_buf *out,
                     sl_rule_parsed *kind, sl_error *err)
{
    if (!sl_rule_vm_has_parse(vm, source))
        return sl_error_set(err, SL_EINVAL, "source %zu has no parse function", source);
    lua_State *L = vm->L;
    int top = lua_gettop(L);
    size_t len0 = out->len;
    if (!lua_checkstack(L, 4))
        return sl_error_set(err, SL_ENOMEM, "source \"%s\": Lua stack", source_name(vm, source));
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->parse[source]);
    lua_pushlstring(L, line, len);
    sl_error e = {0};
    int r = sl_sandbox_call(L, 1, 1, &e);
    if (r)
        return sl_error_set(err, r, "source \"%s\": parse: %s", source_name(vm, source), e.msg);
    int t = lua_type(L, -1);
    if (t == LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
        *kind = SL_PARSED_SKIP;
    } else if (t == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        if ((r = sl_buf_append(out, s, n)))
            sl_error_set(err, r, "source \"%s\": parse: out of memory", source_name(vm, source));
        *kind = SL_PARSED_TEXT;
    } else if (t == LUA_TTABLE) {
        /* Raw reads only: the encoder too runs no metamethod. */
        lua_pushliteral(L, "specversion");
        bool event = lua_rawget(L, -2) != LUA_TNIL;
        lua_pop(L, 1);
        r = sl_luajson_encode(L, lua_gettop(L), out, &e);
        if (r)
            sl_error_set(err, r, "source \"%s\": parse returned a table that is not JSON: %s",
                         source_name(vm, source), e.msg);
        *kind = event ? SL_PARSED_EVENT : SL_PARSED_DATA;
    } else {
        r = sl_error_set(err, SL_EINVAL,
                         "source \"%s\": parse returned a %s; want nil, false, a string or a "
                         "table",
                         source_name(vm, source), luaL_typename(L, -1));
    }
    lua_settop(L, top);
    if (r)
        out->len = len0;
    return r;
}
