#!/usr/bin/env bash
# bench/http_bench.sh — the HTTP ingest and consume API of `sluice serve`
# under wrk, against a same-run reference: bench/http/ref_server.c, the
# smallest libmicrohttpd server with sluice's thread model, which reads each
# body and answers a fixed JSON of the same size. Rows: batched POSTs (100
# events of ~300 B, NDJSON and cloudevents-batch) and single-event POSTs, for
# ack=buffer and ack=durable; p99 at half of the peak rate (paced by
# bench/http/post.lua); long-poll consume throughput and wake latency; peak
# RSS of the server. How to read the table: bench/README.md.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp), SLUICE_HTTP_SECS
# (seconds per wrk run, default 4), SLUICE_HTTP_REPS (runs per side of the
# peak rows, default 2), SLUICE_HTTP_ROWS (comma list of batched,single,
# half,consume,wake,batchsize,durable16; default all), SLUICE_HTTP_P99_RUNS
# and SLUICE_HTTP_P99_SECS (the durable16 row's batched p99 runs: 10 of 5 s
# by default), SLUICE_HTTP_BATCHES (events per
# POST of the batchsize row, default "1 10 100 1000"), SLUICE_HTTP_PERF=1 (perf record the
# ack=buffer server during the first ndjson and single runs; the data stays
# in $SLUICE_BENCH_DIR/http_perf).
#
# Exits 0 when it measured everything, goals met or not; 1 on any error.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

SECS=${SLUICE_HTTP_SECS:-4}
REPS=${SLUICE_HTTP_REPS:-2}
ROWS=${SLUICE_HTTP_ROWS:-batched,single,half,consume,wake,batchsize,durable16}
P99_RUNS=${SLUICE_HTTP_P99_RUNS:-10}
P99_SECS=${SLUICE_HTTP_P99_SECS:-5}
BATCHES=${SLUICE_HTTP_BATCHES:-1 10 100 1000}
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
PERF=${SLUICE_HTTP_PERF:-0}
THREADS=2       # wrk threads
CONN_BATCH=32   # connections for batched POSTs
CONN_SINGLE=64  # connections for single-event POSTs
CONN_READ=4     # readers (one per partition, one wrk thread each)
CONN_DURABLE=16 # the durable16 rows (issue 18: group commit at 16 connections)
PARTITIONS=4
BATCH=100
EVENT_BYTES=300
READ_MAX=1000
WAKE_SAMPLES=20
NEED_GIB=12     # free space asked for: about 3 GB per server per 10 s of batched load
REF_BIN=build/rel/bench/http_ref_server

die() {
    echo "http_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }
has_row() { case ",$ROWS," in *",$1,"*) return 0 ;; esac; return 1; }

case "$SECS" in '' | *[!0-9]*) die "SLUICE_HTTP_SECS must be a whole number of seconds" ;; esac
case "$REPS" in [1-9]) ;; *) die "SLUICE_HTTP_REPS must be 1-9" ;; esac
[ "$SECS" -ge 1 ] || die "SLUICE_HTTP_SECS must be at least 1"
for r in ${ROWS//,/ }; do
    case "$r" in batched | single | half | consume | wake | batchsize | durable16) ;; *) die "unknown row '$r' in SLUICE_HTTP_ROWS" ;; esac
done
case "$P99_RUNS" in [1-9] | [1-9][0-9]) ;; *) die "SLUICE_HTTP_P99_RUNS must be 1-99" ;; esac
case "$P99_SECS" in [1-9] | [1-9][0-9]) ;; *) die "SLUICE_HTTP_P99_SECS must be 1-99 seconds" ;; esac
for b in $BATCHES; do
    case "$b" in '' | *[!0-9]*) die "SLUICE_HTTP_BATCHES must be whole numbers (events per POST)" ;; esac
    [ "$b" -ge 1 ] && [ "$b" -le 10000 ] || die "SLUICE_HTTP_BATCHES: $b is not 1-10000"
done
. bench/tsv.sh
if has_row half && ! has_row batched && ! has_row single; then
    die "the half row needs the batched or single row (it runs at half of their peak)"
fi

# ---- tools: wrk (installed like scripts/deps.sh does), sluice, the reference --

if ! command -v wrk >/dev/null 2>&1; then
    note "http_bench: installing wrk"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq --no-install-recommends wrk >/dev/null ||
        die "cannot install wrk (apt-get install wrk)"
fi
command -v curl >/dev/null 2>&1 || die "curl is missing (scripts/deps.sh installs it)"
make -s bin/sluice || die "make bin/sluice failed"
if [ ! -x "$REF_BIN" ] || [ bench/http/ref_server.c -nt "$REF_BIN" ]; then
    mkdir -p "$(dirname "$REF_BIN")"
    # shellcheck disable=SC2046
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -g -D_GNU_SOURCE -pthread \
        $(pkg-config --cflags libmicrohttpd) -o "$REF_BIN" bench/http/ref_server.c \
        $(pkg-config --libs libmicrohttpd) || die "cannot build $REF_BIN"
fi

# ---- temporary directory, servers, clean-up --------------------------------------

mkdir -p "$ROOT" || die "cannot create $ROOT"
free_kib=$(df -Pk "$ROOT" | awk 'NR == 2 {print $4}')
[ "${free_kib:-0}" -ge $((NEED_GIB * 1024 * 1024)) ] ||
    die "$ROOT has $((free_kib / 1024 / 1024)) GiB free; the benchmark writes up to about $NEED_GIB GiB"
TMP=$(mktemp -d "$ROOT/http_bench.XXXXXX") || die "cannot create a directory in $ROOT"
PIDS=()
PERF_PIDS=()

cleanup() {
    local p
    for p in "${PERF_PIDS[@]}"; do kill -INT "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "http_bench: interrupted" >&2; exit 1' INT TERM

# start_server NAME LOGFILE COMMAND...: starts it in the background, waits for
# its "listening on http://HOST:PORT" line and sets PORT_<NAME> and PID_<NAME>.
start_server() {
    local name=$1 log=$2 port="" pid
    shift 2
    "$@" >"$log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do
        port=$(sed -n 's|.*listening on http://[0-9.]*:\([0-9]*\).*|\1|p' "$log" | head -n 1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    [ -n "$port" ] || { cat "$log" >&2; die "$name did not start"; }
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || die "$name does not answer /healthz"
    printf -v "PORT_$name" %s "$port"
    printf -v "PID_$name" %s "$pid"
}

alive() {
    kill -0 "$1" 2>/dev/null || {
        tail -n 20 "$2" >&2
        die "the $3 server died (log above)"
    }
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

mkdir -p "$TMP/buffer" "$TMP/durable"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
start_server buffer "$TMP/buffer.log" bin/sluice serve --data "$TMP/buffer" \
    --listen 127.0.0.1:0 --ack buffer --partitions "$PARTITIONS"
start_server durable "$TMP/durable.log" bin/sluice serve --data "$TMP/durable" \
    --listen 127.0.0.1:0 --ack durable --partitions "$PARTITIONS"
start_server ref "$TMP/ref.log" "$REF_BIN" --listen 127.0.0.1:0 --batch "$BATCH" \
    --get-body "$TMP/get_body.json" --get-events "$READ_MAX"
declare -A PORT=([buffer]=$PORT_buffer [durable]=$PORT_durable [ref]=$PORT_ref)
declare -A PID=([buffer]=$PID_buffer [durable]=$PID_durable [ref]=$PID_ref)
declare -A LOG=([buffer]=$TMP/buffer.log [durable]=$TMP/durable.log [ref]=$TMP/ref.log)

# ---- one wrk run ------------------------------------------------------------------

TAG="r$$"
RUN=0
# run_wrk SIDE SCRIPT CONNS WRK_THREADS LABEL SCRIPT_ARGS...: one wrk run
# against SIDE. Sets R_UNITS (accepted events, or events read, per second),
# R_RPS (200 answers per second), R_P50, R_P99 (ms), R_NON200, R_SOCKERR,
# R_CPU (server CPU in cores) and R_BAD (first non-200 answer, if any).
run_wrk() {
    local side=$1 script=$2 conns=$3 wthreads=$4 label=$5
    shift 5
    RUN=$((RUN + 1))
    local out="$TMP/run$RUN.out" pid=${PID[$side]} c0 c1 t0 t1 line perf_pid=""
    if [ "$PERF" = 1 ] && [ "$side" = buffer ] && [ -n "${PERF_NAME:-}" ]; then
        mkdir -p "$ROOT/http_perf"
        perf record -q -g -p "$pid" -o "$ROOT/http_perf/$PERF_NAME.data" -- sleep "$SECS" \
            >/dev/null 2>&1 &
        perf_pid=$!
        PERF_PIDS+=("$perf_pid")
    fi
    c0=$(cpu_ticks "$pid")
    t0=$(date +%s%N)
    wrk -t"$wthreads" -c"$conns" -d"${SECS}s" --timeout 10s -s "$script" \
        "http://127.0.0.1:${PORT[$side]}/" -- "$@" >"$out" 2>&1 ||
        { cat "$out" >&2; die "wrk failed against $side ($label)"; }
    t1=$(date +%s%N)
    c1=$(cpu_ticks "$pid")
    [ -n "$perf_pid" ] && wait "$perf_pid" 2>/dev/null
    alive "$pid" "${LOG[$side]}" "$side"
    line=$(grep '^@@result ' "$out") || { cat "$out" >&2; die "wrk printed no result ($side, $label)"; }
    local -A v=()
    local kv
    for kv in ${line#@@result }; do v[${kv%%=*}]=${kv#*=}; done
    [ "${v[ok]}" -gt 0 ] || { cat "$out" >&2; die "no 200 answer from $side ($label)"; }
    R_UNITS=$(awk -v a="${v[accepted]}" -v d="${v[duration_us]}" 'BEGIN {printf "%.0f", a / (d / 1e6)}')
    R_RPS=$(awk -v a="${v[ok]}" -v d="${v[duration_us]}" 'BEGIN {printf "%.0f", a / (d / 1e6)}')
    R_P50=$(awk -v x="${v[p50_us]}" 'BEGIN {printf "%.2f", x / 1000}')
    R_P99=$(awk -v x="${v[p99_us]}" 'BEGIN {printf "%.2f", x / 1000}')
    R_NON200=${v[non200]}
    R_SOCKERR=$((v[connect] + v[read] + v[write] + v[timeout]))
    R_CPU=$(awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%.2f", (t > 0 ? (c / hz) / (t / 1e9) : 0)}')
    R_BAD=$(sed -n 's/^@@first_bad //p' "$out")
    local code_n
    for code_n in $(sed -n 's/^@@codes //p' "$out"); do # "404x3 503x10"
        CODES[$side:${code_n%x*}]=$((${CODES[$side:${code_n%x*}]:-0} + ${code_n#*x}))
    done
    NON200_TOTAL[$side]=$((${NON200_TOTAL[$side]:-0} + R_NON200))
    SOCKERR_TOTAL[$side]=$((${SOCKERR_TOTAL[$side]:-0} + R_SOCKERR))
    [ -n "$R_BAD" ] && [ -z "${FIRST_BAD[$side]:-}" ] && FIRST_BAD[$side]="$label: $R_BAD"
    note "$(printf '  %-7s %-34s %10s/s %9s req/s  p50 %6s ms  p99 %7s ms  cpu %4s  non-200 %s' \
        "$side" "$label" "$R_UNITS" "$R_RPS" "$R_P50" "$R_P99" "$R_CPU" "$R_NON200")"
}
declare -A NON200_TOTAL=() SOCKERR_TOTAL=() FIRST_BAD=() CODES=()

# Results, by key = row_side: BEST[key] holds "units rps p50 p99 cpu" of the
# run with the most units, LO[key] and HI[key] the least and most units.
declare -A BEST=() LO=() HI=()
record() {
    local key=$1
    local cur=${BEST[$key]:-}
    if [ -z "$cur" ] || [ "$R_UNITS" -gt "${cur%% *}" ]; then
        BEST[$key]="$R_UNITS $R_RPS $R_P50 $R_P99 $R_CPU"
    fi
    if [ -z "${LO[$key]:-}" ] || [ "$R_UNITS" -lt "${LO[$key]}" ]; then LO[$key]=$R_UNITS; fi
    if [ -z "${HI[$key]:-}" ] || [ "$R_UNITS" -gt "${HI[$key]}" ]; then HI[$key]=$R_UNITS; fi
}
field() { # field KEY N: the Nth value of BEST[KEY] (1 = units)
    local -a a
    read -r -a a <<<"${BEST[$1]:-}"
    echo "${a[$(($2 - 1))]:-}"
}

# ---- the runs ------------------------------------------------------------------

cores=$(nproc)
fs=$(stat -f -c %T "$TMP")
{
    echo "http_bench: sluice serve (HTTP ingest/consume) vs a minimal libmicrohttpd server, same run"
    printf '  machine   %s cores, load average %s at the start; wrk %s shares the cores\n' \
        "$cores" "$LOAD_BEFORE" "$(wrk -v 2>&1 | head -n 1 | awk '{print $2}')"
    printf '  dir       %s (%s, %s GiB free)\n' "$TMP" "$fs" "$((free_kib / 1024 / 1024))"
    printf '  load      %s s per run; wrk -t%s; batched: %s events of ~%s B per POST, -c%s; single: -c%s\n' \
        "$SECS" "$THREADS" "$BATCH" "$EVENT_BYTES" "$CONN_BATCH" "$CONN_SINGLE"
    printf '  servers   sluice --partitions %s (ack=buffer, ack=durable: two servers); ref = bench/http/ref_server.c\n' \
        "$PARTITIONS"
    printf '  repeats   best of %s per side for rows 1-2, side order alternating; noise = min..max\n' "$REPS"
    [ "$fs" = tmpfs ] && echo "  note      $TMP is on tmpfs: the durable rows measure memory, not storage"
}

note "warm-up (1 s per server, untimed)"
for side in buffer durable ref; do
    SAVE=$SECS
    SECS=1
    run_wrk "$side" bench/http/post.lua "$CONN_BATCH" "$THREADS" "warm-up" \
        ndjson ndjson "$BATCH" "$EVENT_BYTES" 0 "${TAG}w" "$THREADS"
    SECS=$SAVE
done

for rep in $(seq "$REPS"); do
    if [ $((rep % 2)) -eq 1 ]; then order="buffer durable ref"; else order="ref durable buffer"; fi
    note "repeat $rep of $REPS"
    for side in $order; do
        if has_row batched; then
            for mode in ndjson batch; do
                PERF_NAME=""
                [ "$rep" = 1 ] && [ "$mode" = ndjson ] && PERF_NAME=batched_ndjson_buffer
                run_wrk "$side" bench/http/post.lua "$CONN_BATCH" "$THREADS" "batched $mode" \
                    "$mode" "$mode" "$BATCH" "$EVENT_BYTES" 0 "${TAG}b$rep" "$THREADS"
                record "${mode}_$side"
            done
        fi
        if has_row single; then
            PERF_NAME=""
            [ "$rep" = 1 ] && PERF_NAME=single_buffer
            run_wrk "$side" bench/http/post.lua "$CONN_SINGLE" "$THREADS" "single" \
                single single 1 "$EVENT_BYTES" 0 "${TAG}s$rep" "$THREADS"
            record "single_$side"
        fi
    done
done
PERF_NAME=""

# Issue 18's ack=durable rows at 16 connections, runs of P99_SECS: one event
# per POST (rate and server CPU per event; the sides take turns with the
# reference as above), then P99_RUNS runs of batched NDJSON against the
# durable server, for the worst p99 of them (a stall in one run shows).
P99_LIST=""
P99_EPS_LIST=""
if has_row durable16; then
    note "ack=durable at $CONN_DURABLE connections, $P99_SECS s per run"
    SAVE=$SECS
    SECS=$P99_SECS
    for rep in $(seq "$REPS"); do
        if [ $((rep % 2)) -eq 1 ]; then order="durable ref"; else order="ref durable"; fi
        for side in $order; do
            run_wrk "$side" bench/http/post.lua "$CONN_DURABLE" "$THREADS" "single, -c$CONN_DURABLE" \
                single single 1 "$EVENT_BYTES" 0 "${TAG}d$rep" "$THREADS"
            record "d16single_$side"
        done
    done
    for i in $(seq "$P99_RUNS"); do
        run_wrk durable bench/http/post.lua "$CONN_DURABLE" "$THREADS" \
            "batched ndjson -c$CONN_DURABLE ($i of $P99_RUNS)" \
            ndjson ndjson "$BATCH" "$EVENT_BYTES" 0 "${TAG}p$i" "$THREADS"
        record d16batch_durable
        P99_LIST="$P99_LIST $R_P99"
        P99_EPS_LIST="$P99_EPS_LIST $R_UNITS"
    done
    SECS=$SAVE
fi
# median VALUES...: the middle value (the lower of the two middle ones)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
maxof() { printf '%s\n' "$@" | sort -g | tail -n 1; }
# us_per_event KEY: server CPU per event of BEST[KEY] in microseconds
us_per_event() {
    awk -v c="$(field "$1" 5)" -v u="$(field "$1" 1)" 'BEGIN {printf "%.1f", (u > 0 ? c * 1e6 / u : 0)}'
}

# p99 at half of the peak: both sides at the same fixed rate, half of
# sluice's best ack=buffer rate of the row.
HALF_SINGLE_RATE=""
HALF_BATCH_RATE=""
if has_row half; then
    note "half of the peak rate, paced"
    if has_row single; then
        HALF_SINGLE_RATE=$(($(field single_buffer 2) / 2))
        for side in buffer ref; do
            run_wrk "$side" bench/http/post.lua "$CONN_SINGLE" "$THREADS" \
                "single at $HALF_SINGLE_RATE req/s" \
                single half-single 1 "$EVENT_BYTES" "$HALF_SINGLE_RATE" "${TAG}hs" "$THREADS"
            record "halfsingle_$side"
        done
    fi
    if has_row batched; then
        HALF_BATCH_RATE=$(($(field ndjson_buffer 2) / 2))
        for side in buffer ref; do
            run_wrk "$side" bench/http/post.lua "$CONN_BATCH" "$THREADS" \
                "ndjson at $HALF_BATCH_RATE req/s" \
                ndjson half-ndjson "$BATCH" "$EVENT_BYTES" "$HALF_BATCH_RATE" "${TAG}hb" "$THREADS"
            record "halfbatch_$side"
        done
    fi
fi

# Peak RSS of the ingest rows, before the consume row maps segments to read.
HWM_INGEST=$(hwm_kib "${PID[buffer]}")
HWM_INGEST_DURABLE=$(hwm_kib "${PID[durable]}")
[ "$HWM_INGEST_DURABLE" -gt "$HWM_INGEST" ] && HWM_INGEST=$HWM_INGEST_DURABLE

# Consume: a set with at least READ_MAX events in every partition (the
# batched rows wrote one; otherwise load one now), read back from offset 0.
if has_row consume; then
    note "consume (GET ?max=$READ_MAX, one reader per partition)"
    read_set=ndjson
    if ! has_row batched; then
        SAVE=$SECS
        SECS=2
        run_wrk buffer bench/http/post.lua "$CONN_BATCH" "$THREADS" "load for consume" \
            ndjson ndjson "$BATCH" "$EVENT_BYTES" 0 "${TAG}c" "$THREADS"
        SECS=$SAVE
    fi
    code=$(curl -s -o "$TMP/get_body.json" -w '%{http_code}' \
        "http://127.0.0.1:${PORT[buffer]}/v1/sets/$read_set/events?partition=0&from=beginning&max=$READ_MAX")
    [ "$code" = 200 ] || die "GET of the consume sample answered $code: $(head -c 300 "$TMP/get_body.json")"
    [ "$(grep -o '"sluiceoffset":' "$TMP/get_body.json" | wc -l)" -eq "$READ_MAX" ] ||
        die "partition 0 of set $read_set has fewer than $READ_MAX events"
    GET_BYTES=$(wc -c <"$TMP/get_body.json")
    for side in buffer ref; do
        run_wrk "$side" bench/http/consume.lua "$CONN_READ" "$CONN_READ" "consume" \
            "$read_set" "$READ_MAX" "$PARTITIONS"
        record "consume_$side"
    done
fi

# Long-poll wake latency, idle server: a GET parked at the end of a partition,
# then one POST to it; the time from sending the POST to the GET's answer.
WAKE_P50=""
WAKE_MAX=""
if has_row wake; then
    if command -v python3 >/dev/null 2>&1; then
        note "long-poll wake latency ($WAKE_SAMPLES samples)"
        wake=$(python3 - "${PORT[buffer]}" "$WAKE_SAMPLES" <<'EOF'
import http.client, json, sys, threading, time
port, n = int(sys.argv[1]), int(sys.argv[2])
post_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
get_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
def post(i):
    ev = {"specversion": "1.0", "id": "wake-%d" % i, "source": "/bench/http",
          "type": "bench.http.wake", "partitionkey": "wake", "data": {"i": i}}
    post_conn.request("POST", "/v1/sets/wake/events", json.dumps(ev),
                      {"Content-Type": "application/cloudevents+json"})
    r = post_conn.getresponse()
    body = json.loads(r.read())
    if r.status != 200:
        sys.exit("POST answered %d" % r.status)
    return body["results"][0]["partition"], body["results"][0]["offset"]
part, off = post(-1)
lat = []
for i in range(n):
    # With ack=buffer the POST answers before its append: an offset past the
    # partition's end is refused (416), so wait for the append first.
    time.sleep(0.03)
    got = {}
    def reader(at=off + 1):
        get_conn.request("GET", "/v1/sets/wake/events?partition=%d&offset=%d&wait_ms=5000"
                         % (part, at))
        r = get_conn.getresponse()
        got["body"] = r.read()
        got["t"] = time.perf_counter()
        got["status"] = r.status
    th = threading.Thread(target=reader)
    th.start()
    time.sleep(0.05)  # the GET is parked by now
    t0 = time.perf_counter()
    part2, off = post(i)
    th.join()
    if got.get("status") != 200 or b'"sluiceoffset":%d' % off not in got.get("body", b""):
        sys.exit("the long-poll did not return the new event")
    lat.append((got["t"] - t0) * 1000)
lat.sort()
print("%.2f %.2f" % (lat[len(lat) // 2], lat[-1]))
EOF
        ) || die "long-poll wake measurement failed"
        WAKE_P50=${wake% *}
        WAKE_MAX=${wake#* }
    else
        note "  no python3: long-poll wake latency skipped"
    fi
fi

# Row 6, throughput against batch size: NDJSON POSTs of b events for each b of
# BATCHES, ack=buffer, one run per side. The reference answers the same
# number of results as sluice does, so it gets a server of its own per size
# (--batch b); the shared one keeps answering 100. About 3200 events in
# flight: 32 connections up to 100 events per POST, fewer above (4 at 1000).
# With 32 connections of ~300 KB bodies wrk itself was the limit: the
# reference fell from ~800 to ~350 requests/s while neither side was busy.
bs_conns() { # bs_conns B: connections for B events per POST, even, 2-32
    local c=$(((3200 / $1 + 1) / 2 * 2))
    [ "$c" -gt "$CONN_BATCH" ] && c=$CONN_BATCH
    [ "$c" -lt "$THREADS" ] && c=$THREADS
    echo "$c"
}
if has_row batchsize; then
    note "throughput against events per POST (ndjson, ack=buffer)"
    for b in $BATCHES; do
        # A log of its own: start_server reads the port from it, and the
        # previous server's log may not be truncated yet when it looks.
        start_server refb "$TMP/refb$b.log" "$REF_BIN" --listen 127.0.0.1:0 --batch "$b"
        # shellcheck disable=SC2154 # both set by start_server
        { PORT[refb]=$PORT_refb; PID[refb]=$PID_refb; }
        LOG[refb]=$TMP/refb$b.log
        for side in buffer refb; do
            run_wrk "$side" bench/http/post.lua "$(bs_conns "$b")" "$THREADS" "ndjson, $b per POST" \
                ndjson "bs$b" "$b" "$EVENT_BYTES" 0 "${TAG}z$b" "$THREADS"
            record "bs${b}_$side"
        done
        kill -TERM "${PID[refb]}" 2>/dev/null
        wait "${PID[refb]}" 2>/dev/null
    done
fi

# Peak RSS, and what the durable server's fsyncs cost.
HWM_BUFFER=$(hwm_kib "${PID[buffer]}")
HWM_DURABLE=$(hwm_kib "${PID[durable]}")
HWM_REF=$(hwm_kib "${PID[ref]}")
HWM_SLUICE=$((HWM_BUFFER > HWM_DURABLE ? HWM_BUFFER : HWM_DURABLE))
RSS_SPLIT=$(awk '/^RssAnon:/ {a = $2} /^RssFile:/ {f = $2} END {printf "%d %d", a / 1024, f / 1024}' \
    "/proc/${PID[buffer]}/status")
FSYNC=$(curl -sf "http://127.0.0.1:${PORT[durable]}/metrics" |
    awk '/^sluice_fsync_seconds_sum/ {s = $2} /^sluice_fsync_seconds_count/ {c = $2}
         END {if (c > 0) printf "%d %.2f", c, s / c * 1000}')
DISK_MB=$(du -sm "$TMP" | awk '{print $1}')
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the table -----------------------------------------------------------------

# Number formats: events/s and req/s as 1234k, ms with 2 decimals.
fmt_k() { [ -n "$1" ] && awk -v x="$1" 'BEGIN {printf "%.0fk", x / 1000}' || echo "-"; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}' || echo "-"; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a >= b)}'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a < b)}'; }
MISSED=0
# goal_ge VALUE MIN / goal_lt VALUE MAX: set M to yes or MISS and count misses.
goal_ge() { if ge "$1" "$2"; then M=yes; else M=MISS; MISSED=$((MISSED + 1)); fi; }
goal_lt() { if lt "$1" "$2"; then M=yes; else M=MISS; MISSED=$((MISSED + 1)); fi; }
line() { # row unit sluice ref ratio goal met noise_sluice noise_ref
    printf '%-44s %-5s %10s %10s %6s %7s %4s   %-15s %s\n' "$@"
}
noise() { [ -n "${LO[$1]:-}" ] && echo "$(fmt_k "${LO[$1]}")..$(fmt_k "${HI[$1]}")" || echo "-"; }
lat_line() { # the p50/p99 line under a throughput row
    local s=$1 r=$2
    line "   latency p50 / p99" "ms" "$(field "$s" 3)/$(field "$s" 4)" \
        "$(if [ -n "$r" ]; then echo "$(field "$r" 3)/$(field "$r" 4)"; else echo -; fi)" "" "" "" "" ""
}

OUT=$TMP/table
{
    echo
    line row unit sluice ref ratio goal met "noise sluice" "noise ref"
    if has_row batched; then
        for mode in ndjson batch; do
            [ $mode = ndjson ] && { n=a; title="batched ndjson"; } || { n=b; title="batched cloudevents-batch"; }
            s=$(field "${mode}_buffer" 1)
            r=$(field "${mode}_ref" 1)
            goal_ge "$s" 400000
            line "1$n $title, ack=buffer" "ev/s" "$(fmt_k "$s")" "$(fmt_k "$r")" "$(ratio "$s" "$r")" \
                ">=400k" "$M" "$(noise "${mode}_buffer")" "$(noise "${mode}_ref")"
            lat_line "${mode}_buffer" "${mode}_ref"
        done
        for mode in ndjson batch; do
            [ $mode = ndjson ] && { n=c; b=a; title="batched ndjson"; } || { n=d; b=b; title="batched cloudevents-batch"; }
            s=$(field "${mode}_durable" 1)
            r=$(field "${mode}_ref" 1)
            line "1$n $title, ack=durable" "ev/s" "$(fmt_k "$s")" "$(fmt_k "$r")" "$(ratio "$s" "$r")" \
                "-" "-" "$(noise "${mode}_durable")" "$(noise "${mode}_ref")"
            lat_line "${mode}_durable" ""
            dv=$(ratio "$s" "$(field "${mode}_buffer" 1)")
            goal_ge "$dv" 0.5
            line "   durable / buffer (1$n / 1$b)" "ratio" "$dv" "" "" ">=0.50" "$M" "" ""
        done
    fi
    if has_row single; then
        s=$(field single_buffer 1)
        r=$(field single_ref 1)
        goal_ge "$s" 40000
        line "2a single event, ack=buffer" "req/s" "$(fmt_k "$s")" "$(fmt_k "$r")" "$(ratio "$s" "$r")" \
            ">=40k" "$M" "$(noise single_buffer)" "$(noise single_ref)"
        lat_line single_buffer single_ref
        s=$(field single_durable 1)
        line "2b single event, ack=durable" "req/s" "$(fmt_k "$s")" "$(fmt_k "$r")" "$(ratio "$s" "$r")" \
            "-" "-" "$(noise single_durable)" "$(noise single_ref)"
        lat_line single_durable ""
    fi
    if has_row durable16; then
        s=$(field d16single_durable 1)
        r=$(field d16single_ref 1)
        goal_ge "$s" 18400
        line "2c single event, ack=durable, -c$CONN_DURABLE" "req/s" "$(fmt_k "$s")" "$(fmt_k "$r")" \
            "$(ratio "$s" "$r")" ">=18.4k" "$M" "$(noise d16single_durable)" "$(noise d16single_ref)"
        lat_line d16single_durable d16single_ref
        D16_CPU=$(us_per_event d16single_durable)
        goal_lt "$D16_CPU" 40.01
        line "   server CPU per event (2c)" "us" "$D16_CPU" "$(us_per_event d16single_ref)" \
            "" "<=40" "$M" "" ""
        # shellcheck disable=SC2086 # lists of numbers
        { P99_MAX=$(maxof $P99_LIST); P99_MED=$(median $P99_LIST); D16_EPS=$(median $P99_EPS_LIST); }
        goal_lt "$P99_MAX" 25
        line "1e batched ndjson, ack=durable, -c$CONN_DURABLE: p99" "ms" "$P99_MAX" "-" "-" "<25" "$M" \
            "" ""
        line "   worst of $P99_RUNS runs; median p99, ev/s" "" "$P99_MED, $(fmt_k "$D16_EPS")" "" "" "" "" "" ""
    fi
    if has_row half; then
        P99_HALF=""
        for k in single batch; do
            if [ $k = single ]; then
                key=halfsingle; rate=$HALF_SINGLE_RATE; n=a; title="p99 at 1/2 of 2a: single, $(fmt_k "$rate") req/s"
            else
                key=halfbatch; rate=$HALF_BATCH_RATE; n=b; title="p99 at 1/2 of 1a: ndjson, $(fmt_k "$((rate * BATCH))") ev/s"
            fi
            [ -n "$rate" ] || continue
            s=$(field "${key}_buffer" 4)
            r=$(field "${key}_ref" 4)
            goal_lt "$s" 5
            line "3$n $title" "ms" "$s" "$r" "$(ratio "$s" "$r")" "<5" "$M" "" ""
            line "   achieved req/s, p50 ms" "" "$(fmt_k "$(field "${key}_buffer" 2)"), $(field "${key}_buffer" 3)" \
                "$(fmt_k "$(field "${key}_ref" 2)"), $(field "${key}_ref" 3)" "" "" "" "" ""
            if [ -z "$P99_HALF" ] || lt "$P99_HALF" "$s"; then P99_HALF=$s; fi
        done
    fi
    if has_row consume; then
        s=$(field consume_buffer 1)
        r=$(field consume_ref 1)
        line "4a consume, GET max=$READ_MAX, warm, $CONN_READ readers" "ev/s" "$(fmt_k "$s")" "$(fmt_k "$r")" \
            "$(ratio "$s" "$r")" "-" "-" "" ""
        lat_line consume_buffer consume_ref
    fi
    if [ -n "$WAKE_P50" ]; then
        goal_lt "$WAKE_MAX" 50
        line "4b long-poll wake, idle, p50 (max)" "ms" "$WAKE_P50 ($WAKE_MAX)" "-" "-" "<50" "$M" "" ""
    fi
    if has_row batchsize; then
        for b in $BATCHES; do
            s=$(field "bs${b}_buffer" 1)
            r=$(field "bs${b}_refb" 1)
            line "6  ndjson, $b event(s) per POST, -c$(bs_conns "$b")" "ev/s" "$(fmt_k "$s")" "$(fmt_k "$r")" \
                "$(ratio "$s" "$r")" "-" "-" "" ""
            lat_line "bs${b}_buffer" "bs${b}_refb"
        done
    fi
    mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
    RSS_INGEST_MIB=$(mib "$HWM_INGEST")
    goal_lt "$RSS_INGEST_MIB" 128
    line "5a peak RSS (VmHWM), rows 1-3, worst server" "MiB" "$RSS_INGEST_MIB" "-" "-" "<128" "$M" "" ""
    RSS_MIB=$(mib "$HWM_SLUICE")
    goal_lt "$RSS_MIB" 128
    line "5b peak RSS (VmHWM), whole run" "MiB" "$RSS_MIB" "$(mib "$HWM_REF")" \
        "$(ratio "$HWM_SLUICE" "$HWM_REF")" "<128" "$M" "" ""
} >"$OUT"
cat "$OUT"

# ---- notes -----------------------------------------------------------------------

{
    echo
    echo "notes"
    echo "  all   sluice = bin/sluice serve; ref = $REF_BIN (same MHD thread model; reads the body,"
    echo "        answers a fixed JSON of the same size; no parsing, no storing). ratio = sluice / ref:"
    echo "        for ev/s and req/s higher is better, for ms lower is better. Goals are the issue's"
    echo "        absolute figures for a 2-core machine; wrk runs on the same cores as the server."
    echo "        events/s count the \"accepted\" of 200 answers only; non-200 answers are counted apart."
    printf '  cpu   server CPU (cores, of %s) in the best run: ' "$cores"
    for k in ndjson batch single consume; do
        [ -n "${BEST[${k}_buffer]:-}" ] &&
            printf '%s buffer %s ref %s; ' "$k" "$(field "${k}_buffer" 5)" "$(field "${k}_ref" 5)"
    done
    for k in ndjson single; do
        [ -n "${BEST[${k}_durable]:-}" ] && printf '%s durable %s; ' "$k" "$(field "${k}_durable" 5)"
    done
    echo
    if [ -n "$FSYNC" ]; then
        echo "  1c-2b durable server: ${FSYNC% *} fdatasyncs, mean ${FSYNC#* } ms each (its /metrics)"
    fi
    if has_row durable16; then
        echo "  2c/1e ack=durable server at $CONN_DURABLE connections, $P99_SECS s runs; 1e p99s (ms):$P99_LIST"
        echo "        2c goal: 2x the 9.2k req/s of issue 18 (Fluent Bit comparison); CPU = server CPU / events"
    fi
    if has_row half; then
        echo "  3     paced by bench/http/post.lua's delay() (no -R in Debian's wrk); both sides get the"
        echo "        same rate; latency counts from the actual send (see bench/README.md)"
    fi
    if [ -n "${GET_BYTES:-}" ]; then
        echo "  4a    each answer ~$((GET_BYTES / 1024)) KiB; ref serves a copy of a real sluice answer from memory"
    fi
    [ -n "$WAKE_P50" ] && echo "  4b    time from sending a POST to the answer of a GET parked at the end of its partition;" &&
        echo "        includes the Databus linger (linger_ms of the set); $WAKE_SAMPLES samples, python3 client"
    printf '  5     VmHWM at the end: ack=buffer %s MiB, ack=durable %s MiB, ref %s MiB. The ack=buffer\n' \
        "$((HWM_BUFFER / 1024))" "$((HWM_DURABLE / 1024))" "$((HWM_REF / 1024))"
    printf '        server ends with RssAnon %s MiB, RssFile %s MiB (file pages mapped by reads count in RSS)\n' \
        "${RSS_SPLIT% *}" "${RSS_SPLIT#* }"
    for side in buffer durable ref; do
        if [ "${NON200_TOTAL[$side]:-0}" -gt 0 ] || [ "${SOCKERR_TOTAL[$side]:-0}" -gt 0 ]; then
            by_code=""
            for k in "${!CODES[@]}"; do
                [ "${k%%:*}" = "$side" ] && by_code="$by_code, ${k#*:} x ${CODES[$k]}"
            done
            echo "  !     $side: ${NON200_TOTAL[$side]:-0} non-200 answers (${by_code#, }), ${SOCKERR_TOTAL[$side]:-0} socket errors"
            echo "        first: ${FIRST_BAD[$side]:-}"
        fi
    done
    echo "  disk  $DISK_MB MB written; load average at the end $LOAD_AFTER (start $LOAD_BEFORE)"
    if [ "$PERF" = 1 ]; then
        echo "  perf  $ROOT/http_perf/*.data: perf report -i FILE --no-children --stdio"
    fi
} | tee -a "$OUT"

# ---- rows for make bench's report (bench/tsv.sh) -------------------------------

yn() { if "$@"; then echo yes; else echo no; fi; }
REF="minimal libmicrohttpd server"
if has_row batched; then
    for mode in ndjson batch; do
        [ $mode = ndjson ] && n=a || n=b
        [ $mode = ndjson ] && title="batched NDJSON ($BATCH events/POST)" || title="batched cloudevents-batch ($BATCH events/POST)"
        s=$(field "${mode}_buffer" 1)
        r=$(field "${mode}_ref" 1)
        tsv_row "http.1$n" "1$n ingest, $title, ack=buffer" ev/s "$s" "$REF" "$r" "$(ratio "$s" "$r")" \
            ">= 400k ev/s" "$(yn ge "$s" 400000)"
    done
    for mode in ndjson batch; do
        [ $mode = ndjson ] && { n=c; title="batched NDJSON"; } || { n=d; title="batched cloudevents-batch"; }
        s=$(field "${mode}_durable" 1)
        r=$(field "${mode}_ref" 1)
        tsv_row "http.1$n" "1$n ingest, $title, ack=durable" ev/s "$s" "$REF" "$r" "$(ratio "$s" "$r")" - -
        dv=$(ratio "$s" "$(field "${mode}_buffer" 1)")
        tsv_row "http.1${n}_vs_buffer" "1$n/1$([ $n = c ] && echo a || echo b) ingest, $title: ack=durable / ack=buffer" \
            ratio "$dv" - - - ">= 0.50" "$(yn ge "$dv" 0.5)"
    done
fi
if has_row single; then
    s=$(field single_buffer 1)
    r=$(field single_ref 1)
    tsv_row http.2a "2a ingest, one event per POST, ack=buffer" req/s "$s" "$REF" "$r" "$(ratio "$s" "$r")" \
        ">= 40k req/s" "$(yn ge "$s" 40000)"
    s=$(field single_durable 1)
    tsv_row http.2b "2b ingest, one event per POST, ack=durable" req/s "$s" "$REF" "$r" "$(ratio "$s" "$r")" - -
fi
if has_row durable16; then
    s=$(field d16single_durable 1)
    r=$(field d16single_ref 1)
    tsv_row http.2c "2c ingest, one event per POST, ack=durable, $CONN_DURABLE connections" req/s "$s" \
        "$REF" "$r" "$(ratio "$s" "$r")" ">= 18.4k req/s (2x issue 18)" "$(yn ge "$s" 18400)"
    tsv_row http.2c_cpu "2c server CPU per event, one event per POST, ack=durable" us "$D16_CPU" \
        "$REF" "$(us_per_event d16single_ref)" - "<= 40 us" "$(yn lt "$D16_CPU" 40.01)"
    tsv_row http.1e_p99 "1e batched NDJSON, ack=durable, $CONN_DURABLE connections: worst p99 of $P99_RUNS runs (median $P99_MED ms)" \
        ms "$P99_MAX" - - - "< 25 ms" "$(yn lt "$P99_MAX" 25)"
fi
if has_row half; then
    [ -n "$HALF_SINGLE_RATE" ] && s=$(field halfsingle_buffer 4) && r=$(field halfsingle_ref 4) &&
        tsv_row http.3a "3a ingest p99 at half of 2a's peak ($HALF_SINGLE_RATE req/s, one event per POST)" \
            ms "$s" "$REF" "$r" "$(ratio "$s" "$r")" "< 5 ms" "$(yn lt "$s" 5)"
    [ -n "$HALF_BATCH_RATE" ] && s=$(field halfbatch_buffer 4) && r=$(field halfbatch_ref 4) &&
        tsv_row http.3b "3b ingest p99 at half of 1a's peak ($((HALF_BATCH_RATE * BATCH)) ev/s, NDJSON)" \
            ms "$s" "$REF" "$r" "$(ratio "$s" "$r")" "< 5 ms" "$(yn lt "$s" 5)"
fi
if has_row consume; then
    s=$(field consume_buffer 1)
    r=$(field consume_ref 1)
    tsv_row http.4a "4a consume, GET max=$READ_MAX, warm, $CONN_READ readers" ev/s "$s" \
        "the same answers served from memory" "$r" "$(ratio "$s" "$r")" - -
fi
[ -n "$WAKE_P50" ] &&
    tsv_row http.4b "4b long-poll wake, idle server, max of $WAKE_SAMPLES (p50 $WAKE_P50 ms)" ms "$WAKE_MAX" \
        - - - "< 50 ms" "$(yn lt "$WAKE_MAX" 50)"
tsv_row http.5a "5a peak RSS (VmHWM) of the ingest rows, worse server" MiB "$RSS_INGEST_MIB" - - - \
    "< 128 MiB" "$(yn lt "$RSS_INGEST_MIB" 128)"
tsv_row http.5b "5b peak RSS (VmHWM), whole run (mapped segments count)" MiB "$RSS_MIB" "$REF" \
    "$(mib "$HWM_REF")" "$(ratio "$HWM_SLUICE" "$HWM_REF")" "< 128 MiB" "$(yn lt "$RSS_MIB" 128)"
if has_row batchsize; then
    for b in $BATCHES; do
        s=$(field "bs${b}_buffer" 1)
        r=$(field "bs${b}_refb" 1)
        tsv_row "http.batch_$b" "6 ingest, NDJSON POSTs of $b event(s), ack=buffer, $(bs_conns "$b") connections" ev/s "$s" "$REF" "$r" \
            "$(ratio "$s" "$r")" - -
    done
fi

# ---- last line -------------------------------------------------------------------

kv=""
has_row batched && kv="$kv batched_buffer_eps=$(field ndjson_buffer 1)"
has_row batched && kv="$kv batched_ce_buffer_eps=$(field batch_buffer 1)"
has_row single && kv="$kv single_rps=$(field single_buffer 1)"
has_row batched && kv="$kv durable_vs_buffer=$(ratio "$(field ndjson_durable 1)" "$(field ndjson_buffer 1)")"
has_row batched && kv="$kv durable_vs_buffer_ce=$(ratio "$(field batch_durable 1)" "$(field batch_buffer 1)")"
has_row half && kv="$kv p99_half_ms=$P99_HALF"
has_row durable16 && kv="$kv durable16_rps=$(field d16single_durable 1) durable16_cpu_us=$D16_CPU durable16_batch_p99_max_ms=$P99_MAX"
kv="$kv rss_mib=$RSS_MIB rss_ingest_mib=$RSS_INGEST_MIB"
has_row consume && kv="$kv consume_eps=$(field consume_buffer 1)"
[ -n "$WAKE_P50" ] && kv="$kv wake_p50_ms=$WAKE_P50"
has_row batched && kv="$kv batched_vs_ref=$(ratio "$(field ndjson_buffer 1)" "$(field ndjson_ref 1)")"
has_row single && kv="$kv single_vs_ref=$(ratio "$(field single_buffer 1)" "$(field single_ref 1)")"
if has_row batchsize; then
    for b in $BATCHES; do kv="$kv batch${b}_eps=$(field "bs${b}_buffer" 1) batch${b}_vs_ref=$(ratio "$(field "bs${b}_buffer" 1)" "$(field "bs${b}_refb" 1)")"; done
fi
kv="$kv goals_missed=$MISSED"
echo
echo "http_bench:$kv"
exit 0
