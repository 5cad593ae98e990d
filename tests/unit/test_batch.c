/*
 * tests/unit/test_batch.c — Kafka record batch v2 (core/log/batch.h): builder and
 * reader round trips for both codecs and lanes, the exact header and record
 * bytes (including a batch written by Kafka itself), CRC and sanity checks on
 * damaged or truncated input, and malformed records decoded right before a
 * PROT_NONE guard page so that any over-read crashes the test.
 */
#include "testutil.h"
#include "core/base/lane_name.h"

#include "core/base/crc32c.h"
#include "core/base/varint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

/* ---- helpers ------------------------------------------------------------- */

/* A fixed-seed generator, so a failure reproduces. */
static uint64_t rng_state = 0x2545F4914F6CDD1Du;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Pages followed by one PROT_NONE page: bytes placed to end at g->end sit
 * right before memory that crashes on any access. */
typedef struct guard {
    uint8_t *map;
    size_t map_len;
    uint8_t *end; /* first byte of the PROT_NONE page */
    size_t room;  /* readable bytes before end */
} guard;

static void guard_init(guard *g, size_t room)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (room + page - 1) / page;
    if (pages == 0)
        pages = 1;
    g->map_len = (pages + 1) * page;
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->map != MAP_FAILED);
    g->end = g->map + pages * page;
    g->room = pages * page;
    assert_int_equal(mprotect(g->end, page, PROT_NONE), 0);
}

/* Copies len bytes so that they end exactly at the guard page. */
static uint8_t *guard_place(guard *g, const void *p, size_t len)
{
    assert_true(len <= g->room);
    memcpy(g->end - len, p, len);
    return g->end - len;
}

static void guard_free(guard *g)
{
    assert_int_equal(munmap(g->map, g->map_len), 0);
}

/* Assembles a batch by hand around already encoded records: the header with
 * baseOffset 0, then recs, and the CRC. Returns the total size. */
static size_t craft(uint8_t *out, const void *recs, size_t recs_len, int32_t count, int32_t lod,
                    uint16_t attrs, int64_t base_ts, int64_t max_ts)
{
    memset(out, 0, SL_BATCH_HEADER_SIZE);
    size_t total = SL_BATCH_HEADER_SIZE + recs_len;
    sl_be32_put(out + 8, (uint32_t)(total - 12));
    out[16] = 2;
    sl_be16_put(out + 21, attrs);
    sl_be32_put(out + 23, (uint32_t)lod);
    sl_be64_put(out + 27, (uint64_t)base_ts);
    sl_be64_put(out + 35, (uint64_t)max_ts);
    memset(out + 43, 0xFF, 8 + 2 + 4); /* producerId, producerEpoch, baseSequence = -1 */
    sl_be32_put(out + 57, (uint32_t)count);
    if (recs_len)
        memcpy(out + SL_BATCH_HEADER_SIZE, recs, recs_len);
    sl_be32_put(out + 17, sl_crc32c(0, out + 21, total - 21));
    return total;
}

/* What a test record should decode to. */
typedef struct want_rec {
    int64_t ts;
    const uint8_t *key; /* NULL = null key */
    size_t key_len;
    const uint8_t *value;
    size_t value_len;
} want_rec;

/* The header every record the builder adds gets, in Kafka's encoding. */
#define CE_HDR_LEN (2 + sizeof SL_BATCH_CE_HEADER_KEY - 1 + sizeof SL_BATCH_CE_HEADER_VALUE - 1)
static size_t ce_header(uint8_t *h)
{
    size_t n = 0;
    n += sl_varint_put(h + n, (int64_t)strlen(SL_BATCH_CE_HEADER_KEY));
    memcpy(h + n, SL_BATCH_CE_HEADER_KEY, strlen(SL_BATCH_CE_HEADER_KEY));
    n += strlen(SL_BATCH_CE_HEADER_KEY);
    n += sl_varint_put(h + n, (int64_t)strlen(SL_BATCH_CE_HEADER_VALUE));
    memcpy(h + n, SL_BATCH_CE_HEADER_VALUE, strlen(SL_BATCH_CE_HEADER_VALUE));
    return n + strlen(SL_BATCH_CE_HEADER_VALUE);
}

static void check_rec(const sl_record *rec, const want_rec *w, int64_t offset, const char *lane)
{
    size_t ll = strlen(lane);
    assert_int_equal(rec->offset, offset);
    assert_int_equal(rec->timestamp, w->ts);
    if (w->key) {
        assert_non_null(rec->key);
        assert_int_equal(rec->key_len, w->key_len);
        if (w->key_len)
            assert_memory_equal(rec->key, w->key, w->key_len);
    } else {
        assert_null(rec->key);
        assert_int_equal(rec->key_len, 0);
    }
    /* The builder never writes null values: an empty value is present. */
    assert_non_null(rec->value);
    assert_int_equal(rec->value_len, w->value_len);
    if (w->value_len)
        assert_memory_equal(rec->value, w->value, w->value_len);
    assert_int_equal(rec->lane_len, ll);
    if (ll)
        assert_memory_equal(rec->lane, lane, ll);
    /* content-type: application/cloudevents+json, then for a non-base lane
     * keyLen 4 "lane" valueLen lane. */
    uint8_t h[CE_HDR_LEN + 2 + 4 + SL_LANE_MAX + 2];
    size_t n = ce_header(h);
    if (ll == 0) {
        assert_int_equal(rec->header_count, 1);
        assert_int_equal(rec->headers_len, n);
        assert_memory_equal(rec->headers, h, n);
    } else {
        n += sl_varint_put(h + n, 4);
        memcpy(h + n, "lane", 4);
        n += 4;
        n += sl_varint_put(h + n, (int64_t)ll);
        memcpy(h + n, lane, ll);
        n += ll;
        assert_int_equal(rec->header_count, 2);
        assert_int_equal(rec->headers_len, n);
        assert_memory_equal(rec->headers, h, n);
    }
}

/* Decodes the batch at p and checks it holds exactly want[0..n). */
static void check_batch(const uint8_t *p, size_t len, const want_rec *want, int32_t n, int64_t base,
                        const char *lane)
{
    sl_batch_info info;
    sl_error err = {0};
    assert_int_equal(sl_batch_check(p, len, &info, &err), 0);
    assert_int_equal(sl_batch_size(&info), len);
    assert_int_equal(info.count, n);
    assert_int_equal(info.last_offset_delta, n - 1);
    assert_int_equal(info.base_offset, base);
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    assert_int_equal(sl_batch_reader_open(&br, p, len, &err), 0);
    sl_record rec;
    for (int32_t i = 0; i < n; i++) {
        int rc = sl_batch_reader_next(&br, &rec, &err);
        if (rc)
            fail_msg("record %d: %s", i, err.msg);
        check_rec(&rec, &want[i], base + i, lane);
    }
    assert_int_equal(sl_batch_reader_next(&br, &rec, &err), SL_EEOF);
    assert_int_equal(sl_batch_reader_next(&br, &rec, &err), SL_EEOF);
    sl_batch_reader_free(&br);
}

/* Test records with null, empty and ordinary keys, empty and binary values,
 * and timestamps that go up and down around the first one. */
typedef struct rec_set {
    want_rec *w;
    uint8_t *keys;
    uint8_t *vals;
    int n;
    int64_t max_ts;
} rec_set;

static void rec_set_make(rec_set *s, int n)
{
    s->n = n;
    s->w = calloc((size_t)n, sizeof *s->w);
    s->keys = malloc((size_t)n * 16);
    s->vals = malloc((size_t)n * 700);
    assert_non_null(s->w);
    assert_non_null(s->keys);
    assert_non_null(s->vals);
    s->max_ts = INT64_MIN;
    for (int i = 0; i < n; i++) {
        want_rec *w = &s->w[i];
        w->ts = 1700000000000 + (i * 7919) % 1000 - 500;
        if (w->ts > s->max_ts)
            s->max_ts = w->ts;
        uint8_t *k = s->keys + (size_t)i * 16;
        if (i % 4 == 0) {
            w->key = NULL;
        } else if (i % 4 == 1) {
            w->key = k; /* present but empty */
            w->key_len = 0;
        } else {
            w->key = k;
            w->key_len = (size_t)snprintf((char *)k, 16, "key-%d", i);
        }
        uint8_t *v = s->vals + (size_t)i * 700;
        w->value = v;
        w->value_len = i % 5 == 0 ? 0 : (size_t)(i * 13) % 700;
        for (size_t b = 0; b < w->value_len; b++)
            v[b] = (uint8_t)(i % 3 ? rng() : 'a' + b % 4); /* binary and repetitive */
    }
}

static void rec_set_free(rec_set *s)
{
    free(s->w);
    free(s->keys);
    free(s->vals);
}

static void add_all(sl_batch_builder *b, const rec_set *s)
{
    for (int i = 0; i < s->n; i++) {
        const want_rec *w = &s->w[i];
        assert_int_equal(sl_batch_builder_add(b, w->ts, w->key, w->key_len, w->value, w->value_len),
                         0);
    }
}

/* ---- round trips ----------------------------------------------------------- */

static void round_trip(sl_codec codec)
{
    static const char *const lanes[] = {"", "feature-x"};
    rec_set s;
    rec_set_make(&s, 300);
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 0);
    for (int l = 0; l < 2; l++) {
        const char *lane = lanes[l];
        sl_error err = {0};
        assert_int_equal(sl_batch_builder_reset(&b, lane), 0);
        add_all(&b, &s);
        size_t plain = sl_batch_builder_bytes(&b);
        sl_batch out;
        assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
        assert_int_equal(out.count, s.n);
        assert_int_equal(out.max_ts, s.max_ts);
        assert_string_equal(out.lane, lane);
        if (codec == SL_CODEC_NONE)
            assert_int_equal(out.len, plain);
        else
            assert_true(out.len < plain); /* a third of the values repeat */
        assert_int_equal(sl_be16_get(out.data + SL_BATCH_OFF_ATTRIBUTES), codec);
        check_batch(out.data, out.len, s.w, s.n, 0, lane);

        /* The log writes the base offset; the CRC does not cover it. */
        uint8_t *copy = malloc(out.len);
        assert_non_null(copy);
        memcpy(copy, out.data, out.len);
        sl_be64_put(copy, 123456789);
        check_batch(copy, out.len, s.w, s.n, 123456789, lane);

        char got[SL_LANE_MAX + 1] = "junk";
        sl_batch_reader br;
        sl_batch_reader_init(&br);
        assert_int_equal(sl_batch_lane(&br, copy, out.len, got, &err), 0);
        assert_string_equal(got, lane);
        assert_int_equal(sl_batch_validate(&br, copy, out.len, lane, &err), 0);
        assert_int_equal(sl_batch_validate(&br, copy, out.len, l ? "" : "feature-x", &err),
                         SL_ECORRUPT);
        sl_batch_reader_free(&br);
        free(copy);
    }
    sl_batch_builder_free(&b);
    rec_set_free(&s);
}

static void test_round_trip_none(void **state)
{
    (void)state;
    round_trip(SL_CODEC_NONE);
}

static void test_round_trip_zstd(void **state)
{
    (void)state;
    round_trip(SL_CODEC_ZSTD);
}

/* A builder reused across batches starts each one afresh: count, base
 * timestamp, lane and records. */
static void test_builder_reuse(void **state)
{
    (void)state;
    for (int c = 0; c < 2; c++) {
        sl_codec codec = c ? SL_CODEC_ZSTD : SL_CODEC_NONE;
        sl_batch_builder b;
        sl_batch_builder_init(&b, codec, c ? 19 : 0);
        sl_error err = {0};
        sl_batch out;
        assert_int_equal(sl_batch_builder_reset(&b, NULL), 0);
        assert_int_equal(sl_batch_builder_finish(&b, &out, &err), SL_EINVAL); /* empty */
        assert_int_equal(sl_batch_builder_bytes(&b), SL_BATCH_HEADER_SIZE);

        for (int round = 0; round < 5; round++) {
            const char *lane = round % 2 ? "r-odd" : "";
            assert_int_equal(sl_batch_builder_reset(&b, lane), 0);
            assert_int_equal(sl_batch_builder_bytes(&b), SL_BATCH_HEADER_SIZE);
            want_rec w[8];
            char vals[8][32];
            int n = round + 1;
            for (int i = 0; i < n; i++) {
                w[i].ts = 5000 * round + 10 * i;
                w[i].key = NULL;
                w[i].key_len = 0;
                w[i].value_len = (size_t)snprintf(vals[i], sizeof vals[i], "r%d-v%d", round, i);
                w[i].value = (const uint8_t *)vals[i];
                assert_int_equal(
                    sl_batch_builder_add(&b, w[i].ts, NULL, 99, w[i].value, w[i].value_len), 0);
            }
            assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
            assert_int_equal(out.count, n);
            assert_int_equal(out.max_ts, w[n - 1].ts);
            assert_int_equal(sl_be64_get(out.data + SL_BATCH_OFF_BASE_TS), 5000 * round);
            check_batch(out.data, out.len, w, n, 0, lane);
        }
        sl_batch_builder_free(&b);
    }
}

/* ---- exact bytes ----------------------------------------------------------- */

static void test_header_bytes(void **state)
{
    (void)state;
    uint8_t *plain = NULL; /* the records of the uncompressed batch */
    size_t plain_len = 0;
    for (int c = 0; c < 2; c++) {
        sl_codec codec = c ? SL_CODEC_ZSTD : SL_CODEC_NONE;
        sl_batch_builder b;
        sl_batch_builder_init(&b, codec, 0);
        assert_int_equal(sl_batch_builder_reset(&b, "feature-x"), 0);
        for (int i = 0; i < 37; i++) {
            char v[64];
            int n = snprintf(v, sizeof v, "value %d value %d", i, i);
            int64_t ts = i == 20 ? 99999 : 1000 + i; /* the max is in the middle */
            assert_int_equal(sl_batch_builder_add(&b, ts, "k", 1, v, (size_t)n), 0);
        }
        sl_batch out;
        sl_error err = {0};
        assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
        const uint8_t *h = out.data;
        static const uint8_t minus1[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
        assert_true(sl_be64_get(h + 0) == 0);               /* baseOffset */
        assert_int_equal(sl_be32_get(h + 8), out.len - 12); /* batchLength */
        assert_int_equal(sl_be32_get(h + 12), 0);           /* partitionLeaderEpoch */
        assert_int_equal(h[16], 2);                         /* magic */
        assert_int_equal(sl_be32_get(h + 17), sl_crc32c(0, h + 21, out.len - 21));
        assert_int_equal(sl_be32_get(h + 17), sl_crc32c_sw(0, h + 21, out.len - 21));
        assert_int_equal(sl_be16_get(h + 21), c ? 4 : 0); /* attributes */
        assert_int_equal(sl_be32_get(h + 23), 36);        /* lastOffsetDelta */
        assert_true(sl_be64_get(h + 27) == 1000);         /* baseTimestamp */
        assert_true(sl_be64_get(h + 35) == 99999);        /* maxTimestamp */
        assert_memory_equal(h + 43, minus1, 8);           /* producerId */
        assert_memory_equal(h + 51, minus1, 2);           /* producerEpoch */
        assert_memory_equal(h + 53, minus1, 4);           /* baseSequence */
        assert_int_equal(sl_be32_get(h + 57), 37);        /* recordsCount */
        if (!c) {
            plain_len = out.len - SL_BATCH_HEADER_SIZE;
            plain = malloc(plain_len);
            assert_non_null(plain);
            memcpy(plain, h + SL_BATCH_HEADER_SIZE, plain_len);
        } else {
            /* The records are one zstd frame that decompresses to exactly the
             * records of the uncompressed batch. */
            uint8_t *got = malloc(plain_len + 1);
            assert_non_null(got);
            size_t n = ZSTD_decompress(got, plain_len + 1, h + 61, out.len - 61);
            assert_false(ZSTD_isError(n));
            assert_int_equal(n, plain_len);
            assert_memory_equal(got, plain, plain_len);
            free(got);
            free(plain);
        }
        sl_batch_info info;
        assert_int_equal(sl_batch_check(h, out.len, &info, &err), 0);
        assert_int_equal(info.length, out.len - 12);
        assert_int_equal(info.crc, sl_be32_get(h + 17));
        assert_int_equal(info.attributes, c ? 4 : 0);
        assert_int_equal(info.base_ts, 1000);
        assert_int_equal(info.max_ts, 99999);
        assert_int_equal(info.count, 37);
        sl_batch_builder_free(&b);
    }
}

/* The first batch of a KRaft __cluster_metadata log as written by Apache
 * Kafka (a FeatureLevelRecord "metadata.version" = 20), as published in
 * public walk-throughs of the log format. Its CRC was computed by Kafka. */
static const uint8_t kafka_batch[91] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* baseOffset */
    0x00, 0x00, 0x00, 0x4f,                         /* batchLength 79 */
    0x00, 0x00, 0x00, 0x01,                         /* partitionLeaderEpoch 1 */
    0x02,                                           /* magic */
    0xb0, 0x69, 0x45, 0x7c,                         /* crc */
    0x00, 0x00,                                     /* attributes */
    0x00, 0x00, 0x00, 0x00,                         /* lastOffsetDelta */
    0x00, 0x00, 0x01, 0x91, 0xe0, 0x5a, 0xf8, 0x18, /* baseTimestamp */
    0x00, 0x00, 0x01, 0x91, 0xe0, 0x5a, 0xf8, 0x18, /* maxTimestamp */
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* producerId */
    0xff, 0xff,                                     /* producerEpoch */
    0xff, 0xff, 0xff, 0xff,                         /* baseSequence */
    0x00, 0x00, 0x00, 0x01,                         /* recordsCount */
    /* record: length 29, attributes, tsDelta 0, offsetDelta 0, key null */
    0x3a, 0x00, 0x00, 0x00, 0x01,
    /* valueLength 23, value */
    0x2e, 0x01, 0x0c, 0x00, 0x11, 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', '.', 'v', 'e', 'r', 's',
    'i', 'o', 'n', 0x00, 0x14, 0x00,
    /* headerCount 0 */
    0x00};

static void test_kafka_batch(void **state)
{
    (void)state;
    const uint8_t *value = kafka_batch + 67;
    const int64_t ts = 0x191e05af818;
    guard g;
    guard_init(&g, sizeof kafka_batch);
    const uint8_t *p = guard_place(&g, kafka_batch, sizeof kafka_batch);

    /* Decoding Kafka's bytes. */
    sl_batch_info info;
    sl_error err = {0};
    assert_int_equal(sl_batch_check(p, sizeof kafka_batch, &info, &err), 0);
    assert_int_equal(info.crc, 0xb069457cu);
    assert_int_equal(info.length, 79);
    assert_int_equal(info.count, 1);
    assert_int_equal(info.base_ts, ts);
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    assert_int_equal(sl_batch_reader_open(&br, p, sizeof kafka_batch, &err), 0);
    sl_record rec;
    assert_int_equal(sl_batch_reader_next(&br, &rec, &err), 0);
    assert_int_equal(rec.offset, 0);
    assert_int_equal(rec.timestamp, ts);
    assert_null(rec.key);
    assert_int_equal(rec.value_len, 23);
    assert_memory_equal(rec.value, value, 23);
    assert_int_equal(rec.header_count, 0);
    assert_int_equal(rec.lane_len, 0);
    assert_int_equal(sl_batch_reader_next(&br, &rec, &err), SL_EEOF);
    sl_batch_reader_free(&br);

    /* Encoding the same record with its own (no) headers gives Kafka's
     * bytes, CRC included; only the leader epoch (not covered by the CRC)
     * differs: sluice writes 0. */
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
    assert_int_equal(sl_batch_builder_add_raw(&b, ts, NULL, 0, value, 23, NULL, 0, 0), 0);
    sl_batch out;
    assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
    assert_int_equal(out.len, sizeof kafka_batch);
    assert_memory_equal(out.data, kafka_batch, 12);
    assert_int_equal(sl_be32_get(out.data + 12), 0);
    assert_memory_equal(out.data + 16, kafka_batch + 16, sizeof kafka_batch - 16);
    sl_batch_builder_free(&b);
    guard_free(&g);
}

/* Two records encoded by hand from the layout in batch.h: multi-byte
 * varints, a negative timestamp delta, a null key, an empty value and the
 * lane header. */
static void test_known_records(void **state)
{
    (void)state;
    uint8_t want[400];
    size_t n = 0;
    /* Record 0: length 266 (zig-zag 532 = 0x94 0x04), attributes 0,
     * tsDelta 0, offsetDelta 0, keyLength 2 "k1", valueLength 200
     * (zig-zag 400 = 0x90 0x03) of 'x', two headers: "content-type" =
     * "application/cloudevents+json", "lane" = "feature-x". */
    const uint8_t r0a[] = {0x94, 0x04, 0x00, 0x00, 0x00, 0x04, 'k', '1', 0x90, 0x03};
    memcpy(want + n, r0a, sizeof r0a);
    n += sizeof r0a;
    memset(want + n, 'x', 200);
    n += 200;
    const char hdr[] = "\x04\x18" "content-type" "\x38" "application/cloudevents+json"
                       "\x08" "lane" "\x12" "feature-x";
    memcpy(want + n, hdr, sizeof hdr - 1);
    n += sizeof hdr - 1;
    assert_int_equal(n, 268);
    /* Record 1: length 63 (0x7E), attributes 0, tsDelta -3 (0x05),
     * offsetDelta 1 (0x02), key null (0x01), value empty (0x00), headers. */
    const uint8_t r1[] = {0x7E, 0x00, 0x05, 0x02, 0x01, 0x00};
    memcpy(want + n, r1, sizeof r1);
    n += sizeof r1;
    memcpy(want + n, hdr, sizeof hdr - 1);
    n += sizeof hdr - 1;

    uint8_t expect[500];
    size_t total = craft(expect, want, n, 2, 1, 0, 1000, 1000);

    char xs[200];
    memset(xs, 'x', sizeof xs);
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, "feature-x"), 0);
    assert_int_equal(sl_batch_builder_add(&b, 1000, "k1", 2, xs, sizeof xs), 0);
    assert_int_equal(sl_batch_builder_add(&b, 997, NULL, 0, "", 0), 0);
    assert_int_equal(sl_batch_builder_bytes(&b), total);
    sl_batch out;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
    assert_int_equal(out.len, total);
    assert_memory_equal(out.data, expect, total);
    assert_int_equal(out.max_ts, 1000);
    sl_batch_builder_free(&b);

    want_rec w[2] = {
        {1000, (const uint8_t *)"k1", 2, (const uint8_t *)xs, sizeof xs},
        {997, NULL, 0, (const uint8_t *)"", 0},
    };
    guard g;
    guard_init(&g, total);
    check_batch(guard_place(&g, expect, total), total, w, 2, 0, "feature-x");
    guard_free(&g);
}

/* ---- damaged input --------------------------------------------------------- */

/* A finished batch copied out of its builder (caller frees). */
static uint8_t *sample_batch(sl_codec codec, const char *lane, int n, size_t *len)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 0);
    assert_int_equal(sl_batch_builder_reset(&b, lane), 0);
    for (int i = 0; i < n; i++) {
        char v[128], k[16];
        size_t vl = tu_value(v, 60 + (size_t)i % 50, i);
        int kl = snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(sl_batch_builder_add(&b, 5000 + i, i % 3 ? k : NULL, (size_t)kl, v, vl),
                         0);
    }
    sl_batch out;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
    uint8_t *copy = malloc(out.len);
    assert_non_null(copy);
    memcpy(copy, out.data, out.len);
    *len = out.len;
    sl_batch_builder_free(&b);
    return copy;
}

static void test_check_bad_magic(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = sample_batch(SL_CODEC_NONE, "", 5, &len);
    static const uint8_t magics[] = {0, 1, 3, 0x82, 0xFF};
    for (size_t i = 0; i < sizeof magics; i++) {
        p[16] = magics[i];
        sl_batch_info info;
        sl_error err = {0};
        assert_int_equal(sl_batch_header(p, len, &info, &err), SL_ECORRUPT);
        assert_int_equal(sl_batch_check(p, len, &info, &err), SL_ECORRUPT);
        assert_non_null(strstr(err.msg, "magic"));
    }
    free(p);
}

/* Any changed byte after the CRC field, and any change to the CRC itself,
 * is caught. */
static void test_check_flipped_bytes(void **state)
{
    (void)state;
    static const uint8_t masks[] = {0x01, 0x80, 0xFF, 0x5A};
    for (int c = 0; c < 2; c++) {
        size_t len;
        uint8_t *p =
            sample_batch(c ? SL_CODEC_ZSTD : SL_CODEC_NONE, c ? "feature-x" : "", 12, &len);
        guard g;
        guard_init(&g, len);
        uint8_t *q = guard_place(&g, p, len);
        sl_batch_info info;
        assert_int_equal(sl_batch_check(q, len, &info, NULL), 0);
        for (size_t i = SL_BATCH_OFF_CRC; i < len; i++) {
            for (size_t m = 0; m < sizeof masks; m++) {
                q[i] ^= masks[m];
                sl_error err = {0};
                int rc = sl_batch_check(q, len, &info, &err);
                if (rc != SL_ECORRUPT)
                    fail_msg("byte %zu ^ %02x: rc %d", i, masks[m], rc);
                q[i] ^= masks[m];
            }
        }
        /* The base offset and leader epoch are outside the CRC on purpose. */
        q[3] ^= 0x10;
        q[13] ^= 0x10;
        assert_int_equal(sl_batch_check(q, len, &info, NULL), 0);
        assert_int_equal(info.base_offset, 0x10ll << 32);
        guard_free(&g);
        free(p);
    }
}

/* Every proper prefix of a batch is incomplete, and nothing past the prefix
 * is read. */
static void test_check_truncated(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = sample_batch(SL_CODEC_NONE, "lane-t", 20, &len);
    guard g;
    guard_init(&g, len);
    for (size_t k = 0; k < len; k++) {
        const uint8_t *q = guard_place(&g, p, k);
        sl_batch_info info;
        assert_int_equal(sl_batch_check(q, k, &info, NULL), SL_EPARTIAL);
        assert_int_equal(sl_batch_header(q, k, &info, NULL),
                         k < SL_BATCH_HEADER_SIZE ? SL_EPARTIAL : 0);
    }
    sl_batch_info info;
    assert_int_equal(sl_batch_check(guard_place(&g, p, len), len, &info, NULL), 0);
    guard_free(&g);
    free(p);
}

static int header_rc(uint8_t *h)
{
    sl_batch_info info;
    return sl_batch_header(h, SL_BATCH_HEADER_SIZE, &info, NULL);
}

/* The header's own sanity checks. */
static void test_header_sanity(void **state)
{
    (void)state;
    uint8_t base[SL_BATCH_HEADER_SIZE], h[SL_BATCH_HEADER_SIZE];
    craft(base, NULL, 0, 0, 0, 0, 1, 1); /* an empty batch is well-formed */
    memcpy(h, base, sizeof h);
    assert_int_equal(header_rc(h), 0);

    /* batchLength below the header's own 49 bytes, above the limit, negative. */
    static const uint32_t bad_len[] = {0, 48, SL_BATCH_MAX_BYTES + 1, 0x80000000u, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad_len / sizeof *bad_len; i++) {
        memcpy(h, base, sizeof h);
        sl_be32_put(h + 8, bad_len[i]);
        assert_int_equal(header_rc(h), SL_ECORRUPT);
    }
    memcpy(h, base, sizeof h);
    sl_be32_put(h + 8, SL_BATCH_MAX_BYTES);
    assert_int_equal(header_rc(h), 0);

    /* Negative base offset. */
    memcpy(h, base, sizeof h);
    h[0] = 0x80;
    assert_int_equal(header_rc(h), SL_ECORRUPT);

    /* Counts: negative, or more records than the offset span holds. */
    static const struct {
        int32_t count, lod;
        int ok;
    } counts[] = {{-1, 0, 0}, {0, -1, 0}, {2, 0, 0}, {11, 9, 0},       {1, 0, 1},
                  {10, 9, 1}, {1, 9, 1},  {0, 5, 1}, {INT32_MIN, 0, 0}};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        memcpy(h, base, sizeof h);
        sl_be32_put(h + 57, (uint32_t)counts[i].count);
        sl_be32_put(h + 23, (uint32_t)counts[i].lod);
        assert_int_equal(header_rc(h), counts[i].ok ? 0 : SL_ECORRUPT);
    }

    /* Codecs other than none and zstd; other attribute bits are ignored. */
    for (uint16_t codec = 0; codec < 8; codec++) {
        memcpy(h, base, sizeof h);
        sl_be16_put(h + 21, (uint16_t)(codec | 0x08)); /* timestamp type bit set too */
        int ok = codec == 0 || codec == 4;
        assert_int_equal(header_rc(h), ok ? 0 : SL_ECORRUPT);
    }
}

/* lastOffsetDelta = INT32_MAX with one record: a compacted batch's offset
 * span can be that wide. The header check must not overflow computing
 * lastOffsetDelta + 1 (UBSan reports it). */
static void test_header_max_delta(void **state)
{
    (void)state;
    uint8_t h[SL_BATCH_HEADER_SIZE];
    craft(h, NULL, 0, 1, INT32_MAX, 0, 1, 1);
    sl_batch_info info;
    assert_int_equal(sl_batch_header(h, sizeof h, &info, NULL), 0);
    assert_int_equal(info.last_offset_delta, INT32_MAX);
    assert_int_equal(info.count, 1);
    sl_be32_put(h + 57, (uint32_t)INT32_MAX);
    assert_int_equal(sl_batch_header(h, sizeof h, &info, NULL), 0);
    sl_be32_put(h + 57, (uint32_t)INT32_MIN);
    assert_int_equal(sl_batch_header(h, sizeof h, &info, NULL), SL_ECORRUPT);
}

/* ---- malformed records, decoded before a guard page ---------------------- */

typedef struct bad_case {
    const char *name;
    uint8_t recs[24];
    size_t len;
    int32_t count, lod;
    int good; /* records decoded before SL_ECORRUPT; -1 = EEOF after them */
} bad_case;

static void test_reader_malformed(void **state)
{
    (void)state;
    /* A good record: length 7, attributes, ts 0, offset 0, key null, "v", no
     * headers. */
#define GOOD 0x0e, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x00
    /* BAD(name, recordsCount, lastOffsetDelta, records decoded before
     * SL_ECORRUPT or -1 for all then SL_EEOF, record bytes...). */
#define BAD(name, count, lod, good, ...)                                                           \
    {                                                                                              \
        name, {__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}), count, lod, good              \
    }
#define NONE(name, count, lod, good)                                                               \
    {                                                                                              \
        name, {0}, 0, count, lod, good                                                             \
    }
    static const bad_case cases[] = {
        BAD("well-formed", 1, 0, -1, GOOD),
        BAD("two well-formed", 2, 1, -1, GOOD, 0x0e, 0x00, 0x00, 0x02, 0x01, 0x02, 'w', 0x00),
        NONE("no records", 0, 0, -1),
        BAD("length past the end", 1, 0, 0, 0x10, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x00),
        BAD("length far past the end", 1, 0, 0, 0xFE, 0xFF, 0xFF, 0xFF, 0x0F, 0x00),
        BAD("length zero", 1, 0, 0, 0x00),
        BAD("length negative", 1, 0, 0, 0x01, 0x00),
        BAD("length varint cut", 1, 0, 0, 0x80),
        BAD("length varint endless", 1, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
            0x80, 0x80, 0x01),
        NONE("no bytes for the record", 1, 0, 0),
        BAD("only the attributes", 1, 0, 0, 0x02, 0x00),
        BAD("timestamp varint cut by the length", 1, 0, 0, 0x04, 0x00, 0x80, 0x01),
        BAD("offset delta beyond lastOffsetDelta", 1, 0, 0, 0x0e, 0x00, 0x00, 0x02, 0x01, 0x02, 'v',
            0x00),
        BAD("negative offset delta", 1, 0, 0, 0x0e, 0x00, 0x00, 0x01, 0x01, 0x02, 'v', 0x00),
        BAD("key past the record", 1, 0, 0, 0x0e, 0x00, 0x00, 0x00, 0x14, 0x02, 'v', 0x00),
        BAD("key length -2", 1, 0, 0, 0x0e, 0x00, 0x00, 0x00, 0x03, 0x02, 'v', 0x00),
        BAD("value past the record", 1, 0, 0, 0x0e, 0x00, 0x00, 0x00, 0x01, 0x06, 'v', 0x00),
        BAD("value past the record end, inside the batch", 1, 0, 0, 0x0a, 0x00, 0x00, 0x00, 0x01,
            0x04, 'v', 'w', 0x00),
        BAD("value length -2", 1, 0, 0, 0x0e, 0x00, 0x00, 0x00, 0x01, 0x03, 'v', 0x00),
        BAD("header count past the end", 1, 0, 0, 0x0e, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x7e),
        BAD("header count negative", 1, 0, 0, 0x0e, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x01),
        BAD("header count missing", 1, 0, 0, 0x0c, 0x00, 0x00, 0x00, 0x01, 0x02, 'v'),
        BAD("header missing", 1, 0, 0, 0x0e, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x02),
        BAD("header with null key", 1, 0, 0, 0x12, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x02, 0x01,
            0x00),
        BAD("header key past the end", 1, 0, 0, 0x12, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x02, 0x08,
            'l'),
        BAD("header value past the end", 1, 0, 0, 0x1c, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x02,
            0x08, 'l', 'a', 'n', 'e', 0x04, 'a'),
        BAD("record longer than its fields", 1, 0, 0, 0x10, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x00,
            0x00),
        BAD("record shorter than its fields", 1, 0, 0, 0x0c, 0x00, 0x00, 0x00, 0x01, 0x02, 'v',
            0x00),
        BAD("fewer records than recordsCount", 2, 1, 1, GOOD),
        BAD("bytes after the last record", 1, 0, 1, GOOD, 0x00),
        BAD("empty batch with bytes", 0, 0, 0, 0x00),
    };
#undef BAD
#undef NONE
#undef GOOD
    guard g;
    guard_init(&g, 4096);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bad_case *bc = &cases[i];
        uint8_t buf[128];
        size_t total = craft(buf, bc->recs, bc->len, bc->count, bc->lod, 0, 100, 100);
        const uint8_t *p = guard_place(&g, buf, total);
        sl_batch_info info;
        sl_error err = {0};
        if (sl_batch_check(p, total, &info, &err))
            fail_msg("%s: check: %s", bc->name, err.msg);
        sl_batch_reader br;
        sl_batch_reader_init(&br);
        assert_int_equal(sl_batch_reader_open(&br, p, total, &err), 0);
        sl_record rec;
        int good = bc->good < 0 ? bc->count : bc->good;
        for (int k = 0; k < good; k++) {
            int rc = sl_batch_reader_next(&br, &rec, &err);
            if (rc)
                fail_msg("%s: record %d: rc %d %s", bc->name, k, rc, err.msg);
            assert_int_equal(rec.offset, k);
            assert_int_equal(rec.value_len, 1);
        }
        memset(&err, 0, sizeof err);
        int rc = sl_batch_reader_next(&br, &rec, &err);
        int want = bc->good < 0 ? SL_EEOF : SL_ECORRUPT;
        if (rc != want)
            fail_msg("%s: got %d, want %d", bc->name, rc, want);
        if (want == SL_ECORRUPT)
            assert_true(err.msg[0] != '\0');
        sl_batch_reader_free(&br);
    }
    guard_free(&g);
}

/* Cut the records of a real batch at every length (with a valid CRC, as a
 * buggy writer could produce): the reader returns the records that are whole
 * and then SL_ECORRUPT, never a record built from bytes that are not there. */
static void test_reader_truncated_records(void **state)
{
    (void)state;
    rec_set s;
    rec_set_make(&s, 12);
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, "feature-x"), 0);
    add_all(&b, &s);
    sl_batch out;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
    const uint8_t *recs = out.data + SL_BATCH_HEADER_SIZE;
    size_t recs_len = out.len - SL_BATCH_HEADER_SIZE;
    /* Where each record ends, to know how many fit in a prefix. */
    size_t ends[12], at = 0;
    for (int i = 0; i < s.n; i++) {
        int64_t l;
        size_t u = sl_varint_get(recs + at, recs + recs_len, &l);
        assert_true(u > 0);
        at += u + (size_t)l;
        ends[i] = at;
    }
    assert_int_equal(at, recs_len);

    uint8_t *buf = malloc(out.len);
    assert_non_null(buf);
    guard g;
    guard_init(&g, out.len);
    for (size_t k = 0; k < recs_len; k++) {
        size_t total = craft(buf, recs, k, s.n, s.n - 1, 0, s.w[0].ts, s.max_ts);
        const uint8_t *p = guard_place(&g, buf, total);
        sl_batch_info info;
        assert_int_equal(sl_batch_check(p, total, &info, NULL), 0);
        sl_batch_reader br;
        sl_batch_reader_init(&br);
        assert_int_equal(sl_batch_reader_open(&br, p, total, &err), 0);
        int whole = 0;
        while (whole < s.n && ends[whole] <= k)
            whole++;
        sl_record rec;
        for (int i = 0; i < whole; i++) {
            assert_int_equal(sl_batch_reader_next(&br, &rec, &err), 0);
            check_rec(&rec, &s.w[i], i, "feature-x");
        }
        assert_int_equal(sl_batch_reader_next(&br, &rec, &err), SL_ECORRUPT);
        sl_batch_reader_free(&br);
    }
    guard_free(&g);
    free(buf);
    sl_batch_builder_free(&b);
    rec_set_free(&s);
}

/* Damaged zstd data: cut frames, garbage, a frame holding bad records, and a
 * frame that expands past the batch limit. */
static void test_reader_zstd_damage(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = sample_batch(SL_CODEC_ZSTD, "", 40, &len);
    size_t zlen = len - SL_BATCH_HEADER_SIZE;
    uint8_t *buf = malloc(len + 64);
    assert_non_null(buf);
    guard g;
    guard_init(&g, len + 64);
    sl_error err = {0};
    sl_batch_reader br;
    sl_batch_reader_init(&br);

    /* Every cut of the frame. */
    for (size_t k = 0; k < zlen; k++) {
        size_t total = craft(buf, p + SL_BATCH_HEADER_SIZE, k, 40, 39, SL_CODEC_ZSTD, 5000, 5039);
        const uint8_t *q = guard_place(&g, buf, total);
        memset(&err, 0, sizeof err);
        int rc = sl_batch_reader_open(&br, q, total, &err);
        if (rc != SL_ECORRUPT)
            fail_msg("frame cut at %zu of %zu: rc %d", k, zlen, rc);
    }
    /* Garbage instead of a frame. */
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)rng();
    size_t total = craft(buf, junk, sizeof junk, 1, 0, SL_CODEC_ZSTD, 1, 1);
    assert_int_equal(sl_batch_reader_open(&br, guard_place(&g, buf, total), total, &err),
                     SL_ECORRUPT);
    /* Trailing garbage after a whole frame. */
    uint8_t *recs = malloc(zlen + 16);
    assert_non_null(recs);
    memcpy(recs, p + SL_BATCH_HEADER_SIZE, zlen);
    memcpy(recs + zlen, junk, 16);
    total = craft(buf, recs, zlen + 16, 40, 39, SL_CODEC_ZSTD, 5000, 5039);
    int rc = sl_batch_reader_open(&br, guard_place(&g, buf, total), total, &err);
    if (rc == 0) {
        /* Accepted only if the records then fail to line up. */
        sl_record rec;
        while ((rc = sl_batch_reader_next(&br, &rec, &err)) == 0) {
        }
    }
    assert_int_equal(rc, SL_ECORRUPT);
    free(recs);

    /* A valid frame whose content is a malformed record. */
    const uint8_t bad[] = {0x10, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x00};
    uint8_t z[128];
    size_t zn = ZSTD_compress(z, sizeof z, bad, sizeof bad, 3);
    assert_false(ZSTD_isError(zn));
    total = craft(buf, z, zn, 1, 0, SL_CODEC_ZSTD, 1, 1);
    assert_int_equal(sl_batch_reader_open(&br, guard_place(&g, buf, total), total, &err), 0);
    sl_record rec;
    assert_int_equal(sl_batch_reader_next(&br, &rec, &err), SL_ECORRUPT);

    /* A frame of zeros that expands past SL_BATCH_MAX_BYTES. */
    size_t big = SL_BATCH_MAX_BYTES + 4096;
    uint8_t *zeros = calloc(1, big);
    assert_non_null(zeros);
    size_t bound = ZSTD_compressBound(big);
    uint8_t *zb = malloc(bound);
    assert_non_null(zb);
    zn = ZSTD_compress(zb, bound, zeros, big, 1);
    assert_false(ZSTD_isError(zn));
    assert_true(zn < 8192);
    uint8_t *bomb = malloc(SL_BATCH_HEADER_SIZE + zn);
    assert_non_null(bomb);
    total = craft(bomb, zb, zn, 1, 0, SL_CODEC_ZSTD, 1, 1);
    memset(&err, 0, sizeof err);
    assert_int_equal(sl_batch_reader_open(&br, bomb, total, &err), SL_ECORRUPT);
    assert_true(err.msg[0] != '\0');
    free(bomb);
    free(zb);
    free(zeros);

    /* The reader recovers for the next good batch. */
    assert_int_equal(sl_batch_reader_open(&br, guard_place(&g, p, len), len, &err), 0);
    int n = 0;
    while ((rc = sl_batch_reader_next(&br, &rec, &err)) == 0)
        assert_int_equal(rec.offset, n++);
    assert_int_equal(rc, SL_EEOF);
    assert_int_equal(n, 40);

    sl_batch_reader_free(&br);
    guard_free(&g);
    free(buf);
    free(p);
}

/* ---- big records ---------------------------------------------------------- */

static void test_big_record(void **state)
{
    (void)state;
    size_t vlen = 1u << 20, klen = 1000;
    uint8_t *v = malloc(vlen), *k = malloc(klen);
    assert_non_null(v);
    assert_non_null(k);
    for (size_t i = 0; i < vlen; i++)
        v[i] = (uint8_t)(i % 4096 < 2048 ? rng() : i); /* half noise, half pattern */
    for (size_t i = 0; i < klen; i++)
        k[i] = (uint8_t)(i * 7);
    for (int c = 0; c < 2; c++) {
        sl_codec codec = c ? SL_CODEC_ZSTD : SL_CODEC_NONE;
        sl_batch_builder b;
        sl_batch_builder_init(&b, codec, 0);
        assert_int_equal(sl_batch_builder_reset(&b, c ? "big" : ""), 0);
        assert_int_equal(sl_batch_builder_add(&b, 42, k, klen, v, vlen), 0);
        assert_int_equal(sl_batch_builder_add(&b, 43, NULL, 0, "tail", 4), 0);
        assert_int_equal(sl_batch_builder_add(&b, 44, k, 1, v + 5, vlen - 5), 0);
        sl_batch out;
        sl_error err = {0};
        assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
        if (!c) {
            size_t lane_hdr = 1 + CE_HDR_LEN; /* header count 1, content-type */
            size_t body0 = 1 + 1 + 1 + sl_varint_size((int64_t)klen) + klen +
                           sl_varint_size((int64_t)vlen) + vlen + lane_hdr;
            size_t rec0 = sl_varint_size((int64_t)body0) + body0;
            size_t body1 = 1 + 1 + 1 + 1 + 1 + 4 + lane_hdr;
            size_t body2 =
                1 + 1 + 1 + 1 + 1 + sl_varint_size((int64_t)vlen - 5) + vlen - 5 + lane_hdr;
            size_t expect =
                SL_BATCH_HEADER_SIZE + rec0 + 1 + body1 + sl_varint_size((int64_t)body2) + body2;
            assert_int_equal(out.len, expect);
        } else {
            assert_true(out.len < vlen * 2 - vlen / 3); /* the patterned half shrinks */
        }
        want_rec w[3] = {
            {42, k, klen, v, vlen},
            {43, NULL, 0, (const uint8_t *)"tail", 4},
            {44, k, 1, v + 5, vlen - 5},
        };
        check_batch(out.data, out.len, w, 3, 0, c ? "big" : "");
        sl_batch_builder_free(&b);
    }
    free(v);
    free(k);
}

/* A batch stops growing at SL_BATCH_MAX_BYTES; the failed add leaves it as it
 * was. */
static void test_too_big(void **state)
{
    (void)state;
    size_t vlen = 40u << 20;
    uint8_t *v = malloc(vlen);
    assert_non_null(v);
    memset(v, 'z', vlen);
    v[0] = 'A';
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
    assert_int_equal(sl_batch_builder_add(&b, 1, NULL, 0, v, vlen), 0);
    size_t before = sl_batch_builder_bytes(&b);
    assert_int_equal(sl_batch_builder_add(&b, 2, "k", 1, v, vlen), SL_ETOOBIG);
    assert_int_equal(sl_batch_builder_bytes(&b), before);
    assert_int_equal(sl_batch_builder_add(&b, 3, NULL, 0, "small", 5), 0);
    sl_batch out;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
    assert_int_equal(out.count, 2);
    want_rec w[2] = {{1, NULL, 0, v, vlen}, {3, NULL, 0, (const uint8_t *)"small", 5}};
    check_batch(out.data, out.len, w, 2, 0, "");
    sl_batch_builder_free(&b);
    free(v);
}

/* ---- lanes and codecs ------------------------------------------------------ */

static void test_lane_names(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "Feature", "A",        "a b",   "a_b", "a.b",
        "lane/x",  "\xc3\xa9", "tab\t", "a\n", "abcdefghijklmnopqrstuvwxyz0123456", /* 33 */
    };
    static const char *const good[] = {
        "", "a", "0", "-", "feature-x", "abcdefghijklmnopqrstuvwxyz012345", /* 32 */
    };
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(sl_batch_builder_reset(&b, bad[i]), SL_EINVAL);
        assert_int_equal(sl_lane_valid(bad[i], strlen(bad[i])), 0);
    }
    assert_int_equal(sl_lane_valid("abc", 2), 1); /* only len bytes count */
    assert_int_equal(sl_lane_valid("ab C", 2), 1);
    assert_int_equal(sl_lane_valid("ab C", 4), 0);
    assert_int_equal(sl_batch_builder_reset(&b, NULL), 0); /* NULL = base lane */
    assert_int_equal(sl_batch_builder_add(&b, 1, NULL, 0, "x", 1), 0);
    sl_batch out;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
    assert_string_equal(out.lane, "");
    want_rec w = {1, NULL, 0, (const uint8_t *)"x", 1};
    check_batch(out.data, out.len, &w, 1, 0, "");
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        assert_int_equal(sl_lane_valid(good[i], strlen(good[i])), 1);
        assert_int_equal(sl_batch_builder_reset(&b, good[i]), 0);
        assert_int_equal(sl_batch_builder_add(&b, 1, NULL, 0, "x", 1), 0);
        assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
        assert_string_equal(out.lane, good[i]);
        check_batch(out.data, out.len, &w, 1, 0, good[i]);
        sl_batch_reader br;
        sl_batch_reader_init(&br);
        char lane[SL_LANE_MAX + 1];
        assert_int_equal(sl_batch_lane(&br, out.data, out.len, lane, &err), 0);
        assert_string_equal(lane, good[i]);
        sl_batch_reader_free(&br);
    }
    sl_batch_builder_free(&b);
}

/* sl_batch_lane() and sl_batch_validate() on hand-made batches: no records,
 * an invalid lane value, and lanes that change inside a batch. */
static void test_lane_and_validate(void **state)
{
    (void)state;
    guard g;
    guard_init(&g, 4096);
    uint8_t buf[256];
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    sl_error err = {0};
    char lane[SL_LANE_MAX + 1];

    /* No records: base lane, and valid for it. */
    size_t total = craft(buf, NULL, 0, 0, 0, 0, 1, 1);
    const uint8_t *p = guard_place(&g, buf, total);
    strcpy(lane, "junk");
    assert_int_equal(sl_batch_lane(&br, p, total, lane, &err), 0);
    assert_string_equal(lane, "");
    assert_int_equal(sl_batch_validate(&br, p, total, "", &err), 0);

    /* Lane header "BAD". */
    const uint8_t r_bad[] = {0x20, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x02, 0x08,
                             'l',  'a',  'n',  'e',  0x06, 'B',  'A', 'D'};
    total = craft(buf, r_bad, sizeof r_bad, 1, 0, 0, 1, 1);
    p = guard_place(&g, buf, total);
    assert_int_equal(sl_batch_lane(&br, p, total, lane, &err), SL_ECORRUPT);

    /* A lane header longer than SL_LANE_MAX. */
    uint8_t r_long[64];
    size_t n = 0;
    const uint8_t pre[] = {0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x02, 0x08, 'l', 'a', 'n', 'e', 0x42};
    r_long[n++] = (uint8_t)((sizeof pre + 33) * 2);
    memcpy(r_long + n, pre, sizeof pre);
    n += sizeof pre;
    memset(r_long + n, 'a', 33);
    n += 33;
    total = craft(buf, r_long, n, 1, 0, 0, 1, 1);
    p = guard_place(&g, buf, total);
    assert_int_equal(sl_batch_lane(&br, p, total, lane, &err), SL_ECORRUPT);

    /* Record 0 in lane "a", record 1 in the base lane, record 2 in lane "b". */
    const uint8_t mixed[] = {
        0x1c, 0x00, 0x00, 0x00, 0x01, 0x02, 'v',  0x02, 0x08, 'l',  'a',  'n',  'e',
        0x02, 'a',  0x0e, 0x00, 0x00, 0x02, 0x01, 0x02, 'v',  0x00, 0x1c, 0x00, 0x00,
        0x04, 0x01, 0x02, 'v',  0x02, 0x08, 'l',  'a',  'n',  'e',  0x02, 'b',
    };
    total = craft(buf, mixed, sizeof mixed, 3, 2, 0, 1, 1);
    p = guard_place(&g, buf, total);
    assert_int_equal(sl_batch_lane(&br, p, total, lane, &err), 0);
    assert_string_equal(lane, "a");
    memset(&err, 0, sizeof err);
    assert_int_equal(sl_batch_validate(&br, p, total, "a", &err), SL_ECORRUPT);
    assert_non_null(strstr(err.msg, "offset 1"));
    assert_int_equal(sl_batch_validate(&br, p, total, "", &err), SL_ECORRUPT);
    /* Decoding it record by record still works. */
    assert_int_equal(sl_batch_reader_open(&br, p, total, &err), 0);
    sl_record rec;
    static const char *const lanes[] = {"a", "", "b"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sl_batch_reader_next(&br, &rec, &err), 0);
        assert_int_equal(rec.offset, i);
        assert_int_equal(rec.lane_len, strlen(lanes[i]));
        assert_memory_equal(rec.lane, lanes[i], rec.lane_len);
    }
    assert_int_equal(sl_batch_reader_next(&br, &rec, &err), SL_EEOF);

    /* Validate reports a malformed record. */
    const uint8_t broken[] = {0x0e, 0x00, 0x00, 0x00, 0x01, 0x02, 'v', 0x00, 0x00};
    total = craft(buf, broken, sizeof broken, 2, 1, 0, 1, 1);
    p = guard_place(&g, buf, total);
    assert_int_equal(sl_batch_validate(&br, p, total, "", &err), SL_ECORRUPT);

    sl_batch_reader_free(&br);
    guard_free(&g);
}

static void test_codec_names(void **state)
{
    (void)state;
    sl_codec c = (sl_codec)99;
    assert_int_equal(sl_codec_parse("none", &c), 0);
    assert_int_equal(c, SL_CODEC_NONE);
    assert_int_equal(sl_codec_parse("zstd", &c), 0);
    assert_int_equal(c, SL_CODEC_ZSTD);
    assert_int_equal(sl_codec_parse("gzip", &c), SL_EINVAL);
    assert_int_equal(sl_codec_parse("ZSTD", &c), SL_EINVAL);
    assert_int_equal(sl_codec_parse("", &c), SL_EINVAL);
    assert_int_equal(c, SL_CODEC_ZSTD); /* untouched on error */
    assert_string_equal(sl_codec_name(SL_CODEC_NONE), "none");
    assert_string_equal(sl_codec_name(SL_CODEC_ZSTD), "zstd");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_none),
        cmocka_unit_test(test_round_trip_zstd),
        cmocka_unit_test(test_builder_reuse),
        cmocka_unit_test(test_header_bytes),
        cmocka_unit_test(test_kafka_batch),
        cmocka_unit_test(test_known_records),
        cmocka_unit_test(test_check_bad_magic),
        cmocka_unit_test(test_check_flipped_bytes),
        cmocka_unit_test(test_check_truncated),
        cmocka_unit_test(test_header_sanity),
        cmocka_unit_test(test_reader_malformed),
        cmocka_unit_test(test_reader_truncated_records),
        cmocka_unit_test(test_reader_zstd_damage),
        cmocka_unit_test(test_big_record),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_lane_names),
        cmocka_unit_test(test_lane_and_validate),
        cmocka_unit_test(test_codec_names),
        /* Last: under UBSan a failure here aborts the process. */
        cmocka_unit_test(test_header_max_delta),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
