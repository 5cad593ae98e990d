/*
 * kafka/kproduce.c — Produce and InitProducerId: a Kafka client's record
 * batches appended to event sets through the Databus.
 *
 * Every batch of a partition is checked whole (sl_batch_check: lengths,
 * magic 2, CRC-32C) and decoded before anything of that partition is
 * queued, so a corrupt batch stores nothing of it. Records keep their own
 * bytes: key, value, headers and timestamp go to the Databus as raw events,
 * which re-batches them lane-homogeneously with the set's codec (a record's
 * lane is its `lane` header; batch boundaries may differ from the client's,
 * records do not). A partition's records go in one publish: stored
 * contiguously, in order, all or nothing.
 *
 * acks: 0 answers nothing (r->silent); 1 queues with ack "buffer" (answered
 * once queued, on any set: Kafka's leader acknowledgement never waits for a
 * flush), -1 with "durable" (answered after the fdatasync covering it).
 *
 * Lifetime: the Databus calls done exactly once per durable publish, so a
 * parked Produce always gets its post; cancel therefore returns false and
 * the listener frees the request when the post arrives.
 */
#include "kafka/kidem.h"

#include "core/base/clock.h"
#include "core/base/lane_name.h"
#include "core/base/varint.h"
#include "core/bus/event.h"
#include "core/bus/record_event.h"
#include "core/log/batch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kpp {
    struct kprod *pr;
    int32_t topic; /* index into kprod.topics */
    int32_t index;
    int16_t err;
    int64_t base; /* first stored offset, -1 none */
    int status;   /* a durable publish's outcome */
    bool waiting; /* a durable publish of it is outstanding */
    sl_kidem_batch idem; /* pid -1: not an idempotent producer's */
    const char *set;     /* its set's name, while waiting */
} kpp;

typedef struct ktopic {
    sl_kstr name;
    int32_t nparts;
} ktopic;

typedef struct kprod {
    sl_kreq *r;
    ktopic *topics;
    int32_t ntopics;
    kpp *parts;
    size_t nparts;
    _Atomic int outstanding; /* durable publishes not done yet, plus the handler's hold */
} kprod;

/* What one partition's records decode to; events point into the readers. */
typedef struct decoded {
    sl_databus_event *evs;
    char (*lanes)[SL_LANE_MAX + 1];
    sl_databus_result *res;
    size_t n, cap;
    sl_batch_reader *brs;
    size_t nbr, brcap;
    sl_kidem_batch idem; /* of the first batch, extended over the next ones */
    /* The client's batches: each stored as it is when it can be (one lane,
     * the set's codec, plain CreateTime records with dense offsets), else
     * record by record. */
    struct kbatch {
        const uint8_t *p;
        size_t len, first, n;
        int64_t max_ts;
        bool whole;
    } *kb;
    size_t nkb, kbcap;
    sl_databus_event *pub; /* what is published: whole batches and records */
    size_t npub, pubcap;
} decoded;

static void decoded_reset(decoded *d)
{
    for (size_t i = 0; i < d->nbr; i++)
        sl_batch_reader_free(&d->brs[i]);
    d->nbr = 0;
    d->n = 0;
    d->nkb = d->npub = 0;
    d->idem = (sl_kidem_batch){.pid = -1};
}

static void decoded_free(decoded *d)
{
    decoded_reset(d);
    free(d->brs);
    free(d->kb);
    free(d->pub);
    free(d->evs);
    free(d->lanes);
    free(d->res);
}

static int grow_events(decoded *d)
{
    if (d->n < d->cap)
        return 0;
    size_t cap = d->cap ? d->cap * 2 : 64;
    sl_databus_event *e = realloc(d->evs, cap * sizeof *e);
    if (!e)
        return SL_ENOMEM;
    d->evs = e;
    char(*l)[SL_LANE_MAX + 1] = realloc(d->lanes, cap * sizeof *l);
    if (!l)
        return SL_ENOMEM;
    d->lanes = l;
    sl_databus_result *res = realloc(d->res, cap * sizeof *res);
    if (!res)
        return SL_ENOMEM;
    d->res = res;
    d->cap = cap;
    return 0;
}

/* Decodes the batches of records[0..len) for a set of codec. Returns 0 or
 * the Kafka error with why. */
static int16_t decode(const uint8_t *p, size_t len, int codec_of_set, decoded *d, char *why,
                      size_t whylen)
{
    while (len > 0) {
        /* Codecs other than none and zstd are refused by name (the header
         * check would call them corrupt). */
        if (len >= 23 && p[16] == 2) {
            int codec = sl_be16_get(p + 21) & 7;
            if (codec != SL_CODEC_NONE && codec != SL_CODEC_ZSTD) {
                snprintf(why, whylen, "compression codec %d: sluice takes none or zstd", codec);
                return SL_KERR_UNSUPPORTED_COMPRESSION_TYPE;
            }
        }
        sl_batch_info info;
        sl_error err = {0};
        int rc = sl_batch_check(p, len, &info, &err);
        if (rc) {
            snprintf(why, whylen, "record batch: %s",
                     err.msg[0] ? err.msg : (rc == SL_EPARTIAL ? "truncated" : "corrupt"));
            return SL_KERR_CORRUPT_MESSAGE;
        }
        size_t bl = sl_batch_size(&info);
        /* The producer's fields (producerId at 43, epoch at 51, base
         * sequence at 53): batches of one request must continue each
         * other's sequence. */
        sl_kidem_batch ib = {.pid = (int64_t)sl_be64_get(p + 43),
                             .epoch = (int16_t)sl_be16_get(p + 51),
                             .first = (int32_t)sl_be32_get(p + 53)};
        ib.last = (int32_t)((uint32_t)ib.first + (uint32_t)info.last_offset_delta);
        if (d->nbr == 0) {
            d->idem = ib.pid >= 0 ? ib : (sl_kidem_batch){.pid = -1};
        } else if (ib.pid != d->idem.pid || (ib.pid >= 0 && (ib.epoch != d->idem.epoch ||
                                                             ib.first != d->idem.last + 1))) {
            snprintf(why, whylen, "record batches of one partition from different producers "
                                  "or with a gap in their sequence numbers");
            return SL_KERR_INVALID_RECORD;
        } else if (ib.pid >= 0) {
            d->idem.last = ib.last;
        }
        if (d->nbr == d->brcap && SL_GROW(d->brs, d->brcap, 4))
            return SL_KERR_UNKNOWN_SERVER_ERROR;
        sl_batch_reader *br = &d->brs[d->nbr++];
        sl_batch_reader_init(br);
        if (sl_batch_reader_open(br, p, bl, &err)) {
            snprintf(why, whylen, "record batch: %s", err.msg);
            return SL_KERR_CORRUPT_MESSAGE;
        }
        if (d->nkb == d->kbcap && SL_GROW(d->kb, d->kbcap, 4))
            return SL_KERR_UNKNOWN_SERVER_ERROR;
        struct kbatch *kb = &d->kb[d->nkb++];
        /* attributes: codec in bits 0-2; timestamp type 3, transactional 4
         * and control 5 must be clear to store it as it is. */
        *kb = (struct kbatch){.p = p, .len = bl, .first = d->n, .max_ts = info.max_ts,
                              .whole = (info.attributes & 7) == codec_of_set &&
                                       !(info.attributes & 0x38) &&
                                       info.last_offset_delta == info.count - 1};
        sl_record rec;
        while ((rc = sl_batch_reader_next(br, &rec, &err)) == 0) {
            if (!sl_lane_valid(rec.lane, rec.lane_len)) {
                snprintf(why, whylen, "record %zu: its lane header is not a lane name "
                                      "([a-z0-9-]{1,32})",
                         d->n);
                return SL_KERR_INVALID_RECORD;
            }
            if (grow_events(d))
                return SL_KERR_UNKNOWN_SERVER_ERROR;
            memcpy(d->lanes[d->n], rec.lane, rec.lane_len);
            d->lanes[d->n][rec.lane_len] = '\0';
            if (kb->whole && (rec.offset != info.base_offset + (int64_t)(d->n - kb->first) ||
                              (d->n > kb->first && strcmp(d->lanes[d->n], d->lanes[kb->first]))))
                kb->whole = false;
            d->evs[d->n] = (sl_databus_event){
                .value = (const char *)rec.value, /* NULL: a tombstone, kept null */
                .value_len = rec.value_len,
                .key = (const char *)rec.key,
                .key_len = rec.key_len,
                .ts_ms = rec.timestamp,
                .raw = true,
                .headers = rec.headers,
                .headers_len = rec.headers_len,
                .header_count = rec.header_count,
            };
            d->n++;
        }
        if (rc != SL_EEOF) {
            snprintf(why, whylen, "record: %s", err.msg);
            return SL_KERR_CORRUPT_MESSAGE;
        }
        kb->n = d->n - kb->first;
        kb->whole = kb->whole && kb->n > 0 && kb->n == (size_t)info.count;
        p += bl;
        len -= bl;
    }
    for (size_t i = 0; i < d->n; i++) /* lanes moved with growth: pointed at last */
        d->evs[i].lane = d->lanes[i];
    /* What is published: a whole batch as one event, the others' records. */
    if (d->pubcap < d->n + 1) {
        sl_databus_event *np = realloc(d->pub, (d->n + 1) * sizeof *np);
        if (!np)
            return SL_KERR_UNKNOWN_SERVER_ERROR;
        d->pub = np;
        d->pubcap = d->n + 1;
    }
    for (size_t b = 0; b < d->nkb; b++) {
        const struct kbatch *kb = &d->kb[b];
        if (kb->whole) {
            d->pub[d->npub++] = (sl_databus_event){.value = kb->p,
                                                   .value_len = kb->len,
                                                   .lane = d->lanes[kb->first],
                                                   .ts_ms = kb->max_ts,
                                                   .batch = true,
                                                   .count = (int32_t)kb->n};
        } else {
            memcpy(d->pub + d->npub, d->evs + kb->first, kb->n * sizeof *d->pub);
            d->npub += kb->n;
        }
    }
    return SL_KERR_NONE;
}

/* The server's admission of every record as the event rules will see
 * (core/bus/record_event.h): the schema of its type and its lane, as for
 * HTTP. Returns NONE, or INVALID_RECORD with why (the batch stores nothing:
 * Produce v3-7 cannot refuse single records). */
static int16_t admit(sl_kreq *r, const sl_set *set, int32_t part, const decoded *d, char *why,
                     size_t whylen)
{
    const sl_kafka_hooks *h = &r->k->hooks;
    if (!h->validate)
        return SL_KERR_NONE;
    sl_buf json = SL_BUF_INIT;
    sl_event ev;
    sl_event_limits lim = {.max_bytes = set->cfg.max_event_bytes + 4096, /* the envelope */
                           .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT,
                           .generate_ids = true};
    int16_t code = SL_KERR_NONE;
    /* Plain records of a type without a schema only need their lane
     * admitted: the event is built from the lane alone, once per run of
     * records of one lane (building each record's data costs more than
     * storing it). */
    bool plain_by_lane = h->has_schema && !h->has_schema(h->ctx, set, SL_RECORD_PLAIN_TYPE,
                                                         sizeof SL_RECORD_PLAIN_TYPE - 1);
    const char *admitted_lane = NULL; /* of the last plain record admitted so */
    for (size_t i = 0; i < d->n && !code; i++) {
        const sl_databus_event *e = &d->evs[i];
        sl_record rec = {.offset = (int64_t)i,
                         .timestamp = e->ts_ms,
                         .key = (const uint8_t *)e->key,
                         .key_len = e->key_len,
                         .value = (const uint8_t *)e->value,
                         .value_len = e->value_len,
                         .headers = e->headers,
                         .headers_len = e->headers_len,
                         .header_count = e->header_count,
                         .lane = e->lane,
                         .lane_len = strlen(e->lane)};
        bool lane_only = plain_by_lane && sl_record_kind_of(&rec) == SL_RECORD_PLAIN;
        if (lane_only) {
            if (admitted_lane && !strcmp(admitted_lane, e->lane))
                continue;
            rec.key = NULL;
            rec.key_len = 0;
            rec.value = NULL; /* data null: nothing checks it */
            rec.value_len = 0;
        }
        sl_error err = {0};
        json.len = 0;
        int rc = sl_record_event(&rec, set->name, part, &json, &err);
        if (!rc && sl_event_parse((const char *)json.data, json.len, &lim, &ev, &err) != SL_EVENT_OK)
            rc = SL_EINVAL;
        if (!rc && h->validate(h->ctx, set, &ev, &err) != 0)
            rc = SL_EINVAL;
        if (rc) {
            snprintf(why, whylen, "record %zu of the batch: %s", i,
                     err.msg[0] ? err.msg : sl_strerror(rc));
            code = rc == SL_ENOMEM ? SL_KERR_UNKNOWN_SERVER_ERROR : SL_KERR_INVALID_RECORD;
        }
        else if (lane_only)
            admitted_lane = e->lane;
    }
    sl_buf_free(&json);
    return code;
}

static int16_t kafka_error(int rc)
{
    switch (rc) {
    case SL_EFULL:
        return SL_KERR_REQUEST_TIMED_OUT; /* retriable: the client backs off */
    case SL_ETOOBIG:
        return SL_KERR_MESSAGE_TOO_LARGE;
    case SL_ESHUTDOWN:
        return SL_KERR_NOT_LEADER_OR_FOLLOWER; /* retriable: it reconnects */
    case SL_ENOENT:
        return SL_KERR_UNKNOWN_TOPIC_OR_PARTITION;
    case SL_EINVAL:
        return SL_KERR_INVALID_RECORD;
    default:
        return SL_KERR_KAFKA_STORAGE_ERROR;
    }
}

static void publish_done(void *ctx, int status)
{
    kpp *p = ctx;
    p->status = status;
    if (status && p->idem.pid >= 0)
        sl__kidem_failed(p->pr->r->k, p->set, p->index, &p->idem);
    kprod *pr = p->pr;
    if (atomic_fetch_sub(&pr->outstanding, 1) == 1)
        sl_kreq_post(pr->r);
}

static int respond(sl_kreq *r)
{
    kprod *pr = r->state;
    size_t at = 0;
    sl_kw_array(&r->w, false, pr->ntopics);
    for (int32_t t = 0; t < pr->ntopics; t++) {
        sl_kw_str(&r->w, false, pr->topics[t].name.p ? pr->topics[t].name.p : "",
                  pr->topics[t].name.p ? pr->topics[t].name.len : 0);
        sl_kw_array(&r->w, false, pr->topics[t].nparts);
        for (int32_t i = 0; i < pr->topics[t].nparts; i++, at++) {
            kpp *p = &pr->parts[at];
            if (!p->err && p->waiting && p->status) {
                p->err = kafka_error(p->status);
                p->base = -1;
            }
            if (p->err)
                atomic_fetch_add(&r->k->stats.produce_errors, 1);
            sl_kw_i32(&r->w, p->index);
            sl_kw_i16(&r->w, p->err);
            sl_kw_i64(&r->w, p->err ? -1 : p->base);
            sl_kw_i64(&r->w, -1); /* log_append_time: CreateTime topics */
            if (r->h.version >= 5)
                sl_kw_i64(&r->w, 0); /* log_start_offset */
        }
    }
    sl_kw_i32(&r->w, 0); /* throttle_time_ms */
    return SL_KREQ_DONE;
}

static bool never_cancel(sl_kreq *r)
{
    (void)r;
    return false; /* done always comes: the post frees it */
}

static void cleanup(sl_kreq *r)
{
    kprod *pr = r->state;
    if (!pr)
        return;
    free(pr->topics);
    free(pr->parts);
    free(pr);
    r->state = NULL;
}

/* Checks, decodes and publishes partition p's records. */
static void produce_one(sl_kreq *r, kpp *p, sl_kstr topic, sl_kstr records, int16_t acks,
                        decoded *d)
{
    char why[SL_ERROR_MAX + 64] = "";
    sl_set *set = NULL;
    if ((p->err = sl__kafka_topic(r, topic, true, &set)))
        return;
    if (!sl__kafka_allowed(r, SL_AUTH_PUBLISH, set->name)) {
        p->err = SL_KERR_TOPIC_AUTHORIZATION_FAILED;
        return;
    }
    if (p->index < 0 || p->index >= set->nparts) {
        p->err = SL_KERR_UNKNOWN_TOPIC_OR_PARTITION;
        return;
    }
    if (!records.p || records.len == 0)
        return; /* nothing to store: success at base -1 */
    decoded_reset(d);
    p->err = decode((const uint8_t *)records.p, (size_t)records.len, set->cfg.compression, d, why,
                    sizeof why);
    if (!p->err && d->n == 0)
        return;
    if (!p->err)
        p->err = admit(r, set, p->index, d, why, sizeof why);
    sl_error err = {0};
    int rc = 0;
    p->idem = d->idem;
    p->set = set->name;
    if (!p->err && p->idem.pid >= 0) {
        int64_t dup = -1;
        p->err = sl__kidem_begin(r->k, set->name, p->index, &p->idem, &dup);
        if (!p->err && dup >= 0) {
            p->base = dup; /* stored already: the client's retry */
            return;
        }
        if (p->err) {
            snprintf(why, sizeof why, "producer %lld epoch %d: batch of sequence %d..%d %s",
                     (long long)p->idem.pid, p->idem.epoch, p->idem.first, p->idem.last,
                     p->err == SL_KERR_INVALID_PRODUCER_EPOCH ? "has an old epoch"
                                                              : "does not follow the last one");
            sl__kafka_log_once(r, "kafka: Produce from %s to %s/%d refused: %s", r->peer,
                               set->name, p->index, why);
            return;
        }
    }
    if (!p->err) {
        /* Counted before the publish: its done may come from the syncer
         * before sl_databus_publish_part() returns. */
        p->waiting = true;
        atomic_fetch_add(&p->pr->outstanding, 1);
        rc = sl_databus_publish_part(r->k->bus, set, p->index,
                                     acks == -1 ? SL_ACK_DURABLE : SL_ACK_BUFFER, d->pub, d->npub,
                                     d->res, publish_done, p, &err);
        if (rc != 1) { /* no done will come (the handler's hold keeps it above 0) */
            p->waiting = false;
            atomic_fetch_sub(&p->pr->outstanding, 1);
        }
    }
    if (!p->err && p->idem.pid >= 0)
        sl__kidem_end(r->k, set->name, p->index, &p->idem, rc < 0 ? -1 : d->res[0].offset);
    if (p->err || rc < 0) {
        if (!p->err)
            p->err = kafka_error(rc);
        sl__kafka_log_once(r, "kafka: Produce from %s to %s/%d refused: %s", r->peer, set->name,
                           p->index, p->err && why[0] ? why : err.msg);
        return;
    }
    p->base = d->res[0].offset;
    atomic_fetch_add(&r->k->stats.produced_records, d->n);
}

int sl__kafka_produce(sl_kreq *r)
{
    sl_kr *in = &r->body;
    sl_kstr txn = sl_kr_str(in, false);
    int16_t acks = sl_kr_i16(in);
    sl_kr_i32(in); /* timeout_ms: the Databus answers well within any sane one */
    int32_t nt = sl_kr_array(in, false, 2 + 4);
    sl_kr list = *in;
    size_t total = 0;
    for (int32_t t = 0; t < nt; t++) {
        sl_kr_str(in, false);
        int32_t np = sl_kr_array(in, false, 4 + 4);
        for (int32_t i = 0; i < np; i++) {
            sl_kr_i32(in);
            sl_kr_bytes(in, false);
        }
        total += (size_t)(np > 0 ? np : 0);
    }
    if (!sl_kr_ok(in) || nt < 0) {
        sl__kafka_log_once(r, "kafka: %s sent a malformed Produce v%d: closed", r->peer,
                           r->h.version);
        return SL_KREQ_CLOSE;
    }
    kprod *pr = calloc(1, sizeof *pr);
    if (pr) {
        pr->topics = calloc((size_t)nt + 1, sizeof *pr->topics);
        pr->parts = calloc(total + 1, sizeof *pr->parts);
    }
    if (!pr || !pr->topics || !pr->parts) {
        if (pr) {
            free(pr->topics);
            free(pr->parts);
        }
        free(pr);
        return SL_KREQ_CLOSE;
    }
    pr->r = r;
    pr->ntopics = nt;
    pr->nparts = total;
    atomic_init(&pr->outstanding, 1); /* the handler's hold */
    r->state = pr;
    r->cleanup = cleanup;
    bool bad_acks = acks != 0 && acks != 1 && acks != -1;
    decoded d = {0};
    size_t at = 0;
    for (int32_t t = 0; t < nt; t++) {
        pr->topics[t].name = sl_kr_str(&list, false);
        int32_t np = sl_kr_array(&list, false, 4 + 4);
        pr->topics[t].nparts = np;
        for (int32_t i = 0; i < np; i++, at++) {
            kpp *p = &pr->parts[at];
            p->pr = pr;
            p->topic = t;
            p->index = sl_kr_i32(&list);
            p->base = -1;
            sl_kstr records = sl_kr_bytes(&list, false);
            if (txn.p)
                p->err = SL_KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED; /* no transactions */
            else if (bad_acks)
                p->err = SL_KERR_INVALID_REQUIRED_ACKS;
            else
                produce_one(r, p, pr->topics[t].name, records, acks, &d);
        }
    }
    decoded_free(&d);
    if (txn.p)
        sl__kafka_log_once(r, "kafka: %s sent a transactional Produce: sluice has no "
                              "transactions (docs/kafka-protocol.md)",
                           r->peer);
    if (acks == 0)
        r->silent = true;
    r->resume = respond;
    r->cancel = never_cancel;
    if (atomic_fetch_sub(&pr->outstanding, 1) == 1)
        return respond(r); /* nothing outstanding: no post will come */
    return SL_KREQ_PENDING;
}

/* InitProducerId: ids are unique across restarts without stored state
 * (milliseconds since the epoch, shifted, plus a counter), epoch 0; their
 * batches' sequence numbers are checked by kidem.c. */
int sl__kafka_init_producer_id(sl_kreq *r)
{
    static _Atomic int64_t next;
    sl_kstr txn = sl_kr_str(&r->body, false);
    sl_kr_i32(&r->body); /* transaction_timeout_ms */
    if (!sl_kr_ok(&r->body)) {
        sl__kafka_log_once(r, "kafka: %s sent a malformed InitProducerId: closed", r->peer);
        return SL_KREQ_CLOSE;
    }
    int64_t expect = atomic_load(&next);
    if (expect == 0) {
        int64_t seed = sl_clock_now_ms() << 10;
        atomic_compare_exchange_strong(&next, &expect, seed);
    }
    int64_t id = atomic_fetch_add(&next, 1);
    sl_kw_i32(&r->w, 0); /* throttle_time_ms */
    sl_kw_i16(&r->w, txn.p ? SL_KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED : SL_KERR_NONE);
    sl_kw_i64(&r->w, txn.p ? -1 : id);
    sl_kw_i16(&r->w, txn.p ? -1 : 0);
    return SL_KREQ_DONE;
}
