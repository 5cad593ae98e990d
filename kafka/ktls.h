/*
 * kafka/ktls.h — TLS for the Kafka listener's connections (ktls.c). Not for
 * use outside kafka/.
 */
#ifndef SL_KTLS_H
#define SL_KTLS_H

#include "core/base/err.h"

#include <stdbool.h>
#include <stdlib.h>
#include <sys/types.h>

typedef struct sl_ktls sl_ktls;

/* The server context of PEM files cert (a chain) and key. Returns 0 with
 * *out, or SL_EINVAL/SL_ENOMEM with err naming the file and the reason. */
int sl__ktls_new(const char *cert, const char *key, sl_ktls **out, sl_error *err);
void sl__ktls_free(sl_ktls *t);

/* A server-side TLS session on the connected socket fd (not owned), or NULL. */
void *sl__ktls_conn(sl_ktls *t, int fd);
void sl__ktls_conn_free(void *ssl);

/* As recv()/send() on a non-blocking socket: n > 0 bytes, 0 when the peer
 * closed, -1 with errno EAGAIN when it would block (recv: *want_out when it
 * waits for the socket to take bytes, during the handshake; send: *want_in
 * when it waits for bytes from the peer) or another errno on failure. */
ssize_t sl__ktls_recv(void *ssl, void *buf, size_t n, bool *want_out);
ssize_t sl__ktls_send(void *ssl, const void *buf, size_t n, bool *want_in);
/* Whether decrypted bytes wait in the session (epoll cannot see them). */
bool sl__ktls_pending(void *ssl);

#endif
