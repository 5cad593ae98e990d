/*
 * core/log/store_kafka_read.c — readers of a Kafka-backed partition (see
 * store_kafka.h).
 *
 * The legacy (group-less) consumer API: a reader starts fetching its
 * partition at an offset into a queue of its own
 * (rd_kafka_consume_start_queue) and takes messages from it without
 * waiting. The first reader of a partition uses the topic's shared reader
 * handle; a second reader of the same partition at the same time gets a
 * handle of its own (librdkafka fetches a partition once per handle), made
 * at open and destroyed at close. The queue's event callback (librdkafka's
 * thread, on the queue going from empty to not empty) is what calls
 * on_data.
 */
#include "core/log/store_kafka_internal.h"

#include "core/base/kafka_conf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kreader {
    sl_kstore_topic *t;
    kpart *kp;
    rd_kafka_t *rk; /* t->cons, or priv */
    bool priv;
    rd_kafka_topic_t *rkt;
    rd_kafka_queue_t *q;
    rd_kafka_message_t *cur; /* the record last returned, alive until the next call */
    int64_t pos;
    bool all; /* no lane filter */
    char lane[SL_LANE_MAX + 1];
    size_t lane_len;
    bool fetched; /* something came through its queue already */
} kreader;

/* librdkafka's thread: the reader's queue got something. */
static void on_queue(rd_kafka_t *rk, void *opaque)
{
    (void)rk;
    kpart *kp = ((kreader *)opaque)->kp;
    sl_kstore_topic *t = kp->t;
    if (!t->on_data)
        return;
    pthread_mutex_lock(&kp->dmu);
    if (kp->data_open)
        t->on_data(t->ctx, kp->p);
    pthread_mutex_unlock(&kp->dmu);
}

static void reader_free(kreader *r)
{
    if (r->cur)
        rd_kafka_message_destroy(r->cur);
    if (r->q) {
        rd_kafka_queue_cb_event_enable(r->q, NULL, NULL);
        rd_kafka_consume_stop(r->rkt, r->kp->p);
        rd_kafka_queue_destroy(r->q);
    }
    if (r->rkt)
        rd_kafka_topic_destroy(r->rkt);
    if (r->priv && r->rk)
        rd_kafka_destroy(r->rk);
    if (!r->priv && r->rk) {
        pthread_mutex_lock(&r->t->rmu);
        r->kp->shared_busy = false;
        pthread_mutex_unlock(&r->t->rmu);
    }
    sl_kstore_topic *t = r->t;
    free(r);
    sl__kstore_unref(t);
}

int sl__kstore_reader_open(void *impl, int64_t offset, const char *lane, void **reader,
                           sl_error *err)
{
    kpart *kp = impl;
    sl_kstore_topic *t = kp->t;
    size_t lane_len = lane ? strlen(lane) : 0;
    if (lane_len > SL_LANE_MAX)
        return sl_error_set(err, SL_EINVAL, "lane %s: longer than %d bytes", lane, SL_LANE_MAX);
    kreader *r = calloc(1, sizeof *r);
    if (!r)
        return sl_error_set(err, SL_ENOMEM, "out of memory for a reader");
    sl__kstore_ref(t);
    r->t = t;
    r->kp = kp;
    r->all = lane == NULL;
    if (lane)
        memcpy(r->lane, lane, lane_len + 1);
    r->lane_len = lane_len;
    int64_t start = atomic_load(&kp->wm_lo);
    r->pos = offset >= 0 ? offset : start > 0 ? start : 0;
    pthread_mutex_lock(&t->rmu);
    bool shared = !kp->shared_busy;
    kp->shared_busy = true;
    pthread_mutex_unlock(&t->rmu);
    if (shared) {
        r->rk = t->cons;
    } else {
        rd_kafka_conf_t *conf = rd_kafka_conf_dup(t->cons_conf);
        if (!conf) {
            reader_free(r);
            return sl_error_set(err, SL_ENOMEM, "out of memory for a reader");
        }
        char who[300];
        snprintf(who, sizeof who, "set %s: reader", t->set);
        r->priv = true;
        if (!(r->rk = sl_kafka_new(RD_KAFKA_CONSUMER, conf, NULL, 0, who, err))) {
            reader_free(r);
            return SL_EINVAL;
        }
    }
    if (!(r->rkt = rd_kafka_topic_new(r->rk, t->topic, NULL)) ||
        !(r->q = rd_kafka_queue_new(r->rk))) {
        reader_free(r);
        return sl_error_set(err, SL_ENOMEM, "out of memory for a reader");
    }
    rd_kafka_queue_cb_event_enable(r->q, on_queue, r);
    if (rd_kafka_consume_start_queue(
            r->rkt, kp->p, offset >= 0 ? offset : RD_KAFKA_OFFSET_BEGINNING, r->q) == -1) {
        rd_kafka_resp_err_t e = rd_kafka_last_error();
        rd_kafka_queue_cb_event_enable(r->q, NULL, NULL);
        rd_kafka_queue_destroy(r->q);
        r->q = NULL;
        reader_free(r);
        return sl_error_set(err, SL_EIO, "set %s: topic %s partition %d: cannot read: %s", t->set,
                            t->topic, (int)kp->p, rd_kafka_err2str(e));
    }
    *reader = r;
    return 0;
}

/* The watermarks the reader's handle learnt from its fetches. */
#define READ_WAIT_MS 500        /* reader_next behind the high watermark: a fetch's wait, at most */
#define READ_FIRST_WAIT_MS 5000 /* … for a reader's first records */

static void learn_watermarks(kreader *r)
{
    int64_t lo = -1, hi = -1;
    if (rd_kafka_get_watermark_offsets(r->rk, r->t->topic, r->kp->p, &lo, &hi) == 0 && hi >= 0)
        sl__kstore_watermarks(r->kp, -1, hi);
}

/* Whether m passes the reader's lane filter; *lane, *len get its lane. */
static bool lane_match(const kreader *r, const rd_kafka_message_t *m, const char **lane,
                       size_t *len)
{
    rd_kafka_headers_t *h = NULL;
    const void *v = NULL;
    size_t n = 0;
    *lane = "";
    *len = 0;
    if (!rd_kafka_message_headers(m, &h) && h && !rd_kafka_header_get_last(h, "lane", &v, &n) &&
        v) {
        *lane = v;
        *len = n;
    }
    return r->all || (n == r->lane_len && memcmp(*lane, r->lane, n) == 0);
}

int sl__kstore_reader_next(void *reader, sl_record *rec, sl_error *err)
{
    kreader *r = reader;
    sl_kstore_topic *t = r->t;
    if (r->cur) {
        rd_kafka_message_destroy(r->cur);
        r->cur = NULL;
    }
    if (r->priv)
        rd_kafka_poll(r->rk, 0); /* its errors and logs */
    bool waited = false;
    for (;;) {
        rd_kafka_message_t *m = rd_kafka_consume_queue(r->q, 0);
        int64_t hi = atomic_load(&r->kp->wm_hi), d = atomic_load(&r->kp->delivered_end);
        if (!m && !waited && r->pos < (hi > d ? hi : d)) {
            /* Records exist past the position, the fetch has not brought
             * them yet (a reader just opened, or the prefetch ran dry): wait
             * for them a moment rather than answer "nothing" (a GET of the
             * events would come back empty). Once per call: bounded. */
            waited = true;
            /* A reader's first fetch may need a client to connect first (a
             * second reader of a partition has its own): longer. */
            m = rd_kafka_consume_queue(r->q, r->fetched ? READ_WAIT_MS : READ_FIRST_WAIT_MS);
        }
        if (m)
            r->fetched = true;
        if (!m) {
            learn_watermarks(r);
            return SL_EEOF;
        }
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (m->offset > r->pos)
                r->pos = m->offset;
            rd_kafka_message_destroy(m);
            learn_watermarks(r);
            return SL_EEOF;
        }
        if (m->err) {
            int rc = sl_error_set(err, SL_EIO, "set %s: topic %s partition %d: read: %s", t->set,
                                  t->topic, (int)r->kp->p, rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            return rc;
        }
        const char *lane;
        size_t lane_len;
        r->pos = m->offset + 1;
        if (!lane_match(r, m, &lane, &lane_len)) {
            rd_kafka_message_destroy(m);
            continue;
        }
        *rec = (sl_record){
            .offset = m->offset,
            .timestamp = rd_kafka_message_timestamp(m, NULL),
            .key = m->key,
            .key_len = m->key ? m->key_len : 0,
            .value = m->payload,
            .value_len = m->payload ? m->len : 0,
            .lane = lane,
            .lane_len = lane_len,
        };
        atomic_fetch_add(&t->fetched_records, 1);
        atomic_fetch_add(&t->fetched_bytes,
                         (uint64_t)(rec->key_len + rec->value_len + (lane_len ? 4 + lane_len : 0)));
        r->cur = m;
        return 0;
    }
}

int64_t sl__kstore_reader_position(void *reader)
{
    return ((kreader *)reader)->pos;
}

void sl__kstore_reader_close(void *reader)
{
    if (reader)
        reader_free(reader);
}
