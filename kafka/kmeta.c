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
