/*
 * connectors/source_kafka.c — source.kafka: the bridge in from an external
 * Kafka cluster, a librdkafka high-level consumer (docs/sources.md).
 *
 * This file is the instance: open and close, its two threads, the chunk
 * queue between them, offset commits and metrics. Each record becomes one
 * event (CloudEvents Kafka protocol binding: source_kafka_record.c); the
 * consumer's configuration, callbacks and group state are in
 * source_kafka_group.c (source_kafka_internal.h lists what they share).
 *
 * Two threads, so that a backlog is read at Kafka's pace: the consumer
 * thread polls, converts records into event JSON in chunks and queues them;
 * the emit thread hands the events to the host, flushes, and after each
 * acknowledged flush stores and commits the offsets (at-least-once; a flush
 * ending with SL_ESHUTDOWN commits nothing; refused records are committed
 * with the rest). Rebalance callbacks run in the consumer thread; a
 * revocation is applied after a barrier through the queue: everything read
 * before it flushed and committed synchronously. health() and metrics()
 * read atomics and, under alock, a copy of the assignment.
 */
#include "connectors/source_kafka_internal.h"

#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_TYPE "sluice.kafka.record"
#define BATCH_MSGS 1024                 /* records per consume call */
#define FLUSH_RECORDS 10000             /* flush after this many records … */
#define FLUSH_BYTES ((size_t)1 << 20)   /* … or this many bytes of values */
#define POLL_MS 100                     /* consume wait when nothing is pending */
#define CHUNK_RECORDS 2048              /* records per chunk handed to the emit thread … */
#define CHUNK_BYTES ((size_t)512 << 10) /* … or this many bytes of events */
#define QUEUE_CHUNKS 16                 /* chunks waiting at most */
#define LAG_INTERVAL_MS 1000            /* the lag is computed at most this often */
#define PROBE_INTERVAL_MS 3000          /* brokers down: ask for metadata this often */
#define COMMIT_WAIT_MS 5000             /* a synchronous commit waits at most this long */

/* One event made by the consumer thread, waiting in a chunk for the emit
 * thread: its JSON at arena[off, off + len), its lane (NUL-terminated) at
 * arena[lane_off] when has_lane; skip: refused already (only its offset
 * counts), with the status name code and the reason (NUL-terminated) at
 * arena[off], which the emit thread hands to host->refused(). */
typedef struct kitem {
    size_t off, len, lane_off;
    const char *code;
    bool has_lane, skip;
} kitem;

/* The next offset of one partition after a chunk's records. */
typedef struct ktp {
    char *topic;
    int32_t part;
    int64_t next;
} ktp;

/* Events handed from the consumer thread to the emit thread, in order.
 * barrier: the consumer waits until everything before it (this chunk
 * included) is flushed and committed (a revocation). */
struct kchunk {
    struct kchunk *next;
    sl_buf arena;
    kitem *items;
    size_t n, cap;
    ktp *tps;
    size_t ntps, tcap;
    size_t vbytes; /* value bytes of its records */
    bool barrier;
};

/* ---- the chunk queue ------------------------------------------------------------ */

/* An empty chunk (recycled when possible), or NULL. */
static kchunk *chunk_get(kafka_source *k)
{
    pthread_mutex_lock(&k->qlock);
    kchunk *c = k->qfree;
    if (c) {
        k->qfree = c->next;
        k->nfree--;
    }
    pthread_mutex_unlock(&k->qlock);
    if (!c)
        c = calloc(1, sizeof *c);
    return c;
}

static void chunk_free(kchunk *c)
{
    for (size_t i = 0; i < c->ntps; i++)
        free(c->tps[i].topic);
    free(c->tps);
    free(c->items);
    sl_buf_free(&c->arena);
    free(c);
}

static void chunk_put(kafka_source *k, kchunk *c)
{
    for (size_t i = 0; i < c->ntps; i++)
        free(c->tps[i].topic);
    c->ntps = c->n = c->vbytes = c->arena.len = 0;
    c->barrier = false;
    pthread_mutex_lock(&k->qlock);
    bool keep = k->nfree < QUEUE_CHUNKS + 2;
    if (keep) {
        c->next = k->qfree;
        k->qfree = c;
        k->nfree++;
    }
    pthread_mutex_unlock(&k->qlock);
    if (!keep)
        chunk_free(c);
}

/* Hands c to the emit thread, waiting while the queue is full (the
 * Databus' back-pressure reaches the consumer here). Returns 0, or -1 when
 * the source stops first (c is dropped: its records are not committed). */
static int chunk_push(kafka_source *k, kchunk *c)
{
    pthread_mutex_lock(&k->qlock);
    while (k->qn >= QUEUE_CHUNKS && !atomic_load(&k->stop) && !k->e_done) {
        struct timespec ts = sl_clock_mono_deadline(POLL_MS);
        pthread_cond_timedwait(&k->qcond, &k->qlock, &ts);
    }
    bool ok = !atomic_load(&k->stop) && !k->e_done;
    if (ok) {
        c->next = NULL;
        if (k->qtail)
            k->qtail->next = c;
        else
            k->qhead = c;
        k->qtail = c;
        k->qn++;
        pthread_cond_broadcast(&k->qcond);
    }
    pthread_mutex_unlock(&k->qlock);
    if (!ok)
        chunk_put(k, c);
    return ok ? 0 : -1;
}

/* The next chunk, waiting up to POLL_MS; NULL when there is none. *idle:
 * nothing else is queued. */
static kchunk *chunk_pop(kafka_source *k, bool *idle)
{
    pthread_mutex_lock(&k->qlock);
    if (!k->qhead && !atomic_load(&k->stop) && !k->c_done) {
        struct timespec ts = sl_clock_mono_deadline(POLL_MS);
        pthread_cond_timedwait(&k->qcond, &k->qlock, &ts);
    }
    kchunk *c = k->qhead;
    if (c) {
        k->qhead = c->next;
        if (!k->qhead)
            k->qtail = NULL;
        k->qn--;
        pthread_cond_broadcast(&k->qcond);
    }
    *idle = !k->qhead;
    pthread_mutex_unlock(&k->qlock);
    return c;
}

/* ---- the consumer thread ---------------------------------------------------------- */

/* Records in c that m's partition is consumed up to m. */
static int chunk_track(kchunk *c, const rd_kafka_message_t *m)
{
    ktp *t = c->ntps ? &c->tps[c->ntps - 1] : NULL;
    const char *topic = rd_kafka_topic_name(m->rkt);
    if (!(t && t->part == m->partition && strcmp(t->topic, topic) == 0)) {
        t = NULL;
        for (size_t i = 0; i < c->ntps && !t; i++)
            if (c->tps[i].part == m->partition && strcmp(c->tps[i].topic, topic) == 0)
                t = &c->tps[i];
        if (t) { /* most recent last: the next look-up finds it first */
            ktp tmp = *t;
            *t = c->tps[c->ntps - 1];
            c->tps[c->ntps - 1] = tmp;
            t = &c->tps[c->ntps - 1];
        }
    }
    if (!t) {
        if (c->ntps == c->tcap && sl_grow(&c->tps, &c->tcap, sizeof *c->tps, 8))
                return SL_ENOMEM;
        t = &c->tps[c->ntps];
        if (!(t->topic = strdup(topic)))
            return SL_ENOMEM;
        t->part = m->partition;
        c->ntps++;
    }
    t->next = m->offset + 1;
    return 0;
}

/* Converts m into an item of c (a refused record into a skipped item
 * carrying the reason). Returns 0, or SL_ESHUTDOWN when out of memory until
 * the source stops. Only SL_ENOMEM is retried: a record that cannot be
 * converted is refused, never retried. */
static int chunk_add(kafka_source *k, kchunk *c, const rd_kafka_message_t *m)
{
    for (;;) {
        int rc = 0;
        size_t mark = c->arena.len;
        if (c->n == c->cap)
            rc = SL_GROW(c->items, c->cap, 256);
        const char *lane = NULL;
        if (!rc)
            rc = sl__source_kafka_record(k, m, &c->arena, &lane);
        if (rc && rc != SL_ENOMEM) { /* refused: k->why_code and k->why say why */
            c->arena.len = mark;
            kitem *it = &c->items[c->n];
            it->off = mark;
            it->len = 0;
            it->skip = true;
            it->has_lane = false;
            it->code = k->why_code;
            rc = sl_buf_append(&c->arena, k->why, strlen(k->why) + 1) ? SL_ENOMEM : 0;
        } else if (!rc) {
            kitem *it = &c->items[c->n];
            it->off = mark;
            it->len = c->arena.len - mark;
            it->skip = false;
            it->code = NULL;
            it->has_lane = lane != NULL;
            if (it->has_lane) {
                it->lane_off = c->arena.len;
                rc = sl_buf_append(&c->arena, lane, strlen(lane) + 1) ? SL_ENOMEM : 0;
            }
        }
        if (!rc)
            rc = chunk_track(c, m);
        if (!rc) {
            c->n++;
            c->vbytes += m->len;
            return 0;
        }
        c->arena.len = mark; /* out of memory: wait, then try again */
        k->host->log(k->host->ctx, "source.kafka: out of memory; retrying");
        if (k->host->wait(k->host->ctx, 100))
            return SL_ESHUTDOWN;
    }
}

/* Waits until the emit thread passed a barrier sent now: everything
 * consumed before is flushed and committed. */
static void barrier(kafka_source *k)
{
    kchunk *c = chunk_get(k);
    if (!c)
        return; /* out of memory: the revocation goes on; at worst duplicates */
    c->barrier = true;
    pthread_mutex_lock(&k->qlock);
    uint64_t want = ++k->barriers;
    pthread_mutex_unlock(&k->qlock);
    if (chunk_push(k, c))
        return;
    pthread_mutex_lock(&k->qlock);
    while (k->bdone < want && !atomic_load(&k->stop) && !k->e_done) {
        struct timespec ts = sl_clock_mono_deadline(POLL_MS);
        pthread_cond_timedwait(&k->qcond, &k->qlock, &ts);
    }
    pthread_mutex_unlock(&k->qlock);
}

/* Brokers reported down: librdkafka says when they are, not when one is
 * back; an idle consumer asks for metadata now and then. */
static void probe_brokers(kafka_source *k)
{
    int64_t now = sl_clock_mono_ms();
    if (!atomic_load(&k->brokers_down) || now - k->probe_at_ms < PROBE_INTERVAL_MS)
        return;
    k->probe_at_ms = now;
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(k->rk, 0, NULL, &md, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
        atomic_store(&k->brokers_down, false);
    }
}

static bool running(kafka_source *k)
{
    bool e_done;
    pthread_mutex_lock(&k->qlock);
    e_done = k->e_done;
    pthread_mutex_unlock(&k->qlock);
    return !e_done && !atomic_load(&k->stop) && !k->host->stopping(k->host->ctx);
}

/* The consumer thread: polls batches, converts every record into a chunk
 * and hands the chunk on; applies revocations once the emit thread
 * committed what came before. */
static void *consume_thread(void *arg)
{
    kafka_source *k = arg;
    rd_kafka_message_t *msgs[BATCH_MSGS];
    kchunk *c = NULL;
    bool down = false;
    while (!down && running(k)) {
        /* What is there now; when nothing is, wait for one record (a
         * batch call with a timeout would wait to fill the whole batch). */
        ssize_t n = rd_kafka_consume_batch_queue(k->q, 0, msgs, BATCH_MSGS);
        if (n == 0)
            n = rd_kafka_consume_batch_queue(k->q, POLL_MS, msgs, 1);
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = msgs[i];
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    k->host->log(k->host->ctx, "source.kafka: %s%s%s",
                                 m->rkt ? rd_kafka_topic_name(m->rkt) : "", m->rkt ? ": " : "",
                                 rd_kafka_message_errstr(m));
            } else if (!down) {
                atomic_store(&k->brokers_down, false);
                atomic_fetch_add(&k->records, 1);
                atomic_fetch_add(&k->bytes, m->len);
                while (!c && !down && !(c = chunk_get(k))) /* out of memory: wait */
                    down = k->host->wait(k->host->ctx, 100);
                if (!down && chunk_add(k, c, m))
                    down = true;
                if (!down && (c->n >= CHUNK_RECORDS || c->arena.len >= CHUNK_BYTES)) {
                    down = chunk_push(k, c) != 0; /* when stopping, c is dropped */
                    c = NULL;
                }
            }
            rd_kafka_message_destroy(m);
        }
        if (c && c->n && !down) {
            down = chunk_push(k, c) != 0;
            c = NULL;
        }
        if (down)
            break;
        if (k->revoking) {
            barrier(k);
            sl__source_kafka_unassign(k, k->revoking, k->revoke_coop);
            rd_kafka_topic_partition_list_destroy(k->revoking);
            k->revoking = NULL;
        }
        if (n <= 0)
            probe_brokers(k);
        sl__source_kafka_join_check(k);
    }
    if (c)
        chunk_put(k, c);
    /* Stopping: what was not acknowledged stays uncommitted. A revocation
     * still waiting is applied, so that closing does not wait for it. */
    k->in_loop = false;
    if (k->revoking) {
        sl__source_kafka_unassign(k, k->revoking, k->revoke_coop);
        rd_kafka_topic_partition_list_destroy(k->revoking);
        k->revoking = NULL;
    }
    pthread_mutex_lock(&k->qlock);
    k->c_done = true;
    pthread_cond_broadcast(&k->qcond);
    pthread_mutex_unlock(&k->qlock);
    return NULL;
}

/* ---- the emit thread ---------------------------------------------------------------- */

/* Commits the stored offsets of the assignment synchronously, waiting at
 * most COMMIT_WAIT_MS; what (a few words) names it in messages. Not
 * attempted while every broker is known down (it would wait for nothing:
 * the records are read again, never lost) nor when the assignment was lost
 * (the commit would be refused). A commit with nothing stored
 * (RD_KAFKA_RESP_ERR__NO_OFFSET) is fine. */
static void commit_sync(kafka_source *k, const char *what)
{
    if (atomic_load(&k->brokers_down) || rd_kafka_assignment_lost(k->rk))
        return;
    rd_kafka_queue_t *q = rd_kafka_queue_new(k->rk);
    if (!q)
        return;
    rd_kafka_resp_err_t e = rd_kafka_commit_queue(k->rk, NULL, q, NULL, NULL);
    if (!e) {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, COMMIT_WAIT_MS);
        e = !ev ? RD_KAFKA_RESP_ERR__TIMED_OUT : rd_kafka_event_error(ev);
        if (ev)
            rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET && e != RD_KAFKA_RESP_ERR__STATE) {
        atomic_fetch_add(&k->commit_failed, 1);
        k->host->log(k->host->ctx,
                     "source.kafka: %s offset commit failed: %s (the records may be delivered "
                     "again)",
                     what, rd_kafka_err2str(e));
    }
}

/* Publishes what was emitted and, once the Databus acknowledged it, stores
 * and commits the offsets: asynchronously, or at a revocation barrier
 * (sync) synchronously and always, even with nothing new, since the last
 * asynchronous commit may have failed (common as a rebalance starts) and the
 * partitions would go to their next owner at the old offset. Returns 0, or
 * SL_ESHUTDOWN (nothing committed). */
static int flush_commit(kafka_source *k, bool sync)
{
    sl_error err = {0};
    int rc = k->host->flush(k->host->ctx, &err);
    while (rc == SL_ENOMEM) { /* the batch is kept: try again */
        k->host->log(k->host->ctx, "source.kafka: %s; retrying", err.msg);
        if (k->host->wait(k->host->ctx, 100))
            return SL_ESHUTDOWN;
        rc = k->host->flush(k->host->ctx, &err);
    }
    if (rc)
        return SL_ESHUTDOWN; /* not acknowledged, so not committed */
    k->pbytes = 0;
    if (!k->uncommitted && !sync)
        return 0;
    if (k->uncommitted) {
        /* A partition revoked meanwhile refuses its offset (its new owner
         * reads those records again: duplicates, never a loss). */
        (void)rd_kafka_offsets_store(k->rk, k->pend);
        rd_kafka_topic_partition_list_destroy(k->pend);
        k->pend = rd_kafka_topic_partition_list_new(16);
        k->uncommitted = 0;
    }
    /* Stored offsets are committed again by both calls. */
    if (sync)
        commit_sync(k, "revocation");
    else
        rd_kafka_commit(k->rk, NULL, 1);
    return 0;
}

/* Emits the events of c, then notes its offsets for the next commit.
 * Returns 0, or SL_ESHUTDOWN. */
static int emit_chunk(kafka_source *k, kchunk *c)
{
    const sl_source_host *host = k->host;
    for (size_t i = 0; i < c->n; i++) {
        const kitem *it = &c->items[i];
        if (it->skip) { /* refused by the consumer thread: the host counts it too */
            atomic_fetch_add(&k->refused, 1);
            if (host->refused)
                host->refused(host->ctx, it->code, (const char *)c->arena.data + it->off);
            continue;
        }
        for (;;) {
            sl_error err = {0};
            const char *base = (const char *)c->arena.data;
            int rc = host->emit_event(host->ctx, base + it->off, it->len,
                                      it->has_lane ? base + it->lane_off : NULL, &err);
            if (rc == SL_EINVAL)
                atomic_fetch_add(&k->refused, 1); /* the host counted and logged it */
            if (rc != SL_ENOMEM)
                break;
            /* Out of memory: publish what there is (this chunk's offsets
             * are not noted yet), then try again. */
            host->log(host->ctx, "source.kafka: out of memory; retrying");
            if (flush_commit(k, false) || host->wait(host->ctx, 100))
                return SL_ESHUTDOWN;
        }
    }
    for (size_t i = 0; i < c->ntps; i++) {
        rd_kafka_topic_partition_t *p =
            rd_kafka_topic_partition_list_find(k->pend, c->tps[i].topic, c->tps[i].part);
        if (!p)
            p = rd_kafka_topic_partition_list_add(k->pend, c->tps[i].topic, c->tps[i].part);
        if (p->offset < c->tps[i].next)
            p->offset = c->tps[i].next;
    }
    k->uncommitted += c->n;
    k->pbytes += c->vbytes;
    return 0;
}

/* The emit thread: hands the chunks' events to the host, flushes after
 * FLUSH_RECORDS / FLUSH_BYTES or when nothing more is queued, and commits
 * after each acknowledged flush. */
static void *emit_thread(void *arg)
{
    kafka_source *k = arg;
    for (;;) {
        bool idle = false;
        kchunk *c = chunk_pop(k, &idle);
        if (!c && (atomic_load(&k->stop) || k->host->stopping(k->host->ctx)))
            break;
        if (!c) {
            pthread_mutex_lock(&k->qlock);
            bool over = k->c_done && !k->qhead;
            pthread_mutex_unlock(&k->qlock);
            if (over)
                break;
        }
        bool bar = false;
        if (c) {
            int rc = emit_chunk(k, c);
            bar = c->barrier;
            chunk_put(k, c);
            if (rc)
                break;
        }
        if ((bar || (k->uncommitted &&
                     (idle || k->uncommitted >= FLUSH_RECORDS || k->pbytes >= FLUSH_BYTES))) &&
            flush_commit(k, bar))
            break;
        if (bar) {
            pthread_mutex_lock(&k->qlock);
            k->bdone++;
            pthread_cond_broadcast(&k->qcond);
            pthread_mutex_unlock(&k->qlock);
        }
    }
    pthread_mutex_lock(&k->qlock);
    k->e_done = true;
    pthread_cond_broadcast(&k->qcond);
    pthread_mutex_unlock(&k->qlock);
    return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------- */

static void free_source(kafka_source *k)
{
    if (k->pend)
        rd_kafka_topic_partition_list_destroy(k->pend);
    if (k->assigned)
        rd_kafka_topic_partition_list_destroy(k->assigned);
    for (kchunk *c = k->qhead, *next; c; c = next) {
        next = c->next;
        chunk_free(c);
    }
    for (kchunk *c = k->qfree, *next; c; c = next) {
        next = c->next;
        chunk_free(c);
    }
    pthread_mutex_destroy(&k->qlock);
    pthread_cond_destroy(&k->qcond);
    sl_buf_free(&k->esc);
    sl_buf_free(&k->ctb);
    sl_buf_free(&k->lag_text);
    pthread_mutex_destroy(&k->mlock);
    pthread_mutex_destroy(&k->alock);
    free(k->group);
    free(k->type_json);
    free(k->source_json);
    free(k);
}

static int subscribe(kafka_source *k, sl_error *err)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)k->conf->ntopics);
    for (size_t i = 0; i < k->conf->ntopics; i++)
        rd_kafka_topic_partition_list_add(l, k->conf->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        return sl_error_set(err, SL_EINVAL, "source.kafka: subscribe: %s", rd_kafka_err2str(e));
    return 0;
}

static void kafka_stop(void *impl)
{
    kafka_source *k = impl;
    pthread_mutex_lock(&k->qlock);
    atomic_store(&k->stop, true);
    pthread_cond_broadcast(&k->qcond);
    pthread_mutex_unlock(&k->qlock);
    if (k->rk)
        rd_kafka_yield(k->rk);
}

static int kafka_open(const sl_source_config *cfg, const sl_source_host *host, void **impl,
                      sl_error *err)
{
    const sl_source_kafka_conf *kc = cfg->conf;
    if (!kc->brokers || !kc->ntopics)
        return sl_error_set(err, SL_EINVAL, "source.kafka needs brokers and topics");
    kafka_source *k = calloc(1, sizeof *k);
    if (!k)
        return sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
    pthread_mutex_init(&k->mlock, NULL);
    pthread_mutex_init(&k->alock, NULL);
    pthread_mutex_init(&k->qlock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->qcond, &ca);
    pthread_condattr_destroy(&ca);
    k->cfg = cfg;
    k->conf = kc;
    k->host = host;
    k->pend = rd_kafka_topic_partition_list_new(16);
    k->assigned = rd_kafka_topic_partition_list_new(16);
    if (kc->group)
        k->group = strdup(kc->group);
    else if (asprintf(&k->group, "sluice-%s", host->name ? host->name : "kafka") < 0)
        k->group = NULL;
    int rc = 0;
    sl_buf jb = SL_BUF_INIT;
    const char *type = cfg->type ? cfg->type : DEFAULT_TYPE;
    if (sl_json_put_string(&jb, type, strlen(type)) == 0) {
        k->type_json = (char *)jb.data;
        k->type_json_len = jb.len;
    } else {
        rc = sl_error_set(err, SL_EINVAL, "source.kafka: type is not UTF-8");
    }
    jb = (sl_buf)SL_BUF_INIT;
    if (!rc && cfg->source) {
        if (sl_json_put_string(&jb, cfg->source, strlen(cfg->source)) == 0) {
            k->source_json = (char *)jb.data;
            k->source_json_len = jb.len;
        } else {
            rc = sl_error_set(err, SL_EINVAL, "source.kafka: source is not UTF-8");
        }
    }
    if (!rc && (!k->group || !k->pend || !k->assigned))
        rc = sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
    if (!rc && !(k->rk = sl__source_kafka_consumer(k, err)))
        rc = err && err->code ? err->code : SL_EINVAL;
    if (!rc) {
        /* Consumer callbacks and messages come through one queue. */
        rd_kafka_poll_set_consumer(k->rk);
        k->q = rd_kafka_queue_get_consumer(k->rk);
        sl__source_kafka_set_joining(k, true, 0); /* before the first callback can come */
        rc = subscribe(k, err);
    }
    if (!rc) {
        if (pthread_create(&k->emitter, NULL, emit_thread, k))
            rc = sl_error_set(err, SL_ENOMEM, "source.kafka: cannot start its threads");
        else
            k->emitting = true;
    }
    if (!rc) {
        k->in_loop = true;
        if (pthread_create(&k->thread, NULL, consume_thread, k)) {
            k->in_loop = false;
            rc = sl_error_set(err, SL_ENOMEM, "source.kafka: cannot start its threads");
        } else {
            k->started = true;
        }
    }
    if (rc) {
        if (k->emitting) {
            kafka_stop(k);
            pthread_join(k->emitter, NULL);
        }
        if (k->q)
            rd_kafka_queue_destroy(k->q);
        if (k->rk) {
            rd_kafka_consumer_close(k->rk);
            rd_kafka_destroy(k->rk);
        }
        free_source(k);
        return rc;
    }
    *impl = k;
    return 0;
}

/* Only with coop_risk (see SETTLE_WAIT_MS): before closing, polls the
 * consumer until its first assignment arrives (served by on_rebalance;
 * records polled meanwhile are dropped without storing their offsets: they
 * are read again), at most SETTLE_WAIT_MS, and not while every broker is
 * known down (no JoinGroup answer can come then). */
static void settle_group(kafka_source *k)
{
    if (!k->coop_risk || atomic_load(&k->assigned_once))
        return;
    rd_kafka_message_t *msgs[64];
    int64_t end = sl_clock_mono_ms() + SETTLE_WAIT_MS;
    while (!atomic_load(&k->assigned_once) && !atomic_load(&k->brokers_down) &&
           !atomic_load(&k->fatal) && sl_clock_mono_ms() < end) {
        ssize_t n = rd_kafka_consume_batch_queue(k->q, POLL_MS, msgs, 64);
        for (ssize_t i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
    }
    if (!atomic_load(&k->assigned_once) && !atomic_load(&k->brokers_down))
        k->host->log(k->host->ctx,
                     "source.kafka: closing before the group's first assignment "
                     "(librdkafka %s may abort here: see docs/sources.md)",
                     rd_kafka_version_str());
}

static void kafka_close(void *impl)
{
    kafka_source *k = impl;
    if (!k)
        return;
    kafka_stop(k);
    if (k->started)
        pthread_join(k->thread, NULL);
    if (k->emitting)
        pthread_join(k->emitter, NULL);
    /* Everything flushed was committed asynchronously: one synchronous
     * commit makes sure the last one is on the broker before we leave
     * (bounded, and skipped while every broker is down: a stop or reload
     * is not held for the session timeout). */
    commit_sync(k, "final");
    settle_group(k);
    rd_kafka_queue_destroy(k->q);
    rd_kafka_consumer_close(k->rk); /* leaves the group (its revocation is applied at once) */
    rd_kafka_destroy(k->rk);
    free_source(k);
}

/* Rebuilds the lag lines (caller holds alock): high watermark − position of
 * every assigned partition whose both are known (librdkafka's cached
 * values: no request is made). */
static void lag_refresh(kafka_source *k)
{
    const char *name = k->host->name ? k->host->name : "";
    k->lag_text.len = 0;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(k->assigned);
    if (!l)
        return;
    rd_kafka_position(k->rk, l);
    for (int i = 0; i < l->cnt; i++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_topic_partition_t *p = &l->elems[i];
        if (rd_kafka_get_watermark_offsets(k->rk, p->topic, p->partition, &lo, &hi) || hi < 0)
            continue;
        int64_t pos = p->offset >= 0 ? p->offset : -1;
        if (pos < 0)
            continue;
        char pn[16];
        snprintf(pn, sizeof pn, "%d", (int)p->partition);
        sl_metrics_i64(&k->lag_text, "sluice_source_kafka_lag", hi > pos ? hi - pos : 0, "source",
                       name, "topic", p->topic, "partition", pn, NULL);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static size_t kafka_metrics(void *impl, char *out, size_t cap)
{
    static const char *const fam[][2] = {
        {"sluice_source_kafka_records_total", "Records read (refused ones too)."},
        {"sluice_source_kafka_bytes_total", "Bytes of record values read."},
        {"sluice_source_kafka_refused_total", "Records refused (not stored)."},
        {"sluice_source_kafka_commit_failures_total",
         "Offset commits the group coordinator refused (those records may be read again)."},
    };
    kafka_source *k = impl;
    sl_buf b = SL_BUF_INIT;
    const char *name = k->host->name ? k->host->name : "";
    uint64_t vals[] = {atomic_load(&k->records), atomic_load(&k->bytes), atomic_load(&k->refused),
                       atomic_load(&k->commit_failed)};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        sl_metrics_family(&b, fam[i][0], SL_METRIC_COUNTER, fam[i][1]);
        sl_metrics_u64(&b, fam[i][0], vals[i], "source", name, NULL);
    }
    pthread_mutex_lock(&k->alock);
    int64_t now = sl_clock_mono_ms();
    if (!k->lag_at_ms || now - k->lag_at_ms >= LAG_INTERVAL_MS) {
        lag_refresh(k);
        k->lag_at_ms = now;
    }
    sl_metrics_family(&b, "sluice_source_kafka_assigned_partitions", SL_METRIC_GAUGE,
                      "Partitions assigned to this member of the consumer group.");
    sl_metrics_i64(&b, "sluice_source_kafka_assigned_partitions", k->assigned->cnt, "source", name,
                   NULL);
    sl_metrics_family(&b, "sluice_source_kafka_lag", SL_METRIC_GAUGE,
                      "High watermark minus the consumer's position, per assigned partition.");
    if (k->lag_text.len)
        sl_buf_append(&b, k->lag_text.data, k->lag_text.len);
    pthread_mutex_unlock(&k->alock);
    return sl_metrics_copy(&b, out, cap);
}

static const sl_conf_key kafka_keys[] = {
    {"brokers", SL_KEY_STRING, SL_CONF_FIELD(sl_source_kafka_conf, brokers), 0, 0, "required",
     "bootstrap servers, `\"host:9092,host2:9092\"`"},
    {"topics", SL_KEY_STRINGS, SL_CONF_FIELD(sl_source_kafka_conf, topics), 0, 0, "required",
     "topic names, or regexes starting with `^`; a string or a list"},
    {"group", SL_KEY_STRING, SL_CONF_FIELD(sl_source_kafka_conf, group), 0, 0, "\"sluice-NAME\"",
     "consumer group; offsets are committed only after the events are stored"},
    {"properties", SL_KEY_PROPS, SL_CONF_FIELD(sl_source_kafka_conf, properties), 0, 0, "none",
     "any librdkafka consumer property (set last)"},
};

static void kafka_check_conf(const sl_source_config *cfg, const sl_conf_check *chk)
{
    const sl_source_kafka_conf *kc = cfg->conf;
    if (!kc->brokers || !kc->ntopics)
        chk->problem(chk->ctx, NULL, "brokers and topics are required");
}

const sl_source_ops sl_source_kafka_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "kafka",
    .check = sl__source_kafka_check,
    .open = kafka_open,
    .stop = kafka_stop,
    .close = kafka_close,
    .health = sl__source_kafka_health,
    .metrics = kafka_metrics,
    .conf_keys = kafka_keys,
    .nconf_keys = sizeof kafka_keys / sizeof *kafka_keys,
    .conf_size = sizeof(sl_source_kafka_conf),
    .doc = "consume topics of an external Kafka cluster (consumer group; cooperative-sticky with "
           "librdkafka 2.3 or later, see docs/sources.md)",
    .check_conf = kafka_check_conf,
};
