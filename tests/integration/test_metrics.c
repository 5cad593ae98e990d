/*
 * tests/integration/test_metrics.c — GET /metrics of the real `bin/sluice
 * serve` passes Prometheus' own checker (`promtool check metrics`, Debian's
 * prometheus package) without a single message, on a server with every kind
 * of source (http, file, webhook, kafka against build/rel/tools/kafka_mock,
 * the exec plugin), rules with every kind of target (http to a receiver that
 * fails and refuses some payloads, file, set, kafka), a dead-letter set and a
 * lane with an override, after traffic through all of it; and the metrics
 * list of docs/operations.md names exactly the families the server writes,
 * with their types and help texts.
 */
#include "itest.h"
#include "receiver.h"

#include "core/base/err.h"
#include "core/base/buf.h"

#include <errno.h>
#include <libgen.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 30.0

static it_kmock g_mk;
static rx_receiver *g_rx;

/* The project root: two levels above bin/sluice (out: PATH_MAX bytes). */
static void root_dir(char *out)
{
    char bin[PATH_MAX];
    snprintf(bin, sizeof bin, "%s", it_bin());
    snprintf(out, PATH_MAX, "%s", dirname(dirname(bin)));
}

/* Runs a shell command; fails the test unless it exits 0. */
static void sh(const char *cmd)
{
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("failed: %s", cmd);
}

/* The whole file at path; fails the test when it cannot be read. Caller
 * frees. */
static char *slurp(const char *path)
{
    sl_buf b = SL_BUF_INIT;
    sl_error err = {0};
    if (sl_buf_read_file(&b, path, 64 << 20, &err) || sl_buf_append(&b, "", 1))
        fail_msg("cannot read %s: %s", path, err.msg);
    return (char *)b.data;
}

/* GET /metrics, written to DIR/name too; caller frees. */
static char *scrape(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    char path[PATH_MAX];
    it_path(path, s, name);
    it_write_file(path, "%s", it_body(&r));
    char *text = strdup(it_body(&r));
    it_resp_free(&r);
    assert_non_null(text);
    return text;
}

/* Polls /metrics until the sample `series` (name and labels, as written)
 * is at least want; fails the test after WAIT_S with the text. */
static void wait_metric(it_server *s, const char *series, double want)
{
    double t0 = it_mono(), v = -1;
    while (it_mono() - t0 < WAIT_S * it_scale()) {
        it_resp r = it_get(s, "/metrics");
        v = it_metric(it_body(&r), series);
        it_resp_free(&r);
        if (v >= want)
            return;
        it_sleep_ms(50);
    }
    fail_msg("%s is %g after %.0f s, want >= %g", series, v, WAIT_S, want);
}

/* Polls /metrics until it holds text; fails the test after WAIT_S. */
static void wait_text(it_server *s, const char *text)
{
    double t0 = it_mono();
    while (it_mono() - t0 < WAIT_S * it_scale()) {
        it_resp r = it_get(s, "/metrics");
        bool found = strstr(it_body(&r), text) != NULL;
        it_resp_free(&r);
        if (found)
            return;
        it_sleep_ms(100);
    }
    fail_msg("/metrics did not show %s within %.0f s", text, WAIT_S);
}

/* POST /v1/webhooks/gh signed with the github preset's secret (or not). */
static long webhook(it_server *s, const char *body, const char *delivery, bool sign)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    HMAC(EVP_sha256(), "s3cr3t", 6, (const unsigned char *)body, strlen(body), mac, &mlen);
    char sig[200] = "X-Hub-Signature-256: sha256=", ev[] = "X-GitHub-Event: push", id[128];
    for (unsigned int i = 0; i < mlen; i++)
        snprintf(sig + strlen(sig), 3, "%02x", mac[i]);
    snprintf(id, sizeof id, "X-GitHub-Delivery: %s", delivery);
    const char *h[] = {sign ? sig : ev, ev, id, NULL};
    it_call k = {.method = "POST",
                 .path = "/v1/webhooks/gh",
                 .ctype = "application/json",
                 .hdrs = h,
                 .body = body,
                 .len = strlen(body)};
    it_resp r = {0};
    it_http(NULL, s->port, &k, &r);
    long st = r.status;
    it_resp_free(&r);
    return st;
}

static int setup(void **state)
{
    it_kmock_start(&g_mk, (const char *const[]){"--brokers", "1", "--topic", "in:2", "--topic",
                                                "out:1", NULL});
    g_rx = rx_new();
    assert_non_null(g_rx);
    assert_int_equal(rx_start(g_rx, 0), 0);
    return it_setup(state);
}

static int teardown(void **state)
{
    rx_free(g_rx);
    g_rx = NULL;
    it_kmock_stop(&g_mk);
    return it_teardown(state);
}

/* A server with every kind of source, target, a dlq and a lane override,
 * with traffic through all of it (a retried failure, a dead letter, refused
 * events and webhook requests); returns its /metrics text (caller frees). */
static char *busy_server(it_server *s)
{
    char root[PATH_MAX], dir[PATH_MAX], log[PATH_MAX], cfg[PATH_MAX], link[PATH_MAX + 64],
        so[PATH_MAX + 64];
    root_dir(root);
    it_path(dir, s, "plugins");
    if (mkdir(dir, 0755) && errno != EEXIST)
        fail_msg("mkdir %s: %s", dir, strerror(errno));
    snprintf(so, sizeof so, "%s/build/rel/plugins/exec.so", root);
    snprintf(link, sizeof link, "%s/exec.so", dir);
    if (access(so, R_OK) || symlink(so, link))
        fail_msg("%s: not built (make itests builds it) or cannot be linked", so);
    it_path(log, s, "app.log");
    it_write_file(log, "%s", "");
    it_write_config(
        s, cfg,
        "server { plugin_dir = \"plugins\" }\n"
        "lane \"feature-x\" { env = \"boe\" }\n"
        "set \"base\" { partitions = 2 }\n"
        "set \"gh\" { }\n"
        "set \"copy\" { }\n"
        "set \"dead\" { partitions = 1 }\n"
        "set \"ex\" { }\n"
        "source.file { path = \"%s\", set = \"base\", type = \"app.log\", parse = \"json\",\n"
        "             start = \"beginning\" }\n"
        "source.webhook { name = \"gh\", preset = \"github\", secret = \"s3cr3t\", set = \"gh\" }\n"
        "source.kafka { brokers = \"%s\", topics = { \"in\" }, group = \"metrics\", set = "
        "\"base\",\n"
        "              start = \"beginning\" "
        "}\n"
        "source.exec { name = \"ex\", command = { \"echo\", \"hello\" }, set = \"ex\" }\n"
        "rule \"fwd\" { set = \"base\", dlq = \"dead\",\n"
        "  retry = { attempts = 3, initial = \"10ms\", max = \"50ms\" },\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/hook\" },\n"
        "  lanes = { [\"feature-x\"] = { target = target.file { path = \"fx.ndjson\" } } } }\n"
        "rule \"to-kafka\" { set = \"base\", target = target.kafka { brokers = \"%s\", "
        "topic = \"out\" } }\n"
        "rule \"to-set\" { set = \"base\", target = target.set { set = \"copy\" } }\n"
        "rule \"gh-file\" { set = \"gh\", target = target.file { path = \"gh.ndjson\" } }\n",
        log, g_mk.boot, rx_port(g_rx), g_mk.boot);
    static char keep[PATH_MAX]; /* it_start_config() borrows the path */
    snprintf(keep, sizeof keep, "%s", cfg);
    /* The first delivery fails with 503 (retried), the poison one with 400
     * (dead-lettered). */
    assert_int_equal(rx_fail(g_rx, 1, 503, "busy", NULL), 0);
    assert_int_equal(rx_fail_marker(g_rx, "\"poison\"", 100, 400, "no"), 0);
    it_start_config(s, keep, WAIT_S);

    char *ev = it_event("e1", NULL), *poison = it_event("e2", ",\"data\":{\"poison\":true}"),
         *lane = it_event("e3", ",\"lane\":\"feature-x\"");
    int part;
    int64_t off;
    it_post_one(s, "base", ev, &part, &off);
    it_post_one(s, "base", poison, &part, &off);
    it_post_one(s, "base", lane, &part, &off);
    free(ev);
    free(poison);
    free(lane);
    it_resp r = it_post(s, "base", IT_CT_CE, NULL, "x", SIZE_MAX); /* refused */
    assert_true(r.status >= 400);
    it_resp_free(&r);
    assert_int_equal(webhook(s, "{\"a\":1}", "d-1", true), 200);
    assert_int_equal(webhook(s, "{\"a\":2}", "d-2", false), 401);
    FILE *f = fopen(log, "a");
    assert_non_null(f);
    fputs("{\"msg\":\"hello\"}\n", f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "printf 'k1\\nk2\\n' | timeout 30 kcat -P -q -b '%s' -t in -X "
             "message.timeout.ms=20000",
             g_mk.boot);
    sh(cmd);

    it_wait_rule_int(s, "fwd", "dead_lettered", 1, WAIT_S);
    it_wait_rule_int(s, "fwd", "retries", 1, WAIT_S);
    wait_metric(s, "sluice_source_kafka_records_total{source=\"kafka-base\"}", 2);
    wait_metric(s, "sluice_source_file_lines_total{source=\"file-base\"}", 1);
    wait_metric(s, "sluice_exec_lines_total{source=\"ex\"}", 1);
    /* The consumer's lag once librdkafka knows position and high watermark. */
    wait_text(s, "sluice_source_kafka_lag{source=\"kafka-base\",topic=\"in\",partition=\"");
    it_wait_caught_up(s, WAIT_S);
    return scrape(s, "metrics.txt");
}

/* promtool check metrics on the text: any message fails the test. */
static void test_promtool(void **state)
{
    it_server *s = *state;
    if (system("command -v promtool >/dev/null 2>&1") != 0)
        fail_msg("promtool is not installed (scripts/deps.sh installs the prometheus package)");
    char *m = busy_server(s);
    /* Every kind of family is there, so the check covers them. */
    static const char *const want[] = {
        "sluice_rule_dead_lettered_total{rule=\"fwd\"} 1",
        "sluice_rule_delivered_total{rule=\"fwd\",lane=\"feature-x\"} 1",
        "sluice_target_healthy{rule=\"to-kafka\",target=\"kafka\"} 1",
        "sluice_target_healthy{rule=\"to-set\",target=\"set\"} 1",
        "sluice_buffer_limit_bytes{set=\"base\"}",
        "sluice_source_kafka_lag{source=\"kafka-base\",topic=\"in\",partition=\"",
        "sluice_webhook_requests_total{webhook=\"gh\",outcome=\"accepted\"} 1",
        "sluice_exec_runs_total{source=\"ex\"} 1",
        "sluice_lane_events_in_total{lane=\"feature-x\"} 1",
        "sluice_http_requests_total{code=\"400\"} 1",
        "\nsluice_metrics_dropped_lines 0\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(m, want[i]))
            fail_msg("/metrics lacks %s:\n%s", want[i], m);
    free(m);
    char cmd[2 * PATH_MAX], out[PATH_MAX], in[PATH_MAX];
    it_path(in, s, "metrics.txt");
    it_path(out, s, "promtool.out");
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > '%s' 2>&1", in, out);
    int st = system(cmd);
    char *msg = slurp(out);
    if (st != 0 || msg[0])
        fail_msg("promtool check metrics (exit %d) on %s:\n%s",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, in, msg);
    free(msg);
    s->passed = true;
}

/* ---- the list in docs/operations.md ------------------------------------------------ */

/* The label names of family name's samples in the text m, in the order
 * first seen, as "`a`, `b`" ("—" for none; le of histograms left out) into
 * out (cap bytes). Returns the number of samples. */
static int family_labels(const char *m, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    int samples = 0;
    out[0] = '\0';
    for (const char *l = m; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, name, n) != 0)
            continue;
        const char *p = l + n;
        static const char *const suf[] = {"_bucket", "_sum", "_count"};
        for (size_t k = 0; k < 3; k++)
            if (strncmp(p, suf[k], strlen(suf[k])) == 0)
                p += strlen(suf[k]);
        if (*p != '{' && *p != ' ')
            continue;
        samples++;
        while (*p == '{' || *p == ',') {
            const char *k = ++p;
            while (*p && *p != '=')
                p++;
            char key[64], tick[70];
            snprintf(key, sizeof key, "%.*s", (int)(p - k), k);
            for (p += *p ? 2 : 0; *p && *p != '"'; p++)
                p += *p == '\\' && p[1];
            p += *p == '"';
            snprintf(tick, sizeof tick, "`%s`", key);
            if (strcmp(key, "le") != 0 && !strstr(out, tick))
                snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? ", " : "", tick);
        }
    }
    if (!out[0])
        snprintf(out, cap, "—");
    return samples;
}

/* Whether two label lists of family_labels()'s form name the same labels,
 * in any order. */
static bool same_labels(const char *a, const char *b)
{
    size_t ta = 0, tb = 0;
    for (const char *p = a; *p; p++)
        ta += *p == '`';
    for (const char *p = b; *p; p++)
        tb += *p == '`';
    if (ta != tb)
        return false;
    if (!ta)
        return strcmp(a, b) == 0;
    for (const char *p = strchr(b, '`'); p; p = strchr(strchr(p + 1, '`') + 1, '`')) {
        char tick[70];
        snprintf(tick, sizeof tick, "%.*s", (int)(strchr(p + 1, '`') - p + 1), p);
        if (!strstr(a, tick))
            return false;
    }
    return true;
}

/* docs/operations.md lists every family as a table row
 * "| `NAME` | TYPE | LABELS | HELP |" between <!-- metrics:begin --> and
 * <!-- metrics:end -->: the rows and the server's families must match in
 * name, type, help text and (for families with samples here) labels. */
static void test_docs_list(void **state)
{
    it_server *s = *state;
    char *m = busy_server(s);
    char root[PATH_MAX], path[PATH_MAX + 32];
    root_dir(root);
    snprintf(path, sizeof path, "%s/docs/operations.md", root);
    char *doc = slurp(path);
    char *begin = strstr(doc, "<!-- metrics:begin -->"), *end = strstr(doc, "<!-- metrics:end -->");
    if (!begin || !end || end < begin)
        fail_msg("%s: no <!-- metrics:begin --> … <!-- metrics:end --> list", path);
    *end = '\0';
    sl_buf bad = SL_BUF_INIT;
    size_t rows = 0;
    for (char *l = strstr(begin, "\n| `"); l; l = strstr(l + 1, "\n| `")) {
        char name[128], type[32], help[512], labels[256], seen[256];
        if (sscanf(l, "\n| `%127[^`]` | %31[a-z] | %255[^|]| %511[^|]|", name, type, labels,
                   help) != 4) {
            sl_buf_printf(&bad, "  unreadable row: %.80s\n", l + 1);
            continue;
        }
        rows++;
        for (char *t = help + strlen(help); t > help && t[-1] == ' ';)
            *--t = '\0';
        for (char *t = labels + strlen(labels); t > labels && t[-1] == ' ';)
            *--t = '\0';
        char line[1024];
        snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
        if (!strstr(m, line))
            sl_buf_printf(&bad, "  documented, but not what the server writes: %s %s \"%s\"\n",
                          name, type, help);
        else if (family_labels(m, name, seen, sizeof seen) && !same_labels(labels, seen))
            sl_buf_printf(&bad, "  %s: documented labels %s, the server writes %s\n", name, labels,
                          seen);
    }
    /* Each family the server writes is documented (the row it needs). */
    for (char *l = strstr(m, "# HELP "); l; l = strstr(l + 1, "\n# HELP ")) {
        l += l[0] == '\n';
        char name[128], help[512], type[32], row[160], seen[256];
        if (sscanf(l, "# HELP %127s %511[^\n]\n# TYPE %*s %31s", name, help, type) != 3)
            continue;
        snprintf(row, sizeof row, "\n| `%s` |", name);
        family_labels(m, name, seen, sizeof seen);
        if (!strstr(begin, row))
            sl_buf_printf(&bad, "  not in the list: | `%s` | %s | %s | %s |\n", name, type, seen,
                          help);
    }
    if (bad.len) {
        fprintf(stderr, "%.*s", (int)bad.len, (const char *)bad.data); /* fail_msg cuts */
        fail_msg("docs/operations.md metrics list (%zu rows) and /metrics differ (above)", rows);
    }
    sl_buf_free(&bad);
    free(doc);
    free(m);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    if (it_init("test_metrics"))
        return 1;
    const struct CMUnitTest tests[] = {T(test_promtool), T(test_docs_list)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
