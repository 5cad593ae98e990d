-- bench/http/post.lua — wrk script of bench/http_bench.sh: POSTs CloudEvents
-- to /v1/sets/SET/events, closed loop or paced at a fixed rate.
--
--   wrk -tT -cC -dD -s bench/http/post.lua URL -- MODE SET BATCH BYTES RATE TAG T
--
-- MODE   ndjson  BATCH events, one per line (application/x-ndjson)
--        batch   BATCH events in a JSON array (application/cloudevents-batch+json)
--        single  one event (application/cloudevents+json)
-- BYTES  size of one event's JSON (about; the id grows with the request count)
-- RATE   0: closed loop (every connection sends its next request as soon as
--        the answer is in); N: N requests/s in all, paced by delay() (see below)
-- TAG    makes ids unique across runs against the same server
-- T      wrk's -t again: each thread paces RATE / T requests/s
--
-- Every event has a unique id (TAG-thread-request-index) and a partition key
-- ("k0".."k1023"; 8 sets of 100 keys used in turn, one set per request). The answer's "accepted"
-- count is added up, and answers other than 200 are counted apart, so the
-- events/s that the shell script prints count only stored events.
-- done() prints one line "@@result key=value ..." for the shell script.

local mode, set, batch, bytes, rate, tag = "ndjson", "bench", 100, 300, 0, "r"
local interval_ms
-- Fixed-rate pacing (Debian's wrk has no -R): before each request, delay()
-- hands the connection the next free slot of this thread's schedule, one
-- slot every interval_ms. A connection whose answer is late does not hold
-- the others back, so as long as some connections are idle the offered rate
-- stays fixed (an open loop, as wrk2's); when all are busy the schedule falls
-- behind and catches up later, and the achieved rate printed by done() shows
-- it. wrk's timers have 1 ms resolution: slots closer than that go out
-- together at the start of their millisecond.
local ffi = require("ffi")
ffi.cdef [[
   typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
   int clock_gettime(int clk, bench_timespec *ts);
]]
local ts = ffi.new("bench_timespec")
local function now_ms()
   ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
   return tonumber(ts.tv_sec) * 1000.0 + tonumber(ts.tv_nsec) / 1e6
end
local next_slot

local function paced_delay()
   local now = now_ms()
   if not next_slot then next_slot = now end
   local d = next_slot - now
   next_slot = next_slot + interval_ms
   if d <= 0 then return 0 end
   return math.floor(d + 0.5)
end

local threads = {}
local thread_count = 0

-- Main state: number the threads so ids stay unique between them.
function setup(thread)
   thread:set("thread_index", thread_count)
   thread_count = thread_count + 1
   table.insert(threads, thread)
end

-- Per-thread counters, read back by done() with thread:get().
accepted, ok, non200, failed_entries = 0, 0, 0, 0
first_bad = ""
codes = {} -- status -> count, for the answers other than 200

local content_type = {
   ndjson = "application/x-ndjson",
   batch = "application/cloudevents-batch+json",
   single = "application/cloudevents+json",
}

-- One event is head .. id .. tail[v][i]: the id is the only part built per
-- request, so the client spends little CPU per request.
local head = '{"specversion":"1.0","id":"'
local tails = {} -- tails[variant][i]
local variants = 8
local path, headers
local reqno = 0
local prefix = ""

-- The events' time is the start of the run: a fixed date would soon be older
-- than the set's retention, and sluice applies retention by event time.
local now_utc = os.date("!%Y-%m-%dT%H:%M:%S.000Z")

local function make_tail(v, i)
   local key = (v * 131 + i * 37) % 1024
   local t = string.format('-%d","source":"/bench/http","type":"bench.http.event",' ..
      '"time":"%s","partitionkey":"k%d",' ..
      '"datacontenttype":"application/json","data":{"seq":%d,"note":"', i, now_utc, key, i)
   -- Pad to BYTES with the id counted at its typical length (about 16).
   local pad = bytes - (#head + 16 + #t + 3)
   if pad < 1 then pad = 1 end
   return t .. string.rep("x", pad) .. '"}}'
end

function init(args)
   mode = args[1] or mode
   set = args[2] or set
   batch = tonumber(args[3] or batch)
   bytes = tonumber(args[4] or bytes)
   rate = tonumber(args[5] or rate)
   tag = args[6] or tag
   local nthreads = tonumber(args[7] or 1)
   if not content_type[mode] then
      error("MODE must be ndjson, batch or single, not " .. tostring(mode))
   end
   if mode == "single" then batch = 1 end
   for v = 1, variants do
      tails[v] = {}
      for i = 1, batch do tails[v][i] = make_tail(v, i) end
   end
   path = "/v1/sets/" .. set .. "/events"
   headers = { ["Content-Type"] = content_type[mode] }
   prefix = tag .. "-" .. tostring(thread_index or 0) .. "-"
   if rate > 0 then
      -- Each thread paces its own share of the rate. wrk looks for a global
      -- delay() after init() has run, so defining it here switches pacing on.
      interval_ms = 1000.0 * math.max(nthreads, 1) / rate
      delay = paced_delay
   end
end

local parts = {}

function request()
   reqno = reqno + 1
   local id = prefix .. reqno
   local tl = tails[reqno % variants + 1]
   local body
   if mode == "single" then
      body = head .. id .. tl[1]
   else
      local n = 0
      for i = 1, batch do
         if i > 1 and mode == "batch" then n = n + 1; parts[n] = "," end
         n = n + 1; parts[n] = head
         n = n + 1; parts[n] = id
         n = n + 1; parts[n] = tl[i]
         if mode == "ndjson" then n = n + 1; parts[n] = "\n" end
      end
      body = table.concat(parts, "", 1, n)
      if mode == "batch" then body = "[" .. body .. "]" end
   end
   return wrk.format("POST", path, headers, body)
end

function response(status, hdrs, body)
   if status ~= 200 then
      non200 = non200 + 1
      codes[status] = (codes[status] or 0) + 1
      if first_bad == "" then first_bad = status .. " " .. string.sub(body, 1, 160) end
      return
   end
   ok = ok + 1
   -- (JSON spaces may follow the comma: a Kafka-backed set's answer has them)
   local a, f = string.match(body, '^{"accepted":(%d+),%s*"failed":(%d+)')
   accepted = accepted + (tonumber(a) or 0)
   failed_entries = failed_entries + (tonumber(f) or 0)
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
