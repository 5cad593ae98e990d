/*
 * core/bus/kgroup.c — a Kafka-backed set's consumer group: ownership of
 * its partitions and the group's committed offsets (see kgroup.h; the
 * cursor table is kcursors.c).
 *
 * One librdkafka KafkaConsumer per group, served by one thread that polls
 * it every POLL_MS: the rebalance callback, the commit results and the
 * error callback all run there, as do the periodic commits and the group
 * description, so the owned bits change only in that thread (other threads
 * read them as atomics). The consumer never hands out a record: every
 * partition is paused the moment it is assigned (a record that arrives all
 * the same is dropped and counted).
 */
#include "core/bus/kgroup.h"

#include "core/base/clock.h"
#include "core/base/kafka_conf.h"
#include "core/base/slog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_MS 100
#define COMMITTED_WAIT_MS 5000     /* rd_kafka_committed() at an assignment */
#define REVOKE_COMMIT_WAIT_MS 5000 /* the commit of a revocation */
#define DESCRIBE_EVERY_MS 5000     /* how often the group's members are counted */
#define DESCRIBE_WAIT_MS 2000      /* rd_kafka_list_groups() */
#define ERROR_LOG_EVERY_MS 10000   /* one line per kind of error at most this often */
#define HEARTBEAT_MAX_MS 3000      /* librdkafka's default heartbeat.interval.ms */
/* max.poll.interval.ms: the thread polls every POLL_MS; only a callback
 * that takes long (on_revoke waiting for deliveries) comes near it. */
#define MAX_POLL_INTERVAL_MS 300000
#define ERROR_KINDS 8

typedef struct err_kind {
    int code;
    int64_t last_ms;
    uint64_t suppressed;
} err_kind;

struct sl_kgroup {
    rd_kafka_t *rk;
    char *set, *group, *topic;
    int32_t nparts; /* the set's partitions */
    int commit_interval_ms;
    void (*on_assign)(void *, const int32_t *, const int64_t *, size_t);
    void (*on_revoke)(void *, const int32_t *, size_t, bool, int64_t *);
    void (*committable)(void *, const int32_t *, size_t, int64_t *);
    void *ctx;

    pthread_t thread;
    bool started;
    atomic_bool stop;

    atomic_bool *owned;         /* [nparts]; written by the thread only */
    _Atomic int64_t *committed; /* [nparts]; -1: none known */
    atomic_int owned_n;
    atomic_int generation;
    atomic_int members;
    atomic_uint_least64_t rebalances, commits, commit_failures, stray;
    bool describe_off; /* the cluster cannot list groups (the mock) */

    pthread_mutex_t elock; /* the error log's table */
    err_kind kinds[ERROR_KINDS];
};

/* ---- logging ------------------------------------------------------------------ */

/* Whether an error of this code may be logged now (at most once per
 * ERROR_LOG_EVERY_MS per code); *suppressed gets how many were not since. */
static bool err_may_log(sl_kgroup *g, int code, uint64_t *suppressed)
{
    int64_t now = sl_clock_mono_ms();
    bool ok = false;
    pthread_mutex_lock(&g->elock);
    err_kind *k = NULL, *oldest = &g->kinds[0];
    for (int i = 0; i < ERROR_KINDS && !k; i++) {
        if (g->kinds[i].code == code && g->kinds[i].last_ms)
            k = &g->kinds[i];
        else if (g->kinds[i].last_ms < oldest->last_ms)
            oldest = &g->kinds[i];
    }
    if (!k) {
        k = oldest;
        *k = (err_kind){.code = code};
    }
    if (!k->last_ms || now - k->last_ms >= ERROR_LOG_EVERY_MS) {
        *suppressed = k->suppressed;
        k->suppressed = 0;
        k->last_ms = now ? now : 1;
        ok = true;
    } else {
        k->suppressed++;
    }
    pthread_mutex_unlock(&g->elock);
    return ok;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    sl_kgroup *g = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char fe[256] = "";
        rd_kafka_fatal_error(rk, fe, sizeof fe);
        sl_slog(SL_SLOG_ERROR, "kafka",
                "set %s: group %s: fatal consumer error: %s (this router takes no partition of "
                "the set until restarted)",
                g->set, g->group, fe);
        return;
    }
    uint64_t sup = 0;
    if (err_may_log(g, err, &sup))
        sl_slog(SL_SLOG_WARN, "kafka", "set %s: group %s: %s: %s%s", g->set, g->group,
                rd_kafka_err2str(err), reason, sup ? " (and more like it)" : "");
}

/* ---- commits ------------------------------------------------------------------ */

/* The result of a commit (what: "periodic" or "revocation"): the
 * committed offsets are known. */
static void commit_result(sl_kgroup *g, const char *what, rd_kafka_resp_err_t err,
                          const rd_kafka_topic_partition_list_t *offs)
{
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return; /* nothing to commit */
    bool failed = err != 0;
    for (int i = 0; offs && i < offs->cnt; i++) {
        const rd_kafka_topic_partition_t *p = &offs->elems[i];
        if (p->err) {
            failed = true;
            err = p->err;
        } else if (!err && p->partition >= 0 && p->partition < g->nparts && p->offset >= 0) {
            atomic_store(&g->committed[p->partition], p->offset);
        }
    }
    if (!failed) {
        atomic_fetch_add(&g->commits, 1);
        return;
    }
    atomic_fetch_add(&g->commit_failures, 1);
    uint64_t sup = 0;
    bool periodic = what[0] == 'p';
    if (err_may_log(g, (periodic ? -10000 : -20000) - err, &sup))
        sl_slog(SL_SLOG_WARN, "kafka", "set %s: group %s: %s offset commit failed: %s (%s)%s",
                g->set, g->group, what, rd_kafka_err2str(err),
                periodic ? "tried again at the next interval"
                         : "the next owner of those partitions starts from the last periodic "
                           "commit, and the rules from their cursors: duplicates, no loss",
                sup ? "; and more like it" : "");
}

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offs, void *opaque)
{
    (void)rk;
    commit_result(opaque, "periodic", err, offs);
}

/* Given to rd_kafka_commit_queue() only so that librdkafka does not also
 * hand the result to on_commit (it does when no callback is given): the
 * result is read as an event. */
static void no_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *offs, void *opaque)
{
    (void)rk, (void)err, (void)offs, (void)opaque;
}

/* Commits l synchronously, waiting at most REVOKE_COMMIT_WAIT_MS (a
 * stop or a rebalance is not held for longer by a cluster that does not
 * answer: what is not committed is delivered again, never lost). */
static void commit_sync(sl_kgroup *g, const rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(g->rk);
    if (!q) {
        commit_result(g, "revocation", RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE, NULL);
        return;
    }
    rd_kafka_resp_err_t e = rd_kafka_commit_queue(g->rk, l, q, no_commit_cb, NULL);
    if (e) {
        commit_result(g, "revocation", e, NULL);
    } else {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, REVOKE_COMMIT_WAIT_MS);
        if (!ev)
            commit_result(g, "revocation", RD_KAFKA_RESP_ERR__TIMED_OUT, NULL);
        else
            commit_result(g, "revocation", rd_kafka_event_error(ev),
                          rd_kafka_event_topic_partition_list(ev));
        if (ev)
            rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);
}

/* The list of what to commit: parts[i] at commit[i] when commit[i] >= 0,
 * the partition is ours (owned_ok: its owned bit is set, or it is being
 * revoked) and, with only_moved, differs from what is known committed.
 * NULL when empty or out of memory. */
static rd_kafka_topic_partition_list_t *commit_list(sl_kgroup *g, const int32_t *parts,
                                                    const int64_t *commit, size_t n,
                                                    bool check_owned, bool only_moved)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i];
        if (commit[i] < 0 || p < 0 || p >= g->nparts)
            continue;
        /* The mock accepts a commit from any member for any partition, and
         * a real cluster of the same generation may too: never commit what
         * is not ours. */
        if (check_owned && !atomic_load(&g->owned[p]))
            continue;
        if (only_moved && atomic_load(&g->committed[p]) == commit[i])
            continue;
        if (!l && !(l = rd_kafka_topic_partition_list_new((int)n)))
            return NULL;
        rd_kafka_topic_partition_list_add(l, g->topic, p)->offset = commit[i];
    }
    return l;
}

/* The owned partitions, ascending, into parts (room for nparts). */
static size_t owned_list(sl_kgroup *g, int32_t *parts)
{
    size_t n = 0;
    for (int32_t p = 0; p < g->nparts; p++)
        if (atomic_load(&g->owned[p]))
            parts[n++] = p;
    return n;
}

/* Every commit_interval_ms: asks committable() about the owned partitions
 * and commits asynchronously those that moved. */
static void periodic_commit(sl_kgroup *g)
{
    if (!g->committable)
        return;
    int32_t *parts = malloc((size_t)g->nparts * sizeof *parts);
    int64_t *commit = malloc((size_t)g->nparts * sizeof *commit);
    size_t n = parts && commit ? owned_list(g, parts) : 0;
    if (n) {
        for (size_t i = 0; i < n; i++)
            commit[i] = -1;
        g->committable(g->ctx, parts, n, commit);
        rd_kafka_topic_partition_list_t *l = commit_list(g, parts, commit, n, true, true);
        if (l) {
            rd_kafka_resp_err_t e = rd_kafka_commit(g->rk, l, 1);
            if (e)
                commit_result(g, "periodic", e, NULL);
            rd_kafka_topic_partition_list_destroy(l);
        }
    }
    free(parts);
    free(commit);
}

/* ---- the group ---------------------------------------------------------------- */

/* The group's generation: librdkafka has no getter for it, but its
 * serialized group metadata ("CGMDv2:", then the generation as a native
 * int32) carries it. Anything else reads as -1 (not known). */
static int32_t read_generation(rd_kafka_t *rk)
{
    rd_kafka_consumer_group_metadata_t *md = rd_kafka_consumer_group_metadata(rk);
    if (!md)
        return -1;
    void *buf = NULL;
    size_t sz = 0;
    int32_t gen = -1;
    rd_kafka_error_t *e = rd_kafka_consumer_group_metadata_write(md, &buf, &sz);
    if (e)
        rd_kafka_error_destroy(e);
    else if (buf && sz >= 11 && memcmp(buf, "CGMDv2:", 7) == 0)
        memcpy(&gen, (char *)buf + 7, sizeof gen);
    if (buf)
        rd_kafka_mem_free(rk, buf);
    rd_kafka_consumer_group_metadata_destroy(md);
    return gen;
}

/* Counts the group's members (DescribeGroups through rd_kafka_list_groups);
 * a cluster that cannot (librdkafka's mock) is not asked again. */
static void describe_group(sl_kgroup *g)
{
    if (g->describe_off)
        return;
    const struct rd_kafka_group_list *gl = NULL;
    rd_kafka_resp_err_t e = rd_kafka_list_groups(g->rk, g->group, &gl, DESCRIBE_WAIT_MS);
    if (e == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE) {
        g->describe_off = true;
        sl_slog(SL_SLOG_DEBUG, "kafka",
                "set %s: group %s: the cluster cannot describe groups: members not known", g->set,
                g->group);
    } else if (!e && gl) {
        for (int i = 0; i < gl->group_cnt; i++)
            if (!gl->groups[i].err && strcmp(gl->groups[i].group, g->group) == 0)
                atomic_store(&g->members, gl->groups[i].member_cnt);
    }
    if (gl)
        rd_kafka_group_list_destroy(gl);
}

/* The set's partitions among list and their committed offsets, into
 * parts/committed (room for list->cnt). The offsets are fetched when
 * fetched is not NULL (*fetched: whether that worked), else all -1. */
static size_t set_parts(sl_kgroup *g, const rd_kafka_topic_partition_list_t *list, int32_t *parts,
                        int64_t *committed, bool *fetched)
{
    rd_kafka_topic_partition_list_t *q = NULL;
    if (fetched && (q = rd_kafka_topic_partition_list_copy(list))) {
        rd_kafka_resp_err_t e = rd_kafka_committed(g->rk, q, COMMITTED_WAIT_MS);
        if (e) {
            sl_slog(SL_SLOG_WARN, "kafka",
                    "set %s: group %s: fetching the committed offsets: %s (the runs start "
                    "from their cursors)",
                    g->set, g->group, rd_kafka_err2str(e));
            rd_kafka_topic_partition_list_destroy(q);
            q = NULL;
        }
        *fetched = q != NULL;
    }
    size_t n = 0;
    for (int i = 0; i < list->cnt; i++) {
        int32_t p = list->elems[i].partition;
        if (strcmp(list->elems[i].topic, g->topic) != 0 || p < 0 || p >= g->nparts)
            continue; /* more partitions than the set has: not the set's */
        int64_t c = -1;
        const rd_kafka_topic_partition_t *f =
            q ? rd_kafka_topic_partition_list_find(q, g->topic, p) : NULL;
        if (f && !f->err && f->offset >= 0)
            c = f->offset;
        parts[n] = p;
        committed[n] = c;
        n++;
    }
    if (q)
        rd_kafka_topic_partition_list_destroy(q);
    return n;
}

static void do_assign(sl_kgroup *g, rd_kafka_topic_partition_list_t *list)
{
    /* Paused at once: the partition stores read the records, not this
     * consumer (pausing before the fetcher starts means none is fetched). */
    rd_kafka_resp_err_t e = rd_kafka_assign(g->rk, list);
    if (!e)
        e = rd_kafka_pause_partitions(g->rk, list);
    if (e)
        sl_slog(SL_SLOG_WARN, "kafka", "set %s: group %s: assign: %s", g->set, g->group,
                rd_kafka_err2str(e));
    size_t cap = (size_t)list->cnt + 1;
    int32_t *parts = malloc(cap * sizeof *parts);
    int64_t *committed = malloc(cap * sizeof *committed);
    if (!parts || !committed) {
        /* Without memory this router cannot take them: owning none of them
         * is safe (they are not read), and the next rebalance retries. */
        sl_slog(SL_SLOG_ERROR, "kafka", "set %s: group %s: out of memory at an assignment", g->set,
                g->group);
        free(parts);
        free(committed);
        return;
    }
    bool fetched = false;
    size_t n = set_parts(g, list, parts, committed, &fetched);
    for (size_t i = 0; i < n; i++) {
        if (committed[i] >= 0 || fetched)
            atomic_store(&g->committed[parts[i]], committed[i]);
        if (!atomic_exchange(&g->owned[parts[i]], true))
            atomic_fetch_add(&g->owned_n, 1);
    }
    atomic_store(&g->generation, read_generation(g->rk));
    atomic_fetch_add(&g->rebalances, 1);
    sl_slog(SL_SLOG_INFO, "kafka",
            "set %s: group %s assigned %zu partition(s) of the set (generation %d)", g->set,
            g->group, n, (int)atomic_load(&g->generation));
    if (g->on_assign)
        g->on_assign(g->ctx, parts, committed, n);
    free(parts);
    free(committed);
}

/* A revocation (lost: the assignment was lost, or the rebalance failed). */
static void do_revoke(sl_kgroup *g, const rd_kafka_topic_partition_list_t *list, bool lost)
{
    size_t cap = (size_t)(list ? list->cnt : g->nparts) + 1;
    int32_t *parts = malloc(cap * sizeof *parts);
    int64_t *commit = malloc(cap * sizeof *commit);
    size_t n = 0;
    if (parts && commit) {
        if (list)
            n = set_parts(g, list, parts, commit, NULL);
        else
            n = owned_list(g, parts);
    } else {
        sl_slog(SL_SLOG_ERROR, "kafka", "set %s: group %s: out of memory at a revocation", g->set,
                g->group);
    }
    /* Not ours any more from now on, even before the callee stopped. */
    for (size_t i = 0; i < n; i++)
        if (atomic_exchange(&g->owned[parts[i]], false))
            atomic_fetch_sub(&g->owned_n, 1);
    if (!parts || !commit) { /* nothing can be told: own nothing */
        for (int32_t p = 0; p < g->nparts; p++)
            if (atomic_exchange(&g->owned[p], false))
                atomic_fetch_sub(&g->owned_n, 1);
    }
    for (size_t i = 0; i < n; i++)
        commit[i] = -1;
    if (n && g->on_revoke)
        g->on_revoke(g->ctx, parts, n, lost, commit);
    if (lost && n)
        sl_slog(SL_SLOG_WARN, "kafka",
                "set %s: group %s: the assignment of %zu partition(s) was lost (its session "
                "timed out?): nothing committed, their next owner starts from the last commit",
                g->set, g->group, n);
    if (!lost && n) {
        /* Synchronous: the rebalance goes on once it is on the cluster.
         * (Kafka accepts a commit of the current generation while the group
         * prepares its rebalance; librdkafka's mock refuses every commit
         * then, REBALANCE_IN_PROGRESS: on it only a leaving member's
         * revocation commits.) */
        rd_kafka_topic_partition_list_t *l = commit_list(g, parts, commit, n, false, false);
        if (l) {
            commit_sync(g, l);
            rd_kafka_topic_partition_list_destroy(l);
        }
    }
    free(parts);
    free(commit);
    rd_kafka_assign(g->rk, NULL);
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    sl_kgroup *g = opaque;
    switch (err) {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        do_assign(g, parts);
        break;
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        do_revoke(g, parts, rd_kafka_assignment_lost(rk) != 0);
        break;
    default:
        /* librdkafka says to unassign: what was owned is treated as lost
         * (another router may have it already). */
        sl_slog(SL_SLOG_WARN, "kafka", "set %s: group %s: rebalance failed: %s", g->set, g->group,
                rd_kafka_err2str(err));
        do_revoke(g, NULL, true);
        break;
    }
}

/* ---- the thread --------------------------------------------------------------- */

static void *group_thread(void *arg)
{
    sl_kgroup *g = arg;
    int64_t next_commit = sl_clock_mono_ms() + g->commit_interval_ms;
    int64_t next_describe = sl_clock_mono_ms() + DESCRIBE_EVERY_MS;
    while (!atomic_load(&g->stop)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(g->rk, POLL_MS);
        if (m) {
            if (m->err) {
                uint64_t sup = 0;
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && err_may_log(g, m->err, &sup))
                    sl_slog(SL_SLOG_WARN, "kafka", "set %s: group %s: %s%s", g->set, g->group,
                            rd_kafka_message_errstr(m), sup ? " (and more like it)" : "");
            } else {
                atomic_fetch_add(&g->stray, 1); /* paused too late: dropped, never used */
            }
            rd_kafka_message_destroy(m);
        }
        int64_t now = sl_clock_mono_ms();
        if (now >= next_commit) {
            periodic_commit(g);
            next_commit = now + g->commit_interval_ms;
        }
        if (now >= next_describe) {
            describe_group(g);
            next_describe = sl_clock_mono_ms() + DESCRIBE_EVERY_MS;
        }
    }
    /* Leaving: the revocation runs in here (on_revoke, then the commit). */
    rd_kafka_resp_err_t e = rd_kafka_consumer_close(g->rk);
    if (e)
        sl_slog(SL_SLOG_WARN, "kafka", "set %s: group %s: leaving: %s", g->set, g->group,
                rd_kafka_err2str(e));
    for (int32_t p = 0; p < g->nparts; p++)
        atomic_store(&g->owned[p], false);
    atomic_store(&g->owned_n, 0);
    return NULL;
}

/* ---- the API ------------------------------------------------------------------ */

static void group_free(sl_kgroup *g)
{
    if (g->rk)
        rd_kafka_destroy(g->rk);
    pthread_mutex_destroy(&g->elock);
    free(g->owned);
    free(g->committed);
    free(g->set);
    free(g->group);
    free(g->topic);
    free(g);
}

/* The consumer's configuration on top of the cluster's. */
static rd_kafka_conf_t *group_conf(sl_kgroup *g, const sl_kafka_cluster *cl, sl_error *err)
{
    char suffix[300];
    snprintf(suffix, sizeof suffix, "group-%s", g->set);
    rd_kafka_conf_t *conf = sl_kafka_cluster_conf(cl, suffix, err);
    if (!conf)
        return NULL;
    int session = cl->session_timeout_ms > 0 ? cl->session_timeout_ms : 10000;
    int heartbeat = session / 3 < HEARTBEAT_MAX_MS ? session / 3 : HEARTBEAT_MAX_MS;
    int maxpoll = session > MAX_POLL_INTERVAL_MS ? session : MAX_POLL_INTERVAL_MS;
    if (heartbeat < 1)
        heartbeat = 1;
    /* Eager assignors only: cooperative-sticky aborts a consumer closed
     * before its first assignment on librdkafka < 2.3 (#4312), and an eager
     * revocation is a clean barrier for the rules' cursors anyway. */
    if (sl_kafka_conf_set(conf, "group.id", g->group, err) ||
        sl_kafka_conf_set(conf, "enable.auto.commit", "false", err) ||
        sl_kafka_conf_set(conf, "enable.auto.offset.store", "false", err) ||
        sl_kafka_conf_set(conf, "partition.assignment.strategy", "range,roundrobin", err) ||
        sl_kafka_conf_num(conf, "session.timeout.ms", session, err) ||
        sl_kafka_conf_num(conf, "heartbeat.interval.ms", heartbeat, err) ||
        sl_kafka_conf_num(conf, "max.poll.interval.ms", maxpoll, err) ||
        /* Nothing is fetched for the consumer: keep its buffers small. */
        sl_kafka_conf_set(conf, "queued.max.messages.kbytes", "1024", err)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, g);
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    rd_kafka_conf_set_offset_commit_cb(conf, on_commit);
    rd_kafka_conf_set_error_cb(conf, on_error);
    return conf;
}

int sl_kgroup_start(const sl_kgroup_options *o, sl_kgroup **out, sl_error *err)
{
    *out = NULL;
    if (!o || !o->cluster || !o->group || !o->group[0] || !o->topic || !o->topic[0] ||
        o->partitions < 1)
        return sl_error_set(err, SL_EINVAL, "kafka group: a group, a topic and partitions needed");
    sl_kgroup *g = calloc(1, sizeof *g);
    if (!g)
        return sl_error_set(err, SL_ENOMEM, "out of memory for group %s", o->group);
    pthread_mutex_init(&g->elock, NULL);
    g->set = strdup(o->set ? o->set : o->topic);
    g->group = strdup(o->group);
    g->topic = strdup(o->topic);
    g->nparts = o->partitions;
    g->owned = calloc((size_t)o->partitions, sizeof *g->owned);
    g->committed = calloc((size_t)o->partitions, sizeof *g->committed);
    if (!g->set || !g->group || !g->topic || !g->owned || !g->committed) {
        group_free(g);
        return sl_error_set(err, SL_ENOMEM, "out of memory for group %s", o->group);
    }
    for (int32_t p = 0; p < g->nparts; p++) {
        atomic_init(&g->owned[p], false);
        atomic_init(&g->committed[p], -1);
    }
    g->commit_interval_ms = o->commit_interval_ms > 0 ? o->commit_interval_ms : 1000;
    g->on_assign = o->on_assign;
    g->on_revoke = o->on_revoke;
    g->committable = o->committable;
    g->ctx = o->ctx;
    atomic_init(&g->generation, -1);
    atomic_init(&g->members, -1);
    rd_kafka_conf_t *conf = group_conf(g, o->cluster, err);
    if (!conf) {
        group_free(g);
        return err && err->code ? err->code : SL_EINVAL;
    }
    g->rk = sl_kafka_new(RD_KAFKA_CONSUMER, conf, o->cluster->props, o->cluster->nprops,
                         "kafka group", err);
    if (!g->rk) {
        group_free(g);
        return SL_EINVAL;
    }
    rd_kafka_poll_set_consumer(g->rk);
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR__INVALID_ARG;
    if (sub) {
        rd_kafka_topic_partition_list_add(sub, g->topic, RD_KAFKA_PARTITION_UA);
        e = rd_kafka_subscribe(g->rk, sub);
        rd_kafka_topic_partition_list_destroy(sub);
    }
    if (e) {
        int code = sl_error_set(err, SL_EIO, "set %s: group %s: subscribe to %s: %s", g->set,
                                g->group, g->topic, rd_kafka_err2str(e));
        rd_kafka_consumer_close(g->rk);
        group_free(g);
        return code;
    }
    if (pthread_create(&g->thread, NULL, group_thread, g)) {
        int code = sl_error_set(err, SL_ENOMEM, "set %s: group %s: cannot start its thread", g->set,
                                g->group);
        rd_kafka_consumer_close(g->rk);
        group_free(g);
        return code;
    }
    g->started = true;
    *out = g;
    return 0;
}

void sl_kgroup_stop(sl_kgroup *g)
{
    if (!g)
        return;
    atomic_store(&g->stop, true);
    if (g->started)
        pthread_join(g->thread, NULL);
    group_free(g);
}

bool sl_kgroup_owns(const sl_kgroup *g, int32_t p)
{
    return g && p >= 0 && p < g->nparts && atomic_load(&g->owned[p]);
}

void sl_kgroup_info_get(sl_kgroup *g, sl_kgroup_info *out)
{
    *out = (sl_kgroup_info){
        .group = g->group,
        .generation = atomic_load(&g->generation),
        .members = atomic_load(&g->members),
        .owned = atomic_load(&g->owned_n),
        .rebalances = atomic_load(&g->rebalances),
        .commits = atomic_load(&g->commits),
        .commit_failures = atomic_load(&g->commit_failures),
        .stray_records = atomic_load(&g->stray),
    };
}

int64_t sl_kgroup_committed(sl_kgroup *g, int32_t p)
{
    if (!g || p < 0 || p >= g->nparts)
        return -1;
    return atomic_load(&g->committed[p]);
}
