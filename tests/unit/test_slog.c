/*
 * tests/unit/test_slog.c — the structured logger (core/base/slog.h): exact
 * logfmt and JSON lines, escaping of quotes, newlines, control characters
 * and bytes that are not UTF-8 (every JSON line parsed back with jansson),
 * \u-escapes of C1 controls, U+2028/2029 and bidi overrides, lifecycle
 * records written at any level,
 * key clean-up, level filtering, parsing of the flag values, and lines
 * from many threads at once never interleaving.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/err.h"
#include "core/base/slog.h"
#include "testutil.h"

/* 2026-11-29T20:05:12.123Z */
#define TS 1795982712123LL

static char *line(sl_slog_format f, sl_slog_level l, const char *comp, const char *msg,
                  const sl_slog_field *kv, size_t n)
{
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_slog_format_line(&b, f, TS, l, comp, msg, kv, n), 0);
    assert_int_equal(sl_buf_append(&b, "", 1), 0);
    return (char *)b.data;
}

static void test_logfmt_exact(void **state)
{
    (void)state;
    sl_slog_field kv[] = {SL_SLOG_S("set", "orders"), SL_SLOG_I("status", 503),
                          SL_SLOG_S("empty", ""), SL_SLOG_S("path", "/v1/a b")};
    char *s = line(SL_SLOG_LOGFMT, SL_SLOG_WARN, "http", "listening on http://x:1", kv, 4);
    assert_string_equal(s, "ts=2026-11-29T20:05:12.123Z level=warn component=http "
                           "msg=\"listening on http://x:1\" set=orders status=503 empty=\"\" "
                           "path=\"/v1/a b\"\n");
    free(s);
    /* A one-word message stays bare. */
    s = line(SL_SLOG_LOGFMT, SL_SLOG_DEBUG, "x", "ok", NULL, 0);
    assert_string_equal(s, "ts=2026-11-29T20:05:12.123Z level=debug component=x msg=ok\n");
    free(s);
}

static void test_logfmt_escaping(void **state)
{
    (void)state;
    /* Quotes, backslashes, '=', newlines (trailing ones dropped), control
     * characters, bytes that are not UTF-8; real UTF-8 is kept. */
    char *s = line(SL_SLOG_LOGFMT, SL_SLOG_ERROR, "rules",
                   "key \"a\\b\"=1\nline2\t\x01 \xff caf\xc3\xa9\n\n", NULL, 0);
    assert_string_equal(s, "ts=2026-11-29T20:05:12.123Z level=error component=rules "
                           "msg=\"key \\\"a\\\\b\\\"=1\\nline2\\t\\x01 \\xff caf\xc3\xa9\"\n");
    free(s);
    /* Keys keep [A-Za-z0-9_.-] only. */
    sl_slog_field kv[] = {SL_SLOG_S("bad key=\"x\"", "v"), SL_SLOG_S("a=b", "x=y")};
    s = line(SL_SLOG_LOGFMT, SL_SLOG_INFO, "c", "m", kv, 2);
    assert_string_equal(s, "ts=2026-11-29T20:05:12.123Z level=info component=c msg=m "
                           "bad_key__x_=v a_b=\"x=y\"\n");
    free(s);
    assert_null(strchr(s = line(SL_SLOG_LOGFMT, SL_SLOG_INFO, "c", "a\nb\r\nc", NULL, 0), '\r'));
    assert_int_equal(strchr(s, '\n') - s, (long)strlen(s) - 1);
    free(s);
}

static void test_json_exact(void **state)
{
    (void)state;
    sl_slog_field kv[] = {SL_SLOG_S("request_id", "abc"), SL_SLOG_I("status", 500),
                          SL_SLOG_I("neg", -7)};
    char *s = line(SL_SLOG_JSON, SL_SLOG_INFO, "http", "say \"hi\"\n", kv, 3);
    assert_string_equal(s, "{\"ts\":\"2026-11-29T20:05:12.123Z\",\"level\":\"info\",\"component\":"
                           "\"http\",\"msg\":\"say \\\"hi\\\"\",\"request_id\":\"abc\","
                           "\"status\":500,\"neg\":-7}\n");
    free(s);
}

/* Every byte value in a message and a field: the line must parse as JSON,
 * and the valid parts come back unchanged. */
static void test_json_escaping(void **state)
{
    (void)state;
    char all[256];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char)i;
    all[255] = '\0';
    const char *cases[] = {
        all,
        "quote \" backslash \\ slash / tab \t cr \r nl \n bell \a del \x7f",
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", /* valid UTF-8 */
        "\xc3 \xe2\x82 \xf0\x9f\x98 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xff\xfe", /* not */
        "",
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        sl_slog_field kv[] = {SL_SLOG_S(cases[c], cases[c])};
        char *s = line(SL_SLOG_JSON, SL_SLOG_ERROR, cases[c], cases[c], kv, 1);
        json_error_t je;
        json_t *j = json_loads(s, 0, &je);
        if (!j)
            fail_msg("case %zu: not JSON (%s): %s", c, je.text, s);
        assert_int_equal(strchr(s, '\n') - s, (long)strlen(s) - 1); /* one line */
        assert_string_equal(json_string_value(json_object_get(j, "level")), "error");
        assert_non_null(json_string_value(json_object_get(j, "ts")));
        assert_non_null(json_string_value(json_object_get(j, "msg")));
        json_decref(j);
        free(s);
    }
    /* The valid UTF-8 case round-trips exactly; invalid bytes become U+FFFD. */
    char *s = line(SL_SLOG_JSON, SL_SLOG_INFO, "c", cases[2], NULL, 0);
    json_t *j = json_loads(s, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "msg")), cases[2]);
    json_decref(j);
    free(s);
    s = line(SL_SLOG_JSON, SL_SLOG_INFO, "c",
             "a\xff"
             "b\xc3",
             NULL, 0);
    j = json_loads(s, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "a\xef\xbf\xbd"
                                                                      "b\xef\xbf\xbd");
    json_decref(j);
    free(s);
}

static void test_parse(void **state)
{
    (void)state;
    sl_slog_format f = SL_SLOG_LOGFMT;
    sl_slog_level l = SL_SLOG_INFO;
    assert_int_equal(sl_slog_parse_format("json", &f), 0);
    assert_int_equal(f, SL_SLOG_JSON);
    assert_int_equal(sl_slog_parse_format("logfmt", &f), 0);
    assert_int_equal(f, SL_SLOG_LOGFMT);
    assert_int_equal(sl_slog_parse_format("JSON", &f), SL_EINVAL);
    assert_int_equal(sl_slog_parse_format(NULL, &f), SL_EINVAL);
    const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sl_slog_parse_level(names[i], &l), 0);
        assert_int_equal(l, i);
        assert_string_equal(sl_slog_level_name(l), names[i]);
    }
    assert_int_equal(sl_slog_parse_level("warning", &l), SL_EINVAL);
    assert_int_equal(l, SL_SLOG_ERROR);
}

/* Reads everything written to the pipe so far. */
static char *drain(int fd)
{
    sl_buf b = SL_BUF_INIT;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        assert_int_equal(sl_buf_append(&b, buf, (size_t)n), 0);
    assert_int_equal(sl_buf_append(&b, "", 1), 0);
    return (char *)b.data;
}

static void test_levels_and_fd(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    sl_slog_set_fd(p[1]);
    sl_slog_configure(SL_SLOG_LOGFMT, SL_SLOG_WARN);
    assert_false(sl_slog_enabled(SL_SLOG_INFO));
    assert_true(sl_slog_enabled(SL_SLOG_ERROR));
    sl_slog(SL_SLOG_DEBUG, "t", "hidden %d", 1);
    sl_slog(SL_SLOG_INFO, "t", "hidden %d", 2);
    sl_slog(SL_SLOG_WARN, "t", "shown %d", 3);
    sl_slog_field kv[] = {SL_SLOG_I("n", 4)};
    sl_slog_kv(SL_SLOG_ERROR, "t", kv, 1, "shown %s", "four");
    char *s = drain(p[0]);
    assert_null(strstr(s, "hidden"));
    assert_non_null(strstr(s, "level=warn component=t msg=\"shown 3\"\n"));
    assert_non_null(strstr(s, "level=error component=t msg=\"shown four\" n=4\n"));
    free(s);
    /* JSON, and a message longer than the logger's stack buffer. */
    sl_slog_configure(SL_SLOG_JSON, SL_SLOG_DEBUG);
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    sl_slog(SL_SLOG_DEBUG, "t", "%s!", big);
    s = drain(p[0]);
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    assert_int_equal(strlen(json_string_value(json_object_get(j, "msg"))), sizeof big);
    json_decref(j);
    free(s);
    sl_slog_configure(SL_SLOG_LOGFMT, SL_SLOG_INFO);
    sl_slog_set_fd(2);
    close(p[0]);
    close(p[1]);
}

/* C1 controls, U+2028/2029 and the bidi overrides/isolates are valid UTF-8
 * but are \u-escaped in both formats; their neighbours (U+00A0, U+202F,
 * U+2065, U+206A) are kept raw. */
static void test_unsafe_codepoints(void **state)
{
    (void)state;
    /* U+0085 (NEL), U+009B (CSI), U+2028, U+2029, U+202A, U+202E, U+2066,
     * U+2069, then the kept neighbours U+00A0, U+202F, U+2065, U+206A. */
    const char *msg = "a\xc2\x85"
                      "b\xc2\x9b\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaa\xe2\x80\xae"
                      "\xe2\x81\xa6\xe2\x81\xa9|\xc2\xa0\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa";
    const char *esc = "a\\u0085b\\u009b\\u2028\\u2029\\u202a\\u202e\\u2066\\u2069|"
                      "\xc2\xa0\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa";
    char want[256];
    char *s = line(SL_SLOG_LOGFMT, SL_SLOG_INFO, "t", msg, NULL, 0);
    snprintf(want, sizeof want, "ts=2026-11-29T20:05:12.123Z level=info component=t msg=\"%s\"\n",
             esc);
    assert_string_equal(s, want);
    free(s);
    /* A value holding only one of them gets quoted (a bare one would not
     * be escaped). */
    sl_slog_field kv[] = {SL_SLOG_S("v", "x\xe2\x80\xaey")};
    s = line(SL_SLOG_LOGFMT, SL_SLOG_INFO, "t", "m", kv, 1);
    assert_non_null(strstr(s, " v=\"x\\u202ey\"\n"));
    free(s);
    s = line(SL_SLOG_JSON, SL_SLOG_INFO, "t", msg, kv, 1);
    snprintf(want, sizeof want, "\"msg\":\"%s\"", esc);
    assert_non_null(strstr(s, want));
    assert_non_null(strstr(s, "\"v\":\"x\\u202ey\""));
    /* jansson reads the escapes back as the original code points. */
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "msg")), msg);
    json_decref(j);
    free(s);
    /* No raw byte of any of them is left in either line. */
    for (int f = 0; f < 2; f++) {
        s = line(f ? SL_SLOG_JSON : SL_SLOG_LOGFMT, SL_SLOG_INFO, "t", msg, kv, 1);
        assert_null(strstr(s, "\xc2\x85"));
        assert_null(strstr(s, "\xe2\x80\xa8"));
        assert_null(strstr(s, "\xe2\x80\xae"));
        assert_null(strstr(s, "\xe2\x81\xa9"));
        free(s);
    }
}

/* Lifecycle records are written whatever the minimum level. */
static void test_lifecycle(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    sl_slog_set_fd(p[1]);
    sl_slog_configure(SL_SLOG_LOGFMT, SL_SLOG_ERROR);
    sl_slog(SL_SLOG_INFO, "server", "hidden");
    sl_slog_lifecycle("server", "listening on %s", "http://x:1");
    char *s = drain(p[0]);
    assert_null(strstr(s, "hidden"));
    assert_non_null(strstr(s, "level=info component=server msg=\"listening on http://x:1\"\n"));
    free(s);
    sl_slog_configure(SL_SLOG_LOGFMT, SL_SLOG_INFO);
    sl_slog_set_fd(2);
    close(p[0]);
    close(p[1]);
}

#define THREADS 8
#define LINES 500

static void *writer(void *arg)
{
    long t = (long)arg;
    for (int i = 0; i < LINES; i++) {
        sl_slog_field kv[] = {SL_SLOG_I("thread", t), SL_SLOG_I("i", i),
                              SL_SLOG_S("pad", "a value with \"quotes\" and spaces")};
        sl_slog_kv(SL_SLOG_INFO, "t", kv, 3, "line %d of thread %ld", i, t);
    }
    return NULL;
}

/* Many threads writing to one O_APPEND file: every line is whole. */
static void test_threads(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/log", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    assert_true(fd >= 0);
    sl_slog_set_fd(fd);
    sl_slog_configure(SL_SLOG_JSON, SL_SLOG_INFO);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, writer, (void *)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    sl_slog_set_fd(2);
    sl_slog_configure(SL_SLOG_LOGFMT, SL_SLOG_INFO);
    close(fd);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char l[1024];
    int count[THREADS] = {0}, n = 0;
    while (fgets(l, sizeof l, f)) {
        json_t *j = json_loads(l, 0, NULL);
        if (!j)
            fail_msg("line %d is not JSON: %s", n, l);
        json_int_t t = json_integer_value(json_object_get(j, "thread"));
        json_int_t i = json_integer_value(json_object_get(j, "i"));
        assert_true(t >= 0 && t < THREADS);
        assert_int_equal(i, count[t]); /* each thread's lines in its order */
        count[t]++;
        json_decref(j);
        n++;
    }
    fclose(f);
    assert_int_equal(n, THREADS * LINES);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logfmt_exact), cmocka_unit_test(test_logfmt_escaping),
        cmocka_unit_test(test_json_exact),   cmocka_unit_test(test_json_escaping),
        cmocka_unit_test(test_parse),        cmocka_unit_test(test_levels_and_fd),
        cmocka_unit_test(test_threads),      cmocka_unit_test(test_unsafe_codepoints),
        cmocka_unit_test(test_lifecycle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
