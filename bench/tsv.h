/*
 * bench/tsv.h — machine-readable result rows of the benchmarks, for the
 * report that `make bench` builds (bench/run.sh, bench/report.sh).
 *
 * When the environment variable SLUICE_BENCH_TSV names a file, each call
 * appends one line to it:
 *
 *   key TAB figure TAB unit TAB sluice TAB reference-name TAB reference TAB
 *   ratio TAB goal TAB met
 *
 * (the format is described in docs/benchmarks.md). Without the variable the
 * calls do nothing, so a benchmark run by hand prints only its own table.
 * Linked into every build/rel/bench/<name> by the Makefile.
 */
#ifndef SL_BENCH_TSV_H
#define SL_BENCH_TSV_H

/* met: SL_BENCH_NO_GOAL (the figure has no goal), 0 (missed) or 1 (met). */
#define SL_BENCH_NO_GOAL (-1)

/* Appends one row. key: "bench.figure" in [a-z0-9_.], unique in the run;
 * figure and ref_name: human text (tabs and newlines become spaces);
 * sluice, ref, ratio: NAN when there is none (written as "-"); goal: text
 * such as ">= 0.80" or "< 10 ms", NULL or "" for none. Errors (the file
 * cannot be opened or written) are reported once on stderr and otherwise
 * ignored: a benchmark never fails because of its report. */
void sl_bench_tsv_row(const char *key, const char *figure, const char *unit, double sluice,
                      const char *ref_name, double ref, double ratio, const char *goal, int met);

#endif
