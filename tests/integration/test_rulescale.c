/*
 * tests/integration/test_rulescale.c — rules at scale (issue 18 §3), black
 * box: the real `bin/sluice serve -c FILE.lua` with about 300 rules on one
 * set, each delivering to a file of its own (one to an HTTP receiver). What
 * is checked is only what comes out, so the suite holds for a runner where
 * every rule reads alone and for one where rules share a reader and one
 * combined matcher:
 *
 *   1. every event reaches exactly the files of the rules whose patterns
 *      match it, once each (300 rules of every operator kind, overlapping
 *      patterns, a rule with no match, one that matches nothing);
 *   2. a clean restart in the middle of delivery resumes every cursor;
 *   3. one slow rule (its HTTP target fails, stalls, then recovers) among 300 holds
 *      back only itself, then catches up with nothing lost or duplicated;
 *   4. a SIGHUP reload adding and removing rules while events are posted:
 *      kept rules get every event once, removed rules nothing posted after
 *      the reload, new rules every event posted after it (from the end, or
 *      everything with start = "beginning").
 *
 * The expected routing is computed here, from the same generator that
 * writes the events and the patterns: each kind of rule has a Lua pattern
 * and a C predicate that says which events it matches. The harness is
 * itest.h; ITEST_ONLY=NAME runs one test.
 */
#include "itest.h"
#include "receiver.h"

#include "core/base/buf.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define WAIT_S 60.0 /* every wait gives up after this long (300 rules are slow today) */
#define NRULES 300  /* rules of the main config, specials included */
#define MAXRULES 400
#define POST_BATCH 500 /* events per POST from the main thread */

/* The receiver of test 3's slow rule; the teardown frees it, also after a
 * failure. */
static rx_receiver *g_rx;

static int teardown(void **state)
{
    rx_free(g_rx);
    g_rx = NULL;
    return it_teardown(state);
}

/* ---- the generator: events -------------------------------------------------------- */

/* splitmix64: event k's field values, decorrelated from each other and
 * from k. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Value a (0..14) of event k, 0..99. */
static int V(int k, int a)
{
    return (int)(mix64((uint64_t)k * 64u + (uint64_t)a) % 100u);
}

static const char *const g_region[] = {"eu", "us", "ap", "sa"};

/* Appends event k as one NDJSON line (about 450 B). Which field feeds
 * which kind of rule is in the table of kinds below. */
static void add_event(sl_buf *b, int k)
{
    sl_buf_printf(
        b,
        "{\"specversion\":\"1.0\",\"id\":\"e%d\",\"source\":\"/s%d/x%d\",\"type\":\"t%d\","
        "\"subject\":\"%s%d\",\"partitionkey\":\"k%d\",\"data\":{\"n\":%d,\"m\":%d.5,"
        "\"g\":\"g%d\",\"region\":\"%s\",\"o%d\":true,%s\"file\":\"f%d.e%d\","
        "\"path\":\"/w/%d/k%d/end\",\"ip\":\"10.%d.%d.%d\",\"h\":\"h%d\","
        "\"deep\":{\"a\":{\"b\":\"x%d\"},\"c\":%d},\"tags\":[\"a%d\",\"b%d\"]}}\n",
        k, V(k, 1), k % 7, V(k, 0), k % 2 ? "Sub" : "sUB", V(k, 2), k % 64, V(k, 3), V(k, 4),
        V(k, 5), g_region[k % 4], V(k, 6), k % 3 == 0 ? "\"miss\":1," : "", k, V(k, 7), V(k, 8),
        k % 5, V(k, 9), k % 256, k % 200 + 1, V(k, 10), V(k, 11), V(k, 12), V(k, 13), V(k, 14));
}

/* ---- the generator: rules ----------------------------------------------------------- */

typedef enum kind {
    K_TYPE,       /* type = { "tP" } */
    K_TYPE_OR,    /* type = { "tP", "tP+50" } (a list is an OR) */
    K_PREFIX,     /* source prefix "/sP/" */
    K_PREFIX_IC,  /* source prefix equals-ignore-case "/SP/" */
    K_SUFFIX,     /* data.file suffix ".eP" */
    K_ANYBUT,     /* data.g = "gP" and data.region anything-but { "eu", "us" } */
    K_ANYBUT_PRE, /* type = "tP" and data.g anything-but prefix "g1" */
    K_NUM_EQ,     /* data.n numeric = P */
    K_NUM_RANGE,  /* data.m numeric >= 5P, < 5P + 5 */
    K_NUM_LT,     /* data.deep.c numeric < P (P = 0 matches nothing) */
    K_EXISTS,     /* data.oP exists */
    K_NOT_EXISTS, /* type = "tP" and data.miss does not exist */
    K_EQ_IC,      /* subject equals-ignore-case "SUBP" */
    K_EXACT_CASE, /* subject = "SubP" (half of K_EQ_IC's events) */
    K_WILDCARD,   /* data.path wildcard "/w/P/x/end" with x = "*" */
    K_CIDR,       /* data.ip cidr 10.P.0.0/16 */
    K_OR,         /* $or: data.h = "hP", or data.deep.a.b = "xP" */
    K_NESTED,     /* data.deep.a.b = "xP" (overlaps K_OR of the same P) */
    K_ARRAY,      /* data.tags holds "aP" */
    NREG,         /* the kinds above are the regular ones */
    K_ALL = NREG, /* no match at all: every event */
    K_NEVER,      /* type = { "never" }: no event */
} kind;

typedef struct rdef {
    char name[24];
    kind kind;
    int p;
    bool beginning; /* start = "beginning" */
} rdef;

/* The Lua match of a kind ("" for K_ALL). */
static void add_match(sl_buf *b, kind kd, int p)
{
    switch (kd) {
    case K_TYPE:
        sl_buf_printf(b, "match = { type = { \"t%d\" } }, ", p);
        break;
    case K_TYPE_OR:
        sl_buf_printf(b, "match = { type = { \"t%d\", \"t%d\" } }, ", p, p + 50);
        break;
    case K_PREFIX:
        sl_buf_printf(b, "match = { source = { { prefix = \"/s%d/\" } } }, ", p);
        break;
    case K_PREFIX_IC:
        sl_buf_printf(
            b,
            "match = { source = { { prefix = { [\"equals-ignore-case\"] = \"/S%d/\" } } } "
            "}, ",
            p);
        break;
    case K_SUFFIX:
        sl_buf_printf(b, "match = { data = { file = { { suffix = \".e%d\" } } } }, ", p);
        break;
    case K_ANYBUT:
        sl_buf_printf(b,
                      "match = { data = { g = { \"g%d\" }, region = { { [\"anything-but\"] = { "
                      "\"eu\", \"us\" } } } } }, ",
                      p);
        break;
    case K_ANYBUT_PRE:
        sl_buf_printf(b,
                      "match = { type = { \"t%d\" }, data = { g = { { [\"anything-but\"] = { "
                      "prefix = \"g1\" } } } } }, ",
                      p);
        break;
    case K_NUM_EQ:
        sl_buf_printf(b, "match = { data = { n = { { numeric = { \"=\", %d } } } } }, ", p);
        break;
    case K_NUM_RANGE:
        sl_buf_printf(b, "match = { data = { m = { { numeric = { \">=\", %d, \"<\", %d } } } } }, ",
                      5 * p, 5 * p + 5);
        break;
    case K_NUM_LT:
        sl_buf_printf(b, "match = { data = { deep = { c = { { numeric = { \"<\", %d } } } } } }, ",
                      p);
        break;
    case K_EXISTS:
        sl_buf_printf(b, "match = { data = { o%d = { { exists = true } } } }, ", p);
        break;
    case K_NOT_EXISTS:
        sl_buf_printf(
            b, "match = { type = { \"t%d\" }, data = { miss = { { exists = false } } } }, ", p);
        break;
    case K_EQ_IC:
        sl_buf_printf(b, "match = { subject = { { [\"equals-ignore-case\"] = \"SUB%d\" } } }, ", p);
        break;
    case K_EXACT_CASE:
        sl_buf_printf(b, "match = { subject = { \"Sub%d\" } }, ", p);
        break;
    case K_WILDCARD:
        sl_buf_printf(b, "match = { data = { path = { { wildcard = \"/w/%d/*/end\" } } } }, ", p);
        break;
    case K_CIDR:
        sl_buf_printf(b, "match = { data = { ip = { { cidr = \"10.%d.0.0/16\" } } } }, ", p);
        break;
    case K_OR:
        sl_buf_printf(b,
                      "match = { [\"$or\"] = { { data = { h = { \"h%d\" } } }, "
                      "{ data = { deep = { a = { b = { \"x%d\" } } } } } } }, ",
                      p, p);
        break;
    case K_NESTED:
        sl_buf_printf(b, "match = { data = { deep = { a = { b = { \"x%d\" } } } } }, ", p);
        break;
    case K_ARRAY:
        sl_buf_printf(b, "match = { data = { tags = { \"a%d\" } } }, ", p);
        break;
    case K_ALL:
        break;
    case K_NEVER:
        sl_buf_printf(b, "match = { type = { \"never\" } }, ");
        break;
    }
}

/* Whether the pattern of (kd, p) matches event k: the same facts as
 * add_event() and add_match(), written the other way round. */
static bool matches(kind kd, int p, int k)
{
    switch (kd) {
    case K_TYPE:
        return V(k, 0) == p;
    case K_TYPE_OR:
        return V(k, 0) == p || V(k, 0) == p + 50;
    case K_PREFIX:
    case K_PREFIX_IC:
        return V(k, 1) == p;
    case K_SUFFIX:
        return V(k, 7) == p;
    case K_ANYBUT:
        return V(k, 5) == p && k % 4 >= 2;
    case K_ANYBUT_PRE: {
        int g = V(k, 5);
        return V(k, 0) == p && !(g == 1 || (g >= 10 && g <= 19));
    }
    case K_NUM_EQ:
        return V(k, 3) == p;
    case K_NUM_RANGE:
        return V(k, 4) >= 5 * p && V(k, 4) < 5 * p + 5; /* m = V + 0.5 */
    case K_NUM_LT:
        return V(k, 12) < p;
    case K_EXISTS:
        return V(k, 6) == p;
    case K_NOT_EXISTS:
        return V(k, 0) == p && k % 3 != 0;
    case K_EQ_IC:
        return V(k, 2) == p;
    case K_EXACT_CASE:
        return V(k, 2) == p && k % 2 == 1;
    case K_WILDCARD:
        return V(k, 8) == p;
    case K_CIDR:
        return V(k, 9) == p;
    case K_OR:
        return V(k, 10) == p || V(k, 11) == p;
    case K_NESTED:
        return V(k, 11) == p;
    case K_ARRAY:
        return V(k, 13) == p;
    case K_ALL:
        return true;
    case K_NEVER:
        return false;
    }
    return false;
}

/* The rules of the main config: "all" (no match), "never", three copies of
 * the first K_TYPE patterns (identical patterns on two rules each), then
 * the regular kinds in turn, P growing every NREG rules: NRULES in all. */
static size_t main_rules(rdef *r)
{
    size_t n = 0;
    r[n++] = (rdef){"all", K_ALL, 0, false};
    r[n++] = (rdef){"never", K_NEVER, 0, false};
    for (int i = 0; i < 3; i++) {
        r[n] = (rdef){"", K_TYPE, i, false};
        snprintf(r[n].name, sizeof r[n].name, "dup%d", i);
        n++;
    }
    for (int i = 0; n < NRULES; i++, n++) {
        r[n] = (rdef){"", (kind)(i % NREG), i / NREG, false};
        snprintf(r[n].name, sizeof r[n].name, "r%d", i);
    }
    return n;
}

/* Writes the config: set "s" of 4 partitions and the rules, each to
 * out/NAME.ndjson; with slow_port > 0, the rule named slow goes to an
 * HTTP receiver on that port instead, retrying quickly and without end
 * (however long the outage lasts on a slow machine, nothing is given up). */
static void write_cfg(const char *path, const rdef *r, size_t n, const char *slow, int slow_port)
{
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "set \"s\" { partitions = 4 }\n");
    for (size_t i = 0; i < n; i++) {
        sl_buf_printf(&b, "rule \"%s\" { set = \"s\", ", r[i].name);
        add_match(&b, r[i].kind, r[i].p);
        if (r[i].beginning)
            sl_buf_printf(&b, "start = \"beginning\", ");
        if (slow && strcmp(r[i].name, slow) == 0)
            sl_buf_printf(&b,
                          "retry = { attempts = 1000000, max_age = \"forever\", initial = "
                          "\"50ms\", max = \"300ms\" },\n"
                          "  target = target.http { url = \"http://127.0.0.1:%d/slow\", "
                          "timeout = \"10s\" } }\n",
                          slow_port);
        else
            sl_buf_printf(&b, "target = target.file { path = \"out/%s.ndjson\" } }\n", r[i].name);
    }
    it_write_file(path, "%.*s", (int)b.len, (const char *)b.data);
    sl_buf_free(&b);
}

/* ---- posting ------------------------------------------------------------------------- */

/* Posts events from..to-1, POST_BATCH per request, asserting each was
 * accepted. */
static void post_range(it_server *s, int from, int to)
{
    sl_buf b = SL_BUF_INIT;
    for (int k = from; k < to;) {
        int end = k + POST_BATCH < to ? k + POST_BATCH : to;
        b.len = 0;
        for (int j = k; j < end; j++)
            add_event(&b, j);
        json_decref(it_post_all(s, "s", NULL, &b, (size_t)(end - k)));
        k = end;
    }
    sl_buf_free(&b);
}

/* ---- reading what came out --------------------------------------------------------- */

static void make_dir(const it_server *s, const char *name)
{
    char p[PATH_MAX];
    it_path(p, s, name);
    if (mkdir(p, 0755) && errno != EEXIST)
        fail_msg("mkdir %s: %s", p, strerror(errno));
}

static void out_path(char *p, const it_server *s, const char *rule)
{
    char name[64];
    snprintf(name, sizeof name, "out/%s.ndjson", rule);
    it_path(p, s, name);
}

/* Lines in a file (0 when it does not exist). Never asserts. */
static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = 0;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < got; i++)
            n += buf[i] == '\n';
    fclose(f);
    return n;
}

/* Event number of an id "eK" (K < n), or -1. */
static int id_num(const char *id, int n)
{
    if (!id || id[0] != 'e' || !id[1])
        return -1;
    char *end;
    long k = strtol(id + 1, &end, 10);
    return *end || k < 0 || k >= n ? -1 : (int)k;
}

/* How many times each event 0..n-1 is in the file (a missing file holds
 * none); fails on a line that is not one of our events. Caller frees. */
static unsigned *file_counts(const char *path, int n, size_t *lines)
{
    unsigned *c = calloc((size_t)n, sizeof *c);
    assert_non_null(c);
    *lines = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return c;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        (*lines)++;
        json_t *j = json_loads(line, 0, NULL);
        int k = id_num(json_string_value(json_object_get(j, "id")), n);
        json_decref(j);
        if (k < 0)
            fail_msg("%s line %zu is not one of the %d events: %.200s", path, *lines, n, line);
        c[k]++;
    }
    free(line);
    fclose(f);
    return c;
}

/* What a rule may hold of event k. */
enum { W_NO = 0, W_ONCE = 1, W_MAYBE = 2 };

/* Checks counts c of rule name against want (W_*, n events): each W_ONCE
 * event exactly once, each W_MAYBE at most once, no W_NO event. Fails with
 * the figures and the first events that are wrong. Returns the deliveries. */
static size_t check_counts(const char *name, const unsigned *c, const unsigned char *want, int n)
{
    size_t missing = 0, extra = 0, twice = 0, got = 0;
    int first_missing = -1, first_extra = -1, first_twice = -1;
    for (int k = 0; k < n; k++) {
        got += c[k];
        if (c[k] > 1) {
            twice++;
            if (first_twice < 0)
                first_twice = k;
        }
        if (want[k] == W_ONCE && c[k] == 0) {
            missing++;
            if (first_missing < 0)
                first_missing = k;
        }
        if (want[k] == W_NO && c[k] > 0) {
            extra++;
            if (first_extra < 0)
                first_extra = k;
        }
    }
    if (missing || extra || twice)
        fail_msg("rule %s: %zu of its events missing (first e%d), %zu it must not have (first "
                 "e%d), %zu more than once (first e%d); -1: none",
                 name, missing, first_missing, extra, first_extra, twice, first_twice);
    return got;
}

/* Checks the file of rule r against matches() over events 0..n-1, each
 * exactly once. Returns the deliveries. */
static size_t check_rule_file(const it_server *s, const rdef *r, int n)
{
    char p[PATH_MAX];
    out_path(p, s, r->name);
    size_t lines;
    unsigned *c = file_counts(p, n, &lines);
    unsigned char *want = malloc((size_t)n);
    assert_non_null(want);
    for (int k = 0; k < n; k++)
        want[k] = matches(r->kind, r->p, k) ? W_ONCE : W_NO;
    size_t got = check_counts(r->name, c, want, n);
    free(want);
    free(c);
    return got;
}

/* Events 0..n-1 that rule r matches. */
static size_t expected(const rdef *r, int n)
{
    size_t e = 0;
    for (int k = 0; k < n; k++)
        e += matches(r->kind, r->p, k);
    return e;
}

/* ---- 1. every event reaches exactly its rules ---------------------------------------- */

static void test_routing_300(void **state)
{
    it_server *s = *state;
    static rdef r[MAXRULES];
    size_t nr = main_rules(r);
    const int n = 4000;
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    make_dir(s, "out");
    write_cfg(cfg, r, nr, NULL, 0);
    it_start_config(s, cfg, WAIT_S);
    post_range(s, 0, n);
    it_wait_caught_up(s, WAIT_S);

    /* The generator covers what it should: each regular kind routes some
     * events, some events reach several rules (beside "all"), some only
     * "all". */
    size_t per_kind[NREG] = {0};
    unsigned *hits = calloc((size_t)n, sizeof *hits);
    assert_non_null(hits);
    size_t total = 0;
    for (size_t i = 0; i < nr; i++) {
        total += check_rule_file(s, &r[i], n);
        if (r[i].kind < NREG)
            per_kind[r[i].kind] += expected(&r[i], n);
        for (int k = 0; k < n; k++)
            hits[k] += r[i].kind != K_ALL && matches(r[i].kind, r[i].p, k);
    }
    for (int kd = 0; kd < NREG; kd++)
        if (!per_kind[kd])
            fail_msg("kind %d routes no event: the generator is wrong", kd);
    size_t none = 0, several = 0, most = 0;
    for (int k = 0; k < n; k++) {
        none += hits[k] == 0;
        several += hits[k] >= 3;
        most = hits[k] > most ? hits[k] : most;
    }
    free(hits);
    assert_true(none > 0 && several > 0);
    char p[PATH_MAX];
    out_path(p, s, "never");
    assert_int_equal(count_lines(p), 0);
    printf("%zu rules, %d events: %zu deliveries; %zu events reached only \"all\", %zu three or "
           "more rules (up to %zu)\n",
           nr, n, total, none, several, most);
    s->passed = true;
}

/* ---- 2. a clean restart resumes every cursor ---------------------------------------- */

static void test_restart_300(void **state)
{
    it_server *s = *state;
    static rdef r[MAXRULES];
    size_t nr = main_rules(r);
    const int n1 = 1000, n2 = 2500, n3 = 3500;
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    make_dir(s, "out");
    write_cfg(cfg, r, nr, NULL, 0);
    it_start_config(s, cfg, WAIT_S);
    post_range(s, 0, n1);
    it_wait_caught_up(s, WAIT_S);

    /* More events, and SIGTERM at once: the rules are in the middle of
     * them. A clean stop commits what was delivered. */
    post_range(s, n1, n2);
    char p[PATH_MAX];
    out_path(p, s, "all");
    size_t at_stop = count_lines(p);
    assert_int_equal(it_srv_stop(s, SIGTERM, 30) & 0xffff, 0);
    printf("SIGTERM with %zu of %d events in the file of \"all\"\n", at_stop, n2);

    it_restart(s, WAIT_S);
    post_range(s, n2, n3);
    it_wait_caught_up(s, WAIT_S);
    size_t total = 0;
    for (size_t i = 0; i < nr; i++)
        total += check_rule_file(s, &r[i], n3);

    /* A restart once everything is delivered delivers nothing again. */
    assert_int_equal(it_srv_stop(s, SIGTERM, 30) & 0xffff, 0);
    it_restart(s, WAIT_S);
    it_wait_caught_up(s, WAIT_S);
    size_t again = 0;
    for (size_t i = 0; i < nr; i++)
        again += check_rule_file(s, &r[i], n3);
    assert_int_equal(again, total);
    printf("%zu rules, %d events over two restarts: %zu deliveries, each once\n", nr, n3, total);
    s->passed = true;
}

/* ---- 3. one slow rule among 300 ------------------------------------------------------- */

/* Waits until every file rule (all but skip) holds its share of events
 * 0..n-1; fails naming the first that does not after WAIT_S. */
static void wait_files(const it_server *s, const rdef *r, size_t nr, const char *skip, int n)
{
    size_t *want = calloc(nr, sizeof *want);
    assert_non_null(want);
    for (size_t i = 0; i < nr; i++)
        want[i] = expected(&r[i], n);
    size_t lagging = 0, have = 0; /* the first rule short of its events, and what it has */
    char p[PATH_MAX];
    for (double end = it_mono() + WAIT_S * it_scale(); it_mono() < end; it_sleep_ms(100)) {
        for (lagging = 0; lagging < nr; lagging++) {
            if (strcmp(r[lagging].name, skip) == 0)
                continue;
            out_path(p, s, r[lagging].name);
            if ((have = count_lines(p)) < want[lagging])
                break;
        }
        if (lagging == nr)
            break;
    }
    size_t short_of = lagging < nr ? want[lagging] : 0;
    free(want);
    if (lagging < nr)
        fail_msg("rule %s has %zu of its %zu events of 0..%d after %.0f s while one rule is slow",
                 r[lagging].name, have, short_of, n - 1, WAIT_S);
}

/* How many times the receiver got each event 0..n-1 in a request it
 * answered 2xx. Caller frees. */
static unsigned *rx_counts(rx_receiver *rx, int n, size_t *ok)
{
    unsigned *c = calloc((size_t)n, sizeof *c);
    assert_non_null(c);
    *ok = 0;
    size_t nreq = rx_count(rx);
    for (size_t i = 0; i < nreq; i++) {
        const rx_req *q = rx_req_at(rx, i);
        if (!q || q->status < 200 || q->status > 299)
            continue;
        (*ok)++;
        json_t *j = json_loadb(q->body, q->body_len, 0, NULL);
        int k = id_num(json_string_value(json_object_get(j, "id")), n);
        json_decref(j);
        if (k < 0)
            fail_msg("request %zu to the slow rule is not one of our events: %.200s", i, q->body);
        c[k]++;
    }
    return c;
}

/* The partitions rule name reads through its set's shared reader
 * (GET /v1/rules: partitions[].shared). */
static int shared_parts(it_server *s, const char *name)
{
    json_t *e = it_rule(s, name);
    json_t *ps = json_object_get(e, "partitions");
    int n = 0;
    for (size_t i = 0; i < json_array_size(ps); i++)
        n += json_is_true(json_object_get(json_array_get(ps, i), "shared"));
    json_decref(e);
    return n;
}

static void test_slow_rule(void **state)
{
    it_server *s = *state;
    static rdef r[MAXRULES];
    size_t nr = main_rules(r);
    /* The slow one: a K_TYPE_OR rule (about 2 % of the events). */
    const char *slow = NULL;
    for (size_t i = 0; i < nr && !slow; i++)
        if (r[i].kind == K_TYPE_OR && r[i].p == 4)
            slow = r[i].name;
    assert_non_null(slow);
    const rdef *slow_r = NULL;
    for (size_t i = 0; i < nr; i++)
        if (strcmp(r[i].name, slow) == 0)
            slow_r = &r[i];
    rx_receiver *rx = g_rx = rx_new();
    if (!rx || rx_start(rx, 0))
        fail_msg("cannot start the HTTP receiver");
    /* Down: every request gets 503 until the test says otherwise. */
    assert_int_equal(rx_fail(rx, -1, 503, "down", NULL), 0);
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    make_dir(s, "out");
    write_cfg(cfg, r, nr, slow, rx_port(rx));
    it_start_config(s, cfg, WAIT_S);

    /* Two rounds of events while the slow rule's target is down (for 3 s
     * at least): the other rules deliver them all each time, the slow one
     * nothing. */
    const int n1 = 1500, n2 = 3000, n3 = 4000;
    double down_at = it_mono();
    post_range(s, 0, n1);
    wait_files(s, r, nr, slow, n1);
    post_range(s, n1, n2);
    wait_files(s, r, nr, slow, n2);
    while (it_mono() < down_at + 3.0)
        it_sleep_ms(50);
    size_t ok;
    unsigned *c = rx_counts(rx, n3, &ok);
    free(c);
    size_t tried = rx_count(rx);
    json_t *e = it_rule(s, slow);
    if (ok != 0 || it_rule_int(e, "delivered") != 0)
        it_fail_rule(e, "the slow rule delivered while its target was down (%zu ok)", ok);
    if (it_rule_int(e, "lag") == 0)
        it_fail_rule(e, "the slow rule is not behind while its target is down");
    json_decref(e);
    /* It left the shared readers of the partitions it failed on. */
    if (shared_parts(s, slow) == 4)
        fail_msg("the slow rule still reads through the shared readers while its target is down");
    for (size_t i = 0; i < nr; i++)
        if (&r[i] != slow_r)
            check_rule_file(s, &r[i], n2);
    printf("target down: the %zu other rules delivered all %d events; the slow rule tried %zu "
           "times, delivered 0 of %zu\n",
           nr - 1, n2, tried, expected(slow_r, n2));

    /* Then it stalls: every answer takes 400 ms (the rule's timeout is 10
     * s, so none is sent twice). A third round reaches the other rules
     * meanwhile. Whether the slow rule is still behind when they are done
     * depends on the machine's speed, so it is only reported. */
    rx_unscript(rx);
    rx_set_delay(rx, 400);
    post_range(s, n2, n3);
    wait_files(s, r, nr, slow, n3);
    e = it_rule(s, slow);
    printf("target slow: the other rules delivered all %d events; the slow rule %lld of %zu, lag "
           "%lld\n",
           n3, (long long)it_rule_int(e, "delivered"), expected(slow_r, n3),
           (long long)it_rule_int(e, "lag"));
    json_decref(e);

    /* Up again: the slow rule catches up, each of its events once. */
    rx_unscript(rx);
    it_wait_caught_up(s, WAIT_S);
    c = rx_counts(rx, n3, &ok);
    unsigned char *want = malloc((size_t)n3);
    assert_non_null(want);
    for (int k = 0; k < n3; k++)
        want[k] = matches(slow_r->kind, slow_r->p, k) ? W_ONCE : W_NO;
    size_t got = check_counts(slow, c, want, n3);
    free(want);
    free(c);
    for (size_t i = 0; i < nr; i++)
        if (&r[i] != slow_r)
            check_rule_file(s, &r[i], n3);
    printf("target up: the slow rule caught up with %zu events, each once; the others unchanged\n",
           got);
    s->passed = true;
}

/* ---- 4. reload adding and removing rules under load ---------------------------------- */

#define LOAD_BATCH 100
#define LOAD_MAX_BATCHES 200
#define LOAD_AFTER 10 /* batches posted once the reload is done */

/* The writer thread: posts batches of LOAD_BATCH events until told to
 * stop, recording the reload phase when each POST began and when its
 * answer came. Never asserts (a thread). */
typedef struct loader {
    int port;
    atomic_int phase; /* 0 before SIGHUP, 1 reload under way, 2 done (main sets it) */
    atomic_bool stop;
    atomic_int done;   /* batches acknowledged */
    atomic_bool ended; /* the thread is done (stopped, failed or out of batches) */
    int phase_start[LOAD_MAX_BATCHES];
    int phase_ack[LOAD_MAX_BATCHES];
    char err[256];
} loader;

static void *load_main(void *arg)
{
    loader *l = arg;
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < LOAD_MAX_BATCHES && !atomic_load(&l->stop); i++) {
        b.len = 0;
        for (int k = i * LOAD_BATCH; k < (i + 1) * LOAD_BATCH; k++)
            add_event(&b, k);
        l->phase_start[i] = atomic_load(&l->phase);
        it_resp resp;
        int tries = 0;
        for (;;) {
            it_call call = {
                .path = "/v1/sets/s/events", .ctype = IT_CT_NDJSON, .body = b.data, .len = b.len};
            int rc = it_http(NULL, l->port, &call, &resp);
            if (rc == 0 && resp.status == 503 && ++tries < 100) { /* back-pressure */
                it_resp_free(&resp);
                it_sleep_ms(20);
                continue;
            }
            break;
        }
        json_t *j = resp.status == 200 ? json_loads(it_body(&resp), 0, NULL) : NULL;
        json_int_t acc = json_integer_value(json_object_get(j, "accepted"));
        json_decref(j);
        if (resp.status != 200 || acc != LOAD_BATCH) {
            snprintf(l->err, sizeof l->err, "batch %d: status %ld, %lld accepted: %.120s %s", i,
                     resp.status, (long long)acc, it_body(&resp), resp.err);
            it_resp_free(&resp);
            break;
        }
        it_resp_free(&resp);
        l->phase_ack[i] = atomic_load(&l->phase);
        atomic_store(&l->done, i + 1);
        it_sleep_ms(40);
    }
    sl_buf_free(&b);
    atomic_store(&l->ended, true);
    return NULL;
}

static void wait_batches(loader *l, int n)
{
    for (double end = it_mono() + WAIT_S * it_scale(); it_mono() < end; it_sleep_ms(10))
        if (atomic_load(&l->done) >= n || atomic_load(&l->ended))
            return;
}

static void test_reload_300(void **state)
{
    it_server *s = *state;
    static rdef r[MAXRULES], r2[MAXRULES];
    size_t nr = main_rules(r);
    /* The new config: every rule rI with I % 10 == 7 removed, 20 new rules
     * (two of them from the beginning), the rest kept. */
    size_t nr2 = 0, removed = 0;
    bool *gone = calloc(nr, sizeof *gone);
    assert_non_null(gone);
    for (size_t i = 0; i < nr; i++) {
        int idx = r[i].name[0] == 'r' ? atoi(r[i].name + 1) : -1;
        if (idx >= 0 && idx % 10 == 7) {
            gone[i] = true;
            removed++;
            continue;
        }
        r2[nr2++] = r[i];
    }
    size_t kept = nr2;
    for (int j = 0; j < 20; j++) {
        r2[nr2] = (rdef){"", (kind)(j % NREG), j / NREG + 3, j < 2};
        snprintf(r2[nr2].name, sizeof r2[nr2].name, "%s%d", j < 2 ? "begin" : "new", j);
        nr2++;
    }
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    make_dir(s, "out");
    write_cfg(cfg, r, nr, NULL, 0);
    it_start_config(s, cfg, WAIT_S);

    loader *l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->port = s->port;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, load_main, l), 0);
    wait_batches(l, 10);
    write_cfg(cfg, r2, nr2, NULL, 0);
    atomic_store(&l->phase, 1);
    kill(s->pid, SIGHUP);
    bool reloaded = false;
    for (double end = it_mono() + WAIT_S * it_scale(); it_mono() < end && !reloaded;
         it_sleep_ms(10))
        if ((reloaded = it_log_contains(s, "reloaded")) || it_log_contains(s, "reload of"))
            break; /* done, or refused / failed (the check below says so) */
    atomic_store(&l->phase, 2);
    int at_reload = atomic_load(&l->done);
    if (reloaded)
        wait_batches(l, at_reload + LOAD_AFTER + 1); /* + the one in flight */
    atomic_store(&l->stop, true);
    pthread_join(th, NULL);
    if (!reloaded)
        fail_msg("the server log has no \"reloaded\" line after %.0f s", WAIT_S);
    if (l->err[0])
        fail_msg("the writer failed: %s", l->err);
    int nb = atomic_load(&l->done), n = nb * LOAD_BATCH;
    int before = 0, after = 0;
    for (int i = 0; i < nb; i++) {
        before += l->phase_ack[i] == 0;
        after += l->phase_start[i] == 2;
    }
    if (after < LOAD_AFTER || before < 10)
        fail_msg("the writer posted %d batches before the SIGHUP and %d after the reload", before,
                 after);
    it_wait_caught_up(s, WAIT_S);

    json_t *listed = it_rules(s);
    for (size_t i = 0; i < nr; i++)
        if (gone[i] && it_rule_in(listed, r[i].name))
            fail_msg("removed rule %s is still listed", r[i].name);
    for (size_t i = 0; i < nr2; i++)
        if (!it_rule_in(listed, r2[i].name))
            fail_msg("rule %s is not listed after the reload", r2[i].name);
    json_decref(listed);

    /* Each event is "before" (acknowledged before the SIGHUP), "after"
     * (posted once the reload was logged) or in between. */
    unsigned char *cls = malloc((size_t)n), *want = malloc((size_t)n);
    assert_non_null(cls);
    assert_non_null(want);
    for (int k = 0; k < n; k++) {
        int b = k / LOAD_BATCH;
        cls[k] = l->phase_ack[b] == 0 ? 0 : l->phase_start[b] == 2 ? 2 : 1;
    }
    size_t got_kept = 0, got_removed = 0, got_new = 0;
    char p[PATH_MAX];
    for (size_t i = 0; i < nr; i++) { /* kept and removed rules */
        out_path(p, s, r[i].name);
        size_t lines;
        unsigned *c = file_counts(p, n, &lines);
        for (int k = 0; k < n; k++) {
            bool m = matches(r[i].kind, r[i].p, k);
            want[k] = !m ? W_NO : !gone[i] ? W_ONCE : cls[k] == 2 ? W_NO : W_MAYBE;
        }
        size_t got = check_counts(r[i].name, c, want, n);
        *(gone[i] ? &got_removed : &got_kept) += got;
        free(c);
    }
    for (size_t i = kept; i < nr2; i++) { /* new rules */
        out_path(p, s, r2[i].name);
        size_t lines;
        unsigned *c = file_counts(p, n, &lines);
        for (int k = 0; k < n; k++) {
            bool m = matches(r2[i].kind, r2[i].p, k);
            want[k] = !m                               ? W_NO
                      : r2[i].beginning || cls[k] == 2 ? W_ONCE
                      : cls[k] == 1                    ? W_MAYBE
                                                       : W_NO;
        }
        got_new += check_counts(r2[i].name, c, want, n);
        free(c);
    }
    printf("reload of %zu rules to %zu (%zu removed, %zu new) under load: %d events (%d batches "
           "before the SIGHUP, %d after the reload); deliveries: kept %zu, removed %zu, new %zu\n",
           nr, nr2, removed, nr2 - kept, n, before, after, got_kept, got_removed, got_new);
    free(cls);
    free(want);
    free(gone);
    free(l);
    s->passed = true;
}

/* ---- 5. leaving the shared reader and coming back ----------------------------------- */

/* Twenty file rules and one HTTP rule whose target fails at first, all
 * matching every event: the HTTP rule leaves the shared readers (its
 * payloads wait for retries) while the others read on; once its target
 * answers it delivers everything once, rejoins both shared readers, and
 * keeps delivering from there. */
static void test_rejoin(void **state)
{
    it_server *s = *state;
    rx_receiver *rx = g_rx = rx_new();
    if (!rx || rx_start(rx, 0))
        fail_msg("cannot start the HTTP receiver");
    assert_int_equal(rx_fail(rx, -1, 503, "down", NULL), 0);
    char cfg[PATH_MAX];
    it_path(cfg, s, "sluice.lua");
    make_dir(s, "out");
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "set \"s\" { partitions = 2 }\n");
    for (int i = 0; i < 20; i++)
        sl_buf_printf(&b,
                      "rule \"f%d\" { set = \"s\", target = target.file { path = "
                      "\"out/f%d.ndjson\" } }\n",
                      i, i);
    sl_buf_printf(&b,
                  "rule \"h\" { set = \"s\", retry = { attempts = 1000000, max_age = \"forever\",\n"
                  "  initial = \"50ms\", max = \"200ms\" },\n"
                  "  target = target.http { url = \"http://127.0.0.1:%d/h\" } }\n",
                  rx_port(rx));
    it_write_file(cfg, "%.*s", (int)b.len, (const char *)b.data);
    sl_buf_free(&b);
    it_start_config(s, cfg, WAIT_S);
    assert_int_equal(shared_parts(s, "h"), 2);

    post_range(s, 0, 200);
    for (int i = 0; i < 20; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        it_wait_rule_int(s, name, "delivered", 200, WAIT_S);
    }
    if (shared_parts(s, "h") != 0)
        fail_msg("rule h still reads shared while its target fails");

    rx_unscript(rx);
    it_wait_rule_int(s, "h", "delivered", 200, WAIT_S);
    int shared = 0;
    for (double end = it_mono() + WAIT_S; it_mono() < end && (shared = shared_parts(s, "h")) < 2;
         it_sleep_ms(100))
        ;
    if (shared != 2)
        fail_msg("rule h reads %d of 2 partitions shared after catching up", shared);

    post_range(s, 200, 300);
    it_wait_rule_int(s, "h", "delivered", 300, WAIT_S);
    it_wait_rule_int(s, "f0", "delivered", 300, WAIT_S);
    size_t ok;
    unsigned *c = rx_counts(rx, 300, &ok);
    for (int k = 0; k < 300; k++)
        if (c[k] != 1)
            fail_msg("rule h received event %d %u times", k, c[k]);
    free(c);
    printf("rejoin: rule h left both shared readers while its target failed, caught up with "
           "200 events and rejoined; 300 events each once\n");
    s->passed = true;
}

/* ---- main ---------------------------------------------------------------------------- */

#define T(f) cmocka_unit_test_setup_teardown(f, it_setup, teardown)

int main(void)
{
    if (it_init("test_rulescale"))
        return 1;
    const struct CMUnitTest tests[] = {
        T(test_routing_300),
        T(test_restart_300),
        T(test_slow_rule),
        T(test_reload_300),
        T(test_rejoin),
    };
    /* ITEST_ONLY=NAME (a cmocka pattern) runs those alone. */
    if (getenv("ITEST_ONLY"))
        cmocka_set_test_filter(getenv("ITEST_ONLY"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
