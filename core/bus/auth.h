/*
 * core/bus/auth.h — API keys of the HTTP API (docs/security.md): the key table
 * built from the config's server.api_keys, token look-up by SHA-256 with a
 * constant-time comparison, per-key rights on sets (glob patterns), the
 * `Authorization: Bearer` header and new random tokens for `sluice key new`
 * (whether a listen address is loopback: core/base/net.h).
 *
 * A token is "sk_" followed by 43 base64url characters (32 bytes from the
 * kernel's CSPRNG). Only SHA-256(token) is kept, as 64 lower-case hex digits:
 * the config never holds a token. An unsalted fast hash is enough because a
 * token carries 256 bits of randomness; salts and slow hashes defend
 * guessable passwords, and nobody can enumerate 2^256 candidates.
 *
 * Thread safety: an sl_auth is immutable after sl_auth_new(); any number of
 * threads may call the look-up functions at once.
 */
#ifndef SL_AUTH_H
#define SL_AUTH_H

#include "core/base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_AUTH_NAME_MAX 64   /* key names: [A-Za-z0-9._-]{1,64} */
#define SL_AUTH_TOKEN_LEN 46  /* "sk_" + 43 base64url characters */
#define SL_AUTH_HEX_LEN 64    /* a SHA-256 in hex */
#define SL_AUTH_MAX_KEYS 4096 /* keys in one config */

/* One server.api_keys entry as the config declares it (strings owned by the
 * config). publish/read are set-name patterns: a name, or a glob where `*`
 * stands for any run of characters ("audit.*", "*"). The char ** fields are
 * each followed by their count (the config loader's K_STRINGS layout). */
typedef struct sl_auth_key_config {
    char *name;
    int line;
    char *sha256;   /* required: SHA-256 of the token, 64 hex digits */
    char **publish; /* POST events into these sets; redrive into them */
    size_t npublish;
    char **read; /* read events and the set's details; long-polls, tail */
    size_t nread;
    bool admin;   /* everything: rules, replays, lanes, patterns, metrics, every set */
    bool metrics; /* GET /metrics (a scraper's key needs nothing else) */
} sl_auth_key_config;

/* What a request needs (http/http_auth.c maps endpoints). */
typedef enum sl_auth_right {
    SL_AUTH_OPEN,      /* nothing: /healthz, /ui/, webhooks (their signature) */
    SL_AUTH_ANY,       /* any valid key (unknown paths: 404 only to key holders) */
    SL_AUTH_PUBLISH,   /* publish on a set */
    SL_AUTH_READ,      /* read on a set */
    SL_AUTH_READ_SOME, /* read on at least one set pattern: listings, rules, lanes */
    SL_AUTH_METRICS,   /* metrics = true */
    SL_AUTH_ADMIN,     /* admin = true */
} sl_auth_right;

typedef struct sl_auth sl_auth;
typedef struct sl_auth_key sl_auth_key;

/* Builds the key table from n declarations (copied; cfg may go after).
 * Returns 0 and *out (free with sl_auth_free()), or SL_EINVAL with err
 * naming the key (a bad name or hash, a duplicate name or hash, a bad
 * pattern), or SL_ENOMEM. n may be 0 (a table that knows no key). */
int sl_auth_new(const sl_auth_key_config *cfg, size_t n, sl_auth **out, sl_error *err);

/* NULL is ignored. */
void sl_auth_free(sl_auth *a);

/* Number of keys (0 for NULL). */
size_t sl_auth_count(const sl_auth *a);

/* The key whose hash is SHA-256(token[0..len)), or NULL. Every key's hash
 * is compared in constant time (CRYPTO_memcmp), without stopping at a
 * match, so timing tells nothing about the hashes. */
const sl_auth_key *sl_auth_find(const sl_auth *a, const char *token, size_t len);

/* The key's name (borrowed from the table). */
const char *sl_auth_key_name(const sl_auth_key *k);

/* Whether key k has right on set (set is only looked at for PUBLISH and
 * READ, may be NULL otherwise). admin allows everything. */
bool sl_auth_allows(const sl_auth_key *k, sl_auth_right right, const char *set);

/* The name of a right as the docs and the 403 messages say it
 * ("publish", "read", "admin", …). */
const char *sl_auth_right_name(sl_auth_right right);

/* Extracts the token of an Authorization header value "Bearer TOKEN"
 * (scheme case-insensitive, spaces around allowed). Returns 0 with
 * tok and len pointing into header, or SL_EINVAL (another scheme, no token). */
int sl_auth_bearer(const char *header, const char **tok, size_t *len);

/* Whether pattern (a set name with `*` wildcards) matches name. */
bool sl_auth_glob(const char *pattern, const char *name);

/* Whether s is a valid set pattern: 1-128 of [A-Za-z0-9._-*]. */
bool sl_auth_pattern_valid(const char *s);

/* Whether s is a valid key name ([A-Za-z0-9._-]{1,64}). */
bool sl_auth_name_valid(const char *s);

/* Whether s is 64 hex digits (either case). */
bool sl_auth_hex_valid(const char *s);

/* Writes a new random token ("sk_…", NUL-terminated) into out, which has
 * room for SL_AUTH_TOKEN_LEN + 1 bytes. Returns 0, or SL_EIO with err when
 * the CSPRNG fails (getrandom, then RAND_bytes). */
int sl_auth_new_token(char out[SL_AUTH_TOKEN_LEN + 1], sl_error *err);

/* Writes SHA-256(token[0..len)) as 64 lower-case hex digits and a NUL. */
void sl_auth_hash_hex(const char *token, size_t len, char out[SL_AUTH_HEX_LEN + 1]);

#endif
