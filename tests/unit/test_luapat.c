/*
 * tests/unit/test_luapat.c — Lua patterns with a step limit (rules/luapat.h).
 *
 * Differential tests: a plain Lua state holds the real string library and
 * ours side by side, and a Lua driver runs each case through both and
 * compares everything that comes back (all results, every gmatch step, the
 * calls a gsub makes to a replacement function, and error messages, with
 * only the function name of argument errors left out). The cases are a
 * hand-written list covering each feature of the manual's §6.4.1 and of
 * find/match/gmatch/gsub with their edge cases and errors, and a few
 * thousand seeded random patterns and subjects over a small alphabet.
 * Then the limit: the pathological patterns end quickly with the budget
 * error inside a sandbox (SL_EBUDGET, pcall cannot catch it) and the state
 * works afterwards, and linear work on 1 MiB strings stays well within the
 * default budget.
 */
#include "testutil.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rules/luapat.h"
#include "rules/sandbox.h"

/* ---- the Lua side ----------------------------------------------------------- */

static const char lua_driver[] =
    "-- Compares the real string library (orig) with sl_luapat's functions (mine):\n"
    "-- returns a function that runs a list of cases {name = \"find\", args = pack(...)}\n"
    "-- and returns the descriptions of those whose results differ.\n"
    "local orig, mine = ...\n"
    "local pack, unpack, concat = table.pack, table.unpack, table.concat\n"
    "local fmt, select = string.format, select\n"
    "local ogsub = orig.gsub\n"
    "\n"
    "local function show1(v)\n"
    "    local t = type(v)\n"
    "    if t == \"string\" then\n"
    "        return (ogsub(fmt(\"%q\", v), \"\\n\", \"n\"))\n"
    "    elseif t == \"number\" then\n"
    "        return math.type(v) .. \":\" .. tostring(v)\n"
    "    end\n"
    "    return t == \"function\" and \"function\" or tostring(v)\n"
    "end\n"
    "\n"
    "local function showall(r, from)\n"
    "    local o = {}\n"
    "    for i = from or 1, r.n do\n"
    "        o[#o + 1] = show1(r[i])\n"
    "    end\n"
    "    return concat(o, \", \")\n"
    "end\n"
    "\n"
    "-- Error messages are compared whole, except the function name of argument\n"
    "-- errors (the real functions are found as \"string.find\", ours are not).\n"
    "local function err(m)\n"
    "    if type(m) ~= \"string\" then\n"
    "        return \"error: a \" .. type(m)\n"
    "    end\n"
    "    return \"error: \" .. ogsub(m, \"to '[^']*'\", \"to '?'\")\n"
    "end\n"
    "\n"
    "local function run(lib, name, args)\n"
    "    local log, a = {}, {}\n"
    "    for i = 1, args.n do\n"
    "        a[i] = args[i]\n"
    "    end\n"
    "    if name == \"gsub\" and type(a[3]) == \"function\" then\n"
    "        local f = a[3]\n"
    "        a[3] = function(...)\n"
    "            log[#log + 1] = \"(\" .. showall(pack(...)) .. \")\"\n"
    "            return f(...)\n"
    "        end\n"
    "    end\n"
    "    local r = pack(pcall(lib[name], unpack(a, 1, args.n)))\n"
    "    if not r[1] then\n"
    "        return err(r[2]) .. (#log > 0 and \" calls \" .. concat(log) or \"\")\n"
    "    end\n"
    "    if name ~= \"gmatch\" then\n"
    "        return showall(r, 2) .. (#log > 0 and \" calls \" .. concat(log) or \"\")\n"
    "    end\n"
    "    local it, out = r[2], {}\n"
    "    for _ = 1, 100 do\n"
    "        local x = pack(pcall(it))\n"
    "        if not x[1] then\n"
    "            out[#out + 1] = err(x[2])\n"
    "            break\n"
    "        end\n"
    "        if x.n == 1 then\n"
    "            break\n"
    "        end\n"
    "        out[#out + 1] = \"[\" .. showall(x, 2) .. \"]\"\n"
    "    end\n"
    "    return concat(out, \" \")\n"
    "end\n"
    "\n"
    "return function(cases)\n"
    "    local fails = {}\n"
    "    for i, c in ipairs(cases) do\n"
    "        local a, b = run(orig, c.name, c.args), run(mine, c.name, c.args)\n"
    "        if a ~= b then\n"
    "            local what = fmt(\"case %d: %s(%s)\", i, c.name, showall(c.args))\n"
    "            fails[#fails + 1] = fmt(\"%s\\n    lua:  %s\\n    ours: %s\", what, a, b)\n"
    "        end\n"
    "    end\n"
    "    return fails\n"
    "end\n";

static const char lua_cases[] =
    "-- Hand-written cases: every feature of §6.4.1 and of find/match/gmatch/gsub,\n"
    "-- the edge cases of each, and the errors. Returns the list.\n"
    "local cases = {}\n"
    "local function C(name, ...)\n"
    "    cases[#cases + 1] = {name = name, args = table.pack(...)}\n"
    "end\n"
    "\n"
    "local all = {}\n"
    "for c = 0, 255 do\n"
    "    all[#all + 1] = string.char(c)\n"
    "end\n"
    "all = table.concat(all)\n"
    "\n"
    "-- find: init positions, plain searches, patterns without specials.\n"
    "C(\"find\", \"hello world\", \"o\")\n"
    "C(\"find\", \"hello world\", \"o\", 6)\n"
    "C(\"find\", \"hello world\", \"o\", -3)\n"
    "C(\"find\", \"hello world\", \"o\", -100)\n"
    "C(\"find\", \"hello world\", \"o\", 0)\n"
    "C(\"find\", \"hello world\", \"o\", 100)\n"
    "C(\"find\", \"hello world\", \"\", 11)\n"
    "C(\"find\", \"hello world\", \"\", 12)\n"
    "C(\"find\", \"hello world\", \"\", 13)\n"
    "C(\"find\", \"hello world\", \"\", -1)\n"
    "C(\"find\", \"hello world\", \"d\", -1)\n"
    "C(\"find\", \"hello world\", \"h\", -11)\n"
    "C(\"find\", \"hello world\", \"h\", -12)\n"
    "C(\"find\", \"hello\", \"l+\")\n"
    "C(\"find\", \"hello\", \"(l)(l)\")\n"
    "C(\"find\", \"hello\", \"()ll()\")\n"
    "C(\"find\", \"hello\", \"(h)(e)(l)(l)(o)\")\n"
    "C(\"find\", \"a.b\", \".\", 1, true)\n"
    "C(\"find\", \"a.b\", \"%.\")\n"
    "C(\"find\", \"a+b\", \"+\", 1, true)\n"
    "C(\"find\", \"a+b\", \"a+b\")\n"
    "C(\"find\", \"a+b\", \"a+b\", 1, true)\n"
    "C(\"find\", \"a+b\", \"a+b\", 2, true)\n"
    "C(\"find\", \"a)b\", \")\")\n"
    "C(\"find\", \"a]b\", \"]\")\n"
    "C(\"find\", \"a]b\", \"a]\")\n"
    "C(\"find\", \"\", \"\")\n"
    "C(\"find\", \"\", \"\", 1)\n"
    "C(\"find\", \"\", \"\", 2)\n"
    "C(\"find\", \"\", \"a\")\n"
    "C(\"find\", \"\", \"a*\")\n"
    "C(\"find\", \"\", \".\")\n"
    "C(\"find\", \"abc\", \"^b\")\n"
    "C(\"find\", \"abc\", \"^a\")\n"
    "C(\"find\", \"abc\", \"^b\", 2)\n"
    "C(\"find\", \"abc\", \"c$\")\n"
    "C(\"find\", \"abc\", \"b$\")\n"
    "C(\"find\", \"abc\", \"$\")\n"
    "C(\"find\", \"abc\", \"^$\")\n"
    "C(\"find\", \"\", \"^$\")\n"
    "C(\"find\", \"a$c\", \"$c\")\n"
    "C(\"find\", \"a$c\", \"a$c\")\n"
    "C(\"find\", \"a^c\", \"a^c\")\n"
    "C(\"find\", \"a^c\", \"^c\")\n"
    "C(\"find\", \"aaa\", \"a-\", 2)\n"
    "C(\"find\", \"x%d\", \"%d\", 1, true)\n"
    "C(\"find\", \"x%d\", \"%d\", 1, 1)\n"
    "C(\"find\", \"x%d\", \"%d\", 1, false)\n"
    "C(\"find\", \"x1\", \"%d\", 1, nil)\n"
    "C(\"find\", \"x1\", \"%d\", nil, true)\n"
    "C(\"find\", \"abc\", \"b\", 2.0)\n"
    "C(\"find\", \"abc\", \"b\", 1.5)\n"
    "C(\"find\", \"abc\", \"b\", \"2\")\n"
    "C(\"find\", \"abc\", \"b\", \"x\")\n"
    "C(\"find\", 12345, 3)\n"
    "C(\"find\", 12.5, \"%.\")\n"
    "C(\"find\", nil, \"a\")\n"
    "C(\"find\", \"a\", nil)\n"
    "C(\"find\", \"a\", {})\n"
    "C(\"find\", \"ab\\0cd\", \"\\0\")\n"
    "C(\"find\", \"ab\\0cd\", \"%z\")\n"
    "C(\"find\", \"ab\\0cd\", \"[\\0]\")\n"
    "C(\"find\", \"ab\\0cd\", \"b\\0c\")\n"
    "C(\"find\", \"ab\\0cd\", \"b\\0c\", 1, true)\n"
    "C(\"find\", \"ab\\0cd\", \"b%Zc\")\n"
    "C(\"find\", \"ab\\0cd\", \".\\0.\")\n"
    "C(\"find\", (\"x\"):rep(100) .. \"needle\", \"needle\")\n"
    "C(\"find\", (\"x\"):rep(100) .. \"needle\", \"needle\", 1, true)\n"
    "C(\"find\", (\"ab\"):rep(50), (\"ab\"):rep(20) .. \"c\")\n"
    "C(\"find\", (\"ab\"):rep(50), (\"ab\"):rep(20) .. \"c\", 1, true)\n"
    "C(\"find\", (\"ab\"):rep(50) .. \"c\", (\"ab\"):rep(20) .. \"c\")\n"
    "C(\"find\", \"the quick brown fox\", \"quick\", 5)\n"
    "C(\"find\", \"the quick brown fox\", \"quick\", 6)\n"
    "C(\"find\", \"the quick brown fox\", \"%s\", 5)\n"
    "C(\"find\", \"abcabc\", \"c\", -2)\n"
    "C(\"find\", \"aXb\", \"%u\")\n"
    "C(\"find\", \"a.b.c\", \".\", 2, true)\n"
    "\n"
    "-- match: captures, quantifiers, anchors.\n"
    "C(\"match\", \"key=value\", \"(%w+)=(%w+)\")\n"
    "C(\"match\", \"  trim me  \", \"^%s*(.-)%s*$\")\n"
    "C(\"match\", \"2024-02-29\", \"(%d+)-(%d+)-(%d+)\")\n"
    "C(\"match\", \"2024-02-29\", \"^(%d%d%d%d)%-(%d%d)%-(%d%d)$\")\n"
    "C(\"match\", \"hello\", \"()ll()\")\n"
    "C(\"match\", \"hello\", \"h(.)(.)\")\n"
    "C(\"match\", \"hello\", \".-l\")\n"
    "C(\"match\", \"hello\", \".*l\")\n"
    "C(\"match\", \"hello\", \"l*\")\n"
    "C(\"match\", \"hello\", \"x*\")\n"
    "C(\"match\", \"hello\", \"x?h\")\n"
    "C(\"match\", \"hello\", \"he?l\")\n"
    "C(\"match\", \"hello\", \"hx?e\")\n"
    "C(\"match\", \"hello\", \"h.-o$\")\n"
    "C(\"match\", \"hello\", \"[aeiou]+\")\n"
    "C(\"match\", \"hello\", \"[^aeiou]+\")\n"
    "C(\"match\", \"hello\", \"[a-f]\")\n"
    "C(\"match\", \"HeLLo\", \"%u+\")\n"
    "C(\"match\", \"HeLLo\", \"%l+\")\n"
    "C(\"match\", \"hello\", \"\")\n"
    "C(\"match\", \"hello\", \"()\")\n"
    "C(\"match\", \"hello\", \"()\", 3)\n"
    "C(\"match\", \"hello\", \"()\", 6)\n"
    "C(\"match\", \"hello\", \"()\", 7)\n"
    "C(\"match\", \"hello\", \"o()\", -1)\n"
    "C(\"match\", \"hello\", \"(h)(e)(l)(l)(o)\")\n"
    "C(\"match\", \"hello\", \"((h)(e))\")\n"
    "C(\"match\", \"hello\", \"(h(e(l)))\")\n"
    "C(\"match\", \"hello\", \"((((()))))\")\n"
    "C(\"match\", \"hello\", \"(.-)(l+)(.*)\")\n"
    "C(\"match\", \"hello\", \"(.*)(l+)(.*)\")\n"
    "C(\"match\", \"hello\", \"(.-)(l-)(.*)\")\n"
    "C(\"match\", \"aaab\", \"a-b\")\n"
    "C(\"match\", \"aaab\", \"^a-$\")\n"
    "C(\"match\", \"aaab\", \"a+\")\n"
    "C(\"match\", \"aaab\", \"a+b\")\n"
    "C(\"match\", \"aaab\", \"a*ab\")\n"
    "C(\"match\", \"aaab\", \"a-ab\")\n"
    "C(\"match\", \"aaab\", \"a?ab\")\n"
    "C(\"match\", \"aaab\", \"a?a?a?a?b\")\n"
    "C(\"match\", \"aaab\", \"(a?)(a?)(a?)(a?)b\")\n"
    "C(\"match\", \"aaab\", \".+\")\n"
    "C(\"match\", \"aaab\", \".-\")\n"
    "C(\"match\", \"aaab\", \".-$\")\n"
    "C(\"match\", \"aaab\", \".*$\")\n"
    "C(\"match\", \"aaab\", \".+$\")\n"
    "C(\"match\", \"aaab\", \"^.-b$\")\n"
    "C(\"match\", \"a*b\", \"a**\")\n"
    "C(\"match\", \"**\", \"^**\")\n"
    "C(\"match\", \"+\", \"+\")\n"
    "C(\"match\", \"-x\", \"-x\")\n"
    "C(\"match\", \"?\", \"?\")\n"
    "C(\"match\", \"a-b\", \"a-b\")\n"
    "C(\"match\", \"a-b\", \"a%-b\")\n"
    "C(\"match\", \"a(b\", \"%(\")\n"
    "C(\"match\", \"(()\", \"%(%(%)\")\n"
    "C(\"match\", \"a.b\", \"a.b\")\n"
    "C(\"match\", \"a^b\", \"a^b\")\n"
    "C(\"match\", \"a$b\", \"a$b\")\n"
    "C(\"match\", \"a$\", \"a$$\")\n"
    "C(\"match\", \"a$$\", \"a$*\")\n"
    "C(\"match\", \"]\", \"]\")\n"
    "C(\"match\", \"]]\", \"]+\")\n"
    "C(\"match\", \"x\", \"[x]*\")\n"
    "C(\"match\", \"x\", \"%x\")\n"
    "C(\"match\", \"q\", \"%q\")\n"
    "C(\"match\", \"Q\", \"%q\")\n"
    "C(\"match\", \"%\", \"%%\")\n"
    "C(\"match\", \"#\", \"%#\")\n"
    "C(\"match\", \"a\", \"%a-\")\n"
    "C(\"match\", \"hello world from lua\", \"(%w+) (%w+)\")\n"
    "C(\"match\", \"hello world from lua\", \"(%w+)$\")\n"
    "C(\"match\", \"  x\", \"^%s*()\")\n"
    "C(\"match\", \"abc\", \"b\", -2)\n"
    "C(\"match\", \"abc\", \"^b\", -2)\n"
    "C(\"match\", \"abc\", \"^b\", 2)\n"
    "C(\"match\", \"abc\", \"a\", 10)\n"
    "\n"
    "-- Classes over every byte, in and out of sets.\n"
    "for k in (\"acdglpsuwxz\"):gmatch(\".\") do\n"
    "    C(\"gsub\", all, \"%\" .. k, \"\")\n"
    "    C(\"gsub\", all, \"%\" .. k:upper(), \"\")\n"
    "    C(\"gsub\", all, \"[%\" .. k .. \"]\", \"\")\n"
    "end\n"
    "C(\"gsub\", all, \".\", \"x\")\n"
    "C(\"gsub\", all, \"[^%w_]\", \"\")\n"
    "C(\"gsub\", all, \"[%a%d]\", \"\")\n"
    "C(\"gsub\", all, \"[\\128-\\255]\", \"\")\n"
    "C(\"gsub\", all, \"[\\0-\\31]\", \"\")\n"
    "\n"
    "-- Sets.\n"
    "C(\"match\", \"abc-\", \"[a-]+\")\n"
    "C(\"match\", \"-abc\", \"[-a]+\")\n"
    "C(\"match\", \"a%b\", \"[%%]\")\n"
    "C(\"match\", \"a]b\", \"[]]\")\n"
    "C(\"match\", \"a]b\", \"[^]]+\")\n"
    "C(\"match\", \"a]b\", \"[]a]+\")\n"
    "C(\"match\", \"z-d\", \"[%a-z]+\")\n"
    "C(\"match\", \"d\", \"[a-%d]\")\n"
    "C(\"match\", \"%\", \"[a-%d]\")\n"
    "C(\"match\", \"abc\", \"[z-a]\")\n"
    "C(\"match\", \"abc\", \"[c-c]\")\n"
    "C(\"match\", \"]^\", \"[]^]+\")\n"
    "C(\"match\", \"^a\", \"[%^a]+\")\n"
    "C(\"match\", \"a^\", \"[a^]+\")\n"
    "C(\"match\", \"^\", \"[^^]\")\n"
    "C(\"match\", \"a\", \"[^^]\")\n"
    "C(\"match\", \"[\", \"[[]\")\n"
    "C(\"match\", \"a-b\", \"[%w%-]+\")\n"
    "C(\"match\", \"a.b\", \"[.]\")\n"
    "C(\"match\", \"ab\", \"[.]\")\n"
    "C(\"match\", \"a_1\", \"[%w_]+\")\n"
    "C(\"match\", \"x y\\tz\", \"[^%s]+$\")\n"
    "C(\"match\", \"A1\", \"[%A]\")\n"
    "C(\"match\", \"A1\", \"[^%A]\")\n"
    "C(\"match\", \"]\", \"[%]]\")\n"
    "C(\"match\", \"a-z\", \"[a%-z]+\")\n"
    "\n"
    "-- Malformed patterns; the errors come only when the matcher gets there.\n"
    "C(\"find\", \"abc\", \"[\")\n"
    "C(\"find\", \"abc\", \"[a\")\n"
    "C(\"find\", \"abc\", \"[]\")\n"
    "C(\"find\", \"abc\", \"[^]\")\n"
    "C(\"find\", \"abc\", \"[%\")\n"
    "C(\"find\", \"abc\", \"[%]\")\n"
    "C(\"find\", \"abc\", \"[a%]\")\n"
    "C(\"find\", \"abc\", \"%\")\n"
    "C(\"find\", \"abc\", \"a%\")\n"
    "C(\"find\", \"xyz\", \"a%\")\n"
    "C(\"find\", \"b\", \"a[\")\n"
    "C(\"find\", \"a\", \"a[\")\n"
    "C(\"find\", \"abc\", \"%b\")\n"
    "C(\"find\", \"abc\", \"%ba\")\n"
    "C(\"find\", \"abc\", \"a%ba\")\n"
    "C(\"find\", \"xyz\", \"a%ba\")\n"
    "C(\"find\", \"abc\", \"%f\")\n"
    "C(\"find\", \"abc\", \"%fa\")\n"
    "C(\"find\", \"abc\", \"%f[a\")\n"
    "C(\"find\", \"abc\", \"(\")\n"
    "C(\"find\", \"abc\", \"(a\")\n"
    "C(\"find\", \"xyz\", \"(a\")\n"
    "C(\"match\", \"abc\", \"(a\")\n"
    "C(\"match\", \"abc\", \"(a)(b\")\n"
    "C(\"match\", \"abc\", \")\")\n"
    "C(\"match\", \"abc\", \"a)\")\n"
    "C(\"match\", \"abc\", \"(a))\")\n"
    "C(\"match\", \"abc\", \"(a)b)\")\n"
    "C(\"match\", \"abc\", \"%1\")\n"
    "C(\"match\", \"abc\", \"(a)%2\")\n"
    "C(\"match\", \"abc\", \"(a%1)\")\n"
    "C(\"match\", \"abc\", \"%0\")\n"
    "C(\"match\", \"abc\", \"(a)%0\")\n"
    "C(\"match\", \"abc\", \"x%0\")\n"
    "C(\"match\", \"abc\", \"(()\")\n"
    "C(\"match\", \"abc\", \"a%\")\n"
    "C(\"match\", \"abc\", (\"(a\"):rep(33))\n"
    "C(\"match\", (\"a\"):rep(40), (\"(a\"):rep(32) .. (\"%)\"):rep(32))\n"
    "C(\"match\", (\"a\"):rep(40), (\"(a\"):rep(33))\n"
    "C(\"match\", (\"a\"):rep(40), (\"(a)\"):rep(32))\n"
    "C(\"match\", (\"a\"):rep(40), (\"(a)\"):rep(33))\n"
    "C(\"match\", (\"a\"):rep(40), (\"()\"):rep(32))\n"
    "C(\"match\", (\"a\"):rep(40), (\"()\"):rep(33))\n"
    "C(\"gsub\", \"abc\", \"[\", \"x\")\n"
    "C(\"gsub\", \"xyz\", \"a[\", \"x\")\n"
    "C(\"gmatch\", \"abc\", \"[\")\n"
    "C(\"gmatch\", \"xyz\", \"a[\")\n"
    "C(\"gmatch\", \"abc\", \"(\")\n"
    "C(\"gmatch\", \"abc\", \")\")\n"
    "\n"
    "-- Nesting depth (\"pattern too complex\").\n"
    "for _, n in ipairs({150, 197, 198, 199, 200, 201, 250, 300}) do\n"
    "    C(\"match\", (\"a\"):rep(n), (\"a?\"):rep(n))\n"
    "    C(\"match\", \"b\", (\"a?\"):rep(n))\n"
    "end\n"
    "C(\"match\", (\"a\"):rep(30), (\"a*\"):rep(250))\n"
    "C(\"match\", (\"a\"):rep(30), (\"a-\"):rep(250))\n"
    "for _, n in ipairs({198, 199, 200}) do\n"
    "    C(\"match\", (\"a\"):rep(n) .. \"b\", (\"a?\"):rep(n) .. \"b\")\n"
    "    C(\"match\", (\"ab\"):rep(n), (\"a+b\"):rep(n))\n"
    "    C(\"match\", (\"ab\"):rep(n), (\"a*b\"):rep(n))\n"
    "    C(\"match\", (\"ab\"):rep(n), (\"a-b\"):rep(n))\n"
    "    C(\"match\", (\"ab\"):rep(n), (\"[a]-b\"):rep(n))\n"
    "    C(\"match\", (\"ab\"):rep(n), (\".-b\"):rep(n))\n"
    "    C(\"match\", (\"ab\"):rep(n), (\"a?b\"):rep(n))\n"
    "    C(\"gsub\", (\"ab\"):rep(n), (\"(a)b\"):rep(20) .. (\"a-b\"):rep(n - 20), \"x\")\n"
    "end\n"
    "C(\"match\", (\"a\"):rep(300), (\"a*\"):rep(198) .. \"$\")\n"
    "C(\"match\", (\"a\"):rep(300), (\"a*\"):rep(199) .. \"$\")\n"
    "C(\"match\", (\"a\"):rep(300), (\"a*\"):rep(200) .. \"$\")\n"
    "C(\"match\", (\"a\"):rep(300), (\"(a)\"):rep(30) .. (\"a?\"):rep(170))\n"
    "C(\"match\", (\"a\"):rep(300), (\"(a)\"):rep(30) .. (\"a?\"):rep(169))\n"
    "\n"
    "-- Back-references.\n"
    "C(\"match\", \"abab\", \"(ab)%1\")\n"
    "C(\"match\", \"abac\", \"(ab)%1\")\n"
    "C(\"match\", \"aa\", \"(a)%1\")\n"
    "C(\"match\", \"abcbc\", \"a(b(c))%1\")\n"
    "C(\"match\", \"abcbcc\", \"a(b(c))%1%2\")\n"
    "C(\"match\", \"x=1,x=1\", \"(%w)=(%d),%1=%2\")\n"
    "C(\"match\", \"x=1,y=1\", \"(%w)=(%d),%1=%2\")\n"
    "C(\"match\", 'say \"hi\" ok', \"([\\\"'])(.-)%1\")\n"
    "C(\"match\", \"say 'hi\\\" ok' x\", \"([\\\"'])(.-)%1\")\n"
    "C(\"match\", \"aa\", \"()a%1\")\n"
    "C(\"match\", \"aa*\", \"(a)%1*\")\n"
    "C(\"match\", \"aaa\", \"(a)%1+\")\n"
    "C(\"match\", \"abcabc\", \"(.+)%1\")\n"
    "C(\"match\", \"abcab\", \"(.+)%1\")\n"
    "C(\"match\", \"xyzxyzxyz\", \"^(.-)%1%1$\")\n"
    "C(\"match\", \"abba\", \"(a)(b)%2%1\")\n"
    "C(\"match\", \"\", \"()%1\")\n"
    "C(\"find\", \"hello hello\", \"(h%a+) %1\")\n"
    "\n"
    "-- %b and %f.\n"
    "C(\"match\", \"f(a(b)c)d\", \"%b()\")\n"
    "C(\"match\", \"((\", \"%b()\")\n"
    "C(\"match\", \"x)y(\", \"%b)(\")\n"
    "C(\"match\", \"'a'b'\", \"%b''\")\n"
    "C(\"match\", \"[[x]]\", \"%b[]\")\n"
    "C(\"match\", \"(a)(b)\", \"%b()%b()\")\n"
    "C(\"match\", \"(a)(b)\", \"%b()+\")\n"
    "C(\"match\", \"(a)+\", \"%b()+\")\n"
    "C(\"match\", \"(a)**\", \"%b()*\")\n"
    "C(\"match\", \"f(x, g(y)) + h(z)\", \"(%w+)(%b())\")\n"
    "C(\"match\", \"no parens\", \"%b()\")\n"
    "C(\"match\", \"(unclosed\", \"%b()\")\n"
    "C(\"match\", \")\", \"%b()\")\n"
    "C(\"match\", \"\", \"%b()\")\n"
    "C(\"gsub\", \"f(x) g(y) h(\", \"%b()\", \"\")\n"
    "C(\"gsub\", \"THE (quick) fox\", \"%f[%a]%a+\", \"W\")\n"
    "C(\"find\", \"hello world\", \"%f[%w]%w+\", 2)\n"
    "C(\"find\", \"hello world\", \"%f[%W]\")\n"
    "C(\"match\", \"''\", \"%f[']'\", 2)\n"
    "C(\"match\", \"''\", \"%f[']'\")\n"
    "C(\"find\", \"\\0\", \"%f[%z]\")\n"
    "C(\"find\", \"abc\", \"%f[%z]\")\n"
    "C(\"find\", \"abc\", \"%f[%Z]\")\n"
    "C(\"find\", \"\", \"%f[%z]\")\n"
    "C(\"find\", \"\", \"%f[^%z]\")\n"
    "C(\"gsub\", \"hello\", \"%f[%l]\", \"|\")\n"
    "C(\"gsub\", \"hello big world\", \"%f[%a]\", \"<\")\n"
    "C(\"gsub\", \"hello big world\", \"%f[%A]\", \">\")\n"
    "C(\"gsub\", \"THE (quick) brOWN FOx\", \"%f[%a]%u+%f[%A]\", \"X\")\n"
    "C(\"match\", \"ab\", \"%f[b]b\")\n"
    "C(\"match\", \"ab\", \"%f[a]a\")\n"
    "C(\"match\", \"a-b\", \"%f[-]-\")\n"
    "C(\"match\", \"x]y\", \"%f[]]]\")\n"
    "\n"
    "-- gsub: replacement strings.\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\", 1)\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\", 0)\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\", -1)\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\", 1.0)\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\", 1.5)\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\", \"1\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"0\", {})\n"
    "C(\"gsub\", \"hello world\", \"(o)\", \"%1%1\")\n"
    "C(\"gsub\", \"hello world\", \"(o)\", \"%0%0\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"%1\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"%2\")\n"
    "C(\"gsub\", \"hello world\", \"(o)\", \"%2\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"%%\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"%\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"x%\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"%x\")\n"
    "C(\"gsub\", \"hello world\", \"o\", \"%\\0\")\n"
    "C(\"gsub\", \"hello world\", \"(l)(l)\", \"%2%1\")\n"
    "C(\"gsub\", \"hello world\", \"()l\", \"%1\")\n"
    "C(\"gsub\", \"hello world\", \"(w)()\", \"[%2%1%0]\")\n"
    "C(\"gsub\", \"hello world\", \"%w+\", \"<%0>\")\n"
    "C(\"gsub\", \"hello world\", \"(%w+) (%w+)\", \"%2 %1\")\n"
    "C(\"gsub\", \"hello\", \"\", \"-\")\n"
    "C(\"gsub\", \"hello\", \"x*\", \"-\")\n"
    "C(\"gsub\", \"hello\", \"l*\", \"-\")\n"
    "C(\"gsub\", \"hello\", \".-\", \"-\")\n"
    "C(\"gsub\", \"hello\", \"()\", \"%1\")\n"
    "C(\"gsub\", \"\", \"\", \"x\")\n"
    "C(\"gsub\", \"\", \"x*\", \"y\")\n"
    "C(\"gsub\", \"hello world\", \"%w*\", \"X\")\n"
    "C(\"gsub\", \"abc\", \"^\", \">\")\n"
    "C(\"gsub\", \"abc\", \"$\", \"<\")\n"
    "C(\"gsub\", \"abc\", \"^a\", \"A\")\n"
    "C(\"gsub\", \"abc\", \"^b\", \"B\")\n"
    "C(\"gsub\", \"aaa\", \"^a\", \"b\")\n"
    "C(\"gsub\", \"abc\", \"^\", \">\", 0)\n"
    "C(\"gsub\", \"hello\", \"l\", 1)\n"
    "C(\"gsub\", \"hello\", \"l\", 1.5)\n"
    "C(\"gsub\", 12321, 2, 9)\n"
    "C(\"gsub\", \"hello\", \"l\", true)\n"
    "C(\"gsub\", \"hello\", \"l\")\n"
    "C(\"gsub\", \"hello\", \"l\", nil, {})\n"
    "C(\"gsub\", \"hello\", \"(\", \"x\")\n"
    "C(\"gsub\", \"hello\", \"(l\", \"x\")\n"
    "C(\"gsub\", \"hello\", \"l)\", \"x\")\n"
    "C(\"gsub\", \"abc\", \"%w\", \"%0%0\", 2)\n"
    "C(\"gsub\", \"a,b,,c\", \",\", \";\")\n"
    "C(\"gsub\", \"a  b   c\", \"%s+\", \" \")\n"
    "C(\"gsub\", \"  x  \", \"^%s+\", \"\")\n"
    "C(\"gsub\", \"  x  \", \"%s+$\", \"\")\n"
    "C(\"gsub\", (\"x\"):rep(100), \"x\", \"yy\")\n"
    "C(\"gsub\", (\"ab\"):rep(30), \"ab\", \"%0\", 7)\n"
    "\n"
    "-- gsub: tables and functions.\n"
    "C(\"gsub\", \"hello world\", \"%w+\", {hello = \"HI\", world = false})\n"
    "C(\"gsub\", \"hello world\", \"%w+\", {hello = 1, world = 2.5})\n"
    "C(\"gsub\", \"hello world\", \"%w+\", {hello = {}})\n"
    "C(\"gsub\", \"hello world\", \"%w+\", {hello = true})\n"
    "C(\"gsub\", \"hello world\", \"(%w+) (%w+)\", {hello = \"X\"})\n"
    "C(\"gsub\", \"hello world\", \"()%w+\", {[1] = \"one\", [7] = \"seven\"})\n"
    "local upper = setmetatable({}, {__index = function(_, k) return k:upper() end})\n"
    "C(\"gsub\", \"hello world\", \"%w+\", upper)\n"
    "C(\"gsub\", \"hello world\", \"%w+\", string.upper)\n"
    "C(\"gsub\", \"hello world\", \"%w+\", function(w) return #w end)\n"
    "C(\"gsub\", \"hello world\", \"%w+\", function() end)\n"
    "C(\"gsub\", \"hello world\", \"%w+\", function() return false end)\n"
    "C(\"gsub\", \"hello world\", \"%w+\", function() return {} end)\n"
    "C(\"gsub\", \"hello world\", \"%w+\", function() return true end)\n"
    "C(\"gsub\", \"hello world\", \"(%w)(%w*)\", function(a, b) return a:upper() .. b end)\n"
    "C(\"gsub\", \"hello world\", \"()(%w+)()\", function(i, w, j) return i .. w .. j end)\n"
    "C(\"gsub\", \"hello world\", \"\", function(...) return select(\"#\", ...) end)\n"
    "C(\"gsub\", \"hello world\", \"o\", function(o) return nil end, 1)\n"
    "C(\"gsub\", \"hello\", \"(l)(l\", function(a) return a end)\n"
    "C(\"gsub\", \"abc\", \"%w\", function(c) error(\"boom \" .. c, 0) end)\n"
    "\n"
    "-- gmatch.\n"
    "C(\"gmatch\", \"one two three\", \"%a+\")\n"
    "C(\"gmatch\", \"k=v, a=b\", \"(%w+)=(%w+)\")\n"
    "C(\"gmatch\", \"abc\", \"\")\n"
    "C(\"gmatch\", \"abc\", \"b*\")\n"
    "C(\"gmatch\", \"abc\", \"()\")\n"
    "C(\"gmatch\", \"abc\", \".\", 2)\n"
    "C(\"gmatch\", \"abc\", \".\", -1)\n"
    "C(\"gmatch\", \"abc\", \".\", -10)\n"
    "C(\"gmatch\", \"abc\", \".\", 0)\n"
    "C(\"gmatch\", \"abc\", \".\", 4)\n"
    "C(\"gmatch\", \"abc\", \"\", 4)\n"
    "C(\"gmatch\", \"abc\", \".\", 10)\n"
    "C(\"gmatch\", \"abc\", \".\", 1.5)\n"
    "C(\"gmatch\", \"a,b,,c\", \"([^,]*)\")\n"
    "C(\"gmatch\", \"a,b,,c,\", \"([^,]*)\")\n"
    "C(\"gmatch\", \"^a^a\", \"^a\")\n"
    "C(\"gmatch\", \"hello world\", \"%f[%w]%w+\")\n"
    "C(\"gmatch\", \"hello world\", \"()(o)()\")\n"
    "C(\"gmatch\", \"aaa\", \"a-\")\n"
    "C(\"gmatch\", \"aaa\", \"a*\")\n"
    "C(\"gmatch\", \"x=1 y=22 z=\", \"(%w)=(%d*)\")\n"
    "C(\"gmatch\", \"(a)(b(c))\", \"%b()\")\n"
    "C(\"gmatch\", \"abcabc\", \"(a)(b)\")\n"
    "C(\"gmatch\", \"abab\", \"(ab)%1\")\n"
    "C(\"gmatch\", 123123, 2)\n"
    "C(\"gmatch\", \"abc\", nil)\n"
    "\n"
    "-- Longer patterns (compiled outside the stack buffer).\n"
    "C(\"match\", (\"1\"):rep(40), (\"%d\"):rep(30))\n"
    "C(\"match\", (\"1\"):rep(40), \"^\" .. (\"%d\"):rep(40) .. \"$\")\n"
    "C(\"match\", (\"1\"):rep(40), \"^\" .. (\"%d\"):rep(41) .. \"$\")\n"
    "C(\"find\", (\"abc\"):rep(40), (\"abc\"):rep(20) .. \"()\")\n"
    "C(\"gsub\", (\"abc\"):rep(40), (\"[abc]\"):rep(20), \"x\")\n"
    "C(\"gmatch\", (\"abc\"):rep(40), (\"[abc]\"):rep(20))\n"
    "C(\"find\", (\"a\"):rep(100), (\"[a]\"):rep(50) .. \"(\" .. (\"a\"):rep(10) .. \")\")\n"
    "C(\"gsub\", (\"a\"):rep(60), (\"a?\"):rep(60), \"%0\")\n"
    "C(\"match\", (\"a\"):rep(100), (\"%f[a]a?\"):rep(20) .. (\"%bab\"):rep(3))\n"
    "\n"
    "return cases\n";

static const char lua_random[] =
    "-- Random cases from a small alphabet (seeded, so the same every run):\n"
    "-- patterns built from pattern items, quantifiers and malformed pieces, and\n"
    "-- subjects over the bytes those items talk about. Returns the list.\n"
    "local n = ...\n"
    "math.randomseed(20240229)\n"
    "local random = math.random\n"
    "local cases = {}\n"
    "\n"
    "local function words(s)\n"
    "    local t = {}\n"
    "    for w in s:gmatch(\"%S+\") do\n"
    "        t[#t + 1] = w\n"
    "    end\n"
    "    return t\n"
    "end\n"
    "local chars = words(\"a b c ( ) 1 - . % ]\")\n"
    "chars[#chars + 1], chars[#chars + 2] = \" \", \"\\0\"\n"
    "local singles = words(\"a b c . %a %d %s %w %p %A %S [ab] [^a] [a-c] [%a1] []a] [^]a]\")\n"
    "for _, w in ipairs(words(\"%( %) %. %% 1 - ] ^ $ %z [%(%)] [a-] %]\")) do\n"
    "    singles[#singles + 1] = w\n"
    "end\n"
    "singles[#singles + 1] = \" \"\n"
    "local others = words(\"( ) () ( ) %b() %bab %f[%w] %f[a] %f[^a] %1 %2 %0\")\n"
    "for _, w in ipairs(words(\"[ % [a %b %f %f[ (a )(\")) do\n"
    "    others[#others + 1] = w\n"
    "end\n"
    "local quants = {\"*\", \"+\", \"-\", \"?\"}\n"
    "local repls = words(\"x %0 %1 <%1> %2 %% % %a [%0|%1] %1%2\")\n"
    "repls[#repls + 1] = \"\"\n"
    "local tables = {{a = \"A\", b = false, [\"1\"] = 1}, {}}\n"
    "local function fn(x, ...)\n"
    "    if x == \"a\" then\n"
    "        return nil\n"
    "    end\n"
    "    return \"<\" .. tostring(x) .. select(\"#\", ...) .. \">\"\n"
    "end\n"
    "\n"
    "local function subject()\n"
    "    local t = {}\n"
    "    for i = 1, random(0, 12) do\n"
    "        t[i] = chars[random(#chars)]\n"
    "    end\n"
    "    return table.concat(t)\n"
    "end\n"
    "\n"
    "-- At most three quantifiers, so the real library never takes long.\n"
    "local function pattern()\n"
    "    local t, q = {}, 0\n"
    "    if random(5) == 1 then\n"
    "        t[1] = \"^\"\n"
    "    end\n"
    "    for _ = 1, random(1, 6) do\n"
    "        if random(6) == 1 then\n"
    "            t[#t + 1] = others[random(#others)]\n"
    "        else\n"
    "            t[#t + 1] = singles[random(#singles)]\n"
    "            if q < 3 and random(3) == 1 then\n"
    "                t[#t + 1] = quants[random(#quants)]\n"
    "                q = q + 1\n"
    "            end\n"
    "        end\n"
    "    end\n"
    "    if random(5) == 1 then\n"
    "        t[#t + 1] = \"$\"\n"
    "    end\n"
    "    return table.concat(t)\n"
    "end\n"
    "\n"
    "local function init()\n"
    "    local r = random(8)\n"
    "    if r == 1 then\n"
    "        return random(-14, 14)\n"
    "    elseif r == 2 then\n"
    "        return 0\n"
    "    end\n"
    "    return nil\n"
    "end\n"
    "\n"
    "local function add(name, ...)\n"
    "    cases[#cases + 1] = {name = name, args = table.pack(...)}\n"
    "end\n"
    "\n"
    "for _ = 1, n do\n"
    "    local s, p = subject(), pattern()\n"
    "    add(\"find\", s, p, init(), random(10) == 1 or nil)\n"
    "    add(\"match\", s, p, init())\n"
    "    add(\"gmatch\", s, p, init())\n"
    "    local r = random(10)\n"
    "    local repl = fn\n"
    "    if r <= 7 then\n"
    "        repl = repls[random(#repls)]\n"
    "    elseif r <= 9 then\n"
    "        repl = tables[random(#tables)]\n"
    "    end\n"
    "    if random(4) == 1 then\n"
    "        add(\"gsub\", s, p, repl, random(-1, 3))\n"
    "    else\n"
    "        add(\"gsub\", s, p, repl)\n"
    "    end\n"
    "end\n"
    "return cases\n";

/* ---- helpers ------------------------------------------------------------------ */

static uint64_t units;      /* charged by count_charge() */
static uint64_t unit_limit; /* count_charge() raises past it; 0: never */

static void count_charge(lua_State *L, lua_Unsigned n)
{
    units += n;
    if (unit_limit && units > unit_limit)
        luaL_error(L, "step limit reached");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A plain state with every library; ours go in the global table P. */
static lua_State *plain_state(void)
{
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    luaL_openlibs(L);
    lua_newtable(L);
    sl_luapat_install(L, -1, count_charge);
    lua_setglobal(L, "P");
    units = unit_limit = 0;
    return L;
}

/* Runs a chunk in a plain state (must not fail), with arg as its argument
 * when arg >= 0; leaves its one result on the stack. */
static void plain_run(lua_State *L, const char *src, const char *name, lua_Integer arg)
{
    if (luaL_loadbufferx(L, src, strlen(src), name, "t") != LUA_OK)
        fail_msg("%s", lua_tostring(L, -1));
    if (arg >= 0)
        lua_pushinteger(L, arg);
    if (lua_pcall(L, arg >= 0 ? 1 : 0, 1, 0) != LUA_OK)
        fail_msg("%s", lua_tostring(L, -1));
}

/* Runs the cases that the chunk src returns (given arg) through the driver;
 * fails with the differences. Returns the number of cases. */
static lua_Integer diff_cases(const char *src, const char *name, lua_Integer arg)
{
    lua_State *L = plain_state();
    if (luaL_loadbufferx(L, lua_driver, strlen(lua_driver), "=driver", "t") != LUA_OK)
        fail_msg("%s", lua_tostring(L, -1));
    lua_getglobal(L, "string");
    lua_getglobal(L, "P");
    if (lua_pcall(L, 2, 1, 0) != LUA_OK)
        fail_msg("%s", lua_tostring(L, -1));
    plain_run(L, src, name, arg);
    lua_Integer n = luaL_len(L, -1);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK)
        fail_msg("%s", lua_tostring(L, -1));
    lua_Integer nfail = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= nfail && i <= 30; i++) {
        lua_geti(L, -1, i);
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_close(L);
    if (nfail)
        fail_msg("%lld of %lld cases differ from the real string library", (long long)nfail,
                 (long long)n);
    return n;
}

/* Runs src in a sandbox; returns the code, err filled. */
static int sb_run(lua_State *L, const char *src, sl_error *err)
{
    int rc = sl_sandbox_load(L, src, strlen(src), "@rule.lua", err);
    if (rc == 0)
        rc = sl_sandbox_call(L, 0, 1, err);
    return rc;
}

/* Runs src in the sandbox; it must return true. */
static void sb_check(lua_State *L, const char *src)
{
    sl_error err = {0};
    int rc = sb_run(L, src, &err);
    if (rc)
        fail_msg("%s\n-> %s: %s", src, sl_strerror(rc), err.msg);
    if (!lua_toboolean(L, -1))
        fail_msg("%s\n-> %s", src, luaL_tolstring(L, -1, NULL));
    lua_settop(L, 0);
}

static lua_State *sandbox(uint64_t budget)
{
    sl_sandbox_options o = {.instructions = budget};
    lua_State *L = NULL;
    sl_error err = {0};
    if (sl_sandbox_new(&o, &L, &err))
        fail_msg("sl_sandbox_new: %s", err.msg);
    return L;
}

/* ---- differential tests --------------------------------------------------- */

static void test_hand_cases(void **state)
{
    (void)state;
    lua_Integer n = diff_cases(lua_cases, "=cases", -1);
    print_message("  %lld hand-written cases agree with the real library\n", (long long)n);
    assert_true(n >= 200);
}

static void test_random_cases(void **state)
{
    (void)state;
    lua_Integer n = diff_cases(lua_random, "=random", 3000);
    assert_int_equal(n, 4 * 3000);
}

/* ---- the step limit --------------------------------------------------------- */

/* Pathological matches: each would run for minutes in the real library. */
static const char *const bombs[] = {
    "return (('a'):rep(300)):find(('a-'):rep(6) .. 'b')",
    "local s = ('a'):rep(300) return s:find(('a-'):rep(6) .. 'b')",
    "return string.match(('a'):rep(300), ('.-'):rep(7) .. '$b')",
    "local n = 0 for w in (('a'):rep(300)):gmatch(('a*'):rep(6) .. 'b') do n = n + 1 end return n",
    "return (('a'):rep(300)):gsub(('a?'):rep(8) .. ('a-'):rep(4) .. 'x', 'y')",
    "return (('a'):rep(20000)):find('(.-)%1b')",
    "return (('('):rep(200000)):find('%b()')",
    "return (('a'):rep(200000)):find('a*b')",
    "return (('a'):rep(300)):gsub(('a-'):rep(6) .. 'b', function() return 'x' end)",
    "local ok, e = pcall(string.find, ('a'):rep(300), ('a-'):rep(6) .. 'b') return ok",
    "return select(2, pcall(function() return ('a'):rep(300):match(('(a-)'):rep(6) .. 'b') end))",
};

static void test_step_limit(void **state)
{
    (void)state;
    lua_State *L = plain_state();
    lua_getglobal(L, "string"); /* ours for the strings' methods too */
    sl_luapat_install(L, -1, count_charge);
    lua_pop(L, 1);
    for (size_t i = 0; i < sizeof bombs / sizeof *bombs; i++) {
        if (strstr(bombs[i], "pcall"))
            continue; /* in a plain state pcall does catch our error */
        units = 0;
        unit_limit = 1000000;
        double t0 = now_s();
        assert_int_equal(luaL_loadstring(L, bombs[i]), LUA_OK);
        int st = lua_pcall(L, 0, 1, 0);
        double dt = now_s() - t0;
        if (st == LUA_OK || !strstr(lua_tostring(L, -1), "step limit reached"))
            fail_msg("%s\n-> %s", bombs[i], lua_tostring(L, -1));
        assert_true(units > unit_limit);
        print_message("  %-78.78s %.3f s\n", bombs[i], dt);
        lua_pop(L, 1);
    }
    /* The state is fine afterwards. */
    unit_limit = 0;
    assert_int_equal(luaL_dostring(L, "return select('#', P.find('abc', '(b)')) == 3 "
                                      "and P.gsub('abc', '%w', '%0%0') == 'aabbcc'"),
                     LUA_OK);
    assert_true(lua_toboolean(L, -1));
    lua_close(L);
}

static void test_charging(void **state)
{
    (void)state;
    lua_State *L = plain_state();
    /* Linear work on 1 MiB costs a few steps per byte. */
    static const char *const linear[] = {
        "return P.gsub(('x'):rep(1 << 20), 'x', 'y')",
        "return P.gsub(('hello world '):rep(1 << 16), '%s+', ' ')",
        "return P.gsub(('hello world '):rep(1 << 16), '(%w+)', '<%1>')",
        "local n = 0 for w in P.gmatch(('hello world '):rep(1 << 16), '%a+') do n = n + 1 end "
        "return n",
        "return P.find(('x'):rep(1 << 20), ('x'):rep(1000) .. 'y', 1, true)",
        "return P.find(('x'):rep(1 << 20), 'y')",
        "return P.match(('x '):rep(1 << 19), '^.*%S')",
        "return P.find(('x '):rep(1 << 19), '.-$')",
    };
    for (size_t i = 0; i < sizeof linear / sizeof *linear; i++) {
        units = 0;
        double t0 = now_s();
        if (luaL_dostring(L, linear[i]) != LUA_OK)
            fail_msg("%s: %s", linear[i], lua_tostring(L, -1));
        print_message("  %-78.78s %7llu units %.3f s\n", linear[i], (unsigned long long)units,
                      now_s() - t0);
        assert_true(units < 1000000); /* a tenth of the default budget */
        lua_settop(L, 0);
    }
    /* Calls of less than a unit each add up: the rest is carried over. */
    units = 0;
    assert_int_equal(luaL_dostring(L, "return P.find('hello', 'l+')"), LUA_OK);
    assert_true(units <= 1);
    assert_int_equal(luaL_dostring(L, "for i = 1, 1000 do P.find('hello', 'l+') end"), LUA_OK);
    print_message("  1000 x P.find('hello', 'l+'): %llu units\n", (unsigned long long)units);
    assert_true(units >= 300);
    lua_close(L);
}

/* ---- in the sandbox ----------------------------------------------------------- */

static void test_sandbox_budget(void **state)
{
    (void)state;
    lua_State *L = sandbox(0); /* the default budget */
    for (size_t i = 0; i < sizeof bombs / sizeof *bombs; i++) {
        sl_error err = {0};
        double t0 = now_s();
        int rc = sb_run(L, bombs[i], &err);
        double dt = now_s() - t0;
        if (rc != SL_EBUDGET || !strstr(err.msg, "instruction budget of 10000000 exceeded"))
            fail_msg("%s\n-> %s: %s", bombs[i], rc ? sl_strerror(rc) : "success", err.msg);
        print_message("  %-60.60s %.3f s  %s\n", bombs[i], dt, err.msg);
        assert_true(dt < 20); /* seconds, even under the sanitizers; minutes unbounded */
        assert_int_equal(lua_gettop(L), 0);
        sb_check(L, "local t = {} for i = 1, 100 do t[i] = ('%d'):format(i) end\n"
                    "return table.concat(t):find('99100', 1, true) == 188");
    }
    sl_sandbox_close(L);
}

static void test_sandbox_linear(void **state)
{
    (void)state;
    lua_State *L = sandbox(0);
    sb_check(L,
             "local s, n = ('x'):rep(1e6):gsub('x', 'y') return n == 1e6 and s == ('y'):rep(1e6)");
    sb_check(L, "local s = ('hello world '):rep(1 << 16)\n"
                "local a, n1 = s:gsub('%s+', ' ')\n"
                "local b, n2 = s:gsub('(%w+)', '<%1>')\n"
                "local n3 = 0 for w in s:gmatch('%a+') do n3 = n3 + 1 end\n"
                "return n1 == 1 << 17 and n2 == 1 << 17 and n3 == 1 << 17\n"
                "  and s:find('world ', -6, true) == #s - 5 and s:match('^.*%S') == s:sub(1, -2)");
    sl_sandbox_close(L);
}

static void test_sandbox_installed(void **state)
{
    (void)state;
    lua_State *L = sandbox(0);
    /* Ours everywhere: the string table, the strings' methods, and the
     * helpers of lua/sluice.lua (which captured them before the seal). */
    sb_check(L, "return string.find == ('').find and string.match == ('').match\n"
                "  and string.gmatch == ('').gmatch and string.gsub == ('').gsub");
    sb_check(L,
             "local a, b, c = ('key=val'):find('(%w+)=') local k, v = ('k=v'):match('(%w)=(%w)')\n"
             "local t = {} for w in ('a b c'):gmatch('%a') do t[#t + 1] = w end\n"
             "return a == 1 and b == 4 and c == 'key' and k == 'k' and v == 'v'\n"
             "  and table.concat(t) == 'abc' and (('abc'):gsub('%w', '%0.')) == 'a.b.c.'");
    sl_sandbox_close(L);
    /* A budget small enough that the helpers' plain searches over 4 MiB
     * exceed it: they are charged, so they run our functions. */
    L = sandbox(50000);
    sl_error err = {0};
    int rc = sb_run(L, "local s = ('a'):rep(1 << 22) return sluice.str.contains(s, 'b')", &err);
    if (rc != SL_EBUDGET)
        fail_msg("-> %s: %s", rc ? sl_strerror(rc) : "success", err.msg);
    sb_check(L, "return sluice.str.contains('abc', 'b') and #sluice.str.split('a,b', ',') == 2");
    sl_sandbox_close(L);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_cases),        cmocka_unit_test(test_random_cases),
        cmocka_unit_test(test_step_limit),        cmocka_unit_test(test_charging),
        cmocka_unit_test(test_sandbox_budget),    cmocka_unit_test(test_sandbox_linear),
        cmocka_unit_test(test_sandbox_installed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
