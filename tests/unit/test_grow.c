/*
 * tests/unit/test_grow.c — sl_grow() (core/base/buf.h), the one array
 * growth of sluice: the first size, doubling, content kept, new elements
 * zeroed, and a refused growth (size overflow) leaving array and capacity
 * as they were.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/base/buf.h"
#include "core/base/err.h"

#include <stdlib.h>

typedef struct pair {
    int64_t a;
    char b[12];
} pair;

static void test_grow_doubles_keeps_and_zeroes(void **state)
{
    (void)state;
    pair *v = NULL;
    size_t cap = 0, n = 0;
    for (int i = 0; i < 100; i++) {
        if (n == cap) {
            size_t was = cap;
            assert_int_equal(SL_GROW(v, cap, 4), 0);
            assert_int_equal(cap, was ? was * 2 : 4);
            for (size_t k = n; k < cap; k++) /* new elements are zeroed */
                assert_true(v[k].a == 0 && v[k].b[0] == 0 && v[k].b[11] == 0);
        }
        v[n++] = (pair){.a = i, .b = "x"};
    }
    assert_int_equal(cap, 128);
    for (int i = 0; i < 100; i++)
        assert_true(v[i].a == i && v[i].b[0] == 'x');
    free(v);
}

static void test_grow_refused_leaves_all(void **state)
{
    (void)state;
    char *v = NULL;
    size_t cap = 0;
    assert_int_equal(sl_grow(&v, &cap, 1, 8), 0);
    v[7] = 'z';
    char *before = v;
    /* an element so large that 16 of them overflow size_t */
    size_t big = SIZE_MAX / 8;
    assert_int_equal(sl_grow(&v, &cap, big, 8), SL_ENOMEM);
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 8);
    assert_int_equal(v[7], 'z');
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_doubles_keeps_and_zeroes),
        cmocka_unit_test(test_grow_refused_leaves_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
