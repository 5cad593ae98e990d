/*
 * server/sources.h — the running sources of a config: one instance per
 * source.KIND { … } block, each with its host (core/bus/connector.h): the
 * checks, batching and Databus publishing every source shares, with the
 * counters GET /v1/sources and /metrics show. source.webhook instances are
 * kept here too and served by the HTTP API through the router's hooks.
 */
#ifndef SL_SOURCES_H
#define SL_SOURCES_H

#include "connectors/source_webhook.h"
#include "core/base/buf.h"
#include "server/config.h"
#include "core/bus/databus.h"
#include "core/base/err.h"
#include "core/bus/set.h"

typedef struct sl_sources sl_sources;

typedef struct sl_sources_options {
    const sl_config *cfg; /* must outlive the sources */
    sl_sets *sets;
    sl_databus *bus;
    const char *data_dir;
    struct sl_lanes *lanes; /* admits every event's lane (core/bus/lanes.h); NULL: any lane */
} sl_sources_options;

/* Opens every source of cfg. On error nothing is left running. */
int sl_sources_start(const sl_sources_options *opts, sl_sources **out, sl_error *err);

/* The webhook called name, or NULL. */
sl_webhook_source *sl_sources_webhook(sl_sources *s, const char *name);

/* After a webhook's STORE: tells the webhook (dedupe) and counts the event
 * when stored. */
void sl_sources_webhook_stored(sl_sources *s, const char *name, const sl_webhook_result *res,
                               bool stored);

/* GET /v1/sources: {"sources":[{name, kind, set, events, …, healthy}]}. */
int sl_sources_json(sl_sources *s, sl_buf *out);

/* /metrics lines of every source. */
int sl_sources_metrics(sl_sources *s, sl_buf *out);

/* Stops every source: asks its threads to stop (flushes in progress end
 * with SL_ESHUTDOWN), joins them and closes its connector instance (with
 * its parse function's VM: what only the threads used). The handle stays
 * valid until sl_sources_free(): the webhooks, which have no threads, keep
 * being served, so that a reload does not answer 404 meanwhile, and GET
 * /v1/sources keeps listing every source (stopped). A second call does
 * nothing. NULL is ignored. */
void sl_sources_stop(sl_sources *s);

/* Stops the sources if needed and frees them. NULL is ignored. */
void sl_sources_free(sl_sources *s);

#endif
