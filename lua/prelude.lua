-- lua/prelude.lua — the vocabulary of sluice config files.
--
-- Runs once per Lua state, trusted, before the sandbox is sealed (see
-- rules/sandbox.h), so it can keep debug.getinfo and os.getenv in upvalues
-- that config code cannot reach. It only records what the file declares, with
-- the line of each declaration; server/config.c checks every key and value
-- against its key tables, so the vocabulary's rules live in one place.
--
--   server { listen = "127.0.0.1:8080", data_dir = "./sluice-data" }
--   set "orders" { partitions = 4, retention = "7d" }
--   rule "big" { set = "orders", match = {…}, target = target.file { path = "…" } }
--   source.file { path = "/var/log/*.log", set = "logs" }
--   env "NAME"  /  env("NAME", "default")
--   lane "feature-x" { env = "boe", fallback = "base" }
--   lanes.auto = true   (or lanes { auto = true })
--
-- Declarations end up in the registry-visible table returned by
-- __sluice_decls(): { kind = "set"|"rule"|"lane"|"server", name = …, body = {…},
-- line = N }, in file order. Mistakes the prelude can see at once (a name
-- that is not a string, a body that is not a table, an unset environment
-- variable) are recorded in __sluice_errors() as { line = N, msg = "…" } and
-- the file goes on running, so `sluice check` reports every mistake at once.

local getinfo = debug.getinfo
local getenv = os.getenv
local setmetatable, getmetatable, type, tostring, error, pairs, rawequal =
  setmetatable, getmetatable, type, tostring, error, pairs, rawequal

local decls, errors = {}, {}

-- The line of the config code that called the vocabulary function `level`
-- frames up (the line where a block starts).
local function line_of(level)
  local info = getinfo(level + 1, "Sl")
  return info and info.currentline or 0
end

local function problem(line, msg)
  errors[#errors + 1] = { line = line, msg = msg }
end

-- set "name" { … } and rule "name" { … }: a function taking the name that
-- returns a function taking the body.
local function named_block(kind)
  return function(name)
    local line = line_of(2)
    if type(name) ~= "string" then
      problem(line, kind .. ": the name must be a string, as in " .. kind .. ' "orders" { … }')
      name = tostring(name)
    end
    return function(body)
      if type(body) ~= "table" then
        problem(line, kind .. ' "' .. name .. '": the body must be a table { … }')
        body = {}
      end
      decls[#decls + 1] = { kind = kind, name = name, body = body, line = line }
    end
  end
end

set = named_block("set")
rule = named_block("rule")
lane = named_block("lane")
schedule = named_block("schedule")

-- lanes.auto = true and lanes { auto = true }: settings of all lanes. The
-- values go to a store that server/config.c checks against its key table
-- after the file ran (every assignment passes through __newindex, so the
-- line of the first one is known); the store is read with __sluice_lanes().
local lanes_store, lanes_line = {}, nil
local lanes_proxy
lanes_proxy = setmetatable({}, {
  __index = lanes_store,
  __newindex = function(_, k, v)
    lanes_line = lanes_line or line_of(2)
    lanes_store[k] = v
  end,
  __call = function(_, body)
    local line = line_of(2)
    if type(body) ~= "table" then
      problem(line, "lanes: the body must be a table { … }, as in lanes { auto = true }")
      return
    end
    lanes_line = lanes_line or line
    for k, v in pairs(body) do lanes_store[k] = v end
  end,
})
lanes = lanes_proxy

function server(body)
  local line = line_of(2)
  if type(body) ~= "table" then
    problem(line, "server: the body must be a table { … }")
    body = {}
  end
  decls[#decls + 1] = { kind = "server", body = body, line = line }
end

-- target.KIND { … } makes a target value; server/config.c knows the kinds.
-- Target values carry this metatable so a plain table is not mistaken for one.
local target_mt = { __name = "sluice.target" }
target = setmetatable({}, {
  __index = function(_, kind)
    return function(body)
      local line = line_of(2)
      if type(body) ~= "table" then
        problem(line, "target." .. tostring(kind) .. ": the body must be a table { … }")
        body = {}
      end
      return setmetatable({ kind = kind, body = body, line = line }, target_mt)
    end
  end,
  __newindex = function() error("target is read-only", 2) end,
})

-- source.KIND { … } declares a source (file, webhook, kafka or a plugin's
-- kind); it is recorded like set and rule, with kind = "source" and the
-- source kind as its name.
source = setmetatable({}, {
  __index = function(_, kind)
    return function(body)
      local line = line_of(2)
      if type(body) ~= "table" then
        problem(line, "source." .. tostring(kind) .. ": the body must be a table { … }")
        body = {}
      end
      decls[#decls + 1] = { kind = "source", name = tostring(kind), body = body, line = line }
    end
  end,
  __newindex = function() error("source is read-only", 2) end,
})

-- env "NAME" reads an environment variable (for secrets); env("NAME", d)
-- gives d when it is unset. An unset variable without a default is a mistake.
function env(name, default)
  local line = line_of(2)
  if type(name) ~= "string" then
    problem(line, "env: the variable name must be a string")
    return ""
  end
  local v = getenv(name)
  if v == nil then
    if default ~= nil then return default end
    problem(line, "environment variable " .. name .. " is not set (use env(\"" .. name ..
      "\", default) for an optional one)")
    return ""
  end
  return v
end

function __sluice_decls() return decls end
-- The lanes settings and the line where they were first given (0: unknown,
-- when the file replaced the lanes table with a plain one).
function __sluice_lanes()
  if rawequal(lanes, lanes_proxy) then return lanes_store, lanes_line or 0 end
  return lanes, 0
end
function __sluice_errors() return errors end
function __sluice_is_target(v) return getmetatable(v) == target_mt end
