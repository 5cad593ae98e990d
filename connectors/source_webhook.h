/*
 * connectors/source_webhook.h — source.webhook: SaaS webhooks received on
 * POST /v1/webhooks/NAME, verified (connectors/webhook_verify.h) before
 * anything is stored, turned into one CloudEvent each, deduplicated by
 * delivery id. The HTTP layer (connectors/source_http_webhook.c) publishes
 * the event through the same path as ingest and answers.
 */
#ifndef SL_SOURCE_WEBHOOK_H
#define SL_SOURCE_WEBHOOK_H

#include "connectors/webhook_verify.h"
#include "core/buf.h"
#include "core/config.h"
#include "core/err.h"

#include <stdint.h>

typedef struct sl_webhook_source sl_webhook_source;

/* What to do with one request. */
typedef enum sl_webhook_action {
    SL_WEBHOOK_STORE,     /* publish res->event into res->set, then answer 200 */
    SL_WEBHOOK_ANSWER,    /* answer res->status with res->body, store nothing */
} sl_webhook_action;

typedef struct sl_webhook_result {
    sl_webhook_action action;
    unsigned status;    /* ANSWER: 200 (challenge, duplicate), 400, 401 */
    const char *code;   /* ANSWER with an error: "InvalidSignature", … */
    sl_buf body;        /* ANSWER: the response body (JSON or the challenge text) */
    const char *content_type;
    sl_buf event;       /* STORE: the CloudEvent JSON */
    char set[129];      /* STORE: the set */
    char id[129];       /* STORE: the delivery id to remember once stored ("" none) */
} sl_webhook_result;

/* Builds a webhook from its checked config (copied). 0 or SL_EINVAL/SL_ENOMEM. */
int sl_webhook_source_new(const sl_source_config *cfg, sl_webhook_source **out, sl_error *err);
void sl_webhook_source_free(sl_webhook_source *w);

/* The config check behind `sluice check` (preset, secrets, generic keys). */
int sl_webhook_source_check(const sl_source_config *cfg, sl_error *err);

/* Verifies and maps one request; fills res (init it with
 * sl_webhook_result_init, free with sl_webhook_result_free). */
void sl_webhook_source_handle(sl_webhook_source *w, sl_webhook_header_fn *get, void *ctx,
                              const char *body, size_t len, int64_t now_ms,
                              sl_webhook_result *res);

/* The event of res was stored (remember its delivery id), or not (forget). */
void sl_webhook_source_stored(sl_webhook_source *w, const sl_webhook_result *res, bool stored);

void sl_webhook_result_init(sl_webhook_result *res);
void sl_webhook_result_free(sl_webhook_result *res);

/* Prometheus lines: accepted, refused (per reason), duplicates, challenges. */
int sl_webhook_source_metrics(sl_webhook_source *w, sl_buf *out);

#endif
