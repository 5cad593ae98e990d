/*
 * core/json.c — validating JSON scanner, member iteration, unescaping,
 * compaction and string output. See json.h for the contract.
 *
 * The scanner is one loop with an explicit container stack (one bit per
 * level: 1 = object), so hostile nesting costs no C stack. Strings, the bulk
 * of most documents, are scanned eight bytes at a time while they hold only
 * plain ASCII.
 */
#include "core/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Byte classes inside a string: 0 plain ASCII, 1 '"', 2 '\', 3 control
 * character, 4 start or continuation of a multi-byte UTF-8 sequence. */
static const uint8_t str_class[256] = {
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
};

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

/* True when any of the 8 bytes in v is '"', '\', below 0x20 or above 0x7f. */
static inline bool word_special(uint64_t v)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
    uint64_t t = ((q - ones) & ~q) | ((b - ones) & ~b) | ((v - ones * 0x20) & ~v) | v;
    return (t & highs) != 0;
}

/* ---- scanner ---------------------------------------------------------- */

typedef struct scanner {
    const char *base;
    const char *end;
    sl_error *err;
    const char *errp; /* where the failure was found */
} scanner;

__attribute__((format(printf, 4, 5))) static int fail(scanner *s, const char *at, int code,
                                                      const char *fmt, ...)
{
    s->errp = at;
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

/* Scans the string whose opening quote is at p; *next is set past the
 * closing quote. */
static int scan_string(scanner *s, const char *p, const char **next, uint32_t *flags)
{
    const char *end = s->end;
    p++;
    for (;;) {
        while (end - p >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
            if (word_special(v))
                break;
            p += 8;
        }
        while (p < end && str_class[(unsigned char)*p] == 0)
            p++;
        if (UNLIKELY(p >= end))
            return partial(s, "inside a string");
        switch (str_class[(unsigned char)*p]) {
        case 1:
            *next = p + 1;
            return 0;
        case 2: {
            *flags |= SL_JSON_ESCAPED;
            if (p + 1 >= end)
                return partial(s, "inside an escape");
            char e = p[1];
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                e == 'r' || e == 't') {
                p += 2;
                break;
            }
            if (e != 'u')
                return fail(s, p, SL_EPARSE, "invalid escape '\\%c'", e > 0x20 && e < 0x7f ? e : '?');
            unsigned cp;
            int rc = scan_hex4(s, p + 1, &cp);
            if (rc)
                return rc;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return fail(s, p, SL_EPARSE, "unpaired surrogate \\u%04X", cp);
            if (cp >= 0xd800 && cp <= 0xdbff) {
                const char *q = p + 6;
                if (q + 1 >= end && (q >= end || *q == '\\'))
                    return partial(s, "inside a surrogate pair");
                if (q[0] != '\\' || q[1] != 'u')
                    return fail(s, p, SL_EPARSE, "unpaired surrogate \\u%04X", cp);
                unsigned lo;
                if ((rc = scan_hex4(s, q + 1, &lo)))
                    return rc;
                if (lo < 0xdc00 || lo > 0xdfff)
                    return fail(s, p, SL_EPARSE, "unpaired surrogate \\u%04X", cp);
                p = q + 6;
            } else {
                p += 6;
            }
            break;
        }
        case 3:
            return fail(s, p, SL_EPARSE, "control character 0x%02x in string (must be escaped)",
                        (unsigned char)*p);
        default: {
            int n = scan_utf8(s, p);
            if (n < 0)
                return n;
            p += n;
        }
        }
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
        if (depth >= max_depth)                                                                    \
            return fail(&s, p, SL_EPARSE, "nesting deeper than %d levels", max_depth);             \
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

static int scan_value(const char *base, const char *p, const char *end, int max_depth,
                      sl_json_tok *tok, const char **next, sl_error *err)
{
    scanner s = {base, end, err, NULL};
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

int sl_json_value(const char *p, const char *end, int max_depth, sl_json_tok *tok,
                  const char **next, sl_error *err)
{
    return scan_value(p, p, end, max_depth, tok, next, err);
}

int sl_json_value_from(const char *base, const char *p, const char *end, int max_depth,
                       sl_json_tok *tok, const char **next, sl_error *err)
{
    return scan_value(base, p, end, max_depth, tok, next, err);
}

int sl_json_validate(const char *p, size_t len, int max_depth, sl_json_tok *tok, sl_error *err)
{
    const char *end = p + len, *next;
    int rc = scan_value(p, p, end, max_depth, tok, &next, err);
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
    const char *s = str->p, *e = str->p + str->len - 1; /* e: the closing quote */
    const char *p = s + (*pos ? *pos : 1);
    size_t n = 0;
    while (p < e && n < cap) {
        if (*p != '\\') {
            const char *bs = memchr(p, '\\', (size_t)(e - p));
            size_t run = (size_t)((bs ? bs : e) - p);
            if (run > cap - n)
                run = cap - n;
            memcpy(out + n, p, run);
            n += run;
            p += run;
            continue;
        }
        char tmp[4];
        size_t k = 1, used = 2;
        switch (p[1]) {
        case 'b':
            tmp[0] = '\b';
            break;
        case 'f':
            tmp[0] = '\f';
            break;
        case 'n':
            tmp[0] = '\n';
            break;
        case 'r':
            tmp[0] = '\r';
            break;
        case 't':
            tmp[0] = '\t';
            break;
        case 'u': {
            unsigned cp = hex4(p + 2);
            used = 6;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (hex4(p + 8) - 0xdc00);
                used = 12;
            }
            k = put_utf8(tmp, cp);
            break;
        }
        default: /* '"', '\', '/' */
            tmp[0] = p[1];
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

int sl_json_compact(const char *p, size_t len, sl_buf *out)
{
    if (sl_buf_reserve(out, len))
        return SL_ENOMEM;
    char *w = (char *)out->data + out->len;
    const char *end = p + len;
    while (p < end) {
        char c = *p;
        if (c == '"') {
            uint32_t ignore = 0;
            const char *q = skip_string(p, end, &ignore);
            memcpy(w, p, (size_t)(q - p));
            w += q - p;
            p = q;
        } else {
            if (!is_ws(c))
                *w++ = c;
            p++;
        }
    }
    out->len = (size_t)(w - (char *)out->data);
    return 0;
}

bool sl_json_utf8_valid(const char *s, size_t len)
{
    scanner sc = {s, s + len, NULL, NULL};
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
    if (!sl_json_utf8_valid(s, len))
        return SL_EINVAL;
    size_t need = len + 2;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t')
            need += 1;
        else if (c < 0x20)
            need += 5;
    }
    if (sl_buf_reserve(out, need))
        return SL_ENOMEM;
    char *w = (char *)out->data + out->len;
    *w++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"':
        case '\\':
            *w++ = (char)c;
            break;
        case '\b':
            *w++ = 'b';
            break;
        case '\f':
            *w++ = 'f';
            break;
        case '\n':
            *w++ = 'n';
            break;
        case '\r':
            *w++ = 'r';
            break;
        case '\t':
            *w++ = 't';
            break;
        default:
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = "0123456789abcdef"[c >> 4];
            *w++ = "0123456789abcdef"[c & 15];
        }
    }
    *w++ = '"';
    out->len = (size_t)(w - (char *)out->data);
    return 0;
}

const char *sl_json_type_name(sl_json_type type)
{
    switch (type) {
    case SL_JSON_NONE:
        return "nothing";
    case SL_JSON_NULL:
        return "null";
    case SL_JSON_FALSE:
    case SL_JSON_TRUE:
        return "boolean";
    case SL_JSON_NUMBER:
        return "number";
    case SL_JSON_STRING:
        return "string";
    case SL_JSON_ARRAY:
        return "array";
    case SL_JSON_OBJECT:
        return "object";
    }
    return "unknown";
}
