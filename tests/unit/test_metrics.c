/*
 * tests/unit/test_metrics.c — the /metrics text helpers of core/base/metrics.h:
 * family headers that refuse what Prometheus' linter refuses, escaped
 * label values, sample lines, regrouping of text from several writers
 * (one header per family, samples together, headerless families and
 * repeated series left out and counted), histograms, and whole-line copies.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/base/err.h"
#include "core/base/buf.h"
#include "core/base/metrics.h"

/* b's text, NUL-terminated (b keeps owning it). */
static const char *text(sl_buf *b)
{
    assert_int_equal(sl_buf_append(b, "", 1), 0);
    b->len--;
    return (const char *)b->data;
}

/* sl_metrics_group of in; asserts the answer is want and *dropped is
 * ndropped. */
static void expect_group(const char *in, const char *want, size_t ndropped)
{
    sl_buf out = SL_BUF_INIT;
    size_t dropped = 99;
    assert_int_equal(sl_metrics_group(in, strlen(in), &out, &dropped), 0);
    assert_string_equal(text(&out), want);
    assert_int_equal(dropped, ndropped);
    sl_buf_free(&out);
}

static void test_family(void **state)
{
    (void)state;
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_metrics_family(&b, "sluice_x_total", SL_METRIC_COUNTER, "Xs seen."), 0);
    assert_int_equal(sl_metrics_family(&b, "sluice_y_bytes", SL_METRIC_GAUGE, "Bytes."), 0);
    assert_int_equal(sl_metrics_family(&b, "sluice_z_seconds", SL_METRIC_HISTOGRAM, "Time."), 0);
    assert_string_equal(text(&b), "# HELP sluice_x_total Xs seen.\n# TYPE sluice_x_total counter\n"
                                  "# HELP sluice_y_bytes Bytes.\n# TYPE sluice_y_bytes gauge\n"
                                  "# HELP sluice_z_seconds Time.\n"
                                  "# TYPE sluice_z_seconds histogram\n");
    size_t len = b.len;
    /* What promtool would complain about is refused, and nothing written. */
    static const struct {
        const char *name;
        sl_metric_type t;
        const char *help;
    } bad[] = {
        {"sluice_x", SL_METRIC_COUNTER, "a counter without _total"},
        {"sluice_x_total", SL_METRIC_GAUGE, "a gauge with _total"},
        {"sluice_x_count", SL_METRIC_GAUGE, "a gauge with a histogram suffix"},
        {"sluice_x_bucket", SL_METRIC_COUNTER, "neither"},
        {"sluice_x_sum", SL_METRIC_GAUGE, "a gauge with _sum"},
        {"sluiceX", SL_METRIC_GAUGE, "camelCase"},
        {"sluice-x", SL_METRIC_GAUGE, "a dash"},
        {"1sluice", SL_METRIC_GAUGE, "a leading digit"},
        {"", SL_METRIC_GAUGE, "no name"},
        {"sluice_x", SL_METRIC_GAUGE, ""},
        {"sluice_x", SL_METRIC_GAUGE, "two\nlines"},
        {"sluice_x", SL_METRIC_GAUGE, "a back\\slash"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(sl_metrics_family(&b, bad[i].name, bad[i].t, bad[i].help), SL_EINVAL);
        assert_int_equal(b.len, len);
    }
    sl_buf_free(&b);
}

static void test_samples(void **state)
{
    (void)state;
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_metrics_u64(&b, "a_total", 7, NULL), 0);
    assert_int_equal(sl_metrics_u64(&b, "a_total", UINT64_MAX, "x", "1", NULL), 0);
    /* A NULL value leaves its label out, wherever it is. */
    assert_int_equal(
        sl_metrics_i64(&b, "g", -3, "rule", "r", "lane", (char *)NULL, "t", "http", NULL), 0);
    assert_int_equal(sl_metrics_i64(&b, "g", 0, "lane", (char *)NULL, NULL), 0);
    /* Backslash, quote and newline escaped; other bytes as they are. */
    assert_int_equal(sl_metrics_u64(&b, "e", 1, "v", "a\\b\"c\nd}é", NULL), 0);
    assert_string_equal(text(&b), "a_total 7\n"
                                  "a_total{x=\"1\"} 18446744073709551615\n"
                                  "g{rule=\"r\",t=\"http\"} -3\n"
                                  "g 0\n"
                                  "e{v=\"a\\\\b\\\"c\\nd}é\"} 1\n");
    sl_buf_free(&b);
    assert_int_equal(sl_metrics_label(&b, ""), 0);
    assert_int_equal(b.len, 0);
    sl_buf_free(&b);
}

/* Two writers feeding the same families (per set, per source): one header
 * each, the samples together in the order they came, families in the order
 * first named. */
static void test_group_interleaved(void **state)
{
    (void)state;
    expect_group("# HELP a_total A.\n# TYPE a_total counter\na_total{s=\"1\"} 1\n"
                 "# HELP b Bee.\n# TYPE b gauge\nb{s=\"1\"} 5\n"
                 "# HELP a_total A.\n# TYPE a_total counter\na_total{s=\"2\"} 2\n"
                 "# HELP b Bee.\n# TYPE b gauge\nb{s=\"2\"} 6\n",
                 "# HELP a_total A.\n# TYPE a_total counter\n"
                 "a_total{s=\"1\"} 1\na_total{s=\"2\"} 2\n"
                 "# HELP b Bee.\n# TYPE b gauge\nb{s=\"1\"} 5\nb{s=\"2\"} 6\n",
                 0);
    /* The old sluice_buffer_limit_bytes: samples of a second family inside
     * the first one's group, under its header. */
    expect_group("# HELP buf_bytes Fill.\n# TYPE buf_bytes gauge\n"
                 "buf_bytes{set=\"a\"} 0\nbuf_limit_bytes{set=\"a\"} 9\n"
                 "buf_bytes{set=\"b\"} 1\nbuf_limit_bytes{set=\"b\"} 8\n"
                 "# HELP buf_limit_bytes Size.\n# TYPE buf_limit_bytes gauge\n",
                 "# HELP buf_bytes Fill.\n# TYPE buf_bytes gauge\n"
                 "buf_bytes{set=\"a\"} 0\nbuf_bytes{set=\"b\"} 1\n"
                 "# HELP buf_limit_bytes Size.\n# TYPE buf_limit_bytes gauge\n"
                 "buf_limit_bytes{set=\"a\"} 9\nbuf_limit_bytes{set=\"b\"} 8\n",
                 0);
    /* A family with no samples keeps its header; the first HELP and TYPE
     * win; CRLF and a last line without a newline are read. */
    expect_group(
        "# TYPE c_total counter\r\n# HELP c_total First.\n# HELP c_total Second.\n"
        "# TYPE d gauge\n# HELP d D.\nd 1",
        "# HELP c_total First.\n# TYPE c_total counter\n# HELP d D.\n# TYPE d gauge\nd 1\n", 0);
    expect_group("", "", 0);
}

/* Samples without a family that has both headers, of an invalid family,
 * repeated series and lines that are not samples are left out, counted. */
static void test_group_left_out(void **state)
{
    (void)state;
    expect_group("# HELP ok Fine.\n# TYPE ok gauge\nok 1\n"
                 "nohead_total 3\n"                           /* no header */
                 "# TYPE nohelp gauge\nnohelp 1\n"            /* no HELP */
                 "# HELP notype Hm.\nnotype 1\n"              /* no TYPE */
                 "# HELP c Counter.\n# TYPE c counter\nc 1\n" /* no _total */
                 "# HELP w Weird.\n# TYPE w summary\nw 1\n"   /* unknown type */
                 "# HELP e_total Empty help.\n# HELP e_total\n# TYPE e_total counter\ne_total 1\n"
                 "ok 2\n" /* repeated series */
                 "# just a comment\n"
                 "{bad} 1\n9lives 1\nnovalue\n",
                 "# HELP ok Fine.\n# TYPE ok gauge\nok 1\n"
                 "# HELP e_total Empty help.\n# TYPE e_total counter\ne_total 1\n",
                 9);
    /* Repeats are whole series: the same name with other labels is not
     * one, nor a label value holding the other's text. */
    expect_group(
        "# HELP r Rr.\n# TYPE r gauge\nr{a=\"x y\"} 1\nr{a=\"x\"} 2\nr{a=\"x y\"} 3\n"
        "r{a=\"x\",b=\"1\"} 4\n",
        "# HELP r Rr.\n# TYPE r gauge\nr{a=\"x y\"} 1\nr{a=\"x\"} 2\nr{a=\"x\",b=\"1\"} 4\n", 1);
}

static void test_histogram(void **state)
{
    (void)state;
    sl_histogram h = {0};
    sl_histogram_observe(&h, 30000);      /* 30 µs: the first bucket */
    sl_histogram_observe(&h, 2000000000); /* 2 s: the 5 s bucket */
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_histogram_write(&h, "t_seconds", "Time.", "", 1, &b), 0);
    /* A histogram's _bucket/_sum/_count go with it, and a gauge named like
     * one of them is its own family. */
    assert_int_equal(sl_metrics_family(&b, "t_seconds_total", SL_METRIC_COUNTER, "Other."), 0);
    assert_int_equal(sl_metrics_u64(&b, "t_seconds_total", 4, NULL), 0);
    assert_int_equal(sl_histogram_write(&h, "t_seconds", "Time.", "", 0, &b), SL_OK);
    sl_buf out = SL_BUF_INIT;
    size_t dropped = 99;
    assert_int_equal(sl_metrics_group(b.data, b.len, &out, &dropped), 0);
    const char *t = text(&out);
    assert_non_null(strstr(t, "# HELP t_seconds Time.\n# TYPE t_seconds histogram\n"
                              "t_seconds_bucket{le=\"5e-05\"} 1\n"));
    assert_non_null(strstr(t, "t_seconds_bucket{le=\"5\"} 2\nt_seconds_bucket{le=\"+Inf\"} 2\n"
                              "t_seconds_sum 2.000030000\nt_seconds_count 2\n"
                              "# HELP t_seconds_total Other.\n"));
    assert_int_equal(dropped, 15 + 2); /* the second copy: repeated series */
    sl_buf_free(&out);
    sl_buf_free(&b);
}

static void test_copy(void **state)
{
    (void)state;
    char out[16];
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_buf_printf(&b, "a 1\nbb 2\nccc 3\n"), 0);
    memset(out, 'x', sizeof out);
    assert_int_equal(sl_metrics_copy(&b, out, 11), 9); /* whole lines only */
    assert_memory_equal(out, "a 1\nbb 2\n", 9);
    assert_null(b.data);
    assert_int_equal(sl_buf_printf(&b, "a 1\n"), 0);
    assert_int_equal(sl_metrics_copy(&b, out, sizeof out), 4);
    assert_int_equal(sl_buf_printf(&b, "long line\n"), 0);
    assert_int_equal(sl_metrics_copy(&b, out, 3), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family),
        cmocka_unit_test(test_samples),
        cmocka_unit_test(test_group_interleaved),
        cmocka_unit_test(test_group_left_out),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
