/*
 * rules/sandbox.h — sandboxed Lua 5.4 states for config files and rule
 * functions (ARCHITECTURE.md §6).
 *
 * A sandboxed state has only: the base library without dofile, loadfile and
 * bytecode loading (load() accepts text chunks only, in the sandbox's
 * environment), string (without string.dump), table, math, utf8, coroutine,
 * os.time/os.clock/os.date, and the `sluice` helpers of lua/sluice.lua
 * (sluice.json.encode/decode, sluice.null, sluice.array, sluice.time,
 * sluice.str). No io, os.execute/exit/getenv/remove, require, package,
 * debug, collectgarbage other than "count". getmetatable("") gives false
 * (the strings' shared metatable cannot be changed), and setmetatable()
 * refuses metatables with a __gc field (finalizers run without the
 * instruction budget). The sandbox's globals are the state's global table:
 * every chunk, and every function a chunk defines, sees the same names.
 *
 * Two limits keep a script from hurting the server:
 *  - a memory cap per state: the allocator refuses past it, which Lua turns
 *    into a "not enough memory" error (string.rep bombs end here, since the
 *    count hook does not run inside C functions);
 *  - an instruction budget per call: a count hook raises an error that a
 *    pcall inside the script cannot catch (the hook keeps raising until the
 *    outermost call returns), in every coroutine too, and xpcall handlers
 *    are skipped once it fired. Library loops in C are bounded by the
 *    memory cap or charged to the budget (table.move, table.insert/remove
 *    with a __len), and string.find/match/gmatch/gsub are rules/luapat.c's,
 *    which charge their matching steps to the budget (16 steps per
 *    instruction), so a pathological pattern fails like an endless loop.
 *
 * A state is used by one thread at a time.
 */
#ifndef SL_SANDBOX_H
#define SL_SANDBOX_H

#include "core/base/err.h"

#include <lua.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_sandbox_options {
    size_t mem_bytes;      /* memory cap of the state; 0 = 64 MiB */
    uint64_t instructions; /* budget per sl_sandbox_call; 0 = 10 million */
    /* Optional trusted chunk run after the helpers are loaded but before the
     * sandbox is sealed, with the full standard library, io, package and
     * debug included (the config prelude uses it to keep debug.getinfo for
     * line numbers in upvalues). It runs without the budget; its globals
     * stay visible to later chunks (functions it defines are under the
     * budget when sandboxed code calls them). Any failure, a syntax error
     * included, makes sl_sandbox_new() return SL_ESCRIPT. */
    const char *privileged_src;
    size_t privileged_len;
    const char *privileged_name; /* chunk name for its error messages */
} sl_sandbox_options;

/* Creates a sandboxed state (NULL opts: the defaults). Returns 0 and *out,
 * or SL_ENOMEM / SL_ESCRIPT (the privileged chunk failed) with err; nothing
 * is left allocated on error. Close with sl_sandbox_close(). */
int sl_sandbox_new(const sl_sandbox_options *opts, lua_State **out, sl_error *err);

/* Closes the state; NULL is ignored. */
void sl_sandbox_close(lua_State *L);

/* Compiles a text chunk (binary chunks are refused) and pushes it as a
 * function whose _ENV is the sandbox's global table. chunkname follows Lua's
 * convention ("@file.lua" makes messages read "file.lua:12: …"). Returns 0,
 * or SL_EPARSE with the syntax error in err / SL_ENOMEM (nothing pushed). */
int sl_sandbox_load(lua_State *L, const char *src, size_t len, const char *chunkname,
                    sl_error *err);

/* Calls the function below nargs arguments on the stack, like lua_pcall,
 * with a fresh instruction budget (a call made from inside another one
 * shares the outer budget). Returns 0 with nresults results pushed;
 * otherwise the function and its arguments are popped, nothing is pushed,
 * and the code says why: SL_ESCRIPT (a runtime error; err holds "chunk:line:
 * message (at <first traceback line with a Lua location>)"), SL_EBUDGET
 * (the budget ran out, even when the script caught the error and returned;
 * err: "chunk:line: instruction budget of N exceeded"), SL_ENOMEM (the
 * memory cap; also a memory error the script caught and raised again). The
 * state stays usable after each of them. */
int sl_sandbox_call(lua_State *L, int nargs, int nresults, sl_error *err);

/* Bytes the state currently holds, and its cap. */
size_t sl_sandbox_memory(lua_State *L, size_t *cap);

#endif
