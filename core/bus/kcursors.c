/*
 * core/bus/kcursors.c — the rules' cursors in a compacted topic (see
 * kgroup.h, sl_kcursors_*).
 *
 * A table key → offset in memory, fed by a reader that follows every
 * partition of the topic from its beginning (librdkafka's legacy consumer:
 * no group, nothing committed), and an idempotent producer (acks=all) for
 * the puts. One thread serves both: it reads, applies, and serves the
 * producer's delivery reports.
 *
 * A put changes the table at once, before its record comes back: so that
 * the record of an older put (or another router's record written before
 * it) read meanwhile does not move the value back, each record carries a
 * header naming its writer and the put's sequence number, and an entry
 * with a put of its own in flight ignores other writers' records until its
 * own latest record is read back (compaction keeps the latest record of a
 * key, which is the one that clears it). The end result is the topic's
 * order: latest record wins.
 */
#include "core/bus/kgroup.h"

#include "core/base/clock.h"
#include "core/base/kafka_conf.h"
#include "core/base/slog.h"
#include "core/bus/event.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_MS 100
#define BATCH 256
#define ENSURE_WAIT_MS 10000
#define CLOSE_FLUSH_MS 5000
#define LOG_EVERY_MS 10000
#define WRITER_HEADER "sluice-writer"
#define KEY_MAX 1024
#define WM_WAIT_MS 5000     /* one watermark query */
#define WM_SOCKET_MS "5000" /* socket.timeout.ms of its client */

typedef struct kentry {
    char *key;        /* NULL: a free slot */
    int64_t value;    /* -1: none (never written, or a tombstone) */
    uint64_t own_seq; /* this instance's latest put not read back yet (0: none) */
} kentry;

struct sl_kcursors {
    char *topic;
    rd_kafka_t *prod, *reader;
    rd_kafka_topic_t *rkt; /* the reader's */
    rd_kafka_queue_t *q;
    int32_t nparts;
    bool *reading;   /* [nparts]: consume started */
    char writer[37]; /* this instance's id in WRITER_HEADER */

    rd_kafka_t *wm; /* the watermark queries' own client */

    pthread_t thread, wm_thread;
    bool started, wm_started;
    atomic_bool stop;

    pthread_mutex_t lock; /* everything below */
    pthread_cond_t moved; /* the read position moved */
    kentry *slots;
    size_t cap, count;
    int64_t *readpos;       /* [nparts]: the next offset to read */
    pthread_cond_t wm_wake; /* a get() wants the watermarks */
    uint64_t wm_req;        /* get()s that asked for them so far */
    uint64_t wm_done;       /* the last query answered covers the requests up to this */
    bool wm_ok;             /* it got every partition's */
    int64_t *wm_hi;         /* [nparts]: its high watermarks (0 where it failed) */
    uint64_t seq;
    uint64_t failed, failed_seen;
    char fail_msg[256];
    int64_t bad_log_ms, err_log_ms;
    uint64_t bad;
};

/* ---- the table (caller holds lock) ------------------------------------------- */

static uint64_t key_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static kentry *slot_of(kentry *slots, size_t cap, const char *key, size_t len)
{
    size_t i = key_hash(key, len) & (cap - 1);
    while (slots[i].key && (strlen(slots[i].key) != len || memcmp(slots[i].key, key, len) != 0))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static kentry *table_find(sl_kcursors *k, const char *key, size_t len)
{
    if (!k->cap)
        return NULL;
    kentry *e = slot_of(k->slots, k->cap, key, len);
    return e->key ? e : NULL;
}

/* The entry of key, made (value -1) when missing; NULL when out of memory. */
static kentry *table_get(sl_kcursors *k, const char *key, size_t len)
{
    kentry *e = table_find(k, key, len);
    if (e)
        return e;
    if ((k->count + 1) * 10 > k->cap * 7) { /* grow at 70 % */
        size_t ncap = k->cap ? k->cap * 2 : 64;
        kentry *ns = calloc(ncap, sizeof *ns);
        if (!ns)
            return NULL;
        for (size_t i = 0; i < k->cap; i++)
            if (k->slots[i].key)
                *slot_of(ns, ncap, k->slots[i].key, strlen(k->slots[i].key)) = k->slots[i];
        free(k->slots);
        k->slots = ns;
        k->cap = ncap;
    }
    e = slot_of(k->slots, k->cap, key, len);
    if (!(e->key = malloc(len + 1)))
        return NULL;
    memcpy(e->key, key, len);
    e->key[len] = '\0';
    e->value = -1;
    e->own_seq = 0;
    k->count++;
    return e;
}

/* ---- reading ------------------------------------------------------------------ */

/* The decimal offset in v[0..len), or -1 when it is not one. */
static int64_t parse_offset(const char *v, size_t len)
{
    if (!len || len > 19)
        return -1;
    int64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

/* The put sequence in a record written by this instance, or 0. */
static uint64_t own_seq_of(sl_kcursors *k, const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h = NULL;
    const void *v = NULL;
    size_t vl = 0;
    if (rd_kafka_message_headers(m, &h) || rd_kafka_header_get_last(h, WRITER_HEADER, &v, &vl))
        return 0;
    size_t wl = strlen(k->writer);
    if (vl < wl + 2 || memcmp(v, k->writer, wl) != 0 || ((const char *)v)[wl] != ':')
        return 0;
    int64_t s = parse_offset((const char *)v + wl + 1, vl - wl - 1);
    return s > 0 ? (uint64_t)s : 0;
}

/* Applies one record (caller holds lock). */
static void apply(sl_kcursors *k, const rd_kafka_message_t *m)
{
    if (m->partition >= 0 && m->partition < k->nparts && m->offset + 1 > k->readpos[m->partition])
        k->readpos[m->partition] = m->offset + 1;
    if (!m->key || !m->key_len || m->key_len > KEY_MAX)
        return;
    int64_t v = -1; /* a tombstone: no value */
    if (m->payload && m->len && (v = parse_offset(m->payload, m->len)) < 0) {
        k->bad++;
        int64_t now = sl_clock_mono_ms();
        if (!k->bad_log_ms || now - k->bad_log_ms >= LOG_EVERY_MS) {
            k->bad_log_ms = now ? now : 1;
            sl_slog(SL_SLOG_WARN, "kafka",
                    "cursor topic %s: partition %d offset %" PRId64
                    ": the value is not a decimal offset: ignored (%" PRIu64 " so far)",
                    k->topic, (int)m->partition, m->offset, k->bad);
        }
        return;
    }
    uint64_t seq = own_seq_of(k, m);
    kentry *e = seq ? table_find(k, m->key, m->key_len) : table_get(k, m->key, m->key_len);
    if (!e)
        return; /* out of memory (foreign), or ours and gone: nothing to do */
    if (seq) {
        /* Ours: the table has it, or a later put. The latest read back
         * lets other writers' records in again. */
        if (seq >= e->own_seq)
            e->own_seq = 0;
        return;
    }
    if (!e->own_seq)
        e->value = v;
}

static void *reader_thread(void *arg)
{
    sl_kcursors *k = arg;
    rd_kafka_message_t *msgs[BATCH];
    while (!atomic_load(&k->stop)) {
        ssize_t n = rd_kafka_consume_batch_queue(k->q, READ_MS, msgs, BATCH);
        if (n > 0) {
            pthread_mutex_lock(&k->lock);
            for (ssize_t i = 0; i < n; i++) {
                rd_kafka_message_t *m = msgs[i];
                if (!m->err)
                    apply(k, m);
                else if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && m->partition >= 0 &&
                         m->partition < k->nparts && m->offset > k->readpos[m->partition])
                    k->readpos[m->partition] = m->offset; /* the end (compaction may skip) */
            }
            pthread_cond_broadcast(&k->moved);
            pthread_mutex_unlock(&k->lock);
            for (ssize_t i = 0; i < n; i++) {
                if (msgs[i]->err && msgs[i]->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    sl_slog(SL_SLOG_DEBUG, "kafka", "cursor topic %s: %s", k->topic,
                            rd_kafka_message_errstr(msgs[i]));
                rd_kafka_message_destroy(msgs[i]);
            }
        }
        rd_kafka_poll(k->prod, 0); /* delivery reports */
        rd_kafka_poll(k->reader, 0); /* errors: their queues grow unless served */
        rd_kafka_poll(k->wm, 0);
    }
    return NULL;
}

/* ---- writing ------------------------------------------------------------------ */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    sl_kcursors *k = opaque;
    if (!m->err)
        return;
    uint64_t seq = (uint64_t)(uintptr_t)m->_private;
    pthread_mutex_lock(&k->lock);
    k->failed++;
    snprintf(k->fail_msg, sizeof k->fail_msg, "cursor topic %s: a put failed: %s", k->topic,
             rd_kafka_err2str(m->err));
    /* Its record never comes back: stop waiting for it. */
    kentry *e = m->key ? table_find(k, m->key, m->key_len) : NULL;
    if (e && e->own_seq == seq)
        e->own_seq = 0;
    pthread_mutex_unlock(&k->lock);
}

int sl_kcursors_put(sl_kcursors *k, const char *key, int64_t offset)
{
    size_t len = strlen(key);
    if (!len || len > KEY_MAX || offset < 0)
        return SL_EINVAL;
    char val[24], hdr[64];
    int vl = snprintf(val, sizeof val, "%" PRId64, offset);
    pthread_mutex_lock(&k->lock);
    kentry *e = table_get(k, key, len);
    if (!e) {
        pthread_mutex_unlock(&k->lock);
        return SL_ENOMEM;
    }
    uint64_t seq = ++k->seq;
    int hl = snprintf(hdr, sizeof hdr, "%s:%" PRIu64, k->writer, seq);
    /* Under the lock, so that the puts of one key reach the producer in
     * the order the table saw them (producev never blocks here). */
    rd_kafka_resp_err_t pe = rd_kafka_producev(
        k->prod, RD_KAFKA_V_TOPIC(k->topic), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, len),
        RD_KAFKA_V_VALUE(val, (size_t)vl), RD_KAFKA_V_HEADER(WRITER_HEADER, hdr, hl),
        RD_KAFKA_V_OPAQUE((void *)(uintptr_t)seq), RD_KAFKA_V_END);
    if (!pe) {
        e->value = offset;
        e->own_seq = seq;
    }
    pthread_mutex_unlock(&k->lock);
    if (pe == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        return SL_EFULL;
    if (pe)
        return SL_ENOMEM;
    return 0;
}

int sl_kcursors_flush(sl_kcursors *k, int64_t wait_ms, sl_error *err)
{
    int ms = wait_ms < 0 ? 0 : wait_ms > 3600000 ? 3600000 : (int)wait_ms;
    rd_kafka_resp_err_t e = rd_kafka_flush(k->prod, ms);
    pthread_mutex_lock(&k->lock);
    bool failed = k->failed > k->failed_seen;
    char msg[sizeof k->fail_msg];
    memcpy(msg, k->fail_msg, sizeof msg);
    k->failed_seen = k->failed;
    pthread_mutex_unlock(&k->lock);
    if (failed)
        return sl_error_set(err, SL_EIO, "%s", msg);
    if (e == RD_KAFKA_RESP_ERR__TIMED_OUT)
        return sl_error_set(err, SL_ETIMEDOUT,
                            "cursor topic %s: %d put(s) not acknowledged within %d ms", k->topic,
                            rd_kafka_outq_len(k->prod), ms);
    return 0;
}

/* ---- looking up --------------------------------------------------------------- */

/* The watermark queries, off the callers' threads: librdkafka's
 * rd_kafka_query_watermark_offsets() does not keep to its timeout when the
 * brokers are unreachable (its requests wait for socket.timeout.ms, and
 * retry), and get() must. One query at a time serves every get() that
 * asked before it started; its client's socket.timeout.ms bounds how long
 * close waits for it. */
static void *wm_thread(void *arg)
{
    sl_kcursors *k = arg;
    int64_t *hi = calloc((size_t)k->nparts, sizeof *hi);
    pthread_mutex_lock(&k->lock);
    while (!atomic_load(&k->stop)) {
        if (k->wm_req == k->wm_done || !hi) {
            struct timespec ts = sl_clock_mono_deadline(READ_MS);
            pthread_cond_timedwait(&k->wm_wake, &k->lock, &ts);
            continue;
        }
        uint64_t req = k->wm_req;
        pthread_mutex_unlock(&k->lock);
        bool ok = true;
        for (int32_t p = 0; p < k->nparts; p++) {
            int64_t lo = 0;
            if (rd_kafka_query_watermark_offsets(k->wm, k->topic, p, &lo, &hi[p], WM_WAIT_MS)) {
                ok = false;
                hi[p] = 0;
            }
        }
        pthread_mutex_lock(&k->lock);
        memcpy(k->wm_hi, hi, (size_t)k->nparts * sizeof *hi);
        k->wm_ok = ok;
        k->wm_done = req;
        pthread_cond_broadcast(&k->moved);
    }
    pthread_mutex_unlock(&k->lock);
    free(hi);
    return NULL;
}

int sl_kcursors_get(sl_kcursors *k, const char *key, int64_t wait_ms, int64_t *offset)
{
    bool behind = false;
    pthread_mutex_lock(&k->lock);
    if (wait_ms > 0) {
        int64_t deadline = sl_clock_mono_ms() + wait_ms;
        uint64_t my = ++k->wm_req;
        pthread_cond_signal(&k->wm_wake);
        for (;;) {
            /* The ends as of a query that started after this call, then
             * the table read up to them. */
            bool caught = k->wm_done >= my;
            for (int32_t p = 0; p < k->nparts && caught; p++)
                caught = k->readpos[p] >= k->wm_hi[p];
            if (caught) {
                behind = !k->wm_ok;
                break;
            }
            if (sl_clock_mono_ms() >= deadline) {
                behind = true;
                break;
            }
            struct timespec ts = sl_clock_mono_deadline(deadline - sl_clock_mono_ms());
            pthread_cond_timedwait(&k->moved, &k->lock, &ts);
        }
    }
    kentry *e = table_find(k, key, strlen(key));
    int64_t v = e ? e->value : -1;
    pthread_mutex_unlock(&k->lock);
    if (v < 0)
        return SL_ENOENT;
    *offset = v;
    return behind ? SL_ETIMEDOUT : 0;
}

void sl_kcursors_key(char *buf, size_t cap, const char *set, const char *rule, const char *lane,
                     int32_t partition)
{
    snprintf(buf, cap, "%s/%s/%s/%d", set ? set : "", rule ? rule : "", lane ? lane : "",
             (int)partition);
}

/* ---- open and close ----------------------------------------------------------- */

static void cursors_free(sl_kcursors *k)
{
    if (k->reader) {
        for (int32_t p = 0; p < k->nparts; p++)
            if (k->reading && k->reading[p])
                rd_kafka_consume_stop(k->rkt, p);
        if (k->q)
            rd_kafka_queue_destroy(k->q);
        if (k->rkt)
            rd_kafka_topic_destroy(k->rkt);
        rd_kafka_destroy(k->reader);
    }
    if (k->prod)
        rd_kafka_destroy(k->prod);
    if (k->wm)
        rd_kafka_destroy(k->wm);
    free(k->wm_hi);
    pthread_cond_destroy(&k->wm_wake);
    for (size_t i = 0; i < k->cap; i++)
        free(k->slots[i].key);
    free(k->slots);
    free(k->readpos);
    free(k->reading);
    free(k->topic);
    pthread_cond_destroy(&k->moved);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

/* The clients' errors (brokers down, …): one line per 10 s at most for
 * the three of them; a fatal one always (the producer's: puts fail). */
static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    sl_kcursors *k = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char fe[256] = "";
        rd_kafka_fatal_error(rk, fe, sizeof fe);
        sl_slog(SL_SLOG_ERROR, "kafka", "cursor topic %s: fatal error: %s", k->topic, fe);
        return;
    }
    int64_t now = sl_clock_mono_ms();
    pthread_mutex_lock(&k->lock);
    bool log = !k->err_log_ms || now - k->err_log_ms >= LOG_EVERY_MS;
    if (log)
        k->err_log_ms = now ? now : 1;
    pthread_mutex_unlock(&k->lock);
    if (log)
        sl_slog(SL_SLOG_WARN, "kafka", "cursor topic %s: %s: %s", k->topic, rd_kafka_err2str(err),
                reason);
}

static void stop_threads(sl_kcursors *k)
{
    pthread_mutex_lock(&k->lock);
    atomic_store(&k->stop, true);
    pthread_cond_signal(&k->wm_wake);
    pthread_mutex_unlock(&k->lock);
    if (k->started)
        pthread_join(k->thread, NULL);
    if (k->wm_started)
        pthread_join(k->wm_thread, NULL);
    k->started = k->wm_started = false;
}

/* A client of the cluster with sluice's settings on top (NULL-terminated
 * name, value pairs). */
static rd_kafka_t *make_client(const sl_kafka_cluster *cl, rd_kafka_type_t type, const char *suffix,
                               const char *const *set, sl_kcursors *k, sl_error *err)
{
    rd_kafka_conf_t *conf = sl_kafka_cluster_conf(cl, suffix, err);
    if (!conf)
        return NULL;
    for (size_t i = 0; set[i]; i += 2)
        if (sl_kafka_conf_set(conf, set[i], set[i + 1], err)) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_error_cb(conf, on_error);
    if (type == RD_KAFKA_PRODUCER)
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    return sl_kafka_new(type, conf, cl->props, cl->nprops, "cursor topic", err);
}

static const char *const k_compact[] = {"cleanup.policy=compact", NULL};

int sl_kcursors_open(const sl_kafka_cluster *cl, const char *topic, sl_kcursors **out,
                     sl_error *err)
{
    *out = NULL;
    if (!cl || !topic || !topic[0])
        return sl_error_set(err, SL_EINVAL, "cursor topic: a cluster and a topic needed");
    int32_t nparts = 0;
    int rc = sl_kafka_ensure_topic(cl, topic, 1, -1, k_compact, ENSURE_WAIT_MS, &nparts, err);
    if (rc)
        return rc;
    sl_kcursors *k = calloc(1, sizeof *k);
    if (!k)
        return sl_error_set(err, SL_ENOMEM, "out of memory for cursor topic %s", topic);
    pthread_mutex_init(&k->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->moved, &ca);
    pthread_cond_init(&k->wm_wake, &ca);
    pthread_condattr_destroy(&ca);
    k->nparts = nparts;
    k->topic = strdup(topic);
    k->readpos = calloc((size_t)nparts, sizeof *k->readpos);
    k->reading = calloc((size_t)nparts, sizeof *k->reading);
    k->wm_hi = calloc((size_t)nparts, sizeof *k->wm_hi);
    sl_event_uuid7(sl_clock_now_ms(), k->writer);
    if (!k->topic || !k->readpos || !k->reading || !k->wm_hi) {
        cursors_free(k);
        return sl_error_set(err, SL_ENOMEM, "out of memory for cursor topic %s", topic);
    }
    static const char *const prod_set[] = {"acks", "all", "enable.idempotence", "true", "linger.ms",
                                           "5",    NULL};
    static const char *const read_set[] = {"enable.partition.eof", "true", "enable.auto.commit",
                                           "false", NULL};
    static const char *const wm_set[] = {"socket.timeout.ms", WM_SOCKET_MS, NULL};
    if (!(k->prod = make_client(cl, RD_KAFKA_PRODUCER, "cursors", prod_set, k, err)) ||
        !(k->reader = make_client(cl, RD_KAFKA_CONSUMER, "cursors-reader", read_set, k, err)) ||
        !(k->wm = make_client(cl, RD_KAFKA_CONSUMER, "cursors-watermarks", wm_set, k, err))) {
        cursors_free(k);
        return err && err->code ? err->code : SL_EINVAL;
    }
    k->rkt = rd_kafka_topic_new(k->reader, topic, NULL);
    k->q = rd_kafka_queue_new(k->reader);
    if (!k->rkt || !k->q) {
        cursors_free(k);
        return sl_error_set(err, SL_ENOMEM, "out of memory for cursor topic %s", topic);
    }
    for (int32_t p = 0; p < nparts; p++) {
        if (rd_kafka_consume_start_queue(k->rkt, p, RD_KAFKA_OFFSET_BEGINNING, k->q)) {
            rc = sl_error_set(err, SL_EIO, "cursor topic %s: reading partition %d: %s", topic,
                              (int)p, rd_kafka_err2str(rd_kafka_last_error()));
            cursors_free(k);
            return rc;
        }
        k->reading[p] = true;
    }
    if (pthread_create(&k->thread, NULL, reader_thread, k)) {
        cursors_free(k);
        return sl_error_set(err, SL_ENOMEM, "cursor topic %s: cannot start its thread", topic);
    }
    k->started = true;
    if (pthread_create(&k->wm_thread, NULL, wm_thread, k)) {
        stop_threads(k);
        cursors_free(k);
        return sl_error_set(err, SL_ENOMEM, "cursor topic %s: cannot start its thread", topic);
    }
    k->wm_started = true;
    *out = k;
    return 0;
}

void sl_kcursors_close(sl_kcursors *k)
{
    if (!k)
        return;
    sl_error e = {0};
    if (sl_kcursors_flush(k, CLOSE_FLUSH_MS, &e))
        sl_slog(SL_SLOG_WARN, "kafka", "%s (closing)", e.msg);
    stop_threads(k);
    cursors_free(k);
}
