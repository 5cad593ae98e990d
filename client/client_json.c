/*
 * client/client_json.c — the little JSON libsluice needs: a structural check
 * of the events it is given, and a scanner for the answers it reads (the
 * server's publish results, the agent's ack lines). No allocation; every
 * function is bounded by its end pointer, so a truncated answer never reads
 * past the buffer.
 */
#include "client_internal.h"

#include <string.h>

#define DEPTH_MAX 64

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

const char *sl_client__json_ws(const char *p, const char *end)
{
    while (p < end && is_ws(*p))
        p++;
    return p;
}

int sl_client__json_copy_object(const char *s, size_t n, char *out)
{
    /* The open brackets, as a stack of bits (1 = '{'), deep enough for any
     * sane event; deeper ones are refused (the server refuses them too). */
    uint64_t stack[16] = {0};
    size_t depth = 0, i = 0;
    bool started = false, in_str = false;
    for (; i < n; i++) {
        char ch = s[i];
        out[i] = ch;
        if (in_str) {
            /* A raw control character is invalid JSON, and a '\n' would cut the line. */
            if ((unsigned char)ch < 0x20)
                return -1;
            if (ch == '\\') {
                if (++i == n || (unsigned char)s[i] < 0x20)
                    return -1; /* an escaped line break would still cut the line */
                out[i] = s[i];
            } else if (ch == '"') {
                in_str = false;
            }
            continue;
        }
        if (is_ws(ch)) {
            out[i] = ' '; /* an NDJSON line must not hold a line break */
            continue;
        }
        if (started && depth == 0)
            return -1; /* something after the object */
        if (!started && ch != '{')
            return -1;
        started = true;
        if (ch == '"') {
            in_str = true;
        } else if (ch == '{' || ch == '[') {
            if (depth == sizeof stack * 8)
                return -1;
            if (ch == '{')
                stack[depth / 64] |= (uint64_t)1 << (depth % 64);
            else
                stack[depth / 64] &= ~((uint64_t)1 << (depth % 64));
            depth++;
        } else if (ch == '}' || ch == ']') {
            if (depth == 0)
                return -1;
            depth--;
            bool obj = (stack[depth / 64] >> (depth % 64)) & 1;
            if (obj != (ch == '}'))
                return -1;
        }
    }
    return started && depth == 0 && !in_str ? 0 : -1;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Appends byte ch to out when there is room for it and the final NUL. */
static void put(char *out, size_t outlen, size_t *w, char ch)
{
    if (out && *w + 1 < outlen)
        out[(*w)++] = ch;
}

/* Reads 4 hex digits at p into *u; false when they are not there. */
static bool hex4(const char *p, const char *end, unsigned *u)
{
    if (end - p < 4)
        return false;
    *u = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0)
            return false;
        *u = *u * 16 + (unsigned)h;
    }
    return true;
}

const char *sl_client__json_str(const char *p, const char *end, char *out, size_t outlen)
{
    size_t w = 0;
    if (out && outlen)
        out[0] = '\0';
    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        char ch = *p;
        if (ch == '"') {
            if (out && outlen)
                out[w] = '\0';
            return p + 1;
        }
        if (ch != '\\') {
            put(out, outlen, &w, ch);
            continue;
        }
        if (++p >= end)
            return NULL;
        switch (*p) {
        case 'b':
            put(out, outlen, &w, '\b');
            break;
        case 'f':
            put(out, outlen, &w, '\f');
            break;
        case 'n':
            put(out, outlen, &w, '\n');
            break;
        case 'r':
            put(out, outlen, &w, '\r');
            break;
        case 't':
            put(out, outlen, &w, '\t');
            break;
        case 'u': {
            unsigned u, lo;
            if (!hex4(p + 1, end, &u))
                return NULL;
            p += 4;
            /* A surrogate pair makes one code point; a lone half becomes U+FFFD. */
            if (u >= 0xD800 && u <= 0xDBFF && end - p > 6 && p[1] == '\\' && p[2] == 'u' &&
                hex4(p + 3, end, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else if (u >= 0xD800 && u <= 0xDFFF) {
                u = 0xFFFD;
            }
            if (u < 0x80) {
                put(out, outlen, &w, (char)u);
            } else if (u < 0x800) {
                put(out, outlen, &w, (char)(0xC0 | (u >> 6)));
                put(out, outlen, &w, (char)(0x80 | (u & 0x3F)));
            } else if (u < 0x10000) {
                put(out, outlen, &w, (char)(0xE0 | (u >> 12)));
                put(out, outlen, &w, (char)(0x80 | ((u >> 6) & 0x3F)));
                put(out, outlen, &w, (char)(0x80 | (u & 0x3F)));
            } else {
                put(out, outlen, &w, (char)(0xF0 | (u >> 18)));
                put(out, outlen, &w, (char)(0x80 | ((u >> 12) & 0x3F)));
                put(out, outlen, &w, (char)(0x80 | ((u >> 6) & 0x3F)));
                put(out, outlen, &w, (char)(0x80 | (u & 0x3F)));
            }
            break;
        }
        default:
            put(out, outlen, &w, *p);
            break; /* '"', '\\', '/' */
        }
    }
    return NULL;
}

const char *sl_client__json_skip(const char *p, const char *end)
{
    p = sl_client__json_ws(p, end);
    if (p >= end)
        return NULL;
    if (*p == '"')
        return sl_client__json_str(p, end, NULL, 0);
    if (*p != '{' && *p != '[') {
        /* A number, true, false or null: up to the next delimiter. */
        const char *q = p;
        while (q < end && !is_ws(*q) && *q != ',' && *q != ']' && *q != '}' && *q != ':')
            q++;
        return q > p ? q : NULL;
    }
    /* A container: count brackets, stepping over strings. */
    int depth = 0;
    while (p < end) {
        char ch = *p;
        if (ch == '"') {
            p = sl_client__json_str(p, end, NULL, 0);
            if (!p)
                return NULL;
            continue;
        }
        if (ch == '{' || ch == '[') {
            if (++depth > DEPTH_MAX)
                return NULL;
        } else if (ch == '}' || ch == ']') {
            if (--depth == 0)
                return p + 1;
        }
        p++;
    }
    return NULL;
}
