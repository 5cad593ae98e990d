/*
 * core/base/buf.h — a growable byte buffer, the one way sluice builds byte strings.
 */
#ifndef SL_BUF_H
#define SL_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_buf {
    uint8_t *data; /* owned; NULL until the first append */
    size_t len;
    size_t cap;
} sl_buf;

#define SL_BUF_INIT                                                                                \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

/* Makes room for at least extra more bytes. Returns 0 or SL_ENOMEM (buffer
 * unchanged). */
int sl_buf_reserve(sl_buf *b, size_t extra);

/* Appends n bytes. Returns 0 or SL_ENOMEM (buffer unchanged). */
int sl_buf_append(sl_buf *b, const void *p, size_t n);

/* Appends printf-formatted text. Returns 0 or SL_ENOMEM (buffer unchanged). */
int sl_buf_printf(sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The one way sluice grows an array: makes *arrp (a T * variable, passed
 * as &arr) hold cap ? 2 * cap : first elements of elem bytes, the new ones
 * zeroed, and updates *cap. Returns 0, or SL_ENOMEM with both untouched.
 * SL_GROW(arr, cap, first) passes the element size of arr's type. */
int sl_grow(void *arrp, size_t *cap, size_t elem, size_t first);
#define SL_GROW(arr, cap, first) sl_grow(&(arr), &(cap), sizeof *(arr), (first))

/* Appends the whole regular file at path, refusing files over max bytes.
 * Returns 0, or SL_ENOENT/SL_EIO/SL_EINVAL (not a regular file)/SL_ETOOBIG/
 * SL_ENOMEM with err ("PATH: reason"); b is unchanged on error. */
struct sl_error;
int sl_buf_read_file(sl_buf *b, const char *path, size_t max, struct sl_error *err);

/* Releases the memory; the buffer is empty and reusable afterwards. */
void sl_buf_free(sl_buf *b);

#endif
