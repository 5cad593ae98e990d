/*
 * cli/cli_ruletest.c — `sluice test CONFIG.lua TESTS.lua`: tests for rules, run
 * without a server (docs/testing.md).
 *
 * Each test's events go the way a published event goes: sl_event_parse and
 * the set's schema for the event's type (a refused event is reported with the
 * ingest status and message), sl_event_encode, then sl_event_decorate with
 * the rule's set, partition 0 and the event's position as its offset. The
 * rule then evaluates them in a fresh rule VM (rules/rule.h): one call per
 * event, or for a rule with transform_batch one call per run of events of
 * the same lane, as the runner batches them. Nothing is stored and no target
 * is opened: the payloads the targets would receive go to lua/testing.lua,
 * in the tests file's own sandboxed state, for the verdict.
 */
#include "cli/cli.h"
#include "core/base/clock.h"
#include "server/config.h"
#include "core/bus/event.h"
#include "rules/lua_embed.h"
#include "rules/rule.h"
#include "rules/sandbox.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tester {
    const sl_config *cfg; /* its sets (ingest) */
    sl_ruleset rs;        /* its rules (a view of cfg) */
    const char *path;     /* the tests file, for messages */
    lua_State *T;         /* the tests file's state */
    int list;             /* stack slot of __sluice_tests() in T */
    bool verbose;
    int64_t now_ms;
    sl_event ev;
    sl_buf stored; /* one encoded event */
    sl_buf evs;    /* the decorated events of one test, back to back */
    const char **evp;
    size_t *evl, *num; /* length and 1-based number in the test of each accepted event */
    char (*lanes)[SL_EVENT_LANE_MAX + 1];
    size_t cap;
    sl_rule_out out;
} tester;

static void usage(FILE *f)
{
    fputs("usage: sluice test [--verbose] CONFIG.lua TESTS.lua\n"
          "\n"
          "Runs the tests declared in TESTS.lua against the rules of CONFIG.lua without\n"
          "starting anything: each test feeds events into a rule and checks what its\n"
          "targets would receive. Prints \"ok   NAME\" or \"FAIL NAME: why\" per test, then\n"
          "\"N passed, M failed\"; exit 0 when all pass, 1 otherwise, 2 for usage errors.\n"
          "\n"
          "  -v, --verbose   also print what the targets received in each test\n"
          "\n"
          "The TESTS.lua format is in docs/testing.md.\n",
          f);
}

static int read_whole(const char *path, sl_buf *out)
{
    sl_error err = {0};
    int rc = sl_buf_read_file(out, path, 64u << 20, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    return rc ? 1 : 0;
}

static int grow(tester *t, size_t n)
{
    if (n <= t->cap)
        return 0;
    size_t cap = t->cap ? t->cap * 2 : 64;
    while (cap < n)
        cap *= 2;
    const char **evp = realloc(t->evp, cap * sizeof *evp);
    if (evp)
        t->evp = evp;
    size_t *evl = realloc(t->evl, cap * sizeof *evl);
    if (evl)
        t->evl = evl;
    size_t *num = realloc(t->num, cap * sizeof *num);
    if (num)
        t->num = num;
    char(*lanes)[SL_EVENT_LANE_MAX + 1] = realloc(t->lanes, cap * sizeof *lanes);
    if (lanes)
        t->lanes = lanes;
    if (!evp || !evl || !num || !lanes)
        return SL_ENOMEM;
    t->cap = cap;
    return 0;
}

/* Takes one test event (JSON text) through ingest into t->evs as the rule
 * will read it, with offset as its offset. Returns 0; SL_EINVAL with err
 * saying why the server would refuse it; SL_ENOMEM. */
static int ingest(tester *t, const sl_rule_config *rc, const sl_set_decl *set, const char *json,
                  size_t len, int64_t offset, char *lane, sl_error *err)
{
    sl_set_config defaults;
    sl_set_config_default(&defaults);
    const sl_set_config *sc = set ? &set->cfg : &defaults;
    sl_event_limits lim = {.max_bytes = sc->max_event_bytes,
                           .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT,
                           .generate_ids = sc->generate_ids};
    sl_error e = {0};
    sl_event_status st = sl_event_parse(json, len, &lim, &t->ev, &e);
    if (st == SL_EVENT_OK && sl_config_check_event(set, &t->ev, &e))
        st = SL_EVENT_SCHEMA_VIOLATION;
    /* As the server's lane registry (core/bus/lanes.h) would. */
    if (st == SL_EVENT_OK && t->ev.lane[0] && !t->rs.lanes_auto &&
        !sl_ruleset_lane(&t->rs, t->ev.lane)) {
        st = SL_EVENT_UNKNOWN_LANE;
        sl_error_set(&e, SL_EINVAL, "lane \"%s\" is not declared", t->ev.lane);
    }
    if (st != SL_EVENT_OK)
        return sl_error_set(err, SL_EINVAL, "refused at ingest: %s: %s", sl_event_status_name(st),
                            e.msg[0] ? e.msg : "invalid");
    t->stored.len = 0;
    sl_event_fill fill = {.now_ms = t->now_ms};
    if (sl_event_encode(&t->ev, &fill, &t->stored))
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    if (t->stored.len > sc->max_event_bytes)
        return sl_error_set(err, SL_EINVAL,
                            "refused at ingest: TooLarge: the event takes %zu bytes stored, over "
                            "the set's limit of %u",
                            t->stored.len, sc->max_event_bytes);
    int r =
        sl_event_decorate((const char *)t->stored.data, t->stored.len, rc->set, 0, offset, &t->evs);
    if (r)
        return sl_error_set(err, r, "cannot decorate the event: %s", sl_strerror(r));
    memcpy(lane, t->ev.lane, SL_EVENT_LANE_MAX + 1);
    return 0;
}

/* Appends { event = first, last = last, msg = msg [, where = "FILE:LINE"] }
 * to the list at slot. */
static void add_failure(lua_State *T, int slot, size_t first, size_t last, const char *msg,
                        const char *where)
{
    lua_createtable(T, 0, 4);
    if (where) {
        lua_pushstring(T, where);
        lua_setfield(T, -2, "where");
    }
    lua_pushinteger(T, (lua_Integer)first);
    lua_setfield(T, -2, "event");
    lua_pushinteger(T, (lua_Integer)last);
    lua_setfield(T, -2, "last");
    lua_pushstring(T, msg);
    lua_setfield(T, -2, "msg");
    lua_rawseti(T, slot, (lua_Integer)luaL_len(T, slot) + 1);
}

static const sl_set_decl *find_set(const sl_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nsets; i++)
        if (strcmp(cfg->sets[i].name, name) == 0)
            return &cfg->sets[i];
    return NULL;
}

/* Prints "FAIL NAME: FILE:LINE: msg" for each problem of the test (the
 * list at slot): the first on the FAIL line, the others under it. */
static void print_problems(const tester *t, const char *name, int slot)
{
    lua_State *T = t->T;
    for (lua_Integer k = 1, n = luaL_len(T, slot); k <= n; k++) {
        lua_geti(T, slot, k);
        lua_getfield(T, -1, "line");
        lua_getfield(T, -2, "msg");
        if (k == 1)
            printf("FAIL %s: %s:%d: %s\n", name, t->path, (int)lua_tointeger(T, -2),
                   lua_tostring(T, -1));
        else
            printf("     %s:%d: %s\n", t->path, (int)lua_tointeger(T, -2), lua_tostring(T, -1));
        lua_pop(T, 3);
    }
}

/* "a, b, c" of the config's rule names, for an unknown rule. */
static void rule_names(const sl_ruleset *rs, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < rs->nrules && o + 4 < cap; i++) {
        int n = snprintf(out + o, cap - o, "%s%s", i ? ", " : "", rs->rules[i].name);
        o = n < 0 ? cap : o + (size_t)n;
    }
    if (o >= cap && cap > 4)
        memcpy(out + cap - 4, "...", 4);
}

/* What the runner does with an event of lane for base rule ridx
 * (docs/lanes.md): the rule number to evaluate in *at (the lane's override,
 * or the base rule when the lane falls back to it), or false when the lane
 * has no route here (ppe lanes by default: nothing is delivered). */
static bool lane_route(const sl_ruleset *rs, size_t ridx, const char *lane, size_t *at)
{
    *at = ridx;
    if (!*lane || sl_ruleset_override(rs, ridx, lane, at))
        return true;
    const sl_lane_decl *d = sl_ruleset_lane(rs, lane);
    return !d || d->fallback_base; /* undeclared (ingest let it in): an auto lane, boe */
}

/* Evaluates the accepted events (t->evp/evl, n of them) with the rule, each
 * by the rule's route for its lane; failures go to the list at slot.
 * Returns 0 or SL_ENOMEM. */
static int evaluate(tester *t, sl_rule_vm *vm, size_t ridx, size_t n, int slot)
{
    const sl_rule_config *rc = &t->rs.rules[ridx];
    sl_input_ctx ictx = {.rule = rc->name, .now_ms = t->now_ms};
    sl_rule_out_reset(&t->out);
    /* The runner gives transform_batch one lane per call. */
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && strcmp(t->lanes[a], t->lanes[b]) == 0; b++)
            ;
        size_t at;
        if (!lane_route(&t->rs, ridx, t->lanes[a], &at))
            continue;
        if (sl_ruleset_rule_at(&t->rs, at)->transform_batch) {
            size_t passed = 0;
            sl_error err = {0};
            if (sl_rule_eval_batch(vm, at, t->evp + a, t->evl + a, b - a, &ictx, &t->out, &passed,
                                   &err))
                add_failure(t->T, slot, t->num[a], t->num[b - 1], err.msg, NULL);
            continue;
        }
        for (size_t j = a; j < b; j++) {
            sl_rule_outcome oc;
            sl_error err = {0};
            if (sl_rule_eval(vm, at, t->evp[j], t->evl[j], &ictx, &t->out, &oc, &err))
                add_failure(t->T, slot, t->num[j], t->num[j], err.msg, NULL);
        }
    }
    return 0;
}

/* Runs test number i (1-based). Returns 1 when it passed, 0 when it failed,
 * or a negative SL_E… code when the run cannot go on. The stack of T is
 * left as it was. */
static int run_test(tester *t, lua_Integer i)
{
    lua_State *T = t->T;
    int top = lua_gettop(T);
    lua_geti(T, t->list, i);
    int ti = lua_gettop(T);
    lua_getfield(T, ti, "name");
    const char *name = lua_tostring(T, -1);
    lua_getfield(T, ti, "problems");
    if (luaL_len(T, -1) > 0) {
        print_problems(t, name, lua_gettop(T));
        lua_settop(T, top);
        return 0;
    }
    lua_getfield(T, ti, "rule");
    const sl_rule_config *rc = sl_ruleset_rule(&t->rs, lua_tostring(T, -1));
    if (!rc) {
        char names[512];
        rule_names(&t->rs, names, sizeof names);
        lua_getfield(T, ti, "rule_line");
        printf("FAIL %s: %s:%d: unknown rule \"%s\" (%s %s%s)\n", name, t->path,
               (int)lua_tointeger(T, -1), lua_tostring(T, -2), t->rs.path,
               t->rs.nrules ? "has: " : "has no rules", names);
        lua_settop(T, top);
        return 0;
    }
    size_t ridx = (size_t)(rc - t->rs.rules);
    const sl_set_decl *set = find_set(t->cfg, rc->set);

    lua_getfield(T, ti, "events");
    int events = lua_gettop(T);
    lua_newtable(T);
    int failures = lua_gettop(T);
    lua_Integer nev = luaL_len(T, events);
    int rc2 = grow(t, (size_t)nev);
    if (rc2) {
        lua_settop(T, top);
        return rc2;
    }
    /* Ingest: refused events take no offset, as in the server. */
    t->evs.len = 0;
    size_t n = 0;
    for (lua_Integer k = 1; k <= nev; k++) {
        lua_geti(T, events, k);
        size_t len;
        const char *json = lua_tolstring(T, -1, &len);
        size_t at = t->evs.len;
        sl_error err = {0};
        int r = ingest(t, rc, set, json, len, (int64_t)n, t->lanes[n], &err);
        lua_pop(T, 1);
        if (r == SL_ENOMEM) {
            lua_settop(T, top);
            return r;
        }
        if (r) {
            /* A refused event is the test's mistake more often than not: say
             * where it is. */
            char where[1100];
            lua_getfield(T, ti, "events_line");
            snprintf(where, sizeof where, "%s:%d", t->path, (int)lua_tointeger(T, -1));
            lua_pop(T, 1);
            add_failure(T, failures, (size_t)k, (size_t)k, err.msg, where);
            continue;
        }
        t->evl[n] = t->evs.len - at;
        t->num[n++] = (size_t)k;
    }
    /* evs may have moved while it grew: pointers last. */
    for (size_t j = 0, at = 0; j < n; at += t->evl[j++])
        t->evp[j] = (const char *)t->evs.data + at;

    /* A fresh VM per test, so what a rule keeps between calls (a counter, a
     * cache) does not leak from one test into the next. */
    sl_rule_vm *vm = NULL;
    sl_error err = {0};
    int r = sl_rule_vm_new(&t->rs, &vm, &err);
    if (r) {
        printf("FAIL %s: %s\n", name, err.msg[0] ? err.msg : sl_strerror(r));
        lua_settop(T, top);
        return r == SL_ENOMEM ? r : 0;
    }
    r = evaluate(t, vm, ridx, n, failures);
    sl_rule_vm_free(vm);
    if (r) {
        lua_settop(T, top);
        return r;
    }
    lua_createtable(T, (int)t->out.n, 0);
    int payloads = lua_gettop(T);
    for (size_t j = 0; j < t->out.n; j++) {
        size_t len;
        const char *p = sl_rule_out_get(&t->out, j, &len);
        lua_pushlstring(T, p, len);
        lua_rawseti(T, payloads, (lua_Integer)j + 1);
    }

    lua_getglobal(T, "__sluice_test_check");
    lua_pushinteger(T, i);
    lua_pushvalue(T, payloads);
    lua_pushvalue(T, failures);
    int passed = 0;
    r = sl_sandbox_call(T, 3, 1, &err);
    if (r) {
        printf("FAIL %s: checking the result failed: %s\n", name, err.msg);
    } else if (lua_isnil(T, -1)) {
        printf("ok   %s\n", name);
        passed = 1;
    } else {
        printf("FAIL %s: %s\n", name, lua_tostring(T, -1));
    }
    if (t->verbose) {
        for (size_t j = 0; j < t->out.n; j++) {
            size_t len;
            const char *p = sl_rule_out_get(&t->out, j, &len);
            printf("     [%zu] %.*s\n", j + 1, (int)len, p);
        }
        if (!t->out.n)
            printf("     (nothing received)\n");
        for (lua_Integer k = 1, nf = luaL_len(T, failures); k <= nf; k++) {
            lua_geti(T, failures, k);
            lua_getfield(T, -1, "event");
            lua_getfield(T, -2, "msg");
            printf("     event [%d] failed: %s\n", (int)lua_tointeger(T, -2), lua_tostring(T, -1));
            lua_pop(T, 3);
        }
    }
    lua_settop(T, top);
    return passed;
}

/* Loads the tests file into a new state with the testing vocabulary and runs
 * it. Returns 0, or 1 with the error printed. */
static int load_tests(tester *t, const sl_buf *src)
{
    sl_sandbox_options so = {.privileged_src = sl_lua_src_testing,
                             .privileged_len = sl_lua_src_testing_len,
                             .privileged_name = "=testing"};
    sl_error err = {0};
    int rc = sl_sandbox_new(&so, &t->T, &err);
    if (rc) {
        fprintf(stderr, "%s: %s\n", t->path, err.msg);
        return 1;
    }
    char chunkname[4096];
    snprintf(chunkname, sizeof chunkname, "@%s", t->path);
    lua_getglobal(t->T, "__sluice_test_source");
    lua_pushlstring(t->T, (const char *)src->data, src->len);
    rc = sl_sandbox_call(t->T, 1, 0, &err);
    if (!rc)
        rc = sl_sandbox_load(t->T, (const char *)src->data, src->len, chunkname, &err);
    if (!rc)
        rc = sl_sandbox_call(t->T, 0, 0, &err);
    if (!rc) {
        lua_getglobal(t->T, "__sluice_tests");
        rc = sl_sandbox_call(t->T, 0, 1, &err);
    }
    if (rc) {
        fprintf(stderr, "%s\n", err.msg[0] ? err.msg : sl_strerror(rc));
        return 1;
    }
    t->list = lua_gettop(t->T);
    return 0;
}

int sl_cli_test_main(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int npaths = 0;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "sluice test: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (npaths < 2) {
            paths[npaths++] = argv[i];
        } else {
            npaths++;
        }
    }
    if (npaths != 2) {
        usage(stderr);
        return 2;
    }

    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT;
    int rc = sl_config_load(paths[0], &cfg, &diag);
    if (rc) {
        fwrite(diag.data, 1, diag.len, stderr);
        if (!diag.len)
            fprintf(stderr, "%s: %s\n", paths[0], sl_strerror(rc));
        sl_buf_free(&diag);
        return 1;
    }
    sl_buf_free(&diag);

    int status = 1;
    tester *t = calloc(1, sizeof *t);
    sl_buf src = SL_BUF_INIT;
    if (!t) {
        fprintf(stderr, "sluice test: out of memory\n");
        goto done;
    }
    t->cfg = cfg;
    sl_config_ruleset(cfg, &t->rs);
    t->path = paths[1];
    t->verbose = verbose;
    t->now_ms = sl_clock_now_ms();
    /* The config's Lua runs once here so that a failing config is one error,
     * not one per test. */
    sl_rule_vm *vm = NULL;
    sl_error err = {0};
    if ((rc = sl_rule_vm_new(&t->rs, &vm, &err))) {
        fprintf(stderr, "%s\n", err.msg[0] ? err.msg : sl_strerror(rc));
        goto done;
    }
    sl_rule_vm_free(vm);
    if (read_whole(t->path, &src) || load_tests(t, &src))
        goto done;

    lua_Integer ntests = luaL_len(t->T, t->list);
    if (ntests == 0) {
        fprintf(stderr,
                "%s: no tests (declare them with test \"name\" { rule = …, events = …, "
                "expect = … })\n",
                t->path);
        goto done;
    }
    int passed = 0, failed = 0;
    for (lua_Integer i = 1; i <= ntests; i++) {
        int r = run_test(t, i);
        if (r < 0) {
            fflush(stdout);
            fprintf(stderr, "sluice test: %s\n", sl_strerror(r));
            goto done;
        }
        if (r)
            passed++;
        else
            failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    status = failed ? 1 : 0;
done:
    if (t) {
        sl_sandbox_close(t->T);
        sl_buf_free(&t->stored);
        sl_buf_free(&t->evs);
        sl_rule_out_free(&t->out);
        free(t->evp);
        free(t->evl);
        free(t->num);
        free(t->lanes);
        free(t);
    }
    sl_buf_free(&src);
    sl_config_free(cfg);
    return status;
}
