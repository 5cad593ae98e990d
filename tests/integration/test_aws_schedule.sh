#!/usr/bin/env bash
# tests/integration/test_aws_schedule.sh — an EventBridge API rule with a
# ScheduleExpression (Debian's AWS CLI, real SigV4) becomes a schedule of the
# server (`sluice schedule list` shows aws.NAME with its next minute) whose
# events its targets get in EventBridge's "Scheduled Event" shape; the rule
# matches only its own scheduled events (an event of another rule's ARN is not
# delivered), survives a restart, and a bad expression is refused. The tick
# itself is test_schedules.sh's (and unit tests') business: here an event of
# the scheduled shape is put on the bus, so no test waits for a minute.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh
AWS=/usr/bin/aws
[[ -x $AWS ]] || fail "$AWS is missing (scripts/deps.sh installs awscli)"

mkdir -p "$ex_tmp/s" "$ex_tmp/cfg"
: >"$ex_tmp/cfg/config"
: >"$ex_tmp/cfg/credentials"
cat >"$ex_tmp/s/sluice.lua" <<'EOF2'
server { data_dir = "data", aws = { credentials = { AKIDSCHED = { secret = "sched-secret" } } } }
set "default" { partitions = 1 }
EOF2
port=$(ex_free_port)
ex_serve "$ex_tmp/s" "$port"
ev() {
  env -u AWS_PROFILE AWS_ACCESS_KEY_ID=AKIDSCHED AWS_SECRET_ACCESS_KEY=sched-secret \
    AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true AWS_PAGER= \
    AWS_CONFIG_FILE="$ex_tmp/cfg/config" AWS_SHARED_CREDENTIALS_FILE="$ex_tmp/cfg/credentials" \
    timeout 60 "$AWS" events --endpoint-url "http://127.0.0.1:$port" --output json "$@"
}
out="$ex_tmp/out.jsonl"
arn=arn:aws:events:us-east-1:000000000000:rule/nightly

step "put-rule with cron(…) and a file target"
ev put-rule --name nightly --schedule-expression 'cron(0 3 * * ? *)' >"$ex_tmp/r" ||
  fail "put-rule: $(cat "$ex_tmp/r")"
grep -q "\"$arn\"" "$ex_tmp/r" || fail "put-rule answered $(cat "$ex_tmp/r")"
ev put-targets --rule nightly --targets "[{\"Id\":\"f\",\"Arn\":\"arn:sluice:file:::$out\"}]" >"$ex_tmp/t"
grep -q '"FailedEntryCount": 0' "$ex_tmp/t" || fail "put-targets: $(cat "$ex_tmp/t")"
ev describe-rule --name nightly | grep -q '"ScheduleExpression": "cron(0 3 \* \* ? \*)"' ||
  fail "describe-rule does not give the ScheduleExpression back"

step "sluice schedule list shows the rule's schedule and its next 03:00 UTC"
"$ex_bin" schedule list -c "$ex_tmp/s/sluice.lua" --data "$ex_tmp/s/data" >"$ex_tmp/list" 2>&1 ||
  fail "sluice schedule list: $(cat "$ex_tmp/list")"
grep -q '^aws.nightly  cron(0 3 \* \* ? \*)  UTC  -> set default' "$ex_tmp/list" ||
  fail "schedule list: $(cat "$ex_tmp/list")"
grep -q 'next .*T03:00:00.000Z' "$ex_tmp/list" || fail "schedule list: no next 03:00: $(cat "$ex_tmp/list")"

step "GET /v1/schedules lists it as the API's, with its next 03:00 UTC"
curl -sf "http://127.0.0.1:$port/v1/schedules" >"$ex_tmp/sj" || fail "GET /v1/schedules failed"
python3 - "$ex_tmp/sj" <<'PY' || fail "GET /v1/schedules: $(cat "$ex_tmp/sj")"
import json, sys
s = {x["name"]: x for x in json.load(open(sys.argv[1]))["schedules"]}
x = s["aws.nightly"]
assert x["owner"] == "api" and x["expression"] == "cron(0 3 * * ? *)" and x["set"] == "default", x
assert len(x["next"]) == 3 and all(t.endswith("T03:00:00.000Z") for t in x["next"]), x
PY

step "its scheduled events reach the target in EventBridge's shape; another rule's do not"
ev put-events --entries "[{\"Source\":\"aws.events\",\"DetailType\":\"Scheduled Event\",\"Detail\":\"{}\",\"Resources\":[\"$arn\"]},
  {\"Source\":\"aws.events\",\"DetailType\":\"Scheduled Event\",\"Detail\":\"{}\",\"Resources\":[\"${arn}-other\"]},
  {\"Source\":\"shop\",\"DetailType\":\"Scheduled Event\",\"Detail\":\"{}\",\"Resources\":[\"$arn\"]}]" >"$ex_tmp/p"
grep -q '"FailedEntryCount": 0' "$ex_tmp/p" || fail "put-events: $(cat "$ex_tmp/p")"
ex_wait 10 "the scheduled-shape event did not reach the file target" test -s "$out"
sleep 1
python3 - "$out" "$ex_tmp/p" "$arn" <<'PY' || fail "file target: $(cat "$out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ids = [e["EventId"] for e in json.load(open(sys.argv[2]))["Entries"]]
assert len(lines) == 1, lines
e = lines[0]
assert e["id"] == ids[0], (e, ids)
assert e["detail-type"] == "Scheduled Event" and e["source"] == "aws.events", e
assert e["resources"] == [sys.argv[3]] and e["detail"] == {} and e["version"] == "0", e
assert e["account"] == "000000000000" and e["region"] == "us-east-1", e
PY

step "a bad expression and a schedule on another bus are refused"
ev put-rule --name bad --schedule-expression 'cron(61 * * * ? *)' >"$ex_tmp/b" 2>&1 && fail "cron(61 …) accepted"
grep -q ValidationException "$ex_tmp/b" || fail "cron(61 …): $(cat "$ex_tmp/b")"
ev create-event-bus --name other >/dev/null
ev put-rule --name elsewhere --event-bus-name other --schedule-expression 'rate(5 minutes)' >"$ex_tmp/b" 2>&1 &&
  fail "a schedule on bus other was accepted"
grep -q 'only on the default event bus' "$ex_tmp/b" || fail "schedule on other: $(cat "$ex_tmp/b")"

step "after a restart the schedule is still there"
kill "$ex_server_pid"
wait "$ex_server_pid" 2>/dev/null || true
ex_serve "$ex_tmp/s" "$port"
"$ex_bin" schedule list -c "$ex_tmp/s/sluice.lua" --data "$ex_tmp/s/data" | grep -q '^aws.nightly' ||
  fail "the schedule is gone after a restart"
ev list-rules | grep -q '"Name": "nightly"' || fail "the rule is gone after a restart"
echo "ok: EventBridge schedule rules"
