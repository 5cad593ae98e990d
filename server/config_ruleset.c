/*
 * server/config_ruleset.c — the rule-set view of a loaded config
 * (rules/ruleset.h): what the rule VMs and the runner read, without the
 * rest of the config.
 */
#include "server/config.h"

/* Source i as messages name it: its name, else its kind. */
static const char *source_name(const void *ctx, size_t i)
{
    const sl_config *cfg = ctx;
    const sl_source_config *sc = &cfg->sources[i];
    return sc->name ? sc->name : sc->kind_name ? sc->kind_name : "?";
}

void sl_config_ruleset(const sl_config *cfg, sl_ruleset *out)
{
    *out = (sl_ruleset){.path = cfg->path,
                        .dir = cfg->dir,
                        .source = cfg->source,
                        .source_len = cfg->source_len,
                        .rules = cfg->rules,
                        .nrules = cfg->nrules,
                        .overrides = cfg->overrides,
                        .noverrides = cfg->noverrides,
                        .lanes = cfg->lanes,
                        .nlanes = cfg->nlanes,
                        .lanes_auto = cfg->lanes_auto,
                        .workers = cfg->workers,
                        .lua_memory = cfg->lua_memory,
                        .lua_instructions = cfg->lua_instructions,
                        .aws_account = cfg->aws.account,
                        .aws_region = cfg->aws.region,
                        .nsources = cfg->nsources,
                        .source_name = source_name,
                        .source_ctx = cfg};
}
