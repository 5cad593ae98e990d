/*
 * tests/unit/test_kproduce.c — kafka/kproduce.c over a real Databus and sets
 * in a temporary directory, with Produce requests encoded as clients send
 * them: records read back from the set's log with their key, value, headers
 * and timestamp unchanged; acks=-1 parks until the fsync and then answers
 * the base offset; a corrupt CRC stores nothing (CORRUPT_MESSAGE); acks=0
 * answers nothing; an unknown partition, bad acks, a transactional id and
 * InitProducerId; an idempotent producer's retried batch is answered with
 * its first offset and stored once, a gap and an old epoch are refused, and
 * the state survives a stop and start.
 */
#include "testutil.h"

#include "core/base/crc32c.h"
#include "core/base/varint.h"
#include "kafka/kafka_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fx {
    char *dir;
    sl_databus *bus;
    sl_sets *sets;
    sl_kafka *k;
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    sl_error err = {0};
    sl_databus_options bo = {0};
    if (sl_databus_start(&bo, &f->bus, &err))
        fail_msg("databus: %s", err.msg);
    sl_sets_options so = {.data_dir = f->dir,
                          .auto_create = true,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = f->bus};
    sl_set_config_default(&so.defaults);
    so.defaults.linger_ms = 0;
    so.defaults.partitions = 2;
    if (sl_sets_open(&so, &f->sets, &err))
        fail_msg("sets: %s", err.msg);
    f->k = calloc(1, sizeof *f->k);
    f->k->sets = f->sets;
    f->k->bus = f->bus;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    sl_databus_free(f->bus);
    sl_sets_close(f->sets);
    tu_rmdir(f->dir);
    free(f->k);
    free(f);
    return 0;
}

/* n records "k<i>" -> "v<i>" with headers h1=x, lane (when given), ts
 * 5000 + i, in one client batch (as librdkafka encodes it). */
static void client_batch(sl_buf *out, int n, const char *lane)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, lane ? lane : ""), 0);
    for (int i = 0; i < n; i++) {
        char k[16], v[16];
        uint8_t h[64];
        size_t hl = 0;
        int32_t hn = 1;
        hl += sl_varint_put(h + hl, 2);
        memcpy(h + hl, "h1", 2);
        hl += 2;
        hl += sl_varint_put(h + hl, 1);
        h[hl++] = 'x';
        if (lane) {
            hl += sl_varint_put(h + hl, 4);
            memcpy(h + hl, "lane", 4);
            hl += 4;
            hl += sl_varint_put(h + hl, (int64_t)strlen(lane));
            memcpy(h + hl, lane, strlen(lane));
            hl += strlen(lane);
            hn++;
        }
        snprintf(k, sizeof k, "k%d", i);
        snprintf(v, sizeof v, "v%d", i);
        assert_int_equal(sl_batch_builder_add_raw(&b, 5000 + i, k, strlen(k), v, strlen(v), h, hl,
                                                  hn),
                         0);
    }
    sl_batch bt;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &bt, &err), 0);
    assert_int_equal(sl_buf_append(out, bt.data, bt.len), 0);
    sl_batch_builder_free(&b);
}

static sl_kreq *produce(fx *f, int16_t v, const char *txn, int16_t acks, const char *topic,
                        int32_t part, const sl_buf *records)
{
    sl_buf b = {0};
    sl_kw w;
    sl_kw_init(&w, &b);
    sl_kw_i16(&w, SL_KAPI_PRODUCE);
    sl_kw_i16(&w, v);
    sl_kw_i32(&w, 9);
    sl_kw_str(&w, false, "test", -1);
    sl_kw_str(&w, false, txn, txn ? -1 : 0);
    sl_kw_i16(&w, acks);
    sl_kw_i32(&w, 30000);
    sl_kw_array(&w, false, 1);
    sl_kw_str(&w, false, topic, -1);
    sl_kw_array(&w, false, 1);
    sl_kw_i32(&w, part);
    sl_kw_bytes(&w, false, records->data, (int32_t)records->len);
    sl_kreq *r = sl__kreq_new_detached(f->k, b.data, b.len);
    sl_buf_free(&b);
    assert_non_null(r);
    return r;
}

/* The one partition's error and base offset of a Produce response. */
static void answer(sl_kreq *r, int16_t *err, int64_t *base)
{
    sl_kr in;
    sl_kr_init(&in, r->out.data, r->out.len);
    assert_int_equal(sl_kr_array(&in, false, 1), 1);
    sl_kr_str(&in, false);
    assert_int_equal(sl_kr_array(&in, false, 1), 1);
    sl_kr_i32(&in);
    *err = sl_kr_i16(&in);
    *base = sl_kr_i64(&in);
    sl_kr_i64(&in);
    if (r->h.version >= 5)
        sl_kr_i64(&in);
    assert_int_equal(sl_kr_i32(&in), 0);
    assert_true(sl_kr_ok(&in));
    assert_int_equal(sl_kr_left(&in), 0);
}

/* Runs r to its answer (parked ones waited for). */
static int finish(sl_kreq *r)
{
    int code = sl__kafka_produce(r);
    if (code == SL_KREQ_PENDING)
        code = sl__kreq_wait(r, 10000);
    return code;
}

static void test_round_trip(void **state)
{
    fx *f = *state;
    sl_buf recs = {0};
    client_batch(&recs, 5, NULL);
    for (int16_t v = 3; v <= 7; v += 4) {
        sl_kreq *r = produce(f, v, NULL, -1, "orders", 1, &recs);
        assert_int_equal(finish(r), SL_KREQ_DONE);
        int16_t err;
        int64_t base;
        answer(r, &err, &base);
        assert_int_equal(err, 0);
        assert_int_equal(base, v == 3 ? 0 : 5);
        sl__kreq_free(r);
    }
    sl_buf_free(&recs);

    /* Read back from the log: every field as the client sent it. */
    sl_set *s;
    sl_error err = {0};
    assert_int_equal(sl_sets_get(f->sets, "orders", false, &s, &err), 0);
    void *rd;
    assert_int_equal(sl_store_reader_open(&s->parts[1], 0, "", &rd, &err), 0);
    sl_record rec;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(sl_store_reader_next(&s->parts[1], rd, &rec, &err), 0);
        char k[16], v[16];
        snprintf(k, sizeof k, "k%d", i % 5);
        snprintf(v, sizeof v, "v%d", i % 5);
        assert_int_equal(rec.offset, i);
        assert_int_equal(rec.timestamp, 5000 + i % 5);
        assert_int_equal(rec.key_len, strlen(k));
        assert_memory_equal(rec.key, k, rec.key_len);
        assert_int_equal(rec.value_len, strlen(v));
        assert_memory_equal(rec.value, v, rec.value_len);
        assert_int_equal(rec.header_count, 1);
        assert_int_equal(rec.headers_len, 5);
        assert_memory_equal(rec.headers, "\x04h1\x02x", 5);
    }
    sl_store_reader_close(&s->parts[1], rd);
    assert_int_equal(sl_store_end_offset(&s->parts[0]), 0); /* the client's partition only */

    /* Each client batch (one lane, the set's codec) is stored as it is:
     * two batches on disk, byte for byte the client's after the base
     * offset (which is outside the CRC). */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/sets/orders/1", f->dir);
    tu_disk d;
    tu_disk_scan(dir, &d);
    assert_int_equal(d.nb, 2);
    sl_buf one = {0};
    client_batch(&one, 5, NULL);
    char seg[4300];
    snprintf(seg, sizeof seg, "%s/%020lld.log", dir, (long long)d.segs[d.b[1].seg].base);
    size_t len;
    uint8_t *disk = tu_slurp(seg, &len);
    assert_non_null(disk);
    assert_int_equal(d.b[1].size, one.len);
    assert_int_equal(d.b[1].base, 5);
    assert_memory_equal(disk + d.b[1].pos + 8, (const uint8_t *)one.data + 8, one.len - 8);
    free(disk);
    sl_buf_free(&one);
    tu_disk_free(&d);
}

static void test_lanes(void **state)
{
    fx *f = *state;
    sl_buf recs = {0};
    client_batch(&recs, 3, "ppe");
    client_batch(&recs, 2, NULL);
    sl_kreq *r = produce(f, 7, NULL, -1, "mixed", 0, &recs);
    assert_int_equal(finish(r), SL_KREQ_DONE);
    int16_t err;
    int64_t base;
    answer(r, &err, &base);
    assert_int_equal(err, 0);
    assert_int_equal(base, 0);
    sl__kreq_free(r);
    sl_buf_free(&recs);
    sl_set *s;
    sl_error e = {0};
    assert_int_equal(sl_sets_get(f->sets, "mixed", false, &s, &e), 0);
    void *rd;
    assert_int_equal(sl_store_reader_open(&s->parts[0], 0, "ppe", &rd, &e), 0);
    sl_record rec;
    int n = 0;
    while (sl_store_reader_next(&s->parts[0], rd, &rec, &e) == 0) {
        assert_int_equal(rec.lane_len, 3);
        n++;
    }
    sl_store_reader_close(&s->parts[0], rd);
    assert_int_equal(n, 3);
}

static void test_refusals(void **state)
{
    fx *f = *state;
    sl_buf recs = {0};
    client_batch(&recs, 2, NULL);
    int16_t err;
    int64_t base;

    /* A flipped byte after the CRC field: nothing stored. */
    sl_buf bad = {0};
    assert_int_equal(sl_buf_append(&bad, recs.data, recs.len), 0);
    bad.data[bad.len - 1] ^= 0x55;
    sl_kreq *r = produce(f, 7, NULL, -1, "t", 0, &bad);
    assert_int_equal(finish(r), SL_KREQ_DONE);
    answer(r, &err, &base);
    assert_int_equal(err, SL_KERR_CORRUPT_MESSAGE);
    assert_int_equal(base, -1);
    sl__kreq_free(r);
    sl_buf_free(&bad);
    sl_set *s;
    sl_error e = {0};
    assert_int_equal(sl_sets_get(f->sets, "t", false, &s, &e), 0);
    assert_int_equal(sl_store_end_offset(&s->parts[0]), 0);

    r = produce(f, 7, NULL, -1, "t", 9, &recs);
    assert_int_equal(finish(r), SL_KREQ_DONE);
    answer(r, &err, &base);
    assert_int_equal(err, SL_KERR_UNKNOWN_TOPIC_OR_PARTITION);
    sl__kreq_free(r);

    r = produce(f, 7, NULL, 2, "t", 0, &recs);
    assert_int_equal(finish(r), SL_KREQ_DONE);
    answer(r, &err, &base);
    assert_int_equal(err, SL_KERR_INVALID_REQUIRED_ACKS);
    sl__kreq_free(r);

    r = produce(f, 7, "txn-1", -1, "t", 0, &recs);
    assert_int_equal(finish(r), SL_KREQ_DONE);
    answer(r, &err, &base);
    assert_int_equal(err, SL_KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    sl__kreq_free(r);

    /* acks=0: stored, nothing to answer. */
    r = produce(f, 7, NULL, 0, "t", 0, &recs);
    assert_int_equal(finish(r), SL_KREQ_DONE);
    assert_true(r->silent);
    sl__kreq_free(r);
    /* Answered before the write (no answer at all): the record lands soon. */
    for (int i = 0; i < 500 && sl_store_end_offset(&s->parts[0]) < 2; i++)
        usleep(10000);
    assert_int_equal(sl_store_end_offset(&s->parts[0]), 2);
    sl_buf_free(&recs);

    /* A truncated request closes. */
    uint8_t trunc[] = {0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0xff, 0xff, 0, 1};
    r = sl__kreq_new_detached(f->k, trunc, sizeof trunc);
    assert_non_null(r);
    assert_int_equal(sl__kafka_produce(r), SL_KREQ_CLOSE);
    sl__kreq_free(r);
}

static void test_init_producer_id(void **state)
{
    fx *f = *state;
    int64_t ids[2];
    for (int i = 0; i < 2; i++) {
        sl_buf b = {0};
        sl_kw w;
        sl_kw_init(&w, &b);
        sl_kw_i16(&w, SL_KAPI_INIT_PRODUCER_ID);
        sl_kw_i16(&w, 1);
        sl_kw_i32(&w, 1);
        sl_kw_str(&w, false, "test", -1);
        sl_kw_str(&w, false, NULL, 0);
        sl_kw_i32(&w, 60000);
        sl_kreq *r = sl__kreq_new_detached(f->k, b.data, b.len);
        sl_buf_free(&b);
        assert_int_equal(sl__kafka_init_producer_id(r), SL_KREQ_DONE);
        sl_kr in;
        sl_kr_init(&in, r->out.data, r->out.len);
        assert_int_equal(sl_kr_i32(&in), 0);
        assert_int_equal(sl_kr_i16(&in), 0);
        ids[i] = sl_kr_i64(&in);
        assert_int_equal(sl_kr_i16(&in), 0);
        assert_true(sl_kr_ok(&in));
        sl__kreq_free(r);
    }
    assert_true(ids[0] > 0);
    assert_true(ids[1] != ids[0]);
}

/* acks=1 is answered once queued even on a durable set (Kafka's leader
 * acknowledgement waits for no flush); acks=-1 parks until the fsync. */
static void test_acks_one(void **state)
{
    fx *f = *state;
    sl_buf recs = {0};
    client_batch(&recs, 3, NULL);
    sl_kreq *r = produce(f, 7, NULL, 1, "durable-set", 0, &recs);
    assert_int_equal(sl__kafka_produce(r), SL_KREQ_DONE);
    int16_t err;
    int64_t base;
    answer(r, &err, &base);
    assert_int_equal(err, 0);
    assert_int_equal(base, 0);
    sl__kreq_free(r);
    r = produce(f, 7, NULL, -1, "durable-set", 0, &recs);
    int code = sl__kafka_produce(r);
    if (code == SL_KREQ_PENDING)
        code = sl__kreq_wait(r, 10000);
    assert_int_equal(code, SL_KREQ_DONE);
    answer(r, &err, &base);
    assert_int_equal(base, 3);
    sl__kreq_free(r);
    sl_buf_free(&recs);
}

/* Makes the batch in b an idempotent producer's (pid, epoch, base
 * sequence), with its CRC recomputed as a client computes it. */
static void make_idempotent(sl_buf *b, int64_t pid, int16_t epoch, int32_t seq)
{
    uint8_t *p = (uint8_t *)b->data;
    sl_be64_put(p + 43, (uint64_t)pid);
    sl_be16_put(p + 51, (uint16_t)epoch);
    sl_be32_put(p + 53, (uint32_t)seq);
    sl_be32_put(p + 17, sl_crc32c(0, p + 21, b->len - 21));
}

static void produce_expect(fx *f, const sl_buf *recs, int16_t want_err, int64_t want_base)
{
    sl_kreq *r = produce(f, 7, NULL, -1, "idem", 0, recs);
    assert_int_equal(finish(r), SL_KREQ_DONE);
    int16_t err;
    int64_t base;
    answer(r, &err, &base);
    assert_int_equal(err, want_err);
    if (!want_err)
        assert_int_equal(base, want_base);
    sl__kreq_free(r);
}

static void test_idempotent(void **state)
{
    fx *f = *state;
    snprintf(f->k->data_dir, sizeof f->k->data_dir, "%s", f->dir);
    sl_error err = {0};
    assert_int_equal(sl__kidem_open(f->k, &err), 0);
    sl_buf a = {0}, b = {0}, c = {0}, old = {0};
    client_batch(&a, 3, NULL);
    make_idempotent(&a, 77, 0, 0); /* sequences 0..2 */
    client_batch(&b, 2, NULL);
    make_idempotent(&b, 77, 0, 3); /* 3..4 */
    client_batch(&c, 2, NULL);
    make_idempotent(&c, 77, 0, 9); /* a gap */
    produce_expect(f, &a, 0, 0);
    produce_expect(f, &a, 0, 0); /* the retry: same answer, nothing stored */
    produce_expect(f, &b, 0, 3);
    produce_expect(f, &c, SL_KERR_OUT_OF_ORDER_SEQUENCE_NUMBER, -1);
    produce_expect(f, &a, 0, 0); /* still known: one of the last five */

    /* A stop and start keep it; a newer epoch starts over at 0 and then
     * the older one is fenced. */
    sl__kidem_close(f->k);
    assert_int_equal(sl__kidem_open(f->k, &err), 0);
    produce_expect(f, &b, 0, 3);
    client_batch(&old, 1, NULL);
    make_idempotent(&old, 77, 1, 0);
    produce_expect(f, &old, 0, 5);
    make_idempotent(&old, 77, 0, 5);
    produce_expect(f, &old, SL_KERR_INVALID_PRODUCER_EPOCH, -1);

    sl_set *s;
    assert_int_equal(sl_sets_get(f->sets, "idem", false, &s, &err), 0);
    assert_int_equal(sl_store_end_offset(&s->parts[0]), 6); /* 3 + 2 + 1, once each */
    sl__kidem_close(f->k);
    sl_buf_free(&a);
    sl_buf_free(&b);
    sl_buf_free(&c);
    sl_buf_free(&old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lanes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_init_producer_id, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_idempotent, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_acks_one, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
