/*
 * core/base/clock.c — time sources and RFC 3339 conversion.
 *
 * Calendar arithmetic uses the days-from-civil algorithm (proleptic
 * Gregorian, era-based), so it is exact for every year 0000–9999 without
 * timegm() and its dependence on the TZ environment.
 */
#include "core/base/clock.h"
#include "core/base/err.h"

#include <stdbool.h>
#include <time.h>

int64_t sl_clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sl_clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t sl_clock_mono_ms(void)
{
    return sl_clock_mono_ns() / 1000000;
}

struct timespec sl_clock_mono_deadline(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* Days since 1970-01-01 of y-m-d (m 1–12). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

/* Reads n digits at s into *v; false if any is not a digit. */
static bool digits(const char *s, int n, int *v)
{
    int x = 0;
    for (int i = 0; i < n; i++) {
        unsigned d = (unsigned char)s[i] - (unsigned)'0';
        if (d > 9)
            return false;
        x = x * 10 + (int)d;
    }
    *v = x;
    return true;
}

int sl_time_parse_rfc3339(const char *s, size_t len, int64_t *ms)
{
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, mo, d, h, mi, sec, frac = 0;
    /* "YYYY-MM-DDTHH:MM:SS" is 19 bytes, and at least "Z" must follow. */
    if (len < 20 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
        !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2, &h) ||
        s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &sec))
        return SL_EINVAL;
    if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 60)
        return SL_EINVAL;
    if (d > mdays[mo - 1] + (mo == 2 && is_leap(y)))
        return SL_EINVAL;
    size_t i = 19;
    if (s[i] == '.') {
        size_t f0 = ++i;
        while (i < len && (unsigned char)s[i] - (unsigned)'0' <= 9) {
            if (i - f0 < 3)
                frac = frac * 10 + (s[i] - '0');
            i++;
        }
        if (i == f0)
            return SL_EINVAL;
        for (size_t k = i - f0; k < 3; k++)
            frac *= 10;
    }
    if (i >= len)
        return SL_EINVAL;
    int offset_min = 0;
    if (s[i] == 'Z' || s[i] == 'z') {
        i++;
    } else if (s[i] == '+' || s[i] == '-') {
        int oh, om;
        if (len - i != 6 || !digits(s + i + 1, 2, &oh) || s[i + 3] != ':' ||
            !digits(s + i + 4, 2, &om) || oh > 23 || om > 59)
            return SL_EINVAL;
        offset_min = (oh * 60 + om) * (s[i] == '-' ? -1 : 1);
        i += 6;
    } else {
        return SL_EINVAL;
    }
    if (i != len)
        return SL_EINVAL;
    /* Leap seconds are inserted only at 23:59:60 UTC. */
    if (sec == 60 && ((h * 60 + mi - offset_min) % 1440 + 1440) % 1440 != 1439)
        return SL_EINVAL;
    int64_t days = days_from_civil(y, mo, d);
    int64_t secs = ((days * 24 + h) * 60 + mi) * 60 + sec - (int64_t)offset_min * 60;
    *ms = secs * 1000 + frac;
    return 0;
}

size_t sl_time_format_rfc3339(int64_t ms, char out[SL_TIME_RFC3339_MAX])
{
    /* Floor division, so times before 1970 format correctly. */
    int64_t secs = ms / 1000, milli = ms % 1000;
    if (milli < 0)
        milli += 1000, secs--;
    int64_t days = secs / 86400, rem = secs % 86400;
    if (rem < 0)
        rem += 86400, days--;
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    out[0] = '\0';
    if (y < 0 || y > 9999)
        return 0;
    int v[7] = {(int)y, m, d, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60), (int)milli};
    static const char *const sep = "--T::.Z";
    static const int width[7] = {4, 2, 2, 2, 2, 2, 3};
    size_t n = 0;
    for (int k = 0; k < 7; k++) {
        for (int w = width[k] - 1; w >= 0; w--) {
            out[n + (size_t)w] = (char)('0' + v[k] % 10);
            v[k] /= 10;
        }
        n += (size_t)width[k];
        out[n++] = sep[k];
    }
    out[n] = '\0';
    return n;
}
