/*
 * rules/runner_deliver.c — delivery and retries: a round of deliver() calls over a rule's
 * targets, the pool of payloads waiting for a retry (EventBridge's back-off
 * with full jitter, attempts and max_age), the worker's reusable arrays and
 * the rate-limited failure log.
 */
#include "rules/runner_internal.h"

#include "core/bus/ebshape.h"
#include "core/bus/record_event.h"

#include "core/base/clock.h"
#include "core/base/slog.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void sl__runner_rule_failure(rule_run *rr, int64_t offset, int32_t part, const char *why)
{
    log_failure(rr, offset, part, why, 0);
}

void sl__runner_rule_loss(rule_run *rr, int64_t offset, int32_t part, const char *why)
{
    log_failure(rr, offset, part, why, 1);
}

/* ---- worker arrays ---------------------------------------------------------- */

int sl__runner_grow_events(worker *w, size_t nev)
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

int sl__runner_event_json(worker *w, const sl_record *rec, const char *set, int32_t part,
                          bool eventbridge)
{
    if (!eventbridge)
        return sl_record_event(rec, set, part, &w->ev, NULL);
    w->ebtmp.len = 0;
    int rc = sl_record_event(rec, set, part, &w->ebtmp, NULL);
    const sl_ruleset *rs = &w->r->opts.rules;
    return rc ? rc
              : sl_ebshape_from_cloudevent((const char *)w->ebtmp.data, w->ebtmp.len,
                                           rs->aws_account ? rs->aws_account : "000000000000",
                                           rs->aws_region ? rs->aws_region : "us-east-1", &w->ev,
                                           NULL);
}

/* Counts what sl_rule_eval() said of one event (no match: read only). */
void sl__runner_count_outcome(counters *k, sl_rule_outcome oc)
{
    _Atomic uint64_t *ctr = oc == SL_RULE_MATCHED    ? &k->matched
                            : oc == SL_RULE_FILTERED ? &k->filtered
                            : oc == SL_RULE_DROPPED  ? &k->dropped
                                                     : NULL;
    if (ctr)
        atomic_fetch_add(ctr, 1);
}

/* Records the lane and source of the payloads added since `from`. */
int sl__runner_tag_outputs(worker *w, size_t from, const char *lane, int32_t src)
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

int sl__runner_grow_round(worker *w, size_t n)
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
    if (c->npool == c->pool_cap && SL_GROW(c->pool, c->pool_cap, 16))
        return SL_ENOMEM;
    c->pool[c->npool++] = *it;
    atomic_fetch_add(&c->ctr->retrying, 1);
    return 0;
}

void sl__runner_free_item(item *it)
{
    free(it->payload);
    free(it->source);
    free(it->reason);
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

void sl__runner_on_done(void *ctx, size_t j, int status, const char *reason)
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

const char *sl__runner_reason_at(const worker *w, size_t off)
{
    return off == SIZE_MAX ? "unknown error" : (const char *)w->reasons.data + off;
}

/* Delivers dl[0..n) to the targets in todo[i] and waits. On return todo[i]
 * holds the targets still to retry, dead[i] those that refused for good
 * (SL_EINVAL), failed[i] whether a real attempt failed (a deferred payload,
 * one a target did not try, is not an attempt) and reason[i] the first
 * failure's reason (offset in w->reasons, valid until the next round). */
void sl__runner_round_deliver(worker *w, rule_run *rr, size_t n)
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
        rr->targets[t].ops->deliver(rr->targets[t].impl, w->sub, k, sl__runner_on_done, w);
        sl__runner_wait_targets(w);
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
void sl__runner_note_retries(worker *w, consumer *c, size_t n, bool fresh)
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
    snprintf(msg, sizeof msg, "%s (%zu payload(s) to retry)", sl__runner_reason_at(w, first), k);
    sl__runner_rule_failure(c->rule, off, c->part, msg);
}

/* After a round: gives up on exhausted items, writes dead letters, drops
 * what is resolved and schedules the rest. */
void sl__runner_settle(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    const sl_retry_config *rc = &rr->rc->retry;
    /* max_age is measured on the monotonic clock: a clock step must not give
     * up on events early. */
    int64_t now_ms = sl_clock_mono_ms();
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
    sl__runner_dead_letters(w, c);
    size_t keep = 0;
    uint32_t tries = 0;
    for (size_t i = 0; i < c->npool; i++) {
        item *it = &c->pool[i];
        if (!it->todo && !it->dead) {
            sl__runner_free_item(it);
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
void sl__runner_retry_due(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    int64_t now = sl_clock_mono_ns();
    size_t n = 0;
    if (sl__runner_grow_round(w, c->npool))
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
    sl__runner_round_deliver(w, rr, n);
    sl__runner_note_retries(w, c, n, false);
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
            it->reason = strdup(sl__runner_reason_at(w, w->reason[i]));
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
int sl__runner_keep_payload(worker *w, consumer *c, size_t i, int64_t now_ms)
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
    it.reason = strdup(sl__runner_reason_at(w, w->reason[i]));
    if (rc || !it.payload || !it.reason || add_item(c, &it)) {
        sl__runner_free_item(&it);
        return SL_ENOMEM;
    }
    return 0;
}

/* An event whose evaluation failed: straight to the dead letters. */
int sl__runner_keep_failed_event(worker *w, consumer *c, size_t e, const char *why)
{
    item it = {
        .dead = 1ull << RULE_BIT, .attempts = 1, .tries = 1, .first_fail_ms = sl_clock_mono_ms()};
    memcpy(it.lane, w->lanes[e], SL_EVENT_LANE_MAX + 1);
    it.reason = strdup(why);
    if (copy_source(w, e, &it) || !it.reason || add_item(c, &it)) {
        sl__runner_free_item(&it);
        return SL_ENOMEM;
    }
    return 0;
}
