/*
 * tests/integration/test_agent.c — the Databus agent (`sluice databus`,
 * docs/agent.md) against real servers: lines over its UNIX socket, answers
 * read back in order, events read back from the server's sets, and the spool
 * on disk while the upstream server is stopped.
 *
 * The agent runs as a child process writing into the server log (so a failing
 * test prints both); the teardown kills whatever is still running.
 */
#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

/* What the current test started besides the it_server: killed at teardown. */
static pid_t g_agent, g_extra;
static char g_sock[PATH_MAX], g_spool[PATH_MAX];

static int setup(void **state)
{
    it_setup(state);
    it_server *s = *state;
    g_agent = g_extra = 0;
    it_path(g_sock, s, "agent.sock");
    it_path(g_spool, s, "spool");
    return 0;
}

static void kill_wait(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
    }
    *pid = 0;
}

static int teardown(void **state)
{
    kill_wait(&g_agent);
    kill_wait(&g_extra);
    return it_teardown(state);
}

/* ---- processes ---------------------------------------------------------------- */

/* Starts bin/sluice with argv[1..] (argv[0] is filled in), output appended
 * to s's log. */
static pid_t spawn(it_server *s, const char **argv)
{
    argv[0] = it_bin();
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    close(fd);
    assert_true(pid > 0);
    return pid;
}

static int cl_connect_once(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Starts the agent on g_sock and g_spool with upstream 127.0.0.1:port and
 * the extra arguments (NULL-terminated, may be NULL); waits until its socket
 * accepts. */
static void agent_start(it_server *s, int port, const char *const *extra)
{
    char up[64];
    snprintf(up, sizeof up, "http://127.0.0.1:%d", port);
    char lis[PATH_MAX + 8];
    snprintf(lis, sizeof lis, "unix:%s", g_sock);
    const char *argv[40] = {NULL, "databus", "--listen", lis, "--upstream",
                            up,   "--spool", g_spool,    NULL};
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 38; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    g_agent = spawn(s, argv);
    for (double end = it_mono() + 10; it_mono() < end; it_sleep_ms(10)) {
        int st;
        if (waitpid(g_agent, &st, WNOHANG) == g_agent) {
            g_agent = 0;
            fail_msg("the agent exited at start (log above)");
        }
        int fd = cl_connect_once(g_sock);
        if (fd >= 0) {
            close(fd);
            return;
        }
    }
    fail_msg("the agent did not listen on %s", g_sock);
}

/* Sends sig to the agent and waits up to secs; returns its wait status. */
static int agent_stop(int sig, double secs)
{
    kill(g_agent, sig);
    for (double end = it_mono() + secs; it_mono() < end; it_sleep_ms(10)) {
        int st;
        if (waitpid(g_agent, &st, WNOHANG) == g_agent) {
            g_agent = 0;
            return st;
        }
    }
    kill_wait(&g_agent);
    return -1;
}

/* Starts `sluice serve` on a given port (for an upstream that must come back
 * where the agent looks for it), with an optional config; waits for
 * /healthz. */
static pid_t server_at(it_server *s, const char *data, int port, const char *cfg)
{
    char lis[64];
    snprintf(lis, sizeof lis, "127.0.0.1:%d", port);
    const char *argv[16] = {NULL, "serve", "--data", data, "--listen", lis, "--partitions", "1"};
    int n = 8;
    if (cfg) {
        argv[n++] = "-c";
        argv[n++] = cfg;
    }
    argv[n] = NULL;
    pid_t pid = spawn(s, argv);
    for (double end = it_mono() + 20; it_mono() < end; it_sleep_ms(20))
        if (it_status_of(port, "/healthz") == 200)
            return pid;
    fail_msg("server on port %d did not start", port);
    return 0;
}

/* ---- the client side ------------------------------------------------------------- */

typedef struct ack {
    long seq;
    bool ok;
    char error[64];
    char message[512];
} ack;

static int cl_connect(void)
{
    int fd = cl_connect_once(g_sock);
    assert_true(fd >= 0);
    return fd;
}

/* Writes everything; never asserts (writer threads use it). */
static int cl_send(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Appends one line {"set":set,"event":{…id…}} (plus members extra, e.g.
 * ",\"lane\":\"x\"", and event members eextra) to b. */
static void line(sl_buf *b, const char *set, const char *id, const char *extra, const char *eextra)
{
    char l[1024];
    int n = snprintf(l, sizeof l,
                     "{\"set\":\"%s\"%s,\"event\":{\"specversion\":\"1.0\",\"id\":\"%s\","
                     "\"source\":\"/itest\",\"type\":\"itest\"%s}}\n",
                     set, extra ? extra : "", id, eextra ? eextra : "");
    assert_int_equal(sl_buf_append(b, l, (size_t)n), 0);
}

/* Appends the string s to b. */
static void raw(sl_buf *b, const char *s)
{
    assert_int_equal(sl_buf_append(b, s, strlen(s)), 0);
}

/* Reads answer lines until want arrived (or secs passed) into out (room for
 * want); returns how many arrived. Asserts each is a JSON object with seq
 * and ok. */
static size_t cl_acks(int fd, ack *out, size_t want, double secs)
{
    size_t got = 0;
    sl_buf b = SL_BUF_INIT;
    double end = it_mono() + secs;
    while (got < want && it_mono() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char tmp[65536];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r <= 0)
            break;
        assert_int_equal(sl_buf_append(&b, tmp, (size_t)r), 0);
        char *s = (char *)b.data, *e = s + b.len, *nl;
        while (got < want && (nl = memchr(s, '\n', (size_t)(e - s)))) {
            json_error_t je;
            json_t *j = json_loadb(s, (size_t)(nl - s), 0, &je);
            if (!j)
                fail_msg("answer is not JSON: %.*s", (int)(nl - s), s);
            ack *a = &out[got++];
            memset(a, 0, sizeof *a);
            json_t *seq = json_object_get(j, "seq"), *ok = json_object_get(j, "ok");
            if (!json_is_integer(seq) || !json_is_boolean(ok))
                fail_msg("answer without seq/ok: %.*s", (int)(nl - s), s);
            a->seq = (long)json_integer_value(seq);
            a->ok = json_is_true(ok);
            const char *er = json_string_value(json_object_get(j, "error"));
            const char *m = json_string_value(json_object_get(j, "message"));
            snprintf(a->error, sizeof a->error, "%s", er ? er : "");
            snprintf(a->message, sizeof a->message, "%s", m ? m : "");
            if (!a->ok && (!er || !m || !m[0]))
                fail_msg("error answer without error/message: %.*s", (int)(nl - s), s);
            json_decref(j);
            s = nl + 1;
        }
        size_t rest = (size_t)(e - s);
        memmove(b.data, s, rest);
        b.len = rest;
    }
    sl_buf_free(&b);
    return got;
}

/* Asserts n answers numbered 1..n in order, all ok. */
static void expect_all_ok(const ack *a, size_t n, size_t got)
{
    if (got != n)
        fail_msg("got %zu answers of %zu", got, n);
    for (size_t i = 0; i < n; i++) {
        if (a[i].seq != (long)i + 1)
            fail_msg("answer %zu has seq %ld", i, a[i].seq);
        if (!a[i].ok)
            fail_msg("line %zu refused: %s: %s", i + 1, a[i].error, a[i].message);
    }
}

/* Events in a set as GET /v1/sets/S says (-1 when it does not exist yet);
 * never asserts. */
static long set_events(int port, const char *set)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/sets/%s", set);
    it_resp r;
    long n = -1;
    if (it_http(NULL, port, &(it_call){.path = path}, &r) == 0 && r.status == 200) {
        json_t *j = json_loads(it_body(&r), 0, NULL);
        json_t *e = j ? json_object_get(j, "events") : NULL;
        if (json_is_integer(e))
            n = (long)json_integer_value(e);
        json_decref(j);
    }
    it_resp_free(&r);
    return n;
}

static void wait_events(int port, const char *set, long want, double secs)
{
    long n = -1;
    for (double end = it_mono() + secs; it_mono() < end; it_sleep_ms(50))
        if ((n = set_events(port, set)) >= want)
            return;
    fail_msg("set %s has %ld events, want %ld", set, n, want);
}

/* Asserts that the events are exactly ids prefix0 .. prefix(n-1) in order. */
static void expect_ids(const it_evs *e, const char *prefix, size_t n)
{
    if (e->n != n)
        fail_msg("%zu events read back, want %zu", e->n, n);
    for (size_t i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s%zu", prefix, i);
        if (strcmp(e->v[i].id, id) != 0)
            fail_msg("event %zu has id %s, want %s", i, e->v[i].id, id);
    }
}

/* Bytes of *.spool files in g_spool (not its subfolders). */
static long spool_bytes(int *files)
{
    DIR *d = opendir(g_spool);
    long total = 0;
    *files = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 6, ".spool") != 0)
            continue;
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", g_spool, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0) {
            total += st.st_size;
            (*files)++;
        }
    }
    closedir(d);
    return total;
}

/* ---- a scripted fake upstream ------------------------------------------------ */

/* How the fake upstream answers every request (fake.mode). */
enum {
    FAKE_HTML,       /* 200 <html>ok</html> */
    FAKE_SHORT,      /* 200, a results array one entry short */
    FAKE_EMPTY,      /* 204, no body */
    FAKE_403,        /* 403 from a proxy (HTML) */
    FAKE_302,        /* a redirect */
    FAKE_404_HTML,   /* 404 from a wrong host (HTML) */
    FAKE_503,        /* 503 sluice JSON error */
    FAKE_400_SLUICE, /* 400 sluice JSON error: final */
    FAKE_OK,         /* a sluice answer: every event accepted */
};

/* A thread answering HTTP requests on a loopback port, one connection at a
 * time, each closed after its answer. */
typedef struct fake {
    int lfd, port;
    pthread_t th;
    volatile int mode;
    volatile int stop;
    volatile long requests;         /* requests answered */
    volatile long accepted;         /* events answered as stored (FAKE_OK) */
    const char *volatile fail_path; /* requests whose path has it get a 503, whatever the mode */
} fake;

static void fake_answer(fake *f, int fd)
{
    sl_buf b = SL_BUF_INIT;
    size_t hend = 0, clen = 0;
    for (double end = it_mono() + 5; it_mono() < end;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char tmp[65536];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r <= 0)
            break;
        sl_buf_append(&b, tmp, (size_t)r);
        if (!hend) {
            const char *h = memmem(b.data, b.len, "\r\n\r\n", 4);
            if (!h)
                continue;
            hend = (size_t)(h - (const char *)b.data) + 4;
            for (const char *q = (const char *)b.data; q < h; q++)
                if (strncasecmp(q, "\ncontent-length:", 16) == 0)
                    clen = strtoul(q + 16, NULL, 10);
        }
        if (b.len >= hend + clen)
            break;
    }
    if (!hend || b.len < hend + clen) {
        sl_buf_free(&b);
        return;
    }
    long n = 0;
    for (size_t i = hend; i < hend + clen; i++)
        n += b.data[i] == '\n';
    int mode = f->mode;
    const char *eol = memchr(b.data, '\n', hend);
    if (f->fail_path && eol &&
        memmem(b.data, (size_t)(eol - (const char *)b.data), f->fail_path, strlen(f->fail_path)))
        mode = FAKE_503;
    sl_buf_free(&b);
    const char *status = "200 OK", *ctype = "application/json", *extra = "";
    sl_buf body = SL_BUF_INIT;
    switch (mode) {
    case FAKE_HTML:
        ctype = "text/html";
        raw(&body, "<html>ok</html>");
        break;
    case FAKE_SHORT:
    case FAKE_OK: {
        long m = mode == FAKE_OK ? n : n - 1;
        char h[64];
        snprintf(h, sizeof h, "{\"accepted\":%ld,\"failed\":0,\"results\":[", m);
        raw(&body, h);
        for (long i = 0; i < m; i++)
            raw(&body, i ? ",{\"partition\":0,\"offset\":1}" : "{\"partition\":0,\"offset\":1}");
        raw(&body, "]}");
        break;
    }
    case FAKE_EMPTY:
        status = "204 No Content";
        break;
    case FAKE_403:
        status = "403 Forbidden";
        ctype = "text/html";
        raw(&body, "<html>forbidden</html>");
        break;
    case FAKE_302:
        status = "302 Found";
        ctype = "text/html";
        extra = "Location: http://127.0.0.1:1/\r\n";
        break;
    case FAKE_404_HTML:
        status = "404 Not Found";
        ctype = "text/html";
        raw(&body, "<html>not found</html>");
        break;
    case FAKE_503:
        status = "503 Service Unavailable";
        raw(&body, "{\"error\":\"ShuttingDown\",\"message\":\"stopping\"}");
        break;
    case FAKE_400_SLUICE:
        status = "400 Bad Request";
        raw(&body, "{\"error\":\"InvalidBatch\",\"message\":\"scripted refusal\"}");
        break;
    }
    char h[512];
    int hl = snprintf(h, sizeof h,
                      "HTTP/1.1 %s\r\nContent-Type: %s\r\n%sContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      status, ctype, extra, mode == FAKE_EMPTY ? 0 : body.len);
    cl_send(fd, h, (size_t)hl);
    if (body.len && mode != FAKE_EMPTY)
        cl_send(fd, (const char *)body.data, body.len);
    sl_buf_free(&body);
    if (mode == FAKE_OK)
        __atomic_add_fetch(&f->accepted, n, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&f->requests, 1, __ATOMIC_SEQ_CST);
}

static void *fake_run(void *p)
{
    fake *f = p;
    while (!f->stop) {
        struct pollfd pf = {.fd = f->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        fake_answer(f, fd);
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    return NULL;
}

static void fake_start(fake *f, int mode)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    int one = 1;
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->lfd, 64), 0);
    socklen_t sl = sizeof sa;
    getsockname(f->lfd, (struct sockaddr *)&sa, &sl);
    f->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&f->th, NULL, fake_run, f), 0);
}

static void fake_stop(fake *f)
{
    f->stop = 1;
    pthread_join(f->th, NULL);
    close(f->lfd);
}

/* Waits until the fake answered `more` requests beyond what it had. */
static void fake_wait(fake *f, long more, double secs)
{
    long want = __atomic_load_n(&f->requests, __ATOMIC_SEQ_CST) + more;
    for (double end = it_mono() + secs; it_mono() < end; it_sleep_ms(20))
        if (__atomic_load_n(&f->requests, __ATOMIC_SEQ_CST) >= want)
            return;
    fail_msg("the fake upstream got no %ld more requests", more);
}

/* Files in g_spool/sub, or -1 when it does not exist. */
static int files_in(const char *sub)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", g_spool, sub);
    DIR *d = opendir(p);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- tests -------------------------------------------------------------------- */

/* 1000 pipelined lines on one connection: 1000 answers in order, 1000
 * events in the set in order. */
static void test_pipelined(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--partitions", "1", NULL);
    agent_start(s, s->port, NULL);
    enum { N = 1000 };
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "p%d", i);
        line(&b, "orders", id, NULL, NULL);
    }
    int fd = cl_connect();
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack *a = calloc(N, sizeof *a);
    size_t got = cl_acks(fd, a, N, 30);
    expect_all_ok(a, N, got);
    it_evs e = it_read_all(s, "orders", 0, "");
    expect_ids(&e, "p", N);
    it_evs_free(&e);
    close(fd);
    free(a);
    sl_buf_free(&b);
    s->passed = true;
}

/* --lane stamps every event; a line or event naming another lane is
 * refused with LaneConflict; the connection goes on. */
static void test_lane(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    /* Declares nothing but lets any lane in, whether or not the server
     * already enforces declared lanes. */
    it_write_config(s, cfg, "lanes.auto = true\nset \"orders\" { partitions = 1 }\n");
    it_start_config(s, cfg, 20);
    agent_start(s, s->port, (const char *[]){"--lane", "feature-x", NULL});
    sl_buf b = SL_BUF_INIT;
    line(&b, "orders", "l0", NULL, NULL);
    line(&b, "orders", "l1", ",\"lane\":\"feature-x\"", NULL);
    line(&b, "orders", "bad", ",\"lane\":\"other\"", NULL);
    line(&b, "orders", "bad2", NULL, ",\"lane\":\"other\"");
    line(&b, "orders", "l2", NULL, ",\"lane\":\"feature-x\"");
    line(&b, "orders", "bad3", ",\"lane\":\"Not_Valid\"", NULL);
    /* The lane checked must be the lane the server reads: a member named
     * twice is refused, and an escaped member name is decoded. */
    line(&b, "orders", "dup1", ",\"lane\":\"feature-x\",\"lane\":\"other\"", NULL);
    line(&b, "orders", "dup2", NULL, ",\"lane\":\"feature-x\",\"lane\":\"other\"");
    line(&b, "orders", "dup3", ",\"set\":\"orders2\"", NULL);
    raw(&b, "{\"set\":\"orders\",\"event\":{\"id\":\"x\"},\"event\":{\"id\":\"y\"}}\n");
    line(&b, "orders", "esc1", ",\"l\\u0061ne\":\"other\"", NULL);
    line(&b, "orders", "esc2", NULL, ",\"l\\u0061ne\":\"other\"");
    int fd = cl_connect();
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[12];
    assert_int_equal(cl_acks(fd, a, 12, 20), 12);
    for (int i = 0; i < 12; i++)
        assert_int_equal(a[i].seq, i + 1);
    for (int i = 6; i < 10; i++) {
        assert_string_equal(a[i].error, "InvalidLine");
        assert_non_null(strstr(a[i].message, "duplicate"));
    }
    assert_string_equal(a[10].error, "LaneConflict");
    assert_string_equal(a[11].error, "LaneConflict");
    assert_true(a[0].ok && a[1].ok && a[4].ok);
    assert_string_equal(a[2].error, "LaneConflict");
    assert_non_null(strstr(a[2].message, "other"));
    assert_string_equal(a[3].error, "LaneConflict");
    assert_string_equal(a[5].error, "InvalidLane");
    it_evs e = it_read_all(s, "orders", 0, "feature-x");
    assert_int_equal(e.n, 3);
    for (size_t i = 0; i < e.n; i++) {
        char id[8];
        snprintf(id, sizeof id, "l%zu", i);
        assert_string_equal(e.v[i].id, id);
        assert_string_equal(e.v[i].lane, "feature-x");
    }
    it_evs_free(&e);
    e = it_read_all(s, "orders", 0, "");
    assert_int_equal(e.n, 0); /* nothing leaked into the base lane */
    it_evs_free(&e);
    close(fd);
    sl_buf_free(&b);
    s->passed = true;
}

/* Bad lines get their own errors and the connection goes on; an over-long
 * line is skipped up to its newline. */
static void test_bad_lines(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--partitions", "1", NULL);
    agent_start(s, s->port, (const char *[]){"--max-line", "4KiB", NULL});
    sl_buf b = SL_BUF_INIT;
    line(&b, "orders", "g0", NULL, NULL);
    raw(&b, "this is not json\n");
    raw(&b, "{\"event\":{\"id\":\"x\"}}\n");
    raw(&b, "{\"set\":\"orders\",\"event\":\"str\"}\n");
    raw(&b, "[1,2]\n");
    raw(&b, "{\"set\":\"bad/name\",\"event\":{}}\n");
    /* 10 KiB in one line: over the 4 KiB limit. */
    raw(&b, "{\"set\":\"orders\",\"event\":{\"pad\":\"");
    for (int i = 0; i < 10240; i++)
        raw(&b, "x");
    raw(&b, "\"}}\n");
    line(&b, "orders", "g1", NULL, NULL);
    /* An event the server refuses: its code comes back for that line. */
    raw(&b, "{\"set\":\"orders\",\"event\":{\"id\":\"noattrs\"}}\n");
    line(&b, "orders", "g2", NULL, NULL);
    /* Bad JSON inside the event, and an unbalanced event: InvalidJSON. */
    raw(&b, "{\"set\":\"orders\",\"event\":{\"id\":tru}}\n");
    raw(&b, "{\"set\":\"orders\",\"event\":{\"id\":[1}}\n");
    int fd = cl_connect();
    /* Send in small pieces, so lines are cut at arbitrary places. */
    for (size_t off = 0; off < b.len; off += 777) {
        size_t n = b.len - off < 777 ? b.len - off : 777;
        assert_int_equal(cl_send(fd, (const char *)b.data + off, n), 0);
        it_sleep_ms(1);
    }
    ack a[12];
    assert_int_equal(cl_acks(fd, a, 12, 20), 12);
    const char *want[12] = {NULL,          "InvalidJSON", "InvalidLine", "InvalidLine",
                            "InvalidLine", "InvalidLine", "TooLarge",    NULL,
                            "*",           NULL,          "InvalidJSON", "InvalidJSON"};
    for (int i = 0; i < 12; i++) {
        assert_int_equal(a[i].seq, i + 1);
        if (!want[i]) {
            if (!a[i].ok)
                fail_msg("line %d: %s: %s", i + 1, a[i].error, a[i].message);
        } else {
            assert_false(a[i].ok);
            if (strcmp(want[i], "*") != 0)
                assert_string_equal(a[i].error, want[i]);
        }
    }
    assert_non_null(strstr(a[6].message, "4096"));
    it_evs e = it_read_all(s, "orders", 0, "");
    expect_ids(&e, "g", 3);
    it_evs_free(&e);
    close(fd);
    sl_buf_free(&b);
    s->passed = true;
}

/* The agent forwards to the HTTP API, so ingest decides what is created:
 * lines whose events the server refuses create no set upstream; a valid one
 * does; past server.max_auto_sets the line gets SetLimit (final, not
 * retried) and nothing is left waiting behind it. */
static void test_refused_lines_create_no_set(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { max_auto_sets = 1 }\n");
    it_start_config(s, cfg, 30);
    agent_start(s, s->port, NULL);
    sl_buf b = SL_BUF_INIT;
    raw(&b, "{\"set\":\"agentjunk\",\"event\":{\"id\":\"noattrs\"}}\n");
    raw(&b, "{\"set\":\"agentjunk2\",\"event\":{\"specversion\":\"0.3\",\"id\":\"x\","
            "\"source\":\"/a\",\"type\":\"t\"}}\n");
    int fd = cl_connect();
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[2];
    assert_int_equal(cl_acks(fd, a, 2, 20), 2);
    assert_false(a[0].ok);
    assert_string_equal(a[0].error, "MissingAttribute");
    assert_false(a[1].ok);
    assert_string_equal(a[1].error, "InvalidEvent");
    assert_int_equal(set_events(s->port, "agentjunk"), -1);
    assert_int_equal(set_events(s->port, "agentjunk2"), -1);
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/sets/agentjunk", s->data);
    assert_int_not_equal(access(dir, F_OK), 0);
    b.len = 0;
    line(&b, "agentok", "g0", NULL, NULL);
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    assert_int_equal(cl_acks(fd, a, 1, 20), 1);
    if (!a[0].ok)
        fail_msg("a valid line to a new set: %s: %s", a[0].error, a[0].message);
    b.len = 0;
    line(&b, "agentover", "g1", NULL, NULL);
    line(&b, "agentok", "g2", NULL, NULL);
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    assert_int_equal(cl_acks(fd, a, 2, 20), 2);
    assert_false(a[0].ok);
    assert_string_equal(a[0].error, "SetLimit");
    assert_non_null(strstr(a[0].message, "max_auto_sets = 1"));
    assert_true(a[1].ok);
    assert_int_equal(set_events(s->port, "agentok"), 2);
    assert_int_equal(set_events(s->port, "agentover"), -1);
    close(fd);
    sl_buf_free(&b);
    s->passed = true;
}

/* A writer thread pacing lines of two sets over the given time: ids a<tag>N
 * go to seta, b<tag>N to setb, so that each connection's events can be told
 * apart (tag "" for a lone writer). */
typedef struct writer {
    int fd;
    int n;
    long ms;
    const char *tag;
    int failed;
} writer;

static void *writer_run(void *p)
{
    writer *w = p;
    enum { CHUNK = 20 };
    int chunks = (w->n + CHUNK - 1) / CHUNK;
    for (int c = 0; c < chunks; c++) {
        sl_buf b = SL_BUF_INIT;
        for (int i = c * CHUNK; i < (c + 1) * CHUNK && i < w->n; i++) {
            char l[256], id[32];
            snprintf(id, sizeof id, "%c%s%d", i % 2 ? 'b' : 'a', w->tag ? w->tag : "", i / 2);
            int n = snprintf(l, sizeof l,
                             "{\"set\":\"%s\",\"event\":{\"specversion\":\"1.0\",\"id\":\"%s\","
                             "\"source\":\"/itest\",\"type\":\"itest\"}}\n",
                             i % 2 ? "setb" : "seta", id);
            sl_buf_append(&b, l, (size_t)n);
        }
        if (cl_send(w->fd, (const char *)b.data, b.len) != 0)
            w->failed = 1;
        sl_buf_free(&b);
        it_sleep_ms(w->ms / chunks);
    }
    return NULL;
}

/* Upstream down for 20 s while 2000 events are written: every line is answered ok
 * (spooled), and once the server starts, all arrive, in order per set (one
 * connection, and --streams 1: the old order per set). */
static void test_upstream_down(void **state)
{
    it_server *s = *state;
    int port = it_free_port();
    assert_true(port > 0);
    agent_start(s, port, (const char *[]){"--spool-after-ms", "300", "--streams", "1", NULL});
    enum { N = 2000 };
    /* The 20 s outage under load, in make test too. */
    writer w = {.fd = cl_connect(), .n = N, .ms = 20000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_run, &w), 0);
    ack *a = calloc(N, sizeof *a);
    size_t got = cl_acks(w.fd, a, N, 60);
    pthread_join(t, NULL);
    assert_int_equal(w.failed, 0);
    expect_all_ok(a, N, got);
    int files;
    long bytes = spool_bytes(&files);
    if (bytes <= 0 || files <= 0)
        fail_msg("nothing in the spool (%ld bytes, %d files)", bytes, files);
    /* The server comes back where the agent looks for it. */
    s->pid = server_at(s, s->data, port, NULL);
    s->port = port;
    wait_events(port, "seta", N / 2, 30);
    wait_events(port, "setb", N / 2, 30);
    it_evs e = it_read_all(s, "seta", 0, "");
    expect_ids(&e, "a", N / 2);
    it_evs_free(&e);
    e = it_read_all(s, "setb", 0, "");
    expect_ids(&e, "b", N / 2);
    it_evs_free(&e);
    for (double end = it_mono() + 10; it_mono() < end && spool_bytes(&files) > 0;)
        it_sleep_ms(20);
    assert_int_equal(spool_bytes(&files), 0); /* drained files are deleted */
    close(w.fd);
    free(a);
    s->passed = true;
}

/* Asserts that the ids of e, with repeats dropped, are prefix0 ..
 * prefix(n-1) in order: nothing lost, order kept; a batch whose answer was
 * lost in a crash may come twice (at-least-once). Returns the repeats. */
static size_t expect_ids_once(const it_evs *e, const char *prefix, size_t n)
{
    char *seen = calloc(n, 1);
    size_t next = 0, dups = 0;
    for (size_t i = 0; i < e->n; i++) {
        size_t pl = strlen(prefix);
        if (strncmp(e->v[i].id, prefix, pl) != 0)
            fail_msg("event %zu has id %s", i, e->v[i].id);
        size_t k = strtoul(e->v[i].id + pl, NULL, 10);
        if (k < n && seen[k]) {
            dups++;
            continue;
        }
        if (k != next)
            fail_msg("event %zu has id %s, want %s%zu (order broken or event lost)", i, e->v[i].id,
                     prefix, next);
        seen[k] = 1;
        next++;
    }
    free(seen);
    if (next != n)
        fail_msg("%zu distinct events read back, want %zu", next, n);
    return dups;
}

/* The events of e whose id starts with prefix (then a digit), in stored
 * order: one writer connection's events. Caller frees with free_only(). */
static it_evs only(const it_evs *e, const char *prefix)
{
    it_evs o = {0};
    size_t pl = strlen(prefix);
    o.v = calloc(e->n ? e->n : 1, sizeof *o.v);
    assert_non_null(o.v);
    for (size_t i = 0; i < e->n; i++)
        if (strncmp(e->v[i].id, prefix, pl) == 0 && e->v[i].id[pl] >= '0' && e->v[i].id[pl] <= '9')
            o.v[o.n++] = e->v[i]; /* borrowed texts */
    return o;
}

static void free_only(it_evs *o)
{
    free(o->v);
    memset(o, 0, sizeof *o);
}

/* Asserts that e holds the events of the nw writers tagged "0-" ..
 * "(nw-1)-" with ids <p><tag>0 .. <p><tag>(n-1) each, every writer's in its
 * own order (repeats allowed when dups is non-NULL; they are counted there).
 * Events of other prefixes are not looked at. */
static void expect_per_conn(const it_evs *e, char p, int nw, size_t n, size_t *dups)
{
    for (int k = 0; k < nw; k++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%c%d-", p, k);
        it_evs o = only(e, prefix);
        if (dups)
            *dups += expect_ids_once(&o, prefix, n);
        else
            expect_ids(&o, prefix, n);
        free_only(&o);
    }
}

/* The server is killed in the middle of the load and comes back later on
 * the same port: requests in flight fail, batches are retried then spooled,
 * and everything arrives once the server is back, in order per writer
 * connection (three of them, on the default single stream). */
static void test_upstream_flaps(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--partitions", "1", NULL);
    int port = s->port;
    agent_start(s, port, (const char *[]){"--spool-after-ms", "300", NULL});
    enum { N = 2000, W = 3 };
    long ms = it_soak() ? 20000 : 5000;
    static const char *tags[W] = {"0-", "1-", "2-"};
    writer w[W];
    pthread_t t[W];
    for (int k = 0; k < W; k++) {
        w[k] = (writer){.fd = cl_connect(), .n = N, .ms = ms, .tag = tags[k]};
        assert_int_equal(pthread_create(&t[k], NULL, writer_run, &w[k]), 0);
    }
    ack *a = calloc(N, sizeof *a);
    it_sleep_ms(ms / 4);
    it_srv_stop(s, SIGKILL, 5);
    it_sleep_ms(ms / 2);
    s->pid = server_at(s, s->data, port, NULL);
    for (int k = 0; k < W; k++) {
        size_t got = cl_acks(w[k].fd, a, N, it_soak() ? 60 : 30);
        pthread_join(t[k], NULL);
        assert_int_equal(w[k].failed, 0);
        expect_all_ok(a, N, got);
    }
    assert_true(it_log_contains(s, "spooling to"));
    wait_events(port, "seta", W * N / 2, 30);
    wait_events(port, "setb", W * N / 2, 30);
    int files;
    for (double end = it_mono() + 15; it_mono() < end && spool_bytes(&files) > 0;)
        it_sleep_ms(20);
    assert_int_equal(spool_bytes(&files), 0);
    it_sleep_ms(200); /* a last retried batch may still be on its way */
    size_t dups = 0;
    it_evs e = it_read_all(s, "seta", 0, "");
    expect_per_conn(&e, 'a', W, N / 2, &dups);
    it_evs_free(&e);
    e = it_read_all(s, "setb", 0, "");
    expect_per_conn(&e, 'b', W, N / 2, &dups);
    it_evs_free(&e);
    if (dups)
        fprintf(stderr, "test_upstream_flaps: %zu events stored twice (answers lost in the kill)\n",
                dups);
    for (int k = 0; k < W; k++)
        close(w[k].fd);
    free(a);
    s->passed = true;
}

/* Upstream down while four connections write, over 4 streams:
 * every line is answered ok (spooled), and once the server starts, all
 * arrive exactly once, each connection's in its own order. */
static void test_upstream_down_streams(void **state)
{
    it_server *s = *state;
    int port = it_free_port();
    agent_start(s, port, (const char *[]){"--spool-after-ms", "300", "--streams", "4", NULL});
    enum { N = 1000, W = 4 };
    static const char *tags[W] = {"0-", "1-", "2-", "3-"};
    writer w[W];
    pthread_t t[W];
    for (int k = 0; k < W; k++) {
        w[k] = (writer){.fd = cl_connect(), .n = N, .ms = 2000, .tag = tags[k]};
        assert_int_equal(pthread_create(&t[k], NULL, writer_run, &w[k]), 0);
    }
    ack *a = calloc(N, sizeof *a);
    for (int k = 0; k < W; k++) {
        size_t got = cl_acks(w[k].fd, a, N, 30);
        pthread_join(t[k], NULL);
        assert_int_equal(w[k].failed, 0);
        expect_all_ok(a, N, got);
    }
    int files;
    long bytes = spool_bytes(&files);
    if (bytes <= 0 || files < W)
        fail_msg("spool holds %ld bytes in %d files, want files of every stream", bytes, files);
    s->pid = server_at(s, s->data, port, NULL);
    s->port = port;
    wait_events(port, "seta", W * N / 2, 30);
    wait_events(port, "setb", W * N / 2, 30);
    it_evs e = it_read_all(s, "seta", 0, "");
    assert_int_equal(e.n, W * N / 2);
    expect_per_conn(&e, 'a', W, N / 2, NULL);
    it_evs_free(&e);
    e = it_read_all(s, "setb", 0, "");
    assert_int_equal(e.n, W * N / 2);
    expect_per_conn(&e, 'b', W, N / 2, NULL);
    it_evs_free(&e);
    for (double end = it_mono() + 10; it_mono() < end && spool_bytes(&files) > 0;)
        it_sleep_ms(20);
    assert_int_equal(spool_bytes(&files), 0);
    for (int k = 0; k < W; k++)
        close(w[k].fd);
    free(a);
    s->passed = true;
}

/* Appends lines <p><k>-0 .. <p><k>-(n-1) of set to b. */
static void conn_lines(sl_buf *b, const char *set, char p, int k, int n)
{
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%c%d-%d", p, k, i);
        line(b, set, id, NULL, NULL);
    }
}

/* With --streams 4, eight connections pipelining to one set: every line is
 * answered in order and each connection's events are stored in its own
 * order, all of them, once. */
static void test_streams_order(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--partitions", "1", NULL);
    agent_start(s, s->port, (const char *[]){"--streams", "4", "--linger-ms", "1", NULL});
    /* The settings line is written just after the socket starts accepting. */
    for (double end = it_mono() + 5; it_mono() < end && !it_log_contains(s, "4 streams per");)
        it_sleep_ms(10);
    assert_true(it_log_contains(s, "4 streams per set and lane"));
    enum { N = 3000, W = 8 };
    int fd[W];
    sl_buf b[W];
    for (int k = 0; k < W; k++) {
        fd[k] = cl_connect();
        b[k] = (sl_buf)SL_BUF_INIT;
        conn_lines(&b[k], "many", 'c', k, N);
    }
    /* Interleaved in small pieces, so that the agent reads the connections
     * in turn and batches of all streams are formed at the same time. */
    for (size_t off = 0; off < b[0].len; off += 4096)
        for (int k = 0; k < W; k++)
            if (off < b[k].len) {
                size_t n = b[k].len - off < 4096 ? b[k].len - off : 4096;
                assert_int_equal(cl_send(fd[k], (const char *)b[k].data + off, n), 0);
            }
    ack *a = calloc(N, sizeof *a);
    for (int k = 0; k < W; k++)
        expect_all_ok(a, N, cl_acks(fd[k], a, N, 30));
    it_evs e = it_read_all(s, "many", 0, "");
    assert_int_equal(e.n, W * N);
    expect_per_conn(&e, 'c', W, N, NULL);
    it_evs_free(&e);
    for (int k = 0; k < W; k++) {
        close(fd[k]);
        sl_buf_free(&b[k]);
    }
    free(a);
    s->passed = true;
}

/* --streams 1 keeps the old order per set across connections: lines of
 * three connections written in turns (each turn answered, so read, before
 * the next) while the server is down are stored in exactly that order once
 * it is up, although they were spooled and drained. */
static void test_streams_one(void **state)
{
    it_server *s = *state;
    int port = it_free_port();
    agent_start(
        s, port,
        (const char *[]){"--streams", "1", "--spool-after-ms", "100", "--linger-ms", "1", NULL});
    enum { W = 3, ROUNDS = 5, L = 20 };
    int fd[W];
    for (int k = 0; k < W; k++)
        fd[k] = cl_connect();
    ack a[L];
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < W; k++) {
            sl_buf b = SL_BUF_INIT;
            for (int i = 0; i < L; i++) {
                char id[32];
                snprintf(id, sizeof id, "s%d", (r * W + k) * L + i);
                line(&b, "one", id, NULL, NULL);
            }
            assert_int_equal(cl_send(fd[k], (const char *)b.data, b.len), 0);
            sl_buf_free(&b);
            assert_int_equal(cl_acks(fd[k], a, L, 20), L);
            for (int i = 0; i < L; i++)
                assert_true(a[i].ok);
        }
    int files;
    assert_true(spool_bytes(&files) > 0);
    s->pid = server_at(s, s->data, port, NULL);
    s->port = port;
    wait_events(port, "one", W * ROUNDS * L, 20);
    it_evs e = it_read_all(s, "one", 0, "");
    expect_ids(&e, "s", W * ROUNDS * L);
    it_evs_free(&e);
    for (int k = 0; k < W; k++)
        close(fd[k]);
    s->passed = true;
}

/* --streams out of 1..64 is refused, on the command line and in --config. */
static void test_streams_setting(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_path(cfg, s, "bad.conf");
    it_write_file(cfg, "streams = 65\n");
    const char *bad[][8] = {
        {NULL, "databus", "--listen", "unix:/nonexistent/x", "--upstream", "127.0.0.1:1",
         "--streams", "0"},
        {NULL, "databus", "--listen", "unix:/nonexistent/x", "--upstream", "127.0.0.1:1",
         "--config", cfg},
    };
    for (int i = 0; i < 2; i++) {
        const char *argv[9];
        memcpy(argv, bad[i], sizeof bad[i]);
        argv[8] = NULL;
        pid_t p = spawn(s, argv);
        int st;
        assert_int_equal(waitpid(p, &st, 0), p);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    }
    assert_int_equal(it_log_count(s, "want 1..64"), 2);
    s->passed = true;
}

/* The spool is bounded: past --spool-max lines are answered SpoolFull,
 * saying the size and the limit. */
static void test_spool_full(void **state)
{
    it_server *s = *state;
    int port = it_free_port();
    agent_start(
        s, port,
        (const char *[]){"--spool-after-ms", "0", "--spool-max", "8KiB", "--linger-ms", "1", NULL});
    enum { N = 300 };
    int fd = cl_connect();
    ack *a = calloc(N, sizeof *a);
    size_t got = 0;
    /* In small groups, so that several batches (files) are written. */
    for (int i = 0; i < N; i += 10) {
        sl_buf b = SL_BUF_INIT;
        for (int j = i; j < i + 10; j++) {
            char id[16];
            snprintf(id, sizeof id, "f%d", j);
            line(&b, "full", id, NULL, ",\"data\":\"padding padding padding padding\"");
        }
        assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
        sl_buf_free(&b);
        got += cl_acks(fd, a + got, 10, 20);
    }
    assert_int_equal(got, N);
    int ok = 0, full = 0;
    const char *msg = NULL;
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].seq, i + 1);
        if (a[i].ok) {
            ok++;
        } else {
            assert_string_equal(a[i].error, "SpoolFull");
            full++;
            msg = a[i].message;
        }
    }
    if (ok == 0 || full == 0)
        fail_msg("%d ok, %d SpoolFull: want both", ok, full);
    assert_non_null(strstr(msg, "8192"));
    int files;
    long bytes = spool_bytes(&files);
    assert_true(bytes > 0 && bytes <= 8192);
    close(fd);
    free(a);
    s->passed = true;
}

/* A stopped agent leaves its spool; the next one drains it at start. */
static void test_restart_drains(void **state)
{
    it_server *s = *state;
    int port = it_free_port();
    agent_start(s, port, (const char *[]){"--spool-after-ms", "100", NULL});
    enum { N = 50 };
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        line(&b, "restart", id, NULL, NULL);
    }
    /* Bad JSON inside an event is refused at once, never spooled. */
    raw(&b, "{\"set\":\"restart\",\"event\":{\"id\":nope}}\n");
    int fd = cl_connect();
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[N + 1];
    assert_int_equal(cl_acks(fd, a, N + 1, 20), N + 1);
    expect_all_ok(a, N, N);
    assert_int_equal(a[N].seq, N + 1);
    assert_string_equal(a[N].error, "InvalidJSON");
    close(fd);
    int st = agent_stop(SIGTERM, 10);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int files;
    assert_true(spool_bytes(&files) > 0);
    /* A damaged copy of the oldest spool file, named to sort first: the
     * next agent must set it aside (CRC mismatch) and send the rest. */
    struct dirent **names;
    int nn = scandir(g_spool, &names, NULL, alphasort);
    char first[PATH_MAX * 2] = "", bad[PATH_MAX * 2];
    for (int i = 0; i < nn; i++) {
        if (!first[0] && strstr(names[i]->d_name, ".spool"))
            snprintf(first, sizeof first, "%s/%s", g_spool, names[i]->d_name);
        free(names[i]);
    }
    free(names);
    assert_true(first[0] != '\0');
    sl_buf f = SL_BUF_INIT;
    assert_int_equal(sl_buf_read_file(&f, first, 1 << 20, NULL), 0);
    f.data[f.len - 2] ^= 0x20; /* one letter of the last event changes case */
    snprintf(bad, sizeof bad, "%s/%020d.spool", g_spool, 0);
    FILE *bf = fopen(bad, "w");
    assert_non_null(bf);
    assert_int_equal(fwrite(f.data, 1, f.len, bf), f.len);
    fclose(bf);
    sl_buf_free(&f);
    s->pid = server_at(s, s->data, port, NULL);
    s->port = port;
    agent_start(s, port, NULL);
    wait_events(port, "restart", N, 20);
    it_evs e = it_read_all(s, "restart", 0, "");
    expect_ids(&e, "r", N);
    it_evs_free(&e);
    for (double end = it_mono() + 10; it_mono() < end && spool_bytes(&files) > 0;)
        it_sleep_ms(20);
    assert_int_equal(spool_bytes(&files), 0);
    assert_true(it_log_contains(s, "left by a previous run"));
    assert_true(it_log_contains(s, "CRC mismatch"));
    char moved[PATH_MAX * 2];
    snprintf(moved, sizeof moved, "%s/corrupt/%020d.spool", g_spool, 0);
    assert_int_equal(access(moved, F_OK), 0);
    sl_buf_free(&b);
    s->passed = true;
}

/* Spool files of several streams left by a stopped agent: the next agent
 * sends all of them, oldest first, before any new batch of their set, from
 * whichever stream; each connection's events stay in its order. */
static void test_restart_streams(void **state)
{
    it_server *s = *state;
    int port = it_free_port();
    agent_start(
        s, port,
        (const char *[]){"--spool-after-ms", "100", "--linger-ms", "1", "--streams", "4", NULL});
    enum { N = 400, W = 4 };
    ack *a = calloc(N, sizeof *a);
    int fd[W];
    for (int k = 0; k < W; k++)
        fd[k] = cl_connect();
    /* In rounds, so that each stream spools several files. */
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < W; k++) {
            sl_buf b = SL_BUF_INIT;
            for (int i = r * N / 4; i < (r + 1) * N / 4; i++) {
                char id[32];
                snprintf(id, sizeof id, "o%d-%d", k, i);
                line(&b, "rs", id, NULL, NULL);
            }
            assert_int_equal(cl_send(fd[k], (const char *)b.data, b.len), 0);
            sl_buf_free(&b);
            it_sleep_ms(5);
        }
    for (int k = 0; k < W; k++) {
        expect_all_ok(a, N, cl_acks(fd[k], a, N, 20));
        close(fd[k]);
    }
    int st = agent_stop(SIGTERM, 10);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int files;
    assert_true(spool_bytes(&files) > 0 && files >= W);
    s->pid = server_at(s, s->data, port, NULL);
    s->port = port;
    agent_start(s, port, (const char *[]){"--linger-ms", "1", "--streams", "4", NULL});
    /* New lines at once, on new connections (so on every stream). */
    for (int k = 0; k < W; k++) {
        fd[k] = cl_connect();
        sl_buf b = SL_BUF_INIT;
        conn_lines(&b, "rs", 'n', k, N);
        assert_int_equal(cl_send(fd[k], (const char *)b.data, b.len), 0);
        sl_buf_free(&b);
    }
    for (int k = 0; k < W; k++) {
        expect_all_ok(a, N, cl_acks(fd[k], a, N, 20));
        close(fd[k]);
    }
    wait_events(port, "rs", 2 * W * N, 20);
    it_evs e = it_read_all(s, "rs", 0, "");
    assert_int_equal(e.n, 2 * W * N);
    for (size_t i = 0; i < e.n; i++)
        if ((i < (size_t)W * N) != (e.v[i].id[0] == 'o'))
            fail_msg("event %zu is %s: a new batch went before the spooled ones", i, e.v[i].id);
    expect_per_conn(&e, 'o', W, N, NULL);
    expect_per_conn(&e, 'n', W, N, NULL);
    it_evs_free(&e);
    assert_true(it_log_contains(s, "left by a previous run"));
    free(a);
    s->passed = true;
}

/* SIGHUP re-reads --config: the new lane and upstream apply to new lines. */
static void test_reload(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], acfg[PATH_MAX], data2[PATH_MAX];
    it_write_config(s, cfg, "lanes.auto = true\nset \"rl\" { partitions = 1 }\n");
    it_start_config(s, cfg, 20);
    it_path(acfg, s, "agent.conf");
    it_write_file(acfg, "# the agent's settings\nupstream = http://127.0.0.1:%d\nlane = alpha\n",
                  s->port);
    agent_start(s, s->port, (const char *[]){"--config", acfg, NULL});
    /* --upstream on the command line wins at start; the file wins on reload. */
    int fd = cl_connect();
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "x%d", i);
        line(&b, "rl", id, NULL, NULL);
    }
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[5];
    expect_all_ok(a, 5, cl_acks(fd, a, 5, 20));
    /* A second server; the reloaded file points the agent there. */
    int port2 = it_free_port();
    it_path(data2, s, "data2");
    g_extra = server_at(s, data2, port2, cfg);
    it_write_file(acfg, "upstream = 127.0.0.1:%d\nlane = beta\nlinger_ms = 2\nstreams = 2\n",
                  port2);
    int before = it_log_count(s, "reloaded");
    kill(g_agent, SIGHUP);
    for (double end = it_mono() + 10; it_mono() < end && it_log_count(s, "reloaded") == before;)
        it_sleep_ms(10);
    assert_true(it_log_count(s, "reloaded") > before);
    assert_true(it_log_contains(s, "streams 2"));
    sl_buf_free(&b);
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "y%d", i);
        line(&b, "rl", id, NULL, NULL);
    }
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a2[5];
    assert_int_equal(cl_acks(fd, a2, 5, 20), 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(a2[i].seq, 6 + i);
        assert_true(a2[i].ok);
    }
    it_evs e = it_read_all(s, "rl", 0, "alpha");
    expect_ids(&e, "x", 5);
    it_evs_free(&e);
    it_server s2 = *s;
    s2.port = port2;
    e = it_read_all(&s2, "rl", 0, "beta");
    expect_ids(&e, "y", 5);
    it_evs_free(&e);
    assert_int_equal(set_events(s->port, "rl"), 5); /* nothing more went to the first */
    /* A broken file is refused and the settings kept. */
    it_write_file(acfg, "lane = NOT VALID\n");
    kill(g_agent, SIGHUP);
    for (double end = it_mono() + 10; it_mono() < end && !it_log_contains(s, "reload failed");)
        it_sleep_ms(10);
    assert_true(it_log_contains(s, "reload failed"));
    close(fd);
    sl_buf_free(&b);
    s->passed = true;
}

/* --config-set: the newest event of a set on the bus sets the agent's
 * settings; a bad one is refused and the settings kept. */
static void test_config_set(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\nset \"cs\" { partitions = 1 }\n"
                    "set \"agentcfg\" { partitions = 1 }\n");
    it_start_config(s, cfg, 20);
    agent_start(s, s->port,
                (const char *[]){"--config-set", "agentcfg", "--config-poll-ms", "100", NULL});
    char *ev = it_event("c1", ",\"data\":{\"lane\":\"gamma\",\"linger_ms\":2}");
    it_post_one(s, "agentcfg", ev, &(int){0}, &(int64_t){0});
    free(ev);
    for (double end = it_mono() + 10; it_mono() < end && !it_log_contains(s, "applied event");)
        it_sleep_ms(20);
    assert_true(it_log_contains(s, "config set agentcfg: applied event 0/0"));
    int fd = cl_connect();
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        line(&b, "cs", id, NULL, NULL);
    }
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[3];
    expect_all_ok(a, 3, cl_acks(fd, a, 3, 20));
    it_evs e = it_read_all(s, "cs", 0, "gamma");
    expect_ids(&e, "c", 3);
    it_evs_free(&e);
    /* A bad setting: refused as a whole, the lane stays gamma. */
    ev = it_event("c2", ",\"data\":{\"lane\":\"NOT VALID\",\"linger_ms\":3}");
    it_post_one(s, "agentcfg", ev, &(int){0}, &(int64_t){0});
    free(ev);
    for (double end = it_mono() + 10; it_mono() < end && !it_log_contains(s, "not applied");)
        it_sleep_ms(20);
    assert_true(it_log_contains(s, "event 0/1 not applied"));
    sl_buf_free(&b);
    line(&b, "cs", "c3", NULL, NULL);
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    assert_int_equal(cl_acks(fd, a, 1, 20), 1);
    assert_int_equal(a[0].seq, 4);
    assert_true(a[0].ok);
    e = it_read_all(s, "cs", 0, "gamma");
    expect_ids(&e, "c", 4);
    it_evs_free(&e);
    /* The config set cannot move the agent to another upstream. */
    ev = it_event("c4", ",\"data\":{\"upstream\":\"http://127.0.0.1:1\",\"linger_ms\":4}");
    it_post_one(s, "agentcfg", ev, &(int){0}, &(int64_t){0});
    free(ev);
    for (double end = it_mono() + 10;
         it_mono() < end && !it_log_contains(s, "key \"upstream\" ignored");)
        it_sleep_ms(20);
    assert_true(it_log_contains(s, "event 0/2: key \"upstream\" ignored"));
    sl_buf_free(&b);
    line(&b, "cs", "c4", NULL, NULL);
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    assert_int_equal(cl_acks(fd, a, 1, 20), 1);
    assert_int_equal(a[0].seq, 5);
    assert_true(a[0].ok);
    e = it_read_all(s, "cs", 0, "gamma");
    expect_ids(&e, "c", 5);
    it_evs_free(&e);
    close(fd);
    sl_buf_free(&b);
    s->passed = true;
}

/* SIGTERM answers every pending line and exits 0; a second agent on the
 * same live socket is refused. */
static void test_stop_and_socket(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--partitions", "1", NULL);
    int tport = it_free_port();
    char tlisten[32];
    snprintf(tlisten, sizeof tlisten, "127.0.0.1:%d", tport);
    agent_start(s, s->port, (const char *[]){"--linger-ms", "200", "--listen", tlisten, NULL});
    /* The TCP listener speaks the same protocol. */
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)tport),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int tfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(tfd, (struct sockaddr *)&sin, sizeof sin), 0);
    sl_buf tb = SL_BUF_INIT;
    line(&tb, "tcp", "tcp0", NULL, NULL);
    raw(&tb, "nope\n");
    assert_int_equal(cl_send(tfd, (const char *)tb.data, tb.len), 0);
    ack ta[2];
    assert_int_equal(cl_acks(tfd, ta, 2, 10), 2);
    assert_true(ta[0].ok && ta[0].seq == 1);
    assert_string_equal(ta[1].error, "InvalidJSON");
    close(tfd);
    sl_buf_free(&tb);
    struct stat st;
    assert_int_equal(stat(g_sock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0660);
    /* A second agent on the same socket must refuse to start. */
    char up[64], lis[PATH_MAX + 8];
    snprintf(up, sizeof up, "http://127.0.0.1:%d", s->port);
    snprintf(lis, sizeof lis, "unix:%s", g_sock);
    const char *argv[] = {NULL, "databus", "--listen", lis, "--upstream",
                          up,   "--spool", g_spool,    NULL};
    pid_t p2 = spawn(s, argv);
    int wst;
    assert_int_equal(waitpid(p2, &wst, 0), p2);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) != 0);
    assert_true(it_log_contains(s, "another agent is listening"));
    int fd = cl_connect();
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "t%d", i);
        line(&b, "stop", id, NULL, NULL);
    }
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    it_sleep_ms(20); /* inside the 200 ms linger: the batch is still open */
    kill(g_agent, SIGTERM);
    ack a[20];
    expect_all_ok(a, 20, cl_acks(fd, a, 20, 10));
    int est = agent_stop(SIGTERM, 10);
    assert_true(est >= 0 && WIFEXITED(est) && WEXITSTATUS(est) == 0);
    it_evs e = it_read_all(s, "stop", 0, "");
    expect_ids(&e, "t", 20);
    it_evs_free(&e);
    assert_int_equal(access(g_sock, F_OK), -1); /* the socket file is removed */
    close(fd);
    sl_buf_free(&b);
    s->passed = true;
}

/* A 2xx that is not a sluice ingest answer for the batch (a proxy's HTML
 * page, a results array one entry short, a 204) and a 403 leave the outcome
 * unknown: no line is answered until upstream answers properly. */
static void test_upstream_not_sluice(void **state)
{
    it_server *s = *state;
    fake f;
    fake_start(&f, FAKE_HTML);
    agent_start(s, f.port,
                (const char *[]){"--spool-after-ms", "600000", "--linger-ms", "1", NULL});
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "n%d", i);
        line(&b, "ns", id, NULL, NULL);
    }
    int fd = cl_connect();
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[5];
    fake_wait(&f, 1, 10);
    static const int modes[] = {FAKE_SHORT, FAKE_EMPTY, FAKE_403};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        f.mode = modes[i];
        fake_wait(&f, 1, 10);
    }
    fake_wait(&f, 1, 10); /* surely answered in the last mode */
    assert_int_equal(cl_acks(fd, a, 5, 0.3), 0);
    assert_int_equal(f.accepted, 0);
    f.mode = FAKE_OK;
    expect_all_ok(a, 5, cl_acks(fd, a, 5, 20));
    assert_int_equal(f.accepted, 5);
    assert_true(it_log_contains(s, "not a sluice ingest answer"));
    close(fd);
    sl_buf_free(&b);
    kill_wait(&g_agent);
    fake_stop(&f);
    s->passed = true;
}

/* A spooled (acknowledged) batch is never set aside for an answer that is
 * not the server's verdict (302, 404 page, 403, HTML 200, short results):
 * it stays in the spool. Only a sluice error answer such as 400 moves it to
 * rejected/, next to (never over) an earlier run's file of the same name. */
static void test_upstream_refusals_spooled(void **state)
{
    it_server *s = *state;
    char rej[PATH_MAX * 2], old[PATH_MAX * 3];
    assert_int_equal(mkdir(g_spool, 0700), 0);
    snprintf(rej, sizeof rej, "%s/rejected", g_spool);
    assert_int_equal(mkdir(rej, 0700), 0);
    snprintf(old, sizeof old, "%s/%020d.spool", rej, 1);
    FILE *of = fopen(old, "w");
    assert_non_null(of);
    fputs("earlier run", of);
    fclose(of);
    fake f;
    fake_start(&f, FAKE_302);
    agent_start(s, f.port, (const char *[]){"--spool-after-ms", "0", "--linger-ms", "1", NULL});
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        line(&b, "rs", id, NULL, NULL);
    }
    int fd = cl_connect();
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[3];
    expect_all_ok(a, 3, cl_acks(fd, a, 3, 20)); /* spooled */
    int files;
    assert_true(spool_bytes(&files) > 0);
    assert_int_equal(files, 1);
    static const int modes[] = {FAKE_404_HTML, FAKE_403, FAKE_HTML, FAKE_SHORT, FAKE_EMPTY};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        f.mode = modes[i];
        fake_wait(&f, 1, 15);
    }
    fake_wait(&f, 1, 15);
    spool_bytes(&files);
    assert_int_equal(files, 1);
    assert_int_equal(files_in("rejected"), 1);
    f.mode = FAKE_400_SLUICE;
    for (double end = it_mono() + 15; it_mono() < end && files_in("rejected") < 2;)
        it_sleep_ms(20);
    assert_int_equal(files_in("rejected"), 2);
    spool_bytes(&files);
    assert_int_equal(files, 0);
    sl_buf_free(&b);
    assert_int_equal(sl_buf_read_file(&b, old, 1 << 20, NULL), 0);
    assert_int_equal(b.len, 11); /* the earlier run's file is untouched */
    sl_buf_free(&b);
    snprintf(old, sizeof old, "%s/%020d-1.spool", rej, 1);
    assert_int_equal(access(old, F_OK), 0);
    assert_true(it_log_contains(s, "InvalidBatch: scripted refusal"));
    /* Upstream is up again: a memory batch gets the server's refusal. */
    line(&b, "rs", "s3", NULL, NULL);
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    assert_int_equal(cl_acks(fd, a, 1, 20), 1);
    assert_int_equal(a[0].seq, 4);
    assert_string_equal(a[0].error, "InvalidBatch");
    f.mode = FAKE_OK;
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    assert_int_equal(cl_acks(fd, a, 1, 20), 1);
    assert_int_equal(a[0].seq, 5);
    assert_true(a[0].ok);
    assert_int_equal(f.accepted, 1);
    close(fd);
    sl_buf_free(&b);
    kill_wait(&g_agent);
    fake_stop(&f);
    s->passed = true;
}

/* One set whose batches keep failing (5xx) while another set goes through:
 * the failing one is down on its own and reaches the spool (its lines are
 * answered ok from there) instead of waiting in memory, and its batch keeps
 * being retried. */
static void test_one_set_failing(void **state)
{
    it_server *s = *state;
    fake f;
    fake_start(&f, FAKE_OK);
    f.fail_path = "/sets/bad/";
    agent_start(s, f.port, (const char *[]){"--spool-after-ms", "300", "--linger-ms", "1", NULL});
    int fb = cl_connect(), fg = cl_connect();
    sl_buf b = SL_BUF_INIT;
    line(&b, "bad", "b0", NULL, NULL);
    assert_int_equal(cl_send(fb, (const char *)b.data, b.len), 0);
    ack a[1];
    size_t got_bad = 0;
    long good = 0;
    /* The good set succeeds every 20 ms meanwhile. */
    for (double end = it_mono() + 8; it_mono() < end && !got_bad; good++) {
        sl_buf_free(&b);
        char id[16];
        snprintf(id, sizeof id, "g%ld", good);
        line(&b, "good", id, NULL, NULL);
        assert_int_equal(cl_send(fg, (const char *)b.data, b.len), 0);
        ack g[1];
        assert_int_equal(cl_acks(fg, g, 1, 10), 1);
        assert_true(g[0].ok);
        got_bad = cl_acks(fb, a, 1, 0.02);
    }
    assert_int_equal(got_bad, 1);
    assert_true(a[0].ok);
    int files;
    assert_true(spool_bytes(&files) > 0);
    assert_int_equal(files, 1);
    long r = f.requests;
    fake_wait(&f, 2, 10); /* still retried */
    assert_true(f.requests > r);
    f.fail_path = NULL;
    for (double end = it_mono() + 15; it_mono() < end && spool_bytes(&files) > 0;)
        it_sleep_ms(20);
    assert_int_equal(spool_bytes(&files), 0);
    assert_int_equal(f.accepted, good + 1);
    close(fb);
    close(fg);
    sl_buf_free(&b);
    kill_wait(&g_agent);
    fake_stop(&f);
    s->passed = true;
}

/* A spool file that cannot be read (here: its name is a directory,
 * as an I/O error or EMFILE would be) is neither skipped nor set aside: it
 * stays at the head, is retried, and is sent once it reads again. At start,
 * the agent refuses to run rather than move it to corrupt/. */
static void test_spool_read_error(void **state)
{
    it_server *s = *state;
    fake f;
    fake_start(&f, FAKE_503);
    agent_start(s, f.port, (const char *[]){"--spool-after-ms", "0", "--linger-ms", "1", NULL});
    sl_buf b = SL_BUF_INIT;
    line(&b, "rd", "r0", NULL, NULL);
    int fd = cl_connect();
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[1];
    expect_all_ok(a, 1, cl_acks(fd, a, 1, 20)); /* spooled */
    char file[PATH_MAX * 2], aside[PATH_MAX * 3];
    snprintf(file, sizeof file, "%s/%020d.spool", g_spool, 1);
    snprintf(aside, sizeof aside, "%s.keep", file);
    assert_int_equal(rename(file, aside), 0);
    assert_int_equal(mkdir(file, 0700), 0);
    f.mode = FAKE_OK;
    for (double end = it_mono() + 10;
         it_mono() < end && !it_log_contains(s, "not a regular file; retrying");)
        it_sleep_ms(20);
    assert_true(it_log_contains(s, "not a regular file; retrying"));
    it_sleep_ms(500);
    assert_int_equal(f.accepted, 0);
    assert_int_equal(rmdir(file), 0);
    assert_int_equal(rename(aside, file), 0);
    for (double end = it_mono() + 15; it_mono() < end && f.accepted < 1;)
        it_sleep_ms(20);
    assert_int_equal(f.accepted, 1);
    assert_int_equal(files_in("corrupt"), -1);
    close(fd);
    kill_wait(&g_agent);
    /* At start: refused, the file kept. */
    assert_int_equal(mkdir(file, 0700), 0);
    char lis[PATH_MAX + 8], up[64];
    snprintf(lis, sizeof lis, "unix:%s", g_sock);
    snprintf(up, sizeof up, "http://127.0.0.1:%d", f.port);
    const char *argv[] = {NULL, "databus", "--listen", lis, "--upstream",
                          up,   "--spool", g_spool,    NULL};
    g_agent = spawn(s, argv);
    int st = 0;
    for (double end = it_mono() + 15; it_mono() < end && g_agent; it_sleep_ms(10))
        if (waitpid(g_agent, &st, WNOHANG) == g_agent)
            g_agent = 0;
    assert_int_equal(g_agent, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    assert_true(it_log_contains(s, "(the file is kept; not starting)"));
    struct stat sb;
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal(files_in("corrupt"), -1);
    rmdir(file);
    sl_buf_free(&b);
    fake_stop(&f);
    s->passed = true;
}

/* Starts the agent with --spool dir and expects it to exit non-zero at
 * start, logging want. */
static void agent_refuses(it_server *s, const char *dir, const char *want)
{
    char lis[PATH_MAX + 8];
    snprintf(lis, sizeof lis, "unix:%s", g_sock);
    const char *argv[] = {NULL,      "databus", "--listen", lis, "--upstream", "http://127.0.0.1:1",
                          "--spool", dir,       NULL};
    g_agent = spawn(s, argv);
    int st = 0;
    for (double end = it_mono() + 10; it_mono() < end; it_sleep_ms(10))
        if (waitpid(g_agent, &st, WNOHANG) == g_agent) {
            g_agent = 0;
            break;
        }
    if (g_agent)
        fail_msg("the agent started with spool %s", dir);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    if (!it_log_contains(s, want))
        fail_msg("no \"%s\" in the log", want);
}

/* The spool dir must be the agent user's own, 0700, and not a symlink. */
static void test_spool_dir_checks(void **state)
{
    it_server *s = *state;
    assert_int_equal(mkdir(g_spool, 0700), 0);
    assert_int_equal(chmod(g_spool, 0750), 0);
    agent_refuses(s, g_spool, "gives other users access");
    assert_int_equal(chmod(g_spool, 0700), 0);
    char link[PATH_MAX * 2];
    snprintf(link, sizeof link, "%s-link", g_spool);
    assert_int_equal(symlink(g_spool, link), 0);
    agent_refuses(s, link, "symlinks are refused");
    unlink(link);
    s->passed = true;
}

static long rss_kib(pid_t pid)
{
    char p[64], l[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long kib = -1;
    while (f && fgets(l, sizeof l, f))
        if (strncmp(l, "VmRSS:", 6) == 0)
            kib = strtol(l + 6, NULL, 10);
    if (f)
        fclose(f);
    return kib;
}

/* Whether the process maps a file whose path holds what (a library). */
static bool maps_have(pid_t pid, const char *what)
{
    char p[64], l[1024];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "r");
    bool found = false;
    while (f && !found && fgets(l, sizeof l, f))
        found = strstr(l, what) != NULL;
    if (f)
        fclose(f);
    return found;
}

typedef struct flood {
    int fd;
    size_t n;
} flood;

static void *flood_run(void *p)
{
    flood *fl = p;
    char *z = malloc(fl->n);
    memset(z, '\n', fl->n);
    cl_send(fl->fd, z, fl->n);
    free(z);
    return NULL;
}

/* A client that writes empty lines and reads no answers: the answers the
 * agent holds for it stay bounded, and every line is still answered once it
 * reads. Connections past the limit are refused. */
static void test_answer_bound(void **state)
{
    it_server *s = *state;
    agent_start(s, it_free_port(), NULL);
    int fd = cl_connect();
    it_sleep_ms(200);
    long before = rss_kib(g_agent);
    flood fl = {fd, 1000000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flood_run, &fl), 0);
    it_sleep_ms(1500);
    long during = rss_kib(g_agent);
    print_message("agent RSS %ld KiB before, %ld KiB with unread answers\n", before, during);
    /* A sanitizer build keeps freed memory in quarantine: its RSS says
     * nothing about what the agent holds. */
    if (during - before > 16 * 1024 && !maps_have(g_agent, "libasan"))
        fail_msg("agent grew from %ld to %ld KiB holding unread answers", before, during);
    size_t got = 0;
    char tmp[65536];
    for (double end = it_mono() + 60; it_mono() < end && got < fl.n;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            got += tmp[i] == '\n';
    }
    pthread_join(th, NULL);
    assert_int_equal(got, fl.n);
    close(fd);
    /* 1024 connections are served; more are closed at once. */
    enum { NC = 1030 };
    int *fds = calloc(NC, sizeof *fds);
    for (int i = 0; i < NC; i++)
        fds[i] = cl_connect();
    for (double end = it_mono() + 10; it_mono() < end && !it_log_contains(s, "(the limit)");)
        it_sleep_ms(20);
    assert_true(it_log_contains(s, "connections open (the limit)"));
    struct pollfd p = {.fd = fds[NC - 1], .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(read(fds[NC - 1], tmp, sizeof tmp), 0);
    for (int i = 0; i < NC; i++)
        close(fds[i]);
    free(fds);
    /* Once they are closed, new ones are served again. */
    it_sleep_ms(300);
    fd = cl_connect();
    sl_buf b = SL_BUF_INIT;
    raw(&b, "x\n");
    assert_int_equal(cl_send(fd, (const char *)b.data, b.len), 0);
    ack a[1];
    assert_int_equal(cl_acks(fd, a, 1, 10), 1);
    assert_string_equal(a[0].error, "InvalidJSON");
    close(fd);
    sl_buf_free(&b);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    if (it_init("test_agent"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_pipelined),
        T(test_lane),
        T(test_bad_lines),
        T(test_refused_lines_create_no_set),
        T(test_upstream_down),
        T(test_upstream_flaps),
        T(test_upstream_down_streams),
        T(test_streams_order),
        T(test_streams_one),
        T(test_streams_setting),
        T(test_spool_full),
        T(test_restart_drains),
        T(test_restart_streams),
        T(test_reload),
        T(test_config_set),
        T(test_stop_and_socket),
        T(test_upstream_not_sluice),
        T(test_upstream_refusals_spooled),
        T(test_spool_dir_checks),
        T(test_answer_bound),
        T(test_one_set_failing),
        T(test_spool_read_error),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
