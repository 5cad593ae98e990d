#!/usr/bin/env bash
# bench/run.sh — what `make bench` runs: every benchmark of bench/ one after
# the other, each under a time limit, with sizes small enough that the whole
# run ends in well under 15 minutes on a 2-core machine; then bench/report.sh
# turns the rows the benchmarks wrote (bench/tsv.h, bench/tsv.sh) into
# bench/results/latest.md and latest.svg. docs/benchmarks.md explains it all.
#
#   bench/run.sh PROGRAM...      (make bench passes build/rel/bench/*_bench
#                                 and bench/*_bench.sh)
#
# Environment:
#   SLUICE_BENCH_ONLY     comma list of benchmark names to run (e.g.
#                         http_bench,e2e_bench); the others are left out of
#                         the report. Default: all.
#   SLUICE_BENCH_FULL=1   leave every benchmark at its own default sizes (the
#                         larger ones bench/README.md describes; about 20 min)
#   SLUICE_BENCH_TIMEOUT  seconds one benchmark may take before it is stopped
#                         and counted as failed (default 300)
#   SLUICE_BENCH_RESULTS  where latest.md and latest.svg go (default
#                         bench/results)
#   Any size variable of a benchmark (SLUICE_HTTP_SECS, SLUICE_E2E_REPS, ...)
#   set by the caller wins over the sizes below.
#
# The human output of each benchmark goes to the terminal and to
# build/bench-results/NAME.log. Exits 1 when a benchmark failed (the report
# is still written, naming it), 0 otherwise; a missed goal is a "no" in the
# table, not a failure.
set -u
set -o pipefail
export LC_ALL=C

cd "$(dirname "$0")/.." || exit 1

die() {
    echo "bench: error: $*" >&2
    exit 1
}

[ $# -gt 0 ] || die "usage: bench/run.sh PROGRAM... (make bench passes them)"
scripts/deps.sh bench || die "scripts/deps.sh bench failed (gnuplot, wrk)"

ONLY=${SLUICE_BENCH_ONLY:-}
LIMIT=${SLUICE_BENCH_TIMEOUT:-300}
RESULTS=${SLUICE_BENCH_RESULTS:-bench/results}
WORK=build/bench-results
case "$LIMIT" in '' | *[!0-9]*) die "SLUICE_BENCH_TIMEOUT must be a whole number of seconds" ;; esac

# The sizes of a `make bench` run. Each benchmark's own defaults (larger,
# for measuring one thing well) are in bench/README.md; these fit every
# benchmark into a run of 8-11 minutes on 2 cores (measured: docs/benchmarks.md).
# Only variables the caller did not set are given a value here.
if [ "${SLUICE_BENCH_FULL:-0}" != 1 ]; then
    : "${SLUICE_BENCH_MB:=256}" "${SLUICE_BENCH_RECOVERY_MB:=512}" "${SLUICE_BENCH_SEGMENT_MB:=64}"
    : "${SLUICE_BENCH_REPS:=3}"
    : "${SLUICE_HTTP_SECS:=3}" "${SLUICE_HTTP_REPS:=2}"
    : "${SLUICE_KAFKA_REPS:=1}"
    : "${SLUICE_LANES_EVENTS:=500000}" "${SLUICE_LANES_REPS:=2}"
    : "${SLUICE_AGENT_REPS:=1}"
    # Rules share one reader and one match per set (docs/rules.md): the
    # 1000-rule runs take the same 100000 events as the others.
    : "${SLUICE_RULESCALE_BIG_EVENTS:=100000}"
    export SLUICE_BENCH_MB SLUICE_BENCH_RECOVERY_MB SLUICE_BENCH_SEGMENT_MB SLUICE_BENCH_REPS \
        SLUICE_HTTP_SECS SLUICE_HTTP_REPS SLUICE_KAFKA_REPS SLUICE_LANES_EVENTS SLUICE_LANES_REPS \
        SLUICE_AGENT_REPS SLUICE_RULESCALE_BIG_EVENTS
fi

# rulescale_bench's runs are long with today's runner (300 rules: 40-110 s
# each on 2 cores): it starts no run it expects to end past this, so that
# a loaded machine costs rows (marked "not run"), not the whole benchmark.
: "${SLUICE_RULESCALE_BUDGET:=$((LIMIT > 60 ? LIMIT - 30 : LIMIT))}"
export SLUICE_RULESCALE_BUDGET

mkdir -p "$WORK" "$RESULTS" || die "cannot create $WORK or $RESULTS"
ROWS=$WORK/rows.tsv
META=$WORK/meta.txt
: >"$ROWS" || die "cannot write $ROWS"
export SLUICE_BENCH_TSV=$PWD/$ROWS

# The header of the report: what ran, where, when (key<TAB>value lines).
{
    printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
    printf 'cpu\t%s\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
    printf 'cores\t%s\n' "$(nproc)"
    printf 'memory\t%s MiB\n' "$(awk '/^MemTotal:/ {printf "%d", $2 / 1024}' /proc/meminfo)"
    printf 'os\t%s, Linux %s\n' "$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}")" "$(uname -r)"
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
    [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit (with local changes)"
    printf 'commit\t%s\n' "$commit"
    bdir=${SLUICE_BENCH_DIR:-./build/bench-tmp}
    mkdir -p "$bdir"
    printf 'bench_dir\t%s (%s)\n' "$bdir" "$(stat -f -c %T "$bdir")"
    printf 'load_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    sizes=""
    for v in $(env | sed -n 's/^\(SLUICE_[A-Z0-9_]*\)=.*/\1/p' | sort); do
        case "$v" in SLUICE_BENCH_TSV | SLUICE_BENCH_ONLY | SLUICE_BENCH_RESULTS) continue ;; esac
        sizes="$sizes $v=${!v}"
    done
    printf 'sizes\t%s\n' "${sizes# }"
} >"$META"

# The order of the issues (store, rules, HTTP, end to end, sources, lanes,
# agent, rules at scale, scale-out), whatever order make passed them in; unknown names go last.
ORDER="log_bench rules_bench http_bench e2e_bench source_file_bench source_kafka_bench lanes_bench agent_bench rulescale_bench scaleout_bench"
PROGS=()
for want in $ORDER; do
    for prog in "$@"; do [ "$(basename "$prog" .sh)" = "$want" ] && PROGS+=("$prog"); done
done
for prog in "$@"; do
    case " $ORDER " in *" $(basename "$prog" .sh) "*) ;; *) PROGS+=("$prog") ;; esac
done

T0=$(date +%s)
FAILED=""
for prog in "${PROGS[@]}"; do
    name=$(basename "$prog" .sh)
    if [ -n "$ONLY" ]; then
        case ",$ONLY," in *",$name,"*) ;; *) continue ;; esac
    fi
    echo "==== $name ===="
    t0=$(date +%s)
    load=$(cut -d' ' -f1 /proc/loadavg)
    # timeout stops the benchmark's whole process group (servers, wrk, kcat)
    # with SIGTERM, on which every benchmark cleans up and exits 1.
    timeout -k 15 "$LIMIT" "$prog" 2>&1 | tee "$WORK/$name.log"
    rc=${PIPESTATUS[0]}
    secs=$(($(date +%s) - t0))
    if [ "$rc" = 0 ]; then
        status=ok
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status="failed: stopped after ${LIMIT} s (SLUICE_BENCH_TIMEOUT)"
    else
        status="failed: exit $rc"
    fi
    [ "$status" = ok ] || FAILED="$FAILED $name"
    printf 'bench\t%s\t%s\t%s\t%s\n' "$name" "$secs" "$status" "$load" >>"$META"
    echo "==== $name: $status, ${secs} s"
done
printf 'load_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$META"
printf 'total\t%s\n' "$(($(date +%s) - T0))" >>"$META"

bench/report.sh "$META" "$ROWS" "$RESULTS" || die "bench/report.sh failed"
echo "bench: wrote $RESULTS/latest.md and $RESULTS/latest.svg in $(($(date +%s) - T0)) s"
[ -z "$FAILED" ] || die "failed:$FAILED (see $WORK/NAME.log)"
exit 0
