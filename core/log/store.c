/*
 * core/log/store.c — the embedded log as a storage backend (see core/log/store.h):
 * thin adapters from the store table to core/log/log.h, and pooled stores that
 * park (below).
 */
#include "core/log/store.h"
#include "core/base/lane_name.h"
#include "core/base/clock.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int log_append(void *impl, sl_batch *b, int64_t *base_offset, sl_error *err)
{
    return sl_log_append(impl, b, base_offset, err);
}

static int log_sync(void *impl, sl_error *err)
{
    return sl_log_sync(impl, err);
}

static int log_reader_open(void *impl, int64_t offset, const char *lane, void **reader,
                           sl_error *err)
{
    return sl_log_reader_open(impl, offset, lane, (sl_log_reader **)reader, err);
}

static int log_reader_next(void *reader, sl_record *rec, sl_error *err)
{
    return sl_log_reader_next(reader, rec, err);
}

static int64_t log_reader_position(void *reader)
{
    return sl_log_reader_position(reader);
}

static void log_reader_close(void *reader)
{
    sl_log_reader_close(reader);
}

static int log_offset_for_time(void *impl, int64_t ts_ms, int64_t *offset, sl_error *err)
{
    return sl_log_offset_for_time(impl, ts_ms, offset, err);
}

static int64_t log_start(void *impl)
{
    return sl_log_start_offset(impl);
}

static int64_t log_end(void *impl)
{
    return sl_log_end_offset(impl);
}

static int log_retain(void *impl, int64_t now_ms, sl_error *err)
{
    return sl_log_retain(impl, now_ms, NULL, err);
}

static void log_stat(void *impl, uint64_t *bytes, uint64_t *segments)
{
    *bytes = sl_log_size_bytes(impl);
    *segments = sl_log_segment_count(impl);
}

static void log_close(void *impl)
{
    sl_log_close(impl);
}

const sl_store_ops sl_store_log_ops = {
    .abi_version = SL_STORE_ABI_VERSION,
    .name = "log",
    .append = log_append,
    .sync = log_sync,
    .reader_open = log_reader_open,
    .reader_next = log_reader_next,
    .reader_position = log_reader_position,
    .reader_close = log_reader_close,
    .offset_for_time = log_offset_for_time,
    .start_offset = log_start,
    .end_offset = log_end,
    .retain = log_retain,
    .stat = log_stat,
    .close = log_close,
};

int sl_store_open_log(sl_store *st, const char *dir, const sl_log_config *cfg,
                      const sl_log_open_options *opts, sl_error *err)
{
    sl_log_open_options o = {.create = true};
    sl_log *log;
    int rc = sl_log_open(dir, cfg, opts ? opts : &o, &log, err);
    if (rc)
        return rc;
    st->ops = &sl_store_log_ops;
    st->impl = log;
    st->data = NULL;
    return 0;
}

int sl_store_append(const sl_store *st, sl_batch *b, int64_t *base_offset, sl_error *err)
{
    return st->ops->append(st->impl, b, base_offset, err);
}

int sl_store_sync(const sl_store *st, sl_error *err)
{
    return st->ops->sync(st->impl, err);
}

int sl_store_reader_open(const sl_store *st, int64_t offset, const char *lane, void **reader,
                         sl_error *err)
{
    return st->ops->reader_open(st->impl, offset, lane, reader, err);
}

int sl_store_reader_next(const sl_store *st, void *reader, sl_record *rec, sl_error *err)
{
    return st->ops->reader_next(reader, rec, err);
}

int64_t sl_store_reader_position(const sl_store *st, void *reader)
{
    return st->ops->reader_position(reader);
}

void sl_store_reader_close(const sl_store *st, void *reader)
{
    st->ops->reader_close(reader);
}

int sl_store_offset_for_time(const sl_store *st, int64_t ts_ms, int64_t *offset, sl_error *err)
{
    return st->ops->offset_for_time(st->impl, ts_ms, offset, err);
}

int64_t sl_store_start_offset(const sl_store *st)
{
    return st->ops->start_offset(st->impl);
}

int64_t sl_store_end_offset(const sl_store *st)
{
    return st->ops->end_offset(st->impl);
}

int sl_store_retain(const sl_store *st, int64_t now_ms, sl_error *err)
{
    return st->ops->retain(st->impl, now_ms, err);
}

void sl_store_stat(const sl_store *st, uint64_t *bytes, uint64_t *segments)
{
    st->ops->stat(st->impl, bytes, segments);
}

bool sl_store_remote(const sl_store *st)
{
    return st->ops && st->ops->abi_version >= 2 && st->ops->remote;
}

int64_t sl_store_next_seq(const sl_store *st)
{
    return sl_store_remote(st) ? st->ops->next_seq(st->impl) : sl_store_end_offset(st);
}

int sl_store_outcome(const sl_store *st, int64_t from, int64_t to, sl_error *err)
{
    return sl_store_remote(st) ? st->ops->outcome(st->impl, from, to, err) : 0;
}

int sl_store_offset_of(const sl_store *st, int64_t seq, int64_t *offset, sl_error *err)
{
    if (!sl_store_remote(st)) {
        *offset = seq; /* a local log's sequence numbers are its offsets */
        return 0;
    }
    return st->ops->offset_of(st->impl, seq, offset, err);
}

void sl_store_release(const sl_store *st, int64_t seq)
{
    if (sl_store_remote(st))
        st->ops->release(st->impl, seq);
}

void sl_store_close(sl_store *st)
{
    if (st->ops)
        st->ops->close(st->impl);
    st->ops = NULL;
    st->impl = NULL;
}

/* ---- pooled stores --------------------------------------------------------
 *
 * The embedded log behind a layer that parks it (closes it cleanly, keeping
 * a summary) when it is idle or when the pool has too many open, and reopens
 * it on use (see core/log/store.h).
 *
 * State of one store: OPEN (log set), PARKING (a parker holds mu and is
 * closing it) or PARKED (log NULL, summary valid). The hot path (append,
 * sync, reads) pins without a lock: it increments pins, then checks that the
 * state is OPEN; a parker sets PARKING, then checks that pins is 0. Both are
 * sequentially consistent, so at least one of them sees the other: either
 * the parker backs off, or the user undoes its pin and takes the slow path,
 * which waits on mu and reopens. Everything else (park, reopen, close) runs
 * under the store's mu; the pool's list of open stores under the pool's mu,
 * always taken after a store's mu, or before one only with trylock.
 */

enum { ST_OPEN, ST_PARKING, ST_PARKED };

typedef struct park park;

struct sl_store_pool {
    pthread_mutex_t mu; /* guards the open list and the stores count */
    park *head;         /* open stores, in no order */
    _Atomic size_t max_open;
    _Atomic uint64_t stores, open, parks, reopens;
};

struct park {
    pthread_mutex_t mu;
    sl_store_pool *pool;
    char *dir;
    sl_log_config cfg;
    sl_log_open_options opts; /* create off: a reopening never makes a new log */
    sl_log *log;              /* NULL while parked */
    _Atomic int state;
    _Atomic int pins;
    _Atomic int64_t used_ns;    /* last use, for LRU and idle parking */
    _Atomic int64_t start, end; /* while parked: the summary's */
    sl_log_summary sum;         /* while parked */
    park *prev, *next;          /* the pool's open list */
    bool listed;
};

/* ---- the pool's list ---------------------------------------------------- */

static void list_add(sl_store_pool *pool, park *p) /* pool->mu held */
{
    p->prev = NULL;
    p->next = pool->head;
    if (pool->head)
        pool->head->prev = p;
    pool->head = p;
    p->listed = true;
    atomic_fetch_add(&pool->open, 1);
}

static void list_del(sl_store_pool *pool, park *p) /* pool->mu held */
{
    if (!p->listed)
        return;
    if (p->prev)
        p->prev->next = p->next;
    else
        pool->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
    p->listed = false;
    atomic_fetch_sub(&pool->open, 1);
}

/* ---- park and reopen ---------------------------------------------------- */

/* Closes the open, unpinned store. Called with p->mu held (and pool->mu when
 * pool_locked). Returns 0, SL_EDEFERRED when pinned, or the sync's error:
 * a store whose data cannot be made durable stays open, so that the sync a
 * writer makes next reports the failure instead of a parked store's 0. */
static int park_locked(park *p, bool pool_locked, sl_error *err)
{
    if (!p->log)
        return 0;
    atomic_store(&p->state, ST_PARKING);
    if (atomic_load(&p->pins) != 0) {
        atomic_store(&p->state, ST_OPEN);
        return SL_EDEFERRED;
    }
    int rc = sl_log_sync(p->log, err);
    if (rc) {
        atomic_store(&p->state, ST_OPEN);
        return rc;
    }
    sl_log_summarize(p->log, &p->sum);
    atomic_store(&p->start, p->sum.start);
    atomic_store(&p->end, p->sum.end);
    sl_log_close(p->log);
    p->log = NULL;
    if (!pool_locked)
        pthread_mutex_lock(&p->pool->mu);
    list_del(p->pool, p);
    if (!pool_locked)
        pthread_mutex_unlock(&p->pool->mu);
    atomic_fetch_add(&p->pool->parks, 1);
    atomic_store(&p->state, ST_PARKED);
    return 0;
}

/* Reopens a parked store; p->mu held. */
static int reopen_locked(park *p, sl_error *err)
{
    sl_log *log;
    int rc = sl_log_open(p->dir, &p->cfg, &p->opts, &log, err);
    if (rc)
        return rc;
    p->log = log;
    pthread_mutex_lock(&p->pool->mu);
    list_add(p->pool, p);
    pthread_mutex_unlock(&p->pool->mu);
    atomic_fetch_add(&p->pool->reopens, 1);
    atomic_store(&p->state, ST_OPEN);
    return 0;
}

/* Parks victim, found under pool->mu (held by the caller), unless its own
 * lock is busy (SL_EDEFERRED: someone is using it right now). */
static int try_park(park *victim)
{
    int rc = SL_EDEFERRED;
    if (pthread_mutex_trylock(&victim->mu) == 0) {
        rc = park_locked(victim, true, NULL);
        pthread_mutex_unlock(&victim->mu);
    }
    return rc;
}

/* Parks least recently used unpinned stores (never keep) while more than the
 * limit are open. Each victim is parked under the pool's mu, so that a store
 * being closed (which unlists itself under it) cannot be freed meanwhile; its
 * own mu is only tried, never waited for, so the lock order holds. */
static void enforce(sl_store_pool *pool, const park *keep)
{
    for (int tries = 0; tries < 8 && atomic_load(&pool->open) > atomic_load(&pool->max_open);) {
        pthread_mutex_lock(&pool->mu);
        park *victim = NULL;
        int64_t oldest = INT64_MAX;
        for (park *p = pool->head; p; p = p->next) {
            int64_t u = atomic_load_explicit(&p->used_ns, memory_order_relaxed);
            if (p != keep && u < oldest && atomic_load(&p->pins) == 0) {
                oldest = u;
                victim = p;
            }
        }
        int rc = victim ? try_park(victim) : SL_EDEFERRED;
        pthread_mutex_unlock(&pool->mu);
        if (!victim)
            break;
        if (rc)
            tries++;
    }
}

static void touch(park *p)
{
    atomic_store_explicit(&p->used_ns, sl_clock_mono_ns(), memory_order_relaxed);
}

/* Pins the live log into *log. A parked store is reopened, unless
 * if_open: then *log is NULL and the pin not taken. Returns 0 or the
 * reopening's error. */
static int pin(park *p, bool if_open, sl_log **log, sl_error *err)
{
    /* No touch here: a pinned store is never a victim, and unpin() touches. */
    atomic_fetch_add(&p->pins, 1);
    if (atomic_load(&p->state) == ST_OPEN) {
        *log = p->log;
        return 0;
    }
    atomic_fetch_sub(&p->pins, 1);
    pthread_mutex_lock(&p->mu); /* waits for a parker to finish */
    int rc = 0;
    bool reopened = false;
    if (!p->log) {
        if (if_open) {
            pthread_mutex_unlock(&p->mu);
            *log = NULL;
            return 0;
        }
        if ((rc = reopen_locked(p, err))) {
            pthread_mutex_unlock(&p->mu);
            return rc;
        }
        reopened = true;
    }
    atomic_fetch_add(&p->pins, 1);
    *log = p->log;
    pthread_mutex_unlock(&p->mu);
    if (reopened)
        enforce(p->pool, p);
    return 0;
}

static void unpin(park *p)
{
    touch(p);
    atomic_fetch_sub(&p->pins, 1);
}

/* ---- the store table ---------------------------------------------------- */

static int pk_append(void *impl, sl_batch *b, int64_t *base_offset, sl_error *err)
{
    park *p = impl;
    sl_log *log;
    int rc = pin(p, false, &log, err);
    if (rc)
        return rc;
    rc = sl_log_append(log, b, base_offset, err);
    unpin(p);
    return rc;
}

/* A parked store was synced before it closed: nothing to do. */
static int pk_sync(void *impl, sl_error *err)
{
    park *p = impl;
    sl_log *log;
    int rc = pin(p, true, &log, err);
    if (rc || !log)
        return rc;
    rc = sl_log_sync(log, err);
    unpin(p);
    return rc;
}

/* A reader holds the log (and a pin) only while it has something to read. */
typedef struct pk_reader {
    park *p;
    sl_log_reader *r; /* NULL between reads, once caught up */
    int64_t pos;      /* next offset, while r is NULL */
    bool all_lanes;
    char lane[SL_LANE_MAX + 1];
} pk_reader;

/* Start or end offset: the log's while open, the summary's while parked
 * (without waking it); a store being parked is waited for. */
static int64_t bound(park *p, bool end)
{
    int64_t v = 0;
    atomic_fetch_add(&p->pins, 1);
    int st = atomic_load(&p->state);
    if (st == ST_OPEN)
        v = end ? sl_log_end_offset(p->log) : sl_log_start_offset(p->log);
    atomic_fetch_sub(&p->pins, 1);
    if (st == ST_OPEN)
        return v;
    if (st == ST_PARKED)
        return atomic_load(end ? &p->end : &p->start);
    pthread_mutex_lock(&p->mu);
    if (p->log)
        v = end ? sl_log_end_offset(p->log) : sl_log_start_offset(p->log);
    else
        v = atomic_load(end ? &p->end : &p->start);
    pthread_mutex_unlock(&p->mu);
    return v;
}

static int pk_reader_open(void *impl, int64_t offset, const char *lane, void **reader,
                          sl_error *err)
{
    park *p = impl;
    if (lane && !sl_lane_valid(lane, strlen(lane)))
        return sl_error_set(err, SL_EINVAL, "invalid lane \"%s\"", lane);
    int64_t start = bound(p, false), end = bound(p, true);
    if (offset < start || offset > end)
        return sl_error_set(err, SL_ERANGE,
                            "offset %" PRId64 " is outside the log [%" PRId64 ", %" PRId64 "]",
                            offset, start, end);
    pk_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SL_ENOMEM;
    r->p = p;
    r->pos = offset;
    r->all_lanes = !lane;
    if (lane)
        snprintf(r->lane, sizeof r->lane, "%s", lane);
    *reader = r;
    return 0;
}

static void reader_drop(pk_reader *r)
{
    if (!r->r)
        return;
    r->pos = sl_log_reader_position(r->r);
    sl_log_reader_close(r->r);
    r->r = NULL;
    unpin(r->p);
}

static int pk_reader_next(void *reader, sl_record *rec, sl_error *err)
{
    pk_reader *r = reader;
    park *p = r->p;
    if (!r->r) {
        if (r->pos >= bound(p, true))
            return SL_EEOF; /* caught up: no need to wake a parked log */
        sl_log *log;
        int rc = pin(p, false, &log, err);
        if (rc)
            return rc;
        /* Retention may have moved the start past a reader that waited:
         * an open reader would have gone on at the next segment too. */
        int64_t start = sl_log_start_offset(log);
        rc = sl_log_reader_open(log, r->pos < start ? start : r->pos, r->all_lanes ? NULL : r->lane,
                                &r->r, err);
        if (rc) {
            unpin(p);
            return rc;
        }
    }
    int rc = sl_log_reader_next(r->r, rec, err);
    if (rc)
        reader_drop(r);
    return rc;
}

static int64_t pk_reader_position(void *reader)
{
    pk_reader *r = reader;
    return r->r ? sl_log_reader_position(r->r) : r->pos;
}

static void pk_reader_close(void *reader)
{
    pk_reader *r = reader;
    if (!r)
        return;
    reader_drop(r);
    free(r);
}

static int pk_offset_for_time(void *impl, int64_t ts_ms, int64_t *offset, sl_error *err)
{
    park *p = impl;
    sl_log *log;
    int rc = pin(p, false, &log, err);
    if (rc)
        return rc;
    rc = sl_log_offset_for_time(log, ts_ms, offset, err);
    unpin(p);
    return rc;
}

static int64_t pk_start(void *impl)
{
    return bound(impl, false);
}

static int64_t pk_end(void *impl)
{
    return bound(impl, true);
}

static int pk_retain(void *impl, int64_t now_ms, sl_error *err)
{
    park *p = impl;
    pthread_mutex_lock(&p->mu);
    bool due = p->log || sl_log_retain_due(&p->cfg, &p->sum, now_ms);
    pthread_mutex_unlock(&p->mu);
    if (!due) /* a parked store whose retention would do nothing stays parked */
        return 0;
    sl_log *log;
    int rc = pin(p, false, &log, err);
    if (rc)
        return rc;
    rc = sl_log_retain(log, now_ms, NULL, err);
    unpin(p);
    return rc;
}

static void pk_stat(void *impl, uint64_t *bytes, uint64_t *segments)
{
    park *p = impl;
    pthread_mutex_lock(&p->mu); /* no parking meanwhile */
    if (p->log) {
        *bytes = sl_log_size_bytes(p->log);
        *segments = sl_log_segment_count(p->log);
    } else {
        *bytes = p->sum.bytes;
        *segments = p->sum.segments;
    }
    pthread_mutex_unlock(&p->mu);
}

static void pk_free(park *p)
{
    pthread_mutex_destroy(&p->mu);
    free(p->dir);
    free(p);
}

static void pk_close(void *impl)
{
    park *p = impl;
    pthread_mutex_lock(&p->mu);
    pthread_mutex_lock(&p->pool->mu);
    list_del(p->pool, p);
    atomic_fetch_sub(&p->pool->stores, 1);
    pthread_mutex_unlock(&p->pool->mu);
    sl_log_close(p->log);
    p->log = NULL;
    pthread_mutex_unlock(&p->mu);
    pk_free(p);
}

static const sl_store_ops park_ops = {
    .abi_version = SL_STORE_ABI_VERSION,
    .name = "log",
    .append = pk_append,
    .sync = pk_sync,
    .reader_open = pk_reader_open,
    .reader_next = pk_reader_next,
    .reader_position = pk_reader_position,
    .reader_close = pk_reader_close,
    .offset_for_time = pk_offset_for_time,
    .start_offset = pk_start,
    .end_offset = pk_end,
    .retain = pk_retain,
    .stat = pk_stat,
    .close = pk_close,
};

/* ---- public ------------------------------------------------------------- */

int sl_store_open_pooled(sl_store *st, const char *dir, const sl_log_config *cfg,
                         const sl_log_open_options *opts, bool parked, sl_store_pool *pool,
                         sl_error *err)
{
    sl_log_open_options o = opts ? *opts : (sl_log_open_options){.create = true};
    park *p = calloc(1, sizeof *p);
    if (!p)
        return SL_ENOMEM;
    if (!(p->dir = strdup(dir))) {
        free(p);
        return SL_ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->pool = pool;
    p->cfg = *cfg;
    p->opts = o;
    p->opts.create = false;
    p->opts.full_recovery = false;
    atomic_init(&p->pins, 0);
    touch(p);
    if (parked && !o.full_recovery && sl_log_clean_summary(dir, &p->sum, NULL) == 0) {
        /* Closed cleanly: known without opening, as if it had just parked. */
        atomic_init(&p->start, p->sum.start);
        atomic_init(&p->end, p->sum.end);
        atomic_init(&p->state, ST_PARKED);
        pthread_mutex_lock(&pool->mu);
        atomic_fetch_add(&pool->stores, 1);
        pthread_mutex_unlock(&pool->mu);
        st->ops = &park_ops;
        st->impl = p;
        st->data = NULL;
        return 0;
    }
    int rc = sl_log_open(dir, cfg, &o, &p->log, err);
    if (rc) {
        pk_free(p);
        return rc;
    }
    atomic_init(&p->state, ST_OPEN);
    atomic_init(&p->start, 0);
    atomic_init(&p->end, 0);
    pthread_mutex_lock(&pool->mu);
    list_add(pool, p);
    atomic_fetch_add(&pool->stores, 1);
    pthread_mutex_unlock(&pool->mu);
    st->ops = &park_ops;
    st->impl = p;
    st->data = NULL;
    enforce(pool, p);
    return 0;
}

int sl_store_park(const sl_store *st, sl_error *err)
{
    if (!st->ops || st->ops != &park_ops)
        return sl_error_set(err, SL_EINVAL, "not a pooled store");
    park *p = st->impl;
    pthread_mutex_lock(&p->mu);
    int rc = park_locked(p, false, err);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

sl_log *sl_store_log(const sl_store *st)
{
    if (st->ops == &sl_store_log_ops)
        return st->impl;
    if (st->ops != &park_ops)
        return NULL;
    park *p = st->impl;
    pthread_mutex_lock(&p->mu);
    bool reopened = !p->log && reopen_locked(p, NULL) == 0;
    sl_log *log = p->log;
    pthread_mutex_unlock(&p->mu);
    if (reopened)
        enforce(p->pool, p);
    return log;
}

/* The offset lies in the log or not, told without waking a parked store;
 * a read at the end has nothing to return and does not wake it either. */
int sl_store_slice_get(const sl_store *st, int64_t offset, const char *lane, size_t max_bytes,
                       sl_log_slice *out, sl_error *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    out->first_offset = out->next_offset = offset;
    if (st->ops == &sl_store_log_ops)
        return sl_log_slice_get(st->impl, offset, lane, max_bytes, out, err);
    if (st->ops != &park_ops)
        return sl_error_set(err, SL_EINVAL, "no zero-copy reads from a %s store",
                            st->ops ? st->ops->name : "closed");
    park *p = st->impl;
    int64_t start = bound(p, false), end = bound(p, true);
    if (offset < start || offset > end)
        return sl_error_set(err, SL_ERANGE,
                            "offset %" PRId64 " is outside the log [%" PRId64 ", %" PRId64 "]",
                            offset, start, end);
    if (offset == end)
        return 0;
    sl_log *log;
    int rc = pin(p, false, &log, err);
    if (rc)
        return rc;
    /* The slice holds its own reference on the segment, so the store may
     * park (and close the log) while the bytes are still being sent. */
    rc = sl_log_slice_get(log, offset, lane, max_bytes, out, err);
    unpin(p);
    return rc;
}

bool sl_store_parked(const sl_store *st)
{
    return st->ops == &park_ops && atomic_load(&((park *)st->impl)->state) == ST_PARKED;
}

int sl_store_pool_new(size_t max_open, sl_store_pool **out)
{
    sl_store_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return SL_ENOMEM;
    pthread_mutex_init(&pool->mu, NULL);
    atomic_init(&pool->max_open, max_open ? max_open : 1);
    *out = pool;
    return 0;
}

void sl_store_pool_set_max(sl_store_pool *pool, size_t max_open)
{
    atomic_store(&pool->max_open, max_open ? max_open : 1);
    enforce(pool, NULL);
}

size_t sl_store_pool_max(sl_store_pool *pool)
{
    return atomic_load(&pool->max_open);
}

size_t sl_store_pool_sweep(sl_store_pool *pool, int64_t idle_ms)
{
    size_t parked = 0;
    int64_t before = sl_clock_mono_ns() - idle_ms * 1000000;
    /* One victim per turn of the pool's lock, so reopenings elsewhere are
     * not held up behind a long sweep. Stores that cannot park now (their
     * mu is busy, or a sync failed) are skipped: at most `skip` of them. */
    for (size_t skip = 0;;) {
        pthread_mutex_lock(&pool->mu);
        park *victim = NULL;
        size_t seen = 0;
        for (park *p = pool->head; p && !victim; p = p->next)
            if (atomic_load_explicit(&p->used_ns, memory_order_relaxed) <= before &&
                atomic_load(&p->pins) == 0 && seen++ >= skip)
                victim = p;
        int rc = victim ? try_park(victim) : SL_EDEFERRED;
        pthread_mutex_unlock(&pool->mu);
        if (!victim)
            break;
        if (rc)
            skip++;
        else
            parked++;
    }
    return parked;
}

void sl_store_pool_stats_get(sl_store_pool *pool, sl_store_pool_stats *out)
{
    out->stores = atomic_load(&pool->stores);
    out->open = atomic_load(&pool->open);
    out->parks = atomic_load(&pool->parks);
    out->reopens = atomic_load(&pool->reopens);
}

void sl_store_pool_free(sl_store_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}
