/*
 * server/config_internal.h — what the files of the config loader share
 * (server/config.c, config_keys.c, config_rules.c, config_sources.c,
 * config_check.c): the key table type, the loader's state and the helpers
 * every block reader uses. Not part of any API: only server/config*.c
 * include it.
 */
#ifndef SL_CONFIG_INTERNAL_H
#define SL_CONFIG_INTERNAL_H

#include "core/bus/connector.h"
#include "server/config.h"

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- key tables ----------------------------------------------------------- */

/* The value types of core/bus/conf_key.h (the connectors' keys), then
 * those only the server's own blocks use. */
enum {
    K_STRING = SL_KEY_STRING,
    K_PATH = SL_KEY_PATH,
    K_BOOL = SL_KEY_BOOL,
    K_INT = SL_KEY_INT,
    K_SIZE = SL_KEY_SIZE,
    K_DURATION = SL_KEY_DURATION,
    K_START = SL_KEY_START,
    K_HEADERS = SL_KEY_HEADERS,
    K_AUTH = SL_KEY_AUTH,
    K_BODY = SL_KEY_BODY,
    K_PROPS = SL_KEY_PROPS,
    K_STRINGS = SL_KEY_STRINGS,
    K_PARSE = SL_KEY_PARSE,
    K_LONGLINES = SL_KEY_LONGLINES,
    K_ENCODING = SL_KEY_ENCODING,
    K_TRISTATE = SL_KEY__COUNT, /* int: -1 unset, 0, 1 */
    K_ACK,                      /* "buffer" | "durable" */
    K_CODEC,                    /* "none" | "zstd" */
    K_FUNCTION,                 /* a Lua function: only its presence is kept (bool) */
    K_PATTERN,                  /* a Lua table or a JSON string */
    K_INPUT,                    /* "$.path" or { paths = {…}, template = "…" } */
    K_TARGETS,                  /* a target, or a list of targets */
    K_SCHEMAS,                  /* { ["type"] = "file.json" | { … } } */
    K_SETBODY,                  /* a table of set keys (server.set_defaults) */
    K_RETRY,                    /* a table of retry_keys (rule.retry) */
    K_BACKOFF,                  /* "exponential" | "fixed" */
    K_LANES,    /* rule.lanes: { ["LANE"] = { …override… } }, read after the rule's keys */
    K_LANEENV,  /* "boe" | "ppe" -> sl_lane_env */
    K_FALLBACK, /* "base" | "none" -> bool fallback_base */
    K_APIKEYS,  /* server.api_keys: { NAME = { api_key_keys } } -> sl_auth_key_config[] */
    K_KAFKA,    /* server.kafka: { kafka_keys } -> sl_config_kafka */
    K_BACKEND,  /* "log" | "kafka" -> sl_backend */
    K_TOPIC,    /* a Kafka topic name -> char[SL_SET_TOPIC_MAX + 1] */
    K_AWS,      /* server.aws: { aws_keys } -> sl_config_aws (config_aws.c) */
    K_AWSCREDS, /* server.aws.credentials: { AKID = { cred_keys } } -> sl_config_aws.creds */
    K__COUNT
};

typedef sl_conf_key key;

#define FIELD(T, f) SL_CONF_FIELD(T, f)

#define KEYS(k) k, sizeof k / sizeof *k

typedef struct loader {
    sl_config *cfg;
    lua_State *L;
    sl_buf *diag;
    const char *name; /* the file name in messages */
    int nerrors;
    int oom;
    bool ran;           /* the file ran to its end: its declarations are complete */
    long long api_from; /* the first declaration of the EventBridge API's chunk (0: none) */
    bool in_api;        /* reading the declarations of the EventBridge API's chunk */
    const char *kl_pos; /* key_line(): start of line kl_line in the source */
    int kl_line;
} loader;

typedef struct block {
    const char *what; /* 'rule "big-orders"' */
    int line;
    void *obj;
} block;

/* ---- config_keys.c: the generic key reader -------------------------------- */

/* Reports a mistake as "FILE:LINE: message" (bounded, see config_keys.c). */
void sl__config_problem(loader *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The line where `key =` first appears at or after the block's line. */
int sl__config_key_line(loader *ld, int block_line, const char *keyname);

/* A copy of s[0..n) (NULL and ld->oom on failure). */
char *sl__config_dup(loader *ld, const char *s, size_t n);

/* A path resolved relative to the config file's folder (owned). */
char *sl__config_resolve_path(loader *ld, const char *p);

/* Appends "NAME SEP VALUE" to a list of lines (headers, properties). */
void sl__config_add_line(loader *ld, char ***list, size_t *n, const char *name, const char *sep,
                         const char *val);

/* arr grown by one zeroed element of size bytes, or NULL (ld->oom). */
void *sl__config_grow(loader *ld, void *arr, size_t n, size_t size);

/* The Lua value at idx as JSON text (owned), or NULL with a problem. */
char *sl__config_lua_to_json(loader *ld, int idx, int line, const char *what);

/* Reads one key's value (at the top of the stack) into the block's struct. */
void sl__config_read_key(loader *ld, const key *k, const block *b, void *extra);

/* Walks the table at idx: every key must be in keys. */
void sl__config_check_block(loader *ld, int idx, const key *keys, size_t nkeys, const block *b,
                            void *extra);
/* The same with two tables, each read into its own block's struct (a
 * source's common keys, then its kind's). */
void sl__config_check_block2(loader *ld, int idx, const key *keys, size_t nkeys, const block *b,
                             const key *keys2, size_t nkeys2, const block *b2, void *extra);

/* A kind's config struct of size bytes, a copy of defaults (NULL: zeros),
 * or NULL (ld->oom). */
void *sl__config_new_conf(loader *ld, size_t size, const void *defaults);

/* The body of a plugin's block: common keys into the struct, the plugin's
 * own keys as "name=value" option lines. */
void sl__config_read_plugin_body(loader *ld, int idx, const key *common, size_t ncommon,
                                 const sl_plugin_key *pk, size_t npk, const block *b, char ***opts,
                                 size_t *nopts);

/* Appends one block's key reference (a Markdown table) to out. */
int sl__config_keys_table(sl_buf *out, const char *title, const key *keys, size_t n);
/* Appends rows for more keys to the table keys_table() began. */
int sl__config_keys_rows(sl_buf *out, const key *keys, size_t n);

/* Frees what the loader put in a struct read with keys (strings, lists). */
void sl__config_free_keys(const key *keys, size_t n, void *obj);

void sl__config_free_lines(char **v, size_t n);

/* ---- config_rules.c: rules, their lane overrides, lanes -------------------- */

void sl__config_read_pattern(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r);
void sl__config_read_input(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r);
/* rule.retry { … } (the value at idx) into field. */
void sl__config_read_retry(loader *ld, int idx, const key *k, const block *b, void *field);
/* rule "NAME" { … } and lane "NAME" { … } (body at idx). */
void sl__config_read_rule(loader *ld, int body, const char *name, int line);
void sl__config_read_lane(loader *ld, int body, const char *name, int line);
/* The key tables of rule, rule.retry, lane and lanes, in that order. */
int sl__config_rules_markdown(sl_buf *out);
/* lanes.auto = true / lanes { auto = true }, as the file left them. */
void sl__config_read_lanes_settings(loader *ld);

/* ---- config_sources.c: targets and sources ------------------------------- */

void sl__config_read_targets(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r);
void sl__config_read_source(loader *ld, int body, const char *kind, int line);
/* rule r's dlq as a target.set { set = r->dlq } in r->dlq_target. */
void sl__config_dlq_target(loader *ld, sl_rule_config *r);
/* Frees a target's or a source's strings and own config (not the struct). */
void sl__config_free_target(sl_target_config *tc);
void sl__config_free_source(sl_source_config *sc);
/* The key tables of every target kind, then every source kind. */
int sl__config_kinds_markdown(sl_buf *out);

/* ---- config_schedule.c: schedules ------------------------------------------ */

/* schedule "NAME" { … } (body at idx). */
void sl__config_read_schedule(loader *ld, int body, const char *name, int line);
/* What needs the whole file: every schedule's set is declared. */
void sl__config_check_schedules(loader *ld);
/* The key table of schedule. */
int sl__config_schedule_markdown(sl_buf *out);

/* ---- config_check.c: the checks that need the whole file ----------------- */

void sl__config_cross_check(loader *ld);
void sl__config_check_sources(loader *ld);

/* ---- config.c: server, sets, the walk ------------------------------------ */

void sl__config_read_schemas(loader *ld, int idx, const key *k, const block *b, sl_set_decl *d);
void sl__config_read_set_body(loader *ld, int idx, sl_set_config *sc, const block *b, void *decl);
void sl__config_read_api_keys(loader *ld, int idx, const key *k, const block *b);
void sl__config_read_kafka(loader *ld, int idx, const key *k, const block *b);
void sl__config_free_kafka(sl_config *cfg);
void sl__config_read_aws(loader *ld, int idx, const key *k, const block *b);
void sl__config_free_aws(sl_config *cfg);
void sl__config_read_aws_creds(loader *ld, int idx, const key *k, const block *b);
int sl__config_aws_markdown(sl_buf *out);
const sl_set_decl *sl__config_find_set(const sl_config *cfg, const char *name);
void sl__config_free_rule(sl_rule_config *r);

#endif
