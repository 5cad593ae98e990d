#!/usr/bin/env bash
# bench/aws_bench.sh — sluice's EventBridge API (http/aws*.c) under wrk,
# against the same work through sluice's own HTTP API in the same run, on
# the same server and set:
#   1. PutEvents of 10 entries a call, SigV4-signed, 16 connections, in
#      events stored per second, against the same 10 events as CloudEvents
#      in one application/cloudevents-batch+json POST to
#      /v1/sets/default/events (goal: >= 0.7x). The PutEvents body is signed
#      once with botocore and replayed by bench/aws/replay.lua (a signature
#      stays valid 15 minutes and has no nonce; the server makes new
#      EventIds each time); the batch side's ids are made unique per
#      request, as ingest needs them.
#   2. TestEventPattern calls per second (signed once, replayed), against
#      POST /v1/patterns/test with the same pattern and event (no goal: the
#      figure is reported).
# Each row is the best of REPS runs per side, the sides alternating; noise
# = min..max. The server: bin/sluice serve with a config declaring
# server.aws credentials and set "default" (4 partitions, ack = "buffer":
# the API's own cost, not fdatasync's, is what is compared). After the
# runs, the set must hold at least the events the answers counted.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp), SLUICE_AWS_SECS
# (seconds per wrk run, default 4), SLUICE_AWS_REPS (runs per side, 1-9,
# default 2), SLUICE_AWS_CONNS (connections, default 16). About 40 s with
# the defaults. Exits 0 when it measured everything, goals met or not; 1 on
# any error.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

SECS=${SLUICE_AWS_SECS:-4}
REPS=${SLUICE_AWS_REPS:-2}
CONNS=${SLUICE_AWS_CONNS:-16}
# shellcheck disable=SC2034 # read by bench_workdir (bench/tsv.sh)
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
THREADS=2
ENTRIES=10
EVENT_BYTES=300
PARTITIONS=4
GOAL_PUT=0.7
NEED_KIB=$((2 * 1024 * 1024)) # ~400 B stored per event, up to ~100k ev/s for 2 x REPS x SECS s

die() {
    echo "aws_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }

case "$SECS" in '' | *[!0-9]*) die "SLUICE_AWS_SECS must be a whole number of seconds" ;; esac
[ "$SECS" -ge 1 ] && [ "$SECS" -le 60 ] || die "SLUICE_AWS_SECS must be 1-60"
case "$REPS" in [1-9]) ;; *) die "SLUICE_AWS_REPS must be 1-9" ;; esac
case "$CONNS" in '' | *[!0-9]*) die "SLUICE_AWS_CONNS must be a number" ;; esac
[ "$CONNS" -ge 1 ] && [ "$CONNS" -le 1000 ] || die "SLUICE_AWS_CONNS must be 1-1000"
. bench/tsv.sh

# ---- tools -------------------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
    note "aws_bench: installing wrk"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq --no-install-recommends wrk >/dev/null ||
        die "cannot install wrk (apt-get install wrk)"
fi
command -v curl >/dev/null 2>&1 || die "curl is missing (scripts/deps.sh installs it)"
/usr/bin/python3 -I -c 'import botocore' 2>/dev/null || die "botocore is missing (scripts/deps.sh installs python3-botocore)"
make -s bin/sluice || die "make bin/sluice failed"

# ---- the server --------------------------------------------------------------------------
bench_workdir aws_bench "$NEED_KIB"
AKID=AKIDBENCH
SECRET="bench-$$-secret"
cat >"$TMP/sluice.lua" <<EOF
server { aws = { region = "us-east-1", account = "000000000000",
  credentials = { $AKID = { secret = "$SECRET", admin = true } } } }
set "default" { partitions = $PARTITIONS, ack = "buffer" }
EOF
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
bin/sluice serve -c "$TMP/sluice.lua" --data "$TMP/data" --listen 127.0.0.1:0 >"$TMP/log" 2>&1 &
SRV_PID=$!
PORT=""
for _ in $(seq 100); do
    PORT=$(sed -n 's|.*listening on http://[0-9.]*:\([0-9]*\).*|\1|p' "$TMP/log" | head -n 1)
    [ -n "$PORT" ] && break
    kill -0 "$SRV_PID" 2>/dev/null || break
    sleep 0.05
done
[ -n "$PORT" ] || { cat "$TMP/log" >&2; die "sluice did not start"; }
BASE="http://127.0.0.1:$PORT"
curl -sf "$BASE/healthz" >/dev/null || die "sluice does not answer /healthz"

# ---- the requests, signed once -------------------------------------------------------------
/usr/bin/python3 -I - "$BASE" "$AKID" "$SECRET" "$TMP" "$ENTRIES" "$EVENT_BYTES" <<'PY' || die "cannot write the requests"
import datetime, json, sys, urllib.parse
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

base, akid, secret, tmp, n, size = sys.argv[1:7]
n, size = int(n), int(size)
host = urllib.parse.urlsplit(base).netloc
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def detail(i, pad):
    return {"seq": i, "kind": "bench", "note": "x" * pad}


# Entries and CloudEvents of about `size` bytes stored, the same on both sides.
entries, events = [], []
for i in range(n):
    ev = {"specversion": "1.0", "id": "@ID@", "source": "bench.aws", "type": "Bench Event", "time": now,
          "datacontenttype": "application/json", "awsresources": "[\"arn:aws:s3:::bench\"]",
          "data": detail(i, 0)}
    pad = max(1, size - len(json.dumps(ev, separators=(",", ":"))) - 30)
    ev["data"] = detail(i, pad)
    events.append(ev)
    entries.append({"Source": "bench.aws", "DetailType": "Bench Event", "Time": now,
                    "Resources": ["arn:aws:s3:::bench"],
                    "Detail": json.dumps(detail(i, pad), separators=(",", ":"))})


def write(name, path, headers, body):
    with open("%s/%s.req" % (tmp, name), "wb") as f:
        f.write(("POST %s\n" % path).encode())
        for k, v in headers.items():
            f.write(("%s: %s\n" % (k, v)).encode())
        f.write(b"\n" + body)


def signed(name, op, payload):
    body = json.dumps(payload, separators=(",", ":")).encode()
    req = AWSRequest(method="POST", url=base + "/", data=body,
                     headers={"Host": host, "Content-Type": "application/x-amz-json-1.1",
                              "X-Amz-Target": "AWSEvents." + op})
    SigV4Auth(Credentials(akid, secret), "events", "us-east-1").add_auth(req)
    write(name, "/", dict(req.headers.items()), body)


signed("putevents", "PutEvents", {"Entries": entries})
write("batch", "/v1/sets/default/events",
      {"Host": host, "Content-Type": "application/cloudevents-batch+json"},
      json.dumps(events, separators=(",", ":")).encode())
event = {"version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718", "detail-type": "Order Placed",
         "source": "com.acme.orders", "account": "000000000000", "time": "2024-03-15T09:30:00Z",
         "region": "us-east-1", "resources": ["arn:aws:s3:::orders"],
         "detail": {"amount": 150, "status": "NEW", "customer": {"tier": "gold", "country": "FR"},
                    "items": [{"sku": "a-1", "qty": 2}, {"sku": "b-7", "qty": 1}]}}
pattern = {"source": [{"prefix": "com.acme"}], "detail-type": ["Order Placed"],
           "detail": {"amount": [{"numeric": [">", 100, "<=", 1000]}], "status": [{"anything-but": ["CANCELLED"]}],
                      "customer": {"country": ["FR", "DE"]}, "items": {"sku": [{"prefix": "b-"}]}}}
signed("tep", "TestEventPattern", {"EventPattern": json.dumps(pattern), "Event": json.dumps(event)})
write("ptest", "/v1/patterns/test", {"Host": host, "Content-Type": "application/json"},
      json.dumps({"pattern": pattern, "event": event}).encode())
PY

# One of each before timing anything: the answers the runs count on.
# check NAME WANT: sends $TMP/NAME.req once with curl; its body must match WANT.
check() {
    local f="$TMP/$1.req" path args=() body
    path=$(head -n 1 "$f" | cut -d' ' -f2)
    while IFS= read -r l; do
        [ -z "$l" ] && break
        case "$l" in [Hh]ost:*) continue ;; esac
        args+=(-H "$l")
    done < <(tail -n +2 "$f")
    body=$(awk 'f {print} /^$/ && !f {f = 1}' "$f")
    local out
    out=$(printf '%s' "$body" | curl -s -X POST "${args[@]}" --data-binary @- "$BASE$path") ||
        die "$1: curl failed"
    printf '%s' "$out" | grep -q "$2" || die "$1: the answer does not match $2: ${out:0:300}"
}
check putevents '"FailedEntryCount":0'
check batch "^{\"accepted\":$ENTRIES,"
check tep '"Result":true'
check ptest '"match":true'

# ---- one wrk run ---------------------------------------------------------------------------
TAG="a$$"
RUN=0
declare -A BEST=() LO=() HI=() TOTAL=()
NON200=0
FIRST_BAD=""
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# thread_ticks PID: "TID TICKS" of each of its threads
thread_ticks() { for t in /proc/"$1"/task/*; do echo "${t##*/} $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)"; done; }
# run_wrk REQ MODE KEY LABEL: one run; R_UNITS (units/s), R_RPS, R_P50,
# R_P99 (ms), R_CPU (server cores) and the BEST/LO/HI of KEY.
run_wrk() {
    local req=$1 mode=$2 key=$3 label=$4 out c0 c1 t0 t1 line kv
    RUN=$((RUN + 1))
    out="$TMP/run$RUN.out"
    c0=$(cpu_ticks "$SRV_PID")
    thread_ticks "$SRV_PID" | sort >"$TMP/threads0"
    t0=$(date +%s%N)
    wrk -t"$THREADS" -c"$CONNS" -d"${SECS}s" --timeout 10s -s bench/aws/replay.lua "$BASE/" -- \
        "$TMP/$req.req" "$mode" "${TAG}r$RUN" >"$out" 2>&1 || { cat "$out" >&2; die "wrk failed ($label)"; }
    t1=$(date +%s%N)
    c1=$(cpu_ticks "$SRV_PID")
    thread_ticks "$SRV_PID" | sort >"$TMP/threads1"
    # The busiest server thread's share: libmicrohttpd hands each connection
    # to one worker thread for its life, so a run whose connections landed
    # on one worker shows it here.
    R_TOP=$(join "$TMP/threads0" "$TMP/threads1" | awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" \
        '{d = $3 - $2; if (d > m) m = d} END {printf "%.2f", (t > 0 ? (m / hz) / (t / 1e9) : 0)}')
    kill -0 "$SRV_PID" 2>/dev/null || { tail -n 20 "$TMP/log" >&2; die "sluice died ($label)"; }
    line=$(grep '^@@result ' "$out") || { cat "$out" >&2; die "wrk printed no result ($label)"; }
    local -A v=()
    for kv in ${line#@@result }; do v[${kv%%=*}]=${kv#*=}; done
    [ "${v[ok]}" -gt 0 ] || { cat "$out" >&2; die "no 200 answer ($label)"; }
    R_UNITS=$(awk -v a="${v[accepted]}" -v d="${v[duration_us]}" 'BEGIN {printf "%.0f", a / (d / 1e6)}')
    R_RPS=$(awk -v a="${v[ok]}" -v d="${v[duration_us]}" 'BEGIN {printf "%.0f", a / (d / 1e6)}')
    R_P50=$(awk -v x="${v[p50_us]}" 'BEGIN {printf "%.2f", x / 1000}')
    R_P99=$(awk -v x="${v[p99_us]}" 'BEGIN {printf "%.2f", x / 1000}')
    R_CPU=$(awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%.2f", (t > 0 ? (c / hz) / (t / 1e9) : 0)}')
    NON200=$((NON200 + v[non200] + v[connect] + v[read] + v[write] + v[timeout]))
    [ -z "$FIRST_BAD" ] && FIRST_BAD=$(sed -n 's/^@@first_bad //p' "$out")
    [ "$mode" != calls ] && TOTAL[stored]=$((${TOTAL[stored]:-0} + v[accepted]))
    local cur=${BEST[$key]:-}
    if [ -z "$cur" ] || [ "$R_UNITS" -gt "${cur%% *}" ]; then BEST[$key]="$R_UNITS $R_RPS $R_P50 $R_P99 $R_CPU $R_TOP"; fi
    if [ -z "${LO[$key]:-}" ] || [ "$R_UNITS" -lt "${LO[$key]}" ]; then LO[$key]=$R_UNITS; fi
    if [ -z "${HI[$key]:-}" ] || [ "$R_UNITS" -gt "${HI[$key]}" ]; then HI[$key]=$R_UNITS; fi
    note "$(printf '  %-40s %9s/s %8s req/s  p50 %6s ms  p99 %7s ms  cpu %4s (busiest thread %4s)  non-200 %s' \
        "$label" "$R_UNITS" "$R_RPS" "$R_P50" "$R_P99" "$R_CPU" "$R_TOP" "${v[non200]}")"
}
field() { # field KEY N: the Nth value of BEST[KEY] (1 = units)
    local -a a
    read -r -a a <<<"${BEST[$1]:-}"
    echo "${a[$(($2 - 1))]:-}"
}

note "aws_bench: warm-up (1 s each, untimed)"
SAVE=$SECS
SECS=1
run_wrk putevents putevents warm "warm-up PutEvents"
run_wrk batch batch warm "warm-up batch POST"
SECS=$SAVE
for rep in $(seq "$REPS"); do
    note "repeat $rep of $REPS"
    if [ $((rep % 2)) -eq 1 ]; then order="aws ref"; else order="ref aws"; fi
    for side in $order; do
        if [ "$side" = aws ]; then
            run_wrk putevents putevents put_aws "PutEvents x$ENTRIES, signed, -c$CONNS"
        else
            run_wrk batch batch put_ref "cloudevents-batch x$ENTRIES, -c$CONNS"
        fi
    done
    for side in $order; do
        if [ "$side" = aws ]; then
            run_wrk tep calls tep_aws "TestEventPattern, signed, -c$CONNS"
        else
            run_wrk ptest calls tep_ref "POST /v1/patterns/test, -c$CONNS"
        fi
    done
done

# Everything the answers counted is in the set (ack = "buffer" answers
# before the append: give it a moment).
stored_want=$((TOTAL[stored] + 2 * ENTRIES))
have=0
for _ in $(seq 50); do
    have=$(curl -s "$BASE/v1/sets/default" | sed -n 's/.*"events":\([0-9]*\).*/\1/p')
    [ "${have:-0}" -ge "$stored_want" ] && break
    sleep 0.1
done
[ "${have:-0}" -ge "$stored_want" ] || die "set default holds ${have:-0} events, the answers counted $stored_want"

# ---- the table -----------------------------------------------------------------------------
fmt_k() { awk -v x="$1" 'BEGIN {printf "%.1fk", x / 1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a >= b)}'; }
noise() { echo "$(fmt_k "${LO[$1]}")..$(fmt_k "${HI[$1]}")"; }
MISSED=0
put_s=$(field put_aws 1)
put_r=$(field put_ref 1)
put_ratio=$(ratio "$put_s" "$put_r")
put_met=MISS
if ge "$put_ratio" "$GOAL_PUT"; then put_met=yes; else MISSED=$((MISSED + 1)); fi
tep_s=$(field tep_aws 1)
tep_r=$(field tep_ref 1)
tep_ratio=$(ratio "$tep_s" "$tep_r")
{
    echo
    echo "aws_bench: the EventBridge API vs sluice's own HTTP API, same server and set, same run"
    printf '  machine   %s cores, load average %s at the start; wrk -t%s -c%s shares the cores\n' \
        "$(nproc)" "$LOAD_BEFORE" "$THREADS" "$CONNS"
    printf '  load      %s s per run, best of %s per side; events of ~%s B, %s per call; set default: %s partitions, ack=buffer\n' \
        "$SECS" "$REPS" "$EVENT_BYTES" "$ENTRIES" "$PARTITIONS"
    printf '%-46s %-7s %9s %9s %6s %6s %4s  %-15s %-15s\n' row unit eventbridge "http api" ratio goal met \
        "noise aws" "noise http"
    printf '%-46s %-7s %9s %9s %6s %6s %4s  %-15s %-15s\n' "1  PutEvents x$ENTRIES (signed) vs batch POST" ev/s \
        "$(fmt_k "$put_s")" "$(fmt_k "$put_r")" "$put_ratio" ">=$GOAL_PUT" "$put_met" "$(noise put_aws)" "$(noise put_ref)"
    printf '%-46s %-7s %9s %9s\n' "   p50 / p99" ms "$(field put_aws 3)/$(field put_aws 4)" "$(field put_ref 3)/$(field put_ref 4)"
    printf '%-46s %-7s %9s %9s\n' "   server CPU (cores; busiest thread)" "" "$(field put_aws 5); $(field put_aws 6)" \
        "$(field put_ref 5); $(field put_ref 6)"
    printf '%-46s %-7s %9s %9s %6s %6s %4s  %-15s %-15s\n' "2  TestEventPattern (signed) vs /v1/patterns/test" calls/s \
        "$(fmt_k "$tep_s")" "$(fmt_k "$tep_r")" "$tep_ratio" - - "$(noise tep_aws)" "$(noise tep_ref)"
    printf '%-46s %-7s %9s %9s\n' "   p50 / p99" ms "$(field tep_aws 3)/$(field tep_aws 4)" "$(field tep_ref 3)/$(field tep_ref 4)"
    printf '%-46s %-7s %9s %9s\n' "   server CPU (cores; busiest thread)" "" "$(field tep_aws 5); $(field tep_aws 6)" \
        "$(field tep_ref 5); $(field tep_ref 6)"
    echo
    echo "notes"
    echo "  1     the PutEvents body is signed once by botocore and replayed (a SigV4 signature has no nonce);"
    echo "        the batch side POSTs the CloudEvents those entries are stored as, ids unique per request."
    echo "        ev/s count the entries the answers say were stored; the set held ${have} events at the end."
    echo "  2     the same pattern (prefix, numeric range, anything-but, nested, array) and event on both sides"
    echo "  cpu   the server process's CPU during the best run, and its busiest thread's (a run whose 16"
    echo "        connections all landed on one libmicrohttpd worker is capped near 1.0; noise shows it)"
    [ "$NON200" -gt 0 ] && echo "  !     $NON200 answers other than 200 or socket errors; first: $FIRST_BAD"
    echo "  load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
}

yn() { [ "$1" = yes ] && echo yes || echo no; }
tsv_row aws.1 "EventBridge PutEvents ($ENTRIES entries a call, SigV4, $CONNS connections) vs the same events in a cloudevents-batch POST" \
    ev/s "$put_s" "POST /v1/sets/default/events (batch of $ENTRIES)" "$put_r" "$put_ratio" ">= $GOAL_PUT" "$(yn "$put_met")"
tsv_row aws.2 "EventBridge TestEventPattern (SigV4, $CONNS connections) vs POST /v1/patterns/test" \
    calls/s "$tep_s" "POST /v1/patterns/test" "$tep_r" "$tep_ratio" - -
echo
echo "aws_bench: putevents_eps=$put_s batch_eps=$put_r putevents_vs_batch=$put_ratio" \
    "testeventpattern_cps=$tep_s patterns_test_cps=$tep_r tep_vs_patterns_test=$tep_ratio goals_missed=$MISSED"
exit 0
