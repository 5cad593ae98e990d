/*
 * tests/unit/test_tls.c — the TLS file checks (core/base/tls.h): a good
 * certificate and key load with their texts; a missing argument, a missing
 * file, a file that is not a certificate or not a key, and a key of another
 * certificate are refused with the code and a message naming the file,
 * and leave nothing behind. The pairs are made with libcrypto here.
 */
#include "testutil.h"

#include "core/base/tls.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes a self-signed P-256 certificate and its key to DIR/NAME.crt and
 * DIR/NAME.key. */
static void make_pair(const char *dir, const char *name)
{
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    assert_non_null(pk);
    assert_non_null(x);
    X509_NAME *subj = X509_get_subject_name(x);
    assert_true(X509_set_version(x, X509_VERSION_3) &&
                ASN1_INTEGER_set_int64(X509_get_serialNumber(x), 1) &&
                X509_gmtime_adj(X509_getm_notBefore(x), -60) &&
                X509_gmtime_adj(X509_getm_notAfter(x), 3600) && X509_set_pubkey(x, pk) &&
                X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_UTF8,
                                           (const unsigned char *)"localhost", -1, -1, 0) &&
                X509_set_issuer_name(x, subj) && X509_sign(x, pk, EVP_sha256()));
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.crt", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(PEM_write_X509(f, x));
    fclose(f);
    snprintf(path, sizeof path, "%s/%s.key", dir, name);
    assert_non_null(f = fopen(path, "w"));
    assert_true(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL));
    fclose(f);
    X509_free(x);
    EVP_PKEY_free(pk);
}

static const char *path_of(const char *dir, const char *file, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, file);
    return out;
}

static void test_good_pair(void **state)
{
    const char *dir = *state;
    make_pair(dir, "a");
    char c[4096], k[4096];
    char *cert = NULL, *key = NULL;
    sl_error err = {0};
    assert_int_equal(sl_tls_load_pem(path_of(dir, "a.crt", c, sizeof c),
                                     path_of(dir, "a.key", k, sizeof k), &cert, &key, &err),
                     0);
    assert_non_null(strstr(cert, "-----BEGIN CERTIFICATE-----"));
    assert_non_null(strstr(key, "PRIVATE KEY-----"));
    free(cert);
    free(key);
}

/* Each bad case: its code, what the message says, and nothing returned. */
static void refused(const char *cert, const char *key, int code, const char *says,
                    const char *names)
{
    char *cp = (char *)"x", *kp = (char *)"x";
    sl_error err = {0};
    assert_int_equal(sl_tls_load_pem(cert, key, &cp, &kp, &err), code);
    assert_null(cp);
    assert_null(kp);
    if (!strstr(err.msg, says) || (names && !strstr(err.msg, names)))
        fail_msg("\"%s\" does not say \"%s\" and \"%s\"", err.msg, says, names ? names : "");
}

static void test_refused(void **state)
{
    const char *dir = *state;
    make_pair(dir, "a");
    make_pair(dir, "b");
    char ac[4096], ak[4096], bk[4096], missing[4096];
    path_of(dir, "a.crt", ac, sizeof ac);
    path_of(dir, "a.key", ak, sizeof ak);
    path_of(dir, "b.key", bk, sizeof bk);
    path_of(dir, "missing.pem", missing, sizeof missing);
    refused(ac, NULL, SL_EINVAL, "TLS needs both a certificate", NULL);
    refused(NULL, ak, SL_EINVAL, "TLS needs both a certificate", NULL);
    refused(missing, ak, SL_ENOENT, "TLS certificate", missing);
    refused(ac, missing, SL_ENOENT, "TLS key", missing);
    refused(ak, ak, SL_EINVAL, "is not a PEM certificate", ak);
    refused(ac, ac, SL_EINVAL, "is not an unencrypted PEM private key", ac);
    refused(ac, bk, SL_EINVAL, "does not belong to certificate", bk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_good_pair, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test_setup_teardown(test_refused, tu_tmp_setup, tu_tmp_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
