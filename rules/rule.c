/*
 * rules/rule.c — one rule applied to events inside a worker's Lua state.
 */
#include "rules/rule.h"

#include "rules/lua_embed.h"
#include "rules/luajson.h"
#include "rules/sandbox.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rule_refs {
    int filter, transform, batch; /* registry references or LUA_NOREF */
} rule_refs;

struct sl_rule_vm {
    const sl_config *cfg;
    lua_State *L;
    sl_pattern_event pev; /* reused for every event */
    rule_refs *refs; /* one per cfg->rules[i] */
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

int sl_rule_vm_new(const sl_config *cfg, sl_rule_vm **out, sl_error *err)
{
    sl_rule_vm *vm = calloc(1, sizeof *vm);
    if (!vm || !(vm->refs = calloc(cfg->nrules + 1, sizeof *vm->refs))) {
        free(vm);
        return sl_error_set(err, SL_ENOMEM, "rule worker: out of memory");
    }
    vm->cfg = cfg;
    sl_pattern_event_init(&vm->pev);
    for (size_t i = 0; i < cfg->nrules; i++)
        vm->refs[i] = (rule_refs){LUA_NOREF, LUA_NOREF, LUA_NOREF};
    sl_sandbox_options so = {.mem_bytes = cfg->lua_memory,
                             .instructions = cfg->lua_instructions,
                             .privileged_src = sl_lua_src_prelude,
                             .privileged_len = sl_lua_src_prelude_len,
                             .privileged_name = "=prelude"};
    char chunkname[4096];
    snprintf(chunkname, sizeof chunkname, "@%s", cfg->path);
    int rc = sl_sandbox_new(&so, &vm->L, err);
    if (!rc)
        rc = sl_sandbox_load(vm->L, cfg->source, cfg->source_len, chunkname, err);
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
    for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
        lua_geti(L, -1, i);
        lua_getfield(L, -1, "kind");
        lua_getfield(L, -2, "name");
        const char *kind = lua_tostring(L, -2), *name = lua_tostring(L, -1);
        for (size_t r = 0; name && strcmp(kind, "rule") == 0 && r < cfg->nrules; r++) {
            if (strcmp(cfg->rules[r].name, name))
                continue;
            lua_getfield(L, -3, "body");
            int body = lua_gettop(L);
            vm->refs[r].filter = ref_field(L, body, "filter");
            vm->refs[r].transform = ref_field(L, body, "transform");
            vm->refs[r].batch = ref_field(L, body, "transform_batch");
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
    sl_pattern_event_free(&vm->pev);
    free(vm->refs);
    free(vm);
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
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 16;
        size_t *g = realloc(o->ends, cap * sizeof *g);
        if (!g)
            return SL_ENOMEM;
        o->ends = g;
        o->cap = cap;
    }
    o->ends[o->n++] = o->data.len;
    return 0;
}

/* Adds one payload: the event JSON as is, or through the input transformer. */
static int out_add(const sl_rule_config *rc, const char *json, size_t len,
                   const sl_input_ctx *ictx, sl_rule_out *o, sl_error *err)
{
    int rc2 = rc->input ? sl_input_apply(rc->input, json, len, ictx, &o->data, err)
                        : sl_buf_append(&o->data, json, len);
    return rc2 ? rc2 : out_close(o);
}

/* Encodes the event table at idx and adds it. */
static int out_add_lua(sl_rule_vm *vm, const sl_rule_config *rc, int idx,
                       const sl_input_ctx *ictx, sl_rule_out *o, sl_buf *tmp, sl_error *err)
{
    lua_State *L = vm->L;
    if (!lua_istable(L, idx))
        return sl_error_set(err, SL_EINVAL, "rule \"%s\": transform returned a %s, not an event "
                                            "table", rc->name, luaL_typename(L, idx));
    tmp->len = 0;
    int r = sl_luajson_encode(L, idx, tmp, err);
    if (r)
        return r;
    return out_add(rc, (const char *)tmp->data, tmp->len, ictx, o, err);
}

/* Adds what a transform returned (at the top of the stack): an event, a
 * list of events, or nil. */
static int take_transformed(sl_rule_vm *vm, const sl_rule_config *rc, const sl_input_ctx *ictx,
                            sl_rule_out *o, sl_error *err)
{
    lua_State *L = vm->L;
    int top = lua_gettop(L);
    if (lua_isnil(L, top))
        return 0;
    if (!lua_istable(L, top))
        return sl_error_set(err, SL_EINVAL, "rule \"%s\": transform returned a %s; want an "
                                            "event, a list of events or nil", rc->name,
                            luaL_typename(L, top));
    sl_buf tmp = SL_BUF_INIT;
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
            r = out_add_lua(vm, rc, lua_gettop(L), ictx, o, &tmp, err);
            lua_pop(L, 1);
        }
    } else if (!empty) {
        r = out_add_lua(vm, rc, top, ictx, o, &tmp, err);
    }
    sl_buf_free(&tmp);
    return r;
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

/* Match and filter. Returns 0 with *outcome NO_MATCH, FILTERED or MATCHED
 * (passed). */
static int admit(sl_rule_vm *vm, const sl_rule_config *rc, const rule_refs *refs,
                 const char *event, size_t len, sl_rule_outcome *outcome, sl_error *err)
{
    if (rc->pattern) {
        /* Events reach rules from the log, where ingest validated them. */
        int r = sl_pattern_event_parse(&vm->pev, event, len, false, err);
        if (r)
            return r;
        if (!sl_pattern_match_event(rc->pattern, &vm->pev)) {
            *outcome = SL_RULE_NO_MATCH;
            return 0;
        }
    }
    if (refs->filter != LUA_NOREF) {
        int r = push_event(vm, rc, event, len, err);
        if (!r)
            r = call_ref(vm, rc, refs->filter, "filter", err);
        if (r)
            return r;
        bool keep = lua_toboolean(vm->L, -1);
        lua_pop(vm->L, 1);
        if (!keep) {
            *outcome = SL_RULE_FILTERED;
            return 0;
        }
    }
    *outcome = SL_RULE_MATCHED;
    return 0;
}

int sl_rule_eval(sl_rule_vm *vm, size_t rule, const char *event, size_t len,
                 const sl_input_ctx *ictx, sl_rule_out *out, sl_rule_outcome *outcome,
                 sl_error *err)
{
    const sl_rule_config *rc = &vm->cfg->rules[rule];
    const rule_refs *refs = &vm->refs[rule];
    size_t n0 = out->n, len0 = out->data.len;
    sl_rule_outcome oc;
    int r = admit(vm, rc, refs, event, len, &oc, err);
    if (r || oc != SL_RULE_MATCHED) {
        if (!r)
            *outcome = oc;
        return r;
    }
    if (refs->transform != LUA_NOREF) {
        int top = lua_gettop(vm->L);
        r = push_event(vm, rc, event, len, err);
        if (!r)
            r = call_ref(vm, rc, refs->transform, "transform", err);
        if (!r)
            r = take_transformed(vm, rc, ictx, out, err);
        lua_settop(vm->L, top);
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

int sl_rule_eval_batch(sl_rule_vm *vm, size_t rule, const char *const *events,
                       const size_t *lens, size_t n, const sl_input_ctx *ictx, sl_rule_out *out,
                       size_t *passed, sl_error *err)
{
    const sl_rule_config *rc = &vm->cfg->rules[rule];
    const rule_refs *refs = &vm->refs[rule];
    lua_State *L = vm->L;
    int top = lua_gettop(L);
    size_t n0 = out->n, len0 = out->data.len, np = 0;
    int r = 0;
    if (!lua_checkstack(L, 4))
        return sl_error_set(err, SL_ENOMEM, "rule \"%s\": Lua stack", rc->name);
    lua_createtable(L, (int)(n < 1024 ? n : 1024), 0);
    int list = lua_gettop(L);
    for (size_t i = 0; !r && i < n; i++) {
        sl_rule_outcome oc;
        r = admit(vm, rc, refs, events[i], lens[i], &oc, err);
        if (!r && oc == SL_RULE_MATCHED && !(r = push_event(vm, rc, events[i], lens[i], err)))
            lua_rawseti(L, list, (lua_Integer)++np);
    }
    if (!r && np && refs->batch != LUA_NOREF) {
        r = call_ref(vm, rc, refs->batch, "transform_batch", err);
        if (!r)
            r = take_transformed(vm, rc, ictx, out, err);
    } else if (!r && np) {
        sl_buf tmp = SL_BUF_INIT;
        for (size_t i = 1; !r && i <= np; i++) {
            lua_rawgeti(L, list, (lua_Integer)i);
            r = out_add_lua(vm, rc, lua_gettop(L), ictx, out, &tmp, err);
            lua_pop(L, 1);
        }
        sl_buf_free(&tmp);
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
