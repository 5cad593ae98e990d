/*
 * tests/integration/test_source_webhook.c — source.webhook with the real
 * `bin/sluice serve` (POST /v1/webhooks/{name}, connectors/source_webhook.h):
 * for each preset (github, stripe, slack, generic) a validly signed request
 * is answered 200 and stored as exactly one event with the right type, id
 * and data; a wrong secret, a tampered body, a stale timestamp, a missing or
 * malformed header are answered 401 and store nothing; a replayed delivery
 * is answered as a duplicate and stored once, also when the copies race;
 * secret rotation; Slack's URL handshake; unknown webhooks (404); the answer
 * of a durable set comes after its fsync and survives SIGKILL; counters on
 * /metrics. Signatures are computed here with libcrypto. Harness: itest.h.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_S 30.0

static const char k_config[] =
    "lanes.auto = true\n"
    "set \"gh\" { partitions = 1 }\n"
    "set \"st\" { partitions = 1 }\n"
    "set \"sl\" { partitions = 1 }\n"
    "set \"gen\" { partitions = 1 }\n"
    "set \"fast\" { partitions = 2, ack = \"buffer\" }\n"
    "source.webhook { name = \"gh\", preset = \"github\", secret = \"new-secret, old-secret\",\n"
    "                 set = \"gh\" }\n"
    "source.webhook { name = \"stripe\", preset = \"stripe\", secret = \"whsec_abc\", set = \"st\" "
    "}\n"
    "source.webhook { name = \"slack\", preset = \"slack\", secret = \"slk\", set = \"sl\",\n"
    "                 lane = \"boe-a\" }\n"
    "source.webhook { name = \"gen\", preset = \"generic\", secret = \"g1\", header = \"X-Sig\",\n"
    "                 algorithm = \"sha1\", encoding = \"base64\", timestamp_header = \"X-Ts\",\n"
    "                 id_header = \"X-Id\", type = \"acme.thing\", source = \"urn:acme\",\n"
    "                 tolerance = \"1m\", set = \"gen\" }\n"
    "source.webhook { name = \"fast\", preset = \"github\", secret = \"f\", set = \"fast\" }\n";

static void start(it_server *s)
{
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "%s", k_config);
    static char keep[PATH_MAX]; /* it_start_config() borrows the path */
    snprintf(keep, sizeof keep, "%s", cfg);
    it_start_config(s, keep, WAIT_S);
}

/* ---- requests ------------------------------------------------------------------------- */

/* A request's extra headers, "Name: value" each. */
typedef struct hdrs {
    char line[8][400];
    const char *v[9];
    int n;
} hdrs;

static void hdr(hdrs *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void hdr(hdrs *h, const char *fmt, ...)
{
    assert_true(h->n < 8);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->line[h->n], sizeof h->line[h->n], fmt, ap);
    va_end(ap);
    h->v[h->n] = h->line[h->n];
    h->n++;
    h->v[h->n] = NULL;
}

static void hmac_raw(const EVP_MD *md, const char *key, const char *pre, const char *body,
                     size_t len, unsigned char *mac, unsigned *mlen)
{
    size_t pn = strlen(pre);
    unsigned char *buf = malloc(pn + len + 1);
    assert_non_null(buf);
    memcpy(buf, pre, pn);
    memcpy(buf + pn, body, len);
    assert_non_null(HMAC(md, key, (int)strlen(key), buf, pn + len, mac, mlen));
    free(buf);
}

static void hmac_hex(const EVP_MD *md, const char *key, const char *pre, const char *body,
                     char *out)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned mlen = 0;
    hmac_raw(md, key, pre, body, strlen(body), mac, &mlen);
    for (unsigned i = 0; i < mlen; i++)
        sprintf(out + 2 * i, "%02x", mac[i]);
}

static void github(hdrs *h, const char *key, const char *body, const char *event,
                   const char *delivery)
{
    char sig[65];
    hmac_hex(EVP_sha256(), key, "", body, sig);
    memset(h, 0, sizeof *h);
    hdr(h, "X-Hub-Signature-256: sha256=%s", sig);
    hdr(h, "X-GitHub-Event: %s", event);
    hdr(h, "X-GitHub-Delivery: %s", delivery);
}

static void stripe(hdrs *h, const char *key, long ts, const char *body)
{
    char pre[32], sig[65];
    snprintf(pre, sizeof pre, "%ld.", ts);
    hmac_hex(EVP_sha256(), key, pre, body, sig);
    memset(h, 0, sizeof *h);
    hdr(h, "Stripe-Signature: t=%ld,v1=%s", ts, sig);
}

static void slack(hdrs *h, const char *key, long ts, const char *body)
{
    char pre[32], sig[65];
    snprintf(pre, sizeof pre, "v0:%ld:", ts);
    hmac_hex(EVP_sha256(), key, pre, body, sig);
    memset(h, 0, sizeof *h);
    hdr(h, "X-Slack-Signature: v0=%s", sig);
    hdr(h, "X-Slack-Request-Timestamp: %ld", ts);
}

static void generic(hdrs *h, const char *key, long ts, const char *body, const char *id)
{
    char pre[32], b64[64];
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned mlen = 0;
    snprintf(pre, sizeof pre, "%ld.", ts);
    hmac_raw(EVP_sha1(), key, pre, body, strlen(body), mac, &mlen);
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)mlen);
    memset(h, 0, sizeof *h);
    hdr(h, "X-Sig: %s", b64);
    hdr(h, "X-Ts: %ld", ts);
    if (id)
        hdr(h, "X-Id: %s", id);
}

/* POST /v1/webhooks/NAME with h's headers; never asserts (threads use it). */
static int post_raw(int port, const char *name, const hdrs *h, const char *ctype, const char *body,
                    size_t len, it_resp *r)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/webhooks/%s", name);
    it_call k = {.method = "POST",
                 .path = path,
                 .ctype = ctype,
                 .hdrs = h ? h->v : NULL,
                 .body = body,
                 .len = len};
    return it_http(NULL, port, &k, r);
}

static it_resp post(it_server *s, const char *name, const hdrs *h, const char *body)
{
    it_resp r;
    if (post_raw(s->port, name, h, "application/json", body, strlen(body), &r))
        fail_msg("POST /v1/webhooks/%s: %s", name, r.err);
    return r;
}

/* Asserts 200 {"id":id,"set":set,"partition":…,"offset":…}; returns the offset. */
static int64_t expect_stored(it_resp *r, const char *set, const char *id)
{
    if (r->status != 200)
        fail_msg("want 200, got %ld: %s", r->status, it_body(r));
    json_t *j = it_parse_json(r);
    assert_string_equal(json_string_value(json_object_get(j, "set")), set);
    if (id)
        assert_string_equal(json_string_value(json_object_get(j, "id")), id);
    assert_true(json_is_integer(json_object_get(j, "partition")));
    int64_t off = json_integer_value(json_object_get(j, "offset"));
    json_decref(j);
    it_resp_free(r);
    return off;
}

static void expect_401(it_server *s, const char *name, const hdrs *h, const char *body,
                       const char *says)
{
    it_resp r = post(s, name, h, body);
    it_expect_error(&r, 401, "InvalidSignature");
    if (says && !strstr(it_body(&r), says))
        fail_msg("401 does not say \"%s\": %s", says, it_body(&r));
    it_resp_free(&r);
}

static void expect_duplicate(it_server *s, const char *name, const hdrs *h, const char *body)
{
    it_resp r = post(s, name, h, body);
    if (r.status != 200 || !strstr(it_body(&r), "\"duplicate\":true"))
        fail_msg("want a duplicate, got %ld: %s", r.status, it_body(&r));
    it_resp_free(&r);
}

/* Every event of set (partition 0, every lane), parsed; asserts there are n. */
static json_t *events(it_server *s, const char *set, size_t n)
{
    it_evs e = it_read_all(s, set, 0, "*");
    if (e.n != n)
        fail_msg("set %s holds %zu events, want %zu", set, e.n, n);
    json_t *arr = json_array();
    for (size_t i = 0; i < e.n; i++) {
        json_t *j = json_loads(e.v[i].text, 0, NULL);
        assert_non_null(j);
        json_array_append_new(arr, j);
    }
    it_evs_free(&e);
    return arr;
}

static const char *attr(json_t *ev, const char *name)
{
    const char *v = json_string_value(json_object_get(ev, name));
    if (!v)
        fail_msg("event has no %s", name);
    return v;
}

static double metric(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    double v = it_metric(it_body(&r), name);
    it_resp_free(&r);
    return v;
}

/* ---- github ------------------------------------------------------------------------------ */

static const char k_gh[] = "{\"ref\":\"refs/heads/main\",\"commits\":[{\"id\":\"abc\"}],"
                           "\"repository\":{\"full_name\":\"acme/shop\"}}";

static void test_github(void **state)
{
    it_server *s = *state;
    start(s);
    hdrs h;
    github(&h, "new-secret", k_gh, "push", "7a1c7a00-cc78-11e3-81ab-4c9367dc0958");
    it_resp r = post(s, "gh", &h, k_gh);
    assert_int_equal(expect_stored(&r, "gh", "7a1c7a00-cc78-11e3-81ab-4c9367dc0958"), 0);
    json_t *evs = events(s, "gh", 1);
    json_t *ev = json_array_get(evs, 0);
    assert_string_equal(attr(ev, "type"), "com.github.push");
    assert_string_equal(attr(ev, "id"), "7a1c7a00-cc78-11e3-81ab-4c9367dc0958");
    assert_string_equal(attr(ev, "source"), "/v1/webhooks/gh");
    assert_string_equal(attr(ev, "datacontenttype"), "application/json");
    assert_string_equal(attr(ev, "webhook"), "gh");
    json_t *data = json_object_get(ev, "data");
    assert_string_equal(json_string_value(json_object_get(data, "ref")), "refs/heads/main");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(data, "repository"), "full_name")),
        "acme/shop");
    json_decref(evs);

    /* Replays of the delivery: duplicates, stored once. */
    expect_duplicate(s, "gh", &h, k_gh);
    expect_duplicate(s, "gh", &h, k_gh);

    /* Every kind of invalid signature: 401, nothing stored. */
    github(&h, "wrong-secret", k_gh, "push", "d-wrong");
    expect_401(s, "gh", &h, k_gh, "no signature matches");
    github(&h, "new-secret", k_gh, "push", "d-tampered");
    expect_401(s, "gh", &h, "{\"ref\":\"refs/heads/evil\"}", "no signature matches");
    memset(&h, 0, sizeof h);
    hdr(&h, "X-GitHub-Event: push");
    hdr(&h, "X-GitHub-Delivery: d-missing");
    expect_401(s, "gh", &h, k_gh, "missing header X-Hub-Signature-256");
    hdr(&h, "X-Hub-Signature-256: sha256=zz");
    expect_401(s, "gh", &h, k_gh, "X-Hub-Signature-256");
    memset(&h, 0, sizeof h);
    hdr(&h, "X-Hub-Signature-256: md5=0123");
    expect_401(s, "gh", &h, k_gh, "does not start with");
    json_decref(events(s, "gh", 1));

    /* Rotation: the old secret still works; a verified request GitHub would
     * not send (no event header) is 400. */
    github(&h, "old-secret", k_gh, "create", "d-old");
    r = post(s, "gh", &h, k_gh);
    expect_stored(&r, "gh", "d-old");
    github(&h, "new-secret", k_gh, "push", "d-noevent");
    memmove(&h.line[1], &h.line[2], sizeof h.line[0]);
    h.v[1] = h.line[1];
    h.v[2] = NULL;
    h.n = 2;
    r = post(s, "gh", &h, k_gh);
    it_expect_error(&r, 400, "InvalidRequest");
    it_resp_free(&r);
    evs = events(s, "gh", 2);
    assert_string_equal(attr(json_array_get(evs, 1), "type"), "com.github.create");
    json_decref(evs);

    /* Unknown webhooks and other methods. */
    github(&h, "new-secret", k_gh, "push", "d-x");
    r = post(s, "nope", &h, k_gh);
    it_expect_error(&r, 404, "NoSuchWebhook");
    it_resp_free(&r);
    r = it_get(s, "/v1/webhooks/gh");
    it_expect_error(&r, 405, NULL);
    it_resp_free(&r);

    assert_true(metric(s, "sluice_webhook_requests_total{webhook=\"gh\",outcome=\"accepted\"}") ==
                2);
    assert_true(metric(s, "sluice_webhook_requests_total{webhook=\"gh\",outcome=\"duplicate\"}") ==
                2);
    assert_true(metric(s, "sluice_webhook_requests_total{webhook=\"gh\",outcome="
                          "\"invalid_signature\",reason=\"no_match\"}") == 2);
    assert_true(metric(s, "sluice_webhook_requests_total{webhook=\"gh\",outcome="
                          "\"invalid_signature\",reason=\"missing_header\"}") == 1);
    assert_true(metric(s, "sluice_webhook_requests_total{webhook=\"gh\",outcome="
                          "\"invalid_signature\",reason=\"malformed_header\"}") == 2);
    assert_true(
        metric(s, "sluice_webhook_requests_total{webhook=\"gh\",outcome=\"bad_request\"}") == 1);
    /* GET /v1/sources and the shared source series count what was stored. */
    assert_true(metric(s, "sluice_source_events_total{source=\"gh\",kind=\"webhook\"}") == 2);
    assert_true(metric(s, "sluice_source_bytes_total{source=\"gh\",kind=\"webhook\"}") > 200);
    r = it_get(s, "/v1/sources");
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(it_body(&r), "\"name\":\"gh\",\"kind\":\"webhook\",\"set\":\"gh\","
                                        "\"events\":2,"));
    it_resp_free(&r);
    s->passed = true;
}

/* ---- stripe ------------------------------------------------------------------------------ */

static void test_stripe(void **state)
{
    it_server *s = *state;
    start(s);
    long now = (long)time(NULL);
    const char *body = "{\"id\":\"evt_1Nv0pE2eZvKYlo2C\",\"object\":\"event\",\"type\":"
                       "\"payment_intent.succeeded\",\"data\":{\"object\":{\"amount\":2000}}}";
    hdrs h;
    stripe(&h, "whsec_abc", now, body);
    it_resp r = post(s, "stripe", &h, body);
    expect_stored(&r, "st", "evt_1Nv0pE2eZvKYlo2C");
    json_t *evs = events(s, "st", 1);
    json_t *ev = json_array_get(evs, 0);
    assert_string_equal(attr(ev, "type"), "com.stripe.payment_intent.succeeded");
    assert_string_equal(attr(ev, "id"), "evt_1Nv0pE2eZvKYlo2C");
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(json_object_get(json_object_get(ev, "data"), "data"), "object"),
            "amount")),
        2000);
    json_decref(evs);

    /* Stripe's retry of the event, signed again: a duplicate. */
    stripe(&h, "whsec_abc", now + 1, body);
    expect_duplicate(s, "stripe", &h, body);
    /* Several v1 signatures, one matching (Stripe during a secret roll). */
    const char *b2 = "{\"id\":\"evt_2\",\"type\":\"charge.refunded\"}";
    char pre[32], sig[65];
    snprintf(pre, sizeof pre, "%ld.", now);
    hmac_hex(EVP_sha256(), "whsec_abc", pre, b2, sig);
    memset(&h, 0, sizeof h);
    hdr(&h, "Stripe-Signature: t=%ld,v1=%064d,v1=%s", now, 7, sig);
    r = post(s, "stripe", &h, b2);
    expect_stored(&r, "st", "evt_2");

    stripe(&h, "whsec_wrong", now, body);
    expect_401(s, "stripe", &h, body, "no signature matches");
    stripe(&h, "whsec_abc", now, body);
    expect_401(s, "stripe", &h, "{\"id\":\"evt_1Nv0pE2eZvKYlo2C\",\"type\":\"x\"}",
               "no signature matches");
    stripe(&h, "whsec_abc", now - 600, body);
    expect_401(s, "stripe", &h, body, "in the past, outside the 300.000 s tolerance");
    memset(&h, 0, sizeof h);
    expect_401(s, "stripe", &h, body, "missing header Stripe-Signature");
    hdr(&h, "Stripe-Signature: v1=abc");
    expect_401(s, "stripe", &h, body, "Stripe-Signature");
    json_decref(events(s, "st", 2));

    /* Signed but not a Stripe event: 400, nothing stored. */
    stripe(&h, "whsec_abc", now, "not json");
    r = post(s, "stripe", &h, "not json");
    it_expect_error(&r, 400, "InvalidJson");
    it_resp_free(&r);
    json_decref(events(s, "st", 2));
    assert_true(metric(s, "sluice_webhook_requests_total{webhook=\"stripe\",outcome="
                          "\"invalid_signature\",reason=\"stale_timestamp\"}") == 1);
    s->passed = true;
}

/* ---- slack ------------------------------------------------------------------------------- */

static void test_slack(void **state)
{
    it_server *s = *state;
    start(s);
    long now = (long)time(NULL);
    hdrs h;

    /* The URL handshake: answered with the challenge, nothing stored. */
    const char *hs = "{\"token\":\"Jhj5dZrVaK7ZwHHjRyZWjbDl\",\"challenge\":"
                     "\"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P\","
                     "\"type\":\"url_verification\"}";
    slack(&h, "slk", now, hs);
    it_resp r = post(s, "slack", &h, hs);
    assert_int_equal(r.status, 200);
    assert_string_equal(it_body(&r), "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P");
    assert_true(strncmp(r.ctype, "text/plain", 10) == 0);
    it_resp_free(&r);
    slack(&h, "not-slk", now, hs); /* the handshake is verified too */
    expect_401(s, "slack", &h, hs, NULL);
    json_decref(events(s, "sl", 0));

    const char *ev = "{\"type\":\"event_callback\",\"team_id\":\"T1\",\"event\":{\"type\":"
                     "\"message\",\"text\":\"hello\",\"channel\":\"C1\"},\"event_id\":"
                     "\"Ev0PV52K21\",\"event_time\":1700000000}";
    slack(&h, "slk", now, ev);
    r = post(s, "slack", &h, ev);
    expect_stored(&r, "sl", "Ev0PV52K21");
    slack(&h, "slk", now + 2, ev); /* Slack's retry: same event_id */
    hdr(&h, "X-Slack-Retry-Num: 1");
    hdr(&h, "X-Slack-Retry-Reason: http_timeout");
    expect_duplicate(s, "slack", &h, ev);
    json_t *evs = events(s, "sl", 1);
    json_t *e0 = json_array_get(evs, 0);
    assert_string_equal(attr(e0, "type"), "com.slack.message");
    assert_string_equal(attr(e0, "id"), "Ev0PV52K21");
    assert_string_equal(attr(e0, "lane"), "boe-a");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(e0, "data"), "event"), "text")),
                        "hello");
    json_decref(evs);

    slack(&h, "wrong", now, ev);
    expect_401(s, "slack", &h, ev, "no signature matches");
    slack(&h, "slk", now, ev);
    expect_401(s, "slack", &h, "{\"type\":\"event_callback\"}", "no signature matches");
    slack(&h, "slk", now - 301, ev);
    expect_401(s, "slack", &h, ev, "outside the 300.000 s tolerance");
    slack(&h, "slk", now, ev);
    h.v[1] = NULL; /* no timestamp header */
    expect_401(s, "slack", &h, ev, "missing header X-Slack-Request-Timestamp");
    memset(&h, 0, sizeof h);
    hdr(&h, "X-Slack-Signature: v0=%s", "nothex");
    hdr(&h, "X-Slack-Request-Timestamp: %ld", now);
    expect_401(s, "slack", &h, ev, "X-Slack-Signature");
    json_decref(events(s, "sl", 1));
    assert_true(
        metric(s, "sluice_webhook_requests_total{webhook=\"slack\",outcome=\"challenge\"}") == 1);
    s->passed = true;
}

/* ---- generic ----------------------------------------------------------------------------- */

static void test_generic(void **state)
{
    it_server *s = *state;
    start(s);
    long now = (long)time(NULL);
    hdrs h;
    const char *body = "{\"thing\":{\"n\":1}}";
    generic(&h, "g1", now, body, "del-1");
    it_resp r = post(s, "gen", &h, body);
    expect_stored(&r, "gen", "del-1");
    expect_duplicate(s, "gen", &h, body);
    /* No id header: stored with a UUIDv7 each time (no dedupe possible). */
    generic(&h, "g1", now, body, NULL);
    r = post(s, "gen", &h, body);
    expect_stored(&r, "gen", NULL);
    r = post(s, "gen", &h, body);
    expect_stored(&r, "gen", NULL);
    json_t *evs = events(s, "gen", 3);
    json_t *e0 = json_array_get(evs, 0);
    assert_string_equal(attr(e0, "type"), "acme.thing");
    assert_string_equal(attr(e0, "source"), "urn:acme");
    assert_string_equal(attr(e0, "id"), "del-1");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(e0, "data"), "thing"), "n")),
                     1);
    assert_int_equal(strlen(attr(json_array_get(evs, 1), "id")), 36);
    assert_string_not_equal(attr(json_array_get(evs, 1), "id"), attr(json_array_get(evs, 2), "id"));
    json_decref(evs);

    generic(&h, "g2", now, body, "del-2");
    expect_401(s, "gen", &h, body, "no signature matches");
    generic(&h, "g1", now, body, "del-2");
    expect_401(s, "gen", &h, "{\"thing\":{\"n\":2}}", "no signature matches");
    generic(&h, "g1", now - 61, body, "del-2");
    expect_401(s, "gen", &h, body, "outside the 60.000 s tolerance");
    generic(&h, "g1", now, body, "del-2");
    h.v[0] = h.v[1]; /* drop X-Sig */
    h.v[1] = h.v[2];
    h.v[2] = NULL;
    expect_401(s, "gen", &h, body, "missing header X-Sig");
    memset(&h, 0, sizeof h);
    hdr(&h, "X-Sig: ***");
    hdr(&h, "X-Ts: %ld", now);
    expect_401(s, "gen", &h, body, "X-Sig");
    json_decref(events(s, "gen", 3));

    /* A body that is not JSON is kept as text with its content type. */
    const char *text = "a=1&b=two";
    generic(&h, "g1", now, text, "del-3");
    if (post_raw(s->port, "gen", &h, "application/x-www-form-urlencoded", text, strlen(text), &r))
        fail_msg("post: %s", r.err);
    expect_stored(&r, "gen", "del-3");
    evs = events(s, "gen", 4);
    json_t *e3 = json_array_get(evs, 3);
    assert_string_equal(attr(e3, "data"), text);
    assert_string_equal(attr(e3, "datacontenttype"), "application/x-www-form-urlencoded");
    json_decref(evs);
    s->passed = true;
}

/* ---- durability and races ------------------------------------------------------------------ */

static void test_durable_ack(void **state)
{
    it_server *s = *state;
    start(s);
    hdrs h;
    for (int i = 0; i < 5; i++) {
        char id[16], body[64];
        snprintf(id, sizeof id, "dur-%d", i);
        snprintf(body, sizeof body, "{\"n\":%d}", i);
        double before = metric(s, "sluice_fsync_seconds_count");
        github(&h, "new-secret", body, "push", id);
        it_resp r = post(s, "gh", &h, body);
        expect_stored(&r, "gh", id);
        /* The answer of a durable set comes after the sync that covers it. */
        double after = metric(s, "sluice_fsync_seconds_count");
        if (!(after > before))
            fail_msg("answered before any fsync (fsyncs %g -> %g)", before, after);
    }
    /* A buffer-ack set answers at once and is stored too. */
    github(&h, "f", k_gh, "push", "fast-1");
    it_resp r = post(s, "fast", &h, k_gh);
    expect_stored(&r, "fast", "fast-1");
    /* Killed right after the answers: everything answered is there. */
    it_srv_stop(s, SIGKILL, 5);
    it_restart(s, WAIT_S);
    json_decref(events(s, "gh", 5));
    /* Dedupe memory is not kept across restarts: documented. */
    s->passed = true;
}

typedef struct racer {
    int port;
    const char *id;
    int n;
    long status;
    bool duplicate;
} racer;

static void *race_main(void *arg)
{
    racer *rc = arg;
    char body[64];
    snprintf(body, sizeof body, "{\"n\":%d}", rc->n);
    hdrs h;
    char sig[65];
    /* No assertions on this thread: build the headers by hand. */
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned mlen = 0;
    HMAC(EVP_sha256(), "new-secret", 10, (const unsigned char *)body, strlen(body), mac, &mlen);
    for (unsigned i = 0; i < mlen; i++)
        sprintf(sig + 2 * i, "%02x", mac[i]);
    memset(&h, 0, sizeof h);
    snprintf(h.line[0], sizeof h.line[0], "X-Hub-Signature-256: sha256=%s", sig);
    snprintf(h.line[1], sizeof h.line[1], "X-GitHub-Event: push");
    snprintf(h.line[2], sizeof h.line[2], "X-GitHub-Delivery: %s", rc->id);
    h.v[0] = h.line[0], h.v[1] = h.line[1], h.v[2] = h.line[2], h.v[3] = NULL;
    it_resp r;
    post_raw(rc->port, "gh", &h, "application/json", body, strlen(body), &r);
    rc->status = r.status;
    rc->duplicate = strstr(it_body(&r), "\"duplicate\":true") != NULL;
    it_resp_free(&r);
    return NULL;
}

static void test_replay_race(void **state)
{
    it_server *s = *state;
    start(s);
    enum { N = 24 };
    racer rc[N];
    pthread_t t[N];
    /* 24 copies of one delivery at once: stored exactly once; the others
     * are duplicates or told to retry (409) while the first is stored. */
    for (int i = 0; i < N; i++) {
        rc[i] = (racer){.port = s->port, .id = "same-delivery", .n = 1};
        assert_int_equal(pthread_create(&t[i], NULL, race_main, &rc[i]), 0);
    }
    int stored = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        if (rc[i].status == 200 && !rc[i].duplicate)
            stored++;
        else if (rc[i].status != 409 && !(rc[i].status == 200 && rc[i].duplicate))
            fail_msg("copy %d answered %ld", i, rc[i].status);
    }
    assert_int_equal(stored, 1);
    json_decref(events(s, "gh", 1));
    /* 24 different deliveries at once: all stored. */
    char ids[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "d-%d", i);
        rc[i] = (racer){.port = s->port, .id = ids[i], .n = i};
        assert_int_equal(pthread_create(&t[i], NULL, race_main, &rc[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        if (rc[i].status != 200 || rc[i].duplicate)
            fail_msg("delivery %d answered %ld", i, rc[i].status);
    }
    json_decref(events(s, "gh", 1 + N));
    s->passed = true;
}

/* A publish the set refuses (a schema violation) stores nothing and leaves
 * the delivery id unremembered: the sender's retry is refused again, not
 * answered as a duplicate, and once the event fits it is stored. */
static void test_refused_publish(void **state)
{
    it_server *s = *state;
    char schema[PATH_MAX], cfg[PATH_MAX];
    it_path(schema, s, "push.json");
    it_write_file(schema, "{\"type\":\"object\",\"required\":[\"ref\"]}");
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"gh\" { partitions = 1, schemas = { [\"com.github.push\"] = \"%s\" } }\n"
                    "source.webhook { name = \"gh\", preset = \"github\", secret = \"k\", "
                    "set = \"gh\" }\n",
                    schema);
    static char keep[PATH_MAX];
    snprintf(keep, sizeof keep, "%s", cfg);
    it_start_config(s, keep, WAIT_S);
    hdrs h;
    const char *bad = "{\"before\":\"abc\"}";
    github(&h, "k", bad, "push", "d-1");
    for (int i = 0; i < 2; i++) {
        it_resp r = post(s, "gh", &h, bad);
        it_expect_error(&r, 422, "SchemaViolation");
        it_resp_free(&r);
    }
    json_decref(events(s, "gh", 0));
    github(&h, "k", k_gh, "push", "d-1");
    it_resp r = post(s, "gh", &h, k_gh);
    expect_stored(&r, "gh", "d-1");
    expect_duplicate(s, "gh", &h, k_gh);
    json_decref(events(s, "gh", 1));
    assert_true(metric(s, "sluice_webhook_requests_total{webhook=\"gh\",outcome=\"failed\"}") == 2);
    s->passed = true;
}

/* ---- main ---------------------------------------------------------------------------------- */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_source_webhook"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_github),      T(test_stripe),      T(test_slack),           T(test_generic),
        T(test_durable_ack), T(test_replay_race), T(test_refused_publish),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
