/*
 * tests/fuzz/fuzz_pattern_set.c — the combined matcher (rules/pattern_set.h)
 * against one-by-one matching (sl_pattern_match_event). Input: pattern
 * lines up to the first empty line (at most 64; a line that does not compile
 * is left out, the line `null` is a NULL pattern, which matches every
 * event), then one event per line. For every event that parses (validated,
 * as ingest does, and again unvalidated, as the rule runner does), the set's
 * answer must be exactly, and in order, the patterns that match one by one.
 * The same set is also matched with a scratch made for a bigger set (the
 * header allows it), and with the set rebuilt from the patterns in reverse
 * order (the anchors chosen do not depend on order: same answers, mapped).
 */
#include "rules/pattern_set.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PATTERNS 64

static void check(const sl_pattern_set *ps, const sl_pattern_set *rev, sl_pattern_set_scratch *scr,
                  sl_pattern_set_scratch *big, sl_pattern *const *pats, size_t n,
                  const sl_evview *ev)
{
    uint32_t got[MAX_PATTERNS], again[MAX_PATTERNS], back[MAX_PATTERNS];
    size_t k = sl_pattern_set_match(ps, ev, scr, got);
    size_t k2 = sl_pattern_set_match(ps, ev, big, again);
    size_t k3 = sl_pattern_set_match(rev, ev, scr, back);
    FZ_CHECK(k <= n && k == k2 && k == k3, "set answers %zu, %zu with another scratch, %zu reversed",
             k, k2, k3);
    FZ_CHECK(memcmp(got, again, k * sizeof *got) == 0, "the scratch changed the answer");
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        bool want = !pats[i] || sl_pattern_match_event(pats[i], ev);
        bool has = j < k && got[j] == i;
        FZ_CHECK(want == has, "pattern %zu: set says %d, one by one %d", i, has, want);
        j += has;
        /* The reversed set numbers pattern i as n - 1 - i: descending here. */
        if (want)
            FZ_CHECK(back[k - j] == n - 1 - i, "reversed set: pattern %zu missing", i);
    }
    FZ_CHECK(j == k, "set answers %zu patterns, %zu match", k, j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *line;
    size_t len;
    sl_pattern *pats[MAX_PATTERNS], *rpats[MAX_PATTERNS];
    size_t n = 0;
    while (fz_line(&p, end, &line, &len) && len > 0) {
        if (n == MAX_PATTERNS)
            continue;
        if (len == 4 && memcmp(line, "null", 4) == 0) {
            pats[n++] = NULL;
            continue;
        }
        char *txt = fz_dup(line, len, false);
        sl_pattern *pt = NULL;
        if (sl_pattern_compile(txt, len, &pt, NULL) == 0)
            pats[n++] = pt;
        free(txt);
    }
    for (size_t i = 0; i < n; i++)
        rpats[i] = pats[n - 1 - i];
    sl_pattern_set *ps = NULL, *rev = NULL, *wide = NULL;
    sl_error err = {0};
    int rc = sl_pattern_set_build((const sl_pattern *const *)pats, n, &ps, &err);
    FZ_CHECK(rc == 0, "build: %d %s", rc, err.msg);
    rc = sl_pattern_set_build((const sl_pattern *const *)rpats, n, &rev, &err);
    FZ_CHECK(rc == 0, "build reversed: %d %s", rc, err.msg);
    /* A scratch made for a bigger set (more patterns, other paths). */
    sl_pattern *twice[2 * MAX_PATTERNS];
    for (size_t i = 0; i < 2 * n; i++)
        twice[i] = pats[i % (n ? n : 1)];
    rc = sl_pattern_set_build((const sl_pattern *const *)twice, 2 * n, &wide, &err);
    FZ_CHECK(rc == 0, "build doubled: %d %s", rc, err.msg);
    FZ_CHECK(sl_pattern_set_count(ps) == n, "count");
    sl_pattern_set_scratch *scr = sl_pattern_set_scratch_new(rev);
    sl_pattern_set_scratch *big = sl_pattern_set_scratch_new(wide);
    FZ_CHECK(scr && big, "scratch: out of memory");
    static sl_evview ev;
    static bool init;
    if (!init) {
        sl_evview_init(&ev);
        init = true;
    }
    while (fz_line(&p, end, &line, &len)) {
        char *txt = fz_dup(line, len, false);
        if (sl_evview_parse(&ev, txt, len, true, &err) == 0)
            check(ps, rev, scr, big, pats, n, &ev);
        if (sl_evview_parse(&ev, txt, len, false, &err) == 0)
            check(ps, rev, scr, big, pats, n, &ev);
        free(txt);
    }
    sl_pattern_set_scratch_free(scr);
    sl_pattern_set_scratch_free(big);
    sl_pattern_set_free(ps);
    sl_pattern_set_free(rev);
    sl_pattern_set_free(wide);
    for (size_t i = 0; i < n; i++)
        sl_pattern_free(pats[i]);
    return 0;
}
