/*
 * server/sources.c — the running sources and the host they write
 * through (see sources.h and core/bus/connector.h).
 *
 * Every source event takes the path of an HTTP ingest entry: parsed and
 * checked as a CloudEvent (core/bus/event.h), its lane applied, the set's
 * schema check, encoded as stored, then batched. A wrapped payload whose
 * attributes need no checking beyond what is cached (emit_fast) is written
 * in its stored form directly instead: building its text only to parse it
 * again cost the file source half its time. flush() publishes the
 * batch in one Databus call and waits for its acknowledgement; the waiter is
 * reference-counted so that a stopping source can walk away from a publish
 * whose fsync never comes (a failing disk) without the Databus writing into
 * freed memory.
 *
 * A source whose config has a parse function (source.file's parse =
 * function(line)) gets a rule VM of its own here, the config run again in
 * a sandbox: the source hands its lines over (SL_DATA_PARSE) and the host
 * runs the function, because running config functions is the host's job,
 * never a connector's (connectors do not use rules/).
 */
#include "server/sources.h"

#include "connectors/source_file.h"
#include "connectors/source_kafka.h"
#include "rules/rule.h"
#include "connectors/source_webhook.h"

#include "core/base/base64.h"
#include "core/base/clock.h"
#include "core/bus/connector.h"
#include "core/base/lane_name.h"
#include "core/bus/event.h"
#include "core/base/json.h"
#include "core/bus/lanes.h"
#include "core/base/buf.h"
#include "core/base/metrics.h"
#include "core/base/slog.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* One event of the batch: its stored form and key in the arena. */
typedef struct pending {
    size_t off, len;
    size_t key_off, key_len; /* key_len SIZE_MAX: none */
    char lane[SL_EVENT_LANE_MAX + 1];
} pending;

/* A durable publish being waited for; freed by whoever lets go last. */
typedef struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int status;
    _Atomic int refs;
} waiter;

/* An attribute value last seen (by pointer and content) with its JSON text,
 * so that a source passing the same type and source strings for every event
 * has them checked and escaped once. */
typedef struct attr_cache {
    const char *ptr;
    sl_buf raw, json; /* json: "" when the value is not a plain attribute */
} attr_cache;

typedef struct src {
    sl_sources *owner;
    const sl_source_config *cfg;
    const sl_source_ops *ops; /* NULL for webhooks */
    void *impl;
    sl_webhook_source *webhook;
    sl_source_host host;
    sl_set *set;
    char state_dir[4096];
    const char *dflt_type, *dflt_source;
    /* the batch (one thread at a time, by contract) */
    pending *v;
    size_t n, cap;
    sl_buf arena;
    sl_buf wrap; /* emit_data's CloudEvent */
    sl_event ev;
    const sl_set_decl *decl; /* the set in the source's config (its schemas) */
    bool schemas;            /* the set has schemas: every event takes the checked path */
    attr_cache type_cache, source_cache;
    /* parse = function(line): its VM (NULL: none), used by the source's
     * thread only (emit is one thread at a time), and what it returned */
    sl_rule_vm *vm;
    sl_buf parsed, with_id;
    int64_t time_ms; /* the last "time" formatted, and its text */
    char time_text[SL_TIME_RFC3339_MAX];
    size_t time_len;
    /* counters */
    _Atomic uint64_t events, bytes, refused, batches, full_waits;
    /* the log limiter */
    pthread_mutex_t log_lock;
    int64_t log_sec;
    uint64_t log_dropped;
    /* the state last reported for a source that does not say when it began
     * (log_lock): since when it has been so */
    const char *state_seen;
    int64_t state_since_ms;
} src;

struct sl_sources {
    sl_sources_options opts;
    src **v;
    size_t n;
    _Atomic bool stopping;
    pthread_mutex_t lock; /* with cond: host->wait() */
    pthread_cond_t cond;
};

/* The states of sources that do not report their own (src_state()). */
static const char st_running[] = "running", st_failing[] = "failing", st_stopped[] = "stopped";

/* ---- the host ---------------------------------------------------------------- */

static void host_log(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void host_log(void *ctx, const char *fmt, ...)
{
    src *s = ctx;
    int64_t sec = sl_clock_mono_ns() / 1000000000;
    pthread_mutex_lock(&s->log_lock);
    if (sec == s->log_sec) {
        s->log_dropped++;
        pthread_mutex_unlock(&s->log_lock);
        return;
    }
    uint64_t dropped = s->log_dropped;
    s->log_sec = sec;
    s->log_dropped = 0;
    pthread_mutex_unlock(&s->log_lock);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (dropped)
        sl_slog(SL_SLOG_WARN, "sources",
                "source %s: %s (%" PRIu64 " more messages in the last second)", s->cfg->name, msg,
                dropped);
    else
        sl_slog(SL_SLOG_WARN, "sources", "source %s: %s", s->cfg->name, msg);
}

static bool host_stopping(void *ctx)
{
    src *s = ctx;
    return atomic_load(&s->owner->stopping);
}

static bool host_wait(void *ctx, int64_t ms)
{
    src *s = ctx;
    sl_sources *o = s->owner;
    struct timespec ts = sl_clock_mono_deadline(ms);
    pthread_mutex_lock(&o->lock);
    while (!atomic_load(&o->stopping) && pthread_cond_timedwait(&o->cond, &o->lock, &ts) == 0)
        ;
    pthread_mutex_unlock(&o->lock);
    return atomic_load(&o->stopping);
}

static const char *host_option(void *ctx, const char *name)
{
    src *s = ctx;
    size_t nl = strlen(name);
    for (size_t i = 0; i < s->cfg->noptions; i++) {
        const char *line = s->cfg->options[i];
        if (strncmp(line, name, nl) == 0 && line[nl] == '=')
            return line + nl + 1;
    }
    return NULL;
}

static size_t host_pending(void *ctx, size_t *bytes)
{
    src *s = ctx;
    if (bytes)
        *bytes = s->arena.len;
    return s->n;
}

static void host_refused(void *ctx, const char *code, const char *why)
{
    src *s = ctx;
    atomic_fetch_add_explicit(&s->refused, 1, memory_order_relaxed);
    host_log(s, "event refused (%s): %s", code ? code : "InvalidEvent", why ? why : "");
}

/* A refused event: counted, logged (rate-limited), error returned. */
static int refuse(src *s, sl_event_status st, sl_error *err, const char *msg)
{
    host_refused(s, sl_event_status_name(st), msg);
    return sl_error_set(err, SL_EINVAL, "%s: %s", sl_event_status_name(st), msg);
}

/* Room for one more event in the batch: 0, or SL_ENOMEM. */
static int grow_batch(src *s)
{
    return SL_GROW(s->v, s->cap, 256);
}

static int host_emit_event(void *ctx, const char *json, size_t len, const char *lane, sl_error *err)
{
    src *s = ctx;
    /* A source gives its events ids that a re-read repeats (a Kafka
     * record's coordinates, a file line's position: docs/sources.md), so an
     * event without one is refused like an HTTP ingest entry, unless the set
     * generates ids (a UUIDv7, different on every read). */
    sl_event_limits lim = {.max_bytes = s->set->cfg.max_event_bytes,
                           .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT,
                           .generate_ids = s->set->cfg.generate_ids};
    sl_error e = {0};
    sl_event_status st = sl_event_parse(json, len, &lim, &s->ev, &e);
    if (st == SL_EVENT_OK)
        st = sl_event_apply_lane(&s->ev, lane ? lane : s->cfg->lane, &e);
    /* The schemas of the source's own config: during a reload the router's
     * may still be the old one. */
    if (st == SL_EVENT_OK && s->decl && sl_config_check_event(s->decl, &s->ev, &e))
        st = SL_EVENT_SCHEMA_VIOLATION;
    if (st != SL_EVENT_OK)
        return refuse(s, st, err, e.msg[0] ? e.msg : sl_event_status_name(st));
    if (s->n == s->cap && grow_batch(s))
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    pending *p = &s->v[s->n];
    size_t mark = s->arena.len;
    p->off = mark;
    if (sl_event_encode(&s->ev, &(sl_event_fill){.now_ms = sl_clock_now_ms()}, &s->arena))
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    p->len = s->arena.len - mark;
    if (p->len > s->set->cfg.max_event_bytes) {
        s->arena.len = mark;
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the event takes %zu bytes stored, over the set's max_event of %u", p->len,
                 s->set->cfg.max_event_bytes);
        return refuse(s, SL_EVENT_TOO_LARGE, err, msg);
    }
    /* The lane last: admitted (a new one registered) only for an event
     * otherwise fit to store. */
    if (s->owner->opts.lanes &&
        (st = sl_lanes_admit(s->owner->opts.lanes, s->ev.lane, &e)) != SL_EVENT_OK) {
        s->arena.len = mark;
        return refuse(s, st, err, e.msg);
    }
    p->key_len = SIZE_MAX;
    if (s->ev.key) {
        p->key_off = s->arena.len;
        p->key_len = s->ev.key_len;
        if (sl_buf_append(&s->arena, s->ev.key, s->ev.key_len)) {
            s->arena.len = mark;
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        }
    }
    memcpy(p->lane, s->ev.lane, sizeof p->lane);
    s->n++;
    return 0;
}

/* Appends "name":"value" (value JSON-escaped) to b. */
static int put_attr(sl_buf *b, const char *name, const char *v, size_t len)
{
    return sl_buf_append(b, ",\"", 2) || sl_buf_append(b, name, strlen(name)) ||
           sl_buf_append(b, "\":", 2) || sl_json_put_string(b, v, len);
}

/* Whether s[0..len) is a string attribute value the CloudEvents String type
 * allows: non-empty UTF-8 without controls (U+0000–U+001F, U+007F–U+009F) or
 * noncharacters. Values that fail take the checked path, which refuses
 * them with a message. */
static bool attr_ok(const char *s, size_t len)
{
    if (!len || !sl_json_utf8_valid(s, len))
        return false;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len; i++) {
        if (u[i] < 0x20 || u[i] == 0x7f)
            return false;
        if (u[i] == 0xc2 && i + 1 < len && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
            return false;
        if (u[i] == 0xef && i + 2 < len &&
            ((u[i + 1] == 0xb7 && u[i + 2] >= 0x90 && u[i + 2] <= 0xaf) ||
             (u[i + 1] == 0xbf && u[i + 2] >= 0xbe)))
            return false; /* U+FDD0–U+FDEF, U+FFFE, U+FFFF */
        if (u[i] >= 0xf0 && i + 3 < len && (u[i + 1] & 0x0f) == 0x0f && u[i + 2] == 0xbf &&
            u[i + 3] >= 0xbe)
            return false; /* U+nFFFE, U+nFFFF */
    }
    return true;
}

/* The JSON text of attribute value v (cached), or NULL when it must take the
 * checked path. */
static const sl_buf *attr_json(attr_cache *c, const char *v)
{
    size_t len = strlen(v);
    if (c->ptr != v || c->raw.len != len || memcmp(c->raw.data, v, len) != 0) {
        c->ptr = v;
        c->raw.len = c->json.len = 0;
        if (sl_buf_append(&c->raw, v, len) ||
            (attr_ok(v, len) && sl_json_put_string(&c->json, v, len)))
            c->raw.len = c->json.len = 0, c->ptr = NULL;
    }
    return c->json.len ? &c->json : NULL;
}

/* The stored form of a wrapped payload written straight into the batch,
 * without building an event text and parsing it again: what encode would
 * store for the same attributes (compact, id and time present). Returns 1
 * when the payload needs the checked path instead, else 0 or an error. */
static int emit_fast(src *s, const char *d, size_t len, const sl_source_meta *m, bool json,
                     bool text, const char *type, const char *source, const char *ct, sl_error *err)
{
    const char *lane = m->lane ? m->lane : s->cfg->lane ? s->cfg->lane : "";
    const sl_buf *tj = attr_json(&s->type_cache, type);
    const sl_buf *sj = attr_json(&s->source_cache, source);
    if (s->schemas || m->subject || (!json && !text) || !tj || !sj ||
        (m->id && !attr_ok(m->id, m->id_len)) || (m->key && !attr_ok(m->key, m->key_len)) ||
        (m->content_type && !attr_ok(m->content_type, strlen(m->content_type))) ||
        (*lane && !sl_lane_valid(lane, strlen(lane))))
        return 1;
    if (s->n == s->cap && grow_batch(s))
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    int64_t now = sl_clock_now_ms();
    int64_t t = m->time_ms ? m->time_ms : now;
    if (t != s->time_ms || !s->time_len) {
        s->time_ms = t;
        s->time_len = sl_time_format_rfc3339(t, s->time_text);
        if (!s->time_len)
            return 1; /* outside years 0-9999: the checked path says so */
    }
    char id[37];
    if (!m->id)
        sl_event_uuid7(now, id);
    sl_buf *a = &s->arena;
    size_t mark = a->len;
    int rc = sl_buf_append(a, "{\"specversion\":\"1.0\",\"id\":", 26) ||
             sl_json_put_string(a, m->id ? m->id : id, m->id ? m->id_len : 36) ||
             sl_buf_append(a, ",\"source\":", 10) || sl_buf_append(a, sj->data, sj->len) ||
             sl_buf_append(a, ",\"type\":", 8) || sl_buf_append(a, tj->data, tj->len) ||
             sl_buf_append(a, ",\"datacontenttype\":", 19) ||
             sl_json_put_string(a, ct, strlen(ct)) || sl_buf_append(a, ",\"time\":\"", 9) ||
             sl_buf_append(a, s->time_text, s->time_len) || sl_buf_append(a, "\"", 1);
    if (!rc && m->key)
        rc =
            sl_buf_append(a, ",\"partitionkey\":", 16) || sl_json_put_string(a, m->key, m->key_len);
    if (!rc && *lane)
        rc = sl_buf_append(a, ",\"lane\":\"", 9) || sl_buf_append(a, lane, strlen(lane)) ||
             sl_buf_append(a, "\"", 1);
    if (!rc)
        rc = sl_buf_append(a, ",\"data\":", 8) ||
             (json ? sl_json_compact(d, len, a) : sl_json_put_string(a, d, len)) ||
             sl_buf_append(a, "}", 1);
    if (rc) {
        a->len = mark;
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    pending *p = &s->v[s->n];
    p->off = mark;
    p->len = a->len - mark;
    if (p->len > s->set->cfg.max_event_bytes) {
        a->len = mark;
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the event takes %zu bytes stored, over the set's max_event of %u", p->len,
                 s->set->cfg.max_event_bytes);
        return refuse(s, SL_EVENT_TOO_LARGE, err, msg);
    }
    if (s->owner->opts.lanes) { /* last, as in host_emit_event() */
        sl_error e = {0};
        sl_event_status st = sl_lanes_admit(s->owner->opts.lanes, lane, &e);
        if (st != SL_EVENT_OK) {
            a->len = mark;
            return refuse(s, st, err, e.msg);
        }
    }
    p->key_len = SIZE_MAX;
    if (m->key) {
        p->key_off = a->len;
        p->key_len = m->key_len;
        if (sl_buf_append(a, m->key, m->key_len)) {
            a->len = mark;
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        }
    }
    snprintf(p->lane, sizeof p->lane, "%s", lane);
    s->n++;
    return 0;
}

static int emit_parsed(src *s, const char *line, size_t len, const sl_source_meta *m,
                       sl_error *err);

static int host_emit_data(void *ctx, const void *data, size_t len, const sl_source_meta *meta,
                          sl_error *err)
{
    src *s = ctx;
    static const sl_source_meta none = {0};
    const sl_source_meta *m = meta ? meta : &none;
    const char *d = data ? data : "";
    if (m->data == SL_DATA_PARSE)
        return emit_parsed(s, d, len, m, err);
    /* JSON is checked here even when the source says it is (SL_DATA_JSON):
     * a plugin's or a Lua function's JSON must meet the limits every reader
     * of the set applies (depth, surrogates), or it would be stored and
     * refused later. It sits one level inside the event. JSON that fails
     * is kept as text rather than lost. */
    bool json = m->data != SL_DATA_TEXT && len &&
                sl_json_validate(d, len, SL_EVENT_MAX_DEPTH_DEFAULT - 1, NULL, NULL) == 0;
    bool text = !json && sl_json_utf8_valid(d, len);
    const char *type = m->type ? m->type : s->cfg->type ? s->cfg->type : s->dflt_type;
    const char *source = m->source ? m->source : s->cfg->source ? s->cfg->source : s->dflt_source;
    const char *ct = m->content_type ? m->content_type
                     : json          ? "application/json"
                     : text          ? "text/plain"
                                     : "application/octet-stream";
    int fast = emit_fast(s, d, len, m, json, text, type, source, ct, err);
    if (fast != 1)
        return fast;
    /* The checked path: build the event's text and take it like any other. */
    sl_buf *b = &s->wrap;
    b->len = 0;
    char id[37];
    if (!m->id)
        sl_event_uuid7(sl_clock_now_ms(), id);
    int rc = sl_buf_append(b, "{\"specversion\":\"1.0\"", 20) ||
             put_attr(b, "id", m->id ? m->id : id, m->id ? m->id_len : 36) ||
             put_attr(b, "source", source, strlen(source)) ||
             put_attr(b, "type", type, strlen(type)) ||
             put_attr(b, "datacontenttype", ct, strlen(ct));
    if (!rc && m->time_ms) {
        char t[SL_TIME_RFC3339_MAX];
        size_t tl = sl_time_format_rfc3339(m->time_ms, t);
        rc = put_attr(b, "time", t, tl);
    }
    if (!rc && m->subject)
        rc = put_attr(b, "subject", m->subject, strlen(m->subject));
    if (!rc && m->key)
        rc = put_attr(b, "partitionkey", m->key, m->key_len);
    if (!rc && json)
        rc = sl_buf_append(b, ",\"data\":", 8) || sl_buf_append(b, d, len);
    else if (!rc && text)
        rc = sl_buf_append(b, ",\"data\":", 8) || sl_json_put_string(b, d, len);
    else if (!rc)
        rc = sl_buf_append(b, ",\"data_base64\":", 15) ||
             sl_base64_append(b, d, len, SL_BASE64_QUOTED);
    if (!rc)
        rc = sl_buf_append(b, "}", 1);
    if (rc)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    return host_emit_event(s, (const char *)b->data, b->len, m->lane, err);
}

/* emit_data() of a line for the source's parse function: runs it and adds
 * what it returned with the line's attributes (m). */
static int emit_parsed(src *s, const char *line, size_t len, const sl_source_meta *m, sl_error *err)
{
    if (!s->vm)
        return sl_error_set(err, SL_EPARSE, "source %s has no parse function", s->cfg->name);
    sl_rule_parsed kind;
    sl_error e = {0};
    s->parsed.len = 0;
    if (sl_rule_vm_parse(s->vm, s->cfg->index, line, len, &s->parsed, &kind, &e))
        return sl_error_set(err, SL_EPARSE, "%s", e.msg);
    sl_source_meta as = *m;
    const char *o = (const char *)s->parsed.data;
    size_t n = s->parsed.len;
    int rc;
    switch (kind) {
    case SL_PARSED_SKIP:
        rc = SL_SOURCE_DROPPED;
        break;
    case SL_PARSED_TEXT:
        as.data = SL_DATA_TEXT;
        rc = host_emit_data(s, o ? o : "", n, &as, err);
        break;
    case SL_PARSED_DATA:
        as.data = SL_DATA_JSON;
        rc = host_emit_data(s, o, n, &as, err);
        break;
    case SL_PARSED_EVENT:
        /* Its own id, else the line's (a re-read repeats it). */
        if (m->id && sl_event_add_id(&o, &n, NULL, m->id, m->id_len, &s->with_id))
            rc = sl_error_set(err, SL_ENOMEM, "out of memory");
        else
            rc = host_emit_event(s, o, n, m->lane, err);
        break;
    default:
        abort();
    }
    if (s->parsed.cap > (4u << 20))
        sl_buf_free(&s->parsed);
    if (s->with_id.cap > (4u << 20))
        sl_buf_free(&s->with_id);
    return rc;
}

static void waiter_release(waiter *w)
{
    if (atomic_fetch_sub(&w->refs, 1) == 1) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w);
    }
}

static void durable_done(void *ctx, int status)
{
    waiter *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->done = true;
    w->status = status;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    waiter_release(w);
}

/* Waits for a durable publish; SL_ESHUTDOWN when the source stops first.
 * SL_ENOSPC (the Databus dropped unwritten events on a full disk) is passed
 * through so publish_range backs off and republishes the same batch: the
 * source must keep it, not treat a full disk as the end of the server. */
static int wait_durable(src *s, waiter *w, sl_error *err)
{
    pthread_mutex_lock(&w->lock);
    while (!w->done && !host_stopping(s)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
    }
    int rc = w->done ? w->status : SL_ESHUTDOWN;
    pthread_mutex_unlock(&w->lock);
    waiter_release(w);
    if (rc == SL_ENOSPC)
        return sl_error_set(err, SL_ENOSPC, "the disk is full; events not stored");
    return rc ? sl_error_set(err, SL_ESHUTDOWN,
                             "the server stopped before the batch was "
                             "acknowledged")
              : 0;
}

/* Publishes batch entries [from, to) until the Databus takes them. */
static int publish_range(src *s, size_t from, size_t to, sl_databus_event *evs,
                         sl_databus_result *res, sl_error *err)
{
    sl_sources *o = s->owner;
    size_t n = to - from;
    for (size_t i = 0; i < n; i++) {
        const pending *p = &s->v[from + i];
        evs[i] = (sl_databus_event){
            .value = s->arena.data + p->off,
            .value_len = p->len,
            .key = p->key_len == SIZE_MAX ? NULL : s->arena.data + p->key_off,
            .key_len = p->key_len == SIZE_MAX ? 0 : p->key_len,
            .lane = p->lane,
            .ts_ms = sl_clock_now_ms(),
        };
    }
    for (int64_t backoff = 5;;) {
        if (host_stopping(s))
            return sl_error_set(err, SL_ESHUTDOWN, "the server is stopping");
        waiter *w = calloc(1, sizeof *w);
        if (!w) {
            /* Never give up half a split batch: wait for memory instead. */
            if (host_wait(s, 100))
                return sl_error_set(err, SL_ESHUTDOWN, "the server is stopping");
            continue;
        }
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        atomic_init(&w->refs, 2);
        sl_error e = {0};
        int rc = sl_databus_publish(o->opts.bus, s->set, evs, n, res, durable_done, w, &e);
        if (rc == 1) {
            rc = wait_durable(s, w, &e);
            if (rc != SL_ENOSPC) {
                if (rc)
                    *err = e;
                return rc;
            }
            /* Some of these events may already be stored (a partition
             * writes a batch in several appends): republishing them all is
             * at-least-once, as documented for sources. */
        } else {
            atomic_store(&w->refs, 1);
            waiter_release(w);
        }
        if (rc == 0)
            return 0;
        if (rc == SL_ESHUTDOWN)
            return sl_error_set(err, SL_ESHUTDOWN, "the server is stopping");
        if (rc == SL_ETOOBIG && n > 1) {
            size_t half = n / 2;
            rc = publish_range(s, from, from + half, evs, res, err);
            return rc ? rc : publish_range(s, from + half, to, evs, res, err);
        }
        if (rc == SL_ETOOBIG) {
            /* One event larger than a whole buffer: it can never be taken. */
            atomic_fetch_add_explicit(&s->refused, 1, memory_order_relaxed);
            host_log(s, "event dropped: %s", e.msg);
            return 0;
        }
        /* Full buffers (back-pressure) or a failing disk: wait and retry,
         * the source reads nothing meanwhile. */
        if (rc == SL_EFULL) {
            /* Woken as soon as the writer frees room, not after a backoff:
             * a small buffer then costs a context switch per batch, not a
             * sleep. Bounded so that a stop is seen. */
            atomic_fetch_add_explicit(&s->full_waits, 1, memory_order_relaxed);
            sl_databus_wait_room(o->opts.bus, 100);
            continue;
        }
        host_log(s, "cannot store events yet (%s); retrying", e.msg);
        if (host_wait(s, backoff))
            return sl_error_set(err, SL_ESHUTDOWN, "the server is stopping");
        backoff = backoff * 2 > 500 ? 500 : backoff * 2;
    }
}

static int host_flush(void *ctx, sl_error *err)
{
    src *s = ctx;
    if (!s->n)
        return host_stopping(s) ? sl_error_set(err, SL_ESHUTDOWN, "the server is stopping") : 0;
    sl_databus_event *evs = calloc(s->n, sizeof *evs);
    sl_databus_result *res = calloc(s->n, sizeof *res);
    int rc = evs && res ? publish_range(s, 0, s->n, evs, res, err)
                        : sl_error_set(err, SL_ENOMEM, "out of memory");
    free(evs);
    free(res);
    if (rc == SL_ENOMEM)
        return rc; /* the batch is kept: the caller may retry */
    if (!rc) {
        atomic_fetch_add_explicit(&s->events, s->n, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->bytes, s->arena.len, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->batches, 1, memory_order_relaxed);
    }
    s->n = 0;
    s->arena.len = 0;
    return rc;
}

/* ---- lifecycle ---------------------------------------------------------------- */

static int mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

static void src_free(src *s)
{
    if (!s)
        return;
    sl_webhook_source_free(s->webhook);
    sl_buf_free(&s->type_cache.raw);
    sl_buf_free(&s->type_cache.json);
    sl_buf_free(&s->source_cache.raw);
    sl_buf_free(&s->source_cache.json);
    free(s->v);
    sl_buf_free(&s->arena);
    sl_buf_free(&s->wrap);
    sl_rule_vm_free(s->vm);
    sl_buf_free(&s->parsed);
    sl_buf_free(&s->with_id);
    pthread_mutex_destroy(&s->log_lock);
    free(s);
}

static const char *default_type(const sl_source_config *c)
{
    if (c->ops == &sl_source_file_ops)
        return "sluice.file.line";
    if (c->ops == &sl_source_kafka_ops)
        return "sluice.kafka.record";
    if (c->ops == &sl_source_webhook_ops)
        return "sluice.webhook";
    return "sluice.plugin";
}

/* The VM of the source's parse function, before its instance runs. */
static int open_parse(src *s, const sl_source_config *c, sl_error *err)
{
    sl_error e = {0};
    sl_ruleset rs;
    int rc;
    if (!c->owner)
        rc = sl_error_set(&e, SL_EINVAL, "source.%s: parse function without its config",
                          c->kind_name);
    else if (sl_config_ruleset(c->owner, &rs), !(rc = sl_rule_vm_new(&rs, &s->vm, &e)) &&
             !sl_rule_vm_has_parse(s->vm, c->index))
        rc = sl_error_set(&e, SL_EINVAL, "source.%s: its parse function was not found",
                          c->kind_name);
    if (rc)
        sl_error_set(err, rc, "source %s (line %d): %s", c->name, c->line, e.msg);
    return rc;
}

static int src_open(sl_sources *o, const sl_source_config *c, src **out, sl_error *err)
{
    src *s = calloc(1, sizeof *s);
    if (!s)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    pthread_mutex_init(&s->log_lock, NULL);
    s->owner = o;
    s->cfg = c;
    s->state_seen = st_running;
    s->state_since_ms = sl_clock_now_ms();
    s->arena = (sl_buf)SL_BUF_INIT;
    s->wrap = (sl_buf)SL_BUF_INIT;
    s->dflt_type = default_type(c);
    const char *path =
        c->ops == &sl_source_file_ops ? ((const sl_source_file_conf *)c->conf)->path : NULL;
    s->dflt_source = path ? path : c->kind_name;
    s->decl = sl_config_set(c->owner, c->set);
    s->schemas = s->decl && s->decl->nschemas;
    /* Declared (the config check requires a `set` block; the router defines
     * it first): looked up, never created here, never counted against
     * max_auto_sets. */
    int rc = sl_sets_get(o->opts.sets, c->set, false, &s->set, err);
    if (!rc && c->ops == &sl_source_webhook_ops) {
        rc = sl_webhook_source_new(c, &s->webhook, err);
    } else if (!rc) {
        s->ops = c->ops->open ? c->ops : NULL;
        snprintf(s->state_dir, sizeof s->state_dir, "%s/sources/%s", o->opts.data_dir, c->name);
        if (!s->ops)
            rc = sl_error_set(err, SL_EINVAL, "source.%s: no such connector", c->kind_name);
        else if (mkdirs(s->state_dir))
            rc = sl_error_set(err, SL_EIO, "source %s: cannot create %s: %s", c->name, s->state_dir,
                              strerror(errno));
    }
    /* source.file's parse = function(line): the host runs config functions. */
    if (!rc && s->ops && c->ops == &sl_source_file_ops &&
        ((const sl_source_file_conf *)c->conf)->parse == SL_PARSE_LUA)
        rc = open_parse(s, c, err);
    if (!rc && s->ops) {
        s->host = (sl_source_host){.abi_version = SL_CONNECTOR_ABI_VERSION,
                                   .ctx = s,
                                   .name = c->name,
                                   .state_dir = s->state_dir,
                                   .emit_event = host_emit_event,
                                   .emit_data = host_emit_data,
                                   .pending = host_pending,
                                   .flush = host_flush,
                                   .stopping = host_stopping,
                                   .wait = host_wait,
                                   .log = host_log,
                                   .option = host_option,
                                   .refused = host_refused};
        sl_error e = {0};
        if ((rc = s->ops->open(c, &s->host, &s->impl, &e)))
            sl_error_set(err, rc, "source %s (line %d): %s", c->name, c->line, e.msg);
    }
    if (rc) {
        src_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int sl_sources_start(const sl_sources_options *opts, sl_sources **out, sl_error *err)
{
    sl_sources *o = calloc(1, sizeof *o);
    size_t n = opts->cfg->nsources;
    if (!o || (n && !(o->v = calloc(n, sizeof *o->v)))) {
        free(o);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    o->opts = *opts;
    pthread_mutex_init(&o->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cond, &ca);
    pthread_condattr_destroy(&ca);
    for (size_t i = 0; i < n; i++) {
        int rc = src_open(o, &opts->cfg->sources[i], &o->v[i], err);
        if (rc) {
            sl_sources_free(o);
            return rc;
        }
        o->n++;
    }
    *out = o;
    return 0;
}

static src *find_webhook(sl_sources *o, const char *name)
{
    for (size_t i = 0; o && i < o->n; i++)
        if (o->v[i]->webhook && strcmp(o->v[i]->cfg->name, name) == 0)
            return o->v[i];
    return NULL;
}

sl_webhook_source *sl_sources_webhook(sl_sources *o, const char *name)
{
    src *s = find_webhook(o, name);
    return s ? s->webhook : NULL;
}

void sl_sources_webhook_stored(sl_sources *o, const char *name, const sl_webhook_result *res,
                               bool stored)
{
    src *s = find_webhook(o, name);
    if (!s)
        return;
    sl_webhook_source_stored(s->webhook, res, stored);
    if (stored) {
        atomic_fetch_add_explicit(&s->events, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->bytes, res->event_len, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->batches, 1, memory_order_relaxed);
    }
}

static bool src_health(src *s, char *msg, size_t cap)
{
    msg[0] = '\0';
    return !(s->ops && s->ops->health && s->ops->health(s->impl, msg, cap));
}

/* What the source is doing: source.kafka says ("joining", "running",
 * "failing", since when, why: connectors/source_kafka.h); every other one
 * is "running" while healthy (from its start), else "failing" (health's
 * message the reason), since the first time it was seen so; "stopped" once
 * halted. ok: its health, msg: health's message. */
static const char *src_state(src *s, bool ok, const char *msg, int64_t *since, char *why,
                             size_t cap)
{
    why[0] = '\0';
    if (s->ops && s->impl && s->ops == &sl_source_kafka_ops)
        return sl_source_kafka_state(s->impl, since, why, cap);
    const char *st = s->webhook || s->ops ? (ok ? st_running : st_failing) : st_stopped;
    if (!ok)
        snprintf(why, cap, "%s", msg);
    pthread_mutex_lock(&s->log_lock);
    if (s->state_seen != st) {
        s->state_seen = st;
        s->state_since_ms = sl_clock_now_ms();
    }
    *since = s->state_since_ms;
    pthread_mutex_unlock(&s->log_lock);
    return st;
}

int sl_sources_json(sl_sources *o, sl_buf *out)
{
    int rc = sl_buf_append(out, "{\"sources\":[", 12);
    for (size_t i = 0; !rc && o && i < o->n; i++) {
        src *s = o->v[i];
        char msg[256];
        bool ok = src_health(s, msg, sizeof msg);
        rc = sl_buf_printf(out, "%s{\"name\":", i ? "," : "") ||
             sl_json_put_string(out, s->cfg->name, strlen(s->cfg->name)) ||
             sl_buf_printf(out, ",\"kind\":\"%s\",\"set\":", s->cfg->kind_name) ||
             sl_json_put_string(out, s->cfg->set, strlen(s->cfg->set)) ||
             sl_buf_printf(
                 out,
                 ",\"events\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"refused\":%" PRIu64
                 ",\"batches\":%" PRIu64 ",\"backpressure_waits\":%" PRIu64 ",\"healthy\":%s",
                 atomic_load(&s->events), atomic_load(&s->bytes), atomic_load(&s->refused),
                 atomic_load(&s->batches), atomic_load(&s->full_waits), ok ? "true" : "false");
        if (!rc && !ok)
            rc =
                sl_buf_append(out, ",\"health\":", 10) || sl_json_put_string(out, msg, strlen(msg));
        char why[512], when[SL_TIME_RFC3339_MAX];
        int64_t since = 0;
        const char *st = src_state(s, ok, msg, &since, why, sizeof why);
        int64_t now = sl_clock_now_ms();
        size_t wl = since > 0 ? sl_time_format_rfc3339(since, when) : 0;
        if (!rc)
            rc = sl_buf_printf(out, ",\"state\":\"%s\"", st);
        if (!rc && wl)
            rc = sl_buf_printf(out, ",\"state_since\":\"%.*s\",\"state_seconds\":%" PRId64, (int)wl,
                               when, now > since ? (now - since) / 1000 : 0);
        if (!rc && why[0])
            rc = sl_buf_append(out, ",\"state_reason\":", 16) ||
                 sl_json_put_string(out, why, strlen(why));
        if (!rc)
            rc = sl_buf_append(out, "}", 1);
    }
    return rc ? rc : sl_buf_append(out, "]}\n", 3);
}

/* The series every source has, one family at a time. */
static int shared_metrics(sl_sources *o, sl_buf *out)
{
    static const struct {
        const char *name, *help;
        sl_metric_type type;
    } fam[] = {
        {"sluice_source_events_total", "Events the source stored.", SL_METRIC_COUNTER},
        {"sluice_source_bytes_total", "Bytes of the events the source stored.", SL_METRIC_COUNTER},
        {"sluice_source_refused_total", "Payloads refused (invalid, schema, lane, size).",
         SL_METRIC_COUNTER},
        {"sluice_source_backpressure_waits_total",
         "Publishes that found the set's buffers full and waited.", SL_METRIC_COUNTER},
        {"sluice_source_healthy", "1 when the source is healthy.", SL_METRIC_GAUGE},
    };
    int rc = 0;
    for (size_t f = 0; !rc && f < sizeof fam / sizeof *fam; f++) {
        rc = sl_metrics_family(out, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; !rc && i < o->n; i++) {
            src *s = o->v[i];
            char msg[256];
            uint64_t v = f == 0   ? atomic_load(&s->events)
                         : f == 1 ? atomic_load(&s->bytes)
                         : f == 2 ? atomic_load(&s->refused)
                         : f == 3 ? atomic_load(&s->full_waits)
                                  : (uint64_t)src_health(s, msg, sizeof msg);
            rc = sl_metrics_u64(out, fam[f].name, v, "source", s->cfg->name, "kind",
                                s->cfg->kind_name, NULL);
        }
    }
    return rc;
}

int sl_sources_metrics(sl_sources *o, sl_buf *out)
{
    if (!o || !o->n)
        return 0;
    int rc = shared_metrics(o, out);
    bool header = false;
    for (size_t i = 0; !rc && i < o->n; i++) {
        if (!o->v[i]->webhook)
            continue;
        if (!header)
            rc = sl_webhook_source_metrics_header(out);
        header = true;
        if (!rc)
            rc = sl_webhook_source_metrics(o->v[i]->webhook, out);
    }
    for (size_t i = 0; !rc && i < o->n; i++) {
        src *s = o->v[i];
        if (!s->ops || !s->ops->metrics)
            continue;
        /* Whole lines only: a source that filled the space (or says it
         * would have written more) is cut after its last complete line, so
         * the next source's lines never join a cut one. Each source writes
         * its own # HELP and # TYPE lines; sl_metrics_group (GET /metrics)
         * keeps one of each and puts the samples of all sources together. */
        size_t cap = 256 << 10;
        if ((rc = sl_buf_reserve(out, cap)))
            break;
        char *buf = (char *)out->data + out->len;
        size_t len = s->ops->metrics(s->impl, buf, cap);
        if (len >= cap)
            len = cap - 1;
        while (len && buf[len - 1] != '\n')
            len--;
        out->len += len;
    }
    return rc;
}

void sl_sources_stop(sl_sources *o)
{
    if (!o || atomic_load(&o->stopping))
        return;
    pthread_mutex_lock(&o->lock);
    atomic_store(&o->stopping, true);
    pthread_cond_broadcast(&o->cond);
    pthread_mutex_unlock(&o->lock);
    for (size_t i = 0; i < o->n; i++)
        if (o->v[i]->ops && o->v[i]->ops->stop)
            o->v[i]->ops->stop(o->v[i]->impl);
    for (size_t i = 0; i < o->n; i++)
        if (o->v[i]->ops) {
            o->v[i]->ops->close(o->v[i]->impl);
            o->v[i]->ops = NULL;
            o->v[i]->impl = NULL;
            /* Its thread is gone: nothing calls the parse function again. */
            sl_rule_vm_free(o->v[i]->vm);
            o->v[i]->vm = NULL;
        }
}

void sl_sources_free(sl_sources *o)
{
    if (!o)
        return;
    sl_sources_stop(o);
    for (size_t i = 0; i < o->n; i++)
        src_free(o->v[i]);
    free(o->v);
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->cond);
    free(o);
}
