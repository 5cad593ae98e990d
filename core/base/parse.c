/*
 * core/base/parse.c — numbers with units in configuration values and
 * command-line options: durations ("250ms", "7d") and sizes ("128MiB").
 */
#include "core/base/parse.h"
#include "core/base/err.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A number and a unit from units (scale per unit): "1.5s", "128MiB". The
 * result must stay below limit. Returns 0 or SL_EINVAL. */
typedef struct unit {
    const char *name;
    double scale;
} unit;

static int parse_scaled(const char *s, const unit *units, size_t n, double limit, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || !isfinite(v)) /* NaN fails v >= 0 */
        return SL_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(end, units[i].name) == 0) {
            double r = v * units[i].scale;
            if (r > limit)
                return SL_EINVAL;
            *out = r;
            return 0;
        }
    }
    return SL_EINVAL;
}

int sl_parse_duration_ms(const char *s, int64_t *ms)
{
    static const unit units[] = {{"", 1},       {"ms", 1},      {"s", 1e3},        {"m", 60e3},
                                 {"h", 3600e3}, {"d", 86400e3}, {"w", 7 * 86400e3}};
    double r;
    int rc = parse_scaled(s, units, sizeof units / sizeof *units, (double)INT64_MAX / 2, &r);
    if (!rc)
        *ms = (int64_t)r;
    return rc;
}

int sl_parse_bytes(const char *s, uint64_t *bytes)
{
    static const unit units[] = {{"", 1},
                                 {"B", 1},
                                 {"KiB", 1024.0},
                                 {"MiB", 1048576.0},
                                 {"GiB", 1073741824.0},
                                 {"TiB", 1099511627776.0},
                                 {"KB", 1e3},
                                 {"MB", 1e6},
                                 {"GB", 1e9},
                                 {"TB", 1e12}};
    double r;
    int rc = parse_scaled(s, units, sizeof units / sizeof *units, 9.0e18, &r);
    if (!rc)
        *bytes = (uint64_t)r;
    return rc;
}
