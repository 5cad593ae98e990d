/*
 * tests/integration/test_sandbox_escape.c — escape attempts against the Lua
 * sandbox of the real server (issue 8 §3): rule functions and config files
 * that try bytecode (string.dump, load of a binary chunk), the strings'
 * shared metatable, `debug`, coroutine bombs, deep recursion, huge
 * string.rep, os.exit, io, package, finalizers, and values whose
 * metamethods loop where the server reads them (an error object's
 * __tostring, a returned table's __index/__pairs/__len, cycles, deep
 * nesting).
 *
 * Each attempt must be refused with a reason that names it, have no effect
 * outside the sandbox (no file made, the process alive), and leave the
 * server healthy: /healthz answers, a plain rule beside the hostile ones
 * delivers every event, and the next events go through the same workers.
 * Unit-level checks of each guard are in tests/unit/test_sandbox.c; this
 * suite proves them end to end, through the rule runner and the config
 * loader (`sluice check`, SIGHUP).
 */
#include "itest.h"

#include "core/base/buf.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_S 30.0

typedef struct attack {
    const char *name;
    const char *kind; /* "transform" or "filter" */
    const char *body; /* %s: a path the attack tries to create */
    const char *reason;
} attack;

/* Every one runs per event; the server must refuse each for every event. */
static const attack rule_attacks[] = {
    {"dump", "transform", "local b = string.dump(function() return 1 end); return e", "dump"},
    {"load-binary", "transform",
     "local f, m = load(string.char(27) .. 'LuaT' .. string.rep('\\0', 40)); "
     "if f then f() end; error('load said: ' .. tostring(m))",
     "binary"},
    {"load-mode-b", "transform", "assert(load('return 1', 'x', 'b')); return e",
     "only text chunks"},
    {"string-meta", "transform", "getmetatable('').__index = { upper = os.exit }; return e",
     "boolean"},
    {"string-meta-set", "transform", "setmetatable('', {}); return e", "table expected"},
    {"debug", "transform", "debug.sethook(); return e", "'debug'"},
    {"debug-registry", "filter", "return debug.getregistry() ~= nil", "'debug'"},
    {"os-exit", "transform", "os.exit(7); return e", "exit"},
    {"os-execute", "transform", "os.execute('touch %s'); return e", "execute"},
    {"io", "transform", "io.open('%s', 'w'); return e", "'io'"},
    {"package", "transform", "package.loadlib('libc.so.6', 'system'); return e", "'package'"},
    {"require", "transform", "require('io'); return e", "require"},
    {"gc", "transform", "setmetatable({}, { __gc = function() while true do end end }); return e",
     "__gc"},
    {"gc-stop", "transform", "collectgarbage('stop'); return e", "collectgarbage"},
    {"co-bomb", "transform", "local function b() coroutine.wrap(b)() end; b(); return e",
     "nested calls) "},
    {"co-many", "transform",
     "local t = {}; for i = 1, 10000000 do t[i] = coroutine.create(print) end; return e", "memory"},
    {"co-spin", "transform",
     "local co = coroutine.wrap(function() while true do coroutine.yield() end end); "
     "while true do co() end",
     "instruction budget"},
    {"recursion", "transform", "local function f(n) return 1 + f(n + 1) end; return f(1)",
     "memory"},
    {"rep-huge", "transform", "local s = string.rep('x', 1 << 40); return e", "too large"},
    {"rep-cap", "transform", "local s = string.rep('x', 100 * 1024 * 1024); return e", "memory"},
    {"rep-sep", "transform", "local s = string.rep('', 1 << 30, 'x'); return e", "memory"},
    {"pattern", "transform",
     "local s = string.rep('a', 5000); s:find(string.rep('a*', 200) .. 'b'); return e",
     "pattern too complex"},
    {"err-tostring", "transform",
     "error(setmetatable({}, { __tostring = function() while true do end end }))",
     "instruction budget"},
    {"cycle", "transform", "local t = {}; t.x = t; return t", "nesting"},
    {"deep", "transform",
     "local t = {}; local c = t; for i = 1, 100000 do c.x = {}; c = c.x end; return t", "nesting"},
    {"pcall-spin", "transform", "pcall(function() while true do end end); return e",
     "instruction budget"},
    {"xpcall-spin", "transform",
     "xpcall(function() while true do end end, function() while true do end end); return e",
     "instruction budget"},
};

/* Returned values whose metamethods loop: the server reads them raw (the
 * JSON encoder never calls __index, __pairs or __len), so these are not
 * failures but must neither hang a worker nor deliver anything odd. */
static const attack quiet_attacks[] = {
    {"meta-index", "transform",
     "return setmetatable({}, { __index = function() while true do end end })", NULL},
    {"meta-pairs", "transform",
     "e.data = setmetatable({ k = 2 }, { __pairs = function() while true do end end, "
     "__len = function() while true do end end }); return e",
     NULL},
    {"proxy-meta", "filter", "return getmetatable(e) == nil", NULL},
};

#define NRULE (sizeof rule_attacks / sizeof *rule_attacks)
#define NQUIET (sizeof quiet_attacks / sizeof *quiet_attacks)

static void add_rule(sl_buf *c, const attack *a, const char *pwned)
{
    char body[1024];
    snprintf(body, sizeof body, a->body, pwned);
    sl_buf_printf(c,
                  "rule \"%s\" {\n  set = \"s\",\n  %s = function(e) %s end,\n"
                  "  target = target.file { path = \"%s.ndjson\" },\n}\n",
                  a->name, a->kind, body, a->name);
}

static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = 0;
    int ch;
    while ((ch = getc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

static json_int_t jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

static void post_round(it_server *s, int round, int n)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"r%d-%d\",\"source\":\"/t\","
                      "\"type\":\"t\",\"data\":{\"k\":1}}\n",
                      round, i);
    json_decref(it_post_all(s, "s", NULL, &b, (size_t)n));
    sl_buf_free(&b);
}

/* Rule functions: every attack refused per event, for every event, the
 * plain rule beside them delivering all, the process still serving. */
static void test_rule_attacks(void **state)
{
    it_server *s = *state;
    char cfg[PATH_MAX], pwned[PATH_MAX], p[PATH_MAX];
    it_path(pwned, s, "pwned");
    sl_buf c = SL_BUF_INIT;
    sl_buf_printf(&c, "server { lua_memory = \"8MiB\", lua_instructions = 1000000, workers = 2 }\n"
                      "set \"s\" { partitions = 2 }\n");
    for (size_t i = 0; i < NRULE; i++)
        add_rule(&c, &rule_attacks[i], pwned);
    for (size_t i = 0; i < NQUIET; i++)
        add_rule(&c, &quiet_attacks[i], pwned);
    sl_buf_printf(&c, "rule \"plain\" { set = \"s\", target = target.file { path = "
                      "\"plain.ndjson\" } }\n");
    it_write_config(s, cfg, "%.*s", (int)c.len, (const char *)c.data);
    sl_buf_free(&c);
    it_start_config(s, cfg, WAIT_S);
    pid_t pid = s->pid;

    const int per_round = 6, rounds = 2;
    for (int round = 0; round < rounds; round++) {
        post_round(s, round, per_round);
        it_wait_caught_up(s, 120);
        assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    }
    const json_int_t total = per_round * rounds;
    assert_int_equal(kill(pid, 0), 0); /* the same process: os.exit did not run */

    json_t *j = it_rules(s);
    int bad = 0;
    for (size_t i = 0; i < NRULE; i++) {
        const attack *a = &rule_attacks[i];
        json_t *r = it_rule_in(j, a->name);
        assert_non_null(r);
        const char *le = json_string_value(json_object_get(r, "last_error"));
        if (jint(r, "failed") != total || jint(r, "delivered") != 0 || !le ||
            !strstr(le, a->reason)) {
            printf("attack %s: want %lld failed, none delivered, last_error naming \"%s\": %s\n",
                   a->name, (long long)total, a->reason, le ? le : "(none)");
            bad++;
            continue;
        }
        char file[64];
        snprintf(file, sizeof file, "%s.ndjson", a->name);
        it_path(p, s, file);
        if (count_lines(p))
            fail_msg("attack %s delivered %zu lines", a->name, count_lines(p));
        const char *why = strstr(le, "at rule: "); /* past "dropped … after 1 attempt(s)" */
        printf("refused: %-15s %lld/%lld events: %.150s\n", a->name, (long long)jint(r, "failed"),
               (long long)total, why ? why + 9 : le);
    }
    if (bad)
        fail_msg("%d attacks were not refused as expected", bad);
    /* meta-index returns a table with no fields: an empty event, dropped;
     * meta-pairs delivers the raw table; proxy-meta sees no metatable. */
    json_t *r = it_rule_in(j, "meta-index");
    if (jint(r, "dropped") != total || jint(r, "failed") != 0)
        it_fail_rule(r, "meta-index: want every event dropped as empty");
    r = it_rule_in(j, "meta-pairs");
    if (jint(r, "delivered") != total)
        it_fail_rule(r, "meta-pairs: want every event delivered");
    r = it_rule_in(j, "proxy-meta");
    if (jint(r, "delivered") != total)
        it_fail_rule(r, "proxy-meta: getmetatable(e) must be nil for every event");
    r = it_rule_in(j, "plain");
    if (jint(r, "delivered") != total || jint(r, "failed") != 0)
        it_fail_rule(r, "plain: want all %lld delivered", (long long)total);
    json_decref(j);

    it_path(p, s, "meta-pairs.ndjson");
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char line[4096];
    size_t ok = 0;
    while (fgets(line, sizeof line, f))
        ok += strstr(line, "\"data\":{\"k\":2}") != NULL;
    fclose(f);
    assert_int_equal(ok, (size_t)total);
    if (access(pwned, F_OK) == 0)
        fail_msg("an attack created %s", pwned);
    s->passed = true;
}

/* Config files are Lua too: `sluice check` refuses each attack at its line
 * (exit 1, not the script's exit code), and a SIGHUP to one keeps the
 * running config and the process. */
static void test_config_attacks(void **state)
{
    it_server *s = *state;
    static const struct {
        const char *code, *reason;
    } bad[] = {
        {"while true do end", "instruction budget"},
        {"os.exit(3)", "exit"},
        {"local f = string.dump(print)", "dump"},
        {"debug.sethook()", "'debug'"},
        {"local s = string.rep('x', 1 << 40)", "too large"},
        {"getmetatable('').__index = {}", "boolean"},
        {"local function f() return f() + 1 end f()", "memory cap"},
        {"load(string.char(27) .. 'Lua')()", "attempt to call"},
        {"io.open('PWNED', 'w')", "'io'"},
        {"setmetatable({}, { __gc = function() end })", "__gc"},
        {"package.loadlib('libc.so.6', 'system')", "'package'"},
        {"local t = {} for i = 1, 1e8 do t[i] = coroutine.create(print) end", "memory cap"},
    };
    char cfg[PATH_MAX], badcfg[PATH_MAX], pwned[PATH_MAX];
    it_write_config(s, cfg,
                    "set \"s\" { partitions = 1 }\n"
                    "rule \"r\" { set = \"s\", target = target.file { path = "
                    "\"out.ndjson\" } }\n");
    it_start_config(s, cfg, WAIT_S);
    it_path(badcfg, s, "bad.lua");
    it_path(pwned, s, "PWNED");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        it_write_file(badcfg, "set \"s\" { partitions = 1 }\n%s\n", bad[i].code);
        char *out = NULL;
        const char *args[] = {"check", badcfg, NULL};
        int st = it_run(s, NULL, &out, NULL, args, 60);
        if (st != 1 || !strstr(out, bad[i].reason))
            fail_msg("sluice check of `%s`: exit %d (want 1), output naming \"%s\":\n%s",
                     bad[i].code, st, bad[i].reason, out);
        printf("check refused: %-40.40s %.80s", bad[i].code, out);
        free(out);
    }
    /* The server reloads the same kind of file: refused, still serving
     * the old rule. */
    it_write_file(cfg, "set \"s\" { partitions = 1 }\nos.exit(3)\n"
                       "rule \"r2\" { set = \"s\", target = target.file { path = \"x\" } }\n");
    int before = it_log_count(s, "reload");
    kill(s->pid, SIGHUP);
    for (double end = it_mono() + WAIT_S; it_mono() < end && it_log_count(s, "reload") == before;)
        it_sleep_ms(50);
    assert_true(it_log_count(s, "reload") > before);
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);
    post_round(s, 0, 5);
    it_wait_rule_int(s, "r", "delivered", 5, WAIT_S);
    json_t *j = it_rules(s);
    assert_null(it_rule_in(j, "r2"));
    json_decref(j);
    if (access(pwned, F_OK) == 0)
        fail_msg("a config attack created %s", pwned);
    s->passed = true;
}

int main(int argc, char **argv)
{
    (void)argc;
    it_init(argv[0]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rule_attacks, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_config_attacks, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
