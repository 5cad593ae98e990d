/*
 * tests/integration/test_target_kafka.c — target.kafka of the real
 * `bin/sluice serve -c FILE.lua` against librdkafka's mock cluster
 * (build/rel/tools/kafka_mock, 3 brokers on 127.0.0.1), read back with a
 * librdkafka consumer and with kcat (issue 5 §3, §6): binary mode headers
 * and values (CloudEvents Kafka binding), structured and data modes, lane
 * headers, record keys (partitionkey, subject, templates), topic templates,
 * every event delivered in order per key across broker outages, permanent
 * failures counted `failed`, an unknown topic retried until it exists, a
 * fast shutdown with every broker down, a new producer after a fatal error,
 * the target's health (back once the brokers are, even when idle), `sluice
 * check` refusing what librdkafka refuses (conflicting properties too) without
 * quoting secrets, records held behind an unqueueable one in an ordered batch
 * using up no attempt, a refused timestamp being permanent, and keyed records
 * on the partition Java's murmur2 picks (an explicit `partitioner` wins), and
 * the ce_sluice* headers of decorated events and of a transform's output.
 * The harness is itest.h.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_S 30.0 /* every wait gives up after this long */

/* ---- the mock cluster ------------------------------------------------------------ */

static it_kmock g_mk;

/* Starts kafka_mock with 3 brokers and topic ord:3; fails the test when it
 * does not print its bootstrap line. */
static void mock_start(void)
{
    it_kmock_start(&g_mk, (const char *const[]){"--brokers", "3", "--topic", "ord:3", NULL});
}

#define mock_cmd(...) it_kmock_cmd(&g_mk, __VA_ARGS__)

static int setup(void **state)
{
    mock_start();
    return it_setup(state);
}

static int teardown(void **state)
{
    it_kmock_stop(&g_mk);
    return it_teardown(state);
}

/* ---- reading back ---------------------------------------------------------------- */

typedef struct krec {
    int part;
    int64_t off, ts;
    char *key;   /* NULL: no key */
    char *value; /* NUL-terminated copy */
    size_t vlen;
    char *hdrs; /* "name=value\n" lines in record order */
} krec;

typedef struct krecs {
    krec *v;
    size_t n, cap;
} krecs;

static void krecs_free(krecs *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].key);
        free(r->v[i].value);
        free(r->v[i].hdrs);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

static char *dupn(const void *p, size_t n)
{
    char *s = malloc(n + 1);
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Every record of topic from the beginning, read with a librdkafka consumer
 * (assign, not a group) up to the end of each partition. Never asserts;
 * false when the topic is not there (yet). */
static bool consume_once(const char *topic, krecs *out)
{
    char es[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", g_mk.boot, es, sizeof es);
    rd_kafka_conf_set(conf, "group.id", "itest", es, sizeof es);
    rd_kafka_conf_set(conf, "enable.partition.eof", "true", es, sizeof es);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", es, sizeof es);
    rd_kafka_conf_set(conf, "log_level", "0", es, sizeof es);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
    if (!rk)
        return false;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    bool ok = false;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0) {
        int np = md->topics[0].partition_cnt, eof = 0;
        rd_kafka_topic_partition_list_t *pl = rd_kafka_topic_partition_list_new(np);
        for (int p = 0; p < np; p++)
            rd_kafka_topic_partition_list_add(pl, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        rd_kafka_assign(rk, pl);
        rd_kafka_topic_partition_list_destroy(pl);
        double end = it_mono() + 15;
        while (eof < np && it_mono() < end) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
            if (!m)
                continue;
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                eof++;
            } else if (!m->err) {
                if (out->n == out->cap) {
                    out->cap = out->cap ? out->cap * 2 : 64;
                    out->v = realloc(out->v, out->cap * sizeof *out->v);
                }
                krec *r = &out->v[out->n++];
                memset(r, 0, sizeof *r);
                r->part = m->partition;
                r->off = m->offset;
                r->ts = rd_kafka_message_timestamp(m, NULL);
                r->key = m->key ? dupn(m->key, m->key_len) : NULL;
                r->value = dupn(m->payload ? m->payload : "", m->payload ? m->len : 0);
                r->vlen = m->payload ? m->len : 0;
                sl_buf h = SL_BUF_INIT;
                rd_kafka_headers_t *hs = NULL;
                if (!rd_kafka_message_headers(m, &hs)) {
                    const char *name;
                    const void *val;
                    size_t vl;
                    for (size_t k = 0; !rd_kafka_header_get_all(hs, k, &name, &val, &vl); k++)
                        sl_buf_printf(&h, "%s=%.*s\n", name, (int)vl, val ? (const char *)val : "");
                }
                sl_buf_append(&h, "", 1);
                r->hdrs = (char *)h.data;
            }
            rd_kafka_message_destroy(m);
        }
        ok = eof == np;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return ok;
}

/* The records of topic once it holds at least want; fails the test when it
 * does not within WAIT_S. Caller frees with krecs_free(). */
static krecs consume(const char *topic, size_t want)
{
    krecs r = {0};
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(200)) {
        krecs_free(&r);
        if (consume_once(topic, &r) && r.n >= want)
            return r;
    }
    fail_msg("topic %s holds %zu records, want %zu", topic, r.n, want);
    return r;
}

/* The value of record header name, or NULL (buf holds it). */
static const char *hdr(const krec *r, const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name);
    for (const char *p = r->hdrs; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == '=') {
            const char *v = p + n + 1, *e = strchr(v, '\n');
            snprintf(buf, cap, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return buf;
        }
    }
    return NULL;
}

static void expect_hdr(const krec *r, const char *name, const char *want)
{
    char buf[1024];
    const char *v = hdr(r, name, buf, sizeof buf);
    if (!v || strcmp(v, want))
        fail_msg("record %d/%lld: header %s is \"%s\", want \"%s\"; headers:\n%s", r->part,
                 (long long)r->off, name, v ? v : "(none)", want, r->hdrs);
}

/* What kcat prints for topic with -f FMT. Caller frees. */
static char *kcat(const char *topic, const char *fmt)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "timeout 30 kcat -C -b '%s' -t '%s' -o beginning -e -q -f '%s' 2>/dev/null", g_mk.boot,
             topic, fmt);
    FILE *p = popen(cmd, "r");
    if (!p)
        fail_msg("cannot run kcat: %s", strerror(errno));
    sl_buf b = SL_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0)
        sl_buf_append(&b, chunk, n);
    sl_buf_append(&b, "", 1);
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("kcat failed (is it installed?): %s", cmd);
    return (char *)b.data;
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ---- the server ------------------------------------------------------------------ */

/* Whether rule's first target reports itself healthy in GET /v1/rules;
 * reason gets what it says when not. */
static bool healthy(it_server *s, const char *rule, char *reason, size_t cap)
{
    json_t *st = it_rule(s, rule);
    json_t *h = json_array_get(json_object_get(st, "health"), 0);
    bool ok = !json_is_false(json_object_get(h, "healthy"));
    const char *why = json_string_value(json_object_get(h, "reason"));
    snprintf(reason, cap, "%s", why ? why : "");
    json_decref(st);
    return ok;
}

/* ---- tests ----------------------------------------------------------------------- */

/* Binary mode (the default): the value is the event's data (JSON text, a
 * text string, decoded base64), content-type is datacontenttype, every other
 * attribute a ce_* header (no sluice* read-back members), the key is
 * partitionkey, the timestamp the event's time, the topic from a template,
 * and lane events carry a lane header. kcat reads the same. */
static void test_binary(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 2 }\n"
                    "rule \"bin\" { set = \"in\", target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"bin-{type}\", properties = { [\"linger.ms\"] = 1 } } }\n",
                    g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 10; i++)
        sl_buf_printf(
            &b,
            "{\"specversion\":\"1.0\",\"id\":\"b%d\",\"source\":\"/shop\",\"type\":\"%s\","
            "\"time\":\"2026-01-02T03:04:05.%03dZ\",\"partitionkey\":\"k%d\","
            "\"subject\":\"caf\xc3\xa9 %d\",\"region\":\"eu\",\"count\":%d,"
            "\"data\":{\"n\":%d}}\n",
            i, i % 2 ? "refund" : "order", i, i % 3, i, i, i);
    sl_buf_printf(&b,
                  "{\"specversion\":\"1.0\",\"id\":\"b10\",\"source\":\"/shop\",\"type\":"
                  "\"order\",\"datacontenttype\":\"text/plain\",\"data\":\"hello \\\"w\\\"\"}\n");
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"b11\",\"source\":\"/shop\",\"type\":"
                      "\"order\",\"datacontenttype\":\"application/octet-stream\","
                      "\"data_base64\":\"aGk+\"}\n");
    json_decref(it_post_all(s, "in", NULL, &b, 12));
    b.len = 0;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"l0\",\"source\":\"/shop\",\"type\":"
                      "\"order\",\"partitionkey\":\"k0\",\"data\":{\"lane\":1}}\n");
    const char *lane_hdr[] = {"X-Sluice-Lane: beta", NULL};
    json_decref(it_post_all(s, "in", lane_hdr, &b, 1));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);

    krecs ord = consume("bin-order", 8), ref = consume("bin-refund", 5);
    assert_int_equal(ord.n, 8);
    assert_int_equal(ref.n, 5);
    struct tm tm = {
        .tm_year = 126, .tm_mon = 0, .tm_mday = 2, .tm_hour = 3, .tm_min = 4, .tm_sec = 5};
    int64_t t0 = (int64_t)timegm(&tm) * 1000;
    bool seen[13] = {false};
    for (int pass = 0; pass < 2; pass++) {
        krecs *rs = pass ? &ref : &ord;
        for (size_t k = 0; k < rs->n; k++) {
            krec *r = &rs->v[k];
            char id[64], buf[256];
            if (!hdr(r, "ce_id", id, sizeof id))
                fail_msg("a record without ce_id: %s", r->hdrs);
            expect_hdr(r, "ce_specversion", "1.0");
            expect_hdr(r, "ce_source", "/shop");
            expect_hdr(r, "ce_type", pass ? "refund" : "order");
            if (hdr(r, "ce_data", buf, sizeof buf) || hdr(r, "ce_datacontenttype", buf, sizeof buf))
                fail_msg("record %s: headers it should not have:\n%s", id, r->hdrs);
            /* Where the event sits in sluice, as structured mode's JSON says. */
            expect_hdr(r, "ce_sluiceset", "in");
            char part[32], off[32];
            if (!hdr(r, "ce_sluicepartition", part, sizeof part) ||
                (strcmp(part, "0") && strcmp(part, "1")) ||
                !hdr(r, "ce_sluiceoffset", off, sizeof off) || !off[0] ||
                strspn(off, "0123456789") != strlen(off))
                fail_msg("record %s: no ce_sluicepartition / ce_sluiceoffset:\n%s", id, r->hdrs);
            if (strcmp(id, "b10") == 0) {
                seen[10] = true;
                expect_hdr(r, "content-type", "text/plain");
                assert_string_equal(r->value, "hello \"w\"");
                assert_null(r->key);
            } else if (strcmp(id, "b11") == 0) {
                seen[11] = true;
                expect_hdr(r, "content-type", "application/octet-stream");
                assert_string_equal(r->value, "hi>");
            } else if (strcmp(id, "l0") == 0) {
                seen[12] = true;
                expect_hdr(r, "lane", "beta");
                expect_hdr(r, "ce_lane", "beta");
                assert_string_equal(r->key, "k0");
                assert_string_equal(r->value, "{\"lane\":1}");
            } else {
                int i = atoi(id + 1);
                assert_true(i >= 0 && i < 10 && !seen[i]);
                seen[i] = true;
                char want[64];
                snprintf(want, sizeof want, "{\"n\":%d}", i);
                assert_string_equal(r->value, want);
                expect_hdr(r, "content-type", "application/json");
                snprintf(want, sizeof want, "caf\xc3\xa9 %d", i); /* UTF-8, not percent-encoded */
                expect_hdr(r, "ce_subject", want);
                expect_hdr(r, "ce_region", "eu");
                snprintf(want, sizeof want, "%d", i);
                expect_hdr(r, "ce_count", want);
                snprintf(want, sizeof want, "k%d", i % 3);
                expect_hdr(r, "ce_partitionkey", want);
                if (!r->key || strcmp(r->key, want))
                    fail_msg("record %s: key %s, want %s (partitionkey)", id,
                             r->key ? r->key : "(none)", want);
                if (r->ts != t0 + i)
                    fail_msg("record %s: timestamp %lld, want the event's time %lld", id,
                             (long long)r->ts, (long long)(t0 + i));
                if (hdr(r, "lane", buf, sizeof buf))
                    fail_msg("record %s: a base-lane event with a lane header", id);
            }
        }
    }
    for (int i = 0; i < 13; i++)
        if (!seen[i])
            fail_msg("event %d was not read back", i);
    krecs_free(&ord);
    krecs_free(&ref);

    /* kcat sees the same: ids in ce_id headers, data as the value. */
    char *out = kcat("bin-order", "%k\\t%h\\t%s\\n");
    if (count_of(out, "ce_id=b") != 7 || count_of(out, "ce_id=l0") != 1 ||
        count_of(out, "ce_sluiceset=in") != 8 || !strstr(out, "ce_id=b11") ||
        !strstr(out, "\t{\"n\":4}\n") || !strstr(out, "k1\t"))
        fail_msg("kcat reads back:\n%s", out);
    free(out);
    json_t *st = it_rule(s, "bin");
    assert_int_equal(it_rule_int(st, "delivered"), 13);
    assert_int_equal(it_rule_int(st, "failed"), 0);
    json_decref(st);
    s->passed = true;
}

/* The ce_sluice* headers come from the decorated event's tail, and from
 * anywhere in a transform's output (whose members may come in any order);
 * data that merely contains the text of such a tail changes nothing. */
static void test_sluice_headers(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "rule \"plain\" { set = \"in\", target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"sh-plain\", properties = { [\"linger.ms\"] = 1 } } }\n"
                    "rule \"tf\" { set = \"in\",\n"
                    "  transform = function(e) e.data.t = true; e.zz = \"last\"; return e end,\n"
                    "  target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"sh-tf\", properties = { [\"linger.ms\"] = 1 } } }\n",
                    g_mk.boot, g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 4; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"h%d\",\"source\":\"/s\",\"type\":\"t\","
                      "\"data\":{\"s\":\",\\\"sluiceset\\\":\\\"fake\\\",\\\"sluicepartition\\\":7,"
                      "\\\"sluiceoffset\\\":9}\"}}\n",
                      i);
    json_decref(it_post_all(s, "in", NULL, &b, 4));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    for (int pass = 0; pass < 2; pass++) {
        krecs rs = consume(pass ? "sh-tf" : "sh-plain", 4);
        assert_int_equal(rs.n, 4);
        for (size_t k = 0; k < rs.n; k++) {
            krec *r = &rs.v[k];
            char id[16], want[16];
            if (!hdr(r, "ce_id", id, sizeof id))
                fail_msg("a record without ce_id: %s", r->hdrs);
            expect_hdr(r, "ce_sluiceset", "in");
            expect_hdr(r, "ce_sluicepartition", "0");
            snprintf(want, sizeof want, "%d", atoi(id + 1));
            expect_hdr(r, "ce_sluiceoffset", want);
            if (count_of(r->hdrs, "ce_sluiceset=") != 1)
                fail_msg("record %s: ce_sluiceset more than once:\n%s", id, r->hdrs);
            if (pass)
                expect_hdr(r, "ce_zz", "last");
            if (!strstr(r->value, "sluiceset\\\":\\\"fake"))
                fail_msg("record %s: the data changed: %s", id, r->value);
        }
        krecs_free(&rs);
    }
    s->passed = true;
}

/* Structured mode (the event JSON, content-type application/cloudevents+json)
 * with a key template and a configured header; data mode (the payload alone,
 * no ce_* headers) with its key from subject. */
static void test_structured_and_data(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 2 }\n"
        "rule \"st\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
        "\"st\",\n"
        "  body = \"structured\", key = \"{subject}/{type}\", headers = { [\"X-Origin\"] = "
        "\"sluice\" },\n"
        "  properties = { [\"linger.ms\"] = 1 } } }\n"
        "rule \"dm\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
        "\"dm\",\n"
        "  body = \"data\", compression = \"gzip\" } }\n",
        g_mk.boot, g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 6; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"s%d\",\"source\":\"/shop\",\"type\":\"t\","
                      "\"subject\":\"sub%d\",\"data\":{\"n\":%d}}\n",
                      i, i, i);
    json_decref(it_post_all(s, "in", NULL, &b, 6));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    for (int pass = 0; pass < 2; pass++) {
        krecs rs = consume(pass ? "dm" : "st", 6);
        assert_int_equal(rs.n, 6);
        for (size_t k = 0; k < rs.n; k++) {
            krec *r = &rs.v[k];
            json_t *j = json_loads(r->value, 0, NULL);
            const char *id = json_string_value(json_object_get(j, "id"));
            if (!id || id[0] != 's')
                fail_msg("the value is not the event: %s", r->value);
            char want[64], buf[64];
            if (pass == 0) {
                expect_hdr(r, "content-type", "application/cloudevents+json");
                /* The read-back members, which binary mode sends as ce_sluice* headers. */
                if (strcmp(json_string_value(json_object_get(j, "sluiceset")), "in") ||
                    !json_is_integer(json_object_get(j, "sluicepartition")) ||
                    !json_is_integer(json_object_get(j, "sluiceoffset")))
                    fail_msg("structured: no sluiceset/partition/offset in %s", r->value);
                expect_hdr(r, "X-Origin", "sluice");
                snprintf(want, sizeof want, "sub%s/t", id + 1);
            } else {
                if (hdr(r, "content-type", buf, sizeof buf))
                    fail_msg("data mode: a content-type header: %s", r->hdrs);
                snprintf(want, sizeof want, "sub%s", id + 1);
            }
            if (strstr(r->hdrs, "ce_"))
                fail_msg("ce_* headers outside binary mode: %s", r->hdrs);
            if (!r->key || strcmp(r->key, want))
                fail_msg("record %s: key %s, want %s", id, r->key ? r->key : "(none)", want);
            json_decref(j);
        }
        krecs_free(&rs);
    }
    s->passed = true;
}

/* Kafka's Utils.murmur2 (Java), written here again rather than taken from
 * core/bus/databus.c, so that the test checks sluice against Kafka and not
 * against itself; the vectors of Kafka's UtilsTest check this copy. */
static int32_t java_murmur2(const char *key, size_t len)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)len;
    const unsigned char *d = (const unsigned char *)key;
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t k = d[i] | (uint32_t)d[i + 1] << 8 | (uint32_t)d[i + 2] << 16 |
                     (uint32_t)d[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = h * m ^ k;
    }
    switch (len - i) {
    case 3:
        h ^= (uint32_t)d[i + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)d[i + 1] << 8;
        /* fall through */
    case 1:
        h ^= d[i];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

/* The Java producer's partition for a key: toPositive(murmur2(key)) % n. */
static int java_partition(const char *key, int n)
{
    return (int)(((uint32_t)java_murmur2(key, strlen(key)) & 0x7fffffffu) % (uint32_t)n);
}

/* librdkafka's "consistent" partitioner: CRC32 (zlib's) of the key % n. */
static int crc32_partition(const char *key, int n)
{
    uint32_t c = 0xffffffffu;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        c ^= *p;
        for (int b = 0; b < 8; b++)
            c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return (int)((c ^ 0xffffffffu) % (uint32_t)n);
}

/* A keyed record lands on the partition a Java producer (and sluice's own
 * Databus) picks for its key, murmur2, not librdkafka's CRC32 default; a
 * rule whose properties name another partitioner gets that one. */
static void test_partitioner(void **state)
{
    static const struct {
        const char *key;
        int32_t murmur2;
    } kafka[] = {
        /* org.apache.kafka.common.utils.UtilsTest#testMurmur2 */
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    enum { NV = sizeof kafka / sizeof *kafka, NK = 60, PARTS = 16 };
    for (int i = 0; i < NV; i++)
        assert_int_equal(java_murmur2(kafka[i].key, strlen(kafka[i].key)), kafka[i].murmur2);

    it_server *s = *state;
    mock_cmd("topic pm %d", PARTS);
    mock_cmd("topic pc %d", PARTS);
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 3 }\n"
                    "rule \"pm\" { set = \"in\", target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"pm\", properties = { [\"linger.ms\"] = 1 } } }\n"
                    "rule \"pc\" { set = \"in\", target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"pc\", properties = { [\"linger.ms\"] = 1,\n"
                    "  partitioner = \"consistent\" } } }\n",
                    g_mk.boot, g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < NV + NK; i++) {
        char key[64];
        if (i < NV)
            snprintf(key, sizeof key, "%s", kafka[i].key);
        else
            snprintf(key, sizeof key, "customer-%d", i * 7919);
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"p%d\",\"source\":\"/s\",\"type\":\"t\","
                      "\"partitionkey\":\"%s\",\"data\":%d}\n",
                      i, key, i);
    }
    json_decref(it_post_all(s, "in", NULL, &b, NV + NK));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);

    int differ = 0, used[PARTS] = {0};
    for (int pass = 0; pass < 2; pass++) {
        krecs rs = consume(pass ? "pc" : "pm", NV + NK);
        assert_int_equal(rs.n, NV + NK);
        for (size_t k = 0; k < rs.n; k++) {
            krec *r = &rs.v[k];
            if (!r->key)
                fail_msg("record %d/%lld without a key", r->part, (long long)r->off);
            int want = pass ? crc32_partition(r->key, PARTS) : java_partition(r->key, PARTS);
            if (r->part != want)
                fail_msg("%s: key \"%s\" is in partition %d, want %d", pass ? "consistent" : "default",
                         r->key, r->part, want);
            if (!pass) {
                used[r->part]++;
                differ += crc32_partition(r->key, PARTS) != want;
            }
        }
        krecs_free(&rs);
    }
    /* The keys tell the two partitioners apart, and spread over the topic. */
    assert_true(differ > (NV + NK) / 2);
    int nused = 0;
    for (int p = 0; p < PARTS; p++)
        nused += used[p] > 0;
    assert_true(nused >= PARTS / 2);
    s->passed = true;
}

/* The brokers go down one after another while events keep coming, stay down
 * longer than the record timeout, then come back: every event arrives, in
 * order per key (the first copy of each), duplicates only as at-least-once
 * allows, and the rule counted retries. */
static void test_outage_order(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "lanes.auto = true\n"
        "set \"in\" { partitions = 2 }\n"
        "rule \"ord\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
        "\"ord\",\n"
        "  timeout = \"2s\", properties = { [\"linger.ms\"] = 1 } } }\n",
        g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    enum { N = 300, CHUNK = 30, KEYS = 5 };
    for (int c = 0; c < N / CHUNK; c++) {
        if (c == 2)
            mock_cmd("down 1");
        if (c == 3)
            mock_cmd("down 2");
        if (c == 4)
            mock_cmd("down 3");
        if (c == 7) {
            /* all down for longer than the 2 s timeout, and the target says so */
            char why[SL_ERROR_MAX] = "";
            double end = it_mono() + WAIT_S;
            while (healthy(s, "ord", why, sizeof why) && it_mono() < end)
                it_sleep_ms(100);
            if (!strstr(why, "all brokers are down"))
                fail_msg("with every broker down the target's health says \"%s\"", why);
            it_sleep_ms(3000);
            mock_cmd("up 1");
            mock_cmd("up 2");
            mock_cmd("up 3");
        }
        sl_buf b = SL_BUF_INIT;
        for (int i = c * CHUNK; i < (c + 1) * CHUNK; i++)
            sl_buf_printf(
                &b,
                "{\"specversion\":\"1.0\",\"id\":\"o%d\",\"source\":\"/s\",\"type\":\"t\","
                "\"partitionkey\":\"k%d\",\"data\":{\"i\":%d}}\n",
                i, i % KEYS, i);
        json_decref(it_post_all(s, "in", NULL, &b, CHUNK));
        sl_buf_free(&b);
        it_sleep_ms(300);
    }
    it_wait_caught_up(s, 90);
    char why[SL_ERROR_MAX];
    if (!healthy(s, "ord", why, sizeof why))
        fail_msg("the brokers are back, but the target's health says \"%s\"", why);
    krecs rs = consume("ord", N);
    static int copies[N];
    memset(copies, 0, sizeof copies);
    int last[KEYS];
    for (int k = 0; k < KEYS; k++)
        last[k] = -1;
    /* Records of one key are in one partition; read them in offset order. */
    for (int p = 0; p < 3; p++) {
        for (size_t k = 0; k < rs.n; k++) {
            krec *r = &rs.v[k];
            if (r->part != p)
                continue;
            json_t *j = json_loads(r->value, 0, NULL);
            int i = (int)json_integer_value(json_object_get(j, "i"));
            json_decref(j);
            assert_true(i >= 0 && i < N);
            if (copies[i]++)
                continue;
            int key = i % KEYS;
            if (i < last[key])
                fail_msg("key k%d: event %d arrived (first) after event %d", key, i, last[key]);
            last[key] = i;
        }
    }
    int lost = 0, dups = 0;
    for (int i = 0; i < N; i++) {
        lost += copies[i] == 0;
        dups += copies[i] > 1 ? copies[i] - 1 : 0;
    }
    json_t *st = it_rule(s, "ord");
    print_message("outage: %d events, %zu records, %d duplicates, %lld retries\n", N, rs.n, dups,
                  (long long)it_rule_int(st, "retries"));
    if (lost)
        fail_msg("%d events lost across the outage", lost);
    if (it_rule_int(st, "retries") < 1 || it_rule_int(st, "failed") != 0 ||
        it_rule_int(st, "delivered") < N)
        it_fail_rule(st, "want retries >= 1, failed 0, delivered >= %d", N);
    json_decref(st);
    krecs_free(&rs);
    s->passed = true;
}

/* What no retry can fix is counted failed at once and the rule goes on: a
 * topic or key template naming an attribute the event lacks, a topic name
 * Kafka refuses, a record over message.max.bytes. */
static void test_permanent(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "rule \"perm\" { set = \"in\", target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"p-{region}\", properties = { [\"message.max.bytes\"] = 10000,\n"
                    "  [\"linger.ms\"] = 1 } } }\n"
                    "rule \"pkey\" { set = \"in\", target = target.kafka { brokers = \"%s\",\n"
                    "  topic = \"pk\", key = \"{tenant}\" } }\n",
                    g_mk.boot, g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    const char *ev = "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/s\",\"type\":\"t\"%s,"
                     "\"data\":\"%s\"}\n";
    char *big = malloc(20001);
    memset(big, 'x', 20000);
    big[20000] = '\0';
    /* One at a time: the rule reports the first reason of a batch. */
    const struct {
        const char *id, *attrs, *data, *why; /* why: the perm rule's last_error */
    } evs[] = {
        {"ok1", ",\"region\":\"eu\",\"tenant\":\"a\"", "", NULL},
        {"noregion", ",\"tenant\":\"a\"", "", "needs the attribute \"region\""},
        {"badtopic", ",\"region\":\"e u\",\"tenant\":\"a\"", "", "not a valid topic name"},
        {"big", ",\"region\":\"eu\"", big, "too large"},
        {"ok2", ",\"region\":\"eu\",\"tenant\":\"a\"", "", NULL},
    };
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++) {
        sl_buf b = SL_BUF_INIT;
        sl_buf_printf(&b, ev, evs[i].id, evs[i].attrs, evs[i].data);
        json_decref(it_post_all(s, "in", NULL, &b, 1));
        sl_buf_free(&b);
        it_wait_caught_up(s, WAIT_S);
        json_t *st = it_rule(s, "perm");
        const char *le = json_string_value(json_object_get(st, "last_error"));
        if (evs[i].why && (!le || !strstr(le, evs[i].why)))
            fail_msg("event %s: last_error does not say %s: %s", evs[i].id, evs[i].why,
                     le ? le : "(none)");
        json_decref(st);
    }
    free(big);
    json_t *st = it_rule(s, "perm");
    if (it_rule_int(st, "failed") != 3 || it_rule_int(st, "delivered") != 2 ||
        it_rule_int(st, "retries"))
        it_fail_rule(st, "perm: want failed 3, delivered 2, retries 0");
    json_decref(st);
    st = it_rule(s, "pkey");
    if (it_rule_int(st, "failed") != 1 || it_rule_int(st, "delivered") != 4)
        it_fail_rule(st, "pkey: want failed 1, delivered 4");
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (!le || !strstr(le, "\"tenant\""))
        fail_msg("pkey: last_error does not name the attribute: %s", le ? le : "(none)");
    json_decref(st);
    krecs rs = consume("p-eu", 2);
    assert_int_equal(rs.n, 2);
    krecs_free(&rs);
    s->passed = true;
}

/* SIGTERM while every broker is down and records wait: the server exits
 * cleanly within the cancel grace (not the 30 s record timeout), and after
 * a restart with the brokers back every event arrives. */
static void test_shutdown_brokers_down(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "rule \"sd\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
                    "\"sd\" } }\n",
                    g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    mock_cmd("down 1");
    mock_cmd("down 2");
    mock_cmd("down 3");
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 20; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"d%d\",\"source\":\"/s\",\"type\":\"t\","
                      "\"data\":%d}\n",
                      i, i);
    json_decref(it_post_all(s, "in", NULL, &b, 20));
    sl_buf_free(&b);
    it_sleep_ms(1000);
    double t0 = it_mono();
    int st = it_srv_stop(s, SIGTERM, 20);
    double took = it_mono() - t0;
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || took > 6)
        fail_msg("SIGTERM with every broker down: wait status %d after %.1f s (want < 6 s)", st,
                 took);
    mock_cmd("up 1");
    mock_cmd("up 2");
    mock_cmd("up 3");
    it_srv_restart(s);
    it_wait_caught_up(s, WAIT_S);
    krecs rs = consume("sd", 20);
    bool seen[20] = {false};
    for (size_t k = 0; k < rs.n; k++)
        seen[atoi(rs.v[k].value)] = true;
    for (int i = 0; i < 20; i++)
        if (!seen[i])
            fail_msg("event d%d was lost across the shutdown", i);
    krecs_free(&rs);
    s->passed = true;
}

/* A topic the cluster says does not exist: retried (it may be created),
 * and delivered once it exists, without waiting for librdkafka's periodic
 * metadata refresh. */
static void test_unknown_topic(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    mock_cmd("topicerror later 3"); /* UNKNOWN_TOPIC_OR_PART */
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "rule \"un\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
                    "\"later\",\n"
                    "  properties = { [\"topic.metadata.propagation.max.ms\"] = 1000 } } }\n",
                    g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 3; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"u%d\",\"source\":\"/s\",\"type\":\"t\","
                      "\"data\":%d}\n",
                      i, i);
    json_decref(it_post_all(s, "in", NULL, &b, 3));
    sl_buf_free(&b);
    const char *le = NULL;
    json_t *st = NULL;
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(100)) {
        json_decref(st);
        st = it_rule(s, "un");
        le = json_string_value(json_object_get(st, "last_error"));
        if (le && strstr(le, "may yet be created"))
            break;
    }
    if (!le || !strstr(le, "topic later") || !strstr(le, "may yet be created") ||
        it_rule_int(st, "failed") || it_rule_int(st, "delivered"))
        it_fail_rule(st, "an unknown topic: want a retryable error naming it");
    json_decref(st);
    mock_cmd("topicerror later 0"); /* now the cluster creates it when asked */
    it_wait_caught_up(s, WAIT_S);
    krecs rs = consume("later", 3);
    assert_int_equal(rs.n, 3);
    krecs_free(&rs);
    st = it_rule(s, "un");
    if (it_rule_int(st, "delivered") != 3 || it_rule_int(st, "failed") != 0 ||
        it_rule_int(st, "retries") < 1)
        it_fail_rule(st, "want delivered 3, failed 0, retries >= 1");
    json_decref(st);
    s->passed = true;
}

/* An idempotent-producer fatal error (the broker refuses the producer id):
 * the next batch makes a new producer, logged once, and everything is
 * delivered; nothing is counted failed. */
static void test_fatal_recreate(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "rule \"fa\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
                    "\"fa\",\n"
                    "  properties = { [\"linger.ms\"] = 1 } } }\n",
                    g_mk.boot);
    mock_cmd("error initproducerid 31 1"); /* CLUSTER_AUTHORIZATION_FAILED: fatal */
    it_start_config(s, cfg, WAIT_S);
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(50))
        if (it_log_contains(s, "fatal producer error"))
            break;
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 5; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"f%d\",\"source\":\"/s\",\"type\":\"t\","
                      "\"data\":%d}\n",
                      i, i);
    json_decref(it_post_all(s, "in", NULL, &b, 5));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    if (!it_log_contains(s, "fatal producer error") ||
        !it_log_contains(s, "made a new producer after a fatal error"))
        fail_msg("the log does not tell of the fatal error and the new producer");
    krecs rs = consume("fa", 5);
    assert_int_equal(rs.n, 5);
    krecs_free(&rs);
    json_t *st = it_rule(s, "fa");
    if (it_rule_int(st, "delivered") != 5 || it_rule_int(st, "failed") != 0)
        it_fail_rule(st, "want delivered 5, failed 0");
    char why[SL_ERROR_MAX];
    if (!healthy(s, "fa", why, sizeof why))
        fail_msg("the new producer works, but the target's health says \"%s\"", why);
    json_decref(st);
    s->passed = true;
}

/* Runs `bin/sluice check FILE`; its stdout and stderr go to *out (caller
 * frees). Returns the exit status, or -1 when it did not exit normally. */
static int run_check(const it_server *s, const char *cfg, char **out)
{
    return it_run(s, NULL, out, NULL, (const char *const[]){"check", cfg, NULL}, WAIT_S);
}

/* `sluice check` refuses what librdkafka refuses, and bad templates, each
 * with FILE:LINE; property conflicts only rd_kafka_new() finds are among
 * them, and a sensitive property's value is never quoted. */
static void test_check(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(
        s, cfg,
        "set \"in\" { }\n"
        "rule \"a\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = \"t\",\n"
        "  properties = { [\"no.such.property\"] = 1 } } }\n"
        "rule \"b\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = \"t\", "
        "compression = \"brotli\" } }\n"
        "rule \"c\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = "
        "\"t-{type\" } }\n"
        "rule \"d\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = "
        "\"a b\" } }\n"
        "rule \"e\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = "
        "\"t\", properties = { [\"linger.ms\"] = \"soon\" } } }\n"
        "rule \"f\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = \"t\",\n"
        "  properties = { [\"max.in.flight.requests.per.connection\"] = 100 } } }\n"
        "rule \"g\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = \"t\",\n"
        "  properties = { [\"enable.sasl.oauthbearer.unsecure.jwt\"] = \"hunter2-secret\",\n"
        "                 [\"sasl.passwordx\"] = \"hunter3-secret\" } } }\n");
    char *o;
    int rc = run_check(s, cfg, &o);
    if (rc <= 0)
        fail_msg("sluice check accepted it:\n%s", o);
    char want[PATH_MAX + 64];
    const struct {
        int line;
        const char *text;
    } w[] = {{2, "no.such.property"},
             {4, "brotli"},
             {5, "t-{type"},
             {6, "a b"},
             {7, "linger.ms"},
             {8, "`max.in.flight` must be set <= 5 when `enable.idempotence` is true"},
             {10, "enable.sasl.oauthbearer.unsecure.jwt: invalid value"},
             {10, "sasl.passwordx: no such property"}};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        snprintf(want, sizeof want, "%s:%d: ", cfg, w[i].line);
        const char *at = strstr(o, want);
        const char *eol = at ? strchr(at, '\n') : NULL;
        if (!at || !strstr(at, w[i].text) || (eol && strstr(at, w[i].text) > eol))
            fail_msg("sluice check does not report %s at line %d:\n%s", w[i].text, w[i].line, o);
    }
    if (strstr(o, "hunter") || strstr(o, "%4|") || strstr(o, "%3|"))
        fail_msg("sluice check quotes a secret or prints librdkafka's log:\n%s", o);
    free(o);

    /* Turning idempotence off is the user's call: accepted, silently. */
    it_write_config(
        s, cfg,
        "set \"in\" { }\n"
        "rule \"a\" { set = \"in\", target = target.kafka { brokers = \"h:1\", topic = \"t\",\n"
        "  properties = { [\"enable.idempotence\"] = false, acks = 1 } } }\n");
    char *o2;
    rc = run_check(s, cfg, &o2);
    if (rc != 0 || strstr(o2, "%") || strstr(o2, "rdkafka"))
        fail_msg("sluice check on enable.idempotence = false, acks = 1:\n%s", o2);
    free(o2);
    s->passed = true;
}

/* ordered = true: a record that cannot be queued (a topic the producer knows
 * is missing) keeps its retryable failure, and the later records of its
 * call, never produced, use up no attempt: with retry attempts = 1 they are
 * delivered on the retry instead of going to the dead letters. */
static void test_ordered_hold(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    mock_cmd("topicerror h-gone 3"); /* UNKNOWN_TOPIC_OR_PART */
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "set \"dead\" { partitions = 1 }\n"
                    "rule \"ho\" { set = \"in\", ordered = true, dlq = \"dead\",\n"
                    "  retry = { attempts = 1, initial = \"100ms\", max = \"200ms\" },\n"
                    "  target = target.kafka { brokers = \"%s\", topic = \"h-{region}\",\n"
                    "  properties = { [\"topic.metadata.propagation.max.ms\"] = 1000,\n"
                    "  [\"linger.ms\"] = 1 } } }\n",
                    g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    const char *ev = "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/s\",\"type\":\"t\","
                     "\"region\":\"%s\",\"data\":1}\n";
    /* First the producer learns that h-gone does not exist. */
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, ev, "g0", "gone");
    json_decref(it_post_all(s, "in", NULL, &b, 1));
    it_wait_caught_up(s, WAIT_S);
    /* Then one call: g1 cannot be queued, a1 and a2 are held behind it. */
    b.len = 0;
    sl_buf_printf(&b, ev, "g1", "gone");
    sl_buf_printf(&b, ev, "a1", "ok");
    sl_buf_printf(&b, ev, "a2", "ok");
    json_decref(it_post_all(s, "in", NULL, &b, 3));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    krecs rs = consume("h-ok", 2);
    assert_int_equal(rs.n, 2);
    krecs_free(&rs);
    json_t *st = it_rule(s, "ho");
    if (it_rule_int(st, "failed") != 2 || it_rule_int(st, "delivered") != 2)
        it_fail_rule(st, "want failed 2 (g0, g1), delivered 2 (a1, a2)");
    /* "Local: Unknown topic": g1 was refused when produced (not by a delivery
     * report), so a1 and a2 were held behind it, never produced. */
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (!it_log_contains(s, "Local: Unknown topic") && !(le && strstr(le, "Local: Unknown topic")))
        fail_msg("g1 was not refused when produced (last_error %s)", le ? le : "(none)");
    json_decref(st);
    s->passed = true;
}

/* A timestamp the broker refuses (INVALID_TIMESTAMP) is permanent: dead
 * at once, and the reason names the event's time. */
static void test_invalid_timestamp(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "rule \"ts\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
                    "\"ts\",\n"
                    "  properties = { [\"linger.ms\"] = 1 } } }\n",
                    g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"w0\",\"source\":\"/s\",\"type\":\"t\","
                      "\"time\":\"2026-01-02T03:04:05.678Z\",\"data\":1}\n");
    json_decref(it_post_all(s, "in", NULL, &b, 1)); /* the producer is up and running */
    it_wait_caught_up(s, WAIT_S);
    mock_cmd("error produce 32 1"); /* INVALID_TIMESTAMP */
    b.len = 0;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"w1\",\"source\":\"/s\",\"type\":\"t\","
                      "\"time\":\"2001-02-03T04:05:06.789Z\",\"data\":2}\n");
    json_decref(it_post_all(s, "in", NULL, &b, 1));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    json_t *st = it_rule(s, "ts");
    const char *le = json_string_value(json_object_get(st, "last_error"));
    if (it_rule_int(st, "failed") != 1 || it_rule_int(st, "delivered") != 1 ||
        it_rule_int(st, "retries") || !le || !strstr(le, "2001-02-03T04:05:06.789Z"))
        it_fail_rule(st, "want failed 1 naming the event's time, delivered 1, no retries");
    json_decref(st);
    s->passed = true;
}

/* Every broker goes down while nothing is being sent: the target says so,
 * and once they are back it is healthy again without a record to prove it. */
static void test_health_back(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], why[SL_ERROR_MAX] = "";
    it_write_config(s, cfg,
                    "lanes.auto = true\n"
                    "set \"in\" { partitions = 1 }\n"
                    "rule \"hb\" { set = \"in\", target = target.kafka { brokers = \"%s\", topic = "
                    "\"hb\" } }\n",
                    g_mk.boot);
    it_start_config(s, cfg, WAIT_S);
    mock_cmd("down 1");
    mock_cmd("down 2");
    mock_cmd("down 3");
    double end = it_mono() + WAIT_S;
    while (healthy(s, "hb", why, sizeof why) && it_mono() < end)
        it_sleep_ms(100);
    if (!strstr(why, "all brokers are down"))
        fail_msg("with every broker down the target's health says \"%s\"", why);
    mock_cmd("up 1");
    mock_cmd("up 2");
    mock_cmd("up 3");
    for (end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(200))
        if (healthy(s, "hb", why, sizeof why))
            break;
    if (!healthy(s, "hb", why, sizeof why))
        fail_msg("the brokers are back, idle, but the target's health says \"%s\"", why);
    s->passed = true;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    if (it_init("test_target_kafka"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_binary),
        T(test_structured_and_data),
        T(test_partitioner),
        T(test_sluice_headers),
        T(test_permanent),
        T(test_check),
        T(test_shutdown_brokers_down),
        T(test_fatal_recreate),
        T(test_unknown_topic),
        T(test_outage_order),
        T(test_ordered_hold),
        T(test_invalid_timestamp),
        T(test_health_back),
    };
    /* ITEST_ONLY=NAME (a cmocka pattern, e.g. test_partitioner) runs those alone. */
    if (getenv("ITEST_ONLY"))
        cmocka_set_test_filter(getenv("ITEST_ONLY"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
