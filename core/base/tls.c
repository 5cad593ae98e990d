/*
 * core/base/tls.c — reading and checking a front door's PEM certificate
 * and key with libcrypto (core/base/tls.h).
 */
#include "core/base/tls.h"
#include "core/base/buf.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_pem(const char *what, const char *path, char **out, sl_error *err)
{
    sl_buf b = SL_BUF_INIT;
    sl_error e = {0};
    int rc = sl_buf_read_file(&b, path, 1u << 20, &e);
    if (!rc)
        rc = sl_buf_append(&b, "", 1);
    if (rc) {
        sl_buf_free(&b);
        return sl_error_set(err,
                            rc == SL_ENOMEM   ? SL_ENOMEM
                            : rc == SL_ENOENT ? SL_ENOENT
                                              : SL_EIO,
                            "TLS %s %s: %s", what, path, e.msg[0] ? e.msg : sl_strerror(rc));
    }
    *out = (char *)b.data;
    return 0;
}

/* The first libcrypto error as text (or "not PEM"), and the queue cleared. */
static const char *ossl_why(char *buf, size_t cap)
{
    unsigned long e = ERR_peek_last_error();
    if (e)
        ERR_error_string_n(e, buf, cap);
    else
        snprintf(buf, cap, "no PEM data found");
    ERR_clear_error();
    return buf;
}

int sl_tls_load_pem(const char *cert, const char *key, char **cert_pem, char **key_pem,
                    sl_error *err)
{
    *cert_pem = *key_pem = NULL;
    if (!cert || !key)
        return sl_error_set(err, SL_EINVAL,
                            "TLS needs both a certificate (tls_cert, --tls-cert) "
                            "and its key (tls_key, --tls-key)");
    int rc = read_pem("certificate", cert, cert_pem, err);
    if (!rc)
        rc = read_pem("key", key, key_pem, err);
    X509 *x = NULL;
    EVP_PKEY *pk = NULL;
    char why[256];
    if (!rc) {
        BIO *bio = BIO_new_mem_buf(*cert_pem, -1);
        x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
        BIO_free(bio);
        if (!x)
            rc = sl_error_set(err, SL_EINVAL, "TLS certificate %s is not a PEM certificate: %s",
                              cert, ossl_why(why, sizeof why));
    }
    if (!rc) {
        BIO *bio = BIO_new_mem_buf(*key_pem, -1);
        pk = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
        BIO_free(bio);
        if (!pk)
            rc =
                sl_error_set(err, SL_EINVAL, "TLS key %s is not an unencrypted PEM private key: %s",
                             key, ossl_why(why, sizeof why));
    }
    if (!rc && X509_check_private_key(x, pk) != 1)
        rc = sl_error_set(err, SL_EINVAL, "TLS key %s does not belong to certificate %s: %s", key,
                          cert, ossl_why(why, sizeof why));
    X509_free(x);
    EVP_PKEY_free(pk);
    if (rc) {
        free(*cert_pem);
        if (*key_pem)
            OPENSSL_cleanse(*key_pem, strlen(*key_pem));
        free(*key_pem);
        *cert_pem = *key_pem = NULL;
    }
    return rc;
}
