/*
 * tests/unit/test_input.c — the input transformer: tables of templates
 * (the EventBridge documentation's own examples first) filled from one
 * event, values of every JSON type inside and outside strings and in text
 * templates, missing paths, escapes, array indexes, bracket-quoted names,
 * the predefined placeholders, path inputs, compile errors with the
 * offending part named, bad events, and a check that applying allocates
 * nothing once the output buffer has room.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rules/input.h"

/* One event for every template case. */
static const char EVENT[] =
    "{\"version\":\"0\",\"id\":\"7bf73129\",\"time\":\"2015-11-11T21:29:54Z\","
    "\"resources\":[\"arn:1\",\"arn:2\"],"
    "\"detail\":{\"instance-id\":\"i-0123456789\",\"state\":\"RUNNING\",\"count\":3,"
    "\"ratio\":-1.5e3,\"ok\":true,\"bad\":false,\"none\":null,\"tags\":[\"a\",\"b\"],"
    "\"obj\":{\"k\":\"v\",\"n\":1},\"quote\":\"say \\\"hi\\\"\\n\",\"key.with.dots\":\"dotted\","
    "\"sp ace\":\"spaced\",\"esc\\u0061ped\":\"x\",\"empty\":\"\",\"dup\":1,\"dup\":2,"
    "\"inner\":{\"q\":\"a\\\"b\",\"l\":[\"x\\\\y\"]},"
    "\"nested\":{\"arr\":[{\"x\":1},{\"x\":2,\"y\":[10,20]}]}},"
    "\"spaced\" : { \"a\" : [ 1 , 2 ] , \"s\" : \"x y\" }}";

/* Declarations as "name=path" lines. */
static const char VARS[] = "instance=$.detail.instance-id\n"
                           "state=$.detail.state\n"
                           "count=$.detail.count\n"
                           "ratio=$.detail.ratio\n"
                           "ok=$.detail.ok\n"
                           "bad=$.detail.bad\n"
                           "none=$.detail.none\n"
                           "tags=$.detail.tags\n"
                           "obj=$.detail.obj\n"
                           "quote=$.detail.quote\n"
                           "spaced=$.spaced\n"
                           "missing=$.detail.nope\n"
                           "through=$.detail.state.deeper\n"
                           "res1=$.resources[1]\n"
                           "res9=$.resources[9]\n"
                           "objidx=$.detail.obj[0]\n"
                           "deep=$.detail.nested.arr[1].y[0]\n"
                           "dots=$.detail['key.with.dots']\n"
                           "space=$.detail[\"sp ace\"]\n"
                           "escaped=$.detail.escaped\n"
                           "empty=$.detail.empty\n"
                           "dup=$.detail.dup\n"
                           "inner=$.detail.inner\n"
                           "all=$\n"
                           "unused=$.never.used";

typedef struct decls {
    char buf[sizeof VARS];
    const char *names[64];
    const char *paths[64];
    size_t n;
} decls;

static void parse_decls(decls *d, const char *text)
{
    snprintf(d->buf, sizeof d->buf, "%s", text);
    d->n = 0;
    for (char *line = strtok(d->buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        assert_non_null(eq);
        *eq = '\0';
        d->names[d->n] = line;
        d->paths[d->n++] = eq + 1;
    }
}

typedef struct tcase {
    const char *tmpl;
    const char *want;
} tcase;

static const tcase cases[] = {
    /* ---- the EventBridge user guide's examples ---- */
    {"\"instance <instance> is in <state>\"", "\"instance i-0123456789 is in RUNNING\""},
    {"\"instance \\\"<instance>\\\" is in <state>\"",
     "\"instance \\\"i-0123456789\\\" is in RUNNING\""},
    {"{\n  \"instance\" : <instance>,\n  \"state\": <state>\n}",
     "{\n  \"instance\" : \"i-0123456789\",\n  \"state\": \"RUNNING\"\n}"},
    {"{\"instance\" : <instance>, \"state\": \"<state>\", \"instanceStatus\": \"instance "
     "\\\"<instance>\\\" is in <state>\"}",
     "{\"instance\" : \"i-0123456789\", \"state\": \"RUNNING\", \"instanceStatus\": \"instance "
     "\\\"i-0123456789\\\" is in RUNNING\"}"},
    {"{\"state\": [ 9, <state>, true ], \"Transformed\" : \"Yes\"}",
     "{\"state\": [ 9, \"RUNNING\", true ], \"Transformed\" : \"Yes\"}"},
    {"<instance> is in state <state>", "i-0123456789 is in state RUNNING"},
    /* ---- numbers ---- */
    {"{\"n\":<count>}", "{\"n\":3}"},
    {"{\"m\":\"count=<count>\"}", "{\"m\":\"count=3\"}"},
    {"{\"r\":<ratio>}", "{\"r\":-1.5e3}"},
    {"ratio <ratio>", "ratio -1.5e3"},
    /* ---- booleans and null ---- */
    {"{\"a\":<ok>,\"b\":<bad>}", "{\"a\":true,\"b\":false}"},
    {"{\"m\":\"<ok>/<bad>\"}", "{\"m\":\"true/false\"}"},
    {"{\"z\":<none>}", "{\"z\":null}"},
    {"{\"m\":\"<none>\"}", "{\"m\":\"null\"}"},
    {"ok=<ok> none=<none>", "ok=true none=null"},
    /* ---- objects and arrays ---- */
    {"{\"o\":<obj>}", "{\"o\":{\"k\":\"v\",\"n\":1}}"},
    {"{\"m\":\"obj is <obj>\"}", "{\"m\":\"obj is {k:v,n:1}\"}"},
    {"{\"t\":<tags>}", "{\"t\":[\"a\",\"b\"]}"},
    {"{\"m\":\"<tags>\"}", "{\"m\":\"[a,b]\"}"},
    {"detail=<obj>", "detail={\"k\":\"v\",\"n\":1}"},
    {"{\"s\":<spaced>}", "{\"s\":{\"a\":[1,2],\"s\":\"x y\"}}"},
    {"\"<spaced>\"", "\"{a:[1,2],s:x y}\""},
    /* escaped quotes and backslashes inside member strings survive */
    {"{\"m\":\"<inner>\"}", "{\"m\":\"{q:a\\\"b,l:[x\\\\y]}\"}"},
    /* ---- strings with escapes ---- */
    {"{\"m\":\"<quote>\"}", "{\"m\":\"say \\\"hi\\\"\\n\"}"},
    {"{\"q\":<quote>}", "{\"q\":\"say \\\"hi\\\"\\n\"}"},
    {"said: <quote>", "said: say \"hi\"\n"},
    {"{\"e\":<empty>,\"m\":\"[<empty>]\"}", "{\"e\":\"\",\"m\":\"[]\"}"},
    /* ---- missing paths ---- */
    {"{\"x\":<missing>}", "{\"x\":null}"},
    {"{\"x\":\"[<missing>]\"}", "{\"x\":\"[]\"}"},
    {"value: <missing>.", "value: ."},
    {"{\"x\":<through>}", "{\"x\":null}"},
    {"[<res9>,<objidx>]", "[null,null]"},
    /* ---- paths ---- */
    {"{\"r\":<res1>}", "{\"r\":\"arn:2\"}"},
    {"{\"y\":<deep>}", "{\"y\":10}"},
    {"{\"d\":<dots>,\"s\":<space>}", "{\"d\":\"dotted\",\"s\":\"spaced\"}"},
    {"{\"e\":<escaped>}", "{\"e\":\"x\"}"},
    {"{\"d\":<dup>}", "{\"d\":1}"},
    {"[<state>,\"<state>\",<state>]", "[\"RUNNING\",\"RUNNING\",\"RUNNING\"]"},
    /* ---- placeholders and literal text ---- */
    {"\"a < b and <state>\"", "\"a < b and RUNNING\""},
    {"x <= 3, <<count>>", "x <= 3, <3>"},
    {"\"a\\\\<state>\"", "\"a\\\\RUNNING\""},
    {"  {\"s\":<state>}", "  {\"s\":\"RUNNING\"}"},
    {"no placeholders", "no placeholders"},
    {"[<count> ]", "[3 ]"},
};

static void test_templates(void **state)
{
    (void)state;
    decls d;
    parse_decls(&d, VARS);
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_input *in = NULL;
        sl_error err = {0};
        int rc = sl_input_compile_template(d.names, d.paths, d.n, cases[i].tmpl, &in, &err);
        if (rc) {
            fprintf(stderr, "case %zu: compile %s: %s\n", i, cases[i].tmpl, err.msg);
            failures++;
            continue;
        }
        sl_buf out = SL_BUF_INIT;
        rc = sl_input_apply(in, EVENT, strlen(EVENT), NULL, &out, &err);
        if (rc || out.len != strlen(cases[i].want) ||
            memcmp(out.data, cases[i].want, out.len) != 0) {
            fprintf(stderr, "case %zu: %s\n  got  %.*s\n  want %s (rc %d %s)\n", i, cases[i].tmpl,
                    (int)out.len, out.data ? (char *)out.data : "", cases[i].want, rc,
                    rc ? err.msg : "");
            failures++;
        }
        sl_buf_free(&out);
        sl_input_free(in);
    }
    assert_int_equal(failures, 0);
}

/* Compiles tmpl with VARS, applies it to event with ctx, checks the text. */
static void check(const char *tmpl, const char *event, const sl_input_ctx *ctx, const char *want)
{
    decls d;
    parse_decls(&d, VARS);
    sl_input *in = NULL;
    sl_error err = {0};
    int rc = sl_input_compile_template(d.names, d.paths, d.n, tmpl, &in, &err);
    if (rc)
        fprintf(stderr, "compile %s: %s\n", tmpl, err.msg);
    assert_int_equal(rc, 0);
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_input_apply(in, event, strlen(event), ctx, &out, &err), 0);
    if (out.len != strlen(want) || memcmp(out.data, want, out.len) != 0)
        fprintf(stderr, "%s\n  got  %.*s\n  want %s\n", tmpl, (int)out.len, (char *)out.data, want);
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    sl_buf_free(&out);
    sl_input_free(in);
}

static void test_predefined(void **state)
{
    (void)state;
    sl_input_ctx ctx = {.rule = "my \"rule\"", .now_ms = 1709214300123};
    check("{\"r\":<sluice.rule>,\"m\":\"rule <sluice.rule> fired\"}", EVENT, &ctx,
          "{\"r\":\"my \\\"rule\\\"\",\"m\":\"rule my \\\"rule\\\" fired\"}");
    check("<sluice.rule> fired", EVENT, &ctx, "my \"rule\" fired");
    check("{\"at\":<sluice.matched-at>,\"m\":\"at <sluice.matched-at>\"}", EVENT, &ctx,
          "{\"at\":\"2024-02-29T13:45:00.123Z\",\"m\":\"at 2024-02-29T13:45:00.123Z\"}");
    check("at <sluice.matched-at>", EVENT, &ctx, "at 2024-02-29T13:45:00.123Z");
    /* The whole event, minified; also through a declared "$" path. */
    const char *ev = "{ \"a\" : [ 1 , \"x y\" ] }";
    check("{\"e\":<sluice.event>,\"n\":<count>}", ev, &ctx,
          "{\"e\":{\"a\":[1,\"x y\"]},\"n\":null}");
    check("event: <sluice.event>", ev, &ctx, "event: {\"a\":[1,\"x y\"]}");
    check("{\"e\":<all>}", ev, &ctx, "{\"e\":{\"a\":[1,\"x y\"]}}");
    /* Without a context the rule and the time are missing. */
    check("{\"r\":<sluice.rule>,\"t\":\"[<sluice.matched-at>]\"}", EVENT, NULL,
          "{\"r\":null,\"t\":\"[]\"}");
    sl_input_ctx norule = {.rule = NULL, .now_ms = 0};
    check("{\"r\":<sluice.rule>,\"t\":<sluice.matched-at>}", EVENT, &norule,
          "{\"r\":null,\"t\":\"1970-01-01T00:00:00.000Z\"}");
}

static void test_path_input(void **state)
{
    (void)state;
    static const struct {
        const char *path, *want;
    } pcs[] = {
        {"$.detail.obj", "{\"k\":\"v\",\"n\":1}"},
        {"$.detail.state", "\"RUNNING\""},
        {"$.detail.count", "3"},
        {"$.detail.none", "null"},
        {"$.detail.nope", "null"},
        {"$.spaced", "{\"a\":[1,2],\"s\":\"x y\"}"},
        {"$.resources[0]", "\"arn:1\""},
        {"$.detail['sp ace']", "\"spaced\""},
        {"$['detail'][\"nested\"].arr[0]", "{\"x\":1}"},
        {"$.detail.quote", "\"say \\\"hi\\\"\\n\""},
        {"$['odd\\'key']", "1"},
        {"$[\"back\\\\slash\"]", "2"},
    };
    /* EVENT with two more members whose names need the bracket form. */
    char ev[sizeof EVENT + 64];
    snprintf(ev, sizeof ev, "{\"odd'key\":1,\"back\\\\slash\":2,%s", EVENT + 1);
    for (size_t i = 0; i < sizeof pcs / sizeof pcs[0]; i++) {
        sl_input *in = NULL;
        sl_error err = {0};
        if (sl_input_compile_path(pcs[i].path, &in, &err))
            fprintf(stderr, "path %s: %s\n", pcs[i].path, err.msg);
        assert_non_null(in);
        sl_buf out = SL_BUF_INIT;
        assert_int_equal(sl_buf_append(&out, "pre:", 4), 0);
        assert_int_equal(sl_input_apply(in, ev, strlen(ev), NULL, &out, &err), 0);
        if (out.len != 4 + strlen(pcs[i].want) || memcmp(out.data + 4, pcs[i].want, out.len - 4))
            fprintf(stderr, "path %s: got %.*s want %s\n", pcs[i].path, (int)out.len,
                    (char *)out.data, pcs[i].want);
        assert_int_equal(out.len, 4 + strlen(pcs[i].want));
        assert_memory_equal(out.data, "pre:", 4); /* appended, not overwritten */
        assert_memory_equal(out.data + 4, pcs[i].want, out.len - 4);
        sl_buf_free(&out);
        sl_input_free(in);
    }
    /* "$" on a spaced event: the whole event, minified. */
    sl_input *in = NULL;
    assert_int_equal(sl_input_compile_path("$", &in, NULL), 0);
    sl_buf out = SL_BUF_INIT;
    const char *arr = " [ 1, { \"a\" : null } ] ";
    assert_int_equal(sl_input_apply(in, arr, strlen(arr), NULL, &out, NULL), 0);
    assert_int_equal(out.len, strlen("[1,{\"a\":null}]"));
    assert_memory_equal(out.data, "[1,{\"a\":null}]", out.len);
    sl_buf_free(&out);
    sl_input_free(in);
}

static void test_bad_paths(void **state)
{
    (void)state;
    static const struct {
        const char *path, *msg;
    } bps[] = {
        {"", "a path starts with '$'"},
        {"detail.x", "a path starts with '$'"},
        {"$.", "expected a member name"},
        {"$..a", "expected a member name"},
        {"$.a.", "expected a member name"},
        {"$a", "expected '.' or '['"},
        {"$.a b", "expected '.' or '['"},
        {"$.a[", "expected an index"},
        {"$.a[x]", "expected an index"},
        {"$.a[-1]", "expected an index"},
        {"$.a[1", "expected an index"},
        {"$.a[01]", "bad array index"},
        {"$.a[1234567890]", "bad array index"},
        {"$.*", "wildcards are not supported"},
        {"$.a[*]", "wildcards are not supported"},
        {"$['a", "unterminated quoted name"},
        {"$['a'", "unterminated quoted name"},
        {"$[\"a']", "unterminated quoted name"},
        {"$['\xff']", "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bps / sizeof bps[0]; i++) {
        sl_input *in = (sl_input *)&state; /* must stay untouched */
        sl_error err = {0};
        int rc = sl_input_compile_path(bps[i].path, &in, &err);
        if (rc != SL_EINVAL || !strstr(err.msg, bps[i].msg) || !strstr(err.msg, "path \""))
            fprintf(stderr, "path %s: rc %d \"%s\", want \"%s\"\n", bps[i].path, rc, err.msg,
                    bps[i].msg);
        assert_int_equal(rc, SL_EINVAL);
        assert_non_null(strstr(err.msg, bps[i].msg));
        assert_ptr_equal(in, (sl_input *)&state);
    }
}

static void test_bad_templates(void **state)
{
    (void)state;
    decls d;
    parse_decls(&d, VARS);
    static const struct {
        const char *tmpl, *msg;
    } bts[] = {
        {"{\"a\":<nope>}", "byte 5: unknown placeholder <nope>"},
        {"\"<sluice.nope>\"", "unknown placeholder <sluice.nope>"},
        {"{\"a\":<state}", "byte 5: unterminated placeholder <state"},
        {"text <state", "unterminated placeholder <state"},
        {"a <b c> d", "unterminated placeholder <b"},
        {"{\"a\":\"<sluice.event>\"}", "<sluice.event> can only be a JSON value"},
        {"{<state>: 1}", "byte 1: a placeholder cannot be an object key"},
        {"{\"k-<state>\" : 1}", "byte 4: a placeholder cannot be part of an object key"},
    };
    for (size_t i = 0; i < sizeof bts / sizeof bts[0]; i++) {
        sl_input *in = NULL;
        sl_error err = {0};
        int rc = sl_input_compile_template(d.names, d.paths, d.n, bts[i].tmpl, &in, &err);
        if (rc != SL_EINVAL || !strstr(err.msg, bts[i].msg))
            fprintf(stderr, "template %s: rc %d \"%s\", want \"%s\"\n", bts[i].tmpl, rc, err.msg,
                    bts[i].msg);
        assert_int_equal(rc, SL_EINVAL);
        assert_non_null(strstr(err.msg, bts[i].msg));
        assert_null(in);
    }
    /* Names: bad characters, reserved, declared twice; paths are checked. */
    static const struct {
        const char *name, *path, *msg;
    } bns[] = {
        {"a b", "$.a", "input path name \"a b\": names are made of"},
        {"", "$.a", "names are made of"},
        {"sluice.x", "$.a", "\"sluice.x\": names starting with \"sluice.\" are reserved"},
        {"Sluice.rule", "$.a", "reserved"},
        {"state", "$.a", "\"state\" is declared twice"},
        {"ok2", "$.a[", "path of <ok2> \"$.a[\": byte 3"},
    };
    for (size_t i = 0; i < sizeof bns / sizeof bns[0]; i++) {
        const char *names[] = {"state", bns[i].name};
        const char *paths[] = {"$.detail.state", bns[i].path};
        sl_input *in = NULL;
        sl_error err = {0};
        int rc = sl_input_compile_template(names, paths, 2, "<state>", &in, &err);
        if (rc != SL_EINVAL || !strstr(err.msg, bns[i].msg))
            fprintf(stderr, "name %s: rc %d \"%s\", want \"%s\"\n", bns[i].name, rc, err.msg,
                    bns[i].msg);
        assert_int_equal(rc, SL_EINVAL);
        assert_non_null(strstr(err.msg, bns[i].msg));
        assert_null(in);
    }
    /* Too many paths. */
    const char *names[SL_INPUT_MAX_VARS + 1], *paths[SL_INPUT_MAX_VARS + 1];
    char nb[SL_INPUT_MAX_VARS + 1][8];
    for (int i = 0; i <= SL_INPUT_MAX_VARS; i++) {
        snprintf(nb[i], sizeof nb[i], "v%d", i);
        names[i] = nb[i];
        paths[i] = "$.a";
    }
    sl_input *in = NULL;
    sl_error err = {0};
    assert_int_equal(sl_input_compile_template(names, paths, SL_INPUT_MAX_VARS + 1, "x", &in, &err),
                     SL_EINVAL);
    assert_non_null(strstr(err.msg, "at most 100"));
    /* Exactly the limit, every one used. */
    char tmpl[SL_INPUT_MAX_VARS * 8];
    size_t o = 0;
    tmpl[o++] = '[';
    for (int i = 0; i < SL_INPUT_MAX_VARS; i++)
        o += (size_t)snprintf(tmpl + o, sizeof tmpl - o, "%s<v%d>", i ? "," : "", i);
    snprintf(tmpl + o, sizeof tmpl - o, "]");
    assert_int_equal(sl_input_compile_template(names, paths, SL_INPUT_MAX_VARS, tmpl, &in, &err),
                     0);
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_input_apply(in, "{\"a\":7}", 7, NULL, &out, &err), 0);
    assert_int_equal(out.len, 1 + SL_INPUT_MAX_VARS * 2);
    assert_memory_equal(out.data, "[7,7,7", 6);
    sl_buf_free(&out);
    sl_input_free(in);
    sl_input_free(NULL);
}

/* A bad event or rule name: an error, and the buffer as it was. */
static void test_apply_errors(void **state)
{
    (void)state;
    const char *names[] = {"s"};
    const char *paths[] = {"$.s"};
    sl_input *in = NULL;
    assert_int_equal(
        sl_input_compile_template(names, paths, 1, "{\"s\":<s>,\"r\":<sluice.rule>}", &in, NULL),
        0);
    static const char *const bad_events[] = {"{\"s\":", "{\"s\":1,}", "{\"s\":1} x", "",
                                             "{\"s\":\"\\x\"}"};
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_buf_append(&out, "keep", 4), 0);
    for (size_t i = 0; i < sizeof bad_events / sizeof bad_events[0]; i++) {
        sl_error err = {0};
        int rc = sl_input_apply(in, bad_events[i], strlen(bad_events[i]), NULL, &out, &err);
        assert_int_equal(rc, SL_EPARSE);
        assert_non_null(strstr(err.msg, "event is not JSON"));
        assert_int_equal(out.len, 4);
    }
    sl_input_ctx ctx = {.rule = "bad\xff", .now_ms = 0};
    sl_error err = {0};
    assert_int_equal(sl_input_apply(in, "{\"s\":1}", 7, &ctx, &out, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "<sluice.rule>"));
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "keep", 4);
    sl_buf_free(&out);
    sl_input_free(in);
}

/* The event placed right before a PROT_NONE page: a one-byte over-read
 * while resolving paths or copying values crashes the test. */
static void test_guard_page(void **state)
{
    (void)state;
    long pg = sysconf(_SC_PAGESIZE);
    char *map =
        mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + pg, (size_t)pg, PROT_NONE), 0);
    static const char *const events[] = {
        "{\"detail\":{\"state\":\"RUNNING\",\"count\":3}}", "{\"detail\":{\"count\":12345}}",
        "{\"detail\":{\"state\":\"a\\\"b\",\"count\":1.5e3}}", "[1]", "7"};
    decls d;
    parse_decls(&d, VARS);
    static const char *const tmpls[] = {"{\"s\":<state>,\"n\":<count>,\"e\":<sluice.event>}",
                                        "\"<state> <count> <obj>\"", "<state>/<count>/<all>"};
    for (size_t t = 0; t < sizeof tmpls / sizeof tmpls[0]; t++) {
        sl_input *in = NULL;
        assert_int_equal(sl_input_compile_template(d.names, d.paths, d.n, tmpls[t], &in, NULL), 0);
        for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
            size_t n = strlen(events[i]);
            char *ev = map + pg - n;
            memcpy(ev, events[i], n);
            sl_buf out = SL_BUF_INIT;
            assert_int_equal(sl_input_apply(in, ev, n, NULL, &out, NULL), 0);
            sl_buf_free(&out);
        }
        sl_input_free(in);
    }
    /* A number that runs up to the end of the buffer, as a path input. */
    sl_input *in = NULL;
    assert_int_equal(sl_input_compile_path("$", &in, NULL), 0);
    memcpy(map + pg - 3, "123", 3);
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_input_apply(in, map + pg - 3, 3, NULL, &out, NULL), 0);
    assert_int_equal(out.len, 3);
    assert_memory_equal(out.data, "123", 3);
    sl_buf_free(&out);
    sl_input_free(in);
    munmap(map, (size_t)pg * 2);
}

/* Counting allocator, as in test_pattern.c: with glibc and without ASan the
 * binary interposes malloc and friends to check that applying allocates
 * nothing once the output buffer is big enough. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t n);
static size_t allocs;
void *malloc(size_t n)
{
    allocs++;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    allocs++;
    return __libc_calloc(n, size);
}
void *realloc(void *ptr, size_t n)
{
    allocs++;
    return __libc_realloc(ptr, n);
}
#endif

static void test_no_alloc(void **state)
{
    (void)state;
    decls d;
    parse_decls(&d, VARS);
    const char *tmpl = "{\"i\":<instance>,\"m\":\"<state> <obj> <quote>\",\"e\":<escaped>,"
                       "\"s\":<spaced>,\"r\":<sluice.rule>,\"t\":\"<sluice.matched-at>\"}";
    sl_input *in = NULL;
    assert_int_equal(sl_input_compile_template(d.names, d.paths, d.n, tmpl, &in, NULL), 0);
    sl_input_ctx ctx = {.rule = "r1", .now_ms = 1};
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_buf_reserve(&out, 4096), 0);
#ifdef COUNT_ALLOCS
    size_t before = allocs;
#endif
    for (int i = 0; i < 1000; i++) {
        out.len = 0;
        assert_int_equal(sl_input_apply(in, EVENT, strlen(EVENT), &ctx, &out, NULL), 0);
    }
#ifdef COUNT_ALLOCS
    assert_int_equal(allocs - before, 0);
#endif
    const char *want = "{\"i\":\"i-0123456789\",\"m\":\"RUNNING {k:v,n:1} say \\\"hi\\\"\\n\","
                       "\"e\":\"x\",\"s\":{\"a\":[1,2],\"s\":\"x y\"},\"r\":\"r1\","
                       "\"t\":\"1970-01-01T00:00:00.001Z\"}";
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    sl_buf_free(&out);
    sl_input_free(in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_templates),     cmocka_unit_test(test_predefined),
        cmocka_unit_test(test_path_input),    cmocka_unit_test(test_bad_paths),
        cmocka_unit_test(test_bad_templates), cmocka_unit_test(test_apply_errors),
        cmocka_unit_test(test_guard_page),    cmocka_unit_test(test_no_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
