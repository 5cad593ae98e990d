/*
 * core/base/base64.c — base64 (RFC 4648) encoding and decoding, the one copy
 * the event parser, the CloudEvents bindings, the connectors, the rule
 * runner's dead letters and the API tokens share.
 */
#include "core/base/base64.h"

#include <stdbool.h>
#include <stdint.h>

#include "core/base/err.h"

static const char k_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char k_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t sl_base64_encoded_len(size_t n, unsigned flags)
{
    if (flags & SL_BASE64_NOPAD)
        return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    return (n + 2) / 3 * 4;
}

size_t sl_base64_encode(char *out, const void *in, size_t n, unsigned flags)
{
    const char *tab = flags & SL_BASE64_URL ? k_url : k_std;
    const unsigned char *s = in;
    char *w = out;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *w++ = tab[v >> 18];
        *w++ = tab[v >> 12 & 63];
        *w++ = tab[v >> 6 & 63];
        *w++ = tab[v & 63];
    }
    if (i < n) {
        bool two = i + 1 < n;
        uint32_t v = (uint32_t)s[i] << 16 | (two ? (uint32_t)s[i + 1] << 8 : 0);
        *w++ = tab[v >> 18];
        *w++ = tab[v >> 12 & 63];
        if (two)
            *w++ = tab[v >> 6 & 63];
        if (!(flags & SL_BASE64_NOPAD)) {
            if (!two)
                *w++ = '=';
            *w++ = '=';
        }
    }
    return (size_t)(w - out);
}

int sl_base64_append(sl_buf *b, const void *in, size_t n, unsigned flags)
{
    size_t quotes = flags & SL_BASE64_QUOTED ? 2 : 0;
    if (n > SIZE_MAX / 4 * 3 - 3) /* the length below would overflow */
        return SL_ENOMEM;
    size_t need = sl_base64_encoded_len(n, flags) + quotes;
    if (need == 0) /* b may have no memory yet */
        return 0;
    if (sl_buf_reserve(b, need))
        return SL_ENOMEM;
    char *w = (char *)b->data + b->len;
    if (quotes)
        *w++ = '"';
    w += sl_base64_encode(w, in, n, flags);
    if (quotes)
        *w++ = '"';
    b->len = (size_t)(w - (char *)b->data);
    return 0;
}

int sl_base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* s[0..n) without its trailing padding (up to two '='); *pad gets how many. */
static size_t unpadded(const char *s, size_t n, size_t *pad)
{
    *pad = 0;
    while (*pad < 2 && n > 0 && s[n - 1] == '=')
        n--, (*pad)++;
    return n;
}

int sl_base64_decoded_len(const char *s, size_t n, size_t *len)
{
    size_t pad;
    n = unpadded(s, n, &pad);
    if (n % 4 == 1 || (pad && (n + pad) % 4))
        return SL_EINVAL;
    *len = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    return 0;
}

int sl_base64_decode(const char *s, size_t n, unsigned flags, unsigned char *out,
                     size_t *out_len, size_t *bad)
{
    bool skip = flags & SL_BASE64_SKIP_INVALID;
    size_t dummy, len;
    if (!bad)
        bad = &dummy;
    if (!skip) {
        if (sl_base64_decoded_len(s, n, &len)) {
            *bad = n;
            return SL_EINVAL;
        }
        size_t pad;
        n = unpadded(s, n, &pad);
    }
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = sl_base64_value((unsigned char)s[i]);
        if (v < 0) {
            if (skip)
                continue;
            *bad = i;
            return SL_EINVAL;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    *out_len = o;
    return 0;
}
