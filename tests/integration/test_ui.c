/*
 * tests/integration/test_ui.c — the web console at /ui/
 * (http/http_console.c, http/ui/) against the real
 * `bin/sluice serve`:
 *   files    /ui redirects to /ui/; index.html, app.js and style.css with
 *            their Content-Types, a CSP of 'self', an ETag that answers 304;
 *            unknown files and paths 404 (JSON, with a request id); only GET
 *   page     headless Chromium (driven through its DevTools protocol over
 *            --remote-debugging-pipe) loads /ui/ for a server with two sets,
 *            a rule delivering to a file, a rule whose target is down (so it
 *            lags), and a declared lane, and the rendered DOM shows each set
 *            with its event count, both rules with their lag as /v1/rules
 *            says, and the lane; then /ui/#tail=orders shows the set's
 *            events, and an event posted after the page loaded appears in
 *            the tail (the long-poll); switching the tail between sets
 *            five times aborts the old long-polls, so the new set's next
 *            event shows within 10 s (stale ones would hold every
 *            connection Chromium allows for 20 s); the tail of a set of 3
 *            partitions shows events newest first by time, not grouped by
 *            partition, and places a late event with an older time among
 *            them.
 *   key      a server with API keys: the page asks for a key, says a wrong
 *            one is refused, keeps the right one in sessionStorage and shows
 *            the sets with it
 * Chromium is installed by scripts/deps.sh; when it cannot be found the
 * browser test is skipped with a loud message.
 */
#include "itest.h"

#include <errno.h>
#include <openssl/sha.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 30.0

/* ---- plain HTTP with headers --------------------------------------------------------- */

typedef struct hresp {
    long status;
    char ctype[128], csp[256], etag[64], location[128], reqid[80];
    sl_buf body;
} hresp;

static void take_header(char *dst, size_t cap, const char *line, size_t n, const char *name)
{
    size_t nl = strlen(name);
    if (n <= nl + 1 || strncasecmp(line, name, nl) || line[nl] != ':')
        return;
    const char *v = line + nl + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
        vl--;
    snprintf(dst, cap, "%.*s", (int)vl, v);
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    hresp *r = ud;
    size_t len = size * n;
    take_header(r->ctype, sizeof r->ctype, p, len, "Content-Type");
    take_header(r->csp, sizeof r->csp, p, len, "Content-Security-Policy");
    take_header(r->etag, sizeof r->etag, p, len, "ETag");
    take_header(r->location, sizeof r->location, p, len, "Location");
    take_header(r->reqid, sizeof r->reqid, p, len, "X-Request-Id");
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    hresp *r = ud;
    return sl_buf_append(&r->body, p, size * n) ? 0 : size * n;
}

/* method path (with an optional extra request header); fails the test when
 * nothing answers. Redirects are not followed. */
static hresp fetch(const it_server *s, const char *method, const char *path, const char *hdr)
{
    hresp r;
    memset(&r, 0, sizeof r);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    struct curl_slist *hl = hdr ? curl_slist_append(NULL, hdr) : NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    sl_buf_append(&r.body, "", 1);
    r.body.len--;
    return r;
}

static const char *hbody(const hresp *r)
{
    return r->body.data ? (const char *)r->body.data : "";
}

/* Asserts a 404 NotFound JSON answer that carries its request id in both
 * the body and the X-Request-Id header. */
static void expect_404(const it_server *s, const char *path)
{
    hresp r = fetch(s, "GET", path, NULL);
    if (r.status != 404)
        fail_msg("GET %s: want 404, got %ld: %s", path, r.status, hbody(&r));
    json_t *j = json_loads(hbody(&r), 0, NULL);
    if (!j)
        fail_msg("GET %s: the 404 body is not JSON: %s", path, hbody(&r));
    assert_string_equal(json_string_value(json_object_get(j, "error")), "NotFound");
    const char *id = json_string_value(json_object_get(j, "request_id"));
    if (!id || !r.reqid[0] || strcmp(id, r.reqid) != 0)
        fail_msg("GET %s: request_id %s in the body, %s in the header", path, id ? id : "none",
                 r.reqid);
    json_decref(j);
    sl_buf_free(&r.body);
}

static void test_files(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);

    hresp r = fetch(s, "GET", "/ui", NULL);
    assert_int_equal(r.status, 301);
    assert_string_equal(r.location, "/ui/");
    sl_buf_free(&r.body);

    static const struct {
        const char *path, *ctype, *needle;
    } files[] = {
        {"/ui/", "text/html; charset=utf-8", "<script src=\"app.js\""},
        {"/ui/index.html", "text/html; charset=utf-8", "id=\"sets\""},
        {"/ui/app.js", "text/javascript; charset=utf-8", "/v1/rules"},
        {"/ui/style.css", "text/css; charset=utf-8", "table"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        r = fetch(s, "GET", files[i].path, NULL);
        if (r.status != 200 || !strstr(hbody(&r), files[i].needle))
            fail_msg("GET %s: %ld without \"%s\"", files[i].path, r.status, files[i].needle);
        assert_string_equal(r.ctype, files[i].ctype);
        if (!strstr(r.csp, "default-src 'self'"))
            fail_msg("GET %s: Content-Security-Policy \"%s\"", files[i].path, r.csp);
        assert_true(r.etag[0] == '"');
        /* No URL of another origin in the console's files. */
        if (strstr(hbody(&r), "http://") || strstr(hbody(&r), "https://"))
            fail_msg("%s refers to another origin", files[i].path);
        char inm[128];
        snprintf(inm, sizeof inm, "If-None-Match: %s", r.etag);
        sl_buf_free(&r.body);
        r = fetch(s, "GET", files[i].path, inm);
        assert_int_equal(r.status, 304);
        assert_int_equal(r.body.len, 0);
        sl_buf_free(&r.body);
    }
    expect_404(s, "/ui/nope.js");
    expect_404(s, "/ui/a/app.js");
    expect_404(s, "/ui/..%2Fapp.js");
    expect_404(s, "/uix");
    r = fetch(s, "POST", "/ui/app.js", NULL);
    assert_int_equal(r.status, 405);
    sl_buf_free(&r.body);
    s->passed = true;
}

/* ---- Chromium over the DevTools protocol ------------------------------------------------ */

/* A headless Chromium driven through --remote-debugging-pipe: commands are
 * JSON messages ended by a NUL byte written to its fd 3, answers and events
 * come the same way from its fd 4. */
typedef struct cdp {
    pid_t pid;
    int to, from;
    sl_buf in;
    int next_id;
    char session[128];
    char log[PATH_MAX]; /* Chromium's stdout and stderr */
} cdp;

/* Prints the end of Chromium's own output, for a failure message. */
static void cdp_show_log(const cdp *c)
{
    FILE *f = fopen(c->log, "r");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, n > 4096 ? n - 4096 : 0, SEEK_SET);
    char buf[4097];
    size_t got = fread(buf, 1, 4096, f);
    buf[got] = '\0';
    fclose(f);
    fprintf(stderr, "---- chromium's output (%s, last 4 KiB):\n%s\n---- end\n", c->log, buf);
}

static cdp *g_live; /* the running browser, if any */

static const char *find_chromium(void)
{
    static const char *const names[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                                        "/usr/lib/chromium/chromium"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (access(names[i], X_OK) == 0)
            return names[i];
    return NULL;
}

static void cdp_start(cdp *c, const it_server *s, const char *exe)
{
    memset(c, 0, sizeof *c);
    int a[2], b[2];
    assert_int_equal(pipe(a), 0);
    assert_int_equal(pipe(b), 0);
    char profile[PATH_MAX], logp[PATH_MAX], prof_arg[PATH_MAX + 32];
    it_path(profile, s, "chromium-profile");
    it_path(logp, s, "chromium.log");
    snprintf(prof_arg, sizeof prof_arg, "--user-data-dir=%s", profile);
    pid_t parent = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A test killed outright (no teardown) leaves no browser behind. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* it died before the prctl */
            _exit(127);
        /* fd 3 reads commands, fd 4 writes answers. */
        int in = dup(a[0]), out = dup(b[1]);
        dup2(in, 3);
        dup2(out, 4);
        int lf = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (lf >= 0) {
            dup2(lf, 1);
            dup2(lf, 2);
        }
        for (int fd = 5; fd < 1024; fd++)
            close(fd);
        setpgid(0, 0); /* its helpers die with it (killpg) */
        execl(exe, exe, "--headless=new", "--no-sandbox", "--disable-gpu",
              "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
              "--disable-extensions", "--remote-debugging-pipe", prof_arg, "about:blank",
              (char *)NULL);
        _exit(127);
    }
    close(a[0]);
    close(b[1]);
    snprintf(c->log, sizeof c->log, "%s", logp);
    c->pid = pid;
    c->to = a[1];
    c->from = b[0];
}

static void cdp_stop(cdp *c)
{
    if (c->pid > 0) {
        close(c->to);
        killpg(c->pid, SIGKILL);
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        close(c->from);
    }
    sl_buf_free(&c->in);
    c->pid = 0;
}

/* The next message (parsed), or NULL when none came within secs. */
static json_t *cdp_read(cdp *c, double secs)
{
    double end = it_mono() + secs;
    for (;;) {
        uint8_t *nul = c->in.len ? memchr(c->in.data, 0, c->in.len) : NULL;
        if (nul) {
            size_t n = (size_t)(nul - c->in.data);
            json_t *j = json_loadb((const char *)c->in.data, n, 0, NULL);
            memmove(c->in.data, nul + 1, c->in.len - n - 1);
            c->in.len -= n + 1;
            if (j)
                return j;
            continue;
        }
        double left = end - it_mono();
        if (left <= 0)
            return NULL;
        struct pollfd p = {.fd = c->from, .events = POLLIN};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return NULL;
        char buf[65536];
        ssize_t r = read(c->from, buf, sizeof buf);
        if (r <= 0)
            return NULL; /* Chromium went away */
        sl_buf_append(&c->in, buf, (size_t)r);
    }
}

/* Sends method with params (taken over; may be NULL) in the page session
 * when there is one; returns the "result" of its answer (caller frees), or
 * fails the test on an error answer or none within secs. */
static json_t *cdp_call(cdp *c, const char *method, json_t *params, double secs)
{
    int id = ++c->next_id;
    json_t *m = json_pack("{s:i,s:s,s:o}", "id", id, "method", method, "params",
                          params ? params : json_object());
    if (c->session[0])
        json_object_set_new(m, "sessionId", json_string(c->session));
    char *text = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    size_t n = strlen(text) + 1; /* the NUL ends the message */
    for (size_t off = 0; off < n;) {
        ssize_t w = write(c->to, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            cdp_show_log(c);
            fail_msg("DevTools %s: chromium closed its pipe", method);
        }
        off += (size_t)w;
    }
    free(text);
    double end = it_mono() + secs;
    while (it_mono() < end) {
        json_t *a = cdp_read(c, end - it_mono());
        if (!a)
            break;
        if (json_integer_value(json_object_get(a, "id")) != id) {
            json_decref(a); /* an event, or the answer of another session */
            continue;
        }
        json_t *err = json_object_get(a, "error");
        if (err) {
            char *e = json_dumps(err, JSON_COMPACT);
            fail_msg("DevTools %s: %s", method, e);
        }
        json_t *res = json_incref(json_object_get(a, "result"));
        json_decref(a);
        return res;
    }
    cdp_show_log(c);
    fail_msg("DevTools %s: no answer in %.0f s", method, secs);
    return NULL;
}

/* Opens url in a new page and attaches to it (its session is used after). */
static void cdp_open(cdp *c, const char *url)
{
    c->session[0] = '\0';
    json_t *r = cdp_call(c, "Target.createTarget", json_pack("{s:s}", "url", url), WAIT_S);
    const char *tid = json_string_value(json_object_get(r, "targetId"));
    assert_non_null(tid);
    json_t *a = cdp_call(c, "Target.attachToTarget",
                         json_pack("{s:s,s:b}", "targetId", tid, "flatten", 1), WAIT_S);
    json_decref(r);
    const char *sid = json_string_value(json_object_get(a, "sessionId"));
    assert_non_null(sid);
    snprintf(c->session, sizeof c->session, "%s", sid);
    json_decref(a);
}

/* Evaluates expr (which must yield a string) in the page; caller frees. */
static char *cdp_eval(cdp *c, const char *expr)
{
    json_t *r = cdp_call(c, "Runtime.evaluate",
                         json_pack("{s:s,s:b}", "expression", expr, "returnByValue", 1), WAIT_S);
    const char *v = json_string_value(json_object_get(json_object_get(r, "result"), "value"));
    char *out = strdup(v ? v : "");
    json_decref(r);
    return out;
}

/* Polls expr every 100 ms until it yields want; fails the test after secs
 * showing the last value and the page's text. */
static void wait_dom_within(cdp *c, const char *what, const char *expr, const char *want,
                            double secs)
{
    char *got = NULL;
    for (double end = it_mono() + secs; it_mono() < end; it_sleep_ms(100)) {
        free(got);
        got = cdp_eval(c, expr);
        if (strcmp(got, want) == 0) {
            free(got);
            return;
        }
    }
    char *text = cdp_eval(c, "document.body.innerText");
    fail_msg("the console does not show %s: want \"%s\", got \"%s\"; the page says:\n%s", what,
             want, got, text);
}

static void wait_dom(cdp *c, const char *what, const char *expr, const char *want)
{
    wait_dom_within(c, what, expr, want, WAIT_S);
}

/* The text of the cell class cls in the row data-name=name of table. */
static char *cell_expr(const char *table, const char *name, const char *cls)
{
    char *e = malloc(512);
    snprintf(e, 512,
             "(function(){var r=[...document.querySelectorAll('#%s tbody tr')]"
             ".find(function(t){return t.dataset.name===%s});"
             "var c=r&&r.querySelector('.%s');return c?c.textContent:'(none)'})()",
             table, name, cls);
    return e;
}

static void expect_cell(cdp *c, const char *table, const char *name, const char *cls,
                        const char *want)
{
    char quoted[160], what[200];
    snprintf(quoted, sizeof quoted, "'%s'", name);
    snprintf(what, sizeof what, "%s \"%s\" %s", table, name, cls);
    char *e = cell_expr(table, quoted, cls);
    wait_dom(c, what, e, want);
    free(e);
}

/* The ids shown in the tail, in page order, joined with ','. */
#define TAIL_IDS                                                                                   \
    "[...document.querySelectorAll('#tail .ev-id')].map(function(e){return e.textContent})"        \
    ".sort().join(',')"

static void post_ev(it_server *s, const char *set, const char *id)
{
    char *ev = it_event(id, NULL);
    int part;
    int64_t off;
    it_post_one(s, set, ev, &part, &off);
    free(ev);
}

/* The ids shown in the tail, in page order. */
#define TAIL_ORDER                                                                                 \
    "[...document.querySelectorAll('#tail .ev-id')].map(function(e){return e.textContent})"        \
    ".join(',')"

/* Posts event id to the set "timed" with time 2026-01-01T10:00:SECS Z;
 * returns its partition. */
static int post_timed(it_server *s, const char *id, const char *secs)
{
    char extra[64];
    snprintf(extra, sizeof extra, ",\"time\":\"2026-01-01T10:00:%sZ\"", secs);
    char *ev = it_event(id, extra);
    int part;
    int64_t off;
    it_post_one(s, "timed", ev, &part, &off);
    free(ev);
    return part;
}

static void test_page(void **state)
{
    it_server *s = *state;
    const char *exe = find_chromium();
    if (!exe) {
        fprintf(stderr, "\n*** test_ui: SKIPPED the browser test: chromium is not installed "
                        "(scripts/deps.sh installs the Debian package `chromium`) ***\n\n");
        s->passed = true;
        skip();
    }
    int dead = it_free_port(); /* nothing listens there: the rule "stuck" lags */
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "set \"orders\" { partitions = 2 }\n"
        "set \"audit\" { partitions = 1 }\n"
        "set \"timed\" { partitions = 3 }\n"
        "lane \"feature-x\" { env = \"boe\" }\n"
        "rule \"ship\" { set = \"orders\", target = target.file { path = \"ship.ndjson\" } }\n"
        "rule \"stuck\" { set = \"orders\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/x\" } }\n",
        dead);
    static char cfg_keep[PATH_MAX];
    snprintf(cfg_keep, sizeof cfg_keep, "%s", cfg);
    it_start_config(s, cfg_keep, WAIT_S);
    for (int i = 1; i <= 5; i++) {
        char id[32];
        snprintf(id, sizeof id, "ui-%d", i);
        post_ev(s, "orders", id);
    }
    post_ev(s, "audit", "au-1");
    post_ev(s, "audit", "au-2");
    it_wait_rule_int(s, "ship", "delivered", 5, WAIT_S);
    /* "stuck" holds its cursors at the first event: its lag is all 5. */
    json_t *r = it_rule(s, "stuck");
    json_int_t lag = it_rule_int(r, "lag");
    json_decref(r);
    assert_int_equal(lag, 5);

    static cdp c; /* static: the teardown stops it when an assertion fails */
    cdp_start(&c, s, exe);
    g_live = &c;
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ui/", s->port);
    cdp_open(&c, url);
    expect_cell(&c, "sets", "orders", "set-name", "orders");
    expect_cell(&c, "sets", "orders", "set-events", "5");
    expect_cell(&c, "sets", "audit", "set-events", "2");
    expect_cell(&c, "rules", "ship", "rule-name", "ship");
    expect_cell(&c, "rules", "ship", "rule-lag", "0");
    expect_cell(&c, "rules", "stuck", "rule-name", "stuck");
    expect_cell(&c, "rules", "stuck", "rule-lag", "5");
    expect_cell(&c, "lanes", "feature-x", "lane-name", "feature-x");
    expect_cell(&c, "lanes", "", "lane-name", "(base)");
    /* The overview refreshes itself: a new event shows up in the count. */
    post_ev(s, "audit", "au-3");
    expect_cell(&c, "sets", "audit", "set-events", "3");

    /* The tail of orders: what is there, then what comes after the load. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ui/#tail=orders", s->port);
    cdp_open(&c, url);
    wait_dom(&c, "the tail of orders", TAIL_IDS, "ui-1,ui-2,ui-3,ui-4,ui-5");
    char *title = cdp_eval(&c, "document.getElementById('tail-set').textContent");
    assert_string_equal(title, "orders");
    free(title);
    post_ev(s, "orders", "ui-6");
    wait_dom(&c, "the event posted after the page loaded", TAIL_IDS,
             "ui-1,ui-2,ui-3,ui-4,ui-5,ui-6");
    /* Events of another set stay out of it. */
    post_ev(s, "audit", "au-4");
    post_ev(s, "orders", "ui-7");
    wait_dom(&c, "the next event", TAIL_IDS, "ui-1,ui-2,ui-3,ui-4,ui-5,ui-6,ui-7");
    /* A lane's event shows its lane, in the tail and in the lanes table. */
    char *ev = it_event("ui-8", NULL);
    it_resp pr = it_post(s, "orders", IT_CT_CE, (const char *[]){"X-Sluice-Lane: feature-x", NULL},
                         ev, SIZE_MAX);
    json_decref(it_expect_results(&pr, 1, 0));
    it_resp_free(&pr);
    free(ev);
    expect_cell(&c, "tail", "ui-8", "ev-lane", "feature-x");
    expect_cell(&c, "tail", "ui-7", "ev-lane", "");
    expect_cell(&c, "lanes", "feature-x", "lane-in", "1");
    /* What producers send is shown as text, never run as HTML. */
    post_ev(s, "orders", "<b>ui-9</b>");
    expect_cell(&c, "tail", "<b>ui-9</b>", "ev-id", "<b>ui-9</b>");
    wait_dom(&c, "no element made from an event",
             "String(document.querySelectorAll('#tail b').length)", "0");

    /* Switching the tail between sets aborts the old tail's long-polls.
     * Five switches leave 2+2 (orders) and 1+1 (audit) old long-polls, on
     * top of the first tail's 2: were they not aborted they would hold all
     * of Chromium's 6 connections to the host for up to 20 s (TAIL_WAIT_MS),
     * and the next tail (or event) would wait about that long. So each step
     * must show within 10 s, half that (it takes milliseconds). */
    static const char *const sets[] = {"audit", "orders", "audit", "orders", "audit"};
    static const char *const shown[] = {"4", "9", "4", "9", "4"};
    for (int i = 0; i < 5; i++) {
        char js[128];
        snprintf(js, sizeof js, "location.hash = 'tail=%s'; 'ok'", sets[i]);
        free(cdp_eval(&c, js));
        wait_dom_within(&c, "the tail's set", "document.getElementById('tail-set').textContent",
                        sets[i], 10.0);
        wait_dom_within(&c, "the backlog of the tail's set",
                        "String(document.querySelectorAll('#tail .ev-id').length)", shown[i], 10.0);
    }
    it_sleep_ms(300); /* the long-polls of the last tail are sent */
    post_ev(s, "audit", "au-5");
    wait_dom_within(&c, "the event posted after switching the tail", TAIL_IDS,
                    "au-1,au-2,au-3,au-4,au-5", 10.0);

    /* Newest first means by time across partitions: events spread over 3
     * partitions with times out of their offset order show sorted by time,
     * not grouped by partition; a late event with an older time lands
     * among them, a newer one on top. */
    static const char *const timed[][2] = {
        {"t-a", "05"}, {"t-b", "01"}, {"t-c", "09"}, {"t-d", "03"}, {"t-e", "07"}, {"t-f", "02.5"},
    };
    unsigned parts = 0;
    for (size_t i = 0; i < sizeof timed / sizeof timed[0]; i++)
        parts |= 1u << post_timed(s, timed[i][0], timed[i][1]);
    assert_true(__builtin_popcount(parts) >= 2); /* they really are in several partitions */
    free(cdp_eval(&c, "location.hash = 'tail=timed'; 'ok'"));
    wait_dom(&c, "the tail of timed, newest first by time", TAIL_ORDER, "t-c,t-e,t-a,t-d,t-f,t-b");
    char *info = cdp_eval(&c, "document.getElementById('tail-info').textContent");
    assert_non_null(strstr(info, "newest first by time"));
    free(info);
    it_sleep_ms(300); /* the long-polls are sent */
    post_timed(s, "t-g", "04");
    wait_dom(&c, "a late event with an older time", TAIL_ORDER, "t-c,t-e,t-a,t-g,t-d,t-f,t-b");
    post_timed(s, "t-h", "10");
    wait_dom(&c, "a newer event", TAIL_ORDER, "t-h,t-c,t-e,t-a,t-g,t-d,t-f,t-b");
    cdp_stop(&c);
    g_live = NULL;
    s->passed = true;
}

/* A server with API keys: the page asks for one (a wrong key is said to be
 * refused), keeps the right one in sessionStorage and shows the sets. */
static void test_key(void **state)
{
    it_server *s = *state;
    const char *exe = find_chromium();
    if (!exe) {
        fprintf(stderr, "\n*** test_ui: SKIPPED the browser test: chromium is not installed "
                        "(scripts/deps.sh installs the Debian package `chromium`) ***\n\n");
        s->passed = true;
        skip();
    }
    /* sha256("ui-test-token") */
    static const char token[] = "ui-test-token";
    unsigned char md[32];
    char hex[65];
    SHA256((const unsigned char *)token, strlen(token), md);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "server { api_keys = { ui = { sha256 = \"%s\", read = { \"*\" } } } }\n"
                    "set \"orders\" { partitions = 1 }\n",
                    hex);
    static char cfg_keep[PATH_MAX];
    snprintf(cfg_keep, sizeof cfg_keep, "%s", cfg);
    it_start_config(s, cfg_keep, WAIT_S);
    hresp r = fetch(s, "GET", "/v1/sets", NULL);
    assert_int_equal(r.status, 401); /* the API wants the key; the page does not */
    sl_buf_free(&r.body);

    static cdp c;
    cdp_start(&c, s, exe);
    g_live = &c;
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ui/", s->port);
    cdp_open(&c, url);
    wait_dom(&c, "the key form", "document.getElementById('key-form').hidden?'hidden':'shown'",
             "shown");
    free(cdp_eval(&c, "document.getElementById('key-input').value='wrong-token';"
                      "document.getElementById('key-form').requestSubmit();'sent'"));
    wait_dom(&c, "the refused key", "document.getElementById('key-error').textContent",
             "the key was refused");
    free(cdp_eval(&c, "document.getElementById('key-input').value='ui-test-token';"
                      "document.getElementById('key-form').requestSubmit();'sent'"));
    expect_cell(&c, "sets", "orders", "set-events", "0");
    wait_dom(&c, "the key form hidden",
             "document.getElementById('key-form').hidden?'hidden':'shown'", "hidden");
    char *kept = cdp_eval(&c, "sessionStorage.getItem('sluice.apiKey')||''");
    assert_string_equal(kept, token);
    free(kept);
    cdp_stop(&c);
    g_live = NULL;
    s->passed = true;
}

/* it_teardown(), after stopping a Chromium a failed test left running. */
static int teardown(void **state)
{
    if (g_live)
        cdp_stop(g_live);
    g_live = NULL;
    return it_teardown(state);
}

int main(void)
{
    if (it_init("test_ui"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_files, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_page, it_setup, teardown),
        cmocka_unit_test_setup_teardown(test_key, it_setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
