/*
 * rules/rule.h — evaluating a rule on events: match (C pattern) → filter
 * (Lua) → transform or transform_batch (Lua) → input transformer (C).
 *
 * A rule VM is one sandboxed Lua state that ran the config's source again,
 * holding each rule's functions as registry references: every rule worker
 * thread owns one (Lua states are single-threaded), and `sluice test` uses
 * one without a server. Evaluation never touches targets or cursors: it
 * turns input events into output payloads, so the runner (rules/runner.h)
 * decides what delivery and retries mean.
 */
#ifndef SL_RULE_H
#define SL_RULE_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "rules/ruleset.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_rule_vm sl_rule_vm;

/* Builds a VM for the rule set rs (the view is copied; the config it points
 * into must outlive the VM): a sandbox with the config's memory and
 * instruction limits, the config source run again, every rule's functions
 * and every source's `parse` function referenced. Returns 0 and *out, or
 * SL_ESCRIPT/SL_ENOMEM with err. */
int sl_rule_vm_new(const sl_ruleset *rs, sl_rule_vm **out, sl_error *err);
void sl_rule_vm_free(sl_rule_vm *vm);

/* How events reach the rule's Lua functions: as lazy copy-on-write proxies
 * over the event parsed once (rules/luaproxy.h; the default, measured
 * faster in bench/rules_bench.c) or, when tables is true, as plain tables
 * decoded and encoded whole (rules/luajson.h). A new VM uses tables when the
 * environment has SLUICE_LUA_TABLES=1. For comparisons and benchmarks. */
void sl_rule_vm_use_tables(sl_rule_vm *vm, bool tables);

/* Output payloads of an evaluation, back to back in data. Reusable: clear it
 * with sl_rule_out_reset(), free it with sl_rule_out_free(). */
typedef struct sl_rule_out {
    sl_buf data;
    size_t *ends; /* ends[i]: end of payload i in data */
    size_t n, cap;
} sl_rule_out;

void sl_rule_out_reset(sl_rule_out *o);
void sl_rule_out_free(sl_rule_out *o);
/* Payload i. */
const char *sl_rule_out_get(const sl_rule_out *o, size_t i, size_t *len);

/* What happened to one event. */
typedef enum sl_rule_outcome {
    SL_RULE_NO_MATCH, /* the pattern did not match */
    SL_RULE_FILTERED, /* filter() said false */
    SL_RULE_DROPPED,  /* transform() returned nil or an empty list */
    SL_RULE_MATCHED,  /* one or more payloads were added */
} sl_rule_outcome;

/* Evaluates rule config number rule (sl_ruleset_rule_at) on one event (JSON text): appends its
 * payloads to out. Returns 0 with *outcome, or, when the event fails (a Lua
 * error, an exceeded budget or memory cap, a transform that returned
 * something that is not an event, an event that is not JSON): SL_ESCRIPT,
 * SL_EBUDGET, SL_ENOMEM, SL_EINVAL with err saying why; out is then as it
 * was before the call. For a rule with transform_batch, use
 * sl_rule_eval_batch. */
int sl_rule_eval(sl_rule_vm *vm, size_t rule, const char *event, size_t len,
                 const sl_input_ctx *ictx, sl_rule_out *out, sl_rule_outcome *outcome,
                 sl_error *err);

/* sl_rule_eval() for an event already known to match the rule's pattern
 * (the runner's shared readers match all their rules at once,
 * rules/pattern_set.h): the pattern is not matched again. */
int sl_rule_eval_matched(sl_rule_vm *vm, size_t rule, const char *event, size_t len,
                         const sl_input_ctx *ictx, sl_rule_out *out, sl_rule_outcome *outcome,
                         sl_error *err);

/* For a rule with transform_batch: match and filter each event, then one
 * transform_batch call with the list of events that passed (skipped when
 * none did). *passed gets how many passed. Errors as for sl_rule_eval; on
 * error nothing is appended and the whole batch failed. */
int sl_rule_eval_batch(sl_rule_vm *vm, size_t rule, const char *const *events, const size_t *lens,
                       size_t n, const sl_input_ctx *ictx, sl_rule_out *out, size_t *passed,
                       sl_error *err);

/* ---- source.file's parse = function(line) ------------------------------------ */

/* What a line became. */
typedef enum sl_rule_parsed {
    SL_PARSED_SKIP,  /* the function returned nil or false: the line is dropped */
    SL_PARSED_TEXT,  /* a string: out holds it, to be wrapped as text data */
    SL_PARSED_DATA,  /* a table without specversion: out holds its JSON, to be wrapped */
    SL_PARSED_EVENT, /* a table with specversion: out holds a whole CloudEvent's JSON */
} sl_rule_parsed;

/* True when source number source of the rule set declared parse = function(line) … end. */
bool sl_rule_vm_has_parse(const sl_rule_vm *vm, size_t source);

/* Calls the parse function of source number source with the line (len bytes,
 * any bytes) as a Lua string, and appends what it returned to out as
 * *kind says. Returns 0; or, with out as it was: SL_EINVAL when the source
 * has no parse function or the function returned something else than nil,
 * false, a string or a table that encodes as JSON; SL_ESCRIPT, SL_EBUDGET,
 * SL_ENOMEM as for sl_rule_eval. err says why, naming the source. */
int sl_rule_vm_parse(sl_rule_vm *vm, size_t source, const char *line, size_t len, sl_buf *out,
                     sl_rule_parsed *kind, sl_error *err);

#endif
