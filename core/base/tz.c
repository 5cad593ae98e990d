/*
 * core/base/tz.c — TZif zone files (RFC 8536) and their POSIX TZ footer,
 * UTC offsets and local-time conversion (core/base/tz.h), and the civil
 * calendar arithmetic the schedules use (Howard Hinnant's days-from-civil).
 */
#include "core/base/tz.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest zone file read (the biggest in tzdata is under 10 KiB). */
#define TZ_FILE_MAX (1u << 20)
/* RFC 8536 §3.2: utoff lies in [-89999, 93599], i.e. within ±26 hours. */
#define TZ_OFF_MIN (-89999)
#define TZ_OFF_MAX 93599
#define TZ_SPAN (27 * 3600)

/* One date of a POSIX TZ rule: Jn, n or Mm.w.d, then /time. */
typedef struct tz_date {
    char form;    /* 'J', 'n', 'M' */
    int a, b, c;  /* J: a = day 1-365; n: a = day 0-365; M: a = month, b = week, c = weekday */
    int32_t time; /* seconds after local midnight (may be negative or past 24 h) */
} tz_date;

struct sl_tz {
    char name[SL_TZ_NAME_MAX + 1];
    bool utc;
    size_t ntrans;
    int64_t *trans; /* transition instants, ascending */
    uint8_t *idx;   /* the type each transition switches to */
    size_t ntypes;
    int32_t *utoff;
    bool *isdst;
    /* The footer: in force after the last transition. */
    bool footer;        /* a non-empty TZ string */
    int32_t std_off;    /* seconds east of UTC */
    int32_t dst_off;    /* with has_dst */
    bool has_dst;       /* a daylight part with its rule */
    tz_date start, end; /* DST starts at start (std time), ends at end (dst time) */
};

/* ---- civil calendar -------------------------------------------------------- */

int64_t sl_civil_days(int64_t y, int m, int d)
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

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

int64_t sl_civil_to_secs(const sl_civil *c)
{
    return sl_civil_days(c->year, c->month, c->day) * 86400 + c->hour * 3600 + c->min * 60 + c->sec;
}

void sl_civil_from_secs(int64_t secs, sl_civil *out)
{
    int64_t days = floor_div(secs, 86400);
    int64_t rem = secs - days * 86400;
    civil_from_days(days, &out->year, &out->month, &out->day);
    out->hour = (int)(rem / 3600);
    out->min = (int)(rem / 60 % 60);
    out->sec = (int)(rem % 60);
    /* 1970-01-01 was a Thursday (4). */
    out->wday = (int)((days % 7 + 11) % 7);
}

bool sl_civil_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int sl_civil_month_days(int64_t y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && sl_civil_leap(y) ? 29 : days[(m - 1) % 12];
}

/* ---- names ------------------------------------------------------------------ */

bool sl_tz_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SL_TZ_NAME_MAX || name[0] == '/' || name[n - 1] == '/' ||
        strstr(name, "//") || strstr(name, ".."))
        return false;
    /* No '.' at all (so no "." or ".." component either): tzdata names
     * have none, and a path may not climb out of SL_TZ_DIR. */
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '+' || c == '-' || c == '/'))
            return false;
    }
    return true;
}

/* ---- the POSIX TZ footer -------------------------------------------------- */

/* [+-]hh[:mm[:ss]] with hh <= max_h, into *secs (sign applied). */
static const char *parse_hms(const char *p, int max_h, int32_t *secs)
{
    int sign = 1;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    if (*p < '0' || *p > '9')
        return NULL;
    int h = 0, m = 0, s = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 3)
        h = h * 10 + (*p++ - '0'), digits++;
    if (h > max_h)
        return NULL;
    if (*p == ':') {
        p++;
        if (p[0] < '0' || p[0] > '5' || p[1] < '0' || p[1] > '9')
            return NULL;
        m = (p[0] - '0') * 10 + (p[1] - '0');
        p += 2;
        if (*p == ':') {
            p++;
            if (p[0] < '0' || p[0] > '5' || p[1] < '0' || p[1] > '9')
                return NULL;
            s = (p[0] - '0') * 10 + (p[1] - '0');
            p += 2;
        }
    }
    *secs = sign * (h * 3600 + m * 60 + s);
    return p;
}

/* A zone abbreviation: <…> or at least three letters. */
static const char *parse_abbr(const char *p)
{
    if (*p == '<') {
        const char *q = ++p;
        while ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') ||
               *q == '+' || *q == '-')
            q++;
        return *q == '>' && q - p >= 3 ? q + 1 : NULL;
    }
    const char *q = p;
    while ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z'))
        q++;
    return q - p >= 3 ? q : NULL;
}

static const char *parse_num(const char *p, int lo, int hi, int *out)
{
    if (*p < '0' || *p > '9')
        return NULL;
    int v = 0;
    for (int digits = 0; *p >= '0' && *p <= '9'; digits++) {
        if (digits == 3)
            return NULL;
        v = v * 10 + (*p++ - '0');
    }
    if (v < lo || v > hi)
        return NULL;
    *out = v;
    return p;
}

/* date[/time] of a rule. */
static const char *parse_date(const char *p, tz_date *d)
{
    if (*p == 'J') {
        d->form = 'J';
        p = parse_num(p + 1, 1, 365, &d->a);
    } else if (*p == 'M') {
        d->form = 'M';
        p = parse_num(p + 1, 1, 12, &d->a);
        if (p && *p == '.')
            p = parse_num(p + 1, 1, 5, &d->b);
        else
            p = NULL;
        if (p && *p == '.')
            p = parse_num(p + 1, 0, 6, &d->c);
        else
            p = NULL;
    } else {
        d->form = 'n';
        p = parse_num(p, 0, 365, &d->a);
    }
    d->time = 2 * 3600;
    if (p && *p == '/')
        p = parse_hms(p + 1, 167, &d->time);
    return p;
}

/* The footer text s[0..n): "" (none) or a POSIX TZ string. Returns 0 or -1. */
static int parse_footer(sl_tz *tz, const char *s, size_t n)
{
    char buf[256];
    if (n == 0)
        return 0;
    if (n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    const char *p = parse_abbr(buf);
    int32_t off;
    if (!p || !(p = parse_hms(p, 24, &off)))
        return -1;
    tz->footer = true;
    tz->std_off = -off; /* POSIX offsets count west of UTC */
    if (*p == '\0')
        return 0;
    if (!(p = parse_abbr(p)))
        return -1;
    tz->has_dst = true;
    tz->dst_off = tz->std_off + 3600;
    if (*p && *p != ',') {
        if (!(p = parse_hms(p, 24, &off)))
            return -1;
        tz->dst_off = -off;
    }
    if (*p == '\0') { /* POSIX leaves the default rule to the implementation: the US one */
        tz->start = (tz_date){'M', 3, 2, 0, 7200};
        tz->end = (tz_date){'M', 11, 1, 0, 7200};
        return 0;
    }
    if (*p != ',' || !(p = parse_date(p + 1, &tz->start)) || *p != ',' ||
        !(p = parse_date(p + 1, &tz->end)) || *p != '\0')
        return -1;
    return 0;
}

/* Local seconds (since the epoch, as if UTC) of rule date d in year y. */
static int64_t rule_local(const tz_date *d, int64_t y)
{
    int64_t days;
    if (d->form == 'J') { /* 1-365, February 29 never counted */
        days = sl_civil_days(y, 1, 1) + d->a - 1 + (sl_civil_leap(y) && d->a >= 60);
    } else if (d->form == 'n') { /* 0-365, counting February 29 */
        days = sl_civil_days(y, 1, 1) + d->a;
    } else {
        int64_t first = sl_civil_days(y, d->a, 1);
        int wday1 = (int)((first % 7 + 11) % 7);
        int day = 1 + (d->c - wday1 + 7) % 7 + 7 * (d->b - 1);
        while (day > sl_civil_month_days(y, d->a))
            day -= 7;
        days = first + day - 1;
    }
    return days * 86400 + d->time;
}

typedef struct tz_change {
    int64_t at;
    bool dst; /* what is in force from at on */
} tz_change;

/* The footer's changes of years y-1 … y+2, ascending (8 of them). */
static void footer_changes(const sl_tz *tz, int64_t y, tz_change out[8])
{
    for (int i = 0; i < 4; i++) {
        out[2 * i] = (tz_change){rule_local(&tz->start, y - 1 + i) - tz->std_off, true};
        out[2 * i + 1] = (tz_change){rule_local(&tz->end, y - 1 + i) - tz->dst_off, false};
    }
    for (int i = 1; i < 8; i++) /* insertion sort: they are nearly sorted */
        for (int j = i; j > 0 && out[j].at < out[j - 1].at; j--) {
            tz_change t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
}

static int64_t year_of(int64_t secs)
{
    sl_civil c;
    sl_civil_from_secs(secs, &c);
    return c.year;
}

static int32_t footer_offset(const sl_tz *tz, int64_t t, bool *dst)
{
    if (!tz->has_dst) {
        *dst = false;
        return tz->std_off;
    }
    tz_change ch[8];
    footer_changes(tz, year_of(t + tz->std_off), ch);
    bool in = !ch[0].dst;
    for (int i = 0; i < 8 && ch[i].at <= t; i++)
        in = ch[i].dst;
    *dst = in;
    return in ? tz->dst_off : tz->std_off;
}

/* ---- TZif ------------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

typedef struct tzif_counts {
    uint32_t isut, isstd, leap, time, type, chars;
} tzif_counts;

/* The header at p (44 bytes, checked by the caller). */
static void read_counts(const uint8_t *p, tzif_counts *c)
{
    c->isut = be32(p + 20);
    c->isstd = be32(p + 24);
    c->leap = be32(p + 28);
    c->time = be32(p + 32);
    c->type = be32(p + 36);
    c->chars = be32(p + 40);
}

static size_t block_size(const tzif_counts *c, size_t tsize)
{
    return (size_t)c->time * (tsize + 1) + (size_t)c->type * 6 + c->chars +
           (size_t)c->leap * (tsize + 4) + c->isstd + c->isut;
}

static int corrupt(sl_error *err, const char *name, const char *why)
{
    return sl_error_set(err, SL_ECORRUPT, "time zone \"%s\": %s", name, why);
}

int sl_tz_parse(const char *name, const void *data, size_t len, sl_tz **out, sl_error *err)
{
    const uint8_t *p = data, *end = p + len;
    const char *nm = name ? name : "?";
    if (len < 44 || memcmp(p, "TZif", 4) != 0)
        return corrupt(err, nm, "not a TZif file");
    int version = p[4] ? p[4] - '0' : 1;
    if (version < 1 || version > 4)
        return corrupt(err, nm, "unknown TZif version");
    tzif_counts c;
    read_counts(p, &c);
    /* Each count is bounded by the file's size, so the sums cannot overflow. */
    if (c.time > len || c.type > len || c.chars > len || c.leap > len || c.isstd > len ||
        c.isut > len)
        return corrupt(err, nm, "counts beyond the end of the file");
    size_t tsize = 4;
    p += 44;
    if (version >= 2) {
        size_t skip = block_size(&c, 4);
        if ((size_t)(end - p) < skip + 44 || memcmp(p + skip, "TZif", 4) != 0)
            return corrupt(err, nm, "truncated, or no second header");
        p += skip;
        read_counts(p, &c);
        if (c.time > len || c.type > len || c.chars > len || c.leap > len || c.isstd > len ||
            c.isut > len)
            return corrupt(err, nm, "counts beyond the end of the file");
        p += 44;
        tsize = 8;
    }
    if (c.leap)
        return sl_error_set(err, SL_EUNSUPPORTED,
                            "time zone \"%s\": a leap-second zone file (sluice counts POSIX "
                            "time, without leap seconds: use the zone without \"right/\")",
                            nm);
    if (c.type == 0 || c.type > 256 || c.chars == 0 || (c.isstd && c.isstd != c.type) ||
        (c.isut && c.isut != c.type))
        return corrupt(err, nm, "bad counts in the header");
    if ((size_t)(end - p) < block_size(&c, tsize))
        return corrupt(err, nm, "truncated");
    sl_tz *tz = calloc(1, sizeof *tz);
    if (!tz)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    snprintf(tz->name, sizeof tz->name, "%s", nm);
    tz->ntrans = c.time;
    tz->ntypes = c.type;
    tz->trans = calloc(c.time ? c.time : 1, sizeof *tz->trans);
    tz->idx = calloc(c.time ? c.time : 1, 1);
    tz->utoff = calloc(c.type, sizeof *tz->utoff);
    tz->isdst = calloc(c.type, sizeof *tz->isdst);
    if (!tz->trans || !tz->idx || !tz->utoff || !tz->isdst) {
        sl_tz_free(tz);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    const char *why = NULL;
    for (size_t i = 0; i < c.time; i++) {
        tz->trans[i] = tsize == 8 ? be64(p + i * 8) : (int32_t)be32(p + i * 4);
        if (i && tz->trans[i] <= tz->trans[i - 1])
            why = "transition times are not ascending";
    }
    p += (size_t)c.time * tsize;
    for (size_t i = 0; i < c.time; i++)
        if ((tz->idx[i] = p[i]) >= c.type)
            why = "a transition names a type that does not exist";
    p += c.time;
    for (size_t i = 0; i < c.type; i++) {
        int32_t off = (int32_t)be32(p + i * 6);
        if (off < TZ_OFF_MIN || off > TZ_OFF_MAX || p[i * 6 + 4] > 1 || p[i * 6 + 5] >= c.chars)
            why = "a local time type is out of range";
        tz->utoff[i] = off;
        tz->isdst[i] = p[i * 6 + 4];
    }
    p += (size_t)c.type * 6 + c.chars + c.isstd + c.isut;
    if (!why && version >= 2) {
        const uint8_t *nl =
            p < end && *p == '\n' ? memchr(p + 1, '\n', (size_t)(end - p - 1)) : NULL;
        if (!nl)
            why = "the TZ string footer is missing";
        else if (parse_footer(tz, (const char *)p + 1, (size_t)(nl - p - 1)))
            why = "the TZ string footer cannot be read";
    }
    if (why) {
        sl_tz_free(tz);
        return corrupt(err, nm, why);
    }
    *out = tz;
    return 0;
}

int sl_tz_load(const char *name, sl_tz **out, sl_error *err)
{
    if (!name || !*name || strcmp(name, "UTC") == 0 || strcmp(name, "Etc/UTC") == 0) {
        sl_tz *tz = calloc(1, sizeof *tz);
        if (!tz)
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        snprintf(tz->name, sizeof tz->name, "%s", name && *name ? name : "UTC");
        tz->utc = true;
        *out = tz;
        return 0;
    }
    if (!sl_tz_name_valid(name))
        return sl_error_set(err, SL_EINVAL,
                            "time zone \"%.64s\": not a zone name (like \"Europe/Paris\": letters, "
                            "digits, _ + - and /, no \"..\", not beginning with /)",
                            name);
    char path[sizeof SL_TZ_DIR + SL_TZ_NAME_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", SL_TZ_DIR, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : ENOENT;
        if (fd >= 0)
            close(fd);
        if (e == ENOENT || e == ENOTDIR || e == EISDIR)
            return sl_error_set(err, SL_ENOENT, "time zone \"%s\": unknown (no file %s)", name,
                                path);
        return sl_error_errno(err, e, "time zone \"%s\": %s", name, path);
    }
    if (st.st_size > (off_t)TZ_FILE_MAX) {
        close(fd);
        return corrupt(err, name, "the file is too large for a zone");
    }
    size_t len = (size_t)st.st_size, got = 0;
    uint8_t *data = malloc(len ? len : 1);
    if (!data) {
        close(fd);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    while (got < len) {
        ssize_t r = read(fd, data + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    int rc = got == len ? sl_tz_parse(name, data, len, out, err)
                        : corrupt(err, name, "the file could not be read whole");
    free(data);
    return rc;
}

const char *sl_tz_name(const sl_tz *tz)
{
    return tz->name;
}

bool sl_tz_is_utc(const sl_tz *tz)
{
    return tz->utc;
}

void sl_tz_free(sl_tz *tz)
{
    if (!tz)
        return;
    free(tz->trans);
    free(tz->idx);
    free(tz->utoff);
    free(tz->isdst);
    free(tz);
}

/* ---- offsets and transitions ------------------------------------------------ */

int32_t sl_tz_offset(const sl_tz *tz, int64_t t, bool *is_dst)
{
    bool dst = false;
    int32_t off = 0;
    if (tz->utc) {
        off = 0;
    } else if (tz->ntrans == 0 || t >= tz->trans[tz->ntrans - 1]) {
        if (tz->footer) {
            off = footer_offset(tz, t, &dst);
        } else {
            size_t ty = tz->ntrans ? tz->idx[tz->ntrans - 1] : 0;
            off = tz->utoff[ty];
            dst = tz->isdst[ty];
        }
    } else if (t < tz->trans[0]) {
        off = tz->utoff[0];
        dst = tz->isdst[0];
    } else { /* the last transition at or before t */
        size_t lo = 0, hi = tz->ntrans - 1;
        while (lo + 1 < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (tz->trans[mid] <= t)
                lo = mid;
            else
                hi = mid;
        }
        off = tz->utoff[tz->idx[lo]];
        dst = tz->isdst[tz->idx[lo]];
    }
    if (is_dst)
        *is_dst = dst;
    return off;
}

/* The first transition strictly after t: its instant in *at, the offset
 * from then on in *off. Returns false when there is none. */
static bool next_transition(const sl_tz *tz, int64_t t, int64_t *at, int32_t *off)
{
    if (tz->utc)
        return false;
    if (tz->ntrans && t < tz->trans[tz->ntrans - 1]) {
        size_t lo = 0, hi = tz->ntrans - 1; /* the first > t is in [lo, hi] */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (tz->trans[mid] > t)
                hi = mid;
            else
                lo = mid + 1;
        }
        *at = tz->trans[lo];
        *off = tz->utoff[tz->idx[lo]];
        return true;
    }
    if (!tz->footer || !tz->has_dst)
        return false;
    tz_change ch[8];
    footer_changes(tz, year_of(t + tz->std_off), ch);
    for (int i = 0; i < 8; i++)
        if (ch[i].at > t && (!tz->ntrans || ch[i].at > tz->trans[tz->ntrans - 1])) {
            *at = ch[i].at;
            *off = ch[i].dst ? tz->dst_off : tz->std_off;
            return true;
        }
    return false;
}

int64_t sl_tz_local_to_utc(const sl_tz *tz, int64_t local)
{
    if (tz->utc)
        return local;
    /* The instant lies within ±26 h of the wall time: walk the intervals
     * between transitions over that window, in order. The first interval
     * whose offset puts local inside it holds the first occurrence; a local
     * time that a forward jump skips falls between the wall times just
     * before and just after that transition. */
    int64_t a = local - TZ_SPAN;
    int32_t off = sl_tz_offset(tz, a, NULL);
    for (int guard = 0; guard < 64; guard++) {
        int64_t nat = 0;
        int32_t noff = 0;
        bool more = next_transition(tz, a, &nat, &noff);
        int64_t t = local - off;
        if (t >= a && (!more || t < nat))
            return t;
        if (!more || nat > local + TZ_SPAN)
            break;
        if (noff > off && local >= nat + off && local < nat + noff)
            return nat; /* in the gap */
        a = nat;
        off = noff;
    }
    return local - sl_tz_offset(tz, local, NULL);
}

size_t sl_tz_format_local(const sl_tz *tz, int64_t ms, char out[SL_TZ_LOCAL_MAX])
{
    int64_t s = floor_div(ms, 1000);
    int32_t off = sl_tz_offset(tz, s, NULL);
    sl_civil c;
    sl_civil_from_secs(s + off, &c);
    out[0] = '\0';
    if (c.year < 0 || c.year > 9999)
        return 0;
    int aoff = off < 0 ? -off : off;
    int n = snprintf(out, SL_TZ_LOCAL_MAX, "%04lld-%02d-%02dT%02d:%02d:%02d%c%02d:%02d",
                     (long long)c.year, c.month, c.day, c.hour, c.min, c.sec, off < 0 ? '-' : '+',
                     aoff / 3600, aoff / 60 % 60);
    return n > 0 ? (size_t)n : 0;
}
