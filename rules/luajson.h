/*
 * rules/luajson.h — JSON text <-> Lua values, without losing types.
 *
 * The rule VM hands events to Lua as lazy proxies (rules/luaproxy.h) and
 * keeps plain tables built here as a switchable alternative; sluice.json and
 * the tables path use this mapping, which keeps what most routers lose:
 *  - a JSON integer becomes a Lua integer, any other number a Lua float, and
 *    they encode back the same way (3 stays 3, 3.0 stays 3.0; integers beyond
 *    the int64 range become floats, numbers beyond the double range ±inf,
 *    which encoding refuses);
 *  - null becomes sluice.null (a unique full userdata; tostring gives
 *    "null"), never nil, so a key holding null survives the round trip;
 *  - arrays get the sluice.array metatable, so [] stays [] (a plain empty
 *    table encodes as {}); a table whose keys are exactly 1..n encodes as an
 *    array, any other table as an object (non-string keys are refused);
 *  - strings are bytes: \u escapes are decoded to UTF-8 (surrogate pairs
 *    joined), and encoding escapes only what JSON requires ('"', '\' and
 *    controls); both ways refuse strings that are not valid UTF-8.
 * Floats encode in the shortest form that reads back to the same double
 * (the fewest fraction digits between 1e-5 and 1e15, else the shortest of
 * %.15g/%.16g/%.17g), always with a '.' or an exponent; NaN and infinities
 * are refused (JSON has no such numbers).
 *
 * sluice.null and the array metatable are created once per state, in the
 * registry, by whichever function below needs them first; any state works.
 */
#ifndef SL_LUAJSON_H
#define SL_LUAJSON_H

#include "core/base/buf.h"
#include "core/base/err.h"

#include <lua.h>
#include <stddef.h>

/* Decodes [json, json + len) (strict RFC 8259, no trailing data; reads no
 * byte outside the range) and pushes the value. Returns 0, or SL_EPARSE
 * (err: "JSON: byte N: reason") / SL_ENOMEM with nothing pushed. Nesting
 * deeper than 128 is refused. A repeated object key keeps its last value.
 * Runs in protected mode: never raises a Lua error. */
int sl_luajson_push(lua_State *L, const char *json, size_t len, sl_error *err);

/* Appends the compact JSON text of the value at idx to out (object members
 * in lua_next() order). Reads tables raw: no metamethod runs, and
 * metatables other than sluice.array are ignored; userdata other than
 * sluice.null go to the state's userdata encoder when it has one (below:
 * event proxies); never raises a Lua error and leaves the stack as it was.
 * Returns 0, or SL_EINVAL (err: "$.path[3].to: reason" for a function,
 * thread or userdata no encoder takes, NaN or an infinity, a table mixing
 * key kinds or with holes, a non-string key, a string that is not UTF-8,
 * nesting over 128 — which is how a cycle ends) / SL_ENOMEM; out may hold
 * a partial text on error. */
int sl_luajson_encode(lua_State *L, int idx, sl_buf *out, sl_error *err);

/* ---- encoding userdata of other modules -----------------------------------
 *
 * A state may have one encoder for full userdata other than sluice.null
 * (rules/luaproxy.c registers the event proxies'): sl_luajson_encode() calls
 * it for every such userdata it meets, at any depth, and it appends the
 * value's text through the sl_luajson_enc_* functions below (which keep the
 * error path and the nesting limit of the encoding in progress). Like the
 * rest of encoding it must not raise Lua errors nor run Lua code; it leaves
 * the stack as it found it. */

typedef struct sl_luajson_enc sl_luajson_enc; /* an encoding in progress */

typedef struct sl_luajson_udata {
    /* Encodes the userdata at the absolute index idx. Returns 0, an SL_E…
     * code from the functions below (or one of its own, with
     * sl_luajson_enc_fail), or SL_EUNSUPPORTED when the userdata is not
     * its kind (encode then refuses it as any userdata). */
    int (*encode)(struct sl_luajson_udata *self, sl_luajson_enc *E, lua_State *L, int idx);
} sl_luajson_udata;

/* Registers u (which must outlive the state; NULL removes it) as L's
 * userdata encoder. May raise a memory error: call it in protected mode. */
void sl_luajson_set_udata(lua_State *L, sl_luajson_udata *u);

/* Appends [s, s + n) as is (valid JSON text the caller vouches for). */
int sl_luajson_enc_raw(sl_luajson_enc *E, const char *s, size_t n);
/* Appends [s, s + n) as a JSON string (quoted, escaped, UTF-8 checked). */
int sl_luajson_enc_string(sl_luajson_enc *E, const char *s, size_t n);
/* Encodes the value on top of the stack, then pops it (also on error), as
 * the member named [key, key + klen) (key must stay valid during the call)
 * or, when key is NULL, element idx of an array, for the error path. */
int sl_luajson_enc_member(sl_luajson_enc *E, const char *key, size_t klen, lua_Integer idx);
/* Encodes the value at idx (the current path, no new element). */
int sl_luajson_enc_value(sl_luajson_enc *E, int idx);
/* Fails the encoding: SL_EINVAL with "$.path: why". */
int sl_luajson_enc_fail(sl_luajson_enc *E, const char *why);
/* Fails the encoding: SL_ENOMEM. */
int sl_luajson_enc_nomem(sl_luajson_enc *E);

/* Fills the `sluice` table at the top of the stack (left there): json (a
 * table with encode and decode, Lua-callable wrappers of the two functions
 * above that raise "json.encode: …" / "json.decode: …" errors), null and
 * array (the array metatable, also callable: sluice.array(t) marks t and
 * returns it). Raises a Lua error on memory failure: call it in protected
 * mode. */
void sl_luajson_register(lua_State *L);

#endif
