/*
 * tests/unit/test_crc32c.c — CRC-32C: known vectors, the hardware path against
 * the portable one for every length and alignment, chaining, and no reads
 * past the end of the buffer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/base/crc32c.h"

/* A fixed-seed generator, so a failure reproduces. */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng() >> 56);
}

/* Bit-at-a-time reference straight from the definition, sharing no code or
 * tables with the library. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int i = 0; i < 8; i++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

static void check_vector(const void *buf, size_t len, uint32_t want)
{
    assert_int_equal(sl_crc32c(0, buf, len), want);
    assert_int_equal(sl_crc32c_sw(0, buf, len), want);
    assert_int_equal(crc_bitwise(0, buf, len), want);
}

static void test_known_vectors(void **state)
{
    (void)state;
    uint8_t buf[32];

    check_vector("123456789", 9, 0xE3069283);
    check_vector("", 0, 0);
    assert_int_equal(sl_crc32c(0, NULL, 0), 0);

    memset(buf, 0, sizeof buf);
    check_vector(buf, sizeof buf, 0x8A9136AA);
    memset(buf, 0xFF, sizeof buf);
    check_vector(buf, sizeof buf, 0x62A8AB43);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    check_vector(buf, sizeof buf, 0x46DD794E);
}

static void test_sw_matches_bitwise(void **state)
{
    (void)state;
    enum { MAX = 1100 };
    uint8_t *buf = malloc(MAX + 16);
    assert_non_null(buf);
    fill_random(buf, MAX + 16);

    for (size_t align = 0; align < 16; align += 3)
        for (size_t len = 0; len <= MAX; len++) {
            uint32_t seed = (uint32_t)rng();
            assert_int_equal(sl_crc32c_sw(seed, buf + align, len),
                             crc_bitwise(seed, buf + align, len));
        }
    free(buf);
}

static void test_hw_matches_sw_every_length(void **state)
{
    (void)state;
    enum { MAX = 4096 };
    if (!sl_crc32c_hw_available())
        printf("note: no SSE4.2 here, sl_crc32c() is the portable path\n");

    uint8_t *buf = malloc(MAX + 16);
    assert_non_null(buf);
    fill_random(buf, MAX + 16);

    for (size_t align = 0; align < 16; align++)
        for (size_t len = 0; len <= MAX; len++) {
            const uint8_t *p = buf + align;
            uint32_t want = sl_crc32c_sw(0, p, len);
            if (sl_crc32c(0, p, len) != want)
                fail_msg("align %zu len %zu: hw %08x sw %08x", align, len, sl_crc32c(0, p, len),
                         want);
            uint32_t seed = (uint32_t)rng();
            assert_int_equal(sl_crc32c(seed, p, len), sl_crc32c_sw(seed, p, len));
        }
    free(buf);
}

/* Lengths around the points where the hardware path changes strategy (several
 * multiples of 768 and 24 KiB, ± a few bytes) and scattered lengths between. */
static void test_hw_matches_sw_medium(void **state)
{
    (void)state;
    enum { MAX = 3 * 3 * 8192 + 64 };
    uint8_t *buf = malloc(MAX + 16);
    assert_non_null(buf);
    fill_random(buf, MAX + 16);

    static const size_t marks[] = {768, 1536, 24576, 25344, 49152, 73728};
    for (size_t m = 0; m < sizeof marks / sizeof marks[0]; m++)
        for (size_t len = marks[m] - 17; len <= marks[m] + 17; len++)
            for (size_t align = 0; align < 16; align++)
                assert_int_equal(sl_crc32c(0, buf + align, len), sl_crc32c_sw(0, buf + align, len));
    for (size_t len = 4097; len <= MAX; len += 97) {
        size_t align = len % 16;
        assert_int_equal(sl_crc32c(0, buf + align, len), sl_crc32c_sw(0, buf + align, len));
    }
    free(buf);
}

static void test_hw_matches_sw_large(void **state)
{
    (void)state;
    static const size_t lens[] = {1u << 20, (4u << 20) + 3, (8u << 20) - 1, 5u << 20};
    uint8_t *buf = malloc((8u << 20) + 16);
    assert_non_null(buf);
    fill_random(buf, (8u << 20) + 16);

    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t align = (i * 5) % 16;
        assert_int_equal(sl_crc32c(0, buf + align, lens[i]), sl_crc32c_sw(0, buf + align, lens[i]));
    }
    /* One independent check that the shared tables are right at this size too. */
    assert_int_equal(sl_crc32c(0, buf + 1, 1u << 20), crc_bitwise(0, buf + 1, 1u << 20));
    free(buf);
}

static void test_chaining(void **state)
{
    (void)state;
    enum { MAX = 100000 };
    uint8_t *buf = malloc(MAX);
    assert_non_null(buf);
    fill_random(buf, MAX);

    uint32_t whole_hw = sl_crc32c(0, buf, MAX);
    uint32_t whole_sw = sl_crc32c_sw(0, buf, MAX);
    assert_int_equal(whole_hw, whole_sw);

    /* Two pieces, split anywhere. */
    for (int i = 0; i < 200; i++) {
        size_t n = (size_t)(rng() % (MAX + 1));
        assert_int_equal(sl_crc32c(sl_crc32c(0, buf, n), buf + n, MAX - n), whole_hw);
        assert_int_equal(sl_crc32c_sw(sl_crc32c_sw(0, buf, n), buf + n, MAX - n), whole_sw);
        /* Mixing the two paths chains too. */
        assert_int_equal(sl_crc32c_sw(sl_crc32c(0, buf, n), buf + n, MAX - n), whole_sw);
    }
    /* Many small pieces, including empty ones. */
    uint32_t crc = 0;
    for (size_t off = 0; off < MAX;) {
        size_t n = (size_t)(rng() % 300);
        if (n > MAX - off)
            n = MAX - off;
        crc = sl_crc32c(crc, buf + off, n);
        off += n;
    }
    assert_int_equal(crc, whole_hw);
    free(buf);
}

/* Buffers that end exactly at a PROT_NONE page: reading one byte too many
 * crashes the test instead of passing silently. */
static void test_no_overread(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = 16 * page;
    uint8_t *map =
        mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + span, page, PROT_NONE), 0);
    uint8_t *guard = map + span;
    fill_random(map, span);

    for (size_t len = 0; len <= 1024; len++)
        assert_int_equal(sl_crc32c(0, guard - len, len), sl_crc32c_sw(0, guard - len, len));
    for (size_t len = span - 100; len <= span; len++)
        assert_int_equal(sl_crc32c(0, guard - len, len), sl_crc32c_sw(0, guard - len, len));
    assert_int_equal(munmap(map, span + page), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vectors),
        cmocka_unit_test(test_sw_matches_bitwise),
        cmocka_unit_test(test_hw_matches_sw_every_length),
        cmocka_unit_test(test_hw_matches_sw_medium),
        cmocka_unit_test(test_hw_matches_sw_large),
        cmocka_unit_test(test_chaining),
        cmocka_unit_test(test_no_overread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
