/*
 * core/base/cron.c — AWS cron, rate and at expressions (core/base/cron.h):
 * the parser, one bit set per field, and the search for the next local
 * minute that matches, turned into an instant through the zone.
 */
#include "core/base/cron.h"

#include "core/base/clock.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define YEAR_MIN 1970
#define YEAR_MAX 2199

typedef enum dom_kind { DOM_ANY, DOM_LIST, DOM_LAST, DOM_LAST_WEEKDAY, DOM_WEEKDAY } dom_kind;
typedef enum dow_kind { DOW_ANY, DOW_LIST, DOW_LAST, DOW_NTH } dow_kind;

typedef struct cron {
    uint64_t min[1];  /* bit n: minute n */
    uint64_t hour[1]; /* bit n: hour n */
    uint64_t dom[1];  /* bit n: day n (DOM_LIST) */
    uint64_t mon[1];  /* bit n: month n */
    uint64_t dow[1];  /* bit n: AWS day n, 1 = Sunday (DOW_LIST) */
    uint64_t year[4]; /* bit n: year 1970 + n */
    dom_kind dk;
    int dom_day; /* DOM_WEEKDAY: nW */
    dow_kind wk;
    int dow_day, dow_nth; /* DOW_LAST: nL; DOW_NTH: n#k */
} cron;

struct sl_sched {
    sl_sched_kind kind;
    char expr[SL_SCHED_EXPR_MAX + 16]; /* "cron(…)" */
    sl_tz *tz;
    cron c;
    int64_t period_ms; /* rate */
    int64_t at_ms;     /* at */
};

static bool bit(const uint64_t *b, int n)
{
    return (b[n / 64] >> (n % 64)) & 1;
}

static void set_bit(uint64_t *b, int n)
{
    b[n / 64] |= (uint64_t)1 << (n % 64);
}

/* ---- parsing ----------------------------------------------------------------- */

typedef struct field_spec {
    const char *name; /* "minutes" */
    int lo, hi;
    const char *const *names; /* 3-letter names of lo, lo+1, … (NULL: none) */
    const char *want;         /* "a number 0-59" */
    bool wraps;               /* a-b with b < a wraps around */
} field_spec;

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

static const field_spec fields[6] = {
    {"minutes", 0, 59, NULL, "0-59", true},
    {"hours", 0, 23, NULL, "0-23", true},
    {"day-of-month", 1, 31, NULL, "1-31", true},
    {"month", 1, 12, month_names, "1-12 or JAN-DEC", true},
    {"day-of-week", 1, 7, day_names, "1-7 or SUN-SAT", true},
    {"year", YEAR_MIN, YEAR_MAX, NULL, "1970-2199", false},
};

typedef struct ctx {
    const char *expr; /* the whole expression, for messages */
    const field_spec *f;
    sl_error *err;
} ctx;

static int bad(const ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const ctx *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_error_set(c->err, SL_EINVAL, "cron \"%s\": %s: %s", c->expr, c->f->name, msg);
}

/* The message for a value that is neither a number nor a name: a special
 * character in the wrong field or place gets its own. */
static int not_a_value(const ctx *c, const char *s, size_t n)
{
    bool dom = c->f == &fields[2], dow = c->f == &fields[4];
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if ((ch == '?' || ch == 'L') && !dom && !dow)
            return bad(c, "%c is only for day-of-month or day-of-week", ch);
        if (ch == 'W' && !dom)
            return bad(c, "W is only for day-of-month");
        if (ch == '#' && !dow)
            return bad(c, "# is only for day-of-week");
        if (ch == '?' || ch == 'L' || ch == 'W' || ch == '#')
            return bad(c, "%c stands alone (not in a list or a range)", ch);
    }
    return bad(c, "\"%.*s\" is not a value (want %s)", (int)n, s, c->f->want);
}

/* A value (a number or a name) of s[0..n) into *v, checked against the
 * field's range. */
static int parse_value(const ctx *c, const char *s, size_t n, int *v)
{
    const field_spec *f = c->f;
    if (n == 0)
        return bad(c, "a value is missing (want %s)", f->want);
    if (isdigit((unsigned char)s[0])) {
        long x = 0;
        for (size_t i = 0; i < n; i++) {
            if (!isdigit((unsigned char)s[i]))
                return not_a_value(c, s, n);
            if (x < 100000)
                x = x * 10 + (s[i] - '0');
        }
        if (x < f->lo || x > f->hi)
            return bad(c, "%ld is outside %d-%d", x, f->lo, f->hi);
        *v = (int)x;
        return 0;
    }
    for (int i = 0; f->names && n == 3 && i <= f->hi - f->lo; i++)
        if (strncasecmp(s, f->names[i], 3) == 0) {
            *v = f->lo + i;
            return 0;
        }
    return not_a_value(c, s, n);
}

/* One item of a list: *, *\/n, a, a-b, a/n, a-b/n. */
static int parse_item(const ctx *c, const char *s, size_t n, uint64_t *bits)
{
    const field_spec *f = c->f;
    const char *slash = memchr(s, '/', n);
    size_t base_len = slash ? (size_t)(slash - s) : n;
    int step = 1;
    if (slash) {
        const char *st = slash + 1;
        size_t sn = n - base_len - 1;
        long x = 0;
        if (sn == 0)
            return bad(c, "\"%.*s\": a step is missing after /", (int)n, s);
        for (size_t i = 0; i < sn; i++) {
            if (!isdigit((unsigned char)st[i]))
                return bad(c, "\"%.*s\": the step must be a number", (int)n, s);
            if (x < 100000)
                x = x * 10 + (st[i] - '0');
        }
        if (x < 1)
            return bad(c, "\"%.*s\": the step must be 1 or more", (int)n, s);
        if (x > f->hi - f->lo + 1)
            return bad(c, "\"%.*s\": the step %ld is larger than the range %d-%d", (int)n, s, x,
                       f->lo, f->hi);
        step = (int)x;
    }
    int a, b;
    if (base_len == 1 && s[0] == '*') {
        a = f->lo;
        b = f->hi;
    } else {
        const char *dash = memchr(s, '-', base_len);
        int rc = parse_value(c, s, dash ? (size_t)(dash - s) : base_len, &a);
        if (rc)
            return rc;
        if (dash) {
            if ((rc = parse_value(c, dash + 1, base_len - (size_t)(dash + 1 - s), &b)))
                return rc;
            if (b < a && !f->wraps)
                return bad(c, "\"%.*s\": the range ends before it begins", (int)base_len, s);
        } else {
            b = slash ? f->hi : a; /* a/n: from a to the end of the range */
        }
    }
    /* a-b with b < a wraps: a … hi, then lo … b, the step running across. */
    int span = b >= a ? b - a : (f->hi - a) + (b - f->lo) + 1;
    for (int k = 0; k <= span; k += step) {
        int v = a + k;
        if (v > f->hi)
            v -= f->hi - f->lo + 1;
        set_bit(bits, v - (f == &fields[5] ? YEAR_MIN : 0));
    }
    return 0;
}

static int parse_list(const ctx *c, const char *s, size_t n, uint64_t *bits)
{
    for (size_t i = 0; i < n;) {
        const char *comma = memchr(s + i, ',', n - i);
        size_t len = comma ? (size_t)(comma - (s + i)) : n - i;
        if (len == 0)
            return bad(c, "an empty item in the list \"%.*s\"", (int)n, s);
        int rc = parse_item(c, s + i, len, bits);
        if (rc)
            return rc;
        i += len + (comma != NULL);
        if (comma && i == n)
            return bad(c, "an empty item in the list \"%.*s\"", (int)n, s);
    }
    return 0;
}

static int parse_dom(const ctx *c, const char *s, size_t n, cron *cr)
{
    if (n == 1 && s[0] == '?') {
        cr->dk = DOM_ANY;
        return 0;
    }
    if (n == 1 && s[0] == 'L') {
        cr->dk = DOM_LAST;
        return 0;
    }
    if (n == 2 && s[0] == 'L' && s[1] == 'W') {
        cr->dk = DOM_LAST_WEEKDAY;
        return 0;
    }
    if (n >= 2 && s[0] == 'L' && s[1] == '-')
        return bad(c,
                   "\"%.*s\": an offset from the last day (L-n) is not supported (AWS has "
                   "none); use L or LW",
                   (int)n, s);
    if (n >= 2 && s[n - 1] == 'W') {
        if (memchr(s, ',', n) || memchr(s, '-', n) || memchr(s, '/', n) || memchr(s, '*', n))
            return bad(c, "\"%.*s\": W takes one day (15W) or L (LW), not a list or a range",
                       (int)n, s);
        cr->dk = DOM_WEEKDAY;
        return parse_value(c, s, n - 1, &cr->dom_day);
    }
    for (size_t i = 0; i < n; i++)
        if (s[i] == 'L' || s[i] == 'W')
            return bad(c, "\"%.*s\": L and W stand alone (L, LW, 15W)", (int)n, s);
    cr->dk = DOM_LIST;
    return parse_list(c, s, n, cr->dom);
}

static int parse_dow(const ctx *c, const char *s, size_t n, cron *cr)
{
    if (n == 1 && s[0] == '?') {
        cr->wk = DOW_ANY;
        return 0;
    }
    if (n == 1 && s[0] == 'L') { /* alone: the last day of the week, Saturday */
        cr->wk = DOW_LIST;
        set_bit(cr->dow, 7);
        return 0;
    }
    const char *hash = memchr(s, '#', n);
    bool last = n >= 2 && s[n - 1] == 'L';
    if (hash || last) {
        if (memchr(s, ',', n) || memchr(s, '-', n) || memchr(s, '/', n) || memchr(s, '*', n))
            return bad(c, "\"%.*s\": %s stands alone (not in a list or a range)", (int)n, s,
                       hash ? "#" : "L");
        if (last) {
            cr->wk = DOW_LAST;
            return parse_value(c, s, n - 1, &cr->dow_day);
        }
        cr->wk = DOW_NTH;
        int rc = parse_value(c, s, (size_t)(hash - s), &cr->dow_day);
        if (rc)
            return rc;
        size_t kn = n - (size_t)(hash + 1 - s);
        const char *k = hash + 1;
        if (kn != 1 || k[0] < '1' || k[0] > '5')
            return bad(c,
                       "\"%.*s\": after # comes the week of the month, 1-5 (6#3: the third "
                       "Friday)",
                       (int)n, s);
        cr->dow_nth = k[0] - '0';
        return 0;
    }
    cr->wk = DOW_LIST;
    return parse_list(c, s, n, cr->dow);
}

/* ---- matching ----------------------------------------------------------------- */

/* 0 = Sunday … 6 = Saturday. */
static int weekday(int64_t y, int m, int d)
{
    int64_t z = sl_civil_days(y, m, d);
    return (int)((z % 7 + 11) % 7);
}

static bool day_ok(const cron *c, int64_t y, int m, int d)
{
    int dim = sl_civil_month_days(y, m);
    switch (c->dk) {
    case DOM_LIST:
        return bit(c->dom, d);
    case DOM_LAST:
        return d == dim;
    case DOM_LAST_WEEKDAY: {
        int wd = weekday(y, m, dim), last = dim;
        if (wd == 6)
            last = dim - 1;
        else if (wd == 0)
            last = dim - 2;
        return d == last;
    }
    case DOM_WEEKDAY: {
        int n = c->dom_day;
        if (n > dim)
            return false; /* this month has no day n */
        int wd = weekday(y, m, n), target = n;
        if (wd == 6)
            target = n == 1 ? 3 : n - 1; /* Saturday: Friday, or Monday the 3rd */
        else if (wd == 0)
            target = n == dim ? n - 2 : n + 1; /* Sunday: Monday, or Friday before the end */
        return d == target;
    }
    case DOM_ANY:
        break;
    }
    int aws = weekday(y, m, d) + 1;
    switch (c->wk) {
    case DOW_LIST:
        return bit(c->dow, aws);
    case DOW_LAST:
        return aws == c->dow_day && d + 7 > dim;
    case DOW_NTH:
        return aws == c->dow_day && (d - 1) / 7 + 1 == c->dow_nth;
    case DOW_ANY:
        break;
    }
    return false;
}

/* The first bit set in b at or after n, up to hi; -1 when none. */
static int next_bit(const uint64_t *b, int n, int hi)
{
    for (; n <= hi; n++)
        if (bit(b, n))
            return n;
    return -1;
}

/* The first local minute at or after from (seconds, as if UTC, a whole
 * minute) that matches c, into *out. Returns false when none does (the
 * years run out). */
static bool next_local(const cron *c, int64_t from, int64_t *out)
{
    sl_civil t;
    sl_civil_from_secs(from, &t);
    int64_t y = t.year;
    int m = t.month, d = t.day, h = t.hour, mi = t.min;
    if (y < YEAR_MIN)
        y = YEAR_MIN, m = 1, d = 1, h = 0, mi = 0;
    /* Every turn moves forward by at least a day, a month or a year, or
     * returns: at most ~85,000 days for 230 years. */
    for (;;) {
        if (mi > 59)
            h++, mi = 0;
        if (h > 23)
            d++, h = 0, mi = 0;
        if (m <= 12 && d > sl_civil_month_days(y, m))
            m++, d = 1, h = 0, mi = 0;
        if (m > 12)
            y++, m = 1, d = 1, h = 0, mi = 0;
        if (y > YEAR_MAX)
            return false;
        if (!bit(c->year, (int)(y - YEAR_MIN))) {
            int ny = next_bit(c->year, (int)(y - YEAR_MIN), YEAR_MAX - YEAR_MIN);
            if (ny < 0)
                return false;
            y = YEAR_MIN + ny, m = 1, d = 1, h = 0, mi = 0;
            continue;
        }
        if (!bit(c->mon, m)) {
            int nm = next_bit(c->mon, m, 12);
            if (nm < 0)
                y++, m = 1;
            else
                m = nm;
            d = 1, h = 0, mi = 0;
            continue;
        }
        if (!day_ok(c, y, m, d)) {
            d++, h = 0, mi = 0;
            continue;
        }
        if (!bit(c->hour, h)) {
            int nh = next_bit(c->hour, h, 23);
            if (nh < 0)
                d++, h = 0;
            else
                h = nh;
            mi = 0;
            continue;
        }
        int nmi = next_bit(c->min, mi, 59);
        if (nmi < 0) {
            h++, mi = 0;
            continue;
        }
        *out = sl_civil_days(y, m, d) * 86400 + h * 3600 + nmi * 60;
        return true;
    }
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int64_t cron_next(const sl_sched *s, int64_t after_ms)
{
    int64_t after_s = floor_div(after_ms, 1000);
    /* The wall time of after, to the minute: every local minute before it
     * maps to an instant at or before after (the mapping of tz.h never
     * goes backwards as local time moves forward). */
    int64_t local = after_s + sl_tz_offset(s->tz, after_s, NULL);
    int64_t m = floor_div(local, 60) * 60;
    for (int guard = 0; guard < 100000; guard++) {
        int64_t lm;
        if (!next_local(&s->c, m, &lm))
            return SL_SCHED_NEVER;
        int64_t t = sl_tz_local_to_utc(s->tz, lm);
        if (t > INT64_MAX / 1000 - 1)
            return SL_SCHED_NEVER;
        if (t * 1000 > after_ms)
            return t * 1000;
        m = lm + 60; /* a time skipped or repeated: on to the next minute */
    }
    return SL_SCHED_NEVER;
}

static int parse_cron(const char *expr, cron *out, sl_error *err)
{
    const char *f[6];
    size_t fl[6];
    int nf = 0;
    for (const char *p = expr; *p;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        const char *q = p;
        while (*q && *q != ' ' && *q != '\t')
            q++;
        if (nf < 6) {
            f[nf] = p;
            fl[nf] = (size_t)(q - p);
        }
        nf++;
        p = q;
    }
    if (nf != 6)
        return sl_error_set(err, SL_EINVAL,
                            "cron \"%s\": want 6 fields (minutes hours day-of-month month "
                            "day-of-week year), found %d",
                            expr, nf);
    cron c = {0};
    ctx cx = {expr, NULL, err};
    int rc = 0;
    cx.f = &fields[0];
    rc = parse_list(&cx, f[0], fl[0], c.min);
    if (!rc && (cx.f = &fields[1]))
        rc = parse_list(&cx, f[1], fl[1], c.hour);
    if (!rc && (cx.f = &fields[2]))
        rc = parse_dom(&cx, f[2], fl[2], &c);
    if (!rc && (cx.f = &fields[3]))
        rc = parse_list(&cx, f[3], fl[3], c.mon);
    if (!rc && (cx.f = &fields[4]))
        rc = parse_dow(&cx, f[4], fl[4], &c);
    if (!rc && (cx.f = &fields[5]))
        rc = parse_list(&cx, f[5], fl[5], c.year);
    if (rc)
        return rc;
    if (c.dk == DOM_ANY && c.wk == DOW_ANY)
        return sl_error_set(err, SL_EINVAL,
                            "cron \"%s\": day-of-month and day-of-week are both ?: give one of "
                            "them (and ? in the other)",
                            expr);
    if (c.dk != DOM_ANY && c.wk != DOW_ANY)
        return sl_error_set(err, SL_EINVAL,
                            "cron \"%s\": one of day-of-month and day-of-week must be ? (AWS "
                            "cannot combine them: \"0 8 1 * ? *\" or \"0 8 ? * MON *\")",
                            expr);
    int64_t first;
    if (!next_local(&c, 0, &first))
        return sl_error_set(err, SL_EINVAL, "cron \"%s\": never matches a date (1970-2199)", expr);
    *out = c;
    return 0;
}

/* ---- rate and at ----------------------------------------------------------------- */

static int parse_rate(const char *expr, int64_t *period_ms, sl_error *err)
{
    const char *p = expr;
    while (*p == ' ')
        p++;
    long long n = 0;
    const char *digits = p;
    while (isdigit((unsigned char)*p)) {
        if (n < 10000000)
            n = n * 10 + (*p - '0');
        p++;
    }
    if (p == digits || (*p != ' ' && *p != '\t'))
        return sl_error_set(err, SL_EINVAL,
                            "rate \"%s\": want \"N minute(s)|hour(s)|day(s)\", like \"5 minutes\"",
                            expr);
    while (*p == ' ' || *p == '\t')
        p++;
    const char *unit = p;
    size_t ul = strlen(unit);
    while (ul && (unit[ul - 1] == ' ' || unit[ul - 1] == '\t'))
        ul--;
    static const struct {
        const char *name;
        int64_t ms;
    } units[] = {{"minute", 60000}, {"hour", 3600000}, {"day", 86400000}};
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(units[i].name);
        if (ul < l || strncmp(unit, units[i].name, l) != 0 ||
            (ul != l && !(ul == l + 1 && unit[l] == 's')))
            continue;
        bool plural = ul == l + 1;
        if (n < 1)
            return sl_error_set(err, SL_EINVAL, "rate \"%s\": the value must be 1 or more", expr);
        if (n > 1000000)
            return sl_error_set(err, SL_EINVAL, "rate \"%s\": the value must be at most 1000000",
                                expr);
        if (n == 1 && plural)
            return sl_error_set(err, SL_EINVAL,
                                "rate \"%s\": with 1 the unit is singular: \"1 %s\"", expr,
                                units[i].name);
        if (n > 1 && !plural)
            return sl_error_set(err, SL_EINVAL,
                                "rate \"%s\": with a value above 1 the unit is plural: \"%lld "
                                "%ss\"",
                                expr, n, units[i].name);
        *period_ms = n * units[i].ms;
        return 0;
    }
    return sl_error_set(err, SL_EINVAL,
                        "rate \"%s\": the unit must be minute(s), hour(s) or day(s)", expr);
}

static int two(const char *p)
{
    return isdigit((unsigned char)p[0]) && isdigit((unsigned char)p[1])
               ? (p[0] - '0') * 10 + (p[1] - '0')
               : -1;
}

static int parse_at(const char *expr, const sl_tz *tz, int64_t *at_ms, sl_error *err)
{
    size_t n = strlen(expr);
    if (n == 19 && expr[4] == '-' && expr[7] == '-' && (expr[10] == 'T' || expr[10] == 't') &&
        expr[13] == ':' && expr[16] == ':') {
        int yh = two(expr), yl = two(expr + 2), mo = two(expr + 5), d = two(expr + 8),
            h = two(expr + 11), mi = two(expr + 14), s = two(expr + 17);
        int64_t y = yh * 100 + yl;
        if (yh < 0 || yl < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 ||
            mi > 59 || s < 0 || s > 59 || y < 1970 || d > sl_civil_month_days(y, mo))
            return sl_error_set(err, SL_EINVAL, "at \"%s\": not a date and time that exists", expr);
        sl_civil c = {.year = y, .month = mo, .day = d, .hour = h, .min = mi, .sec = s};
        *at_ms = sl_tz_local_to_utc(tz, sl_civil_to_secs(&c)) * 1000;
        return 0;
    }
    int64_t ms;
    if (sl_time_parse_rfc3339(expr, n, &ms) == 0 && ms >= 0) {
        *at_ms = ms;
        return 0;
    }
    return sl_error_set(err, SL_EINVAL,
                        "at \"%s\": want YYYY-MM-DDTHH:MM:SS (in the schedule's timezone) or an "
                        "RFC 3339 time with its offset (2026-12-24T18:00:00+01:00)",
                        expr);
}

/* ---- the schedule ---------------------------------------------------------------- */

const char *sl_sched_kind_name(sl_sched_kind kind)
{
    switch (kind) {
    case SL_SCHED_CRON:
        return "cron";
    case SL_SCHED_RATE:
        return "rate";
    case SL_SCHED_AT:
        return "at";
    }
    return "?";
}

int sl_sched_new(sl_sched_kind kind, const char *expr, const char *tz, sl_sched **out,
                 sl_error *err)
{
    const char *kn = sl_sched_kind_name(kind);
    if (!expr || !*expr)
        return sl_error_set(err, SL_EINVAL, "%s: the expression is empty", kn);
    if (strlen(expr) > SL_SCHED_EXPR_MAX)
        return sl_error_set(err, SL_EINVAL, "%s \"%.40s…\": longer than %d bytes", kn, expr,
                            SL_SCHED_EXPR_MAX);
    for (const char *p = expr; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            return sl_error_set(err, SL_EINVAL,
                                "%s: the expression holds a control or non-ASCII character", kn);
    sl_sched *s = calloc(1, sizeof *s);
    if (!s)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    s->kind = kind;
    snprintf(s->expr, sizeof s->expr, "%s(%s)", kn, expr);
    int rc = sl_tz_load(tz, &s->tz, err);
    if (!rc) {
        switch (kind) {
        case SL_SCHED_CRON:
            rc = parse_cron(expr, &s->c, err);
            break;
        case SL_SCHED_RATE:
            rc = parse_rate(expr, &s->period_ms, err);
            break;
        case SL_SCHED_AT:
            rc = parse_at(expr, s->tz, &s->at_ms, err);
            break;
        }
    }
    if (rc) {
        sl_sched_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int sl_sched_split(const char *expression, sl_sched_kind *kind, const char **inner, size_t *len,
                   sl_error *err)
{
    static const sl_sched_kind kinds[] = {SL_SCHED_CRON, SL_SCHED_RATE, SL_SCHED_AT};
    size_t n = expression ? strlen(expression) : 0;
    for (size_t i = 0; i < 3; i++) {
        const char *kn = sl_sched_kind_name(kinds[i]);
        size_t kl = strlen(kn);
        if (n > kl + 1 && strncmp(expression, kn, kl) == 0 && expression[kl] == '(' &&
            expression[n - 1] == ')') {
            *kind = kinds[i];
            *inner = expression + kl + 1;
            *len = n - kl - 2;
            return 0;
        }
    }
    return sl_error_set(err, SL_EINVAL,
                        "schedule expression \"%.80s\": want cron(…), rate(…) or at(…)",
                        expression ? expression : "");
}

int sl_sched_new_expression(const char *expression, const char *tz, sl_sched **out, sl_error *err)
{
    sl_sched_kind kind;
    const char *inner;
    size_t len;
    int rc = sl_sched_split(expression, &kind, &inner, &len, err);
    if (rc)
        return rc;
    if (len > SL_SCHED_EXPR_MAX)
        return sl_error_set(err, SL_EINVAL, "schedule expression: longer than %d bytes",
                            SL_SCHED_EXPR_MAX);
    char buf[SL_SCHED_EXPR_MAX + 1];
    memcpy(buf, inner, len);
    buf[len] = '\0';
    return sl_sched_new(kind, buf, tz, out, err);
}

int64_t sl_sched_next(const sl_sched *s, int64_t after_ms)
{
    switch (s->kind) {
    case SL_SCHED_CRON:
        return cron_next(s, after_ms);
    case SL_SCHED_RATE: {
        int64_t k = floor_div(after_ms, s->period_ms) + 1;
        return k > INT64_MAX / s->period_ms ? SL_SCHED_NEVER : k * s->period_ms;
    }
    case SL_SCHED_AT:
        return s->at_ms > after_ms ? s->at_ms : SL_SCHED_NEVER;
    }
    return SL_SCHED_NEVER;
}

sl_sched_kind sl_sched_kind_of(const sl_sched *s)
{
    return s->kind;
}

const char *sl_sched_expression(const sl_sched *s)
{
    return s->expr;
}

const sl_tz *sl_sched_tz(const sl_sched *s)
{
    return s->tz;
}

void sl_sched_free(sl_sched *s)
{
    if (!s)
        return;
    sl_tz_free(s->tz);
    free(s);
}
