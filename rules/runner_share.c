/*
 * rules/runner_share.c — shared readers: the runs of one set and lane that
 * stand at the same place in a partition read it once. A shared reader's turn
 * reads and decorates a batch once, parses each event once, asks the
 * combined matcher of all its members' patterns (rules/pattern_set.h) which
 * rules it concerns, and runs only those rules' Lua, input template and
 * targets. Members the batch does not concern only move their position; their
 * cursors are written at most once a second (an untouched member that
 * restarts from an older position finds nothing for it there).
 *
 * Independence is kept by leaving: a member whose delivery failed (its pool
 * holds payloads), took longer than SHARE_SLOW_NS, or whose batch could not be
 * evaluated goes back to reading on its own (runner_turn.c), with its own
 * retries, back-off and lag; when it has caught up (empty pool, its position
 * at or past the shared reader's) it joins again. A member ahead of the
 * shared reader skips the events it already had. Joins happen between turns:
 * a run asking while the turn runs waits for its end (join_wait).
 */
#include "rules/runner_internal.h"

#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/bus/record_event.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Per-member flags of one turn (consumer.share_flags). */
enum { S_TOUCHED = 1, S_LEAVE = 2, S_SLOW = 4, S_REDO = 8 };

static bool evaluates(const rule_run *rr)
{
    return rr->rc->enabled && !rr->unrouted;
}

/* ---- rosters ---------------------------------------------------------------- */

static void free_roster(roster *ro)
{
    for (int32_t p = 0; ro->shares && p < ro->nparts; p++) {
        share *sh = &ro->shares[p];
        if (sh->reader)
            sl_store_reader_close(&ro->set->parts[p], sh->reader);
        free(sh->pending);
    }
    free(ro->shares);
    sl_pattern_set_free(ro->ps);
    free(ro->eval_run);
    free(ro->runs);
    free(ro);
}

void sl__runner_rosters_free(sl_runner *r)
{
    while (r->rosters) {
        roster *ro = r->rosters;
        r->rosters = ro->next;
        free_roster(ro);
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The members a new shared reader starts with: the runs at the position most
 * of them stand at (after a clean restart, all), and those ahead of it; the
 * ones behind catch up on their own first, so that one far-behind rule does
 * not hold the others back. */
static void first_members(roster *ro, share *sh, int64_t *pos)
{
    size_t n = 0;
    for (size_t i = 0; i < ro->nruns; i++)
        pos[n++] = ro->runs[i]->cons[sh->part].pos;
    qsort(pos, n, sizeof *pos, cmp_i64);
    int64_t best = pos[0];
    size_t best_n = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i; j < n && pos[j] == pos[i]; j++)
            ;
        if (j - i >= best_n) {
            best_n = j - i;
            best = pos[i];
        }
    }
    sh->pos = best;
    atomic_store(&sh->handle.read_pos, best);
    for (size_t i = 0; i < ro->nruns; i++) {
        consumer *c = &ro->runs[i]->cons[sh->part];
        if (c->pos >= best) {
            c->in = sh;
            sh->nmembers++;
        }
    }
}

/* One roster for runs[0..n) (all of one set and lane). */
static int make_roster(sl_runner *r, rule_run **runs, size_t n, sl_error *err)
{
    roster *ro = calloc(1, sizeof *ro);
    const sl_pattern **pats = calloc(n, sizeof *pats);
    int64_t *pos = calloc(n, sizeof *pos);
    int rc = 0;
    if (!ro || !pats || !pos || !(ro->runs = calloc(n, sizeof *ro->runs)) ||
        !(ro->eval_run = calloc(n, sizeof *ro->eval_run)) ||
        !(ro->shares = calloc((size_t)runs[0]->nparts, sizeof *ro->shares)))
        rc = sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    size_t ne = 0;
    if (!rc) {
        ro->set = runs[0]->set;
        ro->eventbridge = runs[0]->rc->eventbridge;
        snprintf(ro->lane, sizeof ro->lane, "%s", runs[0]->lane);
        ro->nparts = runs[0]->nparts;
        for (size_t i = 0; i < n; i++) {
            ro->runs[i] = runs[i];
            if (evaluates(runs[i])) {
                ro->eval_run[ne] = (uint32_t)i;
                pats[ne++] = runs[i]->rc->pattern;
            }
        }
        ro->nruns = n;
        rc = sl_pattern_set_build(pats, ne, &ro->ps, err);
    }
    free(pats);
    if (rc) {
        free(pos);
        if (ro)
            free_roster(ro);
        return rc;
    }
    pthread_mutex_lock(&r->lock);
    for (int32_t p = 0; p < ro->nparts; p++) {
        share *sh = &ro->shares[p];
        sh->ro = ro;
        sh->part = p;
        sh->handle.handle_of = sh;
        sh->handle.part = p;
        sh->handle.cur.fd = -1;
        first_members(ro, sh, pos);
    }
    for (size_t i = 0; i < n; i++)
        runs[i]->ro = ro;
    ro->ks = runs[0]->ks;
    ro->next = r->rosters;
    r->rosters = ro;
    pthread_mutex_unlock(&r->lock);
    free(pos);
    return 0;
}

int sl__runner_rosters_build(sl_runner *r, size_t from_run, sl_error *err)
{
    size_t n = atomic_load(&r->nruns);
    if (from_run >= n)
        return 0;
    rule_run **group = calloc(n - from_run, sizeof *group);
    bool *taken = calloc(n - from_run, sizeof *taken);
    int rc = group && taken ? 0 : sl_error_set(err, SL_ENOMEM, "rule runner: out of memory");
    for (size_t i = from_run; !rc && i < n; i++) {
        rule_run *a = RUN(r, i);
        /* transform_batch sees whole batches of its own: it reads alone. */
        if (taken[i - from_run] || a->rc->transform_batch || atomic_load(&a->dropped))
            continue;
        size_t k = 0;
        for (size_t j = i; j < n; j++) {
            rule_run *b = RUN(r, j);
            /* One shape per roster: its batch is decorated once. */
            if (!taken[j - from_run] && b->set == a->set && !b->rc->transform_batch &&
                b->rc->eventbridge == a->rc->eventbridge &&
                !atomic_load(&b->dropped) && strcmp(b->lane, a->lane) == 0) {
                taken[j - from_run] = true;
                group[k++] = b;
            }
        }
        rc = make_roster(r, group, k, err);
    }
    free(group);
    free(taken);
    return rc;
}

/* ---- joining and leaving (runner lock held) ------------------------------------ */

static void join(share *sh, consumer *c)
{
    if (!sh->nmembers && sh->pos != c->pos) {
        /* A shared reader nobody uses takes the newcomer's place. */
        if (sh->reader)
            sl_store_reader_close(&sh->ro->set->parts[sh->part], sh->reader);
        sh->reader = NULL;
        sh->pos = c->pos;
        atomic_store(&sh->handle.read_pos, c->pos);
    }
    if (c->reader)
        sl_store_reader_close(&c->rule->set->parts[c->part], c->reader);
    c->reader = NULL;
    c->in = sh;
    sh->nmembers++;
}

void sl__runner_try_join(sl_runner *r, consumer *c)
{
    (void)r;
    rule_run *rr = c->rule;
    if (!rr || !rr->ro || c->rp || c->in || c->join_wait || c->npool || c->hold ||
        c->backoff_ms || atomic_load(&rr->dropped) || sl_clock_mono_ns() < c->rejoin_ns ||
        !sl__runner_kafka_owned(c))
        return;
    share *sh = &rr->ro->shares[c->part];
    if (sh->handle.running) {
        if (sh->npending == sh->pending_cap &&
            SL_GROW(sh->pending, sh->pending_cap, 8))
            return; /* it reads on alone */
        sh->pending[sh->npending++] = c;
        c->join_wait = true;
        return;
    }
    if (sh->nmembers && c->pos < sh->pos)
        return; /* behind: it catches up on its own first */
    join(sh, c);
}

/* Empties sh (runner lock held, sh and its members not running): no
 * reader, no member, no one waiting to join; with rebuild, it starts again
 * with the members at their positions as at start (first_members()). Used
 * when a Kafka-backed set's partition changes hands (runner_kafka.c). */
void sl__runner_share_reset(sl_runner *r, share *sh, bool rebuild)
{
    (void)r;
    roster *ro = sh->ro;
    if (sh->reader)
        sl_store_reader_close(&ro->set->parts[sh->part], sh->reader);
    sh->reader = NULL;
    for (size_t i = 0; i < ro->nruns; i++) {
        consumer *c = &ro->runs[i]->cons[sh->part];
        if (c->in == sh)
            c->in = NULL;
    }
    for (size_t i = 0; i < sh->npending; i++)
        sh->pending[i]->join_wait = false;
    sh->npending = 0;
    sh->nmembers = 0;
    sh->linger_ns = 0;
    sh->handle.hold = false;
    sh->handle.retry_at_ns = 0;
    if (!rebuild)
        return;
    int64_t *pos = calloc(ro->nruns, sizeof *pos);
    if (pos) /* without memory every run reads alone, and joins later */
        first_members(ro, sh, pos);
    free(pos);
}

/* A member goes back to reading alone, at its own position. */
static void leave(sl_runner *r, share *sh, consumer *c, bool slow)
{
    c->in = NULL;
    sh->nmembers--;
    if (slow) {
        /* A target that stays slow holds the others once per rejoin, so
         * the rejoins space out: 5 s, 10 s, … 5 min while it stays slow. */
        int64_t now = sl_clock_mono_ns(), wait = SHARE_REJOIN_NS;
        if (c->slow_ns && now - c->slow_ns > SHARE_REJOIN_MAX_NS)
            c->slow_strikes = 0;
        for (unsigned k = 0; k < c->slow_strikes && wait < SHARE_REJOIN_MAX_NS; k++)
            wait *= 2;
        c->slow_strikes++;
        c->slow_ns = now;
        c->rejoin_ns = now + (wait < SHARE_REJOIN_MAX_NS ? wait : SHARE_REJOIN_MAX_NS);
    }
    int64_t next_retry = 0;
    for (size_t i = 0; i < c->npool; i++)
        if (c->pool[i].retry_at_ns && (!next_retry || c->pool[i].retry_at_ns < next_retry))
            next_retry = c->pool[i].retry_at_ns;
    c->retry_at_ns = next_retry;
    c->hold = sl__runner_pool_blocks(c);
    if (!c->hold && !atomic_load(&c->rule->dropped))
        sl__runner_push(r, c);
}

/* Runs that asked to join during the turn: in if at or ahead of the reader. */
static void take_pending(sl_runner *r, share *sh)
{
    for (size_t i = 0; i < sh->npending; i++) {
        consumer *c = sh->pending[i];
        c->join_wait = false;
        if ((!sh->nmembers || c->pos >= sh->pos) && !c->npool && !atomic_load(&c->rule->dropped))
            join(sh, c);
        else
            sl__runner_push(r, c);
    }
    sh->npending = 0;
}

/* Every member leaves (a read error: their own turns say what it is). */
static bool dissolve(worker *w, share *sh, size_t nm)
{
    sl_runner *r = w->r;
    if (sh->reader)
        sl_store_reader_close(&sh->ro->set->parts[sh->part], sh->reader);
    sh->reader = NULL;
    pthread_mutex_lock(&r->lock);
    for (size_t m = 0; m < nm; m++)
        leave(r, sh, w->mem[m], false);
    take_pending(r, sh);
    pthread_mutex_unlock(&r->lock);
    return false;
}

/* ---- a turn ------------------------------------------------------------------- */

static int grow_turn(worker *w, const roster *ro)
{
    if (w->mem_cap < ro->nruns) {
        consumer **g = realloc(w->mem, ro->nruns * sizeof *g);
        if (!g)
            return SL_ENOMEM;
        w->mem = g;
        w->mem_cap = ro->nruns;
    }
    size_t np = sl_pattern_set_count(ro->ps);
    if (w->hits_cap < np) {
        uint32_t *g = realloc(w->hits, np * sizeof *g);
        if (!g)
            return SL_ENOMEM;
        w->hits = g;
        w->hits_cap = np;
    }
    if (w->scr_n < np || !w->scr) {
        sl_pattern_set_scratch_free(w->scr);
        w->scr_n = 0;
        if (!(w->scr = sl_pattern_set_scratch_new(ro->ps)))
            return SL_ENOMEM;
        w->scr_n = np;
    }
    return 0;
}

static int add_pair(worker *w, size_t *n, uint64_t v)
{
    if (*n == w->pairs_cap && SL_GROW(w->pairs, w->pairs_cap, 1024))
        return SL_ENOMEM;
    w->pairs[(*n)++] = v;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Reads up to max records at the reader's position into the worker's event
 * arrays (decorated once for every member); records below minpos, which
 * every member already had, are skipped. Returns 0 or the read error. */
static int read_batch(worker *w, share *sh, int64_t minpos, size_t max, size_t nm, size_t *nevp,
                      sl_error *err)
{
    roster *ro = sh->ro;
    const sl_store *st = &ro->set->parts[sh->part];
    size_t nev = 0, max_bytes = max * BATCH_EVENT_BYTES;
    w->ev.len = 0;
    int rc = 0;
    while (nev < max && w->ev.len < max_bytes) {
        sl_record rec;
        rc = sl_store_reader_next(st, sh->reader, &rec, err);
        if (rc == SL_EEOF) {
            rc = 0;
            break;
        }
        if (rc)
            break;
        if (rec.offset < minpos)
            continue;
        if ((rc = sl__runner_grow_events(w, nev + 1)))
            break;
        size_t at = w->ev.len;
        if (sl__runner_event_json(w, &rec, ro->set->name, sh->part, ro->eventbridge)) {
            w->ev.len = at;
            for (size_t m = 0; m < nm; m++)
                if (w->mem[m]->pos <= rec.offset) {
                    atomic_fetch_add(&w->mem[m]->ctr->failed, 1);
                    sl__runner_rule_failure(w->mem[m]->rule, rec.offset, sh->part,
                                            "stored event is not a JSON object");
                }
            continue;
        }
        size_t lane_len = rec.lane_len <= SL_EVENT_LANE_MAX ? rec.lane_len : 0;
        w->ev_ends[nev] = w->ev.len;
        w->evl[nev] = w->ev.len - at;
        w->offs[nev] = rec.offset;
        memcpy(w->lanes[nev], rec.lane, lane_len);
        w->lanes[nev][lane_len] = '\0';
        nev++;
    }
    *nevp = nev;
    return rc;
}

/* The (run, event) pairs of the batch: each event parsed once and matched
 * once against every member's pattern. An event that does not parse goes to
 * every evaluating member whole (flag bit 0): sl_rule_eval() then says for
 * each what it says for a rule alone. */
static int match_batch(worker *w, share *sh, size_t nev, size_t *npairs)
{
    roster *ro = sh->ro;
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; !rc && i < nev; i++) {
        const char *evj = (const char *)w->ev.data + (i ? w->ev_ends[i - 1] : 0);
        sl_error e = {0};
        if (sl_evview_parse(&w->pv, evj, w->evl[i], false, &e)) {
            for (size_t k = 0; !rc && k < sl_pattern_set_count(ro->ps); k++) {
                consumer *c = &ro->runs[ro->eval_run[k]]->cons[sh->part];
                if (c->in == sh && w->offs[i] >= c->pos)
                    rc = add_pair(w, &n, (uint64_t)ro->eval_run[k] << 32 | (uint64_t)i << 1 | 1);
            }
            continue;
        }
        size_t k = sl_pattern_set_match(ro->ps, &w->pv, w->scr, w->hits);
        for (size_t j = 0; !rc && j < k; j++) {
            uint32_t ri = ro->eval_run[w->hits[j]];
            consumer *c = &ro->runs[ri]->cons[sh->part];
            if (c->in == sh && w->offs[i] >= c->pos)
                rc = add_pair(w, &n, (uint64_t)ri << 32 | (uint64_t)i << 1);
        }
    }
    *npairs = n;
    return rc;
}

/* Evaluates and delivers, for member c, the events pairs[from, to) name;
 * sets its turn flags. Mirrors fresh_batch() in runner_turn.c for one rule. */
static void deliver_member(worker *w, consumer *c, size_t from, size_t to)
{
    rule_run *rr = c->rule;
    size_t pool_at = c->npool;
    int rc = 0;
    sl_rule_out_reset(&w->out);
    sl_input_ctx ictx = {.rule = rr->rc->name, .now_ms = sl_clock_now_ms()};
    for (size_t k = from; !rc && k < to; k++) {
        size_t i = (size_t)(w->pairs[k] & 0xffffffffu) >> 1;
        bool whole = w->pairs[k] & 1;
        const char *evj = (const char *)w->ev.data + (i ? w->ev_ends[i - 1] : 0);
        size_t at = w->out.n;
        sl_rule_outcome oc;
        sl_error e = {0};
        int r = whole ? sl_rule_eval(w->vm, rr->idx, evj, w->evl[i], &ictx, &w->out, &oc, &e)
                      : sl_rule_eval_matched(w->vm, rr->idx, evj, w->evl[i], &ictx, &w->out, &oc,
                                             &e);
        if (r) {
            sl__runner_rule_failure(rr, w->offs[i], c->part, e.msg);
            rc = sl__runner_keep_failed_event(w, c, i, e.msg);
            continue;
        }
        sl__runner_count_outcome(c->ctr, oc);
        rc = sl__runner_tag_outputs(w, at, w->lanes[i], (int32_t)i);
    }
    size_t n = w->out.n;
    if (!rc && n)
        rc = sl__runner_grow_round(w, n);
    if (!rc && n) {
        uint64_t all = rr->ntargets >= 64 ? ~0ull : (1ull << rr->ntargets) - 1;
        for (size_t i = 0; i < n; i++) {
            w->dl[i].data = sl_rule_out_get(&w->out, i, &w->dl[i].len);
            w->dl[i].lane = w->out_lanes[i];
            w->todo[i] = all;
        }
        int64_t t0 = sl_clock_mono_ns();
        sl__runner_round_deliver(w, rr, n);
        sl__runner_note_retries(w, c, n, true);
        if (sl_clock_mono_ns() - t0 > SHARE_SLOW_NS)
            c->share_flags |= S_SLOW | S_LEAVE;
        int64_t now_ms = sl_clock_mono_ms();
        for (size_t i = 0; !rc && i < n; i++) {
            if (!w->todo[i] && !w->dead[i])
                atomic_fetch_add(&c->ctr->delivered, 1);
            else
                rc = sl__runner_keep_payload(w, c, i, now_ms);
        }
    }
    if (rc) {
        /* Out of memory half way: it reads the batch again on its own. */
        while (c->npool > pool_at) {
            sl__runner_free_item(&c->pool[--c->npool]);
            atomic_fetch_sub(&c->ctr->retrying, 1);
        }
        c->share_flags |= S_REDO | S_LEAVE;
        return;
    }
    if (c->npool)
        sl__runner_settle(w, c);
    c->share_flags |= S_TOUCHED;
    if (c->npool)
        c->share_flags |= S_LEAVE;
}

/* Events of the batch at or after pos (offsets ascend). */
static size_t events_from(const worker *w, size_t nev, int64_t pos)
{
    size_t lo = 0, hi = nev;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (w->offs[mid] < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return nev - lo;
}

bool sl__runner_run_share(worker *w, share *sh)
{
    sl_runner *r = w->r;
    roster *ro = sh->ro;
    const sl_store *st = &ro->set->parts[sh->part];
    size_t nm = 0, max = BATCH_RECORDS;
    int64_t minpos = INT64_MAX;
    pthread_mutex_lock(&r->lock);
    if (grow_turn(w, ro)) {
        /* No memory for a shared turn: everyone reads alone for now. */
        for (size_t i = 0; i < ro->nruns; i++)
            if (ro->runs[i]->cons[sh->part].in == sh)
                leave(r, sh, &ro->runs[i]->cons[sh->part], false);
        take_pending(r, sh);
        pthread_mutex_unlock(&r->lock);
        return false;
    }
    for (size_t i = 0; i < ro->nruns; i++) {
        consumer *c = &ro->runs[i]->cons[sh->part];
        if (c->in != sh)
            continue;
        if (atomic_load(&c->rule->dropped)) {
            leave(r, sh, c, false);
            continue;
        }
        c->share_flags = 0;
        w->mem[nm++] = c;
        if (c->pos < minpos)
            minpos = c->pos;
        if (c->rule->batch_records > max)
            max = c->rule->batch_records;
    }
    /* More members, longer batches: each then gets more of its events per
     * delivery (a target.file syncs once per delivery). */
    size_t scaled = max * ((nm + 7) / 8);
    if (scaled > max)
        max = scaled < BATCH_RECORDS_MAX ? scaled : BATCH_RECORDS_MAX;
    /* Fetch-wait, as a Kafka consumer's fetch.max.wait.ms: with many members
     * and few new events each would get one or two per delivery, so the
     * cost per event would grow with the rule count again. Such a turn
     * waits up to SHARE_LINGER_NS for more (periodic() wakes it). */
    int64_t avail = sl_store_end_offset(st) - sh->pos, now0 = sl_clock_mono_ns();
    if (nm >= SHARE_LINGER_MEMBERS && avail > 0 && avail < (int64_t)max &&
        avail < (int64_t)nm * 2) {
        if (!sh->linger_ns)
            sh->linger_ns = now0 + SHARE_LINGER_NS;
        if (now0 < sh->linger_ns) {
            sh->handle.hold = true;
            sh->handle.retry_at_ns = sh->linger_ns;
            take_pending(r, sh);
            pthread_mutex_unlock(&r->lock);
            return false;
        }
    }
    sh->linger_ns = 0;
    pthread_mutex_unlock(&r->lock);
    if (!nm)
        return dissolve(w, sh, 0);

    sl_error err = {0};
    if (!sh->reader) {
        int rc = sl_store_reader_open(st, sh->pos, ro->lane, &sh->reader, &err);
        if (rc == SL_ERANGE && sh->pos > sl_store_end_offset(st) &&
            (ro->ks || sh->pos <= sl_databus_next_offset(ro->set, sh->part))) {
            sh->reader = NULL;
            pthread_mutex_lock(&r->lock);
            take_pending(r, sh);
            pthread_mutex_unlock(&r->lock);
            return false; /* accepted, not written yet: the append wakes it */
        }
        if (rc) {
            sh->reader = NULL;
            return dissolve(w, sh, nm);
        }
    }
    size_t nev = 0, npairs = 0;
    if (read_batch(w, sh, minpos, max, nm, &nev, &err))
        return dissolve(w, sh, nm);
    int64_t next = sl_store_reader_position(st, sh->reader);
    if (match_batch(w, sh, nev, &npairs)) {
        for (size_t m = 0; m < nm; m++)
            w->mem[m]->share_flags |= S_REDO | S_LEAVE;
        npairs = 0;
    }
    if (npairs > 1)
        qsort(w->pairs, npairs, sizeof *w->pairs, cmp_u64);
    for (size_t k = 0, j; k < npairs; k = j) {
        uint32_t ri = (uint32_t)(w->pairs[k] >> 32);
        for (j = k; j < npairs && (uint32_t)(w->pairs[j] >> 32) == ri; j++)
            ;
        deliver_member(w, &ro->runs[ri]->cons[sh->part], k, j);
    }
    int64_t now = sl_clock_mono_ns();
    for (size_t m = 0; m < nm; m++) {
        consumer *c = w->mem[m];
        if (c->share_flags & S_REDO)
            continue; /* position unchanged: it reads this batch again alone */
        size_t seen = events_from(w, nev, c->pos);
        atomic_fetch_add(&c->ctr->read, seen);
        if (c->rule->unrouted)
            atomic_fetch_add(&c->rule->unrouted_n, seen);
        if (next > c->pos)
            sl__runner_set_pos(c, next);
        int64_t safe = sl__runner_safe_position(c);
        if (c->rule->ks) { /* the cursor table: once a second at most (runner_kafka.c) */
            sl__runner_kafka_commit(r, c, safe);
            continue;
        }
        if (safe != c->cur.offset &&
            ((c->share_flags & S_TOUCHED) || now - c->commit_ns >= SHARE_COMMIT_NS)) {
            sl_error cerr = {0};
            /* Written now, synced with all the others once a second
             * (sl__runner_sync_cursors): a sync per cursor would be one per
             * rule and partition every second. */
            if (sl_cursor_commit(&c->cur, safe, INT64_MAX, &cerr)) {
                /* Its own turn retries the cursor, with back-off and a log line. */
                c->share_flags |= S_LEAVE;
                continue;
            }
            c->commit_ns = now;
            atomic_store_explicit(&c->cur_unsynced, true, memory_order_release);
        }
        atomic_store(&c->committed, safe);
    }
    sh->pos = next;
    atomic_store(&sh->handle.read_pos, next);
    pthread_mutex_lock(&r->lock);
    for (size_t m = 0; m < nm; m++)
        if (w->mem[m]->share_flags & S_LEAVE)
            leave(r, sh, w->mem[m], w->mem[m]->share_flags & S_SLOW);
    take_pending(r, sh);
    pthread_mutex_unlock(&r->lock);
    return nev == max;
}

/* Syncs the cursors shared turns wrote (at most once every CURSOR_SYNC_NS,
 * by one worker at a time, outside the runner's lock): each with fdatasync
 * when they are few, else all at once with one syncfs() of their file
 * system (one journal commit instead of hundreds). A flag is cleared before
 * the sync that covers it, so a cursor written meanwhile is synced next time.
 * A crash of the process loses nothing of a cursor written (it is in the page
 * cache); a crash of the machine repeats at most about a second. */
void sl__runner_sync_cursors(sl_runner *r)
{
    int64_t now = sl_clock_mono_ns();
    if (now - atomic_load(&r->cursor_sync_ns) < CURSOR_SYNC_NS ||
        atomic_exchange(&r->cursor_syncing, true))
        return;
    atomic_store(&r->cursor_sync_ns, now);
    size_t n = atomic_load(&r->nruns), dirty = 0;
    int any_fd = -1;
    for (size_t i = 0; i < n; i++)
        for (int32_t p = 0; p < RUN(r, i)->nparts; p++) {
            consumer *c = &RUN(r, i)->cons[p];
            if (atomic_load_explicit(&c->cur_unsynced, memory_order_acquire)) {
                dirty++;
                any_fd = c->cur.fd;
            }
        }
    bool all = dirty > CURSOR_SYNCFS_MIN && any_fd >= 0;
    for (size_t i = 0; dirty && i < n; i++)
        for (int32_t p = 0; p < RUN(r, i)->nparts; p++) {
            consumer *c = &RUN(r, i)->cons[p];
            if (atomic_exchange(&c->cur_unsynced, false) && !all && c->cur.fd >= 0)
                (void)fdatasync(c->cur.fd); /* a failure shows at the next commit's sync */
        }
    if (all)
        (void)syncfs(any_fd);
    atomic_store(&r->cursor_syncing, false);
}

void sl__runner_free_share_worker(worker *w)
{
    sl_evview_free(&w->pv);
    sl_pattern_set_scratch_free(w->scr);
    free(w->hits);
    free(w->pairs);
    free(w->mem);
}
