#!/usr/bin/env bash
# bench/lanes_bench.sh — the cost of lane routing (issue 7 §5): the same load
# through `sluice serve` with 0 lanes declared and with 50 lanes declared,
# each with an override on the rule; then 10% of the traffic in those 50
# lanes, once as whole POSTs (X-Sluice-Lane) and once as single events
# interleaved in every POST (the lane attribute). Load: NDJSON batches of
# 1000 events of ~300 B posted by one `curl --parallel` (4 transfers at a
# time) into a set of 4 partitions (ack = "buffer"), one rule delivering to
# target.file (each lane override to a file of its own). The figure is
# events/s from the first POST until GET /metrics shows every accepted event
# delivered (ingest + routing + delivery). Goal: declaring 50 lanes costs
# < 10% (row 2 / row 1 >= 0.90). How to read the table: bench/README.md.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp), SLUICE_LANES_EVENTS
# (events per run, a multiple of 1000, default 1000000), SLUICE_LANES_REPS
# (runs per row, 1-9, default 3), SLUICE_LANES_N (lanes declared, default 50),
# SLUICE_LANES_PAR (POSTs at a time, default 4), SLUICE_LANES_ROWS (comma list
# of zero,declared,requests,events; default all).
#
# Exits 0 when it measured everything, goal met or not; 1 on any error.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

EVENTS=${SLUICE_LANES_EVENTS:-1000000}
REPS=${SLUICE_LANES_REPS:-3}
NLANES=${SLUICE_LANES_N:-50}
PAR=${SLUICE_LANES_PAR:-4}
ROWS=${SLUICE_LANES_ROWS:-zero,declared,requests,events}
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
BATCH=1000
EVENT_BYTES=300
PARTITIONS=4
EVERY=10     # one POST in EVERY (row 3), one event in EVERY (row 4) is a lane's
TIMEOUT_S=60 # one run gives up after this long
GOAL=0.90

die() {
    echo "lanes_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }
has_row() { case ",$ROWS," in *",$1,"*) return 0 ;; esac; return 1; }

case "$EVENTS" in '' | *[!0-9]*) die "SLUICE_LANES_EVENTS must be a whole number" ;; esac
[ "$EVENTS" -ge "$BATCH" ] && [ $((EVENTS % BATCH)) -eq 0 ] ||
    die "SLUICE_LANES_EVENTS must be a multiple of $BATCH"
case "$REPS" in [1-9]) ;; *) die "SLUICE_LANES_REPS must be 1-9" ;; esac
case "$NLANES" in '' | *[!0-9]*) die "SLUICE_LANES_N must be a whole number" ;; esac
[ "$NLANES" -ge 1 ] && [ "$NLANES" -le 1000 ] || die "SLUICE_LANES_N must be 1-1000"
case "$PAR" in [1-9] | [1-9][0-9]) ;; *) die "SLUICE_LANES_PAR must be 1-99" ;; esac
for r in ${ROWS//,/ }; do
    case "$r" in zero | declared | requests | events) ;; *) die "unknown row '$r' in SLUICE_LANES_ROWS" ;; esac
done
has_row zero || die "SLUICE_LANES_ROWS needs the zero row (the reference)"
command -v curl >/dev/null || die "curl is needed"
command -v python3 >/dev/null || die "python3 is needed"
. bench/tsv.sh
make -s bin/sluice || die "make bin/sluice failed"

bench_workdir lanes_bench $((EVENTS * EVENT_BYTES * 3 / 1024)) # the log, the output files, slack

# ---- the load: two request bodies, posted EVENTS / BATCH times --------------------

# body FILE LANE_EVERY: BATCH events of about EVENT_BYTES; with LANE_EVERY > 0
# every LANE_EVERY-th event has a "lane" attribute, the lanes taken in turn.
body() {
    awk -v n="$BATCH" -v every="$2" -v lanes="$NLANES" -v bytes="$EVENT_BYTES" 'BEGIN {
        pad = ""
        for (i = 0; i < bytes - 131; i++) pad = pad "x"
        l = 0
        for (i = 0; i < n; i++) {
            lane = ""
            if (every > 0 && i % every == every - 1) {
                lane = sprintf(",\"lane\":\"lane-%02d\"", l % lanes)
                l++
            }
            printf "{\"specversion\":\"1.0\",\"id\":\"ev-%d\",\"source\":\"/bench/lanes\"," \
                   "\"type\":\"bench.lanes\",\"partitionkey\":\"k%d\"%s,\"data\":{\"seq\":%d," \
                   "\"note\":\"%s\"}}\n", i, i % 1024, lane, i, pad
        }
    }' >"$1" || die "cannot write $1"
}
body "$TMP/base.ndjson" 0
body "$TMP/mixed.ndjson" "$EVERY"
[ "$(grep -c '"lane"' "$TMP/mixed.ndjson")" -eq $((BATCH / EVERY)) ] || die "bad mixed body"
BODY_BYTES=$(wc -c <"$TMP/base.ndjson")

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# config FILE PORT DATA NLANES: the set, the rule and NLANES lanes, each with
# an override sending its events to a file of its own.
config() {
    local f=$1 port=$2 data=$3 n=$4 i
    {
        echo "server { listen = \"127.0.0.1:$port\", data_dir = \"$data\" }"
        echo "set \"in\" { partitions = $PARTITIONS, ack = \"buffer\" }"
        for ((i = 0; i < n; i++)); do printf 'lane "lane-%02d" { env = "boe" }\n' "$i"; done
        echo "rule \"r\" {"
        echo "  set = \"in\","
        echo "  target = target.file { path = \"$data-out/base.ndjson\" },"
        if [ "$n" -gt 0 ]; then
            echo "  lanes = {"
            for ((i = 0; i < n; i++)); do
                printf '    ["lane-%02d"] = { target = target.file { path = "%s-out/lane-%02d.ndjson" } },\n' \
                    "$i" "$data" "$i"
            done
            echo "  },"
        fi
        echo "}"
    } >"$f"
}

# The driver of one run: writes a curl config with one operation per POST
# (every EVERY-th with an X-Sluice-Lane header when asked), starts the loader
# (one curl --parallel) at t0, polls GET /metrics every 20 ms on one
# keep-alive connection, and stops the clock when the rule's delivered
# counters (base run and lane runs) add up to the accepted events. Prints
# "EVENTS_PER_S ACCEPTED NON200 SECONDS POSTING_SECONDS".
cat >"$TMP/run.py" <<'PYEOF'
import http.client, subprocess, sys, time
port, body, reqs, batch, par, timeout, cfg, lanes, every = sys.argv[1:10]
reqs, batch, par, lanes, every = int(reqs), int(batch), int(par), int(lanes), int(every)
timeout = float(timeout)
with open(cfg, "w") as f:
    for i in range(reqs):
        f.write('url = "http://127.0.0.1:%s/v1/sets/in/events"\n' % port)
        f.write('output = "/dev/null"\nrequest = "POST"\n')
        f.write('header = "Content-Type: application/x-ndjson"\n')
        f.write('data-binary = "@%s"\nwrite-out = "%%{http_code}\\n"\n' % body)
        if every and i % every == every - 1:
            f.write('header = "X-Sluice-Lane: lane-%02d"\n' % ((i // every) % lanes))
        if i + 1 < reqs:
            f.write("next\n")
conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
def delivered():
    conn.request("GET", "/metrics")
    n = 0
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith('sluice_rule_delivered_total{rule="r"'):
            n += int(float(line.rsplit(" ", 1)[1]))
    return n
d0 = delivered()
t0 = time.monotonic()
loader = subprocess.Popen(["curl", "-s", "--no-progress-meter", "--parallel", "--parallel-max",
                           str(par), "-K", cfg], stdout=subprocess.PIPE, text=True)
out, accepted, t_post = None, None, None
while True:
    if out is None and loader.poll() is not None:
        out = loader.stdout.read()
        t_post = time.monotonic() - t0
        codes = out.split()
        if loader.returncode != 0 or len(codes) != reqs:
            sys.exit("curl exited %d with %d answers of %d" % (loader.returncode, len(codes), reqs))
        ok = sum(1 for c in codes if c == "200")
        accepted = ok * batch
        non200 = reqs - ok
    n = delivered() - d0
    if accepted is not None and n >= accepted:
        t = time.monotonic() - t0
        break
    if time.monotonic() - t0 > timeout:
        sys.exit("only %d of %s events delivered after %.0f s" % (n, accepted, timeout))
    time.sleep(0.02)
if n != accepted:
    sys.exit("%d events delivered, %d accepted" % (n, accepted))
print("%.0f %d %d %.3f %.3f" % (accepted / t, accepted, non200, t, t_post))
PYEOF

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)

# run ROW: one run of a row on a fresh server and data dir; sets R_EPS,
# R_ACC (events accepted), R_NON200, R_SECS, R_POST and R_CPU (server CPU
# time, user + system, in µs per accepted event). Checks that every accepted event is in a file,
# and no lane event in the base file.
RUN=0
run() {
    local row=$1 n=$NLANES b="$TMP/base.ndjson" every=0 port data cfg out lines c0 c1
    case "$row" in
    zero) n=0 ;;
    requests) every=$EVERY ;;
    events) b="$TMP/mixed.ndjson" ;;
    esac
    RUN=$((RUN + 1))
    port=$(free_port) || die "no free port"
    data=$TMP/data$RUN
    cfg=$TMP/sluice$RUN.lua
    mkdir -p "$data-out"
    config "$cfg" "$port" "$data" "$n"
    bin/sluice serve -c "$cfg" >"$TMP/server.log" 2>&1 &
    SRV_PID=$!
    for _ in $(seq 200); do
        grep -q "listening on" "$TMP/server.log" && break
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.05
    done
    grep -q "listening on" "$TMP/server.log" || { cat "$TMP/server.log" >&2; die "sluice did not start ($row)"; }
    c0=$(cpu_ticks "$SRV_PID")
    out=$(python3 "$TMP/run.py" "$port" "$b" $((EVENTS / BATCH)) "$BATCH" "$PAR" "$TIMEOUT_S" \
        "$TMP/curl.cfg" "$NLANES" "$every") || { tail -5 "$TMP/server.log" >&2; die "run $RUN ($row) failed"; }
    read -r R_EPS R_ACC R_NON200 R_SECS R_POST <<<"$out"
    c1=$(cpu_ticks "$SRV_PID")
    R_CPU=$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v n="$R_ACC" 'BEGIN {printf "%.2f", c / hz * 1e6 / n}')
    kill -TERM "$SRV_PID" && wait "$SRV_PID"
    SRV_PID=
    lines=$(cat "$data-out"/*.ndjson | wc -l)
    [ "$lines" -eq $((EVENTS - R_NON200 * BATCH)) ] ||
        die "run $RUN ($row): $lines lines in the target files, $((EVENTS - R_NON200 * BATCH)) accepted"
    [ "$(grep -c '"lane"' "$data-out/base.ndjson")" -eq 0 ] ||
        die "run $RUN ($row): lane events in the base target's file"
    rm -rf "$data" "$data-out"
    note "$(printf '  %-8s run %2d: %9s ev/s  %6.2f s (posting %.2f s)  cpu %5s us/ev  non-200 %s' \
        "$row" "$RUN" "$R_EPS" "$R_SECS" "$R_POST" "$R_CPU" "$R_NON200")"
}

declare -A BEST=() LO=() HI=() NON200=() CPU=()
record() {
    local k=$1
    { [ -z "${CPU[$k]:-}" ] || awk -v a="$R_CPU" -v b="${CPU[$k]}" 'BEGIN {exit !(a < b)}'; } &&
        CPU[$k]=$R_CPU
    { [ -z "${BEST[$k]:-}" ] || [ "$R_EPS" -gt "${BEST[$k]}" ]; } && BEST[$k]=$R_EPS
    { [ -z "${LO[$k]:-}" ] || [ "$R_EPS" -lt "${LO[$k]}" ]; } && LO[$k]=$R_EPS
    { [ -z "${HI[$k]:-}" ] || [ "$R_EPS" -gt "${HI[$k]}" ]; } && HI[$k]=$R_EPS
    NON200[$k]=$((${NON200[$k]:-0} + R_NON200))
}

ALL_ROWS="zero declared requests events"
ORDER=""
for r in $ALL_ROWS; do has_row "$r" && ORDER="$ORDER $r"; done
REVERSE=$(echo "$ORDER" | tr ' ' '\n' | tac | tr '\n' ' ')
FS=$(stat -f -c %T "$TMP")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
note "lanes_bench: $EVENTS events per run, $REPS runs per row"
note "warm-up (untimed)"
SAVE=$EVENTS
EVENTS=$((BATCH * 50))
run zero
EVENTS=$SAVE
for rep in $(seq "$REPS"); do
    if [ $((rep % 2)) -eq 1 ]; then order=$ORDER; else order=$REVERSE; fi
    for row in $order; do
        run "$row"
        record "$row"
    done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
MISSED=0
{
    echo
    echo "lanes_bench: the cost of lane routing, same run"
    printf '  machine   %s cores, load average %s at the start; curl and the poller share the cores\n' \
        "$(nproc)" "$LOAD_BEFORE"
    printf '  dir       %s (%s)\n' "$TMP" "$FS"
    printf '  load      %s events per run: NDJSON POSTs of %s events (%s B), %s at a time; set of %s partitions, ack=buffer\n' \
        "$EVENTS" "$BATCH" "$BODY_BYTES" "$PAR" "$PARTITIONS"
    printf '  rule      one rule to target.file; rows 2-4: %s lanes (boe), each overriding the target with a file of its own\n' \
        "$NLANES"
    printf '  repeats   best of %s per row, order alternating; noise = min..max of the runs\n' "$REPS"
    [ "$FS" = tmpfs ] && echo "  note      $TMP is on tmpfs: the figures are about memory, not storage"
    echo
    printf '%-50s %5s %10s %6s %7s %5s %16s %9s %6s\n' "row" "lanes" "events/s" "ratio" "goal" "met" \
        "noise" "cpu us/ev" "ratio"
    line() { # line KEY LABEL LANES GOAL
        local k=$1 r met="-"
        has_row "$k" || return 0
        r=$(ratio "${BEST[$k]}" "${BEST[zero]}")
        if [ "$4" != "-" ]; then
            met=$(awk -v r="$r" -v g="$GOAL" 'BEGIN {print (r >= g ? "yes" : "MISS")}')
            [ "$met" = yes ] || MISSED=$((MISSED + 1))
        fi
        printf '%-50s %5s %10s %6s %7s %5s %16s %9s %6s\n' "$2" "$3" "${BEST[$k]}" "$r" "$4" "$met" \
            "${LO[$k]}..${HI[$k]}" "${CPU[$k]}" "$(ratio "${CPU[$k]}" "${CPU[zero]}")"
        [ "$k" = zero ] && return 0 # the reference of the other rows
        tsv_row "lanes.$k" "$2 ($3 lanes): ingest + routing + delivery" ev/s "${BEST[$k]}" \
            "row 1: no lanes, base traffic only" "${BEST[zero]}" "$r" "$([ "$4" = - ] || echo ">= $GOAL")" \
            "$([ "$met" = MISS ] && echo no || echo "$met")"
    }
    line zero "1 base traffic, no lanes" 0 "-"
    line declared "2 base traffic, lanes declared + overrides" "$NLANES" ">=$GOAL"
    line requests "3 1 POST in $EVERY in a lane (X-Sluice-Lane)" "$NLANES" "-"
    line events "4 1 event in $EVERY in a lane, inside every POST" "$NLANES" "-"
    n503=0
    for k in $ORDER; do n503=$((n503 + ${NON200[$k]:-0})); done
    if [ "$n503" -gt 0 ]; then
        echo "  note      POSTs answered other than 200 (503 back-pressure; their events are not counted):"
        for k in $ORDER; do printf '            %-9s %s of %s\n' "$k" "${NON200[$k]:-0}" $((REPS * EVENTS / BATCH)); done
    fi
    echo
    keys="zero_eps=${BEST[zero]}"
    for k in declared requests events; do
        has_row "$k" && keys="$keys ${k}_eps=${BEST[$k]} ${k}_vs_zero=$(ratio "${BEST[$k]}" "${BEST[zero]}") ${k}_cpu_vs_zero=$(ratio "${CPU[$k]}" "${CPU[zero]}")"
    done
    echo "lanes_bench: $keys goals_missed=$MISSED"
}
exit 0
