/*
 * rules/runner_replay.c — replays: a rule's events of a time window delivered again by
 * extra consumers that start from the time index and own no cursor.
 */
#include "rules/runner_internal.h"

#include "core/base/clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replays ---------------------------------------------------------------- */

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
    rc = rc ? rc : sl__runner_counters_json(out, &rp->ctr);
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
            sl__runner_free_replay(rp);
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
        sl__runner_set_pos(c, start);
        atomic_store(&c->end, end);
        atomic_store(&c->committed, start);
        if (start >= end) {
            atomic_store(&c->done, true);
            atomic_fetch_sub(&rp->remaining, 1);
        }
    }
    if (rc) {
        sl__runner_free_replay(rp);
        return rc;
    }
    pthread_mutex_lock(&r->lock);
    snprintf(rp->id, sizeof rp->id, "rp-%u", ++r->replay_seq);
    if (!atomic_load(&rp->remaining))
        atomic_store(&rp->finished_ms, now);
    rp->next = r->replays;
    r->replays = rp;
    for (int32_t p = 0; p < rp->nparts; p++)
        sl__runner_push(r, &rp->cons[p]);
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
