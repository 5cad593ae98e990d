/*
 * tests/integration/test_faults.c — the fault tests of issue 8 §1: the real
 * `bin/sluice serve -c FILE.lua` under sustained mixed load while faults are
 * played against it: SIGKILL again and again (ingest with ack=durable, rules
 * delivering to an HTTP receiver and to a Kafka mock cluster), a full disk
 * (a small tmpfs mounted as the data dir), target outages longer than the
 * buffers, events dated far in the past and future (time index, reads and
 * replays by time, retention), and SIGHUP reloads under load.
 *
 * Each test prints what it did and what it counted, and ends with every
 * acknowledged event stored at its acknowledged offset, every rule's
 * deliveries complete (each acknowledged event at least once at each
 * target; duplicates counted), and a server that still answers.
 * SLUICE_SOAK=1 (make soak) runs the long versions. The harness is itest.h.
 */
#include "itest.h"
#include "receiver.h"

#include "core/base/clock.h"   /* sl_time_format_rfc3339() */
#include "core/base/crc32c.h"  /* sl_crc32c(), to read rule cursors */
#include "core/base/buf.h"

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_S 60.0 /* every wait gives up after this long (the harness scales its own) */
#define OWN_WAIT (WAIT_S * it_scale()) /* for the waits this file makes itself */

/* A retry policy that never gives up during a test: an outage must end in
 * delivery, never in the dead-letter set. */
#define RETRY                                                                                      \
    "  retry = { attempts = 1000000, max_age = \"24h\", backoff = \"exponential\",\n"              \
    "            initial = \"50ms\", max = \"500ms\" },\n"

static rx_receiver *g_rx;
static it_kmock g_mk;
static char g_mnt[PATH_MAX]; /* the tmpfs mounted by the disk-full test, "" when none */

static int setup(void **state)
{
    g_rx = rx_new();
    assert_non_null(g_rx);
    assert_int_equal(rx_start(g_rx, 0), 0);
    it_kmock_start(&g_mk, (const char *const[]){"--brokers", "3", "--topic", "out:2", NULL});
    return it_setup(state);
}

static int teardown(void **state)
{
    /* The server goes first: nothing may still write into the mount. */
    it_server *s = *state;
    it_srv_stop(s, SIGTERM, 10);
    if (g_mnt[0]) {
        if (umount2(g_mnt, MNT_DETACH) != 0)
            fprintf(stderr, "test_faults: umount %s: %s\n", g_mnt, strerror(errno));
        g_mnt[0] = '\0';
    }
    it_kmock_stop(&g_mk);
    rx_free(g_rx);
    g_rx = NULL;
    return it_teardown(state);
}

/* ---- acknowledgements and load writers ----------------------------------------- */

/* it_ack/it_acks (itest.h) under the short names this file uses. */
typedef it_ack ack;
typedef it_acks acks;

/* A writer thread: posts NDJSON batches with ids TAG-SEQ until told to stop
 * or the server has been gone for a while, and records every acknowledged
 * event. Anything but a 200 is a problem unless the test expects the server
 * to die (crashy: connection failures are expected then). */
typedef struct writer {
    pthread_t thread;
    int port;
    const char *set;
    char tag[32];
    int batch;            /* events per request */
    int pad;              /* bytes of padding per event */
    bool crashy;          /* the server is killed under it: failed exchanges are fine */
    int pause_ms;         /* between requests, to bound what a long run holds in memory */
    const char *types[3]; /* event types, used in turn (NULL: "load") */
    _Atomic bool *stop;
    acks *acks;
    int ok, failed;
    char problem[512]; /* the first unexpected answer */
} writer;

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
    double last_ok = it_mono(), gone = 10 * it_scale();
    while (!atomic_load(w->stop) && !w->problem[0] && it_mono() - last_ok < gone) {
        b.len = 0;
        for (int i = 0; i < w->batch; i++) {
            const char *type = w->types[(seq + i) % 3] ? w->types[(seq + i) % 3] : "load";
            sl_buf_printf(&b,
                          "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/load\","
                          "\"type\":\"%s\",\"data\":{\"n\":%d,\"pad\":\"%s\"}}\n",
                          w->tag, seq + i, type, seq + i, pad);
        }
        it_resp r;
        it_call k = {
            .path = path, .ctype = IT_CT_NDJSON, .body = b.data, .len = b.len, .timeout_ms = 20000};
        it_http(c, w->port, &k, &r);
        json_t *j = r.status == 200 ? json_loads(it_body(&r), 0, NULL) : NULL;
        json_t *res = json_object_get(j, "results");
        if (r.status == 200 && json_array_size(res) == (size_t)w->batch &&
            json_integer_value(json_object_get(j, "accepted")) == w->batch) {
            for (int i = 0; i < w->batch; i++) {
                json_t *e = json_array_get(res, (size_t)i);
                char id[48];
                snprintf(id, sizeof id, "%s-%d", w->tag, seq + i);
                it_acks_add(w->acks, (int)json_integer_value(json_object_get(e, "partition")),
                            (int64_t)json_integer_value(json_object_get(e, "offset")), id);
            }
            w->ok++;
            last_ok = it_mono();
            if (w->pause_ms)
                it_sleep_ms(w->pause_ms);
        } else if (r.status == 0 && w->crashy) {
            w->failed++;
            it_sleep_ms(5);
        } else {
            snprintf(w->problem, sizeof w->problem, "unexpected %ld (%s): %.300s", r.status, r.err,
                     it_body(&r));
        }
        json_decref(j);
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
            w[i].batch = 10;
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
            fail_msg("writer %s: %s", w[i].tag, w[i].problem);
}

/* Waits until at least want more events were acknowledged than before. */
static void wait_acks(acks *a, size_t before, size_t want)
{
    for (double end = it_mono() + OWN_WAIT; it_acks_count(a) < before + want; it_sleep_ms(5))
        if (it_mono() > end)
            fail_msg("only %zu events were acknowledged within %.0f s, want %zu",
                     it_acks_count(a) - before, OWN_WAIT, want);
}

/* ---- what is stored ---------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Asserts that every acknowledged event is stored at its acknowledged offset
 * of set (so no acknowledged offset holds another event), that offsets are
 * dense from start, and that no id is stored twice. Returns the number of
 * events stored. */
static size_t check_stored(it_server *s, const char *set, int nparts, acks *a)
{
    it_evs *parts = calloc((size_t)nparts, sizeof *parts);
    int64_t *first = calloc((size_t)nparts, sizeof *first);
    size_t total = 0;
    for (int p = 0; p < nparts; p++) {
        parts[p] = it_read_all(s, set, p, "*");
        first[p] = parts[p].n ? parts[p].v[0].offset : 0;
        for (size_t i = 0; i < parts[p].n; i++)
            if (parts[p].v[i].offset != first[p] + (int64_t)i)
                fail_msg("%s/%d: event %zu is at offset %lld", set, p, i,
                         (long long)parts[p].v[i].offset);
        total += parts[p].n;
    }
    pthread_mutex_lock(&a->lock);
    for (size_t k = 0; k < a->n; k++) {
        const ack *x = &a->v[k];
        int64_t i = x->offset - (x->part >= 0 && x->part < nparts ? first[x->part] : 0);
        if (x->part < 0 || x->part >= nparts || i < 0 || (size_t)i >= parts[x->part].n)
            fail_msg("acknowledged %s at %s/%d/%lld is missing (the partition holds %zu)", x->id,
                     set, x->part, (long long)x->offset,
                     x->part >= 0 && x->part < nparts ? parts[x->part].n : 0);
        const char *got = parts[x->part].v[i].id;
        if (strcmp(got, x->id) != 0)
            fail_msg("%s/%d/%lld was acknowledged for %s but holds %s", set, x->part,
                     (long long)x->offset, x->id, got);
    }
    pthread_mutex_unlock(&a->lock);
    char **ids = malloc((total + 1) * sizeof *ids);
    size_t n = 0;
    for (int p = 0; p < nparts; p++)
        for (size_t i = 0; i < parts[p].n; i++)
            ids[n++] = parts[p].v[i].id;
    qsort(ids, n, sizeof *ids, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(ids[i - 1], ids[i]) == 0)
            fail_msg("id %s is stored twice in %s", ids[i], set);
    free(ids);
    for (int p = 0; p < nparts; p++)
        it_evs_free(&parts[p]);
    free(parts);
    free(first);
    return total;
}

/* ---- what was delivered -------------------------------------------------------------- */

/* Where a delivered event came from (sluicepartition, sluiceoffset) and, for
 * a Kafka record, where it went (kp, ko). */
typedef struct dpos {
    int kp, sp;
    int64_t ko, so;
} dpos;

/* Ids delivered to a target, sorted once complete. */
typedef struct idlist {
    char **v;
    size_t n, cap;
    size_t seen; /* receiver requests already looked at */
    dpos *pos;   /* Kafka only: every record's positions, in consumption order */
    size_t npos, pcap;
} idlist;

static void ids_add(idlist *l, const char *id, size_t len)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = strndup(id, len);
}

static void ids_free(idlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    free(l->pos);
    memset(l, 0, sizeof *l);
}

/* The source positions of the events of one JSON payload (an event or a
 * batch array of them), each appended to l->pos with Kafka position kp/ko. */
static void pos_add_json(idlist *l, const char *text, size_t len, int kp, int64_t ko)
{
    json_t *j = json_loadb(text, len, 0, NULL);
    for (size_t i = 0; j && i < (json_is_array(j) ? json_array_size(j) : 1); i++) {
        json_t *e = json_is_array(j) ? json_array_get(j, i) : j;
        if (l->npos == l->pcap) {
            l->pcap = l->pcap ? l->pcap * 2 : 1024;
            l->pos = realloc(l->pos, l->pcap * sizeof *l->pos);
        }
        l->pos[l->npos++] =
            (dpos){.kp = kp,
                   .ko = ko,
                   .sp = (int)json_integer_value(json_object_get(e, "sluicepartition")),
                   .so = (int64_t)json_integer_value(json_object_get(e, "sluiceoffset"))};
    }
    json_decref(j);
}

/* How many times id is in the sorted list. */
static size_t ids_count(const idlist *l, const char *id)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(l->v[mid], id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t n = 0;
    while (lo + n < l->n && strcmp(l->v[lo + n], id) == 0)
        n++;
    return n;
}

/* Adds the ids of one JSON payload (an event or a batch array of them). */
static void ids_add_json(idlist *l, const char *text, size_t len)
{
    json_t *j = json_loadb(text, len, 0, NULL);
    if (json_is_object(j)) {
        const char *id = json_string_value(json_object_get(j, "id"));
        if (id)
            ids_add(l, id, strlen(id));
    }
    for (size_t i = 0; json_is_array(j) && i < json_array_size(j); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(j, i), "id"));
        if (id)
            ids_add(l, id, strlen(id));
    }
    json_decref(j);
}

/* Adds the ids the receiver accepted (2xx) on paths starting with prefix
 * since the last call for l, then sorts l. */
static void ids_from_rx(idlist *l, const char *prefix)
{
    size_t n = rx_count(g_rx);
    for (; l->seen < n; l->seen++) {
        const rx_req *r = rx_req_at(g_rx, l->seen);
        if (r && r->status >= 200 && r->status < 300 &&
            strncmp(r->path, prefix, strlen(prefix)) == 0)
            ids_add_json(l, r->body, r->body_len);
    }
    qsort(l->v, l->n, sizeof *l->v, cmp_str);
}

/* Every record of topic from the beginning (structured CloudEvents), read
 * with a librdkafka consumer up to the end of each partition, into l
 * (emptied first), sorted. Never asserts; false when the topic could not be
 * read to its end. */
static bool ids_from_kafka_once(idlist *l, const char *topic)
{
    ids_free(l);
    char es[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", g_mk.boot, es, sizeof es);
    rd_kafka_conf_set(conf, "group.id", "itest-faults", es, sizeof es);
    rd_kafka_conf_set(conf, "enable.partition.eof", "true", es, sizeof es);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", es, sizeof es);
    rd_kafka_conf_set(conf, "log_level", "0", es, sizeof es);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
    if (!rk)
        return false;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    bool ok = false;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0) {
        int np = md->topics[0].partition_cnt, eof = 0;
        rd_kafka_topic_partition_list_t *pl = rd_kafka_topic_partition_list_new(np);
        for (int p = 0; p < np; p++)
            rd_kafka_topic_partition_list_add(pl, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        rd_kafka_assign(rk, pl);
        rd_kafka_topic_partition_list_destroy(pl);
        double end = it_mono() + 20;
        while (eof < np && it_mono() < end) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
            if (!m)
                continue;
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
                eof++;
            else if (!m->err && m->payload) {
                ids_add_json(l, m->payload, m->len);
                pos_add_json(l, m->payload, m->len, m->partition, m->offset);
            }
            rd_kafka_message_destroy(m);
        }
        ok = eof == np;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    qsort(l->v, l->n, sizeof *l->v, cmp_str);
    return ok;
}

static void ids_from_kafka(idlist *l, const char *topic)
{
    for (int i = 0; i < 5; i++)
        if (ids_from_kafka_once(l, topic))
            return;
    fail_msg("could not read topic %s to its end", topic);
}

/* Asserts that every acknowledged event (those whose id starts with only,
 * when only is not NULL) was delivered at least once to target what;
 * returns how many acknowledged events were delivered more than once. */
static size_t check_delivered(const char *what, const idlist *got, acks *a, const char *only)
{
    size_t dups = 0, want = 0;
    pthread_mutex_lock(&a->lock);
    for (size_t k = 0; k < a->n; k++) {
        if (only && strncmp(a->v[k].id, only, strlen(only)) != 0)
            continue;
        want++;
        size_t c = ids_count(got, a->v[k].id);
        if (c == 0)
            fail_msg("%s: acknowledged event %s (%d/%lld) was never delivered (%zu of %zu "
                     "checked so far were)",
                     what, a->v[k].id, a->v[k].part, (long long)a->v[k].offset, want - 1, a->n);
        dups += c > 1;
    }
    pthread_mutex_unlock(&a->lock);
    return dups;
}

/* ---- 1. SIGKILL under sustained mixed load ------------------------------------------- */

/* The committed cursor of rule/set/part read from its file (core/bus/cursor.h:
 * two 32-byte slots "SLC1" | seq u64 | offset i64 | CRC-32C of bytes 0-19;
 * the valid slot with the higher seq counts), with the server stopped. */
static int64_t read_cursor(it_server *s, const char *rule, const char *set, int part)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/rules/%s/%s/%d.cursor", s->data, rule, set, part);
    unsigned char b[64] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    if (f)
        fclose(f);
    int64_t best = -1;
    uint64_t best_seq = 0;
    for (size_t slot = 0; slot + 32 <= n; slot += 32) {
        const unsigned char *p = b + slot;
        uint32_t crc;
        uint64_t seq;
        int64_t off;
        memcpy(&crc, p + 20, 4);
        memcpy(&seq, p + 4, 8);
        memcpy(&off, p + 12, 8);
        if (memcmp(p, "SLC1", 4) != 0 || sl_crc32c(0, p, 20) != crc)
            continue;
        if (best < 0 || seq > best_seq) {
            best = off;
            best_seq = seq;
        }
    }
    if (best < 0)
        fail_msg("no valid cursor in %s (%zu bytes)", path, n);
    return best;
}

/* What a crash may repeat: the committed cursors of both rules of mixed_cfg
 * at the kill, and where each target's record stream stood then. */
typedef struct crash_mark {
    int64_t cur[2][2]; /* [0 http / 1 kafka][partition] */
    size_t rx_at;      /* receiver requests recorded before the restart */
    int64_t khw[2];    /* Kafka records per partition of "out" before the restart */
} crash_mark;

/* Asserts that nothing delivered after the restart lies below the cursor
 * committed before it: a restart repeats only the uncommitted tail. Returns
 * how many events were delivered again from that tail or newly. */
static size_t check_tail(const crash_mark *m, idlist *k)
{
    size_t after = 0;
    idlist h = {0};
    for (size_t i = m->rx_at; i < rx_count(g_rx); i++) {
        const rx_req *r = rx_req_at(g_rx, i);
        if (r && r->status >= 200 && r->status < 300 && strncmp(r->path, "/hook", 5) == 0)
            pos_add_json(&h, r->body, r->body_len, -1, -1);
    }
    for (size_t i = 0; i < h.npos; i++, after++)
        if (h.pos[i].so < m->cur[0][h.pos[i].sp & 1])
            fail_msg("target.http: %d/%lld was delivered again after the restart, below the "
                     "committed cursor %lld",
                     h.pos[i].sp, (long long)h.pos[i].so, (long long)m->cur[0][h.pos[i].sp & 1]);
    for (size_t i = 0; i < k->npos; i++) {
        const dpos *d = &k->pos[i];
        if (d->ko < m->khw[d->kp & 1])
            continue; /* produced before the kill */
        after++;
        if (d->so < m->cur[1][d->sp & 1])
            fail_msg("target.kafka: %d/%lld was produced again after the restart, below the "
                     "committed cursor %lld",
                     d->sp, (long long)d->so, (long long)m->cur[1][d->sp & 1]);
    }
    ids_free(&h);
    return after;
}

/* Marks the state at a kill (the server is down). */
static void mark_crash(it_server *s, crash_mark *m)
{
    for (int p = 0; p < 2; p++) {
        m->cur[0][p] = read_cursor(s, "to-http", "in", p);
        m->cur[1][p] = read_cursor(s, "to-kafka", "in", p);
    }
    m->rx_at = rx_count(g_rx);
    idlist k = {0};
    ids_from_kafka(&k, "out");
    m->khw[0] = m->khw[1] = 0;
    for (size_t i = 0; i < k.npos; i++)
        if (k.pos[i].ko + 1 > m->khw[k.pos[i].kp & 1])
            m->khw[k.pos[i].kp & 1] = k.pos[i].ko + 1;
    ids_free(&k);
}

static const char mixed_cfg[] =
    "set \"in\" { partitions = 2, ack = \"durable\" }\n"
    "rule \"to-http\" {\n"
    "  set = \"in\", start = \"beginning\",\n"
    "  target = target.http { url = \"http://127.0.0.1:%d/hook\", timeout = \"5s\", batch = 20 "
    "},\n" RETRY "}\n"
    "rule \"to-kafka\" {\n"
    "  set = \"in\", start = \"beginning\",\n"
    "  target = target.kafka { brokers = \"%s\", topic = \"out\", body = \"structured\",\n"
    "    timeout = \"5s\", properties = { [\"linger.ms\"] = 5 } },\n" RETRY "}\n";

/* Drains the rules, then asserts both targets got every acknowledged event
 * and, after a crash (m not NULL), nothing from below the committed
 * cursors; sets *dh and *dk to how many acknowledged events each target got
 * more than once (over the whole run so far). */
static size_t g_after_restart; /* deliveries check_tail() looked at */

static void check_both_targets(it_server *s, acks *a, idlist *rx, size_t *dh, size_t *dk,
                               const crash_mark *m)
{
    it_wait_caught_up(s, WAIT_S);
    ids_from_rx(rx, "/hook");
    idlist k = {0};
    ids_from_kafka(&k, "out");
    *dh = check_delivered("target.http", rx, a, NULL);
    *dk = check_delivered("target.kafka", &k, a, NULL);
    if (m)
        g_after_restart += check_tail(m, &k);
    ids_free(&k);
}

/* Events both rules of mixed_cfg gave up on (dead-lettered or discarded):
 * the retry policy says never, so anything but 0 is a lost delivery. */
static json_int_t given_up(it_server *s)
{
    json_int_t n = 0;
    for (int i = 0; i < 2; i++) {
        json_t *r = it_rule(s, i ? "to-kafka" : "to-http");
        n += it_rule_int(r, "dead_lettered") + it_rule_int(r, "discarded");
        json_decref(r);
    }
    return n;
}

static void test_sigkill_mixed_load(void **state)
{
    it_server *s = *state;
    int cycles = it_soak() ? 20 : 5;
    char cfg[PATH_MAX];
    it_write_config(s, cfg, mixed_cfg, rx_port(g_rx), g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    idlist rx = {0};
    size_t dh = 0, dk = 0, stored = 0;
    int failed_requests = 0;
    crash_mark mark;
    for (int c = 0; c < cycles; c++) {
        if (c) {
            it_restart(s, WAIT_S);
            stored = check_stored(s, "in", 2, &a);
            /* Everything acknowledged before the crash reaches both targets,
             * and what is repeated comes from the uncommitted tail only. */
            check_both_targets(s, &a, &rx, &dh, &dk, &mark);
        }
        _Atomic bool stop = false;
        writer w[3] = {{.batch = 20, .pad = 100, .crashy = true, .pause_ms = 2},
                       {.batch = 5, .pad = 400, .crashy = true, .pause_ms = 2},
                       {.batch = 1, .pad = 20, .crashy = true}};
        char tag[16];
        snprintf(tag, sizeof tag, "k%d", c);
        size_t before = it_acks_count(&a);
        writers_start(w, 3, s->port, "in", tag, &stop, &a);
        wait_acks(&a, before, 50);
        it_sleep_ms(200 + rand() % 800);
        it_srv_stop(s, SIGKILL, 5);
        atomic_store(&stop, true);
        writers_join(w, 3);
        for (int i = 0; i < 3; i++)
            failed_requests += w[i].failed;
        mark_crash(s, &mark);
    }
    it_restart(s, WAIT_S);
    stored = check_stored(s, "in", 2, &a);
    check_both_targets(s, &a, &rx, &dh, &dk, &mark);
    json_int_t dl = given_up(s);
    printf("SIGKILL under mixed load: %d cycles, %zu events acknowledged (%zu stored, %d "
           "requests cut by the kills), all stored at their offsets and delivered to "
           "target.http and target.kafka; of %zu deliveries after a restart none came from "
           "below a committed cursor; duplicates (the uncommitted tail): %zu at http, %zu at "
           "kafka\n",
           cycles, a.n, stored, failed_requests, g_after_restart, dh, dk);
    assert_int_equal(dl, 0);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    ids_free(&rx);
    free(a.v);
    s->passed = true;
}

/* ---- 2. disk full --------------------------------------------------------------------- */

/* Writes a file of size bytes at path; false when the disk filled first
 * (the file is kept: it holds what fit). */
static bool fill_file(const char *path, long long size)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fail_msg("cannot create %s: %s", path, strerror(errno));
    static char chunk[65536];
    memset(chunk, 'f', sizeof chunk);
    bool ok = true;
    for (long long left = size; left > 0 && ok;) {
        size_t n = left < (long long)sizeof chunk ? (size_t)left : sizeof chunk;
        ok = fwrite(chunk, 1, n, f) == n;
        left -= (long long)n;
    }
    ok &= fclose(f) == 0;
    return ok;
}

static long long free_bytes(const char *path)
{
    struct statvfs v;
    if (statvfs(path, &v) != 0)
        fail_msg("statvfs %s: %s", path, strerror(errno));
    return (long long)v.f_bavail * (long long)v.f_frsize;
}

/* Posts one batch of n events with ids TAG-SEQ…; returns the status and
 * records acknowledged events; *msg gets a 507's message. */
static long post_batch(it_server *s, const char *set, const char *tag, int seq, int n, int pad,
                       acks *a, char *msg, size_t msg_size)
{
    sl_buf b = SL_BUF_INIT;
    char *padding = malloc((size_t)pad + 1);
    memset(padding, 'd', (size_t)pad);
    padding[pad] = '\0';
    for (int i = 0; i < n; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/disk\","
                      "\"type\":\"fill\",\"data\":{\"pad\":\"%s\"}}\n",
                      tag, seq + i, padding);
    free(padding);
    it_resp r = it_post(s, set, IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    sl_buf_free(&b);
    long st = r.status;
    if (st == 200) {
        json_t *j = it_expect_results(&r, (size_t)n, 0);
        for (int i = 0; i < n; i++) {
            char id[48];
            snprintf(id, sizeof id, "%s-%d", tag, seq + i);
            it_acks_add(a, it_res_part(j, (size_t)i), it_res_off(j, (size_t)i), id);
        }
        json_decref(j);
    } else if (st == 507) {
        it_expect_error(&r, 507, "InsufficientStorage");
        json_t *j = it_parse_json(&r);
        snprintf(msg, msg_size, "%s", json_string_value(json_object_get(j, "message")));
        json_decref(j);
    } else {
        fail_msg("publish while filling the disk answered %ld: %s", st, it_body(&r));
    }
    it_resp_free(&r);
    return st;
}

/* `sluice log verify` of every partition of set; asserts each says ok. */
static void verify_logs(it_server *s, const char *set, int nparts)
{
    for (int p = 0; p < nparts; p++) {
        char dir[PATH_MAX + 64], *out = NULL;
        snprintf(dir, sizeof dir, "%s/sets/%s/%d", s->data, set, p);
        int rc = it_run(s, NULL, &out, NULL, (const char *const[]){"log", "verify", dir, NULL}, 60);
        if (rc != 0 || !strstr(out, "ok"))
            fail_msg("sluice log verify %s exited %d:\n%s", dir, rc, out);
        printf("  log verify %s: %s", dir, out);
        free(out);
    }
}

/* Polls until set holds at least want events (ack = "buffer" answers
 * before the write). */
static void wait_events(it_server *s, const char *set, json_int_t want);

static void test_disk_full(void **state)
{
    it_server *s = *state;
    if (mkdir(s->data, 0755) != 0)
        fail_msg("mkdir %s: %s", s->data, strerror(errno));
    if (mount("tmpfs", s->data, "tmpfs", 0, "size=16m") != 0) {
        fprintf(stderr,
                "test_faults: SKIPPED the disk-full test: cannot mount a tmpfs on %s (%s); it "
                "needs root or CAP_SYS_ADMIN\n",
                s->data, strerror(errno));
        s->passed = true;
        skip();
    }
    snprintf(g_mnt, sizeof g_mnt, "%s", s->data);
    char cfg[PATH_MAX];
    /* Small segments, so that rolls (new files, preallocated indexes) happen
     * while the disk fills. */
    it_write_config(s, cfg,
                    "set \"full\" { partitions = 2, ack = \"durable\", segment_bytes = \"16KiB\" "
                    "}\n"
                    "set \"buf\" { partitions = 1, ack = \"buffer\", segment_bytes = \"256KiB\", "
                    "linger = \"5ms\" }\n");
    it_start_config(s, cfg, WAIT_S);
    char filler[PATH_MAX];
    snprintf(filler, sizeof filler, "%s/filler", s->data);
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER}, ab = {.lock = PTHREAD_MUTEX_INITIALIZER};
    char msg[512] = "", bmsg[512] = "";
    int seq = 0;
    /* Each round a filler leaves a different amount free (a few segments'
     * worth, less than one, …), so that the disk fills at different points:
     * inside a segment, at a roll (new files, preallocated indexes). */
    static const long long left_kib[] = {1536, 637, 263, 1100, 77, 419};
    int rounds = it_soak() ? 6 : 3;
    for (int round = 0; round < rounds; round++) {
        long long fill = free_bytes(s->data) - left_kib[round] * 1024;
        fill_file(filler, fill > 0 ? fill : 0); /* the file is what is deleted later */
        int full = 0, ok = 0, bfull = 0, bok = 0;
        /* ack = durable: ingest until full; then every publish must be
         * refused cleanly with 507. */
        for (int i = 0; i < 5000 && full < 10; i++, seq += 20) {
            long st = post_batch(s, "full", "d", seq, 20, 300, &a, msg, sizeof msg);
            ok += st == 200;
            full += st == 507;
            if (full == 0 && i == 4999)
                fail_msg("the disk never filled up (%d batches stored)", ok);
        }
        printf("round %d, %lld KiB free: ack = durable: %d batches acknowledged, then 10 times "
               "507: %s\n",
               round, left_kib[round], ok, msg);
        if (!strstr(msg, "space"))
            fail_msg("the 507 message does not say the disk is full: %s", msg);
        /* ack = buffer: accepted into the buffer until the writer fails,
         * then 507 too; what was accepted waits in the buffer for space. */
        for (int i = 0; i < 500 && bfull < 3; i++, seq += 5) {
            long st = post_batch(s, "buf", "b", seq, 5, 300, &ab, bmsg, sizeof bmsg);
            bok += st == 200;
            bfull += st == 507;
            it_sleep_ms(10);
        }
        if (bfull < 3)
            fail_msg("ack = buffer: no 507 after %d accepted batches on a full disk", bok);
        printf("round %d: ack = buffer: %d batches accepted into the buffer, then 507: %s\n", round,
               bok, bmsg);
        if (!strstr(bmsg, "space"))
            fail_msg("the 507 message does not say the disk is full: %s", bmsg);
        assert_int_equal(it_status_of(s->port, "/healthz"), 200);
        check_stored(s, "full", 2, &a);
        /* Space comes back: publishing resumes without a restart, and what
         * the buffer held is written. */
        if (unlink(filler) != 0)
            fail_msg("unlink %s: %s", filler, strerror(errno));
        long st = 507;
        for (double end = it_mono() + OWN_WAIT; st != 200 && it_mono() < end; seq += 20) {
            st = post_batch(s, "full", "r", seq, 20, 300, &a, msg, sizeof msg);
            if (st != 200)
                it_sleep_ms(100);
        }
        if (st != 200)
            fail_msg("publishing did not resume after space was freed: %s", msg);
        /* The buffer set retries its writes every 100 ms: it takes
         * publishes again after its next retry succeeds. */
        st = 507;
        for (double end = it_mono() + OWN_WAIT; st != 200 && it_mono() < end; seq += 5) {
            st = post_batch(s, "buf", "r", seq, 5, 300, &ab, bmsg, sizeof bmsg);
            if (st != 200)
                it_sleep_ms(50);
        }
        if (st != 200)
            fail_msg("publishing to the ack = buffer set did not resume: %s", bmsg);
        for (int i = 0; i < 10; i++, seq += 20) {
            assert_int_equal(post_batch(s, "full", "r", seq, 20, 300, &a, msg, sizeof msg), 200);
            assert_int_equal(post_batch(s, "buf", "r", seq, 5, 300, &ab, bmsg, sizeof bmsg), 200);
        }
    }
    printf("disk full: the writes that failed: %d appends inside a segment, %d at a roll\n",
           it_log_count(s, "append at byte"), it_log_count(s, "preallocate"));
    wait_events(s, "buf", (json_int_t)ab.n);
    size_t stored = check_stored(s, "full", 2, &a);
    size_t bstored = check_stored(s, "buf", 1, &ab);
    /* A clean restart keeps everything, and the files are sound. */
    int wst = it_srv_stop(s, SIGTERM, 20);
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fail_msg("SIGTERM after the disk was full: wait status %d, want exit 0", wst);
    verify_logs(s, "full", 2);
    verify_logs(s, "buf", 1);
    it_restart(s, WAIT_S);
    stored = check_stored(s, "full", 2, &a);
    bstored = check_stored(s, "buf", 1, &ab);
    printf("disk full: resumed after freeing space; %zu + %zu events acknowledged in all, %zu + "
           "%zu stored, log verify ok\n",
           a.n, ab.n, stored, bstored);
    free(a.v);
    free(ab.v);
    s->passed = true;
}

/* source.file into a durable set while the disk fills: the source's batch
 * answered SL_ENOSPC is kept and published again (the source backs off and
 * reads nothing meanwhile); once space is freed every line is stored, at
 * least once (a batch cut by the full disk may have stored part of itself
 * before), with dense offsets. The source must not stop. */
static json_int_t set_events(it_server *s, const char *set);

static void test_disk_full_source_file(void **state)
{
    it_server *s = *state;
    if (mkdir(s->data, 0755) != 0)
        fail_msg("mkdir %s: %s", s->data, strerror(errno));
    if (mount("tmpfs", s->data, "tmpfs", 0, "size=4m") != 0) {
        fprintf(stderr,
                "test_faults: SKIPPED the source.file disk-full test: cannot mount a "
                "tmpfs on %s (%s)\n",
                s->data, strerror(errno));
        s->passed = true;
        skip();
    }
    snprintf(g_mnt, sizeof g_mnt, "%s", s->data);
    char dir[PATH_MAX], in[PATH_MAX + 16], cfg[PATH_MAX];
    it_path(dir, s, "in"); /* outside the tmpfs */
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", dir, strerror(errno));
    snprintf(in, sizeof in, "%s/a.log", dir);
    it_write_config(s, cfg,
                    "set \"src\" { partitions = 1, ack = \"durable\", segment_bytes = \"16KiB\" }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"src\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    char filler[PATH_MAX];
    snprintf(filler, sizeof filler, "%s/filler", s->data);
    /* 500 lines stored on a healthy disk, then about 500 KiB more for 256
     * KiB of space; the file is made after the start, so it is read from
     * its beginning. */
    enum { FIRST = 500, LINES = 3000 };
    for (int part = 0; part < 2; part++) {
        FILE *f = fopen(in, "a");
        if (!f)
            fail_msg("cannot open %s: %s", in, strerror(errno));
        for (int i = part ? FIRST : 0; i < (part ? LINES : FIRST); i++)
            fprintf(f, "{\"seq\":%d,\"pad\":\"%0180d\"}\n", i, i);
        if (fclose(f) != 0)
            fail_msg("write %s: %s", in, strerror(errno));
        if (part)
            break;
        wait_events(s, "src", FIRST);
        long long fill = free_bytes(s->data) - 256 * 1024;
        fill_file(filler, fill > 0 ? fill : 0);
    }
    for (double end = it_mono() + OWN_WAIT; it_log_count(s, "cannot store events yet") == 0;
         it_sleep_ms(50))
        if (it_mono() > end)
            fail_msg("the source never reported the full disk (set holds %lld events)",
                     (long long)set_events(s, "src"));
    /* The path under test: the Databus dropped the unwritten events and
     * answered the source's durable publish SL_ENOSPC. */
    if (it_log_count(s, "their publishers get the error") == 0)
        fail_msg("the durable publish was not refused by the full disk");
    json_int_t at_full = set_events(s, "src");
    if (at_full >= LINES)
        fail_msg("the disk did not fill: %lld events stored", (long long)at_full);
    if (unlink(filler) != 0)
        fail_msg("unlink %s: %s", filler, strerror(errno));
    wait_events(s, "src", LINES);
    it_evs e = it_read_all(s, "src", 0, "*");
    int *seen = calloc(LINES, sizeof *seen);
    size_t dup = 0;
    for (size_t i = 0; i < e.n; i++) {
        if (i && e.v[i].offset != e.v[i - 1].offset + 1)
            fail_msg("src/0: event %zu is at offset %lld after %lld", i, (long long)e.v[i].offset,
                     (long long)e.v[i - 1].offset);
        json_t *j = json_loads(e.v[i].text, 0, NULL);
        json_int_t q =
            j ? json_integer_value(json_object_get(json_object_get(j, "data"), "seq")) : -1;
        json_decref(j);
        if (q < 0 || q >= LINES)
            fail_msg("event %zu is not a line of the file: %.200s", i, e.v[i].text);
        dup += seen[q]++ > 0;
    }
    for (int i = 0; i < LINES; i++)
        if (!seen[i])
            fail_msg("line %d was never stored (%zu events stored)", i, e.n);
    printf("source.file on a full disk: %lld events stored when it filled, then all %d lines "
           "(%zu stored twice) after space was freed\n",
           (long long)at_full, LINES, dup);
    free(seen);
    it_evs_free(&e);
    s->passed = true;
}

/* ---- 3. target outages ----------------------------------------------------------------- */

static void test_target_outage(void **state)
{
    it_server *s = *state;
    double outage_s = it_soak() ? 30 : 8; /* longer than target.kafka's 5 s timeout */
    char cfg[PATH_MAX];
    it_write_config(s, cfg, mixed_cfg, rx_port(g_rx), g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    _Atomic bool stop = false;
    writer w[2] = {{.batch = 20, .pad = 200, .pause_ms = 5},
                   {.batch = 3, .pad = 50, .pause_ms = 2}};
    writers_start(w, 2, s->port, "in", "o", &stop, &a);
    wait_acks(&a, 0, 200);
    /* Both targets go away while ingest goes on. */
    rx_stop(g_rx);
    for (int b = 1; b <= 3; b++)
        it_kmock_cmd(&g_mk, "down %d", b);
    size_t at_down = it_acks_count(&a);
    double t0 = it_mono();
    json_int_t lag_http = 0, lag_kafka = 0;
    while (it_mono() - t0 < outage_s) {
        it_sleep_ms(250);
        json_t *rules = it_rules(s);
        json_t *h = it_rule_in(rules, "to-http"), *k = it_rule_in(rules, "to-kafka");
        if (!h || !k)
            fail_msg("GET /v1/rules lacks a rule");
        lag_http = json_integer_value(json_object_get(h, "lag"));
        lag_kafka = json_integer_value(json_object_get(k, "lag"));
        json_decref(rules);
    }
    size_t during = it_acks_count(&a) - at_down;
    if (lag_http <= 0 || lag_kafka <= 0)
        fail_msg("after %.0f s of outage the rules' lag is %lld (http) and %lld (kafka), want > 0",
                 outage_s, (long long)lag_http, (long long)lag_kafka);
    if (during == 0)
        fail_msg("nothing was acknowledged during the outage");
    /* They come back: everything is delivered. */
    assert_int_equal(rx_restart(g_rx), 0);
    for (int b = 1; b <= 3; b++)
        it_kmock_cmd(&g_mk, "up %d", b);
    it_sleep_ms(1000);
    atomic_store(&stop, true);
    writers_join(w, 2);
    size_t stored = check_stored(s, "in", 2, &a);
    idlist rx = {0};
    size_t dh = 0, dk = 0;
    check_both_targets(s, &a, &rx, &dh, &dk, NULL);
    json_int_t dl = given_up(s);
    printf("target outage: both targets down %.0f s; %zu events acknowledged during it (every "
           "publish answered 200), lag at its end %lld (http) and %lld (kafka); after recovery "
           "all %zu acknowledged (%zu stored) delivered to both; duplicates %zu (http), %zu "
           "(kafka)\n",
           outage_s, during, (long long)lag_http, (long long)lag_kafka, a.n, stored, dh, dk);
    assert_int_equal(dl, 0);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    ids_free(&rx);
    free(a.v);
    s->passed = true;
}

/* ---- 4. clock jumps ----------------------------------------------------------------------- */

/* The RFC 3339 form of ms. */
static void fmt_time(int64_t ms, char out[SL_TIME_RFC3339_MAX])
{
    if (!sl_time_format_rfc3339(ms, out))
        fail_msg("cannot format %lld", (long long)ms);
}

/* Posts events TAG-0… each with one of the given `time` values (NULL: no
 * time attribute), recording them. */
static void post_dated(it_server *s, const char *set, const char *tag, const char *const *times,
                       int n, acks *a)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++) {
        const char *t = times[i % 5];
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/clock\","
                      "\"type\":\"dated\"%s%s%s}\n",
                      tag, i, t ? ",\"time\":\"" : "", t ? t : "", t ? "\"" : "");
    }
    json_t *j = it_post_all(s, set, NULL, &b, (size_t)n);
    for (int i = 0; i < n; i++) {
        char id[48];
        snprintf(id, sizeof id, "%s-%d", tag, i);
        it_acks_add(a, it_res_part(j, (size_t)i), it_res_off(j, (size_t)i), id);
    }
    json_decref(j);
    sl_buf_free(&b);
}

/* The ids read from set/0 from time t on (GET ?from=T), in order, as one
 * comma-separated string (caller frees). */
static char *ids_from_time(it_server *s, const char *set, const char *t)
{
    char q[128];
    snprintf(q, sizeof q, "from=%s&max=10000", t);
    it_evs e = it_read_events(s, set, 0, q);
    sl_buf b = SL_BUF_INIT;
    for (size_t i = 0; i < e.n; i++)
        sl_buf_printf(&b, "%s%s", i ? "," : "", e.v[i].id);
    sl_buf_append(&b, "", 1);
    it_evs_free(&e);
    return (char *)b.data;
}

/* Events in set (GET /v1/sets/SET "events"). */
static json_int_t set_events(it_server *s, const char *set)
{
    it_resp r = it_get(s, "/v1/sets/%s", set);
    if (r.status != 200)
        fail_msg("GET /v1/sets/%s answered %ld: %s", set, r.status, it_body(&r));
    json_t *j = it_parse_json(&r);
    json_int_t n = json_integer_value(json_object_get(j, "events"));
    json_decref(j);
    it_resp_free(&r);
    return n;
}

static void wait_events(it_server *s, const char *set, json_int_t want)
{
    json_int_t have = 0;
    for (double end = it_mono() + OWN_WAIT; (have = set_events(s, set)) < want; it_sleep_ms(50))
        if (it_mono() > end)
            fail_msg("set %s holds %lld events, want %lld", set, (long long)have, (long long)want);
}

static void test_clock_jumps(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    /* "keep" holds on to a day; "expire" to a second. */
    it_write_config(
        s, cfg,
        "set \"keep\" { partitions = 1, retention = \"1d\" }\n"
        "set \"expire\" { partitions = 1, retention = \"1s\" }\n"
        "rule \"r\" {\n"
        "  set = \"keep\", start = \"beginning\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/clock\", batch = 10 },\n" RETRY "}\n",
        rx_port(g_rx));
    it_start_config(s, cfg, WAIT_S);
    char now[SL_TIME_RFC3339_MAX];
    fmt_time(sl_clock_now_ms(), now);
    const char *times[5] = {"1970-01-01T00:00:01Z", "2001-09-09T01:46:40Z", "2999-12-31T23:59:59Z",
                            now, NULL};
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER}, ax = {.lock = PTHREAD_MUTEX_INITIALIZER};
    /* Window 1: [t0, t1); window 2: [t1, t2); stored (append) time decides. */
    char t0[SL_TIME_RFC3339_MAX], t1[SL_TIME_RFC3339_MAX], t2[SL_TIME_RFC3339_MAX];
    fmt_time(sl_clock_now_ms() - 1, t0);
    post_dated(s, "keep", "a", times, 10, &a);
    it_sleep_ms(1100);
    fmt_time(sl_clock_now_ms(), t1);
    it_sleep_ms(20);
    post_dated(s, "keep", "b", times, 10, &a);
    it_sleep_ms(20);
    fmt_time(sl_clock_now_ms(), t2);
    post_dated(s, "expire", "x", times, 10, &ax);
    /* Reads by time: from=t1 starts exactly at b-0, whatever the events' own times. */
    char *got = ids_from_time(s, "keep", t1), *all = ids_from_time(s, "keep", t0);
    const char *want_b = "b-0,b-1,b-2,b-3,b-4,b-5,b-6,b-7,b-8,b-9";
    if (strcmp(got, want_b) != 0)
        fail_msg("from=%s read %s, want %s", t1, got, want_b);
    if (strncmp(all, "a-0,a-1,", 8) != 0 || !strstr(all, want_b))
        fail_msg("from=%s read %s, want a-0…a-9 then b-0…b-9", t0, all);
    free(got);
    free(all);
    got = ids_from_time(s, "keep", "2999-12-31T00:00:00Z");
    if (*got)
        fail_msg("from a time after every append read %s, want nothing", got);
    free(got);
    got = ids_from_time(s, "keep", "1970-01-01T00:00:00Z");
    if (strncmp(got, "a-0,", 4) != 0)
        fail_msg("from 1970 read %s, want everything from a-0", got);
    free(got);
    /* A replay of window 1 delivers exactly the a-* events again. */
    it_wait_caught_up(s, WAIT_S);
    char body[256];
    snprintf(body, sizeof body, "{\"from\":\"%s\",\"to\":\"%s\"}", t0, t1);
    it_resp r;
    it_call k = {.path = "/v1/rules/r/replay",
                 .ctype = "application/json",
                 .body = body,
                 .len = strlen(body)};
    assert_int_equal(it_http(NULL, s->port, &k, &r), 0);
    if (r.status != 202)
        fail_msg("replay answered %ld: %s", r.status, it_body(&r));
    it_resp_free(&r);
    idlist got_rx = {0};
    for (double end = it_mono() + OWN_WAIT;; it_sleep_ms(50)) {
        ids_from_rx(&got_rx, "/clock");
        if (ids_count(&got_rx, "a-9") >= 2)
            break;
        if (it_mono() > end)
            fail_msg("the replay of [%s, %s) did not deliver a-9 again", t0, t1);
    }
    it_wait_caught_up(s, WAIT_S);
    it_sleep_ms(300);
    ids_from_rx(&got_rx, "/clock");
    for (int i = 0; i < 10; i++) {
        char ida[16], idb[16];
        snprintf(ida, sizeof ida, "a-%d", i);
        snprintf(idb, sizeof idb, "b-%d", i);
        if (ids_count(&got_rx, ida) != 2 || ids_count(&got_rx, idb) != 1)
            fail_msg("after the replay of window 1: %s delivered %zu times (want 2), %s %zu "
                     "times (want 1)",
                     ida, ids_count(&got_rx, ida), idb, ids_count(&got_rx, idb));
    }
    ids_free(&got_rx);
    /* Retention (applied at start-up and once a minute) goes by the stored
     * time: "expire" loses its events, the one dated 2999 too, and "keep"
     * keeps its own, the ones dated 1970 too. */
    it_sleep_ms(1200);
    it_srv_stop(s, SIGTERM, 20);
    it_restart(s, WAIT_S);
    json_int_t kept = set_events(s, "keep"), left = set_events(s, "expire");
    it_evs ex = it_read_events(s, "expire", 0, "from=beginning");
    if (left != 0 || ex.n != 0)
        fail_msg("retention = 1s kept %lld events of \"expire\" (%zu readable), want 0 (one is "
                 "dated 2999)",
                 (long long)left, ex.n);
    it_evs_free(&ex);
    if (kept != 20)
        fail_msg("retention = 1d left %lld events of \"keep\", want 20 (two are dated 1970)",
                 (long long)kept);
    check_stored(s, "keep", 1, &a);
    printf("clock jumps: 30 events dated 1970, 2001, 2999, now and undated; reads from a time "
           "and a replay of a window followed the stored time; retention deleted all 10 of "
           "\"expire\" (1s) and kept all 20 of \"keep\" (1d)\n");
    free(a.v);
    free(ax.v);
    s->passed = true;
}

/* ---- 5. config reload under load ------------------------------------------------------------ */

/* The config of reload round k: "stay" never changes; "changed" alternates
 * its pattern (type a, then types a and b) and its URL; "extra-K" is a new
 * rule each round (the previous one is removed). */
static void write_reload_cfg(it_server *s, char *cfg, int k)
{
    it_write_config(
        s, cfg,
        "set \"in\" { partitions = 2, ack = \"durable\" }\n"
        "rule \"stay\" {\n"
        "  set = \"in\", start = \"beginning\",\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/stay\", batch = 20 },\n" RETRY "}\n"
        "rule \"changed\" {\n"
        "  set = \"in\", start = \"beginning\", match = { type = { %s } },\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/changed/%d\", batch = 20 },\n" RETRY
        "}\n"
        "rule \"extra-%d\" {\n"
        "  set = \"in\", start = \"beginning\",\n"
        "  transform = function(e) e.data.round = %d; return e end,\n"
        "  target = target.http { url = \"http://127.0.0.1:%d/extra/%d\", batch = 20 },\n" RETRY
        "}\n",
        rx_port(g_rx), k % 2 ? "\"a\", \"b\"" : "\"a\"", rx_port(g_rx), k, k, k, rx_port(g_rx), k);
}

static void test_reload_under_load(void **state)
{
    it_server *s = *state;
    int rounds = it_soak() ? 30 : 6;
    char cfg[PATH_MAX];
    write_reload_cfg(s, cfg, 0);
    it_start_config(s, cfg, WAIT_S);
    acks a = {.lock = PTHREAD_MUTEX_INITIALIZER};
    _Atomic bool stop = false;
    writer w[2] = {{.batch = 10, .pad = 100, .pause_ms = 2, .types = {"a", "b", "c"}},
                   {.batch = 2, .pad = 30, .types = {"a", "c", "b"}}};
    writers_start(w, 2, s->port, "in", "h", &stop, &a);
    wait_acks(&a, 0, 100);
    for (int k = 1; k <= rounds; k++) {
        int before = it_log_count(s, "reloaded ");
        write_reload_cfg(s, cfg, k);
        kill(s->pid, SIGHUP);
        for (double end = it_mono() + OWN_WAIT; it_log_count(s, "reloaded ") <= before;
             it_sleep_ms(10))
            if (it_mono() > end || it_log_contains(s, "reload of"))
                fail_msg("reload %d was not done within %.0f s", k, OWN_WAIT);
        size_t n = it_acks_count(&a);
        wait_acks(&a, n, 20); /* ingest goes on between reloads */
    }
    atomic_store(&stop, true);
    writers_join(w, 2);
    size_t stored = check_stored(s, "in", 2, &a);
    it_wait_caught_up(s, WAIT_S);
    /* "stay" got everything; "changed" got every event of type a (its
     * pattern always took them) at one of its URLs; the last extra rule,
     * starting at the beginning, got everything. */
    idlist stay = {0}, chg = {0}, extra = {0};
    char last[64];
    snprintf(last, sizeof last, "/extra/%d", rounds);
    ids_from_rx(&stay, "/stay");
    ids_from_rx(&chg, "/changed/");
    ids_from_rx(&extra, last);
    size_t dstay = check_delivered("rule stay", &stay, &a, NULL);
    size_t dextra = check_delivered("the last new rule", &extra, &a, NULL);
    size_t typed_a = 0;
    pthread_mutex_lock(&a.lock);
    for (size_t i = 0; i < a.n; i++) {
        /* ids TAG-wI-SEQ: writer 0 uses types a,b,c and writer 1 a,c,b by SEQ % 3 */
        const char *dash = strrchr(a.v[i].id, '-');
        long seq = strtol(dash + 1, NULL, 10);
        if (seq % 3 == 0) { /* type a for both writers */
            typed_a++;
            if (ids_count(&chg, a.v[i].id) == 0)
                fail_msg("rule changed: %s (type a) was never delivered", a.v[i].id);
        }
    }
    pthread_mutex_unlock(&a.lock);
    printf("reload under load: %d reloads while %zu events were acknowledged (%zu stored); "
           "\"stay\" delivered all (%zu duplicates), \"changed\" all %zu of type a, the newest "
           "rule all from the beginning (%zu duplicates)\n",
           rounds, a.n, stored, dstay, typed_a, dextra);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    ids_free(&stay);
    ids_free(&chg);
    ids_free(&extra);
    free(a.v);
    s->passed = true;
}

int main(void)
{
    if (it_init("test_faults"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigkill_mixed_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full_source_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_target_outage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock_jumps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_under_load, setup, teardown),
    };
    /* ITEST_ONLY=NAME (a cmocka pattern, e.g. test_disk_full) runs those alone. */
    if (getenv("ITEST_ONLY"))
        cmocka_set_test_filter(getenv("ITEST_ONLY"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
