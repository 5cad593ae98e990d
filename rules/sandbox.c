/*
 * rules/sandbox.c — sandboxed Lua 5.4 states (see rules/sandbox.h).
 *
 * A state is built in three steps: open the libraries and the sluice helpers
 * (lua/sluice.lua), run the optional privileged chunk with everything still
 * there, then seal: remove the dangerous globals, replace load, xpcall,
 * setmetatable and collectgarbage with safe versions, and protect the string
 * metatable. The sandbox's globals stay the state's global table, so every
 * chunk loaded later (and every function it defines) sees the same names.
 *
 * Limits: a counting allocator refuses past the memory cap; a count hook
 * charges a shared per-call budget every SB_STEP instructions. Once the
 * budget is spent the call is "killed": the hook fires on every instruction
 * of any thread and raises again each time, so a pcall inside the script can
 * catch the error but cannot run anything afterwards. New coroutines inherit
 * the hook of the thread that creates them (lua_newthread copies it), and
 * the hook is installed before any code runs, so every thread carries it.
 *
 * Two places would otherwise run script code without hooks, and are closed:
 * __gc metamethods (Lua turns hooks off while finalizers run; setmetatable
 * refuses metatables with a __gc field, and only a __gc present at that time
 * makes an object finalizable) and the message handler of xpcall (called from
 * inside our hook when we raise the budget error; xpcall is replaced by one
 * whose handler is skipped once the call is killed).
 *
 * The hook cannot fire inside C functions either. Library functions whose C
 * loops are bounded by neither the memory cap nor the stack are wrapped:
 * string.rep with nothing to repeat returns "" at once, and table.move (its
 * range) and table.insert/remove (a __len that claims any length) charge
 * their work to the budget first. Pattern matching (string.find, match,
 * gmatch, gsub) is replaced by rules/luapat.c, which charges its steps to
 * the budget as it goes; it is installed as soon as the string library is
 * open, so the helpers of lua/sluice.lua (which capture string.find and
 * string.match when they load) and the privileged chunk get it too.
 */
#include "rules/sandbox.h"

#include <lauxlib.h>
#include <limits.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/clock.h"
#include "rules/lua_embed.h"
#include "rules/luajson.h"
#include "rules/luapat.h"
#include "core/base/slog.h"

#define SB_DEFAULT_MEM ((size_t)64 << 20)
#define SB_DEFAULT_INSTRUCTIONS 10000000u
/* Instructions between two visits of the hook: the budget is charged in
 * steps of this size, and a killed call runs at most this many instructions
 * on another thread before that thread notices. */
#define SB_STEP 1000

typedef struct sb_state {
    size_t used, cap;  /* bytes held by the Lua state, and the cap */
    uint64_t budget;   /* instructions per outermost call */
    int64_t remaining; /* of the budget, in the current call */
    int step;          /* hook count while not killed */
    int depth;         /* nested sl_sandbox_call()s running */
    bool killed;       /* the current call ran out of budget */
    bool refused;      /* the allocator refused a request in this call */
    char where[160];   /* "chunk:line: instruction budget … exceeded" */
} sb_state;

static sb_state *sb_get(lua_State *L)
{
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

/* ---- memory -------------------------------------------------------------- */

static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    sb_state *s = ud;
    size_t old = ptr ? osize : 0; /* with ptr == NULL, osize is a type tag */
    if (nsize == 0) {
        free(ptr);
        s->used -= old;
        return NULL;
    }
    if (nsize > old && nsize - old > s->cap - s->used) {
        s->refused = true;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (!p) {
        if (nsize <= old)
            return ptr; /* Lua assumes shrinking never fails: keep the block */
        s->refused = true;
        return NULL;
    }
    s->used = s->used - old + nsize;
    return p;
}

static int sb_panic(lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    sl_slog(SL_SLOG_ERROR, "lua", "unprotected Lua error: %s", msg ? msg : "(not a string)");
    return 0; /* Lua aborts */
}

/* ---- instruction budget ---------------------------------------------------- */

static void sb_hook(lua_State *L, lua_Debug *ar);

/* Ends the current call (never returns): the budget error now, and again at
 * every instruction of this thread (hook count 1) until the outermost call
 * returns. ar describes where the budget ran out, for the message. */
static void sb_kill(lua_State *L, sb_state *s, lua_Debug *ar)
{
    if (!s->killed) {
        s->killed = true;
        if (ar && lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
            snprintf(s->where, sizeof s->where, "%s:%d: instruction budget of %llu exceeded",
                     ar->short_src, ar->currentline, (unsigned long long)s->budget);
        else
            snprintf(s->where, sizeof s->where, "instruction budget of %llu exceeded",
                     (unsigned long long)s->budget);
    }
    if (lua_gethookcount(L) != 1)
        lua_sethook(L, sb_hook, LUA_MASKCOUNT, 1);
    lua_pushstring(L, s->where);
    lua_error(L);
}

static void sb_hook(lua_State *L, lua_Debug *ar)
{
    sb_state *s = sb_get(L);
    int count = lua_gethookcount(L);
    if (s->depth == 0 || (!s->killed && (s->remaining -= count) > 0)) {
        /* Outside calls nothing is charged; a thread left at count 1 by a
         * killed call goes back to the normal step. */
        if (count != s->step)
            lua_sethook(L, sb_hook, LUA_MASKCOUNT, s->step);
        return;
    }
    sb_kill(L, s, ar);
}

/* Charges n units of work done in C to the budget (library functions that
 * loop as long as their arguments say, where the hook cannot fire); raises
 * the budget error when it runs out. Called from a C function: the message
 * names its Lua caller. */
static void sb_charge(lua_State *L, lua_Unsigned n)
{
    sb_state *s = sb_get(L);
    if (s->depth == 0)
        return;
    if (!s->killed && n < (lua_Unsigned)s->remaining) {
        s->remaining -= (int64_t)n;
        return;
    }
    lua_Debug ar;
    sb_kill(L, s, lua_getstack(L, 1, &ar) ? &ar : NULL);
}

/* ---- calls and error messages ---------------------------------------------- */

/* Message handler: the message with a traceback (gathered here, while the
 * failing frames still exist). */
static int sb_msgh(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* An error raised through N nested coroutines (coroutine.wrap adds the
 * position again at each level) reads "f.lua:3: f.lua:3: … reason": the
 * reason would fall off the end of the message. Returns m past all but the
 * last of the repeated "chunk:line: " prefixes; *repeats gets how many were
 * skipped. */
static const char *sb_skip_repeats(const char *m, const char *end, int *repeats)
{
    *repeats = 0;
    const char *colon = memchr(m, ':', (size_t)(end - m));
    if (!colon)
        return m;
    const char *p = colon + 1;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    if (p == colon + 1 || end - p < 2 || p[0] != ':' || p[1] != ' ')
        return m;
    size_t plen = (size_t)(p + 2 - m); /* "chunk:line: " */
    while ((size_t)(end - m) > 2 * plen && memcmp(m, m + plen, plen) == 0) {
        m += plen;
        ++*repeats;
    }
    return m;
}

/* err gets "message (at <first traceback line with a Lua location>)" from
 * the handler's output on top of the stack. */
static int sb_script_error(lua_State *L, int code, sl_error *err)
{
    static const char mark[] = "\nstack traceback:\n";
    size_t len;
    const char *m = lua_tolstring(L, -1, &len);
    if (m == NULL)
        return sl_error_set(err, code, "(error object is a %s value)", luaL_typename(L, -1));
    int repeats;
    const char *full = m;
    m = sb_skip_repeats(m, m + len, &repeats);
    len -= (size_t)(m - full);
    if (repeats) { /* say how deep it went, then the message once */
        lua_pushfstring(L, "(raised through %d nested calls) %s", repeats, m);
        lua_replace(L, -2);
        m = lua_tolstring(L, -1, &len);
    }
    const char *tb = NULL, *end = m + len;
    for (const char *p = m; (p = memmem(p, (size_t)(end - p), mark, sizeof mark - 1)) != NULL; p++)
        tb = p;
    if (tb == NULL)
        return sl_error_set(err, code, "%s", m);
    for (const char *p = tb + sizeof mark - 1; p < end;) {
        while (p < end && *p == '\t')
            p++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        if (strncmp(p, "[C]:", 4) != 0 && strncmp(p, "(...", 4) != 0 && strncmp(p, "...", 3) != 0)
            return sl_error_set(err, code, "%.*s (at %.*s)", (int)(tb - m), m, (int)(eol - p), p);
        p = eol + 1;
    }
    return sl_error_set(err, code, "%.*s", (int)(tb - m), m);
}

/* Whether a failed call ran out of memory: Lua's own memory error, or an
 * error raised while the allocator was refusing (in the message handler, or
 * a memory error that a script caught and raised again). */
static bool sb_out_of_memory(lua_State *L, const sb_state *s, int st)
{
    if (st == LUA_ERRMEM)
        return true;
    if (!s->refused)
        return false;
    if (st == LUA_ERRERR)
        return true;
    const char *m = lua_tostring(L, -1);
    return m != NULL && strstr(m, "not enough memory") != NULL;
}

/* lua_pcall with the message handler. budgeted: an sl_sandbox_call (starts
 * or shares the budget); otherwise a trusted call without limits. */
static int sb_pcall(lua_State *L, int nargs, int nresults, bool budgeted, sl_error *err)
{
    sb_state *s = sb_get(L);
    int fn = lua_gettop(L) - nargs;
    if (!lua_checkstack(L, 2)) {
        lua_settop(L, fn - 1);
        return sl_error_set(err, SL_ENOMEM, "Lua stack: out of memory");
    }
    lua_pushcfunction(L, sb_msgh);
    lua_insert(L, fn);
    if (budgeted && s->depth == 0) {
        s->remaining = (int64_t)s->budget;
        s->killed = false;
        s->refused = false;
        lua_sethook(L, sb_hook, LUA_MASKCOUNT, s->step);
    }
    if (budgeted)
        s->depth++;
    int st = lua_pcall(L, nargs, nresults, fn);
    if (budgeted)
        s->depth--;
    int rc;
    if (budgeted && s->killed) {
        /* Also when the script swallowed the error and returned. */
        rc = sl_error_set(err, SL_EBUDGET, "%s", s->where);
    } else if (st == LUA_OK) {
        lua_remove(L, fn);
        return 0;
    } else if (sb_out_of_memory(L, s, st)) {
        rc = sl_error_set(err, SL_ENOMEM, "memory cap of %zu bytes reached", s->cap);
    } else {
        rc = sb_script_error(L, SL_ESCRIPT, err);
    }
    lua_settop(L, fn - 1);
    if (rc == SL_ENOMEM)
        lua_gc(L, LUA_GCCOLLECT);
    return rc;
}

int sl_sandbox_call(lua_State *L, int nargs, int nresults, sl_error *err)
{
    return sb_pcall(L, nargs, nresults, true, err);
}

int sl_sandbox_load(lua_State *L, const char *src, size_t len, const char *chunkname, sl_error *err)
{
    if (!lua_checkstack(L, 1))
        return sl_error_set(err, SL_ENOMEM, "Lua stack: out of memory");
    int st = luaL_loadbufferx(L, src, len, chunkname, "t");
    if (st == LUA_OK)
        return 0;
    int code = st == LUA_ERRMEM ? SL_ENOMEM : SL_EPARSE;
    const char *m = lua_tostring(L, -1);
    sl_error_set(err, code, "%s", m ? m : "cannot load the chunk");
    lua_pop(L, 1);
    return code;
}

size_t sl_sandbox_memory(lua_State *L, size_t *cap)
{
    sb_state *s = sb_get(L);
    if (cap)
        *cap = s->cap;
    return s->used;
}

/* ---- the sandbox's replacements ------------------------------------------- */

/* collectgarbage("count") only. */
static int sb_collectgarbage(lua_State *L)
{
    const char *opt = luaL_optstring(L, 1, "collect");
    if (strcmp(opt, "count") != 0)
        return luaL_error(
            L, "collectgarbage(\"%s\") is not allowed in the sandbox (only \"count\")", opt);
    int kb = lua_gc(L, LUA_GCCOUNT), b = lua_gc(L, LUA_GCCOUNTB);
    lua_pushnumber(L, (lua_Number)kb + (lua_Number)b / 1024);
    return 1;
}

/* Reader for load(f): calls f (kept at slot 1) for each piece; the piece is
 * kept at slot 5 so it is not collected while the parser reads it. */
static const char *sb_reader(lua_State *L, void *ud, size_t *size)
{
    (void)ud;
    luaL_checkstack(L, 2, "too many nested functions");
    lua_pushvalue(L, 1);
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        *size = 0;
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "reader function must return a string");
    lua_replace(L, 5);
    return lua_tolstring(L, 5, size);
}

/* load(chunk [, chunkname [, mode [, env]]]): text chunks only; the
 * environment defaults to the global table (the sandbox's globals). */
static int sb_load(lua_State *L)
{
    size_t len;
    const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &len) : NULL;
    const char *mode = luaL_optstring(L, 3, "bt");
    int env = lua_isnone(L, 4) ? 0 : 4;
    int st;
    if (strchr(mode, 't') == NULL) {
        luaL_pushfail(L);
        lua_pushliteral(L, "load: only text chunks can be loaded in the sandbox");
        return 2;
    }
    if (s != NULL) {
        const char *name = luaL_optstring(L, 2, s);
        st = luaL_loadbufferx(L, s, len, name, "t");
    } else {
        const char *name = luaL_optstring(L, 2, "=(load)");
        luaL_checktype(L, 1, LUA_TFUNCTION);
        lua_settop(L, 5);
        st = lua_load(L, sb_reader, NULL, name, "t");
    }
    if (st != LUA_OK) {
        luaL_pushfail(L);
        lua_insert(L, -2);
        return 2;
    }
    if (env) {
        lua_pushvalue(L, env);
        if (!lua_setupvalue(L, -2, 1))
            lua_pop(L, 1);
    }
    return 1;
}

/* setmetatable(t, mt) refusing a __gc field: finalizers run with hooks off,
 * out of reach of the budget. */
static int sb_setmetatable(lua_State *L)
{
    int t = lua_type(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
    if (t == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL)
            return luaL_error(L, "__gc metamethods are not allowed in the sandbox");
        lua_pop(L, 1);
    }
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
        return luaL_error(L, "cannot change a protected metatable");
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
}

/* The message handler given to the script's xpcall: the script's handler,
 * unless the call is killed (then it would run inside our hook, where hooks
 * are off, so it is skipped and the error goes on unchanged). */
static int sb_xpcall_handler(lua_State *L)
{
    if (sb_get(L)->killed)
        return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int sb_xpcall_done(lua_State *L, int status, lua_KContext extra)
{
    if (status != LUA_OK && status != LUA_YIELD) {
        lua_pushboolean(L, 0);
        lua_pushvalue(L, -2);
        return 2;
    }
    return lua_gettop(L) - (int)extra;
}

/* xpcall(f, handler, ...) */
static int sb_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, sb_xpcall_handler, 1);
    lua_replace(L, 2);
    /* Stack: f, handler, args…; make it f, handler, true, f, args… (the
     * results go above "true"). */
    lua_pushboolean(L, 1);
    lua_pushvalue(L, 1);
    lua_rotate(L, 3, 2);
    int st = lua_pcallk(L, n - 2, LUA_MULTRET, 2, 2, sb_xpcall_done);
    return sb_xpcall_done(L, st, 2);
}

/* Calls the library function kept as upvalue 1 with this call's arguments
 * and returns its results. */
static int sb_call_original(lua_State *L)
{
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

/* string.rep(s, n [, sep]): Lua loops n times even when there is nothing to
 * copy (s and sep empty), in C, out of the budget's reach; that result is ""
 * at once. Any other result is allocated first, so the memory cap bounds it. */
static int sb_rep(lua_State *L)
{
    size_t l, lsep;
    luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_optlstring(L, 3, "", &lsep);
    if (n <= 0 || l + lsep == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    /* Lua's own limit, checked here so the message names the caller. */
    if ((lua_Unsigned)n > (lua_Unsigned)INT_MAX / (l + lsep))
        return luaL_error(L, "resulting string too large");
    return sb_call_original(L);
}

/* table.move(a1, f, e, t [, a2]): one step per element of the range, charged
 * first (an empty table can be "moved" a billion times, all in C). */
static int sb_move(lua_State *L)
{
    lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
    if (e >= f)
        sb_charge(L, (lua_Unsigned)e - (lua_Unsigned)f + 1u);
    return sb_call_original(L);
}

/* table.insert / table.remove shift up to #t elements in C; a __len
 * metamethod can claim any length, so that length is charged first. */
static int sb_shift(lua_State *L)
{
    if (luaL_getmetafield(L, 1, "__len") != LUA_TNIL) {
        lua_pop(L, 1);
        lua_Integer n = luaL_len(L, 1);
        if (n > 0)
            sb_charge(L, (lua_Unsigned)n);
    }
    return sb_call_original(L);
}

/* Replaces field name of the table on top with fn, the old value as its
 * upvalue. */
static void sb_wrap(lua_State *L, const char *name, lua_CFunction fn)
{
    lua_getfield(L, -1, name);
    lua_pushcclosure(L, fn, 1);
    lua_setfield(L, -2, name);
}

/* ---- sluice.time ------------------------------------------------------------ */

static int sb_time_now(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)sl_clock_now_ms());
    return 1;
}

static int sb_time_parse(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    int64_t ms;
    if (sl_time_parse_rfc3339(s, n, &ms) != 0) {
        luaL_pushfail(L);
        lua_pushfstring(L, "not an RFC 3339 date-time: \"%s\"", s);
        return 2;
    }
    lua_pushinteger(L, (lua_Integer)ms);
    return 1;
}

static int sb_time_format(lua_State *L)
{
    lua_Integer ms = luaL_checkinteger(L, 1);
    char out[SL_TIME_RFC3339_MAX];
    size_t n = sl_time_format_rfc3339((int64_t)ms, out);
    if (n == 0) {
        luaL_pushfail(L);
        lua_pushliteral(L, "time outside the years 0000-9999");
        return 2;
    }
    lua_pushlstring(L, out, n);
    return 1;
}

/* ---- building the state ----------------------------------------------------- */

/* Opens the libraries (all of them when a privileged chunk will run) and the
 * sluice helpers. Protected: argument 1 is the options. */
static int sb_open(lua_State *L)
{
    const sl_sandbox_options *o = lua_touserdata(L, 1);
    static const luaL_Reg base[] = {
        {LUA_GNAME, luaopen_base},        {LUA_COLIBNAME, luaopen_coroutine},
        {LUA_TABLIBNAME, luaopen_table},  {LUA_OSLIBNAME, luaopen_os},
        {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
        {LUA_UTF8LIBNAME, luaopen_utf8},  {NULL, NULL},
    };
    static const luaL_Reg full[] = {
        {LUA_LOADLIBNAME, luaopen_package},
        {LUA_IOLIBNAME, luaopen_io},
        {LUA_DBLIBNAME, luaopen_debug},
        {NULL, NULL},
    };
    for (const luaL_Reg *r = base; r->name; r++) {
        luaL_requiref(L, r->name, r->func, 1);
        lua_pop(L, 1);
    }
    lua_getglobal(L, LUA_STRLIBNAME); /* find, match, gmatch, gsub under the budget */
    sl_luapat_install(L, -1, sb_charge);
    lua_pop(L, 1);
    if (o->privileged_src) {
        for (const luaL_Reg *r = full; r->name; r++) {
            luaL_requiref(L, r->name, r->func, 1);
            lua_pop(L, 1);
        }
    }

    static const luaL_Reg time_fns[] = {
        {"now", sb_time_now}, {"parse", sb_time_parse}, {"format", sb_time_format}, {NULL, NULL}};
    lua_createtable(L, 0, 8);
    sl_luajson_register(L);
    luaL_newlib(L, time_fns);
    lua_setfield(L, -2, "time");
    lua_pushvalue(L, -1);
    lua_setglobal(L, "sluice");
    if (luaL_loadbufferx(L, sl_lua_src_sluice, sl_lua_src_sluice_len, "@lua/sluice.lua", "t"))
        return lua_error(L);
    lua_insert(L, -2);
    lua_call(L, 1, 0);
    return 0;
}

/* Removes what sandboxed code must not reach. Protected. */
static int sb_seal(lua_State *L)
{
    static const char *const removed[] = {"io",     "debug",    "package", "require",
                                          "dofile", "loadfile", NULL};
    static const luaL_Reg replaced[] = {
        {"load", sb_load},     {"collectgarbage", sb_collectgarbage},
        {"xpcall", sb_xpcall}, {"setmetatable", sb_setmetatable},
        {NULL, NULL},
    };
    lua_pushglobaltable(L);
    int g = lua_gettop(L);
    for (const char *const *r = removed; *r; r++) {
        lua_pushnil(L);
        lua_setfield(L, g, *r);
    }
    luaL_setfuncs(L, replaced, 0);

    /* os: a fresh table with the three harmless functions (the library's own
     * table is left whole for whatever the privileged chunk kept). */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    int loaded = lua_gettop(L);
    lua_getfield(L, loaded, LUA_OSLIBNAME);
    lua_createtable(L, 0, 3);
    static const char *const os_kept[] = {"time", "clock", "date", NULL};
    for (const char *const *k = os_kept; *k; k++) {
        lua_getfield(L, -2, *k);
        lua_setfield(L, -2, *k);
    }
    lua_setfield(L, g, "os");
    lua_pop(L, 1);

    /* string.dump: the library table is also the strings' __index. */
    lua_getfield(L, loaded, LUA_STRLIBNAME);
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    sb_wrap(L, "rep", sb_rep);
    lua_pop(L, 1);

    lua_getfield(L, loaded, LUA_TABLIBNAME);
    sb_wrap(L, "move", sb_move);
    sb_wrap(L, "insert", sb_shift);
    sb_wrap(L, "remove", sb_shift);
    lua_pop(L, 1);

    /* getmetatable("") gives false, and the metatable cannot be reached. */
    lua_pushliteral(L, "");
    if (lua_getmetatable(L, -1)) {
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "__metatable");
    }
    lua_settop(L, 0);
    return 0;
}

/* Runs fn(opts) in protected mode; on error fills err and returns the code. */
static int sb_protected(lua_State *L, lua_CFunction fn, const sl_sandbox_options *o,
                        const char *what, sl_error *err)
{
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, (void *)o);
    int st = lua_pcall(L, 1, 0, 0);
    if (st == LUA_OK)
        return 0;
    int code = st == LUA_ERRMEM ? SL_ENOMEM : SL_ESCRIPT;
    const char *m = lua_tostring(L, -1);
    sl_error_set(err, code, "%s: %s", what, m ? m : "error");
    lua_pop(L, 1);
    return code;
}

int sl_sandbox_new(const sl_sandbox_options *opts, lua_State **out, sl_error *err)
{
    static const sl_sandbox_options defaults = {0};
    const sl_sandbox_options *o = opts ? opts : &defaults;
    sb_state *s = calloc(1, sizeof *s);
    if (!s)
        return sl_error_set(err, SL_ENOMEM, "sandbox: out of memory");
    s->cap = o->mem_bytes ? o->mem_bytes : SB_DEFAULT_MEM;
    s->budget = o->instructions ? o->instructions : SB_DEFAULT_INSTRUCTIONS;
    s->step = s->budget < SB_STEP ? (int)s->budget : SB_STEP;
    lua_State *L = lua_newstate(sb_alloc, s);
    if (!L) {
        free(s);
        return sl_error_set(err, SL_ENOMEM, "sandbox: memory cap too small for a Lua state");
    }
    lua_atpanic(L, sb_panic);
    /* Generational collection: rules make short-lived garbage per event
     * (proxies, their override tables) next to a state that lives long (the
     * helpers, the rules' functions), which the incremental collector marks
     * again in every cycle; 13 % of a Lua transform's time (bench/rules_bench
     * row 3a, docs/benchmarks.md). The memory cap holds the same: an
     * allocation the cap refuses makes Lua run a full collection first. */
    lua_gc(L, LUA_GCGEN, 0, 0);
    /* Before any code runs, so every thread created later inherits it. */
    lua_sethook(L, sb_hook, LUA_MASKCOUNT, s->step);
    int rc = sb_protected(L, sb_open, o, "sandbox: loading the helpers", err);
    if (rc == 0 && o->privileged_src) {
        const char *name = o->privileged_name ? o->privileged_name : "=privileged";
        rc = sl_sandbox_load(L, o->privileged_src, o->privileged_len, name, err);
        if (rc == SL_EPARSE) { /* the header promises SL_ESCRIPT for any failure of the chunk */
            rc = SL_ESCRIPT;
            if (err)
                err->code = rc;
        }
        if (rc == 0)
            rc = sb_pcall(L, 0, 0, false, err);
    }
    if (rc == 0)
        rc = sb_protected(L, sb_seal, o, "sandbox: sealing", err);
    if (rc) {
        lua_close(L);
        free(s);
        return rc;
    }
    lua_settop(L, 0);
    *out = L;
    return 0;
}

void sl_sandbox_close(lua_State *L)
{
    if (!L)
        return;
    sb_state *s = sb_get(L);
    lua_close(L);
    free(s);
}
