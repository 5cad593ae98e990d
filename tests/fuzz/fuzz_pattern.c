/*
 * tests/fuzz/fuzz_pattern.c — the event-pattern compiler and matcher
 * (rules/pattern.h). The first line of the input is the pattern; every
 * further line is an event matched against it, both by the streaming
 * matcher (sl_pattern_match) and by the parse-once matcher
 * (sl_evview_parse with validation + sl_pattern_match_event). The
 * two must agree: on whether the event is acceptable JSON and, when it is,
 * on the match.
 */
#include "rules/pattern.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *line;
    size_t len;
    if (!fz_line(&p, end, &line, &len))
        return 0;
    char *pat = fz_dup(line, len, false);
    sl_pattern *pt = NULL;
    sl_error err = {0};
    int rc = sl_pattern_compile(pat, len, &pt, &err);
    FZ_CHECK(rc == 0 || rc == SL_EPARSE || rc == SL_EINVAL, "compile: %d", rc);
    free(pat);
    if (rc) {
        FZ_CHECK(pt == NULL && err.msg[0], "compile error without a message or with a pattern");
        return 0;
    }
    static sl_evview pev;
    static bool init;
    if (!init) {
        sl_evview_init(&pev);
        init = true;
    }
    while (fz_line(&p, end, &line, &len)) {
        char *ev = fz_dup(line, len, false);
        bool m1 = false, m2;
        int r1 = sl_pattern_match(pt, ev, len, &m1, &err);
        int r2 = sl_evview_parse(&pev, ev, len, true, &err);
        FZ_CHECK(r1 != SL_ENOMEM && r2 != SL_ENOMEM, "out of memory");
        FZ_CHECK((r1 == 0) == (r2 == 0), "streaming match says %d, parse says %d", r1, r2);
        if (r2 == 0) {
            m2 = sl_pattern_match_event(pt, &pev);
            FZ_CHECK(m1 == m2, "streaming match %d, parsed match %d", m1, m2);
        }
        /* Events sluice stored itself are parsed without validation: it
         * must refuse malformed text safely too. */
        sl_evview_parse(&pev, ev, len, false, &err);
        free(ev);
    }
    sl_pattern_free(pt);
    return 0;
}
