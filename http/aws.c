/*
 * http/aws.c — the EventBridge API's front: which requests are its, their
 * SigV4 check (core/base/sigv4.h), AWS JSON 1.1 answers and errors, and the
 * operation table. See http/aws.h.
 *
 * Errors are AWS's: the status, `x-amzn-ErrorType: TYPE` and
 * {"__type": TYPE, "message": …}; botocore and the JavaScript SDK read the
 * type from either. Every answer carries x-amzn-RequestId (the request id).
 */
#include "http/aws_internal.h"

#include "core/base/clock.h"
#include "core/base/sigv4.h"
#include "core/bus/auth.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- answers ------------------------------------------------------------------ */

void sl__aws_body(json_t *out, sl_buf *b)
{
    char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
    if (s) {
        sl_buf_append(b, s, strlen(s));
        free(s);
    } else {
        sl_buf_append(b, "{}", 2);
    }
}

static enum MHD_Result reply(sl_http_req *r, unsigned status, sl_buf *b, const char *type)
{
    const char *hdrs[] = {"x-amzn-RequestId", r->request_id, type ? "x-amzn-ErrorType" : NULL,
                          type, NULL};
    return sl__http_reply_hdrs(r, status, b, AWS_JSON, hdrs);
}

enum MHD_Result sl__aws_reply(aws_call *c, json_t *out)
{
    sl_buf b = SL_BUF_INIT;
    sl__aws_body(out, &b);
    json_decref(out);
    return reply(c->r, 200, &b, NULL);
}

static enum MHD_Result aws_verror(sl_http_req *r, unsigned status, const char *type,
                                  const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    json_t *o = json_pack("{s:s,s:s}", "__type", type, "message", msg);
    sl_buf b = SL_BUF_INIT;
    sl__aws_body(o, &b);
    json_decref(o);
    return reply(r, status, &b, type);
}

static enum MHD_Result req_error(sl_http_req *r, unsigned status, const char *type,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result req_error(sl_http_req *r, unsigned status, const char *type,
                                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = aws_verror(r, status, type, fmt, ap);
    va_end(ap);
    return ret;
}

enum MHD_Result sl__aws_error(aws_call *c, unsigned status, const char *type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = aws_verror(c->r, status, type, fmt, ap);
    va_end(ap);
    return ret;
}

/* ---- helpers the operations share ---------------------------------------------- */

const char *sl__aws_str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

void sl__aws_arn(const sl_aws *a, const char *kind, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "arn:aws:events:%s:%s:%s/%s", a->region, a->account, kind, name);
}

static bool globs_allow(char *const *globs, size_t n, const char *bus)
{
    for (size_t i = 0; i < n; i++)
        if (!bus || sl_auth_glob(globs[i], bus))
            return true;
    return false;
}

bool sl__aws_allowed(const aws_call *c, int right, const char *bus)
{
    const sl_aws_cred *k = c->cred;
    if (!k || k->admin)
        return true;
    if (right == AWS_ADMIN)
        return false;
    if (right == AWS_PUBLISH)
        return globs_allow(k->publish, k->npublish, bus);
    if (right == AWS_READ)
        return globs_allow(k->read, k->nread, bus);
    /* AWS_SEE: a bus is seen by whoever may read or publish on it */
    return globs_allow(k->read, k->nread, bus) || globs_allow(k->publish, k->npublish, bus);
}

bool sl__aws_bus(aws_call *c, json_t *v, char *out, size_t cap, enum MHD_Result *ret)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (v && !json_is_null(v) && !s) {
        *ret = sl__aws_error(c, 400, "ValidationException", "EventBusName must be a string");
        return false;
    }
    if (!s || !*s)
        s = "default";
    /* arn:aws:events:REGION:ACCOUNT:event-bus/NAME */
    if (strncmp(s, "arn:", 4) == 0) {
        const char *slash = strstr(s, ":event-bus/");
        if (!slash || strncmp(s, "arn:aws:events:", 15) != 0) {
            *ret = sl__aws_error(c, 400, "ValidationException",
                                 "EventBusName \"%.200s\" is not an event bus ARN "
                                 "(arn:aws:events:REGION:ACCOUNT:event-bus/NAME)",
                                 s);
            return false;
        }
        s = slash + strlen(":event-bus/");
    }
    if (!sl_set_name_valid(s)) {
        *ret = sl__aws_error(c, 400, "ValidationException",
                             "EventBusName \"%.200s\": a bus is an event set, named by 1-128 of "
                             "A-Z a-z 0-9 . _ - (not beginning with .)",
                             s);
        return false;
    }
    snprintf(out, cap, "%s", s);
    return true;
}

/* ---- which requests are the API's ---------------------------------------------- */

bool sl__http_aws_request(sl_http_req *r, const char *method, const char *url)
{
    if (strcmp(method, "POST") != 0 || !r->h->opts.aws)
        return false;
    if (strcmp(url, "/") && strcmp(url, "/eventbridge") && strcmp(url, "/eventbridge/"))
        return false;
    const char *t = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Amz-Target");
    return t && strncmp(t, "AWSEvents.", 10) == 0;
}

/* ---- SigV4 ------------------------------------------------------------------------ */

typedef struct hdr_list {
    sl_sigv4_header h[SL_SIGV4_MAX_HEADERS];
    size_t n;
    bool over;
} hdr_list;

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    (void)kind;
    hdr_list *l = cls;
    if (l->n == SL_SIGV4_MAX_HEADERS) {
        l->over = true;
        return MHD_NO;
    }
    l->h[l->n++] = (sl_sigv4_header){key, value ? value : "", strlen(key),
                                     value ? strlen(value) : 0};
    return MHD_YES;
}

typedef struct query_list {
    sl_buf q;
} query_list;

/* The query string again (libmicrohttpd gives it decoded; the canonical
 * form decodes and encodes each part itself, so any faithful encoding
 * signs the same). */
static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    query_list *ql = cls;
    static const char hex[] = "0123456789ABCDEF";
    if (ql->q.len)
        sl_buf_append(&ql->q, "&", 1);
    for (int part = 0; part < 2; part++) {
        const char *s = part ? (value ? value : "") : key;
        if (part)
            sl_buf_append(&ql->q, "=", 1);
        for (; *s; s++) {
            unsigned char ch = (unsigned char)*s;
            /* http.c's unescape() leaves %2F and %00 encoded (a set name may
             * hold neither): they are already the encoding the client signed. */
            if (ch == '%' && s[1] && s[2] &&
                ((s[1] == '2' && (s[2] == 'F' || s[2] == 'f')) || (s[1] == '0' && s[2] == '0'))) {
                char e[3] = {'%', s[1] == '2' ? '2' : '0', s[1] == '2' ? 'F' : '0'};
                sl_buf_append(&ql->q, e, 3);
                s += 2;
                continue;
            }
            if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                ch == '-' || ch == '_' || ch == '.' || ch == '~') {
                sl_buf_append(&ql->q, s, 1);
            } else {
                char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
                sl_buf_append(&ql->q, e, 3);
            }
        }
    }
    return MHD_YES;
}

static const char *secret_of(void *ctx, const char *akid, size_t len)
{
    sl_aws *a = ctx;
    for (size_t i = 0; i < a->ncreds; i++)
        if (strlen(a->creds[i].akid) == len && memcmp(a->creds[i].akid, akid, len) == 0)
            return a->creds[i].secret;
    return NULL;
}

/* Checks the request's signature: true with c->cred, or false with the
 * refusal queued in *ret. Without credentials configured, a loopback
 * server takes any request (signed with any key or not at all). */
static bool authenticate(aws_call *c, const char *method, const char *url, enum MHD_Result *ret)
{
    sl_aws *a = c->a;
    sl_http_req *r = c->r;
    if (!a->ncreds) {
        if (r->h->loopback)
            return true;
        *ret = sl__aws_error(c, 403, "UnrecognizedClientException",
                             "the EventBridge API beyond loopback needs credentials: declare "
                             "server.aws.credentials (docs/eventbridge-api.md)");
        return false;
    }
    hdr_list hl = {.n = 0};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect, &hl);
    if (hl.over) {
        *ret = sl__aws_error(c, 400, "IncompleteSignatureException",
                             "the request has more than %d headers", SL_SIGV4_MAX_HEADERS);
        return false;
    }
    query_list ql = {SL_BUF_INIT};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, collect_arg, &ql);
    sl_buf_append(&ql.q, "", 1);
    sl_sigv4_req sr = {.method = method,
                       .path = url,
                       .query = (const char *)ql.q.data,
                       .headers = hl.h,
                       .nheaders = hl.n,
                       .body = r->body.data,
                       .body_len = r->body.len,
                       .double_encode = true};
    sl_error err = {0};
    const char *akid = NULL;
    size_t akid_len = 0;
    sl_sigv4_fail f = sl_sigv4_verify(&sr, a->region, "events", sl_clock_now_ms() / 1000,
                                      secret_of, a, &akid, &akid_len, &err);
    sl_buf_free(&ql.q);
    if (f == SL_SIGV4_OK) {
        for (size_t i = 0; i < a->ncreds; i++)
            if (strlen(a->creds[i].akid) == akid_len &&
                memcmp(a->creds[i].akid, akid, akid_len) == 0)
                c->cred = &a->creds[i];
        return true;
    }
    switch (f) {
    case SL_SIGV4_INCOMPLETE:
        *ret = sl__aws_error(c, 400, "IncompleteSignatureException", "%s", err.msg);
        break;
    case SL_SIGV4_BAD_SIGNATURE:
        *ret = sl__aws_error(c, 403, "InvalidSignatureException", "%s", err.msg);
        break;
    default: /* an unknown key id, a session token */
        *ret = sl__aws_error(c, 403, "UnrecognizedClientException", "%s", err.msg);
        break;
    }
    return false;
}

/* ---- operations -------------------------------------------------------------------- */

typedef enum MHD_Result aws_op_fn(aws_call *c);

static const struct aws_op {
    const char *name;
    aws_op_fn *fn;
} ops[] = {
    {"PutEvents", sl__aws_put_events},
    {"TestEventPattern", sl__aws_test_event_pattern},
    {"PutRule", sl__aws_put_rule},
    {"DescribeRule", sl__aws_describe_rule},
    {"ListRules", sl__aws_list_rules},
    {"DeleteRule", sl__aws_delete_rule},
    {"EnableRule", sl__aws_enable_rule},
    {"DisableRule", sl__aws_disable_rule},
    {"ListRuleNamesByTarget", sl__aws_list_rule_names_by_target},
    {"PutTargets", sl__aws_put_targets},
    {"RemoveTargets", sl__aws_remove_targets},
    {"ListTargetsByRule", sl__aws_list_targets_by_rule},
    {"CreateEventBus", sl__aws_create_bus},
    {"DescribeEventBus", sl__aws_describe_bus},
    {"ListEventBuses", sl__aws_list_buses},
    {"DeleteEventBus", sl__aws_delete_bus},
    {"CreateConnection", sl__aws_create_connection},
    {"DescribeConnection", sl__aws_describe_connection},
    {"ListConnections", sl__aws_list_connections},
    {"DeleteConnection", sl__aws_delete_connection},
    {"CreateApiDestination", sl__aws_create_api_destination},
    {"DescribeApiDestination", sl__aws_describe_api_destination},
    {"ListApiDestinations", sl__aws_list_api_destinations},
    {"DeleteApiDestination", sl__aws_delete_api_destination},
};

enum MHD_Result sl__http_aws(sl_http_req *r)
{
    sl_aws *a = r->h->opts.aws;
    const char *target = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Amz-Target");
    aws_call c = {.r = r, .a = a, .op = target + 10};
    enum MHD_Result ret;
    if (!authenticate(&c, r->method, r->url, &ret))
        return ret;
    const struct aws_op *op = NULL;
    for (size_t i = 0; i < sizeof ops / sizeof *ops && !op; i++)
        if (strcmp(ops[i].name, c.op) == 0)
            op = &ops[i];
    if (!op)
        return req_error(r, 400, "UnknownOperationException",
                         "sluice does not implement the EventBridge operation %.100s "
                         "(docs/eventbridge-api.md lists those it does)",
                         c.op);
    /* The hot paths read their bodies with the JSON scanner themselves. */
    if (op->fn == sl__aws_put_events || op->fn == sl__aws_test_event_pattern)
        return op->fn(&c);
    json_error_t je;
    c.in = json_loadb(r->body.data ? (const char *)r->body.data : "{}",
                      r->body.len ? r->body.len : 2, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(c.in)) {
        json_decref(c.in);
        return req_error(r, 400, "SerializationException",
                         "the request body is not a JSON object: %s (line %d, column %d)", je.text,
                         je.line, je.column);
    }
    ret = op->fn(&c);
    json_decref(c.in);
    return ret;
}
