/*
 * server/router.h — the running config: its sets, schemas, lanes, rule
 * runner and sources, swapped as a whole on SIGHUP, and the hooks through
 * which the HTTP API and the Databus reach them.
 *
 * `sluice serve -c FILE` keeps one router. A reload loads and checks the new
 * file completely first; a config with any mistake is refused with its
 * messages and the old one keeps running. A good one declares its new sets,
 * replaces the schemas, and restarts the rule runner: rules finish their
 * batch in progress, and every rule (old, changed or new) goes on from its
 * cursor on disk, so nothing is skipped or delivered twice across a reload.
 * Settings of sets that already hold events (partitions, ack, …) apply on
 * the next restart; the reload says so. The rules of Kafka-backed sets run
 * in the sets' consumer groups (kafka: the cluster, NULL for none): a
 * reload leaves the groups (their partitions' cursors written and offsets
 * committed) and joins them again with the new rules.
 */
#ifndef SL_ROUTER_H
#define SL_ROUTER_H

#include "http/http.h"
#include "server/config.h"
#include "core/bus/databus.h"
#include "core/base/err.h"
#include "core/base/kafka_admin.h"
#include "core/bus/set.h"

typedef struct sl_router sl_router;

/* Declares cfg's sets (call before traffic flows) and starts its rules.
 * Takes cfg (freed with the router, or here on error). Returns 0 or an SL_E…
 * code with err. */
int sl_router_start(sl_config *cfg, sl_sets *sets, sl_databus *bus, const char *data_dir,
                    const sl_kafka_cluster *kafka, sl_router **out, sl_error *err);

/* Replaces the running config with cfg (taken). Returns 0, or an SL_E… code
 * with err when the new rules could not start (the old ones run again). */
int sl_router_reload(sl_router *r, sl_config *cfg, sl_error *err);

/* Hooks for the HTTP API: schemas at ingest, GET /v1/rules, metrics. */
void sl_router_http_hooks(sl_router *r, sl_http_hooks *out);

/* Wakes the rules reading (set, partition); fits sl_databus_append_fn. */
/* sl_kafka_hooks.may_delete: a set the config declares, that a rule reads
 * or that a source writes to may not be deleted (SL_EBUSY with err naming
 * who uses it). */
int sl_router_may_delete(void *ctx, const sl_set *set, sl_error *err);
/* sl_kafka_hooks.has_schema: whether the config gives the set a schema for
 * events of type[0..len). */
bool sl_router_has_schema(void *ctx, const sl_set *set, const char *type, size_t len);

/* Whether the config file (not the EventBridge API's declarations)
 * declares rule / set name (http/aws.h's file_rule and file_set). */
bool sl_router_file_rule(void *ctx, const char *name);
bool sl_router_file_set(void *ctx, const char *name);

void sl_router_on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane);

/* Stops the rules (batches in progress finish) and releases the runner it
 * owns (its cursors sync, its targets close). The router stays valid for
 * the HTTP hooks and the Databus callback, which may still run: free it
 * with sl_router_free() once the HTTP server and the Databus have stopped.
 * NULL is ignored. */
void sl_router_stop(sl_router *r);

/* Stops the rules if needed and frees the router. NULL is ignored. */
void sl_router_free(sl_router *r);

#endif
