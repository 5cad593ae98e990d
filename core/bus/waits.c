/*
 * core/bus/waits.c — the long-poll wait (core/bus/waits.h): one list of
 * waiters under one lock, woken by appends, by the timer thread at their
 * deadline, or all at once by sl_waits_stop().
 *
 * A plain list: every append walks it, as every waiter may be on the set
 * appended to. Waiters are long-polls of consumers that caught up, so
 * there are at most as many as open connections.
 */
#include "core/bus/waits.h"
#include "core/base/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

struct sl_waits {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC: tells the timer of new waiters and stop */
    sl_wait *head;
    bool stopping;
    pthread_t timer;
    _Atomic bool timer_running; /* started and not yet joined */
};

static void unlink_wait(sl_wait *w)
{
    *w->prev = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->next = NULL;
    w->prev = NULL;
}

#define REMOTE_CHECK_NS 100000000 /* 100 ms */

/* Unlinks w, then wakes it: the callback may end w's life. */
static void wake(sl_wait *w)
{
    unlink_wait(w);
    w->wake(w);
}

/* Wakes waiters whose time is up; at stop, everyone. */
static void *timer_main(void *arg)
{
    sl_waits *ws = arg;
    pthread_mutex_lock(&ws->lock);
    while (!ws->stopping) {
        int64_t now = sl_clock_mono_ns(), next = now + 1000000000;
        for (sl_wait *w = ws->head, *n; w; w = n) {
            n = w->next;
            /* A Kafka-backed set grows without an append here (other
             * routers write it): its cached watermark is looked at every
             * REMOTE_CHECK_NS. */
            bool remote = sl_set_remote(w->set);
            if (w->deadline_ns <= now ||
                (remote && sl_store_end_offset(&w->set->parts[w->part]) > w->pos))
                wake(w);
            else if (w->deadline_ns < next)
                next = w->deadline_ns;
            if (remote && now + REMOTE_CHECK_NS < next)
                next = now + REMOTE_CHECK_NS;
        }
        struct timespec ts = {.tv_sec = next / 1000000000, .tv_nsec = next % 1000000000};
        pthread_cond_timedwait(&ws->cond, &ws->lock, &ts);
    }
    while (ws->head)
        wake(ws->head);
    pthread_mutex_unlock(&ws->lock);
    return NULL;
}

int sl_waits_start(sl_waits **out, sl_error *err)
{
    *out = NULL;
    sl_waits *ws = calloc(1, sizeof *ws);
    if (!ws)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    pthread_mutex_init(&ws->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ws->cond, &ca);
    pthread_condattr_destroy(&ca);
    int e = pthread_create(&ws->timer, NULL, timer_main, ws);
    if (e) { /* without it, waiters would never time out or be woken at stop */
        sl_waits_free(ws);
        return sl_error_errno(err, e, "start the long-poll timer");
    }
    atomic_store(&ws->timer_running, true);
    *out = ws;
    return 0;
}

bool sl_waits_add(sl_waits *ws, sl_wait *w, const sl_set *set, int32_t part, int64_t pos,
                  int64_t deadline_ns)
{
    pthread_mutex_lock(&ws->lock);
    /* Re-check under the lock: an append between the caller's read and
     * here must not be missed, since its wake-up has already passed. */
    if (ws->stopping || sl_store_end_offset(&set->parts[part]) > pos) {
        pthread_mutex_unlock(&ws->lock);
        return false;
    }
    w->set = set;
    w->part = part;
    w->pos = pos;
    w->deadline_ns = deadline_ns;
    w->next = ws->head;
    w->prev = &ws->head;
    if (ws->head)
        ws->head->prev = &w->next;
    ws->head = w;
    if (w->park)
        w->park(w);
    pthread_cond_signal(&ws->cond); /* its deadline may be the next one */
    pthread_mutex_unlock(&ws->lock);
    return true;
}

bool sl_waits_cancel(sl_waits *ws, sl_wait *w)
{
    pthread_mutex_lock(&ws->lock);
    bool waiting = w->prev != NULL;
    if (waiting)
        unlink_wait(w);
    pthread_mutex_unlock(&ws->lock);
    return waiting;
}

void sl_waits_on_append(sl_waits *ws, const sl_set *set, int32_t part, int64_t end)
{
    pthread_mutex_lock(&ws->lock);
    for (sl_wait *w = ws->head, *n; w; w = n) {
        n = w->next;
        if (w->set == set && w->part == part && end > w->pos)
            wake(w);
    }
    pthread_mutex_unlock(&ws->lock);
}

void sl_waits_stop(sl_waits *ws)
{
    if (!ws)
        return;
    /* Everyone is woken here, not only by the timer on its way out, so
     * that every waiter has been woken when any call to stop returns. */
    pthread_mutex_lock(&ws->lock);
    ws->stopping = true;
    while (ws->head)
        wake(ws->head);
    pthread_cond_signal(&ws->cond);
    pthread_mutex_unlock(&ws->lock);
    if (atomic_exchange(&ws->timer_running, false))
        pthread_join(ws->timer, NULL);
}

void sl_waits_free(sl_waits *ws)
{
    if (!ws)
        return;
    sl_waits_stop(ws);
    pthread_mutex_destroy(&ws->lock);
    pthread_cond_destroy(&ws->cond);
    free(ws);
}
