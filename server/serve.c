/*
 * server/serve.c — `sluice serve`: opens the event sets, starts the Databus,
 * the router (rules and sources, server/router.h) and the HTTP API, applies
 * retention once a minute, reloads the config on SIGHUP, and shuts down cleanly
 * on SIGTERM/SIGINT (stop accepting, drain every buffer to disk, sync, close
 * every log with its clean marker, exit 0).
 */
#include "server/serve.h"

#include "http/aws.h"
#include "http/http.h"
#include "kafka/kafka.h"
#include "core/bus/auth.h"
#include "core/base/clock.h"
#include "core/base/kafka_admin.h"
#include "core/base/net.h"
#include "server/config.h"
#include "core/bus/databus.h"
#include "core/bus/redrive.h"
#include "server/router.h"
#include "core/base/parse.h"
#include "core/bus/set.h"
#include "core/bus/waits.h"
#include "core/base/slog.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char serve_usage[] =
    "usage: sluice serve [-c CONFIG.lua] [--data DIR] [--listen HOST:PORT] [--partitions N]\n"
    "                    [--kafka-listen HOST:PORT]\n"
    "                    [--ack buffer|durable] [--compression none|zstd] [--no-auto-create]\n"
    "                    [--buffer-bytes SIZE] [--linger-ms N] [--max-request SIZE]\n"
    "                    [--idle-timeout S] [--request-timeout S] [--max-event SIZE]\n"
    "                    [--generate-ids] [--log-format logfmt|json] [--log-level LEVEL]\n"
    "                    [--insecure] [--tls-cert FILE --tls-key FILE]\n"
    "  -c, --config FILE   the Lua config (docs/config.md); SIGHUP reloads it\n"
    "  --data DIR          where event sets live (default ./sluice-data)\n"
    "  --listen HOST:PORT  HTTP address (default 127.0.0.1:8080; loopback unless you say so)\n"
    "  --kafka-listen HOST:PORT  also speak the Kafka protocol there (docs/kafka-protocol.md;\n"
    "                    off by default; port 0 picks a free one)\n"
    "  --partitions N      partitions of sets created on first publish (default 4)\n"
    "  --ack MODE          ack mode of new sets (default durable)\n"
    "  --compression C     batch compression of new sets (default none)\n"
    "  --no-auto-create    refuse events for sets that do not exist yet (404)\n"
    "  --buffer-bytes SIZE Databus buffer per partition of new sets (default 8MiB)\n"
    "  --linger-ms N       how long the Databus waits to fill a batch (default 2)\n"
    "  --max-request SIZE  largest request body (default 10MiB; larger gets 413)\n"
    "  --idle-timeout S    close idle or stalled connections after S seconds (default 30)\n"
    "  --request-timeout S a request body must arrive within S seconds (default 60)\n"
    "  --max-event SIZE    largest stored event of new sets (default 1MiB)\n"
    "  --generate-ids      new sets give events without an id a UUIDv7 instead of refusing\n"
    "  --log-format F      log lines as logfmt (default) or json (docs/operations.md#logs)\n"
    "  --log-level L       lowest level logged: debug, info (default), warn or error\n"
    "  --insecure          allow a non-loopback --listen without API keys (docs/security.md)\n"
    "  --tls-cert FILE     serve HTTPS with this PEM certificate (chain) …\n"
    "  --tls-key FILE      … and its PEM private key\n"
    "Set options apply to sets created from now on; existing sets keep their set.json.\n"
    "Flags win over the config file's server { … } block.\n";

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sluice serve: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", serve_usage);
    return 2;
}

static void log_notice(void *ctx, const char *msg)
{
    (void)ctx;
    sl_slog(SL_SLOG_WARN, "recovery", "%s", msg);
}

/* Splits HOST:PORT; the host part may be empty (127.0.0.1). */
static int parse_listen(const char *s, char *host, size_t hsize, uint16_t *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon)
        return -1;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || p < 0 || p > 65535)
        return -1;
    size_t hl = (size_t)(colon - s);
    if (hl >= hsize)
        return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (!hl)
        snprintf(host, hsize, "127.0.0.1");
    *port = (uint16_t)p;
    return 0;
}

/* Wakes long-polls and rules after every append. */
typedef struct appenders {
    sl_waits *waits;
    sl_router *router;
} appenders;

static void on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane)
{
    appenders *a = ctx;
    sl_waits_on_append(a->waits, set, partition, end);
    if (a->router)
        sl_router_on_append(a->router, set, partition, end, lane);
}

/* The Kafka listener's parts of the HTTP API. */
static int kafka_groups(void *ctx, sl_buf *out)
{
    return sl_kafka_groups_json(ctx, out);
}

static int kafka_metrics(void *ctx, sl_buf *out)
{
    return sl_kafka_metrics(ctx, out);
}

/* Records written to a Kafka-backed set by any router: wakes its rules
 * (the router is there once the config's rules started). */
static _Atomic(sl_router *) remote_router;

static void on_remote_data(sl_set *set, int32_t partition, void *ctx)
{
    (void)ctx;
    sl_router *r = atomic_load(&remote_router);
    if (r)
        sl_router_on_append(r, set, partition, -1, NULL);
}

/* server.kafka, copied: the registry's Kafka-backed sets outlive the
 * config (a reload frees it). */
typedef struct kafka_copy {
    sl_kafka_cluster cl;
    char *strs[4];
    char **props;
} kafka_copy;

static int kafka_copy_make(const sl_config_kafka *k, kafka_copy *c)
{
    memset(c, 0, sizeof *c);
    const char *in[4] = {k->brokers, k->client_id, k->topic_prefix, k->group_prefix};
    const char *dflt[4] = {"", "sluice", "sluice.", "sluice.set."};
    for (int i = 0; i < 4; i++)
        if (!(c->strs[i] = strdup(in[i] ? in[i] : dflt[i])))
            return SL_ENOMEM;
    if (k->nproperties && !(c->props = calloc(k->nproperties, sizeof *c->props)))
        return SL_ENOMEM;
    for (size_t i = 0; i < k->nproperties; i++)
        if (!(c->props[c->cl.nprops++] = strdup(k->properties[i])))
            return SL_ENOMEM;
    c->cl.brokers = c->strs[0];
    c->cl.client_id = c->strs[1];
    c->cl.topic_prefix = c->strs[2];
    c->cl.group_prefix = c->strs[3];
    c->cl.props = c->props;
    c->cl.session_timeout_ms = (int)k->session_timeout_ms;
    c->cl.delivery_timeout_ms = (int)k->delivery_timeout_ms;
    return 0;
}

static void kafka_copy_free(kafka_copy *c)
{
    for (int i = 0; i < 4; i++)
        free(c->strs[i]);
    for (size_t i = 0; i < c->cl.nprops; i++)
        free(c->props[i]);
    free(c->props);
}

/* Loads the config named by -c/--config, if any. Returns 0, 1 (with the
 * mistakes printed) or 2 (usage). */
static int load_config(int argc, char **argv, sl_config **cfg)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") && strcmp(argv[i], "--config"))
            continue;
        if (i + 1 >= argc)
            return usage("%s needs a file", argv[i]);
        sl_buf diag = SL_BUF_INIT;
        int rc = sl_config_load(argv[i + 1], cfg, &diag);
        if (rc)
            fprintf(stderr, "sluice serve: %s refused:\n%.*s", argv[i + 1], (int)diag.len,
                    diag.data ? (const char *)diag.data : "");
        sl_buf_free(&diag);
        return rc ? 1 : 0;
    }
    return 0;
}

/* The API keys in force, and those replaced by reloads: a request may
 * still hold a key of an old table, so they are freed only at exit. */
typedef struct security {
    sl_http *http;
    sl_kafka *kafka; /* NULL when the Kafka listener is off */
    sl_auth *auth;
    sl_auth **retired;
    size_t nretired;
    bool loopback, insecure; /* insecure: --insecure (the file's is re-read) */
    /* The log settings in force; a --log-format/--log-level flag wins
     * over the file's on reload. */
    bool log_format_flag, log_level_flag;
    sl_slog_format log_format;
    sl_slog_level log_level;
} security;

/* The keys of a reloaded cfg into *out (NULL: none). Returns 0, or -1 after
 * logging why the reload is refused (bad keys; none left on a
 * non-loopback listen without insecure). */
static int reload_keys(const security *sec, const sl_config *cfg, sl_auth **out)
{
    sl_error err = {0};
    *out = NULL;
    if (cfg->napi_keys && sl_auth_new(cfg->api_keys, cfg->napi_keys, out, &err)) {
        sl_slog(SL_SLOG_ERROR, "server", "reload of %s refused; the running config stays: %s",
                cfg->path, err.msg[0] ? err.msg : sl_strerror(SL_ENOMEM));
        return -1;
    }
    if (!*out && !sec->loopback && !sec->insecure && !cfg->insecure) {
        sl_slog(SL_SLOG_ERROR, "server",
                "reload of %s refused; the running config stays: it declares no API keys and "
                "the server listens beyond loopback (server.insecure = true allows that)",
                cfg->path);
        return -1;
    }
    return 0;
}

/* Puts keys in force; the previous table is kept until exit. */
static void swap_keys(security *sec, sl_auth *keys)
{
    sl_auth **g = realloc(sec->retired, (sec->nretired + 1) * sizeof *g);
    if (!g) { /* cannot keep the old table safely: keep it in force instead */
        sl_slog(SL_SLOG_ERROR, "server", "reload: out of memory; the previous API keys stay");
        sl_auth_free(keys);
        return;
    }
    sec->retired = g;
    sec->retired[sec->nretired++] = sec->auth;
    sec->auth = keys;
    sl_http_set_auth(sec->http, keys);
    if (sec->kafka)
        sl_kafka_set_auth(sec->kafka, keys);
}

/* The log settings a reloaded cfg asks for: the file's, or the defaults
 * when it names none; a command-line flag wins over both. */
static void log_settings(const security *sec, const sl_config *cfg, sl_slog_format *format,
                         sl_slog_level *level)
{
    *format = sec->log_format;
    *level = sec->log_level;
    if (!sec->log_format_flag) {
        *format = SL_SLOG_LOGFMT;
        if (cfg->log_format) /* checked by the config loader */
            sl_slog_parse_format(cfg->log_format, format);
    }
    if (!sec->log_level_flag) {
        *level = SL_SLOG_INFO;
        if (cfg->log_level)
            sl_slog_parse_level(cfg->log_level, level);
    }
}

/* What a reload needs; reloads come from SIGHUP (the main thread) and
 * from the EventBridge API (HTTP threads), one at a time (lock). */
typedef struct reloader {
    pthread_mutex_t lock;
    sl_router *router;
    const char *path;
    security *sec;
    sl_aws *aws;
    sl_scheduler *sched; /* the config's schedules are set again on reload */
} reloader;

/* Loads the config file with the EventBridge API's declarations api (NULL:
 * the state's in force) and puts it in force. Returns 0, or an SL_E… code
 * with err (logged) when the running config stays. Takes rl->lock. */
static int reload_with(reloader *rl, const char *api, size_t api_len, sl_error *err)
{
    pthread_mutex_lock(&rl->lock);
    security *sec = rl->sec;
    const char *path = rl->path;
    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT, lua = SL_BUF_INIT;
    sl_auth *keys = NULL;
    int rc = 0;
    if (!api && rl->aws && sl_aws_lua(rl->aws, &lua))
        rc = sl_error_set(err, SL_ENOMEM, "out of memory");
    if (!api) {
        api = (const char *)lua.data;
        api_len = lua.len;
    }
    if (!rc && (rc = sl_config_load_api(path, api, api_len, rl->aws ? sl_aws_lua_name(rl->aws) : NULL,
                                        &cfg, &diag))) {
        sl_slog(SL_SLOG_ERROR, "server", "reload of %s refused; the running config stays:\n%.*s",
                path, (int)diag.len, diag.data ? (const char *)diag.data : "");
        sl_error_set(err, SL_EINVAL, "the config does not load: %.*s", (int)diag.len,
                     diag.data ? (const char *)diag.data : "");
    } else if (!rc && reload_keys(sec, cfg, &keys)) { /* logged */
        sl_config_free(cfg);
        rc = sl_error_set(err, SL_EINVAL, "the config's API keys are refused (see the log)");
    } else if (!rc) {
        sl_slog_format format;
        sl_slog_level level;
        log_settings(sec, cfg, &format, &level); /* before the router takes cfg */
        if ((rc = sl_router_reload(rl->router, cfg, err))) {
            sl_slog(SL_SLOG_ERROR, "server",
                    "reload of %s failed, the previous rules run again: %s", path, err->msg);
            sl_auth_free(keys);
        } else {
            /* The schedules follow the rules that now run (the router keeps
             * cfg until the next reload, which waits for rl->lock). They
             * were checked by the load: only memory or a zone gone since
             * can refuse them, and then the previous schedules go on. */
            sl_error serr = {0};
            if (rl->sched &&
                sl_scheduler_set(rl->sched, "config", cfg->schedules, cfg->nschedules, &serr))
                sl_slog(SL_SLOG_ERROR, "server",
                        "reload of %s: the schedules stay as they were: %s", path, serr.msg);
            size_t n = sl_auth_count(keys);
            swap_keys(sec, keys);
            sec->log_format = format;
            sec->log_level = level;
            sl_slog_configure(format, level);
            sl_slog(SL_SLOG_INFO, "server", "reloaded %s (%zu API key%s)", path, n,
                    n == 1 ? "" : "s");
        }
    }
    sl_buf_free(&diag);
    sl_buf_free(&lua);
    pthread_mutex_unlock(&rl->lock);
    return rc;
}

static void reload(reloader *rl)
{
    if (!rl->router) {
        sl_slog(SL_SLOG_WARN, "server",
                "SIGHUP: no config file to reload (the embedded default is running)");
        return;
    }
    sl_error err = {0};
    reload_with(rl, NULL, 0, &err); /* logged */
}

/* The EventBridge API's apply hook (http/aws.h). */
static int aws_apply(void *ctx, const char *lua, size_t len, sl_error *err)
{
    return reload_with(ctx, lua ? lua : "", len, err);
}

/* GET /v1/schedules: each schedule with its next three fire times. */
static int schedules_json(void *ctx, sl_buf *out)
{
    return sl_scheduler_list_json(ctx, 3, out);
}

static bool aws_file_rule(void *ctx, const char *name)
{
    reloader *rl = ctx;
    return sl_router_file_rule(rl->router, name);
}

static bool aws_file_set(void *ctx, const char *name)
{
    reloader *rl = ctx;
    return sl_router_file_set(rl->router, name);
}

/* The config file again with the EventBridge API's rules, when it has any;
 * if they do not load (a file changed since), the file alone runs and the
 * log says why. */
static void with_api_rules(sl_aws *aws, sl_config **cfg)
{
    sl_buf lua = SL_BUF_INIT, diag = SL_BUF_INIT;
    sl_config *both = NULL;
    if (sl_aws_lua(aws, &lua) == 0 && lua.len) {
        if (sl_config_load_api((*cfg)->path, (const char *)lua.data, lua.len,
                               sl_aws_lua_name(aws), &both, &diag) == 0) {
            sl_config_free(*cfg);
            *cfg = both;
        } else {
            sl_slog(SL_SLOG_ERROR, "server",
                    "the EventBridge API's rules (%s) do not load with %s; running without "
                    "them:\n%.*s",
                    sl_aws_lua_name(aws), (*cfg)->path, (int)diag.len,
                    diag.data ? (const char *)diag.data : "");
        }
    }
    sl_buf_free(&lua);
    sl_buf_free(&diag);
}

/* server.aws into the API's options; the start-up line says what it
 * accepts. */
static int aws_open(const sl_config *cfg, const char *data, const char *host, sl_aws **out,
                    sl_error *err)
{
    const sl_config_aws *ca = cfg ? &cfg->aws : NULL;
    size_t n = ca ? ca->ncreds : 0, admins = 0;
    sl_aws_cred *creds = n ? calloc(n, sizeof *creds) : NULL;
    if (n && !creds)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const sl_config_aws_cred *c = &ca->creds[i];
        creds[i] = (sl_aws_cred){.akid = c->akid,
                                 .secret = c->secret,
                                 .publish = c->publish,
                                 .npublish = c->npublish,
                                 .read = c->read,
                                 .nread = c->nread,
                                 .admin = c->admin || !c->names_right};
        if (!c->names_right)
            sl_slog(SL_SLOG_WARN, "server",
                    "server.aws credential %s names no rights (publish, read, admin): it is an "
                    "admin credential, allowed every EventBridge operation",
                    c->akid);
        admins += creds[i].admin;
    }
    sl_aws_options o = {.region = ca ? ca->region : NULL,
                        .account = ca ? ca->account : NULL,
                        .creds = creds,
                        .ncreds = n,
                        .data_dir = data};
    int rc = sl_aws_open(&o, out, err);
    free(creds);
    if (rc)
        return rc;
    if (n)
        sl_slog_lifecycle("server",
                          "EventBridge API on POST / and /eventbridge/: SigV4 with %zu "
                          "credential%s (%zu admin), region %s",
                          n, n == 1 ? "" : "s", admins, o.region ? o.region : "us-east-1");
    else if (sl_net_host_loopback(host))
        sl_slog_lifecycle("server",
                          "EventBridge API on POST / and /eventbridge/: no server.aws credentials, "
                          "so loopback clients are served unsigned or signed with any key");
    else
        sl_slog_lifecycle("server",
                          "EventBridge API on POST / and /eventbridge/: refused to every client "
                          "(beyond loopback it needs server.aws credentials)");
    return 0;
}

/* Every partition, connection and segment is a descriptor: take all the
 * kernel allows this process (the soft limit is often 1024 of a far higher
 * hard one), and say so, since it sizes server.max_open_partitions. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        sl_slog(SL_SLOG_WARN, "server", "cannot read the open-file limit: %s", strerror(errno));
        return;
    }
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur == rl.rlim_max) {
        sl_slog(SL_SLOG_INFO, "server", "open-file limit %llu (already the hard limit)",
                (unsigned long long)was);
        return;
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        sl_slog(SL_SLOG_WARN, "server", "cannot raise the open-file limit from %llu to %llu: %s",
                (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
    else
        sl_slog(SL_SLOG_INFO, "server", "open-file limit raised from %llu to %llu",
                (unsigned long long)was, (unsigned long long)rl.rlim_max);
}

int sl_serve_main(int argc, char **argv)
{
    const char *data = "./sluice-data";
    char host[256] = "127.0.0.1";
    uint16_t port = 8080;
    /* The Kafka listener: off unless server.kafka_listen or --kafka-listen. */
    char khost[256] = "", kadv_host[256] = "";
    uint16_t kport = 0, kadv_port = 0;
    /* At most 1,000 sets created on first use, a quarter of them by one
     * client (docs/security.md), unless the config says otherwise. */
    sl_sets_options so = {.auto_create = true, .max_auto_sets = 1000, .notify = log_notice};
    sl_set_config_default(&so.defaults);
    sl_http_options ho = {.host = host, .port = port};
    sl_config *cfg = NULL;
    /* Security settings (docs/security.md): copied out of the config,
     * which goes to the rule runner (and is replaced on reload). */
    bool insecure = false, insecure_flag = false;
    char tls_cert[4096] = "", tls_key[4096] = "";
    sl_auth *auth = NULL;
    int64_t partition_idle_ms = 5 * 60 * 1000; /* server.partition_idle */
    sl_slog_format log_format = SL_SLOG_LOGFMT;
    sl_slog_level log_level = SL_SLOG_INFO;
    bool log_format_flag = false, log_level_flag = false;
    int lrc = load_config(argc, argv, &cfg);
    if (lrc)
        return lrc;
    if (cfg) { /* the file first, then the flags over it */
        if (cfg->data_dir)
            data = cfg->data_dir;
        if (cfg->listen && parse_listen(cfg->listen, host, sizeof host, &port)) {
            fprintf(stderr, "sluice serve: %s: server.listen %s: want HOST:PORT\n", cfg->path,
                    cfg->listen);
            sl_config_free(cfg);
            return 1;
        }
        if ((cfg->kafka_listen && parse_listen(cfg->kafka_listen, khost, sizeof khost, &kport)) ||
            (cfg->kafka_advertised &&
             parse_listen(cfg->kafka_advertised, kadv_host, sizeof kadv_host, &kadv_port))) {
            fprintf(stderr, "sluice serve: %s: server.kafka_listen/kafka_advertised: want HOST:PORT\n",
                    cfg->path);
            sl_config_free(cfg);
            return 1;
        }
        if (cfg->auto_create >= 0)
            so.auto_create = cfg->auto_create;
        if (cfg->max_auto_sets)
            so.max_auto_sets = (size_t)cfg->max_auto_sets;
        so.max_auto_sets_per_client = (size_t)cfg->max_auto_sets_per_client;
        if (cfg->max_request_bytes)
            ho.max_request_bytes = cfg->max_request_bytes;
        so.defaults = cfg->set_defaults;
        insecure = cfg->insecure;
        if (cfg->tls_cert)
            snprintf(tls_cert, sizeof tls_cert, "%s", cfg->tls_cert);
        if (cfg->tls_key)
            snprintf(tls_key, sizeof tls_key, "%s", cfg->tls_key);
        ho.max_batch = (uint64_t)cfg->max_batch;
        ho.rate = (double)cfg->rate;
        ho.burst = (double)cfg->burst;
        ho.max_connections = (unsigned)cfg->max_connections;
        ho.max_connections_per_ip = (unsigned)cfg->max_connections_per_ip;
        ho.max_body_memory = cfg->max_body_memory;
        so.max_open_partitions = (size_t)cfg->max_open_partitions;
        if (cfg->partition_idle_ms)
            partition_idle_ms = cfg->partition_idle_ms;
        sl_error aerr = {0};
        if (cfg->napi_keys && sl_auth_new(cfg->api_keys, cfg->napi_keys, &auth, &aerr)) {
            fprintf(stderr, "sluice serve: %s: %s\n", cfg->path, aerr.msg);
            sl_config_free(cfg);
            return 1;
        }
        if (cfg->log_format) /* checked by the config loader */
            sl_slog_parse_format(cfg->log_format, &log_format);
        if (cfg->log_level)
            sl_slog_parse_level(cfg->log_level, &log_level);
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            i++;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(serve_usage, stdout);
            return 0;
        } else if (strcmp(a, "--no-auto-create") == 0) {
            so.auto_create = false;
        } else if (strcmp(a, "--generate-ids") == 0) {
            so.defaults.generate_ids = true;
        } else if (strcmp(a, "--insecure") == 0) {
            insecure = insecure_flag = true;
        } else if (v && (strcmp(a, "--tls-cert") == 0 || strcmp(a, "--tls-key") == 0)) {
            snprintf(a[6] == 'c' ? tls_cert : tls_key, sizeof tls_cert, "%s", v);
            i++;
        } else if (!v) {
            return usage("unknown option or missing value: %s", a);
        } else if (strcmp(a, "--data") == 0) {
            data = v;
            i++;
        } else if (strcmp(a, "--listen") == 0) {
            if (parse_listen(v, host, sizeof host, &port))
                return usage("--listen %s: want HOST:PORT", v);
            i++;
        } else if (strcmp(a, "--kafka-listen") == 0) {
            if (parse_listen(v, khost, sizeof khost, &kport))
                return usage("--kafka-listen %s: want HOST:PORT", v);
            i++;
        } else if (strcmp(a, "--partitions") == 0) {
            int n = atoi(v);
            if (n < 1 || n > 1024)
                return usage("--partitions %s: want 1..1024", v);
            so.defaults.partitions = n;
            i++;
        } else if (strcmp(a, "--ack") == 0) {
            if (strcmp(v, "buffer") && strcmp(v, "durable"))
                return usage("--ack %s: want buffer or durable", v);
            so.defaults.ack = strcmp(v, "buffer") == 0 ? SL_ACK_BUFFER : SL_ACK_DURABLE;
            i++;
        } else if (strcmp(a, "--buffer-bytes") == 0) {
            if (sl_parse_bytes(v, &so.defaults.buffer_bytes) || so.defaults.buffer_bytes < 1024)
                return usage("--buffer-bytes %s: want a size of at least 1KiB", v);
            i++;
        } else if (strcmp(a, "--max-event") == 0) {
            uint64_t b;
            if (sl_parse_bytes(v, &b) || b < 256 || b > (16u << 20))
                return usage("--max-event %s: want 256B..16MiB", v);
            so.defaults.max_event_bytes = (uint32_t)b;
            i++;
        } else if (strcmp(a, "--linger-ms") == 0) {
            int64_t ms;
            if (sl_parse_duration_ms(v, &ms) || ms > 60000)
                return usage("--linger-ms %s: want 0..60000", v);
            so.defaults.linger_ms = (uint32_t)ms;
            i++;
        } else if (strcmp(a, "--max-request") == 0) {
            if (sl_parse_bytes(v, &ho.max_request_bytes) || ho.max_request_bytes < 1024)
                return usage("--max-request %s: want a size of at least 1KiB", v);
            i++;
        } else if (strcmp(a, "--idle-timeout") == 0 || strcmp(a, "--request-timeout") == 0) {
            int s = atoi(v);
            if (s < 1 || s > 3600)
                return usage("%s %s: want 1..3600 seconds", a, v);
            *(a[2] == 'i' ? &ho.idle_timeout_s : &ho.request_timeout_s) = (unsigned)s;
            i++;
        } else if (strcmp(a, "--log-format") == 0) {
            if (sl_slog_parse_format(v, &log_format))
                return usage("--log-format %s: want logfmt or json", v);
            log_format_flag = true;
            i++;
        } else if (strcmp(a, "--log-level") == 0) {
            if (sl_slog_parse_level(v, &log_level))
                return usage("--log-level %s: want debug, info, warn or error", v);
            log_level_flag = true;
            i++;
        } else if (strcmp(a, "--compression") == 0) {
            if (sl_codec_parse(v, &so.defaults.compression))
                return usage("--compression %s: want none or zstd", v);
            i++;
        } else {
            return usage("unknown option %s", a);
        }
    }
    sl_slog_configure(log_format, log_level); /* before anything logs (recovery, …) */
    raise_fd_limit();                         /* before the registry sizes its pool from it */
    /* Without keys, whoever reaches the port can publish, read and drop
     * lanes: only loopback may be that open, unless the operator says so. */
    bool loopback = sl_net_host_loopback(host);
    if (!loopback && !sl_auth_count(auth) && !insecure) {
        fprintf(stderr,
                "sluice serve: refusing to listen on %s:%u without API keys: anyone who can "
                "reach it could publish, read and administer every set. Declare "
                "server.api_keys (`sluice key new`, docs/security.md), listen on 127.0.0.1, or "
                "accept an open API with server.insecure = true or --insecure\n",
                host, port);
        sl_auth_free(auth);
        sl_config_free(cfg);
        return 1;
    }
    bool kloopback = !khost[0] || sl_net_host_loopback(khost);
    if (!kloopback && !sl_auth_count(auth) && !insecure) {
        fprintf(stderr,
                "sluice serve: refusing to speak the Kafka protocol on %s:%u without API keys: "
                "anyone who can reach it could produce to, read and delete every set. Declare "
                "server.api_keys (Kafka clients then authenticate with SASL/PLAIN), listen on "
                "127.0.0.1, or accept that with server.insecure = true or --insecure\n",
                khost, kport);
        sl_auth_free(auth);
        sl_config_free(cfg);
        return 1;
    }
    loopback = loopback && kloopback; /* reloads keep keys for both listeners */
    if (!loopback && !sl_auth_count(auth))
        sl_slog(SL_SLOG_WARN, "server",
                "insecure: no API keys on %s, beyond loopback; every client that reaches the "
                "port may use the whole API",
                host);
    if (!loopback && sl_auth_count(auth) && !tls_cert[0])
        sl_slog(SL_SLOG_WARN, "server",
                "API keys travel in cleartext: %s is beyond loopback and served over plain "
                "HTTP, so anyone on the path can read a token and use it; serve HTTPS "
                "(server.tls_cert and tls_key) or put a TLS proxy in front (docs/security.md)",
                host);
    ho.auth = auth;
    ho.tls_cert = tls_cert[0] ? tls_cert : NULL;
    ho.tls_key = tls_key[0] ? tls_key : NULL;
    char data_dir[4096]; /* the config (which may hold it) goes to the router */
    snprintf(data_dir, sizeof data_dir, "%s", data);
    data = so.data_dir = data_dir;
    if (!so.max_auto_sets_per_client) /* unset: a quarter of the cap, at least one */
        so.max_auto_sets_per_client = so.max_auto_sets / 4 ? so.max_auto_sets / 4 : 1;
    char cfg_path[4096] = "";
    if (cfg)
        snprintf(cfg_path, sizeof cfg_path, "%s", cfg->path);

    /* Signals are taken synchronously by this thread; every thread started
     * below inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    sl_error err = {0};
    sl_databus *bus = NULL;
    sl_sets *sets = NULL;
    sl_http *http = NULL;
    sl_waits *waits = NULL; /* long-polls of every front door */
    sl_kafka *kafka_l = NULL; /* the Kafka listener, when on */
    sl_router *router = NULL;
    sl_databus_options bo = {0};
    kafka_copy kafka = {0};
    int rc = 0;
    if (cfg && cfg->kafka.present) {
        if ((rc = kafka_copy_make(&cfg->kafka, &kafka)))
            sl_error_set(&err, rc, "out of memory");
        so.kafka = &kafka.cl;
        so.on_remote_data = on_remote_data;
    }
    if (!rc)
        rc = sl_databus_start(&bo, &bus, &err);
    if (!rc) {
        so.on_open = sl_databus_attach;
        so.on_close = sl_databus_detach;
        so.ctx = bus;
        rc = sl_sets_open(&so, &sets, &err);
    }
    /* Retention runs at start-up too, before the port opens, not only a
     * minute later: a server restarted after a long stop deletes what
     * expired meanwhile at once. Before the router starts the rules (with
     * each set's stored config), so that a rule starting at "beginning"
     * does not deliver expired events; once more after it, so that a
     * retention the config changed applies at once too. */
    if (!rc)
        sl_sets_retain(sets, sl_clock_now_ms());
    /* The EventBridge API (http/aws.h): its rules join the file's before
     * the router starts them. A reload (SIGHUP, or an API call) waits for
     * rl.lock, held until everything it uses is in place. */
    security sec = {0};
    reloader rl = {.path = cfg_path, .sec = &sec};
    pthread_mutex_init(&rl.lock, NULL);
    pthread_mutex_lock(&rl.lock);
    sl_aws *aws = NULL;
    if (!rc)
        rc = aws_open(cfg, data, host, &aws, &err);
    rl.aws = aws;
    if (!rc && cfg)
        with_api_rules(aws, &cfg);
    /* Schedules (server/schedule.h), set while cfg is still ours; the
     * thread starts once the port is open, and stops before the bus. */
    sl_schedule_fire_env fire_env = {.sets = sets, .bus = bus};
    sl_scheduler *sched = NULL;
    if (!rc)
        rc = sl_scheduler_init(&(sl_scheduler_options){.data_dir = data,
                                                       .fire = sl_schedule_fire_databus,
                                                       .ctx = &fire_env},
                               &sched, &err);
    if (!rc && cfg)
        rc = sl_scheduler_set(sched, "config", cfg->schedules, cfg->nschedules, &err);
    rl.sched = sched;
    if (!rc && cfg) { /* sets are declared before any traffic */
        rc = sl_router_start(cfg, sets, bus, data, so.kafka, &router, &err);
        cfg = NULL;
    }
    rl.router = router;
    if (aws && router)
        sl_aws_set_hooks(aws, aws_apply, aws_file_rule, aws_file_set, &rl);
    ho.aws = aws;
    if (!rc)
        sl_sets_retain(sets, sl_clock_now_ms());
    /* The hooks are in place before the port opens: no request may slip
     * past the schemas. Appends that happen before the runner hears of
     * them are found by its periodic lag check. */
    sl_http_hooks hooks;
    sl_redrive_env redrive_env = {.sets = sets, .bus = bus, .data_dir = data};
    if (router) {
        sl_router_http_hooks(router, &hooks);
        ho.hooks = &hooks;
    } else { /* without a config, dead-letter redrive still works */
        hooks = (sl_http_hooks){.ctx = &redrive_env, .redrive = sl_redrive_hook};
        ho.hooks = &hooks;
    }
    ho.host = host;
    ho.port = port;
    if (!rc)
        rc = sl_waits_start(&waits, &err);
    ho.waits = waits;
    sl_kafka_hooks khooks = {.ctx = hooks.ctx,
                             .validate = hooks.validate,
                             .may_delete = router ? sl_router_may_delete : NULL,
                             .has_schema = router ? sl_router_has_schema : NULL};
    if (!rc && khost[0]) {
        sl_kafka_options ko = {.host = khost,
                               .port = kport,
                               .advertised_host = kadv_host,
                               .advertised_port = kadv_port,
                               .data_dir = data,
                               .tls_cert = ho.tls_cert,
                               .tls_key = ho.tls_key,
                               .auth = auth,
                               .waits = waits,
                               .hooks = &khooks};
        rc = sl_kafka_start(&ko, sets, bus, &kafka_l, &err);
        if (!rc) {
            hooks.kafka_ctx = kafka_l;
            hooks.groups_json = kafka_groups;
            hooks.kafka_metrics = kafka_metrics;
        }
    }
    hooks.schedules_ctx = sched;
    hooks.schedules_json = sched ? schedules_json : NULL;
    if (!rc)
        rc = sl_http_start(&ho, sets, bus, &http, &err);
    if (rc) {
        sl_slog(SL_SLOG_ERROR, "server", "cannot start: %s",
                err.msg[0] ? err.msg : sl_strerror(rc));
        sl_http_free(http);
        sl_kafka_free(kafka_l);
        sl_waits_free(waits);
        sl_scheduler_free(sched);
        sl_router_free(router);
        sl_databus_free(bus);
        sl_sets_close(sets);
        sl_config_free(cfg);
        sl_auth_free(auth);
        kafka_copy_free(&kafka);
        sl_aws_free(aws);
        pthread_mutex_unlock(&rl.lock);
        pthread_mutex_destroy(&rl.lock);
        return 1;
    }
    atomic_store(&remote_router, router);
    /* Appends wake long-polls and rules; the bus was started before both. */
    appenders app = {waits, router};
    /* insecure from the flag only: a reload re-reads the file's. */
    sec = (security){.http = http,
                     .kafka = kafka_l,
                     .auth = auth,
                     .loopback = loopback,
                     .insecure = insecure_flag,
                     .log_format_flag = log_format_flag,
                     .log_level_flag = log_level_flag,
                     .log_format = log_format,
                     .log_level = log_level};
    pthread_mutex_unlock(&rl.lock);
    sl_databus_set_on_append(bus, on_append, &app);
    fire_env.validate = hooks.validate; /* schedules' events pass ingest's checks */
    fire_env.validate_ctx = hooks.ctx;
    if (sl_scheduler_start(sched, &err))
        sl_slog(SL_SLOG_ERROR, "server", "schedules do not run: %s", err.msg);
    char keys[64];
    if (sl_auth_count(auth))
        snprintf(keys, sizeof keys, "%zu API key%s required", sl_auth_count(auth),
                 sl_auth_count(auth) == 1 ? "" : "s");
    else
        snprintf(keys, sizeof keys, "no API keys");
    /* Lifecycle lines are written at any --log-level: scripts wait for them. */
    sl_slog_lifecycle("server", "listening on %s://%s:%u%s, %s, data in %s (%zu sets)",
                      ho.tls_cert ? "https" : "http", host, sl_http_port(http),
                      loopback ? " (loopback only)" : "", keys, data, sl_sets_count(sets));
    if (kafka_l)
        sl_slog_lifecycle("server", "Kafka protocol on %s:%u%s%s", khost, sl_kafka_port(kafka_l),
                          ho.tls_cert ? " over TLS" : "",
                          sl_auth_count(auth) ? ", SASL/PLAIN with the API keys" : "");
    sl_sets_fd_info fdi;
    sl_sets_fd_stats(sets, &fdi);
    sl_slog(SL_SLOG_INFO, "server",
            "%" PRIu64 " partitions open (at most %" PRIu64 "), %" PRIu64 " parked, %" PRIu64
            " descriptors open of %" PRIu64,
            fdi.partitions_open, fdi.max_open_partitions, fdi.partitions_parked, fdi.open_fds,
            fdi.fd_limit);

    /* Periodic work: idle partitions park every few seconds (at most a
     * tenth of partition_idle late), retention runs every minute. */
    int64_t tick_ms = partition_idle_ms / 10 < 10000 ? partition_idle_ms / 10 : 10000;
    int64_t next_retain = sl_clock_mono_ms() + 60000;
    for (;;) {
        struct timespec tick = {tick_ms / 1000, (tick_ms % 1000) * 1000000};
        int sig = sigtimedwait(&sigs, NULL, &tick);
        if (sig == SIGTERM || sig == SIGINT)
            break;
        if (sig == SIGHUP)
            reload(&rl);
        if (sig < 0 && errno == EAGAIN) {
            int64_t now = sl_clock_mono_ms();
            if (now >= next_retain) {
                sl_sets_retain(sets, sl_clock_now_ms());
                next_retain = now + 60000;
            }
            sl_sets_park_idle(sets, partition_idle_ms);
        }
    }
    sl_slog_lifecycle("server", "stopping: draining buffers");
    sl_http_quiesce(http);
    /* Kafka clients first: parked joins answered, connections closed; a
     * durable Produce still parked is answered by the running Databus. */
    sl_kafka_stop(kafka_l);
    sl_waits_stop(waits); /* answers every long-poll */
    /* The schedules' fire in progress completes while the bus runs. */
    atomic_store(&fire_env.stopping, true);
    sl_scheduler_stop(sched);
    /* Rules finish their batches while the bus still takes target.set
     * writes; then the bus drains. */
    sl_router_stop(router);
    atomic_store(&remote_router, NULL);
    sl_databus_stop(bus);
    sl_http_stop(http);
    /* Only now nothing can call into the router: the Databus writer (its
     * append callback) and the HTTP threads (the hooks) have stopped; nor,
     * once the bus is gone, into the HTTP server (the append callback). */
    sl_router_free(router);
    sl_scheduler_free(sched);
    sl_databus_free(bus);
    sl_http_free(http);
    sl_aws_free(aws); /* after the HTTP threads, its users */
    pthread_mutex_destroy(&rl.lock);
    sl_kafka_free(kafka_l);
    sl_waits_free(waits); /* after everything that could wake or add a waiter */
    sl_sets_close(sets);
    kafka_copy_free(&kafka); /* after the sets that used it */
    /* After the HTTP threads: they borrowed the tables. */
    sl_auth_free(sec.auth);
    for (size_t i = 0; i < sec.nretired; i++)
        sl_auth_free(sec.retired[i]);
    free(sec.retired);
    sl_slog_lifecycle("server", "stopped cleanly");
    return 0;
}
