/*
 * tests/integration/test_sources_host.c — what every source shares, through
 * the real bin/sluice with source.file as the driver: back-pressure (a set
 * whose Databus buffer is tiny makes the source wait, never drop), the
 * source's lane stamped on its events, events that fail the set's checks
 * refused and counted while the rest go on, JSON too deep for the set's
 * readers kept as text, and GET /v1/sources.
 */
#include "itest.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_S 30

/* Waits until set (one partition) holds want events; returns them. */
static it_evs wait_events(it_server *s, const char *set, size_t want)
{
    it_evs e = {0};
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(100)) {
        it_evs_free(&e);
        e = it_read_all(s, set, 0, "*");
        if (e.n >= want)
            break;
    }
    return e;
}

static double metric(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/metrics");
    double v = it_metric(it_body(&r), name);
    it_resp_free(&r);
    return v;
}

/* A 1 KiB Databus buffer against 20000 lines: the source keeps waiting for
 * room (counted) and every line arrives, once, in order. */
static void test_backpressure(void **state)
{
    it_server *s = *state;
    char logf[PATH_MAX], cfg[PATH_MAX];
    it_path(logf, s, "app.log");
    FILE *f = fopen(logf, "w");
    assert_non_null(f);
    for (int i = 0; i < 20000; i++)
        fprintf(f, "{\"n\":%d}\n", i);
    fclose(f);
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"logs\" { partitions = 1, ack = \"buffer\", buffer_bytes = 1024 }\n"
                    "source.file { path = \"%s\", set = \"logs\", start = \"beginning\" }\n",
                    logf);
    it_start_config(s, cfg, WAIT_S);
    it_evs e = wait_events(s, "logs", 20000);
    assert_int_equal(e.n, 20000);
    for (size_t i = 0; i < e.n; i++) {
        json_t *j = json_loads(e.v[i].text, 0, NULL);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "n")),
                         (json_int_t)i);
        json_decref(j);
    }
    it_evs_free(&e);
    assert_true(
        metric(s, "sluice_source_backpressure_waits_total{source=\"file-logs\",kind=\"file\"}") >
        0);
    assert_true(metric(s, "sluice_source_events_total{source=\"file-logs\",kind=\"file\"}") ==
                20000);
    it_resp r = it_get(s, "/metrics");
    const char *m = it_body(&r), *t = strstr(m, "# TYPE sluice_source_events_total counter\n");
    assert_non_null(t);
    assert_null(strstr(t + 1, "# TYPE sluice_source_events_total"));
    it_resp_free(&r);
    s->passed = true;
}

/* lane = "feature-x" on the source: every event carries it, an event that
 * names another lane is refused; a schema violation is refused; a JSON line
 * nested deeper than readers accept is kept as text; the rest go on. */
static void test_checks(void **state)
{
    it_server *s = *state;
    char logf[PATH_MAX], cfg[PATH_MAX];
    it_path(logf, s, "app.log");
    char deep[200] = "";
    for (int i = 0; i < 70; i++)
        strcat(deep, "[");
    for (int i = 0; i < 70; i++)
        strcat(deep, "]");
    it_write_file(logf,
                  "{\"n\":1}\n"
                  "{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"/s\",\"type\":\"t\","
                  "\"lane\":\"other\",\"data\":1}\n"
                  "{\"specversion\":\"1.0\",\"id\":\"y\",\"source\":\"/s\",\"type\":\"order\","
                  "\"data\":{\"amount\":\"lots\"}}\n"
                  "%s\n"
                  "{\"n\":2}\n",
                  deep);
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"logs\" { partitions = 1, schemas = { order = { type = \"object\",\n"
        "  properties = { amount = { type = \"number\" } } } } }\n"
        "source.file { name = \"f\", path = \"%s\", set = \"logs\", lane = \"feature-x\",\n"
        "  start = \"beginning\" }\n",
        logf);
    it_start_config(s, cfg, WAIT_S);
    it_evs e = wait_events(s, "logs", 3);
    it_sleep_ms(300); /* nothing more comes */
    it_evs_free(&e);
    e = it_read_all(s, "logs", 0, "*");
    assert_int_equal(e.n, 3);
    for (size_t i = 0; i < e.n; i++)
        assert_string_equal(e.v[i].lane, "feature-x");
    json_t *deep_ev = json_loads(e.v[1].text, 0, NULL);
    assert_non_null(deep_ev);
    assert_string_equal(json_string_value(json_object_get(deep_ev, "data")), deep);
    assert_string_equal(json_string_value(json_object_get(deep_ev, "datacontenttype")),
                        "text/plain");
    json_decref(deep_ev);
    assert_non_null(strstr(e.v[2].text, "\"n\":2"));
    it_evs_free(&e);
    assert_true(metric(s, "sluice_source_refused_total{source=\"f\",kind=\"file\"}") == 2);
    /* Refusals are logged at most once a second per source. */
    assert_true(it_log_contains(s, "event refused (LaneConflict)"));
    it_resp r = it_get(s, "/v1/sources");
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(it_body(&r), 0, NULL);
    json_t *src = json_array_get(json_object_get(j, "sources"), 0);
    assert_string_equal(json_string_value(json_object_get(src, "name")), "f");
    assert_string_equal(json_string_value(json_object_get(src, "kind")), "file");
    assert_int_equal(json_integer_value(json_object_get(src, "events")), 3);
    assert_int_equal(json_integer_value(json_object_get(src, "refused")), 2);
    assert_true(json_is_true(json_object_get(src, "healthy")));
    json_decref(j);
    it_resp_free(&r);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_sources_host"))
        return 1;
    const struct CMUnitTest tests[] = {T(test_backpressure), T(test_checks)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
