/*
 * client/client.c — the public API of libsluice: opening and closing a client,
 * validating and queuing events, flush, and the bookkeeping every transport
 * shares (the hand-off to the I/O thread, delivery callbacks, the count of
 * unacknowledged bytes that bounds the queue).
 *
 * Locking: one mutex per client guards the incoming queue, the list of
 * unfinished messages and the counters. Senders append under it and wake the
 * I/O thread through a pipe (at most one byte per wake-up, not one per
 * event); the I/O thread takes the whole incoming queue at once. Callbacks
 * run without the lock, so they may call sl_client_send().
 */
#include "client_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MSG_OVERHEAD 100             /* what a queued message costs beyond its line, roughly */
#define FAILED_MAX ((size_t)1 << 20) /* failed ids kept for flush: 8 MiB */

/* ---- queues --------------------------------------------------------------------- */

void sl_client__q_push(sl_client_msgq *q, sl_client_msg *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->n++;
    q->bytes += m->line_len;
}

sl_client_msg *sl_client__q_pop(sl_client_msgq *q)
{
    sl_client_msg *m = q->head;
    if (!m)
        return NULL;
    q->head = m->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    q->bytes -= m->line_len;
    m->next = NULL;
    return m;
}

void sl_client__q_prepend(sl_client_msgq *q, sl_client_msgq *from)
{
    if (!from->head)
        return;
    from->tail->next = q->head;
    q->head = from->head;
    if (!q->tail)
        q->tail = from->tail;
    q->n += from->n;
    q->bytes += from->bytes;
    *from = (sl_client_msgq){0};
}

void sl_client__q_concat(sl_client_msgq *q, sl_client_msgq *from)
{
    if (!from->head)
        return;
    if (q->tail)
        q->tail->next = from->head;
    else
        q->head = from->head;
    q->tail = from->tail;
    q->n += from->n;
    q->bytes += from->bytes;
    *from = (sl_client_msgq){0};
}

/* ---- small helpers ---------------------------------------------------------------- */

int64_t sl_client__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sl_client__backoff(int cur)
{
    if (cur <= 0)
        return SL_CLIENT_BACKOFF_MIN_MS;
    return cur * 2 > SL_CLIENT_BACKOFF_MAX_MS ? SL_CLIENT_BACKOFF_MAX_MS : cur * 2;
}

int64_t sl_client__retry_at(int backoff_ms)
{
    /* ±20 % so that the clients of a restarted agent or server do not all
     * come back in the same millisecond. xorshift32: only the I/O thread
     * calls this, and the quality needed is low. */
    static _Thread_local uint32_t x;
    if (!x)
        x = (uint32_t)sl_client__now_ms() ^ (uint32_t)(uintptr_t)&x ^ 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    int span = backoff_ms * 2 / 5;
    int jitter = span ? (int)(x % (uint32_t)(span + 1)) - span / 2 : 0;
    return sl_client__now_ms() + backoff_ms + jitter;
}

const char *sl_client_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
#define SL_CLIENT_XX(name, value, text)                                                            \
    case value:                                                                                    \
        return text;
        SL_CLIENT_ERRNO_MAP(SL_CLIENT_XX)
#undef SL_CLIENT_XX
    default:
        return "unknown error";
    }
}

/* The code's name without the prefix ("ESHUTDOWN"), for callbacks that have
 * no server code to pass. */
static const char *code_name(int code)
{
    switch (code) {
#define SL_CLIENT_XX(name, value, text)                                                            \
    case value:                                                                                    \
        return #name;
        SL_CLIENT_ERRNO_MAP(SL_CLIENT_XX)
#undef SL_CLIENT_XX
    default:
        return "EUNKNOWN";
    }
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static bool valid_set(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char ch = s[n];
        bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
        if (!ok || n == SL_CLIENT_SET_MAX)
            return false;
    }
    /* A leading "." (so "." and "..", path segments) is never a set: the
     * server refuses it (docs/http-api.md). */
    return n > 0 && s[0] != '.';
}

/* A lane name; "" (base) is accepted. */
static bool valid_lane(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char ch = s[n];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-') ||
            n == SL_CLIENT_LANE_MAX)
            return false;
    }
    return true;
}

/* ---- open ------------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

/* libcurl wants one global init before any thread uses it; it is never undone
 * (curl_global_cleanup() is not safe while another library may still use it). */
static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Parses the address into c->kind/addr/tcp. Returns 0 or -1 with err set. */
static int parse_addr(sl_client *c, const char *a, char *err, size_t errlen)
{
    const char *path = NULL;
    if (strncmp(a, "http://", 7) == 0 || strncmp(a, "https://", 8) == 0) {
        size_t n = strlen(a);
        while (n && a[n - 1] == '/') /* "http://h:1/" + "/v1/…" would double the slash */
            n--;
        if (n >= sizeof c->addr || n <= (size_t)(a[4] == 's' ? 8 : 7)) {
            set_err(err, errlen, "invalid URL '%s'", a);
            return -1;
        }
        memcpy(c->addr, a, n);
        c->addr[n] = '\0';
        c->kind = SL_CLIENT_HTTP;
        return 0;
    }
    if (strncmp(a, "unix:", 5) == 0)
        path = a + 5;
    else if (a[0] == '/')
        path = a;
    if (path) {
        /* sun_path holds 108 bytes with the NUL on Linux. */
        if (!path[0] || strlen(path) >= 108) {
            set_err(err, errlen, "invalid socket path '%s' (1 to 107 bytes)", path);
            return -1;
        }
        snprintf(c->addr, sizeof c->addr, "%s", path);
        c->kind = SL_CLIENT_AGENT;
        return 0;
    }
    if (strncmp(a, "tcp:", 4) == 0) {
        const char *hp = a + 4, *colon = strrchr(hp, ':');
        if (!colon || colon == hp || !colon[1] || strlen(hp) >= sizeof c->addr ||
            strspn(colon + 1, "0123456789") != strlen(colon + 1) || atoi(colon + 1) <= 0 ||
            atoi(colon + 1) > 65535) {
            set_err(err, errlen, "invalid address '%s': want tcp:HOST:PORT", a);
            return -1;
        }
        snprintf(c->addr, sizeof c->addr, "%s", hp);
        c->kind = SL_CLIENT_AGENT;
        c->tcp = true;
        return 0;
    }
    set_err(err, errlen,
            "invalid address '%s': want http://HOST:PORT, https://…, unix:/PATH, /PATH "
            "or tcp:HOST:PORT",
            a);
    return -1;
}

static void *io_main(void *arg)
{
    sl_client *c = arg;
    switch (c->kind) {
    case SL_CLIENT_HTTP:
        sl_client__http_run(c);
        break;
    case SL_CLIENT_AGENT:
        sl_client__agent_run(c);
        break;
    }
    return NULL;
}

sl_client *sl_client_open_opts(const char *url_or_socket, const sl_client_options *o, char *err,
                               size_t errlen)
{
    static const sl_client_options defaults = {0};
    if (!o)
        o = &defaults;
    if (!url_or_socket) {
        set_err(err, errlen, "no address");
        return NULL;
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        set_err(err, errlen, "libcurl: %s", curl_easy_strerror(curl_init_rc));
        return NULL;
    }
    sl_client *c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    c->wake_rd = c->wake_wr = -1;
    if (parse_addr(c, url_or_socket, err, errlen) < 0)
        goto fail_mem;
    const char *lane = o->lane;
    const char *from = "options.lane";
    if (!lane) {
        lane = getenv("SLUICE_LANE");
        from = "SLUICE_LANE";
    }
    if (lane && !valid_lane(lane)) {
        set_err(err, errlen, "%s: invalid lane '%s' (want [a-z0-9-]{1,32})", from, lane);
        goto fail_mem;
    }
    snprintf(c->lane, sizeof c->lane, "%s", lane ? lane : "");
    c->on_delivery = o->on_delivery;
    c->opaque = o->opaque;
    c->queue_bytes = o->queue_bytes ? o->queue_bytes : (size_t)64 << 20;
    c->batch_bytes = o->batch_bytes ? o->batch_bytes : (size_t)1 << 20;
    c->linger_ms = o->linger_ms > 0 ? o->linger_ms : o->linger_ms < 0 ? 0 : 5;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    c->next_id = 1;

    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) {
        set_err(err, errlen, "pipe: %s", strerror(errno));
        goto fail_mem;
    }
    c->wake_rd = fds[0];
    c->wake_wr = fds[1];
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* flush deadlines ignore clock jumps */
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&c->thread, NULL, io_main, c);
    if (rc != 0) {
        set_err(err, errlen, "cannot start the I/O thread: %s", strerror(rc));
        goto fail_sync;
    }
    return c;

fail_sync:
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
fail_mem:
    if (c->wake_rd >= 0)
        close(c->wake_rd);
    if (c->wake_wr >= 0)
        close(c->wake_wr);
    free(c);
    return NULL;
}

sl_client *sl_client_open(const char *url_or_socket)
{
    return sl_client_open_opts(url_or_socket, NULL, NULL, 0);
}

/* ---- send, flush -------------------------------------------------------------------- */

/* Wakes the I/O thread. Call with the lock held; returns whether the caller
 * must write the byte (after unlocking: a full pipe must not stall others). */
static bool need_wake(sl_client *c)
{
    if (c->wake_pending)
        return false;
    c->wake_pending = true;
    return true;
}

static void wake(sl_client *c)
{
    char b = 1;
    /* EAGAIN means the pipe is full, so the thread will wake anyway. */
    while (write(c->wake_wr, &b, 1) < 0 && errno == EINTR)
        ;
}

int64_t sl_client_send(sl_client *c, const char *set, const char *json, const char *lane)
{
    if (!c || !set || !json || !valid_set(set))
        return SL_CLIENT_EINVAL;
    if (!lane)
        lane = c->lane;
    if (!valid_lane(lane))
        return SL_CLIENT_EINVAL;
    size_t jn = strlen(json);
    /* The wire form: the event alone for HTTP (the set and lane travel in the
     * URL and a header); wrapped for the agent. Names need no escaping: their
     * characters were just checked. */
    size_t extra = 1; /* '\n' */
    if (c->kind == SL_CLIENT_AGENT)
        extra += strlen(set) + strlen(lane) + 32;
    sl_client_msg *m = malloc(sizeof *m + jn + extra + 1);
    if (!m)
        return SL_CLIENT_ENOMEM;
    char *w = m->line;
    if (c->kind == SL_CLIENT_AGENT)
        w += sprintf(w, "{\"set\":\"%s\",\"event\":", set);
    if (sl_client__json_copy_object(json, jn, w) < 0) {
        free(m);
        return SL_CLIENT_EINVAL;
    }
    w += jn;
    if (c->kind == SL_CLIENT_AGENT)
        w += lane[0] ? sprintf(w, ",\"lane\":\"%s\"}", lane) : sprintf(w, "}");
    *w++ = '\n';
    m->line_len = (size_t)(w - m->line);
    m->cost = m->line_len + MSG_OVERHEAD;
    snprintf(m->set, sizeof m->set, "%s", set);
    snprintf(m->lane, sizeof m->lane, "%s", lane);

    pthread_mutex_lock(&c->lock);
    if (c->closing) {
        pthread_mutex_unlock(&c->lock);
        free(m);
        return SL_CLIENT_ESHUTDOWN;
    }
    if (c->queued + m->cost > c->queue_bytes) {
        pthread_mutex_unlock(&c->lock);
        free(m);
        return SL_CLIENT_EFULL;
    }
    c->queued += m->cost;
    m->id = c->next_id++;
    m->onext = NULL;
    m->oprev = c->otail;
    if (c->otail)
        c->otail->onext = m;
    else
        c->ohead = m;
    c->otail = m;
    sl_client__q_push(&c->incoming, m);
    int64_t id = (int64_t)m->id;
    bool w8 = need_wake(c);
    pthread_mutex_unlock(&c->lock);
    if (w8)
        wake(c);
    return id;
}

int sl_client_flush(sl_client *c, int timeout_ms)
{
    if (!c)
        return SL_CLIENT_EINVAL;
    /* From a delivery callback it would wait for that very callback to
     * return: refuse rather than hang. c->thread is set before any event can
     * be sent, hence before any callback runs. */
    if (pthread_equal(pthread_self(), c->thread))
        return SL_CLIENT_EINVAL;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    if (timeout_ms >= 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
    }
    pthread_mutex_lock(&c->lock);
    uint64_t upto = c->next_id - 1;
    c->flushers++;
    bool w8 = need_wake(c); /* so that lingering batches go now */
    pthread_mutex_unlock(&c->lock);
    if (w8)
        wake(c);

    int rc = 0;
    pthread_mutex_lock(&c->lock);
    while (c->ohead && c->ohead->id <= upto) {
        int e = timeout_ms >= 0 ? pthread_cond_timedwait(&c->cond, &c->lock, &dl)
                                : pthread_cond_wait(&c->cond, &c->lock);
        if (e == ETIMEDOUT && c->ohead && c->ohead->id <= upto) {
            rc = SL_CLIENT_ETIMEDOUT;
            break;
        }
    }
    c->flushers--;
    if (rc == 0) {
        /* Every message up to upto is finished, so all their failures are in
         * the list: count and drop them. */
        size_t k = 0;
        for (size_t i = 0; i < c->nfailed; i++) {
            if (c->failed[i] <= upto)
                rc++;
            else
                c->failed[k++] = c->failed[i];
        }
        c->nfailed = k;
        rc += (int)c->failed_lost;
        c->failed_lost = 0;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- the I/O thread's side ----------------------------------------------------------- */

void sl_client__take(sl_client *c, sl_client_msgq *q, sl_client_take *t)
{
    char buf[64];
    pthread_mutex_lock(&c->lock);
    c->wake_pending = false;
    /* Emptied under the lock: a sender that sets wake_pending after this
     * writes a new byte, so no wake-up is lost. */
    while (read(c->wake_rd, buf, sizeof buf) > 0)
        ;
    sl_client__q_concat(q, &c->incoming);
    t->flushing = c->flushers > 0;
    t->stopping = c->stopping;
    pthread_mutex_unlock(&c->lock);
}

void sl_client__done(sl_client *c, sl_client_msg *m, int status, const char *error,
                     const char *message)
{
    if (status != 0) {
        if (!error)
            error = code_name(status);
        if (!message)
            message = sl_client_strerror(status);
    } else {
        error = message = NULL;
    }
    if (c->on_delivery)
        c->on_delivery(c->opaque, m->id, status, error, message);
    pthread_mutex_lock(&c->lock);
    if (m->oprev)
        m->oprev->onext = m->onext;
    else
        c->ohead = m->onext;
    if (m->onext)
        m->onext->oprev = m->oprev;
    else
        c->otail = m->oprev;
    c->queued -= m->cost;
    if (status != 0) {
        /* Kept until a flush counts them; past FAILED_MAX (no flush for a
         * long time) only their number is kept, counted by the next flush. */
        if (c->nfailed == c->capfailed && c->capfailed < FAILED_MAX) {
            size_t cap = c->capfailed ? c->capfailed * 2 : 64;
            uint64_t *v = realloc(c->failed, cap * sizeof *v);
            if (v) {
                c->failed = v;
                c->capfailed = cap;
            }
        }
        if (c->nfailed < c->capfailed)
            c->failed[c->nfailed++] = m->id;
        else
            c->failed_lost++; /* counted by the next flush, whichever it is */
    }
    /* Wake the flushers only when the oldest message changed: that is all
     * they wait for. */
    bool oldest = m->oprev == NULL;
    pthread_mutex_unlock(&c->lock);
    if (oldest)
        pthread_cond_broadcast(&c->cond);
    free(m);
}

void sl_client__done_all(sl_client *c, sl_client_msgq *q, int status, const char *error,
                         const char *message)
{
    sl_client_msg *m;
    while ((m = sl_client__q_pop(q)))
        sl_client__done(c, m, status, error, message);
}

/* ---- close ---------------------------------------------------------------------------- */

void sl_client_close(sl_client *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->closing = true;
    pthread_mutex_unlock(&c->lock);
    sl_client_flush(c, c->timeout_ms);
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    bool w8 = need_wake(c);
    pthread_mutex_unlock(&c->lock);
    if (w8)
        wake(c);
    pthread_join(c->thread, NULL);
    /* The thread failed everything it held; the incoming queue is empty since
     * closing refuses sends, and it took the last ones before returning. */
    sl_client__done_all(c, &c->incoming, SL_CLIENT_ESHUTDOWN, NULL, NULL);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    close(c->wake_rd);
    close(c->wake_wr);
    free(c->failed);
    free(c);
}
