/*
 * core/base/clock.h — wall-clock and monotonic time in the units sluice stores,
 * and RFC 3339 timestamps (the CloudEvents `time` attribute) in and out.
 */
#ifndef SL_CLOCK_H
#define SL_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds since the Unix epoch (event and batch timestamps). */
int64_t sl_clock_now_ms(void);

/* Monotonic nanoseconds, for measuring durations only. */
int64_t sl_clock_mono_ns(void);

/* Monotonic milliseconds (sl_clock_mono_ns() / 1000000), for deadlines and
 * durations kept in milliseconds. */
int64_t sl_clock_mono_ms(void);

/* The CLOCK_MONOTONIC time ms from now, as the absolute deadline of
 * pthread_cond_timedwait() on a condition set to that clock. */
struct timespec sl_clock_mono_deadline(int64_t ms);

/* Room sl_time_format_rfc3339() needs, NUL included. */
#define SL_TIME_RFC3339_MAX 32

/* Parses an RFC 3339 date-time ("2024-02-29T13:45:00.123+01:00") of exactly
 * len bytes into milliseconds since the epoch (UTC). Accepts 'T'/'t', 'Z'/'z',
 * ±hh:mm offsets, and a fraction of any length (truncated to milliseconds).
 * Refuses dates that do not exist (Feb 30, Feb 29 outside leap years) and
 * anything outside the grammar (no space separator, no missing seconds). A
 * leap second (:60) is accepted only at 23:59:60 UTC, and counts as the
 * first second of the next day, as POSIX time does.
 * Returns 0, or SL_EINVAL with *ms untouched. */
int sl_time_parse_rfc3339(const char *s, size_t len, int64_t *ms);

/* Formats ms as "YYYY-MM-DDTHH:MM:SS.mmmZ" (always UTC, always three
 * fraction digits) into out, NUL-terminated. Returns the length (24), or 0
 * when the year falls outside 0000–9999 (out then holds ""). */
size_t sl_time_format_rfc3339(int64_t ms, char out[SL_TIME_RFC3339_MAX]);

#endif
