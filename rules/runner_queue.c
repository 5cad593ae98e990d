/*
 * rules/runner_queue.c — the runner's queue of (rule, partition) consumers with work to
 * do, and the worker threads that drain it: wake-ups on append, the periodic
 * scan for due retries and missed wake-ups, the pool growing when every
 * worker waits for a target.
 */
#include "rules/runner_internal.h"

#include "core/base/clock.h"
#include "core/base/slog.h"

#include <string.h>
#include <time.h>

/* ---- queue (runner lock held) --------------------------------------------- */

void sl__runner_push(sl_runner *r, consumer *c)
{
    if (c->in) /* a member of a shared reader: the reader runs for it */
        c = &c->in->handle;
    if (c->queued || c->running || c->join_wait || r->stopping || atomic_load(&c->done) ||
        (c->handle_of ? !c->handle_of->nmembers : atomic_load(&c->rule->dropped)) ||
        !sl__runner_kafka_owned(c)) /* a Kafka-backed set's partition this router does not own */
        return;
    c->queued = true;
    c->next = NULL;
    if (r->tail)
        r->tail->next = c;
    else
        r->head = c;
    r->tail = c;
    pthread_cond_signal(&r->cond);
}

static consumer *pop(sl_runner *r)
{
    consumer *c = r->head;
    if (c) {
        r->head = c->next;
        if (!r->head)
            r->tail = NULL;
        c->queued = false;
    }
    return c;
}

static void check_consumer(sl_runner *r, consumer *c, int64_t now)
{
    if (c->in || c->join_wait)
        return; /* its shared reader is checked instead */
    if (c->retry_at_ns && now >= c->retry_at_ns) {
        sl__runner_push(r, c);
    } else if (c->rejoin_ns && now >= c->rejoin_ns && !c->queued && !c->running && !c->hold) {
        /* Left for being slow and may come back now: a turn (perhaps with
         * nothing to read) ends with sl__runner_try_join(). */
        c->rejoin_ns = 0;
        sl__runner_push(r, c);
    } else if (!c->hold && !c->rp && !c->queued && !c->running &&
               atomic_load(&c->read_pos) < sl_store_end_offset(&c->rule->set->parts[c->part])) {
        /* A lane run lags behind every append of other lanes without
         * anything to do (on_append wakes it for its own): look only once a
         * second, so that fifty idle lanes cost nothing. */
        if (c->rule->lane[0] && now - c->lag_check_ns < 1000000000)
            return;
        c->lag_check_ns = now;
        sl__runner_push(r, c);
    }
}

/* Queues consumers whose retry time came, and idle ones that lag (an append
 * they were not told about, e.g. before the bus knew the runner: wake-ups
 * are an optimisation, this check is the guarantee). */
static void periodic(sl_runner *r, int64_t now)
{
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++)
        for (int32_t p = 0; p < RUN(r, i)->nparts; p++)
            check_consumer(r, &RUN(r, i)->cons[p], now);
    for (replay *rp = r->replays; rp; rp = rp->next)
        for (int32_t p = 0; p < rp->nparts; p++)
            check_consumer(r, &rp->cons[p], now);
    for (roster *ro = r->rosters; ro; ro = ro->next)
        for (int32_t p = 0; p < ro->nparts; p++) {
            consumer *h = &ro->shares[p].handle;
            if (h->hold && now >= h->retry_at_ns) { /* its fetch-wait is over */
                h->hold = false;
                h->retry_at_ns = 0;
                sl__runner_push(r, h);
                continue;
            }
            if (ro->shares[p].nmembers && !h->queued && !h->running && !h->hold &&
                atomic_load(&h->read_pos) < sl_store_end_offset(&ro->set->parts[p]) &&
                (!ro->lane[0] || now - h->lag_check_ns >= 1000000000)) {
                h->lag_check_ns = now; /* lanes: as check_consumer() does */
                sl__runner_push(r, h);
            }
        }
}

void sl_runner_on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane)
{
    (void)end;
    sl_runner *r = ctx;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (rr->set != set || partition >= rr->nparts || (lane && strcmp(rr->lane, lane) != 0))
            continue; /* the runs of other lanes would find nothing new */
        consumer *c = &rr->cons[partition];
        if (c->in)
            c = &c->in->handle;
        if (c->running)
            c->again = true;
        else if (!c->hold)
            sl__runner_push(r, c);
    }
    pthread_mutex_unlock(&r->lock);
}

/* A monotonic deadline ns from now, for the CLOCK_MONOTONIC conditions. */
static struct timespec deadline_in(int64_t ns)
{
    int64_t at = sl_clock_mono_ns() + ns;
    return (struct timespec){.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
}

/* Starts one more worker when every worker waits for a target and work is
 * queued: slow endpoints hold the workers that wait for them, not the other
 * rules. The pool grows up to max_workers, one worker at a time. Called and
 * returns with the runner lock held; drops it while the worker's Lua state
 * is built (that runs the config), so that appends are not held up. */
static void maybe_grow(sl_runner *r)
{
    if (r->stopping || r->growing || !r->head || r->waiting < r->started ||
        r->started >= r->max_workers)
        return;
    r->growing = true;
    worker *w = &r->workers[r->started];
    pthread_mutex_unlock(&r->lock);
    sl_error err = {0};
    int rc = sl__runner_init_worker(r, w, &err);
    if (!rc && pthread_create(&w->thread, NULL, sl__runner_worker_main, w))
        rc = sl_error_set(&err, SL_ENOMEM, "cannot start a thread");
    pthread_mutex_lock(&r->lock);
    if (rc) {
        sl_slog(SL_SLOG_ERROR, "rules", "rules: cannot add a worker: %s", err.msg);
        r->max_workers = r->started; /* no more tries; free_runner() frees the slot */
        r->nworkers = r->started + 1;
    } else {
        r->nworkers = ++r->started;
    }
    r->growing = false;
    pthread_cond_broadcast(&r->cond);
}

/* Waits until every payload of the worker's deliver() call completed. While
 * it waits it does what an idle worker would: queue due retries and missed
 * wake-ups, and grow the pool when every worker is waiting. */
void sl__runner_wait_targets(worker *w)
{
    sl_runner *r = w->r;
    pthread_mutex_lock(&r->lock);
    r->waiting++;
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_lock(&w->lock);
    while (w->pending) {
        struct timespec ts = deadline_in(WAIT_CHECK_NS);
        if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) && w->pending) {
            pthread_mutex_unlock(&w->lock);
            pthread_mutex_lock(&r->lock);
            int64_t now = sl_clock_mono_ns();
            if (now - r->retry_scan_ns >= SCAN_NS) {
                r->retry_scan_ns = now;
                periodic(r, now);
            }
            maybe_grow(r);
            pthread_mutex_unlock(&r->lock);
            pthread_mutex_lock(&w->lock);
        }
    }
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_lock(&r->lock);
    r->waiting--;
    pthread_mutex_unlock(&r->lock);
}

void *sl__runner_worker_main(void *arg)
{
    worker *w = arg;
    sl_runner *r = w->r;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->head && !r->stopping) {
            struct timespec ts = deadline_in(SCAN_NS);
            pthread_cond_timedwait(&r->cond, &r->lock, &ts);
            int64_t now = sl_clock_mono_ns();
            if (now - r->retry_scan_ns >= SCAN_NS) {
                r->retry_scan_ns = now;
                periodic(r, now);
            }
            pthread_mutex_unlock(&r->lock); /* an idle runner syncs its cursors too */
            sl__runner_sync_cursors(r);
            pthread_mutex_lock(&r->lock);
        }
        if (r->stopping)
            break;
        int64_t now = sl_clock_mono_ns();
        if (now - r->retry_scan_ns > SCAN_BUSY_NS) { /* busy queues must not starve retries */
            r->retry_scan_ns = now;
            periodic(r, now);
        }
        consumer *c = pop(r);
        c->running = true;
        c->again = false;
        pthread_mutex_unlock(&r->lock);
        bool more = c->handle_of ? sl__runner_run_share(w, c->handle_of)
                                 : sl__runner_run_consumer(w, c);
        sl__runner_sync_cursors(r);
        pthread_mutex_lock(&r->lock);
        if (!c->handle_of)
            sl__runner_try_join(r, c); /* caught up with its shared reader? */
        c->running = false;
        if ((more || c->again) && !c->hold)
            sl__runner_push(r, c);
        if (sl__runner_kset_of(c)) /* a revoke may wait for this turn */
            sl__runner_kafka_after_turn(r, c);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}
