/*
 * bench/tsv.c — the rows of bench/tsv.h: one line appended per call to the
 * file named by SLUICE_BENCH_TSV.
 */
#include "bench/tsv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Writes s with tabs and line breaks replaced, so a row stays one line of
 * nine fields whatever the caller's text holds. */
static void put_text(FILE *f, const char *s)
{
    if (!s || !*s) {
        fputc('-', f);
        return;
    }
    for (; *s; s++)
        fputc(*s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s, f);
}

static void put_num(FILE *f, double v)
{
    if (isnan(v) || isinf(v))
        fputc('-', f);
    else
        fprintf(f, "%.6g", v);
}

void sl_bench_tsv_row(const char *key, const char *figure, const char *unit, double sluice,
                      const char *ref_name, double ref, double ratio, const char *goal, int met)
{
    static int warned;
    const char *path = getenv("SLUICE_BENCH_TSV");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f) {
        if (!warned++)
            fprintf(stderr, "bench: cannot append to %s (SLUICE_BENCH_TSV)\n", path);
        return;
    }
    put_text(f, key);
    fputc('\t', f);
    put_text(f, figure);
    fputc('\t', f);
    put_text(f, unit);
    fputc('\t', f);
    put_num(f, sluice);
    fputc('\t', f);
    put_text(f, ref_name);
    fputc('\t', f);
    put_num(f, ref);
    fputc('\t', f);
    put_num(f, ratio);
    fputc('\t', f);
    put_text(f, goal);
    fputc('\t', f);
    fputs(met == SL_BENCH_NO_GOAL ? "-" : met ? "yes" : "no", f);
    fputc('\n', f);
    if (fclose(f) != 0 && !warned++)
        fprintf(stderr, "bench: cannot write %s (SLUICE_BENCH_TSV)\n", path);
}
