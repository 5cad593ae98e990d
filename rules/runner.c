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
 *
 * This file starts and stops the runner and makes the runs of rules and
 * lanes; the queue and workers are in runner_queue.c, a consumer's turn in
 * runner_turn.c, delivery and retries in runner_deliver.c, dead letters in
 * runner_dlq.c, replays in runner_replay.c and what it reports in
 * runner_report.c (rules/runner_internal.h holds what they share).
 */
#include "rules/runner_internal.h"

#include "core/base/clock.h"
#include "core/base/slog.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int sl__runner_init_worker(sl_runner *r, worker *w, sl_error *err)
{
    w->r = r;
    sl_evview_init(&w->pv);
    w->rng = ((uint64_t)sl_clock_mono_ns() ^ ((uintptr_t)w * 0x9e3779b97f4a7c15ull)) | 1;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    return sl_rule_vm_new(&r->opts.rules, &w->vm, err);
}

/* ---- start / stop ---------------------------------------------------------- */

static void free_consumer(consumer *c)
{
    /* A shared reader writes the cursors of members it did not concern
     * once a second: the last position is written now. */
    int64_t at = atomic_load(&c->committed);
    if (!c->rp && c->cur.fd >= 0 && at != c->cur.offset && at >= 0) {
        sl_error err = {0};
        (void)sl_cursor_commit(&c->cur, at, 0, &err);
    }
    if (c->reader)
        sl_store_reader_close(&c->rule->set->parts[c->part], c->reader);
    c->reader = NULL;
    for (size_t i = 0; i < c->npool; i++)
        sl__runner_free_item(&c->pool[i]);
    free(c->pool);
    c->pool = NULL;
    c->npool = 0;
    if (!c->rp)
        sl_cursor_close(&c->cur);
    free(c->kkey); /* a Kafka-backed set's: its cursor was written at stop */
    c->kkey = NULL;
}

void sl__runner_free_replay(replay *rp)
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
        sl_buf_free(&w->ebtmp);
        sl_rule_out_free(&w->out);
        void *arrays[] = {w->ev_ends, w->evp, w->evl,  w->offs,   w->lanes, w->out_lanes,
                          w->out_src, w->dl,  w->sub,  w->todo,   w->dead,  w->failed,
                          w->map,     w->st,  w->rsub, w->reason, w->its,   w->dlq_ends};
        for (size_t k = 0; k < sizeof arrays / sizeof *arrays; k++)
            free(arrays[k]);
        sl_buf_free(&w->reasons);
        sl_buf_free(&w->dlq);
        sl__runner_free_share_worker(w);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
    }
    free(r->workers);
    while (r->replays) {
        replay *rp = r->replays;
        r->replays = rp->next;
        sl__runner_free_replay(rp);
    }
    sl__runner_rosters_free(r); /* their readers, before the sets' runs go */
    /* Lane runs first: they may borrow their base run's targets. */
    for (size_t i = atomic_load(&r->nruns); i-- > 0;)
        free_run(RUN(r, i));
    for (size_t c = 0; c < RUN_CHUNKS && r->chunks[c]; c++)
        free(r->chunks[c]);
    free(r->lane_names);
    sl__runner_kafka_free(r);
    pthread_cond_destroy(&r->kcond);
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
    if (sl__runner_kafka_run(r, rr->set)) {
        /* Its cursors are in the cursor table, its positions come with the
         * group's assignments (runner_kafka.c): no cursor file. */
        for (int32_t p = 0; p < rr->nparts; p++) {
            rr->cons[p].ctr = &rr->ctr;
            rr->cons[p].part = p;
        }
        rc2 = sl__runner_kafka_open(r, rr, err);
        return rc2 ? rc2 : open_targets(r, rr, err);
    }
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
        sl__runner_set_pos(c, c->cur.offset);
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

/* Makes and opens the run of base rule `rule` for lane (NULL: the base
 * run), and publishes it (RUN()). Returns 0 or an SL_E… code with err
 * (the run is freed). */
static int add_run(sl_runner *r, size_t rule, const sl_lane_info *lane, sl_error *err)
{
    const sl_ruleset *rs = &r->opts.rules;
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
    rr->rc = &rs->rules[rule];
    snprintf(rr->label, sizeof rr->label, "%s", rr->rc->name);
    snprintf(rr->cursor_set, sizeof rr->cursor_set, "%s", rr->rc->set);
    if (lane) {
        rr->base_run = RUN(r, rule);
        size_t at;
        const sl_rule_config *ov = sl_ruleset_override(rs, rule, lane->name, &at);
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
    size_t from = atomic_load(&r->nruns);
    int rc = 0;
    for (size_t i = 0; !rc && i < r->nbase; i++)
        if (!find_run(r, i, lane->name))
            rc = add_run(r, i, lane, err);
    if (!queue)
        return rc; /* sl_runner_start() makes the shared readers of all runs at once */
    /* A lane's runs share reads from the start (its cursors are all new). */
    if (!rc)
        rc = sl__runner_rosters_build(r, from, err);
    pthread_mutex_lock(&r->lock);
    for (size_t i = from, n = atomic_load(&r->nruns); i < n; i++)
        for (int32_t p = 0; p < RUN(r, i)->nparts; p++)
            sl__runner_push(r, &RUN(r, i)->cons[p]);
    pthread_mutex_unlock(&r->lock);
    return rc;
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
    const sl_lane_decl *d = sl_ruleset_lane(&r->opts.rules, lane->name);
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
    if (!ls->rc && lane->auto_ && !sl_ruleset_lane(&ls->r->opts.rules, lane->name) &&
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
        /* No new turn starts (sl__runner_push() refuses it), queued ones leave the
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
    pthread_cond_init(&r->kcond, &ca);
    pthread_condattr_destroy(&ca);
    const sl_ruleset *rs = &r->opts.rules;
    unsigned nw = opts->workers ? opts->workers : rs->workers;
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
    for (size_t i = 0; !rc && i < rs->nrules; i++)
        if (!(rc = add_run(r, i, NULL, err)))
            r->nbase++;
    /* The lanes the config declares (but those dropped), then the auto
     * lanes the registry remembers. */
    for (size_t i = 0; !rc && i < rs->nlanes; i++) {
        const sl_lane_decl *d = &rs->lanes[i];
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
    if (!rc)
        rc = sl__runner_rosters_build(r, 0, err);
    for (unsigned i = 0; !rc && i < nw; i++)
        rc = sl__runner_init_worker(r, &r->workers[r->nworkers++], err);
    /* Under the lock: a running worker may grow the pool (maybe_grow). */
    pthread_mutex_lock(&r->lock);
    for (unsigned i = 0; !rc && i < r->nworkers; i++) {
        if (pthread_create(&r->workers[i].thread, NULL, sl__runner_worker_main, &r->workers[i]))
            rc = sl_error_set(err, SL_ENOMEM, "rule runner: cannot start a worker thread");
        else
            r->started++;
    }
    pthread_mutex_unlock(&r->lock);
    if (rc) {
        sl_runner_free(r);
        return rc;
    }
    /* Catch up from every cursor at once. */
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++)
        for (int32_t p = 0; p < RUN(r, i)->nparts; p++)
            sl__runner_push(r, &RUN(r, i)->cons[p]);
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
    if (!r || r->stopped)
        return;
    r->stopped = true;
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
    sl__runner_kafka_stop(r); /* Kafka-backed sets: their cursors, written */
}

void sl_runner_free(sl_runner *r)
{
    if (!r)
        return;
    sl_runner_stop(r);
    free_runner(r);
}
