/*
 * rules/pattern_set.c — see pattern_set.h. (First version: each pattern in
 * turn; the combined structure replaces it.)
 */
#include "rules/pattern_set.h"

#include <stdlib.h>

struct sl_pattern_set {
    const sl_pattern **pats;
    size_t n;
};

struct sl_pattern_set_scratch {
    int unused;
};

int sl_pattern_set_build(const sl_pattern *const *pats, size_t n, sl_pattern_set **out,
                         sl_error *err)
{
    sl_pattern_set *ps = calloc(1, sizeof *ps);
    if (!ps || !(ps->pats = calloc(n ? n : 1, sizeof *ps->pats))) {
        free(ps);
        return sl_error_set(err, SL_ENOMEM, "pattern set: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        ps->pats[i] = pats[i];
    ps->n = n;
    *out = ps;
    return 0;
}

size_t sl_pattern_set_count(const sl_pattern_set *ps)
{
    return ps->n;
}

size_t sl_pattern_set_bytes(const sl_pattern_set *ps)
{
    return sizeof *ps + ps->n * sizeof *ps->pats;
}

void sl_pattern_set_free(sl_pattern_set *ps)
{
    if (!ps)
        return;
    free(ps->pats);
    free(ps);
}

sl_pattern_set_scratch *sl_pattern_set_scratch_new(const sl_pattern_set *ps)
{
    (void)ps;
    return calloc(1, sizeof(sl_pattern_set_scratch));
}

void sl_pattern_set_scratch_free(sl_pattern_set_scratch *scr)
{
    free(scr);
}

size_t sl_pattern_set_match(const sl_pattern_set *ps, const sl_evview *ev,
                            sl_pattern_set_scratch *scr, uint32_t *out)
{
    (void)scr;
    size_t k = 0;
    for (size_t i = 0; i < ps->n; i++)
        if (!ps->pats[i] || sl_pattern_match_event(ps->pats[i], ev))
            out[k++] = (uint32_t)i;
    return k;
}
