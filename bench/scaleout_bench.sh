#!/usr/bin/env bash
# bench/scaleout_bench.sh — Kafka-backed event sets and routers (the
# scale-out issue, docs/scale-out.md), on librdkafka's mock cluster
# (build/rel/tools/kafka_mock, 3 brokers, topics with replication 3) on this
# machine. Every row has a reference measured in the same run.
#
#  (a) HTTP ingest into a Kafka-backed set: one `sluice serve`, set "bench"
#      (backend = "kafka", PARTS partitions, ack = "durable", linger LINGER),
#      wrk with bench/http/post.lua: NDJSON, 100 events of ~300 B per POST,
#      16 connections, 2 threads, SECS seconds, closed loop. Reference: `kcat
#      -P` of the same records (same shape, keys, size; as many as sluice
#      stored, 20,000-300,000) to a topic of the same partitions on the same
#      cluster, with sluice's producer settings (acks=all,
#      enable.idempotence=true, partitioner=murmur2_random, linger.ms=LINGER).
#      Rows: events/s (goal >= 0.9x kcat) and CPU per event of each side
#      (user + system time of the sluice process or of kcat; the mock's own
#      CPU counted on neither).
#  (b) rule delivery over a Kafka-backed set with 1, 2 and 3 routers: for
#      each count R, a topic of its own, R routers started together with one
#      rule "deliver" (start = "beginning") writing to a target.file of each
#      router's own; once the set's group gave every partition to one of them
#      (GET /v1/rules), EVENTS records are produced into the topic with kcat
#      -P, and the run is timed from the start of that production to the
#      last delivered line.
#      Rows: delivered events/s and CPU per event per router (each router's
#      CPU over the window / the lines it wrote in it; the mean over routers),
#      against 1 router in the same run; the goal is a flat cost per event
#      (<= 1.25x of 1 router; events/s has no goal: on 2 cores more routers
#      share the same CPUs). Duplicates (lines beyond EVENTS) are printed.
#      Then takeover: router 3 of the 3-router run is SIGKILLed and the time
#      until routers 1 and 2 own every partition (GET /v1/rules) is measured,
#      against the group's session_timeout (SESSION).
#  (c) Kafka fetch bytes per router with 1 and 20 rules: one router, rules
#      over a set whose topic holds EVENTS records (rule 1 delivers to a
#      file, rules 2-20 match nothing, so only reading and matching grow),
#      until every rule has lag 0; the router's
#      sluice_kafka_fetched_bytes_total{set="bench"} from GET /metrics. Goal:
#      20 rules fetch <= 1.1x the bytes of 1 rule (one shared reader per
#      partition: one fetch per router whatever the number of rules).
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp),
# SLUICE_SCALEOUT_SECS (wrk seconds of (a), default 3), SLUICE_SCALEOUT_REPS
# (rounds of (a), sluice and kcat alternating, best of each; default 2),
# SLUICE_SCALEOUT_DELIVER_REPS (rounds of (b) over the router counts, the best
# of each count; default 1: about 25 s a round),
# SLUICE_SCALEOUT_EVENTS (records of (b) and (c), default 60000: the mock
# keeps about 5 MB per partition), SLUICE_SCALEOUT_PARTITIONS (default 6),
# SLUICE_SCALEOUT_ROUTERS (router counts of (b), default "1 2 3"; the first
# must be 1), SLUICE_SCALEOUT_SESSION (the groups' session_timeout, default
# "6s"), SLUICE_SCALEOUT_LINGER_MS (the sets' linger and kcat's linger.ms,
# default 2, sluice's default), SLUICE_SCALEOUT_ROWS (comma list of ingest,deliver,takeover,fetch;
# default all; takeover needs deliver with 3 routers).
#
# About 50-90 s on 2 cores. Exits 0 when it measured everything, goals met or
# not; 1 on any error (a server that did not start, an event not delivered,
# a tool missing). A missing sluice_kafka_fetched_bytes_total family is
# reported as "not measured", not an error.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

SECS=${SLUICE_SCALEOUT_SECS:-3}
PARTS=${SLUICE_SCALEOUT_PARTITIONS:-6}
ROUTERS=${SLUICE_SCALEOUT_ROUTERS:-1 2 3}
SESSION=${SLUICE_SCALEOUT_SESSION:-6s}
EVENTS=${SLUICE_SCALEOUT_EVENTS:-60000}
REPS=${SLUICE_SCALEOUT_REPS:-2}
DREPS=${SLUICE_SCALEOUT_DELIVER_REPS:-1}
ROWS=${SLUICE_SCALEOUT_ROWS:-ingest,deliver,takeover,fetch}
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
MOCK=build/rel/tools/kafka_mock
CONNS=16
THREADS=2
BATCH=100
EVENT_BYTES=300
LINGER_MS=${SLUICE_SCALEOUT_LINGER_MS:-2} # the set's linger (sluice's default) and kcat's linger.ms
FETCH_RULES=20
INGEST_GOAL=0.9
CPU_GOAL=1.25
FETCH_GOAL=1.1
TAKEOVER_GOAL=1.5 # takeover / session_timeout

die() {
    echo "scaleout_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }
has_row() { case ",$ROWS," in *",$1,"*) return 0 ;; esac; return 1; }

case "$SECS" in '' | *[!0-9]*) die "SLUICE_SCALEOUT_SECS must be a whole number of seconds" ;; esac
[ "$SECS" -ge 1 ] || die "SLUICE_SCALEOUT_SECS must be at least 1"
case "$PARTS" in '' | *[!0-9]*) die "SLUICE_SCALEOUT_PARTITIONS must be a number" ;; esac
case "$EVENTS" in '' | *[!0-9]*) die "SLUICE_SCALEOUT_EVENTS must be a number" ;; esac
[ "$EVENTS" -ge 1000 ] || die "SLUICE_SCALEOUT_EVENTS must be at least 1000"
case "$REPS" in [1-9]) ;; *) die "SLUICE_SCALEOUT_REPS must be 1-9" ;; esac
case "$DREPS" in [1-9]) ;; *) die "SLUICE_SCALEOUT_DELIVER_REPS must be 1-9" ;; esac
case "$LINGER_MS" in '' | *[!0-9]*) die "SLUICE_SCALEOUT_LINGER_MS must be a whole number of ms" ;; esac
[ "$PARTS" -ge 1 ] && [ "$PARTS" -le 64 ] || die "SLUICE_SCALEOUT_PARTITIONS must be 1-64"
first=
for n in $ROUTERS; do
    case "$n" in [1-9]) ;; *) die "SLUICE_SCALEOUT_ROUTERS: '$n' is not 1-9" ;; esac
    [ -n "$first" ] || first=$n
done
[ "$first" = 1 ] || die "SLUICE_SCALEOUT_ROUTERS must start with 1 (the reference)"
SESSION_MS=$(python3 -c 'import re, sys
m = re.fullmatch(r"(\d+)(ms|s)", sys.argv[1])
print(int(m.group(1)) * (1 if m.group(2) == "ms" else 1000) if m else "")' "$SESSION")
[ -n "$SESSION_MS" ] || die "SLUICE_SCALEOUT_SESSION must be like 10s or 6000ms"
for r in ${ROWS//,/ }; do
    case "$r" in ingest | deliver | takeover | fetch) ;; *) die "unknown row '$r' in SLUICE_SCALEOUT_ROWS" ;; esac
done
if has_row takeover && { ! has_row deliver || ! case " $ROUTERS " in *" 3 "*) true ;; *) false ;; esac; }; then
    die "the takeover row needs the deliver row with 3 routers"
fi
command -v kcat >/dev/null 2>&1 || die "kcat is missing (scripts/deps.sh installs it)"
command -v wrk >/dev/null 2>&1 || die "wrk is missing (scripts/deps.sh bench installs it)"
command -v curl >/dev/null 2>&1 || die "curl is missing"
command -v python3 >/dev/null 2>&1 || die "python3 is missing"
. bench/tsv.sh
make -s bin/sluice "$MOCK" || die "make failed"

bench_workdir scaleout_bench $((512 * 1024))
PIDS=()   # routers and the receiver side: killed at exit
MOCK_PID=""
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    if [ -n "$MOCK_PID" ]; then
        exec 3>&- 2>/dev/null
        kill "$MOCK_PID" 2>/dev/null
        wait "$MOCK_PID" 2>/dev/null
    fi
    bench_cleanup
}
trap cleanup EXIT

HZ=$(getconf CLK_TCK)
now() { date +%s.%N; }
cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# CPU nanoseconds a process's live threads used so far (/proc/PID/task/*/schedstat):
# the (b) windows are too short for clock ticks (10 ms); threads that ended are not
# counted (a router's threads live as long as it does)
cpu_ns_of() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
calc() { python3 -c "import sys; print($1)"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a <= b)}'; }

# ---- the cluster ---------------------------------------------------------------------

mkfifo "$TMP/mock.in" || die "mkfifo"
"$MOCK" --commands --brokers 3 <"$TMP/mock.in" >"$TMP/mock.out" 2>"$TMP/mock.err" &
MOCK_PID=$!
exec 3>"$TMP/mock.in" # keeps the mock's stdin open
for _ in $(seq 100); do grep -q '^bootstrap ' "$TMP/mock.out" 2>/dev/null && break; sleep 0.05; done
BOOT=$(sed -n 's/^bootstrap //p' "$TMP/mock.out")
[ -n "$BOOT" ] || die "kafka_mock did not start: $(cat "$TMP/mock.err")"

# mock_ask COMMAND...: one command; prints its answer ("ok" or "error: …").
mock_ask() {
    local before
    before=$(grep -vc '^bootstrap ' "$TMP/mock.out")
    echo "$*" >&3
    for _ in $(seq 600); do # 30 s: a loaded machine
        if [ "$(grep -vc '^bootstrap ' "$TMP/mock.out")" -gt "$before" ]; then
            grep -v '^bootstrap ' "$TMP/mock.out" | tail -n 1
            return 0
        fi
        sleep 0.05
    done
    echo "no answer in 30 s ($(tail -n 2 "$TMP/mock.err" 2>/dev/null | tr '\n' ' '))"
}
mock_cmd() {
    local answer
    answer=$(mock_ask "$@")
    [ "$answer" = ok ] || die "kafka_mock: '$*': ${answer:-no answer}"
}
# topic NAME PARTITIONS: created with replication 3 (a mock older than the
# scale-out issue takes no replication: then one replica, with a note)
MOCK_REPL=unknown
topic() {
    if [ "$MOCK_REPL" = unknown ]; then
        if [ "$(mock_ask topic "$1" "$2" 3)" = ok ]; then
            MOCK_REPL=3
            return 0
        fi
        MOCK_REPL=
        note "scaleout_bench: this kafka_mock takes no replication: topics have 1 replica"
    fi
    mock_cmd topic "$1" "$2" $MOCK_REPL
}

# records FILE N TAG: N records KEY|JSON in the shape of post.lua's events
# (~EVENT_BYTES, keys k0..k1023, ids TAG-…), for kcat -P -K '|'
records() {
    python3 - "$2" "$BATCH" "$EVENT_BYTES" "$3" >"$1" <<'PY' || die "cannot write the records"
import sys, time
n, batch, size, tag = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
head = '{"specversion":"1.0","id":"'
out = []
for r in range(n // batch + 1):
    v = r % 8 + 1
    for i in range(1, batch + 1):
        if len(out) == n:
            break
        key = (v * 131 + i * 37) % 1024
        tail = ('-%d","source":"/bench/http","type":"bench.http.event","time":"%s","partitionkey":"k%d",'
                '"datacontenttype":"application/json","data":{"seq":%d,"note":"' % (i, now, key, i))
        pad = max(1, size - (len(head) + 16 + len(tail) + 3))
        out.append("k%d|%s%s-0-%d%s%s\"}}" % (key, head, tag, r, tail, "x" * pad))
sys.stdout.write("\n".join(out) + "\n")
PY
}
# produce TOPIC FILE: kcat -P with sluice's producer settings
produce() {
    kcat -P -q -b "$BOOT" -t "$1" -K '|' -X enable.idempotence=true -X acks=all \
        -X partitioner=murmur2_random -X linger.ms=$LINGER_MS -l "$2" >/dev/null 2>&1
}

# config FILE PREFIX RULES DIR: a router's config: server.kafka with topic and group
# prefix PREFIX (so every run has its own group PREFIX.set.bench and cursor topic
# PREFIX.cursors), the set "bench" on topic PREFIX.bench, RULES rules (rule 1 to
# DIR/out.ndjson, the others matching nothing; 0: none).
config() {
    local file=$1 prefix=$2 rules=$3 dir=$4 i
    {
        printf 'server { kafka = { brokers = "%s", topic_prefix = "%s.", group_prefix = "%s.set.",\n' "$BOOT" "$prefix" "$prefix"
        printf '  client_id = "bench-%s", session_timeout = "%s" } }\n' "$prefix" "$SESSION"
        printf 'set "bench" { backend = "kafka", partitions = %d, replication = 3,\n' "$PARTS"
        printf '  ack = "durable", linger = "%dms" }\n' "$LINGER_MS"
        [ "$rules" -ge 1 ] &&
        printf 'rule "deliver" { set = "bench", start = "beginning", target = target.file { path = "%s/out.ndjson" } }\n' "$dir"
        for i in $(seq 2 "$rules"); do
            printf 'rule "idle%d" { set = "bench", start = "beginning", match = { type = { "never-%d" } },\n' "$i" "$i"
            printf '  target = target.file { path = "%s/idle%d.ndjson" } }\n' "$dir" "$i"
        done
    } >"$file"
}

# launch_router CONFIG DIR: starts one, does not wait; sets RPORT and RPID (added to PIDS)
launch_router() {
    local cfg=$1 dir=$2
    mkdir -p "$dir"
    RPORT=$(free_port)
    bin/sluice serve -c "$cfg" --data "$dir/data" --listen "127.0.0.1:$RPORT" >"$dir/server.log" 2>&1 &
    RPID=$!
    PIDS+=("$RPID")
}
# wait_router NAME PORT PID DIR: until /healthz answers (10 s)
wait_router() {
    local name=$1 port=$2 pid=$3 dir=$4
    for _ in $(seq 200); do
        curl -sf --max-time 1 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    tail -n 20 "$dir/server.log" >&2
    die "$name did not start (log above)"
}
# start_router NAME CONFIG DIR: both
start_router() {
    launch_router "$2" "$3"
    wait_router "$1" "$RPORT" "$RPID" "$3"
}
stop_router() { # stop_router PID: SIGTERM, 10 s, then SIGKILL
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
lines_of() { cat "$@" 2>/dev/null | wc -l; }
# owned_all PORT...: true when the routers' rule "deliver" own every partition once
owned_all() {
    local p out=""
    for p in "$@"; do
        out="$out$(curl -sf --max-time 2 "http://127.0.0.1:$p/v1/rules" || echo '{"rules":[]}')"$'\n'
    done
    python3 -c '
import json, sys
parts = []
for line in sys.stdin:
    if line.strip():
        for r in json.loads(line).get("rules", []):
            if r.get("name") == "deliver":
                parts += [p["partition"] for p in r.get("partitions", [])]
sys.exit(0 if sorted(parts) == list(range(int(sys.argv[1]))) else 1)' "$PARTS" <<<"$out"
}

SUMMARY=()
LAST=""   # key=value pairs of the last line
MISSED=0
row() { # row LABEL FIGURE REF RATIO GOAL MET (for the table printed at the end)
    SUMMARY+=("$(printf '%-52s %14s %14s %7s %8s %4s' "$1" "$2" "$3" "$4" "$5" "$6")")
    [ "$6" = no ] && MISSED=$((MISSED + 1))
    return 0
}

# ---- (a) HTTP ingest vs kcat -P ------------------------------------------------------------

if has_row ingest; then
    note "scaleout_bench: (a) HTTP ingest into a Kafka-backed set, $CONNS connections, $SECS s"
    topic ing.bench "$PARTS"
    topic ing.cursors 1 # in case the router opens its cursor topic without rules
    topic ref.bench "$PARTS"
    d=$TMP/ingest
    mkdir -p "$d"
    config "$d/sluice.lua" ing 0 "$d" # no rule: only the write path is measured
    start_router "the ingest router" "$d/sluice.lua" "$d"
    ING_PID=$RPID
    ING_PORT=$RPORT
    # a first request makes the producer connect before the clock starts
    printf '{"specversion":"1.0","id":"warm","source":"/bench","type":"warm","partitionkey":"w"}\n' |
        curl -sf --max-time 30 -H 'Content-Type: application/x-ndjson' --data-binary @- \
            "http://127.0.0.1:$ING_PORT/v1/sets/bench/events" >/dev/null ||
        die "the warm-up publish failed: $(tail -n 5 "$d/server.log")"
    field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$res"; }
    # REPS rounds, sluice and kcat alternating (the machine's load moves both); best of each
    ING_EPS=0
    REF_EPS=0
    TIMEFORMAT='%R %U %S'
    for rep in $(seq "$REPS"); do
        c0=$(cpu_of "$ING_PID")
        wrk -t"$THREADS" -c"$CONNS" -d"${SECS}s" -s bench/http/post.lua "http://127.0.0.1:$ING_PORT" \
            -- ndjson bench "$BATCH" "$EVENT_BYTES" 0 "so$rep" "$THREADS" >"$d/wrk.out" 2>&1 ||
            die "wrk failed: $(tail -n 5 "$d/wrk.out")"
        c1=$(cpu_of "$ING_PID")
        res=$(grep '^@@result ' "$d/wrk.out") || die "wrk printed no result: $(tail -n 5 "$d/wrk.out")"
        accepted=$(field accepted)
        dur_us=$(field duration_us)
        non200=$(field non200)
        [ "${accepted:-0}" -gt 0 ] || die "no event accepted: $(cat "$d/wrk.out")"
        [ "${non200:-0}" -eq 0 ] || note "  $non200 answers were not 200: $(grep '^@@' "$d/wrk.out" | tr '\n' ' ')"
        [ "$(field failed_entries)" = 0 ] || note "  $(field failed_entries) entries failed"
        eps=$(calc "$accepted / ($dur_us / 1e6)")
        cpu=$(calc "($c1 - $c0) / $HZ * 1e6 / $accepted")
        note "  sluice run $rep: $accepted events in $(calc "$dur_us / 1e6") s: $(printf '%.0f' "$eps") ev/s, $(printf '%.2f' "$cpu") CPU us/event"
        if le "$ING_EPS" "$eps"; then ING_EPS=$eps; ING_CPU=$cpu; fi

        # the same records for kcat, as many as sluice stored
        n=$accepted
        [ "$n" -gt 300000 ] && n=300000
        [ "$n" -lt 20000 ] && n=20000
        records "$TMP/ref.txt" "$n" "ref$rep"
        { time produce ref.bench "$TMP/ref.txt"; } 2>"$TMP/kcat.time" || die "kcat -P failed"
        read -r kreal kuser ksys <"$TMP/kcat.time"
        eps=$(calc "$n / $kreal")
        cpu=$(calc "($kuser + $ksys) * 1e6 / $n")
        note "  kcat -P run $rep: $n records in $kreal s: $(printf '%.0f' "$eps") ev/s, $(printf '%.2f' "$cpu") CPU us/event"
        if le "$REF_EPS" "$eps"; then REF_EPS=$eps; REF_CPU=$cpu; fi
    done
    stop_router "$ING_PID"
    r=$(ratio "$ING_EPS" "$REF_EPS")
    met=no
    awk -v a="$r" -v g="$INGEST_GOAL" 'BEGIN {exit !(a >= g)}' && met=yes
    tsv_row scaleout.ingest "HTTP ingest into a Kafka-backed set, NDJSON $BATCH/POST, ack=durable, $CONNS connections" \
        ev/s "$ING_EPS" "kcat -P, same records and cluster" "$REF_EPS" "$r" ">= $INGEST_GOAL" "$met"
    tsv_row scaleout.ingest_cpu "HTTP ingest into a Kafka-backed set: CPU per event (lower is better)" \
        "µs/ev" "$ING_CPU" "kcat -P" "$REF_CPU" "$(ratio "$ING_CPU" "$REF_CPU")" - -
    LAST="$LAST ingest_eps=$(printf '%.0f' "$ING_EPS") ingest_ratio=$r ingest_cpu_us=$(printf '%.2f' "$ING_CPU") kcat_cpu_us=$(printf '%.2f' "$REF_CPU")"
    row "(a) ingest, ev/s (kcat -P)" "$(printf '%.0f' "$ING_EPS")" "$(printf '%.0f' "$REF_EPS")" "$r" ">= $INGEST_GOAL" "$met"
    row "(a) ingest, CPU us/ev (kcat -P)" "$(printf '%.2f' "$ING_CPU")" "$(printf '%.2f' "$REF_CPU")" "$(ratio "$ING_CPU" "$REF_CPU")" - -
fi

# the records of (b) and (c)
if has_row deliver || has_row fetch; then
    records "$TMP/events.txt" "$EVENTS" ev
fi

# ---- (b) rule delivery with 1, 2, 3 routers; takeover ---------------------------------------

# deliver_run R TAG: R routers on a fresh topic TAG.bench and group TAG.set.bench; sets D_EPS, D_CPU (mean
# per-router CPU us/event), D_MAX (the highest router's), D_DUPS, D_PORTS,
# D_PIDS (left running)
deliver_run() {
    local n=$1 tag=$2 i dir t0="" t1="" got c0=() c1=() l0=() l1=() deadline kpid
    D_PORTS=()
    D_PIDS=()
    topic "$tag.bench" "$PARTS"
    topic "$tag.cursors" 1
    # all at once, so that they join the group together
    for i in $(seq "$n"); do
        dir=$TMP/$tag/r$i
        mkdir -p "$dir"
        config "$dir/sluice.lua" "$tag" 1 "$dir"
        launch_router "$dir/sluice.lua" "$dir"
        D_PORTS+=("$RPORT")
        D_PIDS+=("$RPID")
    done
    for i in $(seq "$n"); do
        wait_router "router $i of $n" "${D_PORTS[i - 1]}" "${D_PIDS[i - 1]}" "$TMP/$tag/r$i"
    done
    local tj=$SECONDS
    until owned_all "${D_PORTS[@]}"; do
        [ $((SECONDS - tj)) -lt 60 ] || die "the group $tag.set.bench did not give every partition to one of the $n router(s) in 60 s"
        sleep 0.2
    done
    note "  group $tag.set.bench: partitions split after $((SECONDS - tj)) s"
    # the clock starts with the production: the topic was empty, so every line
    # a router writes from now on is in the window (delivery overlaps kcat's
    # production, which is several times faster)
    for i in $(seq 0 $((n - 1))); do
        c0[i]=$(cpu_ns_of "${D_PIDS[i]}")
        l0[i]=0
    done
    t0=$(now)
    n0=0
    produce "$tag.bench" "$TMP/events.txt" &
    kpid=$!
    deadline=$(calc "$(now) + 90")
    while :; do
        got=$(lines_of "$TMP/$tag"/r*/out.ndjson)
        if [ "$got" -ge "$EVENTS" ]; then
            t1=$(now)
            for i in $(seq 0 $((n - 1))); do
                c1[i]=$(cpu_ns_of "${D_PIDS[i]}")
                l1[i]=$(lines_of "$TMP/$tag/r$((i + 1))/out.ndjson")
            done
            break
        fi
        awk -v a="$(now)" -v b="$deadline" 'BEGIN {exit !(a > b)}' && break
        for i in $(seq 0 $((n - 1))); do kill -0 "${D_PIDS[i]}" 2>/dev/null || die "router $((i + 1)) of $n died: $(tail -n 10 "$TMP/$tag/r$((i + 1))/server.log")"; done
        sleep 0.02
    done
    wait "$kpid" || die "kcat -P into $tag.bench failed"
    [ -n "$t1" ] || die "$n router(s) delivered $got of $EVENTS events in 90 s: $(tail -n 10 "$TMP/$tag/r1/server.log")"
    local secs sum=0 max=0 per counted=0
    secs=$(calc "$t1 - $t0")
    D_EPS=$(calc "($EVENTS - $n0) / $secs")
    for i in $(seq 0 $((n - 1))); do
        # the events it delivered inside the window, with the CPU it used there
        got=$((l1[i] - l0[i]))
        if [ "$got" -le 0 ]; then
            note "  router $((i + 1)) of $n delivered nothing while timed (left out of the mean)"
            continue
        fi
        per=$(calc "(${c1[i]} - ${c0[i]}) / 1e3 / $got")
        note "  router $((i + 1)) of $n: $got events, $(printf '%.2f' "$per") CPU us/event"
        sum=$(calc "$sum + $per")
        max=$(calc "max($max, $per)")
        counted=$((counted + 1))
    done
    [ "$counted" -gt 0 ] || die "no router of $n delivered anything while timed"
    D_CPU=$(calc "$sum / $counted")
    D_MAX=$max
    sleep 0.5
    D_DUPS=$(($(lines_of "$TMP/$tag"/r*/out.ndjson) - EVENTS))
    note "  $n router(s): $(printf '%.0f' "$D_EPS") delivered ev/s over $(printf '%.2f' "$secs") s, mean $(printf '%.2f' "$D_CPU") CPU us/event per router, $D_DUPS duplicates"
}

if has_row deliver; then
    declare -A DEPS DCPU DMAX
    # DREPS rounds over the router counts; per count the lowest CPU per event
    # and the highest rate (the machine's load moves both between runs)
    for rep in $(seq "$DREPS"); do
        for n in $ROUTERS; do
            note "scaleout_bench: (b) rule delivery with $n router(s), $EVENTS events, round $rep"
            deliver_run "$n" "d$n-$rep"
            if [ -z "${DCPU[$n]:-}" ] || le "$D_CPU" "${DCPU[$n]}"; then
                DCPU[$n]=$D_CPU
                DMAX[$n]=$D_MAX
            fi
            if [ -z "${DEPS[$n]:-}" ] || le "${DEPS[$n]}" "$D_EPS"; then DEPS[$n]=$D_EPS; fi
            if [ "$n" = 3 ] && [ "$rep" = "$DREPS" ] && has_row takeover; then
                note "scaleout_bench: takeover: SIGKILL of router 3, session_timeout $SESSION"
                kill -KILL "${D_PIDS[2]}"
                wait "${D_PIDS[2]}" 2>/dev/null
                tk0=$(now)
                TK=""
                while awk -v a="$(now)" -v b="$tk0" -v l="$((SESSION_MS * 6 / 1000 + 20))" 'BEGIN {exit !(a - b < l)}'; do
                    if owned_all "${D_PORTS[0]}" "${D_PORTS[1]}"; then TK=$(calc "$(now) - $tk0"); break; fi
                    sleep 0.1
                done
                [ -n "$TK" ] || die "routers 1 and 2 did not take router 3's partitions over"
                note "  takeover: $(printf '%.2f' "$TK") s (session_timeout $SESSION)"
            fi
            for p in "${D_PIDS[@]}"; do stop_router "$p"; done
        done
    done
    for n in $ROUTERS; do
        rc=$(ratio "${DCPU[$n]}" "${DCPU[1]}")
        re=$(ratio "${DEPS[$n]}" "${DEPS[1]}")
        met=no
        le "$rc" "$CPU_GOAL" && met=yes
        [ "$n" = 1 ] && met=-
        goal=$([ "$n" = 1 ] && echo - || echo "<= $CPU_GOAL")
        tsv_row "scaleout.deliver_cpu_$n" "rule delivery over a Kafka-backed set, $n router(s): CPU per event per router, mean (highest $(printf '%.2f' "${DMAX[$n]}"))" \
            "µs/ev" "${DCPU[$n]}" "1 router, same run" "${DCPU[1]}" "$rc" "$goal" "$met"
        tsv_row "scaleout.deliver_eps_$n" "rule delivery over a Kafka-backed set, $n router(s) on $(nproc) cores: delivered events/s" \
            ev/s "${DEPS[$n]}" "1 router, same run" "${DEPS[1]}" "$re" - -
        LAST="$LAST deliver_eps_$n=$(printf '%.0f' "${DEPS[$n]}") deliver_cpu_us_$n=$(printf '%.2f' "${DCPU[$n]}")"
        row "(b) $n router(s), CPU us/ev per router (1 router)" "$(printf '%.2f' "${DCPU[$n]}")" "$(printf '%.2f' "${DCPU[1]}")" "$rc" "$goal" "$met"
        row "(b) $n router(s), delivered ev/s (1 router)" "$(printf '%.0f' "${DEPS[$n]}")" "$(printf '%.0f' "${DEPS[1]}")" "$re" - -
    done
    if has_row takeover; then
        sess_s=$(calc "$SESSION_MS / 1000")
        r=$(ratio "$TK" "$sess_s")
        met=no
        le "$r" "$TAKEOVER_GOAL" && met=yes
        tsv_row scaleout.takeover "takeover after a SIGKILL of 1 of 3 routers: until the 2 others own every partition" \
            s "$TK" "session_timeout" "$sess_s" "$r" "<= $TAKEOVER_GOAL" "$met"
        LAST="$LAST takeover_s=$(printf '%.2f' "$TK")"
        row "(b) takeover after SIGKILL, s (session_timeout)" "$(printf '%.2f' "$TK")" "$sess_s" "$r" "<= $TAKEOVER_GOAL" "$met"
    fi
fi

# ---- (c) fetch bytes with 1 and 20 rules ----------------------------------------------------

# fetch_run RULES: one router, RULES rules, a fresh topic holding EVENTS records,
# until every rule has lag 0; sets FB (fetched bytes, "" when the family is missing)
fetch_run() {
    local n=$1 dir=$TMP/f$1 deadline
    topic "f$n.bench" "$PARTS"
    topic "f$n.cursors" 1
    produce "f$n.bench" "$TMP/events.txt" || die "kcat -P into f$n.bench failed"
    mkdir -p "$dir"
    config "$dir/sluice.lua" "f$n" "$n" "$dir"
    start_router "the fetch router ($n rules)" "$dir/sluice.lua" "$dir"
    deadline=$(calc "$(now) + 90")
    while :; do
        if [ "$(lines_of "$dir/out.ndjson")" -ge "$EVENTS" ] &&
            curl -sf --max-time 2 "http://127.0.0.1:$RPORT/v1/rules" | python3 -c '
import json, sys
rules = json.load(sys.stdin)["rules"]
sys.exit(0 if rules and all(r.get("lag", 1) == 0 and r.get("partitions") for r in rules) else 1)'; then
            break
        fi
        awk -v a="$(now)" -v b="$deadline" 'BEGIN {exit !(a > b)}' &&
            die "$n rules: not caught up in 90 s ($(lines_of "$dir/out.ndjson") of $EVENTS delivered)"
        kill -0 "$RPID" 2>/dev/null || die "the fetch router died: $(tail -n 10 "$dir/server.log")"
        sleep 0.1
    done
    FB=$(curl -sf --max-time 5 "http://127.0.0.1:$RPORT/metrics" |
        awk '/^sluice_kafka_fetched_bytes_total\{/ && /set="bench"/ {s += $NF; f = 1} END {if (f) printf "%.0f", s}')
    if [ -n "$FB" ]; then
        note "  $n rule(s): $FB bytes fetched ($(calc "round($FB / $EVENTS)") per event)"
    else
        note "  $n rule(s): no sluice_kafka_fetched_bytes_total with set=\"bench\" in /metrics"
    fi
    stop_router "$RPID"
}

if has_row fetch; then
    note "scaleout_bench: (c) Kafka fetch bytes of one router, 1 and $FETCH_RULES rules, $EVENTS events"
    fetch_run 1
    FB1=$FB
    fetch_run "$FETCH_RULES"
    FBN=$FB
    if [ -n "$FB1" ] && [ -n "$FBN" ]; then
        r=$(ratio "$FBN" "$FB1")
        met=no
        le "$r" "$FETCH_GOAL" && met=yes
        tsv_row scaleout.fetch_1 "Kafka fetch bytes per router, 1 rule, $EVENTS events" MiB "$(calc "$FB1 / 1048576")" - - - - -
        tsv_row "scaleout.fetch_$FETCH_RULES" "Kafka fetch bytes per router, $FETCH_RULES rules, $EVENTS events" MiB \
            "$(calc "$FBN / 1048576")" "1 rule, same run" "$(calc "$FB1 / 1048576")" "$r" "<= $FETCH_GOAL" "$met"
        LAST="$LAST fetch_bytes_1=$FB1 fetch_bytes_$FETCH_RULES=$FBN fetch_ratio=$r"
        row "(c) fetch MiB, $FETCH_RULES rules (1 rule)" "$(printf '%.1f' "$(calc "$FBN / 1048576")")" "$(printf '%.1f' "$(calc "$FB1 / 1048576")")" "$r" "<= $FETCH_GOAL" "$met"
    else
        tsv_row "scaleout.fetch_$FETCH_RULES" "Kafka fetch bytes per router, 1 and $FETCH_RULES rules: not measured (no sluice_kafka_fetched_bytes_total{set} in /metrics)" \
            MiB - - - - "<= $FETCH_GOAL" -
        LAST="$LAST fetch_bytes=not_measured"
        row "(c) fetch bytes: not measured (no metric)" - - - "<= $FETCH_GOAL" -
    fi
fi

# ---- the table -----------------------------------------------------------------------------

echo
echo "scale-out: Kafka-backed set of $PARTS partitions on the mock cluster (3 brokers, replication 3), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-52s %14s %14s %7s %8s %4s\n' row sluice reference ratio goal met
for l in "${SUMMARY[@]}"; do echo "$l"; done
echo "(CPU us/ev: user + system time of the process per event; the mock broker's CPU is counted on"
echo " neither side. (b) is timed from the start of kcat's production into the empty topic to the"
echo " last delivered line; per router: its CPU over that window / the events it delivered. On"
echo " $(nproc) cores, more routers share the same CPUs; (b)'s CPU comes from schedstat, in ns.)"
echo "scaleout_bench:${LAST} goals_missed=$MISSED"
exit 0
