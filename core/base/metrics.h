/*
 * core/base/metrics.h — lock-free counters and latency histograms, written out in
 * the Prometheus text exposition format for GET /metrics.
 */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include "core/base/buf.h"

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

/* Appends "# HELP", "# TYPE" (sl_metrics_family) and the _bucket/_sum/
 * _count lines of h, in seconds. labels is "" or a label list without braces
 * (`set="x"`, values escaped); help and type lines are written only when
 * with_header is non-zero. */
int sl_histogram_write(const sl_histogram *h, const char *name, const char *help,
                       const char *labels, int with_header, sl_buf *out);

/* ---- the /metrics text ------------------------------------------------------
 * Every family starts with one "# HELP" and one "# TYPE" line, written only by
 * sl_metrics_family, which also enforces the naming rules Prometheus' linter
 * (`promtool check metrics`) checks. Writers append their families to one
 * text; sl_metrics_group then puts each family's samples together behind its
 * header, so a family fed from several places (per set, per rule, per source)
 * is still one group, and leaves out what a scraper would reject. */

typedef enum sl_metric_type {
    SL_METRIC_COUNTER,   /* name ends in _total */
    SL_METRIC_GAUGE,     /* must not end in _total, _bucket, _sum, _count */
    SL_METRIC_HISTOGRAM, /* samples name_bucket{le=...}, name_sum, name_count */
} sl_metric_type;

/* "counter", "gauge", "histogram". */
const char *sl_metric_type_name(sl_metric_type t);

/* Whether name[0..len) is a valid family name of type t: [a-z_:][a-z0-9_:]*,
 * counters ending in _total and nothing else doing so, no _bucket/_sum/
 * _count suffix outside histograms. */
int sl_metrics_name_ok(const char *name, size_t len, sl_metric_type t);

/* Appends "# HELP name help\n# TYPE name type\n". Returns 0, SL_ENOMEM, or
 * SL_EINVAL (nothing written) for a name sl_metrics_name_ok refuses or a help
 * text that is empty or holds a newline or backslash. */
int sl_metrics_family(sl_buf *out, const char *name, sl_metric_type type, const char *help);

/* Appends v escaped for the inside of a quoted label value (\\, \", \n). */
int sl_metrics_label(sl_buf *out, const char *v);

/* Appends one sample line `name{k1="v1",...} v`: the arguments after v are
 * label name/value pairs ending with a NULL name; a pair whose value is NULL
 * is left out; values are escaped. Returns 0 or SL_ENOMEM. */
int sl_metrics_u64(sl_buf *out, const char *name, uint64_t v, ...) __attribute__((sentinel));
int sl_metrics_i64(sl_buf *out, const char *name, int64_t v, ...) __attribute__((sentinel));

/* For a connector's metrics(impl, out, cap) callback: copies b's whole lines
 * that fit into out[0..cap), frees b, returns the bytes copied. */
size_t sl_metrics_copy(sl_buf *b, char *out, size_t cap);

/* Appends text[0..len) to out regrouped: families in the order of their
 * first "# HELP" or "# TYPE" line, each written as one HELP, one TYPE and
 * then all of its samples in the order they came, wherever they stood in
 * text (headers repeated by several writers count once). Left out, and
 * counted in *dropped (may be NULL): samples of a family without both a
 * HELP and a TYPE line or whose name or type sl_metrics_name_ok refuses,
 * repeats of a series already written (same name and labels), other
 * comments and lines that are not samples. Returns 0 or SL_ENOMEM. */
int sl_metrics_group(const void *text, size_t len, sl_buf *out, size_t *dropped);

#endif
