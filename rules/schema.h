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
 * examples, $comment; so are unknown formats. `true` and `false` are schemas
 * too (anything, nothing). Type-specific keywords apply only to values of
 * their type ({"minimum": 5} accepts "abc"), as in JSON Schema. Numbers
 * compare as doubles; enum and const compare structurally (object member
 * order does not matter, 1 equals 1.0, "1" does not equal 1). docs/schemas.md
 * has the details and every message.
 *
 * The schema is parsed once with jansson and compiled into a tree of C
 * structs (properties sorted for binary search, regexes compiled with
 * regcomp(REG_EXTENDED | REG_NOSUB)); validation walks the data's JSON text
 * with the core/base/json.h scanner, without a DOM and, in the common case,
 * without allocating.
 *
 * A compiled schema is immutable and may be used from many threads.
 */
#ifndef SL_SCHEMA_H
#define SL_SCHEMA_H

#include "core/base/err.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct sl_schema sl_schema;

/* Compiles a schema from JSON text. Returns 0 and *out (free with
 * sl_schema_free()), SL_EPARSE (not JSON: "line L, column C: …") or
 * SL_EINVAL (not a valid schema; err names the JSON pointer into the schema,
 * "(root)" for the schema itself, and the reason, e.g.
 * "/properties/amount/minimum: must be a number, got string"; a duplicate
 * key in a schema object is SL_EINVAL too), or SL_ENOMEM. *out is untouched
 * on error. */
int sl_schema_compile(const char *json, size_t len, sl_schema **out, sl_error *err);

/* Compiles the schema in file path (at most 16 MiB). Returns what
 * sl_schema_compile() returns, or SL_ENOENT / SL_EIO when the file cannot be
 * read, SL_ETOOBIG, or SL_EINVAL when path is not a regular file; err
 * messages start with the path ("schemas/x.json: /minimun: unknown
 * keyword"). */
int sl_schema_compile_file(const char *path, sl_schema **out, sl_error *err);

/* Validates the JSON text [json, json + len) (an event's data). Returns 0
 * when valid (err untouched); SL_EINVAL when not, with err holding the JSON
 * pointer (RFC 6901, "~0" for '~' and "~1" for '/' in names) of the first
 * violation below /data and the reason, e.g.
 * "/data/amount: 5 is less than the minimum 10" or
 * "/data: missing required property \"amount\""; SL_EPARSE when the text is
 * not JSON ("/data: not valid JSON: byte N: …"); SL_ENOMEM. "First" means:
 * type, const, enum, then the keywords of the value's type, object members
 * in document order before missing required properties. Reentrant. */
int sl_schema_validate(const sl_schema *s, const char *json, size_t len, sl_error *err);

void sl_schema_free(sl_schema *s);

/* Schema discovery (EventBridge's): feed sample data documents, then print
 * the schema they all satisfy: types merged (integer+number -> number; a
 * field seen with different types gets a type list; a number written with a
 * fraction or exponent counts as number), properties present in every
 * object seen at their place are required, array elements merge into one
 * items schema, strings that all look like RFC 3339 times get format
 * date-time. Deeper than 64 levels only types are recorded. Not thread-safe:
 * one inferrer per thread. */
typedef struct sl_schema_infer sl_schema_infer;

/* Returns 0 and *out (free with sl_schema_infer_free()), or SL_ENOMEM. */
int sl_schema_infer_new(sl_schema_infer **out);
/* Adds one sample (JSON text). Returns 0, SL_EPARSE (the sample is not
 * JSON and is ignored; err says "not valid JSON: byte N: …") or SL_ENOMEM
 * (the sample may be partly counted). */
int sl_schema_infer_add(sl_schema_infer *inf, const char *json, size_t len, sl_error *err);
/* The inferred schema as pretty JSON text (caller frees with free()), or
 * NULL when out of memory. With no samples: {} (anything). */
char *sl_schema_infer_result(const sl_schema_infer *inf);
void sl_schema_infer_free(sl_schema_infer *inf);

#endif
