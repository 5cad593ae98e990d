/*
 * core/bus/baggage.c — W3C Baggage member lookup (see baggage.h).
 */
#include "core/bus/baggage.h"

#include "core/base/json.h"

#include <stdbool.h>
#include <string.h>

/* RFC 9110 tchar. */
static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* W3C baggage-octet: printable US-ASCII but space, '"', ',', ';' and '\'. */
static bool baggage_octet(unsigned char c)
{
    return c == 0x21 || (c >= 0x23 && c <= 0x2b) || (c >= 0x2d && c <= 0x3a) ||
           (c >= 0x3c && c <= 0x5b) || (c >= 0x5d && c <= 0x7e);
}

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes v[0..n) into out (cap bytes, NUL-terminated). */
static int decode(const char *v, size_t n, char *out, size_t cap, size_t *out_len, size_t at,
                  sl_error *err)
{
    size_t o = 0;
    if (!cap)
        return sl_error_set(err, SL_ETOOBIG, "no room for the baggage value");
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (c == '%') {
            if (n - i < 3 || hexval(v[i + 1]) < 0 || hexval(v[i + 2]) < 0)
                return sl_error_set(err, SL_EINVAL, "byte %zu: bad percent-encoding in baggage",
                                    at + i);
            c = (char)(hexval(v[i + 1]) << 4 | hexval(v[i + 2]));
            i += 2;
        }
        if (o + 1 >= cap)
            return sl_error_set(err, SL_ETOOBIG, "the baggage value is longer than %zu bytes",
                                cap ? cap - 1 : 0);
        out[o++] = c;
    }
    out[o] = '\0';
    if (!sl_json_utf8_valid(out, o))
        return sl_error_set(err, SL_EINVAL, "byte %zu: the baggage value is not UTF-8", at);
    *out_len = o;
    return 0;
}

int sl_baggage_get(const char *h, size_t len, const char *key, char *out, size_t cap,
                   size_t *out_len, sl_error *err)
{
    if (len > SL_BAGGAGE_MAX_BYTES)
        return sl_error_set(err, SL_EINVAL, "the baggage header is longer than %d bytes",
                            SL_BAGGAGE_MAX_BYTES);
    size_t kl = strlen(key), i = 0, members = 0;
    const char *found = NULL;
    size_t found_len = 0, found_at = 0;
    while (i <= len) {
        while (i < len && ows(h[i]))
            i++;
        if (i == len || h[i] == ',') { /* an empty list member */
            if (i++ >= len)
                break;
            continue;
        }
        if (++members > SL_BAGGAGE_MAX_MEMBERS)
            return sl_error_set(err, SL_EINVAL, "the baggage header has more than %d members",
                                SL_BAGGAGE_MAX_MEMBERS);
        size_t ks = i;
        while (i < len && tchar((unsigned char)h[i]))
            i++;
        size_t ke = i;
        while (i < len && ows(h[i]))
            i++;
        if (ke == ks || i == len || h[i] != '=')
            return sl_error_set(err, SL_EINVAL, "byte %zu: a baggage member must be key=value", i);
        i++;
        while (i < len && ows(h[i]))
            i++;
        size_t vs = i;
        while (i < len && baggage_octet((unsigned char)h[i]))
            i++;
        size_t ve = i;
        while (i < len && ows(h[i]))
            i++;
        if (i < len && h[i] != ',' && h[i] != ';')
            return sl_error_set(err, SL_EINVAL, "byte %zu: invalid character in a baggage value",
                                i);
        /* properties: everything up to the next ',' made of allowed bytes */
        while (i < len && h[i] != ',') {
            unsigned char c = (unsigned char)h[i];
            if (!(ows((char)c) || c == ';' || c == '=' || baggage_octet(c)))
                return sl_error_set(err, SL_EINVAL, "byte %zu: invalid character in baggage", i);
            i++;
        }
        if (!found && ke - ks == kl && memcmp(h + ks, key, kl) == 0) {
            found = h + vs;
            found_len = ve - vs;
            found_at = vs;
        }
        if (i < len)
            i++; /* the ',' */
        else
            break;
    }
    if (!found)
        return sl_error_set(err, SL_ENOENT, "no baggage member %s", key);
    return decode(found, found_len, out, cap, out_len, found_at, err);
}
