/*
 * server/config_check.c — the checks of the config loader that need the
 * whole file: references between blocks (sets, dlqs, lanes), what each
 * rule, target and source requires, and the connectors' own checks.
 */
#include "server/config_internal.h"

#include "connectors/source_webhook.h"
#include "core/bus/connector.h"

#include <regex.h>
#include <stdio.h>
#include <string.h>

/* The checks of a rule or an override that need the whole file; who names
 * it in messages. An override inherits set, dlq and retry from its base
 * (checked there, check_base_rule), and its targets too unless it gives its
 * own, so only what it may change is checked again. */
static void check_rule(loader *ld, sl_rule_config *r, const char *who)
{
    sl_config *cfg = ld->cfg;
    if (r->transform && r->transform_batch)
        sl__config_problem(ld, r->line, "%s: use transform or transform_batch, not both", who);
    if (r->lane && r->targets_from_base)
        return;
    if (!r->ntargets && !r->target_given)
        sl__config_problem(ld, r->line, "%s: a target is required (target = target.file { … })",
                           who);
    for (size_t t = 0; t < r->ntargets; t++) {
        sl_target_config *tc = &r->targets[t];
        if (tc->kind == SL_TARGET_FILE && !tc->path)
            sl__config_problem(ld, tc->line, "%s: target.file needs a path", who);
        if (tc->kind == SL_TARGET_HTTP && !tc->url)
            sl__config_problem(ld, tc->line, "%s: target.http needs a url", who);
        else if (tc->kind == SL_TARGET_HTTP && strncmp(tc->url, "http://", 7) &&
                 strncmp(tc->url, "https://", 8))
            sl__config_problem(ld, tc->line,
                               "%s: target.http url must start with http:// or https://", who);
        if (tc->kind == SL_TARGET_SET && !tc->set)
            sl__config_problem(ld, tc->line, "%s: target.set needs a set", who);
        else if (tc->kind == SL_TARGET_SET && !sl__config_find_set(cfg, tc->set))
            sl__config_problem(ld, tc->line,
                               "%s: target.set: set \"%s\" is not declared (add set \"%s\" { })",
                               who, tc->set, tc->set);
        else if (tc->kind == SL_TARGET_SET && r->set && strcmp(tc->set, r->set) == 0)
            sl__config_problem(ld, tc->line,
                               "%s: target.set into the set it reads would loop forever", who);
        if (tc->kind == SL_TARGET_KAFKA && (!tc->brokers || !tc->topic))
            sl__config_problem(ld, tc->line, "%s: target.kafka needs brokers and a topic", who);
        /* What only the connector knows (e.g. librdkafka's properties). */
        const sl_target_ops *ops = sl_target_ops_of(tc);
        sl_error terr = {0};
        if (ops && ops->check && ops->check(tc, &terr))
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
void sl__config_cross_check(loader *ld)
{
    sl_config *cfg = ld->cfg;
    char who[300];
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
        if (sc->kind == SL_SOURCE_FILE) {
            if (!sc->path)
                sl__config_problem(ld, sc->line, "%s: path is required (a file or a glob)", what);
            regex_t re;
            int rc = sc->multiline ? regcomp(&re, sc->multiline, REG_EXTENDED | REG_NOSUB) : 0;
            if (rc) {
                char msg[200];
                regerror(rc, &re, msg, sizeof msg);
                sl__config_problem(ld, sl__config_key_line(ld, sc->line, "multiline"),
                                   "%s: multiline is not an extended regex: %s", what, msg);
            } else if (sc->multiline) {
                regfree(&re);
            }
        } else if (sc->kind == SL_SOURCE_WEBHOOK) {
            sl_error werr = {0};
            if (!sc->name || !sc->preset || !sc->secret)
                sl__config_problem(ld, sc->line,
                                   "%s: name, preset and secret are required (the URL is "
                                   "/v1/webhooks/NAME)",
                                   what);
            else if (sl_webhook_source_check(sc, &werr))
                sl__config_problem(ld, sc->line, "%s: %s", what, werr.msg);
        } else if (sc->kind == SL_SOURCE_KAFKA) {
            if (!sc->brokers || !sc->ntopics)
                sl__config_problem(ld, sc->line, "%s: brokers and topics are required", what);
        }
        const sl_source_ops *ops = sl_source_ops_of(sc);
        sl_error serr = {0};
        if (ops && ops->check && ops->check(sc, &serr))
            sl__config_problem(ld, sc->line, "%s: %s", what, serr.msg);
    }
}
