/*
 * core/bus/databus.c — buffers, the writer thread and group commit (see
 * core/bus/databus.h).
 *
 * Threads: publishers copy events in; the writer swaps buffers out, builds
 * batches and appends; the syncer fdatasyncs and completes durable waiters.
 * One mutex guards every buffer, offset counter and waiter; it is held only
 * to copy in, swap out and book results, never across I/O. Buffered events are framed as
 *   u32 value_len | u32 key_len (UINT32_MAX = null, for both) | i64 ts_ms | u8 lane_len
 *   | lane | key | value
 * in offset order, so a swapped-out buffer is exactly the next offsets.
 */
#include "core/bus/databus.h"
#include "core/base/lane_name.h"
#include "core/log/batch.h"
#include "core/base/clock.h"
#include "core/log/log.h"
#include "core/base/slog.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FRAME_HDR 17
/* A raw event's frame (a Kafka client's record, with its own headers): bit 7
 * of the lane length byte, and after the value int32 header count, uint32
 * headers length, the headers. */
#define FRAME_RAW_BIT 0x80
#define FRAME_RAW 8
/* A whole record batch's frame (sl_databus_event.batch): bit 6 of the lane
 * length byte; value_len is the batch's length, key_len its record count,
 * ts its max timestamp, the value the batch. */
#define FRAME_BATCH_BIT 0x40
#define FRAME_LANE_LEN(b) ((size_t)((b) & 0x3f))
#define RETRY_NS 100000000ll /* wait before retrying a failed append */
#define SYNC_HELPERS 3       /* threads that fdatasync beside the syncer */
#define ROUND_IDLE (SIZE_MAX / 2)
#define REMOTE_DRAIN_NS 10000000000ll /* at stop: how long remote partitions may take */

typedef struct bus_part {
    sl_buf pending; /* frames not yet taken by the writer */
    size_t pending_n;
    int64_t next;      /* next offset to assign */
    int64_t first_ns;  /* when the oldest pending frame was queued */
    uint64_t buffered; /* pending + in-flight bytes, bounded by buffer_bytes */
    int64_t written;   /* end offset appended */
    int64_t durable;   /* end offset synced */
    int failing;       /* error of the last append, 0 when healthy */
    int64_t retry_ns;
    int64_t synced_ns;
    bool busy;        /* the writer holds this partition's frames right now */
    bool syncing;     /* the syncer is in fdatasync for this partition */
    int sync_failing; /* error of the last sync, 0 when healthy */
    int64_t sync_retry_ns;
    bool gave_up; /* stopping with a failing disk: no more attempts */
    /* End offset of the events last queued while the set was ack = "buffer":
     * they were answered already, so drop_unwritten must never drop them.
     * Defensive: today a set's ack only changes at start-up (a reload logs
     * "changed settings apply on the next restart"), before any traffic; if
     * it ever changes while events wait, a durable partition still holding
     * buffer-acked events keeps retrying them instead of dropping. */
    int64_t buffer_end;
    /* End offset a durable publish into a buffer set waits for
     * (sl_databus_publish_ack()): up to it the partition is appended and
     * synced at once, like a durable set's, not after linger_ms and
     * buffer_sync_ms. */
    int64_t urgent;
    /* A remote store (a Kafka topic's partition): offsets are sequence
     * numbers, never synced here; durable moves with its delivery reports
     * (sl_databus_remote_durable). */
    bool remote;
    int64_t reported; /* remote: the end its store reported (may run ahead of written) */
} bus_part;

typedef struct bus_set {
    struct bus_set *next;
    sl_set *set;
    sl_databus *bus;
    bus_part *parts;
    _Atomic uint32_t rr;
} bus_set;

typedef struct waiter {
    struct waiter *next;
    bus_set *bs;
    sl_databus_done_fn *done;
    void *ctx;
    bool entries; /* sl_databus_publish_entries(): the caller reports failures */
    int32_t n;
    struct {
        int32_t part;
        int64_t start, end; /* its events of the partition: [start, end) */
    } t[];
} waiter;

/* One partition's frames taken out by the writer for a round. */
typedef struct work {
    bus_set *bs;
    int32_t part;
    sl_buf frames;
    size_t n;
    int64_t first;     /* offset of the first frame */
    size_t done_bytes; /* frames appended */
    size_t done_n;
    int rc;
    char lane[SL_LANE_MAX + 1]; /* of the frames appended, if they share one */
    bool mixed;                 /* … they did not */
} work;

struct sl_databus {
    pthread_mutex_t lock;
    pthread_cond_t wake;      /* wakes the writer */
    pthread_cond_t sync_wake; /* wakes the syncer */
    pthread_cond_t room;      /* the writer freed buffer room (sl_databus_wait_room) */
    int room_waiters;
    pthread_t thread;
    pthread_t syncer;
    bool writer_done; /* the writer drained and stopped: sync what is left */
    int64_t writer_done_ns;
    int finishing; /* threads finishing remote waiters (their outcomes must stay) */
    /* Sync helpers: a round's fdatasyncs run in parallel (on ext4 and xfs,
     * concurrent syncs share one journal commit). */
    pthread_t helpers[SYNC_HELPERS];
    int nhelpers;
    pthread_mutex_t round_lock;
    pthread_cond_t round_start, round_end;
    uint64_t round_gen;
    bool helpers_stop;
    /* Between rounds round_next is ROUND_IDLE, so a helper that is late for
     * one round never takes a job of the next before it is set up. */
    struct sync_job *_Atomic round_jobs;
    _Atomic size_t round_n, round_next, round_done;
    bus_set *sets;
    waiter *waiters;
    bool stopping;
    sl_databus_options opts;
    sl_databus_stats stats;
    sl_batch_builder builder; /* writer thread only */
};

static int64_t linger_ns(const bus_set *bs)
{
    return (int64_t)bs->set->cfg.linger_ms * 1000000;
}

/* ---- partitioning ------------------------------------------------------- */

/* MurmurHash2 as Kafka's default partitioner uses it, so a key lands on the
 * same partition number as a Kafka producer would put it. */
static uint32_t murmur2(const uint8_t *data, size_t len)
{
    const uint32_t m = 0x5bd1e995, seed = 0x9747b28c;
    const int r = 24;
    uint32_t h = seed ^ (uint32_t)len;
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (len - i) {
    case 3:
        h ^= (uint32_t)data[i + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[i + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[i];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

int32_t sl_databus_partition(sl_set *set, const void *key, size_t key_len)
{
    bus_set *bs = set->bus;
    if (!key)
        return (int32_t)(atomic_fetch_add_explicit(&bs->rr, 1, memory_order_relaxed) %
                         (uint32_t)set->nparts);
    return (int32_t)((murmur2(key, key_len) & 0x7fffffff) % (uint32_t)set->nparts);
}

/* ---- publishing ---------------------------------------------------------- */

int sl_databus_attach(sl_set *set, void *busp, sl_error *err)
{
    sl_databus *bus = busp;
    bus_set *bs = calloc(1, sizeof *bs);
    if (!bs || !(bs->parts = calloc((size_t)set->nparts, sizeof *bs->parts))) {
        free(bs);
        return sl_error_set(err, SL_ENOMEM, "no memory for the Databus buffers of %s", set->name);
    }
    bs->set = set;
    bs->bus = bus;
    for (int32_t p = 0; p < set->nparts; p++) {
        int64_t end = sl_store_next_seq(&set->parts[p]);
        bs->parts[p].next = bs->parts[p].written = bs->parts[p].durable = end;
        bs->parts[p].remote = sl_store_remote(&set->parts[p]);
        bs->parts[p].reported = end;
    }
    set->bus = bs;
    pthread_mutex_lock(&bus->lock);
    bs->next = bus->sets;
    bus->sets = bs;
    pthread_mutex_unlock(&bus->lock);
    return 0;
}

static size_t frame_size(const sl_databus_event *e)
{
    if (e->batch)
        return FRAME_HDR + strlen(e->lane) + e->value_len;
    return FRAME_HDR + strlen(e->lane) + (e->key ? e->key_len : 0) +
           (e->value ? e->value_len : 0) + (e->raw ? FRAME_RAW + e->headers_len : 0);
}

/* The offsets an event takes. */
static size_t event_offsets(const sl_databus_event *e)
{
    return e->batch ? (size_t)e->count : 1;
}

static void frame_put(sl_buf *b, const sl_databus_event *e)
{
    uint8_t *w = b->data + b->len;
    size_t ll = strlen(e->lane), kl = e->key ? e->key_len : 0;
    if (e->batch) {
        uint32_t v32 = (uint32_t)e->value_len, k32 = (uint32_t)e->count;
        memcpy(w, &v32, 4);
        memcpy(w + 4, &k32, 4);
        memcpy(w + 8, &e->ts_ms, 8);
        w[16] = (uint8_t)(ll | FRAME_BATCH_BIT);
        memcpy(w + FRAME_HDR, e->lane, ll);
        memcpy(w + FRAME_HDR + ll, e->value, e->value_len);
        b->len += FRAME_HDR + ll + e->value_len;
        return;
    }
    /* A null value is a raw (Kafka) record's tombstone; events always have one. */
    uint32_t v32 = e->value ? (uint32_t)e->value_len : UINT32_MAX;
    uint32_t k32 = e->key ? (uint32_t)e->key_len : UINT32_MAX;
    memcpy(w, &v32, 4);
    memcpy(w + 4, &k32, 4);
    memcpy(w + 8, &e->ts_ms, 8);
    w[16] = (uint8_t)(ll | (e->raw ? FRAME_RAW_BIT : 0));
    w += FRAME_HDR;
    memcpy(w, e->lane, ll);
    if (kl) /* a NULL key has length 0: memcpy(…, NULL, 0) is undefined */
        memcpy(w + ll, e->key, kl);
    size_t vl = e->value ? e->value_len : 0;
    if (vl)
        memcpy(w + ll + kl, e->value, vl);
    b->len += FRAME_HDR + ll + kl + vl;
    if (e->raw) {
        uint8_t *h = b->data + b->len;
        uint32_t hl = (uint32_t)e->headers_len;
        memcpy(h, &e->header_count, 4);
        memcpy(h + 4, &hl, 4);
        if (hl)
            memcpy(h + FRAME_RAW, e->headers, hl);
        b->len += FRAME_RAW + hl;
    }
}

int sl_databus_publish(sl_databus *bus, sl_set *set, const sl_databus_event *evs, size_t n,
                       sl_databus_result *results, sl_databus_done_fn *done, void *ctx,
                       sl_error *err)
{
    return sl_databus_publish_ack(bus, set, set->cfg.ack, evs, n, results, done, ctx, err);
}

static int publish(sl_databus *bus, sl_set *set, int32_t part, sl_ack ack,
                   const sl_databus_event *evs, size_t n, sl_databus_result *results,
                   sl_databus_done_fn *done, void *ctx, bool entries, bool exact_ack,
                   sl_error *err);

int sl_databus_publish_ack(sl_databus *bus, sl_set *set, sl_ack ack, const sl_databus_event *evs,
                           size_t n, sl_databus_result *results, sl_databus_done_fn *done,
                           void *ctx, sl_error *err)
{
    return publish(bus, set, -1, ack, evs, n, results, done, ctx, false, false, err);
}

int sl_databus_publish_part(sl_databus *bus, sl_set *set, int32_t part, sl_ack ack,
                            const sl_databus_event *evs, size_t n, sl_databus_result *results,
                            sl_databus_done_fn *done, void *ctx, sl_error *err)
{
    if (part < 0 || part >= set->nparts)
        return sl_error_set(err, SL_ERANGE, "set %s has no partition %d (it has %d)", set->name,
                            part, set->nparts);
    if (sl_store_remote(&set->parts[part]))
        return sl_error_set(err, SL_EINVAL, "set %s is Kafka-backed: its cluster picks partitions",
                            set->name);
    /* Its ack as asked, even below the set's: a Kafka client's acks=1 is
     * the leader's acknowledgement, which never waits for a flush. */
    return publish(bus, set, part, ack, evs, n, results, done, ctx, false, true, err);
}

int sl_databus_publish_entries(sl_databus *bus, sl_set *set, sl_ack ack,
                               const sl_databus_event *evs, size_t n, sl_databus_result *results,
                               sl_databus_done_fn *done, void *ctx, sl_error *err)
{
    return publish(bus, set, -1, ack, evs, n, results, done, ctx, true, false, err);
}

static int publish(sl_databus *bus, sl_set *set, int32_t part, sl_ack ack,
                   const sl_databus_event *evs, size_t n, sl_databus_result *results,
                   sl_databus_done_fn *done, void *ctx, bool entries, bool exact_ack,
                   sl_error *err)
{
    bus_set *bs = set->bus;
    int32_t np = set->nparts;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!evs[i].lane || !sl_lane_valid(evs[i].lane, strlen(evs[i].lane)))
            return sl_error_set(err, SL_EINVAL, "event %zu: invalid lane", i);
        else if (evs[i].raw && (evs[i].header_count < 0 || evs[i].headers_len > UINT32_MAX ||
                                (evs[i].headers_len && !evs[i].headers)))
            return sl_error_set(err, SL_EINVAL, "event %zu: invalid headers", i);
        else if (!evs[i].raw && !evs[i].value)
            return sl_error_set(err, SL_EINVAL, "event %zu: no value (only a raw record's may be null)", i);
        else if (evs[i].batch && (part < 0 || !evs[i].value || evs[i].count <= 0 ||
                                  evs[i].value_len < SL_BATCH_HEADER_SIZE ||
                                  evs[i].value_len > UINT32_MAX))
            return sl_error_set(err, SL_EINVAL, "event %zu: not a batch for one partition", i);
    uint64_t stack_need[64], *need = np <= 64 ? stack_need : calloc((size_t)np, sizeof *need);
    if (!need)
        return SL_ENOMEM;
    memset(need, 0, (size_t)np * sizeof *need);
    for (size_t i = 0; i < n; i++) {
        results[i].partition =
            part >= 0 ? part : sl_databus_partition(set, evs[i].key, evs[i].key_len);
        need[results[i].partition] += frame_size(&evs[i]);
    }
    bool set_durable = set->cfg.ack == SL_ACK_DURABLE;
    /* Never less than the set's, unless the caller's ack is exact. */
    bool durable = (set_durable && !exact_ack) || ack == SL_ACK_DURABLE;
    int32_t touched = 0;
    for (int32_t p = 0; p < np; p++)
        touched += need[p] > 0;
    waiter *w = NULL;
    if (durable && !(w = calloc(1, sizeof *w + (size_t)touched * sizeof w->t[0]))) {
        if (need != stack_need)
            free(need);
        return SL_ENOMEM;
    }
    int rc = 0;
    pthread_mutex_lock(&bus->lock);
    if (bus->stopping)
        rc = sl_error_set(err, SL_ESHUTDOWN, "the server is shutting down");
    else if (atomic_load(&set->deleted))
        rc = sl_error_set(err, SL_ENOENT, "set %s was deleted", set->name);
    /* A share that can never fit is reported before any that is only full now. */
    for (int32_t p = 0; p < np && !rc; p++)
        if (need[p] > set->cfg.buffer_bytes)
            rc = sl_error_set(err, SL_ETOOBIG,
                              "the request needs %" PRIu64 " bytes in set %s "
                              "partition %d, more than its whole buffer (%" PRIu64 " bytes)",
                              need[p], set->name, p, set->cfg.buffer_bytes);
    for (int32_t p = 0; p < np && !rc; p++) {
        bus_part *bp = &bs->parts[p];
        if (!need[p])
            continue;
        int failing = bp->failing ? bp->failing : bp->sync_failing;
        if (failing)
            rc = sl_error_set(err, failing, "set %s partition %d cannot write: %s", set->name, p,
                              sl_strerror(failing));
        else if (bp->buffered + need[p] > set->cfg.buffer_bytes)
            rc = sl_error_set(err, SL_EFULL,
                              "set %s partition %d: buffer full (%" PRIu64 " of %" PRIu64 " bytes)",
                              set->name, p, bp->buffered, set->cfg.buffer_bytes);
        else if (sl_buf_reserve(&bp->pending, need[p]))
            rc = SL_ENOMEM;
    }
    if (rc == SL_EFULL)
        atomic_fetch_add_explicit(&bus->stats.full, 1, memory_order_relaxed);
    bool signal = false;
    size_t records = 0;
    if (!rc) {
        int64_t now = sl_clock_mono_ns();
        for (int32_t p = 0, k = 0; w && p < np; p++)
            if (need[p])
                w->t[k++].start = bs->parts[p].next;
        for (size_t i = 0; i < n; i++) {
            bus_part *bp = &bs->parts[results[i].partition];
            if (bp->pending_n == 0) {
                bp->first_ns = now;
                signal = true;
            }
            frame_put(&bp->pending, &evs[i]);
            size_t k = event_offsets(&evs[i]);
            bp->pending_n += k;
            results[i].offset = bp->next;
            bp->next += (int64_t)k;
            results[i].status = 0;
            records += k;
        }
        for (int32_t p = 0, k = 0; p < np; p++) {
            if (!need[p])
                continue;
            bus_part *bp = &bs->parts[p];
            bp->buffered += need[p];
            if (!durable)
                bp->buffer_end = bp->next;
            else if (!set_durable)
                bp->urgent = bp->next, signal = true; /* the writer may be lingering */
            signal |= bp->pending.len >= set->cfg.batch_bytes;
            if (w) {
                w->t[k].part = p;
                w->t[k++].end = bp->next;
            }
        }
        if (w) {
            w->bs = bs;
            w->entries = entries;
            w->done = done;
            w->ctx = ctx;
            w->n = touched;
            w->next = bus->waiters;
            bus->waiters = w;
        }
        atomic_fetch_add_explicit(&set->stats.events_in, records, memory_order_relaxed);
    }
    if (signal || set->cfg.linger_ms == 0)
        pthread_cond_signal(&bus->wake);
    pthread_mutex_unlock(&bus->lock);
    if (need != stack_need)
        free(need);
    if (rc) {
        free(w);
        return rc;
    }
    return w ? 1 : 0;
}

void sl_databus_detach(sl_set *set, void *busp)
{
    (void)busp;
    bus_set *bs = set->bus;
    if (!bs)
        return;
    sl_databus *bus = bs->bus;
    pthread_mutex_lock(&bus->lock);
    for (;;) { /* the writer may be holding this set's frames right now */
        bool busy = false;
        for (int32_t p = 0; p < set->nparts; p++)
            busy |= bs->parts[p].busy || bs->parts[p].syncing;
        if (!busy)
            break;
        pthread_mutex_unlock(&bus->lock);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        pthread_mutex_lock(&bus->lock);
    }
    for (bus_set **pp = &bus->sets; *pp; pp = &(*pp)->next)
        if (*pp == bs) {
            *pp = bs->next;
            break;
        }
    waiter *gone = NULL;
    for (waiter **pp = &bus->waiters; *pp;) {
        waiter *w = *pp;
        if (w->bs == bs) {
            *pp = w->next;
            w->next = gone;
            gone = w;
        } else {
            pp = &w->next;
        }
    }
    pthread_mutex_unlock(&bus->lock);
    while (gone) {
        waiter *w = gone;
        gone = w->next;
        w->done(w->ctx, SL_ESHUTDOWN);
        free(w);
    }
    for (int32_t p = 0; p < set->nparts; p++) {
        if (bs->parts[p].pending_n)
            sl_slog(SL_SLOG_ERROR, "databus",
                    "databus: set %s partition %d detached with %zu events "
                    "unwritten",
                    set->name, p, bs->parts[p].pending_n);
        sl_buf_free(&bs->parts[p].pending);
    }
    free(bs->parts);
    free(bs);
    set->bus = NULL;
}

int64_t sl_databus_next_offset(sl_set *set, int32_t partition)
{
    bus_set *bs = set->bus;
    if (!bs || sl_store_remote(&set->parts[partition])) /* sequence numbers are not offsets */
        return sl_store_end_offset(&set->parts[partition]);
    pthread_mutex_lock(&bs->bus->lock);
    int64_t next = bs->parts[partition].next;
    pthread_mutex_unlock(&bs->bus->lock);
    return next;
}

void sl_databus_fill(sl_set *set, uint64_t *bytes, uint64_t *limit)
{
    bus_set *bs = set->bus;
    uint64_t total = 0;
    pthread_mutex_lock(&bs->bus->lock);
    for (int32_t p = 0; p < set->nparts; p++)
        total += bs->parts[p].buffered;
    pthread_mutex_unlock(&bs->bus->lock);
    *bytes = total;
    *limit = set->cfg.buffer_bytes * (uint64_t)set->nparts;
}

void sl_databus_wait_room(sl_databus *bus, int64_t ms)
{
    struct timespec ts = sl_clock_mono_deadline(ms);
    pthread_mutex_lock(&bus->lock);
    if (!bus->stopping) {
        bus->room_waiters++;
        pthread_cond_signal(&bus->wake); /* a lingering buffer is due now */
        pthread_cond_timedwait(&bus->room, &bus->lock, &ts);
        bus->room_waiters--;
    }
    pthread_mutex_unlock(&bus->lock);
}

const sl_databus_stats *sl_databus_get_stats(const sl_databus *bus)
{
    return &bus->stats;
}

/* ---- the writer ----------------------------------------------------------- */

/* Appends one batch to w's partition; false (w->rc set, logged) on failure. */
static bool append_batch(sl_databus *bus, work *w, sl_set *set, const sl_store *store,
                         sl_batch *batch, int64_t *expect)
{
    sl_error err = {0};
    int64_t base, t0 = sl_clock_mono_ns();
    int rc = sl_store_append(store, batch, &base, &err);
    sl_histogram_observe(&bus->stats.append, sl_clock_mono_ns() - t0);
    if (rc) {
        sl_slog(SL_SLOG_ERROR, "databus", "databus: set %s partition %d: %s", set->name, w->part,
                err.msg[0] ? err.msg : sl_strerror(rc));
        w->rc = rc;
        return false;
    }
    if (base != *expect)
        sl_slog(SL_SLOG_ERROR, "databus",
                "databus: set %s partition %d: offset %" PRId64 " stored at %" PRId64, set->name,
                w->part, *expect, base);
    *expect = base + batch->count;
    atomic_fetch_add_explicit(&bus->stats.batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&set->stats.bytes_in, batch->len, memory_order_relaxed);
    return true;
}

/* Appends w's frames as lane-homogeneous batches of up to batch_bytes (a
 * client's whole batch frame as it is). */
static void write_frames(sl_databus *bus, work *w)
{
    sl_set *set = w->bs->set;
    const sl_store *store = &set->parts[w->part];
    sl_batch_builder *b = &bus->builder;
    b->codec = set->cfg.compression;
    const uint8_t *p = w->frames.data, *end = p + w->frames.len;
    int64_t expect = w->first;
    while (p < end) {
        const uint8_t *batch_start = p;
        size_t batch_n = 0;
        char lane[SL_LANE_MAX + 1];
        memcpy(lane, p + FRAME_HDR, FRAME_LANE_LEN(p[16]));
        lane[FRAME_LANE_LEN(p[16])] = '\0';
        if (batch_start == w->frames.data)
            memcpy(w->lane, lane, sizeof lane);
        else if (strcmp(w->lane, lane) != 0)
            w->mixed = true;
        if (p[16] & FRAME_BATCH_BIT) { /* a client's batch: stored as it is */
            uint32_t blen, count;
            int64_t max_ts;
            memcpy(&blen, p, 4);
            memcpy(&count, p + 4, 4);
            memcpy(&max_ts, p + 8, 8);
            size_t ll = FRAME_LANE_LEN(p[16]);
            sl_batch batch = {.data = (uint8_t *)p + FRAME_HDR + ll,
                              .len = blen,
                              .count = (int32_t)count,
                              .max_ts = max_ts,
                              .lane = lane};
            if (!append_batch(bus, w, set, store, &batch, &expect))
                return;
            w->done_n += count;
            p += FRAME_HDR + ll + blen;
            w->done_bytes += (size_t)(p - batch_start);
            continue;
        }
        if (sl_batch_builder_reset(b, lane)) { /* publish checked lanes: cannot happen */
            w->rc = SL_EINVAL;
            return;
        }
        while (p < end) {
            uint32_t vlen, klen;
            int64_t ts;
            memcpy(&vlen, p, 4);
            memcpy(&klen, p + 4, 4);
            memcpy(&ts, p + 8, 8);
            size_t ll = FRAME_LANE_LEN(p[16]), kl = klen == UINT32_MAX ? 0 : klen;
            bool vnull = vlen == UINT32_MAX;
            if (vnull)
                vlen = 0;
            bool raw = p[16] & FRAME_RAW_BIT;
            if (p[16] & FRAME_BATCH_BIT) /* a whole batch follows: this one ends here */
                break;
            if (batch_n && (ll != strlen(lane) || memcmp(p + FRAME_HDR, lane, ll) != 0 ||
                            sl_batch_builder_bytes(b) + vlen + kl > set->cfg.batch_bytes))
                break;
            const uint8_t *k = p + FRAME_HDR + ll;
            int32_t hn = 0;
            uint32_t hl = 0;
            if (raw) {
                memcpy(&hn, k + kl + vlen, 4);
                memcpy(&hl, k + kl + vlen + 4, 4);
            }
            int arc = raw ? sl_batch_builder_add_raw(b, ts, klen == UINT32_MAX ? NULL : k, kl,
                                                     vnull ? NULL : k + kl, vlen,
                                                     k + kl + vlen + FRAME_RAW, hl, hn)
                          : sl_batch_builder_add(b, ts, klen == UINT32_MAX ? NULL : k, kl, k + kl,
                                                 vlen);
            if (arc) {
                if (batch_n)
                    break; /* full at SL_BATCH_MAX_BYTES: the next batch takes it */
                w->rc = SL_ETOOBIG;
                return;
            }
            batch_n++;
            p += FRAME_HDR + ll + kl + vlen + (raw ? FRAME_RAW + hl : 0);
        }
        sl_batch batch;
        sl_error err = {0};
        int rc = sl_batch_builder_finish(b, &batch, &err);
        if (rc) {
            sl_slog(SL_SLOG_ERROR, "databus", "databus: set %s partition %d: %s", set->name,
                    w->part, err.msg[0] ? err.msg : sl_strerror(rc));
            w->rc = rc;
            return;
        }
        if (!append_batch(bus, w, set, store, &batch, &expect))
            return;
        w->done_n += batch_n;
        w->done_bytes += (size_t)(p - batch_start);
    }
}

/* Takes the frames of every partition that is due; returns how many, and in
 * *deadline the next time something becomes due (INT64_MAX: nothing). */
static size_t collect(sl_databus *bus, work **ws, size_t *cap, int64_t now, int64_t *deadline)
{
    size_t n = 0;
    *deadline = INT64_MAX;
    for (bus_set *bs = bus->sets; bs; bs = bs->next) {
        sl_set *set = bs->set;
        for (int32_t p = 0; p < set->nparts; p++) {
            bus_part *bp = &bs->parts[p];
            if (bp->busy || bp->gave_up || !bp->pending_n)
                continue;
            /* Durable sets do not linger: their publishers wait anyway, and
             * the syncer groups whatever arrives while an fdatasync runs. */
            /* Nor while a publisher waits for room (sl_databus_wait_room):
             * lingering then only keeps it waiting. */
            bool now_due = bp->pending.len >= set->cfg.batch_bytes || bus->stopping ||
                           set->cfg.ack == SL_ACK_DURABLE || bp->urgent > bp->written ||
                           bus->room_waiters;
            int64_t due = bp->failing ? bp->retry_ns : now_due ? now : bp->first_ns + linger_ns(bs);
            if (due > now) {
                *deadline = due < *deadline ? due : *deadline;
                continue;
            }
            if (n == *cap && SL_GROW(*ws, *cap, 16)) /* (new entries zeroed) */
                return n;                              /* try the rest next round */
            work *w = &(*ws)[n++];
            sl_buf keep = w->frames;
            w->bs = bs;
            w->part = p;
            w->frames = bp->pending; /* swap buffers: the writer reuses its own */
            bp->pending = keep;
            bp->pending.len = 0;
            w->n = bp->pending_n;
            w->first = bp->next - (int64_t)bp->pending_n;
            w->done_bytes = w->done_n = 0;
            w->mixed = false; /* the lanes of this round only */
            w->rc = 0;
            bp->pending_n = 0;
            bp->busy = true;
        }
    }
    return n;
}

/* The most a drained buffer keeps for the next round (see the writer). */
#define FRAMES_KEEP (64u << 10)

/* Puts frames the writer could not append back in front of newer ones. */
static void requeue(bus_part *bp, work *w, int64_t now)
{
    size_t rest = w->frames.len - w->done_bytes;
    sl_buf merged = SL_BUF_INIT;
    if (sl_buf_reserve(&merged, rest + bp->pending.len) == 0) {
        sl_buf_append(&merged, w->frames.data + w->done_bytes, rest);
        sl_buf_append(&merged, bp->pending.data, bp->pending.len);
        sl_buf_free(&bp->pending);
        bp->pending = merged;
        bp->pending_n += w->n - w->done_n;
    } else {
        sl_slog(SL_SLOG_ERROR, "databus", "databus: out of memory re-queueing %zu events",
                w->n - w->done_n);
    }
    bp->failing = w->rc;
    bp->retry_ns = now + RETRY_NS;
    bp->first_ns = now;
}

static void finish_waiters(waiter *w, int status);
static waiter *take_waiters(sl_databus *bus, bool all);

/* A durable set's partition could not append because the disk is full.
 * Other errors are retried while the publishers wait (they may pass in a
 * moment); a full disk may last hours, so the publishers already waiting
 * should not hang until a client timeout. Nobody has been answered for the
 * unwritten events (the caller checks none was queued under ack = "buffer",
 * bp->buffer_end): they are dropped (the rest of this round and everything
 * queued behind it, so offsets stay dense: bp->next goes back to
 * bp->written, and those offsets are handed out again) and the waiters
 * needing them are moved to *failed, to be told SL_ENOSPC. The partition is
 * left healthy: the next publish is queued and tries the disk again (and is
 * answered 507 after that attempt if the disk is still full). Some events of
 * a failed waiter may be stored already (written in an earlier batch), so
 * the 507 does not mean "nothing stored". Called locked, after bp->written
 * was set. */
static void drop_unwritten(sl_databus *bus, bus_set *bs, int32_t part, work *w, waiter **failed)
{
    bus_part *bp = &bs->parts[part];
    size_t lost = w->n - w->done_n + bp->pending_n;
    bp->buffered -= w->frames.len - w->done_bytes + bp->pending.len;
    bp->pending.len = 0;
    bp->pending_n = 0;
    bp->next = bp->written;
    bp->failing = 0;
    for (waiter **pp = &bus->waiters; *pp;) {
        waiter *x = *pp;
        bool hit = false;
        for (int32_t i = 0; x->bs == bs && i < x->n; i++)
            hit |= x->t[i].part == part && x->t[i].end > bp->written;
        if (hit) {
            *pp = x->next;
            x->next = *failed;
            *failed = x;
        } else {
            pp = &x->next;
        }
    }
    sl_slog(SL_SLOG_ERROR, "databus",
            "databus: %s/%d: %s: %zu events not written; their publishers get the error",
            bs->set->name, part, sl_strerror(w->rc), lost);
}

static void timed_wait(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline)
{
    if (deadline == INT64_MAX) {
        pthread_cond_wait(c, m);
        return;
    }
    struct timespec ts = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000};
    pthread_cond_timedwait(c, m, &ts);
}

/* The writer: drains due buffers into lane-homogeneous batches and appends
 * them. It never waits for the disk: syncing is the syncer's job, so appends
 * go on while an fdatasync runs. */
static void *writer_main(void *arg)
{
    sl_databus *bus = arg;
    work *ws = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&bus->lock);
    for (;;) {
        int64_t now = sl_clock_mono_ns(), deadline;
        size_t n = collect(bus, &ws, &cap, now, &deadline);
        if (n == 0) {
            if (bus->stopping && deadline == INT64_MAX)
                break;
            timed_wait(&bus->wake, &bus->lock, deadline);
            continue;
        }
        pthread_mutex_unlock(&bus->lock);
        for (size_t i = 0; i < n; i++)
            write_frames(bus, &ws[i]);

        pthread_mutex_lock(&bus->lock);
        now = sl_clock_mono_ns();
        bool want_sync = false;
        waiter *failed = NULL; /* durable publishes whose events could not be written */
        int failed_rc = 0;
        bool remote_moved = false; /* a delivery report came before written moved */
        for (size_t i = 0; i < n; i++) {
            work *w = &ws[i];
            bus_part *bp = &w->bs->parts[w->part];
            bp->busy = false;
            bp->buffered -= w->done_bytes;
            bp->written = w->first + (int64_t)w->done_n;
            if (bp->remote && bp->reported > bp->durable) {
                bp->durable = bp->reported < bp->written ? bp->reported : bp->written;
                remote_moved = true;
            }
            want_sync |=
                w->done_n && (w->bs->set->cfg.ack == SL_ACK_DURABLE || bp->urgent > bp->durable);
            if (w->done_n < w->n && w->rc == SL_ENOSPC && !bus->stopping &&
                w->bs->set->cfg.ack == SL_ACK_DURABLE && bp->buffer_end <= bp->written) {
                drop_unwritten(bus, w->bs, w->part, w, &failed);
                failed_rc = w->rc;
            } else if (w->done_n < w->n) {
                requeue(bp, w, now);
                /* While stopping, a disk that keeps failing would spin: give
                 * up on the partition and say what is lost. */
                if (bus->stopping) {
                    sl_slog(SL_SLOG_ERROR, "databus",
                            "databus: %s/%d: giving up at shutdown (%s): %zu "
                            "events not written",
                            w->bs->set->name, w->part, sl_strerror(bp->failing), bp->pending_n);
                    bp->pending_n = 0;
                    bp->pending.len = 0;
                    bp->gave_up = true;
                }
            } else {
                bp->failing = 0;
            }
            /* A burst grows a partition's two buffers (the one filling and
             * the one being written); kept at their largest they would
             * cost that much per partition for good (thousands of
             * partitions). A partition that went quiet (nothing new while
             * its frames were written) gives back what is past FRAMES_KEEP;
             * a busy one keeps its buffers for the next round. */
            if (bp->pending.len == 0) {
                if (w->frames.cap > FRAMES_KEEP)
                    sl_buf_free(&w->frames);
                if (bp->pending.cap > FRAMES_KEEP)
                    sl_buf_free(&bp->pending);
            }
        }
        if (want_sync)
            pthread_cond_signal(&bus->sync_wake);
        if (bus->room_waiters)
            pthread_cond_broadcast(&bus->room);
        sl_databus_append_fn *on_append = bus->opts.on_append;
        void *on_append_ctx = bus->opts.ctx;
        /* Outcomes are released by the next report, never while waiters
         * being finished read theirs (bus->finishing). */
        waiter *ready = remote_moved ? take_waiters(bus, false) : NULL;
        bus->finishing += ready != NULL;
        pthread_mutex_unlock(&bus->lock);
        finish_waiters(failed, failed_rc);
        if (ready) {
            finish_waiters(ready, 0);
            pthread_mutex_lock(&bus->lock);
            bus->finishing--;
            pthread_mutex_unlock(&bus->lock);
        }
        /* A remote partition's records are readable once delivered, and its
         * end is not a sequence number: its store tells the readers. */
        for (size_t i = 0; i < n && on_append; i++)
            if (ws[i].done_n && !ws[i].bs->parts[ws[i].part].remote)
                on_append(on_append_ctx, ws[i].bs->set, ws[i].part,
                          ws[i].first + (int64_t)ws[i].done_n, ws[i].mixed ? NULL : ws[i].lane);
        pthread_mutex_lock(&bus->lock);
    }
    pthread_mutex_unlock(&bus->lock);
    for (size_t i = 0; i < cap; i++)
        sl_buf_free(&ws[i].frames);
    free(ws);
    return NULL;
}

static bool waiter_ready(const waiter *w)
{
    for (int32_t i = 0; i < w->n; i++)
        if (w->bs->parts[w->t[i].part].durable < w->t[i].end)
            return false;
    return true;
}

/* Unlinks the waiters whose every partition is durable far enough (or all
 * of them with all = true) and returns them as a list. Called locked. */
static waiter *take_waiters(sl_databus *bus, bool all)
{
    waiter *done = NULL, **pp = &bus->waiters;
    while (*pp) {
        waiter *w = *pp;
        if (all || waiter_ready(w)) {
            *pp = w->next;
            w->next = done;
            done = w;
        } else {
            pp = &w->next;
        }
    }
    return done;
}

/* A durable waiter's status: for a remote partition, the first failed
 * delivery among its events (unless the caller reports them itself). */
static int remote_status(const waiter *w)
{
    if (w->entries)
        return 0;
    for (int32_t i = 0; i < w->n; i++) {
        const sl_store *st = &w->bs->set->parts[w->t[i].part];
        sl_error err = {0};
        int rc = sl_store_outcome(st, w->t[i].start, w->t[i].end, &err);
        if (rc)
            return rc;
    }
    return 0;
}

static void finish_waiters(waiter *w, int status)
{
    while (w) {
        waiter *next = w->next;
        w->done(w->ctx, status ? status : remote_status(w));
        free(w);
        w = next;
    }
}

void sl_databus_remote_durable(sl_set *set, int32_t partition, int64_t seq_end)
{
    bus_set *bs = set->bus;
    if (!bs || partition < 0 || partition >= set->nparts)
        return;
    sl_databus *bus = bs->bus;
    pthread_mutex_lock(&bus->lock);
    bus_part *bp = &bs->parts[partition];
    /* A report can come before the writer, back from the append, moved
     * written: kept, and applied by the writer then (remote_catch_up). */
    if (seq_end > bp->reported)
        bp->reported = seq_end;
    if (bp->reported > bp->durable)
        bp->durable = bp->reported < bp->written ? bp->reported : bp->written;
    waiter *done = take_waiters(bus, false);
    bus->finishing++;
    if (bus->writer_done)
        pthread_cond_signal(&bus->sync_wake);
    pthread_mutex_unlock(&bus->lock);
    finish_waiters(done, 0);
    /* Outcomes the waiters still queued need are kept; the rest go, unless
     * waiters taken elsewhere (the writer) are reading theirs right now:
     * then a later report releases them. */
    pthread_mutex_lock(&bus->lock);
    bool release = --bus->finishing == 0;
    int64_t keep = bp->durable;
    for (waiter *w = bus->waiters; release && w; w = w->next)
        for (int32_t i = 0; w->bs == bs && i < w->n; i++)
            if (w->t[i].part == partition && w->t[i].start < keep)
                keep = w->t[i].start;
    pthread_mutex_unlock(&bus->lock);
    if (release)
        sl_store_release(&set->parts[partition], keep);
}

size_t sl_databus_offsets(sl_set *set, sl_databus_result *results, size_t n, sl_error *err)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        const sl_store *st = &set->parts[results[i].partition];
        if (!sl_store_remote(st))
            continue;
        sl_error e = {0};
        int64_t off = -1;
        int rc = sl_store_offset_of(st, results[i].offset, &off, &e);
        results[i].offset = rc ? -1 : off;
        results[i].status = rc;
        if (rc && !failed++ && err)
            *err = e;
    }
    return failed;
}

/* A partition the syncer is to fdatasync in this round. */
typedef struct sync_job sync_job;
struct sync_job {
    bus_set *bs;
    int32_t part;
    int64_t target; /* the written end offset when the job was taken */
    int rc;
};

static void run_sync_job(sl_databus *bus, sync_job *j)
{
    sl_error err = {0};
    int64_t t0 = sl_clock_mono_ns();
    j->rc = sl_store_sync(&j->bs->set->parts[j->part], &err);
    sl_histogram_observe(&bus->stats.fsync, sl_clock_mono_ns() - t0);
    atomic_fetch_add_explicit(&bus->stats.syncs, 1, memory_order_relaxed);
    if (j->rc)
        sl_slog(SL_SLOG_ERROR, "databus", "databus: sync %s/%d: %s", j->bs->set->name, j->part,
                err.msg);
}

/* Takes jobs of the current round until none is left. */
static void run_round(sl_databus *bus)
{
    size_t i;
    while ((i = atomic_fetch_add(&bus->round_next, 1)) < atomic_load(&bus->round_n)) {
        run_sync_job(bus, &atomic_load(&bus->round_jobs)[i]);
        if (atomic_fetch_add(&bus->round_done, 1) + 1 == atomic_load(&bus->round_n)) {
            pthread_mutex_lock(&bus->round_lock);
            pthread_cond_signal(&bus->round_end);
            pthread_mutex_unlock(&bus->round_lock);
        }
    }
}

static void *sync_helper_main(void *arg)
{
    sl_databus *bus = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&bus->round_lock);
    for (;;) {
        while (!bus->helpers_stop && bus->round_gen == seen)
            pthread_cond_wait(&bus->round_start, &bus->round_lock);
        if (bus->helpers_stop)
            break;
        seen = bus->round_gen;
        pthread_mutex_unlock(&bus->round_lock);
        run_round(bus);
        pthread_mutex_lock(&bus->round_lock);
    }
    pthread_mutex_unlock(&bus->round_lock);
    return NULL;
}

/* Runs the n jobs, in parallel with the helpers when there are several. */
static void sync_all(sl_databus *bus, sync_job *jobs, size_t n)
{
    if (n == 1 || bus->nhelpers == 0) {
        for (size_t i = 0; i < n; i++)
            run_sync_job(bus, &jobs[i]);
        return;
    }
    pthread_mutex_lock(&bus->round_lock);
    atomic_store(&bus->round_jobs, jobs);
    atomic_store(&bus->round_n, n);
    atomic_store(&bus->round_done, 0);
    atomic_store(&bus->round_next, 0); /* last: opens the round */
    bus->round_gen++;
    pthread_cond_broadcast(&bus->round_start);
    pthread_mutex_unlock(&bus->round_lock);
    run_round(bus);
    pthread_mutex_lock(&bus->round_lock);
    while (atomic_load(&bus->round_done) < n)
        pthread_cond_wait(&bus->round_end, &bus->round_lock);
    atomic_store(&bus->round_next, ROUND_IDLE);
    pthread_mutex_unlock(&bus->round_lock);
}

/* The syncer: group commit. One fdatasync per partition covers everything
 * appended before it began, and completes every durable waiter it covers.
 * Durable sets are synced as soon as there is something new; buffer sets
 * every buffer_sync_ms, so a crash loses a bounded tail of them. */
static void *syncer_main(void *arg)
{
    sl_databus *bus = arg;
    sync_job *jobs = NULL;
    size_t cap = 0;
    int64_t every = (bus->opts.buffer_sync_ms ? bus->opts.buffer_sync_ms : 1000) * 1000000;
    pthread_mutex_lock(&bus->lock);
    for (;;) {
        int64_t now = sl_clock_mono_ns(), deadline = INT64_MAX;
        size_t n = 0;
        bool left = false, left_remote = false;
        for (bus_set *bs = bus->sets; bs; bs = bs->next) {
            for (int32_t p = 0; p < bs->set->nparts; p++) {
                bus_part *bp = &bs->parts[p];
                if (bp->syncing || bp->gave_up || bp->durable >= bp->written)
                    continue;
                if (bp->remote) { /* its delivery reports make it durable */
                    left_remote = true;
                    continue;
                }
                left = true;
                int64_t due = bp->sync_failing ? bp->sync_retry_ns
                              : bus->writer_done || bs->set->cfg.ack == SL_ACK_DURABLE ||
                                      bp->urgent > bp->durable
                                  ? now
                                  : bp->synced_ns + every;
                if (due > now) {
                    deadline = due < deadline ? due : deadline;
                    continue;
                }
                if (n == cap && sl_grow(&jobs, &cap, sizeof *jobs, 16))
                        break;
                jobs[n++] = (sync_job){bs, p, bp->written, 0};
                bp->syncing = true;
            }
        }
        if (n == 0) {
            /* At stop, remote partitions get a bounded while for their last
             * delivery reports (sl_databus_remote_durable wakes us). */
            if (bus->writer_done && !left &&
                (!left_remote || now - bus->writer_done_ns > REMOTE_DRAIN_NS))
                break;
            if (bus->writer_done && left_remote && deadline > now + 100000000)
                deadline = now + 100000000;
            timed_wait(&bus->sync_wake, &bus->lock, deadline);
            continue;
        }
        pthread_mutex_unlock(&bus->lock);
        sync_all(bus, jobs, n);
        pthread_mutex_lock(&bus->lock);
        now = sl_clock_mono_ns();
        for (size_t i = 0; i < n; i++) {
            bus_part *bp = &jobs[i].bs->parts[jobs[i].part];
            bp->syncing = false;
            if (jobs[i].rc) {
                bp->sync_failing = jobs[i].rc;
                bp->sync_retry_ns = now + RETRY_NS;
                if (bus->writer_done) {
                    sl_slog(SL_SLOG_ERROR, "databus",
                            "databus: %s/%d: giving up at shutdown: %" PRId64
                            " events written but not synced",
                            jobs[i].bs->set->name, jobs[i].part, bp->written - bp->durable);
                    bp->gave_up = true;
                }
            } else {
                bp->sync_failing = 0;
                bp->synced_ns = now;
                if (jobs[i].target > bp->durable)
                    bp->durable = jobs[i].target;
            }
        }
        waiter *done = take_waiters(bus, false);
        bus->finishing++; /* remote ones among them read their outcomes */
        pthread_mutex_unlock(&bus->lock);
        finish_waiters(done, 0);
        pthread_mutex_lock(&bus->lock);
        bus->finishing--;
    }
    /* Whatever is still waiting was never made durable. */
    waiter *rest = take_waiters(bus, true);
    pthread_mutex_unlock(&bus->lock);
    finish_waiters(rest, SL_ESHUTDOWN);
    free(jobs);
    return NULL;
}

int sl_databus_start(const sl_databus_options *opts, sl_databus **out, sl_error *err)
{
    sl_databus *bus = calloc(1, sizeof *bus);
    if (!bus)
        return SL_ENOMEM;
    if (opts)
        bus->opts = *opts;
    pthread_mutex_init(&bus->lock, NULL);
    /* The writer's deadlines are monotonic times (sl_clock_mono_ns). */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&bus->wake, &ca);
    pthread_cond_init(&bus->sync_wake, &ca);
    pthread_cond_init(&bus->room, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&bus->round_lock, NULL);
    atomic_init(&bus->round_next, ROUND_IDLE);
    pthread_cond_init(&bus->round_start, NULL);
    pthread_cond_init(&bus->round_end, NULL);

    sl_batch_builder_init(&bus->builder, SL_CODEC_NONE, 0);
    int e = pthread_create(&bus->thread, NULL, writer_main, bus);
    if (!e && (e = pthread_create(&bus->syncer, NULL, syncer_main, bus))) {
        pthread_mutex_lock(&bus->lock);
        bus->stopping = true;
        pthread_cond_signal(&bus->wake);
        pthread_mutex_unlock(&bus->lock);
        pthread_join(bus->thread, NULL);
    }
    if (e) {
        sl_batch_builder_free(&bus->builder);
        pthread_mutex_destroy(&bus->lock);
        pthread_cond_destroy(&bus->wake);
        pthread_cond_destroy(&bus->sync_wake);
        pthread_cond_destroy(&bus->room);
        free(bus);
        return sl_error_errno(err, e, "start the Databus threads");
    }
    /* Helpers are an optimisation: the syncer works alone if none starts.
     * They start before any sync round, so nhelpers is stable by then. */
    pthread_mutex_lock(&bus->round_lock);
    while (bus->nhelpers < SYNC_HELPERS &&
           pthread_create(&bus->helpers[bus->nhelpers], NULL, sync_helper_main, bus) == 0)
        bus->nhelpers++;
    pthread_mutex_unlock(&bus->round_lock);
    *out = bus;
    return 0;
}

void sl_databus_set_on_append(sl_databus *bus, sl_databus_append_fn *fn, void *ctx)
{
    pthread_mutex_lock(&bus->lock);
    bus->opts.on_append = fn;
    bus->opts.ctx = ctx;
    pthread_mutex_unlock(&bus->lock);
}

void sl_databus_stop(sl_databus *bus)
{
    if (!bus)
        return;
    pthread_mutex_lock(&bus->lock);
    bool join = !bus->stopping;
    bus->stopping = true;
    pthread_cond_signal(&bus->wake);
    pthread_cond_broadcast(&bus->room);
    pthread_mutex_unlock(&bus->lock);
    if (!join)
        return;
    pthread_join(bus->thread, NULL);
    /* Everything is appended: the syncer syncs what is left, answers the
     * waiters and stops. */
    pthread_mutex_lock(&bus->lock);
    bus->writer_done = true;
    bus->writer_done_ns = sl_clock_mono_ns();
    pthread_cond_signal(&bus->sync_wake);
    pthread_mutex_unlock(&bus->lock);
    pthread_join(bus->syncer, NULL);
    pthread_mutex_lock(&bus->round_lock);
    bus->helpers_stop = true;
    pthread_cond_broadcast(&bus->round_start);
    pthread_mutex_unlock(&bus->round_lock);
    for (int i = 0; i < bus->nhelpers; i++)
        pthread_join(bus->helpers[i], NULL);
    bus->nhelpers = 0;
}

void sl_databus_free(sl_databus *bus)
{
    if (!bus)
        return;
    sl_databus_stop(bus);
    while (bus->sets) {
        bus_set *bs = bus->sets;
        bus->sets = bs->next;
        for (int32_t p = 0; p < bs->set->nparts; p++)
            sl_buf_free(&bs->parts[p].pending);
        bs->set->bus = NULL;
        free(bs->parts);
        free(bs);
    }
    sl_batch_builder_free(&bus->builder);
    pthread_mutex_destroy(&bus->lock);
    pthread_cond_destroy(&bus->wake);
    pthread_cond_destroy(&bus->sync_wake);
    pthread_cond_destroy(&bus->room);
    pthread_mutex_destroy(&bus->round_lock);
    pthread_cond_destroy(&bus->round_start);
    pthread_cond_destroy(&bus->round_end);
    free(bus);
}
