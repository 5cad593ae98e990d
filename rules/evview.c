/*
 * rules/evview.c — an event parsed once into a flat tree of values, for the
 * matcher (rules/pattern_match.c), the rule VM and its Lua proxies (rules/rule.c,
 * rules/luaproxy.c); see rules/evview.h.
 */
#include "rules/evview.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"

/* Numbers up to this size are copied on the stack for strtod(). */
#define STACK_NUM 64

/* ---- parsed events ------------------------------------------------------ */

static void pe_reset(sl_evview *ev)
{
    if (!ev->v) {
        ev->v = ev->inline_v;
        ev->cap = SL_EVVIEW_INLINE;
    }
    ev->n = 0;
    ev->scratch_len = 0;
    ev->oom = false;
}

void sl_evview_init(sl_evview *ev)
{
    memset(ev, 0, offsetof(sl_evview, inline_v));
    pe_reset(ev);
}

void sl_evview_free(sl_evview *ev)
{
    if (ev->v && ev->v != ev->inline_v)
        free(ev->v);
    free(ev->scratch);
    sl_evview_init(ev);
}

static uint32_t pe_new(sl_evview *ev)
{
    if (ev->n == ev->cap) {
        size_t cap = ev->cap * 2;
        sl_evview_value *g =
            ev->v == ev->inline_v ? malloc(cap * sizeof *g) : realloc(ev->v, cap * sizeof *g);
        if (!g) {
            ev->oom = true;
            return SL_EVVIEW_NONE;
        }
        if (ev->v == ev->inline_v)
            memcpy(g, ev->inline_v, ev->n * sizeof *g);
        ev->v = g;
        ev->cap = cap;
    }
    sl_evview_value *v = &ev->v[ev->n];
    v->first = v->next = SL_EVVIEW_NONE;
    v->key = NULL;
    v->klen = 0;
    return (uint32_t)ev->n++;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* A string starting at p (at its quote): sets s and len to its decoded bytes
 * (in place when it has no escapes, else in the scratch space, which was
 * sized for the whole input). Returns the byte after it, or NULL. */
/* The first '"' or '\\' in [p, end), or end: eight bytes at a time (most
 * strings of an event are short, where a memchr call costs more). */
static const char *quote_or_backslash(const char *p, const char *end)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
        /* a zero byte of q or b marks a hit; the lowest flag is exact */
        uint64_t hit = ((q - ones) & ~q & highs) | ((b - ones) & ~b & highs);
        if (hit)
            return p + (__builtin_ctzll(hit) >> 3);
        p += 8;
    }
    while (p < end && *p != '"' && *p != '\\')
        p++;
    return p;
}

static const char *pe_string(sl_evview *ev, const char *p, const char *end, const char **s,
                             uint32_t *len)
{
    const char *body = p + 1;
    const char *q = quote_or_backslash(body, end);
    if (q == end)
        return NULL;
    if (*q == '"') { /* the common case: no escapes */
        *s = body;
        *len = (uint32_t)(q - body);
        return q + 1;
    }
    /* Escapes: the strict scanner finds the real end and checks them, so
     * the decoder only ever sees a valid string. */
    sl_json_tok t;
    const char *next;
    if (sl_json_value(p, end, 0, &t, &next, NULL) || t.type != SL_JSON_STRING)
        return NULL;
    char *out = ev->scratch + ev->scratch_len;
    size_t n = 0;
    sl_json_unescape(&t, out, t.len - 2, &n);
    ev->scratch_len += n;
    *s = out;
    *len = (uint32_t)n;
    return next;
}

/* Exact powers of ten as doubles (10^22 is the last one a double holds
 * exactly). */
static const double pow10_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number [p, p + len) as a double, without strtod when that is exact
 * (Clinger's fast path): a mantissa of at most 2^53 and a power of ten of
 * at most 22 are both exact doubles, and one IEEE multiplication or division
 * of exact operands is correctly rounded, which is what strtod returns. So
 * 149.9 is 1499 / 10: the same double, bit for bit. Returns false (the
 * caller uses strtod) for anything else: more digits, bigger exponents, and
 * any text that is not exactly the JSON grammar (unvalidated input). */
static bool fast_number(const char *p, size_t len, double *out)
{
    const char *q = p, *e = p + len;
    bool neg = q < e && *q == '-';
    q += neg;
    uint64_t m = 0;
    int digits = 0, frac = 0;
    const char *d0 = q;
    while (q < e && *q >= '0' && *q <= '9') {
        m = m * 10 + (uint64_t)(*q++ - '0');
        if (++digits > 19)
            return false;
    }
    if (q == d0)
        return false;
    if (q < e && *q == '.') {
        const char *f0 = ++q;
        while (q < e && *q >= '0' && *q <= '9') {
            m = m * 10 + (uint64_t)(*q++ - '0');
            frac++;
            if (++digits > 19)
                return false;
        }
        if (q == f0)
            return false;
    }
    int ex = 0;
    if (q < e && (*q == 'e' || *q == 'E')) {
        q++;
        bool eneg = q < e && *q == '-';
        q += q < e && (*q == '-' || *q == '+');
        const char *x0 = q;
        while (q < e && *q >= '0' && *q <= '9') {
            ex = ex * 10 + (*q++ - '0');
            if (ex > 1000)
                return false;
        }
        if (q == x0)
            return false;
        ex = eneg ? -ex : ex;
    }
    if (q != e || m > (1ull << 53))
        return false;
    int p10 = ex - frac;
    if (p10 < -22 || p10 > 22)
        return false;
    double v = (double)m;
    v = p10 < 0 ? v / pow10_exact[-p10] : v * pow10_exact[p10];
    *out = neg ? -v : v;
    return true;
}

/* The value of a number token: plain integers of up to 15 digits directly,
 * short decimals by the exact fast path, everything else with strtod (on a
 * copy when the number ends the input). */
static double pe_number(const char *p, size_t len)
{
    const char *q = p;
    bool neg = *q == '-';
    q += neg;
    if (len - (size_t)neg <= 15) {
        uint64_t v = 0;
        const char *e = p + len;
        while (q < e && *q >= '0' && *q <= '9')
            v = v * 10 + (uint64_t)(*q++ - '0');
        if (q == e && q > p + neg) /* a lone "-" (unvalidated) is strtod's 0 */
            return neg ? -(double)v : (double)v;
    }
    double fast;
    if (fast_number(p, len, &fast))
        return fast;
    char buf[STACK_NUM];
    if (len < sizeof buf) {
        memcpy(buf, p, len);
        buf[len] = '\0';
        return strtod(buf, NULL);
    }
    char *h = malloc(len + 1);
    if (!h)
        return strtod(p, NULL); /* stops at the delimiter after the number */
    memcpy(h, p, len);
    h[len] = '\0';
    double d = strtod(h, NULL);
    free(h);
    return d;
}

static const char *pe_value(sl_evview *ev, const char *p, const char *end, uint32_t idx, int depth);

/* The value starting at p (not whitespace) into node idx: see pe_value. */
static const char *pe_value_at(sl_evview *ev, const char *p, const char *end, uint32_t idx,
                               int depth)
{
    if (p >= end)
        return NULL;
    sl_evview_value *v = &ev->v[idx];
    char c = *p;
    if (c == '{' || c == '[') {
        if (depth > SL_JSON_DEPTH_LIMIT)
            return NULL;
        bool obj = c == '{';
        v->type = obj ? SL_JSON_OBJECT : SL_JSON_ARRAY;
        uint32_t last = SL_EVVIEW_NONE;
        p = skip_ws(p + 1, end);
        if (p < end && *p == (obj ? '}' : ']'))
            return p + 1;
        for (;;) {
            uint32_t child = pe_new(ev);
            if (child == SL_EVVIEW_NONE)
                return NULL;
            if (obj) {
                p = skip_ws(p, end);
                const char *k;
                uint32_t kl;
                if (p >= end || *p != '"' || !(p = pe_string(ev, p, end, &k, &kl)))
                    return NULL;
                p = skip_ws(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p++;
                ev->v[child].key = k;
                ev->v[child].klen = kl;
            }
            if (!(p = pe_value(ev, p, end, child, depth + 1)))
                return NULL;
            /* ev->v may have moved: index, never keep pointers */
            if (last == SL_EVVIEW_NONE)
                ev->v[idx].first = child;
            else
                ev->v[last].next = child;
            last = child;
            p = skip_ws(p, end);
            if (p >= end)
                return NULL;
            if (*p == ',') {
                p++;
                continue;
            }
            if (*p != (obj ? '}' : ']'))
                return NULL;
            return p + 1;
        }
    }
    if (c == '"') {
        v->type = SL_JSON_STRING;
        const char *s;
        uint32_t len;
        p = pe_string(ev, p, end, &s, &len);
        v = &ev->v[idx];
        v->s = s;
        v->len = len;
        return p;
    }
    static const struct {
        const char *lit;
        size_t len;
        sl_json_type type;
    } lits[] = {{"true", 4, SL_JSON_TRUE}, {"false", 5, SL_JSON_FALSE}, {"null", 4, SL_JSON_NULL}};
    for (size_t i = 0; i < 3; i++)
        if (c == lits[i].lit[0]) {
            if ((size_t)(end - p) < lits[i].len || memcmp(p, lits[i].lit, lits[i].len))
                return NULL;
            v->type = lits[i].type;
            return p + lits[i].len;
        }
    const char *q = p;
    while (q < end && (*q == '-' || *q == '+' || *q == '.' || *q == 'e' || *q == 'E' ||
                       (*q >= '0' && *q <= '9')))
        q++;
    if (q == p)
        return NULL;
    v->type = SL_JSON_NUMBER;
    v->s = p;
    v->len = (uint32_t)(q - p);
    return q;
}

/* Parses one value at p into node idx, its text span included; returns the
 * byte after it, or NULL when the text is not JSON (or too deep, or out of
 * memory). Bounds are checked everywhere, so unvalidated input cannot make
 * it over-read. */
static const char *pe_value(sl_evview *ev, const char *p, const char *end, uint32_t idx, int depth)
{
    p = skip_ws(p, end);
    const char *q = pe_value_at(ev, p, end, idx, depth);
    if (q) {
        ev->v[idx].raw = p;
        ev->v[idx].raw_len = (uint32_t)(q - p);
    }
    return q;
}

int sl_evview_parse(sl_evview *ev, const char *json, size_t len, bool validate, sl_error *err)
{
    if (!ev->v)
        pe_reset(ev);
    if (validate) {
        sl_json_tok tok;
        int rc = sl_json_validate(json, len, SL_JSON_DEPTH_LIMIT, &tok, err);
        if (rc)
            return rc;
        if (tok.type != SL_JSON_OBJECT)
            return sl_error_set(err, SL_EINVAL, "event must be a JSON object, not %s",
                                sl_json_type_name(tok.type));
    }
    pe_reset(ev);
    if (len > UINT32_MAX)
        return sl_error_set(err, SL_ETOOBIG, "event over 4 GiB");
    /* Decoded strings never outgrow the text they come from. */
    if (ev->scratch_cap < len) {
        char *g = realloc(ev->scratch, len);
        if (!g && len)
            return sl_error_set(err, SL_ENOMEM, "out of memory parsing the event");
        ev->scratch = g;
        ev->scratch_cap = len;
    }
    uint32_t root = pe_new(ev);
    const char *end = json + len;
    const char *p = root == SL_EVVIEW_NONE ? NULL : pe_value(ev, json, end, root, 1);
    if (!p || skip_ws(p, end) != end) {
        if (ev->oom)
            return sl_error_set(err, SL_ENOMEM, "out of memory parsing the event");
        return sl_error_set(err, SL_EPARSE, "the event is not valid JSON");
    }
    if (ev->v[root].type != SL_JSON_OBJECT)
        return sl_error_set(err, SL_EINVAL, "event must be a JSON object");
    return 0;
}

double sl_evview_num(const sl_evview_value *v)
{
    return pe_number(v->s, v->len);
}
