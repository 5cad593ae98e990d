#!/usr/bin/env bash
# bench/rulescale_bench.sh — rules at scale (issue 18 §2): what one event costs
# end to end as the number of rules of its set grows. The real `bin/sluice
# serve` on a free loopback port, one set of 4 partitions (ack = "buffer"),
# N rules `rule "rI" { set = "s", match = …, target = target.file { path =
# ".../rI.ndjson" } }`; EVENTS events of about 300 B posted as NDJSON, 1000
# per POST, one POST at a time on one keep-alive connection (as the
# acceptance check does); event k matches exactly rule k % N. Two pattern
# kinds: `type` (every rule `type = { "tI" }`) and `mix` (the acceptance
# check's operators, by I % 5: exact type, source prefix, numeric = on
# data.n, exists + exact, anything-but + exact). For each kind the rule
# counts 1, 10, 100, 300 and 1000, each on a fresh server and data dir.
#
# Measured per run: the server's CPU time (utime + stime of /proc/PID/stat)
# from just before the first POST until every event is in its rule's file
# (the driver counts the lines of each file as they grow), the wall time of
# the same span, delivered events/s = EVENTS / wall, and the server's peak
# RSS (VmHWM) at the end. Reference: the same figure with 1 rule, same kind,
# same run. Goals: CPU per event with 300 rules <= 2x that with 1 rule;
# delivered events/s with 300 rules >= 0.5x that with 1 rule. 1000 rules
# are reported without a goal. Every file is checked afterwards: each rule's
# file holds exactly its events (count and ids), once each.
#
# Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp),
# SLUICE_RULESCALE_EVENTS (events per run, a multiple of 1000, default
# 100000), SLUICE_RULESCALE_BIG_EVENTS (events of the runs with more than
# 300 rules, a multiple of 1000; default SLUICE_RULESCALE_EVENTS; make bench
# sets fewer: see bench/run.sh), SLUICE_RULESCALE_RULES (rule counts, default
# "1 10 100 300 1000"; the first must be 1, the reference),
# SLUICE_RULESCALE_KINDS (comma list of type,mix; default both),
# SLUICE_RULESCALE_BUDGET (seconds, default 0: none; bench/run.sh sets it
# below SLUICE_BENCH_TIMEOUT): a run that would end past it, judged from
# the last run's wall time per rule x event, is not started; its rows say
# so, and the benchmark still exits 0.
#
# Exits 0 when it measured everything, goals met or not; 1 on any error
# (a server that did not start or died, an event lost, misrouted or
# delivered twice, a run past its time limit).
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

EVENTS=${SLUICE_RULESCALE_EVENTS:-100000}
BIG_EVENTS=${SLUICE_RULESCALE_BIG_EVENTS:-$EVENTS}
COUNTS=${SLUICE_RULESCALE_RULES:-1 10 100 300 1000}
KINDS=${SLUICE_RULESCALE_KINDS:-type,mix}
BUDGET=${SLUICE_RULESCALE_BUDGET:-0}
ROOT=${SLUICE_BENCH_DIR:-./build/bench-tmp}
BATCH=1000
PARTITIONS=4
BIG=300           # runs with more rules than this use BIG_EVENTS
GOAL_AT=300       # the rule count the goals are about
CPU_GOAL=2.0      # CPU per event at GOAL_AT <= CPU_GOAL x that at 1 rule
RATE_GOAL=0.5     # delivered events/s at GOAL_AT >= RATE_GOAL x that at 1 rule
RUN_TIMEOUT_S=240 # one run gives up after this long

die() {
    echo "rulescale_bench: error: $*" >&2
    exit 1
}
note() { echo "$*" >&2; }

for v in EVENTS BIG_EVENTS; do
    n=${!v}
    case "$n" in '' | *[!0-9]*) die "SLUICE_RULESCALE_$v must be a whole number" ;; esac
    [ "$n" -ge "$BATCH" ] && [ $((n % BATCH)) -eq 0 ] || die "SLUICE_RULESCALE_$v must be a multiple of $BATCH"
done
first=
for n in $COUNTS; do
    case "$n" in '' | *[!0-9]*) die "SLUICE_RULESCALE_RULES: '$n' is not a whole number" ;; esac
    [ "$n" -ge 1 ] && [ "$n" -le 5000 ] || die "SLUICE_RULESCALE_RULES: $n is not 1-5000"
    [ -n "$first" ] || first=$n
done
[ "$first" = 1 ] || die "SLUICE_RULESCALE_RULES must start with 1 (the reference)"
for k in ${KINDS//,/ }; do
    case "$k" in type | mix) ;; *) die "unknown kind '$k' in SLUICE_RULESCALE_KINDS (type, mix)" ;; esac
done
case "$BUDGET" in '' | *[!0-9]*) die "SLUICE_RULESCALE_BUDGET must be a whole number of seconds" ;; esac
T_START=$(date +%s)
command -v python3 >/dev/null || die "python3 is needed"
. bench/tsv.sh
make -s bin/sluice || die "make bin/sluice failed"

bench_workdir rulescale_bench $((EVENTS * 300 * 4 / 1024)) # the log, the output files, slack

# ---- the config, the load and the driver -------------------------------------------

# The patterns and the events in one place, so that they agree: rule I
# matches exactly the events k with k % N == I (the acceptance check's
# generator). `config` writes the Lua file; `run` posts, waits and checks.
cat >"$TMP/driver.py" <<'PYEOF'
import http.client, json, os, sys, time

def pattern(kind, i):
    if kind == "type":
        return '{ type = { "t%d" } }' % i
    m = i % 5
    if m == 0:
        return '{ type = { "t%d" } }' % i
    if m == 1:
        return '{ source = { { prefix = "/s%d/" } } }' % i
    if m == 2:
        return '{ data = { n = { { numeric = { "=", %d } } } } }' % i
    if m == 3:
        return '{ type = { "t%d" }, data = { tag = { { exists = true } } } }' % i
    return '{ type = { "t%d" }, subject = { { ["anything-but"] = { "never" } } } }' % i

PAD = "x" * 150

def event(k, n):
    j = k % n
    return ('{"specversion":"1.0","id":"e%d","source":"/s%d/x","type":"t%d","subject":"sub%d",'
            '"partitionkey":"k%d","data":{"n":%d,"tag":"x","k":%d,"pad":"%s"}}'
            % (k, j, j, j % 7, k % 1024, j, k, PAD))

def config(path, port, data, out, kind, n, partitions):
    with open(path, "w") as f:
        f.write('server { listen = "127.0.0.1:%s", data_dir = "%s" }\n' % (port, data))
        f.write('set "s" { partitions = %d, ack = "buffer" }\n' % partitions)
        for i in range(n):
            f.write('rule "r%d" { set = "s", match = %s, target = target.file { path = "%s/r%d.ndjson" } }\n'
                    % (i, pattern(kind, i), out, i))

def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def hwm_kib(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0

def run(port, pid, out, n, events, batch, timeout):
    # The bodies first, untimed: the client's work during the run is sending.
    bodies = []
    for b in range(0, events, batch):
        bodies.append(("\n".join(event(k, n) for k in range(b, b + batch)) + "\n").encode())
    want = [events // n + (1 if i < events % n else 0) for i in range(n)]
    lines = [0] * n
    offs = [0] * n
    pending = set(i for i in range(n) if want[i] > 0)
    def poll():
        # Reads only what each file grew by; a file leaves the poll once
        # it holds its share (more lines than that fail the check below).
        for i in list(pending):
            try:
                with open("%s/r%d.ndjson" % (out, i), "rb") as f:
                    f.seek(offs[i])
                    chunk = f.read()
            except FileNotFoundError:
                continue
            offs[i] += len(chunk)
            lines[i] += chunk.count(b"\n")
            if lines[i] >= want[i]:
                pending.discard(i)
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    retries = 0
    c0 = cpu_s(pid)
    t0 = time.monotonic()
    for body in bodies:
        while True:
            conn.request("POST", "/v1/sets/s/events", body, {"Content-Type": "application/x-ndjson"})
            r = conn.getresponse()
            answer = r.read()
            if r.status == 503 and retries < 1000:  # back-pressure: the same body again
                retries += 1
                time.sleep(0.01)
                continue
            if r.status != 200:
                sys.exit("ingest answered %d: %r" % (r.status, answer[:200]))
            if json.loads(answer).get("accepted") != batch:
                sys.exit("ingest accepted less than the batch: %r" % answer[:200])
            break
    t_post = time.monotonic() - t0
    while pending:
        poll()
        if not pending:
            break
        if time.monotonic() - t0 > timeout:
            sys.exit("%d of %d events in the files after %.0f s" % (sum(lines), events, timeout))
        time.sleep(0.02)
    wall = time.monotonic() - t0
    cpu = cpu_s(pid) - c0
    rss = hwm_kib(pid)
    conn.close()
    print("%.4f %.4f %.4f %d %d" % (cpu, wall, t_post, rss, retries))

def check(out, n, events):
    # Every file exactly its events, once each (after the clock stopped).
    for i in range(n):
        path = "%s/r%d.ndjson" % (out, i)
        ids = []
        if os.path.exists(path):
            with open(path, "rb") as f:
                for line in f:
                    ids.append(json.loads(line)["id"])
        want = set("e%d" % k for k in range(i, events, n))
        got = set(ids)
        if got != want or len(ids) != len(want):
            sys.exit("rule r%d of %d: %d of its %d events, %d of others', %d twice"
                     % (i, n, len(got & want), len(want), len(got - want), len(ids) - len(got)))

cmd = sys.argv[1]
if cmd == "config":
    config(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7]), int(sys.argv[8]))
elif cmd == "run":
    run(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]),
        float(sys.argv[8]))
elif cmd == "check":
    check(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif cmd == "size":
    print(len(event(int(sys.argv[2]), int(sys.argv[3]))))
PYEOF

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run KIND N EVENTS: one run on a fresh server and data dir; sets R_CPU (µs
# per event), R_EPS (delivered events/s), R_WALL, R_POST (s), R_RSS (MiB),
# R_RETRIES (503 answers) and R_START (s the server took to be ready).
RUN=0
run() {
    local kind=$1 n=$2 events=$3 port data out cfg log out_line cpu t0 i
    RUN=$((RUN + 1))
    port=$(free_port) || die "no free port"
    data=$TMP/data$RUN
    out=$TMP/out$RUN
    cfg=$TMP/sluice$RUN.lua
    log=$TMP/server$RUN.log
    mkdir -p "$out" || die "cannot make $out"
    python3 "$TMP/driver.py" config "$cfg" "$port" "$data" "$out" "$kind" "$n" "$PARTITIONS" ||
        die "cannot write $cfg"
    t0=$(date +%s.%N)
    bin/sluice serve -c "$cfg" >"$log" 2>&1 &
    SRV_PID=$!
    for ((i = 0; i < 1200; i++)); do
        grep -q "listening on" "$log" 2>/dev/null && break
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.05
    done
    grep -q "listening on" "$log" || { tail -20 "$log" >&2; die "sluice did not start ($kind, $n rules)"; }
    R_START=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
    out_line=$(python3 "$TMP/driver.py" run "$port" "$SRV_PID" "$out" "$n" "$events" "$BATCH" \
        "$RUN_TIMEOUT_S") || { tail -5 "$log" >&2; die "run $RUN ($kind, $n rules) failed"; }
    kill -0 "$SRV_PID" 2>/dev/null || { tail -20 "$log" >&2; die "sluice died ($kind, $n rules)"; }
    read -r cpu R_WALL R_POST R_RSS R_RETRIES <<<"$out_line"
    kill -TERM "$SRV_PID" && wait "$SRV_PID"
    SRV_PID=
    python3 "$TMP/driver.py" check "$out" "$n" "$events" || die "run $RUN ($kind, $n rules): wrong delivery"
    R_CPU=$(awk -v c="$cpu" -v n="$events" 'BEGIN {printf "%.2f", c * 1e6 / n}')
    R_EPS=$(awk -v w="$R_WALL" -v n="$events" 'BEGIN {printf "%.0f", n / w}')
    R_RSS=$(awk -v k="$R_RSS" 'BEGIN {printf "%.1f", k / 1024}')
    rm -rf "$data" "$out" "$cfg" "$log"
    note "$(printf '  %-4s %5s rules %7s events: cpu %6.2f s = %8.2f us/ev  wall %6.2f s (posting %5.2f)  %7s ev/s  rss %6s MiB  start %5s s  503s %s' \
        "$kind" "$n" "$events" "$cpu" "$R_CPU" "$R_WALL" "$R_POST" "$R_EPS" "$R_RSS" "$R_START" "$R_RETRIES")"
}

# fits N EVENTS: whether a run of N rules and EVENTS events should end
# within BUDGET: today's cost grows with rules x events, so the last run's
# wall time per rule x event, plus 10 s for start-up, check and stop.
LAST_WALL= LAST_WORK=
fits() {
    [ "$BUDGET" -gt 0 ] || return 0
    awk -v el=$(($(date +%s) - T_START)) -v w="${LAST_WALL:-0}" -v lw="${LAST_WORK:-1}" \
        -v work=$(($1 * $2)) -v b="$BUDGET" 'BEGIN {exit !(el + w * work / lw + 10 <= b)}'
}

events_for() { if [ "$1" -gt "$BIG" ]; then echo "$BIG_EVENTS"; else echo "$EVENTS"; fi; }

declare -A CPU=() EPS=() RSS=() WALL=() NEV=() SKIPPED=()
FS=$(stat -f -c %T "$TMP")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
EV_BYTES=$(python3 "$TMP/driver.py" size 50000 300)
note "rulescale_bench: $EVENTS events per run ($BIG_EVENTS above $BIG rules), rule counts $COUNTS, kinds $KINDS"
note "warm-up (untimed)"
run type 1 $((BATCH * 10))
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
goal_met() { awk -v r="$1" -v op="$2" -v g="$3" 'BEGIN {print ((op == "<=" ? r <= g : r >= g) ? "yes" : "MISS")}'; }
LAST=${COUNTS##* }
MISSED=0

# rows KIND N: the rows of one run, written as soon as it ended (a run
# stopped by SLUICE_BENCH_TIMEOUT loses only the rows after it).
rows() {
    local kind=$1 n=$2 k=$1.$2 rc re cg=- eg=- cm=- em=- label evs=""
    [ "$n" = 1 ] && return 0 # the reference of the other rows
    label="type patterns"
    [ "$kind" = mix ] && label="mixed operators"
    if [ -n "${SKIPPED[$k]:-}" ]; then
        [ "$n" = "$GOAL_AT" ] && cg="<= $CPU_GOAL" eg=">= $RATE_GOAL"
        tsv_row "rulescale.${kind}_cpu_$n" "$n rules, $label: CPU per event not measured (the run would have ended past SLUICE_RULESCALE_BUDGET, $BUDGET s)" \
            "µs/ev" - "1 rule, same kind" "${CPU[$kind.1]:-}" - "$cg" -
        tsv_row "rulescale.${kind}_eps_$n" "$n rules, $label: delivered events/s not measured (as above)" \
            "ev/s" - "1 rule, same kind" "${EPS[$kind.1]:-}" - "$eg" -
        return 0
    fi
    rc=$(ratio "${CPU[$k]}" "${CPU[$kind.1]}")
    re=$(ratio "${EPS[$k]}" "${EPS[$kind.1]}")
    if [ "$n" = "$GOAL_AT" ]; then
        cg="<= $CPU_GOAL" eg=">= $RATE_GOAL"
        cm=$(goal_met "$rc" "<=" "$CPU_GOAL")
        em=$(goal_met "$re" ">=" "$RATE_GOAL")
    fi
    [ "${NEV[$k]}" != "${NEV[$kind.1]}" ] && evs=", ${NEV[$k]} events"
    tsv_row "rulescale.${kind}_cpu_$n" "$n rules, $label$evs: server CPU per event (lower is better)" \
        "µs/ev" "${CPU[$k]}" "1 rule, same kind" "${CPU[$kind.1]}" "$rc" "$cg" \
        "$([ "$cm" = MISS ] && echo no || echo "$cm")"
    tsv_row "rulescale.${kind}_eps_$n" "$n rules, $label$evs: delivered events/s, first POST to last file line" \
        "ev/s" "${EPS[$k]}" "1 rule, same kind" "${EPS[$kind.1]}" "$re" "$eg" \
        "$([ "$em" = MISS ] && echo no || echo "$em")"
    if [ "$n" = "$GOAL_AT" ] || [ "$n" = "$LAST" ]; then
        tsv_row "rulescale.${kind}_rss_$n" "$n rules, $label$evs: peak RSS (VmHWM) of the server" \
            MiB "${RSS[$k]}" "1 rule, same kind" "${RSS[$kind.1]}" "$(ratio "${RSS[$k]}" "${RSS[$kind.1]}")" - -
    fi
}

# The runs up to BIG rules of every kind first (the goals), then the bigger
# ones, so that a run cut short by the time limit costs the least.
for pass in small big; do
    for kind in ${KINDS//,/ }; do
        for n in $COUNTS; do
            if [ "$pass" = small ]; then [ "$n" -le "$BIG" ] || continue; else [ "$n" -gt "$BIG" ] || continue; fi
            ev=$(events_for "$n")
            if [ "$n" != 1 ] && ! fits "$n" "$ev"; then
                note "  $kind $n rules: not run, it would end past SLUICE_RULESCALE_BUDGET ($BUDGET s; $(($(date +%s) - T_START)) s spent)"
                SKIPPED[$kind.$n]=1
                rows "$kind" "$n"
                continue
            fi
            run "$kind" "$n" "$ev"
            LAST_WALL=$R_WALL LAST_WORK=$((n * ev))
            CPU[$kind.$n]=$R_CPU
            EPS[$kind.$n]=$R_EPS
            RSS[$kind.$n]=$R_RSS
            WALL[$kind.$n]=$(awk -v w="$R_WALL" 'BEGIN {printf "%.2f", w}')
            NEV[$kind.$n]=$ev
            rows "$kind" "$n"
        done
    done
done

{
    echo
    echo "rulescale_bench: the cost of an event against the number of rules, same run"
    printf '  machine   %s cores, load average %s at the start, %s at the end; the driver shares the cores\n' \
        "$(nproc)" "$LOAD_BEFORE" "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '  dir       %s (%s)\n' "$TMP" "$FS"
    printf '  load      %s events (%s above %s rules) of about %s B, NDJSON POSTs of %s, one at a time; set of %s partitions, ack=buffer\n' \
        "$EVENTS" "$BIG_EVENTS" "$BIG" "$EV_BYTES" "$BATCH" "$PARTITIONS"
    printf '  rules     N rules, each to its own target.file; event k matches rule k %% N only\n'
    printf '  kinds     type: type = { "tI" }; mix: by I %% 5 exact type, source prefix, numeric = on data.n, exists + exact, anything-but + exact\n'
    printf '  figures   CPU = server utime+stime from the first POST until every event is in its file; ev/s = events / that wall time; one run each\n'
    [ "$FS" = tmpfs ] && echo "  note      $TMP is on tmpfs: the figures are about memory, not storage"
    echo
    printf '%-5s %6s %8s %10s %7s %7s %5s %10s %7s %7s %5s %8s %8s\n' kind rules events "cpu us/ev" ratio \
        goal met "ev/s" ratio goal met "wall s" "rss MiB"
    keys=""
    for kind in ${KINDS//,/ }; do
        for n in $COUNTS; do
            k=$kind.$n
            if [ -n "${SKIPPED[$k]:-}" ]; then
                printf '%-5s %6s   not run: it would have ended past SLUICE_RULESCALE_BUDGET (%s s)\n' "$kind" "$n" "$BUDGET"
                continue
            fi
            rc=$(ratio "${CPU[$k]}" "${CPU[$kind.1]}")
            re=$(ratio "${EPS[$k]}" "${EPS[$kind.1]}")
            cg=- eg=- cm=- em=-
            if [ "$n" = "$GOAL_AT" ]; then
                cg="<=$CPU_GOAL" eg=">=$RATE_GOAL"
                cm=$(goal_met "$rc" "<=" "$CPU_GOAL")
                em=$(goal_met "$re" ">=" "$RATE_GOAL")
                [ "$cm" = yes ] || MISSED=$((MISSED + 1))
                [ "$em" = yes ] || MISSED=$((MISSED + 1))
            fi
            printf '%-5s %6s %8s %10s %7s %7s %5s %10s %7s %7s %5s %8s %8s\n' "$kind" "$n" "${NEV[$k]}" \
                "${CPU[$k]}" "$rc" "$cg" "$cm" "${EPS[$k]}" "$re" "$eg" "$em" "${WALL[$k]}" "${RSS[$k]}"
            [ "$n" = 1 ] || keys="$keys ${kind}_cpu_$n=$rc ${kind}_eps_$n=$re"
        done
    done
    echo
    echo "rulescale_bench:$keys goals_missed=$MISSED"
}
exit 0
