/*
 * connectors/webhook_verify.h — the verification core of source.webhook:
 * signature checks for SaaS webhooks (GitHub, Stripe, Slack and a generic
 * configurable HMAC scheme), a replay-dedupe cache for delivery ids, and the
 * small header and body mappings the connector needs (GitHub event → type,
 * Slack's url_verification challenge).
 *
 * Nothing here does I/O or runs a server: the connector passes the request's
 * headers through a look-up callback, the raw body, and the current time.
 * HMACs come from OpenSSL's libcrypto; signatures are decoded first and then
 * compared with CRYPTO_memcmp() on equal lengths, so the comparison is
 * constant-time over the bytes and case-insensitive for hex digits.
 *
 * The schemes (as their senders document them):
 *
 * | kind    | signature header                  | signed content                 | window |
 * |---------|-----------------------------------|--------------------------------|--------|
 * | github  | X-Hub-Signature-256: sha256=HEX   | body                           | none   |
 * | stripe  | Stripe-Signature: t=T,v1=HEX,…    | T "." body                     | 300 s  |
 * | slack   | X-Slack-Signature: v0=HEX         | "v0:" TS ":" body              | 300 s  |
 * |         |   (TS from X-Slack-Request-Timestamp)                              |        |
 * | generic | cfg->header: [prefix]HEX|BASE64   | body, or TS "." body with a    | 300 s  |
 * |         |                                   |   timestamp header             |        |
 *
 * All HMACs are HMAC-SHA256 except generic, whose algorithm is configured.
 * Timestamps are Unix times in seconds, signed exactly as the sender wrote
 * them. Error messages never contain a secret or an expected signature.
 */
#ifndef SL_WEBHOOK_VERIFY_H
#define SL_WEBHOOK_VERIFY_H

#include "core/base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The verification schemes. */
typedef enum sl_webhook_kind {
    SL_WEBHOOK_GITHUB,  /* X-Hub-Signature-256 */
    SL_WEBHOOK_STRIPE,  /* Stripe-Signature, several v1 signatures */
    SL_WEBHOOK_SLACK,   /* X-Slack-Signature + X-Slack-Request-Timestamp */
    SL_WEBHOOK_GENERIC, /* as configured below */
} sl_webhook_kind;

/* Default tolerance between the sender's timestamp and now (5 minutes). */
#define SL_WEBHOOK_TOLERANCE_MS 300000

/* At most this many signatures in one header are looked at (Stripe sends one
 * v1 per active secret); a header with more is refused as malformed. */
#define SL_WEBHOOK_MAX_SIGS 8

/* At most this many comma-separated secrets in sl_webhook_config.secret. */
#define SL_WEBHOOK_MAX_SECRETS 8

/* What to verify. Strings are borrowed: they must outlive every call that
 * uses the config. */
typedef struct sl_webhook_config {
    sl_webhook_kind kind;
    /* One secret, or several separated by commas for rotation (any may
     * match); ASCII spaces and tabs around each are ignored, and an empty
     * one is a configuration error. A secret cannot contain a comma. */
    const char *secret;
    /* generic only: the signature header's name (required). */
    const char *header;
    /* generic only: "sha1", "sha256" (NULL means this) or "sha512", in any
     * case. */
    const char *algorithm;
    /* generic only: the signature is base64 (RFC 4648, standard alphabet,
     * padding optional) instead of hex. */
    bool base64;
    /* generic only: text the header value must start with, stripped before
     * decoding (e.g. "sha256="); NULL or "" for none. */
    const char *prefix;
    /* generic only: a header holding the Unix time in seconds; when set the
     * signed content is TIMESTAMP "." body and the window applies. */
    const char *timestamp_header;
    /* Allowed |now - timestamp| for stripe, slack and generic with a
     * timestamp header; 0 means SL_WEBHOOK_TOLERANCE_MS; negative is a
     * configuration error. */
    int64_t tolerance_ms;
} sl_webhook_config;

/* Returns the value of request header name (looked up case-insensitively,
 * NUL-terminated), or NULL when the request has none. The value must stay
 * valid until the sl_webhook_ call that asked returns. */
typedef const char *sl_webhook_header_fn(void *ctx, const char *name);

/* Name of kind ("github", "stripe", "slack", "generic"); "?" otherwise. */
const char *sl_webhook_kind_name(sl_webhook_kind kind);

/* The kind called name (exact, lowercase). Returns 0 with *kind set, or
 * SL_EINVAL with err listing the known names (*kind untouched). */
int sl_webhook_kind_parse(const char *name, sl_webhook_kind *kind, sl_error *err);

/* Checks cfg without a request: kind known, secrets present and non-empty
 * (at most SL_WEBHOOK_MAX_SECRETS), tolerance not negative, and for generic a
 * header and a known algorithm. Returns 0, or SL_EINVAL with err saying what
 * is wrong (never quoting a secret). For config-time checks; sl_webhook_verify()
 * runs it too. */
int sl_webhook_config_check(const sl_webhook_config *cfg, sl_error *err);

/* Verifies one request: its headers (through get(ctx, name)), the raw body
 * body[0..len) exactly as received (body may be NULL when len is 0), and the
 * current time now_ms (Unix milliseconds).
 *
 * Returns 0 when a signature in the request matches the HMAC of the signed
 * content under one of the secrets and, where the scheme has a timestamp,
 * that timestamp is within the tolerance of now_ms. Otherwise returns
 * SL_EINVAL with err saying which: an invalid config, a missing header, a
 * malformed header (prefix, length, characters, t= missing, …), a timestamp
 * outside the window (saying by how many seconds, in which direction), or no
 * signature matching; SL_ENOMEM when libcrypto cannot allocate. Nothing is
 * kept between calls; safe to call from any number of threads. */
int sl_webhook_verify(const sl_webhook_config *cfg, sl_webhook_header_fn *get, void *ctx,
                      const char *body, size_t len, int64_t now_ms, sl_error *err);

/* Why sl_webhook_verify_why() refused a request (one table drives the enum
 * and sl_webhook_refusal_name(), whose names are metric labels). */
#define SL_WEBHOOK_REFUSAL_MAP(XX)                                                                 \
    XX(NONE, "none")                         /* verified */                                        \
    XX(MISSING_HEADER, "missing_header")     /* a signature or timestamp header is absent */       \
    XX(MALFORMED_HEADER, "malformed_header") /* present but unparseable */                         \
    XX(STALE_TIMESTAMP, "stale_timestamp")   /* outside the tolerance window */                    \
    XX(NO_MATCH, "no_match")                 /* wrong secret, tampered body */                     \
    XX(ERROR, "error")                       /* invalid config, out of memory */

typedef enum sl_webhook_refusal {
#define XX(code, _) SL_WEBHOOK_REFUSED_##code,
    SL_WEBHOOK_REFUSAL_MAP(XX)
#undef XX
        SL_WEBHOOK_REFUSAL_COUNT
} sl_webhook_refusal;

/* The label of why ("missing_header", …); "?" for other values. */
const char *sl_webhook_refusal_name(sl_webhook_refusal why);

/* sl_webhook_verify(), also saying why it refused: *why (may be NULL) is
 * SL_WEBHOOK_REFUSED_NONE when it returns 0, else the reason (ERROR for an
 * invalid config or SL_ENOMEM). */
int sl_webhook_verify_why(const sl_webhook_config *cfg, sl_webhook_header_fn *get, void *ctx,
                          const char *body, size_t len, int64_t now_ms, sl_webhook_refusal *why,
                          sl_error *err);

/* ---- replay dedupe ------------------------------------------------------- */

/* A fixed-capacity, thread-safe set of recently seen delivery ids. Ids are
 * kept as their SHA-256 (any length, any bytes), each with the time it was
 * first seen. Only verified requests should reach it: its hash buckets are not
 * keyed, so whoever can add ids could crowd one bucket. */
typedef struct sl_webhook_dedupe sl_webhook_dedupe;

/* A cache for cap ids (cap >= 1) that remembers each for window_ms (> 0).
 * Returns NULL when out of memory or when an argument is out of range. The
 * caller frees it with sl_webhook_dedupe_free(). */
sl_webhook_dedupe *sl_webhook_dedupe_new(size_t cap, int64_t window_ms);

/* Whether id[0..len) was already seen less than window_ms before now_ms.
 * Entries older than the window are dropped first; an unseen id is then
 * remembered with time now_ms, dropping the oldest entry when the cache is
 * full (so under a flood of new ids a replay older than the last cap ids is
 * not recognised). A repeat does not refresh the first-seen time. Returns
 * false (and remembers nothing) when libcrypto cannot hash the id. Expiry
 * follows insertion order, which matches time order when now_ms never goes
 * backwards. */
bool sl_webhook_dedupe_check(sl_webhook_dedupe *d, const char *id, size_t len, int64_t now_ms);

/* Two-step dedupe for a connector that must remember an id only once the
 * event it names is stored: sl_webhook_dedupe_claim() when the request
 * arrives, sl_webhook_dedupe_settle() when the store succeeded or failed. A
 * claim older than SL_WEBHOOK_CLAIM_MS is taken over by the next claim (its
 * publish never settled). */
#define SL_WEBHOOK_CLAIM_MS 60000

typedef enum sl_webhook_claim {
    SL_WEBHOOK_CLAIM_NEW,     /* not seen in the window: claimed, store it, then settle */
    SL_WEBHOOK_CLAIM_SEEN,    /* stored already within the window: a replay */
    SL_WEBHOOK_CLAIM_PENDING, /* another request is storing it right now */
} sl_webhook_claim;

/* Claims id[0..len) at now_ms (dropping expired entries first, and the
 * oldest entry when the cache is full). Returns NEW (the id is now pending;
 * the caller must settle it), SEEN or PENDING (nothing changed). Returns NEW
 * without claiming anything when libcrypto cannot hash the id (settling it
 * is then harmless). sl_webhook_dedupe_check() counts a pending id as seen. */
sl_webhook_claim sl_webhook_dedupe_claim(sl_webhook_dedupe *d, const char *id, size_t len,
                                         int64_t now_ms);

/* Ends a claim: stored, the id is remembered for the window (counted from
 * the claim; inserted anew if the cache dropped the claim meanwhile); not
 * stored, it is forgotten, so the sender's retry is new again. */
void sl_webhook_dedupe_settle(sl_webhook_dedupe *d, const char *id, size_t len, int64_t now_ms,
                              bool stored);

/* Number of ids currently remembered (for metrics and tests). */
size_t sl_webhook_dedupe_count(sl_webhook_dedupe *d);

/* Frees d; NULL is fine. No other call may be using d. */
void sl_webhook_dedupe_free(sl_webhook_dedupe *d);

/* ---- mappings -------------------------------------------------------------- */

/* Longest GitHub event name accepted by sl_webhook_github_meta(). */
#define SL_WEBHOOK_EVENT_MAX 64
/* Longest delivery id accepted by sl_webhook_github_meta(). */
#define SL_WEBHOOK_ID_MAX 128

/* GitHub's event and delivery id: writes "com.github.<X-GitHub-Event>"
 * (NUL-terminated) into type[0..cap) and points *id at the value of
 * X-GitHub-Delivery (owned by get's ctx). The event must be 1 to
 * SL_WEBHOOK_EVENT_MAX characters of [A-Za-z0-9_.-], the id 1 to
 * SL_WEBHOOK_ID_MAX printable ASCII characters without spaces. Returns 0, or
 * SL_EINVAL with err naming the missing or malformed header, or SL_ETOOBIG
 * when cap is too small; type and *id are untouched on error. */
int sl_webhook_github_meta(sl_webhook_header_fn *get, void *ctx, char *type, size_t cap,
                           const char **id, sl_error *err);

/* Slack's URL verification handshake: when body[0..len) is a JSON object
 * with "type": "url_verification", writes its "challenge" string, decoded
 * and NUL-terminated, into out[0..cap) with its length in *out_len, and
 * returns 0: the connector answers with it instead of storing an event.
 * Returns SL_ENOENT when the body is anything else (not JSON, not an object,
 * another type: an ordinary event), SL_EINVAL when it is a url_verification
 * without a string challenge, SL_ETOOBIG when the challenge does not fit in
 * cap - 1 bytes; out and *out_len are unspecified on error. Verify the
 * signature first: Slack signs the handshake too. */
int sl_webhook_slack_challenge(const char *body, size_t len, char *out, size_t cap, size_t *out_len,
                               sl_error *err);

#endif
