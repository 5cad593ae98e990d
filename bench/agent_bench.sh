#!/usr/bin/env bash
# bench/agent_bench.sh — events/s through the Databus agent (`sluice databus`,
# docs/agent.md) over its UNIX socket, against direct batched HTTP posting to
# the same server in the same run. Writers are separate processes
# (bench/agent_load.c, built here with cc): 1 and 8 of them, each writing N
# ~250-byte events; via the agent each pipelines its lines on one connection
# and waits for every answer; directly each POSTs NDJSON batches of BATCH
# events one at a time on a keep-alive connection. In the rows "1" and "8"
# every writer of a run uses its own set; in the row "8 1set" the eight
# writers of a run share one set (fresh names per run), which is where the
# agent's streams matter: with --streams 1 it sends that set one request at a
# time. A run's rate is all events / wall time
# from the first writer's start to the last writer's end; the last column is
# the agent process's CPU time (user + system) per event in its best run. The server is
# `ack = "durable"` (its default) with 4 partitions per set, so an ok answer
# means fsynced in both columns. Goal: agent ≥ 0.9 × direct.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp), SLUICE_AGENT_N
# (events per writer, default 200000), SLUICE_AGENT_BATCH (events per direct
# POST, default 1000), SLUICE_AGENT_REPS (runs per cell, best kept, default 2),
# SLUICE_AGENT_STREAMS (the agent's --streams; default: the agent's own, 1).
#
# Exits 0 when it measured everything, goal met or not; 1 on any error.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

N=${SLUICE_AGENT_N:-200000}
BATCH=${SLUICE_AGENT_BATCH:-1000}
REPS=${SLUICE_AGENT_REPS:-2}
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
DIR=$ROOT/agent
LOAD=build/rel/bench/agent_load

die() {
    echo "agent_bench: error: $*" >&2
    exit 1
}
now() { date +%s.%N; }

case "$N" in '' | *[!0-9]*) die "SLUICE_AGENT_N must be a number" ;; esac
case "$BATCH" in '' | *[!0-9]*) die "SLUICE_AGENT_BATCH must be a number" ;; esac
case "$REPS" in [1-9]) ;; *) die "SLUICE_AGENT_REPS must be 1-9" ;; esac
STREAMS=${SLUICE_AGENT_STREAMS:-}
case "$STREAMS" in '' | [1-9] | [1-5][0-9] | 6[0-4]) ;; *) die "SLUICE_AGENT_STREAMS must be 1-64" ;; esac

[ -x bin/sluice ] || make -s bin/sluice || die "cannot build bin/sluice"
. bench/tsv.sh
mkdir -p build/rel/bench "$DIR" || die "cannot create $DIR"
# shellcheck disable=SC2046
cc -O2 -g -Wall -Wextra -Werror -o "$LOAD" bench/agent_load.c $(pkg-config --cflags --libs libcurl) \
    -pthread || die "cannot build $LOAD"

SRV_PID='' AG_PID=''
cleanup() {
    [ -n "$AG_PID" ] && kill -TERM "$AG_PID" 2> /dev/null && wait "$AG_PID" 2> /dev/null
    [ -n "$SRV_PID" ] && kill -TERM "$SRV_PID" 2> /dev/null && wait "$SRV_PID" 2> /dev/null
    rm -rf "$DIR/data" "$DIR/spool"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

PORT=$(free_port) || die "no free port"
rm -rf "$DIR/data" "$DIR/spool"
bin/sluice serve --data "$DIR/data" --listen "127.0.0.1:$PORT" > "$DIR/server.log" 2>&1 &
SRV_PID=$!
for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null 2>&1 && break
    sleep 0.05
done
curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null || die "the server did not start"
SOCK=$DIR/agent.sock
# shellcheck disable=SC2046
bin/sluice databus --listen "unix:$SOCK" --upstream "http://127.0.0.1:$PORT" \
    --spool "$DIR/spool" $([ -n "$STREAMS" ] && echo --streams "$STREAMS") > "$DIR/agent.log" 2>&1 &
AG_PID=$!
for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done
[ -S "$SOCK" ] || die "the agent did not start: $(cat "$DIR/agent.log")"

HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
RUN=0
# run MODE WRITERS [one]: prints events/s of one run (with "one", all writers
# share one set); the agent's CPU ticks of the run go to $DIR/ticks.
run() {
    local mode=$1 w=$2 one=${3:-} pids=() i t0 t1 rc=0 k0 set
    RUN=$((RUN + 1))
    k0=$(ticks "$AG_PID")
    t0=$(now)
    for i in $(seq "$w"); do
        set=$RUN-$i
        [ -n "$one" ] && set=$RUN
        if [ "$mode" = agent ]; then
            "$LOAD" agent "$SOCK" "a$set" "$N" > "$DIR/w$i.out" 2> "$DIR/w$i.err" &
        else
            "$LOAD" http "http://127.0.0.1:$PORT" "h$set" "$N" "$BATCH" > "$DIR/w$i.out" \
                2> "$DIR/w$i.err" &
        fi
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    t1=$(now)
    echo $(($(ticks "$AG_PID") - k0)) > "$DIR/ticks"
    [ "$rc" = 0 ] || die "a $mode writer failed: $(cat "$DIR"/w*.err | head -5)"
    echo "$w * $N / ($t1 - $t0)" | bc
}

best() {
    local b=0 r
    for _ in $(seq "$REPS"); do
        r=$(run "$1" "$2" "${3:-}") || exit 1
        if [ "$r" -gt "$b" ]; then
            b=$r
            cp "$DIR/ticks" "$DIR/best_ticks"
        fi
    done
    echo "$b"
}

printf '\nDatabus agent: %d events per writer, direct batches of %d, best of %d, %d CPUs, %s\n' \
    "$N" "$BATCH" "$REPS" "$(nproc)" "${STREAMS:-default} streams"
printf '%-8s %16s %16s %8s %-9s %s\n' "writers" "via agent ev/s" "direct ev/s" "ratio" "goal 0.9" \
    "agent CPU µs/ev"
for row in 1 8 "8 1set"; do
    w=${row%% *}
    one=
    [ "$row" != "$w" ] && one=one
    d=$(best http "$w" "$one") || exit 1
    a=$(best agent "$w" "$one") || exit 1
    us=$(echo "scale=2; $(cat "$DIR/best_ticks") * 1000000 / $HZ / ($w * $N)" | bc)
    ratio=$(echo "scale=2; $a / $d" | bc)
    met=$([ "$(echo "$ratio >= 0.9" | bc)" = 1 ] && echo met || echo "NOT met")
    printf '%-8s %16d %16d %8s %-9s %s\n' "$row" "$a" "$d" "$ratio" "$met" "$us"
    tsv_row "agent.w${row// /_}" "Databus agent (UNIX socket), $w writer(s)$([ -n "$one" ] && echo " sharing one set"), ack=durable" \
        ev/s "$a" "direct batched HTTP POSTs ($BATCH/POST)" "$d" "$ratio" ">= 0.90" \
        "$([ "$met" = met ] && echo yes || echo no)"
done
# Other work on the machine distorts the numbers: say how loaded it was.
printf 'load average at the end (1/5/15 min): %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
grep -q 'refused\|spooling' "$DIR/agent.log" && tail -3 "$DIR/agent.log" >&2
exit 0
