-- lua/testing.lua — the vocabulary of `sluice test` files, and the deep
-- comparison that decides whether a test passed (docs/testing.md).
--
-- Runs once per tests state, trusted, before the sandbox is sealed (see
-- rules/sandbox.h), so it keeps debug.getinfo in an upvalue for line numbers,
-- as lua/prelude.lua does. The tests file then declares:
--
--   test "big orders are marked vip" {
--     rule = "big-orders",                      -- the rule under test
--     events = { { specversion = "1.0", … } },  -- CloudEvents: tables or JSON strings
--     expect = { { id = "o1", data = { vip = true } } },  -- what each target receives
--     exact = true,                             -- payloads must equal expect
--     expect_error = "attempt to index",        -- some event must fail so
--   }
--
-- cli/cli_ruletest.c drives it: __sluice_test_source(text) before the file runs
-- (for the line of a key), __sluice_tests() for the checked declarations,
-- then, per test, __sluice_test_check(i, payloads, failures) for the verdict
-- (nil when it passed, else one line saying which payload, which path, what
-- was expected and what came).

local getinfo = debug.getinfo
local type, tostring, pairs, ipairs, next, pcall, getmetatable, rawequal =
  type, tostring, pairs, ipairs, next, pcall, getmetatable, rawequal
local mtype, min = math.type, math.min
local sort, concat = table.sort, table.concat
local find, sub, match, gmatch = string.find, string.sub, string.match, string.gmatch
local json_encode, json_decode = sluice.json.encode, sluice.json.decode
local null, array_mt = sluice.null, sluice.array

local KEYS = { rule = "string", events = "table", expect = "table", exact = "boolean",
               expect_error = "string" }
local KEY_LIST = "rule, events, expect, exact, expect_error"

local decls = {}  -- { name = …, body = …, line = N }, in file order
local lines = {}  -- the tests file, one entry per line
local tests       -- the checked declarations, built once by __sluice_tests()

function __sluice_test_source(src)
  lines = {}
  for l in gmatch(src .. "\n", "([^\n]*)\n") do lines[#lines + 1] = l end
end

-- test "name" { … }: a function taking the name that returns a function
-- taking the body.
function test(name)
  local info = getinfo(2, "l")
  local line = info and info.currentline or 0
  return function(body)
    decls[#decls + 1] = { name = name, body = body, line = line }
  end
end

-- The first line in [from, to] where `key =` appears (Lua keeps no line
-- numbers for table fields, but the text does); from when none does.
local function key_line(from, to, key)
  for i = from, min(to, #lines) do
    local l, s = lines[i], 1
    while true do
      local a, b = find(l, key, s, true)
      if not a then break end
      local before, rest = sub(l, a - 1, a - 1), sub(l, b + 1)
      if not match(before, "[%w_]") and match(rest, "^[\"%]]*%s*=") and
         not match(rest, "^[\"%]]*%s*==") then
        return i
      end
      s = b + 1
    end
  end
  return from
end

-- Whether t is a Lua list: keys exactly 1..n (n >= 1).
local function is_list(t)
  local n, max = 0, 0
  for k in pairs(t) do
    if mtype(k) ~= "integer" or k < 1 then return false end
    n = n + 1
    if k > max then max = k end
  end
  return n > 0 and max == n
end

-- JSON text of v for messages, cut at 120 bytes.
local function show(v)
  local ok, s = pcall(json_encode, v)
  if not ok then s = tostring(v) end
  if #s > 120 then s = sub(s, 1, 117) .. "..." end
  return s
end

local function check_decl(d, to)
  local t = { name = d.name, line = d.line, problems = {}, rule_line = d.line }
  local function problem(line, msg) t.problems[#t.problems + 1] = { line = line, msg = msg } end
  if type(d.name) ~= "string" then
    problem(d.line, 'the test name must be a string, as in test "big orders" { … }')
    t.name = tostring(d.name)
  end
  local body = d.body
  if type(body) ~= "table" then
    problem(d.line, "the body must be a table: test \"" .. t.name .. "\" { rule = …, events = …, expect = … }")
    return t
  end
  local names = {}
  for k in pairs(body) do names[#names + 1] = k end
  sort(names, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(names) do
    local want, v = KEYS[k], body[k]
    if type(k) ~= "string" then
      problem(d.line, "every entry needs a name (name = value); found a positional " .. type(v))
    elseif not want then
      problem(key_line(d.line, to, k), 'unknown key "' .. k .. '" (known: ' .. KEY_LIST .. ")")
    elseif type(v) ~= want then
      problem(key_line(d.line, to, k), k .. " must be a " .. want .. ", not a " .. type(v))
    end
  end
  if type(body.rule) == "string" then
    t.rule, t.rule_line = body.rule, key_line(d.line, to, "rule")
  elseif body.rule == nil then
    problem(d.line, 'rule is required (the name of the rule under test, rule = "big-orders")')
  end
  local events = body.events
  if events == nil or (type(events) == "table" and next(events) == nil) then
    problem(d.line, "events is required: the list of input events, events = { { … }, … }")
  elseif type(events) == "table" and not is_list(events) then
    problem(key_line(d.line, to, "events"), "events is a list of events: write events = { { … } }")
  elseif type(events) == "table" then
    t.events, t.events_line = {}, key_line(d.line, to, "events")
    for i, e in ipairs(events) do
      if type(e) == "string" then
        t.events[i] = e
      elseif type(e) == "table" then
        local ok, s = pcall(json_encode, e)
        if ok then
          t.events[i] = s
        else
          problem(key_line(d.line, to, "events"), "event [" .. i .. "]: " .. tostring(s))
        end
      else
        problem(key_line(d.line, to, "events"),
                "event [" .. i .. "] must be a table or a JSON string, not a " .. type(e))
      end
    end
  end
  local expect = body.expect
  if type(expect) == "table" and next(expect) ~= nil and not is_list(expect) then
    problem(key_line(d.line, to, "expect"),
            "expect is a list of payloads, one per delivery: write expect = { { … } } " ..
            "({} for nothing)")
  elseif type(expect) == "table" then
    t.expect = expect
  end
  if expect == nil and body.expect_error == nil then
    problem(d.line, "a test needs expect (what the targets receive, {} for nothing) or expect_error")
  end
  t.exact = body.exact == true
  if type(body.expect_error) == "string" then t.expect_error = body.expect_error end
  return t
end

-- The checked declarations: { name, line, problems = { {line, msg} },
-- rule, rule_line, events = { JSON text… } }, in file order.
function __sluice_tests()
  if tests then return tests end
  tests = {}
  local seen = {}
  for i, d in ipairs(decls) do
    -- A test's keys are looked for up to the next test's line.
    local to = #lines
    for j = i + 1, #decls do
      if decls[j].line > d.line then to = decls[j].line - 1; break end
    end
    local t = check_decl(d, to)
    if seen[t.name] then
      t.problems[#t.problems + 1] = { line = d.line, msg = 'test "' .. t.name ..
        '" is declared twice (first at line ' .. seen[t.name] .. ")" }
    else
      seen[t.name] = d.line
    end
    tests[i] = t
  end
  return tests
end

-- ---- comparison ----------------------------------------------------------

-- "null", "array", "empty" (a table with nothing in it: {} in expect, or an
-- empty JSON object), "object", or the Lua type.
local function kind(v)
  if rawequal(v, null) then return "null" end
  local t = type(v)
  if t ~= "table" then return t end
  if getmetatable(v) == array_mt then return "array" end
  if next(v) == nil then return "empty" end
  if is_list(v) then return "array" end
  return "object"
end

local function member_path(path, k)
  if type(k) == "string" and match(k, "^[%a_][%w_]*$") then return path .. "." .. k end
  return path .. "[" .. show(k) .. "]"
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

local function plural(n, what) return n .. " " .. what .. (n == 1 and "" or "s") end

local function mismatch(path, e, g)
  return path .. ": expected " .. show(e) .. ", got " .. show(g)
end

local compare

-- exact: every member of g must be in e too.
local function compare_object(e, g, exact, path)
  for _, k in ipairs(sorted_keys(e)) do
    local gv = g[k]
    if gv == nil then
      return member_path(path, k) .. ": expected " .. show(e[k]) .. ", got nothing (no such member)"
    end
    local msg = compare(e[k], gv, exact, member_path(path, k))
    if msg then return msg end
  end
  if exact then
    for _, k in ipairs(sorted_keys(g)) do
      if e[k] == nil then
        return member_path(path, k) .. ": not expected (exact = true), got " .. show(g[k])
      end
    end
  end
  return nil
end

-- Compares the expectation e with the decoded value g at path; nil when it
-- holds, else the message.
compare = function(e, g, exact, path)
  local ek, gk = kind(e), kind(g)
  if ek == "null" or gk == "null" then
    if ek == gk then return nil end
    return mismatch(path, e, g)
  end
  if ek == "number" then
    if gk ~= "number" or e ~= g then return mismatch(path, e, g) end
    if exact and mtype(e) ~= mtype(g) then
      return path .. ": expected " .. show(e) .. " (" .. mtype(e) .. "), got " .. show(g) ..
        " (" .. mtype(g) .. ") (exact = true)"
    end
    return nil
  end
  if ek == "empty" then
    -- {} in expect: an empty array, or an object (any object unless exact).
    if gk == "empty" or (gk == "array" and #g == 0) then return nil end
    if gk == "object" then return exact and compare_object(e, g, exact, path) or nil end
    if gk == "array" then return path .. ": expected an empty array, got " .. show(g) end
    return mismatch(path, e, g)
  end
  if ek == "array" then
    if gk ~= "array" then return path .. ": expected an array, got " .. show(g) end
    if #e ~= #g then
      return path .. ": expected " .. plural(#e, "element") .. ", got " .. #g .. ": " .. show(g)
    end
    for i = 1, #e do
      local msg = compare(e[i], g[i], exact, path .. "[" .. i .. "]")
      if msg then return msg end
    end
    return nil
  end
  if ek == "object" then
    if gk ~= "object" and gk ~= "empty" then return path .. ": expected an object, got " .. show(g) end
    return compare_object(e, g, exact, path)
  end
  if ek == "string" or ek == "boolean" then
    if e ~= g then return mismatch(path, e, g) end
    return nil
  end
  return path .. ": expect holds a " .. ek .. ", which no payload can match"
end

-- One payload (its text) against one expectation. A string expectation
-- matches a JSON string payload by value, or any payload by its text (the
-- output of a text template is not JSON).
local function compare_payload(e, raw, exact, path)
  local ok, g = pcall(json_decode, raw)
  if type(e) == "string" then
    if raw == e or (ok and g == e) then return nil end
    return path .. ": expected " .. show(e) .. ", got " .. (ok and show(g) or show(raw) .. " (text)")
  end
  if not ok then
    return path .. ": expected " .. show(e) .. ", got the text " .. show(raw) .. " (not JSON)"
  end
  return compare(e, g, exact, path)
end

-- A payload for messages: its JSON text, or a text payload quoted.
local function show_payload(raw)
  local ok = pcall(json_decode, raw)
  local s = ok and raw or show(raw)
  if #s > 120 then s = sub(s, 1, 117) .. "..." end
  return s
end

local function received(payloads)
  local parts = {}
  for i = 1, min(#payloads, 3) do parts[i] = "[" .. i .. "] " .. show_payload(payloads[i]) end
  if #payloads > 3 then parts[#parts + 1] = "..." end
  return concat(parts, ", ")
end

-- The verdict on test i: payloads are what each target received (texts, in
-- order); failures are { event = N, last = M, msg = "…" } for the events
-- that failed (refused at ingest, or failed by the rule; a failed
-- transform_batch call covers events N..M). Returns nil when the test
-- passed, else the message.
function __sluice_test_check(i, payloads, failures)
  local t = tests[i]
  local function which(f)
    local where = f.where and f.where .. ": " or ""
    if f.last and f.last ~= f.event then
      return where .. "events [" .. f.event .. ".." .. f.last .. "]"
    end
    return where .. "event [" .. f.event .. "]"
  end
  if t.expect_error then
    local hit = false
    for _, f in ipairs(failures) do
      if find(f.msg, t.expect_error, 1, true) then hit = true; break end
    end
    if not hit then
      if #failures == 0 then
        return "expected an error containing " .. show(t.expect_error) .. ", but no event failed"
      end
      return "expected an error containing " .. show(t.expect_error) .. ", but " ..
        which(failures[1]) .. " failed with: " .. failures[1].msg
    end
  elseif #failures > 0 then
    return which(failures[1]) .. " failed: " .. failures[1].msg
  end
  local expect = t.expect
  if not expect then return nil end
  if #expect ~= #payloads then
    if #payloads == 0 then
      return "expected " .. plural(#expect, "payload") .. ", got nothing"
    end
    if #expect == 0 then
      return "expected nothing, got " .. plural(#payloads, "payload") .. ": " .. received(payloads)
    end
    return "expected " .. plural(#expect, "payload") .. ", got " .. #payloads .. ": " ..
      received(payloads)
  end
  for k = 1, #expect do
    local msg = compare_payload(expect[k], payloads[k], t.exact, "[" .. k .. "]")
    if msg then return msg end
  end
  return nil
end
