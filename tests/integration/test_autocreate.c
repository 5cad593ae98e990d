/*
 * tests/integration/test_autocreate.c — sets created on first use (issue 16):
 * a request that stores nothing creates no set and leaves the descriptor
 * count where it was (2,000 junk requests to new names); a refused single
 * structured or binary event is answered with its 4xx; the cap on
 * auto-created sets (507 SetLimit, declared sets unaffected, the count kept
 * across restarts) and the per-client share (per API key, per address).
 * Every check looks at what the real server did: its answers, GET /v1/sets,
 * DATA/sets on disk and /proc/PID/fd.
 */
#include "itest.h"

#include "core/bus/auth.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_S 30.0
#define EV(id) "{\"specversion\":\"1.0\",\"id\":\"" id "\",\"source\":\"/ac\",\"type\":\"t\"}"
#define T_ONE "sk_test-autocreate-one-0123456789abcdefghijklmnop"
#define T_TWO "sk_test-autocreate-two-0123456789abcdefghijklmnop"

/* ---- helpers ------------------------------------------------------------------ */

/* Entries of dir other than "." and ".." (-1 when it cannot be read). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static int set_dirs(const it_server *s)
{
    char p[PATH_MAX + 8];
    snprintf(p, sizeof p, "%s/sets", s->data);
    return entries(p);
}

static bool set_dir_exists(const it_server *s, const char *name)
{
    char p[PATH_MAX + 200];
    snprintf(p, sizeof p, "%s/sets/%s", s->data, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static int open_fds(const it_server *s)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/fd", (int)s->pid);
    return entries(p);
}

/* GET /v1/sets: the number of sets and the auto_created count. */
static void sets_of(it_server *s, size_t *n, json_int_t *autos)
{
    it_resp r = it_get(s, "/v1/sets");
    assert_int_equal(r.status, 200);
    json_t *j = it_parse_json(&r);
    json_t *a = json_object_get(j, "sets");
    assert_true(json_is_array(a));
    *n = json_array_size(a);
    json_t *c = json_object_get(j, "auto_created");
    if (!json_is_integer(c))
        fail_msg("GET /v1/sets has no auto_created count: %s", it_body(&r));
    *autos = json_integer_value(c);
    json_decref(j);
    it_resp_free(&r);
}

/* The entry of set name in GET /v1/sets (NULL: not listed); caller frees. */
static json_t *listed(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/v1/sets");
    json_t *j = it_parse_json(&r), *a = json_object_get(j, "sets"), *v, *found = NULL;
    size_t i;
    json_array_foreach(a, i, v) if (strcmp(json_string_value(json_object_get(v, "name")), name) ==
                                    0) found = json_incref(v);
    json_decref(j);
    it_resp_free(&r);
    return found;
}

/* One POST with an optional bearer token. */
static it_resp post_as(it_server *s, const char *token, const char *set, const char *ctype,
                       const char *const *more, const char *body, size_t len)
{
    char auth[200], path[300];
    const char *hdrs[8] = {NULL};
    size_t n = 0;
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hdrs[n++] = auth;
    }
    for (; more && *more && n < 7; more++)
        hdrs[n++] = *more;
    snprintf(path, sizeof path, "/v1/sets/%s/events", set);
    it_call k = {.path = path, .ctype = ctype, .hdrs = hdrs, .body = body, .len = len};
    it_resp r;
    it_http(NULL, s->port, &k, &r);
    if (!r.status)
        fail_msg("POST %s: no answer: %s", path, r.err);
    return r;
}

/* Asserts an error answer whose message holds every NULL-terminated word. */
static void expect_words(const it_resp *r, long status, const char *code, ...)
{
    it_expect_error(r, status, code);
    va_list ap;
    va_start(ap, code);
    for (const char *w; (w = va_arg(ap, const char *));)
        if (!strstr(it_body(r), w))
            fail_msg("the %s answer does not say \"%s\": %s", code, w, it_body(r));
    va_end(ap);
}

/* A structured event of id with a string data of n bytes; caller frees. */
static char *big_event(const char *id, size_t n)
{
    char *p = malloc(n + 200);
    assert_non_null(p);
    int h = snprintf(p, 200,
                     "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/ac\","
                     "\"type\":\"t\",\"data\":\"",
                     id);
    memset(p + h, 'x', n);
    memcpy(p + h + n, "\"}", 3);
    return p;
}

/* POSTs a structured event over a connection from the local address src (a
 * second client on loopback, "127.0.0.2"); returns the status and copies the
 * answer into out. */
static long post_from(it_server *s, const char *src, const char *set, const char *ev, char *out,
                      size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in me = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &me.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    to.sin_port = htons((uint16_t)s->port);
    if (bind(fd, (struct sockaddr *)&me, sizeof me) ||
        connect(fd, (struct sockaddr *)&to, sizeof to))
        fail_msg("cannot connect from %s", src);
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "POST /v1/sets/%s/events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Content-Type: " IT_CT_CE "\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     set, s->port, strlen(ev), ev);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(fd, out + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(fd);
    long status = 0;
    if (sscanf(out, "HTTP/1.1 %ld", &status) != 1)
        fail_msg("no HTTP answer from %s: %s", src, out);
    return status;
}

/* ---- junk creates nothing --------------------------------------------------------- */

/* The loop, bounded: 2,000 requests to distinct new set names, each
 * refused with a 4xx, create no set and leave the descriptors as they were
 * (each used to make a 4-partition set: 24 descriptors); a valid event to a
 * new set still succeeds after. */
static void test_junk_creates_nothing(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    int fd0 = open_fds(s);
    assert_true(fd0 > 0);
    char *big = big_event("big", 2u << 20);
    const char *no_id[] = {"ce-specversion: 1.0", "ce-source: /ac", "ce-type: t", NULL};
    const char *too_big[] = {"ce-specversion: 1.0", "ce-id: b", "ce-source: /ac", "ce-type: t",
                             NULL};
    int refused = 0;
    for (int i = 0; i < 2000; i++) {
        char name[32];
        snprintf(name, sizeof name, "junk%d", i);
        it_resp r;
        long want = 400;
        if (i % 200 == 7) { /* a few 2 MiB events, structured and binary: 413 */
            want = 413;
            r = i % 400 == 7 ? it_post(s, name, IT_CT_CE, NULL, big, SIZE_MAX)
                             : it_post(s, name, "text/plain", too_big, big, SIZE_MAX);
        } else if (i % 4 == 0) {
            r = it_post(s, name, IT_CT_CE, NULL, "x", SIZE_MAX);
        } else if (i % 4 == 1) {
            r = it_post(s, name, IT_CT_CE, NULL,
                        "{\"specversion\":\"1.0\",\"source\":\"/ac\",\"type\":\"t\"}", SIZE_MAX);
        } else if (i % 4 == 2) {
            r = it_post(s, name, "application/json", no_id, "{}", SIZE_MAX);
        } else {
            r = it_post(s, name, IT_CT_CE, NULL,
                        "{\"specversion\":\"0.3\",\"id\":\"1\",\"source\":\"/ac\",\"type\":\"t\"}",
                        SIZE_MAX);
        }
        if (r.status != want)
            fail_msg("junk request %d answered %ld, want %ld: %s", i, r.status, want, it_body(&r));
        refused++;
        it_resp_free(&r);
    }
    assert_int_equal(refused, 2000);
    /* Batches and NDJSON whose every entry is refused: 200 with the results
     * (partial success is their contract), and no set either. */
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof name, "junkb%d", i);
        it_resp r = i % 2 ? it_post(s, name, IT_CT_BATCH, NULL, "[{\"id\":\"1\"},42]", SIZE_MAX)
                          : it_post(s, name, IT_CT_NDJSON, NULL, "x\n{\"id\":1}\n", SIZE_MAX);
        json_decref(it_expect_results(&r, 0, 2));
        it_resp_free(&r);
    }
    free(big);
    size_t n;
    json_int_t autos;
    sets_of(s, &n, &autos);
    if (n || autos || set_dirs(s))
        fail_msg("requests that stored nothing left %zu sets (%lld auto-created, %d directories)",
                 n, (long long)autos, set_dirs(s));
    /* The connections are closed; their descriptors go as the server sees
     * each close, so wait (bounded) for the count to come back. */
    int fd1 = open_fds(s);
    for (double end = it_mono() + 10 * it_scale(); fd1 > fd0 + 8 && it_mono() < end;) {
        it_sleep_ms(50);
        fd1 = open_fds(s);
    }
    if (fd1 > fd0 + 8)
        fail_msg("descriptors grew from %d to %d after the junk requests", fd0, fd1);

    int part;
    int64_t off;
    it_post_one(s, "fresh", EV("ok"), &part, &off);
    sets_of(s, &n, &autos);
    assert_int_equal(n, 1);
    assert_int_equal(autos, 1);
    json_t *f = listed(s, "fresh");
    assert_non_null(f);
    assert_true(json_is_true(json_object_get(f, "auto_created")));
    json_decref(f);
    s->passed = true;
}

/* ---- a refused single event gets its 4xx ----------------------------------------- */

static void test_single_event_codes(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX], schema[PATH_MAX];
    it_path(schema, s, "order.json");
    it_write_file(schema, "{\"type\":\"object\",\"required\":[\"amount\"]}");
    it_write_config(s, cfg,
                    "lane \"known\" { env = \"boe\" }\n"
                    "set \"orders\" { partitions = 1, schemas = { [\"order\"] = \"%s\" } }\n",
                    schema);
    it_start_config(s, cfg, WAIT_S);
    char *big = big_event("big", 2u << 20);
    it_resp r = it_post(s, "orders", IT_CT_CE, NULL, big, SIZE_MAX);
    expect_words(&r, 413, "TooLarge", "1048576", "nothing was stored", "\"request_id\"", NULL);
    it_resp_free(&r);
    const char *bin[] = {"ce-specversion: 1.0", "ce-id: b", "ce-source: /ac", "ce-type: t", NULL};
    r = it_post(s, "orders", "application/octet-stream", bin, big, SIZE_MAX);
    expect_words(&r, 413, "TooLarge", NULL);
    it_resp_free(&r);
    free(big);
    r = it_post(s, "orders", IT_CT_CE, NULL,
                "{\"specversion\":\"1.0\",\"source\":\"/a\",\"type\":\"t\"}", SIZE_MAX);
    expect_words(&r, 400, "MissingAttribute", "\\\"id\\\"", NULL);
    it_resp_free(&r);
    const char *bin_no_id[] = {"ce-specversion: 1.0", "ce-source: /ac", "ce-type: t", NULL};
    r = it_post(s, "orders", "text/plain", bin_no_id, "hi", SIZE_MAX);
    expect_words(&r, 400, "MissingAttribute", "\\\"id\\\"", NULL);
    it_resp_free(&r);
    r = it_post(s, "orders", IT_CT_CE, NULL,
                "{\"specversion\":\"1.0\",\"id\":\"o1\",\"source\":\"/a\",\"type\":\"order\","
                "\"data\":{}}",
                SIZE_MAX);
    expect_words(&r, 422, "SchemaViolation", "amount", NULL);
    it_resp_free(&r);
    const char *lane[] = {"X-Sluice-Lane: unknown", NULL};
    r = it_post(s, "orders", IT_CT_CE, lane, EV("l1"), SIZE_MAX);
    expect_words(&r, 422, "UnknownLane", "unknown", NULL);
    it_resp_free(&r);
    /* Batches and NDJSON keep 200 with per-entry results. */
    r = it_post(s, "orders", IT_CT_BATCH, NULL,
                "[{\"specversion\":\"1.0\",\"source\":\"/a\",\"type\":\"t\"}]", SIZE_MAX);
    json_decref(it_expect_results(&r, 0, 1));
    it_resp_free(&r);
    r = it_post(s, "orders", IT_CT_NDJSON, NULL,
                "{\"specversion\":\"1.0\",\"source\":\"/a\",\"type\":\"t\"}\n", SIZE_MAX);
    json_decref(it_expect_results(&r, 0, 1));
    it_resp_free(&r);
    /* Nothing of it was stored; a good event still is. */
    int part;
    int64_t off;
    it_post_one(s, "orders", EV("good"), &part, &off);
    assert_int_equal(off, 0);
    s->passed = true;
}

/* ---- the cap -------------------------------------------------------------------------- */

/* Past server.max_auto_sets: 507 SetLimit naming the limit; the request is
 * still parsed first (junk stays 400); declared sets are unaffected; the
 * count survives a restart; declaring an auto-created set frees its place. */
static void test_cap(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "server { max_auto_sets = 3, max_auto_sets_per_client = 3 }\n"
                    "set \"decl\" { partitions = 1 }\n");
    it_start_config(s, cfg, WAIT_S);
    int part;
    int64_t off;
    it_post_one(s, "a1", EV("1"), &part, &off);
    it_post_one(s, "a2", EV("2"), &part, &off);
    it_post_one(s, "a3", EV("3"), &part, &off);
    it_resp r = it_post(s, "a4", IT_CT_CE, NULL, EV("4"), SIZE_MAX);
    expect_words(&r, 507, "SetLimit", "\\\"a4\\\"", "server.max_auto_sets = 3",
                 "retrying does not help", NULL);
    it_resp_free(&r);
    r = it_post(s, "a4", IT_CT_NDJSON, NULL, EV("4") "\n", SIZE_MAX);
    expect_words(&r, 507, "SetLimit", NULL);
    it_resp_free(&r);
    r = it_post(s, "a4", IT_CT_CE, NULL, "x", SIZE_MAX);
    it_expect_error(&r, 400, "InvalidJson");
    it_resp_free(&r);
    assert_false(set_dir_exists(s, "a4"));
    /* Declared sets are not counted, nor refused; existing ones still take events. */
    it_post_one(s, "decl", EV("d"), &part, &off);
    it_post_one(s, "a1", EV("1b"), &part, &off);
    size_t n;
    json_int_t autos;
    sets_of(s, &n, &autos);
    assert_int_equal(n, 4);
    assert_int_equal(autos, 3);
    json_t *d = listed(s, "decl");
    assert_true(json_is_false(json_object_get(d, "auto_created")));
    json_decref(d);

    it_srv_stop(s, SIGTERM, WAIT_S);
    it_restart(s, WAIT_S);
    r = it_post(s, "a4", IT_CT_CE, NULL, EV("4"), SIZE_MAX);
    expect_words(&r, 507, "SetLimit", "server.max_auto_sets = 3", NULL);
    it_resp_free(&r);
    sets_of(s, &n, &autos);
    assert_int_equal(autos, 3);
    r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    assert_true(it_metric(it_body(&r), "sluice_sets_auto_created") == 3);
    assert_true(it_metric(it_body(&r), "sluice_sets_auto_max") == 3);
    assert_true(it_metric(it_body(&r), "sluice_sets") == 4);
    it_resp_free(&r);

    /* The config declares a1 now: it stops counting, a4 fits. */
    it_srv_stop(s, SIGTERM, WAIT_S);
    it_write_config(s, cfg,
                    "server { max_auto_sets = 3, max_auto_sets_per_client = 3 }\n"
                    "set \"decl\" { partitions = 1 }\nset \"a1\" { }\n");
    it_start_config(s, cfg, WAIT_S);
    it_post_one(s, "a4", EV("4"), &part, &off);
    sets_of(s, &n, &autos);
    assert_int_equal(n, 5);
    assert_int_equal(autos, 3);
    s->passed = true;
}

/* ---- per client ------------------------------------------------------------------------ */

/* With API keys a client is its key: each gets the default share, a quarter
 * of max_auto_sets. */
static void test_share_per_key(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    char h1[SL_AUTH_HEX_LEN + 1], h2[SL_AUTH_HEX_LEN + 1];
    sl_auth_hash_hex(T_ONE, strlen(T_ONE), h1);
    sl_auth_hash_hex(T_TWO, strlen(T_TWO), h2);
    it_write_config(s, cfg,
                    "server { max_auto_sets = 8, api_keys = {\n"
                    "  one = { sha256 = \"%s\", publish = { \"*\" }, read = { \"*\" } },\n"
                    "  two = { sha256 = \"%s\", publish = { \"*\" }, read = { \"*\" } },\n"
                    "} }\n",
                    h1, h2);
    it_start_config(s, cfg, WAIT_S);
    const char *sets1[] = {"k1a", "k1b"};
    for (int i = 0; i < 2; i++) {
        it_resp r = post_as(s, T_ONE, sets1[i], IT_CT_CE, NULL, EV("1"), strlen(EV("1")));
        json_decref(it_expect_results(&r, 1, 0));
        it_resp_free(&r);
    }
    it_resp r = post_as(s, T_ONE, "k1c", IT_CT_CE, NULL, EV("1"), strlen(EV("1")));
    expect_words(&r, 507, "SetLimit", "key:one", "server.max_auto_sets_per_client = 2",
                 "retrying does not help", NULL);
    it_resp_free(&r);
    r = post_as(s, T_TWO, "k2a", IT_CT_CE, NULL, EV("1"), strlen(EV("1")));
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);
    /* A set another client made is open to everyone (the share counts
     * creations, not use). */
    r = post_as(s, T_TWO, "k1a", IT_CT_CE, NULL, EV("2"), strlen(EV("2")));
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);
    assert_false(set_dir_exists(s, "k1c"));
    s->passed = true;
}

/* Without keys a client is its address: 127.0.0.1 and 127.0.0.2 each get
 * their own share. */
static void test_share_per_address(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { max_auto_sets = 10, max_auto_sets_per_client = 1 }\n");
    it_start_config(s, cfg, WAIT_S);
    int part;
    int64_t off;
    it_post_one(s, "ip1", EV("1"), &part, &off);
    it_resp r = it_post(s, "ip1b", IT_CT_CE, NULL, EV("1"), SIZE_MAX);
    expect_words(&r, 507, "SetLimit", "ip:127.0.0.1", "max_auto_sets_per_client = 1", NULL);
    it_resp_free(&r);
    char out[4096];
    long st = post_from(s, "127.0.0.2", "ip2", EV("2"), out, sizeof out);
    if (st != 200)
        fail_msg("the second address could not create its set: %s", out);
    st = post_from(s, "127.0.0.2", "ip2b", EV("2"), out, sizeof out);
    if (st != 507 || !strstr(out, "ip:127.0.0.2"))
        fail_msg("the second address's second set: %s", out);
    s->passed = true;
}

int main(void)
{
    if (it_init("test_autocreate"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_junk_creates_nothing, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_single_event_codes, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_cap, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_share_per_key, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_share_per_address, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
