-- bench/http/consume.lua — wrk script of bench/http_bench.sh: reads a set
-- back with GET /v1/sets/SET/events?partition=P&offset=O&max=MAX, following
-- next_offset, one partition per connection.
--
--   wrk -tN -cN -dD -s bench/http/consume.lua URL -- SET MAX PARTITIONS
--
-- Run it with as many connections as threads (-tN -cN): wrk tells a script
-- nothing about connections, so each thread's state is one reader, and with
-- one connection per thread the request and its answer alternate. Thread k
-- reads partition k % PARTITIONS from its beginning; at the end of the
-- partition (an answer with no events) it starts again from the beginning,
-- so the run measures warm reads of data written earlier, never an empty
-- long-poll. Events are counted
-- from the answers (next_offset - offset), only for 200 answers.
-- done() prints one line "@@result key=value ..." for the shell script.

local set, max, nparts = "bench", 1000, 4
local threads = {}
local thread_count = 0

function setup(thread)
   thread:set("thread_index", thread_count)
   thread_count = thread_count + 1
   table.insert(threads, thread)
end

-- Per-thread counters, read back by done() with thread:get().
events, ok, non200, wraps = 0, 0, 0, 0
first_bad = ""
codes = {} -- status -> count, for the answers other than 200

local prefix
local offset -- nil: from=beginning

function init(args)
   set = args[1] or set
   max = tonumber(args[2] or max)
   nparts = tonumber(args[3] or nparts)
   prefix = "/v1/sets/" .. set .. "/events?partition=" .. ((thread_index or 0) % nparts) ..
      "&max=" .. max
end

function request()
   if not offset then return wrk.format("GET", prefix .. "&from=beginning") end
   return wrk.format("GET", prefix .. "&offset=" .. offset)
end

function response(status, hdrs, body)
   if status ~= 200 then
      non200 = non200 + 1
      codes[status] = (codes[status] or 0) + 1
      if first_bad == "" then first_bad = status .. " " .. string.sub(body, 1, 160) end
      return
   end
   ok = ok + 1
   -- The answer ends with "next_offset":K}; look only at its tail.
   local at = string.find(body, '"next_offset":', math.max(#body - 64, 1), true)
   local nxt = at and tonumber(string.match(body, "^(%d+)", at + 14))
   if not nxt then
      non200 = non200 + 1
      if first_bad == "" then first_bad = "200 without next_offset" end
      return
   end
   if not offset then
      -- The first answer from the beginning: count what it returned.
      local first = string.match(body, '"sluiceoffset":(%d+)')
      events = events + (first and nxt - tonumber(first) or 0)
      offset = nxt
   elseif nxt > offset then
      events = events + (nxt - offset)
      offset = nxt
   else
      offset = nil
      wraps = wraps + 1
   end
end

function done(summary, latency, requests)
   local t = { ok = 0, non200 = 0, events = 0, wraps = 0 }
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
      "wraps=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f max_us=%.0f mean_us=%.0f " ..
      "connect=%d read=%d write=%d timeout=%d bytes=%d\n",
      summary.duration, summary.requests, t.ok, t.non200, t.events, t.wraps,
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
