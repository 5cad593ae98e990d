#!/usr/bin/env bash
# tests/integration/test_schedules.sh — schedules in the real bin/sluice
# (docs/schedules.md): a one-time `at` schedule three seconds away fires
# exactly one event into its set, with the tick's time and id, and not again
# after a restart; one added by a reload (SIGHUP) fires; `sluice schedule list` shows a rate schedule's next fire
# times on the minute boundaries and the tick fired; `sluice check` refuses
# a bad cron at FILE:LINE.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

dir=$ex_tmp/s
mkdir -p "$dir"
when=$(date -u -d '+3 seconds' +%Y-%m-%dT%H:%M:%S)
cat >"$dir/sluice.lua" <<EOF
server { data_dir = "data" }
set "ticks" { partitions = 1 }
schedule "once" { at = "$when", set = "ticks", event = { type = "tick.once", source = "/sched", data = { n = 1 } } }
schedule "minutely" { rate = "1 minute", set = "ticks", catch_up = 0,
  event = { type = "tick.minute", source = "/sched" } }
EOF

step "sluice check accepts the schedules"
"$ex_bin" check "$dir/sluice.lua" >/dev/null || fail "sluice check refused $dir/sluice.lua"

port=$(ex_free_port)
ex_serve "$dir" "$port"
url="http://127.0.0.1:$port/v1/sets/ticks/events?partition=0&offset=0&max=100"
once_count() {
  curl -sf "$url" | python3 -c '
import json, sys
print(sum(1 for e in json.load(sys.stdin).get("events", []) if e.get("type") == "tick.once"))'
}
fired() { [[ $(once_count) == 1 ]]; }

step "the at schedule ($when UTC) fires once"
ex_wait 15 "schedule \"once\" did not fire" fired
sleep 1.5
[[ $(once_count) == 1 ]] || fail "schedule \"once\" fired $(once_count) times"
curl -sf "$url" | python3 -c '
import json, sys
e = [e for e in json.load(sys.stdin)["events"] if e["type"] == "tick.once"][0]
assert e["source"] == "/sched" and e["data"] == {"n": 1} and e["specversion"] == "1.0", e
assert e["time"] == sys.argv[1] + ".000Z", (e["time"], sys.argv[1])
assert len(e["id"]) == 36 and e["id"][14] == "8", e["id"]
' "$when" || fail "the event of schedule \"once\" is not as the docs say"

step "sluice schedule list shows the last tick and the next minutes"
ex_stop "$ex_server_pid"
minute() { python3 -c 'import sys, time; t = (int(time.time()) // 60 + int(sys.argv[1])) * 60; print(time.strftime("%Y-%m-%dT%H:%M:00.000Z", time.gmtime(t)))' "$1"; }
next0=$(minute 1)
out=$("$ex_bin" schedule list -c "$dir/sluice.lua" --count 2)
next=$(minute 1)
grep -q "^once  at($when)  UTC  -> set ticks" <<<"$out" || fail "schedule list: $out"
grep -A1 '^once' <<<"$out" | grep -q "last     ${when}.000Z" || fail "schedule list lacks the last tick: $out"
# (a minute may have gone by while it ran: then either is right)
shown=$(grep -A3 '^minutely  rate(1 minute)  UTC' <<<"$out" | sed -n 's/^  next     \([^ ]*\) .*/\1/p')
[[ $shown == "$next0" || $shown == "$next" ]] || fail "schedule list: the next minute is not $next: $out"
then=$(python3 -c 'import sys, time, datetime as d; t = d.datetime.strptime(sys.argv[1], "%Y-%m-%dT%H:%M:%S.000Z") + d.timedelta(minutes=1); print(t.strftime("%Y-%m-%dT%H:%M:%S.000Z"))' "$shown")
grep -A3 '^minutely' <<<"$out" | grep -q "^           $then  ${then%.000Z}+00:00" ||
  fail "schedule list: the one after $shown is not $then: $out"

step "a restart does not fire it again"
ex_serve "$dir" "$port"
sleep 2
[[ $(once_count) == 1 ]] || fail "schedule \"once\" fired again after the restart ($(once_count) events)"

step "a schedule added by a reload (SIGHUP) fires"
later=$(date -u -d '+2 seconds' +%Y-%m-%dT%H:%M:%S)
cat >>"$dir/sluice.lua" <<EOF
schedule "later" { at = "$later", set = "ticks", event = { type = "tick.later", source = "/sched" } }
EOF
kill -HUP "$ex_server_pid"
later_fired() {
  curl -sf "$url" | python3 -c '
import json, sys
sys.exit(0 if sum(e.get("type") == "tick.later" for e in json.load(sys.stdin).get("events", [])) == 1 else 1)'
}
ex_wait 12 "schedule \"later\" (added by a reload) did not fire" later_fired
[[ $(once_count) == 1 ]] || fail "the reload fired schedule \"once\" again"
ex_stop "$ex_server_pid"

step "sluice check refuses cron \"61 * * * ? *\" at its line"
cat >"$dir/bad.lua" <<'EOF'
set "ticks" { partitions = 1 }

schedule "bad" {
  cron = "61 * * * ? *",
  set = "ticks",
  event = { type = "tick", source = "/sched" },
}
EOF
if out=$("$ex_bin" check "$dir/bad.lua" 2>&1); then fail "sluice check accepted cron 61"; fi
grep -q "bad.lua:4: schedule \"bad\": cron \"61 \* \* \* ? \*\": minutes: 61 is outside 0-59" <<<"$out" ||
  fail "sluice check said: $out"
echo "schedules: ok"
