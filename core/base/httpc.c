/*
 * core/base/httpc.c — the libcurl layer shared by the CLI's server commands
 * and the Databus agent (see core/base/httpc.h).
 */
#include "core/base/httpc.h"
#include "core/base/clock.h"
#include "core/base/net.h"

#include <curl/curl.h>

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

/* --api-key and --cacert of this run (sl_httpc_take_flags()); NULL:
 * $SLUICE_API_KEY and $SLUICE_CA_FILE. */
static const char *flag_api_key, *flag_ca_file;

int sl_httpc_take_flags(int *argc, char **argv)
{
    int w = 1;
    for (int i = 1; i < *argc; i++) {
        const char *v = NULL;
        bool missing = false;
        if (strcmp(argv[i], "--") == 0) { /* the rest are operands */
            while (i < *argc)
                argv[w++] = argv[i++];
            break;
        }
        if (sl_httpc_opt(*argc, argv, &i, "--api-key", &v, &missing)) {
            if (missing || !*v) {
                fprintf(stderr, "sluice %s: --api-key needs a token\n", argv[0]);
                return 2;
            }
            flag_api_key = v;
        } else if (sl_httpc_opt(*argc, argv, &i, "--cacert", &v, &missing)) {
            if (missing || !*v) {
                fprintf(stderr, "sluice %s: --cacert needs a PEM file\n", argv[0]);
                return 2;
            }
            flag_ca_file = v;
        } else {
            argv[w++] = argv[i];
        }
    }
    argv[w] = NULL;
    *argc = w;
    return 0;
}

/* The API key to send: --api-key, else $SLUICE_API_KEY; NULL for none. */
static const char *api_key(void)
{
    const char *k = flag_api_key ? flag_api_key : getenv("SLUICE_API_KEY");
    return k && *k ? k : NULL;
}

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int sl_httpc_server(const char *opt, char *out, size_t cap, sl_error *err)
{
    const char *s = opt;
    if (!s || !*s)
        s = getenv("SLUICE_SERVER");
    if (!s || !*s)
        s = SL_HTTPC_DEFAULT_SERVER;
    const char *scheme = strstr(s, "://") ? "" : "http://";
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        n--;
    if (n == 0)
        return sl_error_set(err, SL_EINVAL, "empty server URL");
    if (strlen(scheme) + n + 1 > cap)
        return sl_error_set(err, SL_EINVAL, "server URL is too long");
    snprintf(out, cap, "%s%.*s", scheme, (int)n, s);
    if (strncasecmp(out, "http://", 7) != 0 && strncasecmp(out, "https://", 8) != 0)
        return sl_error_set(err, SL_EINVAL, "server URL \"%s\" is not http:// or https://", out);
    for (const char *p = out; *p; p++) {
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return sl_error_set(err, SL_EINVAL,
                                "server URL \"%s\" contains a space or a "
                                "control character",
                                out);
    }
    return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    sl_httpc *h = ctx;
    size_t len = size * n;
    if (len > SL_HTTPC_MAX_RESPONSE - h->body.len) {
        h->too_big = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    return sl_buf_append(&h->body, p, len) ? 0 : len;
}

/* Reads a Retry-After value: delay-seconds or an HTTP-date (RFC 9110 §10.2.3). */
static int64_t parse_retry_after(const char *v, size_t len)
{
    char tmp[64];
    while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
        len--;
    if (len == 0 || len >= sizeof tmp)
        return -1;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    if (isdigit((unsigned char)tmp[0])) {
        char *end;
        errno = 0;
        long long secs = strtoll(tmp, &end, 10);
        if (errno || *end || secs < 0)
            return -1;
        return secs > 86400 ? 86400000 : secs * 1000;
    }
    time_t t = curl_getdate(tmp, NULL);
    if (t == (time_t)-1)
        return -1;
    int64_t ms = ((int64_t)t * 1000) - sl_clock_now_ms();
    return ms < 0 ? 0 : ms > 86400000 ? 86400000 : ms;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    sl_httpc *h = ctx;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        h->retry_after_ms = -1; /* a new response (after a 100 Continue, say) */
    } else if (len > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0) {
        const char *v = p + sizeof name - 1;
        size_t vlen = len - (sizeof name - 1);
        while (vlen && (*v == ' ' || *v == '\t')) {
            v++;
            vlen--;
        }
        h->retry_after_ms = parse_retry_after(v, vlen);
    }
    return len;
}

int sl_httpc_init(sl_httpc *h, sl_error *err)
{
    memset(h, 0, sizeof *h);
    h->retry_after_ms = -1;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return sl_error_set(err, SL_ENOMEM, "curl_global_init: %s", curl_easy_strerror(global_rc));
    CURL *c = curl_easy_init();
    if (!c)
        return sl_error_set(err, SL_ENOMEM, "curl_easy_init failed");
    h->curl = c;
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->curl_err);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "sluice-cli");
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    /* https:// servers with a private CA: --cacert, else $SLUICE_CA_FILE;
     * else the system's CAs. Verification is never turned off. */
    const char *ca = flag_ca_file ? flag_ca_file : getenv("SLUICE_CA_FILE");
    if (ca && *ca)
        curl_easy_setopt(c, CURLOPT_CAINFO, ca);
    return 0;
}

void sl_httpc_close(sl_httpc *h)
{
    if (h->curl)
        curl_easy_cleanup(h->curl);
    curl_slist_free_all(h->headers);
    sl_buf_free(&h->body);
    h->curl = NULL;
    h->headers = NULL;
}

/* Appends one header line to *list; returns false when out of memory. */
static bool add_header(struct curl_slist **list, const char *name, const char *value)
{
    char line[1024]; /* callers bound the values (lanes, types, API keys) */
    snprintf(line, sizeof line, "%s: %s", name, value);
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return false;
    *list = l;
    return true;
}

/* An API key sent over plain HTTP to another machine can be read on the
 * way: said once per process on stderr (the request still goes: a trusted
 * network or a tunnel may make it fine). */
static void warn_cleartext(const char *url)
{
    static bool warned;
    if (warned || strncasecmp(url, "http://", 7) != 0)
        return;
    const char *p = url + 7, *end = p + strcspn(p, "/?#");
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (at)
        p = at + 1;
    char host[256];
    size_t n = (size_t)(end - p);
    if (n >= sizeof host)
        n = sizeof host - 1;
    memcpy(host, p, n);
    host[n] = '\0';
    char *colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (colon)
        colon[host[0] == '[' ? 1 : 0] = '\0';
    if (sl_net_host_loopback(host))
        return;
    warned = true;
    fprintf(stderr,
            "sluice: warning: sending an API key over plain http:// to %s: anyone on the "
            "path can read it; use https:// (docs/security.md)\n",
            host);
}

int sl_httpc_prepare(sl_httpc *h, const char *method, const char *url,
                        const char *content_type, const char *lane, const void *body, size_t len,
                        long timeout_ms)
{
    CURL *c = h->curl;
    h->body.len = 0;
    h->status = 0;
    h->retry_after_ms = -1;
    h->too_big = false;
    h->curl_err[0] = '\0';
    curl_slist_free_all(h->headers);
    h->headers = NULL;
    bool ok = add_header(&h->headers, "Accept", "application/json") &&
              add_header(&h->headers, "Expect", ""); /* no 100-continue round trip */
    if (ok && content_type)
        ok = add_header(&h->headers, "Content-Type", content_type);
    if (ok && lane && *lane)
        ok = add_header(&h->headers, "X-Sluice-Lane", lane);
    const char *key = api_key();
    if (key)
        warn_cleartext(url);
    if (ok && key && strlen(key) < 900) { /* longer cannot be a key: the server says 401 */
        char v[920];
        snprintf(v, sizeof v, "Bearer %s", key);
        ok = add_header(&h->headers, "Authorization", v);
        explicit_bzero(v, sizeof v);
    }
    if (!ok)
        return SL_ENOMEM;
    if (curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK)
        return SL_ENOMEM;
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    /* DELETE (a lane drop) is a GET with another method name and no body. */
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, strcmp(method, "DELETE") == 0 ? "DELETE" : NULL);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    return 0;
}

sl_httpc_fail sl_httpc_finish(sl_httpc *h, int result, const char *server, char *msg,
                                    size_t cap)
{
    CURLcode rc = (CURLcode)result;
    const char *why = h->curl_err[0] ? h->curl_err : curl_easy_strerror(rc);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &h->status);
        return SL_HTTPC_OK;
    }
    h->status = 0;
    if (h->too_big) {
        snprintf(msg, cap, "answer from %s larger than %u MiB", server,
                 SL_HTTPC_MAX_RESPONSE >> 20);
        return SL_HTTPC_LOCAL;
    }
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        snprintf(msg, cap, "cannot reach server %s: %s", server, why);
        return SL_HTTPC_UNREACHABLE;
    case CURLE_OPERATION_TIMEDOUT: {
        /* A timeout before the connection was made means nothing was sent. */
        curl_off_t connect_us = 0;
        curl_easy_getinfo(h->curl, CURLINFO_CONNECT_TIME_T, &connect_us);
        if (connect_us == 0) {
            snprintf(msg, cap, "cannot reach server %s: %s", server, why);
            return SL_HTTPC_UNREACHABLE;
        }
        snprintf(msg, cap, "server %s did not answer in time: %s", server, why);
        return SL_HTTPC_BROKEN;
    }
    case CURLE_OUT_OF_MEMORY:
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_WRITE_ERROR:
        snprintf(msg, cap, "request to %s: %s", server, why);
        return SL_HTTPC_LOCAL;
    default:
        snprintf(msg, cap, "connection to server %s failed: %s", server, why);
        return SL_HTTPC_BROKEN;
    }
}

sl_httpc_fail sl_httpc_request(sl_httpc *h, const char *server, const char *method,
                                     const char *url, const char *content_type, const char *lane,
                                     const void *body, size_t len, long timeout_ms, char *msg,
                                     size_t cap)
{
    if (sl_httpc_prepare(h, method, url, content_type, lane, body, len, timeout_ms)) {
        snprintf(msg, cap, "out of memory");
        return SL_HTTPC_LOCAL;
    }
    return sl_httpc_finish(h, curl_easy_perform(h->curl), server, msg, cap);
}

void sl_httpc_describe(long status, const sl_buf *body, char *out, size_t cap)
{
    const char *p = (const char *)body->data;
    sl_json_tok doc, code, text;
    if (body->len && sl_json_validate(p, body->len, 64, &doc, NULL) == 0 &&
        sl_json_get(&doc, "error", &code) && code.type == SL_JSON_STRING) {
        char c[64], m[384] = "";
        sl_httpc_json_str(&code, c, sizeof c);
        if (sl_json_get(&doc, "message", &text))
            sl_httpc_json_str(&text, m, sizeof m);
        snprintf(out, cap, "%ld %s%s%s", status, c, m[0] ? ": " : "", m);
        return;
    }
    char snippet[201];
    size_t n = 0;
    for (size_t i = 0; i < body->len && n < sizeof snippet - 1; i++) {
        unsigned char ch = body->data[i];
        if (ch == '\n' || ch == '\r')
            break;
        snippet[n++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    snippet[n] = '\0';
    snprintf(out, cap, "HTTP %ld%s%s", status, n ? ": " : "", snippet);
}

int64_t sl_httpc_backoff_ms(int attempt, int64_t retry_after_ms)
{
    static uint64_t state;
    if (state == 0)
        state = (uint64_t)sl_clock_mono_ns() | 1;
    state ^= state << 13; /* xorshift64: jitter only, no need for quality */
    state ^= state >> 7;
    state ^= state << 17;
    int64_t ms = 250;
    for (int i = 0; i < attempt && ms < 8000; i++)
        ms *= 2;
    if (ms > 8000)
        ms = 8000;
    ms = ms * 8 / 10 + (int64_t)(state % (uint64_t)(ms * 4 / 10 + 1));
    return retry_after_ms > ms ? retry_after_ms : ms;
}

void sl_httpc_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

void sl_httpc_json_str(const sl_json_tok *tok, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    if (tok->type != SL_JSON_STRING || cap == 0)
        return;
    size_t pos = 0;
    char chunk[64];
    size_t got;
    while ((got = sl_json_unescape_part(tok, &pos, chunk, sizeof chunk)) > 0) {
        for (size_t i = 0; i < got && n + 1 < cap; i++) {
            unsigned char ch = (unsigned char)chunk[i];
            /* Keep messages on one terminal line: no control characters. */
            out[n++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
        }
        if (n + 1 >= cap) {
            /* Truncated: drop a multi-byte character cut in half. */
            size_t k = n;
            while (k > 0 && ((unsigned char)out[k - 1] & 0xc0) == 0x80)
                k--;
            if (k > 0 && ((unsigned char)out[k - 1] & 0x80)) {
                unsigned char lead = (unsigned char)out[k - 1];
                size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
                if (n - (k - 1) < want)
                    n = k - 1;
            }
            break;
        }
    }
    out[n] = '\0';
}

bool sl_httpc_opt(int argc, char **argv, int *i, const char *name, const char **out,
                     bool *missing)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return false;
    if (a[n] == '=') {
        *out = a + n + 1;
        return true;
    }
    if (a[n] != '\0')
        return false;
    if (*i + 1 >= argc) {
        *missing = true;
        return true;
    }
    *out = argv[++*i];
    return true;
}
