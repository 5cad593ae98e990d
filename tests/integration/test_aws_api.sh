#!/bin/sh
# sluice's EventBridge API (http/aws*.c, docs/eventbridge-api.md) driven by
# clients nobody here wrote, against the real bin/sluice on loopback ports:
# Debian's AWS CLI (/usr/bin/aws), the AWS SDK for JavaScript v3 and the npm
# SigV4 signer (@aws-sdk/client-eventbridge, @aws-sdk/signature-v4 3.374.0
# with @smithy/hash-node: installed at test time into
# build/rel/npm-awsclients and reused while tests/awsclients/package.json's
# pins match) and boto3 (Debian's python3-boto3, run with python3 -I).
#
# The server runs with a config declaring server.aws credentials: an admin
# key and a key with publish = {"default"} only. A loopback HTTP receiver
# (tests/awsclients/receiver.py, a background python3 http.server that
# writes every request to a file) is the API destinations' URL.
#   AWS CLI: put-events of 3 entries (bus by name, none, by ARN) stored as
#     CloudEvents; test-event-pattern true/false/InvalidEventPatternException;
#     create-connection (BASIC) + create-api-destination + put-rule +
#     put-targets, then put-events delivers the matching event, and only it,
#     to the receiver in EventBridge's shape with the Basic header; the rule
#     in GET /v1/rules as "managed":"api"; list-rules, describe-rule,
#     list-targets-by-rule, list-event-buses (also on POST /eventbridge/);
#     a wrong secret and an unsigned raw POST refused, nothing stored.
#   restart: the rule and its target survive a restart and still deliver;
#     delete-rule is refused while the target remains, accepted after
#     remove-targets.
#   tests/awsclients/sdk.mjs, sign_fuzz.mjs, boto3_client.py (each says what
#     it checks at its top).
#   parity: every case of tests/unit/pattern_cases.h (printed by
#     build/rel/tools/pattern_cases) through TestEventPattern and
#     POST /v1/patterns/test gives the table's answer
#     (tests/awsclients/pattern_parity.py).
# Then a server without credentials (no config file) on loopback: an
# unsigned raw POST of PutEvents, and one signed with made-up keys, are
# accepted and stored.
#
# The checks of the bugs this test found first (a %2F in a signed query, an
# event with a repeated member in TestEventPattern, DeleteEventBus naming an
# API rule's set by a line of the config file) run strictly; with
# SLUICE_AWS_KNOWN_BUGS=0 they only print a note. About 20-40 s on 2 cores
# (the first run adds the npm install).
set -eu
cd "$(dirname "$0")/../.."
root=$(pwd)
py=/usr/bin/python3
node=/usr/bin/node
awscli=/usr/bin/aws
npmdir="$root/build/rel/npm-awsclients"
cases=build/rel/tools/pattern_cases
[ -x bin/sluice ] || { echo "FAIL: bin/sluice is not built (make -j2)"; exit 1; }
[ -x "$awscli" ] || { echo "FAIL: $awscli is missing (scripts/deps.sh installs awscli)"; exit 1; }
"$py" -I -c 'import boto3' 2>/dev/null || { echo "FAIL: boto3 is not installed (scripts/deps.sh installs python3-boto3)"; exit 1; }
[ -x "$node" ] || { echo "FAIL: $node is missing (scripts/deps.sh installs nodejs)"; exit 1; }
command -v npm >/dev/null || { echo "FAIL: npm is not installed (scripts/deps.sh installs it)"; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl is not installed (scripts/deps.sh installs it)"; exit 1; }
# (make itests builds it; make again is a no-op unless the table changed)
make -s "$cases" >/dev/null 2>&1 || { echo "FAIL: make $cases failed"; exit 1; }
dir=$(mktemp -d)
pid=
rpid=
cleanup() {
    for p in $pid $rpid; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir" "$npmdir.tmp.$$"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
    echo "FAIL: $*"
    [ -f "$dir/log" ] && { echo "--- sluice log:"; tail -20 "$dir/log"; }
    exit 1
}
free_port() { "$py" -I -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { "$py" -I -c 'import time; print(int(time.monotonic()*1000))'; }
# jv FILE EXPR: EXPR (Python, the file's JSON as j) printed; JSON for
# anything but a string. Prints "<no JSON>" for a file that is not JSON.
jv() {
    "$py" -I -c '
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    print("<no JSON>"); sys.exit(0)
try:
    v = eval(sys.argv[2], {"j": j, "json": json})
except Exception as e:
    v = "<%s: %s>" % (type(e).__name__, e)
print(v if isinstance(v, str) else json.dumps(v, sort_keys=True))' "$1" "$2"
}

# ---- the npm clients, at the versions tests/awsclients/package.json pins -------------------
pinned() { sed -n "s|.*\"$1\": *\"\\([^\"]*\\)\".*|\\1|p" tests/awsclients/package.json; }
installed() { sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$npmdir/node_modules/$1/package.json" 2>/dev/null | head -1; }
stale=
for m in @aws-sdk/client-eventbridge @aws-sdk/signature-v4 @smithy/hash-node; do
    [ "$(installed "$m")" = "$(pinned "$m")" ] || stale=1
done
if [ -n "$stale" ]; then
    tmp="$npmdir.tmp.$$"
    mkdir -p "$tmp"
    cp tests/awsclients/package.json "$tmp/package.json"
    timeout 120 npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error > "$dir/npm" 2>&1 ||
        fail "npm install of tests/awsclients/package.json into $tmp: $(tail -5 "$dir/npm")"
    rm -rf "$npmdir"
    mv "$tmp" "$npmdir"
fi

# ---- the receiver, the server ---------------------------------------------------------------
: > "$dir/recv"
"$py" -I tests/awsclients/receiver.py "$dir/recv" "$dir/recv.port" > "$dir/recv.log" 2>&1 &
rpid=$!
i=0
until [ -s "$dir/recv.port" ]; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "the receiver did not start within 10 s: $(cat "$dir/recv.log")"
    sleep 0.1
done
recv="http://127.0.0.1:$(cat "$dir/recv.port")"

REGION=us-east-1
ACCOUNT=000000000000
AK=AKIDTESTADMIN
SK="admin-$$-secret"
PAK=AKIDTESTPUB
PSK="pub-$$-secret"
ARN="arn:aws:events:$REGION:$ACCOUNT"
cat > "$dir/sluice.lua" <<EOF
server { aws = { region = "$REGION", account = "$ACCOUNT", credentials = {
  $AK = { secret = "$SK", admin = true },
  $PAK = { secret = "$PSK", publish = { "default" } },
} } }
set "default" { partitions = 1 }
EOF
bin/sluice check "$dir/sluice.lua" > "$dir/check" 2>&1 || fail "sluice check refuses the config: $(cat "$dir/check")"

# start: a server on a free port with the config, data in $dir/data; sets
# port, base and pid once it answers /healthz.
start() {
    port=$(free_port)
    base="http://127.0.0.1:$port"
    bin/sluice serve -c "$dir/sluice.lua" --data "$dir/data" --listen "127.0.0.1:$port" >> "$dir/log" 2>&1 &
    pid=$!
    i=0
    until curl -sf "$base/healthz" > /dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || fail "sluice did not answer $base/healthz within 10 s"
        kill -0 "$pid" 2>/dev/null || fail "sluice exited at start"
        sleep 0.1
    done
}
stop() {
    kill "$pid"
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || fail "sluice did not stop within 10 s of SIGTERM"
        sleep 0.1
    done
    rc=0
    wait "$pid" || rc=$?
    pid=
    [ "$rc" -eq 0 ] || fail "sluice exited $rc on SIGTERM, want 0"
}
start

# ---- the AWS CLI ----------------------------------------------------------------------------
: > "$dir/empty"
# cli NAME [KEY SECRET [ENDPOINT]] -- ARGS...: aws events ARGS with that
# credential (the admin one by default); stdout in $dir/NAME.out, stderr in
# $dir/NAME.err; sets rc.
cli() {
    name=$1
    shift
    k=$AK s=$SK e=$base
    if [ "$1" != -- ]; then
        k=$1 s=$2
        shift 2
        if [ "$1" != -- ]; then e=$1; shift; fi
    fi
    shift
    rc=0
    env -u AWS_PROFILE -u AWS_SESSION_TOKEN -u AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID="$k" AWS_SECRET_ACCESS_KEY="$s" \
        AWS_DEFAULT_REGION=$REGION AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE="$dir/empty" \
        AWS_SHARED_CREDENTIALS_FILE="$dir/empty" AWS_PAGER="" AWS_MAX_ATTEMPTS=1 AWS_RETRY_MODE=standard \
        timeout 60 "$awscli" events "$@" --endpoint-url "$e" --output json \
        --cli-connect-timeout 5 --cli-read-timeout 30 > "$dir/$name.out" 2> "$dir/$name.err" || rc=$?
}
ok() { # ok NAME ...: as cli, and the call must succeed
    cli "$@"
    [ "$rc" -eq 0 ] || fail "aws events $1 (exit $rc): $(tr '\n' ' ' < "$dir/$1.err" | cut -c1-300)"
}
refused() { # refused NAME ERRORTYPE ...: as cli, and the call must fail naming ERRORTYPE
    n=$1 want=$2
    shift 2
    cli "$n" "$@"
    [ "$rc" -ne 0 ] && grep -q "($want)" "$dir/$n.err" ||
        fail "aws events $n: want $want, got exit $rc: $(cat "$dir/$n.err" "$dir/$n.out" | tr '\n' ' ' | cut -c1-300)"
}
# events SET FILE: the set's events, every partition's, into FILE as
# {"events": [...]}
events() {
    "$py" -I -c '
import json, sys, urllib.request
base, name = sys.argv[1], sys.argv[2]
def get(path):
    try:
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return json.loads(r.read())
    except Exception:
        return {}
evs = []
for p in range(int(get("/v1/sets/" + name).get("partitions") or 1)):
    evs += get("/v1/sets/%s/events?partition=%d&offset=0&max=1000" % (name, p)).get("events", [])
print(json.dumps({"events": evs}))' "$base" "$1" > "$2"
}
# wait_recv ID SECS: until the receiver has a request whose body holds ID
wait_recv() {
    i=0
    until grep -q "$1" "$dir/recv"; do
        i=$((i + 1))
        [ $i -lt $(($2 * 10)) ] || return 1
        sleep 0.1
    done
}
t0=$(now_ms)
tag="cli$$"

ok put3 -- put-events --entries "[
  {\"Source\":\"cli.put\",\"DetailType\":\"Cli One\",\"Detail\":\"{\\\"n\\\":1,\\\"tag\\\":\\\"$tag\\\"}\",\"EventBusName\":\"default\",\"Resources\":[\"arn:aws:s3:::cli-bucket\"]},
  {\"Source\":\"cli.put\",\"DetailType\":\"Cli Two\",\"Detail\":\"{\\\"n\\\":2,\\\"tag\\\":\\\"$tag\\\"}\"},
  {\"Source\":\"cli.put\",\"DetailType\":\"Cli Three\",\"Detail\":\"{\\\"n\\\":3,\\\"tag\\\":\\\"$tag\\\"}\",\"EventBusName\":\"$ARN:event-bus/default\",\"Time\":\"2024-05-01T12:00:00Z\"}]"
[ "$(jv "$dir/put3.out" 'j["FailedEntryCount"]')" = 0 ] || fail "put-events of 3: $(cat "$dir/put3.out")"
[ "$(jv "$dir/put3.out" 'len(set(e["EventId"] for e in j["Entries"] if len(e.get("EventId", "")) == 36))')" = 3 ] ||
    fail "put-events of 3: want 3 distinct EventIds: $(cat "$dir/put3.out")"
cp "$dir/put3.out" "$dir/ids.json"
i=0
while :; do
    events default "$dir/ev.json"
    got=$("$py" -I -c '
import json, sys
ids = [e["EventId"] for e in json.load(open(sys.argv[1]))["Entries"]]
evs = {e["id"]: e for e in json.load(open(sys.argv[2])).get("events", []) if e.get("id") in ids}
if len(evs) < 3:
    print("missing %d" % (3 - len(evs))); sys.exit(0)
want = [("Cli One", 1), ("Cli Two", 2), ("Cli Three", 3)]
for eid, (t, n) in zip(ids, want):
    e = evs[eid]
    if e.get("source") != "cli.put" or e.get("type") != t or (e.get("data") or {}).get("n") != n or not e.get("time"):
        print("event %s stored as %s" % (eid, json.dumps(e))); sys.exit(0)
if evs[ids[0]].get("awsresources") != "[\"arn:aws:s3:::cli-bucket\"]":
    print("Resources stored as awsresources %r" % evs[ids[0]].get("awsresources")); sys.exit(0)
if not str(evs[ids[2]].get("time")).startswith("2024-05-01T12:00:00"):
    print("Time 2024-05-01T12:00:00Z stored as %r" % evs[ids[2]].get("time")); sys.exit(0)
print("ok")' "$dir/ids.json" "$dir/ev.json")
    [ "$got" = ok ] && break
    i=$((i + 1))
    [ $i -lt 50 ] || fail "put-events of 3: the stored CloudEvents: $got"
    sleep 0.1
done
echo "ok: aws-cli: put-events of 3 entries stored as CloudEvents (id, source, type, data, time, awsresources)"

ev='{"version":"0","id":"6a7e8feb-b491-4cf7-a9f1-bf3703467718","detail-type":"Order Placed","source":"com.acme.orders","account":"000000000000","time":"2024-03-15T09:30:00Z","region":"us-east-1","resources":[],"detail":{"amount":150,"status":"NEW"}}'
ok tep1 -- test-event-pattern --event-pattern '{"source":[{"prefix":"com.acme"}],"detail":{"amount":[{"numeric":[">",100]}]}}' --event "$ev"
[ "$(jv "$dir/tep1.out" 'j["Result"]')" = true ] || fail "test-event-pattern (prefix, numeric): $(cat "$dir/tep1.out"), want Result true"
ok tep2 -- test-event-pattern --event-pattern '{"detail":{"status":[{"anything-but":["NEW"]}]}}' --event "$ev"
[ "$(jv "$dir/tep2.out" 'j["Result"]')" = false ] || fail "test-event-pattern (anything-but): $(cat "$dir/tep2.out"), want Result false"
refused tep3 InvalidEventPatternException -- test-event-pattern --event-pattern '{"detail":{"amount":[{"numeric":[">"]}]}}' --event "$ev"
echo "ok: aws-cli: test-event-pattern true, false, InvalidEventPatternException"

ok conn -- create-connection --name "$tag-conn" --authorization-type BASIC \
    --auth-parameters '{"BasicAuthParameters":{"Username":"cli-user","Password":"cli-pass"}}'
conn=$(jv "$dir/conn.out" 'j["ConnectionArn"]')
[ "$conn" = "$ARN:connection/$tag-conn" ] || fail "create-connection: ConnectionArn $conn"
ok dest -- create-api-destination --name "$tag-dest" --connection-arn "$conn" \
    --invocation-endpoint "$recv/cli/$tag" --http-method POST
dest=$(jv "$dir/dest.out" 'j["ApiDestinationArn"]')
[ "$dest" = "$ARN:api-destination/$tag-dest" ] || fail "create-api-destination: ApiDestinationArn $dest"
pattern='{"source":["cli.route"],"detail":{"n":[{"numeric":[">",5]}]}}'
ok rule -- put-rule --name "$tag-route" --event-pattern "$pattern" --state ENABLED --description "cli route"
[ "$(jv "$dir/rule.out" 'j["RuleArn"]')" = "$ARN:rule/$tag-route" ] || fail "put-rule: $(cat "$dir/rule.out")"
ok targets -- put-targets --rule "$tag-route" --targets "[{\"Id\":\"dest\",\"Arn\":\"$dest\"}]"
[ "$(jv "$dir/targets.out" 'j["FailedEntryCount"]')" = 0 ] || fail "put-targets: $(cat "$dir/targets.out")"
curl -s "$base/v1/rules" > "$dir/rules.json"
[ "$(jv "$dir/rules.json" "[r.get('managed') for r in j['rules'] if r.get('name') == '$tag-route']")" = '["api"]' ] ||
    fail "GET /v1/rules: want $tag-route with \"managed\":\"api\": $(cut -c1-400 "$dir/rules.json")"

# route N: put-events of a matching event (n = N) and two that are not;
# the receiver must get the first, in EventBridge's shape with the Basic
# header, and not the others.
route() {
    ok route -- put-events --entries "[
      {\"Source\":\"cli.route\",\"DetailType\":\"Route Me\",\"Detail\":\"{\\\"n\\\":$1}\",\"Resources\":[\"arn:aws:s3:::r\"]},
      {\"Source\":\"cli.route\",\"DetailType\":\"Route Me\",\"Detail\":\"{\\\"n\\\":1}\"},
      {\"Source\":\"cli.other\",\"DetailType\":\"Route Me\",\"Detail\":\"{\\\"n\\\":$1}\"}]"
    [ "$(jv "$dir/route.out" 'j["FailedEntryCount"]')" = 0 ] || fail "put-events to route: $(cat "$dir/route.out")"
    want=$(jv "$dir/route.out" 'j["Entries"][0]["EventId"]')
    wait_recv "$want" 20 || fail "the API destination (the receiver) got no event $want within 20 s ($2)"
    sleep 0.5
    got=$("$py" -I -c '
import base64, json, sys
ids = [e["EventId"] for e in json.load(open(sys.argv[1]))["Entries"]]
reqs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
mine = [r for r in reqs if r["path"] == sys.argv[3]]
hits = [r for r in mine if ids[0] in r["body"]]
stray = [r for r in mine if ids[1] in r["body"] or ids[2] in r["body"]]
if len(hits) != 1 or stray:
    print("%d deliveries of %s, %d of the events the pattern does not match" % (len(hits), ids[0], len(stray))); sys.exit(0)
h = hits[0]
b = json.loads(h["body"])
want = {"version": "0", "id": ids[0], "detail-type": "Route Me", "source": "cli.route", "account": "000000000000",
        "region": "us-east-1", "resources": ["arn:aws:s3:::r"], "detail": {"n": int(sys.argv[4])}}
diff = {k: b.get(k) for k in want if b.get(k) != want[k]}
if diff or not b.get("time"):
    print("delivered %s, differs in %s" % (h["body"][:300], json.dumps(diff))); sys.exit(0)
basic = "Basic " + base64.b64encode(b"cli-user:cli-pass").decode()
if h["method"] != "POST" or h["headers"].get("authorization") != basic:
    print("delivered with %s, Authorization %r, want POST and %r" % (h["method"], h["headers"].get("authorization"), basic)); sys.exit(0)
print("ok")' "$dir/route.out" "$dir/recv" "/cli/$tag" "$1")
    [ "$got" = ok ] || fail "the API destination's delivery ($2): $got"
}
route 7 "before the restart"
echo "ok: aws-cli: create-connection + create-api-destination + put-rule + put-targets: the matching event, only it, delivered in EventBridge's shape with the Basic header"

ok lr -- list-rules --name-prefix "$tag"
[ "$(jv "$dir/lr.out" '[(r["Name"], r["State"], json.loads(r["EventPattern"]), r.get("EventBusName")) for r in j["Rules"]]')" = \
  "$("$py" -I -c 'import json,sys; print(json.dumps([[sys.argv[1], "ENABLED", json.loads(sys.argv[2]), "default"]], sort_keys=True))' "$tag-route" "$pattern")" ] ||
    fail "list-rules --name-prefix $tag: $(cat "$dir/lr.out")"
ok dr -- describe-rule --name "$tag-route"
[ "$(jv "$dir/dr.out" '[j["Name"], j["Arn"], j["State"], j.get("Description")]')" = "[\"$tag-route\", \"$ARN:rule/$tag-route\", \"ENABLED\", \"cli route\"]" ] ||
    fail "describe-rule: $(cat "$dir/dr.out")"
refused dr2 ResourceNotFoundException -- describe-rule --name "$tag-none"
ok lt -- list-targets-by-rule --rule "$tag-route"
[ "$(jv "$dir/lt.out" '[[t["Id"], t["Arn"]] for t in j["Targets"]]')" = "[[\"dest\", \"$dest\"]]" ] ||
    fail "list-targets-by-rule: $(cat "$dir/lt.out")"
for ep in "$base" "$base/eventbridge/"; do
    ok leb "$AK" "$SK" "$ep" -- list-event-buses
    [ "$(jv "$dir/leb.out" '[b["Arn"] for b in j["EventBuses"] if b["Name"] == "default"]')" = "[\"$ARN:event-bus/default\"]" ] ||
        fail "list-event-buses on $ep: $(cat "$dir/leb.out")"
done
echo "ok: aws-cli: list-rules, describe-rule (and an unknown one), list-targets-by-rule, list-event-buses on / and /eventbridge/"

refused bad InvalidSignatureException "$AK" "wrong-$SK" -- put-events --entries '[{"Source":"cli.badsig","DetailType":"Bad","Detail":"{}"}]'
refused bad2 UnrecognizedClientException AKIDNOBODY "$SK" -- put-events --entries '[{"Source":"cli.badsig","DetailType":"Bad","Detail":"{}"}]'
st=$(curl -s -o "$dir/unsigned.out" -w '%{http_code}' -X POST -H 'Content-Type: application/x-amz-json-1.1' \
    -H 'X-Amz-Target: AWSEvents.PutEvents' -d '{"Entries":[{"Source":"cli.badsig","DetailType":"Bad","Detail":"{}"}]}' "$base/")
[ "$st" = 400 ] || [ "$st" = 403 ] || fail "an unsigned PutEvents with credentials configured answered $st: $(cat "$dir/unsigned.out")"
[ "$(jv "$dir/unsigned.out" 'j["__type"]')" = IncompleteSignatureException ] ||
    fail "an unsigned PutEvents: want IncompleteSignatureException, got $st $(cat "$dir/unsigned.out")"
sleep 0.3
events default "$dir/ev.json"
! grep -q cli.badsig "$dir/ev.json" || fail "a refused put-events (wrong secret, unknown key, unsigned) was stored"
echo "ok: aws-cli: a wrong secret (InvalidSignatureException), an unknown key (UnrecognizedClientException) and an unsigned POST (IncompleteSignatureException) refused, nothing stored"

# ---- restart --------------------------------------------------------------------------------
stop
[ -f "$dir/data/aws/state.json" ] || fail "no DATA/aws/state.json after a stop"
start
ok lr2 -- list-rules --name-prefix "$tag"
[ "$(jv "$dir/lr2.out" '[r["Name"] for r in j["Rules"]]')" = "[\"$tag-route\"]" ] || fail "list-rules after a restart: $(cat "$dir/lr2.out")"
ok lt2 -- list-targets-by-rule --rule "$tag-route"
[ "$(jv "$dir/lt2.out" '[[t["Id"], t["Arn"]] for t in j["Targets"]]')" = "[[\"dest\", \"$dest\"]]" ] ||
    fail "list-targets-by-rule after a restart: $(cat "$dir/lt2.out")"
route 9 "after a restart"
refused del1 ValidationException -- delete-rule --name "$tag-route"
ok rt -- remove-targets --rule "$tag-route" --ids dest
[ "$(jv "$dir/rt.out" 'j["FailedEntryCount"]')" = 0 ] || fail "remove-targets: $(cat "$dir/rt.out")"
ok del2 -- delete-rule --name "$tag-route"
ok lr3 -- list-rules --name-prefix "$tag"
[ "$(jv "$dir/lr3.out" 'j["Rules"]')" = "[]" ] || fail "list-rules after delete-rule: $(cat "$dir/lr3.out")"
ok dd -- delete-api-destination --name "$tag-dest"
ok dc -- delete-connection --name "$tag-conn"
echo "ok: aws-cli: the rule and its target survived a restart and delivered; delete-rule refused with a target, accepted after remove-targets ($(($(now_ms) - t0)) ms for the CLI steps)"

# ---- the other clients ----------------------------------------------------------------------
# run NAME CMD...: one client's steps, bounded; its "ok:" and "note:" lines
# are shown, a failure shows its output and the server's log.
summary=
run() {
    name=$1
    shift
    t1=$(now_ms)
    rc=0
    timeout 60 "$@" > "$dir/$name.out" 2> "$dir/$name.err" || rc=$?
    ms=$(($(now_ms) - t1))
    cat "$dir/$name.out"
    if [ "$rc" -ne 0 ]; then
        [ "$rc" -eq 124 ] && echo "FAIL: $name did not finish within 60 s"
        grep -q '^FAIL: ' "$dir/$name.out" || echo "FAIL: $name exited $rc without a FAIL line"
        echo "--- $name stderr:"
        tail -30 "$dir/$name.err"
        fail "$name against sluice (exit $rc after $ms ms)"
    fi
    n=$(grep -c '^ok: ' "$dir/$name.out" || true)
    summary="$summary $name ${n} steps ${ms} ms;"
    kill -0 "$pid" 2>/dev/null || fail "sluice died during $name"
}
run sdk "$node" tests/awsclients/sdk.mjs "$base" "$AK" "$SK" "$recv" "$dir/recv" "$npmdir"
run sign_fuzz "$node" tests/awsclients/sign_fuzz.mjs "$base" "$AK" "$SK" "$npmdir" 240
mkdir -p "$dir/boto3"
run boto3 "$py" -I tests/awsclients/boto3_client.py "$base" "$AK" "$SK" "$PAK" "$PSK" "$dir/boto3" "$dir/sluice.lua"
"$cases" > "$dir/cases.jsonl" || fail "$cases failed"
run parity sh -c '"$1" -I tests/awsclients/pattern_parity.py "$2" "$3" "$4" < "$5"' sh "$py" "$base" "$AK" "$SK" "$dir/cases.jsonl"
# Every step of every client ran (a script that stops early without FAIL
# still fails here).
for c in sdk:6 sign_fuzz:2 boto3:7 parity:1; do
    n=$(grep -c '^ok: ' "$dir/${c%:*}.out" || true)
    [ "$n" -eq "${c#*:}" ] || fail "${c%:*} passed $n steps, want ${c#*:}"
done
stop

# ---- without credentials, on loopback ---------------------------------------------------------
port=$(free_port)
base="http://127.0.0.1:$port"
bin/sluice serve --data "$dir/data2" --listen "127.0.0.1:$port" >> "$dir/log" 2>&1 &
pid=$!
i=0
until curl -sf "$base/healthz" > /dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "sluice (no config) did not answer $base/healthz within 10 s"
    sleep 0.1
done
st=$(curl -s -o "$dir/nocred.out" -w '%{http_code}' -X POST -H 'Content-Type: application/x-amz-json-1.1' \
    -H 'X-Amz-Target: AWSEvents.PutEvents' \
    -d "{\"Entries\":[{\"Source\":\"nocred.raw\",\"DetailType\":\"Raw\",\"Detail\":\"{\\\"tag\\\":\\\"$tag\\\"}\"}]}" "$base/")
[ "$st" = 200 ] && [ "$(jv "$dir/nocred.out" 'j["FailedEntryCount"]')" = 0 ] ||
    fail "an unsigned PutEvents on loopback without credentials answered $st: $(cat "$dir/nocred.out")"
id=$(jv "$dir/nocred.out" 'j["Entries"][0]["EventId"]')
ok anykey AKIDMADEUP madeup-secret -- put-events --entries '[{"Source":"nocred.cli","DetailType":"Cli","Detail":"{}"}]'
id2=$(jv "$dir/anykey.out" 'j["Entries"][0]["EventId"]')
i=0
while :; do
    events default "$dir/ev.json"
    [ "$(jv "$dir/ev.json" "sorted(e['source'] + ' ' + e['type'] for e in j['events'] if e['id'] in ('$id', '$id2'))")" = \
        '["nocred.cli Cli", "nocred.raw Raw"]' ] && break
    i=$((i + 1))
    [ $i -lt 50 ] || fail "without credentials: the unsigned and the made-up-key PutEvents are not stored: $(cut -c1-400 "$dir/ev.json")"
    sleep 0.1
done
stop
echo "ok: without credentials on loopback: an unsigned raw PutEvents and one signed with made-up keys stored"
echo "ok: the EventBridge API with the AWS CLI, the JS SDK, the npm signer, boto3, pattern parity:$summary"
