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
#include "rules/ruleset.h"
#include "rules/schema.h"
#include "server/schedule.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* sl_target_config and sl_source_config are in core/bus/connector.h;
 * sl_backoff, sl_retry_config and sl_rule_config in rules/ruleset.h,
 * sl_lane_env and sl_lane_decl in core/bus/lanes.h. */

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
    bool api; /* declared by the EventBridge API's chunk (a bus its rules use) */
} sl_set_decl;

/* server { kafka = { … } }: the cluster of Kafka-backed sets. */
typedef struct sl_config_kafka {
    bool present; /* the block is there */
    int line;
    char *brokers, *topic_prefix, *group_prefix, *client_id; /* NULL: defaults */
    char **properties; /* "name=value" */
    size_t nproperties;
    int64_t session_timeout_ms, delivery_timeout_ms; /* 0: defaults */
} sl_config_kafka;

/* server { aws = { … } }: the EventBridge API (docs/eventbridge-api.md). */
typedef struct sl_config_aws_cred {
    char *akid; /* the access key id (the table's key) */
    int line;
    char *secret;
    char **publish; /* as api_keys: PutEvents into these buses (set globs) */
    size_t npublish;
    char **read; /* describe, list, test patterns on these buses */
    size_t nread;
    bool admin;       /* rules, targets, buses, connections */
    bool names_right; /* publish, read or admin given: without any, admin */
} sl_config_aws_cred;

typedef struct sl_config_aws {
    bool present;
    int line;
    char *region, *account; /* NULL: "us-east-1", "000000000000" */
    sl_config_aws_cred *creds;
    size_t ncreds;
} sl_config_aws;

typedef struct sl_config {
    char *path;   /* the file, as given */
    char *dir;    /* its folder: relative paths in the config resolve here */
    char *source; /* its text, run again by every rule worker */
    size_t source_len;
    /* server { … } */
    char *listen;               /* "HOST:PORT"; NULL: the command line or default */
    char *kafka_listen;         /* Kafka protocol "HOST:PORT"; NULL: off (or --kafka-listen) */
    char *kafka_advertised;     /* "HOST:PORT" told to Kafka clients; NULL: kafka_listen's */
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
    sl_config_kafka kafka;       /* server.kafka */
    sl_config_aws aws;           /* server.aws */
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
    sl_schedule_decl *schedules; /* schedule "NAME" { … }, file order (server/config_schedule.c) */
    size_t nschedules;
} sl_config;

/* Loads and checks the config file at path. Returns 0 and *out (free with
 * sl_config_free()); or SL_EINVAL with every mistake appended to diag as
 * "FILE:LINE: message\n" lines (*out untouched), SL_ENOENT/SL_EIO when the
 * file cannot be read, SL_ENOMEM. diag may be NULL. */
int sl_config_load(const char *path, sl_config **out, sl_buf *diag);

/* sl_config_load() with the EventBridge API's declarations api[0..api_len)
 * (Lua in the config's vocabulary, http/aws_state.h) run after the file's,
 * chunk name "@api_name": their rules are marked api. A rule or set the
 * file declares too is the file's (the API's is skipped, with a warning for
 * a rule). api may be NULL. */
int sl_config_load_api(const char *path, const char *api, size_t api_len, const char *api_name,
                       sl_config **out, sl_buf *diag);

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

/* Fills *out with the view of cfg the rules take (rules/ruleset.h): pointers
 * into cfg, which must outlive every use of the view
 * (server/config_ruleset.c). */
void sl_config_ruleset(const sl_config *cfg, sl_ruleset *out);

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
