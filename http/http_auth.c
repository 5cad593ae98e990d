/*
 * http/http_auth.c — the security of the HTTP API: which right
 * each endpoint needs, API key checks (401/403) and the per-client publish
 * rate (429); the TLS files are checked by core/base/tls.c. The endpoint
 * table is in docs/http-api.md; the model in docs/security.md.
 */
#include "http/aws.h"
#include "http/http_internal.h"
#include "core/base/clock.h"
#include "core/base/json.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One client address with open connections; freed when its last closes. */
struct sl_http_ip {
    struct sl_http_ip *next;
    unsigned conns;
    char addr[INET6_ADDRSTRLEN];
};

static unsigned ip_conns(const struct sl_http_ip *e)
{
    return e->conns;
}

static const char *ip_addr(const struct sl_http_ip *e)
{
    return e->addr;
}

/* ---- which right an endpoint needs ------------------------------------------ */

/* The right method+url needs; *set gets the set it concerns ("" when none).
 * Paths are split like route() does (http.c). */
static sl_auth_right classify(const char *method, const char *url, char *set, size_t cap,
                              bool *redrive)
{
    char buf[1024];
    set[0] = '\0';
    *redrive = false;
    if (strlen(url) >= sizeof buf)
        return SL_AUTH_ANY; /* route() answers 414 to key holders */
    snprintf(buf, sizeof buf, "%s", url);
    char *seg[5], *save = NULL;
    int n = 0;
    for (char *p = strtok_r(buf, "/", &save); p && n < 5; p = strtok_r(NULL, "/", &save))
        seg[n++] = p;
    bool post = strcmp(method, "POST") == 0;
    if (n == 1 && strcmp(seg[0], "healthz") == 0)
        return SL_AUTH_OPEN;
    /* The console's static files: its script sends the key the user gives. */
    if (n >= 1 && strcmp(seg[0], "ui") == 0 && strncmp(url, "/ui", 3) == 0)
        return SL_AUTH_OPEN;
    if (n == 1 && strcmp(seg[0], "metrics") == 0)
        return SL_AUTH_METRICS;
    if (n < 2 || n > 4 || strcmp(seg[0], "v1") != 0)
        return SL_AUTH_ANY;
    /* Webhooks prove themselves with their signature (source.webhook). */
    if (n == 3 && strcmp(seg[1], "webhooks") == 0)
        return SL_AUTH_OPEN;
    if (strcmp(seg[1], "sets") == 0) {
        if (n == 2)
            return SL_AUTH_READ_SOME;
        snprintf(set, cap, "%s", seg[2]);
        if (n == 3)
            return SL_AUTH_READ;
        if (strcmp(seg[3], "events") == 0)
            return post ? SL_AUTH_PUBLISH : SL_AUTH_READ;
        if (strcmp(seg[3], "redrive") == 0) {
            /* It moves the DLQ's redrive position, so it needs publish on
             * the DLQ; publish on `to` is checked by the handler on the
             * value it uses (sl__http_redrive_allowed()). */
            *redrive = true;
            return SL_AUTH_PUBLISH;
        }
        return SL_AUTH_ANY;
    }
    if (strcmp(seg[1], "rules") == 0) {
        if (n == 4 && strcmp(seg[3], "replay") == 0)
            return SL_AUTH_ADMIN;
        return SL_AUTH_READ_SOME; /* GET /v1/rules, …/replays */
    }
    if (strcmp(seg[1], "lanes") == 0)
        return n == 2 ? SL_AUTH_READ_SOME : SL_AUTH_ADMIN; /* DELETE /v1/lanes/L */
    if (strcmp(seg[1], "sources") == 0 || strcmp(seg[1], "groups") == 0 ||
        strcmp(seg[1], "schedules") == 0)
        return SL_AUTH_READ_SOME;
    if (strcmp(seg[1], "patterns") == 0)
        return SL_AUTH_ADMIN;
    return SL_AUTH_ANY;
}

static void deny(sl_http_req *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void deny(sl_http_req *r, unsigned status, const char *code, const char *fmt, ...)
{
    r->deny_status = status;
    snprintf(r->deny_code, sizeof r->deny_code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->deny_msg, sizeof r->deny_msg, fmt, ap);
    va_end(ap);
}

/* Decides the API key from the headers: fills r->key, or r->deny_* for a
 * refusal. */
static void auth_check(sl_http_req *r, const sl_auth *a, sl_auth_right right, const char *set)
{
    const char *h =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *tok;
    size_t len;
    if (!h) {
        deny(r, 401, "Unauthorized",
             "this server needs an API key: send Authorization: Bearer TOKEN "
             "(sluice: --api-key or SLUICE_API_KEY)");
        return;
    }
    if (sl_auth_bearer(h, &tok, &len)) {
        deny(r, 401, "Unauthorized", "the Authorization header is not \"Bearer TOKEN\"");
        return;
    }
    const sl_auth_key *k = sl_auth_find(a, tok, len);
    if (!k) {
        /* Never echo the token: it may be a real one with a typo. */
        deny(r, 401, "Unauthorized", "the API key is not known to this server");
        return;
    }
    r->key = k;
    if (!sl_auth_allows(k, right, set)) {
        if (set[0])
            deny(r, 403, "Forbidden", "API key \"%s\" has no %s right on set \"%s\"",
                 sl_auth_key_name(k), sl_auth_right_name(right), set);
        else
            deny(r, 403, "Forbidden", "API key \"%s\" has no %s right", sl_auth_key_name(k),
                 sl_auth_right_name(right));
    }
}

static enum MHD_Result error_hdrs(sl_http_req *r, unsigned status, const char *code,
                                  const char *msg, const char *const *hdrs)
{
    /* msg holds names from the request (set names, Host): escaped so that
     * the body is valid JSON whatever their bytes. */
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"error\":\"%s\",\"message\":\"", code);
    sl__http_put_json_text(&b, msg);
    sl_buf_append(&b, "\"}\n", 3);
    return sl__http_reply_hdrs(r, status, &b, "application/json", hdrs);
}

/* Whether host[0..n) is a loopback name: "localhost" (any case, a final dot
 * allowed), an address in 127.0.0.0/8, or ::1 in brackets (bracketed ==
 * true) or bare. */
static bool loopback_name(const char *host, size_t n, bool bracketed)
{
    char buf[64];
    if (!n || n >= sizeof buf)
        return false;
    memcpy(buf, host, n);
    buf[n] = '\0';
    if (bracketed) {
        struct in6_addr a6;
        return inet_pton(AF_INET6, buf, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    if (strcasecmp(buf, "localhost") == 0 || strcasecmp(buf, "localhost.") == 0)
        return true;
    struct in_addr a4;
    return inet_pton(AF_INET, buf, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* Whether hp is "HOST" or "HOST:PORT" with a loopback HOST; *port gets the
 * port (0 when none). */
static bool loopback_hostport(const char *hp, unsigned *port)
{
    const char *host = hp, *rest;
    size_t n;
    bool br = hp[0] == '[';
    *port = 0;
    if (br) {
        const char *e = strchr(hp, ']');
        if (!e)
            return false;
        host = hp + 1;
        n = (size_t)(e - host);
        rest = e + 1;
    } else {
        const char *c = strchr(hp, ':');
        n = c ? (size_t)(c - hp) : strlen(hp);
        rest = hp + n;
    }
    if (*rest) {
        if (*rest != ':' || !rest[1] || strlen(rest + 1) > 5)
            return false;
        for (const char *p = rest + 1; *p; p++)
            if (*p < '0' || *p > '9')
                return false;
        *port = (unsigned)atoi(rest + 1);
        if (*port > 65535)
            return false;
    }
    return loopback_name(host, n, br);
}

/* Without API keys a loopback server trusts whoever can connect; a web page
 * in the user's browser can connect too (DNS rebinding: evil.example
 * resolving to 127.0.0.1; or a plain cross-site form POST). The first names
 * its own host in Host, the second its origin in Origin: both refused. */
static bool host_origin_refused(sl_http_req *r, const char *method)
{
    const char *host = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    unsigned port;
    if (host && !loopback_hostport(host, &port)) {
        deny(r, 403, "Forbidden",
             "Host \"%.200s\" is not a loopback name: this server has no API keys and answers "
             "only requests addressed to localhost, 127.0.0.1 or [::1] (a guard against DNS "
             "rebinding, docs/security.md)",
             host);
        return true;
    }
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
        return false;
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (!origin)
        return false; /* not a browser, or a same-origin GET-like request */
    const char *hp = strncmp(origin, "http://", 7) == 0    ? origin + 7
                     : strncmp(origin, "https://", 8) == 0 ? origin + 8
                                                           : NULL;
    bool tls = hp == origin + 8;
    unsigned want = r->h->port, got = 0;
    if (hp && !strchr(hp, '/') && loopback_hostport(hp, &got) &&
        (got   ? got
         : tls ? 443u
               : 80u) == want)
        return false;
    deny(r, 403, "Forbidden",
         "Origin \"%.200s\" is not this server's own (http://127.0.0.1:%u or another loopback "
         "name with that port): a page from elsewhere may not send %s requests to a server "
         "without API keys (docs/security.md)",
         origin, want, method);
    return true;
}

/* The server-wide connection cap and the per-address one, checked again on
 * the first call: connections accepted at the same moment by several
 * threads may pass the accept policy together. */
static bool conn_over(sl_http_req *r)
{
    sl_http *h = r->h;
    if (atomic_load(&h->conns) > (int)h->opts.max_connections) {
        deny(r, 503, "TooManyConnections",
             "the server has %u connections open, its limit; retry after a second",
             h->opts.max_connections);
        return true;
    }
    if (!h->opts.max_connections_per_ip)
        return false;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct sl_http_ip *e = ci ? ci->socket_context : NULL;
    if (!e)
        return false;
    pthread_mutex_lock(&h->ip_lock);
    unsigned n = ip_conns(e);
    pthread_mutex_unlock(&h->ip_lock);
    if (n <= h->opts.max_connections_per_ip)
        return false;
    deny(r, 503, "TooManyConnections",
         "client %s has %u connections open, over the limit of %u per address "
         "(server.max_connections_per_ip); retry after a second",
         ip_addr(e), n, h->opts.max_connections_per_ip);
    return true;
}

/* The name of a webhook path /v1/webhooks/{name} (split as route() does),
 * or false for another path. */
static bool webhook_name(const char *url, char *name, size_t cap)
{
    char buf[1024];
    if (strlen(url) >= sizeof buf)
        return false;
    snprintf(buf, sizeof buf, "%s", url);
    char *seg[4], *save = NULL;
    int n = 0;
    for (char *p = strtok_r(buf, "/", &save); p && n < 4; p = strtok_r(NULL, "/", &save))
        seg[n++] = p;
    if (n != 3 || strcmp(seg[0], "v1") != 0 || strcmp(seg[1], "webhooks") != 0)
        return false;
    snprintf(name, cap, "%s", seg[2]);
    return true;
}

bool sl__http_admit(sl_http_req *r, const char *method, const char *url, enum MHD_Result *ret)
{
    sl_http *h = r->h;
    const sl_auth *a = atomic_load(&h->auth);
    bool keys = sl_auth_count(a) > 0;
    char set[SL_SET_NAME_MAX + 2];
    bool redrive = false;
    /* The EventBridge API signs its requests (SigV4, http/aws.c). */
    r->aws = sl__http_aws_request(r, method, url);
    sl_auth_right right = r->aws ? SL_AUTH_OPEN : classify(method, url, set, sizeof set, &redrive);
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    char name[SL_SET_NAME_MAX + 2];
    if (conn_over(r)) {
    } else if (!keys && h->loopback && !(r->aws && sl_aws_creds(h->opts.aws)) &&
               host_origin_refused(r, method)) {
        /* (an EventBridge call with credentials proves itself: SigV4 signs
         * its Host, so a page from elsewhere cannot make one) */
    } else if (r->aws) {
        r->open_body = keys; /* a body not vouched for by an API key */
    } else if (keys && right != SL_AUTH_OPEN) {
        auth_check(r, a, right, set);
    } else if (right == SL_AUTH_OPEN && !webhook_name(url, name, sizeof name)) {
        /* /healthz and /ui take no body: answered without reading one. */
        if (!get)
            deny(r, 405, "MethodNotAllowed", "%s is not allowed on %s", method, url);
    } else if (right == SL_AUTH_OPEN) { /* POST /v1/webhooks/{name} */
        if (strcmp(method, "POST") != 0)
            deny(r, 405, "MethodNotAllowed", "%s is not allowed on %s", method, url);
        else if (h->hooks.webhook_known && !h->hooks.webhook_known(h->hooks.ctx, name))
            deny(r, 404, "NoSuchWebhook", "no source.webhook is named \"%.128s\"", name);
        else
            r->open_body = keys; /* a stranger's body: its own share of memory */
    }
    if (!r->deny_status)
        return false;
    /* Answered now, so the body is never read: libmicrohttpd closes the
     * connection after the answer. */
    r->close = true;
    if (r->deny_status == 401) {
        static const char *const hdrs[] = {MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                           "Bearer realm=\"sluice\"", NULL};
        *ret = error_hdrs(r, 401, r->deny_code, r->deny_msg, hdrs);
    } else if (r->deny_status == 503) {
        static const char *const hdrs[] = {MHD_HTTP_HEADER_RETRY_AFTER, "1", NULL};
        *ret = error_hdrs(r, 503, r->deny_code, r->deny_msg, hdrs);
    } else {
        *ret = error_hdrs(r, r->deny_status, r->deny_code, r->deny_msg, NULL);
    }
    return true;
}

bool sl__http_redrive_allowed(sl_http_req *r, const char *to, enum MHD_Result *ret)
{
    if (!r->key || sl_auth_allows(r->key, SL_AUTH_PUBLISH, to))
        return true;
    char msg[300];
    snprintf(msg, sizeof msg,
             "API key \"%s\" has no publish right on set \"%s\" (the redrive's destination)",
             sl_auth_key_name(r->key), to);
    *ret = error_hdrs(r, 403, "Forbidden", msg, NULL);
    return false;
}

void sl_http_set_auth(sl_http *h, const sl_auth *auth)
{
    atomic_store(&h->auth, auth);
}

/* ---- the per-client publish rate --------------------------------------------- */

/* "key:NAME" for a request made with a key, else "ip:ADDRESS", where an
 * IPv6 address (not v4-mapped) stands for its /64: a host usually has a
 * whole /64 and could otherwise take a bucket per address. */
void sl__http_client_of(sl_http_req *r, char *out, size_t cap)
{
    if (r->key) {
        snprintf(out, cap, "key:%s", sl_auth_key_name(r->key));
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char ip[INET6_ADDRSTRLEN] = "?";
    const char *suffix = "";
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET) {
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, ip,
                      sizeof ip);
        } else if (sa->sa_family == AF_INET6) {
            struct in6_addr a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
            if (!IN6_IS_ADDR_V4MAPPED(&a)) {
                memset(a.s6_addr + 8, 0, 8);
                suffix = "/64";
            }
            inet_ntop(AF_INET6, &a, ip, sizeof ip);
        }
    }
    snprintf(out, cap, "ip:%s%s", ip, suffix);
}

bool sl__http_rate_admit(sl_http_req *r, size_t n, enum MHD_Result *ret)
{
    sl_http *h = r->h;
    if (!h->rl)
        return true;
    char client[96];
    sl__http_client_of(r, client, sizeof client);
    int64_t wait_ms = sl_ratelimit_take(h->rl, client, (double)(n ? n : 1), sl_clock_mono_ns());
    if (wait_ms <= 0)
        return true;
    unsigned secs = (unsigned)((wait_ms + 999) / 1000);
    char v[16], msg[300];
    snprintf(v, sizeof v, "%u", secs);
    const char *const hdrs[] = {MHD_HTTP_HEADER_RETRY_AFTER, v, NULL};
    char who[96];
    if (r->key)
        snprintf(who, sizeof who, "API key \"%s\"", sl_auth_key_name(r->key));
    else
        snprintf(who, sizeof who, "client %s", client + 3);
    snprintf(msg, sizeof msg,
             "%s is over its rate of %.0f events a second (burst %.0f); nothing from this "
             "request was stored, retry after %u s",
             who, h->opts.rate, h->opts.burst > 0 ? h->opts.burst : h->opts.rate, secs);
    *ret = error_hdrs(r, 429, "TooManyRequests", msg, hdrs);
    return false;
}

/* ---- connections per client address ------------------------------------------ */

#define IP_BUCKETS (sizeof((sl_http *)0)->ips / sizeof *((sl_http *)0)->ips)

/* The text of a client address: IPv4 dotted, IPv6 as inet_ntop writes it. */
static void addr_text(const struct sockaddr *sa, char *out, size_t cap)
{
    snprintf(out, cap, "?");
    if (!sa)
        return;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out,
                  (socklen_t)cap);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out,
                  (socklen_t)cap);
}

static void addr_of(struct MHD_Connection *c, char *out, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    addr_text(ci ? ci->client_addr : NULL, out, cap);
}

static size_t ip_hash(const char *s)
{
    size_t h = 5381;
    for (; *s; s++)
        h = h * 33 + (unsigned char)*s;
    return h % IP_BUCKETS;
}

/* The entry of addr (ip_lock held), NULL when it has no connections. */
static struct sl_http_ip *ip_find(sl_http *h, const char *addr)
{
    struct sl_http_ip *e = h->ips[ip_hash(addr)];
    while (e && strcmp(e->addr, addr) != 0)
        e = e->next;
    return e;
}

enum MHD_Result sl__http_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    sl_http *h = cls;
    if (atomic_load(&h->stopping)) /* sl_http_quiesce(): no new connections */
        return MHD_NO;
    /* Past the cap and its headroom (the band in which new requests get a
     * 503 answer) connections are closed at once. */
    if (atomic_load(&h->conns) >= (int)(h->opts.max_connections + SL_HTTP_CONN_HEADROOM))
        return MHD_NO;
    if (!h->opts.max_connections_per_ip)
        return MHD_YES;
    /* An address at its limit gets no more: idle or slowly uploading
     * connections from one address cannot fill the server. */
    char a[INET6_ADDRSTRLEN];
    addr_text(addr, a, sizeof a);
    pthread_mutex_lock(&h->ip_lock);
    struct sl_http_ip *e = ip_find(h, a);
    bool over = e && e->conns >= h->opts.max_connections_per_ip;
    pthread_mutex_unlock(&h->ip_lock);
    return over ? MHD_NO : MHD_YES;
}

void sl__http_conn_opened(sl_http *h, struct MHD_Connection *c, void **socket_context)
{
    *socket_context = NULL;
    if (!h->opts.max_connections_per_ip)
        return;
    char addr[INET6_ADDRSTRLEN];
    addr_of(c, addr, sizeof addr);
    size_t b = ip_hash(addr);
    pthread_mutex_lock(&h->ip_lock);
    struct sl_http_ip *e = ip_find(h, addr);
    if (!e && (e = calloc(1, sizeof *e))) {
        snprintf(e->addr, sizeof e->addr, "%s", addr);
        e->next = h->ips[b];
        h->ips[b] = e;
    }
    if (e)
        e->conns++;
    pthread_mutex_unlock(&h->ip_lock);
    *socket_context = e; /* NULL when out of memory: that connection is not counted */
}

void sl__http_conn_closed(sl_http *h, void **socket_context)
{
    struct sl_http_ip *e = *socket_context;
    if (!e)
        return;
    *socket_context = NULL;
    pthread_mutex_lock(&h->ip_lock);
    if (--e->conns == 0) {
        struct sl_http_ip **pp = &h->ips[ip_hash(e->addr)];
        while (*pp != e)
            pp = &(*pp)->next;
        *pp = e->next;
        free(e);
    }
    pthread_mutex_unlock(&h->ip_lock);
}
