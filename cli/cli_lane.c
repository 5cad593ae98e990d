/*
 * cli/cli_lane.c — `sluice lane list|drop`: the lanes of a running server
 * (GET /v1/lanes, DELETE /v1/lanes/LANE; docs/lanes.md).
 */
#include "core/base/lane_name.h"
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "core/base/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define LANE_TIMEOUT_MS 60000L

static const char lane_usage[] =
    "usage: sluice lane list [--server URL]\n"
    "       sluice lane drop LANE [--server URL]\n"
    "  list   every lane the server knows: env, fallback, events in, delivered,\n"
    "         unrouted (events of the lane no rule had a route for)\n"
    "  drop   stops the lane's rule overrides and consumers, deletes their cursors\n"
    "         and refuses its events from then on (an auto lane comes back as a new\n"
    "         lane if events name it again); its stored events stay until retention\n"
    "  --server URL    default $SLUICE_SERVER, else " SL_HTTPC_DEFAULT_SERVER "\n";

static const sl_cli_usage k_usage = {"lane", lane_usage, false};

static void member_str(const sl_json_tok *obj, const char *key, char *out, size_t cap)
{
    sl_json_tok v;
    out[0] = '\0';
    if (sl_json_get(obj, key, &v) && v.type == SL_JSON_STRING)
        sl_httpc_json_str(&v, out, cap);
}

/* Prints GET /v1/lanes as a table. Returns 0, or 1 for an unexpected answer. */
static int print_lanes(const sl_buf *body)
{
    sl_json_tok doc, list, el, v;
    if (sl_json_validate((const char *)body->data, body->len, 16, &doc, NULL) ||
        !sl_json_get(&doc, "lanes", &list) || list.type != SL_JSON_ARRAY) {
        fprintf(stderr, "sluice lane: unexpected answer from the server\n");
        return 1;
    }
    bool autolanes = sl_json_get(&doc, "auto", &v) && v.type == SL_JSON_TRUE;
    printf("%-34s %-5s %-9s %-8s %12s %12s %12s\n", "LANE", "ENV", "FALLBACK", "STATE", "EVENTS IN",
           "DELIVERED", "UNROUTED");
    sl_json_iter it;
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el)) {
        char name[64], env[16], fallback[16];
        member_str(&el, "name", name, sizeof name);
        member_str(&el, "env", env, sizeof env);
        member_str(&el, "fallback", fallback, sizeof fallback);
        bool dropped = sl_json_get(&el, "dropped", &v) && v.type == SL_JSON_TRUE;
        bool isauto = sl_json_get(&el, "auto", &v) && v.type == SL_JSON_TRUE;
        printf("%-34s %-5s %-9s %-8s %12" PRId64 " %12" PRId64 " %12" PRId64 "\n",
               name[0] ? name : "(base)", env, fallback[0] ? fallback : "-",
               dropped  ? "dropped"
               : isauto ? "auto"
                        : "declared",
               sl_cli_member_i64(&el, "events_in"), sl_cli_member_i64(&el, "delivered"),
               sl_cli_member_i64(&el, "unrouted"));
    }
    printf("lanes.auto is %s\n", autolanes ? "on" : "off");
    return 0;
}

int sl_cli_lane_main(int argc, char **argv)
{
    const char *cmd = NULL, *lane = NULL, *server_opt = NULL;
    bool missing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(lane_usage, stdout);
            return 0;
        } else if (sl_httpc_opt(argc, argv, &i, "--server", &server_opt, &missing)) {
            if (missing)
                return sl_cli_usage_error(&k_usage, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return sl_cli_usage_error(&k_usage, "unknown option \"%s\"", a);
        } else if (!cmd) {
            cmd = a;
        } else if (!lane) {
            lane = a;
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", a);
        }
    }
    if (!cmd || (strcmp(cmd, "list") && strcmp(cmd, "drop")))
        return sl_cli_usage_error(&k_usage, "want list or drop");
    bool drop = strcmp(cmd, "drop") == 0;
    if (drop && !lane)
        return sl_cli_usage_error(&k_usage, "drop needs the lane's name");
    if (!drop && lane)
        return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", lane);
    if (drop && (!*lane || !sl_lane_valid(lane, strlen(lane))))
        return sl_cli_usage_error(&k_usage, "\"%s\" is not a lane name ([a-z0-9-]{1,32})", lane);
    char server[1024], url[1200], msg[600];
    sl_error err = {0};
    if (sl_httpc_server(server_opt, server, sizeof server, &err))
        return sl_cli_usage_error(&k_usage, "%s", err.msg);
    snprintf(url, sizeof url, drop ? "%s/v1/lanes/%s" : "%s/v1/lanes", server, lane);
    sl_httpc h;
    if (sl_httpc_init(&h, &err)) {
        fprintf(stderr, "sluice lane: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    sl_httpc_fail f = sl_httpc_request(&h, server, drop ? "DELETE" : "GET", url, NULL, NULL,
                                             NULL, 0, LANE_TIMEOUT_MS, msg, sizeof msg);
    if (f != SL_HTTPC_OK) {
        fprintf(stderr, "sluice lane: %s\n", msg);
    } else if (h.status != 200) {
        sl_httpc_describe(h.status, &h.body, msg, sizeof msg);
        fprintf(stderr, "sluice lane: %s\n", msg);
    } else if (drop) {
        printf("lane %s dropped: its overrides and consumers are stopped, its cursors deleted; "
               "its stored events stay until retention\n",
               lane);
        rc = 0;
    } else {
        rc = print_lanes(&h.body);
    }
    sl_httpc_close(&h);
    return rc;
}
