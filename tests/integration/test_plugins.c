/*
 * tests/integration/test_plugins.c — loadable plugins with the real
 * `bin/sluice` (core/bus/plugin.h, plugins/README.md): `server { plugin_dir }`
 * loads build/rel/plugins/exec.so and the test plugins of tests/plugins/;
 * source.exec runs commands and turns their lines into exactly the expected
 * events (text, JSON data, CloudEvents, long lines split, stderr logged,
 * runs repeated by interval); target.count receives what a rule routes to
 * it; stopping the server ends a command that would run forever; `sluice
 * check` reports bad source.exec blocks as FILE:LINE; a plugin built for
 * another ABI, one without its register function and one with bad tables
 * are refused by `check` and `serve` with clear messages; a plugin kind
 * used without plugin_dir is an unknown kind; a reload loads a new plugin
 * file but not a loaded one again, and refuses a config whose folder gained
 * a bad plugin. The harness is itest.h.
 *
 * Each test links the plugins it wants into its own folder (symlinks to the
 * built files), so the tests do not depend on each other.
 */
#include "itest.h"

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 15.0

/* ---- helpers ----------------------------------------------------------------------- */

/* The built plugin NAME: build/rel/plugins/NAME.so, else the test one in
 * build/rel/tests/plugins/ (out: PATH_MAX bytes). Fails the test when it
 * was not built. */
static void built_plugin(char *out, const char *name)
{
    char bin[PATH_MAX];
    snprintf(bin, sizeof bin, "%s", it_bin());
    char *root = dirname(dirname(bin)); /* …/bin/sluice -> … */
    struct stat st;
    snprintf(out, PATH_MAX, "%s/build/rel/plugins/%s.so", root, name);
    if (stat(out, &st) == 0)
        return;
    snprintf(out, PATH_MAX, "%s/build/rel/tests/plugins/%s.so", root, name);
    if (stat(out, &st) != 0)
        fail_msg("plugin %s.so is not built (make itests builds it): %s", name, out);
}

/* Makes DIR/folder holding links to the named plugins (NULL-terminated). */
static void plugin_folder(it_server *s, const char *folder, const char *const *names)
{
    char dir[PATH_MAX], target[PATH_MAX], link[PATH_MAX + 64];
    it_path(dir, s, folder);
    if (mkdir(dir, 0755) && errno != EEXIST)
        fail_msg("mkdir %s: %s", dir, strerror(errno));
    for (size_t i = 0; names[i]; i++) {
        built_plugin(target, names[i]);
        snprintf(link, sizeof link, "%s/%s.so", dir, names[i]);
        if (symlink(target, link))
            fail_msg("symlink %s: %s", link, strerror(errno));
    }
}

/* The whole file at path ("" when it does not exist); caller frees. */
static char *read_text(const char *path)
{
    sl_buf b = SL_BUF_INIT;
    FILE *f = fopen(path, "r");
    if (f) {
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            assert_int_equal(sl_buf_append(&b, chunk, n), 0);
        fclose(f);
    }
    assert_int_equal(sl_buf_append(&b, "", 1), 0);
    return (char *)b.data;
}

static int count_lines(const char *text)
{
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

/* Waits until partition 0 of set holds at least n events; returns them
 * (caller frees with it_evs_free()). */
static it_evs wait_events(it_server *s, const char *set, size_t n)
{
    for (double end = it_mono() + WAIT_S;; it_sleep_ms(50)) {
        it_evs e = it_read_events(s, set, 0, "offset=0&max=1000");
        if (e.n >= n || it_mono() > end)
            return e;
        it_evs_free(&e);
    }
}

/* The event's parsed JSON; caller frees with json_decref(). */
static json_t *ev_json(const it_rawev *e)
{
    json_error_t je;
    json_t *j = json_loads(e->text, 0, &je);
    if (!j)
        fail_msg("not JSON (%s): %s", je.text, e->text);
    return j;
}

static const char *str_of(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

/* Runs `sluice check CFG`; returns its exit status and *out (stdout and
 * stderr together, caller frees). */
static int check_cfg(it_server *s, const char *cfg, char **out)
{
    return it_run(s, NULL, out, NULL, (const char *[]){"check", cfg, NULL}, WAIT_S);
}

/* Runs `sluice serve` on cfg, which must refuse it: returns its exit status
 * (-1 when it was still running after a few seconds) and *out. */
static int serve_cfg(it_server *s, const char *cfg, char **out)
{
    char listen[64], data[PATH_MAX];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", it_free_port());
    it_path(data, s, "refused-data");
    return it_run(s, NULL, out, NULL,
                  (const char *[]){"serve", "--data", data, "--listen", listen, "-c", cfg, NULL},
                  5.0);
}

/* ---- 1. source.exec into a set, and target.count from a rule ------------------------ */

static void test_exec_source_and_target(void **state)
{
    it_server *s = *state;
    plugin_folder(s, "plugins", (const char *[]){"exec", "count", NULL});
    char lines[PATH_MAX], out[PATH_MAX], cfg[PATH_MAX];
    it_path(lines, s, "lines.txt");
    it_path(out, s, "count.out");
    /* Text, blank (skipped), JSON data, a CloudEvent, broken JSON (text),
     * a line of 264 bytes with max_line 128 (three events), CRLF. */
    char a[129], b[129];
    memset(a, 'a', 128);
    memset(b, 'b', 128);
    a[128] = b[128] = '\0';
    it_write_file(lines,
                  "hello world\n"
                  "\n"
                  "{\"k\":[1,2.5,{\"n\":null}]}\n"
                  "{\"specversion\":\"1.0\",\"id\":\"ce-1\",\"source\":\"/t\",\"type\":\"t.x\","
                  "\"data\":{\"a\":1}}\n"
                  "{\"broken\":\n"
                  "%s%sXXXXXXXX\n"
                  "last\r\n",
                  a, b);
    it_write_config(
        s, cfg,
        "server { plugin_dir = \"plugins\" }\n"
        "set \"x\" { partitions = 1 }\n"
        "set \"loop\" { partitions = 1 }\n"
        "source.exec { name = \"cat\", command = { \"cat\", \"%s\" }, set = \"x\",\n"
        "              max_line = 128 }\n"
        "source.exec { name = \"sh\", set = \"loop\", parse = \"text\", type = \"t.loop\",\n"
        "  command = {\n"
        "  \"sh\", \"-c\", \"i=0; while [ $i -lt 25 ]; do echo '{\\\"i\\\":'$i'}'; "
        "i=$((i+1)); done; echo oops-on-stderr >&2; exit 3\" } }\n"
        "rule \"r\" { set = \"loop\", target = target.count { path = \"%s\" } }\n",
        lines, out);
    it_start_config(s, cfg, WAIT_S);

    it_evs e = wait_events(s, "x", 8);
    if (e.n != 8) {
        for (size_t i = 0; i < e.n; i++)
            print_message("event %zu: %s\n", i, e.v[i].text);
        fail_msg("set x holds %zu events, want 8", e.n);
    }
    const char *want_text[] = {"hello world", NULL, NULL, "{\"broken\":", a, b, "XXXXXXXX", "last"};
    for (size_t i = 0, t = 0; i < e.n; i++) {
        json_t *j = ev_json(&e.v[i]);
        if (i == 1) { /* JSON data */
            json_t *want = json_loads("{\"k\":[1,2.5,{\"n\":null}]}", 0, NULL);
            assert_true(json_equal(json_object_get(j, "data"), want));
            assert_string_equal(str_of(j, "type"), "sluice.exec.line");
            json_decref(want);
        } else if (i == 2) { /* the CloudEvent as it was */
            assert_string_equal(str_of(j, "id"), "ce-1");
            assert_string_equal(str_of(j, "type"), "t.x");
            assert_string_equal(str_of(j, "source"), "/t");
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "a")),
                             1);
        } else {
            while (!want_text[t])
                t++;
            assert_string_equal(str_of(j, "data"), want_text[t]);
            assert_string_equal(str_of(j, "type"), "sluice.exec.line");
            assert_string_equal(str_of(j, "source"), "/exec/cat");
            t++;
        }
        json_decref(j);
    }
    it_evs_free(&e);

    /* parse = "text": the JSON lines are text data; all 25, in order. */
    e = wait_events(s, "loop", 25);
    assert_int_equal(e.n, 25);
    for (size_t i = 0; i < e.n; i++) {
        json_t *j = ev_json(&e.v[i]);
        char want[32];
        snprintf(want, sizeof want, "{\"i\":%zu}", i);
        assert_string_equal(str_of(j, "data"), want);
        assert_string_equal(str_of(j, "type"), "t.loop");
        assert_string_equal(str_of(j, "source"), "/exec/sh");
        json_decref(j);
    }
    /* The rule delivered each of them to target.count, once. */
    char *got = NULL;
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(50)) {
        free(got);
        got = read_text(out);
        if (count_lines(got) >= 25)
            break;
    }
    assert_int_equal(count_lines(got), 25);
    char *line = got;
    for (size_t i = 0; i < 25; i++) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        json_t *j = json_loads(line, 0, NULL);
        if (!j || strcmp(str_of(j, "id"), e.v[i].id) != 0)
            fail_msg("target.count line %zu is %s, want the event %s", i, line, e.v[i].id);
        json_decref(j);
        line = nl + 1;
    }
    free(got);
    it_evs_free(&e);

    /* stderr went to the log (which keeps one line per second per source),
     * and the exit status shows in GET /v1/sources. */
    assert_true(it_log_contains(s, "source sh: stderr: oops-on-stderr"));
    it_resp r;
    json_t *j;
    for (double end = it_mono() + WAIT_S;; it_sleep_ms(50)) { /* health follows the last flush */
        r = it_get(s, "/v1/sources");
        if (strstr(it_body(&r), "exited with status") || it_mono() > end)
            break;
        it_resp_free(&r);
    }
    j = it_parse_json(&r);
    json_t *v;
    size_t i;
    bool seen = false;
    json_array_foreach(json_object_get(j, "sources"), i, v)
    {
        if (strcmp(str_of(v, "name"), "sh") == 0) {
            seen = true;
            if (json_is_true(json_object_get(v, "healthy")) ||
                strcmp(str_of(v, "health"), "sh exited with status 3") != 0)
                fail_msg("GET /v1/sources: %s", it_body(&r));
        } else if (strcmp(str_of(v, "name"), "cat") == 0) {
            if (!json_is_true(json_object_get(v, "healthy")) || strcmp(str_of(v, "kind"), "exec"))
                fail_msg("GET /v1/sources: %s", it_body(&r));
        }
    }
    assert_true(seen);
    json_decref(j);
    it_resp_free(&r);
    s->passed = true;
}

/* ---- 2. interval runs, and stop ends a command that runs forever --------------------- */

static void test_exec_interval_and_stop(void **state)
{
    it_server *s = *state;
    plugin_folder(s, "plugins", (const char *[]){"exec", NULL});
    char cfg[PATH_MAX], pidfile[PATH_MAX];
    it_path(pidfile, s, "child.pid");
    it_write_config(s, cfg,
                    "server { plugin_dir = \"plugins\" }\n"
                    "set \"ticks\" { partitions = 1 }\n"
                    "set \"forever\" { partitions = 1 }\n"
                    "source.exec { name = \"tick\", command = { \"echo\", \"tick\" },\n"
                    "              interval = \"100ms\", set = \"ticks\" }\n"
                    "source.exec { name = \"forever\", set = \"forever\", command = { \"sh\", "
                    "\"-c\",\n"
                    "  \"trap '' TERM; echo $$ > %s; echo started; while :; do sleep 0.2; done\" "
                    "} }\n",
                    pidfile);
    it_start_config(s, cfg, WAIT_S);
    it_evs e = wait_events(s, "ticks", 3);
    assert_true(e.n >= 3);
    it_evs_free(&e);
    e = wait_events(s, "forever", 1);
    assert_int_equal(e.n, 1);
    it_evs_free(&e);
    char *pid_text = read_text(pidfile);
    pid_t child = (pid_t)atol(pid_text);
    free(pid_text);
    assert_true(child > 0);
    assert_int_equal(kill(child, 0), 0);

    /* The command ignores SIGTERM: it gets SIGKILL after the grace, and
     * the server still stops cleanly and promptly. */
    double t0 = it_mono();
    int st = it_srv_stop(s, SIGTERM, 15);
    double took = it_mono() - t0;
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the server did not stop cleanly (status %d)", st);
    if (took > 8)
        fail_msg("stopping took %.1f s", took);
    assert_int_equal(kill(child, 0), -1);
    assert_int_equal(errno, ESRCH);
    s->passed = true;
}

/* ---- 3. sluice check on bad source.exec blocks -------------------------------------- */

static void test_check_errors(void **state)
{
    it_server *s = *state;
    plugin_folder(s, "plugins", (const char *[]){"exec", "count", NULL});
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "server { plugin_dir = \"plugins\" }\n"                              /* 1 */
                    "set \"x\" {}\n"                                                     /* 2 */
                    "source.exec { name = \"a\", set = \"x\",\n"                         /* 3 */
                    "  command = { \"true\" },\n"                                        /* 4 */
                    "  bogus = 1 }\n"                                                    /* 5 */
                    "source.exec { name = \"b\", set = \"x\" }\n"                        /* 6 */
                    "source.exec { name = \"c\", set = \"x\", command = 7 }\n"           /* 7 */
                    "source.exec { name = \"d\", set = \"x\", command = { \"true\" },\n" /* 8 */
                    "  parse = \"yaml\" }\n"                                             /* 9 */
                    "rule \"r\" { set = \"x\", target = target.count { } }\n"            /* 10 */
                    "source.exec { name = \"e\", set = \"x\", command = \"ls -l\" }\n"); /* 11 */
    char *out;
    int rc = check_cfg(s, cfg, &out);
    const char *want[] = {
        "sluice.lua:5: source.exec: unknown key \"bogus\"",
        "sluice.lua:6: source.exec: command is required",
        "sluice.lua:7: source.exec: command must be a string or a list of strings",
        "sluice.lua:8: source.exec \"d\": parse must be \"json\" or \"text\", not \"yaml\"",
        "sluice.lua:10: rule \"r\": target.count: path is required",
        "sluice.lua:11: source.exec \"e\": command \"ls -l\" is one program name",
    };
    if (rc != 1)
        fail_msg("check exited %d: %s", rc, out);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(out, want[i]))
            fail_msg("check does not say %s:\n%s", want[i], out);
    free(out);

    /* The same kinds without plugin_dir are unknown. */
    it_write_config(s, cfg,
                    "set \"x\" {}\n"
                    "source.exec { set = \"x\", command = { \"true\" } }\n"
                    "rule \"r\" { set = \"x\", target = target.count { path = \"/dev/null\" } }\n");
    rc = check_cfg(s, cfg, &out);
    if (rc != 1 || !strstr(out, "sluice.lua:2: unknown source kind source.exec") ||
        !strstr(out, "sluice.lua:3: rule \"r\": unknown target kind target.count"))
        fail_msg("check without plugin_dir exited %d: %s", rc, out);
    free(out);

    /* A good config passes. */
    it_write_config(
        s, cfg,
        "server { plugin_dir = \"plugins\" }\n"
        "set \"x\" {}\n"
        "source.exec { set = \"x\", command = { \"date\", \"-u\" }, interval = \"1m\",\n"
        "              parse = \"text\", max_line = \"1KiB\", linger = 50 }\n"
        "rule \"r\" { set = \"x\", target = target.count { path = \"/dev/null\" } }\n");
    rc = check_cfg(s, cfg, &out);
    if (rc != 0)
        fail_msg("check of a good config exited %d: %s", rc, out);
    free(out);
    s->passed = true;
}

/* ---- 4. plugins that are refused ------------------------------------------------------ */

/* check and serve on a config whose plugin_dir holds plugin `bad` (and
 * exec) must both fail and say each of want. */
static void expect_refused(it_server *s, const char *bad, const char *const *want)
{
    char folder[64];
    snprintf(folder, sizeof folder, "plugins-%s", bad);
    plugin_folder(s, folder, (const char *[]){bad, "exec", NULL});
    char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "server { plugin_dir = \"%s\" }\n"
                    "set \"x\" {}\n"
                    "source.exec { set = \"x\", command = { \"true\" } }\n",
                    folder);
    for (int serve = 0; serve < 2; serve++) {
        char *out;
        int rc = serve ? serve_cfg(s, cfg, &out) : check_cfg(s, cfg, &out);
        if (rc <= 0)
            fail_msg("%s with %s.so exited %d: %s", serve ? "serve" : "check", bad, rc, out);
        for (size_t i = 0; want[i]; i++)
            if (!strstr(out, want[i]))
                fail_msg("%s with %s.so does not say %s:\n%s", serve ? "serve" : "check", bad,
                         want[i], out);
        /* exec.so itself was fine: its kind is known. */
        if (strstr(out, "unknown source kind"))
            fail_msg("exec.so was not loaded next to %s.so:\n%s", bad, out);
        free(out);
    }
}

static void test_refused_plugins(void **state)
{
    it_server *s = *state;
    expect_refused(s, "bad_abi",
                   (const char *[]){"sluice.lua:1: plugin ",
                                    "bad_abi.so: built for sluice plugin "
                                    "ABI 3, this sluice speaks ABI 2; rebuild it against this "
                                    "sluice's headers",
                                    NULL});
    expect_refused(s, "old_abi",
                   (const char *[]){"sluice.lua:1: plugin ",
                                    "old_abi.so: built for sluice plugin "
                                    "ABI 1, this sluice speaks ABI 2; rebuild it against this "
                                    "sluice's headers",
                                    NULL});
    expect_refused(s, "no_register",
                   (const char *[]){"no_register.so: no symbol sluice_plugin_register", NULL});
    expect_refused(s, "bad_table",
                   (const char *[]){"bad_table.so: table refused: source.file is a built-in kind",
                                    "table refused: source name \"Bad-Name\" is not",
                                    "table refused: target.nodeliver has no deliver callback",
                                    NULL});
    s->passed = true;
}

/* ---- 5. reload: a new plugin file is loaded, a loaded one is not loaded again ------- */

/* Sends SIGHUP and waits until the log holds one more line with text. */
static void reload_and_wait(it_server *s, const char *text)
{
    int before = it_log_count(s, text);
    kill(s->pid, SIGHUP);
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(20))
        if (it_log_count(s, text) > before)
            return;
    fail_msg("no \"%s\" in the log after SIGHUP", text);
}

static void test_reload(void **state)
{
    it_server *s = *state;
    plugin_folder(s, "plugins", (const char *[]){"exec", NULL});
    char cfg[PATH_MAX], out[PATH_MAX];
    it_path(out, s, "count.out");
    it_write_config(s, cfg,
                    "server { plugin_dir = \"plugins\" }\n"
                    "set \"x\" { partitions = 1 }\n"
                    "source.exec { command = { \"echo\", \"one\" }, set = \"x\" }\n");
    it_start_config(s, cfg, WAIT_S);
    it_evs e = wait_events(s, "x", 1);
    assert_int_equal(e.n, 1);
    it_evs_free(&e);

    /* count.so joins the folder; the config now uses it. */
    plugin_folder(s, "plugins", (const char *[]){"count", NULL});
    it_write_config(s, cfg,
                    "server { plugin_dir = \"plugins\" }\n"
                    "set \"x\" { partitions = 1 }\n"
                    "source.exec { command = { \"echo\", \"two\" }, set = \"x\" }\n"
                    "rule \"r\" { set = \"x\", start = \"beginning\",\n"
                    "  target = target.count { path = \"%s\" } }\n",
                    out);
    reload_and_wait(s, "msg=\"reloaded ");
    char *got = NULL;
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(50)) {
        free(got);
        got = read_text(out);
        if (count_lines(got) >= 2)
            break;
    }
    if (count_lines(got) != 2 || !strstr(got, "\"data\":\"one\"") ||
        !strstr(got, "\"data\":\"two\""))
        fail_msg("target.count got after the reload:\n%s", got);
    free(got);
    assert_false(it_log_contains(s, "already registered"));

    /* A plugin for another ABI in the folder: the reload is refused with
     * the message, and the running config stays. */
    plugin_folder(s, "plugins", (const char *[]){"bad_abi", NULL});
    reload_and_wait(s, "refused; the running config stays");
    assert_true(it_log_contains(s, "bad_abi.so: built for sluice plugin ABI 3, this sluice speaks "
                                   "ABI 2; rebuild it against this sluice's headers"));
    assert_int_equal(it_status_of(s->port, "/healthz"), 200);

    /* A config without plugin_dir does not see the plugins loaded for the
     * one before it: the reload is refused as for any unknown kind. */
    it_write_config(s, cfg,
                    "set \"x\" { partitions = 1 }\n"
                    "source.exec { command = { \"echo\", \"three\" }, set = \"x\" }\n");
    reload_and_wait(s, "unknown source kind source.exec (known: file, webhook, kafka)");
    s->passed = true;
}

/* ---- main ------------------------------------------------------------------------------ */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_plugins"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_exec_source_and_target),
        T(test_exec_interval_and_stop),
        T(test_check_errors),
        T(test_refused_plugins),
        T(test_reload),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
