/*
 * core/base/slog.h — the server's structured logger: one line per record, in
 * logfmt (the default, readable by a person) or JSON (one object per line,
 * for log shippers), each with ts, level, component, msg and any number of
 * key=values. (Not to be confused with core/log/log.h, the event-log store.)
 *
 *   logfmt: ts=2026-11-29T20:05:12.123Z level=info component=server msg="listening on …" port=8080
 *   json:   {"ts":"2026-11-29T20:05:12.123Z","level":"info","component":"server","msg":"listening
 * on …","port":8080}
 *
 * Values are escaped so that a record is always exactly one line: in JSON
 * every string is valid JSON (quotes, backslashes and control characters
 * escaped, bytes that are not UTF-8 replaced by U+FFFD); in logfmt a value
 * is quoted when it holds a space, '=', '"' or anything unprintable, with
 * \" \\ \n \r \t and \xNN escapes inside the quotes. In both, the C1
 * controls (U+0080..U+009F), U+2028/U+2029 and the bidi overrides and
 * isolates (U+202A..U+202E, U+2066..U+2069) are written as \uNNNN, so a
 * line cannot break or reorder itself on a terminal or in a viewer. Keys keep only
 * [A-Za-z0-9_.-] (anything else becomes '_').
 *
 * Thread-safe: the settings are atomics, and each record is built in memory
 * and written with one write(2): in a file opened O_APPEND lines from
 * several threads do not interleave; on a pipe a line up to PIPE_BUF
 * (4 KiB on Linux) is atomic, longer ones may be split by another writer.
 * Messages are kept as they were before the logger existed (tests and
 * people grep them); the trailing newlines of a message are dropped.
 */
#ifndef SL_SLOG_H
#define SL_SLOG_H

#include "core/base/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl_slog_level {
    SL_SLOG_DEBUG = 0,
    SL_SLOG_INFO = 1,
    SL_SLOG_WARN = 2,
    SL_SLOG_ERROR = 3,
} sl_slog_level;

typedef enum sl_slog_format {
    SL_SLOG_LOGFMT = 0, /* the default */
    SL_SLOG_JSON = 1,
} sl_slog_format;

/* One key=value. str NULL means the value is the integer num (written
 * unquoted in both formats). */
typedef struct sl_slog_field {
    const char *key;
    const char *str;
    int64_t num;
} sl_slog_field;

/* A string field (NULL is written as ""). */
#define SL_SLOG_S(k, v) ((sl_slog_field){(k), (v) ? (v) : "", 0})
/* An integer field. */
#define SL_SLOG_I(k, v) ((sl_slog_field){(k), NULL, (int64_t)(v)})

/* Sets the format and the lowest level written (default: logfmt, info).
 * Call any time; records being written meanwhile use either setting. */
void sl_slog_configure(sl_slog_format format, sl_slog_level min_level);

/* Where records go (default 2, stderr); for tests. The fd is not owned. */
void sl_slog_set_fd(int fd);

/* "logfmt" | "json" -> *out. Returns 0, or SL_EINVAL (*out unchanged). */
int sl_slog_parse_format(const char *s, sl_slog_format *out);

/* "debug" | "info" | "warn" | "error" -> *out. Returns 0, or SL_EINVAL
 * (*out unchanged). */
int sl_slog_parse_level(const char *s, sl_slog_level *out);

/* The name of a level ("info"); "?" for a value outside the enum. */
const char *sl_slog_level_name(sl_slog_level level);

/* Whether a record at level would be written: lets callers skip preparing
 * fields for debug records. */
bool sl_slog_enabled(sl_slog_level level);

/* Writes one record with the printf-formatted message and no fields, when
 * level is enabled. component names the part of the server ("http",
 * "databus", "rules", …). Never fails visibly: when memory runs out the
 * record is written shortened from a stack buffer. */
void sl_slog(sl_slog_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes a lifecycle record (the server started listening, is stopping,
 * stopped) at level info whatever the minimum level: operators, scripts
 * and tests wait for these lines, so --log-level warn or error must not
 * hide them. */
void sl_slog_lifecycle(const char *component, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The same with n fields after msg (kv borrowed for the call; may be NULL
 * when n is 0). */
void sl_slog_kv(sl_slog_level level, const char *component, const sl_slog_field *kv, size_t n,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Appends one record, newline included, to out: the pure formatter behind
 * sl_slog_kv(), for tests. ts_ms is the time (milliseconds since the
 * epoch). Returns 0 or SL_ENOMEM (out may hold part of the line then). */
int sl_slog_format_line(sl_buf *out, sl_slog_format format, int64_t ts_ms, sl_slog_level level,
                        const char *component, const char *msg, const sl_slog_field *kv, size_t n);

#endif
