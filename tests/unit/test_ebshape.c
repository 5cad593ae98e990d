/*
 * tests/unit/test_ebshape.c — core/bus/ebshape.c: a stored CloudEvent in
 * EventBridge's shape (every field, the defaults for events that came in
 * another way, binary and missing data, escapes kept), back again, and the
 * refusals.
 */
#include "testutil.h"

#include "core/bus/ebshape.h"

#include <jansson.h>
#include <string.h>

static json_t *to_eb(const char *ce)
{
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    assert_int_equal(sl_ebshape_from_cloudevent(ce, strlen(ce), "111122223333", "eu-west-1", &out,
                                                &err),
                     0);
    json_t *j = json_loadb((const char *)out.data, out.len, 0, NULL);
    assert_non_null(j);
    sl_buf_free(&out);
    return j;
}

static void test_full(void **state)
{
    (void)state;
    json_t *j = to_eb("{\"specversion\":\"1.0\",\"id\":\"e-1\",\"source\":\"acc.put\",\"type\":"
                      "\"Order \\\"Placed\\\"\",\"time\":\"2024-05-01T12:00:00.123Z\","
                      "\"awsaccount\":\"000000000000\",\"awsregion\":\"us-east-1\","
                      "\"awsresources\":\"[\\\"arn:aws:s3:::b\\\"]\",\"subject\":\"s\","
                      "\"data\":{\"n\":1,\"s\":\"\\u00e9\"}}");
    assert_string_equal(json_string_value(json_object_get(j, "version")), "0");
    assert_string_equal(json_string_value(json_object_get(j, "id")), "e-1");
    assert_string_equal(json_string_value(json_object_get(j, "detail-type")), "Order \"Placed\"");
    assert_string_equal(json_string_value(json_object_get(j, "source")), "acc.put");
    assert_string_equal(json_string_value(json_object_get(j, "account")), "000000000000");
    assert_string_equal(json_string_value(json_object_get(j, "region")), "us-east-1");
    /* EventBridge's times have seconds, no fraction */
    assert_string_equal(json_string_value(json_object_get(j, "time")), "2024-05-01T12:00:00Z");
    json_t *res = json_object_get(j, "resources");
    assert_int_equal(json_array_size(res), 1);
    assert_string_equal(json_string_value(json_array_get(res, 0)), "arn:aws:s3:::b");
    json_t *d = json_object_get(j, "detail");
    assert_int_equal(json_integer_value(json_object_get(d, "n")), 1);
    assert_string_equal(json_string_value(json_object_get(d, "s")), "\xc3\xa9");
    assert_null(json_object_get(j, "subject")); /* no place for it */
    assert_int_equal(json_object_size(j), 9);
    json_decref(j);
}

static void test_defaults(void **state)
{
    (void)state;
    /* An event of HTTP ingest: the server's account and region, no
     * resources, no data -> {}. */
    json_t *j = to_eb("{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"/s\",\"type\":\"t\","
                      "\"time\":\"2024-01-01T00:00:00Z\"}");
    assert_string_equal(json_string_value(json_object_get(j, "account")), "111122223333");
    assert_string_equal(json_string_value(json_object_get(j, "region")), "eu-west-1");
    assert_int_equal(json_array_size(json_object_get(j, "resources")), 0);
    assert_true(json_is_object(json_object_get(j, "detail")));
    assert_int_equal(json_object_size(json_object_get(j, "detail")), 0);
    json_decref(j);
    /* Binary data keeps its bytes; resources that are not an array of
     * strings are none. */
    j = to_eb("{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"/s\",\"type\":\"t\","
              "\"awsresources\":\"[1,2]\",\"data_base64\":\"AAEC\"}");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(j, "detail"), "data_base64")), "AAEC");
    assert_int_equal(json_array_size(json_object_get(j, "resources")), 0);
    json_decref(j);
}

static void test_round_trip(void **state)
{
    (void)state;
    const char *ce = "{\"specversion\":\"1.0\",\"id\":\"e-2\",\"source\":\"a\",\"type\":\"T\","
                     "\"time\":\"2024-05-01T12:00:00Z\",\"awsresources\":\"[\\\"r1\\\",\\\"r2\\\"]\","
                     "\"data\":{\"k\":[1,2]}}";
    sl_buf eb = SL_BUF_INIT, back = SL_BUF_INIT;
    assert_int_equal(sl_ebshape_from_cloudevent(ce, strlen(ce), "000000000000", "us-east-1", &eb,
                                                NULL),
                     0);
    assert_int_equal(sl_ebshape_to_cloudevent((const char *)eb.data, eb.len, &back, NULL), 0);
    json_t *j = json_loadb((const char *)back.data, back.len, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "specversion")), "1.0");
    assert_string_equal(json_string_value(json_object_get(j, "id")), "e-2");
    assert_string_equal(json_string_value(json_object_get(j, "type")), "T");
    assert_string_equal(json_string_value(json_object_get(j, "source")), "a");
    assert_string_equal(json_string_value(json_object_get(j, "awsresources")), "[\"r1\",\"r2\"]");
    assert_string_equal(json_string_value(json_object_get(j, "awsaccount")), "000000000000");
    json_t *k = json_object_get(json_object_get(j, "data"), "k");
    assert_int_equal(json_array_size(k), 2);
    json_decref(j);
    sl_buf_free(&eb);
    sl_buf_free(&back);
}

static void test_refused(void **state)
{
    (void)state;
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    const char *bad[] = {"[]", "{\"source\":\"a\"}", "{\"source\":\"a\",\"detail-type\":\"t\","
                                                      "\"detail\":[1]}",
                         "{\"source\":1,\"detail-type\":\"t\"}", "{"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(sl_ebshape_to_cloudevent(bad[i], strlen(bad[i]), &out, &err), SL_EINVAL);
        assert_int_equal(out.len, 0);
        assert_true(strstr(err.msg, "EventBridge") || strstr(err.msg, "byte"));
    }
    /* not a CloudEvent */
    const char *nce = "{\"id\":\"x\"}";
    assert_int_not_equal(
        sl_ebshape_from_cloudevent(nce, strlen(nce), "000000000000", "r", &out, &err), 0);
    assert_int_equal(out.len, 0);
    sl_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
