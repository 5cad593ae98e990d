/*
 * tests/integration/test_redrive.c — dead-letter redrive with the real
 * `bin/sluice serve` (core/bus/redrive.h, POST /v1/sets/{dlq}/redrive, `sluice
 * redrive`): events written into a dead-letter set the way the rule runner
 * writes them (with sluiceerror, sluiceattempts, … attributes, lanes and
 * partition keys) come out in the destination set once each, without the
 * failure attributes, with lane and partition key kept; the position holds
 * across calls, `max` and server restarts; concurrent redrives do not
 * interleave (the second gets 409 at once); a long redrive leaves the HTTP
 * threads free and ends promptly when the server stops, moving the rest
 * exactly once after the restart; bad requests get 400/404; the CLI prints
 * its summary and exits 0, or 1 on errors. The harness is itest.h.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 30.0
#define MAX_IDS 1024

/* ---- dead-letter events ------------------------------------------------------------ */

static const char *lane_of(int i)
{
    return i % 3 == 1 ? "boe-a" : "";
}

/* The routing key of event i: a partitionkey, or for every fifth a subject. */
static void key_of(int i, char *out, size_t cap)
{
    snprintf(out, cap, i % 5 == 4 ? "s%d" : "k%d", i % 7);
}

/* Appends dead-letter event d<i> as the rule runner writes it (NDJSON). */
static void add_dlq_event(sl_buf *b, int i)
{
    char key[16];
    key_of(i, key, sizeof key);
    sl_buf_printf(b,
                  "{\"specversion\":\"1.0\",\"id\":\"d%d\",\"source\":\"/shop\","
                  "\"type\":\"order.created\",\"time\":\"2026-11-29T10:00:00.000Z\","
                  "\"%s\":\"%s\",",
                  i, i % 5 == 4 ? "subject" : "partitionkey", key);
    if (lane_of(i)[0])
        sl_buf_printf(b, "\"lane\":\"%s\",", lane_of(i));
    sl_buf_printf(b,
                  "\"data\":{\"n\":%d},\"sluiceerror\":\"target.http: HTTP 503 from "
                  "http://127.0.0.1:9/x\",\"sluiceattempts\":%d,\"sluicerule\":\"ship\","
                  "\"sluicetarget\":\"http\",\"sluicefailedat\":\"2026-11-29T10:00:01.000Z\"",
                  i, 3 + i % 4);
    if (i % 4 == 0)
        sl_buf_printf(b, ",\"sluicereplay\":\"rp-%d\"", i);
    sl_buf_printf(b, "}\n");
}

/* Posts dead-letter events d<from> .. d<to - 1> into set dlq; records the
 * partition each went to in parts[i] (may be NULL). */
static void post_dlq(it_server *s, const char *dlq, int from, int to, int *parts)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = from; i < to; i++)
        add_dlq_event(&b, i);
    it_resp r = it_post(s, dlq, IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_t *a = it_expect_results(&r, (size_t)(to - from), 0);
    for (int i = from; parts && i < to; i++)
        parts[i] = it_res_part(a, (size_t)(i - from));
    json_decref(a);
    it_resp_free(&r);
    sl_buf_free(&b);
}

/* Posts one live event (id live<i>) into set, which creates the set. */
static void post_live(it_server *s, const char *set, int i)
{
    char extra[64], id[32];
    snprintf(id, sizeof id, "live%d", i);
    snprintf(extra, sizeof extra, ",\"data\":{\"live\":%d}", i);
    char *ev = it_event(id, extra);
    int part;
    int64_t off;
    it_post_one(s, set, ev, &part, &off);
    free(ev);
}

/* ---- the endpoint ------------------------------------------------------------------ */

/* POST /v1/sets/DLQ/redrive[?query] with an optional JSON body. */
static it_resp redrive_req(it_server *s, const char *dlq, const char *query, const char *body)
{
    char path[512];
    snprintf(path, sizeof path, "/v1/sets/%s/redrive%s%s", dlq, query ? "?" : "",
             query ? query : "");
    it_resp r;
    it_call k = {.method = "POST",
                 .path = path,
                 .ctype = body ? "application/json" : NULL,
                 .body = body,
                 .len = body ? strlen(body) : 0,
                 .timeout_ms = 60000};
    if (it_http(NULL, s->port, &k, &r))
        fail_msg("POST %s: no answer: %s", path, r.err);
    return r;
}

/* A redrive that must answer 200 with these counts; returns the answer
 * (caller frees with json_decref()). */
static json_t *redrive_ok(it_server *s, const char *dlq, const char *query, const char *body,
                          json_int_t moved, json_int_t skipped)
{
    it_resp r = redrive_req(s, dlq, query, body);
    if (r.status != 200)
        fail_msg("redrive %s ?%s %s answered %ld: %s", dlq, query ? query : "", body ? body : "",
                 r.status, it_body(&r));
    json_t *j = it_parse_json(&r);
    it_resp_free(&r);
    json_t *m = json_object_get(j, "redriven"), *k = json_object_get(j, "skipped");
    if (!json_is_integer(m) || json_integer_value(m) != moved || !json_is_integer(k) ||
        json_integer_value(k) != skipped) {
        char *t = json_dumps(j, 0);
        fail_msg("redrive %s: want %lld moved and %lld skipped, got %s", dlq, (long long)moved,
                 (long long)skipped, t);
    }
    assert_string_equal(json_string_value(json_object_get(j, "dlq")), dlq);
    assert_true(json_is_array(json_object_get(j, "partitions")));
    return j;
}

/* ---- what arrived ----------------------------------------------------------------- */

typedef struct arrived {
    int count[MAX_IDS]; /* d<i> seen count[i] times */
    int part[MAX_IDS];  /* in this partition */
    int live;           /* live events */
    int other;          /* anything else */
} arrived;

/* Reads every partition (every lane) of set and checks every redriven event
 * there: no failure attributes, lane, partition key and data kept. */
static void read_target(it_server *s, const char *set, int nparts, arrived *a)
{
    memset(a, 0, sizeof *a);
    for (int p = 0; p < nparts; p++) {
        it_evs evs = it_read_all(s, set, p, "*");
        for (size_t e = 0; e < evs.n; e++) {
            const it_rawev *ev = &evs.v[e];
            int i;
            if (strncmp(ev->id, "live", 4) == 0) {
                a->live++;
                continue;
            }
            if (sscanf(ev->id, "d%d", &i) != 1 || i < 0 || i >= MAX_IDS) {
                a->other++;
                continue;
            }
            a->count[i]++;
            a->part[i] = p;
            json_t *j = json_loads(ev->text, 0, NULL);
            assert_non_null(j);
            const char *k;
            json_t *v;
            json_object_foreach(j, k, v)
            {
                if (strncmp(k, "sluice", 6) == 0 && strcmp(k, "sluiceset") != 0 &&
                    strcmp(k, "sluicepartition") != 0 && strcmp(k, "sluiceoffset") != 0)
                    fail_msg("%s kept the attribute %s: %s", ev->id, k, ev->text);
            }
            char key[16];
            key_of(i, key, sizeof key);
            const char *kname = i % 5 == 4 ? "subject" : "partitionkey";
            if (!json_is_string(json_object_get(j, kname)) ||
                strcmp(json_string_value(json_object_get(j, kname)), key) != 0)
                fail_msg("%s lost its %s %s: %s", ev->id, kname, key, ev->text);
            if (strcmp(ev->lane, lane_of(i)) != 0)
                fail_msg("%s has lane \"%s\", want \"%s\": %s", ev->id, ev->lane, lane_of(i),
                         ev->text);
            json_t *n = json_object_get(json_object_get(j, "data"), "n");
            assert_true(json_is_integer(n) && json_integer_value(n) == i);
            assert_string_equal(json_string_value(json_object_get(j, "time")),
                                "2026-11-29T10:00:00.000Z");
            assert_string_equal(json_string_value(json_object_get(j, "type")), "order.created");
            json_decref(j);
        }
        it_evs_free(&evs);
    }
}

/* Asserts that d<0 .. n) each arrived exactly once, and nothing past n. */
static void expect_once(const arrived *a, int n)
{
    for (int i = 0; i < MAX_IDS; i++) {
        int want = i < n ? 1 : 0;
        if (a->count[i] != want)
            fail_msg("d%d arrived %d times, want %d", i, a->count[i], want);
    }
    assert_int_equal(a->other, 0);
}

/* ---- 1. the endpoint: once each, attributes stripped, lanes and keys kept ---------- */

static void test_redrive_api(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL); /* no config: sets are made on first use, 4 partitions */
    int dparts[MAX_IDS];
    post_live(s, "orders", 0);
    post_dlq(s, "orders-dlq", 0, 40, dparts);

    json_t *j = redrive_ok(s, "orders-dlq", "to=orders", NULL, 40, 0);
    json_t *parts = json_object_get(j, "partitions");
    assert_int_equal(json_array_size(parts), 4);
    json_int_t total = 0;
    for (size_t p = 0; p < 4; p++) {
        json_t *e = json_array_get(parts, p);
        assert_int_equal(json_integer_value(json_object_get(e, "partition")), p);
        assert_int_equal(json_integer_value(json_object_get(e, "from")), 0);
        total += json_integer_value(json_object_get(e, "to"));
    }
    assert_int_equal(total, 40);
    assert_string_equal(json_string_value(json_object_get(j, "to")), "orders");
    json_decref(j);

    arrived a;
    read_target(s, "orders", 4, &a);
    expect_once(&a, 40);
    assert_int_equal(a.live, 1);
    /* Same partition count, same key: the same partition as in the DLQ. */
    for (int i = 0; i < 40; i++)
        if (a.part[i] != dparts[i])
            fail_msg("d%d went to partition %d, want %d (its key's)", i, a.part[i], dparts[i]);

    /* Moved means moved: nothing again. */
    json_decref(redrive_ok(s, "orders-dlq", "to=orders", NULL, 0, 0));
    /* New dead letters: only those, asked for with a JSON body this time. */
    post_dlq(s, "orders-dlq", 40, 50, NULL);
    json_decref(redrive_ok(s, "orders-dlq", NULL, "{\"to\": \"orders\"}", 10, 0));
    read_target(s, "orders", 4, &a);
    expect_once(&a, 50);

    /* max bounds each call. */
    post_dlq(s, "orders-dlq", 50, 57, NULL);
    json_decref(redrive_ok(s, "orders-dlq", "to=orders&max=3", NULL, 3, 0));
    json_decref(redrive_ok(s, "orders-dlq", NULL, "{\"to\":\"orders\",\"max\":3}", 3, 0));
    read_target(s, "orders", 4, &a);
    int moved = 0;
    for (int i = 50; i < 57; i++)
        moved += a.count[i];
    assert_int_equal(moved, 6);
    json_decref(redrive_ok(s, "orders-dlq", "to=orders&max=3", NULL, 1, 0));
    json_decref(redrive_ok(s, "orders-dlq", "to=orders&max=0", NULL, 0, 0));
    read_target(s, "orders", 4, &a);
    expect_once(&a, 57);
    assert_int_equal(a.live, 1);
    s->passed = true;
}

/* ---- 2. bad requests ------------------------------------------------------------------ */

static void expect_redrive_error(it_server *s, const char *dlq, const char *query, const char *body,
                                 long status, const char *want)
{
    it_resp r = redrive_req(s, dlq, query, body);
    it_expect_error(&r, status, NULL);
    if (want && !strstr(it_body(&r), want))
        fail_msg("redrive %s ?%s %s: want \"%s\" in %s", dlq, query ? query : "", body ? body : "",
                 want, it_body(&r));
    it_resp_free(&r);
}

static void test_redrive_errors(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    post_live(s, "orders", 0);
    post_dlq(s, "dlq", 0, 3, NULL);
    expect_redrive_error(s, "dlq", NULL, NULL, 400, "to is required");
    expect_redrive_error(s, "dlq", "max=2", NULL, 400, "to is required");
    expect_redrive_error(s, "dlq", "to=", NULL, 400, NULL);
    expect_redrive_error(s, "dlq", "to=no%20such", NULL, 400, "not a set name");
    expect_redrive_error(s, "dlq", "to=nosuch", NULL, 404, "nosuch");
    expect_redrive_error(s, "nosuch", "to=orders", NULL, 404, "nosuch");
    expect_redrive_error(s, "dlq", "to=dlq", NULL, 400, "itself");
    expect_redrive_error(s, "dlq", "to=orders&max=abc", NULL, 400, "max");
    expect_redrive_error(s, "dlq", "to=orders&max=-1", NULL, 400, "max");
    expect_redrive_error(s, "dlq", NULL, "{\"to\":5}", 400, "to must be");
    expect_redrive_error(s, "dlq", NULL, "{\"to\":\"orders\",\"max\":1.5}", 400, "max");
    expect_redrive_error(s, "dlq", NULL, "{\"to\":\"orders\",\"max\":-2}", 400, "max");
    expect_redrive_error(s, "dlq", NULL, "not json", 400, "JSON");
    expect_redrive_error(s, "dlq", NULL, "[1]", 400, NULL);
    /* Only POST. */
    it_resp r = it_get(s, "/v1/sets/dlq/redrive?to=orders");
    it_expect_error(&r, 405, NULL);
    it_resp_free(&r);
    /* None of this moved anything. */
    json_decref(redrive_ok(s, "dlq", "to=orders", NULL, 3, 0));
    s->passed = true;
}

/* ---- 3. with a config: other partition counts, lanes, the router's hook ------------ */

static void test_redrive_config(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"dead\" { partitions = 2 }\n"
                    "set \"live\" { partitions = 3 }\n");
    it_srv_start(s, "-c", cfg, NULL);
    post_dlq(s, "dead", 0, 30, NULL);
    /* An attribute name written with an escape is the same attribute. */
    sl_buf b = SL_BUF_INIT;
    add_dlq_event(&b, 30);
    char *at = strstr((char *)b.data, "\"sluiceerror\"");
    assert_non_null(at);
    sl_buf e = SL_BUF_INIT;
    sl_buf_append(&e, b.data, (size_t)(at - (char *)b.data));
    sl_buf_printf(&e, "\"\\u0073luiceerror\"%s", at + strlen("\"sluiceerror\""));
    it_resp r = it_post(s, "dead", IT_CT_NDJSON, NULL, (const char *)e.data, e.len);
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);
    sl_buf_free(&b);
    sl_buf_free(&e);
    json_t *j = redrive_ok(s, "dead", "to=live", NULL, 31, 0);
    assert_int_equal(json_array_size(json_object_get(j, "partitions")), 2);
    json_decref(j);
    arrived a;
    read_target(s, "live", 3, &a);
    expect_once(&a, 31);
    /* Events with one key stay together in one partition of the new set. */
    for (int i = 0; i < 31; i++)
        for (int k = 0; k < i; k++) {
            char ki[16], kk[16];
            key_of(i, ki, sizeof ki);
            key_of(k, kk, sizeof kk);
            if (strcmp(ki, kk) == 0 && a.part[i] != a.part[k])
                fail_msg("d%d and d%d share key %s but went to partitions %d and %d", i, k, ki,
                         a.part[i], a.part[k]);
        }
    json_decref(redrive_ok(s, "dead", "to=live", NULL, 0, 0));
    s->passed = true;
}

/* ---- 3b. dead letters written by a real rule, moved back into its set ------------------ */

/* Reads every partition (every lane) of set into one list. */
static it_evs read_every(it_server *s, const char *set, int nparts)
{
    it_evs all = {0};
    for (int p = 0; p < nparts; p++) {
        it_evs e = it_read_all(s, set, p, "*");
        for (size_t i = 0; i < e.n; i++) {
            if (all.n == all.cap) {
                all.cap = all.cap ? 2 * all.cap : 16;
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

static void test_redrive_from_rule(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    /* Port 1 refuses connections: one attempt, then the dead-letter set. */
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"orders\" { partitions = 2 }\n"
                    "set \"orders-dlq\" { partitions = 2 }\n"
                    "rule \"ship\" {\n"
                    "  set = \"orders\",\n"
                    "  start = \"beginning\",\n"
                    "  target = target.http { url = \"http://127.0.0.1:1/x\" },\n"
                    "  retry = { attempts = 1 },\n"
                    "  dlq = \"orders-dlq\",\n"
                    "}\n");
    it_srv_start(s, "-c", cfg, NULL);
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"o1\",\"source\":\"/s\",\"type\":\"t\","
                      "\"partitionkey\":\"pk\",\"lane\":\"boe-a\",\"data\":{\"a\":1}}\n"
                      "{\"specversion\":\"1.0\",\"id\":\"o2\",\"source\":\"/s\",\"type\":\"t\","
                      "\"subject\":\"sj\",\"data\":{\"a\":2}}\n");
    it_resp r = it_post(s, "orders", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_decref(it_expect_results(&r, 2, 0));
    it_resp_free(&r);
    sl_buf_free(&b);
    /* Wait for both dead letters. */
    it_evs dead = {0};
    for (double end = it_mono() + WAIT_S;; it_sleep_ms(50)) {
        it_evs_free(&dead);
        dead = read_every(s, "orders-dlq", 2);
        if (dead.n >= 2)
            break;
        if (it_mono() > end)
            fail_msg("the rule wrote %zu dead letters in %.0f s, want 2", dead.n, WAIT_S);
    }
    assert_int_equal(dead.n, 2);
    assert_non_null(strstr(dead.v[0].text, "\"sluiceerror\""));
    it_evs_free(&dead);
    /* Move them into a fresh set (back into orders would fail them again). */
    post_live(s, "retry-in", 0);
    json_decref(redrive_ok(s, "orders-dlq", "to=retry-in", NULL, 2, 0));
    it_evs back = read_every(s, "retry-in", 4);
    assert_int_equal(back.n, 3);
    int found = 0;
    for (size_t i = 0; i < back.n; i++) {
        const it_rawev *ev = &back.v[i];
        if (strncmp(ev->id, "live", 4) == 0)
            continue;
        found++;
        json_t *j = json_loads(ev->text, 0, NULL);
        assert_non_null(j);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
        {
            if (strncmp(k, "sluice", 6) == 0 && strcmp(k, "sluiceset") != 0 &&
                strcmp(k, "sluicepartition") != 0 && strcmp(k, "sluiceoffset") != 0)
                fail_msg("%s kept %s: %s", ev->id, k, ev->text);
        }
        if (strcmp(ev->id, "o1") == 0) {
            assert_string_equal(ev->lane, "boe-a");
            assert_string_equal(json_string_value(json_object_get(j, "partitionkey")), "pk");
        } else {
            assert_string_equal(ev->id, "o2");
            assert_string_equal(ev->lane, "");
            assert_string_equal(json_string_value(json_object_get(j, "subject")), "sj");
        }
        json_decref(j);
    }
    assert_int_equal(found, 2);
    it_evs_free(&back);
    json_decref(redrive_ok(s, "orders-dlq", "to=retry-in", NULL, 0, 0));
    s->passed = true;
}

/* ---- 4. concurrent redrives of one dead-letter set do not interleave --------------- */

typedef struct racer {
    it_server *s;
    long status;
    json_int_t moved;
} racer;

static void *racer_main(void *arg)
{
    racer *r = arg;
    it_resp resp;
    it_call k = {
        .method = "POST", .path = "/v1/sets/dlq/redrive?to=orders&max=0", .timeout_ms = 60000};
    if (it_http(NULL, r->s->port, &k, &resp) == 0) {
        r->status = resp.status;
        json_t *j = json_loads(it_body(&resp), 0, NULL);
        r->moved = json_integer_value(json_object_get(j, "redriven"));
        json_decref(j);
    }
    it_resp_free(&resp);
    return NULL;
}

static void test_redrive_concurrent(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    post_live(s, "orders", 0);
    for (int i = 0; i < 600; i += 100)
        post_dlq(s, "dlq", i, i + 100, NULL);
    racer r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){.s = s};
        assert_int_equal(pthread_create(&t[i], NULL, racer_main, &r[i]), 0);
    }
    json_int_t sum = 0;
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        /* One runs; one that comes while it runs gets 409 at once. */
        if (r[i].status != 200 && r[i].status != 409)
            fail_msg("racer %d answered %ld", i, r[i].status);
        if (r[i].status == 200) {
            ok++;
            sum += r[i].moved;
        }
    }
    assert_true(ok >= 1);
    assert_int_equal(sum, 600);
    arrived a;
    read_target(s, "orders", 4, &a);
    expect_once(&a, 600);
    s->passed = true;
}

/* ---- 4b. a long redrive: HTTP threads stay free, 409 for a second one, SIGTERM ------- */

#define BIG 12000

typedef struct bg {
    it_server *s;
    it_resp r;
    int rc;
    _Atomic bool done;
} bg;

static void *bg_main(void *arg)
{
    bg *b = arg;
    it_call k = {.method = "POST", .path = "/v1/sets/dlq/redrive?to=slow", .timeout_ms = 60000};
    b->rc = it_http(NULL, b->s->port, &k, &b->r);
    atomic_store(&b->done, true);
    return NULL;
}

/* How many times each d<i> (i < BIG) is in set; fails on anything else. */
static int *count_big(it_server *s, const char *set)
{
    int *n = calloc(BIG, sizeof *n);
    assert_non_null(n);
    it_evs all = read_every(s, set, 1);
    for (size_t e = 0; e < all.n; e++) {
        int i = -1;
        if (sscanf(all.v[e].id, "d%d", &i) != 1 || i < 0 || i >= BIG)
            fail_msg("unexpected event %s in %s", all.v[e].id, set);
        n[i]++;
    }
    it_evs_free(&all);
    return n;
}

static void test_redrive_stop(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    /* A buffer smaller than a chunk: the redrive goes one event (and one
     * fsync) at a time, so that it runs for a while. */
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"dlq\" { partitions = 1 }\n"
                    "set \"slow\" { partitions = 1, buffer_bytes = \"4KiB\" }\n");
    it_srv_start(s, "-c", cfg, NULL);
    for (int i = 0; i < BIG; i += 500)
        post_dlq(s, "dlq", i, i + 500, NULL);

    bg b = {.s = s};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, bg_main, &b), 0);
    it_sleep_ms(300);
    /* Meanwhile every HTTP thread answers: new connections land on all of
     * them (none is parked in the redrive). */
    for (int i = 0; i < 32; i++) {
        it_resp r;
        it_http(NULL, s->port, &(it_call){.path = "/healthz", .timeout_ms = 3000}, &r);
        if (r.status != 200 || r.secs > 1.5)
            fail_msg("/healthz during a redrive: %ld after %.2f s", r.status, r.secs);
        it_resp_free(&r);
    }
    /* A second redrive of the set answers 409 at once. */
    it_resp r = redrive_req(s, "dlq", "to=slow", NULL);
    if (r.status != 409 || !strstr(it_body(&r), "a redrive of dlq is running") || r.secs > 2.0)
        fail_msg("second redrive: %ld after %.2f s: %s", r.status, r.secs, it_body(&r));
    it_resp_free(&r);
    if (atomic_load(&b.done))
        fail_msg("the redrive was over before the server stopped (%ld: %s)", b.r.status,
                 it_body(&b.r));

    /* SIGTERM: the redrive ends at once, and the server exits cleanly. */
    double t0 = it_mono();
    int st = it_srv_stop(s, SIGTERM, 20);
    double took = it_mono() - t0;
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || took > 5.0)
        fail_msg("the server stopped with status %d after %.1f s", st, took);
    pthread_join(t, NULL);
    /* Its connection got an answer (503: stopping), or was closed. */
    if (b.rc == 0 && (b.r.status != 503 || !strstr(it_body(&b.r), "stopping")))
        fail_msg("the stopped redrive answered %ld: %s", b.r.status, it_body(&b.r));
    it_resp_free(&b.r);

    /* After the restart the rest moves, and each event is there once. */
    it_srv_restart(s);
    int *before = count_big(s, "slow");
    int moved = 0;
    for (int i = 0; i < BIG; i++) {
        assert_true(before[i] <= 1);
        moved += before[i];
    }
    assert_true(moved > 0 && moved < BIG);
    json_decref(redrive_ok(s, "dlq", "to=slow", NULL, BIG - moved, 0));
    int *after = count_big(s, "slow");
    for (int i = 0; i < BIG; i++)
        if (after[i] != 1)
            fail_msg("d%d is in the destination %d times", i, after[i]);
    free(before);
    free(after);
    s->passed = true;
}

/* ---- 5. the CLI, a damaged dead letter, and the position across a restart ---------- */

static void test_redrive_cli_restart(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    post_live(s, "orders", 0);
    post_dlq(s, "orders-dlq", 0, 12, NULL);
    char server[64];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", s->port);
    char *out, *err;

    int rc = it_run(s, NULL, &out, &err,
                    (const char *[]){"redrive", "orders-dlq", "--to", "orders", "--max", "5",
                                     "--server", server, NULL},
                    WAIT_S);
    if (rc != 0 || strcmp(out, "redriven 5 events from orders-dlq to orders (0 skipped)\n") != 0)
        fail_msg("sluice redrive exited %d: stdout %s stderr %s", rc, out, err);
    free(out);
    free(err);
    rc = it_run(s, NULL, &out, &err,
                (const char *[]){"redrive", "orders-dlq", "--to=orders", "--server", server, NULL},
                WAIT_S);
    if (rc != 0 || strcmp(out, "redriven 7 events from orders-dlq to orders (0 skipped)\n") != 0)
        fail_msg("sluice redrive exited %d: stdout %s stderr %s", rc, out, err);
    free(out);
    free(err);
    /* Errors: exit 1 with the server's reason; usage errors exit 2. */
    rc = it_run(
        s, NULL, &out, &err,
        (const char *[]){"redrive", "orders-dlq", "--to", "nosuch", "--server", server, NULL},
        WAIT_S);
    if (rc != 1 || !strstr(err, "nosuch") || !strstr(err, "does not exist") || out[0])
        fail_msg("redrive to a missing set exited %d: stdout %s stderr %s", rc, out, err);
    free(out);
    free(err);
    rc = it_run(s, NULL, &out, &err,
                (const char *[]){"redrive", "orders-dlq", "--server", server, NULL}, WAIT_S);
    if (rc != 2 || !strstr(err, "--to"))
        fail_msg("redrive without --to exited %d: stderr %s", rc, err);
    free(out);
    free(err);
    rc = it_run(s, NULL, &out, &err,
                (const char *[]){"redrive", "orders-dlq", "--to", "orders", "--server",
                                 "http://127.0.0.1:1", NULL},
                WAIT_S);
    if (rc != 1 || !err[0])
        fail_msg("redrive with no server exited %d: stderr %s", rc, err);
    free(out);
    free(err);

    /* Stop the server; damage partition 0 of the dead-letter set with a
     * record that is no event; restart: the position was kept, so only the
     * new dead letters move and the damaged one is skipped and reported. */
    assert_true(it_srv_stop(s, SIGTERM, 20) >= 0);
    char in[PATH_MAX], pdir[PATH_MAX];
    it_path(in, s, "garbage.txt");
    it_write_file(in, "this is not an event\n");
    snprintf(pdir, sizeof pdir, "%s/sets/orders-dlq/0", s->data);
    rc = it_run(s, in, &out, &err, (const char *[]){"log", "append", pdir, "--sync", NULL}, WAIT_S);
    if (rc != 0)
        fail_msg("sluice log append exited %d: %s", rc, err);
    free(out);
    free(err);
    it_srv_restart(s);
    snprintf(server, sizeof server, "http://127.0.0.1:%d", s->port);
    post_dlq(s, "orders-dlq", 12, 15, NULL);
    json_t *j = redrive_ok(s, "orders-dlq", "to=orders", NULL, 3, 1);
    json_t *sk = json_array_get(json_object_get(j, "skipped_events"), 0);
    assert_non_null(sk);
    assert_int_equal(json_integer_value(json_object_get(sk, "partition")), 0);
    assert_non_null(strstr(json_string_value(json_object_get(sk, "reason")), "JSON"));
    json_decref(j);
    arrived a;
    read_target(s, "orders", 4, &a);
    expect_once(&a, 15);
    assert_int_equal(a.live, 1);
    /* The skipped record is behind the position now. */
    rc = it_run(
        s, NULL, &out, &err,
        (const char *[]){"redrive", "orders-dlq", "--to", "orders", "--server", server, NULL},
        WAIT_S);
    if (rc != 0 || strcmp(out, "redriven 0 events from orders-dlq to orders (0 skipped)\n") != 0)
        fail_msg("sluice redrive exited %d: stdout %s stderr %s", rc, out, err);
    free(out);
    free(err);
    /* The position lives under DATA/rules/~redrive/<dlq>/. */
    char cur[PATH_MAX];
    struct stat sb;
    snprintf(cur, sizeof cur, "%s/rules/~redrive/orders-dlq/0.cursor", s->data);
    assert_int_equal(stat(cur, &sb), 0);
    s->passed = true;
}

/* ---- main ------------------------------------------------------------------------------ */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_redrive"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_redrive_api),       T(test_redrive_errors),     T(test_redrive_config),
        T(test_redrive_from_rule), T(test_redrive_concurrent), T(test_redrive_cli_restart),
        T(test_redrive_stop),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
