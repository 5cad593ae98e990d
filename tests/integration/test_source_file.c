/*
 * tests/integration/test_source_file.c — source.file with the real `bin/sluice
 * serve -c FILE.lua` (connectors/source_file.c, docs/sources.md): lines to
 * events with parse = "json" | "text" | a Lua function (CloudEvents kept,
 * JSON as data, text, CRLF, blank lines, parse errors kept as text, the
 * type/source defaults); start = "end" with new files read from their
 * beginning; rotation by rename and by copy-truncate while a writer writes;
 * plain truncation; a SIGKILL in the middle of a large file (no loss, at
 * most one batch repeated); a 10 MB line split or skipped; a file deleted
 * while open; hundreds of files (more than the descriptor cap); multi-line
 * grouping; polling without inotify; metrics and health; files made or
 * rotated while sluice was stopped or reloading (read from 0 / to their
 * end, not skipped by start = "end"); a folder missing for a while and a
 * file renamed out of the pattern and back (no file read twice); JSON
 * nested deeper than an event allows kept as text.
 *
 * Every test writes its files under its server's temp dir and reads the set
 * back with GET /v1/sets/NAME/events; the assertions are on exact event
 * counts and contents. Every wait is bounded (WAIT_S). The harness is
 * itest.h.
 */
#include "itest.h"

#include "core/base/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_S 20.0
#define FLUSH_EVENTS 8192 /* source_file.c's batch: the most a restart may repeat */

/* ---- files ----------------------------------------------------------------------- */

/* DIR/logs/<name> into out (PATH_MAX bytes); makes DIR/logs. */
static void log_path(char *out, const it_server *s, const char *name)
{
    char dir[PATH_MAX];
    it_path(dir, s, "logs");
    mkdir(dir, 0755);
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
}

/* Appends len bytes to path (created when missing). */
static void append_bytes(const char *path, const char *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    for (size_t w = 0; w < len;) {
        ssize_t n = write(fd, data + w, len - w);
        if (n <= 0)
            fail_msg("write %s: %s", path, strerror(errno));
        w += (size_t)n;
    }
    close(fd);
}

static void append_str(const char *path, const char *s)
{
    append_bytes(path, s, strlen(s));
}

/* Appends JSON lines {"seq":i,"f":tag} for i in [from, to) to path. */
static void append_seq(const char *path, const char *tag, int from, int to)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = from; i < to; i++)
        sl_buf_printf(&b, "{\"seq\":%d,\"f\":\"%s\"}\n", i, tag);
    append_bytes(path, (const char *)b.data, b.len);
    sl_buf_free(&b);
}

/* The same lines through an open descriptor (a writer that keeps its file). */
static void write_seq(int fd, const char *tag, int from, int to)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = from; i < to; i++)
        sl_buf_printf(&b, "{\"seq\":%d,\"f\":\"%s\"}\n", i, tag);
    for (size_t w = 0; w < b.len;) {
        ssize_t n = write(fd, b.data + w, b.len - w);
        if (n <= 0)
            fail_msg("write: %s", strerror(errno));
        w += (size_t)n;
    }
    sl_buf_free(&b);
}

/* ---- the set ---------------------------------------------------------------------- */

/* Events in set (GET /v1/sets/SET "events"), 0 before it exists. */
static long set_count(it_server *s, const char *set)
{
    it_resp r = it_get(s, "/v1/sets/%s", set);
    long n = 0;
    if (r.status == 200) {
        json_t *j = it_parse_json(&r);
        n = (long)json_integer_value(json_object_get(j, "events"));
        json_decref(j);
    }
    it_resp_free(&r);
    return n;
}

/* Waits until set holds at least n events; returns how many it holds. */
static long wait_count(it_server *s, const char *set, long n, double secs)
{
    double end = it_mono() + secs;
    long have;
    while ((have = set_count(s, set)) < n && it_mono() < end)
        it_sleep_ms(20);
    if (have < n)
        fail_msg("set %s holds %ld events, not %ld, after %.0f s", set, have, n, secs);
    return have;
}

/* Waits until set holds exactly n events for quiet ms (nothing more comes). */
static void expect_count(it_server *s, const char *set, long n, long quiet_ms)
{
    wait_count(s, set, n, WAIT_S);
    it_sleep_ms(quiet_ms);
    long have = set_count(s, set);
    if (have != n)
        fail_msg("set %s holds %ld events, want exactly %ld", set, have, n);
}

/* Every event of partition 0 of set, parsed. Caller frees with json_decref(). */
static json_t *read_set(it_server *s, const char *set)
{
    it_evs e = it_read_all(s, set, 0, "*");
    json_t *a = json_array();
    for (size_t i = 0; i < e.n; i++) {
        json_t *j = json_loads(e.v[i].text, 0, NULL);
        if (!j)
            fail_msg("event %zu is not JSON: %.200s", i, e.v[i].text);
        json_array_append_new(a, j);
    }
    it_evs_free(&e);
    return a;
}

/* Counts per seq of events whose data is {"seq":N,"f":tag}: seen[N]++ for
 * N < n; returns how many events matched tag. */
static long count_seq(json_t *evs, const char *tag, int *seen, int n)
{
    long m = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev)
    {
        json_t *d = json_object_get(ev, "data");
        const char *f = json_string_value(json_object_get(d, "f"));
        if (!f || strcmp(f, tag))
            continue;
        json_int_t q = json_integer_value(json_object_get(d, "seq"));
        if (q < 0 || q >= n)
            fail_msg("seq %lld out of range", (long long)q);
        seen[q]++;
        m++;
    }
    return m;
}

/* Asserts that every seq in [0, n) of tag arrived exactly once. */
static void expect_once(json_t *evs, const char *tag, int n)
{
    int *seen = calloc((size_t)n, sizeof *seen);
    long m = count_seq(evs, tag, seen, n);
    for (int i = 0; i < n; i++)
        if (seen[i] != 1)
            fail_msg("%s: seq %d arrived %d times (%ld events of %s)", tag, i, seen[i], m, tag);
    assert_int_equal(m, n);
    free(seen);
}

/* The value of a metric of GET /metrics, or -1. */
static double metric(it_server *s, const char *name)
{
    it_resp r = it_get(s, "/metrics");
    double v = it_metric(it_body(&r), name);
    it_resp_free(&r);
    return v;
}

/* Waits until metric name is at least want. */
static void wait_metric(it_server *s, const char *name, double want)
{
    double end = it_mono() + WAIT_S, v;
    while ((v = metric(s, name)) < want && it_mono() < end)
        it_sleep_ms(20);
    if (v < want)
        fail_msg("%s is %g, want at least %g", name, v, want);
}

/* Starts the server with a config whose body is the printf-formatted text;
 * %1$s… are not available: the caller formats paths in. */
static void start_cfg(it_server *s, const char *body)
{
    char cfg[PATH_MAX];
    it_write_config(s, cfg, "%s", body);
    static char keep[8][PATH_MAX]; /* it_start_config() keeps the pointer */
    static int k;
    char *c = keep[k++ % 8];
    snprintf(c, PATH_MAX, "%s", cfg);
    it_start_config(s, c, WAIT_S);
}

/* ---- parse ------------------------------------------------------------------------ */

static void test_parse(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], t[PATH_MAX], l[PATH_MAX], dir[PATH_MAX];
    log_path(a, s, "json.log");
    log_path(t, s, "text.txt");
    log_path(l, s, "fn.in");
    it_path(dir, s, "logs");
    append_str(a,
               "{\"a\":1}\r\n"
               "\n"
               "not json {\n"
               "{\"specversion\":\"1.0\",\"id\":\"ce-1\",\"source\":\"/me\",\"type\":\"my.type\","
               "\"data\":{\"x\":2}}\n"
               "[1,2,3]\n"
               "\"str\"\n"
               "held back, no newline yet");
    append_str(t, "{\"a\":1}\nplain text\n");
    append_str(l, "# comment\nk=v\nhello\nboom\nce\n");
    sl_buf cfg = SL_BUF_INIT;
    sl_buf_printf(&cfg,
                  "set \"j\" { partitions = 1 }\n"
                  "set \"t\" { partitions = 1 }\n"
                  "set \"l\" { partitions = 1 }\n"
                  "source.file { name = \"j\", path = \"%s/*.log\", set = \"j\", start = "
                  "\"beginning\" }\n"
                  "source.file { name = \"t\", path = \"%s/*.txt\", set = \"t\", parse = \"text\", "
                  "type = \"my.text\", source = \"/texts\", start = \"beginning\" }\n"
                  "source.file { name = \"l\", path = \"%s/*.in\", set = \"l\", "
                  "start = \"beginning\",\n"
                  "  parse = function(line)\n"
                  "    if line:sub(1, 1) == '#' then return nil end\n"
                  "    local k, v = line:match('^(%%w+)=(%%w+)$')\n"
                  "    if k then return { [k] = v } end\n"
                  "    if line == 'boom' then error('boom!') end\n"
                  "    if line == 'ce' then return { specversion = '1.0', id = 'lua-1', "
                  "source = '/lua', type = 'lua.t' } end\n"
                  "    return 'got ' .. line\n"
                  "  end }\n",
                  dir, dir, dir);
    start_cfg(s, (const char *)cfg.data);
    sl_buf_free(&cfg);
    expect_count(s, "t", 2, 300);
    json_t *e = read_set(s, "t");
    json_t *e0 = json_array_get(e, 0), *e1 = json_array_get(e, 1);
    assert_string_equal(json_string_value(json_object_get(e0, "data")), "{\"a\":1}");
    assert_string_equal(json_string_value(json_object_get(e0, "type")), "my.text");
    assert_string_equal(json_string_value(json_object_get(e0, "source")), "/texts");
    assert_string_equal(json_string_value(json_object_get(e1, "data")), "plain text");
    json_decref(e);

    /* json.log: 5 events (the blank line skipped, the unfinished one held). */
    expect_count(s, "j", 5, 300);
    e = read_set(s, "j");
    char src[PATH_MAX + 8];
    snprintf(src, sizeof src, "file://%s", a);
    int found = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(e, i, ev)
    {
        const char *source = json_string_value(json_object_get(ev, "source"));
        if (strcmp(source, found == 2 ? "/me" : src) != 0)
            fail_msg("event %zu has source %s", i, source);
        json_t *d = json_object_get(ev, "data");
        switch (found++) {
        case 0:
            assert_int_equal(json_integer_value(json_object_get(d, "a")), 1);
            assert_string_equal(json_string_value(json_object_get(ev, "type")), "sluice.file.line");
            assert_string_equal(json_string_value(json_object_get(ev, "datacontenttype")),
                                "application/json");
            break;
        case 1:
            assert_string_equal(json_string_value(d), "not json {");
            break;
        case 2:
            assert_string_equal(json_string_value(json_object_get(ev, "id")), "ce-1");
            assert_string_equal(json_string_value(json_object_get(ev, "type")), "my.type");
            break;
        case 3:
            assert_true(json_is_array(d));
            break;
        case 4:
            assert_string_equal(json_string_value(d), "str");
            break;
        default:
            fail_msg("unexpected event %zu", i);
        }
    }
    assert_int_equal(found, 5);
    json_decref(e);
    /* The held line comes with its newline. */
    append_str(a, " — now\n");
    expect_count(s, "j", 6, 300);
    e = read_set(s, "j");
    ev = json_array_get(e, 5);
    assert_string_equal(json_string_value(json_object_get(ev, "data")),
                        "held back, no newline yet — now");
    json_decref(e);
    assert_true(metric(s, "sluice_source_file_parse_errors_total{source=\"j\"}") >= 2);

    /* The Lua source: comment dropped, k=v a table, a string, an error kept
     * as text, a whole CloudEvent. */
    expect_count(s, "l", 4, 300);
    e = read_set(s, "l");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_array_get(e, 0), "data"), "k")),
        "v");
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 1), "data")),
                        "got hello");
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 2), "data")), "boom");
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 3), "id")), "lua-1");
    json_decref(e);
    assert_int_equal(metric(s, "sluice_source_file_parse_errors_total{source=\"l\"}"), 1);
    assert_true(it_log_contains(s, "boom!"));
    s->passed = true;
}

/* ---- start, new files, positions ---------------------------------------------------- */

static void test_start_end(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], b[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "a.log");
    log_path(b, s, "b.log");
    it_path(dir, s, "logs");
    append_seq(a, "old", 0, 50); /* before the start: not read (start = "end") */
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    it_sleep_ms(300);
    append_seq(a, "a", 0, 20);
    append_seq(b, "b", 0, 30); /* made after the start: read from its beginning */
    expect_count(s, "logs", 50, 300);
    json_t *e = read_set(s, "logs");
    expect_once(e, "a", 20);
    expect_once(e, "b", 30);
    json_decref(e);
    /* A clean restart goes on where it was: nothing again, nothing lost. */
    it_srv_stop(s, SIGTERM, 10);
    append_seq(a, "a2", 0, 10);
    it_restart(s, WAIT_S);
    expect_count(s, "logs", 60, 500);
    e = read_set(s, "logs");
    expect_once(e, "a2", 10);
    json_decref(e);
    char pos[PATH_MAX];
    snprintf(pos, sizeof pos, "%s/sources/f/positions", s->data);
    struct stat st;
    assert_int_equal(stat(pos, &st), 0);
    s->passed = true;
}

/* ---- rotation --------------------------------------------------------------------- */

/* Rename rotation while writing: the writer keeps writing to the renamed
 * file for a moment (like a logger that reopens late), then writes the new
 * file; every line arrives once. */
static void test_rotate_rename(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "app.log");
    it_path(dir, s, "logs");
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    int fd = open(a, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int seq = 0;
    for (int r = 0; r < 5; r++) {
        for (int k = 0; k < 10; k++, seq += 100) {
            write_seq(fd, "w", seq, seq + 100);
            it_sleep_ms(5);
        }
        char old[PATH_MAX + 8];
        snprintf(old, sizeof old, "%s.%d", a, r + 1);
        if (rename(a, old))
            fail_msg("rename: %s", strerror(errno));
        write_seq(fd, "w", seq, seq + 100); /* late writes into the renamed file */
        seq += 100;
        it_sleep_ms(r % 2 ? 0 : 100);
        close(fd);
        fd = open(a, O_WRONLY | O_CREAT | O_APPEND, 0644);
    }
    write_seq(fd, "w", seq, seq + 100);
    seq += 100;
    close(fd);
    expect_count(s, "logs", seq, 1500);
    json_t *e = read_set(s, "logs");
    expect_once(e, "w", seq);
    json_decref(e);
    wait_metric(s, "sluice_source_file_rotations_total{source=\"f\"}", 5);
    /* The renamed files were forgotten after their quiet second. */
    it_sleep_ms(1500);
    assert_int_equal(metric(s, "sluice_source_file_files{source=\"f\"}"), 1);
    s->passed = true;
}

/* Copy-truncate while writing: the writer copies the file away and
 * truncates it once sluice has read it (copytruncate's own gap is not
 * ours to close); sometimes it writes more than the old size at once, which
 * the fingerprint catches. */
static void test_rotate_copytruncate(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "app.log");
    it_path(dir, s, "logs");
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    int fd = open(a, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int seq = 0;
    for (int r = 0; r < 4; r++) {
        int n = r % 2 ? 50 : 300;
        for (int k = 0; k < 5; k++, seq += n / 5)
            write_seq(fd, "w", seq, seq + n / 5);
        wait_count(s, "logs", seq, WAIT_S); /* read before the truncation */
        if (ftruncate(fd, 0))
            fail_msg("ftruncate: %s", strerror(errno));
        /* Right after: more than the old size in one go (r even), or a few. */
        int m = r % 2 ? 10 : 400;
        write_seq(fd, "w", seq, seq + m);
        seq += m;
    }
    close(fd);
    expect_count(s, "logs", seq, 800);
    json_t *e = read_set(s, "logs");
    expect_once(e, "w", seq);
    json_decref(e);
    assert_true(metric(s, "sluice_source_file_truncations_total{source=\"f\"}") >= 4);
    s->passed = true;
}

static void test_truncate(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "app.log");
    it_path(dir, s, "logs");
    append_seq(a, "x", 0, 100);
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
                    "start = \"beginning\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    wait_count(s, "logs", 100, WAIT_S);
    assert_int_equal(truncate(a, 0), 0);
    it_sleep_ms(400);
    append_seq(a, "y", 0, 10);
    expect_count(s, "logs", 110, 500);
    json_t *e = read_set(s, "logs");
    expect_once(e, "x", 100);
    expect_once(e, "y", 10);
    json_decref(e);
    assert_int_equal(metric(s, "sluice_source_file_truncations_total{source=\"f\"}"), 1);
    assert_true(it_log_contains(s, "was truncated"));
    s->passed = true;
}

/* ---- restarts --------------------------------------------------------------------- */

/* SIGKILL while a large file is being read into a durable set: after the
 * restart every line is there, and at most one batch twice. */
static void test_restart_middle(void **state)
{
    it_server *s = *state;
    const int n = 120000;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "big.log");
    it_path(dir, s, "logs");
    append_seq(a, "k", 0, n);
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1, ack = \"durable\" }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
                    "start = \"beginning\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    /* Kill it somewhere in the middle. */
    double end = it_mono() + WAIT_S;
    long have = 0;
    while ((have = set_count(s, "logs")) < n / 4 && it_mono() < end)
        it_sleep_ms(2);
    it_srv_stop(s, SIGKILL, 5);
    if (have >= n)
        fail_msg("the whole file was read before the kill: make it bigger");
    it_restart(s, WAIT_S);
    wait_count(s, "logs", n, WAIT_S);
    it_sleep_ms(500);
    json_t *e = read_set(s, "logs");
    int *seen = calloc((size_t)n, sizeof *seen);
    long m = count_seq(e, "k", seen, n);
    long dups = 0;
    for (int i = 0; i < n; i++) {
        if (seen[i] == 0)
            fail_msg("seq %d is lost", i);
        dups += seen[i] - 1;
    }
    free(seen);
    json_decref(e);
    printf("# restart in the middle: killed at %ld of %d events; %ld repeated\n", have, n, dups);
    assert_int_equal(m, n + dups);
    assert_true(dups <= FLUSH_EVENTS);
    s->passed = true;
}

/* ---- long lines ------------------------------------------------------------------- */

static void test_long_line(void **state)
{
    it_server *s = *state;
    const size_t big = 10u << 20, max = 256u << 10;
    char a[PATH_MAX], b[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "split.log");
    log_path(b, s, "skip.txt");
    it_path(dir, s, "logs");
    char *line = malloc(big + 1);
    for (size_t i = 0; i < big; i++)
        line[i] = (char)('a' + i % 26);
    line[big] = '\n';
    const char *files[] = {a, b};
    for (int f = 0; f < 2; f++) {
        append_str(files[f], "before\n");
        append_bytes(files[f], line, big + 1);
        append_str(files[f], "after\n");
    }
    it_write_config(s, cfg,
                    "set \"split\" { partitions = 1, max_event = \"1MiB\" }\n"
                    "set \"skip\" { partitions = 1 }\n"
                    "source.file { name = \"split\", path = \"%s/*.log\", set = \"split\", "
                    "parse = \"text\", start = \"beginning\", max_line = \"256KiB\" }\n"
                    "source.file { name = \"skip\", path = \"%s/*.txt\", set = \"skip\", "
                    "parse = \"text\", start = \"beginning\", max_line = \"256KiB\", "
                    "long_lines = \"skip\" }\n",
                    dir, dir);
    it_start_config(s, cfg, WAIT_S);
    size_t pieces = big / max + (big % max != 0);
    expect_count(s, "split", (long)pieces + 2, 300);
    json_t *e = read_set(s, "split");
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 0), "data")), "before");
    size_t at = 0;
    for (size_t i = 1; i <= pieces; i++) {
        const char *d = json_string_value(json_object_get(json_array_get(e, i), "data"));
        size_t len = strlen(d);
        assert_true(len == max || (i == pieces && len == big - at));
        if (memcmp(d, line + at, len) != 0)
            fail_msg("piece %zu differs", i);
        at += len;
    }
    assert_int_equal(at, big);
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, pieces + 1), "data")),
                        "after");
    json_decref(e);
    expect_count(s, "skip", 2, 300);
    e = read_set(s, "skip");
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 0), "data")), "before");
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 1), "data")), "after");
    json_decref(e);
    assert_int_equal(metric(s, "sluice_source_file_skipped_long_lines_total{source=\"skip\"}"), 1);
    free(line);
    s->passed = true;
}

/* ---- deleted while open ------------------------------------------------------------- */

static void test_deleted_while_open(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "gone.log");
    it_path(dir, s, "logs");
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    int fd = open(a, O_WRONLY | O_CREAT | O_APPEND, 0644);
    write_seq(fd, "d", 0, 100);
    wait_count(s, "logs", 100, WAIT_S);
    assert_int_equal(unlink(a), 0);
    write_seq(fd, "d", 100, 200); /* written after the delete: still read */
    close(fd);
    expect_count(s, "logs", 200, 300);
    json_t *e = read_set(s, "logs");
    expect_once(e, "d", 200);
    json_decref(e);
    /* Then it is closed and its position dropped. */
    double end = it_mono() + WAIT_S;
    while (metric(s, "sluice_source_file_files{source=\"f\"}") != 0 && it_mono() < end)
        it_sleep_ms(50);
    assert_int_equal(metric(s, "sluice_source_file_files{source=\"f\"}"), 0);
    char pos[PATH_MAX];
    snprintf(pos, sizeof pos, "%s/sources/f/positions", s->data);
    end = it_mono() + WAIT_S;
    size_t len = 0;
    int lines = -1;
    while (lines != 0 && it_mono() < end) { /* the header and generation lines only */
        uint8_t *p = tu_read_file(pos, &len);
        lines = 0;
        for (size_t i = 0; p && i < len; i++)
            lines += p[i] == '\n' && i + 1 < len && p[i + 1] != '#' && p[i + 1] != 'G';
        free(p);
        if (lines != 0)
            it_sleep_ms(50);
    }
    assert_int_equal(lines, 0);
    s->passed = true;
}

/* ---- many files ------------------------------------------------------------------- */

static void test_many_files(void **state)
{
    it_server *s = *state;
    enum { OLD = 300, NEW = 200, LINES = 10 };
    char p[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX], name[64];
    it_path(dir, s, "logs");
    mkdir(dir, 0755);
    for (int i = 0; i < OLD; i++) {
        snprintf(name, sizeof name, "old%03d.log", i);
        log_path(p, s, name);
        append_seq(p, name, 0, LINES);
    }
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
                    "start = \"beginning\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    for (int i = 0; i < NEW; i++) {
        snprintf(name, sizeof name, "new%03d.log", i);
        log_path(p, s, name);
        append_seq(p, name, 0, LINES);
    }
    long want = (OLD + NEW) * LINES;
    wait_count(s, "logs", want, WAIT_S);
    /* One more line in every old file (most of them closed by now). */
    it_sleep_ms(300);
    for (int i = 0; i < OLD; i++) {
        snprintf(name, sizeof name, "old%03d.log", i);
        log_path(p, s, name);
        append_seq(p, name, LINES, LINES + 1);
    }
    want += OLD;
    expect_count(s, "logs", want, 500);
    json_t *e = read_set(s, "logs");
    for (int i = 0; i < OLD + NEW; i++) {
        snprintf(name, sizeof name, i < OLD ? "old%03d.log" : "new%03d.log", i < OLD ? i : i - OLD);
        expect_once(e, name, i < OLD ? LINES + 1 : LINES);
    }
    json_decref(e);
    assert_int_equal(metric(s, "sluice_source_file_files{source=\"f\"}"), OLD + NEW);
    s->passed = true;
}

/* ---- multi-line, polling, health ---------------------------------------------------- */

static void test_multiline_poll(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "app.log");
    it_path(dir, s, "logs");
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
                    "parse = \"text\", multiline = \"^[0-9]{4}-\", multiline_timeout = \"300ms\", "
                    "inotify = false, poll = \"50ms\" }\n"
                    "source.file { name = \"nodir\", path = \"%s/nope/*.log\", set = \"logs\" }\n",
                    dir, dir);
    it_start_config(s, cfg, WAIT_S);
    it_sleep_ms(200);
    append_str(a, "2026-11-29 one\n"
                  "2026-11-29 two: Exception\n"
                  "  at a()\n"
                  "  at b()\n"
                  "\n"
                  "2026-11-29 three\n");
    /* one and two now; three after the quiet time. */
    expect_count(s, "logs", 3, 200);
    append_str(a, "2026-11-29 four\n  more\n");
    expect_count(s, "logs", 4, 200);
    json_t *e = read_set(s, "logs");
    const char *want[] = {"2026-11-29 one", "2026-11-29 two: Exception\n  at a()\n  at b()\n",
                          "2026-11-29 three", "2026-11-29 four\n  more"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(e, i), "data")),
                            want[i]);
    json_decref(e);
    /* A line that arrives in two reads is held in a buffer it fills exactly
     * (256 bytes): the regex must not read past it (ASan builds). */
    char held[257];
    memcpy(held, "2026-11-29 five ", 16);
    for (int i = 16; i < 256; i++)
        held[i] = (char)('a' + i % 26);
    held[256] = 0;
    append_bytes(a, held, 100);
    it_sleep_ms(300);
    append_bytes(a, held + 100, 156);
    append_str(a, "\n2026-11-29 six\n");
    expect_count(s, "logs", 6, 200);
    e = read_set(s, "logs");
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 4), "data")), held);
    assert_string_equal(json_string_value(json_object_get(json_array_get(e, 5), "data")),
                        "2026-11-29 six");
    json_decref(e);
    /* The source whose folder does not exist is unhealthy. */
    it_resp r = it_get(s, "/v1/sources");
    json_t *j = it_parse_json(&r);
    size_t i;
    json_t *src;
    int checked = 0;
    json_array_foreach(json_object_get(j, "sources"), i, src)
    {
        const char *name = json_string_value(json_object_get(src, "name"));
        bool healthy = json_is_true(json_object_get(src, "healthy"));
        const char *st = json_string_value(json_object_get(src, "state"));
        const char *why = json_string_value(json_object_get(src, "state_reason"));
        assert_non_null(st);
        assert_non_null(json_string_value(json_object_get(src, "state_since")));
        if (strcmp(name, "nodir") == 0) {
            assert_false(healthy), checked++;
            assert_string_equal(st, "failing");
            assert_non_null(why);
            assert_non_null(strstr(why, "No such file"));
        }
        if (strcmp(name, "f") == 0) {
            assert_true(healthy), checked++;
            assert_string_equal(st, "running");
            assert_null(why);
        }
    }
    assert_int_equal(checked, 2);
    json_decref(j);
    it_resp_free(&r);
    s->passed = true;
}

/* Files made while sluice was stopped are read from their beginning:
 * start = "end" is for the source's first start only. A file rotated away
 * while sluice was stopped is found by its inode and read to its end. */
static void test_restart_rotated(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], a1[PATH_MAX], b[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "a.log");
    log_path(a1, s, "a.log.1");
    log_path(b, s, "b.log");
    it_path(dir, s, "logs");
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    it_sleep_ms(300);
    append_seq(a, "a", 0, 2);
    expect_count(s, "logs", 2, 300);
    it_srv_stop(s, SIGTERM, 10);
    /* logrotate while sluice is down: the old file gets two more lines
     * first (never read), then a new file takes its name. */
    append_seq(a, "a", 2, 4);
    if (rename(a, a1))
        fail_msg("rename: %s", strerror(errno));
    append_seq(a, "n", 0, 2);
    append_seq(b, "b", 0, 3); /* a file that did not exist before */
    it_restart(s, WAIT_S);
    it_sleep_ms(300);
    append_seq(a, "n", 2, 3);
    expect_count(s, "logs", 4 + 3 + 3, 500);
    json_t *e = read_set(s, "logs");
    expect_once(e, "a", 4);
    expect_once(e, "n", 3);
    expect_once(e, "b", 3);
    /* The rotated file's rest came before the file that replaced it. */
    size_t i, last_a = 0, first_n = SIZE_MAX;
    json_t *ev;
    json_array_foreach(e, i, ev)
    {
        const char *f = json_string_value(json_object_get(json_object_get(ev, "data"), "f"));
        if (f && strcmp(f, "a") == 0)
            last_a = i;
        if (f && strcmp(f, "n") == 0 && first_n == SIZE_MAX)
            first_n = i;
    }
    assert_true(last_a < first_n);
    json_decref(e);
    assert_true(it_log_contains(s, "was rotated while sluice was stopped"));
    /* Gone for good while stopped: logged, and nothing else happens. */
    it_srv_stop(s, SIGTERM, 10);
    assert_int_equal(unlink(a1), 0);
    assert_int_equal(unlink(b), 0);
    it_restart(s, WAIT_S);
    append_seq(a, "n", 3, 4);
    expect_count(s, "logs", 11, 300);
    assert_true(it_log_contains(s, "was not found"));
    s->passed = true;
}

/* A SIGHUP reload stops the source's instance and starts a new one: a file
 * the old one had not seen yet is read from its beginning. */
static void test_reload_new_file(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], b[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "a.log");
    log_path(b, s, "b.log");
    it_path(dir, s, "logs");
    append_seq(a, "old", 0, 5); /* before the first start: skipped (start = "end") */
    /* No inotify and a long poll: the old instance does not see b.log. */
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
                    "inotify = false, poll = \"30s\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    it_sleep_ms(300);
    append_seq(b, "b", 0, 5);
    int before = it_log_count(s, "reloaded");
    kill(s->pid, SIGHUP);
    for (double end = it_mono() + WAIT_S; it_log_count(s, "reloaded") == before;) {
        if (it_mono() > end)
            fail_msg("no reload after SIGHUP");
        it_sleep_ms(20);
    }
    expect_count(s, "logs", 5, 500);
    json_t *e = read_set(s, "logs");
    expect_once(e, "b", 5);
    json_decref(e);
    s->passed = true;
}

/* The folder goes away for a while and comes back; a file is renamed out of
 * the pattern for longer than the rotation grace and back: no line is read
 * twice, none is lost. */
static void test_folder_missing(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], b[PATH_MAX], bt[PATH_MAX], dir[PATH_MAX], dir2[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "a.log");
    log_path(b, s, "b.log");
    log_path(bt, s, "b.txt");
    it_path(dir, s, "logs");
    it_path(dir2, s, "logs2");
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    it_sleep_ms(300);
    append_seq(a, "a", 0, 3);
    append_seq(b, "b", 0, 3);
    expect_count(s, "logs", 6, 300);
    if (rename(dir, dir2))
        fail_msg("rename: %s", strerror(errno));
    it_sleep_ms(3000);
    if (rename(dir2, dir))
        fail_msg("rename: %s", strerror(errno));
    it_sleep_ms(500);
    append_seq(a, "a", 3, 5);
    expect_count(s, "logs", 8, 1500);
    /* Out of the pattern for longer than the grace, then back. */
    if (rename(b, bt))
        fail_msg("rename: %s", strerror(errno));
    it_sleep_ms(2500);
    append_seq(bt, "b", 3, 4); /* written while away: read once it is back */
    if (rename(bt, b))
        fail_msg("rename: %s", strerror(errno));
    append_seq(b, "b", 4, 5);
    expect_count(s, "logs", 10, 1500);
    json_t *e = read_set(s, "logs");
    expect_once(e, "a", 5);
    expect_once(e, "b", 5);
    json_decref(e);
    s->passed = true;
}

/* JSON nested deeper than an event's data may be is kept as text. */
static void test_json_depth(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX];
    log_path(a, s, "deep.log");
    it_path(dir, s, "logs");
    char line[300];
    for (int depth = 63; depth <= 64; depth++) {
        memset(line, '[', (size_t)depth);
        memset(line + depth, ']', (size_t)depth);
        line[2 * depth] = '\n';
        append_bytes(a, line, (size_t)(2 * depth + 1));
    }
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
                    "start = \"beginning\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    expect_count(s, "logs", 2, 300);
    json_t *e = read_set(s, "logs");
    assert_true(json_is_array(json_object_get(json_array_get(e, 0), "data")));
    const char *text = json_string_value(json_object_get(json_array_get(e, 1), "data"));
    assert_non_null(text);
    assert_int_equal(strlen(text), 128);
    json_decref(e);
    assert_int_equal(metric(s, "sluice_source_file_parse_errors_total{source=\"f\"}"), 1);
    assert_int_equal(metric(s, "sluice_source_file_refused_total{source=\"f\"}"), 0);
    s->passed = true;
}

/* ---- ids ------------------------------------------------------------------------- */

/* The id of the event whose data is {"seq":seq,"f":tag} in evs (borrowed),
 * or NULL; *n gets how many there are. */
static const char *id_of(json_t *evs, const char *tag, int seq, int *n)
{
    const char *id = NULL;
    size_t i;
    json_t *ev;
    *n = 0;
    json_array_foreach(evs, i, ev)
    {
        json_t *d = json_object_get(ev, "data");
        const char *f = json_string_value(json_object_get(d, "f"));
        if (f && strcmp(f, tag) == 0 && json_integer_value(json_object_get(d, "seq")) == seq) {
            const char *v = json_string_value(json_object_get(ev, "id"));
            if (id && v && strcmp(id, v))
                fail_msg("%s %d was stored twice with two ids: %s and %s", tag, seq, id, v);
            id = v;
            ++*n;
        }
    }
    return id;
}

/* Ids: DEV-INO-GEN-OFFSET for wrapped lines and for CloudEvent lines
 * without an id of their own (one with its own keeps it); the same lines
 * read again after a restart whose position was not committed get the
 * same ids; new content at the same positions of the same path, after a
 * copy-truncate (same inode) or a rotation by rename (another inode), gets
 * other ids. */
static void test_ids(void **state)
{
    it_server *s = *state;
    char a[PATH_MAX], dir[PATH_MAX], cfg[PATH_MAX], want[128];
    log_path(a, s, "app.log");
    it_path(dir, s, "logs");
    const char *ce_noid = "{\"specversion\":\"1.0\",\"source\":\"/x\",\"type\":\"t\","
                          "\"data\":{\"seq\":2,\"f\":\"a\"}}\n";
    const char *ce_own = "{\"specversion\":\"1.0\",\"id\":\"mine\",\"source\":\"/x\","
                         "\"type\":\"t\",\"data\":{\"seq\":3,\"f\":\"a\"}}\n";
    append_seq(a, "a", 0, 2);
    append_str(a, ce_noid);
    append_str(a, ce_own);
    struct stat st;
    assert_int_equal(stat(a, &st), 0);
    it_write_config(s, cfg,
                    "set \"logs\" { partitions = 1 }\n"
                    "source.file { name = \"f\", path = \"%s/*.log\", set = \"logs\", "
                    "start = \"beginning\" }\n",
                    dir);
    it_start_config(s, cfg, WAIT_S);
    expect_count(s, "logs", 4, 300);
    json_t *e = read_set(s, "logs");
    int n;
    size_t line0 = strlen("{\"seq\":0,\"f\":\"a\"}\n");
    snprintf(want, sizeof want, "%llu-%llu-0-0", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    assert_string_equal(id_of(e, "a", 0, &n), want);
    snprintf(want, sizeof want, "%llu-%llu-0-%zu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino, line0);
    assert_string_equal(id_of(e, "a", 1, &n), want);
    snprintf(want, sizeof want, "%llu-%llu-0-%zu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino, 2 * line0);
    assert_string_equal(id_of(e, "a", 2, &n), want);
    assert_string_equal(id_of(e, "a", 3, &n), "mine");
    json_decref(e);

    /* Copy-truncate: the same inode, new lines at the same positions. */
    assert_int_equal(truncate(a, 0), 0);
    wait_metric(s, "sluice_source_file_truncations_total{source=\"f\"}", 1);
    append_seq(a, "b", 0, 2);
    expect_count(s, "logs", 6, 300);
    /* Rotation by rename: another inode at the same path. */
    char old[PATH_MAX + 8];
    snprintf(old, sizeof old, "%s.1", a);
    assert_int_equal(rename(a, old), 0);
    append_seq(a, "c", 0, 2);
    expect_count(s, "logs", 8, 300);
    e = read_set(s, "logs");
    const char *ids[] = {id_of(e, "a", 0, &n), id_of(e, "a", 1, &n), id_of(e, "b", 0, &n),
                         id_of(e, "b", 1, &n), id_of(e, "c", 0, &n), id_of(e, "c", 1, &n)};
    for (size_t i = 0; i < 6; i++) {
        assert_non_null(ids[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(ids[i], ids[j]) == 0)
                fail_msg("two lines at the same position got the same id %s", ids[i]);
    }
    char *c0 = strdup(ids[4]), *c1 = strdup(ids[5]);
    json_decref(e);

    /* A restart whose positions were not committed (as after a crash
     * between the read and the commit) reads the lines again: same ids. */
    int stc = it_srv_stop(s, SIGTERM, 20);
    assert_true(stc != -1);
    char pos[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(pos, sizeof pos, "%s/sources/f/positions", s->data);
    snprintf(tmp, sizeof tmp, "%s.new", pos);
    FILE *in = fopen(pos, "r"), *out = fopen(tmp, "w");
    assert_non_null(in);
    assert_non_null(out);
    char line[PATH_MAX + 128];
    int rewound = 0;
    struct stat cst;
    assert_int_equal(stat(a, &cst), 0);
    while (fgets(line, sizeof line, in)) {
        unsigned long long dev, ino, off;
        int at = 0;
        if (line[0] != '#' && line[0] != 'G' &&
            sscanf(line, "%llu %llu %llu%n", &dev, &ino, &off, &at) == 3 &&
            ino == (unsigned long long)cst.st_ino) {
            fprintf(out, "%llu %llu 0%s", dev, ino, line + at);
            rewound++;
        } else {
            fputs(line, out);
        }
    }
    fclose(in);
    fclose(out);
    assert_int_equal(rename(tmp, pos), 0);
    assert_int_equal(rewound, 1);
    it_restart(s, WAIT_S);
    expect_count(s, "logs", 10, 500);
    e = read_set(s, "logs");
    assert_string_equal(id_of(e, "c", 0, &n), c0);
    assert_int_equal(n, 2);
    assert_string_equal(id_of(e, "c", 1, &n), c1);
    assert_int_equal(n, 2);
    json_decref(e);
    free(c0);
    free(c1);
    s->passed = true;
}

/* ---- main ------------------------------------------------------------------------- */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, it_teardown)

int main(void)
{
    if (it_init("test_source_file"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_parse),
        T(test_start_end),
        T(test_rotate_rename),
        T(test_rotate_copytruncate),
        T(test_truncate),
        T(test_restart_middle),
        T(test_long_line),
        T(test_deleted_while_open),
        T(test_many_files),
        T(test_multiline_poll),
        T(test_restart_rotated),
        T(test_reload_new_file),
        T(test_folder_missing),
        T(test_json_depth),
        T(test_ids),
    };
    /* ITEST_ONLY=NAME runs that test alone. */
    const char *only = getenv("ITEST_ONLY");
    struct CMUnitTest one[1];
    for (size_t i = 0; only && i < sizeof tests / sizeof *tests; i++)
        if (strcmp(tests[i].name, only) == 0)
            one[0] = tests[i];
    int rc = only ? _cmocka_run_group_tests("test_source_file", one, 1, NULL, NULL)
                  : cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
