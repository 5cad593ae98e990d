/* connectors/source_webhook.c — placeholder until source.webhook is written. */
#include "connectors/source_webhook.h"

#include <stdlib.h>
#include <string.h>

int sl_webhook_source_new(const sl_source_config *cfg, sl_webhook_source **out, sl_error *err)
{
    (void)cfg, (void)out;
    return sl_error_set(err, SL_EINVAL, "source.webhook is not built yet");
}
void sl_webhook_source_free(sl_webhook_source *w) { (void)w; }
int sl_webhook_source_check(const sl_source_config *cfg, sl_error *err)
{
    (void)cfg, (void)err;
    return 0;
}
void sl_webhook_source_handle(sl_webhook_source *w, sl_webhook_header_fn *get, void *ctx,
                              const char *body, size_t len, int64_t now_ms,
                              sl_webhook_result *res)
{
    (void)w, (void)get, (void)ctx, (void)body, (void)len, (void)now_ms;
    res->action = SL_WEBHOOK_ANSWER;
    res->status = 501;
}
void sl_webhook_source_stored(sl_webhook_source *w, const sl_webhook_result *res, bool stored)
{
    (void)w, (void)res, (void)stored;
}
void sl_webhook_result_init(sl_webhook_result *res) { memset(res, 0, sizeof *res); }
void sl_webhook_result_free(sl_webhook_result *res)
{
    sl_buf_free(&res->body);
    sl_buf_free(&res->event);
}
int sl_webhook_source_metrics(sl_webhook_source *w, sl_buf *out)
{
    (void)w, (void)out;
    return 0;
}
