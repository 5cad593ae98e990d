/*
 * tests/unit/test_redrive.c — dead-letter redrive (core/bus/redrive.h) on real
 * sets and a real Databus, wired as server/serve.c wires them: what moves and
 * what is stripped, the position across calls and reopenings, nothing lost
 * when the destination refuses (the position stays), a destination whose
 * buffer is smaller than a chunk, events the destination can never take,
 * a damaged position file, ack = "buffer" destinations (the position moves
 * only once the events are synced), a position past a partition that lost
 * its tail, records with an over-long lane, one redrive per set at a time,
 * the stop flag and the one-event-at-a-time path committing each event, and
 * the errors.
 */
#include "testutil.h"

#include "core/bus/databus.h"
#include "core/bus/redrive.h"
#include "core/base/buf.h"
#include "core/bus/cursor.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct fx {
    char *dir;
    sl_databus *bus;
    sl_sets *sets;
    int64_t buffer_sync_ms; /* the bus's; 0: its default */
} fx;

static void fx_open(fx *f)
{
    sl_error err = {0};
    sl_databus_options bo = {.buffer_sync_ms = f->buffer_sync_ms};
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
    int rc = sl_redrive(f->sets, f->bus, NULL, f->dir, dlq, to, max, &out, &err);
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
    assert_int_equal(sl_redrive(f->sets, f->bus, NULL, f->dir, "nope", "to", 0, &out, &err),
                     SL_ENOENT);
    assert_non_null(strstr(err.msg, "nope"));
    assert_int_equal(sl_redrive(f->sets, f->bus, NULL, f->dir, "dlq", "nope2", 0, &out, &err),
                     SL_ENOENT);
    assert_non_null(strstr(err.msg, "nope2"));
    assert_int_equal(sl_redrive(f->sets, f->bus, NULL, f->dir, "dlq", "dlq", 0, &out, &err),
                     SL_EINVAL);
    assert_int_equal(sl_redrive(f->sets, f->bus, NULL, f->dir, "dlq", "../x", 0, &out, &err),
                     SL_EINVAL);
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
    assert_int_equal(sl_redrive(f->sets, f->bus, NULL, f->dir, "dlq", "to", 0, &out, &err),
                     SL_ESHUTDOWN);
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
    /* ack = "buffer": the redrive waited until they were written and synced. */
    fx_close(f);
    fx_open(f);
    sl_sets_get(f->sets, "to", false, &to, NULL);
    int seen[3];
    assert_int_equal(read_set(to, seen, 3), 2);
}

/* Dead letters of a lane dropped since (core/bus/lanes.h) stay in the
 * dead-letter set: stored again, no consumer would deliver them. */
static void test_dropped_lane_skipped(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    define(f, "to", 1, SL_ACK_BUFFER, 0);
    for (int i = 0; i < 4; i++) /* d1 and d3 are of lane boe-a */
        put_dead(f, dlq, i, 1);
    sl_lanes *lanes = NULL;
    sl_error err = {0};
    assert_int_equal(sl_lanes_open(f->dir, &lanes, &err), 0);
    sl_lane_decl decl = {.name = (char *)"boe-a", .line = 1, .fallback_base = true};
    sl_lanes_configure(lanes, &decl, 1, false);
    assert_int_equal(sl_lanes_drop(lanes, "boe-a", &err), 0);
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_redrive(f->sets, f->bus, lanes, f->dir, "dlq", "to", 0, &out, &err), 0);
    sl_buf_append(&out, "", 1);
    json_t *j = json_loads((const char *)out.data, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "redriven")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "skipped")), 2);
    json_t *sk = json_array_get(json_object_get(j, "skipped_events"), 0);
    assert_non_null(strstr(json_string_value(json_object_get(sk, "reason")), "LaneDropped"));
    json_decref(j);
    sl_buf_free(&out);
    sl_lanes_free(lanes);
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

/* ---- a store wrapped to watch syncs, fake long lanes and act on appends ------------- */

/* Wraps partition 0 of a set: every call goes to the real store, with
 * hooks. Installed right after the set is defined, before anyone writes. */
typedef struct wrap {
    sl_store inner;
    _Atomic int64_t synced_end; /* the end offset when the last sync began */
    _Atomic int appends;
    int64_t long_lane_at;           /* this record reads with a 40-byte lane (-1: none) */
    void (*on_append)(int appends); /* called by the writer after each append */
} wrap;

static wrap g_wrap;

typedef struct wrap_reader {
    void *inner;
} wrap_reader;

static int w_append(void *impl, sl_batch *b, int64_t *base, sl_error *err)
{
    wrap *w = impl;
    int rc = w->inner.ops->append(w->inner.impl, b, base, err);
    int n = atomic_fetch_add(&w->appends, 1) + 1;
    if (!rc && w->on_append)
        w->on_append(n);
    return rc;
}

static int w_sync(void *impl, sl_error *err)
{
    wrap *w = impl;
    int64_t end = w->inner.ops->end_offset(w->inner.impl);
    int rc = w->inner.ops->sync(w->inner.impl, err);
    if (!rc && end > atomic_load(&w->synced_end))
        atomic_store(&w->synced_end, end);
    return rc;
}

static int w_reader_open(void *impl, int64_t offset, const char *lane, void **reader, sl_error *err)
{
    wrap *w = impl;
    wrap_reader *r = calloc(1, sizeof *r);
    assert_non_null(r);
    int rc = w->inner.ops->reader_open(w->inner.impl, offset, lane, &r->inner, err);
    if (rc)
        free(r);
    else
        *reader = r;
    return rc;
}

static int w_reader_next(void *reader, sl_record *rec, sl_error *err)
{
    wrap_reader *r = reader;
    int rc = g_wrap.inner.ops->reader_next(r->inner, rec, err);
    if (!rc && rec->offset == g_wrap.long_lane_at) {
        rec->lane = "abcdefghij-abcdefghij-abcdefghij-abcdefgh";
        rec->lane_len = strlen(rec->lane);
    }
    return rc;
}

static int64_t w_reader_position(void *reader)
{
    wrap_reader *r = reader;
    return g_wrap.inner.ops->reader_position(r->inner);
}

static void w_reader_close(void *reader)
{
    wrap_reader *r = reader;
    g_wrap.inner.ops->reader_close(r->inner);
    free(r);
}

static int w_offset_for_time(void *impl, int64_t ts_ms, int64_t *offset, sl_error *err)
{
    wrap *w = impl;
    return w->inner.ops->offset_for_time(w->inner.impl, ts_ms, offset, err);
}

static int64_t w_start_offset(void *impl)
{
    wrap *w = impl;
    return w->inner.ops->start_offset(w->inner.impl);
}

static int64_t w_end_offset(void *impl)
{
    wrap *w = impl;
    return w->inner.ops->end_offset(w->inner.impl);
}

static int w_retain(void *impl, int64_t now_ms, sl_error *err)
{
    wrap *w = impl;
    return w->inner.ops->retain(w->inner.impl, now_ms, err);
}

static void w_stat(void *impl, uint64_t *bytes, uint64_t *segments)
{
    wrap *w = impl;
    w->inner.ops->stat(w->inner.impl, bytes, segments);
}

static void w_close(void *impl)
{
    wrap *w = impl;
    w->inner.ops->close(w->inner.impl);
}

static const sl_store_ops wrap_ops = {
    .abi_version = SL_STORE_ABI_VERSION,
    .name = "wrap",
    .append = w_append,
    .sync = w_sync,
    .reader_open = w_reader_open,
    .reader_next = w_reader_next,
    .reader_position = w_reader_position,
    .reader_close = w_reader_close,
    .offset_for_time = w_offset_for_time,
    .start_offset = w_start_offset,
    .end_offset = w_end_offset,
    .retain = w_retain,
    .stat = w_stat,
    .close = w_close,
};

static void wrap_part0(sl_set *set)
{
    memset(&g_wrap, 0, sizeof g_wrap);
    g_wrap.inner = set->parts[0];
    g_wrap.long_lane_at = -1;
    set->parts[0].ops = &wrap_ops;
    set->parts[0].impl = &g_wrap;
}

/* ---- 2. ack = "buffer": the position moves once the events are on disk ------------ */

/* The bus syncs buffer sets only every hour here, and the destination's
 * writer lingers: sl_databus_publish() returns long before the events are
 * written. The redrive must still return only after they were written and a
 * sync covered them. */
static void test_buffer_destination_synced(void **state)
{
    fx *f = *state;
    fx_close(f);
    f->buffer_sync_ms = 3600 * 1000;
    fx_open(f);
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    sl_set_config c;
    sl_set_config_default(&c);
    c.partitions = 1;
    c.ack = SL_ACK_BUFFER;
    c.linger_ms = 300;
    c.log.retention_ms = -1;
    sl_set *to = NULL;
    sl_error err = {0};
    if (sl_sets_define(f->sets, "to", &c, &to, &err))
        fail_msg("define: %s", err.msg);
    wrap_part0(to);
    for (int i = 0; i < 30; i++)
        put_dead(f, dlq, i, 10);
    json_decref(redrive(f, "dlq", "to", 0, 30, 0));
    assert_int_equal(sl_store_end_offset(&to->parts[0]), 30);
    assert_true(atomic_load(&g_wrap.synced_end) >= 30);
    /* And they read back from the reopened store. */
    fx_close(f);
    fx_open(f);
    sl_sets_get(f->sets, "to", false, &to, NULL);
    int seen[30];
    assert_int_equal(read_set(to, seen, 30), 30);
}

/* ---- 3. a position past the end of a partition that lost its tail ----------------- */

static void test_position_past_end(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    sl_set *to = define(f, "to", 1, SL_ACK_DURABLE, 0);
    for (int i = 0; i < 3; i++)
        put_dead(f, dlq, i, 1);
    /* As if offsets 3..9 had been redriven, then lost in a crash. */
    sl_cursor cur;
    bool found;
    sl_error err = {0};
    assert_int_equal(sl_cursor_open(&cur, f->dir, SL_REDRIVE_CURSOR_NAME, "dlq", 0, &found, &err),
                     0);
    assert_int_equal(sl_cursor_commit(&cur, 10, 0, &err), 0);
    sl_cursor_close(&cur);
    json_t *j = redrive(f, "dlq", "to", 0, 0, 0);
    json_t *p0 = json_array_get(json_object_get(j, "partitions"), 0);
    assert_int_equal(json_integer_value(json_object_get(p0, "from")), 3);
    assert_int_equal(json_integer_value(json_object_get(p0, "to")), 3);
    json_decref(j);
    /* The corrected position is on disk. */
    assert_int_equal(sl_cursor_open(&cur, f->dir, SL_REDRIVE_CURSOR_NAME, "dlq", 0, &found, &err),
                     0);
    assert_true(found);
    assert_int_equal(cur.offset, 3);
    sl_cursor_close(&cur);
    /* New dead letters reuse offsets 3..14: every one of them moves. */
    for (int i = 3; i < 15; i++)
        put_dead(f, dlq, i, 1);
    json_decref(redrive(f, "dlq", "to", 0, 12, 0));
    int seen[15];
    assert_int_equal(read_set(to, seen, 15), 12);
    for (int i = 0; i < 15; i++)
        assert_int_equal(seen[i], i < 3 ? 0 : 1);
}

/* ---- 4. a record whose lane is longer than a lane can be ------------------------ */

static void test_long_lane_skipped(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    sl_set *to = define(f, "to", 1, SL_ACK_DURABLE, 0);
    wrap_part0(dlq);
    g_wrap.long_lane_at = 2;
    for (int i = 0; i < 4; i++)
        put_dead(f, dlq, i, 1);
    json_t *j = redrive(f, "dlq", "to", 0, 3, 1);
    json_t *sk = json_array_get(json_object_get(j, "skipped_events"), 0);
    assert_int_equal(json_integer_value(json_object_get(sk, "offset")), 2);
    assert_non_null(strstr(json_string_value(json_object_get(sk, "reason")), "lane"));
    json_decref(j);
    int seen[4];
    assert_int_equal(read_set(to, seen, 4), 3);
    assert_int_equal(seen[2], 0);
}

/* ---- 1. one redrive per dead-letter set at a time; the stop flag ------------------ */

static sl_databus *g_bus;
static sl_sets *g_sets;
static const char *g_dir;
static int g_nested_rc;
static char g_nested_msg[SL_ERROR_MAX];

/* Runs on the Databus writer while the redrive is under way. */
static void nested_redrive(int appends)
{
    if (appends != 1)
        return;
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    g_nested_rc = sl_redrive(g_sets, g_bus, NULL, g_dir, "dlq", "other", 0, &out, &err);
    snprintf(g_nested_msg, sizeof g_nested_msg, "%s", err.msg);
    assert_int_equal(out.len, 0);
}

static void test_one_at_a_time(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    sl_set *to = define(f, "to", 1, SL_ACK_DURABLE, 0);
    define(f, "other", 1, SL_ACK_DURABLE, 0);
    define(f, "dlq2", 1, SL_ACK_DURABLE, 0);
    wrap_part0(to);
    for (int i = 0; i < 5; i++)
        put_dead(f, dlq, i, 1);
    g_bus = f->bus;
    g_sets = f->sets;
    g_dir = f->dir;
    g_nested_rc = 1;
    g_wrap.on_append = nested_redrive;
    json_decref(redrive(f, "dlq", "to", 0, 5, 0));
    g_wrap.on_append = NULL;
    /* The second redrive of dlq did not wait: it failed at once. */
    assert_int_equal(g_nested_rc, SL_EDEFERRED);
    assert_non_null(strstr(g_nested_msg, "a redrive of dlq is running"));
    /* Once the first is done, the set can be redriven again. */
    json_decref(redrive(f, "dlq", "other", 0, 0, 0));
    int seen[5];
    assert_int_equal(read_set(to, seen, 5), 5);
}

static _Atomic bool g_stop;

static void stop_after_five(int appends)
{
    if (appends == 5)
        atomic_store(&g_stop, true);
}

/* ---- 5. one event at a time: each one's position is committed ------------------- */

/* A destination buffer smaller than a chunk sends the events one at a time;
 * the redrive stops (stop flag) after the fifth. The five stay moved and the
 * next redrive moves only the rest: nothing twice. */
static void test_stop_and_single_commits(void **state)
{
    fx *f = *state;
    sl_set *dlq = define(f, "dlq", 1, SL_ACK_DURABLE, 0);
    sl_set *to = define(f, "to", 1, SL_ACK_DURABLE, 8192);
    wrap_part0(to);
    for (int i = 0; i < 40; i++)
        put_dead(f, dlq, i, 1000);
    sl_redrive_set_stop(&g_stop);
    /* Raised before: nothing moves. */
    atomic_store(&g_stop, true);
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    assert_int_equal(sl_redrive(f->sets, f->bus, NULL, f->dir, "dlq", "to", 0, &out, &err),
                     SL_ESHUTDOWN);
    assert_int_equal(out.len, 0);
    assert_int_equal(sl_store_end_offset(&to->parts[0]), 0);
    /* Raised by the writer after the fifth event. */
    atomic_store(&g_stop, false);
    g_wrap.on_append = stop_after_five;
    assert_int_equal(sl_redrive(f->sets, f->bus, NULL, f->dir, "dlq", "to", 0, &out, &err),
                     SL_ESHUTDOWN);
    g_wrap.on_append = NULL;
    assert_non_null(strstr(err.msg, "5 events were moved"));
    assert_int_equal(sl_store_end_offset(&to->parts[0]), 5);
    sl_cursor cur;
    bool found;
    assert_int_equal(sl_cursor_open(&cur, f->dir, SL_REDRIVE_CURSOR_NAME, "dlq", 0, &found, &err),
                     0);
    assert_int_equal(cur.offset, 5);
    sl_cursor_close(&cur);
    atomic_store(&g_stop, false);
    sl_redrive_set_stop(NULL);
    json_decref(redrive(f, "dlq", "to", 0, 35, 0));
    int seen[40];
    assert_int_equal(read_set(to, seen, 40), 40);
    for (int i = 0; i < 40; i++)
        assert_int_equal(seen[i], 1);
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
        T(test_buffer_destination_synced),
        T(test_position_past_end),
        T(test_long_lane_skipped),
        T(test_dropped_lane_skipped),
        T(test_one_at_a_time),
        T(test_stop_and_single_commits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
