/*
 * tests/unit/test_evview.c — the parsed event view (rules/evview.h): the
 * value of a number (sl_evview_num) is strtod's, bit for bit, whichever
 * path computes it (integers, the exact decimal fast path, strtod), for
 * random JSON numbers and for the malformed tokens an unvalidated parse
 * lets through.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "rules/evview.h"

static uint64_t rng = 88172645463325252ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

/* Parses {"n":tok} (validated or not) and compares the number with strtod
 * of the token; returns 1 on a difference (printed). */
static int check_token(const char *tok, bool validate)
{
    char ev[256];
    int n = snprintf(ev, sizeof ev, "{\"n\":%s}", tok);
    sl_evview v;
    sl_evview_init(&v);
    sl_error err = {0};
    int bad = 0;
    if (sl_evview_parse(&v, ev, (size_t)n, validate, &err) == 0 && v.n == 2 &&
        v.v[1].type == SL_JSON_NUMBER) {
        double got = sl_evview_num(&v.v[1]);
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%.*s", (int)v.v[1].len, v.v[1].s);
        double want = strtod(tmp, NULL);
        if (memcmp(&got, &want, sizeof got) != 0) {
            fprintf(stderr, "%s: sl_evview_num %.17g, strtod %.17g\n", tok, got, want);
            bad = 1;
        }
    } else if (validate) {
        fprintf(stderr, "%s: not parsed: %s\n", tok, err.msg);
        bad = 1;
    }
    sl_evview_free(&v);
    return bad;
}

static void test_numbers_are_strtod(void **state)
{
    (void)state;
    static const char *const fixed[] = {"0",
                                        "-0",
                                        "0.0",
                                        "-0.0",
                                        "149.9",
                                        "42.5",
                                        "0.1",
                                        "0.3",
                                        "1e22",
                                        "1e23",
                                        "9007199254740993",
                                        "9007199254740992.5",
                                        "1.5e-22",
                                        "1.5e-23",
                                        "5e9",
                                        "-5e9",
                                        "5000000000.000001",
                                        "123456789012345678",
                                        "1234567890123456789",
                                        "12345678901234567890",
                                        "1e-400",
                                        "1e400",
                                        "3.0e2",
                                        "1E3",
                                        "0.000001",
                                        "2.2250738585072014e-308",
                                        "1.7976931348623157e308",
                                        "1e+2",
                                        "1e-0"};
    int failures = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        failures += check_token(fixed[i], true);
    /* Random JSON numbers: 1-22 digits, a fraction, an exponent. */
    for (int i = 0; i < 200000; i++) {
        char tok[96];
        size_t n = 0;
        if (rnd(2))
            tok[n++] = '-';
        uint32_t di = 1 + rnd(12);
        tok[n++] = (char)(di == 1 ? '0' + rnd(10) : '1' + rnd(9));
        for (uint32_t k = 1; k < di; k++)
            tok[n++] = (char)('0' + rnd(10));
        if (rnd(3)) {
            tok[n++] = '.';
            for (uint32_t k = 0, f = 1 + rnd(12); k < f; k++)
                tok[n++] = (char)('0' + rnd(10));
        }
        if (rnd(3) == 0)
            n += (size_t)snprintf(tok + n, sizeof tok - n, "%s%s%u", rnd(2) ? "e" : "E",
                                  (const char *[]){"", "+", "-"}[rnd(3)], rnd(40));
        tok[n] = '\0';
        failures += check_token(tok, true);
        if (failures > 5)
            break;
    }
    /* What an unvalidated parse takes for a number: any run of -+.eE and
     * digits; strtod reads what it can of it, and so must the view. */
    static const char *const odd[] = {"1.",   ".5",     "1e",    "--1", "1.2.3", "+1",   "1e+",
                                      "01.5", "-",      "1e5e5", "1-2", "-.5",   "1.5E", "00",
                                      "1e-",  "9e9999", "1.e5",  "0e",  "-e5",   "..."};
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
        failures += check_token(odd[i], false);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers_are_strtod),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
