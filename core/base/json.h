/*
 * core/base/json.h — a validating, non-allocating JSON scanner (RFC 8259).
 *
 * The ingest hot path cannot afford a DOM: sl_json_value() checks one value
 * and hands back a token — a type plus a pointer and length into the caller's
 * buffer — in the style of picohttpparser. Nothing is copied and nothing is
 * allocated; tokens stay valid exactly as long as the caller's buffer does.
 *
 * Validation is strict: strings must be valid UTF-8 (no overlongs, no encoded
 * surrogates, nothing above U+10FFFF), raw control characters are refused,
 * \u escapes must pair surrogates correctly, numbers follow the RFC grammar
 * (no leading zeros, no "1.", no "+1"), and nesting is bounded.
 *
 * The remaining helpers work on values that sl_json_value() has accepted:
 * iterate an object's members or an array's elements, decode a string token,
 * compact a value, and write an escaped string.
 */
#ifndef SL_JSON_H
#define SL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "core/base/err.h"

/* Hard cap on max_depth: the scanner keeps one bit per open container on the
 * stack, so the limit bounds its stack use (128 bytes). */
#define SL_JSON_DEPTH_LIMIT 1024

typedef enum sl_json_type {
    SL_JSON_NONE = 0, /* no token (an absent attribute, a zeroed struct) */
    SL_JSON_NULL,
    SL_JSON_FALSE,
    SL_JSON_TRUE,
    SL_JSON_NUMBER,
    SL_JSON_STRING,
    SL_JSON_ARRAY,
    SL_JSON_OBJECT,
} sl_json_type;

/* Token flags, set by sl_json_value(). */
#define SL_JSON_ESCAPED 0x1u /* string: contains at least one backslash escape */
#define SL_JSON_INTEGER 0x2u /* number: no fraction and no exponent */
#define SL_JSON_SPACED 0x4u  /* array/object: holds insignificant whitespace */

/* One value inside the caller's buffer. For strings p/len cover the quotes
 * ("\"ab\"" has len 4); for containers they cover the brackets. */
typedef struct sl_json_tok {
    sl_json_type type;
    uint32_t flags;
    const char *p;
    size_t len;
} sl_json_tok;

/* Validates exactly one JSON value in [p, end), after optional leading
 * whitespace, with containers nested at most max_depth deep (0 allows only
 * scalars; clamped to SL_JSON_DEPTH_LIMIT).
 *
 * end is the end of the available input: a number that runs up to end is
 * complete. Bytes after the value are not looked at beyond the one that ends a
 * number; use sl_json_validate() to also refuse trailing data.
 *
 * Returns 0 and fills *tok, with *next just past the value (trailing
 * whitespace is not skipped). Returns SL_EPARTIAL when the input ends inside
 * the value (more bytes could complete it) and SL_EPARSE when it can never be
 * valid; then *next points at the offending byte (end for SL_EPARTIAL), *tok
 * is unspecified, and err says "byte N: reason" with N counted from p. */
int sl_json_value(const char *p, const char *end, int max_depth, sl_json_tok *tok,
                  const char **next, sl_error *err);

/* Same as sl_json_value(), for a value that starts inside a larger buffer:
 * byte offsets in messages are counted from base (base <= p). */
int sl_json_value_from(const char *base, const char *p, const char *end, int max_depth,
                       sl_json_tok *tok, const char **next, sl_error *err);

/* sl_json_value() over exactly [p, p + len): also refuses anything but
 * whitespace after the value (SL_EPARSE, "byte N: unexpected data after the
 * JSON value"). tok may be NULL. Returns 0, SL_EPARSE or SL_EPARTIAL. */
int sl_json_validate(const char *p, size_t len, int max_depth, sl_json_tok *tok, sl_error *err);

/* Iteration over a container token that sl_json_value() returned. The
 * iterator only skips (it does not validate again, so it must not be given
 * anything unvalidated) and never allocates; its tokens carry the same flags
 * sl_json_value() would give them. */
typedef struct sl_json_iter {
    const char *p;   /* next unread byte */
    const char *end; /* the closing bracket */
} sl_json_iter;

/* Starts iterating obj (an SL_JSON_OBJECT or SL_JSON_ARRAY token). */
void sl_json_iter_init(sl_json_iter *it, const sl_json_tok *obj);

/* Next member of an object: fills *key (a string token) and *val. Returns
 * true, or false at the end (key and val untouched). */
bool sl_json_iter_member(sl_json_iter *it, sl_json_tok *key, sl_json_tok *val);

/* Next element of an array. Returns true, or false at the end. */
bool sl_json_iter_elem(sl_json_iter *it, sl_json_tok *val);

/* Decodes a validated string token (escapes resolved, quotes dropped) into
 * out, writing *len bytes and no NUL terminator. A capacity of str->len - 2
 * always suffices. Returns 0, SL_EINVAL when str is not a string token, or
 * SL_ETOOBIG when cap is too small (out then holds a prefix, *len its size). */
int sl_json_unescape(const sl_json_tok *str, char *out, size_t cap, size_t *len);

/* Decodes part of a validated string token, for callers that stream long
 * strings through a small buffer. *pos is an offset into the token, 0 at the
 * start; each call decodes whole characters from *pos into out (cap >= 4),
 * advances *pos and returns the number of bytes written. When the string is
 * finished, *pos == str->len and the call returns 0. */
size_t sl_json_unescape_part(const sl_json_tok *str, size_t *pos, char *out, size_t cap);

/* Appends the compact form of the validated value [p, p + len): whitespace
 * outside strings removed, every other byte kept as it is. Returns 0 or
 * SL_ENOMEM (out unchanged). */
int sl_json_compact(const char *p, size_t len, sl_buf *out);

/* Appends s (len bytes of UTF-8) as a JSON string with quotes: '"', '\' and
 * control characters escaped, everything else copied. Returns 0, SL_EINVAL
 * when s is not valid UTF-8, or SL_ENOMEM; out is unchanged on error. */
int sl_json_put_string(sl_buf *out, const char *s, size_t len);

/* True when [s, s + len) is valid UTF-8 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
bool sl_json_utf8_valid(const char *s, size_t len);

/* Name of a token type ("string", "object", …), for messages. */
const char *sl_json_type_name(sl_json_type type);

/* Finds member key of a validated object token (the first one of that
 * name, compared after unescaping). Returns true and fills *val, or false
 * (val untouched) when obj is not an object or has no such member. */
bool sl_json_get(const sl_json_tok *obj, const char *key, sl_json_tok *val);

/* Reads an integer number token into *out. Returns false when tok is not an
 * integer or does not fit in int64_t (out untouched). */
bool sl_json_i64(const sl_json_tok *tok, int64_t *out);

#endif
