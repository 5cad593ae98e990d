#!/usr/bin/env bash
# bench/source_file_bench.sh — source.file throughput: lines per second from
# a large pre-written file into an event set, against the same run's raw
# read of that file (`cat FILE > /dev/null`, and `wc -l` which also splits
# lines). The file holds SLUICE_FILE_LINES short JSON lines (default 2M,
# ~70 B each); sluice starts with `source.file { start = "beginning" }` into
# a one-partition set, and the clock runs from the start of the server until
# GET /v1/sets/logs reports every line stored (end_offset), server start-up
# included (a few ms). Rows: ack = "buffer" and ack = "durable"; parse =
# "json" (the default) and "text". Goal: 500k lines/s into the set.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp), SLUICE_FILE_LINES
# (default 2000000), SLUICE_FILE_ROWS (comma list of buffer,durable,text;
# default all), SLUICE_FILE_PERF=1 (perf record the first row; the data stays
# in $SLUICE_BENCH_DIR/source_file.*/perf.data).
#
# Exits 0 when it measured everything, goal met or not; 1 on any error.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

LINES=${SLUICE_FILE_LINES:-2000000}
ROWS=${SLUICE_FILE_ROWS:-buffer,durable,text}
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
PERF=${SLUICE_FILE_PERF:-0}
GOAL=500000
TIMEOUT_S=60

die() {
    echo "source_file_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }
has_row() { case ",$ROWS," in *",$1,"*) return 0 ;; esac; return 1; }
now() { date +%s.%N; }

case "$LINES" in '' | *[!0-9]*) die "SLUICE_FILE_LINES must be a whole number" ;; esac
command -v curl > /dev/null || die "curl is needed"
. bench/tsv.sh
[ -x bin/sluice ] || make -s bin/sluice || die "cannot build bin/sluice"

mkdir -p "$ROOT" || die "cannot make $ROOT"
DIR=$(mktemp -d "$ROOT/source_file.XXXXXX") && DIR=$(cd "$DIR" && pwd) || die "cannot make a temp dir in $ROOT"
SRV_PID=
cleanup() {
    [ -n "$SRV_PID" ] && kill -KILL "$SRV_PID" 2> /dev/null && wait "$SRV_PID" 2> /dev/null
    [ "$PERF" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

FS=$(df -T "$DIR" 2> /dev/null | awk 'NR == 2 { print $2 }')
FILE=$DIR/logs/app.log
mkdir -p "$DIR/logs"
note "writing $LINES lines to $FILE ..."
awk -v n="$LINES" 'BEGIN {
    for (i = 0; i < n; i++)
        printf "{\"n\":%d,\"level\":\"info\",\"msg\":\"request served\",\"ms\":%d}\n", i, i % 977
}' > "$FILE" || die "cannot write $FILE"
BYTES=$(stat -c %s "$FILE")

# ---- the references ----------------------------------------------------------
cat "$FILE" > /dev/null # warm the page cache
t0=$(now)
cat "$FILE" > /dev/null
t1=$(now)
n=$(wc -l < "$FILE")
t2=$(now)
[ "$n" = "$LINES" ] || die "the file has $n lines, not $LINES"
CAT_S=$(echo "$t1 - $t0" | bc -l)
WC_S=$(echo "$t2 - $t1" | bc -l)

# ---- sluice ------------------------------------------------------------------
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run ACK PARSE: prints the seconds until every line is in the set.
run() {
    local ack=$1 parse=$2 port data cfg t0 t1 end
    port=$(free_port) || die "no free port"
    data=$DIR/data-$ack-$parse
    cfg=$DIR/sluice-$ack-$parse.lua
    rm -rf "$data"
    cat > "$cfg" << EOF
server { listen = "127.0.0.1:$port", data_dir = "$data" }
set "logs" { partitions = 1, ack = "$ack" }
source.file { path = "$DIR/logs/*.log", set = "logs", type = "app.log", parse = "$parse",
              start = "beginning" }
EOF
    t0=$(now)
    if [ "$PERF" = 1 ] && [ -z "${PERF_DONE:-}" ]; then
        perf record -g -o "$DIR/perf.data" -- bin/sluice serve -c "$cfg" > "$DIR/server.log" 2>&1 &
        PERF_DONE=1
    else
        bin/sluice serve -c "$cfg" > "$DIR/server.log" 2>&1 &
    fi
    SRV_PID=$!
    end=0
    while :; do
        end=$(curl -s "http://127.0.0.1:$port/v1/sets/logs" 2> /dev/null |
            sed -n 's/.*"end_offset":\([0-9]*\).*/\1/p')
        [ "${end:-0}" -ge "$LINES" ] && break
        kill -0 "$SRV_PID" 2> /dev/null || { cat "$DIR/server.log" >&2; die "sluice exited"; }
        [ "$(echo "$(now) - $t0 > $TIMEOUT_S" | bc)" = 1 ] && {
            tail -5 "$DIR/server.log" >&2
            die "only ${end:-0} of $LINES lines after ${TIMEOUT_S}s"
        }
        sleep 0.02
    done
    t1=$(now)
    kill -TERM "$SRV_PID" && wait "$SRV_PID"
    SRV_PID=
    [ "$end" = "$LINES" ] || die "the set holds $end events, not $LINES"
    echo "$t1 - $t0" | bc -l
}

rate() { echo "$LINES / $1" | bc; }

printf '\nsource.file: %d lines, %d MB, %s (%s), %d CPUs\n' "$LINES" $((BYTES / 1000000)) \
    "$DIR" "${FS:-?}" "$(nproc)"
printf '%-36s %12s %10s %10s %8s\n' "row" "lines/s" "MB/s" "seconds" "vs cat"
CAT_RATE=$(rate "$CAT_S")
printf '%-36s %12d %10.0f %10.3f %8s\n' "cat FILE > /dev/null (reference)" "$CAT_RATE" \
    "$(echo "$BYTES / $CAT_S / 1000000" | bc -l)" "$CAT_S" "1.00"
printf '%-36s %12d %10.0f %10.3f %8.3f\n' "wc -l FILE (reference)" "$(rate "$WC_S")" \
    "$(echo "$BYTES / $WC_S / 1000000" | bc -l)" "$WC_S" "$(echo "$CAT_S / $WC_S" | bc -l)"
best=0
# The goal is on the best row; the report gives each row its own verdict.
row() {
    local label=$1 ack=$2 parse=$3 s r
    s=$(run "$ack" "$parse") || exit 1
    r=$(rate "$s")
    [ "$r" -gt "$best" ] && best=$r
    printf '%-36s %12d %10.0f %10.3f %8.3f\n' "$label" "$r" \
        "$(echo "$BYTES / $s / 1000000" | bc -l)" "$s" "$(echo "$CAT_S / $s" | bc -l)"
    tsv_row "source_file.${ack}_$parse" "source.file, $LINES JSON lines into a set, ack=$ack parse=$parse" \
        lines/s "$r" "cat FILE > /dev/null" "$CAT_RATE" "$(echo "$CAT_S / $s" | bc -l)" \
        ">= 500k lines/s" "$([ "$r" -ge "$GOAL" ] && echo yes || echo no)"
}
has_row buffer && row "sluice ack=buffer  parse=json" buffer json
has_row durable && row "sluice ack=durable parse=json" durable json
has_row text && row "sluice ack=buffer  parse=text" buffer text
if [ "$best" -ge "$GOAL" ]; then
    printf 'goal: %d lines/s into the set: met (best %d)\n' "$GOAL" "$best"
else
    printf 'goal: %d lines/s into the set: MISSED (best %d)\n' "$GOAL" "$best"
fi
exit 0
