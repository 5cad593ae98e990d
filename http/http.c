/*
 * http/http.c — the HTTP server: libmicrohttpd set-up, request
 * bodies, routing, responses, and the suspend/resume machinery that lets
 * durable publishes and long-polls wait without holding a thread.
 */
#include "http/http_internal.h"
#include "core/base/clock.h"
#include "core/base/buf.h"
#include "core/base/slog.h"
#include "core/base/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---- request ids ---------------------------------------------------------- */

/* Takes the client's X-Request-Id when it is 1..SL_HTTP_REQUEST_ID_MAX of
 * [A-Za-z0-9._:-] (safe in headers, JSON and log lines without escaping),
 * else makes up 24 hex digits. Called once per request, before routing. */
static void req_identify(sl_http_req *r, const char *method, const char *url)
{
    r->method = method;
    r->url = url;
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = v ? strlen(v) : 0;
    bool ok = n > 0 && n <= SL_HTTP_REQUEST_ID_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char c = v[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == ':' || c == '-';
    }
    if (ok) {
        memcpy(r->request_id, v, n + 1);
        return;
    }
    unsigned char rnd[12];
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
        /* No entropy yet (early boot): unique within the process is enough. */
        static _Atomic uint64_t seq;
        uint64_t a = (uint64_t)sl_clock_now_ms(), b = atomic_fetch_add(&seq, 1);
        memcpy(rnd, &a, 6);
        memcpy(rnd + 6, &b, 6);
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(r->request_id + 2 * i, 3, "%02x", rnd[i]);
}

/* Adds "request_id" to a JSON error object ({"error":…}) that lacks it. */
static void add_request_id(sl_http_req *r, sl_buf *body)
{
    static const char head[] = "{\"error\":";
    if (!r->request_id[0] || body->len < sizeof head || memcmp(body->data, head, sizeof head - 1))
        return;
    size_t end = body->len;
    while (end && (body->data[end - 1] == '\n' || body->data[end - 1] == ' '))
        end--;
    if (!end || body->data[end - 1] != '}' || memmem(body->data, body->len, "\"request_id\"", 12))
        return;
    char ins[SL_HTTP_REQUEST_ID_MAX + 24];
    int n = snprintf(ins, sizeof ins, ",\"request_id\":\"%s\"", r->request_id);
    if (sl_buf_reserve(body, (size_t)n))
        return; /* out of memory: the header still carries it */
    memmove(body->data + end - 1 + n, body->data + end - 1, body->len - (end - 1));
    memcpy(body->data + end - 1, ins, (size_t)n);
    body->len += (size_t)n;
}

/* 5xx answers are logged at most once a second per (status, error code):
 * under overload every rejected request is a 503, and one log write per
 * request from the HTTP threads would add load where there is none to
 * spare. The first answer of a key in a second is logged; the others are
 * counted, and the next line of that key (or sl_http_stop()) says how many
 * were left out. The table is process-wide (one server per process).
 * Codes are a small fixed set; should more keys than slots appear, the last
 * slot is shared. */
#define LOG_KEYS 32
typedef struct log_key {
    unsigned status;
    char code[40];
    int64_t last_ns; /* when a line of this key was last written; 0 never */
    uint64_t suppressed;
} log_key;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static log_key g_log_keys[LOG_KEYS];
static size_t g_nlog_keys;

/* Expected overload answers (503: Backpressure, TooManyConnections, the
 * per-IP limit, ShuttingDown) are warnings: the server protects itself as
 * designed. Other 5xx (500 Internal/WriteFailed, 507 …) are errors. */
static sl_slog_level level_of(unsigned status)
{
    return status == 503 ? SL_SLOG_WARN : status >= 500 ? SL_SLOG_ERROR : SL_SLOG_DEBUG;
}

/* The error code of a body {"error":"CODE",…} into code ("" if none). */
static void body_code(const sl_buf *body, char *code, size_t cap)
{
    static const char head[] = "{\"error\":\"";
    size_t i = sizeof head - 1, n = 0;
    code[0] = '\0';
    if (!body->data || body->len < i || memcmp(body->data, head, i))
        return;
    while (i < body->len && body->data[i] != '"' && n + 1 < cap)
        code[n++] = (char)body->data[i++];
    code[n] = '\0';
}

/* Whether a 5xx line of (status, code) may be written now; *more gets how
 * many of that key were left out since its last line. */
static bool log_admit(unsigned status, const char *code, uint64_t *more)
{
    int64_t now = sl_clock_mono_ns();
    pthread_mutex_lock(&g_log_lock);
    log_key *k = NULL;
    for (size_t i = 0; i < g_nlog_keys && !k; i++)
        if (g_log_keys[i].status == status && strcmp(g_log_keys[i].code, code) == 0)
            k = &g_log_keys[i];
    if (!k && g_nlog_keys < LOG_KEYS) {
        k = &g_log_keys[g_nlog_keys++];
        k->status = status;
        snprintf(k->code, sizeof k->code, "%s", code);
    }
    if (!k)
        k = &g_log_keys[LOG_KEYS - 1];
    bool ok = !k->last_ns || now - k->last_ns >= 1000000000;
    *more = 0;
    if (ok) {
        *more = k->suppressed;
        k->suppressed = 0;
        k->last_ns = now;
    } else {
        k->suppressed++;
    }
    pthread_mutex_unlock(&g_log_lock);
    return ok;
}

static void log_suppressed(unsigned status, const char *code, uint64_t more)
{
    sl_slog_field kv[] = {SL_SLOG_I("status", status), SL_SLOG_S("code", code),
                          SL_SLOG_I("suppressed", (int64_t)more)};
    sl_slog_kv(level_of(status), "http", kv, 3,
               "%" PRIu64 " more %u %s answers since the last message", more, status, code);
}

/* Writes the counts of 5xx lines still left out (at shutdown). */
static void log_flush_suppressed(void)
{
    pthread_mutex_lock(&g_log_lock);
    for (size_t i = 0; i < g_nlog_keys; i++)
        if (g_log_keys[i].suppressed) {
            log_suppressed(g_log_keys[i].status, g_log_keys[i].code, g_log_keys[i].suppressed);
            g_log_keys[i].suppressed = 0;
        }
    pthread_mutex_unlock(&g_log_lock);
}

/* Logs 5xx answers (with the error body, which says why; rate-limited, see
 * above), and at debug every answer. */
static void log_reply(sl_http_req *r, unsigned status, const sl_buf *body)
{
    sl_slog_level lvl = level_of(status);
    if (!sl_slog_enabled(lvl))
        return;
    char code[40] = "";
    uint64_t more = 0;
    if (status >= 500) {
        body_code(body, code, sizeof code);
        if (!log_admit(status, code, &more))
            return;
        if (more)
            log_suppressed(status, code, more);
    }
    int64_t us = (sl_clock_mono_ns() - r->start_ns) / 1000;
    sl_slog_field kv[] = {SL_SLOG_S("method", r->method), SL_SLOG_S("path", r->url),
                          SL_SLOG_I("status", status), SL_SLOG_I("duration_us", us),
                          SL_SLOG_S("request_id", r->request_id)};
    int len = body->len > 512 ? 512 : (int)body->len;
    while (len && body->data[len - 1] == '\n')
        len--;
    if (status >= 500)
        sl_slog_kv(lvl, "http", kv, sizeof kv / sizeof *kv, "%s %s answered %u: %.*s",
                   r->method ? r->method : "?", r->url ? r->url : "?", status, len,
                   body->data ? (const char *)body->data : "");
    else
        sl_slog_kv(lvl, "http", kv, sizeof kv / sizeof *kv, "%s %s %u", r->method ? r->method : "?",
                   r->url ? r->url : "?", status);
}

/* ---- responses ------------------------------------------------------------ */

static enum MHD_Result queue(sl_http_req *r, unsigned status, struct MHD_Response *resp,
                             const char *content_type, const char *const *hdrs);

enum MHD_Result sl__http_reply(sl_http_req *r, unsigned status, sl_buf *body,
                               const char *content_type, unsigned retry_after)
{
    char v[16];
    snprintf(v, sizeof v, "%u", retry_after);
    const char *hdrs[] = {MHD_HTTP_HEADER_RETRY_AFTER, v, NULL};
    return sl__http_reply_hdrs(r, status, body, content_type, retry_after ? hdrs : NULL);
}

enum MHD_Result sl__http_reply_hdrs(sl_http_req *r, unsigned status, sl_buf *body,
                                    const char *content_type, const char *const *hdrs)
{
    if (status >= 400)
        add_request_id(r, body);
    log_reply(r, status, body);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        body->len, body->data ? body->data : (void *)"",
        body->data ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        sl_buf_free(body);
        return MHD_NO;
    }
    body->data = NULL;
    body->len = body->cap = 0;
    return queue(r, status, resp, content_type, hdrs);
}

enum MHD_Result sl__http_reply_stream(sl_http_req *r, unsigned status, struct MHD_Response *resp,
                                      const char *content_type)
{
    sl_buf none = SL_BUF_INIT;
    log_reply(r, status, &none);
    return queue(r, status, resp, content_type, NULL);
}

/* Adds the headers every answer carries, queues resp and drops our
 * reference to it. */
static enum MHD_Result queue(sl_http_req *r, unsigned status, struct MHD_Response *resp,
                             const char *content_type, const char *const *hdrs)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (r->close)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (r->request_id[0])
        MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    for (size_t i = 0; hdrs && hdrs[i] && hdrs[i + 1]; i += 2)
        MHD_add_response_header(resp, hdrs[i], hdrs[i + 1]);
    enum MHD_Result ok = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    if (status < SL_HTTP_STATUS_MAX)
        atomic_fetch_add_explicit(&r->h->status[status], 1, memory_order_relaxed);
    return ok;
}

/* Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), 0 if
 * it is not one (overlongs, surrogates, past U+10FFFF; stops at the NUL). */
static size_t utf8_len(const unsigned char *p)
{
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    size_t n = c >= 0xC2 && c <= 0xDF   ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (!n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* Appends s as the inside of a JSON string: quotes and backslashes
 * escaped, control characters (C0, DEL and C1) as \u00XX, well-formed
 * UTF-8 kept, and every byte that is not UTF-8 (a %ff in a URL decodes to
 * one) as U+FFFD, so the body is always valid JSON. */
void sl__http_put_json_text(sl_buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned char c = *p;
        size_t n = c >= 0x80 ? utf8_len(p) : 1;
        if (c == '"' || c == '\\')
            sl_buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            sl_buf_printf(b, "\\u%04x", c);
        else if (c < 0x80)
            sl_buf_append(b, p, 1);
        else if (!n) {
            sl_buf_append(b, "\\ufffd", 6);
            n = 1;
        } else if (n == 2 && c == 0xC2 && p[1] <= 0x9F) /* C1 control */
            sl_buf_printf(b, "\\u%04x", p[1]);
        else
            sl_buf_append(b, p, n);
        p += n;
    }
}

enum MHD_Result sl__http_error(sl_http_req *r, unsigned status, const char *code, const char *fmt,
                               ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Messages carry user input (set names, attribute names): escape them. */
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"error\":\"%s\",\"message\":\"", code);
    sl__http_put_json_text(&b, msg);
    sl_buf_append(&b, "\"}\n", 3);
    return sl__http_reply(r, status, &b, "application/json", status == 503 ? 1 : 0);
}

/* ---- requests ------------------------------------------------------------- */

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

void sl__http_req_release(sl_http_req *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    atomic_fetch_sub(&r->h->body_bytes, r->body.len);
    if (r->open_body)
        atomic_fetch_sub(&r->h->open_body_bytes, r->body.len);
    sl_buf_free(&r->body);
    sl_buf_free(&r->resp);
    sl__http_kafka_answer_free(r->kafka);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void sl__http_kafka_answer_free(sl_kafka_answer *ka)
{
    if (!ka)
        return;
    free(ka->res);
    free(ka->slots);
    free(ka->index);
    free(ka);
}

void sl__http_req_answered(sl_http_req *r)
{
    r->ready = true;
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    sl__http_req_release(r);
}

/* Counts open connections. libmicrohttpd's own limit is set above ours and
 * would close sockets silently; below it, requests past our limit get an
 * answer (503) instead. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    sl_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&h->conns, 1);
    else
        atomic_fetch_sub(&h->conns, 1);
    /* and per client address (http_auth.c) */
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        sl__http_conn_opened(h, c, socket_context);
    else
        sl__http_conn_closed(h, socket_context);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    sl_http *h = cls;
    sl_http_req *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    atomic_fetch_sub(&h->active, 1);
    sl__http_req_release(r);
}

/* Percent-decodes URLs and query arguments in place like libmicrohttpd's
 * default, except that "%2F" stays encoded: a set name may not contain '/',
 * and decoding it first would turn "/v1/sets/a%2Fb/events" into another
 * path instead of an invalid name. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *p = s; *p; p++) {
        int hi, lo;
        if (p[0] == '%' && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0 &&
            (hi << 4 | lo) != '/' && (hi << 4 | lo) != 0) {
            *w++ = (char)(hi << 4 | lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* Splits "/v1/sets/NAME/events" style paths: returns the number of segments
 * (up to max) with pointers into buf (a copy of url). */
static int split_path(char *buf, char **seg, int max)
{
    int n = 0;
    char *save = NULL; /* strtok_r: handlers run on several threads at once */
    for (char *p = strtok_r(buf, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (n == max)
            return max + 1;
        seg[n++] = p;
    }
    return n;
}

/* ---- routing ------------------------------------------------------------------ */

/* The handlers with one signature: name is the path's {name} segment ("" when
 * the path has none; the rest after "/ui" for the console). */
typedef enum MHD_Result route_fn(sl_http_req *r, const char *name);

static enum MHD_Result r_healthz(sl_http_req *r, const char *name)
{
    (void)name;
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"status\":\"%s\"}\n", r->h->stopping ? "stopping" : "ok");
    return sl__http_reply(r, r->h->stopping ? 503 : 200, &b, "application/json", 0);
}

#define NO_NAME(fn)                                                                                \
    static enum MHD_Result r_##fn(sl_http_req *r, const char *name)                                \
    {                                                                                              \
        (void)name;                                                                                \
        return sl__http_##fn(r);                                                                   \
    }
NO_NAME(metrics)
NO_NAME(rules)
NO_NAME(sources)
NO_NAME(groups)
NO_NAME(schedules)
NO_NAME(lanes)
NO_NAME(pattern_test)
NO_NAME(list_sets)
#undef NO_NAME

/* The routes. A path is matched segment by segment: "{x}" is one name
 * (handed to the handler), "{x...}" (last) the rest of the URL. params:
 * the query parameters the route accepts; params_refused() refuses any
 * other with the headers (400 UnknownParameter), so that a typo (?maxx=5)
 * or a parameter of another endpoint is not silently ignored. Keep
 * docs/http-api.md's Endpoints table in step (test_docs_api.sh checks). */
#define P(...) ((const char *const[]){__VA_ARGS__, NULL})
static const struct route {
    const char *method; /* "GET" also serves HEAD */
    const char *path;
    route_fn *fn;
    const char *const *params;
} routes[] = {
    {"GET", "/ui/{file...}", sl__http_ui, NULL},
    {"GET", "/healthz", r_healthz, NULL},
    {"GET", "/metrics", r_metrics, NULL},
    {"GET", "/v1/rules", r_rules, NULL},
    {"POST", "/v1/rules/{rule}/replay", sl__http_replay, P("from", "to")},
    {"GET", "/v1/rules/{rule}/replays", sl__http_replays, NULL},
    {"POST", "/v1/patterns/test", r_pattern_test, NULL},
    {"GET", "/v1/sources", r_sources, NULL},
    {"GET", "/v1/lanes", r_lanes, NULL},
    {"GET", "/v1/groups", r_groups, NULL},
    {"GET", "/v1/schedules", r_schedules, NULL},
    {"DELETE", "/v1/lanes/{lane}", sl__http_lane_drop, NULL},
    /* the body was collected (up to max_request_bytes) like ingest's */
    {"POST", "/v1/webhooks/{name}", sl__http_webhook, NULL},
    {"GET", "/v1/sets", r_list_sets, NULL},
    {"GET", "/v1/sets/{set}", sl__http_show_set, NULL},
    {"POST", "/v1/sets/{set}/redrive", sl__http_redrive, P("to", "max")},
    {"POST", "/v1/sets/{set}/events", sl__http_ingest, P("ack")},
    {"GET", "/v1/sets/{set}/events", sl__http_read,
     P("partition", "offset", "from", "max", "wait_ms", "lane")},
};
#undef P

/* Whether the path's segments seg[0..n) match pattern; *name gets the
 * segment a "{x}" stands for. "{x...}" needs url to begin with what
 * precedes it ("//ui" is not "/ui"), and gives the rest of url from there
 * ("" or "/…"). */
static bool path_match(const char *pattern, const char *url, char *const *seg, int n,
                       const char **name)
{
    int i = 0;
    for (const char *p = pattern + 1; *p; i++) {
        size_t l = strcspn(p, "/");
        bool var = l >= 2 && p[0] == '{' && p[l - 1] == '}';
        if (var && l > 5 && memcmp(p + l - 4, "...}", 4) == 0) {
            size_t pre = (size_t)(p - pattern) - 1;
            if (strncmp(url, pattern, pre) != 0)
                return false;
            *name = url + pre;
            return true;
        }
        if (i >= n)
            return false;
        if (var)
            *name = seg[i];
        else if (strlen(seg[i]) != l || memcmp(seg[i], p, l) != 0)
            return false;
        p += l + (p[l] == '/');
    }
    return i == n;
}

/* The query string against the route's accepted parameters. */
typedef struct param_check {
    const char *const *accepted;
    unsigned seen; /* bit i: accepted[i] was given */
    const char *twice, *no_value;
    sl_buf unknown; /* "\"a\", \"b\"" */
    size_t nunknown;
} param_check;

static enum MHD_Result check_param(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    param_check *pc = cls;
    if (!key)
        return MHD_YES;
    for (unsigned i = 0; pc->accepted && pc->accepted[i]; i++) {
        if (strcmp(key, pc->accepted[i]) != 0)
            continue;
        if (pc->seen & 1u << i)
            pc->twice = pc->twice ? pc->twice : pc->accepted[i];
        if (!value)
            pc->no_value = pc->no_value ? pc->no_value : pc->accepted[i];
        pc->seen |= 1u << i;
        return MHD_YES;
    }
    /* "a=1&&b=2", a trailing "&" or "?" alone: an empty piece carries
     * nothing; a name that is empty but has a value ("=5") is unknown. */
    if (!*key && !value)
        return MHD_YES;
    if (pc->nunknown++ < 8) {
        char name[68];
        snprintf(name, sizeof name, "%.64s%s", key, strlen(key) > 64 ? "..." : "");
        if (pc->unknown.len)
            sl_buf_append(&pc->unknown, ", ", 2);
        sl_buf_append(&pc->unknown, "\"", 1);
        sl_buf_append(&pc->unknown, name, strlen(name));
        sl_buf_append(&pc->unknown, "\"", 1);
    }
    return MHD_YES;
}

/* Answers 400 when the query string holds a parameter rt does not take, a
 * parameter twice (which one would count is a guess) or one without a
 * value ("?max"); returns false then, with *ret. */
static bool params_ok(sl_http_req *r, const struct route *rt, enum MHD_Result *ret)
{
    param_check pc = {.accepted = rt->params, .unknown = SL_BUF_INIT};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, check_param, &pc);
    if (!pc.nunknown && !pc.twice && !pc.no_value)
        return true;
    char takes[160] = "no query parameters";
    for (size_t i = 0, w = 0; rt->params && rt->params[i] && w < sizeof takes; i++)
        w += (size_t)snprintf(takes + w, sizeof takes - w, "%s%s", i ? ", " : "only ",
                              rt->params[i]);
    const char *method = strcmp(rt->method, "GET") == 0 ? r->method : rt->method;
    if (pc.nunknown)
        *ret = sl__http_error(r, 400, "UnknownParameter",
                              "unknown query parameter%s %.*s%s: %s %s takes %s",
                              pc.nunknown > 1 ? "s" : "", (int)pc.unknown.len,
                              pc.unknown.data ? (const char *)pc.unknown.data : "",
                              pc.nunknown > 8 ? " and more" : "", method, rt->path, takes);
    else if (pc.twice)
        *ret = sl__http_error(r, 400, "InvalidParameter",
                              "query parameter \"%s\" is given more than once; give it once",
                              pc.twice);
    else
        *ret = sl__http_error(r, 400, "InvalidParameter",
                              "query parameter \"%s\" has no value (want %s=VALUE)", pc.no_value,
                              pc.no_value);
    sl_buf_free(&pc.unknown);
    return false;
}

/* The route for method and url (NULL when none); *name gets its {name}
 * segment (pointing into buf, which holds a copy of url and must be
 * SL_HTTP_PATH_MAX bytes), *known whether the path names a resource
 * whatever the method. url must be shorter than SL_HTTP_PATH_MAX. */
#define SL_HTTP_PATH_MAX 1024
static const struct route *find_route(const char *method, const char *url, char *buf,
                                      const char **name, bool *known)
{
    snprintf(buf, SL_HTTP_PATH_MAX, "%s", url);
    char *seg[5];
    int n = split_path(buf, seg, 4);
    const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
    *known = false;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const struct route *rt = &routes[i];
        *name = "";
        if (!path_match(rt->path, url, seg, n, name))
            continue;
        *known = true;
        if (strcmp(rt->method, m) == 0)
            return rt;
    }
    return NULL;
}

/* With the headers, before any body is read: a query parameter the route
 * does not take is answered at once (true, with *ret), as refused
 * admissions are (the body is never read). Unknown paths and methods are
 * left to route(), after the body, as before. */
static bool params_refused(sl_http_req *r, const char *method, const char *url,
                           enum MHD_Result *ret)
{
    char buf[SL_HTTP_PATH_MAX];
    const char *name;
    bool known;
    if (strlen(url) >= sizeof buf)
        return false;
    const struct route *rt = find_route(method, url, buf, &name, &known);
    if (!rt || params_ok(r, rt, ret))
        return false;
    r->close = true; /* as for refused admissions: a body that may follow is not read */
    return true;
}

static enum MHD_Result route(sl_http_req *r, const char *method, const char *url)
{
    char buf[SL_HTTP_PATH_MAX];
    if (strlen(url) >= sizeof buf)
        return sl__http_error(r, 414, "UriTooLong", "the request path is too long");
    const char *name;
    bool known;
    /* the query parameters were checked with the headers (params_refused()) */
    if (r->aws)
        return sl__http_aws(r);
    const struct route *rt = find_route(method, url, buf, &name, &known);
    if (rt)
        return rt->fn(r, name);
    if (known)
        return sl__http_error(r, 405, "MethodNotAllowed", "%s is not allowed on %s", method, url);
    return sl__http_error(r, 404, "NotFound", "no such resource: %s %s", method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    sl_http *h = cls;
    sl_http_req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->h = h;
        r->conn = conn;
        r->post = strcmp(method, "POST") == 0;
        r->start_ns = sl_clock_mono_ns();
        req_identify(r, method, url);
        atomic_init(&r->refs, 1);
        pthread_mutex_init(&r->lock, NULL);
        *con_cls = r;
        atomic_fetch_add(&h->active, 1);
        /* With the headers: a refused request is answered now and its
         * body never read (connection limits, Host, API key, key-free
         * routes: http_auth.c). */
        enum MHD_Result ret;
        if (sl__http_admit(r, method, url, &ret))
            return ret;
        if (params_refused(r, method, url, &ret))
            return ret;
        if (r->post) {
            const char *cl =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > h->opts.max_request_bytes)
                r->too_big = true;
        }
        return MHD_YES;
    }
    if (*upload_size) { /* more body */
        /* The idle timeout cannot catch a client that trickles a byte now
         * and then: the whole body has a deadline too. */
        if (sl_clock_mono_ns() - r->start_ns > (int64_t)h->opts.request_timeout_s * 1000000000)
            return MHD_NO; /* closes the connection; nothing was stored */
        if (!r->too_big && r->body.len + *upload_size > h->opts.max_request_bytes)
            r->too_big = true;
        /* Bodies are bounded server-wide too: many large uploads at once get
         * 503 instead of growing memory without limit. */
        if (!r->too_big && !r->overloaded &&
            atomic_fetch_add(&h->body_bytes, *upload_size) + *upload_size >
                h->opts.max_body_memory) {
            atomic_fetch_sub(&h->body_bytes, *upload_size);
            r->overloaded = true;
        }
        /* Requests without a key on a server with keys (webhooks) share a
         * quarter of that: strangers cannot starve key holders. */
        if (r->open_body && !r->too_big && !r->overloaded &&
            atomic_fetch_add(&h->open_body_bytes, *upload_size) + *upload_size >
                h->opts.max_body_memory / 4) {
            atomic_fetch_sub(&h->open_body_bytes, *upload_size);
            atomic_fetch_sub(&h->body_bytes, *upload_size);
            r->overloaded = true;
        }
        if (!r->too_big && !r->overloaded && sl_buf_append(&r->body, upload_data, *upload_size)) {
            atomic_fetch_sub(&h->body_bytes, *upload_size);
            if (r->open_body)
                atomic_fetch_sub(&h->open_body_bytes, *upload_size);
            return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->ready && r->post) { /* resumed after a durable wait: answer it before any
                                * admission check, its events are stored */
        if (r->resumed)
            return r->resumed(r);
        /* A full disk: the Databus dropped what it could not write. */
        if (r->wait_status == SL_ENOSPC)
            return sl__http_error(r, 507, "InsufficientStorage",
                                  "no space left on device: not all the events were stored "
                                  "(some of them may have been, in any partition); retry "
                                  "once space is freed, a retry may store some twice");
        if (r->wait_status && r->kafka) /* a Kafka-backed set: no event acknowledged */
            return sl__http_error(r, 503, "NotAcknowledged",
                                  "the Kafka cluster did not acknowledge the events (%s); "
                                  "they may or may not be stored: retry (the event ids let "
                                  "consumers drop a second copy)",
                                  r->kafka->why[0] ? r->kafka->why
                                                   : sl_strerror(r->wait_status));
        if (r->wait_status) /* not 503: that would promise nothing was stored */
            return sl__http_error(r, 500, "NotConfirmed",
                                  "the events were queued but not "
                                  "confirmed on disk (%s); they may or may not be stored",
                                  sl_strerror(r->wait_status));
        return sl__http_reply(r, (unsigned)r->resp_status, &r->resp, "application/json", 0);
    }
    if (r->too_big)
        return sl__http_error(r, 413, "RequestTooLarge",
                              "the request body is over the limit "
                              "of %llu bytes; send fewer events per request",
                              (unsigned long long)h->opts.max_request_bytes);
    if (r->overloaded)
        return sl__http_error(r, 503, "Backpressure",
                              "the server holds too many request "
                              "bodies right now; nothing was stored, retry after a second");
    return route(r, method, url);
}

/* ---- long-poll waiting ---------------------------------------------------- */

/* The waiter's callbacks (core/bus/waits.h), run under the registry's
 * lock: parking suspends the connection before any wake-up can resume it. */
static void poll_park(sl_wait *w)
{
    sl_http_req *r = w->data;
    r->ready = false;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
}

static void poll_wake(sl_wait *w)
{
    sl_http_req *r = w->data;
    r->ready = true;
    r->suspended = false;
    MHD_resume_connection(r->conn);
}

bool sl__http_poll_wait(sl_http_req *r, sl_set *set, int32_t part, int64_t pos, int64_t deadline_ns)
{
    /* Once stopping, the registry is stopped too (or about to be, by the
     * server): a long-poll starting now would only be woken at once. */
    if (r->h->stopping)
        return false;
    r->wait = (sl_wait){.data = r, .wake = poll_wake, .park = poll_park};
    return sl_waits_add(r->h->waits, &r->wait, set, part, pos, deadline_ns);
}

/* ---- lifecycle ------------------------------------------------------------ */

/* libmicrohttpd's own complaints (a failed accept, a client that broke the
 * protocol) go through the logger, so that a JSON log stays all JSON. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    sl_slog(SL_SLOG_WARN, "http", "libmicrohttpd: %s", msg);
}

int sl_http_start(const sl_http_options *opts, sl_sets *sets, sl_databus *bus, sl_http **out,
                  sl_error *err)
{
    if (!opts->waits)
        return sl_error_set(err, SL_EINVAL, "the HTTP API needs a long-poll registry");
    sl_http *h = calloc(1, sizeof *h);
    if (!h)
        return SL_ENOMEM;
    h->opts = *opts;
    h->waits = opts->waits;
    if (!h->opts.max_request_bytes)
        h->opts.max_request_bytes = 10u << 20;
    if (!h->opts.threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        h->opts.threads = n > 0 ? (unsigned)n : 2;
    }
    if (!h->opts.max_connections)
        h->opts.max_connections = 4096;
    if (!h->opts.idle_timeout_s)
        h->opts.idle_timeout_s = 30;
    if (!h->opts.request_timeout_s)
        h->opts.request_timeout_s = 60;
    if (!h->opts.max_body_memory)
        h->opts.max_body_memory = 256u << 20;
    if (!h->opts.max_batch)
        h->opts.max_batch = 10000;
    h->auth = opts->auth;
    pthread_mutex_init(&h->ip_lock, NULL);
    h->sets = sets;
    h->bus = bus;
    if (opts->hooks)
        h->hooks = *opts->hooks;
    h->opts.hooks = NULL;

    /* An IPv4 address, or an IPv6 one (bare or in brackets: "::", "[::1]");
     * "localhost" is 127.0.0.1 (no resolver: it is loopback by the listen
     * policy's definition, and IPv4 is what clients try first). */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(opts->port)};
    struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6, .sin6_port = htons(opts->port)};
    char host6[64] = "";
    size_t hl = strlen(opts->host);
    if (hl >= 2 && hl - 2 < sizeof host6 && opts->host[0] == '[' && opts->host[hl - 1] == ']')
        snprintf(host6, sizeof host6, "%.*s", (int)(hl - 2), opts->host + 1);
    else
        snprintf(host6, sizeof host6, "%s", opts->host);
    bool v6 = false;
    const char *host4 = strcasecmp(opts->host, "localhost") == 0 ? "127.0.0.1" : opts->host;
    if (inet_pton(AF_INET, host4, &sa.sin_addr) != 1) {
        if (inet_pton(AF_INET6, host6, &sa6.sin6_addr) != 1) {
            sl_http_free(h);
            return sl_error_set(err, SL_EINVAL,
                                "listen address \"%s\" is not an IPv4 or IPv6 address", opts->host);
        }
        v6 = true;
    }
    h->loopback =
        v6 ? IN6_IS_ADDR_LOOPBACK(&sa6.sin6_addr) : (ntohl(sa.sin_addr.s_addr) >> 24) == 127;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    /* The options that depend on the configuration go through an array. */
    struct MHD_OptionItem extra[3];
    size_t nx = 0;
    if (opts->tls_cert || opts->tls_key) {
        int rc =
            sl_tls_load_pem(opts->tls_cert, opts->tls_key, &h->tls_cert_pem, &h->tls_key_pem, err);
        if (!rc && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
            rc = sl_error_set(err, SL_EINVAL,
                              "this libmicrohttpd was built without TLS: cannot serve HTTPS");
        if (rc) {
            sl_http_free(h);
            return rc;
        }
        flags |= MHD_USE_TLS;
        extra[nx++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert_pem};
        extra[nx++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key_pem};
    }
    extra[nx] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    if (opts->rate > 0 && !(h->rl = sl_ratelimit_new(opts->rate, opts->burst, 0))) {
        sl_http_free(h);
        return SL_ENOMEM;
    }
    const struct sockaddr *addr = v6 ? (const struct sockaddr *)&sa6 : (const struct sockaddr *)&sa;
    h->d = MHD_start_daemon(
        flags, opts->port, sl__http_accept_policy, h, on_request, h,
        /* first, or libmicrohttpd warns on stderr */
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_THREAD_POOL_SIZE, h->opts.threads, MHD_OPTION_CONNECTION_LIMIT,
        h->opts.max_connections + SL_HTTP_CONN_HEADROOM, MHD_OPTION_CONNECTION_TIMEOUT,
        h->opts.idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10), MHD_OPTION_LISTEN_BACKLOG_SIZE,
        1024, MHD_OPTION_ARRAY, extra, MHD_OPTION_END);
    if (!h->d) {
        int e = errno;
        sl_http_free(h);
        return sl_error_errno(err, e ? e : EADDRINUSE, "listen on %s:%u", opts->host, opts->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : opts->port;
    *out = h;
    return 0;
}

uint16_t sl_http_port(const sl_http *h)
{
    return h->port;
}

/* From now on /healthz says "stopping" and no request starts a long-poll;
 * those waiting are woken when the server stops the registry
 * (sl_waits_stop()). */
static void begin_stopping(sl_http *h)
{
    atomic_store(&h->stopping, true);
}

void sl_http_quiesce(sl_http *h)
{
    if (!h)
        return;
    /* From now on the accept policy closes every new connection at once
     * (sl__http_accept_policy). Not MHD_quiesce_daemon(): with a thread
     * pool and epoll, libmicrohttpd 0.9.75 races its worker threads taking
     * the listen socket out of their epoll sets and aborts the process
     * ("Failed to remove listen FD from epoll set", seen about once in ten
     * stops in tests/integration/test_lanes.c). */
    begin_stopping(h);
}

void sl_http_stop(sl_http *h)
{
    if (!h || h->stopped)
        return;
    h->stopped = true;
    begin_stopping(h);
    /* Give resumed requests a moment to be answered before closing. */
    for (int i = 0; i < 200 && atomic_load(&h->active) > 0; i++)
        usleep(10000);
    if (h->d)
        MHD_stop_daemon(h->d);
    h->d = NULL;
    log_flush_suppressed(); /* no request can be answered any more */
}

void sl_http_free(sl_http *h)
{
    if (!h)
        return;
    sl_http_stop(h);
    sl_ratelimit_free(h->rl);
    pthread_mutex_destroy(&h->ip_lock);
    free(h->tls_cert_pem);
    if (h->tls_key_pem) /* a private key is not left in freed memory */
        OPENSSL_cleanse(h->tls_key_pem, strlen(h->tls_key_pem));
    free(h->tls_key_pem);
    free(h);
}
