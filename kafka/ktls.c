/*
 * kafka/ktls.c — TLS for the Kafka listener (OpenSSL's libssl, the same
 * library as the libcrypto sluice already links): the server's context from
 * server.tls_cert / tls_key (the HTTP API's files), and non-blocking reads
 * and writes that tell the listener which event to wait for.
 *
 * The handshake needs no step of its own: the first SSL_read() of a
 * connection accepted in server mode runs it. Renegotiation is off (TLS 1.3
 * has none; 1.2 clients cannot start one), so a write never waits for a
 * read except during the handshake. Partial writes are on and the write
 * buffer may move between retries: the listener resends from where the
 * last write stopped, re-reading file parts into a buffer (no sendfile
 * under TLS).
 */
#include "kafka/ktls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <errno.h>
#include <string.h>

struct sl_ktls {
    SSL_CTX *ctx;
};

/* The reason of the last OpenSSL error, for a message. */
static const char *ossl_reason(char *buf, size_t cap)
{
    unsigned long e = ERR_get_error();
    if (!e)
        return "unknown error";
    ERR_error_string_n(e, buf, cap);
    ERR_clear_error();
    return buf;
}

int sl__ktls_new(const char *cert, const char *key, sl_ktls **out, sl_error *err)
{
    *out = NULL;
    char why[256];
    sl_ktls *t = calloc(1, sizeof *t);
    if (!t || !(t->ctx = SSL_CTX_new(TLS_server_method()))) {
        free(t);
        return sl_error_set(err, SL_ENOMEM, "kafka TLS: %s", ossl_reason(why, sizeof why));
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                 SSL_MODE_RELEASE_BUFFERS);
    int rc = 0;
    if (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1)
        rc = sl_error_set(err, SL_EINVAL, "kafka TLS: certificate %s: %s", cert,
                          ossl_reason(why, sizeof why));
    else if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1)
        rc = sl_error_set(err, SL_EINVAL, "kafka TLS: private key %s: %s", key,
                          ossl_reason(why, sizeof why));
    else if (SSL_CTX_check_private_key(t->ctx) != 1)
        rc = sl_error_set(err, SL_EINVAL, "kafka TLS: %s is not the key of %s", key, cert);
    if (rc) {
        sl__ktls_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void sl__ktls_free(sl_ktls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

void *sl__ktls_conn(sl_ktls *t, int fd)
{
    SSL *s = SSL_new(t->ctx);
    if (!s)
        return NULL;
    if (SSL_set_fd(s, fd) != 1) {
        SSL_free(s);
        return NULL;
    }
    SSL_set_accept_state(s);
    return s;
}

void sl__ktls_conn_free(void *ssl)
{
    SSL *s = ssl;
    if (!s)
        return;
    SSL_shutdown(s); /* one close_notify, not waiting for the peer's */
    SSL_free(s);
    ERR_clear_error();
}

/* The outcome of an SSL_read/SSL_write that returned n <= 0. */
static ssize_t outcome(SSL *s, int n, bool *want_out, bool *want_in)
{
    int e = SSL_get_error(s, n);
    ERR_clear_error();
    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want_in = true;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        *want_out = true;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0; /* the peer closed the TLS session */
    default:
        errno = EPROTO; /* a failed handshake, a bad record, a reset */
        return -1;
    }
}

ssize_t sl__ktls_recv(void *ssl, void *buf, size_t n, bool *want_out)
{
    SSL *s = ssl;
    bool want_in = false;
    *want_out = false;
    int got = SSL_read(s, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    return got > 0 ? got : outcome(s, got, want_out, &want_in);
}

ssize_t sl__ktls_send(void *ssl, const void *buf, size_t n, bool *want_in)
{
    SSL *s = ssl;
    bool want_out = false;
    *want_in = false;
    int put = SSL_write(s, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    return put > 0 ? put : outcome(s, put, &want_out, want_in);
}

bool sl__ktls_pending(void *ssl)
{
    return ssl && SSL_pending((SSL *)ssl) > 0;
}
