/*
 * core/metrics.c — histograms and Prometheus text output.
 */
#include "core/metrics.h"
#include "core/err.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

/* Upper bounds in nanoseconds: 50 µs … 5 s. */
static const int64_t bounds_ns[SL_HIST_BUCKETS] = {
    50000,    100000,   250000,   500000,    1000000,   2500000,    5000000,
    10000000, 25000000, 50000000, 100000000, 250000000, 1000000000, 5000000000};

void sl_histogram_observe(sl_histogram *h, int64_t ns)
{
    size_t i = 0;
    while (i < SL_HIST_BUCKETS && ns > bounds_ns[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)(ns > 0 ? ns : 0), memory_order_relaxed);
}

int sl_buf_printf(sl_buf *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sl_buf_reserve(out, (size_t)n + 1))
        return SL_ENOMEM;
    va_start(ap, fmt);
    vsnprintf((char *)out->data + out->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    out->len += (size_t)n;
    return 0;
}

int sl_histogram_write(const sl_histogram *h, const char *name, const char *help,
                       const char *labels, int with_header, sl_buf *out)
{
    int rc = 0;
    const char *sep = labels[0] ? "," : "";
    if (with_header)
        rc = sl_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; !rc && i <= SL_HIST_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < SL_HIST_BUCKETS)
            rc = sl_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep,
                               (double)bounds_ns[i] / 1e9, cum);
        else
            rc = sl_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep,
                               cum);
    }
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    if (!rc)
        rc = sl_buf_printf(out, "%s_sum%s%s%s %.9f\n%s_count%s%s%s %" PRIu64 "\n", name, open,
                           labels, close,
                           (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9,
                           name, open, labels, close, cum);
    return rc;
}
