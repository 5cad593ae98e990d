/*
 * core/base/cron.h — schedule expressions as EventBridge writes them, and
 * their fire times in a time zone (core/base/tz.h).
 *
 *   cron: AWS's six fields "Minutes Hours Day-of-month Month Day-of-week
 *         Year": 0-59, 0-23, 1-31, 1-12 or JAN-DEC, 1-7 or SUN-SAT (1 is
 *         Sunday), 1970-2199. Every field takes `*`, a value, a range a-b,
 *         a list a,b,c and steps (`*` /n, a/n, a-b/n); a range whose end
 *         comes before its start wraps around (hours 22-2, months NOV-FEB;
 *         not years). Exactly one of day-of-month and day-of-week is `?`
 *         (AWS cannot combine them). Day-of-month also takes L (the last
 *         day), LW (the last weekday), nW (the weekday nearest day n within
 *         the month); day-of-week takes L (alone: Saturday), nL (the last
 *         day n of the month: 5L the last Thursday) and n#k (the k-th day n:
 *         6#3 the third Friday). L, W and # stand alone, never in a list or a
 *         range; "L-3" (an offset from the last day) is refused, as AWS does.
 *         Fields are read as local wall-clock time of the zone: a time DST
 *         skips fires once at the end of the gap (the transition), a time DST
 *         repeats fires once, at its first occurrence.
 *   rate: "N minute|minutes|hour|hours|day|days", N >= 1, the unit singular
 *         exactly when N is 1 (as AWS insists). Ticks are the multiples of
 *         the period since the Unix epoch (UTC), so they are the same across
 *         restarts and on every machine (AWS anchors a rate at the rule's
 *         creation instead); the zone plays no part.
 *   at:   "YYYY-MM-DDTHH:MM:SS", local time of the zone, or an RFC 3339
 *         date-time with its offset or Z; fires once.
 *
 * A parsed sl_sched is immutable: any number of threads may ask it for fire
 * times. Messages name the expression and the field:
 *   cron "61 * * * ? *": minutes: 61 is outside 0-59
 */
#ifndef SL_CRON_H
#define SL_CRON_H

#include "core/base/err.h"
#include "core/base/tz.h"

#include <stddef.h>
#include <stdint.h>

typedef enum sl_sched_kind {
    SL_SCHED_CRON,
    SL_SCHED_RATE,
    SL_SCHED_AT,
} sl_sched_kind;

/* No fire time left. */
#define SL_SCHED_NEVER INT64_MAX

/* Bytes in an expression at most (the text inside cron(…), rate(…), at(…)). */
#define SL_SCHED_EXPR_MAX 256

typedef struct sl_sched sl_sched;

/* Parses expr (the text inside "cron(…)", "rate(…)" or "at(…)") of kind,
 * read in the zone tz (NULL or "": UTC; loaded with sl_tz_load()). Returns
 * 0 with *out (free with sl_sched_free()), or SL_EINVAL with err naming the
 * expression, the field and the mistake; the zone's errors as
 * sl_tz_load() gives them; SL_ENOMEM. *out is untouched on error. */
int sl_sched_new(sl_sched_kind kind, const char *expr, const char *tz, sl_sched **out,
                 sl_error *err);

/* Splits an EventBridge ScheduleExpression, "cron(0 3 * * ? *)",
 * "rate(5 minutes)" or "at(2026-12-24T18:00:00)", into its kind and the
 * text inside the parentheses (*inner points into expression, *len bytes).
 * Returns 0, or SL_EINVAL with err. */
int sl_sched_split(const char *expression, sl_sched_kind *kind, const char **inner, size_t *len,
                   sl_error *err);

/* sl_sched_split() then sl_sched_new(). */
int sl_sched_new_expression(const char *expression, const char *tz, sl_sched **out, sl_error *err);

/* The first fire time strictly after after_ms (milliseconds since the
 * epoch), or SL_SCHED_NEVER. Fire times are whole minutes for cron, whole
 * periods for rate, the given second for at. */
int64_t sl_sched_next(const sl_sched *s, int64_t after_ms);

sl_sched_kind sl_sched_kind_of(const sl_sched *s);

/* The expression as EventBridge writes it: "cron(0 3 * * ? *)". */
const char *sl_sched_expression(const sl_sched *s);

/* The zone the schedule is read in (owned by s). */
const sl_tz *sl_sched_tz(const sl_sched *s);

/* "cron", "rate" or "at". */
const char *sl_sched_kind_name(sl_sched_kind kind);

void sl_sched_free(sl_sched *s);

#endif
