/*
 * rules/ruleset.c — lookups in the rule-set view (rules/ruleset.h), the same
 * ones server/config.c offers on the whole config.
 */
#include "rules/ruleset.h"

#include <string.h>

const sl_rule_config *sl_ruleset_rule(const sl_ruleset *rs, const char *name)
{
    for (size_t i = 0; i < rs->nrules; i++)
        if (rs->rules[i].name && strcmp(rs->rules[i].name, name) == 0)
            return &rs->rules[i];
    return NULL;
}

const sl_rule_config *sl_ruleset_rule_at(const sl_ruleset *rs, size_t i)
{
    if (i < rs->nrules)
        return &rs->rules[i];
    if (i - rs->nrules < rs->noverrides)
        return &rs->overrides[i - rs->nrules];
    return NULL;
}

const sl_rule_config *sl_ruleset_override(const sl_ruleset *rs, size_t rule, const char *lane,
                                          size_t *at)
{
    for (size_t i = 0; lane && *lane && i < rs->noverrides; i++)
        if (rs->overrides[i].base == rule && strcmp(rs->overrides[i].lane, lane) == 0) {
            if (at)
                *at = rs->nrules + i;
            return &rs->overrides[i];
        }
    return NULL;
}

const sl_lane_decl *sl_ruleset_lane(const sl_ruleset *rs, const char *name)
{
    for (size_t i = 0; name && *name && i < rs->nlanes; i++)
        if (rs->lanes[i].name && strcmp(rs->lanes[i].name, name) == 0)
            return &rs->lanes[i];
    return NULL;
}
