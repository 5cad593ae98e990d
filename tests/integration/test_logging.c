/*
 * tests/integration/test_logging.c — structured logs and request ids
 * (core/base/slog.h, http/http.c) with the real `bin/sluice serve`:
 *   json       --log-format json --log-level debug: every line of the log is
 *              a JSON object with ts, level, component and msg; a failing
 *              request's id (given in X-Request-Id, or made up by the
 *              server) is in its error body, its X-Request-Id header and its
 *              log line (method, path, status); ids that are too long or
 *              hold unsafe characters are replaced
 *   logfmt     the default: every line is logfmt with ts= level= component=
 *              msg=; at info, requests are not logged
 *   config     server { log_format = "json", log_level = "debug" } applies;
 *              --log-format logfmt wins over it; `sluice check` refuses a
 *              bad value
 *   level      --log-level error leaves out a 503 (a warning) but keeps the
 *              lifecycle lines (listening on, stopping, stopped cleanly);
 *              bad flag values exit 2 with a usage line
 *   5xx        at info, a 503 (max_connections reached) is logged at warn
 *              with its request id, which its body carries too
 *   burst      many 503s in a burst: at most one line a second per (status,
 *              code), and the "N more … answers" lines account for every
 *              503 left out (lines + suppressed counts == 503s answered)
 *   badurl     an error body quoting a URL with bytes that are not UTF-8
 *              (%ff), C0 and C1 controls is valid JSON (U+FFFD for the bad
 *              byte)
 *   reload     SIGHUP re-applies the file's log_format/log_level; a
 *              --log-format flag keeps winning over the reloaded file
 */
#include "itest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_S 30.0

/* GET path with an optional X-Request-Id; fills id with the answer's
 * X-Request-Id. Returns the status; *body gets the body (caller frees). */
typedef struct ans {
    long status;
    char id[128];
    char *body;
} ans;

static size_t hdr_cb(char *p, size_t size, size_t n, void *ud)
{
    ans *a = ud;
    size_t len = size * n;
    if (len > 13 && strncasecmp(p, "X-Request-Id:", 13) == 0) {
        const char *v = p + 13;
        while (*v == ' ')
            v++;
        size_t vl = (size_t)(p + len - v);
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
            vl--;
        snprintf(a->id, sizeof a->id, "%.*s", (int)vl, v);
    }
    return len;
}

static size_t body_cb(char *p, size_t size, size_t n, void *ud)
{
    sl_buf *b = ud;
    return sl_buf_append(b, p, size * n) ? 0 : size * n;
}

static ans get(const it_server *s, const char *path, const char *reqid)
{
    ans a;
    memset(&a, 0, sizeof a);
    sl_buf b = SL_BUF_INIT;
    CURL *c = curl_easy_init();
    char url[512], h[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    struct curl_slist *hl = NULL;
    if (reqid) {
        snprintf(h, sizeof h, "X-Request-Id: %s", reqid);
        hl = curl_slist_append(NULL, h);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, hdr_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fail_msg("GET %s: %s", path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    sl_buf_append(&b, "", 1);
    a.body = (char *)b.data;
    return a;
}

/* The request_id of an error body; fails the test when there is none. */
static void body_id(const ans *a, char *out, size_t cap)
{
    json_t *j = json_loads(a->body, 0, NULL);
    const char *id = j ? json_string_value(json_object_get(j, "request_id")) : NULL;
    if (!id || !json_string_value(json_object_get(j, "error")))
        fail_msg("error body without error/request_id: %s", a->body);
    snprintf(out, cap, "%s", id);
    json_decref(j);
}

static bool is_hex24(const char *s)
{
    if (strlen(s) != 24)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

/* The whole server log; caller frees. */
static char *read_log(const it_server *s)
{
    size_t n;
    char *t = (char *)tu_read_file(s->log, &n);
    t[n] = '\0'; /* tu_read_file() leaves room for it, but does not write it */
    return t;
}

/* Checks that every line of the log is a JSON object with the four fields;
 * returns them parsed as an array (caller frees). */
static json_t *json_lines(const it_server *s)
{
    char *log = read_log(s);
    json_t *all = json_array();
    int n = 0;
    for (char *save = NULL, *l = strtok_r(log, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "---- ", 5) == 0)
            continue; /* the harness's own lines ("---- itest: starting on port N") */
        n++;
        json_error_t je;
        json_t *j = json_loads(l, JSON_REJECT_DUPLICATES, &je);
        if (!j || !json_is_object(j))
            fail_msg("log line %d is not a JSON object (%s): %s", n, je.text, l);
        const char *ts = json_string_value(json_object_get(j, "ts"));
        const char *lvl = json_string_value(json_object_get(j, "level"));
        if (!ts || strlen(ts) != 24 || ts[10] != 'T' || ts[23] != 'Z')
            fail_msg("log line %d: bad ts: %s", n, l);
        if (!lvl || (strcmp(lvl, "debug") && strcmp(lvl, "info") && strcmp(lvl, "warn") &&
                     strcmp(lvl, "error")))
            fail_msg("log line %d: bad level: %s", n, l);
        if (!json_string_value(json_object_get(j, "component")) ||
            !json_string_value(json_object_get(j, "msg")))
            fail_msg("log line %d: no component or msg: %s", n, l);
        json_array_append_new(all, j);
    }
    free(log);
    assert_true(n > 0);
    return all;
}

/* The log line whose request_id is id, or NULL. */
static json_t *line_with_id(json_t *lines, const char *id)
{
    size_t i;
    json_t *j;
    json_array_foreach(lines, i, j)
    {
        const char *v = json_string_value(json_object_get(j, "request_id"));
        if (v && strcmp(v, id) == 0)
            return j;
    }
    return NULL;
}

static bool has_msg(json_t *lines, const char *level, const char *text)
{
    size_t i;
    json_t *j;
    json_array_foreach(lines, i, j)
    {
        const char *m = json_string_value(json_object_get(j, "msg"));
        if (m && strstr(m, text) &&
            strcmp(json_string_value(json_object_get(j, "level")), level) == 0)
            return true;
    }
    return false;
}

static void expect_request_line(json_t *lines, const char *id, const char *path, long status)
{
    json_t *l = line_with_id(lines, id);
    if (!l)
        fail_msg("no log line with request_id %s", id);
    assert_string_equal(json_string_value(json_object_get(l, "component")), "http");
    assert_string_equal(json_string_value(json_object_get(l, "method")), "GET");
    assert_string_equal(json_string_value(json_object_get(l, "path")), path);
    assert_int_equal(json_integer_value(json_object_get(l, "status")), status);
    assert_true(json_is_integer(json_object_get(l, "duration_us")));
}

static void test_json(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--log-format", "json", "--log-level", "debug", NULL);

    /* A client's id is kept: header, body and log. */
    ans a = get(s, "/v1/nope", "itest-req:42.A_b");
    assert_int_equal(a.status, 404);
    assert_string_equal(a.id, "itest-req:42.A_b");
    char bid[128];
    body_id(&a, bid, sizeof bid);
    assert_string_equal(bid, "itest-req:42.A_b");
    free(a.body);

    /* No id: the server makes one up. */
    ans b = get(s, "/v1/sets/nosuch", NULL);
    assert_int_equal(b.status, 404);
    body_id(&b, bid, sizeof bid);
    assert_string_equal(bid, b.id);
    assert_true(is_hex24(b.id));
    free(b.body);

    /* Unsafe or too long ids are replaced, never echoed. */
    char longid[80];
    memset(longid, 'a', 65);
    longid[65] = '\0';
    const char *bad[] = {"has space", "quo\"te", "a=b", longid};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ans c = get(s, "/v1/nope", bad[i]);
        assert_int_equal(c.status, 404);
        if (!is_hex24(c.id))
            fail_msg("X-Request-Id \"%s\" came back as \"%s\"", bad[i], c.id);
        body_id(&c, bid, sizeof bid);
        assert_string_equal(bid, c.id);
        free(c.body);
    }
    /* A success carries an id too (header only). */
    ans ok = get(s, "/v1/sets", "ok-1");
    assert_int_equal(ok.status, 200);
    assert_string_equal(ok.id, "ok-1");
    free(ok.body);
    /* A message with quotes and a newline in it (the set name is user input). */
    ans q = get(s, "/v1/sets/a%22b%0Ac/events", "q-1");
    assert_true(q.status >= 400);
    free(q.body);

    assert_int_equal(it_srv_stop(s, SIGTERM, WAIT_S) >= 0, 1);
    json_t *lines = json_lines(s);
    expect_request_line(lines, "itest-req:42.A_b", "/v1/nope", 404);
    expect_request_line(lines, b.id, "/v1/sets/nosuch", 404);
    expect_request_line(lines, "ok-1", "/v1/sets", 200);
    assert_non_null(line_with_id(lines, "q-1"));
    assert_true(has_msg(lines, "info", "listening on http://127.0.0.1:"));
    assert_true(has_msg(lines, "info", "stopped cleanly"));
    json_decref(lines);
    s->passed = true;
}

static void test_logfmt(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    ans a = get(s, "/v1/nope", "fmt-1");
    assert_int_equal(a.status, 404);
    free(a.body);
    it_srv_stop(s, SIGTERM, WAIT_S);
    char *log = read_log(s);
    int n = 0;
    for (char *save = NULL, *l = strtok_r(log, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "---- ", 5) == 0)
            continue; /* the harness's own lines ("---- itest: starting on port N") */
        n++;
        if (strncmp(l, "ts=", 3) || !strstr(l, " level=") || !strstr(l, " component=") ||
            !strstr(l, " msg="))
            fail_msg("log line %d is not logfmt with ts, level, component, msg: %s", n, l);
    }
    assert_true(n >= 2);
    free(log);
    assert_true(it_log_contains(s, "level=info component=server msg=\"listening on http://"));
    assert_true(it_log_contains(s, "msg=\"stopped cleanly\""));
    assert_false(it_log_contains(s, "fmt-1")); /* requests are debug */
    s->passed = true;
}

static void test_config(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "server { log_format = \"json\", log_level = \"debug\" }\n"
                    "set \"x\" { partitions = 1 }\n");
    static char keep[PATH_MAX];
    snprintf(keep, sizeof keep, "%s", cfg);
    it_start_config(s, keep, WAIT_S);
    ans a = get(s, "/v1/nope", "cfg-1");
    free(a.body);
    it_srv_stop(s, SIGTERM, WAIT_S);
    json_t *lines = json_lines(s);
    expect_request_line(lines, "cfg-1", "/v1/nope", 404);
    json_decref(lines);

    /* The flag wins over the file. */
    static const char *args[] = {"--log-format", "logfmt", NULL};
    for (int i = 0; args[i]; i++)
        s->args[2 + i] = args[i]; /* after "-c FILE" */
    s->args[4] = NULL;
    it_restart(s, WAIT_S);
    assert_true(it_log_contains(s, "level=info component=server msg=\"listening on http://"));

    /* `sluice check` refuses bad values, naming the key. */
    it_write_config(s, cfg, "server { log_format = \"xml\", log_level = \"loud\" }\n");
    char *out = NULL, *err = NULL;
    int rc = it_run(s, NULL, &out, &err, (const char *[]){"check", cfg, NULL}, WAIT_S);
    assert_int_equal(rc, 1);
    if (!strstr(out, "log_format must be \"logfmt\" or \"json\"") &&
        !strstr(err, "log_format must"))
        fail_msg("sluice check says: %s%s", out, err);
    if (!strstr(out, "log_level must be") && !strstr(err, "log_level must be"))
        fail_msg("sluice check says: %s%s", out, err);
    free(out);
    free(err);
    s->passed = true;
}

/* Holds the only connection of a server with max_connections = 1 (fd in
 * *fd, caller closes) and GETs /v1/sets (X-Request-Id "PREFIX-N") until an
 * answer is 503, which it returns (id gets its request id). Fails the test
 * when none comes. */
static ans hold_and_503(const it_server *s, int *fd, const char *prefix, char *id, size_t cap)
{
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(*fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ans a = {0};
    /* The server counts the idle connection once it accepted it. */
    for (int i = 0; i < 300 && a.status != 503; i++) {
        free(a.body);
        snprintf(id, cap, "%s-%d", prefix, i);
        a = get(s, "/v1/sets", id);
        if (a.status != 503)
            it_sleep_ms(10);
    }
    if (a.status != 503)
        fail_msg("no 503 with one connection held: %ld %s", a.status, a.body);
    return a;
}

static void test_level(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { max_connections = 1 }\n");
    static char keep[PATH_MAX];
    snprintf(keep, sizeof keep, "%s", cfg);
    static const char *args[] = {"-c", keep, "--log-level", "error", NULL};
    it_srv_start(s, args[0], args[1], args[2], args[3], NULL);
    /* The readiness line is there at --log-level error. */
    for (double end = it_mono() + WAIT_S; it_mono() < end && !it_log_contains(s, IT_READY_LINE);)
        it_sleep_ms(20);
    assert_true(it_log_contains(s, "level=info component=server msg=\"listening on http://"));
    int fd;
    char id[32];
    ans a = hold_and_503(s, &fd, "lvl", id, sizeof id);
    free(a.body);
    close(fd);
    it_srv_stop(s, SIGTERM, WAIT_S);
    /* The 503 (a warning) is left out, the lifecycle lines are not. */
    assert_false(it_log_contains(s, "TooManyConnections"));
    assert_false(it_log_contains(s, id));
    assert_true(it_log_contains(s, "msg=\"stopping: draining buffers\""));
    assert_true(it_log_contains(s, "msg=\"stopped cleanly\""));

    const char *bad[][3] = {{"--log-format", "xml", "want logfmt or json"},
                            {"--log-level", "loud", "want debug, info, warn or error"}};
    for (int i = 0; i < 2; i++) {
        char *out = NULL, *err = NULL;
        int rc = it_run(s, NULL, &out, &err, (const char *[]){"serve", bad[i][0], bad[i][1], NULL},
                        WAIT_S);
        assert_int_equal(rc, 2);
        if (!strstr(err, bad[i][2]))
            fail_msg("serve %s %s: %s", bad[i][0], bad[i][1], err);
        free(out);
        free(err);
    }
    s->passed = true;
}

/* At info, a 5xx answer is logged with its request id: a server allowing
 * one connection, held by an idle socket, answers the next one 503 (an
 * expected overload answer: a warning). */
static void test_5xx(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { max_connections = 1 }\n");
    static char keep[PATH_MAX];
    snprintf(keep, sizeof keep, "%s", cfg);
    it_start_config(s, keep, WAIT_S);
    int fd;
    char id[32] = "";
    ans a = hold_and_503(s, &fd, "busy", id, sizeof id);
    close(fd);
    char bid[128];
    body_id(&a, bid, sizeof bid);
    assert_string_equal(bid, id);
    assert_string_equal(a.id, id);
    free(a.body);
    char want[64];
    snprintf(want, sizeof want, "request_id=%s", id);
    for (double end = it_mono() + WAIT_S; it_mono() < end && !it_log_contains(s, want);)
        it_sleep_ms(20);
    char *log = read_log(s);
    char *l = strstr(log, want);
    assert_non_null(l);
    while (l > log && l[-1] != '\n')
        l--;
    char *e = strchr(l, '\n');
    if (e)
        *e = '\0';
    if (!strstr(l, "level=warn component=http") || !strstr(l, "status=503") ||
        !strstr(l, "TooManyConnections"))
        fail_msg("the 503's log line: %s", l);
    free(log);
    s->passed = true;
}

/* Many 503s in a burst: the log holds few "answered 503" lines, and the
 * "N more 503 TooManyConnections answers" lines (the last written at
 * shutdown) account for every other one. */
static void test_burst(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { max_connections = 1 }\n");
    static char keep[PATH_MAX];
    snprintf(keep, sizeof keep, "%s", cfg);
    it_start_config(s, keep, WAIT_S);
    int fd;
    char id[32];
    double t0 = it_mono();
    ans a = hold_and_503(s, &fd, "first", id, sizeof id);
    free(a.body);
    int n503 = 1;
    for (int i = 0; i < 200; i++) {
        snprintf(id, sizeof id, "burst-%d", i);
        ans b = get(s, "/v1/sets", id);
        n503 += b.status == 503;
        free(b.body);
    }
    double secs = it_mono() - t0;
    close(fd);
    assert_true(n503 > 100);
    assert_int_equal(it_srv_stop(s, SIGTERM, WAIT_S) >= 0, 1);
    int lines = it_log_count(s, "answered 503");
    /* One line a second at most (plus the first): not one per answer. */
    if (lines > (int)secs + 2)
        fail_msg("%d lines for %d 503s in %.1f s", lines, n503, secs);
    /* Every 503 left out is counted in a "N more" line. */
    char *log = read_log(s);
    long suppressed = 0;
    int more_lines = 0;
    for (char *save = NULL, *l = strtok_r(log, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (!strstr(l, " more 503 TooManyConnections answers since the last message"))
            continue;
        more_lines++;
        const char *v = strstr(l, " suppressed=");
        if (!v || !strstr(l, "level=warn component=http"))
            fail_msg("bad \"more\" line: %s", l);
        suppressed += atol(v + 12);
    }
    free(log);
    assert_true(more_lines >= 1);
    assert_int_equal(lines + suppressed, n503);
    s->passed = true;
}

/* An error body quoting a URL with a byte that is not UTF-8 (%ff) and
 * control characters (C0 %01, C1 %c2%85) is valid JSON. */
static void test_badurl(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    ans a = get(s, "/v1/sets/nope%ff%01%c2%85x/events", NULL);
    assert_true(a.status >= 400 && a.status < 500);
    json_error_t je;
    json_t *j = json_loads(a.body, 0, &je);
    if (!j)
        fail_msg("error body is not JSON (%s): %s", je.text, a.body);
    const char *m = json_string_value(json_object_get(j, "message"));
    assert_non_null(m);
    assert_non_null(strstr(m, "nope\xef\xbf\xbd\x01\xc2\x85x")); /* U+FFFD U+0001 U+0085 */
    assert_non_null(strstr(a.body, "\\ufffd\\u0001\\u0085x"));   /* escaped, not raw */
    json_decref(j);
    free(a.body);
    /* The same for a route that does not exist. */
    a = get(s, "/v1/nope%ff", NULL);
    assert_int_equal(a.status, 404);
    j = json_loads(a.body, 0, &je);
    if (!j)
        fail_msg("error body is not JSON (%s): %s", je.text, a.body);
    json_decref(j);
    free(a.body);
    s->passed = true;
}

/* Waits until the log holds text. */
static void wait_log(const it_server *s, const char *text)
{
    for (double end = it_mono() + WAIT_S; it_mono() < end && !it_log_contains(s, text);)
        it_sleep_ms(20);
    if (!it_log_contains(s, text))
        fail_msg("the log never held %s", text);
}

/* SIGHUP applies the reloaded file's log_format and log_level; a
 * --log-format flag keeps winning. */
static void test_reload(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { log_format = \"logfmt\", log_level = \"info\" }\n");
    static char keep[PATH_MAX];
    snprintf(keep, sizeof keep, "%s", cfg);
    it_start_config(s, keep, WAIT_S);
    ans a = get(s, "/v1/nope", "before-1");
    free(a.body);
    it_write_config(s, cfg, "server { log_format = \"json\", log_level = \"debug\" }\n");
    kill(s->pid, SIGHUP);
    wait_log(s, "{\"ts\":"); /* the "reloaded" line, in JSON */
    assert_true(it_log_contains(s, "\"msg\":\"reloaded "));
    a = get(s, "/v1/nope", "after-1");
    free(a.body);
    wait_log(s, "\"request_id\":\"after-1\"");    /* debug, JSON */
    assert_false(it_log_contains(s, "before-1")); /* it was info then */
    /* Back to the defaults when the file names none. */
    it_write_config(s, cfg, "set \"x\" { partitions = 1 }\n");
    kill(s->pid, SIGHUP);
    wait_log(s, "level=info component=server msg=\"reloaded ");
    a = get(s, "/v1/nope", "after-2");
    free(a.body);
    it_srv_stop(s, SIGTERM, WAIT_S);
    assert_false(it_log_contains(s, "after-2"));

    /* --log-format logfmt wins over a reloaded json; the level still
     * follows the file. */
    it_write_config(s, cfg, "server { log_level = \"info\" }\n");
    static const char *args[] = {"--log-format", "logfmt", NULL};
    for (int i = 0; args[i]; i++)
        s->args[2 + i] = args[i]; /* after "-c FILE" */
    s->args[4] = NULL;
    it_restart(s, WAIT_S);
    it_write_config(s, cfg, "server { log_format = \"json\", log_level = \"debug\" }\n");
    int before = it_log_count(s, "msg=\"reloaded ");
    kill(s->pid, SIGHUP);
    for (double end = it_mono() + WAIT_S;
         it_mono() < end && it_log_count(s, "msg=\"reloaded ") == before;)
        it_sleep_ms(20);
    assert_int_equal(it_log_count(s, "msg=\"reloaded "), before + 1);
    a = get(s, "/v1/nope", "after-3");
    free(a.body);
    wait_log(s, "request_id=after-3");
    it_srv_stop(s, SIGTERM, WAIT_S);
    assert_false(it_log_contains(s, "\"request_id\":\"after-3\""));
    s->passed = true;
}

int main(void)
{
    if (it_init("test_logging"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_json, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_logfmt, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_config, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_level, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_5xx, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_burst, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_badurl, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_reload, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
