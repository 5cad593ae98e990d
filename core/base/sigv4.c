/*
 * core/base/sigv4.c — AWS Signature Version 4 (sigv4.h).
 */
#include "core/base/sigv4.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char HEX[] = "0123456789abcdef";

static void hex(const unsigned char *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = HEX[p[i] >> 4];
        out[2 * i + 1] = HEX[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* SHA-256 fetched once: OpenSSL 3's one-shot SHA256() and HMAC() look the
 * algorithm up (locks, reference counts) on every call, which was a tenth
 * of a signed PutEvents' CPU. Each thread keeps one digest context. */
static EVP_MD *g_sha256;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local EVP_MD_CTX *t_ctx;
static pthread_key_t g_ctx_key;

static void ctx_free(void *c)
{
    EVP_MD_CTX_free(c);
}

static void crypto_init(void)
{
    g_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    pthread_key_create(&g_ctx_key, ctx_free); /* frees a thread's context when it ends */
}

/* SHA-256 of the n parts; false when OpenSSL fails (out of memory). */
static bool sha256(const void *const *p, const size_t *len, size_t n, unsigned char out[32])
{
    pthread_once(&g_once, crypto_init);
    if (!t_ctx && (t_ctx = EVP_MD_CTX_new()))
        pthread_setspecific(g_ctx_key, t_ctx);
    const EVP_MD *md = g_sha256 ? g_sha256 : EVP_sha256();
    bool ok = t_ctx && EVP_DigestInit_ex(t_ctx, md, NULL);
    for (size_t i = 0; ok && i < n; i++)
        ok = EVP_DigestUpdate(t_ctx, p[i], len[i]);
    unsigned int outl = 32;
    ok = ok && EVP_DigestFinal_ex(t_ctx, out, &outl);
    if (!ok)
        memset(out, 0, 32); /* a signature that matches nothing */
    return ok;
}

void sl_sigv4_sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char h[SHA256_DIGEST_LENGTH];
    const void *parts[1] = {p ? p : (const void *)""};
    sha256(parts, &n, 1, h);
    hex(h, sizeof h, out);
}

/* ---- encoding --------------------------------------------------------------- */

static bool unreserved(unsigned char c)
{
    return isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

/* Appends p[0..n) percent-encoded (RFC 3986 unreserved kept; '/' kept when
 * slash). */
static int encode(sl_buf *b, const char *p, size_t n, bool slash)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char e[3] = {'%', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]};
        int rc = unreserved(c) || (slash && c == '/') ? sl_buf_append(b, &p[i], 1)
                                                       : sl_buf_append(b, e, 3);
        if (rc)
            return rc;
    }
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Decodes p[0..n) (%XX; '+' is kept: AWS signs it as %2B) into out.
 * Returns the length, or -1 for a bad escape. */
static long decode(const char *p, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            out[o++] = p[i];
            continue;
        }
        if (i + 2 >= n)
            return -1;
        int h = hexval(p[i + 1]), l = hexval(p[i + 2]);
        if (h < 0 || l < 0)
            return -1;
        out[o++] = (char)(h << 4 | l);
        i += 2;
    }
    return (long)o;
}

/* Appends the decoded-then-encoded form of p[0..n) (canonical whatever
 * the client's own encoding was). */
static int reencode(sl_buf *b, const char *p, size_t n, bool slash, sl_error *err)
{
    char stack[256], *tmp = n <= sizeof stack ? stack : malloc(n);
    if (!tmp)
        return SL_ENOMEM;
    long m = decode(p, n, tmp);
    int rc = m < 0 ? sl_error_set(err, SL_EINVAL, "a bad percent-escape in \"%.*s\"", (int)n, p)
                   : encode(b, tmp, (size_t)m, slash);
    if (tmp != stack)
        free(tmp);
    return rc;
}

/* ---- the canonical request ---------------------------------------------- */

typedef struct qpair {
    size_t kat, klen, vat, vlen; /* into the scratch buffer */
} qpair;

/* qsort has no context argument: the scratch buffer of this thread's call. */
static _Thread_local const sl_buf *g_qsort_buf;

static int qpair_cmp(const void *a, const void *b)
{
    const qpair *x = a, *y = b;
    const char *d = (const char *)g_qsort_buf->data;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(d + x->kat, d + y->kat, n);
    if (c || x->klen != y->klen)
        return c ? c : (x->klen < y->klen ? -1 : 1);
    n = x->vlen < y->vlen ? x->vlen : y->vlen;
    c = memcmp(d + x->vat, d + y->vat, n);
    return c ? c : (x->vlen < y->vlen ? -1 : x->vlen > y->vlen);
}

/* The canonical query string of q (as sent) appended to out. */
static int canonical_query(const char *q, sl_buf *out, sl_error *err)
{
    if (!q || !*q)
        return 0;
    sl_buf scratch = SL_BUF_INIT;
    qpair *pairs = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (const char *p = q; *p && !rc;) {
        const char *amp = strchr(p, '&'), *end = amp ? amp : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        const char *kend = eq ? eq : end;
        if (end > p) {
            if (n == cap && SL_GROW(pairs, cap, 8)) {
                rc = SL_ENOMEM;
                break;
            }
            qpair *pr = &pairs[n++];
            pr->kat = scratch.len;
            rc = reencode(&scratch, p, (size_t)(kend - p), false, err);
            pr->klen = scratch.len - pr->kat;
            pr->vat = scratch.len;
            if (!rc && eq)
                rc = reencode(&scratch, eq + 1, (size_t)(end - eq - 1), false, err);
            pr->vlen = scratch.len - pr->vat;
        }
        p = amp ? amp + 1 : end;
    }
    if (!rc) {
        g_qsort_buf = &scratch;
        qsort(pairs, n, sizeof *pairs, qpair_cmp);
        for (size_t i = 0; i < n && !rc; i++) {
            const char *d = (const char *)scratch.data;
            rc = (i ? sl_buf_append(out, "&", 1) : 0) ||
                 sl_buf_append(out, d + pairs[i].kat, pairs[i].klen) ||
                 sl_buf_append(out, "=", 1) || sl_buf_append(out, d + pairs[i].vat, pairs[i].vlen)
                     ? SL_ENOMEM
                     : 0;
        }
    }
    free(pairs);
    sl_buf_free(&scratch);
    return rc;
}

/* The canonical URI of every service but S3: the path as sent with its
 * dot segments resolved and runs of slashes made one (RFC 3986 5.2.4, as
 * AWS services do), a trailing slash kept, then encoded again. */
static int normalized_path(sl_buf *out, const char *path)
{
    size_t n = strlen(path);
    const char *seg[256];
    size_t len[256], k = 0;
    for (const char *p = path; p < path + n;) {
        const char *slash = memchr(p, '/', (size_t)(path + n - p));
        const char *e = slash ? slash : path + n;
        size_t l = (size_t)(e - p);
        if (l == 2 && p[0] == '.' && p[1] == '.') {
            if (k)
                k--;
        } else if (l && !(l == 1 && p[0] == '.') && k < 256) {
            seg[k] = p;
            len[k++] = l;
        }
        p = slash ? slash + 1 : e;
    }
    int rc = path[0] == '/' ? sl_buf_append(out, "/", 1) : 0;
    for (size_t i = 0; i < k && !rc; i++)
        rc = (i ? sl_buf_append(out, "/", 1) : 0) || encode(out, seg[i], len[i], false)
                 ? SL_ENOMEM
                 : 0;
    if (!rc && k && n && path[n - 1] == '/')
        rc = sl_buf_append(out, "/", 1);
    return rc;
}

static bool name_is(const sl_sigv4_header *h, const char *name, size_t len)
{
    return h->name_len == len && strncasecmp(h->name, name, len) == 0;
}

/* A header value trimmed, inner runs of blanks made one space. */
static int put_value(sl_buf *out, const char *v, size_t n)
{
    size_t i = 0;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    while (n > i && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    bool blank = false;
    for (; i < n; i++) {
        bool b = v[i] == ' ' || v[i] == '\t';
        if (b && blank)
            continue;
        if (sl_buf_append(out, b ? " " : &v[i], 1))
            return SL_ENOMEM;
        blank = b;
    }
    return 0;
}

int sl_sigv4_canonical(const sl_sigv4_req *r, const char *signed_headers, const char *payload_hash,
                       sl_buf *out, sl_error *err)
{
    int rc = sl_buf_printf(out, "%s\n", r->method);
    /* URI: S3 signs the path once (canonically), the others the encoded
     * path encoded again. */
    const char *path = r->path && r->path[0] ? r->path : "/";
    if (!rc)
        rc = r->double_encode ? normalized_path(out, path)
                              : reencode(out, path, strlen(path), true, err);
    if (!rc)
        rc = sl_buf_append(out, "\n", 1);
    if (!rc)
        rc = canonical_query(r->query, out, err);
    if (!rc)
        rc = sl_buf_append(out, "\n", 1);
    /* Headers, in the order of the (sorted) signed list. */
    for (const char *p = signed_headers; !rc && *p;) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        bool found = false;
        rc = sl_buf_append(out, p, len) || sl_buf_append(out, ":", 1) ? SL_ENOMEM : 0;
        for (size_t i = 0; !rc && i < r->nheaders; i++) {
            if (!name_is(&r->headers[i], p, len))
                continue;
            if (found)
                rc = sl_buf_append(out, ",", 1);
            if (!rc)
                rc = put_value(out, r->headers[i].value, r->headers[i].value_len);
            found = true;
        }
        if (!rc && !found)
            rc = sl_error_set(err, SL_EINVAL, "the signed header %.*s is not in the request",
                              (int)len, p);
        if (!rc)
            rc = sl_buf_append(out, "\n", 1);
        p = semi ? semi + 1 : p + len;
    }
    if (!rc)
        rc = sl_buf_printf(out, "\n%s\n%s", signed_headers, payload_hash);
    return rc == SL_ENOMEM ? sl_error_set(err, SL_ENOMEM, "out of memory") : rc;
}

/* HMAC-SHA256 (RFC 2104) over the fetched digest; out may be key. */
static void hmac(const void *key, size_t klen, const void *msg, size_t mlen, unsigned char out[32])
{
    unsigned char k[64] = {0}, ipad[64], opad[64], inner[32];
    if (klen > 64) {
        const void *parts[1] = {key};
        sha256(parts, &klen, 1, k);
    } else {
        memcpy(k, key, klen);
    }
    for (int i = 0; i < 64; i++) {
        ipad[i] = k[i] ^ 0x36;
        opad[i] = k[i] ^ 0x5c;
    }
    const void *in[2] = {ipad, msg};
    size_t inl[2] = {64, mlen};
    sha256(in, inl, 2, inner);
    const void *o[2] = {opad, inner};
    size_t ol[2] = {64, 32};
    sha256(o, ol, 2, out);
    OPENSSL_cleanse(k, sizeof k);
    OPENSSL_cleanse(ipad, sizeof ipad);
    OPENSSL_cleanse(opad, sizeof opad);
}

void sl_sigv4_signature(const char *canonical, size_t len, const char *secret,
                        const char *amz_date, const char *region, const char *service,
                        char out[SL_SIGV4_SIG_HEX + 1])
{
    char chash[65];
    sl_sigv4_sha256_hex(canonical, len, chash);
    char sts[512];
    int n = snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s",
                     amz_date, amz_date, region, service, chash);
    if (n < 0 || (size_t)n >= sizeof sts)
        n = (int)sizeof sts - 1;
    char k0[256];
    int kl = snprintf(k0, sizeof k0, "AWS4%s", secret);
    if (kl < 0 || (size_t)kl >= sizeof k0)
        kl = (int)sizeof k0 - 1;
    unsigned char k[32], sig[32];
    hmac(k0, (size_t)kl, amz_date, 8, k);
    hmac(k, 32, region, strlen(region), k);
    hmac(k, 32, service, strlen(service), k);
    hmac(k, 32, "aws4_request", 12, k);
    hmac(k, 32, sts, (size_t)n, sig);
    OPENSSL_cleanse(k0, sizeof k0);
    OPENSSL_cleanse(k, sizeof k);
    hex(sig, sizeof sig, out);
}

/* The signed-header list of every header of r, lower-case, sorted. */
static int all_headers(const sl_sigv4_req *r, char *out, size_t cap)
{
    const char *names[SL_SIGV4_MAX_HEADERS];
    size_t lens[SL_SIGV4_MAX_HEADERS], n = 0;
    for (size_t i = 0; i < r->nheaders && n < SL_SIGV4_MAX_HEADERS; i++) {
        bool dup = false;
        for (size_t j = 0; j < n && !dup; j++)
            dup = lens[j] == r->headers[i].name_len &&
                  !strncasecmp(names[j], r->headers[i].name, lens[j]);
        if (!dup) {
            names[n] = r->headers[i].name;
            lens[n++] = r->headers[i].name_len;
        }
    }
    for (size_t i = 1; i < n; i++) /* insertion sort by lower-case name */
        for (size_t j = i; j > 0; j--) {
            size_t m = lens[j] < lens[j - 1] ? lens[j] : lens[j - 1];
            int c = strncasecmp(names[j], names[j - 1], m);
            if (c > 0 || (c == 0 && lens[j] >= lens[j - 1]))
                break;
            const char *tn = names[j];
            size_t tl = lens[j];
            names[j] = names[j - 1];
            lens[j] = lens[j - 1];
            names[j - 1] = tn;
            lens[j - 1] = tl;
        }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + lens[i] + 2 > cap)
            return -1;
        if (i)
            out[o++] = ';';
        for (size_t k = 0; k < lens[i]; k++)
            out[o++] = (char)tolower((unsigned char)names[i][k]);
    }
    out[o] = '\0';
    return 0;
}

static const sl_sigv4_header *find_header(const sl_sigv4_req *r, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < r->nheaders; i++)
        if (name_is(&r->headers[i], name, len))
            return &r->headers[i];
    return NULL;
}

int sl_sigv4_authorization(const sl_sigv4_req *r, const char *akid, const char *secret,
                           const char *region, const char *service, const char *payload_hash,
                           sl_buf *out, sl_error *err)
{
    const sl_sigv4_header *d = find_header(r, "x-amz-date");
    if (!d || d->value_len != 16)
        return sl_error_set(err, SL_EINVAL, "an X-Amz-Date header (YYYYMMDDTHHMMSSZ) is needed");
    char date[17], signed_h[2048], ph[65], sig[SL_SIGV4_SIG_HEX + 1];
    memcpy(date, d->value, 16);
    date[16] = '\0';
    if (all_headers(r, signed_h, sizeof signed_h))
        return sl_error_set(err, SL_EINVAL, "too many signed headers");
    if (!payload_hash) {
        sl_sigv4_sha256_hex(r->body, r->body_len, ph);
        payload_hash = ph;
    }
    sl_buf can = SL_BUF_INIT;
    int rc = sl_sigv4_canonical(r, signed_h, payload_hash, &can, err);
    if (!rc) {
        sl_sigv4_signature((const char *)can.data, can.len, secret, date, region, service, sig);
        rc = sl_buf_printf(out,
                           "AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/aws4_request, "
                           "SignedHeaders=%s, Signature=%s",
                           akid, date, region, service, signed_h, sig)
                 ? sl_error_set(err, SL_ENOMEM, "out of memory")
                 : 0;
    }
    sl_buf_free(&can);
    return rc;
}

/* ---- verifying ------------------------------------------------------------------ */

int sl_sigv4_parse_auth(const char *v, size_t len, sl_sigv4_auth *a, sl_error *err)
{
    memset(a, 0, sizeof *a);
    static const char ALG[] = "AWS4-HMAC-SHA256";
    if (len < sizeof ALG || memcmp(v, ALG, sizeof ALG - 1) || v[sizeof ALG - 1] != ' ')
        return sl_error_set(err, SL_EINVAL,
                            "Authorization header requires the AWS4-HMAC-SHA256 algorithm");
    const char *p = v + sizeof ALG, *end = v + len;
    const char *cred = NULL;
    size_t cred_len = 0;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == ','))
            p++;
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        const char *eq = memchr(p, '=', (size_t)(e - p));
        if (!eq)
            break;
        size_t kl = (size_t)(eq - p), vl = (size_t)(e - eq - 1);
        if (kl == 10 && !memcmp(p, "Credential", 10)) {
            cred = eq + 1;
            cred_len = vl;
        } else if (kl == 13 && !memcmp(p, "SignedHeaders", 13)) {
            a->signed_headers = eq + 1;
            a->signed_headers_len = vl;
        } else if (kl == 9 && !memcmp(p, "Signature", 9)) {
            a->signature = eq + 1;
            a->signature_len = vl;
        }
        p = e;
    }
    if (!cred || !a->signed_headers || !a->signature)
        return sl_error_set(err, SL_EINVAL,
                            "Authorization header requires 'Credential', 'SignedHeaders' and "
                            "'Signature' parameters");
    /* AKID/DATE/REGION/SERVICE/aws4_request */
    const char *parts[5];
    size_t lens[5], np = 0;
    for (const char *q = cred, *qe = cred + cred_len; q <= qe && np < 5;) {
        const char *slash = memchr(q, '/', (size_t)(qe - q));
        const char *se = slash ? slash : qe;
        parts[np] = q;
        lens[np++] = (size_t)(se - q);
        if (!slash)
            break;
        q = slash + 1;
    }
    if (np != 5 || lens[4] != 12 || memcmp(parts[4], "aws4_request", 12) || lens[1] != 8 ||
        !lens[0])
        return sl_error_set(err, SL_EINVAL,
                            "Credential should be scoped to a valid region and service: "
                            "AKID/YYYYMMDD/REGION/SERVICE/aws4_request, not \"%.*s\"",
                            (int)(cred_len < 200 ? cred_len : 200), cred);
    a->akid = parts[0];
    a->akid_len = lens[0];
    a->date = parts[1];
    a->date_len = lens[1];
    a->region = parts[2];
    a->region_len = lens[2];
    a->service = parts[3];
    a->service_len = lens[3];
    return 0;
}

static bool span_is(const char *p, size_t n, const char *z)
{
    return strlen(z) == n && !memcmp(p, z, n);
}

sl_sigv4_fail sl_sigv4_verify(const sl_sigv4_req *r, const char *region, const char *service,
                              int64_t now_s, sl_sigv4_secret_fn *secret, void *ctx,
                              const char **akid_out, size_t *akid_len, sl_error *err)
{
    if (find_header(r, "x-amz-security-token")) {
        sl_error_set(err, SL_EINVAL,
                     "session tokens (X-Amz-Security-Token) are not supported: sign with a "
                     "configured access key and its secret");
        return SL_SIGV4_TOKEN;
    }
    const sl_sigv4_header *ah = find_header(r, "authorization");
    if (!ah) {
        sl_error_set(err, SL_EINVAL, "Missing Authentication Token (no Authorization header)");
        return SL_SIGV4_INCOMPLETE;
    }
    sl_sigv4_auth a;
    if (sl_sigv4_parse_auth(ah->value, ah->value_len, &a, err))
        return SL_SIGV4_INCOMPLETE;
    const sl_sigv4_header *dh = find_header(r, "x-amz-date");
    int64_t t = dh ? sl_sigv4_parse_amz_date(dh->value, dh->value_len) : -1;
    if (t < 0) {
        sl_error_set(err, SL_EINVAL, "an X-Amz-Date header (YYYYMMDDTHHMMSSZ) is required");
        return SL_SIGV4_INCOMPLETE;
    }
    *akid_out = a.akid;
    *akid_len = a.akid_len;
    const char *sec = secret(ctx, a.akid, a.akid_len);
    if (!sec) {
        sl_error_set(err, SL_EINVAL, "The security token included in the request is invalid "
                                     "(unknown access key id)");
        return SL_SIGV4_UNKNOWN_KEY;
    }
    if (memcmp(a.date, dh->value, 8)) {
        sl_error_set(err, SL_EINVAL, "the Credential's date %.8s is not X-Amz-Date's", a.date);
        return SL_SIGV4_BAD_SIGNATURE;
    }
    if (!span_is(a.region, a.region_len, region) || !span_is(a.service, a.service_len, service)) {
        sl_error_set(err, SL_EINVAL, "Credential should be scoped to a valid region and service: "
                                     "want %s/%s, not %.*s/%.*s",
                     region, service, (int)a.region_len, a.region, (int)a.service_len,
                     a.service);
        return SL_SIGV4_BAD_SIGNATURE;
    }
    if (t < now_s - SL_SIGV4_MAX_SKEW_S || t > now_s + SL_SIGV4_MAX_SKEW_S) {
        char now[17];
        sl_sigv4_amz_date(now_s, now);
        sl_error_set(err, SL_EINVAL,
                     "Signature expired: %.16s is now earlier or later than %s by more than 15 "
                     "minutes",
                     dh->value, now);
        return SL_SIGV4_BAD_SIGNATURE;
    }
    char sh[2048];
    if (a.signed_headers_len >= sizeof sh) {
        sl_error_set(err, SL_EINVAL, "too many signed headers");
        return SL_SIGV4_INCOMPLETE;
    }
    memcpy(sh, a.signed_headers, a.signed_headers_len);
    sh[a.signed_headers_len] = '\0';
    /* host and x-amz-date must be signed (AWS requires host). */
    bool host = false, date = false;
    for (char *p = sh; *p;) {
        char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        host |= len == 4 && !memcmp(p, "host", 4);
        date |= len == 10 && !memcmp(p, "x-amz-date", 10);
        p = semi ? semi + 1 : p + len;
    }
    if (!host || !date) {
        sl_error_set(err, SL_EINVAL, "SignedHeaders must include host and x-amz-date");
        return SL_SIGV4_BAD_SIGNATURE;
    }
    char body_hash[65];
    sl_sigv4_sha256_hex(r->body, r->body_len, body_hash);
    const sl_sigv4_header *ch = find_header(r, "x-amz-content-sha256");
    if (ch && !(ch->value_len == 64 && !strncasecmp(ch->value, body_hash, 64))) {
        sl_error_set(err, SL_EINVAL, "x-amz-content-sha256 does not match the body's SHA-256");
        return SL_SIGV4_BAD_SIGNATURE;
    }
    sl_buf can = SL_BUF_INIT;
    char sig[SL_SIGV4_SIG_HEX + 1], date_z[17];
    memcpy(date_z, dh->value, 16);
    date_z[16] = '\0';
    int rc = sl_sigv4_canonical(r, sh, body_hash, &can, err);
    if (rc) {
        sl_buf_free(&can);
        return SL_SIGV4_BAD_SIGNATURE;
    }
    sl_sigv4_signature((const char *)can.data, can.len, sec, date_z, region, service, sig);
    sl_buf_free(&can);
    if (a.signature_len != SL_SIGV4_SIG_HEX || CRYPTO_memcmp(a.signature, sig, SL_SIGV4_SIG_HEX)) {
        sl_error_set(err, SL_EINVAL,
                     "The request signature we calculated does not match the signature you "
                     "provided. Check your AWS Secret Access Key and signing method.");
        return SL_SIGV4_BAD_SIGNATURE;
    }
    return SL_SIGV4_OK;
}

/* ---- dates -------------------------------------------------------------------------- */

void sl_sigv4_amz_date(int64_t t, char out[17])
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

int64_t sl_sigv4_parse_amz_date(const char *s, size_t len)
{
    if (len != 16 || s[8] != 'T' || s[15] != 'Z')
        return -1;
    int v[6], w[6] = {4, 2, 2, 2, 2, 2}, at[6] = {0, 4, 6, 9, 11, 13};
    for (int i = 0; i < 6; i++) {
        v[i] = 0;
        for (int k = 0; k < w[i]; k++) {
            char c = s[at[i] + k];
            if (c < '0' || c > '9')
                return -1;
            v[i] = v[i] * 10 + (c - '0');
        }
    }
    if (v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > 31 || v[3] > 23 || v[4] > 59 || v[5] > 60)
        return -1;
    struct tm tm = {.tm_year = v[0] - 1900, .tm_mon = v[1] - 1, .tm_mday = v[2],
                    .tm_hour = v[3], .tm_min = v[4], .tm_sec = v[5]};
    return (int64_t)timegm(&tm);
}
