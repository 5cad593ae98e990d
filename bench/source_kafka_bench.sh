#!/usr/bin/env bash
# bench/source_kafka_bench.sh — source.kafka (the bridge in from Kafka)
# against a same-run reference: `kcat -C` consuming the same topic from the
# same mock cluster (build/rel/tools/kafka_mock, librdkafka's mock brokers).
#
# N small records (~100-byte JSON values, no key) are produced once with
# kcat (lz4) into a topic of P partitions. Reference: `kcat -C -o beginning -e`
# of the whole topic into /dev/null, timed from start to exit. sluice:
# `sluice serve` with source.kafka { start = "beginning" } and a fresh
# consumer group into a fresh set, timed from the first event in the set to
# the N-th (GET /v1/sets/NAME "events"), so that the mock's 3 s initial
# group rebalance delay, which kcat (no group) does not pay, is left out.
# Rows: ack = "buffer" and ack = "durable" sets; best of REPS runs per side.
# Goal: sluice ≥ 0.8 × kcat events/s.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp),
# SLUICE_KAFKA_N (records, default 500000), SLUICE_KAFKA_PARTITIONS
# (default 8), SLUICE_KAFKA_REPS (default 2), SLUICE_KAFKA_PROPS (librdkafka
# properties for the source, Lua table syntax, e.g. '["fetch.wait.max.ms"] = 10'),
# SLUICE_KAFKA_PERF=1 (perf record the first ack=buffer server; data in
# $SLUICE_BENCH_DIR/kafka_perf; SLUICE_KAFKA_PERF_ARGS replaces "-g", e.g.
# "--call-graph dwarf -F 400").
#
# Also printed: CPU time per record of the sluice process and of kcat
# (/proc and bash's time), and of the mock broker, so that runs on a busy
# machine can still be compared.
#
# Exits 0 when it measured everything, goal met or not; 1 on any error.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

N=${SLUICE_KAFKA_N:-500000}
PARTS=${SLUICE_KAFKA_PARTITIONS:-8}
REPS=${SLUICE_KAFKA_REPS:-2}
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
PERF=${SLUICE_KAFKA_PERF:-0}
GOAL=0.8
MOCK=build/rel/tools/kafka_mock

die() {
    echo "source_kafka_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }

case "$N" in '' | *[!0-9]*) die "SLUICE_KAFKA_N must be a number" ;; esac
case "$REPS" in [1-9]) ;; *) die "SLUICE_KAFKA_REPS must be 1-9" ;; esac
command -v kcat >/dev/null 2>&1 || die "kcat is missing (scripts/deps.sh installs it)"
command -v curl >/dev/null 2>&1 || die "curl is missing"
. bench/tsv.sh
make -s bin/sluice "$MOCK" || die "make failed"

mkdir -p "$ROOT" || die "cannot create $ROOT"
TMP=$(mktemp -d "$ROOT/source_kafka_bench.XXXXXX") || die "cannot create a directory in $ROOT"
TMP=$(cd "$TMP" && pwd)
MOCK_PID=""
SRV_PID=""
cleanup() {
    [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null
    [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null && wait "$MOCK_PID" 2>/dev/null
    exec 3>&- 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "source_kafka_bench: interrupted" >&2; exit 1' INT TERM

now() { date +%s.%N; }
HZ=$(getconf CLK_TCK)
# CPU ticks (user + system) a process used so far.
cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }


# ---- the cluster and the data ------------------------------------------------------

mkfifo "$TMP/mock.in" || die "mkfifo"
"$MOCK" --commands --brokers 1 --topic "bench:$PARTS" <"$TMP/mock.in" >"$TMP/mock.out" 2>"$TMP/mock.err" &
MOCK_PID=$!
exec 3>"$TMP/mock.in" # keeps the mock's stdin open
for _ in $(seq 100); do grep -q '^bootstrap ' "$TMP/mock.out" 2>/dev/null && break; sleep 0.05; done
BOOT=$(awk '/^bootstrap /{print $2}' "$TMP/mock.out")
[ -n "$BOOT" ] || die "kafka_mock did not start: $(cat "$TMP/mock.err")"

note "source_kafka_bench: producing $N records to bench ($PARTS partitions)"
awk -v n="$N" 'BEGIN { srand(7); for (i = 0; i < n; i++)
    printf "{\"n\":%d,\"user\":\"u%d\",\"amount\":%.2f,\"sku\":\"%08x%08x\",\"note\":\"order %d of batch %d\"}\n",
        i, i % 1000, rand() * 1000, int(rand() * 4294967295), int(rand() * 4294967295), i, int(i / 100) }' \
    >"$TMP/records.txt" || die "cannot write the records"
BYTES=$(wc -c <"$TMP/records.txt")
# lz4 and no sticky partitioning: the mock keeps only ~5 MB of batches per
# partition, so the topic must stay compressed and evenly spread.
kcat -P -q -b "$BOOT" -t bench -z lz4 -X sticky.partitioning.linger.ms=0 -X linger.ms=20 \
    -l "$TMP/records.txt" || die "kcat -P failed"
for _ in $(seq 20); do
    got=$(kcat -C -q -b "$BOOT" -t bench -o beginning -e -f 'x\n' 2>/dev/null | wc -l)
    [ "$got" -eq "$N" ] && break
    sleep 0.5
done
[ "$got" -eq "$N" ] || die "the topic holds $got records, want $N"

# ---- the reference: kcat -C ----------------------------------------------------------

ref_best=""
ref_cpu=""
TIMEFORMAT='%U %S'
for r in $(seq "$REPS"); do
    m0=$(cpu_of "$MOCK_PID")
    t0=$(now)
    { time kcat -C -q -b "$BOOT" -t bench -o beginning -e >/dev/null 2>&1; } 2>"$TMP/kcat.time" ||
        die "kcat -C failed"
    t1=$(now)
    m1=$(cpu_of "$MOCK_PID")
    note "  mock broker: $(echo "($m1 - $m0) / $HZ * 1000000 / $N" | bc -l | xargs printf '%.3f') CPU us/record"
    secs=$(echo "$t1 - $t0" | bc -l)
    rate=$(echo "$N / $secs" | bc -l)
    cpu=$(awk -v n="$N" '{ printf "%.3f", ($1 + $2) * 1e6 / n }' "$TMP/kcat.time")
    note "  kcat -C run $r: $(printf '%.3f' "$secs") s, $(printf '%.0f' "$rate") records/s, $cpu CPU us/record"
    if [ -z "$ref_best" ] || [ "$(echo "$rate > $ref_best" | bc -l)" -eq 1 ]; then
        ref_best=$rate
        ref_cpu=$cpu
    fi
done

# ---- sluice ----------------------------------------------------------------------------

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
events_of() { curl -s --max-time 2 "http://127.0.0.1:$1/v1/sets/in" | sed -n 's/.*"events":\([0-9]*\).*/\1/p'; }

# run_sluice ACK REP: prints records/s.
run_sluice() {
    local ack=$1 rep=$2 dir="$TMP/s-$1-$2" port
    port=$(free_port)
    mkdir -p "$dir"
    cat >"$dir/sluice.lua" <<EOF
set "in" { partitions = $PARTS, ack = "$ack" }
source.kafka { name = "bench", brokers = "$BOOT", topics = { "bench" }, group = "bench-$ack-$rep",
  set = "in", start = "beginning", properties = { ${SLUICE_KAFKA_PROPS:-} } }
EOF
    local cmd=(bin/sluice serve -c "$dir/sluice.lua" --data "$dir/data" --listen "127.0.0.1:$port")
    if [ "$PERF" = 1 ] && [ "$ack" = buffer ] && [ "$rep" = 1 ]; then
        mkdir -p "$ROOT/kafka_perf"
        perf record ${SLUICE_KAFKA_PERF_ARGS:--g} -o "$ROOT/kafka_perf/perf.data" -- "${cmd[@]}" >"$dir/server.log" 2>&1 &
    else
        "${cmd[@]}" >"$dir/server.log" 2>&1 &
    fi
    SRV_PID=$!
    local t0="" t1="" n=0 deadline
    deadline=$(echo "$(now) + 120" | bc -l)
    while :; do
        n=$(events_of "$port")
        n=${n:-0}
        if [ -z "$t0" ] && [ "$n" -gt 0 ]; then t0=$(now); n0=$n; c0=$(cpu_of "$SRV_PID"); m0=$(cpu_of "$MOCK_PID"); fi
        if [ "$n" -ge "$N" ]; then t1=$(now); c1=$(cpu_of "$SRV_PID"); m1=$(cpu_of "$MOCK_PID"); break; fi
        [ "$(echo "$(now) > $deadline" | bc -l)" -eq 1 ] && break
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.02
    done
    note "  mock broker: $(echo "($m1 - $m0) / $HZ * 1000000 / ($N - $n0)" | bc -l | xargs printf '%.3f') CPU us/record"
    kill -TERM "$SRV_PID" 2>/dev/null
    wait "$SRV_PID" 2>/dev/null
    SRV_PID=""
    [ -n "$t1" ] || { note "server log:"; tail -20 "$dir/server.log" >&2; die "sluice ($ack) holds $n of $N events after 120 s"; }
    local secs
    secs=$(echo "$t1 - $t0" | bc -l)
    # The events already there at t0 were not timed.
    local cpu
    cpu=$(echo "($c1 - $c0) / $HZ * 1000000 / ($N - $n0)" | bc -l)
    echo "$(echo "($N - $n0) / $secs" | bc -l) $cpu"
    note "  sluice ack=$ack run $rep: $(printf '%.3f' "$secs") s for $((N - n0)) events, $(printf '%.3f' "$cpu") CPU us/event"
    rm -rf "$dir/data"
}

declare -A best best_cpu
for ack in buffer durable; do
    for r in $(seq "$REPS"); do
        out=$(run_sluice "$ack" "$r") || exit 1
        read -r rate cpu <<<"$out"
        note "    $(printf '%.0f' "$rate") events/s"
        if [ -z "${best[$ack]:-}" ] || [ "$(echo "$rate > ${best[$ack]}" | bc -l)" -eq 1 ]; then
            best[$ack]=$rate
            best_cpu[$ack]=$cpu
        fi
    done
done

# ---- the table ---------------------------------------------------------------------------

echo
echo "source.kafka vs kcat -C: $N records of $((BYTES / N)) bytes, $PARTS partitions, 1 mock broker, best of $REPS, $(nproc) CPUs"
printf '%-26s %12s %12s %6s %5s %4s %16s %14s\n' row "sluice ev/s" "kcat ev/s" ratio goal met \
    "sluice CPU us/ev" "kcat CPU us/ev"
for ack in buffer durable; do
    ratio=$(echo "${best[$ack]} / $ref_best" | bc -l)
    met=no
    [ "$(echo "$ratio >= $GOAL" | bc -l)" -eq 1 ] && met=yes
    printf '%-26s %12.0f %12.0f %6.2f %5s %4s %16.2f %14.2f\n' "source.kafka, ack=$ack" \
        "${best[$ack]}" "$ref_best" "$ratio" "$GOAL" "$met" "${best_cpu[$ack]}" "$ref_cpu"
    tsv_row "source_kafka.$ack" "source.kafka, $N records from $PARTS partitions into a set, ack=$ack" \
        ev/s "${best[$ack]}" "kcat -C" "$ref_best" "$ratio" ">= 0.80" "$met"
    tsv_row "source_kafka.${ack}_cpu" "source.kafka, ack=$ack: CPU per record (lower is better)" \
        "µs/ev" "${best_cpu[$ack]}" "kcat -C" "$ref_cpu" "$(echo "${best_cpu[$ack]} / $ref_cpu" | bc -l)" - -
done
echo "(CPU us/ev: user + system time of the sluice process, or of kcat, per record; the mock"
echo " broker's own CPU is not counted on either side)"
exit 0
