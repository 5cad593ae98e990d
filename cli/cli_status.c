/*
 * cli/cli_status.c — `sluice status [--server URL] [--interval SECONDS]`: one
 * readable terminal report of a running server from its JSON API (sets with
 * their event rates, rules, lanes, sources). Everything is fetched before
 * anything is printed, so a failure prints one line on stderr and no partial
 * report.
 */
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "core/base/clock.h"
#include "core/base/json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATUS_TIMEOUT_MS 10000L
#define CELL 136     /* a set name (128 bytes) and its NUL fit in one cell */
#define ERR_WIDTH 60 /* the last error column is cut to this many characters */
#define MAX_COLS 9

static const char status_usage[] =
    "usage: sluice status [--server URL] [--interval SECONDS]\n"
    "  Prints a report of a running server: its sets (partitions, events, bytes,\n"
    "  events per second), rules (lag, delivered, failed, dead-lettered, retrying,\n"
    "  healthy targets, last error), lanes and sources.\n"
    "  --interval S    measure the rates over S seconds (default 1; 0: no rates)\n"
    "  --server URL    default $SLUICE_SERVER, else " SL_HTTPC_DEFAULT_SERVER "\n";

static const sl_cli_usage k_usage = {"status", status_usage, false};

/* ---- tables ------------------------------------------------------------------------ */

/* A table of text cells; column widths are computed from the data when it is
 * printed. */
typedef struct table {
    int ncol;
    const char *head[MAX_COLS];
    bool right[MAX_COLS]; /* right-aligned (numbers) */
    char (*cells)[CELL];  /* nrows * ncol cells, owned */
    size_t nrows, cap;
} table;

/* Adds an empty row. Returns its first cell, or NULL when out of memory. */
static char (*table_row(table *t))[CELL]
{
    /* an element of the array is a row of ncol cells */
    if (t->nrows == t->cap && sl_grow(&t->cells, &t->cap, (size_t)t->ncol * CELL, 16))
        return NULL;
    char(*row)[CELL] = t->cells + t->nrows++ * (size_t)t->ncol;
    for (int c = 0; c < t->ncol; c++)
        row[c][0] = '\0';
    return row;
}

static void table_print(const table *t)
{
    size_t w[MAX_COLS];
    for (int c = 0; c < t->ncol; c++) {
        w[c] = strlen(t->head[c]);
        for (size_t r = 0; r < t->nrows; r++) {
            size_t n = strlen(t->cells[r * (size_t)t->ncol + (size_t)c]);
            if (n > w[c])
                w[c] = n;
        }
    }
    for (size_t r = 0; r <= t->nrows; r++) {
        fputs("  ", stdout);
        for (int c = 0; c < t->ncol; c++) {
            const char *s = r == 0 ? t->head[c] : t->cells[(r - 1) * (size_t)t->ncol + (size_t)c];
            bool last = c == t->ncol - 1;
            if (t->right[c])
                printf("%*s", (int)w[c], s);
            else if (last)
                fputs(s, stdout); /* no trailing blanks */
            else
                printf("%-*s", (int)w[c], s);
            if (!last)
                fputs("  ", stdout);
        }
        fputc('\n', stdout);
    }
}

/* ---- reading answers --------------------------------------------------------------- */

static bool member_true(const sl_json_tok *obj, const char *key)
{
    sl_json_tok v;
    return sl_json_get(obj, key, &v) && v.type == SL_JSON_TRUE;
}

/* Copies string member key into out (cap bytes), cut to max characters with
 * "..." and with every byte that is not printable ASCII replaced by '?', so
 * that text from the server cannot upset the terminal or the columns. An
 * absent or non-string member gives dflt. */
static void member_text(const sl_json_tok *obj, const char *key, char *out, size_t cap, size_t max,
                        const char *dflt)
{
    sl_json_tok v;
    out[0] = '\0';
    if (sl_json_get(obj, key, &v) && v.type == SL_JSON_STRING)
        sl_httpc_json_str(&v, out, cap);
    if (!out[0]) {
        snprintf(out, cap, "%s", dflt);
        return;
    }
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            *p = '?';
    if (max >= 4 && strlen(out) > max)
        memcpy(out + max - 3, "...", 4);
}

static void cell_i64(char *cell, int64_t n)
{
    snprintf(cell, CELL, "%" PRId64, n);
}

/* One client session: the handle, the server and the message of a failure. */
typedef struct session {
    sl_httpc h;
    const char *server;
    char msg[700];
} session;

/* GETs server + path into s->h.body and validates it as JSON into *doc.
 * Returns 0, or -1 with s->msg set. */
static int get_json(session *s, const char *path, sl_json_tok *doc)
{
    char url[1400], m[600];
    snprintf(url, sizeof url, "%s%s", s->server, path);
    sl_httpc_fail f = sl_httpc_request(&s->h, s->server, "GET", url, NULL, NULL, NULL, 0,
                                             STATUS_TIMEOUT_MS, m, sizeof m);
    if (f != SL_HTTPC_OK) {
        snprintf(s->msg, sizeof s->msg, "%s", m);
        return -1;
    }
    if (s->h.status != 200) {
        sl_httpc_describe(s->h.status, &s->h.body, m, sizeof m);
        snprintf(s->msg, sizeof s->msg, "GET %s: %s", url, m);
        return -1;
    }
    if (sl_json_validate((const char *)s->h.body.data, s->h.body.len, 16, doc, NULL)) {
        snprintf(s->msg, sizeof s->msg, "GET %s: the answer is not JSON", url);
        return -1;
    }
    return 0;
}

/* GETs path and finds its list member key (an array) into *list. */
static int get_list(session *s, const char *path, const char *key, sl_json_tok *list)
{
    sl_json_tok doc;
    if (get_json(s, path, &doc))
        return -1;
    if (!sl_json_get(&doc, key, list) || list->type != SL_JSON_ARRAY) {
        snprintf(s->msg, sizeof s->msg, "GET %s%s: unexpected answer (no \"%s\" list)", s->server,
                 path, key);
        return -1;
    }
    return 0;
}

/* ---- sets -------------------------------------------------------------------------- */

typedef struct set_info {
    char name[CELL];
    int64_t partitions, bytes;
    int64_t events; /* the sum of the partitions' end offsets */
} set_info;

typedef struct set_list {
    set_info *v;
    size_t n;
} set_list;

/* Reads every set with its end offsets: GET /v1/sets, then GET /v1/sets/NAME
 * for each. Returns 0, or -1 with s->msg set (out is freed then). */
static int sample_sets(session *s, set_list *out)
{
    sl_json_tok list, el, doc, parts, p;
    out->v = NULL;
    out->n = 0;
    if (get_list(s, "/v1/sets", "sets", &list))
        return -1;
    size_t n = 0;
    sl_json_iter it;
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el))
        n++;
    out->v = calloc(n ? n : 1, sizeof *out->v);
    if (!out->v) {
        snprintf(s->msg, sizeof s->msg, "out of memory");
        return -1;
    }
    /* Names first: the per-set requests below reuse the response buffer. */
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el)) {
        set_info *si = &out->v[out->n];
        member_text(&el, "name", si->name, sizeof si->name, 0, "");
        si->partitions = sl_cli_member_i64(&el, "partitions");
        si->bytes = sl_cli_member_i64(&el, "bytes");
        if (si->name[0])
            out->n++;
    }
    for (size_t i = 0; i < out->n; i++) {
        set_info *si = &out->v[i];
        char path[200];
        snprintf(path, sizeof path, "/v1/sets/%s", si->name);
        if (get_json(s, path, &doc))
            goto fail;
        if (!sl_json_get(&doc, "partition_info", &parts) || parts.type != SL_JSON_ARRAY) {
            snprintf(s->msg, sizeof s->msg, "GET %s%s: unexpected answer (no partition_info)",
                     s->server, path);
            goto fail;
        }
        si->events = 0;
        si->bytes = sl_cli_member_i64(&doc, "bytes");
        sl_json_iter pit;
        sl_json_iter_init(&pit, &parts);
        while (sl_json_iter_elem(&pit, &p))
            si->events += sl_cli_member_i64(&p, "end_offset");
    }
    return 0;
fail:
    free(out->v);
    out->v = NULL;
    out->n = 0;
    return -1;
}

/* rate < 0: no rate column. */
static int add_sets(table *t, const set_list *now, const set_list *before, double secs)
{
    for (size_t i = 0; i < now->n; i++) {
        const set_info *si = &now->v[i];
        char(*row)[CELL] = table_row(t);
        if (!row)
            return -1;
        snprintf(row[0], CELL, "%s", si->name);
        cell_i64(row[1], si->partitions);
        cell_i64(row[2], si->events);
        cell_i64(row[3], si->bytes);
        if (t->ncol < 5)
            continue;
        snprintf(row[4], CELL, "-");
        for (size_t j = 0; before && j < before->n; j++)
            if (strcmp(before->v[j].name, si->name) == 0 && si->events >= before->v[j].events)
                snprintf(row[4], CELL, "%.1f", (double)(si->events - before->v[j].events) / secs);
    }
    return 0;
}

/* ---- rules, lanes, sources --------------------------------------------------------- */

static int add_rules(session *s, table *t)
{
    sl_json_tok list, el, health, h;
    if (get_list(s, "/v1/rules", "rules", &list))
        return -1;
    sl_json_iter it;
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el)) {
        char(*row)[CELL] = table_row(t);
        if (!row)
            goto oom;
        member_text(&el, "name", row[0], CELL, 0, "?");
        member_text(&el, "set", row[1], CELL, 0, "?");
        /* A rule the EventBridge API made says so (it is not in the file). */
        char managed[16];
        member_text(&el, "managed", managed, sizeof managed, 0, "");
        if (strcmp(managed, "api") == 0) {
            char name[CELL];
            memcpy(name, row[0], CELL);
            snprintf(row[0], CELL, "%.100s (API)", name);
        }
        /* A rule over a Kafka-backed set runs in the set's group: which
         * share of it this router has (docs/scale-out.md). */
        sl_json_tok parts, p;
        char group[64];
        member_text(&el, "group", group, sizeof group, 0, "");
        if (group[0] && sl_json_get(&el, "partitions", &parts) && parts.type == SL_JSON_ARRAY) {
            int owned = 0;
            sl_json_iter pit;
            sl_json_iter_init(&pit, &parts);
            while (sl_json_iter_elem(&pit, &p))
                owned++;
            char set[CELL];
            memcpy(set, row[1], CELL);
            snprintf(row[1], CELL, "%.48s [%.48s: %lld members, %d partitions here]", set, group,
                     (long long)sl_cli_member_i64(&el, "members"), owned);
        }
        cell_i64(row[2], sl_cli_member_i64(&el, "lag"));
        cell_i64(row[3], sl_cli_member_i64(&el, "delivered"));
        cell_i64(row[4], sl_cli_member_i64(&el, "failed"));
        cell_i64(row[5], sl_cli_member_i64(&el, "dead_lettered"));
        cell_i64(row[6], sl_cli_member_i64(&el, "retrying"));
        int total = 0, ok = 0;
        if (sl_json_get(&el, "health", &health) && health.type == SL_JSON_ARRAY) {
            sl_json_iter hit;
            sl_json_iter_init(&hit, &health);
            while (sl_json_iter_elem(&hit, &h)) {
                total++;
                ok += member_true(&h, "healthy");
            }
        }
        if (total)
            snprintf(row[7], CELL, "%d/%d", ok, total);
        else
            snprintf(row[7], CELL, "-");
        member_text(&el, "last_error", row[8], CELL, ERR_WIDTH, "-");
    }
    return 0;
oom:
    snprintf(s->msg, sizeof s->msg, "out of memory");
    return -1;
}

/* Adds every lane, the base one included; *others counts the lanes besides
 * base. */
static int add_lanes(session *s, table *t, size_t *others)
{
    sl_json_tok list, el;
    *others = 0;
    if (get_list(s, "/v1/lanes", "lanes", &list))
        return -1;
    sl_json_iter it;
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el)) {
        char(*row)[CELL] = table_row(t);
        if (!row) {
            snprintf(s->msg, sizeof s->msg, "out of memory");
            return -1;
        }
        member_text(&el, "name", row[0], CELL, 0, "(base)");
        if (strcmp(row[0], "(base)"))
            (*others)++;
        member_text(&el, "env", row[1], CELL, 0, "-");
        member_text(&el, "fallback", row[2], CELL, 0, "-");
        bool isauto = member_true(&el, "auto");
        snprintf(row[3], CELL, "%s",
                 member_true(&el, "dropped") ? "dropped"
                 : isauto                    ? "active (auto)"
                                             : "active");
        cell_i64(row[4], sl_cli_member_i64(&el, "events_in"));
        cell_i64(row[5], sl_cli_member_i64(&el, "delivered"));
        cell_i64(row[6], sl_cli_member_i64(&el, "unrouted"));
    }
    return 0;
}

static int add_sources(session *s, table *t)
{
    sl_json_tok list, el;
    if (get_list(s, "/v1/sources", "sources", &list))
        return -1;
    sl_json_iter it;
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el)) {
        char(*row)[CELL] = table_row(t);
        if (!row) {
            snprintf(s->msg, sizeof s->msg, "out of memory");
            return -1;
        }
        member_text(&el, "name", row[0], CELL, 0, "?");
        member_text(&el, "kind", row[1], CELL, 0, "?");
        member_text(&el, "set", row[2], CELL, 0, "-");
        cell_i64(row[3], sl_cli_member_i64(&el, "events"));
        cell_i64(row[4], sl_cli_member_i64(&el, "refused"));
        /* "joining 42s": how long matters (a dead predecessor's
         * session), not when. */
        char st[32];
        member_text(&el, "state", st, sizeof st, 0, "-");
        sl_json_tok secs_tok;
        int64_t secs = sl_cli_member_i64(&el, "state_seconds");
        if (strcmp(st, "-") && sl_json_get(&el, "state_seconds", &secs_tok))
            snprintf(row[5], CELL, "%s %" PRId64 "s", st, secs);
        else
            snprintf(row[5], CELL, "%s", st);
        if (member_true(&el, "healthy")) {
            snprintf(row[6], CELL, "yes");
        } else {
            char why[80];
            member_text(&el, "health", why, sizeof why, ERR_WIDTH, "");
            snprintf(row[6], CELL, why[0] ? "no: %s" : "no", why);
        }
    }
    return 0;
}

/* Consumer groups of Kafka clients (GET /v1/groups; docs/kafka-protocol.md). */
static int add_groups(session *s, table *t)
{
    sl_json_tok list, el, arr, x;
    if (get_list(s, "/v1/groups", "groups", &list))
        return -1;
    sl_json_iter it;
    sl_json_iter_init(&it, &list);
    while (sl_json_iter_elem(&it, &el)) {
        char(*row)[CELL] = table_row(t);
        if (!row) {
            snprintf(s->msg, sizeof s->msg, "out of memory");
            return -1;
        }
        member_text(&el, "group", row[0], CELL, 0, "?");
        member_text(&el, "state", row[1], CELL, 0, "-");
        member_text(&el, "protocol", row[2], CELL, 0, "-");
        cell_i64(row[3], sl_cli_member_i64(&el, "generation"));
        int64_t members = 0, lag = 0;
        sl_json_iter ai;
        if (sl_json_get(&el, "members", &arr) && arr.type == SL_JSON_ARRAY)
            for (sl_json_iter_init(&ai, &arr); sl_json_iter_elem(&ai, &x);)
                members++;
        if (sl_json_get(&el, "offsets", &arr) && arr.type == SL_JSON_ARRAY)
            for (sl_json_iter_init(&ai, &arr); sl_json_iter_elem(&ai, &x);)
                lag += sl_cli_member_i64(&x, "lag");
        cell_i64(row[4], members);
        cell_i64(row[5], lag);
    }
    return 0;
}

/* ---- the command ------------------------------------------------------------------- */

int sl_cli_status_main(int argc, char **argv)
{
    const char *server_opt = NULL, *interval_opt = NULL;
    bool missing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(status_usage, stdout);
            return 0;
        } else if (sl_httpc_opt(argc, argv, &i, "--server", &server_opt, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--interval", &interval_opt, &missing)) {
            if (missing)
                return sl_cli_usage_error(&k_usage, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return sl_cli_usage_error(&k_usage, "unknown option \"%s\"", a);
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", a);
        }
    }
    double interval = 1.0;
    if (interval_opt) {
        char *end;
        errno = 0;
        interval = strtod(interval_opt, &end);
        if (errno || end == interval_opt || *end || !isfinite(interval) || interval < 0 ||
            interval > 3600)
            return sl_cli_usage_error(&k_usage,
                                      "--interval \"%s\": want a number of seconds from 0 to 3600",
                                      interval_opt);
    }
    char server[1024];
    sl_error err = {0};
    if (sl_httpc_server(server_opt, server, sizeof server, &err))
        return sl_cli_usage_error(&k_usage, "%s", err.msg);

    session s = {.server = server};
    if (sl_httpc_init(&s.h, &err)) {
        fprintf(stderr, "sluice status: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    set_list before = {0}, now = {0};
    table sets = {.ncol = interval > 0 ? 5 : 4,
                  .head = {"SET", "PARTITIONS", "EVENTS", "BYTES", "EVENTS/S"},
                  .right = {false, true, true, true, true}};
    table rules = {.ncol = 9,
                   .head = {"RULE", "SET", "LAG", "DELIVERED", "FAILED", "DEAD-LETTERED",
                            "RETRYING", "HEALTHY", "LAST ERROR"},
                   .right = {false, false, true, true, true, true, true, true, false}};
    table lanes = {
        .ncol = 7,
        .head = {"LANE", "ENV", "FALLBACK", "STATE", "EVENTS IN", "DELIVERED", "UNROUTED"},
        .right = {false, false, false, false, true, true, true}};
    table sources = {.ncol = 7,
                     .head = {"SOURCE", "KIND", "SET", "EVENTS", "REFUSED", "STATE", "HEALTHY"},
                     .right = {false, false, false, true, true, false, false}};
    table groups = {.ncol = 6,
                    .head = {"GROUP", "STATE", "PROTOCOL", "GENERATION", "MEMBERS", "LAG"},
                    .right = {false, false, false, true, true, true}};
    size_t other_lanes = 0;
    double secs = 0;
    if (interval > 0) {
        if (sample_sets(&s, &before))
            goto done;
        int64_t t0 = sl_clock_mono_ns();
        sl_httpc_sleep_ms((int64_t)(interval * 1000.0 + 0.5));
        if (sample_sets(&s, &now))
            goto done;
        secs = (double)(sl_clock_mono_ns() - t0) / 1e9;
        if (secs <= 0)
            secs = interval;
    } else if (sample_sets(&s, &now)) {
        goto done;
    }
    if (add_sets(&sets, &now, interval > 0 ? &before : NULL, secs)) {
        snprintf(s.msg, sizeof s.msg, "out of memory");
        goto done;
    }
    if (add_rules(&s, &rules) || add_lanes(&s, &lanes, &other_lanes) ||
        add_sources(&s, &sources) || add_groups(&s, &groups))
        goto done;

    printf("sluice status of %s\n\n", server);
    if (interval > 0)
        printf("Sets (%zu; rates over %.1f s)\n", sets.nrows, secs);
    else
        printf("Sets (%zu)\n", sets.nrows);
    if (sets.nrows)
        table_print(&sets);
    else
        printf("  none\n");
    printf("\nRules (%zu)\n", rules.nrows);
    if (rules.nrows)
        table_print(&rules);
    else
        printf("  none\n");
    if (other_lanes) {
        printf("\nLanes (%zu besides base)\n", other_lanes);
        table_print(&lanes);
    }
    if (sources.nrows) {
        printf("\nSources (%zu)\n", sources.nrows);
        table_print(&sources);
    }
    if (groups.nrows) {
        printf("\nKafka consumer groups (%zu)\n", groups.nrows);
        table_print(&groups);
    }
    fflush(stdout);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "sluice status: %s\n", s.msg[0] ? s.msg : "failed");
    free(before.v);
    free(now.v);
    free(sets.cells);
    free(rules.cells);
    free(lanes.cells);
    free(sources.cells);
    free(groups.cells);
    sl_httpc_close(&s.h);
    return rc;
}
