/*
 * http/aws_events.c — PutEvents, TestEventPattern and the buses (event
 * sets) of the EventBridge API.
 *
 * PutEvents: each entry becomes a CloudEvent (id = a new EventId, source,
 * type = DetailType, time, data = Detail, and the awsresources and
 * awstraceheader extensions: core/bus/ebshape.h), checked as ingest checks
 * an event (the CloudEvents rules, the set's size limit, the schema of its
 * type, its lane) and published on its bus with the bus's ack. The answer
 * waits, suspended, for every durable bus of the call (one publish per bus)
 * and lists the entries in order: {"EventId"} or {"ErrorCode",
 * "ErrorMessage"}, as EventBridge does.
 */
#include "http/aws_internal.h"

#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/bus/event.h"
#include "rules/pattern.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PUT_MAX_ENTRIES 10
#define PUT_MAX_BYTES (256 * 1024)

/* One entry of a PutEvents call. */
typedef struct put_entry {
    char id[37];
    size_t off, len; /* its CloudEvent in the call's arena */
    int32_t group;   /* its bus among the call's groups; -1: refused */
    size_t at;       /* its place in its group's publish */
    char code[40];
    char msg[300];
} put_entry;

/* One bus of a call: its entries are published together. */
typedef struct put_call put_call;

typedef struct put_group {
    put_call *p;
    sl_set *set;
    sl_databus_event *evs;
    sl_databus_result *res;
    size_t n;
    _Atomic int status; /* of its durable wait */
} put_group;

struct put_call {
    sl_http_req *r;
    put_entry e[PUT_MAX_ENTRIES];
    size_t n;
    put_group g[PUT_MAX_ENTRIES];
    size_t ng;
    sl_buf arena;
    _Atomic int pending; /* durable publishes not done, plus the handler's own hold */
};

static void put_free(put_call *p)
{
    for (size_t i = 0; i < p->ng; i++) {
        free(p->g[i].evs);
        free(p->g[i].res);
    }
    sl_buf_free(&p->arena);
    free(p);
}

static void refuse(put_entry *e, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(put_entry *e, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    snprintf(e->code, sizeof e->code, "%s", code);
    e->group = -1;
}

/* The answer, every entry in order. */
static void put_answer(put_call *p, sl_buf *b)
{
    size_t failed = 0;
    json_t *arr = json_array();
    for (size_t i = 0; i < p->n; i++) {
        put_entry *e = &p->e[i];
        if (e->group >= 0 && atomic_load(&p->g[e->group].status)) {
            int st = atomic_load(&p->g[e->group].status);
            snprintf(e->code, sizeof e->code, "InternalFailure");
            snprintf(e->msg, sizeof e->msg, "the event was not confirmed stored (%s); retry it",
                     sl_strerror(st));
            e->group = -1;
        }
        if (e->group < 0) {
            failed++;
            json_array_append_new(arr, json_pack("{s:s,s:s}", "ErrorCode", e->code,
                                                 "ErrorMessage", e->msg));
        } else {
            json_array_append_new(arr, json_pack("{s:s}", "EventId", e->id));
        }
    }
    json_t *o = json_pack("{s:I,s:o}", "FailedEntryCount", (json_int_t)failed, "Entries", arr);
    sl__aws_body(o, b);
    json_decref(o);
}

static enum MHD_Result put_resumed(sl_http_req *r)
{
    const char *hdrs[] = {"x-amzn-RequestId", r->request_id, NULL};
    return sl__http_reply_hdrs(r, 200, &r->resp, AWS_JSON, hdrs);
}

/* The last durable wait of a call is over (or the handler's own hold, when
 * none was needed: then the handler answers). */
static void put_release(put_call *p, bool from_bus)
{
    if (atomic_fetch_sub(&p->pending, 1) != 1)
        return;
    if (!from_bus)
        return; /* the handler answers itself */
    sl_http_req *r = p->r;
    pthread_mutex_lock(&r->lock);
    r->resp.len = 0;
    put_answer(p, &r->resp);
    r->resp_status = 200;
    r->resumed = put_resumed;
    r->wait_status = 0;
    put_free(p);
    sl__http_req_answered(r); /* unlocks, drops the Databus's reference */
}

static void put_done(void *ctx, int status)
{
    put_group *g = ctx;
    atomic_store(&g->status, status);
    put_release(g->p, true);
}

bool sl__aws_resources_ok(const json_t *res)
{
    size_t i;
    const json_t *v;
    json_array_foreach(res, i, v) if (!json_is_string(v)) return false;
    return true;
}

/* The entry's Time: epoch seconds (botocore sends a number) or RFC 3339. */
static bool entry_time(const json_t *t, int64_t *ms)
{
    if (json_is_number(t)) {
        double s = json_number_value(t);
        if (!isfinite(s) || s < 0 || s > 253402300799.0)
            return false;
        *ms = (int64_t)llround(s * 1000.0);
        return true;
    }
    const char *s = json_string_value(t);
    if (!s)
        return false;
    if (sl_time_parse_rfc3339(s, strlen(s), ms) == 0)
        return true;
    /* Epoch seconds as text, as some clients send them. */
    char *end;
    double v = strtod(s, &end);
    if (end != s && !*end && isfinite(v) && v >= 0 && v < 253402300799.0) {
        *ms = (int64_t)llround(v * 1000.0);
        return true;
    }
    return false;
}

/* Builds entry i's CloudEvent into the arena. */
static void build_entry(aws_call *c, put_call *p, const json_t *in, put_entry *e, char *bus,
                        size_t buscap, int64_t now)
{
    enum MHD_Result ignored;
    const char *src = sl__aws_str(in, "Source"), *dt = sl__aws_str(in, "DetailType");
    const char *detail = sl__aws_str(in, "Detail");
    const json_t *res = json_object_get(in, "Resources");
    const json_t *bv = json_object_get(in, "EventBusName");
    if (!src || !*src) {
        refuse(e, "InvalidArgument", "Parameter Source is not valid. Reason: Source is a "
                                     "required argument.");
        return;
    }
    if (!dt || !*dt) {
        refuse(e, "InvalidArgument", "Parameter DetailType is not valid. Reason: DetailType is "
                                     "a required argument.");
        return;
    }
    if (!detail) {
        refuse(e, "InvalidArgument", "Parameter Detail is not valid. Reason: Detail is a "
                                     "required argument.");
        return;
    }
    sl_json_tok dtok;
    if (sl_json_validate(detail, strlen(detail), SL_EVENT_MAX_DEPTH_DEFAULT, &dtok, NULL) ||
        dtok.type != SL_JSON_OBJECT) {
        refuse(e, "MalformedDetail", "Detail is malformed: it must be the text of a JSON object.");
        return;
    }
    if (res && (!json_is_array(res) || !sl__aws_resources_ok(res))) {
        refuse(e, "InvalidArgument", "Parameter Resources is not valid. Reason: Resources must "
                                     "be a list of strings.");
        return;
    }
    if (bv && !json_is_string(bv)) {
        refuse(e, "InvalidArgument", "Parameter EventBusName is not valid: not a string.");
        return;
    }
    /* The bus check answers for the whole call; for an entry it is the
     * entry's error instead. */
    const char *bs = json_string_value(bv);
    if (bs && *bs && strncmp(bs, "arn:", 4) == 0) {
        const char *slash = strstr(bs, ":event-bus/");
        if (!slash || strncmp(bs, "arn:aws:events:", 15)) {
            refuse(e, "InvalidArgument", "Parameter EventBusName is not valid: %.200s is not an "
                                         "event bus ARN.",
                   bs);
            return;
        }
        bs = slash + 11;
    }
    snprintf(bus, buscap, "%s", bs && *bs ? bs : "default");
    if (!sl_set_name_valid(bus)) {
        refuse(e, "InvalidArgument", "Parameter EventBusName is not valid: \"%.128s\" is no "
                                     "bus name (1-128 of A-Z a-z 0-9 . _ -).",
               bus);
        return;
    }
    (void)ignored;
    int64_t ms = now;
    const json_t *tv = json_object_get(in, "Time");
    if (tv && !json_is_null(tv) && !entry_time(tv, &ms)) {
        refuse(e, "InvalidArgument", "Parameter Time is not valid: want epoch seconds or an "
                                     "RFC 3339 date-time.");
        return;
    }
    char t[SL_TIME_RFC3339_MAX];
    if (!sl_time_format_rfc3339(ms, t)) {
        refuse(e, "InvalidArgument", "Parameter Time is not valid: out of range.");
        return;
    }
    sl_event_uuid7(now, e->id);
    sl_buf *b = &p->arena;
    size_t at = b->len;
    int rc = sl_buf_printf(b, "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":", e->id);
    rc = rc ? rc : sl_json_put_string(b, src, strlen(src));
    rc = rc ? rc : sl_buf_printf(b, ",\"type\":");
    rc = rc ? rc : sl_json_put_string(b, dt, strlen(dt));
    rc = rc ? rc : sl_buf_printf(b, ",\"time\":\"%s\",\"datacontenttype\":\"application/json\"", t);
    if (!rc && json_array_size(res)) {
        char *rt = json_dumps(res, JSON_COMPACT);
        rc = rt ? sl_buf_printf(b, ",\"awsresources\":") : SL_ENOMEM;
        rc = rc ? rc : sl_json_put_string(b, rt, strlen(rt));
        free(rt);
    }
    const char *trace = sl__aws_str(in, "TraceHeader");
    if (!rc && trace && *trace) {
        rc = sl_buf_printf(b, ",\"awstraceheader\":");
        rc = rc ? rc : sl_json_put_string(b, trace, strlen(trace));
    }
    rc = rc ? rc : sl_buf_printf(b, ",\"data\":");
    rc = rc ? rc : sl_json_compact(dtok.p, dtok.len, b);
    rc = rc ? rc : sl_buf_append(b, "}", 1);
    if (rc) {
        b->len = at;
        refuse(e, rc == SL_EINVAL ? "InvalidArgument" : "InternalFailure",
               rc == SL_EINVAL ? "a text parameter is not valid UTF-8." : "out of memory");
        return;
    }
    e->off = at;
    e->len = b->len - at;
    (void)c;
}

/* The CloudEvents and set checks of an entry built: parse, size, schema,
 * lane (as ingest checks an event). */
static void check_entry(aws_call *c, put_call *p, put_entry *e, sl_set *set)
{
    sl_event ev;
    sl_error err = {0};
    const char *json = (const char *)p->arena.data + e->off;
    sl_event_status st = sl_event_parse(json, e->len, NULL, &ev, &err);
    if (st != SL_EVENT_OK) {
        refuse(e, "InvalidArgument", "%s", err.msg);
        return;
    }
    if (e->len > set->cfg.max_event_bytes) {
        refuse(e, "InvalidArgument", "the event takes %zu bytes stored, over bus %s's limit of %u",
               e->len, set->name, set->cfg.max_event_bytes);
        return;
    }
    const sl_http_hooks *hk = &c->r->h->hooks;
    if (hk->validate && hk->validate(hk->ctx, set, &ev, &err))
        refuse(e, "InvalidArgument", "%s", err.msg);
}

enum MHD_Result sl__aws_put_events(aws_call *c)
{
    const json_t *entries = json_object_get(c->in, "Entries");
    size_t n = json_array_size(entries);
    if (!json_is_array(entries) || n < 1 || n > PUT_MAX_ENTRIES)
        return sl__aws_error(c, 400, "ValidationException",
                             "1 validation error detected: Value at 'entries' failed to satisfy "
                             "constraint: Member must have length between 1 and %d (it has %zu)",
                             PUT_MAX_ENTRIES, n);
    /* EventBridge's size of a call: Time (14 bytes), Source, DetailType,
     * Detail and the Resources of every entry. */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(entries, i);
        const char *keys[] = {"Source", "DetailType", "Detail"};
        for (size_t k = 0; k < 3; k++)
            total += strlen(sl__aws_str(e, keys[k]) ? sl__aws_str(e, keys[k]) : "");
        total += json_object_get(e, "Time") ? 14 : 0;
        size_t j;
        const json_t *rv;
        json_array_foreach(json_object_get(e, "Resources"), j, rv) total +=
            strlen(json_string_value(rv) ? json_string_value(rv) : "");
    }
    if (total > PUT_MAX_BYTES)
        return sl__aws_error(c, 400, "ValidationException",
                             "Total size of the entries in the request is over the limit "
                             "(%zu bytes, at most %d).",
                             total, PUT_MAX_BYTES);
    put_call *p = calloc(1, sizeof *p);
    if (!p)
        return sl__aws_error(c, 500, "InternalException", "out of memory");
    p->r = c->r;
    p->n = n;
    int64_t now = sl_clock_now_ms();
    char names[PUT_MAX_ENTRIES][SL_SET_NAME_MAX + 1];
    for (size_t i = 0; i < n; i++) {
        put_entry *e = &p->e[i];
        e->group = -2; /* not placed yet */
        build_entry(c, p, json_array_get(entries, i), e, names[i], sizeof names[i], now);
        if (e->group == -1)
            continue;
        if (!sl__aws_allowed(c, AWS_PUBLISH, names[i])) {
            put_free(p);
            return sl__aws_error(c, 400, "AccessDeniedException",
                                 "credential %s may not put events on bus %s",
                                 c->cred ? c->cred->akid : "?", names[i]);
        }
    }
    /* Buses: "default" is made on first use, as ingest makes sets; any
     * other bus must exist (CreateEventBus, or a set of the config). */
    for (size_t i = 0; i < n; i++) {
        put_entry *e = &p->e[i];
        if (e->group == -1)
            continue;
        size_t g = 0;
        while (g < p->ng && strcmp(p->g[g].set->name, names[i]))
            g++;
        if (g == p->ng) {
            sl_set *set = NULL;
            sl_error err = {0};
            int rc = sl_sets_get(c->r->h->sets, names[i], false, &set, &err);
            if (rc == SL_ENOENT && strcmp(names[i], "default") == 0) {
                /* as ingest makes a set: charged to the client, within the caps */
                char client[SL_SET_CLIENT_MAX + 1];
                sl__http_client_of(c->r, client, sizeof client);
                rc = sl_sets_create_auto(c->r->h->sets, names[i], client, &set, &err);
            }
            if (rc) {
                if (rc == SL_ENOENT)
                    refuse(e, "ResourceNotFoundException", "Event bus %s does not exist.",
                           names[i]);
                else
                    refuse(e, rc == SL_ELIMIT ? "LimitExceededException" : "InternalFailure", "%s",
                           err.msg);
                continue;
            }
            p->g[p->ng++].set = set;
        }
        check_entry(c, p, e, p->g[g].set);
        if (e->group == -1)
            continue;
        e->group = (int32_t)g;
        e->at = p->g[g].n++;
    }
    int rc = 0;
    for (size_t g = 0; !rc && g < p->ng; g++) {
        put_group *pg = &p->g[g];
        pg->evs = calloc(pg->n + 1, sizeof *pg->evs);
        pg->res = calloc(pg->n + 1, sizeof *pg->res);
        if (!pg->evs || !pg->res)
            rc = SL_ENOMEM;
    }
    for (size_t i = 0; !rc && i < n; i++) {
        put_entry *e = &p->e[i];
        if (e->group < 0)
            continue;
        p->g[e->group].evs[e->at] = (sl_databus_event){
            .value = p->arena.data + e->off, .value_len = e->len, .lane = "", .ts_ms = now};
    }
    if (rc) {
        put_free(p);
        return sl__aws_error(c, 500, "InternalException", "out of memory");
    }
    sl_http_req *r = c->r;
    atomic_store(&p->pending, 1);
    atomic_fetch_add(&r->refs, 1); /* the Databus's, for the durable waits */
    pthread_mutex_lock(&r->lock);
    for (size_t g = 0; g < p->ng; g++) {
        put_group *pg = &p->g[g];
        if (!pg->n)
            continue;
        sl_error err = {0};
        atomic_fetch_add(&p->pending, 1);
        pg->p = p;
        int prc = sl_databus_publish(r->h->bus, pg->set, pg->evs, pg->n, pg->res, put_done, pg,
                                     &err);
        if (prc != 1)
            atomic_fetch_sub(&p->pending, 1); /* no wait: done now */
        if (prc != 0 && prc != 1) {
            /* Nothing of this bus was stored: its entries say why. */
            for (size_t i = 0; i < n; i++)
                if (p->e[i].group == (int32_t)g)
                    refuse(&p->e[i], prc == SL_EFULL ? "ThrottlingException" : "InternalFailure",
                           "%s; the event was not stored, retry it",
                           err.msg[0] ? err.msg : sl_strerror(prc));
        }
    }
    if (atomic_fetch_sub(&p->pending, 1) == 1) {
        /* Every publish is complete already (buffer buses, or none). */
        pthread_mutex_unlock(&r->lock);
        sl__http_req_release(r);
        sl_buf b = SL_BUF_INIT;
        put_answer(p, &b);
        put_free(p);
        const char *hdrs[] = {"x-amzn-RequestId", r->request_id, NULL};
        return sl__http_reply_hdrs(r, 200, &b, AWS_JSON, hdrs);
    }
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    pthread_mutex_unlock(&r->lock);
    return MHD_YES;
}

/* ---- TestEventPattern ----------------------------------------------------------------- */

enum MHD_Result sl__aws_test_event_pattern(aws_call *c)
{
    const char *pat = sl__aws_str(c->in, "EventPattern"), *ev = sl__aws_str(c->in, "Event");
    if (!pat || !ev)
        return sl__aws_error(c, 400, "ValidationException",
                             "TestEventPattern needs EventPattern and Event (JSON texts)");
    /* EventBridge checks the event has its shape's required fields. */
    /* A repeated member is the event's business (the pattern engine takes
     * the first, as rules do), not a reason to refuse it. */
    json_error_t je;
    json_t *e = json_loads(ev, 0, &je);
    if (!e)
        return sl__aws_error(c, 400, "ValidationException",
                             "Parameter Event is not valid: not JSON: %s (line %d, column %d)",
                             je.text, je.line, je.column);
    const char *required[] = {"id", "account", "source", "time", "region", "detail-type"};
    const char *missing = NULL;
    for (size_t i = 0; e && i < sizeof required / sizeof *required && !missing; i++)
        if (!json_object_get(e, required[i]))
            missing = required[i];
    bool object = json_is_object(e);
    json_decref(e);
    if (!object)
        return sl__aws_error(c, 400, "ValidationException",
                             "Parameter Event is not valid: not a JSON object.");
    if (missing)
        return sl__aws_error(c, 400, "ValidationException",
                             "Parameter Event is not valid. Reason: Provided Event must have "
                             "mandatory field %s.",
                             missing);
    sl_pattern *cp = NULL;
    sl_error err = {0};
    if (sl_pattern_compile(pat, strlen(pat), &cp, &err))
        return sl__aws_error(c, 400, "InvalidEventPatternException",
                             "Event pattern is not valid. Reason: %s", err.msg);
    bool matched = false;
    int rc = sl_pattern_match(cp, ev, strlen(ev), &matched, &err);
    sl_pattern_free(cp);
    if (rc)
        return sl__aws_error(c, 400, "ValidationException", "Parameter Event is not valid: %s",
                             err.msg);
    return sl__aws_reply(c, json_pack("{s:b}", "Result", matched));
}

/* ---- buses ---------------------------------------------------------------------------- */

static json_t *bus_json(const sl_aws *a, const char *name)
{
    char arn[512];
    sl__aws_arn(a, "event-bus", name, arn, sizeof arn);
    return json_pack("{s:s,s:s}", "Name", name, "Arn", arn);
}

enum MHD_Result sl__aws_create_bus(aws_call *c)
{
    char name[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    const json_t *nv = json_object_get(c->in, "Name");
    if (!json_is_string(nv))
        return sl__aws_error(c, 400, "ValidationException", "CreateEventBus needs a Name");
    if (!sl__aws_bus(c, (json_t *)nv, name, sizeof name, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_ADMIN, name))
        return sl__aws_error(c, 400, "AccessDeniedException",
                             "credential %s may not create buses", c->cred->akid);
    sl_set *set = NULL;
    sl_error err = {0};
    if (sl_sets_get(c->r->h->sets, name, false, &set, &err) == 0)
        return sl__aws_error(c, 400, "ResourceAlreadyExistsException",
                             "Event bus %s already exists.", name);
    int rc = sl_sets_declare(c->r->h->sets, name, &set, &err);
    if (rc)
        return sl__aws_error(c, 500, "InternalException", "cannot create bus %s: %s", name,
                             err.msg);
    char arn[512];
    sl__aws_arn(c->a, "event-bus", name, arn, sizeof arn);
    return sl__aws_reply(c, json_pack("{s:s}", "EventBusArn", arn));
}

enum MHD_Result sl__aws_describe_bus(aws_call *c)
{
    char name[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    if (!sl__aws_bus(c, json_object_get(c->in, "Name"), name, sizeof name, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_SEE, name))
        return sl__aws_error(c, 400, "AccessDeniedException", "credential %s may not read bus %s",
                             c->cred->akid, name);
    sl_set *set = NULL;
    sl_error err = {0};
    if (sl_sets_get(c->r->h->sets, name, false, &set, &err))
        return sl__aws_error(c, 400, "ResourceNotFoundException", "Event bus %s does not exist.",
                             name);
    return sl__aws_reply(c, bus_json(c->a, name));
}

typedef struct bus_list {
    const aws_call *c;
    json_t *names;
    const char *prefix;
} bus_list;

static void add_bus(sl_set *set, void *ctx)
{
    bus_list *l = ctx;
    if ((!l->prefix || strncmp(set->name, l->prefix, strlen(l->prefix)) == 0) &&
        sl__aws_allowed(l->c, AWS_SEE, set->name))
        json_array_append_new(l->names, json_string(set->name));
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(json_string_value(*(json_t *const *)x), json_string_value(*(json_t *const *)y));
}

/* A page of names (sorted), from NextToken (the last name given) on, at
 * most Limit (default 100): out gets the page's names, *next the token. */
json_t *sl__aws_page(aws_call *c, json_t *names, const char **next_out, char *next, size_t cap)
{
    size_t n = json_array_size(names);
    json_t **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = json_array_get(names, i);
    if (v)
        qsort(v, n, sizeof *v, cmp_str);
    const char *from = sl__aws_str(c->in, "NextToken");
    json_int_t limit = json_integer_value(json_object_get(c->in, "Limit"));
    if (limit <= 0 || limit > 100)
        limit = 100;
    json_t *page = json_array();
    *next_out = NULL;
    for (size_t i = 0; v && i < n; i++) {
        const char *s = json_string_value(v[i]);
        if (from && strcmp(s, from) <= 0)
            continue;
        if ((json_int_t)json_array_size(page) == limit) {
            snprintf(next, cap, "%s", json_string_value(json_array_get(page, (size_t)limit - 1)));
            *next_out = next;
            break;
        }
        json_array_append(page, v[i]);
    }
    free(v);
    return page;
}

enum MHD_Result sl__aws_list_buses(aws_call *c)
{
    bus_list l = {c, json_array(), sl__aws_str(c->in, "NamePrefix")};
    sl_sets_each(c->r->h->sets, add_bus, &l);
    /* default is there before anything was put on it. */
    bool has_default = false;
    size_t i;
    json_t *v;
    json_array_foreach(l.names, i, v) has_default |= strcmp(json_string_value(v), "default") == 0;
    if (!has_default && (!l.prefix || strncmp("default", l.prefix, strlen(l.prefix)) == 0) &&
        sl__aws_allowed(c, AWS_SEE, "default"))
        json_array_append_new(l.names, json_string("default"));
    char next[SL_SET_NAME_MAX + 1];
    const char *tok;
    json_t *page = sl__aws_page(c, l.names, &tok, next, sizeof next);
    json_decref(l.names);
    json_t *buses = json_array();
    json_array_foreach(page, i, v) json_array_append_new(buses, bus_json(c->a, json_string_value(v)));
    json_decref(page);
    json_t *o = json_pack("{s:o}", "EventBuses", buses);
    if (tok)
        json_object_set_new(o, "NextToken", json_string(tok));
    return sl__aws_reply(c, o);
}

enum MHD_Result sl__aws_delete_bus(aws_call *c)
{
    char name[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    if (!sl__aws_bus(c, json_object_get(c->in, "Name"), name, sizeof name, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_ADMIN, name))
        return sl__aws_error(c, 400, "AccessDeniedException",
                             "credential %s may not delete buses", c->cred->akid);
    if (strcmp(name, "default") == 0)
        return sl__aws_error(c, 400, "ValidationException", "Cannot delete event bus default.");
    sl_set *set = NULL;
    sl_error err = {0};
    if (sl_sets_get(c->r->h->sets, name, false, &set, &err))
        return sl__aws_reply(c, json_object()); /* AWS: deleting a missing bus succeeds */
    const sl_http_hooks *hk = &c->r->h->hooks;
    if (hk->may_delete && hk->may_delete(hk->ctx, set, &err))
        return sl__aws_error(c, 400, "ValidationException", "Cannot delete event bus %s: %s",
                             name, err.msg);
    if (sl_sets_delete(c->r->h->sets, name, &err))
        return sl__aws_error(c, 500, "InternalException", "Cannot delete event bus %s: %s", name,
                             err.msg);
    return sl__aws_reply(c, json_object());
}
