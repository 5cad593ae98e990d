/*
 * kafka/kcoord.c — the group coordinator's membership side (kcoord.h):
 * FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
 * DescribeGroups, ListGroups, the rebalance state machine and the timer
 * thread that ends rebalances and expires sessions.
 *
 * The partition assignment itself is the clients' (the leader computes it,
 * as Kafka's consumer protocol has it): the coordinator only chooses the
 * protocol every member supports, hands the leader everyone's metadata and
 * passes the leader's assignments on.
 */
#include "kafka/kcoord.h"

#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/slog.h"
#include "core/bus/event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- groups and members ---------------------------------------------------- */

static char *dup_kstr(sl_kstr s)
{
    if (!s.p)
        return NULL;
    char *d = malloc((size_t)s.len + 1);
    if (d) {
        memcpy(d, s.p, (size_t)s.len);
        d[s.len] = '\0';
    }
    return d;
}

kgroup *sl__kcoord_group(sl_kcoord *c, const char *id, bool create)
{
    for (size_t i = 0; i < c->ng; i++)
        if (!strcmp(c->g[i]->id, id))
            return c->g[i];
    if (!create || (c->ng == c->gcap && SL_GROW(c->g, c->gcap, 16)))
        return NULL;
    kgroup *g = calloc(1, sizeof *g);
    if (!g || !(g->id = strdup(id))) {
        free(g);
        return NULL;
    }
    c->g[c->ng++] = g;
    return g;
}

kmember *sl__kcoord_member(kgroup *g, const char *id)
{
    for (size_t i = 0; i < g->nm; i++)
        if (!strcmp(g->m[i]->id, id))
            return g->m[i];
    return NULL;
}

static kmember *by_instance(kgroup *g, const char *instance)
{
    for (size_t i = 0; i < g->nm; i++)
        if (g->m[i]->instance && !strcmp(g->m[i]->instance, instance))
            return g->m[i];
    return NULL;
}

size_t sl__kcoord_active(const kgroup *g)
{
    size_t n = 0;
    for (size_t i = 0; i < g->nm; i++)
        n += !g->m[i]->pending;
    return n;
}

const char *sl__kcoord_state_name(int state)
{
    switch (state) {
    case KG_PREPARING:
        return "PreparingRebalance";
    case KG_COMPLETING:
        return "CompletingRebalance";
    case KG_STABLE:
        return "Stable";
    default:
        return "Empty";
    }
}

bool sl__kcoord_group_id(sl_kstr s, char *out, size_t cap)
{
    return sl_kstr_copy(s, out, cap) && out[0] && sl_json_utf8_valid(out, strlen(out));
}

void sl__kcoord_read_ref(sl_kr *b, int16_t version, int16_t instance_from, kmember_ref *out)
{
    out->group_ok = sl__kcoord_group_id(sl_kr_str(b, false), out->group, sizeof out->group);
    out->gen = sl_kr_i32(b);
    out->member_ok = sl_kstr_copy(sl_kr_str(b, false), out->member, sizeof out->member);
    if (version >= instance_from)
        sl_kr_str(b, false);
}

bool sl__kcoord_allowed(const sl_kreq *r)
{
    return sl__kafka_allowed(r, SL_AUTH_READ_SOME, NULL);
}

static void protos_free(kmember *m)
{
    for (int32_t i = 0; i < m->nprotos; i++) {
        free(m->protos[i].name);
        free(m->protos[i].meta);
    }
    free(m->protos);
    m->protos = NULL;
    m->nprotos = 0;
}

static const kproto *proto_of(const kmember *m, const char *name)
{
    for (int32_t i = 0; name && i < m->nprotos; i++)
        if (!strcmp(m->protos[i].name, name))
            return &m->protos[i];
    return NULL;
}

/* ---- parked requests -------------------------------------------------------- */

static int park_resume(sl_kreq *r)
{
    (void)r; /* the response was written by whoever posted */
    return SL_KREQ_DONE;
}

static bool park_cancel(sl_kreq *r)
{
    kpark *p = r->state;
    sl_kcoord *c = r->k->coord;
    pthread_mutex_lock(&c->mu);
    bool cancelled = !p->done;
    if (cancelled) {
        if (p->sync)
            p->m->sync = NULL;
        else
            p->m->join = NULL;
        p->done = true;
    }
    pthread_mutex_unlock(&c->mu);
    return cancelled;
}

static void park_cleanup(sl_kreq *r)
{
    free(r->state);
    r->state = NULL;
}

static int park(sl_kreq *r, kmember *m, bool sync)
{
    kpark *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->r = r;
    p->m = m;
    p->sync = sync;
    r->state = p;
    r->resume = park_resume;
    r->cancel = park_cancel;
    r->cleanup = park_cleanup;
    if (sync)
        m->sync = p;
    else
        m->join = p;
    return 0;
}

/* Takes a parked request off its member for answering: the caller writes
 * its response and posts it. */
static sl_kreq *unpark(kpark *p)
{
    if (p->sync)
        p->m->sync = NULL;
    else
        p->m->join = NULL;
    p->done = true;
    p->m = NULL;
    return p->r;
}

/* ---- responses ---------------------------------------------------------------- */

/* A JoinGroup response; members (the leader's) lists everyone's metadata
 * for the chosen protocol. */
static void join_resp(sl_kreq *r, int16_t err, const kgroup *g, const char *member_id,
                      bool members)
{
    sl_kw *w = &r->w;
    int16_t v = r->h.version;
    if (v >= 2)
        sl_kw_i32(w, 0);
    sl_kw_i16(w, err);
    sl_kw_i32(w, err ? -1 : g->gen);
    sl_kw_str(w, false, err || !g->proto ? "" : g->proto, -1);
    sl_kw_str(w, false, err || !g->leader ? "" : g->leader, -1);
    sl_kw_str(w, false, member_id ? member_id : "", -1);
    if (!members || err) {
        sl_kw_array(w, false, 0);
        return;
    }
    int32_t n = (int32_t)sl__kcoord_active(g);
    sl_kw_array(w, false, n);
    for (size_t i = 0; i < g->nm; i++) {
        const kmember *m = g->m[i];
        if (m->pending)
            continue;
        const kproto *p = proto_of(m, g->proto);
        sl_kw_str(w, false, m->id, -1);
        if (v >= 5)
            sl_kw_str(w, false, m->instance, -1);
        sl_kw_bytes(w, false, p ? p->meta : (const uint8_t *)"", p ? p->len : 0);
    }
}

static void sync_resp(sl_kreq *r, int16_t err, const kmember *m)
{
    if (r->h.version >= 1)
        sl_kw_i32(&r->w, 0);
    sl_kw_i16(&r->w, err);
    if (!err && m && m->assign)
        sl_kw_bytes(&r->w, false, m->assign, m->assign_len);
    else
        sl_kw_bytes(&r->w, false, "", 0);
}

/* Answers m's parked requests with err (a rebalance began, the member is
 * gone, the coordinator stops). */
static void answer_parked(kmember *m, int16_t jerr, int16_t serr)
{
    if (m->join) {
        sl_kreq *r = unpark(m->join);
        join_resp(r, jerr, NULL, m->id, false);
        sl_kreq_post(r);
    }
    if (m->sync) {
        sl_kreq *r = unpark(m->sync);
        sync_resp(r, serr, NULL);
        sl_kreq_post(r);
    }
}

static void member_free(kmember *m)
{
    if (!m)
        return;
    answer_parked(m, SL_KERR_UNKNOWN_MEMBER_ID, SL_KERR_UNKNOWN_MEMBER_ID);
    protos_free(m);
    free(m->assign);
    free(m->id);
    free(m->instance);
    free(m);
}

static void member_remove(kgroup *g, size_t i)
{
    kmember *m = g->m[i];
    if (g->leader && !strcmp(g->leader, m->id)) {
        free(g->leader);
        g->leader = NULL;
    }
    member_free(m);
    g->m[i] = g->m[--g->nm];
}

/* ---- the state machine ---------------------------------------------------- */

/* Starts (or keeps) a rebalance: every member has to rejoin before
 * deadline_ms; followers waiting for their assignment of the old generation
 * learn about it. */
static void prepare(kgroup *g, int64_t now)
{
    if (g->state == KG_PREPARING)
        return;
    bool first = g->state == KG_EMPTY;
    g->state = KG_PREPARING;
    int32_t longest = 0;
    for (size_t i = 0; i < g->nm; i++) {
        kmember *m = g->m[i];
        m->joined = false;
        if (m->sync) {
            sl_kreq *r = unpark(m->sync);
            sync_resp(r, SL_KERR_REBALANCE_IN_PROGRESS, NULL);
            sl_kreq_post(r);
        }
        if (m->rebalance_ms > longest)
            longest = m->rebalance_ms;
    }
    g->deadline_ms = now + (longest > 0 ? longest : KCOORD_INITIAL_DELAY_MS);
    g->delay_ms = first ? now + KCOORD_INITIAL_DELAY_MS : now;
    if (g->delay_ms > g->deadline_ms)
        g->delay_ms = g->deadline_ms;
}

/* The protocol every active member supports that most of them prefer
 * (Kafka's vote: each member votes for its first supported candidate; ties
 * go to the earlier candidate in the first member's order). */
static const char *choose(const kgroup *g)
{
    const kmember *first = NULL;
    for (size_t i = 0; i < g->nm && !first; i++)
        if (!g->m[i]->pending)
            first = g->m[i];
    if (!first)
        return NULL;
    const char *best = NULL;
    size_t best_votes = 0;
    for (int32_t c = 0; c < first->nprotos; c++) {
        const char *cand = first->protos[c].name;
        bool everyone = true;
        for (size_t i = 0; i < g->nm && everyone; i++)
            everyone = g->m[i]->pending || proto_of(g->m[i], cand);
        if (!everyone)
            continue;
        size_t votes = 0;
        for (size_t i = 0; i < g->nm; i++) {
            const kmember *m = g->m[i];
            if (m->pending)
                continue;
            /* m's vote: its first protocol everyone supports. */
            for (int32_t j = 0; j < m->nprotos; j++) {
                bool all = true;
                for (size_t k = 0; k < g->nm && all; k++)
                    all = g->m[k]->pending || proto_of(g->m[k], m->protos[j].name);
                if (all) {
                    votes += !strcmp(m->protos[j].name, cand);
                    break;
                }
            }
        }
        if (!best || votes > best_votes) {
            best = cand;
            best_votes = votes;
        }
    }
    return best;
}

/* Ends a rebalance when everyone rejoined (and a first one's short delay
 * passed) or its time is up: members that did not rejoin are dropped, the
 * generation moves on and every parked JoinGroup is answered, the leader's
 * with the members' metadata. */
static void try_complete(kgroup *g, int64_t now)
{
    if (g->state != KG_PREPARING)
        return;
    bool all = true;
    for (size_t i = 0; i < g->nm && all; i++)
        all = g->m[i]->pending || g->m[i]->joined;
    if (!(all && now >= g->delay_ms) && now < g->deadline_ms)
        return;
    for (size_t i = g->nm; i-- > 0;)
        if (!g->m[i]->pending && !g->m[i]->joined)
            member_remove(g, i);
    g->gen++;
    free(g->proto);
    g->proto = NULL;
    if (!sl__kcoord_active(g)) {
        g->state = KG_EMPTY; /* its protocol type stays, as Kafka keeps it */
        free(g->leader);
        g->leader = NULL;
        return;
    }
    const char *p = choose(g);
    g->proto = p ? strdup(p) : NULL;
    if (!g->leader) {
        for (size_t i = 0; i < g->nm && !g->leader; i++)
            if (!g->m[i]->pending)
                g->leader = strdup(g->m[i]->id);
    }
    g->state = KG_COMPLETING;
    for (size_t i = 0; i < g->nm; i++) {
        kmember *m = g->m[i];
        free(m->assign);
        m->assign = NULL;
        m->assign_len = 0;
        if (m->join) {
            sl_kreq *r = unpark(m->join);
            join_resp(r, SL_KERR_NONE, g, m->id, g->leader && !strcmp(g->leader, m->id));
            sl_kreq_post(r);
        }
        m->seen_ms = now; /* its session starts again with the new generation */
    }
}

/* The timer's pass over one group: expired sessions and pending member
 * ids, then a rebalance that may be due. */
static void tick(kgroup *g, int64_t now)
{
    bool gone = false;
    for (size_t i = g->nm; i-- > 0;) {
        kmember *m = g->m[i];
        /* A member waiting in JoinGroup or SyncGroup is not expired (Kafka
         * never expires a member with a request waiting; a join is bounded
         * by the rebalance's own deadline). */
        if (m->join || m->sync || now - m->seen_ms <= m->session_ms)
            continue;
        if (!m->pending) {
            sl_slog(SL_SLOG_INFO, "kafka", "group \"%s\": member %s left (session timeout %d ms)",
                    g->id, m->id, m->session_ms);
            gone = true;
        }
        member_remove(g, i);
    }
    if (gone && (g->state == KG_STABLE || g->state == KG_COMPLETING))
        prepare(g, now);
    try_complete(g, now);
}

static void *timer_main(void *arg)
{
    sl_kcoord *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec dl = sl_clock_mono_deadline(100);
        pthread_cond_timedwait(&c->cv, &c->mu, &dl);
        if (c->stop)
            break;
        int64_t now = sl_clock_mono_ms();
        for (size_t i = 0; i < c->ng; i++)
            tick(c->g[i], now);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------- */

int sl__kcoord_open(sl_kafka *k, sl_error *err)
{
    sl_kcoord *c = calloc(1, sizeof *c);
    if (!c)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(c->dir, sizeof c->dir, "%s/kafka/groups", k->data_dir);
    k->coord = c;
    int rc = sl__koffsets_load(c, err);
    if (!rc) {
        rc = pthread_create(&c->timer, NULL, timer_main, c);
        if (rc)
            rc = sl_error_errno(err, rc, "kafka group timer thread");
        else
            c->timer_on = true;
    }
    if (rc)
        sl__kcoord_close(k);
    return rc;
}

void sl__kcoord_stop(sl_kafka *k)
{
    sl_kcoord *c = k->coord;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    /* NOT_COORDINATOR sends clients looking for the coordinator again,
     * which is what they should do when this broker comes back. */
    for (size_t i = 0; i < c->ng; i++)
        for (size_t j = 0; j < c->g[i]->nm; j++)
            answer_parked(c->g[i]->m[j], SL_KERR_NOT_COORDINATOR, SL_KERR_NOT_COORDINATOR);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->timer_on) {
        pthread_join(c->timer, NULL);
        c->timer_on = false;
    }
}

void sl__kcoord_close(sl_kafka *k)
{
    sl_kcoord *c = k->coord;
    if (!c)
        return;
    sl__kcoord_stop(k);
    for (size_t i = 0; i < c->ng; i++) {
        kgroup *g = c->g[i];
        for (size_t j = 0; j < g->nm; j++)
            member_free(g->m[j]);
        free(g->m);
        sl__koffsets_free(g);
        free(g->id);
        free(g->ptype);
        free(g->proto);
        free(g->leader);
        free(g);
    }
    free(c->g);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    k->coord = NULL;
}

/* ---- FindCoordinator v0-2 ------------------------------------------------- */

int sl__kafka_find_coordinator(sl_kreq *r)
{
    int16_t v = r->h.version;
    sl_kstr key = sl_kr_str(&r->body, false);
    int8_t type = v >= 1 ? sl_kr_i8(&r->body) : 0;
    if (!sl_kr_ok(&r->body) || !key.p) {
        sl__kafka_log_once(r, "malformed FindCoordinator v%d request", v);
        return SL_KREQ_CLOSE;
    }
    int16_t err = SL_KERR_NONE;
    const char *msg = NULL;
    if (type != 0) {
        /* Not COORDINATOR_NOT_AVAILABLE: clients retry that for long; this
         * one ends a transactional producer's start at once. */
        err = SL_KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        msg = "sluice has no transaction coordinator (transactions are not supported)";
    } else if (!sl__kcoord_allowed(r)) {
        err = SL_KERR_GROUP_AUTHORIZATION_FAILED;
    }
    if (v >= 1)
        sl_kw_i32(&r->w, 0);
    sl_kw_i16(&r->w, err);
    if (v >= 1)
        sl_kw_str(&r->w, false, msg, -1);
    sl_kw_i32(&r->w, err ? -1 : SL_KAFKA_NODE_ID);
    sl_kw_str(&r->w, false, err ? "" : r->k->adv_host, -1);
    sl_kw_i32(&r->w, err ? -1 : r->k->adv_port);
    return SL_KREQ_DONE;
}

/* ---- JoinGroup v0-5 ----------------------------------------------------- */

typedef struct join_req {
    char group[KCOORD_GROUP_ID_MAX + 1];
    char member[KCOORD_MEMBER_ID_MAX + 1];
    sl_kstr instance, ptype;
    int32_t session_ms, rebalance_ms;
    int32_t nprotos;
    const uint8_t *protos_at; /* the protocols array's elements, re-read */
    size_t protos_len;
    bool group_ok, member_ok;
} join_req;

static bool join_parse(sl_kreq *r, join_req *q)
{
    sl_kr *b = &r->body;
    int16_t v = r->h.version;
    q->group_ok = sl__kcoord_group_id(sl_kr_str(b, false), q->group, sizeof q->group);
    q->session_ms = sl_kr_i32(b);
    q->rebalance_ms = v >= 1 ? sl_kr_i32(b) : q->session_ms;
    q->member_ok = sl_kstr_copy(sl_kr_str(b, false), q->member, sizeof q->member);
    q->instance = v >= 5 ? sl_kr_str(b, false) : (sl_kstr){NULL, -1};
    q->ptype = sl_kr_str(b, false);
    q->nprotos = sl_kr_array(b, false, 6);
    q->protos_at = b->p;
    for (int32_t i = 0; i < q->nprotos; i++) {
        sl_kr_str(b, false);
        sl_kr_bytes(b, false);
    }
    q->protos_len = sl_kr_ok(b) ? (size_t)(b->p - q->protos_at) : 0;
    return sl_kr_ok(b) && q->ptype.p;
}

/* m's protocols from the request (replacing what it had). */
static int set_protos(kmember *m, const join_req *q)
{
    kproto *p = calloc(q->nprotos ? (size_t)q->nprotos : 1, sizeof *p);
    if (!p)
        return -1;
    sl_kr rr;
    sl_kr_init(&rr, q->protos_at, q->protos_len);
    for (int32_t i = 0; i < q->nprotos; i++) {
        sl_kstr name = sl_kr_str(&rr, false);
        sl_kstr meta = sl_kr_bytes(&rr, false);
        p[i].name = dup_kstr(name);
        p[i].len = meta.len > 0 ? meta.len : 0;
        p[i].meta = malloc(p[i].len ? (size_t)p[i].len : 1);
        if (!p[i].name || !p[i].meta) {
            for (int32_t j = 0; j <= i; j++) {
                free(p[j].name);
                free(p[j].meta);
            }
            free(p);
            return -1;
        }
        if (p[i].len)
            memcpy(p[i].meta, meta.p, (size_t)p[i].len);
    }
    protos_free(m);
    m->protos = p;
    m->nprotos = q->nprotos;
    return 0;
}

/* Whether the request's protocols equal m's (a rejoin that changes nothing
 * needs no rebalance). */
static bool same_protos(const kmember *m, const join_req *q)
{
    if (m->nprotos != q->nprotos)
        return false;
    sl_kr rr;
    sl_kr_init(&rr, q->protos_at, q->protos_len);
    for (int32_t i = 0; i < q->nprotos; i++) {
        sl_kstr name = sl_kr_str(&rr, false);
        sl_kstr meta = sl_kr_bytes(&rr, false);
        const kproto *p = &m->protos[i];
        if (!sl_kstr_eq(name, p->name) || (meta.len > 0 ? meta.len : 0) != p->len ||
            (p->len && memcmp(meta.p, p->meta, (size_t)p->len)))
            return false;
    }
    return true;
}

/* Whether the request's protocols share one with every active member
 * other than self (and its type is the group's). */
static bool compatible(const kgroup *g, const kmember *self, const join_req *q)
{
    if (!g->ptype || !sl__kcoord_active(g) ||
        (sl__kcoord_active(g) == 1 && self && !self->pending))
        return true;
    if (!sl_kstr_eq(q->ptype, g->ptype))
        return false;
    sl_kr rr;
    sl_kr_init(&rr, q->protos_at, q->protos_len);
    for (int32_t i = 0; i < q->nprotos; i++) {
        sl_kstr name = sl_kr_str(&rr, false);
        sl_kr_bytes(&rr, false);
        char nm[256];
        if (!sl_kstr_copy(name, nm, sizeof nm))
            continue;
        bool all = true;
        for (size_t j = 0; j < g->nm && all; j++)
            all = g->m[j] == self || g->m[j]->pending || proto_of(g->m[j], nm);
        if (all)
            return true;
    }
    return false;
}

static kmember *member_new(kgroup *g, sl_kreq *r, const join_req *q)
{
    if (g->nm == g->mcap && SL_GROW(g->m, g->mcap, 4))
        return NULL;
    kmember *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    /* The client id names the member in its id, GET /v1/groups and
     * DescribeGroups: printable ASCII kept, anything else '?' (ids are
     * JSON strings there). */
    snprintf(m->client_id, sizeof m->client_id, "%s", r->client_id);
    for (char *c = m->client_id; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            *c = '?';
    char uuid[37];
    sl_event_uuid7(sl_clock_now_ms(), uuid);
    const char *prefix = m->client_id[0] ? m->client_id : "member";
    size_t n = strlen(prefix) + 1 + sizeof uuid;
    m->id = malloc(n);
    if (q->instance.p)
        m->instance = dup_kstr(q->instance);
    if (!m->id || (q->instance.p && !m->instance)) {
        free(m->id);
        free(m->instance);
        free(m);
        return NULL;
    }
    snprintf(m->id, n, "%s-%s", prefix, uuid);
    const char *colon = strrchr(r->peer, ':');
    snprintf(m->host, sizeof m->host, "/%.*s", colon ? (int)(colon - r->peer) : 60, r->peer);
    g->m[g->nm++] = m;
    return m;
}

static int join_error(sl_kreq *r, int16_t err, const char *member)
{
    join_resp(r, err, NULL, member, false);
    return SL_KREQ_DONE;
}

int sl__kafka_join_group(sl_kreq *r)
{
    join_req q = {0};
    if (!join_parse(r, &q)) {
        sl__kafka_log_once(r, "malformed JoinGroup v%d request", r->h.version);
        return SL_KREQ_CLOSE;
    }
    if (!q.group_ok)
        return join_error(r, SL_KERR_INVALID_GROUP_ID, "");
    if (!q.member_ok)
        return join_error(r, SL_KERR_UNKNOWN_MEMBER_ID, "");
    if (!sl__kcoord_allowed(r))
        return join_error(r, SL_KERR_GROUP_AUTHORIZATION_FAILED, q.member);
    if (q.session_ms < KCOORD_MIN_SESSION_MS || q.session_ms > KCOORD_MAX_SESSION_MS)
        return join_error(r, SL_KERR_INVALID_SESSION_TIMEOUT, q.member);
    if (q.nprotos < 1 || !q.ptype.len)
        return join_error(r, SL_KERR_INCONSISTENT_GROUP_PROTOCOL, q.member);
    if (q.rebalance_ms < q.session_ms)
        q.rebalance_ms = q.session_ms;

    sl_kcoord *c = r->k->coord;
    int64_t now = sl_clock_mono_ms();
    int rc = SL_KREQ_DONE;
    pthread_mutex_lock(&c->mu);
    kgroup *g = sl__kcoord_group(c, q.group, true);
    kmember *m = NULL;
    char instance[KCOORD_MEMBER_ID_MAX + 1] = "";
    bool has_instance = q.instance.p && sl_kstr_copy(q.instance, instance, sizeof instance);
    bool fresh = false; /* a member new to the group in this request */
    if (!g) {
        join_error(r, SL_KERR_COORDINATOR_NOT_AVAILABLE, q.member);
        goto out;
    }
    if (c->stop) {
        join_error(r, SL_KERR_NOT_COORDINATOR, q.member);
        goto out;
    }
    if (q.member[0]) {
        m = sl__kcoord_member(g, q.member);
        if (!m) {
            join_error(r, SL_KERR_UNKNOWN_MEMBER_ID, q.member);
            goto out;
        }
    } else if (has_instance && (m = by_instance(g, instance))) {
        /* A static member back under a new id (KIP-345): the old id is
         * fenced, its place and assignment kept. */
        char uuid[37];
        sl_event_uuid7(sl_clock_now_ms(), uuid);
        size_t n = strlen(instance) + 1 + sizeof uuid;
        char *id = malloc(n);
        if (!id) {
            join_error(r, SL_KERR_COORDINATOR_NOT_AVAILABLE, q.member);
            goto out;
        }
        snprintf(id, n, "%s-%s", instance, uuid);
        answer_parked(m, SL_KERR_UNKNOWN_MEMBER_ID, SL_KERR_UNKNOWN_MEMBER_ID);
        if (g->leader && !strcmp(g->leader, m->id)) {
            free(g->leader);
            g->leader = strdup(id);
        }
        free(m->id);
        m->id = id;
    }
    if (!compatible(g, m, &q)) {
        join_error(r, SL_KERR_INCONSISTENT_GROUP_PROTOCOL, q.member);
        goto out;
    }
    if (!m) {
        if (sl__kcoord_active(g) >= KCOORD_MAX_MEMBERS) {
            join_error(r, SL_KERR_GROUP_MAX_SIZE_REACHED, "");
            goto out;
        }
        m = member_new(g, r, &q);
        if (!m) {
            join_error(r, SL_KERR_COORDINATOR_NOT_AVAILABLE, "");
            goto out;
        }
        fresh = true;
        m->session_ms = q.session_ms;
        m->seen_ms = now;
        /* v4+: the client must come back with the id it is given (KIP-394),
         * so a client that dies between the two leaves no member behind. */
        if (r->h.version >= 4 && !has_instance) {
            m->pending = true;
            join_error(r, SL_KERR_MEMBER_ID_REQUIRED, m->id);
            goto out;
        }
    }
    bool changed = m->pending || !same_protos(m, &q);
    bool was_pending = m->pending;
    if (set_protos(m, &q)) {
        if (was_pending)
            m->pending = true;
        join_error(r, SL_KERR_COORDINATOR_NOT_AVAILABLE, m->id);
        goto out;
    }
    m->pending = false;
    m->session_ms = q.session_ms;
    m->rebalance_ms = q.rebalance_ms;
    m->seen_ms = now;
    if (!g->ptype || sl__kcoord_active(g) == 1) { /* the first member sets it */
        char *t = dup_kstr(q.ptype);
        if (t) {
            free(g->ptype);
            g->ptype = t;
        }
    }
    /* A known member rejoining a stable group with what it had (a follower
     * that missed its JoinGroup response) gets the current generation
     * back; anything else is a rebalance. */
    bool leader = g->leader && !strcmp(g->leader, m->id);
    if ((g->state == KG_STABLE || g->state == KG_COMPLETING) && !changed && !leader) {
        join_resp(r, SL_KERR_NONE, g, m->id, false);
        goto out;
    }
    if (g->state != KG_PREPARING)
        prepare(g, now);
    else if ((fresh || was_pending) && g->delay_ms > now) /* more joiners: a first round waits on */
        g->delay_ms = now + KCOORD_INITIAL_DELAY_MS < g->deadline_ms
                          ? now + KCOORD_INITIAL_DELAY_MS
                          : g->deadline_ms;
    if (m->rebalance_ms > 0 && now + m->rebalance_ms > g->deadline_ms)
        g->deadline_ms = now + m->rebalance_ms;
    if (m->join) { /* a second JoinGroup while the first waits: the first loses */
        sl_kreq *old = unpark(m->join);
        join_resp(old, SL_KERR_REBALANCE_IN_PROGRESS, NULL, m->id, false);
        sl_kreq_post(old);
    }
    if (park(r, m, false)) {
        join_error(r, SL_KERR_COORDINATOR_NOT_AVAILABLE, m->id);
        goto out;
    }
    m->joined = true;
    rc = SL_KREQ_PENDING;
    /* The last member in completes the round at once (r may be answered
     * and posted here: the listener handles a post that precedes the
     * PENDING return). */
    try_complete(g, now);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- SyncGroup v0-3 --------------------------------------------------------- */

/* The group and member a Sync/Heartbeat names, or the error to answer. */
static int16_t find_member(sl_kcoord *c, const char *group, const char *member, int32_t gen,
                           kgroup **gp, kmember **mp)
{
    kgroup *g = sl__kcoord_group(c, group, false);
    kmember *m = g ? sl__kcoord_member(g, member) : NULL;
    *gp = g;
    *mp = m;
    if (c->stop)
        return SL_KERR_NOT_COORDINATOR;
    if (!m || m->pending)
        return SL_KERR_UNKNOWN_MEMBER_ID;
    m->seen_ms = sl_clock_mono_ms();
    if (gen != g->gen)
        return SL_KERR_ILLEGAL_GENERATION;
    return SL_KERR_NONE;
}

int sl__kafka_sync_group(sl_kreq *r)
{
    sl_kr *b = &r->body;
    int16_t v = r->h.version;
    kmember_ref ref;
    sl__kcoord_read_ref(b, v, 3, &ref);
    const char *group = ref.group, *member = ref.member;
    bool gok = ref.group_ok, mok = ref.member_ok;
    int32_t gen = ref.gen;
    int32_t n = sl_kr_array(b, false, 6);
    const uint8_t *assign_at = b->p;
    for (int32_t i = 0; i < n; i++) {
        sl_kr_str(b, false);
        sl_kr_bytes(b, false);
    }
    if (!sl_kr_ok(b)) {
        sl__kafka_log_once(r, "malformed SyncGroup v%d request", v);
        return SL_KREQ_CLOSE;
    }
    if (!gok || !group[0]) {
        sync_resp(r, SL_KERR_INVALID_GROUP_ID, NULL);
        return SL_KREQ_DONE;
    }
    if (!sl__kcoord_allowed(r)) {
        sync_resp(r, SL_KERR_GROUP_AUTHORIZATION_FAILED, NULL);
        return SL_KREQ_DONE;
    }
    sl_kcoord *c = r->k->coord;
    int rc = SL_KREQ_DONE;
    pthread_mutex_lock(&c->mu);
    kgroup *g;
    kmember *m;
    int16_t err = mok ? find_member(c, group, member, gen, &g, &m) : SL_KERR_UNKNOWN_MEMBER_ID;
    if (!err && g->state == KG_PREPARING)
        err = SL_KERR_REBALANCE_IN_PROGRESS;
    if (err) {
        sync_resp(r, err, NULL);
        goto out;
    }
    if (g->state == KG_STABLE) {
        sync_resp(r, SL_KERR_NONE, m);
        goto out;
    }
    /* CompletingRebalance: the leader's assignments end it; followers
     * wait for them. */
    if (!g->leader || strcmp(g->leader, m->id)) {
        if (m->sync) {
            sl_kreq *old = unpark(m->sync);
            sync_resp(old, SL_KERR_REBALANCE_IN_PROGRESS, NULL);
            sl_kreq_post(old);
        }
        if (park(r, m, true))
            sync_resp(r, SL_KERR_COORDINATOR_NOT_AVAILABLE, NULL);
        else
            rc = SL_KREQ_PENDING;
        goto out;
    }
    sl_kr rr;
    sl_kr_init(&rr, assign_at, (size_t)(b->p - assign_at));
    for (int32_t i = 0; i < n; i++) {
        char id[KCOORD_MEMBER_ID_MAX + 1];
        bool idok = sl_kstr_copy(sl_kr_str(&rr, false), id, sizeof id);
        sl_kstr a = sl_kr_bytes(&rr, false);
        kmember *t = idok ? sl__kcoord_member(g, id) : NULL;
        if (!t || t->pending || a.len <= 0)
            continue;
        uint8_t *copy = malloc((size_t)a.len);
        if (!copy) {
            sync_resp(r, SL_KERR_COORDINATOR_NOT_AVAILABLE, NULL);
            goto out;
        }
        memcpy(copy, a.p, (size_t)a.len);
        free(t->assign);
        t->assign = copy;
        t->assign_len = a.len;
    }
    g->state = KG_STABLE;
    for (size_t i = 0; i < g->nm; i++) {
        kmember *t = g->m[i];
        if (t->sync) {
            sl_kreq *w = unpark(t->sync);
            sync_resp(w, SL_KERR_NONE, t);
            sl_kreq_post(w);
            t->seen_ms = sl_clock_mono_ms();
        }
    }
    sync_resp(r, SL_KERR_NONE, m);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- Heartbeat v0-3 ----------------------------------------------------- */

int sl__kafka_heartbeat(sl_kreq *r)
{
    sl_kr *b = &r->body;
    int16_t v = r->h.version;
    kmember_ref ref;
    sl__kcoord_read_ref(b, v, 3, &ref);
    const char *group = ref.group, *member = ref.member;
    bool gok = ref.group_ok, mok = ref.member_ok;
    int32_t gen = ref.gen;
    if (!sl_kr_ok(b)) {
        sl__kafka_log_once(r, "malformed Heartbeat v%d request", v);
        return SL_KREQ_CLOSE;
    }
    int16_t err;
    if (!gok || !group[0]) {
        err = SL_KERR_INVALID_GROUP_ID;
    } else if (!sl__kcoord_allowed(r)) {
        err = SL_KERR_GROUP_AUTHORIZATION_FAILED;
    } else {
        sl_kcoord *c = r->k->coord;
        pthread_mutex_lock(&c->mu);
        kgroup *g;
        kmember *m;
        err = mok ? find_member(c, group, member, gen, &g, &m) : SL_KERR_UNKNOWN_MEMBER_ID;
        if (!err && g->state == KG_PREPARING)
            err = SL_KERR_REBALANCE_IN_PROGRESS;
        pthread_mutex_unlock(&c->mu);
    }
    if (v >= 1)
        sl_kw_i32(&r->w, 0);
    sl_kw_i16(&r->w, err);
    return SL_KREQ_DONE;
}

/* ---- LeaveGroup v0-3 --------------------------------------------------------- */

/* Removes the member named by id or instance; its error code. */
static int16_t leave_one(kgroup *g, const char *id, const char *instance, int64_t now)
{
    for (size_t i = 0; g && i < g->nm; i++) {
        kmember *m = g->m[i];
        if ((id && id[0] && !strcmp(m->id, id)) ||
            (instance && m->instance && !strcmp(m->instance, instance))) {
            bool active = !m->pending;
            member_remove(g, i);
            if (active) {
                if (g->state != KG_PREPARING)
                    prepare(g, now);
                try_complete(g, now);
            }
            return SL_KERR_NONE;
        }
    }
    return SL_KERR_UNKNOWN_MEMBER_ID;
}

int sl__kafka_leave_group(sl_kreq *r)
{
    sl_kr *b = &r->body;
    int16_t v = r->h.version;
    char group[KCOORD_GROUP_ID_MAX + 1];
    bool gok = sl__kcoord_group_id(sl_kr_str(b, false), group, sizeof group);
    int32_t n = 1;
    sl_kstr one = {NULL, -1};
    const uint8_t *at = NULL;
    if (v < 3) {
        one = sl_kr_str(b, false);
    } else {
        n = sl_kr_array(b, false, 3);
        at = b->p;
        for (int32_t i = 0; i < n; i++) {
            sl_kr_str(b, false);
            sl_kr_str(b, false);
        }
    }
    if (!sl_kr_ok(b)) {
        sl__kafka_log_once(r, "malformed LeaveGroup v%d request", v);
        return SL_KREQ_CLOSE;
    }
    int16_t err = SL_KERR_NONE;
    if (!gok || !group[0])
        err = SL_KERR_INVALID_GROUP_ID;
    else if (!sl__kcoord_allowed(r))
        err = SL_KERR_GROUP_AUTHORIZATION_FAILED;
    if (v >= 1)
        sl_kw_i32(&r->w, 0);
    sl_kcoord *c = r->k->coord;
    int64_t now = sl_clock_mono_ms();
    if (v < 3) {
        if (!err) {
            char id[KCOORD_MEMBER_ID_MAX + 1];
            pthread_mutex_lock(&c->mu);
            err = sl_kstr_copy(one, id, sizeof id)
                      ? leave_one(sl__kcoord_group(c, group, false), id, NULL, now)
                      : SL_KERR_UNKNOWN_MEMBER_ID;
            pthread_mutex_unlock(&c->mu);
        }
        sl_kw_i16(&r->w, err);
        return SL_KREQ_DONE;
    }
    size_t err_at = sl_kw_pos(&r->w);
    sl_kw_i16(&r->w, err);
    sl_kw_array(&r->w, false, err ? 0 : n);
    if (err)
        return SL_KREQ_DONE;
    sl_kr rr;
    sl_kr_init(&rr, at, (size_t)(b->p - at));
    pthread_mutex_lock(&c->mu);
    kgroup *g = sl__kcoord_group(c, group, false);
    for (int32_t i = 0; i < n; i++) {
        sl_kstr mid = sl_kr_str(&rr, false), inst = sl_kr_str(&rr, false);
        char id[KCOORD_MEMBER_ID_MAX + 1], in[KCOORD_MEMBER_ID_MAX + 1];
        bool idok = sl_kstr_copy(mid, id, sizeof id);
        bool inok = sl_kstr_copy(inst, in, sizeof in);
        int16_t e = leave_one(g, idok ? id : NULL, inok ? in : NULL, now);
        sl_kw_str(&r->w, false, mid.p ? mid.p : "", mid.p ? mid.len : 0);
        sl_kw_str(&r->w, false, inst.p, inst.len);
        sl_kw_i16(&r->w, e);
    }
    pthread_mutex_unlock(&c->mu);
    if (!g) { /* Kafka: a group it does not know answers for the whole request */
        r->out.len = err_at;
        sl_kw_i16(&r->w, SL_KERR_UNKNOWN_MEMBER_ID);
        sl_kw_array(&r->w, false, 0);
    }
    return SL_KREQ_DONE;
}

/* ---- DescribeGroups v0-2, ListGroups v0-2 ------------------------------------ */

int sl__kafka_describe_groups(sl_kreq *r)
{
    sl_kr *b = &r->body;
    int32_t n = sl_kr_array(b, false, 2);
    const uint8_t *at = b->p;
    for (int32_t i = 0; i < n; i++)
        sl_kr_str(b, false);
    if (!sl_kr_ok(b)) {
        sl__kafka_log_once(r, "malformed DescribeGroups v%d request", r->h.version);
        return SL_KREQ_CLOSE;
    }
    bool allowed = sl__kcoord_allowed(r);
    if (r->h.version >= 1)
        sl_kw_i32(&r->w, 0);
    sl_kw_array(&r->w, false, n < 0 ? 0 : n);
    sl_kr rr;
    sl_kr_init(&rr, at, (size_t)(b->p - at));
    sl_kcoord *c = r->k->coord;
    pthread_mutex_lock(&c->mu);
    for (int32_t i = 0; i < n; i++) {
        sl_kstr s = sl_kr_str(&rr, false);
        char id[KCOORD_GROUP_ID_MAX + 1];
        kgroup *g = NULL;
        int16_t err = SL_KERR_NONE;
        if (!allowed)
            err = SL_KERR_GROUP_AUTHORIZATION_FAILED;
        else if (!sl__kcoord_group_id(s, id, sizeof id))
            err = SL_KERR_INVALID_GROUP_ID;
        else
            g = sl__kcoord_group(c, id, false);
        sl_kw_i16(&r->w, err);
        sl_kw_str(&r->w, false, s.p ? s.p : "", s.p ? s.len : 0);
        /* A group nobody ever used is "Dead", as Kafka describes it. */
        sl_kw_str(&r->w, false, err ? "" : g ? sl__kcoord_state_name(g->state) : "Dead", -1);
        sl_kw_str(&r->w, false, g && g->ptype ? g->ptype : "", -1);
        sl_kw_str(&r->w, false, g && g->proto ? g->proto : "", -1);
        int32_t nm = g ? (int32_t)sl__kcoord_active(g) : 0;
        sl_kw_array(&r->w, false, nm);
        for (size_t j = 0; g && j < g->nm; j++) {
            const kmember *m = g->m[j];
            if (m->pending)
                continue;
            const kproto *p = g->state == KG_PREPARING ? NULL : proto_of(m, g->proto);
            sl_kw_str(&r->w, false, m->id, -1);
            sl_kw_str(&r->w, false, m->client_id, -1);
            sl_kw_str(&r->w, false, m->host, -1);
            sl_kw_bytes(&r->w, false, p ? p->meta : (const uint8_t *)"", p ? p->len : 0);
            sl_kw_bytes(&r->w, false, m->assign ? m->assign : (const uint8_t *)"",
                        m->assign ? m->assign_len : 0);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return SL_KREQ_DONE;
}

int sl__kafka_list_groups(sl_kreq *r)
{
    if (r->h.version >= 1)
        sl_kw_i32(&r->w, 0);
    if (!sl__kcoord_allowed(r)) {
        sl_kw_i16(&r->w, SL_KERR_CLUSTER_AUTHORIZATION_FAILED);
        sl_kw_array(&r->w, false, 0);
        return SL_KREQ_DONE;
    }
    sl_kw_i16(&r->w, SL_KERR_NONE);
    sl_kcoord *c = r->k->coord;
    pthread_mutex_lock(&c->mu);
    sl_kw_array(&r->w, false, (int32_t)c->ng);
    for (size_t i = 0; i < c->ng; i++) {
        sl_kw_str(&r->w, false, c->g[i]->id, -1);
        sl_kw_str(&r->w, false, c->g[i]->ptype ? c->g[i]->ptype : "", -1);
    }
    pthread_mutex_unlock(&c->mu);
    return SL_KREQ_DONE;
}
