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

typedef enum key_type {
    K_STRING,   /* char * */
    K_BOOL,     /* bool */
    K_TRISTATE, /* int: -1 unset, 0, 1 */
    K_INT,      /* integer of `size` bytes within [min, max] */
    K_SIZE,     /* "128MiB" or an integer number of bytes, `size` bytes */
    K_DURATION, /* "7d", "250ms" or an integer number of ms, `size` bytes; "forever" = -1 */
    K_ACK,      /* "buffer" | "durable" */
    K_CODEC,    /* "none" | "zstd" */
    K_START,    /* "beginning" | "end" -> bool from_beginning */
    K_FUNCTION, /* a Lua function: only its presence is kept (bool) */
    K_PATTERN,  /* a Lua table or a JSON string */
    K_INPUT,    /* "$.path" or { paths = {…}, template = "…" } */
    K_TARGETS,  /* a target, or a list of targets */
    K_SCHEMAS,  /* { ["type"] = "file.json" | { … } } */
    K_SETBODY,  /* a table of set keys (server.set_defaults) */
    K_HEADERS,  /* { ["Name"] = "value" } -> "Name: value" lines */
    K_AUTH,  /* { bearer = s } | { basic = { user = s, password = s } } | { api_key = { header = s,
                value = s } } */
    K_BODY,  /* "structured" | "binary" | "data" */
    K_RETRY, /* a table of retry_keys (rule.retry) */
    K_BACKOFF,   /* "exponential" | "fixed" */
    K_PROPS,     /* { ["name"] = string | number | boolean } -> "name=value" lines
                  * (the field is a char ** followed by its size_t count) */
    K_STRINGS,   /* a string or a list of strings (char ** followed by its size_t count) */
    K_PARSE,     /* "json" | "text" | a function -> sl_source_parse */
    K_LONGLINES, /* "split" | "skip" -> bool split_long */
    K_ENCODING,  /* "hex" | "base64" -> bool base64 */
    K_LANES,     /* rule.lanes: { ["LANE"] = { …override… } }, read after the rule's keys */
    K_LANEENV,   /* "boe" | "ppe" -> sl_lane_env */
    K_FALLBACK,  /* "base" | "none" -> bool fallback_base */
    K_APIKEYS,   /* server.api_keys: { NAME = { api_key_keys } } -> sl_auth_key_config[] */
} key_type;

typedef struct key {
    const char *name;
    key_type type;
    size_t off, size;
    int64_t min, max;
    const char *dflt; /* for the docs */
    const char *doc;
} key;

#define FIELD(T, f) offsetof(T, f), sizeof(((T *)0)->f)

#define KEYS(k) k, sizeof k / sizeof *k

typedef struct loader {
    sl_config *cfg;
    lua_State *L;
    sl_buf *diag;
    const char *name; /* the file name in messages */
    int nerrors;
    int oom;
    bool ran;           /* the file ran to its end: its declarations are complete */
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

/* The body of a plugin's block: common keys into the struct, the plugin's
 * own keys as "name=value" option lines. */
void sl__config_read_plugin_body(loader *ld, int idx, const key *common, size_t ncommon,
                                 const sl_plugin_key *pk, size_t npk, const block *b, char ***opts,
                                 size_t *nopts);

/* Appends one block's key reference (a Markdown table) to out. */
int sl__config_keys_table(sl_buf *out, const char *title, const key *keys, size_t n);

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
/* The key tables of every target kind, then every source kind. */
int sl__config_kinds_markdown(sl_buf *out);

/* ---- config_check.c: the checks that need the whole file ----------------- */

void sl__config_cross_check(loader *ld);
void sl__config_check_sources(loader *ld);

/* ---- config.c: server, sets, the walk ------------------------------------ */

void sl__config_read_schemas(loader *ld, int idx, const key *k, const block *b, sl_set_decl *d);
void sl__config_read_set_body(loader *ld, int idx, sl_set_config *sc, const block *b, void *decl);
void sl__config_read_api_keys(loader *ld, int idx, const key *k, const block *b);
const sl_set_decl *sl__config_find_set(const sl_config *cfg, const char *name);
void sl__config_free_rule(sl_rule_config *r);

#endif
