/*
 * connectors/oauth.c — OAuth 2.0 client credentials tokens (see oauth.h).
 */
#include "connectors/oauth.h"
#include "core/base/buf.h"
#include "core/base/clock.h"
#include "core/base/err.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX 8192
#define ANSWER_MAX (64 * 1024)

struct sl_oauth {
    char *url, *id, *secret, *method, *params;
    int64_t timeout_ms;
    pthread_mutex_t lock;
    char token[TOKEN_MAX];
    int64_t expires_ms; /* wall clock; 0: no token */
};

int sl_oauth_new(const sl_conf_auth *a, int64_t timeout_ms, sl_oauth **out)
{
    sl_oauth *o = calloc(1, sizeof *o);
    if (!o)
        return SL_ENOMEM;
    o->url = strdup(a->oauth_url ? a->oauth_url : "");
    o->id = strdup(a->oauth_id ? a->oauth_id : "");
    o->secret = strdup(a->oauth_secret ? a->oauth_secret : "");
    o->method = strdup(a->oauth_method ? a->oauth_method : "POST");
    o->params = strdup(a->oauth_params ? a->oauth_params : "");
    o->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
    pthread_mutex_init(&o->lock, NULL);
    if (!o->url || !o->id || !o->secret || !o->method || !o->params) {
        sl_oauth_free(o);
        return SL_ENOMEM;
    }
    *out = o;
    return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    sl_buf *b = ctx;
    size_t len = size * n;
    if (b->len + len > ANSWER_MAX || sl_buf_append(b, p, len))
        return 0; /* an answer that large is no token answer: the fetch fails */
    return len;
}

/* Fetches a token (under o->lock). */
static int fetch(sl_oauth *o, char *why, size_t whylen)
{
    CURL *e = curl_easy_init();
    if (!e) {
        snprintf(why, whylen, "OAuth: out of memory");
        return SL_EIO;
    }
    sl_buf body = SL_BUF_INIT, form = SL_BUF_INIT;
    char err[CURL_ERROR_SIZE] = "";
    int rc = sl_buf_printf(&form, "grant_type=client_credentials%s%s", o->params[0] ? "&" : "",
                           o->params);
    bool get = strcmp(o->method, "GET") == 0;
    sl_buf url = SL_BUF_INIT;
    rc = rc ? rc : sl_buf_printf(&url, "%s%s%.*s", o->url, get ? (strchr(o->url, '?') ? "&" : "?") : "",
                                 get ? (int)form.len : 0, form.data ? (char *)form.data : "");
    rc = rc ? rc : sl_buf_append(&url, "", 1);
    rc = rc ? rc : sl_buf_append(&form, "", 1);
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if (!get)
        h = h ? curl_slist_append(h, "Content-Type: application/x-www-form-urlencoded") : NULL;
    if (rc || !h) {
        snprintf(why, whylen, "OAuth: out of memory");
        rc = SL_EIO;
        goto out;
    }
    curl_easy_setopt(e, CURLOPT_URL, (char *)url.data);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, o->method);
    if (!get)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, (char *)form.data);
    curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(e, CURLOPT_USERNAME, o->id);
    curl_easy_setopt(e, CURLOPT_PASSWORD, o->secret);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode res = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    if (res != CURLE_OK) {
        snprintf(why, whylen, "OAuth token endpoint %s: %s", o->url,
                 err[0] ? err : curl_easy_strerror(res));
        rc = SL_EIO;
        goto out;
    }
    json_t *j = json_loadb(body.data ? (const char *)body.data : "", body.len, 0, NULL);
    const char *tok = json_string_value(json_object_get(j, "access_token"));
    json_int_t exp = json_integer_value(json_object_get(j, "expires_in"));
    if (code < 200 || code >= 300 || !tok || !*tok || strlen(tok) >= TOKEN_MAX ||
        strpbrk(tok, "\r\n")) {
        snprintf(why, whylen, "OAuth token endpoint %s answered HTTP %ld without a usable "
                              "access_token: %.200s",
                 o->url, code, body.data ? (const char *)body.data : "");
        json_decref(j);
        rc = SL_EIO;
        goto out;
    }
    snprintf(o->token, sizeof o->token, "%s", tok);
    /* Renewed a minute early (half the life for very short ones). */
    int64_t life = (exp > 0 ? (int64_t)exp : 3600) * 1000;
    o->expires_ms = sl_clock_now_ms() + (life > 120000 ? life - 60000 : life / 2);
    json_decref(j);
out:
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    sl_buf_free(&body);
    sl_buf_free(&form);
    sl_buf_free(&url);
    return rc;
}

int sl_oauth_header(sl_oauth *o, char *line, size_t cap, char *why, size_t whylen)
{
    pthread_mutex_lock(&o->lock);
    int rc = 0;
    if (!o->expires_ms || sl_clock_now_ms() >= o->expires_ms)
        rc = fetch(o, why, whylen);
    if (!rc)
        snprintf(line, cap, "Authorization: Bearer %s", o->token);
    pthread_mutex_unlock(&o->lock);
    return rc;
}

void sl_oauth_drop(sl_oauth *o)
{
    pthread_mutex_lock(&o->lock);
    o->expires_ms = 0;
    pthread_mutex_unlock(&o->lock);
}

void sl_oauth_free(sl_oauth *o)
{
    if (!o)
        return;
    free(o->url);
    free(o->id);
    free(o->secret);
    free(o->method);
    free(o->params);
    pthread_mutex_destroy(&o->lock);
    free(o);
}
