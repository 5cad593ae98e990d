/*
 * rules/pattern_set.h — many patterns matched at once: the patterns of every
 * rule that shares a reader compiled into one structure, so that matching an
 * event costs about the same with 1 or 1,000 patterns (ARCHITECTURE.md §7;
 * event-ruler's idea: the cost depends on the event, not the rule count).
 *
 * The answer is exactly what sl_pattern_match_event() gives for each pattern
 * one by one (tests/unit/test_pattern_set.c checks it differentially, with
 * every operator, and tests/fuzz/fuzz_pattern_set.c compares the two on
 * random input). How it works: rules/pattern_set_internal.h and docs/config.md,
 * "Many rules, one match".
 */
#ifndef SL_PATTERN_SET_H
#define SL_PATTERN_SET_H

#include "core/base/err.h"
#include "rules/evview.h"
#include "rules/pattern.h"

#include <stddef.h>
#include <stdint.h>

/* Immutable once built: one set may be matched from several threads, each
 * with its own scratch. */
typedef struct sl_pattern_set sl_pattern_set;

/* A thread's working memory for sl_pattern_set_match(). */
typedef struct sl_pattern_set_scratch sl_pattern_set_scratch;

/* Builds the set of n patterns; pats[i] NULL is a pattern that matches every
 * event (a rule without `match`). The patterns are only read, and must
 * outlive the set. Returns 0 and *out, or SL_ENOMEM/SL_EINVAL with err. */
int sl_pattern_set_build(const sl_pattern *const *pats, size_t n, sl_pattern_set **out,
                         sl_error *err);

/* Patterns in the set. */
size_t sl_pattern_set_count(const sl_pattern_set *ps);

/* Bytes the set holds (its own structures, not the patterns). */
size_t sl_pattern_set_bytes(const sl_pattern_set *ps);

void sl_pattern_set_free(sl_pattern_set *ps);

/* A scratch for ps (or any set of at most as many patterns); NULL when out
 * of memory. */
sl_pattern_set_scratch *sl_pattern_set_scratch_new(const sl_pattern_set *ps);
void sl_pattern_set_scratch_free(sl_pattern_set_scratch *scr);

/* Writes the numbers of the patterns that match the parsed event into out
 * (room for sl_pattern_set_count(ps) numbers), ascending, each once, and
 * returns how many. Never allocates. */
size_t sl_pattern_set_match(const sl_pattern_set *ps, const sl_evview *ev,
                            sl_pattern_set_scratch *scr, uint32_t *out);

#endif
