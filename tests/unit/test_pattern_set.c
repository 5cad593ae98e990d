/*
 * tests/unit/test_pattern_set.c — the combined matcher (rules/pattern_set.h)
 * against the one-by-one matcher, differentially: for every event, the set
 * must answer exactly the patterns sl_pattern_match_event() matches.
 *
 *  - every pattern/event pair of tests/unit/test_pattern.c (its table is
 *    included, so a case added there is checked here too), each pattern
 *    alone and all of them as one set against every event of the table;
 *  - random patterns over every operator (exact values, prefix, suffix and
 *    their ignore-case forms, anything-but in each form, numeric ranges and
 *    =, exists true/false, equals-ignore-case with ASCII and non-ASCII
 *    operands, wildcard, cidr v4/v6, $or nested, nested objects) against
 *    random events (arrays, nested arrays, arrays of objects, duplicate
 *    keys), in sets of 1 to 1,000 patterns with NULL patterns among them;
 *  - the index's corner cases: many overlapping ranges (the fallback to
 *    "present"), many children under one path (hashed child look-up), many
 *    prefix lengths, candidates past the sort's small-list limit;
 *  - matching allocates nothing, a scratch serves a smaller set, the epoch
 *    wraps.
 */
/* test_pattern.c's cases (and its counting allocator) come with it; its
 * main is renamed so that this file's runs. */
int test_pattern_main(void);
#define main test_pattern_main
#include "test_pattern.c"
#undef main

#include "rules/pattern_set.h"
#include "rules/pattern_set_internal.h"

/* ---- helpers ------------------------------------------------------------------ */

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)((rng_state >> 11) % n);
}

/* A growing text buffer for generated JSON. */
typedef struct txt {
    char b[16384];
    size_t n;
} txt;

static void put(txt *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->b + t->n, sizeof t->b - t->n, fmt, ap);
    va_end(ap);
    if (w > 0)
        t->n = t->n + (size_t)w < sizeof t->b ? t->n + (size_t)w : sizeof t->b - 1;
}

/* Pairs checked and pairs that matched, so that the random tests can show
 * they test something (a generator whose patterns never match would pass). */
static size_t pairs_checked, pairs_matched;

/* Checks that the set's answer for ev equals one-by-one matching of pats;
 * returns the number of mismatching events (0) and prints the first. */
static int check_event(const sl_pattern_set *ps, sl_pattern_set_scratch *scr,
                       const sl_pattern *const *pats, size_t n, const sl_evview *ev,
                       const char *evtext, const char *const *ptext)
{
    static uint32_t got[4096];
    assert_true(n <= 4096);
    size_t k = sl_pattern_set_match(ps, ev, scr, got);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        bool want = !pats[i] || sl_pattern_match_event(pats[i], ev);
        bool has = j < k && got[j] == i;
        pairs_checked++;
        pairs_matched += want;
        if (has)
            j++;
        if (want != has) {
            fprintf(stderr, "pattern %zu of %zu (%s) on event %s: set says %d, one by one %d\n", i,
                    n, ptext && ptext[i] ? ptext[i] : "(null)", evtext, has, want);
            return 1;
        }
    }
    if (j != k) {
        fprintf(stderr, "set answered %zu patterns, %zu expected or out of order, event %s\n", k, j,
                evtext);
        return 1;
    }
    return 0;
}

static int parse(sl_evview *ev, const char *text)
{
    sl_error err = {0};
    return sl_evview_parse(ev, text, strlen(text), true, &err);
}

/* ---- test_pattern.c's table ------------------------------------------------------ */

static void test_table_pairs(void **state)
{
    (void)state;
    size_t nc = sizeof cases / sizeof cases[0];
    sl_pattern **pats = calloc(nc, sizeof *pats);
    const char **ptext = calloc(nc, sizeof *ptext);
    assert_non_null(pats);
    assert_non_null(ptext);
    size_t np = 0;
    int failures = 0;
    sl_evview ev;
    sl_evview_init(&ev);
    for (size_t i = 0; i < nc; i++) {
        sl_pattern *p = NULL;
        if (sl_pattern_compile(cases[i].pattern, strlen(cases[i].pattern), &p, NULL))
            continue;
        /* Alone: the set of one gives the table's answer. */
        sl_pattern_set *one = NULL;
        assert_int_equal(sl_pattern_set_build((const sl_pattern *const *)&p, 1, &one, NULL), 0);
        sl_pattern_set_scratch *scr = sl_pattern_set_scratch_new(one);
        assert_non_null(scr);
        if (parse(&ev, cases[i].event) == 0) {
            uint32_t got[1];
            size_t k = sl_pattern_set_match(one, &ev, scr, got);
            if ((k == 1) != cases[i].match) {
                fprintf(stderr, "case %zu: %s on %s: set says %zu\n", i, cases[i].pattern,
                        cases[i].event, k);
                failures++;
            }
        }
        sl_pattern_set_scratch_free(scr);
        sl_pattern_set_free(one);
        ptext[np] = cases[i].pattern;
        pats[np++] = p;
    }
    /* All of them as one set, against every event of the table. */
    sl_pattern_set *ps = NULL;
    assert_int_equal(sl_pattern_set_build((const sl_pattern *const *)pats, np, &ps, NULL), 0);
    assert_int_equal(sl_pattern_set_count(ps), np);
    sl_pattern_set_scratch *scr = sl_pattern_set_scratch_new(ps);
    assert_non_null(scr);
    size_t events = 0;
    for (size_t i = 0; i < nc; i++) {
        if (parse(&ev, cases[i].event))
            continue;
        events++;
        failures +=
            check_event(ps, scr, (const sl_pattern *const *)pats, np, &ev, cases[i].event, ptext);
    }
    fprintf(stderr, "table: %zu patterns, %zu events\n", np, events);
    assert_true(np > 200 && events > 200);
    assert_int_equal(failures, 0);
    sl_pattern_set_scratch_free(scr);
    sl_pattern_set_free(ps);
    for (size_t i = 0; i < np; i++)
        sl_pattern_free(pats[i]);
    free(pats);
    free(ptext);
    sl_evview_free(&ev);
}

/* ---- random patterns and events -------------------------------------------------- */

/* A small vocabulary, so that random patterns and events meet: keys (the
 * first four common), strings (case variants, non-ASCII, addresses, stars
 * and backslashes), numbers (text variants of one value, the numeric
 * limits and past them). */
static const char *const keys[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"};
static const char *const strs[] = {"",
                                   "a",
                                   "ab",
                                   "abc",
                                   "A",
                                   "Ab",
                                   "ABC",
                                   "b",
                                   "ba",
                                   "caf\\u00e9",
                                   "CAF\\u00c9",
                                   "caf\\u00c9",
                                   "x/y",
                                   "10.0.0.1",
                                   "10.1.2.3",
                                   "192.168.1.9",
                                   "::1",
                                   "2001:db8::1",
                                   "2001:DB8::ff",
                                   "a*b",
                                   "a\\\\b",
                                   "\\u00fcber",
                                   "\\u00dcBER",
                                   "k",
                                   "\\u212a",
                                   "order.created",
                                   "ORDER.created"};
static const char *const nums[] = {"0",   "1",    "-1",   "1.5", "3",   "3.0", "3e0", "10",
                                   "1e3", "1000", "-5e9", "5e9", "6e9", "100", "-0"};

static const char *rkey(void)
{
    return rnd(4) ? keys[rnd(4)] : keys[rnd(12)];
}

static void rstr(txt *t)
{
    put(t, "\"%s\"", strs[rnd(sizeof strs / sizeof *strs)]);
}

static void rnum(txt *t)
{
    put(t, "%s", nums[rnd(sizeof nums / sizeof *nums)]);
}

/* A numeric operand within the limits. */
static void rnumop(txt *t)
{
    static const char *const v[] = {"0", "1", "-1", "1.5", "3", "10", "100", "1e3", "-5e9", "5e9"};
    put(t, "%s", v[rnd(10)]);
}

static void rstrlist(txt *t)
{
    if (rnd(2)) {
        rstr(t);
        return;
    }
    put(t, "[");
    for (uint32_t i = 0, n = 1 + rnd(3); i < n; i++) {
        put(t, i ? "," : "");
        rstr(t);
    }
    put(t, "]");
}

static void rwildcard(txt *t)
{
    static const char *const w[] = {"a*",   "*b",   "a*b",     "*",          "ab",         "*a*",
                                    "caf*", "1*.1", "a\\\\*b", "a\\\\\\\\b", "o*.created", "*::*"};
    put(t, "\"%s\"", w[rnd(sizeof w / sizeof *w)]);
}

static void rmatcher(txt *t)
{
    static const char *const v4[] = {"10.0.0.0/8", "10.0.0.0/24", "192.168.0.0/16", "0.0.0.0/0",
                                     "10.0.0.1/32"};
    static const char *const v6[] = {"2001:db8::/32", "::1/128", "::/0", "2001:db8::ff/120"};
    switch (rnd(20)) {
    case 0:
    case 1:
    case 2:
        rstr(t);
        break;
    case 3:
        rnum(t);
        break;
    case 4:
        put(t, "%s", (const char *[]){"true", "false", "null"}[rnd(3)]);
        break;
    case 5:
        put(t, "{\"prefix\":");
        if (rnd(3) == 0) {
            put(t, "{\"equals-ignore-case\":");
            rstr(t);
            put(t, "}");
        } else {
            rstr(t);
        }
        put(t, "}");
        break;
    case 6:
        put(t, "{\"suffix\":");
        if (rnd(3) == 0) {
            put(t, "{\"equals-ignore-case\":");
            rstr(t);
            put(t, "}");
        } else {
            rstr(t);
        }
        put(t, "}");
        break;
    case 7:
    case 8:
        put(t, "{\"anything-but\":");
        switch (rnd(7)) {
        case 0:
            rstrlist(t);
            break;
        case 1:
            rnumop(t);
            break;
        case 2:
            put(t, "[");
            rnumop(t);
            put(t, ",");
            rnumop(t);
            put(t, "]");
            break;
        case 3:
            put(t, "{\"prefix\":\"%s\"}", (const char *[]){"a", "ab", "10.", "order"}[rnd(4)]);
            break;
        case 4:
            put(t, "{\"suffix\":\"%s\"}", (const char *[]){"b", "c", ".1", "created"}[rnd(4)]);
            break;
        case 5:
            put(t, "{\"equals-ignore-case\":");
            rstrlist(t);
            put(t, "}");
            break;
        default:
            put(t, "{\"wildcard\":");
            rwildcard(t);
            put(t, "}");
            break;
        }
        put(t, "}");
        break;
    case 9:
    case 10: {
        put(t, "{\"numeric\":[");
        switch (rnd(4)) {
        case 0:
            put(t, "\"=\",");
            rnumop(t);
            break;
        case 1:
            put(t, "\"%s\",", rnd(2) ? ">" : ">=");
            rnumop(t);
            break;
        case 2:
            put(t, "\"%s\",", rnd(2) ? "<" : "<=");
            rnumop(t);
            break;
        default: { /* lower < upper */
            static const double b[] = {-5e9, -1, 0, 1, 1.5, 3, 10, 100, 1000, 5e9};
            uint32_t i = rnd(9), j = i + 1 + rnd(9 - i);
            put(t, "\"%s\",%.17g,\"%s\",%.17g", rnd(2) ? ">" : ">=", b[i],
                rnd(2) ? "<" : "<=", b[j]);
        }
        }
        put(t, "]}");
        break;
    }
    case 11:
    case 12:
        put(t, "{\"exists\":%s}", rnd(2) ? "true" : "false");
        break;
    case 13:
    case 14:
        put(t, "{\"equals-ignore-case\":");
        rstr(t);
        put(t, "}");
        break;
    case 15:
    case 16:
        put(t, "{\"wildcard\":");
        rwildcard(t);
        put(t, "}");
        break;
    case 17:
        put(t, "{\"cidr\":\"%s\"}", v4[rnd(5)]);
        break;
    case 18:
        put(t, "{\"cidr\":\"%s\"}", v6[rnd(4)]);
        break;
    default:
        put(t, "{\"prefix\":\"%s\"}", (const char *[]){"a", "ab", "10.", "caf", "2001:"}[rnd(5)]);
        break;
    }
}

static void robject(txt *t, int depth, bool in_or);

static void rfield_value(txt *t, int depth, bool in_or)
{
    if (depth < 3 && rnd(4) == 0) {
        robject(t, depth + 1, in_or);
        return;
    }
    put(t, "[");
    for (uint32_t i = 0, n = 1 + (rnd(3) == 0 ? rnd(3) : 0); i < n; i++) {
        put(t, i ? "," : "");
        rmatcher(t);
    }
    put(t, "]");
}

/* A pattern object: 1-3 fields, sometimes a $or of 2-3 alternatives. */
static void robject(txt *t, int depth, bool in_or)
{
    put(t, "{");
    uint32_t nf = 1 + rnd(3);
    bool or = depth < 3 && rnd(6) == 0;
    if (or)
        nf = rnd(2);
    for (uint32_t i = 0; i < nf; i++) {
        put(t, "%s\"%s\":", i ? "," : "", rkey());
        rfield_value(t, depth, in_or);
    }
    if (or) {
        put(t, "%s\"$or\":[", nf ? "," : "");
        for (uint32_t i = 0, n = 2 + rnd(2); i < n; i++) {
            put(t, i ? "," : "");
            robject(t, depth + 1, true);
        }
        put(t, "]");
    }
    put(t, "}");
}

static void rvalue(txt *t, int depth);

static void rscalar(txt *t)
{
    switch (rnd(8)) {
    case 0:
    case 1:
    case 2:
    case 3:
        rstr(t);
        break;
    case 4:
    case 5:
        rnum(t);
        break;
    default:
        put(t, "%s", (const char *[]){"true", "false", "null"}[rnd(3)]);
    }
}

static void revent_object(txt *t, int depth)
{
    put(t, "{");
    for (uint32_t i = 0, n = rnd(depth ? 4 : 6); i < n; i++) {
        put(t, "%s\"%s\":", i ? "," : "", rkey());
        rvalue(t, depth + 1);
    }
    put(t, "}");
}

static void rvalue(txt *t, int depth)
{
    uint32_t r = depth < 4 ? rnd(10) : 0;
    if (r < 5) {
        rscalar(t);
    } else if (r < 7) {
        revent_object(t, depth);
    } else {
        put(t, "[");
        for (uint32_t i = 0, n = rnd(4); i < n; i++) {
            put(t, i ? "," : "");
            rvalue(t, depth + 1);
        }
        put(t, "]");
    }
}

/* n random patterns (compiled; the ones the compiler refuses are drawn
 * again), one in nulls NULL. Texts in texts[i] (caller frees). */
static void rpatterns(sl_pattern **pats, char **texts, size_t n, uint32_t nulls)
{
    for (size_t i = 0; i < n; i++) {
        pats[i] = NULL;
        texts[i] = NULL;
        if (nulls && rnd(nulls) == 0)
            continue;
        for (;;) {
            txt t = {.n = 0};
            robject(&t, 0, false);
            if (sl_pattern_compile(t.b, t.n, &pats[i], NULL) == 0) {
                texts[i] = strdup(t.b);
                assert_non_null(texts[i]);
                break;
            }
        }
    }
}

static void free_patterns(sl_pattern **pats, char **texts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sl_pattern_free(pats[i]);
        free(texts[i]);
    }
}

/* A set of n random patterns against `events` random events. */
static int random_round(size_t n, int events, uint32_t nulls)
{
    sl_pattern **pats = calloc(n, sizeof *pats);
    char **texts = calloc(n, sizeof *texts);
    assert_non_null(pats);
    assert_non_null(texts);
    rpatterns(pats, texts, n, nulls);
    sl_pattern_set *ps = NULL;
    assert_int_equal(sl_pattern_set_build((const sl_pattern *const *)pats, n, &ps, NULL), 0);
    sl_pattern_set_scratch *scr = sl_pattern_set_scratch_new(ps);
    assert_non_null(scr);
    sl_evview ev;
    sl_evview_init(&ev);
    int failures = 0;
    for (int e = 0; e < events && !failures; e++) {
        txt t = {.n = 0};
        revent_object(&t, 0);
        assert_int_equal(parse(&ev, t.b), 0);
        failures += check_event(ps, scr, (const sl_pattern *const *)pats, n, &ev, t.b,
                                (const char *const *)texts);
    }
    sl_evview_free(&ev);
    sl_pattern_set_scratch_free(scr);
    sl_pattern_set_free(ps);
    free_patterns(pats, texts, n);
    free(pats);
    free(texts);
    return failures;
}

static void test_random_small(void **state)
{
    (void)state;
    int failures = 0;
    pairs_checked = pairs_matched = 0;
    for (uint64_t seed = 1; seed <= 400 && !failures; seed++) {
        rng_state = seed * 0x9E3779B97F4A7C15ull;
        failures += random_round(1 + seed % 12, 60, seed % 3 ? 0 : 5);
        if (failures)
            fprintf(stderr, "seed %llu\n", (unsigned long long)seed);
    }
    fprintf(stderr, "random small: %zu pairs, %zu matched\n", pairs_checked, pairs_matched);
    assert_int_equal(failures, 0);
    assert_true(pairs_matched * 50 > pairs_checked);
}

static void test_random_large(void **state)
{
    (void)state;
    static const size_t sizes[] = {50, 200, 1000};
    int failures = 0;
    pairs_checked = pairs_matched = 0;
    for (size_t s = 0; s < 3 && !failures; s++) {
        rng_state = 0xC0FFEEull + s;
        failures += random_round(sizes[s], 400, 50);
    }
    fprintf(stderr, "random large: %zu pairs, %zu matched\n", pairs_checked, pairs_matched);
    assert_int_equal(failures, 0);
    assert_true(pairs_matched * 50 > pairs_checked);
}

/* Patterns from texts against event texts, as one set. */
static int text_round(const char *const *ptexts, size_t n, const char *const *etexts, size_t ne)
{
    sl_pattern **pats = calloc(n, sizeof *pats);
    assert_non_null(pats);
    for (size_t i = 0; i < n; i++)
        if (ptexts[i])
            assert_int_equal(sl_pattern_compile(ptexts[i], strlen(ptexts[i]), &pats[i], NULL), 0);
    sl_pattern_set *ps = NULL;
    assert_int_equal(sl_pattern_set_build((const sl_pattern *const *)pats, n, &ps, NULL), 0);
    sl_pattern_set_scratch *scr = sl_pattern_set_scratch_new(ps);
    assert_non_null(scr);
    sl_evview ev;
    sl_evview_init(&ev);
    int failures = 0;
    for (size_t e = 0; e < ne; e++) {
        assert_int_equal(parse(&ev, etexts[e]), 0);
        failures +=
            check_event(ps, scr, (const sl_pattern *const *)pats, n, &ev, etexts[e], ptexts);
    }
    sl_evview_free(&ev);
    sl_pattern_set_scratch_free(scr);
    sl_pattern_set_free(ps);
    for (size_t i = 0; i < n; i++)
        sl_pattern_free(pats[i]);
    free(pats);
    return failures;
}

/* Generated families that stress one index each. */
static void test_index_corners(void **state)
{
    (void)state;
    enum { N = 600 };
    static char buf[N][160];
    const char *p[N];
    int failures = 0;
    /* Wide overlapping ranges: the regions would list ~N^2 ids, so the
     * path falls back to "present"; and narrow ones, which do not. */
    for (int i = 0; i < N; i++) {
        if (i % 2)
            snprintf(buf[i], sizeof buf[i], "{\"n\":[{\"numeric\":[\">=\",%d]}]}", i);
        else
            snprintf(buf[i], sizeof buf[i], "{\"m\":[{\"numeric\":[\">\",%d,\"<=\",%d]}]}", i,
                     i + 3);
        p[i] = buf[i];
    }
    const char *ev1[] = {"{\"n\":300}",  "{\"n\":-1}",  "{\"n\":599.5}",   "{\"n\":[1,2,\"x\"]}",
                         "{\"m\":4}",    "{\"m\":4.5}", "{\"m\":[0,600]}", "{\"m\":603}",
                         "{\"m\":1e10}", "{\"n\":5e9}", "{\"n\":-5e9}",    "{\"n\":null,\"m\":2}"};
    failures += text_round(p, N, ev1, sizeof ev1 / sizeof *ev1);
    /* Many children under one path (hashed look-up) and many prefix
     * lengths on one path. */
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0)
            snprintf(buf[i], sizeof buf[i], "{\"d\":{\"k%d\":[\"v%d\"]}}", i, i % 7);
        else if (i % 3 == 1)
            snprintf(buf[i], sizeof buf[i], "{\"s\":[{\"prefix\":\"%.*s\"}]}", 1 + i % 40,
                     "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
        else
            snprintf(buf[i], sizeof buf[i], "{\"t\":[{\"equals-ignore-case\":\"T%d\"}]}", i % 11);
        p[i] = buf[i];
    }
    const char *ev2[] = {"{\"d\":{\"k0\":\"v0\",\"k3\":\"v3\",\"k300\":\"v6\"}}",
                         "{\"d\":[{\"k9\":\"v2\"},{\"k12\":[\"v5\",\"v0\"]}]}",
                         "{\"s\":\"abcdefghijklmnopqrstuvwxyzabcdefghijklmn\"}",
                         "{\"s\":[\"abc\",\"abcdefgh\"],\"t\":\"t3\"}",
                         "{\"t\":[\"T10\",\"t1\",\"x\"],\"d\":{\"k3\":\"v3\"}}",
                         "{\"s\":\"\",\"t\":\"\"}"};
    failures += text_round(p, N, ev2, sizeof ev2 / sizeof *ev2);
    /* Every pattern a candidate: present anchors (suffix, anything-but)
     * and unanchorable ones (exists:false), with NULL patterns. */
    for (int i = 0; i < N; i++) {
        if (i % 5 == 0) {
            p[i] = NULL;
            continue;
        }
        if (i % 3 == 0)
            snprintf(buf[i], sizeof buf[i], "{\"a\":[{\"suffix\":\"%d\"}]}", i % 10);
        else if (i % 3 == 1)
            snprintf(buf[i], sizeof buf[i], "{\"a\":[{\"anything-but\":\"%d\"}]}", i);
        else
            snprintf(buf[i], sizeof buf[i], "{\"b%d\":[{\"exists\":false}]}", i % 4);
        p[i] = buf[i];
    }
    const char *ev3[] = {"{\"a\":\"13\"}", "{\"a\":[\"7\",\"8\"],\"b1\":1}", "{}",
                         "{\"b0\":{\"x\":1},\"b2\":[]}"};
    failures += text_round(p, N, ev3, sizeof ev3 / sizeof *ev3);
    assert_int_equal(failures, 0);
}

/* ---- contract ------------------------------------------------------------------- */

static void test_contract(void **state)
{
    (void)state;
    const char *pt[] = {"{\"type\":[\"order.created\"]}", NULL,
                        "{\"data\":{\"n\":[{\"numeric\":[\"=\",5]}]}}",
                        "{\"x\":[{\"exists\":false}]}"};
    sl_pattern *pats[4] = {0};
    for (int i = 0; i < 4; i++)
        if (pt[i])
            assert_int_equal(sl_pattern_compile(pt[i], strlen(pt[i]), &pats[i], NULL), 0);
    sl_pattern_set *ps = NULL, *small = NULL, *empty = NULL;
    assert_int_equal(sl_pattern_set_build((const sl_pattern *const *)pats, 4, &ps, NULL), 0);
    assert_int_equal(sl_pattern_set_build((const sl_pattern *const *)pats + 2, 1, &small, NULL), 0);
    assert_int_equal(sl_pattern_set_build(NULL, 0, &empty, NULL), 0);
    assert_int_equal(sl_pattern_set_count(ps), 4);
    assert_true(sl_pattern_set_bytes(ps) > 0);
    sl_pattern_set_scratch *scr = sl_pattern_set_scratch_new(ps);
    assert_non_null(scr);
    sl_evview ev;
    sl_evview_init(&ev);
    const char *e = "{\"type\":\"order.created\",\"data\":{\"n\":5.0}}";
    assert_int_equal(parse(&ev, e), 0);
    uint32_t out[4];
#ifdef COUNT_ALLOCS
    size_t before = allocs;
#endif
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(sl_pattern_set_match(ps, &ev, scr, out), 4);
        assert_int_equal(out[0], 0);
        assert_int_equal(out[3], 3);
        /* The scratch of a bigger set serves a smaller one. */
        assert_int_equal(sl_pattern_set_match(small, &ev, scr, out), 1);
        assert_int_equal(out[0], 0);
        assert_int_equal(sl_pattern_set_match(empty, &ev, scr, out), 0);
    }
#ifdef COUNT_ALLOCS
    assert_int_equal(allocs - before, 0);
#endif
    /* The epoch wraps: stamps of 2^32 events ago must not count. */
    scr->epoch = UINT32_MAX - 1;
    for (int i = 0; i < 4; i++)
        assert_int_equal(sl_pattern_set_match(ps, &ev, scr, out), 4);
    const char *miss = "{\"type\":\"order.shipped\",\"x\":1}";
    assert_int_equal(parse(&ev, miss), 0);
    assert_int_equal(sl_pattern_set_match(ps, &ev, scr, out), 1);
    assert_int_equal(out[0], 1);
    /* An empty view (nothing parsed): only NULL patterns match, as one by one. */
    sl_evview none;
    sl_evview_init(&none);
    assert_int_equal(sl_pattern_set_match(ps, &none, scr, out), 1);
    assert_int_equal(out[0], 1);
    sl_pattern_set_scratch_free(scr);
    sl_pattern_set_scratch_free(NULL);
    sl_pattern_set_free(ps);
    sl_pattern_set_free(small);
    sl_pattern_set_free(empty);
    sl_pattern_set_free(NULL);
    for (int i = 0; i < 4; i++)
        sl_pattern_free(pats[i]);
    sl_evview_free(&ev);
}

/* Out of memory at every allocation of a build, in turn: SL_ENOMEM and no
 * set, never a crash (and, under valgrind, no leak), until the build that
 * has room gives the same answers as one by one. */
static void test_out_of_memory(void **state)
{
    (void)state;
#ifdef COUNT_ALLOCS
    const char *pt[] = {"{\"type\":[\"a\",{\"prefix\":\"b\"}],\"x\":[{\"suffix\":\"c\"}]}",
                        "{\"n\":[{\"numeric\":[\">\",1,\"<\",5]},{\"numeric\":[\"=\",9]}]}",
                        "{\"d\":{\"e\":[{\"equals-ignore-case\":\"Q\"}]},\"$or\":[{\"f\":[1]},"
                        "{\"g\":[true]}]}",
                        "{\"h\":[{\"exists\":false}]}", NULL};
    sl_pattern *pats[5] = {0};
    for (int i = 0; i < 4; i++)
        assert_int_equal(sl_pattern_compile(pt[i], strlen(pt[i]), &pats[i], NULL), 0);
    sl_pattern_set *ps = NULL;
    int rc = SL_ENOMEM;
    size_t k;
    for (k = 1; rc == SL_ENOMEM && k < 10000; k++) {
        sl_error err = {0};
        fail_at = allocs + k;
        rc = sl_pattern_set_build((const sl_pattern *const *)pats, 5, &ps, &err);
        fail_at = 0;
        assert_true(rc == 0 || (rc == SL_ENOMEM && err.msg[0]));
    }
    assert_int_equal(rc, 0);
    assert_true(k > 10); /* the build allocates, so failures were met */
    sl_pattern_set_scratch *scr = NULL;
    for (k = 1; !scr && k < 100; k++) {
        fail_at = allocs + k;
        scr = sl_pattern_set_scratch_new(ps);
        fail_at = 0;
    }
    assert_non_null(scr);
    const char *ev[] = {"{\"type\":\"bz\",\"x\":\"abc\"}", "{\"n\":9,\"h\":1}",
                        "{\"d\":{\"e\":\"q\"},\"g\":true}"};
    sl_evview v;
    sl_evview_init(&v);
    for (int e = 0; e < 3; e++) {
        assert_int_equal(parse(&v, ev[e]), 0);
        assert_int_equal(check_event(ps, scr, (const sl_pattern *const *)pats, 5, &v, ev[e], pt),
                         0);
    }
    sl_evview_free(&v);
    sl_pattern_set_scratch_free(scr);
    sl_pattern_set_free(ps);
    for (int i = 0; i < 4; i++)
        sl_pattern_free(pats[i]);
#else
    skip(); /* ASan owns malloc: the counting allocator is not built */
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_pairs),   cmocka_unit_test(test_contract),
        cmocka_unit_test(test_index_corners), cmocka_unit_test(test_random_small),
        cmocka_unit_test(test_random_large),  cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
