/*
 * tests/unit/test_auth.c — API keys (core/bus/auth.h) and the per-client rate
 * limiter (core/base/ratelimit.h): tokens and their hashes (against sha256 test
 * vectors), look-up of the right key and of none, rights per set with globs,
 * bearer headers (a guard page after each), the key table's refusals, and
 * token buckets driven by a fake clock.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "core/bus/auth.h"
#include "core/base/ratelimit.h"
#include "testutil.h"

/* A writable copy of a literal (the config structs hold char *). */
#define W(s) ((char[]){s})

/* SHA-256("abc") (FIPS 180-2, appendix B.1). */
#define ABC_SHA256 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static void test_hash_vector(void **state)
{
    (void)state;
    char hex[SL_AUTH_HEX_LEN + 1];
    sl_auth_hash_hex("abc", 3, hex);
    assert_string_equal(hex, ABC_SHA256);
    sl_auth_hash_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_new_token(void **state)
{
    (void)state;
    char a[SL_AUTH_TOKEN_LEN + 1], b[SL_AUTH_TOKEN_LEN + 1];
    assert_int_equal(sl_auth_new_token(a, NULL), 0);
    assert_int_equal(sl_auth_new_token(b, NULL), 0);
    assert_int_equal(strlen(a), SL_AUTH_TOKEN_LEN);
    assert_memory_equal(a, "sk_", 3);
    for (size_t i = 3; i < SL_AUTH_TOKEN_LEN; i++)
        assert_non_null(
            strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", a[i]));
    assert_string_not_equal(a, b); /* 2^-256 to fail by chance */
    /* 64 tokens: every base64url position varies (a constant would mean
     * bytes that are not random, e.g. a wrong offset). */
    char seen[SL_AUTH_TOKEN_LEN][64];
    for (int t = 0; t < 64; t++) {
        char tok[SL_AUTH_TOKEN_LEN + 1];
        assert_int_equal(sl_auth_new_token(tok, NULL), 0);
        for (size_t i = 0; i < SL_AUTH_TOKEN_LEN; i++)
            seen[i][t] = tok[i];
    }
    for (size_t i = 3; i < SL_AUTH_TOKEN_LEN; i++) {
        bool varies = false;
        for (int t = 1; t < 64; t++)
            varies |= seen[i][t] != seen[i][0];
        assert_true(varies);
    }
}

/* A table of three keys: ci (publish orders, audit.*; read orders), ops
 * (admin), prom (metrics). Tokens "tok-ci", "tok-ops", "tok-prom". */
static sl_auth *three_keys(void)
{
    static char h[3][SL_AUTH_HEX_LEN + 1];
    sl_auth_hash_hex("tok-ci", 6, h[0]);
    sl_auth_hash_hex("tok-ops", 7, h[1]);
    sl_auth_hash_hex("tok-prom", 8, h[2]);
    char *pub[] = {W("orders"), W("audit.*")}, *rd[] = {W("orders")};
    sl_auth_key_config c[3] = {
        {.name = W("ci"), .sha256 = h[0], .publish = pub, .npublish = 2, .read = rd, .nread = 1},
        {.name = W("ops"), .sha256 = h[1], .admin = true},
        {.name = W("prom"), .sha256 = h[2], .metrics = true},
    };
    sl_auth *a = NULL;
    sl_error err = {0};
    assert_int_equal(sl_auth_new(c, 3, &a, &err), 0);
    assert_int_equal(sl_auth_count(a), 3);
    return a;
}

static void test_find(void **state)
{
    (void)state;
    sl_auth *a = three_keys();
    const sl_auth_key *k = sl_auth_find(a, "tok-ci", 6);
    assert_non_null(k);
    assert_string_equal(sl_auth_key_name(k), "ci");
    assert_string_equal(sl_auth_key_name(sl_auth_find(a, "tok-prom", 8)), "prom");
    assert_null(sl_auth_find(a, "tok-c", 5));
    assert_null(sl_auth_find(a, "tok-ci ", 7));
    assert_null(sl_auth_find(a, "", 0));
    /* The hash itself is not a token. */
    char hex[SL_AUTH_HEX_LEN + 1];
    sl_auth_hash_hex("tok-ci", 6, hex);
    assert_null(sl_auth_find(a, hex, strlen(hex)));
    assert_null(sl_auth_find(NULL, "tok-ci", 6));
    sl_auth_free(a);
}

static void test_rights(void **state)
{
    (void)state;
    sl_auth *a = three_keys();
    const sl_auth_key *ci = sl_auth_find(a, "tok-ci", 6), *ops = sl_auth_find(a, "tok-ops", 7),
                      *prom = sl_auth_find(a, "tok-prom", 8);
    assert_true(sl_auth_allows(ci, SL_AUTH_PUBLISH, "orders"));
    assert_true(sl_auth_allows(ci, SL_AUTH_PUBLISH, "audit.eu"));
    assert_true(sl_auth_allows(ci, SL_AUTH_PUBLISH, "audit."));
    assert_false(sl_auth_allows(ci, SL_AUTH_PUBLISH, "audit"));
    assert_false(sl_auth_allows(ci, SL_AUTH_PUBLISH, "orders2"));
    assert_false(sl_auth_allows(ci, SL_AUTH_PUBLISH, "xorders"));
    assert_true(sl_auth_allows(ci, SL_AUTH_READ, "orders"));
    assert_false(sl_auth_allows(ci, SL_AUTH_READ, "audit.eu"));
    assert_false(sl_auth_allows(ci, SL_AUTH_PUBLISH, NULL));
    assert_true(sl_auth_allows(ci, SL_AUTH_READ_SOME, NULL));
    assert_false(sl_auth_allows(ci, SL_AUTH_METRICS, NULL));
    assert_false(sl_auth_allows(ci, SL_AUTH_ADMIN, NULL));
    assert_true(sl_auth_allows(ci, SL_AUTH_ANY, NULL));
    /* admin: everything */
    assert_true(sl_auth_allows(ops, SL_AUTH_ADMIN, NULL));
    assert_true(sl_auth_allows(ops, SL_AUTH_PUBLISH, "anything"));
    assert_true(sl_auth_allows(ops, SL_AUTH_READ, "x"));
    assert_true(sl_auth_allows(ops, SL_AUTH_METRICS, NULL));
    /* metrics only */
    assert_true(sl_auth_allows(prom, SL_AUTH_METRICS, NULL));
    assert_false(sl_auth_allows(prom, SL_AUTH_READ_SOME, NULL));
    assert_false(sl_auth_allows(prom, SL_AUTH_READ, "orders"));
    assert_false(sl_auth_allows(prom, SL_AUTH_PUBLISH, "orders"));
    assert_string_equal(sl_auth_right_name(SL_AUTH_PUBLISH), "publish");
    assert_string_equal(sl_auth_right_name(SL_AUTH_ADMIN), "admin");
    sl_auth_free(a);
}

static void test_glob(void **state)
{
    (void)state;
    assert_true(sl_auth_glob("*", "anything"));
    assert_true(sl_auth_glob("*", "a"));
    assert_true(sl_auth_glob("a*", "a"));
    assert_true(sl_auth_glob("*.dlq", "orders.dlq"));
    assert_false(sl_auth_glob("*.dlq", "orders.dlq2"));
    assert_true(sl_auth_glob("a*b*c", "aXXbYYc"));
    assert_true(sl_auth_glob("a*b*c", "abbbc"));
    assert_false(sl_auth_glob("a*b*c", "acb"));
    assert_true(sl_auth_glob("**", "x"));
    assert_false(sl_auth_glob("orders", "order"));
    assert_false(sl_auth_glob("order", "orders"));
    /* Many stars against a long non-matching name end quickly (no
     * exponential back-tracking). */
    char name[129];
    memset(name, 'a', 128);
    name[128] = '\0';
    assert_false(sl_auth_glob("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", name));
    assert_true(sl_auth_pattern_valid("audit.*"));
    assert_true(sl_auth_pattern_valid("*"));
    assert_false(sl_auth_pattern_valid(""));
    assert_false(sl_auth_pattern_valid("a/b"));
    assert_false(sl_auth_pattern_valid("a?"));
    assert_false(sl_auth_pattern_valid(NULL));
}

static void test_bad_tables(void **state)
{
    (void)state;
    char h1[SL_AUTH_HEX_LEN + 1], h2[SL_AUTH_HEX_LEN + 1];
    sl_auth_hash_hex("one", 3, h1);
    sl_auth_hash_hex("two", 3, h2);
    sl_auth *a = NULL;
    sl_error err = {0};
    /* The token itself where the hash belongs. */
    sl_auth_key_config plain = {.name = W("k"), .sha256 = W("sk_notahash")};
    assert_int_equal(sl_auth_new(&plain, 1, &a, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "never the token itself"));
    assert_null(a);
    /* 63 hex digits, and a non-hex digit. */
    char short_hex[SL_AUTH_HEX_LEN + 1];
    memcpy(short_hex, h1, sizeof short_hex);
    short_hex[63] = '\0';
    sl_auth_key_config s = {.name = W("k"), .sha256 = short_hex};
    assert_int_equal(sl_auth_new(&s, 1, &a, &err), SL_EINVAL);
    char bad_hex[SL_AUTH_HEX_LEN + 1];
    memcpy(bad_hex, h1, sizeof bad_hex);
    bad_hex[10] = 'g';
    s.sha256 = bad_hex;
    assert_int_equal(sl_auth_new(&s, 1, &a, &err), SL_EINVAL);
    /* Upper-case hex is fine. */
    char up[SL_AUTH_HEX_LEN + 1];
    for (int i = 0; i <= SL_AUTH_HEX_LEN; i++)
        up[i] = (char)(h1[i] >= 'a' && h1[i] <= 'f' ? h1[i] - 32 : h1[i]);
    s.sha256 = up;
    assert_int_equal(sl_auth_new(&s, 1, &a, &err), 0);
    assert_non_null(sl_auth_find(a, "one", 3));
    sl_auth_free(a);
    a = NULL;
    /* Bad names, duplicates, bad patterns. */
    sl_auth_key_config two[2] = {{.name = W("k"), .sha256 = h1}, {.name = W("k"), .sha256 = h2}};
    assert_int_equal(sl_auth_new(two, 2, &a, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "declared twice"));
    two[1].name = W("j");
    two[1].sha256 = h1;
    assert_int_equal(sl_auth_new(two, 2, &a, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "same sha256"));
    sl_auth_key_config bad_name = {.name = W("a b"), .sha256 = h1};
    assert_int_equal(sl_auth_new(&bad_name, 1, &a, &err), SL_EINVAL);
    char *bad_pat[] = {W("orders"), W("a/b")};
    sl_auth_key_config bp = {.name = W("k"), .sha256 = h1, .publish = bad_pat, .npublish = 2};
    assert_int_equal(sl_auth_new(&bp, 1, &a, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "a/b"));
    assert_null(a);
    /* An empty table knows no key. */
    assert_int_equal(sl_auth_new(NULL, 0, &a, &err), 0);
    assert_int_equal(sl_auth_count(a), 0);
    assert_null(sl_auth_find(a, "one", 3));
    sl_auth_free(a);
}

static void test_bearer(void **state)
{
    (void)state;
    static const char *const good[][2] = {
        {"Bearer abc", "abc"},
        {"bearer abc", "abc"},
        {"BEARER  abc  ", "abc"},
        {"  Bearer\tsk_x-y_z", "sk_x-y_z"},
    };
    tu_guard g = {0};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        /* NUL included: the header ends right before the guard page. */
        const char *h = tu_guard_put(&g, good[i][0], strlen(good[i][0]) + 1);
        const char *tok;
        size_t len;
        assert_int_equal(sl_auth_bearer(h, &tok, &len), 0);
        assert_int_equal(len, strlen(good[i][1]));
        assert_memory_equal(tok, good[i][1], len);
        tu_guard_free(&g);
    }
    static const char *const bad[] = {"",          "Bearer",    "Bearer ",    "Basic abc",
                                      "Bearerabc", "Token abc", "Bearer\t \t"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *h = tu_guard_put(&g, bad[i], strlen(bad[i]) + 1);
        const char *tok;
        size_t len;
        assert_int_equal(sl_auth_bearer(h, &tok, &len), SL_EINVAL);
        tu_guard_free(&g);
    }
    const char *tok;
    size_t len;
    assert_int_equal(sl_auth_bearer(NULL, &tok, &len), SL_EINVAL);
}

#define SEC 1000000000LL

static void test_rate_bucket(void **state)
{
    (void)state;
    sl_ratelimit *rl = sl_ratelimit_new(10, 20, 0); /* 10/s, burst 20 */
    assert_non_null(rl);
    int64_t t = 5 * SEC;
    /* The burst is available at once, then nothing. */
    assert_int_equal(sl_ratelimit_take(rl, "a", 20, t), 0);
    int64_t w = sl_ratelimit_take(rl, "a", 1, t);
    assert_true(w > 0 && w <= 101); /* one token at 10/s: 100 ms */
    /* Another client has its own bucket. */
    assert_int_equal(sl_ratelimit_take(rl, "b", 5, t), 0);
    /* After the wait it was told, the same request passes. */
    assert_int_equal(sl_ratelimit_take(rl, "a", 1, t + w * 1000000), 0);
    /* A batch larger than the burst passes only with a full bucket, and
     * leaves a debt: 50 events at 10/s with burst 20 -> 3 s until one more
     * token. */
    t += 10 * SEC;
    assert_int_equal(sl_ratelimit_take(rl, "a", 50, t), 0);
    w = sl_ratelimit_take(rl, "a", 1, t);
    assert_true(w > 3000 && w <= 3101);
    /* 5 events need 5 tokens: refused with some but not enough. */
    t += 10 * SEC; /* full again: 20 */
    assert_int_equal(sl_ratelimit_take(rl, "c", 18, t), 0);
    w = sl_ratelimit_take(rl, "c", 5, t);
    assert_true(w > 200 && w <= 301);
    assert_int_equal(sl_ratelimit_take(rl, "c", 2, t), 0);
    /* Long-run: over 10 simulated seconds of requests every 10 ms, about
     * rate * 10 + burst events pass. */
    t += 10 * SEC;
    long passed = 0;
    for (int i = 0; i < 1000; i++)
        passed += sl_ratelimit_take(rl, "d", 1, t + i * (SEC / 100)) == 0;
    assert_true(passed >= 115 && passed <= 121);
    sl_ratelimit_free(rl);
    assert_null(sl_ratelimit_new(0, 10, 0));
}

static void test_rate_forgets(void **state)
{
    (void)state;
    sl_ratelimit *rl = sl_ratelimit_new(100, 100, 4); /* room for 4 clients */
    int64_t t = SEC;
    char name[16];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "c%d", i);
        assert_int_equal(sl_ratelimit_take(rl, name, 50, t), 0);
    }
    assert_int_equal(sl_ratelimit_clients(rl), 4);
    /* A fifth client while the four are still busy: told to wait (a full
     * table was swept now, freeing nothing). */
    int64_t w = sl_ratelimit_take(rl, "c4", 1, t);
    assert_true(w > 0 && w <= 1001);
    /* Their buckets are full again after 0.5 s, but a full table is swept
     * at most once a second: still waiting, told until when. */
    w = sl_ratelimit_take(rl, "c4", 1, t + 6 * SEC / 10);
    assert_true(w > 0 && w <= 401);
    assert_int_equal(sl_ratelimit_clients(rl), 4);
    /* At the next sweep they are forgotten. */
    assert_int_equal(sl_ratelimit_take(rl, "c4", 1, t + 6 * SEC / 10 + w * 1000000), 0);
    assert_int_equal(sl_ratelimit_take(rl, "c4", 1, t + 3 * SEC), 0);
    assert_int_equal(sl_ratelimit_clients(rl), 1);
    /* And many clients over time never grow the table past its bound. */
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "x%d", i);
        sl_ratelimit_take(rl, name, 1, t + 4 * SEC + (int64_t)i * SEC);
        assert_true(sl_ratelimit_clients(rl) <= 4);
    }
    sl_ratelimit_free(rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_vector),  cmocka_unit_test(test_new_token),
        cmocka_unit_test(test_find),         cmocka_unit_test(test_rights),
        cmocka_unit_test(test_glob),         cmocka_unit_test(test_bad_tables),
        cmocka_unit_test(test_bearer),       cmocka_unit_test(test_rate_bucket),
        cmocka_unit_test(test_rate_forgets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
