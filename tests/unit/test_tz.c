/*
 * tests/unit/test_tz.c — core/base/tz.c: offsets of real zones against
 * values Python's zoneinfo gives for the same tzdata (in the table, beyond
 * 2037 through the POSIX TZ footer, the southern hemisphere and Dublin's
 * negative DST), wall-clock to instant across DST gaps and overlaps
 * (Europe/Paris, America/New_York, the day Samoa skipped), TZif images
 * built here (no transitions, footer rules in the Jn, n and Mm.w.d forms,
 * v3 hours beyond 24, damaged files), and names that must be refused.
 */
#include "testutil.h"

#include "core/base/tz.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t utc(int y, int mo, int d, int h, int mi, int s)
{
    sl_civil c = {.year = y, .month = mo, .day = d, .hour = h, .min = mi, .sec = s};
    return sl_civil_to_secs(&c);
}

static sl_tz *load(const char *name)
{
    sl_tz *tz = NULL;
    sl_error err = {0};
    int rc = sl_tz_load(name, &tz, &err);
    if (rc)
        fail_msg("sl_tz_load(%s): %s", name, err.msg);
    return tz;
}

static void test_civil(void **state)
{
    (void)state;
    assert_int_equal(sl_civil_days(1970, 1, 1), 0);
    assert_int_equal(sl_civil_days(2000, 3, 1), 11017);
    sl_civil c;
    sl_civil_from_secs(utc(2024, 2, 29, 23, 59, 59), &c);
    assert_int_equal(c.year, 2024);
    assert_int_equal(c.month, 2);
    assert_int_equal(c.day, 29);
    assert_int_equal(c.hour, 23);
    assert_int_equal(c.wday, 4); /* a Thursday */
    sl_civil_from_secs(-1, &c);
    assert_int_equal(c.year, 1969);
    assert_int_equal(c.sec, 59);
    assert_int_equal(c.wday, 3);
    assert_true(sl_civil_leap(2000));
    assert_false(sl_civil_leap(2100));
    assert_int_equal(sl_civil_month_days(2100, 2), 28);
    assert_int_equal(sl_civil_month_days(2028, 2), 29);
}

typedef struct known {
    const char *zone;
    int64_t at;
    int32_t off;
} known;

static void test_offsets(void **state)
{
    (void)state;
    const known k[] = {
        {"Europe/Paris", utc(2024, 1, 15, 12, 0, 0), 3600},
        {"Europe/Paris", utc(2024, 7, 15, 12, 0, 0), 7200},
        {"Europe/Paris", utc(2024, 3, 31, 0, 59, 59), 3600},
        {"Europe/Paris", utc(2024, 3, 31, 1, 0, 0), 7200},
        {"Europe/Paris", utc(2024, 10, 27, 0, 59, 59), 7200},
        {"Europe/Paris", utc(2024, 10, 27, 1, 0, 0), 3600},
        {"Europe/Paris", utc(1900, 1, 1, 0, 0, 0), 561}, /* Paris Mean Time */
        {"America/New_York", utc(2024, 3, 10, 6, 59, 59), -18000},
        {"America/New_York", utc(2024, 3, 10, 7, 0, 0), -14400},
        {"America/New_York", utc(2024, 11, 3, 5, 59, 59), -14400},
        {"America/New_York", utc(2024, 11, 3, 6, 0, 0), -18000},
        {"Asia/Kolkata", utc(2050, 1, 1, 0, 0, 0), 19800},
        {"America/Sao_Paulo", utc(2050, 1, 1, 0, 0, 0), -10800},
        {"Pacific/Apia", utc(2011, 12, 29, 9, 59, 59), -36000},
        {"Pacific/Apia", utc(2011, 12, 30, 10, 0, 0), 50400},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        sl_tz *tz = load(k[i].zone);
        int32_t off = sl_tz_offset(tz, k[i].at, NULL);
        if (off != k[i].off)
            fail_msg("%s at %lld: offset %d, want %d", k[i].zone, (long long)k[i].at, off,
                     k[i].off);
        sl_tz_free(tz);
    }
}

/* Past the last transition of the file: the POSIX TZ footer decides. */
static void test_footer_beyond_2037(void **state)
{
    (void)state;
    const known k[] = {
        {"Europe/Paris", utc(2050, 1, 1, 0, 0, 0), 3600},
        {"Europe/Paris", utc(2050, 7, 1, 0, 0, 0), 7200},
        {"Europe/Paris", utc(2100, 3, 27, 12, 0, 0), 3600},
        {"Europe/Paris", utc(2100, 3, 28, 0, 59, 59), 3600},
        {"Europe/Paris", utc(2100, 3, 28, 1, 0, 0), 7200},
        {"America/New_York", utc(2060, 3, 14, 6, 59, 59), -18000},
        {"America/New_York", utc(2060, 3, 14, 7, 0, 0), -14400},
        {"Australia/Sydney", utc(2050, 1, 1, 0, 0, 0), 39600},
        {"Australia/Sydney", utc(2050, 7, 1, 0, 0, 0), 36000},
        /* Dublin: "IST-1GMT0,M10.5.0,M3.5.0/1", winter is its "daylight" time. */
        {"Europe/Dublin", utc(2050, 1, 1, 0, 0, 0), 0},
        {"Europe/Dublin", utc(2050, 7, 1, 0, 0, 0), 3600},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        sl_tz *tz = load(k[i].zone);
        int32_t off = sl_tz_offset(tz, k[i].at, NULL);
        if (off != k[i].off)
            fail_msg("%s at %lld: offset %d, want %d", k[i].zone, (long long)k[i].at, off,
                     k[i].off);
        sl_tz_free(tz);
    }
    bool dst = false;
    sl_tz *tz = load("Europe/Paris");
    sl_tz_offset(tz, utc(2080, 8, 1, 0, 0, 0), &dst);
    assert_true(dst);
    sl_tz_offset(tz, utc(2080, 12, 1, 0, 0, 0), &dst);
    assert_false(dst);
    sl_tz_free(tz);
}

static void test_local_to_utc(void **state)
{
    (void)state;
    sl_tz *paris = load("Europe/Paris");
    /* an ordinary time */
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2024, 6, 1, 12, 0, 0)),
                     utc(2024, 6, 1, 10, 0, 0));
    /* spring forward: 02:00-02:59 does not exist; 02:30 is 03:00 = 01:00Z */
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2024, 3, 31, 2, 30, 0)),
                     utc(2024, 3, 31, 1, 0, 0));
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2024, 3, 31, 2, 0, 0)),
                     utc(2024, 3, 31, 1, 0, 0));
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2024, 3, 31, 3, 0, 0)),
                     utc(2024, 3, 31, 1, 0, 0));
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2024, 3, 31, 1, 59, 0)),
                     utc(2024, 3, 31, 0, 59, 0));
    /* fall back: 02:00-02:59 happens twice; the first is 00:30Z */
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2024, 10, 27, 2, 30, 0)),
                     utc(2024, 10, 27, 0, 30, 0));
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2024, 10, 27, 3, 0, 0)),
                     utc(2024, 10, 27, 2, 0, 0));
    /* the same beyond the table, by the footer */
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2100, 3, 28, 2, 30, 0)),
                     utc(2100, 3, 28, 1, 0, 0));
    assert_int_equal(sl_tz_local_to_utc(paris, utc(2100, 10, 31, 2, 30, 0)),
                     utc(2100, 10, 31, 0, 30, 0));
    sl_tz_free(paris);

    sl_tz *ny = load("America/New_York");
    assert_int_equal(sl_tz_local_to_utc(ny, utc(2024, 3, 10, 2, 30, 0)), utc(2024, 3, 10, 7, 0, 0));
    assert_int_equal(sl_tz_local_to_utc(ny, utc(2024, 11, 3, 1, 30, 0)),
                     utc(2024, 11, 3, 5, 30, 0));
    assert_int_equal(sl_tz_local_to_utc(ny, utc(2024, 11, 3, 2, 0, 0)), utc(2024, 11, 3, 7, 0, 0));
    sl_tz_free(ny);

    /* Samoa skipped 2011-12-30 entirely: any time of it is the jump. */
    sl_tz *apia = load("Pacific/Apia");
    assert_int_equal(sl_tz_local_to_utc(apia, utc(2011, 12, 30, 12, 0, 0)),
                     utc(2011, 12, 30, 10, 0, 0));
    assert_int_equal(sl_tz_local_to_utc(apia, utc(2011, 12, 31, 0, 0, 0)),
                     utc(2011, 12, 30, 10, 0, 0));
    sl_tz_free(apia);

    sl_tz *u = load(NULL);
    assert_true(sl_tz_is_utc(u));
    assert_string_equal(sl_tz_name(u), "UTC");
    assert_int_equal(sl_tz_local_to_utc(u, 12345), 12345);
    assert_int_equal(sl_tz_offset(u, 12345, NULL), 0);
    sl_tz_free(u);
    u = load("Etc/UTC");
    assert_true(sl_tz_is_utc(u));
    sl_tz_free(u);
}

static void test_format_local(void **state)
{
    (void)state;
    sl_tz *paris = load("Europe/Paris");
    char buf[SL_TZ_LOCAL_MAX];
    assert_int_equal(sl_tz_format_local(paris, utc(2024, 3, 31, 1, 0, 0) * 1000, buf), 25);
    assert_string_equal(buf, "2024-03-31T03:00:00+02:00");
    sl_tz_format_local(paris, utc(2024, 12, 24, 17, 0, 0) * 1000 + 999, buf);
    assert_string_equal(buf, "2024-12-24T18:00:00+01:00");
    sl_tz_free(paris);
    sl_tz *ny = load("America/New_York");
    sl_tz_format_local(ny, utc(2024, 1, 1, 0, 0, 0) * 1000, buf);
    assert_string_equal(buf, "2023-12-31T19:00:00-05:00");
    sl_tz_free(ny);
}

/* ---- TZif images made here ------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A version-2 file with no transitions, one type (utoff, "ABC") and footer. */
static size_t make_tzif(uint8_t *buf, int32_t utoff, const char *footer)
{
    size_t n = 0;
    for (int part = 0; part < 2; part++) {
        memset(buf + n, 0, 44);
        memcpy(buf + n, "TZif2", 5);
        put32(buf + n + 36, 1); /* typecnt */
        put32(buf + n + 40, 4); /* charcnt */
        n += 44;
        put32(buf + n, (uint32_t)utoff);
        buf[n + 4] = 0;
        buf[n + 5] = 0;
        n += 6;
        memcpy(buf + n, "ABC", 4);
        n += 4;
    }
    n += (size_t)sprintf((char *)buf + n, "\n%s\n", footer);
    return n;
}

static int32_t footer_off(const char *footer, int64_t at)
{
    uint8_t buf[512];
    size_t n = make_tzif(buf, 0, footer);
    sl_tz *tz = NULL;
    sl_error err = {0};
    if (sl_tz_parse("test", buf, n, &tz, &err))
        fail_msg("footer %s: %s", footer, err.msg);
    int32_t off = sl_tz_offset(tz, at, NULL);
    sl_tz_free(tz);
    return off;
}

static void test_footer_forms(void **state)
{
    (void)state;
    /* Mm.w.d: the US rules */
    const char *us = "EST5EDT,M3.2.0,M11.1.0";
    assert_int_equal(footer_off(us, utc(2030, 1, 1, 0, 0, 0)), -18000);
    assert_int_equal(footer_off(us, utc(2030, 3, 10, 6, 59, 59)), -18000);
    assert_int_equal(footer_off(us, utc(2030, 3, 10, 7, 0, 0)), -14400);
    assert_int_equal(footer_off(us, utc(2030, 11, 3, 5, 59, 59)), -14400);
    assert_int_equal(footer_off(us, utc(2030, 11, 3, 6, 0, 0)), -18000);
    /* the default rule when none is given is the US one */
    assert_int_equal(footer_off("EST5EDT", utc(2030, 7, 1, 0, 0, 0)), -14400);
    /* a quoted, fractional std offset without DST */
    assert_int_equal(footer_off("<+0530>-5:30", utc(2030, 7, 1, 0, 0, 0)), 19800);
    assert_int_equal(footer_off("<-03>3", utc(2030, 7, 1, 0, 0, 0)), -10800);
    /* Jn (February 29 not counted) and n (counted): day 60 is March 1 with
     * J60 in every year, and March 1 (leap) or March 2 with 60. */
    const char *jul = "AAA0BBB,J60/0,J300/0";
    assert_int_equal(footer_off(jul, utc(2028, 2, 29, 23, 59, 59)), 0);
    assert_int_equal(footer_off(jul, utc(2028, 3, 1, 0, 0, 0)), 3600);
    const char *zero = "AAA0BBB,60/0,300/0";
    assert_int_equal(footer_off(zero, utc(2028, 2, 29, 23, 59, 59)), 0);
    assert_int_equal(footer_off(zero, utc(2028, 3, 1, 0, 0, 0)), 3600);
    assert_int_equal(footer_off(zero, utc(2027, 3, 1, 23, 59, 59)), 0);
    assert_int_equal(footer_off(zero, utc(2027, 3, 2, 0, 0, 0)), 3600);
    /* v3: hours beyond 24 and negative (permanent DST, as in tzfile(5)) */
    const char *perm = "EST5EDT,0/0,J365/25";
    assert_int_equal(footer_off(perm, utc(2030, 1, 1, 12, 0, 0)), -14400);
    assert_int_equal(footer_off(perm, utc(2030, 7, 1, 12, 0, 0)), -14400);
    assert_int_equal(footer_off(perm, utc(2030, 12, 31, 23, 0, 0)), -14400);
    const char *neg = "AAA0BBB,M3.5.0/-2,M10.5.0/27";
    /* last Sunday of March 2030 is the 31st: -02:00 is March 30 22:00 */
    assert_int_equal(footer_off(neg, utc(2030, 3, 30, 21, 59, 59)), 0);
    assert_int_equal(footer_off(neg, utc(2030, 3, 30, 22, 0, 0)), 3600);
    /* southern hemisphere: DST across new year */
    const char *south = "AEST-10AEDT,M10.1.0,M4.1.0/3";
    assert_int_equal(footer_off(south, utc(2030, 1, 15, 0, 0, 0)), 39600);
    assert_int_equal(footer_off(south, utc(2030, 6, 15, 0, 0, 0)), 36000);
    assert_int_equal(footer_off(south, utc(2030, 12, 31, 23, 0, 0)), 39600);
    /* an empty footer: the type of the file */
    assert_int_equal(footer_off("", utc(2030, 1, 1, 0, 0, 0)), 0);
}

static void test_bad_files(void **state)
{
    (void)state;
    sl_tz *tz = NULL;
    sl_error err = {0};
    assert_int_equal(sl_tz_parse("x", "nope", 4, &tz, &err), SL_ECORRUPT);
    assert_non_null(strstr(err.msg, "not a TZif"));
    uint8_t buf[512];
    size_t n = make_tzif(buf, 0, "BAD");
    assert_int_equal(sl_tz_parse("x", buf, n, &tz, &err), SL_ECORRUPT);
    assert_non_null(strstr(err.msg, "footer"));
    n = make_tzif(buf, 0, "EST5EDT,M13.1.0,M11.1.0");
    assert_int_equal(sl_tz_parse("x", buf, n, &tz, &err), SL_ECORRUPT);
    n = make_tzif(buf, 0, "UTC0");
    for (size_t cut = 0; cut < n - 1; cut++) /* every truncation is refused */
        assert_int_equal(sl_tz_parse("x", buf, cut, &tz, NULL), SL_ECORRUPT);
    assert_int_equal(sl_tz_parse("x", buf, n, &tz, &err), 0);
    sl_tz_free(tz);
    /* a whole real file, truncated and then damaged, before a guard page */
    size_t len = 0;
    uint8_t *paris = tu_read_file(SL_TZ_DIR "/Europe/Paris", &len);
    tu_guard g = {0};
    for (size_t cut = 0; cut < len; cut += 7) {
        const char *p = tu_guard_put(&g, paris, cut);
        tz = NULL;
        int rc = sl_tz_parse("Europe/Paris", p, cut, &tz, NULL);
        assert_int_not_equal(rc, 0);
    }
    const char *p = tu_guard_put(&g, paris, len);
    assert_int_equal(sl_tz_parse("Europe/Paris", p, len, &tz, NULL), 0);
    sl_tz_free(tz);
    paris[36] = 0x7f; /* typecnt of the v1 header: far beyond the file */
    p = tu_guard_put(&g, paris, len);
    assert_int_equal(sl_tz_parse("Europe/Paris", p, len, &tz, NULL), SL_ECORRUPT);
    tu_guard_free(&g);
    free(paris);
    /* a leap-second file */
    if (tu_file_size(SL_TZ_DIR "/right/Europe/Paris") > 0) {
        assert_int_equal(sl_tz_load("right/Europe/Paris", &tz, &err), SL_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "leap"));
    }
}

static void test_names(void **state)
{
    (void)state;
    const char *bad[] = {"../etc/passwd",
                         "/etc/passwd",
                         "Europe/../../etc/passwd",
                         "Europe/",
                         "a//b",
                         "Europe/Paris;rm",
                         "Europe Paris",
                         "./UTC",
                         "Europe/.x",
                         ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sl_tz *tz = NULL;
        sl_error err = {0};
        assert_false(sl_tz_name_valid(bad[i]));
        if (!bad[i][0])
            continue; /* "" is UTC for sl_tz_load() */
        assert_int_equal(sl_tz_load(bad[i], &tz, &err), SL_EINVAL);
        assert_non_null(strstr(err.msg, "time zone"));
        assert_null(tz);
    }
    assert_true(sl_tz_name_valid("America/Argentina/Buenos_Aires"));
    assert_true(sl_tz_name_valid("Etc/GMT+5"));
    assert_true(sl_tz_name_valid("America/Port-au-Prince"));
    sl_tz *tz = NULL;
    sl_error err = {0};
    assert_int_equal(sl_tz_load("Mars/Olympus_Mons", &tz, &err), SL_ENOENT);
    assert_non_null(strstr(err.msg, "Mars/Olympus_Mons"));
    assert_int_equal(sl_tz_load("Europe", &tz, &err), SL_ENOENT); /* a directory */
    /* Etc/GMT+5 is five hours west (POSIX signs) */
    tz = load("Etc/GMT+5");
    assert_int_equal(sl_tz_offset(tz, 0, NULL), -18000);
    sl_tz_free(tz);
}

/* Many threads reading one zone (TSan would see any write). */
static void *reader(void *arg)
{
    const sl_tz *tz = arg;
    int64_t sum = 0;
    for (int64_t t = 0; t < 4000; t++)
        sum += sl_tz_offset(tz, utc(2000, 1, 1, 0, 0, 0) + t * 86400 * 7, NULL) +
               sl_tz_local_to_utc(tz, utc(2040, 3, 25, 2, 30, 0) + t * 86400) % 7;
    return (void *)(intptr_t)(sum != 0);
}

static void test_threads(void **state)
{
    (void)state;
    sl_tz *tz = load("Europe/Paris");
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader, tz), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_true(r != NULL);
    }
    sl_tz_free(tz);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_civil),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_footer_beyond_2037),
        cmocka_unit_test(test_local_to_utc),
        cmocka_unit_test(test_format_local),
        cmocka_unit_test(test_footer_forms),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
