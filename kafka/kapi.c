/*
 * kafka/kapi.c — the API table and dispatch, ApiVersions and SASL/PLAIN.
 *
 * The table is what ApiVersions advertises and what dispatch enforces:
 * a key or version outside it closes the connection (as brokers do),
 * except ApiVersions itself, which answers UNSUPPORTED_VERSION with the
 * table in a v0 body so the client can retry with a version we speak.
 * Versions follow what librdkafka 2.0.2, kcat 1.7.1 and kafkajs 2.2.4 send
 * (issue 20 §2).
 *
 * SASL: with API keys configured, a connection must pass SaslHandshake
 * (mechanism PLAIN) and SaslAuthenticate (user = key name, password = the
 * token) before any request but ApiVersions and the SASL ones; anything
 * else first closes the connection (Kafka's ILLEGAL_SASL_STATE behaviour).
 * Without keys, SASL is still answered (any credentials pass), so a client
 * configured for SASL works against an open sluice too.
 */
#include "kafka/kafka_internal.h"

#include <string.h>

typedef struct kapi {
    int16_t key, lo, hi;
    sl_kapi_fn *fn;
    bool sasl; /* answered before authentication */
} kapi;

static const kapi table[] = {
    {SL_KAPI_PRODUCE, 3, 7, sl__kafka_produce, false},
    {SL_KAPI_FETCH, 4, 11, sl__kafka_fetch, false},
    {SL_KAPI_LIST_OFFSETS, 1, 3, sl__kafka_list_offsets, false},
    {SL_KAPI_METADATA, 0, 6, sl__kafka_metadata, false},
    {SL_KAPI_OFFSET_COMMIT, 2, 7, sl__kafka_offset_commit, false},
    {SL_KAPI_OFFSET_FETCH, 1, 5, sl__kafka_offset_fetch, false},
    {SL_KAPI_FIND_COORDINATOR, 0, 2, sl__kafka_find_coordinator, false},
    {SL_KAPI_JOIN_GROUP, 0, 5, sl__kafka_join_group, false},
    {SL_KAPI_HEARTBEAT, 0, 3, sl__kafka_heartbeat, false},
    {SL_KAPI_LEAVE_GROUP, 0, 3, sl__kafka_leave_group, false},
    {SL_KAPI_SYNC_GROUP, 0, 3, sl__kafka_sync_group, false},
    {SL_KAPI_DESCRIBE_GROUPS, 0, 2, sl__kafka_describe_groups, false},
    {SL_KAPI_LIST_GROUPS, 0, 2, sl__kafka_list_groups, false},
    {SL_KAPI_SASL_HANDSHAKE, 0, 1, sl__kafka_sasl_handshake, true},
    {SL_KAPI_API_VERSIONS, 0, 3, sl__kafka_api_versions, true},
    {SL_KAPI_CREATE_TOPICS, 0, 4, sl__kafka_create_topics, false},
    {SL_KAPI_DELETE_TOPICS, 0, 1, sl__kafka_delete_topics, false},
    {SL_KAPI_INIT_PRODUCER_ID, 0, 1, sl__kafka_init_producer_id, false},
    {SL_KAPI_SASL_AUTHENTICATE, 0, 1, sl__kafka_sasl_authenticate, true},
};
#define NAPIS (sizeof table / sizeof table[0])

static const kapi *find(int16_t key)
{
    for (size_t i = 0; i < NAPIS; i++)
        if (table[i].key == key)
            return &table[i];
    return NULL;
}

/* Whether keys are configured (the SASL gate is on). */
static bool auth_on(const sl_kafka *k)
{
    return atomic_load(&((sl_kafka *)k)->auth) != NULL;
}

/* The API list of an ApiVersions response; the SASL ones only with keys. */
static void write_apis(sl_kreq *r, bool flexible)
{
    bool sasl = auth_on(r->k);
    int32_t n = 0;
    for (size_t i = 0; i < NAPIS; i++)
        n += sasl || (table[i].key != SL_KAPI_SASL_HANDSHAKE &&
                      table[i].key != SL_KAPI_SASL_AUTHENTICATE);
    sl_kw_array(&r->w, flexible, n);
    for (size_t i = 0; i < NAPIS; i++) {
        if (!sasl &&
            (table[i].key == SL_KAPI_SASL_HANDSHAKE || table[i].key == SL_KAPI_SASL_AUTHENTICATE))
            continue;
        sl_kw_i16(&r->w, table[i].key);
        sl_kw_i16(&r->w, table[i].lo);
        sl_kw_i16(&r->w, table[i].hi);
        sl_kw_tags(&r->w, flexible);
    }
}

int sl__kafka_api_versions(sl_kreq *r)
{
    int16_t v = r->h.version;
    if (v > 3) {
        /* A v0 body whatever was asked: the client parses that much of any
         * version and retries with the highest we list. */
        sl_kw_i16(&r->w, SL_KERR_UNSUPPORTED_VERSION);
        write_apis(r, false);
        return SL_KREQ_DONE;
    }
    bool flex = v >= 3;
    if (flex) { /* client_software_name, client_software_version: logs only */
        sl_kr_str(&r->body, true);
        sl_kr_str(&r->body, true);
        sl_kr_tags(&r->body, true);
        if (!sl_kr_ok(&r->body)) {
            sl_kw_i16(&r->w, SL_KERR_INVALID_REQUEST);
            write_apis(r, flex);
            sl_kw_i32(&r->w, 0);
            sl_kw_tags(&r->w, flex);
            return SL_KREQ_DONE;
        }
    }
    sl_kw_i16(&r->w, SL_KERR_NONE);
    write_apis(r, flex);
    if (v >= 1)
        sl_kw_i32(&r->w, 0); /* throttle_time_ms */
    sl_kw_tags(&r->w, flex);
    return SL_KREQ_DONE;
}

int sl__kafka_sasl_handshake(sl_kreq *r)
{
    sl_kstr mech = sl_kr_str(&r->body, false);
    if (!sl_kr_ok(&r->body)) {
        sl__kafka_log_once(r, "kafka: %s sent a malformed SaslHandshake: closed", r->peer);
        return SL_KREQ_CLOSE;
    }
    sl_kconn_auth *a = sl__klisten_auth(r->conn);
    bool plain = sl_kstr_eq(mech, "PLAIN");
    if (r->h.version == 0 && plain) {
        /* v0 would send the token as a bare frame next; clients use v1
         * (SaslAuthenticate) when offered, which ApiVersions does. */
        sl__kafka_log_once(r, "kafka: %s asked SaslHandshake v0 (bare tokens): use v1", r->peer);
        plain = false;
    }
    if (a && plain)
        a->handshaken = true;
    sl_kw_i16(&r->w, plain ? SL_KERR_NONE : SL_KERR_UNSUPPORTED_SASL_MECHANISM);
    sl_kw_array(&r->w, false, 1);
    sl_kw_str(&r->w, false, "PLAIN", -1);
    return SL_KREQ_DONE;
}

static void auth_answer(sl_kreq *r, int16_t code, const char *msg)
{
    sl_kw_i16(&r->w, code);
    sl_kw_str(&r->w, false, msg, msg ? -1 : 0);
    sl_kw_bytes(&r->w, false, "", 0);
    if (r->h.version >= 1)
        sl_kw_i64(&r->w, 0); /* session_lifetime_ms: no re-authentication */
}

int sl__kafka_sasl_authenticate(sl_kreq *r)
{
    sl_kstr tok = sl_kr_bytes(&r->body, false);
    if (!sl_kr_ok(&r->body) || !tok.p) {
        sl__kafka_log_once(r, "kafka: %s sent a malformed SaslAuthenticate: closed", r->peer);
        return SL_KREQ_CLOSE;
    }
    sl_kconn_auth *a = sl__klisten_auth(r->conn);
    if (a && !a->handshaken) {
        auth_answer(r, SL_KERR_ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake");
        return SL_KREQ_DONE;
    }
    /* PLAIN (RFC 4616): [authzid] NUL authcid NUL passwd. */
    const char *p = tok.p, *end = tok.p + tok.len;
    const char *z1 = memchr(p, '\0', (size_t)(end - p));
    const char *z2 = z1 ? memchr(z1 + 1, '\0', (size_t)(end - z1 - 1)) : NULL;
    if (!z2) {
        auth_answer(r, SL_KERR_SASL_AUTHENTICATION_FAILED,
                    "SASL/PLAIN: want authzid NUL user NUL password");
        return SL_KREQ_DONE;
    }
    const char *user = z1 + 1, *pass = z2 + 1;
    size_t ulen = (size_t)(z2 - user), plen = (size_t)(end - pass);
    const sl_auth *au = atomic_load(&r->k->auth);
    if (!au) { /* no keys: any credentials pass */
        if (a)
            a->authenticated = true;
        auth_answer(r, SL_KERR_NONE, NULL);
        return SL_KREQ_DONE;
    }
    const sl_auth_key *key = sl_auth_find(au, pass, plen);
    const char *name = key ? sl_auth_key_name(key) : NULL;
    if (!key || strlen(name) != ulen || memcmp(name, user, ulen) != 0) {
        sl__kafka_log_once(r, "kafka: %s failed SASL/PLAIN as %.*s", r->peer,
                           (int)(ulen < 64 ? ulen : 64), user);
        auth_answer(r, SL_KERR_SASL_AUTHENTICATION_FAILED,
                    "SASL/PLAIN: unknown key name or wrong token");
        return SL_KREQ_DONE;
    }
    if (a) {
        a->authenticated = true;
        a->key = key;
    }
    r->key = key;
    auth_answer(r, SL_KERR_NONE, NULL);
    return SL_KREQ_DONE;
}

int sl__kapi_dispatch(sl_kreq *r)
{
    char nm[16];
    const kapi *api = find(r->h.key);
    if (!api || r->h.version < api->lo || r->h.version > api->hi) {
        if (r->h.key == SL_KAPI_API_VERSIONS)
            return sl__kafka_api_versions(r);
        sl__kafka_log_once(r, "kafka: %s (client %s) sent %s v%d, which sluice does not serve: "
                              "closed (docs/kafka-protocol.md lists what is)",
                           r->peer, r->client_id[0] ? r->client_id : "-",
                           sl_kp_api_name(r->h.key, nm), r->h.version);
        return SL_KREQ_CLOSE;
    }
    sl_kconn_auth *a = sl__klisten_auth(r->conn);
    if (!api->sasl && auth_on(r->k) && a && !a->authenticated) {
        sl__kafka_log_once(r, "kafka: %s sent %s before SASL/PLAIN authentication: closed",
                           r->peer, sl_kp_api_name(r->h.key, nm));
        return SL_KREQ_CLOSE;
    }
    if (a)
        r->key = a->key;
    return api->fn(r);
}
