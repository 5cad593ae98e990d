/*
 * connectors/webhook_verify.c — webhook signature verification (GitHub,
 * Stripe, Slack, generic HMAC), the delivery-id replay cache, and the GitHub
 * and Slack mappings source.webhook needs. See webhook_verify.h.
 *
 * Verification parses the sender's header into decoded signatures first (so
 * a malformed header is reported as such, and hex case does not matter),
 * checks the timestamp window before any HMAC is computed (cheap refusal of
 * replays), then computes one HMAC per configured secret, streaming the
 * signed content in pieces so nothing is copied, and compares it with every
 * signature using CRYPTO_memcmp() on equal lengths.
 */
#include "connectors/webhook_verify.h"
#include "core/base/base64.h"

#include "core/base/json.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Most timestamp digits accepted: 12 digits of seconds reach the year 33658,
 * and keep every later millisecond computation far from overflowing. */
#define TS_DIGITS_MAX 12

typedef struct span {
    const char *p;
    size_t n;
} span;

/* One decoded signature from the request. */
typedef struct sig {
    unsigned char b[EVP_MAX_MD_SIZE];
    size_t n;
} sig;

/* What the request says, once its headers are parsed. */
typedef struct parsed {
    const char *header; /* the signature header's name, for messages */
    sig sigs[SL_WEBHOOK_MAX_SIGS];
    size_t nsig;
    const char *ts_header; /* where the timestamp came from, NULL: none */
    span ts;               /* the timestamp digits as sent */
    span parts[4];         /* the signed content, in order */
    size_t nparts;
    bool missing; /* parsing failed because a header is absent */
} parsed;

typedef struct algo {
    const char *name;   /* as configured */
    const char *digest; /* as libcrypto names it */
    size_t size;
} algo;

static const algo k_algos[] = {
    {"sha1", "SHA1", 20},
    {"sha256", "SHA256", 32},
    {"sha512", "SHA512", 64},
};

static const char *const k_kind_names[] = {
    [SL_WEBHOOK_GITHUB] = "github",
    [SL_WEBHOOK_STRIPE] = "stripe",
    [SL_WEBHOOK_SLACK] = "slack",
    [SL_WEBHOOK_GENERIC] = "generic",
};

const char *sl_webhook_kind_name(sl_webhook_kind kind)
{
    if ((unsigned)kind >= sizeof k_kind_names / sizeof k_kind_names[0])
        return "?";
    return k_kind_names[kind];
}

int sl_webhook_kind_parse(const char *name, sl_webhook_kind *kind, sl_error *err)
{
    for (size_t i = 0; name && i < sizeof k_kind_names / sizeof k_kind_names[0]; i++) {
        if (strcmp(name, k_kind_names[i]) == 0) {
            *kind = (sl_webhook_kind)i;
            return 0;
        }
    }
    return sl_error_set(err, SL_EINVAL,
                        "webhook kind \"%s\" is unknown (github, stripe, slack or generic)",
                        name ? name : "(null)");
}

static const algo *find_algo(const char *name)
{
    if (!name)
        return &k_algos[1];
    for (size_t i = 0; i < sizeof k_algos / sizeof k_algos[0]; i++)
        if (strcasecmp(name, k_algos[i].name) == 0)
            return &k_algos[i];
    return NULL;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static span trim(const char *p, size_t n)
{
    while (n > 0 && is_blank(*p))
        p++, n--;
    while (n > 0 && is_blank(p[n - 1]))
        n--;
    return (span){p, n};
}

/* Splits cfg->secret at commas into keys[]; returns how many, or -1 with err
 * set (the message names the position of a bad secret, never its text). */
static int split_secrets(const char *secret, span keys[SL_WEBHOOK_MAX_SECRETS], sl_error *err)
{
    if (!secret || !*secret) {
        sl_error_set(err, SL_EINVAL, "webhook config: no secret");
        return -1;
    }
    int n = 0;
    for (const char *p = secret;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        span s = trim(p, len);
        if (s.n == 0) {
            sl_error_set(err, SL_EINVAL, "webhook config: secret %d of the list is empty", n + 1);
            return -1;
        }
        if (n == SL_WEBHOOK_MAX_SECRETS) {
            sl_error_set(err, SL_EINVAL, "webhook config: more than %d secrets",
                         SL_WEBHOOK_MAX_SECRETS);
            return -1;
        }
        keys[n++] = s;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

int sl_webhook_config_check(const sl_webhook_config *cfg, sl_error *err)
{
    span keys[SL_WEBHOOK_MAX_SECRETS];
    if (!cfg)
        return sl_error_set(err, SL_EINVAL, "webhook config: none given");
    if ((unsigned)cfg->kind > SL_WEBHOOK_GENERIC)
        return sl_error_set(err, SL_EINVAL, "webhook config: unknown kind %d", (int)cfg->kind);
    if (split_secrets(cfg->secret, keys, err) < 0)
        return SL_EINVAL;
    if (cfg->tolerance_ms < 0)
        return sl_error_set(err, SL_EINVAL, "webhook config: tolerance is negative");
    if (cfg->kind == SL_WEBHOOK_GENERIC) {
        if (!cfg->header || !*cfg->header)
            return sl_error_set(err, SL_EINVAL, "webhook config: generic needs a header name");
        if (!find_algo(cfg->algorithm))
            return sl_error_set(err, SL_EINVAL,
                                "webhook config: algorithm \"%s\" is unknown (sha1, sha256 or "
                                "sha512)",
                                cfg->algorithm);
        if (cfg->timestamp_header && !*cfg->timestamp_header)
            return sl_error_set(err, SL_EINVAL, "webhook config: empty timestamp header name");
    }
    return 0;
}

/* ---- decoding ------------------------------------------------------------ */

static int hex_val(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20; /* ASCII lower case; leaves no non-letter in a..f */
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes hex s[0..n) into exactly want bytes of out. */
static int decode_hex(const char *header, const char *s, size_t n, size_t want, sig *out,
                      sl_error *err)
{
    if (n == 0)
        return sl_error_set(err, SL_EINVAL, "%s: the signature is empty", header);
    if (n % 2)
        return sl_error_set(err, SL_EINVAL,
                            "%s: the signature has an odd number (%zu) of hex digits", header, n);
    if (n != 2 * want)
        return sl_error_set(err, SL_EINVAL, "%s: the signature has %zu hex digits, expected %zu",
                            header, n, 2 * want);
    for (size_t i = 0; i < n; i += 2) {
        int hi = hex_val((unsigned char)s[i]), lo = hex_val((unsigned char)s[i + 1]);
        if (hi < 0 || lo < 0)
            return sl_error_set(err, SL_EINVAL,
                                "%s: the signature has a non-hex character at position %zu", header,
                                i + (hi < 0 ? 0 : 1) + 1);
        out->b[i / 2] = (unsigned char)(hi << 4 | lo);
    }
    out->n = want;
    return 0;
}

/* Decodes base64 s[0..n) (standard alphabet, '=' padding optional) into
 * exactly want bytes of out. */
static int decode_b64(const char *header, const char *s, size_t n, size_t want, sig *out,
                      sl_error *err)
{
    if (n == 0)
        return sl_error_set(err, SL_EINVAL, "%s: the signature is empty", header);
    size_t bytes, o, bad;
    if (sl_base64_decoded_len(s, n, &bytes))
        return sl_error_set(err, SL_EINVAL, "%s: the signature is not valid base64 (length)",
                            header);
    if (bytes != want)
        return sl_error_set(err, SL_EINVAL, "%s: the signature decodes to %zu bytes, expected %zu",
                            header, bytes, want);
    if (sl_base64_decode(s, n, 0, out->b, &o, &bad))
        return sl_error_set(err, SL_EINVAL,
                            "%s: the signature has a non-base64 character at position %zu",
                            header, bad + 1);
    out->n = o;
    return 0;
}

/* Checks that s is a Unix time in seconds (digits only). */
static int check_ts(const char *header, span s, sl_error *err)
{
    if (s.n == 0)
        return sl_error_set(err, SL_EINVAL, "%s: the timestamp is empty", header);
    if (s.n > TS_DIGITS_MAX)
        return sl_error_set(err, SL_EINVAL, "%s: the timestamp has more than %d digits", header,
                            TS_DIGITS_MAX);
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] < '0' || s.p[i] > '9')
            return sl_error_set(err, SL_EINVAL,
                                "%s: the timestamp is not a Unix time in seconds (character %zu)",
                                header, i + 1);
    return 0;
}

/* Refuses a timestamp further than tolerance_ms from now_ms. */
static int check_window(const parsed *r, int64_t tolerance_ms, int64_t now_ms, sl_error *err)
{
    int64_t secs = 0;
    for (size_t i = 0; i < r->ts.n; i++)
        secs = secs * 10 + (r->ts.p[i] - '0');
    int64_t diff;
    if (__builtin_sub_overflow(now_ms, secs * 1000, &diff))
        diff = now_ms > 0 ? INT64_MAX : INT64_MIN;
    if (diff <= tolerance_ms && diff >= -tolerance_ms)
        return 0;
    uint64_t far = diff < 0 ? (uint64_t)0 - (uint64_t)diff : (uint64_t)diff;
    return sl_error_set(err, SL_EINVAL,
                        "%s: timestamp %.*s is %" PRIu64 ".%03" PRIu64
                        " s in the %s, outside the %" PRId64 ".%03" PRId64 " s tolerance",
                        r->ts_header, (int)r->ts.n, r->ts.p, far / 1000, far % 1000,
                        diff < 0 ? "future" : "past", tolerance_ms / 1000, tolerance_ms % 1000);
}

/* ---- the schemes --------------------------------------------------------- */

static const char *need(sl_webhook_header_fn *get, void *ctx, const char *name, sl_error *err)
{
    const char *v = get(ctx, name);
    if (!v)
        sl_error_set(err, SL_EINVAL, "missing header %s", name);
    return v;
}

/* need() for the request being parsed: notes a missing header in r. */
static const char *need_r(parsed *r, sl_webhook_header_fn *get, void *ctx, const char *name,
                          sl_error *err)
{
    const char *v = need(get, ctx, name, err);
    if (!v)
        r->missing = true;
    return v;
}

/* "PREFIX<hex>" with one signature (GitHub, Slack). */
static int parse_prefixed_hex(parsed *r, const char *v, const char *prefix, sl_error *err)
{
    size_t pn = strlen(prefix);
    if (strncmp(v, prefix, pn) != 0)
        return sl_error_set(err, SL_EINVAL, "%s: the value does not start with \"%s\"", r->header,
                            prefix);
    r->nsig = 1;
    return decode_hex(r->header, v + pn, strlen(v + pn), 32, &r->sigs[0], err);
}

/* Stripe: "t=T,v1=HEX,v1=HEX,v0=…"; other schemes are ignored. */
static int parse_stripe(parsed *r, const char *v, sl_error *err)
{
    bool have_t = false;
    if (!*v)
        return sl_error_set(err, SL_EINVAL, "%s: the value is empty", r->header);
    for (size_t item = 1;; item++) {
        const char *comma = strchr(v, ',');
        span e = trim(v, comma ? (size_t)(comma - v) : strlen(v));
        const char *eq = memchr(e.p, '=', e.n);
        if (!eq)
            return sl_error_set(err, SL_EINVAL, "%s: element %zu is not key=value", r->header,
                                item);
        size_t kn = (size_t)(eq - e.p);
        span val = {eq + 1, e.n - kn - 1};
        if (kn == 1 && e.p[0] == 't') {
            if (have_t)
                return sl_error_set(err, SL_EINVAL, "%s: more than one t=", r->header);
            int rc = check_ts(r->header, val, err);
            if (rc)
                return rc;
            have_t = true;
            r->ts = val;
        } else if (kn == 2 && e.p[0] == 'v' && e.p[1] == '1') {
            if (r->nsig == SL_WEBHOOK_MAX_SIGS)
                return sl_error_set(err, SL_EINVAL, "%s: more than %d v1= signatures", r->header,
                                    SL_WEBHOOK_MAX_SIGS);
            int rc = decode_hex(r->header, val.p, val.n, 32, &r->sigs[r->nsig], err);
            if (rc)
                return rc;
            r->nsig++;
        }
        if (!comma)
            break;
        v = comma + 1;
    }
    if (!have_t)
        return sl_error_set(err, SL_EINVAL, "%s: no t= timestamp", r->header);
    if (r->nsig == 0)
        return sl_error_set(err, SL_EINVAL, "%s: no v1= signature", r->header);
    r->ts_header = r->header;
    r->parts[r->nparts++] = r->ts;
    r->parts[r->nparts++] = (span){".", 1};
    return 0;
}

static int parse_request(const sl_webhook_config *cfg, const algo *al, sl_webhook_header_fn *get,
                         void *ctx, parsed *r, sl_error *err)
{
    const char *v, *ts;
    int rc;
    switch (cfg->kind) {
    case SL_WEBHOOK_GITHUB:
        r->header = "X-Hub-Signature-256";
        if (!(v = need_r(r, get, ctx, r->header, err)))
            return SL_EINVAL;
        return parse_prefixed_hex(r, v, "sha256=", err);
    case SL_WEBHOOK_STRIPE:
        r->header = "Stripe-Signature";
        if (!(v = need_r(r, get, ctx, r->header, err)))
            return SL_EINVAL;
        return parse_stripe(r, v, err);
    case SL_WEBHOOK_SLACK:
        r->header = "X-Slack-Signature";
        if (!(v = need_r(r, get, ctx, r->header, err)))
            return SL_EINVAL;
        r->ts_header = "X-Slack-Request-Timestamp";
        if (!(ts = need_r(r, get, ctx, r->ts_header, err)))
            return SL_EINVAL;
        r->ts = (span){ts, strlen(ts)};
        rc = check_ts(r->ts_header, r->ts, err);
        if (rc == 0)
            rc = parse_prefixed_hex(r, v, "v0=", err);
        r->parts[r->nparts++] = (span){"v0:", 3};
        r->parts[r->nparts++] = r->ts;
        r->parts[r->nparts++] = (span){":", 1};
        return rc;
    case SL_WEBHOOK_GENERIC:
        r->header = cfg->header;
        if (!(v = need_r(r, get, ctx, r->header, err)))
            return SL_EINVAL;
        if (cfg->timestamp_header) {
            r->ts_header = cfg->timestamp_header;
            if (!(ts = need_r(r, get, ctx, r->ts_header, err)))
                return SL_EINVAL;
            r->ts = (span){ts, strlen(ts)};
            if ((rc = check_ts(r->ts_header, r->ts, err)))
                return rc;
            r->parts[r->nparts++] = r->ts;
            r->parts[r->nparts++] = (span){".", 1};
        }
        if (cfg->prefix && *cfg->prefix) {
            size_t pn = strlen(cfg->prefix);
            if (strncmp(v, cfg->prefix, pn) != 0)
                return sl_error_set(err, SL_EINVAL, "%s: the value does not start with \"%s\"",
                                    r->header, cfg->prefix);
            v += pn;
        }
        r->nsig = 1;
        return cfg->base64 ? decode_b64(r->header, v, strlen(v), al->size, &r->sigs[0], err)
                           : decode_hex(r->header, v, strlen(v), al->size, &r->sigs[0], err);
    }
    return sl_error_set(err, SL_EINVAL, "webhook config: unknown kind %d", (int)cfg->kind);
}

/* ---- HMAC ---------------------------------------------------------------- */

static EVP_MAC *g_hmac;
static pthread_once_t g_hmac_once = PTHREAD_ONCE_INIT;

/* Fetching an algorithm takes locks and a look-up: done once per process. The
 * EVP_MAC stays referenced until exit. */
static void hmac_fetch(void)
{
    g_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

/* Sets *match when the HMAC of r's content + body under any key equals any
 * of r's signatures. Every (key, signature) pair is compared, so the time
 * taken does not depend on which one matched. */
static int hmac_match(const algo *al, const span *keys, int nkeys, const parsed *r,
                      const char *body, size_t len, bool *match, sl_error *err)
{
    pthread_once(&g_hmac_once, hmac_fetch);
    if (!g_hmac)
        return sl_error_set(err, SL_ENOMEM, "libcrypto: cannot fetch HMAC");
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(g_hmac);
    if (!c)
        return sl_error_set(err, SL_ENOMEM, "libcrypto: out of memory");
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)al->digest, 0),
        OSSL_PARAM_construct_end(),
    };
    unsigned char mac[EVP_MAX_MD_SIZE];
    int found = 0, rc = 0;
    for (int k = 0; k < nkeys && rc == 0; k++) {
        size_t mlen = 0;
        int ok = EVP_MAC_init(c, (const unsigned char *)keys[k].p, keys[k].n, params);
        for (size_t i = 0; ok && i < r->nparts; i++)
            ok = EVP_MAC_update(c, (const unsigned char *)r->parts[i].p, r->parts[i].n);
        if (ok && len > 0)
            ok = EVP_MAC_update(c, (const unsigned char *)body, len);
        if (ok)
            ok = EVP_MAC_final(c, mac, &mlen, sizeof mac);
        if (!ok || mlen != al->size) {
            rc = sl_error_set(err, SL_ENOMEM, "libcrypto: HMAC-%s failed", al->name);
            break;
        }
        for (size_t s = 0; s < r->nsig; s++)
            found |= r->sigs[s].n == mlen && CRYPTO_memcmp(mac, r->sigs[s].b, mlen) == 0;
    }
    OPENSSL_cleanse(mac, sizeof mac);
    EVP_MAC_CTX_free(c);
    *match = found != 0;
    return rc;
}

static const char *const k_refusal_names[] = {
#define XX(code, name) [SL_WEBHOOK_REFUSED_##code] = name,
    SL_WEBHOOK_REFUSAL_MAP(XX)
#undef XX
};

const char *sl_webhook_refusal_name(sl_webhook_refusal why)
{
    if ((unsigned)why >= SL_WEBHOOK_REFUSAL_COUNT)
        return "?";
    return k_refusal_names[why];
}

int sl_webhook_verify(const sl_webhook_config *cfg, sl_webhook_header_fn *get, void *ctx,
                      const char *body, size_t len, int64_t now_ms, sl_error *err)
{
    return sl_webhook_verify_why(cfg, get, ctx, body, len, now_ms, NULL, err);
}

int sl_webhook_verify_why(const sl_webhook_config *cfg, sl_webhook_header_fn *get, void *ctx,
                          const char *body, size_t len, int64_t now_ms, sl_webhook_refusal *why,
                          sl_error *err)
{
    sl_webhook_refusal dummy;
    if (!why)
        why = &dummy;
    *why = SL_WEBHOOK_REFUSED_ERROR;
    span keys[SL_WEBHOOK_MAX_SECRETS];
    int rc = sl_webhook_config_check(cfg, err);
    if (rc)
        return rc;
    if (!get || (!body && len > 0))
        return sl_error_set(err, SL_EINVAL, "webhook verify: no header look-up or no body");
    int nkeys = split_secrets(cfg->secret, keys, err);
    const algo *al = cfg->kind == SL_WEBHOOK_GENERIC ? find_algo(cfg->algorithm) : &k_algos[1];

    parsed r = {0};
    if ((rc = parse_request(cfg, al, get, ctx, &r, err))) {
        *why = r.missing ? SL_WEBHOOK_REFUSED_MISSING_HEADER : SL_WEBHOOK_REFUSED_MALFORMED_HEADER;
        return rc;
    }
    if (r.ts_header) {
        int64_t tol = cfg->tolerance_ms ? cfg->tolerance_ms : SL_WEBHOOK_TOLERANCE_MS;
        if ((rc = check_window(&r, tol, now_ms, err))) {
            *why = SL_WEBHOOK_REFUSED_STALE_TIMESTAMP;
            return rc;
        }
    }
    bool match = false;
    if ((rc = hmac_match(al, keys, nkeys, &r, body, len, &match, err)))
        return rc;
    *why = match ? SL_WEBHOOK_REFUSED_NONE : SL_WEBHOOK_REFUSED_NO_MATCH;
    if (!match)
        return sl_error_set(err, SL_EINVAL,
                            "%s: no signature matches (%zu signature%s checked against %d "
                            "secret%s)",
                            r.header, r.nsig, r.nsig == 1 ? "" : "s", nkeys, nkeys == 1 ? "" : "s");
    return 0;
}

/* ---- replay dedupe ------------------------------------------------------- */

#define NIL UINT32_MAX

/* Entry states: remembered, claimed by a request that is storing its event,
 * or forgotten (a failed store; the slot stays in the ring until it is the
 * oldest, and a new claim of the id revives it). */
enum { DD_SEEN, DD_PENDING, DD_DEAD };

typedef struct dd_entry {
    unsigned char key[32]; /* SHA-256 of the id */
    int64_t t;             /* first seen (claimed) */
    uint32_t next;         /* next slot in the same bucket, NIL at the end */
    uint8_t state;         /* DD_… */
} dd_entry;

/* The entries live in a ring in insertion order (oldest at head); a chained
 * hash index over the ring's slots finds an id. */
struct sl_webhook_dedupe {
    pthread_mutex_t mu;
    int64_t window;
    size_t cap, head, count;
    size_t dead; /* entries in state DD_DEAD */
    size_t mask; /* buckets - 1 */
    uint32_t *buckets;
    dd_entry *ring;
};

sl_webhook_dedupe *sl_webhook_dedupe_new(size_t cap, int64_t window_ms)
{
    if (cap == 0 || cap > (1u << 30) || window_ms <= 0)
        return NULL;
    sl_webhook_dedupe *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    size_t nb = 16;
    while (nb < 2 * cap)
        nb *= 2;
    d->buckets = malloc(nb * sizeof *d->buckets);
    d->ring = calloc(cap, sizeof *d->ring);
    if (!d->buckets || !d->ring || pthread_mutex_init(&d->mu, NULL) != 0)
        goto fail;
    for (size_t i = 0; i < nb; i++)
        d->buckets[i] = NIL;
    d->mask = nb - 1;
    d->cap = cap;
    d->window = window_ms;
    return d;
fail:
    free(d->buckets);
    free(d->ring);
    free(d);
    return NULL;
}

static size_t bucket_of(const sl_webhook_dedupe *d, const unsigned char *key)
{
    uint64_t h;
    memcpy(&h, key, sizeof h);
    return (size_t)(h & d->mask);
}

static bool expired(const sl_webhook_dedupe *d, int64_t t, int64_t now)
{
    int64_t age;
    if (__builtin_sub_overflow(now, t, &age))
        return now > t;
    return age >= d->window;
}

static void drop_oldest(sl_webhook_dedupe *d)
{
    uint32_t slot = (uint32_t)d->head;
    uint32_t *link = &d->buckets[bucket_of(d, d->ring[slot].key)];
    while (*link != slot)
        link = &d->ring[*link].next;
    *link = d->ring[slot].next;
    if (d->ring[slot].state == DD_DEAD)
        d->dead--;
    d->head = (d->head + 1) % d->cap;
    d->count--;
}

/* Hashes id into key; false when libcrypto cannot. */
static bool dd_key(const char *id, size_t len, unsigned char key[32])
{
    unsigned int kn = 0;
    return EVP_Digest(id, len, key, &kn, EVP_sha256(), NULL) && kn == 32;
}

/* The slot holding key, or NIL. Call with d->mu held. */
static uint32_t dd_find(const sl_webhook_dedupe *d, const unsigned char *key)
{
    for (uint32_t s = d->buckets[bucket_of(d, key)]; s != NIL; s = d->ring[s].next)
        if (memcmp(d->ring[s].key, key, 32) == 0)
            return s;
    return NIL;
}

/* Adds key with time now and state, dropping the oldest entry when full.
 * Call with d->mu held, after checking that key is not there. */
static void dd_insert(sl_webhook_dedupe *d, const unsigned char *key, int64_t now, uint8_t state)
{
    if (d->count == d->cap)
        drop_oldest(d);
    size_t b = bucket_of(d, key);
    uint32_t slot = (uint32_t)((d->head + d->count) % d->cap);
    memcpy(d->ring[slot].key, key, 32);
    d->ring[slot].t = now;
    d->ring[slot].state = state;
    d->ring[slot].next = d->buckets[b];
    d->buckets[b] = slot;
    d->count++;
}

/* Gives entry s a fresh start at now in state (an expired or forgotten id
 * seen again). Call with d->mu held. */
static void dd_restart(sl_webhook_dedupe *d, uint32_t s, int64_t now, uint8_t state)
{
    if (d->ring[s].state == DD_DEAD)
        d->dead--;
    d->ring[s].t = now;
    d->ring[s].state = state;
}

static void dd_expire(sl_webhook_dedupe *d, int64_t now)
{
    while (d->count > 0 && expired(d, d->ring[d->head].t, now))
        drop_oldest(d);
}

bool sl_webhook_dedupe_check(sl_webhook_dedupe *d, const char *id, size_t len, int64_t now_ms)
{
    unsigned char key[32];
    if (!dd_key(id, len, key))
        return false;
    bool seen = false;
    pthread_mutex_lock(&d->mu);
    dd_expire(d, now_ms);
    uint32_t s = dd_find(d, key);
    if (s == NIL)
        dd_insert(d, key, now_ms, DD_SEEN);
    /* Only when now_ms went backwards can a later entry have expired while
     * the head has not: treat it as new from now on, like a forgotten one. */
    else if (d->ring[s].state == DD_DEAD || expired(d, d->ring[s].t, now_ms))
        dd_restart(d, s, now_ms, DD_SEEN);
    else
        seen = true;
    pthread_mutex_unlock(&d->mu);
    return seen;
}

sl_webhook_claim sl_webhook_dedupe_claim(sl_webhook_dedupe *d, const char *id, size_t len,
                                         int64_t now_ms)
{
    unsigned char key[32];
    if (!dd_key(id, len, key))
        return SL_WEBHOOK_CLAIM_NEW;
    sl_webhook_claim c = SL_WEBHOOK_CLAIM_NEW;
    pthread_mutex_lock(&d->mu);
    dd_expire(d, now_ms);
    uint32_t s = dd_find(d, key);
    if (s == NIL) {
        dd_insert(d, key, now_ms, DD_PENDING);
    } else if (d->ring[s].state == DD_DEAD || expired(d, d->ring[s].t, now_ms)) {
        dd_restart(d, s, now_ms, DD_PENDING);
    } else if (d->ring[s].state == DD_SEEN) {
        c = SL_WEBHOOK_CLAIM_SEEN;
    } else if (now_ms - d->ring[s].t < SL_WEBHOOK_CLAIM_MS) {
        c = SL_WEBHOOK_CLAIM_PENDING;
    } else {
        /* A claim nobody settled: take it over. The time stays, so that the
         * ring keeps its order. */
    }
    pthread_mutex_unlock(&d->mu);
    return c;
}

void sl_webhook_dedupe_settle(sl_webhook_dedupe *d, const char *id, size_t len, int64_t now_ms,
                              bool stored)
{
    unsigned char key[32];
    if (!dd_key(id, len, key))
        return;
    pthread_mutex_lock(&d->mu);
    dd_expire(d, now_ms);
    uint32_t s = dd_find(d, key);
    if (s == NIL) {
        if (stored) /* the cache dropped the claim meanwhile */
            dd_insert(d, key, now_ms, DD_SEEN);
    } else if (stored) {
        if (d->ring[s].state == DD_DEAD)
            dd_restart(d, s, now_ms, DD_SEEN);
        else
            d->ring[s].state = DD_SEEN;
    } else if (d->ring[s].state == DD_PENDING) { /* never undoes another request's store */
        d->ring[s].state = DD_DEAD;
        d->dead++;
    }
    pthread_mutex_unlock(&d->mu);
}

size_t sl_webhook_dedupe_count(sl_webhook_dedupe *d)
{
    pthread_mutex_lock(&d->mu);
    size_t n = d->count - d->dead;
    pthread_mutex_unlock(&d->mu);
    return n;
}

void sl_webhook_dedupe_free(sl_webhook_dedupe *d)
{
    if (!d)
        return;
    pthread_mutex_destroy(&d->mu);
    free(d->buckets);
    free(d->ring);
    free(d);
}

/* ---- mappings ------------------------------------------------------------ */

int sl_webhook_github_meta(sl_webhook_header_fn *get, void *ctx, char *type, size_t cap,
                           const char **id, sl_error *err)
{
    const char *ev = need(get, ctx, "X-GitHub-Event", err);
    if (!ev)
        return SL_EINVAL;
    size_t n = strlen(ev);
    if (n == 0 || n > SL_WEBHOOK_EVENT_MAX)
        return sl_error_set(err, SL_EINVAL, "X-GitHub-Event: %s", n ? "too long" : "empty");
    for (size_t i = 0; i < n; i++) {
        char c = ev[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return sl_error_set(err, SL_EINVAL, "X-GitHub-Event: unexpected character at %zu",
                                i + 1);
    }
    const char *dv = need(get, ctx, "X-GitHub-Delivery", err);
    if (!dv)
        return SL_EINVAL;
    size_t dn = strlen(dv);
    if (dn == 0 || dn > SL_WEBHOOK_ID_MAX)
        return sl_error_set(err, SL_EINVAL, "X-GitHub-Delivery: %s", dn ? "too long" : "empty");
    for (size_t i = 0; i < dn; i++)
        if (dv[i] <= ' ' || dv[i] > '~')
            return sl_error_set(err, SL_EINVAL, "X-GitHub-Delivery: unexpected character at %zu",
                                i + 1);
    static const char pre[] = "com.github.";
    if (cap < sizeof pre + n)
        return sl_error_set(err, SL_ETOOBIG, "event type needs %zu bytes, have %zu", sizeof pre + n,
                            cap);
    memcpy(type, pre, sizeof pre - 1);
    memcpy(type + sizeof pre - 1, ev, n + 1);
    *id = dv;
    return 0;
}

/* Whether JSON string token t decodes to exactly lit (shorter than 32). */
static bool tok_is(const sl_json_tok *t, const char *lit)
{
    char buf[32];
    size_t n = 0;
    if (t->type != SL_JSON_STRING || sl_json_unescape(t, buf, sizeof buf, &n) != 0)
        return false;
    return n == strlen(lit) && memcmp(buf, lit, n) == 0;
}

int sl_webhook_slack_challenge(const char *body, size_t len, char *out, size_t cap, size_t *out_len,
                               sl_error *err)
{
    sl_json_tok root, key, val, type = {0}, chal = {0};
    if (!body || sl_json_validate(body, len, 64, &root, NULL) != 0 || root.type != SL_JSON_OBJECT)
        return sl_error_set(err, SL_ENOENT, "not a url_verification request: not a JSON object");
    sl_json_iter it;
    sl_json_iter_init(&it, &root);
    while (sl_json_iter_member(&it, &key, &val)) {
        if (type.type == SL_JSON_NONE && tok_is(&key, "type"))
            type = val;
        else if (chal.type == SL_JSON_NONE && tok_is(&key, "challenge"))
            chal = val;
    }
    if (!tok_is(&type, "url_verification"))
        return sl_error_set(err, SL_ENOENT, "not a url_verification request");
    if (chal.type != SL_JSON_STRING)
        return sl_error_set(err, SL_EINVAL, "url_verification without a string \"challenge\"");
    if (cap == 0 || sl_json_unescape(&chal, out, cap - 1, out_len) != 0)
        return sl_error_set(err, SL_ETOOBIG, "url_verification challenge longer than %zu bytes",
                            cap ? cap - 1 : 0);
    out[*out_len] = '\0';
    return 0;
}
