/*
 * rules/pattern_set_build.c — building a pattern set (rules/pattern_set.h):
 * the anchors of every pattern, the interned field paths and the indexes
 * the matcher (rules/pattern_set.c) looks them up in. The layout and the
 * reasoning are in rules/pattern_set_internal.h.
 *
 * Soundness, the one thing that must hold: a pattern that matches an event
 * has at least one anchor that hits in it. The rules below follow the
 * matcher (rules/pattern_match.c):
 *  - A node matches only when every field matches and (without $or) or one
 *    alternative of its $or matches. So ONE field's anchors suffice, or the
 *    union of the anchors of every $or alternative (when each has some).
 *  - A leaf field matches only through a leaf value at its path (arrays
 *    searched element by element), except exists:false, which matches when
 *    nothing is there: a field with exists:false has no anchor.
 *  - A nested object matches only where its own anchors hit (its fields
 *    are at longer paths; arrays on the way keep the path).
 * Each matcher of a leaf gives an anchor that holds whenever it matches:
 * exact values their value; prefix and suffix theirs; a wildcard its
 * literal head; ASCII equals-ignore-case its lowered operand; numeric its
 * interval; and everything else (cidr, anything-but, exists:true, non-ASCII
 * ignore-case, …) "some leaf value at this path", which always holds when
 * such a matcher matches. Among the anchorable fields of a node the
 * cheapest (most selective) is chosen by the costs below.
 */
#include "rules/pattern_internal.h"
#include "rules/pattern_set_internal.h"

#include "core/base/buf.h"

#include <stdlib.h>
#include <string.h>

/* Costs of an anchor, to choose among a node's fields: roughly how often
 * the anchor will make the pattern a candidate that then fails. An exact
 * key hits only its value; a prefix a range of values; an interval a range
 * of numbers; "present" every event with the field (type, source: all). */
#define COST_HASH 1
#define COST_PREFIX 2
#define COST_RANGE 4
#define COST_PRESENT 256
#define COST_INF UINT32_MAX

/* Prefixes up to this long are hashed (their length is noted in 24 bits,
 * beside the last byte); longer ones are anchored as present. */
#define PS_PREFIX_MAX ((1u << 24) - 1)

/* Elementary regions of one path's intervals may list at most this many
 * patterns per interval on average (plus a constant); past it (many wide,
 * overlapping ranges) the path's numeric patterns are anchored as present,
 * which keeps memory linear in the number of patterns. */
#define NUM_SPREAD 64
#define NUM_SLACK 4096

enum { AN_HASH, AN_PRESENT, AN_RANGE };

/* An anchor while building: one of the three forms. */
typedef struct banchor {
    uint8_t how;  /* AN_ */
    uint8_t kind; /* PK_ for AN_HASH */
    uint32_t path;
    const char *s; /* AN_HASH bytes (PK_IC: not lowered yet) */
    uint32_t len;
    const matcher *m; /* AN_RANGE: the numeric matcher */
} banchor;

typedef struct binterval {
    uint32_t path, pat;
    double lo, hi;
    bool lo_incl, hi_incl;
} binterval;

typedef struct bpair {
    uint32_t a, b;
} bpair;

/* The builder's growing arrays; what ends in the set is moved into it. */
typedef struct builder {
    sl_pattern_set *ps;
    size_t cap_paths, cap_entries, cap_bytes;
    uint32_t *parent; /* per path (build only) */
    uint32_t *name;   /* per path: its PK_CHILD entry */
    size_t cap_parent, cap_name;
    uint32_t *last; /* per entry: the last pattern posted (dedupe) */
    size_t cap_last;
    uint32_t *count; /* per entry: patterns that could anchor on it (census) */
    size_t cap_count;
    bool census;  /* first pass: count the keys, choose nothing */
    uint32_t pat; /* the pattern being looked at */
    banchor *tmp;
    size_t ntmp, cap_tmp;
    bpair *hits; /* (entry, pattern) */
    size_t nhits, cap_hits;
    bpair *pres; /* (path, pattern) */
    size_t npres, cap_pres;
    bpair *plen; /* (path, prefix length << 8 | its last byte) */
    size_t nplen, cap_plen;
    bpair *slen; /* (path, suffix length << 8 | its first byte) */
    size_t nslen, cap_slen;
    binterval *ivs;
    size_t nivs, cap_ivs;
} builder;

#define PUSH(arr, n, cap) ((n) < (cap) || SL_GROW(arr, cap, 16) == 0 ? 0 : SL_ENOMEM)

/* ---- the hash table ---------------------------------------------------------- */

static int table_grow(builder *B)
{
    sl_pattern_set *ps = B->ps;
    size_t cap = ps->slots ? (ps->mask + 1) * 2 : 64;
    ps_slot *s = malloc(cap * sizeof *s);
    if (!s)
        return SL_ENOMEM;
    for (size_t i = 0; i < cap; i++)
        s[i].entry = PS_NONE;
    for (size_t k = 0; k < ps->nentries; k++) {
        const ps_entry *e = &ps->entries[k];
        uint64_t h = ps_hash(e->path, e->kind, ps->bytes + e->off, e->len);
        size_t i = (size_t)h & (cap - 1);
        while (s[i].entry != PS_NONE)
            i = (i + 1) & (cap - 1);
        s[i] = (ps_slot){(uint32_t)k, (uint32_t)(h >> 32)};
    }
    free(ps->slots);
    ps->slots = s;
    ps->mask = cap - 1;
    return 0;
}

/* The entry of (path, kind, bytes), added when missing; *out its number. */
static int table_get(builder *B, uint32_t path, unsigned kind, const char *s, size_t len,
                     uint32_t *out)
{
    sl_pattern_set *ps = B->ps;
    if (len > UINT32_MAX / 2 || ps->nbytes + len > UINT32_MAX || ps->nentries >= PS_NONE - 1)
        return SL_ENOMEM; /* offsets and numbers are 32 bits */
    const ps_entry *f = ps->slots ? ps_find(ps, path, kind, s, len) : NULL;
    if (f) {
        *out = (uint32_t)(f - ps->entries);
        return 0;
    }
    if ((!ps->slots || (ps->nentries + 1) * 2 > ps->mask + 1) && table_grow(B))
        return SL_ENOMEM;
    while (B->cap_bytes - ps->nbytes < len)
        if (SL_GROW(ps->bytes, B->cap_bytes, 256))
            return SL_ENOMEM;
    if (PUSH(ps->entries, ps->nentries, B->cap_entries))
        return SL_ENOMEM;
    while (B->cap_last <= ps->nentries)
        if (SL_GROW(B->last, B->cap_last, 16))
            return SL_ENOMEM;
    while (B->cap_count <= ps->nentries)
        if (SL_GROW(B->count, B->cap_count, 16))
            return SL_ENOMEM;
    uint32_t k = (uint32_t)ps->nentries++;
    if (len)
        memcpy(ps->bytes + ps->nbytes, s, len);
    ps->entries[k] = (ps_entry){.head = len <= 8 ? ps_word(s, len) : 0,
                                .path = path,
                                .off = (uint32_t)ps->nbytes,
                                .len = (uint32_t)len,
                                .kind = (uint8_t)kind,
                                .post0 = PS_NONE};
    ps->nbytes += len;
    B->last[k] = PS_NONE;
    B->count[k] = 0;
    uint64_t h = ps_hash(path, kind, s, len);
    size_t i = (size_t)h & ps->mask;
    while (ps->slots[i].entry != PS_NONE)
        i = (i + 1) & ps->mask;
    ps->slots[i] = (ps_slot){k, (uint32_t)(h >> 32)};
    *out = k;
    return 0;
}

/* The path (parent, key), interned on first use. */
static int intern(builder *B, uint32_t parent, const char *key, size_t klen, uint32_t *out)
{
    sl_pattern_set *ps = B->ps;
    uint32_t e;
    if (table_get(B, parent, PK_CHILD, key, klen, &e))
        return SL_ENOMEM;
    if (ps->entries[e].post0 != PS_NONE) {
        *out = ps->entries[e].post0;
        return 0;
    }
    if (PUSH(ps->paths, ps->npaths, B->cap_paths) || PUSH(B->parent, ps->npaths, B->cap_parent) ||
        PUSH(B->name, ps->npaths, B->cap_name))
        return SL_ENOMEM;
    uint32_t p = (uint32_t)ps->npaths++;
    ps->paths[p] = (ps_path){.num = PS_NONE};
    B->parent[p] = parent;
    B->name[p] = e;
    ps->entries[e].post0 = p;
    *out = p;
    return 0;
}

/* ---- choosing anchors ---------------------------------------------------------- */

static uint32_t add_cost(uint32_t a, uint32_t b)
{
    if (a == COST_INF || b == COST_INF)
        return COST_INF;
    return a >= COST_INF - 1 - b ? COST_INF - 1 : a + b; /* saturates below "none" */
}

static unsigned char lower_ascii(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* The table entry of a hash anchor (the key as stored: ignore-case
 * operands lowered, numeric = as its double), added when missing. */
static int anchor_entry(builder *B, const banchor *a, uint32_t *e)
{
    char key[PS_IC_MAX];
    const char *s = a->s;
    if (a->kind == PK_NUMEQ) { /* the matcher compares doubles: -0 == 0 */
        double x = a->m->lo == 0 ? 0 : a->m->lo;
        memcpy(key, &x, sizeof x);
        s = key;
    } else if (a->kind == PK_IC) {
        for (uint32_t i = 0; i < a->len; i++)
            key[i] = (char)lower_ascii((unsigned char)a->s[i]);
        s = key;
    }
    return table_get(B, a->path, a->kind, s, a->len, e);
}

static int push_anchor(builder *B, banchor a)
{
    if (PUSH(B->tmp, B->ntmp, B->cap_tmp))
        return SL_ENOMEM;
    B->tmp[B->ntmp++] = a;
    return 0;
}

/* The anchor of one matcher at path (appended to B->tmp); its cost, or
 * COST_INF when the matcher has none (exists:false). *present is set when
 * the anchor is "a leaf value at path". */
static int matcher_anchor(builder *B, const matcher *m, uint32_t path, uint32_t *cost,
                          bool *present)
{
    banchor a = {.how = AN_HASH, .path = path};
    *cost = COST_HASH;
    switch (m->kind) {
    case M_STR:
        a.kind = PK_STR;
        a.s = m->s;
        a.len = (uint32_t)m->slen;
        break;
    case M_NUM:
        a.kind = PK_NUM;
        a.s = m->s;
        a.len = (uint32_t)m->slen;
        break;
    case M_TRUE:
        a.kind = PK_TRUE;
        break;
    case M_FALSE:
        a.kind = PK_FALSE;
        break;
    case M_NULL:
        a.kind = PK_NULL;
        break;
    case M_PREFIX:
        if (m->slen == 0 || m->slen > PS_PREFIX_MAX)
            goto present; /* every string; or too long to note its length */
        a.kind = PK_PREFIX;
        a.s = m->s;
        a.len = (uint32_t)m->slen;
        *cost = COST_PREFIX;
        break;
    case M_SUFFIX:
        if (m->slen == 0 || m->slen > PS_PREFIX_MAX)
            goto present;
        a.kind = PK_SUFFIX;
        a.s = m->s;
        a.len = (uint32_t)m->slen;
        *cost = COST_PREFIX;
        break;
    case M_WILDCARD:
        /* No star: the string itself. A literal head: a prefix. */
        if (m->npieces == 1) {
            a.kind = PK_STR;
        } else if (m->pieces[0].len && m->pieces[0].len <= PS_PREFIX_MAX) {
            a.kind = PK_PREFIX;
            *cost = COST_PREFIX;
        } else {
            goto present;
        }
        a.s = m->pieces[0].s;
        a.len = (uint32_t)m->pieces[0].len;
        break;
    case M_EQ_IC:
        if (m->fold || m->slen > PS_IC_MAX)
            goto present;
        a.kind = PK_IC;
        a.s = m->s;
        a.len = (uint32_t)m->slen;
        break;
    case M_NUMERIC:
        if (m->has_lo && m->has_hi && m->lo == m->hi) { /* "=": a hash key, no search */
            a.kind = PK_NUMEQ;
            a.m = m;
            a.len = sizeof(double);
            break;
        }
        a.how = AN_RANGE;
        a.m = m;
        *cost = COST_RANGE;
        break;
    case M_EXISTS:
        if (!m->exists) {
            *cost = COST_INF;
            return 0;
        }
        goto present;
    default: /* prefix/suffix ignore-case, cidr, anything-but, … */
        goto present;
    }
    *present = false;
    if (a.how == AN_HASH) {
        /* A key many patterns could anchor on is probably a common value
         * (type: order.created), and each hit makes all of them
         * candidates: its cost grows with their number (counted in the
         * census pass), staying below that of "present". */
        uint32_t e;
        if (anchor_entry(B, &a, &e))
            return SL_ENOMEM;
        if (B->census) {
            if (B->last[e] != B->pat) {
                B->last[e] = B->pat;
                B->count[e]++;
            }
        } else {
            uint64_t c = (uint64_t)*cost * (B->count[e] ? B->count[e] : 1);
            *cost = c < COST_PRESENT ? (uint32_t)c : COST_PRESENT - 1;
        }
    }
    return push_anchor(B, a);
present:
    *present = true;
    *cost = COST_PRESENT;
    return push_anchor(B, (banchor){.how = AN_PRESENT, .path = path});
}

static int node_anchor(builder *B, const node *n, uint32_t path, uint32_t *cost);

/* The anchors of field f under path (appended to B->tmp) and their cost. */
static int field_anchor(builder *B, const field *f, uint32_t parent, uint32_t *cost)
{
    uint32_t path;
    if (intern(B, parent, f->key, f->klen, &path))
        return SL_ENOMEM;
    if (f->child)
        return node_anchor(B, f->child, path, cost);
    size_t start = B->ntmp;
    uint32_t sum = 0;
    bool any_present = false;
    for (size_t i = 0; i < f->nm; i++) {
        uint32_t c;
        bool pr;
        if (matcher_anchor(B, &f->m[i], path, &c, &pr))
            return SL_ENOMEM;
        if (c == COST_INF) {
            B->ntmp = start;
            *cost = COST_INF;
            return 0;
        }
        any_present |= pr;
        sum = add_cost(sum, c);
    }
    if (any_present) { /* "a value here" covers every other matcher of the field */
        B->ntmp = start;
        *cost = COST_PRESENT;
        return push_anchor(B, (banchor){.how = AN_PRESENT, .path = path});
    }
    *cost = sum;
    return 0;
}

/* The cheapest sound anchor set of node n at path, appended to B->tmp
 * (nothing when *cost is COST_INF). Each candidate is computed after the
 * best so far and moved down over it when cheaper. */
static int node_anchor(builder *B, const node *n, uint32_t path, uint32_t *cost)
{
    size_t start = B->ntmp;
    uint32_t best = COST_INF;
    for (size_t i = 0; i <= n->nf; i++) {
        if (i == n->nf && !n->nors)
            break;
        size_t from = B->ntmp;
        uint32_t c = 0;
        if (i < n->nf) {
            if (field_anchor(B, &n->f[i], path, &c))
                return SL_ENOMEM;
        } else { /* $or: every alternative must have anchors */
            for (size_t k = 0; k < n->nors && c != COST_INF; k++) {
                uint32_t a;
                if (node_anchor(B, &n->ors[k], path, &a))
                    return SL_ENOMEM;
                c = add_cost(c, a);
            }
        }
        if (c < best) {
            size_t len = B->ntmp - from;
            if (len)
                memmove(B->tmp + start, B->tmp + from, len * sizeof *B->tmp);
            B->ntmp = start + len;
            best = c;
        } else {
            B->ntmp = from;
        }
    }
    if (best == COST_INF)
        B->ntmp = start;
    *cost = best;
    return 0;
}

/* ---- patterns their anchors decide ------------------------------------------------ */

/* Whether a leaf field matches exactly when its anchors hit: every matcher
 * is one whose anchor is the test itself (an exact value, a non-empty
 * prefix or suffix, an ASCII ignore-case value, numeric, a wildcard without
 * a star), or one of them is exists:true, whose "present" anchor is the
 * test itself and makes the others moot. */
static bool sure_field(const field *f)
{
    bool exists = false;
    for (size_t i = 0; i < f->nm; i++)
        if (f->m[i].kind == M_EXISTS) {
            if (!f->m[i].exists)
                return false;
            exists = true;
        }
    if (exists)
        return true;
    for (size_t i = 0; i < f->nm; i++) {
        const matcher *m = &f->m[i];
        switch (m->kind) {
        case M_STR:
        case M_NUM:
        case M_TRUE:
        case M_FALSE:
        case M_NULL:
        case M_NUMERIC:
            break;
        case M_PREFIX:
        case M_SUFFIX:
            if (m->slen == 0 || m->slen > PS_PREFIX_MAX)
                return false;
            break;
        case M_EQ_IC:
            if (m->fold || m->slen > PS_IC_MAX)
                return false;
            break;
        case M_WILDCARD:
            if (m->npieces != 1)
                return false;
            break;
        default:
            return false;
        }
    }
    return true;
}

/* Whether pattern node n needs no check after its anchors hit: one field
 * per object all the way down, no $or, and a sure leaf. The walk reaches a
 * path exactly where the matcher looks (members by name, duplicates, arrays
 * element by element at any depth, objects in arrays), so a hit at the
 * leaf's path is a match. */
static bool sure_node(const node *n)
{
    if (n->nf != 1 || n->nors)
        return false;
    return n->f[0].child ? sure_node(n->f[0].child) : sure_field(&n->f[0]);
}

/* ---- recording a pattern's anchors ----------------------------------------------- */

static int record(builder *B, const banchor *a, uint32_t pat)
{
    sl_pattern_set *ps = B->ps;
    ps_path *P = &ps->paths[a->path];
    if (a->how == AN_PRESENT) {
        if (PUSH(B->pres, B->npres, B->cap_pres))
            return SL_ENOMEM;
        B->pres[B->npres++] = (bpair){a->path, pat};
        return 0;
    }
    if (a->how == AN_RANGE) {
        const matcher *m = a->m;
        if (PUSH(B->ivs, B->nivs, B->cap_ivs))
            return SL_ENOMEM;
        /* A missing bound is the limit itself, inclusive: numbers outside
         * -5e9..5e9 never match (and are never looked up). */
        B->ivs[B->nivs++] = (binterval){a->path,
                                        pat,
                                        m->has_lo ? m->lo : -NUM_LIMIT,
                                        m->has_hi ? m->hi : NUM_LIMIT,
                                        m->has_lo ? m->lo_incl : true,
                                        m->has_hi ? m->hi_incl : true};
        return 0;
    }
    if (a->kind == PK_IC && a->len > P->ic_max)
        P->ic_max = a->len;
    uint32_t e;
    if (anchor_entry(B, a, &e))
        return SL_ENOMEM;
    P = &ps->paths[a->path];
    P->kinds |= (uint16_t)(1u << a->kind);
    if (a->kind == PK_PREFIX) {
        if (PUSH(B->plen, B->nplen, B->cap_plen))
            return SL_ENOMEM;
        /* length << 8 | last byte; lengths fit (PS_PREFIX_MAX) */
        B->plen[B->nplen++] = (bpair){a->path, a->len << 8 | (unsigned char)a->s[a->len - 1]};
    } else if (a->kind == PK_SUFFIX) {
        if (PUSH(B->slen, B->nslen, B->cap_slen))
            return SL_ENOMEM;
        B->slen[B->nslen++] = (bpair){a->path, a->len << 8 | (unsigned char)a->s[0]};
    }
    if (B->last[e] == pat) /* the same key twice in one pattern */
        return 0;
    B->last[e] = pat;
    if (PUSH(B->hits, B->nhits, B->cap_hits))
        return SL_ENOMEM;
    B->hits[B->nhits++] = (bpair){e, pat};
    return 0;
}

/* ---- finishing: the postings and the per-path indexes ---------------------------- */

static int cmp_pair(const void *x, const void *y)
{
    const bpair *a = x, *b = y;
    if (a->a != b->a)
        return a->a < b->a ? -1 : 1;
    return a->b < b->b ? -1 : a->b > b->b;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static int cmp_iv(const void *x, const void *y)
{
    const binterval *a = x, *b = y;
    if (a->path != b->path)
        return a->path < b->path ? -1 : 1;
    return a->pat < b->pat ? -1 : a->pat > b->pat;
}

/* The index of x in the sorted distinct e[0..m) (x is one of them). */
static uint32_t end_index(const double *e, uint32_t m, double x)
{
    uint32_t lo = 0, hi = m;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (e[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void iv_regions(const binterval *v, const double *e, uint32_t m, uint32_t *from,
                       uint32_t *to)
{
    uint32_t a = end_index(e, m, v->lo), b = end_index(e, m, v->hi);
    *from = v->lo_incl ? 2 * a + 1 : 2 * a + 2;
    *to = v->hi_incl ? 2 * b + 1 : 2 * b;
}

/* Cuts the intervals of one path, ivs[0..k), into elementary regions; the
 * path's patterns become present anchors instead when the regions would
 * list too many (see NUM_SPREAD). Postings go to post (grown). */
static int build_num(builder *B, uint32_t path, const binterval *ivs, size_t k, size_t *cap_ends,
                     size_t *cap_roff, size_t *cap_nums, size_t *cap_post)
{
    sl_pattern_set *ps = B->ps;
    size_t e0 = ps->nends;
    while (*cap_ends < e0 + 2 * k)
        if (SL_GROW(ps->ends, *cap_ends, 64))
            return SL_ENOMEM;
    double *e = ps->ends + e0;
    for (size_t i = 0; i < k; i++) {
        e[2 * i] = ivs[i].lo;
        e[2 * i + 1] = ivs[i].hi;
    }
    qsort(e, 2 * k, sizeof *e, cmp_double);
    uint32_t m = 0;
    for (size_t i = 0; i < 2 * k; i++)
        if (m == 0 || e[i] != e[m - 1])
            e[m++] = e[i];
    size_t total = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t f, t;
        iv_regions(&ivs[i], e, m, &f, &t);
        total += t >= f ? t - f + 1 : 0;
    }
    if (total > NUM_SPREAD * k + NUM_SLACK) {
        for (size_t i = 0; i < k; i++) {
            if (PUSH(B->pres, B->npres, B->cap_pres))
                return SL_ENOMEM;
            B->pres[B->npres++] = (bpair){path, ivs[i].pat};
            ps->sure[ivs[i].pat] = 0; /* "present" is not the range itself */
        }
        return 0;
    }
    uint32_t nreg = 2 * m + 1;
    size_t r0 = ps->nroff;
    while (*cap_roff < r0 + nreg + 1)
        if (SL_GROW(ps->roff, *cap_roff, 64))
            return SL_ENOMEM;
    while (*cap_post < ps->npost + total)
        if (SL_GROW(ps->post, *cap_post, 64))
            return SL_ENOMEM;
    if (PUSH(ps->nums, ps->nnums, *cap_nums))
        return SL_ENOMEM;
    uint32_t *roff = ps->roff + r0;
    memset(roff, 0, (nreg + 1) * sizeof *roff);
    for (size_t i = 0; i < k; i++) {
        uint32_t f, t;
        iv_regions(&ivs[i], e, m, &f, &t);
        for (uint32_t r = f; r <= t; r++)
            roff[r + 1]++;
    }
    roff[0] = (uint32_t)ps->npost;
    for (uint32_t r = 0; r < nreg; r++)
        roff[r + 1] += roff[r];
    /* Fill with a moving cursor per region: roff[r] is advanced while
     * filling and restored from its neighbour after (patterns ascending,
     * since ivs is sorted by pattern within the path). */
    for (size_t i = 0; i < k; i++) {
        uint32_t f, t;
        iv_regions(&ivs[i], e, m, &f, &t);
        for (uint32_t r = f; r <= t; r++)
            ps->post[roff[r]++] = ivs[i].pat;
    }
    for (uint32_t r = nreg; r > 0; r--)
        roff[r] = roff[r - 1];
    roff[0] = (uint32_t)ps->npost;
    ps->npost += total;
    ps->nends = e0 + m;
    ps->nroff = r0 + nreg + 1;
    ps->nums[ps->nnums] = (ps_num){(uint32_t)e0, m, (uint32_t)r0};
    ps->paths[path].num = (uint32_t)ps->nnums++;
    return 0;
}

/* The distinct prefix (or suffix) lengths of each path, ascending, from
 * pairs (path, length << 8 | byte): one ps_plen per (path, length) with a
 * bit for each byte the prefixes of that length end with (the suffixes
 * start with). */
static int build_lens(builder *B, bpair *pairs, size_t n, bool suffix, size_t *cap)
{
    sl_pattern_set *ps = B->ps;
    if (n)
        qsort(pairs, n, sizeof *pairs, cmp_pair);
    for (size_t i = 0; i < n; i++) {
        uint32_t len = pairs[i].b >> 8, byte = pairs[i].b & 0xff;
        ps_path *P = &ps->paths[pairs[i].a];
        uint32_t *first = suffix ? &P->slen0 : &P->plen0, *count = suffix ? &P->nslen : &P->nplen;
        /* pairs of one path are consecutive, so a path's last length is
         * the array's last entry */
        if (!*count || ps->plens[ps->nplens - 1].len != len) {
            if (PUSH(ps->plens, ps->nplens, *cap))
                return SL_ENOMEM;
            if (!*count)
                *first = (uint32_t)ps->nplens;
            (*count)++;
            ps->plens[ps->nplens++] = (ps_plen){.len = len};
        }
        ps->plens[ps->nplens - 1].last[byte >> 6] |= 1ull << (byte & 63);
    }
    return 0;
}

static int finish(builder *B)
{
    sl_pattern_set *ps = B->ps;
    size_t cap_post = 0, cap_ends = 0, cap_roff = 0, cap_nums = 0;
    /* Postings of the hash keys: counted, then filled in pattern order. */
    size_t nhits = B->nhits;
    while (cap_post < nhits + 1)
        if (SL_GROW(ps->post, cap_post, 64))
            return SL_ENOMEM;
    for (size_t k = 0; k < ps->nentries; k++)
        if (ps->entries[k].kind != PK_CHILD)
            ps->entries[k].post0 = ps->entries[k].npost = 0;
    for (size_t i = 0; i < nhits; i++)
        ps->entries[B->hits[i].a].npost++;
    uint32_t at = 0;
    for (size_t k = 0; k < ps->nentries; k++)
        if (ps->entries[k].kind != PK_CHILD) {
            ps->entries[k].post0 = at;
            at += ps->entries[k].npost;
            ps->entries[k].npost = 0;
        }
    for (size_t i = 0; i < nhits; i++) { /* hits are in pattern order: lists ascend */
        ps_entry *e = &ps->entries[B->hits[i].a];
        ps->post[e->post0 + e->npost++] = B->hits[i].b;
    }
    ps->npost = nhits;
    for (size_t k = 0; k < ps->nentries; k++) { /* one pattern: in the entry itself */
        ps_entry *e = &ps->entries[k];
        if (e->kind != PK_CHILD && e->npost == 1)
            e->post0 = ps->post[e->post0];
    }
    /* Numeric intervals, path by path. */
    if (B->nivs) /* qsort's array must not be NULL, even empty */
        qsort(B->ivs, B->nivs, sizeof *B->ivs, cmp_iv);
    for (size_t i = 0, j; i < B->nivs; i = j) {
        for (j = i + 1; j < B->nivs && B->ivs[j].path == B->ivs[i].path; j++)
            ;
        if (build_num(B, B->ivs[i].path, B->ivs + i, j - i, &cap_ends, &cap_roff, &cap_nums,
                      &cap_post))
            return SL_ENOMEM;
    }
    /* Present lists and prefix lengths, path by path (sorted, deduplicated). */
    if (B->npres)
        qsort(B->pres, B->npres, sizeof *B->pres, cmp_pair);
    while (cap_post < ps->npost + B->npres + 1)
        if (SL_GROW(ps->post, cap_post, 64))
            return SL_ENOMEM;
    for (size_t i = 0; i < B->npres; i++) {
        if (i && B->pres[i].a == B->pres[i - 1].a && B->pres[i].b == B->pres[i - 1].b)
            continue;
        ps_path *P = &ps->paths[B->pres[i].a];
        if (!P->npres)
            P->pres0 = (uint32_t)ps->npost;
        P->npres++;
        ps->post[ps->npost++] = B->pres[i].b;
    }
    size_t cap_plens = 0;
    if (build_lens(B, B->plen, B->nplen, false, &cap_plens) ||
        build_lens(B, B->slen, B->nslen, true, &cap_plens))
        return SL_ENOMEM;
    /* Live paths: anchors here or below. Children were interned after
     * their parents, so one pass from the last path up settles it. */
    for (size_t p = ps->npaths; p-- > 0;) {
        ps_path *P = &ps->paths[p];
        P->live |= P->kinds || P->npres || P->num != PS_NONE;
        if (P->live && p)
            ps->paths[B->parent[p]].live = true;
    }
    /* The live children of each path (a parent's run, by counting). */
    size_t nlive = 0;
    for (size_t p = 1; p < ps->npaths; p++)
        if (ps->paths[p].live) {
            nlive++;
            ps->paths[B->parent[p]].nkids++;
        }
    ps->kids = malloc((nlive ? nlive : 1) * sizeof *ps->kids);
    if (!ps->kids)
        return SL_ENOMEM;
    uint32_t k0 = 0;
    for (size_t p = 0; p < ps->npaths; p++) {
        ps->paths[p].kids0 = k0;
        k0 += ps->paths[p].nkids;
        ps->paths[p].nkids = 0;
    }
    for (size_t p = 1; p < ps->npaths; p++)
        if (ps->paths[p].live) {
            ps_path *Q = &ps->paths[B->parent[p]];
            const ps_entry *e = &ps->entries[B->name[p]];
            unsigned char c0 = e->len ? (unsigned char)ps->bytes[e->off] : 0;
            ps->kids[Q->kids0 + Q->nkids++] = (ps_kid){e->off, e->len, (uint32_t)p, c0};
            Q->lenmask |= 1ull << (e->len & 63);
        }
    ps->nkids = nlive;
    ps->held = sizeof *ps + ps->n * sizeof *ps->pats + (B->cap_paths) * sizeof *ps->paths +
               B->cap_entries * sizeof *ps->entries + (ps->mask + 1) * sizeof *ps->slots +
               B->cap_bytes + cap_post * sizeof *ps->post + (nlive ? nlive : 1) * sizeof *ps->kids +
               cap_plens * sizeof *ps->plens + cap_nums * sizeof *ps->nums +
               cap_ends * sizeof *ps->ends + cap_roff * sizeof *ps->roff +
               (ps->n ? ps->n : 1) * (sizeof *ps->always + 1);
    return 0;
}

static void builder_free(builder *B)
{
    free(B->parent);
    free(B->name);
    free(B->last);
    free(B->count);
    free(B->tmp);
    free(B->hits);
    free(B->pres);
    free(B->plen);
    free(B->slen);
    free(B->ivs);
}

int sl_pattern_set_build(const sl_pattern *const *pats, size_t n, sl_pattern_set **out,
                         sl_error *err)
{
    if (n >= PS_NONE)
        return sl_error_set(err, SL_EINVAL, "pattern set: too many patterns (%zu)", n);
    builder B = {0};
    sl_pattern_set *ps = calloc(1, sizeof *ps);
    int rc = SL_ENOMEM;
    if (!ps || !(ps->pats = calloc(n ? n : 1, sizeof *ps->pats)) ||
        !(ps->always = malloc((n ? n : 1) * sizeof *ps->always)) ||
        !(ps->sure = calloc(n ? n : 1, 1)))
        goto fail;
    B.ps = ps;
    ps->n = n;
    uint32_t root;
    /* bytes is never NULL: entries point into it, empty keys too. */
    if (table_grow(&B) || SL_GROW(ps->bytes, B.cap_bytes, 256) ||
        PUSH(ps->paths, ps->npaths, B.cap_paths) || PUSH(B.parent, ps->npaths, B.cap_parent) ||
        PUSH(B.name, ps->npaths, B.cap_name))
        goto fail;
    root = (uint32_t)ps->npaths++;
    ps->paths[root] = (ps_path){.num = PS_NONE};
    B.parent[root] = PS_NONE;
    B.name[root] = PS_NONE;
    /* Census: every key any pattern could anchor on, counted once per
     * pattern (B.last dedupes, then is reset for the postings). */
    B.census = true;
    for (size_t i = 0; i < n; i++) {
        uint32_t cost;
        B.ntmp = 0;
        B.pat = (uint32_t)i;
        if (pats[i] && node_anchor(&B, &pats[i]->root, root, &cost))
            goto fail;
    }
    for (size_t k = 0; k < ps->nentries; k++)
        B.last[k] = PS_NONE;
    B.census = false;
    for (size_t i = 0; i < n; i++) {
        ps->pats[i] = pats[i];
        B.pat = (uint32_t)i;
        if (!pats[i]) { /* matches every event: "always", never verified */
            ps->always[ps->nalways++] = (uint32_t)i;
            continue;
        }
        uint32_t cost;
        B.ntmp = 0;
        if (node_anchor(&B, &pats[i]->root, root, &cost))
            goto fail;
        if (cost == COST_INF) {
            ps->always[ps->nalways++] = (uint32_t)i;
            continue;
        }
        for (size_t k = 0; k < B.ntmp; k++)
            if (record(&B, &B.tmp[k], (uint32_t)i))
                goto fail;
        ps->sure[i] = sure_node(&pats[i]->root);
    }
    if (finish(&B))
        goto fail;
    builder_free(&B);
    *out = ps;
    return 0;
fail:
    builder_free(&B);
    sl_pattern_set_free(ps);
    return sl_error_set(err, rc, "pattern set: out of memory");
}

void sl_pattern_set_free(sl_pattern_set *ps)
{
    if (!ps)
        return;
    free(ps->pats);
    free(ps->paths);
    free(ps->entries);
    free(ps->slots);
    free(ps->bytes);
    free(ps->post);
    free(ps->kids);
    free(ps->plens);
    free(ps->nums);
    free(ps->ends);
    free(ps->roff);
    free(ps->always);
    free(ps->sure);
    free(ps);
}
