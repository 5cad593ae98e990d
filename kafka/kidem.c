/*
 * kafka/kidem.c — idempotent producers (KIP-98's broker side): per
 * (producer id, set, partition) the epoch, the last sequence number and the
 * last five batches stored, so that a batch a client sends again (its
 * answer was lost, the connection dropped) is recognised and answered with
 * the offset it was stored at instead of being stored twice, and a gap in
 * the sequence is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) instead of
 * silently losing what is missing.
 *
 * Rules, as Kafka's ProducerStateManager applies them:
 *   - an epoch older than the one seen is INVALID_PRODUCER_EPOCH; a newer
 *     one starts the sequence afresh (it must start at 0);
 *   - a batch equal (first and last sequence) to one of the last five is a
 *     duplicate: NONE and its first offset;
 *   - otherwise its first sequence must follow the last one (INT32_MAX
 *     wraps to 0); a producer the broker does not know may start anywhere
 *     (its state expired, or was lost in a crash).
 * A durable publish that fails afterwards takes its batch back
 * (sl__kidem_failed), so the client's retry is stored rather than called a
 * duplicate of records that never reached the disk.
 *
 * The state is saved to DATA/kafka/producers.json at stop and loaded at
 * start. After a crash it starts empty: a retry that spans the crash may
 * store a batch twice (docs/kafka-protocol.md). Entries idle for a day go
 * (Kafka's producer.id.expiration.ms), and at most KIDEM_MAX are kept.
 */
#include "kafka/kidem.h"

#include "core/base/clock.h"
#include "core/base/slog.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KIDEM_BATCHES 5
#define KIDEM_BUCKETS 4096
#define KIDEM_MAX 100000
#define KIDEM_IDLE_MS (24LL * 3600 * 1000)

typedef struct kbat {
    int32_t first, last;
    int64_t offset;
} kbat;

typedef struct kent {
    struct kent *next;
    int64_t pid;
    int16_t epoch;
    int32_t part;
    int32_t last_seq; /* -1: none yet */
    kbat b[KIDEM_BATCHES]; /* ring, newest at (head - 1) */
    int nb, head;
    int64_t used_ms;
    char set[]; /* name */
} kent;

struct sl_kidem {
    pthread_mutex_t mu;
    kent *bucket[KIDEM_BUCKETS];
    size_t n;
    char path[4200];
};

static uint32_t hash(int64_t pid, const char *set, int32_t part)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)pid;
    for (const unsigned char *p = (const unsigned char *)set; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h = (h ^ (uint32_t)part) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32)) % KIDEM_BUCKETS;
}

static kent *find(struct sl_kidem *d, int64_t pid, const char *set, int32_t part, bool create)
{
    uint32_t h = hash(pid, set, part);
    for (kent *e = d->bucket[h]; e; e = e->next)
        if (e->pid == pid && e->part == part && !strcmp(e->set, set))
            return e;
    if (!create || d->n >= KIDEM_MAX)
        return NULL;
    size_t len = strlen(set);
    kent *e = calloc(1, sizeof *e + len + 1);
    if (!e)
        return NULL;
    memcpy(e->set, set, len + 1);
    e->pid = pid;
    e->part = part;
    e->epoch = -1;
    e->last_seq = -1;
    e->next = d->bucket[h];
    d->bucket[h] = e;
    d->n++;
    return e;
}

/* Drops entries idle for a day (called when the table is full). */
static void expire(struct sl_kidem *d, int64_t now)
{
    for (int i = 0; i < KIDEM_BUCKETS; i++)
        for (kent **pp = &d->bucket[i]; *pp;) {
            kent *e = *pp;
            if (now - e->used_ms > KIDEM_IDLE_MS) {
                *pp = e->next;
                free(e);
                d->n--;
            } else {
                pp = &e->next;
            }
        }
}

static void push(kent *e, int32_t first, int32_t last, int64_t offset)
{
    e->b[e->head] = (kbat){first, last, offset};
    e->head = (e->head + 1) % KIDEM_BATCHES;
    if (e->nb < KIDEM_BATCHES)
        e->nb++;
    e->last_seq = last;
}

static int32_t next_seq(int32_t s)
{
    return s == INT32_MAX ? 0 : s + 1;
}

int16_t sl__kidem_begin(sl_kafka *k, const char *set, int32_t part, const sl_kidem_batch *b,
                        int64_t *dup_offset)
{
    struct sl_kidem *d = k->idem;
    *dup_offset = -1;
    pthread_mutex_lock(&d->mu);
    int64_t now = sl_clock_mono_ms();
    kent *e = find(d, b->pid, set, part, false);
    if (!e && d->n >= KIDEM_MAX)
        expire(d, now);
    if (!e && !(e = find(d, b->pid, set, part, true))) {
        pthread_mutex_unlock(&d->mu);
        return SL_KERR_UNKNOWN_SERVER_ERROR; /* out of memory, or KIDEM_MAX live producers */
    }
    e->used_ms = now;
    int16_t err = SL_KERR_NONE;
    if (b->epoch < e->epoch) {
        err = SL_KERR_INVALID_PRODUCER_EPOCH;
    } else if (b->epoch > e->epoch && e->epoch >= 0) {
        /* A new epoch (the producer reset): its sequence starts at 0. */
        if (b->first != 0)
            err = SL_KERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
    } else if (e->epoch == b->epoch) {
        for (int i = 0; i < e->nb; i++)
            if (e->b[i].first == b->first && e->b[i].last == b->last) {
                *dup_offset = e->b[i].offset;
                atomic_fetch_add(&k->stats.duplicates, 1);
                pthread_mutex_unlock(&d->mu);
                return SL_KERR_NONE;
            }
        if (e->last_seq >= 0 && b->first != next_seq(e->last_seq))
            err = SL_KERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
    }
    if (err)
        pthread_mutex_unlock(&d->mu);
    return err; /* NONE, no duplicate: held until sl__kidem_end() */
}

void sl__kidem_end(sl_kafka *k, const char *set, int32_t part, const sl_kidem_batch *b,
                   int64_t offset)
{
    struct sl_kidem *d = k->idem;
    if (offset >= 0) {
        kent *e = find(d, b->pid, set, part, false);
        if (e) {
            if (b->epoch != e->epoch) {
                e->epoch = b->epoch;
                e->nb = e->head = 0;
            }
            push(e, b->first, b->last, offset);
        }
    }
    pthread_mutex_unlock(&d->mu);
}

void sl__kidem_failed(sl_kafka *k, const char *set, int32_t part, const sl_kidem_batch *b)
{
    struct sl_kidem *d = k->idem;
    pthread_mutex_lock(&d->mu);
    kent *e = find(d, b->pid, set, part, false);
    if (e && e->epoch == b->epoch) {
        /* Forget it and whatever came after it: the client retries from it. */
        int keep = 0;
        kbat kept[KIDEM_BATCHES];
        for (int i = 0; i < e->nb; i++) {
            const kbat *x = &e->b[(e->head - e->nb + i + KIDEM_BATCHES) % KIDEM_BATCHES];
            if (x->first < b->first)
                kept[keep++] = *x;
        }
        e->nb = e->head = 0;
        for (int i = 0; i < keep; i++)
            push(e, kept[i].first, kept[i].last, kept[i].offset);
        e->last_seq = b->first == 0 ? -1 : b->first - 1;
    }
    pthread_mutex_unlock(&d->mu);
}

/* ---- state file ----------------------------------------------------------- */

static int load(struct sl_kidem *d, sl_error *err)
{
    json_error_t je;
    json_t *j = json_load_file(d->path, 0, &je);
    if (!j) {
        if (access(d->path, F_OK) != 0)
            return 0;
        return sl_error_set(err, SL_EINVAL, "%s: %s (line %d)", d->path, je.text, je.line);
    }
    json_t *arr = json_object_get(j, "producers"), *o;
    size_t i;
    int64_t now = sl_clock_mono_ms();
    json_array_foreach(arr, i, o)
    {
        const char *set = json_string_value(json_object_get(o, "set"));
        json_t *bs = json_object_get(o, "batches"), *bt;
        if (!set)
            continue;
        kent *e = find(d, json_integer_value(json_object_get(o, "producer_id")), set,
                       (int32_t)json_integer_value(json_object_get(o, "partition")), true);
        if (!e)
            break;
        e->epoch = (int16_t)json_integer_value(json_object_get(o, "epoch"));
        e->used_ms = now;
        size_t x;
        json_array_foreach(bs, x, bt) push(e, (int32_t)json_integer_value(json_array_get(bt, 0)),
                                           (int32_t)json_integer_value(json_array_get(bt, 1)),
                                           json_integer_value(json_array_get(bt, 2)));
        e->last_seq = (int32_t)json_integer_value(json_object_get(o, "last_sequence"));
    }
    json_decref(j);
    return 0;
}

static void save(struct sl_kidem *d)
{
    json_t *arr = json_array();
    for (int i = 0; i < KIDEM_BUCKETS; i++)
        for (kent *e = d->bucket[i]; e; e = e->next) {
            json_t *bs = json_array();
            for (int x = 0; x < e->nb; x++) {
                const kbat *b = &e->b[(e->head - e->nb + x + KIDEM_BATCHES) % KIDEM_BATCHES];
                json_array_append_new(bs, json_pack("[i, i, I]", b->first, b->last,
                                                    (json_int_t)b->offset));
            }
            json_array_append_new(arr, json_pack("{s:I, s:i, s:s, s:i, s:i, s:o}", "producer_id",
                                                 (json_int_t)e->pid, "epoch", e->epoch, "set",
                                                 e->set, "partition", e->part, "last_sequence",
                                                 e->last_seq, "batches", bs));
        }
    json_t *j = json_pack("{s:o}", "producers", arr);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", d->path);
    if (!j || json_dump_file(j, tmp, JSON_COMPACT) || rename(tmp, d->path))
        sl_slog(SL_SLOG_WARN, "kafka", "idempotent producers' state not saved to %s: %s",
                d->path, strerror(errno));
    json_decref(j);
}

int sl__kidem_open(sl_kafka *k, sl_error *err)
{
    struct sl_kidem *d = calloc(1, sizeof *d);
    if (!d)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    pthread_mutex_init(&d->mu, NULL);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/kafka", k->data_dir);
    int rc = sl__kafka_mkdirs(dir, err);
    if (rc) {
        pthread_mutex_destroy(&d->mu);
        free(d);
        return rc;
    }
    snprintf(d->path, sizeof d->path, "%s/producers.json", dir);
    k->idem = d;
    rc = load(d, err);
    if (rc)
        sl__kidem_close(k);
    return rc;
}

void sl__kidem_close(sl_kafka *k)
{
    struct sl_kidem *d = k->idem;
    if (!d)
        return;
    save(d);
    for (int i = 0; i < KIDEM_BUCKETS; i++)
        while (d->bucket[i]) {
            kent *e = d->bucket[i];
            d->bucket[i] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&d->mu);
    free(d);
    k->idem = NULL;
}
