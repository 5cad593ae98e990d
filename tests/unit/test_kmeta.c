/*
 * tests/unit/test_kmeta.c — kafka/kmeta.c's Metadata and kapi.c's
 * ApiVersions over real sets in a temporary data directory, with requests
 * encoded by hand as a client sends them: sluice as broker 0, leader of every
 * partition; null/empty topic lists per version; auto-create as Kafka's
 * auto.create.topics.enable (and the client's v4 flag); bad names; a
 * truncated request closes.
 */
#include "testutil.h"

#include "kafka/kafka_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fx {
    char *dir;
    sl_sets *sets;
    sl_kafka k;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    sl_sets_options o = {.data_dir = f->dir, .auto_create = true};
    sl_set_config_default(&o.defaults);
    sl_error err = {0};
    assert_int_equal(sl_sets_open(&o, &f->sets, &err), 0);
    f->k.sets = f->sets;
    snprintf(f->k.adv_host, sizeof f->k.adv_host, "127.0.0.1");
    f->k.adv_port = 19092;
    sl_set *s;
    assert_int_equal(sl_sets_get(f->sets, "alpha", true, &s, &err), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sl_sets_close(f->sets);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* The request header of (key, version). */
static void head(sl_kw *w, int16_t key, int16_t v)
{
    sl_kw_i16(w, key);
    sl_kw_i16(w, v);
    sl_kw_i32(w, 77);
    sl_kw_str(w, false, "test-client", -1);
    if (sl_kp_flexible(key, v))
        sl_kw_tags(w, true);
}

/* Metadata v of topics (n < 0: null), and allow_auto (v4+). */
static sl_kreq *metadata(fx *f, int16_t v, int32_t n, const char *const *topics, bool allow)
{
    sl_buf b = {0};
    sl_kw w;
    sl_kw_init(&w, &b);
    head(&w, SL_KAPI_METADATA, v);
    sl_kw_array(&w, false, n);
    for (int32_t i = 0; i < n; i++)
        sl_kw_str(&w, false, topics[i], -1);
    if (v >= 4)
        sl_kw_i8(&w, allow);
    sl_kreq *r = sl__kreq_new_detached(&f->k, b.data, b.len);
    sl_buf_free(&b);
    assert_non_null(r);
    return r;
}

typedef struct md_topic {
    int16_t err;
    char name[64];
    int32_t nparts;
    int32_t leaders; /* partitions led by node 0 */
} md_topic;

/* Parses a Metadata response of version v; returns the topic count. */
static int32_t parse(sl_kreq *r, int16_t v, md_topic *t, int32_t max)
{
    sl_kr in;
    sl_kr_init(&in, r->out.data, r->out.len);
    if (v >= 3)
        assert_int_equal(sl_kr_i32(&in), 0);
    assert_int_equal(sl_kr_array(&in, false, 1), 1);
    assert_int_equal(sl_kr_i32(&in), 0);
    assert_true(sl_kstr_eq(sl_kr_str(&in, false), "127.0.0.1"));
    assert_int_equal(sl_kr_i32(&in), 19092);
    if (v >= 1)
        sl_kr_str(&in, false);
    if (v >= 2)
        assert_true(sl_kstr_eq(sl_kr_str(&in, false), "sluice"));
    if (v >= 1)
        assert_int_equal(sl_kr_i32(&in), 0);
    int32_t n = sl_kr_array(&in, false, 1);
    assert_true(n <= max);
    for (int32_t i = 0; i < n; i++) {
        t[i].err = sl_kr_i16(&in);
        assert_true(sl_kstr_copy(sl_kr_str(&in, false), t[i].name, sizeof t[i].name));
        if (v >= 1)
            assert_int_equal(sl_kr_i8(&in), 0);
        t[i].nparts = sl_kr_array(&in, false, 1);
        t[i].leaders = 0;
        for (int32_t p = 0; p < t[i].nparts; p++) {
            assert_int_equal(sl_kr_i16(&in), 0);
            assert_int_equal(sl_kr_i32(&in), p);
            t[i].leaders += sl_kr_i32(&in) == 0;
            assert_int_equal(sl_kr_array(&in, false, 4), 1);
            assert_int_equal(sl_kr_i32(&in), 0);
            assert_int_equal(sl_kr_array(&in, false, 4), 1);
            assert_int_equal(sl_kr_i32(&in), 0);
            if (v >= 5)
                assert_int_equal(sl_kr_array(&in, false, 4), 0);
        }
    }
    assert_true(sl_kr_ok(&in));
    assert_int_equal(sl_kr_left(&in), 0);
    return n;
}

static void test_all_topics(void **state)
{
    fx *f = *state;
    for (int16_t v = 0; v <= 6; v++) {
        /* v0: an empty list is every topic; v1+: a null one is. */
        sl_kreq *r = metadata(f, v, v == 0 ? 0 : -1, NULL, true);
        assert_int_equal(sl__kafka_metadata(r), SL_KREQ_DONE);
        md_topic t[4];
        assert_int_equal(parse(r, v, t, 4), 1);
        assert_string_equal(t[0].name, "alpha");
        assert_int_equal(t[0].err, 0);
        assert_int_equal(t[0].nparts, 4);
        assert_int_equal(t[0].leaders, 4);
        sl__kreq_free(r);
    }
    /* v1+: an empty list is no topic. */
    sl_kreq *r = metadata(f, 5, 0, NULL, true);
    assert_int_equal(sl__kafka_metadata(r), SL_KREQ_DONE);
    md_topic t[1];
    assert_int_equal(parse(r, 5, t, 1), 0);
    sl__kreq_free(r);
}

static void test_named_and_auto_create(void **state)
{
    fx *f = *state;
    const char *const ask[] = {"alpha", "fresh", "bad/name"};
    sl_kreq *r = metadata(f, 6, 3, ask, true);
    assert_int_equal(sl__kafka_metadata(r), SL_KREQ_DONE);
    md_topic t[3];
    assert_int_equal(parse(r, 6, t, 3), 3);
    assert_int_equal(t[0].err, 0);
    assert_string_equal(t[1].name, "fresh");
    assert_int_equal(t[1].err, 0); /* auto-created */
    assert_int_equal(t[1].nparts, 4);
    assert_int_equal(t[2].err, SL_KERR_INVALID_TOPIC_EXCEPTION);
    sl__kreq_free(r);
    sl_set *s;
    sl_error err = {0};
    assert_int_equal(sl_sets_get(f->sets, "fresh", false, &s, &err), 0);

    /* The client's allow_auto_topic_creation = false: unknown stays unknown. */
    const char *const other[] = {"other"};
    r = metadata(f, 4, 1, other, false);
    assert_int_equal(sl__kafka_metadata(r), SL_KREQ_DONE);
    assert_int_equal(parse(r, 4, t, 1), 1);
    assert_int_equal(t[0].err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    assert_int_equal(t[0].nparts, 0);
    sl__kreq_free(r);
    assert_int_equal(sl_sets_get(f->sets, "other", false, &s, &err), SL_ENOENT);
}

static void test_truncated_closes(void **state)
{
    fx *f = *state;
    sl_buf b = {0};
    sl_kw w;
    sl_kw_init(&w, &b);
    head(&w, SL_KAPI_METADATA, 1);
    sl_kw_array(&w, false, 3); /* three names announced, one sent */
    sl_kw_str(&w, false, "alpha", -1);
    sl_kreq *r = sl__kreq_new_detached(&f->k, b.data, b.len);
    sl_buf_free(&b);
    assert_non_null(r);
    assert_int_equal(sl__kafka_metadata(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
}

/* CreateTopics v4 / DeleteTopics v1 requests and their per-topic codes. */
static void test_create_delete(void **state)
{
    fx *f = *state;
    sl_buf b = {0};
    sl_kw w;
    sl_kw_init(&w, &b);
    head(&w, SL_KAPI_CREATE_TOPICS, 4);
    struct {
        const char *name;
        int32_t parts;
        int16_t repl;
        int16_t want;
    } c[] = {{"made", 7, 1, 0},
             {"alpha", 2, 1, SL_KERR_TOPIC_ALREADY_EXISTS},
             {"triple", 2, 3, SL_KERR_INVALID_REPLICATION_FACTOR},
             {"zero", 0, -1, SL_KERR_INVALID_PARTITIONS},
             {"dflt", -1, -1, 0}};
    sl_kw_array(&w, false, 5);
    for (int i = 0; i < 5; i++) {
        sl_kw_str(&w, false, c[i].name, -1);
        sl_kw_i32(&w, c[i].parts);
        sl_kw_i16(&w, c[i].repl);
        sl_kw_array(&w, false, 0);
        sl_kw_array(&w, false, 1);
        sl_kw_str(&w, false, "retention.ms", -1);
        sl_kw_str(&w, false, "1000", -1);
    }
    sl_kw_i32(&w, 5000);
    sl_kw_i8(&w, 0);
    sl_kreq *r = sl__kreq_new_detached(&f->k, b.data, b.len);
    sl_buf_free(&b);
    assert_int_equal(sl__kafka_create_topics(r), SL_KREQ_DONE);
    sl_kr in;
    sl_kr_init(&in, r->out.data, r->out.len);
    assert_int_equal(sl_kr_i32(&in), 0);
    assert_int_equal(sl_kr_array(&in, false, 1), 5);
    for (int i = 0; i < 5; i++) {
        assert_true(sl_kstr_eq(sl_kr_str(&in, false), c[i].name));
        assert_int_equal(sl_kr_i16(&in), c[i].want);
        sl_kstr msg = sl_kr_str(&in, false);
        assert_true(c[i].want ? msg.len > 0 : msg.p == NULL);
    }
    assert_true(sl_kr_ok(&in));
    sl__kreq_free(r);
    sl_set *s;
    sl_error err = {0};
    assert_int_equal(sl_sets_get(f->sets, "made", false, &s, &err), 0);
    assert_int_equal(s->nparts, 7);
    assert_int_equal(sl_sets_get(f->sets, "dflt", false, &s, &err), 0);
    assert_int_equal(s->nparts, 4);
    assert_int_equal(sl_sets_get(f->sets, "zero", false, &s, &err), SL_ENOENT);

    /* Delete one that exists and one that does not. */
    b = (sl_buf){0};
    sl_kw_init(&w, &b);
    head(&w, SL_KAPI_DELETE_TOPICS, 1);
    sl_kw_array(&w, false, 2);
    sl_kw_str(&w, false, "made", -1);
    sl_kw_str(&w, false, "ghost", -1);
    sl_kw_i32(&w, 5000);
    r = sl__kreq_new_detached(&f->k, b.data, b.len);
    sl_buf_free(&b);
    assert_int_equal(sl__kafka_delete_topics(r), SL_KREQ_DONE);
    sl_kr_init(&in, r->out.data, r->out.len);
    assert_int_equal(sl_kr_i32(&in), 0);
    assert_int_equal(sl_kr_array(&in, false, 1), 2);
    assert_true(sl_kstr_eq(sl_kr_str(&in, false), "made"));
    assert_int_equal(sl_kr_i16(&in), 0);
    assert_true(sl_kstr_eq(sl_kr_str(&in, false), "ghost"));
    assert_int_equal(sl_kr_i16(&in), SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    sl__kreq_free(r);
    assert_int_equal(sl_sets_get(f->sets, "made", false, &s, &err), SL_ENOENT);
    char p[4200];
    snprintf(p, sizeof p, "%s/sets/made", f->dir);
    assert_int_equal(access(p, F_OK), -1);
    /* The name is free again. */
    assert_int_equal(sl_sets_get(f->sets, "made", true, &s, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_all_topics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_named_and_auto_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_delete, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
