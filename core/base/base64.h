/*
 * core/base/base64.h — base64 (RFC 4648) in and out: the standard alphabet
 * with '=' padding that CloudEvents' data_base64 and signature headers use, and
 * the URL-safe alphabet without padding that API tokens use.
 */
#ifndef SL_BASE64_H
#define SL_BASE64_H

#include <stddef.h>

#include "core/base/buf.h"

/* Flags. Encoding: SL_BASE64_URL, SL_BASE64_NOPAD, SL_BASE64_QUOTED.
 * Decoding: SL_BASE64_SKIP_INVALID. */
#define SL_BASE64_URL 0x1     /* '-' and '_' for 62 and 63 (RFC 4648 §5) */
#define SL_BASE64_NOPAD 0x2   /* no trailing '=' */
#define SL_BASE64_QUOTED 0x4  /* sl_base64_append(): inside double quotes, a JSON string */
#define SL_BASE64_SKIP_INVALID 0x8 /* decode: pass over characters outside the alphabet
                                    * ('=' included) and do not check the length, for text
                                    * that was validated before */

/* The number of characters the encoding of n bytes has (flags: SL_BASE64_NOPAD). */
size_t sl_base64_encoded_len(size_t n, unsigned flags);

/* Writes the encoding of in[0..n) to out, which has room for
 * sl_base64_encoded_len(n, flags) characters; no NUL is written.
 * Returns the number of characters written. */
size_t sl_base64_encode(char *out, const void *in, size_t n, unsigned flags);

/* Appends the encoding of in[0..n) to b (in double quotes with
 * SL_BASE64_QUOTED). Returns 0 or SL_ENOMEM (b unchanged). */
int sl_base64_append(sl_buf *b, const void *in, size_t n, unsigned flags);

/* The value of c in the standard alphabet (0–63), or -1 ('=' included). */
int sl_base64_value(unsigned char c);

/* The number of bytes s[0..n) decodes to, standard alphabet with optional
 * '=' padding (up to two): after the padding is taken off, n % 4 may not be
 * 1, and padding, when present, must complete a group of four. Returns 0, or
 * SL_EINVAL (wrong length) with *len untouched. The characters are not
 * checked (sl_base64_decode() does). */
int sl_base64_decoded_len(const char *s, size_t n, size_t *len);

/* Decodes s[0..n) (standard alphabet) into out, which has room for
 * n / 4 * 3 + 2 bytes; *out_len is set to the number of bytes written.
 * Strict unless SL_BASE64_SKIP_INVALID: the length must pass
 * sl_base64_decoded_len(), and every character before the padding must be in
 * the alphabet. Returns 0, or SL_EINVAL with *bad set to the offset of the
 * first character outside the alphabet, or to n when the length is wrong
 * (bad may be NULL); out's contents are then unspecified. */
int sl_base64_decode(const char *s, size_t n, unsigned flags, unsigned char *out,
                     size_t *out_len, size_t *bad);

#endif
