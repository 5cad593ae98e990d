#!/bin/sh
# Real Kafka clients nobody here wrote, against the real bin/sluice as their
# broker: kafkajs 2.2.4 (npm, installed at test time into build/rel/npm-kafkajs
# and reused), kafka-python and confluent-kafka (Debian's python3-kafka and
# python3-confluent-kafka, run with python3 -I so that the repository's kafka/
# folder does not shadow kafka-python). Each one creates a 3-partition topic
# with its admin, produces keyed records with headers (kafkajs idempotent with
# acks -1, kafka-python acks=all, confluent-kafka enable.idempotence), reads
# them back byte-identical (key, value, headers) with its consumer, runs a
# group of two members that share the partitions and commit (the committed
# offsets are the partitions' ends), and creates, lists and deletes a topic
# with 3 partitions. confluent-kafka also reads back zstd-compressed records;
# a kafkajs GZIP producer's send is rejected with UNSUPPORTED_COMPRESSION_TYPE
# and stores nothing. The clients' steps are in tests/kafkaclients/; set
# KAFKA_DEBUG=1 for their protocol logs on stderr. A tombstone (null value)
# check waits, commented out, in js_clients.mjs's KNOWN-BUG block.
set -eu
cd "$(dirname "$0")/../.."
root=$(pwd)
py=/usr/bin/python3
node=/usr/bin/node
npmdir="$root/build/rel/npm-kafkajs"
[ -x bin/sluice ] || { echo "FAIL: bin/sluice is not built (make -j2)"; exit 1; }
[ -x "$node" ] || { echo "FAIL: $node is missing (scripts/deps.sh installs nodejs)"; exit 1; }
command -v npm >/dev/null || { echo "FAIL: npm is not installed (scripts/deps.sh installs it)"; exit 1; }
"$py" -I -c 'import kafka' 2>/dev/null || { echo "FAIL: kafka-python is not installed (scripts/deps.sh installs python3-kafka)"; exit 1; }
"$py" -I -c 'import confluent_kafka' 2>/dev/null ||
    { echo "FAIL: confluent-kafka is not installed (scripts/deps.sh installs python3-confluent-kafka)"; exit 1; }
dir=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir" "$npmdir.tmp.$$"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/log" ] && { echo "--- sluice log:"; tail -20 "$dir/log"; }; exit 1; }
free_port() { "$py" -I -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { "$py" -I -c 'import time; print(int(time.monotonic()*1000))'; }

# kafkajs at the version tests/kafkaclients/package.json pins, installed once
# into the build tree (a fresh one is built aside and moved in whole).
want=$(sed -n 's/.*"kafkajs": *"\([^"]*\)".*/\1/p' tests/kafkaclients/package.json)
have=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$npmdir/node_modules/kafkajs/package.json" 2>/dev/null | head -1)
if [ "$have" != "$want" ]; then
    tmp="$npmdir.tmp.$$"
    mkdir -p "$tmp"
    cp tests/kafkaclients/package.json "$tmp/package.json"
    timeout 90 npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error > "$dir/npm" 2>&1 ||
        fail "npm install of kafkajs@$want into $tmp: $(tail -5 "$dir/npm")"
    rm -rf "$npmdir"
    mv "$tmp" "$npmdir"
fi

hport=$(free_port)
kport=$(free_port)
bs="127.0.0.1:$kport"
bin/sluice serve --data "$dir/data" --listen "127.0.0.1:$hport" --kafka-listen "$bs" > "$dir/log" 2>&1 &
pid=$!
i=0
until grep -q "Kafka protocol on $bs" "$dir/log"; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "sluice did not log \"Kafka protocol on $bs\" within 10 s"
    kill -0 "$pid" 2>/dev/null || fail "sluice exited at start"
    sleep 0.1
done
grep -q "listening on http://127.0.0.1:$hport" "$dir/log" || fail "sluice did not log \"listening on http://127.0.0.1:$hport\""

# run NAME CMD...: one client's steps, bounded; its "ok:" lines are shown,
# a failure shows its output and the server's log.
summary=
run() {
    name=$1
    shift
    t0=$(now_ms)
    rc=0
    timeout 60 "$@" > "$dir/$name.out" 2> "$dir/$name.err" || rc=$?
    ms=$(($(now_ms) - t0))
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
export KAFKAJS_NO_PARTITIONER_WARNING=1
run kafkajs "$node" tests/kafkaclients/js_clients.mjs "$bs" "$npmdir"
run kafka-python "$py" -I tests/kafkaclients/py_clients.py kafka-python "$bs"
run confluent-kafka "$py" -I tests/kafkaclients/py_clients.py confluent-kafka "$bs"
# Every step of every client ran (a script that stops early without FAIL
# still fails here).
for c in kafkajs:7 kafka-python:5 confluent-kafka:6; do
    n=$(grep -c '^ok: ' "$dir/${c%:*}.out" || true)
    [ "$n" -eq "${c#*:}" ] || fail "${c%:*} passed $n steps, want ${c#*:}"
done

# sluice stops cleanly after all of them.
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
[ "$rc" -eq 0 ] || fail "sluice exited $rc on SIGTERM after the clients, want 0"
echo "ok: real Kafka clients against sluice on $bs:$summary"
