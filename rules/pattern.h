/*
 * rules/pattern.h — EventBridge event patterns: compile once, match many.
 *
 * A pattern is the JSON text of an Amazon EventBridge event pattern (so
 * patterns can be pasted from EventBridge). sl_pattern_compile() turns it into
 * a tree of field names -> lists of matchers; sl_pattern_match() walks an
 * event's JSON text with the non-allocating scanner of core/json.h and
 * compares fields as it goes, without building a DOM.
 *
 * Supported: exact values (string, number, true, false, null), arrays in the
 * pattern as OR, arrays in the event (a field matches when any element does),
 * nested objects, "$or", and the operators prefix, suffix (both also with
 * {"equals-ignore-case": s}), anything-but (a value, a list of strings or of
 * numbers, {"prefix": s}, {"suffix": s}, {"equals-ignore-case": s | [s…]},
 * {"wildcard": s | [s…]}), numeric (=, <, <=, >, >= and two-sided ranges),
 * exists, equals-ignore-case, wildcard and cidr (IPv4 and IPv6).
 *
 * Semantics, as EventBridge documents them: every field of a pattern object
 * must match (AND); the values listed for one field are alternatives (OR);
 * strings only match strings and numbers only numbers ("3" is not 3), and
 * numbers compare as doubles (3, 3.0 and 3e0 are equal); a field missing from
 * the event fails every matcher except {"exists": false}; exists looks at
 * leaf values only, so a field holding an object, or an array without leaf
 * values, counts as not existing. Case folding for equals-ignore-case is
 * ASCII only.
 */
#ifndef SL_PATTERN_H
#define SL_PATTERN_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

/* A compiled pattern; immutable after compile, so one pattern may be matched
 * from several threads at once. */
typedef struct sl_pattern sl_pattern;

/* Compiles the pattern given as JSON text [json, json + len) (a JSON object).
 * Returns 0 and stores a new pattern in *out (caller frees with
 * sl_pattern_free()). Returns SL_EPARSE when the text is not JSON, SL_EINVAL
 * when it is not a valid pattern (err names the field and the reason, e.g.
 * "detail.amount: numeric needs an operator and a number"), or SL_ENOMEM;
 * *out is left untouched on error. */
int sl_pattern_compile(const char *json, size_t len, sl_pattern **out, sl_error *err);

/* Matches the event given as JSON text [event_json, event_json + len) (a
 * JSON object, typically a CloudEvent). Returns 0 and sets *matched. Returns
 * SL_EPARSE or SL_EPARTIAL when the event is not valid JSON, SL_EINVAL when
 * it is not an object, SL_ENOMEM when a very long escaped string or number
 * could not be decoded (the only case that allocates); *matched is left
 * untouched on error. The event buffer is only read. */
int sl_pattern_match(const sl_pattern *p, const char *event_json, size_t len, bool *matched,
                     sl_error *err);

/* Frees a pattern; NULL is allowed. */
void sl_pattern_free(sl_pattern *p);

#endif
