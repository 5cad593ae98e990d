/*
 * core/bus/conf_key.h — the key tables connectors declare their config
 * blocks with (Fluent Bit's config_map): one entry per key of
 * target.KIND { … } or source.KIND { … } gives its name, how its value is
 * read, where it goes in the kind's own config struct, its range, its
 * default (for the docs) and its meaning. The config loader (server/) reads
 * every type generically: a connector only declares its table, its struct
 * and its defaults, and `sluice check --keys` prints the same table into
 * docs/config.md, so code and docs cannot drift.
 */
#ifndef SL_CONF_KEY_H
#define SL_CONF_KEY_H

#include <stddef.h>
#include <stdint.h>

/* How a key's value is read, and the C type of its field. */
typedef enum sl_conf_key_type {
    SL_KEY_STRING,   /* char * (owned) */
    SL_KEY_PATH,     /* char *: a string, resolved against the config file's folder */
    SL_KEY_BOOL,     /* bool */
    SL_KEY_INT,      /* an integer within [min, max], a field of `size` bytes */
    SL_KEY_SIZE,     /* "128MiB" or a number of bytes, within [min, max] */
    SL_KEY_DURATION, /* "7d", "250ms" or a number of ms; "forever" = -1 when min < 0 */
    SL_KEY_START,    /* "beginning" | "end" -> bool (true: beginning) */
    SL_KEY_HEADERS,  /* { ["Name"] = "value" } -> char ** "Name: value" lines, then size_t count */
    SL_KEY_AUTH,    /* { bearer = … } | { basic = {…} } | { api_key = {…} } -> sl_conf_auth */
    SL_KEY_BODY,    /* "structured" | "binary" | "data" -> sl_http_body */
    SL_KEY_PROPS,   /* { ["name"] = string | number | boolean } -> char ** "name=value", count */
    SL_KEY_STRINGS, /* a string or a list of strings -> char **, then size_t count */
    SL_KEY_PARSE,   /* "json" | "text" | a function -> sl_source_parse */
    SL_KEY_LONGLINES, /* "split" | "skip" -> bool (true: split) */
    SL_KEY_ENCODING,  /* "hex" | "base64" -> bool (true: base64) */
    SL_KEY__COUNT     /* the config loader's own block types are numbered from here */
} sl_conf_key_type;

typedef struct sl_conf_key {
    const char *name;
    int type;         /* an sl_conf_key_type (or one of the loader's own block types) */
    size_t off, size; /* the field in the kind's config struct: SL_CONF_FIELD(T, f) */
    int64_t min, max; /* INT, SIZE, DURATION */
    const char *dflt; /* for the docs ("" none) */
    const char *doc;
} sl_conf_key;

#define SL_CONF_FIELD(T, f) offsetof(T, f), sizeof(((T *)0)->f)

/* How target.http (and target.kafka) sends a payload (SL_KEY_BODY). */
typedef enum sl_http_body {
    SL_HTTP_BODY_STRUCTURED, /* the CloudEvent as JSON (application/cloudevents+json) */
    SL_HTTP_BODY_BINARY,     /* data as the body, attributes as ce-* headers */
    SL_HTTP_BODY_DATA,       /* the payload alone (what `input` made, or the data) */
} sl_http_body;

/* How source.file turns a line into an event (SL_KEY_PARSE). */
typedef enum sl_source_parse {
    SL_PARSE_JSON, /* a CloudEvent as it is; other JSON becomes data; non-JSON: text data */
    SL_PARSE_TEXT, /* the line is text data */
    SL_PARSE_LUA,  /* parse = function(line) … end (see docs/sources.md) */
} sl_source_parse;

/* auth = { … } (SL_KEY_AUTH): at most one of the three is set. Owned. */
typedef struct sl_conf_auth {
    char *bearer;                   /* auth.bearer */
    char *basic_user, *basic_pass;  /* auth.basic */
    char *api_key_header, *api_key; /* auth.api_key */
    /* auth.oauth: OAuth 2.0 client credentials (connectors/oauth.h) */
    char *oauth_url, *oauth_id, *oauth_secret, *oauth_method, *oauth_params;
} sl_conf_auth;

#endif
