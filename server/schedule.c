/*
 * server/schedule.c — the scheduler (server/schedule.h): the schedules in
 * force with their state, the thread that fires their ticks (pending on
 * disk, fire, last on disk), catch-up after downtime, retries, and the
 * listing. The declarations, events and the state file's format are in
 * server/schedule_state.c.
 */
#include "server/schedule_internal.h"

#include "core/base/clock.h"
#include "core/base/slog.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct entry {
    /* The state, persisted. */
    char *name;
    char fp[SL__SCHEDULE_FP_MAX]; /* what after/last belong to */
    bool st_enabled;              /* enabled, as the state last recorded it */
    int64_t after;                /* ticks at or before it are done */
    int64_t last;                 /* -1: none */
    int64_t pending;              /* -1: none */
    int64_t gone;                 /* -1 while declared */
    /* The declaration (live entries only). */
    bool live;
    bool keep; /* sl_scheduler_set(): still declared by its owner */
    char *owner;
    sl_schedule_decl d;
    sl_sched *sched;
    int64_t watch_from; /* ticks at or before it came due while nobody watched */
    int failures;       /* of the pending tick, in a row */
    int64_t retry_at;   /* wall ms of the next attempt */
    char *error;        /* the last failure */
} entry;

struct sl_scheduler {
    sl_scheduler_options o;
    char *data_dir;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC */
    pthread_cond_t done; /* sl_scheduler_poke() waits on it */
    entry **v;           /* sorted by name */
    size_t n;
    bool dirty; /* the state changed since it was written */
    bool started, running, stop;
    uint64_t poke_seq, done_seq;
    pthread_t th;
    entry *firing; /* never freed meanwhile */
};

static int64_t now_ms(const sl_scheduler *s)
{
    return s->o.now ? s->o.now(s->o.ctx) : sl_clock_now_ms();
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp((*(entry *const *)a)->name, (*(entry *const *)b)->name);
}

/* The entry called name among the first n (sorted) ones, or NULL. */
static entry *find_in(const sl_scheduler *s, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->v[mid]->name, name);
        if (c == 0)
            return s->v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Drops the declaration of e (it stays as state). */
static void unlive(entry *e)
{
    sl_schedule_decl_free(&e->d);
    memset(&e->d, 0, sizeof e->d);
    sl_sched_free(e->sched);
    e->sched = NULL;
    free(e->owner);
    e->owner = NULL;
    free(e->error);
    e->error = NULL;
    e->live = false;
    e->failures = 0;
    e->retry_at = 0;
}

static void entry_free(entry *e)
{
    if (!e)
        return;
    unlive(e);
    free(e->name);
    free(e);
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

static int decl_copy(const sl_schedule_decl *src, sl_schedule_decl *dst)
{
    bool oom = false;
    *dst = *src;
    dst->name = dup_or_null(src->name, &oom);
    dst->cron = dup_or_null(src->cron, &oom);
    dst->rate = dup_or_null(src->rate, &oom);
    dst->at = dup_or_null(src->at, &oom);
    dst->timezone = dup_or_null(src->timezone, &oom);
    dst->set = dup_or_null(src->set, &oom);
    dst->event_json = dup_or_null(src->event_json, &oom);
    if (oom) {
        sl_schedule_decl_free(dst);
        memset(dst, 0, sizeof *dst);
        return SL_ENOMEM;
    }
    return 0;
}

/* ---- the state file ---------------------------------------------------------- */

/* A copy of every entry's state (for writing without the lock). */
static int snapshot(const sl_scheduler *s, sl_schedule_state **out, size_t *n)
{
    sl_schedule_state *v = calloc(s->n ? s->n : 1, sizeof *v);
    if (!v)
        return SL_ENOMEM;
    for (size_t i = 0; i < s->n; i++) {
        const entry *e = s->v[i];
        v[i] = (sl_schedule_state){.name = strdup(e->name),
                                   .fingerprint = strdup(e->fp),
                                   .enabled = e->st_enabled,
                                   .after_ms = e->after,
                                   .last_ms = e->last,
                                   .pending_ms = e->pending,
                                   .gone_ms = e->gone};
        if (!v[i].name || !v[i].fingerprint) {
            sl_schedule_state_free(v, i + 1);
            return SL_ENOMEM;
        }
    }
    *out = v;
    *n = s->n;
    return 0;
}

/* Writes the state (called with the lock held; drops it while writing:
 * only the scheduler's thread, or stop once it has ended, writes). */
static int save(sl_scheduler *s)
{
    sl_schedule_state *v = NULL;
    size_t n = 0;
    sl_error err = {0};
    int rc = snapshot(s, &v, &n);
    if (rc) {
        sl_slog(SL_SLOG_ERROR, "schedule", "cannot write the schedule state: out of memory");
        return rc;
    }
    s->dirty = false;
    pthread_mutex_unlock(&s->lock);
    rc = sl__schedule_state_write(s->data_dir, v, n, &err);
    sl_schedule_state_free(v, n);
    pthread_mutex_lock(&s->lock);
    if (rc) {
        s->dirty = true;
        sl_slog(SL_SLOG_ERROR, "schedule", "cannot write the schedule state: %s", err.msg);
    }
    return rc;
}

/* ---- init, set -------------------------------------------------------------------- */

static int load_state(sl_scheduler *s, sl_error *err)
{
    sl_schedule_state *st = NULL;
    size_t n = 0;
    sl_error e = {0};
    int rc = sl_schedule_state_load(s->data_dir, &st, &n, &e);
    if (rc == SL_ECORRUPT) { /* keep it for a person to look at, and go on */
        char path[4096], bad[4200];
        sl__schedule_state_path(s->data_dir, true, path, sizeof path);
        snprintf(bad, sizeof bad, "%s.bad", path);
        int moved = rename(path, bad);
        sl_slog(SL_SLOG_ERROR, "schedule",
                "%s; %s, the schedules start without state (missed ticks are not caught up, a "
                "pending tick is not fired again)",
                e.msg, moved == 0 ? "moved it to state.json.bad" : "could not move it aside");
        return 0;
    }
    if (rc)
        return sl_error_set(err, rc, "%s", e.msg);
    s->v = calloc(n ? n : 1, sizeof *s->v);
    if (!s->v) {
        sl_schedule_state_free(st, n);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    int64_t now = now_ms(s);
    for (size_t i = 0; i < n; i++) {
        entry *e2 = calloc(1, sizeof *e2);
        if (!e2) {
            sl_schedule_state_free(st, n);
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        }
        e2->name = st[i].name;
        st[i].name = NULL;
        snprintf(e2->fp, sizeof e2->fp, "%s", st[i].fingerprint);
        e2->st_enabled = st[i].enabled;
        e2->after = st[i].after_ms;
        e2->last = st[i].last_ms;
        e2->pending = st[i].pending_ms;
        /* Not declared until sl_scheduler_set() says so: kept from now. */
        e2->gone = st[i].gone_ms >= 0 ? st[i].gone_ms : now;
        s->v[s->n++] = e2;
    }
    sl_schedule_state_free(st, n);
    qsort(s->v, s->n, sizeof *s->v, cmp_entry);
    /* A file written by hand may repeat a name: the first one wins. */
    size_t w = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (w && strcmp(s->v[w - 1]->name, s->v[i]->name) == 0)
            entry_free(s->v[i]);
        else
            s->v[w++] = s->v[i];
    }
    s->n = w;
    return 0;
}

int sl_scheduler_init(const sl_scheduler_options *o, sl_scheduler **out, sl_error *err)
{
    if (!o || !o->data_dir || !o->fire)
        return sl_error_set(err, SL_EINVAL,
                            "the scheduler needs a data folder and a fire callback");
    sl_scheduler *s = calloc(1, sizeof *s);
    if (!s || !(s->data_dir = strdup(o->data_dir))) {
        free(s);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    s->o = *o;
    s->o.data_dir = s->data_dir;
    if (!s->o.retry_initial_ms)
        s->o.retry_initial_ms = 1000;
    if (!s->o.retry_max_ms)
        s->o.retry_max_ms = 60000;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&s->done, NULL);
    char dir[4096];
    sl__schedule_state_path(s->data_dir, false, dir, sizeof dir);
    int rc = 0;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        rc = sl_error_errno(err, errno, "cannot create %s", dir);
    if (!rc)
        rc = load_state(s, err);
    if (rc) {
        sl_scheduler_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int cmp_decl_name(const void *a, const void *b)
{
    return strcmp((*(const sl_schedule_decl *const *)a)->name,
                  (*(const sl_schedule_decl *const *)b)->name);
}

/* What set() prepares before taking the lock, so that it cannot fail
 * halfway. */
typedef struct prepared {
    sl_schedule_decl d;
    sl_sched *sched;
    char *owner;
    entry *fresh; /* used when the name is new */
} prepared;

static void prepared_free(prepared *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++) {
        sl_schedule_decl_free(&p[i].d);
        sl_sched_free(p[i].sched);
        free(p[i].owner);
        entry_free(p[i].fresh);
    }
    free(p);
}

static int prepare(const char *owner, const sl_schedule_decl *d, size_t n, prepared **out,
                   sl_error *err)
{
    prepared *p = calloc(n ? n : 1, sizeof *p);
    const sl_schedule_decl **sorted = calloc(n ? n : 1, sizeof *sorted);
    int rc = p && sorted ? 0 : sl_error_set(err, SL_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        sl_error e = {0};
        if ((rc = sl_schedule_compile(&d[i], &p[i].sched, NULL, &e))) {
            sl_error_set(err, rc, "schedule \"%.128s\": %s", d[i].name ? d[i].name : "?", e.msg);
            break;
        }
        sorted[i] = &d[i];
        if (decl_copy(&d[i], &p[i].d) || !(p[i].owner = strdup(owner)) ||
            !(p[i].fresh = calloc(1, sizeof *p[i].fresh)) ||
            !(p[i].fresh->name = strdup(d[i].name)))
            rc = sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    if (!rc && n > 1) {
        qsort(sorted, n, sizeof *sorted, cmp_decl_name);
        for (size_t i = 1; !rc && i < n; i++)
            if (strcmp(sorted[i]->name, sorted[i - 1]->name) == 0)
                rc = sl_error_set(err, SL_EEXIST, "schedule \"%s\" is declared twice",
                                  sorted[i]->name);
    }
    free(sorted);
    if (rc) {
        prepared_free(p, n);
        return rc;
    }
    *out = p;
    return 0;
}

int sl_scheduler_set(sl_scheduler *s, const char *owner, const sl_schedule_decl *d, size_t n,
                     sl_error *err)
{
    if (!owner || !*owner)
        return sl_error_set(err, SL_EINVAL, "a schedule owner is required");
    if (n > SL_SCHEDULER_MAX)
        return sl_error_set(err, SL_ELIMIT, "at most %d schedules", SL_SCHEDULER_MAX);
    prepared *p = NULL;
    int rc = prepare(owner, d, n, &p, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    size_t live_other = 0, fresh = 0;
    for (size_t i = 0; i < s->n; i++)
        live_other += s->v[i]->live && strcmp(s->v[i]->owner, owner) != 0;
    for (size_t i = 0; !rc && i < n; i++) {
        entry *e = find_in(s, s->n, p[i].d.name);
        if (e && e->live && strcmp(e->owner, owner) != 0)
            rc = sl_error_set(err, SL_EEXIST, "schedule \"%s\" is already declared (by %s)",
                              e->name, e->owner);
        fresh += e == NULL;
    }
    entry **grown = NULL;
    if (!rc && live_other + n > SL_SCHEDULER_MAX)
        rc = sl_error_set(err, SL_ELIMIT, "at most %d schedules", SL_SCHEDULER_MAX);
    if (!rc && fresh && !(grown = realloc(s->v, (s->n + fresh) * sizeof *s->v)))
        rc = sl_error_set(err, SL_ENOMEM, "out of memory");
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        prepared_free(p, n);
        return rc;
    }
    if (grown)
        s->v = grown;
    int64_t now = now_ms(s);
    for (size_t i = 0; i < s->n; i++)
        s->v[i]->keep = false;
    size_t base = s->n;
    for (size_t i = 0; i < n; i++) {
        char fp[SL__SCHEDULE_FP_MAX];
        sl__schedule_fingerprint(p[i].sched, fp);
        entry *e = find_in(s, base, p[i].d.name);
        if (!e) {
            /* New: nothing from the past fires. (Appended after the sorted
             * part, which alone is searched: names are unique in d.) */
            e = p[i].fresh;
            p[i].fresh = NULL;
            snprintf(e->fp, sizeof e->fp, "%s", fp);
            e->after = now;
            e->last = e->pending = e->gone = -1;
            e->st_enabled = p[i].d.enabled;
            e->watch_from = now;
            s->v[s->n++] = e;
        } else {
            if (!e->live) { /* from the state file, or declared again */
                e->watch_from = now;
                e->gone = -1;
            }
            if (strcmp(fp, e->fp) != 0) { /* new ticks: from now on */
                if (e->live || e->last >= 0)
                    sl_slog(SL_SLOG_INFO, "schedule",
                            "schedule \"%s\" changed from %s to %s: its ticks count from now",
                            e->name, e->fp, fp);
                snprintf(e->fp, sizeof e->fp, "%s", fp);
                e->after = e->after > now ? e->after : now;
            }
            if (p[i].d.enabled && !e->st_enabled) /* no catching up on a disabled time */
                e->after = e->after > now ? e->after : now;
            e->st_enabled = p[i].d.enabled;
            sl_schedule_decl_free(&e->d);
            sl_sched_free(e->sched);
            free(e->owner);
        }
        e->d = p[i].d;
        e->sched = p[i].sched;
        e->owner = p[i].owner;
        memset(&p[i].d, 0, sizeof p[i].d);
        p[i].sched = NULL;
        p[i].owner = NULL;
        e->live = true;
        e->keep = true;
    }
    for (size_t i = 0; i < base; i++) {
        entry *e = s->v[i];
        if (e->live && !e->keep && strcmp(e->owner, owner) == 0) {
            unlive(e);
            e->gone = now;
        }
    }
    if (s->n > base)
        qsort(s->v, s->n, sizeof *s->v, cmp_entry);
    s->dirty = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    prepared_free(p, n);
    return 0;
}

/* ---- the thread ----------------------------------------------------------------- */

/* The latest up to k ticks of e in (after, until], oldest first, into
 * out; returns how many. Looks back over growing windows so that a long
 * downtime costs a few windows, not every tick since. */
static size_t latest_ticks(const entry *e, int64_t until, size_t k, int64_t *out)
{
    int64_t window = 3600 * 1000;
    for (;;) {
        int64_t lo = until - window > e->after ? until - window : e->after;
        size_t count = 0;
        for (int64_t t = sl_sched_next(e->sched, lo); t <= until; t = sl_sched_next(e->sched, t))
            count++;
        if (count >= k || lo == e->after) {
            size_t skip = count > k ? count - k : 0, got = 0, i = 0;
            for (int64_t t = sl_sched_next(e->sched, lo); t <= until;
                 t = sl_sched_next(e->sched, t))
                if (i++ >= skip)
                    out[got++] = t;
            return got;
        }
        window = window > INT64_MAX / 16 ? INT64_MAX / 2 : window * 8;
    }
}

/* The tick of e to fire now, or -1. Skips missed ticks beyond catch_up
 * (moving after, logged). */
static int64_t due(sl_scheduler *s, entry *e, int64_t now)
{
    if (!e->live || !e->d.enabled)
        return -1;
    if (e->pending >= 0)
        return e->retry_at <= now ? e->pending : -1;
    int64_t n = sl_sched_next(e->sched, e->after);
    if (n > now)
        return -1;
    int64_t missed_until = now - SL_SCHEDULER_LATE_MS;
    if (e->watch_from > missed_until)
        missed_until = e->watch_from;
    if (n > missed_until)
        return n; /* on time */
    size_t k = (size_t)e->d.catch_up, got = 0;
    int64_t first = SL_SCHED_NEVER;
    if (k) {
        int64_t *ticks = malloc(k * sizeof *ticks);
        if (!ticks) /* cannot look back: fire the missed ticks one by one */
            return n;
        got = latest_ticks(e, missed_until, k, ticks);
        first = got ? ticks[0] : SL_SCHED_NEVER;
        free(ticks);
    }
    if (first == n)
        return n; /* no more missed ticks than catch_up */
    char a[SL_TIME_RFC3339_MAX], b[SL_TIME_RFC3339_MAX];
    sl_time_format_rfc3339(n, a);
    sl_time_format_rfc3339(got ? first : missed_until, b);
    sl_slog_field kv[] = {{"schedule", e->name, 0}, SL_SLOG_I("catch_up", k)};
    sl_slog_kv(SL_SLOG_WARN, "schedule", kv, 2,
               "schedule \"%s\": skipping the missed ticks from %s %s %s (catch_up = %zu)", e->name,
               a, got ? "up to, not including," : "through", b, k);
    e->after = got ? first - 1 : missed_until;
    s->dirty = true;
    if (got)
        return first;
    n = sl_sched_next(e->sched, e->after);
    return n <= now ? n : -1;
}

/* Fires tick t of e: pending on disk, fire, then last (called and
 * returning with the lock held, which it drops meanwhile). */
static void fire_tick(sl_scheduler *s, entry *e, int64_t t)
{
    char when[SL_TIME_RFC3339_MAX];
    sl_time_format_rfc3339(t, when);
    e->pending = t;
    sl_buf ev = SL_BUF_INIT;
    sl_error err = {0};
    int rc = sl_schedule_event(e->name, e->d.event_json, t, &ev, &err);
    char *set = strdup(e->d.set);
    if (!rc && !set)
        rc = sl_error_set(&err, SL_ENOMEM, "out of memory");
    s->firing = e;
    /* The pending tick is on disk before the event can be: a crash in
     * between fires it again, with the same id. */
    if (!rc && (rc = save(s)))
        sl_error_set(&err, rc, "the pending tick could not be recorded (see above)");
    if (!rc) {
        pthread_mutex_unlock(&s->lock);
        rc = s->o.fire(s->o.ctx, set, (const char *)ev.data, ev.len, &err);
        pthread_mutex_lock(&s->lock);
    }
    s->firing = NULL;
    int64_t now = now_ms(s);
    if (!rc) {
        if (e->pending == t)
            e->pending = -1;
        if (t > e->last)
            e->last = t;
        if (t > e->after)
            e->after = t;
        if (e->failures)
            sl_slog(SL_SLOG_INFO, "schedule", "schedule \"%s\": tick %s fired after %d failures",
                    e->name, when, e->failures);
        e->failures = 0;
        e->retry_at = 0;
        free(e->error);
        e->error = NULL;
        s->dirty = true;
        sl_slog_kv(
            SL_SLOG_DEBUG, "schedule",
            (sl_slog_field[]){{"schedule", e->name, 0}, {"tick", when, 0}, SL_SLOG_S("set", set)},
            3, "fired");
    } else {
        e->failures++;
        int64_t backoff = s->o.retry_initial_ms;
        for (int i = 1; i < e->failures && backoff < s->o.retry_max_ms; i++)
            backoff *= 2;
        if (backoff > s->o.retry_max_ms)
            backoff = s->o.retry_max_ms;
        e->retry_at = now + backoff;
        free(e->error);
        e->error = strdup(err.msg[0] ? err.msg : sl_strerror(rc));
        sl_slog_kv(SL_SLOG_WARN, "schedule",
                   (sl_slog_field[]){{"schedule", e->name, 0},
                                     {"tick", when, 0},
                                     SL_SLOG_S("set", set),
                                     SL_SLOG_I("attempt", e->failures),
                                     SL_SLOG_I("retry_ms", backoff)},
                   5, "schedule \"%s\": firing tick %s into set %s failed, retrying: %s", e->name,
                   when, set ? set : "?", err.msg[0] ? err.msg : sl_strerror(rc));
    }
    free(set);
    sl_buf_free(&ev);
}

/* Forgets the state of schedules gone for SL_SCHEDULER_KEEP_MS. */
static void prune(sl_scheduler *s, int64_t now)
{
    size_t w = 0;
    for (size_t i = 0; i < s->n; i++) {
        entry *e = s->v[i];
        if (!e->live && e->gone >= 0 && now - e->gone > SL_SCHEDULER_KEEP_MS && e != s->firing) {
            entry_free(e);
            s->dirty = true;
        } else {
            s->v[w++] = e;
        }
    }
    s->n = w;
}

/* Milliseconds until something is due (at most SL_SCHEDULER_RECHECK_MS). */
static int64_t sleep_ms(const sl_scheduler *s, int64_t now)
{
    int64_t wake = now + SL_SCHEDULER_RECHECK_MS;
    for (size_t i = 0; i < s->n; i++) {
        const entry *e = s->v[i];
        if (!e->live || !e->d.enabled)
            continue;
        int64_t w = e->pending >= 0 ? e->retry_at : sl_sched_next(e->sched, e->after);
        if (w < wake)
            wake = w;
    }
    return wake > now ? wake - now : 0;
}

static void *run(void *arg)
{
    sl_scheduler *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        uint64_t seq = s->poke_seq;
        int64_t now = now_ms(s);
        entry *e = NULL;
        int64_t t = -1;
        for (size_t i = 0; !e && i < s->n; i++)
            if ((t = due(s, s->v[i], now)) >= 0)
                e = s->v[i];
        if (e) {
            fire_tick(s, e, t);
            continue; /* the list may have changed meanwhile: look again */
        }
        prune(s, now);
        if (s->dirty)
            save(s);
        if (s->stop)
            break;
        s->done_seq = seq;
        pthread_cond_broadcast(&s->done);
        if (s->poke_seq != seq)
            continue;
        int64_t ms = sleep_ms(s, now);
        if (ms > 0) {
            struct timespec dl = sl_clock_mono_deadline(ms);
            pthread_cond_timedwait(&s->wake, &s->lock, &dl);
        }
    }
    if (s->dirty)
        save(s);
    s->running = false;
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int sl_scheduler_start(sl_scheduler *s, sl_error *err)
{
    pthread_mutex_lock(&s->lock);
    if (s->started) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    s->started = s->running = true;
    int e = pthread_create(&s->th, NULL, run, s);
    if (e)
        s->started = s->running = false;
    pthread_mutex_unlock(&s->lock);
    return e ? sl_error_errno(err, e, "cannot start the scheduler's thread") : 0;
}

void sl_scheduler_poke(sl_scheduler *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->running && !s->stop) {
        uint64_t mine = ++s->poke_seq;
        pthread_cond_signal(&s->wake);
        while (s->done_seq < mine && s->running && !s->stop)
            pthread_cond_wait(&s->done, &s->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

void sl_scheduler_stop(sl_scheduler *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    bool join = s->started && !s->stop;
    s->stop = true;
    pthread_cond_broadcast(&s->wake);
    pthread_cond_broadcast(&s->done);
    if (!s->started && s->dirty) /* set but never started: keep what was set */
        save(s);
    pthread_mutex_unlock(&s->lock);
    if (join)
        pthread_join(s->th, NULL);
}

void sl_scheduler_free(sl_scheduler *s)
{
    if (!s)
        return;
    sl_scheduler_stop(s);
    for (size_t i = 0; i < s->n; i++)
        entry_free(s->v[i]);
    free(s->v);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->done);
    free(s->data_dir);
    free(s);
}

/* ---- listing ------------------------------------------------------------------------ */

void sl_schedule_info_free(sl_schedule_info *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].name);
        free(v[i].owner);
        free(v[i].expression);
        free(v[i].timezone);
        free(v[i].set);
        free(v[i].error);
    }
    free(v);
}

int sl_scheduler_list(sl_scheduler *s, size_t k, sl_schedule_info **out, size_t *n)
{
    if (k > SL_SCHEDULE_NEXT_MAX)
        k = SL_SCHEDULE_NEXT_MAX;
    pthread_mutex_lock(&s->lock);
    size_t live = 0;
    for (size_t i = 0; i < s->n; i++)
        live += s->v[i]->live;
    sl_schedule_info *v = calloc(live ? live : 1, sizeof *v);
    int64_t now = now_ms(s);
    size_t got = 0;
    bool oom = !v;
    for (size_t i = 0; !oom && i < s->n; i++) {
        const entry *e = s->v[i];
        if (!e->live)
            continue;
        sl_schedule_info *in = &v[got++];
        in->name = dup_or_null(e->name, &oom);
        /* The EventBridge API's schedule rules come in with the config's
         * declarations (server/config.h); they are the API's all the same. */
        in->owner = dup_or_null(e->d.api ? "api" : e->owner, &oom);
        in->expression = dup_or_null(sl_sched_expression(e->sched), &oom);
        in->timezone = dup_or_null(sl_tz_name(sl_sched_tz(e->sched)), &oom);
        in->set = dup_or_null(e->d.set, &oom);
        in->error = dup_or_null(e->error, &oom);
        in->enabled = e->d.enabled;
        in->catch_up = e->d.catch_up;
        in->last_ms = e->last;
        in->pending_ms = e->pending;
        in->failures = e->failures;
        if (e->pending >= 0 && in->nnext < k)
            in->next_ms[in->nnext++] = e->pending;
        int64_t t = e->after > now ? e->after : now;
        while (in->nnext < k && (t = sl_sched_next(e->sched, t)) != SL_SCHED_NEVER)
            in->next_ms[in->nnext++] = t;
    }
    pthread_mutex_unlock(&s->lock);
    if (oom) {
        sl_schedule_info_free(v, got);
        return SL_ENOMEM;
    }
    *out = v;
    *n = got;
    return 0;
}

static json_t *time_or_null(int64_t ms)
{
    if (ms < 0)
        return json_null();
    char b[SL_TIME_RFC3339_MAX];
    sl_time_format_rfc3339(ms, b);
    return json_string(b);
}

int sl_scheduler_list_json(sl_scheduler *s, size_t k, sl_buf *out)
{
    sl_schedule_info *v = NULL;
    size_t n = 0;
    if (sl_scheduler_list(s, k, &v, &n))
        return SL_ENOMEM;
    json_t *root = json_object(), *list = json_array();
    int bad = !root || !list || json_object_set(root, "schedules", list);
    for (size_t i = 0; !bad && i < n; i++) {
        json_t *o = json_object(), *next = json_array();
        bad = !o || !next;
        for (size_t j = 0; !bad && j < v[i].nnext; j++)
            bad = json_array_append_new(next, time_or_null(v[i].next_ms[j]));
        bad = bad || json_object_set_new(o, "name", json_string(v[i].name)) ||
              json_object_set_new(o, "owner", json_string(v[i].owner)) ||
              json_object_set_new(o, "expression", json_string(v[i].expression)) ||
              json_object_set_new(o, "timezone", json_string(v[i].timezone)) ||
              json_object_set_new(o, "set", json_string(v[i].set)) ||
              json_object_set_new(o, "enabled", json_boolean(v[i].enabled)) ||
              json_object_set_new(o, "catch_up", json_integer(v[i].catch_up)) ||
              json_object_set(o, "next", next) ||
              json_object_set_new(o, "last", time_or_null(v[i].last_ms)) ||
              json_object_set_new(o, "pending", time_or_null(v[i].pending_ms)) ||
              json_object_set_new(o, "failures", json_integer(v[i].failures)) ||
              json_object_set_new(o, "error", v[i].error ? json_string(v[i].error) : json_null()) ||
              json_array_append(list, o);
        json_decref(next);
        json_decref(o);
    }
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(list);
    json_decref(root);
    sl_schedule_info_free(v, n);
    int rc = text && !sl_buf_append(out, text, strlen(text)) ? 0 : SL_ENOMEM;
    free(text);
    return rc;
}
