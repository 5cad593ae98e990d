/*
 * tests/unit/test_record_event.c — core/bus/record_event: how a stored record
 * becomes the event rules see. Records are built with the batch builder and
 * read back with the batch reader, so the headers are real Kafka encoding:
 * a stored CloudEvent (content-type header), an old record without it, a
 * binary-mode record (ce_* headers), a plain Kafka record (the default
 * shape, JSON/text/bytes data), and malformed ones (clear errors).
 */
#include "testutil.h"

#include "core/base/varint.h"
#include "core/bus/record_event.h"
#include "core/log/batch.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct hdrs {
    uint8_t b[512];
    size_t len;
    int32_t n;
} hdrs;

static void hadd(hdrs *h, const char *k, const char *v)
{
    h->len += sl_varint_put(h->b + h->len, (int64_t)strlen(k));
    memcpy(h->b + h->len, k, strlen(k));
    h->len += strlen(k);
    h->len += sl_varint_put(h->b + h->len, (int64_t)strlen(v));
    memcpy(h->b + h->len, v, strlen(v));
    h->len += strlen(v);
    h->n++;
}

/* Builds a one-record batch (raw headers h, or the CloudEvent headers when h
 * is NULL), reads the record back and returns the event JSON (or NULL with
 * *rc). */
static json_t *event_of(const char *key, const void *val, size_t vlen, const hdrs *h, int *rc,
                        sl_error *err)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
    if (h)
        assert_int_equal(sl_batch_builder_add_raw(&b, 1700000000123, key, key ? strlen(key) : 0,
                                                  val, vlen, h->b, h->len, h->n),
                         0);
    else
        assert_int_equal(sl_batch_builder_add(&b, 1700000000123, key, key ? strlen(key) : 0, val,
                                              vlen),
                         0);
    sl_batch out;
    assert_int_equal(sl_batch_builder_finish(&b, &out, err), 0);
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    assert_int_equal(sl_batch_reader_open(&br, out.data, out.len, err), 0);
    sl_record rec;
    assert_int_equal(sl_batch_reader_next(&br, &rec, err), 0);
    rec.offset = 42;
    sl_buf ev = {0};
    *rc = sl_record_event(&rec, "orders", 3, &ev, err);
    json_t *j = NULL;
    if (!*rc) {
        j = json_loadb((const char *)ev.data, ev.len, 0, NULL);
        assert_non_null(j);
    }
    sl_buf_free(&ev);
    sl_batch_reader_free(&br);
    sl_batch_builder_free(&b);
    return j;
}

static const char *str(json_t *j, const char *k)
{
    json_t *v = json_object_get(j, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void test_structured(void **state)
{
    (void)state;
    const char *ce = "{\"specversion\":\"1.0\",\"id\":\"a1\",\"source\":\"/s\",\"type\":\"t\","
                     "\"data\":{\"x\":1}}";
    int rc;
    sl_error err = {0};
    json_t *j = event_of(NULL, ce, strlen(ce), NULL, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "id"), "a1");
    assert_string_equal(str(j, "sluiceset"), "orders");
    assert_int_equal(json_integer_value(json_object_get(j, "sluicepartition")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "sluiceoffset")), 42);
    json_decref(j);

    /* A Kafka client's structured record: content-type with a parameter. */
    hdrs h = {0};
    hadd(&h, "content-type", "application/cloudevents+json; charset=UTF-8");
    j = event_of("k", ce, strlen(ce), &h, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "id"), "a1");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "x")), 1);
    json_decref(j);

    /* Written before the header existed: no headers, a CloudEvent value. */
    hdrs none = {0};
    j = event_of(NULL, ce, strlen(ce), &none, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "type"), "t");
    json_decref(j);

    /* Structured but not an object: an error, not a crash. */
    j = event_of(NULL, "[1,2]", 5, &h, &rc, &err);
    assert_null(j);
    assert_int_equal(rc, SL_EINVAL);
}

static void test_binary(void **state)
{
    (void)state;
    hdrs h = {0};
    hadd(&h, "ce_specversion", "1.0");
    hadd(&h, "ce_id", "b7");
    hadd(&h, "ce_source", "/bin");
    hadd(&h, "ce_type", "order.created");
    hadd(&h, "ce_subject", "o-9");
    hadd(&h, "content-type", "application/json");
    int rc;
    sl_error err = {0};
    json_t *j = event_of("k", "{\"n\":5}", 7, &h, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "id"), "b7");
    assert_string_equal(str(j, "type"), "order.created");
    assert_string_equal(str(j, "subject"), "o-9");
    assert_string_equal(str(j, "datacontenttype"), "application/json");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "n")), 5);
    json_decref(j);

    /* Text data stays a string. */
    hdrs t = {0};
    hadd(&t, "ce_specversion", "1.0");
    hadd(&t, "ce_id", "b8");
    hadd(&t, "ce_source", "/bin");
    hadd(&t, "ce_type", "x");
    hadd(&t, "content-type", "text/plain");
    j = event_of(NULL, "{not json", 9, &t, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "data"), "{not json");
    json_decref(j);

    /* A required attribute missing: the error names it. */
    hdrs m = {0};
    hadd(&m, "ce_specversion", "1.0");
    hadd(&m, "ce_id", "b9");
    hadd(&m, "ce_source", "/bin");
    j = event_of(NULL, "1", 1, &m, &rc, &err);
    assert_null(j);
    assert_int_equal(rc, SL_EINVAL);
    assert_non_null(strstr(err.msg, "ce_type"));
}

static void test_plain(void **state)
{
    (void)state;
    hdrs h = {0};
    hadd(&h, "acc", "h1");
    int rc;
    sl_error err = {0};
    json_t *j = event_of("key-7", "{\"n\":12}", 8, &h, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "specversion"), "1.0");
    assert_string_equal(str(j, "id"), "orders-3-42");
    assert_string_equal(str(j, "source"), "kafka://sluice/orders");
    assert_string_equal(str(j, "type"), "sluice.kafka.record");
    assert_string_equal(str(j, "subject"), "key-7");
    assert_string_equal(str(j, "partitionkey"), "key-7");
    assert_string_equal(str(j, "time"), "2023-11-14T22:13:20.123Z");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "n")), 12);
    json_decref(j);

    /* Text that is not JSON: a string; bytes that are not UTF-8: base64. */
    j = event_of(NULL, "hello world", 11, &h, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "data"), "hello world");
    assert_null(json_object_get(j, "subject"));
    json_decref(j);
    const uint8_t bin[] = {0xff, 0xfe, 0x00, 0x41};
    j = event_of(NULL, bin, sizeof bin, &h, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "data_base64"), "//4AQQ==");
    json_decref(j);

    /* A lane header becomes the event's lane. */
    hdrs l = {0};
    hadd(&l, "lane", "ppe");
    j = event_of(NULL, "1", 1, &l, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(str(j, "lane"), "ppe");
    json_decref(j);
}

static void test_kind_and_header(void **state)
{
    (void)state;
    hdrs h = {0};
    hadd(&h, "a", "1");
    hadd(&h, "content-type", "application/cloudevents+json");
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_NONE, 0);
    assert_int_equal(sl_batch_builder_reset(&b, ""), 0);
    assert_int_equal(sl_batch_builder_add_raw(&b, 1, NULL, 0, "{}", 2, h.b, h.len, h.n), 0);
    assert_int_equal(sl_batch_builder_add(&b, 1, NULL, 0, "{}", 2), 0);
    sl_batch out;
    sl_error err = {0};
    assert_int_equal(sl_batch_builder_finish(&b, &out, &err), 0);
    sl_batch_reader br;
    sl_batch_reader_init(&br);
    assert_int_equal(sl_batch_reader_open(&br, out.data, out.len, &err), 0);
    sl_record rec;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sl_batch_reader_next(&br, &rec, &err), 0);
        assert_int_equal(sl_record_kind_of(&rec), SL_RECORD_STRUCTURED);
        const uint8_t *v;
        size_t vl;
        assert_true(sl_record_header(&rec, "content-type", &v, &vl));
        assert_int_equal(vl, strlen(SL_BATCH_CE_HEADER_VALUE));
        assert_memory_equal(v, SL_BATCH_CE_HEADER_VALUE, vl);
        assert_false(sl_record_header(&rec, "Content-Type", &v, &vl));
    }
    sl_batch_reader_free(&br);
    sl_batch_builder_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structured),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_kind_and_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
