/*
 * server/config.c — loads a Lua config file and checks every declaration
 * against the key tables below (Fluent Bit's config_map idea: one table per
 * block validates, fills the struct and prints the docs).
 */
#include "server/config.h"
#include "core/base/lane_name.h"

#include "connectors/source_webhook.h"
#include "core/base/clock.h"
#include "core/bus/connector.h"
#include "core/bus/event.h"
#include "core/base/buf.h"
#include "core/base/parse.h"
#include "core/bus/plugin.h"
#include "core/base/slog.h"
#include "rules/lua_embed.h"
#include "rules/luajson.h"
#include "rules/sandbox.h"

#include <ctype.h>
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
};

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
    {"schemas", K_SCHEMAS, 0, 0, 0, 0, "none",
     "`{ [\"type\"] = \"file.json\" | { …schema… } }`: JSON Schemas checked at ingest "
     "(docs/schemas.md)"},
};

static const key rule_keys[] = {
    {"set", K_STRING, FIELD(sl_rule_config, set), 0, 0, "required",
     "the event set the rule reads (declared with `set`)"},
    {"description", K_STRING, FIELD(sl_rule_config, description), 0, 0, "", "free text"},
    {"match", K_PATTERN, FIELD(sl_rule_config, match_json), 0, 0, "every event",
     "an EventBridge event pattern, as a Lua table or a JSON string"},
    {"filter", K_FUNCTION, FIELD(sl_rule_config, filter), 0, 0, "",
     "`function(e) return true|false end`, after match"},
    {"transform", K_FUNCTION, FIELD(sl_rule_config, transform), 0, 0, "",
     "`function(e) return e | {e1, e2} | nil end`: change, fan out or drop"},
    {"transform_batch", K_FUNCTION, FIELD(sl_rule_config, transform_batch), 0, 0, "",
     "`function(events) return {…} end`: one call per batch instead of per event"},
    {"input", K_INPUT, FIELD(sl_rule_config, input), 0, 0, "the event",
     "`\"$.data\"` or `{ paths = { name = \"$.x\" }, template = [[…<name>…]] }`"},
    {"target", K_TARGETS, 0, 0, 0, 0, "",
     "where matched events go (`target.file`, `target.set`, `target.http`)"},
    {"targets", K_TARGETS, 0, 0, 0, 0, "", "a list of targets; each gets every event"},
    {"start", K_START, FIELD(sl_rule_config, from_beginning), 0, 0, "\"end\"",
     "where a new rule starts reading: \"end\" or \"beginning\""},
    {"enabled", K_BOOL, FIELD(sl_rule_config, enabled), 0, 0, "true",
     "false passes events over without delivering them (as a disabled EventBridge rule); "
     "its cursor keeps moving"},
    {"retry", K_RETRY, FIELD(sl_rule_config, retry), 0, 0, "see below",
     "`{ attempts = 185, max_age = \"24h\", backoff = \"exponential\", initial = \"100ms\", "
     "max = \"5m\" }`: how a failed delivery is retried (docs/targets.md)"},
    {"dlq", K_STRING, FIELD(sl_rule_config, dlq), 0, 0, "none",
     "dead-letter set: events that exhausted their retries or were refused go there with "
     "`sluiceerror` … attributes; without one they are dropped and counted"},
    {"ordered", K_BOOL, FIELD(sl_rule_config, ordered), 0, 0, "true",
     "keep per-partition order: a failing event holds its partition for this rule; false "
     "sets failures aside and delivers the rest concurrently"},
    {"lanes", K_LANES, 0, 0, 0, 0, "none",
     "lane overrides, `{ [\"feature-x\"] = { target = target.http { … } } }`: for events of "
     "that lane, these keys replace the rule's; only `match`, `filter`, `transform`, "
     "`transform_batch`, `input`, `target` and `targets` can be given (a `transform` or "
     "`transform_batch` replaces both, as do `target` and `targets`); the lane must be declared "
     "unless `lanes.auto = true`"},
};

/* The keys a lane override may give (rule.lanes["LANE"]). */
static const char *const override_keys[] = {"match", "filter", "transform", "transform_batch",
                                            "input", "target", "targets"};

static const key lane_keys[] = {
    {"env", K_LANEENV, FIELD(sl_lane_decl, env), 0, 0, "\"boe\"",
     "\"boe\" (offline tests, many lanes side by side) or \"ppe\" (pre-production)"},
    {"fallback", K_FALLBACK, FIELD(sl_lane_decl, fallback_base), 0, 0,
     "\"base\" (boe), \"none\" (ppe)",
     "what an event of the lane does at a rule without an override for it: \"base\" goes "
     "through the base rule (keeping its lane), \"none\" is not delivered (counted as "
     "`lane_unrouted`)"},
    {"description", K_STRING, FIELD(sl_lane_decl, description), 0, 0, "", "free text"},
};

static const key lanes_keys[] = {
    {"auto", K_BOOL, FIELD(sl_config, lanes_auto), 0, 0, "false",
     "accept events of undeclared lanes (and overrides naming them) as `boe` lanes; "
     "`lanes.auto = true` or `lanes { auto = true }`"},
};

static const key retry_keys[] = {
    {"attempts", K_INT, FIELD(sl_retry_config, attempts), 1, 1000000, "185",
     "deliveries of an event to a target before it goes to the `dlq`"},
    {"max_age", K_DURATION, FIELD(sl_retry_config, max_age_ms), -1, INT64_MAX, "\"24h\"",
     "how long after its first failed delivery an event is still retried (\"forever\": no "
     "limit)"},
    {"backoff", K_BACKOFF, FIELD(sl_retry_config, backoff), 0, 0, "\"exponential\"",
     "\"exponential\" (initial, doubling up to max) or \"fixed\" (initial each time); full "
     "jitter on both"},
    {"initial", K_DURATION, FIELD(sl_retry_config, initial_ms), 1, 86400000, "\"100ms\"",
     "first back-off"},
    {"max", K_DURATION, FIELD(sl_retry_config, max_ms), 1, 86400000, "\"5m\"", "longest back-off"},
};

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

#define KEYS(k) k, sizeof k / sizeof *k

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

/* ---- the loader ----------------------------------------------------------- */

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

/* How far past a block's first line key_line() looks for a key, once
 * KEY_LINE_FULL mistakes were reported (before that: to the end). */
#define KEY_LINE_FULL 50
#define KEY_LINE_SPAN (64u << 10)
/* Mistakes reported in full (problem()). */
#define CONFIG_MAX_PROBLEMS 1000

static void problem(loader *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(loader *ld, int line, const char *fmt, ...)
{
    ld->nerrors++;
    if (!ld->diag)
        return;
    /* A bound on the messages, and on the key_line() look-ups they cost: a
     * generated table can hold any number of unknown keys. */
    if (ld->nerrors > CONFIG_MAX_PROBLEMS) {
        if (ld->nerrors == CONFIG_MAX_PROBLEMS + 1 &&
            sl_buf_printf(ld->diag, "%s: more than %d mistakes; the rest are not shown\n", ld->name,
                          CONFIG_MAX_PROBLEMS))
            ld->oom = 1;
        return;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (sl_buf_printf(ld->diag, "%s:%d: %s\n", ld->name, line, msg))
        ld->oom = 1;
}

/* The line where `key =` first appears at or after the block's line: Lua
 * keeps no line numbers for table fields, but the source text does. Falls
 * back to the block's line. */
static int key_line(loader *ld, int block_line, const char *keyname)
{
    /* Every look-up (one per mistake) used to scan the file from its
     * start: a 10 MB file with 10,000 mistakes took hours (found with the
     * hostile configs of the config fuzzer: tests/fuzz/regress/config/).
     * Now the start of block_line is found from the previous look-up
     * (blocks are read in file order), the key is looked for in at most
     * KEY_LINE_SPAN bytes, and not at all once problem() stopped showing
     * messages. */
    const char *s = ld->cfg->source, *end = s + ld->cfg->source_len, *p = s;
    int line = 1;
    if (ld->nerrors >= CONFIG_MAX_PROBLEMS) /* the message will not be shown */
        return block_line;
    if (ld->kl_pos && ld->kl_line <= block_line)
        p = ld->kl_pos, line = ld->kl_line;
    for (; p < end && line < block_line; p++)
        if (*p == '\n')
            line++;
    ld->kl_pos = p;
    ld->kl_line = line;
    /* The first mistakes (the usual case: one or a few) search to the end,
     * so a key far below its block's first line still gets its own line;
     * past that the span bounds the cost. */
    const char *stop =
        ld->nerrors < KEY_LINE_FULL || (size_t)(end - p) <= KEY_LINE_SPAN ? end : p + KEY_LINE_SPAN;
    size_t kl = strlen(keyname);
    for (; p < stop; p++) {
        if ((size_t)(end - p) > kl && memcmp(p, keyname, kl) == 0 &&
            (p == s || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '"'))) {
            const char *q = p + kl;
            if (*q == '"' && p > s && p[-1] == '"')
                q++;
            while (q < end && (*q == ' ' || *q == '\t' || *q == ']'))
                q++;
            if (q < end && *q == '=' && (q + 1 == end || q[1] != '='))
                return line;
        }
        if (*p == '\n')
            line++;
    }
    return block_line;
}

static char *dup_string(loader *ld, const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) {
        ld->oom = 1;
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Resolves a path relative to the config file's folder. */
static char *resolve_path(loader *ld, const char *p)
{
    if (p[0] == '/' || !ld->cfg->dir[0])
        return dup_string(ld, p, strlen(p));
    size_t n = strlen(ld->cfg->dir) + strlen(p) + 2;
    char *d = malloc(n);
    if (!d) {
        ld->oom = 1;
        return NULL;
    }
    snprintf(d, n, "%s/%s", ld->cfg->dir, p);
    return d;
}

static void put_int(void *field, size_t size, int64_t v)
{
    if (size == 8) {
        memcpy(field, &v, 8);
    } else if (size == 4) {
        int32_t x = (int32_t)v;
        memcpy(field, &x, 4);
    } else if (size == 2) {
        int16_t x = (int16_t)v;
        memcpy(field, &x, 2);
    }
}

typedef struct block {
    const char *what; /* 'rule "big-orders"' */
    int line;
    void *obj;
} block;

static void check_block(loader *ld, int idx, const key *keys, size_t nkeys, const block *b,
                        void *extra);

static void read_set_body(loader *ld, int idx, sl_set_config *sc, const block *b, void *decl);
static void read_key(loader *ld, const key *k, const block *b, void *extra);
static void read_api_keys(loader *ld, int idx, const key *k, const block *b);
static void add_line(loader *ld, char ***list, size_t *n, const char *name, const char *sep,
                     const char *val);

/* Encodes the Lua value at idx as JSON text (a pattern or an inline schema). */
static char *lua_to_json(loader *ld, int idx, int line, const char *what)
{
    sl_buf b = SL_BUF_INIT;
    sl_error err = {0};
    if (sl_luajson_encode(ld->L, idx, &b, &err) || sl_buf_append(&b, "", 1)) {
        problem(ld, line, "%s: %s", what, err.msg[0] ? err.msg : "cannot be encoded as JSON");
        sl_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

static void read_pattern(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r)
{
    int line = key_line(ld, b->line, k->name);
    char *json;
    if (lua_type(ld->L, idx) == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(ld->L, idx, &n);
        json = dup_string(ld, s, n);
    } else if (lua_istable(ld->L, idx)) {
        json = lua_to_json(ld, idx, line, "match");
    } else {
        problem(ld, line, "%s: match must be a table or a JSON string, not a %s", b->what,
                luaL_typename(ld->L, idx));
        return;
    }
    if (!json)
        return;
    sl_error err = {0};
    if (sl_pattern_compile(json, strlen(json), &r->pattern, &err)) {
        problem(ld, line, "%s: match: %s", b->what, err.msg[0] ? err.msg : "invalid pattern");
        free(json);
        return;
    }
    r->match_json = json;
}

static void read_input(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r)
{
    lua_State *L = ld->L;
    int line = key_line(ld, b->line, k->name);
    sl_error err = {0};
    if (lua_type(L, idx) == LUA_TSTRING) {
        if (sl_input_compile_path(lua_tostring(L, idx), &r->input, &err))
            problem(ld, line, "%s: input: %s", b->what, err.msg);
        return;
    }
    if (!lua_istable(L, idx)) {
        problem(ld, line,
                "%s: input must be a path string like \"$.data\" or "
                "{ paths = {…}, template = \"…\" }",
                b->what);
        return;
    }
    const char *names[64], *paths[64];
    size_t n = 0;
    const char *tmpl = NULL;
    bool ok = true;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *kn = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        if (strcmp(kn, "template") == 0 && lua_type(L, -1) == LUA_TSTRING) {
            tmpl = lua_tostring(L, -1);
        } else if (strcmp(kn, "paths") == 0 && lua_istable(L, -1)) {
            lua_pushnil(L);
            while (lua_next(L, -2)) {
                if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING) {
                    problem(ld, line, "%s: input.paths maps names to path strings", b->what);
                    ok = false;
                } else if (n == 64) {
                    problem(ld, line, "%s: input.paths: at most 64 paths", b->what);
                    ok = false;
                } else {
                    names[n] = lua_tostring(L, -2);
                    paths[n++] = lua_tostring(L, -1);
                }
                lua_pop(L, 1);
            }
        } else {
            problem(ld, line, "%s: input: unknown key or wrong type \"%s\" (want paths, template)",
                    b->what, kn);
            ok = false;
        }
        lua_pop(L, 1);
    }
    if (!tmpl) {
        problem(ld, line, "%s: input: a template string is required", b->what);
        ok = false;
    }
    if (ok && sl_input_compile_template(names, paths, n, tmpl, &r->input, &err))
        problem(ld, line, "%s: input: %s", b->what, err.msg);
}

/* The value at idx as a plugin key's normalised text (core/bus/connector.h),
 * or false with a problem. */
static bool plugin_value(loader *ld, int idx, const sl_plugin_key *pk, const block *b, int line,
                         sl_buf *v)
{
    lua_State *L = ld->L;
    int t = lua_type(L, idx);
    bool ok = false;
    const char *want = "";
    switch (pk->type) {
    case SL_PKEY_STRING:
        want = "a string";
        ok = t == LUA_TSTRING && !sl_buf_append(v, lua_tostring(L, idx), lua_rawlen(L, idx));
        break;
    case SL_PKEY_INT:
        want = "an integer";
        ok = t == LUA_TNUMBER && lua_isinteger(L, idx) &&
             !sl_buf_printf(v, "%lld", (long long)lua_tointeger(L, idx));
        break;
    case SL_PKEY_BOOL:
        want = "true or false";
        ok = t == LUA_TBOOLEAN && !sl_buf_printf(v, "%s", lua_toboolean(L, idx) ? "true" : "false");
        break;
    case SL_PKEY_DURATION: {
        want = "a duration like \"30s\" or a number of ms";
        int64_t ms = 0;
        ok = (t == LUA_TNUMBER && lua_isinteger(L, idx) && (ms = lua_tointeger(L, idx)) >= 0) ||
             (t == LUA_TSTRING && sl_parse_duration_ms(lua_tostring(L, idx), &ms) == 0);
        ok = ok && !sl_buf_printf(v, "%lld", (long long)ms);
        break;
    }
    case SL_PKEY_SIZE: {
        want = "a size like \"1MiB\" or a number of bytes";
        uint64_t u = 0;
        ok = (t == LUA_TNUMBER && lua_isinteger(L, idx) && lua_tointeger(L, idx) >= 0 &&
              (u = (uint64_t)lua_tointeger(L, idx), true)) ||
             (t == LUA_TSTRING && sl_parse_bytes(lua_tostring(L, idx), &u) == 0);
        ok = ok && !sl_buf_printf(v, "%llu", (unsigned long long)u);
        break;
    }
    case SL_PKEY_STRINGS: {
        want = "a string or a list of strings (without line breaks)";
        if (t == LUA_TSTRING) {
            ok = !strchr(lua_tostring(L, idx), '\n') &&
                 !sl_buf_append(v, lua_tostring(L, idx), lua_rawlen(L, idx));
            break;
        }
        lua_Integer n = t == LUA_TTABLE ? luaL_len(L, idx) : 0;
        ok = n > 0;
        for (lua_Integer i = 1; ok && i <= n; i++) {
            lua_geti(L, idx, i);
            ok = lua_type(L, -1) == LUA_TSTRING && !strchr(lua_tostring(L, -1), '\n') &&
                 !(i > 1 && sl_buf_append(v, "\n", 1)) &&
                 !sl_buf_append(v, lua_tostring(L, -1), lua_rawlen(L, -1));
            lua_pop(L, 1);
        }
        break;
    }
    }
    if (!ok)
        problem(ld, line, "%s: %s must be %s", b->what, pk->name, want);
    return ok;
}

/* The body of a plugin's block (at idx): the common keys (may be none) go
 * to the struct through check_block's reader, the plugin's own keys become
 * "name=value" option lines. */
static void read_plugin_body(loader *ld, int idx, const key *common, size_t ncommon,
                             const sl_plugin_key *pk, size_t npk, const block *b, char ***opts,
                             size_t *nopts)
{
    lua_State *L = ld->L;
    bool seen[64] = {false};
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const key *k = NULL;
        const sl_plugin_key *p = NULL;
        for (size_t i = 0; name && !k && i < ncommon; i++)
            if (strcmp(common[i].name, name) == 0)
                k = &common[i];
        for (size_t i = 0; name && !k && !p && i < npk; i++)
            if (strcmp(pk[i].name, name) == 0) {
                p = &pk[i];
                if (i < 64)
                    seen[i] = true;
            }
        if (k) {
            read_key(ld, k, b, NULL);
        } else if (p) {
            sl_buf v = SL_BUF_INIT;
            if (plugin_value(ld, lua_gettop(L), p, b, key_line(ld, b->line, name), &v) &&
                !sl_buf_append(&v, "", 1))
                add_line(ld, opts, nopts, name, "=", (const char *)v.data);
            sl_buf_free(&v);
        } else {
            char known[512] = "";
            size_t o = 0;
            for (size_t i = 0; i < ncommon + npk && o < sizeof known; i++)
                o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
                                      i < ncommon ? common[i].name : pk[i - ncommon].name);
            problem(ld, name ? key_line(ld, b->line, name) : b->line,
                    "%s: unknown key \"%s\" (known: %s)", b->what, name ? name : "?", known);
        }
        lua_pop(L, 1);
    }
    for (size_t i = 0; i < npk && i < 64; i++)
        if (pk[i].required && !seen[i])
            problem(ld, b->line, "%s: %s is required", b->what, pk[i].name);
}

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
    read_plugin_body(ld, lua_gettop(ld->L), NULL, 0, ops->keys, ops->nkeys, &tb, &t->options,
                     &t->noptions);
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
        problem(ld, line,
                "%s: a target must be made with target.KIND { … } (file, set, http, kafka)",
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
        problem(ld, tline, "%s: unknown target kind target.%s (known: %s)", b->what,
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
    check_block(ld, lua_gettop(L), tk->keys, tk->nkeys, &tb, NULL);
    lua_pop(L, 1);
    if (t->kind == SL_TARGET_FILE && t->path) {
        char *abs = resolve_path(ld, t->path);
        free(t->path);
        t->path = abs;
    }
}

static void read_targets(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r)
{
    lua_State *L = ld->L;
    r->target_given = true;
    int line = key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        problem(ld, line, "%s: %s must be a target or a list of targets", b->what, k->name);
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
        problem(ld, line,
                "%s: a target must be made with target.KIND { … } (file, set, http, kafka)",
                b->what);
        return;
    }
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        read_target(ld, lua_gettop(L), b, line, r);
        lua_pop(L, 1);
    }
}

static void read_schemas(loader *ld, int idx, const key *k, const block *b, sl_set_decl *d)
{
    lua_State *L = ld->L;
    int line = key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        problem(ld, line, "%s: schemas must map event types to schema files", b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int vi = lua_gettop(L);
        if (lua_type(L, -2) != LUA_TSTRING) {
            problem(ld, line, "%s: schemas: keys are event types (strings)", b->what);
            lua_pop(L, 1);
            continue;
        }
        const char *type = lua_tostring(L, -2);
        sl_schema *s = NULL;
        sl_error err = {0};
        int rc = 0;
        if (lua_type(L, vi) == LUA_TSTRING) {
            char *p = resolve_path(ld, lua_tostring(L, vi));
            rc = p ? sl_schema_compile_file(p, &s, &err) : SL_ENOMEM;
            free(p);
        } else if (lua_istable(L, vi)) {
            char *json = lua_to_json(ld, vi, line, "schema");
            rc = json ? sl_schema_compile(json, strlen(json), &s, &err) : SL_EINVAL;
            free(json);
        } else {
            rc = sl_error_set(&err, SL_EINVAL, "want a file name or a schema table");
        }
        if (rc) {
            problem(ld, line, "%s: schema for \"%s\": %s", b->what, type,
                    err.msg[0] ? err.msg : sl_strerror(rc));
        } else {
            sl_schema_entry *g = realloc(d->schemas, (d->nschemas + 1) * sizeof *g);
            char *t = dup_string(ld, type, strlen(type));
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

/* A header name: an RFC 9110 token. */
static bool header_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s)))
            return false;
    return true;
}

/* A header value: no line breaks or other controls but tab. */
static bool header_value_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
            return false;
    return true;
}

/* Appends "NAME SEP VALUE" to a list of lines (headers, properties). */
static void add_line(loader *ld, char ***list, size_t *n, const char *name, const char *sep,
                     const char *val)
{
    char **g = realloc(*list, (*n + 1) * sizeof *g);
    if (g)
        *list = g;
    size_t len = strlen(name) + strlen(sep) + strlen(val) + 1;
    char *line = g ? malloc(len) : NULL;
    if (!line) {
        ld->oom = 1;
        return;
    }
    snprintf(line, len, "%s%s%s", name, sep, val);
    (*list)[(*n)++] = line;
}

static void read_headers(loader *ld, int idx, const key *k, const block *b, sl_target_config *t)
{
    lua_State *L = ld->L;
    int line = key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        problem(ld, line, "%s: headers must be a table { [\"Name\"] = \"value\" }", b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        size_t vl = 0;
        const char *val = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &vl) : NULL;
        if (!name || !header_name_ok(name))
            problem(ld, line, "%s: headers: \"%s\" is not a header name", b->what,
                    name ? name : "?");
        else if (!val || !header_value_ok(val, vl))
            problem(ld, line, "%s: headers: %s must be a string without line breaks", b->what,
                    name);
        else
            add_line(ld, &t->headers, &t->nheaders, name, ": ", val);
        lua_pop(L, 1);
    }
}

/* A string member of the table at idx (NULL with a problem when missing). */
static char *auth_field(loader *ld, int idx, const char *name, int line, const block *b,
                        const char *what)
{
    lua_State *L = ld->L;
    lua_getfield(L, idx, name);
    char *s = NULL;
    size_t n = 0;
    if (lua_type(L, -1) == LUA_TSTRING && header_value_ok(lua_tolstring(L, -1, &n), n))
        s = dup_string(ld, lua_tostring(L, -1), n);
    else
        problem(ld, line, "%s: auth.%s needs %s (a string without line breaks)", b->what, what,
                name);
    lua_pop(L, 1);
    return s;
}

static void read_auth(loader *ld, int idx, const key *k, const block *b, sl_target_config *t)
{
    lua_State *L = ld->L;
    int line = key_line(ld, b->line, k->name);
    int n = 0;
    if (lua_istable(L, idx)) {
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            n++;
            lua_pop(L, 1);
        }
    }
    if (n != 1) {
        problem(ld, line,
                "%s: auth takes one of { bearer = … }, { basic = { user = …, "
                "password = … } }, { api_key = { header = …, value = … } }",
                b->what);
        return;
    }
    lua_getfield(L, idx, "bearer");
    if (lua_type(L, -1) == LUA_TSTRING) {
        size_t vl;
        const char *v = lua_tolstring(L, -1, &vl);
        if (header_value_ok(v, vl))
            t->bearer = dup_string(ld, v, vl);
        else
            problem(ld, line, "%s: auth.bearer must not hold line breaks", b->what);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, "basic");
    if (lua_istable(L, -1)) {
        int bi = lua_gettop(L);
        t->basic_user = auth_field(ld, bi, "user", line, b, "basic");
        t->basic_pass = auth_field(ld, bi, "password", line, b, "basic");
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, "api_key");
    if (lua_istable(L, -1)) {
        int ai = lua_gettop(L);
        t->api_key_header = auth_field(ld, ai, "header", line, b, "api_key");
        t->api_key = auth_field(ld, ai, "value", line, b, "api_key");
        if (t->api_key_header && !header_name_ok(t->api_key_header))
            problem(ld, line, "%s: auth.api_key.header \"%s\" is not a header name", b->what,
                    t->api_key_header);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    problem(ld, line,
            "%s: auth takes one of { bearer = … }, { basic = { user = …, "
            "password = … } }, { api_key = { header = …, value = … } }",
            b->what);
}

/* properties = { ["name"] = value }: librdkafka's names are dotted words. */
static void read_props(loader *ld, int idx, const key *k, const block *b, char *field)
{
    lua_State *L = ld->L;
    int line = key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        problem(ld, line, "%s: properties must be a table { [\"name\"] = value }", b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        int vt = lua_type(L, -1);
        bool name_ok = name && *name;
        for (const char *c = name; name_ok && *c; c++)
            name_ok = isalnum((unsigned char)*c) || *c == '.' || *c == '_' || *c == '-';
        char val[1024];
        if (vt == LUA_TBOOLEAN)
            snprintf(val, sizeof val, "%s", lua_toboolean(L, -1) ? "true" : "false");
        else if (vt == LUA_TNUMBER && lua_isinteger(L, -1))
            snprintf(val, sizeof val, "%lld", (long long)lua_tointeger(L, -1));
        else if (vt == LUA_TNUMBER)
            snprintf(val, sizeof val, "%.17g", lua_tonumber(L, -1));
        else if (vt == LUA_TSTRING && lua_rawlen(L, -1) < sizeof val)
            snprintf(val, sizeof val, "%s", lua_tostring(L, -1));
        else
            vt = LUA_TNONE;
        if (!name_ok)
            problem(ld, line, "%s: properties: \"%s\" is not a property name", b->what,
                    name ? name : "?");
        else if (vt == LUA_TNONE)
            problem(ld, line,
                    "%s: properties: %s must be a string, number or boolean (under "
                    "1024 bytes)",
                    b->what, name);
        else
            add_line(ld, (char ***)field, (size_t *)(field + sizeof(char **)), name, "=", val);
        lua_pop(L, 1);
    }
}

/* A string or a list of strings (topics = { "a", "^b.*" }). */
static void read_strings(loader *ld, int idx, const key *k, const block *b, char *field)
{
    lua_State *L = ld->L;
    int line = key_line(ld, b->line, k->name);
    char ***list = (char ***)field;
    size_t *n = (size_t *)(field + sizeof(char **));
    if (lua_type(L, idx) == LUA_TSTRING) {
        add_line(ld, list, n, lua_tostring(L, idx), "", "");
        return;
    }
    lua_Integer len = lua_istable(L, idx) ? luaL_len(L, idx) : 0;
    if (len == 0) {
        problem(ld, line, "%s: %s must be a string or a non-empty list of strings", b->what,
                k->name);
        return;
    }
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        if (lua_type(L, -1) == LUA_TSTRING && lua_rawlen(L, -1) > 0)
            add_line(ld, list, n, lua_tostring(L, -1), "", "");
        else
            problem(ld, line, "%s: %s[%lld] must be a non-empty string", b->what, k->name,
                    (long long)i);
        lua_pop(L, 1);
    }
}

/* Reads one key's value (at the top of the stack) into the block's struct. */
static void read_key(loader *ld, const key *k, const block *b, void *extra)
{
    lua_State *L = ld->L;
    int idx = lua_gettop(L);
    char *field = (char *)b->obj + k->off;
    int line = key_line(ld, b->line, k->name);
    int t = lua_type(L, idx);
    switch (k->type) {
    case K_STRING:
        if (t != LUA_TSTRING) {
            problem(ld, line, "%s: %s must be a string, not a %s", b->what, k->name,
                    luaL_typename(L, idx));
        } else {
            size_t n;
            const char *s = lua_tolstring(L, idx, &n);
            char **dst = (char **)field;
            free(*dst);
            *dst = dup_string(ld, s, n);
        }
        return;
    case K_BOOL:
    case K_TRISTATE:
        if (t != LUA_TBOOLEAN) {
            problem(ld, line, "%s: %s must be true or false, not a %s", b->what, k->name,
                    luaL_typename(L, idx));
        } else if (k->type == K_BOOL) {
            *(bool *)field = lua_toboolean(L, idx);
        } else {
            *(int *)field = lua_toboolean(L, idx);
        }
        return;
    case K_INT:
    case K_SIZE:
    case K_DURATION: {
        int64_t v = 0;
        bool ok = false;
        if (t == LUA_TNUMBER && lua_isinteger(L, idx)) {
            v = lua_tointeger(L, idx);
            ok = true;
        } else if (t == LUA_TSTRING && k->type == K_SIZE) {
            uint64_t u;
            ok = sl_parse_bytes(lua_tostring(L, idx), &u) == 0 && u <= INT64_MAX;
            v = (int64_t)u;
        } else if (t == LUA_TSTRING && k->type == K_DURATION) {
            const char *s = lua_tostring(L, idx);
            ok =
                strcmp(s, "forever") == 0 ? (v = -1, k->min < 0) : sl_parse_duration_ms(s, &v) == 0;
        }
        static const char *const want[] = {[K_INT] = "an integer",
                                           [K_SIZE] = "a size like \"128MiB\" or a number of bytes",
                                           [K_DURATION] = "a duration like \"7d\", \"30s\", "
                                                          "\"250ms\" or a number of ms"};
        if (!ok)
            problem(ld, line, "%s: %s must be %s", b->what, k->name, want[k->type]);
        else if (v < k->min || v > k->max)
            problem(ld, line, "%s: %s = %lld is out of range (%lld..%lld)", b->what, k->name,
                    (long long)v, (long long)k->min, (long long)k->max);
        else
            put_int(field, k->size, v);
        return;
    }
    case K_ACK:
    case K_CODEC:
    case K_START: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        if (k->type == K_ACK && (strcmp(s, "durable") == 0 || strcmp(s, "buffer") == 0))
            *(sl_ack *)field = s[0] == 'd' ? SL_ACK_DURABLE : SL_ACK_BUFFER;
        else if (k->type == K_CODEC && sl_codec_parse(s, (sl_codec *)field) == 0)
            ;
        else if (k->type == K_START && (strcmp(s, "beginning") == 0 || strcmp(s, "end") == 0))
            *(bool *)field = s[0] == 'b';
        else
            problem(ld, line, "%s: %s must be %s", b->what, k->name,
                    k->type == K_ACK     ? "\"durable\" or \"buffer\""
                    : k->type == K_CODEC ? "\"none\" or \"zstd\""
                                         : "\"beginning\" or \"end\"");
        return;
    }
    case K_FUNCTION:
        if (t != LUA_TFUNCTION)
            problem(ld, line, "%s: %s must be a function, not a %s", b->what, k->name,
                    luaL_typename(L, idx));
        else
            *(bool *)field = true;
        return;
    case K_PATTERN:
        read_pattern(ld, idx, k, b, b->obj);
        return;
    case K_INPUT:
        read_input(ld, idx, k, b, b->obj);
        return;
    case K_TARGETS:
        read_targets(ld, idx, k, b, b->obj);
        return;
    case K_SCHEMAS:
        read_schemas(ld, idx, k, b, extra);
        return;
    case K_SETBODY: {
        if (t != LUA_TTABLE) {
            problem(ld, line, "%s: %s must be a table of set keys", b->what, k->name);
            return;
        }
        block sb = {"server.set_defaults", line, field};
        read_set_body(ld, idx, (sl_set_config *)field, &sb, NULL);
        return;
    }
    case K_BODY: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        sl_http_body *bd = (sl_http_body *)field;
        if (strcmp(s, "structured") == 0)
            *bd = SL_HTTP_BODY_STRUCTURED;
        else if (strcmp(s, "binary") == 0)
            *bd = SL_HTTP_BODY_BINARY;
        else if (strcmp(s, "data") == 0)
            *bd = SL_HTTP_BODY_DATA;
        else
            problem(ld, line, "%s: body must be \"structured\", \"binary\" or \"data\"", b->what);
        return;
    }
    case K_HEADERS:
        read_headers(ld, idx, k, b, b->obj);
        return;
    case K_AUTH:
        read_auth(ld, idx, k, b, b->obj);
        return;
    case K_APIKEYS:
        read_api_keys(ld, idx, k, b);
        return;
    case K_PROPS:
        read_props(ld, idx, k, b, field);
        return;
    case K_STRINGS:
        read_strings(ld, idx, k, b, field);
        return;
    case K_PARSE: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        sl_source_parse *pp = (sl_source_parse *)field;
        if (t == LUA_TFUNCTION)
            *pp = SL_PARSE_LUA;
        else if (strcmp(s, "json") == 0)
            *pp = SL_PARSE_JSON;
        else if (strcmp(s, "text") == 0)
            *pp = SL_PARSE_TEXT;
        else
            problem(ld, line, "%s: parse must be \"json\", \"text\" or a function(line)", b->what);
        return;
    }
    case K_LONGLINES:
    case K_ENCODING: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        const char *yes = k->type == K_LONGLINES ? "split" : "base64";
        const char *no = k->type == K_LONGLINES ? "skip" : "hex";
        if (strcmp(s, yes) == 0 || strcmp(s, no) == 0)
            *(bool *)field = strcmp(s, yes) == 0;
        else
            problem(ld, line, "%s: %s must be \"%s\" or \"%s\"", b->what, k->name,
                    k->type == K_LONGLINES ? yes : no, k->type == K_LONGLINES ? no : yes);
        return;
    }
    case K_RETRY: {
        if (t != LUA_TTABLE) {
            problem(ld, line, "%s: %s must be a table { attempts = …, max_age = …, … }", b->what,
                    k->name);
            return;
        }
        char what[240];
        snprintf(what, sizeof what, "%s: retry", b->what);
        block rb = {what, line, field};
        check_block(ld, idx, retry_keys, sizeof retry_keys / sizeof *retry_keys, &rb, NULL);
        return;
    }
    case K_LANES:
        /* The overrides are read after the rule's own keys (read_overrides). */
        if (t != LUA_TTABLE)
            problem(ld, line, "%s: lanes must be a table { [\"LANE\"] = { … } }, not a %s", b->what,
                    luaL_typename(L, idx));
        return;
    case K_LANEENV:
    case K_FALLBACK: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        if (k->type == K_LANEENV && (strcmp(s, "boe") == 0 || strcmp(s, "ppe") == 0))
            *(sl_lane_env *)field = s[0] == 'b' ? SL_LANE_BOE : SL_LANE_PPE;
        else if (k->type == K_FALLBACK && (strcmp(s, "base") == 0 || strcmp(s, "none") == 0))
            *(bool *)field = s[0] == 'b';
        else
            problem(ld, line, "%s: %s must be %s", b->what, k->name,
                    k->type == K_LANEENV ? "\"boe\" or \"ppe\"" : "\"base\" or \"none\"");
        return;
    }
    case K_BACKOFF: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        if (strcmp(s, "exponential") == 0)
            *(sl_backoff *)field = SL_BACKOFF_EXPONENTIAL;
        else if (strcmp(s, "fixed") == 0)
            *(sl_backoff *)field = SL_BACKOFF_FIXED;
        else
            problem(ld, line, "%s: backoff must be \"exponential\" or \"fixed\"", b->what);
        return;
    }
    }
}

/* Walks the table at idx: every key must be in keys. */
static void check_block(loader *ld, int idx, const key *keys, size_t nkeys, const block *b,
                        void *extra)
{
    lua_State *L = ld->L;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            problem(ld, b->line,
                    "%s: every entry needs a name (name = value); found a "
                    "positional %s",
                    b->what, luaL_typename(L, -1));
            lua_pop(L, 1);
            continue;
        }
        const char *name = lua_tostring(L, -2);
        const key *k = NULL;
        for (size_t i = 0; !k && i < nkeys; i++)
            if (strcmp(keys[i].name, name) == 0)
                k = &keys[i];
        if (!k) {
            char known[512] = "";
            size_t o = 0;
            for (size_t i = 0; i < nkeys && o < sizeof known; i++)
                o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
                                      keys[i].name);
            problem(ld, key_line(ld, b->line, name), "%s: unknown key \"%s\" (known: %s)", b->what,
                    name, known);
        } else {
            read_key(ld, k, b, extra);
        }
        lua_pop(L, 1);
    }
}

static void read_set_body(loader *ld, int idx, sl_set_config *sc, const block *b, void *decl)
{
    if (decl) {
        check_block(ld, idx, set_keys, sizeof set_keys / sizeof *set_keys, b, decl);
        return;
    }
    /* set_defaults: schemas belong to declared sets only */
    check_block(ld, idx, set_keys, sizeof set_keys / sizeof *set_keys - 1, b, NULL);
    (void)sc;
}

static void *grow(loader *ld, void *arr, size_t n, size_t size);

/* server.api_keys = { NAME = { sha256 = …, publish = …, read = …, admin = …,
 * metrics = … } }: each entry checked with api_key_keys, then as a whole
 * (name, hash, patterns) by sl_auth_new(), which the server runs again. */
static void read_api_keys(loader *ld, int idx, const key *k, const block *b)
{
    lua_State *L = ld->L;
    sl_config *cfg = b->obj;
    int line = key_line(ld, b->line, k->name);
    if (lua_type(L, idx) != LUA_TTABLE) {
        problem(ld, line, "%s: api_keys must be a table { NAME = { sha256 = \"…\", … } }", b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TTABLE) {
            problem(ld, line, "%s: api_keys entries are NAME = { sha256 = \"…\", … }", b->what);
            lua_pop(L, 1);
            continue;
        }
        const char *name = lua_tostring(L, -2);
        char what[160];
        snprintf(what, sizeof what, "%s: api key \"%.64s\"", b->what, name);
        sl_auth_key_config *g = grow(ld, cfg->api_keys, cfg->napi_keys, sizeof *g);
        if (!g) {
            lua_pop(L, 1);
            continue;
        }
        cfg->api_keys = g;
        sl_auth_key_config *kc = &cfg->api_keys[cfg->napi_keys++];
        kc->name = dup_string(ld, name, strlen(name));
        kc->line = line;
        block kb = {what, line, kc};
        check_block(ld, lua_gettop(L), api_key_keys, sizeof api_key_keys / sizeof *api_key_keys,
                    &kb, NULL);
        if (!kc->sha256)
            problem(ld, line, "%s needs sha256 (the hash `sluice key new` prints)", what);
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
        problem(ld, line, "%s: %s", b->what, err.msg[0] ? err.msg : "out of memory");
    sl_auth_free(a);
}

static void *grow(loader *ld, void *arr, size_t n, size_t size)
{
    void *g = realloc(arr, (n + 1) * size);
    if (!g)
        ld->oom = 1;
    else
        memset((char *)g + n * size, 0, size);
    return g;
}

static const sl_set_decl *find_set(const sl_config *cfg, const char *name)
{
    for (size_t i = 0; name && i < cfg->nsets; i++)
        if (strcmp(cfg->sets[i].name, name) == 0)
            return &cfg->sets[i];
    return NULL;
}

/* source.KIND { … } (body at idx). */
static void read_source(loader *ld, int body, const char *kind, int line)
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
        problem(ld, line, "unknown source kind source.%s (known: %s)", kind, known);
        return;
    }
    sl_source_config *g = grow(ld, cfg->sources, cfg->nsources, sizeof *g);
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
        check_block(ld, body, sk->keys, sk->nkeys, &b, NULL);
    else
        read_plugin_body(ld, body, KEYS(plugin_source_keys), plugin->keys, plugin->nkeys, &b,
                         &sc->options, &sc->noptions);
    if (!sc->name && sc->set) {
        size_t n = strlen(sc->kind_name) + strlen(sc->set) + 2;
        if ((sc->name = malloc(n)))
            snprintf(sc->name, n, "%s-%s", sc->kind_name, sc->set);
        else
            ld->oom = 1;
    }
    if (sc->kind == SL_SOURCE_FILE && sc->path) {
        char *abs = resolve_path(ld, sc->path);
        free(sc->path);
        sc->path = abs;
    }
}

static void free_rule(sl_rule_config *r);

/* A rule's defaults (besides zeros). */
static void rule_defaults(loader *ld, sl_rule_config *r, const char *name, int line)
{
    r->name = dup_string(ld, name, strlen(name));
    r->line = line;
    r->enabled = true;
    r->ordered = true;
    r->retry = (sl_retry_config){.attempts = 185,
                                 .max_age_ms = 24 * 3600 * 1000,
                                 .backoff = SL_BACKOFF_EXPONENTIAL,
                                 .initial_ms = 100,
                                 .max_ms = 5 * 60 * 1000};
}

/* Whether the table at idx has a non-nil key (raw: no metamethods). */
static bool raw_has(lua_State *L, int idx, const char *k)
{
    lua_pushstring(L, k);
    bool has = lua_rawget(L, idx) != LUA_TNIL;
    lua_pop(L, 1);
    return has;
}

/* The line of `["LANE"] =` at or after from (else of `LANE =`, else from). */
static int override_line(loader *ld, int from, const char *lane)
{
    const char *s = ld->cfg->source, *end = s + ld->cfg->source_len;
    size_t kl = strlen(lane);
    int line = 1;
    for (const char *p = s; p < end; p++) {
        if (line >= from && (*p == '"' || *p == '\'') && (size_t)(end - p) > kl + 2 &&
            memcmp(p + 1, lane, kl) == 0 && p[kl + 1] == *p) {
            const char *q = p + kl + 2;
            while (q < end && (*q == ' ' || *q == '\t' || *q == ']'))
                q++;
            if (q < end && *q == '=' && (q + 1 == end || q[1] != '='))
                return line;
        }
        if (*p == '\n')
            line++;
    }
    return key_line(ld, from, lane);
}

/* Appends the pairs of the table at from to the table at to (raw), but the
 * keys skip says to leave out. */
static void copy_pairs(lua_State *L, int from, int to, bool (*skip)(const char *, void *),
                       void *arg)
{
    lua_pushnil(L);
    while (lua_next(L, from)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (!skip || !k || !skip(k, arg)) {
            lua_pushvalue(L, -2);
            lua_pushvalue(L, -2);
            lua_rawset(L, to);
        }
        lua_pop(L, 1);
    }
}

typedef struct merge_skip {
    bool transforms, targets; /* the override gives its own */
} merge_skip;

static bool skip_in_base(const char *k, void *arg)
{
    const merge_skip *m = arg;
    return strcmp(k, "lanes") == 0 ||
           (m->transforms && (strcmp(k, "transform") == 0 || strcmp(k, "transform_batch") == 0)) ||
           (m->targets && (strcmp(k, "target") == 0 || strcmp(k, "targets") == 0));
}

/* rule.lanes[lane] (the table at own) of base rule ri (its body at body):
 * checks the override's own keys (its mistakes reported once, named by the
 * lane), then reads the base's body with the override's keys on top through
 * the same key table as a rule, into a complete rule config in
 * cfg->overrides. The merged body's other mistakes are the base rule's,
 * already reported: that read is quiet. */
static void read_override(loader *ld, int body, int own, size_t ri, const char *lane)
{
    lua_State *L = ld->L;
    sl_config *cfg = ld->cfg;
    const char *rname = cfg->rules[ri].name ? cfg->rules[ri].name : "?";
    int line = override_line(ld, cfg->rules[ri].line, lane);
    char what[300];
    snprintf(what, sizeof what, "rule \"%s\" lanes[\"%s\"]", rname, lane);
    if (!lua_istable(L, own)) {
        problem(ld, line, "%s: an override must be a table { target = … }, not a %s", what,
                luaL_typename(L, own));
        return;
    }
    bool ok = true;
    lua_pushnil(L);
    while (lua_next(L, own)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        bool allowed = false;
        for (size_t i = 0; k && i < sizeof override_keys / sizeof *override_keys; i++)
            allowed = allowed || strcmp(k, override_keys[i]) == 0;
        if (!allowed) {
            problem(ld, k ? key_line(ld, line, k) : line,
                    "rule \"%s\": lanes[\"%s\"]: %s%s%s cannot be overridden per lane (only "
                    "match, filter, transform, transform_batch, input, target, targets)",
                    rname, lane, k ? "\"" : "a positional ", k ? k : luaL_typename(L, -1),
                    k ? "\"" : "");
            ok = false;
        }
        lua_pop(L, 1);
    }
    if (!ok)
        return;
    sl_rule_config scratch = {0};
    block sb = {what, line, &scratch};
    check_block(ld, own, KEYS(rule_keys), &sb, NULL);
    free_rule(&scratch);

    merge_skip m = {raw_has(L, own, "transform") || raw_has(L, own, "transform_batch"),
                    raw_has(L, own, "target") || raw_has(L, own, "targets")};
    lua_newtable(L);
    int merged = lua_gettop(L);
    copy_pairs(L, body, merged, skip_in_base, &m);
    copy_pairs(L, own, merged, NULL, NULL);
    sl_rule_config *g = grow(ld, cfg->overrides, cfg->noverrides, sizeof *g);
    if (g) {
        cfg->overrides = g;
        sl_rule_config *o = &cfg->overrides[cfg->noverrides++];
        rule_defaults(ld, o, rname, line);
        o->lane = dup_string(ld, lane, strlen(lane));
        o->base = ri;
        o->targets_from_base = !m.targets;
        sl_buf *diag = ld->diag;
        int nerrors = ld->nerrors;
        ld->diag = NULL;
        block b = {what, line, o};
        check_block(ld, merged, KEYS(rule_keys), &b, NULL);
        ld->diag = diag;
        ld->nerrors = nerrors;
        for (size_t t = 0; t < o->ntargets; t++)
            o->targets[t].ordered = o->ordered;
    }
    lua_pop(L, 1);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The overrides of base rule ri (its body at body), in lane name order. */
static void read_overrides(loader *ld, int body, size_t ri)
{
    lua_State *L = ld->L;
    lua_pushliteral(L, "lanes");
    if (lua_rawget(L, body) != LUA_TTABLE) {
        lua_pop(L, 1); /* none, or not a table (K_LANES said so) */
        return;
    }
    int lanes = lua_gettop(L);
    const char *rname = ld->cfg->rules[ri].name ? ld->cfg->rules[ri].name : "?";
    int line = key_line(ld, ld->cfg->rules[ri].line, "lanes");
    char **names = NULL;
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, lanes)) {
        size_t len = 0;
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &len) : NULL;
        char **gn;
        if (!k)
            problem(ld, line,
                    "rule \"%s\": lanes: the keys are lane names, as in "
                    "lanes = { [\"feature-x\"] = { … } }; found a %s key",
                    rname, luaL_typename(L, -2));
        else if (!len || !sl_lane_valid(k, len) || strlen(k) != len)
            problem(ld, line,
                    "rule \"%s\": lanes: \"%s\" is not a lane name "
                    "([a-z0-9-]{1,32}; base events use the rule itself)",
                    rname, k);
        else if (!(gn = realloc(names, (n + 1) * sizeof *gn)))
            ld->oom = 1;
        else if (!((names = gn)[n] = dup_string(ld, k, len)))
            ;
        else
            n++;
        lua_pop(L, 1);
    }
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawget(L, lanes);
        read_override(ld, body, lua_gettop(L), ri, names[i]);
        lua_pop(L, 1);
        free(names[i]);
    }
    free(names);
    lua_pop(L, 1);
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
    if (strcmp(kind, "server") == 0) {
        block b = {"server", line, cfg};
        check_block(ld, body, server_keys, sizeof server_keys / sizeof *server_keys, &b, NULL);
        if (cfg->log_format && sl_slog_parse_format(cfg->log_format, &(sl_slog_format){0}))
            problem(ld, line, "server: log_format must be \"logfmt\" or \"json\"");
        if (cfg->log_level && sl_slog_parse_level(cfg->log_level, &(sl_slog_level){0}))
            problem(ld, line,
                    "server: log_level must be \"debug\", \"info\", \"warn\" or "
                    "\"error\"");
    } else if (strcmp(kind, "set") == 0) {
        snprintf(what, sizeof what, "set \"%s\"", name);
        if (!sl_set_name_valid(name))
            problem(ld, line, "%s: a set name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .",
                    what);
        else if (find_set(cfg, name))
            problem(ld, line, "%s is declared twice", what);
        sl_set_decl *g = grow(ld, cfg->sets, cfg->nsets, sizeof *g);
        if (g) {
            cfg->sets = g;
            sl_set_decl *d = &cfg->sets[cfg->nsets++];
            d->name = dup_string(ld, name, strlen(name));
            d->line = line;
            d->cfg = cfg->set_defaults;
            block b = {what, line, &d->cfg};
            read_set_body(ld, body, &d->cfg, &b, d);
        }
    } else if (strcmp(kind, "rule") == 0) {
        snprintf(what, sizeof what, "rule \"%s\"", name);
        if (!sl_set_name_valid(name))
            problem(ld, line,
                    "%s: a rule name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .", what);
        else if (sl_config_rule(cfg, name))
            problem(ld, line, "%s is declared twice", what);
        sl_rule_config *g = grow(ld, cfg->rules, cfg->nrules, sizeof *g);
        if (g) {
            cfg->rules = g;
            sl_rule_config *r = &cfg->rules[cfg->nrules++];
            rule_defaults(ld, r, name, line);
            block b = {what, line, r};
            check_block(ld, body, rule_keys, sizeof rule_keys / sizeof *rule_keys, &b, NULL);
            for (size_t t = 0; t < r->ntargets; t++)
                r->targets[t].ordered = r->ordered;
            read_overrides(ld, body, cfg->nrules - 1);
        }
    } else if (strcmp(kind, "lane") == 0) {
        snprintf(what, sizeof what, "lane \"%s\"", name);
        const sl_lane_decl *prev = NULL;
        if (!*name)
            problem(ld, line, "%s: the base lane (\"\") is not declared: it always exists", what);
        else if (!sl_lane_valid(name, strlen(name)))
            problem(ld, line, "%s: a lane name is 1-32 of a-z 0-9 -", what);
        else if ((prev = sl_config_lane(cfg, name)))
            problem(ld, line, "%s is declared twice (first at line %d)", what, prev->line);
        sl_lane_decl *g = grow(ld, cfg->lanes, cfg->nlanes, sizeof *g);
        if (g) {
            cfg->lanes = g;
            sl_lane_decl *d = &cfg->lanes[cfg->nlanes++];
            d->name = dup_string(ld, name, strlen(name));
            d->line = line;
            d->env = SL_LANE_BOE;
            block b = {what, line, d};
            check_block(ld, body, KEYS(lane_keys), &b, NULL);
            if (!raw_has(L, body, "fallback"))
                d->fallback_base = d->env == SL_LANE_BOE;
        }
    } else if (strcmp(kind, "source") == 0) {
        read_source(ld, body, name, line);
    }
    lua_pop(L, 4);
}

/* The checks of a rule or an override that need the whole file; who names
 * it in messages. An override inherits set, dlq and retry from its base
 * (checked there, check_base_rule), and its targets too unless it gives its
 * own, so only what it may change is checked again. */
static void check_rule(loader *ld, sl_rule_config *r, const char *who)
{
    sl_config *cfg = ld->cfg;
    if (r->transform && r->transform_batch)
        problem(ld, r->line, "%s: use transform or transform_batch, not both", who);
    if (r->lane && r->targets_from_base)
        return;
    if (!r->ntargets && !r->target_given)
        problem(ld, r->line, "%s: a target is required (target = target.file { … })", who);
    for (size_t t = 0; t < r->ntargets; t++) {
        sl_target_config *tc = &r->targets[t];
        if (tc->kind == SL_TARGET_FILE && !tc->path)
            problem(ld, tc->line, "%s: target.file needs a path", who);
        if (tc->kind == SL_TARGET_HTTP && !tc->url)
            problem(ld, tc->line, "%s: target.http needs a url", who);
        else if (tc->kind == SL_TARGET_HTTP && strncmp(tc->url, "http://", 7) &&
                 strncmp(tc->url, "https://", 8))
            problem(ld, tc->line, "%s: target.http url must start with http:// or https://", who);
        if (tc->kind == SL_TARGET_SET && !tc->set)
            problem(ld, tc->line, "%s: target.set needs a set", who);
        else if (tc->kind == SL_TARGET_SET && !find_set(cfg, tc->set))
            problem(ld, tc->line, "%s: target.set: set \"%s\" is not declared (add set \"%s\" { })",
                    who, tc->set, tc->set);
        else if (tc->kind == SL_TARGET_SET && r->set && strcmp(tc->set, r->set) == 0)
            problem(ld, tc->line, "%s: target.set into the set it reads would loop forever", who);
        if (tc->kind == SL_TARGET_KAFKA && (!tc->brokers || !tc->topic))
            problem(ld, tc->line, "%s: target.kafka needs brokers and a topic", who);
        /* What only the connector knows (e.g. librdkafka's properties). */
        const sl_target_ops *ops = sl_target_ops_of(tc);
        sl_error terr = {0};
        if (ops && ops->check && ops->check(tc, &terr))
            problem(ld, tc->line, "%s: target.%s: %s", who, ops->name, terr.msg);
    }
}

/* The checks of a base rule that need the whole file (who names it). */
static void check_base_rule(loader *ld, sl_rule_config *r, const char *who)
{
    sl_config *cfg = ld->cfg;
    if (!r->set)
        problem(ld, r->line, "%s: set is required (the event set it reads)", who);
    else if (!find_set(cfg, r->set))
        problem(ld, key_line(ld, r->line, "set"),
                "%s: set \"%s\" is not declared (add set \"%s\" { })", who, r->set, r->set);
    if (r->dlq && !find_set(cfg, r->dlq))
        problem(ld, key_line(ld, r->line, "dlq"),
                "%s: dlq set \"%s\" is not declared (add set \"%s\" { })", who, r->dlq, r->dlq);
    else if (r->dlq && r->set && strcmp(r->dlq, r->set) == 0)
        problem(ld, key_line(ld, r->line, "dlq"),
                "%s: the dlq cannot be the set the rule reads (failed events would come back "
                "to it forever)",
                who);
    if (r->retry.initial_ms > r->retry.max_ms)
        problem(ld, key_line(ld, r->line, "retry"),
                "%s: retry.initial (%lld ms) is longer than retry.max (%lld ms)", who,
                (long long)r->retry.initial_ms, (long long)r->retry.max_ms);
    check_rule(ld, r, who);
}

/* An override's lane must be declared, or lanes.auto declares it (boe). */
static void check_override_lane(loader *ld, const sl_rule_config *o, const char *who)
{
    sl_config *cfg = ld->cfg;
    if (sl_config_lane(cfg, o->lane))
        return;
    if (!cfg->lanes_auto) {
        problem(ld, o->line,
                "%s: lane \"%s\" is not declared (add lane \"%s\" { env = \"boe\" }, or "
                "lanes.auto = true)",
                who, o->lane, o->lane);
        return;
    }
    sl_lane_decl *g = grow(ld, cfg->lanes, cfg->nlanes, sizeof *g);
    if (!g)
        return;
    cfg->lanes = g;
    sl_lane_decl *d = &cfg->lanes[cfg->nlanes++];
    d->name = dup_string(ld, o->lane, strlen(o->lane));
    d->line = 0;
    d->env = SL_LANE_BOE;
    d->fallback_base = true;
}

/* Checks what needs the whole file: references between blocks. */
static void cross_check(loader *ld)
{
    sl_config *cfg = ld->cfg;
    char who[300];
    for (size_t i = 0; i < cfg->nrules; i++) {
        snprintf(who, sizeof who, "rule \"%s\"", cfg->rules[i].name);
        check_base_rule(ld, &cfg->rules[i], who);
    }
    for (size_t i = 0; i < cfg->noverrides; i++) {
        sl_rule_config *o = &cfg->overrides[i];
        snprintf(who, sizeof who, "rule \"%s\" lanes[\"%s\"]", o->name, o->lane);
        check_override_lane(ld, o, who);
        check_rule(ld, o, who);
    }
}

/* The sources: names, sets, what each kind requires, the connector's own
 * checks. */
static void check_sources(loader *ld)
{
    sl_config *cfg = ld->cfg;
    for (size_t i = 0; i < cfg->nsources; i++) {
        sl_source_config *sc = &cfg->sources[i];
        char what[300];
        snprintf(what, sizeof what, "source.%s%s%s%s", sc->kind_name, sc->name ? " \"" : "",
                 sc->name ? sc->name : "", sc->name ? "\"" : "");
        if (!sc->set)
            problem(ld, sc->line, "%s: set is required (the event set its events go to)", what);
        else if (!find_set(cfg, sc->set))
            problem(ld, key_line(ld, sc->line, "set"),
                    "%s: set \"%s\" is not declared (add set \"%s\" { })", what, sc->set, sc->set);
        if (sc->name && !sl_set_name_valid(sc->name))
            problem(ld, key_line(ld, sc->line, "name"),
                    "%s: a source name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .", what);
        for (size_t j = 0; j < i && sc->name; j++)
            if (cfg->sources[j].name && strcmp(cfg->sources[j].name, sc->name) == 0) {
                problem(ld, sc->line,
                        "%s: the name is taken by the source at line %d (give each source "
                        "its own name = \"…\")",
                        what, cfg->sources[j].line);
                break;
            }
        if (sc->lane && !sl_lane_valid(sc->lane, strlen(sc->lane)))
            problem(ld, key_line(ld, sc->line, "lane"),
                    "%s: lane \"%s\" is not a lane name ([a-z0-9-]{1,32})", what, sc->lane);
        else if (sc->lane && *sc->lane && !cfg->lanes_auto && !sl_config_lane(cfg, sc->lane))
            /* Its every event would be refused (UnknownLane). */
            problem(ld, key_line(ld, sc->line, "lane"),
                    "%s: lane \"%s\" is not declared (add lane \"%s\" { env = \"boe\" }, or "
                    "lanes.auto = true)",
                    what, sc->lane, sc->lane);
        if (sc->kind == SL_SOURCE_FILE) {
            if (!sc->path)
                problem(ld, sc->line, "%s: path is required (a file or a glob)", what);
            regex_t re;
            int rc = sc->multiline ? regcomp(&re, sc->multiline, REG_EXTENDED | REG_NOSUB) : 0;
            if (rc) {
                char msg[200];
                regerror(rc, &re, msg, sizeof msg);
                problem(ld, key_line(ld, sc->line, "multiline"),
                        "%s: multiline is not an extended regex: %s", what, msg);
            } else if (sc->multiline) {
                regfree(&re);
            }
        } else if (sc->kind == SL_SOURCE_WEBHOOK) {
            sl_error werr = {0};
            if (!sc->name || !sc->preset || !sc->secret)
                problem(ld, sc->line,
                        "%s: name, preset and secret are required (the URL is "
                        "/v1/webhooks/NAME)",
                        what);
            else if (sl_webhook_source_check(sc, &werr))
                problem(ld, sc->line, "%s: %s", what, werr.msg);
        } else if (sc->kind == SL_SOURCE_KAFKA) {
            if (!sc->brokers || !sc->ntopics)
                problem(ld, sc->line, "%s: brokers and topics are required", what);
        }
        const sl_source_ops *ops = sl_source_ops_of(sc);
        sl_error serr = {0};
        if (ops && ops->check && ops->check(sc, &serr))
            problem(ld, sc->line, "%s: %s", what, serr.msg);
    }
}

/* server.plugin_dir: the plugins' kinds must be known before the sources
 * and targets are read. */
static void load_plugins(loader *ld)
{
    sl_config *cfg = ld->cfg;
    if (!cfg->plugin_dir)
        return;
    char *abs = resolve_path(ld, cfg->plugin_dir);
    if (!abs)
        return;
    free(cfg->plugin_dir);
    cfg->plugin_dir = abs;
    sl_buf diag = SL_BUF_INIT;
    if (sl_plugin_load_dir(abs, &diag) && sl_buf_append(&diag, "", 1) == 0) {
        for (char *p = (char *)diag.data, *nl; p && *p; p = nl ? nl + 1 : NULL) {
            nl = strchr(p, '\n');
            if (nl)
                *nl = '\0';
            if (*p)
                problem(ld, key_line(ld, 1, "plugin_dir"), "%s", p);
        }
    }
    sl_buf_free(&diag);
}

/* lanes.auto = true / lanes { auto = true }, as the file left them. */
static void read_lanes_settings(loader *ld)
{
    lua_State *L = ld->L;
    lua_getglobal(L, "__sluice_lanes");
    lua_call(L, 0, 2);
    int line = (int)lua_tointeger(L, -1);
    if (lua_istable(L, -2)) {
        block b = {"lanes", line > 0 ? line : 1, ld->cfg};
        check_block(ld, lua_gettop(L) - 1, KEYS(lanes_keys), &b, NULL);
    } else if (!lua_isnil(L, -2)) {
        problem(ld, key_line(ld, 1, "lanes"), "lanes must be a table, as in lanes.auto = true");
    }
    lua_pop(L, 2);
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
        problem(ld, (int)lua_tointeger(L, -2), "%s", lua_tostring(L, -1));
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
        problem(ld, (int)lua_tointeger(L, -1),
                "too many declarations (%lld; at most %d sets, rules, sources, lanes and server "
                "blocks in one file)",
                (long long)luaL_len(L, decls), CONFIG_MAX_DECLS);
        lua_pop(L, 3);
        return 0;
    }
    /* The server block first: set_defaults applies to every set. */
    for (int pass = 0; pass < 2; pass++) {
        for (lua_Integer i = 1, n = luaL_len(L, decls); i <= n; i++) {
            lua_geti(L, decls, i);
            lua_getfield(L, -1, "kind");
            bool is_server = strcmp(lua_tostring(L, -1), "server") == 0;
            lua_pop(L, 1);
            if (is_server == (pass == 0)) {
                if (is_server && servers++) {
                    lua_getfield(L, -1, "line");
                    problem(ld, (int)lua_tointeger(L, -1),
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
    lua_pop(L, 1);
    read_lanes_settings(ld);
    cross_check(ld);
    check_sources(ld);
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
    /* The walk reads tables the file made, which may carry metatables
     * whose methods raise errors or loop: it runs protected, with the budget. */
    ld.ran = rc == 0;
    lua_pushcfunction(L, walk);
    lua_pushlightuserdata(L, &ld);
    if (sl_sandbox_call(L, 1, 0, &err))
        problem(&ld, 0, "while checking the declarations: %s", err.msg);
    if (cfg->data_dir && cfg->data_dir[0] != '/') {
        char *abs = resolve_path(&ld, cfg->data_dir);
        free(cfg->data_dir);
        cfg->data_dir = abs;
    }
    for (int t = 0; t < 2; t++) { /* server.tls_cert, tls_key */
        char **f = t ? &cfg->tls_key : &cfg->tls_cert;
        if (*f && (*f)[0] != '/') {
            char *abs = resolve_path(&ld, *f);
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
    return find_set(cfg, name);
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

static const char *const type_names[] = {
    [K_STRING] = "string",
    [K_BOOL] = "boolean",
    [K_TRISTATE] = "boolean",
    [K_INT] = "integer",
    [K_SIZE] = "size",
    [K_DURATION] = "duration",
    [K_ACK] = "string",
    [K_CODEC] = "string",
    [K_START] = "string",
    [K_FUNCTION] = "function",
    [K_PATTERN] = "pattern",
    [K_INPUT] = "string or table",
    [K_TARGETS] = "target(s)",
    [K_SCHEMAS] = "table",
    [K_SETBODY] = "table",
    [K_HEADERS] = "table",
    [K_AUTH] = "table",
    [K_BODY] = "string",
    [K_RETRY] = "table",
    [K_BACKOFF] = "string",
    [K_PROPS] = "table",
    [K_STRINGS] = "string(s)",
    [K_PARSE] = "string or function",
    [K_LONGLINES] = "string",
    [K_ENCODING] = "string",
    [K_LANES] = "table",
    [K_LANEENV] = "string",
    [K_FALLBACK] = "string",
    [K_APIKEYS] = "table",
};

static int keys_table(sl_buf *out, const char *title, const key *keys, size_t n)
{
    int rc = sl_buf_printf(
        out, "\n### %s\n\n| key | type | default | meaning |\n|---|---|---|---|\n", title);
    for (size_t i = 0; !rc && i < n; i++)
        rc = sl_buf_printf(out, "| `%s` | %s | %s | %s |\n", keys[i].name, type_names[keys[i].type],
                           keys[i].dflt[0] ? keys[i].dflt : "—", keys[i].doc);
    return rc;
}

int sl_config_keys_markdown(sl_buf *out)
{
    int rc = keys_table(out, "server { … }", KEYS(server_keys));
    if (!rc)
        rc = keys_table(out, "server.api_keys.NAME { … }", KEYS(api_key_keys));
    if (!rc)
        rc = keys_table(out, "set \"NAME\" { … }", KEYS(set_keys));
    if (!rc)
        rc = keys_table(out, "rule \"NAME\" { … }", KEYS(rule_keys));
    if (!rc)
        rc = keys_table(out, "rule.retry { … }", KEYS(retry_keys));
    if (!rc)
        rc = keys_table(out, "lane \"NAME\" { … }", KEYS(lane_keys));
    if (!rc)
        rc = keys_table(out, "lanes { … }", KEYS(lanes_keys));
    for (size_t i = 0; !rc && i < sizeof target_kinds / sizeof *target_kinds; i++) {
        char title[64];
        snprintf(title, sizeof title, "target.%s { … }", target_kinds[i].name);
        rc = keys_table(out, title, target_kinds[i].keys, target_kinds[i].nkeys);
        if (!rc)
            rc = sl_buf_printf(out, "\n%s.\n", target_kinds[i].doc);
    }
    for (size_t i = 0; !rc && i < sizeof source_kinds / sizeof *source_kinds; i++) {
        char title[64];
        snprintf(title, sizeof title, "source.%s { … }", source_kinds[i].name);
        rc = keys_table(out, title, source_kinds[i].keys, source_kinds[i].nkeys);
        if (!rc)
            rc = sl_buf_printf(out, "\n%s.\n", source_kinds[i].doc);
    }
    return rc;
}

static void free_lines(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void free_source(sl_source_config *sc)
{
    free(sc->name);
    free(sc->set);
    free(sc->lane);
    free(sc->type);
    free(sc->source);
    free(sc->path);
    free(sc->multiline);
    free(sc->preset);
    free(sc->secret);
    free(sc->header);
    free(sc->algorithm);
    free(sc->prefix);
    free(sc->timestamp_header);
    free(sc->id_header);
    free(sc->brokers);
    free_lines(sc->topics, sc->ntopics);
    free(sc->group);
    free_lines(sc->properties, sc->nproperties);
    free_lines(sc->options, sc->noptions);
}

static void free_rule(sl_rule_config *r)
{
    free(r->name);
    free(r->set);
    free(r->description);
    free(r->match_json);
    sl_pattern_free(r->pattern);
    sl_input_free(r->input);
    for (size_t t = 0; t < r->ntargets; t++) {
        sl_target_config *tc = &r->targets[t];
        free(tc->path);
        free(tc->set);
        free(tc->url);
        free(tc->method);
        for (size_t h = 0; h < tc->nheaders; h++)
            free(tc->headers[h]);
        free(tc->headers);
        free(tc->bearer);
        free(tc->basic_user);
        free(tc->basic_pass);
        free(tc->api_key_header);
        free(tc->api_key);
        free(tc->ca_file);
        free(tc->brokers);
        free(tc->topic);
        free(tc->key);
        free(tc->compression);
        free_lines(tc->properties, tc->nproperties);
        free_lines(tc->options, tc->noptions);
    }
    free(r->targets);
    free(r->dlq);
    free(r->lane);
}

void sl_config_free(sl_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->nrules; i++)
        free_rule(&cfg->rules[i]);
    free(cfg->rules);
    for (size_t i = 0; i < cfg->noverrides; i++)
        free_rule(&cfg->overrides[i]);
    free(cfg->overrides);
    for (size_t i = 0; i < cfg->nlanes; i++) {
        free(cfg->lanes[i].name);
        free(cfg->lanes[i].description);
    }
    free(cfg->lanes);
    for (size_t i = 0; i < cfg->nsources; i++)
        free_source(&cfg->sources[i]);
    free(cfg->sources);
    free(cfg->plugin_dir);
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
    free(cfg->data_dir);
    for (size_t i = 0; i < cfg->napi_keys; i++) {
        free(cfg->api_keys[i].name);
        free(cfg->api_keys[i].sha256);
        free_lines(cfg->api_keys[i].publish, cfg->api_keys[i].npublish);
        free_lines(cfg->api_keys[i].read, cfg->api_keys[i].nread);
    }
    free(cfg->api_keys);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->log_format);
    free(cfg->log_level);
    free(cfg);
}
