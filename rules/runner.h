/*
 * rules/runner.h — rules run as durable consumers (ARCHITECTURE.md §1, §8).
 *
 * Each rule reads its set from its own cursor per partition (rules/cursor.h),
 * evaluates events in a pool of worker threads (each with its own Lua state,
 * rules/rule.h), hands the payloads to its targets (core/connector.h) and
 * moves the cursor only when every target accepted them. One partition of
 * one rule is processed by one worker at a time, in offset order, so order
 * per partition is kept.
 *
 * Failures: an event that fails evaluation (Lua error, budget, memory, a
 * transform returning garbage) or that a target refuses as permanently
 * invalid is counted as failed, logged with the rule's name and the reason,
 * and skipped (retries and dead-letter sets are the targets issue's). A
 * target that fails otherwise (disk error, target set full) holds the
 * partition: the same batch is delivered again after a back-off (1 s
 * doubling to 30 s), never skipped.
 */
#ifndef SL_RUNNER_H
#define SL_RUNNER_H

#include "core/buf.h"
#include "core/config.h"
#include "core/databus.h"
#include "core/err.h"
#include "core/set.h"

typedef struct sl_runner sl_runner;

typedef struct sl_runner_options {
    const sl_config *cfg; /* must outlive the runner */
    sl_sets *sets;        /* every set the rules read is declared in cfg */
    sl_databus *bus;
    const char *data_dir; /* cursors live in DATA/rules */
    unsigned workers;     /* 0: cfg->workers, else the number of CPUs */
} sl_runner_options;

/* Opens every rule's cursors and targets and starts the workers; each rule
 * catches up from its cursor at once. Returns 0 and *out, or an SL_E… code
 * with err (nothing left running). */
int sl_runner_start(const sl_runner_options *opts, sl_runner **out, sl_error *err);

/* Wakes the rules reading (set, partition); fits sl_databus_append_fn. */
void sl_runner_on_append(void *ctx, sl_set *set, int32_t partition, int64_t end);

/* GET /v1/rules: {"rules":[{name, set, enabled, targets, partitions:[{partition,
 * cursor, end, lag}], lag, read, matched, filtered, dropped, failed,
 * delivered, retries, last_error}]} */
int sl_runner_rules_json(sl_runner *r, sl_buf *out);

/* Prometheus lines for /metrics (sluice_rule_*{rule="…"}). */
int sl_runner_metrics(sl_runner *r, sl_buf *out);

/* Lets the batches in progress finish (their deliveries complete and their
 * cursors commit; targets that can be slow, like target.http, are told to
 * hurry and fail what they cannot finish within a short grace, which is
 * delivered again after the restart), stops the workers, syncs and closes
 * every cursor and target, and frees the runner. NULL is ignored. */
void sl_runner_stop(sl_runner *r);

#endif
