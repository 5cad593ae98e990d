/*
 * server/schedule_fire.c — how the server's scheduler publishes a tick's
 * event (server/schedule.h): checked as HTTP ingest checks an event, then
 * one durable publish through the Databus, waited for.
 */
#include "server/schedule.h"

#include "core/base/clock.h"
#include "core/bus/databus.h"
#include "core/bus/event.h"
#include "core/bus/set.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* The fire and the Databus's done callback share it; the last to let go
 * frees it (the fire may give up first, when the server stops). */
typedef struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int status;
    int refs;
} waiter;

static void release(waiter *w)
{
    pthread_mutex_lock(&w->lock);
    bool last = --w->refs == 0;
    pthread_mutex_unlock(&w->lock);
    if (last) {
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        free(w);
    }
}

static void on_durable(void *ctx, int status)
{
    waiter *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->done = true;
    w->status = status;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    release(w);
}

/* Waits for the fsync: 0 or its status, or SL_ESHUTDOWN when the server
 * stops and the disk does not answer within the grace. */
static int wait_durable(sl_schedule_fire_env *env, waiter *w)
{
    int64_t give_up = -1;
    pthread_mutex_lock(&w->lock);
    while (!w->done) {
        if (give_up < 0 && atomic_load(&env->stopping))
            give_up = sl_clock_mono_ms() + SL_SCHEDULE_FIRE_GRACE_MS;
        if (give_up >= 0 && sl_clock_mono_ms() >= give_up)
            break;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 200 * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cond, &w->lock, &dl);
    }
    int rc = w->done ? w->status : SL_ESHUTDOWN;
    pthread_mutex_unlock(&w->lock);
    return rc;
}

int sl_schedule_fire_databus(void *ctx, const char *name, const char *json, size_t len,
                             sl_error *err)
{
    sl_schedule_fire_env *env = ctx;
    sl_set *set = NULL;
    sl_error e = {0};
    /* A set the config names is declared at start; one an API schedule
     * names is declared here, as target.set does, never auto-created. */
    int rc = sl_sets_get(env->sets, name, false, &set, &e);
    if (rc == SL_ENOENT)
        rc = sl_sets_declare(env->sets, name, &set, &e);
    if (rc)
        return sl_error_set(err, rc, "set %s: %s", name, e.msg[0] ? e.msg : sl_strerror(rc));
    sl_event *ev = malloc(sizeof *ev);
    if (!ev)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    sl_event_limits lim = {.max_bytes = set->cfg.max_event_bytes,
                           .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT};
    sl_event_status st = sl_event_parse(json, len, &lim, ev, &e);
    if (st == SL_EVENT_OK && env->validate)
        st = (sl_event_status)env->validate(env->validate_ctx, set, ev, &e);
    if (st != SL_EVENT_OK) {
        free(ev);
        return sl_error_set(err, SL_EINVAL, "set %s refuses the event (%s): %s", name,
                            sl_event_status_name(st), e.msg);
    }
    sl_buf stored = SL_BUF_INIT;
    if (sl_event_encode(ev, &(sl_event_fill){.now_ms = sl_clock_now_ms()}, &stored)) {
        free(ev);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    if (stored.len > set->cfg.max_event_bytes) {
        free(ev);
        sl_buf_free(&stored);
        return sl_error_set(err, SL_EINVAL, "the event takes %zu bytes, over set %s's max_event",
                            stored.len, name);
    }
    sl_databus_event de = {.value = stored.data,
                           .value_len = stored.len,
                           .key = ev->key,
                           .key_len = ev->key_len,
                           .lane = ev->lane,
                           .ts_ms = ev->has_time ? ev->time_ms : sl_clock_now_ms()};
    sl_databus_result res;
    waiter *w = calloc(1, sizeof *w);
    if (!w) {
        free(ev);
        sl_buf_free(&stored);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->refs = 2; /* this call and on_durable */
    rc = sl_databus_publish_ack(env->bus, set, SL_ACK_DURABLE, &de, 1, &res, on_durable, w, &e);
    free(ev);
    sl_buf_free(&stored);
    if (rc == 1) { /* the Databus calls on_durable exactly once, at the latest when it stops */
        if ((rc = wait_durable(env, w)))
            sl_error_set(err, rc, "set %s: the event was not stored: %s", name, sl_strerror(rc));
    } else {
        w->refs--; /* on_durable will not come */
        if (rc)
            sl_error_set(err, rc, "set %s: %s", name, e.msg[0] ? e.msg : sl_strerror(rc));
    }
    release(w);
    return rc;
}
