/*
 * client/client_http.c — the HTTP transport of libsluice: the I/O thread that
 * posts batches straight to a sluice server.
 *
 * Messages are grouped per (set, lane) key. A key sends a batch when its
 * oldest message has waited linger_ms, when it holds batch_bytes, or when a
 * flush waits. Each key has at most one request in flight, so a retried batch
 * can never be overtaken by a later one: the order per set and lane is the
 * order of sl_client_send(). Requests run on one libcurl multi handle, which
 * also reuses the connections; the wake pipe is polled with it.
 *
 * Answers (docs/http-api.md "Publish"): 200 carries one result per NDJSON line,
 * in order, {"partition","offset"} or {"error","message","index"}; 408, 429,
 * 5xx and transport errors are retried after a back-off (the whole batch, so
 * some events may be stored twice when an answer was lost); 413 splits the
 * batch; any other status fails the batch with the server's
 * {"error","message"}.
 */
#include "client_internal.h"

#include <curl/curl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 64
#define ANSWER_MAX ((size_t)64 << 20) /* a 1 MiB batch of 2-byte events answers ~20 MiB */

typedef struct hreq hreq;

/* Messages of one (set, lane). */
typedef struct hkey {
    struct hkey *hnext; /* in the bucket */
    struct hkey *lnext; /* in the list of all keys */
    char set[SL_CLIENT_SET_MAX + 1];
    char lane[SL_CLIENT_LANE_MAX + 1];
    sl_client_msgq pending; /* not sent yet, oldest first */
    int64_t since_ms;       /* when the oldest pending message arrived */
    int64_t retry_at_ms;    /* no request before this (back-off) */
    int backoff_ms;         /* last back-off, 0 after a success */
    size_t max_bytes;       /* batch bound learnt from 413 answers; 0: batch_bytes */
    hreq *inflight;
} hkey;

/* One POST of a batch. */
struct hreq {
    hkey *k;
    CURL *easy;
    struct curl_slist *hdrs;
    sl_client_msgq msgs; /* in the body, in order */
    char *body;
    char *answer;
    size_t alen, acap;
    bool too_big; /* the answer passed ANSWER_MAX */
    char errbuf[CURL_ERROR_SIZE];
};

typedef struct http {
    sl_client *c;
    CURLM *multi;
    hkey *buckets[NBUCKETS];
    hkey *keys;
} http;

static unsigned hash(const char *set, const char *lane)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (const char *p = set; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ 0xffu) * 16777619u;
    for (const char *p = lane; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

/* The key of m, made on first use; NULL without memory. */
static hkey *key_of(http *h, const sl_client_msg *m)
{
    unsigned b = hash(m->set, m->lane) % NBUCKETS;
    for (hkey *k = h->buckets[b]; k; k = k->hnext)
        if (strcmp(k->set, m->set) == 0 && strcmp(k->lane, m->lane) == 0)
            return k;
    hkey *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    memcpy(k->set, m->set, sizeof k->set);
    memcpy(k->lane, m->lane, sizeof k->lane);
    k->hnext = h->buckets[b];
    h->buckets[b] = k;
    k->lnext = h->keys;
    h->keys = k;
    return k;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    hreq *r = ud;
    size_t len = size * n;
    if (r->alen + len + 1 > ANSWER_MAX) {
        r->too_big = true;
        return 0; /* aborts the transfer */
    }
    if (r->alen + len + 1 > r->acap) {
        size_t cap = r->acap ? r->acap : 4096;
        while (cap < r->alen + len + 1)
            cap *= 2;
        char *a = realloc(r->answer, cap);
        if (!a)
            return 0;
        r->answer = a;
        r->acap = cap;
    }
    memcpy(r->answer + r->alen, p, len);
    r->alen += len;
    r->answer[r->alen] = '\0';
    return len;
}

static void req_free(hreq *r)
{
    if (!r)
        return;
    if (r->easy)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->hdrs);
    free(r->body);
    free(r->answer);
    free(r);
}

/* Starts a POST of k's oldest messages, up to batch_bytes (at least one).
 * Without memory, leaves them pending and backs off. */
static void start(http *h, hkey *k)
{
    sl_client *c = h->c;
    hreq *r = calloc(1, sizeof *r);
    if (!r)
        goto retry;
    r->k = k;
    size_t len = 0;
    for (sl_client_msg *m = k->pending.head; m; m = m->next) {
        size_t bound = k->max_bytes ? k->max_bytes : c->batch_bytes;
        if (r->msgs.n && len + m->line_len > bound)
            break;
        len += m->line_len;
        r->msgs.n++;
    }
    r->body = malloc(len ? len : 1);
    r->easy = curl_easy_init();
    char url[SL_CLIENT_ADDR_MAX + SL_CLIENT_SET_MAX + 32];
    char lanehdr[SL_CLIENT_LANE_MAX + 32];
    snprintf(url, sizeof url, "%s/v1/sets/%s/events", c->addr, k->set);
    snprintf(lanehdr, sizeof lanehdr, "X-Sluice-Lane: %s", k->lane);
    struct curl_slist *l = curl_slist_append(NULL, "Content-Type: application/x-ndjson");
    r->hdrs = l;
    /* No "Expect: 100-continue" round trip before big bodies. */
    if (l)
        l = curl_slist_append(r->hdrs, "Expect:");
    if (l && k->lane[0])
        l = curl_slist_append(r->hdrs, lanehdr);
    if (!r->body || !r->easy || !l)
        goto retry;

    size_t n = r->msgs.n;
    r->msgs.n = 0;
    char *w = r->body;
    for (size_t i = 0; i < n; i++) {
        sl_client_msg *m = sl_client__q_pop(&k->pending);
        memcpy(w, m->line, m->line_len);
        w += m->line_len;
        sl_client__q_push(&r->msgs, m);
    }
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* a library must not touch signals */
    curl_easy_setopt(e, CURLOPT_USERAGENT, "libsluice/0.1");
    if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
        sl_client__q_prepend(&k->pending, &r->msgs);
        goto retry;
    }
    k->inflight = r;
    return;

retry:
    req_free(r);
    k->backoff_ms = sl_client__backoff(k->backoff_ms);
    k->retry_at_ms = sl_client__retry_at(k->backoff_ms);
}

/* Reads {"error":…,"message":…} at the top level of an error answer. */
static void error_of(const char *p, const char *end, char *code, size_t clen, char *msg,
                     size_t mlen)
{
    p = sl_client__json_ws(p, end);
    if (p >= end || *p != '{')
        return;
    p++;
    for (;;) {
        char name[16];
        p = sl_client__json_ws(p, end);
        if (!(p = sl_client__json_str(p, end, name, sizeof name)))
            return;
        p = sl_client__json_ws(p, end);
        if (p >= end || *p != ':')
            return;
        p = sl_client__json_ws(p + 1, end);
        const char *v = p;
        if (!(p = sl_client__json_skip(p, end)))
            return;
        if (strcmp(name, "error") == 0)
            sl_client__json_str(v, end, code, clen);
        else if (strcmp(name, "message") == 0)
            sl_client__json_str(v, end, msg, mlen);
        p = sl_client__json_ws(p, end);
        if (p >= end || *p != ',')
            return;
        p++;
    }
}

/* Delivers the results of a 200 answer, one per message of r in order.
 * Messages without a result (a short or malformed answer) fail with EPROTO. */
static void deliver_results(http *h, hreq *r)
{
    const char *p = r->answer ? r->answer : "", *end = p + r->alen;
    const char *results = NULL;
    /* Find "results" among the top-level members. */
    p = sl_client__json_ws(p, end);
    if (p < end && *p == '{') {
        p++;
        for (;;) {
            char name[16];
            p = sl_client__json_ws(p, end);
            if (!(p = sl_client__json_str(p, end, name, sizeof name)))
                break;
            p = sl_client__json_ws(p, end);
            if (p >= end || *p != ':')
                break;
            p = sl_client__json_ws(p + 1, end);
            if (strcmp(name, "results") == 0) {
                results = p;
                break;
            }
            if (!(p = sl_client__json_skip(p, end)))
                break;
            p = sl_client__json_ws(p, end);
            if (p >= end || *p != ',')
                break;
            p++;
        }
    }
    p = results;
    if (p && p < end && *p == '[')
        p++;
    else
        p = NULL;
    sl_client_msg *m;
    while ((m = sl_client__q_pop(&r->msgs))) {
        char code[64] = "", msg[512] = "";
        const char *elem = p ? sl_client__json_ws(p, end) : NULL;
        const char *next =
            elem && elem < end && *elem == '{' ? sl_client__json_skip(elem, end) : NULL;
        if (!next) {
            p = NULL;
            sl_client__done(h->c, m, SL_CLIENT_EPROTO, NULL,
                            "the server's answer has no result for this event");
            continue;
        }
        error_of(elem, next, code, sizeof code, msg, sizeof msg);
        p = sl_client__json_ws(next, end);
        if (p < end && *p == ',')
            p++;
        if (code[0])
            sl_client__done(h->c, m, SL_CLIENT_EREJECTED, code, msg);
        else
            sl_client__done(h->c, m, 0, NULL, NULL);
    }
}

/* Whether the answer is 507 SetLimit: the set cannot be created on first
 * use, and retrying does not help (unlike 507 InsufficientStorage). */
static bool set_limit(const hreq *r, long status)
{
    if (status != 507 || !r->answer)
        return false;
    char code[64] = "", msg[8];
    error_of(r->answer, r->answer + r->alen, code, sizeof code, msg, sizeof msg);
    return strcmp(code, "SetLimit") == 0;
}

/* A request ended: deliver, fail or put back its messages. */
static void finish(http *h, hreq *r, CURLcode rc)
{
    hkey *k = r->k;
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(h->multi, r->easy);
    k->inflight = NULL;
    bool retry = false;
    if (rc != CURLE_OK || status == 0) {
        retry = !r->too_big;
        if (r->too_big)
            sl_client__done_all(h->c, &r->msgs, SL_CLIENT_EPROTO, NULL,
                                "the server's answer is too large");
    } else if (status == 200) {
        deliver_results(h, r);
    } else if (status == 413 && r->msgs.n > 1) {
        /* The server takes smaller requests (--max-request, or a partition's
         * buffer): split the batch rather than fail events that fit alone.
         * The bound stays for this key. */
        size_t len = r->msgs.bytes;
        k->max_bytes = len / 2 ? len / 2 : 1;
        sl_client__q_prepend(&k->pending, &r->msgs);
        k->since_ms = 0;
    } else if ((status == 408 || status == 429 || status >= 500) && !set_limit(r, status)) {
        /* RequestTimeout (the body came too slowly: nothing was stored),
         * Backpressure, ShuttingDown, a disk error: all passing. */
        retry = true;
    } else {
        char code[64] = "", msg[512] = "";
        const char *a = r->answer ? r->answer : "";
        error_of(a, a + r->alen, code, sizeof code, msg, sizeof msg);
        if (!code[0])
            snprintf(code, sizeof code, "HTTP%ld", status);
        if (!msg[0])
            snprintf(msg, sizeof msg, "the server answered %ld", status);
        sl_client__done_all(h->c, &r->msgs, status >= 400 ? SL_CLIENT_EREJECTED : SL_CLIENT_EPROTO,
                            code, msg);
    }
    if (retry) {
        sl_client__q_prepend(&k->pending, &r->msgs);
        k->since_ms = 0; /* sent as soon as the back-off ends */
        k->backoff_ms = sl_client__backoff(k->backoff_ms);
        k->retry_at_ms = sl_client__retry_at(k->backoff_ms);
    } else {
        k->backoff_ms = 0;
    }
    req_free(r);
}

/* Starts what is due; returns how long the poll may sleep. */
static int schedule(http *h, bool flushing)
{
    sl_client *c = h->c;
    int64_t now = sl_client__now_ms(), wait = 1000;
    for (hkey *k = h->keys; k; k = k->lnext) {
        if (k->inflight || !k->pending.n)
            continue;
        int64_t due = k->since_ms + c->linger_ms;
        if (flushing || k->pending.bytes >= c->batch_bytes)
            due = now;
        if (due < k->retry_at_ms)
            due = k->retry_at_ms;
        if (due <= now)
            start(h, k);
        else if (due - now < wait)
            wait = due - now;
        if (!k->inflight && k->pending.n && k->retry_at_ms > now && k->retry_at_ms - now < wait)
            wait = k->retry_at_ms - now; /* start() failed and backed off */
    }
    return (int)wait;
}

/* Sorts newly taken messages into their keys. */
static void distribute(http *h, sl_client_msgq *in)
{
    int64_t now = sl_client__now_ms();
    sl_client_msg *m;
    while ((m = sl_client__q_pop(in))) {
        hkey *k = key_of(h, m);
        if (!k) {
            sl_client__done(h->c, m, SL_CLIENT_ENOMEM, NULL, NULL);
            continue;
        }
        if (!k->pending.n)
            k->since_ms = now;
        sl_client__q_push(&k->pending, m);
    }
}

static void shutdown_all(http *h)
{
    hkey *k = h->keys;
    while (k) {
        hkey *next = k->lnext;
        if (k->inflight) {
            curl_multi_remove_handle(h->multi, k->inflight->easy);
            sl_client__done_all(h->c, &k->inflight->msgs, SL_CLIENT_ESHUTDOWN, NULL, NULL);
            req_free(k->inflight);
        }
        sl_client__done_all(h->c, &k->pending, SL_CLIENT_ESHUTDOWN, NULL, NULL);
        free(k);
        k = next;
    }
    h->keys = NULL;
}

void sl_client__http_run(sl_client *c)
{
    http h = {.c = c, .multi = curl_multi_init()};
    sl_client_msgq in = {0};
    sl_client_take t = {0};
    for (;;) {
        sl_client__take(c, &in, &t);
        if (t.stopping || !h.multi)
            break;
        distribute(&h, &in);
        int wait = schedule(&h, t.flushing);
        int running = 0;
        curl_multi_perform(h.multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(h.multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            hreq *r = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            finish(&h, r, msg->data.result);
            wait = 0; /* the key may have more to send right away */
        }
        struct curl_waitfd wfd = {.fd = c->wake_rd, .events = CURL_WAIT_POLLIN};
        if (wait > 0)
            curl_multi_poll(h.multi, &wfd, 1, wait, NULL);
    }
    /* Without a multi handle nothing can be sent: fail every event as it
     * comes, until close. */
    while (!t.stopping) {
        sl_client__done_all(c, &in, SL_CLIENT_ENOMEM, NULL, "cannot start libcurl");
        struct pollfd pfd = {.fd = c->wake_rd, .events = POLLIN};
        poll(&pfd, 1, -1);
        sl_client__take(c, &in, &t);
    }
    sl_client__done_all(c, &in, SL_CLIENT_ESHUTDOWN, NULL, NULL);
    shutdown_all(&h);
    if (h.multi)
        curl_multi_cleanup(h.multi);
}
