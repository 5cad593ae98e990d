/*
 * core/base/tls.h — the TLS files of a front door: reading a PEM
 * certificate (chain) and its private key, and checking them with
 * libcrypto before a listener serves with them (the HTTP API today, the
 * Kafka listener later), so that a wrong file is refused at start with its
 * name and the reason instead of failing every handshake.
 */
#ifndef SL_TLS_H
#define SL_TLS_H

#include "core/base/err.h"

/* Reads and checks the PEM certificate (chain) file cert and its private
 * key file key: both are given, both parse (the key unencrypted), and the
 * key belongs to the certificate. Returns 0 with the files' texts in
 * *cert_pem and *key_pem (NUL-terminated; caller frees, best wiping the
 * key with OPENSSL_cleanse() first), or SL_EINVAL, SL_ENOENT, SL_EIO or
 * SL_ENOMEM with err naming the file and the problem, and both set to
 * NULL (the key's text wiped). */
int sl_tls_load_pem(const char *cert, const char *key, char **cert_pem, char **key_pem,
                    sl_error *err);

#endif
