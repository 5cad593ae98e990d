/*
 * tests/unit/test_kfetch.c — Fetch and ListOffsets of the Kafka listener
 * (kafka/kfetch.c), driven through detached requests (no connection): the
 * records of a Fetch are exactly the stored batch bytes (compared with the
 * segment file), v4 and v11 layouts, partition and response max_bytes with
 * KIP-74's first-batch rule, offsets out of range, unknown topics and
 * partitions, fetch sessions refused, zstd below v10, lanes chosen by
 * client.id, the long poll (timeout, woken by a Databus append, cancelled,
 * answered at once while stopping) and ListOffsets earliest/latest/by time.
 * Sets live in a temporary directory with a Databus and a waits registry
 * wired as the server wires them.
 */
#include "testutil.h"

#include "core/base/clock.h"
#include "core/bus/databus.h"
#include "core/bus/set.h"
#include "core/bus/waits.h"
#include "kafka/kafka_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- fixture ---------------------------------------------------------------- */

typedef struct fx {
    char *dir;
    sl_databus *bus;
    sl_sets *sets;
    sl_waits *ws;
    sl_kafka *k;
} fx;

static void on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane)
{
    (void)lane;
    sl_waits_on_append(ctx, set, partition, end);
}

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    sl_error err = {0};
    if (sl_waits_start(&f->ws, &err))
        fail_msg("waits: %s", err.msg);
    sl_databus_options bo = {.on_append = on_append, .ctx = f->ws};
    if (sl_databus_start(&bo, &f->bus, &err))
        fail_msg("databus: %s", err.msg);
    sl_sets_options so = {.data_dir = f->dir,
                          .auto_create = true,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = f->bus};
    sl_set_config_default(&so.defaults);
    so.defaults.linger_ms = 0;
    so.defaults.ack = SL_ACK_BUFFER;
    if (sl_sets_open(&so, &f->sets, &err))
        fail_msg("sets: %s", err.msg);
    f->k = calloc(1, sizeof *f->k);
    f->k->sets = f->sets;
    f->k->bus = f->bus;
    f->k->waits = f->ws;
    snprintf(f->k->data_dir, sizeof f->k->data_dir, "%s", f->dir);
    f->k->o.data_dir = f->k->data_dir;
    f->k->o.waits = f->ws;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    sl_databus_free(f->bus);
    sl_waits_free(f->ws);
    sl_sets_close(f->sets);
    tu_rmdir(f->dir);
    free(f->k);
    free(f);
    return 0;
}

static sl_set *define(fx *f, const char *name, int32_t partitions)
{
    sl_set_config c = *sl_sets_defaults(f->sets);
    c.partitions = partitions;
    c.log.retention_ms = -1;
    sl_set *s = NULL;
    sl_error err = {0};
    if (sl_sets_define(f->sets, name, &c, &s, &err))
        fail_msg("define %s: %s", name, err.msg);
    return s;
}

/* Appends n records [first, first + n) as one batch of lane to partition p,
 * with the codec and timestamps 1000 + offset. */
static void append(sl_set *s, int32_t p, int64_t first, int n, size_t vsize, const char *lane,
                   sl_codec codec)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 0);
    tu_append_batch(TU_LOG(s, p), &b, first, n, vsize, NULL, 1000, lane);
    sl_batch_builder_free(&b);
}

/* What the files of partition p of set name hold. */
static void scan(fx *f, const char *name, int32_t p, tu_disk *d)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/sets/%s/%d", f->dir, name, (int)p);
    tu_disk_scan(dir, d);
}

/* The stored bytes of batches [from, to) of d (one segment). */
static uint8_t *stored(fx *f, const char *name, int32_t p, const tu_disk *d, size_t from, size_t to,
                       size_t *len)
{
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/sets/%s/%d", f->dir, name, (int)p);
    tu_seg_path(path, sizeof path, dir, d->segs[d->b[from].seg].base, ".log");
    size_t flen;
    uint8_t *file = tu_read_file(path, &flen);
    uint64_t a = d->b[from].pos, z = d->b[to - 1].pos + d->b[to - 1].size;
    assert_true(z <= flen);
    *len = (size_t)(z - a);
    uint8_t *out = malloc(*len + 1);
    memcpy(out, file + a, *len);
    free(file);
    return out;
}

/* ---- requests ------------------------------------------------------------------ */

static void header(sl_kw *w, int16_t key, int16_t v, const char *client_id)
{
    sl_kw_i16(w, key);
    sl_kw_i16(w, v);
    sl_kw_i32(w, 42);
    sl_kw_str(w, false, client_id, -1);
}

typedef struct fetch_args {
    int16_t v;
    const char *client_id;
    int32_t max_wait, min_bytes, max_bytes;
    int32_t session_id, epoch;
    const char *topic;
    int np;
    int32_t parts[4];
    int64_t offs[4];
    int32_t pmax;
} fetch_args;

static sl_kreq *fetch_req(fx *f, const fetch_args *a)
{
    sl_buf b = {0};
    sl_kw w;
    sl_kw_init(&w, &b);
    header(&w, SL_KAPI_FETCH, a->v, a->client_id ? a->client_id : "test");
    sl_kw_i32(&w, -1);
    sl_kw_i32(&w, a->max_wait);
    sl_kw_i32(&w, a->min_bytes);
    sl_kw_i32(&w, a->max_bytes);
    sl_kw_i8(&w, 0);
    if (a->v >= 7) {
        sl_kw_i32(&w, a->session_id);
        sl_kw_i32(&w, a->epoch);
    }
    sl_kw_array(&w, false, 1);
    sl_kw_str(&w, false, a->topic, -1);
    sl_kw_array(&w, false, a->np);
    for (int i = 0; i < a->np; i++) {
        sl_kw_i32(&w, a->parts[i]);
        if (a->v >= 9)
            sl_kw_i32(&w, -1);
        sl_kw_i64(&w, a->offs[i]);
        if (a->v >= 5)
            sl_kw_i64(&w, -1);
        sl_kw_i32(&w, a->pmax);
    }
    if (a->v >= 7)
        sl_kw_array(&w, false, 0);
    if (a->v >= 11)
        sl_kw_str(&w, false, "", -1);
    assert_true(sl_kw_ok(&w));
    sl_kreq *r = sl__kreq_new_detached(f->k, b.data, b.len);
    assert_non_null(r);
    sl_buf_free(&b);
    return r;
}

/* The response body with the file parts read in (pread on each slice's fd). */
static void flatten(const sl_kreq *r, sl_buf *o)
{
    size_t at = 0;
    for (size_t i = 0; i < r->nfiles; i++) {
        const sl_kfile *fp = &r->files[i];
        assert_true(fp->at >= at && fp->at <= r->out.len);
        assert_int_equal(sl_buf_append(o, r->out.data + at, fp->at - at), 0);
        uint8_t *tmp = malloc(fp->slice.len + 1);
        assert_int_equal(pread(fp->slice.fd, tmp, fp->slice.len, (off_t)fp->slice.pos),
                         (ssize_t)fp->slice.len);
        assert_int_equal(sl_buf_append(o, tmp, fp->slice.len), 0);
        free(tmp);
        at = fp->at;
    }
    assert_int_equal(sl_buf_append(o, r->out.data + at, r->out.len - at), 0);
}

typedef struct fpart {
    int32_t part;
    int16_t err;
    int64_t hwm, lso, start;
    int32_t naborted;
    int32_t replica;
    const uint8_t *rec;
    int32_t rec_len;
} fpart;

typedef struct fresp {
    int16_t err;
    int32_t session;
    int32_t ntopics;
    int np;
    fpart p[4];
    sl_buf full;
} fresp;

/* Parses the Fetch response of r (one topic), asserting it is well formed. */
static void parse_fetch(const sl_kreq *r, int16_t v, fresp *out)
{
    memset(out, 0, sizeof *out);
    flatten(r, &out->full);
    sl_kr rd;
    sl_kr_init(&rd, out->full.data, out->full.len);
    assert_int_equal(sl_kr_i32(&rd), 0); /* throttle */
    if (v >= 7) {
        out->err = sl_kr_i16(&rd);
        out->session = sl_kr_i32(&rd);
    }
    out->ntopics = sl_kr_array(&rd, false, 1);
    for (int32_t t = 0; t < out->ntopics; t++) {
        (void)sl_kr_str(&rd, false);
        int32_t np = sl_kr_array(&rd, false, 1);
        assert_true(np <= 4);
        out->np = np;
        for (int32_t i = 0; i < np; i++) {
            fpart *p = &out->p[i];
            p->part = sl_kr_i32(&rd);
            p->err = sl_kr_i16(&rd);
            p->hwm = sl_kr_i64(&rd);
            p->lso = sl_kr_i64(&rd);
            p->start = v >= 5 ? sl_kr_i64(&rd) : -100;
            p->naborted = sl_kr_array(&rd, false, 16);
            p->replica = v >= 11 ? sl_kr_i32(&rd) : -100;
            sl_kstr rec = sl_kr_bytes(&rd, false);
            p->rec = (const uint8_t *)rec.p;
            p->rec_len = rec.len < 0 ? 0 : rec.len;
        }
    }
    assert_true(sl_kr_ok(&rd));
    assert_int_equal(sl_kr_left(&rd), 0);
}

static void fresp_free(fresp *p)
{
    sl_buf_free(&p->full);
}

/* Runs one Fetch to its answer (no long poll expected). */
static void fetch(fx *f, const fetch_args *a, fresp *out)
{
    sl_kreq *r = fetch_req(f, a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_DONE);
    parse_fetch(r, a->v, out);
    sl__kreq_free(r);
}

/* ---- tests ----------------------------------------------------------------------- */

/* Fetch v4 and v11 return exactly the stored batches, with the watermarks. */
static void test_exact_bytes(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "t", 1);
    append(s, 0, 0, 5, 100, "", SL_CODEC_NONE);
    append(s, 0, 5, 5, 100, "", SL_CODEC_NONE);
    append(s, 0, 10, 5, 100, "", SL_CODEC_NONE);
    tu_disk d;
    scan(f, "t", 0, &d);
    assert_int_equal(d.nb, 3);
    size_t len;
    uint8_t *want = stored(f, "t", 0, &d, 0, 3, &len);
    int16_t versions[] = {4, 5, 7, 9, 10, 11};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        int16_t v = versions[i];
        fetch_args a = {.v = v, .max_bytes = 1 << 20, .topic = "t", .np = 1, .pmax = 1 << 20,
                        .epoch = -1};
        fresp p;
        fetch(f, &a, &p);
        assert_int_equal(p.err, 0);
        assert_int_equal(p.ntopics, 1);
        assert_int_equal(p.np, 1);
        assert_int_equal(p.p[0].err, 0);
        assert_int_equal(p.p[0].hwm, 15);
        assert_int_equal(p.p[0].lso, 15);
        if (v >= 5)
            assert_int_equal(p.p[0].start, 0);
        if (v >= 11)
            assert_int_equal(p.p[0].replica, -1);
        assert_int_equal(p.p[0].naborted, -1);
        assert_int_equal(p.p[0].rec_len, (int32_t)len);
        assert_memory_equal(p.p[0].rec, want, len);
        fresp_free(&p);
    }
    free(want);

    /* An offset inside a batch returns that whole batch (as Kafka: the
     * client skips the records before its offset), then the rest. */
    fetch_args a = {.v = 11, .max_bytes = 1 << 20, .topic = "t", .np = 1, .offs = {7},
                    .pmax = 1 << 20, .epoch = -1};
    fresp p;
    fetch(f, &a, &p);
    want = stored(f, "t", 0, &d, 1, 3, &len);
    assert_int_equal(p.p[0].rec_len, (int32_t)len);
    assert_memory_equal(p.p[0].rec, want, len);
    free(want);
    fresp_free(&p);

    /* At the end, with no wait: empty records. */
    a.offs[0] = 15;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, 0);
    assert_int_equal(p.p[0].rec_len, 0);
    fresp_free(&p);
    assert_true(atomic_load(&f->k->stats.fetched_bytes) >= 6 * (uint64_t)d.b[0].size);
    tu_disk_free(&d);
}

/* partition_max_bytes and max_bytes in whole batches; the first batch of
 * the first partition with data goes out whatever its size (KIP-74). */
static void test_max_bytes(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "m", 2);
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 3; b++)
            append(s, p, b * 4, 4, 200, "", SL_CODEC_NONE);
    tu_disk d0, d1;
    scan(f, "m", 0, &d0);
    scan(f, "m", 1, &d1);
    uint64_t bs = d0.b[0].size;
    size_t len;

    /* One and a half batches per partition: one batch each. */
    fetch_args a = {.v = 11, .max_bytes = 1 << 20, .topic = "m", .np = 2, .parts = {0, 1},
                    .pmax = (int32_t)(bs + bs / 2), .epoch = -1};
    fresp p;
    fetch(f, &a, &p);
    assert_int_equal(p.np, 2);
    uint8_t *want = stored(f, "m", 0, &d0, 0, 1, &len);
    assert_int_equal(p.p[0].rec_len, (int32_t)len);
    assert_memory_equal(p.p[0].rec, want, len);
    free(want);
    want = stored(f, "m", 1, &d1, 0, 1, &len);
    assert_int_equal(p.p[1].rec_len, (int32_t)len);
    assert_memory_equal(p.p[1].rec, want, len);
    free(want);
    fresp_free(&p);

    /* Smaller than a batch: the first partition still gets one, the second
     * none (its batch would not fit and it is not first). */
    a.pmax = 10;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, 0);
    assert_int_equal(p.p[0].rec_len, (int32_t)bs);
    assert_int_equal(p.p[1].err, 0);
    assert_int_equal(p.p[1].rec_len, 0);
    fresp_free(&p);

    /* The first partition empty (at its end): the second is the first with
     * data and gets its oversized batch. */
    a.offs[0] = 12;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, 0);
    assert_int_equal(p.p[1].rec_len, (int32_t)d1.b[0].size);
    fresp_free(&p);

    /* The response's max_bytes: two and a half batches in all. */
    a.offs[0] = 0;
    a.pmax = 1 << 20;
    a.max_bytes = (int32_t)(2 * bs + bs / 2);
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, (int32_t)(2 * bs));
    assert_int_equal(p.p[1].rec_len, 0);
    fresp_free(&p);

    /* max_bytes 0 still gives one batch (KIP-74). */
    a.max_bytes = 0;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, (int32_t)bs);
    assert_int_equal(p.p[1].rec_len, 0);
    fresp_free(&p);
    tu_disk_free(&d0);
    tu_disk_free(&d1);
}

/* Offsets outside [start, end], unknown topics and partitions, sessions. */
static void test_errors(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "e", 1);
    append(s, 0, 0, 3, 50, "", SL_CODEC_NONE);
    fetch_args a = {.v = 11, .max_bytes = 1 << 20, .topic = "e", .np = 1, .offs = {4},
                    .pmax = 1 << 20, .epoch = -1};
    fresp p;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_OFFSET_OUT_OF_RANGE);
    assert_int_equal(p.p[0].hwm, 3);
    assert_int_equal(p.p[0].start, 0);
    assert_int_equal(p.p[0].rec_len, 0);
    fresp_free(&p);

    a.offs[0] = -1;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_OFFSET_OUT_OF_RANGE);
    fresp_free(&p);

    /* An error answers at once even with a long wait. */
    a.max_wait = 10000;
    a.min_bytes = 1;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_OFFSET_OUT_OF_RANGE);
    fresp_free(&p);
    a.max_wait = 0;
    a.min_bytes = 0;

    a.offs[0] = 0;
    a.parts[0] = 1;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    assert_int_equal(p.p[0].hwm, -1);
    fresp_free(&p);

    a.parts[0] = 0;
    a.topic = "nosuch";
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    fresp_free(&p);
    /* Fetch never auto-creates. */
    sl_set *none = NULL;
    sl_error err = {0};
    assert_int_equal(sl_sets_get(f->sets, "nosuch", false, &none, &err), SL_ENOENT);

    a.topic = "bad/name";
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_INVALID_TOPIC_EXCEPTION);
    fresp_free(&p);

    /* Sessions: id 0 only; epoch -1 or 0. */
    a.topic = "e";
    a.session_id = 7;
    fetch(f, &a, &p);
    assert_int_equal(p.err, 70);
    assert_int_equal(p.ntopics, 0);
    fresp_free(&p);
    a.session_id = 0;
    a.epoch = 0;
    fetch(f, &a, &p);
    assert_int_equal(p.err, 0);
    assert_int_equal(p.session, 0);
    assert_int_equal(p.p[0].err, 0);
    fresp_free(&p);
    a.epoch = 3;
    fetch(f, &a, &p);
    assert_int_equal(p.err, 71);
    fresp_free(&p);

    /* A truncated request closes the connection. */
    a.epoch = -1;
    sl_kreq *r = fetch_req(f, &a);
    r->body.end -= 3;
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
}

/* zstd batches need Fetch v10. */
static void test_zstd(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "z", 2);
    append(s, 0, 0, 4, 300, "", SL_CODEC_ZSTD);
    append(s, 1, 0, 4, 300, "", SL_CODEC_NONE);
    append(s, 1, 4, 4, 300, "", SL_CODEC_ZSTD);
    tu_disk d0, d1;
    scan(f, "z", 0, &d0);
    scan(f, "z", 1, &d1);
    fetch_args a = {.v = 9, .max_bytes = 1 << 20, .topic = "z", .np = 2, .parts = {0, 1},
                    .pmax = 1 << 20, .epoch = -1};
    fresp p;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_UNSUPPORTED_COMPRESSION_TYPE);
    assert_int_equal(p.p[0].rec_len, 0);
    assert_int_equal(p.p[1].err, 0);
    assert_int_equal(p.p[1].rec_len, (int32_t)d1.b[0].size); /* stops before the zstd one */
    fresp_free(&p);

    a.v = 10;
    fetch(f, &a, &p);
    size_t len;
    uint8_t *want = stored(f, "z", 0, &d0, 0, 1, &len);
    assert_int_equal(p.p[0].err, 0);
    assert_int_equal(p.p[0].rec_len, (int32_t)len);
    assert_memory_equal(p.p[0].rec, want, len);
    free(want);
    want = stored(f, "z", 1, &d1, 0, 2, &len);
    assert_int_equal(p.p[1].rec_len, (int32_t)len);
    assert_memory_equal(p.p[1].rec, want, len);
    free(want);
    fresp_free(&p);
    tu_disk_free(&d0);
    tu_disk_free(&d1);
}

/* client.id picks the lane: base by default, sluice.lane=NAME, * for all. */
/* rec holds a valid record batch without records over [from, to). */
static void assert_empty_batch(const uint8_t *rec, int64_t from, int64_t to)
{
    sl_batch_info info;
    sl_error err = {0};
    assert_int_equal(sl_batch_check(rec, SL_BATCH_HEADER_SIZE, &info, &err), 0);
    assert_int_equal(info.base_offset, from);
    assert_int_equal(info.base_offset + info.last_offset_delta + 1, to);
    assert_int_equal(info.count, 0);
}

static void test_lanes(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "l", 1);
    append(s, 0, 0, 2, 80, "", SL_CODEC_NONE);   /* batch 0 */
    append(s, 0, 2, 2, 80, "eu", SL_CODEC_NONE); /* 1 */
    append(s, 0, 4, 2, 80, "eu", SL_CODEC_NONE); /* 2 */
    append(s, 0, 6, 2, 80, "", SL_CODEC_NONE);   /* 3 */
    append(s, 0, 8, 2, 80, "us", SL_CODEC_NONE); /* 4 */
    tu_disk d;
    scan(f, "l", 0, &d);
    assert_int_equal(d.nb, 5);
    size_t len0, len1, len3;
    uint8_t *b0 = stored(f, "l", 0, &d, 0, 1, &len0);
    uint8_t *b12 = stored(f, "l", 0, &d, 1, 3, &len1);
    uint8_t *b3 = stored(f, "l", 0, &d, 3, 4, &len3);
    fetch_args a = {.v = 11, .max_bytes = 1 << 20, .topic = "l", .np = 1, .pmax = 1 << 20,
                    .epoch = -1, .client_id = "rdkafka"};
    fresp p;
    /* Base lane: batches 0 and 3, nothing of eu or us; then an empty
     * batch over us's offsets 8-9, so the consumer's position reaches the
     * end. */
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, (int32_t)(len0 + len3 + SL_BATCH_HEADER_SIZE));
    assert_memory_equal(p.p[0].rec, b0, len0);
    assert_memory_equal(p.p[0].rec + len0, b3, len3);
    assert_empty_batch(p.p[0].rec + len0 + len3, 8, 10);
    assert_int_equal(p.p[0].hwm, 10);
    fresp_free(&p);

    a.client_id = "app-1,sluice.lane=eu";
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, (int32_t)(len1 + SL_BATCH_HEADER_SIZE));
    assert_memory_equal(p.p[0].rec, b12, len1);
    assert_empty_batch(p.p[0].rec + len1, 6, 10);
    fresp_free(&p);
    a.client_id = "sluice.lane=eu;app-1";
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, (int32_t)(len1 + SL_BATCH_HEADER_SIZE));
    fresp_free(&p);
    /* From past the eu batches: nothing more of eu, the rest stepped over. */
    a.offs[0] = 6;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, 0);
    assert_int_equal(p.p[0].rec_len, SL_BATCH_HEADER_SIZE);
    assert_empty_batch(p.p[0].rec, 6, 10);
    fresp_free(&p);
    /* At the end: nothing at all. */
    a.offs[0] = 10;
    a.max_wait = 0;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, 0);
    fresp_free(&p);
    a.offs[0] = 0;

    a.client_id = "sluice.lane=*";
    fetch(f, &a, &p);
    size_t all;
    uint8_t *ball = stored(f, "l", 0, &d, 0, 5, &all);
    assert_int_equal(p.p[0].rec_len, (int32_t)all);
    assert_memory_equal(p.p[0].rec, ball, all);
    fresp_free(&p);

    a.client_id = "x sluice.lane=";
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, (int32_t)(len0 + len3 + SL_BATCH_HEADER_SIZE));
    fresp_free(&p);

    a.client_id = "sluice.lane=EU";
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].err, SL_KERR_INVALID_REQUEST);
    assert_int_equal(p.p[0].rec_len, 0);
    fresp_free(&p);

    /* A base-lane long poll at offset 8 (only a us batch after it) is
     * answered at once with the step over it; at 10 it waits: the us batch
     * does not satisfy it. */
    a.client_id = "base";
    a.offs[0] = 8;
    a.max_wait = 150;
    a.min_bytes = 1;
    sl_kreq *r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_DONE);
    parse_fetch(r, 11, &p);
    assert_int_equal(p.p[0].rec_len, SL_BATCH_HEADER_SIZE);
    assert_empty_batch(p.p[0].rec, 8, 10);
    fresp_free(&p);
    sl__kreq_free(r);
    a.offs[0] = 10;
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_PENDING);
    assert_int_equal(sl__kreq_wait(r, 3000), SL_KREQ_DONE);
    parse_fetch(r, 11, &p);
    assert_int_equal(p.p[0].rec_len, 0);
    fresp_free(&p);
    sl__kreq_free(r);

    free(b0);
    free(b12);
    free(b3);
    free(ball);
    tu_disk_free(&d);
}

/* The long poll: answered at max_wait_ms with nothing, woken early by an
 * append through the Databus, cancelled, and answered at once when
 * stopping or with min_bytes met. */
static void test_long_poll(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "lp", 1);
    fetch_args a = {.v = 11, .max_bytes = 1 << 20, .topic = "lp", .np = 1, .pmax = 1 << 20,
                    .epoch = -1, .max_wait = 200, .min_bytes = 1};
    /* Nothing comes: answered after about 200 ms. */
    int64_t t0 = sl_clock_mono_ms();
    sl_kreq *r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_PENDING);
    assert_int_equal(sl__kreq_wait(r, 5000), SL_KREQ_DONE);
    int64_t took = sl_clock_mono_ms() - t0;
    assert_true(took >= 190); /* not before its max_wait_ms */
    fresp p;
    parse_fetch(r, 11, &p);
    assert_int_equal(p.p[0].err, 0);
    assert_int_equal(p.p[0].rec_len, 0);
    assert_int_equal(p.p[0].hwm, 0);
    fresp_free(&p);
    sl__kreq_free(r);

    /* An append wakes it long before its 10 s. */
    a.max_wait = 10000;
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_PENDING);
    usleep(50 * 1000);
    const char *val = "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"t\",\"type\":\"x\"}";
    sl_databus_event ev = {.value = val, .value_len = strlen(val), .lane = "", .ts_ms = 5};
    sl_databus_result res;
    sl_error err = {0};
    int rc = sl_databus_publish(f->bus, s, &ev, 1, &res, NULL, NULL, &err);
    assert_true(rc == 0);
    /* Answered within 8 s: woken by the append, not by its 10 s deadline. */
    assert_int_equal(sl__kreq_wait(r, 8000), SL_KREQ_DONE);
    parse_fetch(r, 11, &p);
    assert_int_equal(p.p[0].err, 0);
    assert_true(p.p[0].rec_len > 0);
    assert_int_equal(p.p[0].hwm, 1);
    tu_disk d;
    scan(f, "lp", 0, &d);
    size_t len;
    uint8_t *want = stored(f, "lp", 0, &d, 0, 1, &len);
    assert_int_equal(p.p[0].rec_len, (int32_t)len);
    assert_memory_equal(p.p[0].rec, want, len);
    free(want);
    tu_disk_free(&d);
    fresp_free(&p);
    sl__kreq_free(r);

    /* Data already there and min_bytes met: no wait at all. */
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_DONE);
    sl__kreq_free(r);

    /* min_bytes more than there is: waits, then answers what there is. */
    a.max_wait = 100;
    a.min_bytes = 1 << 20;
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_PENDING);
    assert_int_equal(sl__kreq_wait(r, 5000), SL_KREQ_DONE);
    parse_fetch(r, 11, &p);
    assert_true(p.p[0].rec_len > 0);
    fresp_free(&p);
    sl__kreq_free(r);

    /* Cancelled while parked: no post comes, nothing leaks (san). */
    a.offs[0] = 1;
    a.max_wait = 10000;
    a.min_bytes = 1;
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_PENDING);
    assert_true(r->cancel(r));
    sl__kreq_free(r);
    /* An append after the cancel must not touch the freed request. */
    rc = sl_databus_publish(f->bus, s, &ev, 1, &res, NULL, NULL, &err);
    assert_true(rc == 0);
    usleep(50 * 1000);

    /* Freed while parked without a cancel (cleanup cancels the waits). */
    a.offs[0] = 2;
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_PENDING);
    sl__kreq_free(r);

    /* Stopping: answered at once. */
    atomic_store(&f->k->stopping, true);
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_DONE);
    sl__kreq_free(r);
    atomic_store(&f->k->stopping, false);

    /* A parked fetch resumed when the registry stops (the server's stop). */
    r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_PENDING);
    atomic_store(&f->k->stopping, true);
    sl_waits_stop(f->ws);
    assert_int_equal(sl__kreq_wait(r, 2000), SL_KREQ_DONE);
    sl__kreq_free(r);
}

/* ---- ListOffsets ------------------------------------------------------------------- */

static sl_kreq *list_req(fx *f, int16_t v, const char *topic, int32_t part, int64_t ts)
{
    sl_buf b = {0};
    sl_kw w;
    sl_kw_init(&w, &b);
    header(&w, SL_KAPI_LIST_OFFSETS, v, "test");
    sl_kw_i32(&w, -1);
    if (v >= 2)
        sl_kw_i8(&w, 0);
    sl_kw_array(&w, false, 1);
    sl_kw_str(&w, false, topic, -1);
    sl_kw_array(&w, false, 1);
    sl_kw_i32(&w, part);
    sl_kw_i64(&w, ts);
    sl_kreq *r = sl__kreq_new_detached(f->k, b.data, b.len);
    assert_non_null(r);
    sl_buf_free(&b);
    return r;
}

static void list_offsets(fx *f, int16_t v, const char *topic, int32_t part, int64_t ts,
                         int16_t *err, int64_t *out_ts, int64_t *out_off)
{
    sl_kreq *r = list_req(f, v, topic, part, ts);
    assert_int_equal(sl__kafka_list_offsets(r), SL_KREQ_DONE);
    sl_kr rd;
    sl_kr_init(&rd, r->out.data, r->out.len);
    if (v >= 2)
        assert_int_equal(sl_kr_i32(&rd), 0);
    assert_int_equal(sl_kr_array(&rd, false, 1), 1);
    sl_kstr t = sl_kr_str(&rd, false);
    assert_true(sl_kstr_eq(t, topic));
    assert_int_equal(sl_kr_array(&rd, false, 1), 1);
    assert_int_equal(sl_kr_i32(&rd), part);
    *err = sl_kr_i16(&rd);
    *out_ts = sl_kr_i64(&rd);
    *out_off = sl_kr_i64(&rd);
    assert_true(sl_kr_ok(&rd));
    assert_int_equal(sl_kr_left(&rd), 0);
    sl__kreq_free(r);
}

static void test_list_offsets(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "o", 2);
    /* Timestamps 1000 + offset. */
    append(s, 0, 0, 10, 50, "", SL_CODEC_NONE);
    append(s, 0, 10, 10, 50, "", SL_CODEC_NONE);
    for (int16_t v = 1; v <= 3; v++) {
        int16_t err;
        int64_t ts, off;
        list_offsets(f, v, "o", 0, -1, &err, &ts, &off);
        assert_int_equal(err, 0);
        assert_int_equal(off, 20);
        assert_int_equal(ts, -1);
        list_offsets(f, v, "o", 0, -2, &err, &ts, &off);
        assert_int_equal(err, 0);
        assert_int_equal(off, 0);
        list_offsets(f, v, "o", 0, 1013, &err, &ts, &off);
        assert_int_equal(err, 0);
        assert_int_equal(off, 13);
        assert_int_equal(ts, 1013);
        list_offsets(f, v, "o", 0, 0, &err, &ts, &off);
        assert_int_equal(off, 0);
        assert_int_equal(ts, 1000);
        /* Past the last record's time: -1 / -1, as Kafka. */
        list_offsets(f, v, "o", 0, 5000, &err, &ts, &off);
        assert_int_equal(err, 0);
        assert_int_equal(off, -1);
        assert_int_equal(ts, -1);
        /* An empty partition. */
        list_offsets(f, v, "o", 1, -1, &err, &ts, &off);
        assert_int_equal(off, 0);
        list_offsets(f, v, "o", 1, 1000, &err, &ts, &off);
        assert_int_equal(off, -1);
        list_offsets(f, v, "o", 2, -1, &err, &ts, &off);
        assert_int_equal(err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
        list_offsets(f, v, "nosuch", 0, -1, &err, &ts, &off);
        assert_int_equal(err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    }
    sl_kreq *r = list_req(f, 2, "o", 0, -1);
    r->body.end -= 4;
    assert_int_equal(sl__kafka_list_offsets(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
}

/* A parked store (pooled, closed) answers without being reopened at its end
 * and is reopened for data. */
static void test_parked(void **state)
{
    fx *f = *state;
    sl_set *s = define(f, "pk", 1);
    append(s, 0, 0, 3, 50, "", SL_CODEC_NONE);
    sl_error err = {0};
    int rc = sl_store_park(&s->parts[0], &err);
    if (rc == SL_EINVAL)
        skip(); /* not a pooled store */
    assert_int_equal(rc, 0);
    assert_true(sl_store_parked(&s->parts[0]));
    fetch_args a = {.v = 11, .max_bytes = 1 << 20, .topic = "pk", .np = 1, .offs = {3},
                    .pmax = 1 << 20, .epoch = -1};
    fresp p;
    fetch(f, &a, &p);
    assert_int_equal(p.p[0].rec_len, 0);
    assert_int_equal(p.p[0].hwm, 3);
    fresp_free(&p);
    assert_true(sl_store_parked(&s->parts[0]));
    a.offs[0] = 0;
    sl_kreq *r = fetch_req(f, &a);
    assert_int_equal(sl__kafka_fetch(r), SL_KREQ_DONE);
    /* The slice keeps its segment even when the store parks again. */
    assert_int_equal(sl_store_park(&s->parts[0], &err), 0);
    parse_fetch(r, 11, &p);
    assert_true(p.p[0].rec_len > 0);
    fresp_free(&p);
    sl__kreq_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_exact_bytes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_max_bytes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_errors, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_zstd, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lanes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_long_poll, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_list_offsets, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_parked, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
