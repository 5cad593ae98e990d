/*
 * cli/cli_replay.c — `sluice replay RULE --from TIME [--to TIME]`: asks the
 * running server to deliver a window of a rule's events again (POST
 * /v1/rules/RULE/replay, rules/runner.h) and follows its progress: one line
 * redrawn in place on a terminal, a summary line otherwise.
 */
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/parse.h"
#include "core/bus/set.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 500

static const char replay_usage[] =
    "usage: sluice replay RULE --from TIME [--to TIME] [--no-wait] [--server URL]\n"
    "  Delivers the events of RULE's set stored between --from and --to again to\n"
    "  the rule's targets (pattern, filter and transform apply as for live events),\n"
    "  marked with the attribute sluicereplay; the rule's own cursor does not move.\n"
    "  TIME is RFC 3339 (2026-11-29T10:00:00Z), milliseconds since the epoch, or a\n"
    "  duration ago (90s, 15m, 2h, 1d); --to defaults to now.\n"
    "  --no-wait       print the replay's id and return at once\n"
    "  --server URL    default $SLUICE_SERVER, else " SL_HTTPC_DEFAULT_SERVER "\n";

static const sl_cli_usage k_usage = {"replay", replay_usage, false};

/* RFC 3339, epoch ms, or a duration before now. */
static int parse_when(const char *s, int64_t *ms)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end != s && !*end && v >= 0) {
        *ms = v;
        return 0;
    }
    if (sl_time_parse_rfc3339(s, strlen(s), ms) == 0)
        return 0;
    int64_t ago;
    if (sl_parse_duration_ms(s, &ago) == 0 && ago >= 0) {
        *ms = sl_clock_now_ms() - ago;
        return 0;
    }
    return SL_EINVAL;
}

typedef struct progress {
    char id[32], state[16];
    int64_t total, done, delivered, dead, discarded, failed;
} progress;

/* Reads one replay object of the server's answer. */
static bool read_progress(const sl_json_tok *rp, progress *p)
{
    sl_json_tok v, parts, el;
    memset(p, 0, sizeof *p);
    if (!sl_json_get(rp, "id", &v))
        return false;
    sl_httpc_json_str(&v, p->id, sizeof p->id);
    if (sl_json_get(rp, "state", &v))
        sl_httpc_json_str(&v, p->state, sizeof p->state);
    const char *names[] = {"delivered", "dead_lettered", "discarded", "failed"};
    int64_t *dst[] = {&p->delivered, &p->dead, &p->discarded, &p->failed};
    for (size_t i = 0; i < 4; i++)
        if (sl_json_get(rp, names[i], &v))
            sl_json_i64(&v, dst[i]);
    if (sl_json_get(rp, "partitions", &parts) && parts.type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_iter_init(&it, &parts);
        while (sl_json_iter_elem(&it, &el)) {
            int64_t start = 0, end = 0, pos = 0;
            if (sl_json_get(&el, "start", &v))
                sl_json_i64(&v, &start);
            if (sl_json_get(&el, "end", &v))
                sl_json_i64(&v, &end);
            if (sl_json_get(&el, "position", &v))
                sl_json_i64(&v, &pos);
            p->total += end > start ? end - start : 0;
            p->done += pos > start ? (pos < end ? pos : end) - start : 0;
        }
    }
    return true;
}

static void show(const progress *p, const char *rule, bool tty, bool last)
{
    int pct = p->total ? (int)(p->done * 100 / p->total) : 100;
    if (!tty && !last)
        return;
    printf("%sreplay %s of rule %s: %" PRId64 "/%" PRId64 " events (%d%%), %" PRId64
           " delivered, %" PRId64 " dead-lettered, %" PRId64 " discarded%s%s",
           tty ? "\r" : "", p->id, rule, p->done, p->total, pct, p->delivered, p->dead,
           p->discarded, last ? (strcmp(p->state, "done") == 0 ? ", done" : "") : "",
           last ? "\n" : "");
    fflush(stdout);
}

/* Finds the replay called id in a GET …/replays answer. */
static bool find_replay(const sl_buf *body, const char *id, progress *p)
{
    sl_json_tok doc, list, el;
    if (sl_json_validate((const char *)body->data, body->len, 16, &doc, NULL) ||
        !sl_json_get(&doc, "replays", &list) || list.type != SL_JSON_ARRAY)
        return false;
    sl_json_iter it;
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el))
        if (read_progress(&el, p) && strcmp(p->id, id) == 0)
            return true;
    return false;
}

int sl_cli_replay_main(int argc, char **argv)
{
    const char *rule = NULL, *from = NULL, *to = NULL, *server_opt = NULL;
    bool missing = false, no_wait = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(replay_usage, stdout);
            return 0;
        } else if (strcmp(a, "--no-wait") == 0) {
            no_wait = true;
        } else if (sl_httpc_opt(argc, argv, &i, "--from", &from, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--to", &to, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--server", &server_opt, &missing)) {
            if (missing)
                return sl_cli_usage_error(&k_usage, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return sl_cli_usage_error(&k_usage, "unknown option \"%s\"", a);
        } else if (!rule) {
            rule = a;
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", a);
        }
    }
    if (!rule)
        return sl_cli_usage_error(&k_usage, "missing the rule name");
    if (!sl_set_name_valid(rule))
        return sl_cli_usage_error(&k_usage, "invalid rule name \"%s\" (want [A-Za-z0-9._-]{1,128})",
                                  rule);
    if (!from)
        return sl_cli_usage_error(&k_usage, "--from TIME is required");
    int64_t from_ms, to_ms = 0;
    if (parse_when(from, &from_ms))
        return sl_cli_usage_error(
            &k_usage, "--from \"%s\": want RFC 3339, epoch ms or a duration like 2h", from);
    if (to && parse_when(to, &to_ms))
        return sl_cli_usage_error(&k_usage,
                                  "--to \"%s\": want RFC 3339, epoch ms or a duration like 2h", to);
    char server[1024];
    sl_error err = {0};
    if (sl_httpc_server(server_opt, server, sizeof server, &err))
        return sl_cli_usage_error(&k_usage, "%s", err.msg);
    char url[1400], body[128], msg[600];
    snprintf(url, sizeof url, "%s/v1/rules/%s/replay", server, rule);
    snprintf(body, sizeof body, "{\"from\":%" PRId64 ",\"to\":%" PRId64 "}", from_ms, to_ms);
    sl_httpc h;
    if (sl_httpc_init(&h, &err)) {
        fprintf(stderr, "sluice replay: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    progress p;
    sl_json_tok doc;
    sl_httpc_fail f = sl_httpc_request(&h, server, "POST", url, "application/json", NULL,
                                             body, strlen(body), 30000, msg, sizeof msg);
    if (f != SL_HTTPC_OK) {
        fprintf(stderr, "sluice replay: %s\n", msg);
    } else if (h.status != 202) {
        sl_httpc_describe(h.status, &h.body, msg, sizeof msg);
        fprintf(stderr, "sluice replay: %s\n", msg);
    } else if (sl_json_validate((const char *)h.body.data, h.body.len, 16, &doc, NULL) ||
               !read_progress(&doc, &p)) {
        fprintf(stderr, "sluice replay: unexpected answer from the server\n");
    } else if (no_wait) {
        printf("replay %s of rule %s started: %" PRId64 " events\n", p.id, rule, p.total);
        rc = 0;
    } else {
        bool tty = isatty(STDOUT_FILENO);
        snprintf(url, sizeof url, "%s/v1/rules/%s/replays", server, rule);
        char id[32];
        snprintf(id, sizeof id, "%s", p.id);
        rc = 0;
        while (strcmp(p.state, "done") != 0) {
            show(&p, rule, tty, false);
            sl_httpc_sleep_ms(POLL_MS);
            f = sl_httpc_request(&h, server, "GET", url, NULL, NULL, NULL, 0, 30000, msg,
                                    sizeof msg);
            if (f != SL_HTTPC_OK || h.status != 200 || !find_replay(&h.body, id, &p)) {
                if (f == SL_HTTPC_OK)
                    snprintf(msg, sizeof msg,
                             "replay %s is gone (the server restarted or "
                             "reloaded its rules)",
                             id);
                fprintf(stderr, "%ssluice replay: %s\n", tty ? "\n" : "", msg);
                rc = 1;
                break;
            }
        }
        if (!rc)
            show(&p, rule, tty, true);
    }
    sl_httpc_close(&h);
    return rc;
}
