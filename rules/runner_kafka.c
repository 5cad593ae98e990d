/*
 * rules/runner_kafka.c — the runs of Kafka-backed sets (runner.h, "Kafka-backed
 * sets"; docs/scale-out.md): only the partitions this router owns in the
 * set's consumer group run, with cursors in the cursor table instead of
 * DATA/rules.
 *
 * Ownership is one atomic state per partition (struct kset, runner_internal.h)
 * that sl__runner_push() checks, so that nothing of a partition this router
 * does not own is ever queued: not its consumers, not its shared readers'
 * handles, not by a wake-up nor by periodic(). Giving a partition
 * (assign) and making a lane's runs hold lanes_lock, and a revoke takes it
 * to mark its partitions draining, so that a new run sees whether its
 * partitions are owned and stays so while it is made; a revoke does not
 * hold it while it waits for turns (a turn's target.set may add a lane).
 *
 * Assign: each run's position is looked up in the table (outside the
 * runner's lock: it may wait for the table to catch up), then, under the
 * lock and with nothing of the partition running, the partition's consumers
 * start afresh there (empty pools, no reader), its shared readers are made
 * again from those positions (the members at the most common position
 * share, as at start), and everything is queued. A turn from an earlier
 * ownership still running (a revoke that gave up waiting for it) defers
 * that until it ends (sl__runner_kafka_after_turn()).
 *
 * Revoke: K_DRAIN first (nothing new is queued; queued turns leave the
 * queue), then it waits for the turns in progress (their deliveries finish
 * and move committed), drops the pools (the next owner delivers those
 * payloads again from the cursor) and writes the cursors; then K_NONE,
 * after which no result moves a cursor, and the table is flushed.
 *
 * Table writes are made under the set's mutex with the state checked, so
 * that a put can never land after its partition was revoked: once a second
 * at most per consumer from turns, every committable() call for cursors that
 * moved, on revoke, and at stop.
 */
#include "rules/runner_internal.h"

#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/slog.h"
#include "core/bus/kgroup.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KCURSOR_WAIT_MS 5000        /* assign: the table catching up with the cursor topic */
#define KREVOKE_WAIT_NS 30000000000 /* revoke: turns in progress, at most (ops: revoke_wait_ms) */
#define KFLUSH_WAIT_MS 10000        /* revoke and stop: puts acknowledged, at most */
#define KPUT_NS 1000000000          /* a turn puts its consumer's cursor once a second at most */
#define KKEY_MAX (SL_SET_NAME_MAX + SL_EVENT_LANE_MAX + 400)

/* ---- the table, through the server's functions ---------------------------- */

static const sl_runner_kafka_ops *kops(const sl_runner *r)
{
    static const sl_runner_kafka_ops none = {0};
    return r->opts.kafka ? r->opts.kafka : &none;
}

bool sl__runner_kafka_run(const sl_runner *r, const sl_set *set)
{
    const sl_runner_kafka_ops *o = kops(r);
    return o->group_run ? o->group_run(set) : sl_set_remote(set);
}

static int table_get(const sl_runner *r, const char *key, int64_t wait_ms, int64_t *at)
{
    const sl_runner_kafka_ops *o = kops(r);
    if (!o->cursor_get || !r->opts.kcursors)
        return SL_ENOENT;
    return o->cursor_get(r->opts.kcursors, key, wait_ms, at);
}

/* Puts c's cursor at v (ks->mu held, the partition checked by the caller). */
static void table_put(sl_runner *r, kset *ks, consumer *c, int64_t v)
{
    const sl_runner_kafka_ops *o = kops(r);
    int rc = o->cursor_put && r->opts.kcursors ? o->cursor_put(r->opts.kcursors, c->kkey, v) : 0;
    int64_t now = sl_clock_mono_ns();
    if (!rc) {
        atomic_store(&c->kput, v);
        atomic_store(&c->kput_ns, now);
        return;
    }
    /* Left as it was: the next turn or committable() tries again. */
    if (now - atomic_load(&ks->put_log_ns) >= 60 * (int64_t)1000000000) {
        atomic_store(&ks->put_log_ns, now);
        sl_slog(SL_SLOG_WARN, "rules",
                "set %s: cannot write the cursor %s to the cursor table (%s); trying again",
                ks->set->name, c->kkey, sl_strerror(rc));
    }
}

static void table_flush(sl_runner *r, const char *why)
{
    const sl_runner_kafka_ops *o = kops(r);
    if (!o->cursor_flush || !r->opts.kcursors)
        return;
    sl_error err = {0};
    if (o->cursor_flush(r->opts.kcursors, KFLUSH_WAIT_MS, &err))
        sl_slog(SL_SLOG_WARN, "rules", "%s: the cursor table did not acknowledge every cursor: %s",
                why, err.msg[0] ? err.msg : "failed");
}

/* ---- sets and runs ---------------------------------------------------------- */

/* Any thread: the list only grows (under lanes_lock), each set complete
 * before it is published. */
static kset *find_kset(sl_runner *r, const sl_set *set)
{
    for (kset *ks = atomic_load(&r->ksets); ks; ks = ks->next)
        if (ks->set == set)
            return ks;
    return NULL;
}

static kset *get_kset(sl_runner *r, sl_set *set)
{
    kset *ks = find_kset(r, set);
    if (ks)
        return ks;
    if (!(ks = calloc(1, sizeof *ks)))
        return NULL;
    ks->set = set;
    ks->nparts = set->nparts;
    ks->state = calloc((size_t)set->nparts, sizeof *ks->state);
    ks->deferred = calloc((size_t)set->nparts, sizeof *ks->deferred);
    if (!ks->state || !ks->deferred) {
        free(ks->state);
        free(ks->deferred);
        free(ks);
        return NULL;
    }
    for (int32_t p = 0; p < set->nparts; p++)
        atomic_init(&ks->state[p], K_NONE);
    pthread_mutex_init(&ks->mu, NULL);
    ks->next = atomic_load(&r->ksets);
    atomic_store(&r->ksets, ks);
    return ks;
}

void sl__runner_kafka_free(sl_runner *r)
{
    for (kset *ks = atomic_load(&r->ksets), *next; ks; ks = next) {
        next = ks->next;
        pthread_mutex_destroy(&ks->mu);
        free(ks->state);
        free(ks->deferred);
        free(ks);
    }
}

static void make_key(const sl_runner *r, const rule_run *rr, int32_t p, char *buf, size_t cap)
{
    const sl_runner_kafka_ops *o = kops(r);
    if (o->cursor_key)
        o->cursor_key(buf, cap, rr->set->name, rr->rc->name, rr->lane, p);
    else
        snprintf(buf, cap, "%s/%s/%s/%d", rr->set->name, rr->rc->name, rr->lane, p);
}

/* Where a run starts on p when the table and the group know nothing: a new
 * rule at its start (start = "beginning") or at the end; a lane run as
 * open_rule() decides for local sets (the start only with a base run that
 * is new too). */
static int64_t new_start(const rule_run *rr, int32_t p)
{
    bool from_start = rr->base_run ? rr->base_run->cons[p].knew && rr->rc->from_beginning
                                   : rr->rc->from_beginning;
    const sl_store *st = &rr->set->parts[p];
    return from_start ? sl_store_start_offset(st) : sl_store_end_offset(st);
}

int sl__runner_kafka_open(sl_runner *r, rule_run *rr, sl_error *err)
{
    if (!(rr->ks = get_kset(r, rr->set)))
        return sl_error_set(err, SL_ENOMEM, "rule %s: out of memory", rr->rc->name);
    for (int32_t p = 0; p < rr->nparts; p++) {
        consumer *c = &rr->cons[p];
        char key[KKEY_MAX];
        make_key(r, rr, p, key, sizeof key);
        if (!(c->kkey = strdup(key)))
            return sl_error_set(err, SL_ENOMEM, "rule %s: out of memory", rr->rc->name);
        atomic_init(&c->kput, -1);
        c->kpending = -1;
        int64_t at = -1;
        /* A lane's run made while the router owns p (its other runs are
         * running): it starts like a new lane run of a local set, and its
         * cursor is written at the next commit. Ownership does not change
         * meanwhile (lanes_lock). */
        if (atomic_load(&rr->ks->state[p]) == K_OWNED) {
            at = new_start(rr, p);
            c->knew = true;
        }
        sl__runner_set_pos(c, at);
        atomic_store(&c->committed, at);
    }
    return 0;
}

/* ---- turns ------------------------------------------------------------------ */

void sl__runner_kafka_commit(sl_runner *r, consumer *c, int64_t safe)
{
    kset *ks = c->rule->ks;
    int st = atomic_load(&ks->state[c->part]);
    if (st == K_NONE)
        return; /* a late result: the partition is another router's now */
    atomic_store(&c->committed, safe);
    if (st != K_OWNED || safe == atomic_load(&c->kput) ||
        sl_clock_mono_ns() - atomic_load(&c->kput_ns) < KPUT_NS)
        return; /* committable() writes what moved meanwhile */
    pthread_mutex_lock(&ks->mu);
    if (atomic_load(&ks->state[c->part]) == K_OWNED && safe != atomic_load(&c->kput))
        table_put(r, ks, c, safe);
    pthread_mutex_unlock(&ks->mu);
}

/* Takes c out of the queue (runner lock held). */
static void unqueue(sl_runner *r, consumer *c)
{
    if (!c->queued)
        return;
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

/* Whether a turn of partition p of ks runs (runner lock held). */
static bool part_busy(sl_runner *r, kset *ks, int32_t p)
{
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++)
        if (RUN(r, i)->ks == ks && RUN(r, i)->cons[p].running)
            return true;
    for (roster *ro = r->rosters; ro; ro = ro->next)
        if (ro->ks == ks && ro->shares[p].handle.running)
            return true;
    return false;
}

static void unqueue_part(sl_runner *r, kset *ks, int32_t p)
{
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++)
        if (RUN(r, i)->ks == ks)
            unqueue(r, &RUN(r, i)->cons[p]);
    for (roster *ro = r->rosters; ro; ro = ro->next)
        if (ro->ks == ks)
            unqueue(r, &ro->shares[p].handle);
}

/* Forgets what the runner holds of p (runner lock held, nothing of p
 * running): pools, readers, shared readers' members. Returns the payloads
 * given up. */
static size_t release_part(sl_runner *r, kset *ks, int32_t p)
{
    size_t dropped = 0;
    unqueue_part(r, ks, p);
    for (roster *ro = r->rosters; ro; ro = ro->next)
        if (ro->ks == ks)
            sl__runner_share_reset(r, &ro->shares[p], false);
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (rr->ks != ks)
            continue;
        consumer *c = &rr->cons[p];
        for (size_t k = 0; k < c->npool; k++) {
            sl__runner_free_item(&c->pool[k]);
            atomic_fetch_sub(&c->ctr->retrying, 1);
        }
        dropped += c->npool;
        c->npool = 0;
        if (c->reader)
            sl_store_reader_close(&rr->set->parts[p], c->reader);
        c->reader = NULL;
        c->in = NULL;
        c->join_wait = c->hold = c->again = false;
        c->retry_at_ns = c->rejoin_ns = 0;
        c->backoff_ms = 0;
        c->slow_strikes = 0;
        sl__runner_set_pos(c, atomic_load(&c->committed));
    }
    return dropped;
}

/* Starts p at the positions assign found (runner lock held, nothing of p
 * running, released). */
static void apply_part(sl_runner *r, kset *ks, int32_t p)
{
    ks->deferred[p] = false;
    size_t n = atomic_load(&r->nruns);
    pthread_mutex_lock(&ks->mu);
    for (size_t i = 0; i < n; i++) {
        consumer *c = &RUN(r, i)->cons[p];
        if (RUN(r, i)->ks != ks)
            continue;
        sl__runner_set_pos(c, c->kpending);
        atomic_store(&c->committed, c->kpending);
        atomic_store(&c->kput, c->kfound ? c->kpending : -1); /* else written at the next commit */
        atomic_store(&c->kput_ns, 0);
    }
    atomic_store(&ks->state[p], K_OWNED);
    pthread_mutex_unlock(&ks->mu);
    for (roster *ro = r->rosters; ro; ro = ro->next)
        if (ro->ks == ks)
            sl__runner_share_reset(r, &ro->shares[p], true);
    for (size_t i = 0; i < n; i++)
        if (RUN(r, i)->ks == ks)
            sl__runner_push(r, &RUN(r, i)->cons[p]);
}

void sl__runner_kafka_after_turn(sl_runner *r, consumer *c)
{
    kset *ks = sl__runner_kset_of(c);
    if (!ks)
        return;
    if (r->kwaiters)
        pthread_cond_broadcast(&r->kcond);
    int32_t p = c->part;
    if ((atomic_load(&ks->state[p]) == K_NONE || ks->deferred[p]) && !part_busy(r, ks, p)) {
        /* The last turn of a revoke that stopped waiting for it. */
        size_t dropped = release_part(r, ks, p);
        if (dropped)
            sl_slog(SL_SLOG_INFO, "rules",
                    "set %s: partition %d revoked: %zu payloads waiting for a retry "
                    "given up (the next owner delivers them again from the cursor)",
                    ks->set->name, p, dropped);
        if (ks->deferred[p])
            apply_part(r, ks, p);
    }
}

/* ---- the group's callbacks ----------------------------------------------------- */

void sl_runner_kafka_assign(sl_runner *r, sl_set *set, const int32_t *parts,
                            const int64_t *committed, size_t n)
{
    pthread_mutex_lock(&r->lanes_lock);
    kset *ks = find_kset(r, set);
    int64_t wait_ms = KCURSOR_WAIT_MS;
    size_t from_table = 0, from_group = 0, fresh = 0;
    for (size_t i = 0; ks && i < n; i++) {
        int32_t p = parts[i];
        if (p < 0 || p >= ks->nparts || atomic_load(&ks->state[p]) == K_OWNED)
            continue; /* not the set's, or assigned twice */
        /* Base runs come first (RUN order), so a lane run sees its base
         * run's knew. */
        for (size_t k = 0, nr = atomic_load(&r->nruns); k < nr; k++) {
            rule_run *rr = RUN(r, k);
            if (rr->ks != ks)
                continue;
            consumer *c = &rr->cons[p];
            int64_t at = -1;
            if (atomic_load(&rr->dropped)) { /* never runs again: only out of the way */
                c->kfound = c->knew = false;
                c->kpending = sl_store_end_offset(&set->parts[p]);
                continue;
            }
            int rc = table_get(r, c->kkey, wait_ms, &at);
            if (rc == SL_ETIMEDOUT && wait_ms)
                sl_slog(SL_SLOG_WARN, "rules",
                        "set %s: the cursor table did not catch up within %d ms; rules start "
                        "from what it has (at worst from the group's offsets: duplicates)",
                        set->name, KCURSOR_WAIT_MS);
            /* Once per assignment: caught up with the topic as of the first
             * look-up is caught up with everything the previous owners wrote
             * before they gave the partitions up. */
            wait_ms = 0;
            c->kfound = rc == 0 || rc == SL_ETIMEDOUT;
            c->knew = false;
            if (c->kfound) {
                from_table++;
            } else if (committed && committed[i] >= 0) {
                at = committed[i];
                from_group++;
            } else {
                at = new_start(rr, p);
                c->knew = true;
                fresh++;
            }
            c->kpending = at;
        }
        pthread_mutex_lock(&r->lock);
        if (part_busy(r, ks, p)) {
            ks->deferred[p] = true; /* its end starts it (sl__runner_kafka_after_turn) */
            sl_slog(SL_SLOG_WARN, "rules",
                    "set %s: partition %d assigned while a turn from its previous ownership "
                    "still runs; it starts when that ends",
                    set->name, p);
        } else {
            release_part(r, ks, p); /* nothing, unless a late turn left something */
            apply_part(r, ks, p);
        }
        pthread_mutex_unlock(&r->lock);
    }
    if (ks && n)
        sl_slog(SL_SLOG_INFO, "rules",
                "set %s: %zu partitions assigned; cursors from the table %zu, from the "
                "group's offsets %zu, new %zu",
                set->name, n, from_table, from_group, fresh);
    pthread_mutex_unlock(&r->lanes_lock);
}

/* The slowest live run's committed cursor of p (-1: none). */
static int64_t slowest(sl_runner *r, kset *ks, int32_t p)
{
    int64_t min = -1;
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (rr->ks != ks || atomic_load(&rr->dropped))
            continue;
        int64_t v = atomic_load(&rr->cons[p].committed);
        if (v >= 0 && (min < 0 || v < min))
            min = v;
    }
    return min;
}

/* Puts the cursors of p that moved since last written (ks->mu held). */
static void put_moved(sl_runner *r, kset *ks, int32_t p)
{
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (rr->ks != ks || atomic_load(&rr->dropped))
            continue;
        consumer *c = &rr->cons[p];
        int64_t v = atomic_load(&c->committed);
        if (v >= 0 && v != atomic_load(&c->kput))
            table_put(r, ks, c, v);
    }
}

void sl_runner_kafka_revoke(sl_runner *r, sl_set *set, const int32_t *parts, size_t n, bool lost,
                            int64_t *commit)
{
    for (size_t i = 0; i < n; i++)
        commit[i] = -1;
    kset *ks = find_kset(r, set);
    if (!ks)
        return;
    /* No new turn, no put from a turn. Under lanes_lock so that a lane's
     * runs being made are complete first; not held while turns are waited
     * for (a turn's target.set may add a lane, which takes it). */
    pthread_mutex_lock(&r->lanes_lock);
    pthread_mutex_lock(&ks->mu);
    for (size_t i = 0; i < n; i++)
        if (parts[i] >= 0 && parts[i] < ks->nparts)
            atomic_store(&ks->state[parts[i]], K_DRAIN);
    pthread_mutex_unlock(&ks->mu);
    pthread_mutex_unlock(&r->lanes_lock);
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < n; i++)
        if (parts[i] >= 0 && parts[i] < ks->nparts) {
            ks->deferred[parts[i]] = false;
            unqueue_part(r, ks, parts[i]);
        }
    /* Deliveries in progress finish (their cursors move); a hung target is
     * not waited for beyond KREVOKE_WAIT_NS. */
    int64_t wait_ns =
        kops(r)->revoke_wait_ms > 0 ? kops(r)->revoke_wait_ms * 1000000 : KREVOKE_WAIT_NS;
    int64_t deadline = sl_clock_mono_ns() + wait_ns;
    r->kwaiters++;
    for (;;) {
        bool busy = false;
        for (size_t i = 0; !busy && i < n; i++)
            busy = parts[i] >= 0 && parts[i] < ks->nparts && part_busy(r, ks, parts[i]);
        int64_t now = sl_clock_mono_ns();
        if (!busy || now >= deadline)
            break;
        int64_t at = now + 50000000 < deadline ? now + 50000000 : deadline;
        struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
        pthread_cond_timedwait(&r->kcond, &r->lock, &ts);
    }
    r->kwaiters--;
    size_t dropped = 0, busy = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i];
        if (p < 0 || p >= ks->nparts)
            continue;
        if (part_busy(r, ks, p))
            busy++; /* released when the turn ends (sl__runner_kafka_after_turn) */
        else
            dropped += release_part(r, ks, p);
    }
    pthread_mutex_unlock(&r->lock);
    if (busy)
        sl_slog(SL_SLOG_WARN, "rules",
                "set %s: %zu revoked partitions still had a turn running after %" PRId64
                " ms; what it delivers from now on is delivered again by the next owner",
                set->name, busy, wait_ns / 1000000);
    if (dropped)
        sl_slog(SL_SLOG_INFO, "rules",
                "set %s: %zu partitions revoked: %zu payloads waiting for a retry given up "
                "(the next owner delivers them again from the cursor)",
                set->name, n, dropped);
    /* The cursors, then K_NONE: nothing moves them after this. A lost
     * assignment writes nothing: another router may own them already. */
    pthread_mutex_lock(&ks->mu);
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i];
        if (p < 0 || p >= ks->nparts)
            continue;
        if (!lost)
            put_moved(r, ks, p);
        commit[i] = slowest(r, ks, p);
        atomic_store(&ks->state[p], K_NONE);
    }
    pthread_mutex_unlock(&ks->mu);
    if (!lost)
        table_flush(r, set->name);
}

void sl_runner_kafka_committable(sl_runner *r, sl_set *set, const int32_t *parts, size_t n,
                                 int64_t *commit)
{
    for (size_t i = 0; i < n; i++)
        commit[i] = -1;
    kset *ks = find_kset(r, set); /* not behind an assignment's table lookups */
    if (!ks)
        return;
    pthread_mutex_lock(&ks->mu);
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i];
        if (p < 0 || p >= ks->nparts || atomic_load(&ks->state[p]) != K_OWNED)
            continue;
        put_moved(r, ks, p);
        commit[i] = slowest(r, ks, p);
    }
    pthread_mutex_unlock(&ks->mu);
}

void sl_runner_kafka_group(sl_runner *r, sl_set *set, struct sl_kgroup *g)
{
    pthread_mutex_lock(&r->lanes_lock);
    kset *ks = find_kset(r, set);
    if (ks)
        atomic_store(&ks->group, g);
    pthread_mutex_unlock(&r->lanes_lock);
}

/* At stop (workers joined): the cursors that moved, acknowledged. */
void sl__runner_kafka_stop(sl_runner *r)
{
    kset *all = atomic_load(&r->ksets);
    for (kset *ks = all; ks; ks = ks->next) {
        pthread_mutex_lock(&ks->mu);
        for (int32_t p = 0; p < ks->nparts; p++)
            if (atomic_load(&ks->state[p]) == K_OWNED)
                put_moved(r, ks, p);
        pthread_mutex_unlock(&ks->mu);
    }
    if (all)
        table_flush(r, "rules stopping");
}

/* ---- what GET /v1/rules shows --------------------------------------------------- */

bool sl__runner_kafka_shows(const rule_run *rr, int32_t p)
{
    return !rr->ks || atomic_load(&rr->ks->state[p]) == K_OWNED;
}

/* ,"group":"…","members":N (null when not known) for a rule over a
 * Kafka-backed set; nothing for a local one. */
int sl__runner_kafka_rule_json(sl_runner *r, sl_buf *out, const rule_run *rr)
{
    if (!rr->ks)
        return 0;
    struct sl_kgroup *g = atomic_load(&rr->ks->group);
    const sl_runner_kafka_ops *o = kops(r);
    sl_kgroup_info info = {.members = -1};
    if (g && o->group_info)
        o->group_info(g, &info);
    int rc = sl_buf_printf(out, ",\"group\":");
    if (!rc && info.group)
        rc = sl_json_put_string(out, info.group, strlen(info.group));
    else if (!rc)
        rc = sl_buf_printf(out, "null");
    if (!rc && info.members >= 0)
        rc = sl_buf_printf(out, ",\"members\":%d", info.members);
    else if (!rc)
        rc = sl_buf_printf(out, ",\"members\":null");
    return rc;
}

/* ,"committed":N (the group's offset of p; null when not known) for a rule
 * over a Kafka-backed set. */
int sl__runner_kafka_part_json(sl_runner *r, sl_buf *out, const rule_run *rr, int32_t p)
{
    if (!rr->ks)
        return 0;
    struct sl_kgroup *g = atomic_load(&rr->ks->group);
    const sl_runner_kafka_ops *o = kops(r);
    int64_t v = g && o->group_committed ? o->group_committed(g, p) : -1;
    return v >= 0 ? sl_buf_printf(out, ",\"committed\":%" PRId64, v)
                  : sl_buf_printf(out, ",\"committed\":null");
}
