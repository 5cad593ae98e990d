/*
 * tests/unit/test_cron.c — core/base/cron.c: every cron example of the
 * EventBridge documentation, then L, W, LW, nL, n#k, names, wrapped ranges,
 * steps, the year field and leap years; DST gaps and overlaps in
 * Europe/Paris and America/New_York (a skipped time fires once at the
 * jump, a repeated one once at its first occurrence); rate anchoring and
 * AWS's singular/plural rule; at in a zone, with an offset and in a gap;
 * ScheduleExpression splitting; and each refusal with its message.
 */
#include "testutil.h"

#include "core/base/clock.h"
#include "core/base/cron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t ms(int y, int mo, int d, int h, int mi)
{
    sl_civil c = {.year = y, .month = mo, .day = d, .hour = h, .min = mi};
    return sl_civil_to_secs(&c) * 1000;
}

static sl_sched *mk(sl_sched_kind kind, const char *expr, const char *tz)
{
    sl_sched *s = NULL;
    sl_error err = {0};
    if (sl_sched_new(kind, expr, tz, &s, &err))
        fail_msg("%s \"%s\" (%s): %s", sl_sched_kind_name(kind), expr, tz ? tz : "UTC", err.msg);
    return s;
}

static char *fmt(int64_t t, char *buf)
{
    if (t == SL_SCHED_NEVER)
        snprintf(buf, 32, "never");
    else
        sl_time_format_rfc3339(t, buf);
    return buf;
}

/* The fire times after `after`, one after the other, must be want[0..n). */
static void expect(const char *expr, const char *tz, int64_t after, const int64_t *want, size_t n)
{
    sl_sched *s = mk(SL_SCHED_CRON, expr, tz);
    int64_t t = after;
    for (size_t i = 0; i < n; i++) {
        t = sl_sched_next(s, t);
        if (t != want[i]) {
            char a[32], b[32];
            fail_msg("cron \"%s\" (%s) fire %zu: %s, want %s", expr, tz ? tz : "UTC", i, fmt(t, a),
                     fmt(want[i], b));
        }
    }
    sl_sched_free(s);
}

#define EXPECT(expr, tz, after, ...)                                                               \
    do {                                                                                           \
        const int64_t w_[] = {__VA_ARGS__};                                                        \
        expect(expr, tz, after, w_, sizeof w_ / sizeof *w_);                                       \
    } while (0)

/* The examples of the EventBridge documentation ("Cron expressions"). */
static void test_aws_examples(void **state)
{
    (void)state;
    /* 10:00 am UTC every day */
    EXPECT("0 10 * * ? *", NULL, ms(2024, 5, 1, 12, 0), ms(2024, 5, 2, 10, 0),
           ms(2024, 5, 3, 10, 0));
    /* 12:15 pm UTC every day; strictly after */
    EXPECT("15 12 * * ? *", NULL, ms(2024, 5, 1, 12, 15), ms(2024, 5, 2, 12, 15));
    EXPECT("15 12 * * ? *", NULL, ms(2024, 5, 1, 12, 15) - 1, ms(2024, 5, 1, 12, 15));
    /* 6:00 pm UTC Monday through Friday (2024-05-03 is a Friday) */
    EXPECT("0 18 ? * MON-FRI *", NULL, ms(2024, 5, 3, 18, 0), ms(2024, 5, 6, 18, 0),
           ms(2024, 5, 7, 18, 0));
    /* 8:00 am UTC on the first day of every month */
    EXPECT("0 8 1 * ? *", NULL, ms(2024, 5, 1, 8, 0), ms(2024, 6, 1, 8, 0), ms(2024, 7, 1, 8, 0));
    /* every 15 minutes */
    EXPECT("0/15 * * * ? *", NULL, ms(2024, 5, 1, 12, 7), ms(2024, 5, 1, 12, 15),
           ms(2024, 5, 1, 12, 30), ms(2024, 5, 1, 12, 45), ms(2024, 5, 1, 13, 0));
    /* every 10 minutes Monday through Friday */
    EXPECT("0/10 * ? * MON-FRI *", NULL, ms(2024, 5, 3, 23, 55), ms(2024, 5, 6, 0, 0),
           ms(2024, 5, 6, 0, 10));
    /* every 5 minutes between 8:00 am and 5:55 pm UTC weekdays */
    EXPECT("0/5 8-17 ? * MON-FRI *", NULL, ms(2024, 5, 3, 17, 50), ms(2024, 5, 3, 17, 55),
           ms(2024, 5, 6, 8, 0), ms(2024, 5, 6, 8, 5));
    /* 9:00 am UTC on the first Monday of each month */
    EXPECT("0 9 ? * 2#1 *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 6, 9, 0), ms(2024, 6, 3, 9, 0),
           ms(2024, 7, 1, 9, 0));
}

static void test_special_days(void **state)
{
    (void)state;
    /* L: the last day of the month, leap years included */
    EXPECT("0 0 L * ? *", NULL, ms(2024, 1, 31, 0, 0), ms(2024, 2, 29, 0, 0), ms(2024, 3, 31, 0, 0),
           ms(2024, 4, 30, 0, 0));
    EXPECT("0 0 L 2 ? *", NULL, ms(2023, 1, 1, 0, 0), ms(2023, 2, 28, 0, 0), ms(2024, 2, 29, 0, 0));
    /* 15W: 2024-06-15 is a Saturday (Friday 14th), 2024-09-15 a Sunday
     * (Monday 16th), 2024-05-15 a Wednesday. */
    EXPECT("0 0 15W * ? *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 15, 0, 0),
           ms(2024, 6, 14, 0, 0), ms(2024, 7, 15, 0, 0), ms(2024, 8, 15, 0, 0),
           ms(2024, 9, 16, 0, 0));
    /* 1W never leaves the month: 2024-06-01 is a Saturday, so Monday the 3rd */
    EXPECT("0 0 1W 6 ? *", NULL, ms(2024, 1, 1, 0, 0), ms(2024, 6, 3, 0, 0));
    /* 31W: March 2024 ends on a Sunday, so Friday the 29th; months without a
     * 31st have no fire */
    EXPECT("0 0 31W * ? *", NULL, ms(2024, 3, 1, 0, 0), ms(2024, 3, 29, 0, 0),
           ms(2024, 5, 31, 0, 0));
    /* LW: the last weekday (August 2024 ends on a Saturday) */
    EXPECT("0 0 LW * ? *", NULL, ms(2024, 8, 1, 0, 0), ms(2024, 8, 30, 0, 0),
           ms(2024, 9, 30, 0, 0));
    /* 5L: the last Thursday (February 29 2024 is one) */
    EXPECT("0 0 ? * 5L *", NULL, ms(2024, 2, 1, 0, 0), ms(2024, 2, 29, 0, 0), ms(2024, 3, 28, 0, 0),
           ms(2024, 4, 25, 0, 0), ms(2024, 5, 30, 0, 0));
    EXPECT("0 0 ? * THUL *", NULL, ms(2024, 2, 1, 0, 0), ms(2024, 2, 29, 0, 0));
    /* L alone in day-of-week: Saturday */
    EXPECT("0 12 ? * L *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 4, 12, 0),
           ms(2024, 5, 11, 12, 0));
    /* 6#3: the third Friday */
    EXPECT("0 0 ? * 6#3 *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 17, 0, 0),
           ms(2024, 6, 21, 0, 0));
    EXPECT("0 0 ? * FRI#3 *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 17, 0, 0));
    /* 2#5: a fifth Monday, only in months that have one */
    EXPECT("0 0 ? * 2#5 *", NULL, ms(2024, 1, 1, 0, 0), ms(2024, 1, 29, 0, 0),
           ms(2024, 4, 29, 0, 0), ms(2024, 7, 29, 0, 0));
    /* Sunday is 1, Saturday 7 */
    EXPECT("0 0 ? * 1 *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 5, 0, 0));
    EXPECT("0 0 ? * 7 *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 4, 0, 0));
    EXPECT("0 0 ? * sun,sat *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 4, 0, 0),
           ms(2024, 5, 5, 0, 0), ms(2024, 5, 11, 0, 0));
}

static void test_fields(void **state)
{
    (void)state;
    /* names, lists */
    EXPECT("0 0 1 JAN,JUL ? *", NULL, ms(2024, 2, 1, 0, 0), ms(2024, 7, 1, 0, 0),
           ms(2025, 1, 1, 0, 0));
    /* a range that wraps: 22, 23, 0, 1, 2 */
    EXPECT("0 22-2 * * ? *", NULL, ms(2024, 5, 1, 21, 0), ms(2024, 5, 1, 22, 0),
           ms(2024, 5, 1, 23, 0), ms(2024, 5, 2, 0, 0), ms(2024, 5, 2, 1, 0), ms(2024, 5, 2, 2, 0),
           ms(2024, 5, 2, 22, 0));
    EXPECT("0 0 1 NOV-FEB ? *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 11, 1, 0, 0),
           ms(2024, 12, 1, 0, 0), ms(2025, 1, 1, 0, 0), ms(2025, 2, 1, 0, 0),
           ms(2025, 11, 1, 0, 0));
    /* steps over a range, * / n, a / n */
    EXPECT("10-40/15 * * * ? *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 1, 0, 10),
           ms(2024, 5, 1, 0, 25), ms(2024, 5, 1, 0, 40), ms(2024, 5, 1, 1, 10));
    EXPECT("*/20 */12 * * ? *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 1, 0, 20),
           ms(2024, 5, 1, 0, 40), ms(2024, 5, 1, 12, 0));
    EXPECT("0 0 1/10 * ? *", NULL, ms(2024, 5, 1, 0, 0), ms(2024, 5, 11, 0, 0),
           ms(2024, 5, 21, 0, 0), ms(2024, 5, 31, 0, 0), ms(2024, 6, 1, 0, 0));
    /* the year field */
    EXPECT("0 0 1 1 ? 2030", NULL, ms(2024, 5, 1, 0, 0), ms(2030, 1, 1, 0, 0), SL_SCHED_NEVER);
    EXPECT("0 0 1 1 ? 2030/5", NULL, ms(2024, 5, 1, 0, 0), ms(2030, 1, 1, 0, 0),
           ms(2035, 1, 1, 0, 0));
    EXPECT("0 0 1 1 ? 2027-2028,2040", NULL, ms(2024, 5, 1, 0, 0), ms(2027, 1, 1, 0, 0),
           ms(2028, 1, 1, 0, 0), ms(2040, 1, 1, 0, 0), SL_SCHED_NEVER);
    EXPECT("59 23 31 12 ? 2199", NULL, ms(2199, 12, 31, 23, 58), ms(2199, 12, 31, 23, 59),
           SL_SCHED_NEVER);
    /* leap years: 2100 is not one */
    EXPECT("0 0 29 2 ? *", NULL, ms(2024, 3, 1, 0, 0), ms(2028, 2, 29, 0, 0));
    EXPECT("0 0 29 2 ? *", NULL, ms(2096, 3, 1, 0, 0), ms(2104, 2, 29, 0, 0));
    /* every minute, a long way: fast enough */
    sl_sched *s = mk(SL_SCHED_CRON, "* * * * ? *", NULL);
    int64_t t = ms(2024, 1, 1, 0, 0);
    for (int i = 0; i < 100000; i++)
        t = sl_sched_next(s, t);
    assert_int_equal(t, ms(2024, 1, 1, 0, 0) + 100000LL * 60000);
    assert_string_equal(sl_sched_expression(s), "cron(* * * * ? *)");
    sl_sched_free(s);
}

static void test_dst(void **state)
{
    (void)state;
    const char *paris = "Europe/Paris";
    /* 02:30 does not exist on 2024-03-31: fires once, at 03:00 CEST = 01:00Z */
    EXPECT("30 2 * * ? *", paris, ms(2024, 3, 30, 12, 0), ms(2024, 3, 31, 1, 0),
           ms(2024, 4, 1, 0, 30));
    /* 02:30 happens twice on 2024-10-27: fires once, at the first (00:30Z) */
    EXPECT("30 2 * * ? *", paris, ms(2024, 10, 26, 12, 0), ms(2024, 10, 27, 0, 30),
           ms(2024, 10, 28, 1, 30));
    /* from inside the repeated hour: not again that day */
    EXPECT("30 2 * * ? *", paris, ms(2024, 10, 27, 1, 15), ms(2024, 10, 28, 1, 30));
    /* the example */
    EXPECT("0 3 * * ? *", paris, ms(2024, 3, 30, 12, 0), ms(2024, 3, 31, 1, 0),
           ms(2024, 4, 1, 1, 0));
    EXPECT("0 3 * * ? *", paris, ms(2024, 6, 1, 12, 0), ms(2024, 6, 2, 1, 0));
    EXPECT("0 3 * * ? *", paris, ms(2024, 12, 1, 12, 0), ms(2024, 12, 2, 2, 0));
    /* every half hour across the gap: 02:00, 02:30 and 03:00 are one fire */
    EXPECT("*/30 * * * ? *", paris, ms(2024, 3, 31, 0, 0), ms(2024, 3, 31, 0, 30),
           ms(2024, 3, 31, 1, 0), ms(2024, 3, 31, 1, 30));
    /* … and across the overlap: the repeated 02:00 and 02:30 fire once */
    EXPECT("*/30 * * * ? *", paris, ms(2024, 10, 26, 23, 30), ms(2024, 10, 27, 0, 0),
           ms(2024, 10, 27, 0, 30), ms(2024, 10, 27, 2, 0), ms(2024, 10, 27, 2, 30));
    /* beyond the zone file's table (the footer rule): 2100-03-28 */
    EXPECT("30 2 * * ? *", paris, ms(2100, 3, 27, 12, 0), ms(2100, 3, 28, 1, 0),
           ms(2100, 3, 29, 0, 30));
    const char *ny = "America/New_York";
    EXPECT("30 2 * * ? *", ny, ms(2024, 3, 9, 12, 0), ms(2024, 3, 10, 7, 0),
           ms(2024, 3, 11, 6, 30));
    EXPECT("30 1 * * ? *", ny, ms(2024, 11, 2, 12, 0), ms(2024, 11, 3, 5, 30),
           ms(2024, 11, 4, 6, 30));
    /* weekdays in local time: Monday 00:15 in New York is Monday 04:15Z (EDT) */
    EXPECT("15 0 ? * MON *", ny, ms(2024, 5, 1, 0, 0), ms(2024, 5, 6, 4, 15));
}

static void refuse(sl_sched_kind kind, const char *expr, const char *tz, const char *want)
{
    sl_sched *s = NULL;
    sl_error err = {0};
    int rc = sl_sched_new(kind, expr, tz, &s, &err);
    if (rc == 0)
        fail_msg("%s \"%s\" was accepted", sl_sched_kind_name(kind), expr);
    if (!strstr(err.msg, want))
        fail_msg("%s \"%s\": message \"%s\" does not say \"%s\"", sl_sched_kind_name(kind), expr,
                 err.msg, want);
    assert_null(s);
}

static void test_cron_refusals(void **state)
{
    (void)state;
    refuse(SL_SCHED_CRON, "61 * * * ? *", NULL,
           "cron \"61 * * * ? *\": minutes: 61 is outside 0-59");
    refuse(SL_SCHED_CRON, "0 24 * * ? *", NULL, "hours: 24 is outside 0-23");
    refuse(SL_SCHED_CRON, "0 0 32 * ? *", NULL, "day-of-month: 32 is outside 1-31");
    refuse(SL_SCHED_CRON, "0 0 0 * ? *", NULL, "day-of-month: 0 is outside 1-31");
    refuse(SL_SCHED_CRON, "0 0 * 13 ? *", NULL, "month: 13 is outside 1-12");
    refuse(SL_SCHED_CRON, "0 0 * FOO ? *", NULL,
           "month: \"FOO\" is not a value (want 1-12 or "
           "JAN-DEC)");
    refuse(SL_SCHED_CRON, "0 0 ? * 8 *", NULL, "day-of-week: 8 is outside 1-7");
    refuse(SL_SCHED_CRON, "0 0 ? * 0 *", NULL, "day-of-week: 0 is outside 1-7");
    refuse(SL_SCHED_CRON, "0 0 * * ? 2200", NULL, "year: 2200 is outside 1970-2199");
    refuse(SL_SCHED_CRON, "0 0 * * ? 1969", NULL, "year: 1969 is outside 1970-2199");
    refuse(SL_SCHED_CRON, "0 0 * * ?", NULL,
           "want 6 fields (minutes hours day-of-month month "
           "day-of-week year), found 5");
    refuse(SL_SCHED_CRON, "0 0 0 * * ? *", NULL, "found 7");
    refuse(SL_SCHED_CRON, "0 0 * * * *", NULL, "one of day-of-month and day-of-week must be ?");
    refuse(SL_SCHED_CRON, "0 0 1 * MON *", NULL, "one of day-of-month and day-of-week must be ?");
    refuse(SL_SCHED_CRON, "0 0 ? * ? *", NULL, "both ?");
    refuse(SL_SCHED_CRON, "0 0 L-3 * ? *", NULL, "offset from the last day (L-n) is not supported");
    refuse(SL_SCHED_CRON, "0 0 1,15W * ? *", NULL, "W takes one day");
    refuse(SL_SCHED_CRON, "0 0 L,5 * ? *", NULL, "L and W stand alone");
    refuse(SL_SCHED_CRON, "0 0 ? * 6#6 *", NULL, "week of the month, 1-5");
    refuse(SL_SCHED_CRON, "0 0 ? * 1,6#2 *", NULL, "# stands alone");
    refuse(SL_SCHED_CRON, "0 0 ? * 1,5L *", NULL, "L stands alone");
    refuse(SL_SCHED_CRON, "0 0 ? * 5W *", NULL, "W is only for day-of-month");
    refuse(SL_SCHED_CRON, "0 0 6#3 * ? *", NULL, "# is only for day-of-week");
    refuse(SL_SCHED_CRON, "0 L * * ? *", NULL, "hours: L is only for day-of-month or day-of-week");
    refuse(SL_SCHED_CRON, "? 0 * * ? *", NULL, "minutes: ? is only for");
    refuse(SL_SCHED_CRON, "*/0 * * * ? *", NULL, "the step must be 1 or more");
    refuse(SL_SCHED_CRON, "*/61 * * * ? *", NULL, "larger than the range 0-59");
    refuse(SL_SCHED_CRON, "1-/5 * * * ? *", NULL, "a value is missing");
    refuse(SL_SCHED_CRON, "1,,2 * * * ? *", NULL, "an empty item");
    refuse(SL_SCHED_CRON, "1, * * * ? *", NULL, "an empty item");
    refuse(SL_SCHED_CRON, "x * * * ? *", NULL, "\"x\" is not a value");
    refuse(SL_SCHED_CRON, "0 0 * * ? 2030-2025", NULL, "the range ends before it begins");
    refuse(SL_SCHED_CRON, "0 0 31 2 ? *", NULL, "never matches a date");
    refuse(SL_SCHED_CRON, "0 0 30 2 ? *", NULL, "never matches");
    refuse(SL_SCHED_CRON, "", NULL, "empty");
    refuse(SL_SCHED_CRON, "0 0 * * ? *\n", NULL, "control");
    refuse(SL_SCHED_CRON, "0 3 * * ? *", "Mars/Base", "time zone \"Mars/Base\": unknown");
    refuse(SL_SCHED_CRON, "0 3 * * ? *", "../../etc/passwd", "not a zone name");
}

static void test_rate(void **state)
{
    (void)state;
    sl_sched *s = mk(SL_SCHED_RATE, "5 minutes", NULL);
    /* multiples of five minutes since the epoch, whatever the start */
    assert_int_equal(sl_sched_next(s, ms(2024, 5, 1, 12, 7) + 123), ms(2024, 5, 1, 12, 10));
    assert_int_equal(sl_sched_next(s, ms(2024, 5, 1, 12, 10)), ms(2024, 5, 1, 12, 15));
    assert_int_equal(sl_sched_next(s, -1), 0);
    assert_string_equal(sl_sched_expression(s), "rate(5 minutes)");
    assert_int_equal(sl_sched_kind_of(s), SL_SCHED_RATE);
    sl_sched_free(s);
    s = mk(SL_SCHED_RATE, "1 minute", "Europe/Paris"); /* the zone plays no part */
    assert_int_equal(sl_sched_next(s, ms(2024, 5, 1, 12, 7) + 1), ms(2024, 5, 1, 12, 8));
    sl_sched_free(s);
    s = mk(SL_SCHED_RATE, "1 hour", NULL);
    assert_int_equal(sl_sched_next(s, ms(2024, 5, 1, 12, 7)), ms(2024, 5, 1, 13, 0));
    sl_sched_free(s);
    s = mk(SL_SCHED_RATE, "2 days", "America/New_York");
    /* 2024-05-01 is day 19844 since the epoch, an even one */
    assert_int_equal(sl_sched_next(s, ms(2024, 5, 1, 12, 0)), ms(2024, 5, 3, 0, 0));
    sl_sched_free(s);
    s = mk(SL_SCHED_RATE, "1 day", NULL);
    assert_int_equal(sl_sched_next(s, ms(2024, 5, 1, 12, 0)), ms(2024, 5, 2, 0, 0));
    sl_sched_free(s);
    refuse(SL_SCHED_RATE, "1 minutes", NULL, "with 1 the unit is singular: \"1 minute\"");
    refuse(SL_SCHED_RATE, "5 minute", NULL, "the unit is plural: \"5 minutes\"");
    refuse(SL_SCHED_RATE, "0 minutes", NULL, "1 or more");
    refuse(SL_SCHED_RATE, "5 weeks", NULL, "minute(s), hour(s) or day(s)");
    refuse(SL_SCHED_RATE, "5 minutesx", NULL, "minute(s), hour(s) or day(s)");
    refuse(SL_SCHED_RATE, "five minutes", NULL, "want \"N minute(s)|hour(s)|day(s)\"");
    refuse(SL_SCHED_RATE, "5", NULL, "want \"N");
    refuse(SL_SCHED_RATE, "-5 minutes", NULL, "want \"N");
    refuse(SL_SCHED_RATE, "99999999 days", NULL, "at most");
}

static void test_at(void **state)
{
    (void)state;
    sl_sched *s = mk(SL_SCHED_AT, "2026-12-24T18:00:00", "Europe/Paris");
    assert_int_equal(sl_sched_next(s, ms(2026, 1, 1, 0, 0)), ms(2026, 12, 24, 17, 0));
    assert_int_equal(sl_sched_next(s, ms(2026, 12, 24, 17, 0)), SL_SCHED_NEVER);
    assert_string_equal(sl_sched_expression(s), "at(2026-12-24T18:00:00)");
    sl_sched_free(s);
    s = mk(SL_SCHED_AT, "2026-12-24T18:00:00", NULL); /* UTC */
    assert_int_equal(sl_sched_next(s, 0), ms(2026, 12, 24, 18, 0));
    sl_sched_free(s);
    s = mk(SL_SCHED_AT, "2026-12-24T18:00:00+01:00", "America/New_York"); /* the offset wins */
    assert_int_equal(sl_sched_next(s, 0), ms(2026, 12, 24, 17, 0));
    sl_sched_free(s);
    s = mk(SL_SCHED_AT, "2026-12-24T18:00:00Z", "Europe/Paris");
    assert_int_equal(sl_sched_next(s, 0), ms(2026, 12, 24, 18, 0));
    sl_sched_free(s);
    /* in a DST gap: the end of the gap */
    s = mk(SL_SCHED_AT, "2024-03-31T02:30:00", "Europe/Paris");
    assert_int_equal(sl_sched_next(s, 0), ms(2024, 3, 31, 1, 0));
    sl_sched_free(s);
    /* in an overlap: the first occurrence */
    s = mk(SL_SCHED_AT, "2024-10-27T02:30:00", "Europe/Paris");
    assert_int_equal(sl_sched_next(s, 0), ms(2024, 10, 27, 0, 30));
    sl_sched_free(s);
    refuse(SL_SCHED_AT, "2026-02-30T00:00:00", NULL, "not a date and time that exists");
    refuse(SL_SCHED_AT, "2026-12-24 18:00:00", NULL, "want YYYY-MM-DDTHH:MM:SS");
    refuse(SL_SCHED_AT, "2026-12-24T25:00:00", NULL, "not a date and time that exists");
    refuse(SL_SCHED_AT, "tomorrow", NULL, "want YYYY-MM-DDTHH:MM:SS");
}

static void test_expression(void **state)
{
    (void)state;
    sl_sched_kind kind;
    const char *inner;
    size_t len;
    assert_int_equal(sl_sched_split("cron(0 3 * * ? *)", &kind, &inner, &len, NULL), 0);
    assert_int_equal(kind, SL_SCHED_CRON);
    assert_int_equal(len, 11);
    assert_memory_equal(inner, "0 3 * * ? *", 11);
    sl_sched *s = NULL;
    sl_error err = {0};
    assert_int_equal(sl_sched_new_expression("rate(5 minutes)", NULL, &s, &err), 0);
    assert_int_equal(sl_sched_kind_of(s), SL_SCHED_RATE);
    sl_sched_free(s);
    assert_int_equal(sl_sched_new_expression("at(2026-12-24T18:00:00)", "Europe/Paris", &s, &err),
                     0);
    assert_string_equal(sl_tz_name(sl_sched_tz(s)), "Europe/Paris");
    sl_sched_free(s);
    assert_int_equal(sl_sched_new_expression("cron(61 * * * ? *)", NULL, &s, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "minutes: 61 is outside 0-59"));
    assert_int_equal(sl_sched_new_expression("every(5 minutes)", NULL, &s, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "want cron(…), rate(…) or at(…)"));
    assert_int_equal(sl_sched_split("cron(0 3 * * ? *", &kind, &inner, &len, NULL), SL_EINVAL);
    assert_int_equal(sl_sched_split(NULL, &kind, &inner, &len, NULL), SL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aws_examples),
        cmocka_unit_test(test_special_days),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_dst),
        cmocka_unit_test(test_cron_refusals),
        cmocka_unit_test(test_rate),
        cmocka_unit_test(test_at),
        cmocka_unit_test(test_expression),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
