/*
 * tests/unit/test_base64.c — base64 (core/base/base64.c): RFC 4648's test
 * vectors both ways, the URL-safe alphabet without padding, quoted appends, the
 * strict decoder's refusals (length, characters, padding) and the lenient one
 * that passes over what it does not know, and no reads past the input.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/base/base64.h"
#include "core/base/err.h"

/* RFC 4648 §10. */
static const char *const k_plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
static const char *const k_coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};

static void encode_rfc4648(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_plain / sizeof *k_plain; i++) {
        char out[16];
        size_t n = strlen(k_plain[i]);
        assert_int_equal(sl_base64_encoded_len(n, 0), strlen(k_coded[i]));
        size_t w = sl_base64_encode(out, k_plain[i], n, 0);
        assert_int_equal(w, strlen(k_coded[i]));
        assert_memory_equal(out, k_coded[i], w);
    }
}

static void decode_rfc4648(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_plain / sizeof *k_plain; i++) {
        unsigned char out[16];
        size_t n = strlen(k_coded[i]), got = 99, len = 99;
        assert_int_equal(sl_base64_decoded_len(k_coded[i], n, &len), 0);
        assert_int_equal(len, strlen(k_plain[i]));
        assert_int_equal(sl_base64_decode(k_coded[i], n, 0, out, &got, NULL), 0);
        assert_int_equal(got, strlen(k_plain[i]));
        assert_memory_equal(out, k_plain[i], got);
    }
}

static void url_nopad(void **state)
{
    (void)state;
    const unsigned char in[] = {0xfb, 0xff, 0xbf, 0xfe};
    char out[16];
    assert_int_equal(sl_base64_encoded_len(4, SL_BASE64_NOPAD), 6);
    size_t n = sl_base64_encode(out, in, 4, SL_BASE64_URL | SL_BASE64_NOPAD);
    assert_int_equal(n, 6);
    assert_memory_equal(out, "-_-__g", 6);
    n = sl_base64_encode(out, in, 4, 0);
    assert_int_equal(n, 8);
    assert_memory_equal(out, "+/+//g==", 8);
    /* 32 bytes (an API token's randomness) are 43 characters. */
    unsigned char r[32] = {0};
    assert_int_equal(sl_base64_encoded_len(32, SL_BASE64_NOPAD), 43);
    char tok[64];
    assert_int_equal(sl_base64_encode(tok, r, 32, SL_BASE64_URL | SL_BASE64_NOPAD), 43);
    for (size_t i = 0; i < 43; i++)
        assert_int_equal(tok[i], 'A');
}

static void append_quoted(void **state)
{
    (void)state;
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_buf_append(&b, "x", 1), 0);
    assert_int_equal(sl_base64_append(&b, "foob", 4, SL_BASE64_QUOTED), 0);
    assert_int_equal(sl_base64_append(&b, "fo", 2, 0), 0);
    assert_int_equal(sl_base64_append(&b, "", 0, SL_BASE64_QUOTED), 0);
    assert_int_equal(b.len, strlen("x\"Zm9vYg==\"Zm8=\"\""));
    assert_memory_equal(b.data, "x\"Zm9vYg==\"Zm8=\"\"", b.len);
    sl_buf_free(&b);
}

static void strict_refusals(void **state)
{
    (void)state;
    unsigned char out[16];
    size_t got, bad, len;
    /* Padding is optional, but when present it completes a group of four. */
    assert_int_equal(sl_base64_decode("Zg", 2, 0, out, &got, NULL), 0);
    assert_int_equal(got, 1);
    assert_int_equal(sl_base64_decode("Zm8", 3, 0, out, &got, NULL), 0);
    assert_int_equal(got, 2);
    assert_int_equal(sl_base64_decoded_len("Zg=", 3, &len), SL_EINVAL);
    assert_int_equal(sl_base64_decode("Zg=", 3, 0, out, &got, &bad), SL_EINVAL);
    assert_int_equal(bad, 3);
    /* One character alone carries no byte. */
    assert_int_equal(sl_base64_decoded_len("Zm9vY", 5, &len), SL_EINVAL);
    assert_int_equal(sl_base64_decode("Zm9vY", 5, 0, out, &got, &bad), SL_EINVAL);
    assert_int_equal(bad, 5);
    /* Characters outside the alphabet, padding in the middle, URL-safe ones. */
    assert_int_equal(sl_base64_decode("Zm9*", 4, 0, out, &got, &bad), SL_EINVAL);
    assert_int_equal(bad, 3);
    assert_int_equal(sl_base64_decode("Zg==Zg==", 8, 0, out, &got, &bad), SL_EINVAL);
    assert_int_equal(bad, 2);
    assert_int_equal(sl_base64_decode("Zm-_", 4, 0, out, &got, &bad), SL_EINVAL);
    assert_int_equal(bad, 2);
    assert_int_equal(sl_base64_decode("Zm 9v", 5, 0, out, &got, &bad), SL_EINVAL);
    /* Three '=' are one too many: the third is a bad character. */
    assert_int_equal(sl_base64_decode("Zm9vY===", 8, 0, out, &got, &bad), SL_EINVAL);
    assert_int_equal(sl_base64_value('='), -1);
    assert_int_equal(sl_base64_value('+'), 62);
    assert_int_equal(sl_base64_value('/'), 63);
    assert_int_equal(sl_base64_value('-'), -1);
}

static void lenient_skips(void **state)
{
    (void)state;
    unsigned char out[16];
    size_t got = 0;
    assert_int_equal(
        sl_base64_decode("Zm9v\nYmFy==", 11, SL_BASE64_SKIP_INVALID, out, &got, NULL), 0);
    assert_int_equal(got, 6);
    assert_memory_equal(out, "foobar", 6);
    assert_int_equal(sl_base64_decode("Zg=", 3, SL_BASE64_SKIP_INVALID, out, &got, NULL), 0);
    assert_int_equal(got, 1);
    assert_int_equal(out[0], 'f');
}

/* Every length 0..300 round-trips through all bytes values, and the last
 * input byte sits right before a PROT_NONE page. */
static void round_trip_guarded(void **state)
{
    (void)state;
    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *map = mmap(NULL, (size_t)pg * 4, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + pg * 2, (size_t)pg, PROT_NONE), 0);
    unsigned char *end = map + pg * 2;
    for (size_t n = 0; n <= 300; n++) {
        unsigned char *in = end - n;
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)(i * 37 + n);
        sl_buf b = SL_BUF_INIT;
        assert_int_equal(sl_base64_append(&b, in, n, 0), 0);
        assert_int_equal(b.len, sl_base64_encoded_len(n, 0));
        char *text = (char *)end - b.len;
        if (b.len)
            memcpy(text, b.data, b.len);
        unsigned char out[512];
        size_t got = 0;
        assert_int_equal(sl_base64_decode(text, b.len, 0, out, &got, NULL), 0);
        assert_int_equal(got, n);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(out[i], (unsigned char)(i * 37 + n));
        sl_buf_free(&b);
    }
    munmap(map, (size_t)pg * 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encode_rfc4648), cmocka_unit_test(decode_rfc4648),
        cmocka_unit_test(url_nopad),      cmocka_unit_test(append_quoted),
        cmocka_unit_test(strict_refusals), cmocka_unit_test(lenient_skips),
        cmocka_unit_test(round_trip_guarded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
