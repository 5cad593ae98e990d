/*
 * rules/runner.h — rules run as durable consumers (ARCHITECTURE.md §1, §8).
 *
 * Each rule reads its set from its own cursor per partition (core/bus/cursor.h),
 * evaluates events in a pool of worker threads (each with its own Lua state,
 * rules/rule.h), hands the payloads to its targets (core/bus/connector.h) and
 * moves the cursor only when every target accepted them. One partition of
 * one rule is processed by one worker at a time, in offset order, so order
 * per partition is kept.
 *
 * Failures (docs/targets.md, "Retries and dead letters"): a payload a
 * target failed in a retryable way is delivered again to that target only,
 * after the rule's back-off (retry { … }: exponential with full jitter),
 * until `attempts` or `max_age` run out. Then, or at once when a target
 * refuses it for good (SL_EINVAL), or when the rule's evaluation of the event
 * failed (Lua error, budget, memory), the source event goes to the rule's
 * dlq set with sluiceerror, sluiceattempts, sluicerule, sluicetarget and
 * sluicefailedat; without a dlq it is dropped, counted and logged. With
 * `ordered` (the default) a payload waiting for a retry holds its partition
 * for this rule; without, it waits aside (up to 4096 per partition) while
 * later events go on. Either way the cursor commits only up to the oldest
 * event still unresolved, so a crash repeats and never loses.
 */
#ifndef SL_RUNNER_H
#define SL_RUNNER_H

#include "core/base/buf.h"
#include "core/bus/databus.h"
#include "core/base/err.h"
#include "core/bus/lanes.h"
#include "core/bus/set.h"
#include "rules/ruleset.h"

typedef struct sl_runner sl_runner;

typedef struct sl_runner_options {
    sl_ruleset rules; /* the config's rules (a view: the config must outlive the runner) */
    sl_sets *sets;    /* every set the rules read is declared in the config */
    sl_databus *bus;
    const char *data_dir; /* cursors live in DATA/rules */
    unsigned workers;     /* 0: rules.workers, else the number of CPUs */
    sl_lanes *lanes;      /* the lanes to run (sl_lanes_each); NULL: base lane only */
    /* The cursor table of the rules over Kafka-backed sets (core/bus/kgroup.h);
     * NULL when the config has none. */
    struct sl_kcursors *kcursors;
    /* How the runner reaches the table and the groups (see
     * sl_runner_kafka_ops below); NULL: no table, no group figures. */
    const struct sl_runner_kafka_ops *kafka;
} sl_runner_options;

struct sl_kgroup;
struct sl_kgroup_info;

/* The functions of core/bus/kgroup.h the runner calls, as pointers with
 * their exact signatures, so that rules/ links without the group module
 * and tests can give an in-memory table. The server fills it with
 * sl_kcursors_get, sl_kcursors_put, sl_kcursors_flush, sl_kcursors_key,
 * sl_kgroup_info_get, sl_kgroup_committed (and group_run NULL). Any entry
 * may be NULL: no table (get finds nothing, put and flush do nothing), the
 * key "SET/RULE/LANE/PARTITION", no group figures. */
typedef struct sl_runner_kafka_ops {
    int (*cursor_get)(struct sl_kcursors *k, const char *key, int64_t wait_ms, int64_t *offset);
    int (*cursor_put)(struct sl_kcursors *k, const char *key, int64_t offset);
    int (*cursor_flush)(struct sl_kcursors *k, int64_t wait_ms, sl_error *err);
    void (*cursor_key)(char *buf, size_t cap, const char *set, const char *rule, const char *lane,
                       int32_t partition);
    void (*group_info)(struct sl_kgroup *g, struct sl_kgroup_info *out);
    int64_t (*group_committed)(struct sl_kgroup *g, int32_t p);
    /* Whether the rules of set run in its group; NULL: sl_set_remote(set).
     * Tests mark a local set so. */
    bool (*group_run)(const sl_set *set);
    /* How long a revoke waits for turns in progress; 0: 30 s. */
    int64_t revoke_wait_ms;
} sl_runner_kafka_ops;

/* Opens every rule's cursors and targets and starts the workers; each rule
 * catches up from its cursor at once. Returns 0 and *out, or an SL_E… code
 * with err (nothing left running). */
int sl_runner_start(const sl_runner_options *opts, sl_runner **out, sl_error *err);

/* Lanes (ARCHITECTURE.md §7, docs/lanes.md). Every rule runs once per
 * lane, as its own consumer with its own cursors (DATA/rules/RULE/SET/lanes/
 * LANE/P.cursor), pools and counters, reading only that lane's events: the
 * base run reads the base lane; a lane's run evaluates the rule's override
 * for the lane if it has one, else the base rule when the lane falls back to
 * base, else only counts the events (lane_unrouted). */

/* Makes the runs of lane for every rule (those that exist are kept); their
 * cursors start at the partitions' next offsets. Call before the lane's
 * first event is published. Returns 0 or an SL_E… code with err. */
int sl_runner_add_lane(sl_runner *r, const sl_lane_info *lane, sl_error *err);

/* Stops the runs of lane without waiting for a turn in progress (their own
 * targets are cancelled; payloads waiting for a retry are given up) and
 * deletes their cursor files; the runs stay, idle, until the runner stops. */
void sl_runner_drop_lane(sl_runner *r, const char *lane);

/* For GET /v1/lanes, inside the lane's object: ,"delivered":N,"unrouted":N,
 * "rules":[{"rule","mode":"base"|"override"|"fallback"|"unrouted","lag",
 * "delivered","failed","dead_lettered","unrouted"}]. */
int sl_runner_lane_json(sl_runner *r, const char *lane, sl_buf *out);

/* Wakes the rules reading (set, partition) in lane (NULL: every lane); fits
 * sl_databus_append_fn. */
void sl_runner_on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane);

/* GET /v1/rules: {"rules":[{name, set, enabled, ordered, dlq, targets,
 * health:[{target, healthy, reason}], partitions:[{partition, cursor, end,
 * lag, shared}], lag, read, matched, filtered, dropped, failed, delivered,
 * retries, dead_lettered, discarded, retrying, last_error}]}; a rule over a
 * Kafka-backed set also has group and members, and lists only the
 * partitions this router owns, each with committed (docs/http-api.md). */
int sl_runner_rules_json(sl_runner *r, sl_buf *out);

/* Prometheus lines for /metrics (sluice_rule_*{rule="…"}). */
int sl_runner_metrics(sl_runner *r, sl_buf *out);

/* Starts a replay: the events of rule's set stored in [from_ms, to_ms)
 * (found through the time index; to_ms 0 or in the future: now) are
 * evaluated and delivered again to the rule's targets, with the attribute
 * "sluicereplay":"ID", by the same workers, without moving the rule's
 * cursor. Failures are retried and dead-lettered as for live events.
 * Several replays may run at once; they end with the runner (a reload or a
 * restart), and are not resumed. out gets the replay as JSON (see
 * sl_runner_replays_json). Returns 0, SL_ENOENT for an unknown rule,
 * SL_EINVAL for an empty window, with err. */
int sl_runner_replay(sl_runner *r, const char *rule, int64_t from_ms, int64_t to_ms, sl_buf *out,
                     sl_error *err);

/* {"replays":[{id, rule, from, to, state ("running"|"done"), started,
 * finished, read, matched, …, delivered, dead_lettered, partitions:[{partition,
 * start, end, position, done}]}]}, newest first; rule NULL: all rules. */
int sl_runner_replays_json(sl_runner *r, const char *rule, sl_buf *out);

/* ---- Kafka-backed sets (docs/scale-out.md) --------------------------------
 *
 * The runs of a Kafka-backed set read only the partitions this router owns
 * in the set's consumer group (core/bus/kgroup.h), nothing before the first
 * assignment, with their cursors in the cursor topic (opts.kcursors, key
 * sl_kcursors_key(set, rule, lane, partition)) instead of DATA/rules. The
 * server passes the group's callbacks on to these three (same contracts as
 * sl_kgroup_options'). The groups must be stopped before sl_runner_free()
 * (a revoke on a stopped runner is fine: it writes the cursors). Table
 * writes are at most once a second per run and partition from deliveries,
 * plus what moved at every committable(), on revoke and at
 * sl_runner_stop(); a lost assignment writes nothing. Replays of such a set
 * read every partition and use no table. */

/* Partitions of set become this router's: every run of the set starts on
 * them from its cursor in the table, else committed[i] (the group's offset:
 * the slowest rule's), else where a new rule starts. */
void sl_runner_kafka_assign(sl_runner *r, sl_set *set, const int32_t *parts,
                            const int64_t *committed, size_t n);

/* They are not this router's any more: returns once no turn of them runs
 * (deliveries in progress finished; payloads waiting for a retry are given
 * up: the next owner delivers them again from the cursor), with their
 * cursors written to the table (and flushed, unless lost), commit[i] the
 * slowest run's cursor of parts[i]. */
void sl_runner_kafka_revoke(sl_runner *r, sl_set *set, const int32_t *parts, size_t n, bool lost,
                            int64_t *commit);

/* commit[i]: the slowest run's cursor of owned partition parts[i] (-1 when
 * not owned). Writes cursors that moved since they were last written. */
void sl_runner_kafka_committable(sl_runner *r, sl_set *set, const int32_t *parts, size_t n,
                                 int64_t *commit);

/* The set's group, shown by GET /v1/rules ("group", "members", and per
 * owned partition "committed"); call before the group starts. */
void sl_runner_kafka_group(sl_runner *r, sl_set *set, struct sl_kgroup *g);

/* Lets the batches in progress finish (their deliveries complete and their
 * cursors commit; targets that can be slow, like target.http, are told to
 * hurry and fail what they cannot finish within a short grace, which is
 * delivered again after the restart) and stops the workers. Frees nothing:
 * the runner stays valid (idle) until sl_runner_free(). A second call does
 * nothing; NULL is ignored. */
void sl_runner_stop(sl_runner *r);

/* Stops the runner if needed, syncs and closes every cursor and target, and
 * frees it. NULL is ignored. */
void sl_runner_free(sl_runner *r);

#endif
