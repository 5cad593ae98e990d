/*
 * core/base/err.h — sluice's error codes and the optional human-readable detail.
 *
 * Functions return 0 on success or a negative SL_E… code. Callers that want
 * to know *why* pass an sl_error, which the callee fills with a sentence a
 * person can act on ("segment 00000000000000001234.log: batch at byte 4096:
 * CRC mismatch"). Passing NULL is always allowed.
 */
#ifndef SL_ERR_H
#define SL_ERR_H

#include <stddef.h>

/* One table drives the enum and sl_strerror() so they cannot drift. */
#define SL_ERRNO_MAP(XX)                                                                           \
    XX(EINVAL, "invalid argument")                                                                 \
    XX(ENOMEM, "out of memory")                                                                    \
    XX(EIO, "input/output error")                                                                  \
    XX(ENOSPC, "no space left on device")                                                          \
    XX(ENOENT, "no such file or directory")                                                        \
    XX(EEXIST, "already exists")                                                                   \
    XX(ECORRUPT, "data is corrupt")                                                                \
    XX(EPARTIAL, "incomplete input")                                                               \
    XX(EPARSE, "parse error")                                                                      \
    XX(ETOOBIG, "too large")                                                                       \
    XX(ERANGE, "offset out of range")                                                              \
    XX(EEOF, "no more data")                                                                       \
    XX(EUNSUPPORTED, "unsupported format or feature")                                              \
    XX(ECLOSED, "handle is closed")                                                                \
    XX(EFULL, "buffer is full, retry later")                                                       \
    XX(ESHUTDOWN, "shutting down")                                                                 \
    XX(ETIMEDOUT, "timed out")                                                                     \
    XX(EDEFERRED, "not attempted, try again later")                                                \
    XX(ESCRIPT, "Lua error")                                                                       \
    XX(EBUDGET, "Lua instruction budget exceeded")                                                 \
    XX(ELIMIT, "limit reached, retrying does not help")                                            \
    XX(EBUSY, "in use")

typedef enum sl_errno {
    SL_OK = 0,
#define XX(code, _) SL_##code,
    SL__ERRNO_FIRST = -1000,
    SL_ERRNO_MAP(XX)
#undef XX
} sl_errno;

#define SL_ERROR_MAX 512

/* Detail for the caller; filled on failure only, left untouched on success. */
typedef struct sl_error {
    int code;
    char msg[SL_ERROR_MAX];
} sl_error;

/* Static string for an SL_E… code (or "unknown error"); never NULL. */
const char *sl_strerror(int code);

/* Records code and a printf-style message in err (if non-NULL); returns code
 * so callers can write `return sl_error_set(err, SL_EIO, "…", …);`. */
int sl_error_set(sl_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Same, appending ": strerror(errno_value)" to the message; returns SL_EIO,
 * or SL_ENOSPC/SL_ENOENT/SL_ENOMEM when errno_value says so. */
int sl_error_errno(sl_error *err, int errno_value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
