/*
 * cli/cli_redrive.c — `sluice redrive DLQSET --to SET [--max N]`: asks the
 * running server to move the events of a dead-letter set back into a live
 * set (POST /v1/sets/DLQSET/redrive, core/bus/redrive.h) and prints a one-line
 * summary. Running it again moves only the events dead-lettered since.
 */
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "core/base/json.h"
#include "core/base/buf.h"
#include "core/bus/set.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A redrive of a large dead-letter set takes a while; the server finishes it
 * even if this client stops waiting. */
#define REDRIVE_TIMEOUT_MS (60L * 60 * 1000)

static const char redrive_usage[] =
    "usage: sluice redrive DLQSET --to SET [--max N] [--server URL]\n"
    "  Moves the events of the dead-letter set DLQSET to set SET, without the\n"
    "  attributes the rule added when it gave up (sluiceerror, sluiceattempts,\n"
    "  sluicerule, sluicetarget, sluicefailedat, sluicereplay), keeping each\n"
    "  event's lane and partition key. Each event is moved once: a second run moves\n"
    "  only events dead-lettered since the first. One redrive of a set runs at a\n"
    "  time: another one meanwhile fails at once (409).\n"
    "  --to SET        the set to move the events to (required; must exist)\n"
    "  --max N         move at most N events (default: all)\n"
    "  --server URL    default $SLUICE_SERVER, else " SL_HTTPC_DEFAULT_SERVER "\n";

static const sl_cli_usage k_usage = {"redrive", redrive_usage, false};

/* Prints the summary line (and the skipped events on stderr) from the
 * server's answer. Returns 0, or 1 when the answer is not what we expect. */
static int print_summary(const sl_buf *body, const char *dlq, const char *to)
{
    sl_json_tok doc, v, list, el, t;
    int64_t moved = -1, skipped = 0;
    if (sl_json_validate((const char *)body->data, body->len, 16, &doc, NULL) ||
        !sl_json_get(&doc, "redriven", &v) || !sl_json_i64(&v, &moved)) {
        fprintf(stderr, "sluice redrive: unexpected answer from the server\n");
        return 1;
    }
    if (sl_json_get(&doc, "skipped", &v))
        sl_json_i64(&v, &skipped);
    if (sl_json_get(&doc, "skipped_events", &list) && list.type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_iter_init(&it, &list);
        while (sl_json_iter_elem(&it, &el)) {
            int64_t part = -1, off = -1;
            char reason[512] = "";
            if (sl_json_get(&el, "partition", &t))
                sl_json_i64(&t, &part);
            if (sl_json_get(&el, "offset", &t))
                sl_json_i64(&t, &off);
            if (sl_json_get(&el, "reason", &t))
                sl_httpc_json_str(&t, reason, sizeof reason);
            fprintf(stderr,
                    "sluice redrive: skipped partition %" PRId64 " offset %" PRId64 ": %s\n", part,
                    off, reason);
        }
    }
    printf("redriven %" PRId64 " event%s from %s to %s (%" PRId64 " skipped)\n", moved,
           moved == 1 ? "" : "s", dlq, to, skipped);
    return 0;
}

int sl_cli_redrive_main(int argc, char **argv)
{
    const char *dlq = NULL, *to = NULL, *max = NULL, *server_opt = NULL;
    bool missing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(redrive_usage, stdout);
            return 0;
        } else if (sl_httpc_opt(argc, argv, &i, "--to", &to, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--max", &max, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--server", &server_opt, &missing)) {
            if (missing)
                return sl_cli_usage_error(&k_usage, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return sl_cli_usage_error(&k_usage, "unknown option \"%s\"", a);
        } else if (!dlq) {
            dlq = a;
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", a);
        }
    }
    if (!dlq)
        return sl_cli_usage_error(&k_usage, "missing the dead-letter set name");
    if (!sl_set_name_valid(dlq))
        return sl_cli_usage_error(&k_usage, "invalid set name \"%s\" (want [A-Za-z0-9._-]{1,128})",
                                  dlq);
    if (!to)
        return sl_cli_usage_error(&k_usage, "--to SET is required");
    if (!sl_set_name_valid(to))
        return sl_cli_usage_error(&k_usage,
                                  "--to \"%s\": not a set name (want [A-Za-z0-9._-]{1,128})", to);
    uint64_t max_n = 0;
    if (max) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(max, &end, 10);
        if (errno || end == max || *end || max[0] == '-' || v == 0)
            return sl_cli_usage_error(&k_usage, "--max \"%s\": want a positive number of events",
                                      max);
        max_n = v;
    }
    char server[1024];
    sl_error err = {0};
    if (sl_httpc_server(server_opt, server, sizeof server, &err))
        return sl_cli_usage_error(&k_usage, "%s", err.msg);

    sl_buf body = SL_BUF_INIT;
    char url[1400];
    snprintf(url, sizeof url, "%s/v1/sets/%s/redrive", server, dlq);
    /* Names are [A-Za-z0-9._-]: nothing to escape in the JSON body. */
    if (sl_buf_printf(&body, "{\"to\":\"%s\",\"max\":%" PRIu64 "}", to, max_n)) {
        fprintf(stderr, "sluice redrive: out of memory\n");
        return 1;
    }
    sl_httpc h;
    if (sl_httpc_init(&h, &err)) {
        fprintf(stderr, "sluice redrive: %s\n", err.msg);
        sl_buf_free(&body);
        return 1;
    }
    char msg[600];
    int rc = 1;
    sl_httpc_fail f =
        sl_httpc_request(&h, server, "POST", url, "application/json", NULL, body.data, body.len,
                            REDRIVE_TIMEOUT_MS, msg, sizeof msg);
    if (f != SL_HTTPC_OK) {
        fprintf(stderr, "sluice redrive: %s\n", msg);
    } else if (h.status != 200) {
        sl_httpc_describe(h.status, &h.body, msg, sizeof msg);
        fprintf(stderr, "sluice redrive: %s\n", msg);
        /* Events moved before a failure stay moved: running it again moves
         * only the rest. */
        if (h.status == 409)
            fprintf(stderr, "sluice redrive: run it again once that redrive is done\n");
        else if (h.status == 503 || h.status == 500)
            fprintf(stderr, "sluice redrive: the events moved so far stay moved; run it again "
                            "to move the rest\n");
    } else {
        rc = print_summary(&h.body, dlq, to);
    }
    sl_httpc_close(&h);
    sl_buf_free(&body);
    return rc;
}
