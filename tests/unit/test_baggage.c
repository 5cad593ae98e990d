/*
 * tests/unit/test_baggage.c — W3C Baggage member lookup (core/bus/baggage.h).
 */
#include "testutil.h"

#include "core/bus/baggage.h"

#include <string.h>

/* Looks key up in h; returns the code, the value in out. */
static int get(const char *h, const char *key, char *out, size_t cap, sl_error *err)
{
    size_t n = 0;
    int rc = sl_baggage_get(h, strlen(h), key, out, cap, &n, err);
    if (rc == 0)
        assert_int_equal(n, strlen(out));
    return rc;
}

static void test_members(void **state)
{
    (void)state;
    char v[64];
    sl_error err = {0};
    assert_int_equal(get("lane=feature-x", "lane", v, sizeof v, &err), 0);
    assert_string_equal(v, "feature-x");
    /* OWS around members and '=', properties, empty members, other keys */
    assert_int_equal(
        get(" userId=alice , ,lane = qa-1 ;ttl=30;flag , x=y", "lane", v, sizeof v, &err), 0);
    assert_string_equal(v, "qa-1");
    assert_int_equal(get("userId=alice,serverNode=DF%2028", "serverNode", v, sizeof v, &err), 0);
    assert_string_equal(v, "DF 28");
    assert_int_equal(get("k=%E2%82%AC", "k", v, sizeof v, &err), 0);
    assert_string_equal(v, "\xe2\x82\xac");
    /* the first of two wins; an empty value is a value */
    assert_int_equal(get("lane=a,lane=b", "lane", v, sizeof v, &err), 0);
    assert_string_equal(v, "a");
    assert_int_equal(get("lane=", "lane", v, sizeof v, &err), 0);
    assert_string_equal(v, "");
    /* keys are exact: case and prefixes count */
    assert_int_equal(get("Lane=a,lanes=b", "lane", v, sizeof v, &err), SL_ENOENT);
    assert_int_equal(get("", "lane", v, sizeof v, &err), SL_ENOENT);
}

static void test_malformed(void **state)
{
    (void)state;
    char v[64];
    const char *bad[] = {
        "lane",              /* no '=' */
        "=x",                /* no key */
        "la ne=x",           /* space in the key */
        "lane=a b",          /* space in the value */
        "lane=\"a\"",        /* quotes are not baggage-octets */
        "lane=x,other=a\\b", /* a bad member anywhere refuses the header */
        "lane=%zz",          /* bad percent-encoding */
        "lane=%4",           /* cut percent-encoding */
        "lane=%ff%fe",       /* not UTF-8 once decoded */
        "lane=x;p=\x01",     /* a control in a property */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sl_error err = {0};
        if (get(bad[i], "lane", v, sizeof v, &err) != SL_EINVAL)
            fail_msg("accepted: %s", bad[i]);
        assert_true(err.msg[0] != '\0');
    }
    /* too long for out */
    sl_error err = {0};
    assert_int_equal(get("lane=abcdefgh", "lane", v, 8, &err), SL_ETOOBIG);
    assert_int_equal(get("lane=abcdefg", "lane", v, 8, &err), 0);
    /* the limits */
    char big[SL_BAGGAGE_MAX_BYTES + 16];
    memset(big, 'a', sizeof big - 1);
    memcpy(big, "lane=x,k=", 9);
    big[sizeof big - 1] = '\0';
    assert_int_equal(get(big, "lane", v, sizeof v, &err), SL_EINVAL);
    char many[4096] = "";
    for (int i = 0; i < SL_BAGGAGE_MAX_MEMBERS + 1; i++)
        strcat(many, "a=1,");
    strcat(many, "lane=x");
    assert_int_equal(get(many, "lane", v, sizeof v, &err), SL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_members),
                                       cmocka_unit_test(test_malformed)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
