/*
 * core/log/store_kafka.c — event set partitions on a Kafka topic (see
 * store_kafka.h): the topic object, its idempotent producer and poll
 * thread, the outcomes of sequence numbers, the watermark thread, and the
 * store table. Readers are in store_kafka_read.c.
 *
 * Sequence numbers: append() numbers the records of a partition on from
 * next_seq() and produces each with its seq as the message opaque (shifted
 * left one bit; a set low bit marks a buffer set's retry, whose opaque is
 * its kretry). The idempotent producer reports a partition's records in
 * order, but nothing here relies on it: each report fills its own slot in
 * the partition's ring of outcomes, and the durable end is the first slot
 * still pending.
 *
 * Threads: the poll thread serves delivery reports (rd_kafka_poll), then
 * calls on_durable for the partitions whose durable end moved, and once a
 * second produces the retry list again (and replaces the producer after a
 * fatal error); the watermark thread asks the cluster for every
 * partition's watermarks every 500 ms. Locks, outermost first: pl (append
 * read-holds it from numbering to the last produce, a replacement
 * write-holds it); a partition's nmu (the on_durable calls), then its mu
 * (its outcomes); qmu (the retry list) and rmu (which partitions the
 * shared reader client reads) are innermost: nothing is locked under them.
 */
#include "core/log/store_kafka_internal.h"

#include "core/base/clock.h"
#include "core/base/kafka_conf.h"
#include "core/base/slog.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_INFLIGHT (64ull << 20)
#define DEFAULT_DELIVERY_MS 30000
#define WATERMARK_MS 500     /* background refresh of the watermarks */
#define QUERY_MS 1000        /* a watermark query in the background */
#define OPEN_QUERY_MS 5000   /* the first, synchronous one at open */
#define RETRY_MS 1000        /* buffer sets: the retry list is produced again this often */
#define LOST_LOG_MS 60000    /* records lost are logged at most this often */
#define ERR_LOG_MS 10000     /* producer errors are logged at most this often */
#define TIME_QUERY_MS 5000   /* offset_for_time */
#define QUEUE_FULL_TRIES 100 /* produce() on a full queue: tried again every 10 ms */
#define LINGER_MAX 900000    /* librdkafka's bounds of linger.ms and batch.size */
#define BATCH_MAX 2147483647u

/* A record a buffer set failed to store for good, produced again every
 * second until it is stored. Allocated with malloc (aligned: the low bit of
 * its address is free for the opaque tag). */
struct kretry {
    kretry *next;
    int32_t p;
    int64_t ts;
    bool has_key, has_value;
    size_t key_len, value_len;
    char lane[SL_LANE_MAX + 1];
    uint8_t data[]; /* key then value */
};

static uint64_t retry_size(const kretry *r)
{
    return (uint64_t)(r->key_len + r->value_len);
}

int64_t sl_kstore_time_offset(int64_t answer, int64_t end)
{
    return answer < 0 ? end : answer;
}

/* ---- outcomes ---------------------------------------------------------------- */

static kentry *slot(kpart *kp, int64_t seq)
{
    return &kp->ring[(kp->head + (size_t)(seq - kp->lo)) & (kp->cap - 1)];
}

/* Room for n more seqs. Caller holds mu. Returns 0 or SL_ENOMEM. */
static int ring_reserve(kpart *kp, size_t n)
{
    size_t used = (size_t)(kp->hi - kp->lo);
    if (used + n <= kp->cap)
        return 0;
    size_t cap = kp->cap ? kp->cap : 1024;
    while (cap < used + n)
        cap *= 2;
    kentry *r = malloc(cap * sizeof *r);
    if (!r)
        return SL_ENOMEM;
    for (size_t i = 0; i < used; i++) /* unwrapped: lo at index 0 */
        r[i] = kp->ring[(kp->head + i) & (kp->cap - 1)];
    free(kp->ring);
    kp->ring = r;
    kp->cap = cap;
    kp->head = 0;
    return 0;
}

/* Moves dur past the seqs with an outcome and drops what the owner released
 * and is known. Caller holds mu. */
static void advance(kpart *kp)
{
    while (kp->dur < kp->hi && slot(kp, kp->dur)->state != KS_PENDING)
        kp->dur++;
    int64_t drop = kp->rel < kp->dur ? kp->rel : kp->dur;
    while (kp->lo < drop) {
        if (slot(kp, kp->lo)->state == KS_FAILED)
            kp->nfailed--;
        kp->head = (kp->head + 1) & (kp->cap - 1);
        kp->lo++;
    }
}

/* librdkafka's error for a record as an SL_E… code. */
static int map_err(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
        return SL_ETIMEDOUT;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
        return SL_ETOOBIG;
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
        return SL_ESHUTDOWN;
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        return SL_EINVAL;
    default:
        return SL_EIO;
    }
}

/* Records the outcome of seq: stored at offset (e == 0), or failed with e.
 * Caller holds mu. */
static void settle(kpart *kp, int64_t seq, int64_t offset, rd_kafka_resp_err_t e, int state)
{
    if (seq < kp->lo || seq >= kp->hi)
        return; /* not ours (cannot happen: nothing pending is dropped) */
    kentry *s = slot(kp, seq);
    if (s->state != KS_PENDING)
        return;
    s->state = state;
    s->offset = e ? -1 : offset;
    s->code = e ? map_err(e) : 0;
    if (state == KS_FAILED) {
        kp->nfailed++;
        snprintf(kp->fail_msg, sizeof kp->fail_msg, "set %s: topic %s partition %d: %s", kp->t->set,
                 kp->t->topic, (int)kp->p, rd_kafka_err2str(e));
    }
}

/* Tells the owner the durable end when it moved. The poll thread's only:
 * the owner may rely on one thread calling (store.h: "from its own
 * thread"), and the writer must not be called back inside append. */
static void notify(kpart *kp)
{
    sl_kstore_topic *t = kp->t;
    pthread_mutex_lock(&kp->nmu);
    if (atomic_load(&kp->open) && t->on_durable) {
        pthread_mutex_lock(&kp->mu);
        int64_t end = kp->dur;
        pthread_mutex_unlock(&kp->mu);
        if (end > kp->reported) {
            kp->reported = end;
            t->on_durable(t->ctx, kp->p, end);
        }
    }
    pthread_mutex_unlock(&kp->nmu);
}

/* ---- the retry list (buffer sets) --------------------------------------------------- */

/* Appends r to the retry list. Caller holds qmu. */
static void retry_push(sl_kstore_topic *t, kretry *r)
{
    r->next = NULL;
    if (t->retry_tail)
        t->retry_tail->next = r;
    else
        t->retry_head = r;
    t->retry_tail = r;
}

/* Copies a failed record onto the retry list, or counts it lost when the
 * list is full or t is closing. */
static void retry_add(sl_kstore_topic *t, int32_t p, int64_t ts, const void *key, size_t key_len,
                      const void *value, size_t value_len, const char *lane, size_t lane_len)
{
    uint64_t size = (uint64_t)((key ? key_len : 0) + (value ? value_len : 0));
    pthread_mutex_lock(&t->qmu);
    bool room = !atomic_load(&t->closing) && t->retry_bytes + size <= t->max_inflight;
    if (room)
        t->retry_bytes += size;
    pthread_mutex_unlock(&t->qmu);
    kretry *r = room ? malloc(sizeof *r + key_len + value_len) : NULL;
    if (!r) {
        if (room) {
            pthread_mutex_lock(&t->qmu);
            t->retry_bytes -= size;
            pthread_mutex_unlock(&t->qmu);
        }
        atomic_fetch_add(&t->lost, 1);
        return;
    }
    r->p = p;
    r->ts = ts;
    r->has_key = key != NULL;
    r->has_value = value != NULL;
    r->key_len = key ? key_len : 0;
    r->value_len = value ? value_len : 0;
    if (lane_len > SL_LANE_MAX)
        lane_len = SL_LANE_MAX;
    memcpy(r->lane, lane, lane_len);
    r->lane[lane_len] = '\0';
    if (r->key_len)
        memcpy(r->data, key, r->key_len);
    if (r->value_len)
        memcpy(r->data + r->key_len, value, r->value_len);
    pthread_mutex_lock(&t->qmu);
    retry_push(t, r);
    pthread_mutex_unlock(&t->qmu);
}

/* ---- producing ------------------------------------------------------------------ */

/* Produces one record (RD_KAFKA_MSG_F_COPY); a full queue is waited for up
 * to a second. Returns librdkafka's error. */
static rd_kafka_resp_err_t produce_one(sl_kstore_topic *t, int32_t p, const void *key,
                                       size_t key_len, const void *value, size_t value_len,
                                       int64_t ts, const char *lane, size_t lane_len, void *opaque)
{
    rd_kafka_vu_t vu[8];
    size_t n = 0;
    vu[n].vtype = RD_KAFKA_VTYPE_RKT;
    vu[n++].u.rkt = t->prod_rkt;
    vu[n].vtype = RD_KAFKA_VTYPE_PARTITION;
    vu[n++].u.i32 = p;
    vu[n].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vu[n++].u.i = RD_KAFKA_MSG_F_COPY;
    if (key) {
        vu[n].vtype = RD_KAFKA_VTYPE_KEY;
        vu[n].u.mem.ptr = (void *)key;
        vu[n++].u.mem.size = key_len;
    }
    if (value) {
        vu[n].vtype = RD_KAFKA_VTYPE_VALUE;
        vu[n].u.mem.ptr = (void *)value;
        vu[n++].u.mem.size = value_len;
    }
    vu[n].vtype = RD_KAFKA_VTYPE_TIMESTAMP;
    vu[n++].u.i64 = ts;
    if (lane_len) {
        vu[n].vtype = RD_KAFKA_VTYPE_HEADER;
        vu[n].u.header.name = "lane";
        vu[n].u.header.val = lane;
        vu[n++].u.header.size = (ssize_t)lane_len;
    }
    vu[n].vtype = RD_KAFKA_VTYPE_OPAQUE;
    vu[n++].u.ptr = opaque;
    for (int tries = 0;; tries++) {
        rd_kafka_error_t *e = rd_kafka_produceva(t->prod, vu, n);
        if (!e)
            return RD_KAFKA_RESP_ERR_NO_ERROR;
        rd_kafka_resp_err_t code = rd_kafka_error_code(e);
        rd_kafka_error_destroy(e);
        if (code != RD_KAFKA_RESP_ERR__QUEUE_FULL || tries >= QUEUE_FULL_TRIES)
            return code;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
}

/* The lane header of a message: its value and length (0 when none). */
static const char *msg_lane(const rd_kafka_message_t *m, size_t *len)
{
    rd_kafka_headers_t *h = NULL;
    const void *v = NULL;
    size_t n = 0;
    *len = 0;
    if (rd_kafka_message_headers(m, &h) || !h || rd_kafka_header_get_last(h, "lane", &v, &n) || !v)
        return "";
    *len = n;
    return v;
}

static void retry_report(sl_kstore_topic *t, kretry *r, const rd_kafka_message_t *m)
{
    if (!m->err) {
        atomic_fetch_add(&t->delivered, 1);
        kpart *kp = &t->parts[r->p];
        int64_t end = m->offset + 1;
        int64_t cur = atomic_load(&kp->delivered_end);
        while (end > cur && !atomic_compare_exchange_weak(&kp->delivered_end, &cur, end))
            ;
        pthread_mutex_lock(&t->qmu);
        t->retry_bytes -= retry_size(r);
        pthread_mutex_unlock(&t->qmu);
        free(r);
        return;
    }
    atomic_fetch_add(&t->failed, 1);
    pthread_mutex_lock(&t->qmu);
    if (atomic_load(&t->closing)) {
        t->retry_bytes -= retry_size(r);
        pthread_mutex_unlock(&t->qmu);
        atomic_fetch_add(&t->lost, 1);
        free(r);
        return;
    }
    retry_push(t, r);
    pthread_mutex_unlock(&t->qmu);
}

/* Delivery report (the poll thread, or close's flush). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    sl_kstore_topic *t = opaque;
    uintptr_t tag = (uintptr_t)m->_private;
    if (tag & 1) {
        retry_report(t, (kretry *)(tag & ~(uintptr_t)1), m);
        return;
    }
    int64_t seq = (int64_t)(tag >> 1);
    if (m->partition < 0 || m->partition >= t->nparts)
        return;
    kpart *kp = &t->parts[m->partition];
    rd_kafka_resp_err_t e = m->err;
    if ((e == RD_KAFKA_RESP_ERR__PURGE_QUEUE || e == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) &&
        atomic_load(&t->replacing))
        e = RD_KAFKA_RESP_ERR__FATAL; /* not a shutdown: the producer died */
    atomic_fetch_sub(&t->inflight_bytes, (uint64_t)(m->len + m->key_len));
    atomic_fetch_sub(&t->inflight_records, 1);
    bool retry = e && !t->durable;
    if (e) {
        atomic_fetch_add(&t->failed, 1);
    } else {
        atomic_fetch_add(&t->delivered, 1);
        int64_t end = m->offset + 1, cur = atomic_load(&kp->delivered_end);
        while (end > cur && !atomic_compare_exchange_weak(&kp->delivered_end, &cur, end))
            ;
    }
    pthread_mutex_lock(&kp->mu);
    /* A failed message's report has no timestamp: its pending slot has. */
    int64_t ts = seq >= kp->lo && seq < kp->hi ? slot(kp, seq)->offset : -1;
    settle(kp, seq, m->offset, e, e ? (retry ? KS_RETRYING : KS_FAILED) : KS_STORED);
    advance(kp);
    pthread_mutex_unlock(&kp->mu);
    if (retry) {
        /* Answered already: copied for another try, not a failure. */
        size_t lane_len;
        const char *lane = msg_lane(m, &lane_len);
        retry_add(t, kp->p, ts, m->key, m->key_len, m->payload, m->len, lane, lane_len);
    }
    atomic_store(&kp->dirty, true);
}

static void on_error(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
    sl_kstore_topic *t = opaque;
    if (e == RD_KAFKA_RESP_ERR__FATAL) {
        char fe[256] = "";
        rd_kafka_fatal_error(rk, fe, sizeof fe);
        sl_slog(SL_SLOG_ERROR, "kafka",
                "set %s: topic %s: fatal producer error: %s; making a new producer", t->set,
                t->topic, fe);
        atomic_store(&t->fatal, true);
        return;
    }
    int64_t now = sl_clock_mono_ms(), last = atomic_load(&t->err_log_ms);
    if (last && now - last < ERR_LOG_MS)
        return;
    atomic_store(&t->err_log_ms, now);
    sl_slog(SL_SLOG_WARN, "kafka", "set %s: topic %s: producer: %s: %s", t->set, t->topic,
            rd_kafka_err2name((rd_kafka_resp_err_t)e), reason);
}

/* Produces the retry list again (the poll thread). */
static void retry_all(sl_kstore_topic *t)
{
    pthread_mutex_lock(&t->qmu);
    kretry *r = t->retry_head;
    t->retry_head = t->retry_tail = NULL;
    pthread_mutex_unlock(&t->qmu);
    while (r) {
        kretry *next = r->next;
        rd_kafka_resp_err_t e =
            produce_one(t, r->p, r->has_key ? r->data : NULL, r->key_len,
                        r->has_value ? r->data + r->key_len : NULL, r->value_len, r->ts, r->lane,
                        strlen(r->lane), (void *)((uintptr_t)r | 1));
        if (e && e != RD_KAFKA_RESP_ERR__QUEUE_FULL && e != RD_KAFKA_RESP_ERR__FATAL) {
            /* librdkafka itself refuses it (larger than message.max.bytes):
             * no later round can do better. */
            pthread_mutex_lock(&t->qmu);
            t->retry_bytes -= retry_size(r);
            pthread_mutex_unlock(&t->qmu);
            atomic_fetch_add(&t->lost, 1);
            free(r);
            r = next;
            continue;
        }
        if (e) { /* the rest waits for the next round */
            kretry *last = r;
            while (last->next)
                last = last->next;
            pthread_mutex_lock(&t->qmu); /* before what failed meanwhile */
            last->next = t->retry_head;
            t->retry_head = r;
            if (!t->retry_tail)
                t->retry_tail = last;
            pthread_mutex_unlock(&t->qmu);
            return;
        }
        atomic_fetch_add(&t->retried, 1);
        r = next;
    }
}

/* Logs the buffer set's records lost since the last time, at most once a
 * minute unless closing (why: what lost them). */
static void log_lost(sl_kstore_topic *t, bool closing)
{
    bool now = closing;
    uint64_t lost = atomic_load(&t->lost), logged = atomic_load(&t->lost_logged);
    int64_t ms = sl_clock_mono_ms();
    if (lost == logged || (!now && t->lost_log_ms && ms - t->lost_log_ms < LOST_LOG_MS))
        return;
    t->lost_log_ms = ms;
    atomic_store(&t->lost_logged, lost);
    sl_slog(SL_SLOG_ERROR, "kafka",
            "set %s: topic %s: %" PRIu64 " records lost (%" PRIu64 " in all): %s", t->set, t->topic,
            lost - logged, lost,
            closing ? "not stored when the set closed"
                    : "refused for good (larger than message.max.bytes) or with the retry "
                      "list full (max_inflight_bytes)");
}

static rd_kafka_t *new_producer(sl_kstore_topic *t, rd_kafka_topic_t **rkt, sl_error *err);

/* After a fatal error (idempotence lost its sequence: librdkafka will not
 * produce with that producer again): purges what it holds, whose reports
 * fail those records (durable) or put them on the retry list (buffer), and
 * makes a new producer. The poll thread, with pl write-held so that no
 * append produces meanwhile. */
static void replace_producer(sl_kstore_topic *t)
{
    int64_t now = sl_clock_mono_ms();
    if (now < t->replace_at_ms)
        return;
    sl_error err = {0};
    rd_kafka_topic_t *rkt = NULL;
    rd_kafka_t *rk = new_producer(t, &rkt, &err);
    if (!rk) {
        t->replace_at_ms = now + RETRY_MS;
        sl_slog(SL_SLOG_ERROR, "kafka", "set %s: topic %s: cannot make a new producer: %s", t->set,
                t->topic, err.msg);
        return;
    }
    pthread_rwlock_wrlock(&t->pl);
    atomic_store(&t->replacing, true);
    rd_kafka_t *old = t->prod;
    rd_kafka_purge(old, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    for (int i = 0; i < 100 && rd_kafka_outq_len(old) > 0; i++)
        rd_kafka_poll(old, 100);
    /* Records whose reports did not come (none should be left) fail here:
     * a publisher must never wait for ever. */
    uint64_t left = atomic_exchange(&t->inflight_records, 0);
    atomic_store(&t->inflight_bytes, 0);
    for (int32_t p = 0; left && p < t->nparts; p++) {
        kpart *kp = &t->parts[p];
        pthread_mutex_lock(&kp->mu);
        for (int64_t s = kp->dur; s < kp->hi; s++) {
            if (!t->durable && slot(kp, s)->state == KS_PENDING)
                atomic_fetch_add(&t->lost, 1); /* its bytes went with the old producer */
            settle(kp, s, -1, RD_KAFKA_RESP_ERR__FATAL, t->durable ? KS_FAILED : KS_RETRYING);
        }
        advance(kp);
        pthread_mutex_unlock(&kp->mu);
        atomic_store(&kp->dirty, true);
    }
    rd_kafka_topic_destroy(t->prod_rkt);
    rd_kafka_destroy(old);
    t->prod = rk;
    t->prod_rkt = rkt;
    atomic_store(&t->fatal, false);
    atomic_store(&t->replacing, false);
    pthread_rwlock_unlock(&t->pl);
    sl_slog(SL_SLOG_WARN, "kafka", "set %s: topic %s: a new producer replaces the failed one%s",
            t->set, t->topic, left ? " (some records had no report: failed)" : "");
}

static void *poll_main(void *arg)
{
    sl_kstore_topic *t = arg;
    int64_t retry_at = sl_clock_mono_ms() + RETRY_MS;
    while (!atomic_load(&t->stop)) {
        rd_kafka_poll(t->prod, 100);
        if (atomic_load(&t->fatal))
            replace_producer(t);
        for (int32_t p = 0; p < t->nparts; p++)
            if (atomic_exchange(&t->parts[p].dirty, false))
                notify(&t->parts[p]);
        int64_t now = sl_clock_mono_ms();
        if (now >= retry_at) {
            retry_all(t);
            log_lost(t, false);
            retry_at = now + RETRY_MS;
        }
    }
    return NULL;
}

/* ---- watermarks --------------------------------------------------------------------- */

void sl__kstore_watermarks(kpart *kp, int64_t lo, int64_t hi)
{
    if (lo >= 0)
        atomic_store(&kp->wm_lo, lo);
    int64_t cur = atomic_load(&kp->wm_hi);
    while (hi > cur && !atomic_compare_exchange_weak(&kp->wm_hi, &cur, hi))
        ;
}

/* Asks the cluster for every partition's first (which -2) or next (-1)
 * offset: ListOffsets, one request per leader. Not
 * rd_kafka_query_watermark_offsets(): before librdkafka 2.3 it waits for
 * ever when a partition's leader is down (librdkafka #2588), while
 * rd_kafka_offsets_for_times() keeps to its timeout. Returns false when the
 * cluster did not answer. */
static bool list_offsets(sl_kstore_topic *t, int64_t which, int timeout_ms)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(t->nparts);
    if (!l)
        return false;
    for (int32_t p = 0; p < t->nparts; p++)
        rd_kafka_topic_partition_list_add(l, t->topic, p)->offset = which;
    bool ok = rd_kafka_offsets_for_times(t->cons, l, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int i = 0; ok && i < l->cnt; i++) {
        const rd_kafka_topic_partition_t *e = &l->elems[i];
        if (e->err || e->offset < 0 || e->partition < 0 || e->partition >= t->nparts)
            continue;
        if (which == RD_KAFKA_OFFSET_BEGINNING)
            sl__kstore_watermarks(&t->parts[e->partition], e->offset, -1);
        else
            sl__kstore_watermarks(&t->parts[e->partition], -1, e->offset);
    }
    rd_kafka_topic_partition_list_destroy(l);
    return ok;
}

static void refresh_watermarks(sl_kstore_topic *t, int timeout_ms)
{
    if (list_offsets(t, RD_KAFKA_OFFSET_END, timeout_ms))
        list_offsets(t, RD_KAFKA_OFFSET_BEGINNING, timeout_ms);
}

static void *wm_main(void *arg)
{
    sl_kstore_topic *t = arg;
    while (!atomic_load(&t->stop)) {
        int64_t next = sl_clock_mono_ms() + WATERMARK_MS;
        refresh_watermarks(t, QUERY_MS);
        rd_kafka_poll(t->cons, 0); /* the reader handle's errors and logs */
        int64_t left = next - sl_clock_mono_ms();
        if (left <= 0)
            continue;
        struct timespec dl = sl_clock_mono_deadline(left);
        pthread_mutex_lock(&t->smu);
        if (!atomic_load(&t->stop))
            pthread_cond_timedwait(&t->scond, &t->smu, &dl);
        pthread_mutex_unlock(&t->smu);
    }
    return NULL;
}

/* ---- the topic ---------------------------------------------------------------- */

static int producer_conf(sl_kstore_topic *t, const sl_kstore_options *o, rd_kafka_conf_t *conf,
                         sl_error *err)
{
    long long linger = o->linger_ms > LINGER_MAX ? LINGER_MAX : (long long)o->linger_ms;
    /* librdkafka refuses a message timeout that is not above the linger. */
    if (t->durable && linger >= t->delivery_timeout_ms)
        linger = t->delivery_timeout_ms - 1;
    long long batch = o->batch_bytes > BATCH_MAX ? BATCH_MAX : (long long)o->batch_bytes;
    /* Room for every byte max_inflight lets in, twice (the retries of a
     * buffer set come on top), so that QUEUE_FULL never happens below it. */
    long long kbytes = (long long)(t->max_inflight / 1024) * 2 + 4096;
    if (kbytes > INT_MAX)
        kbytes = INT_MAX;
    int rc = sl_kafka_conf_set(conf, "enable.idempotence", "true", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "acks", "all", err);
    if (!rc) /* idempotence keeps order across retries with at most 5 in flight */
        rc = sl_kafka_conf_set(conf, "max.in.flight.requests.per.connection", "5", err);
    if (!rc) /* every message names its partition; this is for anything else */
        rc = sl_kafka_conf_set(conf, "partitioner", "murmur2_random", err);
    if (!rc)
        rc = sl_kafka_conf_num(conf, "linger.ms", linger, err);
    if (!rc && batch > 0)
        rc = sl_kafka_conf_num(conf, "batch.size", batch, err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "compression.codec", o->compression == SL_CODEC_ZSTD ? "zstd" : "none",
                      err);
    if (!rc)
        rc = sl_kafka_conf_num(conf, "message.timeout.ms", t->durable ? t->delivery_timeout_ms : 0, err);
    if (!rc)
        rc = sl_kafka_conf_num(conf, "queue.buffering.max.kbytes", kbytes, err);
    if (!rc && sl_kafka_conf_num(conf, "queue.buffering.max.messages", INT_MAX, NULL))
        rc = sl_kafka_conf_num(conf, "queue.buffering.max.messages", 10000000, err);
    if (rc)
        return rc;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_opaque(conf, t);
    return 0;
}

static int reader_conf(rd_kafka_conf_t *conf, sl_error *err)
{
    /* No group: readers fetch partitions at offsets they choose and commit
     * nothing (cursors are the set groups' business, core/bus/kgroup.h). */
    int rc = sl_kafka_conf_set(conf, "enable.partition.eof", "true", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "auto.offset.reset", "earliest", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "enable.auto.commit", "false", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "enable.auto.offset.store", "false", err);
    if (!rc) /* a caught-up reader hears of new records within this */
        rc = sl_kafka_conf_set(conf, "fetch.wait.max.ms", "100", err);
    if (!rc) /* prefetched per partition and reader: 8 MiB, not the 64 MiB default */
        rc = sl_kafka_conf_set(conf, "queued.max.messages.kbytes", "8192", err);
    return rc;
}

/* A producer from t's template, and its topic object. props: the cluster's
 * properties, for hiding secrets in librdkafka's messages (NULL later:
 * the template was accepted once). Returns it, or NULL with err. */
static rd_kafka_t *new_producer_props(sl_kstore_topic *t, rd_kafka_topic_t **rkt,
                                      char *const *props, size_t nprops, sl_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_dup(t->prod_conf);
    if (!conf) {
        sl_error_set(err, SL_ENOMEM, "out of memory for set %s", t->set);
        return NULL;
    }
    char who[300];
    snprintf(who, sizeof who, "set %s: producer", t->set);
    rd_kafka_t *rk = sl_kafka_new(RD_KAFKA_PRODUCER, conf, props, nprops, who, err);
    if (!rk)
        return NULL;
    if (!(*rkt = rd_kafka_topic_new(rk, t->topic, NULL))) {
        sl_error_set(err, SL_ENOMEM, "set %s: topic %s: %s", t->set, t->topic,
                     rd_kafka_err2str(rd_kafka_last_error()));
        rd_kafka_destroy(rk);
        return NULL;
    }
    return rk;
}

static rd_kafka_t *new_producer(sl_kstore_topic *t, rd_kafka_topic_t **rkt, sl_error *err)
{
    return new_producer_props(t, rkt, NULL, 0, err);
}

static void topic_free(sl_kstore_topic *t)
{
    if (t->poller_on || t->wm_on) {
        atomic_store(&t->stop, true);
        pthread_mutex_lock(&t->smu);
        pthread_cond_broadcast(&t->scond);
        pthread_mutex_unlock(&t->smu);
        if (t->poller_on)
            pthread_join(t->poller, NULL);
        if (t->wm_on)
            pthread_join(t->wm, NULL);
    }
    if (t->prod) {
        retry_all(t); /* one last chance for what the cluster refused */
        rd_kafka_flush(t->prod, t->delivery_timeout_ms);
        atomic_store(&t->closing, true); /* what fails from here on is lost */
        uint64_t left = atomic_load(&t->inflight_records);
        if (left && t->durable) /* a buffer set's count as lost, below */
            sl_slog(SL_SLOG_ERROR, "kafka",
                    "set %s: topic %s: %" PRIu64 " records not acknowledged within %d ms at "
                    "close: lost",
                    t->set, t->topic, left, t->delivery_timeout_ms);
        if (left) {
            rd_kafka_purge(t->prod, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
            rd_kafka_flush(t->prod, 1000);
        }
        pthread_mutex_lock(&t->qmu);
        for (kretry *r = t->retry_head, *next; r; r = next) {
            next = r->next;
            atomic_fetch_add(&t->lost, 1);
            free(r);
        }
        t->retry_head = t->retry_tail = NULL;
        pthread_mutex_unlock(&t->qmu);
        log_lost(t, true);
        if (t->prod_rkt)
            rd_kafka_topic_destroy(t->prod_rkt);
        rd_kafka_destroy(t->prod);
    }
    if (t->cons)
        rd_kafka_destroy(t->cons);
    if (t->cons_conf)
        rd_kafka_conf_destroy(t->cons_conf);
    if (t->prod_conf)
        rd_kafka_conf_destroy(t->prod_conf);
    pthread_rwlock_destroy(&t->pl);
    for (int32_t p = 0; p < t->nparts; p++) {
        kpart *kp = &t->parts[p];
        free(kp->ring);
        free(kp->recs);
        sl_batch_reader_free(&kp->br);
        pthread_mutex_destroy(&kp->mu);
        pthread_mutex_destroy(&kp->nmu);
        pthread_mutex_destroy(&kp->dmu);
    }
    pthread_mutex_destroy(&t->smu);
    pthread_cond_destroy(&t->scond);
    pthread_mutex_destroy(&t->rmu);
    pthread_mutex_destroy(&t->qmu);
    free(t->set);
    free(t->topic);
    free(t);
}

void sl__kstore_ref(sl_kstore_topic *t)
{
    atomic_fetch_add(&t->refs, 1);
}

void sl__kstore_unref(sl_kstore_topic *t)
{
    if (atomic_fetch_sub(&t->refs, 1) == 1)
        topic_free(t);
}

static sl_kstore_topic *topic_alloc(const sl_kafka_cluster *cl, const sl_kstore_options *o)
{
    sl_kstore_topic *t = calloc(1, sizeof *t + (size_t)o->partitions * sizeof(kpart));
    if (!t)
        return NULL;
    t->set = strdup(o->set ? o->set : "?");
    t->topic = strdup(o->topic);
    atomic_init(&t->refs, 1);
    t->nparts = o->partitions;
    t->durable = o->durable;
    t->max_inflight = o->max_inflight_bytes ? o->max_inflight_bytes : DEFAULT_INFLIGHT;
    t->delivery_timeout_ms =
        cl->delivery_timeout_ms > 0 ? cl->delivery_timeout_ms : DEFAULT_DELIVERY_MS;
    t->on_durable = o->on_durable;
    t->on_data = o->on_data;
    t->ctx = o->ctx;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->scond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_rwlock_init(&t->pl, NULL);
    pthread_mutex_init(&t->smu, NULL);
    pthread_mutex_init(&t->rmu, NULL);
    pthread_mutex_init(&t->qmu, NULL);
    for (int32_t p = 0; p < t->nparts; p++) {
        kpart *kp = &t->parts[p];
        kp->t = t;
        kp->p = p;
        pthread_mutex_init(&kp->mu, NULL);
        pthread_mutex_init(&kp->nmu, NULL);
        pthread_mutex_init(&kp->dmu, NULL);
        sl_batch_reader_init(&kp->br);
    }
    if (!t->set || !t->topic) {
        topic_free(t);
        return NULL;
    }
    return t;
}

int sl_kstore_open(const sl_kafka_cluster *cl, const sl_kstore_options *o, sl_kstore_topic **out,
                   sl_error *err)
{
    *out = NULL;
    if (!o->topic || !o->topic[0] || o->partitions < 1)
        return sl_error_set(err, SL_EINVAL,
                            "set %s: a Kafka-backed set needs a topic and "
                            "at least one partition",
                            o->set ? o->set : "?");
    int32_t actual = 0;
    int rc = sl_kafka_ensure_topic(cl, o->topic, o->partitions, o->replication, NULL, 10000,
                                   &actual, err);
    if (rc)
        return rc;
    if (actual < o->partitions)
        return sl_error_set(err, SL_EINVAL,
                            "set %s: topic %s has %d partitions, the set "
                            "declares %d",
                            o->set ? o->set : "?", o->topic, (int)actual, (int)o->partitions);
    sl_kstore_topic *t = topic_alloc(cl, o);
    if (!t)
        return sl_error_set(err, SL_ENOMEM, "out of memory for set %s", o->set ? o->set : "?");
    t->actual = actual;
    char suffix[300];
    snprintf(suffix, sizeof suffix, "%s-producer", t->set);
    rd_kafka_conf_t *conf = sl_kafka_cluster_conf(cl, suffix, err);
    if (!conf || (rc = producer_conf(t, o, conf, err))) {
        rc = conf ? rc : SL_EINVAL;
        if (conf)
            rd_kafka_conf_destroy(conf);
        goto fail;
    }
    t->prod_conf = conf; /* kept: a replacement after a fatal error is made from it */
    if (!(t->prod = new_producer_props(t, &t->prod_rkt, cl->props, cl->nprops, err))) {
        rc = err && err->code ? err->code : SL_EINVAL;
        goto fail;
    }
    snprintf(suffix, sizeof suffix, "%s-reader", t->set);
    if (!(conf = sl_kafka_cluster_conf(cl, suffix, err)) || (rc = reader_conf(conf, err))) {
        rc = conf ? rc : SL_EINVAL;
        if (conf)
            rd_kafka_conf_destroy(conf);
        goto fail;
    }
    if (!(t->cons_conf = rd_kafka_conf_dup(conf))) {
        rd_kafka_conf_destroy(conf);
        rc = sl_error_set(err, SL_ENOMEM, "out of memory for set %s", t->set);
        goto fail;
    }
    char who[300];
    snprintf(who, sizeof who, "set %s: reader", t->set);
    if (!(t->cons = sl_kafka_new(RD_KAFKA_CONSUMER, conf, cl->props, cl->nprops, who, err))) {
        rc = SL_EINVAL;
        goto fail;
    }
    /* The watermarks once, before anyone asks: the end offset a set shows
     * right after open is the topic's, not 0. */
    refresh_watermarks(t, OPEN_QUERY_MS);
    if (pthread_create(&t->poller, NULL, poll_main, t)) {
        rc = sl_error_set(err, SL_ENOMEM, "set %s: cannot start the producer's thread", t->set);
        goto fail;
    }
    t->poller_on = true;
    if (pthread_create(&t->wm, NULL, wm_main, t)) {
        rc = sl_error_set(err, SL_ENOMEM, "set %s: cannot start the watermark thread", t->set);
        goto fail;
    }
    t->wm_on = true;
    *out = t;
    return 0;
fail:
    topic_free(t);
    return rc ? rc : SL_EINVAL;
}

void sl_kstore_release(sl_kstore_topic *t)
{
    if (t)
        sl__kstore_unref(t);
}

int32_t sl_kstore_topic_partitions(const sl_kstore_topic *t)
{
    return t->actual;
}

const char *sl_kstore_topic_name(const sl_kstore_topic *t)
{
    return t->topic;
}

void sl_kstore_stats_get(const sl_kstore_topic *t, sl_kstore_stats *out)
{
    sl_kstore_topic *m = (sl_kstore_topic *)t; /* atomics are read through a non-const */
    out->produced = atomic_load(&m->produced);
    out->delivered = atomic_load(&m->delivered);
    out->failed = atomic_load(&m->failed);
    out->retried = atomic_load(&m->retried);
    out->inflight_bytes = atomic_load(&m->inflight_bytes);
    out->fetched_records = atomic_load(&m->fetched_records);
    out->fetched_bytes = atomic_load(&m->fetched_bytes);
}

/* ---- the store table -------------------------------------------------------------- */

/* Marks [from, to) of the records just reserved failed with e (a produce
 * call refused them) or, for a buffer set, copies them for retrying. */
static void refuse(kpart *kp, const sl_batch *b, int64_t base, int32_t from, int32_t to,
                   rd_kafka_resp_err_t e)
{
    sl_kstore_topic *t = kp->t;
    size_t lane_len = strlen(b->lane ? b->lane : "");
    uint64_t bytes = 0;
    for (int32_t i = from; i < to; i++) {
        const sl_record *r = &kp->recs[i];
        bytes += (r->key ? r->key_len : 0) + (r->value ? r->value_len : 0);
        if (!t->durable)
            retry_add(t, kp->p, r->timestamp, r->key, r->key_len, r->value, r->value_len,
                      b->lane ? b->lane : "", lane_len);
    }
    atomic_fetch_sub(&t->inflight_bytes, bytes);
    atomic_fetch_sub(&t->inflight_records, (uint64_t)(to - from));
    atomic_fetch_add(&t->failed, (uint64_t)(to - from));
    pthread_mutex_lock(&kp->mu);
    for (int32_t i = from; i < to; i++)
        settle(kp, base + i, -1, e, t->durable ? KS_FAILED : KS_RETRYING);
    advance(kp);
    pthread_mutex_unlock(&kp->mu);
    atomic_store(&kp->dirty, true); /* on_durable comes from the poll thread only */
}

static int kappend(void *impl, sl_batch *b, int64_t *base_offset, sl_error *err)
{
    kpart *kp = impl;
    sl_kstore_topic *t = kp->t;
    if (!atomic_load(&kp->open))
        return sl_error_set(err, SL_ECLOSED, "set %s: partition %d is closed", t->set, (int)kp->p);
    sl_batch_info info;
    int rc = sl_batch_check(b->data, b->len, &info, err);
    if (!rc)
        rc = sl_batch_reader_open(&kp->br, b->data, b->len, err);
    if (rc)
        return rc;
    size_t n = 0;
    uint64_t bytes = 0;
    for (;;) {
        if (n == kp->recs_cap) {
            size_t cap = kp->recs_cap ? kp->recs_cap * 2 : 256;
            sl_record *r = realloc(kp->recs, cap * sizeof *r);
            if (!r)
                return sl_error_set(err, SL_ENOMEM, "out of memory for a batch");
            kp->recs = r;
            kp->recs_cap = cap;
        }
        rc = sl_batch_reader_next(&kp->br, &kp->recs[n], err);
        if (rc == SL_EEOF)
            break;
        if (rc)
            return rc;
        bytes += (kp->recs[n].key ? kp->recs[n].key_len : 0) +
                 (kp->recs[n].value ? kp->recs[n].value_len : 0);
        n++;
    }
    pthread_mutex_lock(&kp->mu);
    int64_t base = kp->hi;
    pthread_mutex_unlock(&kp->mu);
    if (n == 0) {
        *base_offset = base;
        return 0;
    }
    /* Back-pressure, never a drop. A batch larger than the whole allowance
     * passes when nothing is in flight, or it would never pass. */
    uint64_t inflight = atomic_load(&t->inflight_bytes);
    if (inflight > 0 && inflight + bytes > t->max_inflight)
        return sl_error_set(err, SL_EFULL,
                            "set %s: %" PRIu64 " bytes not acknowledged by "
                            "the cluster yet (max_inflight_bytes %" PRIu64 ")",
                            t->set, inflight, t->max_inflight);
    /* Read-held from the numbering to the last produce: a replacement of
     * the producer (write-held) sees these records all pending in the old
     * producer or none. */
    pthread_rwlock_rdlock(&t->pl);
    pthread_mutex_lock(&kp->mu);
    if (ring_reserve(kp, n)) {
        pthread_mutex_unlock(&kp->mu);
        pthread_rwlock_unlock(&t->pl);
        return sl_error_set(err, SL_ENOMEM, "out of memory for %zu outcomes", n);
    }
    /* Pending before the first report can come; a pending slot's offset
     * holds the record's timestamp (for a retry). */
    for (size_t i = 0; i < n; i++)
        *slot(kp, kp->hi + (int64_t)i) =
            (kentry){.offset = kp->recs[i].timestamp, .state = KS_PENDING};
    kp->hi += (int64_t)n;
    pthread_mutex_unlock(&kp->mu);
    atomic_fetch_add(&t->inflight_bytes, bytes);
    atomic_fetch_add(&t->inflight_records, n);
    atomic_fetch_add(&t->produced, n);
    const char *lane = b->lane ? b->lane : "";
    size_t lane_len = strlen(lane), refused = 0;
    rd_kafka_resp_err_t first = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (size_t i = 0; i < n; i++) {
        const sl_record *r = &kp->recs[i];
        rd_kafka_resp_err_t e =
            produce_one(t, kp->p, r->key, r->key_len, r->value, r->value_len, r->timestamp, lane,
                        lane_len, (void *)(uintptr_t)((uint64_t)(base + (int64_t)i) << 1));
        if (e) { /* this record's outcome; the next may well pass (e.g. a smaller one) */
            refuse(kp, b, base, (int32_t)i, (int32_t)i + 1, e);
            if (!refused++)
                first = e;
        }
    }
    pthread_rwlock_unlock(&t->pl);
    if (refused)
        sl_slog(t->durable ? SL_SLOG_ERROR : SL_SLOG_WARN, "kafka",
                "set %s: topic %s partition %d: %zu of %zu records not produced: %s%s", t->set,
                t->topic, (int)kp->p, refused, n, rd_kafka_err2str(first),
                t->durable ? "" : " (retried)");
    *base_offset = base;
    return 0;
}

static int ksync(void *impl, sl_error *err)
{
    (void)impl;
    (void)err;
    return 0; /* remote: durability comes with the delivery reports */
}

static int64_t kend_offset(void *impl);

static int koffset_for_time(void *impl, int64_t ts_ms, int64_t *offset, sl_error *err)
{
    kpart *kp = impl;
    sl_kstore_topic *t = kp->t;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    if (!l)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    rd_kafka_topic_partition_list_add(l, t->topic, kp->p)->offset = ts_ms;
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(t->cons, l, TIME_QUERY_MS);
    if (!e)
        e = l->elems[0].err;
    int64_t answer = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        return sl_error_set(err, e == RD_KAFKA_RESP_ERR__TIMED_OUT ? SL_ETIMEDOUT : SL_EIO,
                            "set %s: topic %s partition %d: offset for time: %s", t->set, t->topic,
                            (int)kp->p, rd_kafka_err2str(e));
    *offset = sl_kstore_time_offset(answer, kend_offset(impl));
    return 0;
}

static int64_t kstart_offset(void *impl)
{
    kpart *kp = impl;
    int64_t lo = atomic_load(&kp->wm_lo);
    return lo > 0 ? lo : 0;
}

static int64_t kend_offset(void *impl)
{
    kpart *kp = impl;
    int64_t hi = atomic_load(&kp->wm_hi), d = atomic_load(&kp->delivered_end);
    hi = hi > d ? hi : d;
    return hi > 0 ? hi : 0;
}

static int kretain(void *impl, int64_t now_ms, sl_error *err)
{
    (void)impl;
    (void)now_ms;
    (void)err;
    return 0; /* the topic's retention */
}

static void kstat(void *impl, uint64_t *bytes, uint64_t *segments)
{
    (void)impl;
    *bytes = 0;
    *segments = 0;
}

static void kclose(void *impl)
{
    kpart *kp = impl;
    pthread_mutex_lock(&kp->dmu);
    kp->data_open = false;
    pthread_mutex_unlock(&kp->dmu);
    pthread_mutex_lock(&kp->nmu); /* no on_durable after this */
    atomic_store(&kp->open, false);
    pthread_mutex_unlock(&kp->nmu);
    sl__kstore_unref(kp->t);
}

static int64_t knext_seq(void *impl)
{
    kpart *kp = impl;
    pthread_mutex_lock(&kp->mu);
    int64_t hi = kp->hi;
    pthread_mutex_unlock(&kp->mu);
    return hi;
}

static int koutcome(void *impl, int64_t from, int64_t to, sl_error *err)
{
    kpart *kp = impl;
    int rc = 0;
    pthread_mutex_lock(&kp->mu);
    if (from > to || from < kp->lo || to > kp->dur) {
        rc = sl_error_set(err, SL_ERANGE,
                          "set %s partition %d: outcomes of [%" PRId64 ", %" PRId64
                          ") not known (known: [%" PRId64 ", %" PRId64 "))",
                          kp->t->set, (int)kp->p, from, to, kp->lo, kp->dur);
    } else if (kp->nfailed) {
        for (int64_t s = from; s < to; s++) {
            const kentry *e = slot(kp, s);
            if (e->state == KS_FAILED) {
                rc = sl_error_set(err, e->code, "%s", kp->fail_msg);
                break;
            }
        }
    }
    pthread_mutex_unlock(&kp->mu);
    return rc;
}

static int koffset_of(void *impl, int64_t seq, int64_t *offset, sl_error *err)
{
    kpart *kp = impl;
    int rc;
    pthread_mutex_lock(&kp->mu);
    const kentry *e = seq >= kp->lo && seq < kp->hi ? slot(kp, seq) : NULL;
    if (e && e->state == KS_STORED) {
        *offset = e->offset;
        rc = 0;
    } else if (e && e->state == KS_FAILED) {
        rc = sl_error_set(err, e->code, "%s", kp->fail_msg);
    } else {
        rc =
            sl_error_set(err, SL_ERANGE, "set %s partition %d: no offset known for record %" PRId64,
                         kp->t->set, (int)kp->p, seq);
    }
    pthread_mutex_unlock(&kp->mu);
    return rc;
}

static void krelease(void *impl, int64_t seq)
{
    kpart *kp = impl;
    pthread_mutex_lock(&kp->mu);
    if (seq > kp->rel)
        kp->rel = seq;
    advance(kp);
    pthread_mutex_unlock(&kp->mu);
}

const sl_store_ops sl_store_kafka_ops = {
    .abi_version = SL_STORE_ABI_VERSION,
    .name = "kafka",
    .append = kappend,
    .sync = ksync,
    .reader_open = sl__kstore_reader_open,
    .reader_next = sl__kstore_reader_next,
    .reader_position = sl__kstore_reader_position,
    .reader_close = sl__kstore_reader_close,
    .offset_for_time = koffset_for_time,
    .start_offset = kstart_offset,
    .end_offset = kend_offset,
    .retain = kretain,
    .stat = kstat,
    .close = kclose,
    .remote = true,
    .next_seq = knext_seq,
    .outcome = koutcome,
    .offset_of = koffset_of,
    .release = krelease,
};

int sl_kstore_partition(sl_kstore_topic *t, int32_t p, sl_store *st, sl_error *err)
{
    if (p < 0 || p >= t->nparts)
        return sl_error_set(err, SL_EINVAL, "set %s: no partition %d (it has %d)", t->set, (int)p,
                            (int)t->nparts);
    kpart *kp = &t->parts[p];
    bool was = false;
    if (!atomic_compare_exchange_strong(&kp->open, &was, true))
        return sl_error_set(err, SL_EEXIST, "set %s: partition %d is open already", t->set, (int)p);
    pthread_mutex_lock(&kp->dmu);
    kp->data_open = true;
    pthread_mutex_unlock(&kp->dmu);
    sl__kstore_ref(t);
    st->ops = &sl_store_kafka_ops;
    st->impl = kp;
    return 0;
}
