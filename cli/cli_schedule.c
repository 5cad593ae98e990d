/*
 * cli/cli_schedule.c — `sluice schedule list`: the schedules of a config
 * file with their next fire times (UTC and local) and, from the data
 * folder's state file, the last tick fired and any pending one
 * (docs/schedules.md). Reads files only: no server needs to run.
 */
#include "cli/cli.h"
#include "core/base/clock.h"
#include "http/aws.h"
#include "server/config.h"
#include "server/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char schedule_usage[] =
    "usage: sluice schedule list -c CONFIG.lua [--data DIR] [--count N]\n"
    "  every schedule of the config: its expression, time zone and set, its next N\n"
    "  fire times (default 3) in UTC and local time, and the last tick fired (from\n"
    "  DIR/schedules/state.json)\n"
    "  -c, --config FILE  the config file\n"
    "  --data DIR         the data folder (default: the config's server.data_dir, else\n"
    "                     ./sluice-data)\n"
    "  --count N          next fire times to show, 0-"
    "100"
    "\n";

static const sl_cli_usage k_usage = {"schedule", schedule_usage, false};

static void print_time(const char *label, int64_t ms, const sl_tz *tz)
{
    char utc[SL_TIME_RFC3339_MAX], local[SL_TZ_LOCAL_MAX];
    sl_time_format_rfc3339(ms, utc);
    sl_tz_format_local(tz, ms, local);
    printf("  %-8s %s  %s\n", label, utc, local);
}

static const sl_schedule_state *find_state(const sl_schedule_state *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return &v[i];
    return NULL;
}

static int list(const char *path, const char *data, long count)
{
    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT;
    int rc = sl_config_load(path, &cfg, &diag);
    if (rc) {
        fprintf(stderr, "sluice schedule: %s refused:\n%.*s", path, (int)diag.len,
                diag.data ? (const char *)diag.data : "");
        if (!diag.len)
            fprintf(stderr, "%s: %s\n", path, sl_strerror(rc));
        sl_buf_free(&diag);
        return 1;
    }
    sl_buf_free(&diag);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", data ? data : cfg->data_dir ? cfg->data_dir : "./sluice-data");
    /* The EventBridge API's schedule rules (DATA/aws) run with the file's,
     * as the server runs them. */
    sl_aws *aws = NULL;
    sl_buf lua = SL_BUF_INIT;
    sl_error aerr = {0};
    if (sl_aws_open(&(sl_aws_options){.data_dir = dir}, &aws, &aerr) == 0 &&
        sl_aws_lua(aws, &lua) == 0 && lua.len) {
        sl_config *both = NULL;
        if (sl_config_load_api(path, (const char *)lua.data, lua.len, sl_aws_lua_name(aws), &both,
                               &diag) == 0) {
            sl_config_free(cfg);
            cfg = both;
        } else {
            fprintf(stderr, "sluice schedule: the EventBridge API's rules do not load (not shown):\n%.*s",
                    (int)diag.len, diag.data ? (const char *)diag.data : "");
        }
        sl_buf_free(&diag);
    } else if (aerr.msg[0]) {
        fprintf(stderr, "sluice schedule: %s (the EventBridge API's schedules are not shown)\n",
                aerr.msg);
    }
    sl_buf_free(&lua);
    sl_aws_free(aws);
    sl_schedule_state *st = NULL;
    size_t nst = 0;
    sl_error err = {0};
    if (sl_schedule_state_load(dir, &st, &nst, &err))
        fprintf(stderr, "sluice schedule: %s (last fired times are not shown)\n", err.msg);
    if (!cfg->nschedules)
        printf("%s declares no schedules\n", path);
    int64_t now = sl_clock_now_ms();
    int status = 0;
    for (size_t i = 0; i < cfg->nschedules; i++) {
        const sl_schedule_decl *d = &cfg->schedules[i];
        sl_sched *s = NULL;
        if (sl_schedule_compile(d, &s, NULL, &err)) { /* checked by the load: a zone gone since */
            fprintf(stderr, "sluice schedule: schedule \"%s\": %s\n", d->name, err.msg);
            status = 1;
            continue;
        }
        const sl_tz *tz = sl_sched_tz(s);
        printf("%s%s  %s  %s  -> set %s%s\n", i ? "\n" : "", d->name, sl_sched_expression(s),
               sl_tz_name(tz), d->set, d->enabled ? "" : "  (disabled)");
        const sl_schedule_state *ss = find_state(st, nst, d->name);
        if (ss && ss->last_ms >= 0)
            print_time("last", ss->last_ms, tz);
        else
            printf("  %-8s never\n", "last");
        if (ss && ss->pending_ms >= 0)
            print_time("pending", ss->pending_ms, tz);
        int64_t t = sl_sched_next(s, now);
        if (count && t == SL_SCHED_NEVER)
            printf("  %-8s never (no fire time left)\n", "next");
        for (long k = 0; k < count && t != SL_SCHED_NEVER; k++, t = sl_sched_next(s, t))
            print_time(k ? "" : "next", t, tz);
        sl_sched_free(s);
    }
    sl_schedule_state_free(st, nst);
    sl_config_free(cfg);
    return status;
}

int sl_cli_schedule_main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(schedule_usage, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "list") != 0)
        return sl_cli_usage_error(
            &k_usage, "%s", argc < 2 ? "a subcommand is required (list)" : "unknown subcommand");
    const char *path = NULL, *data = NULL;
    long count = 3;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return sl_cli_usage_error(&k_usage, "unknown option or missing value: %s", a);
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            path = v;
        } else if (strcmp(a, "--data") == 0) {
            data = v;
        } else if (strcmp(a, "--count") == 0) {
            char *end;
            count = strtol(v, &end, 10);
            if (*end || end == v || count < 0 || count > 100)
                return sl_cli_usage_error(&k_usage, "--count %s: want 0-100", v);
        } else {
            return sl_cli_usage_error(&k_usage, "unknown option %s", a);
        }
        i++;
    }
    if (!path)
        return sl_cli_usage_error(&k_usage, "-c CONFIG.lua is required");
    return list(path, data, count);
}
