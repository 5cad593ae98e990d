/*
 * core/metrics.h — lock-free counters and latency histograms, written out in
 * the Prometheus text exposition format for GET /metrics.
 */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include "core/buf.h"

#include <stdatomic.h>
#include <stdint.h>

#define SL_HIST_BUCKETS 14

/* Latency histogram with fixed buckets from 50 µs to 5 s. */
typedef struct sl_histogram {
    _Atomic uint64_t counts[SL_HIST_BUCKETS + 1]; /* the last one is +Inf */
    _Atomic uint64_t sum_ns;
} sl_histogram;

/* Records one observation of ns nanoseconds. */
void sl_histogram_observe(sl_histogram *h, int64_t ns);

/* Appends "# HELP", "# TYPE" and the _bucket/_sum/_count lines of h, in
 * seconds. labels is "" or a label list without braces (`set="x"`); help
 * and type lines are written only when with_header is non-zero. */
int sl_histogram_write(const sl_histogram *h, const char *name, const char *help,
                       const char *labels, int with_header, sl_buf *out);

/* Appends printf-formatted text. Returns 0 or SL_ENOMEM. */
int sl_buf_printf(sl_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
