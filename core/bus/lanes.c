/*
 * core/bus/lanes.c — the lane registry; see lanes.h.
 *
 * DATA/lanes.state holds one line per remembered lane, rewritten whole
 * (tmp + fdatasync + rename) when it changes, which is rare:
 *
 *   auto NAME CREATED_MS      a lane lanes.auto registered
 *   dropped NAME DROPPED_MS   a declared lane `sluice lane drop` dropped
 *
 * Lane names are [a-z0-9-], so they need no quoting in the file or in JSON.
 */
#include "core/bus/lanes.h"

#include "core/base/lane_name.h"
#include "core/base/clock.h"
#include "core/base/buf.h"
#include "core/base/metrics.h"
#include "core/base/slog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HASH_SLOTS (SL_LANES_MAX * 2) /* open addressing, power of two */

typedef enum lane_state {
    LANE_GONE,    /* a forgotten auto lane: the entry waits to be reused */
    LANE_ACTIVE,  /* carries events */
    LANE_DROPPED, /* declared, dropped: refused until no longer declared */
} lane_state;

typedef struct lane {
    sl_lane_info info; /* auto_: registered by lanes.auto (remembered in the state file) */
    lane_state state;  /* ACTIVE: declared, or auto; DROPPED: refused */
    bool declared;     /* by the current config */
    bool ready;        /* the added hook ran (declared lanes: the runner made them) */
    int64_t since_ms;  /* auto: registered; dropped: when */
    _Atomic uint64_t in;
} lane;

struct sl_lanes {
    char *state_path;
    pthread_rwlock_t lock; /* entries, states, the hash; never held while a hook runs */
    sl_lanes_hooks hooks;
    bool autolanes;
    lane *v; /* SL_LANES_MAX, never moved */
    size_t n;
    int32_t slots[HASH_SLOTS]; /* index + 1 into v, 0 empty */
    _Atomic uint64_t base_in;
};

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* The entry of name, or NULL (lock held). */
static lane *find(const sl_lanes *l, const char *name)
{
    for (uint32_t i = hash(name) & (HASH_SLOTS - 1);; i = (i + 1) & (HASH_SLOTS - 1)) {
        int32_t s = l->slots[i];
        if (!s)
            return NULL;
        if (strcmp(l->v[s - 1].info.name, name) == 0)
            return &l->v[s - 1];
    }
}

static void hash_insert(sl_lanes *l, size_t idx)
{
    uint32_t i = hash(l->v[idx].info.name) & (HASH_SLOTS - 1);
    while (l->slots[i])
        i = (i + 1) & (HASH_SLOTS - 1);
    l->slots[i] = (int32_t)idx + 1;
}

/* A new entry for name (write lock held), or NULL when full. A full
 * registry reuses the entry of a forgotten lane (dropped auto lanes, lanes
 * no config declares any more), so that lanes coming and going never run
 * out of room. */
static lane *add(sl_lanes *l, const char *name)
{
    lane *e = NULL;
    if (l->n < SL_LANES_MAX) {
        e = &l->v[l->n++];
    } else {
        for (size_t i = 0; !e && i < l->n; i++)
            if (l->v[i].state == LANE_GONE)
                e = &l->v[i];
        if (!e)
            return NULL;
    }
    memset(e, 0, sizeof *e);
    snprintf(e->info.name, sizeof e->info.name, "%s", name);
    e->info.env = SL_LANE_BOE;
    e->info.fallback_base = true;
    /* Rebuilt: a reused entry's old name must not be found any more (rare:
     * only when the registry is full). */
    memset(l->slots, 0, sizeof l->slots);
    for (size_t i = 0; i < l->n; i++)
        hash_insert(l, i);
    return e;
}

/* Rewrites DATA/lanes.state (write lock held). Returns 0 or SL_EIO. */
static int save(sl_lanes *l, sl_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", l->state_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return sl_error_errno(err, errno, "lanes: cannot write %s", tmp);
    for (size_t i = 0; i < l->n; i++) {
        const lane *e = &l->v[i];
        if (e->state == LANE_ACTIVE && e->info.auto_)
            fprintf(f, "auto %s %" PRId64 "\n", e->info.name, e->since_ms);
        else if (e->state == LANE_DROPPED)
            fprintf(f, "dropped %s %" PRId64 "\n", e->info.name, e->since_ms);
    }
    int rc = fflush(f) || fdatasync(fileno(f));
    rc |= fclose(f);
    if (rc || rename(tmp, l->state_path))
        return sl_error_errno(err, errno, "lanes: cannot write %s", l->state_path);
    return 0;
}

static int load(sl_lanes *l, sl_error *err)
{
    FILE *f = fopen(l->state_path, "r");
    if (!f)
        return errno == ENOENT ? 0 : sl_error_errno(err, errno, "lanes: %s", l->state_path);
    char line[256];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char kind[16], name[64];
        int64_t ms;
        if (sscanf(line, "%15s %63s %" SCNd64, kind, name, &ms) != 3 ||
            !sl_lane_valid(name, strlen(name)) || !*name ||
            (strcmp(kind, "auto") && strcmp(kind, "dropped"))) {
            /* A damaged line loses one remembered lane, not the server. */
            sl_slog(SL_SLOG_WARN, "lanes", "%s:%d: not a lane line, skipped", l->state_path,
                    lineno);
            continue;
        }
        if (find(l, name))
            continue;
        lane *e = add(l, name);
        if (!e)
            break;
        e->since_ms = ms;
        e->info.auto_ = strcmp(kind, "auto") == 0;
        e->state = e->info.auto_ ? LANE_ACTIVE : LANE_DROPPED;
        e->ready = true; /* its consumers come with the runner's start */
    }
    fclose(f);
    return 0;
}

int sl_lanes_open(const char *data_dir, sl_lanes **out, sl_error *err)
{
    sl_lanes *l = calloc(1, sizeof *l);
    if (!l || !(l->v = calloc(SL_LANES_MAX, sizeof *l->v)) ||
        !(l->state_path = malloc(strlen(data_dir) + 16))) {
        if (l)
            free(l->v);
        free(l);
        return sl_error_set(err, SL_ENOMEM, "lanes: out of memory");
    }
    sprintf(l->state_path, "%s/lanes.state", data_dir);
    pthread_rwlock_init(&l->lock, NULL);
    int rc = load(l, err);
    if (rc) {
        sl_lanes_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

void sl_lanes_set_hooks(sl_lanes *l, const sl_lanes_hooks *hooks)
{
    pthread_rwlock_wrlock(&l->lock);
    l->hooks = *hooks;
    pthread_rwlock_unlock(&l->lock);
}

void sl_lanes_configure(sl_lanes *l, const sl_lane_decl *decls, size_t n, bool auto_lanes)
{
    pthread_rwlock_wrlock(&l->lock);
    for (size_t i = 0; i < l->n; i++)
        l->v[i].declared = false;
    for (size_t i = 0; i < n; i++) {
        const sl_lane_decl *d = &decls[i];
        /* A lane only an override names, under lanes.auto, is an auto lane
         * (dropping it forgets it). */
        if (d->line == 0 && auto_lanes)
            continue;
        lane *e = find(l, d->name);
        if (!e && !(e = add(l, d->name))) {
            sl_slog(SL_SLOG_WARN, "lanes", "lanes: more than %d lanes, lane %s ignored",
                    SL_LANES_MAX, d->name);
            continue;
        }
        e->declared = true;
        e->info.env = d->env;
        e->info.fallback_base = d->fallback_base;
        if (e->state == LANE_GONE) {
            /* Newly declared: its first event makes sure its consumers
             * exist (the added hook) before it is let in. */
            e->state = LANE_ACTIVE;
            e->ready = false;
            atomic_store(&e->in, 0);
        }
    }
    for (size_t i = 0; i < l->n; i++) {
        lane *e = &l->v[i];
        if (e->declared || e->state != LANE_ACTIVE)
            continue;        /* a drop mark stays until sl_lanes_commit() */
        if (e->info.auto_) { /* no longer declared: an auto lane as it was */
            e->info.env = SL_LANE_BOE;
            e->info.fallback_base = true;
        } else {
            e->state = LANE_GONE;
        }
    }
    l->autolanes = auto_lanes;
    pthread_rwlock_unlock(&l->lock);
}

void sl_lanes_commit(sl_lanes *l)
{
    pthread_rwlock_wrlock(&l->lock);
    bool changed = false;
    for (size_t i = 0; i < l->n; i++) {
        lane *e = &l->v[i];
        if (e->state == LANE_DROPPED && !e->declared) {
            e->state = LANE_GONE; /* the drop mark has done its job */
            changed = true;
        }
    }
    sl_error err = {0};
    if (changed && save(l, &err))
        sl_slog(SL_SLOG_ERROR, "lanes", "%s", err.msg);
    pthread_rwlock_unlock(&l->lock);
}

/* The first event of a lane: a newly declared lane, or an unknown one under
 * lanes.auto (registered here). Its consumers are made (the added hook,
 * called without the lock: it may wait for a reload) before any event of it
 * is let in. Two first events at once both call the hook, which keeps what
 * exists. */
static sl_event_status make_ready(sl_lanes *l, const char *name, sl_error *err)
{
    pthread_rwlock_wrlock(&l->lock);
    lane *e = find(l, name);
    if (e && e->state == LANE_ACTIVE && e->ready) {
        pthread_rwlock_unlock(&l->lock);
        return SL_EVENT_OK; /* another thread did it meanwhile */
    }
    if (e && e->state == LANE_DROPPED) {
        pthread_rwlock_unlock(&l->lock);
        sl_error_set(err, SL_EINVAL, "lane \"%s\" was dropped (sluice lane drop)", name);
        return SL_EVENT_LANE_DROPPED;
    }
    bool known = e && e->state == LANE_ACTIVE, registered = false;
    if (!known && !l->autolanes) { /* a reload turned lanes.auto off meanwhile */
        pthread_rwlock_unlock(&l->lock);
        sl_error_set(err, SL_EINVAL, "lane \"%s\" is not declared", name);
        return SL_EVENT_UNKNOWN_LANE;
    }
    if (!known) {
        if (!e && !(e = add(l, name))) {
            pthread_rwlock_unlock(&l->lock);
            sl_error_set(err, SL_EINVAL,
                         "lane \"%s\" cannot be added: the server holds %d lanes already (drop "
                         "unused ones with `sluice lane drop`)",
                         name, SL_LANES_MAX);
            return SL_EVENT_UNKNOWN_LANE;
        }
        e->info.auto_ = true;
        e->info.env = SL_LANE_BOE;
        e->info.fallback_base = true;
        e->state = LANE_ACTIVE; /* a runner starting now includes it */
        e->ready = false;
        e->since_ms = sl_clock_now_ms();
        atomic_store(&e->in, 0);
        registered = true;
    }
    sl_lane_info info = e->info;
    sl_lanes_hooks hooks = l->hooks;
    pthread_rwlock_unlock(&l->lock);

    sl_error herr = {0};
    int rc = hooks.added ? hooks.added(hooks.ctx, &info, &herr) : 0;

    pthread_rwlock_wrlock(&l->lock);
    sl_event_status st = SL_EVENT_OK;
    e = find(l, name); /* the entry may have been dropped (or reused) meanwhile */
    if (!e || e->state != LANE_ACTIVE) {
        st = e && e->state == LANE_DROPPED ? SL_EVENT_LANE_DROPPED : SL_EVENT_UNKNOWN_LANE;
        sl_error_set(err, SL_EINVAL, "lane \"%s\" was dropped while it was being added", name);
    } else if (rc) {
        if (registered)
            e->state = LANE_GONE;
        st = SL_EVENT_UNKNOWN_LANE;
        sl_error_set(err, SL_EINVAL, "lane \"%s\" cannot be added: %s", name, herr.msg);
    } else {
        e->ready = true;
        /* Remembered before its first event is stored, so that a restart
         * makes its consumers again. */
        sl_error serr = {0};
        if (registered && save(l, &serr))
            sl_slog(SL_SLOG_ERROR, "lanes", "%s", serr.msg);
    }
    pthread_rwlock_unlock(&l->lock);
    if (registered && !st)
        sl_slog(SL_SLOG_INFO, "lanes", "lane %s added (lanes.auto, boe, fallback to base)", name);
    return st;
}

sl_event_status sl_lanes_admit(sl_lanes *l, const char *name, sl_error *err)
{
    if (!*name) {
        atomic_fetch_add_explicit(&l->base_in, 1, memory_order_relaxed);
        return SL_EVENT_OK;
    }
    pthread_rwlock_rdlock(&l->lock);
    lane *e = find(l, name);
    lane_state st = e ? e->state : LANE_GONE;
    bool ready = e && e->ready;
    bool autolanes = l->autolanes;
    if (st == LANE_ACTIVE &&
        ready) { /* the usual case: counted under the lock (entries are reused) */
        atomic_fetch_add_explicit(&e->in, 1, memory_order_relaxed);
        pthread_rwlock_unlock(&l->lock);
        return SL_EVENT_OK;
    }
    pthread_rwlock_unlock(&l->lock);
    sl_event_status rc = SL_EVENT_OK;
    if (st == LANE_DROPPED) {
        sl_error_set(err, SL_EINVAL,
                     "lane \"%s\" was dropped (sluice lane drop); remove it from the config to "
                     "forget it",
                     name);
        return SL_EVENT_LANE_DROPPED;
    }
    if (st != LANE_ACTIVE || !ready) {
        if (st != LANE_ACTIVE && !autolanes) {
            sl_error_set(err, SL_EINVAL,
                         "lane \"%s\" is not declared (declare it with lane \"%s\" { env = "
                         "\"boe\" }, or set lanes.auto = true)",
                         name, name);
            return SL_EVENT_UNKNOWN_LANE;
        }
        rc = make_ready(l, name, err);
        if (rc)
            return rc;
    }
    pthread_rwlock_rdlock(&l->lock);
    if ((e = find(l, name)))
        atomic_fetch_add_explicit(&e->in, 1, memory_order_relaxed);
    pthread_rwlock_unlock(&l->lock);
    return SL_EVENT_OK;
}

void sl_lanes_each(sl_lanes *l, void (*fn)(void *ctx, const sl_lane_info *lane), void *ctx)
{
    pthread_rwlock_rdlock(&l->lock);
    size_t n = l->n;
    pthread_rwlock_unlock(&l->lock);
    /* Entries below n never move; their state is read under the lock. */
    for (size_t i = 0; i < n; i++) {
        pthread_rwlock_rdlock(&l->lock);
        bool active = l->v[i].state == LANE_ACTIVE;
        sl_lane_info info = l->v[i].info;
        pthread_rwlock_unlock(&l->lock);
        if (active)
            fn(ctx, &info);
    }
}

bool sl_lanes_get(sl_lanes *l, const char *name, sl_lane_info *info)
{
    pthread_rwlock_rdlock(&l->lock);
    const lane *e = find(l, name);
    bool ok = e && e->state == LANE_ACTIVE;
    if (ok && info)
        *info = e->info;
    pthread_rwlock_unlock(&l->lock);
    return ok;
}

int sl_lanes_drop(sl_lanes *l, const char *name, sl_error *err)
{
    if (!*name || !sl_lane_valid(name, strlen(name)))
        return sl_error_set(err, SL_EINVAL, "\"%s\" is not a lane that can be dropped", name);
    /* Refused from now on (auto: until it comes back as a new lane), so no
     * event of it is stored while its consumers go. */
    pthread_rwlock_wrlock(&l->lock);
    lane *e = find(l, name);
    if (!e || e->state != LANE_ACTIVE) {
        pthread_rwlock_unlock(&l->lock);
        return sl_error_set(err, SL_ENOENT, "lane \"%s\" is not known (or already dropped)", name);
    }
    e->state = LANE_DROPPED;
    e->ready = false;
    sl_lanes_hooks hooks = l->hooks;
    pthread_rwlock_unlock(&l->lock);
    if (hooks.dropped)
        hooks.dropped(hooks.ctx, name);
    pthread_rwlock_wrlock(&l->lock);
    int rc = 0;
    e = find(l, name);
    if (e && e->state == LANE_DROPPED) {
        e->since_ms = sl_clock_now_ms();
        if (!e->declared)
            e->state = LANE_GONE; /* an auto lane is forgotten */
        e->info.auto_ = false;
        rc = save(l, err);
    }
    pthread_rwlock_unlock(&l->lock);
    sl_slog(SL_SLOG_INFO, "lanes", "lane %s dropped", name);
    return rc;
}

bool sl_lanes_dropped(sl_lanes *l, const char *name)
{
    pthread_rwlock_rdlock(&l->lock);
    const lane *e = find(l, name);
    bool d = e && e->state == LANE_DROPPED;
    pthread_rwlock_unlock(&l->lock);
    return d;
}

uint64_t sl_lanes_events_in(sl_lanes *l, const char *name)
{
    if (!*name)
        return atomic_load(&l->base_in);
    pthread_rwlock_rdlock(&l->lock);
    const lane *e = find(l, name);
    uint64_t n = e ? atomic_load(&e->in) : 0;
    pthread_rwlock_unlock(&l->lock);
    return n;
}

static const char *env_name(sl_lane_env env)
{
    return env == SL_LANE_PPE ? "ppe" : "boe";
}

int sl_lanes_json(sl_lanes *l, int (*extra)(void *ctx, const char *lane, sl_buf *out), void *ctx,
                  sl_buf *out)
{
    int rc = sl_buf_printf(out,
                           "{\"name\":\"\",\"env\":\"base\",\"fallback\":null,\"auto\":false,"
                           "\"declared\":true,\"dropped\":false,\"events_in\":%" PRIu64,
                           atomic_load(&l->base_in));
    if (!rc && extra)
        rc = extra(ctx, "", out);
    if (!rc)
        rc = sl_buf_printf(out, "}");
    pthread_rwlock_rdlock(&l->lock);
    size_t n = l->n;
    pthread_rwlock_unlock(&l->lock);
    for (size_t i = 0; !rc && i < n; i++) {
        pthread_rwlock_rdlock(&l->lock);
        lane e = {.info = l->v[i].info, .state = l->v[i].state, .declared = l->v[i].declared};
        uint64_t in = atomic_load(&l->v[i].in);
        pthread_rwlock_unlock(&l->lock);
        if (e.state == LANE_GONE)
            continue;
        rc =
            sl_buf_printf(out,
                          ",{\"name\":\"%s\",\"env\":\"%s\",\"fallback\":\"%s\",\"auto\":%s,"
                          "\"declared\":%s,\"dropped\":%s,\"events_in\":%" PRIu64,
                          e.info.name, env_name(e.info.env), e.info.fallback_base ? "base" : "none",
                          e.info.auto_ ? "true" : "false", e.declared ? "true" : "false",
                          e.state == LANE_DROPPED ? "true" : "false", in);
        if (!rc && extra && e.state == LANE_ACTIVE)
            rc = extra(ctx, e.info.name, out);
        if (!rc)
            rc = sl_buf_printf(out, "}");
    }
    return rc;
}

int sl_lanes_metrics(sl_lanes *l, sl_buf *out)
{
    static const char fam[] = "sluice_lane_events_in_total";
    int rc = sl_metrics_family(out, fam, SL_METRIC_COUNTER,
                               "Events admitted per lane (\"\" is the base lane).");
    rc = rc ? rc : sl_metrics_u64(out, fam, atomic_load(&l->base_in), "lane", "", NULL);
    pthread_rwlock_rdlock(&l->lock);
    for (size_t i = 0; !rc && i < l->n; i++)
        if (l->v[i].state != LANE_GONE)
            rc =
                sl_metrics_u64(out, fam, atomic_load(&l->v[i].in), "lane", l->v[i].info.name, NULL);
    pthread_rwlock_unlock(&l->lock);
    return rc;
}

bool sl_lanes_auto(sl_lanes *l)
{
    pthread_rwlock_rdlock(&l->lock);
    bool a = l->autolanes;
    pthread_rwlock_unlock(&l->lock);
    return a;
}

void sl_lanes_free(sl_lanes *l)
{
    if (!l)
        return;
    pthread_rwlock_destroy(&l->lock);
    free(l->v);
    free(l->state_path);
    free(l);
}
