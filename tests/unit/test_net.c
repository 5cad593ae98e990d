/*
 * tests/unit/test_net.c — network address facts (core/base/net.h): which
 * listen and connect hosts are loopback only (IPv4 127/8, ::1 bare or in
 * brackets, "localhost") and which are not (wildcards, LAN addresses,
 * v4-mapped, names, empty, NULL).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/base/net.h"

static void test_loopback(void **state)
{
    (void)state;
    assert_true(sl_net_host_loopback("127.0.0.1"));
    assert_true(sl_net_host_loopback("127.1.2.3"));
    assert_true(sl_net_host_loopback("::1"));
    assert_true(sl_net_host_loopback("[::1]"));
    assert_true(sl_net_host_loopback("localhost"));
    assert_false(sl_net_host_loopback("0.0.0.0"));
    assert_false(sl_net_host_loopback("::"));
    assert_false(sl_net_host_loopback("[::]"));
    assert_false(sl_net_host_loopback("10.0.0.1"));
    assert_false(sl_net_host_loopback("128.0.0.1"));
    assert_false(sl_net_host_loopback("::ffff:127.0.0.1")); /* v4-mapped: not ::1; refuse */
    assert_false(sl_net_host_loopback("example.com"));
    assert_false(sl_net_host_loopback(""));
    assert_false(sl_net_host_loopback(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
