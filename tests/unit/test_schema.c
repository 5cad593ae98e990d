/*
 * tests/unit/test_schema.c — the JSON Schema subset of rules/schema.h: a
 * table of schema/data pairs per keyword (each valid and invalid, with the
 * expected JSON pointer and reason), nested pointers with RFC 6901 escaping,
 * structural enum/const equality, formats, compile errors naming the
 * keyword, data that is not JSON, compile_file, concurrent validation, and
 * schema discovery (sl_schema_infer_*), whose results must compile and accept
 * every sample. Data is placed right before a PROT_NONE page so a one-byte
 * over-read crashes the test.
 */
#include "testutil.h"

#include <jansson.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/base/buf.h"
#include "rules/schema.h"

static tu_guard data_guard;

static sl_schema *compile_ok(const char *schema)
{
    sl_schema *s = NULL;
    sl_error err = {0};
    int rc = sl_schema_compile(schema, strlen(schema), &s, &err);
    if (rc)
        fail_msg("schema %s: %s (%s)", schema, err.msg, sl_strerror(rc));
    assert_non_null(s);
    return s;
}

/* ---- validation table ----------------------------------------------------- */

typedef struct vcase {
    const char *schema;
    const char *data;
    int rc;          /* 0, SL_EINVAL or SL_EPARSE */
    const char *msg; /* the whole message, or a prefix when it ends in '*' */
} vcase;

#define OK(s, d)                                                                                   \
    {                                                                                              \
        s, d, 0, NULL                                                                              \
    }
#define NO(s, d, m)                                                                                \
    {                                                                                              \
        s, d, SL_EINVAL, m                                                                         \
    }

static const vcase vcases[] = {
    /* ---- type ---- */
    OK("{\"type\":\"string\"}", "\"a\""),
    NO("{\"type\":\"string\"}", "1", "/data: expected string, got number"),
    OK("{\"type\":\"integer\"}", "3"),
    OK("{\"type\":\"integer\"}", "3.0"),
    OK("{\"type\":\"integer\"}", "-1e2"),
    NO("{\"type\":\"integer\"}", "3.5", "/data: expected integer, got number"),
    NO("{\"type\":\"integer\"}", "\"3\"", "/data: expected integer, got string"),
    OK("{\"type\":\"number\"}", "3.5"),
    OK("{\"type\":\"number\"}", "3"),
    NO("{\"type\":\"number\"}", "null", "/data: expected number, got null"),
    OK("{\"type\":\"boolean\"}", "false"),
    NO("{\"type\":\"boolean\"}", "0", "/data: expected boolean, got number"),
    OK("{\"type\":\"null\"}", "null"),
    OK("{\"type\":\"object\"}", "{}"),
    NO("{\"type\":\"object\"}", "[]", "/data: expected object, got array"),
    OK("{\"type\":\"array\"}", "[1,\"a\"]"),
    NO("{\"type\":\"array\"}", "{}", "/data: expected array, got object"),
    OK("{\"type\":[\"string\",\"null\"]}", "null"),
    OK("{\"type\":[\"string\",\"null\"]}", "\"x\""),
    NO("{\"type\":[\"string\",\"null\"]}", "true", "/data: expected null or string, got boolean"),
    NO("{\"type\":[\"string\",\"integer\",\"null\"]}", "1.5",
       "/data: expected null, integer or string, got number"),
    OK("{\"type\":[\"integer\",\"string\"]}", "7.0"),
    /* ---- properties, required, additionalProperties ---- */
    OK("{\"properties\":{\"a\":{\"type\":\"string\"}}}", "{\"a\":\"x\",\"b\":1}"),
    NO("{\"properties\":{\"a\":{\"type\":\"string\"}}}", "{\"a\":1}",
       "/data/a: expected string, got number"),
    OK("{\"properties\":{\"a\":{\"type\":\"string\"}}}", "5"), /* only objects */
    OK("{\"properties\":{\"a\":{\"type\":\"string\"}}}", "{}"),
    NO("{\"required\":[\"amount\"]}", "{}", "/data: missing required property \"amount\""),
    NO("{\"required\":[\"a\",\"amount\"]}", "{\"a\":1}",
       "/data: missing required property \"amount\""),
    OK("{\"required\":[\"amount\"]}", "{\"amount\":null}"),
    OK("{\"required\":[\"amount\"]}", "[]"), /* only objects */
    OK("{\"required\":[\"a/b\"]}", "{\"a\\u002fb\":1}"),
    NO("{\"required\":[\"z\",\"a\"],\"properties\":{\"m\":{}}}", "{\"m\":1}",
       "/data: missing required property \"z\""), /* in the order listed */
    NO("{\"properties\":{\"a\":{}},\"additionalProperties\":false}", "{\"a\":1,\"b\":2}",
       "/data/b: unexpected property (additionalProperties is false)"),
    OK("{\"properties\":{\"a\":{}},\"additionalProperties\":false}", "{\"a\":1}"),
    OK("{\"additionalProperties\":true}", "{\"x\":1}"),
    NO("{\"additionalProperties\":{\"type\":\"number\"}}", "{\"x\":\"s\"}",
       "/data/x: expected number, got string"),
    OK("{\"properties\":{\"s\":{\"type\":\"string\"}},\"additionalProperties\":{\"type\":"
       "\"number\"}}",
       "{\"s\":\"a\",\"n\":1}"),
    /* a name only in "required" is still an additional property */
    NO("{\"required\":[\"x\"],\"additionalProperties\":false}", "{\"x\":1}",
       "/data/x: unexpected property (additionalProperties is false)"),
    /* the first violation in document order wins over a missing property */
    NO("{\"required\":[\"r\"],\"properties\":{\"a\":{\"type\":\"string\"}}}", "{\"a\":1}",
       "/data/a: expected string, got number"),
    /* ---- items and nesting ---- */
    OK("{\"items\":{\"type\":\"integer\"}}", "[1,2,3]"),
    OK("{\"items\":{\"type\":\"integer\"}}", "[]"),
    NO("{\"items\":{\"type\":\"integer\"}}", "[1,2,\"x\"]",
       "/data/2: expected integer, got string"),
    NO("{\"items\":{\"items\":{\"type\":\"string\"}}}", "[[\"a\"],[\"b\",1]]",
       "/data/1/1: expected string, got number"),
    NO("{\"properties\":{\"items\":{\"items\":{\"properties\":{\"sku\":{\"type\":\"string\"}}}}}}",
       "{\"items\":[{\"sku\":\"a\"},{\"sku\":\"b\"},{\"sku\":5}]}",
       "/data/items/2/sku: expected string, got number"),
    NO("{\"properties\":{\"o\":{\"required\":[\"id\"]}}}", "{\"o\":{}}",
       "/data/o: missing required property \"id\""),
    NO("{\"properties\":{\"a\":{\"properties\":{\"b\":{\"properties\":{\"c\":{\"const\":1}}}}}}}",
       "{\"a\":{\"b\":{\"c\":2}}}", "/data/a/b/c: value does not equal the const 1"),
    /* RFC 6901: "~" is written "~0" and "/" "~1" in pointer segments */
    NO("{\"properties\":{\"a/b\":{\"properties\":{\"c~d\":{\"type\":\"string\"}}}}}",
       "{\"a/b\":{\"c~d\":1}}", "/data/a~1b/c~0d: expected string, got number"),
    NO("{\"properties\":{\"a/b\":{\"properties\":{\"c~d\":{\"type\":\"string\"}}}}}",
       "{\"a\\u002fb\":{\"c\\u007ed\":1}}", "/data/a~1b/c~0d: expected string, got number"),
    NO("{\"additionalProperties\":false}", "{\"x/y~\":1}",
       "/data/x~1y~0: unexpected property (additionalProperties is false)"),
    NO("{\"properties\":{\"\":{\"type\":\"null\"}}}", "{\"\":1}",
       "/data/: expected null, got number"),
    NO("{\"properties\":{\"caf\\u00e9\":{\"type\":\"null\"}}}", "{\"caf\\u00e9\":1}",
       "/data/café: expected null, got number"),
    /* many properties: binary search, and the heap "seen" set past 64 */
    NO("{\"properties\":{\"a\":{},\"b\":{},\"c\":{},\"d\":{},\"e\":{\"type\":\"string\"},\"f\":{},"
       "\"g\":{}}}",
       "{\"g\":1,\"a\":2,\"e\":3}", "/data/e: expected string, got number"),
    /* ---- enum and const ---- */
    OK("{\"enum\":[\"a\",\"b\"]}", "\"b\""),
    NO("{\"enum\":[\"a\",\"b\"]}", "\"c\"",
       "/data: value is not one of the enum values [\"a\",\"b\"]"),
    OK("{\"enum\":[1,2]}", "1.0"),
    OK("{\"enum\":[1,2]}", "2e0"),
    NO("{\"enum\":[1,2]}", "\"1\"", "/data: value is not one of the enum values [1,2]"),
    OK("{\"enum\":[{\"a\":1,\"b\":[1,2]}]}", "{\"b\":[1,2.0],\"a\":1}"),
    NO("{\"enum\":[{\"a\":1}]}", "{\"a\":1,\"b\":2}", "/data: value is not one of the enum*"),
    NO("{\"enum\":[{\"a\":1,\"b\":2}]}", "{\"a\":1}", "/data: value is not one of the enum*"),
    NO("{\"enum\":[{\"a\":1,\"b\":2}]}", "{\"a\":1,\"a\":1}",
       "/data: value is not one of the enum*"),
    NO("{\"enum\":[[1,2]]}", "[2,1]", "/data: value is not one of the enum values [[1,2]]"),
    NO("{\"enum\":[[1,2]]}", "[1,2,3]", "/data: value is not one of the enum*"),
    NO("{\"enum\":[[1,2]]}", "[1]", "/data: value is not one of the enum*"),
    OK("{\"enum\":[null,true,\"x\"]}", "true"),
    NO("{\"enum\":[null,true,\"x\"]}", "false",
       "/data: value is not one of the enum values "
       "[null,true,\"x\"]"),
    OK("{\"enum\":[\"caf\\u00e9\"]}", "\"caf\\u00e9\""),
    OK("{\"enum\":[\"café\"]}", "\"caf\\u00e9\""),
    OK("{\"const\":\"x\"}", "\"x\""),
    NO("{\"const\":\"x\"}", "\"y\"", "/data: value does not equal the const \"x\""),
    OK("{\"const\":null}", "null"),
    NO("{\"const\":null}", "0", "/data: value does not equal the const null"),
    OK("{\"const\":1}", "1e0"),
    NO("{\"const\":\"1\"}", "1", "/data: value does not equal the const \"1\""),
    OK("{\"const\":{\"a\":[true,null,{\"b\":\"c\"}]}}",
       "{ \"a\" : [ true , null , {\"b\":\"c\"} ] }"),
    NO("{\"const\":{\"a\":[true,null]}}", "{\"a\":[true,false]}",
       "/data: value does not equal the const {\"a\":[true,null]}"),
    NO("{\"const\":0.5}", "0.25", "/data: value does not equal the const 0.5"),
    /* ---- numbers ---- */
    OK("{\"minimum\":10}", "10"),
    NO("{\"properties\":{\"amount\":{\"minimum\":10}}}", "{\"amount\":5}",
       "/data/amount: 5 is less than the minimum 10"),
    NO("{\"minimum\":1.5}", "1.25", "/data: 1.25 is less than the minimum 1.5"),
    OK("{\"maximum\":10}", "10.0"),
    NO("{\"maximum\":10}", "10.5", "/data: 10.5 is greater than the maximum 10"),
    NO("{\"maximum\":10}", "1e400", "/data: 1e400 is greater than the maximum 10"),
    OK("{\"exclusiveMinimum\":0}", "0.001"),
    NO("{\"exclusiveMinimum\":0}", "0", "/data: 0 is not greater than the exclusive minimum 0"),
    OK("{\"exclusiveMaximum\":1}", "0.99"),
    NO("{\"exclusiveMaximum\":1}", "1", "/data: 1 is not less than the exclusive maximum 1"),
    OK("{\"minimum\":10}", "\"5\""), /* only numbers */
    OK("{\"minimum\":-1e308,\"maximum\":1e308}", "0"),
    NO("{\"minimum\":0}", "-0.000000000000000000000000000000000000000000000000000000000000000001",
       "/data: -0.0000000000000000000000000000000000000... is less than the minimum 0"),
    /* the fast decimal path and strtod() agree */
    OK("{\"const\":0.1}", "0.10"),
    OK("{\"const\":-0}", "0"),
    OK("{\"maximum\":0.3}", "0.3"),
    NO("{\"maximum\":0.3}", "0.30000000000000004",
       "/data: 0.30000000000000004 is greater than the maximum 0.3"),
    OK("{\"const\":123456.789012345}", "123456.7890123450"),
    OK("{\"const\":1.7976931348623157e308}", "1.7976931348623157e308"),
    OK("{\"const\":1e-7}", "0.0000001"),
    NO("{\"minimum\":9007199254740993}", "9007199254740991",
       "/data: 9007199254740991 is less than the minimum 9007199254740992"),
    /* ---- strings ---- */
    OK("{\"minLength\":2}", "\"ab\""),
    NO("{\"minLength\":2}", "\"é\"",
       "/data: string is shorter than the minimum length 2 (1 character)"),
    OK("{\"minLength\":2}", "\"éé\""),
    OK("{\"maxLength\":3}", "\"日本語\""),
    NO("{\"maxLength\":3}", "\"日本語x\"",
       "/data: string is longer than the maximum length 3 (4 characters)"),
    OK("{\"maxLength\":2}", "\"\\u00e9\\u00e9\""),
    NO("{\"maxLength\":2}", "\"\\ud83d\\ude00ab\"",
       "/data: string is longer than the maximum length 2 (3 characters)"),
    OK("{\"maxLength\":0}", "\"\""),
    OK("{\"maxLength\":0}", "5"), /* only strings */
    OK("{\"pattern\":\"^[A-Z]{3}-[0-9]+$\"}", "\"ABC-12\""),
    NO("{\"pattern\":\"^[A-Z]{3}-[0-9]+$\"}", "\"abc-12\"",
       "/data: string does not match the pattern \"^[A-Z]{3}-[0-9]+$\""),
    OK("{\"pattern\":\"b\"}", "\"abc\""), /* unanchored */
    OK("{\"pattern\":\"^[A-Z]{3}-[0-9]+$\"}", "\"A\\u0042C-1\""),
    NO("{\"pattern\":\"^a$\"}", "\"a\\u0000\"", "/data: string does not match the pattern \"^a$\""),
    OK("{\"pattern\":\"^x\"}", "5"), /* only strings */
    /* ---- formats ---- */
    OK("{\"format\":\"date-time\"}", "\"2024-02-29T13:45:00.123+01:00\""),
    OK("{\"format\":\"date-time\"}", "\"2024-05-01t12:00:00z\""),
    NO("{\"format\":\"date-time\"}", "\"2023-02-29T00:00:00Z\"",
       "/data: string is not a valid date-time (RFC 3339)"),
    NO("{\"format\":\"date-time\"}", "\"2024-01-01 00:00:00Z\"",
       "/data: string is not a valid date-time (RFC 3339)"),
    NO("{\"format\":\"date-time\"}", "\"2024-01-01\"",
       "/data: string is not a valid date-time (RFC 3339)"),
    OK("{\"format\":\"email\"}", "\"a.b+c@example.co.uk\""),
    OK("{\"format\":\"email\"}", "\"x@xn--p1ai.example\""),
    NO("{\"format\":\"email\"}", "\"a@b\"", "/data: string is not a valid email address"),
    NO("{\"format\":\"email\"}", "\"a..b@example.com\"", "/data: string is not a valid email*"),
    NO("{\"format\":\"email\"}", "\"@example.com\"", "/data: string is not a valid email*"),
    NO("{\"format\":\"email\"}", "\"a@-x.com\"", "/data: string is not a valid email*"),
    NO("{\"format\":\"email\"}", "\"a b@x.com\"", "/data: string is not a valid email*"),
    NO("{\"format\":\"email\"}", "\"a@b@x.com\"", "/data: string is not a valid email*"),
    NO("{\"format\":\"email\"}", "\"a@x.com.\"", "/data: string is not a valid email*"),
    OK("{\"format\":\"uri\"}", "\"https://example.com/a?b=c#d\""),
    OK("{\"format\":\"uri\"}", "\"urn:isbn:0451450523\""),
    OK("{\"format\":\"uri\"}", "\"mailto:a@b.c\""),
    OK("{\"format\":\"uri\"}", "\"http://x/%20\""),
    OK("{\"format\":\"uri\"}", "\"git+ssh://h/r\""),
    NO("{\"format\":\"uri\"}", "\"/relative\"", "/data: string is not a valid URI"),
    NO("{\"format\":\"uri\"}", "\"1http://x\"", "/data: string is not a valid URI"),
    NO("{\"format\":\"uri\"}", "\"http://x/a b\"", "/data: string is not a valid URI"),
    NO("{\"format\":\"uri\"}", "\"http://x/%zz\"", "/data: string is not a valid URI"),
    NO("{\"format\":\"uri\"}", "\"http://x/%2\"", "/data: string is not a valid URI"),
    NO("{\"format\":\"uri\"}", "\"ht_tp://x\"", "/data: string is not a valid URI"),
    OK("{\"format\":\"email\"}", "5"), /* only strings */
    /* ---- boolean schemas ---- */
    OK("true", "{\"anything\":[1]}"),
    NO("false", "1", "/data: no value is allowed here (the schema is false)"),
    NO("{\"properties\":{\"x\":false}}", "{\"x\":1}",
       "/data/x: no value is allowed here (the schema is false)"),
    OK("{\"items\":false}", "[]"),
    NO("{\"items\":false}", "[1]", "/data/0: no value is allowed here (the schema is false)"),
    /* ---- annotations are accepted and ignored ---- */
    OK("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"x\","
       "\"title\":\"t\",\"description\":\"d\",\"default\":1,\"examples\":[1],\"$comment\":\"c\","
       "\"type\":\"integer\"}",
       "1"),
    /* ---- data that is not JSON ---- */
    {"{}", "{\"a\":", SL_EPARSE, "/data: not valid JSON: byte 5: *"},
    {"{}", "", SL_EPARSE, "/data: not valid JSON*"},
    {"{}", "1 2", SL_EPARSE, "/data: not valid JSON: byte 2: unexpected data after the JSON value"},
    {"{\"type\":\"string\"}", "\"\xff\"", SL_EPARSE, "/data: not valid JSON*"},
    {"{}", "{a:1}", SL_EPARSE, "/data: not valid JSON*"},
};

static void check_message(const char *got, const char *want, const char *what)
{
    size_t n = strlen(want);
    bool prefix = n && want[n - 1] == '*';
    if (prefix ? strncmp(got, want, n - 1) != 0 : strcmp(got, want) != 0)
        fail_msg("%s: message\n  got  \"%s\"\n  want \"%s\"", what, got, want);
}

static void test_validate_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof vcases / sizeof vcases[0]; i++) {
        const vcase *c = &vcases[i];
        char what[512];
        snprintf(what, sizeof what, "case %zu: schema %s, data %s", i, c->schema, c->data);
        sl_schema *s = compile_ok(c->schema);
        size_t n = strlen(c->data);
        const char *d = tu_guard_put(&data_guard, c->data, n);
        sl_error err = {0};
        int rc = sl_schema_validate(s, d, n, &err);
        if (rc != c->rc)
            fail_msg("%s: rc %d (%s), want %d; message \"%s\"", what, rc, sl_strerror(rc), c->rc,
                     err.msg);
        if (c->msg) {
            assert_int_equal(err.code, c->rc);
            check_message(err.msg, c->msg, what);
        }
        /* Without an sl_error the outcome is the same. */
        assert_int_equal(sl_schema_validate(s, d, n, NULL), c->rc);
        sl_schema_free(s);
    }
}

/* More than 64 properties with required ones: "seen" lives on the heap. */
static void test_many_properties(void **state)
{
    (void)state;
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"properties\":{");
    for (int i = 0; i < 100; i++)
        sl_buf_printf(&b, "%s\"p%02d\":{\"type\":\"integer\"}", i ? "," : "", i);
    sl_buf_printf(&b, "},\"required\":[\"p99\",\"p00\",\"p64\"]}");
    sl_schema *s = NULL;
    sl_error err = {0};
    assert_int_equal(sl_schema_compile((char *)b.data, b.len, &s, &err), 0);
    const char *ok = "{\"p00\":1,\"p64\":2,\"p99\":3,\"zz\":\"x\"}";
    assert_int_equal(sl_schema_validate(s, ok, strlen(ok), &err), 0);
    const char *miss = "{\"p00\":1,\"p99\":3}";
    assert_int_equal(sl_schema_validate(s, miss, strlen(miss), &err), SL_EINVAL);
    assert_string_equal(err.msg, "/data: missing required property \"p64\"");
    const char *wrong = "{\"p00\":1,\"p50\":\"x\"}";
    assert_int_equal(sl_schema_validate(s, wrong, strlen(wrong), &err), SL_EINVAL);
    assert_string_equal(err.msg, "/data/p50: expected integer, got string");
    sl_schema_free(s);
    sl_buf_free(&b);
}

/* A long escaped string meets a pattern: decoded on the heap. */
static void test_long_escaped_string(void **state)
{
    (void)state;
    sl_schema *s = compile_ok("{\"pattern\":\"^(ab)+c$\",\"minLength\":2001,\"maxLength\":2001}");
    sl_buf b = SL_BUF_INIT;
    sl_buf_append(&b, "\"", 1);
    for (int i = 0; i < 1000; i++)
        sl_buf_append(&b, "\\u0061b", 7);
    sl_buf_append(&b, "c\"", 2);
    const char *d = tu_guard_put(&data_guard, (char *)b.data, b.len);
    sl_error err = {0};
    assert_int_equal(sl_schema_validate(s, d, b.len, &err), 0);
    b.data[b.len - 2] = 'd';
    d = tu_guard_put(&data_guard, (char *)b.data, b.len);
    assert_int_equal(sl_schema_validate(s, d, b.len, &err), SL_EINVAL);
    check_message(err.msg, "/data: string does not match the pattern*", "long string");
    sl_schema_free(s);
    sl_buf_free(&b);
}

/* A long key in a pointer is cut, never overflowed. */
static void test_long_pointer(void **state)
{
    (void)state;
    sl_schema *s = compile_ok("{\"additionalProperties\":{\"additionalProperties\":false}}");
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"");
    for (int i = 0; i < 600; i++)
        sl_buf_append(&b, "/", 1);
    sl_buf_printf(&b, "\":{\"x\":1}}");
    sl_error err = {0};
    assert_int_equal(sl_schema_validate(s, (char *)b.data, b.len, &err), SL_EINVAL);
    check_message(err.msg, "/data/~1~1~1*", "long pointer");
    assert_non_null(strstr(err.msg, ": unexpected property (additionalProperties is false)"));
    sl_schema_free(s);
    sl_buf_free(&b);
}

/* ---- compile errors ------------------------------------------------------- */

typedef struct ccase {
    const char *schema;
    int rc;
    const char *msg; /* the whole message, or a prefix ending in '*' */
} ccase;

static const ccase ccases[] = {
    {"{\"minimun\":1}", SL_EINVAL, "/minimun: unknown keyword"},
    {"{\"$ref\":\"#/x\"}", SL_EINVAL, "/$ref: unknown keyword"},
    {"{\"items\":{\"typo\":1}}", SL_EINVAL, "/items/typo: unknown keyword"},
    {"{\"properties\":{\"a/b\":{\"x~y\":1}}}", SL_EINVAL, "/properties/a~1b/x~0y: unknown keyword"},
    {"{\"properties\":{\"amount\":{\"minimum\":\"x\"}}}", SL_EINVAL,
     "/properties/amount/minimum: must be a number, got string"},
    {"{\"maximum\":null}", SL_EINVAL, "/maximum: must be a number, got null"},
    {"{\"exclusiveMinimum\":true}", SL_EINVAL,
     "/exclusiveMinimum: must be a number (the draft-4 boolean form is not supported)"},
    {"{\"exclusiveMaximum\":\"1\"}", SL_EINVAL, "/exclusiveMaximum: must be a number, got string"},
    {"{\"required\":\"a\"}", SL_EINVAL,
     "/required: must be an array of property names, got string"},
    {"{\"required\":[\"a\",1]}", SL_EINVAL,
     "/required/1: must be a property name (a string), got number"},
    {"{\"required\":[\"a\",\"a\"]}", SL_EINVAL, "/required/1: \"a\" is listed twice"},
    {"{\"type\":\"strng\"}", SL_EINVAL, "/type: unknown type \"strng\"*"},
    {"{\"type\":[\"string\",5]}", SL_EINVAL, "/type/1: must be a type name (a string), got number"},
    {"{\"type\":[\"string\",\"string\"]}", SL_EINVAL, "/type/1: type \"string\" is listed twice"},
    {"{\"type\":[]}", SL_EINVAL, "/type: must name at least one type"},
    {"{\"type\":{}}", SL_EINVAL, "/type: must be a type name or a list of type names, got object"},
    {"{\"pattern\":\"(a\"}", SL_EINVAL, "/pattern: invalid regular expression: *"},
    {"{\"properties\":{\"s\":{\"pattern\":\"a{2,1}\"}}}", SL_EINVAL,
     "/properties/s/pattern: invalid regular expression: *"},
    {"{\"pattern\":5}", SL_EINVAL, "/pattern: must be a regular expression (a string), got number"},
    {"{\"pattern\":\"a\\u0000b\"}", SL_EINVAL, "/pattern: must not contain a NUL character"},
    {"{\"format\":\"ipv4\"}", SL_EINVAL,
     "/format: unknown format \"ipv4\" (supported: date-time, email, uri)"},
    {"{\"format\":true}", SL_EINVAL, "/format: must be a format name (a string), got boolean"},
    {"{\"minLength\":-1}", SL_EINVAL, "/minLength: must be a non-negative integer"},
    {"{\"maxLength\":1.5}", SL_EINVAL, "/maxLength: must be a non-negative integer"},
    {"{\"maxLength\":\"3\"}", SL_EINVAL, "/maxLength: must be a non-negative integer"},
    {"{\"enum\":[]}", SL_EINVAL, "/enum: must be a non-empty array of values"},
    {"{\"enum\":\"a\"}", SL_EINVAL, "/enum: must be a non-empty array of values"},
    {"{\"items\":[{}]}", SL_EINVAL, "/items: must be a schema (the array form is not supported)"},
    {"{\"items\":3}", SL_EINVAL, "/items: a schema must be an object or a boolean, got number"},
    {"{\"additionalProperties\":5}", SL_EINVAL,
     "/additionalProperties: must be a boolean or a schema, got number"},
    {"{\"additionalProperties\":{\"minimum\":{}}}", SL_EINVAL,
     "/additionalProperties/minimum: must be a number, got object"},
    {"{\"properties\":[]}", SL_EINVAL,
     "/properties: must be an object of property schemas, got array"},
    {"{\"properties\":{\"a\":1}}", SL_EINVAL,
     "/properties/a: a schema must be an object or a boolean, got number"},
    {"5", SL_EINVAL, "(root): a schema must be an object or a boolean, got number"},
    {"\"string\"", SL_EINVAL, "(root): a schema must be an object or a boolean, got string"},
    {"{\"type\":\"string\",\"type\":\"number\"}", SL_EINVAL, "line 1, column *"},
    {"{", SL_EPARSE, "line 1, column *"},
    {"", SL_EPARSE, "line 1, column *"},
    {"{\"type\":\"string\"} x", SL_EPARSE, "line 1, column *"},
};

static void test_compile_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ccases / sizeof ccases[0]; i++) {
        const ccase *c = &ccases[i];
        char what[256];
        snprintf(what, sizeof what, "compile case %zu: %s", i, c->schema);
        sl_schema *s = NULL;
        sl_error err = {0};
        int rc = sl_schema_compile(c->schema, strlen(c->schema), &s, &err);
        if (rc != c->rc)
            fail_msg("%s: rc %d (%s), want %d; message \"%s\"", what, rc, sl_strerror(rc), c->rc,
                     err.msg);
        assert_null(s);
        assert_int_equal(err.code, c->rc);
        check_message(err.msg, c->msg, what);
        /* Without an sl_error the outcome is the same. */
        assert_int_equal(sl_schema_compile(c->schema, strlen(c->schema), &s, NULL), c->rc);
    }
}

/* The regerror() text reaches the message. */
static void test_regex_error_text(void **state)
{
    (void)state;
    sl_schema *s = NULL;
    sl_error err = {0};
    assert_int_equal(sl_schema_compile("{\"pattern\":\"[a\"}", 16, &s, &err), SL_EINVAL);
    regex_t re;
    int rc = regcomp(&re, "[a", REG_EXTENDED | REG_NOSUB);
    assert_int_not_equal(rc, 0);
    char why[256], want[400];
    regerror(rc, &re, why, sizeof why);
    snprintf(want, sizeof want, "/pattern: invalid regular expression: %s", why);
    assert_string_equal(err.msg, want);
}

/* ---- compile_file --------------------------------------------------------- */

static void test_compile_file(void **state)
{
    char *dir = *state, path[512];
    sl_schema *s = NULL;
    sl_error err = {0};

    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(sl_schema_compile_file(path, &s, &err), SL_ENOENT);
    assert_null(s);
    assert_int_equal(err.code, SL_ENOENT);
    assert_non_null(strstr(err.msg, path));
    assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);

    snprintf(path, sizeof path, "%s/order.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"type\":\"object\",\"required\":[\"amount\"],\n"
          " \"properties\":{\"amount\":{\"type\":\"number\",\"minimum\":0}}}\n",
          f);
    fclose(f);
    assert_int_equal(sl_schema_compile_file(path, &s, &err), 0);
    assert_int_equal(sl_schema_validate(s, "{\"amount\":3}", 12, &err), 0);
    assert_int_equal(sl_schema_validate(s, "{\"amount\":-3}", 13, &err), SL_EINVAL);
    assert_string_equal(err.msg, "/data/amount: -3 is less than the minimum 0");
    sl_schema_free(s);

    snprintf(path, sizeof path, "%s/bad.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"properties\":{\"a\":{\"maxLenght\":3}}}", f);
    fclose(f);
    s = NULL;
    assert_int_equal(sl_schema_compile_file(path, &s, &err), SL_EINVAL);
    assert_null(s);
    char want[600];
    snprintf(want, sizeof want, "%s: /properties/a/maxLenght: unknown keyword", path);
    assert_string_equal(err.msg, want);

    snprintf(path, sizeof path, "%s/notjson.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"type\":", f);
    fclose(f);
    assert_int_equal(sl_schema_compile_file(path, &s, &err), SL_EPARSE);
    assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);

    /* A directory is not a schema file. */
    assert_int_equal(sl_schema_compile_file(dir, &s, &err), SL_EINVAL);
    assert_int_equal(strncmp(err.msg, dir, strlen(dir)), 0);
}

/* ---- threads -------------------------------------------------------------- */

typedef struct tjob {
    const sl_schema *s;
    int failures;
} tjob;

static void *validate_many(void *arg)
{
    tjob *j = arg;
    static const char good[] = "{\"id\":\"ORD-123\",\"at\":\"2024-05-01T12:00:00Z\",\"n\":3}";
    static const char bad[] = "{\"id\":\"ord-123\",\"at\":\"2024-05-01T12:00:00Z\",\"n\":3}";
    for (int i = 0; i < 2000; i++) {
        sl_error err = {0};
        if (sl_schema_validate(j->s, good, sizeof good - 1, &err) != 0)
            j->failures++;
        if (sl_schema_validate(j->s, bad, sizeof bad - 1, &err) != SL_EINVAL ||
            strcmp(err.msg, "/data/id: string does not match the pattern \"^ORD-[0-9]+$\"") != 0)
            j->failures++;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    sl_schema *s = compile_ok("{\"required\":[\"id\",\"at\"],\"properties\":{\"id\":{\"pattern\":"
                              "\"^ORD-[0-9]+$\"},\"at\":{\"format\":\"date-time\"},\"n\":{"
                              "\"type\":\"integer\",\"minimum\":1}}}");
    pthread_t t[4];
    tjob jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (tjob){s, 0};
        assert_int_equal(pthread_create(&t[i], NULL, validate_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(jobs[i].failures, 0);
    }
    sl_schema_free(s);
}

/* ---- inference ------------------------------------------------------------ */

/* Infers from the samples and returns the parsed result; also checks that
 * the result compiles and accepts every sample. */
static json_t *infer(const char *const *samples, size_t n)
{
    sl_schema_infer *inf = NULL;
    assert_int_equal(sl_schema_infer_new(&inf), 0);
    for (size_t i = 0; i < n; i++) {
        sl_error err = {0};
        const char *d = tu_guard_put(&data_guard, samples[i], strlen(samples[i]));
        if (sl_schema_infer_add(inf, d, strlen(samples[i]), &err))
            fail_msg("sample %s: %s", samples[i], err.msg);
    }
    char *text = sl_schema_infer_result(inf);
    assert_non_null(text);
    sl_schema *s = compile_ok(text);
    for (size_t i = 0; i < n; i++) {
        sl_error err = {0};
        if (sl_schema_validate(s, samples[i], strlen(samples[i]), &err))
            fail_msg("inferred schema %s refuses sample %s: %s", text, samples[i], err.msg);
    }
    sl_schema_free(s);
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    assert_non_null(doc);
    free(text);
    sl_schema_infer_free(inf);
    return doc;
}

/* Asserts that the schema doc equals the JSON text want (key order
 * irrelevant). */
static void assert_schema(json_t *doc, const char *want)
{
    json_error_t je;
    json_t *w = json_loads(want, 0, &je);
    if (!w)
        fail_msg("bad expected JSON %s: %s", want, je.text);
    if (!json_equal(doc, w)) {
        char *got = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fail_msg("inferred\n  %s\nwant\n  %s", got, want);
    }
    json_decref(w);
    json_decref(doc);
}

#define INFER(...)                                                                                 \
    infer((const char *const[]){__VA_ARGS__},                                                      \
          sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static void test_infer_empty(void **state)
{
    (void)state;
    sl_schema_infer *inf = NULL;
    assert_int_equal(sl_schema_infer_new(&inf), 0);
    char *text = sl_schema_infer_result(inf);
    assert_string_equal(text, "{}");
    free(text);
    sl_schema_infer_free(inf);
}

static void test_infer_scalars_and_merging(void **state)
{
    (void)state;
    assert_schema(INFER("{\"a\":1,\"b\":\"x\",\"c\":true,\"d\":null,\"e\":2.5}"),
                  "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                  "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"},"
                  "\"d\":{\"type\":\"null\"},\"e\":{\"type\":\"number\"}},"
                  "\"required\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}");
    /* integer + number -> number */
    assert_schema(INFER("{\"a\":1}", "{\"a\":2.5}"),
                  "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"}},"
                  "\"required\":[\"a\"]}");
    /* different types -> a list */
    assert_schema(INFER("{\"a\":1}", "{\"a\":\"x\"}", "{\"a\":null}"),
                  "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"string\",\"integer\","
                  "\"null\"]}},\"required\":[\"a\"]}");
    /* top-level scalars */
    assert_schema(INFER("1", "2"), "{\"type\":\"integer\"}");
    assert_schema(INFER("1", "\"x\""), "{\"type\":[\"string\",\"integer\"]}");
}

static void test_infer_required(void **state)
{
    (void)state;
    json_t *doc = INFER("{\"a\":1,\"b\":2}", "{\"a\":1}", "{\"c\":3,\"a\":0}");
    json_t *req = json_object_get(doc, "required");
    assert_int_equal(json_array_size(req), 1);
    assert_string_equal(json_string_value(json_array_get(req, 0)), "a");
    /* properties in first-seen order */
    const char *order[] = {"a", "b", "c"};
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(doc, "properties"), k, v)
    {
        assert_true(i < 3);
        assert_string_equal(k, order[i++]);
    }
    assert_int_equal(i, 3);
    json_decref(doc);
    /* A name repeated inside one object counts once. */
    doc = INFER("{\"a\":1,\"a\":2}", "{\"b\":1}");
    assert_null(json_object_get(doc, "required"));
    json_decref(doc);
    /* No property in every sample: no "required". */
    assert_schema(INFER("{\"a\":1}", "{}"),
                  "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    assert_schema(INFER("{}"), "{\"type\":\"object\",\"properties\":{}}");
}

static void test_infer_date_time(void **state)
{
    (void)state;
    assert_schema(
        INFER("{\"t\":\"2024-01-01T00:00:00Z\"}", "{\"t\":\"2024-01-02T00:00:00.5+01:00\"}"),
        "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\",\"format\":"
        "\"date-time\"}},\"required\":[\"t\"]}");
    /* one string that is not a time: no format */
    assert_schema(INFER("{\"t\":\"2024-01-01T00:00:00Z\"}", "{\"t\":\"yesterday\"}"),
                  "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\"}},"
                  "\"required\":[\"t\"]}");
    /* nulls do not spoil the format; escaped times are recognised */
    assert_schema(INFER("{\"t\":null}", "{\"t\":\"2024-01-01T00:00:00\\u005a\"}"),
                  "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":[\"string\",\"null\"],"
                  "\"format\":\"date-time\"}},\"required\":[\"t\"]}");
    /* a date alone is not a date-time */
    assert_schema(INFER("\"2024-01-01\""), "{\"type\":\"string\"}");
}

static void test_infer_nested(void **state)
{
    (void)state;
    assert_schema(INFER("{\"o\":{\"x\":1}}", "{\"o\":{\"x\":2,\"y\":true}}"),
                  "{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\",\"properties\":"
                  "{\"x\":{\"type\":\"integer\"},\"y\":{\"type\":\"boolean\"}},\"required\":"
                  "[\"x\"]}},\"required\":[\"o\"]}");
    /* arrays of objects: elements merged, required over all elements */
    assert_schema(INFER("{\"items\":[{\"sku\":\"a\",\"q\":1},{\"sku\":\"b\"}]}",
                        "{\"items\":[{\"sku\":\"c\",\"q\":2.5}]}"),
                  "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":"
                  "{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\"},\"q\":"
                  "{\"type\":\"number\"}},\"required\":[\"sku\"]}}},\"required\":[\"items\"]}");
    /* empty arrays say nothing about their items */
    assert_schema(INFER("{\"l\":[]}"),
                  "{\"type\":\"object\",\"properties\":{\"l\":{\"type\":\"array\"}},"
                  "\"required\":[\"l\"]}");
    assert_schema(INFER("[[1],[\"a\"]]"),
                  "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":"
                  "[\"string\",\"integer\"]}}}");
    /* an object sometimes, a string other times */
    assert_schema(INFER("{\"v\":{\"k\":1}}", "{\"v\":\"s\"}"),
                  "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":[\"object\",\"string\"],"
                  "\"properties\":{\"k\":{\"type\":\"integer\"}},\"required\":[\"k\"]}},"
                  "\"required\":[\"v\"]}");
    /* escaped and special names */
    assert_schema(INFER("{\"a\\u002fb\":1,\"~\":2}"),
                  "{\"type\":\"object\",\"properties\":{\"a/b\":{\"type\":\"integer\"},\"~\":"
                  "{\"type\":\"integer\"}},\"required\":[\"a/b\",\"~\"]}");
}

static void test_infer_deep(void **state)
{
    (void)state;
    /* Deeper than the inference records: the result stays valid and
     * accepts the sample. */
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 200; i++)
        sl_buf_append(&b, "{\"a\":", 5);
    sl_buf_append(&b, "1", 1);
    for (int i = 0; i < 200; i++)
        sl_buf_append(&b, "}", 1);
    sl_buf_append(&b, "", 1);
    const char *samples[] = {(char *)b.data};
    json_decref(infer(samples, 1));
    sl_buf_free(&b);
}

static void test_infer_not_json(void **state)
{
    (void)state;
    sl_schema_infer *inf = NULL;
    assert_int_equal(sl_schema_infer_new(&inf), 0);
    sl_error err = {0};
    assert_int_equal(sl_schema_infer_add(inf, "{\"a\":", 5, &err), SL_EPARSE);
    check_message(err.msg, "not valid JSON: byte 5: *", "infer not JSON");
    assert_int_equal(sl_schema_infer_add(inf, "[1,]", 4, NULL), SL_EPARSE);
    /* Refused samples leave nothing behind. */
    char *text = sl_schema_infer_result(inf);
    assert_string_equal(text, "{}");
    free(text);
    sl_schema_infer_free(inf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_table),
        cmocka_unit_test(test_many_properties),
        cmocka_unit_test(test_long_escaped_string),
        cmocka_unit_test(test_long_pointer),
        cmocka_unit_test(test_compile_errors),
        cmocka_unit_test(test_regex_error_text),
        cmocka_unit_test_setup_teardown(test_compile_file, tu_tmp_setup, tu_tmp_teardown),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_infer_empty),
        cmocka_unit_test(test_infer_scalars_and_merging),
        cmocka_unit_test(test_infer_required),
        cmocka_unit_test(test_infer_date_time),
        cmocka_unit_test(test_infer_nested),
        cmocka_unit_test(test_infer_deep),
        cmocka_unit_test(test_infer_not_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
