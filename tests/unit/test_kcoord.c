/*
 * tests/unit/test_kcoord.c — the Kafka group coordinator (kafka/kcoord.c,
 * kafka/koffsets.c) driven by hand-encoded requests, as a client sends them,
 * over real sets in a temporary data directory: FindCoordinator v0-2;
 * JoinGroup v4/v5's MEMBER_ID_REQUIRED round trip and the first rebalance's
 * initial delay; the leader's SyncGroup and Heartbeat; a second member's
 * rebalance (REBALANCE_IN_PROGRESS, generation 2, one leader, a follower's
 * SyncGroup parked until the leader's); ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
 * the protocol vote and INCONSISTENT_GROUP_PROTOCOL, an emptied group taking
 * another protocol type; OffsetCommit v2/v7 and OffsetFetch v1-5 (all
 * topics, unknown topics, commits from outside the group) and their file
 * surviving a close and open; LeaveGroup v0/v3 and the states
 * DescribeGroups and ListGroups show; session expiry, and waiting in
 * JoinGroup/SyncGroup not counting as a missed heartbeat; parked requests
 * whose connection closes (cancel) and the coordinator's stop; requests cut
 * short anywhere; GET /v1/groups' JSON with lag.
 *
 * The timer thread ends rebalances and sessions, so some tests sleep; no
 * assert bounds how long anything took from above (a loaded CI machine),
 * and waits for the timer are generous.
 */
#include "testutil.h"

#include "core/base/clock.h"
#include "kafka/kcoord.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 20000 /* for a parked request's answer: a safety net, not a bound */
#define CLIENT "test-client"
#define ID_MAX 128
#define AS_MAX (ID_MAX + 8) /* an assignment, "A:<member id>" */

typedef struct fx {
    char *dir;
    sl_sets *sets;
    sl_kafka k;
} fx;

static const char *g_client = CLIENT; /* the client id requests carry (NULL: null) */

static void coord_open(fx *f)
{
    sl_error err = {0};
    if (sl__kcoord_open(&f->k, &err))
        fail_msg("kcoord open: %s", err.msg);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    sl_sets_options o = {.data_dir = f->dir, .auto_create = true};
    sl_set_config_default(&o.defaults);
    sl_error err = {0};
    assert_int_equal(sl_sets_open(&o, &f->sets, &err), 0);
    sl_set *s;
    assert_int_equal(sl_sets_get(f->sets, "orders", true, &s, &err), 0);
    assert_int_equal(s->nparts, 4);
    f->k.sets = f->sets;
    snprintf(f->k.data_dir, sizeof f->k.data_dir, "%s", f->dir);
    snprintf(f->k.adv_host, sizeof f->k.adv_host, "127.0.0.1");
    f->k.adv_port = 19092;
    coord_open(f);
    g_client = CLIENT;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sl__kcoord_close(&f->k);
    sl_sets_close(f->sets);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* ---- requests ------------------------------------------------------------ */

/* Appends fields by fmt: s STRING (NULL: null), b BYTES of a C string,
 * c INT8, i INT32 (an ARRAY's count too: -1 is null), q INT64. */
static void venc(sl_kw *w, const char *fmt, va_list ap)
{
    for (const char *p; *fmt; fmt++) {
        if (*fmt == 's')
            sl_kw_str(w, false, va_arg(ap, const char *), -1);
        else if (*fmt == 'b' && (p = va_arg(ap, const char *)))
            sl_kw_bytes(w, false, p, (int32_t)strlen(p));
        else if (*fmt == 'c')
            sl_kw_i8(w, (int8_t)va_arg(ap, int));
        else if (*fmt == 'i')
            sl_kw_i32(w, va_arg(ap, int32_t));
        else if (*fmt == 'q')
            sl_kw_i64(w, va_arg(ap, int64_t));
        else
            fail_msg("bad field %c", *fmt);
    }
}

static void enc(sl_kw *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    venc(w, fmt, ap);
    va_end(ap);
}

/* Starts a request of (key, v) in b: its header (none of the versions here
 * are flexible). */
static void start(sl_buf *b, sl_kw *w, int16_t key, int16_t v)
{
    *b = (sl_buf){0};
    sl_kw_init(w, b);
    sl_kw_i16(w, key);
    sl_kw_i16(w, v);
    sl_kw_i32(w, 42);
    sl_kw_str(w, false, g_client, -1);
}

static sl_kreq *detach(fx *f, sl_buf *b)
{
    sl_kreq *r = sl__kreq_new_detached(&f->k, b->data, b->len);
    sl_buf_free(b);
    assert_non_null(r);
    return r;
}

/* A whole request of (key, v) with the body fmt (enc()). */
static sl_kreq *req(fx *f, int16_t key, int16_t v, const char *fmt, ...)
{
    sl_buf b;
    sl_kw w;
    start(&b, &w, key, v);
    va_list ap;
    va_start(ap, fmt);
    venc(&w, fmt, ap);
    va_end(ap);
    return detach(f, &b);
}

/* The answer of a request its handler returned code for: a parked one is
 * waited for (posted by another request or by the timer thread). */
static void settle(sl_kreq *r, int code)
{
    if (code == SL_KREQ_PENDING)
        code = sl__kreq_wait(r, WAIT_MS);
    assert_int_equal(code, SL_KREQ_DONE);
}

/* A reader on r's response body, past the throttle time when it has one. */
static sl_kr body(const sl_kreq *r, bool throttle)
{
    sl_kr in;
    sl_kr_init(&in, r->out.data, r->out.len);
    if (throttle)
        assert_int_equal(sl_kr_i32(&in), 0);
    return in;
}

static void at_end(const sl_kr *in)
{
    assert_true(sl_kr_ok(in));
    assert_int_equal(sl_kr_left(in), 0);
}

static void copy(sl_kstr s, char *out, size_t cap)
{
    assert_true(sl_kstr_copy(s, out, cap));
}

/* Runs r's handler fn, whose whole answer is [throttle] error; frees r. */
static int16_t error_only(sl_kreq *r, sl_kapi_fn *fn, bool throttle)
{
    assert_int_equal(fn(r), SL_KREQ_DONE);
    sl_kr in = body(r, throttle);
    int16_t err = sl_kr_i16(&in);
    at_end(&in);
    sl__kreq_free(r);
    return err;
}

/* JoinGroup v of member ("" for a new one), with session_ms (rebalance
 * timeout 10 s), type ptype and the comma-separated protos, each with the
 * metadata "M:<name>"; *code is what the handler returned. */
static sl_kreq *join(fx *f, int16_t v, const char *group, const char *member, int32_t session_ms,
                     const char *ptype, const char *protos, int *code)
{
    sl_buf b;
    sl_kw w;
    start(&b, &w, SL_KAPI_JOIN_GROUP, v);
    enc(&w, "si", group, session_ms);
    if (v >= 1)
        enc(&w, "i", 10000);
    enc(&w, v >= 5 ? "ss" : "s", member, NULL);
    int32_t n = 1;
    for (const char *p = protos; *p; p++)
        n += *p == ',';
    enc(&w, "si", ptype, n);
    for (const char *p = protos; n-- > 0; p += strcspn(p, ",") + 1) {
        int len = (int)strcspn(p, ",");
        char meta[64];
        sl_kw_str(&w, false, p, len);
        sl_kw_bytes(&w, false, meta, snprintf(meta, sizeof meta, "M:%.*s", len, p));
    }
    sl_kreq *r = detach(f, &b);
    *code = sl__kafka_join_group(r);
    return r;
}

typedef struct jres {
    int16_t err;
    int32_t gen;
    char proto[32], leader[ID_MAX], member[ID_MAX];
    int32_t n; /* the members list (the leader's) */
    char ids[4][ID_MAX], meta[4][64];
} jres;

/* Waits for a JoinGroup's answer and reads it into j; frees r. */
static void join_end(sl_kreq *r, int code, jres *j)
{
    settle(r, code);
    int16_t v = r->h.version;
    sl_kr in = body(r, v >= 2);
    j->err = sl_kr_i16(&in);
    j->gen = sl_kr_i32(&in);
    copy(sl_kr_str(&in, false), j->proto, sizeof j->proto);
    copy(sl_kr_str(&in, false), j->leader, sizeof j->leader);
    copy(sl_kr_str(&in, false), j->member, sizeof j->member);
    j->n = sl_kr_array(&in, false, 1);
    assert_true(j->n >= 0 && j->n <= 4);
    for (int32_t i = 0; i < j->n; i++) {
        copy(sl_kr_str(&in, false), j->ids[i], sizeof j->ids[i]);
        if (v >= 5)
            assert_null(sl_kr_str(&in, false).p); /* no group.instance.id */
        copy(sl_kr_bytes(&in, false), j->meta[i], sizeof j->meta[i]);
    }
    at_end(&in);
    sl__kreq_free(r);
}

static void join_wait(fx *f, int16_t v, const char *group, const char *member, int32_t session_ms,
                      const char *protos, jres *j)
{
    int code;
    sl_kreq *r = join(f, v, group, member, session_ms, "consumer", protos, &code);
    join_end(r, code, j);
}

/* SyncGroup v of member, giving ids[i] the assignment "A:<ids[i]>". */
static sl_kreq *sync_req(fx *f, int16_t v, const char *group, int32_t gen, const char *member,
                         int n, char (*ids)[ID_MAX], int *code)
{
    sl_buf b;
    sl_kw w;
    start(&b, &w, SL_KAPI_SYNC_GROUP, v);
    enc(&w, v >= 3 ? "siss" : "sis", group, gen, member, NULL);
    enc(&w, "i", n);
    for (int i = 0; i < n; i++) {
        char a[AS_MAX];
        snprintf(a, sizeof a, "A:%s", ids[i]);
        enc(&w, "sb", ids[i], a);
    }
    sl_kreq *r = detach(f, &b);
    *code = sl__kafka_sync_group(r);
    return r;
}

/* A SyncGroup's answer (waited for): its error, its assignment in a; frees r. */
static int16_t sync_end(sl_kreq *r, int code, char a[AS_MAX])
{
    settle(r, code);
    sl_kr in = body(r, r->h.version >= 1);
    int16_t err = sl_kr_i16(&in);
    copy(sl_kr_bytes(&in, false), a, AS_MAX);
    at_end(&in);
    sl__kreq_free(r);
    return err;
}

static int16_t sync_wait(fx *f, int16_t v, const char *group, int32_t gen, const char *member,
                         int n, char (*ids)[ID_MAX], char a[AS_MAX])
{
    int code;
    sl_kreq *r = sync_req(f, v, group, gen, member, n, ids, &code);
    return sync_end(r, code, a);
}

static int16_t heartbeat(fx *f, int16_t v, const char *group, int32_t gen, const char *member)
{
    sl_kreq *r = req(f, SL_KAPI_HEARTBEAT, v, v >= 3 ? "siss" : "sis", group, gen, member, NULL);
    return error_only(r, sl__kafka_heartbeat, v >= 1);
}

typedef struct dres {
    char state[32], ptype[16], proto[16];
    int32_t n;
    char ids[4][ID_MAX], assign[4][AS_MAX];
} dres;

/* DescribeGroups v1 of one group. */
static void describe(fx *f, const char *group, dres *d)
{
    sl_kreq *r = req(f, SL_KAPI_DESCRIBE_GROUPS, 1, "is", 1, group);
    assert_int_equal(sl__kafka_describe_groups(r), SL_KREQ_DONE);
    sl_kr in = body(r, true);
    assert_int_equal(sl_kr_array(&in, false, 1), 1);
    assert_int_equal(sl_kr_i16(&in), 0);
    assert_true(sl_kstr_eq(sl_kr_str(&in, false), group));
    copy(sl_kr_str(&in, false), d->state, sizeof d->state);
    copy(sl_kr_str(&in, false), d->ptype, sizeof d->ptype);
    copy(sl_kr_str(&in, false), d->proto, sizeof d->proto);
    d->n = sl_kr_array(&in, false, 1);
    assert_true(d->n >= 0 && d->n <= 4);
    for (int32_t i = 0; i < d->n; i++) {
        copy(sl_kr_str(&in, false), d->ids[i], sizeof d->ids[i]);
        assert_true(sl_kstr_eq(sl_kr_str(&in, false), CLIENT));
        assert_true(sl_kstr_eq(sl_kr_str(&in, false), "/test")); /* the detached peer */
        sl_kr_bytes(&in, false);
        copy(sl_kr_bytes(&in, false), d->assign[i], sizeof d->assign[i]);
    }
    at_end(&in);
    sl__kreq_free(r);
}

static void assert_state(fx *f, const char *group, const char *state, int32_t members)
{
    dres d;
    describe(f, group, &d);
    assert_string_equal(d.state, state);
    assert_int_equal(d.n, members);
}

/* A member alone in a new group (JoinGroup v3, its own SyncGroup), which
 * is then Stable; its id in id, its generation returned. */
static int32_t solo(fx *f, const char *group, int32_t session_ms, char id[ID_MAX])
{
    jres j;
    join_wait(f, 3, group, "", session_ms, "range", &j);
    assert_int_equal(j.err, 0);
    assert_string_equal(j.leader, j.member);
    snprintf(id, ID_MAX, "%s", j.member);
    char a[AS_MAX];
    assert_int_equal(sync_wait(f, 1, group, j.gen, id, 1, (char(*)[ID_MAX])id, a), 0);
    assert_string_equal(a + 2, id);
    return j.gen;
}

/* Two members in generation 2 of a new group, not synced yet (the second
 * joins, the first rejoins): ids in id, the leader's index returned; *lj
 * the leader's JoinGroup answer. */
static int pair(fx *f, const char *group, int32_t session_ms, char id[2][ID_MAX], jres *lj)
{
    assert_int_equal(solo(f, group, session_ms, id[0]), 1);
    int code;
    sl_kreq *r = join(f, 3, group, "", session_ms, "consumer", "range", &code);
    assert_int_equal(code, SL_KREQ_PENDING); /* until the first one rejoins */
    assert_int_equal(heartbeat(f, 2, group, 1, id[0]), SL_KERR_REBALANCE_IN_PROGRESS);
    jres j[2];
    join_wait(f, 3, group, id[0], session_ms, "range", &j[0]);
    join_end(r, code, &j[1]);
    snprintf(id[1], ID_MAX, "%s", j[1].member);
    assert_string_not_equal(id[0], id[1]);
    assert_string_equal(j[0].member, id[0]);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(j[i].err, 0);
        assert_int_equal(j[i].gen, 2);
        assert_string_equal(j[i].leader, j[0].leader); /* one leader, the same for both */
    }
    int li = strcmp(j[0].leader, id[0]) ? 1 : 0;
    assert_string_equal(j[0].leader, id[li]);
    assert_int_equal(j[li].n, 2);
    assert_int_equal(j[!li].n, 0);
    *lj = j[li];
    return li;
}

/* One partition of an OffsetCommit (one topic entry each) and its answer. */
typedef struct off {
    const char *topic;
    int32_t part;
    int64_t offset;
    int32_t epoch;
    const char *meta;
    int16_t err;
} off;

static void commit(fx *f, int16_t v, const char *group, int32_t gen, const char *member, off *o,
                   int n)
{
    sl_buf b;
    sl_kw w;
    start(&b, &w, SL_KAPI_OFFSET_COMMIT, v);
    enc(&w, "sis", group, gen, member);
    if (v >= 7)
        enc(&w, "s", NULL); /* group_instance_id */
    if (v <= 4)
        enc(&w, "q", (int64_t)-1); /* retention_time_ms */
    enc(&w, "i", n);
    for (int i = 0; i < n; i++) {
        enc(&w, "siiq", o[i].topic, 1, o[i].part, o[i].offset);
        if (v >= 6)
            enc(&w, "i", o[i].epoch);
        enc(&w, "s", o[i].meta);
    }
    sl_kreq *r = detach(f, &b);
    assert_int_equal(sl__kafka_offset_commit(r), SL_KREQ_DONE);
    sl_kr in = body(r, v >= 3);
    assert_int_equal(sl_kr_array(&in, false, 1), n);
    for (int i = 0; i < n; i++) {
        assert_true(sl_kstr_eq(sl_kr_str(&in, false), o[i].topic));
        assert_int_equal(sl_kr_array(&in, false, 1), 1);
        assert_int_equal(sl_kr_i32(&in), o[i].part);
        o[i].err = sl_kr_i16(&in);
    }
    at_end(&in);
    sl__kreq_free(r);
}

/* One partition of an OffsetFetch answer. */
typedef struct got {
    int32_t part;
    int64_t offset;
    int32_t epoch;
    char meta[32]; /* "(null)" for a null one */
    int16_t err;
} got;

/* OffsetFetch v of "orders" partitions parts[0..n) (n < 0: a null topic
 * list, every committed partition; all are of "orders" here) into g; the
 * number answered, the v2+ group error in *gerr. */
static int32_t fetch(fx *f, int16_t v, const char *group, const int32_t *parts, int32_t n, got *g,
                     int16_t *gerr)
{
    sl_buf b;
    sl_kw w;
    start(&b, &w, SL_KAPI_OFFSET_FETCH, v);
    enc(&w, "si", group, n < 0 ? -1 : 1);
    if (n >= 0)
        enc(&w, "si", "orders", n);
    for (int32_t i = 0; i < n; i++)
        enc(&w, "i", parts[i]);
    sl_kreq *r = detach(f, &b);
    assert_int_equal(sl__kafka_offset_fetch(r), SL_KREQ_DONE);
    sl_kr in = body(r, v >= 3);
    int32_t nt = sl_kr_array(&in, false, 1), np = 0;
    assert_true(nt == 0 || nt == 1);
    for (int32_t t = 0; t < nt; t++) {
        assert_true(sl_kstr_eq(sl_kr_str(&in, false), "orders"));
        np = sl_kr_array(&in, false, 1);
        assert_true(np <= 8);
        for (int32_t i = 0; i < np; i++) {
            g[i].part = sl_kr_i32(&in);
            g[i].offset = sl_kr_i64(&in);
            g[i].epoch = v >= 5 ? sl_kr_i32(&in) : -1;
            sl_kstr m = sl_kr_str(&in, false);
            snprintf(g[i].meta, sizeof g[i].meta, "%.*s", m.p ? m.len : 6, m.p ? m.p : "(null)");
            g[i].err = sl_kr_i16(&in);
        }
    }
    *gerr = v >= 2 ? sl_kr_i16(&in) : 0;
    at_end(&in);
    sl__kreq_free(r);
    return np;
}

/* ---- tests --------------------------------------------------------------- */

static void test_find_coordinator(void **state)
{
    fx *f = *state;
    for (int16_t v = 0; v <= 2; v++) {
        for (int type = 0; type <= (v ? 1 : 0); type++) {
            sl_kreq *r = req(f, SL_KAPI_FIND_COORDINATOR, v, v ? "sc" : "s", "g", type);
            assert_int_equal(sl__kafka_find_coordinator(r), SL_KREQ_DONE);
            sl_kr in = body(r, v >= 1);
            int16_t err = sl_kr_i16(&in);
            sl_kstr msg = v >= 1 ? sl_kr_str(&in, false) : (sl_kstr){NULL, -1};
            int32_t node = sl_kr_i32(&in);
            sl_kstr host = sl_kr_str(&in, false);
            int32_t port = sl_kr_i32(&in);
            at_end(&in);
            if (type == 0) { /* a group's: sluice itself */
                assert_int_equal(err, 0);
                assert_null(msg.p);
                assert_int_equal(node, 0);
                assert_true(sl_kstr_eq(host, "127.0.0.1"));
                assert_int_equal(port, 19092);
            } else { /* a transaction coordinator: there is none, and it says why */
                assert_int_equal(err, SL_KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
                assert_true(msg.len > 0);
                assert_int_equal(node, -1);
            }
            sl__kreq_free(r); /* after the strings that point into its answer */
        }
    }
}

/* KIP-394's round trip, the first rebalance's delay, the leader's sync. */
static void test_join_sync_heartbeat(void **state)
{
    fx *f = *state;
    for (int16_t v = 4; v <= 5; v++) {
        const char *group = v == 4 ? "g4" : "g5";
        jres j;
        join_wait(f, v, group, "", 10000, "range", &j);
        assert_int_equal(j.err, SL_KERR_MEMBER_ID_REQUIRED);
        assert_int_equal(j.gen, -1);
        assert_int_equal(strncmp(j.member, CLIENT "-", strlen(CLIENT) + 1), 0);
        char id[ID_MAX];
        snprintf(id, sizeof id, "%s", j.member);
        /* Not a member until it comes back with the id. */
        assert_int_equal(heartbeat(f, 1, group, 0, id), SL_KERR_UNKNOWN_MEMBER_ID);
        assert_state(f, group, "Empty", 0);

        int code;
        int64_t t0 = sl_clock_mono_ms();
        sl_kreq *r = join(f, v, group, id, 10000, "consumer", "range", &code);
        assert_int_equal(code, SL_KREQ_PENDING); /* the initial delay: more may come */
        join_end(r, code, &j);
        assert_true(sl_clock_mono_ms() - t0 >= KCOORD_INITIAL_DELAY_MS - 5);
        assert_int_equal(j.err, 0);
        assert_int_equal(j.gen, 1);
        assert_string_equal(j.proto, "range");
        assert_string_equal(j.member, id);
        assert_string_equal(j.leader, id);
        assert_int_equal(j.n, 1);
        assert_string_equal(j.ids[0], id);
        assert_string_equal(j.meta[0], "M:range");
        assert_state(f, group, "CompletingRebalance", 1);

        char a[AS_MAX];
        assert_int_equal(sync_wait(f, 3, group, 1, id, 1, &id, a), 0);
        assert_memory_equal(a, "A:", 2);
        assert_string_equal(a + 2, id);
        dres d;
        describe(f, group, &d);
        assert_string_equal(d.state, "Stable");
        assert_string_equal(d.ptype, "consumer");
        assert_string_equal(d.proto, "range");
        assert_string_equal(d.assign[0], a);

        assert_int_equal(heartbeat(f, 0, group, 1, id), 0);
        assert_int_equal(heartbeat(f, 3, group, 1, id), 0);
        assert_int_equal(heartbeat(f, 3, group, 7, id), SL_KERR_ILLEGAL_GENERATION);
        assert_int_equal(heartbeat(f, 3, group, 1, "nobody"), SL_KERR_UNKNOWN_MEMBER_ID);
        assert_int_equal(heartbeat(f, 3, "no-such-group", 1, id), SL_KERR_UNKNOWN_MEMBER_ID);
        assert_int_equal(heartbeat(f, 3, "", 1, id), SL_KERR_INVALID_GROUP_ID);
        assert_int_equal(sync_wait(f, 2, group, 2, id, 0, NULL, a), SL_KERR_ILLEGAL_GENERATION);
        assert_int_equal(sync_wait(f, 2, group, 1, "nobody", 0, NULL, a),
                         SL_KERR_UNKNOWN_MEMBER_ID);
        /* Stable: a SyncGroup again gets the same assignment back. */
        assert_int_equal(sync_wait(f, 0, group, 1, id, 0, NULL, a), 0);
        assert_string_equal(a + 2, id);
    }
    jres j;
    join_wait(f, 5, "g5", "forged", 10000, "range", &j); /* an id the group never gave */
    assert_int_equal(j.err, SL_KERR_UNKNOWN_MEMBER_ID);
    join_wait(f, 3, "g5", "", 10, "range", &j);
    assert_int_equal(j.err, SL_KERR_INVALID_SESSION_TIMEOUT);
}

/* A second member: generation 2, the follower's SyncGroup waits for the
 * leader's; then they leave (v0, v3) and ListGroups lists what is left. */
static void test_rebalance_and_leave(void **state)
{
    fx *f = *state;
    char id[2][ID_MAX];
    jres lj;
    int li = pair(f, "pair", 10000, id, &lj), fi = !li;
    assert_true((!strcmp(lj.ids[0], id[0]) && !strcmp(lj.ids[1], id[1])) ||
                (!strcmp(lj.ids[0], id[1]) && !strcmp(lj.ids[1], id[0])));

    int code;
    sl_kreq *rf = sync_req(f, 1, "pair", 2, id[fi], 0, NULL, &code);
    assert_int_equal(code, SL_KREQ_PENDING);
    assert_int_equal(sl__kreq_wait(rf, 100), -1); /* nothing answers it before the leader */
    char a[AS_MAX];
    assert_int_equal(sync_wait(f, 1, "pair", 2, id[li], 2, id, a), 0);
    assert_string_equal(a + 2, id[li]);
    assert_int_equal(sync_end(rf, code, a), 0);
    assert_string_equal(a + 2, id[fi]); /* what the leader gave it */
    assert_int_equal(heartbeat(f, 1, "pair", 2, id[0]), 0);
    assert_int_equal(heartbeat(f, 1, "pair", 2, id[1]), 0);
    assert_int_equal(heartbeat(f, 1, "pair", 1, id[1]), SL_KERR_ILLEGAL_GENERATION);
    assert_state(f, "pair", "Stable", 2);

    /* LeaveGroup v0 of the follower: the leader has to rejoin, alone. */
    sl_kapi_fn *lv = sl__kafka_leave_group;
    assert_int_equal(error_only(req(f, SL_KAPI_LEAVE_GROUP, 0, "ss", "pair", id[fi]), lv, false),
                     0);
    assert_int_equal(error_only(req(f, SL_KAPI_LEAVE_GROUP, 1, "ss", "pair", id[fi]), lv, true),
                     SL_KERR_UNKNOWN_MEMBER_ID);
    assert_state(f, "pair", "PreparingRebalance", 1);
    assert_int_equal(heartbeat(f, 1, "pair", 2, id[li]), SL_KERR_REBALANCE_IN_PROGRESS);
    jres j;
    join_wait(f, 3, "pair", id[li], 10000, "range", &j);
    assert_int_equal(j.gen, 3);
    assert_int_equal(j.n, 1);

    /* LeaveGroup v3: the leader and a stranger, a code each. */
    sl_kreq *r =
        req(f, SL_KAPI_LEAVE_GROUP, 3, "sissss", "pair", 2, id[li], NULL, "stranger", NULL);
    assert_int_equal(lv(r), SL_KREQ_DONE);
    sl_kr in = body(r, true);
    assert_int_equal(sl_kr_i16(&in), 0);
    assert_int_equal(sl_kr_array(&in, false, 1), 2);
    for (int i = 0; i < 2; i++) {
        assert_true(sl_kstr_eq(sl_kr_str(&in, false), i ? "stranger" : id[li]));
        assert_null(sl_kr_str(&in, false).p);
        assert_int_equal(sl_kr_i16(&in), i ? SL_KERR_UNKNOWN_MEMBER_ID : 0);
    }
    at_end(&in);
    sl__kreq_free(r);
    dres d;
    describe(f, "pair", &d);
    assert_string_equal(d.state, "Empty");
    assert_int_equal(d.n, 0);
    assert_string_equal(d.ptype, "consumer"); /* kept while Empty, as Kafka does */
    assert_state(f, "never-used", "Dead", 0);
    /* v3 to a group nobody knows: one error for the whole request. */
    r = req(f, SL_KAPI_LEAVE_GROUP, 3, "siss", "never-used", 1, "x", NULL);
    assert_int_equal(lv(r), SL_KREQ_DONE);
    in = body(r, true);
    assert_int_equal(sl_kr_i16(&in), SL_KERR_UNKNOWN_MEMBER_ID);
    assert_int_equal(sl_kr_array(&in, false, 1), 0);
    at_end(&in);
    sl__kreq_free(r);

    /* ListGroups v0/v1: "pair" and "other" (Describe made no group). */
    solo(f, "other", 10000, id[0]);
    for (int16_t v = 0; v <= 1; v++) {
        r = req(f, SL_KAPI_LIST_GROUPS, v, "");
        assert_int_equal(sl__kafka_list_groups(r), SL_KREQ_DONE);
        in = body(r, v >= 1);
        assert_int_equal(sl_kr_i16(&in), 0);
        int32_t n = sl_kr_array(&in, false, 1);
        assert_int_equal(n, 2);
        for (int32_t i = 0; i < n; i++) {
            sl_kstr gid = sl_kr_str(&in, false), type = sl_kr_str(&in, false);
            assert_true(sl_kstr_eq(gid, "pair") || sl_kstr_eq(gid, "other"));
            assert_true(sl_kstr_eq(type, "consumer"));
        }
        at_end(&in);
        sl__kreq_free(r);
    }
}

/* The protocol every member supports wins the vote; another type, or no
 * protocol in common, is refused. */
static void test_protocols(void **state)
{
    fx *f = *state;
    /* Alone, the first member's first choice; with a second member that
     * has only roundrobin, the one both support. */
    jres ja, jb;
    join_wait(f, 3, "vote", "", 10000, "range,roundrobin", &ja);
    assert_int_equal(ja.gen, 1);
    assert_string_equal(ja.proto, "range");
    char id[ID_MAX];
    snprintf(id, sizeof id, "%s", ja.member);
    int cb, code;
    sl_kreq *rb = join(f, 3, "vote", "", 10000, "consumer", "roundrobin", &cb);
    assert_int_equal(cb, SL_KREQ_PENDING);
    /* Meanwhile: another type, no protocol in common, no type at all. */
    const char *types[] = {"connect", "consumer", ""}, *protos[] = {"roundrobin", "sticky", "x"};
    for (int i = 0; i < 3; i++) {
        sl_kreq *r = join(f, 3, "vote", "", 10000, types[i], protos[i], &code);
        join_end(r, code, &ja);
        assert_int_equal(ja.err, SL_KERR_INCONSISTENT_GROUP_PROTOCOL);
    }
    join_wait(f, 3, "vote", id, 10000, "range,roundrobin", &ja);
    join_end(rb, cb, &jb);
    assert_int_equal(ja.err, 0);
    assert_int_equal(jb.err, 0);
    assert_int_equal(ja.gen, 2);
    assert_int_equal(jb.gen, 2);
    assert_string_equal(ja.proto, "roundrobin");
    assert_string_equal(jb.proto, "roundrobin");
    assert_int_equal(ja.n, 2); /* the leader still, with both */
    /* The leader gets everyone's metadata of the chosen protocol. */
    assert_string_equal(ja.meta[0], "M:roundrobin");
    assert_string_equal(ja.meta[1], "M:roundrobin");
    dres d;
    describe(f, "vote", &d);
    assert_string_equal(d.state, "CompletingRebalance");
    assert_string_equal(d.proto, "roundrobin");
    assert_int_equal(d.n, 2);
}

/* A group whose members all left takes members of another protocol type:
 * its type is the first new member's (Kafka's GroupMetadata.add), so a
 * second one of that type is not refused. */
static void test_empty_group_takes_new_type(void **state)
{
    fx *f = *state;
    char id[ID_MAX];
    solo(f, "reuse", 10000, id);
    sl_kreq *r = req(f, SL_KAPI_LEAVE_GROUP, 0, "ss", "reuse", id);
    assert_int_equal(error_only(r, sl__kafka_leave_group, false), 0);
    assert_state(f, "reuse", "Empty", 0);
    int code;
    sl_kreq *r1 = join(f, 3, "reuse", "", 10000, "connect", "x", &code);
    jres ja, jb;
    join_end(r1, code, &ja);
    assert_int_equal(ja.err, 0);
    assert_string_equal(ja.proto, "x");
    sl_kreq *r2 = join(f, 3, "reuse", "", 10000, "connect", "x", &code);
    if (code != SL_KREQ_PENDING) { /* refused at once: say with what */
        join_end(r2, code, &jb);
        fail_msg("second \"connect\" member: error %d", jb.err);
    }
    int cb = code;
    r1 = join(f, 3, "reuse", ja.member, 10000, "connect", "x", &code);
    join_end(r1, code, &ja);
    join_end(r2, cb, &jb);
    assert_int_equal(ja.err, 0);
    assert_int_equal(jb.err, 0);
    assert_int_equal(jb.gen, ja.gen);
    dres d;
    describe(f, "reuse", &d);
    assert_string_equal(d.ptype, "connect");
    assert_int_equal(d.n, 2);
}

static void test_offsets(void **state)
{
    fx *f = *state;
    char id[ID_MAX];
    int32_t gen = solo(f, "c1", 10000, id);
    off o2[] = {{"orders", 0, 10, -1, "m0", -1},
                {"orders", 1, 20, -1, NULL, -1},
                {"ghost", 0, 5, -1, NULL, -1},
                {"orders", 9, 5, -1, NULL, -1},
                {"orders", 3, -7, -1, NULL, -1}};
    commit(f, 2, "c1", gen, id, o2, 5);
    assert_int_equal(o2[0].err, 0);
    assert_int_equal(o2[1].err, 0);
    assert_int_equal(o2[2].err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    assert_int_equal(o2[3].err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    assert_int_equal(o2[4].err, SL_KERR_OFFSET_OUT_OF_RANGE);
    off o7[] = {{"orders", 2, 30, 5, "m2", -1}};
    commit(f, 7, "c1", gen, id, o7, 1);
    assert_int_equal(o7[0].err, 0);
    /* Not from a member of this generation: nothing stored. */
    off bad[] = {{"orders", 0, 99, -1, NULL, -1}};
    commit(f, 5, "c1", gen + 1, id, bad, 1);
    assert_int_equal(bad[0].err, SL_KERR_ILLEGAL_GENERATION);
    commit(f, 6, "c1", gen, "nobody", bad, 1);
    assert_int_equal(bad[0].err, SL_KERR_UNKNOWN_MEMBER_ID);
    commit(f, 3, "c1", -1, "", bad, 1); /* the group has members: only they commit */
    assert_int_not_equal(bad[0].err, 0);

    got g[8];
    int16_t gerr;
    for (int round = 0; round < 2; round++) {
        const int32_t parts[] = {0, 1, 3};
        assert_int_equal(fetch(f, 1, "c1", parts, 3, g, &gerr), 3);
        assert_int_equal(g[0].part, 0);
        assert_int_equal(g[0].offset, 10);
        assert_string_equal(g[0].meta, "m0");
        assert_int_equal(g[1].offset, 20);
        assert_string_equal(g[1].meta, "(null)");
        assert_int_equal(g[2].part, 3);
        assert_int_equal(g[2].offset, -1); /* never committed */
        for (int i = 0; i < 3; i++)
            assert_int_equal(g[i].err, 0);
        assert_int_equal(fetch(f, 5, "c1", (const int32_t[]){2}, 1, g, &gerr), 1);
        assert_int_equal(gerr, 0);
        assert_int_equal(g[0].offset, 30);
        assert_int_equal(g[0].epoch, 5);
        assert_string_equal(g[0].meta, "m2");
        /* v2+: a null topic list is every committed partition. */
        assert_int_equal(fetch(f, 2, "c1", NULL, -1, g, &gerr), 3);
        assert_int_equal(gerr, 0);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(g[i].part, i);
            assert_int_equal(g[i].offset, 10 * (i + 1));
        }
        assert_int_equal(fetch(f, 3, "unknown-group", parts, 1, g, &gerr), 1);
        assert_int_equal(g[0].offset, -1);
        if (round)
            break;
        /* The offsets are in a file and outlive the coordinator; its
         * members do not. */
        char path[4400];
        snprintf(path, sizeof path, "%s/kafka/groups/c1.json", f->dir);
        assert_int_equal(access(path, F_OK), 0);
        sl__kcoord_close(&f->k);
        coord_open(f);
        assert_state(f, "c1", "Empty", 0);
    }

    /* Outside group management: generation -1 and no member id, to a
     * group without members (a new one; c1 since the reopen). */
    off m[] = {{"orders", 1, 7, -1, "", -1}};
    commit(f, 2, "manual", -1, "", m, 1);
    assert_int_equal(m[0].err, 0);
    commit(f, 7, "c1", -1, "", m, 1);
    assert_int_equal(m[0].err, 0);
    assert_int_equal(fetch(f, 4, "manual", (const int32_t[]){1}, 1, g, &gerr), 1);
    assert_int_equal(g[0].offset, 7);
    assert_string_equal(g[0].meta, "");
    assert_int_equal(fetch(f, 1, "c1", (const int32_t[]){1}, 1, g, &gerr), 1);
    assert_int_equal(g[0].offset, 7);
    assert_int_equal(fetch(f, 2, "", (const int32_t[]){1}, 1, g, &gerr), 1);
    assert_int_equal(gerr, SL_KERR_INVALID_GROUP_ID);
}

/* GET /v1/groups: the group, its member and its offsets with the lag to
 * the partition's end. */
static void test_groups_json(void **state)
{
    fx *f = *state;
    sl_set *s;
    sl_error err = {0};
    assert_int_equal(sl_sets_get(f->sets, "orders", false, &s, &err), 0);
    tu_append(TU_LOG(s, 0), 0, 5, 5, 40, 1, "", SL_CODEC_NONE);
    char id[ID_MAX];
    int32_t gen = solo(f, "lagging", 10000, id);
    off o[] = {{"orders", 0, 2, -1, NULL, -1}};
    commit(f, 2, "lagging", gen, id, o, 1);
    assert_int_equal(o[0].err, 0);

    sl_buf out = {0};
    assert_int_equal(sl__kgroups_json(&f->k, &out), 0);
    json_t *j = json_loadb((const char *)out.data, out.len, 0, NULL), *g = NULL;
    sl_buf_free(&out);
    json_t *groups = json_object_get(j, "groups");
    for (size_t i = 0; i < json_array_size(groups); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(groups, i), "group")),
                    "lagging"))
            g = json_array_get(groups, i);
    const char *st, *leader, *mid, *topic;
    json_int_t gn, part, committed, end, lag;
    assert_int_equal(json_unpack(g, "{s:s, s:I, s:s, s:[{s:s}!], s:[{s:s, s:I, s:I, s:I, s:I}!]}",
                                 "state", &st, "generation", &gn, "leader", &leader, "members",
                                 "member_id", &mid, "offsets", "topic", &topic, "partition", &part,
                                 "committed", &committed, "end", &end, "lag", &lag),
                     0);
    assert_string_equal(st, "Stable");
    assert_int_equal(gn, gen);
    assert_string_equal(leader, id);
    assert_string_equal(mid, id);
    assert_string_equal(topic, "orders");
    assert_int_equal(part, 0);
    assert_int_equal(committed, 2);
    assert_int_equal(end, 5);
    assert_int_equal(lag, 3);
    json_decref(j);
}

/* A member that stops heart-beating is dropped after its session timeout;
 * the group it leaves empty is Empty. */
static void test_session_expiry(void **state)
{
    fx *f = *state;
    char id[ID_MAX];
    int64_t t0 = sl_clock_mono_ms();
    int32_t gen = solo(f, "brief", KCOORD_MIN_SESSION_MS, id);
    if (sl_clock_mono_ms() - t0 < KCOORD_MIN_SESSION_MS / 2) /* when quick enough to tell */
        assert_int_equal(heartbeat(f, 1, "brief", gen, id), 0);
    usleep(1500 * 1000);
    dres d;
    for (int i = 0; i < 200; i++) { /* the timer may lag on a loaded machine */
        describe(f, "brief", &d);
        if (!d.n)
            break;
        usleep(100 * 1000);
    }
    assert_string_equal(d.state, "Empty");
    assert_int_equal(d.n, 0);
    assert_int_equal(heartbeat(f, 1, "brief", gen, id), SL_KERR_UNKNOWN_MEMBER_ID);
}

/* Waiting in JoinGroup is not missing heartbeats, and the rebalance that
 * answers a member starts its session afresh (Kafka's onCompleteJoin:
 * completeAndScheduleNextHeartbeatExpiration for every member): one that
 * waited longer than its session timeout for a slow peer (within the
 * rebalance timeout) is not dropped the moment it is answered. */
static void test_join_wait_is_not_expiry(void **state)
{
    fx *f = *state;
    const int32_t session = 2000;
    char id[2][ID_MAX];
    solo(f, "slow", session, id[0]);
    int cb;
    sl_kreq *rb = join(f, 3, "slow", "", session, "consumer", "range", &cb);
    assert_int_equal(cb, SL_KREQ_PENDING);
    for (int i = 0; i < 3; i++) { /* the first member: slow to rejoin, but alive */
        usleep(session / 2 * 1000);
        assert_int_equal(heartbeat(f, 1, "slow", 1, id[0]), SL_KERR_REBALANCE_IN_PROGRESS);
    }
    jres ja, jb;
    join_wait(f, 3, "slow", id[0], session, "range", &ja);
    join_end(rb, cb, &jb);
    assert_int_equal(ja.err, 0);
    assert_int_equal(jb.err, 0);
    usleep(300 * 1000); /* a few timer passes */
    assert_int_equal(heartbeat(f, 1, "slow", 2, jb.member), 0);
}

/* Nor is waiting in SyncGroup for a leader that takes its time (Kafka's
 * MemberMetadata.shouldKeepAlive: a member with a request in purgatory is
 * kept). */
static void test_sync_wait_is_not_expiry(void **state)
{
    fx *f = *state;
    const int32_t session = 2000;
    char id[2][ID_MAX];
    jres lj;
    int li = pair(f, "slow", session, id, &lj), fi = !li, code;
    sl_kreq *rf = sync_req(f, 1, "slow", 2, id[fi], 0, NULL, &code);
    assert_int_equal(code, SL_KREQ_PENDING);
    for (int i = 0; i < 3; i++) {
        if (sl__kreq_wait(rf, session / 2) != -1) { /* answered, not still parked */
            char a[AS_MAX];
            int16_t err = sync_end(rf, SL_KREQ_DONE, a);
            fail_msg("the parked follower SyncGroup was answered early: error %d", err);
        }
        assert_int_equal(heartbeat(f, 1, "slow", 2, id[li]), 0);
    }
    char a[AS_MAX];
    assert_int_equal(sync_wait(f, 1, "slow", 2, id[li], 2, id, a), 0);
    assert_int_equal(sync_end(rf, code, a), 0);
    assert_string_equal(a + 2, id[fi]);
}

/* A parked request whose connection closes is taken back (cancel) and
 * freed: nothing touches it after (ASan). The coordinator's stop answers
 * what is still parked. */
static void test_cancel_and_stop(void **state)
{
    fx *f = *state;
    char ids[2][ID_MAX];
    solo(f, "gone", 10000, ids[0]);
    /* A second member's JoinGroup waits for the first to rejoin. */
    int code;
    sl_kreq *r = join(f, 3, "gone", "", 10000, "consumer", "range", &code);
    assert_int_equal(code, SL_KREQ_PENDING);
    assert_true(r->cancel(r));
    sl__kreq_free(r);
    /* The round ends without the request; its member stays (until its
     * session ends), as in Kafka. Cancelling an answered request is too
     * late: its post is on the way (here: made before the handler
     * returned, the last member in completing the round). */
    r = join(f, 3, "gone", ids[0], 10000, "consumer", "range", &code);
    settle(r, code);
    assert_false(r->cancel(r));
    jres j;
    join_end(r, SL_KREQ_DONE, &j);
    assert_int_equal(j.gen, 2);
    assert_int_equal(j.n, 2);
    snprintf(ids[1], ID_MAX, "%s", strcmp(j.ids[0], ids[0]) ? j.ids[0] : j.ids[1]);
    /* That member, back for the answer it missed, gets it at once. */
    join_wait(f, 3, "gone", ids[1], 10000, "range", &j);
    assert_int_equal(j.err, 0);
    assert_int_equal(j.gen, 2);
    assert_string_equal(j.leader, ids[0]);

    /* A follower's parked SyncGroup cancelled, then the leader's. */
    r = sync_req(f, 1, "gone", 2, ids[1], 0, NULL, &code);
    assert_int_equal(code, SL_KREQ_PENDING);
    assert_true(r->cancel(r));
    sl__kreq_free(r);
    char a[AS_MAX];
    assert_int_equal(sync_wait(f, 1, "gone", 2, ids[0], 2, ids, a), 0);
    assert_int_equal(heartbeat(f, 1, "gone", 2, ids[1]), 0);

    /* Stop with a JoinGroup parked (a third member: the round waits for
     * the other two up to its 10 s deadline): NOT_COORDINATOR sends the
     * client looking for the coordinator again. */
    r = join(f, 3, "gone", "", 10000, "consumer", "range", &code);
    assert_int_equal(code, SL_KREQ_PENDING);
    sl__kcoord_close(&f->k);
    join_end(r, code, &j);
    assert_int_equal(j.err, SL_KERR_NOT_COORDINATOR);
}

/* A whole body of (key, v) answered at once, with an error found only
 * after everything was read (an unknown member, a session timeout out of
 * range), so nothing parks or changes. */
static void valid_body(sl_kw *w, int16_t key)
{
    switch (key) {
    case SL_KAPI_FIND_COORDINATOR: /* v1 */
        enc(w, "sc", "g", 0);
        break;
    case SL_KAPI_JOIN_GROUP: /* v5 */
        enc(w, "siisssisb", "g", 10, 10, "", "i", "consumer", 1, "range", "meta");
        break;
    case SL_KAPI_SYNC_GROUP: /* v3 */
        enc(w, "sissisb", "g", 1, "m", NULL, 1, "m", "a");
        break;
    case SL_KAPI_HEARTBEAT: /* v3 */
        enc(w, "siss", "g", 1, "m", NULL);
        break;
    case SL_KAPI_LEAVE_GROUP: /* v3 */
        enc(w, "siss", "g", 1, "m", NULL);
        break;
    case SL_KAPI_OFFSET_COMMIT: /* v7 */
        enc(w, "sissisiiqis", "g", 1, "m", NULL, 1, "orders", 1, 0, (int64_t)5, -1, "x");
        break;
    case SL_KAPI_OFFSET_FETCH: /* v5 */
        enc(w, "sisiii", "g", 1, "orders", 2, 0, 1);
        break;
    default: /* DescribeGroups */
        enc(w, "iss", 2, "g", "h");
    }
}

/* A request cut short anywhere closes the connection, and no handler
 * reads past the frame (ASan: the detached copy is exactly that long). */
static void test_malformed(void **state)
{
    fx *f = *state;
    static const struct {
        int16_t key, v;
        sl_kapi_fn *fn;
    } apis[] = {
        {SL_KAPI_FIND_COORDINATOR, 1, sl__kafka_find_coordinator},
        {SL_KAPI_JOIN_GROUP, 5, sl__kafka_join_group},
        {SL_KAPI_SYNC_GROUP, 3, sl__kafka_sync_group},
        {SL_KAPI_HEARTBEAT, 3, sl__kafka_heartbeat},
        {SL_KAPI_LEAVE_GROUP, 3, sl__kafka_leave_group},
        {SL_KAPI_OFFSET_COMMIT, 7, sl__kafka_offset_commit},
        {SL_KAPI_OFFSET_FETCH, 5, sl__kafka_offset_fetch},
        {SL_KAPI_DESCRIBE_GROUPS, 2, sl__kafka_describe_groups},
    };
    for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++) {
        sl_buf b;
        sl_kw w;
        start(&b, &w, apis[i].key, apis[i].v);
        size_t hlen = b.len;
        valid_body(&w, apis[i].key);
        for (size_t len = hlen; len <= b.len; len++) {
            sl_kreq *r = sl__kreq_new_detached(&f->k, b.data, len);
            assert_non_null(r);
            assert_int_equal(apis[i].fn(r), len < b.len ? SL_KREQ_CLOSE : SL_KREQ_DONE);
            sl__kreq_free(r);
        }
        sl_buf_free(&b);
    }
    /* Arrays that claim more elements than the bytes left could hold. */
    sl_kreq *r = req(f, SL_KAPI_JOIN_GROUP, 3, "siissisb", "g", 10000, 10000, "", "consumer", 1000,
                     "range", "");
    assert_int_equal(sl__kafka_join_group(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
    r = req(f, SL_KAPI_OFFSET_COMMIT, 2, "sisqisiiqs", "g", 1, "m", (int64_t)-1, 1, "orders", 500,
            0, (int64_t)1, NULL);
    assert_int_equal(sl__kafka_offset_commit(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
    /* FindCoordinator without a key; OffsetFetch v1 with a null list (only
     * v2+ may ask for every topic). */
    r = req(f, SL_KAPI_FIND_COORDINATOR, 0, "s", NULL);
    assert_int_equal(sl__kafka_find_coordinator(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
    r = req(f, SL_KAPI_OFFSET_FETCH, 1, "si", "g", -1);
    assert_int_equal(sl__kafka_offset_fetch(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
    assert_state(f, "g", "Dead", 0); /* none of it made a group */
}

/* A client without a client id still gets a whole "member-<uuid>" id
 * (kcoord.c's member_new() sizes it for the client id it replaces). */
static void test_member_id_without_client_id(void **state)
{
    fx *f = *state;
    g_client = NULL;
    jres j;
    join_wait(f, 4, "anon", "", 10000, "range", &j);
    assert_int_equal(j.err, SL_KERR_MEMBER_ID_REQUIRED);
    assert_int_equal(strncmp(j.member, "member-", 7), 0);
    assert_int_equal(strlen(j.member), strlen("member-") + 36); /* a UUID's 36 characters */
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_find_coordinator),
        T(test_join_sync_heartbeat),
        T(test_rebalance_and_leave),
        T(test_protocols),
        T(test_empty_group_takes_new_type),
        T(test_offsets),
        T(test_groups_json),
        T(test_session_expiry),
        T(test_join_wait_is_not_expiry),
        T(test_sync_wait_is_not_expiry),
        T(test_cancel_and_stop),
        T(test_malformed),
        T(test_member_id_without_client_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
