/*
 * connectors/target_set.c — target.set: payloads appended to another event
 * set through the Databus, with the source event's lane. A payload must be a
 * CloudEvent (a transform's output is checked like an HTTP ingest entry);
 * it counts as delivered when the target set's ack mode says so (after the
 * fsync for durable sets). The set is declared (the config names it): looked
 * up at open and, when missing there, created (as declared, never counted
 * against max_auto_sets) by the first delivery holding a valid event, so a
 * target that never delivers never makes a set.
 */
#include "connectors/target_set.h"
#include "core/base/clock.h"
#include "core/bus/ebshape.h"
#include "core/bus/event.h"

#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long one event of an oversized batch waits for room (ms). */
#define FULL_WAIT_MS 5000

typedef struct set_target {
    sl_set *set; /* NULL until it exists (under lock) */
    sl_sets *sets;
    char name[SL_SET_NAME_MAX + 1];
    sl_databus *bus;
    bool eventbridge;     /* shape = "eventbridge": payloads are EventBridge events */
    pthread_mutex_t lock; /* guards set, ev and the arena */
    sl_event ev;
} set_target;

/* A publish waiting for its fsync: the indices of the payloads it holds. */
typedef struct pending {
    sl_deliver_done_fn *done;
    void *ctx;
    size_t n;
    size_t idx[];
} pending;

static int set_open(const sl_target_config *tc, const sl_target_env *env, void **impl,
                    sl_error *err)
{
    const sl_target_set_conf *cfg = tc->conf;
    if (!env->sets || !env->bus)
        return sl_error_set(err, SL_EUNSUPPORTED, "target.set needs a running server");
    set_target *t = calloc(1, sizeof *t);
    if (!t)
        return sl_error_set(err, SL_ENOMEM, "target.set: out of memory");
    sl_error e = {0};
    int rc = sl_sets_get(env->sets, cfg->set, false, &t->set, &e);
    if (rc && rc != SL_ENOENT) {
        free(t);
        return sl_error_set(err, rc, "target.set: %s", e.msg);
    }
    snprintf(t->name, sizeof t->name, "%s", cfg->set);
    t->eventbridge = cfg->shape && strcmp(cfg->shape, "eventbridge") == 0;
    t->sets = env->sets;
    t->bus = env->bus;
    pthread_mutex_init(&t->lock, NULL);
    *impl = t;
    return 0;
}

static void complete(pending *p, int status, const char *reason)
{
    for (size_t i = 0; i < p->n; i++)
        p->done(p->ctx, p->idx[i], status, status ? reason : NULL);
}

static void publish_done(void *ctx, int status)
{
    pending *p = ctx;
    complete(p, status, sl_strerror(status));
    free(p);
}

/* Where one checked payload sits in the arena (the arena may move while it
 * grows, so pointers are made after the loop). */
typedef struct staged {
    size_t off, len, key_off, key_len;
    bool has_key;
    const char *lane;
} staged;

static void set_deliver(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                        void *ctx)
{
    set_target *t = impl;
    sl_buf arena = SL_BUF_INIT;
    staged *sv = calloc(n ? n : 1, sizeof *sv);
    sl_databus_event *evs = calloc(n ? n : 1, sizeof *evs);
    sl_databus_result *res = calloc(n ? n : 1, sizeof *res);
    pending *p = calloc(1, sizeof *p + (n ? n : 1) * sizeof(size_t));
    sl_error err = {0};
    int rc = sv && evs && res && p ? 0 : sl_error_set(&err, SL_ENOMEM, "out of memory");
    int64_t now = sl_clock_now_ms();
    if (p)
        *p = (pending){.done = done, .ctx = ctx};
    size_t i = 0;
    pthread_mutex_lock(&t->lock);
    /* A set still missing: checked against the settings it will get. */
    sl_set *set = t->set;
    const sl_set_config *sc = set ? &set->cfg : sl_sets_defaults(t->sets);
    sl_event_limits lim = {.max_bytes = sc->max_event_bytes, .generate_ids = sc->generate_ids};
    sl_buf ce = SL_BUF_INIT; /* a payload of EventBridge's shape as a CloudEvent */
    for (; !rc && i < n; i++) {
        sl_error e = {0};
        const char *data = d[i].data;
        size_t dlen = d[i].len;
        if (t->eventbridge) {
            ce.len = 0;
            if (sl_ebshape_to_cloudevent(data, dlen, &ce, &e)) {
                char msg[SL_ERROR_MAX + 64];
                snprintf(msg, sizeof msg, "target.set %s (shape eventbridge): %s", t->name, e.msg);
                done(ctx, i, SL_EINVAL, msg);
                continue;
            }
            data = (const char *)ce.data;
            dlen = ce.len;
        }
        sl_event_status st = sl_event_parse(data, dlen, &lim, &t->ev, &e);
        if (st == SL_EVENT_OK)
            st = sl_event_apply_lane(&t->ev, d[i].lane, &e);
        if (st != SL_EVENT_OK) {
            /* Not an event: delivering it again cannot help. */
            char msg[SL_ERROR_MAX + 64];
            snprintf(msg, sizeof msg, "not a valid CloudEvent for set %s: %s (%s)", t->name, e.msg,
                     sl_event_status_name(st));
            done(ctx, i, SL_EINVAL, msg);
            continue;
        }
        staged *s = &sv[p->n];
        s->off = arena.len;
        if ((rc = sl_event_encode(&t->ev, &(sl_event_fill){.now_ms = now}, &arena)))
            break; /* i stays: completed below with the error */
        s->len = arena.len - s->off;
        s->has_key = t->ev.key != NULL;
        s->key_off = arena.len;
        s->key_len = t->ev.key_len;
        if (s->has_key && (rc = sl_buf_append(&arena, t->ev.key, t->ev.key_len)))
            break;
        s->lane = d[i].lane ? d[i].lane : "";
        p->idx[p->n++] = i;
    }
    sl_buf_free(&ce);
    sl_error made = {0};
    if (!rc && !set && p->n && !sl_sets_declare(t->sets, t->name, &set, &made))
        t->set = set; /* the first event to store made the set */
    pthread_mutex_unlock(&t->lock);
    if (!rc && !set && p->n) { /* nothing stored; a retry may find the set (or disk) back */
        char msg[SL_ERROR_MAX + 64];
        snprintf(msg, sizeof msg, "target.set %s: %s", t->name, made.msg);
        complete(p, SL_EIO, msg);
        p->n = 0;
    }
    if (rc) {
        sl_error_set(&err, rc, "target.set %s: out of memory", t->name);
        for (; i < n; i++) /* payloads the loop did not reach */
            done(ctx, i, rc, err.msg);
    }
    for (size_t g = 0; !rc && g < p->n; g++) {
        evs[g] = (sl_databus_event){.value = arena.data + sv[g].off,
                                    .value_len = sv[g].len,
                                    .key = sv[g].has_key ? arena.data + sv[g].key_off : NULL,
                                    .key_len = sv[g].key_len,
                                    .lane = sv[g].lane,
                                    .ts_ms = now};
    }
    if (!rc && p->n)
        rc = sl_databus_publish(t->bus, set, evs, p->n, res, publish_done, p, &err);
    if (rc == SL_ETOOBIG && p->n > 1) {
        /* The batch is larger than a partition's whole buffer of the target
         * set: it could never be taken at once, so one event at a time. */
        bool held = false; /* a retryable failure: the rest waits behind it (order) */
        for (size_t g = 0; g < p->n; g++) {
            if (held) {
                done(ctx, p->idx[g], SL_EDEFERRED,
                     "target.set: not stored: an earlier event of its batch could not be");
                continue;
            }
            pending *one = malloc(sizeof *one + sizeof(size_t));
            sl_error e1 = {0};
            int r1 = one ? 0 : SL_ENOMEM;
            if (one) {
                *one = (pending){.done = done, .ctx = ctx, .n = 1};
                one->idx[0] = p->idx[g];
                r1 = sl_databus_publish(t->bus, set, &evs[g], 1, res, publish_done, one, &e1);
                /* The small buffer fills with the events just queued: give
                 * the writer a moment (bounded) rather than fail the batch
                 * each time at the same place. */
                for (int waited = 0; r1 == SL_EFULL && waited < FULL_WAIT_MS; waited++) {
                    nanosleep(&(struct timespec){0, 1000000}, NULL);
                    e1.msg[0] = '\0';
                    r1 = sl_databus_publish(t->bus, set, &evs[g], 1, res, publish_done, one, &e1);
                }
            }
            if (r1 == 1)
                continue; /* publish_done completes and frees it */
            /* A single event over the buffer can never be stored there. */
            done(ctx, p->idx[g], r1 == SL_ETOOBIG ? SL_EINVAL : r1,
                 r1 ? (e1.msg[0] ? e1.msg : sl_strerror(r1)) : NULL);
            held = r1 && r1 != SL_ETOOBIG;
            free(one);
        }
        free(p);
        p = NULL;
        rc = 0;
    } else if (rc == 1) {
        p = NULL; /* publish_done completes and frees it */
    } else if (p) {
        complete(p, rc, err.msg[0] ? err.msg : sl_strerror(rc));
    }
    free(p);
    sl_buf_free(&arena);
    free(sv);
    free(evs);
    free(res);
}

static void set_close(void *impl)
{
    set_target *t = impl;
    if (!t)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static const sl_conf_key set_keys[] = {
    {"set", SL_KEY_STRING, SL_CONF_FIELD(sl_target_set_conf, set), 0, 0, "required",
     "the event set to append to (declared with `set`); events keep their lane"},
    {"shape", SL_KEY_STRING, SL_CONF_FIELD(sl_target_set_conf, shape), 0, 0, "\"cloudevents\"",
     "\"eventbridge\": the payloads are EventBridge events (a rule of that shape delivering "
     "whole events), stored as the CloudEvents they stand for (docs/eventbridge-api.md)"},
};

/* The set must be declared, and not the one the rule reads. */
static void set_check_conf(const sl_target_config *tc, const sl_conf_check *chk)
{
    const sl_target_set_conf *c = tc->conf;
    if (!c->set)
        chk->problem(chk->ctx, NULL, "target.set needs a set");
    else if (!chk->set_declared(chk->ctx, c->set))
        chk->problem(chk->ctx, NULL, "target.set: set \"%s\" is not declared (add set \"%s\" { })",
                     c->set, c->set);
    else if (chk->rule_set && strcmp(c->set, chk->rule_set) == 0)
        chk->problem(chk->ctx, NULL, "target.set into the set it reads would loop forever");
    if (c->shape && strcmp(c->shape, "eventbridge") && strcmp(c->shape, "cloudevents"))
        chk->problem(chk->ctx, NULL, "target.set: shape must be \"cloudevents\" or \"eventbridge\"");
}

const sl_target_ops sl_target_set_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "set",
    .open = set_open,
    .deliver = set_deliver,
    .close = set_close,
    .conf_keys = set_keys,
    .nconf_keys = sizeof set_keys / sizeof *set_keys,
    .conf_size = sizeof(sl_target_set_conf),
    .doc = "append events to another event set",
    .check_conf = set_check_conf,
};
