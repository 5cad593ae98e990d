/*
 * server/config_sources.c — the connector blocks of the config loader:
 * target.KIND { … } (a rule's target or targets) and source.KIND { … },
 * built-in kinds through their key tables, plugin kinds through their
 * declared keys.
 */
#include "server/config_internal.h"

#include "core/bus/plugin.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const key file_target_keys[] = {
    {"path", K_STRING, FIELD(sl_target_config, path), 0, 0, "required",
     "the NDJSON file (relative to the config file)"},
    {"rotate_bytes", K_SIZE, FIELD(sl_target_config, rotate_bytes), 0, INT64_MAX, "never",
     "rename the file to PATH.1 (PATH.1 to PATH.2, …) once it passes this size"},
    {"keep", K_INT, FIELD(sl_target_config, keep), 1, 1000, "5", "rotated files kept"},
};

static const key set_target_keys[] = {
    {"set", K_STRING, FIELD(sl_target_config, set), 0, 0, "required",
     "the event set to append to (declared with `set`); events keep their lane"},
};

static const key http_target_keys[] = {
    {"url", K_STRING, FIELD(sl_target_config, url), 0, 0, "required",
     "the endpoint; `{attribute}` is replaced by the event's attribute (URL-encoded), e.g. "
     "`https://x/{subject}`"},
    {"method", K_STRING, FIELD(sl_target_config, method), 0, 0, "\"POST\"", "HTTP method"},
    {"headers", K_HEADERS, FIELD(sl_target_config, headers), 0, 0, "none",
     "`{ [\"Name\"] = \"value\" }` sent with every request"},
    {"auth", K_AUTH, 0, 0, 0, 0, "none",
     "`{ bearer = env \"TOKEN\" }`, `{ basic = { user = …, password = … } }` or "
     "`{ api_key = { header = \"X-Api-Key\", value = … } }`"},
    {"tls_verify", K_BOOL, FIELD(sl_target_config, tls_verify), 0, 0, "true",
     "verify the server's certificate and name"},
    {"ca_file", K_STRING, FIELD(sl_target_config, ca_file), 0, 0, "system",
     "CA bundle for the server's certificate"},
    {"connect_timeout", K_DURATION, FIELD(sl_target_config, connect_timeout_ms), 1, 600000,
     "\"5s\"", "time to connect"},
    {"timeout", K_DURATION, FIELD(sl_target_config, timeout_ms), 1, 3600000, "\"30s\"",
     "time for a whole request"},
    {"concurrency", K_INT, FIELD(sl_target_config, concurrency), 1, 1024, "8",
     "requests in flight for this rule"},
    {"rate", K_INT, FIELD(sl_target_config, rate), 0, 1000000, "unlimited",
     "requests per second at most (EventBridge API destinations' invocation rate)"},
    {"body", K_BODY, FIELD(sl_target_config, body), 0, 0, "\"structured\"",
     "\"structured\": the CloudEvent as JSON; \"binary\": data as the body and ce-* headers; "
     "\"data\": the payload alone (what `input` made)"},
    {"batch", K_INT, FIELD(sl_target_config, batch), 1, 10000, "1",
     "payloads per request, sent as a JSON array when more than 1"},
};

static const key kafka_target_keys[] = {
    {"brokers", K_STRING, FIELD(sl_target_config, brokers), 0, 0, "required",
     "bootstrap servers, `\"host:9092,host2:9092\"`"},
    {"topic", K_STRING, FIELD(sl_target_config, topic), 0, 0, "required",
     "the topic; `{attribute}` is replaced by the event's attribute, e.g. `\"orders-{type}\"` "
     "(an event without the attribute is refused, permanently)"},
    {"key", K_STRING, FIELD(sl_target_config, key), 0, 0, "partitionkey, else subject",
     "the record key, a template like `topic` (an event without the attribute is refused, "
     "permanently)"},
    {"body", K_BODY, FIELD(sl_target_config, body), 0, 0, "\"binary\"",
     "\"binary\": data as the value, attributes as `ce_*` headers; \"structured\": the "
     "CloudEvent as JSON; \"data\": the payload alone (CloudEvents Kafka binding)"},
    {"compression", K_STRING, FIELD(sl_target_config, compression), 0, 0, "\"zstd\"",
     "`compression.type`: none, gzip, snappy, lz4 or zstd"},
    {"headers", K_HEADERS, FIELD(sl_target_config, headers), 0, 0, "none",
     "`{ [\"name\"] = \"value\" }` record headers added to every record"},
    {"timeout", K_DURATION, FIELD(sl_target_config, timeout_ms), 1, INT32_MAX, "\"30s\"",
     "`message.timeout.ms`: a record not acknowledged by then is retried by the rule"},
    {"properties", K_PROPS, FIELD(sl_target_config, properties), 0, 0, "none",
     "any librdkafka producer property, e.g. `{ [\"linger.ms\"] = 5, [\"security.protocol\"] "
     "= \"sasl_ssl\" }` (set last: they win over the keys above)"},
};

/* Keys every source block takes. */
#define SOURCE_COMMON_KEYS                                                                         \
    {"name",                                                                                       \
     K_STRING,                                                                                     \
     FIELD(sl_source_config, name),                                                                \
     0,                                                                                            \
     0,                                                                                            \
     "KIND-SET",                                                                                   \
     "unique among sources; its state lives in DATA/sources/NAME"},                                \
        {"set",                                                                                    \
         K_STRING,                                                                                 \
         FIELD(sl_source_config, set),                                                             \
         0,                                                                                        \
         0,                                                                                        \
         "required",                                                                               \
         "the event set the events go to (declared with `set`)"},                                  \
        {"lane",                                                                                   \
         K_STRING,                                                                                 \
         FIELD(sl_source_config, lane),                                                            \
         0,                                                                                        \
         0,                                                                                        \
         "base",                                                                                   \
         "lane stamped on every event (an event naming another lane is refused)"},                 \
        {"type",                                                                                   \
         K_STRING,                                                                                 \
         FIELD(sl_source_config, type),                                                            \
         0,                                                                                        \
         0,                                                                                        \
         "per kind",                                                                               \
         "CloudEvent `type` of payloads that are not CloudEvents"},                                \
    {                                                                                              \
        "source", K_STRING, FIELD(sl_source_config, source), 0, 0, "per kind",                     \
            "CloudEvent `source` of payloads that are not CloudEvents"                             \
    }

#define SOURCE_START_KEY                                                                           \
    {                                                                                              \
        "start", K_START, FIELD(sl_source_config, from_beginning), 0, 0, "\"end\"",                \
            "where a source without a stored position starts: \"beginning\" or \"end\""            \
    }

static const key file_source_keys[] = {
    SOURCE_COMMON_KEYS,
    SOURCE_START_KEY,
    {"path", K_STRING, FIELD(sl_source_config, path), 0, 0, "required",
     "a file or a glob (`/var/log/app/*.log`), relative to the config file; new matches are "
     "picked up"},
    {"parse", K_PARSE, FIELD(sl_source_config, parse), 0, 0, "\"json\"",
     "\"json\": a CloudEvent as it is, other JSON as data, anything else as text; \"text\": "
     "the line as text data; `function(line) … end`: what it returns (docs/sources.md)"},
    {"multiline", K_STRING, FIELD(sl_source_config, multiline), 0, 0, "off",
     "an extended regex (POSIX) a line must match to start a new event; other lines join "
     "the event before them"},
    {"multiline_timeout", K_DURATION, FIELD(sl_source_config, multiline_timeout_ms), 1, 3600000,
     "\"1s\"", "a multi-line event is complete after this long without a new line"},
    {"max_line", K_SIZE, FIELD(sl_source_config, max_line), 16, 64 << 20, "\"256KiB\"",
     "longest line (or multi-line event) kept whole; keep it below the set's `max_event` "
     "(a piece and its envelope must fit)"},
    {"long_lines", K_LONGLINES, FIELD(sl_source_config, split_long), 0, 0, "\"split\"",
     "what happens to a longer line: \"split\" into max_line pieces or \"skip\" (counted)"},
    {"poll", K_DURATION, FIELD(sl_source_config, poll_ms), 10, 600000, "\"250ms\"",
     "how often files are checked and the glob is expanded again (also with inotify)"},
    {"inotify", K_BOOL, FIELD(sl_source_config, inotify), 0, 0, "true",
     "wake up on inotify events; false: polling only (e.g. network file systems)"},
};

static const key webhook_source_keys[] = {
    SOURCE_COMMON_KEYS,
    {"preset", K_STRING, FIELD(sl_source_config, preset), 0, 0, "required",
     "\"github\", \"stripe\", \"slack\" or \"generic\": how requests are signed"},
    {"secret", K_STRING, FIELD(sl_source_config, secret), 0, 0, "required",
     "the signing secret; several separated by commas while rotating (use `env \"NAME\"`)"},
    {"header", K_STRING, FIELD(sl_source_config, header), 0, 0, "required for generic",
     "generic: the header carrying the signature"},
    {"algorithm", K_STRING, FIELD(sl_source_config, algorithm), 0, 0, "\"sha256\"",
     "generic: HMAC algorithm, sha1, sha256 or sha512"},
    {"encoding", K_ENCODING, FIELD(sl_source_config, base64), 0, 0, "\"hex\"",
     "generic: the signature's encoding, \"hex\" or \"base64\""},
    {"prefix", K_STRING, FIELD(sl_source_config, prefix), 0, 0, "none",
     "generic: text before the signature, e.g. \"sha256=\""},
    {"timestamp_header", K_STRING, FIELD(sl_source_config, timestamp_header), 0, 0, "none",
     "generic: a header with the Unix time; the signed content is then TIMESTAMP.BODY"},
    {"tolerance", K_DURATION, FIELD(sl_source_config, tolerance_ms), 1000, 86400000, "\"5m\"",
     "how far a signed timestamp may be from now (stripe, slack, generic)"},
    {"id_header", K_STRING, FIELD(sl_source_config, id_header), 0, 0, "none",
     "generic: the header with the delivery id used as event id and for dedupe"},
    {"dedupe", K_DURATION, FIELD(sl_source_config, dedupe_ms), 1000, 30LL * 86400000, "\"24h\"",
     "how long a delivery id is remembered: a repeat within it is not stored again"},
};

static const key kafka_source_keys[] = {
    SOURCE_COMMON_KEYS,
    SOURCE_START_KEY,
    {"brokers", K_STRING, FIELD(sl_source_config, brokers), 0, 0, "required",
     "bootstrap servers, `\"host:9092,host2:9092\"`"},
    {"topics", K_STRINGS, FIELD(sl_source_config, topics), 0, 0, "required",
     "topic names, or regexes starting with `^`; a string or a list"},
    {"group", K_STRING, FIELD(sl_source_config, group), 0, 0, "\"sluice-NAME\"",
     "consumer group; offsets are committed only after the events are stored"},
    {"properties", K_PROPS, FIELD(sl_source_config, properties), 0, 0, "none",
     "any librdkafka consumer property (set last)"},
};

/* Plugin sources take the common keys and start besides their own. */
static const key plugin_source_keys[] = {SOURCE_COMMON_KEYS, SOURCE_START_KEY};

typedef struct source_kind {
    const char *name;
    sl_source_kind kind;
    const key *keys;
    size_t nkeys;
    const char *doc;
} source_kind;

typedef struct target_kind {
    const char *name;
    sl_target_kind kind;
    const key *keys;
    size_t nkeys;
    const char *doc;
} target_kind;

static const source_kind source_kinds[] = {
    {"file", SL_SOURCE_FILE, KEYS(file_source_keys),
     "tail files: one event per line (or multi-line group), position kept in the data dir"},
    {"webhook", SL_SOURCE_WEBHOOK, KEYS(webhook_source_keys),
     "SaaS webhooks on `POST /v1/webhooks/NAME`, signature verified before anything is stored"},
    {"kafka", SL_SOURCE_KAFKA, KEYS(kafka_source_keys),
     "consume topics of an external Kafka cluster (consumer group; cooperative-sticky with "
     "librdkafka 2.3 or later, see docs/sources.md)"},
};

static const target_kind target_kinds[] = {
    {"file", SL_TARGET_FILE, KEYS(file_target_keys), "append events as NDJSON lines to a file"},
    {"set", SL_TARGET_SET, KEYS(set_target_keys), "append events to another event set"},
    {"http", SL_TARGET_HTTP, KEYS(http_target_keys),
     "send events to an HTTP endpoint (2xx delivered; 408, 429, 5xx and network errors "
     "retried, honouring Retry-After; other 4xx refused)"},
    {"kafka", SL_TARGET_KAFKA, KEYS(kafka_target_keys),
     "produce events to a topic of an external Kafka cluster (idempotent, acks=all; "
     "delivered on librdkafka's delivery report)"},
};

/* "file, set, http, kafka" plus the plugins' kinds of that family. */
static void known_kinds(const loader *ld, char *out, size_t cap, const char *builtin,
                        const char *family)
{
    char plugins[512];
    sl_plugin_kinds(ld->cfg->plugin_dir, plugins, sizeof plugins);
    size_t o = (size_t)snprintf(out, cap, "%s", builtin);
    size_t fl = strlen(family);
    for (char *p = plugins; *p && o < cap;) {
        char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > fl + 1 && strncmp(p, family, fl) == 0 && p[fl] == '.')
            o += (size_t)snprintf(out + o, cap - o, ", %.*s", (int)(n - fl - 1), p + fl + 1);
        p += n;
        while (*p == ',' || *p == ' ')
            p++;
    }
}

static sl_target_config *new_target(loader *ld, sl_rule_config *r, int line)
{
    sl_target_config *grown = realloc(r->targets, (r->ntargets + 1) * sizeof *grown);
    if (!grown) {
        ld->oom = 1;
        return NULL;
    }
    r->targets = grown;
    sl_target_config *t = &r->targets[r->ntargets++];
    memset(t, 0, sizeof *t);
    t->line = line;
    t->keep = 5;
    t->tls_verify = true;
    t->connect_timeout_ms = 5000;
    t->timeout_ms = 30000;
    t->concurrency = 8;
    t->batch = 1;
    return t;
}

/* target.NAME { … } of a plugin (the target value is at idx). */
static void read_plugin_target(loader *ld, int idx, const block *b, int line, sl_rule_config *r,
                               const sl_target_ops *ops)
{
    sl_target_config *t = new_target(ld, r, line);
    if (!t)
        return;
    t->kind = SL_TARGET_PLUGIN;
    t->plugin = ops;
    char what[200];
    snprintf(what, sizeof what, "%s: target.%s", b->what, ops->name);
    block tb = {what, line, t};
    lua_getfield(ld->L, idx, "body");
    sl__config_read_plugin_body(ld, lua_gettop(ld->L), NULL, 0, ops->keys, ops->nkeys, &tb,
                                &t->options, &t->noptions);
    lua_pop(ld->L, 1);
}

static void read_target(loader *ld, int idx, const block *b, int line, sl_rule_config *r)
{
    lua_State *L = ld->L;
    lua_getglobal(L, "__sluice_is_target");
    lua_pushvalue(L, idx);
    lua_call(L, 1, 1);
    bool is = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!is) {
        sl__config_problem(
            ld, line, "%s: a target must be made with target.KIND { … } (file, set, http, kafka)",
            b->what);
        return;
    }
    lua_getfield(L, idx, "kind");
    const char *kind = lua_tostring(L, -1);
    lua_getfield(L, idx, "line");
    int tline = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    const target_kind *tk = NULL;
    for (size_t i = 0; kind && i < sizeof target_kinds / sizeof *target_kinds; i++)
        if (strcmp(target_kinds[i].name, kind) == 0)
            tk = &target_kinds[i];
    const sl_target_ops *plugin = tk || !kind ? NULL : sl_plugin_target(kind, ld->cfg->plugin_dir);
    if (!tk && !plugin) {
        char known[600];
        known_kinds(ld, known, sizeof known, "file, set, http, kafka", "target");
        sl__config_problem(ld, tline, "%s: unknown target kind target.%s (known: %s)", b->what,
                           kind ? kind : "?", known);
        lua_pop(L, 1);
        return;
    }
    if (plugin) {
        read_plugin_target(ld, idx, b, tline, r, plugin);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    sl_target_config *t = new_target(ld, r, tline);
    if (!t)
        return;
    t->kind = tk->kind;
    t->body = tk->kind == SL_TARGET_KAFKA ? SL_HTTP_BODY_BINARY : SL_HTTP_BODY_STRUCTURED;
    char what[200];
    snprintf(what, sizeof what, "%s: target.%s", b->what, tk->name);
    block tb = {what, tline, t};
    lua_getfield(L, idx, "body");
    sl__config_check_block(ld, lua_gettop(L), tk->keys, tk->nkeys, &tb, NULL);
    lua_pop(L, 1);
    if (t->kind == SL_TARGET_FILE && t->path) {
        char *abs = sl__config_resolve_path(ld, t->path);
        free(t->path);
        t->path = abs;
    }
}

void sl__config_read_targets(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r)
{
    lua_State *L = ld->L;
    r->target_given = true;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        sl__config_problem(ld, line, "%s: %s must be a target or a list of targets", b->what,
                           k->name);
        return;
    }
    lua_getglobal(L, "__sluice_is_target");
    lua_pushvalue(L, idx);
    lua_call(L, 1, 1);
    bool single = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (single) {
        read_target(ld, idx, b, line, r);
        return;
    }
    lua_Integer n = luaL_len(L, idx);
    if (n == 0 && (lua_pushnil(L), lua_next(L, idx))) { /* neither a target nor a list */
        lua_pop(L, 2);
        sl__config_problem(
            ld, line, "%s: a target must be made with target.KIND { … } (file, set, http, kafka)",
            b->what);
        return;
    }
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        read_target(ld, lua_gettop(L), b, line, r);
        lua_pop(L, 1);
    }
}

/* source.KIND { … } (body at idx). */
void sl__config_read_source(loader *ld, int body, const char *kind, int line)
{
    sl_config *cfg = ld->cfg;
    const source_kind *sk = NULL;
    for (size_t i = 0; i < sizeof source_kinds / sizeof *source_kinds; i++)
        if (strcmp(source_kinds[i].name, kind) == 0)
            sk = &source_kinds[i];
    const sl_source_ops *plugin = sk ? NULL : sl_plugin_source(kind, cfg->plugin_dir);
    if (!sk && !plugin) {
        char known[600];
        known_kinds(ld, known, sizeof known, "file, webhook, kafka", "source");
        sl__config_problem(ld, line, "unknown source kind source.%s (known: %s)", kind, known);
        return;
    }
    sl_source_config *g = sl__config_grow(ld, cfg->sources, cfg->nsources, sizeof *g);
    if (!g)
        return;
    cfg->sources = g;
    sl_source_config *sc = &cfg->sources[cfg->nsources];
    sc->index = cfg->nsources++;
    sc->owner = cfg;
    sc->line = line;
    sc->kind = sk ? sk->kind : SL_SOURCE_PLUGIN;
    sc->kind_name = sk ? sk->name : plugin->name;
    sc->plugin = plugin;
    sc->parse = SL_PARSE_JSON;
    sc->multiline_timeout_ms = 1000;
    sc->max_line = 256 << 10; /* a piece plus its envelope fits the default max_event */
    sc->split_long = true;
    sc->poll_ms = 250;
    sc->inotify = true;
    sc->tolerance_ms = 300000;
    sc->dedupe_ms = 24LL * 3600 * 1000;
    char what[200];
    snprintf(what, sizeof what, "source.%s", sc->kind_name);
    block b = {what, line, sc};
    if (sk)
        sl__config_check_block(ld, body, sk->keys, sk->nkeys, &b, NULL);
    else
        sl__config_read_plugin_body(ld, body, KEYS(plugin_source_keys), plugin->keys, plugin->nkeys,
                                    &b, &sc->options, &sc->noptions);
    if (!sc->name && sc->set) {
        size_t n = strlen(sc->kind_name) + strlen(sc->set) + 2;
        if ((sc->name = malloc(n)))
            snprintf(sc->name, n, "%s-%s", sc->kind_name, sc->set);
        else
            ld->oom = 1;
    }
    if (sc->kind == SL_SOURCE_FILE && sc->path) {
        char *abs = sl__config_resolve_path(ld, sc->path);
        free(sc->path);
        sc->path = abs;
    }
}

int sl__config_kinds_markdown(sl_buf *out)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof target_kinds / sizeof *target_kinds; i++) {
        char title[64];
        snprintf(title, sizeof title, "target.%s { … }", target_kinds[i].name);
        rc = sl__config_keys_table(out, title, target_kinds[i].keys, target_kinds[i].nkeys);
        if (!rc)
            rc = sl_buf_printf(out, "\n%s.\n", target_kinds[i].doc);
    }
    for (size_t i = 0; !rc && i < sizeof source_kinds / sizeof *source_kinds; i++) {
        char title[64];
        snprintf(title, sizeof title, "source.%s { … }", source_kinds[i].name);
        rc = sl__config_keys_table(out, title, source_kinds[i].keys, source_kinds[i].nkeys);
        if (!rc)
            rc = sl_buf_printf(out, "\n%s.\n", source_kinds[i].doc);
    }
    return rc;
}
