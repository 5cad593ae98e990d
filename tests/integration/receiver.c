/*
 * tests/integration/receiver.c — the scriptable HTTP test endpoint of the
 * integration tests (see receiver.h): libmicrohttpd with a thread per
 * connection, so that a delayed answer holds only its own connection, over
 * plain HTTP or TLS; and self-signed certificates made with libcrypto, so
 * that the tests need no openssl command.
 */
#include "receiver.h"

#include "core/base/buf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* A scripted answer, its strings copied. */
typedef struct rule {
    int n; /* uses left; -1: unlimited; 0: spent */
    unsigned status;
    char *marker;
    char body[256];
    char retry_after[64];
    int delay_ms;
} rule;

struct rx_receiver {
    struct MHD_Daemon *d; /* NULL when stopped */
    int port;
    char *cert, *key;     /* PEM of the last successful rx_start_tls(); NULL: plain HTTP */
    pthread_mutex_t lock; /* everything below */
    rx_req **v;           /* each request allocated alone: pointers stay valid */
    size_t n, cap;
    rule rules[RX_MAX_RULES];
    size_t nrules;
    int delay_ms;                 /* before the default answer */
    int in_flight, max_in_flight; /* requests recorded and not answered yet */
};

/* The request being received on a connection. */
typedef struct pending {
    sl_buf body;
} pending;

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static size_t keep_escapes(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s); /* the path as sent, percent-encoding included */
}

static enum MHD_Result add_header_line(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    sl_buf *b = cls;
    for (const char *k = key; *k; k++) {
        char lc = (char)tolower((unsigned char)*k);
        sl_buf_append(b, &lc, 1);
    }
    sl_buf_append(b, ": ", 2);
    if (value)
        sl_buf_append(b, value, strlen(value));
    sl_buf_append(b, "\n", 1);
    return MHD_YES;
}

/* Whether the n bytes at hay hold needle. */
static bool contains(const char *hay, size_t n, const char *needle)
{
    return memmem(hay, n, needle, strlen(needle)) != NULL;
}

/* Records the complete request (taking the body) and picks its answer,
 * under the lock. */
static void record(rx_receiver *rx, rx_req *q, rule *answer)
{
    pthread_mutex_lock(&rx->lock);
    if (rx->n == rx->cap) {
        size_t cap = rx->cap ? rx->cap * 2 : 64;
        rx_req **v = realloc(rx->v, cap * sizeof *v);
        if (v) {
            rx->v = v;
            rx->cap = cap;
        }
    }
    *answer = (rule){.status = MHD_HTTP_OK, .body = "ok", .delay_ms = rx->delay_ms};
    for (size_t i = 0; i < rx->nrules; i++) {
        rule *r = &rx->rules[i];
        if (r->n == 0 || (r->marker && !contains(q->body, q->body_len, r->marker)))
            continue;
        if (r->n > 0)
            r->n--;
        *answer = *r;
        break;
    }
    q->status = answer->status;
    if (++rx->in_flight > rx->max_in_flight)
        rx->max_in_flight = rx->in_flight;
    if (rx->n < rx->cap)
        rx->v[rx->n++] = q;
    else
        free(q); /* out of memory: the request goes unrecorded */
    pthread_mutex_unlock(&rx->lock);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    rx_receiver *rx = cls;
    pending *p = *con_cls;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p)
            return MHD_NO;
        *con_cls = p;
        return MHD_YES;
    }
    if (*upload_size) {
        sl_buf_append(&p->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    /* The whole request is in. */
    rx_req *q = calloc(1, sizeof *q);
    sl_buf hl = SL_BUF_INIT;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header_line, &hl);
    sl_buf_append(&hl, "", 1);
    sl_buf_append(&p->body, "", 1);
    if (!q || !hl.data || !p->body.data) {
        free(q);
        sl_buf_free(&hl);
        return MHD_NO;
    }
    q->at = mono();
    snprintf(q->method, sizeof q->method, "%s", method);
    q->path = strdup(url);
    q->headers = (char *)hl.data;
    q->body_len = p->body.len - 1;
    q->body = (char *)p->body.data;
    memset(&p->body, 0, sizeof p->body); /* now q's */
    rule a;
    record(rx, q, &a);
    if (a.delay_ms > 0)
        sleep_ms(a.delay_ms);
    pthread_mutex_lock(&rx->lock);
    rx->in_flight--;
    pthread_mutex_unlock(&rx->lock);
    if (a.status == RX_DROP)
        return MHD_NO; /* MHD closes the connection without an answer */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(a.body), a.body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    if (a.retry_after[0])
        MHD_add_response_header(resp, "Retry-After", a.retry_after);
    enum MHD_Result rc = MHD_queue_response(conn, a.status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    pending *p = *con_cls;
    if (p) {
        sl_buf_free(&p->body);
        free(p);
    }
    *con_cls = NULL;
}

rx_receiver *rx_new(void)
{
    rx_receiver *rx = calloc(1, sizeof *rx);
    if (rx)
        pthread_mutex_init(&rx->lock, NULL);
    return rx;
}

void rx_free(rx_receiver *rx)
{
    if (!rx)
        return;
    rx_stop(rx);
    rx_reset(rx);
    free(rx->cert);
    free(rx->key);
    free(rx->v);
    pthread_mutex_destroy(&rx->lock);
    free(rx);
}

/* libmicrohttpd's error log, to stderr, without the failed TLS handshakes:
 * the tests of certificate checks make the client give up on purpose. */
static void log_error(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!strstr(msg, "handshake"))
        fputs(msg, stderr);
}

/* Starts the daemon on port: HTTPS with cert and key (PEM) when cert is
 * not NULL, else plain HTTP. Returns 0 or -1 as rx_start(). */
static int start(rx_receiver *rx, int port, char *cert, char *key)
{
    if (rx->d || port < 0 || port > 65535)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, key},
        {MHD_OPTION_END, 0, NULL},
    };
    if (cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
            return -1;
        flags |= MHD_USE_TLS;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, rx, MHD_OPTION_EXTERNAL_LOGGER, log_error, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        NULL, MHD_OPTION_ARRAY, cert ? tls : tls + 2, MHD_OPTION_END);
    if (!d)
        return -1;
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    rx->port = i && i->port ? i->port : port;
    rx->d = d;
    return 0;
}

int rx_start(rx_receiver *rx, int port)
{
    if (start(rx, port, NULL, NULL))
        return -1;
    free(rx->cert);
    free(rx->key);
    rx->cert = rx->key = NULL;
    return 0;
}

int rx_start_tls(rx_receiver *rx, int port, const char *cert_pem, const char *key_pem)
{
    char *cert = strdup(cert_pem), *key = strdup(key_pem);
    if (!cert || !key || start(rx, port, cert, key)) {
        free(cert);
        free(key);
        return -1;
    }
    /* libmicrohttpd may keep pointers to the PEM text while it runs: the
     * copies live in rx, and the old pair's daemon is stopped. */
    free(rx->cert);
    free(rx->key);
    rx->cert = cert;
    rx->key = key;
    return 0;
}

int rx_restart(rx_receiver *rx)
{
    return rx->port ? start(rx, rx->port, rx->cert, rx->key) : -1;
}

void rx_stop(rx_receiver *rx)
{
    if (rx->d)
        MHD_stop_daemon(rx->d);
    rx->d = NULL;
}

/* The PEM text of what b holds, NUL-terminated (caller frees); NULL when
 * out of memory. */
static char *bio_text(BIO *b)
{
    char *p;
    long n = BIO_get_mem_data(b, &p);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        memcpy(s, p, (size_t)n);
        s[n] = '\0';
    }
    return s;
}

/* Adds the X.509v3 extension nid with value (openssl.cnf syntax) to x,
 * issued by itself. Returns 0 or -1. */
static int add_ext(X509 *x, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    int rc = e && X509_add_ext(x, e, -1) ? 0 : -1;
    X509_EXTENSION_free(e);
    return rc;
}

int rx_make_cert(const char *name, char **cert_pem, char **key_pem)
{
    *cert_pem = *key_pem = NULL;
    unsigned char addr[16], serial[8];
    bool ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
    char san[300];
    if (snprintf(san, sizeof san, "%s:%s", ip ? "IP" : "DNS", name) >= (int)sizeof san)
        return -1;
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    BIO *bc = BIO_new(BIO_s_mem()), *bk = BIO_new(BIO_s_mem());
    if (!pk || !x || !bc || !bk || RAND_bytes(serial, sizeof serial) != 1)
        goto fail;
    serial[0] &= 0x7f; /* a positive serial number */
    uint64_t sn = 0;
    for (size_t i = 0; i < sizeof serial; i++)
        sn = sn << 8 | serial[i];
    X509_NAME *subj = X509_get_subject_name(x);
    if (!X509_set_version(x, X509_VERSION_3) ||
        !ASN1_INTEGER_set_uint64(X509_get_serialNumber(x), sn) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -60) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600) || !X509_set_pubkey(x, pk) ||
        !X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_UTF8, (const unsigned char *)name, -1, -1,
                                    0) ||
        !X509_set_issuer_name(x, subj))
        goto fail;
    if (add_ext(x, NID_basic_constraints, "critical,CA:TRUE") ||
        add_ext(x, NID_subject_key_identifier, "hash") ||
        add_ext(x, NID_authority_key_identifier, "keyid:always") ||
        add_ext(x, NID_subject_alt_name, san))
        goto fail;
    if (!X509_sign(x, pk, EVP_sha256()) || !PEM_write_bio_X509(bc, x) ||
        !PEM_write_bio_PrivateKey(bk, pk, NULL, NULL, 0, NULL, NULL))
        goto fail;
    *cert_pem = bio_text(bc);
    *key_pem = bio_text(bk);
    if (!*cert_pem || !*key_pem)
        goto fail;
    BIO_free(bc);
    BIO_free(bk);
    X509_free(x);
    EVP_PKEY_free(pk);
    return 0;
fail:
    free(*cert_pem);
    free(*key_pem);
    *cert_pem = *key_pem = NULL;
    BIO_free(bc);
    BIO_free(bk);
    X509_free(x);
    EVP_PKEY_free(pk);
    return -1;
}

int rx_port(const rx_receiver *rx)
{
    return rx->port;
}

int rx_script(rx_receiver *rx, const rx_rule *r)
{
    pthread_mutex_lock(&rx->lock);
    int rc = -1;
    if (rx->nrules < RX_MAX_RULES) {
        rule *d = &rx->rules[rx->nrules++];
        *d = (rule){.n = r->n, .status = r->status, .delay_ms = r->delay_ms};
        d->marker = r->marker ? strdup(r->marker) : NULL;
        snprintf(d->body, sizeof d->body, "%s", r->body ? r->body : "scripted");
        snprintf(d->retry_after, sizeof d->retry_after, "%s", r->retry_after ? r->retry_after : "");
        rc = 0;
    }
    pthread_mutex_unlock(&rx->lock);
    return rc;
}

int rx_fail(rx_receiver *rx, int n, unsigned status, const char *body, const char *retry_after)
{
    return rx_script(
        rx, &(rx_rule){.n = n, .status = status, .body = body, .retry_after = retry_after});
}

int rx_fail_marker(rx_receiver *rx, const char *marker, int n, unsigned status, const char *body)
{
    return rx_script(rx, &(rx_rule){.n = n, .status = status, .marker = marker, .body = body});
}

void rx_set_delay(rx_receiver *rx, int ms)
{
    pthread_mutex_lock(&rx->lock);
    rx->delay_ms = ms;
    pthread_mutex_unlock(&rx->lock);
}

void rx_unscript(rx_receiver *rx)
{
    pthread_mutex_lock(&rx->lock);
    for (size_t i = 0; i < rx->nrules; i++)
        free(rx->rules[i].marker);
    rx->nrules = 0;
    rx->delay_ms = 0;
    pthread_mutex_unlock(&rx->lock);
}

void rx_clear(rx_receiver *rx)
{
    pthread_mutex_lock(&rx->lock);
    for (size_t i = 0; i < rx->n; i++) {
        free(rx->v[i]->path);
        free(rx->v[i]->headers);
        free(rx->v[i]->body);
        free(rx->v[i]);
    }
    rx->n = 0;
    rx->max_in_flight = rx->in_flight;
    pthread_mutex_unlock(&rx->lock);
}

void rx_reset(rx_receiver *rx)
{
    rx_unscript(rx);
    rx_clear(rx);
}

size_t rx_count(rx_receiver *rx)
{
    pthread_mutex_lock(&rx->lock);
    size_t n = rx->n;
    pthread_mutex_unlock(&rx->lock);
    return n;
}

int rx_max_in_flight(rx_receiver *rx)
{
    pthread_mutex_lock(&rx->lock);
    int n = rx->max_in_flight;
    pthread_mutex_unlock(&rx->lock);
    return n;
}

const rx_req *rx_req_at(rx_receiver *rx, size_t i)
{
    pthread_mutex_lock(&rx->lock);
    const rx_req *q = i < rx->n ? rx->v[i] : NULL;
    pthread_mutex_unlock(&rx->lock);
    return q;
}

size_t rx_count_matching(rx_receiver *rx, const char *needle, bool ok_only)
{
    size_t k = 0;
    pthread_mutex_lock(&rx->lock);
    for (size_t i = 0; i < rx->n; i++) {
        const rx_req *q = rx->v[i];
        if ((!ok_only || (q->status >= 200 && q->status < 300)) &&
            (!needle || contains(q->body, q->body_len, needle)))
            k++;
    }
    pthread_mutex_unlock(&rx->lock);
    return k;
}

bool rx_wait_matching(rx_receiver *rx, const char *needle, bool ok_only, size_t n, double secs)
{
    for (double end = mono() + secs;; sleep_ms(10)) {
        if (rx_count_matching(rx, needle, ok_only) >= n)
            return true;
        if (mono() > end)
            return false;
    }
}

bool rx_wait(rx_receiver *rx, size_t n, double secs)
{
    return rx_wait_matching(rx, NULL, false, n, secs);
}

const char *rx_header(const rx_req *r, const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name);
    for (const char *p = r->headers; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 2, *e = strchr(v, '\n');
            snprintf(buf, cap, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return buf;
        }
    }
    return NULL;
}
