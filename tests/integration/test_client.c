/*
 * tests/integration/test_client.c — libsluice (include/sluice.h, client/)
 * against the real `bin/sluice serve`: 4 threads × 2500 events over HTTP, all
 * acknowledged once and all read back; a per-entry refusal failing only its
 * event; argument checks and the queue bound; a server that starts after the
 * events were sent; lanes; and the Databus agent transport when
 * `bin/sluice databus` exists (skipped otherwise). Scripted fake agents and a
 * scripted HTTP receiver drive the wire protocols exactly: retries, refusals,
 * a slow agent and a full socket waited for (not reconnected to), and the
 * reconnect after a refused connect coming after the back-off.
 *
 * The client library is linked as build/lib/libsluice.a next to the harness's
 * libsluice-core.a: this test also proves they share no symbol. Callbacks run
 * on the client's I/O thread, so they only record into `rec` (never assert);
 * the main thread checks afterwards.
 */
#include "itest.h"
#include "receiver.h"

#include <sluice.h>

#include "client/client_internal.h" /* sl_client__agent_stall_min_ms, a test hook */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 30000
#define MAX_IDS 20000

/* ---- recording delivery callbacks ------------------------------------------------ */

typedef struct rec {
    pthread_mutex_t lock;
    int ok, failed, twice, calls;
    unsigned char seen[MAX_IDS + 1]; /* how many callbacks each id got */
    int status[MAX_IDS + 1];
    char error[MAX_IDS + 1][32];
    char message[64][128]; /* of the first failures */
} rec;

static rec *rec_new(void)
{
    rec *r = calloc(1, sizeof *r);
    assert_non_null(r);
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

static void rec_free(rec *r)
{
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static void on_delivery(void *opaque, uint64_t id, int status, const char *error,
                        const char *message)
{
    rec *r = opaque;
    pthread_mutex_lock(&r->lock);
    r->calls++;
    if (id <= MAX_IDS) {
        if (r->seen[id]++)
            r->twice++;
        r->status[id] = status;
        snprintf(r->error[id], sizeof r->error[id], "%s", error ? error : "");
    }
    if (status == 0) {
        r->ok++;
        if (error || message)
            r->twice += 1000; /* ok results carry no strings: make the test fail */
    } else {
        if (r->failed < 64)
            snprintf(r->message[r->failed], sizeof r->message[0], "%s", message ? message : "");
        r->failed++;
    }
    pthread_mutex_unlock(&r->lock);
}

static sl_client *open_rec(const char *addr, rec *r, int timeout_ms, size_t queue_bytes)
{
    char err[256] = "";
    sl_client_options o = {.on_delivery = on_delivery,
                           .opaque = r,
                           .timeout_ms = timeout_ms,
                           .queue_bytes = queue_bytes};
    sl_client *c = sl_client_open_opts(addr, &o, err, sizeof err);
    if (!c)
        fail_msg("sl_client_open_opts(%s): %s", addr, err);
    return c;
}

static void http_addr(char *out, size_t n, int port)
{
    snprintf(out, n, "http://127.0.0.1:%d", port);
}

/* A CloudEvent with id "<prefix>-<n>" into buf (256 bytes). */
static const char *event(char *buf, const char *prefix, int n)
{
    snprintf(buf, 256,
             "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/client\",\"type\":\"t\","
             "\"data\":{\"n\":%d}}",
             prefix, n, n);
    return buf;
}

/* The partition count of set (GET /v1/sets/SET). */
static int partitions(it_server *s, const char *set)
{
    it_resp r = it_get(s, "/v1/sets/%s", set);
    assert_int_equal(r.status, 200);
    json_t *j = it_parse_json(&r);
    int n = (int)json_integer_value(json_object_get(j, "partitions"));
    json_decref(j);
    it_resp_free(&r);
    assert_true(n > 0);
    return n;
}

/* Every event of set on lane ("" base, "*" all), over all partitions. */
static it_evs read_set(it_server *s, const char *set, const char *lane)
{
    it_evs all = {0};
    int np = partitions(s, set);
    for (int p = 0; p < np; p++) {
        it_evs e = it_read_all(s, set, p, lane);
        for (size_t i = 0; i < e.n; i++) {
            if (all.n == all.cap) {
                all.cap = all.cap ? all.cap * 2 : 1024;
                all.v = realloc(all.v, all.cap * sizeof *all.v);
                assert_non_null(all.v);
            }
            all.v[all.n++] = e.v[i];
            e.v[i].text = NULL; /* moved */
        }
        it_evs_free(&e);
    }
    return all;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Asserts the events' ids are exactly "<prefix>-0" … "<prefix>-(n-1)" (a
 * prefix per thread: "t0".."t3"), each once. */
static void expect_ids(const it_evs *e, size_t want)
{
    assert_int_equal(e->n, want);
    char **ids = calloc(e->n ? e->n : 1, sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < e->n; i++)
        ids[i] = (char *)e->v[i].id;
    qsort(ids, e->n, sizeof *ids, cmp_str);
    for (size_t i = 1; i < e->n; i++)
        if (strcmp(ids[i - 1], ids[i]) == 0)
            fail_msg("event id %s stored twice", ids[i]);
    free(ids);
}

/* ---- 1. many threads over HTTP ------------------------------------------------------ */

typedef struct sender {
    sl_client *c;
    const char *set;
    int thread, n;
    atomic_int errors;
} sender;

static void *send_thread(void *arg)
{
    sender *w = arg;
    char buf[256], prefix[16];
    snprintf(prefix, sizeof prefix, "t%d", w->thread);
    for (int i = 0; i < w->n; i++) {
        int64_t id = sl_client_send(w->c, w->set, event(buf, prefix, i), NULL);
        if (id <= 0)
            atomic_fetch_add(&w->errors, 1);
    }
    return NULL;
}

static void test_threads(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char addr[64];
    http_addr(addr, sizeof addr, s->port);
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, 10000, 0);
    enum { THREADS = 4, PER = 2500 };
    pthread_t th[THREADS];
    sender w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (sender){.c = c, .set = "orders", .thread = t, .n = PER};
        assert_int_equal(pthread_create(&th[t], NULL, send_thread, &w[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(atomic_load(&w[t].errors), 0);
    }
    assert_int_equal(sl_client_flush(c, WAIT_MS), 0);
    pthread_mutex_lock(&r->lock);
    assert_int_equal(r->ok, THREADS * PER);
    assert_int_equal(r->failed, 0);
    assert_int_equal(r->twice, 0);
    for (int id = 1; id <= THREADS * PER; id++)
        assert_int_equal(r->seen[id], 1);
    pthread_mutex_unlock(&r->lock);
    sl_client_close(c);
    assert_int_equal(r->calls, THREADS * PER); /* close added none */

    it_evs e = read_set(s, "orders", "");
    expect_ids(&e, THREADS * PER);
    it_evs_free(&e);
    rec_free(r);
    s->passed = true;
}

/* ---- 2. a refused entry fails alone ------------------------------------------------- */

static void test_entry_failure(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char addr[64], buf[256];
    http_addr(addr, sizeof addr, s->port);
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, 10000, 0);
    int64_t bad = 0, pretty = 0;
    for (int i = 0; i < 20; i++) {
        int64_t id;
        if (i == 7) /* no id: MissingAttribute */
            id = bad = sl_client_send(c, "mixed",
                                      "{\"specversion\":\"1.0\",\"source\":\"/c\","
                                      "\"type\":\"t\"}",
                                      NULL);
        else if (i == 12) /* pretty-printed: its line breaks must not split the NDJSON line */
            id = pretty = sl_client_send(c, "mixed",
                                         "{\n  \"specversion\": \"1.0\",\n"
                                         "  \"id\": \"pretty\",\n  \"source\": \"/c\",\r\n"
                                         "  \"type\": \"t\"\n}\n",
                                         NULL);
        else
            id = sl_client_send(c, "mixed", event(buf, "m", i), NULL);
        assert_true(id > 0);
    }
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 0); /* a failure is counted once */
    pthread_mutex_lock(&r->lock);
    assert_int_equal(r->ok, 19);
    assert_int_equal(r->failed, 1);
    assert_int_equal(r->status[bad], SL_CLIENT_EREJECTED);
    assert_string_equal(r->error[bad], "MissingAttribute");
    assert_non_null(strstr(r->message[0], "id"));
    assert_int_equal(r->status[pretty], 0);
    pthread_mutex_unlock(&r->lock);

    /* An event over the server's max_event_bytes (1 MiB) is refused per entry
     * with TooLarge; it goes alone in its batch (batch_bytes is 1 MiB too). */
    size_t big = (size_t)1200 << 10;
    char *ev = malloc(big + 200);
    assert_non_null(ev);
    int k = snprintf(ev, 200,
                     "{\"specversion\":\"1.0\",\"id\":\"big\",\"source\":\"/c\","
                     "\"type\":\"t\",\"data\":\"");
    memset(ev + k, 'x', big);
    strcpy(ev + k + big, "\"}");
    int64_t bid = sl_client_send(c, "mixed", ev, NULL);
    free(ev);
    assert_true(bid > 0);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    pthread_mutex_lock(&r->lock);
    assert_int_equal(r->status[bid], SL_CLIENT_EREJECTED);
    assert_string_equal(r->error[bid], "TooLarge");
    pthread_mutex_unlock(&r->lock);
    sl_client_close(c);

    it_evs e = read_set(s, "mixed", "");
    expect_ids(&e, 19);
    it_evs_free(&e);
    rec_free(r);
    s->passed = true;
}

/* A whole-request refusal (404 NoSuchSet with auto-create off) fails every
 * event of the batch with the server's code; it is not retried. */
static void test_request_refused(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--no-auto-create", NULL);
    char addr[64], buf[256];
    http_addr(addr, sizeof addr, s->port);
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, 10000, 0);
    for (int i = 0; i < 3; i++)
        assert_true(sl_client_send(c, "nosuch", event(buf, "n", i), NULL) > 0);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 3);
    sl_client_close(c);
    assert_int_equal(r->calls, 3);
    for (int id = 1; id <= 3; id++) {
        assert_int_equal(r->status[id], SL_CLIENT_EREJECTED);
        assert_string_equal(r->error[id], "NoSuchSet");
    }
    assert_true(strlen(r->message[0]) > 0);
    rec_free(r);
    s->passed = true;
}

/* ---- 3. arguments and the queue bound ----------------------------------------------- */

/* Two pages, the second PROT_NONE: guarded() copies a string so that its NUL
 * is the last byte before it, and a read past the end crashes the test
 * (picohttpparser's trick). */
static char *guard_page;

static const char *guarded(const char *str)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (!guard_page) {
        guard_page =
            mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(guard_page != MAP_FAILED);
        assert_int_equal(mprotect(guard_page + pg, (size_t)pg, PROT_NONE), 0);
    }
    size_t n = strlen(str) + 1;
    assert_true(n <= (size_t)pg);
    char *p = guard_page + pg - n;
    memcpy(p, str, n);
    return p;
}

static void test_bad_args(void **state)
{
    it_server *s = *state;
    char err[256];
    const char *ev = "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/c\",\"type\":\"t\"}";

    /* Addresses. */
    const char *bad_addr[] = {"",           "ftp://x",       "http://",
                              "tcp:nohost", "tcp:h:0",       "tcp:h:99999",
                              "unix:",      "relative/path", NULL};
    for (int i = 0; bad_addr[i]; i++) {
        err[0] = '\0';
        assert_null(sl_client_open_opts(bad_addr[i], NULL, err, sizeof err));
        assert_true(err[0] != '\0');
    }
    assert_null(sl_client_open(NULL));
    sl_client_options lo = {.lane = "Bad_Lane"};
    assert_null(sl_client_open_opts("http://127.0.0.1:1", &lo, err, sizeof err));
    assert_non_null(strstr(err, "lane"));
    setenv("SLUICE_LANE", "NOT VALID", 1);
    assert_null(sl_client_open_opts("http://127.0.0.1:1", NULL, err, sizeof err));
    assert_non_null(strstr(err, "SLUICE_LANE"));
    unsetenv("SLUICE_LANE");

    /* Sends to a port nobody listens on: nothing here is ever delivered. */
    rec *r = rec_new();
    int port = it_free_port();
    char addr[64];
    http_addr(addr, sizeof addr, port);
    sl_client *c = open_rec(addr, r, 300, 64 * 1024);
    char longset[140];
    memset(longset, 'a', 129);
    longset[129] = '\0';
    const char *bad_sets[] = {"", ".", "..", ".hidden", "a/b", "a b", "é", longset, NULL};
    for (int i = 0; bad_sets[i]; i++)
        assert_int_equal(sl_client_send(c, bad_sets[i], ev, NULL), SL_CLIENT_EINVAL);
    longset[128] = '\0';
    const char *bad_lanes[] = {"Feature", "a_b", "a.b", "123456789012345678901234567890123", NULL};
    for (int i = 0; bad_lanes[i]; i++)
        assert_int_equal(sl_client_send(c, "s", ev, bad_lanes[i]), SL_CLIENT_EINVAL);
    const char *bad_json[] = {"",
                              "   ",
                              "[1]",
                              "1",
                              "\"s\"",
                              "{",
                              "{}}",
                              "{} {}",
                              "{}x",
                              "{\"a\":[1}",
                              "{\"a\":\"x}",
                              "{\"a\":\"line\nbreak\"}",
                              "{\"a\":\"esc\\\nbreak\"}",
                              "{]",
                              NULL};
    for (int i = 0; bad_json[i]; i++) {
        assert_int_equal(sl_client_send(c, "s", bad_json[i], NULL), SL_CLIENT_EINVAL);
        assert_int_equal(sl_client_send(c, "s", guarded(bad_json[i]), NULL), SL_CLIENT_EINVAL);
    }
    /* Truncated at every byte: never accepted, never read past the end. */
    const char *nested = "{\"a\":{\"b\":[1,\"x\\\"y\",{\"c\":null}]},\"d\":\"\\\\\"}";
    char cut[128];
    for (size_t n = 0; n < strlen(nested); n++) {
        snprintf(cut, sizeof cut, "%.*s", (int)n, nested);
        assert_int_equal(sl_client_send(c, "s", guarded(cut), NULL), SL_CLIENT_EINVAL);
        assert_int_equal(sl_client_send(c, guarded("s"), cut, guarded("")), SL_CLIENT_EINVAL);
    }
    /* Deeper than the check allows (1024 levels). */
    static char deep[2 * 1100 + 1];
    memset(deep, '[', 1100);
    memset(deep + 1100, ']', 1100);
    deep[0] = '{';
    deep[2 * 1100 - 1] = '}';
    assert_int_equal(sl_client_send(c, "s", deep, NULL), SL_CLIENT_EINVAL);
    assert_int_equal(sl_client_send(c, NULL, ev, NULL), SL_CLIENT_EINVAL);
    assert_int_equal(sl_client_send(c, "s", NULL, NULL), SL_CLIENT_EINVAL);
    assert_int_equal(sl_client_send(NULL, "s", ev, NULL), SL_CLIENT_EINVAL);
    assert_int_equal(sl_client_flush(NULL, 0), SL_CLIENT_EINVAL);
    assert_string_equal(sl_client_strerror(SL_CLIENT_EFULL),
                        "queue full: too many bytes sent but not yet acknowledged");
    assert_string_equal(sl_client_strerror(12345), "unknown error");

    /* Valid corner cases are accepted. */
    assert_true(sl_client_send(c, longset, ev, NULL) > 0);
    assert_true(sl_client_send(c, "s", guarded(nested), NULL) > 0);
    assert_true(sl_client_send(c, "A.b_c-9", " {\"a\":[{}],\"b\":\"\\\"}\"} \n", "") > 0);
    assert_true(sl_client_send(c, "s", ev, "12345678901234567890123456789012") > 0);
    int accepted = 4;

    /* Nothing answers, so the 64 KiB bound fills. */
    int64_t id;
    while ((id = sl_client_send(c, "s", ev, NULL)) > 0)
        accepted++;
    assert_int_equal(id, SL_CLIENT_EFULL);
    assert_true(accepted > 64 * 1024 / 300 && accepted < 64 * 1024 / 50);
    assert_int_equal(sl_client_flush(c, 100), SL_CLIENT_ETIMEDOUT);
    assert_int_equal(sl_client_send(c, "s", ev, NULL), SL_CLIENT_EFULL);
    pthread_mutex_lock(&r->lock);
    assert_int_equal(r->calls, 0); /* retrying, not failing */
    pthread_mutex_unlock(&r->lock);
    sl_client_close(c); /* flushes 300 ms, then fails the rest */
    assert_int_equal(r->calls, accepted);
    assert_int_equal(r->failed, accepted);
    assert_int_equal(r->twice, 0);
    assert_string_equal(r->error[1], "ESHUTDOWN");
    assert_int_equal(r->status[accepted], SL_CLIENT_ESHUTDOWN);
    rec_free(r);
    sl_client_close(NULL);
    s->passed = true;
}

/* ---- 4. the server comes up after the sends ----------------------------------------- */

/* Starts bin/sluice serve on s's data dir at a given port (it_srv_start()
 * picks its own). s->pid is set so that it_teardown() stops it. */
static void start_on_port(it_server *s, int port)
{
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(it_bin(), it_bin(), "serve", "--data", s->data, "--listen", listen, (char *)NULL);
        _exit(127);
    }
    close(fd);
    s->pid = pid;
    s->port = port;
    for (double end = it_mono() + 20; it_mono() < end; it_sleep_ms(10))
        if (it_status_of(port, "/healthz") == 200)
            return;
    fail_msg("the server did not come up on port %d", port);
}

static void test_server_late(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    int port = s->port;
    it_srv_stop(s, SIGTERM, 10);
    char addr[64], buf[256];
    http_addr(addr, sizeof addr, port);
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, 2000, 0);
    for (int i = 0; i < 300; i++)
        assert_true(sl_client_send(c, "late", event(buf, "l", i), i % 2 ? "" : NULL) > 0);
    assert_int_equal(sl_client_flush(c, 300), SL_CLIENT_ETIMEDOUT);
    it_sleep_ms(700); /* a few refused attempts and back-offs */
    pthread_mutex_lock(&r->lock);
    assert_int_equal(r->calls, 0);
    pthread_mutex_unlock(&r->lock);
    start_on_port(s, port);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 0);
    assert_int_equal(r->ok, 300);
    sl_client_close(c);
    it_evs e = read_set(s, "late", "");
    expect_ids(&e, 300);
    it_evs_free(&e);
    rec_free(r);
    s->passed = true;
}

/* ---- 5. lanes --------------------------------------------------------------------- */

static void test_lane(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char addr[64], buf[256];
    http_addr(addr, sizeof addr, s->port);
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, 10000, 0);
    for (int i = 0; i < 5; i++)
        assert_true(sl_client_send(c, "ln", event(buf, "x", i), "feature-x") > 0);
    for (int i = 0; i < 3; i++)
        assert_true(sl_client_send(c, "ln", event(buf, "b", i), NULL) > 0);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 0);
    sl_client_close(c);

    /* The default lane from SLUICE_LANE, and "" overriding it. */
    setenv("SLUICE_LANE", "feature-x", 1);
    c = open_rec(addr, r, 10000, 0);
    unsetenv("SLUICE_LANE");
    assert_true(sl_client_send(c, "ln", event(buf, "env", 0), NULL) > 0);
    assert_true(sl_client_send(c, "ln", event(buf, "b", 3), "") > 0);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 0);
    sl_client_close(c);

    it_evs lane = read_set(s, "ln", "feature-x");
    expect_ids(&lane, 6);
    for (size_t i = 0; i < lane.n; i++) {
        assert_string_equal(lane.v[i].lane, "feature-x");
        assert_true(lane.v[i].id[0] == 'x' || strcmp(lane.v[i].id, "env-0") == 0);
    }
    it_evs_free(&lane);
    it_evs base = read_set(s, "ln", "");
    expect_ids(&base, 4);
    for (size_t i = 0; i < base.n; i++)
        assert_true(base.v[i].id[0] == 'b' && base.v[i].lane[0] == '\0');
    it_evs_free(&base);
    rec_free(r);
    s->passed = true;
}

/* ---- 6. the Databus agent --------------------------------------------------------- */

/* Whether bin/sluice has the databus command (another part of issue 7). */
static bool have_agent(const it_server *s)
{
    char *out = NULL, *err = NULL;
    const char *args[] = {"databus", "--help", NULL};
    int st = it_run(s, NULL, &out, &err, args, 10);
    bool ok = st == 0 && out && strstr(out, "--upstream") != NULL;
    free(out);
    free(err);
    return ok;
}

static pid_t start_agent(it_server *s, const char *sock, const char *spool)
{
    char up[64], listen[PATH_MAX + 8];
    snprintf(up, sizeof up, "http://127.0.0.1:%d", s->port);
    snprintf(listen, sizeof listen, "unix:%s", sock);
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(it_bin(), it_bin(), "databus", "--listen", listen, "--upstream", up, "--spool", spool,
              (char *)NULL);
        _exit(127);
    }
    close(fd);
    for (double end = it_mono() + 10; it_mono() < end; it_sleep_ms(10))
        if (access(sock, F_OK) == 0)
            return pid;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("the agent did not make its socket %s", sock);
    return -1;
}

static void stop_agent(pid_t pid)
{
    kill(pid, SIGTERM);
    for (double end = it_mono() + 10; it_mono() < end; it_sleep_ms(10))
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void test_agent(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    if (!have_agent(s)) {
        fprintf(stderr, "test_agent: bin/sluice has no databus command yet: skipped\n");
        s->passed = true;
        skip();
    }
    char sock[PATH_MAX], spool[PATH_MAX], addr[PATH_MAX + 8], buf[256];
    it_path(sock, s, "agent.sock");
    it_path(spool, s, "spool");
    pid_t agent = start_agent(s, sock, spool);
    snprintf(addr, sizeof addr, "unix:%s", sock);
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, 5000, 0);
    enum { THREADS = 4, PER = 500 };
    pthread_t th[THREADS];
    sender w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (sender){.c = c, .set = "viaagent", .thread = t, .n = PER};
        assert_int_equal(pthread_create(&th[t], NULL, send_thread, &w[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    int64_t lid = sl_client_send(c, "viaagent", event(buf, "lane", 0), "feature-x");
    int64_t bad = sl_client_send(c, "viaagent",
                                 "{\"specversion\":\"1.0\",\"source\":\"/c\","
                                 "\"type\":\"t\"}",
                                 NULL);
    assert_true(lid > 0 && bad > 0);
    int rc = sl_client_flush(c, WAIT_MS);
    /* The agent acknowledges what it accepted; a refusal of a bad event may
     * come from the agent or later from upstream (it then goes to its DLQ or
     * log), so 0 or 1 failures are fine, but never more. */
    assert_true(rc == 0 || rc == 1);
    assert_int_equal(r->ok + r->failed, THREADS * PER + 2);
    assert_int_equal(r->twice, 0);
    assert_true(r->ok >= THREADS * PER + 1);

    /* The agent restarts: the client reconnects and every event is acked. */
    stop_agent(agent);
    for (int i = 0; i < 100; i++)
        assert_true(sl_client_send(c, "viaagent", event(buf, "after", i), NULL) > 0);
    it_sleep_ms(300);
    agent = start_agent(s, sock, spool);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 0);
    sl_client_close(c);
    stop_agent(agent);

    it_evs e = {0};
    for (double end = it_mono() + 20; it_mono() < end; it_sleep_ms(100)) {
        it_evs_free(&e);
        e = read_set(s, "viaagent", "");
        if (e.n >= THREADS * PER + 100)
            break;
    }
    expect_ids(&e, THREADS * PER + 100);
    it_evs_free(&e);
    it_evs l = read_set(s, "viaagent", "feature-x");
    assert_int_equal(l.n, 1);
    it_evs_free(&l);
    rec_free(r);
    s->passed = true;
}

/* ---- 7. the agent protocol, against a scripted fake agent ------------------------ */

/* A fake agent on a UNIX socket, run by a thread, following a script per
 * connection. It never asserts: it records what it read and any problem, and
 * the main thread checks. */
typedef struct fake {
    int lfd;
    char lines[4][3][512]; /* per connection, the first lines read */
    int nlines[4];
    char problem[256];
} fake;

/* Reads until n complete lines arrived on fd (10 s at most); keeps the
 * first three in out. Returns the lines read, or -1. */
static int fake_read_lines(int fd, int n, char out[3][512])
{
    char buf[8192];
    size_t len = 0;
    int got = 0;
    while (got < n) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            return -1;
        ssize_t k = read(fd, buf + len, sizeof buf - len - 1);
        if (k <= 0)
            return -1;
        len += (size_t)k;
        char *nl;
        while ((nl = memchr(buf, '\n', len))) {
            if (got < 3)
                snprintf(out[got], 512, "%.*s", (int)(nl - buf), buf);
            got++;
            len -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, len);
        }
    }
    return got;
}

static void fake_write(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    /* conn 0: three lines, ack the first, hang up. conn 1: the two others
     * again; refuse the first, then a wrong seq (a protocol error). conn 2:
     * the third again; no answer (a stall). conn 3: ack it. */
    static const int want[4] = {3, 2, 1, 1};
    for (int k = 0; k < 4; k++) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0) {
            snprintf(f->problem, sizeof f->problem, "no connection %d", k);
            return NULL;
        }
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0) {
            snprintf(f->problem, sizeof f->problem, "accept: %s", strerror(errno));
            return NULL;
        }
        f->nlines[k] = fake_read_lines(fd, want[k], f->lines[k]);
        if (f->nlines[k] != want[k]) {
            snprintf(f->problem, sizeof f->problem, "connection %d: %d lines", k, f->nlines[k]);
            close(fd);
            return NULL;
        }
        switch (k) {
        case 0:
            fake_write(fd, "{\"seq\":1,\"ok\":true}\n");
            break;
        case 1:
            fake_write(fd, "{\"seq\":1,\"ok\":false,\"error\":\"TooLarge\","
                           "\"message\":\"x \\\"quoted\\\" \\u00e9\\ud83d\\ude00\"}\n"
                           "{\"seq\":3,\"ok\":true}\n");
            /* Wait for the client to hang up on the bad seq. */
            for (char b; read(fd, &b, 1) > 0;)
                ;
            break;
        case 2: {
            char b;
            (void)read(fd, &b, 1); /* until the client gives up on it */
            break;
        }
        case 3:
            fake_write(fd, "{\"seq\":1,\"ok\":true}\n");
            break;
        }
        close(fd);
    }
    return NULL;
}

static void test_agent_protocol(void **state)
{
    it_server *s = *state;
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    it_path(sa.sun_path, s, "fake.sock");
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->lfd, 8), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fake_main, f), 0);

    char addr[PATH_MAX + 8];
    snprintf(addr, sizeof addr, "unix:%s", sa.sun_path);
    rec *r = rec_new();
    /* A missing answer counts as a stall after timeout_ms (500 ms) here, not
     * after the minute a real client waits. */
    sl_client__agent_stall_min_ms = 0;
    sl_client *c = open_rec(addr, r, 500, 0);
    assert_int_equal(sl_client_send(c, "s1", "{\"id\":\"1\"}", "feature-x"), 1);
    assert_int_equal(sl_client_send(c, "s1", "{\"id\":\n\"2\"}", NULL), 2);
    assert_int_equal(sl_client_send(c, "s2", "{\"id\":\"3\"}", ""), 3);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    pthread_join(th, NULL);
    sl_client_close(c);
    sl_client__agent_stall_min_ms = 60000;
    close(f->lfd);

    if (f->problem[0])
        fail_msg("fake agent: %s", f->problem);
    assert_string_equal(f->lines[0][0],
                        "{\"set\":\"s1\",\"event\":{\"id\":\"1\"},\"lane\":\"feature-x\"}");
    assert_string_equal(f->lines[0][1], "{\"set\":\"s1\",\"event\":{\"id\": \"2\"}}");
    assert_string_equal(f->lines[0][2], "{\"set\":\"s2\",\"event\":{\"id\":\"3\"}}");
    /* Resent as they were, oldest first. */
    assert_string_equal(f->lines[1][0], f->lines[0][1]);
    assert_string_equal(f->lines[1][1], f->lines[0][2]);
    assert_string_equal(f->lines[2][0], f->lines[0][2]);
    assert_string_equal(f->lines[3][0], f->lines[0][2]);
    assert_int_equal(r->calls, 3);
    assert_int_equal(r->twice, 0);
    assert_int_equal(r->status[1], 0);
    assert_int_equal(r->status[2], SL_CLIENT_EREJECTED);
    assert_string_equal(r->error[2], "TooLarge");
    assert_string_equal(r->message[0], "x \"quoted\" \xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(r->status[3], 0);
    free(f);
    rec_free(r);
    s->passed = true;
}

/* ---- 7b. a slow agent is waited for, not reconnected to ----------------------------- */

/* A fake agent that takes one connection and reads its n lines, holding back
 * for hold_ms: before answering (late: the agent waits for a hung upstream),
 * or before reading at all and then answering in six bursts 250 ms apart
 * (back-pressure: the client's socket is full meanwhile). Then it checks that
 * no second connection came. */
typedef struct slow {
    int lfd;
    bool backpressure;
    int n, hold_ms;
    int conns, lines;
    char problem[256];
} slow;

/* Writes all of s, never raising SIGPIPE (the client may have hung up). */
static void fake_send(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

static void *slow_main(void *arg)
{
    slow *f = arg;
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    if (poll(&p, 1, 10000) <= 0) {
        snprintf(f->problem, sizeof f->problem, "no connection");
        return NULL;
    }
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) {
        snprintf(f->problem, sizeof f->problem, "accept: %s", strerror(errno));
        return NULL;
    }
    f->conns = 1;
    if (f->backpressure)
        it_sleep_ms(f->hold_ms);
    static char buf[65536];
    while (f->lines < f->n) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        if (poll(&q, 1, 10000) <= 0)
            break;
        ssize_t k = read(fd, buf, sizeof buf);
        if (k <= 0)
            break;
        for (ssize_t i = 0; i < k; i++)
            f->lines += buf[i] == '\n';
    }
    if (f->lines != f->n) {
        snprintf(f->problem, sizeof f->problem, "%d lines of %d", f->lines, f->n);
        close(fd);
        return NULL;
    }
    if (!f->backpressure)
        it_sleep_ms(f->hold_ms);
    int bursts = f->backpressure ? 6 : 1, seq = 0;
    for (int b = 0; b < bursts; b++) {
        if (b)
            it_sleep_ms(250);
        size_t len = 0;
        for (int upto = f->n * (b + 1) / bursts; seq < upto;) {
            if (len + 64 > sizeof buf) {
                fake_send(fd, buf, len);
                len = 0;
            }
            len += (size_t)snprintf(buf + len, 64, "{\"seq\":%d,\"ok\":true}\n", ++seq);
        }
        fake_send(fd, buf, len);
    }
    /* A client that gave up on the connection would be back by now. */
    struct pollfd again = {.fd = f->lfd, .events = POLLIN};
    if (poll(&again, 1, 300) > 0)
        f->conns++;
    close(fd);
    return NULL;
}

static void run_slow(it_server *s, slow *f, int timeout_ms, const char *pad)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    it_path(sa.sun_path, s, f->backpressure ? "slow-bp.sock" : "slow.sock");
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->lfd, 8), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slow_main, f), 0);
    char addr[PATH_MAX + 8];
    snprintf(addr, sizeof addr, "unix:%s", sa.sun_path);
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, timeout_ms, 0);
    char *ev = malloc(strlen(pad) + 64);
    assert_non_null(ev);
    for (int i = 0; i < f->n; i++) {
        sprintf(ev, "{\"id\":\"%d\",\"data\":\"%s\"}", i, pad);
        assert_int_equal(sl_client_send(c, "slow", ev, NULL), i + 1);
    }
    free(ev);
    /* A client that reconnected would wait for answers that never come. */
    int rc = sl_client_flush(c, 15000);
    pthread_join(th, NULL);
    sl_client_close(c);
    close(f->lfd);
    if (f->problem[0])
        fail_msg("fake agent: %s", f->problem);
    assert_int_equal(rc, 0);
    assert_int_equal(f->conns, 1);
    assert_int_equal(f->lines, f->n);
    assert_int_equal(r->ok, f->n);
    assert_int_equal(r->calls, f->n);
    assert_int_equal(r->twice, 0);
    rec_free(r);
}

static void test_agent_slow(void **state)
{
    it_server *s = *state;
    /* Answers 1.5 s late, 5 × timeout_ms: within the stall timeout (a minute),
     * so the client waits instead of writing every line again. */
    slow *f = calloc(1, sizeof *f);
    assert_non_null(f);
    *f = (slow){.n = 3, .hold_ms = 1500};
    run_slow(s, f, 300, "x");

    /* Reads nothing for 2.5 s while ~5 MB wait to be written, then answers in
     * bursts. With the stall timeout lowered to timeout_ms (1 s), a full
     * socket still is no stall, and each burst of answers is progress. */
    static char pad[1201];
    memset(pad, 'p', sizeof pad - 1);
    *f = (slow){.backpressure = true, .n = 4000, .hold_ms = 2500};
    sl_client__agent_stall_min_ms = 0;
    run_slow(s, f, 1000, pad);
    sl_client__agent_stall_min_ms = 60000;
    free(f);
    s->passed = true;
}

/* After a refused connect the client tries again when the back-off ends (50
 * ms), not a second later: it is back soon after the agent is. Also: the
 * default lane from SLUICE_LANE goes on the line. */
static void test_agent_reconnect(void **state)
{
    it_server *s = *state;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    it_path(sa.sun_path, s, "late.sock");
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0); /* not listening: refused */
    char addr[PATH_MAX + 8];
    snprintf(addr, sizeof addr, "unix:%s", sa.sun_path);
    rec *r = rec_new();
    setenv("SLUICE_LANE", "feature-x", 1);
    sl_client *c = open_rec(addr, r, 1000, 0);
    unsetenv("SLUICE_LANE");
    double t0 = it_mono();
    assert_int_equal(sl_client_send(c, "s", "{\"id\":\"1\"}", NULL), 1);
    it_sleep_ms(30); /* the first connect was refused */
    assert_int_equal(listen(lfd, 8), 0);
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    double dt = it_mono() - t0;
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    char lines[3][512];
    assert_int_equal(fake_read_lines(fd, 1, lines), 1);
    fake_send(fd, "{\"seq\":1,\"ok\":true}\n", 20);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 0);
    sl_client_close(c);
    close(fd);
    close(lfd);
    /* Back-offs 50, 100, 200 ms ±20 %; the old poll waited 1000 ms. */
    if (dt >= 0.7)
        fail_msg("connected %.0f ms after the send", dt * 1000);
    assert_string_equal(lines[0],
                        "{\"set\":\"s\",\"event\":{\"id\":\"1\"},\"lane\":\"feature-x\"}");
    assert_int_equal(r->ok, 1);
    rec_free(r);
    s->passed = true;
}

/* ---- 8. the HTTP protocol, against the scripted receiver ---------------------------- */

static void test_http_protocol(void **state)
{
    it_server *s = *state;
    rx_receiver *rx = rx_new();
    assert_non_null(rx);
    assert_int_equal(rx_start(rx, 0), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "http://127.0.0.1:%d/", rx_port(rx)); /* trailing '/' is fine */
    rec *r = rec_new();
    sl_client *c = open_rec(addr, r, 2000, 0);

    /* Retried: 503, 429, 408, a dropped connection, 500; then per-entry
     * results. */
    rx_fail(rx, 1, 503, "{\"error\":\"Backpressure\",\"message\":\"full\"}", "1");
    rx_fail(rx, 1, 429, NULL, NULL);
    rx_fail(rx, 1, 408, "{\"error\":\"RequestTimeout\",\"message\":\"body too slow\"}", NULL);
    rx_fail(rx, 1, RX_DROP, NULL, NULL);
    rx_fail(rx, 1, 500, "{\"error\":\"NotConfirmed\",\"message\":\"sync failed\"}", NULL);
    rx_fail(rx, 1, 200,
            "{\"accepted\":1,\"failed\":1,\"results\":[{\"partition\":0,\"offset\":0},"
            "{\"error\":\"SchemaViolation\",\"message\":\"/data/amount: \\u00e9\",\"index\":1}]}",
            NULL);
    assert_int_equal(sl_client_send(c, "s", "{\"id\":\"1\"}", "feature-x"), 1);
    assert_int_equal(sl_client_send(c, "s", "{\"id\":\"2\"}", "feature-x"), 2);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    assert_int_equal(rx_count(rx), 6);
    for (size_t i = 0; i < 6; i++) {
        const rx_req *q = rx_req_at(rx, i);
        char h[64];
        assert_string_equal(q->method, "POST");
        assert_string_equal(q->path, "/v1/sets/s/events");
        assert_string_equal(q->body, "{\"id\":\"1\"}\n{\"id\":\"2\"}\n");
        assert_string_equal(rx_header(q, "content-type", h, sizeof h), "application/x-ndjson");
        assert_string_equal(rx_header(q, "x-sluice-lane", h, sizeof h), "feature-x");
    }
    assert_int_equal(r->status[1], 0);
    assert_int_equal(r->status[2], SL_CLIENT_EREJECTED);
    assert_string_equal(r->error[2], "SchemaViolation");
    assert_string_equal(r->message[0], "/data/amount: \xc3\xa9");

    /* A 200 that is not a publish answer, a short one, and a 4xx without JSON. */
    rx_reset(rx);
    rx_fail(rx, 1, 200, "ok", NULL);
    assert_int_equal(sl_client_send(c, "s", "{}", NULL), 3);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    rx_fail(rx, 1, 200, "{\"results\":[{\"partition\":0,\"offset\":1}", NULL);
    assert_int_equal(sl_client_send(c, "s", "{}", NULL), 4);
    assert_int_equal(sl_client_send(c, "s", "{}", NULL), 5);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    rx_fail(rx, 1, 400, "not json", NULL);
    assert_int_equal(sl_client_send(c, "s", "{}", NULL), 6);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    assert_int_equal(r->status[3], SL_CLIENT_EPROTO);
    assert_int_equal(r->status[4], 0);
    assert_int_equal(r->status[5], SL_CLIENT_EPROTO);
    assert_int_equal(r->status[6], SL_CLIENT_EREJECTED);
    assert_string_equal(r->error[6], "HTTP400");
    assert_int_equal(rx_count(rx), 3);
    assert_null(rx_header(rx_req_at(rx, 0), "x-sluice-lane", (char[8]){0}, 8)); /* base */

    /* 413 splits a batch in halves (which then get "ok": EPROTO); a single
     * event that is too large fails. */
    rx_reset(rx);
    rx_fail(rx, 1, 413, "{\"error\":\"RequestTooLarge\",\"message\":\"big\"}", NULL);
    for (int i = 0; i < 4; i++)
        assert_true(sl_client_send(c, "big", "{\"id\":\"x\"}", NULL) > 0);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 4);
    assert_int_equal(rx_count(rx), 3);
    assert_int_equal(rx_req_at(rx, 0)->body_len, 4 * 11);
    assert_int_equal(rx_req_at(rx, 1)->body_len, 2 * 11);
    assert_int_equal(rx_req_at(rx, 2)->body_len, 2 * 11);
    rx_reset(rx);
    rx_fail(rx, 1, 413, "{\"error\":\"RequestTooLarge\",\"message\":\"big\"}", NULL);
    int64_t one = sl_client_send(c, "big1", "{\"id\":\"x\"}", NULL);
    assert_int_equal(sl_client_flush(c, WAIT_MS), 1);
    assert_int_equal(r->status[one], SL_CLIENT_EREJECTED);
    assert_string_equal(r->error[one], "RequestTooLarge");

    /* One request in flight per (set, lane), in order: a slow endpoint makes
     * the events pile up into several batches. */
    rx_reset(rx);
    rx_set_delay(rx, 30);
    char buf[256];
    for (int i = 0; i < 200; i++) {
        assert_true(sl_client_send(c, "o", event(buf, "o", i), NULL) > 0);
        if (i % 20 == 0)
            it_sleep_ms(10);
    }
    sl_client_flush(c, WAIT_MS); /* "ok" answers: every event fails with EPROTO */
    size_t nreq = rx_count(rx);
    assert_true(nreq >= 3);
    assert_int_equal(rx_max_in_flight(rx), 1);
    int next = 0;
    for (size_t i = 0; i < nreq; i++) {
        const char *b = rx_req_at(rx, i)->body;
        for (const char *p = strstr(b, "\"id\":\""); p; p = strstr(p + 1, "\"id\":\"")) {
            char want[32];
            int k = snprintf(want, sizeof want, "\"id\":\"o-%d\"", next++);
            assert_memory_equal(p, want, (size_t)k);
        }
    }
    assert_int_equal(next, 200);
    sl_client_close(c);
    rx_free(rx);
    rec_free(r);
    s->passed = true;
}

/* A delivery callback may send (no lock is held while it runs); a flush from
 * it returns EINVAL at once instead of waiting for itself. */
typedef struct reentry {
    sl_client *c;
    atomic_int calls;
    int status[4], flush_rc[4];
    int64_t sent[4];
} reentry;

static void on_reentry(void *opaque, uint64_t id, int status, const char *error,
                       const char *message)
{
    (void)id, (void)error, (void)message;
    reentry *e = opaque;
    int k = atomic_load(&e->calls);
    if (k < 4) {
        e->status[k] = status;
        if (k < 3) {
            e->flush_rc[k] = sl_client_flush(e->c, -1);
            e->sent[k] = sl_client_send(e->c, "re", "{\"id\":\"again\"}", NULL);
        }
    }
    atomic_fetch_add(&e->calls, 1);
}

static void test_callback_reentry(void **state)
{
    it_server *s = *state;
    rx_receiver *rx = rx_new();
    assert_non_null(rx);
    assert_int_equal(rx_start(rx, 0), 0);
    rx_fail(rx, -1, 200,
            "{\"accepted\":1,\"failed\":0,\"results\":[{\"partition\":0,\"offset\":0}]}", NULL);
    char addr[64];
    http_addr(addr, sizeof addr, rx_port(rx));
    reentry *e = calloc(1, sizeof *e);
    assert_non_null(e);
    sl_client_options o = {.on_delivery = on_reentry, .opaque = e, .timeout_ms = 2000};
    e->c = sl_client_open_opts(addr, &o, NULL, 0);
    assert_non_null(e->c);
    assert_int_equal(sl_client_send(e->c, "re", "{\"id\":\"first\"}", NULL), 1);
    for (double end = it_mono() + 10; it_mono() < end && atomic_load(&e->calls) < 4;)
        it_sleep_ms(10);
    assert_int_equal(sl_client_flush(e->c, WAIT_MS), 0);
    sl_client_close(e->c);
    rx_free(rx);
    assert_int_equal(atomic_load(&e->calls), 4);
    for (int k = 0; k < 4; k++)
        assert_int_equal(e->status[k], 0);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(e->flush_rc[k], SL_CLIENT_EINVAL);
        assert_int_equal(e->sent[k], k + 2);
    }
    free(e);
    s->passed = true;
}

/* ---- main ------------------------------------------------------------------------- */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_client"))
        return 1;
    unsetenv("SLUICE_LANE"); /* the tests choose their lanes */
    const struct CMUnitTest tests[] = {
        T(test_threads),         T(test_entry_failure),  T(test_request_refused),
        T(test_bad_args),        T(test_server_late),    T(test_lane),
        T(test_agent),           T(test_agent_protocol), T(test_agent_slow),
        T(test_agent_reconnect), T(test_http_protocol),  T(test_callback_reentry),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
