/*
 * kafka/kfetch.c — Fetch (v4–11) and ListOffsets (v1–3): a set's stored
 * batches go out exactly as they are in the segment files (sl_log_slice
 * parts of the response, sent with sendfile by the listener), so a Kafka
 * consumer reads back byte for byte what was produced, and events that came
 * in over HTTP appear as CloudEvents structured-mode records.
 *
 * Lanes (docs/kafka-protocol.md says the same for users). A Kafka consumer
 * reads one lane of a set, chosen by its client.id:
 *   - no "sluice.lane=" in client.id: the base lane "" only;
 *   - "sluice.lane=NAME" anywhere in client.id: lane NAME only, where NAME is
 *     what follows the "=" up to the end of client.id or the first ',', ';',
 *     ' ' or '&' (so "app-1,sluice.lane=eu" and "sluice.lane=eu;app-1" both
 *     select "eu"); the first occurrence counts;
 *   - "sluice.lane=*": every lane; "sluice.lane=" (empty NAME): the base lane;
 *   - a NAME that is not a lane name ([a-z0-9-]{1,32}) fails every partition
 *     of the Fetch with INVALID_REQUEST (42), logged once, rather than
 *     silently reading another lane.
 * Offsets are the partition's, shared by all lanes: a lane's consumer sees
 * gaps where other lanes' batches are (as after compaction), and other
 * lanes' batches after its lane's last one come as one empty record batch
 * (no records, the offsets they span), as Kafka's log cleaner leaves them,
 * so the consumer's position reaches the partition's end and its lag is 0
 * when it has read its lane. ListOffsets does not depend on the lane.
 *
 * Sizes follow Kafka (KIP-74): a partition gets at most its
 * partition_max_bytes and the response at most max_bytes of records, always
 * in whole batches, except that the first batch of the first partition with
 * data is returned even when it is larger than both, so a consumer can never
 * be stuck behind a big batch. Fetch below v10 cannot carry zstd: batches
 * stop before the first zstd batch, and a partition whose next batch is zstd
 * answers UNSUPPORTED_COMPRESSION_TYPE.
 *
 * Long poll: when the records found are fewer than min_bytes and max_wait_ms
 * is positive, the request parks with one sl_wait per partition (core/bus/
 * waits.h) at the position after which new data would count, all with the
 * same deadline; the first wake-up posts the request, whose resume runs the
 * whole fetch again (min_bytes counts as met once the deadline passed). Only
 * a fetch whose every partition is caught up waits: an error, or a budget
 * that is full, answers at once.
 *
 * Fetch sessions (KIP-227) are not kept: session_id must be 0 (epoch -1 or
 * 0, answered with session_id 0, "no session"), so every fetch is a full one.
 */
#include "kafka/kafka_internal.h"

#include "core/base/clock.h"
#include "core/base/crc32c.h"
#include "core/base/varint.h"
#include "core/log/batch.h"
#include "core/bus/set.h"
#include "core/bus/waits.h"
#include "core/log/store.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Codes kproto.h does not name (only Fetch uses them). */
#define KERR_FETCH_SESSION_ID_NOT_FOUND 70
#define KERR_INVALID_FETCH_SESSION_EPOCH 71

/* Slices one partition may contribute (a slice stops at a segment's end
 * and, for one lane, at the end of that lane's run of batches). */
#define KF_MAX_SLICES 32
/* Longest long poll served, whatever the client asks: clients send 500 ms
 * (librdkafka) to 5 s (kafkajs); a parked request holds its connection. */
#define KF_MAX_WAIT_MS 300000
/* Passes of one fetch without parking (data arriving between a pass and its
 * waits' registration makes another pass). */
#define KF_MAX_ROUNDS 4

#define LANE_KEY "sluice.lane="

/* ---- lanes ---------------------------------------------------------------- */

typedef struct kf_lane {
    bool all; /* every lane (the slice's NULL lane) */
    bool bad; /* the selector names no valid lane */
    char name[SL_LANE_MAX + 1];
} kf_lane;

/* The lane client.id selects (the rule at the top). */
static void lane_select(const char *client_id, kf_lane *out)
{
    memset(out, 0, sizeof *out);
    const char *p = strstr(client_id, LANE_KEY);
    if (!p)
        return;
    p += strlen(LANE_KEY);
    size_t n = strcspn(p, ",; &");
    if (n == 1 && p[0] == '*') {
        out->all = true;
        return;
    }
    if (n > SL_LANE_MAX || !sl_lane_valid(p, n)) {
        out->bad = true;
        return;
    }
    memcpy(out->name, p, n);
    out->name[n] = '\0';
}

/* ---- the parked fetch ----------------------------------------------------- */

/* Where a caught-up partition waits: woken when its end passes pos. */
typedef struct kf_pos {
    const sl_set *set;
    int32_t part;
    int64_t pos;
} kf_pos;

typedef struct kfetch {
    sl_kreq *r;
    sl_kr body; /* the request body, read again by every pass */
    int64_t deadline_ns;
    int32_t min_bytes;
    _Atomic bool posted; /* a wake-up posted r in this pending period */
    sl_wait *waits;      /* registered in the current pending period */
    size_t nwaits, waits_cap;
    kf_pos *pos; /* the last pass's caught-up partitions */
    size_t npos, pos_cap;
} kfetch;

/* What one pass found. */
typedef struct kf_pass {
    int16_t version;
    kf_lane lane;
    int32_t max_bytes; /* the response's records at most (KIP-74 aside) */
    uint64_t total;    /* record bytes in the response */
    bool got_data;     /* some partition returned a batch (KIP-74) */
    bool answer_now;   /* an error or a full budget: no long poll */
    bool oom;
} kf_pass;

/* Runs on an appender's or the timer's thread with the registry's lock
 * held: only flag and post. */
static void fetch_wake(sl_wait *w)
{
    kfetch *f = w->data;
    if (!atomic_exchange(&f->posted, true))
        sl_kreq_post(f->r);
}

/* Takes every registered waiter out; after it no wake-up can come. */
static void cancel_waits(sl_kreq *r, kfetch *f)
{
    sl_waits *ws = r->k->waits ? r->k->waits : r->k->o.waits;
    for (size_t i = 0; i < f->nwaits; i++)
        sl_waits_cancel(ws, &f->waits[i]);
    f->nwaits = 0;
}

/* Registers a waiter per caught-up partition. True: parked (a wake-up will
 * post r). False: data came meanwhile (or the registry is stopping), nothing
 * is registered and the caller fetches again at once. */
static bool fetch_park(sl_kreq *r, kfetch *f)
{
    sl_waits *ws = r->k->waits ? r->k->waits : r->k->o.waits;
    if (!ws || f->npos == 0)
        return false;
    while (f->waits_cap < f->npos)
        if (SL_GROW(f->waits, f->waits_cap, 8) != 0)
            return false;
    atomic_store(&f->posted, false);
    for (size_t i = 0; i < f->npos; i++) {
        sl_wait *w = &f->waits[i];
        memset(w, 0, sizeof *w);
        w->data = f;
        w->wake = fetch_wake;
        if (!sl_waits_add(ws, w, f->pos[i].set, f->pos[i].part, f->pos[i].pos, f->deadline_ns)) {
            cancel_waits(r, f);
            /* A waiter registered before may have fired: its post is on
             * its way, and a second pass now would make two responses. */
            return atomic_load(&f->posted);
        }
        f->nwaits = i + 1;
    }
    return true;
}

static bool push_pos(kfetch *f, const sl_set *set, int32_t part, int64_t pos)
{
    if (!f)
        return true;
    if (f->npos == f->pos_cap && SL_GROW(f->pos, f->pos_cap, 8) != 0)
        return false;
    f->pos[f->npos++] = (kf_pos){.set = set, .part = part, .pos = pos};
    return true;
}

/* ---- reading batches ------------------------------------------------------ */

/* For a Fetch below v10: cuts s before its first zstd batch. Returns 0 (s
 * may be shorter), 1 when its very first batch is zstd (s untouched), or an
 * SL_E… code when the headers cannot be read. */
static int cut_zstd(sl_log_slice *s, sl_error *err)
{
    uint64_t pos = s->pos, end = s->pos + s->len;
    int64_t next = s->first_offset;
    while (pos < end) {
        uint8_t h[SL_BATCH_HEADER_SIZE];
        ssize_t n = pread(s->fd, h, sizeof h, (off_t)pos);
        if (n != (ssize_t)sizeof h)
            return sl_error_set(err, SL_EIO, "short read of a batch header at byte %" PRIu64, pos);
        sl_batch_info in;
        int rc = sl_batch_header(h, sizeof h, &in, err);
        if (rc)
            return rc;
        if ((in.attributes & 7) == SL_CODEC_ZSTD)
            break;
        next = in.base_offset + in.last_offset_delta + 1;
        pos += sl_batch_size(&in);
    }
    if (pos == s->pos)
        return 1;
    if (pos < end) {
        s->len = pos - s->pos;
        s->next_offset = next;
        s->compressed = false;
    }
    return 0;
}

static void release_slices(sl_log_slice *sl, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_log_slice_release(&sl[i]);
}

static uint64_t room_for(const kf_pass *c, int32_t part_max, uint64_t bytes)
{
    uint64_t pm = part_max > 0 ? (uint64_t)part_max : 0;
    uint64_t rm = c->max_bytes > 0 ? (uint64_t)c->max_bytes : 0;
    uint64_t a = pm > bytes ? pm - bytes : 0;
    uint64_t b = rm > c->total + bytes ? rm - c->total - bytes : 0;
    return a < b ? a : b;
}

/* A record batch with no records covering offsets [from, to): what a lane's
 * consumer gets for the other lanes' batches after its last one, so that
 * its position moves to the partition's end (Kafka's log cleaner leaves
 * such empty batches too, and clients step over them), and a consumer of a
 * quiet lane on a busy partition is caught up rather than lagging forever. */
static void put_skip(sl_kw *w, int64_t from, int64_t to)
{
    uint8_t b[SL_BATCH_HEADER_SIZE] = {0};
    int64_t delta = to - from - 1;
    if (delta > INT32_MAX) /* the rest on the next fetch */
        delta = INT32_MAX;
    sl_be64_put(b, (uint64_t)from);
    sl_be32_put(b + 8, SL_BATCH_HEADER_SIZE - 12);
    b[16] = 2;                                  /* magic; attributes 0: no codec */
    sl_be32_put(b + 23, (uint32_t)delta);       /* lastOffsetDelta */
    sl_be64_put(b + 27, (uint64_t)INT64_C(-1)); /* firstTimestamp */
    sl_be64_put(b + 35, (uint64_t)INT64_C(-1)); /* maxTimestamp */
    sl_be64_put(b + 43, (uint64_t)INT64_C(-1)); /* producerId */
    sl_be16_put(b + 51, 0xffff);                /* producerEpoch */
    sl_be32_put(b + 53, 0xffffffffu);           /* baseSequence; count 0 at 57 */
    sl_be32_put(b + 17, sl_crc32c(0, b + 21, sizeof b - 21));
    sl_kw_raw(w, b, sizeof b);
}

/* One partition of the response: finds its batches and writes its entry. */
static void fetch_partition(sl_kreq *r, kfetch *f, kf_pass *c, sl_set *set, int16_t terr,
                            int32_t part, int64_t offset, int32_t part_max, int8_t isolation)
{
    int16_t err = terr;
    int64_t hwm = -1, start = -1;
    sl_log_slice sl[KF_MAX_SLICES];
    size_t ns = 0;
    uint64_t bytes = 0;
    int64_t pos = offset;
    int64_t skip_from = -1; /* other lanes' records up to pos: an empty batch says so */
    /* A set deleted since the look-up (a resumed long poll looks it up
     * again) has closed stores. */
    if (!err && (part < 0 || part >= set->nparts || atomic_load(&set->deleted)))
        err = SL_KERR_UNKNOWN_TOPIC_OR_PARTITION;
    if (!err && c->lane.bad)
        err = SL_KERR_INVALID_REQUEST;
    if (!err) {
        const sl_store *st = &set->parts[part];
        const char *lane = c->lane.all ? NULL : c->lane.name;
        start = sl_store_start_offset(st);
        int64_t end = sl_store_end_offset(st);
        bool caught_up = false;
        if (offset < start || offset > end) {
            err = SL_KERR_OFFSET_OUT_OF_RANGE;
        } else {
            while (ns < KF_MAX_SLICES) {
                uint64_t room = room_for(c, part_max, bytes);
                bool may_exceed = !c->got_data && ns == 0; /* KIP-74 */
                if (room == 0 && !may_exceed)
                    break;
                /* The end before the read: what the slice did not return
                 * below it belongs to other lanes, so new data for this
                 * consumer can only come past it. */
                int64_t end_before = sl_store_end_offset(st);
                sl_log_slice s;
                sl_error e = {0};
                int rc = sl_store_slice_get(st, pos, lane, room ? (size_t)room : 1, &s, &e);
                if (rc) {
                    if (ns == 0) {
                        err = rc == SL_ERANGE ? SL_KERR_OFFSET_OUT_OF_RANGE
                                              : SL_KERR_KAFKA_STORAGE_ERROR;
                        if (rc != SL_ERANGE)
                            sl__kafka_log_once(r, "fetch %s/%d at %" PRId64 ": %s", set->name,
                                               (int)part, pos, e.msg);
                    }
                    break;
                }
                if (s.len == 0) {
                    /* Reading every lane, an empty slice means pos is the
                     * end; an end that moved past it meanwhile makes the
                     * waiter's registration fail, so we read again. */
                    caught_up = true;
                    if (lane && end_before > pos) {
                        skip_from = pos;
                        pos = end_before;
                    }
                    break;
                }
                if (s.compressed && c->version < 10) {
                    rc = cut_zstd(&s, &e);
                    if (rc) {
                        sl_log_slice_release(&s);
                        if (ns == 0)
                            err = rc == 1 ? SL_KERR_UNSUPPORTED_COMPRESSION_TYPE
                                          : SL_KERR_KAFKA_STORAGE_ERROR;
                        if (rc < 0)
                            sl__kafka_log_once(r, "fetch %s/%d: %s", set->name, (int)part, e.msg);
                        break;
                    }
                }
                if (s.len > room && !may_exceed) {
                    sl_log_slice_release(&s);
                    break;
                }
                sl[ns++] = s;
                bytes += s.len;
                c->got_data = true;
                pos = s.next_offset;
                if (s.len > room)
                    break; /* the one oversized batch fills everything */
            }
        }
        if (err) {
            release_slices(sl, ns);
            ns = 0;
            bytes = 0;
            skip_from = -1;
        }
        if (skip_from >= 0)
            bytes += SL_BATCH_HEADER_SIZE;
        /* After the reads, so that no record sent lies past it. */
        hwm = sl_store_end_offset(st);
        if (ns && sl[ns - 1].next_offset > hwm)
            hwm = sl[ns - 1].next_offset;
        if (!err && caught_up) {
            if (!push_pos(f, set, part, pos))
                c->oom = true;
        } else {
            c->answer_now = true; /* an error, or more data than we took */
        }
    } else {
        c->answer_now = true;
    }
    sl_kw *w = &r->w;
    sl_kw_i32(w, part);
    sl_kw_i16(w, err);
    sl_kw_i64(w, hwm);
    sl_kw_i64(w, hwm); /* last_stable_offset: no transactions, so the high watermark */
    if (c->version >= 5)
        sl_kw_i64(w, start);
    /* aborted_transactions: none ever; Kafka sends null to read_uncommitted. */
    sl_kw_array(w, false, isolation == 1 ? 0 : -1);
    if (c->version >= 11)
        sl_kw_i32(w, -1); /* preferred_read_replica: none, read from us */
    sl_kw_i32(w, (int32_t)bytes);
    for (size_t i = 0; i < ns; i++)
        sl_kreq_add_file(r, &sl[i]); /* releases the slice even on failure */
    if (skip_from >= 0)
        put_skip(w, skip_from, pos);
    c->total += bytes;
}

/* Drops what a previous pass wrote. */
static void reset_response(sl_kreq *r)
{
    for (size_t i = 0; i < r->nfiles; i++)
        sl_log_slice_release(&r->files[i].slice);
    r->nfiles = 0;
    r->out.len = 0;
}

/* The set of a topic a reader asks for. Rights first, so that a reader
 * without them cannot tell which topics exist; never created. */
static int16_t read_topic(sl_kreq *r, sl_kstr topic, sl_set **set)
{
    char name[SL_SET_NAME_MAX + 1];
    if (sl_kstr_copy(topic, name, sizeof name) && !sl__kafka_allowed(r, SL_AUTH_READ, name))
        return SL_KERR_TOPIC_AUTHORIZATION_FAILED;
    return sl__kafka_topic(r, topic, false, set);
}

/* One whole pass over the request, writing the response body. Returns
 * SL_KREQ_DONE (a response is written, maybe to be discarded for a long
 * poll) or SL_KREQ_CLOSE for a malformed request. */
static int fetch_pass(sl_kreq *r, kfetch *f, kf_pass *c)
{
    int16_t v = r->h.version;
    sl_kr rd = f ? f->body : r->body;
    reset_response(r);
    if (f)
        f->npos = 0;
    memset(c, 0, sizeof *c);
    c->version = v;
    lane_select(r->client_id, &c->lane);
    (void)sl_kr_i32(&rd); /* replica_id: -1 for consumers; no followers here */
    (void)sl_kr_i32(&rd); /* max_wait_ms: read by the caller */
    (void)sl_kr_i32(&rd); /* min_bytes: likewise */
    c->max_bytes = sl_kr_i32(&rd);
    int8_t isolation = sl_kr_i8(&rd);
    int32_t session_id = 0, epoch = -1;
    if (v >= 7) {
        session_id = sl_kr_i32(&rd);
        epoch = sl_kr_i32(&rd);
    }
    if (!sl_kr_ok(&rd)) {
        sl__kafka_log_once(r, "malformed Fetch request");
        return SL_KREQ_CLOSE;
    }
    sl_kw *w = &r->w;
    sl_kw_i32(w, 0); /* throttle_time_ms */
    if (v >= 7) {
        int16_t top = 0;
        if (session_id != 0)
            top = KERR_FETCH_SESSION_ID_NOT_FOUND;
        else if (epoch != -1 && epoch != 0)
            top = KERR_INVALID_FETCH_SESSION_EPOCH;
        sl_kw_i16(w, top);
        sl_kw_i32(w, 0); /* session_id: no session kept */
        if (top) {
            sl_kw_array(w, false, 0);
            c->answer_now = true;
            return SL_KREQ_DONE;
        }
    }
    if (c->lane.bad)
        sl__kafka_log_once(r, "client.id \"%s\" selects no valid lane (%s[a-z0-9-]{1,32} or %s*)",
                           r->client_id, LANE_KEY, LANE_KEY);
    size_t pmin = 4 + 8 + 4 + (v >= 5 ? 8 : 0) + (v >= 9 ? 4 : 0);
    int32_t nt = sl_kr_array(&rd, false, 2 + 4);
    sl_kw_array(w, false, nt < 0 ? 0 : nt);
    for (int32_t t = 0; t < nt && sl_kr_ok(&rd); t++) {
        sl_kstr topic = sl_kr_str(&rd, false);
        int32_t np = sl_kr_array(&rd, false, pmin);
        if (!sl_kr_ok(&rd))
            break;
        sl_set *set = NULL;
        int16_t terr = read_topic(r, topic, &set);
        sl_kw_str(w, false, topic.p, topic.len);
        sl_kw_array(w, false, np < 0 ? 0 : np);
        for (int32_t i = 0; i < np; i++) {
            int32_t part = sl_kr_i32(&rd);
            if (v >= 9)
                (void)sl_kr_i32(&rd); /* current_leader_epoch: we have one epoch */
            int64_t offset = sl_kr_i64(&rd);
            if (v >= 5)
                (void)sl_kr_i64(&rd); /* log_start_offset: a follower's */
            int32_t part_max = sl_kr_i32(&rd);
            if (!sl_kr_ok(&rd))
                break;
            fetch_partition(r, f, c, set, terr, part, offset, part_max, isolation);
        }
    }
    if (v >= 7) { /* forgotten_topics_data: only sessions have them */
        int32_t nf = sl_kr_array(&rd, false, 2 + 4);
        for (int32_t i = 0; i < nf && sl_kr_ok(&rd); i++) {
            (void)sl_kr_str(&rd, false);
            int32_t n = sl_kr_array(&rd, false, 4);
            sl_kr_skip(&rd, (size_t)(n > 0 ? n : 0) * 4);
        }
    }
    if (v >= 11)
        (void)sl_kr_str(&rd, false); /* rack_id */
    if (!sl_kr_ok(&rd)) {
        sl__kafka_log_once(r, "malformed Fetch request");
        return SL_KREQ_CLOSE;
    }
    return SL_KREQ_DONE;
}

/* Passes until the answer is due or the request parked (f NULL: one pass,
 * no long poll). */
static int fetch_run(sl_kreq *r, kfetch *f)
{
    for (int round = 0;; round++) {
        bool final = !f || round >= KF_MAX_ROUNDS || atomic_load(&r->k->stopping) ||
                     sl_clock_mono_ns() >= f->deadline_ns - 1000000;
        kf_pass c;
        int rc = fetch_pass(r, f, &c);
        if (rc != SL_KREQ_DONE)
            return rc;
        uint64_t min = f && f->min_bytes > 0 ? (uint64_t)f->min_bytes : 0;
        if (!final && !c.answer_now && !c.oom && c.total < min) {
            if (fetch_park(r, f))
                return SL_KREQ_PENDING;
            continue; /* data came while registering: read it */
        }
        atomic_fetch_add_explicit(&r->k->stats.fetched_bytes, c.total, memory_order_relaxed);
        return SL_KREQ_DONE;
    }
}

static int fetch_resume(sl_kreq *r)
{
    kfetch *f = r->state;
    cancel_waits(r, f);
    atomic_store(&f->posted, false);
    return fetch_run(r, f);
}

/* The connection closed while parked: true when no post can come any more. */
static bool fetch_cancel(sl_kreq *r)
{
    kfetch *f = r->state;
    cancel_waits(r, f);
    return !atomic_load(&f->posted);
}

static void fetch_cleanup(sl_kreq *r)
{
    kfetch *f = r->state;
    if (!f)
        return;
    cancel_waits(r, f);
    free(f->waits);
    free(f->pos);
    free(f);
    r->state = NULL;
}

int sl__kafka_fetch(sl_kreq *r)
{
    if (r->h.version < 4 || r->h.version > 11) {
        sl__kafka_log_once(r, "unsupported Fetch version");
        return SL_KREQ_CLOSE;
    }
    sl_kr rd = r->body;
    (void)sl_kr_i32(&rd); /* replica_id */
    int32_t max_wait = sl_kr_i32(&rd);
    int32_t min_bytes = sl_kr_i32(&rd);
    if (!sl_kr_ok(&rd)) {
        sl__kafka_log_once(r, "malformed Fetch request");
        return SL_KREQ_CLOSE;
    }
    kfetch *f = calloc(1, sizeof *f);
    if (!f)
        return fetch_run(r, NULL); /* answered at once, without a long poll */
    f->r = r;
    f->body = r->body;
    f->min_bytes = min_bytes;
    if (max_wait > KF_MAX_WAIT_MS)
        max_wait = KF_MAX_WAIT_MS;
    f->deadline_ns = sl_clock_mono_ns() + (int64_t)(max_wait > 0 ? max_wait : 0) * 1000000;
    atomic_init(&f->posted, false);
    r->state = f;
    r->resume = fetch_resume;
    r->cancel = fetch_cancel;
    r->cleanup = fetch_cleanup;
    return fetch_run(r, f);
}

/* ---- ListOffsets ---------------------------------------------------------- */

/* The timestamp of the record at offset (the one a time look-up found), or
 * fallback when it cannot be read. */
static int64_t record_ts(const sl_store *st, int64_t offset, int64_t fallback)
{
    void *rd = NULL;
    sl_record rec;
    int64_t ts = fallback;
    if (sl_store_reader_open(st, offset, NULL, &rd, NULL) == 0) {
        if (sl_store_reader_next(st, rd, &rec, NULL) == 0 && rec.offset == offset)
            ts = rec.timestamp;
        sl_store_reader_close(st, rd);
    }
    return ts;
}

int sl__kafka_list_offsets(sl_kreq *r)
{
    int16_t v = r->h.version;
    if (v < 1 || v > 3) {
        sl__kafka_log_once(r, "unsupported ListOffsets version");
        return SL_KREQ_CLOSE;
    }
    sl_kr *rd = &r->body;
    sl_kw *w = &r->w;
    (void)sl_kr_i32(rd); /* replica_id */
    if (v >= 2)
        (void)sl_kr_i8(rd); /* isolation_level: no transactions, both levels alike */
    if (v >= 2)
        sl_kw_i32(w, 0); /* throttle_time_ms */
    int32_t nt = sl_kr_array(rd, false, 2 + 4);
    sl_kw_array(w, false, nt < 0 ? 0 : nt);
    for (int32_t t = 0; t < nt && sl_kr_ok(rd); t++) {
        sl_kstr topic = sl_kr_str(rd, false);
        int32_t np = sl_kr_array(rd, false, 4 + 8);
        if (!sl_kr_ok(rd))
            break;
        sl_set *set = NULL;
        int16_t terr = read_topic(r, topic, &set);
        sl_kw_str(w, false, topic.p, topic.len);
        sl_kw_array(w, false, np < 0 ? 0 : np);
        for (int32_t i = 0; i < np; i++) {
            int32_t part = sl_kr_i32(rd);
            int64_t ts = sl_kr_i64(rd);
            if (!sl_kr_ok(rd))
                break;
            int16_t err = terr;
            int64_t out_ts = -1, out_off = -1;
            if (!err && (part < 0 || part >= set->nparts))
                err = SL_KERR_UNKNOWN_TOPIC_OR_PARTITION;
            if (!err) {
                const sl_store *st = &set->parts[part];
                if (ts == -1) {
                    out_off = sl_store_end_offset(st);
                } else if (ts == -2) {
                    out_off = sl_store_start_offset(st);
                } else {
                    sl_error e = {0};
                    int64_t off;
                    int rc = sl_store_offset_for_time(st, ts < 0 ? 0 : ts, &off, &e);
                    if (rc) {
                        sl__kafka_log_once(r, "offset for time in %s/%d: %s", set->name,
                                           (int)part, e.msg);
                        err = SL_KERR_KAFKA_STORAGE_ERROR;
                    } else if (off < sl_store_end_offset(st)) {
                        /* Past the end Kafka answers -1/-1, which the
                         * clients read as "no such record yet". */
                        out_off = off;
                        out_ts = record_ts(st, off, ts);
                    }
                }
            }
            sl_kw_i32(w, part);
            sl_kw_i16(w, err);
            sl_kw_i64(w, out_ts);
            sl_kw_i64(w, out_off);
        }
    }
    if (!sl_kr_ok(rd)) {
        sl__kafka_log_once(r, "malformed ListOffsets request");
        return SL_KREQ_CLOSE;
    }
    return SL_KREQ_DONE;
}
