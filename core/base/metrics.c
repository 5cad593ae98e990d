/*
 * core/base/metrics.c — histograms and Prometheus text output.
 */
#include "core/base/metrics.h"
#include "core/base/err.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int sl_histogram_write(const sl_histogram *h, const char *name, const char *help,
                       const char *labels, int with_header, sl_buf *out)
{
    int rc = 0;
    const char *sep = labels[0] ? "," : "";
    if (with_header)
        rc = sl_metrics_family(out, name, SL_METRIC_HISTOGRAM, help);
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

/* ---- families and the grouped text ----------------------------------------- */

const char *sl_metric_type_name(sl_metric_type t)
{
    return t == SL_METRIC_COUNTER ? "counter" : t == SL_METRIC_GAUGE ? "gauge" : "histogram";
}

static int ends_with(const char *s, size_t n, const char *suf)
{
    size_t k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

int sl_metrics_name_ok(const char *name, size_t len, sl_metric_type t)
{
    if (!len || (name[0] >= '0' && name[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ':'))
            return 0; /* snake_case: promtool refuses camelCase too */
    }
    if ((t == SL_METRIC_COUNTER) != (ends_with(name, len, "_total") != 0))
        return 0;
    if (t != SL_METRIC_HISTOGRAM &&
        (ends_with(name, len, "_bucket") || ends_with(name, len, "_sum") ||
         ends_with(name, len, "_count")))
        return 0;
    return 1;
}

int sl_metrics_family(sl_buf *out, const char *name, sl_metric_type type, const char *help)
{
    if (!sl_metrics_name_ok(name, strlen(name), type) || !help[0] || strpbrk(help, "\n\\"))
        return SL_EINVAL;
    const char *t = sl_metric_type_name(type);
    return sl_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, t);
}

int sl_metrics_label(sl_buf *out, const char *v)
{
    int rc = 0;
    for (const char *p = v; !rc && *p;) {
        size_t n = strcspn(p, "\\\"\n");
        rc = sl_buf_append(out, p, n);
        p += n;
        if (!rc && *p) {
            rc = sl_buf_append(out, *p == '\n' ? "\\n" : *p == '"' ? "\\\"" : "\\\\", 2);
            p++;
        }
    }
    return rc;
}

static int sample_labels(sl_buf *out, const char *name, va_list ap)
{
    int rc = sl_buf_append(out, name, strlen(name));
    const char *sep = "{";
    for (const char *k; !rc && (k = va_arg(ap, const char *));) {
        const char *v = va_arg(ap, const char *);
        if (!v)
            continue;
        rc = sl_buf_printf(out, "%s%s=\"", sep, k);
        rc = rc ? rc : sl_metrics_label(out, v);
        rc = rc ? rc : sl_buf_append(out, "\"", 1);
        sep = ",";
    }
    return rc || sep[0] == '{' ? rc : sl_buf_append(out, "}", 1);
}

int sl_metrics_u64(sl_buf *out, const char *name, uint64_t v, ...)
{
    va_list ap;
    va_start(ap, v);
    int rc = sample_labels(out, name, ap);
    va_end(ap);
    return rc ? rc : sl_buf_printf(out, " %" PRIu64 "\n", v);
}

int sl_metrics_i64(sl_buf *out, const char *name, int64_t v, ...)
{
    va_list ap;
    va_start(ap, v);
    int rc = sample_labels(out, name, ap);
    va_end(ap);
    return rc ? rc : sl_buf_printf(out, " %" PRId64 "\n", v);
}

size_t sl_metrics_copy(sl_buf *b, char *out, size_t cap)
{
    size_t n = b->len;
    if (n > cap) /* whole lines only */
        for (size_t i = n = 0; i < cap; i++)
            n = b->data[i] == '\n' ? i + 1 : n;
    if (n)
        memcpy(out, b->data, n);
    sl_buf_free(b);
    return n;
}

typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct fam {
    span name, help, type;
    int has_help, has_type;
    sl_metric_type t;
    int ok;
    size_t count, at; /* samples; where they start in the sorted order */
} fam;

typedef struct smp {
    span line, name, key; /* key: name and labels, without the value */
    size_t fam;           /* index + 1; 0 = left out */
} smp;

static int is_name_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

static int span_eq(span a, const char *p, size_t n)
{
    return a.n == n && memcmp(a.p, p, n) == 0;
}

static uint64_t span_hash(span s)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < s.n; i++)
        h = (h ^ (uint8_t)s.p[i]) * 1099511628211ull;
    return h;
}

/* Grows *v (of *cap elements of size sz) to hold one more than n. */
static int grow(void **v, size_t *cap, size_t n, size_t sz)
{
    return n < *cap ? 0 : sl_grow(v, cap, sz, 64);
}

/* The family named p[0..n), added (in order of first mention) when new;
 * SIZE_MAX when out of memory. */
static size_t fam_find(fam **v, size_t *nf, size_t *cap, const char *p, size_t n, int add)
{
    for (size_t i = *nf; i-- > 0;)
        if (span_eq((*v)[i].name, p, n))
            return i;
    if (!add || grow((void **)v, cap, *nf, sizeof **v))
        return SIZE_MAX;
    (*v)[*nf] = (fam){.name = {p, n}};
    return (*nf)++;
}

/* A "# HELP name text" or "# TYPE name type" line: records the first of
 * each for its family. */
static int header_line(const char *l, size_t n, fam **v, size_t *nf, size_t *cap)
{
    int help = n > 7 && memcmp(l, "# HELP ", 7) == 0;
    if (!help && !(n > 7 && memcmp(l, "# TYPE ", 7) == 0))
        return 0; /* another comment: left out */
    const char *p = l + 7, *e = l + n;
    const char *sp = memchr(p, ' ', (size_t)(e - p));
    const char *ne = sp ? sp : e;
    size_t i = fam_find(v, nf, cap, p, (size_t)(ne - p), 1);
    if (i == SIZE_MAX)
        return SL_ENOMEM;
    fam *f = &(*v)[i];
    span rest = {sp ? sp + 1 : e, sp ? (size_t)(e - sp - 1) : 0};
    if (help && !f->has_help) {
        f->help = rest;
        f->has_help = 1;
    } else if (!help && !f->has_type) {
        f->type = rest;
        f->has_type = 1;
    }
    return 0;
}

/* Which family sample s belongs to (index + 1, or 0): its own name, or a
 * histogram's name for the _bucket/_sum/_count series. */
static size_t sample_family(const fam *v, size_t nf, span name, size_t hint)
{
    static const char *const suf[] = {"_bucket", "_sum", "_count"};
    if (hint && span_eq(v[hint - 1].name, name.p, name.n) && v[hint - 1].t != SL_METRIC_HISTOGRAM)
        return hint;
    for (size_t i = 0; i < nf; i++)
        if (v[i].t != SL_METRIC_HISTOGRAM && span_eq(v[i].name, name.p, name.n))
            return i + 1;
    for (size_t k = 0; k < 3; k++) {
        if (!ends_with(name.p, name.n, suf[k]))
            continue;
        size_t base = name.n - strlen(suf[k]);
        if (hint && v[hint - 1].t == SL_METRIC_HISTOGRAM && span_eq(v[hint - 1].name, name.p, base))
            return hint;
        for (size_t i = 0; i < nf; i++)
            if (v[i].t == SL_METRIC_HISTOGRAM && span_eq(v[i].name, name.p, base))
                return i + 1;
    }
    return 0;
}

int sl_metrics_group(const void *text, size_t len, sl_buf *out, size_t *dropped)
{
    const char *t = text, *end = t + len;
    fam *fv = NULL;
    smp *sv = NULL;
    size_t nf = 0, fcap = 0, ns = 0, scap = 0, lost = 0, *order = NULL, *slots = NULL;
    int rc = 0;
    /* Pass 1: the headers and the sample lines, wherever they stand. */
    for (const char *l = t; !rc && l < end;) {
        const char *nl = memchr(l, '\n', (size_t)(end - l));
        const char *le = nl ? nl : end;
        size_t n = (size_t)(le - l);
        if (n && l[n - 1] == '\r')
            n--;
        if (n && l[0] == '#') {
            rc = header_line(l, n, &fv, &nf, &fcap);
        } else if (n) {
            size_t k = 0;
            while (k < n && is_name_char(l[k], k == 0))
                k++;
            if (!k || k == n || (l[k] != '{' && l[k] != ' ')) {
                lost++;
            } else if (!(rc = grow((void **)&sv, &scap, ns, sizeof *sv))) {
                size_t kn = n; /* up to the last '}': label values may hold spaces */
                while (l[k] == '{' && kn > k && l[kn - 1] != '}')
                    kn--;
                kn = l[k] == '{' && kn > k ? kn : k;
                sv[ns++] = (smp){.line = {l, n}, .name = {l, k}, .key = {l, kn}};
            }
        }
        l = nl ? nl + 1 : end;
    }
    /* Which families may be written. */
    for (size_t i = 0; i < nf; i++) {
        fam *f = &fv[i];
        int known = 0;
        for (int ty = SL_METRIC_COUNTER; f->has_type && ty <= SL_METRIC_HISTOGRAM; ty++)
            if (span_eq(f->type, sl_metric_type_name(ty), strlen(sl_metric_type_name(ty)))) {
                f->t = (sl_metric_type)ty;
                known = 1;
            }
        f->ok = known && f->has_help && f->help.n && sl_metrics_name_ok(f->name.p, f->name.n, f->t);
        if (!known)
            f->t = SL_METRIC_GAUGE; /* matched by exact name only, then left out */
    }
    /* Pass 2: each sample to its family, repeats of a series left out. */
    size_t hcap = 16;
    while (hcap < 2 * ns)
        hcap *= 2;
    slots = rc ? NULL : calloc(hcap, sizeof *slots);
    order = rc ? NULL : malloc((ns ? ns : 1) * sizeof *order);
    if (!rc && (!slots || !order))
        rc = SL_ENOMEM;
    for (size_t i = 0, hint = 0; !rc && i < ns; i++) {
        smp *s = &sv[i];
        s->fam = sample_family(fv, nf, s->name, hint);
        if (!s->fam || !fv[s->fam - 1].ok) {
            s->fam = 0;
            lost++;
            continue;
        }
        hint = s->fam;
        size_t h = (size_t)span_hash(s->key) & (hcap - 1);
        while (slots[h] && !span_eq(sv[slots[h] - 1].key, s->key.p, s->key.n))
            h = (h + 1) & (hcap - 1);
        if (slots[h]) {
            s->fam = 0;
            lost++;
            continue;
        }
        slots[h] = i + 1;
        fv[s->fam - 1].count++;
    }
    /* Counting sort: each family's samples together, in their order. */
    for (size_t i = 0, at = 0; !rc && i < nf; i++) {
        fv[i].at = at;
        at += fv[i].count;
        fv[i].count = 0;
    }
    for (size_t i = 0; !rc && i < ns; i++)
        if (sv[i].fam) {
            fam *f = &fv[sv[i].fam - 1];
            order[f->at + f->count++] = i;
        }
    for (size_t i = 0; !rc && i < nf; i++) {
        const fam *f = &fv[i];
        if (!f->ok)
            continue;
        rc = sl_buf_printf(out, "# HELP %.*s %.*s\n# TYPE %.*s %s\n", (int)f->name.n, f->name.p,
                           (int)f->help.n, f->help.p, (int)f->name.n, f->name.p,
                           sl_metric_type_name(f->t));
        for (size_t k = 0; !rc && k < f->count; k++) {
            span l = sv[order[f->at + k]].line;
            rc = sl_buf_append(out, l.p, l.n);
            rc = rc ? rc : sl_buf_append(out, "\n", 1);
        }
    }
    if (dropped)
        *dropped = lost;
    free(slots);
    free(order);
    free(sv);
    free(fv);
    return rc;
}
