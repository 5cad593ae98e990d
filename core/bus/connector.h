/*
 * core/bus/connector.h — the interface every source and target kind
 * implements: the built-in ones of connectors/ and the loadable plugins
 * alike (core/bus/plugin.h; plugins/README.md is the ABI for their authors).
 *
 * Like every sluice vtable the first field is the ABI version, and a caller
 * reads a field only when the version says it exists. Built-in kinds are
 * listed by the registry of kinds (server/registry.c), plugins register
 * theirs (core/bus/plugin.h); the config loader resolves each block's kind
 * once and stores its table in the block's config (ops), so the rule runner
 * (rules/, which owns the target instances) and the sources host
 * (server/sources.c, the source instances) never look a kind up.
 *
 * Targets (ARCHITECTURE.md §8): delivery is asynchronous by contract.
 * deliver() may complete some payloads before it returns and others later
 * from another thread (an HTTP response, a Kafka delivery report). Each
 * payload is completed exactly once. The runner moves a rule's cursor only
 * when every payload of a batch completed.
 *
 * Statuses: 0 delivered; SL_EINVAL refused for good (the rule dead-letters
 * it); SL_EDEFERRED not attempted (it is retried without using up one of
 * the rule's attempts), SL_ESHUTDOWN likewise while the server stops; any
 * other code a failed attempt, retried after the rule's back-off. Order: the
 * payloads of one call are one partition's, in order; with cfg->ordered a
 * target must not deliver a payload after one of the same call that failed
 * in a retryable way (complete the rest SL_EDEFERRED instead), so that the
 * retry does not arrive after its successors.
 */
#ifndef SL_CONNECTOR_H
#define SL_CONNECTOR_H

#include "core/base/err.h"
#include "core/bus/conf_key.h"
#include "core/bus/databus.h"
#include "core/bus/set.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 2: the config structs hold only what every kind has plus the kind's own
 * struct (conf); the ops tables end with the built-in kinds' key tables
 * (docs/plugin-abi.md, "Versions"). */
#define SL_CONNECTOR_ABI_VERSION 2

struct sl_target_ops;
struct sl_source_ops;
struct sl_config;

/* target.KIND { … }: one target of a rule, as the config loader read it. */
typedef struct sl_target_config {
    const struct sl_target_ops *ops; /* the kind's table (built-in or plugin), never NULL */
    const char *kind_name;           /* ops->name: "file", "set", … or the plugin's */
    int line;
    bool ordered; /* keep per-partition order (the owning rule's `ordered`) */
    /* Built-in kinds: the kind's own struct (ops->conf_size bytes, e.g.
     * sl_target_http_conf), filled from ops->conf_keys; NULL for plugins. */
    void *conf;
    /* Plugins: their keys' values as "name=value" lines (values normalised:
     * durations in ms, sizes in bytes, booleans true/false). */
    char **options;
    size_t noptions;
} sl_target_config;

/* source.KIND { … }: one declaration. Strings are owned. */
typedef struct sl_source_config {
    const struct sl_source_ops *ops; /* the kind's table (built-in or plugin), never NULL */
    const char *kind_name;           /* ops->name: "file", "webhook", "kafka" or the plugin's */
    int line;
    size_t index;        /* among the config's sources (rule VMs find parse functions by it) */
    char *name;          /* unique among sources; state lives in DATA/sources/NAME */
    char *set;           /* required: where the events go */
    char *lane;          /* stamped on every event; NULL: base (or what the event says) */
    char *type;          /* CloudEvent type of wrapped payloads; NULL: the kind's default */
    char *source;        /* CloudEvent source of wrapped payloads; NULL: the kind's default */
    bool from_beginning; /* start = "beginning" (file, kafka); default "end" */
    /* Built-in kinds: the kind's own struct (ops->conf_size bytes, e.g.
     * sl_source_file_conf), filled from ops->conf_keys; NULL for plugins. */
    void *conf;
    /* Plugins: as for targets. */
    char **options;
    size_t noptions;
    const struct sl_config *owner; /* the config this block belongs to (opaque here) */
} sl_source_config;

/* What the config loader gives a kind's check_conf(): a way to report each
 * mistake of a block on the line of the key it names, and what a block
 * cannot see by itself. */
typedef struct sl_conf_check {
    void *ctx;
    /* Reports "WHO: message" (WHO: the rule of a target, the source) on the
     * line of key in the block (NULL: the block's first line). */
    void (*problem)(void *ctx, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    /* Whether the config declares set name. */
    bool (*set_declared)(void *ctx, const char *name);
    const char *rule_set; /* targets: the set the owning rule reads; NULL for sources */
} sl_conf_check;

/* The type of a plugin's config key; config values are checked against it
 * and handed over as text: durations in ms, sizes in bytes, integers and
 * booleans ("true"/"false") as written, string lists joined by '\n'. */
typedef enum sl_plugin_key_type {
    SL_PKEY_STRING,
    SL_PKEY_INT,
    SL_PKEY_BOOL,
    SL_PKEY_DURATION,
    SL_PKEY_SIZE,
    SL_PKEY_STRINGS,
} sl_plugin_key_type;

typedef struct sl_plugin_key {
    const char *name;
    sl_plugin_key_type type;
    bool required;
    const char *dflt; /* for the docs only ("" when none) */
    const char *doc;
} sl_plugin_key;

/* What a target instance may use from the server. */
typedef struct sl_target_env {
    sl_sets *sets;    /* the event sets (target.set), NULL in `sluice test` */
    sl_databus *bus;  /* the write path into them */
    const char *rule; /* the owning rule's name, for messages */
} sl_target_env;

/* One payload to deliver. */
typedef struct sl_delivery {
    const char *data; /* the payload (a CloudEvent's JSON, or what `input` made) */
    size_t len;
    const char *lane; /* the source event's lane, "" for base */
} sl_delivery;

/* Completion of payload i of a deliver() call: status 0 delivered, or an
 * SL_E… code with reason (a sentence, may be NULL). */
typedef void sl_deliver_done_fn(void *ctx, size_t i, int status, const char *reason);

typedef struct sl_target_ops {
    uint32_t abi_version; /* SL_CONNECTOR_ABI_VERSION */
    const char *name;     /* "file", "set", … as in target.NAME { … } */
    /* Creates an instance from its checked config. Returns 0 and *impl, or an
     * SL_E… code with err (nothing left allocated). */
    int (*open)(const sl_target_config *cfg, const sl_target_env *env, void **impl, sl_error *err);
    /* Delivers d[0..n); see the completion contract above. d and the bytes
     * it points to are valid until every payload completed. */
    void (*deliver)(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                    void *ctx);
    /* Waits for outstanding deliveries and frees the instance. */
    void (*close)(void *impl);
    /* Optional (NULL: nothing to hurry): called when the server stops,
     * before the rule workers are joined and close() runs. Completes queued
     * and new payloads with SL_ESHUTDOWN at once and gives payloads in flight
     * a short grace, so that a hung endpoint cannot hold the shutdown for a
     * whole timeout. Payloads failed this way are delivered again after the
     * restart (their cursor did not move). */
    void (*cancel)(void *impl);
    /* Optional: checks what only the connector knows (e.g. librdkafka's
     * property names) when the config is loaded, before any instance runs;
     * `sluice check` reports what it returns. 0, or SL_EINVAL with err. */
    int (*check)(const sl_target_config *cfg, sl_error *err);
    /* Optional: the instance's health for GET /v1/rules: 0 healthy, or 1
     * with msg saying what is wrong (e.g. "all brokers are down"). */
    int (*health)(void *impl, char *msg, size_t len);
    /* Payloads per deliver() call the target works best with (0: the
     * runner's default, 512). A target whose every call waits a fixed time
     * (a Kafka delivery report after linger.ms) asks for more so that the
     * wait is shared by more events; the runner caps it at 8192. */
    uint32_t batch_hint;
    /* Plugins: the keys of their target.NAME { … } block. Built-ins: NULL. */
    const sl_plugin_key *keys;
    size_t nkeys;
    /* Since ABI 2. Built-in kinds: the keys of their block as a table the
     * loader reads into a struct of conf_size bytes (cfg->conf), which starts
     * as a copy of conf_defaults (NULL: zeros); doc is the kind's sentence
     * in docs/config.md. Plugins leave these zero (their keys are above). */
    const sl_conf_key *conf_keys;
    size_t nconf_keys;
    size_t conf_size;
    const void *conf_defaults;
    const char *doc;
    /* Since ABI 2, optional: checks the block's values when the config is
     * loaded, reporting every mistake through chk; runs before check(). */
    void (*check_conf)(const sl_target_config *cfg, const sl_conf_check *chk);
} sl_target_ops;

/* ---- sources ----------------------------------------------------------------
 *
 * A source instance runs its own thread(s) and hands events to the host,
 * which checks them like HTTP ingest does (CloudEvents rules, the set's
 * schemas and size limit, lanes), batches them and publishes each batch
 * through the Databus. flush() returns only once the Databus acknowledged
 * the batch (on disk for an ack = "durable" set), waiting while the set's
 * buffers are full: that wait is the source's back-pressure. A source
 * commits its own position (a file offset, a Kafka offset) only after
 * flush() returned 0, so a crash repeats at most the unacknowledged batch.
 */

/* How emit_data() carries a payload that is not a CloudEvent. */
typedef enum sl_source_data {
    SL_DATA_AUTO,  /* JSON when it parses, else text when UTF-8, else data_base64 */
    SL_DATA_JSON,  /* JSON text (checked again against the set's limits; text if it fails) */
    SL_DATA_TEXT,  /* a string (data_base64 when it is not UTF-8) */
    SL_DATA_PARSE, /* a line for the source's parse function (see emit_data) */
} sl_source_data;

/* emit_data() of an SL_DATA_PARSE payload: the parse function dropped it. */
#define SL_SOURCE_DROPPED 1

/* Attributes of a wrapped payload; NULL / 0 fields take the defaults. */
typedef struct sl_source_meta {
    const char *type;   /* NULL: the source's `type` */
    const char *source; /* NULL: the source's `source` */
    const char *id;     /* NULL: a UUIDv7 */
    size_t id_len;
    const char *subject; /* NULL: none */
    const char *key;     /* partitionkey; NULL: none */
    size_t key_len;
    const char *lane; /* NULL: the source's `lane` */
    int64_t time_ms;  /* 0: now */
    sl_source_data data;
    const char *content_type; /* datacontenttype; NULL: application/json or text/plain */
} sl_source_meta;

/* What sluice gives a source instance. Functions take host->ctx. emit and
 * flush are called from one thread at a time per instance. */
typedef struct sl_source_host {
    uint32_t abi_version; /* SL_CONNECTOR_ABI_VERSION */
    void *ctx;
    const char *name;      /* the source's name */
    const char *state_dir; /* DATA/sources/NAME, created: the source's own files */
    /* Adds a structured CloudEvent (JSON) to the batch. lane NULL: the
     * source's lane. Returns 0 (added), SL_EINVAL with err when the event
     * is refused (counted, logged; nothing added), SL_ENOMEM. */
    int (*emit_event)(void *ctx, const char *json, size_t len, const char *lane, sl_error *err);
    /* Adds a payload wrapped as a CloudEvent (meta may be NULL). Same
     * returns.
     * With meta->data SL_DATA_PARSE the host first runs the parse function
     * of the source's config (source.file's parse = function(line) … end,
     * docs/sources.md) on the payload, in a Lua VM of the source's own,
     * and adds what it returned: a string as text data, a table as JSON
     * data, a table with specversion as a CloudEvent (given meta->id when it
     * has no id), each with meta's other attributes. Besides the returns
     * above: SL_SOURCE_DROPPED when it returned nil or false (nothing added,
     * nothing counted); SL_EPARSE with err saying why when it failed or the
     * source has none (nothing added, nothing counted, nothing logged: the
     * source decides, e.g. adds the payload again as text). */
    int (*emit_data)(void *ctx, const void *data, size_t len, const sl_source_meta *meta,
                     sl_error *err);
    /* Events and bytes waiting in the batch. */
    size_t (*pending)(void *ctx, size_t *bytes);
    /* Publishes the batch and waits for the Databus' acknowledgement.
     * Returns 0 (the batch is stored; empty batches too), or SL_ESHUTDOWN
     * when the server stops first (the batch may or may not be stored: do
     * not commit it). Other failures are retried inside. */
    int (*flush)(void *ctx, sl_error *err);
    /* True once the server asked the source to stop. */
    bool (*stopping)(void *ctx);
    /* Sleeps up to ms, returning early (true) when the server stops. */
    bool (*wait)(void *ctx, int64_t ms);
    /* Logs a line to the server log, prefixed with the source's name; at
     * most one line per second per source (the rest are counted). */
    void (*log)(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    /* A plugin key's value (normalised text, see sl_plugin_key), or NULL
     * when the config did not set it. */
    const char *(*option)(void *ctx, const char *name);
    /* Counts (and logs, like emit's refusals) a payload the source itself
     * found unusable and skips, so that GET /v1/sources shows every refusal.
     * code is an sl_event_status name ("InvalidEvent", "LaneConflict", …). */
    void (*refused)(void *ctx, const char *code, const char *why);
} sl_source_host;

typedef struct sl_source_ops {
    uint32_t abi_version; /* SL_CONNECTOR_ABI_VERSION */
    const char *name;     /* as in source.NAME { … } */
    /* Plugins: the keys of their block besides the common ones (name, set,
     * lane, type, source, start). Built-ins: NULL (see conf_keys). */
    const sl_plugin_key *keys;
    size_t nkeys;
    /* Optional: checks at `sluice check` time. 0, or SL_EINVAL with err. */
    int (*check)(const sl_source_config *cfg, sl_error *err);
    /* Creates the instance and starts its thread(s). host outlives it.
     * NULL for source.webhook, which the HTTP API serves. */
    int (*open)(const sl_source_config *cfg, const sl_source_host *host, void **impl,
                sl_error *err);
    /* Asks the instance to stop (host->stopping() is already true): a
     * flush in progress returns SL_ESHUTDOWN. Must return at once. */
    void (*stop)(void *impl);
    /* Waits for the thread(s) and frees the instance. */
    void (*close)(void *impl);
    /* Optional: 0 healthy, or 1 with msg saying what is wrong. */
    int (*health)(void *impl, char *msg, size_t len);
    /* Optional: appends Prometheus text lines (e.g. Kafka consumer lag) to
     * out[0..cap), each family with its # HELP and # TYPE line
     * (sl_metrics_family; a family without both is left out of /metrics);
     * returns the bytes written. */
    size_t (*metrics)(void *impl, char *out, size_t cap);
    /* Since ABI 2: as for targets (conf_keys: the kind's own keys, after the
     * common ones; no_start: the kind takes no `start` key, e.g. webhook). */
    const sl_conf_key *conf_keys;
    size_t nconf_keys;
    size_t conf_size;
    const void *conf_defaults;
    const char *doc;
    void (*check_conf)(const sl_source_config *cfg, const sl_conf_check *chk);
    bool no_start;
} sl_source_ops;

#endif
