/*
 * tests/unit/test_target_set.c — target.set (connectors/target_set.c) and set
 * creation: a target whose set does not exist yet makes none at open, none
 * for payloads that are not events, and makes it (declared: never counted
 * against max_auto_sets) at the first delivery holding a valid event. A bus
 * and sets are wired as server/serve.c does; the checks look at DATA/sets on
 * disk, the registry and the records read back.
 */
#include "testutil.h"

#include "connectors/target_set.h"
#include "core/bus/connector.h"
#include "core/bus/databus.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct fx {
    char *dir;
    sl_databus *bus;
    sl_sets *sets;
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->dir = tu_tmpdir();
    sl_error err = {0};
    sl_databus_options bo = {0};
    if (sl_databus_start(&bo, &f->bus, &err))
        fail_msg("sl_databus_start: %s", err.msg);
    /* Auto-creation off and a cap of one: target.set must not depend on
     * either (its set is declared). */
    sl_sets_options so = {.data_dir = f->dir,
                          .auto_create = false,
                          .max_auto_sets = 1,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = f->bus};
    sl_set_config_default(&so.defaults);
    so.defaults.partitions = 1;
    if (sl_sets_open(&so, &f->sets, &err))
        fail_msg("sl_sets_open: %s", err.msg);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    sl_databus_free(f->bus);
    sl_sets_close(f->sets);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* Completions of one deliver() call. */
typedef struct outcome {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t done;
    int status[8];
} outcome;

static void on_done(void *ctx, size_t i, int status, const char *reason)
{
    (void)reason;
    outcome *o = ctx;
    pthread_mutex_lock(&o->lock);
    if (i < 8)
        o->status[i] = status;
    o->done++;
    pthread_cond_broadcast(&o->cond);
    pthread_mutex_unlock(&o->lock);
}

/* Delivers the n payloads and waits (bounded) until each completed. */
static void deliver(const sl_target_ops *ops, void *impl, const char *const *payloads, size_t n,
                    outcome *o)
{
    sl_delivery d[8];
    for (size_t i = 0; i < n; i++)
        d[i] = (sl_delivery){.data = payloads[i], .len = strlen(payloads[i]), .lane = ""};
    *o = (outcome){.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    ops->deliver(impl, d, n, on_done, o);
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += 30;
    pthread_mutex_lock(&o->lock);
    while (o->done < n && pthread_cond_timedwait(&o->cond, &o->lock, &end) == 0)
        ;
    size_t got = o->done;
    pthread_mutex_unlock(&o->lock);
    if (got < n)
        fail_msg("%zu of %zu payloads completed", got, n);
}

static bool dir_exists(const fx *f, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/sets/%s", f->dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static void test_created_at_first_event(void **state)
{
    fx *f = *state;
    const sl_target_ops *ops = &sl_target_set_ops;
    assert_non_null(ops);
    char name[] = "copy";
    sl_target_set_conf conf = {.set = name};
    sl_target_config cfg = {.ops = ops, .kind_name = "set", .line = 1, .conf = &conf};
    sl_target_env env = {.sets = f->sets, .bus = f->bus, .rule = "r"};
    void *impl = NULL;
    sl_error err = {0};
    if (ops->open(&cfg, &env, &impl, &err))
        fail_msg("open: %s", err.msg);
    assert_false(dir_exists(f, "copy"));
    sl_set *s = NULL;
    assert_int_equal(sl_sets_get(f->sets, "copy", false, &s, NULL), SL_ENOENT);

    /* Payloads that are not events: refused, and still no set. */
    outcome o;
    const char *junk[] = {"not json", "{\"specversion\":\"1.0\",\"source\":\"/a\",\"type\":\"t\"}"};
    deliver(ops, impl, junk, 2, &o);
    assert_int_equal(o.status[0], SL_EINVAL);
    assert_int_equal(o.status[1], SL_EINVAL);
    assert_false(dir_exists(f, "copy"));
    assert_int_equal(sl_sets_count(f->sets), 0);

    /* The first valid event makes the set, declared. */
    const char *good[] = {"x", "{\"specversion\":\"1.0\",\"id\":\"e1\",\"source\":\"/a\",\"type\":"
                               "\"t\"}"};
    deliver(ops, impl, good, 2, &o);
    assert_int_equal(o.status[0], SL_EINVAL);
    assert_int_equal(o.status[1], 0);
    assert_true(dir_exists(f, "copy"));
    assert_int_equal(sl_sets_get(f->sets, "copy", false, &s, NULL), 0);
    assert_false(s->auto_created);
    assert_int_equal(sl_sets_auto_count(f->sets), 0);
    assert_int_equal(sl_store_end_offset(&s->parts[0]), 1);
    const char *more[] = {
        "{\"specversion\":\"1.0\",\"id\":\"e2\",\"source\":\"/a\",\"type\":\"t\"}"};
    deliver(ops, impl, more, 1, &o);
    assert_int_equal(o.status[0], 0);
    assert_int_equal(sl_store_end_offset(&s->parts[0]), 2);
    ops->close(impl);
}

/* A target.set opened on an existing set uses it (and refuses a bad name). */
static void test_existing_and_bad_name(void **state)
{
    fx *f = *state;
    const sl_target_ops *ops = &sl_target_set_ops;
    sl_set *s = NULL;
    sl_error err = {0};
    assert_int_equal(sl_sets_declare(f->sets, "there", &s, &err), 0);
    char name[] = "there", bad[] = ".hidden";
    sl_target_set_conf conf = {.set = name};
    sl_target_config cfg = {.ops = ops, .kind_name = "set", .line = 1, .conf = &conf};
    sl_target_env env = {.sets = f->sets, .bus = f->bus, .rule = "r"};
    void *impl = NULL;
    assert_int_equal(ops->open(&cfg, &env, &impl, &err), 0);
    outcome o;
    const char *ev[] = {"{\"specversion\":\"1.0\",\"id\":\"e\",\"source\":\"/a\",\"type\":\"t\"}"};
    deliver(ops, impl, ev, 1, &o);
    assert_int_equal(o.status[0], 0);
    assert_int_equal(sl_store_end_offset(&s->parts[0]), 1);
    ops->close(impl);
    conf.set = bad;
    impl = NULL;
    assert_int_equal(ops->open(&cfg, &env, &impl, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "not beginning with"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_created_at_first_event, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_existing_and_bad_name, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
