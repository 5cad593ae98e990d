/*
 * core/base/err.c — error strings and the sl_error detail helpers.
 */
#include "core/base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *sl_strerror(int code)
{
    switch (code) {
    case SL_OK:
        return "success";
#define XX(c, s)                                                                                   \
    case SL_##c:                                                                                   \
        return s;
        SL_ERRNO_MAP(XX)
#undef XX
    default:
        return "unknown error";
    }
}

int sl_error_set(sl_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int sl_error_errno(sl_error *err, int errno_value, const char *fmt, ...)
{
    int code = errno_value == ENOSPC || errno_value == EDQUOT ? SL_ENOSPC
               : errno_value == ENOENT                        ? SL_ENOENT
               : errno_value == ENOMEM                        ? SL_ENOMEM
                                                              : SL_EIO;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        char tmp[128]; /* GNU strerror_r: thread-safe, returns the string to use */
        if (n >= 0 && (size_t)n < sizeof err->msg)
            snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s",
                     strerror_r(errno_value, tmp, sizeof tmp));
        err->code = code;
    }
    return code;
}
