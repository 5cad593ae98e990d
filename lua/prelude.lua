-- lua/prelude.lua — the vocabulary of sluice config files.
--
-- Runs once per Lua state, trusted, before the sandbox is sealed (see
-- rules/sandbox.h), so it can keep debug.getinfo and os.getenv in upvalues
-- that config code cannot reach. It only records what the file declares, with
-- the line of each declaration; core/config.c checks every key and value
-- against its key tables, so the vocabulary's rules live in one place.
--
--   server { listen = "127.0.0.1:8080", data_dir = "./sluice-data" }
--   set "orders" { partitions = 4, retention = "7d" }
--   rule "big" { set = "orders", match = {…}, target = target.file { path = "…" } }
--   source.file { path = "/var/log/*.log", set = "logs" }
--   env "NAME"  /  env("NAME", "default")
--
-- Declarations end up in the registry-visible table returned by
-- __sluice_decls(): { kind = "set"|"rule"|"server", name = …, body = {…},
-- line = N }, in file order. Mistakes the prelude can see at once (a name
-- that is not a string, a body that is not a table, an unset environment
-- variable) are recorded in __sluice_errors() as { line = N, msg = "…" } and
-- the file goes on running, so `sluice check` reports every mistake at once.

local getinfo = debug.getinfo
local getenv = os.getenv
local setmetatable, getmetatable, type, tostring, error =
  setmetatable, getmetatable, type, tostring, error

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

function server(body)
  local line = line_of(2)
  if type(body) ~= "table" then
    problem(line, "server: the body must be a table { … }")
    body = {}
  end
  decls[#decls + 1] = { kind = "server", body = body, line = line }
end

-- target.KIND { … } makes a target value; core/config.c knows the kinds.
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
function __sluice_errors() return errors end
function __sluice_is_target(v) return getmetatable(v) == target_mt end
