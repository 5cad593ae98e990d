/*
 * rules/input.h — EventBridge's input transformer: what a rule delivers
 * instead of the whole event.
 *
 *   input = "$.data"                       -- deliver a sub-document
 *   input = { paths = { name = "$.data.user.name" },
 *             template = [[{"who": "<name>"}]] }
 *
 * Paths are a JSONPath subset: $, .name, ['name'], [index]. Template
 * semantics follow EventBridge's InputTemplate: <name> inside a JSON string
 * inserts the value's text without quotes (strings unquoted, escaped for the
 * string; other values as JSON text); outside a string it inserts the JSON
 * value (strings quoted); a path that matches nothing gives null (outside a
 * string) or an empty string (inside one). Predefined: <sluice.event> (the
 * whole event as JSON), <sluice.rule> (the rule's name) and
 * <sluice.matched-at> (RFC 3339 time of the delivery attempt). A template
 * that is not JSON once filled is still delivered as text (EventBridge
 * allows plain-text templates).
 */
#ifndef SL_INPUT_H
#define SL_INPUT_H

#include "core/buf.h"
#include "core/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sl_input sl_input;

/* A sub-document: input = "$.data". Returns 0 and *out, SL_EINVAL (bad path,
 * err says where) or SL_ENOMEM. */
int sl_input_compile_path(const char *path, sl_input **out, sl_error *err);

/* A template with n named paths. Placeholder names must be declared in
 * names[] or predefined; an unknown <name> is refused (SL_EINVAL, err names
 * it). Names are [A-Za-z0-9_.-]+. */
int sl_input_compile_template(const char *const *names, const char *const *paths, size_t n,
                              const char *tmpl, sl_input **out, sl_error *err);

/* Context of one application. */
typedef struct sl_input_ctx {
    const char *rule; /* for <sluice.rule> */
    int64_t now_ms;   /* for <sluice.matched-at> */
} sl_input_ctx;

/* Applies the transformer to the event JSON text; appends the result to out.
 * Returns 0, SL_EPARSE when the event is not JSON, SL_ENOMEM. For a path
 * input that matches nothing the result is "null". */
int sl_input_apply(const sl_input *in, const char *event_json, size_t len,
                   const sl_input_ctx *ctx, sl_buf *out, sl_error *err);

void sl_input_free(sl_input *in);

#endif
