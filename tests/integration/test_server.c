/*
 * tests/integration/test_server.c — drives the real `bin/sluice serve` over
 * HTTP with libcurl: the content modes, every error code, lanes,
 * partitioning, long-polling, restarts, SIGTERM and SIGKILL under load,
 * back-pressure and slow clients (issue 3, section 6).
 *
 * Every test gets a temp dir and starts its own server on a free port as a
 * child process (output in DIR/server.log, printed when the test fails); the
 * teardown kills it and removes the dir. Helper threads never assert (cmocka
 * cannot fail from another thread): they record problems that the main
 * thread then checks. SLUICE_SOAK=1 runs the crash loops longer.
 */
#include "testutil.h"

#include "core/buf.h"
#include "core/metrics.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CT_CE "application/cloudevents+json"
#define CT_BATCH "application/cloudevents-batch+json"
#define CT_NDJSON "application/x-ndjson"
#define MAX_ARGS 24

static char g_bin[PATH_MAX]; /* bin/sluice */
static bool g_soak;          /* SLUICE_SOAK: longer loops */

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* ---- HTTP with libcurl ------------------------------------------------------ */

typedef struct resp {
    long status;     /* 0 when the exchange failed (err says why) */
    sl_buf body;     /* NUL-terminated once finished */
    char ctype[128]; /* Content-Type */
    char retry_after[32];
    double secs; /* how long the exchange took */
    char err[CURL_ERROR_SIZE];
} resp;

typedef struct call {
    const char *method;      /* default: POST with a body, else GET */
    const char *path;        /* "/v1/…", sent as is (no dot-segment removal) */
    const char *ctype;       /* Content-Type; NULL sends none */
    const char *const *hdrs; /* more headers, NULL-terminated; may be NULL */
    const void *body;
    size_t len;
    long timeout_ms; /* default 30 s */
} call;

static const char *body(const resp *r)
{
    return r->body.data ? (const char *)r->body.data : "";
}

static void resp_free(resp *r)
{
    sl_buf_free(&r->body);
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    resp *r = ctx;
    return sl_buf_append(&r->body, p, size * n) ? 0 : size * n;
}

/* Copies the value of header line p into out when it is the header name. */
static void take_header(const char *p, size_t len, const char *name, char *out, size_t size)
{
    size_t nl = strlen(name);
    if (len < nl || strncasecmp(p, name, nl) != 0)
        return;
    p += nl;
    len -= nl;
    while (len && (*p == ' ' || *p == '\t'))
        p++, len--;
    while (len && (p[len - 1] == '\r' || p[len - 1] == '\n' || p[len - 1] == ' '))
        len--;
    snprintf(out, size, "%.*s", (int)len, p);
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    resp *r = ctx;
    take_header(p, size * n, "content-type:", r->ctype, sizeof r->ctype);
    take_header(p, size * n, "retry-after:", r->retry_after, sizeof r->retry_after);
    return size * n;
}

/* Sets c up for one exchange into the fresh *r; free *hl after it. */
static void http_prepare(CURL *c, int port, const call *k, resp *r, struct curl_slist **hl)
{
    char url[4096];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, k->path);
    memset(r, 0, sizeof *r);
    curl_easy_reset(c); /* keeps the connection cache: keep-alive goes on */
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, k->timeout_ms ? k->timeout_ms : 30000L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->err);
    struct curl_slist *l = curl_slist_append(NULL, "Expect:");
    char h[256];
    snprintf(h, sizeof h, "Content-Type:%s%s", k->ctype ? " " : "", k->ctype ? k->ctype : "");
    l = curl_slist_append(l, h);
    for (size_t i = 0; k->hdrs && k->hdrs[i]; i++)
        l = curl_slist_append(l, k->hdrs[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, l);
    *hl = l;
    const char *m = k->method ? k->method : k->body ? "POST" : "GET";
    if (k->body || strcmp(m, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, k->body ? k->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)k->len);
    }
    if (strcmp(m, "GET") != 0 && strcmp(m, "POST") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
}

static void http_finish(CURL *c, CURLcode rc, resp *r)
{
    if (rc != CURLE_OK) {
        r->status = 0;
        if (!r->err[0])
            snprintf(r->err, sizeof r->err, "%s", curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    }
    sl_buf_append(&r->body, "", 1);
    r->body.len--;
}

/* One exchange on c (NULL: a fresh connection). Never asserts, so threads
 * may use it. Returns 0 when an answer came, -1 otherwise (r->err). */
static int http(CURL *c, int port, const call *k, resp *r)
{
    CURL *own = c ? NULL : curl_easy_init();
    if (!c)
        c = own;
    struct curl_slist *hl;
    http_prepare(c, port, k, r, &hl);
    double t0 = mono();
    CURLcode rc = curl_easy_perform(c);
    r->secs = mono() - t0;
    http_finish(c, rc, r);
    curl_slist_free_all(hl);
    if (own)
        curl_easy_cleanup(own);
    return r->status ? 0 : -1;
}

/* ---- the server process ----------------------------------------------------- */

typedef struct server {
    char *dir; /* temp dir holding data/ and server.log */
    char data[PATH_MAX];
    char log[PATH_MAX];
    pid_t pid; /* 0 when not running */
    int port;
    const char *args[MAX_ARGS]; /* extra serve arguments, NULL-terminated */
    bool passed;                /* set by the test at its end; else the log is shown */
} server;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* GET path with a short timeout; the status, or 0 when nothing answered. */
static long status_of(int port, const char *path)
{
    resp r;
    http(NULL, port, &(call){.path = path, .timeout_ms = 2000}, &r);
    resp_free(&r);
    return r.status;
}

/* Sends sig, then reaps the server, waiting up to secs before SIGKILL.
 * Returns the wait status, or -1 when it had to be killed. */
static int srv_stop(server *s, int sig, double secs)
{
    int st = -1;
    if (!s->pid)
        return -1;
    kill(s->pid, sig);
    double end = mono() + secs;
    for (;;) {
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid || (r < 0 && errno != EINTR))
            break;
        if (mono() > end) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            st = -1;
            break;
        }
        sleep_ms(5);
    }
    s->pid = 0;
    return st;
}

/* One attempt to start the server on a free port; true once /healthz is 200. */
static bool spawn(server *s)
{
    if ((s->port = free_port()) < 0)
        return false;
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", s->port);
    const char *argv[MAX_ARGS + 8] = {g_bin, "serve", "--data", s->data, "--listen", listen};
    int n = 6;
    for (int i = 0; s->args[i]; i++)
        argv[n++] = s->args[i];
    argv[n] = NULL;
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    dprintf(fd, "---- itest: starting on port %d\n", s->port);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls here: the parent has threads. */
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* no orphan servers if the test dies */
        dup2(fd, 1);
        dup2(fd, 2);
        execv(g_bin, (char **)argv);
        _exit(127);
    }
    close(fd);
    if (pid < 0)
        return false;
    s->pid = pid;
    for (double end = mono() + 20; mono() < end;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0; /* exited: the port may have been taken meanwhile */
            return false;
        }
        if (status_of(s->port, "/healthz") == 200)
            return true;
        sleep_ms(10);
    }
    srv_stop(s, SIGKILL, 5);
    return false;
}

static void print_log(const server *s)
{
    FILE *f = fopen(s->log, "r");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > 16384 ? size - 16384 : 0, SEEK_SET);
    fprintf(stderr, "---- server log (%s, last 16 KiB):\n", s->log);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stderr);
    fprintf(stderr, "---- end of server log\n");
    fclose(f);
}

/* Starts the server on s's data dir (again, on a new port). */
static void srv_restart(server *s)
{
    for (int attempt = 0; attempt < 5; attempt++)
        if (spawn(s))
            return;
    print_log(s);
    fail_msg("sluice serve did not become healthy (see the log above)");
}

/* Starts the server with extra serve arguments (NULL-terminated). */
static void srv_start(server *s, ...)
{
    va_list ap;
    va_start(ap, s);
    int n = 0;
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < MAX_ARGS - 1)
        s->args[n++] = a;
    va_end(ap);
    s->args[n] = NULL;
    srv_restart(s);
}

static bool log_contains(const server *s, const char *text)
{
    FILE *f = fopen(s->log, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

static int setup(void **state)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->dir = tu_tmpdir();
    snprintf(s->data, sizeof s->data, "%s/data", s->dir);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    server *s = *state;
    srv_stop(s, SIGKILL, 5);
    if (!s->passed)
        print_log(s);
    tu_rmdir(s->dir);
    free(s);
    return 0;
}

/* ---- requests with assertions (main thread only) ---------------------------- */

static resp get(server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static resp get(server *s, const char *fmt, ...)
{
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    resp r;
    if (http(NULL, s->port, &(call){.path = path}, &r))
        fail_msg("GET %s: %s", path, r.err);
    return r;
}

/* POSTs len bytes (strlen when len is SIZE_MAX) to /v1/sets/SET/events. */
static resp post(server *s, const char *set, const char *ctype, const char *const *hdrs,
                 const char *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/sets/%s/events", set);
    resp r;
    call k = {.path = path, .ctype = ctype, .hdrs = hdrs, .body = data,
              .len = len == SIZE_MAX ? strlen(data) : len};
    if (http(NULL, s->port, &k, &r))
        fail_msg("POST %s: %s", path, r.err);
    return r;
}

static json_t *parse_json(const resp *r)
{
    json_error_t je;
    json_t *j = json_loads(body(r), 0, &je);
    if (!j)
        fail_msg("answer (%ld) is not JSON (%s): %s", r->status, je.text, body(r));
    return j;
}

/* Asserts an error answer: status, a JSON body {"error":code,"message":…}. */
static void expect_error(const resp *r, long status, const char *code)
{
    if (r->status != status)
        fail_msg("want %ld %s, got %ld: %s", status, code, r->status, body(r));
    if (strncmp(r->ctype, "application/json", 16) != 0)
        fail_msg("error %ld has Content-Type \"%s\"", status, r->ctype);
    json_t *j = parse_json(r);
    const char *e = json_string_value(json_object_get(j, "error"));
    const char *m = json_string_value(json_object_get(j, "message"));
    if (!e || !m || strlen(m) < 10)
        fail_msg("error body lacks \"error\" or a useful \"message\": %s", body(r));
    if (code && strcmp(e, code) != 0)
        fail_msg("want error %s, got %s: %s", code, e, m);
    json_decref(j);
}

/* Asserts a publish answer {"accepted":A,"failed":F,"results":[…]}: one
 * result per entry in input order, each {partition, offset} or {error,
 * message, index = its position}. Returns the parsed answer. */
static json_t *expect_results(const resp *r, size_t accepted, size_t failed)
{
    if (r->status != 200)
        fail_msg("publish answered %ld: %s", r->status, body(r));
    json_t *j = parse_json(r);
    json_t *res = json_object_get(j, "results");
    if (json_integer_value(json_object_get(j, "accepted")) != (json_int_t)accepted ||
        json_integer_value(json_object_get(j, "failed")) != (json_int_t)failed ||
        json_array_size(res) != accepted + failed)
        fail_msg("want %zu accepted and %zu failed: %s", accepted, failed, body(r));
    for (size_t i = 0; i < json_array_size(res); i++) {
        json_t *e = json_array_get(res, i);
        if (json_object_get(e, "error")) {
            const char *m = json_string_value(json_object_get(e, "message"));
            if (!m || !*m || json_integer_value(json_object_get(e, "index")) != (json_int_t)i)
                fail_msg("result %zu: bad error entry: %s", i, body(r));
        } else if (!json_is_integer(json_object_get(e, "partition")) ||
                   !json_is_integer(json_object_get(e, "offset"))) {
            fail_msg("result %zu: neither an error nor partition+offset: %s", i, body(r));
        }
    }
    return j;
}

static json_t *result(json_t *answer, size_t i)
{
    return json_array_get(json_object_get(answer, "results"), i);
}

static int res_part(json_t *answer, size_t i)
{
    return (int)json_integer_value(json_object_get(result(answer, i), "partition"));
}

static int64_t res_off(json_t *answer, size_t i)
{
    return (int64_t)json_integer_value(json_object_get(result(answer, i), "offset"));
}

/* Asserts that entry i failed with code and, if want is given, that its
 * message contains want. */
static void expect_entry_error(json_t *answer, size_t i, const char *code, const char *want)
{
    const char *e = json_string_value(json_object_get(result(answer, i), "error"));
    const char *m = json_string_value(json_object_get(result(answer, i), "message"));
    if (!e || strcmp(e, code) != 0)
        fail_msg("entry %zu: want %s, got %s (%s)", i, code, e ? e : "success", m ? m : "");
    if (want && !strstr(m, want))
        fail_msg("entry %zu: message \"%s\" does not mention %s", i, m, want);
}

/* A structured event; caller frees. extra is appended inside the object. */
static char *event(const char *id, const char *extra)
{
    char *s;
    if (asprintf(&s, "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/itest\","
                 "\"type\":\"itest\"%s}", id, extra ? extra : "") < 0)
        fail_msg("out of memory");
    return s;
}

/* Posts one structured event and returns where it went. */
static void post_one(server *s, const char *set, const char *ev, int *part, int64_t *off)
{
    resp r = post(s, set, CT_CE, NULL, ev, SIZE_MAX);
    json_t *a = expect_results(&r, 1, 0);
    *part = res_part(a, 0);
    *off = res_off(a, 0);
    json_decref(a);
    resp_free(&r);
}

/* ---- reading events back ---------------------------------------------------- */

/* One event as served: its exact bytes, and what the checks look at. */
typedef struct rawev {
    char *text;
    int64_t offset; /* sluiceoffset */
    int part;       /* sluicepartition */
    char id[128];
    char lane[40]; /* "" when none */
} rawev;

typedef struct evs {
    rawev *v;
    size_t n, cap;
    int64_t next; /* next_offset of the last page */
} evs;

static void evs_free(evs *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i].text);
    free(e->v);
    memset(e, 0, sizeof *e);
}

/* Length of the JSON object or array starting at p, 0 if it does not end. */
static size_t value_len(const char *p, const char *end)
{
    int depth = 0;
    bool str = false;
    for (const char *q = p; q < end; q++) {
        if (str) {
            if (*q == '\\')
                q++;
            else if (*q == '"')
                str = false;
        } else if (*q == '"') {
            str = true;
        } else if (*q == '{' || *q == '[') {
            depth++;
        } else if ((*q == '}' || *q == ']') && --depth == 0) {
            return (size_t)(q - p + 1);
        }
    }
    return 0;
}

/* Adds the events of a GET answer {"events":[…],"next_offset":K} to out,
 * keeping each event's exact bytes. Never asserts; false on a bad shape. */
static bool parse_events(const char *b, size_t len, evs *out)
{
    static const char head[] = "{\"events\":[";
    if (len < sizeof head - 1 || memcmp(b, head, sizeof head - 1) != 0)
        return false;
    const char *p = b + sizeof head - 1, *end = b + len;
    while (p < end && *p != ']') {
        if (*p == ',') {
            p++;
            continue;
        }
        size_t n = value_len(p, end);
        json_t *j = n && *p == '{' ? json_loadb(p, n, 0, NULL) : NULL;
        if (!j)
            return false;
        if (out->n == out->cap) {
            out->cap = out->cap ? out->cap * 2 : 64;
            out->v = realloc(out->v, out->cap * sizeof *out->v);
        }
        rawev *e = &out->v[out->n++];
        memset(e, 0, sizeof *e);
        e->text = strndup(p, n);
        e->offset = (int64_t)json_integer_value(json_object_get(j, "sluiceoffset"));
        e->part = (int)json_integer_value(json_object_get(j, "sluicepartition"));
        const char *id = json_string_value(json_object_get(j, "id"));
        const char *lane = json_string_value(json_object_get(j, "lane"));
        snprintf(e->id, sizeof e->id, "%s", id ? id : "");
        snprintf(e->lane, sizeof e->lane, "%s", lane ? lane : "");
        json_decref(j);
        p += n;
    }
    json_t *j = json_loadb(b, len, 0, NULL);
    json_t *next = json_object_get(j, "next_offset");
    bool ok = json_is_integer(next);
    out->next = (int64_t)json_integer_value(next);
    json_decref(j);
    return ok;
}

/* GET /v1/sets/SET/events?partition=P&QUERY; asserts a 200 of the right shape. */
static evs read_events(server *s, const char *set, int part, const char *query)
{
    resp r = get(s, "/v1/sets/%s/events?partition=%d%s%s", set, part, *query ? "&" : "", query);
    evs e = {0};
    if (r.status != 200 || !parse_events(body(&r), r.body.len, &e))
        fail_msg("read %s/%d?%s answered %ld: %.300s", set, part, query, r.status, body(&r));
    resp_free(&r);
    return e;
}

/* Every event of a partition (lane: "*" for all), following next_offset. */
static evs read_all(server *s, const char *set, int part, const char *lane)
{
    evs all = {0};
    int64_t off = 0;
    for (int page = 0; page < 10000; page++) {
        char q[128];
        snprintf(q, sizeof q, "offset=%lld&max=10000&lane=%s", (long long)off, lane);
        size_t before = all.n;
        resp r = get(s, "/v1/sets/%s/events?partition=%d&%s", set, part, q);
        if (r.status != 200 || !parse_events(body(&r), r.body.len, &all))
            fail_msg("read %s/%d?%s answered %ld: %.300s", set, part, q, r.status, body(&r));
        resp_free(&r);
        if (all.n == before)
            return all;
        off = all.next;
    }
    fail_msg("read_all %s/%d did not end", set, part);
    return all;
}

/* The served form of a posted compact event that already had a time. */
static char *decorated(const char *posted, const char *set, int part, int64_t off)
{
    char *s;
    if (asprintf(&s, "%.*s,\"sluiceset\":\"%s\",\"sluicepartition\":%d,\"sluiceoffset\":%lld}",
                 (int)strlen(posted) - 1, posted, set, part, (long long)off) < 0)
        fail_msg("out of memory");
    return s;
}

/* Asserts that the event stored at (part, off) is exactly want. */
static void expect_stored(server *s, const char *set, int part, int64_t off, const char *want)
{
    char q[64];
    snprintf(q, sizeof q, "offset=%lld&max=1&lane=*", (long long)off);
    evs e = read_events(s, set, part, q);
    if (e.n != 1)
        fail_msg("%s/%d offset %lld: %zu events", set, part, (long long)off, e.n);
    if (strcmp(e.v[0].text, want) != 0)
        fail_msg("%s/%d offset %lld holds\n  %s\nwant\n  %s", set, part, (long long)off,
                 e.v[0].text, want);
    evs_free(&e);
}

/* The value of the Prometheus sample whose line starts with name (labels
 * included, e.g. "sluice_events_in_total{set=\"x\"}"), or -1. */
static double metric(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* ---- load writers and acknowledgements ------------------------------------- */

typedef struct ack {
    int part;
    int64_t offset;
    char id[48];
} ack;

typedef struct acks {
    pthread_mutex_t lock;
    ack *v;
    size_t n, cap;
} acks;

static void acks_add(acks *a, int part, int64_t off, const char *id)
{
    pthread_mutex_lock(&a->lock);
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->v = realloc(a->v, a->cap * sizeof *a->v);
    }
    ack *k = &a->v[a->n++];
    k->part = part;
    k->offset = off;
    snprintf(k->id, sizeof k->id, "%s", id);
    pthread_mutex_unlock(&a->lock);
}

static size_t acks_count(acks *a)
{
    pthread_mutex_lock(&a->lock);
    size_t n = a->n;
    pthread_mutex_unlock(&a->lock);
    return n;
}

/* A writer thread: posts NDJSON batches until told to stop, its request
 * budget is spent, or the server has been gone for a while; records every
 * acknowledged event. */
typedef struct writer {
    pthread_t thread;
    int port;
    const char *set;
    char tag[24];     /* id prefix, unique per run */
    int batch;        /* events per request */
    int pad;          /* bytes of padding per event */
    int max_requests; /* successful requests; 0 = no limit */
    int retry_ms;     /* pause after a refusal */
    _Atomic bool *stop;
    acks *acks;
    /* results */
    int ok, refused, full, lost;
    char problem[512]; /* the first unexpected answer */
} writer;

static bool writer_answer(writer *w, const resp *r, int seq0)
{
    json_t *j = json_loads(body(r), 0, NULL);
    json_t *res = json_object_get(j, "results");
    if (r->status == 200) {
        if (json_integer_value(json_object_get(j, "accepted")) != w->batch ||
            json_array_size(res) != (size_t)w->batch) {
            snprintf(w->problem, sizeof w->problem, "200 without %d accepted: %.300s",
                     w->batch, body(r));
        } else {
            for (int i = 0; i < w->batch; i++) {
                json_t *e = json_array_get(res, (size_t)i);
                char id[48];
                snprintf(id, sizeof id, "%s-%d", w->tag, seq0 + i);
                acks_add(w->acks, (int)json_integer_value(json_object_get(e, "partition")),
                         (int64_t)json_integer_value(json_object_get(e, "offset")), id);
            }
            w->ok++;
        }
    } else if (r->status == 503) {
        /* Back-pressure or shutdown: always an answer with Retry-After and a JSON error. */
        const char *e = json_string_value(json_object_get(j, "error"));
        const char *m = json_string_value(json_object_get(j, "message"));
        if (!e || !m || !r->retry_after[0] || strncmp(r->ctype, "application/json", 16))
            snprintf(w->problem, sizeof w->problem, "bad 503 (Retry-After \"%s\", type %s): "
                     "%.300s", r->retry_after, r->ctype, body(r));
        w->refused++;
        w->full += e && strcmp(e, "Backpressure") == 0;
    } else {
        snprintf(w->problem, sizeof w->problem, "unexpected %ld: %.300s", r->status, body(r));
    }
    json_decref(j);
    return r->status == 200;
}

static void *writer_main(void *arg)
{
    writer *w = arg;
    CURL *c = curl_easy_init();
    char path[256], *pad = malloc((size_t)w->pad + 1);
    snprintf(path, sizeof path, "/v1/sets/%s/events", w->set);
    memset(pad, 'p', (size_t)w->pad);
    pad[w->pad] = '\0';
    sl_buf b = SL_BUF_INIT;
    int seq = 0;
    double end = mono() + 60, last_ok = mono();
    /* Gives up after 10 s without an acknowledgement (the server is gone). */
    while (!atomic_load(w->stop) && !w->problem[0] && mono() - last_ok < 10 && mono() < end &&
           (!w->max_requests || w->ok < w->max_requests)) {
        b.len = 0;
        for (int i = 0; i < w->batch; i++)
            sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/load\","
                          "\"type\":\"load\",\"data\":{\"n\":%d,\"pad\":\"%s\"}}\n", w->tag,
                          seq + i, seq + i, pad);
        resp r;
        call k = {.path = path, .ctype = CT_NDJSON, .body = b.data, .len = b.len,
                  .timeout_ms = 20000};
        if (http(c, w->port, &k, &r) == 0 && writer_answer(w, &r, seq)) {
            last_ok = mono();
        } else {
            w->lost += r.status == 0;
            sleep_ms(w->retry_ms);
        }
        seq += w->batch; /* ids are never reused, even for refused requests */
        resp_free(&r);
    }
    sl_buf_free(&b);
    free(pad);
    curl_easy_cleanup(c);
    return NULL;
}

static void writers_start(writer *w, int n, int port, const char *set, const char *tag,
                          _Atomic bool *stop, acks *a)
{
    for (int i = 0; i < n; i++) {
        w[i].port = port;
        w[i].set = set;
        snprintf(w[i].tag, sizeof w[i].tag, "%s-w%d", tag, i);
        w[i].stop = stop;
        w[i].acks = a;
        if (!w[i].batch)
            w[i].batch = 20;
        if (!w[i].retry_ms)
            w[i].retry_ms = 5;
        assert_int_equal(pthread_create(&w[i].thread, NULL, writer_main, &w[i]), 0);
    }
}

/* Joins the writers and asserts none of them saw an unexpected answer. */
static void writers_join(writer *w, int n)
{
    for (int i = 0; i < n; i++)
        pthread_join(w[i].thread, NULL);
    for (int i = 0; i < n; i++)
        if (w[i].problem[0])
            fail_msg("writer %d: %s", i, w[i].problem);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Asserts that every acknowledged event is stored at its acknowledged offset
 * (so no acknowledged offset holds another event), that offsets are dense,
 * and that no id is stored twice. Returns the number of events stored. */
static size_t check_acks(server *s, const char *set, int nparts, acks *a)
{
    evs *parts = calloc((size_t)nparts, sizeof *parts);
    size_t total = 0;
    for (int p = 0; p < nparts; p++) {
        parts[p] = read_all(s, set, p, "*");
        for (size_t i = 0; i < parts[p].n; i++)
            if (parts[p].v[i].offset != (int64_t)i)
                fail_msg("%s/%d: event %zu is at offset %lld", set, p, i,
                         (long long)parts[p].v[i].offset);
        total += parts[p].n;
    }
    for (size_t k = 0; k < a->n; k++) {
        const ack *x = &a->v[k];
        if (x->part < 0 || x->part >= nparts || x->offset < 0 ||
            (size_t)x->offset >= parts[x->part].n)
            fail_msg("acknowledged %s at %d/%lld is missing (the partition holds %zu)", x->id,
                     x->part, (long long)x->offset,
                     x->part >= 0 && x->part < nparts ? parts[x->part].n : 0);
        const char *got = parts[x->part].v[x->offset].id;
        if (strcmp(got, x->id) != 0)
            fail_msg("%d/%lld was acknowledged for %s but holds %s", x->part,
                     (long long)x->offset, x->id, got);
    }
    char **ids = malloc((total + 1) * sizeof *ids);
    size_t n = 0;
    for (int p = 0; p < nparts; p++)
        for (size_t i = 0; i < parts[p].n; i++)
            ids[n++] = parts[p].v[i].id;
    qsort(ids, n, sizeof *ids, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(ids[i - 1], ids[i]) == 0)
            fail_msg("id %s is stored twice", ids[i]);
    free(ids);
    for (int p = 0; p < nparts; p++)
        evs_free(&parts[p]);
    free(parts);
    return total;
}

/* ---- content modes -------------------------------------------------------- */

static void test_content_modes(void **state)
{
    server *s = *state;
    srv_start(s, NULL);

    /* Structured: stored as posted, plus the attributes sluice adds on read. */
    const char *st = "{\"specversion\":\"1.0\",\"id\":\"s1\",\"source\":\"/itest\",\"type\":\"t\","
                     "\"time\":\"2024-05-01T10:00:00.000Z\",\"subject\":\"x\","
                     "\"data\":{\"a\":[1,2.5,{\"b\":null}],\"s\":\"caf\\u00e9\"}}";
    int p;
    int64_t o;
    post_one(s, "modes", st, &p, &o);
    char *want = decorated(st, "modes", p, o);
    expect_stored(s, "modes", p, o, want);
    free(want);

    /* Batched: a JSON array, results in order. */
    const char *ev[3] = {
        "{\"specversion\":\"1.0\",\"id\":\"b0\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-05-01T10:00:01.000Z\"}",
        "{\"specversion\":\"1.0\",\"id\":\"b1\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-05-01T10:00:02.000Z\",\"data\":\"text\"}",
        "{\"specversion\":\"1.0\",\"id\":\"b2\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-05-01T10:00:03.000Z\",\"data_base64\":\"AAE=\"}"};
    char *batch;
    assert_true(asprintf(&batch, "[%s, %s,\n%s]", ev[0], ev[1], ev[2]) > 0);
    resp r = post(s, "modes", CT_BATCH, NULL, batch, SIZE_MAX);
    json_t *a = expect_results(&r, 3, 0);
    for (size_t i = 0; i < 3; i++) {
        want = decorated(ev[i], "modes", res_part(a, i), res_off(a, i));
        expect_stored(s, "modes", res_part(a, i), res_off(a, i), want);
        free(want);
    }
    json_decref(a);
    resp_free(&r);
    free(batch);

    /* Binary: ce-* headers (percent-decoded) are the attributes, the body is data. */
    static const struct {
        const char *ctype, *body;
        size_t len;
        const char *field, *value; /* data as JSON text, or data_base64; len 0: strlen */
    } bin[] = {
        {"application/json", "{\"k\": [1, 2], \"t\": \"x\"}", 0, "data", "{\"k\":[1,2],\"t\":\"x\"}"},
        {"text/plain", "h\xc3\xa9llo w\xc3\xb6rld", 0, "data", "\"h\xc3\xa9llo w\xc3\xb6rld\""},
        {"application/octet-stream", "\x00\x01\xfe\xff" "A", 5, "data_base64", "\"AAH+/0E=\""},
    };
    for (size_t i = 0; i < sizeof bin / sizeof *bin; i++) {
        char id[32];
        snprintf(id, sizeof id, "ce-id: bin%zu", i);
        const char *hdrs[] = {"ce-specversion: 1.0", id, "ce-source: /itest",
                              "ce-type: itest.binary", "ce-subject: caf%C3%A9",
                              "ce-myext: hello%20world%21", NULL};
        r = post(s, "modes", bin[i].ctype, hdrs, bin[i].body, bin[i].len ? bin[i].len : SIZE_MAX);
        a = expect_results(&r, 1, 0);
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)res_off(a, 0));
        evs e = read_events(s, "modes", res_part(a, 0), q);
        assert_int_equal(e.n, 1);
        json_t *got = json_loads(e.v[0].text, 0, NULL);
        json_t *wantv = json_loads(bin[i].value, JSON_DECODE_ANY, NULL);
        assert_non_null(got);
        assert_non_null(wantv);
        assert_string_equal(json_string_value(json_object_get(got, "id")), id + 7);
        assert_string_equal(json_string_value(json_object_get(got, "subject")), "caf\xc3\xa9");
        assert_string_equal(json_string_value(json_object_get(got, "myext")), "hello world!");
        assert_string_equal(json_string_value(json_object_get(got, "type")), "itest.binary");
        assert_string_equal(json_string_value(json_object_get(got, "datacontenttype")),
                            bin[i].ctype);
        if (!json_equal(json_object_get(got, bin[i].field), wantv))
            fail_msg("binary %s: %s is not %s in %s", bin[i].ctype, bin[i].field, bin[i].value,
                     e.v[0].text);
        assert_null(json_object_get(got, strcmp(bin[i].field, "data") ? "data" : "data_base64"));
        json_decref(got);
        json_decref(wantv);
        evs_free(&e);
        json_decref(a);
        resp_free(&r);
    }

    /* NDJSON: blank and whitespace-only lines are skipped, CRLF is fine, the
     * last line may lack its newline. */
    const char *nd = "{\"specversion\":\"1.0\",\"id\":\"n0\",\"source\":\"/itest\",\"type\":\"t\"}\r\n"
                     "\r\n"
                     "   \t\n"
                     "\n"
                     "{\"specversion\":\"1.0\",\"id\":\"n1\",\"source\":\"/itest\",\"type\":\"t\"}\n"
                     "{\"specversion\":\"1.0\",\"id\":\"n2\",\"source\":\"/itest\",\"type\":\"t\"}";
    r = post(s, "modes", CT_NDJSON, NULL, nd, SIZE_MAX);
    a = expect_results(&r, 3, 0);
    for (size_t i = 0; i < 3; i++) {
        char q[64], id[8];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)res_off(a, i));
        snprintf(id, sizeof id, "n%zu", i);
        evs e = read_events(s, "modes", res_part(a, i), q);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, id);
        /* sluice filled in the missing time. */
        json_t *got = json_loads(e.v[0].text, 0, NULL);
        const char *t = json_string_value(json_object_get(got, "time"));
        assert_non_null(t);
        assert_int_equal(strlen(t), 24);
        assert_int_equal(t[23], 'Z');
        json_decref(got);
        evs_free(&e);
    }
    json_decref(a);
    resp_free(&r);
    /* Other NDJSON media types and Content-Type parameters are accepted. */
    r = post(s, "modes", "application/x-ndjson; charset=utf-8", NULL, nd, SIZE_MAX);
    json_decref(expect_results(&r, 3, 0));
    resp_free(&r);
    r = post(s, "modes", "Application/JSONL", NULL, nd, SIZE_MAX);
    json_decref(expect_results(&r, 3, 0));
    resp_free(&r);
    s->passed = true;
}

/* The HTTP binding maps Content-Type to datacontenttype directly, parameters
 * included. */
static void test_binary_keeps_content_type(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    const char *hdrs[] = {"ce-specversion: 1.0", "ce-id: t1", "ce-source: /itest",
                          "ce-type: t", NULL};
    resp r = post(s, "ctype", "text/plain; charset=utf-8", hdrs, "hello", SIZE_MAX);
    json_t *a = expect_results(&r, 1, 0);
    evs e = read_events(s, "ctype", res_part(a, 0), "");
    assert_int_equal(e.n, 1);
    json_t *got = json_loads(e.v[0].text, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(got, "data")), "hello");
    const char *dct = json_string_value(json_object_get(got, "datacontenttype"));
    if (!dct || strcmp(dct, "text/plain; charset=utf-8") != 0)
        fail_msg("datacontenttype is \"%s\", want the whole Content-Type "
                 "\"text/plain; charset=utf-8\"", dct ? dct : "(none)");
    json_decref(got);
    evs_free(&e);
    json_decref(a);
    resp_free(&r);
    s->passed = true;
}

/* ---- errors ----------------------------------------------------------------- */

static void test_request_errors(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    char *ok = event("ok", NULL);
    int p;
    int64_t o;
    post_one(s, "errs", ok, &p, &o);
    resp r;

    /* 400: bodies that cannot be parsed at all. */
    static const struct {
        const char *ctype, *body, *code;
    } bad[] = {
        {CT_CE, "{\"specversion\":", "InvalidJson"},
        {CT_CE, "", "InvalidJson"},
        {CT_CE, "{} {}", "InvalidJson"},
        {CT_BATCH, "[{\"specversion\":\"1.0\"},", "InvalidJson"},
        {CT_BATCH, "", "InvalidJson"},
        {CT_BATCH, "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/s\",\"type\":\"t\"}",
         "InvalidBatch"},
        {CT_BATCH, "\"not an array\"", "InvalidBatch"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = post(s, "errs", bad[i].ctype, NULL, bad[i].body, SIZE_MAX);
        expect_error(&r, 400, bad[i].code);
        resp_free(&r);
    }

    /* 413: a body over the 10 MiB request limit (also with chunked upload,
     * where no Content-Length warns the server). */
    size_t big = (10u << 20) + 1;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    r = post(s, "errs", CT_NDJSON, NULL, huge, big);
    expect_error(&r, 413, "RequestTooLarge");
    resp_free(&r);
    const char *chunked[] = {"Transfer-Encoding: chunked", NULL};
    r = post(s, "errs", CT_NDJSON, chunked, huge, big);
    expect_error(&r, 413, "RequestTooLarge");
    resp_free(&r);
    free(huge);

    /* 415: not one of the formats and no ce-specversion for binary mode. */
    r = post(s, "errs", "application/json", NULL, ok, SIZE_MAX);
    expect_error(&r, 415, "UnsupportedMediaType");
    resp_free(&r);
    r = post(s, "errs", NULL, NULL, ok, SIZE_MAX);
    expect_error(&r, 415, "UnsupportedMediaType");
    resp_free(&r);
    const char *ce_id_only[] = {"ce-id: 1", NULL};
    r = post(s, "errs", "text/plain", ce_id_only, "x", SIZE_MAX);
    expect_error(&r, 415, "UnsupportedMediaType");
    resp_free(&r);

    /* 400: a bad X-Sluice-Lane refuses the whole request. */
    static const char *const lanes[] = {
        "X-Sluice-Lane: UPPER", "X-Sluice-Lane: has space", "X-Sluice-Lane: under_score",
        "X-Sluice-Lane: 123456789012345678901234567890123", "X-Sluice-Lane: *"};
    for (size_t i = 0; i < sizeof lanes / sizeof *lanes; i++) {
        const char *h[] = {lanes[i], NULL};
        r = post(s, "errs", CT_CE, h, ok, SIZE_MAX);
        expect_error(&r, 400, "InvalidLane");
        resp_free(&r);
    }

    /* Reads: unknown set and partition, offsets past the end, bad parameters. */
    r = get(s, "/v1/sets/nosuchset/events");
    expect_error(&r, 404, "NoSuchSet");
    resp_free(&r);
    r = get(s, "/v1/sets/nosuchset");
    expect_error(&r, 404, "NoSuchSet");
    resp_free(&r);
    r = get(s, "/v1/sets/errs/events?partition=4");
    expect_error(&r, 404, "NoSuchPartition");
    resp_free(&r);
    r = get(s, "/v1/sets/errs/events?partition=-1");
    expect_error(&r, 404, "NoSuchPartition");
    resp_free(&r);
    r = get(s, "/v1/sets/errs/events?partition=%d&offset=%lld", p, (long long)o + 2);
    expect_error(&r, 416, "OffsetOutOfRange");
    resp_free(&r);
    r = get(s, "/v1/sets/errs/events?partition=%d&offset=9223372036854775807", p);
    expect_error(&r, 416, "OffsetOutOfRange");
    resp_free(&r);
    r = get(s, "/v1/sets/errs/events?partition=%d&offset=%lld", p, (long long)o + 1);
    assert_int_equal(r.status, 200); /* the end offset itself is fine: nothing yet */
    resp_free(&r);
    static const char *const params[] = {"offset=abc", "offset=-1", "max=0", "max=10001",
                                         "wait_ms=60001", "from=yesterday", "offset=0&from=end",
                                         "from=2024-13-01T00:00:00Z"};
    for (size_t i = 0; i < sizeof params / sizeof *params; i++) {
        r = get(s, "/v1/sets/errs/events?partition=%d&%s", p, params[i]);
        expect_error(&r, 400, "InvalidParameter");
        resp_free(&r);
    }
    r = get(s, "/v1/sets/errs/events?lane=BAD");
    expect_error(&r, 400, "InvalidLane");
    resp_free(&r);

    /* 404 for unknown paths, 405 for a method a resource does not take. */
    r = get(s, "/v2/sets");
    expect_error(&r, 404, "NotFound");
    resp_free(&r);
    r = get(s, "/v1/sets/errs/events/extra");
    expect_error(&r, 404, "NotFound");
    resp_free(&r);
    static const struct {
        const char *method, *path;
    } m405[] = {{"DELETE", "/v1/sets/errs/events"}, {"PUT", "/v1/sets/errs/events"},
                {"POST", "/v1/sets/errs"}, {"DELETE", "/v1/sets/errs"}};
    for (size_t i = 0; i < sizeof m405 / sizeof *m405; i++) {
        if (http(NULL, s->port, &(call){.method = m405[i].method, .path = m405[i].path}, &r))
            fail_msg("%s %s: %s", m405[i].method, m405[i].path, r.err);
        expect_error(&r, 405, "MethodNotAllowed");
        resp_free(&r);
    }

    /* After all that, the one good event is still the only one. */
    evs e = read_all(s, "errs", p, "*");
    assert_int_equal(e.n, 1);
    assert_string_equal(e.v[0].id, "ok");
    evs_free(&e);
    free(ok);
    s->passed = true;
}

/* 405 also for the fixed resources /healthz and /metrics (they exist: 404
 * would say they do not). */
static void test_wrong_method_on_fixed_paths(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    static const char *const paths[] = {"/healthz", "/metrics", "/v1/sets"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        resp r;
        if (http(NULL, s->port, &(call){.method = "POST", .path = paths[i], .ctype = CT_CE,
                                         .body = "{}", .len = 2}, &r))
            fail_msg("POST %s: %s", paths[i], r.err);
        expect_error(&r, 405, "MethodNotAllowed");
        resp_free(&r);
    }
    s->passed = true;
}

/* Set names are never paths: 400 InvalidSetName however they are spelled. */
static void test_invalid_set_names(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    char *ok = event("x", NULL);
    char long_name[130];
    memset(long_name, 'n', 129);
    long_name[129] = '\0';
    const char *names[] = {"..", "%2E%2E", ".", long_name, "a%20b", "caf%C3%A9", "a%2Fb",
                           "..%2F..%2Fetc"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        resp r = post(s, names[i], CT_CE, NULL, ok, SIZE_MAX);
        if (r.status != 400)
            fail_msg("POST to set \"%s\": want 400 InvalidSetName, got %ld: %s", names[i],
                     r.status, body(&r));
        expect_error(&r, 400, "InvalidSetName");
        resp_free(&r);
        r = get(s, "/v1/sets/%s/events", names[i]);
        expect_error(&r, 400, "InvalidSetName");
        resp_free(&r);
    }
    /* 128 characters is fine, and nothing escaped the data dir. */
    long_name[128] = '\0';
    resp r = post(s, long_name, CT_CE, NULL, ok, SIZE_MAX);
    json_decref(expect_results(&r, 1, 0));
    resp_free(&r);
    r = get(s, "/v1/sets");
    json_t *j = parse_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "sets")), 1);
    json_decref(j);
    resp_free(&r);
    free(ok);
    s->passed = true;
}

static void test_no_auto_create(void **state)
{
    server *s = *state;
    srv_start(s, "--no-auto-create", NULL);
    char *ok = event("x", NULL);
    resp r = post(s, "newset", CT_CE, NULL, ok, SIZE_MAX);
    expect_error(&r, 404, "NoSuchSet");
    resp_free(&r);
    r = post(s, "newset", CT_NDJSON, NULL, ok, SIZE_MAX);
    expect_error(&r, 404, "NoSuchSet");
    resp_free(&r);
    r = get(s, "/v1/sets/newset/events");
    expect_error(&r, 404, "NoSuchSet");
    resp_free(&r);
    r = get(s, "/v1/sets");
    assert_int_equal(r.status, 200);
    json_t *j = parse_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "sets")), 0);
    json_decref(j);
    resp_free(&r);
    free(ok);
    s->passed = true;
}

/* Bad entries fail alone, each with its code, message and index. */
static void test_entry_errors(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    const char *lane_b[] = {"X-Sluice-Lane: b", NULL};
    const char *batch =
        "[{\"specversion\":\"1.0\",\"id\":\"ok0\",\"source\":\"/s\",\"type\":\"t\"},"
        "{\"specversion\":\"0.3\",\"id\":\"1\",\"source\":\"/s\",\"type\":\"t\"},"
        "{\"specversion\":\"1.0\",\"id\":\"2\",\"type\":\"t\"},"
        "{\"specversion\":\"1.0\",\"id\":\"3\",\"source\":\"/s\",\"type\":\"t\",\"lane\":\"Bad_L\"},"
        "{\"specversion\":\"1.0\",\"id\":\"4\",\"source\":\"/s\",\"type\":\"t\",\"lane\":\"a\"},"
        "42,"
        "{\"specversion\":\"1.0\",\"id\":7,\"source\":\"/s\",\"type\":\"t\"},"
        "{\"specversion\":\"1.0\",\"id\":\"8\",\"source\":\"/s\",\"type\":\"t\",\"Upper\":1},"
        "{\"specversion\":\"1.0\",\"id\":\"ok9\",\"source\":\"/s\",\"type\":\"t\",\"lane\":\"b\"}]";
    resp r = post(s, "entries", CT_BATCH, lane_b, batch, SIZE_MAX);
    json_t *a = expect_results(&r, 2, 7);
    expect_entry_error(a, 1, "InvalidEvent", "specversion");
    expect_entry_error(a, 2, "MissingAttribute", "source");
    expect_entry_error(a, 3, "InvalidLane", "Bad_L");
    expect_entry_error(a, 4, "LaneConflict", "\"a\"");
    expect_entry_error(a, 5, "InvalidEvent", NULL);
    expect_entry_error(a, 6, "InvalidEvent", "id");
    expect_entry_error(a, 7, "InvalidEvent", "Upper");
    /* The good ones took the request's lane. */
    for (size_t i = 0; i < 9; i += 8) {
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1&lane=b", (long long)res_off(a, i));
        evs e = read_events(s, "entries", res_part(a, i), q);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, i ? "ok9" : "ok0");
        assert_string_equal(e.v[0].lane, "b");
        evs_free(&e);
    }
    json_decref(a);
    resp_free(&r);

    /* NDJSON: a line that is not JSON, an event over 1 MiB inside a smaller
     * request, and the message of MissingAttribute names every attribute. */
    size_t big = (1u << 20) + 1000;
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"n0\",\"source\":\"/s\",\"type\":\"t\"}\n"
                      "{\"specversion\":\"1.0\",\"id\":\"n1\",\n"
                      "{\"specversion\":\"1.0\",\"id\":\"n2\",\"source\":\"/s\",\"type\":\"t\","
                      "\"data\":\"");
    sl_buf_reserve(&b, big);
    memset(b.data + b.len, 'x', big);
    b.len += big;
    sl_buf_printf(&b, "\"}\n{\"specversion\":\"1.0\",\"source\":\"/s\"}\n"
                      "{\"specversion\":\"1.0\",\"id\":\"n4\",\"source\":\"/s\",\"type\":\"t\"}\n");
    r = post(s, "entries", CT_NDJSON, NULL, (const char *)b.data, b.len);
    a = expect_results(&r, 2, 3);
    expect_entry_error(a, 1, "InvalidJson", NULL);
    expect_entry_error(a, 2, "TooLarge", NULL);
    expect_entry_error(a, 3, "MissingAttribute", "id");
    expect_entry_error(a, 3, "MissingAttribute", "type");
    for (size_t i = 0; i < 5; i += 4) {
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)res_off(a, i));
        evs e = read_events(s, "entries", res_part(a, i), q);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, i ? "n4" : "n0");
        evs_free(&e);
    }
    json_decref(a);
    resp_free(&r);
    sl_buf_free(&b);

    /* Binary mode: a missing attribute is an entry error too. */
    const char *hdrs[] = {"ce-specversion: 1.0", "ce-source: /s", "ce-type: t", NULL};
    r = post(s, "entries", "application/json", hdrs, "{}", SIZE_MAX);
    a = expect_results(&r, 0, 1);
    expect_entry_error(a, 0, "MissingAttribute", "id");
    json_decref(a);
    resp_free(&r);

    /* /metrics counts the rejections by reason. */
    r = get(s, "/metrics");
    assert_true(metric(body(&r), "sluice_events_rejected_total{reason=\"InvalidEvent\"}") >= 4);
    assert_true(metric(body(&r), "sluice_events_rejected_total{reason=\"TooLarge\"}") >= 1);
    assert_true(metric(body(&r), "sluice_events_rejected_total{reason=\"LaneConflict\"}") >= 1);
    resp_free(&r);
    s->passed = true;
}

/* A batch with failures: the rest is stored, byte for byte, at the offsets
 * the answer gave. */
static void test_partial_batch(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    const char *ev[] = {
        "{\"specversion\":\"1.0\",\"id\":\"p0\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-01-01T00:00:00.000Z\",\"partitionkey\":\"k1\",\"data\":{\"n\":0}}",
        "{\"specversion\":\"1.0\",\"source\":\"/itest\",\"type\":\"t\"}",
        "{\"specversion\":\"1.0\",\"id\":\"p2\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-01-01T00:00:02.000Z\",\"subject\":\"s\",\"data\":[1,\"two\",null]}",
        "[]",
        "{\"specversion\":\"1.0\",\"id\":\"p4\",\"source\":\"/itest\",\"type\":\"t\","
        "\"data\":\"no time given\"}",
        "{\"specversion\":\"1.0\",\"id\":\"p5\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"not a time\"}",
        "{\"specversion\":\"1.0\",\"id\":\"p6\",\"source\":\"/itest\",\"type\":\"t\","
        "\"time\":\"2024-01-01T00:00:06.000Z\",\"ext1\":true,\"ext2\":-5}"};
    size_t n = sizeof ev / sizeof *ev;
    sl_buf b = SL_BUF_INIT;
    for (size_t i = 0; i < n; i++)
        sl_buf_printf(&b, "%s%s", i ? "," : "[", ev[i]);
    sl_buf_printf(&b, "]");
    resp r = post(s, "partial", CT_BATCH, NULL, (const char *)b.data, b.len);
    json_t *a = expect_results(&r, 4, 3);
    expect_entry_error(a, 1, "MissingAttribute", "id");
    expect_entry_error(a, 3, "InvalidEvent", NULL);
    expect_entry_error(a, 5, "InvalidEvent", "time");
    static const size_t good[] = {0, 2, 6};
    for (size_t k = 0; k < 3; k++) {
        size_t i = good[k];
        char *want = decorated(ev[i], "partial", res_part(a, i), res_off(a, i));
        expect_stored(s, "partial", res_part(a, i), res_off(a, i), want);
        free(want);
    }
    /* Without a time, the stored event is the posted one plus "time" (now). */
    char q[64];
    snprintf(q, sizeof q, "offset=%lld&max=1", (long long)res_off(a, 4));
    evs e = read_events(s, "partial", res_part(a, 4), q);
    assert_int_equal(e.n, 1);
    size_t plen = strlen(ev[4]) - 1;
    if (strncmp(e.v[0].text, ev[4], plen) != 0 || strncmp(e.v[0].text + plen, ",\"time\":\"", 9))
        fail_msg("stored %s, want %s plus time", e.v[0].text, ev[4]);
    evs_free(&e);
    json_decref(a);
    resp_free(&r);
    sl_buf_free(&b);
    s->passed = true;
}

/* One GET in a thread of its own (a long-poll to wait on). */
typedef struct poller {
    pthread_t thread;
    int port;
    char path[256];
    resp r;
    double done; /* mono() when the answer was complete */
    _Atomic bool finished;
} poller;

static void *poller_main(void *arg)
{
    poller *pl = arg;
    http(NULL, pl->port, &(call){.path = pl->path}, &pl->r);
    pl->done = mono();
    atomic_store(&pl->finished, true);
    return NULL;
}

/* ---- lanes and partitioning --------------------------------------------------- */

static void test_lane_header(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    char *base = event("base0", ",\"partitionkey\":\"lk\"");
    int p;
    int64_t o;
    post_one(s, "lanes", base, &p, &o);
    const char *fx[] = {"X-Sluice-Lane: feature-x", NULL};
    const char *nd = "{\"specversion\":\"1.0\",\"id\":\"fx0\",\"source\":\"/s\",\"type\":\"t\","
                     "\"partitionkey\":\"lk\"}\n"
                     "{\"specversion\":\"1.0\",\"id\":\"fx1\",\"source\":\"/s\",\"type\":\"t\","
                     "\"partitionkey\":\"lk\",\"lane\":\"\"}\n";
    resp r = post(s, "lanes", CT_NDJSON, fx, nd, SIZE_MAX);
    json_t *a = expect_results(&r, 2, 0);
    assert_int_equal(res_part(a, 0), p);
    json_decref(a);
    resp_free(&r);
    free(base);
    base = event("base1", ",\"partitionkey\":\"lk\"");
    post_one(s, "lanes", base, &p, &o);
    free(base);

    /* The default reader sees the base lane only, and next_offset moves past
     * the lane's events. */
    evs e = read_events(s, "lanes", p, "from=beginning");
    assert_int_equal(e.n, 2);
    assert_string_equal(e.v[0].id, "base0");
    assert_string_equal(e.v[1].id, "base1");
    assert_int_equal(e.next, 4);
    evs_free(&e);
    e = read_events(s, "lanes", p, "offset=1");
    assert_int_equal(e.n, 1);
    assert_string_equal(e.v[0].id, "base1");
    evs_free(&e);
    e = read_events(s, "lanes", p, "lane=feature-x");
    assert_int_equal(e.n, 2);
    assert_string_equal(e.v[0].id, "fx0");
    assert_string_equal(e.v[1].id, "fx1");
    assert_string_equal(e.v[0].lane, "feature-x");
    assert_string_equal(e.v[1].lane, "feature-x");
    evs_free(&e);
    e = read_events(s, "lanes", p, "lane=*");
    assert_int_equal(e.n, 4);
    static const char *const order[] = {"base0", "fx0", "fx1", "base1"};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(e.v[i].id, order[i]);
        assert_int_equal(e.v[i].offset, (int64_t)i);
    }
    evs_free(&e);
    e = read_events(s, "lanes", p, "lane=other");
    assert_int_equal(e.n, 0);
    assert_int_equal(e.next, 4);
    evs_free(&e);

    /* A long-poll on the lane is not answered by a base-lane event, only by
     * one of its own lane. */
    poller pl = {.port = s->port};
    snprintf(pl.path, sizeof pl.path,
             "/v1/sets/lanes/events?partition=%d&offset=4&lane=feature-x&wait_ms=8000", p);
    double t0 = mono();
    assert_int_equal(pthread_create(&pl.thread, NULL, poller_main, &pl), 0);
    sleep_ms(300);
    base = event("base2", ",\"partitionkey\":\"lk\"");
    post_one(s, "lanes", base, &p, &o);
    free(base);
    sleep_ms(300);
    bool early = atomic_load(&pl.finished);
    char *fx2 = event("fx2", ",\"partitionkey\":\"lk\"");
    r = post(s, "lanes", CT_CE, fx, fx2, SIZE_MAX);
    json_decref(expect_results(&r, 1, 0));
    resp_free(&r);
    free(fx2);
    pthread_join(pl.thread, NULL);
    if (early)
        fail_msg("the lane long-poll was answered by a base-lane event: %s", body(&pl.r));
    if (pl.r.status != 200 || !parse_events(body(&pl.r), pl.r.body.len, &e))
        fail_msg("lane long-poll answered %ld: %s", pl.r.status, body(&pl.r));
    assert_int_equal(e.n, 1);
    assert_string_equal(e.v[0].id, "fx2");
    assert_int_equal(e.v[0].offset, 5);
    assert_true(pl.done - t0 < 5);
    evs_free(&e);
    resp_free(&pl.r);
    s->passed = true;
}

static void test_partitioning(void **state)
{
    server *s = *state;
    srv_start(s, NULL); /* 4 partitions */
    /* Same partitionkey, same partition, across requests. */
    int first = -1;
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "pk%d", i);
        char *ev = event(id, ",\"partitionkey\":\"user-42\",\"subject\":\"other\"");
        int p;
        int64_t o;
        post_one(s, "parts", ev, &p, &o);
        free(ev);
        if (first < 0)
            first = p;
        assert_int_equal(p, first);
    }
    /* Without partitionkey the subject decides, exactly as the same string
     * given as partitionkey would. */
    bool used[4] = {false};
    for (int i = 0; i < 12; i++) {
        char id[16], key[64];
        snprintf(id, sizeof id, "sub%d", i);
        snprintf(key, sizeof key, ",\"subject\":\"order-%d\"", i);
        sl_buf b = SL_BUF_INIT;
        char *e1 = event(id, key);
        snprintf(key, sizeof key, ",\"partitionkey\":\"order-%d\"", i);
        char *e2 = event(id, key);
        sl_buf_printf(&b, "%s\n%s\n%s\n", e1, e2, e1);
        resp r = post(s, "parts", CT_NDJSON, NULL, (const char *)b.data, b.len);
        json_t *a = expect_results(&r, 3, 0);
        if (res_part(a, 0) != res_part(a, 1) || res_part(a, 0) != res_part(a, 2))
            fail_msg("subject order-%d went to %d, %d, %d", i, res_part(a, 0), res_part(a, 1),
                     res_part(a, 2));
        used[res_part(a, 0)] = true;
        json_decref(a);
        resp_free(&r);
        sl_buf_free(&b);
        free(e1);
        free(e2);
    }
    int nused = used[0] + used[1] + used[2] + used[3];
    assert_true(nused >= 2); /* 12 keys on one partition: 4^-11 */
    /* No key: round robin, so 40 events fill 4 partitions evenly. */
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 40; i++)
        sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"rr%d\",\"source\":\"/s\","
                      "\"type\":\"t\"}\n", i);
    resp r = post(s, "parts", CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_t *a = expect_results(&r, 40, 0);
    int count[4] = {0};
    for (size_t i = 0; i < 40; i++)
        count[res_part(a, i)]++;
    for (int p = 0; p < 4; p++)
        if (count[p] != 10)
            fail_msg("round robin put %d, %d, %d, %d events on the 4 partitions", count[0],
                     count[1], count[2], count[3]);
    json_decref(a);
    resp_free(&r);
    sl_buf_free(&b);
    s->passed = true;
}

/* ---- long-polling ------------------------------------------------------------- */

/* A GET waiting on a partition answers within 50 ms of a publish to it
 * (measured from the publisher's answer to the reader's). */
static void test_long_poll_wakes(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    char *ev = event("first", ",\"partitionkey\":\"lp\"");
    int p;
    int64_t o;
    post_one(s, "lp", ev, &p, &o);
    free(ev);
    double best = 1e9;
    for (int attempt = 0; attempt < 3 && best >= 0.050; attempt++) {
        poller pl = {.port = s->port};
        snprintf(pl.path, sizeof pl.path,
                 "/v1/sets/lp/events?partition=%d&from=end&wait_ms=5000", p);
        double t0 = mono();
        assert_int_equal(pthread_create(&pl.thread, NULL, poller_main, &pl), 0);
        sleep_ms(300); /* let the GET reach the server and be suspended */
        char id[16];
        snprintf(id, sizeof id, "wake%d", attempt);
        ev = event(id, ",\"partitionkey\":\"lp\"");
        int p2;
        post_one(s, "lp", ev, &p2, &o);
        double posted = mono();
        free(ev);
        pthread_join(pl.thread, NULL);
        assert_int_equal(p2, p);
        evs e = {0};
        if (pl.r.status != 200 || !parse_events(body(&pl.r), pl.r.body.len, &e))
            fail_msg("long-poll answered %ld: %s %s", pl.r.status, body(&pl.r), pl.r.err);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, id);
        assert_int_equal(e.next, o + 1);
        /* It did wait (was not answered before the publish). */
        assert_true(pl.done - t0 >= 0.25);
        double lag = pl.done - posted;
        printf("long-poll attempt %d: answered %.1f ms after the publish's answer\n", attempt,
               lag * 1e3);
        best = lag < best ? lag : best;
        evs_free(&e);
        resp_free(&pl.r);
    }
    if (best >= 0.050)
        fail_msg("long-poll woke %.1f ms after the publish (best of 3), want < 50 ms",
                 best * 1e3);
    s->passed = true;
}

/* With nothing published, a long-poll answers an empty list after wait_ms. */
static void test_long_poll_timeout(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    char *ev = event("only", ",\"partitionkey\":\"to\"");
    int p;
    int64_t o;
    post_one(s, "lpt", ev, &p, &o);
    free(ev);
    double t0 = mono();
    resp r = get(s, "/v1/sets/lpt/events?partition=%d&offset=%lld&wait_ms=1000", p,
                 (long long)o + 1);
    double took = mono() - t0;
    evs e = {0};
    assert_int_equal(r.status, 200);
    assert_true(parse_events(body(&r), r.body.len, &e));
    assert_int_equal(e.n, 0);
    assert_int_equal(e.next, o + 1);
    if (took < 0.9 || took > 5)
        fail_msg("wait_ms=1000 answered after %.3f s", took);
    resp_free(&r);
    /* A lane without events times out too (its reader is at the end). */
    t0 = mono();
    r = get(s, "/v1/sets/lpt/events?partition=%d&lane=feature&wait_ms=600", p);
    took = mono() - t0;
    evs_free(&e);
    assert_true(parse_events(body(&r), r.body.len, &e));
    assert_int_equal(e.n, 0);
    if (took < 0.54 || took > 5)
        fail_msg("wait_ms=600 answered after %.3f s", took);
    resp_free(&r);
    evs_free(&e);
    s->passed = true;
}

/* Many concurrent long-polls on one curl multi handle. */
typedef struct polls {
    CURLM *m;
    int n, running;
    CURL **h;
    resp *r;
    struct curl_slist **hl;
} polls;

/* Starts n GETs from=end on partitions i % nparts of set, waiting wait_ms,
 * and drives them for a second; asserts they are all still waiting. */
static void polls_start(polls *pl, int port, int n, const char *set, int nparts, int wait_ms)
{
    pl->m = curl_multi_init();
    pl->n = pl->running = n;
    pl->h = calloc((size_t)n, sizeof *pl->h);
    pl->r = calloc((size_t)n, sizeof *pl->r);
    pl->hl = calloc((size_t)n, sizeof *pl->hl);
    for (int i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "/v1/sets/%s/events?partition=%d&from=end&wait_ms=%d", set,
                 i % nparts, wait_ms);
        pl->h[i] = curl_easy_init();
        http_prepare(pl->h[i], port, &(call){.path = path, .timeout_ms = wait_ms + 15000L},
                     &pl->r[i], &pl->hl[i]);
        curl_easy_setopt(pl->h[i], CURLOPT_PRIVATE, (void *)(intptr_t)i);
        curl_multi_add_handle(pl->m, pl->h[i]);
    }
    for (double end = mono() + 1.0; mono() < end;) {
        curl_multi_perform(pl->m, &pl->running);
        curl_multi_poll(pl->m, NULL, 0, 20, NULL);
    }
    if (pl->running != n)
        fail_msg("%d of %d long-polls were answered before anything was published",
                 n - pl->running, n);
}

/* Drives the polls until all are answered or secs pass; returns the time taken. */
static double polls_wait(polls *pl, double secs)
{
    double t0 = mono();
    while (pl->running && mono() - t0 < secs) {
        curl_multi_perform(pl->m, &pl->running);
        curl_multi_poll(pl->m, NULL, 0, 20, NULL);
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(pl->m, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        char *priv;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
        http_finish(msg->easy_handle, msg->data.result, &pl->r[(intptr_t)priv]);
    }
    return mono() - t0;
}

/* How many polls were answered 200 with want events; *problem describes
 * the first that was not. */
static int polls_count(polls *pl, size_t want, char *problem, size_t size)
{
    int good = 0;
    problem[0] = '\0';
    for (int i = 0; i < pl->n; i++) {
        evs e = {0};
        const resp *r = &pl->r[i];
        if (r->status == 200 && parse_events(body(r), r->body.len, &e) && e.n == want)
            good++;
        else if (!problem[0])
            snprintf(problem, size, "poll %d: %ld %s %.200s", i, r->status,
                     r->status ? "" : "(no answer)", body(r));
        evs_free(&e);
    }
    return good;
}

static void polls_free(polls *pl)
{
    for (int i = 0; i < pl->n; i++) {
        curl_multi_remove_handle(pl->m, pl->h[i]);
        curl_easy_cleanup(pl->h[i]);
        curl_slist_free_all(pl->hl[i]);
        resp_free(&pl->r[i]);
    }
    free(pl->h);
    free(pl->r);
    free(pl->hl);
    curl_multi_cleanup(pl->m);
}

/* 200 waiting consumers hold no threads: /healthz and publishes are still
 * answered at once, and one publish per partition wakes them all. */
static void test_many_long_polls(void **state)
{
    server *s = *state;
    srv_start(s, NULL); /* 4 partitions */
    char *ev = event("seed", NULL);
    int p;
    int64_t o;
    post_one(s, "many", ev, &p, &o);
    free(ev);
    enum { N = 200 };
    polls pl;
    polls_start(&pl, s->port, N, "many", 4, 8000);
    /* The server is still answering others at once. */
    double worst = 0;
    for (int i = 0; i < 5; i++) {
        resp hz;
        assert_int_equal(http(NULL, s->port, &(call){.path = "/healthz"}, &hz), 0);
        assert_int_equal(hz.status, 200);
        worst = hz.secs > worst ? hz.secs : worst;
        resp_free(&hz);
    }
    if (worst > 0.5)
        fail_msg("/healthz took %.0f ms with %d long-polls waiting", worst * 1e3, N);
    /* Four keyless events: one per partition (round robin). */
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 4; i++)
        sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"wake%d\",\"source\":\"/s\","
                      "\"type\":\"t\"}\n", i);
    resp pr = post(s, "many", CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_decref(expect_results(&pr, 4, 0));
    resp_free(&pr);
    sl_buf_free(&b);
    double took = polls_wait(&pl, 6);
    char problem[512];
    int woken = polls_count(&pl, 1, problem, sizeof problem);
    polls_free(&pl);
    if (woken != N)
        fail_msg("%d of %d long-polls answered with the new event within %.2f s; %s", woken,
                 N, took, problem);
    if (took > 4)
        fail_msg("waking %d long-polls took %.2f s (their deadline was 8 s)", N, took);
    s->passed = true;
}

/* SIGTERM while consumers wait: each gets its (empty) answer, and the
 * server exits 0 at once instead of waiting out their 30 s. */
static void test_sigterm_answers_long_polls(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    char *ev = event("seed", NULL);
    int p;
    int64_t o;
    post_one(s, "bye", ev, &p, &o);
    free(ev);
    enum { N = 50 };
    polls pl;
    polls_start(&pl, s->port, N, "bye", 4, 30000);
    double t0 = mono();
    int st = srv_stop(s, SIGTERM, 20);
    double took = mono() - t0;
    polls_wait(&pl, 5);
    char problem[512];
    int answered = polls_count(&pl, 0, problem, sizeof problem);
    polls_free(&pl);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("SIGTERM with %d long-polls waiting: wait status %d, want exit 0", N, st);
    if (took > 5)
        fail_msg("SIGTERM with %d long-polls waiting took %.2f s to exit", N, took);
    if (answered != N)
        fail_msg("%d of %d waiting long-polls got an answer at shutdown; %s", answered, N,
                 problem);
    s->passed = true;
}

/* from=beginning|end|RFC 3339 time. */
static void test_from(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    const char *nd =
        "{\"specversion\":\"1.0\",\"id\":\"t2020\",\"source\":\"/s\",\"type\":\"t\","
        "\"partitionkey\":\"tk\",\"time\":\"2020-01-01T00:00:00Z\"}\n"
        "{\"specversion\":\"1.0\",\"id\":\"t2021\",\"source\":\"/s\",\"type\":\"t\","
        "\"partitionkey\":\"tk\",\"time\":\"2021-01-01T00:00:00Z\"}\n"
        "{\"specversion\":\"1.0\",\"id\":\"t2022\",\"source\":\"/s\",\"type\":\"t\","
        "\"partitionkey\":\"tk\",\"time\":\"2022-01-01T00:00:00.500+02:00\"}\n";
    resp r = post(s, "from", CT_NDJSON, NULL, nd, SIZE_MAX);
    json_t *a = expect_results(&r, 3, 0);
    int p = res_part(a, 0);
    assert_int_equal(res_part(a, 2), p);
    json_decref(a);
    resp_free(&r);
    static const struct {
        const char *query;
        const char *first; /* id of the first event, NULL for none */
        size_t n;
    } cases[] = {
        {"", "t2020", 3},
        {"from=beginning", "t2020", 3},
        {"from=end", NULL, 0},
        {"from=2019-12-31T23:59:59.999Z", "t2020", 3},
        {"from=2020-01-01T00:00:00Z", "t2020", 3},
        {"from=2020-01-01T00:00:00.001Z", "t2021", 2},
        {"from=2021-01-01T01:00:00%2B01:00", "t2021", 2}, /* = 2021-01-01T00:00Z */
        {"from=2021-06-01T00:00:00Z", "t2022", 1},
        {"from=2021-12-31T22:00:00.500Z", "t2022", 1},
        {"from=2021-12-31T22:00:00.501Z", NULL, 0},
        {"from=2030-01-01T00:00:00Z", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        evs e = read_events(s, "from", p, cases[i].query);
        if (e.n != cases[i].n || (e.n && strcmp(e.v[0].id, cases[i].first) != 0))
            fail_msg("%s: %zu events starting with %s, want %zu starting with %s",
                     cases[i].query, e.n, e.n ? e.v[0].id : "-", cases[i].n,
                     cases[i].first ? cases[i].first : "-");
        if (!e.n)
            assert_int_equal(e.next, 3);
        evs_free(&e);
    }
    s->passed = true;
}

/* ---- listings and metrics --------------------------------------------------------- */

static void test_sets_and_metrics(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    resp r = get(s, "/v1/sets");
    assert_int_equal(r.status, 200);
    assert_string_equal(body(&r), "{\"sets\":[]}\n");
    resp_free(&r);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 5; i++)
        sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"m%d\",\"source\":\"/s\","
                      "\"type\":\"t\"}\n", i);
    sl_buf_printf(&b, "{\"bad\":1}\n");
    r = post(s, "metrics-a", CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_decref(expect_results(&r, 5, 1));
    resp_free(&r);
    sl_buf_free(&b);
    char *ev = event("m5", NULL);
    int p;
    int64_t o;
    post_one(s, "metrics-a", ev, &p, &o);
    post_one(s, "metrics-a", ev, &p, &o);
    post_one(s, "metrics-b", ev, &p, &o);
    free(ev);
    r = post(s, "metrics-a", CT_CE, NULL, "{", SIZE_MAX);
    resp_free(&r);

    r = get(s, "/v1/sets");
    json_t *j = parse_json(&r);
    json_t *sets = json_object_get(j, "sets");
    assert_int_equal(json_array_size(sets), 2);
    json_t *sa = json_array_get(sets, 0);
    assert_string_equal(json_string_value(json_object_get(sa, "name")), "metrics-a");
    assert_int_equal(json_integer_value(json_object_get(sa, "partitions")), 4);
    assert_string_equal(json_string_value(json_object_get(sa, "ack")), "durable");
    assert_string_equal(json_string_value(json_object_get(sa, "compression")), "none");
    assert_int_equal(json_integer_value(json_object_get(sa, "events")), 7);
    assert_true(json_integer_value(json_object_get(sa, "bytes")) > 7 * 60);
    assert_int_equal(json_integer_value(json_object_get(sa, "max_event_bytes")), 1 << 20);
    assert_true(json_is_boolean(json_object_get(sa, "generate_ids")));
    assert_true(json_is_integer(json_object_get(sa, "retention_ms")));
    assert_true(json_is_integer(json_object_get(sa, "retention_bytes")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(sets, 1), "name")),
                        "metrics-b");
    json_decref(j);
    resp_free(&r);

    r = get(s, "/v1/sets/metrics-a");
    assert_int_equal(r.status, 200);
    j = parse_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "name")), "metrics-a");
    json_t *pi = json_object_get(j, "partition_info");
    assert_int_equal(json_array_size(pi), 4);
    json_int_t events = 0, bytes = 0;
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_array_get(pi, i);
        assert_int_equal(json_integer_value(json_object_get(e, "partition")), (json_int_t)i);
        json_int_t start = json_integer_value(json_object_get(e, "start_offset"));
        json_int_t end = json_integer_value(json_object_get(e, "end_offset"));
        assert_int_equal(start, 0);
        assert_true(end >= start);
        events += end - start;
        bytes += json_integer_value(json_object_get(e, "bytes"));
        assert_true(json_integer_value(json_object_get(e, "segments")) >= 1);
        /* The listing agrees with what a read says. */
        evs got = read_all(s, "metrics-a", (int)i, "*");
        assert_int_equal(got.n, (size_t)end);
        evs_free(&got);
    }
    assert_int_equal(events, 7);
    assert_int_equal(bytes, json_integer_value(json_object_get(j, "bytes")));
    assert_int_equal(json_integer_value(json_object_get(j, "events")), 7);
    assert_true(json_is_integer(json_object_get(j, "buffer_bytes")));
    assert_true(json_is_integer(json_object_get(j, "linger_ms")));
    json_decref(j);
    resp_free(&r);

    r = get(s, "/metrics");
    assert_int_equal(r.status, 200);
    assert_true(strncmp(r.ctype, "text/plain", 10) == 0);
    const char *t = body(&r);
    assert_true(metric(t, "sluice_events_in_total{set=\"metrics-a\"}") == 7);
    assert_true(metric(t, "sluice_events_in_total{set=\"metrics-b\"}") == 1);
    assert_true(metric(t, "sluice_bytes_in_total{set=\"metrics-a\"}") > 0);
    assert_true(metric(t, "sluice_events_rejected_total{reason=\"MissingAttribute\"}") == 1);
    assert_true(metric(t, "sluice_http_requests_total{code=\"200\"}") >= 8);
    assert_true(metric(t, "sluice_http_requests_total{code=\"400\"}") == 1);
    assert_non_null(strstr(t, "# TYPE sluice_events_in_total counter"));
    assert_non_null(strstr(t, "# TYPE sluice_http_requests_total counter"));
    double parts = 0;
    for (int i = 0; i < 4; i++) {
        char name[128];
        snprintf(name, sizeof name, "sluice_partition_end_offset{set=\"metrics-a\","
                 "partition=\"%d\"}", i);
        double v = metric(t, name);
        assert_true(v >= 0);
        parts += v;
    }
    assert_true(parts == 7);
    resp_free(&r);
    s->passed = true;
}

/* ---- restarts and crashes ----------------------------------------------------- */

static int cmp_set_name(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
                  json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

/* The set names of GET /v1/sets, in the order listed, one per line. */
static char *set_names(server *s)
{
    resp r = get(s, "/v1/sets");
    json_t *j = parse_json(&r);
    sl_buf b = SL_BUF_INIT;
    json_t *sets = json_object_get(j, "sets");
    for (size_t i = 0; i < json_array_size(sets); i++)
        sl_buf_printf(&b, "%s\n", json_string_value(json_object_get(json_array_get(sets, i),
                                                                      "name")));
    sl_buf_append(&b, "", 1);
    json_decref(j);
    resp_free(&r);
    return (char *)b.data;
}

/* Everything a client can see of the server's data, as one string (the
 * listing of sets sorted by name: its order is checked on its own). */
static char *snapshot(server *s, const char *const *sets, int nparts)
{
    sl_buf b = SL_BUF_INIT;
    resp r = get(s, "/v1/sets");
    json_t *j = parse_json(&r);
    json_t *list = json_object_get(j, "sets");
    size_t n = json_array_size(list);
    json_t **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(list, i);
    qsort(v, n, sizeof *v, cmp_set_name);
    for (size_t i = 0; i < n; i++) {
        char *text = json_dumps(v[i], JSON_COMPACT | JSON_SORT_KEYS);
        sl_buf_printf(&b, "%s\n", text);
        free(text);
    }
    free(v);
    json_decref(j);
    resp_free(&r);
    for (size_t i = 0; sets[i]; i++) {
        r = get(s, "/v1/sets/%s", sets[i]);
        assert_int_equal(r.status, 200);
        sl_buf_printf(&b, "%s", body(&r));
        resp_free(&r);
        for (int p = 0; p < nparts; p++) {
            evs e = read_all(s, sets[i], p, "*");
            for (size_t k = 0; k < e.n; k++)
                sl_buf_printf(&b, "%s\n", e.v[k].text);
            evs_free(&e);
        }
    }
    sl_buf_append(&b, "", 1);
    return (char *)b.data;
}

static void test_restart_keeps_everything(void **state)
{
    server *s = *state;
    srv_start(s, "--partitions", "3", NULL);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 300; i++)
        sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"k%d\",\"source\":\"/s\","
                      "\"type\":\"t\",\"partitionkey\":\"key%d\",\"data\":{\"i\":%d}}\n", i,
                      i % 7, i);
    resp r = post(s, "keep-a", CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_decref(expect_results(&r, 300, 0));
    resp_free(&r);
    const char *blue[] = {"X-Sluice-Lane: blue", NULL};
    r = post(s, "keep-a", CT_NDJSON, blue, (const char *)b.data, b.len / 10);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    const char *hdrs[] = {"ce-specversion: 1.0", "ce-id: bin", "ce-source: /s", "ce-type: t",
                          NULL};
    r = post(s, "keep-b", "application/octet-stream", hdrs, "\x01\x02", 2);
    json_decref(expect_results(&r, 1, 0));
    resp_free(&r);
    sl_buf_free(&b);
    static const char *const sets[] = {"keep-a", "keep-b", NULL};
    char *before = snapshot(s, sets, 3);

    int st = srv_stop(s, SIGTERM, 15);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("SIGTERM: the server did not exit 0 (wait status %d)", st);
    assert_true(log_contains(s, "stopped cleanly"));
    srv_restart(s);
    char *after = snapshot(s, sets, 3);
    if (strcmp(before, after) != 0)
        fail_msg("after a restart the server shows\n%.2000s\ninstead of\n%.2000s", after,
                 before);
    /* Offsets go on where they stopped. */
    r = get(s, "/v1/sets/keep-b");
    json_t *j = parse_json(&r);
    json_t *pi = json_object_get(j, "partition_info");
    resp_free(&r);
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "again%d", i);
        char *ev = event(id, NULL);
        int p;
        int64_t o;
        post_one(s, "keep-b", ev, &p, &o);
        free(ev);
        json_t *e = json_array_get(pi, (size_t)p);
        json_int_t end = json_integer_value(json_object_get(e, "end_offset"));
        assert_int_equal(o, end);
        json_object_set_new(e, "end_offset", json_integer(end + 1));
    }
    json_decref(j);
    /* And a second restart after that still has everything. */
    free(before);
    before = snapshot(s, sets, 3);
    st = srv_stop(s, SIGTERM, 15);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    srv_restart(s);
    free(after);
    after = snapshot(s, sets, 3);
    assert_string_equal(before, after);
    free(before);
    free(after);
    s->passed = true;
}

/* GET /v1/sets lists sets in creation order (sl_sets_each's contract), and
 * a restart must not reorder the list. */
static void test_set_order_survives_restart(void **state)
{
    server *s = *state;
    srv_start(s, NULL);
    /* Created in this order; listed in name (byte) order, before and after. */
    static const char *const names[] = {"zeta", "alpha", "mid", "beta", "omega", "b2", "a1",
                                        "x-9", "k.k", "c_c"};
    static const char sorted[] = "a1\nalpha\nb2\nbeta\nc_c\nk.k\nmid\nomega\nx-9\nzeta\n";
    char *ev = event("o", NULL);
    sl_buf want = SL_BUF_INIT;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        int p;
        int64_t o;
        post_one(s, names[i], ev, &p, &o);
    }
    sl_buf_append(&want, sorted, sizeof sorted - 1);
    sl_buf_append(&want, "", 1);
    free(ev);
    char *before = set_names(s);
    assert_string_equal(before, (const char *)want.data);
    assert_int_equal(WEXITSTATUS(srv_stop(s, SIGTERM, 15)), 0);
    srv_restart(s);
    char *after = set_names(s);
    if (strcmp(before, after) != 0)
        fail_msg("GET /v1/sets listed\n%swhen created, and after a restart\n%s", before, after);
    free(before);
    free(after);
    sl_buf_free(&want);
    s->passed = true;
}

/* SIGTERM while writers post with ack=buffer: every acknowledged event is
 * on disk after the restart, at its acknowledged offset. */
static void test_sigterm_under_load(void **state)
{
    server *s = *state;
    srv_start(s, "--ack", "buffer", NULL); /* 4 partitions */
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    _Atomic bool stop = false;
    writer w[3] = {{.batch = 50, .pad = 200}, {.batch = 50, .pad = 200},
                   {.batch = 50, .pad = 200}};
    writers_start(w, 3, s->port, "term", "term", &stop, &a);
    double t0 = mono();
    while (acks_count(&a) < 2000 && mono() - t0 < 10)
        sleep_ms(10);
    sleep_ms(100 + rand() % 300);
    size_t at_signal = acks_count(&a);
    int st = srv_stop(s, SIGTERM, 20);
    atomic_store(&stop, true);
    writers_join(w, 3);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("SIGTERM under load: wait status %d, want exit 0", st);
    assert_true(at_signal > 0);
    srv_restart(s);
    size_t stored = check_acks(s, "term", 4, &a);
    printf("SIGTERM under load: %zu acknowledged (%zu at the signal), %zu stored, "
           "%d+%d+%d refused\n", a.n, at_signal, stored, w[0].refused, w[1].refused,
           w[2].refused);
    assert_true(stored >= a.n);
    free(a.v);
    s->passed = true;
}

/* ack=durable and SIGKILL at a random moment, again and again: every
 * acknowledged event survives every crash at its acknowledged offset. */
static void test_sigkill_durable_loop(void **state)
{
    server *s = *state;
    int cycles = g_soak ? 50 : 10;
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    srv_start(s, "--ack", "durable", "--partitions", "2", NULL);
    for (int c = 0; c < cycles; c++) {
        if (c)
            srv_restart(s);
        if (a.n) /* the set exists once something was acknowledged */
            assert_true(check_acks(s, "crash", 2, &a) >= a.n);
        _Atomic bool stop = false;
        writer w[2] = {{.batch = 20, .pad = 100}, {.batch = 5, .pad = 400}};
        char tag[16];
        snprintf(tag, sizeof tag, "c%d", c);
        size_t before = acks_count(&a);
        writers_start(w, 2, s->port, "crash", tag, &stop, &a);
        double t0 = mono();
        while (acks_count(&a) == before && mono() - t0 < 10)
            sleep_ms(2);
        sleep_ms(rand() % 250);
        srv_stop(s, SIGKILL, 5);
        atomic_store(&stop, true);
        writers_join(w, 2);
        if (acks_count(&a) == before)
            fail_msg("cycle %d: no publish was acknowledged", c);
    }
    srv_restart(s);
    size_t stored = check_acks(s, "crash", 2, &a);
    printf("SIGKILL loop: %d cycles, %zu acknowledged events all present (%zu stored)\n",
           cycles, a.n, stored);
    free(a.v);
    s->passed = true;
}

/* ---- back-pressure ------------------------------------------------------------- */

/* Waits up to secs until set holds want events: ack=buffer answers before
 * the write, so a read right after the answer may not see them yet. */
static void wait_stored(server *s, const char *set, json_int_t want, double secs)
{
    json_int_t have = -1;
    for (double end = mono() + secs; mono() < end; sleep_ms(50)) {
        resp r = get(s, "/v1/sets/%s", set);
        json_t *j = json_loads(body(&r), 0, NULL);
        have = json_integer_value(json_object_get(j, "events"));
        json_decref(j);
        resp_free(&r);
        if (have >= want)
            return;
    }
    fail_msg("set %s holds %lld events after %.0f s, want %lld", set, (long long)have, secs,
             (long long)want);
}

static void test_backpressure(void **state)
{
    server *s = *state;
    /* A 64 KiB buffer that the writer empties only after 1.5 s. */
    srv_start(s, "--ack", "buffer", "--partitions", "1", "--buffer-bytes", "64KiB",
              "--linger-ms", "1500", NULL);
    sl_buf b[3] = {SL_BUF_INIT, SL_BUF_INIT, SL_BUF_INIT};
    char pad[2049];
    memset(pad, 'q', 2048);
    pad[2048] = '\0';
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 12; i++) /* ~27 KiB per request */
            sl_buf_printf(&b[k], "{\"specversion\":\"1.0\",\"id\":\"bp%d-%d\",\"source\":\"/s\","
                          "\"type\":\"t\",\"data\":\"%s\"}\n", k, i, pad);
    resp r = post(s, "bp", CT_NDJSON, NULL, (const char *)b[0].data, b[0].len);
    json_decref(expect_results(&r, 12, 0));
    resp_free(&r);
    r = post(s, "bp", CT_NDJSON, NULL, (const char *)b[1].data, b[1].len);
    json_decref(expect_results(&r, 12, 0));
    resp_free(&r);
    /* The third does not fit: 503 with Retry-After, nothing stored. */
    r = post(s, "bp", CT_NDJSON, NULL, (const char *)b[2].data, b[2].len);
    expect_error(&r, 503, "Backpressure");
    if (atoi(r.retry_after) < 1)
        fail_msg("503 without a usable Retry-After (\"%s\")", r.retry_after);
    resp_free(&r);
    /* A request larger than the whole buffer could never fit: 413. */
    sl_buf all = SL_BUF_INIT;
    for (int k = 0; k < 3; k++)
        sl_buf_append(&all, b[k].data, b[k].len);
    r = post(s, "bp", CT_NDJSON, NULL, (const char *)all.data, all.len);
    expect_error(&r, 413, "RequestTooLarge");
    resp_free(&r);
    sl_buf_free(&all);
    /* Recovery: retried as Retry-After says, it goes in once the buffer drains. */
    int tries = 0;
    for (; tries < 10; tries++) {
        r = post(s, "bp", CT_NDJSON, NULL, (const char *)b[2].data, b[2].len);
        long st = r.status;
        if (st == 200)
            json_decref(expect_results(&r, 12, 0));
        else
            expect_error(&r, 503, "Backpressure");
        int wait = atoi(r.retry_after);
        resp_free(&r);
        if (st == 200)
            break;
        sleep_ms(1000L * (wait > 0 ? wait : 1));
    }
    assert_true(tries < 10);
    for (int k = 0; k < 3; k++)
        sl_buf_free(&b[k]);
    /* Everything acknowledged is there, in order, once. */
    wait_stored(s, "bp", 36, 10);
    evs e = read_all(s, "bp", 0, "*");
    assert_int_equal(e.n, 36);
    for (int i = 0; i < 36; i++) {
        char id[16];
        snprintf(id, sizeof id, "bp%d-%d", i / 12, i % 12);
        assert_string_equal(e.v[i].id, id);
    }
    evs_free(&e);
    r = get(s, "/metrics");
    assert_true(metric(body(&r), "sluice_databus_full_total") >= 1);
    assert_true(metric(body(&r), "sluice_http_requests_total{code=\"503\"}") >= 1);
    resp_free(&r);
    srv_stop(s, SIGTERM, 15);

    /* Concurrent writers against a tiny buffer: some 503s (each with
     * Retry-After and a JSON body), and every 200 is readable after. */
    srv_start(s, "--ack", "buffer", "--partitions", "1", "--buffer-bytes", "16KiB",
              "--linger-ms", "20", NULL);
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    _Atomic bool stop = false;
    writer w[4];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 4; i++) {
        w[i].batch = 4;
        w[i].pad = 1200;
        w[i].max_requests = 25;
        w[i].retry_ms = 2;
    }
    writers_start(w, 4, s->port, "tiny", "tiny", &stop, &a);
    writers_join(w, 4);
    int full = 0;
    for (int i = 0; i < 4; i++) {
        full += w[i].full;
        if (w[i].ok != 25)
            fail_msg("writer %d: %d of 25 requests acknowledged (%d refused, %d lost)", i,
                     w[i].ok, w[i].refused, w[i].lost);
    }
    printf("tiny buffer: %d answers were 503 Backpressure\n", full);
    assert_true(full > 0);
    wait_stored(s, "tiny", 400, 10);
    assert_int_equal(check_acks(s, "tiny", 1, &a), 400);
    free(a.v);
    s->passed = true;
}

/* ---- slow and idle clients ----------------------------------------------------- */

static int raw_connect(int port, const char *send_first)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (send_first) {
        size_t n = strlen(send_first);
        if (send(fd, send_first, n, MSG_NOSIGNAL) != (ssize_t)n) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Half-sent requests and idle connections are closed after --idle-timeout;
 * meanwhile, and with 200 idle connections open, others are served at once. */
static void test_slow_and_idle_clients(void **state)
{
    server *s = *state;
    srv_start(s, "--idle-timeout", "2", NULL);
    enum { IDLE = 200, N = IDLE + 2 };
    int fd[N];
    double closed[N];
    fd[0] = raw_connect(s->port, "POST /v1/sets/slow/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 "Content-Type: application/x-ndjson\r\nContent-Length: 500\r\n"
                                 "\r\n{\"specversion\":\"1.0\",");
    fd[1] = raw_connect(s->port, "GET /healthz HTTP/1.1\r\nHost: 127");
    for (int i = 2; i < N; i++)
        fd[i] = raw_connect(s->port, NULL);
    double t0 = mono();
    for (int i = 0; i < N; i++) {
        if (fd[i] < 0)
            fail_msg("connection %d: %s", i, strerror(errno));
        closed[i] = -1;
    }
    /* Others are served while those sit there. */
    CURL *c = curl_easy_init();
    for (int i = 0; i < 10; i++) {
        resp r;
        assert_int_equal(http(c, s->port, &(call){.path = "/healthz"}, &r), 0);
        assert_int_equal(r.status, 200);
        if (r.secs > 0.5)
            fail_msg("/healthz took %.0f ms with %d idle connections", r.secs * 1e3, N);
        resp_free(&r);
        char id[16];
        snprintf(id, sizeof id, "fast%d", i);
        char *ev = event(id, ",\"partitionkey\":\"f\"");
        int p;
        int64_t o;
        post_one(s, "fast", ev, &p, &o);
        free(ev);
        assert_int_equal(o, i);
    }
    curl_easy_cleanup(c);
    /* Every stalled or idle connection is closed by the server, after the
     * idle timeout and not long after it. */
    int open = N;
    while (open && mono() - t0 < 12) {
        struct pollfd pf[N];
        int map[N], n = 0;
        for (int i = 0; i < N; i++)
            if (closed[i] < 0) {
                pf[n] = (struct pollfd){.fd = fd[i], .events = POLLIN};
                map[n++] = i;
            }
        if (poll(pf, (nfds_t)n, 100) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t got = recv(fd[map[k]], buf, sizeof buf, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                closed[map[k]] = mono() - t0;
                open--;
            }
        }
    }
    for (int i = 0; i < N; i++)
        close(fd[i]);
    if (open)
        fail_msg("%d of %d stalled or idle connections still open after 12 s (idle "
                 "timeout 2 s); e.g. half-sent POST: %s", open, N,
                 closed[0] < 0 ? "open" : "closed");
    double first = 1e9, last = 0;
    for (int i = 0; i < N; i++) {
        first = closed[i] < first ? closed[i] : first;
        last = closed[i] > last ? closed[i] : last;
    }
    printf("idle timeout 2 s: connections closed between %.2f and %.2f s\n", first, last);
    if (first < 1.5 || last > 8)
        fail_msg("connections closed between %.2f and %.2f s, want around 2 s", first, last);
    /* The half-sent event was never stored, and the server is fine. */
    resp r = get(s, "/v1/sets/slow");
    expect_error(&r, 404, "NoSuchSet");
    resp_free(&r);
    assert_int_equal(status_of(s->port, "/healthz"), 200);
    s->passed = true;
}

/* ---- main ------------------------------------------------------------------------ */

/* bin/sluice: $SLUICE_BIN, else three levels above this binary
 * (build/rel/itests/), else ./bin/sluice. */
static int find_binary(void)
{
    const char *env = getenv("SLUICE_BIN");
    if (env && *env) {
        snprintf(g_bin, sizeof g_bin, "%s", env);
        return access(g_bin, X_OK);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 4; up++) {
            char *slash = strrchr(exe, '/');
            if (slash)
                *slash = '\0';
        }
        snprintf(g_bin, sizeof g_bin, "%s/bin/sluice", exe);
        if (access(g_bin, X_OK) == 0)
            return 0;
    }
    if (!realpath("bin/sluice", g_bin))
        return -1;
    return access(g_bin, X_OK);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (find_binary()) {
        fprintf(stderr, "test_server: bin/sluice not found (build it, or set SLUICE_BIN)\n");
        return 1;
    }
    g_soak = getenv("SLUICE_SOAK") && *getenv("SLUICE_SOAK");
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    if (getenv("ITEST_SEED"))
        seed = (unsigned)strtoul(getenv("ITEST_SEED"), NULL, 10);
    printf("test_server: %s, seed %u (ITEST_SEED to repeat)\n", g_bin, seed);
    srand(seed);
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        T(test_content_modes),
        T(test_binary_keeps_content_type),
        T(test_request_errors),
        T(test_wrong_method_on_fixed_paths),
        T(test_invalid_set_names),
        T(test_no_auto_create),
        T(test_entry_errors),
        T(test_partial_batch),
        T(test_lane_header),
        T(test_partitioning),
        T(test_long_poll_wakes),
        T(test_long_poll_timeout),
        T(test_many_long_polls),
        T(test_sigterm_answers_long_polls),
        T(test_from),
        T(test_sets_and_metrics),
        T(test_restart_keeps_everything),
        T(test_set_order_survives_restart),
        T(test_sigterm_under_load),
        T(test_sigkill_durable_loop),
        T(test_backpressure),
        T(test_slow_and_idle_clients),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
