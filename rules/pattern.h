/*
 * rules/pattern.h — EventBridge event patterns: compile once, match many.
 *
 * A pattern is the JSON text of an Amazon EventBridge event pattern (so
 * patterns can be pasted from EventBridge). sl_pattern_compile() turns it into
 * a tree of field names -> lists of matchers; sl_pattern_match() walks an
 * event's JSON text with the non-allocating scanner of core/base/json.h and
 * compares fields as it goes, without building a DOM.
 *
 * Supported: exact values (string, number, true, false, null), arrays in the
 * pattern as OR, arrays in the event (a field matches when any element does),
 * nested objects, "$or", and the operators prefix, suffix (both also with
 * {"equals-ignore-case": s}), anything-but (a value, a list of strings or of
 * numbers, {"prefix": s | [s…]}, {"suffix": s | [s…]},
 * {"equals-ignore-case": s | [s…]}, {"wildcard": s | [s…]}), numeric (=, <,
 * <=, >, >= and two-sided ranges), exists, equals-ignore-case, wildcard and
 * cidr (IPv4 and IPv6).
 *
 * Semantics. Quotes are from the EventBridge user guide ("Event patterns",
 * "Content filtering", "Matching null values and empty strings", "Arrays")
 * and from the README and rule compiler of aws/event-ruler, the library
 * EventBridge matches with ("ruler" below).
 *
 *  - Every field of a pattern object must match (AND); the values listed for
 *    one field are alternatives (OR). "For an event pattern to match an
 *    event, the event must contain all the field names listed in the event
 *    pattern ... with the same nesting structure"; other event fields are
 *    ignored.
 *  - Strings: "exact character-by-character matching without case-folding or
 *    any other string normalization" (escapes are decoded first, on both
 *    sides). Strings only match strings ("3" is not 3), null only null, and
 *    "" only "" ("Null values and empty strings are not interchangeable").
 *  - Numbers as exact values: "For numbers, EventBridge uses string
 *    representation. For example, 300, 300.0, and 3.0e2 are not considered
 *    equal." So [300] matches the event text 300 and not 300.0 or 3e2; use
 *    {"numeric": ["=", 300]} to compare by value.
 *  - numeric compares by value (as doubles): ["=", 3.018e2] matches 301.8.
 *    "Numeric matching ... is limited to values between -5.0e9 and +5.0e9
 *    inclusive": an operand outside that range is refused, and an event
 *    number outside it matches no numeric operator. As in ruler, a range has
 *    at most one lower bound (> or >=) given first and one upper bound (< or
 *    <=), "=" stands alone, and the lower bound must be less than the upper
 *    one, a missing bound being the limit itself (so [">", 5, "<", 5],
 *    [">=", 5e9] and ["<", -5e9] are refused). Operands with more than six
 *    decimals are accepted and compared as doubles.
 *  - anything-but "matches anything except what's provided in the rule":
 *    every present leaf value that is not excluded matches, whatever its
 *    type (so {"anything-but": "a"} matches true, null and 5, and a list of
 *    numbers matches every string), but a missing field does not. Numbers
 *    in anything-but compare by value and must lie within -5e9..5e9. Lists
 *    hold "only strings, or only numbers" and must not be empty; prefix,
 *    suffix, equals-ignore-case and wildcard take a string or a non-empty
 *    list of strings (ruler accepts lists for all four); an empty prefix or
 *    suffix is refused ("Null prefix/suffix not allowed" in ruler).
 *  - prefix, suffix, equals-ignore-case, wildcard and cidr only match
 *    strings. An empty prefix or suffix matches every string.
 *  - Case folding (equals-ignore-case, and prefix/suffix with it) is done
 *    per character as ruler does: an event character matches a pattern
 *    character written as is, lower-cased or upper-cased (Unicode simple
 *    case mapping, so "CAFÉ" matches "café"; ASCII operands compare ASCII
 *    letters only, so "k" does not match the Kelvin sign).
 *  - wildcard: '*' matches any run of characters; "\*" is a literal star and
 *    "\\" a literal backslash; a backslash before anything else and
 *    "consecutive wildcard characters are not allowed" (both refused).
 *  - cidr needs "address/length" (a bare address is refused, as in ruler:
 *    "Malformed CIDR, one '/' required"); IPv4 lengths 0-32, IPv6 0-128;
 *    host bits in the pattern are ignored (10.0.0.7/8 is 10.0.0.0/8). An
 *    event string matches when it is an address of the same family inside
 *    the block; IPv6 written with a dotted IPv4 tail is not an address here
 *    (ruler's IPv6 syntax has no dots).
 *  - exists: "Exists matching only works on leaf nodes." A field holding an
 *    object, or an array without leaf values ([] or [{…}]), does not exist;
 *    null is a value, so it exists. {"exists": false} also matches when an
 *    enclosing object is missing.
 *  - Arrays in the event: a leaf matches when any element (at any depth of
 *    nested arrays) does. An object pattern matches an array when one
 *    element matches the whole object, so two fields never match from
 *    different elements of the same array (ruler's "array consistency").
 *  - "$or" takes an array of at least two non-empty pattern objects (ruler
 *    README: "There are 2+ objects in the "$or" array"); inside them, ruler's
 *    reserved words (prefix, numeric, exists, ... and =, <, >, the full list
 *    is in pattern.c) cannot be field names. $or may sit at any level and
 *    nest.
 *  - Refused: a pattern that is not an object; empty objects anywhere
 *    ("Empty objects are not allowed" in ruler), so {} too; a field whose
 *    value is not an object or an array ({"source": "x"}); empty arrays;
 *    arrays nested in a leaf array; operator objects with zero or several
 *    keys; unknown operators; operands of the wrong type; more than 64
 *    fields in one object; nesting deeper than 64 objects; more than
 *    SL_PATTERN_MAX_COMBINATIONS (1,000) combinations, EventBridge's limit
 *    (counted as below).
 *  - Duplicate keys in the pattern text: "if you include a key more than
 *    once the last reference will be the one used to evaluate events" — the
 *    last occurrence replaces the earlier ones whole (ruler merges duplicate
 *    objects path by path; sluice follows the guide's sentence). Duplicate
 *    keys in the event are all looked at: a field matches when any
 *    occurrence does.
 *  - A key with a dot is just a name: {"a.b": [1]} does not match
 *    {"a": {"b": 1}} (ruler flattens both to "a.b"; its README says not to
 *    rely on that).
 */
#ifndef SL_PATTERN_H
#define SL_PATTERN_H

#include "rules/evview.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/base/err.h"

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

/* The most combinations a pattern may have (EventBridge's limit): the values
 * of its fields multiply, the alternatives of a "$or" add up (and multiply
 * the fields beside it), so {"a": [1, 2], "$or": [{"b": [1, 2, 3]}, {"c":
 * [1]}]} has 2 * (3 + 1) = 8. More is refused with SL_EINVAL and the count
 * in the message. */
#define SL_PATTERN_MAX_COMBINATIONS 1000

/* Matches the event given as JSON text [event_json, event_json + len) (a
 * JSON object, typically a CloudEvent). Returns 0 and sets *matched. Returns
 * SL_EPARSE or SL_EPARTIAL when the event is not valid JSON, SL_EINVAL when
 * it is not an object, SL_ENOMEM when a very long escaped string or number
 * could not be decoded (the only case that allocates); *matched is left
 * untouched on error. The event buffer is only read. */
int sl_pattern_match(const sl_pattern *p, const char *event_json, size_t len, bool *matched,
                     sl_error *err);

/* Whether pattern p matches the parsed event. Never allocates. */
bool sl_pattern_match_event(const sl_pattern *p, const sl_evview *ev);

/* Frees a pattern; NULL is allowed. */
void sl_pattern_free(sl_pattern *p);

#endif
