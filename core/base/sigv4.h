/*
 * core/base/sigv4.h — AWS Signature Version 4 (HMAC-SHA256), both ways:
 * signing a request (target.s3 and other AWS clients) and verifying a
 * signed one (the EventBridge API), with one canonicalisation for both
 * (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html).
 *
 *   canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED \n PAYLOAD-HASH
 *   string to sign    = AWS4-HMAC-SHA256 \n X-AMZ-DATE \n SCOPE \n hex(sha256(canonical))
 *   key               = HMAC chain of "AWS4"+secret, date, region, service, "aws4_request"
 *   signature         = hex(HMAC(key, string to sign))
 *
 * URI: the path as sent, each segment percent-decoded and encoded again
 * with RFC 3986's unreserved set (S3 signs the path once, every other
 * service the encoded path encoded again: `double_encode`); QUERY: the
 * parameters sorted by encoded name then value, each encoded; HEADERS: the
 * signed ones, names lower-cased, values trimmed with inner runs of blanks
 * made one space, sorted by name, repeated ones joined with ','.
 * Nothing here allocates on the heap except the canonical request's buffer.
 */
#ifndef SL_SIGV4_H
#define SL_SIGV4_H

#include "core/base/buf.h"
#include "core/base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_SIGV4_SIG_HEX 64      /* a signature: hex of 32 bytes */
#define SL_SIGV4_MAX_SKEW_S 900  /* X-Amz-Date at most 15 minutes off */
#define SL_SIGV4_MAX_HEADERS 64

typedef struct sl_sigv4_header {
    const char *name, *value; /* value: as received (trimmed here) */
    size_t name_len, value_len;
} sl_sigv4_header;

/* One request as it went (or goes) over the wire. */
typedef struct sl_sigv4_req {
    const char *method;
    const char *path;  /* as sent, without the query: "/", "/a%20b" */
    const char *query; /* after '?', as sent; NULL or "" for none */
    const sl_sigv4_header *headers;
    size_t nheaders;
    const void *body;
    size_t body_len;
    bool double_encode; /* every service but S3 */
} sl_sigv4_req;

/* The canonical request of r signing the headers named in signed_headers
 * (";"-separated lower-case names, sorted), with payload_hash (hex) as its
 * last line, appended to out. Returns 0, SL_EINVAL (a signed header r lacks,
 * or a bad percent-escape in the path) with err, or SL_ENOMEM. */
int sl_sigv4_canonical(const sl_sigv4_req *r, const char *signed_headers, const char *payload_hash,
                       sl_buf *out, sl_error *err);

/* Hex SHA-256 of p[0..n) into out (65 bytes with the NUL). */
void sl_sigv4_sha256_hex(const void *p, size_t n, char out[65]);

/* The signature (hex) of canonical request text under (secret, date
 * "YYYYMMDD", region, service), for amz_date ("YYYYMMDDTHHMMSSZ"). */
void sl_sigv4_signature(const char *canonical, size_t len, const char *secret,
                        const char *amz_date, const char *region, const char *service,
                        char out[SL_SIGV4_SIG_HEX + 1]);

/* Signs r: every header of r is signed (it must have host and
 * x-amz-date; x-amz-content-sha256 too for S3), and the Authorization value
 * "AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…" goes to out.
 * payload_hash: NULL hashes the body. Returns 0 or an SL_E… code with err. */
int sl_sigv4_authorization(const sl_sigv4_req *r, const char *akid, const char *secret,
                           const char *region, const char *service, const char *payload_hash,
                           sl_buf *out, sl_error *err);

/* A parsed Authorization header. Fields point into it (not NUL-terminated). */
typedef struct sl_sigv4_auth {
    const char *akid, *date, *region, *service, *signed_headers, *signature;
    size_t akid_len, date_len, region_len, service_len, signed_headers_len, signature_len;
} sl_sigv4_auth;

/* Parses "AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request,
 * SignedHeaders=a;b, Signature=HEX" (any order, blanks after commas).
 * Returns 0, or SL_EINVAL with err saying what is missing or wrong. */
int sl_sigv4_parse_auth(const char *v, size_t len, sl_sigv4_auth *out, sl_error *err);

/* Why a verification failed, as AWS names the error. */
typedef enum sl_sigv4_fail {
    SL_SIGV4_OK = 0,
    SL_SIGV4_INCOMPLETE,    /* IncompleteSignatureException: no or bad Authorization/X-Amz-Date */
    SL_SIGV4_UNKNOWN_KEY,   /* UnrecognizedClientException: the key id is not known */
    SL_SIGV4_BAD_SIGNATURE, /* InvalidSignatureException: mismatch, skew, scope, payload hash */
    SL_SIGV4_TOKEN,         /* a session token (X-Amz-Security-Token): not supported */
} sl_sigv4_fail;

/* Looks up the secret of akid[0..len): the secret, or NULL when unknown. */
typedef const char *sl_sigv4_secret_fn(void *ctx, const char *akid, size_t len);

/* Verifies a signed request r against region and service at now_s (Unix
 * seconds): the Authorization header parses, its scope is (X-Amz-Date's
 * date, region, service, aws4_request), X-Amz-Date is within 15 minutes,
 * host and x-amz-date are signed, an x-amz-content-sha256 header matches
 * the body, the key is known, and the signature matches (constant-time).
 * Returns SL_SIGV4_OK (with *akid_out and *akid_len the key id, pointing into
 * r's header) or the failure with err saying why, in AWS's words. */
sl_sigv4_fail sl_sigv4_verify(const sl_sigv4_req *r, const char *region, const char *service,
                              int64_t now_s, sl_sigv4_secret_fn *secret, void *ctx,
                              const char **akid_out, size_t *akid_len, sl_error *err);

/* "YYYYMMDDTHHMMSSZ" of Unix seconds t (17 bytes with the NUL), and back
 * (-1 for a malformed one). */
void sl_sigv4_amz_date(int64_t t, char out[17]);
int64_t sl_sigv4_parse_amz_date(const char *s, size_t len);

#endif
