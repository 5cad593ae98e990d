/*
 * tests/fuzz/fuzz_webhook.c — webhook signature headers
 * (connectors/webhook_verify.h). Input: "Name: value" header lines, a blank
 * line, then the body. The request is verified under six configs (github,
 * stripe, slack, generic hex with a prefix and a timestamp header, generic
 * base64 sha1, generic sha512 with two secrets) at a fixed time,
 * 1700000000 s. A header value may hold "@SIG@": the harness replaces it
 * with the right signature for that config (hex or base64 HMAC of what the
 * scheme signs, under the first secret), so the paths after a match are
 * reached too. Then the GitHub metadata, Slack's challenge and the replay
 * dedupe run on the same request.
 */
#include "connectors/webhook_verify.h"
#include "tests/fuzz/fuzzutil.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NOW_MS 1700000000000

typedef struct req {
    char *name[32], *value[32];
    size_t n;
    const sl_webhook_config *cfg; /* for @SIG@ */
    const char *body;
    size_t body_len;
    char sig[256];
    char expanded[32][1024];
} req;

static void hmac_hex_or_b64(const sl_webhook_config *c, const char *msg, size_t len, char *out,
                            size_t cap)
{
    const EVP_MD *md = EVP_sha256();
    if (c->algorithm && strcasecmp(c->algorithm, "sha1") == 0)
        md = EVP_sha1();
    else if (c->algorithm && strcasecmp(c->algorithm, "sha512") == 0)
        md = EVP_sha512();
    size_t klen = strcspn(c->secret, ",");
    unsigned char mac[64];
    unsigned int ml = 0;
    HMAC(md, c->secret, (int)klen, (const unsigned char *)msg, len, mac, &ml);
    if (c->base64) {
        EVP_EncodeBlock((unsigned char *)out, mac, (int)ml);
        return;
    }
    for (unsigned i = 0; i < ml && 2 * i + 2 < cap; i++)
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

static const char *raw_header(const req *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcasecmp(r->name[i], name) == 0)
            return r->value[i];
    return NULL;
}

/* The content the config's scheme signs, for @SIG@. */
static void compute_sig(req *r)
{
    const sl_webhook_config *c = r->cfg;
    const char *ts = NULL, *pre = "", *mid = ".";
    char tbuf[64] = "";
    if (c->kind == SL_WEBHOOK_STRIPE) {
        const char *h = raw_header(r, "Stripe-Signature");
        const char *t = h ? strstr(h, "t=") : NULL;
        if (t) {
            snprintf(tbuf, sizeof tbuf, "%.*s", (int)strcspn(t + 2, ","), t + 2);
            ts = tbuf;
        }
    } else if (c->kind == SL_WEBHOOK_SLACK) {
        ts = raw_header(r, "X-Slack-Request-Timestamp");
        pre = "v0:", mid = ":";
    } else if (c->kind == SL_WEBHOOK_GENERIC && c->timestamp_header) {
        ts = raw_header(r, c->timestamp_header);
    }
    sl_buf m = SL_BUF_INIT;
    if (ts) {
        sl_buf_append(&m, pre, strlen(pre));
        sl_buf_append(&m, ts, strlen(ts));
        sl_buf_append(&m, mid, strlen(mid));
    }
    sl_buf_append(&m, r->body, r->body_len);
    hmac_hex_or_b64(c, m.data ? (const char *)m.data : "", m.len, r->sig, sizeof r->sig);
    sl_buf_free(&m);
}

static const char *get_header(void *ctx, const char *name)
{
    req *r = ctx;
    for (size_t i = 0; i < r->n; i++) {
        if (strcasecmp(r->name[i], name) != 0)
            continue;
        const char *at = strstr(r->value[i], "@SIG@");
        if (!at || !r->cfg)
            return r->value[i];
        compute_sig(r);
        snprintf(r->expanded[i], sizeof r->expanded[i], "%.*s%s%s", (int)(at - r->value[i]),
                 r->value[i], r->sig, at + 5);
        return r->expanded[i];
    }
    return NULL;
}

static const sl_webhook_config configs[] = {
    {.kind = SL_WEBHOOK_GITHUB, .secret = "It's a Secret to Everybody"},
    {.kind = SL_WEBHOOK_STRIPE, .secret = "whsec_test, whsec_old"},
    {.kind = SL_WEBHOOK_SLACK, .secret = "8f742231b10e8888abcd99yyyzzz85a5"},
    {.kind = SL_WEBHOOK_GENERIC,
     .secret = "s3cret",
     .header = "X-Signature",
     .prefix = "sha256=",
     .timestamp_header = "X-Timestamp",
     .tolerance_ms = 60000},
    {.kind = SL_WEBHOOK_GENERIC,
     .secret = "b64",
     .header = "X-Sig-B64",
     .algorithm = "sha1",
     .base64 = true},
    {.kind = SL_WEBHOOK_GENERIC, .secret = "one,two", .header = "X-Sig-512", .algorithm = "SHA512"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static req r;
    memset(&r, 0, offsetof(req, expanded));
    const char *p = (const char *)data, *end = p + size, *line;
    size_t ll;
    while (fz_line(&p, end, &line, &ll)) {
        if (ll && line[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            break;
        const char *colon = memchr(line, ':', ll);
        if (!colon || r.n == 32)
            continue;
        size_t nl = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vl = ll - nl - 1;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        r.name[r.n] = fz_dup(line, nl, true);
        r.value[r.n] = fz_dup(v, vl, true);
        r.n++;
    }
    r.body_len = (size_t)(end - p);
    char *body = fz_dup(p, r.body_len, false);
    r.body = body;
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        sl_error err = {0};
        sl_webhook_refusal why = SL_WEBHOOK_REFUSAL_COUNT;
        r.cfg = &configs[i];
        int rc = sl_webhook_verify_why(&configs[i], get_header, &r, r.body_len ? body : NULL,
                                       r.body_len, NOW_MS, &why, &err);
        FZ_CHECK(rc == 0 || rc == SL_EINVAL, "verify: %d", rc);
        FZ_CHECK((rc == 0) == (why == SL_WEBHOOK_REFUSED_NONE), "rc %d but why %s", rc,
                 sl_webhook_refusal_name(why));
        FZ_CHECK(rc == 0 || why != SL_WEBHOOK_REFUSED_ERROR, "a valid config refused as error");
        if (rc)
            FZ_CHECK(err.msg[0] && !strstr(err.msg, configs[i].secret),
                     "message empty or quoting the secret: %s", err.msg);
    }
    r.cfg = NULL;
    char type[96], chal[256];
    const char *id = NULL;
    sl_error err = {0};
    if (sl_webhook_github_meta(get_header, &r, type, sizeof type, &id, &err) == 0) {
        FZ_CHECK(strncmp(type, "com.github.", 11) == 0, "type %s", type);
        static sl_webhook_dedupe *d;
        if (!d)
            d = sl_webhook_dedupe_new(4, 60000);
        size_t idl = strlen(id);
        sl_webhook_claim c = sl_webhook_dedupe_claim(d, id, idl, NOW_MS);
        if (c == SL_WEBHOOK_CLAIM_NEW)
            sl_webhook_dedupe_settle(d, id, idl, NOW_MS, r.body_len & 1);
        sl_webhook_dedupe_check(d, id, idl, NOW_MS + 1);
        FZ_CHECK(sl_webhook_dedupe_count(d) <= 4, "dedupe over its capacity");
    }
    size_t cl = 0;
    int rc = sl_webhook_slack_challenge(body, r.body_len, chal, sizeof chal, &cl, &err);
    FZ_CHECK(rc == 0 || rc == SL_ENOENT || rc == SL_EINVAL || rc == SL_ETOOBIG, "challenge %d", rc);
    if (rc == 0)
        FZ_CHECK(cl < sizeof chal && chal[cl] == '\0', "challenge length");
    for (size_t i = 0; i < r.n; i++) {
        free(r.name[i]);
        free(r.value[i]);
    }
    free(body);
    return 0;
}
