/*
 * rules/runner.c — the rule workers: a queue of (rule, partition) consumers
 * with work to do, drained by a pool of threads; see runner.h.
 *
 * A consumer's turn: retry the payloads of its pool that are due, then (if
 * its pool lets it) read, evaluate and deliver the next batch; whatever is
 * not delivered goes to the pool (retry later) or to the dead-letter set.
 * The cursor commits the oldest offset still unresolved, so a crash repeats
 * what was in the pool instead of losing it. The pool belongs to the worker
 * running the consumer (one at a time), so it needs no lock.
 */
#include "rules/runner.h"

#include "core/base/clock.h"
#include "core/bus/connector.h"
#include "core/bus/event.h"
#include "core/base/json.h"
#include "core/base/metrics.h"
#include "core/bus/cursor.h"
#include "rules/rule.h"
#include "core/base/slog.h"

#include <glob.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BATCH_RECORDS 512         /* records per turn of one consumer, by default */
#define BATCH_RECORDS_MAX 8192    /* when its targets ask for more (batch_hint) */
#define BATCH_EVENT_BYTES 2048    /* bytes of events per record of the limit */
#define CURSOR_SYNC_NS 1000000000 /* fdatasync cursors at most once a second */
#define BACKOFF_MIN_MS 1000       /* read and cursor errors: 1 s doubling … */
#define BACKOFF_MAX_MS 30000      /* … up to 30 s */
#define POOL_MAX 4096             /* ordered = false: payloads set aside per partition */
#define RULE_BIT 63               /* in a dead mask: the evaluation itself failed */
#define REASON_MAX 1024           /* bytes of a reason kept in sluiceerror */
#define REPLAYS_KEPT 32           /* finished replays still shown */
#define REPLAYS_RUNNING_MAX 16    /* replays running at once */
#define SCAN_NS 20000000          /* periodic(): retry times and missed wake-ups */
#define SCAN_BUSY_NS 100000000    /* … at least this often when the queue is never empty */
#define WAIT_CHECK_NS 50000000    /* a worker waiting for a target looks around this often */

#define RUN_CHUNK 1024                /* runs per chunk of sl_runner.chunks */
#define RUN_CHUNKS 1024               /* at most RUN_CHUNK * RUN_CHUNKS runs per runner */
#define LANE_NAMES (2 * SL_LANES_MAX) /* distinct lanes one runner sums up */
#define RUN(r, i) ((r)->chunks[(i) / RUN_CHUNK][(i) % RUN_CHUNK])

typedef struct rule_run rule_run;
typedef struct replay replay;

/* What a rule, or one replay of it, counts. */
typedef struct counters {
    _Atomic uint64_t read, matched, filtered, dropped, failed, delivered, retries, dead_lettered,
        discarded;
    _Atomic int64_t retrying; /* payloads in pools now */
} counters;

/* A payload (or an event whose evaluation failed) not resolved yet. */
typedef struct item {
    char *payload; /* NULL: the evaluation failed (dead has RULE_BIT) */
    size_t len;
    char *source; /* the source event (decorated JSON), NULL if not known */
    size_t source_len;
    char lane[SL_EVENT_LANE_MAX + 1];
    int64_t offset;        /* of the source event */
    uint64_t todo;         /* targets still to deliver to (bit t) */
    uint64_t dead;         /* targets that gave up: to the dead-letter set */
    uint32_t attempts;     /* deliveries that failed */
    uint32_t tries;        /* rounds, deferred ones too: drives the back-off */
    int64_t first_fail_ms; /* monotonic (mono_ms) */
    int64_t retry_at_ns;   /* 0: to be scheduled */
    char *reason;          /* the last failure */
} item;

typedef struct consumer {
    rule_run *rule;
    replay *rp; /* NULL: the rule's live consumer */
    counters *ctr;
    int32_t part;
    sl_cursor cur;             /* live consumers only */
    _Atomic int64_t committed; /* cur.offset (replay: progress), for the API threads */
    int64_t pos;               /* next offset to read (see set_pos) */
    _Atomic int64_t read_pos;  /* pos, for periodic()'s lag check */
    int64_t start;             /* replay: where it began */
    _Atomic int64_t end;       /* replay: stop before this offset */
    void *reader;              /* open between turns; NULL after a failure */
    item *pool;                /* owned by the worker running the consumer */
    size_t npool, pool_cap;
    _Atomic bool done; /* replay: reached its end with an empty pool */
    /* under the runner's lock */
    bool queued, running, again;
    bool hold;            /* run only at retry_at_ns (back-off, or a pool that blocks) */
    int64_t retry_at_ns;  /* 0: nothing timed */
    int backoff_ms;       /* read and cursor errors */
    int64_t lag_check_ns; /* lane runs: when periodic() last queued it for lag */
    struct consumer *next;
} consumer;

struct replay {
    replay *next;
    char id[24];
    rule_run *rule;
    int64_t from_ms, to_ms, started_ms;
    _Atomic int64_t finished_ms; /* 0 while running */
    consumer *cons;
    int32_t nparts;
    _Atomic int32_t remaining; /* partitions not done */
    counters ctr;
};

typedef struct target_inst {
    const sl_target_ops *ops;
    void *impl;
    char label[32]; /* "http", or "http#2" when the rule has several http targets */
} target_inst;

/* One (rule, lane) pair: the base rule (lane ""), or the rule for the events
 * of one lane (its override, the base rule as a fallback, or nothing but a
 * count: mode UNROUTED). Each has its own cursors, pools and counters, so a
 * broken test lane never holds production delivery; fallback runs share the
 * base run's target instances (like its partitions do). */
struct rule_run {
    size_t idx; /* the rule number the VMs evaluate (sl_config_rule_at) */
    const sl_rule_config *rc;
    char lane[SL_EVENT_LANE_MAX + 1];
    char label[SL_EVENT_LANE_MAX + 160];      /* "billing", "billing (lane feature-x)" */
    char cursor_set[SL_EVENT_LANE_MAX + 160]; /* "orders", "orders/lanes/feature-x" */
    rule_run *base_run;                       /* lane runs: the base rule's run (targets, dlq) */
    int lane_idx;                             /* in sl_runner.lane_names, -1 if it did not fit */
    bool unrouted;        /* lane without override nor fallback: events are only counted */
    bool was_new;         /* its cursors were created at this start */
    bool borrowed;        /* targets and dlq are base_run's */
    _Atomic bool dropped; /* `sluice lane drop`: consumers stopped, never queued again */
    _Atomic uint64_t unrouted_n;
    sl_set *set;
    target_inst *targets;
    size_t ntargets;
    target_inst dlq; /* impl NULL: no dead-letter set */
    consumer *cons;
    int32_t nparts;
    counters ctr;
    size_t batch_records;     /* records per turn: what its targets want */
    _Atomic uint64_t wrapped; /* dead letters made for payloads that are not events */
    pthread_mutex_t err_lock;
    char last_error[SL_ERROR_MAX];
    int64_t last_log_ns[2]; /* see log_failure() */
    uint64_t unlogged[2];
};

/* One worker's reusable state. */
typedef struct worker {
    sl_runner *r;
    pthread_t thread;
    sl_rule_vm *vm;
    uint64_t rng;
    /* the events of a batch */
    sl_buf ev;        /* decorated events, back to back */
    size_t *ev_ends;  /* end of event i in ev */
    const char **evp; /* pointers into ev, for transform_batch */
    size_t *evl;
    int64_t *offs;                        /* offset of event i */
    char (*lanes)[SL_EVENT_LANE_MAX + 1]; /* lane of event i */
    size_t ev_cap;
    /* the payloads they made */
    sl_rule_out out;
    char (*out_lanes)[SL_EVENT_LANE_MAX + 1];
    int32_t *out_src; /* event index of payload i, -1 if not known (transform_batch) */
    size_t out_cap;
    /* a delivery round over n payloads */
    sl_delivery *dl, *sub;
    uint64_t *todo, *dead;
    bool *failed;
    size_t *map;    /* sub[j] is dl[map[j]] */
    int *st;        /* status of sub[j] */
    size_t *rsub;   /* reason of sub[j]: offset in reasons, SIZE_MAX none */
    size_t *reason; /* reason of payload i: offset in reasons, SIZE_MAX none */
    item **its;     /* retries: the item of payload i */
    size_t round_cap;
    sl_buf reasons;
    sl_buf dlq; /* dead letters being written */
    size_t *dlq_ends;
    size_t dlq_cap;
    /* completion of a delivery */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t pending;
} worker;

struct sl_runner {
    sl_runner_options opts;
    /* Runs 0 … nbase-1 are the base rules (cfg->rules order), lane runs
     * follow, in chunks that never move (RUN()); runs are only freed with
     * the runner (a dropped lane's stay, idle), so readers load nruns and go
     * without the lock. */
    rule_run **chunks[RUN_CHUNKS];
    _Atomic size_t nruns;
    size_t nbase;
    /* Lane names of the runs (rule_run.lane_idx), for per-lane sums. */
    char (*lane_names)[SL_EVENT_LANE_MAX + 1];
    size_t nlane_names;
    pthread_mutex_t lanes_lock; /* adding and dropping lanes, one at a time */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    consumer *head, *tail;
    bool stopping;
    int64_t retry_scan_ns; /* when periodic() last ran */
    worker *workers;
    unsigned nworkers;    /* slots holding a worker's resources (freed with the runner) */
    unsigned started;     /* workers 0..started-1 run (joined at stop) */
    unsigned max_workers; /* the pool's limit (workers' size) */
    unsigned waiting;     /* workers waiting for a target */
    bool growing;         /* maybe_grow() is building a worker */
    replay *replays;      /* newest first; under lock */
    unsigned replay_seq;
};

/* ---- queue (runner lock held) --------------------------------------------- */

static void push(sl_runner *r, consumer *c)
{
    if (c->queued || c->running || r->stopping || atomic_load(&c->done) ||
        atomic_load(&c->rule->dropped))
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
    if (c->retry_at_ns && now >= c->retry_at_ns) {
        push(r, c);
    } else if (!c->hold && !c->rp && !c->queued && !c->running &&
               atomic_load(&c->read_pos) < sl_store_end_offset(&c->rule->set->parts[c->part])) {
        /* A lane run lags behind every append of other lanes without
         * anything to do (on_append wakes it for its own): look only once a
         * second, so that fifty idle lanes cost nothing. */
        if (c->rule->lane[0] && now - c->lag_check_ns < 1000000000)
            return;
        c->lag_check_ns = now;
        push(r, c);
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
        if (c->running)
            c->again = true;
        else if (!c->hold)
            push(r, c);
    }
    pthread_mutex_unlock(&r->lock);
}

/* ---- failures --------------------------------------------------------------- */

/* Sets last_error and logs it, at most once a second per kind (failures
 * that will be retried, and events given up on), so that an outage cannot
 * flood the log and retry noise cannot hide a loss. */
static void log_failure(rule_run *rr, int64_t offset, int32_t part, const char *why, int kind)
{
    static const char *const what[] = {"failures", "events dropped"};
    pthread_mutex_lock(&rr->err_lock);
    snprintf(rr->last_error, sizeof rr->last_error, "partition %d offset %" PRId64 ": %s", part,
             offset, why);
    int64_t now = sl_clock_mono_ns();
    if (now - rr->last_log_ns[kind] >= 1000000000) {
        if (rr->unlogged[kind])
            sl_slog(SL_SLOG_WARN, "rules", "rule %s: %" PRIu64 " more %s since the last message",
                    rr->label, rr->unlogged[kind], what[kind]);
        sl_slog(SL_SLOG_WARN, "rules", "rule %s: event failed at %s", rr->label, rr->last_error);
        rr->last_log_ns[kind] = now;
        rr->unlogged[kind] = 0;
    } else {
        rr->unlogged[kind]++;
    }
    pthread_mutex_unlock(&rr->err_lock);
}

static void rule_failure(rule_run *rr, int64_t offset, int32_t part, const char *why)
{
    log_failure(rr, offset, part, why, 0);
}

static void rule_loss(rule_run *rr, int64_t offset, int32_t part, const char *why)
{
    log_failure(rr, offset, part, why, 1);
}

/* ---- worker arrays ---------------------------------------------------------- */

#define GROW(p, cap)                                                                               \
    do {                                                                                           \
        void *g_ = realloc((p), (cap) * sizeof *(p));                                              \
        if (!g_)                                                                                   \
            return SL_ENOMEM;                                                                      \
        (p) = g_;                                                                                  \
    } while (0)

static int grow_events(worker *w, size_t nev)
{
    if (nev <= w->ev_cap)
        return 0;
    size_t cap = nev * 2;
    GROW(w->ev_ends, cap);
    GROW(w->evp, cap);
    GROW(w->evl, cap);
    GROW(w->lanes, cap);
    GROW(w->offs, cap);
    w->ev_cap = cap;
    return 0;
}

/* Records the lane and source of the payloads added since `from`. */
static int tag_outputs(worker *w, size_t from, const char *lane, int32_t src)
{
    if (w->out.n > w->out_cap) {
        size_t cap = w->out.n * 2;
        GROW(w->out_lanes, cap);
        GROW(w->out_src, cap);
        w->out_cap = cap;
    }
    for (size_t i = from; i < w->out.n; i++) {
        memcpy(w->out_lanes[i], lane, SL_EVENT_LANE_MAX + 1);
        w->out_src[i] = src;
    }
    return 0;
}

static int grow_round(worker *w, size_t n)
{
    if (n <= w->round_cap)
        return 0;
    size_t cap = n * 2;
    GROW(w->dl, cap);
    GROW(w->sub, cap);
    GROW(w->todo, cap);
    GROW(w->dead, cap);
    GROW(w->failed, cap);
    GROW(w->map, cap);
    GROW(w->st, cap);
    GROW(w->rsub, cap);
    GROW(w->reason, cap);
    GROW(w->its, cap);
    w->round_cap = cap;
    return 0;
}

static int add_item(consumer *c, const item *it)
{
    if (c->npool == c->pool_cap) {
        size_t cap = c->pool_cap ? c->pool_cap * 2 : 16;
        GROW(c->pool, cap);
        c->pool_cap = cap;
    }
    c->pool[c->npool++] = *it;
    atomic_fetch_add(&c->ctr->retrying, 1);
    return 0;
}

static void free_item(item *it)
{
    free(it->payload);
    free(it->source);
    free(it->reason);
}

/* max_age is measured on the monotonic clock: a clock step must not give
 * up on events early. */
static int64_t mono_ms(void)
{
    return sl_clock_mono_ns() / 1000000;
}

static uint64_t next_random(worker *w)
{
    /* xorshift64*: jitter needs no more */
    w->rng ^= w->rng >> 12;
    w->rng ^= w->rng << 25;
    w->rng ^= w->rng >> 27;
    return w->rng * 2685821657736338717ull;
}

/* EventBridge's back-off: exponential from `initial` up to `max` with full
 * jitter (a uniform delay between 0 and the cap), so that many failing
 * partitions do not retry in lockstep. */
static int64_t backoff_ms(worker *w, const sl_retry_config *rc, uint32_t tries)
{
    int64_t cap = rc->initial_ms;
    for (uint32_t k = 1; rc->backoff == SL_BACKOFF_EXPONENTIAL && k < tries && cap < rc->max_ms;
         k++)
        cap *= 2;
    if (cap > rc->max_ms)
        cap = rc->max_ms;
    return (int64_t)(next_random(w) % (uint64_t)(cap + 1));
}

/* ---- a delivery round --------------------------------------------------------- */

static void on_done(void *ctx, size_t j, int status, const char *reason)
{
    worker *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->st[j] = status;
    w->rsub[j] = SIZE_MAX;
    if (status && reason) {
        size_t at = w->reasons.len;
        if (sl_buf_append(&w->reasons, reason, strlen(reason) + 1) == 0)
            w->rsub[j] = at;
    }
    if (--w->pending == 0)
        pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void *worker_main(void *arg);

static int init_worker(sl_runner *r, worker *w, sl_error *err)
{
    w->r = r;
    w->rng = ((uint64_t)sl_clock_mono_ns() ^ ((uintptr_t)w * 0x9e3779b97f4a7c15ull)) | 1;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    return sl_rule_vm_new(r->opts.cfg, &w->vm, err);
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
    int rc = init_worker(r, w, &err);
    if (!rc && pthread_create(&w->thread, NULL, worker_main, w))
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
static void wait_targets(worker *w)
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

static const char *reason_at(const worker *w, size_t off)
{
    return off == SIZE_MAX ? "unknown error" : (const char *)w->reasons.data + off;
}

/* Delivers dl[0..n) to the targets in todo[i] and waits. On return todo[i]
 * holds the targets still to retry, dead[i] those that refused for good
 * (SL_EINVAL), failed[i] whether a real attempt failed (a deferred payload,
 * one a target did not try, is not an attempt) and reason[i] the first
 * failure's reason (offset in w->reasons, valid until the next round). */
static void round_deliver(worker *w, rule_run *rr, size_t n)
{
    w->reasons.len = 0;
    for (size_t i = 0; i < n; i++) {
        w->dead[i] = 0;
        w->failed[i] = false;
        w->reason[i] = SIZE_MAX;
    }
    for (size_t t = 0; t < rr->ntargets; t++) {
        uint64_t bit = 1ull << t;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (w->todo[i] & bit) {
                w->map[k] = i;
                w->sub[k++] = w->dl[i];
            }
        if (!k)
            continue;
        pthread_mutex_lock(&w->lock);
        w->pending = k;
        pthread_mutex_unlock(&w->lock);
        rr->targets[t].ops->deliver(rr->targets[t].impl, w->sub, k, on_done, w);
        wait_targets(w);
        for (size_t j = 0; j < k; j++) {
            size_t i = w->map[j];
            int s = w->st[j];
            if (s == 0) {
                w->todo[i] &= ~bit;
                continue;
            }
            if (w->reason[i] == SIZE_MAX)
                w->reason[i] = w->rsub[j];
            if (s == SL_EINVAL) {
                w->todo[i] &= ~bit;
                w->dead[i] |= bit;
                w->reason[i] = w->rsub[j]; /* the refusal is what the DLQ must say */
            } else if (s != SL_EDEFERRED && s != SL_ESHUTDOWN) {
                w->failed[i] = true;
            }
        }
    }
}

/* Says (in last_error and the rate-limited log) why payloads of a round
 * will be retried. */
static void note_retries(worker *w, consumer *c, size_t n, bool fresh)
{
    size_t k = 0, first = SIZE_MAX;
    int64_t off = c->pos;
    for (size_t i = 0; i < n; i++) {
        if (!w->todo[i] || w->reason[i] == SIZE_MAX || k++)
            continue;
        first = w->reason[i];
        off = !fresh ? w->its[i]->offset : w->out_src[i] >= 0 ? w->offs[w->out_src[i]] : w->offs[0];
    }
    if (!k)
        return;
    char msg[SL_ERROR_MAX + 64];
    snprintf(msg, sizeof msg, "%s (%zu payload(s) to retry)", reason_at(w, first), k);
    rule_failure(c->rule, off, c->part, msg);
}

/* ---- dead letters -------------------------------------------------------------- */

static void target_names(const rule_run *rr, uint64_t mask, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t t = 0; t < 64 && o < len; t++) {
        if (!(mask & (1ull << t)))
            continue;
        const char *name = t == RULE_BIT ? "rule" : rr->targets[t].label;
        o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", name);
    }
}

/* A reason fit for a string attribute: printable ASCII, bounded. */
static void clean_reason(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; in && *in && o + 1 < len; in++)
        out[o++] = (unsigned char)*in >= 0x20 && (unsigned char)*in < 0x7f ? *in : '?';
    out[o] = '\0';
}

/* Whether an event member is one a dead letter drops or sets itself. */
static bool replaced_member(const sl_json_tok *key)
{
    static const char *const names[] = {"sluiceset",    "sluicepartition", "sluiceoffset",
                                        "sluiceerror",  "sluiceattempts",  "sluicerule",
                                        "sluicetarget", "sluicefailedat"};
    char k[32];
    size_t kl = 0;
    if (sl_json_unescape(key, k, sizeof k, &kl))
        return false; /* longer than any of them */
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i]) == kl && memcmp(names[i], k, kl) == 0)
            return true;
    return false;
}

/* The dead letter of it: its source event (or the payload when that is an
 * event) as it is, byte for byte, without the read-back members, plus the
 * sluice* error attributes. A payload that is not an event is wrapped in a
 * sluice.deadletter event: JSON as data, anything else as data_base64.
 * Appends the JSON to out. */
static int dead_letter_json(rule_run *rr, const consumer *c, const item *it, sl_buf *out)
{
    const char *src = it->source ? it->source : it->payload;
    size_t len = it->source ? it->source_len : it->len;
    sl_json_tok doc = {0}, key, val;
    bool json = src && sl_json_validate(src, len, 512, &doc, NULL) == 0;
    bool event = false;
    sl_json_iter iter;
    if (json && doc.type == SL_JSON_OBJECT) {
        sl_json_iter_init(&iter, &doc);
        while (!event && sl_json_iter_member(&iter, &key, &val))
            event = key.len == 13 && memcmp(key.p, "\"specversion\"", 13) == 0 &&
                    val.type == SL_JSON_STRING;
    }
    int rc = sl_buf_append(out, "{", 1);
    if (event) {
        bool first = true;
        sl_json_iter_init(&iter, &doc);
        while (!rc && sl_json_iter_member(&iter, &key, &val)) {
            if (replaced_member(&key))
                continue;
            rc = sl_buf_printf(out, "%s%.*s:%.*s", first ? "" : ",", (int)key.len, key.p,
                               (int)val.len, val.p);
            first = false;
        }
    } else {
        rc = sl_buf_printf(out,
                           "\"specversion\":\"1.0\",\"id\":\"%s-%d-%" PRId64 "-%" PRIu64
                           "\",\"source\":\"/sluice/rules/%s\",\"type\":\"sluice.deadletter\"",
                           rr->rc->name, c->part, it->offset, atomic_fetch_add(&rr->wrapped, 1),
                           rr->rc->name);
        if (!rc && json) {
            rc = sl_buf_printf(out, ",\"datacontenttype\":\"application/json\",\"data\":%.*s",
                               (int)len, src);
        } else if (!rc && src) {
            size_t at = out->len;
            rc = sl_buf_printf(out, ",\"data_base64\":\"");
            rc = rc ? rc : sl_buf_reserve(out, 4 * ((len + 2) / 3) + 2);
            if (!rc) {
                int n = EVP_EncodeBlock(out->data + out->len, (const unsigned char *)src, (int)len);
                out->len += (size_t)n;
                rc = sl_buf_append(out, "\"", 1);
            }
            if (rc)
                out->len = at;
        }
    }
    char why[REASON_MAX], targets[256], at[SL_TIME_RFC3339_MAX];
    clean_reason(it->reason, why, sizeof why);
    target_names(rr, it->dead, targets, sizeof targets);
    sl_time_format_rfc3339(sl_clock_now_ms(), at);
    rc = rc ? rc : sl_buf_printf(out, ",\"sluiceerror\":");
    rc = rc ? rc
            : sl_json_put_string(out, why[0] ? why : "unknown", strlen(why[0] ? why : "unknown"));
    rc = rc ? rc
            : sl_buf_printf(out,
                            ",\"sluiceattempts\":%u,\"sluicerule\":\"%s\",\"sluicetarget\":\"%s\","
                            "\"sluicefailedat\":\"%s\"}",
                            it->attempts, rr->rc->name, targets, at);
    return rc;
}

/* A payload gets one dead letter, once every target is done with it (some
 * gave up, the others may have taken it), naming the ones that gave up. */
static bool letter_due(const item *it)
{
    return it->dead && !it->todo;
}

/* Writes the dead letters of the pool's items with a dead mask to the rule's
 * dlq set (or counts them discarded when it has none). An item whose letter
 * could not be written keeps its mask and is tried again later. */
static void dead_letters(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    size_t n = 0;
    for (size_t i = 0; i < c->npool; i++)
        if (letter_due(&c->pool[i]))
            n++;
    if (!n)
        return;
    if (!rr->dlq.impl) {
        for (size_t i = 0; i < c->npool; i++) {
            item *it = &c->pool[i];
            if (!letter_due(it))
                continue;
            char targets[256], msg[SL_ERROR_MAX];
            target_names(rr, it->dead, targets, sizeof targets);
            snprintf(msg, sizeof msg, "dropped (the rule has no dlq) after %u attempt(s) at %s: %s",
                     it->attempts, targets, it->reason ? it->reason : "");
            rule_loss(rr, it->offset, c->part, msg);
            atomic_fetch_add(&c->ctr->discarded, 1);
            atomic_fetch_add(&c->ctr->failed, 1);
            it->dead = 0;
        }
        return;
    }
    /* Out of memory: the items stay and are tried again. */
    if (grow_round(w, n))
        return;
    if (n > w->dlq_cap) {
        size_t *e = realloc(w->dlq_ends, n * sizeof *e);
        if (!e)
            return;
        w->dlq_ends = e;
        w->dlq_cap = n;
    }
    w->dlq.len = 0;
    size_t k = 0;
    for (size_t i = 0; i < c->npool; i++) {
        item *it = &c->pool[i];
        if (!letter_due(it))
            continue;
        if (dead_letter_json(rr, c, it, &w->dlq))
            return;
        w->its[k] = it;
        w->dlq_ends[k++] = w->dlq.len;
    }
    for (size_t j = 0; j < k; j++) {
        size_t from = j ? w->dlq_ends[j - 1] : 0;
        w->sub[j] = (sl_delivery){.data = (const char *)w->dlq.data + from,
                                  .len = w->dlq_ends[j] - from,
                                  .lane = w->its[j]->lane};
    }
    w->reasons.len = 0;
    pthread_mutex_lock(&w->lock);
    w->pending = k;
    pthread_mutex_unlock(&w->lock);
    rr->dlq.ops->deliver(rr->dlq.impl, w->sub, k, on_done, w);
    wait_targets(w);
    for (size_t j = 0; j < k; j++) {
        item *it = w->its[j];
        if (w->st[j] == 0) {
            atomic_fetch_add(&c->ctr->dead_lettered, 1);
            atomic_fetch_add(&c->ctr->failed, 1);
            it->dead = 0;
        } else if (w->st[j] == SL_EINVAL) {
            /* The dlq set cannot take it (e.g. larger than its max_event). */
            char msg[SL_ERROR_MAX];
            snprintf(msg, sizeof msg, "dropped: the dlq set %s refused its dead letter: %s",
                     rr->rc->dlq, reason_at(w, w->rsub[j]));
            rule_loss(rr, it->offset, c->part, msg);
            atomic_fetch_add(&c->ctr->discarded, 1);
            atomic_fetch_add(&c->ctr->failed, 1);
            it->dead = 0;
        } else {
            char msg[SL_ERROR_MAX];
            snprintf(msg, sizeof msg, "writing to the dlq set %s: %s (trying again)", rr->rc->dlq,
                     reason_at(w, w->rsub[j]));
            rule_failure(rr, it->offset, c->part, msg);
            it->retry_at_ns = 0;
        }
    }
}

/* After a round: gives up on exhausted items, writes dead letters, drops
 * what is resolved and schedules the rest. */
static void settle(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    const sl_retry_config *rc = &rr->rc->retry;
    int64_t now_ms = mono_ms();
    for (size_t i = 0; i < c->npool; i++) {
        item *it = &c->pool[i];
        if (!it->todo)
            continue;
        bool too_old = rc->max_age_ms >= 0 && now_ms - it->first_fail_ms >= rc->max_age_ms;
        if (it->attempts >= rc->attempts || too_old) {
            char why[SL_ERROR_MAX];
            snprintf(why, sizeof why, "%s after %u attempt(s): %s",
                     too_old ? "too old to retry (max_age)" : "retries exhausted", it->attempts,
                     it->reason ? it->reason : "");
            free(it->reason);
            it->reason = strdup(why);
            it->dead |= it->todo;
            it->todo = 0;
        }
    }
    dead_letters(w, c);
    size_t keep = 0;
    uint32_t tries = 0;
    for (size_t i = 0; i < c->npool; i++) {
        item *it = &c->pool[i];
        if (!it->todo && !it->dead) {
            free_item(it);
            atomic_fetch_sub(&c->ctr->retrying, 1);
            continue;
        }
        if (it->tries > tries)
            tries = it->tries;
        c->pool[keep++] = *it;
    }
    c->npool = keep;
    /* Ordered: the pool is retried together, in order, at one time. */
    int64_t now = sl_clock_mono_ns(), at = 0;
    if (rr->rc->ordered && keep)
        at = now + backoff_ms(w, rc, tries) * 1000000;
    for (size_t i = 0; i < keep; i++) {
        item *it = &c->pool[i];
        if (at)
            it->retry_at_ns = at;
        else if (!it->retry_at_ns)
            it->retry_at_ns = now + backoff_ms(w, rc, it->tries) * 1000000;
    }
}

/* Delivers again the pool's items that are due. */
static void retry_due(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    int64_t now = sl_clock_mono_ns();
    size_t n = 0;
    if (grow_round(w, c->npool))
        return;
    for (size_t i = 0; i < c->npool; i++) {
        item *it = &c->pool[i];
        if (!it->todo || it->retry_at_ns > now)
            continue;
        w->its[n] = it;
        w->todo[n] = it->todo;
        w->dl[n++] = (sl_delivery){.data = it->payload, .len = it->len, .lane = it->lane};
        /* A payload only deferred so far (not sent behind a failed one) is
         * not being retried: it was never tried. */
        if (it->attempts)
            atomic_fetch_add(&c->ctr->retries, 1);
    }
    if (!n)
        return;
    round_deliver(w, rr, n);
    note_retries(w, c, n, false);
    for (size_t i = 0; i < n; i++) {
        item *it = w->its[i];
        it->todo = w->todo[i];
        it->dead |= w->dead[i];
        it->tries++;
        if (w->failed[i] || w->dead[i])
            it->attempts++;
        it->retry_at_ns = 0;
        if (w->reason[i] != SIZE_MAX) {
            free(it->reason);
            it->reason = strdup(reason_at(w, w->reason[i]));
        }
        if (!it->todo && !it->dead)
            atomic_fetch_add(&c->ctr->delivered, 1);
    }
}

/* Copies event e of the batch (its decorated JSON, offset and lane) into it:
 * what its dead letter is made of. */
static int copy_source(const worker *w, size_t e, item *it)
{
    it->offset = w->offs[e];
    it->source_len = w->evl[e];
    if (!(it->source = malloc(it->source_len)))
        return SL_ENOMEM;
    memcpy(it->source, (const char *)w->ev.data + (e ? w->ev_ends[e - 1] : 0), it->source_len);
    return 0;
}

/* Sets payload i of the fresh batch aside (copies what it needs). */
static int keep_payload(worker *w, consumer *c, size_t i, int64_t now_ms)
{
    item it = {.todo = w->todo[i],
               .dead = w->dead[i],
               .attempts = w->failed[i] || w->dead[i] ? 1 : 0,
               .tries = 1,
               .first_fail_ms = now_ms,
               .offset = w->offs[0], /* transform_batch: the batch's first event */
               .len = w->dl[i].len};
    memcpy(it.lane, w->dl[i].lane, SL_EVENT_LANE_MAX + 1);
    int rc = w->out_src[i] >= 0 ? copy_source(w, (size_t)w->out_src[i], &it) : 0;
    if (!rc && (it.payload = malloc(it.len ? it.len : 1)))
        memcpy(it.payload, w->dl[i].data, it.len);
    it.reason = strdup(reason_at(w, w->reason[i]));
    if (rc || !it.payload || !it.reason || add_item(c, &it)) {
        free_item(&it);
        return SL_ENOMEM;
    }
    return 0;
}

/* An event whose evaluation failed: straight to the dead letters. */
static int keep_failed_event(worker *w, consumer *c, size_t e, const char *why)
{
    item it = {.dead = 1ull << RULE_BIT, .attempts = 1, .tries = 1, .first_fail_ms = mono_ms()};
    memcpy(it.lane, w->lanes[e], SL_EVENT_LANE_MAX + 1);
    it.reason = strdup(why);
    if (copy_source(w, e, &it) || !it.reason || add_item(c, &it)) {
        free_item(&it);
        return SL_ENOMEM;
    }
    return 0;
}

/* ---- one turn of a consumer ----------------------------------------------- */

static void set_pos(consumer *c, int64_t pos)
{
    c->pos = pos;
    atomic_store(&c->read_pos, pos);
}

/* Opens the consumer's reader at c->pos, moving it when retention or a
 * crash moved the partition's bounds. Returns 0 (with *wait when the
 * position is accepted but not written yet), or an SL_E… code with why. */
static int open_reader(consumer *c, bool *wait, char *why, size_t whylen)
{
    rule_run *rr = c->rule;
    const sl_store *st = &rr->set->parts[c->part];
    sl_error err = {0};
    *wait = false;
    int rc = sl_store_reader_open(st, c->pos, rr->lane, &c->reader, &err);
    if (rc == SL_ERANGE) {
        int64_t start = sl_store_start_offset(st), end = sl_store_end_offset(st);
        int64_t bus_next = sl_databus_next_offset(rr->set, c->part);
        if (c->pos > end && c->pos <= bus_next) {
            *wait = true; /* accepted, not written yet: the append wakes us */
            return 0;
        }
        char msg[200];
        if (c->pos < start) {
            /* A replay only lost what its window held. */
            int64_t lost =
                (c->rp && atomic_load(&c->end) < start ? atomic_load(&c->end) : start) - c->pos;
            snprintf(msg, sizeof msg,
                     "retention deleted %" PRId64 " events before the rule "
                     "delivered them; going on at offset %" PRId64,
                     lost, start);
            atomic_fetch_add(&c->ctr->failed, (uint64_t)lost);
            set_pos(c, start);
        } else {
            /* The log lost its unsynced tail in a crash (ack = "buffer"):
             * the offsets past its end will be given to new events. */
            snprintf(msg, sizeof msg,
                     "the cursor is past the end of the partition (%" PRId64
                     "), which lost its unsynced tail in a crash; going on at the end",
                     end);
            set_pos(c, end);
        }
        rule_loss(rr, c->pos, c->part, msg);
        rc = sl_store_reader_open(st, c->pos, rr->lane, &c->reader, &err);
    }
    if (rc) {
        snprintf(why, whylen, "read: %s", err.msg[0] ? err.msg : sl_strerror(rc));
        c->reader = NULL;
    }
    return rc;
}

/* A replay marks the events it re-delivers: `"sluicereplay":"ID"` goes in
 * before the decorated event's closing brace. */
static int mark_replay(sl_buf *ev, const replay *rp)
{
    ev->len--; /* the '}' */
    return sl_buf_printf(ev, ",\"sluicereplay\":\"%s\"}", rp->id);
}

/* Undoes a turn that failed half way: the items it added to the pool go (the
 * batch is read again from c->pos), and so does the reader. Returns rc. */
static int drop_turn(consumer *c, size_t pool_at, int rc)
{
    while (c->npool > pool_at) {
        free_item(&c->pool[--c->npool]);
        atomic_fetch_sub(&c->ctr->retrying, 1);
    }
    if (c->reader)
        sl_store_reader_close(&c->rule->set->parts[c->part], c->reader);
    c->reader = NULL;
    return rc;
}

/* Reads, evaluates and delivers up to one batch from c->pos; what is not
 * delivered goes to the pool. Sets *more when it stopped before the end. */
static int fresh_batch(worker *w, consumer *c, bool *more, char *why, size_t whylen)
{
    rule_run *rr = c->rule;
    const sl_store *st = &rr->set->parts[c->part];
    sl_error err = {0};
    size_t pool_at = c->npool; /* a failed turn takes back what it set aside */
    *more = false;
    if (c->rp && c->pos >= c->end)
        return 0; /* run_consumer() marks it done once its pool is empty */
    if (!c->reader) {
        bool wait;
        int rc = open_reader(c, &wait, why, whylen);
        if (rc || wait)
            return rc;
    }
    w->ev.len = 0;
    sl_rule_out_reset(&w->out);
    size_t nev = 0;
    int rc = 0;
    sl_record rec;
    int64_t last_taken = -1;
    bool batch_fn = rr->rc->transform_batch, at_end = false;
    size_t max_records = rr->batch_records, max_bytes = max_records * BATCH_EVENT_BYTES;
    while (nev < max_records && w->ev.len < max_bytes) {
        rc = sl_store_reader_next(st, c->reader, &rec, &err);
        if (rc == SL_EEOF) {
            rc = 0;
            break;
        }
        if (rc)
            break;
        if (c->rp && (rec.offset >= c->end || rec.timestamp >= c->rp->to_ms)) {
            at_end = true; /* the replay's window ends here */
            break;
        }
        if ((rc = grow_events(w, nev + 1)))
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
        last_taken = rec.offset;
        if (!rec.value ||
            sl_event_decorate((const char *)rec.value, rec.value_len, rr->set->name, c->part,
                              rec.offset, &w->ev) ||
            (c->rp && mark_replay(&w->ev, c->rp))) {
            w->ev.len = at;
            atomic_fetch_add(&c->ctr->failed, 1);
            rule_failure(rr, rec.offset, c->part, "stored event is not a JSON object");
            continue;
        }
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
    /* A replay that finds nothing before its end (retention took it) is
     * over rather than polling an empty partition. */
    if (c->rp && !nev && last_taken < 0 && !*more)
        at_end = true;
    /* After a lane split or the end of a replay window the reader went one
     * record too far. */
    int64_t next;
    if (at_end) {
        next = last_taken >= 0 ? last_taken + 1 : c->pos;
        c->end = next; /* nothing after it belongs to the window */
    } else {
        next = c->reader ? sl_store_reader_position(st, c->reader)
                         : (last_taken >= 0 ? last_taken + 1 : c->pos);
    }
    if (!at_end && (nev == max_records || w->ev.len >= max_bytes))
        *more = true;
    atomic_fetch_add(&c->ctr->read, nev);
    if (rr->unrouted) /* read only to be counted: the lane has no route here */
        atomic_fetch_add(&rr->unrouted_n, nev);
    sl_input_ctx ictx = {.rule = rr->rc->name, .now_ms = sl_clock_now_ms()};
    if (rr->rc->enabled && !rr->unrouted && batch_fn && nev) {
        for (size_t i = 0; i < nev; i++)
            w->evp[i] = (const char *)w->ev.data + (i ? w->ev_ends[i - 1] : 0);
        size_t passed = 0;
        sl_error e = {0};
        int r =
            sl_rule_eval_batch(w->vm, rr->idx, w->evp, w->evl, nev, &ictx, &w->out, &passed, &e);
        if (r) {
            rule_failure(rr, c->pos, c->part, e.msg);
            for (size_t i = 0; !rc && i < nev; i++)
                rc = keep_failed_event(w, c, i, e.msg);
        } else {
            atomic_fetch_add(&c->ctr->matched, passed);
            atomic_fetch_add(&c->ctr->filtered, nev - passed);
            rc = tag_outputs(w, 0, w->lanes[0], -1);
        }
    } else if (rr->rc->enabled && !rr->unrouted) {
        for (size_t i = 0; !rc && i < nev; i++) {
            const char *evj = (const char *)w->ev.data + (i ? w->ev_ends[i - 1] : 0);
            size_t from = w->out.n;
            sl_rule_outcome oc;
            sl_error e = {0};
            int r = sl_rule_eval(w->vm, rr->idx, evj, w->evl[i], &ictx, &w->out, &oc, &e);
            if (r) {
                rule_failure(rr, w->offs[i], c->part, e.msg);
                rc = keep_failed_event(w, c, i, e.msg);
                continue;
            }
            _Atomic uint64_t *ctr = oc == SL_RULE_MATCHED    ? &c->ctr->matched
                                    : oc == SL_RULE_FILTERED ? &c->ctr->filtered
                                    : oc == SL_RULE_DROPPED  ? &c->ctr->dropped
                                                             : NULL;
            if (ctr)
                atomic_fetch_add(ctr, 1);
            rc = tag_outputs(w, from, w->lanes[i], (int32_t)i);
        }
    }
    size_t n = w->out.n;
    if (!rc && n)
        rc = grow_round(w, n);
    if (rc) {
        snprintf(why, whylen, "evaluating: %s", sl_strerror(rc));
        return drop_turn(c, pool_at, rc);
    }
    uint64_t all = rr->ntargets >= 64 ? ~0ull : (1ull << rr->ntargets) - 1;
    for (size_t i = 0; i < n; i++) {
        w->dl[i].data = sl_rule_out_get(&w->out, i, &w->dl[i].len);
        w->dl[i].lane = w->out_lanes[i];
        w->todo[i] = all;
    }
    if (n) {
        round_deliver(w, rr, n);
        note_retries(w, c, n, true);
    }
    int64_t now_ms = mono_ms();
    for (size_t i = 0; i < n; i++) {
        if (!w->todo[i] && !w->dead[i])
            atomic_fetch_add(&c->ctr->delivered, 1);
        else if ((rc = keep_payload(w, c, i, now_ms)))
            break;
    }
    if (rc) {
        /* Out of memory with payloads unresolved: read the batch again. */
        snprintf(why, whylen, "keeping failed payloads: %s", sl_strerror(rc));
        return drop_turn(c, pool_at, rc);
    }
    set_pos(c, next);
    return 0;
}

/* Where the cursor may go: before the oldest unresolved event. */
static int64_t safe_position(const consumer *c)
{
    int64_t at = c->pos;
    for (size_t i = 0; i < c->npool; i++)
        if (c->pool[i].offset < at)
            at = c->pool[i].offset;
    return at;
}

/* Whether the pool keeps the consumer from reading on: ordered, anything
 * waiting holds the partition; unordered, only a full pool does. */
static bool pool_blocks(const consumer *c)
{
    return c->npool && (c->rule->rc->ordered || c->npool >= POOL_MAX);
}

/* Runs one turn and commits; decides whether the consumer goes on. */
static bool run_consumer(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    char why[SL_ERROR_MAX + 64] = "";
    bool more = false;
    int rc = 0;
    if (c->npool) {
        retry_due(w, c);
        settle(w, c);
    }
    if (!pool_blocks(c)) {
        rc = fresh_batch(w, c, &more, why, sizeof why);
        if (c->npool)
            settle(w, c);
    }
    int64_t safe = safe_position(c);
    if (c->rp) {
        atomic_store(&c->committed, safe);
        if (!c->npool && c->pos >= c->end && !atomic_load(&c->done)) {
            atomic_store(&c->done, true);
            if (atomic_fetch_sub(&c->rp->remaining, 1) == 1)
                atomic_store(&c->rp->finished_ms, sl_clock_now_ms());
        }
        if (c->pos < c->end && !rc && !c->npool)
            more = true;
    } else if (safe != c->cur.offset || atomic_load(&c->committed) != safe) {
        sl_error err = {0};
        int crc = sl_cursor_commit(&c->cur, safe, CURSOR_SYNC_NS, &err);
        if (crc) {
            snprintf(why, sizeof why, "cursor: %s", err.msg);
            rc = crc;
        } else {
            atomic_store(&c->committed, safe);
        }
    }
    int64_t next_retry = 0;
    for (size_t i = 0; i < c->npool; i++)
        if (c->pool[i].retry_at_ns && (!next_retry || c->pool[i].retry_at_ns < next_retry))
            next_retry = c->pool[i].retry_at_ns;
    bool blocked = pool_blocks(c);
    pthread_mutex_lock(&w->r->lock);
    if (rc) {
        /* Hold the partition and read again from where it stands later. */
        if (c->reader)
            sl_store_reader_close(&rr->set->parts[c->part], c->reader);
        c->reader = NULL;
        c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (c->backoff_ms > BACKOFF_MAX_MS)
            c->backoff_ms = BACKOFF_MAX_MS;
        int64_t at = sl_clock_mono_ns() + (int64_t)c->backoff_ms * 1000000;
        c->retry_at_ns = next_retry && next_retry < at ? next_retry : at;
        c->hold = true;
        more = false;
    } else {
        c->backoff_ms = 0;
        c->retry_at_ns = next_retry;
        c->hold = blocked;
        if (blocked)
            more = false;
    }
    pthread_mutex_unlock(&w->r->lock);
    if (rc) {
        char msg[SL_ERROR_MAX + 128];
        snprintf(msg, sizeof msg, "%s (trying again in %d ms)", why, c->backoff_ms);
        rule_failure(rr, c->pos, c->part, msg);
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
            struct timespec ts = deadline_in(SCAN_NS);
            pthread_cond_timedwait(&r->cond, &r->lock, &ts);
            int64_t now = sl_clock_mono_ns();
            if (now - r->retry_scan_ns >= SCAN_NS) {
                r->retry_scan_ns = now;
                periodic(r, now);
            }
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
        bool more = run_consumer(w, c);
        pthread_mutex_lock(&r->lock);
        c->running = false;
        if ((more || c->again) && !c->hold)
            push(r, c);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---- start / stop ---------------------------------------------------------- */

static void free_consumer(consumer *c)
{
    if (c->reader)
        sl_store_reader_close(&c->rule->set->parts[c->part], c->reader);
    c->reader = NULL;
    for (size_t i = 0; i < c->npool; i++)
        free_item(&c->pool[i]);
    free(c->pool);
    c->pool = NULL;
    c->npool = 0;
    if (!c->rp)
        sl_cursor_close(&c->cur);
}

static void free_replay(replay *rp)
{
    for (int32_t p = 0; rp->cons && p < rp->nparts; p++)
        free_consumer(&rp->cons[p]);
    free(rp->cons);
    free(rp);
}

static void close_target(target_inst *ti)
{
    if (ti->impl)
        ti->ops->close(ti->impl);
    ti->impl = NULL;
}

/* Closes a run's cursors and (unless borrowed) targets, frees it. */
static void free_run(rule_run *rr)
{
    for (int32_t p = 0; rr->cons && p < rr->nparts; p++)
        free_consumer(&rr->cons[p]);
    free(rr->cons);
    if (!rr->borrowed) {
        for (size_t t = 0; t < rr->ntargets; t++)
            close_target(&rr->targets[t]);
        free(rr->targets);
        close_target(&rr->dlq);
    } else if (rr->targets != rr->base_run->targets) {
        for (size_t t = 0; t < rr->ntargets; t++)
            close_target(&rr->targets[t]);
        free(rr->targets);
    }
    pthread_mutex_destroy(&rr->err_lock);
    free(rr);
}

static void free_runner(sl_runner *r)
{
    for (unsigned i = 0; i < r->nworkers; i++) {
        worker *w = &r->workers[i];
        sl_rule_vm_free(w->vm);
        sl_buf_free(&w->ev);
        sl_rule_out_free(&w->out);
        void *arrays[] = {w->ev_ends, w->evp, w->evl,  w->offs,   w->lanes, w->out_lanes,
                          w->out_src, w->dl,  w->sub,  w->todo,   w->dead,  w->failed,
                          w->map,     w->st,  w->rsub, w->reason, w->its,   w->dlq_ends};
        for (size_t k = 0; k < sizeof arrays / sizeof *arrays; k++)
            free(arrays[k]);
        sl_buf_free(&w->reasons);
        sl_buf_free(&w->dlq);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
    }
    free(r->workers);
    while (r->replays) {
        replay *rp = r->replays;
        r->replays = rp->next;
        free_replay(rp);
    }
    /* Lane runs first: they may borrow their base run's targets. */
    for (size_t i = atomic_load(&r->nruns); i-- > 0;)
        free_run(RUN(r, i));
    for (size_t c = 0; c < RUN_CHUNKS && r->chunks[c]; c++)
        free(r->chunks[c]);
    free(r->lane_names);
    pthread_mutex_destroy(&r->lanes_lock);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cond);
    free(r);
}

/* Targets of one kind are numbered in labels (http#1, http#2); plugin
 * kinds (no built-in config) all count as one kind, as when kinds were an
 * enum with one value for every plugin. */
static bool same_kind(const sl_target_config *a, const sl_target_config *b)
{
    return a->ops == b->ops || (!a->conf && !b->conf);
}

static int open_targets(sl_runner *r, rule_run *rr, sl_error *err)
{
    const sl_rule_config *rc = rr->rc;
    sl_target_env env = {.sets = r->opts.sets, .bus = r->opts.bus, .rule = rc->name};
    rule_run *base = rr->base_run;
    if (base) {
        /* A lane run delivers to the base run's dead-letter set (dead
         * letters keep their lane) and, unless its override names its own,
         * to the base run's target instances. */
        rr->borrowed = true;
        rr->dlq = base->dlq;
        if (rr->unrouted || rr->rc == base->rc || rc->targets_from_base) {
            free(rr->targets);
            rr->targets = base->targets;
            rr->ntargets = base->ntargets;
            rr->batch_records = base->batch_records;
            return 0;
        }
    }
    if (rc->ntargets > RULE_BIT)
        return sl_error_set(err, SL_EINVAL, "rule %s: at most %d targets", rc->name, RULE_BIT);
    rr->ntargets = rc->ntargets;
    rr->batch_records = BATCH_RECORDS;
    for (size_t t = 0; t < rc->ntargets; t++) {
        target_inst *ti = &rr->targets[t];
        ti->ops = rc->targets[t].ops;
        /* A target that waits per call (a Kafka delivery report) moves more
         * per turn; the others keep turns short (a cursor commit each). */
        if (ti->ops->batch_hint > rr->batch_records)
            rr->batch_records =
                ti->ops->batch_hint < BATCH_RECORDS_MAX ? ti->ops->batch_hint : BATCH_RECORDS_MAX;
        size_t same = 0, nth = 0;
        for (size_t u = 0; u < rc->ntargets; u++)
            if (same_kind(&rc->targets[u], &rc->targets[t]) && (same++, u <= t))
                nth++;
        if (same > 1)
            snprintf(ti->label, sizeof ti->label, "%s#%zu", ti->ops->name, nth);
        else
            snprintf(ti->label, sizeof ti->label, "%s", ti->ops->name);
        int rc2 = ti->ops->open(&rc->targets[t], &env, &ti->impl, err);
        if (rc2)
            return rc2;
    }
    if (rc->dlq && !base) {
        /* Dead letters are appended like target.set does, lane and key kept. */
        rr->dlq.ops = rc->dlq_target.ops; /* target.set { set = rc->dlq }, made by the loader */
        snprintf(rr->dlq.label, sizeof rr->dlq.label, "dlq");
        int rc2 = rr->dlq.ops->open(&rc->dlq_target, &env, &rr->dlq.impl, err);
        if (rc2)
            return rc2;
    }
    return 0;
}

static int open_rule(sl_runner *r, rule_run *rr, sl_error *err)
{
    const sl_rule_config *rc = rr->rc;
    /* The rule's set is declared (the config check requires a `set` block
     * and the router defines it before rules start): looked up, never
     * created on first use, so it never counts against max_auto_sets. */
    int rc2 = sl_sets_get(r->opts.sets, rc->set, false, &rr->set, err);
    if (rc2)
        return rc2;
    rr->nparts = rr->set->nparts;
    if (!(rr->cons = calloc((size_t)rr->nparts, sizeof *rr->cons)))
        return sl_error_set(err, SL_ENOMEM, "rule %s: out of memory", rc->name);
    for (int32_t p = 0; p < rr->nparts; p++) { /* none is open until its turn below */
        rr->cons[p].rule = rr;
        rr->cons[p].cur.fd = -1;
    }
    if (!(rr->targets = calloc(rc->ntargets ? rc->ntargets : 1, sizeof *rr->targets)))
        return sl_error_set(err, SL_ENOMEM, "rule %s: out of memory", rc->name);
    for (int32_t p = 0; p < rr->nparts; p++) {
        consumer *c = &rr->cons[p];
        c->rule = rr;
        c->ctr = &rr->ctr;
        c->part = p;
        bool found;
        sl_error cerr = {0};
        bool damaged = false;
        rc2 = sl_cursor_open(&c->cur, r->opts.data_dir, rc->name, rr->cursor_set, p, &found, &cerr);
        if (rc2 == SL_ECORRUPT) {
            /* Its position is lost: deliver again from the oldest event kept
             * rather than skip what it had not delivered (at least once). */
            sl_slog(SL_SLOG_WARN, "rules",
                    "rule %s: %s; starting again at the oldest event of "
                    "partition %d",
                    rc->name, cerr.msg, p);
            damaged = true;
        } else if (rc2) {
            return sl_error_set(err, rc2, "%s", cerr.msg);
        }
        if (!found) { /* a new rule: where it starts is decided once, and kept */
            /* A new lane of a rule that ran before starts at the end: no
             * event of the lane was admitted before its runs existed
             * (core/bus/lanes.h); a lane of a new rule starts where the rule does. */
            bool from_start =
                rr->base_run ? rr->base_run->was_new && rc->from_beginning : rc->from_beginning;
            rr->was_new = true;
            /* "The end" is the store's end, not the bus's next offset: a
             * durable partition on a full disk drops its unwritten events and
             * hands their offsets out again (core/bus/databus.h), so a start
             * past the store's end could skip new events or look like a
             * lost tail. Events queued but not yet written when the run
             * appears are delivered too (at-least-once, never a gap). */
            int64_t start = from_start || damaged ? sl_store_start_offset(&rr->set->parts[p])
                                                  : sl_store_end_offset(&rr->set->parts[p]);
            if ((rc2 = sl_cursor_commit(&c->cur, start, 0, err)))
                return rc2;
        }
        set_pos(c, c->cur.offset);
        atomic_store(&c->committed, c->cur.offset);
    }
    return open_targets(r, rr, err);
}

static void cancel_target(const target_inst *ti);

/* Deletes DATA/rules/RULE/SET/lanes/LANE of every rule and set, so that a lane
 * dropped and named again later starts afresh. */
static void forget_lane_cursors(const char *data_dir, const char *lane)
{
    char pat[4096];
    snprintf(pat, sizeof pat, "%s/rules/*/*/lanes/%s/*.cursor", data_dir, lane);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
        globfree(&g);
    }
    snprintf(pat, sizeof pat, "%s/rules/*/*/lanes/%s", data_dir, lane);
    if (glob(pat, GLOB_ONLYDIR, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            rmdir(g.gl_pathv[i]);
        globfree(&g);
    }
}

/* The index of lane in r->lane_names (added if new), -1 when full. Index 0
 * is the base lane. */
static int lane_index(sl_runner *r, const char *lane)
{
    for (size_t i = 0; i < r->nlane_names; i++)
        if (strcmp(r->lane_names[i], lane) == 0)
            return (int)i;
    if (r->nlane_names == LANE_NAMES)
        return -1;
    snprintf(r->lane_names[r->nlane_names], sizeof *r->lane_names, "%s", lane);
    return (int)r->nlane_names++;
}

/* Makes and opens the run of cfg rule `rule` for lane (NULL: the base
 * run), and publishes it (RUN()). Returns 0 or an SL_E… code with err
 * (the run is freed). */
static int add_run(sl_runner *r, size_t rule, const sl_lane_info *lane, sl_error *err)
{
    const sl_config *cfg = r->opts.cfg;
    size_t n = atomic_load(&r->nruns);
    if (n == (size_t)RUN_CHUNK * RUN_CHUNKS)
        return sl_error_set(err, SL_ENOMEM,
                            "rule runner: no room for another lane (reload to "
                            "reclaim the runs of dropped lanes)");
    if (!r->chunks[n / RUN_CHUNK] &&
        !(r->chunks[n / RUN_CHUNK] = calloc(RUN_CHUNK, sizeof **r->chunks)))
        return sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    rule_run *rr = calloc(1, sizeof *rr);
    if (!rr)
        return sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    pthread_mutex_init(&rr->err_lock, NULL);
    rr->idx = rule;
    rr->rc = &cfg->rules[rule];
    snprintf(rr->label, sizeof rr->label, "%s", rr->rc->name);
    snprintf(rr->cursor_set, sizeof rr->cursor_set, "%s", rr->rc->set);
    if (lane) {
        rr->base_run = RUN(r, rule);
        size_t at;
        const sl_rule_config *ov = sl_config_override(cfg, rule, lane->name, &at);
        if (ov) {
            rr->rc = ov;
            rr->idx = at;
        } else {
            rr->unrouted = !lane->fallback_base;
        }
        snprintf(rr->lane, sizeof rr->lane, "%s", lane->name);
        snprintf(rr->label, sizeof rr->label, "%s (lane %s)", rr->rc->name, lane->name);
        rr->lane_idx = lane_index(r, lane->name);
        /* Beside the base cursors: DATA/rules/RULE/SET/lanes/LANE/P.cursor */
        snprintf(rr->cursor_set, sizeof rr->cursor_set, "%s/lanes/%s", rr->rc->set, lane->name);
    }
    int rc = open_rule(r, rr, err);
    if (rc) {
        free_run(rr);
        return rc;
    }
    RUN(r, n) = rr;
    atomic_fetch_add(&r->nruns, 1); /* after the run is complete: readers go without the lock */
    return 0;
}

/* The run of base rule `rule` for lane, or NULL (lanes_lock held). */
static rule_run *find_run(sl_runner *r, size_t rule, const char *lane)
{
    for (size_t i = r->nbase, n = atomic_load(&r->nruns); i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (rr->base_run == RUN(r, rule) && !atomic_load(&rr->dropped) &&
            strcmp(rr->lane, lane) == 0)
            return rr;
    }
    return NULL;
}

/* Makes the runs of every rule for lane that do not exist yet; they are
 * queued at once when queue is true (lanes_lock held). */
static int add_lane_runs(sl_runner *r, const sl_lane_info *lane, bool queue, sl_error *err)
{
    for (size_t i = 0; i < r->nbase; i++) {
        if (find_run(r, i, lane->name))
            continue;
        int rc = add_run(r, i, lane, err);
        if (rc)
            return rc;
        if (queue) {
            rule_run *rr = RUN(r, atomic_load(&r->nruns) - 1);
            pthread_mutex_lock(&r->lock);
            for (int32_t p = 0; p < rr->nparts; p++)
                push(r, &rr->cons[p]);
            pthread_mutex_unlock(&r->lock);
        }
    }
    return 0;
}

typedef struct lanes_start {
    sl_runner *r;
    sl_error *err;
    int rc;
} lanes_start;

/* How this runner's config routes lane: its declaration's fallback, else
 * an auto lane's (base). False when the config does not know the lane and
 * it is no auto lane: no runs then. */
static bool lane_of_config(const sl_runner *r, const sl_lane_info *lane, sl_lane_info *out)
{
    const sl_lane_decl *d = sl_config_lane(r->opts.cfg, lane->name);
    if (!d && !lane->auto_)
        return false;
    *out = *lane;
    out->env = d ? d->env : SL_LANE_BOE;
    out->fallback_base = d ? d->fallback_base : true;
    return true;
}

/* The registry's auto lanes (the declared ones come from the config). */
static void start_lane(void *ctx, const sl_lane_info *lane)
{
    lanes_start *ls = ctx;
    sl_lane_info li;
    if (!ls->rc && lane->auto_ && !sl_config_lane(ls->r->opts.cfg, lane->name) &&
        lane_of_config(ls->r, lane, &li))
        ls->rc = add_lane_runs(ls->r, &li, false, ls->err);
}

int sl_runner_add_lane(sl_runner *r, const sl_lane_info *lane, sl_error *err)
{
    sl_lane_info li;
    if (!lane_of_config(r, lane, &li))
        return 0;
    pthread_mutex_lock(&r->lanes_lock);
    int rc = add_lane_runs(r, &li, true, err);
    pthread_mutex_unlock(&r->lanes_lock);
    return rc;
}

void sl_runner_drop_lane(sl_runner *r, const char *lane)
{
    pthread_mutex_lock(&r->lanes_lock);
    for (size_t i = r->nbase, n = atomic_load(&r->nruns); i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (strcmp(rr->lane, lane) || atomic_load(&rr->dropped))
            continue;
        /* No new turn starts (push() refuses it), queued ones leave the
         * queue; a turn in progress finishes on its own (its own targets are
         * told to hurry) and is not waited for: a hung endpoint must not
         * hold the drop. The run stays, idle, until the runner stops. */
        pthread_mutex_lock(&r->lock);
        atomic_store(&rr->dropped, true);
        for (int32_t p = 0; p < rr->nparts; p++) {
            consumer *c = &rr->cons[p];
            if (c->queued) {
                consumer **pp = &r->head, *prev = NULL;
                while (*pp && *pp != c)
                    prev = *pp, pp = &(*pp)->next;
                if (*pp) {
                    *pp = c->next;
                    if (r->tail == c)
                        r->tail = prev;
                }
                c->queued = false;
            }
        }
        pthread_mutex_unlock(&r->lock);
        if (rr->targets != (rr->base_run ? rr->base_run->targets : NULL))
            for (size_t t = 0; t < rr->ntargets; t++)
                cancel_target(&rr->targets[t]);
    }
    pthread_mutex_unlock(&r->lanes_lock);
    forget_lane_cursors(r->opts.data_dir, lane);
}

int sl_runner_start(const sl_runner_options *opts, sl_runner **out, sl_error *err)
{
    sl_runner *r = calloc(1, sizeof *r);
    if (!r)
        return sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    r->opts = *opts;
    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadline_in() */
    pthread_cond_init(&r->cond, &ca);
    pthread_condattr_destroy(&ca);
    const sl_config *cfg = opts->cfg;
    unsigned nw = opts->workers ? opts->workers : cfg->workers;
    if (!nw) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nw = n > 0 ? (unsigned)n : 1;
    }
    int rc = 0;
    pthread_mutex_init(&r->lanes_lock, NULL);
    r->lane_names = calloc(LANE_NAMES, sizeof *r->lane_names);
    r->nlane_names = r->lane_names ? 1 : 0; /* [0] "": the base lane */
    r->max_workers = nw * 4 > 8 ? nw * 4 : 8;
    if (r->max_workers < nw)
        r->max_workers = nw;
    r->workers = calloc(r->max_workers, sizeof *r->workers);
    if (!r->lane_names || !r->workers)
        rc = sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    for (size_t i = 0; !rc && i < cfg->nrules; i++)
        if (!(rc = add_run(r, i, NULL, err)))
            r->nbase++;
    /* The lanes the config declares (but those dropped), then the auto
     * lanes the registry remembers. */
    for (size_t i = 0; !rc && i < cfg->nlanes; i++) {
        const sl_lane_decl *d = &cfg->lanes[i];
        if (opts->lanes && sl_lanes_dropped(opts->lanes, d->name))
            continue;
        sl_lane_info li = {.env = d->env, .fallback_base = d->fallback_base};
        snprintf(li.name, sizeof li.name, "%s", d->name);
        rc = add_lane_runs(r, &li, false, err);
    }
    if (!rc && opts->lanes) {
        lanes_start ls = {r, err, 0};
        sl_lanes_each(opts->lanes, start_lane, &ls);
        rc = ls.rc;
    }
    for (unsigned i = 0; !rc && i < nw; i++)
        rc = init_worker(r, &r->workers[r->nworkers++], err);
    /* Under the lock: a running worker may grow the pool (maybe_grow). */
    pthread_mutex_lock(&r->lock);
    for (unsigned i = 0; !rc && i < r->nworkers; i++) {
        if (pthread_create(&r->workers[i].thread, NULL, worker_main, &r->workers[i]))
            rc = sl_error_set(err, SL_ENOMEM, "rule runner: cannot start a worker thread");
        else
            r->started++;
    }
    pthread_mutex_unlock(&r->lock);
    if (rc) {
        sl_runner_stop(r);
        return rc;
    }
    /* Catch up from every cursor at once. */
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++)
        for (int32_t p = 0; p < RUN(r, i)->nparts; p++)
            push(r, &RUN(r, i)->cons[p]);
    pthread_mutex_unlock(&r->lock);
    *out = r;
    return 0;
}

static void cancel_target(const target_inst *ti)
{
    if (ti->impl && ti->ops->cancel)
        ti->ops->cancel(ti->impl);
}

void sl_runner_stop(sl_runner *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->cond);
    while (r->growing) /* a worker being added: join it too */
        pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
    /* A worker may be waiting for a target; let targets hurry so that a hung
     * endpoint cannot hold the stop (what they fail is delivered again). */
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (rr->base_run && rr->targets == rr->base_run->targets)
            continue; /* borrowed: cancelled with its owner */
        for (size_t t = 0; t < rr->ntargets; t++)
            cancel_target(&rr->targets[t]);
        if (!rr->base_run)
            cancel_target(&rr->dlq);
    }
    for (unsigned i = 0; i < r->started; i++)
        pthread_join(r->workers[i].thread, NULL);
    free_runner(r);
}

/* ---- replays ---------------------------------------------------------------- */

/* A string for a JSON document: escaped, or made printable ASCII when it is
 * not UTF-8 (reasons may quote an endpoint's bytes). */
static int put_text(sl_buf *out, const char *s)
{
    if (sl_json_put_string(out, s, strlen(s)) == 0)
        return 0;
    char clean[SL_ERROR_MAX];
    clean_reason(s, clean, sizeof clean);
    return sl_json_put_string(out, clean, strlen(clean));
}

static int counters_json(sl_buf *out, const counters *k)
{
    return sl_buf_printf(
        out,
        "\"read\":%" PRIu64 ",\"matched\":%" PRIu64 ",\"filtered\":%" PRIu64 ",\"dropped\":%" PRIu64
        ",\"failed\":%" PRIu64 ",\"delivered\":%" PRIu64 ",\"retries\":%" PRIu64
        ",\"dead_lettered\":%" PRIu64 ",\"discarded\":%" PRIu64 ",\"retrying\":%" PRId64,
        atomic_load(&k->read), atomic_load(&k->matched), atomic_load(&k->filtered),
        atomic_load(&k->dropped), atomic_load(&k->failed), atomic_load(&k->delivered),
        atomic_load(&k->retries), atomic_load(&k->dead_lettered), atomic_load(&k->discarded),
        atomic_load(&k->retrying));
}

/* The counters of base run rr and of every run of its lanes, added up. */
static void sum_counters(sl_runner *r, const rule_run *rr, counters *sum)
{
    uint64_t v[9] = {0};
    int64_t retrying = 0;
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++) {
        const rule_run *x = RUN(r, i);
        if (x != rr && x->base_run != rr)
            continue;
        const counters *k = &x->ctr;
        const _Atomic uint64_t *f[] = {&k->read,    &k->matched,       &k->filtered,
                                       &k->dropped, &k->failed,        &k->delivered,
                                       &k->retries, &k->dead_lettered, &k->discarded};
        for (size_t j = 0; j < 9; j++)
            v[j] += atomic_load(f[j]);
        if (!atomic_load(&x->dropped)) /* a dropped lane's pool waits for nothing */
            retrying += atomic_load(&k->retrying);
    }
    _Atomic uint64_t *t[] = {&sum->read,    &sum->matched,       &sum->filtered,
                             &sum->dropped, &sum->failed,        &sum->delivered,
                             &sum->retries, &sum->dead_lettered, &sum->discarded};
    for (size_t j = 0; j < 9; j++)
        atomic_init(t[j], v[j]);
    atomic_init(&sum->retrying, retrying);
}

static int replay_json(sl_buf *out, replay *rp)
{
    char from[SL_TIME_RFC3339_MAX], to[SL_TIME_RFC3339_MAX], started[SL_TIME_RFC3339_MAX];
    sl_time_format_rfc3339(rp->from_ms, from);
    sl_time_format_rfc3339(rp->to_ms, to);
    sl_time_format_rfc3339(rp->started_ms, started);
    int64_t fin = atomic_load(&rp->finished_ms);
    int rc = sl_buf_printf(out,
                           "{\"id\":\"%s\",\"rule\":\"%s\",\"from\":\"%s\",\"to\":\"%s\","
                           "\"state\":\"%s\",\"started\":\"%s\",",
                           rp->id, rp->rule->rc->name, from, to, fin ? "done" : "running", started);
    if (!rc && fin) {
        char f[SL_TIME_RFC3339_MAX];
        sl_time_format_rfc3339(fin, f);
        rc = sl_buf_printf(out, "\"finished\":\"%s\",", f);
    }
    rc = rc ? rc : counters_json(out, &rp->ctr);
    rc = rc ? rc : sl_buf_printf(out, ",\"partitions\":[");
    for (int32_t p = 0; !rc && p < rp->nparts; p++) {
        const consumer *c = &rp->cons[p];
        rc = sl_buf_printf(out,
                           "%s{\"partition\":%d,\"start\":%" PRId64 ",\"end\":%" PRId64
                           ",\"position\":%" PRId64 ",\"done\":%s}",
                           p ? "," : "", p, c->start, atomic_load(&c->end),
                           atomic_load(&c->committed), atomic_load(&c->done) ? "true" : "false");
    }
    return rc ? rc : sl_buf_printf(out, "]}");
}

/* Drops the oldest finished replays past REPLAYS_KEPT (runner lock held). */
static void trim_replays(sl_runner *r)
{
    unsigned kept = 0;
    for (replay **pp = &r->replays; *pp;) {
        replay *rp = *pp;
        bool idle = atomic_load(&rp->finished_ms) != 0;
        for (int32_t p = 0; idle && p < rp->nparts; p++)
            idle = !rp->cons[p].queued && !rp->cons[p].running;
        if (idle && ++kept > REPLAYS_KEPT) {
            *pp = rp->next;
            free_replay(rp);
        } else {
            pp = &rp->next;
        }
    }
}

int sl_runner_replay(sl_runner *r, const char *rule, int64_t from_ms, int64_t to_ms, sl_buf *out,
                     sl_error *err)
{
    rule_run *rr = NULL;
    for (size_t i = 0; i < r->nbase; i++) /* replays are of the base lane */
        if (strcmp(RUN(r, i)->rc->name, rule) == 0)
            rr = RUN(r, i);
    if (!rr)
        return sl_error_set(err, SL_ENOENT, "no rule named %s", rule);
    int64_t now = sl_clock_now_ms();
    if (to_ms <= 0 || to_ms > now)
        to_ms = now;
    if (from_ms >= to_ms)
        return sl_error_set(err, SL_EINVAL,
                            "the window is empty: from must be before to (and "
                            "before now)");
    pthread_mutex_lock(&r->lock);
    unsigned running = 0;
    for (replay *q = r->replays; q; q = q->next)
        running += !atomic_load(&q->finished_ms);
    pthread_mutex_unlock(&r->lock);
    if (running >= REPLAYS_RUNNING_MAX)
        return sl_error_set(err, SL_EFULL,
                            "%u replays are running, the limit; wait for one to "
                            "finish",
                            running);
    replay *rp = calloc(1, sizeof *rp);
    if (!rp || !(rp->cons = calloc((size_t)rr->nparts, sizeof *rp->cons))) {
        free(rp);
        return sl_error_set(err, SL_ENOMEM, "replay: out of memory");
    }
    rp->rule = rr;
    rp->from_ms = from_ms;
    rp->to_ms = to_ms;
    rp->started_ms = now;
    rp->nparts = rr->nparts;
    atomic_store(&rp->remaining, rr->nparts);
    int rc = 0;
    for (int32_t p = 0; p < rr->nparts; p++) {
        consumer *c = &rp->cons[p];
        const sl_store *st = &rr->set->parts[p];
        int64_t start = 0, end = 0;
        *c = (consumer){.rule = rr, .rp = rp, .ctr = &rp->ctr, .part = p};
        c->cur.fd = -1;
        if (!rc)
            rc = sl_store_offset_for_time(st, from_ms, &start, err);
        if (!rc)
            rc = sl_store_offset_for_time(st, to_ms, &end, err);
        if (rc)
            continue;
        c->start = start;
        set_pos(c, start);
        atomic_store(&c->end, end);
        atomic_store(&c->committed, start);
        if (start >= end) {
            atomic_store(&c->done, true);
            atomic_fetch_sub(&rp->remaining, 1);
        }
    }
    if (rc) {
        free_replay(rp);
        return rc;
    }
    pthread_mutex_lock(&r->lock);
    snprintf(rp->id, sizeof rp->id, "rp-%u", ++r->replay_seq);
    if (!atomic_load(&rp->remaining))
        atomic_store(&rp->finished_ms, now);
    rp->next = r->replays;
    r->replays = rp;
    for (int32_t p = 0; p < rp->nparts; p++)
        push(r, &rp->cons[p]);
    rc = replay_json(out, rp);
    trim_replays(r);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int sl_runner_replays_json(sl_runner *r, const char *rule, sl_buf *out)
{
    int rc = sl_buf_printf(out, "{\"replays\":[");
    pthread_mutex_lock(&r->lock);
    trim_replays(r);
    bool first = true;
    for (replay *rp = r->replays; !rc && rp; rp = rp->next) {
        if (rule && strcmp(rp->rule->rc->name, rule) != 0)
            continue;
        rc = first ? 0 : sl_buf_append(out, ",", 1);
        rc = rc ? rc : replay_json(out, rp);
        first = false;
    }
    pthread_mutex_unlock(&r->lock);
    return rc ? rc : sl_buf_printf(out, "]}\n");
}

/* ---- reporting ------------------------------------------------------------- */

static int64_t rule_lag(const rule_run *rr, int32_t p, int64_t *end)
{
    *end = sl_store_end_offset(&rr->set->parts[p]);
    int64_t lag = *end - atomic_load(&rr->cons[p].committed);
    return lag > 0 ? lag : 0;
}

static int health_json(sl_buf *out, const rule_run *rr)
{
    int rc = sl_buf_printf(out, ",\"health\":[");
    bool first = true;
    for (size_t t = 0; !rc && t < rr->ntargets; t++) {
        const target_inst *ti = &rr->targets[t];
        char msg[SL_ERROR_MAX] = "";
        int bad = ti->ops->health ? ti->ops->health(ti->impl, msg, sizeof msg) : 0;
        rc = sl_buf_printf(out, "%s{\"target\":\"%s\",\"healthy\":%s", first ? "" : ",", ti->label,
                           bad ? "false" : "true");
        if (!rc && bad) {
            rc = sl_buf_printf(out, ",\"reason\":");
            rc = rc ? rc : put_text(out, msg);
        }
        rc = rc ? rc : sl_buf_append(out, "}", 1);
        first = false;
    }
    return rc ? rc : sl_buf_append(out, "]", 1);
}

static const char *run_mode(const rule_run *rr)
{
    return !rr->base_run                ? "base"
           : rr->unrouted               ? "unrouted"
           : rr->rc != rr->base_run->rc ? "override"
                                        : "fallback";
}

static int64_t run_lag(const rule_run *rr)
{
    int64_t total = 0, end;
    for (int32_t p = 0; p < rr->nparts; p++)
        total += rule_lag(rr, p, &end);
    return total;
}

/* {"lane" or "rule", mode, lag, counters…, unrouted, last_error} of a lane run. */
static int lane_run_json(sl_buf *out, rule_run *lr, bool first)
{
    const counters *c = &lr->ctr;
    int rc = sl_buf_printf(
        out,
        "%s{\"lane\":\"%s\",\"rule\":\"%s\",\"mode\":\"%s\",\"lag\":%" PRId64 ",\"read\":%" PRIu64
        ",\"matched\":%" PRIu64 ",\"delivered\":%" PRIu64 ",\"failed\":%" PRIu64
        ",\"dead_lettered\":%" PRIu64 ",\"retrying\":%" PRId64 ",\"unrouted\":%" PRIu64
        ",\"last_error\":",
        first ? "" : ",", lr->lane, lr->rc->name, run_mode(lr), run_lag(lr), atomic_load(&c->read),
        atomic_load(&c->matched), atomic_load(&c->delivered), atomic_load(&c->failed),
        atomic_load(&c->dead_lettered), atomic_load(&c->retrying), atomic_load(&lr->unrouted_n));
    if (!rc) {
        pthread_mutex_lock(&lr->err_lock);
        rc = put_text(out, lr->last_error);
        pthread_mutex_unlock(&lr->err_lock);
    }
    return rc ? rc : sl_buf_append(out, "}", 1);
}

int sl_runner_lane_json(sl_runner *r, const char *lane, sl_buf *out)
{
    uint64_t delivered = 0, unrouted = 0;
    size_t n = atomic_load(&r->nruns);
    for (size_t k = 0; k < n; k++) {
        rule_run *lr = RUN(r, k);
        if (strcmp(lr->lane, lane) == 0 && !atomic_load(&lr->dropped)) {
            delivered += atomic_load(&lr->ctr.delivered);
            unrouted += atomic_load(&lr->unrouted_n);
        }
    }
    int rc = sl_buf_printf(out, ",\"delivered\":%" PRIu64 ",\"unrouted\":%" PRIu64 ",\"rules\":[",
                           delivered, unrouted);
    bool first = true;
    for (size_t k = 0; !rc && k < n; k++) {
        rule_run *lr = RUN(r, k);
        if (strcmp(lr->lane, lane) || atomic_load(&lr->dropped))
            continue;
        rc = lane_run_json(out, lr, first);
        first = false;
    }
    return rc ? rc : sl_buf_append(out, "]", 1);
}

int sl_runner_rules_json(sl_runner *r, sl_buf *out)
{
    int rc = sl_buf_printf(out, "{\"rules\":[");
    for (size_t i = 0; !rc && i < r->nbase; i++) {
        rule_run *rr = RUN(r, i);
        rc = sl_buf_printf(out,
                           "%s{\"name\":\"%s\",\"set\":\"%s\",\"enabled\":%s,"
                           "\"ordered\":%s,\"dlq\":",
                           i ? "," : "", rr->rc->name, rr->set->name,
                           rr->rc->enabled ? "true" : "false", rr->rc->ordered ? "true" : "false");
        if (!rc && rr->rc->dlq)
            rc = sl_buf_printf(out, "\"%s\"", rr->rc->dlq);
        else if (!rc)
            rc = sl_buf_printf(out, "null");
        rc = rc ? rc : sl_buf_printf(out, ",\"targets\":[");
        for (size_t t = 0; !rc && t < rr->ntargets; t++)
            rc = sl_buf_printf(out, "%s\"%s\"", t ? "," : "", rr->targets[t].ops->name);
        rc = rc ? rc : sl_buf_printf(out, "]");
        rc = rc ? rc : health_json(out, rr);
        rc = rc ? rc : sl_buf_printf(out, ",\"partitions\":[");
        int64_t total = 0;
        for (int32_t p = 0; !rc && p < rr->nparts; p++) {
            int64_t end, lag = rule_lag(rr, p, &end);
            total += lag;
            rc = sl_buf_printf(out,
                               "%s{\"partition\":%d,\"cursor\":%" PRId64 ",\"end\":%" PRId64
                               ",\"lag\":%" PRId64 "}",
                               p ? "," : "", p, atomic_load(&rr->cons[p].committed), end, lag);
        }
        rc = rc ? rc : sl_buf_printf(out, "],\"lag\":%" PRId64 ",", total);
        /* The rule's counts are those of all its lanes; "lanes" splits them. */
        counters sum;
        sum_counters(r, rr, &sum);
        rc = rc ? rc : counters_json(out, &sum);
        rc = rc ? rc : sl_buf_printf(out, ",\"last_error\":");
        if (!rc) {
            pthread_mutex_lock(&rr->err_lock);
            rc = put_text(out, rr->last_error);
            pthread_mutex_unlock(&rr->err_lock);
        }
        rc = rc ? rc : sl_buf_printf(out, ",\"lanes\":[");
        bool first = true;
        for (size_t k = r->nbase, n = atomic_load(&r->nruns); !rc && k < n; k++) {
            rule_run *lr = RUN(r, k);
            if (lr->base_run != rr || atomic_load(&lr->dropped))
                continue;
            rc = lane_run_json(out, lr, first);
            first = false;
        }
        rc = rc ? rc : sl_buf_printf(out, "]}");
    }
    return rc ? rc : sl_buf_printf(out, "]}\n");
}

/* The help of each rule counter, in the order of the counters struct. */
static const char *const ctr_fam[][2] = {
    {"sluice_rule_read_total", "Events the rule read from its set."},
    {"sluice_rule_matched_total", "Events that passed the rule's match and filter."},
    {"sluice_rule_filtered_total", "Events the rule's filter stopped."},
    {"sluice_rule_dropped_total", "Events the rule's transform turned into nothing."},
    {"sluice_rule_failed_total", "Events given up on (dead-lettered, discarded, or deleted by "
                                 "retention before delivery)."},
    {"sluice_rule_delivered_total", "Payloads every target of the rule accepted."},
    {"sluice_rule_retries_total", "Payloads sent again after a failure."},
    {"sluice_rule_dead_lettered_total", "Events written to the rule's dlq set."},
    {"sluice_rule_discarded_total", "Events given up on without a dlq (or that the dlq refused)."},
};

/* One sample per live run (rule="R", and lane="L" for a lane run). */
static int run_sample(sl_buf *out, const char *fam, const rule_run *rr, int64_t v)
{
    return sl_metrics_i64(out, fam, v, "rule", rr->rc->name, "lane", rr->lane[0] ? rr->lane : NULL,
                          NULL);
}

int sl_runner_metrics(sl_runner *r, sl_buf *out)
{
    size_t n = atomic_load(&r->nruns);
    int rc = 0;
    for (size_t k = 0; !rc && k < sizeof ctr_fam / sizeof *ctr_fam; k++) {
        rc = sl_metrics_family(out, ctr_fam[k][0], SL_METRIC_COUNTER, ctr_fam[k][1]);
        for (size_t i = 0; !rc && i < n; i++) {
            rule_run *rr = RUN(r, i);
            if (atomic_load(&rr->dropped) || rr->unrouted)
                continue;
            counters *c = &rr->ctr;
            _Atomic uint64_t *v[] = {&c->read,    &c->matched,       &c->filtered,
                                     &c->dropped, &c->failed,        &c->delivered,
                                     &c->retries, &c->dead_lettered, &c->discarded};
            rc = run_sample(out, ctr_fam[k][0], rr, (int64_t)atomic_load(v[k]));
        }
    }
    rc = rc ? rc
            : sl_metrics_family(
                  out, "sluice_rule_lag", SL_METRIC_GAUGE,
                  "Events of the rule's set the rule has not read yet (end offset - cursor).");
    for (size_t i = 0; !rc && i < n; i++)
        if (!atomic_load(&RUN(r, i)->dropped))
            rc = run_sample(out, "sluice_rule_lag", RUN(r, i), run_lag(RUN(r, i)));
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_rule_retrying", SL_METRIC_GAUGE,
                                "Payloads waiting for a retry now.");
    for (size_t i = 0; !rc && i < n; i++)
        if (!atomic_load(&RUN(r, i)->dropped) && !RUN(r, i)->unrouted)
            rc = run_sample(out, "sluice_rule_retrying", RUN(r, i),
                            atomic_load(&RUN(r, i)->ctr.retrying));
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_lane_unrouted_total", SL_METRIC_COUNTER,
                                "Events of a lane that reached a rule with no override for it "
                                "and no fallback.");
    for (size_t i = 0; !rc && i < n; i++)
        if (RUN(r, i)->unrouted && !atomic_load(&RUN(r, i)->dropped))
            rc = sl_metrics_u64(out, "sluice_lane_unrouted_total",
                                atomic_load(&RUN(r, i)->unrouted_n), "rule", RUN(r, i)->rc->name,
                                "lane", RUN(r, i)->lane, NULL);
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_lane_delivered_total", SL_METRIC_COUNTER,
                                "Payloads the rules delivered per lane (\"\" is the base lane).");
    uint64_t *sum = rc ? NULL : calloc(LANE_NAMES, sizeof *sum);
    bool *live = rc ? NULL : calloc(LANE_NAMES, sizeof *live);
    if (!rc && (!sum || !live))
        rc = SL_ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        const rule_run *rr = RUN(r, i);
        if (rr->lane_idx >= 0 && !atomic_load(&rr->dropped)) {
            sum[rr->lane_idx] += atomic_load(&rr->ctr.delivered);
            live[rr->lane_idx] = true;
        }
    }
    for (size_t k = 0; !rc && k < LANE_NAMES; k++)
        if (live[k])
            rc = sl_metrics_u64(out, "sluice_lane_delivered_total", sum[k], "lane",
                                r->lane_names[k], NULL);
    free(sum);
    free(live);
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_target_healthy", SL_METRIC_GAUGE,
                                "1 when the target is healthy, 0 when its health check fails.");
    for (size_t i = 0; !rc && i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (atomic_load(&rr->dropped) || (rr->base_run && rr->targets == rr->base_run->targets))
            continue; /* borrowed targets are reported by their owner */
        for (size_t t = 0; !rc && t < rr->ntargets; t++) {
            const target_inst *ti = &rr->targets[t];
            char msg[SL_ERROR_MAX];
            int bad = ti->ops->health ? ti->ops->health(ti->impl, msg, sizeof msg) : 0;
            rc = sl_metrics_u64(out, "sluice_target_healthy", !bad, "rule", rr->rc->name, "lane",
                                rr->lane[0] ? rr->lane : NULL, "target", ti->label, NULL);
        }
    }
    return rc;
}
