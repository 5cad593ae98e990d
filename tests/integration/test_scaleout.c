/*
 * tests/integration/test_scaleout.c — issue 19 §4: Kafka-backed event sets
 * and sluice routers scaling out, with real processes. librdkafka's mock
 * cluster (build/rel/tools/kafka_mock, 3 brokers on 127.0.0.1) holds the
 * topic acc.orders (6 partitions, replication 3, made through the mock's
 * command channel: the 2.0.2 mock has no CreateTopics); three `bin/sluice
 * serve` routers share one config (each its own data dir and port); the
 * rule "deliver" over the set runs in the group sluice.set.orders and
 * delivers to an in-process HTTP receiver (receiver.h).
 *
 * In order, sharing the cluster and the routers:
 *
 *   sets       GET /v1/sets names backend "kafka", topic and partitions;
 *              `sluice check` takes the config and refuses a kafka set
 *              without server.kafka at FILE:LINE; the group shares the 6
 *              partitions among the 3 routers and GET /v1/rules names it
 *              (members: 3, or null where the cluster cannot describe
 *              groups, as the 2.0.2 mock).
 *   crash      20,000 events (100,000 with SLUICE_SOAK=1; NDJSON batches of
 *              100, a partitionkey each, ack = "durable") posted across the
 *              routers by 3 writers that
 *              move to the next router when one fails; one router SIGKILLed
 *              mid-stream, another stopped with SIGTERM and restarted: every
 *              acknowledged event delivered, order per key among first
 *              deliveries, duplicates counted and bounded; the takeover time
 *              after the SIGKILL printed (partitions reassigned, and the
 *              first delivery from them).
 *   cluster    a broker down 10 s, partition leaders moved, the group
 *              coordinator moved (twice: one of the two is a real move),
 *              errors injected on Produce, Fetch and OffsetCommit: nothing
 *              acknowledged lost, order kept, the group whole again.
 *   target     the receiver answers 503 for 30 s: the routers stay in the
 *              group (GET /v1/rules lists their partitions throughout),
 *              nothing lost, order kept once it recovers.
 *   join       a fourth router joins: the partitions rebalance (it gets
 *              some, each partition owned once); it leaves: they are given
 *              back; events posted meanwhile all delivered.
 *   mixed      one router with a local set and a Kafka-backed set, a
 *              target.set rule from each into the other: both delivered.
 *
 * Every test prints its figures (acknowledged, delivered, duplicates,
 * takeover ms). The assertions are on outcomes (counts, ownership), never
 * on timing; every wait has a deadline.
 *
 * SCALEOUT_LOCAL=1 runs the same harness with local sets (each router its
 * own; no Kafka-specific assertions, the SIGKILLed router restarted, no
 * order check across routers): it tests this file against a sluice without
 * Kafka-backed sets. ITEST_ONLY=NAME runs one test (with the ones it needs
 * before it: the routers start in whichever test runs first).
 */
#include "itest.h"
#include "receiver.h"

#include "core/base/buf.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 60.0          /* the longest any wait of this file lasts (scaled) */
#define OWN(s) ((s) * it_scale())
#define PARTS 6              /* partitions of acc.orders */
#define ALL_PARTS ((1u << PARTS) - 1)
#define ROUTERS 3            /* sharing the config; one more joins in test_join */
#define MAX_R 5              /* the 3, the fourth, the mixed test's */
#define WRITERS 3
#define KEYS 10              /* partition keys per writer */
#define BATCH 100            /* events per POST */
#define SESSION_S 6          /* server.kafka.session_timeout: takeover is bounded by it */
/* server.kafka.delivery_timeout: shorter than the broker outage of
 * test_cluster, so that durable writes to its partitions fail (per-entry
 * errors, 503) and the writers post them again elsewhere */
#define DELIVERY_S 5
#define TOPIC "acc.orders"
#define GROUP "sluice.set.orders"

static bool g_local;          /* SCALEOUT_LOCAL: local sets, no Kafka assertions */
static it_kmock g_mk;
static rx_receiver *g_rx;
static it_server *g_r[MAX_R]; /* routers; their temp dirs hold data/ and server.log */
static _Atomic int g_port[MAX_R]; /* 0 while a router is down: the writers skip it */
static int g_nrouters = ROUTERS;  /* how many of g_r the writers use */
static char g_cfg[PATH_MAX];
static bool g_failed;         /* the current test has not passed (yet) */
static bool g_any_failed;     /* one did not: the group teardown prints the router logs */

/* ---- routers ------------------------------------------------------------------------------ */

static void router_start(int i)
{
    it_start_config(g_r[i], g_cfg, 40);
    atomic_store(&g_port[i], g_r[i]->port);
}

static void router_restart(int i)
{
    it_restart(g_r[i], 40);
    atomic_store(&g_port[i], g_r[i]->port);
}

/* Stops router i with sig (SIGKILL: at once); returns its wait status. */
static int router_stop(int i, int sig)
{
    atomic_store(&g_port[i], 0);
    return it_srv_stop(g_r[i], sig, 30);
}

/* Starts the three routers that are not running. */
static void need_routers(void)
{
    for (int i = 0; i < ROUTERS; i++)
        if (!g_r[i]->pid)
            router_start(i);
}

/* Appends to out what became of the routers of [0, n) that do not answer
 * GET /v1/rules: exited (with its status: a crash shows here) or running
 * but silent (a hang). Reaps the ones that exited. */
static void routers_silent(int n, char *out, size_t cap)
{
    size_t used = strlen(out);
    for (int i = 0; i < n && used < cap; i++) {
        int port = atomic_load(&g_port[i]);
        if (!port || it_status_of(port, "/v1/rules") == 200)
            continue;
        int st = 0;
        pid_t r = g_r[i]->pid ? waitpid(g_r[i]->pid, &st, WNOHANG) : -1;
        if (r == g_r[i]->pid) {
            g_r[i]->pid = 0;
            atomic_store(&g_port[i], 0);
            used += (size_t)snprintf(out + used, cap - used, "; router %d exited (%s %d)", i,
                                     WIFSIGNALED(st) ? "signal" : "status",
                                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        } else {
            used += (size_t)snprintf(out + used, cap - used,
                                     "; router %d runs but does not answer GET /v1/rules", i);
        }
    }
}

/* What GET /v1/rules of router i says of rule "deliver": the partitions it
 * owns as a bit mask and the group's members (-1 when not shown). Returns
 * -1 when the router did not answer with the rule. Never asserts. */
static int owned(int i, unsigned *mask, int *members)
{
    *mask = 0;
    *members = -1;
    int port = atomic_load(&g_port[i]);
    if (!port)
        return -1;
    it_resp r;
    it_http(NULL, port, &(it_call){.path = "/v1/rules", .timeout_ms = 5000}, &r);
    json_t *j = r.status == 200 ? json_loads(it_body(&r), 0, NULL) : NULL;
    it_resp_free(&r);
    json_t *rule = j ? it_rule_in(j, "deliver") : NULL;
    if (!rule) {
        json_decref(j);
        return -1;
    }
    json_t *m = json_object_get(rule, "members"), *ps = json_object_get(rule, "partitions"), *p;
    if (json_is_integer(m))
        *members = (int)json_integer_value(m);
    size_t k;
    json_array_foreach(ps, k, p)
    {
        json_t *n = json_is_object(p) ? json_object_get(p, "partition") : p;
        if (json_is_integer(n) && json_integer_value(n) >= 0 && json_integer_value(n) < PARTS)
            *mask |= 1u << json_integer_value(n);
    }
    json_decref(j);
    return 0;
}

/* The partitions of routers [0, n) that run, as text "r0:{0,1} r1:{...}"
 * in out; returns true when every partition is owned by exactly one of
 * them and each running router owns some (need_all) or at least the union
 * is whole. masks[i] gets router i's (0 when down). Never asserts. */
static bool ownership(int n, bool need_all, unsigned *masks, char *out, size_t cap)
{
    unsigned seen = 0;
    bool ok = true;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        int members;
        masks[i] = 0;
        if (!atomic_load(&g_port[i]))
            continue;
        if (owned(i, &masks[i], &members) < 0) {
            ok = false;
            continue;
        }
        if (masks[i] & seen)
            ok = false; /* a partition owned twice (a rebalance in progress) */
        seen |= masks[i];
        if (need_all && !masks[i])
            ok = false;
        used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "%sr%d:{", used ? " " : "",
                                 i);
        for (int p = 0; p < PARTS; p++)
            if (masks[i] & (1u << p))
                used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "%s%d",
                                         out[used - 1] == '{' ? "" : ",", p);
        if (members >= 0)
            used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "}(members %d)",
                                     members);
        else
            used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "}");
        if (used >= cap)
            used = cap - 1;
    }
    return ok && seen == ALL_PARTS;
}

/* Waits until ownership(n, need_all) holds twice in a row (200 ms apart);
 * fails the test with the last picture after secs. Returns the seconds it
 * took. Local mode: returns 0 at once. */
static double wait_owned(int n, bool need_all, unsigned *masks, double secs, const char *what)
{
    char pic[512];
    double t0 = it_mono(), end = t0 + OWN(secs);
    if (g_local)
        return 0;
    int good = 0;
    while (it_mono() < end) {
        if (ownership(n, need_all, masks, pic, sizeof pic)) {
            if (++good == 2)
                return it_mono() - t0;
        } else {
            good = 0;
        }
        it_sleep_ms(200);
    }
    routers_silent(n, pic, sizeof pic);
    fail_msg("%s: the group did not settle within %.0f s: %s", what, OWN(secs), pic);
    return -1;
}

/* ---- writers -------------------------------------------------------------------------------- */

/* One stream of events: WRITERS writers, per_writer events each, ids
 * "TAG W-SEQ" (e.g. "b1-1234"), keys "TAG W-kK" with K = SEQ % KEYS; the
 * writers own their keys and post batch after batch, so each key's events
 * are acknowledged in SEQ order. */
typedef struct phase {
    char tag;
    int per_writer;
    double span;   /* seconds the posts are spread over (the pace; late ones hurry) */
    double t0;     /* it_mono() at the start */
    int8_t *part;  /* [WRITERS * per_writer]: acknowledged at this partition, -1: not */
    uint8_t *taint; /* [WRITERS * KEYS]: entries of the key were re-posted after later ones */
    _Atomic long acked;
    _Atomic long posts, moved, reposted, given_up;
    char problem[256];
    /* the receiver's view, tallied incrementally (main thread) */
    size_t scan;      /* next request of the receiver to look at */
    uint16_t *got;    /* [WRITERS * per_writer]: 2xx deliveries */
    int *last;        /* [WRITERS * KEYS]: SEQ of the key's last first delivery, -1 */
    long distinct, dups, bad_order, foreign; /* foreign: ids never acknowledged */
    long dups_p[PARTS]; /* duplicates per partition */
    double first_after; /* first delivery after `after` from a partition in `after_mask` */
    double after;
    unsigned after_mask;
} phase;

typedef struct writer {
    pthread_t thread;
    phase *ph;
    int w;
    bool running;
} writer;

static writer g_w[WRITERS];
static atomic_bool g_stop;
static phase g_ph; /* the current test's stream; freed by the test's teardown */

static void phase_init(phase *ph, char tag, int per_writer, double span)
{
    memset(ph, 0, sizeof *ph);
    ph->tag = tag;
    ph->per_writer = per_writer;
    ph->span = span;
    size_t n = (size_t)WRITERS * (size_t)per_writer;
    ph->part = malloc(n);
    ph->got = calloc(n, sizeof *ph->got);
    ph->taint = calloc(WRITERS * KEYS, 1);
    ph->last = malloc(WRITERS * KEYS * sizeof *ph->last);
    assert_non_null(ph->part);
    assert_non_null(ph->got);
    assert_non_null(ph->taint);
    assert_non_null(ph->last);
    memset(ph->part, -1, n);
    for (int i = 0; i < WRITERS * KEYS; i++)
        ph->last[i] = -1;
    ph->scan = rx_count(g_rx); /* nothing of this phase before its start */
    ph->first_after = -1;
}

static void phase_free(phase *ph)
{
    free(ph->part);
    free(ph->got);
    free(ph->taint);
    free(ph->last);
    memset(ph, 0, sizeof *ph);
}

static void add_event(sl_buf *b, const phase *ph, int w, int seq)
{
    sl_buf_printf(b,
                  "{\"specversion\":\"1.0\",\"id\":\"%c%d-%d\",\"source\":\"/itest/scaleout\","
                  "\"type\":\"so.order\",\"partitionkey\":\"%c%d-k%d\","
                  "\"data\":{\"w\":%d,\"seq\":%d}}\n",
                  ph->tag, w, seq, ph->tag, w, seq % KEYS, w, seq);
}

/* Posts the events seqs[0..n) of writer w, to router k first, then to the
 * next one after each failure (as a load balancer would), until each is
 * acknowledged with an offset or 60 s passed. */
static void post_batch(CURL *c, phase *ph, int w, int *seqs, int n, int k)
{
    sl_buf b = SL_BUF_INIT;
    double end = it_mono() + OWN(60);
    bool first = true;
    while (n > 0 && it_mono() < end && !atomic_load(&g_stop)) {
        int port = atomic_load(&g_port[k % g_nrouters]);
        if (!port) {
            k++;
            atomic_fetch_add(&ph->moved, 1);
            it_sleep_ms(20);
            continue;
        }
        b.len = 0;
        for (int i = 0; i < n; i++)
            add_event(&b, ph, w, seqs[i]);
        if (!first)
            atomic_fetch_add(&ph->reposted, 1);
        first = false;
        atomic_fetch_add(&ph->posts, 1);
        it_resp r;
        it_http(c, port,
                &(it_call){.path = "/v1/sets/orders/events",
                           .ctype = IT_CT_NDJSON,
                           .body = b.data,
                           .len = b.len,
                           .timeout_ms = 45000},
                &r);
        json_t *j = r.status == 200 ? json_loads(it_body(&r), 0, NULL) : NULL;
        json_t *res = json_object_get(j, "results");
        it_resp_free(&r);
        if (!json_is_array(res)) {
            json_decref(j);
            k++; /* the next router */
            atomic_fetch_add(&ph->moved, 1);
            it_sleep_ms(100);
            continue;
        }
        int left = 0;
        bool later_ok = false; /* an entry after a failed one was stored */
        for (int i = n - 1; i >= 0; i--) {
            json_t *e = json_array_get(res, (size_t)i);
            json_t *off = json_object_get(e, "offset"), *p = json_object_get(e, "partition");
            size_t at = (size_t)w * (size_t)ph->per_writer + (size_t)seqs[i];
            if (json_is_integer(off) && json_is_integer(p)) {
                ph->part[at] = (int8_t)json_integer_value(p);
                atomic_fetch_add(&ph->acked, 1);
                later_ok = true;
            } else {
                /* posted again after entries of its key that were stored: its
                 * key leaves the order check (the writer itself reorders it) */
                if (later_ok)
                    ph->taint[w * KEYS + seqs[i] % KEYS] = 1;
                seqs[left++] = seqs[i];
            }
        }
        /* seqs[0..left) holds the failed ones backwards: put them in order */
        for (int i = 0; i < left / 2; i++) {
            int t = seqs[i];
            seqs[i] = seqs[left - 1 - i];
            seqs[left - 1 - i] = t;
        }
        n = left;
        json_decref(j);
        if (n) {
            k++;
            atomic_fetch_add(&ph->moved, 1);
            it_sleep_ms(100);
        }
    }
    if (n) {
        atomic_fetch_add(&ph->given_up, 1);
        for (int i = 0; i < n; i++)
            ph->taint[w * KEYS + seqs[i] % KEYS] = 1;
    }
    sl_buf_free(&b);
}

static void *writer_main(void *arg)
{
    writer *wr = arg;
    phase *ph = wr->ph;
    CURL *c = curl_easy_init();
    int seqs[BATCH];
    int batches = (ph->per_writer + BATCH - 1) / BATCH;
    for (int bi = 0; bi < batches && !atomic_load(&g_stop); bi++) {
        /* the pace: batch bi not before t0 + span * bi / batches */
        double due = ph->t0 + ph->span * bi / batches;
        while (it_mono() < due && !atomic_load(&g_stop))
            it_sleep_ms(5);
        int n = 0;
        for (int s = bi * BATCH; s < ph->per_writer && n < BATCH; s++)
            seqs[n++] = s;
        post_batch(c, ph, wr->w, seqs, n, wr->w + bi); /* spread over the routers */
    }
    curl_easy_cleanup(c);
    return NULL;
}

static void writers_start(phase *ph)
{
    atomic_store(&g_stop, false);
    ph->t0 = it_mono();
    for (int w = 0; w < WRITERS; w++) {
        g_w[w] = (writer){.ph = ph, .w = w};
        if (pthread_create(&g_w[w].thread, NULL, writer_main, &g_w[w]) == 0)
            g_w[w].running = true;
    }
}

/* Waits for the writers (at most secs; then tells them to stop). Returns
 * true when they finished on their own. Never asserts. */
static bool writers_join(double secs)
{
    double end = it_mono() + OWN(secs);
    bool done = false;
    while (!done && it_mono() < end) {
        done = true;
        for (int w = 0; w < WRITERS; w++)
            if (g_w[w].running && pthread_tryjoin_np(g_w[w].thread, NULL) == 0)
                g_w[w].running = false;
            else if (g_w[w].running)
                done = false;
        if (!done)
            it_sleep_ms(50);
    }
    atomic_store(&g_stop, true);
    for (int w = 0; w < WRITERS; w++)
        if (g_w[w].running) {
            pthread_join(g_w[w].thread, NULL);
            g_w[w].running = false;
        }
    return done;
}

/* Waits until at least frac of the phase's events are acknowledged (at most
 * secs). Never asserts. */
static void wait_acked(phase *ph, double frac, double secs)
{
    long want = (long)(frac * WRITERS * ph->per_writer);
    for (double end = it_mono() + OWN(secs); it_mono() < end; it_sleep_ms(20))
        if (atomic_load(&ph->acked) >= want)
            return;
}

/* ---- what the receiver got ----------------------------------------------------------------- */

/* Counts one delivered event (id) at time at. */
static void tally_id(phase *ph, const char *id, double at)
{
    char tag;
    int w, seq;
    if (sscanf(id, "%c%d-%d", &tag, &w, &seq) != 3 || tag != ph->tag || w < 0 || w >= WRITERS ||
        seq < 0 || seq >= ph->per_writer)
        return;
    size_t at_i = (size_t)w * (size_t)ph->per_writer + (size_t)seq;
    if (ph->part[at_i] < 0) {
        ph->foreign++; /* stored but never acknowledged (its POST failed): fine */
        return;
    }
    /* any delivery (a duplicate too) from the partitions of a killed
     * router shows that their new owner delivers */
    if (ph->after > 0 && at >= ph->after && ph->first_after < 0 &&
        (ph->after_mask & (1u << ph->part[at_i])))
        ph->first_after = at;
    if (ph->got[at_i]++ > 0) {
        ph->dups++;
        ph->dups_p[ph->part[at_i] % PARTS]++;
        return;
    }
    ph->distinct++;
    int key = w * KEYS + seq % KEYS;
    if (!ph->taint[key] && seq < ph->last[key])
        ph->bad_order++;
    if (seq > ph->last[key])
        ph->last[key] = seq;
}

/* Takes in the receiver's requests since the last call: every event of an
 * accepted (2xx) request, in arrival order. The body is one event or a JSON
 * array of them (target.http's batch). Never asserts. */
static void tally(phase *ph)
{
    for (const rx_req *q; (q = rx_req_at(g_rx, ph->scan)); ph->scan++) {
        if (q->status < 200 || q->status >= 300 || strcmp(q->path, "/hook") != 0)
            continue;
        json_t *j = json_loadb(q->body, q->body_len, 0, NULL), *e;
        if (json_is_object(j)) {
            const char *id = json_string_value(json_object_get(j, "id"));
            if (id)
                tally_id(ph, id, q->at);
        } else {
            size_t i;
            json_array_foreach(j, i, e)
            {
                const char *id = json_string_value(json_object_get(e, "id"));
                if (id)
                    tally_id(ph, id, q->at);
            }
        }
        json_decref(j);
    }
}

/* Waits until every acknowledged event of the phase has been delivered;
 * fails the test with an example of what is missing after secs. */
static void wait_delivered(phase *ph, double secs, const char *what)
{
    long acked = atomic_load(&ph->acked);
    double end = it_mono() + OWN(secs);
    for (;;) {
        tally(ph);
        if (ph->distinct >= acked)
            return;
        if (it_mono() > end)
            break;
        it_sleep_ms(250);
    }
    char ex[256] = "";
    size_t used = 0;
    int shown = 0;
    for (size_t i = 0; i < (size_t)WRITERS * (size_t)ph->per_writer && shown < 5; i++)
        if (ph->part[i] >= 0 && !ph->got[i]) {
            used += (size_t)snprintf(ex + used, sizeof ex - used, " %c%zu-%zu(p%d)", ph->tag,
                                     i / (size_t)ph->per_writer, i % (size_t)ph->per_writer,
                                     ph->part[i]);
            shown++;
            if (used >= sizeof ex)
                break;
        }
    char silent[512] = "";
    routers_silent(g_nrouters, silent, sizeof silent);
    fail_msg("%s: %ld of %ld acknowledged events never reached the receiver within %.0f s "
             "(e.g.%s)%s",
             what, acked - ph->distinct, acked, OWN(secs), ex, silent);
}

static long tainted(const phase *ph)
{
    long n = 0;
    for (int i = 0; i < WRITERS * KEYS; i++)
        n += ph->taint[i];
    return n;
}

/* Prints the phase's figures and checks the common outcome: something was
 * acknowledged, every acknowledged event delivered (wait_delivered() before),
 * order per key among first deliveries, duplicates at most max_dup_frac of
 * the acknowledged. */
static void phase_check(phase *ph, const char *what, double max_dup_frac)
{
    long acked = atomic_load(&ph->acked), total = (long)WRITERS * ph->per_writer;
    printf("# %s: %ld of %ld events acknowledged (%ld POSTs, %ld re-posted, %ld moves to another "
           "router, %ld batches given up), %ld delivered, %ld duplicates, %ld stored without an "
           "acknowledgement, %ld first deliveries out of order (%ld of %d keys re-posted out of "
           "order, not checked)\n",
           what, acked, total, atomic_load(&ph->posts), atomic_load(&ph->reposted),
           atomic_load(&ph->moved), atomic_load(&ph->given_up), ph->distinct, ph->dups, ph->foreign,
           ph->bad_order, tainted(ph), WRITERS * KEYS);
    if (ph->dups) {
        printf("# %s: duplicates per partition:", what);
        for (int p = 0; p < PARTS; p++)
            printf(" p%d %ld", p, ph->dups_p[p]);
        printf("\n");
    }
    fflush(stdout);
    if (acked < total / 2)
        fail_msg("%s: only %ld of %ld events were acknowledged", what, acked, total);
    if (!g_local && ph->bad_order)
        fail_msg("%s: %ld first deliveries came out of order within their key", what,
                 ph->bad_order);
    if ((double)ph->dups > max_dup_frac * (double)acked)
        fail_msg("%s: %ld duplicate deliveries for %ld acknowledged events (more than %.0f%%: "
                 "duplicates must stay bounded by what was in flight)",
                 what, ph->dups, acked, 100 * max_dup_frac);
}

/* ---- setup ---------------------------------------------------------------------------------- */

#define RULE_DELIVER                                                                                \
    "rule \"deliver\" {\n"                                                                         \
    "  set = \"orders\",\n"                                                                        \
    "  start = \"beginning\",\n"                                                                   \
    "  target = target.http { url = \"http://127.0.0.1:%d/hook\", batch = 20, timeout = \"5s\" },\n" \
    "  retry = { attempts = 1000000, max_age = \"24h\", backoff = \"exponential\",\n"            \
    "            initial = \"50ms\", max = \"1s\" },\n"                                           \
    "}\n"

#define KAFKA_SET                                                                                  \
    "set \"orders\" { backend = \"kafka\", partitions = 6, replication = 3, ack = \"durable\" }\n"

static int group_setup(void **state)
{
    (void)state;
    g_local = getenv("SCALEOUT_LOCAL") && *getenv("SCALEOUT_LOCAL") &&
              strcmp(getenv("SCALEOUT_LOCAL"), "0") != 0;
    g_rx = rx_new();
    if (!g_rx || rx_start(g_rx, 0)) {
        fprintf(stderr, "test_scaleout: cannot start the HTTP receiver\n");
        return -1;
    }
    it_kmock_start(&g_mk, (const char *const[]){"--brokers", "3", NULL});
    for (int i = 0; i < MAX_R; i++)
        it_setup((void **)&g_r[i]);
    /* the topic the set uses (topic_prefix .. name), made beforehand: the
     * mock cannot create topics when asked */
    it_kmock_cmd(&g_mk, "topic " TOPIC " %d 3", PARTS);
    if (g_local)
        it_write_config(g_r[0], g_cfg,
                        "-- scale-out selftest: local sets, each router its own\n"
                        "set \"orders\" { partitions = 6, ack = \"durable\" }\n" RULE_DELIVER,
                        rx_port(g_rx));
    else
        it_write_config(g_r[0], g_cfg,
                        "-- scale-out: the routers share this config\n"
                        "server { kafka = { brokers = \"%s\", topic_prefix = \"acc.\",\n"
                        "                   client_id = \"itest-scaleout\", session_timeout = "
                        "\"%ds\",\n"
                        "                   delivery_timeout = \"%ds\" } }\n" KAFKA_SET RULE_DELIVER,
                        g_mk.boot, SESSION_S, DELIVERY_S, rx_port(g_rx));
    printf("# test_scaleout: %s; mock cluster %s; receiver on port %d\n",
           g_local ? "SCALEOUT_LOCAL: local sets (the harness's selftest)" : "Kafka-backed set",
           g_mk.boot, rx_port(g_rx));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    writers_join(0);
    for (int i = 0; i < MAX_R; i++)
        if (g_r[i]) {
            atomic_store(&g_port[i], 0);
            g_r[i]->passed = !g_any_failed;
            it_teardown((void **)&g_r[i]); /* kills it if it still runs */
        }
    it_kmock_stop(&g_mk);
    rx_free(g_rx);
    g_rx = NULL;
    return 0;
}

/* Each test: marks itself failed until it reaches its end (then the group
 * teardown shows the logs); the teardown stops writers a failure left. */
static int test_setup(void **state)
{
    (void)state;
    g_failed = true;
    return 0;
}

static int test_teardown(void **state)
{
    (void)state;
    writers_join(0);
    phase_free(&g_ph);
    rx_unscript(g_rx);
    g_nrouters = ROUTERS;
    g_any_failed |= g_failed;
    return 0;
}

static void passed(void)
{
    g_failed = false;
}

/* ---- (a) the set, the config check, the group ---------------------------------------------- */

static void test_sets(void **state)
{
    (void)state;
    char *out = NULL;
    int rc = it_run(g_r[0], NULL, &out, NULL, (const char *const[]){"check", g_cfg, NULL}, 30);
    if (rc != 0)
        fail_msg("sluice check refuses the scale-out config (exit %d):\n%s", rc, out);
    free(out);
    if (!g_local) {
        char bad[PATH_MAX];
        it_path(bad, g_r[0], "bad.lua");
        it_write_file(bad, "-- a kafka-backed set without server.kafka\n\n" KAFKA_SET);
        rc = it_run(g_r[0], NULL, &out, NULL, (const char *const[]){"check", bad, NULL}, 30);
        char want[PATH_MAX + 8];
        snprintf(want, sizeof want, "%s:3:", bad);
        const char *at = strstr(out, want);
        const char *eol = at ? strchr(at, '\n') : NULL;
        const char *k = at ? strstr(at, "kafka") : NULL;
        if (rc == 0 || !at || !k || (eol && k > eol))
            fail_msg("sluice check of a kafka set without server.kafka: exit %d, want exit 1 and "
                     "\"%s ... kafka ...\"; said:\n%s",
                     rc, want, out);
        free(out);
    }
    double t0 = it_mono();
    need_routers();
    for (int i = 0; i < ROUTERS; i++) {
        it_resp r = it_get(g_r[i], "/v1/sets");
        if (r.status != 200)
            fail_msg("router %d: GET /v1/sets answered %ld: %s", i, r.status, it_body(&r));
        json_t *j = it_parse_json(&r), *e, *ent = NULL;
        it_resp_free(&r);
        size_t k;
        json_array_foreach(json_object_get(j, "sets"), k, e)
        {
            const char *n = json_string_value(json_object_get(e, "name"));
            if (n && strcmp(n, "orders") == 0)
                ent = e;
        }
        char *flat = ent ? json_dumps(ent, JSON_COMPACT) : NULL;
        if (!ent)
            fail_msg("router %d: GET /v1/sets does not list the set orders", i);
        const char *backend = json_string_value(json_object_get(ent, "backend"));
        const char *topic = json_string_value(json_object_get(ent, "topic"));
        json_t *parts = json_object_get(ent, "partitions");
        if (!g_local && (!backend || strcmp(backend, "kafka") != 0 || !topic ||
                         strcmp(topic, TOPIC) != 0 || json_integer_value(parts) != PARTS))
            fail_msg("router %d: GET /v1/sets should show backend \"kafka\", topic \"" TOPIC
                     "\" and %d partitions: %s",
                     i, PARTS, flat);
        if (i == 0)
            printf("# sets: GET /v1/sets shows %s\n", flat);
        free(flat);
        json_decref(j);
    }
    unsigned masks[MAX_R];
    double settled = wait_owned(ROUTERS, true, masks, 40, "3 routers");
    if (!g_local) {
        char pic[512];
        ownership(ROUTERS, true, masks, pic, sizeof pic);
        printf("# sets: 3 routers up and the group settled %.1f s after the first start (%.1f s "
               "after the last): %s\n",
               it_mono() - t0, settled, pic);
        for (int i = 0; i < ROUTERS; i++) {
            json_t *rule = it_rule(g_r[i], "deliver");
            const char *group = json_string_value(json_object_get(rule, "group"));
            json_t *members = json_object_get(rule, "members");
            /* members: null when the cluster cannot describe groups (the
             * 2.0.2 mock has no DescribeGroups), else all three */
            bool good = group && strcmp(group, GROUP) == 0 &&
                        (json_is_null(members) ||
                         (json_is_integer(members) && json_integer_value(members) == ROUTERS));
            if (good && i == 0)
                printf("# sets: GET /v1/rules: group %s, members %s\n", group,
                       json_is_null(members) ? "null (not known: the cluster cannot describe "
                                               "groups)"
                                             : "3");
            char *flat = good ? NULL : json_dumps(rule, JSON_COMPACT);
            json_decref(rule);
            if (!good) {
                char msg[2048];
                snprintf(msg, sizeof msg, "%s", flat ? flat : "?");
                free(flat);
                fail_msg("router %d: GET /v1/rules should name the group " GROUP
                         " and its %d members (or null): %s",
                         i, ROUTERS, msg);
            }
        }
    }
    passed();
}

/* ---- (b) SIGKILL and SIGTERM under a stream ------------------------------------------------- */

static void test_crash(void **state)
{
    (void)state;
    need_routers();
    unsigned masks[MAX_R];
    wait_owned(ROUTERS, true, masks, 40, "before the stream");
    /* 20,000 events over 28 s (100,000 over 60 s with SLUICE_SOAK=1): long
     * enough that the takeover (about 10-20 s on the mock) ends before the
     * stream does, so that the SIGTERM below comes in the middle of it too */
    int total = it_soak() ? 100000 : 20000;
    phase_init(&g_ph, 'b', (total + WRITERS - 1) / WRITERS, it_soak() ? 60 : 28);
    writers_start(&g_ph);

    /* one router SIGKILLed a fifth of the way in: what it owned must be
     * taken over by the others within about the session timeout */
    wait_acked(&g_ph, 0.2, 40);
    unsigned killed = 0;
    int members;
    if (owned(0, &killed, &members) < 0)
        killed = 0;
    long acked_at_kill = atomic_load(&g_ph.acked);
    router_stop(0, SIGKILL);
    double t_kill = it_mono();
    g_ph.after = t_kill;
    g_ph.after_mask = killed;
    double reassigned = -1;
    char pic[512] = "";
    if (!g_local) {
        /* the others cover every partition again (nothing asserts until the
         * writers are done: they run on) */
        for (double end = t_kill + OWN(SESSION_S * 4 + 20); it_mono() < end; it_sleep_ms(100))
            if (ownership(ROUTERS, true, masks, pic, sizeof pic)) {
                reassigned = it_mono() - t_kill;
                break;
            }
    } else {
        it_sleep_ms(1000); /* the writers meet it down and move on */
        router_restart(0); /* local sets: its events wait in its own data dir */
    }

    /* another router stopped cleanly and started again, later in the stream */
    wait_acked(&g_ph, 0.7, 40);
    long acked_at_term = atomic_load(&g_ph.acked);
    double t_term = it_mono();
    int st = router_stop(1, SIGTERM);
    it_sleep_ms(1000); /* the group rebalances without it, then with it again */
    router_restart(1);
    double t_back = it_mono();
    bool finished = writers_join(120);
    if (!finished)
        fail_msg("crash: the writers did not finish within 120 s (%ld acknowledged so far)",
                 atomic_load(&g_ph.acked));
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("crash: router 1 did not stop cleanly on SIGTERM (status %d)", st);
    double t_posted = it_mono();
    wait_delivered(&g_ph, WAIT_S, "crash");
    double drained = it_mono() - t_posted;
    if (!g_local && reassigned < 0)
        fail_msg("crash: the partitions of the SIGKILLed router (mask 0x%x) were not taken over "
                 "within %d s: %s",
                 killed, SESSION_S * 4 + 20, pic);
    printf("# crash: router 0 SIGKILLed %.1f s into the stream (%ld acknowledged), router 1 "
           "SIGTERMed at %.1f s (%ld acknowledged) and back at %.1f s\n",
           t_kill - g_ph.t0, acked_at_kill, t_term - g_ph.t0, acked_at_term, t_back - g_ph.t0);
    if (!g_local)
        printf("# crash: takeover after the SIGKILL of router 0 (partitions mask 0x%x, session "
               "timeout %d s): reassigned after %.0f ms, first delivery from them after %.0f ms; "
               "drained %.1f s after the last post\n",
               killed, SESSION_S, reassigned * 1000,
               g_ph.first_after > 0 ? (g_ph.first_after - t_kill) * 1000 : -1.0, drained);
    phase_check(&g_ph, "crash", 0.10);
    /* router 0 back for what follows */
    if (!g_r[0]->pid)
        router_restart(0);
    wait_owned(ROUTERS, true, masks, 40, "after the crash test");
    passed();
}

/* ---- (c) faults of the cluster --------------------------------------------------------------- */

/* Sleeps until `at` seconds after t0 (or returns at once when later). */
static void at_time(double t0, double at)
{
    while (it_mono() < t0 + at)
        it_sleep_ms(10);
}

static void test_cluster(void **state)
{
    (void)state;
    need_routers();
    unsigned masks[MAX_R];
    wait_owned(ROUTERS, true, masks, 40, "before the cluster faults");
    phase_init(&g_ph, 'c', 2000, 22);
    writers_start(&g_ph);
    double t0 = g_ph.t0;
    /* broker 2 down for 10 s: leaders stay on it (the mock does not move
     * them), so its partitions (and maybe the group's coordinator) wait */
    at_time(t0, 2);
    it_kmock_cmd(&g_mk, "down 2");
    at_time(t0, 12);
    it_kmock_cmd(&g_mk, "up 2");
    /* leaders moved, the coordinator moved (one of the two moves is real,
     * whichever broker the mock's hash chose) */
    at_time(t0, 13);
    it_kmock_cmd(&g_mk, "leader " TOPIC " 0 3");
    it_kmock_cmd(&g_mk, "leader " TOPIC " 1 1");
    it_kmock_cmd(&g_mk, "leader " TOPIC " 4 2");
    it_kmock_cmd(&g_mk, "coordinator group " GROUP " 1");
    /* request errors, each retryable, on the write, read and commit paths */
    at_time(t0, 15);
    it_kmock_cmd(&g_mk, "error produce NOT_LEADER_FOR_PARTITION 5");
    it_kmock_cmd(&g_mk, "error fetch NOT_LEADER_FOR_PARTITION 5");
    it_kmock_cmd(&g_mk, "errors offsetcommit NOT_COORDINATOR COORDINATOR_NOT_AVAILABLE "
                        "REQUEST_TIMED_OUT");
    at_time(t0, 17);
    it_kmock_cmd(&g_mk, "coordinator group " GROUP " 3");
    it_kmock_cmd(&g_mk, "error produce _TRANSPORT 2");
    it_kmock_cmd(&g_mk, "error fetch _TRANSPORT 2");
    it_kmock_cmd(&g_mk, "errors offsetcommit REBALANCE_IN_PROGRESS NOT_COORDINATOR");
    bool finished = writers_join(120);
    it_kmock_cmd(&g_mk, "clear produce");
    it_kmock_cmd(&g_mk, "clear fetch");
    it_kmock_cmd(&g_mk, "clear offsetcommit");
    if (!finished)
        fail_msg("cluster: the writers did not finish within 120 s (%ld acknowledged so far)",
                 atomic_load(&g_ph.acked));
    double t_posted = it_mono();
    wait_delivered(&g_ph, WAIT_S, "cluster");
    double drained = it_mono() - t_posted;
    /* looser than a crash: while the coordinator's broker is down the
     * sessions time out (assignments lost: nothing committed), and the
     * cursor topic's partitions on that broker take no writes for 10 s, so
     * what was delivered meanwhile may come again; the point here is that
     * nothing is lost */
    phase_check(&g_ph, "cluster", 0.5);
    double settled = wait_owned(ROUTERS, true, masks, 40, "after the cluster faults");
    printf("# cluster: broker 2 down 10 s, 3 leaders and the coordinator moved, errors on "
           "Produce/Fetch/OffsetCommit: drained %.1f s after the last post, group whole %.1f s "
           "later\n",
           drained, settled);
    passed();
}

/* Waits until every running router of [0, n) shows, for each partition it
 * owns, lag 0 and a committed offset that reached the end (the group's
 * commits follow delivery); fails the test with the last answer after
 * secs. Local mode: lag 0 only. */
static void wait_committed(int n, double secs, const char *what)
{
    char last[1024] = "";
    for (double end = it_mono() + OWN(secs); it_mono() < end; it_sleep_ms(250)) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++) {
            int port = atomic_load(&g_port[i]);
            if (!port)
                continue;
            it_resp r;
            it_http(NULL, port, &(it_call){.path = "/v1/rules", .timeout_ms = 5000}, &r);
            json_t *j = r.status == 200 ? json_loads(it_body(&r), 0, NULL) : NULL;
            it_resp_free(&r);
            json_t *rule = j ? it_rule_in(j, "deliver") : NULL, *p;
            ok = rule != NULL;
            size_t k;
            json_array_foreach(json_object_get(rule, "partitions"), k, p)
            {
                json_t *lag = json_object_get(p, "lag"), *com = json_object_get(p, "committed"),
                       *e = json_object_get(p, "end");
                if (!json_is_integer(lag) || json_integer_value(lag) != 0 ||
                    (!g_local && (!json_is_integer(com) || !json_is_integer(e) ||
                                  json_integer_value(com) != json_integer_value(e))))
                    ok = false;
            }
            if (!ok) {
                char *flat = rule ? json_dumps(json_object_get(rule, "partitions"), JSON_COMPACT)
                                  : NULL;
                snprintf(last, sizeof last, "router %d: %s", i, flat ? flat : "no rule deliver");
                free(flat);
            }
            json_decref(j);
        }
        if (ok)
            return;
    }
    fail_msg("%s: the routers did not show lag 0 with committed = end for their partitions within "
             "%.0f s; %s",
             what, OWN(secs), last);
}

/* ---- (d) the target down 30 s ----------------------------------------------------------------- */

static void test_target(void **state)
{
    (void)state;
    need_routers();
    unsigned masks[MAX_R];
    wait_owned(ROUTERS, true, masks, 40, "before the target outage");
    phase_init(&g_ph, 'd', 1000, 10);
    writers_start(&g_ph);
    double t0 = g_ph.t0;
    at_time(t0, 2);
    rx_fail(g_rx, -1, 503, "down for maintenance", "1");
    double t_down = it_mono();
    /* while it is down, every router keeps its partitions: look every 2 s */
    int looks = 0, whole = 0;
    char pic[512] = "", bad[512] = "";
    while (it_mono() < t_down + OWN(30)) {
        it_sleep_ms(2000);
        looks++;
        if (g_local || ownership(ROUTERS, true, masks, pic, sizeof pic))
            whole++;
        else if (!bad[0])
            snprintf(bad, sizeof bad, "%.0f s into the outage: %s", it_mono() - t_down, pic);
    }
    size_t refused = rx_count_matching(g_rx, NULL, false) - rx_count_matching(g_rx, NULL, true);
    rx_unscript(g_rx);
    double t_up = it_mono();
    bool finished = writers_join(60);
    if (!finished)
        fail_msg("target: the writers did not finish within 60 s (%ld acknowledged so far)",
                 atomic_load(&g_ph.acked));
    wait_delivered(&g_ph, WAIT_S, "target");
    double caught_up = it_mono() - t_up;
    /* a request the outage refused is retried, not counted twice */
    phase_check(&g_ph, "target", 0.10);
    printf("# target: 503 for 30 s (%zu requests refused in all so far): the group whole at %d "
           "of %d looks, caught up %.1f s after the target came back\n",
           refused, whole, looks, caught_up);
    if (whole < looks)
        fail_msg("target: a router left the group or lost its partitions during the outage (%d "
                 "of %d looks whole; first: %s)",
                 whole, looks, bad);
    /* and the group's offsets followed: what a next owner would start from */
    wait_committed(ROUTERS, 30, "target");
    passed();
}

/* ---- (e) a fourth router joins, then leaves ------------------------------------------------- */

static void test_join(void **state)
{
    (void)state;
    need_routers();
    unsigned masks[MAX_R];
    char pic[512];
    wait_owned(ROUTERS, true, masks, 40, "before the fourth router");
    phase_init(&g_ph, 'e', 1000, 14);
    g_nrouters = ROUTERS + 1; /* the writers use the fourth one too */
    router_start(3);
    writers_start(&g_ph);
    /* 6 partitions among 4 routers: each gets one at least */
    double joined = wait_owned(ROUTERS + 1, true, masks, 40, "4 routers");
    if (!g_local && !masks[3]) {
        ownership(ROUTERS + 1, true, masks, pic, sizeof pic);
        fail_msg("join: the fourth router owns no partition once the group settled: %s", pic);
    }
    if (!g_local) {
        ownership(ROUTERS + 1, true, masks, pic, sizeof pic);
        printf("# join: with 4 routers after %.1f s: %s\n", joined, pic);
    }
    at_time(g_ph.t0, 7);
    int st = router_stop(3, SIGTERM);
    g_nrouters = ROUTERS;
    double left = wait_owned(ROUTERS, true, masks, 40, "after the fourth router left");
    if (!g_local) {
        ownership(ROUTERS, true, masks, pic, sizeof pic);
        printf("# join: the fourth router left (SIGTERM); back to 3 after %.1f s: %s\n", left, pic);
    }
    bool finished = writers_join(60);
    if (!finished)
        fail_msg("join: the writers did not finish within 60 s (%ld acknowledged so far)",
                 atomic_load(&g_ph.acked));
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("join: the fourth router did not stop cleanly on SIGTERM (status %d)", st);
    if (g_local)
        router_restart(3); /* its own events wait in its own data dir */
    wait_delivered(&g_ph, WAIT_S, "join");
    phase_check(&g_ph, "join", 0.10);
    if (g_local)
        router_stop(3, SIGTERM);
    passed();
}

/* ---- (f) a local set and a Kafka-backed set in one config ---------------------------------- */

/* How many distinct ids "PREFIX<i>" (i < n) the receiver accepted at path. */
static int mixed_count(const char *path, const char *prefix, int n, uint8_t *seen)
{
    memset(seen, 0, (size_t)n);
    int got = 0;
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < rx_count(g_rx); i++) {
        const rx_req *q = rx_req_at(g_rx, i);
        if (!q || q->status < 200 || q->status >= 300 || strcmp(q->path, path) != 0)
            continue;
        json_t *j = json_loadb(q->body, q->body_len, 0, NULL), *e;
        json_t *one = json_is_object(j) ? json_pack("[O]", j) : json_incref(j);
        size_t k;
        json_array_foreach(one, k, e)
        {
            const char *id = json_string_value(json_object_get(e, "id"));
            char *end;
            if (!id || strncmp(id, prefix, plen) != 0)
                continue;
            long v = strtol(id + plen, &end, 10);
            if (*end || v < 0 || v >= n || seen[v])
                continue;
            seen[v] = 1;
            got++;
        }
        json_decref(one);
        json_decref(j);
    }
    return got;
}

static void mixed_reads(it_server *s);

static void test_mixed(void **state)
{
    (void)state;
    enum { N = 300 };
    it_server *s = g_r[4];
    char cfg[PATH_MAX];
    int port = rx_port(g_rx);
    if (!g_local) {
        it_kmock_cmd(&g_mk, "topic mix.kaf 3 3");
        it_kmock_cmd(&g_mk, "topic mix.kbuf 2 3");
    }
    const char *kaf = g_local ? "set \"kaf\" { partitions = 3, ack = \"durable\" }\n"
                              : "set \"kaf\" { backend = \"kafka\", partitions = 3, replication = 3, "
                                "ack = \"durable\" }\n";
    char server[1024] = "";
    if (!g_local)
        snprintf(server, sizeof server,
                 "server { kafka = { brokers = \"%s\", topic_prefix = \"mix.\", client_id = "
                 "\"itest-mixed\", session_timeout = \"%ds\" } }\n",
                 g_mk.boot, SESSION_S);
    it_write_config(s, cfg,
                    "-- a local set and a Kafka-backed set, each feeding the other\n"
                    "%s%s"
                    "set \"loc\" { partitions = 2, ack = \"durable\" }\n"
                    "%s"
                    "rule \"loc-to-kaf\" { set = \"loc\", start = \"beginning\",\n"
                    "  match = { type = { \"to.kafka\" } }, target = target.set { set = \"kaf\" } }\n"
                    "rule \"kaf-to-loc\" { set = \"kaf\", start = \"beginning\",\n"
                    "  match = { type = { \"to.local\" } }, target = target.set { set = \"loc\" } }\n"
                    "rule \"kaf-out\" { set = \"kaf\", start = \"beginning\",\n"
                    "  target = target.http { url = \"http://127.0.0.1:%d/kaf\", batch = 20 } }\n"
                    "rule \"loc-out\" { set = \"loc\", start = \"beginning\",\n"
                    "  target = target.http { url = \"http://127.0.0.1:%d/loc\", batch = 20 } }\n",
                    server, kaf,
                    g_local ? "set \"kbuf\" { partitions = 2, ack = \"buffer\" }\n"
                            : "set \"kbuf\" { backend = \"kafka\", partitions = 2, ack = \"buffer\" }\n",
                    port, port);
    char *out = NULL;
    int rc = it_run(s, NULL, &out, NULL, (const char *const[]){"check", cfg, NULL}, 30);
    if (rc != 0)
        fail_msg("sluice check refuses the mixed config (exit %d):\n%s", rc, out);
    free(out);
    it_start_config(s, cfg, 40);
    atomic_store(&g_port[4], s->port);
    it_resp r = it_get(s, "/v1/sets");
    json_t *j = it_parse_json(&r), *e;
    it_resp_free(&r);
    size_t k;
    int checked = 0;
    json_array_foreach(json_object_get(j, "sets"), k, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *b = json_string_value(json_object_get(e, "backend"));
        if (!n || (strcmp(n, "kaf") && strcmp(n, "loc")))
            continue;
        checked++;
        const char *want = strcmp(n, "loc") == 0 || g_local ? "log" : "kafka";
        if (!g_local && (!b || strcmp(b, want) != 0)) {
            char *flat = json_dumps(e, JSON_COMPACT);
            fail_msg("mixed: GET /v1/sets shows set %s without backend \"%s\": %s", n, want, flat);
        }
    }
    json_decref(j);
    if (checked != 2)
        fail_msg("mixed: GET /v1/sets does not list both kaf and loc");
    /* N events of type to.kafka into the local set, N of type to.local into
     * the Kafka-backed one */
    for (int part = 0; part < 2; part++) {
        const char *set = part ? "kaf" : "loc";
        for (int b0 = 0; b0 < N; b0 += BATCH) {
            sl_buf b = SL_BUF_INIT;
            for (int i = b0; i < b0 + BATCH && i < N; i++)
                sl_buf_printf(&b,
                              "{\"specversion\":\"1.0\",\"id\":\"%s%d\",\"source\":\"/itest/mixed\","
                              "\"type\":\"%s\",\"partitionkey\":\"k%d\",\"data\":{\"i\":%d}}\n",
                              part ? "tolocal-" : "tokafka-", i, part ? "to.local" : "to.kafka",
                              i % 7, i);
            json_decref(it_post_all(s, set, NULL, &b, (size_t)(b0 + BATCH <= N ? BATCH : N - b0)));
            sl_buf_free(&b);
        }
    }
    /* each event reaches the receiver through both sets: its own and, by
     * target.set, the other one */
    static uint8_t seen[N];
    const struct {
        const char *path, *prefix, *how;
    } want[] = {
        {"/kaf", "tokafka-", "local set -> target.set -> Kafka-backed set -> target.http"},
        {"/loc", "tolocal-", "Kafka-backed set -> target.set -> local set -> target.http"},
        {"/kaf", "tolocal-", "posted to the Kafka-backed set"},
        {"/loc", "tokafka-", "posted to the local set"},
    };
    double t0 = it_mono();
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        int got = 0;
        for (double end = t0 + OWN(WAIT_S); it_mono() < end; it_sleep_ms(200))
            if ((got = mixed_count(want[w].path, want[w].prefix, N, seen)) == N)
                break;
        if (got != N)
            fail_msg("mixed: %s: %d of %d events reached %s", want[w].how, got, N, want[w].path);
        printf("# mixed: %s: all %d delivered\n", want[w].how, N);
    }
    if (!g_local)
        mixed_reads(s);
    router_stop(4, SIGTERM);
    passed();
}

/* A long-poll's event, posted by another thread a moment after the read
 * began. */
typedef struct late_post {
    it_server *s;
    const char *set, *body;
} late_post;

static void *post_late(void *arg)
{
    late_post *lp = arg;
    it_sleep_ms(700);
    it_resp r = it_post(lp->s, lp->set, IT_CT_NDJSON, NULL, lp->body, SIZE_MAX);
    it_resp_free(&r);
    return NULL;
}

/* Reads of Kafka-backed sets (issue 19 §3) and the answers' shapes (§2):
 * a durable answer's offsets are where GET finds the events; a buffer set's
 * answer has partitions and no offset; a long-poll is answered by an event
 * that arrives while it waits. */
static void mixed_reads(it_server *s)
{
    const char *five = "{\"specversion\":\"1.0\",\"id\":\"rd-0\",\"source\":\"/r\",\"type\":\"rd\",\"partitionkey\":\"same\"}\n"
                       "{\"specversion\":\"1.0\",\"id\":\"rd-1\",\"source\":\"/r\",\"type\":\"rd\",\"partitionkey\":\"same\"}\n"
                       "{\"specversion\":\"1.0\",\"id\":\"rd-2\",\"source\":\"/r\",\"type\":\"rd\",\"partitionkey\":\"same\"}\n";
    it_resp r = it_post(s, "kaf", IT_CT_NDJSON, NULL, five, SIZE_MAX);
    json_t *j = r.status == 200 ? it_parse_json(&r) : NULL;
    json_t *res = json_object_get(j, "results");
    if (json_array_size(res) != 3)
        fail_msg("reads: POST to the Kafka-backed set answered %ld: %s", r.status, it_body(&r));
    it_resp_free(&r);
    json_int_t part = json_integer_value(json_object_get(json_array_get(res, 0), "partition"));
    json_int_t off[3];
    for (size_t i = 0; i < 3; i++) {
        json_t *o = json_object_get(json_array_get(res, i), "offset");
        if (!json_is_integer(o))
            fail_msg("reads: a durable answer without offset: %s",
                     json_dumps(json_array_get(res, i), JSON_COMPACT));
        off[i] = json_integer_value(o);
    }
    json_decref(j);
    if (off[1] != off[0] + 1 || off[2] != off[1] + 1)
        fail_msg("reads: offsets %lld %lld %lld of one key are not consecutive", (long long)off[0],
                 (long long)off[1], (long long)off[2]);
    r = it_get(s, "/v1/sets/kaf/events?partition=%lld&offset=%lld&max=3", (long long)part,
               (long long)off[0]);
    j = r.status == 200 ? it_parse_json(&r) : NULL;
    json_t *evs = json_object_get(j, "events");
    if (json_array_size(evs) != 3)
        fail_msg("reads: GET of the Kafka-backed set at the answer's offset gave %ld: %s", r.status,
                 it_body(&r));
    it_resp_free(&r);
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(evs, i);
        char id[16];
        snprintf(id, sizeof id, "rd-%zu", i);
        const char *got = json_string_value(json_object_get(e, "id"));
        if (!got || strcmp(got, id) || json_integer_value(json_object_get(e, "sluiceoffset")) != off[i])
            fail_msg("reads: event %zu read back as %s", i, json_dumps(e, JSON_COMPACT));
    }
    json_int_t next = json_integer_value(json_object_get(j, "next_offset"));
    json_decref(j);
    printf("# reads: 3 events posted with Kafka offsets %lld-%lld of partition %lld, read back there\n",
           (long long)off[0], (long long)off[2], (long long)part);
    /* a long-poll at the end gets the event posted while it waits */
    late_post lp = {s, "kaf",
                    "{\"specversion\":\"1.0\",\"id\":\"rd-late\",\"source\":\"/r\",\"type\":\"rd\",\"partitionkey\":\"same\"}\n"};
    pthread_t th;
    pthread_create(&th, NULL, post_late, &lp);
    r = it_get(s, "/v1/sets/kaf/events?partition=%lld&offset=%lld&wait_ms=15000", (long long)part,
               (long long)next);
    pthread_join(th, NULL);
    if (r.status != 200 || !strstr(it_body(&r), "rd-late"))
        fail_msg("reads: a long-poll at the end did not get the event posted meanwhile: %ld %s",
                 r.status, it_body(&r));
    it_resp_free(&r);
    /* a buffer set answers before Kafka assigned offsets */
    r = it_post(s, "kbuf", IT_CT_NDJSON, NULL, five, SIZE_MAX);
    j = r.status == 200 ? it_parse_json(&r) : NULL;
    res = json_object_get(j, "results");
    if (json_array_size(res) != 3)
        fail_msg("reads: POST to the buffer Kafka-backed set answered %ld: %s", r.status, it_body(&r));
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(res, i);
        if (!json_is_integer(json_object_get(e, "partition")) || json_object_get(e, "offset"))
            fail_msg("reads: a buffer set's result should have a partition and no offset: %s",
                     it_body(&r));
    }
    it_resp_free(&r);
    json_decref(j);
    /* and its events are stored all the same */
    int got = 0;
    for (double end = it_mono() + OWN(20); it_mono() < end && got < 3; it_sleep_ms(200)) {
        got = 0;
        for (int p = 0; p < 2; p++) {
            r = it_get(s, "/v1/sets/kbuf/events?partition=%d&offset=0", p);
            for (const char *q = it_body(&r); (q = strstr(q, "\"rd-")); q++)
                got++;
            it_resp_free(&r);
        }
    }
    if (got < 3)
        fail_msg("reads: %d of 3 events of the buffer set could be read back", got);
    printf("# reads: a long-poll woken by a post; a buffer set answers without offsets and "
           "stores the events\n");
}

#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, test_teardown)

int main(void)
{
    if (it_init("test_scaleout"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_sets), T(test_crash), T(test_cluster), T(test_target), T(test_join), T(test_mixed),
    };
    /* ITEST_ONLY=NAME runs that test alone (the routers start in it). */
    const char *only = getenv("ITEST_ONLY");
    struct CMUnitTest one[1];
    size_t n_one = 0;
    for (size_t i = 0; only && i < sizeof tests / sizeof *tests; i++)
        if (strcmp(tests[i].name, only) == 0)
            one[n_one++] = tests[i];
    int rc = only ? _cmocka_run_group_tests("test_scaleout", one, n_one, group_setup,
                                            group_teardown)
                  : cmocka_run_group_tests(tests, group_setup, group_teardown);
    it_cleanup();
    return rc;
}
