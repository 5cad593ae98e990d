-- lua/sluice.lua — the `sluice` helpers of every sandboxed state (rule
-- functions and the config file). rules/sandbox.c fills in the parts written
-- in C, then runs this chunk with the `sluice` table as its argument, before
-- the sandbox is sealed.
--
-- Values
--
--   sluice.null
--       The JSON null: a unique userdata; tostring(sluice.null) is "null".
--       Decoded events hold it where the JSON has null (never nil, so the key
--       survives a round trip); write `v == sluice.null` to test for it (it
--       is truthy, like every userdata).
--
--   sluice.array
--       The metatable that marks a table as a JSON array, so that [] stays []
--       (an unmarked empty table encodes as {}). Decoded arrays carry it:
--       `getmetatable(t) == sluice.array` tests for one. It is also callable:
--       sluice.array(t) sets it on t (a table) and returns t; sluice.array()
--       returns a new empty array.
--
--   sluice.table(v) -> table
--       (rule functions only) The event a rule function receives is a lazy
--       proxy that reads the stored JSON on demand and records changes; it
--       behaves like a table for indexing, assignment, #, pairs, ipairs,
--       next, type, rawget/rawset/rawlen and the table library. sluice.table
--       turns it into plain tables (deep) for code that needs a real one;
--       any other value is returned as it is.
--
-- sluice.json
--
--   sluice.json.encode(v) -> string
--       JSON text of v (compact, no spaces). Integers encode as integers and
--       floats always with a fraction or an exponent (3 -> 3, 3.0 -> 3.0),
--       in the shortest form that reads back to the same float. A table
--       marked with sluice.array, or whose keys are exactly 1..n, is an
--       array; a table with string keys is an object (members in no
--       particular order); an unmarked empty table is {}. Raises an error
--       naming the path ("json.encode: $.data.items[2]: NaN cannot be
--       encoded") for NaN and infinities, functions, coroutines, userdata
--       other than sluice.null, tables mixing key kinds or with holes, keys
--       that are not strings, strings that are not UTF-8, and nesting deeper
--       than 128 (which is also how a table containing itself is refused).
--
--   sluice.json.decode(s) -> value
--       The value of the JSON text s (RFC 8259, strict: valid UTF-8, no
--       trailing data, nesting up to 128). JSON integers in the 64-bit range
--       become Lua integers, other numbers floats (beyond the double range:
--       ±math.huge, which encode refuses); null becomes sluice.null;
--       arrays get the sluice.array metatable; \u escapes become UTF-8
--       (surrogate pairs joined); a repeated key keeps its last value.
--       Raises "json.decode: byte N: reason" on bad input (N counts from 0).
--
-- sluice.time (times are integers: milliseconds since the Unix epoch, UTC)
--
--   sluice.time.now() -> ms
--       The current wall-clock time.
--
--   sluice.time.parse(s) -> ms | nil, message
--       An RFC 3339 date-time ("2024-02-29T13:45:00.123+01:00", the
--       CloudEvents `time` attribute) in milliseconds (fractions beyond the
--       millisecond are truncated); nil and a message when s is not one
--       (dates that do not exist are refused).
--
--   sluice.time.format(ms) -> s | nil, message
--       ms as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC, three fraction digits); nil
--       and a message outside the years 0000-9999. A float ms must have an
--       integer value.
--
-- sluice.str (plain text, never Lua patterns; s and the other string
-- arguments must be strings)
--
--   sluice.str.split(s, sep [, max]) -> array
--       The pieces of s between occurrences of sep (a non-empty string), as
--       an array marked with sluice.array: split("a,b,,c", ",") is
--       {"a", "b", "", "c"}, split("", ",") is {""}. With max (>= 1), at most
--       max pieces: the last one holds the rest of s.
--
--   sluice.str.trim(s), sluice.str.ltrim(s), sluice.str.rtrim(s) -> string
--       s without leading and trailing / leading / trailing whitespace
--       (space, \t, \n, \v, \f, \r).
--
--   sluice.str.starts_with(s, prefix), sluice.str.ends_with(s, suffix),
--   sluice.str.contains(s, part) -> boolean
--       Whether s begins with / ends with / contains the given text (the
--       empty string is in every string).
--
--   sluice.str.replace(s, old, new [, n]) -> string, count
--       s with occurrences of old (a non-empty string) replaced by new, left
--       to right, at most n of them when n is given; also returns how many
--       were replaced.
--
-- Lower and upper case are string.lower / string.upper (ASCII only).
--
-- The rest of the sandbox (rules/sandbox.h): the base library without
-- dofile and loadfile (load takes text chunks only, and runs them in the
-- same globals unless given an env), string without string.dump, table,
-- math, utf8, coroutine, and os.time / os.clock / os.date. No io, require,
-- package or debug; collectgarbage("count") only; getmetatable("") is
-- false; setmetatable refuses a metatable with __gc. Each call has an
-- instruction budget (10 million by default) that pcall cannot catch, and
-- each state a memory cap (64 MiB by default). string.find/match/gmatch/gsub
-- are sluice's own (rules/luapat.c): the same results as Lua's, with their
-- matching steps charged to the budget, so a pattern that backtracks without
-- end fails the event like an endless loop does.

local sluice = ...

-- Everything is captured now, so scripts that replace globals (string.find,
-- math.type…) cannot change what the helpers do.
local type, error, tostring, setmetatable = type, error, tostring, setmetatable
local find, sub, match, format = string.find, string.sub, string.match, string.format
local math_type = math.type
local concat = table.concat
local array = sluice.array

local function need_string(fname, i, v)
    if type(v) ~= "string" then
        error(format("sluice.str.%s: bad argument #%d (string expected, got %s)", fname, i,
            type(v)), 3)
    end
end

local function need_count(fname, i, v)
    if v ~= nil and (math_type(v) ~= "integer" or v < 1) then
        error(format("sluice.str.%s: bad argument #%d (integer >= 1 expected, got %s)", fname,
            i, tostring(v)), 3)
    end
end

local str = {}

function str.split(s, sep, max)
    need_string("split", 1, s)
    need_string("split", 2, sep)
    need_count("split", 3, max)
    if sep == "" then
        error("sluice.str.split: the separator is empty", 2)
    end
    local out, n, i = setmetatable({}, array), 0, 1
    while max == nil or n < max - 1 do
        local a, b = find(s, sep, i, true)
        if not a then
            break
        end
        n = n + 1
        out[n] = sub(s, i, a - 1)
        i = b + 1
    end
    out[n + 1] = sub(s, i)
    return out
end

-- Each pattern below runs in linear time: find "%S" stops at the first
-- non-space, and "^.*%S" anchored at one position backtracks once from the
-- end. (The usual "^%s*(.-)%s*$" is quadratic on long runs of spaces, and
-- pattern matching runs in C, outside the instruction budget.)
function str.trim(s)
    need_string("trim", 1, s)
    local i = find(s, "%S")
    return i and match(s, "^.*%S", i) or ""
end

function str.ltrim(s)
    need_string("ltrim", 1, s)
    local i = find(s, "%S")
    return i and sub(s, i) or ""
end

function str.rtrim(s)
    need_string("rtrim", 1, s)
    return match(s, "^.*%S") or ""
end

function str.starts_with(s, prefix)
    need_string("starts_with", 1, s)
    need_string("starts_with", 2, prefix)
    return sub(s, 1, #prefix) == prefix
end

function str.ends_with(s, suffix)
    need_string("ends_with", 1, s)
    need_string("ends_with", 2, suffix)
    return suffix == "" or sub(s, -#suffix) == suffix
end

function str.contains(s, part)
    need_string("contains", 1, s)
    need_string("contains", 2, part)
    return find(s, part, 1, true) ~= nil
end

function str.replace(s, old, new, n)
    need_string("replace", 1, s)
    need_string("replace", 2, old)
    need_string("replace", 3, new)
    need_count("replace", 4, n)
    if old == "" then
        error("sluice.str.replace: the text to replace is empty", 2)
    end
    local parts, count, i = {}, 0, 1
    while n == nil or count < n do
        local a, b = find(s, old, i, true)
        if not a then
            break
        end
        count = count + 1
        parts[#parts + 1] = sub(s, i, a - 1)
        parts[#parts + 1] = new
        i = b + 1
    end
    if count == 0 then
        return s, 0
    end
    parts[#parts + 1] = sub(s, i)
    return concat(parts), count
end

sluice.str = str
