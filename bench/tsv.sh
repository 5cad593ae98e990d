# shellcheck shell=bash
# bench/tsv.sh — sourced by the bench/*_bench.sh scripts: tsv_row, the shell
# side of bench/tsv.h. When SLUICE_BENCH_TSV names a file, appends one row
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
