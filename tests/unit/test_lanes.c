/*
 * tests/unit/test_lanes.c — the lane registry (core/bus/lanes.h): declared lanes,
 * lanes.auto with its state file, the hooks' order, drops.
 */
#include "testutil.h"

#include "core/bus/lanes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hooks_log {
    int added, dropped;
    char last[64];
    int fail; /* the added hook fails this many times */
} hooks_log;

static int on_added(void *ctx, const sl_lane_info *lane, sl_error *err)
{
    hooks_log *h = ctx;
    if (h->fail > 0) {
        h->fail--;
        return sl_error_set(err, SL_EIO, "disk says no");
    }
    h->added++;
    snprintf(h->last, sizeof h->last, "%s", lane->name);
    if (strcmp(lane->name, "release-1") == 0) {
        assert_false(lane->auto_);
        assert_false(lane->fallback_base);
    } else {
        assert_true(lane->fallback_base);
    }
    return 0;
}

static void on_dropped(void *ctx, const char *lane)
{
    hooks_log *h = ctx;
    h->dropped++;
    snprintf(h->last, sizeof h->last, "%s", lane);
}

/* A config's lane declarations (name, env, fallback) and lanes.auto. */
typedef struct fake_cfg {
    struct {
        sl_lane_decl *lanes;
        size_t nlanes;
        bool lanes_auto;
    } cfg;
    sl_lane_decl decl[4];
} fake_cfg;

static void fake(fake_cfg *f, bool autolanes, size_t n, const char *const *names,
                 const sl_lane_env *envs)
{
    memset(f, 0, sizeof *f);
    for (size_t i = 0; i < n; i++)
        f->decl[i] = (sl_lane_decl){.name = (char *)names[i],
                                    .line = 1,
                                    .env = envs[i],
                                    .fallback_base = envs[i] == SL_LANE_BOE};
    f->cfg.lanes = f->decl;
    f->cfg.nlanes = n;
    f->cfg.lanes_auto = autolanes;
}

static sl_lanes *open_lanes(const char *dir, hooks_log *h)
{
    sl_lanes *l = NULL;
    sl_error err = {0};
    assert_int_equal(sl_lanes_open(dir, &l, &err), 0);
    sl_lanes_set_hooks(l, &(sl_lanes_hooks){h, on_added, on_dropped});
    return l;
}

static void test_declared(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    hooks_log h = {0};
    sl_lanes *l = open_lanes(dir, &h);
    fake_cfg f;
    fake(&f, false, 2, (const char *const[]){"feature-x", "release-1"},
         (const sl_lane_env[]){SL_LANE_BOE, SL_LANE_PPE});
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes, f.cfg.lanes_auto);
    sl_error err = {0};
    assert_int_equal(sl_lanes_admit(l, "", &err), SL_EVENT_OK);
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_OK);
    assert_int_equal(sl_lanes_admit(l, "release-1", &err), SL_EVENT_OK);
    assert_int_equal(sl_lanes_admit(l, "nope", &err), SL_EVENT_UNKNOWN_LANE);
    assert_non_null(strstr(err.msg, "lane \"nope\" is not declared"));
    /* A declared lane's first event makes sure its consumers exist (a reload
     * may have declared it); once. */
    assert_int_equal(h.added, 2);
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_OK);
    assert_int_equal(h.added, 2);
    assert_int_equal(sl_lanes_events_in(l, ""), 1);
    assert_int_equal(sl_lanes_events_in(l, "feature-x"), 2);
    sl_lane_info info;
    assert_true(sl_lanes_get(l, "release-1", &info));
    assert_int_equal(info.env, SL_LANE_PPE);
    assert_false(info.fallback_base);
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_lanes_json(l, NULL, NULL, &b), 0);
    assert_int_equal(sl_buf_append(&b, "", 1), 0);
    assert_non_null(strstr((char *)b.data, "{\"name\":\"release-1\",\"env\":\"ppe\",\"fallback\":"
                                           "\"none\",\"auto\":false,\"declared\":true,"
                                           "\"dropped\":false,\"events_in\":1}"));
    assert_non_null(strstr((char *)b.data, "\"name\":\"feature-x\",\"env\":\"boe\",\"fallback\":"
                                           "\"base\""));
    sl_buf_free(&b);

    /* Dropped while declared: refused until a config no longer declares it. */
    assert_int_equal(sl_lanes_drop(l, "feature-x", &err), 0);
    assert_int_equal(h.dropped, 1);
    assert_string_equal(h.last, "feature-x");
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_LANE_DROPPED);
    assert_int_equal(sl_lanes_drop(l, "feature-x", &err), SL_ENOENT);
    assert_int_equal(sl_lanes_drop(l, "", &err), SL_EINVAL);
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes,
                       f.cfg.lanes_auto); /* the same config: still dropped */
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_LANE_DROPPED);
    sl_lanes_free(l);
    /* … across a restart too. */
    l = open_lanes(dir, &h);
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes, f.cfg.lanes_auto);
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_LANE_DROPPED);
    fake_cfg keep = f;
    fake(&f, false, 1, (const char *const[]){"release-1"}, (const sl_lane_env[]){SL_LANE_PPE});
    /* A config without it that does not stand (a failed reload configures
     * the old one again before committing): the drop mark survives. */
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes, f.cfg.lanes_auto);
    keep.cfg.lanes = keep.decl;
    sl_lanes_configure(l, keep.cfg.lanes, keep.cfg.nlanes, keep.cfg.lanes_auto);
    sl_lanes_commit(l);
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_LANE_DROPPED);
    /* One that stands: the mark has done its job. */
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes, f.cfg.lanes_auto);
    sl_lanes_commit(l);
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_UNKNOWN_LANE);
    fake(&f, false, 2, (const char *const[]){"feature-x", "release-1"},
         (const sl_lane_env[]){SL_LANE_BOE, SL_LANE_PPE});
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes,
                       f.cfg.lanes_auto); /* declared again: a new lane */
    sl_lanes_commit(l);
    assert_int_equal(sl_lanes_admit(l, "feature-x", &err), SL_EVENT_OK);
    sl_lanes_free(l);
    tu_rmdir(dir);
}

static void test_auto(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    hooks_log h = {.fail = 1};
    sl_lanes *l = open_lanes(dir, &h);
    fake_cfg f;
    fake(&f, true, 0, NULL, NULL);
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes, f.cfg.lanes_auto);
    sl_error err = {0};
    /* The hook fails once: the event is refused, the lane tried again next time. */
    assert_int_equal(sl_lanes_admit(l, "pr-17", &err), SL_EVENT_UNKNOWN_LANE);
    assert_non_null(strstr(err.msg, "disk says no"));
    assert_int_equal(sl_lanes_admit(l, "pr-17", &err), SL_EVENT_OK);
    assert_int_equal(sl_lanes_admit(l, "pr-17", &err), SL_EVENT_OK);
    assert_int_equal(h.added, 1); /* once, before its first event */
    assert_string_equal(h.last, "pr-17");
    assert_int_equal(sl_lanes_events_in(l, "pr-17"), 2);
    sl_lanes_free(l);

    /* Remembered across a restart, without calling the hook again. */
    char path[4200];
    snprintf(path, sizeof path, "%s/lanes.state", dir);
    size_t len;
    char *text = (char *)tu_read_file(path, &len);
    assert_true(len > 11 && memcmp(text, "auto pr-17 ", 11) == 0);
    free(text);
    l = open_lanes(dir, &h);
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes, f.cfg.lanes_auto);
    sl_lane_info info;
    assert_true(sl_lanes_get(l, "pr-17", &info));
    assert_true(info.auto_);
    assert_int_equal(sl_lanes_admit(l, "pr-17", &err), SL_EVENT_OK);
    assert_int_equal(h.added, 1);

    /* Dropped: forgotten; named again, it is a new lane (hook again). */
    assert_int_equal(sl_lanes_drop(l, "pr-17", &err), 0);
    assert_false(sl_lanes_get(l, "pr-17", NULL));
    assert_int_equal(sl_lanes_admit(l, "pr-17", &err), SL_EVENT_OK);
    assert_int_equal(h.added, 2);

    /* lanes.auto off: unknown lanes are refused again. */
    fake(&f, false, 0, NULL, NULL);
    sl_lanes_configure(l, f.cfg.lanes, f.cfg.nlanes, f.cfg.lanes_auto);
    assert_int_equal(sl_lanes_admit(l, "pr-18", &err), SL_EVENT_UNKNOWN_LANE);
    sl_lanes_free(l);
    tu_rmdir(dir);
}

static void test_damaged_state(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/lanes.state", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("auto good-1 5\nnonsense\nauto BAD 7\nauto good-2 9\n", fp);
    fclose(fp);
    hooks_log h = {0};
    sl_lanes *l = open_lanes(dir, &h);
    assert_true(sl_lanes_get(l, "good-1", NULL));
    assert_true(sl_lanes_get(l, "good-2", NULL));
    assert_false(sl_lanes_get(l, "BAD", NULL));
    sl_lanes_free(l);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_declared), cmocka_unit_test(test_auto),
                                       cmocka_unit_test(test_damaged_state)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
