/*
 * tests/integration/test_hostile_names.c — names from users never reach a
 * file path unvalidated (issue 8 §3). Set, rule, lane and webhook names
 * end up in DATA/sets/SET, DATA/rules/RULE/SET[/lanes/LANE] and in the
 * CLI's requests; every way a client can hand the server such a name —
 * the URL path (raw, percent-encoded, with dot segments sent as is), the
 * lane headers and attribute, JSON request bodies, auto-created sets and
 * lanes, the CLI's arguments — is tried with traversal, separators, NUL,
 * over-long and empty names.
 *
 * Each must be refused with a 4xx (or a failed entry, or exit code 2) that
 * says what was wrong, and afterwards the data dir holds exactly the names
 * the test created legitimately: nothing was made outside it or under an
 * odd name, and what was stored before is still there.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_S 20.0

static const char ev[] = "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/t\",\"type\":\"t\"}";

static long call(it_server *s, const char *method, const char *path, const char *const *hdrs,
                 const char *body, char *out, size_t outsz)
{
    it_call k = {.method = method,
                 .path = path,
                 .ctype = body ? "application/cloudevents+json" : NULL,
                 .hdrs = hdrs,
                 .body = body,
                 .len = body ? strlen(body) : 0};
    it_resp r;
    it_http(NULL, s->port, &k, &r);
    long st = r.status;
    snprintf(out, outsz, "%s", it_body(&r));
    it_resp_free(&r);
    return st;
}

/* Lists dir's entries (sorted, space-separated) into out. */
static void list_dir(const char *dir, char *out, size_t n)
{
    struct dirent **e;
    int k = scandir(dir, &e, NULL, alphasort);
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        if (strcmp(e[i]->d_name, ".") && strcmp(e[i]->d_name, ".."))
            snprintf(out + strlen(out), n - strlen(out), "%s%s", *out ? " " : "", e[i]->d_name);
        free(e[i]);
    }
    free(e);
}

static void test_hostile_names(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"ok\" { partitions = 1 }\n"
        "rule \"r\" { set = \"ok\", target = target.file { path = \"out.ndjson\" } }\n");
    it_start_config(s, cfg, WAIT_S);
    int part;
    int64_t off;
    it_post_one(s, "ok", ev, &part, &off);

    char longname[300];
    memset(longname, 'a', 200);
    longname[200] = '\0';
    char longpath[400];
    snprintf(longpath, sizeof longpath, "/v1/sets/%s/events", longname);

    static const struct {
        const char *method, *path;
    } urls[] = {
        {"POST", "/v1/sets/../events"},
        {"POST", "/v1/sets/%2E%2E/events"},
        {"POST", "/v1/sets/.%2E/events"},
        {"POST", "/v1/sets/./events"},
        {"POST", "/v1/sets/..%2F..%2Fescaped/events"},
        {"POST", "/v1/sets/%2Fetc%2Fescaped/events"},
        {"POST", "/v1/sets/a%00b/events"},
        {"POST", "/v1/sets/a%20b/events"},
        {"POST", "/v1/sets/a%5Cb/events"},
        {"POST", "/v1/sets/%C3%A9t%C3%A9/events"},
        {"GET", "/v1/sets/%2E%2E/events?partition=0&offset=0"},
        {"GET", "/v1/sets/..%2Fok"},
        {"POST", "/v1/sets/%2E%2E/redrive"},
        {"POST", "/v1/webhooks/..%2F..%2Fescaped"},
        {"POST", "/v1/webhooks/%2E%2E"},
        {"DELETE", "/v1/lanes/%2E%2E"},
        {"DELETE", "/v1/lanes/..%2Fescaped"},
        {"POST", "/v1/rules/%2E%2E/replay"},
        {"POST", "/v1/rules/..%2F..%2Fescaped/replay"},
        {"GET", "/v1/rules/..%2Fr/replays"},
    };
    char body[4096];
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        bool post = strcmp(urls[i].method, "POST") == 0;
        long st = call(s, urls[i].method, urls[i].path, NULL, post ? ev : NULL, body, sizeof body);
        if (st < 400 || st >= 500)
            fail_msg("%s %s answered %ld (want 4xx): %s", urls[i].method, urls[i].path, st, body);
        printf("%-6s %-48s %ld %.100s\n", urls[i].method, urls[i].path, st, body);
    }
    long st = call(s, "POST", longpath, NULL, ev, body, sizeof body);
    if (st != 400 || !strstr(body, "name"))
        fail_msg("a 200-byte set name answered %ld: %s", st, body);

    /* Lanes: header, baggage, attribute. */
    static const char *const lanes[] = {"../x", "..", "a/b", "A", "x\\y", "%2e%2e"};
    for (size_t i = 0; i < sizeof lanes / sizeof *lanes; i++) {
        char h[128], b[128];
        snprintf(h, sizeof h, "X-Sluice-Lane: %s", lanes[i]);
        const char *hdrs[] = {h, NULL};
        st = call(s, "POST", "/v1/sets/ok/events", hdrs, ev, body, sizeof body);
        if (st != 400)
            fail_msg("X-Sluice-Lane: %s answered %ld: %s", lanes[i], st, body);
        snprintf(b, sizeof b, "baggage: lane=%s", lanes[i]);
        const char *bag[] = {b, NULL};
        st = call(s, "POST", "/v1/sets/ok/events", bag, ev, body, sizeof body);
        if (st != 400)
            fail_msg("baggage lane=%s answered %ld: %s", lanes[i], st, body);
        char e[256];
        snprintf(e, sizeof e,
                 "{\"specversion\":\"1.0\",\"id\":\"2\",\"source\":\"/t\",\"type\":\"t\","
                 "\"lane\":\"%s\"}",
                 lanes[i]);
        it_resp r = it_post(s, "ok", "application/cloudevents+json", NULL, e, SIZE_MAX);
        if (r.status == 200)
            json_decref(it_expect_results(&r, 0, 1));
        else if (r.status != 400)
            fail_msg("lane attribute %s answered %ld: %s", lanes[i], r.status, it_body(&r));
        it_resp_free(&r);
    }

    /* A redrive naming a bad destination. */
    st = call(s, "POST", "/v1/sets/ok/redrive", NULL, "{\"to\":\"../escaped\"}", body, sizeof body);
    if (st < 400 || st >= 500)
        fail_msg("redrive to ../escaped answered %ld: %s", st, body);

    /* The CLI refuses such names before sending anything. */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    static const char *const clis[][6] = {
        {"tail", "../escaped", "--server", NULL},
        {"put", "../escaped", "--server", NULL},
        {"lane", "drop", "../escaped", "--server", NULL},
        {"redrive", "ok", "--to", "../escaped", "--server", NULL},
    };
    for (size_t i = 0; i < sizeof clis / sizeof *clis; i++) {
        const char *args[8] = {0};
        size_t n = 0;
        for (; clis[i][n]; n++)
            args[n] = clis[i][n];
        args[n++] = url;
        char *out = NULL;
        int rc = it_run(s, NULL, &out, NULL, args, 20);
        if (rc != 2 && rc != 1)
            fail_msg("sluice %s %s: exit %d (want a usage error): %s", args[0], args[1], rc, out);
        free(out);
    }

    /* Nothing was made outside the data dir or under a bad name, and the
     * legitimate event is still there. */
    char list[4096], p[PATH_MAX];
    snprintf(p, sizeof p, "%s/sets", s->data);
    list_dir(p, list, sizeof list);
    assert_string_equal(list, "ok");
    snprintf(p, sizeof p, "%s/rules", s->data);
    list_dir(p, list, sizeof list);
    assert_string_equal(list, "r");
    list_dir(s->data, list, sizeof list);
    if (strstr(list, "escaped"))
        fail_msg("the data dir holds %s", list);
    list_dir(s->dir, list, sizeof list);
    if (strstr(list, "escaped"))
        fail_msg("the test dir holds %s", list);
    if (access("/etc/escaped", F_OK) == 0)
        fail_msg("/etc/escaped exists");
    it_evs got = it_read_all(s, "ok", 0, "");
    assert_int_equal(got.n, 1);
    it_evs_free(&got);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    s->passed = true;
}

int main(int argc, char **argv)
{
    (void)argc;
    it_init(argv[0]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hostile_names, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
