/*
 * http/http_ingest.c — POST /v1/sets/{set}/events: the three
 * CloudEvents HTTP modes (structured, batched, binary) and NDJSON, per-entry
 * validation, one all-or-nothing Databus publish per request, and the
 * durable wait (suspended, answered from the Databus writer's callback).
 * sl__http_publish_json() runs one event built by another route (webhooks)
 * through the same path. A missing set is created only for a request with an
 * event about to be stored: the body is parsed against a stand-in with the
 * settings the new set would get, and the set made after (resolve_set(),
 * create_set()), so that junk never leaves a set behind.
 */
#include "http/http_internal.h"
#include "core/base/lane_name.h"
#include "core/bus/baggage.h"
#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/base/buf.h"

#include "core/base/slog.h"
#include "core/bus/databus.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One entry of the request: either an encoded event in the arena or an error. */
typedef struct entry {
    sl_event_status status;
    size_t off, len;         /* encoded event in the arena */
    size_t key_off, key_len; /* partition key in the arena; key_len SIZE_MAX = none */
    size_t msg_off;          /* error message in msgs (NUL-terminated) */
    char lane[SL_LANE_MAX + 1];
    int64_t ts;
} entry;

typedef struct ingest {
    sl_http_req *r;
    sl_set *set;      /* the set, or &proto while it does not exist yet */
    sl_set proto;     /* stand-in for a missing set: its name and the defaults */
    bool missing;     /* set is the stand-in: create_set() makes the real one */
    const char *lane; /* X-Sluice-Lane, or "" */
    sl_event_limits lim;
    int64_t now_ms;
    entry *v;
    size_t n, cap;
    sl_buf arena; /* encoded events and keys */
    sl_buf msgs;  /* error messages */
    /* sl__http_publish_json(): one event, answered {"id","set","partition",
     * "offset","ack"}; done is told the outcome. */
    bool single;
    sl_ack ack; /* what ?ack= asked for (buffer when absent); never less than the set's is used */
    sl__http_published_fn *done;
    void *done_ctx;
    sl_event ev; /* reused for every entry */
} ingest;

static entry *next_entry(ingest *in)
{
    if (in->n == in->cap && sl_grow(&in->v, &in->cap, sizeof *in->v, 64))
            return NULL;
    entry *e = &in->v[in->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void fail_entry(ingest *in, entry *e, sl_event_status st, const char *msg)
{
    e->status = st;
    e->msg_off = in->msgs.len;
    sl_buf_append(&in->msgs, msg, strlen(msg) + 1);
    atomic_fetch_add_explicit(&in->r->h->rejected[st], 1, memory_order_relaxed);
}

/* Parses, checks and encodes one event; the outcome is a new entry. */
static int add_event(ingest *in, const char *json, size_t len)
{
    entry *e = next_entry(in);
    if (!e)
        return SL_ENOMEM;
    sl_error err = {0};
    sl_event_status st = sl_event_parse(json, len, &in->lim, &in->ev, &err);
    if (st == SL_EVENT_OK)
        st = sl_event_apply_lane(&in->ev, in->lane, &err);
    if (st != SL_EVENT_OK) {
        fail_entry(in, e, st, err.msg[0] ? err.msg : sl_event_status_name(st));
        return 0;
    }
    e->off = in->arena.len;
    sl_event_fill fill = {.now_ms = in->now_ms};
    if (sl_event_encode(&in->ev, &fill, &in->arena))
        return SL_ENOMEM;
    e->len = in->arena.len - e->off;
    if (e->len > in->set->cfg.max_event_bytes) {
        in->arena.len = e->off;
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the event takes %zu bytes stored, over the set's limit of "
                 "%u",
                 e->len, in->set->cfg.max_event_bytes);
        fail_entry(in, e, SL_EVENT_TOO_LARGE, msg);
        return 0;
    }
    /* Schemas and the lane last: a lane is admitted (and a new one
     * registered) only for an event that is otherwise fit to store. */
    const sl_http_hooks *hk = &in->r->h->hooks;
    int vs = hk->validate ? hk->validate(hk->ctx, in->set, &in->ev, &err) : 0;
    if (vs) {
        in->arena.len = e->off;
        st = vs > 0 && vs < SL_EVENT_STATUS_COUNT ? (sl_event_status)vs : SL_EVENT_SCHEMA_VIOLATION;
        fail_entry(in, e, st, err.msg[0] ? err.msg : sl_event_status_name(st));
        return 0;
    }
    e->key_len = SIZE_MAX;
    if (in->ev.key) {
        e->key_off = in->arena.len;
        e->key_len = in->ev.key_len;
        if (sl_buf_append(&in->arena, in->ev.key, in->ev.key_len))
            return SL_ENOMEM;
    }
    memcpy(e->lane, in->ev.lane, sizeof e->lane);
    /* The record timestamp is when sluice received the event, not its own
     * time attribute: retention, the time index and from=TIME must not
     * depend on producers' clocks (Kafka's LogAppendTime). */
    e->ts = in->now_ms;
    e->status = SL_EVENT_OK;
    return 0;
}

/* ---- the set ------------------------------------------------------------------ */

/* Tells sl__http_publish_json()'s caller a refusal, once, before the answer
 * is queued (a sender that gets it and retries must find it recorded). */
static void tell_done(ingest *in, int status)
{
    if (in->done)
        in->done(in->done_ctx, status);
    in->done = NULL;
}

/* Finds set_name for in: the set, or (when it is missing and may be created
 * on first use) a stand-in with the defaults a new set gets, so the body can
 * be parsed and checked before anything is made. Answers the request and
 * returns false when it cannot go on. */
static bool resolve_set(ingest *in, const char *set_name, enum MHD_Result *ret)
{
    sl_http_req *r = in->r;
    sl_error err = {0};
    int rc = sl_sets_get(r->h->sets, set_name, false, &in->set, &err);
    if (rc == SL_ENOENT && sl_sets_auto_creates(r->h->sets)) {
        snprintf(in->proto.name, sizeof in->proto.name, "%s", set_name);
        in->proto.cfg = *sl_sets_defaults(r->h->sets);
        in->set = &in->proto;
        in->missing = true;
        rc = 0;
    }
    if (rc)
        tell_done(in, rc);
    if (rc == SL_EINVAL)
        *ret = sl__http_error(r, 400, "InvalidSetName", "%s", err.msg);
    else if (rc == SL_ENOENT)
        *ret = sl__http_error(r, 404, "NoSuchSet",
                              "%s (sets are not created on first use "
                              "here)",
                              err.msg);
    else if (rc)
        *ret = sl__http_error(r, 500, "Internal", "%s", err.msg);
    if (!rc) {
        in->lim.max_bytes = in->set->cfg.max_event_bytes;
        in->lim.max_depth = SL_EVENT_MAX_DEPTH_DEFAULT;
        in->lim.generate_ids = in->set->cfg.generate_ids;
    }
    return rc == 0;
}

/* Creates the missing set of in, charged to the request's client, now that
 * an entry is about to be stored. *again: the set exists with other settings
 * than the stand-in had (made meanwhile), so the body must be checked again.
 * Answers the request and returns false when it cannot be created (507
 * SetLimit over server.max_auto_sets). */
static bool create_set(ingest *in, bool *again, enum MHD_Result *ret)
{
    sl_http_req *r = in->r;
    char client[SL_SET_CLIENT_MAX + 1];
    sl__http_client_of(r, client, sizeof client);
    sl_set *set;
    sl_error err = {0};
    int rc = sl_sets_create_auto(r->h->sets, in->proto.name, client, &set, &err);
    *again = false;
    if (rc)
        tell_done(in, rc);
    if (rc == SL_ELIMIT)
        *ret =
            sl__http_error(r, 507, "SetLimit", "%s; nothing from this request was stored", err.msg);
    else if (rc == SL_ENOENT)
        *ret = sl__http_error(r, 404, "NoSuchSet", "%s", err.msg);
    else if (rc)
        *ret =
            sl__http_error(r, 500, "Internal", "%s; nothing from this request was stored", err.msg);
    if (rc)
        return false;
    *again = !sl_set_config_equal(&set->cfg, &in->proto.cfg);
    in->set = set;
    in->missing = false;
    in->lim.max_bytes = set->cfg.max_event_bytes;
    in->lim.generate_ids = set->cfg.generate_ids;
    return true;
}

static size_t accepted(const ingest *in)
{
    size_t ok = 0;
    for (size_t i = 0; i < in->n; i++)
        ok += in->v[i].status == SL_EVENT_OK;
    return ok;
}

/* The HTTP status of a request whose one event was refused: 413 for too
 * large, 422 for a well-formed event the configuration refuses (schema,
 * lanes), 500 for no memory, else 400. */
static unsigned refused_status(sl_event_status st)
{
    switch (st) {
    case SL_EVENT_TOO_LARGE:
        return 413;
    case SL_EVENT_SCHEMA_VIOLATION:
    case SL_EVENT_UNKNOWN_LANE:
    case SL_EVENT_LANE_DROPPED:
        return 422;
    case SL_EVENT_NO_MEMORY:
        return 500;
    default:
        return 400;
    }
}

/* Answers the refused entry e as the whole request's error (single-event
 * modes and webhooks). */
static enum MHD_Result refuse_single(ingest *in, const entry *e)
{
    tell_done(in, SL_EINVAL);
    return sl__http_error(in->r, refused_status(e->status), sl_event_status_name(e->status),
                          "%s; nothing was stored", (const char *)in->msgs.data + e->msg_off);
}

/* ---- body formats ----------------------------------------------------------- */

static int parse_ndjson(ingest *in, const char *p, size_t len)
{
    const char *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *s = p;
        while (s < le && (*s == ' ' || *s == '\t' || *s == '\r'))
            s++;
        if (s < le) {
            int rc = add_event(in, p, (size_t)(le - p));
            if (rc)
                return rc;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

static enum MHD_Result parse_batch(ingest *in, const char *p, size_t len, bool *ok)
{
    sl_json_tok arr, el;
    sl_error err = {0};
    *ok = false;
    if (sl_json_validate(p, len, in->lim.max_depth + 1, &arr, &err))
        return sl__http_error(in->r, 400, "InvalidJson", "the batch is not valid JSON: %s",
                              err.msg);
    if (arr.type != SL_JSON_ARRAY)
        return sl__http_error(in->r, 400, "InvalidBatch",
                              "a cloudevents-batch body must be a "
                              "JSON array, not %s",
                              sl_json_type_name(arr.type));
    sl_json_iter it;
    sl_json_iter_init(&it, &arr);
    while (sl_json_iter_elem(&it, &el))
        if (add_event(in, el.p, el.len))
            return sl__http_error(in->r, 500, "Internal", "out of memory");
    *ok = true;
    return MHD_YES;
}

typedef struct hdr_list {
    sl_event_header v[64];
    size_t n;
} hdr_list;

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    hdr_list *l = cls;
    if (l->n < sizeof l->v / sizeof *l->v && strncasecmp(key, "ce-", 3) == 0) {
        l->v[l->n].name = key;
        l->v[l->n].name_len = strlen(key);
        l->v[l->n].value = value ? value : "";
        l->v[l->n].value_len = value ? strlen(value) : 0;
        l->n++;
    }
    return MHD_YES;
}

static int parse_binary(ingest *in, const char *ctype)
{
    hdr_list hl = {.n = 0};
    MHD_get_connection_values(in->r->conn, MHD_HEADER_KIND, collect_header, &hl);
    sl_buf json = SL_BUF_INIT;
    sl_error err = {0};
    sl_event_status st = sl_event_from_binary(hl.v, hl.n, ctype, (const char *)in->r->body.data,
                                              in->r->body.len, &in->lim, &json, &err);
    int rc = 0;
    if (st == SL_EVENT_OK) {
        rc = add_event(in, (const char *)json.data, json.len);
    } else {
        entry *e = next_entry(in);
        if (!e)
            rc = SL_ENOMEM;
        else
            fail_entry(in, e, st, err.msg[0] ? err.msg : sl_event_status_name(st));
    }
    sl_buf_free(&json);
    return rc;
}

/* ---- publishing and answering ------------------------------------------------- */

/* Writes v in decimal at w; returns the end. */
static char *put_i64(char *w, int64_t v)
{
    char d[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        d[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *w++ = '-';
    while (n)
        *w++ = d[--n];
    return w;
}

/* The durability a publish of in gets: what it asked for, or the set's
 * when that is more. */
static const char *ack_used(const ingest *in)
{
    return in->ack == SL_ACK_DURABLE || in->set->cfg.ack == SL_ACK_DURABLE ? "durable" : "buffer";
}

/* How build_response() writes what the Databus said of each event. */
typedef enum resp_mode {
    RESP_OFFSETS, /* the offsets (a local set: known at once) */
    RESP_QUEUED,  /* a Kafka-backed buffer set: queued, no offset yet */
    RESP_SLOTS,   /* a Kafka-backed durable set: blanks that remote_answer() fills */
} resp_mode;

/* A blank of SLOT_W bytes in a response, filled later (JSON allows the
 * spaces that pad it). */
static void put_slot(sl_buf *b, sl_kafka_answer *ka)
{
    ka->slots[ka->nslots++] = b->len;
    if (sl_buf_reserve(b, SLOT_W) == 0) {
        memset(b->data + b->len, ' ', SLOT_W);
        b->len += SLOT_W;
    }
}

static void fill_slot(sl_buf *b, size_t at, const char *fmt, ...)
{
    char tmp[SLOT_W + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0 && n <= SLOT_W && at + SLOT_W <= b->len)
        memcpy(b->data + at, tmp, (size_t)n);
}

static void build_response(ingest *in, const sl_databus_result *res, sl_buf *b, resp_mode mode,
                           sl_kafka_answer *ka)
{
    if (in->single) { /* in->ev is the one event, its id a JSON string token */
        sl_buf_append(b, "{\"id\":", 6);
        sl_buf_append(b, in->ev.id.p, in->ev.id.len);
        sl_buf_append(b, ",\"set\":", 7);
        sl_json_put_string(b, in->set->name, strlen(in->set->name));
        sl_buf_printf(b, ",\"partition\":%d", (int)res[0].partition);
        if (mode == RESP_OFFSETS)
            sl_buf_printf(b, ",\"offset\":%" PRId64, res[0].offset);
        else if (mode == RESP_SLOTS) {
            sl_buf_append(b, ",", 1);
            put_slot(b, ka);
        }
        sl_buf_printf(b, ",\"ack\":\"%s\"}\n", ack_used(in));
        return;
    }
    size_t ok = 0;
    for (size_t i = 0; i < in->n; i++)
        ok += in->v[i].status == SL_EVENT_OK;
    if (mode == RESP_SLOTS) { /* a failed delivery moves events from one count to the other */
        sl_buf_append(b, "{", 1);
        ka->counts = b->len;
        sl_buf_printf(b, "%*s", 2 * SLOT_W, "");
        fill_slot(b, ka->counts, "\"accepted\":%zu,", ok);
        fill_slot(b, ka->counts + SLOT_W, "\"failed\":%zu,", in->n - ok);
        ka->accepted = ok;
        ka->failed = in->n - ok;
        sl_buf_printf(b, "\"ack\":\"%s\",\"results\":[", ack_used(in));
    } else {
        sl_buf_printf(b, "{\"accepted\":%zu,\"failed\":%zu,\"ack\":\"%s\",\"results\":[", ok,
                      in->n - ok, ack_used(in));
    }
    sl_buf_reserve(b, in->n * (mode == RESP_SLOTS ? 40 + SLOT_W : 40) + 64);
    for (size_t i = 0, k = 0; i < in->n; i++) {
        const entry *e = &in->v[i];
        if (i)
            sl_buf_append(b, ",", 1);
        if (e->status == SL_EVENT_OK && mode == RESP_OFFSETS) { /* the hot path: no printf */
            char tmp[64], *w = tmp;
            memcpy(w, "{\"partition\":", 13);
            w = put_i64(w + 13, res[k].partition);
            memcpy(w, ",\"offset\":", 10);
            w = put_i64(w + 10, res[k].offset);
            *w++ = '}';
            sl_buf_append(b, tmp, (size_t)(w - tmp));
            k++;
            continue;
        }
        if (e->status == SL_EVENT_OK) {
            sl_buf_printf(b, "{\"partition\":%d", (int)res[k].partition);
            if (mode == RESP_SLOTS) {
                sl_buf_append(b, ",", 1);
                ka->index[ka->nslots] = i;
                put_slot(b, ka);
            }
            sl_buf_append(b, "}", 1);
            k++;
            continue;
        }
        const char *msg = (const char *)in->msgs.data + e->msg_off;
        sl_buf_printf(b, "{\"error\":\"%s\",\"message\":", sl_event_status_name(e->status));
        if (sl_json_put_string(b, msg, strlen(msg)))
            sl_buf_append(b, "\"\"", 2);
        sl_buf_printf(b, ",\"index\":%zu}", i);
    }
    sl_buf_append(b, "]}\n", 3);
}

/* A Kafka-backed durable publish has its delivery reports (from the
 * Databus's thread, inside done): the blanks of the prepared answer get
 * each event's offset, or its failure. Returns the status of the wait: 0,
 * or the failure when no event was stored (then the answer is an error). */
static int remote_answer(sl_http_req *r)
{
    sl_kafka_answer *ka = r->kafka;
    sl_error e = {0};
    size_t failed = sl_databus_offsets(ka->set, ka->res, ka->n, &e);
    for (size_t k = 0; k < ka->n && k < ka->nslots; k++) {
        if (ka->res[k].status == 0 && ka->slots[k] + SLOT_W <= r->resp.len) {
            char *w = (char *)r->resp.data + ka->slots[k]; /* the hot path: no printf */
            memcpy(w, "\"offset\":", 9);
            put_i64(w + 9, ka->res[k].offset);
        } else if (ka->res[k].status == 0)
            fill_slot(&r->resp, ka->slots[k], "\"offset\":%" PRId64, ka->res[k].offset);
        else if (ka->single)
            fill_slot(&r->resp, ka->slots[k], "\"error\":\"NotAcknowledged\"");
        else
            fill_slot(&r->resp, ka->slots[k], "\"error\":\"NotAcknowledged\",\"index\":%zu",
                      ka->index[k]);
    }
    if (!ka->single && failed) {
        fill_slot(&r->resp, ka->counts, "\"accepted\":%zu,", ka->accepted - failed);
        fill_slot(&r->resp, ka->counts + SLOT_W, "\"failed\":%zu,", ka->failed + failed);
    }
    if (failed) {
        sl_slog(SL_SLOG_WARN, "http", "set %s: %zu of %zu events not acknowledged by Kafka: %s",
                ka->set->name, failed, ka->n, e.msg[0] ? e.msg : sl_strerror(e.code));
        snprintf(ka->why, sizeof ka->why, "%s", e.msg[0] ? e.msg : sl_strerror(e.code));
    }
    return failed == ka->n ? (e.code ? e.code : SL_EIO) : 0;
}

/* The Databus made a durable publish safe (or gave up): answer it. */
static void durable_done(void *ctx, int status)
{
    sl_http_req *r = ctx;
    /* Before the answer can go out: a sender that gets it and sends again
     * must find the outcome recorded (webhook dedupe). */
    sl__http_published_fn *published = r->published;
    r->published = NULL; /* its ctx is freed by the call */
    if (published)
        published(r->published_ctx, status);
    pthread_mutex_lock(&r->lock);
    if (!status && r->kafka)
        status = remote_answer(r);
    r->wait_status = status;
    sl__http_req_answered(r);
}

static void fill_event(const ingest *in, const entry *e, sl_databus_event *ev)
{
    ev->value = in->arena.data + e->off;
    ev->value_len = e->len;
    ev->key = e->key_len == SIZE_MAX ? NULL : in->arena.data + e->key_off;
    ev->key_len = e->key_len == SIZE_MAX ? 0 : e->key_len;
    ev->lane = e->lane;
    ev->ts_ms = e->ts;
}

/* For sorting the accepted entries of a request by lane. */
typedef struct by_lane {
    const entry *e;
    size_t rank; /* its place among the accepted entries */
} by_lane;

static int cmp_lane(const void *a, const void *b)
{
    const by_lane *x = a, *y = b;
    int c = strcmp(x->e->lane, y->e->lane);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank); /* stable */
}

/* Fills evs with the accepted entries, grouped by lane when they are of
 * several (rank[k]: the place of evs[k] among them; NULL for a single
 * entry); *n gets their count. Returns 0 or SL_ENOMEM. */
static int group_by_lane(const ingest *in, sl_databus_event *evs, size_t *rank, size_t *n)
{
    size_t k = 0;
    bool mixed = false;
    const char *first = NULL;
    for (size_t i = 0; i < in->n; i++) {
        const entry *e = &in->v[i];
        if (e->status != SL_EVENT_OK)
            continue;
        if (!first)
            first = e->lane;
        mixed |= strcmp(first, e->lane) != 0;
        if (rank)
            rank[k] = k;
        fill_event(in, e, &evs[k++]);
    }
    *n = k;
    if (!mixed)
        return 0; /* the usual request: one lane, input order */
    by_lane *v = malloc(k * sizeof *v);
    if (!v)
        return SL_ENOMEM;
    for (size_t i = 0, r = 0; i < in->n; i++)
        if (in->v[i].status == SL_EVENT_OK) {
            v[r].e = &in->v[i];
            v[r].rank = r;
            r++;
        }
    qsort(v, k, sizeof *v, cmp_lane);
    for (size_t r = 0; r < k; r++) {
        fill_event(in, v[r].e, &evs[r]);
        rank[r] = v[r].rank;
    }
    free(v);
    return 0;
}

static sl_kafka_answer *kafka_answer_new(sl_set *set, const sl_databus_result *res, size_t n,
                                         bool single)
{
    sl_kafka_answer *ka = calloc(1, sizeof *ka);
    if (!ka || !(ka->res = malloc(n * sizeof *ka->res)) ||
        !(ka->slots = malloc(n * sizeof *ka->slots)) ||
        !(ka->index = malloc(n * sizeof *ka->index))) {
        sl__http_kafka_answer_free(ka);
        return NULL;
    }
    memcpy(ka->res, res, n * sizeof *res);
    ka->set = set;
    ka->n = n;
    ka->single = single;
    return ka;
}

/* Puts the results of the grouped events back in input order (tmp: room
 * for n results). */
static void unpermute(sl_databus_result *res, const size_t *rank, sl_databus_result *tmp, size_t n)
{
    if (!rank)
        return;
    for (size_t k = 0; k < n; k++)
        tmp[rank[k]] = res[k];
    memcpy(res, tmp, n * sizeof *tmp);
}

static enum MHD_Result publish(ingest *in)
{
    sl_http_req *r = in->r;
    size_t ok = 0;
    for (size_t i = 0; i < in->n; i++)
        ok += in->v[i].status == SL_EVENT_OK;
    sl_databus_event *evs = ok ? calloc(ok, sizeof *evs) : NULL;
    sl_databus_result *res = ok ? calloc(ok, sizeof *res) : NULL;
    if (ok && (!evs || !res)) {
        free(evs);
        free(res);
        if (in->done)
            in->done(in->done_ctx, SL_ENOMEM);
        return sl__http_error(r, 500, "Internal", "out of memory");
    }
    /* The Databus writes lane-homogeneous batches: a request mixing lanes
     * event by event would be cut into batches of a few events. Its events
     * are handed over grouped by lane (stable: each lane keeps its order;
     * lanes are independent streams), and the results put back in input
     * order. rank[k]: the place among the accepted entries of evs[k]. */
    size_t *rank = ok > 1 ? malloc(ok * sizeof *rank) : NULL;
    sl_databus_result *tmp = ok > 1 ? malloc(ok * sizeof *tmp) : NULL;
    size_t k = 0;
    if ((ok > 1 && (!rank || !tmp)) || group_by_lane(in, evs, rank, &k)) {
        free(rank);
        free(tmp);
        free(evs);
        free(res);
        if (in->done)
            in->done(in->done_ctx, SL_ENOMEM);
        return sl__http_error(r, 500, "Internal", "out of memory");
    }
    int rc = 0;
    sl_error err = {0};
    enum MHD_Result ret = MHD_YES;
    if (ok) {
        atomic_fetch_add(&r->refs, 1); /* the Databus's, for a durable wait */
        r->published = in->done;
        r->published_ctx = in->done_ctx;
        pthread_mutex_lock(&r->lock);
        /* A Kafka-backed durable set: offsets come with the delivery
         * reports; the answer is prepared with blanks for them. */
        bool remote = sl_set_remote(in->set);
        sl_kafka_answer *ka = NULL;
        if (remote && ack_used(in)[0] == 'd' && !(ka = kafka_answer_new(in->set, res, ok, in->single)))
            rc = SL_ENOMEM;
        if (ka) {
            res = NULL; /* ka's now, freed with the request */
            r->kafka = ka;
            rc = sl_databus_publish_entries(r->h->bus, in->set, in->ack, evs, ok, ka->res,
                                            durable_done, r, &err);
        } else if (!rc) {
            rc = sl_databus_publish_ack(r->h->bus, in->set, in->ack, evs, ok, res, durable_done, r,
                                        &err);
        }
        if (rc == 0 || rc == 1)
            unpermute(ka ? ka->res : res, rank, tmp, ok);
        if (rc == 1) {
            /* Answer prepared now; sent when the fsync covering it is done. */
            build_response(in, ka ? ka->res : res, &r->resp, ka ? RESP_SLOTS : RESP_OFFSETS, ka);
            r->resp_status = 200;
            r->suspended = true;
            MHD_suspend_connection(r->conn);
        }
        pthread_mutex_unlock(&r->lock);
        if (rc != 1) {
            r->published = NULL;
            sl__http_req_release(r);
        }
    }
    if (rc != 1 && in->done) /* durable: durable_done() tells it */
        in->done(in->done_ctx, rc);
    if (rc == 0) {
        sl_buf b = SL_BUF_INIT;
        build_response(in, res, &b, sl_set_remote(in->set) ? RESP_QUEUED : RESP_OFFSETS, NULL);
        ret = sl__http_reply(r, 200, &b, "application/json", 0);
    } else if (rc == SL_EFULL) {
        ret = sl__http_error(r, 503, "Backpressure",
                             "%s; nothing from this request was "
                             "stored, retry after a second",
                             err.msg);
    } else if (rc == SL_ETOOBIG) {
        ret = sl__http_error(r, 413, "RequestTooLarge",
                             "%s; nothing from this request was "
                             "stored",
                             err.msg);
    } else if (rc == SL_ESHUTDOWN) {
        ret = sl__http_error(r, 503, "ShuttingDown",
                             "the server is shutting down; nothing "
                             "from this request was stored");
    } else if (rc == SL_ENOSPC) {
        ret = sl__http_error(r, 507, "InsufficientStorage",
                             "%s; nothing from this request "
                             "was stored",
                             err.msg);
    } else if (rc < 0) {
        ret = sl__http_error(r, 500, "WriteFailed",
                             "%s; nothing from this request was "
                             "stored",
                             err.msg[0] ? err.msg : sl_strerror(rc));
    }
    free(evs);
    free(res);
    free(rank);
    free(tmp);
    return ret;
}

/* How many events a body holds, counted before any is parsed: NDJSON's
 * non-blank lines, a batch's top-level array elements (by a scan of
 * brackets, strings and commas: much cheaper than validating, which
 * parse_batch() does; a malformed body gets its 400 there), 1 otherwise. */
static size_t count_events(int batch, int ndjson, const char *p, size_t len)
{
    size_t n = 0;
    if (ndjson) {
        const char *end = p + len;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *le = nl ? nl : end;
            while (p < le && (*p == ' ' || *p == '\t' || *p == '\r'))
                p++;
            n += p < le;
            p = nl ? nl + 1 : end;
        }
        return n;
    }
    if (!batch)
        return 1;
    int depth = 0;
    bool in_str = false, any = false;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        switch (c) {
        case '"':
            in_str = true;
            any |= depth == 1;
            break;
        case '[':
        case '{':
            any |= depth == 1;
            depth++;
            break;
        case ']':
        case '}':
            depth--;
            break;
        case ',':
            n += depth == 1;
            break;
        case ' ':
        case '\t':
        case '\r':
        case '\n':
            break;
        default:
            any |= depth == 1;
        }
    }
    return any ? n + 1 : 0;
}

/* The media type of Content-Type, without parameters, lower-cased. */
static void media_type(const char *ct, char *out, size_t size)
{
    size_t i = 0;
    for (; ct && ct[i] && ct[i] != ';' && i + 1 < size; i++)
        out[i] = (char)(ct[i] >= 'A' && ct[i] <= 'Z' ? ct[i] + 32 : ct[i]);
    while (i && (out[i - 1] == ' ' || out[i - 1] == '\t'))
        i--;
    out[i] = '\0';
}

/* ?ack=buffer|durable into *ack (SL_ACK_BUFFER when absent: the set's
 * default then decides); false for another value. */
static bool ack_param(sl_http_req *r, sl_ack *ack, const char **bad)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "ack");
    *ack = SL_ACK_BUFFER;
    *bad = v;
    if (!v || strcmp(v, "buffer") == 0)
        return true;
    if (strcmp(v, "durable") != 0)
        return false;
    *ack = SL_ACK_DURABLE;
    return true;
}

enum MHD_Result sl__http_ingest(sl_http_req *r, const char *set_name)
{
    sl_http *h = r->h;
    sl_ack ack;
    const char *bad_ack;
    if (!ack_param(r, &ack, &bad_ack))
        return sl__http_error(r, 400, "InvalidParameter",
                              "ack \"%.64s\" is not buffer or durable; nothing was stored",
                              bad_ack);
    const char *lane = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Sluice-Lane");
    if (!lane)
        lane = "";
    if (!sl_lane_valid(lane, strlen(lane)))
        return sl__http_error(r, 400, "InvalidLane",
                              "X-Sluice-Lane \"%.40s\" is not a lane "
                              "name ([a-z0-9-]{1,32})",
                              lane);
    /* Then the `lane` member of a W3C baggage header (what tracing
     * propagates through services that know nothing of sluice). */
    char bag_lane[SL_LANE_MAX + 1];
    const char *bag = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "baggage");
    if (bag) {
        sl_error berr = {0};
        size_t bl;
        int brc = sl_baggage_get(bag, strlen(bag), "lane", bag_lane, sizeof bag_lane, &bl, &berr);
        if (brc == SL_EINVAL)
            return sl__http_error(r, 400, "InvalidHeader", "baggage: %s", berr.msg);
        if (brc == SL_ETOOBIG || (!brc && !sl_lane_valid(bag_lane, bl)))
            return sl__http_error(r, 400, "InvalidLane",
                                  "baggage lane \"%.40s\" is not a lane name ([a-z0-9-]{1,32})",
                                  brc ? "(too long)" : bag_lane);
        if (!brc && *lane && strcmp(lane, bag_lane) != 0)
            return sl__http_error(r, 400, "LaneConflict",
                                  "X-Sluice-Lane says \"%s\" but the baggage header says "
                                  "lane=\"%s\"",
                                  lane, bag_lane);
        if (!brc)
            lane = bag_lane;
    }
    char ct[128];
    media_type(MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type"), ct,
               sizeof ct);
    bool binary = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "ce-specversion");
    enum { STRUCTURED, BATCH, NDJSON, BINARY } mode;
    if (strcmp(ct, "application/cloudevents+json") == 0)
        mode = STRUCTURED;
    else if (strcmp(ct, "application/cloudevents-batch+json") == 0)
        mode = BATCH;
    else if (strcmp(ct, "application/x-ndjson") == 0 || strcmp(ct, "application/ndjson") == 0 ||
             strcmp(ct, "application/jsonl") == 0)
        mode = NDJSON;
    else if (binary)
        mode = BINARY;
    else
        return sl__http_error(r, 415, "UnsupportedMediaType",
                              "Content-Type \"%s\" is not "
                              "application/cloudevents+json, application/cloudevents-batch+json"
                              " or application/x-ndjson, and there is no ce-specversion header "
                              "for binary mode",
                              ct[0] ? ct : "(none)");
    /* The request's size in events, then the client's rate: nothing is
     * parsed (or stored) for a request refused here. */
    size_t count = count_events(mode == BATCH, mode == NDJSON,
                                r->body.data ? (const char *)r->body.data : "", r->body.len);
    if (count > h->opts.max_batch)
        return sl__http_error(r, 413, "TooManyEvents",
                              "the request holds %zu events, over the limit of %llu per request "
                              "(server.max_batch); nothing was stored, send smaller batches",
                              count, (unsigned long long)h->opts.max_batch);
    enum MHD_Result limited;
    if (!sl__http_rate_admit(r, count, &limited))
        return limited;
    ingest *in = calloc(1, sizeof *in);
    if (!in)
        return sl__http_error(r, 500, "Internal", "out of memory");
    in->r = r;
    in->lane = lane;
    in->ack = ack;
    in->now_ms = sl_clock_now_ms();
    const char *body = (const char *)r->body.data;
    size_t len = r->body.len;
    enum MHD_Result ret = MHD_YES;
    bool go = resolve_set(in, set_name, &ret), again = true;
    int rc = 0;
    /* Twice at most: again when the set, made just now, has other settings
     * than the stand-in the body was checked against. */
    for (int pass = 0; go && again && pass < 2; pass++) {
        in->n = in->arena.len = in->msgs.len = 0;
        sl_error err = {0};
        switch (mode) {
        case STRUCTURED: {
            sl_json_tok t;
            if (sl_json_validate(body ? body : "", len, SL_JSON_DEPTH_LIMIT, &t, &err)) {
                ret = sl__http_error(r, 400, "InvalidJson", "the body is not valid JSON: %s",
                                     err.msg);
                go = false;
            } else {
                rc = add_event(in, body, len);
            }
            break;
        }
        case BATCH:
            ret = parse_batch(in, body ? body : "", len, &go);
            break;
        case NDJSON:
            rc = parse_ndjson(in, body ? body : "", len);
            break;
        case BINARY:
            /* datacontenttype is the Content-Type as sent, parameters included. */
            rc = parse_binary(
                in, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type"));
            break;
        }
        again = false;
        if (go && rc) {
            ret = sl__http_error(r, 500, "Internal", "out of memory");
            go = false;
        } else if (go && in->missing && accepted(in) > 0) {
            go = create_set(in, &again, &ret);
        }
    }
    if (go && (mode == STRUCTURED || mode == BINARY) && in->n == 1 &&
        in->v[0].status != SL_EVENT_OK)
        ret = refuse_single(in, &in->v[0]); /* the one event is the request */
    else if (go)
        ret = publish(in);
    sl_buf_free(&in->arena);
    sl_buf_free(&in->msgs);
    free(in->v);
    free(in);
    return ret;
}

enum MHD_Result sl__http_publish_json(sl_http_req *r, const char *set_name, const char *json,
                                      size_t len, sl__http_published_fn *done, void *done_ctx)
{
    ingest *in = calloc(1, sizeof *in);
    if (!in) {
        if (done)
            done(done_ctx, SL_ENOMEM);
        return sl__http_error(r, 500, "Internal", "out of memory");
    }
    in->r = r;
    in->lane = "";
    in->now_ms = sl_clock_now_ms();
    in->single = true;
    in->done = done;
    in->done_ctx = done_ctx;
    enum MHD_Result ret = MHD_YES;
    /* Every refusal below tells done (tell_done()) before it answers. */
    bool go = resolve_set(in, set_name, &ret), again = true;
    for (int pass = 0; go && again && pass < 2; pass++) {
        in->n = in->arena.len = in->msgs.len = 0;
        again = false;
        if (add_event(in, json, len)) {
            tell_done(in, SL_ENOMEM);
            ret = sl__http_error(r, 500, "Internal", "out of memory");
            go = false;
        } else if (in->v[0].status != SL_EVENT_OK) {
            ret = refuse_single(in, &in->v[0]);
            go = false;
        } else if (in->missing) {
            go = create_set(in, &again, &ret);
        }
    }
    if (go)
        ret = publish(in); /* tells done */
    sl_buf_free(&in->arena);
    sl_buf_free(&in->msgs);
    free(in->v);
    free(in);
    return ret;
}
