/*
 * connectors/source_webhook.h — source.webhook: SaaS webhooks received on
 * POST /v1/webhooks/NAME, verified (connectors/webhook_verify.h) before
 * anything is stored, turned into one CloudEvent each, deduplicated by
 * delivery id. The HTTP layer (http/http_webhook.c) publishes
 * the event through the same path as ingest and answers.
 */
#ifndef SL_SOURCE_WEBHOOK_H
#define SL_SOURCE_WEBHOOK_H

#include "connectors/webhook_verify.h"
#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/bus/connector.h"

#include <stdint.h>

typedef struct sl_webhook_source sl_webhook_source;

/* source.webhook { … } (sl_source_config.conf). */
typedef struct sl_source_webhook_conf {
    char *preset;           /* "github" | "stripe" | "slack" | "generic" */
    char *secret;           /* one, or several comma-separated (rotation) */
    char *header;           /* generic: the signature header */
    char *algorithm;        /* generic: sha1 | sha256 | sha512 */
    bool base64;            /* generic: encoding = "base64" (default "hex") */
    char *prefix;           /* generic: e.g. "sha256=" */
    char *timestamp_header; /* generic */
    int64_t tolerance_ms;   /* timestamp window; default 5 min */
    char *id_header;        /* generic: the delivery id header used for dedupe */
    int64_t dedupe_ms;      /* how long a delivery id is remembered; default 24 h */
} sl_source_webhook_conf;

/* The kind's table: its keys and checks (the preset, its keys); no open():
 * the HTTP API serves webhooks (http/http_webhook.c, through
 * sl_webhook_source_new()). */
extern const sl_source_ops sl_source_webhook_ops;

/* What to do with one request. */
typedef enum sl_webhook_action {
    SL_WEBHOOK_STORE,  /* publish res->event into res->set, then answer 200 */
    SL_WEBHOOK_ANSWER, /* answer res->status with res->body, store nothing */
} sl_webhook_action;

typedef struct sl_webhook_result {
    sl_webhook_action action;
    /* ANSWER: 200 (Slack challenge, duplicate), 400 (the preset cannot map a
     * verified request), 401 (signature), 409 (the same delivery id is being
     * stored by another request), 500 (out of memory). */
    unsigned status;
    const char *code; /* ANSWER with an error: "InvalidSignature", … (static) */
    /* ANSWER: the response body, complete: {"error":code,"message":…} for
     * errors, {"duplicate":true,"id":…} or the bare challenge text. */
    sl_buf body;
    const char *content_type; /* ANSWER: of body (static) */
    sl_buf event;             /* STORE: the CloudEvent JSON (structured mode, with lane) */
    size_t event_len;         /* STORE: its length in bytes (kept when event is not) */
    char set[129];            /* STORE: the set */
    /* STORE: the delivery id claimed for dedupe ("" none): pass res to
     * sl_webhook_source_stored() once the publish succeeded or failed. */
    char id[129];
    int64_t now_ms; /* STORE: the time handle was given (dedupe times come from it) */
} sl_webhook_result;

/* Builds a webhook from its config (checked with sl_webhook_source_check(),
 * then copied: cfg may go away). Returns 0 with *out, or SL_EINVAL with err
 * saying which key is wrong, or SL_ENOMEM; *out is untouched on error.
 * Free with sl_webhook_source_free(). */
int sl_webhook_source_new(const sl_source_config *cfg, sl_webhook_source **out, sl_error *err);

/* Frees w (NULL is fine). No other call may be using it. */
void sl_webhook_source_free(sl_webhook_source *w);

/* The config check behind `sluice check`: name (a set-name-like path
 * segment), set, preset, secrets, lane; the generic-only keys (header,
 * algorithm other than sha256, encoding base64, prefix, timestamp_header,
 * id_header) refused on the other presets; tolerance and dedupe not
 * negative (0: their defaults, 5 min and 24 h). Returns 0 or SL_EINVAL with
 * err (never quoting a secret). */
int sl_webhook_source_check(const sl_source_config *cfg, sl_error *err);

/* The webhook's name (owned by w). */
const char *sl_webhook_source_name(const sl_webhook_source *w);

/* Verifies and maps one request (headers through get(ctx, name), the raw
 * body, now in Unix ms); fills res, which the caller initialised with
 * sl_webhook_result_init() and frees with sl_webhook_result_free(). Safe to
 * call from several threads at once. After a STORE, the caller must call
 * sl_webhook_source_stored() exactly once. */
void sl_webhook_source_handle(sl_webhook_source *w, sl_webhook_header_fn *get, void *ctx,
                              const char *body, size_t len, int64_t now_ms, sl_webhook_result *res);

/* The event of a STORE result was stored (its delivery id is remembered for
 * dedupe, and counted accepted) or not (the id is forgotten, so the sender's
 * retry is stored; counted failed). Ignores other results. Any thread. */
void sl_webhook_source_stored(sl_webhook_source *w, const sl_webhook_result *res, bool stored);

void sl_webhook_result_init(sl_webhook_result *res);
void sl_webhook_result_free(sl_webhook_result *res);

/* Appends the "# HELP"/"# TYPE" lines of the webhook metric family; write
 * them once before the lines of every webhook. Returns 0 or SL_ENOMEM. */
int sl_webhook_source_metrics_header(sl_buf *out);

/* Appends w's Prometheus samples (no HELP/TYPE lines):
 * sluice_webhook_requests_total{webhook="NAME",outcome="accepted|duplicate|
 * in_progress|challenge|bad_request|failed|error"} and, per reason,
 * {webhook="NAME",outcome="invalid_signature",reason="missing_header|
 * malformed_header|stale_timestamp|no_match"}. Returns 0 or SL_ENOMEM. */
int sl_webhook_source_metrics(sl_webhook_source *w, sl_buf *out);

#endif
