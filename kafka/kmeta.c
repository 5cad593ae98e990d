/*
 * kafka/kmeta.c — Metadata: sluice is the only broker (node 0), the
 * controller and the leader (and only replica) of every partition.
 *
 * Which topics: v0 an empty list means every set, v1+ a null list does (an
 * empty one none). A topic asked for by name that does not exist is
 * auto-created when the server's auto_create allows it (and, v4+, the
 * client's allow_auto_topic_creation): producers need the topic before
 * their first Produce, as with Kafka's auto.create.topics.enable. With API
 * keys, the all-topics listing names only the sets the key may read or
 * publish on; a named one it may not gets TOPIC_AUTHORIZATION_FAILED.
 */
#include "kafka/kafka_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_broker(sl_kreq *r)
{
    sl_kafka *k = r->k;
    int16_t v = r->h.version;
    sl_kw_array(&r->w, false, 1);
    sl_kw_i32(&r->w, SL_KAFKA_NODE_ID);
    sl_kw_str(&r->w, false, k->adv_host, -1);
    sl_kw_i32(&r->w, k->adv_port);
    if (v >= 1)
        sl_kw_str(&r->w, false, NULL, 0); /* rack */
}

static void write_topic(sl_kreq *r, int16_t err, const char *name, int32_t name_len,
                        const sl_set *set)
{
    int16_t v = r->h.version;
    sl_kw_i16(&r->w, err);
    sl_kw_str(&r->w, false, name, name_len);
    if (v >= 1)
        sl_kw_i8(&r->w, 0); /* is_internal */
    int32_t np = set && !err ? set->nparts : 0;
    sl_kw_array(&r->w, false, np);
    for (int32_t p = 0; p < np; p++) {
        sl_kw_i16(&r->w, SL_KERR_NONE);
        sl_kw_i32(&r->w, p);
        sl_kw_i32(&r->w, SL_KAFKA_NODE_ID); /* leader */
        sl_kw_array(&r->w, false, 1);       /* replicas */
        sl_kw_i32(&r->w, SL_KAFKA_NODE_ID);
        sl_kw_array(&r->w, false, 1); /* in-sync replicas */
        sl_kw_i32(&r->w, SL_KAFKA_NODE_ID);
        if (v >= 5)
            sl_kw_array(&r->w, false, 0); /* offline replicas */
    }
}

typedef struct all_ctx {
    sl_kreq *r;
    size_t n;
    int32_t written;
} all_ctx;

/* A set the listing shows: local, not deleted, and visible to the key. */
static bool listed(sl_kreq *r, const sl_set *set)
{
    return !atomic_load(&set->deleted) && !sl_set_remote(set) &&
           (sl__kafka_allowed(r, SL_AUTH_READ, set->name) ||
            sl__kafka_allowed(r, SL_AUTH_PUBLISH, set->name));
}

static void count_one(sl_set *set, void *ctx)
{
    all_ctx *a = ctx;
    a->n += listed(a->r, set);
}

static void write_one(sl_set *set, void *ctx)
{
    all_ctx *a = ctx;
    if (listed(a->r, set) && (size_t)a->written < a->n) {
        write_topic(a->r, SL_KERR_NONE, set->name, -1, set);
        a->written++;
    }
}

int sl__kafka_metadata(sl_kreq *r)
{
    int16_t v = r->h.version;
    sl_kr *in = &r->body;
    int32_t n = sl_kr_array(in, false, 2);
    bool all = v == 0 ? n <= 0 : n < 0;
    /* The names are read twice (counted here, answered below): keep where
     * the list starts. */
    sl_kr list = *in;
    for (int32_t i = 0; i < n; i++)
        sl_kr_str(in, false);
    bool auto_ok = v < 4 || sl_kr_i8(in) != 0;
    if (!sl_kr_ok(in)) {
        sl__kafka_log_once(r, "kafka: %s sent a malformed Metadata v%d: closed", r->peer, v);
        return SL_KREQ_CLOSE;
    }
    if (v >= 3)
        sl_kw_i32(&r->w, 0); /* throttle_time_ms */
    write_broker(r);
    if (v >= 2)
        sl_kw_str(&r->w, false, SL_KAFKA_CLUSTER_ID, -1);
    if (v >= 1)
        sl_kw_i32(&r->w, SL_KAFKA_NODE_ID); /* controller */
    if (all) {
        /* Counted first, then written with the count as the bound: a set
         * made between the two passes is left for the next request. */
        all_ctx a = {.r = r};
        sl_sets_each(r->k->sets, count_one, &a);
        size_t at = sl_kw_pos(&r->w);
        sl_kw_i32(&r->w, (int32_t)a.n);
        sl_sets_each(r->k->sets, write_one, &a);
        sl_kw_i32_at(&r->w, at, a.written);
        return SL_KREQ_DONE;
    }
    sl_kw_array(&r->w, false, n);
    for (int32_t i = 0; i < n; i++) {
        sl_kstr name = sl_kr_str(&list, false);
        sl_set *set = NULL;
        int16_t err = sl__kafka_topic(r, name, auto_ok, &set);
        if (!err && !sl__kafka_allowed(r, SL_AUTH_READ, set->name) &&
            !sl__kafka_allowed(r, SL_AUTH_PUBLISH, set->name))
            err = SL_KERR_TOPIC_AUTHORIZATION_FAILED;
        write_topic(r, err, name.p ? name.p : "", name.p ? name.len : 0, set);
    }
    return SL_KREQ_DONE;
}

/* ---- CreateTopics, DeleteTopics ------------------------------------------- */

static void topic_result(sl_kreq *r, sl_kstr name, int16_t err, const char *msg)
{
    sl_kw_str(&r->w, false, name.p ? name.p : "", name.p ? name.len : 0);
    sl_kw_i16(&r->w, err);
    if (r->h.version >= 1)
        sl_kw_str(&r->w, false, msg, msg ? -1 : 0);
}

/* One topic of a CreateTopics: validated, then (unless validate_only)
 * made a set with the server's defaults and the asked partition count.
 * Configs are accepted and ignored: a set's settings come from sluice's
 * config (docs/kafka-protocol.md). */
static void create_one(sl_kreq *r, sl_kstr name, int32_t parts, int16_t repl, bool manual,
                       bool validate_only)
{
    char nm[SL_SET_NAME_MAX + 1], msg[SL_ERROR_MAX + 64];
    if (!sl_kstr_copy(name, nm, sizeof nm) || !sl_set_name_valid(nm)) {
        topic_result(r, name, SL_KERR_INVALID_TOPIC_EXCEPTION,
                     "topic names are set names: 1-128 of A-Z a-z 0-9 . _ -, no leading dot");
        return;
    }
    if (!sl__kafka_allowed(r, SL_AUTH_ADMIN, nm)) {
        topic_result(r, name, SL_KERR_TOPIC_AUTHORIZATION_FAILED,
                     "creating a set takes an admin key");
        return;
    }
    sl_set *set = NULL;
    sl_error err = {0};
    if (sl_sets_get(r->k->sets, nm, false, &set, &err) == 0) {
        snprintf(msg, sizeof msg, "set %s exists", nm);
        topic_result(r, name, SL_KERR_TOPIC_ALREADY_EXISTS, msg);
        return;
    }
    if (repl != -1 && repl != 1) {
        topic_result(r, name, SL_KERR_INVALID_REPLICATION_FACTOR,
                     "sluice is a single broker: replication factor 1 (or -1)");
        return;
    }
    if (manual) {
        topic_result(r, name, SL_KERR_INVALID_REQUEST,
                     "manual replica assignments are not supported: give num_partitions");
        return;
    }
    sl_set_config cfg = *sl_sets_defaults(r->k->sets);
    if (parts != -1 && (parts < 1 || parts > 1024)) {
        topic_result(r, name, SL_KERR_INVALID_PARTITIONS, "partitions: 1 to 1024 (or -1)");
        return;
    }
    if (parts != -1)
        cfg.partitions = parts;
    if (cfg.backend != SL_BACKEND_LOG) {
        topic_result(r, name, SL_KERR_INVALID_CONFIG,
                     "new sets are Kafka-backed on this server: create the topic on its cluster");
        return;
    }
    if (!validate_only && sl_sets_define(r->k->sets, nm, &cfg, &set, &err) != 0) {
        snprintf(msg, sizeof msg, "set %s: %s", nm, err.msg[0] ? err.msg : "cannot create");
        topic_result(r, name, SL_KERR_UNKNOWN_SERVER_ERROR, msg);
        return;
    }
    topic_result(r, name, SL_KERR_NONE, NULL);
}

int sl__kafka_create_topics(sl_kreq *r)
{
    int16_t v = r->h.version;
    sl_kr *in = &r->body;
    int32_t n = sl_kr_array(in, false, 2 + 4 + 2 + 4 + 4);
    sl_kr first = *in;
    /* Parsed whole first: a malformed request closes before anything is
     * created. */
    for (int32_t i = 0; i < n; i++) {
        sl_kr_str(in, false);
        sl_kr_i32(in);
        sl_kr_i16(in);
        int32_t na = sl_kr_array(in, false, 8);
        for (int32_t a = 0; a < na; a++) {
            sl_kr_i32(in);
            int32_t nb = sl_kr_array(in, false, 4);
            sl_kr_skip(in, 4 * (size_t)(nb > 0 ? nb : 0));
        }
        int32_t nc = sl_kr_array(in, false, 4);
        for (int32_t c = 0; c < nc; c++) {
            sl_kr_str(in, false);
            sl_kr_str(in, false);
        }
    }
    sl_kr_i32(in); /* timeout_ms */
    bool validate_only = v >= 1 && sl_kr_i8(in) != 0;
    if (!sl_kr_ok(in) || n < 0) {
        sl__kafka_log_once(r, "kafka: %s sent a malformed CreateTopics v%d: closed", r->peer, v);
        return SL_KREQ_CLOSE;
    }
    if (v >= 2)
        sl_kw_i32(&r->w, 0); /* throttle_time_ms */
    sl_kw_array(&r->w, false, n);
    for (int32_t i = 0; i < n; i++) {
        sl_kstr name = sl_kr_str(&first, false);
        int32_t parts = sl_kr_i32(&first);
        int16_t repl = sl_kr_i16(&first);
        int32_t na = sl_kr_array(&first, false, 8);
        for (int32_t a = 0; a < na; a++) {
            sl_kr_i32(&first);
            int32_t nb = sl_kr_array(&first, false, 4);
            sl_kr_skip(&first, 4 * (size_t)(nb > 0 ? nb : 0));
        }
        int32_t nc = sl_kr_array(&first, false, 4);
        for (int32_t c = 0; c < nc; c++) {
            sl_kr_str(&first, false);
            sl_kr_str(&first, false);
        }
        create_one(r, name, parts, repl, na > 0, validate_only);
    }
    return SL_KREQ_DONE;
}

int sl__kafka_delete_topics(sl_kreq *r)
{
    sl_kr *in = &r->body;
    int32_t n = sl_kr_array(in, false, 2);
    sl_kr first = *in;
    for (int32_t i = 0; i < n; i++)
        sl_kr_str(in, false);
    sl_kr_i32(in); /* timeout_ms */
    if (!sl_kr_ok(in) || n < 0) {
        sl__kafka_log_once(r, "kafka: %s sent a malformed DeleteTopics: closed", r->peer);
        return SL_KREQ_CLOSE;
    }
    if (r->h.version >= 1)
        sl_kw_i32(&r->w, 0); /* throttle_time_ms */
    sl_kw_array(&r->w, false, n);
    for (int32_t i = 0; i < n; i++) {
        sl_kstr name = sl_kr_str(&first, false);
        sl_set *set = NULL;
        int16_t code = sl__kafka_topic(r, name, false, &set);
        if (!code && !sl__kafka_allowed(r, SL_AUTH_ADMIN, set->name))
            code = SL_KERR_TOPIC_AUTHORIZATION_FAILED;
        sl_error err = {0};
        if (!code && r->k->hooks.may_delete &&
            r->k->hooks.may_delete(r->k->hooks.ctx, set, &err) != 0) {
            /* DeleteTopics v0-1 has no message: the reason goes to the log. */
            sl__kafka_log_once(r, "kafka: %s may not delete set %s: %s", r->peer, set->name,
                               err.msg);
            code = SL_KERR_POLICY_VIOLATION;
        }
        if (!code && sl_sets_delete(r->k->sets, set->name, &err) != 0) {
            sl__kafka_log_once(r, "kafka: deleting set %s: %s", set->name, err.msg);
            code = SL_KERR_UNKNOWN_SERVER_ERROR;
        }
        sl_kw_str(&r->w, false, name.p ? name.p : "", name.p ? name.len : 0);
        sl_kw_i16(&r->w, code);
    }
    return SL_KREQ_DONE;
}
