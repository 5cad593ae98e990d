/*
 * tests/integration/itest.c — harness shared by the integration tests:
 * starting and stopping `bin/sluice serve`, HTTP with libcurl, and the
 * checks of its answers and of the events it serves (see itest.h).
 */
#include "itest.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_bin[PATH_MAX];  /* bin/sluice */
static bool g_soak;           /* SLUICE_SOAK: longer loops */
static bool g_valgrind;       /* SLUICE_VALGRIND: servers run under valgrind */
static double g_scale = 1;    /* it_scale() */
static char g_supp[PATH_MAX]; /* tests/integration/valgrind.supp */

double it_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void it_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* ---- HTTP with libcurl ------------------------------------------------------ */

const char *it_body(const it_resp *r)
{
    return r->body.data ? (const char *)r->body.data : "";
}

void it_resp_free(it_resp *r)
{
    sl_buf_free(&r->body);
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    it_resp *r = ctx;
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
    it_resp *r = ctx;
    take_header(p, size * n, "content-type:", r->ctype, sizeof r->ctype);
    take_header(p, size * n, "retry-after:", r->retry_after, sizeof r->retry_after);
    return size * n;
}

/* Sets c up for one exchange into the fresh *r; free *hl after it. */
void it_http_prepare(CURL *c, int port, const it_call *k, it_resp *r, struct curl_slist **hl)
{
    char url[4096];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, k->path);
    memset(r, 0, sizeof *r);
    curl_easy_reset(c); /* keeps the connection cache: keep-alive goes on */
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long timeout = k->timeout_ms ? k->timeout_ms : 30000L;
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)((double)timeout * g_scale));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(5000 * g_scale));
    /* A body over 1 MiB is sent after "Expect: 100-continue"; curl's 1 s default
     * wait for the 100 is too short on a loaded machine: it then sends the
     * body anyway, and a request the server refuses from its headers alone
     * (test_http_params' 11 MiB POST) ends in "Broken pipe" instead of the answer. */
    curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, (long)(10000 * g_scale));
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

void it_http_finish(CURL *c, CURLcode rc, it_resp *r)
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
int it_http(CURL *c, int port, const it_call *k, it_resp *r)
{
    CURL *own = c ? NULL : curl_easy_init();
    if (!c)
        c = own;
    struct curl_slist *hl;
    it_http_prepare(c, port, k, r, &hl);
    double t0 = it_mono();
    CURLcode rc = curl_easy_perform(c);
    r->secs = it_mono() - t0;
    it_http_finish(c, rc, r);
    curl_slist_free_all(hl);
    if (own)
        curl_easy_cleanup(own);
    return r->status ? 0 : -1;
}

/* ---- the server process ----------------------------------------------------- */

int it_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
long it_status_of(int port, const char *path)
{
    it_resp r;
    it_http(NULL, port, &(it_call){.path = path, .timeout_ms = 2000}, &r);
    it_resp_free(&r);
    return r.status;
}

/* Sends sig, then reaps the server, waiting up to secs before SIGKILL.
 * Returns the wait status, or -1 when it had to be killed. */
int it_srv_stop(it_server *s, int sig, double secs)
{
    int st = -1;
    if (!s->pid)
        return -1;
    kill(s->pid, sig);
    double end = it_mono() + secs * g_scale;
    for (;;) {
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid || (r < 0 && errno != EINTR))
            break;
        if (it_mono() > end) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            st = -1;
            break;
        }
        it_sleep_ms(5);
    }
    s->pid = 0;
    return st;
}

/* One attempt to start the server on a free port; true once /healthz is 200. */
static bool spawn(it_server *s)
{
    if ((s->port = it_free_port()) < 0)
        return false;
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", s->port);
    const char *argv[IT_MAX_ARGS + 16];
    int n = 0;
    char vlog[PATH_MAX + 32], vsupp[PATH_MAX + 32];
    if (g_valgrind) {
        /* Errors go to the log (checked by it_teardown()) and also make the
         * server exit 1, so a test that checks its exit status sees them. */
        snprintf(vlog, sizeof vlog, "--log-file=%s/valgrind-%%p.log", s->dir);
        snprintf(vsupp, sizeof vsupp, "--suppressions=%s", g_supp);
        const char *vg[] = {"valgrind",
                            "--error-exitcode=1",
                            "--leak-check=full",
                            "--show-leak-kinds=definite,possible",
                            "--num-callers=30",
                            vsupp,
                            vlog};
        for (size_t i = 0; i < sizeof vg / sizeof *vg; i++)
            argv[n++] = vg[i];
    }
    const char *base[] = {g_bin, "serve", "--data", s->data, "--listen", listen};
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        argv[n++] = base[i];
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
        if (g_valgrind)
            execvp("valgrind", (char **)argv);
        else
            execv(g_bin, (char **)argv);
        _exit(127);
    }
    close(fd);
    if (pid < 0)
        return false;
    s->pid = pid;
    for (double end = it_mono() + 20 * g_scale; it_mono() < end;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0; /* exited: the port may have been taken meanwhile */
            return false;
        }
        if (it_status_of(s->port, "/healthz") == 200)
            return true;
        it_sleep_ms(10);
    }
    it_srv_stop(s, SIGKILL, 5);
    return false;
}

static void print_log(const it_server *s)
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
void it_srv_restart(it_server *s)
{
    for (int attempt = 0; attempt < 5; attempt++)
        if (spawn(s))
            return;
    print_log(s);
    fail_msg("sluice serve did not become healthy (see the log above)");
}

/* Starts the server with extra serve arguments (NULL-terminated). */
void it_srv_start(it_server *s, ...)
{
    va_list ap;
    va_start(ap, s);
    int n = 0;
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < IT_MAX_ARGS - 1)
        s->args[n++] = a;
    va_end(ap);
    s->args[n] = NULL;
    it_srv_restart(s);
}

bool it_log_contains(const it_server *s, const char *text)
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

int it_log_count(const it_server *s, const char *text)
{
    FILE *f = fopen(s->log, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

int it_setup(void **state)
{
    it_server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->dir = tu_tmpdir();
    snprintf(s->data, sizeof s->data, "%s/data", s->dir);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    *state = s;
    return 0;
}

/* Whether a valgrind log reports an error: a non-zero ERROR SUMMARY, or,
 * for a server killed before its summary, the first line of an error. */
static bool valgrind_log_bad(const char *path)
{
    static const char *const starts[] = {
        "Invalid read",    "Invalid write",   "Invalid free",       "Conditional jump",
        "Use of uninit",   "Syscall param",   "Mismatched free",    "Source and destination",
        "Argument 'size'", "definitely lost", "Process terminating"};
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[4096];
    bool bad = false;
    while (!bad && fgets(line, sizeof line, f)) {
        const char *sum = strstr(line, "ERROR SUMMARY: ");
        if (sum)
            bad = strtol(sum + 15, NULL, 10) != 0;
        for (size_t i = 0; !sum && i < sizeof starts / sizeof *starts; i++)
            bad |= strstr(line, starts[i]) != NULL && !strstr(line, " 0 bytes in 0 blocks");
    }
    fclose(f);
    return bad;
}

/* Prints every valgrind log of s that reports an error; true when one did. */
static bool valgrind_check(const it_server *s)
{
    bool bad = false;
    DIR *d = opendir(s->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "valgrind-", 9) != 0)
            continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
        if (!valgrind_log_bad(path))
            continue;
        bad = true;
        FILE *f = fopen(path, "r");
        fprintf(stderr, "---- valgrind found errors (%s):\n", path);
        char buf[4096];
        size_t n;
        while (f && (n = fread(buf, 1, sizeof buf, f)) > 0)
            fwrite(buf, 1, n, stderr);
        fprintf(stderr, "---- end of valgrind log\n");
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return bad;
}

int it_teardown(void **state)
{
    it_server *s = *state;
    /* Under valgrind a clean exit lets it check for leaks. */
    it_srv_stop(s, g_valgrind ? SIGTERM : SIGKILL, 5);
    bool vg_bad = g_valgrind && valgrind_check(s);
    if (!s->passed || vg_bad)
        print_log(s);
    tu_rmdir(s->dir);
    free(s);
    return vg_bad ? -1 : 0;
}

/* ---- requests with assertions (main thread only) ---------------------------- */

it_resp it_get(it_server *s, const char *fmt, ...)
{
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    it_resp r;
    if (it_http(NULL, s->port, &(it_call){.path = path}, &r))
        fail_msg("GET %s: %s", path, r.err);
    return r;
}

/* POSTs len bytes (strlen when len is SIZE_MAX) to /v1/sets/SET/events. */
it_resp it_post(it_server *s, const char *set, const char *ctype, const char *const *hdrs,
                const char *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/sets/%s/events", set);
    it_resp r;
    it_call k = {.path = path,
                 .ctype = ctype,
                 .hdrs = hdrs,
                 .body = data,
                 .len = len == SIZE_MAX ? strlen(data) : len};
    if (it_http(NULL, s->port, &k, &r))
        fail_msg("POST %s: %s", path, r.err);
    return r;
}

json_t *it_parse_json(const it_resp *r)
{
    json_error_t je;
    json_t *j = json_loads(it_body(r), 0, &je);
    if (!j)
        fail_msg("answer (%ld) is not JSON (%s): %s", r->status, je.text, it_body(r));
    return j;
}

/* Asserts an error answer: status, a JSON body {"error":code,"message":…}. */
void it_expect_error(const it_resp *r, long status, const char *code)
{
    if (r->status != status)
        fail_msg("want %ld %s, got %ld: %s", status, code, r->status, it_body(r));
    if (strncmp(r->ctype, "application/json", 16) != 0)
        fail_msg("error %ld has Content-Type \"%s\"", status, r->ctype);
    json_t *j = it_parse_json(r);
    const char *e = json_string_value(json_object_get(j, "error"));
    const char *m = json_string_value(json_object_get(j, "message"));
    if (!e || !m || strlen(m) < 10)
        fail_msg("error body lacks \"error\" or a useful \"message\": %s", it_body(r));
    if (code && strcmp(e, code) != 0)
        fail_msg("want error %s, got %s: %s", code, e, m);
    json_decref(j);
}

/* Asserts a publish answer {"accepted":A,"failed":F,"results":[…]}: one
 * result per entry in input order, each {partition, offset} or {error,
 * message, index = its position}. Returns the parsed answer. */
json_t *it_expect_results(const it_resp *r, size_t accepted, size_t failed)
{
    if (r->status != 200)
        fail_msg("publish answered %ld: %s", r->status, it_body(r));
    json_t *j = it_parse_json(r);
    json_t *res = json_object_get(j, "results");
    if (json_integer_value(json_object_get(j, "accepted")) != (json_int_t)accepted ||
        json_integer_value(json_object_get(j, "failed")) != (json_int_t)failed ||
        json_array_size(res) != accepted + failed)
        fail_msg("want %zu accepted and %zu failed: %s", accepted, failed, it_body(r));
    for (size_t i = 0; i < json_array_size(res); i++) {
        json_t *e = json_array_get(res, i);
        if (json_object_get(e, "error")) {
            const char *m = json_string_value(json_object_get(e, "message"));
            if (!m || !*m || json_integer_value(json_object_get(e, "index")) != (json_int_t)i)
                fail_msg("result %zu: bad error entry: %s", i, it_body(r));
        } else if (!json_is_integer(json_object_get(e, "partition")) ||
                   !json_is_integer(json_object_get(e, "offset"))) {
            fail_msg("result %zu: neither an error nor partition+offset: %s", i, it_body(r));
        }
    }
    return j;
}

json_t *it_result(json_t *answer, size_t i)
{
    return json_array_get(json_object_get(answer, "results"), i);
}

int it_res_part(json_t *answer, size_t i)
{
    return (int)json_integer_value(json_object_get(it_result(answer, i), "partition"));
}

int64_t it_res_off(json_t *answer, size_t i)
{
    return (int64_t)json_integer_value(json_object_get(it_result(answer, i), "offset"));
}

/* A structured event; caller frees. extra is appended inside the object. */
char *it_event(const char *id, const char *extra)
{
    char *s;
    if (asprintf(&s,
                 "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/itest\","
                 "\"type\":\"itest\"%s}",
                 id, extra ? extra : "") < 0)
        fail_msg("out of memory");
    return s;
}

/* Posts one structured event and returns where it went. */
void it_post_one(it_server *s, const char *set, const char *ev, int *part, int64_t *off)
{
    it_resp r = it_post(s, set, IT_CT_CE, NULL, ev, SIZE_MAX);
    json_t *a = it_expect_results(&r, 1, 0);
    *part = it_res_part(a, 0);
    *off = it_res_off(a, 0);
    json_decref(a);
    it_resp_free(&r);
}

/* ---- configured servers (main thread only) ----------------------------------- */

void it_path(char *out, const it_server *s, const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", s->dir, name);
}

static void vwrite_file(const char *path, const char *fmt, va_list ap)
{
    /* Written to a temporary name and renamed, so a reload never reads half
     * a file. */
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        fail_msg("cannot write %s: %s", tmp, strerror(errno));
    vfprintf(f, fmt, ap);
    if (fclose(f) || rename(tmp, path))
        fail_msg("cannot write %s: %s", path, strerror(errno));
}

void it_write_file(const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwrite_file(path, fmt, ap);
    va_end(ap);
}

void it_write_config(it_server *s, char *path, const char *fmt, ...)
{
    it_path(path, s, "sluice.lua");
    va_list ap;
    va_start(ap, fmt);
    vwrite_file(path, fmt, ap);
    va_end(ap);
}

/* Waits up to secs until the log holds more than `before` IT_READY_LINEs. */
static void wait_ready(const it_server *s, int before, double secs)
{
    secs *= g_scale;
    for (double end = it_mono() + secs; it_mono() < end; it_sleep_ms(5))
        if (it_log_count(s, IT_READY_LINE) > before)
            return;
    fail_msg("the server did not log \"%s\" within %.0f s", IT_READY_LINE, secs);
}

void it_start_config(it_server *s, const char *cfg, double secs)
{
    int before = it_log_count(s, IT_READY_LINE);
    it_srv_start(s, "-c", cfg, NULL);
    wait_ready(s, before, secs);
}

void it_restart(it_server *s, double secs)
{
    int before = it_log_count(s, IT_READY_LINE);
    it_srv_restart(s);
    wait_ready(s, before, secs);
}

/* The whole of the file at path, NUL-terminated ("" when it cannot be
 * read); caller frees. */
static char *slurp(const char *path)
{
    sl_buf b = SL_BUF_INIT;
    FILE *f = fopen(path, "r");
    if (f) {
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            if (sl_buf_append(&b, chunk, n))
                fail_msg("out of memory reading %s", path);
        fclose(f);
    }
    if (sl_buf_append(&b, "", 1))
        fail_msg("out of memory reading %s", path);
    return (char *)b.data;
}

int it_run(const it_server *s, const char *in_path, char **out, char **err, const char *const *args,
           double secs)
{
    char opath[PATH_MAX], epath[PATH_MAX];
    it_path(opath, s, "cli.out");
    it_path(epath, s, "cli.err");
    const char *argv[16] = {g_bin};
    int n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The parent may have threads: only async-signal-safe calls here,
         * but for unsetenv(), which no other thread of a test calls. */
        int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
        int o = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = err ? open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0644) : o;
        if (in < 0 || o < 0 || e < 0)
            _exit(126);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        unsetenv("SLUICE_SERVER");
        execv(g_bin, (char **)argv);
        _exit(127);
    }
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    int st = 0;
    bool done = false;
    for (double end = it_mono() + secs * g_scale; it_mono() < end && !done;) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            done = true;
        else
            it_sleep_ms(5);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    *out = slurp(opath);
    if (err)
        *err = slurp(epath);
    return done && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

json_t *it_post_all(it_server *s, const char *set, const char *const *hdrs, const sl_buf *b,
                    size_t n)
{
    it_resp r = it_post(s, set, IT_CT_NDJSON, hdrs, (const char *)b->data, b->len);
    json_t *a = it_expect_results(&r, n, 0);
    it_resp_free(&r);
    return a;
}

/* ---- GET /v1/rules (main thread only) ---------------------------------------- */

json_t *it_rules(it_server *s)
{
    it_resp r = it_get(s, "/v1/rules");
    if (r.status != 200)
        fail_msg("GET /v1/rules answered %ld: %s", r.status, it_body(&r));
    json_t *j = it_parse_json(&r);
    it_resp_free(&r);
    if (!json_is_array(json_object_get(j, "rules")))
        fail_msg("GET /v1/rules has no \"rules\" list");
    return j;
}

json_t *it_rule_in(json_t *rules, const char *name)
{
    json_t *list = json_object_get(rules, "rules"), *r;
    size_t i;
    json_array_foreach(list, i, r)
    {
        const char *n = json_string_value(json_object_get(r, "name"));
        if (n && strcmp(n, name) == 0)
            return r;
    }
    return NULL;
}

json_t *it_rule(it_server *s, const char *name)
{
    json_t *j = it_rules(s);
    json_t *found = json_incref(it_rule_in(j, name));
    json_decref(j);
    if (!found)
        fail_msg("GET /v1/rules does not list %s", name);
    return found;
}

json_int_t it_rule_int(json_t *rule, const char *key)
{
    json_t *v = json_object_get(rule, key);
    if (!json_is_integer(v))
        it_fail_rule(rule, "GET /v1/rules: \"%s\" is not an integer", key);
    return json_integer_value(v);
}

int64_t it_rule_cursor(json_t *rule, int p)
{
    json_t *e = json_array_get(json_object_get(rule, "partitions"), (size_t)p);
    json_t *c = json_object_get(e, "cursor");
    if (!json_is_integer(c))
        it_fail_rule(rule, "GET /v1/rules: partition %d has no cursor", p);
    return (int64_t)json_integer_value(c);
}

void it_fail_rule(json_t *rule, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char *d = json_dumps(rule, JSON_COMPACT);
    fail_msg("%s: %s", what, d ? d : "?");
    free(d); /* not reached while cmocka runs a test */
}

void it_wait_rule_int(it_server *s, const char *name, const char *key, json_int_t want, double secs)
{
    secs *= g_scale;
    for (double end = it_mono() + secs;; it_sleep_ms(20)) {
        json_t *r = it_rule(s, name);
        json_t *v = json_object_get(r, key);
        if (json_is_integer(v) && json_integer_value(v) >= want) {
            json_decref(r);
            return;
        }
        if (it_mono() > end)
            it_fail_rule(r, "rule %s: %s did not reach %lld within %.0f s", name, key,
                         (long long)want, secs);
        json_decref(r);
    }
}

void it_wait_caught_up(it_server *s, double secs)
{
    int calm = 0;
    char *last = NULL; /* the last answer, for the failure message */
    secs *= g_scale;
    for (double end = it_mono() + secs; it_mono() < end;) {
        it_resp r = it_get(s, "/v1/rules");
        json_t *j = r.status == 200 ? json_loads(it_body(&r), 0, NULL) : NULL;
        free(last);
        last = strdup(it_body(&r));
        it_resp_free(&r);
        json_t *list = json_object_get(j, "rules"), *e;
        size_t i;
        bool busy = !json_is_array(list);
        json_array_foreach(list, i, e)
        {
            json_t *lag = json_object_get(e, "lag"), *rt = json_object_get(e, "retrying");
            busy |= !json_is_integer(lag) || json_integer_value(lag) != 0;
            busy |= json_is_integer(rt) && json_integer_value(rt) != 0;
        }
        json_decref(j);
        calm = busy ? 0 : calm + 1;
        if (calm == 2) {
            free(last);
            return;
        }
        it_sleep_ms(20);
    }
    fail_msg("the rules did not catch up within %.0f s: %s", secs, last ? last : "");
    free(last); /* not reached while cmocka runs a test */
}

/* ---- reading events back ---------------------------------------------------- */

void it_evs_free(it_evs *e)
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
bool it_parse_events(const char *b, size_t len, it_evs *out)
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
        it_rawev *e = &out->v[out->n++];
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
it_evs it_read_events(it_server *s, const char *set, int part, const char *query)
{
    it_resp r =
        it_get(s, "/v1/sets/%s/events?partition=%d%s%s", set, part, *query ? "&" : "", query);
    it_evs e = {0};
    if (r.status != 200 || !it_parse_events(it_body(&r), r.body.len, &e))
        fail_msg("read %s/%d?%s answered %ld: %.300s", set, part, query, r.status, it_body(&r));
    it_resp_free(&r);
    return e;
}

/* Every event of a partition (lane: "*" for all), following next_offset. */
it_evs it_read_all(it_server *s, const char *set, int part, const char *lane)
{
    it_evs all = {0};
    int64_t off = 0;
    for (int page = 0; page < 10000; page++) {
        char q[128];
        snprintf(q, sizeof q, "offset=%lld&max=10000&lane=%s", (long long)off, lane);
        size_t before = all.n;
        it_resp r = it_get(s, "/v1/sets/%s/events?partition=%d&%s", set, part, q);
        if (r.status != 200 || !it_parse_events(it_body(&r), r.body.len, &all))
            fail_msg("read %s/%d?%s answered %ld: %.300s", set, part, q, r.status, it_body(&r));
        it_resp_free(&r);
        if (all.n == before)
            return all;
        off = all.next;
    }
    fail_msg("read_all %s/%d did not end", set, part);
    return all;
}

/* The value of the Prometheus sample whose line starts with name (labels
 * included, e.g. "sluice_events_in_total{set=\"x\"}"), or -1. */
double it_metric(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* ---- the program ------------------------------------------------------------ */

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

int it_init(const char *prog)
{
    signal(SIGPIPE, SIG_IGN);
    if (find_binary()) {
        fprintf(stderr, "%s: bin/sluice not found (build it, or set SLUICE_BIN)\n", prog);
        return -1;
    }
    g_soak = getenv("SLUICE_SOAK") && *getenv("SLUICE_SOAK");
    g_valgrind = getenv("SLUICE_VALGRIND") && *getenv("SLUICE_VALGRIND");
    if (g_valgrind) {
        const char *sc = getenv("SLUICE_VALGRIND_SCALE");
        g_scale = sc && strtod(sc, NULL) >= 1 ? strtod(sc, NULL) : 10;
        /* bin/sluice's repository holds the suppressions. */
        snprintf(g_supp, sizeof g_supp, "%s", g_bin);
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(g_supp, '/');
            if (slash)
                *slash = '\0';
        }
        strncat(g_supp, "/tests/integration/valgrind.supp", sizeof g_supp - strlen(g_supp) - 1);
        printf("%s: servers run under valgrind (suppressions %s), waits scaled by %.0f\n", prog,
               g_supp, g_scale);
    }
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    if (getenv("ITEST_SEED"))
        seed = (unsigned)strtoul(getenv("ITEST_SEED"), NULL, 10);
    printf("%s: %s, seed %u (ITEST_SEED to repeat)\n", prog, g_bin, seed);
    srand(seed);
    curl_global_init(CURL_GLOBAL_ALL);
    return 0;
}

void it_cleanup(void)
{
    curl_global_cleanup();
}

const char *it_bin(void)
{
    return g_bin;
}

bool it_soak(void)
{
    return g_soak;
}

bool it_valgrind(void)
{
    return g_valgrind;
}

double it_scale(void)
{
    return g_scale;
}

/* ---- the Kafka mock cluster -------------------------------------------------- */

void it_kmock_start(it_kmock *m, const char *const *args)
{
    /* build/rel/tools/kafka_mock beside bin/sluice's repository */
    char exe[PATH_MAX + 64];
    snprintf(exe, sizeof exe, "%s", it_bin());
    char *slash = strrchr(exe, '/');
    if (slash && slash - exe >= 4 && strncmp(slash - 4, "/bin", 4) == 0)
        strcpy(slash - 4, "/build/rel/tools/kafka_mock");
    const char *argv[64] = {exe, "--commands"}; /* steered through its stdin */
    size_t n = 2;
    for (; args && args[n - 2] && n < 63; n++)
        argv[n] = args[n - 2];
    argv[n] = NULL;
    int to[2], from[2];
    if (pipe(to) || pipe(from))
        fail_msg("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]);
        close(to[1]);
        close(from[0]);
        close(from[1]);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    m->pid = pid;
    m->in = fdopen(to[1], "w");
    m->out = fdopen(from[0], "r");
    char line[600];
    if (!fgets(line, sizeof line, m->out) || strncmp(line, "bootstrap ", 10))
        fail_msg("%s did not start (make itests builds it)", exe);
    snprintf(m->boot, sizeof m->boot, "%s", line + 10);
    m->boot[strcspn(m->boot, "\r\n")] = '\0';
}

void it_kmock_cmd(it_kmock *m, const char *fmt, ...)
{
    char cmd[256], line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fprintf(m->in, "%s\n", cmd);
    fflush(m->in);
    if (!fgets(line, sizeof line, m->out) || strncmp(line, "ok", 2))
        fail_msg("kafka_mock: %s: %s", cmd, line);
}

void it_kmock_stop(it_kmock *m)
{
    if (!m->pid)
        return;
    fclose(m->in); /* the end of stdin stops it */
    fclose(m->out);
    int st;
    for (int i = 0; i < 100 && waitpid(m->pid, &st, WNOHANG) == 0; i++)
        it_sleep_ms(50);
    if (waitpid(m->pid, &st, WNOHANG) == 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, &st, 0);
    }
    memset(m, 0, sizeof *m);
}

/* ---- acknowledged events ------------------------------------------------------ */

void it_acks_add(it_acks *a, int part, int64_t off, const char *id)
{
    pthread_mutex_lock(&a->lock);
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->v = realloc(a->v, a->cap * sizeof *a->v);
        assert_non_null(a->v);
    }
    it_ack *k = &a->v[a->n++];
    k->part = part;
    k->offset = off;
    snprintf(k->id, sizeof k->id, "%s", id);
    pthread_mutex_unlock(&a->lock);
}

size_t it_acks_count(it_acks *a)
{
    pthread_mutex_lock(&a->lock);
    size_t n = a->n;
    pthread_mutex_unlock(&a->lock);
    return n;
}
