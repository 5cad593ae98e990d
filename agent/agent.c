/*
 * agent/agent.c — the Databus agent's event loop and client side: listeners
 * (UNIX and TCP), connections, the NDJSON line protocol (docs/agent.md), the
 * in-order answers and signals (SIGHUP reload, SIGTERM/SIGINT drain).
 * Batching and upstream live in agent/agent_fwd.c, settings in
 * agent/agent_conf.c, the spool files in agent/agent_spool.c.
 */
#include "agent/agent_internal.h"
#include "agent/agent_spool.h"
#include "core/base/lane_name.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/bus/set.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define READ_CHUNK (256u << 10)
#define MEM_MAX (32u << 20) /* batches held in memory by all keys: stop reading past it */
#define CONN_WBUF_MAX (8u << 20)  /* unread answers: stop reading that client past it */
#define CONN_PENDING_MAX 1000000u /* unanswered lines per client */
#define LINE_DEPTH 512

static volatile sig_atomic_t g_term, g_hup;
static int g_sigfd = -1;

static void on_signal(int sig)
{
    int e = errno;
    if (sig == SIGHUP)
        g_hup = 1;
    else
        g_term = 1;
    if (g_sigfd >= 0) {
        char c = 1;
        ssize_t r = write(g_sigfd, &c, 1);
        (void)r;
    }
    errno = e;
}

/* ---- log ---------------------------------------------------------------------- */

void sl__agent_log(sl_agent *a, const char *fmt, ...)
{
    int64_t now = sl_clock_mono_ns();
    if (now - a->log_window_ns >= 1000000000LL) {
        if (a->log_dropped)
            fprintf(stderr, "sluice databus: (%d log lines suppressed)\n", a->log_dropped);
        a->log_window_ns = now;
        a->log_count = a->log_dropped = 0;
    }
    if (++a->log_count > 20) {
        a->log_dropped++;
        return;
    }
    char ts[SL_TIME_RFC3339_MAX];
    sl_time_format_rfc3339(sl_clock_now_ms(), ts);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s sluice databus: ", ts);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- listeners ------------------------------------------------------------------ */

static int listen_unix(ag_listener *l, const char *path, sl_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) == 0 || strlen(path) >= sizeof sa.sun_path)
        return sl_error_set(err, SL_EINVAL, "--listen unix:%s: path empty or too long", path);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return sl_error_set(err, SL_EEXIST, "--listen unix:%s: exists and is not a socket",
                                path);
        /* A socket file someone still accepts on is a running agent: taking
         * it over would silently steal its clients. */
        int t = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (t >= 0 && connect(t, (struct sockaddr *)&sa, sizeof sa) == 0) {
            close(t);
            return sl_error_set(err, SL_EEXIST,
                                "--listen unix:%s: another agent is listening there", path);
        }
        if (t >= 0)
            close(t);
        unlink(path); /* stale, left by an agent that died */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sl_error_errno(err, errno, "--listen unix:%s: socket", path);
    /* Created 0660 from the start (umask), so no client outside the group
     * can connect in the window before a chmod. */
    mode_t old = umask(0117);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (b != 0 || chmod(path, 0660) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        return sl_error_errno(err, e, "--listen unix:%s", path);
    }
    l->fd = fd;
    snprintf(l->unix_path, sizeof l->unix_path, "%s", path);
    snprintf(l->name, sizeof l->name, "unix:%s", path);
    return 0;
}

static int listen_tcp(ag_listener *l, const char *spec, sl_error *err)
{
    char host[256] = "127.0.0.1", port[16];
    const char *c = strrchr(spec, ':');
    const char *ps = c ? c + 1 : spec;
    if (c && c > spec) {
        size_t hl = (size_t)(c - spec);
        if (spec[0] == '[' && c[-1] == ']') {
            spec++;
            hl -= 2;
        }
        if (hl >= sizeof host)
            return sl_error_set(err, SL_EINVAL, "--listen %s: host too long", spec);
        memcpy(host, spec, hl);
        host[hl] = '\0';
    }
    if (strlen(ps) == 0 || strlen(ps) >= sizeof port || strspn(ps, "0123456789") != strlen(ps))
        return sl_error_set(err, SL_EINVAL, "--listen %s: want unix:PATH or HOST:PORT", spec);
    snprintf(port, sizeof port, "%s", ps);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g != 0)
        return sl_error_set(err, SL_EINVAL, "--listen %s: %s", spec, gai_strerror(g));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return sl_error_errno(err, e, "--listen %s:%s", host, port);
    }
    freeaddrinfo(ai);
    l->fd = fd;
    l->unix_path[0] = '\0';
    /* The port actually bound, so that port 0 (any free port) is logged
     * usefully. */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        char h[NI_MAXHOST], sv[NI_MAXSERV];
        if (getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, sv, sizeof sv,
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0)
            snprintf(port, sizeof port, "%s", sv);
    }
    snprintf(l->name, sizeof l->name, "%s:%s", host, port);
    return 0;
}

/* ---- connections and answers ------------------------------------------------------ */

static void conn_close_fd(ag_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->eof = true;
    c->held = false;
    sl_buf_free(&c->rbuf);
    sl_buf_free(&c->wbuf);
    c->rpos = c->wpos = 0;
}

static void conn_free(ag_conn *c)
{
    conn_close_fd(c);
    for (size_t i = c->soff; i < c->nslots; i++)
        free(c->slots[i].err);
    free(c->slots);
    free(c);
}

/* A new slot for the next line; returns its number, or 0 when out of memory
 * (the connection is closed then: it cannot be answered in order). */
static uint64_t slot_new(ag_conn *c)
{
    if (c->nslots == c->scap) {
        if (c->soff > c->nslots / 2) {
            memmove(c->slots, c->slots + c->soff, (c->nslots - c->soff) * sizeof *c->slots);
            c->nslots -= c->soff;
            c->soff = 0;
        } else {
            if (SL_GROW(c->slots, c->scap, 256))
                return 0;
        }
    }
    c->slots[c->nslots++] = (ag_slot){SLOT_PENDING, NULL};
    return c->next_seq++;
}

void sl__agent_answer(sl_agent *a, ag_conn *c, uint64_t seq, const char *code, const char *msg)
{
    if (code)
        a->n_err++;
    else
        a->n_ok++;
    if (seq < c->base_seq || seq - c->base_seq >= c->nslots - c->soff)
        return; /* cannot happen: every line has one slot, answered once */
    ag_slot *s = &c->slots[c->soff + (seq - c->base_seq)];
    if (!code) {
        s->state = SLOT_OK;
    } else {
        sl_buf b = SL_BUF_INIT;
        const char *m = msg && msg[0] ? msg : code;
        sl_buf_append(&b, "\"error\":", 8);
        sl_json_put_string(&b, code, strlen(code));
        sl_buf_append(&b, ",\"message\":", 11);
        if (sl_json_put_string(&b, m, strlen(m)) != 0)
            sl_buf_append(&b, "\"(message not valid UTF-8)\"", 27);
        if (sl_buf_append(&b, "", 1) == 0) {
            s->err = (char *)b.data;
        } else {
            sl_buf_free(&b);
        }
        s->state = SLOT_ERR;
    }
}

/* Moves the answered lines at the front into wbuf, in order. */
static void conn_collect(ag_conn *c)
{
    while (c->soff < c->nslots && c->slots[c->soff].state != SLOT_PENDING) {
        ag_slot *s = &c->slots[c->soff];
        if (c->fd >= 0) {
            /* By hand rather than snprintf: one answer per event, and
             * formatting them was a visible part of the agent's CPU. */
            char h[64], d[24];
            size_t dn = 0, n = 0;
            for (uint64_t v = c->base_seq; v || !dn; v /= 10)
                d[dn++] = (char)('0' + v % 10);
            memcpy(h, "{\"seq\":", 7);
            n = 7;
            while (dn)
                h[n++] = d[--dn];
            const char *t = s->state == SLOT_OK ? ",\"ok\":true}\n" : ",\"ok\":false,";
            size_t tl = strlen(t);
            memcpy(h + n, t, tl);
            sl_buf_append(&c->wbuf, h, n + tl);
            if (s->state == SLOT_ERR) {
                const char *e =
                    s->err ? s->err : "\"error\":\"Internal\",\"message\":\"no memory\"";
                sl_buf_append(&c->wbuf, e, strlen(e));
                sl_buf_append(&c->wbuf, "}\n", 2);
            }
        }
        free(s->err);
        c->soff++;
        c->base_seq++;
    }
    if (c->soff == c->nslots)
        c->soff = c->nslots = 0;
}

static void conn_write(ag_conn *c)
{
    while (c->fd >= 0 && c->wpos < c->wbuf.len) {
        ssize_t w = send(c->fd, c->wbuf.data + c->wpos, c->wbuf.len - c->wpos, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                conn_close_fd(c); /* the client is gone; its answers are dropped */
            break;
        }
        c->wpos += (size_t)w;
    }
    if (c->fd >= 0 && c->wpos == c->wbuf.len)
        c->wpos = c->wbuf.len = 0;
}

/* Copies member string tok into out (cap bytes, NUL-terminated); false when it
 * is not a string, is too long or holds a NUL. */
static bool str_of(const sl_json_tok *t, char *out, size_t cap)
{
    size_t n;
    if (t->type != SL_JSON_STRING || sl_json_unescape(t, out, cap - 1, &n) != 0)
        return false;
    out[n] = '\0';
    return strlen(out) == n;
}

/* A member the line walker looks for: its name with quotes (as the raw
 * token usually is), where its value was found, how many times it was seen
 * (a line naming it twice is refused: the lane checked must be the lane the
 * server reads), and for an object value the members to look for inside it. */
typedef struct want {
    const char *key;
    size_t klen;
    sl_json_tok tok;
    int seen;
    struct want *sub;
    int nsub;
} want;

/* The wanted member named by token k, or NULL. A name with escapes
 * ("l\u0061ne") is decoded first: the server decodes it, so it must not
 * slip past the lane check. */
static want *want_find(want *w, int nw, const sl_json_tok *k)
{
    for (int i = 0; i < nw; i++)
        if (w[i].klen == k->len && memcmp(w[i].key, k->p, k->len) == 0)
            return &w[i];
    if (k->len > 128 || !memchr(k->p, '\\', k->len))
        return NULL;
    char nm[16];
    size_t n;
    if (sl_json_unescape(k, nm, sizeof nm, &n) != 0)
        return NULL;
    for (int i = 0; i < nw; i++)
        if (w[i].klen == n + 2 && memcmp(w[i].key + 1, nm, n) == 0)
            return &w[i];
    return NULL;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* Validates the object at *pp (which must start with '{') in one pass,
 * recording the wanted members (recursing into a wanted member's object
 * value when it has sub-wants). The agent reads every byte of every line
 * exactly once this way: validating first and then iterating would scan
 * each event three times, which was most of the agent's CPU. Returns 0 with
 * *pp past the object, or SL_EPARSE / SL_EPARTIAL with err ("byte N: …"). */
static int walk(const char *base, const char **pp, const char *end, int depth, want *w, int nw,
                sl_error *err)
{
    const char *p = *pp;
    if (depth <= 0)
        return sl_error_set(err, SL_EPARSE, "byte %zu: nested too deeply", (size_t)(p - base));
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto done;
    }
    for (;;) {
        sl_json_tok k, v = {0};
        int rc = sl_json_value_from(base, p, end, 0, &k, &p, err);
        if (rc)
            return rc;
        if (k.type != SL_JSON_STRING)
            return sl_error_set(err, SL_EPARSE, "byte %zu: expected a member name",
                                (size_t)(k.p - base));
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return sl_error_set(err, SL_EPARSE, "byte %zu: expected ':'", (size_t)(p - base));
        p = skip_ws(p + 1, end);
        want *m = nw ? want_find(w, nw, &k) : NULL;
        if (m && m->sub && p < end && *p == '{') {
            const char *vs = p;
            rc = walk(base, &p, end, depth - 1, m->sub, m->nsub, err);
            v = (sl_json_tok){.type = SL_JSON_OBJECT, .p = vs, .len = (size_t)(p - vs)};
        } else {
            rc = sl_json_value_from(base, p, end, depth - 1, &v, &p, err);
        }
        if (rc)
            return rc;
        if (m) {
            m->tok = v;
            m->seen++;
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        return sl_error_set(err, p < end ? SL_EPARSE : SL_EPARTIAL, "byte %zu: expected ',' or '}'",
                            (size_t)(p - base));
    }
done:
    *pp = p;
    return 0;
}

/* One complete input line (without its newline). */
static void handle_line(sl_agent *a, ag_conn *c, const char *p, size_t len)
{
    uint64_t seq = slot_new(c);
    if (!seq) {
        conn_close_fd(c);
        return;
    }
    if (len && p[len - 1] == '\r')
        len--;
    if (len > a->o.max_line) {
        char m[160];
        snprintf(m, sizeof m, "line of %zu bytes is over the %" PRIu64 " byte limit", len,
                 a->o.max_line);
        sl__agent_answer(a, c, seq, "TooLarge", m);
        return;
    }
    sl_error err = {0};
    const char *end = p + len, *q = skip_ws(p, end);
    if (q == end) {
        sl__agent_answer(a, c, seq, "InvalidJSON", "empty line");
        return;
    }
    if (*q != '{') {
        if (sl_json_validate(p, len, LINE_DEPTH, NULL, &err) != 0)
            sl__agent_answer(a, c, seq, "InvalidJSON", err.msg);
        else
            sl__agent_answer(a, c, seq, "InvalidLine",
                             "a line is a JSON object {\"set\":NAME,\"event\":{…}}");
        return;
    }
    want ev_w[1] = {{"\"lane\"", 6, {0}, 0, NULL, 0}};
    want top_w[3] = {{"\"set\"", 5, {0}, 0, NULL, 0},
                     {"\"event\"", 7, {0}, 0, ev_w, 1},
                     {"\"lane\"", 6, {0}, 0, NULL, 0}};
    int rc = walk(p, &q, end, LINE_DEPTH, top_w, 3, &err);
    if (rc == 0 && skip_ws(q, end) != end)
        rc = sl_error_set(&err, SL_EPARSE, "byte %zu: unexpected data after the JSON value",
                          (size_t)(q - p));
    if (rc) {
        sl__agent_answer(a, c, seq, "InvalidJSON", err.msg);
        return;
    }
    for (int i = 0; i < 4; i++) {
        const want *d = i < 3 ? &top_w[i] : &ev_w[0];
        if (d->seen > 1) {
            char m[96];
            snprintf(m, sizeof m, "duplicate member %.*s%s", (int)d->klen, d->key,
                     i < 3 ? "" : " in the event");
            sl__agent_answer(a, c, seq, "InvalidLine", m);
            return;
        }
    }
    sl_json_tok set_t = top_w[0].tok, ev_t = top_w[1].tok, lane_t = top_w[2].tok;
    sl_json_tok elane_t = ev_w[0].tok;
    char set[SL_SET_NAME_MAX + 1], mlane[SL_LANE_MAX + 1] = "", elane[SL_LANE_MAX + 1] = "";
    if (!str_of(&set_t, set, sizeof set) || !sl_set_name_valid(set)) {
        sl__agent_answer(a, c, seq, "InvalidLine",
                         set_t.type == SL_JSON_NONE
                             ? "missing \"set\""
                             : "\"set\" must be 1-128 characters of A-Z a-z 0-9 . _ -");
        return;
    }
    if (ev_t.type != SL_JSON_OBJECT) {
        sl__agent_answer(a, c, seq, "InvalidLine",
                         ev_t.type == SL_JSON_NONE
                             ? "missing \"event\""
                             : "\"event\" must be a JSON object (a CloudEvent)");
        return;
    }
    if (lane_t.type != SL_JSON_NONE && lane_t.type != SL_JSON_NULL &&
        (!str_of(&lane_t, mlane, sizeof mlane) || !sl_lane_valid(mlane, strlen(mlane)))) {
        sl__agent_answer(a, c, seq, "InvalidLane", "\"lane\" must be \"\" or [a-z0-9-]{1,32}");
        return;
    }
    /* The event's own lane attribute takes part too, so that a conflict is
     * answered here rather than after a round trip. */
    if (elane_t.type == SL_JSON_STRING &&
        (!str_of(&elane_t, elane, sizeof elane) || !sl_lane_valid(elane, strlen(elane)))) {
        sl__agent_answer(a, c, seq, "InvalidLane",
                         "the event's lane attribute must be [a-z0-9-]{1,32}");
        return;
    }
    const char *src[3] = {a->o.lane, mlane, elane};
    const char *names[3] = {"the agent's lane", "the line's lane", "the event's lane attribute"};
    const char *lane = "";
    int from = -1;
    for (int i = 0; i < 3; i++) {
        if (!src[i][0])
            continue;
        if (lane[0] && strcmp(lane, src[i]) != 0) {
            char m[256];
            snprintf(m, sizeof m, "%s is \"%s\" but %s is \"%s\"", names[from], lane, names[i],
                     src[i]);
            sl__agent_answer(a, c, seq, "LaneConflict", m);
            return;
        }
        lane = src[i];
        from = i;
    }
    if (sl__agent_add(a, c, seq, set, lane, ev_t.p, ev_t.len) != 0)
        sl__agent_answer(a, c, seq, "Internal", "out of memory");
}

/* Whether c holds as many answers or unanswered lines as it may: it is
 * then neither read from nor are its buffered lines parsed. */
static bool conn_full(const ag_conn *c)
{
    return c->wbuf.len - c->wpos >= CONN_WBUF_MAX || c->next_seq - c->base_seq >= CONN_PENDING_MAX;
}

/* Splits rbuf into lines; keeps a partial last line unless at_eof. Stops
 * (c->held, the rest kept in rbuf) once c is full: one read of empty lines
 * would otherwise make a hundred times its size in answers. */
static void conn_lines(sl_agent *a, ag_conn *c, bool at_eof)
{
    char *base = (char *)c->rbuf.data;
    size_t pos = c->rpos, end = c->rbuf.len;
    unsigned n = 0;
    c->held = false;
    while (pos < end && c->fd >= 0) {
        if ((++n & 63) == 0) {
            conn_collect(c);
            if (conn_full(c)) {
                c->held = true;
                break;
            }
        }
        char *nl = memchr(base + pos, '\n', end - pos);
        if (!nl) {
            size_t rest = end - pos;
            if (c->skipping) {
                pos = end;
            } else if (rest > a->o.max_line + 1) {
                /* Answer now, then drop bytes until the newline: a client
                 * cannot make the agent hold an unbounded line. */
                uint64_t seq = slot_new(c);
                char m[160];
                snprintf(m, sizeof m, "line longer than the %" PRIu64 " byte limit; skipped",
                         a->o.max_line);
                if (seq)
                    sl__agent_answer(a, c, seq, "TooLarge", m);
                c->skipping = true;
                pos = end;
            } else if (at_eof) {
                handle_line(a, c, base + pos, rest);
                pos = end;
            }
            break;
        }
        size_t ll = (size_t)(nl - (base + pos));
        if (c->skipping)
            c->skipping = false;
        else
            handle_line(a, c, base + pos, ll);
        pos += ll + 1;
    }
    if (c->fd < 0)
        return;
    if (pos == end) {
        c->rbuf.len = c->rpos = 0;
    } else if (pos > 0) {
        memmove(base, base + pos, end - pos);
        c->rbuf.len = end - pos;
        c->rpos = 0;
    }
}

static bool conn_can_read(sl_agent *a, ag_conn *c)
{
    return c->fd >= 0 && !c->eof && !c->held && !a->stopping && a->mem_total < MEM_MAX &&
           !conn_full(c);
}

static void conn_read(sl_agent *a, ag_conn *c)
{
    if (sl_buf_reserve(&c->rbuf, READ_CHUNK) != 0) {
        conn_close_fd(c);
        return;
    }
    /* One clock read for all the lines of this read: reading it per line
     * was 5 % of the agent's CPU, and linger needs no finer time. */
    a->read_ns = sl_clock_mono_ns();
    ssize_t r = read(c->fd, c->rbuf.data + c->rbuf.len, READ_CHUNK);
    if (r < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return;
        c->eof = true;
        conn_lines(a, c, true);
        return;
    }
    if (r == 0) {
        c->eof = true;
        conn_lines(a, c, true);
        return;
    }
    c->rbuf.len += (size_t)r;
    conn_lines(a, c, false);
}

static void accept_all(sl_agent *a, ag_listener *l)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The pending connection stays queued and the listener
                 * readable: stop polling it for a moment rather than spin. */
                a->accept_pause_ns = sl_clock_mono_ns() + 100000000LL;
                sl__agent_log(a, "accept on %s: %s; pausing new connections", l->name,
                              strerror(errno));
            }
            return;
        }
        if (a->nconns >= AG_MAX_CONNS) {
            /* Each connection holds buffers of up to megabytes: a bound on
             * them bounds the agent's memory. */
            close(fd);
            sl__agent_log(a, "connection on %s refused: %d connections open (the limit)", l->name,
                          AG_MAX_CONNS);
            continue;
        }
        ag_conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            return;
        }
        a->nconns++;
        c->fd = fd;
        c->next_seq = c->base_seq = 1;
        /* Round robin: a connection keeps its stream for life, so its lines
         * of a set stay in order while connections spread over the streams. */
        int ns = a->o.streams >= 1 ? a->o.streams : 1;
        c->stream = (int)(a->next_stream++ % (unsigned)ns);
        c->next = a->conns;
        a->conns = c;
    }
}

/* ---- the loop ---------------------------------------------------------------------- */

static void reload(sl_agent *a)
{
    if (!a->o.config_path) {
        sl__agent_log(a, "SIGHUP: no --config file to reload");
        return;
    }
    sl_agent_opts n = a->o;
    sl_error err = {0};
    if (sl_agent_conf_load(a->o.config_path, &n, &err)) {
        sl__agent_log(a, "reload failed, keeping the current settings: %s", err.msg);
        return;
    }
    a->o = n;
    sl__agent_poll_upstream(a);
    sl__agent_log(a,
                  "reloaded %s: upstream %s, lane \"%s\", linger_ms %" PRId64
                  ", batch_bytes %" PRIu64 ", spool_max %" PRIu64 ", streams %d",
                  n.config_path, n.upstream, n.lane, n.linger_ms, n.batch_bytes, n.spool_max,
                  n.streams);
}

static bool conns_busy(sl_agent *a)
{
    for (ag_conn *c = a->conns; c; c = c->next)
        if (c->pending || (c->fd >= 0 && c->wpos < c->wbuf.len))
            return true;
    return false;
}

static int agent_loop(sl_agent *a)
{
    size_t cap = 0;
    struct curl_waitfd *w = NULL;
    ag_conn **wc = NULL;
    long timeout = 0;
    for (;;) {
        if (g_hup) {
            g_hup = 0;
            reload(a);
        }
        sl__agent_poll_apply(a);
        if (g_term && !a->stopping) {
            a->stopping = true;
            a->stop_deadline_ns = sl_clock_mono_ns() + a->o.shutdown_ms * 1000000LL;
            sl__agent_log(a, "stopping: flushing batches upstream (at most %" PRId64 " ms)",
                          a->o.shutdown_ms);
            for (int i = 0; i < a->nls; i++) {
                close(a->ls[i].fd);
                if (a->ls[i].unix_path[0])
                    unlink(a->ls[i].unix_path);
                a->ls[i].fd = -1;
            }
        }
        size_t nconn = 0;
        for (ag_conn *c = a->conns; c; c = c->next)
            nconn++;
        size_t need = 1 + (size_t)a->nls + nconn;
        if (need > cap) {
            size_t nc = need * 2;
            struct curl_waitfd *nw = realloc(w, nc * sizeof *nw);
            if (nw)
                w = nw;
            ag_conn **nwc = realloc(wc, nc * sizeof *nwc);
            if (nwc)
                wc = nwc;
            if (!nw || !nwc) {
                usleep(10000); /* out of memory: try again shortly */
                continue;
            }
            cap = nc;
        }
        size_t n = 0;
        w[n++] = (struct curl_waitfd){.fd = a->sigfd[0], .events = CURL_WAIT_POLLIN};
        bool accepting = sl_clock_mono_ns() >= a->accept_pause_ns;
        for (int i = 0; i < a->nls; i++)
            if (a->ls[i].fd >= 0 && accepting) {
                wc[n] = NULL;
                w[n++] = (struct curl_waitfd){.fd = a->ls[i].fd, .events = CURL_WAIT_POLLIN};
            }
        size_t first_conn = n;
        for (ag_conn *c = a->conns; c; c = c->next) {
            short ev = 0;
            if (conn_can_read(a, c))
                ev |= CURL_WAIT_POLLIN;
            if (c->fd >= 0 && c->wpos < c->wbuf.len)
                ev |= CURL_WAIT_POLLOUT;
            if (!ev)
                continue;
            wc[n] = c;
            w[n++] = (struct curl_waitfd){.fd = c->fd, .events = ev};
        }
        int numfds = 0;
        curl_multi_poll(a->multi, w, (unsigned)n, (int)timeout, &numfds);
        if (w[0].revents) {
            char buf[64];
            while (read(a->sigfd[0], buf, sizeof buf) > 0) {
            }
        }
        for (size_t i = 1; i < n; i++) {
            if (!w[i].revents)
                continue;
            if (i < first_conn) {
                for (int j = 0; j < a->nls; j++)
                    if (a->ls[j].fd == w[i].fd)
                        accept_all(a, &a->ls[j]);
                continue;
            }
            ag_conn *c = wc[i];
            if (w[i].revents & CURL_WAIT_POLLOUT)
                conn_write(c);
            if (c->fd >= 0 && (w[i].revents & CURL_WAIT_POLLIN))
                conn_read(a, c);
        }
        int running;
        curl_multi_perform(a->multi, &running);
        sl__agent_done(a);
        int64_t now = sl_clock_mono_ns();
        timeout = sl__agent_tick(a, now, 100);
        curl_multi_perform(a->multi, &running);
        sl__agent_done(a);
        if (a->stopping && now >= a->stop_deadline_ns)
            sl__agent_spool_all(a);
        /* Answers, and connections that are finished with. */
        ag_conn **pp = &a->conns;
        while (*pp) {
            ag_conn *c = *pp;
            conn_collect(c);
            conn_write(c);
            /* Lines kept back while the client's answers were over its
             * limit are parsed once it has read them. */
            if (c->held && c->fd >= 0 && !conn_full(c)) {
                a->read_ns = sl_clock_mono_ns();
                conn_lines(a, c, c->eof);
                conn_collect(c);
                conn_write(c);
            }
            if (c->eof && !c->held && c->pending == 0 && c->soff == c->nslots &&
                (c->fd < 0 || c->wpos == c->wbuf.len)) {
                *pp = c->next;
                conn_free(c);
                a->nconns--;
                continue;
            }
            pp = &c->next;
        }
        if (a->stopping && !sl__agent_mem_left(a) && !conns_busy(a))
            break;
        /* Past the deadline only unwritable answers can remain: give the
         * clients one more second to read them, then stop anyway. */
        if (a->stopping && now >= a->stop_deadline_ns + 1000000000LL)
            break;
    }
    free(w);
    free(wc);
    return 0;
}

int sl_agent_run(const sl_agent_opts *o, sl_error *err)
{
    sl_agent *a = calloc(1, sizeof *a);
    if (!a)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    a->o = *o;
    a->next_batch_seq = 1;
    a->sigfd[0] = a->sigfd[1] = -1;
    int rc = 0;
    if (!a->o.upstream[0]) {
        rc = sl_error_set(err, SL_EINVAL, "no --upstream given (nor upstream = … in --config)");
        goto out;
    }
    if (a->o.nlisten == 0) {
        rc = sl_error_set(err, SL_EINVAL, "no --listen given");
        goto out;
    }
    rc = sl__spool_prepare(a->o.spool_dir, err);
    if (rc)
        goto out;
    for (int i = 0; i < a->o.nlisten; i++) {
        const char *s = a->o.listen[i];
        rc = strncmp(s, "unix:", 5) == 0 ? listen_unix(&a->ls[i], s + 5, err)
                                         : listen_tcp(&a->ls[i], s, err);
        if (rc)
            goto out;
        a->nls++;
    }
    if (pipe2(a->sigfd, O_NONBLOCK | O_CLOEXEC) != 0) {
        rc = sl_error_errno(err, errno, "pipe");
        goto out;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    a->multi = curl_multi_init();
    if (!a->multi) {
        rc = sl_error_set(err, SL_ENOMEM, "curl_multi_init failed");
        goto out;
    }
    curl_multi_setopt(a->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 64L);
    srand((unsigned)(sl_clock_mono_ns() ^ getpid()));
    rc = sl__agent_load_spool(a, err);
    if (rc)
        goto out;
    if (a->o.config_set[0]) {
        rc = sl__agent_poll_start(a, err);
        if (rc)
            goto out;
    }
    g_sigfd = a->sigfd[1];
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < a->nls; i++)
        sl__agent_log(a, "listening on %s", a->ls[i].name);
    sl__agent_log(a,
                  "upstream %s, lane \"%s\", spool %s (max %" PRIu64 " bytes), linger %" PRId64
                  " ms, batch %" PRIu64 " bytes, %d streams per set and lane",
                  a->o.upstream, a->o.lane, a->o.spool_dir, a->o.spool_max, a->o.linger_ms,
                  a->o.batch_bytes, a->o.streams);
    rc = agent_loop(a);
    sl__agent_spool_all(a);
    sl__agent_log(a,
                  "stopped: %" PRIu64 " lines ok, %" PRIu64 " refused, %" PRIu64
                  " batches spooled, %" PRIu64 " drained; %" PRIu64 " spool bytes left",
                  a->n_ok, a->n_err, a->n_spooled_batches, a->n_drained_batches, a->spool_bytes);
out:
    g_sigfd = -1;
    sl__agent_poll_stop(a);
    while (a->conns) {
        ag_conn *c = a->conns;
        a->conns = c->next;
        conn_free(c);
    }
    sl__agent_free_keys(a);
    if (a->multi)
        curl_multi_cleanup(a->multi);
    for (int i = 0; i < a->nls; i++) {
        if (a->ls[i].fd >= 0)
            close(a->ls[i].fd);
        if (a->ls[i].fd >= 0 && a->ls[i].unix_path[0])
            unlink(a->ls[i].unix_path);
    }
    for (int i = 0; i < 2; i++)
        if (a->sigfd[i] >= 0)
            close(a->sigfd[i]);
    free(a);
    return rc;
}
