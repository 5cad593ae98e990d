/*
 * tests/unit/test_redrive.c — dead-letter redrive (core/redrive.h) on real
 * sets and a real Databus, wired as core/server.c wires them: what moves and
 * what is stripped, the position across calls and reopenings, nothing lost
 * when the destination refuses (the position stays), a destination whose
 * buffer is smaller than a chunk, events the destination can never take,
 * a damaged position file, ack = "buffer" destinations, and the errors.
 */
#include "testutil.h"

#include "core/databus.h"
#include "core/redrive.h"
#include "core/metrics.h" /* sl_buf_printf() */

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct fx {
    char *dir;
    sl_databus *bus;
    sl_sets *sets;
} fx;

static void fx_open(fx *f)
{
    sl_error err = {0};
    sl_databus_options bo = {0};
    if (sl_databus_start(&bo, &f->bus, &err))
        fail_msg("sl_databus_start: %s", err.msg);
    sl_sets_options so = {.data_dir = f->dir,
                          .auto_create = true,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = f->bus};
    sl_set_config_default(&so.defaults);
    if (sl_sets_open(&so, &f->sets, &err))
        fail_msg("sl_sets_open: %s", err.msg);
}

static void fx_close(fx *f)
{
    sl_databus_free(f->bus);
    sl_sets_close(f->sets);
    f->bus = NULL;
    f->sets = NULL;
}

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    fx_open(f);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    fx_close(f);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

static sl_set *define(fx *f, const char *name, int32_t partitions, sl_ack ack,
                      uint64_t buffer_bytes)
{
    sl_set_config c;
    sl_set_config_default(&c);
    c.partitions = partitions;
    c.ack = ack;
    c.linger_ms = 0;
    c.log.retention_ms = -1;
    if (buffer_bytes)
        c.buffer_bytes = buffer_bytes;
    sl_set *s = NULL;
    sl_error err = {0};
    if (sl_sets_define(f->sets, name, &c, &s, &err))
        fail_msg("define %s: %s", name, err.msg);
    return s;
}

/* ---- writing dead letters ---------------------------------------------------------- */

typedef struct waiter {
    pthread_mutex_t m;
    pthread_cond_t c;
    int done;
} waiter;

static void on_done(void *ctx, int status)
{
    waiter *w = ctx;
    assert_int_equal(status, 0);
    pthread_mutex_lock(&w->m);
    w->done = 1;
    pthread_cond_signal(&w->c);
    pthread_mutex_unlock(&w->m);
}

/* Publishes one raw value to set with key and lane and waits until it is
 * stored (the set is durable). */
static void put_raw(fx *f, sl_set *set, const char *value, const char *key, const char *lane)
{
    waiter w = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER};
    sl_databus_event ev = {.value = value,
                           .value_len = strlen(value),
                           .key = key,
                           .key_len = key ? strlen(key) : 0,
                           .lane = lane ? lane : "",
                           .ts_ms = 1};
    sl_databus_result res;
    sl_error err = {0};
    int rc = sl_databus_publish(f->bus, set, &ev, 1, &res, on_done, &w, &err);
    if (rc < 0)
        fail_msg("publish: %s", err.msg);
    if (rc == 1) {
        pthread_mutex_lock(&w.m);
        while (!w.done)
            pthread_cond_wait(&w.c, &w.m);
        pthread_mutex_unlock(&w.m);
    }
}

/* Dead letter d<i> as the rule runner writes it; pad makes it bigger. */
static void put_dead(fx *f, sl_set *dlq, int i, size_t pad)
{
    char key[16];
    snprintf(key, sizeof key, "k%d", i % 5);
    const char *lane = i % 2 ? "boe-a" : "";
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b,
                  "{\"specversion\":\"1.0\",\"id\":\"d%d\",\"source\":\"/s\",\"type\":\"t\","
                  "\"time\":\"2026-01-01T00:00:00.000Z\",\"partitionkey\":\"%s\"%s%s%s,"
                  "\"data\":{\"n\":%d,\"pad\":\"",
                  i, key, lane[0] ? ",\"lane\":\"" : "", lane, lane[0] ? "\"" : "", i);
    for (size_t k = 0; k < pad; k++)
        sl_buf_append(&b, "x", 1);
    sl_buf_printf(&b, "\"},\"sluiceerror\":\"HTTP 400\",\"sluiceattempts\":1,"
                      "\"sluicerule\":\"r\",\"sluicetarget\":\"http\","
                      "\"sluicefailedat\":\"2026-01-01T00:00:01.000Z\",\"sluicereplay\":true}");
    sl_buf_append(&b, "", 1);
    put_raw(f, dlq, (const char *)b.data, key, lane);
    sl_buf_free(&b);
}

/* ---- reading the destination ------------------------------------------------------- */

/* Every record of set; counts d<i> in seen[i] and checks each one. Returns
 * the number of records. */
static int read_set(sl_set *set, int *seen, int nseen)
{
    memset(seen, 0, sizeof *seen * (size_t)nseen);
    int total = 0;
    for (int32_t p = 0; p < set->nparts; p++) {
        const sl_store *st = &set->parts[p];
        void *r = NULL;
        sl_error err = {0};
        if (sl_store_reader_open(st, sl_store_start_offset(st), NULL, &r, &err))
            fail_msg("reader_open: %s", err.msg);
        sl_record rec;
        int rc;
        while ((rc = sl_store_reader_next(st, r, &rec, &err)) == 0) {
            total++;
            json_t *j = json_loadb((const char *)rec.value, rec.value_len, 0, NULL);
            assert_non_null(j);
            int i = -1;
            sscanf(json_string_value(json_object_get(j, "id")), "d%d", &i);
            assert_true(i >= 0 && i < nseen);
            seen[i]++;
            const char *k;
            json_t *v;
            json_object_foreach(j, k, v)
            {
                if (strncmp(k, "sluice", 6) == 0)
                    fail_msg("d%d kept %s", i, k);
            }
            char key[16];
            snprintf(key, sizeof key, "k%d", i % 5);
            assert_string_equal(json_string_value(json_object_get(j, "partitionkey")), key);
            assert_int_equal(rec.key_len, strlen(key));
            assert_memory_equal(rec.key, key, rec.key_len);
            const char *lane = i % 2 ? "boe-a" : "";
            assert_int_equal(rec.lane_len, strlen(lane));
            assert_memory_equal(rec.lane, lane, rec.lane_len);
            if (lane[0])
                assert_string_equal(json_string_value(json_object_get(j, "lane")), lane);
            json_decref(j);
        }
        assert_int_equal(rc, SL_EEOF);
        sl_store_reader_close(st, r);
    }
    return total;
}

/* Runs a redrive that must succeed; returns its answer (json_decref()). */
static json_t *redrive(fx *f, const char *dlq, const char *to, uint64_t max, int moved, int skipped)
{
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    int rc = sl_redrive(f->sets, f->bus, f->dir, dlq, to, max, &out, &err);
    if (rc)
        fail_msg("sl_redrive %s -> %s: %s (%s)", dlq, to, err.msg, sl_strerror(rc));
    json_error_t je;
    json_t *j = json_loadb((const char *)out.data, out.len, 0, &je);
    if (!j)
        fail_msg("not JSON (%s): %.*s", je.text, (int)out.len, (const char *)out.data);
    sl_buf_free(&out);
    json_int_t m = json_integer_value(json_object_get(j, "redriven"));
    json_int_t s = json_integer_value(json_object_get(j, "skipped"));
    if (m != moved || s != skipped)
        fail_msg("%s -> %s: moved %lld skipped %lld, want %d and %d", dlq, to, (long long)m,
                 (long long)s, moved, skipped);
    return j;
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_moves_once(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 3, SL_ACK_DURABLE, 0);
    sl_set *to = define(f, "to", 2, SL_ACK_DURABLE, 0);
    for (int i = 0; i < 600; i++) /* several chunks per partition */
        put_dead(f, dlq, i, 10);
    json_decref(redrive(f, "dlq", "to", 0, 600, 0));
    int seen[700];
    assert_int_equal(read_set(to, seen, 700), 600);
    for (int i = 0; i < 600; i++)
        assert_int_equal(seen[i], 1);
    json_decref(redrive(f, "dlq", "to", 0, 0, 0));
    /* max counts across partitions; the position survives reopening. */
    for (int i = 600; i < 700; i++)
        put_dead(f, dlq, i, 10);
    json_decref(redrive(f, "dlq", "to", 30, 30, 0));
    fx_close(f);
    fx_open(f);
    sl_sets_get(f->sets, "to", false, &to, NULL);
    json_decref(redrive(f, "dlq", "to", 0, 70, 0));
    assert_int_equal(read_set(to, seen, 700), 700);
    for (int i = 0; i < 700; i++)
        assert_int_equal(seen[i], 1);
}

static void test_errors(void **state)
{
    fx *f = *state;
    define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    define(f, "to", 1, SL_ACK_DURABLE, 0);
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    assert_int_equal(sl_redrive(f->sets, f->bus, f->dir, "nope", "to", 0, &out, &err), SL_ENOENT);
    assert_non_null(strstr(err.msg, "nope"));
    assert_int_equal(sl_redrive(f->sets, f->bus, f->dir, "dlq", "nope2", 0, &out, &err), SL_ENOENT);
    assert_non_null(strstr(err.msg, "nope2"));
    assert_int_equal(sl_redrive(f->sets, f->bus, f->dir, "dlq", "dlq", 0, &out, &err), SL_EINVAL);
    assert_int_equal(sl_redrive(f->sets, f->bus, f->dir, "dlq", "../x", 0, &out, &err), SL_EINVAL);
    assert_int_equal(out.len, 0);
    /* Neither set was created by asking. */
    sl_set *s;
    assert_int_equal(sl_sets_get(f->sets, "nope2", false, &s, NULL), SL_ENOENT);
}

/* A stopped bus refuses the events: the redrive fails and the position stays,
 * so the next redrive (after a restart) moves them all: nothing is lost. */
static void test_refused_keeps_position(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 2, SL_ACK_DURABLE, 0);
    define(f, "to", 2, SL_ACK_DURABLE, 0);
    for (int i = 0; i < 20; i++)
        put_dead(f, dlq, i, 10);
    sl_databus_stop(f->bus);
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    assert_int_equal(sl_redrive(f->sets, f->bus, f->dir, "dlq", "to", 0, &out, &err), SL_ESHUTDOWN);
    assert_int_equal(out.len, 0);
    fx_close(f);
    fx_open(f);
    sl_set *to;
    assert_int_equal(sl_sets_get(f->sets, "to", false, &to, NULL), 0);
    json_t *j = redrive(f, "dlq", "to", 0, 20, 0);
    for (size_t p = 0; p < 2; p++)
        assert_int_equal(json_integer_value(json_object_get(
                             json_array_get(json_object_get(j, "partitions"), p), "from")),
                         0);
    json_decref(j);
    int seen[20];
    assert_int_equal(read_set(to, seen, 20), 20);
}

/* A destination buffer smaller than a chunk: one event at a time; an event
 * larger than the whole buffer can never go there and is skipped. */
static void test_small_destination_buffer(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    sl_set *to = define(f, "to", 1, SL_ACK_DURABLE, 8192);
    for (int i = 0; i < 40; i++)
        put_dead(f, dlq, i, i == 7 ? 20000 : 1000);
    json_t *j = redrive(f, "dlq", "to", 0, 39, 1);
    json_t *sk = json_array_get(json_object_get(j, "skipped_events"), 0);
    assert_int_equal(json_integer_value(json_object_get(sk, "offset")), 7);
    json_decref(j);
    int seen[40];
    assert_int_equal(read_set(to, seen, 40), 39);
    assert_int_equal(seen[7], 0);
    json_decref(redrive(f, "dlq", "to", 0, 0, 0));
}

/* Records that are no CloudEvent (any more) are skipped, listed and passed. */
static void test_skips_bad_records(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    sl_set *to = define(f, "to", 1, SL_ACK_BUFFER, 0);
    put_dead(f, dlq, 0, 1);
    put_raw(f, dlq, "not json", "x", NULL); /* NULL keys: see test_databus.c */
    put_raw(f, dlq, "[1,2]", "x", NULL);
    put_raw(f, dlq, "{\"specversion\":\"1.0\",\"sluiceerror\":\"x\"}", "x", NULL);
    put_raw(f, dlq,
            "{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"/s\",\"type\":\"t\","
            "\"lane\":\"NOT A LANE\"}",
            "x", NULL);
    put_dead(f, dlq, 2, 1);
    json_t *j = redrive(f, "dlq", "to", 0, 2, 4);
    assert_int_equal(json_array_size(json_object_get(j, "skipped_events")), 4);
    json_decref(j);
    json_decref(redrive(f, "dlq", "to", 0, 0, 0));
    /* ack = "buffer": confirmed once queued; the drain writes them. */
    fx_close(f);
    fx_open(f);
    sl_sets_get(f->sets, "to", false, &to, NULL);
    int seen[3];
    assert_int_equal(read_set(to, seen, 3), 2);
}

/* A damaged position file starts again at the oldest event (duplicates
 * rather than losses). */
static void test_damaged_position(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    define(f, "to", 1, SL_ACK_DURABLE, 0);
    for (int i = 0; i < 5; i++)
        put_dead(f, dlq, i, 1);
    json_decref(redrive(f, "dlq", "to", 0, 5, 0));
    char path[4096];
    snprintf(path, sizeof path, "%s/rules/" SL_REDRIVE_CURSOR_NAME "/dlq/0.cursor", f->dir);
    FILE *fp = fopen(path, "r+");
    assert_non_null(fp);
    fputs("garbage garbage garbage garbage garbage garbage garbage garbage", fp);
    fclose(fp);
    json_decref(redrive(f, "dlq", "to", 0, 5, 0));
    json_decref(redrive(f, "dlq", "to", 0, 0, 0));
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_moves_once),
        T(test_errors),
        T(test_refused_keeps_position),
        T(test_small_destination_buffer),
        T(test_skips_bad_records),
        T(test_damaged_position),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
