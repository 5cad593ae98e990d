/*
 * server/config.c — loads a Lua config file: runs it in the sandbox, walks
 * what it declared (server, sets, rules, lanes, sources; the block readers
 * are in config_keys.c, config_rules.c, config_sources.c, the checks that
 * need the whole file in config_check.c), and the look-ups and free of the
 * result.
 */
#include "server/config_internal.h"

#include "core/base/buf.h"
#include "core/base/slog.h"
#include "core/bus/event.h"
#include "core/bus/plugin.h"
#include "rules/lua_embed.h"
#include "rules/sandbox.h"
#include "server/registry.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const key server_keys[] = {
    {"listen", K_STRING, FIELD(sl_config, listen), 0, 0, "\"127.0.0.1:8080\"",
     "HTTP address HOST:PORT (the `--listen` flag wins over it)"},
    {"data_dir", K_STRING, FIELD(sl_config, data_dir), 0, 0, "\"./sluice-data\"",
     "where event sets and rule cursors live (relative to the config file)"},
    {"auto_create", K_TRISTATE, FIELD(sl_config, auto_create), 0, 0, "true",
     "create sets on their first stored event; false answers 404 for undeclared sets"},
    {"max_auto_sets", K_INT, FIELD(sl_config, max_auto_sets), 1, 10000000, "1000",
     "sets created on first use at most (declared sets do not count); past it 507 `SetLimit`"},
    {"max_auto_sets_per_client", K_INT, FIELD(sl_config, max_auto_sets_per_client), 1, 10000000,
     "a quarter of `max_auto_sets`",
     "of those, at most this many created by one client (an API key, else an IP address, IPv6 "
     "per /64, as for `rate`); past it 507 `SetLimit`"},
    {"max_request", K_SIZE, FIELD(sl_config, max_request_bytes), 1024, INT64_MAX, "\"10MiB\"",
     "largest HTTP request body"},
    {"workers", K_INT, FIELD(sl_config, workers), 1, 256, "CPUs",
     "rule worker threads (each has its own Lua state)"},
    {"lua_memory", K_SIZE, FIELD(sl_config, lua_memory), 1 << 20, INT64_MAX, "\"64MiB\"",
     "memory cap of each Lua state"},
    {"lua_instructions", K_INT, FIELD(sl_config, lua_instructions), 1000, INT64_MAX, "10000000",
     "instruction budget of each Lua call"},
    {"plugin_dir", K_STRING, FIELD(sl_config, plugin_dir), 0, 0, "none",
     "a folder of connector plugins (`*.so`, plugins/README.md), loaded before the sources "
     "and targets are read (relative to the config file)"},
    {"set_defaults", K_SETBODY, FIELD(sl_config, set_defaults), 0, 0, "",
     "set keys (as in `set`) for sets created on first use"},
    {"api_keys", K_APIKEYS, 0, 0, 0, 0, "none (no auth)",
     "`{ NAME = { sha256 = \"…\", publish = {…}, read = {…}, admin = false, metrics = false } }`: "
     "API keys (docs/security.md); with none, every request is allowed"},
    {"insecure", K_BOOL, FIELD(sl_config, insecure), 0, 0, "false",
     "allow listening on a non-loopback address without API keys (`--insecure`)"},
    {"tls_cert", K_STRING, FIELD(sl_config, tls_cert), 0, 0, "none",
     "PEM certificate (chain) file: serve HTTPS (relative to the config file; `--tls-cert`)"},
    {"tls_key", K_STRING, FIELD(sl_config, tls_key), 0, 0, "none",
     "PEM private key file of `tls_cert` (`--tls-key`)"},
    {"kafka_listen", K_STRING, FIELD(sl_config, kafka_listen), 0, 0, "none (off)",
     "Kafka protocol address HOST:PORT: Kafka clients produce, fetch and run consumer groups "
     "on the sets (docs/kafka-protocol.md; the `--kafka-listen` flag wins over it)"},
    {"kafka_advertised", K_STRING, FIELD(sl_config, kafka_advertised), 0, 0, "`kafka_listen`",
     "HOST:PORT Kafka clients are told to connect to (Metadata, FindCoordinator): set it when "
     "they reach sluice through another name or port"},
    {"max_batch", K_INT, FIELD(sl_config, max_batch), 1, 10000000, "10000",
     "most events in one publish request; more gets 413 `TooManyEvents`"},
    {"rate", K_INT, FIELD(sl_config, rate), 0, 100000000, "0 (unlimited)",
     "events a second each client may publish (per API key, or per IP address without keys); "
     "past it 429 with Retry-After"},
    {"burst", K_INT, FIELD(sl_config, burst), 0, 100000000, "`rate`",
     "events a client may publish at once above `rate`"},
    {"max_connections", K_INT, FIELD(sl_config, max_connections), 1, 1000000, "4096",
     "open HTTP connections; past it 503 `TooManyConnections`"},
    {"max_connections_per_ip", K_INT, FIELD(sl_config, max_connections_per_ip), 0, 1000000,
     "0 (unlimited)",
     "open HTTP connections from one IP address; past it new ones are closed "
     "at accept"},
    {"max_body_memory", K_SIZE, FIELD(sl_config, max_body_memory), 65536, INT64_MAX, "\"256MiB\"",
     "request bodies held in memory at once, server-wide; past it 503 `Backpressure` (requests "
     "without an API key, on a server with keys, get a quarter of it)"},
    {"max_open_partitions", K_INT, FIELD(sl_config, max_open_partitions), 1, 10000000,
     "descriptor limit / 16",
     "partitions whose log is kept open at once; past it the least recently used idle one is "
     "closed (parked) until its next use (docs/operations.md)"},
    {"partition_idle", K_DURATION, FIELD(sl_config, partition_idle_ms), 1000, INT64_MAX, "\"5m\"",
     "a partition nobody reads or writes for this long is closed (parked) until its "
     "next use"},
    {"log_format", K_STRING, FIELD(sl_config, log_format), 0, 0, "\"logfmt\"",
     "server log lines: \"logfmt\" or \"json\" (the `--log-format` flag wins over it); "
     "re-applied on reload"},
    {"log_level", K_STRING, FIELD(sl_config, log_level), 0, 0, "\"info\"",
     "lowest level logged: \"debug\", \"info\", \"warn\" or \"error\" (`--log-level` wins); "
     "re-applied on reload"},
    {"kafka", K_KAFKA, FIELD(sl_config, kafka), 0, 0, "none",
     "`{ brokers = \"…\", … }` (`server.kafka` below): the Kafka cluster that sets with "
     "`backend = \"kafka\"` live on (docs/scale-out.md)"},
    {"aws", K_AWS, FIELD(sl_config, aws), 0, 0, "none (loopback only, unsigned)",
     "`{ region = \"us-east-1\", account = \"000000000000\", credentials = { AKID = { secret = "
     "env \"AWS_SECRET\" } } }` (`server.aws` below): the EventBridge API on `POST /` "
     "(docs/eventbridge-api.md)"},
};

/* server.kafka { … } (core/base/kafka_admin.h). */
static const key kafka_keys[] = {
    {"brokers", K_STRING, FIELD(sl_config_kafka, brokers), 0, 0, "required",
     "bootstrap servers, `\"HOST:PORT,HOST:PORT\"`"},
    {"topic_prefix", K_STRING, FIELD(sl_config_kafka, topic_prefix), 0, 0, "\"sluice.\"",
     "a set's topic is PREFIX..NAME unless the set names its `topic`; the rules' cursors are in "
     "PREFIX..`cursors`"},
    {"group_prefix", K_STRING, FIELD(sl_config_kafka, group_prefix), 0, 0, "\"sluice.set.\"",
     "the consumer group that runs a set's rules is PREFIX..NAME"},
    {"client_id", K_STRING, FIELD(sl_config_kafka, client_id), 0, 0, "\"sluice\"",
     "`client.id` of sluice's Kafka clients (each adds a suffix: `-orders-producer`, …)"},
    {"properties", K_PROPS, FIELD(sl_config_kafka, properties), 0, 0, "none",
     "librdkafka properties for every client (`security.protocol`, SASL, TLS files, …)"},
    {"session_timeout", K_DURATION, FIELD(sl_config_kafka, session_timeout_ms), 1000, 3600000,
     "\"10s\"",
     "the set groups' `session.timeout.ms`: how long the partitions of a router that died wait "
     "before another router takes them"},
    {"delivery_timeout", K_DURATION, FIELD(sl_config_kafka, delivery_timeout_ms), 1000, 3600000,
     "\"30s\"",
     "`ack = \"durable\"` sets: a record the cluster has not acknowledged within this fails "
     "(its publisher gets an error; buffer sets retry without a limit)"},
};

void sl__config_read_kafka(loader *ld, int idx, const key *k, const block *b)
{
    sl_config *cfg = b->obj;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (lua_type(ld->L, idx) != LUA_TTABLE) {
        sl__config_problem(ld, line, "%s: kafka must be a table { brokers = \"HOST:PORT\", … }",
                           b->what);
        return;
    }
    cfg->kafka.present = true;
    cfg->kafka.line = line;
    block kb = {"server.kafka", line, &cfg->kafka};
    sl__config_check_block(ld, idx, kafka_keys, sizeof kafka_keys / sizeof *kafka_keys, &kb, NULL);
    if (!cfg->kafka.brokers || !cfg->kafka.brokers[0])
        sl__config_problem(ld, line, "server.kafka needs brokers = \"HOST:PORT,…\"");
}

void sl__config_free_kafka(sl_config *cfg)
{
    sl__config_free_keys(kafka_keys, sizeof kafka_keys / sizeof *kafka_keys, &cfg->kafka);
}

/* server.api_keys.NAME { … } (core/bus/auth.h). */
static const key api_key_keys[] = {
    {"sha256", K_STRING, FIELD(sl_auth_key_config, sha256), 0, 0, "required",
     "SHA-256 of the token, 64 hex digits (`sluice key new` prints it; never the token)"},
    {"publish", K_STRINGS, FIELD(sl_auth_key_config, publish), 0, 0, "none",
     "set names or globs (`\"audit.*\"`, `\"*\"`) the key may publish to (and redrive into "
     "and out of)"},
    {"read", K_STRINGS, FIELD(sl_auth_key_config, read), 0, 0, "none",
     "set names or globs whose events and details the key may read"},
    {"admin", K_BOOL, FIELD(sl_auth_key_config, admin), 0, 0, "false",
     "every right: rules, replays, lanes, pattern tests, metrics, every set"},
    {"metrics", K_BOOL, FIELD(sl_auth_key_config, metrics), 0, 0, "false", "GET /metrics"},
};

static const key set_keys[] = {
    {"partitions", K_INT, FIELD(sl_set_config, partitions), 1, 1024, "4",
     "partitions (fixed once the set exists)"},
    {"ack", K_ACK, FIELD(sl_set_config, ack), 0, 0, "\"durable\"",
     "\"durable\": answer after fdatasync; \"buffer\": once in the Databus buffer"},
    {"compression", K_CODEC, FIELD(sl_set_config, compression), 0, 0, "\"none\"",
     "batch compression: \"none\" or \"zstd\""},
    {"retention", K_DURATION, FIELD(sl_set_config, log.retention_ms), -1, INT64_MAX, "\"7d\"",
     "delete segments older than this; \"forever\" keeps them"},
    {"retention_bytes", K_SIZE, FIELD(sl_set_config, log.retention_bytes), -1, INT64_MAX,
     "unlimited", "delete the oldest segments of a partition past this size"},
    {"segment_bytes", K_SIZE, FIELD(sl_set_config, log.segment_bytes), 1024, UINT32_MAX,
     "\"128MiB\"", "roll to a new segment past this size"},
    {"segment_age", K_DURATION, FIELD(sl_set_config, log.segment_ms), 0, INT64_MAX, "\"7d\"",
     "roll to a new segment when the active one is older"},
    {"max_event", K_SIZE, FIELD(sl_set_config, max_event_bytes), 256, 16 << 20, "\"1MiB\"",
     "largest event accepted"},
    {"generate_ids", K_BOOL, FIELD(sl_set_config, generate_ids), 0, 0, "false",
     "give events without an id a UUIDv7 instead of refusing them"},
    {"linger", K_DURATION, FIELD(sl_set_config, linger_ms), 0, 60000, "\"2ms\"",
     "how long the Databus waits to fill a batch"},
    {"batch_bytes", K_SIZE, FIELD(sl_set_config, batch_bytes), 1024, 64 << 20, "\"1MiB\"",
     "largest batch the Databus writes"},
    {"buffer_bytes", K_SIZE, FIELD(sl_set_config, buffer_bytes), 1024, INT64_MAX, "\"8MiB\"",
     "Databus buffer per partition; beyond it publishers get 503"},
    {"backend", K_BACKEND, FIELD(sl_set_config, backend), 0, 0, "\"log\"",
     "where the partitions live: \"log\" (the embedded log in `data_dir`) or \"kafka\" (a "
     "topic on `server.kafka`'s cluster, shared by every router: docs/scale-out.md)"},
    {"topic", K_TOPIC, FIELD(sl_set_config, topic), 0, 0, "`topic_prefix`..NAME",
     "`backend = \"kafka\"`: the set's topic"},
    {"replication", K_INT, FIELD(sl_set_config, replication), 1, 32767, "the cluster's default",
     "`backend = \"kafka\"`: replication factor of a topic sluice creates"},
    {"schemas", K_SCHEMAS, 0, 0, 0, 0, "none",
     "`{ [\"type\"] = \"file.json\" | { …schema… } }`: JSON Schemas checked at ingest "
     "(docs/schemas.md)"},
};

void sl__config_read_schemas(loader *ld, int idx, const key *k, const block *b, sl_set_decl *d)
{
    lua_State *L = ld->L;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        sl__config_problem(ld, line, "%s: schemas must map event types to schema files", b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int vi = lua_gettop(L);
        if (lua_type(L, -2) != LUA_TSTRING) {
            sl__config_problem(ld, line, "%s: schemas: keys are event types (strings)", b->what);
            lua_pop(L, 1);
            continue;
        }
        const char *type = lua_tostring(L, -2);
        sl_schema *s = NULL;
        sl_error err = {0};
        int rc = 0;
        if (lua_type(L, vi) == LUA_TSTRING) {
            char *p = sl__config_resolve_path(ld, lua_tostring(L, vi));
            rc = p ? sl_schema_compile_file(p, &s, &err) : SL_ENOMEM;
            free(p);
        } else if (lua_istable(L, vi)) {
            char *json = sl__config_lua_to_json(ld, vi, line, "schema");
            rc = json ? sl_schema_compile(json, strlen(json), &s, &err) : SL_EINVAL;
            free(json);
        } else {
            rc = sl_error_set(&err, SL_EINVAL, "want a file name or a schema table");
        }
        if (rc) {
            sl__config_problem(ld, line, "%s: schema for \"%s\": %s", b->what, type,
                               err.msg[0] ? err.msg : sl_strerror(rc));
        } else {
            sl_schema_entry *g = realloc(d->schemas, (d->nschemas + 1) * sizeof *g);
            char *t = sl__config_dup(ld, type, strlen(type));
            if (!g || !t) {
                if (g)
                    d->schemas = g;
                free(t);
                sl_schema_free(s);
                ld->oom = 1;
            } else {
                d->schemas = g;
                d->schemas[d->nschemas++] = (sl_schema_entry){t, s};
            }
        }
        lua_pop(L, 1);
    }
}

void sl__config_read_set_body(loader *ld, int idx, sl_set_config *sc, const block *b, void *decl)
{
    if (decl) {
        sl__config_check_block(ld, idx, set_keys, sizeof set_keys / sizeof *set_keys, b, decl);
        return;
    }
    /* set_defaults: schemas belong to declared sets only */
    sl__config_check_block(ld, idx, set_keys, sizeof set_keys / sizeof *set_keys - 1, b, NULL);
    if (sc->backend != SL_BACKEND_LOG)
        sl__config_problem(ld, sl__config_key_line(ld, b->line, "backend"),
                           "%s: sets created on first use are local: declare a Kafka-backed "
                           "set with set \"NAME\" { backend = \"kafka\" }",
                           b->what);
}

/* server.api_keys = { NAME = { sha256 = …, publish = …, read = …, admin = …,
 * metrics = … } }: each entry checked with api_key_keys, then as a whole
 * (name, hash, patterns) by sl_auth_new(), which the server runs again. */
void sl__config_read_api_keys(loader *ld, int idx, const key *k, const block *b)
{
    lua_State *L = ld->L;
    sl_config *cfg = b->obj;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (lua_type(L, idx) != LUA_TTABLE) {
        sl__config_problem(
            ld, line, "%s: api_keys must be a table { NAME = { sha256 = \"…\", … } }", b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TTABLE) {
            sl__config_problem(ld, line, "%s: api_keys entries are NAME = { sha256 = \"…\", … }",
                               b->what);
            lua_pop(L, 1);
            continue;
        }
        const char *name = lua_tostring(L, -2);
        char what[160];
        snprintf(what, sizeof what, "%s: api key \"%.64s\"", b->what, name);
        sl_auth_key_config *g = sl__config_grow(ld, cfg->api_keys, cfg->napi_keys, sizeof *g);
        if (!g) {
            lua_pop(L, 1);
            continue;
        }
        cfg->api_keys = g;
        sl_auth_key_config *kc = &cfg->api_keys[cfg->napi_keys++];
        kc->name = sl__config_dup(ld, name, strlen(name));
        kc->line = line;
        block kb = {what, line, kc};
        sl__config_check_block(ld, lua_gettop(L), api_key_keys,
                               sizeof api_key_keys / sizeof *api_key_keys, &kb, NULL);
        if (!kc->sha256)
            sl__config_problem(ld, line, "%s needs sha256 (the hash `sluice key new` prints)",
                               what);
        lua_pop(L, 1);
    }
    /* The checks of core/bus/auth.c, over the whole table (names, hashes,
     * duplicates, patterns): the first mistake is reported. */
    sl_auth *a = NULL;
    sl_error err = {0};
    bool complete = true;
    for (size_t i = 0; i < cfg->napi_keys; i++)
        complete &= cfg->api_keys[i].sha256 != NULL && cfg->api_keys[i].name != NULL;
    if (complete && sl_auth_new(cfg->api_keys, cfg->napi_keys, &a, &err))
        sl__config_problem(ld, line, "%s: %s", b->what, err.msg[0] ? err.msg : "out of memory");
    sl_auth_free(a);
}

const sl_set_decl *sl__config_find_set(const sl_config *cfg, const char *name)
{
    for (size_t i = 0; name && i < cfg->nsets; i++)
        if (strcmp(cfg->sets[i].name, name) == 0)
            return &cfg->sets[i];
    return NULL;
}

/* "HOST:PORT" with a port 0..65535 (1.. unless zero_ok) and a host without
 * blanks (IPv6 in brackets keeps its colons inside them). */
static bool host_port_ok(const char *s, bool zero_ok)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || strpbrk(s, " \t\r\n"))
        return false;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    return *end == '\0' && end != colon + 1 && p >= (zero_ok ? 0 : 1) && p <= 65535;
}

static void read_decl(loader *ld, int idx)
{
    lua_State *L = ld->L;
    lua_getfield(L, idx, "kind");
    lua_getfield(L, idx, "name");
    lua_getfield(L, idx, "line");
    lua_getfield(L, idx, "body");
    const char *kind = lua_tostring(L, -4);
    const char *name = lua_tostring(L, -3);
    int line = (int)lua_tointeger(L, -2);
    int body = lua_gettop(L);
    char what[200];
    sl_config *cfg = ld->cfg;
    /* The file wins over the EventBridge API's chunk: a name both declare
     * is the file's (the API refuses such names; a file edited since then
     * takes the name over, and says so). A bus the file declares too is the
     * same set. */
    if (ld->in_api && name &&
        ((strcmp(kind, "rule") == 0 && sl_config_rule(cfg, name)) ||
         (strcmp(kind, "set") == 0 && sl__config_find_set(cfg, name)))) {
        if (strcmp(kind, "rule") == 0)
            sl_slog(SL_SLOG_WARN, "config",
                    "rule %s: the config file declares it; the EventBridge API's rule of that "
                    "name is not run (delete it with `aws events delete-rule`)",
                    name);
        lua_pop(L, 4);
        return;
    }
    if (strcmp(kind, "server") == 0) {
        block b = {"server", line, cfg};
        sl__config_check_block(ld, body, server_keys, sizeof server_keys / sizeof *server_keys, &b,
                               NULL);
        if (cfg->kafka_listen && !host_port_ok(cfg->kafka_listen, true))
            sl__config_problem(ld, line, "server: kafka_listen \"%s\" is not HOST:PORT",
                               cfg->kafka_listen);
        if (cfg->kafka_advertised && !host_port_ok(cfg->kafka_advertised, false))
            sl__config_problem(ld, line,
                               "server: kafka_advertised \"%s\" is not HOST:PORT (a host name "
                               "or address and a port 1..65535)",
                               cfg->kafka_advertised);
        if (cfg->log_format && sl_slog_parse_format(cfg->log_format, &(sl_slog_format){0}))
            sl__config_problem(ld, line, "server: log_format must be \"logfmt\" or \"json\"");
        if (cfg->log_level && sl_slog_parse_level(cfg->log_level, &(sl_slog_level){0}))
            sl__config_problem(ld, line,
                               "server: log_level must be \"debug\", \"info\", \"warn\" or "
                               "\"error\"");
    } else if (strcmp(kind, "set") == 0) {
        snprintf(what, sizeof what, "set \"%s\"", name);
        if (!sl_set_name_valid(name))
            sl__config_problem(
                ld, line, "%s: a set name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .",
                what);
        else if (sl__config_find_set(cfg, name))
            sl__config_problem(ld, line, "%s is declared twice", what);
        sl_set_decl *g = sl__config_grow(ld, cfg->sets, cfg->nsets, sizeof *g);
        if (g) {
            cfg->sets = g;
            sl_set_decl *d = &cfg->sets[cfg->nsets++];
            d->name = sl__config_dup(ld, name, strlen(name));
            d->line = line;
            d->api = ld->in_api;
            d->cfg = cfg->set_defaults;
            block b = {what, line, &d->cfg};
            sl__config_read_set_body(ld, body, &d->cfg, &b, d);
        }
    } else if (strcmp(kind, "rule") == 0) {
        sl__config_read_rule(ld, body, name, line);
    } else if (strcmp(kind, "lane") == 0) {
        sl__config_read_lane(ld, body, name, line);
    } else if (strcmp(kind, "source") == 0) {
        sl__config_read_source(ld, body, name, line);
    } else if (strcmp(kind, "schedule") == 0) {
        sl__config_read_schedule(ld, body, name, line);
    }
    lua_pop(L, 4);
}

/* server.plugin_dir: the plugins' kinds must be known before the sources
 * and targets are read. */
static void load_plugins(loader *ld)
{
    sl_config *cfg = ld->cfg;
    if (!cfg->plugin_dir)
        return;
    char *abs = sl__config_resolve_path(ld, cfg->plugin_dir);
    if (!abs)
        return;
    free(cfg->plugin_dir);
    cfg->plugin_dir = abs;
    sl_buf diag = SL_BUF_INIT;
    if (sl_plugin_load_dir(abs, sl_registry_builtin, &diag) && sl_buf_append(&diag, "", 1) == 0) {
        for (char *p = (char *)diag.data, *nl; p && *p; p = nl ? nl + 1 : NULL) {
            nl = strchr(p, '\n');
            if (nl)
                *nl = '\0';
            if (*p)
                sl__config_problem(ld, sl__config_key_line(ld, 1, "plugin_dir"), "%s", p);
        }
    }
    sl_buf_free(&diag);
}

/* Reads what the file declared (lua_CFunction; the loader is argument 1). */
/* Most declarations one config file may make (see walk()). */
#define CONFIG_MAX_DECLS 10000

static int walk(lua_State *L)
{
    loader *ld = lua_touserdata(L, 1);
    /* Mistakes the prelude recorded while the file ran. */
    lua_getglobal(L, "__sluice_errors");
    lua_call(L, 0, 1);
    for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
        lua_geti(L, -1, i);
        lua_getfield(L, -1, "line");
        lua_getfield(L, -2, "msg");
        sl__config_problem(ld, (int)lua_tointeger(L, -2), "%s", lua_tostring(L, -1));
        lua_pop(L, 3);
    }
    lua_pop(L, 1);
    if (!ld->ran)
        return 0;
    lua_getglobal(L, "__sluice_decls");
    lua_call(L, 0, 1);
    int decls = lua_gettop(L);
    int servers = 0;
    /* A budget the instruction budget cannot give: reading a declaration
     * costs C time that grows with those read before it (duplicate look-ups,
     * arrays grown one element at a time), so a one-line loop declaring
     * 100,000 sets kept `sluice check` busy for two minutes (found with the
     * hostile configs of the config fuzzer: tests/fuzz/regress/config/). */
    if (luaL_len(L, decls) > CONFIG_MAX_DECLS) {
        lua_geti(L, decls, CONFIG_MAX_DECLS + 1);
        lua_getfield(L, -1, "line");
        sl__config_problem(
            ld, (int)lua_tointeger(L, -1),
            "too many declarations (%lld; at most %d sets, rules, sources, lanes and server "
            "blocks in one file)",
            (long long)luaL_len(L, decls), CONFIG_MAX_DECLS);
        lua_pop(L, 3);
        return 0;
    }
    /* The server block first: set_defaults applies to every set. */
    for (int pass = 0; pass < 2; pass++) {
        for (lua_Integer i = 1, n = luaL_len(L, decls); i <= n; i++) {
            ld->in_api = ld->api_from > 0 && i >= ld->api_from;
            lua_geti(L, decls, i);
            lua_getfield(L, -1, "kind");
            bool is_server = strcmp(lua_tostring(L, -1), "server") == 0;
            lua_pop(L, 1);
            if (is_server == (pass == 0)) {
                if (is_server && servers++) {
                    lua_getfield(L, -1, "line");
                    sl__config_problem(ld, (int)lua_tointeger(L, -1),
                                       "server is declared twice (one server block per file)");
                    lua_pop(L, 1);
                } else {
                    read_decl(ld, lua_gettop(L));
                }
            }
            lua_pop(L, 1);
        }
        if (pass == 0)
            load_plugins(ld);
    }
    ld->in_api = false;
    lua_pop(L, 1);
    sl__config_read_lanes_settings(ld);
    sl__config_cross_check(ld);
    sl__config_check_sources(ld);
    sl__config_check_schedules(ld);
    return 0;
}

/* Reads the whole file into cfg->source (NUL-terminated). */
static int read_file(sl_config *cfg, sl_buf *diag)
{
    sl_buf b = SL_BUF_INIT;
    sl_error err = {0};
    int rc = sl_buf_read_file(&b, cfg->path, 64u << 20, &err);
    if (!rc)
        rc = sl_buf_append(&b, "", 1);
    if (rc) {
        if (diag)
            sl_buf_printf(diag, "%s\n", err.msg[0] ? err.msg : sl_strerror(rc));
        sl_buf_free(&b);
        return rc;
    }
    cfg->source = (char *)b.data;
    cfg->source_len = b.len - 1;
    return 0;
}

int sl_config_load(const char *path, sl_config **out, sl_buf *diag)
{
    return sl_config_load_api(path, NULL, 0, NULL, out, diag);
}

/* The number of declarations made so far (after a chunk ran). */
static lua_Integer count_decls(lua_State *L)
{
    lua_getglobal(L, "__sluice_decls");
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return 0;
    }
    lua_Integer n = lua_istable(L, -1) ? luaL_len(L, -1) : 0;
    lua_pop(L, 1);
    return n;
}

int sl_config_load_api(const char *path, const char *api, size_t api_len, const char *api_name,
                       sl_config **out, sl_buf *diag)
{
    sl_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return SL_ENOMEM;
    cfg->auto_create = -1;
    sl_set_config_default(&cfg->set_defaults);
    cfg->path = strdup(path);
    const char *slash = strrchr(path, '/');
    cfg->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup("");
    if (!cfg->path || !cfg->dir) {
        sl_config_free(cfg);
        return SL_ENOMEM;
    }
    int rc = read_file(cfg, diag);
    if (rc) {
        sl_config_free(cfg);
        return rc;
    }
    loader ld = {.cfg = cfg, .diag = diag, .name = path};
    char chunkname[4096];
    snprintf(chunkname, sizeof chunkname, "@%s", path);
    sl_sandbox_options so = {.privileged_src = sl_lua_src_prelude,
                             .privileged_len = sl_lua_src_prelude_len,
                             .privileged_name = "=prelude"};
    sl_error err = {0};
    if ((rc = sl_sandbox_new(&so, &ld.L, &err))) {
        if (diag)
            sl_buf_printf(diag, "%s: %s\n", path, err.msg);
        sl_config_free(cfg);
        return rc;
    }
    lua_State *L = ld.L;
    if ((rc = sl_sandbox_load(L, cfg->source, cfg->source_len, chunkname, &err)) ||
        (rc = sl_sandbox_call(L, 0, 0, &err))) {
        /* The message already reads "FILE:LINE: …" for syntax and runtime
         * errors; budget and memory errors say so. */
        ld.nerrors++;
        if (diag)
            sl_buf_printf(diag, "%s\n", err.msg[0] ? err.msg : sl_strerror(rc));
    }
    /* The EventBridge API's declarations (http/aws_state.c writes them in
     * the prelude's vocabulary) run after the file, in the same state:
     * everything from decl api_from on is theirs. */
    if (!rc && api && api_len) {
        char apichunk[4096];
        snprintf(apichunk, sizeof apichunk, "@%s", api_name ? api_name : "aws");
        ld.api_from = count_decls(L) + 1;
        if ((rc = sl_sandbox_load(L, api, api_len, apichunk, &err)) ||
            (rc = sl_sandbox_call(L, 0, 0, &err))) {
            ld.nerrors++;
            if (diag)
                sl_buf_printf(diag, "%s\n", err.msg[0] ? err.msg : sl_strerror(rc));
        }
    }
    /* The walk reads tables the file made, which may carry metatables
     * whose methods raise errors or loop: it runs protected, with the budget. */
    ld.ran = rc == 0;
    lua_pushcfunction(L, walk);
    lua_pushlightuserdata(L, &ld);
    if (sl_sandbox_call(L, 1, 0, &err))
        sl__config_problem(&ld, 0, "while checking the declarations: %s", err.msg);
    if (cfg->data_dir && cfg->data_dir[0] != '/') {
        char *abs = sl__config_resolve_path(&ld, cfg->data_dir);
        free(cfg->data_dir);
        cfg->data_dir = abs;
    }
    for (int t = 0; t < 2; t++) { /* server.tls_cert, tls_key */
        char **f = t ? &cfg->tls_key : &cfg->tls_cert;
        if (*f && (*f)[0] != '/') {
            char *abs = sl__config_resolve_path(&ld, *f);
            free(*f);
            *f = abs;
        }
    }
    sl_sandbox_close(L);
    if (ld.oom) {
        sl_config_free(cfg);
        return SL_ENOMEM;
    }
    if (ld.nerrors || rc) {
        sl_config_free(cfg);
        return SL_EINVAL;
    }
    *out = cfg;
    return 0;
}

const sl_rule_config *sl_config_rule(const sl_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nrules; i++)
        if (cfg->rules[i].name && strcmp(cfg->rules[i].name, name) == 0)
            return &cfg->rules[i];
    return NULL;
}

const sl_rule_config *sl_config_rule_at(const sl_config *cfg, size_t i)
{
    if (i < cfg->nrules)
        return &cfg->rules[i];
    if (i - cfg->nrules < cfg->noverrides)
        return &cfg->overrides[i - cfg->nrules];
    return NULL;
}

const sl_rule_config *sl_config_override(const sl_config *cfg, size_t rule, const char *lane,
                                         size_t *at)
{
    for (size_t i = 0; lane && *lane && i < cfg->noverrides; i++)
        if (cfg->overrides[i].base == rule && strcmp(cfg->overrides[i].lane, lane) == 0) {
            if (at)
                *at = cfg->nrules + i;
            return &cfg->overrides[i];
        }
    return NULL;
}

const sl_lane_decl *sl_config_lane(const sl_config *cfg, const char *name)
{
    for (size_t i = 0; name && *name && i < cfg->nlanes; i++)
        if (cfg->lanes[i].name && strcmp(cfg->lanes[i].name, name) == 0)
            return &cfg->lanes[i];
    return NULL;
}

const sl_source_config *sl_config_source(const sl_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nsources; i++)
        if (cfg->sources[i].name && strcmp(cfg->sources[i].name, name) == 0)
            return &cfg->sources[i];
    return NULL;
}

const sl_schema *sl_config_schema(const sl_set_decl *set, const char *type, size_t type_len)
{
    for (size_t i = 0; i < set->nschemas; i++)
        if (strlen(set->schemas[i].type) == type_len &&
            memcmp(set->schemas[i].type, type, type_len) == 0)
            return set->schemas[i].schema;
    return NULL;
}

const sl_set_decl *sl_config_set(const sl_config *cfg, const char *name)
{
    return sl__config_find_set(cfg, name);
}

int sl_config_check_event(const sl_set_decl *set, const struct sl_event *ev, sl_error *err)
{
    if (!set || !set->nschemas || ev->type.type != SL_JSON_STRING)
        return 0;
    char type[256];
    size_t tl = 0;
    if (sl_json_unescape(&ev->type, type, sizeof type, &tl) != 0)
        return 0; /* longer than any registered type */
    const sl_schema *s = sl_config_schema(set, type, tl);
    if (!s)
        return 0;
    if (ev->data_base64.type != SL_JSON_NONE)
        return sl_error_set(err, SL_EINVAL,
                            "/data: binary data (data_base64) cannot be "
                            "checked against the schema of its type");
    if (ev->data.type == SL_JSON_NONE)
        return sl_error_set(err, SL_EINVAL, "/data: missing, and the event's type has a schema");
    return sl_schema_validate(s, ev->data.p, ev->data.len, err);
}

int sl_config_keys_markdown(sl_buf *out)
{
    int rc = sl__config_keys_table(out, "server { … }", KEYS(server_keys));
    if (!rc)
        rc = sl__config_keys_table(out, "server.api_keys.NAME { … }", KEYS(api_key_keys));
    if (!rc)
        rc = sl__config_keys_table(out, "server.kafka { … }", KEYS(kafka_keys));
    if (!rc)
        rc = sl__config_aws_markdown(out);
    if (!rc)
        rc = sl__config_keys_table(out, "set \"NAME\" { … }", KEYS(set_keys));
    if (!rc)
        rc = sl__config_rules_markdown(out);
    if (!rc)
        rc = sl__config_schedule_markdown(out);
    if (!rc)
        rc = sl__config_kinds_markdown(out);
    return rc;
}

void sl__config_free_rule(sl_rule_config *r)
{
    free(r->name);
    free(r->set);
    free(r->description);
    free(r->shape);
    free(r->match_json);
    sl_pattern_free(r->pattern);
    sl_input_free(r->input);
    for (size_t t = 0; t < r->ntargets; t++)
        sl__config_free_target(&r->targets[t]);
    free(r->targets);
    sl__config_free_target(&r->dlq_target);
    free(r->dlq);
    free(r->lane);
}

void sl_config_free(sl_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->nrules; i++)
        sl__config_free_rule(&cfg->rules[i]);
    free(cfg->rules);
    for (size_t i = 0; i < cfg->noverrides; i++)
        sl__config_free_rule(&cfg->overrides[i]);
    free(cfg->overrides);
    for (size_t i = 0; i < cfg->nschedules; i++)
        sl_schedule_decl_free(&cfg->schedules[i]);
    free(cfg->schedules);
    for (size_t i = 0; i < cfg->nlanes; i++) {
        free(cfg->lanes[i].name);
        free(cfg->lanes[i].description);
    }
    free(cfg->lanes);
    for (size_t i = 0; i < cfg->nsources; i++)
        sl__config_free_source(&cfg->sources[i]);
    free(cfg->sources);
    free(cfg->plugin_dir);
    sl__config_free_kafka(cfg);
    sl__config_free_aws(cfg);
    for (size_t i = 0; i < cfg->nsets; i++) {
        free(cfg->sets[i].name);
        for (size_t s = 0; s < cfg->sets[i].nschemas; s++) {
            free(cfg->sets[i].schemas[s].type);
            sl_schema_free(cfg->sets[i].schemas[s].schema);
        }
        free(cfg->sets[i].schemas);
    }
    free(cfg->sets);
    free(cfg->path);
    free(cfg->dir);
    free(cfg->source);
    free(cfg->listen);
    free(cfg->kafka_listen);
    free(cfg->kafka_advertised);
    free(cfg->data_dir);
    for (size_t i = 0; i < cfg->napi_keys; i++) {
        free(cfg->api_keys[i].name);
        free(cfg->api_keys[i].sha256);
        sl__config_free_lines(cfg->api_keys[i].publish, cfg->api_keys[i].npublish);
        sl__config_free_lines(cfg->api_keys[i].read, cfg->api_keys[i].nread);
    }
    free(cfg->api_keys);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->log_format);
    free(cfg->log_level);
    free(cfg);
}
