/*
 * rules/runner.c — the rule workers: a queue of (rule, partition) consumers
 * with work to do, drained by a pool of threads; see runner.h.
 */
#include "rules/runner.h"

#include "core/clock.h"
#include "core/connector.h"
#include "core/event.h"
#include "core/metrics.h"
#include "rules/cursor.h"
#include "rules/rule.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BATCH_RECORDS 512          /* records per turn of one consumer */
#define BATCH_BYTES (1u << 20)     /* or this many bytes of events */
#define CURSOR_SYNC_NS 1000000000  /* fdatasync cursors at most once a second */
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 30000

typedef struct rule_run rule_run;

typedef struct consumer {
    rule_run *rule;
    int32_t part;
    sl_cursor cur;
    _Atomic int64_t committed; /* cur.offset, readable by the API threads */
    void *reader;              /* open between turns; NULL after a failure */
    /* under the runner's lock */
    bool queued, running, again;
    int64_t retry_at_ns; /* 0: not waiting for a retry */
    int backoff_ms;
    struct consumer *next;
} consumer;

typedef struct target_inst {
    const sl_target_ops *ops;
    void *impl;
    sl_target_kind kind;
} target_inst;

struct rule_run {
    size_t idx;
    const sl_rule_config *rc;
    sl_set *set;
    target_inst *targets;
    size_t ntargets;
    consumer *cons;
    int32_t nparts;
    _Atomic uint64_t read, matched, filtered, dropped, failed, delivered, retries;
    pthread_mutex_t err_lock;
    char last_error[SL_ERROR_MAX];
    int64_t last_log_ns; /* failures are logged at most once a second per rule */
    uint64_t unlogged;
};

/* One worker's reusable state. */
typedef struct worker {
    sl_runner *r;
    pthread_t thread;
    sl_rule_vm *vm;
    sl_buf ev;         /* decorated events of the batch, back to back */
    size_t *ev_ends;   /* end of event i in ev */
    const char **evp;  /* pointers into ev, for transform_batch */
    size_t *evl;
    int64_t *offs;                        /* offset of event i */
    char (*lanes)[SL_EVENT_LANE_MAX + 1]; /* lane of event i */
    size_t ev_cap;
    sl_rule_out out;
    char (*out_lanes)[SL_EVENT_LANE_MAX + 1];
    size_t out_lanes_cap;
    sl_delivery *dl;
    int *status;
    size_t dl_cap;
    /* completion of a delivery */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t pending;
    char reason[SL_ERROR_MAX];
} worker;

struct sl_runner {
    sl_runner_options opts;
    rule_run *rules;
    size_t nrules;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    consumer *head, *tail;
    bool stopping;
    int64_t retry_scan_ns; /* when periodic() last ran */
    worker *workers;
    unsigned nworkers, started;
};

/* ---- queue (runner lock held) --------------------------------------------- */

static void push(sl_runner *r, consumer *c)
{
    if (c->queued || c->running || r->stopping)
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

/* Queues consumers whose back-off is over, and idle ones that lag (an
 * append they were not told about, e.g. before the bus knew the runner:
 * wake-ups are an optimisation, this check is the guarantee). */
static void periodic(sl_runner *r, int64_t now)
{
    for (size_t i = 0; i < r->nrules; i++)
        for (int32_t p = 0; p < r->rules[i].nparts; p++) {
            consumer *c = &r->rules[i].cons[p];
            if (c->retry_at_ns && now >= c->retry_at_ns) {
                c->retry_at_ns = 0;
                push(r, c);
            } else if (!c->retry_at_ns && !c->queued && !c->running &&
                       atomic_load(&c->committed) < sl_store_end_offset(&r->rules[i].set->parts[p])) {
                push(r, c);
            }
        }
}

void sl_runner_on_append(void *ctx, sl_set *set, int32_t partition, int64_t end)
{
    (void)end;
    sl_runner *r = ctx;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->nrules; i++) {
        rule_run *rr = &r->rules[i];
        if (rr->set != set || partition >= rr->nparts)
            continue;
        consumer *c = &rr->cons[partition];
        if (c->running)
            c->again = true;
        else if (!c->retry_at_ns)
            push(r, c);
    }
    pthread_mutex_unlock(&r->lock);
}

/* ---- one turn of a consumer ----------------------------------------------- */

static void rule_failure(rule_run *rr, int64_t offset, int32_t part, const char *why)
{
    pthread_mutex_lock(&rr->err_lock);
    snprintf(rr->last_error, sizeof rr->last_error, "partition %d offset %" PRId64 ": %s", part,
             offset, why);
    int64_t now = sl_clock_mono_ns();
    if (now - rr->last_log_ns >= 1000000000) {
        if (rr->unlogged)
            fprintf(stderr, "sluice: rule %s: %" PRIu64 " more failures since the last message\n",
                    rr->rc->name, rr->unlogged);
        fprintf(stderr, "sluice: rule %s: event failed at %s\n", rr->rc->name, rr->last_error);
        rr->last_log_ns = now;
        rr->unlogged = 0;
    } else {
        rr->unlogged++;
    }
    pthread_mutex_unlock(&rr->err_lock);
}

static int grow_worker(worker *w, size_t nev)
{
    if (nev > w->ev_cap) {
        size_t cap = nev * 2;
        size_t *e = realloc(w->ev_ends, cap * sizeof *e);
        if (e)
            w->ev_ends = e;
        const char **p = realloc(w->evp, cap * sizeof *p);
        if (p)
            w->evp = p;
        size_t *l = realloc(w->evl, cap * sizeof *l);
        if (l)
            w->evl = l;
        char(*ln)[SL_EVENT_LANE_MAX + 1] = realloc(w->lanes, cap * sizeof *ln);
        if (ln)
            w->lanes = ln;
        int64_t *o = realloc(w->offs, cap * sizeof *o);
        if (o)
            w->offs = o;
        if (!e || !p || !l || !ln || !o)
            return SL_ENOMEM;
        w->ev_cap = cap;
    }
    return 0;
}

/* Records the lane of the payloads added since `from`. */
static int tag_outputs(worker *w, size_t from, const char *lane)
{
    if (w->out.n > w->out_lanes_cap) {
        size_t cap = w->out.n * 2;
        char(*g)[SL_EVENT_LANE_MAX + 1] = realloc(w->out_lanes, cap * sizeof *g);
        if (!g)
            return SL_ENOMEM;
        w->out_lanes = g;
        w->out_lanes_cap = cap;
    }
    for (size_t i = from; i < w->out.n; i++)
        memcpy(w->out_lanes[i], lane, SL_EVENT_LANE_MAX + 1);
    return 0;
}

static void on_done(void *ctx, size_t i, int status, const char *reason)
{
    worker *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->status[i] = status;
    if (status && reason && !w->reason[0])
        snprintf(w->reason, sizeof w->reason, "%s", reason);
    if (--w->pending == 0)
        pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Delivers the worker's payloads to every target of the rule and waits.
 * Returns 0 when all are delivered or permanently refused (counted failed),
 * or an SL_E… code when a target must be retried. */
static int deliver(worker *w, rule_run *rr, int32_t part, int64_t first, char *why, size_t whylen)
{
    size_t n = w->out.n;
    if (!n)
        return 0;
    if (n > w->dl_cap) {
        sl_delivery *d = realloc(w->dl, n * sizeof *d);
        if (d)
            w->dl = d;
        int *s = realloc(w->status, n * sizeof *s);
        if (s)
            w->status = s;
        if (!d || !s)
            return SL_ENOMEM;
        w->dl_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        w->dl[i].data = sl_rule_out_get(&w->out, i, &w->dl[i].len);
        w->dl[i].lane = w->out_lanes[i];
    }
    int retry = 0;
    for (size_t t = 0; t < rr->ntargets; t++) {
        pthread_mutex_lock(&w->lock);
        w->pending = n;
        w->reason[0] = '\0';
        pthread_mutex_unlock(&w->lock);
        rr->targets[t].ops->deliver(rr->targets[t].impl, w->dl, n, on_done, w);
        pthread_mutex_lock(&w->lock);
        while (w->pending)
            pthread_cond_wait(&w->cond, &w->lock);
        pthread_mutex_unlock(&w->lock);
        size_t ok = 0, permanent = 0;
        for (size_t i = 0; i < n; i++) {
            if (w->status[i] == 0)
                ok++;
            else if (w->status[i] == SL_EINVAL)
                permanent++;
            else
                retry = w->status[i];
        }
        if (permanent) {
            atomic_fetch_add(&rr->failed, permanent);
            char msg[SL_ERROR_MAX + 64];
            snprintf(msg, sizeof msg, "target.%s refused %zu payload(s): %s",
                     rr->targets[t].ops->name, permanent, w->reason);
            rule_failure(rr, first, part, msg);
        }
        if (retry) {
            snprintf(why, whylen, "target.%s: %s", rr->targets[t].ops->name, w->reason);
            return retry;
        }
        if (t == 0)
            atomic_fetch_add(&rr->delivered, ok);
    }
    return 0;
}

/* Reads and evaluates up to one batch of events from the consumer's cursor.
 * Sets *more when it stopped before the end of the partition. */
static int turn(worker *w, consumer *c, bool *more, int64_t *next, char *why, size_t whylen)
{
    rule_run *rr = c->rule;
    const sl_store *st = &rr->set->parts[c->part];
    sl_error err = {0};
    *more = false;
    if (!c->reader) {
        int rc = sl_store_reader_open(st, c->cur.offset, NULL, &c->reader, &err);
        if (rc == SL_ERANGE) {
            int64_t start = sl_store_start_offset(st), end = sl_store_end_offset(st);
            int64_t bus_next = sl_databus_next_offset(rr->set, c->part);
            if (c->cur.offset > end && c->cur.offset <= bus_next) {
                *next = c->cur.offset; /* accepted, not written yet: the append wakes us */
                return 0;
            }
            char msg[200];
            if (c->cur.offset < start) {
                snprintf(msg, sizeof msg, "retention deleted %" PRId64 " events before the rule "
                         "delivered them; going on at offset %" PRId64,
                         start - c->cur.offset, start);
                atomic_fetch_add(&rr->failed, (uint64_t)(start - c->cur.offset));
                c->cur.offset = start;
            } else {
                /* The log lost its unsynced tail in a crash (ack = "buffer"):
                 * the offsets past its end will be given to new events. */
                snprintf(msg, sizeof msg, "the cursor is past the end of the partition (%" PRId64
                         "), which lost its unsynced tail in a crash; going on at the end", end);
                c->cur.offset = end;
            }
            rule_failure(rr, c->cur.offset, c->part, msg);
            rc = sl_store_reader_open(st, c->cur.offset, NULL, &c->reader, &err);
        }
        if (rc) {
            snprintf(why, whylen, "read: %s", err.msg[0] ? err.msg : sl_strerror(rc));
            c->reader = NULL;
            return rc;
        }
    }
    w->ev.len = 0;
    sl_rule_out_reset(&w->out);
    size_t nev = 0;
    int rc = 0;
    sl_record rec;
    int64_t first = c->cur.offset, last_taken = -1;
    bool batch_fn = rr->rc->transform_batch;
    while (nev < BATCH_RECORDS && w->ev.len < BATCH_BYTES) {
        rc = sl_store_reader_next(st, c->reader, &rec, &err);
        if (rc == SL_EEOF) {
            rc = 0;
            break;
        }
        if (rc)
            break;
        if ((rc = grow_worker(w, nev + 1)))
            break;
        size_t lane_len = rec.lane_len <= SL_EVENT_LANE_MAX ? rec.lane_len : 0;
        /* transform_batch gets one lane per call: a new lane ends the batch
         * (the Databus writes lane-homogeneous batches, so this is rare). */
        if (batch_fn && nev &&
            (strlen(w->lanes[0]) != lane_len || memcmp(w->lanes[0], rec.lane, lane_len))) {
            *more = true;
            /* not consumed: reopen at this record next turn */
            sl_store_reader_close(st, c->reader);
            c->reader = NULL;
            break;
        }
        size_t at = w->ev.len;
        if (!rec.value ||
            sl_event_decorate((const char *)rec.value, rec.value_len, rr->set->name, c->part,
                              rec.offset, &w->ev)) {
            atomic_fetch_add(&rr->failed, 1);
            rule_failure(rr, rec.offset, c->part, "stored event is not a JSON object");
            last_taken = rec.offset;
            continue;
        }
        last_taken = rec.offset;
        w->ev_ends[nev] = w->ev.len;
        w->evl[nev] = w->ev.len - at;
        w->offs[nev] = rec.offset;
        memcpy(w->lanes[nev], rec.lane, lane_len);
        w->lanes[nev][lane_len] = '\0';
        nev++;
    }
    if (rc) {
        snprintf(why, whylen, "read: %s", err.msg[0] ? err.msg : sl_strerror(rc));
        sl_store_reader_close(st, c->reader);
        c->reader = NULL;
        return rc;
    }
    /* After a lane split the reader went one record too far. */
    *next = c->reader ? sl_store_reader_position(st, c->reader)
                      : (last_taken >= 0 ? last_taken + 1 : first);
    if (nev == BATCH_RECORDS || w->ev.len >= BATCH_BYTES)
        *more = true;
    atomic_fetch_add(&rr->read, nev);
    sl_input_ctx ictx = {.rule = rr->rc->name, .now_ms = sl_clock_now_ms()};
    if (rr->rc->enabled && batch_fn && nev) {
        for (size_t i = 0; i < nev; i++)
            w->evp[i] = (const char *)w->ev.data + (i ? w->ev_ends[i - 1] : 0);
        size_t passed = 0;
        sl_error e = {0};
        int r = sl_rule_eval_batch(w->vm, rr->idx, w->evp, w->evl, nev, &ictx, &w->out, &passed,
                                   &e);
        if (r) {
            atomic_fetch_add(&rr->failed, nev);
            rule_failure(rr, first, c->part, e.msg);
        } else {
            atomic_fetch_add(&rr->matched, passed);
            atomic_fetch_add(&rr->filtered, nev - passed);
            if ((r = tag_outputs(w, 0, w->lanes[0])))
                return r;
        }
    } else if (rr->rc->enabled) {
        for (size_t i = 0; i < nev; i++) {
            const char *evj = (const char *)w->ev.data + (i ? w->ev_ends[i - 1] : 0);
            size_t from = w->out.n;
            sl_rule_outcome oc;
            sl_error e = {0};
            int r = sl_rule_eval(w->vm, rr->idx, evj, w->evl[i], &ictx, &w->out, &oc, &e);
            if (r) {
                atomic_fetch_add(&rr->failed, 1);
                rule_failure(rr, w->offs[i], c->part, e.msg);
                continue;
            }
            _Atomic uint64_t *ctr = oc == SL_RULE_MATCHED    ? &rr->matched
                                    : oc == SL_RULE_FILTERED ? &rr->filtered
                                    : oc == SL_RULE_DROPPED  ? &rr->dropped
                                                             : NULL;
            if (ctr)
                atomic_fetch_add(ctr, 1);
            if ((r = tag_outputs(w, from, w->lanes[i])))
                return r;
        }
    }
    if ((rc = deliver(w, rr, c->part, first, why, whylen))) {
        if (c->reader)
            sl_store_reader_close(st, c->reader);
        c->reader = NULL;
        return rc;
    }
    return 0;
}

/* Runs one turn and commits; decides whether the consumer goes on. */
static bool run_consumer(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    char why[SL_ERROR_MAX + 64] = "";
    bool more = false;
    int64_t before = c->cur.offset, next = before;
    int rc = turn(w, c, &more, &next, why, sizeof why);
    if (rc && c->reader) { /* the next turn must start again at the cursor */
        sl_store_reader_close(&rr->set->parts[c->part], c->reader);
        c->reader = NULL;
    }
    /* next may equal a position turn() set after retention or a crash moved
     * the partition's start or end: compare with where the turn began. */
    if (!rc && (next != before || atomic_load(&c->committed) != next)) {
        sl_error err = {0};
        rc = sl_cursor_commit(&c->cur, next, CURSOR_SYNC_NS, &err);
        if (rc)
            snprintf(why, sizeof why, "cursor: %s", err.msg);
        else
            atomic_store(&c->committed, next);
    }
    pthread_mutex_lock(&w->r->lock);
    if (rc) {
        /* Hold the partition and try the same events again later. */
        c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (c->backoff_ms > BACKOFF_MAX_MS)
            c->backoff_ms = BACKOFF_MAX_MS;
        c->retry_at_ns = sl_clock_mono_ns() + (int64_t)c->backoff_ms * 1000000;
        more = false;
    } else {
        c->backoff_ms = 0;
    }
    pthread_mutex_unlock(&w->r->lock);
    if (rc) {
        atomic_fetch_add(&rr->retries, 1);
        char msg[SL_ERROR_MAX + 128];
        snprintf(msg, sizeof msg, "%s (delivering again in %d ms)", why, c->backoff_ms);
        rule_failure(rr, c->cur.offset, c->part, msg);
    }
    return more;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    sl_runner *r = w->r;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->head && !r->stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&r->cond, &r->lock, &ts);
            periodic(r, sl_clock_mono_ns());
        }
        if (r->stopping)
            break;
        int64_t now = sl_clock_mono_ns();
        if (now - r->retry_scan_ns > 100000000) { /* busy queues must not starve retries */
            r->retry_scan_ns = now;
            periodic(r, now);
        }
        consumer *c = pop(r);
        c->running = true;
        c->again = false;
        pthread_mutex_unlock(&r->lock);
        bool more = run_consumer(w, c);
        pthread_mutex_lock(&r->lock);
        c->running = false;
        if ((more || c->again) && !c->retry_at_ns)
            push(r, c);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---- start / stop ---------------------------------------------------------- */

static void free_runner(sl_runner *r)
{
    for (unsigned i = 0; i < r->nworkers; i++) {
        worker *w = &r->workers[i];
        sl_rule_vm_free(w->vm);
        sl_buf_free(&w->ev);
        sl_rule_out_free(&w->out);
        free(w->ev_ends);
        free(w->evp);
        free(w->evl);
        free(w->offs);
        free(w->lanes);
        free(w->out_lanes);
        free(w->dl);
        free(w->status);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
    }
    free(r->workers);
    for (size_t i = 0; i < r->nrules; i++) {
        rule_run *rr = &r->rules[i];
        for (int32_t p = 0; rr->cons && p < rr->nparts; p++) {
            consumer *c = &rr->cons[p];
            if (c->reader)
                sl_store_reader_close(&rr->set->parts[p], c->reader);
            sl_cursor_close(&c->cur);
        }
        free(rr->cons);
        for (size_t t = 0; t < rr->ntargets; t++)
            if (rr->targets[t].impl)
                rr->targets[t].ops->close(rr->targets[t].impl);
        free(rr->targets);
        pthread_mutex_destroy(&rr->err_lock);
    }
    free(r->rules);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cond);
    free(r);
}

static int open_rule(sl_runner *r, rule_run *rr, sl_error *err)
{
    const sl_rule_config *rc = rr->rc;
    int rc2 = sl_sets_get(r->opts.sets, rc->set, true, &rr->set, err);
    if (rc2)
        return rc2;
    rr->nparts = rr->set->nparts;
    if (!(rr->cons = calloc((size_t)rr->nparts, sizeof *rr->cons)) ||
        !(rr->targets = calloc(rc->ntargets ? rc->ntargets : 1, sizeof *rr->targets)))
        return sl_error_set(err, SL_ENOMEM, "rule %s: out of memory", rc->name);
    for (int32_t p = 0; p < rr->nparts; p++) /* none is open until its turn below */
        rr->cons[p].cur.fd = -1;
    for (int32_t p = 0; p < rr->nparts; p++) {
        consumer *c = &rr->cons[p];
        c->rule = rr;
        c->part = p;
        bool found;
        sl_error cerr = {0};
        bool damaged = false;
        rc2 = sl_cursor_open(&c->cur, r->opts.data_dir, rc->name, rc->set, p, &found, &cerr);
        if (rc2 == SL_ECORRUPT) {
            /* Its position is lost: deliver again from the oldest event kept
             * rather than skip what it had not delivered (at least once). */
            fprintf(stderr, "sluice: rule %s: %s; starting again at the oldest event of "
                            "partition %d\n", rc->name, cerr.msg, p);
            damaged = true;
        } else if (rc2) {
            return sl_error_set(err, rc2, "%s", cerr.msg);
        }
        if (!found) { /* a new rule: where it starts is decided once, and kept */
            int64_t start = rc->from_beginning || damaged
                                ? sl_store_start_offset(&rr->set->parts[p])
                                : sl_databus_next_offset(rr->set, p);
            if ((rc2 = sl_cursor_commit(&c->cur, start, 0, err)))
                return rc2;
        }
        atomic_store(&c->committed, c->cur.offset);
    }
    sl_target_env env = {.sets = r->opts.sets, .bus = r->opts.bus, .rule = rc->name};
    rr->ntargets = rc->ntargets;
    for (size_t t = 0; t < rc->ntargets; t++) {
        target_inst *ti = &rr->targets[t];
        ti->kind = rc->targets[t].kind;
        ti->ops = sl_target_find(ti->kind);
        if ((rc2 = ti->ops->open(&rc->targets[t], &env, &ti->impl, err)))
            return rc2;
    }
    return 0;
}

int sl_runner_start(const sl_runner_options *opts, sl_runner **out, sl_error *err)
{
    sl_runner *r = calloc(1, sizeof *r);
    if (!r)
        return sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    r->opts = *opts;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    const sl_config *cfg = opts->cfg;
    unsigned nw = opts->workers ? opts->workers : cfg->workers;
    if (!nw) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nw = n > 0 ? (unsigned)n : 1;
    }
    int rc = 0;
    r->rules = calloc(cfg->nrules ? cfg->nrules : 1, sizeof *r->rules);
    r->workers = calloc(nw, sizeof *r->workers);
    if (!r->rules || !r->workers)
        rc = sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    for (size_t i = 0; !rc && i < cfg->nrules; i++) {
        rule_run *rr = &r->rules[r->nrules++];
        rr->idx = i;
        rr->rc = &cfg->rules[i];
        pthread_mutex_init(&rr->err_lock, NULL);
        rc = open_rule(r, rr, err);
    }
    for (unsigned i = 0; !rc && i < nw; i++) {
        worker *w = &r->workers[r->nworkers++];
        w->r = r;
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        rc = sl_rule_vm_new(cfg, &w->vm, err);
    }
    for (unsigned i = 0; !rc && i < r->nworkers; i++) {
        if (pthread_create(&r->workers[i].thread, NULL, worker_main, &r->workers[i]))
            rc = sl_error_set(err, SL_ENOMEM, "rule runner: cannot start a worker thread");
        else
            r->started++;
    }
    if (rc) {
        sl_runner_stop(r);
        return rc;
    }
    /* Catch up from every cursor at once. */
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->nrules; i++)
        for (int32_t p = 0; p < r->rules[i].nparts; p++)
            push(r, &r->rules[i].cons[p]);
    pthread_mutex_unlock(&r->lock);
    *out = r;
    return 0;
}

void sl_runner_stop(sl_runner *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    /* A worker may be waiting for a target; let targets hurry so that a hung
     * endpoint cannot hold the stop (what they fail is delivered again). */
    for (size_t i = 0; i < r->nrules; i++)
        for (size_t t = 0; t < r->rules[i].ntargets; t++) {
            const target_inst *ti = &r->rules[i].targets[t];
            if (ti->impl && ti->ops->cancel)
                ti->ops->cancel(ti->impl);
        }
    for (unsigned i = 0; i < r->started; i++)
        pthread_join(r->workers[i].thread, NULL);
    free_runner(r);
}

/* ---- reporting ------------------------------------------------------------- */

static int64_t rule_lag(const rule_run *rr, int32_t p, int64_t *end)
{
    *end = sl_store_end_offset(&rr->set->parts[p]);
    int64_t lag = *end - atomic_load(&rr->cons[p].committed);
    return lag > 0 ? lag : 0;
}

int sl_runner_rules_json(sl_runner *r, sl_buf *out)
{
    int rc = sl_buf_printf(out, "{\"rules\":[");
    for (size_t i = 0; !rc && i < r->nrules; i++) {
        rule_run *rr = &r->rules[i];
        rc = sl_buf_printf(out, "%s{\"name\":\"%s\",\"set\":\"%s\",\"enabled\":%s,\"targets\":[",
                           i ? "," : "", rr->rc->name, rr->set->name,
                           rr->rc->enabled ? "true" : "false");
        for (size_t t = 0; !rc && t < rr->ntargets; t++)
            rc = sl_buf_printf(out, "%s\"%s\"", t ? "," : "", rr->targets[t].ops->name);
        rc = rc ? rc : sl_buf_printf(out, "],\"partitions\":[");
        int64_t total = 0;
        for (int32_t p = 0; !rc && p < rr->nparts; p++) {
            int64_t end, lag = rule_lag(rr, p, &end);
            total += lag;
            rc = sl_buf_printf(out,
                               "%s{\"partition\":%d,\"cursor\":%" PRId64 ",\"end\":%" PRId64
                               ",\"lag\":%" PRId64 "}",
                               p ? "," : "", p, atomic_load(&rr->cons[p].committed), end, lag);
        }
        if (rc)
            break;
        pthread_mutex_lock(&rr->err_lock);
        sl_buf esc = SL_BUF_INIT;
        for (const char *s = rr->last_error; *s && !rc; s++) {
            unsigned char ch = (unsigned char)*s;
            rc = ch == '"' || ch == '\\' ? sl_buf_printf(&esc, "\\%c", ch)
                 : ch < 0x20             ? sl_buf_printf(&esc, "\\u%04x", ch)
                                         : sl_buf_append(&esc, s, 1);
        }
        pthread_mutex_unlock(&rr->err_lock);
        rc = rc ? rc
                : sl_buf_printf(out,
                                "],\"lag\":%" PRId64 ",\"read\":%" PRIu64 ",\"matched\":%" PRIu64
                                ",\"filtered\":%" PRIu64 ",\"dropped\":%" PRIu64
                                ",\"failed\":%" PRIu64 ",\"delivered\":%" PRIu64
                                ",\"retries\":%" PRIu64 ",\"last_error\":\"%.*s\"}",
                                total, atomic_load(&rr->read), atomic_load(&rr->matched),
                                atomic_load(&rr->filtered), atomic_load(&rr->dropped),
                                atomic_load(&rr->failed), atomic_load(&rr->delivered),
                                atomic_load(&rr->retries), (int)esc.len,
                                esc.data ? (const char *)esc.data : "");
        sl_buf_free(&esc);
    }
    return rc ? rc : sl_buf_printf(out, "]}\n");
}

int sl_runner_metrics(sl_runner *r, sl_buf *out)
{
    static const char *const names[] = {"read", "matched", "filtered", "dropped",
                                        "failed", "delivered", "retries"};
    int rc = 0;
    for (size_t k = 0; !rc && k < sizeof names / sizeof *names; k++) {
        rc = sl_buf_printf(out, "# TYPE sluice_rule_%s_total counter\n", names[k]);
        for (size_t i = 0; !rc && i < r->nrules; i++) {
            rule_run *rr = &r->rules[i];
            _Atomic uint64_t *v[] = {&rr->read,   &rr->matched,   &rr->filtered, &rr->dropped,
                                     &rr->failed, &rr->delivered, &rr->retries};
            rc = sl_buf_printf(out, "sluice_rule_%s_total{rule=\"%s\"} %" PRIu64 "\n", names[k],
                               rr->rc->name, atomic_load(v[k]));
        }
    }
    rc = rc ? rc : sl_buf_printf(out, "# TYPE sluice_rule_lag gauge\n");
    for (size_t i = 0; !rc && i < r->nrules; i++) {
        int64_t total = 0, end;
        for (int32_t p = 0; p < r->rules[i].nparts; p++)
            total += rule_lag(&r->rules[i], p, &end);
        rc = sl_buf_printf(out, "sluice_rule_lag{rule=\"%s\"} %" PRId64 "\n", r->rules[i].rc->name,
                           total);
    }
    return rc;
}
