/*
 * tests/unit/test_sandbox.c — sandboxed Lua states (rules/sandbox.h): what
 * scripts cannot reach (io, os, require, files, bytecode, debug, string.dump,
 * the garbage collector, the string metatable, finalizers), the instruction
 * budget against every way of escaping it (pcall, xpcall handlers,
 * coroutines, __close, __tostring, callbacks from C), the memory cap (table
 * growth, string.rep), deep recursion, error messages, the privileged chunk,
 * the sluice helpers of lua/sluice.lua, and after every failure the same
 * state running a normal function again. State creation is also run under
 * every memory cap from too small to enough.
 */
#include "testutil.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/clock.h"
#include "rules/sandbox.h"

/* Small limits keep the failing cases fast. */
#define TEST_MEM ((size_t)16 << 20)
#define TEST_BUDGET 2000000u

/* ---- helpers --------------------------------------------------------------- */

/* Loads src as "@rule.lua" and calls it with nres results. Returns the code;
 * on success the results are on the stack. */
static int run_n(lua_State *L, const char *src, int nres, sl_error *err)
{
    int top = lua_gettop(L);
    int rc = sl_sandbox_load(L, src, strlen(src), "@rule.lua", err);
    if (rc)
        return rc;
    rc = sl_sandbox_call(L, 0, nres, err);
    assert_int_equal(lua_gettop(L), rc ? top : top + nres);
    return rc;
}

static int run(lua_State *L, const char *src, sl_error *err)
{
    return run_n(L, src, 1, err);
}

/* Runs src, which must succeed; its one result stays on the stack. */
static void run_ok(lua_State *L, const char *src)
{
    sl_error err = {0};
    int rc = run(L, src, &err);
    if (rc)
        fail_msg("%s\n-> %s: %s", src, sl_strerror(rc), err.msg);
}

/* Runs src, which must return true. */
static void check(lua_State *L, const char *src)
{
    run_ok(L, src);
    if (!lua_toboolean(L, -1))
        fail_msg("%s\n-> %s", src, luaL_tolstring(L, -1, NULL));
    lua_settop(L, 0);
}

/* Runs src, which must fail with code and a message containing want. */
static void fails(lua_State *L, const char *src, int code, const char *want)
{
    sl_error err = {0};
    int rc = run(L, src, &err);
    if (rc != code || (want && !strstr(err.msg, want)))
        fail_msg("%s\n-> %s: \"%s\"; want %s \"%s\"", src, rc ? sl_strerror(rc) : "success",
                 err.msg, sl_strerror(code), want ? want : "");
    assert_int_equal(err.code, code);
}

/* The state still runs a normal function correctly. */
static void still_works(lua_State *L)
{
    assert_int_equal(lua_gettop(L), 0);
    run_ok(L, "local t = {} for i = 1, 1000 do t[i] = i * 2 end\n"
              "local s = 0 for _, v in ipairs(t) do s = s + v end\n"
              "return s + #sluice.json.encode(sluice.json.decode('{\"a\":[1,2]}'))");
    assert_int_equal(lua_tointeger(L, -1), 1001000 + 11);
    lua_pop(L, 1);
}

static lua_State *new_state(size_t mem, uint64_t budget)
{
    sl_sandbox_options o = {.mem_bytes = mem, .instructions = budget};
    lua_State *L = NULL;
    sl_error err = {0};
    if (sl_sandbox_new(&o, &L, &err))
        fail_msg("sl_sandbox_new: %s", err.msg);
    return L;
}

static int state_setup(void **state)
{
    *state = new_state(TEST_MEM, TEST_BUDGET);
    return 0;
}

static int state_teardown(void **state)
{
    sl_sandbox_close(*state);
    return 0;
}

/* ---- what is not there -------------------------------------------------------- */

static void test_globals(void **state)
{
    lua_State *L = *state;
    check(L, "return io == nil and debug == nil and package == nil and require == nil\n"
             "  and dofile == nil and loadfile == nil and string.dump == nil\n"
             "  and (''):len() == 0 and ('x').dump == nil");
    check(L, "local n = 0 for k in pairs(os) do n = n + 1 end\n"
             "return n == 3 and os.execute == nil and os.exit == nil and os.getenv == nil\n"
             "  and os.remove == nil and os.rename == nil and os.tmpname == nil\n"
             "  and math.type(os.time()) == 'integer' and type(os.clock()) == 'number'\n"
             "  and os.date('!%Y-%m-%d', 0) == '1970-01-01'");
    check(L, "return type(string) == 'table' and type(table) == 'table' and type(math) == 'table'\n"
             "  and type(utf8) == 'table' and type(coroutine) == 'table' and _G._G == _G\n"
             "  and type(pcall) == 'function' and type(print) == 'function'");
    still_works(L);
}

static void test_forbidden_calls(void **state)
{
    lua_State *L = *state;
    static const char *const calls[] = {
        "io.open('/etc/passwd')",
        "os.execute('true')",
        "os.exit(1)",
        "os.getenv('HOME')",
        "os.remove('/tmp/x')",
        "require('os')",
        "require('io')",
        "dofile('/etc/passwd')",
        "loadfile('/etc/passwd')",
        "debug.getinfo(1)",
        "debug.sethook()",
        "string.dump(print)",
        "package.loadlib('x', 'y')",
        "collectgarbage('stop')",
        "collectgarbage()",
        "collectgarbage('collect')",
        "collectgarbage('step')",
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        char src[128];
        snprintf(src, sizeof src, "return %s", calls[i]);
        fails(L, src, SL_ESCRIPT, "rule.lua:1:");
        still_works(L);
    }
    check(L, "return type(collectgarbage('count')) == 'number' and collectgarbage('count') > 0");
    fails(L, "collectgarbage('stop')", SL_ESCRIPT, "only \"count\"");
}

/* load: text only, in the sandbox's globals by default. */
static void test_load(void **state)
{
    lua_State *L = *state;
    check(L, "sandbox_x = 5 return load('return sandbox_x')() == 5");
    check(L, "return load('return y', 'c', 't', {y = 3})() == 3");
    check(L, "return load('return io', 'c', 't', {io = 1})() == 1");
    check(L, "local f = load('return io') return f() == nil");
    check(L, "local parts = {'return ', '1 + ', '41'} local i = 0\n"
             "return load(function() i = i + 1 return parts[i] end)() == 42");
    check(L, "local f, msg = load('\\27Lua\\x54\\0\\x19\\x93\\r\\n\\x1a\\n')\n"
             "return f == nil and msg:find('binary') ~= nil");
    check(L, "local f, msg = load('return 1', 'c', 'b')\n"
             "return f == nil and msg:find('only text chunks') ~= nil");
    check(L, "local f, msg = load('return +') return f == nil and msg:find('c') ~= nil");

    still_works(L);
}

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud)
{
    (void)L;
    return sl_buf_append(ud, p, sz) != 0;
}

/* Bytecode is refused both by sl_sandbox_load() and by load() inside. */
static void test_bytecode(void **state)
{
    lua_State *L = *state;
    lua_State *P = luaL_newstate();
    assert_int_equal(luaL_loadstring(P, "return 42"), LUA_OK);
    sl_buf bc = SL_BUF_INIT;
    assert_int_equal(lua_dump(P, dump_writer, &bc, 1), 0);
    lua_close(P);
    assert_true(bc.len > 4 && bc.data[0] == 0x1b);

    sl_error err = {0};
    assert_int_equal(sl_sandbox_load(L, (char *)bc.data, bc.len, "=bc", &err), SL_EPARSE);
    assert_non_null(strstr(err.msg, "binary chunk"));
    assert_int_equal(lua_gettop(L), 0);

    const char *src = "local s = ... local f, m = load(s)\n"
                      "return f == nil and m:find('binary') ~= nil";
    assert_int_equal(sl_sandbox_load(L, src, strlen(src), "=t", &err), 0);
    lua_pushlstring(L, (char *)bc.data, bc.len);
    assert_int_equal(sl_sandbox_call(L, 1, 1, &err), 0);
    assert_true(lua_toboolean(L, -1));
    lua_pop(L, 1);
    sl_buf_free(&bc);
    still_works(L);
}

/* The strings' shared metatable cannot be reached or changed; metatables
 * with __gc are refused (finalizers would run without the budget). */
static void test_metatables(void **state)
{
    lua_State *L = *state;
    check(L, "return getmetatable('') == false and getmetatable('abc') == false");
    fails(L, "getmetatable('').__index = {}", SL_ESCRIPT, "attempt to index");
    fails(L, "getmetatable('').__index.upper = nil", SL_ESCRIPT, "attempt to index");
    fails(L, "setmetatable('', {})", SL_ESCRIPT, "table expected");
    check(L, "return ('abc'):upper() == 'ABC' and ('%d'):format(7) == '7'");
    fails(L, "setmetatable({}, {__gc = function() end})", SL_ESCRIPT,
          "__gc metamethods are not allowed");
    fails(L, "setmetatable({}, {__gc = true})", SL_ESCRIPT, "__gc metamethods are not allowed");
    check(L, "local t = setmetatable({}, {__index = function(_, k) return k .. '!' end})\n"
             "return t.x == 'x!' and getmetatable(setmetatable({}, nil)) == nil");
    /* sluice.array is reachable: a __gc put into it must not give the
     * arrays made with it (by sluice.array() or by decoding) a finalizer. */
    check(L, "rawset(sluice.array, '__gc', function() finalized = true end)\n"
             "local a, b = sluice.array{}, sluice.json.decode('[[1]]')\n"
             "a, b = nil, nil\n"
             "for i = 1, 200000 do local t = {i} end\n"
             "return finalized == nil and rawget(sluice.array, '__gc') == nil");
    check(L, "local p = setmetatable({}, {__metatable = 'locked'})\n"
             "local ok, m = pcall(setmetatable, p, {})\n"
             "return not ok and m:find('protected') ~= nil and getmetatable(p) == 'locked'");
    still_works(L);
}

/* ---- the instruction budget ---------------------------------------------------- */

static void test_budget(void **state)
{
    lua_State *L = *state;
    static const char *const loops[] = {
        "while true do end",
        "local i = 0 repeat i = i + 1 until false",
        "local function f() return f() end return f()", /* a tail call loop */
        "while true do pcall(function() while true do end end) end",
        "return pcall(function() while true do end end)",
        "local ok = pcall(function() while true do end end) return 1",
        "while true do pcall(error, 'x') end",
        "return xpcall(function() while true do end end, function(m) return m end)",
        "return xpcall(function() while true do end end, function() while true do end end)",
        "return xpcall(error, function() while true do end end)",
        "coroutine.wrap(function() while true do end end)()",
        "return coroutine.resume(coroutine.create(function() while true do end end))",
        "local co = coroutine.create(function() while true do end end)\n"
        "while true do coroutine.resume(co) end",
        "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
        "while true do pcall(coroutine.wrap(function() while true do end end)) end",
        "local co = coroutine.wrap(function() while true do coroutine.yield() end end)\n"
        "while true do co() end",
        "do local x <close> = setmetatable({}, {__close = function() while true do end end}) end",
        "local x <close> = setmetatable({}, {__close = function() while true do end end})\n"
        "error('x')",
        "error(setmetatable({}, {__tostring = function() while true do end end}))",
        "return tostring(setmetatable({}, {__tostring = function() while true do end end}))",
        "string.gsub('abc', '.', function() while true do end end)",
        "table.sort({3, 2, 1}, function() while true do end end)",
        "return load(function() while true do end end)",
        "local t = setmetatable({}, {__index = function() while true do end end}) return t.x",
        "while true do local ok, e = pcall(function() while true do end end) error(e) end",
        "local f f = function() pcall(f) while true do end end f()",
        /* Library loops in C, charged to the budget up front. */
        "table.move({}, 1, 1e10, 1)",
        "while true do table.move({}, 1, 1e5, 1) end",
        "table.insert(setmetatable({}, {__len = function() return 1e15 end}), 1, 'x')",
        "table.remove(setmetatable({}, {__len = function() return 1e15 end}), 1)",
    };
    for (size_t i = 0; i < sizeof loops / sizeof loops[0]; i++) {
        int64_t t0 = sl_clock_mono_ns();
        fails(L, loops[i], SL_EBUDGET, "instruction budget of 2000000 exceeded");
        /* Generous: 2 M instructions take milliseconds, even under ASan. */
        if (sl_clock_mono_ns() - t0 > (int64_t)20 * 1000 * 1000 * 1000)
            fail_msg("%s took too long", loops[i]);
        still_works(L);
    }
    sl_error err = {0};
    assert_int_equal(run(L, "while true do end", &err), SL_EBUDGET);
    assert_non_null(strstr(err.msg, "rule.lua:1: instruction budget"));
}

/* The library functions wrapped for the budget still do their job. */
static void test_wrapped_library(void **state)
{
    lua_State *L = *state;
    check(L, "return string.rep('', 1e12) == '' and string.rep('', 1e12, '') == ''\n"
             "  and ('ab'):rep(3, ',') == 'ab,ab,ab' and string.rep('x', 0) == ''\n"
             "  and string.rep('x', -5) == '' and ('-'):rep(3) == '---'");
    fails(L, "\nreturn ('x'):rep(1e12)", SL_ESCRIPT, "rule.lua:2: resulting string too large");
    check(L, "local t = table.move({1, 2, 3}, 1, 3, 2)\n"
             "local u = table.move({1, 2}, 1, 2, 1, {})\n"
             "return t[1] == 1 and t[2] == 1 and t[4] == 3 and #u == 2 and u[2] == 2");
    check(L, "local t = {1, 2, 3} table.insert(t, 1, 0) table.insert(t, 9)\n"
             "local r = table.remove(t, 1) local last = table.remove(t)\n"
             "return r == 0 and last == 9 and #t == 3 and t[1] == 1 and t[3] == 3");
    check(L, "local n = 0 local t = setmetatable({}, {__len = function() n = n + 1 return 2 end})\n"
             "table.insert(t, 'x') return rawget(t, 3) == 'x'");
    fails(L, "string.rep()", SL_ESCRIPT, "bad argument #1 to 'rep'");
    fails(L, "table.move({}, 'a')", SL_ESCRIPT, "bad argument #2 to 'move'");
    fails(L, "table.insert(1, 2)", SL_ESCRIPT, "table expected");
    still_works(L);
}

/* The budget is per call: each call gets all of it again. */
static void test_budget_per_call(void **state)
{
    lua_State *L = *state;
    sl_error err = {0};
    /* About 4 instructions per iteration: 1.2 M of the 2 M budget. */
    const char *src = "local n = 0 for i = 1, 300000 do n = n + i end return n";
    assert_int_equal(sl_sandbox_load(L, src, strlen(src), "@rule.lua", &err), 0);
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    for (int i = 0; i < 5; i++) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        assert_int_equal(sl_sandbox_call(L, 0, 1, &err), 0);
        assert_int_equal(lua_tointeger(L, -1), (lua_Integer)300000 * 300001 / 2);
        lua_pop(L, 1);
    }
    fails(L, "local n = 0 for i = 1, 3000000 do n = n + i end return n", SL_EBUDGET, NULL);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    assert_int_equal(sl_sandbox_call(L, 0, 1, &err), 0);
    lua_pop(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, ref);

    /* A coroutine made in one call and resumed in a later one is still
     * counted, also one suspended while a call was killed. */
    check(L, "spin = coroutine.wrap(function() while true do end end) return true");
    fails(L, "spin()", SL_EBUDGET, NULL);
    fails(L,
          "slow = coroutine.wrap(function() coroutine.yield() while true do end end)\n"
          "slow() while true do end",
          SL_EBUDGET, NULL);
    fails(L, "slow()", SL_EBUDGET, NULL);
    check(L, "spin, slow = nil, nil return true");
    still_works(L);
}

/* ---- memory ---------------------------------------------------------------------- */

static void test_memory_cap(void **state)
{
    lua_State *L = *state;
    size_t cap = 0;
    size_t used = sl_sandbox_memory(L, &cap);
    assert_int_equal(cap, TEST_MEM);
    assert_true(used > 0 && used < cap / 4);

    static const char *const bombs[] = {
        "local t = {} for i = 1, 1e8 do t[i] = i end",
        "local t = {} local i = 0 while true do i = i + 1 t['k' .. i] = i end",
        "return string.rep('x', 2^30)",
        "return ('x'):rep(1e8)",
        "local s = 'x' while true do s = s .. s end",
        "local t = {} for i = 1, 64 do t[i] = string.rep('y', 1e6) end",
        "return table.concat(setmetatable({}, {__index = function() return ('z'):rep(1e6) end}),"
        " '', 1, 100)",
        /* A memory error caught inside the script and raised again. */
        "local ok, e = pcall(string.rep, 'x', 2^30) error(e)",
        "local ok, e = pcall(string.rep, 'x', 2^30) error(e, 0)",
    };
    for (size_t i = 0; i < sizeof bombs / sizeof bombs[0]; i++) {
        fails(L, bombs[i], SL_ENOMEM, "memory cap of 16777216 bytes reached");
        assert_true(sl_sandbox_memory(L, NULL) < TEST_MEM / 2);
        still_works(L);
    }
    /* Caught and not raised again: the call succeeds. */
    check(L,
          "local ok, e = pcall(string.rep, 'x', 2^30) return not ok and e == 'not enough memory'");
    /* Beyond what string.rep allows at all: refused before any allocation. */
    sl_error err = {0};
    int rc = run(L, "return string.rep('x', 1e10)", &err);
    assert_true(rc == SL_ENOMEM || (rc == SL_ESCRIPT && strstr(err.msg, "too large")));
    still_works(L);
}

static void test_recursion(void **state)
{
    (void)state;
    /* Lua's stack limit (a million slots, about 80 MB with the call
     * records) ends it under a big enough cap; the default cap comes first. */
    lua_State *L = new_state((size_t)256 << 20, 0);
    fails(L, "local function f() return 1 + f() end return f()", SL_ESCRIPT, "stack overflow");
    still_works(L);
    sl_sandbox_close(L);
    L = new_state(0, 0);
    fails(L, "local function f() return 1 + f() end return f()", SL_ENOMEM, NULL);
    still_works(L);
    sl_sandbox_close(L);

    /* An error passed up through nested coroutines gets its position
     * prefixed at every level; the message keeps one and the reason. */
    L = *state;
    fails(L, "local function b() coroutine.wrap(b)() end b()", SL_ESCRIPT,
          "nested calls) rule.lua:1: C stack overflow");
    still_works(L);

    static const char *const deep[] = {
        "local function f() return 1 + f() end return f()",
        "local function f(...) return 1 + f(1, 2, 3, ...) end return f()",
        "local t = setmetatable({}, {__index = function(t, k) return t[k] end}) return t.x",
        "local mt = {} mt.__tostring = function(t) return tostring(t) end\n"
        "return tostring(setmetatable({}, mt))",
        "local function f() return coroutine.wrap(f)() end return f()",
        "local function f() return assert(pcall(f)) end return f()",
        "local function f(s) return (s:gsub('.', f)) end return f('ab')",
        "local t = setmetatable({}, {__lt = function(a, b) return a < b end}) return t < t",
        "local f f = function() return table.concat({}, '', 1, 1, f()) end return f()",
    };
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        sl_error err = {0};
        int rc = run(L, deep[i], &err);
        if (rc != SL_ESCRIPT && rc != SL_ENOMEM)
            fail_msg("%s -> %d %s", deep[i], rc, err.msg);
        still_works(L);
    }
}

/* ---- errors ------------------------------------------------------------------------ */

static void test_error_messages(void **state)
{
    lua_State *L = *state;
    fails(L, "error('boom')", SL_ESCRIPT, "rule.lua:1: boom (at rule.lua:1: in main chunk)");
    fails(L, "local function helper()\n  error('deep')\nend\nhelper()", SL_ESCRIPT,
          "rule.lua:2: deep (at rule.lua:2: in local 'helper')");
    fails(L, "local t = nil\nreturn t.x", SL_ESCRIPT, "rule.lua:2: attempt to index a nil value");
    fails(L, "\n\nstring.rep()", SL_ESCRIPT,
          "rule.lua:3: bad argument #1 to 'rep' (string expected, got no value)");
    fails(L, "error('plain', 0)", SL_ESCRIPT, "plain (at rule.lua:1: in main chunk)");
    fails(L, "error({})", SL_ESCRIPT, "(error object is a table value)");
    fails(L, "error(setmetatable({}, {__tostring = function() return 'custom' end}))", SL_ESCRIPT,
          "custom");
    fails(L, "error()", SL_ESCRIPT, "(error object is a nil value)");

    sl_error err = {0};
    assert_int_equal(sl_sandbox_load(L, "return +", 8, "@rule.lua", &err), SL_EPARSE);
    assert_non_null(strstr(err.msg, "rule.lua:1:"));
    assert_int_equal(err.code, SL_EPARSE);
    assert_int_equal(lua_gettop(L), 0);
    still_works(L);
}

/* Arguments in, results out, nothing left behind. */
static void test_call_convention(void **state)
{
    lua_State *L = *state;
    sl_error err = {0};
    const char *src = "local a, b = ... return a + b, a * b";
    assert_int_equal(sl_sandbox_load(L, src, strlen(src), "=add", &err), 0);
    lua_pushinteger(L, 6);
    lua_pushinteger(L, 7);
    assert_int_equal(sl_sandbox_call(L, 2, 2, &err), 0);
    assert_int_equal(lua_gettop(L), 2);
    assert_int_equal(lua_tointeger(L, 1), 13);
    assert_int_equal(lua_tointeger(L, 2), 42);
    lua_settop(L, 0);

    /* Below the function: untouched, on success and on every failure. */
    lua_pushliteral(L, "keep");
    static const char *const srcs[] = {"return ...", "error('x')", "while true do end",
                                       "return ('x'):rep(2^30)"};
    static const int codes[] = {0, SL_ESCRIPT, SL_EBUDGET, SL_ENOMEM};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sl_sandbox_load(L, srcs[i], strlen(srcs[i]), "=t", &err), 0);
        lua_pushinteger(L, 1);
        assert_int_equal(sl_sandbox_call(L, 1, 1, &err), codes[i]);
        lua_settop(L, 1);
        assert_string_equal(lua_tostring(L, 1), "keep");
    }
    lua_settop(L, 0);
    still_works(L);
}

/* Functions defined by one chunk are seen by the next, and keep working
 * with the sandbox's globals. */
static void test_shared_globals(void **state)
{
    lua_State *L = *state;
    check(L, "function shout(s) return sluice.str.trim(s):upper() .. '!' end return true");
    check(L, "return shout('  hi ') == 'HI!'");
    still_works(L);
}

/* ---- the privileged chunk ------------------------------------------------------------ */

static void test_privileged(void **state)
{
    (void)state;
    static const char prelude[] = "local getinfo = debug.getinfo\n"
                                  "function where(level)\n"
                                  "  local i = getinfo(level + 1, 'Sl')\n"
                                  "  return i.short_src .. ':' .. i.currentline\n"
                                  "end\n"
                                  "had_io, had_debug = io ~= nil, debug ~= nil\n";
    sl_sandbox_options o = {.mem_bytes = TEST_MEM,
                            .instructions = TEST_BUDGET,
                            .privileged_src = prelude,
                            .privileged_len = sizeof prelude - 1,
                            .privileged_name = "@prelude.lua"};
    lua_State *L = NULL;
    sl_error err = {0};
    assert_int_equal(sl_sandbox_new(&o, &L, &err), 0);
    check(L, "\nreturn where(1) == 'rule.lua:2' and had_io and had_debug\n"
             "  and debug == nil and io == nil and package == nil and require == nil\n"
             "  and os.execute == nil and string.dump == nil");
    /* Still under the budget when called from sandboxed code. */
    fails(L, "while true do where(1) end", SL_EBUDGET, NULL);
    still_works(L);
    sl_sandbox_close(L);

    static const char broken[] = "local x = 1\nerror('prelude broke')";
    o.privileged_src = broken;
    o.privileged_len = sizeof broken - 1;
    L = NULL;
    assert_int_equal(sl_sandbox_new(&o, &L, &err), SL_ESCRIPT);
    assert_null(L);
    assert_non_null(strstr(err.msg, "prelude.lua:2: prelude broke"));

    o.privileged_src = "local = 1";
    o.privileged_len = 9;
    assert_int_equal(sl_sandbox_new(&o, &L, &err), SL_ESCRIPT);
    assert_int_equal(err.code, SL_ESCRIPT);
    assert_non_null(strstr(err.msg, "prelude.lua:1:"));
}

/* Creation under every small memory cap: a clean SL_ENOMEM or a working
 * state, never a crash or a leak. */
static void test_new_under_caps(void **state)
{
    (void)state;
    int ok = 0;
    for (size_t cap = 1024; cap <= 96 * 1024; cap += 512) {
        sl_sandbox_options o = {.mem_bytes = cap};
        lua_State *L = NULL;
        sl_error err = {0};
        int rc = sl_sandbox_new(&o, &L, &err);
        if (rc) {
            assert_int_equal(rc, SL_ENOMEM);
            assert_null(L);
            continue;
        }
        ok++;
        sl_error e2;
        int r = run(L, "return 1", &e2);
        assert_true(r == 0 || r == SL_ENOMEM);
        lua_settop(L, 0);
        sl_sandbox_close(L);
    }
    assert_true(ok > 0);
    sl_sandbox_close(NULL);
    sl_sandbox_options tiny = {.mem_bytes = 100};
    lua_State *L = NULL;
    sl_error err;
    assert_int_equal(sl_sandbox_new(&tiny, &L, &err), SL_ENOMEM);
}

/* ---- the sluice helpers ------------------------------------------------------------- */

static void test_helpers(void **state)
{
    lua_State *L = *state;
    check(L, "local s = sluice.str.split('a,b,,c', ',')\n"
             "return #s == 4 and s[1] == 'a' and s[3] == '' and s[4] == 'c'\n"
             "  and getmetatable(s) == sluice.array");
    check(L, "local s = sluice.str.split('', ',') return #s == 1 and s[1] == ''");
    check(L, "local s = sluice.str.split('a::b::c', '::', 2)\n"
             "return #s == 2 and s[1] == 'a' and s[2] == 'b::c'");
    check(L, "local s = sluice.str.split('a.b', '.') return #s == 2 and s[2] == 'b'");
    check(L, "return sluice.json.encode(sluice.str.split('x', ',')) == '[\"x\"]'");
    fails(L, "sluice.str.split('a', '')", SL_ESCRIPT, "separator is empty");
    fails(L, "sluice.str.split(nil, ',')", SL_ESCRIPT,
          "rule.lua:1: sluice.str.split: bad argument #1 (string expected, got nil)");
    fails(L, "sluice.str.split('a', ',', 0)", SL_ESCRIPT, "integer >= 1 expected");
    check(L, "return sluice.str.trim('  a b \\t\\n') == 'a b' and sluice.str.trim('   ') == ''\n"
             "  and sluice.str.ltrim('  a ') == 'a ' and sluice.str.rtrim('  a ') == '  a'\n"
             "  and sluice.str.rtrim(' ') == '' and sluice.str.ltrim('') == ''");
    /* Linear: a quadratic pattern would take minutes on these (in C, where
     * the budget cannot stop it). */
    check(L, "local s = string.rep(' ', 100000) .. 'x' .. string.rep(' ', 100000)\n"
             "local sp = string.rep(' \\t\\n', 300000)\n"
             "return sluice.str.trim(s) == 'x' and sluice.str.trim(sp) == ''\n"
             "  and sluice.str.ltrim(sp) == '' and sluice.str.rtrim(sp) == ''\n"
             "  and sluice.str.ltrim(s) == 'x' .. string.rep(' ', 100000)\n"
             "  and sluice.str.rtrim(s) == string.rep(' ', 100000) .. 'x'");
    check(L, "local S = sluice.str\n"
             "return S.starts_with('order.created', 'order.') and not S.starts_with('o', 'order')\n"
             "  and S.starts_with('x', '') and S.ends_with('a.json', '.json')\n"
             "  and not S.ends_with('json', 'a.json') and S.ends_with('x', '')\n"
             "  and S.contains('a.b*c', '.b*') and not S.contains('abc', 'd')\n"
             "  and S.contains('abc', '')");
    check(L, "local S = sluice.str\n"
             "local r, n = S.replace('a.b.c', '.', '%')\n"
             "local r2, n2 = S.replace('aaa', 'a', 'bb', 2)\n"
             "local r3, n3 = S.replace('abc', 'x', 'y')\n"
             "return r == 'a%b%c' and n == 2 and r2 == 'bbbba' and n2 == 2 and r3 == 'abc'\n"
             "  and n3 == 0");
    fails(L, "sluice.str.replace('a', '', 'b')", SL_ESCRIPT, "empty");
    check(L, "local t = sluice.time\n"
             "local ms = t.parse('2024-02-29T13:45:00.123+01:00')\n"
             "return ms == 1709210700123 and math.type(ms) == 'integer'\n"
             "  and t.format(ms) == '2024-02-29T12:45:00.123Z'\n"
             "  and t.format(0) == '1970-01-01T00:00:00.000Z'\n"
             "  and t.format(1.7e12) == '2023-11-14T22:13:20.000Z'");
    check(L, "local ms, err = sluice.time.parse('2023-02-29T00:00:00Z')\n"
             "return ms == nil and err:find('RFC 3339') ~= nil");
    check(L, "local s, err = sluice.time.format(1e15) return s == nil and err ~= nil");
    fails(L, "sluice.time.format(1.5)", SL_ESCRIPT, "number has no integer representation");
    run_ok(L, "return sluice.time.now()");
    assert_true(lua_isinteger(L, -1));
    int64_t now = sl_clock_now_ms();
    assert_true(llabs(lua_tointeger(L, -1) - now) < 5000);
    lua_pop(L, 1);
    /* The helpers keep their own references to the string functions. */
    check(L, "local find = string.find string.find = nil\n"
             "local ok = sluice.str.contains('abc', 'b') string.find = find return ok");
    still_works(L);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_globals, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_forbidden_calls, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_load, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_bytecode, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_metatables, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_budget, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_budget_per_call, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_wrapped_library, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_memory_cap, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_recursion, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_error_messages, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_call_convention, state_setup, state_teardown),
        cmocka_unit_test_setup_teardown(test_shared_globals, state_setup, state_teardown),
        cmocka_unit_test(test_privileged),
        cmocka_unit_test(test_new_under_caps),
        cmocka_unit_test_setup_teardown(test_helpers, state_setup, state_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
