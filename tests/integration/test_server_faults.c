/*
 * tests/integration/test_server_faults.c — the real `bin/sluice serve` under
 * faults and load, driven with libcurl: many waiting long-polls, restarts,
 * SIGTERM and SIGKILL under load (every acknowledged event must survive),
 * back-pressure, and slow and idle clients (issue 3, section 6).
 * SLUICE_SOAK=1 runs the crash loops longer. The API itself is checked in
 * test_server_api.c; the harness is itest.h.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- load writers and acknowledgements ------------------------------------- */

/* it_ack/it_acks (itest.h) under the short names this file uses. */
typedef it_ack ack;
typedef it_acks acks;

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

static bool writer_answer(writer *w, const it_resp *r, int seq0)
{
    json_t *j = json_loads(it_body(r), 0, NULL);
    json_t *res = json_object_get(j, "results");
    if (r->status == 200) {
        if (json_integer_value(json_object_get(j, "accepted")) != w->batch ||
            json_array_size(res) != (size_t)w->batch) {
            snprintf(w->problem, sizeof w->problem, "200 without %d accepted: %.300s", w->batch,
                     it_body(r));
        } else {
            for (int i = 0; i < w->batch; i++) {
                json_t *e = json_array_get(res, (size_t)i);
                char id[48];
                snprintf(id, sizeof id, "%s-%d", w->tag, seq0 + i);
                it_acks_add(w->acks, (int)json_integer_value(json_object_get(e, "partition")),
                            (int64_t)json_integer_value(json_object_get(e, "offset")), id);
            }
            w->ok++;
        }
    } else if (r->status == 503) {
        /* Back-pressure or shutdown: always an answer with Retry-After and a JSON error. */
        const char *e = json_string_value(json_object_get(j, "error"));
        const char *m = json_string_value(json_object_get(j, "message"));
        if (!e || !m || !r->retry_after[0] || strncmp(r->ctype, "application/json", 16))
            snprintf(w->problem, sizeof w->problem,
                     "bad 503 (Retry-After \"%s\", type %s): "
                     "%.300s",
                     r->retry_after, r->ctype, it_body(r));
        w->refused++;
        w->full += e && strcmp(e, "Backpressure") == 0;
    } else {
        snprintf(w->problem, sizeof w->problem, "unexpected %ld: %.300s", r->status, it_body(r));
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
    double end = it_mono() + 60, last_ok = it_mono();
    /* Gives up after 10 s without an acknowledgement (the server is gone). */
    while (!atomic_load(w->stop) && !w->problem[0] && it_mono() - last_ok < 10 && it_mono() < end &&
           (!w->max_requests || w->ok < w->max_requests)) {
        b.len = 0;
        for (int i = 0; i < w->batch; i++)
            sl_buf_printf(&b,
                          "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/load\","
                          "\"type\":\"load\",\"data\":{\"n\":%d,\"pad\":\"%s\"}}\n",
                          w->tag, seq + i, seq + i, pad);
        it_resp r;
        it_call k = {
            .path = path, .ctype = IT_CT_NDJSON, .body = b.data, .len = b.len, .timeout_ms = 20000};
        if (it_http(c, w->port, &k, &r) == 0 && writer_answer(w, &r, seq)) {
            last_ok = it_mono();
        } else {
            w->lost += r.status == 0;
            it_sleep_ms(w->retry_ms);
        }
        seq += w->batch; /* ids are never reused, even for refused requests */
        it_resp_free(&r);
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
static size_t check_acks(it_server *s, const char *set, int nparts, acks *a)
{
    it_evs *parts = calloc((size_t)nparts, sizeof *parts);
    size_t total = 0;
    for (int p = 0; p < nparts; p++) {
        parts[p] = it_read_all(s, set, p, "*");
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
            fail_msg("%d/%lld was acknowledged for %s but holds %s", x->part, (long long)x->offset,
                     x->id, got);
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
        it_evs_free(&parts[p]);
    free(parts);
    return total;
}

/* ---- many waiting consumers ------------------------------------------------------ */

/* Many concurrent long-polls on one curl multi handle. */
typedef struct polls {
    CURLM *m;
    int n, running;
    CURL **h;
    it_resp *r;
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
        it_http_prepare(pl->h[i], port, &(it_call){.path = path, .timeout_ms = wait_ms + 15000L},
                        &pl->r[i], &pl->hl[i]);
        curl_easy_setopt(pl->h[i], CURLOPT_PRIVATE, (void *)(intptr_t)i);
        curl_multi_add_handle(pl->m, pl->h[i]);
    }
    for (double end = it_mono() + 1.0; it_mono() < end;) {
        curl_multi_perform(pl->m, &pl->running);
        curl_multi_poll(pl->m, NULL, 0, 20, NULL);
    }
    if (pl->running != n)
        fail_msg("%d of %d long-polls were answered before anything was published", n - pl->running,
                 n);
}

/* Drives the polls until all are answered or secs pass; returns the time taken. */
static double polls_wait(polls *pl, double secs)
{
    double t0 = it_mono();
    while (pl->running && it_mono() - t0 < secs) {
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
        it_http_finish(msg->easy_handle, msg->data.result, &pl->r[(intptr_t)priv]);
    }
    return it_mono() - t0;
}

/* How many polls were answered 200 with want events; *problem describes
 * the first that was not. */
static int polls_count(polls *pl, size_t want, char *problem, size_t size)
{
    int good = 0;
    problem[0] = '\0';
    for (int i = 0; i < pl->n; i++) {
        it_evs e = {0};
        const it_resp *r = &pl->r[i];
        if (r->status == 200 && it_parse_events(it_body(r), r->body.len, &e) && e.n == want)
            good++;
        else if (!problem[0])
            snprintf(problem, size, "poll %d: %ld %s %.200s", i, r->status,
                     r->status ? "" : "(no answer)", it_body(r));
        it_evs_free(&e);
    }
    return good;
}

static void polls_free(polls *pl)
{
    for (int i = 0; i < pl->n; i++) {
        curl_multi_remove_handle(pl->m, pl->h[i]);
        curl_easy_cleanup(pl->h[i]);
        curl_slist_free_all(pl->hl[i]);
        it_resp_free(&pl->r[i]);
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
    it_server *s = *state;
    it_srv_start(s, NULL); /* 4 partitions */
    char *ev = it_event("seed", NULL);
    int p;
    int64_t o;
    it_post_one(s, "many", ev, &p, &o);
    free(ev);
    enum { N = 200 };
    polls pl;
    polls_start(&pl, s->port, N, "many", 4, 8000);
    /* The server is still answering others at once. */
    double worst = 0;
    for (int i = 0; i < 5; i++) {
        it_resp hz;
        assert_int_equal(it_http(NULL, s->port, &(it_call){.path = "/healthz"}, &hz), 0);
        assert_int_equal(hz.status, 200);
        worst = hz.secs > worst ? hz.secs : worst;
        it_resp_free(&hz);
    }
    if (worst > 0.5)
        fail_msg("/healthz took %.0f ms with %d long-polls waiting", worst * 1e3, N);
    /* Four keyless events: one per partition (round robin). */
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 4; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"wake%d\",\"source\":\"/s\","
                      "\"type\":\"t\"}\n",
                      i);
    it_resp pr = it_post(s, "many", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_decref(it_expect_results(&pr, 4, 0));
    it_resp_free(&pr);
    sl_buf_free(&b);
    double took = polls_wait(&pl, 6);
    char problem[512];
    int woken = polls_count(&pl, 1, problem, sizeof problem);
    polls_free(&pl);
    if (woken != N)
        fail_msg("%d of %d long-polls answered with the new event within %.2f s; %s", woken, N,
                 took, problem);
    if (took > 4)
        fail_msg("waking %d long-polls took %.2f s (their deadline was 8 s)", N, took);
    s->passed = true;
}

/* SIGTERM while consumers wait: each gets its (empty) answer, and the
 * server exits 0 at once instead of waiting out their 30 s. */
static void test_sigterm_answers_long_polls(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char *ev = it_event("seed", NULL);
    int p;
    int64_t o;
    it_post_one(s, "bye", ev, &p, &o);
    free(ev);
    enum { N = 50 };
    polls pl;
    polls_start(&pl, s->port, N, "bye", 4, 30000);
    double t0 = it_mono();
    int st = it_srv_stop(s, SIGTERM, 20);
    double took = it_mono() - t0;
    polls_wait(&pl, 5);
    char problem[512];
    int answered = polls_count(&pl, 0, problem, sizeof problem);
    polls_free(&pl);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("SIGTERM with %d long-polls waiting: wait status %d, want exit 0", N, st);
    if (took > 5)
        fail_msg("SIGTERM with %d long-polls waiting took %.2f s to exit", N, took);
    if (answered != N)
        fail_msg("%d of %d waiting long-polls got an answer at shutdown; %s", answered, N, problem);
    s->passed = true;
}

/* ---- restarts and crashes ----------------------------------------------------- */

static int cmp_set_name(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
                  json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

/* The set names of GET /v1/sets, in the order listed, one per line. */
static char *set_names(it_server *s)
{
    it_resp r = it_get(s, "/v1/sets");
    json_t *j = it_parse_json(&r);
    sl_buf b = SL_BUF_INIT;
    json_t *sets = json_object_get(j, "sets");
    for (size_t i = 0; i < json_array_size(sets); i++)
        sl_buf_printf(&b, "%s\n",
                      json_string_value(json_object_get(json_array_get(sets, i), "name")));
    sl_buf_append(&b, "", 1);
    json_decref(j);
    it_resp_free(&r);
    return (char *)b.data;
}

/* Everything a client can see of the server's data, as one string (the
 * listing of sets sorted by name: its order is checked on its own). */
static char *snapshot(it_server *s, const char *const *sets, int nparts)
{
    sl_buf b = SL_BUF_INIT;
    it_resp r = it_get(s, "/v1/sets");
    json_t *j = it_parse_json(&r);
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
    it_resp_free(&r);
    for (size_t i = 0; sets[i]; i++) {
        r = it_get(s, "/v1/sets/%s", sets[i]);
        assert_int_equal(r.status, 200);
        sl_buf_printf(&b, "%s", it_body(&r));
        it_resp_free(&r);
        for (int p = 0; p < nparts; p++) {
            it_evs e = it_read_all(s, sets[i], p, "*");
            for (size_t k = 0; k < e.n; k++)
                sl_buf_printf(&b, "%s\n", e.v[k].text);
            it_evs_free(&e);
        }
    }
    sl_buf_append(&b, "", 1);
    return (char *)b.data;
}

static void test_restart_keeps_everything(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--partitions", "3", NULL);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 300; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"k%d\",\"source\":\"/s\","
                      "\"type\":\"t\",\"partitionkey\":\"key%d\",\"data\":{\"i\":%d}}\n",
                      i, i % 7, i);
    it_resp r = it_post(s, "keep-a", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    json_decref(it_expect_results(&r, 300, 0));
    it_resp_free(&r);
    const char *blue[] = {"X-Sluice-Lane: blue", NULL};
    r = it_post(s, "keep-a", IT_CT_NDJSON, blue, (const char *)b.data, b.len / 10);
    assert_int_equal(r.status, 200);
    it_resp_free(&r);
    const char *hdrs[] = {"ce-specversion: 1.0", "ce-id: bin", "ce-source: /s", "ce-type: t", NULL};
    r = it_post(s, "keep-b", "application/octet-stream", hdrs, "\x01\x02", 2);
    json_decref(it_expect_results(&r, 1, 0));
    it_resp_free(&r);
    sl_buf_free(&b);
    static const char *const sets[] = {"keep-a", "keep-b", NULL};
    char *before = snapshot(s, sets, 3);

    int st = it_srv_stop(s, SIGTERM, 15);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("SIGTERM: the server did not exit 0 (wait status %d)", st);
    assert_true(it_log_contains(s, "stopped cleanly"));
    it_srv_restart(s);
    char *after = snapshot(s, sets, 3);
    if (strcmp(before, after) != 0)
        fail_msg("after a restart the server shows\n%.2000s\ninstead of\n%.2000s", after, before);
    /* Offsets go on where they stopped. */
    r = it_get(s, "/v1/sets/keep-b");
    json_t *j = it_parse_json(&r);
    json_t *pi = json_object_get(j, "partition_info");
    it_resp_free(&r);
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "again%d", i);
        char *ev = it_event(id, NULL);
        int p;
        int64_t o;
        it_post_one(s, "keep-b", ev, &p, &o);
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
    st = it_srv_stop(s, SIGTERM, 15);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    it_srv_restart(s);
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
    it_server *s = *state;
    it_srv_start(s, NULL);
    /* Created in this order; listed in name (byte) order, before and after. */
    static const char *const names[] = {"zeta", "alpha", "mid", "beta", "omega",
                                        "b2",   "a1",    "x-9", "k.k",  "c_c"};
    static const char sorted[] = "a1\nalpha\nb2\nbeta\nc_c\nk.k\nmid\nomega\nx-9\nzeta\n";
    char *ev = it_event("o", NULL);
    sl_buf want = SL_BUF_INIT;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        int p;
        int64_t o;
        it_post_one(s, names[i], ev, &p, &o);
    }
    sl_buf_append(&want, sorted, sizeof sorted - 1);
    sl_buf_append(&want, "", 1);
    free(ev);
    char *before = set_names(s);
    assert_string_equal(before, (const char *)want.data);
    assert_int_equal(WEXITSTATUS(it_srv_stop(s, SIGTERM, 15)), 0);
    it_srv_restart(s);
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
    it_server *s = *state;
    it_srv_start(s, "--ack", "buffer", NULL); /* 4 partitions */
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    _Atomic bool stop = false;
    writer w[3] = {{.batch = 50, .pad = 200}, {.batch = 50, .pad = 200}, {.batch = 50, .pad = 200}};
    writers_start(w, 3, s->port, "term", "term", &stop, &a);
    double t0 = it_mono();
    while (it_acks_count(&a) < 2000 && it_mono() - t0 < 10)
        it_sleep_ms(10);
    it_sleep_ms(100 + rand() % 300);
    size_t at_signal = it_acks_count(&a);
    int st = it_srv_stop(s, SIGTERM, 20);
    atomic_store(&stop, true);
    writers_join(w, 3);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("SIGTERM under load: wait status %d, want exit 0", st);
    assert_true(at_signal > 0);
    it_srv_restart(s);
    size_t stored = check_acks(s, "term", 4, &a);
    printf("SIGTERM under load: %zu acknowledged (%zu at the signal), %zu stored, "
           "%d+%d+%d refused\n",
           a.n, at_signal, stored, w[0].refused, w[1].refused, w[2].refused);
    assert_true(stored >= a.n);
    free(a.v);
    s->passed = true;
}

/* ack=durable and SIGKILL at a random moment, again and again: every
 * acknowledged event survives every crash at its acknowledged offset. */
static void test_sigkill_durable_loop(void **state)
{
    it_server *s = *state;
    int cycles = it_soak() ? 50 : 10;
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    it_srv_start(s, "--ack", "durable", "--partitions", "2", NULL);
    for (int c = 0; c < cycles; c++) {
        if (c)
            it_srv_restart(s);
        if (a.n) /* the set exists once something was acknowledged */
            assert_true(check_acks(s, "crash", 2, &a) >= a.n);
        _Atomic bool stop = false;
        writer w[2] = {{.batch = 20, .pad = 100}, {.batch = 5, .pad = 400}};
        char tag[16];
        snprintf(tag, sizeof tag, "c%d", c);
        size_t before = it_acks_count(&a);
        writers_start(w, 2, s->port, "crash", tag, &stop, &a);
        double t0 = it_mono();
        while (it_acks_count(&a) == before && it_mono() - t0 < 10)
            it_sleep_ms(2);
        it_sleep_ms(rand() % 250);
        it_srv_stop(s, SIGKILL, 5);
        atomic_store(&stop, true);
        writers_join(w, 2);
        if (it_acks_count(&a) == before)
            fail_msg("cycle %d: no publish was acknowledged", c);
    }
    it_srv_restart(s);
    size_t stored = check_acks(s, "crash", 2, &a);
    printf("SIGKILL loop: %d cycles, %zu acknowledged events all present (%zu stored)\n", cycles,
           a.n, stored);
    free(a.v);
    s->passed = true;
}

/* ---- back-pressure ------------------------------------------------------------- */

/* Waits up to secs until set holds want events: ack=buffer answers before
 * the write, so a read right after the answer may not see them yet. */
static void wait_stored(it_server *s, const char *set, json_int_t want, double secs)
{
    json_int_t have = -1;
    for (double end = it_mono() + secs; it_mono() < end; it_sleep_ms(50)) {
        it_resp r = it_get(s, "/v1/sets/%s", set);
        json_t *j = json_loads(it_body(&r), 0, NULL);
        have = json_integer_value(json_object_get(j, "events"));
        json_decref(j);
        it_resp_free(&r);
        if (have >= want)
            return;
    }
    fail_msg("set %s holds %lld events after %.0f s, want %lld", set, (long long)have, secs,
             (long long)want);
}

static void test_backpressure(void **state)
{
    it_server *s = *state;
    /* A 64 KiB buffer that the writer empties only after 1.5 s. */
    it_srv_start(s, "--ack", "buffer", "--partitions", "1", "--buffer-bytes", "64KiB",
                 "--linger-ms", "1500", NULL);
    sl_buf b[3] = {SL_BUF_INIT, SL_BUF_INIT, SL_BUF_INIT};
    char pad[2049];
    memset(pad, 'q', 2048);
    pad[2048] = '\0';
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 12; i++) /* ~27 KiB per request */
            sl_buf_printf(&b[k],
                          "{\"specversion\":\"1.0\",\"id\":\"bp%d-%d\",\"source\":\"/s\","
                          "\"type\":\"t\",\"data\":\"%s\"}\n",
                          k, i, pad);
    it_resp r = it_post(s, "bp", IT_CT_NDJSON, NULL, (const char *)b[0].data, b[0].len);
    json_decref(it_expect_results(&r, 12, 0));
    it_resp_free(&r);
    r = it_post(s, "bp", IT_CT_NDJSON, NULL, (const char *)b[1].data, b[1].len);
    json_decref(it_expect_results(&r, 12, 0));
    it_resp_free(&r);
    /* The third does not fit: 503 with Retry-After, nothing stored. */
    r = it_post(s, "bp", IT_CT_NDJSON, NULL, (const char *)b[2].data, b[2].len);
    it_expect_error(&r, 503, "Backpressure");
    if (atoi(r.retry_after) < 1)
        fail_msg("503 without a usable Retry-After (\"%s\")", r.retry_after);
    it_resp_free(&r);
    /* A request larger than the whole buffer could never fit: 413. */
    sl_buf all = SL_BUF_INIT;
    for (int k = 0; k < 3; k++)
        sl_buf_append(&all, b[k].data, b[k].len);
    r = it_post(s, "bp", IT_CT_NDJSON, NULL, (const char *)all.data, all.len);
    it_expect_error(&r, 413, "RequestTooLarge");
    it_resp_free(&r);
    sl_buf_free(&all);
    /* Recovery: retried as Retry-After says, it goes in once the buffer drains. */
    int tries = 0;
    for (; tries < 10; tries++) {
        r = it_post(s, "bp", IT_CT_NDJSON, NULL, (const char *)b[2].data, b[2].len);
        long st = r.status;
        if (st == 200)
            json_decref(it_expect_results(&r, 12, 0));
        else
            it_expect_error(&r, 503, "Backpressure");
        int wait = atoi(r.retry_after);
        it_resp_free(&r);
        if (st == 200)
            break;
        it_sleep_ms(1000L * (wait > 0 ? wait : 1));
    }
    assert_true(tries < 10);
    for (int k = 0; k < 3; k++)
        sl_buf_free(&b[k]);
    /* Everything acknowledged is there, in order, once. */
    wait_stored(s, "bp", 36, 10);
    it_evs e = it_read_all(s, "bp", 0, "*");
    assert_int_equal(e.n, 36);
    for (int i = 0; i < 36; i++) {
        char id[16];
        snprintf(id, sizeof id, "bp%d-%d", i / 12, i % 12);
        assert_string_equal(e.v[i].id, id);
    }
    it_evs_free(&e);
    r = it_get(s, "/metrics");
    assert_true(it_metric(it_body(&r), "sluice_databus_full_total") >= 1);
    assert_true(it_metric(it_body(&r), "sluice_http_requests_total{code=\"503\"}") >= 1);
    it_resp_free(&r);
    it_srv_stop(s, SIGTERM, 15);

    /* Concurrent writers against a tiny buffer: some 503s (each with
     * Retry-After and a JSON body), and every 200 is readable after. */
    it_srv_start(s, "--ack", "buffer", "--partitions", "1", "--buffer-bytes", "16KiB",
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
            fail_msg("writer %d: %d of 25 requests acknowledged (%d refused, %d lost)", i, w[i].ok,
                     w[i].refused, w[i].lost);
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
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
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

/* A client that trickles its body a byte every half second is never idle
 * long enough for the idle timeout; the request deadline cuts it. */
static void test_trickling_client_cut(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--idle-timeout", "2", "--request-timeout", "3", NULL);
    int fd = raw_connect(s->port, "POST /v1/sets/trickle/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  "Content-Type: application/x-ndjson\r\nContent-Length: 1000\r\n"
                                  "\r\n{");
    if (fd < 0)
        fail_msg("connect: %s", strerror(errno));
    double t0 = it_mono(), closed = -1;
    while (closed < 0 && it_mono() - t0 < 15) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 500) > 0) {
            char buf[512];
            ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                closed = it_mono() - t0;
                break;
            }
        }
        if (send(fd, " ", 1, MSG_NOSIGNAL) < 0) /* a byte of whitespace, every 0.5 s */
            closed = it_mono() - t0;
    }
    close(fd);
    printf("trickling client cut after %.2f s (request timeout 3 s)\n", closed);
    if (closed < 2.5 || closed > 8)
        fail_msg("trickling client cut after %.2f s, want around 3 s", closed);
    it_resp r = it_get(s, "/v1/sets/trickle");
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    s->passed = true;
}

/* Half-sent requests and idle connections are closed after --idle-timeout;
 * meanwhile, and with 200 idle connections open, others are served at once. */
static void test_slow_and_idle_clients(void **state)
{
    it_server *s = *state;
    it_srv_start(s, "--idle-timeout", "2", NULL);
    enum { IDLE = 200, N = IDLE + 2 };
    int fd[N];
    double closed[N];
    fd[0] = raw_connect(s->port, "POST /v1/sets/slow/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 "Content-Type: application/x-ndjson\r\nContent-Length: 500\r\n"
                                 "\r\n{\"specversion\":\"1.0\",");
    fd[1] = raw_connect(s->port, "GET /healthz HTTP/1.1\r\nHost: 127");
    for (int i = 2; i < N; i++)
        fd[i] = raw_connect(s->port, NULL);
    double t0 = it_mono();
    for (int i = 0; i < N; i++) {
        if (fd[i] < 0)
            fail_msg("connection %d: %s", i, strerror(errno));
        closed[i] = -1;
    }
    /* Others are served while those sit there. */
    CURL *c = curl_easy_init();
    for (int i = 0; i < 10; i++) {
        it_resp r;
        assert_int_equal(it_http(c, s->port, &(it_call){.path = "/healthz"}, &r), 0);
        assert_int_equal(r.status, 200);
        if (r.secs > 0.5)
            fail_msg("/healthz took %.0f ms with %d idle connections", r.secs * 1e3, N);
        it_resp_free(&r);
        char id[16];
        snprintf(id, sizeof id, "fast%d", i);
        char *ev = it_event(id, ",\"partitionkey\":\"f\"");
        int p;
        int64_t o;
        it_post_one(s, "fast", ev, &p, &o);
        free(ev);
        assert_int_equal(o, i);
    }
    curl_easy_cleanup(c);
    /* Every stalled or idle connection is closed by the server, after the
     * idle timeout and not long after it. */
    int open = N;
    while (open && it_mono() - t0 < 12) {
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
                closed[map[k]] = it_mono() - t0;
                open--;
            }
        }
    }
    for (int i = 0; i < N; i++)
        close(fd[i]);
    if (open)
        fail_msg("%d of %d stalled or idle connections still open after 12 s (idle "
                 "timeout 2 s); e.g. half-sent POST: %s",
                 open, N, closed[0] < 0 ? "open" : "closed");
    double first = 1e9, last = 0;
    for (int i = 0; i < N; i++) {
        first = closed[i] < first ? closed[i] : first;
        last = closed[i] > last ? closed[i] : last;
    }
    printf("idle timeout 2 s: connections closed between %.2f and %.2f s\n", first, last);
    if (first < 1.5 || last > 8)
        fail_msg("connections closed between %.2f and %.2f s, want around 2 s", first, last);
    /* The half-sent event was never stored, and the server is fine. */
    it_resp r = it_get(s, "/v1/sets/slow");
    it_expect_error(&r, 404, "NoSuchSet");
    it_resp_free(&r);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    s->passed = true;
}

/* ---- main ------------------------------------------------------------------------ */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_server_faults"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_many_long_polls),
        T(test_sigterm_answers_long_polls),
        T(test_restart_keeps_everything),
        T(test_set_order_survives_restart),
        T(test_sigterm_under_load),
        T(test_sigkill_durable_loop),
        T(test_backpressure),
        T(test_slow_and_idle_clients),
        T(test_trickling_client_cut),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
