-- bench/aws/replay.lua — wrk script of bench/aws_bench.sh: sends one request
-- read from a file over and over (a SigV4 signature stays valid for 15
-- minutes and has no nonce, so a request signed once may be replayed), and
-- counts what the answers say was stored.
--
--   wrk -tT -cC -dD -s bench/aws/replay.lua URL -- FILE MODE TAG
--
-- FILE   "METHOD PATH" on the first line, then "Name: value" header lines,
--        an empty line, and the body (the rest of the file, byte for byte)
-- MODE   putevents  an EventBridge PutEvents answer: units = entries stored
--                   (Entries less FailedEntryCount)
--        batch      a POST /v1/sets/SET/events answer: units = "accepted";
--                   each "@ID@" in the body is replaced by a unique id
--                   (TAG-thread-request-index) in every request
--        calls      units = 200 answers (TestEventPattern, /v1/patterns/test)
-- TAG    makes the batch ids unique across runs against the same server
--
-- done() prints one line "@@result key=value ..." (the keys of
-- bench/http/post.lua's) for the shell script; "@@codes" and "@@first_bad"
-- as post.lua does when some answers were not 200.

local threads = {}
local thread_count = 0

function setup(thread)
   thread:set("thread_index", thread_count)
   thread_count = thread_count + 1
   table.insert(threads, thread)
end

accepted, ok, non200, failed_entries = 0, 0, 0, 0
first_bad = ""
codes = {}

local mode, tag = "calls", "r"
local method, path, headers, body, entries
local prefix = ""
local reqno = 0
local fixed -- the request, when it is the same every time

function init(args)
   local file = args[1] or error("usage: -- FILE MODE TAG")
   mode = args[2] or mode
   tag = args[3] or tag
   if mode ~= "putevents" and mode ~= "batch" and mode ~= "calls" then
      error("MODE must be putevents, batch or calls, not " .. tostring(mode))
   end
   local f = assert(io.open(file, "rb"))
   local text = f:read("*a")
   f:close()
   local at = string.find(text, "\n\n", 1, true) or error(file .. ": no empty line after the headers")
   local head = string.sub(text, 1, at - 1)
   body = string.sub(text, at + 2)
   headers = {}
   local first = true
   for line in string.gmatch(head, "[^\n]+") do
      if first then
         method, path = string.match(line, "^(%S+) (%S+)$")
         first = false
      else
         local name, value = string.match(line, "^([^:]+): (.*)$")
         headers[name] = value
      end
   end
   -- PutEvents: the number of entries sent, to count those stored.
   local _, n = string.gsub(body, '"Source"', "")
   entries = n
   prefix = tag .. "-" .. tostring(thread_index or 0) .. "-"
   if mode ~= "batch" then
      fixed = wrk.format(method, path, headers, body)
   end
end

function request()
   if fixed then
      return fixed
   end
   reqno = reqno + 1
   local k = 0
   local b = string.gsub(body, "@ID@", function()
      k = k + 1
      return prefix .. reqno .. "-" .. k
   end)
   return wrk.format(method, path, headers, b)
end

function response(status, hdrs, resp)
   if status ~= 200 then
      non200 = non200 + 1
      codes[status] = (codes[status] or 0) + 1
      if first_bad == "" then first_bad = status .. " " .. string.sub(resp, 1, 160) end
      return
   end
   ok = ok + 1
   if mode == "putevents" then
      local f = tonumber(string.match(resp, '"FailedEntryCount":%s*(%d+)')) or entries
      accepted = accepted + entries - f
      failed_entries = failed_entries + f
   elseif mode == "batch" then
      local a, f = string.match(resp, '^{"accepted":(%d+),%s*"failed":(%d+)')
      accepted = accepted + (tonumber(a) or 0)
      failed_entries = failed_entries + (tonumber(f) or 0)
   else
      accepted = accepted + 1
   end
end

function done(summary, latency, requests)
   local t = { ok = 0, non200 = 0, accepted = 0, failed_entries = 0 }
   local bad = ""
   local all = {}
   for _, th in ipairs(threads) do
      for code, n in pairs(th:get("codes") or {}) do all[code] = (all[code] or 0) + n end
      for k in pairs(t) do t[k] = t[k] + (th:get(k) or 0) end
      local fb = th:get("first_bad")
      if bad == "" and fb and fb ~= "" then bad = fb end
   end
   local e = summary.errors
   io.write(string.format("@@result duration_us=%d requests=%d ok=%d non200=%d accepted=%d " ..
      "failed_entries=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f max_us=%.0f mean_us=%.0f " ..
      "connect=%d read=%d write=%d timeout=%d bytes=%d\n",
      summary.duration, summary.requests, t.ok, t.non200, t.accepted, t.failed_entries,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      latency.mean, e.connect, e.read, e.write, e.timeout, summary.bytes))
   local list = {}
   for code, n in pairs(all) do table.insert(list, code .. "x" .. n) end
   table.sort(list)
   if #list > 0 then io.write("@@codes " .. table.concat(list, " ") .. "\n") end
   if bad ~= "" then
      io.write("@@first_bad " .. string.gsub(bad, "\n", " ") .. "\n")
   end
end
