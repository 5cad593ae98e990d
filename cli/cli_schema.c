/*
 * cli/cli_schema.c — `sluice schema infer SET`: reads up to N stored events
 * of SET from the running server (the consume API, GET /v1/sets/SET/events),
 * groups their `data` by event `type`, and prints one inferred schema per
 * type (rules/schema.h, sl_schema_infer_*) as one JSON object on stdout.
 *
 * The sample is spread over the partitions: each round asks every partition
 * that still has events for its share of what is missing, starting from the
 * oldest event kept, until N events are read or every partition is done.
 */
#include "core/base/lane_name.h"
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "core/base/json.h"
#include "core/base/buf.h"
#include "core/bus/set.h"
#include "rules/schema.h"

#include <curl/curl.h>
#include <jansson.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_DEFAULT_SAMPLE 100
#define SCHEMA_MAX_SAMPLE 1000000
#define SCHEMA_MAX_PER_REQUEST 1000 /* events asked for per request */
#define SCHEMA_RETRY_BUDGET_MS 30000
#define SCHEMA_TIMEOUT_MS 30000L

static const char schema_usage[] =
    "usage: sluice schema infer SET [--sample N] [--lane L|*] [--server URL]\n"
    "  Reads up to N stored events of SET (default 100, oldest first, spread over the\n"
    "  partitions), groups them by event type, and prints {\"<type>\": <schema>, ...}:\n"
    "  the JSON Schema each type's data satisfies.\n"
    "  --sample N      how many events to read (default 100)\n"
    "  --lane L        read lane L instead of the base lane; * reads every lane\n"
    "  --server URL    default $SLUICE_SERVER, else " SL_HTTPC_DEFAULT_SERVER "\n";

static const sl_cli_usage k_usage = {"schema", schema_usage, false};

/* The samples of one event type. */
typedef struct group {
    char *type; /* decoded, owned; may hold NULs (len counts) */
    size_t len;
    sl_schema_infer *inf;
} group;

/* One partition's reading position. */
typedef struct spart {
    int64_t offset; /* next offset; -1 before the first answer (from=beginning) */
    int64_t end;    /* end offset when the command started, -1 when unknown */
    bool done;
} spart;

typedef struct schema_ctx {
    const char *set;
    const char *lane; /* NULL: the base lane */
    long sample;
    char server[1024];
    sl_httpc http;
    spart *parts;
    int nparts;
    group *groups;
    size_t ngroups, cap;
    long read;     /* events read */
    long skipped;  /* events without JSON data */
    long rejected; /* data the inference refused (not JSON) */
} schema_ctx;

/* GET url into c->http.body, retrying 503, other 5xx and lost connections
 * with back-off for up to SCHEMA_RETRY_BUDGET_MS (reading is safe to
 * repeat). Returns 0 on a 200, else prints why and returns -1. */
static int get(schema_ctx *c, const char *url)
{
    char msg[600];
    int64_t waited = 0;
    sl_httpc *h = &c->http;
    for (int attempt = 0;; attempt++) {
        sl_httpc_fail f = sl_httpc_request(h, c->server, "GET", url, NULL, NULL, NULL, 0,
                                                 SCHEMA_TIMEOUT_MS, msg, sizeof msg);
        if (f == SL_HTTPC_OK && h->status == 200)
            return 0;
        if (f == SL_HTTPC_OK && h->status == 404 && c->nparts == 0) { /* GET /v1/sets/SET */
            fprintf(stderr, "sluice schema: set \"%s\" does not exist on %s\n", c->set, c->server);
            return -1;
        }
        if (f == SL_HTTPC_OK)
            sl_httpc_describe(h->status, &h->body, msg, sizeof msg);
        bool retry = f == SL_HTTPC_BROKEN || (f == SL_HTTPC_OK && h->status >= 500) ||
                     (f == SL_HTTPC_UNREACHABLE && attempt > 0);
        int64_t delay = sl_httpc_backoff_ms(attempt, h->retry_after_ms);
        if (!retry || waited + delay > SCHEMA_RETRY_BUDGET_MS) {
            fprintf(stderr, "sluice schema: %s%s\n", msg, retry ? "; giving up" : "");
            return -1;
        }
        sl_httpc_sleep_ms(delay);
        waited += delay;
    }
}

/* Learns the partition count and end offsets from GET /v1/sets/SET. */
static int read_set_info(schema_ctx *c)
{
    char url[1400];
    snprintf(url, sizeof url, "%s/v1/sets/%s", c->server, c->set);
    if (get(c, url))
        return -1;
    sl_json_tok doc, v, info, el, t;
    int64_t n = -1;
    if (sl_json_validate((const char *)c->http.body.data, c->http.body.len, 64, &doc, NULL) ||
        !sl_json_get(&doc, "partitions", &v) || !sl_json_i64(&v, &n) || n < 1 || n > 65536) {
        fprintf(stderr,
                "sluice schema: unexpected answer from %s for set \"%s\" (no partition "
                "count)\n",
                c->server, c->set);
        return -1;
    }
    if (!(c->parts = calloc((size_t)n, sizeof *c->parts))) {
        fprintf(stderr, "sluice schema: out of memory\n");
        return -1;
    }
    c->nparts = (int)n;
    for (int i = 0; i < c->nparts; i++)
        c->parts[i] = (spart){.offset = -1, .end = -1};
    if (sl_json_get(&doc, "partition_info", &info) && info.type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_iter_init(&it, &info);
        while (sl_json_iter_elem(&it, &el)) {
            int64_t id, start = -1, end = -1;
            if (!sl_json_get(&el, "partition", &t) || !sl_json_i64(&t, &id) || id < 0 || id >= n)
                continue;
            if (sl_json_get(&el, "start_offset", &t))
                sl_json_i64(&t, &start);
            if (sl_json_get(&el, "end_offset", &t))
                sl_json_i64(&t, &end);
            c->parts[id].end = end;
            /* An empty partition needs no request. */
            c->parts[id].done = start >= 0 && end >= 0 && start >= end;
        }
    }
    return 0;
}

/* The group of the decoded type string [type, type + len), added when new;
 * NULL when out of memory. */
static group *group_for(schema_ctx *c, const char *type, size_t len)
{
    for (size_t i = 0; i < c->ngroups; i++)
        if (c->groups[i].len == len && memcmp(c->groups[i].type, type, len) == 0)
            return &c->groups[i];
    if (c->ngroups == c->cap && sl_grow(&c->groups, &c->cap, sizeof *c->groups, 16))
            return NULL;
    group *g = &c->groups[c->ngroups];
    memset(g, 0, sizeof *g);
    if (!(g->type = malloc(len + 1)) || sl_schema_infer_new(&g->inf)) {
        free(g->type);
        return NULL;
    }
    memcpy(g->type, type, len);
    g->type[len] = '\0';
    g->len = len;
    c->ngroups++;
    return g;
}

/* Adds one event (a validated object token) to its type's group. Returns 0
 * or -1 after printing an error (out of memory). */
static int add_event(schema_ctx *c, const sl_json_tok *ev)
{
    sl_json_tok type, data;
    c->read++;
    if (!sl_json_get(ev, "type", &type) || type.type != SL_JSON_STRING ||
        !sl_json_get(ev, "data", &data)) {
        c->skipped++; /* no data, or binary data (data_base64) */
        return 0;
    }
    char stack[256], *name = stack;
    size_t len;
    if (type.len - 2 > sizeof stack && !(name = malloc(type.len - 2)))
        goto nomem;
    sl_json_unescape(&type, name, type.len - 2 > sizeof stack ? type.len - 2 : sizeof stack, &len);
    group *g = group_for(c, name, len);
    if (name != stack)
        free(name);
    if (!g)
        goto nomem;
    int rc = sl_schema_infer_add(g->inf, data.p, data.len, NULL);
    if (rc == SL_ENOMEM)
        goto nomem;
    c->rejected += rc != 0;
    return 0;
nomem:
    fprintf(stderr, "sluice schema: out of memory\n");
    return -1;
}

/* Reads up to max events of partition id from its current offset. Returns 0
 * or -1 after printing an error. */
static int read_part(schema_ctx *c, int id, long max)
{
    spart *p = &c->parts[id];
    sl_buf u = SL_BUF_INIT;
    int rc =
        sl_buf_printf(&u, "%s/v1/sets/%s/events?partition=%d&max=%ld", c->server, c->set, id, max);
    if (!rc)
        rc = p->offset >= 0 ? sl_buf_printf(&u, "&offset=%" PRId64, p->offset)
                            : sl_buf_printf(&u, "&from=beginning");
    if (!rc && c->lane) {
        char *e = curl_easy_escape(c->http.curl, c->lane, 0);
        rc = e ? sl_buf_printf(&u, "&lane=%s", e) : SL_ENOMEM;
        curl_free(e);
    }
    if (rc) {
        sl_buf_free(&u);
        fprintf(stderr, "sluice schema: out of memory\n");
        return -1;
    }
    rc = get(c, (const char *)u.data);
    sl_buf_free(&u);
    if (rc)
        return -1;

    const sl_buf *b = &c->http.body;
    sl_json_tok doc, events, ev, t;
    if (sl_json_validate((const char *)b->data, b->len, SL_JSON_DEPTH_LIMIT, &doc, NULL) ||
        !sl_json_get(&doc, "events", &events) || events.type != SL_JSON_ARRAY) {
        fprintf(stderr, "sluice schema: partition %d: unexpected answer from %s (no events)\n", id,
                c->server);
        return -1;
    }
    long count = 0;
    sl_json_iter it;
    sl_json_iter_init(&it, &events);
    while (c->read < c->sample && sl_json_iter_elem(&it, &ev)) {
        if (add_event(c, &ev))
            return -1;
        count++;
    }
    int64_t next = -1;
    if (sl_json_get(&doc, "next_offset", &t))
        sl_json_i64(&t, &next);
    /* Done at the end seen at start, or when an answer makes no progress. */
    if (next < 0 || (count == 0 && next <= p->offset) || (p->end >= 0 && next >= p->end))
        p->done = true;
    p->offset = next;
    return 0;
}

static int print_result(schema_ctx *c)
{
    json_t *out = json_object();
    if (!out)
        goto nomem;
    /* Types in byte order, so the output does not depend on arrival order. */
    for (size_t i = 1; i < c->ngroups; i++)
        for (size_t j = i; j > 0; j--) {
            group *a = &c->groups[j - 1], *b = &c->groups[j];
            size_t n = a->len < b->len ? a->len : b->len;
            int d = memcmp(a->type, b->type, n);
            if (d < 0 || (d == 0 && a->len <= b->len))
                break;
            group tmp = *a;
            *a = *b;
            *b = tmp;
        }
    for (size_t i = 0; i < c->ngroups; i++) {
        char *text = sl_schema_infer_result(c->groups[i].inf);
        json_error_t je;
        json_t *schema = text ? json_loads(text, 0, &je) : NULL;
        free(text);
        if (!schema || json_object_setn_new(out, c->groups[i].type, c->groups[i].len, schema))
            goto nomem;
    }
    char *s = json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(out);
    out = NULL;
    if (!s)
        goto nomem;
    int ok = fputs(s, stdout) >= 0 && fputc('\n', stdout) != EOF && fflush(stdout) == 0;
    free(s);
    if (!ok) {
        fprintf(stderr, "sluice schema: writing to stdout: %s\n", strerror(errno));
        return -1;
    }
    return 0;
nomem:
    json_decref(out);
    fprintf(stderr, "sluice schema: out of memory\n");
    return -1;
}

static int infer_main(int argc, char **argv)
{
    schema_ctx c = {.sample = SCHEMA_DEFAULT_SAMPLE};
    const char *server = NULL, *sample = NULL;
    bool missing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(schema_usage, stdout);
            return 0;
        } else if (sl_httpc_opt(argc, argv, &i, "--sample", &sample, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--lane", &c.lane, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--server", &server, &missing)) {
            if (missing)
                return sl_cli_usage_error(&k_usage, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return sl_cli_usage_error(&k_usage, "unknown option \"%s\"", a);
        } else if (!c.set) {
            c.set = a;
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", a);
        }
    }
    if (sl_cli_set_arg(&k_usage, c.set))
        return SL_CLI_USAGE;
    if (sample) {
        char *end;
        errno = 0;
        long v = strtol(sample, &end, 10);
        if (errno || end == sample || *end || v < 1 || v > SCHEMA_MAX_SAMPLE)
            return sl_cli_usage_error(
                &k_usage, "--sample \"%s\": want a number of events from 1 to 1000000", sample);
        c.sample = v;
    }
    if (c.lane && strcmp(c.lane, "*") != 0 && !sl_lane_valid(c.lane, strlen(c.lane)))
        return sl_cli_usage_error(&k_usage, "invalid lane \"%s\" (want [a-z0-9-]{1,32} or *)",
                                  c.lane);
    sl_error err = {0};
    if (sl_httpc_server(server, c.server, sizeof c.server, &err))
        return sl_cli_usage_error(&k_usage, "%s", err.msg);
    if (sl_httpc_init(&c.http, &err)) {
        fprintf(stderr, "sluice schema: %s\n", err.msg);
        return 1;
    }

    int rc = 1;
    if (read_set_info(&c))
        goto done;
    for (;;) {
        int active = 0;
        for (int i = 0; i < c.nparts; i++)
            active += !c.parts[i].done;
        long missing_events = c.sample - c.read;
        if (active == 0 || missing_events <= 0)
            break;
        long share = missing_events / active;
        if (share < 1)
            share = 1;
        if (share > SCHEMA_MAX_PER_REQUEST)
            share = SCHEMA_MAX_PER_REQUEST;
        for (int i = 0; i < c.nparts && c.read < c.sample; i++)
            if (!c.parts[i].done && read_part(&c, i, share))
                goto done;
    }
    if (c.read == 0)
        fprintf(stderr, "sluice schema: set \"%s\" has no events%s%s\n", c.set,
                c.lane ? " in lane " : "", c.lane ? c.lane : "");
    if (c.skipped)
        fprintf(stderr, "sluice schema: %ld of %ld events have no JSON data (skipped)\n", c.skipped,
                c.read);
    if (c.rejected)
        fprintf(stderr, "sluice schema: %ld events have data that is not JSON (skipped)\n",
                c.rejected);
    rc = print_result(&c) ? 1 : 0;
done:
    for (size_t i = 0; i < c.ngroups; i++) {
        free(c.groups[i].type);
        sl_schema_infer_free(c.groups[i].inf);
    }
    free(c.groups);
    free(c.parts);
    sl_httpc_close(&c.http);
    return rc;
}

int sl_cli_schema_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(schema_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "infer") == 0)
        return infer_main(argc - 1, argv + 1);
    return sl_cli_usage_error(&k_usage, "unknown subcommand \"%s\" (want infer)", argv[1]);
}
