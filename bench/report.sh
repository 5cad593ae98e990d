#!/usr/bin/env bash
# bench/report.sh — the report of a `make bench` run (bench/run.sh calls it):
# the rows every benchmark appended to ROWS (bench/tsv.h: key, figure, unit,
# sluice, reference name, reference, ratio, goal, met) become one Markdown
# table in OUTDIR/latest.md under a header from META (machine, date, times
# of each benchmark), and gnuplot draws OUTDIR/latest.svg from two groups of
# rows: http.batch_N (ingest events/s against events per POST) and
# e2e.lat_* (publish→delivery latency percentiles). docs/benchmarks.md says
# how to read both.
#
#   bench/report.sh META ROWS OUTDIR
#
# Needs only awk and gnuplot; re-running it on the same files gives the same
# output.
set -u
set -o pipefail
export LC_ALL=C

[ $# -eq 3 ] || { echo "usage: bench/report.sh META ROWS OUTDIR" >&2; exit 1; }
META=$1
ROWS=$2
OUT=$3
[ -r "$META" ] && [ -r "$ROWS" ] || { echo "bench/report.sh: cannot read $META or $ROWS" >&2; exit 1; }
mkdir -p "$OUT" || exit 1
meta() { awk -F '\t' -v k="$1" '$1 == k {print $2; exit}' "$META"; }

# ---- latest.md -------------------------------------------------------------------

md=$OUT/latest.md
{
    echo "# sluice benchmark report"
    echo
    echo "Written by \`make bench\` (bench/run.sh, bench/report.sh); how to read it:"
    echo "[docs/benchmarks.md](../../docs/benchmarks.md). Every reference ran in the same run on"
    echo "the same machine; compare ratios, not absolute figures, across machines."
    echo
    echo "- date: $(meta date); commit $(meta commit)"
    echo "- machine: $(meta cpu), $(meta cores) cores, $(meta memory); $(meta os)"
    echo "- benchmark data in $(meta bench_dir)"
    echo "- load average (1/5/15 min) at the start $(meta load_start), at the end $(meta load_end)"
    total=$(meta total)
    echo "- total run time: $((total / 60)) min $((total % 60)) s; per benchmark (1-min load average at its start):" \
        "$(awk -F '\t' '$1 == "bench" {printf "%s%s %d s%s%s", n++ ? ", " : "", $2, $3, $5 != "" ? " at load " $5 : "", $4 == "ok" ? "" : " (" $4 ")"}' "$META")"
    echo "- sizes: \`$(meta sizes)\`"
    # "note" lines: anything a person added to META about this run.
    awk -F '\t' '$1 == "note" {print "- note: " $2}' "$META"
    echo
    awk -F '\t' '
    # Numbers by unit: rates as k/M, times and ratios with 2-3 decimals.
    function num(v, u,   a) {
        if (v == "-" || v == "") return "-"
        v += 0
        if (u ~ /\/s$/ && u != "MB/s") {
            a = v < 0 ? -v : v
            if (a >= 1e6) return sprintf("%.2fM", v / 1e6)
            if (a >= 1e4) return sprintf("%.0fk", v / 1e3)
            if (a >= 1e3) return sprintf("%.1fk", v / 1e3)
            return sprintf("%.0f", v)
        }
        if (u == "MB/s") return sprintf(v >= 100 ? "%.0f" : "%.1f", v)
        if (u == "s") return sprintf("%.3f", v)
        if (u == "MiB") return sprintf("%.1f", v)
        return sprintf("%.2f", v)
    }
    function ratio(v) {
        if (v == "-" || v == "") return "-"
        v += 0
        return sprintf(v < 0.1 ? "%.3f" : "%.2f", v)
    }
    function esc(s) { gsub(/\|/, "\\|", s); gsub(/  +/, " ", s); return s }
    BEGIN {
        print "| figure | sluice | same-run reference | ratio | goal | met? |"
        print "|---|---:|---|---:|---|---|"
    }
    NF >= 9 {
        bench = $1; sub(/\..*/, "", bench)
        u = $3 == "ratio" ? "" : " " $3
        s = num($4, $3); s = s == "-" ? "-" : s u
        r = num($6, $3)
        ref = r == "-" ? ($5 == "-" ? "-" : $5) : r u " (" $5 ")"
        goal = $8
        met = $9 == "yes" ? "yes" : ($9 == "no" ? "**no**" : "-")
        if ($9 == "yes") yes++
        if ($9 == "no") no++
        n++
        printf "| `%s` %s | %s | %s | %s | %s | %s |\n", bench, esc($2), s, esc(ref), ratio($7), esc(goal), met
    }
    END {
        printf "\n%d figures; %d with a goal: %d met, %d missed.\n", n, yes + no, yes, no
    }' "$ROWS"
    failed=$(awk -F '\t' '$1 == "bench" && $4 != "ok" {printf "%s%s (%s)", n++ ? ", " : "", $2, $4}' "$META")
    if [ -n "$failed" ]; then
        echo
        echo "**Failed, so their figures are missing or incomplete:** $failed."
    fi
    echo
    echo "Chart: [latest.svg](latest.svg) — HTTP ingest events/s against events per POST"
    echo "(rows \`http\` 6), and publish→delivery latency percentiles (rows \`e2e\` 1)."
} >"$md.tmp" && mv "$md.tmp" "$md" || exit 1

# ---- latest.svg ------------------------------------------------------------------

W=$(mktemp -d) || exit 1
trap 'rm -rf "$W"' EXIT
# batch.dat: events-per-POST sluice reference
awk -F '\t' '$1 ~ /^http\.batch_[0-9]+$/ && $4 != "-" {
    n = $1; sub(/.*_/, "", n); print n, $4, ($6 == "-" ? "NaN" : $6)
}' "$ROWS" | sort -n >"$W/batch.dat"
# lat.dat: index label buffer durable direct (ms)
awk -F '\t' '$1 ~ /^e2e\.lat_/ {
    split($1, k, "_"); p = k[3]; side = k[2]
    v[side, p] = $4; ref[p] = $6
}
END {
    split("p50 p90 p99 p999", ps, " ")
    split("p50 p90 p99 p99.9", names, " ")
    for (i = 1; i <= 4; i++) {
        p = ps[i]
        if (!((("buffer", p) in v) || (("durable", p) in v))) continue
        b = (("buffer", p) in v) ? v["buffer", p] : "NaN"
        d = (("durable", p) in v) ? v["durable", p] : "NaN"
        r = (p in ref) && ref[p] != "-" ? ref[p] : "NaN"
        print i - 1, names[i], b, d, r
    }
}' "$ROWS" >"$W/lat.dat"

rate=$(awk -F '\t' '$1 == "e2e.lat_buffer_p99" {s = $2; sub(/.*paced /, "", s); sub(/,.*/, "", s); print s}' "$ROWS")
{
    echo "set terminal svg size 1100,500 dynamic noenhanced font 'sans,12' background '#ffffff'"
    echo "set output '$OUT/latest.svg.tmp'"
    echo "set multiplot layout 1,2 title 'sluice make bench — $(meta date), $(meta cores) cores (shared machine: see docs/benchmarks.md)'"
    echo "set grid"
    # left: throughput against batch size
    echo "set title 'HTTP ingest (ack=buffer) against events per POST'"
    echo "set xlabel 'events per POST (NDJSON, about 300 B each)'"
    echo "set key below Left reverse"
    echo "set ylabel 'events/s accepted'"
    echo "set logscale xy"
    echo "set format y '%.0s%c'"
    if [ -s "$W/batch.dat" ]; then
        echo "set xrange [0.7:1500]"
        echo "plot '$W/batch.dat' using 1:2 with linespoints lw 2 pt 7 title 'sluice serve', \\"
        echo "     '' using 1:3 with linespoints lw 2 pt 5 dt 2 title 'reference: minimal libmicrohttpd server'"
    else
        echo "set label 1 'not measured in this run' at graph 0.5, 0.5 center"
        echo "set xrange [1:1000]; set yrange [1:10]"
        echo "plot 1/0 notitle"
        echo "unset label 1"
    fi
    # right: latency percentiles
    echo "unset logscale; set logscale y"
    echo "set title 'publish→delivery latency, target.http, paced ${rate:-}'"
    echo "set xlabel 'percentile'"
    echo "set key below Left reverse"
    echo "set ylabel 'ms (log scale)'"
    echo "set format y '%g'"
    echo "set autoscale"
    if [ -s "$W/lat.dat" ]; then
        echo "set xrange [-0.3:3.3]"
        echo "plot '$W/lat.dat' using 1:3:xtic(2) with linespoints lw 2 pt 7 title 'sluice ack=buffer', \\"
        echo "     '' using 1:4 with linespoints lw 2 pt 9 title 'sluice ack=durable', \\"
        echo "     '' using 1:5 with linespoints lw 2 pt 5 dt 2 title 'reference: direct HTTP POST'"
    else
        echo "set label 1 'not measured in this run' at graph 0.5, 0.5 center"
        echo "set xrange [0:3]; set yrange [0.1:10]"
        echo "plot 1/0 notitle"
    fi
    echo "unset multiplot"
} >"$W/plot.gp"
gnuplot "$W/plot.gp" 2>"$W/gnuplot.err" && mv "$OUT/latest.svg.tmp" "$OUT/latest.svg" || {
    cat "$W/gnuplot.err" >&2
    echo "bench/report.sh: gnuplot failed" >&2
    exit 1
}
exit 0
