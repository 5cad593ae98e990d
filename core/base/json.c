/*
 * core/base/json.c — validating JSON scanner, member iteration and look-up, unescaping,
 * compaction and string output. See json.h for the contract.
 *
 * The scanner is one loop with an explicit container stack (one bit per
 * level: 1 = object), so hostile nesting costs no C stack. Strings, the bulk
 * of most documents, are scanned eight bytes at a time while they hold only
 * plain ASCII.
 */
#include "core/base/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The eight-bytes-at-a-time scans find the first special byte with a
 * count of trailing zeros, which is the lowest address only on
 * little-endian machines. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "SWAR scans assume little-endian");

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline bool is_digit(char c)
{
    return (unsigned char)(c - '0') < 10;
}

static inline const char *skip_ws(const char *p, const char *end)
{
    while (p < end && is_ws(*p))
        p++;
    return p;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A mask with bit 7 set in each byte of v that is '"', '\', below 0x20 or
 * above 0x7f. Borrows only run from a flagged byte towards higher ones, so
 * the lowest set bit is exact: ctz(mask) / 8 is the first special byte. */
static inline uint64_t special_mask(uint64_t v)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
    return (((q - ones) & ~q) | ((b - ones) & ~b) | ((v - ones * 0x20) & ~v) | v) & highs;
}

/* ---- scanner ---------------------------------------------------------- */

typedef struct scanner {
    const char *base;
    const char *end;
    sl_error *err;
    const char *errp; /* where the failure was found */
    int rc;           /* and its code */
} scanner;

__attribute__((format(printf, 4, 5))) static int fail(scanner *s, const char *at, int code,
                                                      const char *fmt, ...)
{
    s->errp = at;
    s->rc = code;
    if (s->err) {
        char why[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        sl_error_set(s->err, code, "byte %zu: %s", (size_t)(at - s->base), why);
    }
    return code;
}

static int partial(scanner *s, const char *what)
{
    return fail(s, s->end, SL_EPARTIAL, "unexpected end of input %s", what);
}

/* Describes the byte at p for a message: 'x' or byte 0xNN. */
static const char *describe(const char *p, char buf[16])
{
    unsigned char c = (unsigned char)*p;
    if (c > 0x20 && c < 0x7f)
        snprintf(buf, 16, "'%c'", c);
    else
        snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

static int unexpected(scanner *s, const char *p, const char *expected)
{
    char d[16];
    return fail(s, p, SL_EPARSE, "expected %s, found %s", expected, describe(p, d));
}

/* Checks the multi-byte UTF-8 sequence at p (first byte >= 0x80); returns
 * its length, or a negative SL_E… code after recording the failure. */
static int scan_utf8(scanner *s, const char *p)
{
    unsigned char c = (unsigned char)p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0xc2)
        return fail(s, p, SL_EPARSE, "invalid UTF-8 (byte 0x%02x cannot start a character)", c);
    if (c < 0xe0) {
        n = 2;
    } else if (c < 0xf0) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* UTF-16 surrogates */
    } else if (c < 0xf5) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else {
        return fail(s, p, SL_EPARSE, "invalid UTF-8 (byte 0x%02x cannot start a character)", c);
    }
    for (int i = 1; i < n; i++) {
        if (p + i >= s->end)
            return partial(s, "inside a UTF-8 character");
        unsigned char d = (unsigned char)p[i];
        if (d < lo || d > hi)
            return fail(s, p + i, SL_EPARSE, "invalid UTF-8 (bad continuation byte 0x%02x)", d);
        lo = 0x80, hi = 0xbf;
    }
    return n;
}

/* Reads 4 hex digits after "\u" at p (p points at the 'u'). */
static int scan_hex4(scanner *s, const char *p, unsigned *cp)
{
    unsigned v = 0;
    for (int i = 1; i <= 4; i++) {
        if (p + i >= s->end)
            return partial(s, "inside a \\u escape");
        int h = hexval(p[i]);
        if (h < 0)
            return unexpected(s, p + i, "a hex digit in \\u escape");
        v = v << 4 | (unsigned)h;
    }
    *cp = v;
    return 0;
}

/* Handles the byte at p inside a string that is neither plain ASCII nor the
 * closing quote: an escape, a multi-byte UTF-8 character or a control
 * character. Returns the position after it, or NULL after recording the
 * failure. Kept out of line so the common path stays small. */
__attribute__((noinline)) static const char *string_special(scanner *s, const char *p,
                                                            uint32_t *flags)
{
    const char *end = s->end;
    unsigned char c = (unsigned char)*p;
    if (c >= 0x80) {
        int n = scan_utf8(s, p);
        return n < 0 ? NULL : p + n;
    }
    if (c != '\\') {
        fail(s, p, SL_EPARSE, "control character 0x%02x in string (must be escaped)", c);
        return NULL;
    }
    *flags |= SL_JSON_ESCAPED;
    if (p + 1 >= end) {
        partial(s, "inside an escape");
        return NULL;
    }
    char e = p[1];
    if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
        e == 't')
        return p + 2;
    if (e != 'u') {
        fail(s, p, SL_EPARSE, "invalid escape '\\%c'", e > 0x20 && e < 0x7f ? e : '?');
        return NULL;
    }
    unsigned cp, lo;
    if (scan_hex4(s, p + 1, &cp))
        return NULL;
    if (cp < 0xd800 || cp > 0xdfff)
        return p + 6;
    const char *q = p + 6;
    if (cp <= 0xdbff) {
        if (q + 1 >= end && (q >= end || *q == '\\')) {
            partial(s, "inside a surrogate pair");
            return NULL;
        }
        if (q[0] == '\\' && q[1] == 'u') {
            if (scan_hex4(s, q + 1, &lo))
                return NULL;
            if (lo >= 0xdc00 && lo <= 0xdfff)
                return q + 6;
        }
    }
    fail(s, p, SL_EPARSE, "unpaired surrogate \\u%04X", cp);
    return NULL;
}

/* Scans the string whose opening quote is at p; *next is set past the
 * closing quote. Eight bytes at a time while they are plain. */
static inline int scan_string(scanner *s, const char *p, const char **next, uint32_t *flags)
{
    const char *end = s->end;
    p++;
    for (;;) {
        if (LIKELY(end - p >= 8)) {
            uint64_t v;
            memcpy(&v, p, 8);
            uint64_t m = special_mask(v);
            if (!m) {
                p += 8;
                continue;
            }
            /* The byte is already in v: test it there instead of loading it
             * again behind the address computation. */
            size_t shift = (size_t)__builtin_ctzll(m) - 7;
            p += shift >> 3;
            if (LIKELY((unsigned char)(v >> shift) == '"')) {
                *next = p + 1;
                return 0;
            }
        } else {
            while (p < end && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80 && *p != '"' &&
                   *p != '\\')
                p++;
            if (UNLIKELY(p >= end))
                return partial(s, "inside a string");
        }
        if (LIKELY(*p == '"')) {
            *next = p + 1;
            return 0;
        }
        if (!(p = string_special(s, p, flags)))
            return s->rc;
    }
}

static int scan_number(scanner *s, const char *p, const char **next, uint32_t *flags)
{
    const char *end = s->end;
    bool integer = true;
    if (*p == '-' && ++p >= end)
        return partial(s, "inside a number");
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return fail(s, p - 1, SL_EPARSE, "leading zero in number");
    } else if (is_digit(*p)) {
        while (++p < end && is_digit(*p)) {
        }
    } else {
        return unexpected(s, p, "a digit after '-'");
    }
    if (p < end && *p == '.') {
        integer = false;
        if (++p >= end)
            return partial(s, "inside a number");
        if (!is_digit(*p))
            return unexpected(s, p, "a digit after '.'");
        while (++p < end && is_digit(*p)) {
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = false;
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end)
            return partial(s, "inside a number");
        if (!is_digit(*p))
            return unexpected(s, p, "a digit in the exponent");
        while (++p < end && is_digit(*p)) {
        }
    }
    if (integer)
        *flags |= SL_JSON_INTEGER;
    *next = p;
    return 0;
}

static int scan_literal(scanner *s, const char *p, const char *word, const char **next)
{
    for (size_t i = 0; word[i]; i++) {
        if (p + i >= s->end)
            return partial(s, "inside a literal");
        if (p[i] != word[i]) {
            char d[16];
            return fail(s, p, SL_EPARSE, "invalid literal (expected %s), found %s", word,
                        describe(p + i, d));
        }
    }
    *next = p + strlen(word);
    return 0;
}

#define PUSH(isobj)                                                                                \
    do {                                                                                           \
        if (depth >= max_depth) {                                                                  \
            rc = fail(&s, p, SL_EPARSE, "nesting deeper than %d level%s", max_depth,               \
                      max_depth == 1 ? "" : "s");                                                  \
            goto out;                                                                              \
        }                                                                                          \
        if (isobj)                                                                                 \
            stack[depth >> 6] |= 1ull << (depth & 63);                                             \
        else                                                                                       \
            stack[depth >> 6] &= ~(1ull << (depth & 63));                                          \
        depth++;                                                                                   \
    } while (0)
#define TOP_IS_OBJ() ((stack[(depth - 1) >> 6] >> ((depth - 1) & 63)) & 1)
#define SKIP_WS()                                                                                  \
    do {                                                                                           \
        if (p < end && is_ws(*p)) {                                                                \
            spaced = SL_JSON_SPACED;                                                               \
            p = skip_ws(p + 1, end);                                                               \
        }                                                                                          \
    } while (0)

__attribute__((noinline)) static int scan_value(const char *base, const char *p, const char *end,
                                                int max_depth, sl_json_tok *tok, const char **next,
                                                sl_error *err)
{
    scanner s = {base, end, err, NULL, 0};
    uint64_t stack[SL_JSON_DEPTH_LIMIT / 64];
    int depth = 0, rc;
    uint32_t flags = 0, spaced = 0;
    if (max_depth > SL_JSON_DEPTH_LIMIT)
        max_depth = SL_JSON_DEPTH_LIMIT;
    if (max_depth < 0)
        max_depth = 0;

    p = skip_ws(p, end);
    const char *start = p;
    if (p >= end) {
        rc = partial(&s, "(expected a JSON value)");
        goto out;
    }

value:
    switch (*p) {
    case '{':
        PUSH(1);
        p++;
        SKIP_WS();
        if (p >= end)
            goto eof;
        if (*p == '}') {
            p++;
            depth--;
            goto after;
        }
        goto key;
    case '[':
        PUSH(0);
        p++;
        SKIP_WS();
        if (p >= end)
            goto eof;
        if (*p == ']') {
            p++;
            depth--;
            goto after;
        }
        goto value;
    case '"':
        if ((rc = scan_string(&s, p, &p, &flags)))
            goto out;
        goto after;
    case 't':
        if ((rc = scan_literal(&s, p, "true", &p)))
            goto out;
        goto after;
    case 'f':
        if ((rc = scan_literal(&s, p, "false", &p)))
            goto out;
        goto after;
    case 'n':
        if ((rc = scan_literal(&s, p, "null", &p)))
            goto out;
        goto after;
    default:
        if (*p == '-' || is_digit(*p)) {
            if ((rc = scan_number(&s, p, &p, &flags)))
                goto out;
            goto after;
        }
        rc = unexpected(&s, p, "a JSON value");
        goto out;
    }

key:
    if (*p != '"') {
        rc = unexpected(&s, p, "a member name (string)");
        goto out;
    }
    {
        uint32_t kf = 0;
        if ((rc = scan_string(&s, p, &p, &kf)))
            goto out;
    }
    SKIP_WS();
    if (p >= end)
        goto eof;
    if (*p != ':') {
        rc = unexpected(&s, p, "':' after a member name");
        goto out;
    }
    p++;
    SKIP_WS();
    if (p >= end)
        goto eof;
    goto value;

after:
    if (depth == 0)
        goto done;
    SKIP_WS();
    if (p >= end)
        goto eof;
    if (*p == ',') {
        p++;
        SKIP_WS();
        if (p >= end)
            goto eof;
        if (TOP_IS_OBJ())
            goto key;
        goto value;
    }
    if (TOP_IS_OBJ() ? *p == '}' : *p == ']') {
        p++;
        depth--;
        goto after;
    }
    rc = unexpected(&s, p, TOP_IS_OBJ() ? "',' or '}'" : "',' or ']'");
    goto out;

eof:
    rc = partial(&s, depth ? "inside a container" : "");
    goto out;

done:
    switch (*start) {
    case '{':
        tok->type = SL_JSON_OBJECT;
        flags = spaced;
        break;
    case '[':
        tok->type = SL_JSON_ARRAY;
        flags = spaced;
        break;
    case '"':
        tok->type = SL_JSON_STRING;
        break;
    case 't':
        tok->type = SL_JSON_TRUE;
        break;
    case 'f':
        tok->type = SL_JSON_FALSE;
        break;
    case 'n':
        tok->type = SL_JSON_NULL;
        break;
    default:
        tok->type = SL_JSON_NUMBER;
    }
    tok->flags = flags;
    tok->p = start;
    tok->len = (size_t)(p - start);
    *next = p;
    return 0;

out:
    *next = s.errp ? s.errp : end;
    return rc;
}

int sl_json_value_from(const char *base, const char *p, const char *end, int max_depth,
                       sl_json_tok *tok, const char **next, sl_error *err)
{
    /* Strings (every member name, most values) skip the container setup. */
    if (LIKELY(p < end && *p == '"')) {
        scanner s = {base, end, err, NULL, 0};
        uint32_t flags = 0;
        const char *q = p;
        if (scan_string(&s, p, &q, &flags)) {
            *next = s.errp;
            return s.rc;
        }
        tok->type = SL_JSON_STRING;
        tok->flags = flags;
        tok->p = p;
        tok->len = (size_t)(q - p);
        *next = q;
        return 0;
    }
    return scan_value(base, p, end, max_depth, tok, next, err);
}

int sl_json_value(const char *p, const char *end, int max_depth, sl_json_tok *tok,
                  const char **next, sl_error *err)
{
    return sl_json_value_from(p, p, end, max_depth, tok, next, err);
}

int sl_json_validate(const char *p, size_t len, int max_depth, sl_json_tok *tok, sl_error *err)
{
    const char *end = p + len, *next;
    sl_json_tok unused;
    int rc = scan_value(p, p, end, max_depth, tok ? tok : &unused, &next, err);
    if (rc)
        return rc;
    next = skip_ws(next, end);
    if (next != end)
        return sl_error_set(err, SL_EPARSE, "byte %zu: unexpected data after the JSON value",
                            (size_t)(next - p));
    return 0;
}

/* ---- iteration over validated values ----------------------------------- */

/* p at an opening quote of a validated string; returns past the closing one. */
static const char *skip_string(const char *p, const char *end, uint32_t *flags)
{
    p++;
    while (p < end) {
        char c = *p;
        if (c == '"')
            return p + 1;
        if (c == '\\') {
            *flags |= SL_JSON_ESCAPED;
            p += 2;
        } else {
            p++;
        }
    }
    return end;
}

/* Skips the validated value at p (no leading whitespace) and fills *tok. */
static const char *skip_value(const char *p, const char *end, sl_json_tok *tok)
{
    const char *start = p;
    uint32_t flags = 0;
    switch (*p) {
    case '"':
        tok->type = SL_JSON_STRING;
        p = skip_string(p, end, &flags);
        break;
    case '{':
    case '[': {
        tok->type = *p == '{' ? SL_JSON_OBJECT : SL_JSON_ARRAY;
        int depth = 0;
        uint32_t ignore = 0;
        while (p < end) {
            char c = *p;
            if (c == '"') {
                p = skip_string(p, end, &ignore);
                continue;
            }
            p++;
            if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0)
                    break;
            } else if (is_ws(c)) {
                flags = SL_JSON_SPACED;
            }
        }
        break;
    }
    default:
        tok->type = *p == 't'   ? SL_JSON_TRUE
                    : *p == 'f' ? SL_JSON_FALSE
                    : *p == 'n' ? SL_JSON_NULL
                                : SL_JSON_NUMBER;
        flags = tok->type == SL_JSON_NUMBER ? SL_JSON_INTEGER : 0;
        while (p < end && *p != ',' && *p != '}' && *p != ']' && !is_ws(*p)) {
            if (*p == '.' || *p == 'e' || *p == 'E')
                flags = 0;
            p++;
        }
    }
    tok->flags = flags;
    tok->p = start;
    tok->len = (size_t)(p - start);
    return p;
}

void sl_json_iter_init(sl_json_iter *it, const sl_json_tok *obj)
{
    it->p = obj->p + 1;
    it->end = obj->p + obj->len - 1;
}

/* Moves to the start of the next item, past a separating comma. */
static bool iter_advance(sl_json_iter *it)
{
    const char *p = skip_ws(it->p, it->end);
    if (p < it->end && *p == ',')
        p = skip_ws(p + 1, it->end);
    it->p = p;
    return p < it->end;
}

bool sl_json_iter_member(sl_json_iter *it, sl_json_tok *key, sl_json_tok *val)
{
    if (!iter_advance(it))
        return false;
    const char *p = skip_value(it->p, it->end, key);
    p = skip_ws(p, it->end);
    p = skip_ws(p + 1, it->end); /* the ':' */
    it->p = skip_value(p, it->end, val);
    return true;
}

bool sl_json_iter_elem(sl_json_iter *it, sl_json_tok *val)
{
    if (!iter_advance(it))
        return false;
    it->p = skip_value(it->p, it->end, val);
    return true;
}

/* ---- unescaping -------------------------------------------------------- */

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static unsigned hex4(const char *p)
{
    return (unsigned)(hexval(p[0]) << 12 | hexval(p[1]) << 8 | hexval(p[2]) << 4 | hexval(p[3]));
}

size_t sl_json_unescape_part(const sl_json_tok *str, size_t *pos, char *out, size_t cap)
{
    static const char from[] = "bfnrt\"\\/", to[] = "\b\f\n\r\t\"\\/";
    const char *s = str->p, *e = str->p + str->len - 1; /* e: the closing quote */
    const char *p = s + (*pos ? *pos : 1);
    size_t n = 0;
    while (p < e && n < cap) {
        if (*p != '\\') {
            const char *bs = memchr(p, '\\', (size_t)(e - p));
            size_t run = (size_t)((bs ? bs : e) - p);
            if (run > cap - n) { /* cut, but never inside a UTF-8 character */
                run = cap - n;
                while (run && ((unsigned char)p[run] & 0xc0) == 0x80)
                    run--;
                if (!run)
                    break;
            }
            memcpy(out + n, p, run);
            n += run;
            p += run;
            continue;
        }
        char tmp[4];
        size_t k = 1, used = 2;
        if (p[1] == 'u') {
            unsigned cp = hex4(p + 2);
            used = 6;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (hex4(p + 8) - 0xdc00);
                used = 12;
            }
            k = put_utf8(tmp, cp);
        } else {
            tmp[0] = to[(const char *)memchr(from, p[1], sizeof from - 1) - from];
        }
        if (k > cap - n)
            break;
        memcpy(out + n, tmp, k);
        n += k;
        p += used;
    }
    *pos = p >= e ? str->len : (size_t)(p - s);
    return n;
}

int sl_json_unescape(const sl_json_tok *str, char *out, size_t cap, size_t *len)
{
    if (str->type != SL_JSON_STRING || str->len < 2)
        return SL_EINVAL;
    size_t pos = 0;
    *len = sl_json_unescape_part(str, &pos, out, cap);
    return pos == str->len ? 0 : SL_ETOOBIG;
}

/* ---- output ------------------------------------------------------------ */

/* Bit 7 set in each byte of v equal to c (lowest set bit exact). */
static inline uint64_t eq_mask(uint64_t v, unsigned char c)
{
    const uint64_t ones = 0x0101010101010101ull;
    uint64_t x = v ^ (ones * c);
    return (x - ones) & ~x & 0x8080808080808080ull;
}

int sl_json_compact(const char *p, size_t len, sl_buf *out)
{
    if (sl_buf_reserve(out, len))
        return SL_ENOMEM;
    /* w never gets ahead of p, so the reservation of len is enough, even for
     * the eight-byte copies inside strings. */
    char *w = (char *)out->data + out->len;
    const char *end = p + len;
    while (p < end) {
        char c = *p++;
        *w = c;
        if (c != '"') { /* outside strings: keep everything but whitespace */
            w += !is_ws(c);
            continue;
        }
        w++;
        while (p < end) { /* the string, up to and including its closing quote */
            if (end - p >= 8) {
                uint64_t v;
                memcpy(&v, p, 8);
                memcpy(w, p, 8);
                uint64_t m = eq_mask(v, '"') | eq_mask(v, '\\');
                if (!m) {
                    w += 8, p += 8;
                    continue;
                }
                size_t k = (size_t)__builtin_ctzll(m) >> 3;
                w += k, p += k;
            } else if (*p != '"' && *p != '\\') {
                *w++ = *p++;
                continue;
            }
            if (*p == '"') {
                *w++ = *p++;
                break;
            }
            *w++ = *p++; /* a backslash and the byte it escapes */
            if (p < end)
                *w++ = *p++;
        }
    }
    out->len = (size_t)(w - (char *)out->data);
    return 0;
}

bool sl_json_utf8_valid(const char *s, size_t len)
{
    scanner sc = {s, s + len, NULL, NULL, 0};
    const char *p = s, *end = s + len;
    while (p < end) {
        while (end - p >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            if (v & 0x8080808080808080ull)
                break;
            p += 8;
        }
        if (p >= end)
            break;
        if ((unsigned char)*p < 0x80) {
            p++;
            continue;
        }
        int n = scan_utf8(&sc, p);
        if (n < 0)
            return false;
        p += n;
    }
    return true;
}

int sl_json_put_string(sl_buf *out, const char *s, size_t len)
{
    /* Controls with a short escape; the others are written as \u00XX. */
    static const char letter[0x20] = {
        ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r'};
    if (!sl_json_utf8_valid(s, len))
        return SL_EINVAL;
    size_t need = len + 2;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        need += c == '"' || c == '\\' ? 1 : c >= 0x20 ? 0 : letter[c] ? 1 : 5;
    }
    if (sl_buf_reserve(out, need))
        return SL_ENOMEM;
    char *w = (char *)out->data + out->len;
    *w++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
        } else if (c >= 0x20 || letter[c]) {
            *w++ = '\\';
            *w++ = c >= 0x20 ? (char)c : letter[c];
        } else {
            memcpy(w, "\\u00", 4);
            w[4] = "0123456789abcdef"[c >> 4];
            w[5] = "0123456789abcdef"[c & 15];
            w += 6;
        }
    }
    *w++ = '"';
    out->len = (size_t)(w - (char *)out->data);
    return 0;
}

const char *sl_json_type_name(sl_json_type type)
{
    static const char *const names[] = {"nothing", "null",   "boolean", "boolean",
                                        "number",  "string", "array",   "object"};
    return (unsigned)type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

bool sl_json_get(const sl_json_tok *obj, const char *key, sl_json_tok *val)
{
    if (obj->type != SL_JSON_OBJECT)
        return false;
    size_t klen = strlen(key);
    sl_json_iter it;
    sl_json_tok k, v;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &k, &v)) {
        if (k.flags & SL_JSON_ESCAPED) {
            char name[128];
            size_t n;
            if (sl_json_unescape(&k, name, sizeof name, &n) == 0 && n == klen &&
                memcmp(name, key, n) == 0) {
                *val = v;
                return true;
            }
        } else if (k.len == klen + 2 && memcmp(k.p + 1, key, klen) == 0) {
            *val = v;
            return true;
        }
    }
    return false;
}

bool sl_json_i64(const sl_json_tok *tok, int64_t *out)
{
    if (tok->type != SL_JSON_NUMBER || !(tok->flags & SL_JSON_INTEGER) || tok->len > 20)
        return false;
    char tmp[24];
    memcpy(tmp, tok->p, tok->len);
    tmp[tok->len] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(tmp, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}
