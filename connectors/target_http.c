/*
 * connectors/target_http.c — target.http: payloads sent to an HTTP endpoint
 * with libcurl's multi interface (docs/targets.md).
 *
 * Each instance owns one curl multi handle and one thread that drives it, so
 * a slow endpoint never holds another rule's target, and the multi handle's
 * connection cache gives keep-alive reuse. A Retry-After (429/503) pauses the
 * instance: calls made during the pause are refused at once with a retryable
 * code (the runner backs off and comes again) instead of being held, since a
 * held call would keep one of the shared rule workers waiting. deliver()
 * builds the requests of a call (URL template, headers, body, batches) in the
 * caller's thread, completes the payloads it must refuse at once (SL_EINVAL),
 * hands the rest to the thread and returns.
 *
 * Order: the requests of one deliver() call (one partition's batch) are sent
 * one after another, so the endpoint sees a partition's events in order;
 * `concurrency` bounds the requests in flight across calls (partitions). When
 * a request fails in a way worth retrying, the rest of its call is not sent
 * and completes with the same status: the runner delivers the whole batch
 * again anyway, and sending the tail would only reorder and duplicate.
 * A rule with `ordered = false` gives that up for speed: the requests of a
 * call go out side by side (still bounded by `concurrency`) and each
 * completes with its own status.
 */
#include "core/bus/ce_binding.h"
#include "core/base/clock.h"
#include "connectors/target_http.h"
#include "connectors/oauth.h"
#include "core/bus/event.h"
#include "core/base/json.h"
#include "core/base/buf.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define RESP_KEEP 200              /* bytes of an error answer quoted in reasons */
#define RETRY_AFTER_MAX_MS 3600000 /* a Retry-After pauses the instance at most this long */

typedef struct http_target http_target;

/* One request: payloads idx[first .. first + n) of its call. */
typedef struct req {
    char *url;
    const char *lane;
    const char *body; /* the payload itself, or own.data */
    size_t body_len;
    sl_buf own;
    struct curl_slist *hdrs;
    size_t first, n;
} req;

/* One deliver() call: its requests go out one at a time, in order. */
typedef struct call {
    struct call *next;
    sl_deliver_done_fn *done;
    void *ctx;
    size_t *idx; /* payload indices, in request order */
    req *reqs;
    size_t nreq, cur; /* cur: the request in flight or next to send */
    CURL *easy;       /* of the request in flight */
    struct curl_slist *send_hdrs; /* its headers with the OAuth token (auth.oauth) */
    char errbuf[CURL_ERROR_SIZE];
    sl_buf resp; /* the first RESP_KEEP bytes of the answer */
    char retry_after[64];
} call;

struct http_target {
    const sl_target_http_conf *cfg;
    bool ordered; /* the rule's `ordered` */
    char *rule;
    struct curl_slist *common; /* config headers, auth, "Expect:" */
    sl_oauth *oauth;           /* auth.oauth: the token, added to each request sent */
    bool has_ctype;            /* the config sets Content-Type itself */
    CURLM *multi;
    pthread_t thread;
    pthread_mutex_t lock; /* guards incoming and stopping */
    call *incoming;       /* from deliver(), newest first */
    bool stopping;
    bool hurry; /* cancel(): in-flight requests get a short grace, not the timeout */
    /* the thread's own */
    call *ready_head, *ready_tail; /* calls whose next request can go */
    size_t inflight;
    call *flying;                     /* the calls with a request in flight, linked by next */
    int64_t paused_until_ms;          /* Retry-After: nothing is sent before (monotonic) */
    char paused_by[SL_ERROR_MAX / 2]; /* the answer that asked for the pause */
    double tokens;                    /* rate limiting */
    int64_t tokens_at_ms;
    /* health(): the last request's outcome */
    pthread_mutex_t hlock;
    int64_t failing_since_ms; /* 0: the last request got an answer that was not a failure */
    char failing[SL_ERROR_MAX / 2];
};

/* What cancel() leaves requests in flight when the server stops. */
#define CANCEL_GRACE_MS 2000

/* ---- building requests (caller's thread) -------------------------------------- */

/* Percent-encodes a URL template's attribute value. */
static int url_escape(sl_buf *out, const char *v, size_t len)
{
    char *esc = curl_easy_escape(NULL, v, (int)len);
    int rc = esc ? sl_buf_append(out, esc, strlen(esc)) : SL_ENOMEM;
    curl_free(esc);
    return rc;
}

/* Expands the URL template for one parsed event (ev NULL: no placeholders).
 * Returns 0 and a malloc'ed *url, SL_EINVAL with why, or SL_ENOMEM. */
static int expand_url(const char *tpl, const sl_event *ev, char **url, char *why, size_t whylen)
{
    const char *miss = NULL;
    size_t mlen = 0;
    int rc = sl_ce_expand(tpl, ev, url_escape, url, NULL, &miss, &mlen);
    if (rc == SL_EINVAL)
        snprintf(why, whylen,
                 "target.http: the URL template %s needs the attribute \"%.*s\", which the "
                 "payload does not have",
                 tpl, (int)mlen, miss);
    else if (rc)
        snprintf(why, whylen, "target.http: out of memory");
    return rc;
}

static int add_header(struct curl_slist **l, const char *line)
{
    struct curl_slist *n = curl_slist_append(*l, line);
    if (!n)
        return SL_ENOMEM;
    *l = n;
    return 0;
}

static int add_headerf(struct curl_slist **l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int add_headerf(struct curl_slist **l, const char *fmt, ...)
{
    /* Any length: bearer tokens of a few KiB are common. */
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return SL_ENOMEM;
    int rc = add_header(l, line);
    free(line);
    return rc;
}

/* Percent-encodes a ce-* header value as the CloudEvents HTTP binding asks:
 * space, '"', '%', controls and non-ASCII bytes. */
static int add_ce_header(struct curl_slist **l, const char *name, size_t nlen, const char *v,
                         size_t vlen)
{
    sl_buf b = SL_BUF_INIT;
    int rc = sl_buf_printf(&b, "ce-%.*s: ", (int)nlen, name);
    for (size_t i = 0; !rc && i < vlen; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%')
            rc = sl_buf_printf(&b, "%%%02X", c);
        else
            rc = sl_buf_append(&b, &v[i], 1);
    }
    if (!rc)
        rc = sl_buf_append(&b, "", 1);
    if (!rc)
        rc = add_header(l, (const char *)b.data);
    sl_buf_free(&b);
    return rc;
}

static int ce_header_of(void *ud, const char *name, size_t nlen, const char *v, size_t vlen)
{
    return add_ce_header(ud, name, nlen, v, vlen);
}

/* Binary mode: the event's data as the body, its attributes as ce-* headers. */
static int binary_request(http_target *t, const sl_event *ev, req *r)
{
    bool oom = false;
    int rc = sl_ce_binary_attrs(ev, ce_header_of, &r->hdrs);
    char *ctype = rc ? NULL : sl_ce_content_type(ev, &oom);
    if (oom)
        rc = SL_ENOMEM;
    if (!rc && !t->has_ctype)
        rc = add_headerf(&r->hdrs, "Content-Type: %s", ctype ? ctype : "application/json");
    if (!rc)
        rc = sl_ce_binary_data(ev, ctype, &r->own);
    free(ctype);
    r->body = (const char *)r->own.data;
    r->body_len = r->own.len;
    return rc;
}

static void finish_call(call *c, size_t from, int status, const char *reason);

static void free_call(call *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nreq; i++) {
        free(c->reqs[i].url);
        sl_buf_free(&c->reqs[i].own);
        curl_slist_free_all(c->reqs[i].hdrs);
    }
    if (c->easy)
        curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->send_hdrs);
    sl_buf_free(&c->resp);
    free(c->reqs);
    free(c->idx);
    free(c);
}

/* The common headers, Content-Type and lane headers of a request. */
static int base_headers(http_target *t, req *r, const char *ctype)
{
    int rc = 0;
    for (struct curl_slist *h = t->common; h && !rc; h = h->next)
        rc = add_header(&r->hdrs, h->data);
    if (!rc && ctype && !t->has_ctype)
        rc = add_headerf(&r->hdrs, "Content-Type: %s", ctype);
    if (!rc && r->lane[0]) {
        rc = add_headerf(&r->hdrs, "X-Sluice-Lane: %s", r->lane);
        if (!rc)
            rc = add_headerf(&r->hdrs, "baggage: lane=%s", r->lane);
    }
    return rc;
}

/* Builds the requests of one call: refused payloads complete at once. Returns
 * the call (NULL when nothing is left to send, or out of memory: then every
 * payload not refused completed with SL_ENOMEM). */
static call *build_call(http_target *t, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                        void *ctx)
{
    const sl_target_http_conf *cfg = t->cfg;
    bool templ = strchr(cfg->url, '{') != NULL;
    bool binary = cfg->body == SL_HTTP_BODY_BINARY;
    size_t per = binary || cfg->batch < 1 ? 1 : (size_t)cfg->batch;
    call *c = calloc(1, sizeof *c);
    sl_event *ev = templ || binary ? malloc(sizeof *ev) : NULL;
    char **urls = calloc(n, sizeof *urls);
    bool *owed = malloc(n ? n : 1); /* not completed yet */
    for (size_t i = 0; owed && i < n; i++)
        owed[i] = true;
    if (c) {
        c->idx = calloc(n, sizeof *c->idx);
        c->reqs = calloc(n, sizeof *c->reqs);
        c->done = done;
        c->ctx = ctx;
    }
    if (!c || !c->idx || !c->reqs || !urls || !owed || ((templ || binary) && !ev))
        goto oom;
    char why[SL_ERROR_MAX];
    size_t nidx = 0;
    for (size_t i = 0; i < n; i++) {
        bool parsed = false;
        if (templ || binary) {
            sl_error e = {0};
            sl_event_limits lim = {.max_bytes = d[i].len + 1};
            if (sl_event_parse(d[i].data, d[i].len, &lim, ev, &e) != SL_EVENT_OK) {
                snprintf(why, sizeof why, "target.http: %s needs a CloudEvent payload: %s",
                         binary ? "body = \"binary\"" : "the URL template", e.msg);
                owed[i] = false;
                done(ctx, i, SL_EINVAL, why);
                continue;
            }
            parsed = true;
        }
        int rc = expand_url(cfg->url, parsed ? ev : NULL, &urls[i], why, sizeof why);
        if (rc == SL_ENOMEM)
            goto oom;
        if (rc) {
            owed[i] = false;
            done(ctx, i, rc, why);
            continue;
        }
        if (binary) {
            req *r = &c->reqs[c->nreq];
            r->first = nidx;
            r->n = 1;
            r->lane = d[i].lane ? d[i].lane : "";
            r->url = urls[i];
            urls[i] = NULL;
            c->nreq++;
            if (base_headers(t, r, NULL) || binary_request(t, ev, r))
                goto oom;
        }
        c->idx[nidx++] = i;
    }
    /* Groups of up to `per` consecutive payloads with the same URL and lane. */
    for (size_t k = 0; !binary && k < nidx;) {
        size_t i0 = c->idx[k], m = 1;
        const char *lane = d[i0].lane ? d[i0].lane : "";
        while (k + m < nidx && m < per) {
            size_t j = c->idx[k + m];
            if (strcmp(urls[j], urls[i0]) || strcmp(d[j].lane ? d[j].lane : "", lane))
                break;
            m++;
        }
        req *r = &c->reqs[c->nreq++];
        r->first = k;
        r->n = m;
        r->lane = lane;
        r->url = urls[i0];
        urls[i0] = NULL;
        bool structured = cfg->body == SL_HTTP_BODY_STRUCTURED;
        const char *ctype =
            per > 1 ? (structured ? "application/cloudevents-batch+json" : "application/json")
                    : (structured ? "application/cloudevents+json" : "application/json");
        if (base_headers(t, r, ctype))
            goto oom;
        if (per == 1) {
            r->body = d[i0].data;
            r->body_len = d[i0].len;
        } else {
            int rc = sl_buf_append(&r->own, "[", 1);
            for (size_t q = 0; !rc && q < m; q++) {
                const sl_delivery *p = &d[c->idx[k + q]];
                if (q)
                    rc = sl_buf_append(&r->own, ",", 1);
                if (!rc)
                    rc = sl_buf_append(&r->own, p->data, p->len);
            }
            if (rc || sl_buf_append(&r->own, "]", 1))
                goto oom;
            r->body = (const char *)r->own.data;
            r->body_len = r->own.len;
        }
        k += m;
    }
    for (size_t i = 0; i < n; i++)
        free(urls[i]);
    free(urls);
    free(owed);
    free(ev);
    if (!c->nreq) {
        free_call(c);
        return NULL;
    }
    return c;
oom:
    for (size_t i = 0; i < n; i++) {
        if (!owed || owed[i])
            done(ctx, i, SL_ENOMEM, "target.http: out of memory");
        if (urls)
            free(urls[i]);
    }
    free(urls);
    free(owed);
    free(ev);
    free_call(c);
    return NULL;
}

/* ordered = false: splits c into one call per request, so that its requests
 * go out side by side (up to `concurrency`) and a failure holds none of the
 * others. Returns the calls linked by next, first request first; c itself
 * when it has one request or memory is short (then it stays in order). */
static call *split_call(call *c)
{
    if (c->nreq < 2)
        return c;
    call **parts = calloc(c->nreq, sizeof *parts);
    bool ok = parts != NULL;
    for (size_t i = 0; ok && i < c->nreq; i++) {
        call *p = parts[i] = calloc(1, sizeof *p);
        ok = p && (p->idx = malloc(c->reqs[i].n * sizeof *p->idx)) &&
             (p->reqs = malloc(sizeof *p->reqs));
    }
    if (!ok) {
        for (size_t i = 0; parts && i < c->nreq; i++)
            free_call(parts[i]);
        free(parts);
        return c;
    }
    for (size_t i = 0; i < c->nreq; i++) {
        call *p = parts[i];
        p->done = c->done;
        p->ctx = c->ctx;
        p->reqs[0] = c->reqs[i];
        memcpy(p->idx, c->idx + c->reqs[i].first, c->reqs[i].n * sizeof *p->idx);
        p->reqs[0].first = 0;
        p->nreq = 1;
        p->next = i + 1 < c->nreq ? parts[i + 1] : NULL;
    }
    call *first = parts[0];
    c->nreq = 0; /* its requests moved */
    free_call(c);
    free(parts);
    return first;
}

static void http_deliver(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                         void *ctx)
{
    http_target *t = impl;
    call *c = build_call(t, d, n, done, ctx);
    if (!c)
        return;
    if (!t->ordered)
        c = split_call(c);
    pthread_mutex_lock(&t->lock);
    bool stopping = t->stopping;
    while (!stopping && c) { /* incoming is newest first */
        call *nx = c->next;
        c->next = t->incoming;
        t->incoming = c;
        c = nx;
    }
    pthread_mutex_unlock(&t->lock);
    while (c) {
        call *nx = c->next;
        finish_call(c, 0, SL_ESHUTDOWN, "target.http: shutting down");
        c = nx;
    }
    curl_multi_wakeup(t->multi);
}

/* ---- the curl thread ------------------------------------------------------------ */

/* Completes the payloads of requests [from, nreq) of c and frees c. */
static void finish_call(call *c, size_t from, int status, const char *reason)
{
    for (size_t i = from; i < c->nreq; i++)
        for (size_t q = 0; q < c->reqs[i].n; q++)
            c->done(c->ctx, c->idx[c->reqs[i].first + q], status, reason);
    free_call(c);
}

static void ready_push(http_target *t, call *c)
{
    c->next = NULL;
    if (t->ready_tail)
        t->ready_tail->next = c;
    else
        t->ready_head = c;
    t->ready_tail = c;
}

static call *ready_pop(http_target *t)
{
    call *c = t->ready_head;
    if (c && !(t->ready_head = c->next))
        t->ready_tail = NULL;
    return c;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    call *c = ud;
    size_t n = size * nmemb;
    if (c->resp.len < RESP_KEEP)
        sl_buf_append(&c->resp, p, n < RESP_KEEP - c->resp.len ? n : RESP_KEEP - c->resp.len);
    return n;
}

static size_t on_header(char *p, size_t size, size_t nitems, void *ud)
{
    call *c = ud;
    size_t n = size * nitems;
    if (n > 12 && strncasecmp(p, "retry-after:", 12) == 0) {
        size_t a = 12, b = n;
        while (a < b && (p[a] == ' ' || p[a] == '\t'))
            a++;
        while (b > a && (p[b - 1] == '\r' || p[b - 1] == '\n' || p[b - 1] == ' '))
            b--;
        snprintf(c->retry_after, sizeof c->retry_after, "%.*s", (int)(b - a), p + a);
    }
    return n;
}

static void note_health(http_target *t, const char *why);

/* Starts the current request of c. Returns 0, or an SL_E… code with c untouched. */
static int start_request(http_target *t, call *c)
{
    const sl_target_http_conf *cfg = t->cfg;
    req *r = &c->reqs[c->cur];
    struct curl_slist *hdrs = r->hdrs;
    if (t->oauth) {
        /* The token of the moment, on a copy of the request's headers (a
         * retry may carry a newer one). */
        char line[8300], why[SL_ERROR_MAX];
        if (sl_oauth_header(t->oauth, line, sizeof line, why, sizeof why)) {
            note_health(t, why);
            return SL_EIO;
        }
        curl_slist_free_all(c->send_hdrs);
        c->send_hdrs = NULL;
        int rc = 0;
        for (struct curl_slist *h = r->hdrs; h && !rc; h = h->next)
            rc = add_header(&c->send_hdrs, h->data);
        if (rc || add_header(&c->send_hdrs, line))
            return SL_ENOMEM;
        hdrs = c->send_hdrs;
    }
    CURL *e = curl_easy_init();
    if (!e)
        return SL_ENOMEM;
    c->resp.len = 0;
    c->retry_after[0] = '\0';
    c->errbuf[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, c);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "");
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, cfg->method ? cfg->method : "POST");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)cfg->timeout_ms);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, cfg->tls_verify ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, cfg->tls_verify ? 2L : 0L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (cfg->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, cfg->ca_file);
    if (cfg->auth.basic_user) {
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(e, CURLOPT_USERNAME, cfg->auth.basic_user);
        curl_easy_setopt(e, CURLOPT_PASSWORD, cfg->auth.basic_pass ? cfg->auth.basic_pass : "");
    }
    if (curl_multi_add_handle(t->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        return SL_ENOMEM;
    }
    c->easy = e;
    t->inflight++;
    c->next = t->flying;
    t->flying = c;
    return 0;
}

/* Milliseconds a Retry-After value asks for (seconds or an HTTP date), or -1. */
static int64_t retry_after_ms(const char *v)
{
    if (!v[0])
        return -1;
    char *end;
    long long s = strtoll(v, &end, 10);
    int64_t ms;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end == '\0' && s >= 0) {
        ms = s > RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS : s * 1000;
    } else {
        time_t when = curl_getdate(v, NULL);
        if (when < 0)
            return -1;
        ms = ((int64_t)when * 1000) - sl_clock_now_ms();
        if (ms < 0)
            ms = 0;
    }
    return ms > RETRY_AFTER_MAX_MS ? RETRY_AFTER_MAX_MS : ms;
}

/* Records the last request's outcome for health(): why it failed in a way
 * worth retrying, or NULL when the endpoint answered (2xx or a refusal). */
static void note_health(http_target *t, const char *why)
{
    pthread_mutex_lock(&t->hlock);
    if (!why) {
        t->failing_since_ms = 0;
    } else {
        if (!t->failing_since_ms)
            t->failing_since_ms = sl_clock_mono_ms();
        snprintf(t->failing, sizeof t->failing, "%s", why);
    }
    pthread_mutex_unlock(&t->hlock);
}

/* Unhealthy while the last request failed (network, TLS, timeout, 408/429/5xx)
 * or a Retry-After pause lasts; healthy again at the next answer. */
static int http_health(void *impl, char *msg, size_t len)
{
    http_target *t = impl;
    pthread_mutex_lock(&t->hlock);
    int64_t since = t->failing_since_ms;
    if (since)
        snprintf(msg, len, "requests failing for %lld s: %s",
                 (long long)((sl_clock_mono_ms() - since) / 1000), t->failing);
    pthread_mutex_unlock(&t->hlock);
    return since != 0;
}

/* A request of c ended with result res: completes its payloads, and either
 * queues c's next request or finishes c. */
static void request_done(http_target *t, call *c, CURLcode res)
{
    const sl_target_http_conf *cfg = t->cfg;
    req *r = &c->reqs[c->cur];
    long code = 0;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_multi_remove_handle(t->multi, c->easy);
    curl_easy_cleanup(c->easy);
    c->easy = NULL;
    t->inflight--;
    for (call **pp = &t->flying; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    char why[SL_ERROR_MAX];
    int status = 0;
    const char *method = cfg->method ? cfg->method : "POST";
    int blen = (int)c->resp.len;
    const char *body = blen ? (const char *)c->resp.data : "";
    if (res != CURLE_OK) {
        status = res == CURLE_OPERATION_TIMEDOUT ? SL_ETIMEDOUT : SL_EIO;
        snprintf(why, sizeof why, "target.http: %s %s: %s", method, r->url,
                 c->errbuf[0] ? c->errbuf : curl_easy_strerror(res));
    } else if (code >= 200 && code < 300) {
        status = 0;
    } else if (code == 401 && t->oauth) {
        /* The token expired or was revoked early: the retry fetches one. */
        sl_oauth_drop(t->oauth);
        status = SL_EIO;
        snprintf(why, sizeof why, "HTTP 401 from %s with an OAuth token (a new one is fetched): %.*s",
                 r->url, blen, body);
    } else if (code == 408 || code == 429 || code >= 500) {
        status = SL_EIO;
        int64_t pause = code == 429 || code == 503 ? retry_after_ms(c->retry_after) : -1;
        if (pause >= 0) {
            int64_t until = sl_clock_mono_ms() + pause;
            if (until > t->paused_until_ms) {
                t->paused_until_ms = until;
                snprintf(t->paused_by, sizeof t->paused_by, "HTTP %ld from %s (Retry-After: %s)",
                         code, r->url, c->retry_after);
            }
            snprintf(why, sizeof why,
                     "HTTP %ld from %s (Retry-After: %s; target.http sends nothing for %lld ms): "
                     "%.*s",
                     code, r->url, c->retry_after, (long long)pause, blen, body);
        } else {
            snprintf(why, sizeof why, "HTTP %ld from %s: %.*s", code, r->url, blen, body);
        }
    } else {
        status = SL_EINVAL;
        snprintf(why, sizeof why, "HTTP %ld: %.*s", code, blen, body);
    }
    note_health(t, status && status != SL_EINVAL ? why : NULL);
    if (status && status != SL_EINVAL) {
        /* The rest of the call is not sent (it would overtake the failed
         * payload): deferred, which does not count as an attempt. */
        for (size_t q = 0; q < r->n; q++)
            c->done(c->ctx, c->idx[r->first + q], status, why);
        finish_call(c, c->cur + 1, SL_EDEFERRED,
                    "target.http: not sent: an earlier payload of its batch failed");
        return;
    }
    for (size_t q = 0; q < r->n; q++)
        c->done(c->ctx, c->idx[r->first + q], status, status ? why : NULL);
    if (++c->cur == c->nreq) {
        free_call(c);
        return;
    }
    ready_push(t, c);
}

/* Whether the rate limit lets one more request go now; else *wait_ms says
 * when one will. */
static bool take_token(http_target *t, int64_t now, int64_t *wait_ms)
{
    if (t->cfg->rate <= 0)
        return true;
    double rate = (double)t->cfg->rate, cap = rate / 10 > 1 ? rate / 10 : 1;
    t->tokens += (double)(now - t->tokens_at_ms) * rate / 1000.0;
    if (t->tokens > cap)
        t->tokens = cap;
    t->tokens_at_ms = now;
    if (t->tokens >= 1) {
        t->tokens -= 1;
        return true;
    }
    *wait_ms = (int64_t)((1 - t->tokens) * 1000.0 / rate) + 1;
    return false;
}

static void *http_thread(void *arg)
{
    http_target *t = arg;
    int64_t deadline = -1; /* set when stopping: in-flight requests get until then */
    for (;;) {
        pthread_mutex_lock(&t->lock);
        call *in = t->incoming;
        t->incoming = NULL;
        bool stopping = t->stopping;
        pthread_mutex_unlock(&t->lock);
        /* incoming is newest first: reverse it so calls go out in arrival order */
        call *rev = NULL;
        while (in) {
            call *nx = in->next;
            in->next = rev;
            rev = in;
            in = nx;
        }
        while (rev) {
            call *nx = rev->next;
            ready_push(t, rev);
            rev = nx;
        }
        int64_t now = sl_clock_mono_ms();
        if (stopping) {
            call *c;
            while ((c = ready_pop(t)))
                finish_call(c, c->cur, SL_ESHUTDOWN, "target.http: shutting down");
            if (deadline < 0)
                deadline =
                    now + (t->hurry && t->cfg->timeout_ms > CANCEL_GRACE_MS ? CANCEL_GRACE_MS
                                                                            : t->cfg->timeout_ms);
            if (!t->inflight || now >= deadline)
                break;
        }
        int64_t wait = 1000;
        if (now < t->paused_until_ms && t->ready_head) {
            /* Refused at once rather than held: a held call would keep a
             * rule worker (a shared thread) waiting for the whole pause. */
            char why[SL_ERROR_MAX];
            snprintf(why, sizeof why, "target.http: paused by %s, %lld ms left", t->paused_by,
                     (long long)(t->paused_until_ms - now));
            call *c;
            while ((c = ready_pop(t)))
                finish_call(c, c->cur, SL_EDEFERRED, why);
        }
        while (!stopping && t->ready_head && t->inflight < (size_t)t->cfg->concurrency) {
            int64_t tw = 0;
            if (!take_token(t, now, &tw)) {
                wait = tw;
                break;
            }
            call *c = ready_pop(t);
            int src = start_request(t, c);
            if (src == SL_EIO) /* no OAuth token: retried like an unreachable endpoint */
                finish_call(c, c->cur, SL_EIO, "target.http: no OAuth token (see the health)");
            else if (src)
                finish_call(c, c->cur, SL_ENOMEM, "target.http: cannot start a request");
        }
        if (stopping && deadline - now < wait)
            wait = deadline - now;
        int running = 0;
        curl_multi_perform(t->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(t->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            call *c = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            request_done(t, c, m->data.result);
        }
        if (t->ready_head && !stopping && t->inflight < (size_t)t->cfg->concurrency && wait == 1000)
            wait = 0; /* request_done queued more work, or a pause began */
        curl_multi_poll(t->multi, NULL, 0, (int)(wait > 0 ? wait : 0), NULL);
    }
    /* In-flight requests that outlived the deadline. */
    while (t->flying) {
        call *c = t->flying;
        t->flying = c->next;
        curl_multi_remove_handle(t->multi, c->easy);
        curl_easy_cleanup(c->easy);
        c->easy = NULL;
        finish_call(c, c->cur, SL_ESHUTDOWN,
                    "target.http: shutting down (the request did not finish in time)");
    }
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void http_free(http_target *t)
{
    if (t->multi)
        curl_multi_cleanup(t->multi);
    curl_slist_free_all(t->common);
    sl_oauth_free(t->oauth);
    free(t->rule);
    pthread_mutex_destroy(&t->hlock);
    free(t);
}

static void global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int http_open(const sl_target_config *tc, const sl_target_env *env, void **impl,
                     sl_error *err)
{
    const sl_target_http_conf *cfg = tc->conf;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, global_init);
    http_target *t = calloc(1, sizeof *t);
    if (!t)
        return sl_error_set(err, SL_ENOMEM, "target.http: out of memory");
    pthread_mutex_init(&t->hlock, NULL); /* destroyed by http_free() */
    t->cfg = cfg;
    t->ordered = tc->ordered;
    t->rule = strdup(env && env->rule ? env->rule : "");
    int rc = t->rule ? 0 : SL_ENOMEM;
    for (size_t i = 0; !rc && i < cfg->nheaders; i++) {
        rc = add_header(&t->common, cfg->headers[i]);
        if (strncasecmp(cfg->headers[i], "content-type:", 13) == 0)
            t->has_ctype = true;
    }
    if (!rc && cfg->auth.bearer)
        rc = add_headerf(&t->common, "Authorization: Bearer %s", cfg->auth.bearer);
    if (!rc && cfg->auth.oauth_url)
        rc = sl_oauth_new(&cfg->auth, cfg->timeout_ms, &t->oauth);
    if (!rc && cfg->auth.api_key_header && cfg->auth.api_key)
        rc = add_headerf(&t->common, "%s: %s", cfg->auth.api_key_header, cfg->auth.api_key);
    if (!rc)
        rc = add_header(&t->common, "Expect:"); /* no 100-continue round trip */
    if (!rc && !(t->multi = curl_multi_init()))
        rc = SL_ENOMEM;
    if (rc) {
        http_free(t);
        return sl_error_set(err, rc, "target.http: out of memory");
    }
    long conns = (long)(cfg->concurrency > 0 ? cfg->concurrency : 8);
    curl_multi_setopt(t->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, conns);
    curl_multi_setopt(t->multi, CURLMOPT_MAXCONNECTS, conns);
    t->tokens_at_ms = sl_clock_mono_ms();
    t->tokens = 1;
    pthread_mutex_init(&t->lock, NULL);
    if (pthread_create(&t->thread, NULL, http_thread, t)) {
        pthread_mutex_destroy(&t->lock);
        http_free(t);
        return sl_error_set(err, SL_ENOMEM, "target.http: cannot start its thread");
    }
    *impl = t;
    return 0;
}

static void http_cancel(void *impl)
{
    http_target *t = impl;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    t->hurry = true;
    pthread_mutex_unlock(&t->lock);
    curl_multi_wakeup(t->multi);
}

static void http_close(void *impl)
{
    http_target *t = impl;
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    pthread_mutex_unlock(&t->lock);
    curl_multi_wakeup(t->multi);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    http_free(t);
}

static const sl_conf_key http_keys[] = {
    {"url", SL_KEY_STRING, SL_CONF_FIELD(sl_target_http_conf, url), 0, 0, "required",
     "the endpoint; `{attribute}` is replaced by the event's attribute (URL-encoded), e.g. "
     "`https://x/{subject}`"},
    {"method", SL_KEY_STRING, SL_CONF_FIELD(sl_target_http_conf, method), 0, 0, "\"POST\"",
     "HTTP method"},
    {"headers", SL_KEY_HEADERS, SL_CONF_FIELD(sl_target_http_conf, headers), 0, 0, "none",
     "`{ [\"Name\"] = \"value\" }` sent with every request"},
    {"auth", SL_KEY_AUTH, SL_CONF_FIELD(sl_target_http_conf, auth), 0, 0, "none",
     "`{ bearer = env \"TOKEN\" }`, `{ basic = { user = …, password = … } }` or "
     "`{ api_key = { header = \"X-Api-Key\", value = … } }` or `{ oauth = { token_url = …, "
     "client_id = …, client_secret = …, method = \"POST\", params = \"scope=x\" } }` (OAuth 2.0 "
     "client credentials: a token fetched with basic auth, renewed before it expires)"},
    {"tls_verify", SL_KEY_BOOL, SL_CONF_FIELD(sl_target_http_conf, tls_verify), 0, 0, "true",
     "verify the server's certificate and name"},
    {"ca_file", SL_KEY_STRING, SL_CONF_FIELD(sl_target_http_conf, ca_file), 0, 0, "system",
     "CA bundle for the server's certificate"},
    {"connect_timeout", SL_KEY_DURATION, SL_CONF_FIELD(sl_target_http_conf, connect_timeout_ms), 1,
     600000, "\"5s\"", "time to connect"},
    {"timeout", SL_KEY_DURATION, SL_CONF_FIELD(sl_target_http_conf, timeout_ms), 1, 3600000,
     "\"30s\"", "time for a whole request"},
    {"concurrency", SL_KEY_INT, SL_CONF_FIELD(sl_target_http_conf, concurrency), 1, 1024, "8",
     "requests in flight for this rule"},
    {"rate", SL_KEY_INT, SL_CONF_FIELD(sl_target_http_conf, rate), 0, 1000000, "unlimited",
     "requests per second at most (EventBridge API destinations' invocation rate)"},
    {"body", SL_KEY_BODY, SL_CONF_FIELD(sl_target_http_conf, body), 0, 0, "\"structured\"",
     "\"structured\": the CloudEvent as JSON; \"binary\": data as the body and ce-* headers; "
     "\"data\": the payload alone (what `input` made)"},
    {"batch", SL_KEY_INT, SL_CONF_FIELD(sl_target_http_conf, batch), 1, 10000, "1",
     "payloads per request, sent as a JSON array when more than 1"},
};

static const sl_target_http_conf http_defaults = {
    .tls_verify = true,
    .connect_timeout_ms = 5000,
    .timeout_ms = 30000,
    .concurrency = 8,
    .body = SL_HTTP_BODY_STRUCTURED,
    .batch = 1,
};

static void http_check_conf(const sl_target_config *tc, const sl_conf_check *chk)
{
    const sl_target_http_conf *c = tc->conf;
    if (!c->url)
        chk->problem(chk->ctx, NULL, "target.http needs a url");
    else if (strncmp(c->url, "http://", 7) && strncmp(c->url, "https://", 8))
        chk->problem(chk->ctx, NULL, "target.http url must start with http:// or https://");
}

const sl_target_ops sl_target_http_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "http",
    .open = http_open,
    .deliver = http_deliver,
    .close = http_close,
    .cancel = http_cancel,
    .health = http_health,
    .conf_keys = http_keys,
    .nconf_keys = sizeof http_keys / sizeof *http_keys,
    .conf_size = sizeof(sl_target_http_conf),
    .conf_defaults = &http_defaults,
    .doc = "send events to an HTTP endpoint (2xx delivered; 408, 429, 5xx and network errors "
           "retried, honouring Retry-After; other 4xx refused)",
    .check_conf = http_check_conf,
};
