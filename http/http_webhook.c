/*
 * http/http_webhook.c — POST /v1/webhooks/{name}: hands the
 * request to the configured source.webhook (through the router's hooks),
 * answers what it decided (401, 400, a duplicate, Slack's challenge), or
 * publishes its one CloudEvent through ingest's path and answers once the
 * event is stored, telling the webhook the outcome so that it remembers the
 * delivery id only then.
 */
#include "http/http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the publish callback needs after the request handler has returned. */
typedef struct pending {
    sl_http *h;
    char name[129];
    sl_webhook_result res; /* action, set, id and event_len only: not the body or event */
} pending;

static void on_published(void *ctx, int status)
{
    pending *p = ctx;
    const sl_http_hooks *hk = &p->h->hooks;
    if (hk->webhook_stored)
        hk->webhook_stored(hk->ctx, p->name, &p->res, status == 0);
    free(p);
}

static const char *get_header(void *ctx, const char *name)
{
    sl_http_req *r = ctx;
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

enum MHD_Result sl__http_webhook(sl_http_req *r, const char *name)
{
    const sl_http_hooks *hk = &r->h->hooks;
    if (!hk->webhook || strlen(name) >= sizeof((pending *)0)->name)
        return sl__http_error(r, 404, "NoSuchWebhook", "no source.webhook is named \"%.128s\"",
                              name);
    sl_webhook_result res;
    sl_webhook_result_init(&res);
    const char *body = r->body.data ? (const char *)r->body.data : "";
    int rc = hk->webhook(hk->ctx, name, get_header, r, body, r->body.len, &res);
    enum MHD_Result ret;
    if (rc == SL_ENOENT) {
        ret = sl__http_error(r, 404, "NoSuchWebhook", "no source.webhook is named \"%s\"", name);
    } else if (rc) {
        ret = sl__http_error(r, 500, "Internal", "webhook \"%s\": %s", name, sl_strerror(rc));
    } else if (res.action == SL_WEBHOOK_ANSWER) {
        ret = sl__http_reply(r, res.status, &res.body,
                             res.content_type ? res.content_type : "application/json",
                             res.status == 409 ? 1 : 0);
    } else {
        pending *p = calloc(1, sizeof *p);
        if (!p) {
            if (hk->webhook_stored)
                hk->webhook_stored(hk->ctx, name, &res, false);
            ret = sl__http_error(r, 500, "Internal", "out of memory; nothing was stored");
        } else {
            p->h = r->h;
            snprintf(p->name, sizeof p->name, "%s", name);
            p->res.action = res.action;
            p->res.status = res.status;
            p->res.now_ms = res.now_ms;
            p->res.event_len = res.event.len;
            memcpy(p->res.set, res.set, sizeof p->res.set);
            memcpy(p->res.id, res.id, sizeof p->res.id);
            /* p belongs to on_published() from here, which may run (and free
             * it) on the Databus's thread before this returns. */
            ret = sl__http_publish_json(r, res.set, (const char *)res.event.data, res.event.len,
                                        on_published, p);
        }
    }
    sl_webhook_result_free(&res);
    return ret;
}
