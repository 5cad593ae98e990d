/*
 * cli/cli_databus.c — `sluice databus …`: parses the command line (and the
 * --config file) into sl_agent_opts and runs the agent (agent/agent.h).
 * Flags win over the config file at start; a SIGHUP re-reads the file and
 * its keys then win (docs/agent.md).
 */
#include "agent/agent.h"
#include "core/base/lane_name.h"
#include "cli/cli.h"
#include "core/base/parse.h"
#include "core/bus/set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char databus_usage[] =
    "usage: sluice databus --listen unix:PATH|HOST:PORT [--listen …] --upstream URL\n"
    "                      [--lane L] [--spool DIR] [--spool-max SIZE] [--linger-ms N]\n"
    "                      [--batch-bytes SIZE] [--spool-after-ms N] [--max-line SIZE]\n"
    "                      [--streams N] [--config FILE]\n"
    "                      [--config-set SET [--config-poll-ms N]]\n"
    "  A local agent: apps write NDJSON lines {\"set\":S,\"event\":{…}} to it and get one\n"
    "  answer line each; it batches per set and lane and forwards to the server, and\n"
    "  spools to disk while the server is down (docs/agent.md). Events of one set and\n"
    "  lane reach the server in the order the agent read them (see --streams).\n"
    "  --listen ADDR       unix:PATH (mode 0660) or HOST:PORT (host defaults to 127.0.0.1);\n"
    "                      repeatable, at most 8\n"
    "  --upstream URL      the sluice server, e.g. http://bus:8080\n"
    "  --lane L            lane stamped on every event (default $SLUICE_LANE, else base)\n"
    "  --spool DIR         disk queue (default $XDG_RUNTIME_DIR/sluice-databus or\n"
    "                      /tmp/sluice-databus-UID); must be owned by this user, 0700\n"
    "  --spool-max SIZE    spool bound (default 256MiB); full → SpoolFull answers\n"
    "  --linger-ms N       how long a batch waits for more events (default 5)\n"
    "  --batch-bytes SIZE  a batch is sent once this big (default 1MiB)\n"
    "  --spool-after-ms N  spool a set and lane once upstream has failed it this long\n"
    "                      (default 1000)\n"
    "  --max-line SIZE     longest input line (default 1MiB); longer → TooLarge\n"
    "  --streams N         ordered streams per set and lane, 1-64 (default 1: one\n"
    "                      order per set across all connections); with N > 1 each\n"
    "                      connection keeps one stream for life and only its own\n"
    "                      events stay ordered, N requests in flight per set\n"
    "  --config FILE       key = value file (upstream, lane, linger_ms, batch_bytes,\n"
    "                      spool_max, spool_after_ms, streams); SIGHUP re-reads it\n"
    "  --config-set SET    poll this set on the upstream server for settings: its newest\n"
    "                      event's data, an object of the same keys but upstream\n"
    "                      (ignored there), is applied\n"
    "  --config-poll-ms N  how often the config set is polled (default 10000)\n";

static const sl_cli_usage k_usage = {"databus", databus_usage, true};

int sl_cli_databus_main(int argc, char **argv)
{
    sl_agent_opts o;
    sl_agent_opts_init(&o);
    sl_error err = {0};
    /* The config file first, so that the flags override it. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            o.config_path = argv[i + 1];
            if (sl_agent_conf_load(o.config_path, &o, &err)) {
                fprintf(stderr, "sluice databus: %s\n", err.msg);
                return 2;
            }
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(databus_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc)
            return sl_cli_usage_error(&k_usage, "%s: unknown option or missing value", a);
        const char *v = argv[++i];
        uint64_t u;
        int64_t ms;
        if (strcmp(a, "--listen") == 0) {
            if (o.nlisten == SL_AGENT_MAX_LISTEN)
                return sl_cli_usage_error(&k_usage, "--listen %s: at most 8 listeners", v);
            o.listen[o.nlisten++] = v;
        } else if (strcmp(a, "--upstream") == 0) {
            if (sl_agent_upstream_set(v, o.upstream, &err))
                return sl_cli_usage_error(&k_usage, "%s", err.msg);
        } else if (strcmp(a, "--lane") == 0) {
            if (strlen(v) > SL_LANE_MAX || !sl_lane_valid(v, strlen(v)))
                return sl_cli_usage_error(&k_usage, "--lane %s: want \"\" or [a-z0-9-]{1,32}", v);
            snprintf(o.lane, sizeof o.lane, "%s", v);
        } else if (strcmp(a, "--spool") == 0) {
            if (strlen(v) == 0 || strlen(v) >= sizeof o.spool_dir - 64)
                return sl_cli_usage_error(&k_usage, "--spool %s: empty or too long", v);
            snprintf(o.spool_dir, sizeof o.spool_dir, "%s", v);
        } else if (strcmp(a, "--spool-max") == 0) {
            if (sl_parse_bytes(v, &u))
                return sl_cli_usage_error(&k_usage, "--spool-max %s: want a size such as 256MiB",
                                          v);
            o.spool_max = u;
        } else if (strcmp(a, "--linger-ms") == 0) {
            if (sl_parse_duration_ms(v, &ms) || ms < 0 || ms > 60000)
                return sl_cli_usage_error(&k_usage, "--linger-ms %s: want 0..60000", v);
            o.linger_ms = ms;
        } else if (strcmp(a, "--spool-after-ms") == 0) {
            if (sl_parse_duration_ms(v, &ms) || ms < 0)
                return sl_cli_usage_error(&k_usage, "--spool-after-ms %s: want a duration", v);
            o.spool_after_ms = ms;
        } else if (strcmp(a, "--batch-bytes") == 0) {
            if (sl_parse_bytes(v, &u) || u < 1 || u > (8u << 20))
                return sl_cli_usage_error(&k_usage, "--batch-bytes %s: want 1B..8MiB", v);
            o.batch_bytes = u;
        } else if (strcmp(a, "--max-line") == 0) {
            if (sl_parse_bytes(v, &u) || u < 256 || u > (16u << 20))
                return sl_cli_usage_error(&k_usage, "--max-line %s: want 256B..16MiB", v);
            o.max_line = u;
        } else if (strcmp(a, "--streams") == 0) {
            if (sl_agent_conf_set(&o, "streams", v, &err))
                return sl_cli_usage_error(&k_usage, "--%s", err.msg);
        } else if (strcmp(a, "--config-set") == 0) {
            if (!sl_set_name_valid(v))
                return sl_cli_usage_error(&k_usage, "--config-set %s: not a valid set name", v);
            snprintf(o.config_set, sizeof o.config_set, "%s", v);
        } else if (strcmp(a, "--config-poll-ms") == 0) {
            if (sl_parse_duration_ms(v, &ms) || ms < 10 || ms > 3600000)
                return sl_cli_usage_error(&k_usage, "--config-poll-ms %s: want 10..3600000", v);
            o.config_poll_ms = ms;
        } else if (strcmp(a, "--config") == 0) {
            /* read above */
        } else {
            return sl_cli_usage_error(&k_usage, "%s: unknown option", a);
        }
    }
    if (o.nlisten == 0)
        return sl_cli_usage_error(&k_usage, "no --listen given");
    if (!o.upstream[0])
        return sl_cli_usage_error(&k_usage, "no --upstream given");
    if (sl_agent_run(&o, &err)) {
        fprintf(stderr, "sluice databus: %s\n", err.msg);
        return 1;
    }
    return 0;
}
