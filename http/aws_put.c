/*
 * http/aws_put.c — PutEvents, the EventBridge API's hot path.
 *
 * Each entry becomes a CloudEvent (id = a new EventId, source, type =
 * DetailType, time, data = Detail, and the awsresources and awstraceheader
 * extensions: core/bus/ebshape.h), checked as ingest checks an event (the
 * CloudEvents rules, the bus's size limit, the schema of its type, its lane)
 * and published on its bus with the bus's ack, one publish per bus of the
 * call. The answer waits, suspended, for every durable bus and lists the
 * entries in order: {"EventId"} or {"ErrorCode", "ErrorMessage"}, as
 * EventBridge does.
 *
 * The request is read with the non-allocating scanner of core/base/json.h,
 * not jansson, and the answer written by hand: a profile of 10-entry calls
 * had jansson's parse and the allocations it makes at half the CPU of the
 * whole call (aws_bench).
 */
#include "http/aws_internal.h"

#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/bus/event.h"

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
    int32_t group;   /* its bus among the call's groups; -1: refused, -2: not placed yet */
    size_t at;       /* its place in its group's publish */
    char bus[SL_SET_NAME_MAX + 1];
    char code[40];
    char msg[300];
} put_entry;

typedef struct put_call put_call;

/* One bus of a call: its entries are published together. */
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
    sl_buf arena;        /* the CloudEvents */
    sl_buf scratch;      /* a decoded member on its way */
    _Atomic int pending; /* durable publishes not done, plus the handler's own hold */
};

static void put_free(put_call *p)
{
    for (size_t i = 0; i < p->ng; i++) {
        free(p->g[i].evs);
        free(p->g[i].res);
    }
    sl_buf_free(&p->arena);
    sl_buf_free(&p->scratch);
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
    for (size_t i = 0; i < p->n; i++) {
        put_entry *e = &p->e[i];
        int st = e->group >= 0 ? atomic_load(&p->g[e->group].status) : 0;
        if (st)
            refuse(e, "InternalFailure", "the event was not confirmed stored (%s); retry it",
                   sl_strerror(st));
        failed += e->group < 0;
    }
    sl_buf_printf(b, "{\"FailedEntryCount\":%zu,\"Entries\":[", failed);
    for (size_t i = 0; i < p->n; i++) {
        const put_entry *e = &p->e[i];
        if (e->group >= 0) {
            sl_buf_printf(b, "%s{\"EventId\":\"%s\"}", i ? "," : "", e->id);
            continue;
        }
        sl_buf_printf(b, "%s{\"ErrorCode\":\"%s\",\"ErrorMessage\":", i ? "," : "", e->code);
        sl_buf_append(b, "\"", 1);
        sl__http_put_json_text(b, e->msg);
        sl_buf_append(b, "\"}", 2);
    }
    sl_buf_append(b, "]}", 2);
}

static enum MHD_Result put_resumed(sl_http_req *r)
{
    const char *hdrs[] = {"x-amzn-RequestId", r->request_id, NULL};
    return sl__http_reply_hdrs(r, 200, &r->resp, AWS_JSON, hdrs);
}

/* A durable wait is over: the last one answers (the handler answers itself
 * when nothing was left to wait for). */
static void put_done(void *ctx, int status)
{
    put_group *g = ctx;
    put_call *p = g->p;
    atomic_store(&g->status, status);
    if (atomic_fetch_sub(&p->pending, 1) != 1)
        return;
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

/* ---- reading an entry ----------------------------------------------------------------- */

/* The members of an entry PutEvents reads, found in one pass over it (a
 * look-up per name would scan the entry, Detail and all, once each). */
enum { M_SOURCE, M_DETAILTYPE, M_DETAIL, M_RESOURCES, M_BUS, M_TRACE, M_TIME, M_COUNT };
static const char *const member_names[M_COUNT] = {
    "Source", "DetailType", "Detail", "Resources", "EventBusName", "TraceHeader", "Time"};

/* Fills m[] with the first of each member (type SL_JSON_NONE when absent;
 * null counts as absent). */
static void members(const sl_json_tok *obj, sl_json_tok m[M_COUNT])
{
    for (int i = 0; i < M_COUNT; i++)
        m[i].type = SL_JSON_NONE;
    sl_json_iter it;
    sl_json_tok k, v;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &k, &v)) {
        char name[16];
        size_t n = 0;
        if (k.len > sizeof name + 2 || sl_json_unescape(&k, name, sizeof name, &n))
            continue; /* longer than any of ours */
        for (int i = 0; i < M_COUNT; i++)
            if (m[i].type == SL_JSON_NONE && strlen(member_names[i]) == n &&
                memcmp(member_names[i], name, n) == 0 && v.type != SL_JSON_NULL)
                m[i] = v;
    }
}

/* The decoded string v into p->scratch (NUL-terminated); its length, or
 * SIZE_MAX out of memory. */
static size_t decode(put_call *p, const sl_json_tok *v)
{
    p->scratch.len = 0;
    size_t n = 0;
    if (sl_buf_reserve(&p->scratch, v->len + 1) ||
        sl_json_unescape(v, (char *)p->scratch.data, v->len, &n))
        return SIZE_MAX;
    p->scratch.data[n] = '\0';
    p->scratch.len = n;
    return n;
}

/* The entry's Time: epoch seconds (botocore sends a number) or RFC 3339 /
 * epoch seconds as text. */
static bool entry_time(put_call *p, const sl_json_tok *t, int64_t *ms)
{
    char num[64];
    const char *s = num;
    size_t n = t->len;
    if (t->type == SL_JSON_NUMBER) {
        if (n >= sizeof num)
            return false;
        memcpy(num, t->p, n);
        num[n] = '\0';
    } else if (t->type == SL_JSON_STRING) {
        if ((n = decode(p, t)) == SIZE_MAX)
            return false;
        s = (const char *)p->scratch.data;
        if (sl_time_parse_rfc3339(s, n, ms) == 0)
            return true;
    } else {
        return false;
    }
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < 0 || v > 253402300799.0)
        return false;
    *ms = (int64_t)llround(v * 1000.0);
    return true;
}

/* Builds entry e's CloudEvent from its object ent into the arena; *size
 * grows by EventBridge's measure of it. */
static void build_entry(put_call *p, const sl_json_tok *ent, put_entry *e, int64_t now,
                        size_t *size)
{
    if (ent->type != SL_JSON_OBJECT) {
        refuse(e, "InvalidArgument", "an entry is a JSON object");
        return;
    }
    sl_json_tok m[M_COUNT];
    members(ent, m);
    const sl_json_tok src = m[M_SOURCE], dt = m[M_DETAILTYPE], det = m[M_DETAIL],
                      res = m[M_RESOURCES], busv = m[M_BUS], trace = m[M_TRACE], tv = m[M_TIME];
    bool has_src = src.type != SL_JSON_NONE, has_dt = dt.type != SL_JSON_NONE;
    bool has_det = det.type != SL_JSON_NONE, has_res = res.type != SL_JSON_NONE;
    bool has_bus = busv.type != SL_JSON_NONE, has_trace = trace.type != SL_JSON_NONE;
    bool has_time = tv.type != SL_JSON_NONE;
    bool bad = false;
    for (int i = 0; i < M_COUNT; i++)
        bad |= m[i].type != SL_JSON_NONE && i != M_TIME &&
               m[i].type != (i == M_RESOURCES ? SL_JSON_ARRAY : SL_JSON_STRING);
    if (bad) {
        refuse(e, "InvalidArgument", "Parameter(s) Source, DetailType, Detail, EventBusName and "
                                     "TraceHeader are strings and Resources a list of strings.");
        return;
    }
    if (!has_src || src.len <= 2) {
        refuse(e, "InvalidArgument", "Parameter Source is not valid. Reason: Source is a "
                                     "required argument.");
        return;
    }
    if (!has_dt || dt.len <= 2) {
        refuse(e, "InvalidArgument", "Parameter DetailType is not valid. Reason: DetailType is "
                                     "a required argument.");
        return;
    }
    if (!has_det) {
        refuse(e, "InvalidArgument", "Parameter Detail is not valid. Reason: Detail is a "
                                     "required argument.");
        return;
    }
    *size += src.len - 2 + dt.len - 2 + (has_time ? 14 : 0);
    sl_json_iter it;
    sl_json_tok el;
    if (has_res) {
        sl_json_iter_init(&it, &res);
        while (sl_json_iter_elem(&it, &el)) {
            if (el.type != SL_JSON_STRING) {
                refuse(e, "InvalidArgument", "Parameter Resources is not valid. Reason: Resources "
                                             "must be a list of strings.");
                return;
            }
            *size += el.len - 2;
        }
    }
    /* The bus: a name or an event bus ARN. */
    const char *bs = "default";
    size_t bl = 7;
    if (has_bus && busv.len > 2) {
        if ((bl = decode(p, &busv)) == SIZE_MAX)
            goto oom;
        bs = (const char *)p->scratch.data;
        if (strncmp(bs, "arn:", 4) == 0) {
            const char *slash = strstr(bs, ":event-bus/");
            if (!slash || strncmp(bs, "arn:aws:events:", 15)) {
                refuse(e, "InvalidArgument",
                       "Parameter EventBusName is not valid: %.200s is not an event bus ARN.", bs);
                return;
            }
            bs = slash + 11;
            bl = strlen(bs);
        }
    }
    if (bl > SL_SET_NAME_MAX || memchr(bs, '\0', bl) || !sl_set_name_valid(bs)) {
        refuse(e, "InvalidArgument",
               "Parameter EventBusName is not valid: \"%.128s\" is no bus name (1-128 of A-Z "
               "a-z 0-9 . _ -).",
               bs);
        return;
    }
    memcpy(e->bus, bs, bl + 1);
    int64_t ms = now;
    if (has_time && !entry_time(p, &tv, &ms)) {
        refuse(e, "InvalidArgument",
               "Parameter Time is not valid: want epoch seconds or an RFC 3339 date-time.");
        return;
    }
    char t[SL_TIME_RFC3339_MAX];
    if (!sl_time_format_rfc3339(ms, t)) {
        refuse(e, "InvalidArgument", "Parameter Time is not valid: out of range.");
        return;
    }
    /* Detail: the text of a JSON object, inside a JSON string. */
    size_t dl = decode(p, &det);
    if (dl == SIZE_MAX)
        goto oom;
    *size += dl;
    sl_json_tok dtok;
    const char *dtext = (const char *)p->scratch.data;
    if (sl_json_validate(dtext, dl, SL_EVENT_MAX_DEPTH_DEFAULT - 1, &dtok, NULL) ||
        dtok.type != SL_JSON_OBJECT) {
        refuse(e, "MalformedDetail", "Detail is malformed: it must be the text of a JSON object.");
        return;
    }
    sl_event_uuid7(now, e->id);
    sl_buf *b = &p->arena;
    size_t at = b->len;
    /* Source and DetailType go in as the JSON strings they came as. */
    int rc = sl_buf_printf(b, "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":", e->id);
    rc = rc ? rc : sl_buf_append(b, src.p, src.len);
    rc = rc ? rc : sl_buf_append(b, ",\"type\":", 8);
    rc = rc ? rc : sl_buf_append(b, dt.p, dt.len);
    rc = rc ? rc : sl_buf_printf(b, ",\"time\":\"%s\",\"datacontenttype\":\"application/json\"", t);
    if (!rc && has_trace && trace.len > 2) {
        rc = sl_buf_append(b, ",\"awstraceheader\":", 18);
        rc = rc ? rc : sl_buf_append(b, trace.p, trace.len);
    }
    rc = rc ? rc : sl_buf_append(b, ",\"data\":", 8);
    rc = rc ? rc : sl_json_compact(dtok.p, dtok.len, b);
    if (!rc && has_res && res.len > 2) {
        /* the array's text, as a string (scratch is free again) */
        p->scratch.len = 0;
        rc = sl_json_compact(res.p, res.len, &p->scratch);
        rc = rc ? rc : sl_buf_append(b, ",\"awsresources\":", 16);
        rc = rc ? rc : sl_json_put_string(b, (const char *)p->scratch.data, p->scratch.len);
    }
    rc = rc ? rc : sl_buf_append(b, "}", 1);
    if (rc) {
        b->len = at;
        if (rc == SL_EINVAL) {
            refuse(e, "InvalidArgument", "a text parameter is not valid UTF-8.");
            return;
        }
        goto oom;
    }
    e->off = at;
    e->len = b->len - at;
    return;
oom:
    refuse(e, "InternalFailure", "out of memory");
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

/* The set of bus name (default made on first use, as ingest makes sets);
 * its group in p, made when new; -1 with e refused. */
static int group_of(aws_call *c, put_call *p, put_entry *e)
{
    for (size_t g = 0; g < p->ng; g++)
        if (strcmp(p->g[g].set->name, e->bus) == 0)
            return (int)g;
    sl_set *set = NULL;
    sl_error err = {0};
    int rc = sl_sets_get(c->r->h->sets, e->bus, false, &set, &err);
    if (rc == SL_ENOENT && strcmp(e->bus, "default") == 0) {
        char client[SL_SET_CLIENT_MAX + 1];
        sl__http_client_of(c->r, client, sizeof client);
        rc = sl_sets_create_auto(c->r->h->sets, e->bus, client, &set, &err);
    }
    if (rc == SL_ENOENT)
        refuse(e, "ResourceNotFoundException", "Event bus %s does not exist.", e->bus);
    else if (rc)
        refuse(e, rc == SL_ELIMIT ? "LimitExceededException" : "InternalFailure", "%s", err.msg);
    if (rc)
        return -1;
    p->g[p->ng].set = set;
    return (int)p->ng++;
}

/* Publishes every group; answers now when nothing is left to wait for. */
static enum MHD_Result publish(put_call *p, int64_t now)
{
    sl_http_req *r = p->r;
    for (size_t g = 0; g < p->ng; g++) {
        put_group *pg = &p->g[g];
        pg->p = p;
        pg->evs = calloc(pg->n + 1, sizeof *pg->evs);
        pg->res = calloc(pg->n + 1, sizeof *pg->res);
        if (!pg->evs || !pg->res) {
            put_free(p);
            return sl__http_error(r, 500, "Internal", "out of memory");
        }
    }
    for (size_t i = 0; i < p->n; i++) {
        put_entry *e = &p->e[i];
        if (e->group >= 0)
            p->g[e->group].evs[e->at] = (sl_databus_event){
                .value = p->arena.data + e->off, .value_len = e->len, .lane = "", .ts_ms = now};
    }
    atomic_store(&p->pending, 1);
    atomic_fetch_add(&r->refs, 1); /* the Databus's, for the durable waits */
    pthread_mutex_lock(&r->lock);
    for (size_t g = 0; g < p->ng; g++) {
        put_group *pg = &p->g[g];
        if (!pg->n)
            continue;
        sl_error err = {0};
        atomic_fetch_add(&p->pending, 1);
        int prc = sl_databus_publish(r->h->bus, pg->set, pg->evs, pg->n, pg->res, put_done, pg,
                                     &err);
        if (prc == 1)
            continue; /* put_done follows */
        atomic_fetch_sub(&p->pending, 1);
        if (prc != 0) /* nothing of this bus was stored: its entries say why */
            for (size_t i = 0; i < p->n; i++)
                if (p->e[i].group == (int32_t)g)
                    refuse(&p->e[i], prc == SL_EFULL ? "ThrottlingException" : "InternalFailure",
                           "%s; the event was not stored, retry it",
                           err.msg[0] ? err.msg : sl_strerror(prc));
    }
    if (atomic_fetch_sub(&p->pending, 1) != 1) {
        r->suspended = true; /* the last put_done answers */
        MHD_suspend_connection(r->conn);
        pthread_mutex_unlock(&r->lock);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->lock);
    sl__http_req_release(r);
    sl_buf b = SL_BUF_INIT;
    put_answer(p, &b);
    put_free(p);
    const char *hdrs[] = {"x-amzn-RequestId", r->request_id, NULL};
    return sl__http_reply_hdrs(r, 200, &b, AWS_JSON, hdrs);
}

enum MHD_Result sl__aws_put_events(aws_call *c)
{
    sl_http_req *r = c->r;
    sl_json_tok root, entries, ent;
    sl_error err = {0};
    if (sl_json_validate(r->body.data ? (const char *)r->body.data : "{}",
                         r->body.len ? r->body.len : 2, 16, &root, &err) ||
        root.type != SL_JSON_OBJECT)
        return sl__aws_error(c, 400, "SerializationException",
                             "the request body is not a JSON object: %s", err.msg);
    /* One pass over the entries: tokens kept for the first 10 (and one
     * more to know there are too many). */
    size_t n = 0;
    sl_json_iter it;
    sl_json_tok ents[PUT_MAX_ENTRIES + 1];
    bool listed = sl_json_get(&root, "Entries", &entries) && entries.type == SL_JSON_ARRAY;
    if (listed) {
        sl_json_iter_init(&it, &entries);
        while (n <= PUT_MAX_ENTRIES && sl_json_iter_elem(&it, &ent))
            ents[n++] = ent;
    }
    if (!listed || n < 1 || n > PUT_MAX_ENTRIES)
        return sl__aws_error(c, 400, "ValidationException",
                             "1 validation error detected: Value at 'entries' failed to satisfy "
                             "constraint: Member must have length between 1 and %d (it has %zu)",
                             PUT_MAX_ENTRIES, n);
    put_call *p = calloc(1, sizeof *p);
    if (!p)
        return sl__aws_error(c, 500, "InternalException", "out of memory");
    p->r = r;
    p->n = n;
    int64_t now = sl_clock_now_ms();
    size_t size = 0;
    for (size_t i = 0; i < n; i++) {
        put_entry *e = &p->e[i];
        e->group = -2;
        build_entry(p, &ents[i], e, now, &size);
        if (e->group == -2 && !sl__aws_allowed(c, AWS_PUBLISH, e->bus)) {
            put_free(p);
            return sl__aws_error(c, 400, "AccessDeniedException",
                                 "credential %s may not put events on bus %s",
                                 c->cred ? c->cred->akid : "?", e->bus);
        }
    }
    /* EventBridge's size of a call: Time (14 bytes), Source, DetailType,
     * Detail and the Resources of every entry. */
    if (size > PUT_MAX_BYTES) {
        put_free(p);
        return sl__aws_error(c, 400, "ValidationException",
                             "Total size of the entries in the request is over the limit "
                             "(%zu bytes, at most %d).",
                             size, PUT_MAX_BYTES);
    }
    for (size_t i = 0; i < n; i++) {
        put_entry *e = &p->e[i];
        int g = e->group == -2 ? group_of(c, p, e) : -1;
        if (g < 0)
            continue;
        check_entry(c, p, e, p->g[g].set);
        if (e->group == -1)
            continue;
        e->group = g;
        e->at = p->g[g].n++;
    }
    return publish(p, now);
}
