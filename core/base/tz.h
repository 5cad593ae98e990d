/*
 * core/base/tz.h — time zones from the system's TZif files (RFC 8536), for
 * the schedules (core/base/cron.h): UTC offsets at an instant, and local
 * wall-clock times turned into instants with a fixed rule for the times DST
 * removes or repeats.
 *
 * A zone is read once from /usr/share/zoneinfo/NAME (Debian's tzdata) and
 * is immutable afterwards, so one sl_tz may be used by any number of
 * threads. Nothing here touches the process's own time zone: no setenv("TZ"),
 * no tzset(), no localtime(). Versions 1, 2 and 3 are read (2 and 3 from
 * their 64-bit section); instants after the last transition of the file
 * follow its POSIX TZ footer ("CET-1CEST,M3.5.0,M10.5.0/3": the Mm.w.d, Jn
 * and n date forms, /time with hours beyond 24 or negative as version 3
 * allows). Leap-second files ("right/…") are refused: sluice's clock is
 * POSIX time, which has no leap seconds. "UTC" and "Etc/UTC" are built in
 * and need no file.
 *
 * Wall-clock to instant (sl_tz_local_to_utc()): a local time that exists
 * once maps to it; one that exists twice (the hour repeated when clocks go
 * back) maps to its first occurrence; one that does not exist (skipped when
 * clocks go forward) maps to the first instant after the gap, i.e. the
 * transition itself (02:30 on the day Europe/Paris springs forward is
 * 01:00Z = 03:00 local).
 */
#ifndef SL_TZ_H
#define SL_TZ_H

#include "core/base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_tz sl_tz;

/* Where zone files are read from. */
#define SL_TZ_DIR "/usr/share/zoneinfo"
/* Bytes in a zone name at most. */
#define SL_TZ_NAME_MAX 255

/* Whether name may name a zone file: 1-255 of [A-Za-z0-9_+/-], no "..",
 * not beginning or ending with '/', no "//". */
bool sl_tz_name_valid(const char *name);

/* Loads the zone name (NULL or "": UTC) from SL_TZ_DIR. Returns 0 with *out
 * (free with sl_tz_free()); SL_EINVAL for a name sl_tz_name_valid()
 * refuses, SL_ENOENT for an unknown zone, SL_ECORRUPT for a file that is
 * not TZif or is damaged, SL_EUNSUPPORTED for a leap-second file, SL_ENOMEM;
 * err says which (naming the zone). *out is untouched on error. */
int sl_tz_load(const char *name, sl_tz **out, sl_error *err);

/* The same from a TZif image in memory (len bytes; not kept), called name
 * in messages and by sl_tz_name(). For tests and for files found elsewhere. */
int sl_tz_parse(const char *name, const void *data, size_t len, sl_tz **out, sl_error *err);

/* The zone's name as loaded ("UTC" for the built-in one). */
const char *sl_tz_name(const sl_tz *tz);

/* Whether the zone is UTC itself (built in). */
bool sl_tz_is_utc(const sl_tz *tz);

/* Seconds east of UTC in force at the instant utc_s (seconds since the
 * epoch); *is_dst (may be NULL) says whether it is daylight time. */
int32_t sl_tz_offset(const sl_tz *tz, int64_t utc_s, bool *is_dst);

/* The instant (seconds since the epoch) of local wall-clock time local_s
 * (the local date and time written as if they were UTC), by the rule at the
 * top of this file. */
int64_t sl_tz_local_to_utc(const sl_tz *tz, int64_t local_s);

/* Room sl_tz_format_local() needs, NUL included. */
#define SL_TZ_LOCAL_MAX 40

/* Formats the instant ms as local time with its offset,
 * "2026-03-29T03:00:00+02:00" (seconds precision). Returns the length, or 0
 * (out "") outside years 0000-9999. */
size_t sl_tz_format_local(const sl_tz *tz, int64_t ms, char out[SL_TZ_LOCAL_MAX]);

void sl_tz_free(sl_tz *tz);

/* ---- the proleptic Gregorian calendar (days since 1970-01-01) ------------- */

/* A broken-down civil date and time. wday: 0 = Sunday … 6 = Saturday. */
typedef struct sl_civil {
    int64_t year;
    int month, day; /* 1-12, 1-31 */
    int hour, min, sec;
    int wday;
} sl_civil;

int64_t sl_civil_days(int64_t year, int month, int day);
/* Seconds since the epoch of c's date and time (wday is ignored). */
int64_t sl_civil_to_secs(const sl_civil *c);
/* The civil date and time of secs (seconds since the epoch). */
void sl_civil_from_secs(int64_t secs, sl_civil *out);
bool sl_civil_leap(int64_t year);
/* Days in month (1-12) of year. */
int sl_civil_month_days(int64_t year, int month);

#endif
