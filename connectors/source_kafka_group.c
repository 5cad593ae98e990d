/*
 * connectors/source_kafka_group.c — source.kafka: the librdkafka consumer
 * and its membership of the consumer group (docs/sources.md).
 *
 * Its configuration (sluice's settings, then the properties, which win;
 * `sluice check` of both), librdkafka's callbacks (logs, errors, commits,
 * rebalances), static membership (group.instance.id kept in the state dir),
 * and the group state the host reports: joining (no partition assigned
 * since the start or since a revocation left none), running, failing (every
 * broker down, or a fatal error). Rebalance callbacks run in the consumer
 * thread (source_kafka.c), which defers a revocation until what was read
 * before it is flushed and committed, then calls
 * sl__source_kafka_unassign().
 */
#include "connectors/source_kafka_internal.h"

#include "core/base/kafka_conf.h"
#include "core/base/clock.h"
#include "core/base/slog.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOIN_GRACE_MS 10000        /* joining longer than this is unhealthy */
#define SESSION_TIMEOUT_MS "10000" /* sluice's default session.timeout.ms (librdkafka: 45000) */
#define INSTANCE_ID_FILE "group-instance-id"

/* librdkafka before 2.3.0 (issue #4312, fixed by its PR #4381) aborts the
 * process (`Assertion 'assignor_state' failed` in
 * rd_kafka_sticky_assignor_state_destroy) when a consumer is destroyed after
 * its group chose the cooperative-sticky assignor and before its first
 * assignment: the group's assignor is set when the JoinGroup answer arrives,
 * the sticky assignor's state only when a SyncGroup answer does, and
 * destroying the group handle destroyed that state without checking it.
 * The window is not short: it lasts as long as the group rebalances (a
 * member slow to rejoin holds it for up to max.poll.interval.ms; SyncGroup
 * errors make the member join again and again), and in 2.0.2 a JoinGroup
 * answer arriving while the consumer closes is still applied. No wait at
 * close can therefore make a stop or reload safe, so with such a librdkafka
 * sluice uses the eager assignors (range, roundrobin), which keep no state
 * and are immune; cooperative-sticky is used from 2.3.0 on. A
 * partition.assignment.strategy in properties still wins: with
 * cooperative-sticky on an old librdkafka, closing first waits (at most
 * SETTLE_WAIT_MS) for the first assignment, which covers the common case of
 * a stop right after the start (docs/sources.md). */
#define COOP_SAFE_VERSION 0x020300ff

/* ---- configuration ------------------------------------------------------------ */

/* Whether the librdkafka in use (at run time, not the headers') can close
 * a cooperative-sticky consumer at any moment (above). */
static bool coop_safe(void)
{
    return rd_kafka_version() >= COOP_SAFE_VERSION;
}

/* Properties sluice must own for its delivery guarantee. */
static const char *const k_reserved[] = {"enable.auto.commit", "enable.auto.offset.store", NULL};

/* Applies one "name=value" property line. Returns 0, or SL_EINVAL with err. */
static int apply_property(rd_kafka_conf_t *conf, const char *line, sl_error *err)
{
    return sl_kafka_conf_line(conf, line, k_reserved,
                              "offsets are committed only after the Databus acknowledged the "
                              "events",
                              err);
}

/* Fills conf: sluice's settings, then the properties, which win.
 * instance_id: the default group.instance.id (NULL: none). */
static int apply_config(rd_kafka_conf_t *conf, bool from_beginning, const sl_source_kafka_conf *cfg,
                        const char *group, const char *instance_id, sl_error *err)
{
    int rc = sl_kafka_conf_set(conf, "enable.auto.commit", "false", err);
    /* A member that died without leaving (kill -9, a lost host) holds its
     * partitions until its session times out: librdkafka's 45 s default
     * is long for a bridge (docs/sources.md weighs it). */
    if (!rc)
        rc = sl_kafka_conf_set(conf, "session.timeout.ms", SESSION_TIMEOUT_MS, err);
    /* Static membership: a restarted sluice is the same member, which
     * the coordinator gives its partitions back at once instead of waiting
     * for the old session. group.instance.id = "" in properties turns it off. */
    if (!rc && instance_id && instance_id[0] &&
        !sl_kafka_property(cfg->properties, cfg->nproperties, "group.instance.id"))
        rc = sl_kafka_conf_set(conf, "group.instance.id", instance_id, err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "enable.auto.offset.store", "false", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "partition.assignment.strategy",
                               coop_safe() ? "cooperative-sticky" : "range,roundrobin", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "auto.offset.reset", from_beginning ? "earliest" : "latest",
                               err);
    /* librdkafka's default (100000) makes its fetcher pause whenever the
     * one consumer queue all partitions feed holds that many records: a
     * source catching up on a backlog then stalls for 100 ms at a time
     * (measured: 0.4× kcat, against 0.95× with this). Memory stays bounded
     * by queued.max.messages.kbytes. */
    if (!rc)
        rc = sl_kafka_conf_set(conf, "queued.min.messages", "1000000", err);
    if (!rc && group)
        rc = sl_kafka_conf_set(conf, "group.id", group, err);
    if (!rc && cfg->brokers)
        rc = sl_kafka_conf_set(conf, "bootstrap.servers", cfg->brokers, err);
    for (size_t i = 0; !rc && i < cfg->nproperties; i++) {
        char n[256];
        const char *v = sl_kafka_property_name(cfg->properties[i], n, sizeof n, NULL);
        if (v && !v[0] && strcmp(n, "group.instance.id") == 0)
            continue; /* no static membership */
        rc = apply_property(conf, cfg->properties[i], err);
    }
    return rc;
}

static bool topic_name_ok(const char *s)
{
    size_t len = strlen(s);
    if (!len || len > 249 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

/* ---- callbacks (consumer thread, or librdkafka's for logs) --------------------- */

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    kafka_source *k = rd_kafka_opaque(rk);
    if (k && level <= 4) /* warnings and worse */
        k->host->log(k->host->ctx, "source.kafka: %s: %s", fac, buf);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    kafka_source *k = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char fe[200] = "";
        rd_kafka_fatal_error(rk, fe, sizeof fe);
        pthread_mutex_lock(&k->mlock);
        snprintf(k->fatal_msg, sizeof k->fatal_msg, "fatal consumer error: %s", fe);
        k->fail_wall_ms = sl_clock_now_ms();
        pthread_mutex_unlock(&k->mlock);
        atomic_store(&k->fatal, true);
    } else if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        pthread_mutex_lock(&k->mlock);
        snprintf(k->down_msg, sizeof k->down_msg, "all brokers are down (%s)", reason);
        if (!atomic_load(&k->brokers_down))
            k->fail_wall_ms = sl_clock_now_ms();
        pthread_mutex_unlock(&k->mlock);
        atomic_store(&k->brokers_down, true);
    }
    k->host->log(k->host->ctx, "source.kafka: %s: %s", rd_kafka_err2str(err), reason);
}

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    (void)rk, (void)offsets;
    kafka_source *k = opaque;
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        atomic_fetch_add(&k->commit_failed, 1);
        k->host->log(k->host->ctx,
                     "source.kafka: offset commit failed: %s (the records may be delivered "
                     "again)",
                     rd_kafka_err2str(err));
    }
}

/* ---- the group state ------------------------------------------------------------ */

static const char *src_name(const kafka_source *k)
{
    return k->host->name ? k->host->name : "kafka";
}

/* Enters (joining) or leaves the joining state, with one log line per
 * change: the wait for an assignment is the one a killed predecessor can
 * make long, and it should not pass in silence. nparts: the assignment. */
void sl__source_kafka_set_joining(kafka_source *k, bool joining, int nparts)
{
    int64_t now = sl_clock_mono_ms();
    pthread_mutex_lock(&k->mlock);
    bool changed = k->joining != joining;
    int64_t waited = now - k->state_mono_ms;
    if (changed) {
        k->joining = joining;
        k->join_warned = false;
        k->state_mono_ms = now;
        k->state_wall_ms = sl_clock_now_ms();
    }
    pthread_mutex_unlock(&k->mlock);
    if (!changed)
        return;
    if (joining)
        sl_slog(SL_SLOG_INFO, "sources",
                "source %s: joining consumer group %s: no partition is assigned until the "
                "group's rebalance ends%s%s",
                src_name(k), k->group, k->instance_id[0] ? "; group.instance.id " : "",
                k->instance_id);
    else
        sl_slog(SL_SLOG_INFO, "sources",
                "source %s: consumer group %s assigned %d partition(s) after %.1f s of joining",
                src_name(k), k->group, nparts, (double)waited / 1000.0);
}

/* Why the source is joining (caller holds mlock), into why[0..cap). */
static void join_reason(const kafka_source *k, int64_t now, char *why, size_t cap)
{
    snprintf(why, cap,
             "joining consumer group %s for %lld s: no partition assigned yet; a member that "
             "did not leave the group (killed, or its host lost) holds its partitions until "
             "its session times out (session.timeout.ms = %d)",
             k->group, (long long)((now - k->state_mono_ms) / 1000), k->session_ms);
}

/* Called from the consumer loop: one warning when joining outlasts the
 * grace, the moment health() turns false. */
void sl__source_kafka_join_check(kafka_source *k)
{
    int64_t now = sl_clock_mono_ms();
    char why[400];
    pthread_mutex_lock(&k->mlock);
    bool warn = k->joining && !k->join_warned && now - k->state_mono_ms >= JOIN_GRACE_MS;
    if (warn) {
        k->join_warned = true;
        join_reason(k, now, why, sizeof why);
    }
    pthread_mutex_unlock(&k->mlock);
    if (warn)
        sl_slog(SL_SLOG_WARN, "sources", "source %s: still %s", src_name(k), why);
}

/* Keeps k->assigned (what metrics() reports) in step. */
static void assignment_update(kafka_source *k, const rd_kafka_topic_partition_list_t *parts,
                              bool add)
{
    pthread_mutex_lock(&k->alock);
    if (!parts) {
        rd_kafka_topic_partition_list_destroy(k->assigned);
        k->assigned = rd_kafka_topic_partition_list_new(0);
    } else {
        for (int i = 0; i < parts->cnt; i++) {
            const rd_kafka_topic_partition_t *p = &parts->elems[i];
            if (add) {
                if (!rd_kafka_topic_partition_list_find(k->assigned, p->topic, p->partition))
                    rd_kafka_topic_partition_list_add(k->assigned, p->topic, p->partition);
            } else {
                rd_kafka_topic_partition_list_del(k->assigned, p->topic, p->partition);
            }
        }
    }
    k->lag_at_ms = 0; /* recompute */
    pthread_mutex_unlock(&k->alock);
}

static void log_rk_error(kafka_source *k, const char *what, rd_kafka_error_t *e)
{
    if (!e)
        return;
    k->host->log(k->host->ctx, "source.kafka: %s: %s", what, rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
}

/* Applies a revocation: the partitions leave the assignment. */
void sl__source_kafka_unassign(kafka_source *k, rd_kafka_topic_partition_list_t *parts, bool coop)
{
    if (coop)
        log_rk_error(k, "incremental unassign", rd_kafka_incremental_unassign(k->rk, parts));
    else
        rd_kafka_assign(k->rk, NULL);
    assignment_update(k, coop ? parts : NULL, false);
    pthread_mutex_lock(&k->alock);
    bool none = k->assigned->cnt == 0;
    pthread_mutex_unlock(&k->alock);
    if (none && !atomic_load(&k->stop))
        sl__source_kafka_set_joining(k, true, 0);
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    kafka_source *k = opaque;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    switch (err) {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        if (coop)
            log_rk_error(k, "incremental assign", rd_kafka_incremental_assign(rk, parts));
        else
            rd_kafka_assign(rk, parts);
        assignment_update(k, parts, true);
        atomic_store(&k->assigned_once, true);
        pthread_mutex_lock(&k->alock);
        int nparts = k->assigned->cnt;
        pthread_mutex_unlock(&k->alock);
        sl__source_kafka_set_joining(k, false,
                                     nparts); /* an empty assignment too: the group is joined */
        break;
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        if (k->in_loop) {
            /* Records of these partitions may have been polled already (in
             * the batch this call is serving): the loop emits them, flushes,
             * commits, then unassigns. rd_kafka_yield() ends the batch now. */
            if (!k->revoking)
                k->revoking = rd_kafka_topic_partition_list_new(parts->cnt);
            for (int i = 0; i < parts->cnt; i++)
                if (!rd_kafka_topic_partition_list_find(k->revoking, parts->elems[i].topic,
                                                        parts->elems[i].partition))
                    rd_kafka_topic_partition_list_add(k->revoking, parts->elems[i].topic,
                                                      parts->elems[i].partition);
            k->revoke_coop = coop;
            rd_kafka_yield(rk);
        } else {
            sl__source_kafka_unassign(k, parts,
                                      coop); /* closing: everything flushed is committed */
        }
        break;
    default:
        k->host->log(k->host->ctx, "source.kafka: rebalance failed: %s", rd_kafka_err2str(err));
        rd_kafka_assign(rk, NULL);
        assignment_update(k, NULL, false);
        if (!atomic_load(&k->stop))
            sl__source_kafka_set_joining(k, true, 0);
        break;
    }
}

/* ---- static membership ---------------------------------------------------------- */

/* The source's group.instance.id into k->instance_id: the one kept in
 * STATE_DIR/group-instance-id, else a new "sluice-NAME-UUIDv7" written
 * there (tmp, fsync, rename). So it is stable for one data dir and differs
 * between data dirs (two servers of one group), as static membership
 * wants. Without a state dir, or when the file cannot be written, there is
 * none (logged): the source works without static membership. */
static void instance_id_load(kafka_source *k)
{
    k->instance_id[0] = '\0';
    const char *dir = k->host->state_dir;
    if (!dir || !dir[0])
        return;
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/" INSTANCE_ID_FILE, dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(path, "re");
    if (f) {
        char line[sizeof k->instance_id];
        bool ok = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        line[ok ? strcspn(line, "\r\n") : 0] = '\0';
        bool printable = ok && line[0];
        for (const char *p = line; printable && *p; p++)
            printable = *p > ' ' && *p < 0x7f;
        if (printable) {
            snprintf(k->instance_id, sizeof k->instance_id, "%s", line);
            return;
        }
        k->host->log(k->host->ctx, "source.kafka: %s holds no usable id: making a new one", path);
    }
    char uuid[37], id[sizeof k->instance_id];
    sl_event_uuid7(sl_clock_now_ms(), uuid);
    snprintf(id, sizeof id, "sluice-%.*s-%s", (int)(sizeof id - 45), src_name(k), uuid);
    for (char *p = id; *p; p++)
        if (*p <= ' ' || *p >= 0x7f)
            *p = '_';
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t len = strlen(id);
    bool ok =
        fd >= 0 && write(fd, id, len) == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok || rename(tmp, path)) {
        k->host->log(k->host->ctx, "source.kafka: cannot write %s (%s): no static group membership",
                     path, strerror(errno));
        unlink(tmp);
        return;
    }
    snprintf(k->instance_id, sizeof k->instance_id, "%s", id);
}

static rd_kafka_t *make_consumer(kafka_source *k, sl_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
        return NULL;
    }
    char id[300];
    snprintf(id, sizeof id, "sluice-source-%s", k->host->name ? k->host->name : "kafka");
    sl_error e = {0};
    if (sl_kafka_conf_set(conf, "client.id", id, &e) ||
        apply_config(conf, k->cfg->from_beginning, k->conf, k->group, k->instance_id, &e)) {
        sl_error_set(err, e.code, "source.kafka: %s", e.msg);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    if (!coop_safe()) {
        char strat[256];
        size_t sz = sizeof strat;
        if (rd_kafka_conf_get(conf, "partition.assignment.strategy", strat, &sz) ==
                RD_KAFKA_CONF_OK &&
            strstr(strat, "cooperative-sticky")) {
            k->coop_risk = true;
            k->host->log(k->host->ctx,
                         "source.kafka: librdkafka %s aborts when a cooperative-sticky "
                         "consumer closes before its first assignment (fixed in 2.3.0): a "
                         "stop or reload waits up to %d s for it; an eager "
                         "partition.assignment.strategy avoids this",
                         rd_kafka_version_str(), SETTLE_WAIT_MS / 1000);
        }
    }
    char v[256];
    size_t vsz = sizeof v;
    k->session_ms =
        rd_kafka_conf_get(conf, "session.timeout.ms", v, &vsz) == RD_KAFKA_CONF_OK ? atoi(v) : 0;
    vsz = sizeof v;
    if (rd_kafka_conf_get(conf, "group.instance.id", v, &vsz) == RD_KAFKA_CONF_OK)
        snprintf(k->instance_id, sizeof k->instance_id, "%s", v);
    else
        k->instance_id[0] = '\0';
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    rd_kafka_conf_set_offset_commit_cb(conf, on_commit);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    return sl_kafka_new(RD_KAFKA_CONSUMER, conf, k->conf->properties, k->conf->nproperties,
                        "source.kafka", err);
}

rd_kafka_t *sl__source_kafka_consumer(kafka_source *k, sl_error *err)
{
    instance_id_load(k);
    return make_consumer(k, err);
}

/* ---- state and health ----------------------------------------------------------- */

const char *sl_source_kafka_state(void *impl, int64_t *since_ms, char *why, size_t cap)
{
    kafka_source *k = impl;
    bool fatal = atomic_load(&k->fatal), down = atomic_load(&k->brokers_down);
    const char *st;
    pthread_mutex_lock(&k->mlock);
    if (fatal || down) {
        const char *m = fatal ? k->fatal_msg : k->down_msg;
        snprintf(why, cap, "%s",
                 m[0]    ? m
                 : fatal ? "fatal consumer error"
                         : "all brokers are down");
        *since_ms = k->fail_wall_ms;
        st = "failing";
    } else if (k->joining) {
        join_reason(k, sl_clock_mono_ms(), why, cap);
        *since_ms = k->state_wall_ms;
        st = "joining";
    } else {
        why[0] = '\0';
        *since_ms = k->state_wall_ms;
        st = "running";
    }
    pthread_mutex_unlock(&k->mlock);
    return st;
}

/* Unhealthy: every broker down, a fatal error, or joining for longer than
 * JOIN_GRACE_MS (a rebalance takes a few seconds; a dead predecessor's
 * session much longer). */
int sl__source_kafka_health(void *impl, char *msg, size_t len)
{
    kafka_source *k = impl;
    int64_t since;
    const char *st = sl_source_kafka_state(k, &since, msg, len);
    if (strcmp(st, "failing") == 0)
        return 1;
    pthread_mutex_lock(&k->mlock);
    bool late = k->joining && sl_clock_mono_ms() - k->state_mono_ms >= JOIN_GRACE_MS;
    pthread_mutex_unlock(&k->mlock);
    if (!late)
        msg[0] = '\0';
    return late;
}

/* ---- check --------------------------------------------------------------------- */

/* Every problem at once, so that one `sluice check` run shows them all. */
int sl__source_kafka_check(const sl_source_config *sc, sl_error *err)
{
    const sl_source_kafka_conf *cfg = sc->conf;
    sl_buf b = SL_BUF_INIT;
    sl_error e = {0};
    char m[SL_ERROR_MAX];
    if (!cfg->brokers || !cfg->brokers[0])
        sl_kafka_problem(&b, "brokers is required");
    if (!cfg->ntopics)
        sl_kafka_problem(&b, "topics is required (names, or regexes starting with ^)");
    for (size_t i = 0; i < cfg->ntopics; i++) {
        const char *t = cfg->topics[i];
        if (t[0] == '^') {
            regex_t re;
            int rc = regcomp(&re, t, REG_EXTENDED | REG_NOSUB);
            if (rc) {
                char why[200];
                regerror(rc, &re, why, sizeof why);
                snprintf(m, sizeof m, "topics: regex \"%s\": %s", t, why);
                sl_kafka_problem(&b, m);
            } else {
                regfree(&re);
            }
        } else if (!topic_name_ok(t)) {
            snprintf(m, sizeof m,
                     "topics: \"%s\" is not a valid topic name (1 to 249 of a-z A-Z 0-9 . _ -; "
                     "a regex starts with ^)",
                     t);
            sl_kafka_problem(&b, m);
        }
    }
    /* librdkafka's own checks on a scratch configuration: sluice's settings,
     * then each property alone; then a consumer is made (connecting to
     * nothing, its log silenced) to find conflicts between them. */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    bool oom = !conf;
    if (conf) {
        size_t before = b.len;
        sl_source_kafka_conf base = *cfg;
        base.nproperties = 0;
        base.brokers = NULL;
        if (apply_config(conf, sc->from_beginning, &base, cfg->group ? cfg->group : "sluice-check",
                         NULL, &e))
            sl_kafka_problem(&b, e.msg);
        for (size_t i = 0; i < cfg->nproperties; i++)
            if (apply_property(conf, cfg->properties[i], &e))
                sl_kafka_problem(&b, e.msg);
        if (b.len == before) {
            rd_kafka_conf_set_log_cb(conf, sl_kafka_quiet_log);
            rd_kafka_t *rk =
                sl_kafka_new(RD_KAFKA_CONSUMER, conf, cfg->properties, cfg->nproperties, NULL, &e);
            conf = NULL; /* the consumer's, or destroyed */
            if (rk)
                rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
            else
                sl_kafka_problem(&b, e.msg);
        }
        if (conf)
            rd_kafka_conf_destroy(conf);
    }
    return sl_kafka_problems_end(&b, oom, err);
}
