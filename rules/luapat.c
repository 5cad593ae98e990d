/*
 * rules/luapat.c — Lua 5.4 string patterns that count their work (see
 * rules/luapat.h).
 *
 * Written from the reference manual (§6.4.1 "Patterns", §6.4 for find,
 * match, gmatch and gsub) and checked against the real library by
 * tests/unit/test_luapat.c; no code comes from Lua's lstrlib.c.
 *
 * A pattern is compiled on each call into a flat array of items, one per
 * pattern item of the manual: a single-character class with its quantifier,
 * a capture bracket, %bxy, %f[set], a back-reference, the final '$' anchor.
 * Sets and classes become 256-bit maps (the classes' maps are built once).
 * Malformed parts compile into an error item that is raised only when the
 * matcher reaches it, because the library reports them lazily too
 * (string.find("b", "a[") is nil, string.find("a", "a[") an error).
 *
 * The matcher backtracks over the items in the order the manual defines
 * (longest first for * and +, shortest first for -, the optional character
 * first for ?), so it returns what the library returns. It recurses where a
 * choice must be undone (captures, quantifiers) and counts that depth like
 * the library does, so "pattern too complex" comes at the same point.
 * Where an alternative cannot succeed it is skipped without being tried:
 * start positions that the first item cannot match (memchr, memmem on a
 * literal prefix, or a set's map), and backtracking positions where the
 * next single-character item cannot match (memrchr/memchr for ".*x" and
 * ".-x"). Only alternatives that would fail without reaching an error item
 * are skipped, so errors are raised exactly when the library raises them.
 *
 * Step accounting: every byte tested, backtracking position, byte scanned
 * (memchr/memmem) or compared (back-references), pattern byte compiled and
 * replacement-string byte expanded costs one step, a nested matcher call
 * LP_CALL_STEPS; every LP_CHUNK steps, and at the end of each call, the
 * steps are charged to the budget at SL_LUAPAT_STEPS_PER_UNIT (16) steps per
 * unit, the rest carried to the next call. Measured on x86-64 (-O2, a busy
 * 2-core box), a step costs 1-2 ns and a budgeted Lua instruction 7-9 ns, so
 * a unit of budget buys 2-4 instructions' worth of time in a pattern: a
 * hostile pattern is stopped after 160M steps, 0.15-0.35 s with the default
 * budget (a hostile Lua loop: 0.07-0.1 s), while linear work stays cheap: a
 * 1 MiB gsub("x", "y") costs 3 steps per byte, 196k units (2% of the default
 * 10M), gmatch("%a+") over 1 MiB of words 66k.
 */
#include "rules/luapat.h"

#include <lauxlib.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LP_MAXCAPTURES 32 /* the library's LUA_MAXCAPTURES */
#define LP_MAXDEPTH 200   /* nested matcher calls, as the library counts them */
#define LP_CHUNK 16384    /* steps between two charges */
#define LP_CALL_STEPS 4   /* a nested matcher call costs about four byte tests */
#define LP_LIT_MAX 32     /* literal prefix searched with memmem */
#define LP_LOCAL_PAT 48   /* patterns up to this length compile on the C stack */

#define CAP_OPEN (-1)
#define CAP_POSITION (-2)

/* ---- compiled patterns ------------------------------------------------------- */

enum lp_op {
    OP_END,      /* the pattern matched */
    OP_CHAR,     /* one byte, c */
    OP_ANY,      /* '.' */
    OP_SET,      /* a set or a class: map set */
    OP_OPEN,     /* '(' */
    OP_POSITION, /* "()" */
    OP_CLOSE,    /* ')' */
    OP_BACKREF,  /* %1-%9: capture c (0-based) */
    OP_BALANCE,  /* %bcd */
    OP_FRONTIER, /* %f[set]: map set */
    OP_EOS,      /* '$' at the end of the pattern */
    OP_ERROR,    /* a malformed part: error c, raised when reached */
};

enum lp_quant { Q_ONE, Q_STAR, Q_PLUS, Q_MIN, Q_OPT };

enum lp_err { E_ENDS_PCT, E_BRACKET, E_BALANCE, E_FRONTIER, E_CAPINDEX0, E_CAPTURES };

static const char *const lp_errors[] = {
    [E_ENDS_PCT] = "malformed pattern (ends with '%')",
    [E_BRACKET] = "malformed pattern (missing ']')",
    [E_BALANCE] = "malformed pattern (missing arguments to '%b')",
    [E_FRONTIER] = "missing '[' after '%f' in pattern",
    [E_CAPINDEX0] = "invalid capture index %0",
    [E_CAPTURES] = "too many captures",
};

typedef struct lp_item {
    uint8_t op, q; /* enum lp_op, enum lp_quant (single-character items only) */
    uint8_t c, d;  /* see enum lp_op; OP_SET, OP_FRONTIER: d = 1 when set is lp_cc's */
    const uint8_t *set;
} lp_item;

typedef struct lp_prog {
    const lp_item *items; /* ends with OP_END */
    int skip;             /* first item, when a match must begin with a byte it matches; or -1 */
    int nlit;             /* bytes of lit: the literal text a match begins with (when skip >= 0) */
    char lit[LP_LIT_MAX];
} lp_prog;

/* The compiler's output; with items NULL it only counts. */
typedef struct lp_cc {
    lp_item *items;
    uint8_t (*sets)[32];
    size_t nitems, nsets;
    lp_item scratch_item;
    uint8_t scratch_set[32];
} lp_cc;

/* Storage for a short pattern. Each item takes at least one pattern byte and
 * each set three ("[x]"), so these bounds hold. */
typedef struct lp_local {
    lp_item items[LP_LOCAL_PAT + 1];
    uint8_t sets[LP_LOCAL_PAT / 3 + 1][32];
} lp_local;

/* ---- character classes ("C" locale) ---------------------------------------- */

/* Maps of %a %c %d %g %l %p %s %u %w %x %z at even indexes, their
 * complements (the upper-case letters) at odd ones. Built once. */
static uint8_t lp_classes[22][32];
static pthread_once_t lp_once = PTHREAD_ONCE_INIT;

static const char lp_class_letters[] = "acdglpsuwxz";

static bool lp_in_class(char k, int c)
{
    bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z', digit = c >= '0' && c <= '9';
    bool graph = c > 32 && c < 127;
    switch (k) {
    case 'a':
        return lower || upper;
    case 'c':
        return c < 32 || c == 127;
    case 'd':
        return digit;
    case 'g':
        return graph;
    case 'l':
        return lower;
    case 'p':
        return graph && !(lower || upper || digit);
    case 's':
        return c == ' ' || (c >= '\t' && c <= '\r');
    case 'u':
        return upper;
    case 'w':
        return lower || upper || digit;
    case 'x':
        return digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    default:
        return c == 0; /* 'z' */
    }
}

static void lp_build_classes(void)
{
    for (int k = 0; lp_class_letters[k]; k++)
        for (int c = 0; c < 256; c++) {
            bool in = lp_in_class(lp_class_letters[k], c);
            lp_classes[2 * k + !in][c >> 3] |= (uint8_t)(1u << (c & 7));
        }
}

/* Index into lp_classes of the class %c, or -1 when c names none. */
static int lp_class_id(unsigned char c)
{
    unsigned char l = c | 0x20; /* lower case, for letters */
    if (l < 'a' || l > 'z')
        return -1;
    const char *k = strchr(lp_class_letters, l);
    return k ? 2 * (int)(k - lp_class_letters) + (c != l) : -1;
}

static inline bool lp_in(const uint8_t *set, unsigned char c)
{
    return (set[c >> 3] >> (c & 7)) & 1;
}

static inline bool lp_single(const lp_item *it, unsigned char c)
{
    switch (it->op) {
    case OP_CHAR:
        return c == it->c;
    case OP_ANY:
        return true;
    default:
        return lp_in(it->set, c);
    }
}

/* An item that must match one byte for anything after it to be tried. */
static inline bool lp_needs_byte(const lp_item *it)
{
    return (it->op == OP_CHAR || it->op == OP_ANY || it->op == OP_SET) &&
           (it->q == Q_ONE || it->q == Q_PLUS);
}

/* ---- compiler ------------------------------------------------------------------ */

static lp_item *lp_emit(lp_cc *cc, enum lp_op op)
{
    lp_item *it = cc->items ? &cc->items[cc->nitems] : &cc->scratch_item;
    cc->nitems++;
    it->op = (uint8_t)op;
    it->q = Q_ONE;
    it->c = it->d = 0;
    it->set = NULL;
    return it;
}

static uint8_t *lp_newset(lp_cc *cc)
{
    uint8_t *set = cc->items ? cc->sets[cc->nsets] : cc->scratch_set;
    cc->nsets++;
    memset(set, 0, 32);
    return set;
}

static void lp_add_escape(uint8_t *set, unsigned char c)
{
    int id = lp_class_id(c);
    if (id < 0) {
        set[c >> 3] |= (uint8_t)(1u << (c & 7));
        return;
    }
    for (int i = 0; i < 32; i++)
        set[i] |= lp_classes[id][i];
}

/* Parses the set starting at p (a '['), fills set, and returns the byte
 * after its ']', or NULL when the ']' is missing. The first byte after '['
 * or "[^" always belongs to the set (so "[]]" is the set of ']'), "%x" is a
 * class or the byte x, and "x-y" a range unless the '-' is followed by the
 * closing ']'. */
static const char *lp_parse_set(const char *p, const char *pe, uint8_t *set)
{
    const char *q = p + 1, *first;
    bool neg = q < pe && *q == '^';
    if (neg)
        q++;
    first = q;
    do {
        if (q >= pe)
            return NULL;
        if (*q++ == '%' && q < pe)
            q++;
    } while (q >= pe || *q != ']');
    for (const char *r = first; r < q; r++) {
        unsigned char c = (unsigned char)*r;
        if (c == '%') {
            lp_add_escape(set, (unsigned char)*++r);
        } else if (r + 2 < q && r[1] == '-') {
            for (unsigned x = c; x <= (unsigned char)r[2]; x++)
                set[x >> 3] |= (uint8_t)(1u << (x & 7));
            r += 2;
        } else {
            set[c >> 3] |= (uint8_t)(1u << (c & 7));
        }
    }
    if (neg)
        for (int i = 0; i < 32; i++)
            set[i] = (uint8_t)~set[i];
    return q + 1;
}

/* Compiles [p, pe) into cc: the items, then OP_END. A malformed part ends the
 * items with an OP_ERROR item. */
static void lp_compile(lp_cc *cc, const char *p, const char *pe)
{
    int ncap = 0;
    lp_item *it;
    while (p < pe) {
        unsigned char c = (unsigned char)*p;
        if (c == '(') {
            if (ncap == LP_MAXCAPTURES) {
                lp_emit(cc, OP_ERROR)->c = E_CAPTURES;
                break;
            }
            ncap++;
            if (p + 1 < pe && p[1] == ')') {
                lp_emit(cc, OP_POSITION);
                p += 2;
            } else {
                lp_emit(cc, OP_OPEN);
                p++;
            }
            continue;
        }
        if (c == ')') {
            lp_emit(cc, OP_CLOSE);
            p++;
            continue;
        }
        if (c == '$' && p + 1 == pe) {
            lp_emit(cc, OP_EOS);
            p++;
            continue;
        }
        if (c == '%' && p + 1 < pe) {
            unsigned char e = (unsigned char)p[1];
            if (e == 'b') {
                if (pe - p < 4) {
                    lp_emit(cc, OP_ERROR)->c = E_BALANCE;
                    break;
                }
                it = lp_emit(cc, OP_BALANCE);
                it->c = (uint8_t)p[2];
                it->d = (uint8_t)p[3];
                p += 4;
                continue;
            }
            if (e == 'f') {
                p += 2;
                if (p == pe || *p != '[') {
                    lp_emit(cc, OP_ERROR)->c = E_FRONTIER;
                    break;
                }
                uint8_t *set = lp_newset(cc);
                it = lp_emit(cc, OP_FRONTIER);
                it->set = set;
                it->d = 1;
                p = lp_parse_set(p, pe, set);
                if (!p) {
                    it->op = OP_ERROR;
                    it->c = E_BRACKET;
                    break;
                }
                continue;
            }
            if (e == '0') {
                lp_emit(cc, OP_ERROR)->c = E_CAPINDEX0;
                break;
            }
            if (e >= '1' && e <= '9') {
                lp_emit(cc, OP_BACKREF)->c = (uint8_t)(e - '1');
                p += 2;
                continue;
            }
        }
        /* A single-character class, then maybe a quantifier. */
        it = lp_emit(cc, OP_CHAR);
        if (c == '.') {
            it->op = OP_ANY;
            p++;
        } else if (c == '%') {
            if (p + 1 == pe) {
                it->op = OP_ERROR;
                it->c = E_ENDS_PCT;
                break;
            }
            int id = lp_class_id((unsigned char)p[1]);
            if (id >= 0) {
                it->op = OP_SET;
                it->set = lp_classes[id];
            } else {
                it->c = (uint8_t)p[1];
            }
            p += 2;
        } else if (c == '[') {
            uint8_t *set = lp_newset(cc);
            p = lp_parse_set(p, pe, set);
            if (!p) {
                it->op = OP_ERROR;
                it->c = E_BRACKET;
                break;
            }
            it->op = OP_SET;
            it->set = set;
            it->d = 1;
        } else {
            it->c = c;
            p++;
        }
        if (p < pe) {
            switch (*p) {
            case '*':
                it->q = Q_STAR;
                break;
            case '+':
                it->q = Q_PLUS;
                break;
            case '-':
                it->q = Q_MIN;
                break;
            case '?':
                it->q = Q_OPT;
                break;
            default:
                continue;
            }
            p++;
        }
    }
    lp_emit(cc, OP_END);
}

/* Finds where a match can begin: after the captures that open the pattern,
 * an item that must match a byte (and the literal text it starts). */
static void lp_prepare(lp_prog *pg)
{
    const lp_item *it = pg->items;
    int i = 0;
    while (it[i].op == OP_OPEN || it[i].op == OP_POSITION)
        i++;
    pg->skip = -1;
    pg->nlit = 0;
    if ((it[i].op == OP_CHAR || it[i].op == OP_SET) && (it[i].q == Q_ONE || it[i].q == Q_PLUS)) {
        pg->skip = i;
        for (int j = i; it[j].op == OP_CHAR && it[j].q == Q_ONE && pg->nlit < LP_LIT_MAX; j++)
            pg->lit[pg->nlit++] = (char)it[j].c;
    }
}

/* ---- matcher --------------------------------------------------------------------- */

typedef struct lp_capture {
    const char *init;
    ptrdiff_t len; /* or CAP_OPEN, CAP_POSITION */
} lp_capture;

/* What the four functions share (their first upvalue): the charge
 * function, and the steps not yet charged because they make less than a
 * unit (carried to the next call, so many small calls are charged too). */
typedef struct lp_env {
    sl_luapat_charge_fn charge;
    uint64_t carry;
} lp_env;

typedef struct lp_state {
    const char *src, *end; /* the subject */
    lua_State *L;
    lp_env *env;
    int64_t fuel; /* steps left before the next charge */
    int level;    /* captures started */
    int depth;    /* nested lp_match() calls */
    lp_capture cap[LP_MAXCAPTURES];
} lp_state;

static void lp_init(lp_state *ms, lua_State *L, const char *s, size_t len, lp_env *env)
{
    ms->src = s;
    ms->end = s + len;
    ms->L = L;
    ms->env = env;
    ms->fuel = LP_CHUNK;
    ms->level = 0;
    ms->depth = 0;
}

/* Charges the steps spent so far, in whole units (may raise the budget
 * error). */
static void lp_refuel(lp_state *ms)
{
    uint64_t spent = (uint64_t)(LP_CHUNK - ms->fuel) + ms->env->carry;
    ms->fuel = LP_CHUNK;
    ms->env->carry = spent % SL_LUAPAT_STEPS_PER_UNIT;
    if (ms->env->charge && spent >= SL_LUAPAT_STEPS_PER_UNIT)
        ms->env->charge(ms->L, (lua_Unsigned)(spent / SL_LUAPAT_STEPS_PER_UNIT));
}

#define LP_SPEND(ms, n)                                                                            \
    do {                                                                                           \
        if (((ms)->fuel -= (int64_t)(n)) < 0)                                                      \
            lp_refuel(ms);                                                                         \
    } while (0)

/* At the end of a call: charges what is left. */
static void lp_settle(lp_state *ms)
{
    lp_refuel(ms);
}

static const char *lp_do(lp_state *ms, const char *s, const lp_item *it);

static void lp_too_complex(lp_state *ms)
{
    luaL_error(ms->L, "pattern too complex");
}

/* Matches the items from it at s; returns the end of the match or NULL. */
static const char *lp_match(lp_state *ms, const char *s, const lp_item *it)
{
    if (ms->depth >= LP_MAXDEPTH)
        lp_too_complex(ms);
    LP_SPEND(ms, LP_CALL_STEPS);
    ms->depth++;
    s = lp_do(ms, s, it);
    ms->depth--;
    return s;
}

/* it* or it+ with the repetition starting at s: the longest run first. */
static const char *lp_max(lp_state *ms, const char *s, const lp_item *it)
{
    const char *end = ms->end, *q = s;
    switch (it->op) {
    case OP_ANY:
        q = end;
        break;
    case OP_CHAR:
        while (q < end && (unsigned char)*q == it->c)
            q++;
        break;
    default:
        while (q < end && lp_in(it->set, (unsigned char)*q))
            q++;
        break;
    }
    size_t i = (size_t)(q - s);
    LP_SPEND(ms, it->op == OP_ANY ? 1 : i + 1);
    const lp_item *nx = it + 1;
    if (ms->depth >= LP_MAXDEPTH) /* the first try below would raise it */
        lp_too_complex(ms);
    if (nx->op == OP_END)
        return q;
    if (nx->op == OP_EOS)
        return q == end ? q : NULL;
    if (lp_needs_byte(nx)) {
        /* Only the positions where nx matches are tried. */
        size_t lim = i < (size_t)(end - s) ? i + 1 : (size_t)(end - s);
        while (lim > 0) {
            size_t j;
            if (nx->op == OP_ANY) {
                j = lim - 1;
            } else if (nx->op == OP_CHAR) {
                const char *r = memrchr(s, nx->c, lim);
                if (!r) {
                    LP_SPEND(ms, lim);
                    return NULL;
                }
                j = (size_t)(r - s);
            } else {
                for (j = lim; j > 0 && !lp_in(nx->set, (unsigned char)s[j - 1]); j--)
                    ;
                if (j-- == 0) {
                    LP_SPEND(ms, lim);
                    return NULL;
                }
            }
            LP_SPEND(ms, lim - j);
            const char *r = lp_match(ms, s + j, nx);
            if (r)
                return r;
            lim = j;
        }
        return NULL;
    }
    for (;;) {
        const char *r = lp_match(ms, s + i, nx);
        if (r)
            return r;
        if (i == 0)
            return NULL;
        i--;
        LP_SPEND(ms, 1);
    }
}

/* it- with the repetition starting at s (whose byte matches it): the
 * shortest run first. */
static const char *lp_min(lp_state *ms, const char *s, const lp_item *it)
{
    const char *end = ms->end;
    const lp_item *nx = it + 1;
    if (ms->depth >= LP_MAXDEPTH)
        lp_too_complex(ms);
    if (nx->op == OP_END)
        return s;
    if (nx->op == OP_EOS && it->op == OP_ANY)
        return end;
    bool pre = lp_needs_byte(nx);
    for (;;) {
        if (pre && it->op == OP_ANY && nx->op == OP_CHAR) {
            const char *r = memchr(s, nx->c, (size_t)(end - s));
            LP_SPEND(ms, (size_t)((r ? r : end) - s) + 1);
            if (!r)
                return NULL;
            s = r;
        } else if (pre) {
            /* Positions where nx cannot match are passed, as long as it
             * matches their byte. */
            const char *q = s;
            while (q < end && !lp_single(nx, (unsigned char)*q)) {
                if (!lp_single(it, (unsigned char)*q))
                    break;
                q++;
            }
            LP_SPEND(ms, (size_t)(q - s) + 1);
            s = q;
            if (s == end || !lp_single(nx, (unsigned char)*s))
                return NULL;
        }
        const char *r = lp_match(ms, s, nx);
        if (r)
            return r;
        LP_SPEND(ms, 1);
        if (s < end && lp_single(it, (unsigned char)*s))
            s++;
        else
            return NULL;
    }
}

static const char *lp_do(lp_state *ms, const char *s, const lp_item *it)
{
    const char *end = ms->end, *r;
    for (;; it++) {
        switch ((enum lp_op)it->op) {
        case OP_END:
            return s;
        case OP_EOS:
            return s == end ? s : NULL;
        case OP_CHAR:
        case OP_ANY:
        case OP_SET: {
            LP_SPEND(ms, 1);
            bool m = s < end && lp_single(it, (unsigned char)*s);
            switch ((enum lp_quant)it->q) {
            case Q_ONE:
                if (!m)
                    return NULL;
                s++;
                continue;
            case Q_OPT:
                if (m && (r = lp_match(ms, s + 1, it + 1)) != NULL)
                    return r;
                continue;
            case Q_STAR:
                if (!m)
                    continue;
                return lp_max(ms, s, it);
            case Q_PLUS:
                return m ? lp_max(ms, s + 1, it) : NULL;
            case Q_MIN:
                if (!m)
                    continue;
                return lp_min(ms, s, it);
            }
            return NULL;
        }
        case OP_OPEN:
        case OP_POSITION:
            ms->cap[ms->level].init = s;
            ms->cap[ms->level].len = it->op == OP_OPEN ? CAP_OPEN : CAP_POSITION;
            ms->level++;
            if ((r = lp_match(ms, s, it + 1)) == NULL)
                ms->level--;
            return r;
        case OP_CLOSE: {
            int l = ms->level - 1;
            while (l >= 0 && ms->cap[l].len != CAP_OPEN)
                l--;
            if (l < 0)
                luaL_error(ms->L, "invalid pattern capture");
            ms->cap[l].len = s - ms->cap[l].init;
            if ((r = lp_match(ms, s, it + 1)) == NULL)
                ms->cap[l].len = CAP_OPEN;
            return r;
        }
        case OP_BACKREF: {
            int l = it->c;
            if (l >= ms->level || ms->cap[l].len == CAP_OPEN)
                luaL_error(ms->L, "invalid capture index %%%d", l + 1);
            ptrdiff_t len = ms->cap[l].len;
            if (len == CAP_POSITION || end - s < len) { /* a position never matches */
                LP_SPEND(ms, 1);
                return NULL;
            }
            LP_SPEND(ms, (size_t)len + 1);
            if (memcmp(ms->cap[l].init, s, (size_t)len) != 0)
                return NULL;
            s += len;
            continue;
        }
        case OP_BALANCE: {
            if (s >= end || (unsigned char)*s != it->c) {
                LP_SPEND(ms, 1);
                return NULL;
            }
            size_t open = 1;
            const char *q = s;
            while (++q < end) {
                unsigned char c = (unsigned char)*q;
                if (c == it->d) {
                    if (--open == 0)
                        break;
                } else if (c == it->c) {
                    open++;
                }
            }
            LP_SPEND(ms, (size_t)(q - s) + 1);
            if (q >= end)
                return NULL;
            s = q + 1;
            continue;
        }
        case OP_FRONTIER: {
            unsigned char prev = s == ms->src ? 0 : (unsigned char)s[-1];
            unsigned char cur = s < end ? (unsigned char)*s : 0;
            LP_SPEND(ms, 1);
            if (lp_in(it->set, prev) || !lp_in(it->set, cur))
                return NULL;
            continue;
        }
        case OP_ERROR:
            luaL_error(ms->L, "%s", lp_errors[it->c]);
            return NULL;
        }
        return NULL; /* unreachable: every op is handled above */
    }
}

/* One attempt at s from the first item (the first of the nested calls,
 * charged as one step: it is no deeper than a loop iteration). */
static const char *lp_attempt(lp_state *ms, const lp_prog *pg, const char *s)
{
    LP_SPEND(ms, 1);
    ms->level = 0;
    ms->depth = 1;
    return lp_do(ms, s, pg->items);
}

/* memmem() that is as fast as memchr() when the needle's first byte is
 * rare: candidates found by memchr are checked with memcmp, and once the
 * checks have cost more than a few times the bytes passed (an adversarial
 * haystack) the rest goes to memmem, which is linear. Charges the bytes
 * passed and checked. */
static const char *lp_memfind(lp_state *ms, const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0)
        return h;
    if (nn > hn) {
        LP_SPEND(ms, 1);
        return NULL;
    }
    const char *p = h, *last = h + (hn - nn), *r = NULL;
    size_t checked = 0;
    while (p <= last) {
        if ((p = memchr(p, (unsigned char)n[0], (size_t)(last - p) + 1)) == NULL)
            break;
        if (memcmp(p + 1, n + 1, nn - 1) == 0) {
            r = p;
            break;
        }
        p++;
        if ((checked += nn) > 4 * (size_t)(p - h) + 4096) {
            r = memmem(p, (size_t)(h + hn - p), n, nn);
            LP_SPEND(ms, (size_t)((r ? r : last) - p) + nn);
            break;
        }
    }
    LP_SPEND(ms, (size_t)((r ? r : p ? p : last) - h) + checked / 4 + 1);
    return r;
}

/* The first position from s where a match can begin (pg->skip >= 0), or
 * NULL when there is none. */
static const char *lp_scan(lp_state *ms, const lp_prog *pg, const char *s)
{
    const lp_item *it = &pg->items[pg->skip];
    const char *end = ms->end, *r;
    size_t n = (size_t)(end - s);
    if (s < end && lp_single(it, (unsigned char)*s) &&
        (pg->nlit < 2 || (n >= (size_t)pg->nlit && memcmp(s, pg->lit, (size_t)pg->nlit) == 0)))
        return s; /* often right where the last match ended */
    if (pg->nlit > 1) {
        return lp_memfind(ms, s, n, pg->lit, (size_t)pg->nlit);
    } else if (it->op == OP_CHAR) {
        r = memchr(s, it->c, n);
    } else {
        for (r = s; r < end && !lp_in(it->set, (unsigned char)*r); r++)
            ;
        if (r == end)
            r = NULL;
    }
    LP_SPEND(ms, (size_t)((r ? r : end) - s));
    return r;
}

/* Tries the pattern from each start position from s (only s when anchored);
 * returns the end of the first match and its start in *start, or NULL. */
static const char *lp_search(lp_state *ms, const lp_prog *pg, const char *s, bool anchor,
                             const char **start)
{
    for (;;) {
        if (!anchor && pg->skip >= 0 && (s = lp_scan(ms, pg, s)) == NULL)
            return NULL;
        const char *e = lp_attempt(ms, pg, s);
        if (e) {
            *start = s;
            return e;
        }
        if (anchor || s == ms->end)
            return NULL;
        s++;
    }
}

/* ---- captures ------------------------------------------------------------------- */

/* Capture i of the match [s, e) (i == 0 without captures: the whole match):
 * its text in *cap and its length, or CAP_POSITION. */
static ptrdiff_t lp_get_capture(lp_state *ms, int i, const char *s, const char *e, const char **cap)
{
    if (i >= ms->level) {
        if (i != 0)
            luaL_error(ms->L, "invalid capture index %%%d", i + 1);
        *cap = s;
        return e - s;
    }
    ptrdiff_t len = ms->cap[i].len;
    if (len == CAP_OPEN)
        luaL_error(ms->L, "unfinished capture");
    *cap = ms->cap[i].init;
    return len;
}

/* Pushes capture i of the match [s, e): a string, or a position's number. */
static void lp_push_capture(lp_state *ms, int i, const char *s, const char *e)
{
    const char *cap;
    ptrdiff_t len = lp_get_capture(ms, i, s, e, &cap);
    if (len == CAP_POSITION)
        lua_pushinteger(ms->L, (lua_Integer)(cap - ms->src) + 1);
    else
        lua_pushlstring(ms->L, cap, (size_t)len);
}

/* Pushes the captures (or, with whole and no captures, the match); returns
 * how many. */
static int lp_push_captures(lp_state *ms, const char *s, const char *e, bool whole)
{
    int n = ms->level == 0 && whole ? 1 : ms->level;
    luaL_checkstack(ms->L, n, "too many captures");
    for (int i = 0; i < n; i++)
        lp_push_capture(ms, i, s, e);
    return n;
}

/* ---- the library functions ---------------------------------------------------- */

static lp_env *lp_env_of(lua_State *L, int upvalue)
{
    return lua_touserdata(L, lua_upvalueindex(upvalue));
}

/* The 0-based offset of the 1-based (or negative, from the end) position
 * pos; more than len when pos is past the end. */
static size_t lp_start(lua_Integer pos, size_t len)
{
    if (pos > 0)
        return (size_t)pos - 1;
    if (pos == 0 || pos < -(lua_Integer)len)
        return 0;
    return (size_t)((lua_Integer)len + pos);
}

/* Compiles p into pg: in loc when short, else into a userdata pushed on the
 * stack. Charges one step per pattern byte. */
static void lp_build(lp_state *ms, const char *p, size_t lp, lp_local *loc, lp_prog *pg)
{
    lp_cc cc = {0};
    LP_SPEND(ms, lp);
    if (lp <= LP_LOCAL_PAT) {
        cc.items = loc->items;
        cc.sets = loc->sets;
    } else {
        lp_compile(&cc, p, p + lp);
        size_t isize = cc.nitems * sizeof(lp_item);
        cc.items = lua_newuserdatauv(ms->L, isize + cc.nsets * 32, 0);
        cc.sets = (uint8_t(*)[32])((char *)cc.items + isize);
        cc.nitems = cc.nsets = 0;
    }
    lp_compile(&cc, p, p + lp);
    pg->items = cc.items;
    lp_prepare(pg);
}

/* Whether p has none of the characters that make find() use the matcher. */
static bool lp_plain(const char *p, size_t lp)
{
    for (size_t i = 0; i < lp; i++)
        switch (p[i]) {
        case '^':
        case '$':
        case '*':
        case '+':
        case '?':
        case '.':
        case '(':
        case '[':
        case '%':
        case '-':
            return false;
        default:
            break;
        }
    return true;
}

/* string.find (find) and string.match. */
static int lp_find_aux(lua_State *L, bool find)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    size_t init = lp_start(luaL_optinteger(L, 3, 1), ls);
    if (init > ls) {
        luaL_pushfail(L);
        return 1;
    }
    lp_state ms;
    lp_init(&ms, L, s, ls, lp_env_of(L, 1));
    if (find && (lua_toboolean(L, 4) || lp_plain(p, lp))) {
        LP_SPEND(&ms, lp);
        const char *r = lp_memfind(&ms, s + init, ls - init, p, lp);
        lp_settle(&ms);
        if (!r) {
            luaL_pushfail(L);
            return 1;
        }
        lua_pushinteger(L, (lua_Integer)(r - s) + 1);
        lua_pushinteger(L, (lua_Integer)(r - s + (ptrdiff_t)lp));
        return 2;
    }
    bool anchor = lp > 0 && *p == '^';
    lp_local loc;
    lp_prog pg;
    lp_build(&ms, p + anchor, lp - anchor, &loc, &pg);
    const char *start = NULL, *e = lp_search(&ms, &pg, s + init, anchor, &start);
    lp_settle(&ms);
    if (!e) {
        luaL_pushfail(L);
        return 1;
    }
    if (!find)
        return lp_push_captures(&ms, start, e, true);
    lua_pushinteger(L, (lua_Integer)(start - s) + 1);
    lua_pushinteger(L, (lua_Integer)(e - s));
    return 2 + lp_push_captures(&ms, NULL, NULL, false);
}

static int lp_l_find(lua_State *L)
{
    return lp_find_aux(L, true);
}

static int lp_l_match(lua_State *L)
{
    return lp_find_aux(L, false);
}

/* gmatch's state, then its items and sets. */
typedef struct lp_gmatch {
    size_t pos;       /* where the next search starts; > the length when done */
    size_t lastmatch; /* end of the last match, or SIZE_MAX */
    lp_prog prog;
    lp_item items[];
} lp_gmatch;

/* The iterator: upvalues the subject, the lp_gmatch, the charge box. */
static int lp_gmatch_next(lua_State *L)
{
    size_t ls;
    const char *s = lua_tolstring(L, lua_upvalueindex(1), &ls);
    lp_gmatch *gm = lua_touserdata(L, lua_upvalueindex(2));
    if (gm->pos > ls)
        return 0;
    lp_state ms;
    lp_init(&ms, L, s, ls, lp_env_of(L, 3));
    const lp_prog *pg = &gm->prog;
    for (const char *src = s + gm->pos;; src++) {
        if (pg->skip >= 0 && (src = lp_scan(&ms, pg, src)) == NULL)
            break;
        const char *e = lp_attempt(&ms, pg, src);
        if (e && (size_t)(e - s) != gm->lastmatch) {
            gm->pos = gm->lastmatch = (size_t)(e - s);
            lp_settle(&ms);
            return lp_push_captures(&ms, src, e, true);
        }
        if (src == ms.end)
            break;
    }
    gm->pos = ls + 1;
    lp_settle(&ms);
    return 0;
}

static int lp_l_gmatch(lua_State *L)
{
    size_t ls, lp;
    luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    size_t init = lp_start(luaL_optinteger(L, 3, 1), ls);
    lua_settop(L, 2);
    lp_state ms;
    lp_init(&ms, L, p, lp, lp_env_of(L, 1));
    LP_SPEND(&ms, lp);
    /* Compiled on the stack when short (else counted first), then copied
     * into the iterator's userdata with the sets' addresses moved along. */
    lp_local loc;
    lp_cc cc = {0};
    if (lp <= LP_LOCAL_PAT) {
        cc.items = loc.items;
        cc.sets = loc.sets;
    }
    lp_compile(&cc, p, p + lp);
    size_t isize = cc.nitems * sizeof(lp_item);
    lp_gmatch *gm = lua_newuserdatauv(L, sizeof *gm + isize + cc.nsets * 32, 0);
    uint8_t(*sets)[32] = (uint8_t(*)[32])((char *)gm->items + isize);
    if (cc.items) {
        memcpy(gm->items, loc.items, isize);
        memcpy(sets, loc.sets, cc.nsets * 32);
        for (size_t i = 0; i < cc.nitems; i++)
            if (gm->items[i].d == 1 &&
                (gm->items[i].op == OP_SET || gm->items[i].op == OP_FRONTIER))
                gm->items[i].set = sets[(gm->items[i].set - loc.sets[0]) / 32];
    } else {
        cc.items = gm->items;
        cc.sets = sets;
        cc.nitems = cc.nsets = 0;
        lp_compile(&cc, p, p + lp);
    }
    gm->prog.items = gm->items;
    lp_prepare(&gm->prog);
    gm->pos = init > ls ? ls + 1 : init;
    gm->lastmatch = SIZE_MAX;
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushcclosure(L, lp_gmatch_next, 3);
    lp_settle(&ms);
    return 1;
}

/* gsub's replacement: the string at index 3 (r, rl bytes; pct when it has a
 * '%'), or the table or function there. */
typedef struct lp_repl {
    int type;
    const char *r;
    size_t rl;
    bool pct;
} lp_repl;

/* Appends the replacement string for the match [s, e). */
static void lp_add_string(lp_state *ms, luaL_Buffer *b, const char *s, const char *e,
                          const lp_repl *rp)
{
    const char *r = rp->r, *pct;
    size_t rl = rp->rl;
    if (!rp->pct) { /* a copy: what it costs is bounded by the memory cap */
        LP_SPEND(ms, 1);
        luaL_addlstring(b, r, rl);
        return;
    }
    LP_SPEND(ms, rl + 1);
    while ((pct = memchr(r, '%', rl)) != NULL) {
        luaL_addlstring(b, r, (size_t)(pct - r));
        rl -= (size_t)(pct - r) + 1;
        r = pct + 1;
        unsigned char c = rl > 0 ? (unsigned char)*r : 0;
        if (c == '%') {
            luaL_addchar(b, '%');
        } else if (c == '0') {
            luaL_addlstring(b, s, (size_t)(e - s));
        } else if (c >= '1' && c <= '9') {
            const char *cap;
            ptrdiff_t len = lp_get_capture(ms, c - '1', s, e, &cap);
            if (len == CAP_POSITION) {
                lua_pushinteger(ms->L, (lua_Integer)(cap - ms->src) + 1);
                luaL_addvalue(b); /* its number */
            } else {
                luaL_addlstring(b, cap, (size_t)len);
            }
        } else {
            luaL_error(ms->L, "invalid use of '%c' in replacement string", '%');
        }
        r++;
        rl--;
    }
    luaL_addlstring(b, r, rl);
}

/* Appends the replacement of the match [s, e); returns whether it differs
 * from the match (a false or nil from a table or function keeps it). */
static bool lp_add_value(lp_state *ms, luaL_Buffer *b, const char *s, const char *e,
                         const lp_repl *rp)
{
    lua_State *L = ms->L;
    if (rp->type == LUA_TFUNCTION) {
        lua_pushvalue(L, 3);
        int n = lp_push_captures(ms, s, e, true);
        lua_call(L, n, 1);
    } else if (rp->type == LUA_TTABLE) {
        lp_push_capture(ms, 0, s, e);
        lua_gettable(L, 3);
    } else {
        lp_add_string(ms, b, s, e, rp);
        return true;
    }
    if (!lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        luaL_addlstring(b, s, (size_t)(e - s));
        return false;
    }
    if (!lua_isstring(L, -1))
        luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
    luaL_addvalue(b);
    return true;
}

static int lp_l_gsub(lua_State *L)
{
    size_t ls, lp;
    const char *src = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    lp_repl rp = {.type = lua_type(L, 3)};
    lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
    luaL_argexpected(L,
                     rp.type == LUA_TNUMBER || rp.type == LUA_TSTRING || rp.type == LUA_TFUNCTION ||
                         rp.type == LUA_TTABLE,
                     3, "string/function/table");
    if (rp.type == LUA_TNUMBER || rp.type == LUA_TSTRING) {
        rp.r = lua_tolstring(L, 3, &rp.rl);
        rp.pct = memchr(rp.r, '%', rp.rl) != NULL;
    }
    lp_state ms;
    lp_init(&ms, L, src, ls, lp_env_of(L, 1));
    bool anchor = lp > 0 && *p == '^';
    lp_local loc;
    lp_prog pg;
    lp_build(&ms, p + anchor, lp - anchor, &loc, &pg);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    const char *s = src, *end = ms.end, *lastmatch = NULL;
    lua_Integer n = 0;
    bool changed = false;
    while (n < max) {
        if (!anchor && pg.skip >= 0) {
            const char *c = lp_scan(&ms, &pg, s);
            if (!c)
                break;
            luaL_addlstring(&b, s, (size_t)(c - s));
            s = c;
        }
        const char *e = lp_attempt(&ms, &pg, s);
        if (e && e != lastmatch) {
            n++;
            changed = lp_add_value(&ms, &b, s, e, &rp) || changed;
            s = lastmatch = e;
        } else if (s < end) {
            luaL_addchar(&b, *s++);
        } else {
            break;
        }
        if (anchor)
            break;
    }
    lp_settle(&ms);
    if (!changed) {
        lua_pushvalue(L, 1);
    } else {
        luaL_addlstring(&b, s, (size_t)(end - s));
        luaL_pushresult(&b);
    }
    lua_pushinteger(L, n);
    return 2;
}

void sl_luapat_install(lua_State *L, int idx, sl_luapat_charge_fn charge)
{
    static const luaL_Reg fns[] = {
        {"find", lp_l_find}, {"match", lp_l_match}, {"gmatch", lp_l_gmatch},
        {"gsub", lp_l_gsub}, {NULL, NULL},
    };
    pthread_once(&lp_once, lp_build_classes);
    idx = lua_absindex(L, idx);
    lp_env *env = lua_newuserdatauv(L, sizeof *env, 0);
    env->charge = charge;
    env->carry = 0;
    for (const luaL_Reg *r = fns; r->name; r++) {
        lua_pushvalue(L, -1);
        lua_pushcclosure(L, r->func, 1);
        lua_setfield(L, idx, r->name);
    }
    lua_pop(L, 1);
}
