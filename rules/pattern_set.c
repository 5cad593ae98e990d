/*
 * rules/pattern_set.c — matching many patterns at once (rules/pattern_set.h):
 * one walk over the event's leaves collects the patterns whose anchors hit
 * (rules/pattern_set_internal.h says what an anchor is and why the answer is
 * the one-by-one answer), then the real matcher checks those candidates
 * only, except the "sure" ones whose anchor is the whole pattern. The set
 * is built in rules/pattern_set_build.c.
 *
 * Nothing here allocates: the scratch holds the per-pattern stamps and the
 * candidate list, and a stamp equal to the current epoch means "already a
 * candidate", so nothing is cleared between events.
 */
#include "rules/pattern_set_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "rules/pattern_internal.h"

size_t sl_pattern_set_count(const sl_pattern_set *ps)
{
    return ps->n;
}

size_t sl_pattern_set_bytes(const sl_pattern_set *ps)
{
    return ps->held;
}

sl_pattern_set_scratch *sl_pattern_set_scratch_new(const sl_pattern_set *ps)
{
    sl_pattern_set_scratch *scr = calloc(1, sizeof *scr);
    size_t n = ps->n ? ps->n : 1, np = ps->npaths ? ps->npaths : 1;
    if (!scr || !(scr->stamp = calloc(n, sizeof *scr->stamp)) ||
        !(scr->cand = calloc(n, sizeof *scr->cand)) ||
        !(scr->pstamp = calloc(np, sizeof *scr->pstamp))) {
        sl_pattern_set_scratch_free(scr);
        return NULL;
    }
    scr->n = n;
    scr->npaths = np;
    return scr;
}

void sl_pattern_set_scratch_free(sl_pattern_set_scratch *scr)
{
    if (!scr)
        return;
    free(scr->stamp);
    free(scr->pstamp);
    free(scr->cand);
    free(scr);
}

/* ---- the walk ------------------------------------------------------------------ */

typedef struct walk {
    const sl_pattern_set *ps;
    const sl_evview *ev;
    sl_pattern_set_scratch *scr;
    uint32_t epoch;
    bool path_dedupe; /* the scratch has a stamp per path of ps */
    size_t k;         /* candidates so far */
} walk;

static void add(walk *w, const uint32_t *ids, size_t n)
{
    uint32_t *stamp = w->scr->stamp, ep = w->epoch;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (stamp[id] != ep) {
            stamp[id] = ep;
            w->scr->cand[w->k++] = id;
        }
    }
}

static void add_entry(walk *w, uint32_t path, unsigned kind, const char *s, size_t len)
{
    const ps_entry *e = ps_find(w->ps, path, kind, s, len);
    if (e) /* one pattern: post0 is the pattern (pattern_set_internal.h) */
        add(w, e->npost == 1 ? &e->post0 : w->ps->post + e->post0, e->npost);
}

static unsigned char lower_ascii(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* The patterns whose intervals at path hold the number x: the region of x
 * among the path's endpoints (binary search), then its list. */
static void add_number(walk *w, const ps_num *nm, double x)
{
    const sl_pattern_set *ps = w->ps;
    const double *e = ps->ends + nm->e0;
    uint32_t lo = 0, hi = nm->m;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (e[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint32_t r = lo < nm->m && e[lo] == x ? 2 * lo + 1 : 2 * lo;
    const uint32_t *ro = ps->roff + nm->r0;
    add(w, ps->post + ro[r], ro[r + 1] - ro[r]);
}

/* A leaf value (string, number, true, false, null) at path. */
static void leaf(walk *w, const sl_evview_value *v, uint32_t path)
{
    const ps_path *P = &w->ps->paths[path];
    if (P->npres) {
        if (!w->path_dedupe) {
            add(w, w->ps->post + P->pres0, P->npres);
        } else if (w->scr->pstamp[path] != w->epoch) { /* once per event, not per element */
            w->scr->pstamp[path] = w->epoch;
            add(w, w->ps->post + P->pres0, P->npres);
        }
    }
    unsigned kinds = P->kinds;
    switch (v->type) {
    case SL_JSON_STRING:
        if (kinds & (1u << PK_STR))
            add_entry(w, path, PK_STR, v->s, v->len);
        if (kinds & (1u << PK_PREFIX)) {
            const ps_plen *pl = w->ps->plens + P->plen0;
            for (uint32_t i = 0; i < P->nplen && pl[i].len <= v->len; i++) {
                unsigned char c = (unsigned char)v->s[pl[i].len - 1];
                if (pl[i].last[c >> 6] >> (c & 63) & 1)
                    add_entry(w, path, PK_PREFIX, v->s, pl[i].len);
            }
        }
        if (kinds & (1u << PK_SUFFIX)) {
            const ps_plen *sl = w->ps->plens + P->slen0;
            for (uint32_t i = 0; i < P->nslen && sl[i].len <= v->len; i++) {
                const char *at = v->s + v->len - sl[i].len;
                unsigned char c = (unsigned char)*at;
                if (sl[i].last[c >> 6] >> (c & 63) & 1)
                    add_entry(w, path, PK_SUFFIX, at, sl[i].len);
            }
        }
        if ((kinds & (1u << PK_IC)) && v->len <= P->ic_max) {
            char low[PS_IC_MAX]; /* ic_max <= PS_IC_MAX */
            for (uint32_t i = 0; i < v->len; i++)
                low[i] = (char)lower_ascii((unsigned char)v->s[i]);
            add_entry(w, path, PK_IC, low, v->len);
        }
        break;
    case SL_JSON_NUMBER:
        if (kinds & (1u << PK_NUM))
            add_entry(w, path, PK_NUM, v->s, v->len);
        if (P->num != PS_NONE || (kinds & (1u << PK_NUMEQ))) {
            double x = sl_evview_num(v);
            /* The matcher never matches a number outside -5e9..5e9 (nor NaN). */
            if (!(x >= -NUM_LIMIT && x <= NUM_LIMIT))
                break;
            if (kinds & (1u << PK_NUMEQ)) {
                char key[sizeof x];
                x = x == 0 ? 0 : x; /* -0 == 0: one key */
                memcpy(key, &x, sizeof x);
                add_entry(w, path, PK_NUMEQ, key, sizeof key);
            }
            if (P->num != PS_NONE)
                add_number(w, &w->ps->nums[P->num], x);
        }
        break;
    case SL_JSON_TRUE:
        if (kinds & (1u << PK_TRUE))
            add_entry(w, path, PK_TRUE, NULL, 0);
        break;
    case SL_JSON_FALSE:
        if (kinds & (1u << PK_FALSE))
            add_entry(w, path, PK_FALSE, NULL, 0);
        break;
    case SL_JSON_NULL:
        if (kinds & (1u << PK_NULL))
            add_entry(w, path, PK_NULL, NULL, 0);
        break;
    default:
        break;
    }
}

/* The live child of path named key, or PS_NONE. */
static uint32_t child(const walk *w, uint32_t path, const char *key, size_t klen)
{
    const sl_pattern_set *ps = w->ps;
    const ps_path *P = &ps->paths[path];
    /* Most event keys are not a child's: a bit per child length (mod 64)
     * refuses them before anything of the key is read. */
    if (!(P->lenmask >> (klen & 63) & 1))
        return PS_NONE;
    if (P->nkids <= PS_LINEAR_KIDS) {
        /* Then length and first byte: a memcmp call costs more than the
         * whole test. */
        const ps_kid *k = ps->kids + P->kids0;
        for (uint32_t i = 0; i < P->nkids; i++) {
            if (k[i].len != klen)
                continue;
            if (klen == 0 || (k[i].c0 == (unsigned char)key[0] &&
                              sl__pattern_key_eq(ps->bytes + k[i].off, key, klen)))
                return k[i].path;
        }
        return PS_NONE;
    }
    const ps_entry *e = ps_find(ps, path, PK_CHILD, key, klen);
    return e && ps->paths[e->post0].live ? e->post0 : PS_NONE;
}

/* Value i at path: members of an object go one path down, elements of an
 * array stay at the array's path (EventBridge: a field matches when any
 * element does, at any depth of nested arrays; an object pattern matches
 * an element that is an object). */
static void visit(walk *w, uint32_t i, uint32_t path)
{
    const sl_evview *ev = w->ev;
    const sl_evview_value *v = &ev->v[i];
    if (v->type == SL_JSON_OBJECT) {
        if (!w->ps->paths[path].nkids)
            return;
        for (uint32_t c = v->first; c != SL_EVVIEW_NONE; c = ev->v[c].next) {
            uint32_t p = child(w, path, ev->v[c].key, ev->v[c].klen);
            if (p != PS_NONE)
                visit(w, c, p);
        }
    } else if (v->type == SL_JSON_ARRAY) {
        for (uint32_t c = v->first; c != SL_EVVIEW_NONE; c = ev->v[c].next)
            visit(w, c, path);
    } else {
        leaf(w, v, path);
    }
}

/* ---- candidates in order, verified ----------------------------------------------- */

static void sift(uint32_t *a, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && a[c + 1] > a[c])
            c++;
        if (a[i] >= a[c])
            return;
        uint32_t t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

/* Ascending: insertion sort for the usual handful, heapsort past it (no
 * allocation, n log n whatever the input). */
static void sort_ids(uint32_t *a, size_t n)
{
    if (n <= 24) {
        for (size_t i = 1; i < n; i++) {
            uint32_t x = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1] > x; j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    for (size_t i = n / 2; i-- > 0;)
        sift(a, i, n);
    for (size_t end = n - 1; end > 0; end--) {
        uint32_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift(a, 0, end);
    }
}

size_t sl_pattern_set_match(const sl_pattern_set *ps, const sl_evview *ev,
                            sl_pattern_set_scratch *scr, uint32_t *out)
{
    if (++scr->epoch == 0) { /* wrapped: stamps from 2^32 events ago would look current */
        memset(scr->stamp, 0, scr->n * sizeof *scr->stamp);
        memset(scr->pstamp, 0, scr->npaths * sizeof *scr->pstamp);
        scr->epoch = 1;
    }
    walk w = {ps, ev, scr, scr->epoch, scr->npaths >= ps->npaths, 0};
    add(&w, ps->always, ps->nalways);
    if (ev->n && ps->paths[0].live)
        visit(&w, 0, 0);
    uint32_t *cand = scr->cand;
    size_t k = w.k;
    if (k * 8 >= ps->n && k > 24) {
        /* Most patterns are candidates: reading the stamps in order is
         * cheaper than sorting. */
        k = 0;
        for (size_t i = 0; i < ps->n; i++)
            if (scr->stamp[i] == w.epoch)
                cand[k++] = (uint32_t)i;
    } else {
        sort_ids(cand, k);
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        const sl_pattern *p = ps->pats[cand[i]];
        if (!p || ps->sure[cand[i]] || sl_pattern_match_event(p, ev))
            out[m++] = cand[i];
    }
    return m;
}
