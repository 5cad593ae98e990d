/*
 * tests/unit/test_source_webhook.c — source.webhook without a server
 * (connectors/source_webhook.h): the config check; for every preset the
 * mapping of a verified request to one CloudEvent (type, id, source, data,
 * lane) that core/bus/event.h accepts; every refusal (401 counted per reason,
 * nothing to store; 400 for what a preset cannot map); Slack's challenge;
 * the two-step dedupe (claim, then stored or forgotten) and the
 * claim/settle calls of connectors/webhook_verify.h underneath; metrics.
 */
#include "testutil.h"

#include "connectors/source_webhook.h"
#include "core/bus/event.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NOW 1764400000000LL /* ms */
#define NOW_S "1764400000"

/* ---- requests ----------------------------------------------------------------- */

typedef struct hdrs {
    const char *name[16];
    char value[16][256];
    int n;
} hdrs;

static const char *get_hdr(void *ctx, const char *name)
{
    hdrs *h = ctx;
    for (int i = 0; i < h->n; i++)
        if (strcasecmp(h->name[i], name) == 0)
            return h->value[i];
    return NULL;
}

static void set_hdr(hdrs *h, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_hdr(hdrs *h, const char *name, const char *fmt, ...)
{
    int i = 0;
    while (i < h->n && strcasecmp(h->name[i], name) != 0)
        i++;
    assert_true(i < 16);
    if (i == h->n)
        h->n++;
    h->name[i] = name;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->value[i], sizeof h->value[i], fmt, ap);
    va_end(ap);
}

static void del_hdr(hdrs *h, const char *name)
{
    for (int i = 0; i < h->n; i++)
        if (strcasecmp(h->name[i], name) == 0) {
            h->name[i] = h->name[h->n - 1];
            memcpy(h->value[i], h->value[h->n - 1], sizeof h->value[i]);
            h->n--;
            return;
        }
}

/* Lower-case hex HMAC of pre + body under key. */
static void hmac_hex(const EVP_MD *md, const char *key, const char *pre, const char *body,
                     size_t blen, char *out)
{
    size_t pn = strlen(pre);
    unsigned char *buf = malloc(pn + blen + 1);
    assert_non_null(buf);
    memcpy(buf, pre, pn);
    memcpy(buf + pn, body, blen);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    assert_non_null(HMAC(md, key, (int)strlen(key), buf, pn + blen, mac, &mlen));
    for (unsigned i = 0; i < mlen; i++)
        sprintf(out + 2 * i, "%02x", mac[i]);
    free(buf);
}

static void github_sign(hdrs *h, const char *key, const char *body)
{
    char sig[129];
    hmac_hex(EVP_sha256(), key, "", body, strlen(body), sig);
    set_hdr(h, "X-Hub-Signature-256", "sha256=%s", sig);
}

static void github_req(hdrs *h, const char *key, const char *body, const char *event,
                       const char *delivery)
{
    memset(h, 0, sizeof *h);
    github_sign(h, key, body);
    set_hdr(h, "X-GitHub-Event", "%s", event);
    set_hdr(h, "X-GitHub-Delivery", "%s", delivery);
    set_hdr(h, "Content-Type", "application/json");
}

static void stripe_req(hdrs *h, const char *key, const char *ts, const char *body)
{
    char pre[64], sig[129];
    snprintf(pre, sizeof pre, "%s.", ts);
    hmac_hex(EVP_sha256(), key, pre, body, strlen(body), sig);
    memset(h, 0, sizeof *h);
    set_hdr(h, "Stripe-Signature", "t=%s,v1=%s", ts, sig);
}

static void slack_req(hdrs *h, const char *key, const char *ts, const char *body)
{
    char pre[64], sig[129];
    snprintf(pre, sizeof pre, "v0:%s:", ts);
    hmac_hex(EVP_sha256(), key, pre, body, strlen(body), sig);
    memset(h, 0, sizeof *h);
    set_hdr(h, "X-Slack-Signature", "v0=%s", sig);
    set_hdr(h, "X-Slack-Request-Timestamp", "%s", ts);
}

/* ---- webhooks ----------------------------------------------------------------- */

/* The webhook's own keys of a config made by config() (each gets its own,
 * from a pool that lives as long as the test). */
#define W(c) ((sl_source_webhook_conf *)(c).conf)

static sl_source_config config(const char *name, const char *preset, const char *secret)
{
    static sl_source_webhook_conf pool[256];
    static size_t used;
    assert_true(used < sizeof pool / sizeof *pool);
    sl_source_webhook_conf *w = &pool[used++];
    memset(w, 0, sizeof *w);
    sl_source_config c;
    memset(&c, 0, sizeof c);
    c.ops = &sl_source_webhook_ops;
    c.kind_name = "webhook";
    c.conf = w;
    c.name = (char *)name;
    c.set = (char *)"hooks";
    w->preset = (char *)preset;
    w->secret = (char *)secret;
    return c;
}

static sl_webhook_source *make(const sl_source_config *c)
{
    sl_webhook_source *w = NULL;
    sl_error err = {0};
    int rc = sl_webhook_source_new(c, &w, &err);
    if (rc)
        fail_msg("sl_webhook_source_new: %d %s", rc, err.msg);
    return w;
}

/* Runs one request; the caller frees res. */
static void handle(sl_webhook_source *w, hdrs *h, const char *body, int64_t now,
                   sl_webhook_result *res)
{
    sl_webhook_result_init(res);
    sl_webhook_source_handle(w, get_hdr, h, body, body ? strlen(body) : 0, now, res);
}

/* Asserts a STORE whose event passes core/bus/event.h and returns it parsed
 * (caller json_decref()s). Settles the result as stored when stored. */
static json_t *expect_store(sl_webhook_source *w, sl_webhook_result *res, bool stored)
{
    if (res->action != SL_WEBHOOK_STORE)
        fail_msg("expected STORE, got %u %.*s", res->status, (int)res->body.len,
                 (const char *)res->body.data);
    assert_string_equal(res->set, "hooks");
    static sl_event ev;
    sl_error err = {0};
    sl_event_status st =
        sl_event_parse((const char *)res->event.data, res->event.len, NULL, &ev, &err);
    if (st != SL_EVENT_OK)
        fail_msg("event refused: %s: %.*s", err.msg, (int)res->event.len, res->event.data);
    json_error_t je;
    json_t *j = json_loadb((const char *)res->event.data, res->event.len, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "specversion")), "1.0");
    assert_non_null(json_string_value(json_object_get(j, "time")));
    sl_webhook_source_stored(w, res, stored);
    sl_webhook_result_free(res);
    return j;
}

/* Asserts an ANSWER with status and (for errors) code, nothing to store. */
static void expect_answer(sl_webhook_result *res, unsigned status, const char *code)
{
    if (res->action != SL_WEBHOOK_ANSWER || res->status != status)
        fail_msg("expected ANSWER %u, got action %d status %u: %.*s", status, res->action,
                 res->status, (int)res->body.len, res->body.data ? (char *)res->body.data : "");
    assert_int_equal(res->event.len, 0);
    if (code) {
        assert_string_equal(res->code, code);
        json_t *j = json_loadb((const char *)res->body.data, res->body.len, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "error")), code);
        assert_non_null(json_string_value(json_object_get(j, "message")));
        json_decref(j);
    }
}

static void expect_refused(sl_webhook_source *w, hdrs *h, const char *body, int64_t now,
                           const char *says)
{
    sl_webhook_result res;
    handle(w, h, body, now, &res);
    expect_answer(&res, 401, "InvalidSignature");
    if (says && !strstr((const char *)res.body.data, says))
        fail_msg("401 body %s does not say %s", (const char *)res.body.data, says);
    sl_webhook_result_free(&res);
}

static const char *str(json_t *j, const char *key)
{
    const char *s = json_string_value(json_object_get(j, key));
    if (!s)
        fail_msg("event has no string %s", key);
    return s;
}

/* The sample of metric line prefix in w's metrics, or -1. */
static long metric(sl_webhook_source *w, const char *outcome)
{
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_webhook_source_metrics(w, &b), 0);
    sl_buf_append(&b, "", 1);
    char want[200];
    snprintf(want, sizeof want, "sluice_webhook_requests_total{webhook=\"%s\",outcome=\"%s}",
             sl_webhook_source_name(w), outcome);
    const char *p = strstr((const char *)b.data, want);
    long v = p ? strtol(p + strlen(want), NULL, 10) : -1;
    sl_buf_free(&b);
    return v;
}

/* ---- config ------------------------------------------------------------------- */

static void test_check(void **state)
{
    (void)state;
    sl_error err = {0};
    sl_source_config c = config("gh", "github", "s3cret");
    assert_int_equal(sl_webhook_source_check(&c, &err), 0);

#define REFUSE(mod, says)                                                                          \
    do {                                                                                           \
        sl_source_config b = config("gh", "github", "s3cret");                                     \
        mod;                                                                                       \
        memset(&err, 0, sizeof err);                                                               \
        assert_int_equal(sl_webhook_source_check(&b, &err), SL_EINVAL);                            \
        if (!strstr(err.msg, says))                                                                \
            fail_msg("\"%s\" does not say \"%s\"", err.msg, says);                                 \
        assert_null(strstr(err.msg, "s3cret"));                                                    \
        sl_webhook_source *w = (sl_webhook_source *)1;                                             \
        assert_int_equal(sl_webhook_source_new(&b, &w, NULL), SL_EINVAL);                          \
        assert_ptr_equal(w, (sl_webhook_source *)1);                                               \
    } while (0)
    REFUSE(W(b)->preset = NULL, "preset is required");
    REFUSE(W(b)->preset = (char *)"gitlab", "gitlab");
    REFUSE(W(b)->secret = NULL, "no secret");
    REFUSE(W(b)->secret = (char *)"s3cret,,other", "secret 2");
    REFUSE(b.name = (char *)"a/b", "name");
    REFUSE(b.name = NULL, "name");
    REFUSE(b.set = NULL, "set is required");
    REFUSE(b.lane = (char *)"Bad Lane", "lane");
    REFUSE(W(b)->header = (char *)"X-Sig", "header applies to preset \"generic\" only");
    REFUSE(W(b)->id_header = (char *)"X-Id", "id_header");
    REFUSE(W(b)->timestamp_header = (char *)"X-Ts", "timestamp_header");
    REFUSE(W(b)->algorithm = (char *)"sha1", "algorithm");
    REFUSE(W(b)->base64 = true, "encoding");
    REFUSE(W(b)->dedupe_ms = -1, "dedupe");
    REFUSE(W(b)->tolerance_ms = -1, "tolerance");
    REFUSE((W(b)->preset = (char *)"generic", W(b)->header = NULL), "header");
    REFUSE((W(b)->preset = (char *)"generic", W(b)->header = (char *)"X-Sig",
            W(b)->algorithm = (char *)"md5"),
           "md5");
    REFUSE((W(b)->preset = (char *)"generic", W(b)->header = (char *)"X-Sig",
            W(b)->id_header = (char *)""),
           "id_header");
#undef REFUSE
    /* Defaults the config fills in for every preset are fine. */
    W(c)->algorithm = (char *)"sha256";
    c.type = (char *)"sluice.webhook";
    c.source = (char *)"/v1/webhooks/gh";
    W(c)->tolerance_ms = 300000;
    W(c)->dedupe_ms = 86400000;
    assert_int_equal(sl_webhook_source_check(&c, &err), 0);
    sl_webhook_source_free(NULL);
}

/* ---- github ------------------------------------------------------------------- */

static const char *k_gh_body = "{\"action\":\"opened\",\"number\":1,\"pull_request\":{\"id\":7}}";

static void test_github(void **state)
{
    (void)state;
    sl_source_config c = config("gh", "github", "s3cret");
    sl_webhook_source *w = make(&c);
    hdrs h;
    sl_webhook_result res;

    github_req(&h, "s3cret", k_gh_body, "pull_request", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    handle(w, &h, k_gh_body, NOW, &res);
    json_t *j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "com.github.pull_request");
    assert_string_equal(str(j, "id"), "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    assert_string_equal(str(j, "source"), "/v1/webhooks/gh");
    assert_string_equal(str(j, "webhook"), "gh");
    assert_string_equal(str(j, "datacontenttype"), "application/json");
    assert_null(json_object_get(j, "lane"));
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_integer_value(json_object_get(data, "number")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(data, "pull_request"), "id")), 7);
    json_decref(j);

    /* The same delivery again: a duplicate, nothing to store. */
    handle(w, &h, k_gh_body, NOW + 1000, &res);
    expect_answer(&res, 200, NULL);
    assert_non_null(strstr((const char *)res.body.data, "\"duplicate\":true"));
    sl_webhook_result_free(&res);

    /* Every kind of bad signature: 401, counted by reason. */
    github_req(&h, "wrong", k_gh_body, "push", "d2");
    expect_refused(w, &h, k_gh_body, NOW, "no signature matches");
    github_req(&h, "s3cret", k_gh_body, "push", "d3");
    expect_refused(w, &h, "{\"action\":\"opened\",\"number\":2}", NOW, "no signature matches");
    del_hdr(&h, "X-Hub-Signature-256");
    expect_refused(w, &h, k_gh_body, NOW, "missing header X-Hub-Signature-256");
    set_hdr(&h, "X-Hub-Signature-256", "sha1=abcdef");
    expect_refused(w, &h, k_gh_body, NOW, "does not start with");
    set_hdr(&h, "X-Hub-Signature-256", "sha256=xyz");
    expect_refused(w, &h, k_gh_body, NOW, "X-Hub-Signature-256");
    /* Missing the signature and the delivery: still 401, not 400. */
    memset(&h, 0, sizeof h);
    set_hdr(&h, "X-GitHub-Event", "push");
    expect_refused(w, &h, k_gh_body, NOW, "missing header");
    assert_int_equal(metric(w, "invalid_signature\",reason=\"no_match\""), 2);
    assert_int_equal(metric(w, "invalid_signature\",reason=\"missing_header\""), 2);
    assert_int_equal(metric(w, "invalid_signature\",reason=\"malformed_header\""), 2);

    /* Signed but without GitHub's event header: 400. */
    github_req(&h, "s3cret", k_gh_body, "push", "d4");
    del_hdr(&h, "X-GitHub-Event");
    handle(w, &h, k_gh_body, NOW, &res);
    expect_answer(&res, 400, "InvalidRequest");
    sl_webhook_result_free(&res);
    set_hdr(&h, "X-GitHub-Event", "bad event");
    handle(w, &h, k_gh_body, NOW, &res);
    expect_answer(&res, 400, "InvalidRequest");
    sl_webhook_result_free(&res);

    /* A form-encoded GitHub delivery is kept as text. */
    const char *form = "payload=%7B%22zen%22%3A%22hi%22%7D";
    github_req(&h, "s3cret", form, "ping", "d5");
    set_hdr(&h, "Content-Type", "application/x-www-form-urlencoded");
    handle(w, &h, form, NOW, &res);
    j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "com.github.ping");
    assert_string_equal(str(j, "datacontenttype"), "application/x-www-form-urlencoded");
    assert_string_equal(str(j, "data"), form);
    json_decref(j);

    assert_int_equal(metric(w, "accepted\""), 2);
    assert_int_equal(metric(w, "duplicate\""), 1);
    assert_int_equal(metric(w, "bad_request\""), 2);
    sl_webhook_source_free(w);
}

static void test_github_rotation_lane_source(void **state)
{
    (void)state;
    sl_source_config c = config("gh2", "github", "newsecret, oldsecret");
    c.lane = (char *)"boe-a";
    c.source = (char *)"https://github.com/acme/shop";
    sl_webhook_source *w = make(&c);
    hdrs h;
    sl_webhook_result res;
    const char *keys[] = {"newsecret", "oldsecret"};
    for (int i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof id, "r%d", i);
        github_req(&h, keys[i], k_gh_body, "push", id);
        handle(w, &h, k_gh_body, NOW, &res);
        json_t *j = expect_store(w, &res, true);
        assert_string_equal(str(j, "lane"), "boe-a");
        assert_string_equal(str(j, "source"), "https://github.com/acme/shop");
        json_decref(j);
    }
    github_req(&h, "retired", k_gh_body, "push", "r3");
    expect_refused(w, &h, k_gh_body, NOW, "2 secrets");
    sl_webhook_source_free(w);
}

/* ---- stripe ------------------------------------------------------------------- */

static const char *k_stripe_body =
    "{\"id\":\"evt_1NG8Du2eZvKYlo2CUI79vXWy\",\"object\":\"event\",\"type\":"
    "\"payment_intent.succeeded\",\"data\":{\"object\":{\"id\":\"pi_1\",\"amount\":2000}}}";

static void test_stripe(void **state)
{
    (void)state;
    sl_source_config c = config("st", "stripe", "whsec_test");
    sl_webhook_source *w = make(&c);
    hdrs h;
    sl_webhook_result res;

    stripe_req(&h, "whsec_test", NOW_S, k_stripe_body);
    handle(w, &h, k_stripe_body, NOW + 2000, &res);
    json_t *j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "com.stripe.payment_intent.succeeded");
    assert_string_equal(str(j, "id"), "evt_1NG8Du2eZvKYlo2CUI79vXWy");
    assert_string_equal(str(j, "source"), "/v1/webhooks/st");
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(json_object_get(json_object_get(j, "data"), "data"), "object"),
            "amount")),
        2000);
    json_decref(j);

    /* Replayed (even re-signed with a fresh timestamp): deduplicated by evt id. */
    stripe_req(&h, "whsec_test", "1764400060", k_stripe_body);
    handle(w, &h, k_stripe_body, NOW + 60000, &res);
    expect_answer(&res, 200, NULL);
    sl_webhook_result_free(&res);

    /* Several v1 signatures (a rolled secret): any one may match. */
    const char *b2 = "{\"id\":\"evt_2\",\"type\":\"charge.refunded\"}";
    char sig[129];
    hmac_hex(EVP_sha256(), "whsec_test", NOW_S ".", b2, strlen(b2), sig);
    memset(&h, 0, sizeof h);
    set_hdr(&h, "Stripe-Signature", "t=%s,v1=%064d,v1=%s,v0=abc", NOW_S, 0, sig);
    handle(w, &h, b2, NOW, &res);
    j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "com.stripe.charge.refunded");
    json_decref(j);

    /* Refusals. */
    stripe_req(&h, "whsec_other", NOW_S, k_stripe_body);
    expect_refused(w, &h, k_stripe_body, NOW, "no signature matches");
    stripe_req(&h, "whsec_test", NOW_S, k_stripe_body);
    expect_refused(w, &h, "{\"id\":\"evt_1\",\"type\":\"x\"}", NOW, "no signature matches");
    expect_refused(w, &h, k_stripe_body, NOW + 301000, "outside the");
    expect_refused(w, &h, k_stripe_body, NOW - 301000, "future");
    set_hdr(&h, "Stripe-Signature", "v1=%064d", 0);
    expect_refused(w, &h, k_stripe_body, NOW, "no t=");
    set_hdr(&h, "Stripe-Signature", "garbage");
    expect_refused(w, &h, k_stripe_body, NOW, "key=value");
    del_hdr(&h, "Stripe-Signature");
    expect_refused(w, &h, k_stripe_body, NOW, "missing header Stripe-Signature");
    assert_int_equal(metric(w, "invalid_signature\",reason=\"stale_timestamp\""), 2);

    /* Signed, but not what Stripe sends: 400. */
    const char *bodies[] = {"not json",
                            "[1,2]",
                            "{\"type\":\"charge.refunded\"}",
                            "{\"id\":\"evt_3\"}",
                            "{\"id\":\"evt_3\",\"type\":\"has space\"}",
                            "{\"id\":7,\"type\":\"a.b\"}"};
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        stripe_req(&h, "whsec_test", NOW_S, bodies[i]);
        handle(w, &h, bodies[i], NOW, &res);
        expect_answer(&res, 400, i < 2 ? "InvalidJson" : "InvalidRequest");
        sl_webhook_result_free(&res);
    }
    assert_int_equal(metric(w, "accepted\""), 2);
    sl_webhook_source_free(w);
}

/* ---- slack -------------------------------------------------------------------- */

static void test_slack(void **state)
{
    (void)state;
    sl_source_config c = config("sl", "slack", "8f742231b10e8888abcd99yyyzzz85a5");
    sl_webhook_source *w = make(&c);
    const char *key = W(c)->secret;
    hdrs h;
    sl_webhook_result res;

    const char *ev = "{\"token\":\"x\",\"team_id\":\"T1\",\"type\":\"event_callback\","
                     "\"event\":{\"type\":\"app_mention\",\"text\":\"hi\"},"
                     "\"event_id\":\"Ev08MFMKH6\",\"event_time\":1234567890}";
    slack_req(&h, key, NOW_S, ev);
    handle(w, &h, ev, NOW, &res);
    json_t *j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "com.slack.app_mention");
    assert_string_equal(str(j, "id"), "Ev08MFMKH6");
    assert_string_equal(str(json_object_get(json_object_get(j, "data"), "event"), "text"), "hi");
    json_decref(j);
    /* Slack retries (X-Slack-Retry-Num) carry the same event_id. */
    slack_req(&h, key, "1764400010", ev);
    set_hdr(&h, "X-Slack-Retry-Num", "1");
    handle(w, &h, ev, NOW + 10000, &res);
    expect_answer(&res, 200, NULL);
    sl_webhook_result_free(&res);

    /* Another top-level type, without an event_id: a UUIDv7 id, no dedupe. */
    const char *rl = "{\"type\":\"app_rate_limited\",\"team_id\":\"T1\"}";
    char first[64] = "";
    for (int i = 0; i < 2; i++) {
        slack_req(&h, key, NOW_S, rl);
        handle(w, &h, rl, NOW, &res);
        j = expect_store(w, &res, true);
        assert_string_equal(str(j, "type"), "com.slack.app_rate_limited");
        assert_int_equal(strlen(str(j, "id")), 36);
        assert_string_not_equal(str(j, "id"), first);
        snprintf(first, sizeof first, "%s", str(j, "id"));
        json_decref(j);
    }

    /* The URL handshake: the challenge, after the signature, nothing stored. */
    const char *hs = "{\"token\":\"x\",\"challenge\":\"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFX"
                     "O7tYXAYM8P\",\"type\":\"url_verification\"}";
    slack_req(&h, key, NOW_S, hs);
    handle(w, &h, hs, NOW, &res);
    expect_answer(&res, 200, NULL);
    assert_string_equal(res.content_type, "text/plain; charset=utf-8");
    const char *chal = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
    assert_int_equal(res.body.len, strlen(chal));
    assert_memory_equal(res.body.data, chal, strlen(chal));
    sl_webhook_result_free(&res);
    slack_req(&h, "wrong", NOW_S, hs);
    expect_refused(w, &h, hs, NOW, "no signature matches");
    const char *hs_bad = "{\"type\":\"url_verification\",\"challenge\":5}";
    slack_req(&h, key, NOW_S, hs_bad);
    handle(w, &h, hs_bad, NOW, &res);
    expect_answer(&res, 400, "InvalidRequest");
    sl_webhook_result_free(&res);

    /* Slash commands and interactions are forms. */
    const char *cmd = "token=x&team_id=T1&command=%2Fweather&text=94070";
    slack_req(&h, key, NOW_S, cmd);
    set_hdr(&h, "Content-Type", "application/x-www-form-urlencoded");
    handle(w, &h, cmd, NOW, &res);
    j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "com.slack.command");
    assert_string_equal(str(j, "data"), cmd);
    assert_string_equal(str(j, "datacontenttype"), "application/x-www-form-urlencoded");
    json_decref(j);
    const char *act = "payload=%7B%22type%22%3A%22block_actions%22%7D";
    slack_req(&h, key, NOW_S, act);
    handle(w, &h, act, NOW, &res);
    j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "com.slack.interaction");
    json_decref(j);
    const char *junk = "hello";
    slack_req(&h, key, NOW_S, junk);
    handle(w, &h, junk, NOW, &res);
    expect_answer(&res, 400, "InvalidJson");
    sl_webhook_result_free(&res);
    const char *nocb = "{\"type\":\"event_callback\",\"event_id\":\"Ev1\"}";
    slack_req(&h, key, NOW_S, nocb);
    handle(w, &h, nocb, NOW, &res);
    expect_answer(&res, 400, "InvalidRequest");
    sl_webhook_result_free(&res);

    /* Refusals: stale (5-minute window), missing, malformed. */
    slack_req(&h, key, "1764399600", ev); /* 400 s old */
    expect_refused(w, &h, ev, NOW, "outside the 300.000 s tolerance");
    slack_req(&h, key, NOW_S, ev);
    del_hdr(&h, "X-Slack-Request-Timestamp");
    expect_refused(w, &h, ev, NOW, "missing header X-Slack-Request-Timestamp");
    slack_req(&h, key, NOW_S, ev);
    set_hdr(&h, "X-Slack-Signature", "v1=%064d", 0);
    expect_refused(w, &h, ev, NOW, "does not start with \\\"v0=\\\"");
    slack_req(&h, key, NOW_S, ev);
    set_hdr(&h, "X-Slack-Request-Timestamp", "soon");
    expect_refused(w, &h, ev, NOW, "X-Slack-Request-Timestamp");

    assert_int_equal(metric(w, "challenge\""), 1);
    assert_int_equal(metric(w, "accepted\""), 5);
    sl_webhook_source_free(w);
}

/* ---- generic ------------------------------------------------------------------ */

static void test_generic(void **state)
{
    (void)state;
    sl_source_config c = config("gen", "generic", "k1");
    W(c)->header = (char *)"X-Signature";
    W(c)->algorithm = (char *)"sha512";
    W(c)->base64 = true;
    W(c)->timestamp_header = (char *)"X-Timestamp";
    W(c)->tolerance_ms = 60000;
    W(c)->id_header = (char *)"X-Delivery";
    c.type = (char *)"acme.order";
    sl_webhook_source *w = make(&c);
    hdrs h;
    sl_webhook_result res;

    const char *body = "{\"order\":42}";
    unsigned char mac[64];
    unsigned int ml = 0;
    char signed_[256], b64[100];
    snprintf(signed_, sizeof signed_, "%s.%s", NOW_S, body);
    HMAC(EVP_sha512(), "k1", 2, (const unsigned char *)signed_, strlen(signed_), mac, &ml);
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)ml);
    memset(&h, 0, sizeof h);
    set_hdr(&h, "X-Signature", "%s", b64);
    set_hdr(&h, "X-Timestamp", NOW_S);
    set_hdr(&h, "X-Delivery", "del-1");
    handle(w, &h, body, NOW, &res);
    json_t *j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "acme.order");
    assert_string_equal(str(j, "id"), "del-1");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "order")), 42);
    json_decref(j);
    handle(w, &h, body, NOW, &res);
    expect_answer(&res, 200, NULL);
    sl_webhook_result_free(&res);

    /* Without the id header: a fresh UUIDv7 each time, no dedupe. */
    del_hdr(&h, "X-Delivery");
    for (int i = 0; i < 2; i++) {
        handle(w, &h, body, NOW, &res);
        j = expect_store(w, &res, true);
        assert_int_equal(strlen(str(j, "id")), 36);
        json_decref(j);
    }
    set_hdr(&h, "X-Delivery", "has space");
    handle(w, &h, body, NOW, &res);
    expect_answer(&res, 400, "InvalidRequest");
    sl_webhook_result_free(&res);

    /* Refusals. */
    set_hdr(&h, "X-Delivery", "del-2");
    expect_refused(w, &h, "{\"order\":43}", NOW, "no signature matches");
    expect_refused(w, &h, body, NOW + 61000, "outside the 60.000 s tolerance");
    set_hdr(&h, "X-Signature", "%s", "!!!notbase64");
    expect_refused(w, &h, body, NOW, "X-Signature");
    del_hdr(&h, "X-Signature");
    expect_refused(w, &h, body, NOW, "missing header X-Signature");
    sl_webhook_source_free(w);

    /* hex with a prefix, no timestamp, default type, text and binary bodies. */
    sl_source_config c2 = config("gen2", "generic", "k2");
    W(c2)->header = (char *)"X-Sig";
    W(c2)->prefix = (char *)"sha256=";
    w = make(&c2);
    char sig[129];
    const char *text = "plain text \xc3\xa9";
    hmac_hex(EVP_sha256(), "k2", "", text, strlen(text), sig);
    memset(&h, 0, sizeof h);
    set_hdr(&h, "X-Sig", "sha256=%s", sig);
    handle(w, &h, text, NOW, &res);
    j = expect_store(w, &res, true);
    assert_string_equal(str(j, "type"), "sluice.webhook");
    assert_string_equal(str(j, "data"), text);
    assert_string_equal(str(j, "datacontenttype"), "text/plain; charset=utf-8");
    json_decref(j);
    const char bin[] = {'\x00', '\xff', '\x10', 'a', 'b'};
    hmac_hex(EVP_sha256(), "k2", "", bin, sizeof bin, sig);
    set_hdr(&h, "X-Sig", "sha256=%s", sig);
    set_hdr(&h, "Content-Type", "application/octet-stream");
    sl_webhook_result_init(&res);
    sl_webhook_source_handle(w, get_hdr, &h, bin, sizeof bin, NOW, &res);
    j = expect_store(w, &res, true);
    assert_string_equal(str(j, "data_base64"), "AP8QYWI=");
    assert_string_equal(str(j, "datacontenttype"), "application/octet-stream");
    json_decref(j);
    /* An empty body: no data. */
    hmac_hex(EVP_sha256(), "k2", "", "", 0, sig);
    set_hdr(&h, "X-Sig", "sha256=%s", sig);
    handle(w, &h, NULL, NOW, &res);
    j = expect_store(w, &res, true);
    assert_null(json_object_get(j, "data"));
    assert_null(json_object_get(j, "datacontenttype"));
    json_decref(j);
    set_hdr(&h, "X-Sig", "%s", sig);
    expect_refused(w, &h, "", NOW, "does not start with");
    sl_webhook_source_free(w);
}

/* ---- dedupe ------------------------------------------------------------------- */

static void test_dedupe_store_outcome(void **state)
{
    (void)state;
    sl_source_config c = config("gh", "github", "s3cret");
    W(c)->dedupe_ms = 10000;
    sl_webhook_source *w = make(&c);
    hdrs h;
    sl_webhook_result a, b;
    github_req(&h, "s3cret", k_gh_body, "push", "dup-1");

    /* While the first is being stored, the same delivery gets 409. */
    handle(w, &h, k_gh_body, NOW, &a);
    assert_int_equal(a.action, SL_WEBHOOK_STORE);
    assert_string_equal(a.id, "dup-1");
    handle(w, &h, k_gh_body, NOW + 1, &b);
    expect_answer(&b, 409, "DeliveryInProgress");
    sl_webhook_result_free(&b);
    /* The store failed: the id is forgotten, the retry is stored. */
    sl_webhook_source_stored(w, &a, false);
    sl_webhook_result_free(&a);
    assert_int_equal(metric(w, "failed\""), 1);
    handle(w, &h, k_gh_body, NOW + 2, &a);
    json_decref(expect_store(w, &a, true));
    /* Stored: a replay within the window is a duplicate ... */
    handle(w, &h, k_gh_body, NOW + 9000, &b);
    expect_answer(&b, 200, NULL);
    sl_webhook_result_free(&b);
    /* ... and after it, new again. */
    handle(w, &h, k_gh_body, NOW + 10003, &a);
    json_decref(expect_store(w, &a, true));
    sl_webhook_source_free(w);

    /* A claim nobody settles is taken over after SL_WEBHOOK_CLAIM_MS. */
    W(c)->dedupe_ms = 600000;
    w = make(&c);
    handle(w, &h, k_gh_body, NOW, &a);
    sl_webhook_result_free(&a); /* never settled */
    handle(w, &h, k_gh_body, NOW + SL_WEBHOOK_CLAIM_MS - 1, &b);
    expect_answer(&b, 409, "DeliveryInProgress");
    sl_webhook_result_free(&b);
    handle(w, &h, k_gh_body, NOW + SL_WEBHOOK_CLAIM_MS, &a);
    json_decref(expect_store(w, &a, true));
    handle(w, &h, k_gh_body, NOW + SL_WEBHOOK_CLAIM_MS + 1, &b);
    expect_answer(&b, 200, NULL);
    sl_webhook_result_free(&b);
    assert_int_equal(metric(w, "in_progress\""), 1);
    sl_webhook_source_free(w);
}

static void test_dedupe_claim_settle(void **state)
{
    (void)state;
    sl_webhook_dedupe *d = sl_webhook_dedupe_new(4, 1000);
    assert_non_null(d);
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 0), SL_WEBHOOK_CLAIM_NEW);
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 1), SL_WEBHOOK_CLAIM_PENDING);
    assert_true(sl_webhook_dedupe_check(d, "a", 1, 2)); /* pending counts as seen */
    assert_int_equal(sl_webhook_dedupe_count(d), 1);
    sl_webhook_dedupe_settle(d, "a", 1, 3, false);
    assert_int_equal(sl_webhook_dedupe_count(d), 0);
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 4), SL_WEBHOOK_CLAIM_NEW);
    assert_int_equal(sl_webhook_dedupe_count(d), 1);
    sl_webhook_dedupe_settle(d, "a", 1, 5, true);
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 6), SL_WEBHOOK_CLAIM_SEEN);
    /* A failed settle never undoes a store. */
    sl_webhook_dedupe_settle(d, "a", 1, 7, false);
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 8), SL_WEBHOOK_CLAIM_SEEN);
    /* Remembered from the claim (t = 4) for the window. */
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 1003), SL_WEBHOOK_CLAIM_SEEN);
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 1004), SL_WEBHOOK_CLAIM_NEW);
    sl_webhook_dedupe_settle(d, "a", 1, 1005, true);
    /* A settle after the cache dropped the claim inserts the id. */
    for (int i = 0; i < 4; i++)
        sl_webhook_dedupe_claim(d, (char[]){(char)('p' + i)}, 1, 1006);
    assert_int_equal(sl_webhook_dedupe_count(d), 4);
    sl_webhook_dedupe_settle(d, "a", 1, 1007, true);
    assert_int_equal(sl_webhook_dedupe_claim(d, "a", 1, 1008), SL_WEBHOOK_CLAIM_SEEN);
    /* Forgotten entries leave the count and are reused from the ring. */
    for (int i = 0; i < 3; i++)
        sl_webhook_dedupe_settle(d, (char[]){(char)('q' + i)}, 1, 1009, false);
    assert_int_equal(sl_webhook_dedupe_count(d), 1);
    assert_false(sl_webhook_dedupe_check(d, "r", 1, 1010)); /* revived as seen */
    assert_int_equal(sl_webhook_dedupe_count(d), 2);
    sl_webhook_dedupe_settle(d, "zz", 2, 1011, false); /* unknown: nothing */
    assert_int_equal(sl_webhook_dedupe_count(d), 2);
    sl_webhook_dedupe_free(d);
}

static void test_metrics(void **state)
{
    (void)state;
    sl_source_config c = config("m", "github", "s");
    sl_webhook_source *w = make(&c);
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_webhook_source_metrics_header(&b), 0);
    assert_int_equal(sl_webhook_source_metrics(w, &b), 0);
    sl_buf_append(&b, "", 1);
    const char *t = (const char *)b.data;
    assert_non_null(strstr(t, "# TYPE sluice_webhook_requests_total counter\n"));
    const char *want[] = {"accepted",    "duplicate", "in_progress", "challenge",
                          "bad_request", "failed",    "error"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char line[160];
        snprintf(line, sizeof line,
                 "sluice_webhook_requests_total{webhook=\"m\",outcome=\"%s\"} 0\n", want[i]);
        assert_non_null(strstr(t, line));
    }
    const char *reasons[] = {"missing_header", "malformed_header", "stale_timestamp", "no_match"};
    for (size_t i = 0; i < 4; i++) {
        char line[200];
        snprintf(line, sizeof line,
                 "sluice_webhook_requests_total{webhook=\"m\",outcome=\"invalid_signature\","
                 "reason=\"%s\"} 0\n",
                 reasons[i]);
        assert_non_null(strstr(t, line));
    }
    assert_string_equal(sl_webhook_refusal_name(SL_WEBHOOK_REFUSED_NO_MATCH), "no_match");
    assert_string_equal(sl_webhook_refusal_name((sl_webhook_refusal)99), "?");
    sl_buf_free(&b);
    sl_webhook_source_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_github),
        cmocka_unit_test(test_github_rotation_lane_source),
        cmocka_unit_test(test_stripe),
        cmocka_unit_test(test_slack),
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_dedupe_store_outcome),
        cmocka_unit_test(test_dedupe_claim_settle),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
