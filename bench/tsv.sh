# shellcheck shell=bash
# bench/tsv.sh — sourced by the bench/*_bench.sh scripts: bench_workdir (at
# the end) and tsv_row, the shell side of bench/tsv.h. tsv_row: when
# SLUICE_BENCH_TSV names a file, appends one row
#
#   key TAB figure TAB unit TAB sluice TAB reference-name TAB reference TAB
#   ratio TAB goal TAB met
#
# for bench/report.sh (format: docs/benchmarks.md). Without it, does nothing.
#
# tsv_row KEY FIGURE UNIT SLUICE REF_NAME REF RATIO GOAL MET
#   numbers plain (1234.5, no "k"); "" or "-" for none; MET yes, no or -.
tsv_row() {
    [ -n "${SLUICE_BENCH_TSV:-}" ] || return 0
    local out="" f i=0
    for f in "$@"; do
        i=$((i + 1))
        f=${f//$'\t'/ }
        f=${f//$'\n'/ }
        [ -z "$f" ] && f=-
        if [ "$i" = 1 ]; then out=$f; else out="$out"$'\t'"$f"; fi
    done
    while [ "$i" -lt 9 ]; do out="$out"$'\t'-; i=$((i + 1)); done
    printf '%s\n' "$out" >>"$SLUICE_BENCH_TSV" ||
        echo "bench: cannot append to $SLUICE_BENCH_TSV (SLUICE_BENCH_TSV)" >&2
    return 0
}

# bench_workdir NAME NEED_KIB: refuses (die) when $ROOT has less than NEED_KIB
# free, makes TMP, a new directory in $ROOT (absolute path), and sets SRV_PID=;
# at exit the server in SRV_PID (if any) is killed and TMP removed.
bench_workdir() {
    local name=$1 need=$2 free
    mkdir -p "$ROOT" || die "cannot make $ROOT"
    free=$(df -Pk "$ROOT" | awk 'NR == 2 {print $4}')
    [ "${free:-0}" -ge "$need" ] ||
        die "$ROOT has $((free / 1024)) MiB free; a run writes up to about $((need / 1024)) MiB"
    TMP=$(mktemp -d "$ROOT/$name.XXXXXX") && TMP=$(cd "$TMP" && pwd) ||
        die "cannot make a temp dir in $ROOT"
    SRV_PID=
    trap bench_cleanup EXIT
    # shellcheck disable=SC2064 # the name is fixed now
    trap "echo '$name: interrupted' >&2; exit 1" INT TERM
}

bench_cleanup() {
    if [ -n "${SRV_PID:-}" ]; then
        kill -KILL "$SRV_PID" 2>/dev/null
        wait "$SRV_PID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
