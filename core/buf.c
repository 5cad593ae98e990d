/*
 * core/buf.c — growable byte buffer.
 */
#include "core/buf.h"
#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int sl_buf_reserve(sl_buf *b, size_t extra)
{
    if (extra <= b->cap - b->len)
        return 0;
    if (extra > SIZE_MAX / 2 - b->len)
        return SL_ENOMEM;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return SL_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int sl_buf_append(sl_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    int rc = sl_buf_reserve(b, n);
    if (rc)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void sl_buf_free(sl_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
