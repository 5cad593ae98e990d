/*
 * rules/ruleset.h — the rules of a config as rules/ sees them: each rule's
 * declaration (sl_rule_config, its retry policy), its lane overrides, and
 * sl_ruleset, the narrow view of a loaded config that the rule VM
 * (rules/rule.h) and the runner (rules/runner.h) take instead of the whole
 * config (server/config.h fills it: sl_config_ruleset()).
 *
 * The view holds pointers, never copies: what it points to belongs to the
 * config and must outlive every VM and runner built from it. Rule configs
 * are numbered 0 … nrules-1 (base rules), then nrules … nrules+noverrides-1
 * (lane overrides); rule VMs evaluate by that number.
 */
#ifndef SL_RULESET_H
#define SL_RULESET_H

#include "core/bus/connector.h"
#include "core/bus/lanes.h"
#include "rules/input.h"
#include "rules/pattern.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


typedef enum sl_backoff {
    SL_BACKOFF_EXPONENTIAL, /* initial, 2×, 4× … up to max, with full jitter */
    SL_BACKOFF_FIXED,       /* initial each time, with full jitter */
} sl_backoff;

/* rule.retry (EventBridge's retry policy; its defaults). */
typedef struct sl_retry_config {
    int64_t attempts;   /* deliveries of one event to one target; default 185 */
    int64_t max_age_ms; /* retried this long after its first failure; -1 forever; 24 h */
    sl_backoff backoff;
    int64_t initial_ms; /* first back-off; default 100 ms */
    int64_t max_ms;     /* longest back-off; default 5 min */
} sl_retry_config;

typedef struct sl_rule_config {
    char *name;
    int line;
    char *set;
    char *description;
    char *match_json;                        /* the pattern as JSON text; NULL matches everything */
    sl_pattern *pattern;                     /* compiled match_json */
    bool filter, transform, transform_batch; /* which Lua functions it has */
    sl_input *input;                         /* input transformer; NULL none */
    sl_target_config *targets;
    size_t ntargets;
    /* The dlq as a target.set { set = dlq } (ops NULL without a dlq), made
     * by the loader so that the runner needs no registry. */
    sl_target_config dlq_target;
    bool from_beginning; /* start = "beginning": a new rule reads the whole set */
    bool target_given;   /* target(s) was written, even if refused */
    bool enabled;
    sl_retry_config retry;
    char *dlq;    /* dead-letter set; NULL: failed events are dropped (counted) */
    bool ordered; /* default true: a failing event holds its partition */
    /* shape = "eventbridge": the pattern, filter, transform, input and
     * targets see each event in Amazon EventBridge's shape
     * (core/bus/ebshape.h) instead of the stored CloudEvent. */
    char *shape; /* NULL or "cloudevents" | "eventbridge" (checked) */
    bool eventbridge;
    /* Made through the EventBridge API (http/aws.c), not the config file:
     * kept in DATA/aws, shown as such in GET /v1/rules. */
    bool api;
    /* Lane overrides (rule { lanes = { ["L"] = { … } } }). A base rule has
     * lane NULL. Each override is a complete rule config in cfg->overrides:
     * the base rule's keys with the override's (match, filter, transform,
     * transform_batch, input, target/targets) on top, same name and set
     * (transform or transform_batch replaces both, target or targets both).
     * An override's line is that of its ["L"] = { … } entry. */
    char *lane;             /* override: the lane it serves; NULL: a base rule */
    size_t base;            /* override: index of its base rule in cfg->rules */
    bool targets_from_base; /* override: target(s) not overridden (it may share the base's) */
} sl_rule_config;

/* What rules/ needs of a loaded config. */
typedef struct sl_ruleset {
    /* The config file: each rule VM runs its source again to get the Lua
     * functions (chunk name "@path"); relative paths resolve against dir. */
    const char *path;
    const char *dir;
    const char *source;
    size_t source_len;
    const sl_rule_config *rules; /* base rules, file order */
    size_t nrules;
    const sl_rule_config *overrides; /* every rule's lane overrides (sl_rule_config.lane) */
    size_t noverrides;
    const sl_lane_decl *lanes; /* declared lanes (and those only overrides name), file order */
    size_t nlanes;
    bool lanes_auto;           /* lanes.auto = true */
    unsigned workers;          /* rule worker threads; 0 = number of CPUs */
    uint64_t lua_memory;       /* per Lua state; 0 = default */
    uint64_t lua_instructions; /* per Lua call; 0 = default */
    /* The account and region EventBridge-shaped events get when they came
     * in another way (server.aws; defaults 000000000000, us-east-1). */
    const char *aws_account, *aws_region;
    /* The config's source declarations, by their place among the sources:
     * a rule VM also holds their parse = function(line) functions.
     * source_name(source_ctx, i) names source i in messages. */
    size_t nsources;
    const char *(*source_name)(const void *source_ctx, size_t i);
    const void *source_ctx;
} sl_ruleset;

/* The base rule called name, or NULL. */
const sl_rule_config *sl_ruleset_rule(const sl_ruleset *rs, const char *name);

/* Rule config number i (base rules, then overrides: see above), or NULL. */
const sl_rule_config *sl_ruleset_rule_at(const sl_ruleset *rs, size_t i);

/* The override of base rule `rule` for lane, its number in *at (may be
 * NULL), or NULL when the rule has none (lane NULL or "" included). */
const sl_rule_config *sl_ruleset_override(const sl_ruleset *rs, size_t rule, const char *lane,
                                          size_t *at);

/* The declaration of lane name (explicit or implicit), or NULL. */
const sl_lane_decl *sl_ruleset_lane(const sl_ruleset *rs, const char *name);

#endif
