/*
 * client/client_agent.c — the agent transport of libsluice: the I/O thread
 * that writes events to the local Databus agent (`sluice databus`) over a UNIX
 * or TCP socket.
 *
 * The protocol (docs/agent.md): the client writes NDJSON lines
 * {"set":S,"event":E[,"lane":L]}; the agent answers exactly one line per input
 * line, in order, {"seq":N,"ok":true} or {"seq":N,"ok":false,"error":C,
 * "message":M}, N counting the lines of the connection from 1. Lines are
 * pipelined: the client writes without waiting, keeps the written messages in
 * order, and pops one per ack.
 *
 * When the connection fails (refused, not established within timeout_ms,
 * closed, stalled, an answer that does not fit the protocol), every message
 * written but not acknowledged goes back to the front of the queue and is
 * written again on the next connection, after a back-off: at-least-once
 * delivery.
 *
 * A slow agent is not a dead one. The agent answers a line only once upstream
 * stored it or it spooled it (up to the upstream request timeout, 10 s, plus
 * spool_after, 1 s, later), and it applies back-pressure by not reading. So
 * the connection is given up only when it stalls: lines await their answers,
 * everything is written (the socket is not merely full), and no byte has been
 * read from it and none taken by it for stall_ms() (at least a minute).
 * Resending on a live but slow connection would only store everything twice.
 */
#include "client_internal.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define IN_MAX 65536 /* longest ack line: the agent's messages are short */

int sl_client__agent_stall_min_ms = 60000;

typedef struct agent {
    sl_client *c;
    int fd; /* -1 when not connected */
    bool connecting;
    int64_t conn_start_ms;
    sl_client_msgq unsent; /* not written on this connection, oldest first */
    sl_client_msgq sent;   /* written (maybe partly), waiting for their acks */
    char *out;             /* lines of sent still to write: out[opos..olen) */
    size_t olen, ocap, opos;
    char in[IN_MAX];
    size_t ilen;
    uint64_t seq;        /* acks read on this connection */
    int64_t progress_ms; /* last byte read from or written to the connection */
    int backoff_ms;
    int64_t retry_at_ms;
} agent;

/* How long a connection may make no progress while lines await answers. */
static int64_t stall_ms(const sl_client *c)
{
    return c->timeout_ms > sl_client__agent_stall_min_ms ? c->timeout_ms
                                                         : sl_client__agent_stall_min_ms;
}

/* Drops the connection: everything not acknowledged is written again on the
 * next one, after a back-off. */
static void drop(agent *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    a->connecting = false;
    sl_client__q_prepend(&a->unsent, &a->sent);
    a->olen = a->opos = a->ilen = 0;
    a->seq = 0;
    a->backoff_ms = sl_client__backoff(a->backoff_ms);
    a->retry_at_ms = sl_client__retry_at(a->backoff_ms);
}

/* Starts connecting; on failure backs off (drop()). */
static void connect_start(agent *a)
{
    sl_client *c = a->c;
    int fd = -1, rc;
    if (!c->tcp) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", c->addr);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    } else {
        /* HOST:PORT, HOST maybe [v6]. The lookup blocks this thread, which only
         * delays this client's own I/O: the agent is meant to be local. */
        char host[SL_CLIENT_ADDR_MAX];
        snprintf(host, sizeof host, "%s", c->addr);
        char *colon = strrchr(host, ':');
        *colon = '\0';
        char *h = host;
        if (h[0] == '[' && colon > h + 1 && colon[-1] == ']') {
            h++;
            colon[-1] = '\0';
        }
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
        rc = getaddrinfo(h, colon + 1, &hints, &ai);
        if (rc == 0 && ai) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
            rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
        } else {
            rc = -1;
        }
        if (ai)
            freeaddrinfo(ai);
    }
    a->fd = fd;
    if (rc < 0 && (fd < 0 || errno != EINPROGRESS)) {
        drop(a);
        return;
    }
    a->connecting = rc < 0;
    a->conn_start_ms = sl_client__now_ms();
    a->progress_ms = a->conn_start_ms;
}

/* Moves unsent messages into the output buffer, up to batch_bytes pending. */
static void fill(agent *a)
{
    if (a->opos == a->olen)
        a->opos = a->olen = 0;
    while (a->unsent.head && a->olen - a->opos < a->c->batch_bytes) {
        sl_client_msg *m = a->unsent.head;
        if (a->olen + m->line_len > a->ocap) {
            if (a->opos) { /* reuse the written front first */
                memmove(a->out, a->out + a->opos, a->olen - a->opos);
                a->olen -= a->opos;
                a->opos = 0;
            }
            size_t cap = a->ocap ? a->ocap : 65536;
            while (cap < a->olen + m->line_len)
                cap *= 2;
            if (cap > a->ocap) {
                char *o = realloc(a->out, cap);
                if (!o)
                    return; /* tried again on the next turn */
                a->out = o;
                a->ocap = cap;
            }
        }
        memcpy(a->out + a->olen, m->line, m->line_len);
        a->olen += m->line_len;
        sl_client__q_push(&a->sent, sl_client__q_pop(&a->unsent));
    }
}

/* Writes what the socket takes. Returns -1 when the connection failed. */
static int flush_out(agent *a)
{
    while (a->opos < a->olen) {
        ssize_t n = send(a->fd, a->out + a->opos, a->olen - a->opos, MSG_NOSIGNAL);
        if (n > 0) {
            a->opos += (size_t)n;
            a->progress_ms = sl_client__now_ms(); /* the agent takes our bytes */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
    return 0;
}

/* Handles one ack line [p, end). Returns -1 on a protocol error. */
static int on_ack(agent *a, const char *p, const char *end)
{
    uint64_t seq = 0;
    bool have_seq = false, have_ok = false, ok = false;
    char code[64] = "", msg[512] = "";
    p = sl_client__json_ws(p, end);
    if (p >= end || *p != '{')
        return -1;
    p++;
    for (;;) {
        char name[16];
        p = sl_client__json_ws(p, end);
        if (p < end && *p == '}')
            break;
        if (!(p = sl_client__json_str(p, end, name, sizeof name)))
            return -1;
        p = sl_client__json_ws(p, end);
        if (p >= end || *p != ':')
            return -1;
        p = sl_client__json_ws(p + 1, end);
        const char *v = p;
        if (!(p = sl_client__json_skip(p, end)))
            return -1;
        if (strcmp(name, "seq") == 0) {
            char *e;
            seq = strtoull(v, &e, 10);
            have_seq = e == p;
        } else if (strcmp(name, "ok") == 0) {
            have_ok = true;
            ok = p - v == 4 && memcmp(v, "true", 4) == 0;
        } else if (strcmp(name, "error") == 0) {
            sl_client__json_str(v, end, code, sizeof code);
        } else if (strcmp(name, "message") == 0) {
            sl_client__json_str(v, end, msg, sizeof msg);
        }
        p = sl_client__json_ws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}')
            break;
        return -1;
    }
    /* Acks come in order, one per line: anything else means the two sides no
     * longer agree on which line is which, and only a new connection fixes
     * that. */
    if (!have_seq || !have_ok || seq != a->seq + 1 || !a->sent.n)
        return -1;
    a->seq = seq;
    a->progress_ms = sl_client__now_ms();
    a->backoff_ms = 0;
    sl_client_msg *m = sl_client__q_pop(&a->sent);
    if (ok)
        sl_client__done(a->c, m, 0, NULL, NULL);
    else
        sl_client__done(a->c, m, SL_CLIENT_EREJECTED, code[0] ? code : "Refused",
                        msg[0] ? msg : "refused by the agent");
    return 0;
}

/* Reads acks. Returns -1 when the connection ended or broke the protocol. */
static int read_acks(agent *a)
{
    for (;;) {
        if (a->ilen == sizeof a->in)
            return -1; /* a line longer than any ack */
        ssize_t n = read(a->fd, a->in + a->ilen, sizeof a->in - a->ilen);
        if (n == 0)
            return -1;
        if (n < 0)
            return errno == EINTR ? 0 : (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
        a->ilen += (size_t)n;
        a->progress_ms = sl_client__now_ms();
        char *p = a->in, *end = a->in + a->ilen, *nl;
        while ((nl = memchr(p, '\n', (size_t)(end - p)))) {
            if (on_ack(a, p, nl) < 0)
                return -1;
            p = nl + 1;
        }
        a->ilen = (size_t)(end - p);
        memmove(a->in, p, a->ilen);
    }
}

void sl_client__agent_run(sl_client *c)
{
    agent a = {.c = c, .fd = -1};
    sl_client_take t = {0};
    for (;;) {
        sl_client__take(c, &a.unsent, &t);
        if (t.stopping)
            break;
        if (a.fd < 0 && a.unsent.n && sl_client__now_ms() >= a.retry_at_ms)
            connect_start(&a); /* on failure, drop() set the next retry_at_ms */
        if (a.fd >= 0 && !a.connecting) {
            fill(&a);
            if (flush_out(&a) < 0) {
                drop(&a);
                continue;
            }
        }
        /* The next deadline: the retry after a back-off; the connect timeout;
         * or the stall timeout, which runs only while lines await answers and
         * all is written: a full socket is the agent's back-pressure. */
        int64_t now = sl_client__now_ms(), dl = INT64_MAX, wait = 1000;
        if (a.fd < 0)
            dl = a.unsent.n ? a.retry_at_ms : INT64_MAX;
        else if (a.connecting)
            dl = a.conn_start_ms + c->timeout_ms;
        else if (a.sent.n && a.opos == a.olen)
            dl = a.progress_ms + stall_ms(c);
        if (a.fd >= 0 && dl <= now) {
            drop(&a);
            continue;
        }
        if (dl != INT64_MAX && dl - now < wait)
            wait = dl > now ? dl - now : 0;
        struct pollfd pf[2] = {{.fd = c->wake_rd, .events = POLLIN}, {.fd = a.fd}};
        if (a.fd >= 0)
            pf[1].events = a.connecting ? POLLOUT : POLLIN | (a.opos < a.olen ? POLLOUT : 0);
        if (poll(pf, a.fd >= 0 ? 2 : 1, (int)wait) <= 0 || a.fd < 0)
            continue;
        if (a.connecting && pf[1].revents) {
            int err = 0;
            socklen_t len = sizeof err;
            if (getsockopt(a.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
                drop(&a);
                continue;
            }
            a.connecting = false;
            a.progress_ms = sl_client__now_ms();
            continue;
        }
        if ((pf[1].revents & (POLLIN | POLLHUP | POLLERR)) && read_acks(&a) < 0)
            drop(&a);
    }
    if (a.fd >= 0)
        close(a.fd);
    sl_client__done_all(c, &a.sent, SL_CLIENT_ESHUTDOWN, NULL, NULL);
    sl_client__done_all(c, &a.unsent, SL_CLIENT_ESHUTDOWN, NULL, NULL);
    free(a.out);
}
