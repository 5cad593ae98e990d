/*
 * server/config.h — the Lua config file (ISSUE 4 §1, docs/config.md).
 *
 * The file runs once in a sandboxed Lua state (rules/sandbox.h) with the
 * vocabulary of lua/prelude.lua, which records every declaration with its
 * line. This module then checks each declaration against one key table per
 * block (server, set, rule here; each connector kind declares its own, see
 * core/bus/conf_key.h and server/registry.h): unknown keys, wrong types,
 * bad durations/sizes, bad patterns, missing schema files, unknown sets and
 * targets are all reported, each as "FILE:LINE: message", not just the
 * first. The same key tables print the reference in docs/config.md
 * (`sluice check --keys`), so code and docs cannot drift.
 *
 * Lua functions (filter, transform, transform_batch) are only type-checked
 * here; each rule worker runs the same source text again in its own state to
 * get them (rules/rule.h), so a config keeps its source.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include "core/bus/auth.h"
#include "core/bus/connector.h"
#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/bus/set.h"
#include "rules/input.h"
#include "rules/pattern.h"
#include "rules/schema.h"

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

/* lane "NAME" { env = "boe"|"ppe", fallback = "base"|"none" } (ARCHITECTURE.md §7). */
typedef enum sl_lane_env {
    SL_LANE_BOE, /* offline test lanes: many in parallel; fallback "base" by default */
    SL_LANE_PPE, /* pre-production: fallback "none" by default */
} sl_lane_env;

typedef struct sl_lane_decl {
    char *name; /* [a-z0-9-]{1,32} */
    int line;   /* 0: declared implicitly (an override naming it under lanes.auto) */
    sl_lane_env env;
    bool fallback_base; /* events without an override go to the base rule (else nowhere) */
    char *description;
} sl_lane_decl;

typedef struct sl_schema_entry {
    char *type; /* event type */
    sl_schema *schema;
} sl_schema_entry;

typedef struct sl_set_decl {
    char *name;
    int line;
    sl_set_config cfg;
    sl_schema_entry *schemas;
    size_t nschemas;
} sl_set_decl;

typedef struct sl_config {
    char *path;   /* the file, as given */
    char *dir;    /* its folder: relative paths in the config resolve here */
    char *source; /* its text, run again by every rule worker */
    size_t source_len;
    /* server { … } */
    char *listen;               /* "HOST:PORT"; NULL: the command line or default */
    char *data_dir;             /* NULL: the command line or default */
    int auto_create;            /* -1 unset, else 0/1 */
    uint64_t max_request_bytes; /* 0 unset */
    char *log_format;           /* "logfmt" | "json" (checked); NULL unset */
    char *log_level;            /* "debug" | "info" | "warn" | "error" (checked); NULL unset */
    unsigned workers;           /* rule worker threads; 0 = number of CPUs */
    uint64_t lua_memory;        /* per Lua state; 0 = default */
    uint64_t lua_instructions;  /* per Lua call; 0 = default */
    /* server security and limits (docs/security.md) */
    sl_auth_key_config *api_keys; /* server.api_keys, in file order */
    size_t napi_keys;
    bool insecure; /* allow a non-loopback listen without keys */
    char *tls_cert,
        *tls_key;            /* PEM files, resolved against the config's folder; NULL: plain HTTP */
    int64_t max_batch;       /* events per request; 0 unset */
    int64_t rate;            /* events a second per client; 0 unlimited */
    int64_t burst;           /* bucket size; 0: rate */
    int64_t max_connections; /* 0 unset */
    int64_t max_connections_per_ip; /* 0 unlimited */
    uint64_t max_body_memory;       /* 0 unset */
    /* sets created on first use at most, and per client (0 unset) */
    int64_t max_auto_sets, max_auto_sets_per_client;
    int64_t max_open_partitions; /* 0 unset: from the descriptor limit */
    int64_t partition_idle_ms;   /* 0 unset */
    sl_set_config set_defaults;  /* what sets created on first use get */
    sl_set_decl *sets;
    size_t nsets;
    sl_rule_config *rules;
    size_t nrules;
    sl_source_config *sources;
    size_t nsources;
    char *plugin_dir;    /* server.plugin_dir, resolved; NULL: no plugins */
    sl_lane_decl *lanes; /* declared lanes, file order */
    size_t nlanes;
    bool lanes_auto;           /* lanes.auto = true: an undeclared lane is accepted as a boe lane */
    sl_rule_config *overrides; /* every rule's lane overrides (see sl_rule_config.lane) */
    size_t noverrides;
} sl_config;

/* Loads and checks the config file at path. Returns 0 and *out (free with
 * sl_config_free()); or SL_EINVAL with every mistake appended to diag as
 * "FILE:LINE: message\n" lines (*out untouched), SL_ENOENT/SL_EIO when the
 * file cannot be read, SL_ENOMEM. diag may be NULL. */
int sl_config_load(const char *path, sl_config **out, sl_buf *diag);

/* The rule called name, or NULL. */
const sl_rule_config *sl_config_rule(const sl_config *cfg, const char *name);

/* Rule configs are numbered 0 … nrules-1 (base rules), then nrules …
 * nrules+noverrides-1 (overrides); rule VMs evaluate by that number. */
const sl_rule_config *sl_config_rule_at(const sl_config *cfg, size_t i);

/* The override of base rule `rule` for lane, its number (as above) in *at,
 * or NULL when the rule has none. */
const sl_rule_config *sl_config_override(const sl_config *cfg, size_t rule, const char *lane,
                                         size_t *at);

/* The declaration of lane name (explicit or implicit), or NULL. */
const sl_lane_decl *sl_config_lane(const sl_config *cfg, const char *name);

/* The schema for events of type in set decl, or NULL. */
const sl_schema *sl_config_schema(const sl_set_decl *set, const char *type, size_t type_len);

struct sl_event;

/* The schema check of ingest: an event whose type has a schema in set decl
 * (may be NULL) must carry JSON data that fits it. Returns 0, or SL_EINVAL
 * with err naming the JSON pointer and the reason. */
int sl_config_check_event(const sl_set_decl *set, const struct sl_event *ev, sl_error *err);

/* The source called name, or NULL. */
const sl_source_config *sl_config_source(const sl_config *cfg, const char *name);

/* The declaration of set name, or NULL. */
const sl_set_decl *sl_config_set(const sl_config *cfg, const char *name);

/* Appends the key reference of every block (Markdown tables) to out. */
int sl_config_keys_markdown(sl_buf *out);

void sl_config_free(sl_config *cfg);

#endif
