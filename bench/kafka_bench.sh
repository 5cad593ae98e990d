#!/usr/bin/env bash
# bench/kafka_bench.sh — sluice as a Kafka broker (`sluice serve
# --kafka-listen`, kafka/) against a same-run reference: librdkafka's mock
# cluster (build/rel/tools/kafka_mock, one broker, in memory, no fsync), with
# the same client, kcat, and the same records on both sides.
#
# N records (default 200,000: ~206 MB) with an 8-byte key and a 1024-byte
# value each (base64 text cut from a seeded pool, so no two values are the
# same and nothing repeats within a batch) go to topics of P partitions, keys
# hashed with murmur2 so every partition gets the same share. P is chosen so
# that a partition holds at most 4 MiB (the mock keeps only the last 5 MiB of
# each partition: it could not be read back whole otherwise): 52 for 200,000.
#
# Each repetition starts a fresh sluice (sets declared in a config, data dir
# of its own, deleted after) and a fresh mock, then times, sluice and mock
# alternating (sluice first in odd repetitions, the mock first in even ones):
#   1. kcat -P -X acks=all   into topic allR (sluice fsyncs before answering)
#   2. kcat -P -X acks=1     into topic oneR
#   3. kcat -C -o beginning -e of topic allR (every record must come back),
#      with fetch.wait.max.ms=10: -e ends at the first empty fetch, which the
#      broker holds for that long (librdkafka's 500 ms would add a fixed half
#      second to both sides)
# the producers with batch.num.messages=10000, linger.ms=LINGER, the rest at
# librdkafka's defaults (batch.size 1,000,000 bytes caps a batch at ~960 of
# these records). Rows (the median of REPS repetitions, min..max as noise):
# MB/s of each against the mock (goals: acks=all ≥ 0.8×, acks=1 ≥ 1.0×,
# consume ≥ 1.0×), CPU time (utime + stime from /proc/PID/stat) of the sluice
# process per MB produced and consumed, against the mock process's, and the
# peak RSS of sluice (VmHWM of /proc/PID/status at the end of a repetition;
# the highest repetition; goal < 128 MiB). MB = 10^6 bytes of keys and values.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp), SLUICE_KBENCH_N
# (records, default 200000), SLUICE_KBENCH_REPS (1-9, default 5),
# SLUICE_KBENCH_LINGER_MS (kcat's linger.ms, default 100),
# SLUICE_KBENCH_PARTITIONS (default: as above; the mock must keep every
# record of a partition, so the benchmark refuses a count that gives one more
# than 4.5 MiB).
#
# About 30-70 s on 2 cores with the defaults. Exits 0 when it measured
# everything, goals met or not; 1 on any error (a server that did not start,
# a kcat that failed, a record missing).
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

N=${SLUICE_KBENCH_N:-200000}
REPS=${SLUICE_KBENCH_REPS:-5}
LINGER=${SLUICE_KBENCH_LINGER_MS:-100}
PARTS=${SLUICE_KBENCH_PARTITIONS:-}
# shellcheck disable=SC2034 # read by bench_workdir (bench/tsv.sh)
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
MOCK=build/rel/tools/kafka_mock
KEY_BYTES=8
VALUE_BYTES=1024
BATCH_MSGS=10000
REC_STORED=1070 # bytes a record takes in a stored batch, about (8 + 1024 + record and batch overhead)
GOAL_ALL=0.8
GOAL_ONE=1.0
GOAL_READ=1.0
GOAL_RSS=128
KCAT_LIMIT=120 # seconds one kcat run may take

die() {
    echo "kafka_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }

case "$N" in '' | *[!0-9]*) die "SLUICE_KBENCH_N must be a number" ;; esac
[ "$N" -ge 10000 ] || die "SLUICE_KBENCH_N must be at least 10000"
case "$REPS" in [1-9]) ;; *) die "SLUICE_KBENCH_REPS must be 1-9" ;; esac
case "$LINGER" in '' | *[!0-9]*) die "SLUICE_KBENCH_LINGER_MS must be a whole number of ms" ;; esac
if [ -z "$PARTS" ]; then
    PARTS=$(((N * REC_STORED + 4194303) / 4194304))
    [ "$PARTS" -ge 4 ] || PARTS=4
fi
case "$PARTS" in '' | *[!0-9]*) die "SLUICE_KBENCH_PARTITIONS must be a number" ;; esac
[ "$PARTS" -ge 1 ] && [ "$PARTS" -le 512 ] || die "SLUICE_KBENCH_PARTITIONS must be 1-512"
[ $((N * REC_STORED / PARTS)) -le $((4608 * 1024)) ] ||
    die "$PARTS partitions for $N records: over 4.5 MiB a partition, more than the mock keeps (raise SLUICE_KBENCH_PARTITIONS)"
command -v kcat >/dev/null 2>&1 || die "kcat is missing (scripts/deps.sh installs it)"
command -v curl >/dev/null 2>&1 || die "curl is missing"
command -v python3 >/dev/null 2>&1 || die "python3 is missing"
. bench/tsv.sh
make -s bin/sluice "$MOCK" || die "make failed"

# the records file, and per repetition the two topics of sluice (~1.1 x N KiB each)
bench_workdir kafka_bench $((N * 4))
MOCK_PID=""
cleanup() {
    if [ -n "$MOCK_PID" ]; then
        kill "$MOCK_PID" 2>/dev/null
        wait "$MOCK_PID" 2>/dev/null
    fi
    bench_cleanup
}
trap cleanup EXIT

HZ=$(getconf CLK_TCK)
now() { date +%s.%N; }
cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
kib_of() { awk -v k="$2:" '$1 == k {print $2; f = 1} END {if (!f) print 0}' "/proc/$1/status" 2>/dev/null || echo 0; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
calc() { awk "BEGIN {printf \"%.6f\", $1}"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a >= b)}'; }
# median VALUES...: the middle value (the lower of the two middle ones)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
# noise VALUES...: min..max
noise() { printf '%s\n' "$@" | sort -g | awk -v f="$FMT" 'NR == 1 {lo = $1} {hi = $1} END {printf f ".." f, lo, hi}'; }

# ---- the records ------------------------------------------------------------------------

note "kafka_bench: writing $N records of $KEY_BYTES + $VALUE_BYTES bytes"
python3 - "$N" "$VALUE_BYTES" >"$TMP/records.txt" <<'PY' || die "cannot write the records"
import base64, random, sys
n, size = int(sys.argv[1]), int(sys.argv[2])
# an 8 MiB pool of base64 text from a seeded generator; value i starts at a
# different place in it (a stride prime to the pool's length)
pool = base64.b64encode(random.Random(7).randbytes(6 << 20)).decode()
span = len(pool) - size
out = sys.stdout
for i in range(n):
    at = (i * 7919) % span
    out.write("k%07d|%s\n" % (i, pool[at:at + size]))
PY
PAYLOAD=$((N * (KEY_BYTES + VALUE_BYTES)))
MB=$(calc "$PAYLOAD / 1e6")

# ---- one repetition -----------------------------------------------------------------------

# kcat_time OUT CMD...: runs CMD (stdout to $TMP/out), "wall user sys" into OUT
TIMEFORMAT='%R %U %S'
kcat_time() {
    local out=$1 rc
    shift
    { time timeout "$KCAT_LIMIT" "$@" >"$TMP/out" 2>"$TMP/kcat.err"; } 2>"$out"
    rc=$?
    [ "$rc" = 0 ] || die "$* exited $rc: $(tail -n 5 "$TMP/kcat.err")"
}

# count_of BOOT TOPIC: records in TOPIC (the sum of each partition's last offset + 1)
count_of() {
    timeout 60 kcat -C -q -b "$1" -t "$2" -o -1 -e -f '%o\n' 2>/dev/null | awk '{s += $1 + 1} END {print s + 0}'
}

# The figures of every run, space-separated lists keyed SIDE.WHAT: MB/s, the
# broker's CPU ms/MB and kcat's
declare -A RATE=() CPU=() KCPU=()

# measure SIDE WHAT REP: one timed kcat run against SIDE (sluice or mock):
# WHAT is all (produce, acks=all), one (acks=1) or read (consume topic allREP).
# Appends its figures to RATE, CPU and KCPU.
measure() {
    local side=$1 what=$2 rep=$3 boot pid c0 c1 wall user sys got
    if [ "$side" = sluice ]; then boot=$S_BOOT pid=$SRV_PID; else boot=$M_BOOT pid=$MOCK_PID; fi
    c0=$(cpu_of "$pid")
    case "$what" in
    all | one)
        local acks=all
        [ "$what" = one ] && acks=1
        kcat_time "$TMP/time" kcat -P -q -b "$boot" -t "$what$rep" -K '|' -X acks=$acks \
            -X partitioner=murmur2 -X batch.num.messages=$BATCH_MSGS -X linger.ms="$LINGER" \
            -l "$TMP/records.txt"
        ;;
    read)
        # one short line per record (counted: every record must come back).
        # fetch.wait.max.ms=10: -e ends at the first empty fetch, which a broker holds
        # for fetch.wait.max.ms (librdkafka's 500 ms would be a fixed half second of
        # waiting on both sides, not reading)
        kcat_time "$TMP/time" kcat -C -q -b "$boot" -t "all$rep" -o beginning -e -f '\n' \
            -X fetch.wait.max.ms=10
        ;;
    esac
    c1=$(cpu_of "$pid")
    kill -0 "$pid" 2>/dev/null || die "the $side broker died during $what: $(tail -n 5 "$TMP/$side.log")"
    read -r wall user sys <"$TMP/time"
    if [ "$what" = read ]; then
        got=$(wc -l <"$TMP/out")
        [ "$got" -eq "$N" ] || die "kcat -C read $got records of $N from the $side broker"
    else
        got=$(count_of "$boot" "$what$rep")
        [ "$got" -eq "$N" ] || die "the $side broker holds $got records of $N in $what$rep"
    fi
    local rate cpu kcpu
    rate=$(calc "$MB / $wall")
    cpu=$(calc "($c1 - $c0) / $HZ * 1000 / $MB")
    kcpu=$(calc "($user + $sys) * 1000 / $MB")
    RATE[$side.$what]+=" $rate"
    CPU[$side.$what]+=" $cpu"
    KCPU[$side.$what]+=" $kcpu"
    note "  $(printf '%-6s %-4s' "$side" "$what") $(printf '%6.2f s %7.1f MB/s, broker %6.2f CPU ms/MB, kcat %6.2f CPU ms/MB, broker VmHWM %4d MiB' \
        "$wall" "$rate" "$cpu" "$kcpu" "$(($(kib_of "$pid" VmHWM) / 1024))")"
}

HWM=() ANON=() FILEB=() MOCK_HWM=()

for rep in $(seq "$REPS"); do
    note "kafka_bench: repetition $rep of $REPS ($PARTS partitions, linger.ms=$LINGER)"
    # the mock, with the two topics
    "$MOCK" --no-commands --brokers 1 --topic "all$rep:$PARTS" --topic "one$rep:$PARTS" \
        </dev/null >"$TMP/mock.out" 2>"$TMP/mock.log" &
    MOCK_PID=$!
    for _ in $(seq 100); do grep -q '^bootstrap ' "$TMP/mock.out" 2>/dev/null && break; sleep 0.05; done
    M_BOOT=$(sed -n 's/^bootstrap //p' "$TMP/mock.out")
    [ -n "$M_BOOT" ] || die "kafka_mock did not start: $(cat "$TMP/mock.log")"
    # sluice, with the same two topics as declared sets
    d=$TMP/s$rep
    mkdir -p "$d"
    printf 'set "all%d" { partitions = %d }\nset "one%d" { partitions = %d }\n' \
        "$rep" "$PARTS" "$rep" "$PARTS" >"$d/sluice.lua"
    hport=$(free_port)
    kport=$(free_port)
    bin/sluice serve -c "$d/sluice.lua" --data "$d/data" --listen "127.0.0.1:$hport" \
        --kafka-listen "127.0.0.1:$kport" >"$TMP/sluice.log" 2>&1 &
    SRV_PID=$!
    S_BOOT=127.0.0.1:$kport
    for _ in $(seq 200); do
        curl -sf --max-time 1 "http://127.0.0.1:$hport/healthz" >/dev/null 2>&1 && break
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.05
    done
    curl -sf --max-time 1 "http://127.0.0.1:$hport/healthz" >/dev/null 2>&1 ||
        die "sluice did not start: $(tail -n 10 "$TMP/sluice.log")"
    # both brokers answer Metadata for both topics before the clock starts
    for b in "$S_BOOT" "$M_BOOT"; do
        timeout 30 kcat -L -q -b "$b" -t "all$rep" >/dev/null 2>&1 || die "no Metadata from $b"
    done
    if [ $((rep % 2)) = 1 ]; then order="sluice mock"; else order="mock sluice"; fi
    for what in all one read; do
        for side in $order; do measure "$side" "$what" "$rep"; done
    done
    HWM+=("$(kib_of "$SRV_PID" VmHWM)")
    ANON+=("$(kib_of "$SRV_PID" RssAnon)")
    FILEB+=("$(kib_of "$SRV_PID" RssFile)")
    MOCK_HWM+=("$(kib_of "$MOCK_PID" VmHWM)")
    kill -TERM "$SRV_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SRV_PID" 2>/dev/null
    wait "$SRV_PID" 2>/dev/null
    SRV_PID=
    kill "$MOCK_PID" 2>/dev/null
    wait "$MOCK_PID" 2>/dev/null
    MOCK_PID=
    rm -rf "$d"
done

# ---- the table ------------------------------------------------------------------------------

SUMMARY=()
LAST=""
MISSED=0
row() { # row LABEL UNIT SLUICE REF RATIO GOAL MET NOISE_S NOISE_R
    SUMMARY+=("$(printf '%-44s %-6s %9s %9s %6s %6s %4s  %-15s %-15s' "$@")")
    [ "$7" = MISS ] && MISSED=$((MISSED + 1))
    return 0
}

declare -A LABEL=([all]="produce, acks=-1 (kcat -P, acks=all)" [one]="produce, acks=1 (kcat -P)"
    [read]="consume from the start (kcat -C -e)")
declare -A TITLE=([all]="kcat -P of $N records of 1 KiB, acks=all (sluice fsyncs, the mock does not)"
    [one]="kcat -P of $N records of 1 KiB, acks=1" [read]="kcat -C -o beginning -e of the $N records")
declare -A GOAL=([all]=$GOAL_ALL [one]=$GOAL_ONE [read]=$GOAL_READ)
# shellcheck disable=SC2086 # the lists are numbers
for what in all one read; do
    s=$(median ${RATE[sluice.$what]})
    m=$(median ${RATE[mock.$what]})
    r=$(ratio "$s" "$m")
    met=MISS
    ge "$r" "${GOAL[$what]}" && met=yes
    FMT=%.0f
    row "${LABEL[$what]}" MB/s "$(printf '%.1f' "$s")" "$(printf '%.1f' "$m")" "$r" ">=${GOAL[$what]}" "$met" \
        "$(noise ${RATE[sluice.$what]})" "$(noise ${RATE[mock.$what]})"
    tsv_row "kafka.$what" "Kafka broker: ${TITLE[$what]}, $PARTS partitions, median of $REPS" \
        MB/s "$s" "librdkafka mock broker, same records and client" "$m" "$r" \
        ">= ${GOAL[$what]}" "$([ "$met" = yes ] && echo yes || echo no)"
    LAST="$LAST ${what}_mbs=$(printf '%.1f' "$s") ${what}_mock_mbs=$(printf '%.1f' "$m") ${what}_ratio=$r"
done
declare -A CLABEL=([all]="CPU per MB produced, acks=-1" [one]="CPU per MB produced, acks=1" [read]="CPU per MB consumed")
# shellcheck disable=SC2086
for what in all one read; do
    s=$(median ${CPU[sluice.$what]})
    m=$(median ${CPU[mock.$what]})
    r=$(ratio "$s" "$m")
    FMT=%.1f
    row "${CLABEL[$what]} (broker process)" ms/MB "$(printf '%.2f' "$s")" "$(printf '%.2f' "$m")" "$r" - - \
        "$(noise ${CPU[sluice.$what]})" "$(noise ${CPU[mock.$what]})"
    tsv_row "kafka.${what}_cpu" "Kafka broker: ${CLABEL[$what]}, CPU of the broker process (lower is better)" \
        ms/MB "$s" "librdkafka mock broker" "$m" "$r" - -
    LAST="$LAST ${what}_cpu_ms_mb=$(printf '%.2f' "$s") ${what}_mock_cpu_ms_mb=$(printf '%.2f' "$m")"
done
hwm=$(printf '%s\n' "${HWM[@]}" | sort -n | tail -n 1)
hwm_mib=$(calc "$hwm / 1024")
met=MISS
awk -v a="$hwm_mib" -v g="$GOAL_RSS" 'BEGIN {exit !(a < g)}' && met=yes
row "peak RSS of sluice (VmHWM), highest rep" MiB "$(printf '%.1f' "$hwm_mib")" - - "<$GOAL_RSS" "$met" \
    "$(printf '%s\n' "${HWM[@]}" | sort -n | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.0f..%.0f", lo / 1024, hi / 1024}')" ""
tsv_row kafka.rss "Kafka broker: peak RSS (VmHWM) of sluice over a repetition (produce + consume), highest of $REPS" \
    MiB "$hwm_mib" - - - "< $GOAL_RSS MiB" "$([ "$met" = yes ] && echo yes || echo no)"
LAST="$LAST rss_mib=$(printf '%.1f' "$hwm_mib")"

echo
echo "Kafka broker vs librdkafka's mock: $N records of $KEY_BYTES + $VALUE_BYTES bytes ($(printf '%.1f' "$MB") MB), $PARTS partitions,"
echo "batch.num.messages=$BATCH_MSGS linger.ms=$LINGER, median of $REPS, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %-6s %9s %9s %6s %6s %4s  %-15s %-15s\n' row unit sluice mock ratio goal met "noise sluice" "noise mock"
for l in "${SUMMARY[@]}"; do echo "$l"; done
FMT=%.2f
echo "(MB/s: 10^6 bytes of keys and values over kcat's run, start to exit; ratio sluice / mock,"
echo " higher is better. CPU: utime + stime of the broker process over kcat's run per MB, lower is"
# shellcheck disable=SC2086
echo " better; kcat's own CPU per MB, sluice / mock: produce acks=-1 $(noise ${KCPU[sluice.all]}) / $(noise ${KCPU[mock.all]}),"
# shellcheck disable=SC2086
echo " acks=1 $(noise ${KCPU[sluice.one]}) / $(noise ${KCPU[mock.one]}), consume $(noise ${KCPU[sluice.read]}) / $(noise ${KCPU[mock.read]})."
echo " noise: min..max of the $REPS repetitions; overlapping ranges mean a difference within the"
echo " machine's noise. RSS at the end of each repetition, KiB: VmHWM ${HWM[*]}, RssAnon ${ANON[*]},"
echo " RssFile ${FILEB[*]}; the mock's VmHWM ${MOCK_HWM[*]} (it keeps every record in memory).)"
echo "kafka_bench:${LAST} goals_missed=$MISSED"
exit 0
