/*
 * kafka/klisten.c — the listener's I/O threads: accepting, framing, bounded
 * buffers, idle timeouts, in-order responses and zero-copy file parts.
 *
 * Every thread has its own epoll set and eventfd; the listening socket is in
 * every set with EPOLLEXCLUSIVE, so a connection belongs to the thread that
 * accepted it and all its state is touched by that thread only. The one
 * cross-thread path is sl_kreq_post(): it pushes the request on its
 * thread's posted list under a mutex and writes the eventfd.
 *
 * Per connection: one frame is read at a time into a buffer grown to the
 * frame's announced size (never more than max_request_bytes: a larger size
 * closes the connection), so memory per connection is bounded by the
 * largest request plus the responses it has queued. Requests queue in
 * arrival order; the head's response goes out once it is done, so responses
 * leave in request order whatever order handlers finish in. Reading pauses
 * while more than MAX_INFLIGHT requests, or MAX_QUEUED bytes of them, are
 * queued (a client that pipelines without reading its answers fills its
 * socket buffer, not our memory).
 */
#include "kafka/kafka_internal.h"
#include "kafka/ktls.h"

#include "core/base/clock.h"
#include "core/base/slog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_INFLIGHT 64
#define MAX_QUEUED (64u << 20)
#define READ_CHUNK 65536

typedef struct kthread kthread;

typedef struct kconn {
    int fd;
    kthread *t;
    char peer[64];
    sl_kconn_auth auth;
    int64_t last_ns;
    /* The frame being read: its 4-byte size, then the frame. */
    uint8_t szbuf[4];
    size_t szgot;
    uint8_t *frame;
    size_t flen, fgot;
    /* Requests in arrival order; head is answered first. */
    sl_kreq *head, *tail;
    size_t nq;
    size_t q_bytes; /* frame bytes of the queued requests */
    /* The head's response being sent: its frame header, then pieces. */
    uint8_t hdr[16];
    size_t hdr_len;
    bool sending;
    size_t piece;   /* 0: hdr, then odd: memory, even: file, in order */
    uint64_t sent;  /* bytes of the current piece sent */
    bool closed;    /* closed: freed once no orphan is outstanding */
    size_t orphans; /* pending requests whose post is still coming */
    bool want_out;  /* EPOLLOUT registered */
    /* TLS (server.tls_cert): the session, and what it waits for. */
    void *ssl;
    bool tls_rd_out; /* a read waits for the socket to take bytes (handshake) */
    bool tls_wr_in;  /* a write waits for bytes from the peer (handshake) */
    bool tls_more;   /* decrypted bytes wait in the session: read again */
    uint8_t *scratch; /* file parts are read here to be encrypted */
    /* The frame buffer of the last request answered, for the next frame
     * (a producer's requests are alike in size: no malloc, no page faults
     * for each). */
    uint8_t *spare;
    size_t spare_cap;
    struct kconn *prev, *next;
} kconn;

struct kthread {
    sl_kafka *k;
    pthread_t tid;
    int ep, evfd;
    pthread_mutex_t mu;
    sl_kreq *posted; /* under mu */
    kconn *conns;
    size_t tls_more; /* connections with tls_more set */
    bool started;
    _Atomic size_t orphans; /* over all its connections */
};

struct sl_klisten {
    int lfd;
    sl_ktls *tls; /* NULL: plain TCP */
    kthread *t;
    unsigned nt;
};

sl_kconn_auth *sl__klisten_auth(void *conn)
{
    return conn ? &((kconn *)conn)->auth : NULL;
}

/* ---- posting -------------------------------------------------------------- */

static void post(void *connp, sl_kreq *r)
{
    kthread *t = ((kconn *)connp)->t;
    pthread_mutex_lock(&t->mu);
    r->next_post = t->posted;
    t->posted = r;
    pthread_mutex_unlock(&t->mu);
    uint64_t one = 1;
    ssize_t n = write(t->evfd, &one, sizeof one);
    (void)n; /* a full counter already wakes the thread */
}

/* ---- connections ---------------------------------------------------------- */

static void conn_free(kconn *c)
{
    free(c->frame);
    free(c->scratch);
    free(c->spare);
    free(c);
}

#define SPARE_MAX (16u << 20) /* larger frame buffers are not kept */

/* Whether c reads no more frames until answers went out. */
static bool paused(const kconn *c)
{
    return c->nq >= MAX_INFLIGHT || c->q_bytes >= MAX_QUEUED;
}

/* Frees an answered request, keeping its frame buffer as c's spare. */
static void req_done(kconn *c, sl_kreq *r)
{
    c->q_bytes -= r->in_len;
    if (r->cleanup) { /* first: the handler's state may point into the frame */
        r->cleanup(r);
        r->cleanup = NULL;
    }
    if (r->in && r->in_len <= SPARE_MAX && r->in_len > c->spare_cap) {
        free(c->spare);
        c->spare = r->in;
        c->spare_cap = r->in_len;
        r->in = NULL;
    }
    sl__kreq_free(r);
}

/* Marks c to be read again by its thread (TLS: bytes epoll cannot see). */
static void more(kconn *c, bool on)
{
    if (c->tls_more == on)
        return;
    c->tls_more = on;
    if (on)
        c->t->tls_more++;
    else
        c->t->tls_more--;
}

static void update_events(kconn *c)
{
    bool want = c->sending || c->tls_rd_out;
    bool pause = paused(c);
    if (!pause && sl__ktls_pending(c->ssl))
        more(c, true);
    struct epoll_event ev = {.events = (want ? EPOLLOUT : 0) | (pause ? 0 : EPOLLIN) | EPOLLRDHUP,
                             .data.ptr = c};
    epoll_ctl(c->t->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = want;
}

/* Closes c: pending requests are cancelled (those whose post is still
 * coming are orphans, freed when it comes), the socket closed. */
static void conn_close(kconn *c)
{
    if (c->closed)
        return;
    c->closed = true;
    sl_kafka *k = c->t->k;
    epoll_ctl(c->t->ep, EPOLL_CTL_DEL, c->fd, NULL);
    more(c, false);
    sl__ktls_conn_free(c->ssl);
    c->ssl = NULL;
    close(c->fd);
    c->fd = -1;
    for (sl_kreq *r = c->head, *nx; r; r = nx) {
        nx = r->next;
        r->next = NULL;
        if (r->state_code == SL_KREQ_PENDING && r->cancel && !r->cancel(r)) {
            r->conn = c; /* its post finds us */
            r->state_code = -1; /* orphan */
            c->orphans++;
            atomic_fetch_add(&c->t->orphans, 1);
            continue;
        }
        sl__kreq_free(r);
    }
    c->head = c->tail = NULL;
    c->nq = 0;
    c->q_bytes = 0;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->t->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    atomic_fetch_add(&k->stats.closed, 1);
    atomic_fetch_sub(&k->stats.open, 1);
    if (!c->orphans)
        conn_free(c);
}

/* ---- sending -------------------------------------------------------------- */

/* Piece i of r's response after the header: memory pieces are odd
 * (between file parts), file parts even. Returns false past the end. */
static bool piece_at(const sl_kreq *r, size_t i, const uint8_t **mem, int *fd, uint64_t *off,
                     uint64_t *len)
{
    size_t f = (i - 1) / 2; /* i = 1 + 2f: memory before file f; i = 2 + 2f: file f */
    if (i % 2 == 1) {
        size_t from = f == 0 ? 0 : r->files[f - 1].at;
        size_t to = f < r->nfiles ? r->files[f].at : r->out.len;
        if (f > r->nfiles)
            return false;
        *mem = r->out.data + from;
        *fd = -1;
        *len = to - from;
        return true;
    }
    if (f >= r->nfiles)
        return false;
    *mem = NULL;
    *fd = r->files[f].slice.fd;
    *off = r->files[f].slice.pos;
    *len = r->files[f].slice.len;
    return true;
}

/* Starts sending the head's response if it is done. */
static void start_head(kconn *c)
{
    sl_kreq *r = c->head;
    while (r && r->state_code == SL_KREQ_DONE && r->silent) { /* acks=0: nothing goes out */
        c->head = r->next;
        if (!c->head)
            c->tail = NULL;
        c->nq--;
        req_done(c, r);
        r = c->head;
    }
    if (!r || r->state_code != SL_KREQ_DONE || c->sending)
        return;
    sl_buf hb = {0};
    sl_kw w;
    sl_kw_init(&w, &hb);
    sl_kp_resp_header(&w, &r->h);
    size_t total = hb.len + sl_kreq_size(r);
    if (!sl_kw_ok(&w) || hb.len + 4 > sizeof c->hdr || total > INT32_MAX) {
        sl_buf_free(&hb);
        conn_close(c);
        return;
    }
    uint32_t be = htonl((uint32_t)total);
    memcpy(c->hdr, &be, 4);
    memcpy(c->hdr + 4, hb.data, hb.len);
    c->hdr_len = 4 + hb.len;
    sl_buf_free(&hb);
    c->sending = true;
    c->piece = 0;
    c->sent = 0;
}

/* Sends what can be sent now. Returns false when c was closed. */
static bool send_some(kconn *c)
{
    sl_kafka *k = c->t->k;
    for (;;) {
        start_head(c);
        if (c->closed)
            return false;
        if (!c->sending)
            break;
        sl_kreq *r = c->head;
        const uint8_t *mem = c->hdr;
        int fd = -1;
        uint64_t off = 0, len = c->hdr_len;
        if (c->piece > 0 && !piece_at(r, c->piece, &mem, &fd, &off, &len)) {
            /* the whole response went out */
            c->head = r->next;
            if (!c->head)
                c->tail = NULL;
            c->nq--;
            c->sending = false;
            req_done(c, r);
            continue;
        }
        if (c->sent >= len) {
            c->piece++;
            c->sent = 0;
            continue;
        }
        ssize_t n;
        if (c->ssl) {
            size_t want = (size_t)(len - c->sent);
            const uint8_t *from = mem + c->sent;
            if (fd >= 0) { /* no sendfile through TLS: via a buffer */
                if (want > READ_CHUNK)
                    want = READ_CHUNK;
                if (!c->scratch && !(c->scratch = malloc(READ_CHUNK))) {
                    conn_close(c);
                    return false;
                }
                n = pread(fd, c->scratch, want, (off_t)(off + c->sent));
                if (n <= 0) {
                    conn_close(c);
                    return false;
                }
                want = (size_t)n;
                from = c->scratch;
            }
            n = sl__ktls_send(c->ssl, from, want, &c->tls_wr_in);
        } else if (fd < 0) {
            n = send(c->fd, mem + c->sent, (size_t)(len - c->sent), MSG_NOSIGNAL);
        } else {
            off_t o = (off_t)(off + c->sent);
            n = sendfile(c->fd, fd, &o, (size_t)(len - c->sent));
            if (n > 0)
                atomic_fetch_add(&k->stats.sendfile_bytes, (uint64_t)n);
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n <= 0) {
            conn_close(c);
            return false;
        }
        atomic_fetch_add(&k->stats.bytes_out, (uint64_t)n);
        c->sent += (uint64_t)n;
    }
    if (c->want_out != c->sending || !paused(c))
        update_events(c);
    return true;
}

/* ---- requests ------------------------------------------------------------- */

static void run(kconn *c, sl_kreq *r, sl_kapi_fn *fn)
{
    int code = fn(r);
    if (code == SL_KREQ_CLOSE || (code == SL_KREQ_DONE && !sl_kw_ok(&r->w))) {
        if (code == SL_KREQ_DONE)
            sl__kafka_log_once(r, "kafka: out of memory answering %s from %s",
                               sl_kp_api_name(r->h.key, (char[16]){0}), r->peer);
        atomic_fetch_add(&c->t->k->stats.bad_frames, 1);
        r->state_code = SL_KREQ_DONE; /* freed with the connection */
        conn_close(c);
        return;
    }
    r->state_code = code;
}

/* A whole frame arrived: becomes a request at the queue's tail. */
static void on_frame(kconn *c, uint8_t *frame, size_t len)
{
    sl_kafka *k = c->t->k;
    bool bad = false;
    sl_kreq *r = sl__kreq_new(k, c, c->peer, frame, len, &bad);
    if (!r) {
        if (bad) {
            sl_kreq tmp = {.k = k};
            snprintf(tmp.peer, sizeof tmp.peer, "%s", c->peer);
            sl__kafka_log_once(&tmp, "kafka: %s sent a malformed request header: closed",
                               c->peer);
            atomic_fetch_add(&k->stats.bad_frames, 1);
        }
        conn_close(c);
        return;
    }
    r->key = c->auth.key;
    if (r->h.key >= 0 && r->h.key <= SL_KAPI_MAX)
        atomic_fetch_add(&k->stats.requests[r->h.key], 1);
    r->state_code = SL_KREQ_PENDING; /* while the handler runs */
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    c->nq++;
    c->q_bytes += r->in_len;
    run(c, r, sl__kapi_dispatch);
}

/* Reads what is there. Returns false when c was closed. */
static bool read_some(kconn *c)
{
    sl_kafka *k = c->t->k;
    more(c, false);
    for (int rounds = 0; rounds < 16 && !c->closed && !paused(c); rounds++) {
        ssize_t n;
        uint8_t *to;
        size_t want;
        if (c->szgot < 4) {
            to = c->szbuf + c->szgot;
            want = 4 - c->szgot;
        } else {
            to = c->frame + c->fgot;
            want = c->flen - c->fgot < READ_CHUNK ? c->flen - c->fgot : READ_CHUNK;
        }
        if (c->ssl) {
            bool rd_out = false;
            n = sl__ktls_recv(c->ssl, to, want, &rd_out);
            if (rd_out != c->tls_rd_out) {
                c->tls_rd_out = rd_out;
                update_events(c);
            }
        } else {
            n = recv(c->fd, to, want, 0);
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        if (n <= 0) {
            conn_close(c);
            return false;
        }
        atomic_fetch_add(&k->stats.bytes_in, (uint64_t)n);
        c->last_ns = sl_clock_mono_ns();
        if (c->szgot < 4) {
            c->szgot += (size_t)n;
            if (c->szgot < 4)
                continue;
            uint32_t be;
            memcpy(&be, c->szbuf, 4);
            int32_t size = (int32_t)ntohl(be);
            if (size < 8 || (uint64_t)size > k->o.max_request_bytes) {
                sl_kreq tmp = {.k = k};
                snprintf(tmp.peer, sizeof tmp.peer, "%s", c->peer);
                sl__kafka_log_once(&tmp,
                                   "kafka: %s sent a frame of %d bytes (the limit is %llu, "
                                   "the least 8): closed",
                                   c->peer, size, (unsigned long long)k->o.max_request_bytes);
                atomic_fetch_add(&k->stats.bad_frames, 1);
                conn_close(c);
                return false;
            }
            c->flen = (size_t)size;
            c->fgot = 0;
            if (c->spare && c->spare_cap >= c->flen) {
                c->frame = c->spare;
                c->spare = NULL;
                c->spare_cap = 0;
            } else if (!(c->frame = malloc(c->flen))) {
                conn_close(c);
                return false;
            }
            continue;
        }
        c->fgot += (size_t)n;
        if (c->fgot == c->flen) {
            uint8_t *f = c->frame;
            size_t fl = c->flen;
            c->frame = NULL;
            c->szgot = 0;
            on_frame(c, f, fl);
            if (c->closed)
                return false;
            if (!send_some(c))
                return false;
        }
    }
    if (paused(c))
        update_events(c);
    else if (!c->closed && sl__ktls_pending(c->ssl))
        more(c, true); /* stopped after 16 rounds: the rest next turn */
    return true;
}

/* Posted requests: resume them (or free an orphan's). */
static void drain_posts(kthread *t)
{
    pthread_mutex_lock(&t->mu);
    sl_kreq *list = t->posted;
    t->posted = NULL;
    pthread_mutex_unlock(&t->mu);
    /* Posted in reverse; order among them does not matter (responses are
     * ordered by the queue), but resume oldest first for fairness. */
    sl_kreq *rev = NULL;
    while (list) {
        sl_kreq *nx = list->next_post;
        list->next_post = rev;
        rev = list;
        list = nx;
    }
    for (sl_kreq *r = rev, *nx; r; r = nx) {
        nx = r->next_post;
        r->next_post = NULL;
        kconn *c = r->conn;
        if (r->state_code == -1) { /* its connection closed */
            sl__kreq_free(r);
            atomic_fetch_sub(&t->orphans, 1);
            if (--c->orphans == 0 && c->closed)
                conn_free(c);
            continue;
        }
        if (c->closed || r->state_code != SL_KREQ_PENDING || !r->resume)
            continue;
        run(c, r, r->resume);
        if (!c->closed)
            send_some(c);
    }
}

static void accept_all(kthread *t, int lfd)
{
    sl_kafka *k = t->k;
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (atomic_load(&k->stats.open) >= k->o.max_connections || atomic_load(&k->stopping)) {
            close(fd);
            continue;
        }
        kconn *c = calloc(1, sizeof *c);
        if (!c || (k->l->tls && !(c->ssl = sl__ktls_conn(k->l->tls, fd)))) {
            free(c);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->t = t;
        c->last_ns = sl_clock_mono_ns();
        char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
        getnameinfo((struct sockaddr *)&sa, sl, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV);
        snprintf(c->peer, sizeof c->peer, "%s:%s", host, serv);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            sl__ktls_conn_free(c->ssl);
            close(fd);
            free(c);
            continue;
        }
        c->next = t->conns;
        if (t->conns)
            t->conns->prev = c;
        t->conns = c;
        atomic_fetch_add(&k->stats.accepted, 1);
        atomic_fetch_add(&k->stats.open, 1);
    }
}

/* Closes connections idle longer than the timeout (none of their requests
 * in flight: a long-poll or a join parked on purpose is not idleness). */
static void sweep_idle(kthread *t, int64_t now)
{
    int64_t idle = (int64_t)t->k->o.idle_timeout_s * 1000000000ll;
    for (kconn *c = t->conns, *nx; c; c = nx) {
        nx = c->next;
        if (!c->head && now - c->last_ns > idle)
            conn_close(c);
    }
}

static void *thread_main(void *arg)
{
    kthread *t = arg;
    sl_kafka *k = t->k;
    int lfd = k->l->lfd;
    struct epoll_event evs[64];
    int64_t last_sweep = sl_clock_mono_ns();
    while (!atomic_load(&k->stopping)) {
        int n = epoll_wait(t->ep, evs, 64, t->tls_more ? 0 : 1000);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &k->l->lfd) {
                accept_all(t, lfd);
            } else if (p == t) {
                uint64_t v;
                ssize_t rn = read(t->evfd, &v, sizeof v);
                (void)rn;
                drain_posts(t);
            } else {
                kconn *c = p;
                if (c->closed)
                    continue;
                uint32_t e = evs[i].events;
                /* A TLS handshake may turn the directions round: a read
                 * that waits to write, a write that waits to read. */
                bool rd = (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ||
                          ((e & EPOLLOUT) && c->tls_rd_out);
                bool wr = (e & EPOLLOUT) || ((e & EPOLLIN) && c->tls_wr_in);
                if (wr && !send_some(c))
                    continue;
                if (rd)
                    read_some(c);
            }
        }
        for (kconn *c = t->tls_more ? t->conns : NULL, *nx; c; c = nx) {
            nx = c->next; /* read_some may close c */
            if (c->tls_more)
                read_some(c);
        }
        int64_t now = sl_clock_mono_ns();
        if (now - last_sweep > 1000000000ll) {
            sweep_idle(t, now);
            last_sweep = now;
        }
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------- */

static int listen_on(sl_kafka *k, sl_error *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", k->o.port);
    int g = getaddrinfo(k->host[0] ? k->host : NULL, port, &hints, &ai);
    if (g)
        return sl_error_set(err, SL_EINVAL, "kafka_listen %s:%s: %s", k->host, port,
                            gai_strerror(g));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    int rc = 0;
    if (fd < 0) {
        rc = sl_error_errno(err, errno, "kafka_listen: socket");
    } else {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 512) != 0) {
            rc = sl_error_errno(err, errno, "kafka_listen %s:%s", k->host, port);
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (rc)
        return rc;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    k->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    k->l->lfd = fd;
    return 0;
}

int sl__klisten_start(sl_kafka *k, sl_error *err)
{
    struct sl_klisten *l = calloc(1, sizeof *l);
    if (!l)
        return SL_ENOMEM;
    l->lfd = -1;
    k->l = l;
    k->post = post;
    unsigned nt = k->o.threads ? k->o.threads : 2;
    int rc = k->o.tls_cert ? sl__ktls_new(k->o.tls_cert, k->o.tls_key, &l->tls, err) : 0;
    if (!rc)
        rc = listen_on(k, err);
    if (!rc && !(l->t = calloc(nt, sizeof *l->t)))
        rc = SL_ENOMEM;
    for (unsigned i = 0; !rc && i < nt; i++) {
        kthread *t = &l->t[i];
        t->k = k;
        t->ep = t->evfd = -1;
        pthread_mutex_init(&t->mu, NULL);
        t->ep = epoll_create1(EPOLL_CLOEXEC);
        t->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        l->nt = i + 1;
        struct epoll_event le = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &l->lfd};
        struct epoll_event ee = {.events = EPOLLIN, .data.ptr = t};
        if (t->ep < 0 || t->evfd < 0 || epoll_ctl(t->ep, EPOLL_CTL_ADD, l->lfd, &le) != 0 ||
            epoll_ctl(t->ep, EPOLL_CTL_ADD, t->evfd, &ee) != 0) {
            rc = sl_error_errno(err, errno, "kafka listener: epoll");
            break;
        }
        if (pthread_create(&t->tid, NULL, thread_main, t) != 0) {
            rc = sl_error_set(err, SL_ENOMEM, "kafka listener: cannot start a thread");
            break;
        }
        t->started = true;
    }
    if (rc)
        sl__klisten_stop(k);
    return rc;
}

void sl__klisten_stop(sl_kafka *k)
{
    struct sl_klisten *l = k->l;
    if (!l)
        return;
    atomic_store(&k->stopping, true);
    for (unsigned i = 0; i < l->nt; i++)
        if (l->t[i].started) {
            uint64_t one = 1;
            ssize_t n = write(l->t[i].evfd, &one, sizeof one);
            (void)n;
            pthread_join(l->t[i].tid, NULL);
            l->t[i].started = false; /* a second stop joins nothing */
        }
    /* The threads are gone: close what they had; a post still coming for
     * an orphan (a durable Produce the Databus completes at its stop) has
     * to be waited for by the caller (sl_kafka_stop drains posts). */
    for (unsigned i = 0; i < l->nt; i++) {
        kthread *t = &l->t[i];
        while (t->conns)
            conn_close(t->conns);
    }
    if (l->lfd >= 0)
        close(l->lfd);
    l->lfd = -1;
}

/* After the modules that post were stopped: frees what was posted late. */
void sl__klisten_free(sl_kafka *k)
{
    struct sl_klisten *l = k->l;
    if (!l)
        return;
    /* Orphans (requests of closed connections whose post is still coming:
     * a durable Produce waits for its fsync) are waited for a bounded while;
     * the Databus still runs, so they come within milliseconds. */
    for (int tries = 0; tries < 1000; tries++) {
        size_t left = 0;
        for (unsigned i = 0; i < l->nt; i++) {
            drain_posts(&l->t[i]);
            left += atomic_load(&l->t[i].orphans);
        }
        if (!left)
            break;
        usleep(10000);
    }
    for (unsigned i = 0; i < l->nt; i++) {
        kthread *t = &l->t[i];
        if (t->ep >= 0)
            close(t->ep);
        if (t->evfd >= 0)
            close(t->evfd);
        pthread_mutex_destroy(&t->mu);
    }
    free(l->t);
    sl__ktls_free(l->tls);
    free(l);
    k->l = NULL;
}
