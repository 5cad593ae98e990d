/*
 * server/config_check.c — the checks of the config loader that need the
 * whole file: references between blocks (sets, dlqs, lanes), what each
 * rule and source requires, and the connectors' own checks of their blocks
 * (check_conf, check), each mistake named by its rule or source.
 */
#include "server/config_internal.h"

#include "core/base/kafka_admin.h"
#include "core/base/kafka_conf.h"

#include "core/base/lane_name.h"
#include "core/bus/connector.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* What a connector's check_conf() reports through (sl_conf_check). */
typedef struct reporter {
    loader *ld;
    const char *who; /* the rule of a target, the source */
    int line;        /* the block's */
} reporter;

static void report(void *ctx, const char *keyname, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(void *ctx, const char *keyname, const char *fmt, ...)
{
    reporter *rp = ctx;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl__config_problem(rp->ld, keyname ? sl__config_key_line(rp->ld, rp->line, keyname) : rp->line,
                       "%s: %s", rp->who, msg);
}

static bool set_declared(void *ctx, const char *name)
{
    reporter *rp = ctx;
    return sl__config_find_set(rp->ld->cfg, name) != NULL;
}

/* The checks of a rule or an override that need the whole file; who names
 * it in messages. An override inherits set, dlq and retry from its base
 * (checked there, check_base_rule), and its targets too unless it gives its
 * own, so only what it may change is checked again. */
static void check_rule(loader *ld, sl_rule_config *r, const char *who)
{
    if (r->transform && r->transform_batch)
        sl__config_problem(ld, r->line, "%s: use transform or transform_batch, not both", who);
    if (r->lane && r->targets_from_base)
        return;
    if (!r->ntargets && !r->target_given)
        sl__config_problem(ld, r->line, "%s: a target is required (target = target.file { … })",
                           who);
    for (size_t t = 0; t < r->ntargets; t++) {
        sl_target_config *tc = &r->targets[t];
        /* What the kind requires of its keys, then what only the connector
         * knows (e.g. librdkafka's properties). */
        const sl_target_ops *ops = tc->ops;
        reporter rp = {ld, who, tc->line};
        sl_conf_check chk = {&rp, report, set_declared, r->set};
        if (ops->check_conf)
            ops->check_conf(tc, &chk);
        sl_error terr = {0};
        if (ops->check && ops->check(tc, &terr))
            sl__config_problem(ld, tc->line, "%s: target.%s: %s", who, ops->name, terr.msg);
    }
}

/* The checks of a base rule that need the whole file (who names it). */
static void check_base_rule(loader *ld, sl_rule_config *r, const char *who)
{
    sl_config *cfg = ld->cfg;
    if (!r->set)
        sl__config_problem(ld, r->line, "%s: set is required (the event set it reads)", who);
    else if (!sl__config_find_set(cfg, r->set))
        sl__config_problem(ld, sl__config_key_line(ld, r->line, "set"),
                           "%s: set \"%s\" is not declared (add set \"%s\" { })", who, r->set,
                           r->set);
    if (r->dlq && !sl__config_find_set(cfg, r->dlq))
        sl__config_problem(ld, sl__config_key_line(ld, r->line, "dlq"),
                           "%s: dlq set \"%s\" is not declared (add set \"%s\" { })", who, r->dlq,
                           r->dlq);
    else if (r->dlq && r->set && strcmp(r->dlq, r->set) == 0)
        sl__config_problem(
            ld, sl__config_key_line(ld, r->line, "dlq"),
            "%s: the dlq cannot be the set the rule reads (failed events would come back "
            "to it forever)",
            who);
    if (r->retry.initial_ms > r->retry.max_ms)
        sl__config_problem(ld, sl__config_key_line(ld, r->line, "retry"),
                           "%s: retry.initial (%lld ms) is longer than retry.max (%lld ms)", who,
                           (long long)r->retry.initial_ms, (long long)r->retry.max_ms);
    check_rule(ld, r, who);
}

/* An override's lane must be declared, or lanes.auto declares it (boe). */
static void check_override_lane(loader *ld, const sl_rule_config *o, const char *who)
{
    sl_config *cfg = ld->cfg;
    if (sl_config_lane(cfg, o->lane))
        return;
    if (!cfg->lanes_auto) {
        sl__config_problem(ld, o->line,
                           "%s: lane \"%s\" is not declared (add lane \"%s\" { env = \"boe\" }, or "
                           "lanes.auto = true)",
                           who, o->lane, o->lane);
        return;
    }
    sl_lane_decl *g = sl__config_grow(ld, cfg->lanes, cfg->nlanes, sizeof *g);
    if (!g)
        return;
    cfg->lanes = g;
    sl_lane_decl *d = &cfg->lanes[cfg->nlanes++];
    d->name = sl__config_dup(ld, o->lane, strlen(o->lane));
    d->line = 0;
    d->env = SL_LANE_BOE;
    d->fallback_base = true;
}

/* Checks what needs the whole file: references between blocks. */
/* server.kafka's properties as librdkafka takes them: a client is made
 * (no connection is opened) and its complaint reported at the block. */
static void check_kafka(loader *ld, const sl_config_kafka *k)
{
    sl_kafka_cluster cl = {.brokers = k->brokers,
                           .client_id = k->client_id,
                           .props = k->properties,
                           .nprops = k->nproperties};
    sl_error e = {0};
    rd_kafka_conf_t *conf = sl_kafka_cluster_conf(&cl, NULL, &e);
    if (conf) {
        rd_kafka_conf_set_log_cb(conf, sl_kafka_quiet_log);
        rd_kafka_t *rk = sl_kafka_new(RD_KAFKA_PRODUCER, conf, k->properties, k->nproperties,
                                      NULL, &e);
        if (rk)
            rd_kafka_destroy(rk);
    }
    if (e.code || e.msg[0])
        sl__config_problem(ld, k->line, "server.kafka: %s", e.msg);
}

void sl__config_cross_check(loader *ld)
{
    sl_config *cfg = ld->cfg;
    char who[300];
    if (cfg->kafka.present && cfg->kafka.brokers)
        check_kafka(ld, &cfg->kafka);
    for (size_t i = 0; i < cfg->nsets; i++) {
        const sl_set_decl *d = &cfg->sets[i];
        bool kafka = d->cfg.backend == SL_BACKEND_KAFKA;
        if (kafka && !cfg->kafka.present)
            sl__config_problem(ld, d->line,
                               "set \"%s\": backend = \"kafka\" needs the cluster: "
                               "server { kafka = { brokers = \"HOST:PORT\" } }",
                               d->name);
        if (!kafka && (d->cfg.topic[0] || d->cfg.replication != -1))
            sl__config_problem(ld, d->line,
                               "set \"%s\": topic and replication are for backend = \"kafka\"",
                               d->name);
    }
    for (size_t i = 0; i < cfg->nrules; i++) {
        snprintf(who, sizeof who, "rule \"%s\"", cfg->rules[i].name);
        check_base_rule(ld, &cfg->rules[i], who);
    }
    for (size_t i = 0; i < cfg->noverrides; i++) {
        sl_rule_config *o = &cfg->overrides[i];
        snprintf(who, sizeof who, "rule \"%s\" lanes[\"%s\"]", o->name, o->lane);
        check_override_lane(ld, o, who);
        check_rule(ld, o, who);
    }
}

/* The sources: names, sets, what each kind requires, the connector's own
 * checks. */
void sl__config_check_sources(loader *ld)
{
    sl_config *cfg = ld->cfg;
    for (size_t i = 0; i < cfg->nsources; i++) {
        sl_source_config *sc = &cfg->sources[i];
        char what[300];
        snprintf(what, sizeof what, "source.%s%s%s%s", sc->kind_name, sc->name ? " \"" : "",
                 sc->name ? sc->name : "", sc->name ? "\"" : "");
        if (!sc->set)
            sl__config_problem(ld, sc->line, "%s: set is required (the event set its events go to)",
                               what);
        else if (!sl__config_find_set(cfg, sc->set))
            sl__config_problem(ld, sl__config_key_line(ld, sc->line, "set"),
                               "%s: set \"%s\" is not declared (add set \"%s\" { })", what, sc->set,
                               sc->set);
        if (sc->name && !sl_set_name_valid(sc->name))
            sl__config_problem(
                ld, sl__config_key_line(ld, sc->line, "name"),
                "%s: a source name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .", what);
        for (size_t j = 0; j < i && sc->name; j++)
            if (cfg->sources[j].name && strcmp(cfg->sources[j].name, sc->name) == 0) {
                sl__config_problem(
                    ld, sc->line,
                    "%s: the name is taken by the source at line %d (give each source "
                    "its own name = \"…\")",
                    what, cfg->sources[j].line);
                break;
            }
        if (sc->lane && !sl_lane_valid(sc->lane, strlen(sc->lane)))
            sl__config_problem(ld, sl__config_key_line(ld, sc->line, "lane"),
                               "%s: lane \"%s\" is not a lane name ([a-z0-9-]{1,32})", what,
                               sc->lane);
        else if (sc->lane && *sc->lane && !cfg->lanes_auto && !sl_config_lane(cfg, sc->lane))
            /* Its every event would be refused (UnknownLane). */
            sl__config_problem(
                ld, sl__config_key_line(ld, sc->line, "lane"),
                "%s: lane \"%s\" is not declared (add lane \"%s\" { env = \"boe\" }, or "
                "lanes.auto = true)",
                what, sc->lane, sc->lane);
        const sl_source_ops *ops = sc->ops;
        reporter rp = {ld, what, sc->line};
        sl_conf_check chk = {&rp, report, set_declared, NULL};
        if (ops->check_conf)
            ops->check_conf(sc, &chk);
        sl_error serr = {0};
        if (ops->check && ops->check(sc, &serr))
            sl__config_problem(ld, sc->line, "%s: %s", what, serr.msg);
    }
}
