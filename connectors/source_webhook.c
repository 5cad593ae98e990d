/*
 * connectors/source_webhook.c — source.webhook: one configured webhook
 * (preset github, stripe, slack or generic) that verifies a request with
 * connectors/webhook_verify.h, answers Slack's URL handshake, deduplicates
 * delivery ids and maps the request to one CloudEvent. No I/O here: the HTTP
 * layer (http/http_webhook.c) passes the request in and
 * publishes what comes out.
 *
 * Order of the checks, so that nothing unverified costs more than an HMAC
 * and nothing unverified is ever stored or remembered: signature (401), the
 * Slack handshake (200, nothing stored), the preset's mapping (400), the
 * dedupe claim (200 duplicate / 409 in progress), the event (STORE).
 */
#include "connectors/source_webhook.h"

#include "core/base/lane_name.h"
#include "core/base/base64.h"
#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/base/json.h"
#include "core/base/buf.h"
#include "core/base/metrics.h"
#include "core/bus/set.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Ids a webhook remembers at most; a flood of new ids pushes the oldest out
 * (connectors/webhook_verify.h). Memory is touched only as ids arrive. */
#define DEDUPE_CAP 65536
#define DEDUPE_MS_DEFAULT (24 * 3600 * 1000LL)
#define TYPE_DEFAULT "sluice.webhook"
/* Longest event type a preset derives, and longest configured type/source. */
#define TYPE_MAX 128
#define ATTR_MAX 1024
/* Longest Slack challenge answered. */
#define CHALLENGE_MAX 1024
/* JSON nesting of a body: the event object around it takes one level. */
#define BODY_DEPTH (SL_EVENT_MAX_DEPTH_DEFAULT - 1)

/* What happened to requests, for /metrics (invalid signatures are counted
 * per reason apart). */
#define OUTCOME_MAP(XX)                                                                            \
    XX(ACCEPTED, "accepted")       /* stored */                                                    \
    XX(DUPLICATE, "duplicate")     /* a delivery id stored within the window */                    \
    XX(IN_PROGRESS, "in_progress") /* the same delivery id is being stored (409) */                \
    XX(CHALLENGE, "challenge")     /* Slack's url_verification answered */                         \
    XX(BAD_REQUEST, "bad_request") /* verified, but the preset cannot map it (400) */              \
    XX(FAILED, "failed")           /* verified and mapped, but the store failed */                 \
    XX(ERROR, "error")             /* out of memory */

enum {
#define XX(code, _) OUT_##code,
    OUTCOME_MAP(XX)
#undef XX
        OUT_COUNT
};

static const char *const k_outcomes[] = {
#define XX(code, name) name,
    OUTCOME_MAP(XX)
#undef XX
};

struct sl_webhook_source {
    char *name, *set, *lane, *type, *source;
    char *secret, *header, *algorithm, *prefix, *timestamp_header, *id_header;
    sl_webhook_config vc;      /* points into the strings above */
    sl_webhook_dedupe *dedupe; /* NULL: generic without id_header */
    _Atomic uint64_t outcomes[OUT_COUNT];
    _Atomic uint64_t refused[SL_WEBHOOK_REFUSAL_COUNT];
};

/* ---- config ----------------------------------------------------------------- */

static bool given(const char *s)
{
    return s && *s;
}

/* The verifier's config for cfg; strings borrowed from cfg. */
static int verify_config(const sl_source_webhook_conf *wc, sl_webhook_config *vc, sl_error *err)
{
    memset(vc, 0, sizeof *vc);
    if (!given(wc->preset))
        return sl_error_set(err, SL_EINVAL,
                            "preset is required (github, stripe, slack or generic)");
    if (sl_webhook_kind_parse(wc->preset, &vc->kind, NULL))
        return sl_error_set(err, SL_EINVAL,
                            "preset \"%s\" is unknown (github, stripe, slack or generic)",
                            wc->preset);
    vc->secret = wc->secret;
    vc->header = wc->header;
    vc->algorithm = wc->algorithm;
    vc->base64 = wc->base64;
    vc->prefix = wc->prefix;
    vc->timestamp_header = wc->timestamp_header;
    vc->tolerance_ms = wc->tolerance_ms;
    return 0;
}

/* Messages do not name the source: the config checker puts its name and line
 * in front. */
int sl_webhook_source_check(const sl_source_config *cfg, sl_error *err)
{
    const sl_source_webhook_conf *wc = cfg->conf;
    const char *name = cfg->name ? cfg->name : "";
    if (!sl_set_name_valid(name))
        return sl_error_set(err, SL_EINVAL,
                            "name \"%s\" is not 1-128 characters of A-Z a-z 0-9 . _ - (it is "
                            "the last part of /v1/webhooks/NAME)",
                            name);
    if (!given(cfg->set))
        return sl_error_set(err, SL_EINVAL, "set is required");
    if (!sl_set_name_valid(cfg->set))
        return sl_error_set(err, SL_EINVAL, "set \"%s\" is not a valid set name", cfg->set);
    if (cfg->lane && *cfg->lane && !sl_lane_valid(cfg->lane, strlen(cfg->lane)))
        return sl_error_set(err, SL_EINVAL, "lane \"%s\" is not [a-z0-9-]{1,32}", cfg->lane);
    const char *attrs[2][2] = {{"type", cfg->type}, {"source", cfg->source}};
    for (int i = 0; i < 2; i++) {
        const char *v = attrs[i][1];
        if (v && (!*v || strlen(v) > ATTR_MAX || !sl_json_utf8_valid(v, strlen(v))))
            return sl_error_set(err, SL_EINVAL, "%s must be 1-%d bytes of UTF-8", attrs[i][0],
                                ATTR_MAX);
    }
    if (wc->dedupe_ms < 0)
        return sl_error_set(err, SL_EINVAL, "dedupe is negative");
    sl_webhook_config vc;
    int rc = verify_config(wc, &vc, err);
    if (rc)
        return rc;
    if (vc.kind != SL_WEBHOOK_GENERIC) {
        /* The presets fix these; accepting them silently would hide a
         * mistake (a header the sender never signs). */
        const char *key = given(wc->header)             ? "header"
                          : given(wc->prefix)           ? "prefix"
                          : given(wc->timestamp_header) ? "timestamp_header"
                          : given(wc->id_header)        ? "id_header"
                          : wc->base64                  ? "encoding"
                          : given(wc->algorithm) && strcasecmp(wc->algorithm, "sha256") != 0
                              ? "algorithm"
                              : NULL;
        if (key)
            return sl_error_set(err, SL_EINVAL,
                                "%s applies to preset \"generic\" only (preset \"%s\" fixes it)",
                                key, wc->preset);
    } else if (wc->id_header && !*wc->id_header) {
        return sl_error_set(err, SL_EINVAL, "id_header is empty");
    }
    sl_error e = {0};
    if (sl_webhook_config_check(&vc, &e)) /* never quotes a secret */
        return sl_error_set(err, SL_EINVAL, "%s",
                            e.msg + (strncmp(e.msg, "webhook config: ", 16) ? 0 : 16));
    return 0;
}

static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return 0;
    return (*dst = strdup(src)) ? 0 : SL_ENOMEM;
}

int sl_webhook_source_new(const sl_source_config *cfg, sl_webhook_source **out, sl_error *err)
{
    const sl_source_webhook_conf *wc = cfg->conf;
    int rc = sl_webhook_source_check(cfg, err);
    if (rc)
        return rc;
    sl_webhook_source *w = calloc(1, sizeof *w);
    if (!w)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    if (dup_str(&w->name, cfg->name) || dup_str(&w->set, cfg->set) ||
        dup_str(&w->lane, given(cfg->lane) ? cfg->lane : NULL) || dup_str(&w->type, cfg->type) ||
        dup_str(&w->source, cfg->source) || dup_str(&w->secret, wc->secret) ||
        dup_str(&w->header, wc->header) || dup_str(&w->algorithm, wc->algorithm) ||
        dup_str(&w->prefix, wc->prefix) || dup_str(&w->timestamp_header, wc->timestamp_header) ||
        dup_str(&w->id_header, wc->id_header))
        goto fail;
    verify_config(wc, &w->vc, NULL);
    w->vc.secret = w->secret;
    w->vc.header = w->header;
    w->vc.algorithm = w->algorithm;
    w->vc.prefix = w->prefix;
    w->vc.timestamp_header = w->timestamp_header;
    if (w->vc.kind != SL_WEBHOOK_GENERIC || w->id_header) {
        w->dedupe = sl_webhook_dedupe_new(DEDUPE_CAP,
                                          wc->dedupe_ms > 0 ? wc->dedupe_ms : DEDUPE_MS_DEFAULT);
        if (!w->dedupe)
            goto fail;
    }
    *out = w;
    return 0;
fail:
    sl_webhook_source_free(w);
    return sl_error_set(err, SL_ENOMEM, "out of memory");
}

void sl_webhook_source_free(sl_webhook_source *w)
{
    if (!w)
        return;
    sl_webhook_dedupe_free(w->dedupe);
    if (w->secret) /* a secret should not linger in freed memory */
        memset(w->secret, 0, strlen(w->secret));
    char *strs[] = {w->name,     w->set,    w->lane,      w->type,   w->source,
                    w->secret,   w->header, w->algorithm, w->prefix, w->timestamp_header,
                    w->id_header};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        free(strs[i]);
    free(w);
}

const char *sl_webhook_source_name(const sl_webhook_source *w)
{
    return w->name;
}

/* ---- results ---------------------------------------------------------------- */

void sl_webhook_result_init(sl_webhook_result *res)
{
    memset(res, 0, sizeof *res);
}

void sl_webhook_result_free(sl_webhook_result *res)
{
    sl_buf_free(&res->body);
    sl_buf_free(&res->event);
}

static void count(sl_webhook_source *w, int outcome)
{
    atomic_fetch_add_explicit(&w->outcomes[outcome], 1, memory_order_relaxed);
}

/* Answers status with {"error":code,"message":msg}. */
static void answer_error(sl_webhook_result *res, unsigned status, const char *code, const char *msg)
{
    res->action = SL_WEBHOOK_ANSWER;
    res->status = status;
    res->code = code;
    res->content_type = "application/json";
    sl_buf_free(&res->body);
    sl_buf_printf(&res->body, "{\"error\":\"%s\",\"message\":", code);
    if (sl_json_put_string(&res->body, msg, strlen(msg)))
        sl_buf_append(&res->body, "\"\"", 2);
    sl_buf_append(&res->body, "}\n", 2);
}

static void bad_request(sl_webhook_source *w, sl_webhook_result *res, const char *code,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void bad_request(sl_webhook_source *w, sl_webhook_result *res, const char *code,
                        const char *fmt, ...)
{
    char msg[SL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    count(w, OUT_BAD_REQUEST);
    answer_error(res, 400, code, msg);
}

static void internal(sl_webhook_source *w, sl_webhook_result *res)
{
    count(w, OUT_ERROR);
    answer_error(res, 500, "Internal", "out of memory");
}

/* ---- mapping ---------------------------------------------------------------- */

/* What the preset makes of a verified request. */
typedef struct mapped {
    char type[TYPE_MAX + 1];        /* a derived type; "" uses the configured one */
    char id[SL_WEBHOOK_ID_MAX + 1]; /* the delivery id; "" none (a UUIDv7, no dedupe) */
    bool json;                      /* the body is a JSON value */
    sl_json_tok root;               /* … this one */
} mapped;

/* Member name of object obj (the first one), or type NONE. */
static sl_json_tok member(const sl_json_tok *obj, const char *name)
{
    sl_json_tok v = {0};
    sl_json_get(obj, name, &v);
    return v;
}

/* Decodes string token t into out[0..cap) (NUL-terminated); false when t is
 * not a string or does not fit. */
static bool str_of(const sl_json_tok *t, char *out, size_t cap)
{
    size_t n = 0;
    if (t->type != SL_JSON_STRING || sl_json_unescape(t, out, cap - 1, &n) != 0)
        return false;
    out[n] = '\0';
    return strlen(out) == n; /* no NUL inside */
}

/* An event name as senders use it in types: [A-Za-z0-9_.-]{1,64}. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SL_WEBHOOK_EVENT_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* A delivery id: 1 to SL_WEBHOOK_ID_MAX printable ASCII characters, no spaces. */
static bool id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SL_WEBHOOK_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

/* Whether a form body (a=1&b=2) has a field called name. */
static bool form_has(const char *body, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i + n < len; i++)
        if ((i == 0 || body[i - 1] == '&') && memcmp(body + i, name, n) == 0 && body[i + n] == '=')
            return true;
    return false;
}

/* Stripe: the event object's "id" (evt_…) and "type". */
static int map_stripe(sl_webhook_source *w, mapped *m, sl_webhook_result *res)
{
    char t[TYPE_MAX + 1];
    if (!m->json || m->root.type != SL_JSON_OBJECT) {
        bad_request(w, res, "InvalidJson", "a Stripe event must be a JSON object");
        return -1;
    }
    sl_json_tok id = member(&m->root, "id"), type = member(&m->root, "type");
    if (!str_of(&id, m->id, sizeof m->id) || !id_ok(m->id)) {
        bad_request(w, res, "InvalidRequest",
                    "the Stripe event has no \"id\" string of 1-%d printable characters",
                    SL_WEBHOOK_ID_MAX);
        return -1;
    }
    if (!str_of(&type, t, sizeof t) || !name_ok(t)) {
        bad_request(w, res, "InvalidRequest",
                    "the Stripe event has no \"type\" string of 1-%d characters [A-Za-z0-9_.-]",
                    SL_WEBHOOK_EVENT_MAX);
        return -1;
    }
    snprintf(m->type, sizeof m->type, "com.stripe.%s", t);
    return 0;
}

/* Slack: Events API bodies (JSON), slash commands and interactions (forms). */
static int map_slack(sl_webhook_source *w, mapped *m, const char *body, size_t len,
                     sl_webhook_result *res)
{
    char t[TYPE_MAX + 1];
    if (!m->json) {
        if (form_has(body, len, "command"))
            snprintf(m->type, sizeof m->type, "com.slack.command");
        else if (form_has(body, len, "payload"))
            snprintf(m->type, sizeof m->type, "com.slack.interaction");
        else
            bad_request(w, res, "InvalidJson",
                        "a Slack request must be an Events API JSON object, a slash command "
                        "or an interaction");
        return m->type[0] ? 0 : -1;
    }
    if (m->root.type != SL_JSON_OBJECT) {
        bad_request(w, res, "InvalidJson", "a Slack event must be a JSON object");
        return -1;
    }
    sl_json_tok type = member(&m->root, "type");
    if (!str_of(&type, t, sizeof t) || !name_ok(t)) {
        bad_request(w, res, "InvalidRequest",
                    "the Slack request has no \"type\" string of 1-%d characters [A-Za-z0-9_.-]",
                    SL_WEBHOOK_EVENT_MAX);
        return -1;
    }
    if (strcmp(t, "event_callback") == 0) {
        sl_json_tok ev = member(&m->root, "event");
        sl_json_tok et = member(&ev, "type");
        if (!str_of(&et, t, sizeof t) || !name_ok(t)) {
            bad_request(w, res, "InvalidRequest",
                        "the Slack event_callback has no \"event\" object with a \"type\" "
                        "string of 1-%d characters [A-Za-z0-9_.-]",
                        SL_WEBHOOK_EVENT_MAX);
            return -1;
        }
    }
    snprintf(m->type, sizeof m->type, "com.slack.%s", t);
    sl_json_tok id = member(&m->root, "event_id");
    if (id.type != SL_JSON_NONE && id.type != SL_JSON_NULL &&
        (!str_of(&id, m->id, sizeof m->id) || !id_ok(m->id))) {
        bad_request(w, res, "InvalidRequest",
                    "the Slack event's \"event_id\" is not a string of 1-%d printable characters",
                    SL_WEBHOOK_ID_MAX);
        return -1;
    }
    return 0;
}

static int map_github(sl_webhook_source *w, mapped *m, sl_webhook_header_fn *get, void *ctx,
                      sl_webhook_result *res)
{
    const char *id = NULL;
    sl_error err = {0};
    if (sl_webhook_github_meta(get, ctx, m->type, sizeof m->type, &id, &err)) {
        bad_request(w, res, "InvalidRequest", "%s", err.msg);
        return -1;
    }
    snprintf(m->id, sizeof m->id, "%s", id);
    return 0;
}

static int map_generic(sl_webhook_source *w, mapped *m, sl_webhook_header_fn *get, void *ctx,
                       sl_webhook_result *res)
{
    if (!w->id_header)
        return 0;
    const char *id = get(ctx, w->id_header);
    if (!id) /* no delivery id: stored without dedupe, like a sender that has none */
        return 0;
    if (!id_ok(id)) {
        bad_request(w, res, "InvalidRequest",
                    "%s: the delivery id is not 1-%d printable characters without spaces",
                    w->id_header, SL_WEBHOOK_ID_MAX);
        return -1;
    }
    snprintf(m->id, sizeof m->id, "%s", id);
    return 0;
}

/* A media type worth keeping as datacontenttype: printable ASCII with a '/'
 * after a token, at most 127 characters. */
static bool media_ok(const char *ct)
{
    size_t n = ct ? strlen(ct) : 0;
    if (n < 3 || n > 127 || !strchr(ct, '/') || ct[0] == '/')
        return false;
    for (size_t i = 0; i < n; i++)
        if (ct[i] < ' ' || ct[i] > '~')
            return false;
    return true;
}

/* Appends ,"name":"value" (value UTF-8). */
static int put_attr(sl_buf *b, const char *name, const char *value)
{
    int rc = sl_buf_printf(b, ",\"%s\":", name);
    return rc ? rc : sl_json_put_string(b, value, strlen(value));
}

/* The CloudEvent of a mapped request, into res->event. */
static int build_event(sl_webhook_source *w, const mapped *m, sl_webhook_header_fn *get, void *ctx,
                       const char *body, size_t len, int64_t now_ms, sl_webhook_result *res)
{
    sl_buf *b = &res->event;
    char uuid[37], when[SL_TIME_RFC3339_MAX], src[160];
    const char *id = m->id;
    if (!id[0]) {
        sl_event_uuid7(now_ms, uuid);
        id = uuid;
    }
    const char *type = m->type[0] ? m->type : w->type ? w->type : TYPE_DEFAULT;
    const char *source = w->source;
    if (!source) {
        snprintf(src, sizeof src, "/v1/webhooks/%s", w->name);
        source = src;
    }
    if (!sl_time_format_rfc3339(now_ms, when))
        snprintf(when, sizeof when, "1970-01-01T00:00:00.000Z");
    int rc = sl_buf_append(b, "{\"specversion\":\"1.0\"", 20);
    rc = rc ? rc : put_attr(b, "id", id);
    rc = rc ? rc : put_attr(b, "source", source);
    rc = rc ? rc : put_attr(b, "type", type);
    rc = rc ? rc : put_attr(b, "time", when);
    rc = rc ? rc : put_attr(b, "webhook", w->name);
    if (w->lane)
        rc = rc ? rc : put_attr(b, "lane", w->lane);
    if (len > 0 && m->json) {
        rc = rc ? rc : put_attr(b, "datacontenttype", "application/json");
        rc = rc ? rc : sl_buf_append(b, ",\"data\":", 8);
        rc = rc ? rc : sl_buf_append(b, m->root.p, m->root.len);
    } else if (len > 0) {
        const char *ct = get(ctx, "Content-Type");
        bool text = sl_json_utf8_valid(body, len) && !memchr(body, '\0', len);
        if (!media_ok(ct))
            ct = text ? "text/plain; charset=utf-8" : "application/octet-stream";
        rc = rc ? rc : put_attr(b, "datacontenttype", ct);
        if (text) {
            rc = rc ? rc : sl_buf_append(b, ",\"data\":", 8);
            rc = rc ? rc : sl_json_put_string(b, body, len);
        } else {
            rc = rc ? rc : sl_buf_append(b, ",\"data_base64\":", 15);
            rc = rc ? rc : sl_base64_append(b, body, len, SL_BASE64_QUOTED);
        }
    }
    rc = rc ? rc : sl_buf_append(b, "}", 1);
    return rc;
}

/* ---- requests --------------------------------------------------------------- */

void sl_webhook_source_handle(sl_webhook_source *w, sl_webhook_header_fn *get, void *ctx,
                              const char *body, size_t len, int64_t now_ms, sl_webhook_result *res)
{
    sl_error err = {0};
    sl_webhook_refusal why = SL_WEBHOOK_REFUSED_ERROR;
    if (!body)
        body = "", len = 0;
    if (sl_webhook_verify_why(&w->vc, get, ctx, body, len, now_ms, &why, &err)) {
        if (why == SL_WEBHOOK_REFUSED_ERROR) {
            internal(w, res);
            return;
        }
        atomic_fetch_add_explicit(&w->refused[why], 1, memory_order_relaxed);
        answer_error(res, 401, "InvalidSignature", err.msg);
        return;
    }
    mapped m = {0};
    m.json = len > 0 && sl_json_validate(body, len, BODY_DEPTH, &m.root, NULL) == 0;
    if (w->vc.kind == SL_WEBHOOK_SLACK && m.json) {
        char chal[CHALLENGE_MAX + 1];
        size_t n = 0;
        int rc = sl_webhook_slack_challenge(body, len, chal, sizeof chal, &n, &err);
        if (rc == 0) {
            count(w, OUT_CHALLENGE);
            res->action = SL_WEBHOOK_ANSWER;
            res->status = 200;
            res->content_type = "text/plain; charset=utf-8";
            sl_buf_free(&res->body);
            if (sl_buf_append(&res->body, chal, n))
                internal(w, res);
            return;
        }
        if (rc != SL_ENOENT) {
            bad_request(w, res, "InvalidRequest", "%s", err.msg);
            return;
        }
    }
    int rc = 0;
    switch (w->vc.kind) {
    case SL_WEBHOOK_GITHUB:
        rc = map_github(w, &m, get, ctx, res);
        break;
    case SL_WEBHOOK_STRIPE:
        rc = map_stripe(w, &m, res);
        break;
    case SL_WEBHOOK_SLACK:
        rc = map_slack(w, &m, body, len, res);
        break;
    case SL_WEBHOOK_GENERIC:
        rc = map_generic(w, &m, get, ctx, res);
        break;
    }
    if (rc)
        return;
    if (m.id[0] && w->dedupe) {
        switch (sl_webhook_dedupe_claim(w->dedupe, m.id, strlen(m.id), now_ms)) {
        case SL_WEBHOOK_CLAIM_NEW:
            snprintf(res->id, sizeof res->id, "%s", m.id);
            break;
        case SL_WEBHOOK_CLAIM_SEEN:
            count(w, OUT_DUPLICATE);
            res->action = SL_WEBHOOK_ANSWER;
            res->status = 200;
            res->content_type = "application/json";
            sl_buf_free(&res->body);
            if (sl_buf_append(&res->body, "{\"duplicate\":true,\"id\":", 23) ||
                sl_json_put_string(&res->body, m.id, strlen(m.id)) ||
                sl_buf_append(&res->body, "}\n", 2))
                internal(w, res);
            return;
        case SL_WEBHOOK_CLAIM_PENDING:
            count(w, OUT_IN_PROGRESS);
            answer_error(res, 409, "DeliveryInProgress",
                         "this delivery id is being stored by another request right now; "
                         "retry in a few seconds");
            return;
        }
    }
    sl_buf_free(&res->event);
    if (build_event(w, &m, get, ctx, body, len, now_ms, res)) {
        if (res->id[0]) /* the sender's retry must not look like a replay */
            sl_webhook_dedupe_settle(w->dedupe, res->id, strlen(res->id), now_ms, false);
        res->id[0] = '\0';
        sl_buf_free(&res->event);
        internal(w, res);
        return;
    }
    res->action = SL_WEBHOOK_STORE;
    res->now_ms = now_ms;
    res->status = 200;
    res->code = NULL;
    snprintf(res->set, sizeof res->set, "%s", w->set);
}

void sl_webhook_source_stored(sl_webhook_source *w, const sl_webhook_result *res, bool stored)
{
    if (res->action != SL_WEBHOOK_STORE)
        return;
    count(w, stored ? OUT_ACCEPTED : OUT_FAILED);
    if (res->id[0] && w->dedupe)
        sl_webhook_dedupe_settle(w->dedupe, res->id, strlen(res->id), res->now_ms, stored);
}

/* ---- metrics ---------------------------------------------------------------- */

int sl_webhook_source_metrics_header(sl_buf *out)
{
    return sl_metrics_family(out, "sluice_webhook_requests_total", SL_METRIC_COUNTER,
                             "Requests to each source.webhook by outcome (invalid signatures by "
                             "reason).");
}

int sl_webhook_source_metrics(sl_webhook_source *w, sl_buf *out)
{
    static const char fam[] = "sluice_webhook_requests_total";
    int rc = 0;
    for (int i = 0; i < OUT_COUNT && !rc; i++)
        rc = sl_metrics_u64(out, fam, atomic_load_explicit(&w->outcomes[i], memory_order_relaxed),
                            "webhook", w->name, "outcome", k_outcomes[i], NULL);
    for (int i = SL_WEBHOOK_REFUSED_NONE + 1; i < SL_WEBHOOK_REFUSAL_COUNT && !rc; i++) {
        if (i == SL_WEBHOOK_REFUSED_ERROR)
            continue; /* counted as outcome "error" */
        rc = sl_metrics_u64(out, fam, atomic_load_explicit(&w->refused[i], memory_order_relaxed),
                            "webhook", w->name, "outcome", "invalid_signature", "reason",
                            sl_webhook_refusal_name((sl_webhook_refusal)i), NULL);
    }
    return rc;
}

static const sl_conf_key webhook_keys[] = {
    {"preset", SL_KEY_STRING, SL_CONF_FIELD(sl_source_webhook_conf, preset), 0, 0, "required",
     "\"github\", \"stripe\", \"slack\" or \"generic\": how requests are signed"},
    {"secret", SL_KEY_STRING, SL_CONF_FIELD(sl_source_webhook_conf, secret), 0, 0, "required",
     "the signing secret; several separated by commas while rotating (use `env \"NAME\"`)"},
    {"header", SL_KEY_STRING, SL_CONF_FIELD(sl_source_webhook_conf, header), 0, 0,
     "required for generic", "generic: the header carrying the signature"},
    {"algorithm", SL_KEY_STRING, SL_CONF_FIELD(sl_source_webhook_conf, algorithm), 0, 0,
     "\"sha256\"", "generic: HMAC algorithm, sha1, sha256 or sha512"},
    {"encoding", SL_KEY_ENCODING, SL_CONF_FIELD(sl_source_webhook_conf, base64), 0, 0, "\"hex\"",
     "generic: the signature's encoding, \"hex\" or \"base64\""},
    {"prefix", SL_KEY_STRING, SL_CONF_FIELD(sl_source_webhook_conf, prefix), 0, 0, "none",
     "generic: text before the signature, e.g. \"sha256=\""},
    {"timestamp_header", SL_KEY_STRING, SL_CONF_FIELD(sl_source_webhook_conf, timestamp_header), 0,
     0, "none", "generic: a header with the Unix time; the signed content is then TIMESTAMP.BODY"},
    {"tolerance", SL_KEY_DURATION, SL_CONF_FIELD(sl_source_webhook_conf, tolerance_ms), 1000,
     86400000, "\"5m\"", "how far a signed timestamp may be from now (stripe, slack, generic)"},
    {"id_header", SL_KEY_STRING, SL_CONF_FIELD(sl_source_webhook_conf, id_header), 0, 0, "none",
     "generic: the header with the delivery id used as event id and for dedupe"},
    {"dedupe", SL_KEY_DURATION, SL_CONF_FIELD(sl_source_webhook_conf, dedupe_ms), 1000,
     30LL * 86400000, "\"24h\"",
     "how long a delivery id is remembered: a repeat within it is not stored again"},
};

static const sl_source_webhook_conf webhook_defaults = {
    .tolerance_ms = 300000,
    .dedupe_ms = 24LL * 3600 * 1000,
};

/* `sluice check`: what a webhook requires, then sl_webhook_source_check(). */
static void webhook_check_conf(const sl_source_config *cfg, const sl_conf_check *chk)
{
    const sl_source_webhook_conf *wc = cfg->conf;
    sl_error err = {0};
    if (!cfg->name || !wc->preset || !wc->secret)
        chk->problem(chk->ctx, NULL,
                     "name, preset and secret are required (the URL is /v1/webhooks/NAME)");
    else if (sl_webhook_source_check(cfg, &err))
        chk->problem(chk->ctx, NULL, "%s", err.msg);
}

const sl_source_ops sl_source_webhook_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "webhook",
    .conf_keys = webhook_keys,
    .nconf_keys = sizeof webhook_keys / sizeof *webhook_keys,
    .conf_size = sizeof(sl_source_webhook_conf),
    .conf_defaults = &webhook_defaults,
    .doc = "SaaS webhooks on `POST /v1/webhooks/NAME`, signature verified before anything is "
           "stored",
    .check_conf = webhook_check_conf,
    .no_start = true,
};
