/*
 * tests/integration/receiver.c — the scriptable HTTP test endpoint of the
 * integration tests (see receiver.h): libmicrohttpd with a thread per
 * connection, so that a delayed answer holds only its own connection.
 */
#include "receiver.h"

#include "core/buf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
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
    free(rx->v);
    pthread_mutex_destroy(&rx->lock);
    free(rx);
}

int rx_start(rx_receiver *rx, int port)
{
    if (rx->d || port < 0 || port > 65535)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, on_request, rx, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!d)
        return -1;
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    rx->port = i && i->port ? i->port : port;
    rx->d = d;
    return 0;
}

int rx_restart(rx_receiver *rx)
{
    return rx->port ? rx_start(rx, rx->port) : -1;
}

void rx_stop(rx_receiver *rx)
{
    if (rx->d)
        MHD_stop_daemon(rx->d);
    rx->d = NULL;
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
