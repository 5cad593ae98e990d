/*
 * tests/unit/test_pattern.c — EventBridge event patterns: a table of
 * pattern/event pairs per operator (pattern_cases.h: mostly the EventBridge
 * documentation's own examples), arrays in events, nesting, $or, invalid patterns with the
 * field named in the message, invalid events, and a check that matching
 * does not allocate.
 */
#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rules/pattern.h"

#include "pattern_cases.h"

static void test_match_table(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mcase *c = &cases[i];
        sl_pattern *p = NULL;
        sl_error err = {0};
        int rc = sl_pattern_compile(c->pattern, strlen(c->pattern), &p, &err);
        if (rc != 0) {
            fprintf(stderr, "case %zu: compile %s: %s\n", i, c->pattern, err.msg);
            failures++;
            continue;
        }
        bool m = !c->match;
        rc = sl_pattern_match(p, c->event, strlen(c->event), &m, &err);
        if (rc != 0 || m != c->match) {
            fprintf(stderr, "case %zu: pattern %s event %s: rc %d, got %d, want %d (%s)\n", i,
                    c->pattern, c->event, rc, m, c->match, rc ? err.msg : "");
            failures++;
        }
        sl_pattern_free(p);
    }
    assert_int_equal(failures, 0);
}

typedef struct bcase {
    const char *pattern;
    int code;
    const char *msg; /* a substring of the error message */
} bcase;

static const bcase bad_cases[] = {
    {"{\"detail\":{\"amount\":[{\"numeric\":[\">\"]}]}}", SL_EINVAL, "detail.amount: numeric"},
    {"{\"detail\":{\"amount\":[{\"numeric\":[\">\",\"5\"]}]}}", SL_EINVAL,
     "detail.amount: numeric needs an operator and a number"},
    {"{\"a\":[{\"numeric\":[\"~\",5]}]}", SL_EINVAL, "a: numeric: unknown operator \"~\""},
    {"{\"a\":[{\"numeric\":[\"<\",5,\">\",1]}]}", SL_EINVAL, "a: numeric: a range"},
    {"{\"a\":[{\"numeric\":[\">\",5,\">\",1]}]}", SL_EINVAL, "a: numeric: a range"},
    {"{\"a\":[{\"numeric\":[\"=\",5,\"<\",1]}]}", SL_EINVAL, "a: numeric: \"=\""},
    {"{\"a\":[{\"numeric\":5}]}", SL_EINVAL, "a: numeric needs"},
    {"{\"a\":[{\"numeric\":[\">\",1,\"<\"]}]}", SL_EINVAL, "a: numeric needs"},
    {"{\"x\":{\"y\":[{\"prefx\":\"a\"}]}}", SL_EINVAL, "x.y: unknown operator \"prefx\""},
    {"{\"a\":\"b\"}", SL_EINVAL, "a: pattern leaf must be an array"},
    {"{\"a\":{\"b\":5}}", SL_EINVAL, "a.b: pattern leaf must be an array"},
    {"{\"a\":[]}", SL_EINVAL, "a: pattern leaf array must not be empty"},
    {"{\"a\":[[\"b\"]]}", SL_EINVAL, "a: a pattern leaf may not hold nested arrays"},
    {"{\"a\":[{\"prefix\":\"x\",\"suffix\":\"y\"}]}", SL_EINVAL, "a: an operator object"},
    {"{\"a\":[{}]}", SL_EINVAL, "a: an operator object"},
    {"{\"a\":[{\"prefix\":5}]}", SL_EINVAL, "a: prefix needs a string"},
    {"{\"a\":[{\"suffix\":{\"equals-ignore-case\":1}}]}", SL_EINVAL, "a: suffix needs a string"},
    {"{\"a\":[{\"equals-ignore-case\":[\"x\"]}]}", SL_EINVAL, "a: equals-ignore-case needs"},
    {"{\"a\":[{\"exists\":\"yes\"}]}", SL_EINVAL, "a: exists needs true or false"},
    {"{\"a\":[{\"anything-but\":true}]}", SL_EINVAL, "a: anything-but needs"},
    {"{\"a\":[{\"anything-but\":[]}]}", SL_EINVAL, "a: anything-but list must not be empty"},
    {"{\"a\":[{\"anything-but\":[\"x\",1]}]}", SL_EINVAL, "a: anything-but list must hold only"},
    {"{\"a\":[{\"anything-but\":{\"prefix\":1}}]}", SL_EINVAL, "a: anything-but prefix needs"},
    {"{\"a\":[{\"anything-but\":{\"prefx\":\"a\"}}]}", SL_EINVAL,
     "a: unknown anything-but operator \"prefx\""},
    {"{\"a\":[{\"anything-but\":{\"prefix\":\"a\",\"suffix\":\"b\"}}]}", SL_EINVAL,
     "a: anything-but takes one operator"},
    {"{\"a\":[{\"wildcard\":\"a**b\"}]}", SL_EINVAL, "a: wildcard \"a**b\": consecutive"},
    {"{\"a\":[{\"wildcard\":\"a\\\\b\"}]}", SL_EINVAL, "a: wildcard \"a\\b\": a backslash"},
    {"{\"a\":[{\"wildcard\":3}]}", SL_EINVAL, "a: wildcard needs a string"},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/33\"}]}", SL_EINVAL, "ip: cidr: \"10.0.0.0/33\""},
    {"{\"ip\":[{\"cidr\":\"10.0.0/8\"}]}", SL_EINVAL, "ip: cidr: \"10.0.0/8\""},
    {"{\"ip\":[{\"cidr\":\"::/129\"}]}", SL_EINVAL, "ip: cidr: \"::/129\""},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/x\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"ip\":[{\"cidr\":1}]}", SL_EINVAL, "ip: cidr needs a string"},
    {"{\"$or\":[]}", SL_EINVAL, "$or: $or needs an array of at least two pattern objects"},
    {"{\"$or\":[{\"a\":[1]}]}", SL_EINVAL, "$or: $or needs an array of at least two"},
    {"{\"$or\":[{\"a\":[1]},{}]}", SL_EINVAL, "(pattern): empty objects are not allowed"},
    {"{\"$or\":[{\"prefix\":[\"a\"]},{\"b\":[1]}]}", SL_EINVAL,
     "prefix: \"prefix\" is a reserved word and cannot be a field name in $or"},
    {"{\"$or\":[{\"a\":{\"numeric\":[1]}},{\"b\":[1]}]}", SL_EINVAL,
     "a.numeric: \"numeric\" is a reserved word"},
    {"{\"$or\":[{\"a\":[1]},{\"b\":{\"$or\":[{\">=\":[1]},{\"c\":[1]}]}}]}", SL_EINVAL,
     "b.>=: \">=\" is a reserved word"},
    {"{}", SL_EINVAL, "(pattern): empty objects are not allowed"},
    {"{\"a\":{}}", SL_EINVAL, "a: empty objects are not allowed"},
    {"{\"a\":{\"b\":[1]},\"c\":{\"d\":{}}}", SL_EINVAL, "c.d: empty objects are not allowed"},
    {"{\"source\":5}", SL_EINVAL, "source: pattern leaf must be an array"},
    {"{\"source\":null}", SL_EINVAL, "source: pattern leaf must be an array"},
    {"{\"a\":[{\"contains\":\"x\"}]}", SL_EINVAL, "a: unknown operator \"contains\""},
    {"{\"a\":[{\"exactly\":\"x\"}]}", SL_EINVAL, "a: unknown operator \"exactly\""},
    /* numeric limits and ranges */
    {"{\"a\":[{\"numeric\":[\">\",5000000001]}]}", SL_EINVAL,
     "a: numeric value 5000000001 is outside the range -5e9 to 5e9"},
    {"{\"a\":[{\"numeric\":[\"=\",-5.1e9]}]}", SL_EINVAL, "numeric value -5.1e9 is outside"},
    {"{\"a\":[{\"numeric\":[\"<\",1e400]}]}", SL_EINVAL, "numeric value 1e400 is outside"},
    {"{\"a\":[{\"numeric\":[\">=\",5e9]}]}", SL_EINVAL,
     "a: numeric: the lower bound must be less than the upper bound"},
    {"{\"a\":[{\"numeric\":[\"<\",-5e9]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">\",5,\"<\",5]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">=\",5,\"<=\",5]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">\",6,\"<=\",5]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">\",1,\"<\",2,\"<\",3]}]}", SL_EINVAL, "a: numeric needs"},
    /* anything-but */
    {"{\"a\":[{\"anything-but\":{\"prefix\":\"\"}}]}", SL_EINVAL,
     "a: anything-but prefix must not be empty"},
    {"{\"a\":[{\"anything-but\":{\"suffix\":[\"x\",\"\"]}}]}", SL_EINVAL,
     "a: anything-but suffix must not be empty"},
    {"{\"a\":[{\"anything-but\":{\"prefix\":[]}}]}", SL_EINVAL,
     "a: anything-but list must not be empty"},
    {"{\"a\":[{\"anything-but\":{\"prefix\":[1]}}]}", SL_EINVAL,
     "a: anything-but prefix needs a string or a list of strings"},
    {"{\"a\":[{\"anything-but\":{\"equals-ignore-case\":[\"x\",null]}}]}", SL_EINVAL,
     "a: anything-but equals-ignore-case needs a string"},
    {"{\"a\":[{\"anything-but\":{\"wildcard\":[\"a**\"]}}]}", SL_EINVAL,
     "a: wildcard \"a**\": consecutive"},
    {"{\"a\":[{\"anything-but\":6e9}]}", SL_EINVAL, "a: numeric value 6e9 is outside"},
    {"{\"a\":[{\"anything-but\":[1,-6e9]}]}", SL_EINVAL, "a: numeric value -6e9 is outside"},
    {"{\"a\":[{\"anything-but\":[null]}]}", SL_EINVAL, "a: anything-but needs"},
    {"{\"a\":[{\"anything-but\":[[\"x\"]]}]}", SL_EINVAL, "a: anything-but needs"},
    {"{\"a\":[{\"anything-but\":{\"exists\":true}}]}", SL_EINVAL,
     "a: unknown anything-but operator \"exists\""},
    {"{\"a\":[{\"anything-but\":{\"numeric\":[\">\",1]}}]}", SL_EINVAL,
     "a: unknown anything-but operator \"numeric\""},
    {"{\"a\":[{\"prefix\":{\"equals-ignore-case\":\"x\",\"y\":1}}]}", SL_EINVAL,
     "a: prefix needs a string"},
    {"{\"a\":[{\"suffix\":{\"prefix\":\"x\"}}]}", SL_EINVAL, "a: suffix needs a string"},
    /* cidr */
    {"{\"ip\":[{\"cidr\":\"1.2.3.4\"}]}", SL_EINVAL,
     "ip: cidr: \"1.2.3.4\" is not an address/prefix-length"},
    {"{\"ip\":[{\"cidr\":\"::ffff:1.2.3.4/96\"}]}", SL_EINVAL, "ip: cidr: \"::ffff:1.2.3.4/96\""},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/8/8\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/-1\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"$or\":{\"a\":[1]}}", SL_EINVAL, "$or needs"},
    {"{\"d\":{\"$or\":[{\"a\":[1]},5]}}", SL_EINVAL, "d.$or: $or needs"},
    {"{\"$or\":[{\"a\":[1]},{\"b\":{\"c\":[{\"nope\":1}]}}]}", SL_EINVAL,
     "b.c: unknown operator \"nope\""},
    {"[\"a\"]", SL_EINVAL, "a pattern must be a JSON object"},
    {"{\"a\":[1]", SL_EPARSE, "not valid JSON"},
    {"{\"a\":[1]} x", SL_EPARSE, "not valid JSON"},
    {"{\"a\":[\"\\x\"]}", SL_EPARSE, "not valid JSON"},
    {"", SL_EPARSE, "not valid JSON"},
};

static void test_invalid_patterns(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bcase *c = &bad_cases[i];
        sl_pattern *p = (sl_pattern *)&failures; /* must stay untouched */
        sl_error err = {0};
        int rc = sl_pattern_compile(c->pattern, strlen(c->pattern), &p, &err);
        if (rc != c->code || err.code != c->code || !strstr(err.msg, c->msg) ||
            p != (sl_pattern *)&failures) {
            fprintf(stderr, "bad case %zu: %s: rc %d, message \"%s\", want %d \"%s\"\n", i,
                    c->pattern, rc, err.msg, c->code, c->msg);
            failures++;
            if (rc == 0)
                sl_pattern_free(p);
        }
    }
    assert_int_equal(failures, 0);
}

/* "[0,1,…,n-1]" appended to b (values of one field). */
static void values(char *b, size_t cap, int n)
{
    size_t o = strlen(b);
    o += (size_t)snprintf(b + o, cap - o, "[");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(b + o, cap - o, "%s%d", i ? "," : "", i);
    snprintf(b + o, cap - o, "]");
}

/* Compiles the pattern fmt, where each "#" stands for a value list whose
 * length is the next argument; returns the compile result, err filled. */
static int compile_n(sl_error *err, const char *fmt, ...)
{
    static char b[1 << 16];
    va_list ap;
    va_start(ap, fmt);
    b[0] = '\0';
    for (const char *f = fmt; *f; f++) {
        if (*f == '#') {
            values(b, sizeof b, va_arg(ap, int));
        } else {
            size_t o = strlen(b);
            b[o] = *f;
            b[o + 1] = '\0';
        }
    }
    va_end(ap);
    sl_pattern *p = NULL;
    int rc = sl_pattern_compile(b, strlen(b), &p, err);
    sl_pattern_free(p);
    return rc;
}

/* EventBridge's limit of 1,000 combinations: values of fields multiply,
 * $or alternatives add up and multiply the fields beside them. */
static void test_combinations(void **state)
{
    (void)state;
    sl_error err = {0};
    /* 10 * 10 * 10 = 1,000: at the limit, accepted */
    assert_int_equal(compile_n(&err, "{\"a\":#,\"b\":#,\"c\":{\"d\":#}}", 10, 10, 10), 0);
    /* 1,001 */
    assert_int_equal(compile_n(&err, "{\"a\":#,\"b\":#,\"c\":{\"d\":#}}", 7, 11, 13), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,001 combinations"));
    assert_non_null(strstr(err.msg, "limit of 1,000"));
    /* $or: 999 + 1 = 1,000 is fine, 1,000 + 1 is not */
    assert_int_equal(compile_n(&err, "{\"$or\":[{\"a\":#},{\"b\":#}]}", 999, 1), 0);
    memset(&err, 0, sizeof err);
    assert_int_equal(compile_n(&err, "{\"$or\":[{\"a\":#},{\"b\":#}]}", 1000, 1), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,001 combinations"));
    /* nested $or: 4 * (5 + 10 * (20 + 4)) = 980 and 4 * (5 + 10 * (20 + 5)) = 1,020 */
    const char *nested = "{\"x\":#,\"$or\":[{\"y\":#},{\"v\":#,\"$or\":[{\"z\":#},{\"w\":#}]}]}";
    assert_int_equal(compile_n(&err, nested, 4, 5, 10, 20, 4), 0);
    assert_int_equal(compile_n(&err, nested, 4, 5, 10, 20, 5), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,020 combinations"));
    /* $or in two sibling objects multiply: (20 + 11) * (16 + 16) = 992, (20 + 12) * 32 = 1,024 */
    const char *two =
        "{\"d\":{\"$or\":[{\"a\":#},{\"b\":#}]},\"e\":{\"$or\":[{\"c\":#},{\"f\":#}]}}";
    assert_int_equal(compile_n(&err, two, 20, 11, 16, 16), 0);
    assert_int_equal(compile_n(&err, two, 20, 12, 16, 16), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,024 combinations"));
    /* an operator with a list is one value: 999 numbers excluded, times 1 */
    assert_int_equal(compile_n(&err, "{\"a\":[{\"anything-but\":#}],\"b\":#}", 999, 1000), 0);
    /* 20 fields of 20 values: 20^20 overflows 64 bits and still gets a message */
    char many[4096] = "{";
    for (int i = 0; i < 20; i++) {
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"f%d\":", i ? "," : "", i);
        values(many, sizeof many, 20);
    }
    strcat(many, "}");
    sl_pattern *p = NULL;
    assert_int_equal(sl_pattern_compile(many, strlen(many), &p, &err), SL_EINVAL);
    assert_null(p);
    assert_non_null(strstr(err.msg, "more than 18,446,744,073,709,551,615 combinations"));
}

static void test_invalid_events(void **state)
{
    (void)state;
    static const struct {
        const char *event;
        int code;
    } evs[] = {
        {"{\"a\":", SL_EPARTIAL},       {"{\"a\":1,}", SL_EPARSE},
        {"{\"a\":1} x", SL_EPARSE},     {"", SL_EPARTIAL},
        {"[1,2]", SL_EINVAL},           {"\"str\"", SL_EINVAL},
        {"{\"a\":\"\\x\"}", SL_EPARSE},
    };
    const char *pat = "{\"a\":[{\"exists\":false}]}";
    sl_pattern *p = NULL;
    assert_int_equal(sl_pattern_compile(pat, strlen(pat), &p, NULL), 0);
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
        sl_error err = {0};
        bool m = true;
        int rc = sl_pattern_match(p, evs[i].event, strlen(evs[i].event), &m, &err);
        if (rc != evs[i].code)
            fprintf(stderr, "event %zu: %s: rc %d want %d\n", i, evs[i].event, rc, evs[i].code);
        assert_int_equal(rc, evs[i].code);
        assert_true(err.msg[0] != '\0');
        assert_true(m); /* untouched */
    }
    sl_pattern_free(p);
}

/* Long escaped strings and long numbers take the heap fallback. */
static void test_long_values(void **state)
{
    (void)state;
    size_t n = 5000;
    char *ev = malloc(n * 2 + 200), *pat = malloc(n + 100);
    assert_non_null(ev);
    assert_non_null(pat);
    char *e = ev, *q = pat;
    e += sprintf(e, "{\"s\":\"");
    q += sprintf(q, "{\"s\":[\"");
    for (size_t i = 0; i < n; i++) {
        e += sprintf(e, i % 100 == 0 ? "\\u0041" : "b");
        *q++ = i % 100 == 0 ? 'A' : 'b';
    }
    /* A long number within the numeric limits: 4999999999.000…001. */
    e += sprintf(e, "\",\"n\":4999999999.");
    for (size_t i = 0; i < 300; i++)
        *e++ = '0';
    e += sprintf(e, "1}");
    q += sprintf(q, "\"],\"n\":[{\"numeric\":[\">\",4999999998.5]}]}");
    sl_pattern *p = NULL;
    sl_error err = {0};
    assert_int_equal(sl_pattern_compile(pat, (size_t)(q - pat), &p, &err), 0);
    bool m = false;
    assert_int_equal(sl_pattern_match(p, ev, (size_t)(e - ev), &m, &err), 0);
    assert_true(m);
    sl_pattern_free(p);
    free(ev);
    free(pat);
}

/* Arrays nested as deep as the scanner allows, for both recursions (leaf
 * values and object patterns); under ASan this also checks stack use. */
static void test_deep_arrays(void **state)
{
    (void)state;
    size_t depth = 1000;
    char *ev = malloc(depth * 2 + 64);
    assert_non_null(ev);
    char *e = ev;
    e += sprintf(e, "{\"s\":");
    for (size_t i = 1; i < depth; i++)
        *e++ = '[';
    e += sprintf(e, "{\"a\":\"x\"}");
    for (size_t i = 1; i < depth; i++)
        *e++ = ']';
    *e++ = '}';
    static const struct {
        const char *pattern;
        bool match;
    } pats[] = {
        {"{\"s\":{\"a\":[\"x\"]}}", true},
        {"{\"s\":{\"a\":[\"y\"]}}", false},
        {"{\"s\":[{\"exists\":false}]}", true},
        {"{\"s\":[\"x\"]}", false},
    };
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        sl_pattern *p = NULL;
        assert_int_equal(sl_pattern_compile(pats[i].pattern, strlen(pats[i].pattern), &p, NULL), 0);
        bool m = !pats[i].match;
        assert_int_equal(sl_pattern_match(p, ev, (size_t)(e - ev), &m, NULL), 0);
        assert_int_equal(m, pats[i].match);
        sl_pattern_free(p);
    }
    free(ev);
}

/* Every case of the table again, with the event right before a PROT_NONE
 * page: a one-byte over-read while matching crashes the test. */
static void test_guard_page(void **state)
{
    (void)state;
    long pg = sysconf(_SC_PAGESIZE);
    char *map =
        mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + pg, (size_t)pg, PROT_NONE), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_pattern *p = NULL;
        if (sl_pattern_compile(cases[i].pattern, strlen(cases[i].pattern), &p, NULL))
            continue; /* reported by test_match_table */
        size_t n = strlen(cases[i].event);
        assert_true(n <= (size_t)pg);
        memcpy(map + pg - n, cases[i].event, n);
        bool m = !cases[i].match;
        assert_int_equal(sl_pattern_match(p, map + pg - n, n, &m, NULL), 0);
        assert_int_equal(m, cases[i].match);
        sl_pattern_free(p);
    }
    munmap(map, (size_t)pg * 2);
}

/* Counting allocator: with glibc and without ASan (which owns malloc), the
 * test binary interposes malloc and friends over glibc's own entry points so
 * test_no_alloc can check that matching an ordinary event allocates nothing. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t n);
static size_t allocs;
/* When not 0, allocation number fail_at fails (tests/unit/test_pattern_set.c,
 * which includes this file, walks its builder's error paths with it). */
static size_t fail_at;
void *malloc(size_t n)
{
    if (++allocs == fail_at)
        return NULL;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    if (++allocs == fail_at)
        return NULL;
    return __libc_calloc(n, size);
}
void *realloc(void *ptr, size_t n)
{
    if (++allocs == fail_at)
        return NULL;
    return __libc_realloc(ptr, n);
}
#endif

/* A compiled pattern is reused for many events; matching allocates nothing. */
/* A syntax error met just as the node array is full is a syntax error, not
 * "out of memory" (unvalidated parse, as the rule runner does). */
static void test_parse_error_at_capacity(void **state)
{
    (void)state;
    char ev[4096];
    size_t n = (size_t)snprintf(ev, sizeof ev, "{");
    for (int i = 0; i < SL_EVVIEW_INLINE - 1; i++)
        n += (size_t)snprintf(ev + n, sizeof ev - n, "%s\"k%d\":%d", i ? "," : "", i, i);
    n += (size_t)snprintf(ev + n, sizeof ev - n, "}x");
    sl_evview pe;
    sl_evview_init(&pe);
    sl_error err = {0};
    assert_int_equal(sl_evview_parse(&pe, ev, n, false, &err), SL_EPARSE);
    sl_evview_free(&pe);
}

static void test_no_alloc(void **state)
{
    (void)state;
    const char *pat = "{\"type\":[{\"prefix\":\"order.\"}],\"data\":{\"amount\":[{\"numeric\":"
                      "[\">\",100]}],\"tags\":[\"vip\"]}}";
    sl_pattern *p = NULL;
    assert_int_equal(sl_pattern_compile(pat, strlen(pat), &p, NULL), 0);
    const char *yes =
        "{\"type\":\"order.created\",\"data\":{\"amount\":101,\"tags\":[\"x\",\"vip\"]}}";
    const char *no = "{\"type\":\"order.created\",\"data\":{\"amount\":101,\"tags\":[\"x\"]}}";
#ifdef COUNT_ALLOCS
    size_t before = allocs;
#endif
    for (int i = 0; i < 1000; i++) {
        bool m = false;
        assert_int_equal(sl_pattern_match(p, yes, strlen(yes), &m, NULL), 0);
        assert_true(m);
        assert_int_equal(sl_pattern_match(p, no, strlen(no), &m, NULL), 0);
        assert_false(m);
    }
#ifdef COUNT_ALLOCS
    /* Escaped strings and keys are decoded on the stack, too. */
    const char *esc = "{\"typ\\u0065\":\"order.\\u0063reated\",\"data\":{\"amount\":1e3,"
                      "\"tags\":[\"v\\u0069p\"]}}";
    bool m = false;
    assert_int_equal(sl_pattern_match(p, esc, strlen(esc), &m, NULL), 0);
    assert_true(m);
    assert_int_equal(allocs - before, 0);
#endif
    sl_pattern_free(p);
    sl_pattern_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_table),    cmocka_unit_test(test_invalid_patterns),
        cmocka_unit_test(test_invalid_events), cmocka_unit_test(test_long_values),
        cmocka_unit_test(test_no_alloc),       cmocka_unit_test(test_parse_error_at_capacity),
        cmocka_unit_test(test_deep_arrays),    cmocka_unit_test(test_guard_page),
        cmocka_unit_test(test_combinations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
