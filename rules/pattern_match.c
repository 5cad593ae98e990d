/*
 * rules/pattern_match.c — the matcher: a compiled pattern against an event parsed
 * once (rules/evview.h), without allocating; sl_pattern_match() parses the
 * event text itself.
 */
#include "rules/pattern_internal.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"

/* ---- matching ----------------------------------------------------------- */

/* One decoded leaf value of the event. */
typedef struct scalar {
    sl_json_type type;
    const char *s; /* string bytes (decoded), or the number's JSON text */
    size_t len;
    double num;
} scalar;

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

static bool eq_ic(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
            return false;
    return true;
}

static bool wildcard_match(const matcher *m, const char *s, size_t len)
{
    const piece *p = m->pieces;
    size_t k = m->npieces;
    if (k == 1)
        return len == p[0].len && memcmp(s, p[0].s, len) == 0;
    if (len < p[0].len + p[k - 1].len)
        return false;
    if (memcmp(s, p[0].s, p[0].len) != 0 ||
        memcmp(s + len - p[k - 1].len, p[k - 1].s, p[k - 1].len) != 0)
        return false;
    /* Middle runs, leftmost first, within what the first and last leave. */
    const char *cur = s + p[0].len, *end = s + len - p[k - 1].len;
    for (size_t i = 1; i + 1 < k; i++) {
        if (p[i].len == 0)
            continue;
        const char *hit = memmem(cur, (size_t)(end - cur), p[i].s, p[i].len);
        if (!hit)
            return false;
        cur = hit + p[i].len;
    }
    return true;
}

static bool cidr_match(const matcher *m, const char *s, size_t len)
{
    char buf[INET6_ADDRSTRLEN + 1];
    unsigned char a[16];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (inet_pton(m->family == 4 ? AF_INET : AF_INET6, buf, a) != 1 ||
        (m->family == 6 && memchr(buf, '.', len)))
        return false;
    unsigned full = m->bits / 8, rest = m->bits % 8;
    if (memcmp(a, m->addr, full) != 0)
        return false;
    if (rest) {
        unsigned char mask = (unsigned char)(0xFFu << (8 - rest));
        if ((a[full] & mask) != m->addr[full])
            return false;
    }
    return true;
}

/* An ignore-case operand (with non-ASCII characters) against the event's
 * characters from s on: n characters must match, each as written, lower- or
 * upper-cased; *end (if any) receives where the match stopped. */
static bool fold_run(const matcher *m, const char *s, const char *e, const char **end)
{
    const unsigned char *p = (const unsigned char *)s, *pe = (const unsigned char *)e;
    for (size_t i = 0; i < m->nfold; i++) {
        if (p >= pe)
            return false;
        uint32_t c = sl__pattern_utf8_next(&p);
        const uint32_t *t = &m->fold[i * 3];
        if (c != t[0] && c != t[1] && c != t[2])
            return false;
    }
    if (end)
        *end = (const char *)p;
    return true;
}

static bool ic_match(const matcher *m, const char *s, size_t len, mkind how)
{
    if (!m->fold) { /* ASCII operand: bytewise */
        if (how == M_EQ_IC ? len != m->slen : len < m->slen)
            return false;
        return eq_ic(how == M_SUFFIX_IC ? s + len - m->slen : s, m->s, m->slen);
    }
    const char *e = s + len, *stop;
    if (how == M_SUFFIX_IC) { /* start of the last nfold characters */
        const char *b = e;
        for (size_t k = 0; k < m->nfold; k++) {
            if (b == s)
                return false;
            do
                b--;
            while (b > s && ((unsigned char)*b & 0xc0) == 0x80);
        }
        return fold_run(m, b, e, NULL);
    }
    if (!fold_run(m, s, e, &stop))
        return false;
    return how == M_PREFIX_IC || stop == e;
}

static bool matcher_scalar(const matcher *m, const scalar *v)
{
    bool str = v->type == SL_JSON_STRING;
    switch (m->kind) {
    case M_STR:
        return str && v->len == m->slen && memcmp(v->s, m->s, v->len) == 0;
    case M_NUM:
        return v->type == SL_JSON_NUMBER && v->len == m->slen && memcmp(v->s, m->s, v->len) == 0;
    case M_NUMVAL:
        return v->type == SL_JSON_NUMBER && v->num == m->num;
    case M_TRUE:
        return v->type == SL_JSON_TRUE;
    case M_FALSE:
        return v->type == SL_JSON_FALSE;
    case M_NULL:
        return v->type == SL_JSON_NULL;
    case M_PREFIX:
        return str && v->len >= m->slen && memcmp(v->s, m->s, m->slen) == 0;
    case M_SUFFIX:
        return str && v->len >= m->slen && memcmp(v->s + v->len - m->slen, m->s, m->slen) == 0;
    case M_PREFIX_IC:
    case M_SUFFIX_IC:
    case M_EQ_IC:
        return str && ic_match(m, v->s, v->len, m->kind);
    case M_WILDCARD:
        return str && wildcard_match(m, v->s, v->len);
    case M_NUMERIC:
        /* Numeric matching is limited to -5e9..5e9: numbers outside never match. */
        if (v->type != SL_JSON_NUMBER || !(v->num >= -NUM_LIMIT && v->num <= NUM_LIMIT))
            return false;
        if (m->has_lo && (m->lo_incl ? v->num < m->lo : v->num <= m->lo))
            return false;
        if (m->has_hi && (m->hi_incl ? v->num > m->hi : v->num >= m->hi))
            return false;
        return true;
    case M_CIDR:
        return str && cidr_match(m, v->s, v->len);
    case M_ANYBUT:
        /* Anything but the listed values: every other leaf value matches,
         * whatever its type (the subs only match their own types). */
        for (size_t i = 0; i < m->nsubs; i++)
            if (matcher_scalar(&m->subs[i], v))
                return false;
        return true;
    case M_EXISTS:
        return false; /* handled by the caller */
    }
    return false;
}

/* ---- matching over a parsed event ---------------------------------------- */

static bool leaf_scalar(const field *f, const sl_evview_value *pv)
{
    scalar v = {pv->type, pv->s, pv->len, 0};
    if (pv->type == SL_JSON_NUMBER) /* only numeric matchers need the value */
        for (size_t i = 0; i < f->nm; i++)
            if (f->m[i].kind == M_NUMERIC || f->m[i].kind == M_NUMVAL ||
                (f->m[i].kind == M_ANYBUT && f->m[i].nsubs)) {
                v.num = sl_evview_num(pv);
                break;
            }
    for (size_t i = 0; i < f->nm; i++)
        if (f->m[i].kind != M_EXISTS && matcher_scalar(&f->m[i], &v))
            return true;
    return false;
}

/* Whether a non-exists matcher of f matches a leaf of value i (arrays are
 * searched element by element, nested arrays too); *has_leaf is set when
 * the value holds a leaf. */
static bool leaf_any(const field *f, const sl_evview *ev, uint32_t i, bool *has_leaf)
{
    const sl_evview_value *v = &ev->v[i];
    if (v->type == SL_JSON_OBJECT)
        return false;
    if (v->type == SL_JSON_ARRAY) {
        for (uint32_t c = v->first; c != SL_EVVIEW_NONE; c = ev->v[c].next)
            if (leaf_any(f, ev, c, has_leaf))
                return true;
        return false;
    }
    *has_leaf = true;
    return leaf_scalar(f, v);
}

/* A leaf field against value i, or against a missing field (SL_EVVIEW_NONE). */
static bool leaf_eval(const field *f, const sl_evview *ev, uint32_t i)
{
    bool has_leaf = false;
    if (i != SL_EVVIEW_NONE && leaf_any(f, ev, i, &has_leaf))
        return true;
    for (size_t k = 0; k < f->nm; k++)
        if (f->m[k].kind == M_EXISTS && f->m[k].exists == has_leaf)
            return true;
    return false;
}

static bool node_eval(const node *n, const sl_evview *ev, uint32_t i);

static bool field_eval(const field *f, const sl_evview *ev, uint32_t i)
{
    return f->child ? node_eval(f->child, ev, i) : leaf_eval(f, ev, i);
}

/* The first member named key from member c on (siblings), or SL_EVVIEW_NONE. */
static uint32_t find_member(const sl_evview *ev, const char *key, size_t klen, uint32_t c)
{
    for (; c != SL_EVVIEW_NONE; c = ev->v[c].next)
        if (ev->v[c].klen == klen && sl__pattern_key_eq(ev->v[c].key, key, klen))
            return c;
    return SL_EVVIEW_NONE;
}

/* An object pattern against value i: an array matches when one of its
 * elements does (so two fields never match from different elements);
 * anything but an object (or SL_EVVIEW_NONE) is a missing object, which only patterns
 * made of exists:false can match. */
static bool node_eval(const node *n, const sl_evview *ev, uint32_t i)
{
    if (i != SL_EVVIEW_NONE && ev->v[i].type == SL_JSON_ARRAY) {
        if (ev->v[i].first == SL_EVVIEW_NONE)
            return node_eval(n, ev, SL_EVVIEW_NONE);
        for (uint32_t c = ev->v[i].first; c != SL_EVVIEW_NONE; c = ev->v[c].next)
            if (node_eval(n, ev, c))
                return true;
        return false;
    }
    if (i != SL_EVVIEW_NONE && ev->v[i].type != SL_JSON_OBJECT)
        i = SL_EVVIEW_NONE;
    for (size_t k = 0; k < n->nf; k++) {
        const field *f = &n->f[k];
        uint32_t m =
            i == SL_EVVIEW_NONE ? SL_EVVIEW_NONE : find_member(ev, f->key, f->klen, ev->v[i].first);
        bool ok = field_eval(f, ev, m);
        /* A name repeated in the event: any of its values may match. */
        while (!ok && m != SL_EVVIEW_NONE &&
               (m = find_member(ev, f->key, f->klen, ev->v[m].next)) != SL_EVVIEW_NONE)
            ok = field_eval(f, ev, m);
        if (!ok)
            return false;
    }
    if (!n->nors)
        return true;
    for (size_t k = 0; k < n->nors; k++)
        if (node_eval(&n->ors[k], ev, i))
            return true;
    return false;
}

bool sl_pattern_match_event(const sl_pattern *p, const sl_evview *ev)
{
    return ev->n && node_eval(&p->root, ev, 0);
}

int sl_pattern_match(const sl_pattern *p, const char *event_json, size_t len, bool *matched,
                     sl_error *err)
{
    sl_evview ev;
    sl_evview_init(&ev);
    /* A small event needs no allocation: the nodes fit the inline array and
     * the scratch space only matters for escaped strings. */
    char scratch[1024];
    if (len <= sizeof scratch) {
        ev.scratch = scratch;
        ev.scratch_cap = sizeof scratch;
    }
    int rc = sl_evview_parse(&ev, event_json, len, true, err);
    if (!rc)
        *matched = sl_pattern_match_event(p, &ev);
    if (ev.scratch == scratch)
        ev.scratch = NULL;
    sl_evview_free(&ev);
    return rc;
}
