/*
 * core/server.c — `sluice serve`: opens the event sets, starts the Databus
 * and the HTTP API, applies retention once a minute, and shuts down cleanly
 * on SIGTERM/SIGINT (stop accepting, drain every buffer to disk, sync, close
 * every log with its clean marker, exit 0).
 */
#include "connectors/source_http.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/databus.h"
#include "core/redrive.h"
#include "core/router.h"
#include "core/set.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char serve_usage[] =
    "usage: sluice serve [-c CONFIG.lua] [--data DIR] [--listen HOST:PORT] [--partitions N]\n"
    "                    [--ack buffer|durable] [--compression none|zstd] [--no-auto-create]\n"
    "                    [--buffer-bytes SIZE] [--linger-ms N] [--max-request SIZE]\n"
    "                    [--idle-timeout S] [--request-timeout S] [--max-event SIZE]\n"
    "                    [--generate-ids]\n"
    "  -c, --config FILE   the Lua config (docs/config.md); SIGHUP reloads it\n"
    "  --data DIR          where event sets live (default ./sluice-data)\n"
    "  --listen HOST:PORT  HTTP address (default 127.0.0.1:8080; loopback unless you say so)\n"
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
    fprintf(stderr, "sluice: recovery: %s\n", msg);
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
    sl_http *http;
    sl_router *router;
} appenders;

static void on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane)
{
    appenders *a = ctx;
    sl_http_on_append(a->http, set, partition, end);
    if (a->router)
        sl_router_on_append(a->router, set, partition, end, lane);
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

static void reload(sl_router *router, const char *path)
{
    if (!router) {
        fprintf(stderr, "sluice: SIGHUP: no config file to reload (the embedded default is "
                        "running)\n");
        return;
    }
    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT;
    sl_error err = {0};
    if (sl_config_load(path, &cfg, &diag))
        fprintf(stderr, "sluice: reload of %s refused; the running config stays:\n%.*s", path,
                (int)diag.len, diag.data ? (const char *)diag.data : "");
    else if (sl_router_reload(router, cfg, &err))
        fprintf(stderr, "sluice: reload of %s failed, the previous rules run again: %s\n", path,
                err.msg);
    else
        fprintf(stderr, "sluice: reloaded %s\n", path);
    sl_buf_free(&diag);
}

int sl_cli_serve_main(int argc, char **argv)
{
    const char *data = "./sluice-data";
    char host[256] = "127.0.0.1";
    uint16_t port = 8080;
    sl_sets_options so = {.auto_create = true, .notify = log_notice};
    sl_set_config_default(&so.defaults);
    sl_http_options ho = {.host = host, .port = port};
    sl_config *cfg = NULL;
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
        if (cfg->auto_create >= 0)
            so.auto_create = cfg->auto_create;
        if (cfg->max_request_bytes)
            ho.max_request_bytes = cfg->max_request_bytes;
        so.defaults = cfg->set_defaults;
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
        } else if (!v) {
            return usage("unknown option or missing value: %s", a);
        } else if (strcmp(a, "--data") == 0) {
            data = v;
            i++;
        } else if (strcmp(a, "--listen") == 0) {
            if (parse_listen(v, host, sizeof host, &port))
                return usage("--listen %s: want HOST:PORT", v);
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
        } else if (strcmp(a, "--compression") == 0) {
            if (sl_codec_parse(v, &so.defaults.compression))
                return usage("--compression %s: want none or zstd", v);
            i++;
        } else {
            return usage("unknown option %s", a);
        }
    }
    char data_dir[4096]; /* the config (which may hold it) goes to the router */
    snprintf(data_dir, sizeof data_dir, "%s", data);
    data = so.data_dir = data_dir;
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
    sl_router *router = NULL;
    sl_databus_options bo = {0};
    int rc = sl_databus_start(&bo, &bus, &err);
    if (!rc) {
        so.on_open = sl_databus_attach;
        so.on_close = sl_databus_detach;
        so.ctx = bus;
        rc = sl_sets_open(&so, &sets, &err);
    }
    if (!rc && cfg) { /* sets are declared before any traffic */
        rc = sl_router_start(cfg, sets, bus, data, &router, &err);
        cfg = NULL;
    }
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
        rc = sl_http_start(&ho, sets, bus, &http, &err);
    if (rc) {
        fprintf(stderr, "sluice serve: %s\n", err.msg[0] ? err.msg : sl_strerror(rc));
        sl_http_stop(http);
        sl_router_free(router);
        sl_databus_free(bus);
        sl_sets_close(sets);
        sl_config_free(cfg);
        return 1;
    }
    /* Appends wake long-polls and rules; the bus was started before both. */
    appenders app = {http, router};
    sl_databus_set_on_append(bus, on_append, &app);
    bool loopback = strncmp(host, "127.", 4) == 0;
    fprintf(stderr, "sluice: listening on http://%s:%u%s, data in %s (%zu sets)\n", host,
            sl_http_port(http), loopback ? " (loopback only)" : "", data, sl_sets_count(sets));

    for (;;) {
        struct timespec minute = {60, 0};
        int sig = sigtimedwait(&sigs, NULL, &minute);
        if (sig == SIGTERM || sig == SIGINT)
            break;
        if (sig == SIGHUP)
            reload(router, cfg_path);
        if (sig < 0 && errno == EAGAIN)
            sl_sets_retain(sets, sl_clock_now_ms());
    }
    fprintf(stderr, "sluice: stopping: draining buffers\n");
    sl_http_quiesce(http);
    /* Rules finish their batches while the bus still takes target.set
     * writes; then the bus drains. */
    sl_router_stop(router);
    sl_databus_stop(bus);
    sl_http_stop(http);
    /* Only now nothing can call into the router: the Databus writer (its
     * append callback) and the HTTP threads (the hooks) have stopped. */
    sl_router_free(router);
    sl_databus_free(bus);
    sl_sets_close(sets);
    fprintf(stderr, "sluice: stopped cleanly\n");
    return 0;
}
