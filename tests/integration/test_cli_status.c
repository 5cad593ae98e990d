/*
 * tests/integration/test_cli_status.c — `sluice status` against the real
 * `bin/sluice serve` (cli/cli_status.c, docs/cli.md):
 *   report     two sets, a rule with a lane override to target.file, a
 *              source.file: the exact rows (events per set, delivered per
 *              rule, the lane's events in, the source's events)
 *   rate       --interval 1 while a thread posts: a non-zero rate for that
 *              set, 0.0 for the idle one
 *   embedded   no config: no rules ("none"), no lanes or sources sections
 *   errors     server down: exit 1, one line naming the server, nothing on
 *              stdout; bad options: exit 2
 */
#include "itest.h"

#include "core/base/buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_S 30.0
#define MAX_TOK 12

/* ---- reading the report ------------------------------------------------------------ */

/* Splits the first line after the line starting with section whose first
 * word is name into words (at most MAX_TOK, 64 bytes each). Returns the
 * number of words, or 0 when there is no such line in that section (the
 * section ends at the next blank line). */
static int row_of(const char *out, const char *section, const char *name, char tok[][64])
{
    const char *p = strstr(out, section);
    if (!p || (p != out && p[-1] != '\n'))
        return 0;
    p = strchr(p, '\n');
    while (p && p[1] && p[1] != '\n') {
        const char *line = p + 1, *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        int n = 0;
        const char *q = line;
        while (q < end && n < MAX_TOK) {
            while (q < end && *q == ' ')
                q++;
            if (q == end)
                break;
            const char *w = q;
            while (q < end && *q != ' ')
                q++;
            snprintf(tok[n++], 64, "%.*s", (int)(q - w), w);
        }
        if (n && strcmp(tok[0], name) == 0)
            return n;
        p = *end ? end : NULL;
    }
    return 0;
}

/* Asserts the row exists with at least want words; shows the report if not. */
static void expect_row(const char *out, const char *section, const char *name, char tok[][64],
                       int want)
{
    int n = row_of(out, section, name, tok);
    if (n < want)
        fail_msg("no row \"%s\" with %d columns under \"%s\" in:\n%s", name, want, section, out);
}

static void post_events(it_server *s, const char *set, const char *prefix, int n, const char *lane)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/st\","
                      "\"type\":\"t\"}\n",
                      prefix, i);
    char hdr[96];
    snprintf(hdr, sizeof hdr, "X-Sluice-Lane: %s", lane ? lane : "");
    const char *hdrs[] = {hdr, NULL};
    json_decref(it_post_all(s, set, lane ? hdrs : NULL, &b, (size_t)n));
    sl_buf_free(&b);
}

/* Polls GET /v1/sources until source name has counted want events. */
static void wait_source_events(it_server *s, const char *name, json_int_t want)
{
    double end = it_mono() + WAIT_S;
    json_int_t got = -1;
    while (it_mono() < end) {
        it_resp r = it_get(s, "/v1/sources");
        json_t *j = json_loads(it_body(&r), 0, NULL);
        size_t i;
        json_t *el;
        json_array_foreach(json_object_get(j, "sources"), i, el)
        {
            if (strcmp(json_string_value(json_object_get(el, "name")), name) == 0)
                got = json_integer_value(json_object_get(el, "events"));
        }
        json_decref(j);
        it_resp_free(&r);
        if (got >= want)
            return;
        it_sleep_ms(20);
    }
    fail_msg("source %s counted %lld events, want %lld", name, (long long)got, (long long)want);
}

/* Polls GET /v1/sets/SET until its partitions' end offsets add up to want. */
static void wait_set_events(it_server *s, const char *set, json_int_t want)
{
    double end = it_mono() + WAIT_S;
    json_int_t got = -1;
    while (it_mono() < end) {
        it_resp r = it_get(s, "/v1/sets/%s", set);
        json_t *j = json_loads(it_body(&r), 0, NULL);
        size_t i;
        json_t *el;
        got = 0;
        json_array_foreach(json_object_get(j, "partition_info"), i, el)
        {
            got += json_integer_value(json_object_get(el, "end_offset"));
        }
        json_decref(j);
        it_resp_free(&r);
        if (got >= want)
            return;
        it_sleep_ms(20);
    }
    fail_msg("set %s holds %lld events, want %lld", set, (long long)got, (long long)want);
}

static int run_status(it_server *s, const char *interval, char **out, char **err)
{
    char server[64];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", s->port);
    const char *args[] = {"status", "--server", server, "--interval", interval, NULL};
    return it_run(s, NULL, out, err, args, WAIT_S);
}

/* ---- tests ------------------------------------------------------------------------- */

static void start_configured(it_server *s)
{
    char in[PATH_MAX], logf[PATH_MAX + 16], cfg[PATH_MAX];
    it_path(in, s, "in");
    assert_int_equal(mkdir(in, 0755), 0);
    snprintf(logf, sizeof logf, "%s/a.log", in);
    it_write_file(logf, "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n{\"n\":4}\n");
    it_write_config(
        s, cfg,
        "set \"orders\" { partitions = 2 }\n"
        "set \"logs\" { partitions = 1 }\n"
        "lane \"fx\" { env = \"boe\" }\n"
        "rule \"r\" { set = \"orders\", target = target.file { path = \"base.ndjson\" },\n"
        "  lanes = { [\"fx\"] = { target = target.file { path = \"fx.ndjson\" } } } }\n"
        "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
        "start = \"beginning\" }\n",
        in);
    /* it_start_config() keeps the path: it must outlive s. */
    static char cfg_keep[PATH_MAX];
    snprintf(cfg_keep, sizeof cfg_keep, "%s", cfg);
    it_start_config(s, cfg_keep, WAIT_S);
}

static void test_report(void **state)
{
    it_server *s = *state;
    start_configured(s);
    post_events(s, "orders", "base", 5, NULL);
    post_events(s, "orders", "lane", 3, "fx");
    wait_source_events(s, "f", 4);
    wait_set_events(s, "logs", 4);
    it_wait_caught_up(s, WAIT_S);

    char *out = NULL, *err = NULL;
    int rc = run_status(s, "0", &out, &err);
    if (rc != 0)
        fail_msg("exit %d, stderr: %s", rc, err);
    char head[64], tok[MAX_TOK][64];
    snprintf(head, sizeof head, "sluice status of http://127.0.0.1:%d\n", s->port);
    assert_true(strncmp(out, head, strlen(head)) == 0);
    assert_null(strstr(out, "EVENTS/S")); /* --interval 0: no rate column */

    /* SET PARTITIONS EVENTS BYTES */
    expect_row(out, "Sets", "orders", tok, 4);
    assert_string_equal(tok[1], "2");
    assert_string_equal(tok[2], "8");
    assert_true(atoll(tok[3]) > 0);
    expect_row(out, "Sets", "logs", tok, 4);
    assert_string_equal(tok[1], "1");
    assert_string_equal(tok[2], "4");

    /* RULE SET LAG DELIVERED FAILED DEAD-LETTERED RETRYING HEALTHY LAST-ERROR */
    expect_row(out, "Rules", "r", tok, 9);
    assert_string_equal(tok[1], "orders");
    assert_string_equal(tok[2], "0");
    assert_string_equal(tok[3], "8");
    assert_string_equal(tok[4], "0");
    assert_string_equal(tok[5], "0");
    assert_string_equal(tok[6], "0");
    assert_string_equal(tok[7], "1/1");
    assert_string_equal(tok[8], "-");

    /* LANE ENV FALLBACK STATE EVENTS-IN DELIVERED UNROUTED */
    expect_row(out, "Lanes", "fx", tok, 7);
    assert_string_equal(tok[1], "boe");
    assert_string_equal(tok[2], "base");
    assert_string_equal(tok[3], "active");
    assert_string_equal(tok[4], "3");
    assert_string_equal(tok[5], "3");
    assert_string_equal(tok[6], "0");
    expect_row(out, "Lanes", "(base)", tok, 7);

    /* SOURCE KIND SET EVENTS REFUSED STATE (name, time in it) HEALTHY */
    expect_row(out, "Sources", "f", tok, 8);
    assert_string_equal(tok[1], "file");
    assert_string_equal(tok[2], "logs");
    assert_string_equal(tok[3], "4");
    assert_string_equal(tok[4], "0");
    assert_string_equal(tok[5], "running");
    assert_true(strlen(tok[6]) >= 2 && tok[6][strlen(tok[6]) - 1] == 's');
    assert_string_equal(tok[7], "yes");

    /* Columns are aligned: in the Sets table, numbers end in one column. */
    const char *a = strstr(out, "\n  orders "), *b = strstr(out, "\n  logs ");
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(strcspn(a + 1, "\n"), strcspn(b + 1, "\n"));
    free(out);
    free(err);
    s->passed = true;
}

typedef struct poster {
    int port;
    _Atomic bool stop;
    _Atomic long accepted;
} poster;

static void *poster_main(void *arg)
{
    poster *p = arg;
    CURL *c = curl_easy_init();
    for (int i = 0; !atomic_load(&p->stop); i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"specversion\":\"1.0\",\"id\":\"p-%d\",\"source\":\"/st\",\"type\":\"t\"}", i);
        it_call k = {
            .path = "/v1/sets/logs/events", .ctype = IT_CT_CE, .body = body, .len = strlen(body)};
        it_resp r;
        if (!it_http(c, p->port, &k, &r) && r.status == 200)
            atomic_fetch_add(&p->accepted, 1);
        it_resp_free(&r);
        it_sleep_ms(5);
    }
    curl_easy_cleanup(c);
    return NULL;
}

static void test_rate(void **state)
{
    it_server *s = *state;
    start_configured(s);
    post_events(s, "orders", "base", 5, NULL);
    it_wait_caught_up(s, WAIT_S);
    wait_source_events(s, "f", 4);

    poster p = {.port = s->port};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, poster_main, &p), 0);
    while (atomic_load(&p.accepted) < 5)
        it_sleep_ms(10);
    char *out = NULL, *err = NULL;
    int rc = run_status(s, "1", &out, &err);
    atomic_store(&p.stop, true);
    pthread_join(th, NULL);
    if (rc != 0)
        fail_msg("exit %d, stderr: %s", rc, err);
    char tok[MAX_TOK][64];
    assert_non_null(strstr(out, "EVENTS/S"));
    expect_row(out, "Sets", "logs", tok, 5);
    if (!(atof(tok[4]) > 0))
        fail_msg("want a rate for logs:\n%s", out);
    expect_row(out, "Sets", "orders", tok, 5);
    assert_string_equal(tok[4], "0.0");
    free(out);
    free(err);
    s->passed = true;
}

static void test_embedded(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    post_events(s, "a", "x", 3, NULL);
    char *out = NULL, *err = NULL;
    int rc = run_status(s, "0", &out, &err);
    if (rc != 0)
        fail_msg("exit %d, stderr: %s", rc, err);
    char tok[MAX_TOK][64];
    expect_row(out, "Sets", "a", tok, 4);
    assert_string_equal(tok[2], "3");
    assert_non_null(strstr(out, "Rules (0)\n  none\n"));
    assert_null(strstr(out, "Lanes"));
    assert_null(strstr(out, "Sources"));
    free(out);
    free(err);
    s->passed = true;
}

static void test_errors(void **state)
{
    it_server *s = *state;
    /* A port bound but not listening: connections are refused, and no test
     * running in parallel can take it meanwhile (it_free_port() releases it). */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof sa;
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &salen), 0);
    int port = ntohs(sa.sin_port);
    char server[64];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", port);
    char *out = NULL, *err = NULL;
    int rc = it_run(s, NULL, &out, &err, (const char *const[]){"status", "--server", server, NULL},
                    WAIT_S);
    assert_int_equal(rc, 1);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, server));
    assert_non_null(strstr(err, "sluice status: "));
    assert_int_equal(strchr(err, '\n') - err, (long)strlen(err) - 1); /* one line */
    free(out);
    free(err);
    close(fd);

    const char *const bad[][4] = {{"status", "--bogus", NULL},
                                  {"status", "--interval", "-1", NULL},
                                  {"status", "--interval", "soon", NULL},
                                  {"status", "--interval", NULL},
                                  {"status", "extra", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = it_run(s, NULL, &out, &err, bad[i], WAIT_S);
        if (rc != 2)
            fail_msg("%s %s: exit %d, want 2", bad[i][1], bad[i][2] ? bad[i][2] : "", rc);
        assert_string_equal(out, "");
        assert_non_null(strstr(err, "usage: sluice status"));
        free(out);
        free(err);
    }
    s->passed = true;
}

int main(void)
{
    if (it_init("test_cli_status"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_report, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_rate, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_embedded, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_errors, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
