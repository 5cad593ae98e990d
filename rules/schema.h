/*
 * rules/schema.h — a JSON Schema subset, checked at ingest (ISSUE 4 §5).
 *
 * A schema is registered per event `type` on a set and describes the event's
 * `data` member (what CloudEvents' `dataschema` points at). Supported
 * keywords: type (a name or a list; "integer" accepts 3 and 3.0 as JSON
 * Schema does), properties, required, additionalProperties (boolean or a
 * schema), items (a schema), enum, const, minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (numbers, draft 6+ form), minLength,
 * maxLength (in code points), pattern (POSIX extended regex, unanchored as
 * JSON Schema says), format "date-time" (RFC 3339), "email", "uri". Unknown
 * keywords are refused at compile time (a typo must not silently disable a
 * check), except the annotations $schema, $id, title, description, default,
 * examples, $comment.
 *
 * A compiled schema is immutable and may be used from many threads.
 */
#ifndef SL_SCHEMA_H
#define SL_SCHEMA_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct sl_schema sl_schema;

/* Compiles a schema from JSON text. Returns 0 and *out (free with
 * sl_schema_free()), SL_EPARSE (not JSON) or SL_EINVAL (not a valid schema;
 * err names the JSON pointer and the reason, e.g.
 * "/properties/amount/minimum: must be a number"), or SL_ENOMEM. */
int sl_schema_compile(const char *json, size_t len, sl_schema **out, sl_error *err);

/* Compiles the schema in file path (err messages start with the path). */
int sl_schema_compile_file(const char *path, sl_schema **out, sl_error *err);

/* Validates the JSON text [json, json + len) (an event's data). Returns 0
 * when valid; SL_EINVAL when not, with err holding the JSON pointer of the
 * first violation below /data and the reason, e.g.
 * "/data/amount: 5 is less than the minimum 10"; SL_EPARSE when the text is
 * not JSON; SL_ENOMEM. */
int sl_schema_validate(const sl_schema *s, const char *json, size_t len, sl_error *err);

void sl_schema_free(sl_schema *s);

/* Schema discovery (EventBridge's): feed sample data documents, then print
 * the schema they all satisfy: types merged (integer+number -> number; a
 * field seen with different types gets a type list), properties present in
 * every sample are required, strings that all look like RFC 3339 times get
 * format date-time. */
typedef struct sl_schema_infer sl_schema_infer;

int sl_schema_infer_new(sl_schema_infer **out);
/* Adds one sample (JSON text). Returns 0, SL_EPARSE or SL_ENOMEM. */
int sl_schema_infer_add(sl_schema_infer *inf, const char *json, size_t len, sl_error *err);
/* The inferred schema as pretty JSON text (caller frees with free()), or
 * NULL when out of memory. With no samples: {} (anything). */
char *sl_schema_infer_result(const sl_schema_infer *inf);
void sl_schema_infer_free(sl_schema_infer *inf);

#endif
