/*
 * core/base/buf.c — growable byte buffer.
 */
#include "core/base/buf.h"
#include "core/base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int sl_buf_read_file(sl_buf *b, const char *path, size_t max, sl_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_error_errno(err, errno, "%s", path);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = sl_error_errno(err, errno, "%s", path);
    else if (!S_ISREG(st.st_mode))
        rc = sl_error_set(err, SL_EINVAL, "%s: not a regular file", path);
    else if ((uint64_t)st.st_size > max)
        rc = sl_error_set(err, SL_ETOOBIG, "%s: larger than %zu bytes", path, max);
    else if ((rc = sl_buf_reserve(b, (size_t)st.st_size + 1)))
        sl_error_set(err, rc, "%s: out of memory", path);
    size_t len0 = b->len;
    while (!rc) { /* to the end, whatever the size said */
        if ((rc = sl_buf_reserve(b, 4096))) {
            sl_error_set(err, rc, "%s: out of memory", path);
            break;
        }
        ssize_t r = read(fd, b->data + b->len, b->cap - b->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = sl_error_errno(err, errno, "%s: read", path);
        else if (r == 0)
            break;
        else if ((b->len += (size_t)r) - len0 > max)
            rc = sl_error_set(err, SL_ETOOBIG, "%s: larger than %zu bytes", path, max);
    }
    close(fd);
    if (rc)
        b->len = len0;
    return rc;
}

int sl_buf_printf(sl_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sl_buf_reserve(b, (size_t)n + 1))
        return SL_ENOMEM;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int sl_grow(void *arrp, size_t *cap, size_t elem, size_t first)
{
    size_t n = *cap ? *cap * 2 : first;
    if (n <= *cap || (elem && n > SIZE_MAX / elem))
        return SL_ENOMEM;
    /* arrp points to a T *: copied out and back as bytes, since T * and
     * void * share one representation on every platform sluice runs on. */
    void *arr;
    memcpy(&arr, arrp, sizeof arr);
    char *g = realloc(arr, n * elem);
    if (!g)
        return SL_ENOMEM;
    memset(g + *cap * elem, 0, (n - *cap) * elem);
    memcpy(arrp, &g, sizeof g);
    *cap = n;
    return 0;
}
