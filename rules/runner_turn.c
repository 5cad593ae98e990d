/*
 * rules/runner_turn.c — one turn of a consumer: retry what is due, read the next batch
 * from its cursor, evaluate it (rules/rule.h), hand the payloads to the
 * delivery round (runner_deliver.c), commit the cursor up to the oldest event
 * still unresolved, and decide when the consumer runs again.
 */
#include "rules/runner_internal.h"

#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/bus/record_event.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- one turn of a consumer ----------------------------------------------- */

void sl__runner_set_pos(consumer *c, int64_t pos)
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
        /* A Kafka-backed set's end is a cached high watermark, which
         * may not show yet what another router wrote: periodic() looks
         * again when it moves. */
        if (c->pos > end && (c->pos <= bus_next || rr->ks)) {
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
            sl__runner_set_pos(c, start);
        } else {
            /* The log lost its unsynced tail in a crash (ack = "buffer"):
             * the offsets past its end will be given to new events. */
            snprintf(msg, sizeof msg,
                     "the cursor is past the end of the partition (%" PRId64
                     "), which lost its unsynced tail in a crash; going on at the end",
                     end);
            sl__runner_set_pos(c, end);
        }
        sl__runner_rule_loss(rr, c->pos, c->part, msg);
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
        sl__runner_free_item(&c->pool[--c->npool]);
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
        return 0; /* sl__runner_run_consumer() marks it done once its pool is empty */
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
        if ((rc = sl__runner_grow_events(w, nev + 1)))
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
        /* A Kafka client's record that is no CloudEvent is built into one
         * (core/bus/record_event.h); stored CloudEvents are spliced. */
        if (sl__runner_event_json(w, &rec, rr->set->name, c->part, rr->rc->eventbridge) ||
            (c->rp && mark_replay(&w->ev, c->rp))) {
            w->ev.len = at;
            atomic_fetch_add(&c->ctr->failed, 1);
            sl__runner_rule_failure(rr, rec.offset, c->part, "stored event is not a JSON object");
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
            sl__runner_rule_failure(rr, c->pos, c->part, e.msg);
            for (size_t i = 0; !rc && i < nev; i++)
                rc = sl__runner_keep_failed_event(w, c, i, e.msg);
        } else {
            atomic_fetch_add(&c->ctr->matched, passed);
            atomic_fetch_add(&c->ctr->filtered, nev - passed);
            rc = sl__runner_tag_outputs(w, 0, w->lanes[0], -1);
        }
    } else if (rr->rc->enabled && !rr->unrouted) {
        for (size_t i = 0; !rc && i < nev; i++) {
            const char *evj = (const char *)w->ev.data + (i ? w->ev_ends[i - 1] : 0);
            size_t from = w->out.n;
            sl_rule_outcome oc;
            sl_error e = {0};
            int r = sl_rule_eval(w->vm, rr->idx, evj, w->evl[i], &ictx, &w->out, &oc, &e);
            if (r) {
                sl__runner_rule_failure(rr, w->offs[i], c->part, e.msg);
                rc = sl__runner_keep_failed_event(w, c, i, e.msg);
                continue;
            }
            sl__runner_count_outcome(c->ctr, oc);
            rc = sl__runner_tag_outputs(w, from, w->lanes[i], (int32_t)i);
        }
    }
    size_t n = w->out.n;
    if (!rc && n)
        rc = sl__runner_grow_round(w, n);
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
        sl__runner_round_deliver(w, rr, n);
        sl__runner_note_retries(w, c, n, true);
    }
    int64_t now_ms = sl_clock_mono_ms();
    for (size_t i = 0; i < n; i++) {
        if (!w->todo[i] && !w->dead[i])
            atomic_fetch_add(&c->ctr->delivered, 1);
        else if ((rc = sl__runner_keep_payload(w, c, i, now_ms)))
            break;
    }
    if (rc) {
        /* Out of memory with payloads unresolved: read the batch again. */
        snprintf(why, whylen, "keeping failed payloads: %s", sl_strerror(rc));
        return drop_turn(c, pool_at, rc);
    }
    sl__runner_set_pos(c, next);
    return 0;
}

/* Where the cursor may go: before the oldest unresolved event. */
int64_t sl__runner_safe_position(const consumer *c)
{
    int64_t at = c->pos;
    for (size_t i = 0; i < c->npool; i++)
        if (c->pool[i].offset < at)
            at = c->pool[i].offset;
    return at;
}

/* Whether the pool keeps the consumer from reading on: ordered, anything
 * waiting holds the partition; unordered, only a full pool does. */
bool sl__runner_pool_blocks(const consumer *c)
{
    return c->npool && (c->rule->rc->ordered || c->npool >= POOL_MAX);
}

/* Runs one turn and commits; decides whether the consumer goes on. */
bool sl__runner_run_consumer(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    char why[SL_ERROR_MAX + 64] = "";
    bool more = false;
    int rc = 0;
    if (c->npool) {
        sl__runner_retry_due(w, c);
        sl__runner_settle(w, c);
    }
    if (!sl__runner_pool_blocks(c)) {
        rc = fresh_batch(w, c, &more, why, sizeof why);
        if (c->npool)
            sl__runner_settle(w, c);
    }
    int64_t safe = sl__runner_safe_position(c);
    if (c->rp) {
        atomic_store(&c->committed, safe);
        if (!c->npool && c->pos >= c->end && !atomic_load(&c->done)) {
            atomic_store(&c->done, true);
            if (atomic_fetch_sub(&c->rp->remaining, 1) == 1)
                atomic_store(&c->rp->finished_ms, sl_clock_now_ms());
        }
        if (c->pos < c->end && !rc && !c->npool)
            more = true;
    } else if (rr->ks) {
        sl__runner_kafka_commit(w->r, c, safe); /* the cursor table (runner_kafka.c) */
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
    bool blocked = sl__runner_pool_blocks(c);
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
        sl__runner_rule_failure(rr, c->pos, c->part, msg);
    }
    return more;
}
