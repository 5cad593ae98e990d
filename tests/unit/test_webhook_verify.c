/*
 * tests/unit/test_webhook_verify.c — connectors/webhook_verify: signatures of
 * the github, stripe, slack and generic schemes accepted and every kind of bad
 * one refused with a message naming the problem (and never the secret or the
 * expected signature), secret rotation, the replay-dedupe cache (window,
 * capacity, many threads), and the GitHub and Slack mappings.
 *
 * Expected signatures are computed here with libcrypto's one-shot HMAC() over
 * a concatenated buffer, independently of the module's streaming EVP_MAC
 * path; GitHub's and Slack's published examples are checked as they are.
 */
#include "testutil.h"

#include "connectors/webhook_verify.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- a request's headers ------------------------------------------------- */

#define MAXH 8

typedef struct hdrs {
    const char *name[MAXH];
    const char *value[MAXH];
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

static void set_hdr(hdrs *h, const char *name, const char *value)
{
    for (int i = 0; i < h->n; i++)
        if (strcasecmp(h->name[i], name) == 0) {
            h->value[i] = value;
            return;
        }
    assert_true(h->n < MAXH);
    h->name[h->n] = name;
    h->value[h->n++] = value;
}

/* ---- expected signatures, computed independently ------------------------- */

/* HMAC(md, key, a || b || c) as lowercase hex into out (room for 129). */
static void hmac_hex(const EVP_MD *md, const char *key, const char *a, const char *b,
                     const char *body, size_t blen, char *out)
{
    size_t an = a ? strlen(a) : 0, bn = b ? strlen(b) : 0;
    unsigned char *buf = malloc(an + bn + blen + 1);
    assert_non_null(buf);
    memcpy(buf, a ? a : "", an);
    memcpy(buf + an, b ? b : "", bn);
    if (blen)
        memcpy(buf + an + bn, body, blen);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    assert_non_null(HMAC(md, key, (int)strlen(key), buf, an + bn + blen, mac, &mlen));
    for (unsigned i = 0; i < mlen; i++)
        sprintf(out + 2 * i, "%02x", mac[i]);
    free(buf);
}

static void hmac_b64(const EVP_MD *md, const char *key, const char *body, char *out)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    assert_non_null(
        HMAC(md, key, (int)strlen(key), (const unsigned char *)body, strlen(body), mac, &mlen));
    EVP_EncodeBlock((unsigned char *)out, mac, (int)mlen);
}

static void upper(char *s)
{
    for (; *s; s++)
        if (*s >= 'a' && *s <= 'z')
            *s = (char)(*s - 32);
}

/* Verifies and returns the code; err gets the message. */
static int verify(const sl_webhook_config *cfg, hdrs *h, const char *body, int64_t now_ms,
                  sl_error *err)
{
    memset(err, 0, sizeof *err);
    return sl_webhook_verify(cfg, get_hdr, h, body, body ? strlen(body) : 0, now_ms, err);
}

/* Asserts a refusal whose message contains want and none of the secrets
 * (comma-separated in cfg->secret) nor the expected signature. */
static void refused(const sl_webhook_config *cfg, hdrs *h, const char *body, int64_t now_ms,
                    const char *want, const char *expected_sig)
{
    sl_error err;
    int rc = verify(cfg, h, body, now_ms, &err);
    if (rc != SL_EINVAL)
        fail_msg("expected SL_EINVAL with \"%s\", got %d (%s)", want, rc, err.msg);
    if (!strstr(err.msg, want))
        fail_msg("message \"%s\" does not say \"%s\"", err.msg, want);
    char secrets[256];
    snprintf(secrets, sizeof secrets, "%s", cfg->secret);
    for (char *tok = strtok(secrets, ", "); tok; tok = strtok(NULL, ", "))
        if (strlen(tok) >= 4 && strstr(err.msg, tok))
            fail_msg("message \"%s\" reveals a secret", err.msg);
    if (expected_sig && strstr(err.msg, expected_sig))
        fail_msg("message \"%s\" reveals the expected signature", err.msg);
}

static void accepted(const sl_webhook_config *cfg, hdrs *h, const char *body, int64_t now_ms)
{
    sl_error err;
    int rc = verify(cfg, h, body, now_ms, &err);
    if (rc != 0)
        fail_msg("expected acceptance, got %d: %s", rc, err.msg);
}

/* ---- github -------------------------------------------------------------- */

static void test_github_published_vector(void **state)
{
    (void)state;
    /* The example in GitHub's "Validating webhook deliveries". */
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_GITHUB, .secret = "It's a Secret to Everybody"};
    hdrs h = {0};
    set_hdr(&h, "X-Hub-Signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17");
    accepted(&cfg, &h, "Hello, World!", 0);
    refused(&cfg, &h, "Hello, World?", 0, "no signature matches", NULL);
}

static void test_github(void **state)
{
    (void)state;
    const char *secret = "gh-secret-0123";
    const char *body = "{\"action\":\"opened\",\"number\":7}";
    char hex[129], val[200];
    hmac_hex(EVP_sha256(), secret, NULL, NULL, body, strlen(body), hex);
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_GITHUB, .secret = secret};
    hdrs h = {0};
    snprintf(val, sizeof val, "sha256=%s", hex);
    set_hdr(&h, "x-hub-signature-256", val);
    accepted(&cfg, &h, body, 0);

    /* Upper-case hex digits are the same signature. */
    char up[129];
    strcpy(up, hex);
    upper(up);
    snprintf(val, sizeof val, "sha256=%s", up);
    accepted(&cfg, &h, body, 0);

    /* Wrong secret. */
    snprintf(val, sizeof val, "sha256=%s", hex);
    sl_webhook_config bad = cfg;
    bad.secret = "gh-secret-0124";
    refused(&bad, &h, body, 0, "X-Hub-Signature-256: no signature matches", hex);

    /* Every single-byte change of the body is refused. */
    char *t = strdup(body);
    for (size_t i = 0; i < strlen(body); i++) {
        t[i] ^= 1;
        refused(&cfg, &h, t, 0, "no signature matches", hex);
        t[i] ^= 1;
    }
    free(t);
    refused(&cfg, &h, "", 0, "no signature matches", hex);

    /* Every single changed hex digit of the signature is refused (all bytes
     * are compared, not a prefix). */
    for (size_t i = 0; i < 64; i++) {
        snprintf(val, sizeof val, "sha256=%s", hex);
        val[7 + i] = val[7 + i] == '0' ? '1' : '0';
        refused(&cfg, &h, body, 0, "no signature matches", hex);
    }
    snprintf(val, sizeof val, "sha256=%s", hex);

    /* Missing header. */
    hdrs none = {0};
    refused(&cfg, &none, body, 0, "missing header X-Hub-Signature-256", hex);

    /* Malformed headers. */
    set_hdr(&h, "X-Hub-Signature-256", hex);
    refused(&cfg, &h, body, 0, "does not start with \"sha256=\"", hex);
    snprintf(val, sizeof val, "sha1=%s", hex);
    set_hdr(&h, "X-Hub-Signature-256", val);
    refused(&cfg, &h, body, 0, "does not start with \"sha256=\"", hex);
    snprintf(val, sizeof val, "SHA256=%s", hex);
    refused(&cfg, &h, body, 0, "does not start with \"sha256=\"", hex);
    set_hdr(&h, "X-Hub-Signature-256", "");
    refused(&cfg, &h, body, 0, "does not start with", hex);
    set_hdr(&h, "X-Hub-Signature-256", "sha256=");
    refused(&cfg, &h, body, 0, "the signature is empty", hex);
    snprintf(val, sizeof val, "sha256=%.63s", hex);
    set_hdr(&h, "X-Hub-Signature-256", val);
    refused(&cfg, &h, body, 0, "odd number (63) of hex digits", NULL);
    snprintf(val, sizeof val, "sha256=%.62s", hex);
    refused(&cfg, &h, body, 0, "62 hex digits, expected 64", NULL);
    snprintf(val, sizeof val, "sha256=%s00", hex);
    refused(&cfg, &h, body, 0, "66 hex digits, expected 64", hex);
    snprintf(val, sizeof val, "sha256=%s", hex);
    val[7 + 10] = 'g';
    refused(&cfg, &h, body, 0, "non-hex character at position 11", NULL);
    val[7 + 10] = ' ';
    refused(&cfg, &h, body, 0, "non-hex character at position 11", NULL);

    /* A huge value is refused by its length, without echoing it. */
    size_t big = 1 << 20;
    char *huge = malloc(big + 8);
    memcpy(huge, "sha256=", 7);
    memset(huge + 7, 'a', big);
    huge[7 + big] = '\0';
    set_hdr(&h, "X-Hub-Signature-256", huge);
    refused(&cfg, &h, body, 0, "1048576 hex digits, expected 64", NULL);
    sl_error err;
    verify(&cfg, &h, body, 0, &err);
    assert_true(strlen(err.msg) < 200);
    free(huge);
}

/* The header value and the body sit right before a PROT_NONE page: any
 * over-read crashes. */
static void test_github_guarded(void **state)
{
    (void)state;
    const char *secret = "guarded";
    const char *body = "abc";
    char hex[129], val[80];
    hmac_hex(EVP_sha256(), secret, NULL, NULL, body, 3, hex);
    snprintf(val, sizeof val, "sha256=%s", hex);
    tu_guard gb = {0}, gv = {0};
    const char *b = tu_guard_put(&gb, body, 3); /* not NUL-terminated */
    const char *v = tu_guard_put(&gv, val, strlen(val) + 1);
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_GITHUB, .secret = secret};
    hdrs h = {0};
    set_hdr(&h, "X-Hub-Signature-256", v);
    sl_error err = {0};
    assert_int_equal(sl_webhook_verify(&cfg, get_hdr, &h, b, 3, 0, &err), 0);
    v = tu_guard_put(&gv, "sha256=", 8);
    set_hdr(&h, "X-Hub-Signature-256", v);
    assert_int_equal(sl_webhook_verify(&cfg, get_hdr, &h, b, 3, 0, &err), SL_EINVAL);
    v = tu_guard_put(&gv, "sha256=a", 9);
    set_hdr(&h, "X-Hub-Signature-256", v);
    assert_int_equal(sl_webhook_verify(&cfg, get_hdr, &h, b, 3, 0, &err), SL_EINVAL);
    tu_guard_free(&gb);
    tu_guard_free(&gv);
}

/* ---- stripe -------------------------------------------------------------- */

#define T0 1700000000LL
#define NOW_MS (T0 * 1000 + 1500)

static void test_stripe(void **state)
{
    (void)state;
    const char *secret = "whsec_test_abcdef";
    const char *body = "{\"id\":\"evt_1\",\"type\":\"charge.succeeded\"}";
    char hex[129], other[129], val[1000];
    hmac_hex(EVP_sha256(), secret, "1700000000", ".", body, strlen(body), hex);
    hmac_hex(EVP_sha256(), "whsec_other", "1700000000", ".", body, strlen(body), other);
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_STRIPE, .secret = secret};
    hdrs h = {0};
    snprintf(val, sizeof val, "t=1700000000,v1=%s", hex);
    set_hdr(&h, "Stripe-Signature", val);
    accepted(&cfg, &h, body, NOW_MS);

    /* Several v1 (one per secret Stripe rolls), v0 ignored, any may match;
     * upper-case hex; spaces around elements. */
    char up[129];
    strcpy(up, hex);
    upper(up);
    snprintf(val, sizeof val, "t=1700000000,v1=%s,v1=%s,v0=%s", other, up, other);
    accepted(&cfg, &h, body, NOW_MS);
    snprintf(val, sizeof val, "v0=xyz, v1=%s , t=1700000000", hex);
    accepted(&cfg, &h, body, NOW_MS);
    snprintf(val, sizeof val, "t=1700000000,v1=%s,v1=%s", other, other);
    refused(&cfg, &h, body, NOW_MS, "no signature matches (2 signatures checked against 1 secret)",
            hex);

    /* The timestamp is signed: another t with the same v1 fails. */
    snprintf(val, sizeof val, "t=1700000001,v1=%s", hex);
    refused(&cfg, &h, body, NOW_MS, "no signature matches", hex);

    /* Wrong secret, tampered body. */
    snprintf(val, sizeof val, "t=1700000000,v1=%s", hex);
    sl_webhook_config bad = cfg;
    bad.secret = "whsec_other";
    refused(&bad, &h, body, NOW_MS, "Stripe-Signature: no signature matches", hex);
    char *t = strdup(body);
    t[5] = 'X';
    refused(&cfg, &h, t, NOW_MS, "no signature matches", hex);
    free(t);

    /* The window: 300 s either way by default, edges included. */
    accepted(&cfg, &h, body, T0 * 1000 + 300000);
    accepted(&cfg, &h, body, T0 * 1000 - 300000);
    refused(&cfg, &h, body, T0 * 1000 + 300001,
            "timestamp 1700000000 is 300.001 s in the past, outside the 300.000 s tolerance", hex);
    refused(&cfg, &h, body, T0 * 1000 + 3600000, "3600.000 s in the past", hex);
    refused(&cfg, &h, body, T0 * 1000 - 301000, "301.000 s in the future", hex);
    refused(&cfg, &h, body, INT64_MAX, "in the past", hex);
    refused(&cfg, &h, body, INT64_MIN, "in the future", hex);
    sl_webhook_config wide = cfg;
    wide.tolerance_ms = 3600000;
    accepted(&wide, &h, body, T0 * 1000 + 3600000);
    wide.tolerance_ms = 1000;
    refused(&wide, &h, body, NOW_MS, "1.500 s in the past, outside the 1.000 s tolerance", hex);

    /* Malformed. */
    hdrs none = {0};
    refused(&cfg, &none, body, NOW_MS, "missing header Stripe-Signature", hex);
    set_hdr(&h, "Stripe-Signature", "");
    refused(&cfg, &h, body, NOW_MS, "Stripe-Signature: the value is empty", hex);
    snprintf(val, sizeof val, "v1=%s", hex);
    set_hdr(&h, "Stripe-Signature", val);
    refused(&cfg, &h, body, NOW_MS, "no t= timestamp", hex);
    set_hdr(&h, "Stripe-Signature", "t=1700000000");
    refused(&cfg, &h, body, NOW_MS, "no v1= signature", hex);
    snprintf(val, sizeof val, "t=1700000000,v0=%s", hex);
    set_hdr(&h, "Stripe-Signature", val);
    refused(&cfg, &h, body, NOW_MS, "no v1= signature", hex);
    snprintf(val, sizeof val, "t=,v1=%s", hex);
    refused(&cfg, &h, body, NOW_MS, "the timestamp is empty", hex);
    snprintf(val, sizeof val, "t=17e8,v1=%s", hex);
    refused(&cfg, &h, body, NOW_MS, "not a Unix time in seconds (character 3)", hex);
    snprintf(val, sizeof val, "t=-1700000000,v1=%s", hex);
    refused(&cfg, &h, body, NOW_MS, "not a Unix time in seconds", hex);
    snprintf(val, sizeof val, "t=99999999999999999999999,v1=%s", hex);
    refused(&cfg, &h, body, NOW_MS, "the timestamp has more than 12 digits", hex);
    snprintf(val, sizeof val, "t=1700000000,t=1700000000,v1=%s", hex);
    refused(&cfg, &h, body, NOW_MS, "more than one t=", hex);
    snprintf(val, sizeof val, "t=1700000000,,v1=%s", hex);
    refused(&cfg, &h, body, NOW_MS, "element 2 is not key=value", hex);
    snprintf(val, sizeof val, "t=1700000000,v1=%.63s", hex);
    refused(&cfg, &h, body, NOW_MS, "odd number (63) of hex digits", NULL);
    snprintf(val, sizeof val, "t=1700000000,v1=");
    refused(&cfg, &h, body, NOW_MS, "the signature is empty", hex);
    char *p = val + snprintf(val, sizeof val, "t=1700000000");
    for (int i = 0; i < SL_WEBHOOK_MAX_SIGS + 1; i++)
        p += sprintf(p, ",v1=%.64s", i == SL_WEBHOOK_MAX_SIGS ? hex : other);
    refused(&cfg, &h, body, NOW_MS, "more than 8 v1= signatures", hex);
}

/* ---- slack --------------------------------------------------------------- */

/* The example in Slack's "Verifying requests from Slack". */
static const char slack_body[] =
    "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
    "G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-"
    "collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%"
    "2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121."
    "803a0bc887a14d10d2c447fce8b6703c";
static const char slack_sig[] =
    "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

static void test_slack(void **state)
{
    (void)state;
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_SLACK,
                             .secret = "8f742231b10e8888abcd99yyyzzz85a5"};
    const int64_t ts_ms = 1531420618LL * 1000;
    hdrs h = {0};
    set_hdr(&h, "X-Slack-Signature", slack_sig);
    set_hdr(&h, "X-Slack-Request-Timestamp", "1531420618");
    accepted(&cfg, &h, slack_body, ts_ms + 10000);
    refused(&cfg, &h, slack_body, ts_ms + 300001,
            "X-Slack-Request-Timestamp: timestamp 1531420618 is 300.001 s in the past", NULL);
    refused(&cfg, &h, slack_body, ts_ms - 400000, "400.000 s in the future", NULL);

    /* Our own signature, computed independently. */
    const char *secret = "slack-secret-xyz";
    const char *body = "{\"type\":\"event_callback\",\"event_id\":\"Ev1\"}";
    char hex[129], val[200];
    hmac_hex(EVP_sha256(), secret, "v0:1700000000:", NULL, body, strlen(body), hex);
    snprintf(val, sizeof val, "v0=%s", hex);
    cfg.secret = secret;
    set_hdr(&h, "X-Slack-Signature", val);
    set_hdr(&h, "X-Slack-Request-Timestamp", "1700000000");
    accepted(&cfg, &h, body, NOW_MS);
    char up[129];
    strcpy(up, hex);
    upper(up);
    snprintf(val, sizeof val, "v0=%s", up);
    accepted(&cfg, &h, body, NOW_MS);
    snprintf(val, sizeof val, "v0=%s", hex);

    sl_webhook_config bad = cfg;
    bad.secret = "slack-secret-xyw";
    refused(&bad, &h, body, NOW_MS, "X-Slack-Signature: no signature matches", hex);
    refused(&cfg, &h, "{\"type\":\"event_callback\",\"event_id\":\"Ev2\"}", NOW_MS,
            "no signature matches", hex);
    set_hdr(&h, "X-Slack-Request-Timestamp", "1700000001");
    refused(&cfg, &h, body, NOW_MS, "no signature matches", hex);

    hdrs only_sig = {0};
    set_hdr(&only_sig, "X-Slack-Signature", val);
    refused(&cfg, &only_sig, body, NOW_MS, "missing header X-Slack-Request-Timestamp", hex);
    hdrs only_ts = {0};
    set_hdr(&only_ts, "X-Slack-Request-Timestamp", "1700000000");
    refused(&cfg, &only_ts, body, NOW_MS, "missing header X-Slack-Signature", hex);

    set_hdr(&h, "X-Slack-Request-Timestamp", "1700000000");
    set_hdr(&h, "X-Slack-Signature", hex);
    refused(&cfg, &h, body, NOW_MS, "X-Slack-Signature: the value does not start with \"v0=\"",
            hex);
    set_hdr(&h, "X-Slack-Signature", "v0=");
    refused(&cfg, &h, body, NOW_MS, "the signature is empty", hex);
    set_hdr(&h, "X-Slack-Signature", val);
    set_hdr(&h, "X-Slack-Request-Timestamp", "");
    refused(&cfg, &h, body, NOW_MS, "X-Slack-Request-Timestamp: the timestamp is empty", hex);
    set_hdr(&h, "X-Slack-Request-Timestamp", "1700000000.5");
    refused(&cfg, &h, body, NOW_MS, "not a Unix time in seconds (character 11)", hex);
    set_hdr(&h, "X-Slack-Request-Timestamp", "1234567890123");
    refused(&cfg, &h, body, NOW_MS, "more than 12 digits", hex);
}

/* ---- generic ------------------------------------------------------------- */

static void test_generic(void **state)
{
    (void)state;
    const char *body = "{\"hello\":\"world\"}";
    char hex[129], b64[100], val[300];
    hdrs h = {0};

    /* sha1, hex, with a prefix. */
    hmac_hex(EVP_sha1(), "k1", NULL, NULL, body, strlen(body), hex);
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_GENERIC,
                             .secret = "k1",
                             .header = "X-Signature",
                             .algorithm = "SHA1",
                             .prefix = "sha1="};
    snprintf(val, sizeof val, "sha1=%s", hex);
    set_hdr(&h, "x-signature", val);
    accepted(&cfg, &h, body, 0);
    refused(&cfg, &h, "{\"hello\":\"World\"}", 0, "X-Signature: no signature matches", hex);
    set_hdr(&h, "x-signature", hex);
    refused(&cfg, &h, body, 0, "X-Signature: the value does not start with \"sha1=\"", hex);
    hdrs none = {0};
    refused(&cfg, &none, body, 0, "missing header X-Signature", hex);
    snprintf(val, sizeof val, "sha1=%s", hex);
    set_hdr(&h, "x-signature", val);
    cfg.algorithm = "sha256"; /* a sha1-sized signature is now malformed */
    refused(&cfg, &h, body, 0, "40 hex digits, expected 64", hex);

    /* sha512, base64, padded and unpadded. */
    hmac_b64(EVP_sha512(), "k2", body, b64);
    cfg = (sl_webhook_config){.kind = SL_WEBHOOK_GENERIC,
                              .secret = "k2",
                              .header = "X-Sig",
                              .algorithm = "sha512",
                              .base64 = true};
    h = (hdrs){0};
    set_hdr(&h, "X-Sig", b64);
    accepted(&cfg, &h, body, 0);
    assert_int_equal(b64[86], '=');
    b64[86] = '\0';
    accepted(&cfg, &h, body, 0);
    b64[10] = '*';
    refused(&cfg, &h, body, 0, "non-base64 character at position 11", NULL);
    set_hdr(&h, "X-Sig", "AAAA");
    refused(&cfg, &h, body, 0, "decodes to 3 bytes, expected 64", NULL);
    set_hdr(&h, "X-Sig", "A");
    refused(&cfg, &h, body, 0, "not valid base64", NULL);
    set_hdr(&h, "X-Sig", "");
    refused(&cfg, &h, body, 0, "the signature is empty", NULL);

    /* sha256 (the default), hex, with a timestamp header. */
    hmac_hex(EVP_sha256(), "k3", "1700000000", ".", body, strlen(body), hex);
    cfg = (sl_webhook_config){.kind = SL_WEBHOOK_GENERIC,
                              .secret = "k3",
                              .header = "X-Sig",
                              .timestamp_header = "X-Timestamp",
                              .tolerance_ms = 60000};
    h = (hdrs){0};
    set_hdr(&h, "X-Sig", hex);
    set_hdr(&h, "X-Timestamp", "1700000000");
    accepted(&cfg, &h, body, NOW_MS);
    refused(&cfg, &h, body, T0 * 1000 + 61000,
            "X-Timestamp: timestamp 1700000000 is 61.000 s in the past, outside the 60.000 s", hex);
    set_hdr(&h, "X-Timestamp", "1700000001");
    refused(&cfg, &h, body, NOW_MS, "no signature matches", hex);
    hdrs no_ts = {0};
    set_hdr(&no_ts, "X-Sig", hex);
    refused(&cfg, &no_ts, body, NOW_MS, "missing header X-Timestamp", hex);
}

/* ---- rotation, config ---------------------------------------------------- */

static void test_rotation(void **state)
{
    (void)state;
    const char *body = "rotate me";
    char hex_old[129], hex_new[129], val[100];
    hmac_hex(EVP_sha256(), "old-secret", NULL, NULL, body, strlen(body), hex_old);
    hmac_hex(EVP_sha256(), "new-secret", NULL, NULL, body, strlen(body), hex_new);
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_GITHUB, .secret = "new-secret, old-secret"};
    hdrs h = {0};
    set_hdr(&h, "X-Hub-Signature-256", val);
    snprintf(val, sizeof val, "sha256=%s", hex_old);
    accepted(&cfg, &h, body, 0);
    snprintf(val, sizeof val, "sha256=%s", hex_new);
    accepted(&cfg, &h, body, 0);
    cfg.secret = "other-secret,\tnew-secret ,third";
    accepted(&cfg, &h, body, 0);
    cfg.secret = "other-secret,third";
    refused(&cfg, &h, body, 0, "(1 signature checked against 2 secrets)", hex_new);

    /* Stripe with two secrets and two v1 signatures, one per secret. */
    char s_old[129], s_new[129], sval[300];
    hmac_hex(EVP_sha256(), "old-secret", "1700000000", ".", body, strlen(body), s_old);
    hmac_hex(EVP_sha256(), "new-secret", "1700000000", ".", body, strlen(body), s_new);
    snprintf(sval, sizeof sval, "t=1700000000,v1=%s", s_old);
    sl_webhook_config st = {.kind = SL_WEBHOOK_STRIPE, .secret = "new-secret,old-secret"};
    hdrs sh = {0};
    set_hdr(&sh, "Stripe-Signature", sval);
    accepted(&st, &sh, body, NOW_MS);
    snprintf(sval, sizeof sval, "t=1700000000,v1=%s,v1=%s", s_new, s_old);
    st.secret = "old-secret";
    accepted(&st, &sh, body, NOW_MS);
}

static void test_config(void **state)
{
    (void)state;
    sl_error err = {0};
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_GITHUB, .secret = "s"};
    assert_int_equal(sl_webhook_config_check(&cfg, &err), 0);
    assert_int_equal(sl_webhook_config_check(NULL, &err), SL_EINVAL);

    struct {
        sl_webhook_config cfg;
        const char *want;
    } bad[] = {
        {{.kind = SL_WEBHOOK_GITHUB}, "no secret"},
        {{.kind = SL_WEBHOOK_GITHUB, .secret = ""}, "no secret"},
        {{.kind = SL_WEBHOOK_GITHUB, .secret = "a,,b"}, "secret 2 of the list is empty"},
        {{.kind = SL_WEBHOOK_GITHUB, .secret = "a, "}, "secret 2 of the list is empty"},
        {{.kind = SL_WEBHOOK_GITHUB, .secret = "1,2,3,4,5,6,7,8,9"}, "more than 8 secrets"},
        {{.kind = SL_WEBHOOK_STRIPE, .secret = "s", .tolerance_ms = -1}, "tolerance is negative"},
        {{.kind = (sl_webhook_kind)9, .secret = "s"}, "unknown kind 9"},
        {{.kind = SL_WEBHOOK_GENERIC, .secret = "s"}, "generic needs a header name"},
        {{.kind = SL_WEBHOOK_GENERIC, .secret = "s", .header = "X", .algorithm = "md5"},
         "algorithm \"md5\" is unknown"},
        {{.kind = SL_WEBHOOK_GENERIC, .secret = "s", .header = "X", .timestamp_header = ""},
         "empty timestamp header name"},
    };
    hdrs h = {0};
    set_hdr(&h, "X", "00");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        assert_int_equal(sl_webhook_config_check(&bad[i].cfg, &err), SL_EINVAL);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.msg, bad[i].want);
        /* verify() refuses the same way before looking at the request. */
        assert_int_equal(verify(&bad[i].cfg, &h, "x", 0, &err), SL_EINVAL);
        assert_non_null(strstr(err.msg, bad[i].want));
    }

    sl_webhook_kind k = SL_WEBHOOK_GENERIC;
    assert_int_equal(sl_webhook_kind_parse("stripe", &k, &err), 0);
    assert_int_equal(k, SL_WEBHOOK_STRIPE);
    assert_int_equal(sl_webhook_kind_parse("gitlab", &k, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "\"gitlab\" is unknown"));
    assert_int_equal(k, SL_WEBHOOK_STRIPE);
    for (int i = SL_WEBHOOK_GITHUB; i <= SL_WEBHOOK_GENERIC; i++) {
        assert_int_equal(sl_webhook_kind_parse(sl_webhook_kind_name((sl_webhook_kind)i), &k, NULL),
                         0);
        assert_int_equal(k, i);
    }
    assert_string_equal(sl_webhook_kind_name((sl_webhook_kind)42), "?");

    /* An empty body (NULL with length 0) is signed like any other. */
    char hex[129], val[100];
    hmac_hex(EVP_sha256(), "s", NULL, NULL, "", 0, hex);
    snprintf(val, sizeof val, "sha256=%s", hex);
    hdrs g = {0};
    set_hdr(&g, "X-Hub-Signature-256", val);
    assert_int_equal(sl_webhook_verify(&cfg, get_hdr, &g, NULL, 0, 0, &err), 0);
    assert_int_equal(sl_webhook_verify(&cfg, get_hdr, &g, NULL, 1, 0, &err), SL_EINVAL);
    assert_int_equal(sl_webhook_verify(&cfg, NULL, &g, "", 0, 0, &err), SL_EINVAL);
    /* err may be NULL. */
    assert_int_equal(sl_webhook_verify(&cfg, get_hdr, &g, "x", 1, 0, NULL), SL_EINVAL);
}

/* ---- dedupe -------------------------------------------------------------- */

static bool seen(sl_webhook_dedupe *d, const char *id, int64_t now)
{
    return sl_webhook_dedupe_check(d, id, strlen(id), now);
}

static void test_dedupe_basic(void **state)
{
    (void)state;
    assert_null(sl_webhook_dedupe_new(0, 1000));
    assert_null(sl_webhook_dedupe_new(10, 0));
    assert_null(sl_webhook_dedupe_new(10, -5));
    sl_webhook_dedupe_free(NULL);

    sl_webhook_dedupe *d = sl_webhook_dedupe_new(100, 1000);
    assert_non_null(d);
    assert_false(seen(d, "a", 0));
    assert_true(seen(d, "a", 10));
    assert_false(seen(d, "b", 20));
    assert_true(seen(d, "b", 30));
    assert_true(seen(d, "a", 999));   /* within the window */
    assert_false(seen(d, "a", 1000)); /* the window is over: new again */
    assert_true(seen(d, "a", 1500));
    assert_false(seen(d, "b", 1500)); /* b expired at 1020 */
    assert_int_equal(sl_webhook_dedupe_count(d), 2);
    /* Everything expires. */
    assert_false(seen(d, "c", 10000));
    assert_int_equal(sl_webhook_dedupe_count(d), 1);

    /* Ids are bytes: a prefix, an embedded NUL and the empty id are distinct. */
    assert_false(sl_webhook_dedupe_check(d, "ab\0c", 4, 10001));
    assert_false(sl_webhook_dedupe_check(d, "ab", 2, 10001));
    assert_true(sl_webhook_dedupe_check(d, "ab\0c", 4, 10002));
    assert_false(sl_webhook_dedupe_check(d, "", 0, 10002));
    assert_true(sl_webhook_dedupe_check(d, "", 0, 10003));
    /* A long id. */
    char big[5000];
    memset(big, 'x', sizeof big);
    assert_false(sl_webhook_dedupe_check(d, big, sizeof big, 10004));
    assert_true(sl_webhook_dedupe_check(d, big, sizeof big, 10005));
    assert_false(sl_webhook_dedupe_check(d, big, sizeof big - 1, 10005));
    sl_webhook_dedupe_free(d);
}

static void test_dedupe_capacity(void **state)
{
    (void)state;
    sl_webhook_dedupe *d = sl_webhook_dedupe_new(3, 1000000);
    assert_false(seen(d, "a", 1));
    assert_false(seen(d, "b", 2));
    assert_false(seen(d, "c", 3));
    assert_true(seen(d, "a", 4));  /* a repeat neither refreshes nor reorders */
    assert_false(seen(d, "d", 5)); /* full: a, the oldest, goes */
    assert_int_equal(sl_webhook_dedupe_count(d), 3);
    assert_true(seen(d, "b", 6));
    assert_true(seen(d, "c", 6));
    assert_true(seen(d, "d", 6));
    assert_false(seen(d, "a", 7)); /* evicted; now b goes */
    assert_false(seen(d, "b", 8)); /* evicted; now c goes */
    assert_true(seen(d, "d", 9));
    assert_true(seen(d, "a", 9));
    assert_int_equal(sl_webhook_dedupe_count(d), 3);
    sl_webhook_dedupe_free(d);

    /* Many ids through a small cache: it never grows, the last cap are all
     * still known, and chains stay consistent while slots are reused. */
    d = sl_webhook_dedupe_new(64, 1000000);
    char id[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(id, sizeof id, "id-%d", i);
        assert_false(seen(d, id, i));
    }
    assert_int_equal(sl_webhook_dedupe_count(d), 64);
    for (int i = 10000 - 64; i < 10000; i++) {
        snprintf(id, sizeof id, "id-%d", i);
        assert_true(seen(d, id, 10000));
    }
    snprintf(id, sizeof id, "id-%d", 10000 - 65);
    assert_false(seen(d, id, 10000));
    sl_webhook_dedupe_free(d);

    /* A clock that goes backwards: nothing breaks, a repeat is still seen. */
    d = sl_webhook_dedupe_new(8, 100);
    assert_false(seen(d, "x", 1000));
    assert_false(seen(d, "y", 500));
    assert_true(seen(d, "y", 550));
    assert_true(seen(d, "x", 560));   /* "x" is in the future of 560: still within */
    assert_false(seen(d, "y", 1050)); /* y expired behind an unexpired head: found late */
    sl_webhook_dedupe_free(d);
}

#define NTHREADS 8
#define NIDS 4000
#define PER_THREAD 3000

typedef struct dd_run {
    sl_webhook_dedupe *d;
    int seed;
    atomic_int *firsts; /* per id: how many checks said "new" */
} dd_run;

static void *dd_worker(void *arg)
{
    dd_run *r = arg;
    char id[32];
    uint32_t x = (uint32_t)r->seed * 2654435761u + 1;
    for (int i = 0; i < PER_THREAD; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        int k = (int)(x % NIDS);
        int n = snprintf(id, sizeof id, "delivery-%d", k);
        if (!sl_webhook_dedupe_check(r->d, id, (size_t)n, 1000))
            atomic_fetch_add(&r->firsts[k], 1);
    }
    return NULL;
}

static void test_dedupe_threads(void **state)
{
    (void)state;
    /* Room for every id: each one is "new" exactly once across all threads. */
    sl_webhook_dedupe *d = sl_webhook_dedupe_new(NIDS, 60000);
    static atomic_int firsts[NIDS];
    for (int i = 0; i < NIDS; i++)
        atomic_init(&firsts[i], 0);
    pthread_t th[NTHREADS];
    dd_run runs[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        runs[i] = (dd_run){d, i + 1, firsts};
        assert_int_equal(pthread_create(&th[i], NULL, dd_worker, &runs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    int distinct = 0;
    for (int i = 0; i < NIDS; i++) {
        int f = atomic_load(&firsts[i]);
        assert_in_range(f, 0, 1);
        distinct += f;
    }
    assert_int_equal(sl_webhook_dedupe_count(d), (size_t)distinct);
    assert_true(distinct > NIDS / 2);
    sl_webhook_dedupe_free(d);

    /* A cache much smaller than the traffic: bounded, consistent. */
    d = sl_webhook_dedupe_new(50, 60000);
    for (int i = 0; i < NIDS; i++)
        atomic_init(&firsts[i], 0);
    for (int i = 0; i < NTHREADS; i++) {
        runs[i] = (dd_run){d, i + 100, firsts};
        assert_int_equal(pthread_create(&th[i], NULL, dd_worker, &runs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(sl_webhook_dedupe_count(d), 50);
    sl_webhook_dedupe_free(d);
}

/* ---- verify from many threads (one process-wide HMAC fetch) ------------- */

typedef struct vf_run {
    const char *val;
    int wrong; /* results that disagreed with the expectation */
} vf_run;

static void *vf_worker(void *arg)
{
    vf_run *r = arg;
    sl_webhook_config cfg = {.kind = SL_WEBHOOK_GITHUB, .secret = "old,threads-secret"};
    hdrs h = {0};
    set_hdr(&h, "X-Hub-Signature-256", r->val);
    for (int i = 0; i < 300; i++) {
        const char *body = i % 2 ? "threads body" : "threads bodY";
        int rc = sl_webhook_verify(&cfg, get_hdr, &h, body, strlen(body), 0, NULL);
        r->wrong += (i % 2 ? rc != 0 : rc != SL_EINVAL);
    }
    return NULL;
}

static void test_verify_threads(void **state)
{
    (void)state;
    char hex[129], val[100];
    hmac_hex(EVP_sha256(), "threads-secret", NULL, NULL, "threads body", 12, hex);
    snprintf(val, sizeof val, "sha256=%s", hex);
    pthread_t th[NTHREADS];
    vf_run runs[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        runs[i] = (vf_run){val, 0};
        assert_int_equal(pthread_create(&th[i], NULL, vf_worker, &runs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(runs[i].wrong, 0);
    }
}

/* ---- mappings ------------------------------------------------------------ */

static void test_github_meta(void **state)
{
    (void)state;
    hdrs h = {0};
    set_hdr(&h, "X-GitHub-Event", "pull_request");
    set_hdr(&h, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    char type[80];
    const char *id = NULL;
    sl_error err = {0};
    assert_int_equal(sl_webhook_github_meta(get_hdr, &h, type, sizeof type, &id, &err), 0);
    assert_string_equal(type, "com.github.pull_request");
    assert_string_equal(id, "72d3162e-cc78-11e3-81ab-4c9367dc0958");

    /* Exactly enough room, then one byte short. */
    assert_int_equal(sl_webhook_github_meta(get_hdr, &h, type, 24, &id, &err), 0);
    strcpy(type, "untouched");
    assert_int_equal(sl_webhook_github_meta(get_hdr, &h, type, 23, &id, &err), SL_ETOOBIG);
    assert_string_equal(type, "untouched");

    struct {
        const char *ev, *dv, *want;
    } bad[] = {
        {NULL, "d", "missing header X-GitHub-Event"},
        {"push", NULL, "missing header X-GitHub-Delivery"},
        {"", "d", "X-GitHub-Event: empty"},
        {"pu sh", "d", "X-GitHub-Event: unexpected character at 3"},
        {"push/../x", "d", "X-GitHub-Event: unexpected character at 5"},
        {"push", "", "X-GitHub-Delivery: empty"},
        {"push", "a b", "X-GitHub-Delivery: unexpected character at 2"},
        {"push", "a\nb", "X-GitHub-Delivery: unexpected character at 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hdrs b = {0};
        if (bad[i].ev)
            set_hdr(&b, "X-GitHub-Event", bad[i].ev);
        if (bad[i].dv)
            set_hdr(&b, "X-GitHub-Delivery", bad[i].dv);
        memset(&err, 0, sizeof err);
        assert_int_equal(sl_webhook_github_meta(get_hdr, &b, type, sizeof type, &id, &err),
                         SL_EINVAL);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.msg, bad[i].want);
    }
    char longer[SL_WEBHOOK_EVENT_MAX + 2];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    set_hdr(&h, "X-GitHub-Event", longer);
    assert_int_equal(sl_webhook_github_meta(get_hdr, &h, type, sizeof type, &id, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "too long"));
}

static void test_slack_challenge(void **state)
{
    (void)state;
    char out[64];
    size_t n = 0;
    sl_error err = {0};
    const char *b = "{\"token\":\"Jhj5dZrVaK7ZwHHjRyZWjbDl\",\"challenge\":"
                    "\"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P\","
                    "\"type\":\"url_verification\"}";
    assert_int_equal(sl_webhook_slack_challenge(b, strlen(b), out, sizeof out, &n, &err), 0);
    assert_string_equal(out, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P");
    assert_int_equal(n, strlen(out));

    /* Escapes are decoded, in keys too; whitespace is fine. */
    b = " { \"typ\\u0065\" : \"url_verification\" , \"challenge\" : \"a\\/b\\\"c\" } ";
    assert_int_equal(sl_webhook_slack_challenge(b, strlen(b), out, sizeof out, &n, &err), 0);
    assert_string_equal(out, "a/b\"c");

    /* Too small: 5 bytes need cap 6. */
    b = "{\"type\":\"url_verification\",\"challenge\":\"abcde\"}";
    assert_int_equal(sl_webhook_slack_challenge(b, strlen(b), out, 6, &n, &err), 0);
    assert_int_equal(sl_webhook_slack_challenge(b, strlen(b), out, 5, &n, &err), SL_ETOOBIG);
    assert_int_equal(sl_webhook_slack_challenge(b, strlen(b), out, 0, &n, &err), SL_ETOOBIG);

    struct {
        const char *body;
        int rc;
    } cases[] = {
        {"{\"type\":\"event_callback\",\"challenge\":\"x\"}", SL_ENOENT},
        {"{\"challenge\":\"x\"}", SL_ENOENT},
        {"{\"type\":\"url_verification_x\",\"challenge\":\"x\"}", SL_ENOENT},
        {"{\"type\":1,\"challenge\":\"x\"}", SL_ENOENT},
        {"[\"url_verification\"]", SL_ENOENT},
        {"token=abc&type=url_verification", SL_ENOENT},
        {"{\"type\":\"url_verification\",\"challenge\":\"x\"", SL_ENOENT},
        {"{\"type\":\"url_verification\",\"challenge\":\"x\"} x", SL_ENOENT},
        {"", SL_ENOENT},
        {"{\"type\":\"url_verification\"}", SL_EINVAL},
        {"{\"type\":\"url_verification\",\"challenge\":42}", SL_EINVAL},
        {"{\"type\":\"url_verification\",\"challenge\":null}", SL_EINVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = sl_webhook_slack_challenge(cases[i].body, strlen(cases[i].body), out, sizeof out,
                                            &n, &err);
        if (rc != cases[i].rc)
            fail_msg("case %zu: got %d (%s), want %d", i, rc, err.msg, cases[i].rc);
        assert_true(err.msg[0] != '\0');
    }
    assert_int_equal(sl_webhook_slack_challenge(NULL, 0, out, sizeof out, &n, NULL), SL_ENOENT);

    /* Guarded: the body ends right at an unreadable page. */
    tu_guard g = {0};
    b = "{\"type\":\"url_verification\",\"challenge\":\"zz\"}";
    const char *gb = tu_guard_put(&g, b, strlen(b));
    assert_int_equal(sl_webhook_slack_challenge(gb, strlen(b), out, sizeof out, &n, &err), 0);
    assert_string_equal(out, "zz");
    gb = tu_guard_put(&g, b, strlen(b) - 1);
    assert_int_equal(sl_webhook_slack_challenge(gb, strlen(b) - 1, out, sizeof out, &n, &err),
                     SL_ENOENT);
    tu_guard_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_github_published_vector),
        cmocka_unit_test(test_github),
        cmocka_unit_test(test_github_guarded),
        cmocka_unit_test(test_stripe),
        cmocka_unit_test(test_slack),
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_dedupe_basic),
        cmocka_unit_test(test_dedupe_capacity),
        cmocka_unit_test(test_dedupe_threads),
        cmocka_unit_test(test_verify_threads),
        cmocka_unit_test(test_github_meta),
        cmocka_unit_test(test_slack_challenge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
