/*
 * server/router.c — the running config and its reload (see router.h).
 */
#include "server/router.h"
#include "connectors/target_set.h"

#include "server/sources.h"

#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/bus/kgroup.h"
#include "core/bus/redrive.h"
#include "rules/runner.h"
#include "core/base/slog.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sl_router {
    sl_sets *sets;
    sl_databus *bus;
    char *data_dir;
    /* cfg and runner are read by HTTP and Databus threads under the read
     * lock; a reload swaps them under the write lock. The runner is stopped
     * outside the lock: its batches may wait for the Databus, whose writer
     * calls on_append. */
    pthread_rwlock_t lock;
    sl_config *cfg;
    sl_runner *runner;
    sl_sources *sources; /* started after the runner, stopped before it */
    /* The lanes outlive configs. A lane's first event waits (in the added
     * hook) while a reload replaces the runner, so that its runs are made
     * by the runner that will read it (core/bus/lanes.h). Order: swap_lock, then
     * lock; the lanes' own lock is never held while they call a hook. */
    sl_lanes *lanes;
    pthread_mutex_t swap_lock;
    /* Kafka-backed sets (docs/scale-out.md): the cluster, the cursor table
     * (opened with the first such set that rules read, kept across
     * reloads), and the running runner's groups, one per such set: they
     * start after it and stop before it. */
    const sl_kafka_cluster *kafka;
    sl_kcursors *kcursors;
    struct group_run *groups;
    size_t ngroups;
};

/* One Kafka-backed set's group, bound to the runner it feeds. */
typedef struct group_run {
    sl_runner *runner;
    sl_set *set;
    sl_kgroup *g;
    char name[300];
} group_run;

static void group_assign(void *ctx, const int32_t *parts, const int64_t *committed, size_t n)
{
    group_run *gr = ctx;
    sl_runner_kafka_assign(gr->runner, gr->set, parts, committed, n);
}

static void group_revoke(void *ctx, const int32_t *parts, size_t n, bool lost, int64_t *commit)
{
    group_run *gr = ctx;
    sl_runner_kafka_revoke(gr->runner, gr->set, parts, n, lost, commit);
}

static void group_committable(void *ctx, const int32_t *parts, size_t n, int64_t *commit)
{
    group_run *gr = ctx;
    sl_runner_kafka_committable(gr->runner, gr->set, parts, n, commit);
}

/* The Kafka-backed sets cfg's rules read, each once, in rule order. */
static size_t kafka_rule_sets(sl_router *r, const sl_config *cfg, sl_set **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->nrules; i++) {
        sl_set *s = NULL;
        if (sl_sets_get(r->sets, cfg->rules[i].set, false, &s, NULL) || !sl_set_remote(s))
            continue;
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = out[j] == s;
        if (!seen && n < cap)
            out[n++] = s;
    }
    return n;
}

/* Opens the cursor table when cfg's rules read a Kafka-backed set. */
static int open_kcursors(sl_router *r, const sl_config *cfg, sl_error *err)
{
    sl_set *one;
    if (r->kcursors || !r->kafka || kafka_rule_sets(r, cfg, &one, 1) == 0)
        return 0;
    char topic[300];
    snprintf(topic, sizeof topic, "%scursors", r->kafka->topic_prefix);
    return sl_kcursors_open(r->kafka, topic, &r->kcursors, err);
}

static void stop_groups(sl_router *r)
{
    for (size_t i = 0; i < r->ngroups; i++)
        sl_kgroup_stop(r->groups[i].g); /* revokes: cursors written, offsets committed */
    free(r->groups);
    r->groups = NULL;
    r->ngroups = 0;
}

/* Joins the group of every Kafka-backed set runner's rules read. */
static int start_groups(sl_router *r, const sl_config *cfg, sl_runner *runner, sl_error *err)
{
    sl_set *sets[256];
    size_t n = r->kafka ? kafka_rule_sets(r, cfg, sets, 256) : 0;
    if (!n)
        return 0;
    if (!(r->groups = calloc(n, sizeof *r->groups)))
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        group_run *gr = &r->groups[i];
        gr->runner = runner;
        gr->set = sets[i];
        snprintf(gr->name, sizeof gr->name, "%s%s", r->kafka->group_prefix, sets[i]->name);
        sl_kgroup_options go = {.cluster = r->kafka,
                                .set = sets[i]->name,
                                .group = gr->name,
                                .topic = sets[i]->cfg.topic,
                                .partitions = sets[i]->nparts,
                                .on_assign = group_assign,
                                .on_revoke = group_revoke,
                                .committable = group_committable,
                                .ctx = gr};
        int rc = sl_kgroup_start(&go, &gr->g, err);
        if (rc) {
            stop_groups(r);
            return rc;
        }
        r->ngroups++;
        sl_runner_kafka_group(runner, sets[i], gr->g);
        sl_slog(SL_SLOG_INFO, "router", "set %s: rules run in Kafka group %s", sets[i]->name,
                gr->name);
    }
    return 0;
}

/* Declares the sets of cfg; live sets keep their settings unless starting. */
static int declare_sets(sl_router *r, const sl_config *cfg, bool starting, sl_error *err)
{
    for (size_t i = 0; i < cfg->nsets; i++) {
        const sl_set_decl *d = &cfg->sets[i];
        sl_set *s = NULL;
        bool exists = sl_sets_get(r->sets, d->name, false, &s, NULL) == 0;
        if (exists && !starting) {
            if (!sl_set_config_equal(&s->cfg, &d->cfg))
                sl_slog(SL_SLOG_WARN, "router",
                        "reload: set %s: changed settings apply on the next "
                        "restart",
                        d->name);
            continue;
        }
        if (exists && s->nparts != d->cfg.partitions)
            sl_slog(SL_SLOG_WARN, "router",
                    "set %s keeps its %d partitions (the config says %d; "
                    "partitions are fixed once a set exists)",
                    d->name, s->nparts, d->cfg.partitions);
        int rc = sl_sets_define(r->sets, d->name, &d->cfg, &s, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int start_sources(sl_router *r, const sl_config *cfg, sl_sources **out, sl_error *err)
{
    sl_sources_options so = {
        .cfg = cfg, .sets = r->sets, .bus = r->bus, .data_dir = r->data_dir, .lanes = r->lanes};
    return sl_sources_start(&so, out, err);
}

/* Takes the running sources away (under the lock), stops and frees them
 * (outside: a flush may wait for the Databus). */
static void stop_sources(sl_router *r)
{
    pthread_rwlock_wrlock(&r->lock);
    sl_sources *old = r->sources;
    r->sources = NULL;
    pthread_rwlock_unlock(&r->lock);
    sl_sources_free(old);
}

/* Starts cfg's rules, and the groups of the Kafka-backed sets they read. */
static int start_runner(sl_router *r, const sl_config *cfg, sl_runner **out, sl_error *err)
{
    int rc = open_kcursors(r, cfg, err);
    if (rc)
        return rc;
    static const sl_runner_kafka_ops kops = {.cursor_get = sl_kcursors_get,
                                             .cursor_put = sl_kcursors_put,
                                             .cursor_flush = sl_kcursors_flush,
                                             .cursor_key = sl_kcursors_key,
                                             .group_info = sl_kgroup_info_get,
                                             .group_committed = sl_kgroup_committed};
    sl_runner_options ro = {.sets = r->sets,
                            .bus = r->bus,
                            .data_dir = r->data_dir,
                            .lanes = r->lanes,
                            .kcursors = r->kcursors,
                            .kafka = r->kafka ? &kops : NULL};
    sl_config_ruleset(cfg, &ro.rules);
    if ((rc = sl_runner_start(&ro, out, err)))
        return rc;
    if ((rc = start_groups(r, cfg, *out, err))) {
        sl_runner_free(*out);
        *out = NULL;
    }
    return rc;
}

/* The lanes' hooks: a lane's runs are made (or dropped) in the runner of the
 * moment; a reload in progress is waited for. */
static int lane_added(void *ctx, const sl_lane_info *lane, sl_error *err)
{
    sl_router *r = ctx;
    pthread_mutex_lock(&r->swap_lock);
    pthread_rwlock_rdlock(&r->lock);
    int rc = r->runner ? sl_runner_add_lane(r->runner, lane, err) : 0;
    pthread_rwlock_unlock(&r->lock);
    pthread_mutex_unlock(&r->swap_lock);
    return rc;
}

static void lane_dropped(void *ctx, const char *lane)
{
    sl_router *r = ctx;
    pthread_mutex_lock(&r->swap_lock);
    pthread_rwlock_rdlock(&r->lock);
    if (r->runner)
        sl_runner_drop_lane(r->runner, lane);
    pthread_rwlock_unlock(&r->lock);
    pthread_mutex_unlock(&r->swap_lock);
}

int sl_router_start(sl_config *cfg, sl_sets *sets, sl_databus *bus, const char *data_dir,
                    const sl_kafka_cluster *kafka, sl_router **out, sl_error *err)
{
    sl_router *r = calloc(1, sizeof *r);
    if (!r || !(r->data_dir = strdup(data_dir))) {
        free(r);
        sl_config_free(cfg);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    r->sets = sets;
    r->bus = bus;
    r->cfg = cfg;
    r->kafka = kafka;
    pthread_mutex_init(&r->swap_lock, NULL);
    /* Writers first: a reload must not wait behind a stream of ingest
     * threads reading the schemas (no path takes the read lock twice). */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&r->lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    int rc = sl_lanes_open(data_dir, &r->lanes, err);
    if (!rc) {
        sl_lanes_set_hooks(r->lanes, &(sl_lanes_hooks){r, lane_added, lane_dropped});
        rc = declare_sets(r, cfg, true, err);
    }
    if (!rc)
        rc = start_runner(r, cfg, &r->runner, err);
    if (!rc) {
        sl_lanes_configure(r->lanes, cfg->lanes, cfg->nlanes, cfg->lanes_auto);
        sl_lanes_commit(r->lanes);
    }
    if (!rc)
        rc = start_sources(r, cfg, &r->sources, err);
    if (rc) {
        sl_router_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* Stops the running rules and starts those of want, or those of fallback
 * again when want's cannot start (fallback NULL: none); the lanes take the
 * config that runs, which becomes r->cfg. All under swap_lock, so that a
 * lane's first event meanwhile waits for the new runner. Sources are not
 * touched. Returns 0, or want's error with *runs = fallback. */
static int replace_runner(sl_router *r, sl_config *want, sl_config *fallback, sl_config **runs,
                          sl_error *err)
{
    int64_t t0 = sl_clock_mono_ms();
    pthread_mutex_lock(&r->swap_lock);
    pthread_rwlock_wrlock(&r->lock);
    sl_runner *old = r->runner;
    r->runner = NULL;
    pthread_rwlock_unlock(&r->lock);
    stop_groups(r); /* the old runner gives its partitions back first */
    sl_runner_free(old);
    sl_runner *fresh = NULL;
    *runs = want;
    int rc = start_runner(r, want, &fresh, err);
    if (rc && fallback) {
        *runs = fallback; /* the old rules run again */
        sl_error e2 = {0};
        if (start_runner(r, fallback, &fresh, &e2))
            sl_slog(SL_SLOG_ERROR, "router", "reload: the old rules could not restart either: %s",
                    e2.msg);
    }
    sl_lanes_configure(r->lanes, (*runs)->lanes, (*runs)->nlanes, (*runs)->lanes_auto);
    pthread_rwlock_wrlock(&r->lock);
    r->runner = fresh;
    r->cfg = *runs;
    pthread_rwlock_unlock(&r->lock);
    pthread_mutex_unlock(&r->swap_lock);
    /* Rules deliver nothing between the old runner's stop and the new one's
     * start: say how long that was. */
    sl_slog(SL_SLOG_INFO, "router", "rules restarted in %" PRId64 " ms (%zu rules)",
            sl_clock_mono_ms() - t0, (*runs)->nrules);
    return rc;
}

int sl_router_reload(sl_router *r, sl_config *cfg, sl_error *err)
{
    int rc = declare_sets(r, cfg, false, err);
    if (rc) {
        sl_config_free(cfg);
        return rc;
    }
    /* The sources read the old config: they stop first and start again
     * from their committed positions with the new one. Their webhooks keep
     * answering until the new ones replace them. Sources start outside the
     * swap lock: one may emit a new lane's first event while it starts. */
    sl_sources_stop(r->sources);
    sl_config *old = r->cfg, *keep;
    rc = replace_runner(r, cfg, old, &keep, err);
    sl_sources *src = NULL;
    sl_error serr = {0};
    int src_rc = start_sources(r, keep, &src, &serr);
    if (src_rc && keep == cfg) {
        /* The new sources cannot run: the whole old config runs again. */
        sl_slog(SL_SLOG_ERROR, "router", "reload: %s; the old config runs again", serr.msg);
        sl_error e2 = {0};
        if (replace_runner(r, old, NULL, &keep, &e2) || start_sources(r, old, &src, &e2))
            sl_slog(SL_SLOG_ERROR, "router", "reload: the old config could not restart either: %s",
                    e2.msg);
        if (!rc)
            rc = sl_error_set(err, src_rc, "%s", serr.msg);
    } else if (src_rc) {
        sl_slog(SL_SLOG_ERROR, "router", "reload: the old sources could not restart: %s", serr.msg);
    }
    pthread_rwlock_wrlock(&r->lock);
    sl_sources *old_src = r->sources;
    r->sources = src;
    pthread_rwlock_unlock(&r->lock);
    sl_sources_free(old_src);
    sl_lanes_commit(r->lanes);
    sl_config_free(keep == cfg ? old : cfg);
    return rc;
}

static int validate(void *ctx, const sl_set *set, const struct sl_event *ev, sl_error *err)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    int rc = sl_config_check_event(sl_config_set(r->cfg, set->name), ev, err)
                 ? SL_EVENT_SCHEMA_VIOLATION
                 : 0;
    pthread_rwlock_unlock(&r->lock);
    /* The lane last: a refused event must not register a new lane. Outside
     * the lock: a new lane waits for a reload to finish. */
    return rc ? rc : (int)sl_lanes_admit(r->lanes, ev->lane, err);
}

/* GET /v1/lanes: each lane with what the runner did with it. */
static int lane_extra(void *ctx, const char *lane, sl_buf *out)
{
    sl_router *r = ctx;
    return r->runner ? sl_runner_lane_json(r->runner, lane, out) : 0;
}

static int lanes_json(void *ctx, sl_buf *out)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    int rc =
        sl_buf_printf(out, "{\"auto\":%s,\"lanes\":[", sl_lanes_auto(r->lanes) ? "true" : "false");
    rc = rc ? rc : sl_lanes_json(r->lanes, lane_extra, r, out);
    rc = rc ? rc : sl_buf_printf(out, "]}\n");
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

static int lane_drop(void *ctx, const char *lane, sl_error *err)
{
    sl_router *r = ctx;
    return sl_lanes_drop(r->lanes, lane, err);
}

static int rules_json(void *ctx, sl_buf *out)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    int rc = r->runner ? sl_runner_rules_json(r->runner, out)
                       : sl_buf_append(out, "{\"rules\":[]}\n", 13);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

static int metrics(void *ctx, sl_buf *out)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    int rc = r->runner ? sl_runner_metrics(r->runner, out) : 0;
    if (!rc)
        rc = sl_lanes_metrics(r->lanes, out);
    if (!rc)
        rc = sl_sources_metrics(r->sources, out);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

/* POST /v1/sets/{dlq}/redrive (core/bus/redrive.h): needs no config. */
static int redrive(void *ctx, const char *dlq, const char *to, uint64_t max, sl_buf *out,
                   sl_error *err)
{
    sl_router *r = ctx;
    return sl_redrive(r->sets, r->bus, r->lanes, r->data_dir, dlq, to, max, out, err);
}

static int replay(void *ctx, const char *rule, int64_t from_ms, int64_t to_ms, sl_buf *out,
                  sl_error *err)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    int rc = r->runner ? sl_runner_replay(r->runner, rule, from_ms, to_ms, out, err)
                       : sl_error_set(err, SL_ENOENT, "no rule named %s", rule);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

static int replays_json(void *ctx, const char *rule, sl_buf *out)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    int rc = !r->runner || !sl_config_rule(r->cfg, rule)
                 ? SL_ENOENT
                 : sl_runner_replays_json(r->runner, rule, out);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

static int webhook(void *ctx, const char *name, sl_webhook_header_fn *get, void *hctx,
                   const char *body, size_t len, sl_webhook_result *res)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    sl_webhook_source *w = sl_sources_webhook(r->sources, name);
    if (w)
        sl_webhook_source_handle(w, get, hctx, body, len, sl_clock_now_ms(), res);
    pthread_rwlock_unlock(&r->lock);
    return w ? 0 : SL_ENOENT;
}

static bool webhook_known(void *ctx, const char *name)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    bool known = sl_sources_webhook(r->sources, name) != NULL;
    pthread_rwlock_unlock(&r->lock);
    return known;
}

static void webhook_stored(void *ctx, const char *name, const sl_webhook_result *res, bool stored)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    sl_sources_webhook_stored(r->sources, name, res, stored);
    pthread_rwlock_unlock(&r->lock);
}

static int sources_json(void *ctx, sl_buf *out)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    int rc = sl_sources_json(r->sources, out);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

bool sl_router_has_schema(void *ctx, const sl_set *set, const char *type, size_t len)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    const sl_set_decl *d = sl_config_set(r->cfg, set->name); /* NULL: not declared */
    bool has = d && sl_config_schema(d, type, len) != NULL;
    pthread_rwlock_unlock(&r->lock);
    return has;
}

int sl_router_may_delete(void *ctx, const sl_set *set, sl_error *err)
{
    sl_router *r = ctx;
    int rc = 0;
    pthread_rwlock_rdlock(&r->lock);
    const sl_config *cfg = r->cfg;
    /* A set the EventBridge API's rules declare is in use by one of them:
     * that rule is named below (their lines are in no file). */
    for (size_t i = 0; cfg && !rc && i < cfg->nsets; i++)
        if (!cfg->sets[i].api && !strcmp(cfg->sets[i].name, set->name))
            rc = sl_error_set(err, SL_EBUSY, "set \"%s\" is declared by %s:%d", set->name,
                              cfg->path, cfg->sets[i].line);
    for (size_t i = 0; cfg && !rc && i < cfg->nrules; i++) {
        const sl_rule_config *rule = &cfg->rules[i];
        bool uses = !strcmp(rule->set, set->name) || (rule->dlq && !strcmp(rule->dlq, set->name));
        for (size_t t = 0; !uses && t < rule->ntargets; t++)
            uses = rule->targets[t].ops == &sl_target_set_ops &&
                   !strcmp(((const sl_target_set_conf *)rule->targets[t].conf)->set, set->name);
        if (uses && rule->api)
            rc = sl_error_set(err, SL_EBUSY, "the EventBridge API's rule \"%s\" uses it",
                              rule->name);
        else if (uses)
            rc = sl_error_set(err, SL_EBUSY, "rule \"%s\" (%s:%d) uses set \"%s\"", rule->name,
                              cfg->path, rule->line, set->name);
    }
    for (size_t i = 0; cfg && !rc && i < cfg->nsources; i++)
        if (cfg->sources[i].set && !strcmp(cfg->sources[i].set, set->name))
            rc = sl_error_set(err, SL_EBUSY, "source \"%s\" writes to set \"%s\"",
                              cfg->sources[i].name, set->name);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

bool sl_router_file_rule(void *ctx, const char *name)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    const sl_rule_config *rc = r->cfg ? sl_config_rule(r->cfg, name) : NULL;
    bool file = rc && !rc->api;
    pthread_rwlock_unlock(&r->lock);
    return file;
}

bool sl_router_file_set(void *ctx, const char *name)
{
    sl_router *r = ctx;
    bool file = false;
    pthread_rwlock_rdlock(&r->lock);
    for (size_t i = 0; r->cfg && i < r->cfg->nsets; i++)
        file |= !r->cfg->sets[i].api && strcmp(r->cfg->sets[i].name, name) == 0;
    pthread_rwlock_unlock(&r->lock);
    return file;
}

void sl_router_http_hooks(sl_router *r, sl_http_hooks *out)
{
    *out = (sl_http_hooks){.ctx = r,
                           .validate = validate,
                           .may_delete = sl_router_may_delete,
                           .rules_json = rules_json,
                           .metrics = metrics,
                           .redrive = redrive,
                           .replay = replay,
                           .replays_json = replays_json,
                           .webhook = webhook,
                           .webhook_known = webhook_known,
                           .webhook_stored = webhook_stored,
                           .sources_json = sources_json,
                           .lanes_json = lanes_json,
                           .lane_drop = lane_drop};
}

void sl_router_on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane)
{
    sl_router *r = ctx;
    pthread_rwlock_rdlock(&r->lock);
    if (r->runner)
        sl_runner_on_append(r->runner, set, partition, end, lane);
    pthread_rwlock_unlock(&r->lock);
}

void sl_router_stop(sl_router *r)
{
    if (!r)
        return;
    stop_sources(r);
    pthread_rwlock_wrlock(&r->lock);
    sl_runner *old = r->runner;
    r->runner = NULL;
    pthread_rwlock_unlock(&r->lock);
    /* Outside the lock: its batches may wait for the bus. Its cursors sync and
     * its targets close now, before the HTTP server and the bus stop. The
     * groups leave first: their revoke lets the runner's turns finish and
     * commits where they got. */
    stop_groups(r);
    sl_runner_stop(old);
    sl_runner_free(old);
}

void sl_router_free(sl_router *r)
{
    if (!r)
        return;
    sl_router_stop(r);
    sl_config_free(r->cfg);
    sl_kcursors_close(r->kcursors);
    sl_lanes_free(r->lanes);
    pthread_mutex_destroy(&r->swap_lock);
    pthread_rwlock_destroy(&r->lock);
    free(r->data_dir);
    free(r);
}
