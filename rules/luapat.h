/*
 * rules/luapat.h — Lua 5.4 string patterns (string.find, match, gmatch,
 * gsub) that count their work, for the sandbox (rules/sandbox.h).
 *
 * The instruction budget's count hook never fires inside C functions, so the
 * string library's pattern matching could run for minutes on one call
 * (("a"):rep(300):find(("a-"):rep(6) .. "b")). These four functions do what
 * the reference manual (§6.4, §6.4.1) says the library's do, and charge the
 * work to a caller-supplied budget as they go, so a hostile pattern ends
 * with the budget error instead of hanging a worker.
 *
 * Semantics: those of Lua 5.4.4's string library, checked against it by
 * tests/unit/test_luapat.c: init positions (negative, 0, past the end),
 * plain find, the anchors ^ and $, %a %c %d %g %l %p %s %u %w %x (and the
 * deprecated %z) with their upper-case complements in the "C" locale, sets
 * with ranges, classes and ^, the quantifiers * + - ?, captures and
 * position captures, %bxy, %f[set], back-references %1-%9, gsub with
 * string (%0-%9, %%), table and function replacements and the maximum
 * number of replacements, gmatch's init and its rule that an empty match
 * right after the previous match is skipped, the same error messages
 * (malformed patterns are reported only when the matcher reaches the bad
 * part, as the library does), the limit of 32 captures and the depth limit
 * of 200 nested matcher calls ("pattern too complex").
 *
 * Differences from the library: the matcher may try fewer start positions
 * or alternatives where they cannot succeed (it skips ahead with memchr /
 * memmem), which is invisible except in speed; the only other difference is
 * the step limit itself.
 *
 * Work is measured in steps: one per byte tested, per backtracking
 * position, per byte scanned by memchr/memmem or compared by a
 * back-reference, per pattern byte compiled and per replacement-string byte
 * expanded, and four per nested matcher call. SL_LUAPAT_STEPS_PER_UNIT
 * steps make one unit of the caller's budget; rules/luapat.c says how that
 * ratio compares with the cost of a Lua VM instruction.
 */
#ifndef SL_LUAPAT_H
#define SL_LUAPAT_H

#include <lua.h>

/* Matcher steps per budget unit. */
#define SL_LUAPAT_STEPS_PER_UNIT 16

/* Charges units of work done by a pattern function to the caller's budget.
 * Called from inside the pattern function (so with a Lua caller on the
 * stack); when the budget is spent it raises a Lua error and does not
 * return. It is called every 1024 units while a match runs and once more
 * when a call ends; steps that make less than a unit are carried over to
 * the next call of the four functions installed together. */
typedef void (*sl_luapat_charge_fn)(lua_State *L, lua_Unsigned units);

/* Sets the fields find, match, gmatch and gsub of the table at idx (Lua's
 * string library table, which is also the strings' __index, so s:find()
 * gets them too) to this module's functions, which charge their work
 * through charge (NULL: the work is counted but never charged, so there is
 * no limit). Raises a Lua memory error on allocation failure (call it in
 * protected mode); the stack is left as it was. */
void sl_luapat_install(lua_State *L, int idx, sl_luapat_charge_fn charge);

#endif
