/*
 * tests/unit/test_varint.c — zig-zag varints and big-endian helpers: round
 * trips of edge values, exact encodings, truncated and overlong input, and
 * no reads at or past the end (inputs placed before a PROT_NONE page).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/base/varint.h"

/* Sentinel that no decode in these tests produces by accident. */
#define UNTOUCHED ((int64_t)0x5A5A5A5A5A5A5A5A)

/* Edge values: 0, ±1, the 32- and 64-bit limits, and ±2^i, ±2^i ± 1. */
static size_t edge_values(int64_t *out)
{
    size_t n = 0;
    out[n++] = 0;
    out[n++] = 1;
    out[n++] = -1;
    out[n++] = INT32_MIN;
    out[n++] = INT32_MAX;
    out[n++] = (int64_t)INT32_MIN - 1;
    out[n++] = (int64_t)INT32_MAX + 1;
    out[n++] = INT64_MIN;
    out[n++] = INT64_MAX;
    out[n++] = INT64_MIN + 1;
    out[n++] = INT64_MAX - 1;
    for (int i = 1; i < 63; i++) {
        int64_t p = (int64_t)1 << i;
        out[n++] = p;
        out[n++] = p - 1;
        out[n++] = p + 1;
        out[n++] = -p;
        out[n++] = -p - 1;
        out[n++] = -p + 1;
    }
    return n;
}

static void test_round_trip(void **state)
{
    (void)state;
    int64_t vals[16 + 6 * 63];
    size_t nvals = edge_values(vals);

    for (size_t i = 0; i < nvals; i++) {
        uint8_t buf[SL_VARINT_MAX + 4];
        memset(buf, 0xEE, sizeof buf);
        size_t n = sl_varint_put(buf, vals[i]);
        assert_in_range(n, 1, SL_VARINT_MAX);
        assert_int_equal(n, sl_varint_size(vals[i]));
        assert_int_equal(buf[n], 0xEE); /* wrote nothing past what it reported */

        int64_t got = UNTOUCHED;
        assert_int_equal(sl_varint_get(buf, buf + n, &got), n);
        assert_true(got == vals[i]);
        /* Extra bytes after the varint are not consumed. */
        assert_int_equal(sl_varint_get(buf, buf + sizeof buf, &got), n);
        assert_true(got == vals[i]);
    }
}

static void test_sizes(void **state)
{
    (void)state;
    assert_int_equal(sl_varint_size(0), 1);
    assert_int_equal(sl_varint_size(-64), 1);
    assert_int_equal(sl_varint_size(63), 1);
    assert_int_equal(sl_varint_size(64), 2);
    assert_int_equal(sl_varint_size(-65), 2);
    assert_int_equal(sl_varint_size(INT32_MAX), 5);
    assert_int_equal(sl_varint_size(INT32_MIN), 5);
    assert_int_equal(sl_varint_size(INT64_MAX), 10);
    assert_int_equal(sl_varint_size(INT64_MIN), 10);
    /* Every size from 1 to 10 is reached exactly at zig-zag value 2^(7k). */
    for (int k = 1; k < 10; k++) {
        int64_t v = (int64_t)((uint64_t)1 << (7 * k - 1)); /* zig-zag 2^(7k) */
        assert_int_equal(sl_varint_size(v - 1), k);
        assert_int_equal(sl_varint_size(v), k + 1);
    }
}

static void test_exact_encodings(void **state)
{
    (void)state;
    static const struct {
        int64_t v;
        size_t n;
        uint8_t bytes[SL_VARINT_MAX];
    } cases[] = {
        {0, 1, {0x00}},
        {-1, 1, {0x01}},
        {1, 1, {0x02}},
        {-2, 1, {0x03}},
        {63, 1, {0x7E}},
        {-64, 1, {0x7F}},
        {64, 2, {0x80, 0x01}},
        {-65, 2, {0x81, 0x01}},
        {300, 2, {0xD8, 0x04}},
        {INT64_MAX, 10, {0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}},
        {INT64_MIN, 10, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t buf[SL_VARINT_MAX];
        assert_int_equal(sl_varint_put(buf, cases[i].v), cases[i].n);
        assert_memory_equal(buf, cases[i].bytes, cases[i].n);
        int64_t got = UNTOUCHED;
        assert_int_equal(sl_varint_get(cases[i].bytes, cases[i].bytes + cases[i].n, &got),
                         cases[i].n);
        assert_true(got == cases[i].v);
    }
}

static void test_truncated(void **state)
{
    (void)state;
    static const uint8_t cont[SL_VARINT_MAX] = {0x80, 0xFF, 0x80, 0xFF, 0x80,
                                                0xFF, 0x80, 0xFF, 0x80, 0xFF};
    int64_t got = UNTOUCHED;

    assert_int_equal(sl_varint_get(cont, cont, &got), 0); /* empty input */
    for (size_t n = 1; n <= SL_VARINT_MAX; n++)
        assert_int_equal(sl_varint_get(cont, cont + n, &got), 0);
    assert_true(got == UNTOUCHED);

    /* Every proper prefix of a real encoding is truncated. */
    uint8_t buf[SL_VARINT_MAX];
    size_t n = sl_varint_put(buf, INT64_MIN);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(sl_varint_get(buf, buf + k, &got), 0);
    assert_true(got == UNTOUCHED);
}

static void test_too_long(void **state)
{
    (void)state;
    /* Eleven bytes: ten with the continuation bit, then a terminator. */
    uint8_t buf[SL_VARINT_MAX + 1];
    memset(buf, 0x80, SL_VARINT_MAX);
    buf[SL_VARINT_MAX] = 0x00;
    int64_t got = UNTOUCHED;
    assert_int_equal(sl_varint_get(buf, buf + sizeof buf, &got), 0);
    assert_true(got == UNTOUCHED);

    /* Ten bytes that terminate are fine, even if not minimal. */
    buf[SL_VARINT_MAX - 1] = 0x00;
    assert_int_equal(sl_varint_get(buf, buf + sizeof buf, &got), SL_VARINT_MAX);
    assert_true(got == 0);
}

/* Maps two pages and makes the second PROT_NONE, so bytes placed at the end of
 * the first one sit right before a page that crashes on any read. */
static uint8_t *guard_map(size_t *page_out)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, page, PROT_NONE), 0);
    *page_out = page;
    return map;
}

static void test_guard_page(void **state)
{
    (void)state;
    size_t page;
    uint8_t *map = guard_map(&page);
    uint8_t *guard = map + page;
    int64_t vals[16 + 6 * 63];
    size_t nvals = edge_values(vals);

    for (size_t i = 0; i < nvals; i++) {
        uint8_t enc[SL_VARINT_MAX];
        size_t n = sl_varint_put(enc, vals[i]);

        /* Complete varint ending at the guard. */
        memcpy(guard - n, enc, n);
        int64_t got = UNTOUCHED;
        assert_int_equal(sl_varint_get(guard - n, guard, &got), n);
        assert_true(got == vals[i]);

        /* Every truncation of it ending at the guard: the reader must stop. */
        for (size_t k = 0; k < n; k++) {
            memcpy(guard - k, enc, k);
            got = UNTOUCHED;
            assert_int_equal(sl_varint_get(guard - k, guard, &got), 0);
            assert_true(got == UNTOUCHED);
        }
    }

    /* Continuation bytes right up to the guard, for every length up to 11. */
    for (size_t k = 0; k <= SL_VARINT_MAX + 1; k++) {
        int64_t got = UNTOUCHED;
        memset(guard - k, 0xFF, k);
        assert_int_equal(sl_varint_get(guard - k, guard, &got), 0);
        assert_true(got == UNTOUCHED);
    }

    /* The big-endian readers stay inside their width too. */
    sl_be64_put(guard - 8, 0x0102030405060708u);
    assert_true(sl_be64_get(guard - 8) == 0x0102030405060708u);
    sl_be32_put(guard - 4, 0xA1B2C3D4u);
    assert_int_equal(sl_be32_get(guard - 4), 0xA1B2C3D4u);
    sl_be16_put(guard - 2, 0xBEEF);
    assert_int_equal(sl_be16_get(guard - 2), 0xBEEF);

    assert_int_equal(munmap(map, 2 * page), 0);
}

static void test_big_endian(void **state)
{
    (void)state;
    uint8_t buf[8];

    sl_be16_put(buf, 0x1234);
    assert_memory_equal(buf, "\x12\x34", 2);
    assert_int_equal(sl_be16_get(buf), 0x1234);

    sl_be32_put(buf, 0x89ABCDEFu);
    assert_memory_equal(buf, "\x89\xAB\xCD\xEF", 4);
    assert_int_equal(sl_be32_get(buf), 0x89ABCDEFu);

    sl_be64_put(buf, 0xFEDCBA9876543210u);
    assert_memory_equal(buf, "\xFE\xDC\xBA\x98\x76\x54\x32\x10", 8);
    assert_true(sl_be64_get(buf) == 0xFEDCBA9876543210u);

    sl_be16_put(buf, UINT16_MAX);
    assert_int_equal(sl_be16_get(buf), UINT16_MAX);
    sl_be32_put(buf, UINT32_MAX);
    assert_int_equal(sl_be32_get(buf), UINT32_MAX);
    sl_be64_put(buf, UINT64_MAX);
    assert_true(sl_be64_get(buf) == UINT64_MAX);
    sl_be64_put(buf, 0);
    assert_true(sl_be64_get(buf) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_exact_encodings), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_too_long),        cmocka_unit_test(test_guard_page),
        cmocka_unit_test(test_big_endian),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
