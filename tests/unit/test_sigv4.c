/*
 * tests/unit/test_sigv4.c — core/base/sigv4.c: AWS's published test
 * vectors (get-vanilla, query order); sign then verify, and each refusal
 * (wrong secret, unknown key, skew, scope, unsigned host, payload hash,
 * session token, malformed headers); and 300 random requests signed by
 * botocore's SigV4Auth (tests/unit/sigv4_botocore.py, Debian's
 * python3-botocore): each verifies, and signing it again gives botocore's
 * Authorization value byte for byte.
 */
#include "testutil.h"

#include "core/base/base64.h"
#include "core/base/sigv4.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define H(n, v) {n, v, sizeof n - 1, sizeof v - 1}

static const char *SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

static const char *lookup(void *ctx, const char *akid, size_t len)
{
    (void)ctx;
    return len == 11 && !memcmp(akid, "AKIDEXAMPLE", 11) ? SECRET : NULL;
}

/* aws-sig-v4-test-suite: get-vanilla and get-vanilla-query-order-key-case. */
static void test_vectors(void **state)
{
    (void)state;
    sl_sigv4_header h[] = {H("Host", "example.amazonaws.com"), H("X-Amz-Date", "20150830T123600Z")};
    sl_sigv4_req r = {.method = "GET", .path = "/", .headers = h, .nheaders = 2,
                      .double_encode = true};
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    assert_int_equal(sl_sigv4_authorization(&r, "AKIDEXAMPLE", SECRET, "us-east-1", "service",
                                            NULL, &out, &err),
                     0);
    assert_string_equal((const char *)out.data,
                        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                        "aws4_request, SignedHeaders=host;x-amz-date, "
                        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
    out.len = 0;
    r.query = "Param2=value2&Param1=value1";
    assert_int_equal(sl_sigv4_authorization(&r, "AKIDEXAMPLE", SECRET, "us-east-1", "service",
                                            NULL, &out, &err),
                     0);
    assert_non_null(strstr((const char *)out.data, "Signature=b97d918cfa904a5beff61c982a1b6f458b"
                                                    "799221646efd99d3219ec94cdf2500"));
    sl_buf_free(&out);
}

/* Signs r's headers plus Authorization into hs (room for one more). */
static void sign(sl_sigv4_req *r, sl_sigv4_header *hs, const char *secret, sl_buf *auth)
{
    sl_error err = {0};
    auth->len = 0;
    assert_int_equal(sl_sigv4_authorization(r, "AKIDEXAMPLE", secret, "us-east-1", "events", NULL,
                                            auth, &err),
                     0);
    hs[r->nheaders] = (sl_sigv4_header){"Authorization", (const char *)auth->data, 13, auth->len};
    r->nheaders++;
}

static sl_sigv4_fail verify(const sl_sigv4_req *r, int64_t now, sl_error *err)
{
    const char *akid;
    size_t len;
    return sl_sigv4_verify(r, "us-east-1", "events", now, lookup, NULL, &akid, &len, err);
}

static void test_verify(void **state)
{
    (void)state;
    int64_t now = 1796292000;
    char date[17];
    sl_sigv4_amz_date(now, date);
    assert_int_equal(sl_sigv4_parse_amz_date(date, 16), now);
    const char *body = "{\"Entries\":[]}";
    sl_sigv4_header hs[8] = {
        {"Host", "127.0.0.1:8080", 4, 14},
        {"X-Amz-Date", date, 10, 16},
        {"X-Amz-Target", "AWSEvents.PutEvents", 12, 19},
    };
    sl_sigv4_req r = {.method = "POST", .path = "/", .headers = hs, .nheaders = 3,
                      .body = body, .body_len = strlen(body), .double_encode = true};
    sl_buf auth = SL_BUF_INIT;
    sl_error err = {0};
    sign(&r, hs, SECRET, &auth);
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_OK);
    assert_int_equal(verify(&r, now + 899, &err), SL_SIGV4_OK);
    /* 15 minutes and a second: expired, in AWS's words. */
    assert_int_equal(verify(&r, now + 901, &err), SL_SIGV4_BAD_SIGNATURE);
    assert_non_null(strstr(err.msg, "Signature expired"));
    /* Another body: the signature no longer matches. */
    r.body = "{\"Entries\":[1]}";
    r.body_len = strlen(r.body);
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_BAD_SIGNATURE);
    assert_non_null(strstr(err.msg, "does not match"));
    r.body = body;
    r.body_len = strlen(body);
    /* A wrong secret. */
    r.nheaders = 3;
    sign(&r, hs, "not-the-secret", &auth);
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_BAD_SIGNATURE);
    /* An unknown key id. */
    char other[512];
    snprintf(other, sizeof other, "%s", (const char *)auth.data);
    memcpy(strstr(other, "AKIDEXAMPLE"), "AKIDEXAMPLF", 11);
    hs[3].value = other;
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_UNKNOWN_KEY);
    /* Another region in the scope. */
    r.nheaders = 3;
    sign(&r, hs, SECRET, &auth);
    snprintf(other, sizeof other, "%s", (const char *)auth.data);
    memcpy(strstr(other, "us-east-1"), "us-east-2", 9);
    hs[3].value = other;
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_BAD_SIGNATURE);
    assert_non_null(strstr(err.msg, "scoped"));
    /* host not signed. */
    hs[3].value = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261203/us-east-1/events/aws4_request, "
                  "SignedHeaders=x-amz-date, Signature=00";
    hs[3].value_len = strlen(hs[3].value);
    sl_sigv4_amz_date(1796256000, date); /* 2026-12-03T00:00:00Z: the scope's day */
    assert_int_equal(verify(&r, 1796256000, &err), SL_SIGV4_BAD_SIGNATURE);
    assert_non_null(strstr(err.msg, "host"));
    /* Malformed Authorization values. */
    const char *bad[] = {"", "AWS4-HMAC-SHA1 Credential=a/b/c/d/aws4_request",
                         "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/2026/us-east-1/events/"
                         "aws4_request, SignedHeaders=host, Signature=00",
                         "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=00",
                         "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261203/us-east-1/events/x, "
                         "SignedHeaders=host, Signature=00"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hs[3].value = bad[i];
        hs[3].value_len = strlen(bad[i]);
        assert_int_equal(verify(&r, 1796256000, &err), SL_SIGV4_INCOMPLETE);
    }
    /* A session token is refused by name; no Authorization is incomplete. */
    r.nheaders = 3;
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_INCOMPLETE);
    hs[3] = (sl_sigv4_header){"X-Amz-Security-Token", "tok", 20, 3};
    r.nheaders = 4;
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_TOKEN);
    assert_non_null(strstr(err.msg, "session tokens"));
    /* x-amz-content-sha256 must be the body's. */
    sl_sigv4_amz_date(now, date);
    hs[3] = (sl_sigv4_header){"x-amz-content-sha256",
                              "0000000000000000000000000000000000000000000000000000000000000000",
                              20, 64};
    r.nheaders = 4;
    sign(&r, hs, SECRET, &auth);
    assert_int_equal(verify(&r, now, &err), SL_SIGV4_BAD_SIGNATURE);
    assert_non_null(strstr(err.msg, "x-amz-content-sha256"));
    sl_buf_free(&auth);
}

/* Botocore's signatures, verified and reproduced. */
typedef struct one_key {
    const char *akid, *secret;
} one_key;

static const char *one_lookup(void *ctx, const char *akid, size_t len)
{
    const one_key *k = ctx;
    return strlen(k->akid) == len && !memcmp(k->akid, akid, len) ? k->secret : NULL;
}

/* "SignedHeaders=a;b" of an Authorization value: only those go to our
 * signer (botocore leaves some out, user-agent for one). */
static size_t signed_only(const char *auth, const sl_sigv4_header *all, size_t n,
                          sl_sigv4_header *out)
{
    const char *sh = strstr(auth, "SignedHeaders=");
    assert_non_null(sh);
    sh += 14;
    size_t shl = strcspn(sh, ",");
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        for (const char *p = sh; p < sh + shl;) {
            size_t l = strcspn(p, ";,");
            if (l == all[i].name_len && !strncasecmp(p, all[i].name, l)) {
                out[m++] = all[i];
                break;
            }
            p += l + 1;
        }
    }
    return m;
}

static void test_botocore(void **state)
{
    (void)state;
    const char *gen = getenv("SIGV4_GEN") ? getenv("SIGV4_GEN") : "tests/unit/sigv4_botocore.py";
    char gen_abs[4096], cmd[8300];
    if (!realpath(gen, gen_abs))
        fail_msg("%s not found (run from the project root)", gen);
    snprintf(cmd, sizeof cmd, "cd / && /usr/bin/python3 -I '%s' 300 7 2>&1", gen_abs);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char line[1 << 16];
    int n = 0;
    sl_buf mine = SL_BUF_INIT;
    while (fgets(line, sizeof line, p)) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j)
            fail_msg("the botocore generator (Debian's python3-botocore) said: %s", line);
        sl_sigv4_header hs[SL_SIGV4_MAX_HEADERS], sh[SL_SIGV4_MAX_HEADERS];
        size_t nh = 0;
        json_t *hv;
        size_t i;
        const char *date = NULL;
        json_array_foreach(json_object_get(j, "headers"), i, hv)
        {
            const char *k = json_string_value(json_array_get(hv, 0));
            const char *v = json_string_value(json_array_get(hv, 1));
            if (!strcasecmp(k, "X-Amz-Date"))
                date = v;
            hs[nh++] = (sl_sigv4_header){k, v, strlen(k), strlen(v)};
        }
        assert_non_null(date);
        sl_buf body = SL_BUF_INIT;
        const char *b64 = json_string_value(json_object_get(j, "body"));
        assert_int_equal(sl_buf_reserve(&body, strlen(b64) / 4 * 3 + 3), 0);
        assert_int_equal(sl_base64_decode(b64, strlen(b64), 0, body.data, &body.len, NULL), 0);
        one_key key = {json_string_value(json_object_get(j, "akid")),
                       json_string_value(json_object_get(j, "secret"))};
        const char *region = json_string_value(json_object_get(j, "region"));
        const char *service = json_string_value(json_object_get(j, "service"));
        const char *want = json_string_value(json_object_get(j, "authorization"));
        sl_sigv4_req r = {.method = json_string_value(json_object_get(j, "method")),
                          .path = json_string_value(json_object_get(j, "path")),
                          .query = json_string_value(json_object_get(j, "query")),
                          .headers = hs,
                          .nheaders = nh,
                          .body = body.data,
                          .body_len = body.len,
                          .double_encode = true};
        int64_t now = sl_sigv4_parse_amz_date(date, strlen(date));
        const char *akid;
        size_t akid_len;
        sl_error err = {0};
        sl_sigv4_fail f = sl_sigv4_verify(&r, region, service, now + 60, one_lookup, &key, &akid,
                                          &akid_len, &err);
        if (f != SL_SIGV4_OK)
            fail_msg("botocore request %d does not verify (%d: %s): %s", n, f, err.msg, line);
        /* Our signer over what botocore signed gives its value exactly. */
        r.nheaders = signed_only(want, hs, nh, sh);
        r.headers = sh;
        mine.len = 0;
        assert_int_equal(sl_sigv4_authorization(&r, key.akid, key.secret, region, service, NULL,
                                                &mine, &err),
                         0);
        if (strcmp((const char *)mine.data, want))
            fail_msg("request %d: we sign\n  %s\nbotocore signs\n  %s\n%s", n,
                     (const char *)mine.data, want, line);
        /* One byte of the body changed: refused. */
        if (body.len) {
            body.data[0] ^= 1;
            r.headers = hs;
            r.nheaders = nh;
            assert_int_equal(sl_sigv4_verify(&r, region, service, now, one_lookup, &key, &akid,
                                             &akid_len, &err),
                             SL_SIGV4_BAD_SIGNATURE);
        }
        json_decref(j);
        sl_buf_free(&body);
        n++;
    }
    sl_buf_free(&mine);
    int rc = pclose(p);
    if (n != 300)
        fail_msg("the botocore generator gave %d of 300 requests (exit %d)", n, rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_botocore),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
