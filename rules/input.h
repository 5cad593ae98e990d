/*
 * rules/input.h — EventBridge's input transformer: what a rule delivers
 * instead of the whole event.
 *
 *   input = "$.data"                       -- deliver a sub-document
 *   input = { paths = { name = "$.data.user.name" },
 *             template = [[{"who": "<name>"}]] }
 *
 * Both are compiled once per rule; sl_input_apply() then runs per delivered
 * event over the event's JSON text with the non-allocating scanner of
 * core/base/json.h (no DOM), appending straight to the caller's buffer.
 *
 * Paths. A JSONPath subset: "$" followed by any number of steps ".name",
 * "['name']" / "[\"name\"]" (any characters; backslash escapes the quote or
 * itself) and "[index]" (a decimal array index, no sign, no leading zeros).
 * A dot name is one or more bytes other than . [ ] ' " \ * and whitespace or
 * control characters (so "$.detail.instance-id" and "$.a/b" work). Refused
 * with SL_EINVAL: a path not starting with "$", empty steps ("$.", "$..a"),
 * wildcards ("*", "[*]"; EventBridge has them, sluice does not yet),
 * negative or non-decimal indexes, unterminated brackets. Matching is exact
 * and case-sensitive against the decoded member names of the event (escaped
 * names in the event match too); when the event repeats a member name the
 * first occurrence is used.
 *
 * Template kind. Decided once, at compile time, from the first byte that is
 * not whitespace: "{", "[" or '"' make a JSON template; anything else is a
 * text template (EventBridge accepts both: "<instance> is in state <status>"
 * is the API reference's own example of a plain-text template).
 *
 * Placeholders are <name> with name in [A-Za-z0-9_.-]+. A '<' that is not
 * followed by a name character is literal text ("a < b", "x <= 3"); a '<'
 * followed by a name that does not end in '>' is refused (unterminated
 * placeholder). As in EventBridge, '<' and '>' cannot be escaped. Whether a
 * placeholder of a JSON template is inside a JSON string is decided
 * lexically: between an unescaped '"' and the next one (a backslash in a
 * string escapes the following byte, except that it never hides a '<').
 *
 * What each value becomes (EventBridge user guide, "Transforming input" and
 * its "Common issues" list):
 *
 *   JSON template, placeholder outside a string ("state": <state>):
 *     the JSON value. Strings get their quotes ("EventBridge automatically
 *     adds quotes to string variable values ... does not add quotes to
 *     variables that represent JSON objects or arrays"); numbers, true,
 *     false and null as they are; objects and arrays minified ("The JSON
 *     that is passed to the target is minified"). A path that matches
 *     nothing gives null: EventBridge says such a variable "isn't created
 *     and won't appear in the output", which here would leave `"a": ,` and
 *     invalid JSON, so sluice writes the JSON for "nothing".
 *
 *   JSON template, placeholder inside a string ("msg": "is <state>"):
 *     the value's text without quotes. A string is inserted exactly as it is
 *     escaped in the event, so the result stays valid JSON (EventBridge
 *     "doesn't escape values extracted by Input Path"; the event's text is
 *     already escaped, so sluice never produces a broken string). Numbers,
 *     true, false and null as their text. Objects and arrays minified with
 *     their structural quotes removed ("If a JSON path references a JSON
 *     object or array, but the variable is referenced in a string,
 *     EventBridge removes any internal quotes to ensure a valid string";
 *     {"a":"b"} becomes {a:b}; escaped quotes inside member values stay).
 *     A path that matches nothing gives nothing (empty).
 *
 *   Text template (no enclosing JSON): the raw value. Strings decoded (no
 *     quotes, escapes resolved: "a\nb" becomes a real newline), numbers,
 *     true, false, null as text, objects and arrays as minified JSON with
 *     their quotes (there is no enclosing JSON string to protect, so sluice
 *     does not strip them). A path that matches nothing gives nothing.
 *
 * Predefined placeholders (their names are reserved: declared names may not
 * start with "sluice."):
 *   <sluice.event>       the whole event as minified JSON; like EventBridge's
 *                        aws.events.event.json it "can only be used as the
 *                        value of a JSON field, not inline in other strings",
 *                        so inside a JSON string it is refused at compile time.
 *   <sluice.rule>        ctx->rule, a string.
 *   <sluice.matched-at>  ctx->now_ms as RFC 3339 UTC with milliseconds
 *                        ("2024-02-29T13:45:00.123Z"), a string.
 * Without a ctx (NULL), or with ctx->rule NULL, these two count as missing.
 *
 * Object keys. EventBridge: "The placeholder cannot be used as an object
 * key." In a JSON template a placeholder directly before ':' (outside a
 * string), or inside a string that is directly followed by ':', is refused.
 *
 * Everything else in the template is copied as written: sluice does not
 * check that a filled JSON template is valid JSON (a template that is not
 * JSON once filled is still delivered as text, as EventBridge does no such
 * validation either), and does not re-indent or minify the template's own
 * text.
 */
#ifndef SL_INPUT_H
#define SL_INPUT_H

#include "core/base/buf.h"
#include "core/base/err.h"

#include <stddef.h>
#include <stdint.h>

/* At most this many named paths per template (EventBridge's limit too). */
#define SL_INPUT_MAX_VARS 100

/* A compiled transformer; immutable after compile, so one may be applied
 * from several threads at once. */
typedef struct sl_input sl_input;

/* A sub-document: input = "$.data" (the path grammar above). Returns 0 and
 * stores a new transformer in *out (caller frees with sl_input_free()),
 * SL_EINVAL for a bad path (err says which byte and why), or SL_ENOMEM;
 * *out is left untouched on error. */
int sl_input_compile_path(const char *path, sl_input **out, sl_error *err);

/* A template with n named paths: names[i] is the placeholder name of
 * paths[i]. Names are [A-Za-z0-9_.-]+, distinct, not starting with
 * "sluice."; n <= SL_INPUT_MAX_VARS; names may go unused. Every placeholder
 * must be declared or predefined. Returns 0 and *out (caller frees with
 * sl_input_free()), SL_EINVAL (err names the bad name, path or placeholder
 * and the byte of the template where it is) or SL_ENOMEM; *out is left
 * untouched on error. The strings are copied; the caller keeps them. */
int sl_input_compile_template(const char *const *names, const char *const *paths, size_t n,
                              const char *tmpl, sl_input **out, sl_error *err);

/* Context of one application. */
typedef struct sl_input_ctx {
    const char *rule; /* for <sluice.rule> (UTF-8, NUL-terminated) */
    int64_t now_ms;   /* for <sluice.matched-at> */
} sl_input_ctx;

/* Applies the transformer to the event JSON text [event_json, +len) and
 * appends the result to out. For a path input the result is the value's
 * minified JSON, or "null" when the path matches nothing. ctx may be NULL.
 * Returns 0; SL_EPARSE when the event is not one complete JSON value;
 * SL_EINVAL when ctx->rule goes into a JSON template but is not UTF-8;
 * SL_ENOMEM. On error out->len is what it was (out's capacity may have
 * grown) and err says why. Does not allocate except to grow out. */
int sl_input_apply(const sl_input *in, const char *event_json, size_t len, const sl_input_ctx *ctx,
                   sl_buf *out, sl_error *err);

/* Frees a transformer; NULL is allowed. */
void sl_input_free(sl_input *in);

#endif
