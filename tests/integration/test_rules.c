/*
 * tests/integration/test_rules.c — the Lua config and the rule engine of the
 * real `bin/sluice serve -c FILE.lua`: routing to file and set targets,
 * fan-out, drops and filters, the sandbox, GET /v1/rules and the rule
 * metrics, input transformers, where new rules start, cursors across
 * crashes and clean restarts, SIGHUP reloads, schemas at ingest, POST
 * /v1/patterns/test, `sluice check`, and that a server answering requests
 * already checks schemas and wakes rules (issue 4). The harness is itest.h.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 20.0 /* every wait gives up after this long */

/* ---- files ------------------------------------------------------------------ */

static void make_dir(const it_server *s, const char *name)
{
    char p[PATH_MAX];
    it_path(p, s, name);
    if (mkdir(p, 0755) && errno != EEXIST)
        fail_msg("mkdir %s: %s", p, strerror(errno));
}

/* The lines of an NDJSON output file: their exact text and, for those that
 * are JSON objects, the parsed object (NULL for the others). */
typedef struct outlines {
    char **text;
    json_t **obj;
    size_t n;
    size_t bad;      /* lines that are not one JSON object */
    bool unfinished; /* the file does not end with a line break */
} outlines;

static void out_free(outlines *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free(o->text[i]);
        json_decref(o->obj[i]);
    }
    free(o->text);
    free(o->obj);
    memset(o, 0, sizeof *o);
}

/* Reads an output file; a file that does not exist reads as empty. */
static outlines read_out(const char *path)
{
    outlines o = {0};
    FILE *f = fopen(path, "r");
    if (!f)
        return o;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    size_t room = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        bool nl = line[len - 1] == '\n';
        if (nl)
            line[--len] = '\0';
        else
            o.unfinished = true;
        if (o.n == room) {
            room = room ? room * 2 : 64;
            o.text = realloc(o.text, room * sizeof *o.text);
            o.obj = realloc(o.obj, room * sizeof *o.obj);
            assert_non_null(o.text);
            assert_non_null(o.obj);
        }
        o.text[o.n] = strdup(line);
        json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
        if (j && !json_is_object(j)) {
            json_decref(j);
            j = NULL;
        }
        if (!j)
            o.bad++;
        o.obj[o.n++] = j;
    }
    free(line);
    fclose(f);
    return o;
}

/* Lines in a file (0 when it does not exist). Never asserts. */
static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* The value at a dotted path of a line ("data.user"), or NULL. */
static json_t *jpath(json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && j; k = strtok_r(NULL, ".", &save))
        j = json_object_get(j, k);
    return j;
}

static const char *jstr(json_t *j, const char *path)
{
    return json_string_value(jpath(j, path));
}

static json_int_t jint(json_t *j, const char *path)
{
    json_t *v = jpath(j, path);
    if (!json_is_integer(v))
        fail_msg("%s is not an integer", path);
    return json_integer_value(v);
}

/* ---- events ------------------------------------------------------------------- */

/* Appends one NDJSON event line; extra (may be "") goes inside the object. */
static void add_event(sl_buf *b, const char *id, const char *type, const char *data,
                      const char *extra)
{
    sl_buf_printf(b, "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":\"/shop\",\"type\":\"%s\"",
                  id, type);
    if (data)
        sl_buf_printf(b, ",\"data\":%s", data);
    sl_buf_printf(b, "%s}\n", extra ? extra : "");
}

/* ---- rules ------------------------------------------------------------------------ */

/* Waits until the server log has a line containing text. */
static void wait_log(const it_server *s, const char *text)
{
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(20))
        if (it_log_contains(s, text))
            return;
    fail_msg("the server log has no line with \"%s\" after %.0f s", text, WAIT_S);
}

/* Asserts that rule name's entry says what the counters given say (-1 for
 * "do not check"). */
static void expect_counts(it_server *s, const char *name, json_int_t read, json_int_t matched,
                          json_int_t filtered, json_int_t dropped, json_int_t failed,
                          json_int_t delivered)
{
    json_t *r = it_rule(s, name);
    static const char *const f[] = {"read",    "matched", "filtered",
                                    "dropped", "failed",  "delivered"};
    json_int_t want[] = {read, matched, filtered, dropped, failed, delivered};
    for (size_t i = 0; i < 6; i++) {
        if (want[i] < 0)
            continue;
        json_t *v = json_object_get(r, f[i]);
        if (!json_is_integer(v) || json_integer_value(v) != want[i])
            it_fail_rule(r, "rule %s: want %s = %lld", name, f[i], (long long)want[i]);
    }
    json_decref(r);
}

/* ---- 1. routing ------------------------------------------------------------------- */

static const char big_orders_cfg[] =
    "lanes.auto = true\n"
    "set \"orders\" { partitions = 2 }\n"
    "set \"audit\" { partitions = 1 }\n"
    "rule \"big-orders\" {\n"
    "  set = \"orders\",\n"
    "  match = { type = { \"order.created\" }, data = { amount = { { numeric = { \">\", 100 } "
    "} } } },\n"
    "  transform = function(e) e.data.vip = true; return e end,\n"
    "  target = target.file { path = \"%s\" },\n"
    "}\n";

/* 200 orders, half created with amounts 0..199, half cancelled: the file gets
 * exactly the created ones over 100, once each, transformed, decorated, in
 * partition order. */
static void test_routing(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], out[PATH_MAX];
    make_dir(s, "out");
    it_path(cfg, s, "sluice.lua");
    it_path(out, s, "out/big.ndjson");
    it_write_file(cfg, big_orders_cfg, "out/big.ndjson"); /* relative to the config's folder */
    it_start_config(s, cfg, WAIT_S);

    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 200; i++) {
        char id[16], data[32];
        snprintf(id, sizeof id, "o%d", i);
        snprintf(data, sizeof data, "{\"amount\":%d}", i);
        add_event(&b, id, i % 2 ? "order.cancelled" : "order.created", data, "");
    }
    json_t *a = it_post_all(s, "orders", NULL, &b, 200);
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);

    outlines o = read_out(out);
    if (o.bad || o.unfinished)
        fail_msg("%s: %zu lines are not one JSON object each (or the last is unfinished)", out,
                 o.bad);
    bool seen[200] = {false};
    int64_t last_off[2] = {-1, -1};
    for (size_t i = 0; i < o.n; i++) {
        json_t *e = o.obj[i];
        const char *id = jstr(e, "id");
        int k = id && id[0] == 'o' ? atoi(id + 1) : -1;
        if (k < 0 || k >= 200)
            fail_msg("line %zu: unexpected event %s", i + 1, o.text[i]);
        if (k % 2 || k <= 100)
            fail_msg("line %zu: event %s does not match the rule: %s", i + 1, id, o.text[i]);
        if (seen[k])
            fail_msg("event %s delivered twice", id);
        seen[k] = true;
        if (!json_is_true(jpath(e, "data.vip")))
            fail_msg("line %zu: data.vip is not true: %s", i + 1, o.text[i]);
        if (jint(e, "data.amount") != k)
            fail_msg("line %zu: data.amount changed: %s", i + 1, o.text[i]);
        assert_string_equal(jstr(e, "type"), "order.created");
        assert_string_equal(jstr(e, "source"), "/shop");
        assert_string_equal(jstr(e, "specversion"), "1.0");
        if (!jstr(e, "sluiceset") || strcmp(jstr(e, "sluiceset"), "orders"))
            fail_msg("line %zu: sluiceset is not \"orders\": %s", i + 1, o.text[i]);
        json_int_t p = jint(e, "sluicepartition"), off = jint(e, "sluiceoffset");
        if (p != it_res_part(a, (size_t)k) || off != it_res_off(a, (size_t)k))
            fail_msg("line %zu: says partition %lld offset %lld, the POST said %d/%lld: %s", i + 1,
                     (long long)p, (long long)off, it_res_part(a, (size_t)k),
                     (long long)it_res_off(a, (size_t)k), o.text[i]);
        if (off <= last_off[p])
            fail_msg("line %zu: partition %lld offset %lld after offset %lld (order lost)", i + 1,
                     (long long)p, (long long)off, (long long)last_off[p]);
        last_off[p] = off;
    }
    size_t want = 0;
    for (int k = 102; k < 200; k += 2, want++)
        if (!seen[k])
            fail_msg("event o%d (amount %d) was not delivered", k, k);
    assert_int_equal(o.n, want);
    assert_int_equal(want, 49);
    expect_counts(s, "big-orders", 200, 49, 0, 0, 0, 49);
    out_free(&o);
    json_decref(a);
    s->passed = true;
}

/* A file target whose folder does not exist yet: the brief's own example
 * (path = "out/big.ndjson") with no out/ made beforehand. */
static void test_file_target_new_folder(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], out[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_path(out, s, "out/big.ndjson");
    it_write_file(cfg, big_orders_cfg, "out/big.ndjson");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    add_event(&b, "n1", "order.created", "{\"amount\":500}", "");
    json_decref(it_post_all(s, "orders", NULL, &b, 1));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(count_lines(out), 1);
    s->passed = true;
}

/* ---- 2. fan-out, drop, filter ------------------------------------------------------- */

static void test_fanout_drop_filter(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], fan[PATH_MAX], drop[PATH_MAX], filt[PATH_MAX], batch[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_path(fan, s, "fan.ndjson");
    it_path(drop, s, "drop.ndjson");
    it_path(filt, s, "filt.ndjson");
    it_path(batch, s, "batch.ndjson");
    it_write_file(
        cfg, "lanes.auto = true\n"
             "set \"s\" { partitions = 2 }\n"
             "rule \"fan\" {\n"
             "  set = \"s\",\n"
             "  transform = function(e)\n"
             "    local c = {}\n"
             "    for k, v in pairs(e) do c[k] = v end\n"
             "    c.id = e.id .. \"-copy\"\n"
             "    return { e, c }\n"
             "  end,\n"
             "  target = target.file { path = \"fan.ndjson\" },\n"
             "}\n"
             "rule \"drop\" {\n"
             "  set = \"s\",\n"
             "  transform = function(e) if e.data.n %% 2 == 1 then return nil end return e end,\n"
             "  target = target.file { path = \"drop.ndjson\" },\n"
             "}\n"
             "rule \"filt\" {\n"
             "  set = \"s\",\n"
             "  filter = function(e) return e.data.n %% 3 == 0 end,\n"
             "  target = target.file { path = \"filt.ndjson\" },\n"
             "}\n"
             "rule \"batch\" {\n"
             "  set = \"s\",\n"
             "  transform_batch = function(evs)\n"
             "    local out = {}\n"
             "    for _, e in ipairs(evs) do if e.data.n < 10 then out[#out + 1] = e end end\n"
             "    return out\n"
             "  end,\n"
             "  target = target.file { path = \"batch.ndjson\" },\n"
             "}\n");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 30; i++) {
        char id[16], data[32];
        snprintf(id, sizeof id, "f%d", i);
        snprintf(data, sizeof data, "{\"n\":%d}", i);
        add_event(&b, id, "t", data, "");
    }
    json_decref(it_post_all(s, "s", NULL, &b, 30));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);

    /* Fan-out: each event, directly followed by its copy. */
    outlines o = read_out(fan);
    assert_int_equal(o.bad, 0);
    if (o.n != 60)
        fail_msg("fan: %zu lines, want 60 (two per event)", o.n);
    bool seen[30] = {false};
    for (size_t i = 0; i + 1 < o.n; i += 2) {
        const char *id = jstr(o.obj[i], "id"), *copy = jstr(o.obj[i + 1], "id");
        char want[32];
        snprintf(want, sizeof want, "%s-copy", id ? id : "?");
        if (!id || id[0] != 'f' || !copy || strcmp(copy, want))
            fail_msg("fan: lines %zu and %zu are %s and %s, want an event and its copy", i + 1,
                     i + 2, o.text[i], o.text[i + 1]);
        int k = atoi(id + 1);
        assert_false(seen[k]);
        seen[k] = true;
        assert_int_equal(jint(o.obj[i + 1], "data.n"), k);
    }
    out_free(&o);
    expect_counts(s, "fan", 30, 30, 0, 0, 0, 60);

    /* nil drops: only the even ones. */
    o = read_out(drop);
    assert_int_equal(o.bad, 0);
    assert_int_equal(o.n, 15);
    for (size_t i = 0; i < o.n; i++)
        if (jint(o.obj[i], "data.n") % 2)
            fail_msg("drop: delivered %s, which the transform dropped", o.text[i]);
    out_free(&o);
    expect_counts(s, "drop", 30, 15, 0, 15, 0, 15);

    /* filter false: only multiples of 3. */
    o = read_out(filt);
    assert_int_equal(o.bad, 0);
    assert_int_equal(o.n, 10);
    for (size_t i = 0; i < o.n; i++)
        if (jint(o.obj[i], "data.n") % 3)
            fail_msg("filt: delivered %s, which the filter refused", o.text[i]);
    out_free(&o);
    expect_counts(s, "filt", 30, 10, 20, 0, 0, 10);

    /* transform_batch keeps n < 10. */
    o = read_out(batch);
    assert_int_equal(o.bad, 0);
    assert_int_equal(o.n, 10);
    for (size_t i = 0; i < o.n; i++)
        assert_true(jint(o.obj[i], "data.n") < 10);
    out_free(&o);
    expect_counts(s, "batch", 30, -1, -1, -1, 0, 10);
    s->passed = true;
}

/* ---- 3. the sandbox ----------------------------------------------------------------- */

static void test_sandbox_holds(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], good[PATH_MAX], pwned[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_path(good, s, "good.ndjson");
    it_path(pwned, s, "pwned");
    static const struct {
        const char *name, *body, *reason;
    } bad[] = {
        {"spin", "while true do end", "instruction budget"},
        {"pcall-spin", "pcall(function() while true do end end); return e", "instruction budget"},
        {"exec", "os.execute(\"touch %s\"); return e", "execute"},
        {"io", "io.open(\"%s\", \"w\"); return e", "'io'"},
        {"req", "require(\"os\"); return e", "require"},
        {"rep", "local x = string.rep(\"x\", 100 * 1024 * 1024); return e", "memory"},
        {"grow", "local x = \"x\"; while true do x = x .. x end", "memory"},
    };
    size_t nbad = sizeof bad / sizeof *bad;
    sl_buf c = SL_BUF_INIT;
    sl_buf_printf(&c, "server { lua_memory = \"8MiB\", lua_instructions = 1000000 }\n"
                      "set \"s\" { partitions = 2 }\n");
    for (size_t i = 0; i < nbad; i++) {
        char body[512];
        snprintf(body, sizeof body, bad[i].body, pwned);
        sl_buf_printf(&c,
                      "rule \"%s\" {\n  set = \"s\",\n  transform = function(e) %s end,\n"
                      "  target = target.file { path = \"%s.ndjson\" },\n}\n",
                      bad[i].name, body, bad[i].name);
    }
    sl_buf_printf(
        &c, "rule \"good\" { set = \"s\", target = target.file { path = \"good.ndjson\" } }\n");
    it_write_file(cfg, "%.*s", (int)c.len, (const char *)c.data);
    sl_buf_free(&c);
    it_start_config(s, cfg, WAIT_S);

    for (int round = 0; round < 2; round++) {
        sl_buf b = SL_BUF_INIT;
        for (int i = 0; i < 10; i++) {
            char id[16];
            snprintf(id, sizeof id, "x%d", round * 10 + i);
            add_event(&b, id, "t", "{\"k\":1}", "");
        }
        json_decref(it_post_all(s, "s", NULL, &b, 10));
        sl_buf_free(&b);
        it_wait_caught_up(s, WAIT_S);
        assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    }
    json_t *j = it_rules(s);
    for (size_t i = 0; i < nbad; i++) {
        json_t *r = it_rule_in(j, bad[i].name);
        assert_non_null(r);
        char *t = json_dumps(r, JSON_COMPACT);
        if (jint(r, "failed") != 20 || jint(r, "matched") != 0 || jint(r, "delivered") != 0)
            fail_msg("rule %s: want 20 failed, none matched or delivered: %s", bad[i].name, t);
        const char *le = jstr(r, "last_error");
        if (!le || !strstr(le, bad[i].reason))
            fail_msg("rule %s: last_error does not name \"%s\": %s", bad[i].name, bad[i].reason, t);
        free(t);
        char p[PATH_MAX], file[64];
        snprintf(file, sizeof file, "%s.ndjson", bad[i].name);
        it_path(p, s, file);
        if (count_lines(p))
            fail_msg("rule %s delivered %zu lines", bad[i].name, count_lines(p));
    }
    json_decref(j);
    expect_counts(s, "good", 20, 20, 0, 0, 0, 20);
    outlines o = read_out(good);
    assert_int_equal(o.bad, 0);
    assert_int_equal(o.n, 20);
    out_free(&o);
    if (access(pwned, F_OK) == 0)
        fail_msg("a sandboxed transform created %s", pwned);
    assert_true(it_log_contains(s, "rule spin: event failed"));
    s->passed = true;
}

/* ---- 4. GET /v1/rules and /metrics ---------------------------------------------------- */

static void test_rules_api(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_write_file(cfg, "lanes.auto = true\n"
                       "set \"orders\" { partitions = 2 }\n"
                       "rule \"created\" {\n"
                       "  set = \"orders\",\n"
                       "  match = [[{\"type\": [\"order.created\"]}]],\n"
                       "  target = target.file { path = \"created.ndjson\" },\n"
                       "}\n"
                       "rule \"all\" { set = \"orders\", targets = { target.file { path = "
                       "\"all1.ndjson\" }, target.file { path = \"all2.ndjson\" } } }\n");
    it_start_config(s, cfg, WAIT_S);

    /* Before any event: cursors at 0, no lag. */
    json_t *j = it_rules(s);
    assert_int_equal(json_array_size(json_object_get(j, "rules")), 2);
    assert_string_equal(jstr(json_array_get(json_object_get(j, "rules"), 0), "name"), "created");
    assert_string_equal(jstr(json_array_get(json_object_get(j, "rules"), 1), "name"), "all");
    json_decref(j);

    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 15; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        add_event(&b, id, i < 10 ? "order.created" : "order.cancelled", "{}", "");
    }
    json_t *a = it_post_all(s, "orders", NULL, &b, 15);
    sl_buf_free(&b);
    int per_part[2] = {0, 0};
    for (size_t i = 0; i < 15; i++)
        per_part[it_res_part(a, i)]++;
    json_decref(a);
    it_wait_caught_up(s, WAIT_S);

    j = it_rules(s);
    static const char *const names[] = {"created", "all"};
    static const json_int_t matched[] = {10, 15};
    for (size_t k = 0; k < 2; k++) {
        json_t *r = it_rule_in(j, names[k]);
        assert_non_null(r);
        char *t = json_dumps(r, JSON_COMPACT);
        printf("GET /v1/rules: %s\n", t);
        assert_string_equal(jstr(r, "set"), "orders");
        assert_true(json_is_true(json_object_get(r, "enabled")));
        json_t *targets = json_object_get(r, "targets");
        assert_int_equal(json_array_size(targets), k ? 2 : 1);
        assert_string_equal(json_string_value(json_array_get(targets, 0)), "file");
        json_t *parts = json_object_get(r, "partitions");
        assert_int_equal(json_array_size(parts), 2);
        for (size_t p = 0; p < 2; p++) {
            json_t *e = json_array_get(parts, p);
            assert_int_equal(jint(e, "partition"), (json_int_t)p);
            if (jint(e, "cursor") != per_part[p] || jint(e, "end") != per_part[p] ||
                jint(e, "lag") != 0)
                fail_msg("rule %s partition %zu: want cursor = end = %d, lag 0: %s", names[k], p,
                         per_part[p], t);
        }
        assert_int_equal(jint(r, "lag"), 0);
        assert_int_equal(jint(r, "read"), 15);
        assert_int_equal(jint(r, "matched"), matched[k]);
        assert_int_equal(jint(r, "filtered"), 0);
        assert_int_equal(jint(r, "dropped"), 0);
        assert_int_equal(jint(r, "failed"), 0);
        assert_int_equal(jint(r, "delivered"), matched[k]);
        assert_int_equal(jint(r, "retries"), 0);
        assert_string_equal(jstr(r, "last_error"), "");
        free(t);
    }
    json_decref(j);
    /* Every target of a rule gets every event. */
    static const char *const files[] = {"created.ndjson", "all1.ndjson", "all2.ndjson"};
    static const size_t lines[] = {10, 15, 15};
    for (size_t i = 0; i < 3; i++) {
        char p[PATH_MAX];
        it_path(p, s, files[i]);
        assert_int_equal(count_lines(p), lines[i]);
    }

    it_resp r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    const char *t = it_body(&r);
    if (it_metric(t, "sluice_rule_matched_total{rule=\"created\"}") != 10 ||
        it_metric(t, "sluice_rule_matched_total{rule=\"all\"}") != 15)
        fail_msg("/metrics lacks sluice_rule_matched_total for the rules:\n%s", t);
    assert_true(it_metric(t, "sluice_rule_read_total{rule=\"created\"}") == 15);
    assert_true(it_metric(t, "sluice_rule_delivered_total{rule=\"all\"}") == 15);
    assert_true(it_metric(t, "sluice_rule_failed_total{rule=\"all\"}") == 0);
    assert_true(it_metric(t, "sluice_rule_lag{rule=\"created\"}") == 0);
    assert_non_null(strstr(t, "# TYPE sluice_rule_matched_total counter"));
    it_resp_free(&r);
    s->passed = true;
}

/* ---- 5. target.set ---------------------------------------------------------------------- */

/* A rule batch bigger than a whole partition buffer of the target set
 * (buffer_bytes = 1KiB here) could never be published at once: target.set
 * falls back to one event at a time instead of holding the partition. */
static void test_target_set_small_buffer(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_write_file(cfg,
                  "lanes.auto = true\n"
                  "set \"orders\" { partitions = 1 }\n"
                  "set \"audit\" { partitions = 1, buffer_bytes = \"1KiB\" }\n"
                  "rule \"copy\" { set = \"orders\", target = target.set { set = \"audit\" } }\n");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 40; i++) {
        char id[16], data[64];
        snprintf(id, sizeof id, "s%d", i);
        snprintf(data, sizeof data, "{\"n\":%d,\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}", i);
        add_event(&b, id, "order.created", data, "");
    }
    json_decref(it_post_all(s, "orders", NULL, &b, 40));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    it_evs e = it_read_all(s, "audit", 0, "*");
    if (e.n != 40)
        fail_msg("audit holds %zu events, want 40", e.n);
    for (size_t i = 0; i < e.n; i++) { /* in order, each once */
        char id[16];
        snprintf(id, sizeof id, "s%zu", i);
        assert_string_equal(e.v[i].id, id);
    }
    it_evs_free(&e);
    s->passed = true;
}

static void test_target_set(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_write_file(cfg, "lanes.auto = true\n"
                       "set \"orders\" { partitions = 2 }\n"
                       "set \"audit\" { partitions = 1 }\n"
                       "rule \"copy\" {\n"
                       "  set = \"orders\",\n"
                       "  match = { type = { \"order.created\" } },\n"
                       "  target = target.set { set = \"audit\" },\n"
                       "}\n");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 4; i++) {
        char id[16], data[32];
        snprintf(id, sizeof id, "a%d", i);
        snprintf(data, sizeof data, "{\"n\":%d}", i);
        add_event(&b, id, "order.created", data, "");
    }
    add_event(&b, "a4", "order.cancelled", "{\"n\":4}", "");
    json_decref(it_post_all(s, "orders", NULL, &b, 5));
    b.len = 0;
    const char *blue[] = {"X-Sluice-Lane: blue", NULL};
    add_event(&b, "b0", "order.created", "{\"n\":10}", "");
    add_event(&b, "b1", "order.created", "{\"n\":11}", "");
    add_event(&b, "b2", "order.cancelled", "{\"n\":12}", "");
    json_decref(it_post_all(s, "orders", blue, &b, 3));
    b.len = 0;
    add_event(&b, "g0", "order.created", "{\"n\":20}", ",\"lane\":\"green\"");
    add_event(&b, "g1", "order.cancelled", "{\"n\":21}", ",\"lane\":\"green\"");
    json_decref(it_post_all(s, "orders", NULL, &b, 2));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);

    static const struct {
        const char *id, *lane;
        int n;
    } want[] = {{"a0", "", 0},      {"a1", "", 1},      {"a2", "", 2},      {"a3", "", 3},
                {"b0", "blue", 10}, {"b1", "blue", 11}, {"g0", "green", 20}};
    size_t nwant = sizeof want / sizeof *want;
    it_evs e = it_read_all(s, "audit", 0, "*");
    if (e.n != nwant)
        fail_msg("audit holds %zu events, want %zu", e.n, nwant);
    bool seen[8] = {false};
    for (size_t i = 0; i < e.n; i++) {
        size_t k = 0;
        while (k < nwant && strcmp(want[k].id, e.v[i].id))
            k++;
        if (k == nwant || seen[k])
            fail_msg("audit: unexpected or repeated event %s", e.v[i].text);
        seen[k] = true;
        if (strcmp(e.v[i].lane, want[k].lane))
            fail_msg("audit: %s is in lane \"%s\", want \"%s\": %s", want[k].id, e.v[i].lane,
                     want[k].lane, e.v[i].text);
        json_t *j = json_loads(e.v[i].text, JSON_REJECT_DUPLICATES, NULL);
        if (!j)
            fail_msg("audit: event is not JSON without repeated members: %s", e.v[i].text);
        assert_string_equal(jstr(j, "sluiceset"), "audit");
        assert_int_equal(jint(j, "sluicepartition"), 0);
        assert_string_equal(jstr(j, "type"), "order.created");
        assert_string_equal(jstr(j, "source"), "/shop");
        assert_int_equal(jint(j, "data.n"), want[k].n);
        json_decref(j);
    }
    it_evs_free(&e);
    /* Read per lane, as a consumer would. */
    static const struct {
        const char *query;
        size_t n;
    } lanes[] = {{"lane=blue", 2}, {"lane=green", 1}, {"", 4}};
    for (size_t i = 0; i < 3; i++) {
        e = it_read_events(s, "audit", 0, lanes[i].query);
        if (e.n != lanes[i].n)
            fail_msg("audit ?%s: %zu events, want %zu", lanes[i].query, e.n, lanes[i].n);
        for (size_t k = 0; k < e.n; k++)
            assert_int_equal(e.v[k].id[0], i == 0 ? 'b' : i == 1 ? 'g' : 'a');
        it_evs_free(&e);
    }
    expect_counts(s, "copy", 10, 7, 0, 0, 0, 7);
    s->passed = true;
}

/* ---- 6. input transformer -------------------------------------------------------------- */

static void test_input_transformer(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], data[PATH_MAX], tmpl[PATH_MAX], multi[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_path(data, s, "data.ndjson");
    it_path(tmpl, s, "tmpl.ndjson");
    it_path(multi, s, "multi.ndjson");
    it_write_file(cfg, "lanes.auto = true\n"
                       "set \"s\" { partitions = 1 }\n"
                       "rule \"data\" { set = \"s\", input = \"$.data\",\n"
                       "  target = target.file { path = \"data.ndjson\" } }\n"
                       "rule \"tmpl\" {\n"
                       "  set = \"s\",\n"
                       "  input = { paths = { who = \"$.data.user\" }, template = [[{\"who\": "
                       "\"<who>\"}]] },\n"
                       "  target = target.file { path = \"tmpl.ndjson\" },\n"
                       "}\n"
                       "rule \"multi\" {\n"
                       "  set = \"s\",\n"
                       "  input = { paths = { who = \"$.data.user\", n = \"$.data.n\" },\n"
                       "            template = [[{\n  \"who\": \"<who>\",\n  \"n\": <n>\n}]] },\n"
                       "  target = target.file { path = \"multi.ndjson\" },\n"
                       "}\n");
    it_start_config(s, cfg, WAIT_S);
    static const char *const datas[] = {"{\"user\":\"ann\",\"n\":1}",
                                        "{\"user\":\"bob\",\"n\":2,\"tags\":[\"x\",null]}",
                                        "{\"user\":\"q\\\"uote\",\"n\":3}"};
    static const char *const who[] = {"ann", "bob", "q\\\"uote"};
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "i%d", i);
        add_event(&b, id, "t", datas[i], "");
    }
    json_decref(it_post_all(s, "s", NULL, &b, 3));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);

    outlines o = read_out(data);
    assert_int_equal(o.n, 3);
    assert_int_equal(o.bad, 0);
    for (size_t i = 0; i < 3; i++) {
        json_t *w = json_loads(datas[i], 0, NULL);
        if (!json_equal(w, o.obj[i]))
            fail_msg("input \"$.data\": line %zu is %s, want %s", i + 1, o.text[i], datas[i]);
        json_decref(w);
    }
    out_free(&o);
    o = read_out(tmpl);
    assert_int_equal(o.n, 3);
    for (size_t i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, "{\"who\": \"%s\"}", who[i]);
        if (strcmp(o.text[i], want))
            fail_msg("template: line %zu is %s, want %s", i + 1, o.text[i], want);
    }
    out_free(&o);
    /* A template over several lines is still one line per payload. */
    o = read_out(multi);
    assert_int_equal(o.n, 3);
    assert_int_equal(o.bad, 0);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(jint(o.obj[i], "n"), (json_int_t)i + 1);
    assert_string_equal(jstr(o.obj[2], "who"), "q\"uote");
    out_free(&o);
    s->passed = true;
}

/* ---- 7. where a new rule starts --------------------------------------------------------- */

static void post_ids(it_server *s, const char *set, const char *prefix, int from, int to)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = from; i < to; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        add_event(&b, id, "t", "{}", "");
    }
    json_decref(it_post_all(s, set, NULL, &b, (size_t)(to - from)));
    sl_buf_free(&b);
}

/* A range of event ids: prefix followed by from..to-1. */
typedef struct idrange {
    const char *prefix;
    int from, to;
} idrange;

/* Asserts that the file holds exactly the events of the ranges, each once. */
static void expect_ids_(const char *path, const idrange *r, size_t nr)
{
    outlines o = read_out(path);
    if (o.bad)
        fail_msg("%s: %zu lines are not JSON objects", path, o.bad);
    size_t want = 0;
    for (size_t k = 0; k < nr; k++)
        want += (size_t)(r[k].to - r[k].from);
    char *seen = calloc(want + 1, 1);
    for (size_t i = 0; i < o.n; i++) {
        const char *id = jstr(o.obj[i], "id");
        long at = -1;
        size_t base = 0;
        for (size_t k = 0; id && at < 0 && k < nr; k++) {
            size_t l = strlen(r[k].prefix);
            if (strncmp(id, r[k].prefix, l) == 0 && id[l] >= '0' && id[l] <= '9') {
                int n = atoi(id + l);
                if (n >= r[k].from && n < r[k].to)
                    at = (long)(base + (size_t)(n - r[k].from));
            }
            base += (size_t)(r[k].to - r[k].from);
        }
        if (at < 0)
            fail_msg("%s: unexpected event %s", path, o.text[i]);
        if (seen[at]++)
            fail_msg("%s: event %s delivered twice", path, id);
    }
    if (o.n != want)
        fail_msg("%s: %zu events, want %zu", path, o.n, want);
    free(seen);
    out_free(&o);
}

#define expect_ids(path, ...)                                                                      \
    expect_ids_(path, (idrange[]){__VA_ARGS__}, sizeof((idrange[]){__VA_ARGS__}) / sizeof(idrange))

static void test_start_beginning(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], fa[PATH_MAX], fb[PATH_MAX], fc[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_path(fa, s, "a.ndjson");
    it_path(fb, s, "b.ndjson");
    it_path(fc, s, "c.ndjson");
    static const char rule_a[] = "lanes.auto = true\n"
                                 "set \"s\" { partitions = 2 }\n"
                                 "rule \"a\" { set = \"s\", target = target.file { path = "
                                 "\"a.ndjson\" } }\n";
    it_write_file(cfg, "%s", rule_a);
    it_start_config(s, cfg, WAIT_S);
    post_ids(s, "s", "old", 0, 10);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(it_srv_stop(s, SIGTERM, 10) & 0xffff, 0);

    it_write_file(cfg,
                  "%s"
                  "rule \"b\" { set = \"s\", start = \"beginning\",\n"
                  "  target = target.file { path = \"b.ndjson\" } }\n"
                  "rule \"c\" { set = \"s\", target = target.file { path = \"c.ndjson\" } }\n",
                  rule_a);
    it_restart(s, WAIT_S);
    post_ids(s, "s", "new", 0, 5);
    it_wait_caught_up(s, WAIT_S);
    expect_ids(fa, {"old", 0, 10}, {"new", 0, 5});
    expect_ids(fb, {"old", 0, 10}, {"new", 0, 5});
    expect_ids(fc, {"new", 0, 5});

    /* Where a rule starts is decided once: b does not start over after a
     * restart. */
    assert_int_equal(it_srv_stop(s, SIGTERM, 10) & 0xffff, 0);
    it_restart(s, WAIT_S);
    post_ids(s, "s", "new", 5, 6);
    it_wait_caught_up(s, WAIT_S);
    expect_ids(fb, {"old", 0, 10}, {"new", 0, 6});
    expect_ids(fc, {"new", 0, 6});
    s->passed = true;
}

/* ---- 8. cursors across kill -9 and clean restarts ------------------------------------------ */

/* Reads the file and counts, per partition, ids seen more than once; asserts
 * every line is a JSON object and every k0..k(n-1) is there. */
static void count_dups(const char *path, int n, int dups[2], size_t *lines)
{
    outlines o = read_out(path);
    if (o.bad || o.unfinished) {
        for (size_t i = 0; i < o.n; i++)
            if (!o.obj[i])
                fprintf(stderr, "torn line %zu: %.200s\n", i + 1, o.text[i]);
        fail_msg("%s: %zu lines are not one JSON object each (torn by the crash?)", path, o.bad);
    }
    unsigned char *seen = calloc((size_t)n, 1);
    dups[0] = dups[1] = 0;
    for (size_t i = 0; i < o.n; i++) {
        const char *id = jstr(o.obj[i], "id");
        int k = id && id[0] == 'k' ? atoi(id + 1) : -1;
        if (k < 0 || k >= n)
            fail_msg("%s: unexpected event %s", path, o.text[i]);
        json_int_t p = jint(o.obj[i], "sluicepartition");
        assert_true(p == 0 || p == 1);
        if (seen[k]++)
            dups[p]++;
    }
    for (int k = 0; k < n; k++)
        if (!seen[k])
            fail_msg("%s: event k%d is missing", path, k);
    *lines = o.n;
    free(seen);
    out_free(&o);
}

static void test_cursor_kill9(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], out[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_path(out, s, "all.ndjson");
    /* A transform that takes about a millisecond, so the crash lands while
     * the rule is still delivering. */
    it_write_file(cfg, "lanes.auto = true\n"
                       "set \"s\" { partitions = 2 }\n"
                       "rule \"all\" {\n"
                       "  set = \"s\",\n"
                       "  transform = function(e) local x = 0; for i = 1, 100000 do x = x + i end; "
                       "return e end,\n"
                       "  target = target.file { path = \"all.ndjson\" },\n"
                       "}\n");
    it_start_config(s, cfg, WAIT_S);
    const int n = 3000;
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "k%d", i);
        add_event(&b, id, "t", "{\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}", "");
    }
    json_decref(it_post_all(s, "s", NULL, &b, (size_t)n));
    sl_buf_free(&b);
    size_t before = 0;
    for (double end = it_mono() + WAIT_S; it_mono() < end && !before; it_sleep_ms(2))
        before = count_lines(out);
    it_srv_stop(s, SIGKILL, 5);
    before = count_lines(out);
    printf("kill -9 with %zu of %d events in the file\n", before, n);

    it_restart(s, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    int dups[2];
    size_t lines;
    count_dups(out, n, dups, &lines);
    printf("after kill -9 and restart: %zu lines, %d + %d duplicates (partitions 0 + 1)\n", lines,
           dups[0], dups[1]);
    if (dups[0] > 512 || dups[1] > 512)
        fail_msg("more duplicates than one batch (512) per partition: %d, %d", dups[0], dups[1]);

    /* A clean restart delivers nothing twice. */
    assert_int_equal(it_srv_stop(s, SIGTERM, 10) & 0xffff, 0);
    it_restart(s, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(count_lines(out), lines);
    b = (sl_buf)SL_BUF_INIT;
    for (int i = n; i < n + 100; i++) {
        char id[16];
        snprintf(id, sizeof id, "k%d", i);
        add_event(&b, id, "t", "{}", "");
    }
    json_decref(it_post_all(s, "s", NULL, &b, 100));
    sl_buf_free(&b);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(it_srv_stop(s, SIGTERM, 10) & 0xffff, 0);
    it_restart(s, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    int dups2[2];
    size_t lines2;
    count_dups(out, n + 100, dups2, &lines2);
    printf("after two clean restarts: %zu lines, %d + %d duplicates\n", lines2, dups2[0], dups2[1]);
    if (lines2 != lines + 100 || dups2[0] != dups[0] || dups2[1] != dups[1])
        fail_msg("a clean restart delivered events twice: %zu lines (want %zu), duplicates %d + "
                 "%d (were %d + %d)",
                 lines2, lines + 100, dups2[0], dups2[1], dups[0], dups[1]);
    s->passed = true;
}

/* ---- 9. SIGHUP reload ---------------------------------------------------------------------- */

static void test_sighup_reload(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], fa[PATH_MAX], fb[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    it_path(fa, s, "a.ndjson");
    it_path(fb, s, "b.ndjson");
    static const char rule_a[] = "set \"s\" { partitions = 2 }\n"
                                 "rule \"a\" { set = \"s\", target = target.file { path = "
                                 "\"a.ndjson\" } }\n";
    static const char rule_b[] = "rule \"b\" {\n"
                                 "  set = \"s\",\n"
                                 "  target = target.file { path = \"b.ndjson\" },\n"
                                 "}\n";
    it_write_file(cfg, "%s", rule_a);
    it_start_config(s, cfg, WAIT_S);
    post_ids(s, "s", "p", 0, 10);
    it_wait_caught_up(s, WAIT_S);

    it_write_file(cfg, "%s%s", rule_a, rule_b);
    kill(s->pid, SIGHUP);
    wait_log(s, "reloaded");
    post_ids(s, "s", "q", 0, 10);
    it_wait_caught_up(s, WAIT_S);
    expect_ids(fa, {"p", 0, 10}, {"q", 0, 10}); /* nothing skipped or repeated across the reload */
    expect_ids(fb, {"q", 0, 10});
    json_t *j = it_rules(s);
    assert_non_null(it_rule_in(j, "b"));
    json_decref(j);

    /* A mistake: the reload is refused with FILE:LINE and the old config
     * keeps running. rule_a takes lines 1-2, rule_b lines 3-6, so the key
     * is on line 9. */
    it_write_file(cfg,
                  "%s%s"
                  "rule \"c\" {\n"
                  "  set = \"s\",\n"
                  "  colour = \"blue\",\n"
                  "  target = target.file { path = \"c.ndjson\" },\n"
                  "}\n",
                  rule_a, rule_b);
    kill(s->pid, SIGHUP);
    wait_log(s, "refused");
    char where[PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:9:", cfg);
    if (!it_log_contains(s, where) || !it_log_contains(s, "colour"))
        fail_msg("the refused reload does not name %s and the key \"colour\"", where);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    post_ids(s, "s", "r", 0, 10);
    it_wait_caught_up(s, WAIT_S);
    expect_ids(fa, {"p", 0, 10}, {"q", 0, 10}, {"r", 0, 10});
    expect_ids(fb, {"q", 0, 10}, {"r", 0, 10});
    j = it_rules(s);
    assert_null(it_rule_in(j, "c"));
    json_decref(j);
    s->passed = true;
}

/* ---- 10. schemas at ingest ------------------------------------------------------------------- */

static void expect_entry_error(json_t *answer, size_t i, const char *code, const char *want)
{
    const char *e = json_string_value(json_object_get(it_result(answer, i), "error"));
    const char *m = json_string_value(json_object_get(it_result(answer, i), "message"));
    if (!e || strcmp(e, code) != 0)
        fail_msg("entry %zu: want %s, got %s (%s)", i, code, e ? e : "success", m ? m : "");
    if (want && (!m || !strstr(m, want)))
        fail_msg("entry %zu: message \"%s\" does not mention %s", i, m ? m : "", want);
}

static void test_schemas(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], schema[PATH_MAX];
    make_dir(s, "schemas");
    it_path(cfg, s, "sluice.lua");
    it_path(schema, s, "schemas/order.json");
    it_write_file(schema,
                  "{\"type\": \"object\", \"required\": [\"amount\"],\n"
                  " \"properties\": {\"amount\": {\"type\": \"number\", \"minimum\": 0}}}\n");
    it_write_file(cfg, "lanes.auto = true\n"
                       "set \"orders\" {\n"
                       "  partitions = 1,\n"
                       "  schemas = { [\"order.created\"] = \"schemas/order.json\" },\n"
                       "}\n");
    it_start_config(s, cfg, WAIT_S);
    sl_buf b = SL_BUF_INIT;
    add_event(&b, "v0", "order.created", "{\"amount\":5}", "");
    add_event(&b, "x1", "order.created", "{\"amount\":-1}", "");
    add_event(&b, "x2", "order.created", "{\"total\":3}", "");
    add_event(&b, "x3", "order.created", "{\"amount\":\"7\"}", "");
    add_event(&b, "o4", "order.cancelled", "{\"amount\":\"not checked\"}", "");
    add_event(&b, "v5", "order.created", "{\"amount\":0.5,\"extra\":true}", "");
    add_event(&b, "x6", "order.created", NULL, "");
    it_resp r = it_post(s, "orders", IT_CT_NDJSON, NULL, (const char *)b.data, b.len);
    sl_buf_free(&b);
    json_t *a = it_expect_results(&r, 3, 4);
    it_resp_free(&r);
    for (size_t i = 1; i <= 3; i++)
        expect_entry_error(a, i, "SchemaViolation", "/data");
    expect_entry_error(a, 6, "SchemaViolation", "/data");
    static const size_t good[] = {0, 4, 5};
    static const char *const good_ids[] = {"v0", "o4", "v5"};
    for (size_t k = 0; k < 3; k++) {
        char q[64];
        snprintf(q, sizeof q, "offset=%lld&max=1", (long long)it_res_off(a, good[k]));
        it_evs e = it_read_events(s, "orders", it_res_part(a, good[k]), q);
        assert_int_equal(e.n, 1);
        assert_string_equal(e.v[0].id, good_ids[k]);
        it_evs_free(&e);
    }
    it_evs e = it_read_all(s, "orders", 0, "*");
    assert_int_equal(e.n, 3);
    it_evs_free(&e);
    json_decref(a);
    r = it_get(s, "/metrics");
    assert_true(
        it_metric(it_body(&r), "sluice_events_rejected_total{reason=\"SchemaViolation\"}") == 4);
    it_resp_free(&r);
    s->passed = true;
}

/* ---- 11. POST /v1/patterns/test -----------------------------------------------------------------
 */

static it_resp pattern_test(it_server *s, const char *body)
{
    it_resp r;
    it_call k = {.path = "/v1/patterns/test",
                 .ctype = "application/json",
                 .body = body,
                 .len = strlen(body)};
    if (it_http(NULL, s->port, &k, &r))
        fail_msg("POST /v1/patterns/test: %s", r.err);
    return r;
}

static void test_pattern_test_api(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL); /* no config needed */
    static const struct {
        const char *body;
        bool match;
    } ok[] = {
        {"{\"pattern\":{\"type\":[\"order.created\"]},\"event\":{\"type\":\"order.created\"}}",
         true},
        {"{\"pattern\":{\"type\":[\"order.created\"]},\"event\":{\"type\":\"order.cancelled\"}}",
         false},
        {"{\"pattern\":{\"data\":{\"amount\":[{\"numeric\":[\">\",100]}]}},"
         "\"event\":{\"data\":{\"amount\":150}}}",
         true},
        {"{\"pattern\":{\"data\":{\"amount\":[{\"numeric\":[\">\",100]}]}},"
         "\"event\":{\"data\":{\"amount\":100}}}",
         false},
        {"{\"event\":{\"source\":\"/shop\"},\"pattern\":{\"source\":[{\"prefix\":\"/sh\"}]}}",
         true},
        /* the pattern, and the event, as JSON strings */
        {"{\"pattern\":\"{\\\"type\\\":[\\\"a\\\"]}\",\"event\":{\"type\":\"a\"}}", true},
        {"{\"pattern\":\"{\\\"type\\\":[\\\"a\\\"]}\",\"event\":{\"type\":\"b\"}}", false},
        {"{\"pattern\":\"{\\\"type\\\":[\\\"a\\\"]}\",\"event\":\"{\\\"type\\\":\\\"a\\\"}\"}",
         true},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        it_resp r = pattern_test(s, ok[i].body);
        if (r.status != 200)
            fail_msg("%s: answered %ld: %s", ok[i].body, r.status, it_body(&r));
        json_t *j = it_parse_json(&r);
        json_t *m = json_object_get(j, "match");
        if (!json_is_boolean(m) || json_is_true(m) != ok[i].match)
            fail_msg("%s: want {\"match\":%s}, got %s", ok[i].body, ok[i].match ? "true" : "false",
                     it_body(&r));
        json_decref(j);
        it_resp_free(&r);
    }
    static const char *const invalid[] = {
        "{\"pattern\":{\"a\":\"not-a-list\"},\"event\":{}}",
        "{\"pattern\":{\"a\":[{\"numeric\":[\">\"]}]},\"event\":{}}",
        "{\"pattern\":{\"a\":[{\"nosuchop\":1}]},\"event\":{}}",
        "{\"pattern\":\"{oops\",\"event\":{}}",
    };
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
        it_resp r = pattern_test(s, invalid[i]);
        if (r.status != 400)
            fail_msg("%s: want 400 InvalidPattern, got %ld: %s", invalid[i], r.status, it_body(&r));
        it_expect_error(&r, 400, "InvalidPattern");
        it_resp_free(&r);
    }
    /* Not the shape asked for. */
    it_resp r = pattern_test(s, "{\"pattern\":{\"a\":[1]}}");
    it_expect_error(&r, 400, NULL);
    it_resp_free(&r);
    r = pattern_test(s, "not json");
    it_expect_error(&r, 400, NULL);
    it_resp_free(&r);
    s->passed = true;
}

/* ---- 12. sluice check -------------------------------------------------------------------------
 */

/* Runs `sluice check path`; its stdout and stderr go to *out (caller
 * frees). Returns the exit status, or -1 when it did not exit normally in
 * time. */
static int run_check(const it_server *s, const char *path, char **out)
{
    return it_run(s, NULL, out, NULL, (const char *const[]){"check", path, NULL}, WAIT_S);
}

static void test_check(void **state)
{
    it_server *s = *state;
    /* Every case: the config, then the line its mistake is on and words the
     * message must have. */
    static const struct {
        const char *name, *text;
        int line;
        const char *want1, *want2;
    } bad[] = {
        {"unknown-key",
         "set \"x\" { partitions = 2 }\n\nrule \"r\" {\n  set = \"x\",\n  colour = \"blue\",\n"
         "  target = target.file { path = \"x.ndjson\" },\n}\n",
         5, "colour", "unknown key"},
        {"bad-pattern",
         "set \"x\" { }\nrule \"r\" {\n  set = \"x\",\n  match = { a = { { numeric = { \">\" } } } "
         "},\n  target = target.file { path = \"x.ndjson\" },\n}\n",
         4, "match", "numeric"},
        {"bad-pattern-string",
         "set \"x\" { }\nrule \"r\" {\n  set = \"x\",\n  target = target.file { path = "
         "\"x.ndjson\" },\n  match = [[{\"a\": \"not-a-list\"}]],\n}\n",
         5, "match", "a"},
        {"missing-schema",
         "set \"x\" {\n  partitions = 1,\n  schemas = { [\"t\"] = \"nope/missing.json\" },\n}\n", 3,
         "missing.json", "t"},
        {"unknown-target",
         "set \"x\" { }\nrule \"r\" {\n  set = \"x\",\n  target = target.nope { },\n}\n", 4,
         "target.nope", "rule \"r\""},
        {"undeclared-set",
         "set \"x\" { }\nrule \"r\" {\n  set = \"y\",\n  target = target.file { path = "
         "\"x.ndjson\" },\n}\n",
         3, "\"y\"", "not declared"},
        {"undeclared-target-set",
         "set \"x\" { }\nrule \"r\" {\n  set = \"x\",\n  target = target.set { set = \"z\" },\n}\n",
         4, "\"z\"", "not declared"},
        {"syntax",
         "set \"x\" { }\n\nrule \"r\" {\n  set = \"x\"\n  target = target.file { path = "
         "\"x.ndjson\" },\n}\n",
         5, "expected", NULL},
        {"wrong-type", "set \"x\" {\n  partitions = \"many\",\n}\n", 2, "partitions", "integer"},
        {"bad-duration", "set \"x\" {\n  partitions = 1,\n  retention = \"7 fortnights\",\n}\n", 3,
         "retention", NULL},
        {"runtime-error", "set \"x\" { }\nlocal t = nil\nlocal y = t.field\n", 3, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[PATH_MAX], file[64], where[PATH_MAX + 16];
        snprintf(file, sizeof file, "%s.lua", bad[i].name);
        it_path(path, s, file);
        it_write_file(path, "%s", bad[i].text);
        char *out;
        int rc = run_check(s, path, &out);
        snprintf(where, sizeof where, "%s:%d:", path, bad[i].line);
        printf("sluice check %s -> %d: %s", file, rc, out);
        if (rc != 1)
            fail_msg("%s: sluice check exited %d, want 1: %s", bad[i].name, rc, out);
        if (!strstr(out, where))
            fail_msg("%s: the report does not say %s: %s", bad[i].name, where, out);
        if ((bad[i].want1 && !strstr(out, bad[i].want1)) ||
            (bad[i].want2 && !strstr(out, bad[i].want2)))
            fail_msg("%s: the report does not mention %s / %s: %s", bad[i].name,
                     bad[i].want1 ? bad[i].want1 : "", bad[i].want2 ? bad[i].want2 : "", out);
        free(out);
    }
    /* Several mistakes are all reported at once. */
    char path[PATH_MAX];
    it_path(path, s, "many.lua");
    it_write_file(path, "set \"x\" { colour = 1 }\n"
                        "rule \"r\" {\n  set = \"x\",\n  shade = 2,\n"
                        "  target = target.file { path = \"x.ndjson\" },\n}\n");
    char *out;
    assert_int_equal(run_check(s, path, &out), 1);
    char w1[PATH_MAX + 16], w2[PATH_MAX + 16];
    snprintf(w1, sizeof w1, "%s:1:", path);
    snprintf(w2, sizeof w2, "%s:4:", path);
    if (!strstr(out, w1) || !strstr(out, w2))
        fail_msg("not every mistake is reported: %s", out);
    free(out);
    /* A good config. */
    make_dir(s, "schemas");
    char schema[PATH_MAX];
    it_path(schema, s, "schemas/t.json");
    it_write_file(schema, "{\"type\":\"object\"}\n");
    it_path(path, s, "good.lua");
    it_write_file(path, "server { lua_memory = \"16MiB\" }\n"
                        "set \"orders\" { partitions = 2, retention = \"7d\",\n"
                        "  schemas = { [\"t\"] = \"schemas/t.json\" } }\n"
                        "set \"audit\" { partitions = 1 }\n"
                        "rule \"big-orders\" {\n"
                        "  set = \"orders\",\n"
                        "  match = { type = { \"order.created\" }, data = { amount = { { numeric = "
                        "{ \">\", 100 } } } } },\n"
                        "  transform = function(e) e.data.vip = true; return e end,\n"
                        "  target = target.file { path = \"out/big.ndjson\" },\n"
                        "}\n"
                        "rule \"copy\" { set = \"orders\", input = \"$.data\",\n"
                        "  targets = { target.set { set = \"audit\" } } }\n");
    int rc = run_check(s, path, &out);
    if (rc != 0 || !strstr(out, "ok"))
        fail_msg("sluice check on a good config exited %d: %s", rc, out);
    free(out);
    s->passed = true;
}

/* ---- 13. ready means wired ---------------------------------------------------------------- */

/* Starts `sluice serve -c cfg --data data --listen 127.0.0.1:port` without
 * waiting for anything (output appended to s->log); s->pid is set so the
 * teardown kills it. A port of -1 (it_free_port() found none) fails the
 * test. */
static void spawn_raw(it_server *s, const char *cfg, const char *data, int port)
{
    if (port < 0)
        fail_msg("cannot find a free port: %s", strerror(errno));
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execl(it_bin(), it_bin(), "serve", "-c", cfg, "--data", data, "--listen", listen,
              (char *)NULL);
        _exit(127);
    }
    close(fd);
    assert_true(pid > 0);
    s->pid = pid;
    s->port = port;
}

#define RACERS 4

/* One client posting until the server answers (in its own thread: never
 * asserts). */
typedef struct racer {
    int port;
    const char *body;
    size_t len;
    it_resp r;
} racer;

static void *racer_main(void *arg)
{
    racer *rc = arg;
    it_call k = {.path = "/v1/sets/orders/events",
                 .ctype = IT_CT_NDJSON,
                 .body = rc->body,
                 .len = rc->len,
                 .timeout_ms = 5000};
    for (double end = it_mono() + WAIT_S; it_mono() < end;) {
        if (it_http(NULL, rc->port, &k, &rc->r) == 0 && rc->r.status)
            return NULL;
        it_resp_free(&rc->r);
        memset(&rc->r, 0, sizeof rc->r);
    }
    return NULL;
}

/* When /healthz (or any request) is answered, the server must already check
 * schemas and wake rules on appends. sl_serve_main() installs both hooks
 * (sl_http_set_hooks(), sl_databus_set_on_append()) only after
 * sl_http_start() has opened the port: a request that arrives in between is
 * stored without its schema check, and its append never wakes the rules
 * (they stall until the next append). This posts as soon as the port opens,
 * from several clients over several starts, to land in that window. */
/* ---- 14. replays and dead letters of failed evaluations ---------------------------------- */

static const char replay_cfg[] =
    "lanes.auto = true\n"
    "set \"in\" { partitions = 2 }\n"
    "set \"dead\" { partitions = 1 }\n"
    "rule \"copy\" { set = \"in\", target = target.file { path = \"out/copy.ndjson\" } }\n"
    "rule \"picky\" {\n"
    "  set = \"in\", dlq = \"dead\",\n"
    "  transform = function(e) if e.data.bad then error(\"bad event \" .. e.id) end return e end,\n"
    "  target = target.file { path = \"out/picky.ndjson\" },\n"
    "}\n"
    "rule \"careless\" {\n"
    "  set = \"in\",\n"
    "  transform = function(e) if e.data.bad then error(\"bad\") end return e end,\n"
    "  target = target.file { path = \"out/careless.ndjson\" },\n"
    "}\n";

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Posts n events "PREFIXk" (every tenth with data.bad) and returns. */
static void post_batch(it_server *s, const char *prefix, int n)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s%d", prefix, i);
        add_event(&b, id, "t", i % 10 == 3 ? "{\"bad\":true}" : "{\"bad\":false}", "");
    }
    json_decref(it_post_all(s, "in", NULL, &b, (size_t)n));
    sl_buf_free(&b);
}

/* POST /v1/rules/RULE/replay with body; returns the status and the parsed
 * answer in *j (NULL unless 2xx; caller frees). */
static long start_replay(it_server *s, const char *rule, const char *body, json_t **j)
{
    CURL *c = curl_easy_init();
    char path[256];
    snprintf(path, sizeof path, "/v1/rules/%s/replay", rule);
    it_call k = {.method = "POST",
                 .path = path,
                 .ctype = "application/json",
                 .body = body,
                 .len = strlen(body)};
    it_resp r = {0};
    if (it_http(c, s->port, &k, &r))
        fail_msg("POST %s: no answer", path);
    curl_easy_cleanup(c);
    *j = r.status / 100 == 2 ? it_parse_json(&r) : NULL;
    long st = r.status;
    if (st / 100 != 2)
        print_message("POST %s %s -> %ld %s\n", path, body, st, it_body(&r));
    it_resp_free(&r);
    return st;
}

/* Waits until replay id of rule is done; returns its entry (caller frees). */
static json_t *wait_replay(it_server *s, const char *rule, const char *id)
{
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(20)) {
        it_resp r = it_get(s, "/v1/rules/%s/replays", rule);
        json_t *j = it_parse_json(&r);
        it_resp_free(&r);
        json_t *e;
        size_t i;
        json_array_foreach(json_object_get(j, "replays"), i, e)
        {
            const char *eid = json_string_value(json_object_get(e, "id"));
            const char *st = json_string_value(json_object_get(e, "state"));
            if (eid && strcmp(eid, id) == 0 && st && strcmp(st, "done") == 0) {
                json_incref(e);
                json_decref(j);
                return e;
            }
        }
        json_decref(j);
    }
    fail_msg("replay %s did not finish within %.0f s", id, WAIT_S);
    return NULL;
}

/* Counts the lines of an output file whose id starts with prefix and whose
 * sluicereplay is replay (NULL: lines without one). */
static size_t count_out(const char *path, const char *prefix, const char *replay)
{
    outlines o = read_out(path);
    size_t n = 0;
    for (size_t i = 0; i < o.n; i++) {
        const char *id = o.obj[i] ? jstr(o.obj[i], "id") : NULL;
        const char *rp = o.obj[i] ? jstr(o.obj[i], "sluicereplay") : NULL;
        if (id && strncmp(id, prefix, strlen(prefix)) == 0 &&
            (replay ? rp && strcmp(rp, replay) == 0 : !rp))
            n++;
    }
    out_free(&o);
    return n;
}

static void test_replay(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], copy[PATH_MAX], picky[PATH_MAX];
    make_dir(s, "out");
    it_path(cfg, s, "sluice.lua");
    it_path(copy, s, "out/copy.ndjson");
    it_path(picky, s, "out/picky.ndjson");
    it_write_file(cfg, "%s", replay_cfg);
    it_start_config(s, cfg, WAIT_S);

    /* Three batches in three time windows. */
    post_batch(s, "a", 20);
    it_sleep_ms(30);
    int64_t t1 = now_ms();
    it_sleep_ms(30);
    post_batch(s, "b", 20);
    it_sleep_ms(30);
    int64_t t2 = now_ms();
    it_sleep_ms(30);
    post_batch(s, "c", 20);
    it_wait_caught_up(s, WAIT_S);
    json_t *before = it_rules(s);
    json_int_t delivered = jint(it_rule_in(before, "copy"), "delivered");
    json_t *curs = json_deep_copy(json_object_get(it_rule_in(before, "copy"), "partitions"));
    json_decref(before);
    assert_int_equal(delivered, 60);

    /* The window [t1, t2) holds batch b only. */
    char body[128];
    snprintf(body, sizeof body, "{\"from\":%lld,\"to\":%lld}", (long long)t1, (long long)t2);
    json_t *a = NULL;
    assert_int_equal(start_replay(s, "copy", body, &a), 202);
    char id[32];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(a, "id")));
    json_decref(a);
    /* A second replay of the whole history at the same time, as RFC 3339. */
    char from[64];
    time_t secs = (time_t)(t1 / 1000 - 3600);
    strftime(from, sizeof from, "%Y-%m-%dT%H:%M:%SZ", gmtime(&secs));
    snprintf(body, sizeof body, "{\"from\":\"%s\"}", from);
    assert_int_equal(start_replay(s, "copy", body, &a), 202);
    char id2[32];
    snprintf(id2, sizeof id2, "%s", json_string_value(json_object_get(a, "id")));
    json_decref(a);
    assert_string_not_equal(id, id2);

    json_t *done = wait_replay(s, "copy", id);
    assert_int_equal(jint(done, "delivered"), 20);
    json_decref(done);
    done = wait_replay(s, "copy", id2);
    assert_int_equal(jint(done, "delivered"), 60);
    json_decref(done);
    /* Batch b once more, marked; the others only by the whole-history replay. */
    assert_int_equal(count_out(copy, "b", id), 20);
    assert_int_equal(count_out(copy, "a", id), 0);
    assert_int_equal(count_out(copy, "c", id), 0);
    assert_int_equal(
        count_out(copy, "a", id2) + count_out(copy, "b", id2) + count_out(copy, "c", id2), 60);
    assert_int_equal(count_out(copy, "", NULL), 60);
    /* The live cursor did not move, and the live counters did not count it. */
    json_t *after = it_rules(s);
    assert_true(json_equal(curs, json_object_get(it_rule_in(after, "copy"), "partitions")));
    assert_int_equal(jint(it_rule_in(after, "copy"), "delivered"), 60);
    json_decref(after);
    json_decref(curs);

    /* The CLI, with the window as epoch ms, follows it to the end. */
    char port[16], server[64], f1[32], f2[32];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(server, sizeof server, "http://127.0.0.1:%d", s->port);
    snprintf(f1, sizeof f1, "%lld", (long long)t1);
    snprintf(f2, sizeof f2, "%lld", (long long)t2);
    char *out = NULL;
    int st = it_run(s, NULL, &out, NULL,
                    (const char *const[]){"replay", "picky", "--from", f1, "--to", f2, "--server",
                                          server, NULL},
                    WAIT_S);
    print_message("sluice replay -> %d: %s", st, out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "20/20 events"));
    assert_non_null(strstr(out, "18 delivered, 2 dead-lettered"));
    assert_non_null(strstr(out, "done"));
    free(out);

    /* Mistakes. */
    assert_int_equal(start_replay(s, "nope", "{\"from\":0}", &a), 404);
    assert_int_equal(start_replay(s, "copy", "{}", &a), 400);
    snprintf(body, sizeof body, "{\"from\":%lld,\"to\":%lld}", (long long)t2, (long long)t1);
    assert_int_equal(start_replay(s, "copy", body, &a), 400);
    assert_int_equal(start_replay(s, "copy", "{\"from\":\"yesterday\"}", &a), 400);
    st = it_run(s, NULL, &out, NULL,
                (const char *const[]){"replay", "copy", "--from", "soon", "--server", server, NULL},
                WAIT_S);
    assert_int_equal(st, 2);
    free(out);
    (void)port;
    s->passed = true;
}

/* An event the rule's transform fails on goes to the dlq with the error;
 * without a dlq it is discarded and counted. */
static void test_failed_eval_dead_letters(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], picky[PATH_MAX];
    make_dir(s, "out");
    it_path(cfg, s, "sluice.lua");
    it_path(picky, s, "out/picky.ndjson");
    it_write_file(cfg, "%s", replay_cfg);
    it_start_config(s, cfg, WAIT_S);
    post_batch(s, "x", 30);
    it_wait_caught_up(s, WAIT_S);
    assert_int_equal(count_out(picky, "x", NULL), 27);
    it_evs d = it_read_all(s, "dead", 0, "*");
    assert_int_equal(d.n, 3);
    for (size_t i = 0; i < d.n; i++) {
        json_t *e = json_loads(d.v[i].text, 0, NULL);
        assert_non_null(e);
        assert_non_null(strstr(jstr(e, "sluiceerror"), "bad event"));
        assert_string_equal(jstr(e, "sluicerule"), "picky");
        assert_string_equal(jstr(e, "sluicetarget"), "rule");
        assert_int_equal(jint(e, "sluiceattempts"), 1);
        assert_non_null(jstr(e, "sluicefailedat"));
        assert_true(json_is_true(jpath(e, "data.bad")));
        assert_string_equal(jstr(e, "source"), "/shop");
        json_decref(e);
    }
    it_evs_free(&d);
    json_t *rules = it_rules(s);
    json_t *p = it_rule_in(rules, "picky"), *c = it_rule_in(rules, "careless");
    assert_int_equal(jint(p, "dead_lettered"), 3);
    assert_int_equal(jint(p, "failed"), 3);
    assert_int_equal(jint(c, "discarded"), 3);
    assert_int_equal(jint(c, "dead_lettered"), 0);
    assert_string_equal(jstr(p, "dlq"), "dead");
    assert_true(json_is_null(json_object_get(c, "dlq")));
    json_decref(rules);
    it_resp m = it_get(s, "/metrics");
    assert_int_equal((int)it_metric(it_body(&m), "sluice_rule_discarded_total{rule=\"careless\"}"),
                     3);
    assert_int_equal((int)it_metric(it_body(&m), "sluice_rule_dead_lettered_total{rule=\"picky\"}"),
                     3);
    it_resp_free(&m);
    assert_true(it_log_contains(s, "dropped (the rule has no dlq)"));
    s->passed = true;
}

static void test_ready_means_wired(void **state)
{
    it_server *s = *state;
    char schema[PATH_MAX];
    make_dir(s, "schemas");
    it_path(schema, s, "schemas/order.json");
    it_write_file(schema, "{\"type\":\"object\",\"required\":[\"amount\"],"
                          "\"properties\":{\"amount\":{\"type\":\"number\",\"minimum\":0}}}\n");
    static const char body[] =
        "{\"specversion\":\"1.0\",\"id\":\"bad\",\"source\":\"/s\",\"type\":\"order.created\","
        "\"data\":{\"amount\":-1}}\n"
        "{\"specversion\":\"1.0\",\"id\":\"good\",\"source\":\"/s\",\"type\":\"order.created\","
        "\"data\":{\"amount\":1}}\n";
    int attempts = 0, unchecked = 0, stalled = 0;
    char first_unchecked[512] = "", first_stall[1024] = "";
    double until = it_mono() + 15;
    for (; attempts < 40 && it_mono() < until && !(unchecked && stalled); attempts++) {
        char cfg[PATH_MAX], data[PATH_MAX], name[64];
        snprintf(name, sizeof name, "race%d.lua", attempts);
        it_path(cfg, s, name);
        snprintf(name, sizeof name, "data%d", attempts);
        it_path(data, s, name);
        it_write_file(cfg,
                      "lanes.auto = true\n"
                      "set \"orders\" { partitions = 1,\n"
                      "  schemas = { [\"order.created\"] = \"schemas/order.json\" } }\n"
                      "rule \"all\" { set = \"orders\", target = target.file { path = "
                      "\"race%d.ndjson\" } }\n",
                      attempts);
        spawn_raw(s, cfg, data, it_free_port());
        /* Several clients post as soon as the port takes connections. */
        racer rc[RACERS];
        pthread_t th[RACERS];
        for (int i = 0; i < RACERS; i++) {
            rc[i] = (racer){.port = s->port, .body = body, .len = sizeof body - 1};
            if (pthread_create(&th[i], NULL, racer_main, &rc[i]))
                fail_msg("pthread_create failed");
        }
        for (int i = 0; i < RACERS; i++)
            pthread_join(th[i], NULL);
        bool skipped = false;
        for (int i = 0; i < RACERS; i++) {
            if (!rc[i].r.status)
                fail_msg("attempt %d: the server never answered a POST", attempts);
            json_t *a = it_parse_json(&rc[i].r);
            if (json_integer_value(json_object_get(a, "accepted")) != 1 && !skipped) {
                skipped = true;
                if (!unchecked)
                    snprintf(first_unchecked, sizeof first_unchecked, "%s", it_body(&rc[i].r));
            }
            json_decref(a);
            it_resp_free(&rc[i].r);
        }
        unchecked += skipped;
        /* The append must reach the rule without any further event. */
        bool caught_up = false;
        char last[1024] = "";
        for (double end = it_mono() + 3; !caught_up && it_mono() < end; it_sleep_ms(20)) {
            it_resp g = it_get(s, "/v1/rules");
            json_t *j = json_loads(it_body(&g), 0, NULL);
            json_t *rl = it_rule_in(j, "all");
            caught_up = rl && json_integer_value(json_object_get(rl, "lag")) == 0 &&
                        json_integer_value(json_object_get(rl, "read")) > 0;
            snprintf(last, sizeof last, "%s", it_body(&g));
            json_decref(j);
            it_resp_free(&g);
        }
        if (!caught_up && !stalled++)
            snprintf(first_stall, sizeof first_stall, "%s", last);
        it_srv_stop(s, SIGKILL, 5);
    }
    printf("ready-means-wired: %d starts, %d stored a schema-violating event, %d stalled rules\n",
           attempts, unchecked, stalled);
    if (unchecked || stalled)
        fail_msg("a request answered right after the port opened bypassed the wiring: %d/%d "
                 "starts skipped the schema check (first answer: %s), %d/%d left the rule "
                 "stalled with lag > 0 for 3 s (GET /v1/rules: %s)",
                 unchecked, attempts, first_unchecked, stalled, attempts, first_stall);
    s->passed = true;
}

/* ---- main -------------------------------------------------------------------------------------
 */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_rules"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_routing),
        T(test_file_target_new_folder),
        T(test_fanout_drop_filter),
        T(test_sandbox_holds),
        T(test_rules_api),
        T(test_target_set),
        T(test_target_set_small_buffer),
        T(test_input_transformer),
        T(test_start_beginning),
        T(test_cursor_kill9),
        T(test_sighup_reload),
        T(test_schemas),
        T(test_pattern_test_api),
        T(test_check),
        T(test_ready_means_wired),
        T(test_replay),
        T(test_failed_eval_dead_letters),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
