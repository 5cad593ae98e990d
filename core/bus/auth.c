/*
 * core/bus/auth.c — API keys: the key table, hashed token look-up, rights on
 * sets, bearer headers and new tokens (see core/bus/auth.h).
 */
#include "core/bus/auth.h"
#include "core/base/base64.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

struct sl_auth_key {
    char name[SL_AUTH_NAME_MAX + 1];
    unsigned char hash[SHA256_DIGEST_LENGTH];
    char **publish;
    size_t npublish;
    char **read;
    size_t nread;
    bool admin, metrics;
};

struct sl_auth {
    sl_auth_key *keys;
    size_t n;
};

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

bool sl_auth_hex_valid(const char *s)
{
    if (!s || strlen(s) != SL_AUTH_HEX_LEN)
        return false;
    for (; *s; s++)
        if (hexval(*s) < 0)
            return false;
    return true;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

bool sl_auth_name_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SL_AUTH_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!name_char(*s))
            return false;
    return true;
}

bool sl_auth_pattern_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 128)
        return false;
    for (; *s; s++)
        if (!name_char(*s) && *s != '*')
            return false;
    return true;
}

bool sl_auth_glob(const char *p, const char *s)
{
    /* Iterative matching with one back-track point (the last `*`): linear
     * enough for 128-character names, and no recursion a pattern could
     * blow up. */
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*p == '*') {
            star = p++;
            resume = s;
        } else if (*p == *s) {
            p++;
            s++;
        } else if (star) {
            p = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Copies and checks a pattern list; returns 0, SL_EINVAL or SL_ENOMEM. */
static int copy_patterns(const char *key, const char *what, char *const *src, size_t n, char ***dst,
                         sl_error *err)
{
    *dst = NULL;
    if (!n)
        return 0;
    char **v = calloc(n, sizeof *v);
    if (!v)
        return SL_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!sl_auth_pattern_valid(src[i])) {
            free_list(v, n);
            return sl_error_set(err, SL_EINVAL,
                                "api key \"%s\": %s pattern \"%.140s\" is not a set name or a "
                                "glob of [A-Za-z0-9._-] and *",
                                key, what, src[i] ? src[i] : "");
        }
        if (!(v[i] = strdup(src[i]))) {
            free_list(v, n);
            return SL_ENOMEM;
        }
    }
    *dst = v;
    return 0;
}

void sl_auth_free(sl_auth *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n; i++) {
        free_list(a->keys[i].publish, a->keys[i].npublish);
        free_list(a->keys[i].read, a->keys[i].nread);
    }
    free(a->keys);
    free(a);
}

int sl_auth_new(const sl_auth_key_config *cfg, size_t n, sl_auth **out, sl_error *err)
{
    if (n > SL_AUTH_MAX_KEYS)
        return sl_error_set(err, SL_EINVAL, "%zu api keys: at most %d", n, SL_AUTH_MAX_KEYS);
    sl_auth *a = calloc(1, sizeof *a);
    if (!a || (n && !(a->keys = calloc(n, sizeof *a->keys)))) {
        free(a);
        return SL_ENOMEM;
    }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const sl_auth_key_config *c = &cfg[i];
        sl_auth_key *k = &a->keys[i];
        a->n = i + 1; /* what sl_auth_free() must release */
        if (!sl_auth_name_valid(c->name)) {
            rc = sl_error_set(err, SL_EINVAL, "api key \"%.80s\": a name is 1-64 of [A-Za-z0-9._-]",
                              c->name ? c->name : "");
            break;
        }
        if (!sl_auth_hex_valid(c->sha256)) {
            rc = sl_error_set(err, SL_EINVAL,
                              "api key \"%s\": sha256 must be the 64 hex digits of the token's "
                              "SHA-256 (`sluice key new` prints it), never the token itself",
                              c->name);
            break;
        }
        snprintf(k->name, sizeof k->name, "%s", c->name);
        for (size_t j = 0; j < SHA256_DIGEST_LENGTH; j++)
            k->hash[j] =
                (unsigned char)(hexval(c->sha256[2 * j]) << 4 | hexval(c->sha256[2 * j + 1]));
        k->admin = c->admin;
        k->metrics = c->metrics;
        for (size_t j = 0; j < i && !rc; j++) {
            if (strcmp(a->keys[j].name, k->name) == 0)
                rc = sl_error_set(err, SL_EINVAL, "api key \"%s\" is declared twice", k->name);
            else if (memcmp(a->keys[j].hash, k->hash, sizeof k->hash) == 0)
                rc = sl_error_set(err, SL_EINVAL,
                                  "api keys \"%s\" and \"%s\" have the same sha256 (one token, "
                                  "two keys): make a token per key",
                                  a->keys[j].name, k->name);
        }
        if (!rc)
            rc = copy_patterns(k->name, "publish", c->publish, c->npublish, &k->publish, err);
        if (!rc)
            k->npublish = c->npublish;
        if (!rc)
            rc = copy_patterns(k->name, "read", c->read, c->nread, &k->read, err);
        if (!rc)
            k->nread = c->nread;
    }
    if (rc) {
        sl_auth_free(a);
        return rc;
    }
    a->n = n;
    *out = a;
    return 0;
}

size_t sl_auth_count(const sl_auth *a)
{
    return a ? a->n : 0;
}

const sl_auth_key *sl_auth_find(const sl_auth *a, const char *token, size_t len)
{
    if (!a || !a->n)
        return NULL;
    unsigned char h[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)token, len, h);
    const sl_auth_key *found = NULL;
    for (size_t i = 0; i < a->n; i++)
        if (CRYPTO_memcmp(h, a->keys[i].hash, sizeof h) == 0)
            found = &a->keys[i];
    OPENSSL_cleanse(h, sizeof h);
    return found;
}

const char *sl_auth_key_name(const sl_auth_key *k)
{
    return k->name;
}

static bool any_match(char *const *v, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (sl_auth_glob(v[i], set))
            return true;
    return false;
}

bool sl_auth_allows(const sl_auth_key *k, sl_auth_right right, const char *set)
{
    if (k->admin)
        return true;
    switch (right) {
    case SL_AUTH_OPEN:
    case SL_AUTH_ANY:
        return true;
    case SL_AUTH_PUBLISH:
        return set && any_match(k->publish, k->npublish, set);
    case SL_AUTH_READ:
        return set && any_match(k->read, k->nread, set);
    case SL_AUTH_READ_SOME:
        return k->nread > 0;
    case SL_AUTH_METRICS:
        return k->metrics;
    case SL_AUTH_ADMIN:
        return false;
    }
    return false;
}

const char *sl_auth_right_name(sl_auth_right right)
{
    switch (right) {
    case SL_AUTH_OPEN:
        return "none";
    case SL_AUTH_ANY:
        return "any key";
    case SL_AUTH_PUBLISH:
        return "publish";
    case SL_AUTH_READ:
        return "read";
    case SL_AUTH_READ_SOME:
        return "read (on any set)";
    case SL_AUTH_METRICS:
        return "metrics";
    case SL_AUTH_ADMIN:
        return "admin";
    }
    return "?";
}

int sl_auth_bearer(const char *h, const char **tok, size_t *len)
{
    if (!h)
        return SL_EINVAL;
    while (*h == ' ' || *h == '\t')
        h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return SL_EINVAL;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t'))
        n--;
    if (!n)
        return SL_EINVAL;
    *tok = h;
    *len = n;
    return 0;
}

int sl_auth_new_token(char out[SL_AUTH_TOKEN_LEN + 1], sl_error *err)
{
    unsigned char r[32];
    ssize_t got = getrandom(r, 32, 0);
    if (got != 32 && RAND_bytes(r, 32) != 1)
        return sl_error_set(err, SL_EIO, "no random bytes from getrandom() or RAND_bytes()");
    memcpy(out, "sk_", 3);
    /* 32 random bytes (256 bits) are 43 base64url characters without padding. */
    size_t n = sl_base64_encode(out + 3, r, sizeof r, SL_BASE64_URL | SL_BASE64_NOPAD);
    out[3 + n] = '\0';
    OPENSSL_cleanse(r, sizeof r);
    return 0;
}

void sl_auth_hash_hex(const char *token, size_t len, char out[SL_AUTH_HEX_LEN + 1])
{
    static const char hx[] = "0123456789abcdef";
    unsigned char h[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)token, len, h);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hx[h[i] >> 4];
        out[2 * i + 1] = hx[h[i] & 15];
    }
    out[SL_AUTH_HEX_LEN] = '\0';
}
