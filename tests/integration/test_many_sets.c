/*
 * tests/integration/test_many_sets.c — open files in proportion to activity
 * (issue 16 §1): a server limited to 1,024 descriptors serves 3,000 sets,
 * because idle partitions park (core/log/store.h); and the data directory's lock
 * keeps a second server and `sluice log` away from a running one, although
 * parked partitions release their own .lock.
 */
#include "itest.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define WAIT_S 30.0
#define NSETS 3000
#define FD_LIMIT 1024

static int count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        fail_msg("open %s", path);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static double metric(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    double v = it_metric(it_body(&r), name);
    it_resp_free(&r);
    if (v < 0)
        fail_msg("/metrics has no %s", name);
    return v;
}

/* Every set's one event reads back (sampled every `step` sets), and the
 * descriptors stay well below the limit meanwhile. */
static void check_sets(it_server *s, int step, const char *when)
{
    for (int i = 1; i <= NSETS; i += step) {
        char set[32], id[32];
        snprintf(set, sizeof set, "s%d", i);
        snprintf(id, sizeof id, "e%d", i);
        it_evs e = it_read_events(s, set, 0, "offset=0");
        if (e.n != 1 || strcmp(e.v[0].id, id) != 0)
            fail_msg("%s: set %s holds %zu events (first id %s), want one with id %s", when, set,
                     e.n, e.n ? e.v[0].id : "-", id);
        it_evs_free(&e);
        if (i % 500 == 1) {
            int n = count_fds(s->pid);
            if (n > FD_LIMIT / 2)
                fail_msg("%s: %d descriptors open after reading %d sets (limit %d)", when, n, i,
                         FD_LIMIT);
        }
    }
}

/* Runs last in the binary: it lowers this process's hard limit for good, so
 * that the server inherits a hard limit of 1,024. */
static void test_many_sets_few_descriptors(void **state)
{
    it_server *s = *state;
    struct rlimit rl = {FD_LIMIT, FD_LIMIT};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "for i = 1, %d do\n"
                    "  set(\"s\" .. i) { partitions = 1, ack = \"durable\" }\n"
                    "end\n",
                    NSETS);
    double t0 = it_mono();
    it_start_config(s, cfg, 120);
    double t_start = it_mono() - t0;
    assert_true(it_log_contains(s, "open-file limit 1024 (already the hard limit)"));
    assert_int_equal(metric(s, "sluice_fd_limit"), FD_LIMIT);
    assert_int_equal(metric(s, "sluice_sets"), NSETS);
    double max_open = metric(s, "sluice_partitions_open_max");
    assert_int_equal(max_open, FD_LIMIT / 16);
    assert_true(metric(s, "sluice_partitions_open") <= max_open);
    assert_int_equal(metric(s, "sluice_partitions_parked") + metric(s, "sluice_partitions_open"),
                     NSETS);

    CURL *c = curl_easy_init();
    assert_non_null(c);
    int most = 0;
    t0 = it_mono();
    for (int i = 1; i <= NSETS; i++) {
        char path[64], ev[160];
        snprintf(path, sizeof path, "/v1/sets/s%d/events", i);
        int n = snprintf(ev, sizeof ev,
                         "{\"specversion\":\"1.0\",\"id\":\"e%d\",\"source\":\"/many\","
                         "\"type\":\"t\"}",
                         i);
        it_call k = {
            .path = path, .ctype = "application/cloudevents+json", .body = ev, .len = (size_t)n};
        it_resp r;
        if (it_http(c, s->port, &k, &r) || r.status != 200)
            fail_msg("POST %s answered %ld: %s %s", path, r.status, r.err, it_body(&r));
        it_resp_free(&r);
        if (i % 100 == 0) {
            int fds = count_fds(s->pid);
            most = fds > most ? fds : most;
        }
    }
    curl_easy_cleanup(c);
    double t_post = it_mono() - t0;
    if (most > FD_LIMIT / 2)
        fail_msg("%d descriptors open while posting to %d sets (limit %d)", most, NSETS, FD_LIMIT);
    assert_true(metric(s, "sluice_partitions_open") <= max_open);
    assert_true(metric(s, "sluice_partition_parks_total") >= NSETS - max_open);
    t0 = it_mono();
    check_sets(s, 1, "before the restart");
    double t_read = it_mono() - t0;
    print_message("start %.1f s, %d posts %.1f s, reads %.1f s, at most %d descriptors\n", t_start,
                  NSETS, t_post, t_read, most);

    /* A clean stop and a start find every set and event again. */
    assert_int_equal(it_srv_stop(s, SIGTERM, 60), 0);
    it_restart(s, 120);
    assert_int_equal(metric(s, "sluice_sets"), NSETS);
    check_sets(s, 7, "after the restart");
    it_resp r = it_get(s, "/v1/sets");
    assert_int_equal(r.status, 200);
    json_t *j = it_parse_json(&r);
    json_t *sets = json_object_get(j, "sets");
    assert_int_equal(json_array_size(sets ? sets : j), NSETS);
    json_decref(j);
    it_resp_free(&r);
    int fds = count_fds(s->pid);
    if (fds > FD_LIMIT / 2)
        fail_msg("%d descriptors open after the restart", fds);
    s->passed = true;
}

/* A second server on a data directory in use fails at start, saying why,
 * even when the data directory has no set yet (no partition lock to trip). */
static void test_second_server_refused(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char listen[64], *out = NULL, *err = NULL;
    snprintf(listen, sizeof listen, "127.0.0.1:%d", it_free_port());
    int rc =
        it_run(s, NULL, &out, &err,
               (const char *const[]){"serve", "--data", s->data, "--listen", listen, NULL}, WAIT_S);
    if (rc != 1 || !strstr(err, "is in use by another process") || !strstr(err, s->data))
        fail_msg("second serve on %s: exit %d, stderr: %s", s->data, rc, err);
    free(out);
    free(err);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200); /* the first one goes on */
    s->passed = true;
}

/* `sluice log` on a partition of a running server's data directory is
 * refused even when the partition is parked (its own .lock released); once
 * the server stopped, it works. */
static void test_log_cli_refused_while_served(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { partition_idle = \"1s\" }\n");
    it_start_config(s, cfg, WAIT_S);
    char *ev = it_event("x1", NULL);
    int part;
    int64_t off;
    it_post_one(s, "orders", ev, &part, &off);
    free(ev);
    /* Idle for a second, every partition parks (the sweep runs every 100 ms). */
    for (double end = it_mono() + WAIT_S; metric(s, "sluice_partitions_open") > 0;) {
        if (it_mono() > end)
            fail_msg("partitions still open %.0f s after their last use", WAIT_S);
        it_sleep_ms(100);
    }
    assert_int_equal(metric(s, "sluice_partitions_parked"), 4);
    char pdir[PATH_MAX + 64], *out = NULL, *err = NULL;
    snprintf(pdir, sizeof pdir, "%s/sets/orders/%d", s->data, part);
    static const char *const cmds[] = {"dump", "append", "recover"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int rc =
            it_run(s, NULL, &out, &err, (const char *const[]){"log", cmds[i], pdir, NULL}, WAIT_S);
        if (rc == 0 || !strstr(err, "which a running server holds") || !strstr(err, pdir))
            fail_msg("sluice log %s %s while served: exit %d, stderr: %s", cmds[i], pdir, rc, err);
        free(out);
        free(err);
    }
    assert_int_equal(it_srv_stop(s, SIGTERM, WAIT_S), 0);
    int rc = it_run(s, NULL, &out, &err, (const char *const[]){"log", "dump", pdir, NULL}, WAIT_S);
    if (rc != 0 || !strstr(out, "\"id\":\"x1\""))
        fail_msg("sluice log dump %s after the stop: exit %d, out: %s, err: %s", pdir, rc, out,
                 err);
    free(out);
    free(err);
    s->passed = true;
}

int main(int argc, char **argv)
{
    (void)argc;
    it_init(argv[0]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_second_server_refused, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_log_cli_refused_while_served, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_many_sets_few_descriptors, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
