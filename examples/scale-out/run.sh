#!/usr/bin/env bash
# examples/scale-out/run.sh — three sluice routers sharing one Kafka-backed
# event set, on one machine (docs/scale-out.md):
#
#   1. starts librdkafka's mock cluster with 3 brokers (build/rel/tools/kafka_mock)
#      and creates the topics demo.orders (6 partitions, replication 3) and
#      demo.cursors (the mock cannot create topics itself);
#   2. starts three `bin/sluice serve -c examples/scale-out/sluice.lua` on free
#      loopback ports, each with a data folder and an output folder of its own;
#   3. waits until the set's consumer group sluice.set.orders has split the 6
#      partitions among them;
#   4. posts EVENTS orders (NDJSON, ack = "durable"), a third to each router,
#      and checks every answer carries a Kafka offset;
#   5. waits until every order is in some router's out/orders.ndjson, checks
#      that each router delivered only partitions it owns, and shows
#      GET /v1/sets and GET /v1/rules of each router;
#   6. with --takeover: SIGKILLs router 3, posts as many orders again through
#      the other two, and shows how long its partitions took to move
#      (session_timeout = "6s" in sluice.lua, plus a rebalance) and the new split;
#   7. stops everything on exit (SIGTERM to the routers, then the mock), also
#      on Ctrl-C or an error.
#
#   examples/scale-out/run.sh [--takeover]
#
# Environment: SCALEOUT_EVENTS (orders per round, a multiple of 3, default 60),
# SCALEOUT_KEEP=1 (keep the work folder: logs, data, outputs),
# SCALEOUT_SELFTEST=local (the same script with a local set instead of the
# Kafka-backed one, no cluster: each router then has its own copy of the set
# and delivers what it was sent; this tests the script, not scale-out).
#
# Prints "ok: …" last and exits 0 when every order was delivered; exits 1
# naming what went wrong (with the end of each router's log). Bounded: every
# wait gives up; 10-25 s without --takeover (the group takes 3-15 s to
# settle), 25-45 s with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

TAKEOVER=0
for a in "$@"; do
  case "$a" in
    --takeover) TAKEOVER=1 ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--takeover]" >&2; exit 2 ;;
  esac
done
N=${SCALEOUT_EVENTS:-60}
case "$N" in '' | *[!0-9]*) echo "SCALEOUT_EVENTS must be a number" >&2; exit 2 ;; esac
((N >= 3 && N % 3 == 0)) || { echo "SCALEOUT_EVENTS must be a multiple of 3" >&2; exit 2; }
LOCAL=0
[[ ${SCALEOUT_SELFTEST:-} == local ]] && LOCAL=1
((LOCAL && TAKEOVER)) && { echo "--takeover needs the Kafka-backed set (not SCALEOUT_SELFTEST=local)" >&2; exit 2; }
PARTS=6
SET=orders
TOPIC=demo.orders
GROUP=sluice.set.orders

bin=$root/bin/sluice
mock=$root/build/rel/tools/kafka_mock
if [[ ! -x $bin || ! -x $mock ]]; then
  echo "building bin/sluice and the Kafka mock"
  make -s bin/sluice kafka-mock
fi
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "$tool is needed (scripts/deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-scale-out.XXXXXX")
router_pids=(- - -)
ports=(- - -)
mock_pid=""

stop_pid() { # stop_pid PID SIGNAL: signal, then wait up to 10 s, then SIGKILL
  local pid=$1 sig=$2
  kill "-$sig" "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  for i in 0 1 2; do [[ ${router_pids[i]} != - ]] && stop_pid "${router_pids[i]}" TERM; done
  if [[ -n $mock_pid ]]; then
    exec 3>&- 2>/dev/null || true # end of its stdin: it quits
    stop_pid "$mock_pid" TERM
  fi
  if [[ ${SCALEOUT_KEEP:-0} == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 1' INT TERM

fail() {
  echo "FAIL: $*" >&2
  local i
  for i in 1 2 3; do
    [[ -f $work/r$i/server.log ]] || continue
    echo "---- router $i: last lines of its log" >&2
    tail -n 12 "$work/r$i/server.log" >&2
  done
  exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_for SECONDS WHAT COMMAND...: runs COMMAND every 0.2 s until it succeeds.
wait_for() {
  local limit=$1 what=$2 end
  shift 2
  end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || fail "$what (waited $limit s)"
    sleep 0.2
  done
}

# ---- 1. the cluster -----------------------------------------------------------------
cfg=$here/sluice.lua
brokers=""
if ((LOCAL)); then
  # the same rules on a local set: no server.kafka, no backend/replication
  cfg=$work/sluice.lua
  sed -e '/^server {/,/^}/d' -e 's/backend = "kafka", //; s/replication = 3, //' "$here/sluice.lua" >"$cfg"
  echo "selftest: a local set instead of the Kafka-backed one, no cluster"
else
  mkfifo "$work/mock.in"
  "$mock" --commands --brokers 3 <"$work/mock.in" >"$work/mock.out" 2>"$work/mock.err" &
  mock_pid=$!
  exec 3>"$work/mock.in" # holds the mock's stdin open; closing it stops the mock
  wait_for 10 "kafka_mock did not start: $(cat "$work/mock.err" 2>/dev/null)" grep -q '^bootstrap ' "$work/mock.out"
  brokers=$(sed -n 's/^bootstrap //p' "$work/mock.out")
  echo "mock cluster: 3 brokers at $brokers"
  # mock_cmd COMMAND...: sends one command, waits for its answer, fails on "error: …"
  mock_cmd() {
    local before answer
    before=$(grep -vc '^bootstrap ' "$work/mock.out" || true)
    echo "$*" >&3
    wait_for 30 "kafka_mock did not answer '$*' ($(tail -n 2 "$work/mock.err" 2>/dev/null))" \
      test "$(grep -vc '^bootstrap ' "$work/mock.out" || true)" -gt "$before"
    answer=$(grep -v '^bootstrap ' "$work/mock.out" | tail -n 1)
    [[ $answer == ok ]] || fail "kafka_mock: '$*': $answer"
  }
  mock_cmd topic "$TOPIC" "$PARTS" 3
  mock_cmd topic demo.cursors 1 3
  echo "topics: $TOPIC ($PARTS partitions, replication 3), demo.cursors"
fi

# ---- 2. three routers ---------------------------------------------------------------
start_router() { # start_router I (1-3): starts it, does not wait
  local i=$1 port
  port=$(free_port)
  mkdir -p "$work/r$i/out"
  env KAFKA_BROKERS="$brokers" ROUTER_OUT="$work/r$i/out" \
    "$bin" serve -c "$cfg" --data "$work/r$i/data" --listen "127.0.0.1:$port" \
    >"$work/r$i/server.log" 2>&1 &
  router_pids[i - 1]=$!
  ports[i - 1]=$port
}
# All three at once, so that they join the group in one generation (a router
# joining later makes the group rebalance, which takes seconds more).
for i in 1 2 3; do start_router "$i"; done
for i in 1 2 3; do
  wait_for 20 "router $i did not answer /healthz on port ${ports[i - 1]}" curl -sf "http://127.0.0.1:${ports[i - 1]}/healthz"
  echo "router $i: sluice serve on 127.0.0.1:${ports[i - 1]} (pid ${router_pids[i - 1]}, data in $work/r$i)"
done

# owned I: the partitions router I lists for the rule all-orders, "0,1" (or "")
owned() {
  curl -sf --max-time 5 "http://127.0.0.1:${ports[$1 - 1]}/v1/rules" | python3 -c '
import json, sys
r = next(r for r in json.load(sys.stdin)["rules"] if r["name"] == "all-orders")
print(",".join(str(p["partition"]) for p in sorted(r.get("partitions", []), key=lambda p: p["partition"])))'
}
# split_ok ROUTERS...: the routers named own every partition, each exactly once
split_ok() {
  local i all=""
  for i in "$@"; do all="$all,$(owned "$i")" || return 1; done
  python3 -c 'import sys; p = [int(x) for x in sys.argv[1].split(",") if x]
sys.exit(0 if sorted(p) == list(range(int(sys.argv[2]))) else 1)' "$all" "$PARTS"
}

# ---- 3. the group splits the partitions ---------------------------------------------
if ((!LOCAL)); then
  t0=$SECONDS
  wait_for 45 "the group $GROUP did not split the $PARTS partitions among the 3 routers" split_ok 1 2 3
  echo "group $GROUP: partitions split after $((SECONDS - t0)) s: router 1 [$(owned 1)], router 2 [$(owned 2)], router 3 [$(owned 3)]"
fi

# ---- 4. post orders -------------------------------------------------------------------
# post ROUND ROUTER FIRST COUNT: posts orders FIRST..FIRST+COUNT-1 to ROUTER as NDJSON
post() {
  local round=$1 i=$2 first=$3 count=$4
  python3 - "http://127.0.0.1:${ports[i - 1]}/v1/sets/$SET/events" "$round" "$first" "$count" "$LOCAL" <<'PY' ||
import json, sys, urllib.request
url, rnd, first, count, local = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
lines = []
for k in range(first, first + count):
    lines.append(json.dumps({"specversion": "1.0", "id": "order-%s-%d" % (rnd, k), "source": "/shop",
                             "type": "order.created", "partitionkey": "cust-%d" % (k % 48),
                             "data": {"n": k, "amount": (k * 37) % 200}}))
req = urllib.request.Request(url, ("\n".join(lines) + "\n").encode(), {"Content-Type": "application/x-ndjson"})
try:
    with urllib.request.urlopen(req, timeout=40) as r:
        body = json.load(r)
except Exception as e:
    sys.exit("POST %s: %s" % (url, e))
res = body.get("results", [])
bad = [x for x in res if "partition" not in x or (not local and "offset" not in x)]
if body.get("accepted") != count or bad:
    sys.exit("POST %s: %d of %d accepted, e.g. %s" % (url, body.get("accepted", 0), count, (bad or res)[:1]))
parts = sorted({x["partition"] for x in res})
print("  %d orders to %s: all stored, partitions %s, offsets up to %s" % (count, url.split("/v1")[0], parts,
      max((x.get("offset", -1) for x in res), default=-1)))
PY
    fail "posting to router $i"
}
# big_count FIRST COUNT: how many of those orders are over 100
big_count() { python3 -c 'import sys; a, n = int(sys.argv[1]), int(sys.argv[2]); print(sum(1 for k in range(a, a + n) if (k * 37) % 200 > 100))' "$1" "$2"; }
# delivered FILE: distinct ids over every router's FILE, and all lines
delivered() {
  cat "$work"/r*/out/"$1" 2>/dev/null | python3 -c '
import json, sys
ids = [json.loads(l)["id"] for l in sys.stdin if l.strip()]
print(len(set(ids)), len(ids))'
}
at_least() { local got; got=$(delivered "$1"); ((${got% *} >= $2)); }

echo "posting $N orders (ack = \"durable\"), a third to each router"
per=$((N / 3))
for i in 1 2 3; do post 1 "$i" $(((i - 1) * per)) "$per"; done
want_big=$(big_count 0 "$N")

# ---- 5. every order delivered, each partition by its owner -----------------------------
wait_for 30 "the routers did not deliver all $N orders (delivered: $(delivered orders.ndjson))" at_least orders.ndjson "$N"
wait_for 10 "the routers did not deliver all $want_big big orders" at_least big-orders.ndjson "$want_big"
read -r distinct lines <<<"$(delivered orders.ndjson)"
((distinct == N)) || fail "$distinct distinct orders delivered, want $N"
echo "delivered: $N orders ($((lines - distinct)) duplicates), $want_big big ones"

if ((!LOCAL)); then
  for i in 1 2 3; do
    mine=$(owned "$i")
    got=$(python3 -c '
import json, sys
print(",".join(str(p) for p in sorted({json.loads(l)["sluicepartition"] for l in open(sys.argv[1]) if l.strip()})))' \
      "$work/r$i/out/orders.ndjson" 2>/dev/null || true)
    python3 -c 'import sys; a = {x for x in sys.argv[1].split(",") if x}; b = {x for x in sys.argv[2].split(",") if x}
sys.exit(0 if a <= b else 1)' "$got" "$mine" ||
      fail "router $i delivered events of partitions [$got] but owns [$mine]"
    echo "router $i owns partitions [$mine] and delivered events of [$got]"
  done
fi

show() { # show: GET /v1/sets of router 1, GET /v1/rules of every live router
  echo
  echo "GET /v1/sets (router 1):"
  curl -sf "http://127.0.0.1:${ports[0]}/v1/sets" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["sets"]:
    print("  " + json.dumps({k: s.get(k) for k in ("name", "backend", "topic", "partitions", "ack") if k in s}))'
  local i
  for i in 1 2 3; do
    [[ ${router_pids[i - 1]} == - ]] && continue
    echo "GET /v1/rules (router $i, port ${ports[i - 1]}):"
    curl -sf "http://127.0.0.1:${ports[i - 1]}/v1/rules" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["rules"]:
    head = {k: r[k] for k in ("name", "group", "members", "lag", "delivered") if k in r}
    print("  " + json.dumps(head))
    for p in r.get("partitions", []):
        print("    " + json.dumps({k: p[k] for k in ("partition", "cursor", "committed", "end", "lag") if k in p}))'
  done
  echo
}
show

# ---- 6. takeover after a SIGKILL --------------------------------------------------------
if ((TAKEOVER)); then
  lost=$(owned 3)
  echo "SIGKILL of router 3 (it owns partitions [$lost])"
  kill -KILL "${router_pids[2]}"
  wait "${router_pids[2]}" 2>/dev/null || true
  router_pids[2]=-
  t_kill=$SECONDS
  half=$((N / 2))
  post 2 1 0 "$half"
  post 2 2 "$half" $((N - half))
  wait_for 40 "routers 1 and 2 did not take over router 3's partitions" split_ok 1 2
  t_split=$SECONDS
  wait_for 30 "routers 1 and 2 did not deliver the second $N orders" at_least orders.ndjson $((2 * N))
  read -r distinct lines <<<"$(delivered orders.ndjson)"
  ((distinct == 2 * N)) || fail "$distinct distinct orders delivered, want $((2 * N))"
  echo "takeover: router 1 [$(owned 1)], router 2 [$(owned 2)] $((t_split - t_kill)) s after the SIGKILL" \
    "(session_timeout 6 s); all $((2 * N)) orders delivered $((SECONDS - t_kill)) s after it," \
    "$((lines - distinct)) duplicates"
  show
fi

total=$N
((TAKEOVER)) && total=$((2 * N))
mode="3 routers on one Kafka-backed set ($PARTS partitions, group $GROUP)"
((LOCAL)) && mode="3 routers, local sets (selftest)"
echo "ok: $total orders posted through $mode, all delivered, $((lines - distinct)) duplicates"
