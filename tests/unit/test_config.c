/*
 * tests/unit/test_config.c — the Lua config loader (server/config.h): every
 * key kind, every mistake reported with FILE:LINE, all mistakes at once,
 * paths relative to the file, and the rule cursors (core/bus/cursor.h).
 */
#include "testutil.h"

#include "server/config.h"
#include "connectors/source_file.h"
#include "connectors/source_kafka.h"
#include "connectors/source_webhook.h"
#include "connectors/target_file.h"
#include "connectors/target_http.h"
#include "connectors/target_kafka.h"
#include "connectors/target_set.h"
#include "core/base/buf.h"
#include "core/bus/cursor.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fixture {
    char *dir;
    char path[512];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    snprintf(f->path, sizeof f->path, "%s/sluice.lua", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Loads text; returns the code and the diagnostics (caller frees). */
static int load(fixture *f, const char *text, sl_config **cfg, char **diag)
{
    write_file(f->path, text);
    sl_buf d = SL_BUF_INIT;
    int rc = sl_config_load(f->path, cfg, &d);
    sl_buf_append(&d, "", 1);
    *diag = (char *)d.data;
    return rc;
}

/* Asserts that loading text fails with a diagnostic "sluice.lua:LINE: …"
 * containing want. */
static void expect_mistake(fixture *f, const char *text, int line, const char *want)
{
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(f, text, &cfg, &diag);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "sluice.lua:%d:", line);
    if (rc != SL_EINVAL || !strstr(diag, prefix) || !strstr(diag, want))
        fail_msg("want %s … %s, got rc %d:\n%s", prefix, want, rc, diag);
    assert_null(cfg);
    free(diag);
}

#define GOOD_RULE_TAIL "  target = target.file { path = \"out.ndjson\" },\n}\n"

static void test_full_config(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    int rc =
        load(f,
             "server { listen = \"127.0.0.1:9999\", data_dir = \"data\", workers = 3,\n"
             "         lua_memory = \"16MiB\", lua_instructions = 50000, auto_create = false,\n"
             "         max_request = \"2MiB\", set_defaults = { partitions = 2 } }\n"
             "set \"orders\" { partitions = 8, retention = \"2d\", ack = \"buffer\",\n"
             "  compression = \"zstd\", retention_bytes = \"1GiB\", segment_bytes = 65536,\n"
             "  segment_age = \"1h\", max_event = \"64KiB\", generate_ids = true,\n"
             "  linger = \"5ms\", batch_bytes = \"256KiB\", buffer_bytes = \"4MiB\",\n"
             "  schemas = { ['order.created'] = { type = 'object', required = { 'amount' } } } }\n"
             "set \"copy\" { retention = \"forever\" }\n"
             "rule \"r1\" {\n"
             "  set = \"orders\", description = \"big ones\",\n"
             "  match = { type = { \"order.created\" } },\n"
             "  filter = function(e) return true end,\n"
             "  transform = function(e) return e end,\n"
             "  input = \"$.data\",\n"
             "  start = \"beginning\", enabled = false,\n"
             "  targets = { target.file { path = \"out/a.ndjson\", rotate_bytes = \"1MiB\", "
             "keep = 3 },\n"
             "              target.set { set = \"copy\" } },\n"
             "}\n"
             "rule \"r2\" { set = \"orders\", match = [[{\"source\": [{\"prefix\": \"/s\"}]}]],\n"
             "  transform_batch = function(es) return es end,\n"
             "  input = { paths = { who = \"$.data.who\" }, template = [[{\"w\": <who>}]] "
             "},\n" GOOD_RULE_TAIL,
             &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    assert_string_equal(cfg->listen, "127.0.0.1:9999");
    char want[600];
    snprintf(want, sizeof want, "%s/data", f->dir);
    assert_string_equal(cfg->data_dir, want);
    assert_int_equal(cfg->workers, 3);
    assert_int_equal(cfg->lua_memory, 16u << 20);
    assert_int_equal(cfg->lua_instructions, 50000);
    assert_int_equal(cfg->auto_create, 0);
    assert_int_equal(cfg->max_request_bytes, 2u << 20);
    assert_int_equal(cfg->set_defaults.partitions, 2);
    assert_int_equal(cfg->nsets, 2);
    const sl_set_decl *o = sl_config_set(cfg, "orders");
    assert_non_null(o);
    assert_int_equal(o->cfg.partitions, 8);
    assert_int_equal(o->cfg.log.retention_ms, 2 * 86400000LL);
    assert_int_equal(o->cfg.ack, SL_ACK_BUFFER);
    assert_int_equal(o->cfg.compression, SL_CODEC_ZSTD);
    assert_int_equal(o->cfg.log.retention_bytes, 1LL << 30);
    assert_int_equal(o->cfg.log.segment_bytes, 65536);
    assert_int_equal(o->cfg.log.segment_ms, 3600000);
    assert_int_equal(o->cfg.max_event_bytes, 65536);
    assert_true(o->cfg.generate_ids);
    assert_int_equal(o->cfg.linger_ms, 5);
    assert_int_equal(o->cfg.batch_bytes, 256 << 10);
    assert_int_equal(o->cfg.buffer_bytes, 4u << 20);
    assert_int_equal(o->nschemas, 1);
    assert_non_null(sl_config_schema(o, "order.created", 13));
    assert_null(sl_config_schema(o, "order.other", 11));
    const sl_set_decl *c = sl_config_set(cfg, "copy");
    assert_int_equal(c->cfg.partitions, 2); /* from set_defaults */
    assert_int_equal(c->cfg.log.retention_ms, -1);
    assert_int_equal(cfg->nrules, 2);
    const sl_rule_config *r1 = sl_config_rule(cfg, "r1");
    assert_string_equal(r1->set, "orders");
    assert_string_equal(r1->description, "big ones");
    assert_non_null(r1->pattern);
    assert_string_equal(r1->match_json, "{\"type\":[\"order.created\"]}");
    assert_true(r1->filter && r1->transform && !r1->transform_batch);
    assert_non_null(r1->input);
    assert_true(r1->from_beginning);
    assert_false(r1->enabled);
    assert_int_equal(r1->ntargets, 2);
    assert_ptr_equal(r1->targets[0].ops, &sl_target_file_ops);
    const sl_target_file_conf *f0 = r1->targets[0].conf;
    snprintf(want, sizeof want, "%s/out/a.ndjson", f->dir);
    assert_string_equal(f0->path, want);
    assert_int_equal(f0->rotate_bytes, 1u << 20);
    assert_int_equal(f0->keep, 3);
    assert_ptr_equal(r1->targets[1].ops, &sl_target_set_ops);
    assert_string_equal(((const sl_target_set_conf *)r1->targets[1].conf)->set, "copy");
    const sl_rule_config *r2 = sl_config_rule(cfg, "r2");
    assert_true(r2->transform_batch && r2->enabled && !r2->from_beginning);
    assert_int_equal(((const sl_target_file_conf *)r2->targets[0].conf)->keep, 5);
    assert_null(sl_config_rule(cfg, "r3"));
    sl_config_free(cfg);
}

static void test_defaults(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    assert_int_equal(load(f, "-- nothing declared\n", &cfg, &diag), 0);
    free(diag);
    assert_null(cfg->listen);
    assert_null(cfg->data_dir);
    assert_int_equal(cfg->auto_create, -1);
    assert_int_equal(cfg->nsets + cfg->nrules, 0);
    sl_set_config d;
    sl_set_config_default(&d);
    assert_true(sl_set_config_equal(&d, &cfg->set_defaults));
    sl_config_free(cfg);
}

static void test_unknown_key_line(void **state)
{
    fixture *f = *state;
    /* the acceptance check's case: the line of the key, not of the block */
    expect_mistake(f,
                   "set \"x\" { partitions = 2 }\n\nrule \"r\" {\n  set = \"x\",\n  colour = "
                   "\"blue\",\n" GOOD_RULE_TAIL,
                   5, "unknown key \"colour\"");
    expect_mistake(f, "set \"x\" { partitons = 2 }\n", 1, "unknown key \"partitons\"");
    expect_mistake(f, "server {\n  listen = \"x\",\n  data = \"d\" }\n", 3,
                   "unknown key \"data\" (known: listen, data_dir");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.file {\n    path "
                   "= \"o\",\n    colour = 1 } }\n",
                   5, "target.file: unknown key \"colour\"");

    /* A key far below its block's first line (a long transform before it)
     * still gets its own line, and so does a top-level one. */
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "set \"x\" { }\nrule \"r\" {\n  set = \"x\",\n"
                      "  transform = function(e)\n");
    for (int i = 0; i < 3000; i++)
        sl_buf_printf(&b, "    e.data.field_%04d = \"a fairly long value to pad the line\"\n", i);
    sl_buf_printf(&b, "    return e\n  end,\n  colour = 1,\n" GOOD_RULE_TAIL);
    sl_buf_append(&b, "", 1);
    expect_mistake(f, (const char *)b.data, 3000 + 7, "unknown key \"colour\"");
    b.len = 0;
    for (int i = 0; i < 3000; i++)
        sl_buf_printf(&b, "-- %04d a comment line to move the mistake far down the file\n", i);
    sl_buf_printf(&b, "lanes = 5\n");
    sl_buf_append(&b, "", 1);
    expect_mistake(f, (const char *)b.data, 3001, "lanes");
    sl_buf_free(&b);
}

static void test_wrong_types(void **state)
{
    fixture *f = *state;
    expect_mistake(f, "set \"x\" {\n partitions = \"four\" }\n", 2,
                   "partitions must be an integer");
    expect_mistake(f, "set \"x\" { partitions = 2.5 }\n", 1, "partitions must be an integer");
    expect_mistake(f, "set \"x\" { partitions = 0 }\n", 1, "out of range (1..1024)");
    expect_mistake(f, "set \"x\" { partitions = 5000 }\n", 1, "out of range");
    expect_mistake(f, "set \"x\" { retention = \"7 days\" }\n", 1, "a duration like");
    expect_mistake(f, "set \"x\" { segment_bytes = \"12 parsecs\" }\n", 1, "a size like");
    expect_mistake(f, "set \"x\" { ack = \"sometimes\" }\n", 1, "\"durable\" or \"buffer\"");
    expect_mistake(f, "set \"x\" { compression = \"lz4\" }\n", 1, "\"none\" or \"zstd\"");
    expect_mistake(f, "set \"x\" { generate_ids = 1 }\n", 1, "must be true or false");
    expect_mistake(f, "set \"x\" { segment_age = \"forever\" }\n", 1, "a duration like");
    expect_mistake(f, "server { listen = 8080 }\n", 1, "listen must be a string, not a number");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\", filter = true,\n" GOOD_RULE_TAIL, 2,
                   "filter must be a function, not a boolean");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\", start = \"middle\",\n" GOOD_RULE_TAIL,
                   2, "\"beginning\" or \"end\"");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\", match = 42,\n" GOOD_RULE_TAIL, 2,
                   "match must be a table or a JSON string");
    expect_mistake(f, "set \"x\" { 1, 2 }\n", 1, "found a positional number");
    expect_mistake(f, "set(42) { }\n", 1, "the name must be a string");
    expect_mistake(f, "set \"x\" \"y\"\n", 1, "the body must be a table");
}

static void test_rule_mistakes(void **state)
{
    fixture *f = *state;
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  match = { a = \"b\" },\n" GOOD_RULE_TAIL, 3,
        "match:");
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  match = [[{nope]],\n" GOOD_RULE_TAIL, 3,
        "match:");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" {\n  set = \"y\",\n" GOOD_RULE_TAIL, 3,
                   "set \"y\" is not declared");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\" }\n", 2, "a target is required");
    expect_mistake(f, "rule \"r\" { target = target.file { path = \"o\" } }\n", 1,
                   "set is required");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.nope { } }\n", 3,
                   "unknown target kind target.nope");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = { path = \"o\" } }\n",
                   3, "a target must be made with target.KIND");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.file { } }\n", 3,
                   "target.file needs a path");
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.set { set = \"x\" } }\n", 3,
        "would loop forever");
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.set { set = \"z\" } }\n", 3,
        "set \"z\" is not declared");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\", transform = function() end,\n"
                   "  transform_batch = function() end,\n" GOOD_RULE_TAIL,
                   2, "not both");
    expect_mistake(f, "set \"x\" { }\nset \"x\" { }\n", 2, "declared twice");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n" GOOD_RULE_TAIL
                   "rule \"r\" { set = \"x\",\n" GOOD_RULE_TAIL,
                   5, "rule \"r\" is declared twice");
    expect_mistake(f, "set \"../etc\" { }\n", 1, "a set name is");
    expect_mistake(f, "set \".hidden\" { }\n", 1, "not beginning with .");
    expect_mistake(f, "server { max_auto_sets = 0 }\n", 1, "max_auto_sets");
    expect_mistake(f, "set \"x\" { }\nrule \"a/b\" { set = \"x\",\n" GOOD_RULE_TAIL, 2,
                   "a rule name is");
    expect_mistake(f, "server { }\nserver { }\n", 2, "server is declared twice");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n  input = { paths = { a = \"$.a\" }, "
                   "template = \"<b>\" },\n" GOOD_RULE_TAIL,
                   3, "input:");
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  input = { paths = {} },\n" GOOD_RULE_TAIL,
        3, "a template string is required");
}

static void test_http_target(void **state)
{
    fixture *f = *state;
    setenv("SLUICE_TEST_TOKEN", "s3cret", 1);
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(
        f,
        "set \"x\" { }\n"
        "rule \"r\" { set = \"x\", targets = {\n"
        "  target.http { url = \"https://h/{subject}\", method = \"PUT\",\n"
        "    headers = { [\"X-A\"] = \"1\" }, auth = { bearer = env \"SLUICE_TEST_TOKEN\" },\n"
        "    tls_verify = false, ca_file = \"/etc/ca.pem\", connect_timeout = \"2s\",\n"
        "    timeout = \"10s\", concurrency = 4, rate = 100, body = \"binary\", batch = 10 },\n"
        "  target.http { url = \"http://h/\", auth = { basic = { user = \"u\", password = \"p\" } "
        "} },\n"
        "  target.http { url = \"http://h/\", auth = { api_key = { header = \"X-Key\", value = "
        "\"k\" } } },\n"
        "} }\n",
        &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    const sl_rule_config *r = sl_config_rule(cfg, "r");
    assert_int_equal(r->ntargets, 3);
    assert_ptr_equal(r->targets[0].ops, &sl_target_http_ops);
    const sl_target_http_conf *t = r->targets[0].conf;
    assert_string_equal(t->url, "https://h/{subject}");
    assert_string_equal(t->method, "PUT");
    assert_int_equal(t->nheaders, 1);
    assert_string_equal(t->headers[0], "X-A: 1");
    assert_string_equal(t->auth.bearer, "s3cret");
    assert_false(t->tls_verify);
    assert_string_equal(t->ca_file, "/etc/ca.pem");
    assert_int_equal(t->connect_timeout_ms, 2000);
    assert_int_equal(t->timeout_ms, 10000);
    assert_int_equal(t->concurrency, 4);
    assert_int_equal(t->rate, 100);
    assert_int_equal(t->body, SL_HTTP_BODY_BINARY);
    assert_int_equal(t->batch, 10);
    t = r->targets[1].conf; /* defaults */
    assert_true(t->tls_verify);
    assert_int_equal(t->connect_timeout_ms, 5000);
    assert_int_equal(t->timeout_ms, 30000);
    assert_int_equal(t->concurrency, 8);
    assert_int_equal(t->batch, 1);
    assert_int_equal(t->body, SL_HTTP_BODY_STRUCTURED);
    assert_string_equal(t->auth.basic_user, "u");
    assert_string_equal(t->auth.basic_pass, "p");
    t = r->targets[2].conf;
    assert_string_equal(t->auth.api_key_header, "X-Key");
    assert_string_equal(t->auth.api_key, "k");
    sl_config_free(cfg);

#define HTTP_RULE(body)                                                                            \
    "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.http { " body " } }\n"
    expect_mistake(f, HTTP_RULE("method = \"POST\""), 3, "target.http needs a url");
    expect_mistake(f, HTTP_RULE("url = \"ftp://h/\""), 3, "must start with http:// or https://");
    expect_mistake(f, HTTP_RULE("url = \"http://h/\", body = \"xml\""), 3,
                   "body must be \"structured\", \"binary\" or \"data\"");
    expect_mistake(f, HTTP_RULE("url = \"http://h/\", headers = { [\"Bad Name\"] = \"v\" }"), 3,
                   "is not a header name");
    expect_mistake(f, HTTP_RULE("url = \"http://h/\", headers = { X = \"a\\r\\nEvil: 1\" }"), 3,
                   "without line breaks");
    expect_mistake(f, HTTP_RULE("url = \"http://h/\", auth = { bearer = \"a\", basic = {} }"), 3,
                   "auth takes one of");
    expect_mistake(f, HTTP_RULE("url = \"http://h/\", auth = { basic = { user = \"u\" } }"), 3,
                   "auth.basic needs password");
    expect_mistake(f, HTTP_RULE("url = \"http://h/\", concurrency = 0"), 3, "out of range");
    expect_mistake(f, HTTP_RULE("url = \"http://h/\", timeout = \"soon\""), 3, "a duration like");
#undef HTTP_RULE
}

static void test_schema_mistakes(void **state)
{
    fixture *f = *state;
    expect_mistake(f, "set \"x\" {\n  schemas = { t = \"missing.json\" } }\n", 2,
                   "schema for \"t\"");
    char schema[600];
    snprintf(schema, sizeof schema, "%s/bad.json", f->dir);
    write_file(schema, "{\"type\": \"object\", \"propertees\": {}}");
    expect_mistake(f, "set \"x\" {\n  schemas = { t = \"bad.json\" } }\n", 2, "propertees");
    expect_mistake(f, "set \"x\" {\n  schemas = { t = 42 } }\n", 2,
                   "want a file name or a schema table");
    expect_mistake(f, "server { set_defaults = { schemas = {} } }\n", 1, "unknown key \"schemas\"");
}

static void test_lua_errors(void **state)
{
    fixture *f = *state;
    expect_mistake(f, "set \"x\" { }\n\nrule \"r\" {\n  set = \n", 5, ""); /* syntax, at EOF */
    expect_mistake(f, "local t = nil\nset \"x\" { }\nprint(t.x)\n", 3, "attempt to index");
    expect_mistake(f, "io.open(\"/etc/passwd\")\n", 1, "io");
    expect_mistake(f, "while true do end\n", 1, "");
    /* tables with hostile metatables cannot crash or hang the checker */
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n  targets = setmetatable({}, "
                   "{ __len = function() error(\"boom\") end }) }\n",
                   0, "boom");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n  targets = setmetatable({}, "
                   "{ __len = function() while true do end end }) }\n",
                   0, "budget");
}

static void test_env(void **state)
{
    fixture *f = *state;
    setenv("SLUICE_TEST_DIR", "from-env", 1);
    unsetenv("SLUICE_TEST_UNSET");
    sl_config *cfg = NULL;
    char *diag;
    assert_int_equal(load(f,
                          "server { data_dir = env \"SLUICE_TEST_DIR\",\n"
                          "  listen = env(\"SLUICE_TEST_UNSET\", \"127.0.0.1:1\") }\n",
                          &cfg, &diag),
                     0);
    free(diag);
    assert_non_null(strstr(cfg->data_dir, "/from-env"));
    assert_string_equal(cfg->listen, "127.0.0.1:1");
    sl_config_free(cfg);
    expect_mistake(f, "server {\n  listen = env \"SLUICE_TEST_UNSET\" }\n", 2,
                   "environment variable SLUICE_TEST_UNSET is not set");
}

/* Every mistake of the file is reported, not only the first. */
static void test_all_mistakes_at_once(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(f,
                  "set \"x\" { partitions = 0 }\n"
                  "set \"y\" { colour = 1 }\n"
                  "rule \"r\" { set = \"nope\",\n"
                  "  target = target.nope { } }\n"
                  "server { listen = env \"SLUICE_TEST_UNSET\" }\n",
                  &cfg, &diag);
    assert_int_equal(rc, SL_EINVAL);
    assert_non_null(strstr(diag, "sluice.lua:1: set \"x\": partitions"));
    assert_non_null(strstr(diag, "sluice.lua:2: set \"y\": unknown key \"colour\""));
    assert_non_null(strstr(diag, "sluice.lua:3: rule \"r\": set \"nope\" is not declared"));
    assert_non_null(strstr(diag, "sluice.lua:4: rule \"r\": unknown target kind"));
    assert_non_null(strstr(diag, "sluice.lua:5: environment variable"));
    free(diag);
}

static void test_missing_file(void **state)
{
    fixture *f = *state;
    char path[600];
    snprintf(path, sizeof path, "%s/nope.lua", f->dir);
    sl_config *cfg = NULL;
    sl_buf d = SL_BUF_INIT;
    assert_int_equal(sl_config_load(path, &cfg, &d), SL_ENOENT);
    sl_buf_append(&d, "", 1);
    assert_non_null(strstr((char *)d.data, "nope.lua: No such file or directory"));
    sl_buf_free(&d);
}

static void test_keys_markdown(void **state)
{
    (void)state;
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_config_keys_markdown(&b), 0);
    sl_buf_append(&b, "", 1);
    const char *s = (const char *)b.data;
    assert_non_null(strstr(s, "### rule \"NAME\" { … }"));
    assert_non_null(strstr(s, "| `retention` | duration |"));
    assert_non_null(strstr(s, "### target.file { … }"));
    sl_buf_free(&b);
}

/* ---- cursors --------------------------------------------------------------- */

static void test_cursor_roundtrip(void **state)
{
    fixture *f = *state;
    sl_cursor c;
    bool found = true;
    assert_int_equal(sl_cursor_open(&c, f->dir, "rule", "set", 3, &found, NULL), 0);
    assert_false(found);
    for (int64_t o = 1; o <= 5; o++)
        assert_int_equal(sl_cursor_commit(&c, o * 100, 0, NULL), 0);
    sl_cursor_close(&c);
    assert_int_equal(sl_cursor_open(&c, f->dir, "rule", "set", 3, &found, NULL), 0);
    assert_true(found);
    assert_int_equal(c.offset, 500);
    sl_cursor_close(&c);
    /* another partition is another file */
    assert_int_equal(sl_cursor_open(&c, f->dir, "rule", "set", 4, &found, NULL), 0);
    assert_false(found);
    sl_cursor_close(&c);
}

/* A torn latest slot falls back to the previous commit: earlier, never
 * later, so at-least-once holds. */
static void test_cursor_torn_slot(void **state)
{
    fixture *f = *state;
    sl_cursor c;
    bool found;
    assert_int_equal(sl_cursor_open(&c, f->dir, "r", "s", 0, &found, NULL), 0);
    assert_int_equal(sl_cursor_commit(&c, 10, 0, NULL), 0); /* seq 1 -> slot 1 */
    assert_int_equal(sl_cursor_commit(&c, 20, 0, NULL), 0); /* seq 2 -> slot 0 */
    sl_cursor_close(&c);
    char path[700];
    snprintf(path, sizeof path, "%s/rules/r/s/0.cursor", f->dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "\xff", 1, 14), 1); /* damage slot 0's offset */
    close(fd);
    assert_int_equal(sl_cursor_open(&c, f->dir, "r", "s", 0, &found, NULL), 0);
    assert_true(found);
    assert_int_equal(c.offset, 10);
    sl_cursor_close(&c);
    /* both slots damaged: no position, and not mistaken for a new rule */
    fd = open(path, O_RDWR);
    assert_int_equal(pwrite(fd, "XXXX", 4, 32), 4);
    close(fd);
    assert_int_equal(sl_cursor_open(&c, f->dir, "r", "s", 0, &found, NULL), SL_ECORRUPT);
    assert_false(found);
    sl_cursor_close(&c);
}

/* rule.retry, dlq, ordered: values, defaults and mistakes. */
static void test_delivery_keys(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(f,
                  "set \"x\" { }\nset \"x-dlq\" { }\n"
                  "rule \"a\" { set = \"x\", dlq = \"x-dlq\", ordered = false,\n"
                  "  retry = { attempts = 6, max_age = \"1h\", backoff = \"fixed\",\n"
                  "            initial = \"50ms\", max = \"2s\" },\n" GOOD_RULE_TAIL
                  "rule \"b\" { set = \"x\",\n" GOOD_RULE_TAIL,
                  &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    const sl_rule_config *a = sl_config_rule(cfg, "a"), *b = sl_config_rule(cfg, "b");
    assert_string_equal(a->dlq, "x-dlq");
    assert_false(a->ordered);
    assert_false(a->targets[0].ordered);
    assert_int_equal(a->retry.attempts, 6);
    assert_int_equal(a->retry.max_age_ms, 3600000);
    assert_int_equal(a->retry.backoff, SL_BACKOFF_FIXED);
    assert_int_equal(a->retry.initial_ms, 50);
    assert_int_equal(a->retry.max_ms, 2000);
    /* EventBridge's defaults */
    assert_null(b->dlq);
    assert_true(b->ordered);
    assert_true(b->targets[0].ordered);
    assert_int_equal(b->retry.attempts, 185);
    assert_int_equal(b->retry.max_age_ms, 24 * 3600000);
    assert_int_equal(b->retry.backoff, SL_BACKOFF_EXPONENTIAL);
    assert_int_equal(b->retry.initial_ms, 100);
    assert_int_equal(b->retry.max_ms, 300000);
    sl_config_free(cfg);

    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n  dlq = \"nope\",\n" GOOD_RULE_TAIL,
                   3, "dlq set \"nope\" is not declared");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  dlq = \"x\",\n" GOOD_RULE_TAIL,
                   3, "the dlq cannot be the set the rule reads");
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  retry = { attemps = 3 },\n" GOOD_RULE_TAIL,
        3, "retry: unknown key \"attemps\" (known: attempts, max_age");
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  retry = { attempts = 0 },\n" GOOD_RULE_TAIL,
        3, "attempts = 0 is out of range");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n  retry = { backoff = \"linear\" "
                   "},\n" GOOD_RULE_TAIL,
                   3, "backoff must be \"exponential\" or \"fixed\"");
    expect_mistake(f,
                   "set \"x\" { }\nrule \"r\" { set = \"x\",\n  retry = { initial = \"10s\", max = "
                   "\"1s\" },\n" GOOD_RULE_TAIL,
                   3, "retry.initial (10000 ms) is longer than retry.max (1000 ms)");
    expect_mistake(f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  retry = 5,\n" GOOD_RULE_TAIL, 3,
                   "retry must be a table");
    expect_mistake(
        f, "set \"x\" { }\nrule \"r\" { set = \"x\",\n  ordered = \"yes\",\n" GOOD_RULE_TAIL, 3,
        "ordered must be true or false");
}

/* target.kafka: keys, defaults, and what librdkafka itself refuses. */
static void test_kafka_target(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(
        f,
        "set \"x\" { }\n"
        "rule \"k\" { set = \"x\", target = target.kafka { brokers = \"127.0.0.1:9\",\n"
        "  topic = \"t-{type}\", key = \"{subject}\", body = \"structured\",\n"
        "  properties = { [\"linger.ms\"] = 7, [\"enable.idempotence\"] = true } } }\n"
        "rule \"d\" { set = \"x\", target = target.kafka { brokers = \"b:1\", topic = \"t\" } }\n",
        &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    assert_ptr_equal(sl_config_rule(cfg, "k")->targets[0].ops, &sl_target_kafka_ops);
    const sl_target_kafka_conf *k = sl_config_rule(cfg, "k")->targets[0].conf;
    assert_string_equal(k->brokers, "127.0.0.1:9");
    assert_string_equal(k->topic, "t-{type}");
    assert_string_equal(k->key, "{subject}");
    assert_int_equal(k->body, SL_HTTP_BODY_STRUCTURED);
    assert_int_equal(k->nproperties, 2);
    bool linger = false;
    for (size_t i = 0; i < k->nproperties; i++)
        linger |= strcmp(k->properties[i], "linger.ms=7") == 0;
    assert_true(linger);
    const sl_target_kafka_conf *d = sl_config_rule(cfg, "d")->targets[0].conf;
    assert_int_equal(d->body, SL_HTTP_BODY_BINARY); /* the Kafka binding's default */
    assert_null(d->key);
    assert_int_equal(d->timeout_ms, 30000);
    sl_config_free(cfg);

    expect_mistake(
        f,
        "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.kafka { topic = \"t\" } }\n",
        3, "target.kafka needs brokers and a topic");
    expect_mistake(
        f,
        "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.kafka { brokers = \"b:1\", "
        "topic = \"t\",\n  properties = { [\"no.such.property\"] = 1 } } }\n",
        3, "no.such.property");
    expect_mistake(
        f,
        "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.kafka { brokers = \"b:1\", "
        "topic = \"t\",\n  properties = { [\"bad name!\"] = 1 } } }\n",
        4, "is not a property name");
    expect_mistake(
        f,
        "set \"x\" { }\nrule \"r\" { set = \"x\",\n  target = target.kafka { brokers = \"b:1\", "
        "topic = \"t\", properties = { x = {} } } }\n",
        3, "must be a string, number or boolean");
}

static void test_sources(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(
        f,
        "set \"logs\" { }\nset \"gh\" { }\nlane \"feature-x\" { }\n"
        "source.file { path = \"logs/*.log\", set = \"logs\", type = \"app.log\",\n"
        "  parse = \"text\", multiline = \"^[0-9]{4}-\", max_line = \"64KiB\",\n"
        "  long_lines = \"skip\", start = \"beginning\", lane = \"feature-x\" }\n"
        "source.file { name = \"lua\", path = \"/abs/x.log\", set = \"logs\",\n"
        "  parse = function(line) return { l = line } end, inotify = false }\n"
        "source.webhook { name = \"gh\", preset = \"github\", secret = \"a, b\", set = \"gh\" }\n"
        "source.kafka { brokers = \"b:1\", topics = \"in\", set = \"logs\",\n"
        "  properties = { [\"fetch.min.bytes\"] = 1 } }\n"
        "source.kafka { name = \"k2\", brokers = \"b:1\", topics = { \"a\", \"^b.*\" },\n"
        "  group = \"g\", set = \"logs\" }\n",
        &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    assert_int_equal(cfg->nsources, 5);
    const sl_source_config *a = &cfg->sources[0];
    const sl_source_file_conf *af = a->conf;
    assert_ptr_equal(a->ops, &sl_source_file_ops);
    assert_string_equal(a->name, "file-logs"); /* KIND-SET by default */
    assert_non_null(strstr(af->path, "/logs/*.log"));
    assert_true(af->path[0] == '/'); /* resolved against the config's folder */
    assert_int_equal(af->parse, SL_PARSE_TEXT);
    assert_int_equal(af->max_line, 64 << 10);
    assert_false(af->split_long);
    assert_true(a->from_beginning);
    assert_string_equal(a->lane, "feature-x");
    assert_int_equal(af->poll_ms, 250);
    assert_int_equal(af->multiline_timeout_ms, 1000);
    const sl_source_config *l = sl_config_source(cfg, "lua");
    assert_non_null(l);
    const sl_source_file_conf *lf = l->conf;
    assert_int_equal(lf->parse, SL_PARSE_LUA);
    assert_int_equal(l->index, 1);
    assert_false(lf->inotify);
    assert_string_equal(lf->path, "/abs/x.log");
    assert_true(l->owner == cfg);
    const sl_source_config *w = sl_config_source(cfg, "gh");
    assert_ptr_equal(w->ops, &sl_source_webhook_ops);
    const sl_source_webhook_conf *wf = w->conf;
    assert_string_equal(wf->preset, "github");
    assert_int_equal(wf->tolerance_ms, 300000);
    assert_int_equal(wf->dedupe_ms, 24LL * 3600 * 1000);
    const sl_source_config *ks = sl_config_source(cfg, "kafka-logs");
    assert_non_null(ks);
    const sl_source_kafka_conf *k = ks->conf;
    assert_int_equal(k->ntopics, 1);
    assert_string_equal(k->topics[0], "in");
    assert_int_equal(k->nproperties, 1);
    assert_string_equal(k->properties[0], "fetch.min.bytes=1");
    const sl_source_kafka_conf *k2 = sl_config_source(cfg, "k2")->conf;
    assert_int_equal(k2->ntopics, 2);
    assert_string_equal(k2->topics[1], "^b.*");
    assert_string_equal(k2->group, "g");
    assert_null(sl_config_source(cfg, "nope"));
    sl_config_free(cfg);

    expect_mistake(f, "set \"x\" { }\nsource.file { set = \"x\" }\n", 2, "path is required");
    expect_mistake(f, "set \"x\" { }\nsource.file { path = \"a\" }\n", 2, "set is required");
    expect_mistake(f, "set \"x\" { }\nsource.file {\n path = \"a\", set = \"y\" }\n", 3,
                   "set \"y\" is not declared");
    expect_mistake(f,
                   "set \"x\" { }\nsource.file { path = \"a\", set = \"x\" }\n"
                   "source.file { path = \"b\", set = \"x\" }\n",
                   3, "the name is taken by the source at line 2");
    expect_mistake(
        f, "set \"x\" { }\nsource.file { path = \"a\", set = \"x\",\n multiline = \"(\" }\n", 3,
        "multiline is not an extended regex");
    expect_mistake(f,
                   "set \"x\" { }\nsource.file { path = \"a\", set = \"x\",\n parse = \"xml\" }\n",
                   3, "parse must be \"json\", \"text\" or a function");
    expect_mistake(f,
                   "set \"x\" { }\nsource.file { path = \"a\", set = \"x\",\n long_lines = 1 }\n",
                   3, "long_lines must be \"split\" or \"skip\"");
    expect_mistake(f,
                   "set \"x\" { }\nsource.file { path = \"a\", set = \"x\",\n lane = \"Prod\" }\n",
                   3, "is not a lane name");
    expect_mistake(f,
                   "set \"x\" { }\nsource.file { path = \"a\", set = \"x\",\n name = \"../up\" }\n",
                   3, "a source name is");
    expect_mistake(f, "set \"x\" { }\nsource.file { path = \"a\", set = \"x\", tail = 1 }\n", 2,
                   "unknown key \"tail\"");
    expect_mistake(f, "set \"x\" { }\nsource.webhook { name = \"w\", set = \"x\" }\n", 2,
                   "name, preset and secret are required");
    expect_mistake(f, "set \"x\" { }\nsource.kafka { brokers = \"b:1\", set = \"x\" }\n", 2,
                   "brokers and topics are required");
    expect_mistake(
        f, "set \"x\" { }\nsource.kafka { brokers = \"b:1\", set = \"x\",\n topics = {} }\n", 3,
        "topics must be a string or a non-empty list");
    expect_mistake(f, "set \"x\" { }\nsource.exec { set = \"x\" }\n", 2,
                   "unknown source kind source.exec (known: file, webhook, kafka)");
    expect_mistake(f, "set \"x\" { }\nsource.file \"x\"\n", 2, "the body must be a table");
}

/* ---- lanes (ISSUE 7 §1-2) ------------------------------------------------------ */

static void test_lane_decls(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(f,
                  "lane \"feature-x\" { env = \"boe\", description = \"try x\" }\n"
                  "lane \"release-42\" { env = \"ppe\" }\n"
                  "lane \"strict\" { fallback = \"none\" }\n"
                  "lane \"open-ppe\" { env = \"ppe\", fallback = \"base\" }\n",
                  &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    assert_int_equal(cfg->nlanes, 4);
    assert_false(cfg->lanes_auto);
    const sl_lane_decl *x = sl_config_lane(cfg, "feature-x");
    assert_non_null(x);
    assert_int_equal(x->line, 1);
    assert_int_equal(x->env, SL_LANE_BOE);
    assert_true(x->fallback_base);
    assert_string_equal(x->description, "try x");
    const sl_lane_decl *p = sl_config_lane(cfg, "release-42");
    assert_int_equal(p->env, SL_LANE_PPE);
    assert_false(p->fallback_base);
    assert_null(p->description);
    const sl_lane_decl *s = sl_config_lane(cfg, "strict");
    assert_int_equal(s->env, SL_LANE_BOE); /* env defaults to boe */
    assert_false(s->fallback_base);
    assert_true(sl_config_lane(cfg, "open-ppe")->fallback_base);
    assert_null(sl_config_lane(cfg, "nope"));
    assert_null(sl_config_lane(cfg, ""));
    assert_int_equal(cfg->noverrides, 0);
    sl_config_free(cfg);

    expect_mistake(f, "lane \"\" { }\n", 1, "the base lane");
    expect_mistake(f, "lane \"Feature\" { }\n", 1, "lane \"Feature\": a lane name is");
    expect_mistake(f, "lane \"a_b\" { }\n", 1, "a lane name is");
    expect_mistake(f, "lane \"abcdefghijabcdefghijabcdefghijabc\" { }\n", 1, "a lane name is");
    expect_mistake(f, "lane \"x\" { }\n\nlane \"x\" { env = \"ppe\" }\n", 3,
                   "lane \"x\" is declared twice (first at line 1)");
    expect_mistake(f, "lane \"x\" {\n  env = \"boe\",\n  colour = 1 }\n", 3,
                   "lane \"x\": unknown key \"colour\" (known: env, fallback, description)");
    expect_mistake(f, "lane \"x\" { env = \"prod\" }\n", 1, "env must be \"boe\" or \"ppe\"");
    expect_mistake(f, "lane \"x\" { fallback = true }\n", 1,
                   "fallback must be \"base\" or \"none\"");
    expect_mistake(f, "lane(3) { }\n", 1, "lane: the name must be a string");
}

static void test_lanes_auto(void **state)
{
    fixture *f = *state;
    static const char *const ok[] = {"lanes.auto = true\n", "lanes { auto = true }\n",
                                     "lanes.auto = false\nlanes.auto = true\n"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        sl_config *cfg = NULL;
        char *diag;
        int rc = load(f, ok[i], &cfg, &diag);
        if (rc)
            fail_msg("%s: %s", ok[i], diag);
        free(diag);
        assert_true(cfg->lanes_auto);
        sl_config_free(cfg);
    }
    expect_mistake(f, "-- lanes\n\nlanes.autp = true\n", 3,
                   "lanes: unknown key \"autp\" (known: auto)");
    expect_mistake(f, "lanes {\n  auto = true,\n  mode = 1 }\n", 3, "unknown key \"mode\"");
    expect_mistake(f, "lanes.auto = \"yes\"\n", 1, "auto must be true or false");
    expect_mistake(f, "lanes \"x\"\n", 1, "lanes: the body must be a table");
    /* A source's lane must be declared too, or every event of it would be refused. */
    expect_mistake(f,
                   "set \"logs\" { }\nsource.file { path = \"/tmp/x.log\", set = \"logs\",\n"
                   "  lane = \"qa\" }\n",
                   3, "source.file \"file-logs\": lane \"qa\" is not declared");
    static const char *const src_ok[] = {
        "set \"logs\" { }\nlane \"qa\" { }\nsource.file { path = \"/tmp/x.log\", set = \"logs\", "
        "lane = \"qa\" }\n",
        "set \"logs\" { }\nlanes.auto = true\nsource.file { path = \"/tmp/x.log\", set = \"logs\", "
        "lane = \"qa\" }\n"};
    for (size_t i = 0; i < sizeof src_ok / sizeof *src_ok; i++) {
        sl_config *cfg = NULL;
        char *diag;
        if (load(f, src_ok[i], &cfg, &diag))
            fail_msg("%s: %s", src_ok[i], diag);
        free(diag);
        sl_config_free(cfg);
    }
}

#define LANE_BASE                                                                                  \
    "set \"orders\" { }\nset \"dead\" { }\n"                                                       \
    "rule \"billing\" {\n"                                                                         \
    "  set = \"orders\", dlq = \"dead\", ordered = false,\n"                                       \
    "  match = { type = { \"order.created\" } },\n"                                                \
    "  filter = function(e) return true end,\n"                                                    \
    "  transform = function(e) return e end,\n"                                                    \
    "  retry = { attempts = 3 },\n"                                                                \
    "  target = target.file { path = \"base.ndjson\" },\n"

static void test_lane_overrides(void **state)
{
    fixture *f = *state;
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(f,
                  "lane \"feature-x\" { }\nlane \"release-42\" { env = \"ppe\" }\n" LANE_BASE
                  "  lanes = {\n"
                  "    [\"feature-x\"] = { target = target.file { path = \"x.ndjson\" } },\n"
                  "    [\"release-42\"] = {\n"
                  "      transform_batch = function(l) return l end },\n"
                  "  },\n"
                  "}\n"
                  "rule \"plain\" { set = \"orders\", target = target.file { path = \"p\" } }\n",
                  &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    assert_int_equal(cfg->nrules, 2);
    assert_int_equal(cfg->noverrides, 2);
    const sl_rule_config *base = sl_config_rule(cfg, "billing");
    assert_null(base->lane);
    size_t at = 0;
    const sl_rule_config *x = sl_config_override(cfg, 0, "feature-x", &at);
    assert_non_null(x);
    assert_ptr_equal(sl_config_rule_at(cfg, at), x);
    assert_true(at >= cfg->nrules);
    assert_string_equal(x->name, "billing");
    assert_string_equal(x->lane, "feature-x");
    assert_int_equal(x->base, 0);
    assert_int_equal(x->line, 13);
    /* target replaced; everything else inherited */
    assert_false(x->targets_from_base);
    assert_int_equal(x->ntargets, 1);
    assert_non_null(strstr(((const sl_target_file_conf *)x->targets[0].conf)->path, "/x.ndjson"));
    assert_false(x->targets[0].ordered);
    assert_string_equal(x->set, "orders");
    assert_string_equal(x->dlq, "dead");
    assert_non_null(x->pattern);
    assert_string_equal(x->match_json, base->match_json);
    assert_true(x->filter);
    assert_true(x->transform);
    assert_false(x->transform_batch);
    assert_int_equal(x->retry.attempts, 3);
    assert_false(x->ordered);
    /* transform replaced (transform_batch replaces transform): targets inherited */
    const sl_rule_config *r = sl_config_override(cfg, 0, "release-42", &at);
    assert_non_null(r);
    assert_ptr_equal(sl_config_rule_at(cfg, at), r);
    assert_true(r->targets_from_base);
    assert_int_equal(r->ntargets, 1);
    assert_non_null(
        strstr(((const sl_target_file_conf *)r->targets[0].conf)->path, "/base.ndjson"));
    assert_false(r->transform);
    assert_true(r->transform_batch);
    assert_true(r->filter);
    assert_non_null(r->pattern);
    /* no override: for other lanes, the base lane, other rules */
    assert_null(sl_config_override(cfg, 0, "other", &at));
    assert_null(sl_config_override(cfg, 0, "", &at));
    assert_null(sl_config_override(cfg, 0, NULL, &at));
    assert_null(sl_config_override(cfg, 1, "feature-x", &at));
    /* the numbering */
    assert_ptr_equal(sl_config_rule_at(cfg, 0), base);
    assert_ptr_equal(sl_config_rule_at(cfg, 1), sl_config_rule(cfg, "plain"));
    assert_ptr_equal(sl_config_rule_at(cfg, 2), &cfg->overrides[0]);
    assert_ptr_equal(sl_config_rule_at(cfg, 3), &cfg->overrides[1]);
    assert_null(sl_config_rule_at(cfg, 4));
    /* overrides come in lane name order within their rule */
    assert_string_equal(cfg->overrides[0].lane, "feature-x");
    assert_string_equal(cfg->overrides[1].lane, "release-42");
    assert_null(sl_config_rule(cfg, "feature-x"));
    sl_config_free(cfg);

    /* match and input replaced; an empty override is the base again */
    rc = load(f,
              "lane \"a\" { }\nlane \"b\" { }\n" LANE_BASE
              "  lanes = { a = { match = [[{\"type\":[\"order.paid\"]}]], input = \"$.data\" },\n"
              "            b = { } },\n}\n",
              &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    const sl_rule_config *a = sl_config_override(cfg, 0, "a", NULL);
    assert_string_equal(a->match_json, "{\"type\":[\"order.paid\"]}");
    assert_non_null(a->input);
    assert_null(cfg->rules[0].input);
    assert_true(a->targets_from_base);
    const sl_rule_config *b = sl_config_override(cfg, 0, "b", NULL);
    assert_true(b->targets_from_base && b->transform && b->filter);
    assert_null(b->input);
    sl_config_free(cfg);
}

static void test_lane_override_mistakes(void **state)
{
    fixture *f = *state;
    /* undeclared lane, refused without lanes.auto … */
    expect_mistake(f,
                   LANE_BASE "  lanes = {\n    [\"feature-x\"] = { target = target.file { path "
                             "= \"x\" } } },\n}\n",
                   11, "rule \"billing\" lanes[\"feature-x\"]: lane \"feature-x\" is not declared");
    /* … and declared implicitly (boe, fallback base) with it */
    sl_config *cfg = NULL;
    char *diag;
    int rc = load(f,
                  "lanes.auto = true\n" LANE_BASE
                  "  lanes = { [\"feature-x\"] = { filter = function() return false end } },\n}\n",
                  &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    const sl_lane_decl *d = sl_config_lane(cfg, "feature-x");
    assert_non_null(d);
    assert_int_equal(d->line, 0);
    assert_int_equal(d->env, SL_LANE_BOE);
    assert_true(d->fallback_base);
    assert_int_equal(cfg->nlanes, 1);
    assert_non_null(sl_config_override(cfg, 0, "feature-x", NULL));
    sl_config_free(cfg);
    /* a lane declared after the rule is fine */
    rc = load(f, LANE_BASE "  lanes = { late = { } },\n}\nlane \"late\" { }\n", &cfg, &diag);
    if (rc)
        fail_msg("%s", diag);
    free(diag);
    assert_int_equal(cfg->noverrides, 1);
    sl_config_free(cfg);

    /* only some keys can be overridden */
    expect_mistake(f,
                   "lane \"feature-x\" { }\n" LANE_BASE
                   "  lanes = { [\"feature-x\"] = {\n      dlq = \"dead\" } },\n}\n",
                   12,
                   "rule \"billing\": lanes[\"feature-x\"]: \"dlq\" cannot be overridden per lane "
                   "(only match, filter, transform, transform_batch, input, target, targets)");
    expect_mistake(f,
                   "lane \"feature-x\" { }\n" LANE_BASE
                   "  lanes = { [\"feature-x\"] = { colour = 1 } },\n}\n",
                   11, "\"colour\" cannot be overridden per lane");
    /* the override's own values are checked, named by the lane */
    expect_mistake(
        f, "lane \"x\" { }\n" LANE_BASE "  lanes = { x = {\n    target = target.file { } } },\n}\n",
        12, "rule \"billing\" lanes[\"x\"]: target.file needs a path");
    expect_mistake(f,
                   "lane \"x\" { }\n" LANE_BASE
                   "  lanes = { x = {\n    target = target.set { set = \"orders\" } } },\n}\n",
                   12, "rule \"billing\" lanes[\"x\"]: target.set into the set it reads");
    expect_mistake(f, "lane \"x\" { }\n" LANE_BASE "  lanes = { x = {\n    filter = 3 } },\n}\n",
                   12, "rule \"billing\" lanes[\"x\"]: filter must be a function");
    expect_mistake(f, "lane \"x\" { }\n" LANE_BASE "  lanes = {\n    x = { match = 42 } },\n}\n",
                   12, "rule \"billing\" lanes[\"x\"]: match must be a table or a JSON string");
    expect_mistake(f,
                   "lane \"x\" { }\n" LANE_BASE "  lanes = { x = { transform = function() end,\n"
                   "                  transform_batch = function() end } },\n}\n",
                   11, "rule \"billing\" lanes[\"x\"]: use transform or transform_batch, not both");
    expect_mistake(f, LANE_BASE "  lanes = {\n    [\"Bad_Lane\"] = { } },\n}\n", 10,
                   "rule \"billing\": lanes: \"Bad_Lane\" is not a lane name");
    expect_mistake(f, LANE_BASE "  lanes = {\n    { } },\n}\n", 10,
                   "lanes: the keys are lane names");
    expect_mistake(f, LANE_BASE "  lanes = 3,\n}\n", 10, "lanes must be a table");
    expect_mistake(f, "lane \"x\" { }\n" LANE_BASE "  lanes = { x = 3 },\n}\n", 11,
                   "rule \"billing\" lanes[\"x\"]: an override must be a table");
    /* a mistake of the base is reported once, not again for each override */
    cfg = NULL;
    rc = load(f,
              "lane \"x\" { }\nlane \"y\" { }\n" LANE_BASE "  ordered = 3,\n"
              "  lanes = { x = { }, y = { } },\n}\n",
              &cfg, &diag);
    assert_int_equal(rc, SL_EINVAL);
    const char *first = strstr(diag, "ordered must be true or false");
    assert_non_null(first);
    assert_null(strstr(first + 1, "ordered must be true or false"));
    free(diag);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_full_config),          T(test_defaults),         T(test_unknown_key_line),
        T(test_wrong_types),          T(test_rule_mistakes),    T(test_schema_mistakes),
        T(test_http_target),          T(test_lua_errors),       T(test_env),
        T(test_all_mistakes_at_once), T(test_missing_file),     T(test_keys_markdown),
        T(test_cursor_roundtrip),     T(test_cursor_torn_slot), T(test_delivery_keys),
        T(test_kafka_target),         T(test_sources),          T(test_lane_decls),
        T(test_lanes_auto),           T(test_lane_overrides),   T(test_lane_override_mistakes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
