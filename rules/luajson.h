/*
 * rules/luajson.h — JSON text <-> Lua values, without losing types.
 *
 * Events reach Lua functions as plain tables (the faster of the two ways
 * measured in bench/rules_bench.c: a table built at once against a lazy
 * userdata proxy). The mapping keeps what most routers lose:
 *  - a JSON integer becomes a Lua integer, any other number a Lua float, and
 *    they encode back the same way (3 stays 3, 3.0 stays 3.0; integers beyond
 *    the int64 range become floats);
 *  - null becomes sluice.null (a unique light userdata), never nil, so a key
 *    holding null survives the round trip;
 *  - arrays get the sluice.array metatable, so [] stays [] (a plain empty
 *    table encodes as {}); a table whose keys are exactly 1..n encodes as an
 *    array, any other table as an object (non-string keys are refused);
 *  - strings are bytes: \u escapes are decoded to UTF-8 (surrogate pairs
 *    joined), and encoding escapes only what JSON requires.
 * Floats encode in the shortest form that reads back to the same double;
 * NaN and infinities are refused (JSON has no such numbers).
 */
#ifndef SL_LUAJSON_H
#define SL_LUAJSON_H

#include "core/buf.h"
#include "core/err.h"

#include <lua.h>
#include <stddef.h>

/* Decodes [json, json + len) and pushes the value. Returns 0, or SL_EPARSE
 * (err says where) / SL_ENOMEM with nothing pushed. Nesting deeper than 128
 * is refused. Needs the sandbox's sluice helpers (for sluice.null and
 * sluice.array) to be loaded in L. */
int sl_luajson_push(lua_State *L, const char *json, size_t len, sl_error *err);

/* Appends the JSON text of the value at idx to out. Returns 0, or SL_EINVAL
 * (err names the path and the reason: a function, NaN, a cycle, a mixed
 * table, nesting over 128) / SL_ENOMEM; out may hold a partial text on
 * error. */
int sl_luajson_encode(lua_State *L, int idx, sl_buf *out, sl_error *err);

/* Registers sluice.json.encode / sluice.json.decode (Lua-callable wrappers
 * of the two functions above) into the table at the top of the stack. */
void sl_luajson_register(lua_State *L);

#endif
