/*
 * rules/luaproxy.h — events as lazy, copy-on-write Lua proxies.
 *
 * The rule VM parses each event once (sl_evview, for its pattern)
 * and hands Lua functions a proxy over that parse instead of building
 * tables: a full userdata (__name "sluice.event") holding the parsed event,
 * a node of it and the call's generation. Reading a member decodes just that
 * member, with the rules of rules/luajson.h (a JSON integer is a Lua
 * integer, other numbers floats, null is sluice.null, strings are Lua
 * strings); objects and arrays inside come out as proxies too, one per node
 * and parent, so `local d = e.data; d.x = 1` and `e.data.y = 2` change the
 * same object. Writes (set, replace, delete with nil, new keys, appending and
 * table.insert/remove on arrays) go to per-proxy overrides; the parsed event
 * is never changed.
 *
 * Encoding (sl_luajson_encode, sluice.json.encode, the rule VM's payloads)
 * copies every member nobody wrote as its original JSON text (so big
 * integers, number spellings and string escapes survive), encodes changed
 * and added members from their Lua values, and leaves deleted ones out:
 * members in their original order, added keys after in the order they were
 * first added. An object whose text repeats a key reads and iterates as the
 * last occurrence (as rules/luajson.h decodes it); encoding keeps the
 * repeats as written until the key is written or deleted (or the object
 * iterated), then only the current value, so the text always reads the
 * same with last-wins parsers.
 *
 * Compatibility with tables, so that rules written for tables keep working:
 * the state's type() says "table" for a proxy; next(), rawget(), rawset()
 * and rawlen() work on proxies like on tables (rawequal() does already);
 * getmetatable() gives sluice.array for an array proxy and nil for an
 * object; pairs() iterates members in order then added keys, ipairs(), #,
 * table.insert/remove/concat/sort/unpack work through the metamethods; and
 * sluice.table(v) turns a proxy into real tables (deep; other values are
 * returned as they are). What still differs: setmetatable() and
 * sluice.array() refuse a proxy, tostring() says "sluice.event: 0x…", and a
 * plain table a script stores into a proxy stays that table (it is not
 * converted, so sluice.table() does not look inside it).
 *
 * Lifetime: the parsed events belong to the caller and are reused for the
 * next events, so a proxy is only usable during the call it was made for:
 * each sl_luaproxy_call() starts a new generation, and touching a proxy of
 * an older one (kept in a global, say) raises "event proxy used after its
 * call returned"; encoding one fails the same way.
 */
#ifndef SL_LUAPROXY_H
#define SL_LUAPROXY_H

#include "core/base/err.h"
#include "rules/pattern.h"

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>

/* The proxies of one Lua state: lives inside the state (freed with it). */
typedef struct sl_luaproxy sl_luaproxy;

/* Installs proxies into the sandboxed state L (rules/sandbox.h), before any
 * script runs: the metatable, the wrapped type/next/rawget/rawset/rawlen/
 * getmetatable globals, sluice.table, and the encoder rules/luajson.c calls
 * for proxies. Returns 0 and *out (valid until L is closed), or SL_ENOMEM
 * with err; L may then hold part of it and should be closed. */
int sl_luaproxy_install(lua_State *L, sl_luaproxy **out, sl_error *err);

/* Calls the Lua function on top of L's stack (popped) in the sandbox
 * (sl_sandbox_call) with proxies of the parsed events evs[0..n): with the
 * proxy of evs[0] when list is false (n must be 1), else with a plain Lua
 * list of the n proxies. Starts a new generation first, so every older proxy
 * becomes unusable. The events (and the texts they were parsed from) must
 * stay unchanged until the next call or sl_luaproxy_release(). Returns 0
 * with the function's one result pushed, or the codes of sl_sandbox_call
 * with nothing pushed. */
int sl_luaproxy_call(lua_State *L, sl_luaproxy *px, const sl_evview *const *evs, size_t n,
                     bool list, sl_error *err);

/* Makes the proxies of the last call unusable (call it once their results
 * are encoded, before the parsed events change). */
void sl_luaproxy_release(sl_luaproxy *px);

/* Whether the value at idx is one of px's proxies: 0 when it is not, else
 * SL_JSON_OBJECT or SL_JSON_ARRAY (core/base/json.h). Never raises. */
int sl_luaproxy_kind(lua_State *L, sl_luaproxy *px, int idx);

/* Replaces the array proxy at idx by a plain Lua list of its elements (one
 * level: elements that are objects or arrays stay proxies), in protected
 * mode. Returns 0, SL_EINVAL (a stale proxy) or SL_ENOMEM, with err; the
 * value at idx is then unchanged. */
int sl_luaproxy_to_list(lua_State *L, sl_luaproxy *px, int idx, sl_error *err);

#endif
