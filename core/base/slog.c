/*
 * core/base/slog.c — the structured logger (core/base/slog.h): formats a record in
 * memory, then writes it with one write(2).
 */
#include "core/base/slog.h"

#include "core/base/clock.h"
#include "core/base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic int g_format = SL_SLOG_LOGFMT;
static _Atomic int g_level = SL_SLOG_INFO;
static _Atomic int g_fd = 2;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void sl_slog_configure(sl_slog_format format, sl_slog_level min_level)
{
    atomic_store(&g_format, (int)format);
    atomic_store(&g_level, (int)min_level);
}

void sl_slog_set_fd(int fd)
{
    atomic_store(&g_fd, fd);
}

int sl_slog_parse_format(const char *s, sl_slog_format *out)
{
    if (s && strcmp(s, "logfmt") == 0)
        *out = SL_SLOG_LOGFMT;
    else if (s && strcmp(s, "json") == 0)
        *out = SL_SLOG_JSON;
    else
        return SL_EINVAL;
    return 0;
}

int sl_slog_parse_level(const char *s, sl_slog_level *out)
{
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (sl_slog_level)i;
            return 0;
        }
    return SL_EINVAL;
}

const char *sl_slog_level_name(sl_slog_level level)
{
    return (unsigned)level < 4 ? level_names[level] : "?";
}

bool sl_slog_enabled(sl_slog_level level)
{
    return (int)level >= atomic_load_explicit(&g_level, memory_order_relaxed);
}

/* ---- formatting ------------------------------------------------------------ */

/* Length of the well-formed UTF-8 sequence at p (a multi-byte lead byte),
 * or 0 when it is not one (overlongs, surrogates and code points past
 * U+10FFFF included). Stops at the NUL: continuation bytes are never 0. */
static size_t utf8_seq(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* The code point of the n-byte well-formed sequence at p. */
static unsigned utf8_cp(const unsigned char *p, size_t n)
{
    unsigned cp = n == 2 ? p[0] & 0x1Fu : n == 3 ? p[0] & 0x0Fu : p[0] & 0x07u;
    for (size_t i = 1; i < n; i++)
        cp = (cp << 6) | (p[i] & 0x3Fu);
    return cp;
}

/* Code points that are valid UTF-8 yet must not reach a log line raw: C1
 * controls (U+0080..U+009F; some terminals act on them), the line and
 * paragraph separators (U+2028/2029: line breaks to some readers, and to
 * JavaScript before ES2019), and the bidi overrides and isolates
 * (U+202A..U+202E, U+2066..U+2069), which can make a line read as something
 * else than it holds ("Trojan Source"). */
static bool cp_unsafe(unsigned cp)
{
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Appends s as a JSON string, quotes included. */
static int put_json_str(sl_buf *b, const char *s)
{
    int rc = sl_buf_append(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (!rc && *p) {
        unsigned char c = *p;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            rc = sl_buf_append(b, esc, 2);
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            const char *e = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (e)
                rc = sl_buf_append(b, e, 2);
            else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                rc = sl_buf_append(b, esc, 6);
            }
            p++;
        } else if (c < 0x80) {
            const unsigned char *q = p;
            while (*q >= 0x20 && *q < 0x7f && *q != '"' && *q != '\\')
                q++;
            rc = sl_buf_append(b, p, (size_t)(q - p));
            p = q;
        } else {
            size_t n = utf8_seq(p);
            if (n && cp_unsafe(utf8_cp(p, n))) {
                snprintf(esc, sizeof esc, "\\u%04x", utf8_cp(p, n));
                rc = sl_buf_append(b, esc, 6);
                p += n;
            } else if (n) {
                rc = sl_buf_append(b, p, n);
                p += n;
            } else { /* not UTF-8: the record must stay valid JSON */
                rc = sl_buf_append(b, "\\ufffd", 6);
                p++;
            }
        }
    }
    return rc ? rc : sl_buf_append(b, "\"", 1);
}

/* Whether a logfmt value needs quotes. */
static bool logfmt_needs_quotes(const char *s)
{
    if (!*s)
        return true;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= ' ' || *p == '=' || *p == '"' || *p == '\\' || *p == 0x7f)
            return true;
        else if (*p >= 0x80) {
            size_t n = utf8_seq(p);
            if (!n || cp_unsafe(utf8_cp(p, n)))
                return true;
            p += n - 1;
        }
    return false;
}

/* Appends s as a logfmt value: bare when it can be, else quoted with
 * escapes (\xNN for control characters and bytes that are not UTF-8,
 * \uNNNN for the code points of cp_unsafe()). */
static int put_logfmt_str(sl_buf *b, const char *s)
{
    if (!logfmt_needs_quotes(s))
        return sl_buf_append(b, s, strlen(s));
    int rc = sl_buf_append(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (!rc && *p) {
        unsigned char c = *p;
        char esc[8];
        size_t n;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            rc = sl_buf_append(b, esc, 2);
            p++;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            rc = sl_buf_append(b, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t", 2);
            p++;
        } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8_seq(p))) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            rc = sl_buf_append(b, esc, 4);
            p++;
        } else if (c >= 0x80 && cp_unsafe(utf8_cp(p, utf8_seq(p)))) {
            n = utf8_seq(p);
            snprintf(esc, sizeof esc, "\\u%04x", utf8_cp(p, n));
            rc = sl_buf_append(b, esc, 6);
            p += n;
        } else if (c >= 0x80) {
            n = utf8_seq(p);
            rc = sl_buf_append(b, p, n);
            p += n;
        } else {
            rc = sl_buf_append(b, p, 1);
            p++;
        }
    }
    return rc ? rc : sl_buf_append(b, "\"", 1);
}

/* Appends a key, keeping [A-Za-z0-9_.-] and writing '_' for anything else. */
static int put_key(sl_buf *b, const char *k)
{
    if (!k || !*k)
        k = "_";
    for (const char *p = k; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        char o = ok ? c : '_';
        int rc = sl_buf_append(b, &o, 1);
        if (rc)
            return rc;
    }
    return 0;
}

static int put_field(sl_buf *b, sl_slog_format f, const char *key, const char *str, int64_t num)
{
    int rc = sl_buf_append(b, f == SL_SLOG_JSON ? ",\"" : " ", f == SL_SLOG_JSON ? 2 : 1);
    if (!rc)
        rc = put_key(b, key);
    if (!rc)
        rc = sl_buf_append(b, f == SL_SLOG_JSON ? "\":" : "=", f == SL_SLOG_JSON ? 2 : 1);
    if (rc)
        return rc;
    if (!str) {
        char v[32];
        int n = snprintf(v, sizeof v, "%lld", (long long)num);
        return sl_buf_append(b, v, (size_t)n);
    }
    return f == SL_SLOG_JSON ? put_json_str(b, str) : put_logfmt_str(b, str);
}

int sl_slog_format_line(sl_buf *out, sl_slog_format format, int64_t ts_ms, sl_slog_level level,
                        const char *component, const char *msg, const sl_slog_field *kv, size_t n)
{
    char ts[SL_TIME_RFC3339_MAX];
    if (!sl_time_format_rfc3339(ts_ms, ts))
        snprintf(ts, sizeof ts, "%lld", (long long)ts_ms);
    /* Trailing newlines belong to the line, not the message. */
    size_t ml = msg ? strlen(msg) : 0;
    while (ml && (msg[ml - 1] == '\n' || msg[ml - 1] == '\r'))
        ml--;
    char *m = malloc(ml + 1);
    if (!m)
        return SL_ENOMEM;
    memcpy(m, msg ? msg : "", ml);
    m[ml] = '\0';
    int rc;
    if (format == SL_SLOG_JSON) {
        rc = sl_buf_append(out, "{\"ts\":", 6);
        if (!rc)
            rc = put_json_str(out, ts);
    } else {
        rc = sl_buf_append(out, "ts=", 3);
        if (!rc)
            rc = sl_buf_append(out, ts, strlen(ts));
    }
    if (!rc)
        rc = put_field(out, format, "level", sl_slog_level_name(level), 0);
    if (!rc)
        rc = put_field(out, format, "component", component ? component : "sluice", 0);
    if (!rc)
        rc = put_field(out, format, "msg", m, 0);
    for (size_t i = 0; !rc && i < n; i++)
        rc = put_field(out, format, kv[i].key, kv[i].str, kv[i].num);
    if (!rc)
        rc = format == SL_SLOG_JSON ? sl_buf_append(out, "}\n", 2) : sl_buf_append(out, "\n", 1);
    free(m);
    return rc;
}

/* ---- writing ----------------------------------------------------------------- */

static void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere left to complain to */
        c += w;
        n -= (size_t)w;
    }
}

static void vlog(sl_slog_level level, const char *component, const sl_slog_field *kv, size_t n,
                 const char *fmt, va_list ap)
{
    char small[1024];
    va_list ap2;
    va_copy(ap2, ap);
    int len = vsnprintf(small, sizeof small, fmt, ap);
    char *msg = small;
    if (len >= (int)sizeof small) {
        char *big = malloc((size_t)len + 1);
        if (big) {
            vsnprintf(big, (size_t)len + 1, fmt, ap2);
            msg = big;
        }
    }
    va_end(ap2);
    if (len < 0)
        snprintf(small, sizeof small, "(bad log format \"%s\")", fmt);
    sl_buf line = SL_BUF_INIT;
    sl_slog_format f = (sl_slog_format)atomic_load(&g_format);
    int fd = atomic_load(&g_fd);
    if (sl_slog_format_line(&line, f, sl_clock_now_ms(), level, component, msg, kv, n) == 0) {
        write_all(fd, line.data, line.len);
    } else { /* out of memory: a shortened record, still one valid line */
        char tiny[256];
        snprintf(tiny, sizeof tiny,
                 f == SL_SLOG_JSON ? "{\"level\":\"%s\",\"msg\":\"out of memory writing a log "
                                     "record\"}\n"
                                   : "level=%s msg=\"out of memory writing a log record\"\n",
                 sl_slog_level_name(level));
        write_all(fd, tiny, strlen(tiny));
    }
    sl_buf_free(&line);
    if (msg != small)
        free(msg);
}

void sl_slog(sl_slog_level level, const char *component, const char *fmt, ...)
{
    if (!sl_slog_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, component, NULL, 0, fmt, ap);
    va_end(ap);
}

void sl_slog_lifecycle(const char *component, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(SL_SLOG_INFO, component, NULL, 0, fmt, ap);
    va_end(ap);
}

void sl_slog_kv(sl_slog_level level, const char *component, const sl_slog_field *kv, size_t n,
                const char *fmt, ...)
{
    if (!sl_slog_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, component, kv, n, fmt, ap);
    va_end(ap);
}
