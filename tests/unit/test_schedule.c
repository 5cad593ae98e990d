/*
 * tests/unit/test_schedule.c — server/schedule.c with a fake clock (no
 * real minutes go by): exactly one event per tick; a restart (stop, then
 * a new scheduler on the same data folder) fires no tick twice; a tick
 * pending when the process died (a forked child that exits inside fire) is
 * fired again with the same id; catch_up 0, 1 and 3 after downtime; a
 * failing fire retried with back-off; `at` fires once, never again after a
 * restart, never when declared after its time; sl_scheduler_set() keeps
 * the state of schedules that stay, owners do not mix, a changed
 * expression counts from the change; a damaged state file is moved aside;
 * the declaration checks and the event's shape; and one real-clock tick.
 */
#include "testutil.h"

#include "core/base/clock.h"
#include "core/base/slog.h"
#include "core/bus/databus.h"
#include "core/bus/event.h"
#include "core/bus/set.h"
#include "server/schedule_internal.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct fake {
    pthread_mutex_t lock;
    int64_t now;
    int fail; /* fail this many fires */
    int calls;
    char *events[64];
    char sets[64][32];
    size_t n;
    const char *crash_file; /* the child: write the event here and die */
} fake;

static int64_t fake_now(void *ctx)
{
    fake *f = ctx;
    pthread_mutex_lock(&f->lock);
    int64_t t = f->now;
    pthread_mutex_unlock(&f->lock);
    return t;
}

static int fake_fire(void *ctx, const char *set, const char *json, size_t len, sl_error *err)
{
    fake *f = ctx;
    if (f->crash_file) {
        int fd = open(f->crash_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0 && write(fd, json, len) == (ssize_t)len)
            fsync(fd);
        _exit(0); /* as if the process died before recording the tick as fired */
    }
    pthread_mutex_lock(&f->lock);
    f->calls++;
    int rc = 0;
    if (f->fail > 0) {
        f->fail--;
        rc = sl_error_set(err, SL_EFULL, "set %s is full", set);
    } else if (f->n < 64) {
        f->events[f->n] = strndup(json, len);
        snprintf(f->sets[f->n], sizeof f->sets[f->n], "%s", set);
        f->n++;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static void set_now(fake *f, int64_t t)
{
    pthread_mutex_lock(&f->lock);
    f->now = t;
    pthread_mutex_unlock(&f->lock);
}

static size_t count(fake *f)
{
    pthread_mutex_lock(&f->lock);
    size_t n = f->n;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static void fake_free(fake *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->events[i]);
    f->n = 0;
}

static int64_t ms(int y, int mo, int d, int h, int mi, int s)
{
    sl_civil c = {.year = y, .month = mo, .day = d, .hour = h, .min = mi, .sec = s};
    return sl_civil_to_secs(&c) * 1000;
}

#define T(h, mi, s) ms(2024, 5, 1, (h), (mi), (s))

static sl_schedule_decl rate_decl(const char *name, const char *rate, int catch_up)
{
    sl_schedule_decl d;
    sl_schedule_decl_init(&d);
    d.name = (char *)name;
    d.rate = (char *)rate;
    d.set = (char *)"jobs";
    d.event_json = (char *)"{\"type\":\"job.tick\",\"source\":\"/scheduler\",\"data\":{\"n\":1}}";
    d.catch_up = catch_up;
    return d;
}

static sl_scheduler *start(const char *dir, fake *f, const sl_schedule_decl *d, size_t n)
{
    sl_scheduler_options o = {.data_dir = dir, .fire = fake_fire, .now = fake_now, .ctx = f};
    sl_scheduler *s = NULL;
    sl_error err = {0};
    if (sl_scheduler_init(&o, &s, &err) || sl_scheduler_set(s, "config", d, n, &err) ||
        sl_scheduler_start(s, &err))
        fail_msg("scheduler: %s", err.msg);
    return s;
}

/* The tick (time attribute) of event i, in ms. */
static int64_t tick_of(fake *f, size_t i)
{
    json_t *j = json_loads(f->events[i], 0, NULL);
    assert_non_null(j);
    const char *t = json_string_value(json_object_get(j, "time"));
    assert_non_null(t);
    int64_t v = 0;
    assert_int_equal(sl_time_parse_rfc3339(t, strlen(t), &v), 0);
    json_decref(j);
    return v;
}

static void check_event(fake *f, size_t i, const char *name, int64_t tick)
{
    json_t *j = json_loads(f->events[i], 0, NULL);
    assert_non_null(j);
    char id[37];
    sl_schedule_event_id(name, tick, id);
    assert_string_equal(json_string_value(json_object_get(j, "id")), id);
    assert_string_equal(json_string_value(json_object_get(j, "specversion")), "1.0");
    assert_string_equal(json_string_value(json_object_get(j, "type")), "job.tick");
    assert_string_equal(json_string_value(json_object_get(j, "source")), "/scheduler");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "n")), 1);
    json_decref(j);
    assert_int_equal(tick_of(f, i), tick);
    assert_string_equal(f->sets[i], "jobs");
}

static void test_one_event_per_tick(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30)};
    sl_schedule_decl d = rate_decl("tick", "1 minute", 1);
    sl_scheduler *s = start(dir, &f, &d, 1);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 0);
    set_now(&f, T(12, 0, 59) + 999);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 0);
    set_now(&f, T(12, 1, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    check_event(&f, 0, "tick", T(12, 1, 0));
    for (int i = 0; i < 5; i++) /* pokes in the same minute: nothing more */
        sl_scheduler_poke(s);
    set_now(&f, T(12, 1, 59));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    set_now(&f, T(12, 2, 0) + 500);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 2);
    check_event(&f, 1, "tick", T(12, 2, 0));
    /* the listing */
    sl_schedule_info *v = NULL;
    size_t n = 0;
    assert_int_equal(sl_scheduler_list(s, 3, &v, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].name, "tick");
    assert_string_equal(v[0].owner, "config");
    assert_string_equal(v[0].expression, "rate(1 minute)");
    assert_string_equal(v[0].timezone, "UTC");
    assert_int_equal(v[0].last_ms, T(12, 2, 0));
    assert_int_equal(v[0].pending_ms, -1);
    assert_int_equal(v[0].nnext, 3);
    assert_int_equal(v[0].next_ms[0], T(12, 3, 0));
    assert_int_equal(v[0].next_ms[2], T(12, 5, 0));
    sl_schedule_info_free(v, n);
    sl_buf b = SL_BUF_INIT;
    assert_int_equal(sl_scheduler_list_json(s, 2, &b), 0);
    json_t *j = json_loadb((const char *)b.data, b.len, 0, NULL);
    assert_non_null(j);
    json_t *one = json_array_get(json_object_get(j, "schedules"), 0);
    assert_string_equal(json_string_value(json_object_get(one, "last")),
                        "2024-05-01T12:02:00.000Z");
    assert_string_equal(json_string_value(json_array_get(json_object_get(one, "next"), 1)),
                        "2024-05-01T12:04:00.000Z");
    assert_true(json_is_null(json_object_get(one, "pending")));
    json_decref(j);
    sl_buf_free(&b);
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);
}

static void test_restart_fires_no_tick_twice(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30)};
    sl_schedule_decl d = rate_decl("tick", "1 minute", 3);
    sl_scheduler *s = start(dir, &f, &d, 1);
    set_now(&f, T(12, 1, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    sl_scheduler_stop(s);
    sl_scheduler_free(s);
    /* restarted at once, in the same second, then a bit later */
    s = start(dir, &f, &d, 1);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    sl_scheduler_free(s);
    set_now(&f, T(12, 1, 40));
    s = start(dir, &f, &d, 1);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    set_now(&f, T(12, 2, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 2);
    check_event(&f, 1, "tick", T(12, 2, 0));
    sl_scheduler_free(s);
    /* the state file says so */
    sl_schedule_state *st = NULL;
    size_t n = 0;
    assert_int_equal(sl_schedule_state_load(dir, &st, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_string_equal(st[0].name, "tick");
    assert_string_equal(st[0].fingerprint, "rate(1 minute) UTC");
    assert_int_equal(st[0].last_ms, T(12, 2, 0));
    assert_int_equal(st[0].pending_ms, -1);
    assert_int_equal(st[0].gone_ms, -1);
    sl_schedule_state_free(st, n);
    fake_free(&f);
    tu_rmdir(dir);
}

static void test_pending_refired_same_id(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char crash[4200];
    snprintf(crash, sizeof crash, "%s/crashed.json", dir);
    sl_schedule_decl d = rate_decl("tick", "1 minute", 1);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* dies inside fire, after pending = 12:01 was recorded */
        fake c = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30), .crash_file = crash};
        sl_scheduler *s = start(dir, &c, &d, 1);
        set_now(&c, T(12, 1, 0));
        sl_scheduler_poke(s);
        _exit(3); /* fire did not run */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    size_t len = 0;
    uint8_t *first = tu_read_file(crash, &len);
    sl_schedule_state *st = NULL;
    size_t n = 0;
    assert_int_equal(sl_schedule_state_load(dir, &st, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(st[0].pending_ms, T(12, 1, 0));
    assert_int_equal(st[0].last_ms, -1);
    sl_schedule_state_free(st, n);
    /* the restart fires the pending tick again, with the same event */
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 1, 20)};
    sl_scheduler *s = start(dir, &f, &d, 1);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    assert_int_equal(strlen(f.events[0]), len);
    assert_memory_equal(f.events[0], first, len); /* byte for byte: same id, same time */
    check_event(&f, 0, "tick", T(12, 1, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    sl_scheduler_free(s);
    assert_int_equal(sl_schedule_state_load(dir, &st, &n, NULL), 0);
    assert_int_equal(st[0].pending_ms, -1);
    assert_int_equal(st[0].last_ms, T(12, 1, 0));
    sl_schedule_state_free(st, n);
    free(first);
    fake_free(&f);
    tu_rmdir(dir);
}

/* Down from 12:00:30 to 12:10:30: ticks 12:01 … 12:10 were missed. */
static void downtime(int catch_up, size_t want, int64_t first_tick)
{
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30)};
    sl_schedule_decl d = rate_decl("tick", "1 minute", catch_up);
    sl_scheduler *s = start(dir, &f, &d, 1);
    sl_scheduler_poke(s);
    sl_scheduler_free(s);
    set_now(&f, T(12, 10, 30));
    s = start(dir, &f, &d, 1);
    sl_scheduler_poke(s);
    if (count(&f) != want)
        fail_msg("catch_up %d: %zu events after the downtime, want %zu", catch_up, count(&f), want);
    for (size_t i = 0; i < want; i++) /* oldest first, the latest ones */
        check_event(&f, i, "tick", first_tick + (int64_t)i * 60000);
    set_now(&f, T(12, 11, 0)); /* and on time again */
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), want + 1);
    check_event(&f, want, "tick", T(12, 11, 0));
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);
}

static void test_catch_up(void **state)
{
    (void)state;
    downtime(0, 0, 0);
    downtime(1, 1, T(12, 10, 0));
    downtime(3, 3, T(12, 8, 0));
    downtime(20, 10, T(12, 1, 0)); /* fewer missed than catch_up: all */
    /* A long downtime (a year of minutes) costs little. */
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30)};
    sl_schedule_decl d = rate_decl("tick", "1 minute", 2);
    sl_scheduler *s = start(dir, &f, &d, 1);
    sl_scheduler_free(s);
    set_now(&f, ms(2025, 5, 1, 12, 0, 30));
    s = start(dir, &f, &d, 1);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 2);
    check_event(&f, 0, "tick", ms(2025, 5, 1, 11, 59, 0));
    check_event(&f, 1, "tick", ms(2025, 5, 1, 12, 0, 0));
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);
}

/* While running: a tick more than a minute late is missed too. */
static void test_late_ticks(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30)};
    sl_schedule_decl d = rate_decl("tick", "1 minute", 1);
    sl_scheduler *s = start(dir, &f, &d, 1);
    set_now(&f, T(12, 10, 30)); /* the clock jumps: 12:09 missed (the latest), 12:10 on time */
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 2);
    check_event(&f, 0, "tick", T(12, 9, 0));
    check_event(&f, 1, "tick", T(12, 10, 0));
    set_now(&f, T(12, 11, 59)); /* 59 s late is on time */
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 3);
    check_event(&f, 2, "tick", T(12, 11, 0));
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);
}

static void test_failed_fire_retried(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30), .fail = 2};
    sl_schedule_decl d = rate_decl("tick", "1 minute", 1);
    sl_scheduler *s = start(dir, &f, &d, 1);
    set_now(&f, T(12, 1, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 0);
    assert_int_equal(f.calls, 1);
    sl_schedule_info *v = NULL;
    size_t n = 0;
    assert_int_equal(sl_scheduler_list(s, 2, &v, &n), 0);
    assert_int_equal(v[0].pending_ms, T(12, 1, 0));
    assert_int_equal(v[0].next_ms[0], T(12, 1, 0)); /* the pending tick comes first */
    assert_int_equal(v[0].failures, 1);
    assert_non_null(strstr(v[0].error, "set jobs is full"));
    sl_schedule_info_free(v, n);
    sl_scheduler_poke(s); /* the back-off (1 s) has not passed */
    assert_int_equal(f.calls, 1);
    set_now(&f, T(12, 1, 1));
    sl_scheduler_poke(s);
    assert_int_equal(f.calls, 2); /* failed again: 2 s now */
    set_now(&f, T(12, 1, 2));
    sl_scheduler_poke(s);
    assert_int_equal(f.calls, 2);
    set_now(&f, T(12, 1, 3));
    sl_scheduler_poke(s);
    assert_int_equal(f.calls, 3);
    assert_int_equal(count(&f), 1);
    check_event(&f, 0, "tick", T(12, 1, 0)); /* the tick's own id and time */
    assert_int_equal(sl_scheduler_list(s, 2, &v, &n), 0);
    assert_int_equal(v[0].failures, 0);
    assert_null(v[0].error);
    assert_int_equal(v[0].last_ms, T(12, 1, 0));
    sl_schedule_info_free(v, n);
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);
}

static void test_at_once(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 0)};
    sl_schedule_decl d[2] = {rate_decl("once", NULL, 1), rate_decl("past", NULL, 1)};
    d[0].at = (char *)"2024-05-01T14:05:00";
    d[0].timezone = (char *)"Europe/Paris";  /* 12:05Z */
    d[1].at = (char *)"2024-05-01T11:00:00"; /* already past: never fires */
    sl_scheduler *s = start(dir, &f, d, 2);
    set_now(&f, T(12, 4, 59));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 0);
    set_now(&f, T(12, 5, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    check_event(&f, 0, "once", T(12, 5, 0));
    set_now(&f, T(13, 0, 0));
    sl_scheduler_poke(s);
    sl_scheduler_free(s);
    s = start(dir, &f, d, 2);
    sl_scheduler_poke(s);
    set_now(&f, ms(2025, 1, 1, 0, 0, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    sl_schedule_info *v = NULL;
    size_t n = 0;
    assert_int_equal(sl_scheduler_list(s, 3, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(v[0].name, "once");
    assert_int_equal(v[0].nnext, 0);
    assert_int_equal(v[0].last_ms, T(12, 5, 0));
    assert_string_equal(v[0].expression, "at(2024-05-01T14:05:00)");
    assert_string_equal(v[0].timezone, "Europe/Paris");
    sl_schedule_info_free(v, n);
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);

    /* An `at` known before the downtime and past during it fires late once
     * (catch_up 1), not with catch_up 0. */
    for (int cu = 0; cu <= 1; cu++) {
        dir = tu_tmpdir();
        f.now = T(12, 0, 0);
        d[0].catch_up = cu;
        s = start(dir, &f, d, 1);
        sl_scheduler_free(s);
        set_now(&f, T(13, 0, 0));
        s = start(dir, &f, d, 1);
        sl_scheduler_poke(s);
        assert_int_equal(count(&f), (size_t)cu);
        sl_scheduler_free(s);
        fake_free(&f);
        tu_rmdir(dir);
    }
}

static void test_set_keeps_state(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30)};
    sl_schedule_decl d[2] = {rate_decl("a", "1 minute", 1), rate_decl("b", "1 minute", 1)};
    sl_scheduler *s = start(dir, &f, d, 1);
    set_now(&f, T(12, 1, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    sl_error err = {0};
    /* the same again plus b: a's 12:01 does not fire again */
    set_now(&f, T(12, 1, 30));
    assert_int_equal(sl_scheduler_set(s, "config", d, 2, &err), 0);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    set_now(&f, T(12, 2, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 3);
    /* another owner cannot take a name; a mistake changes nothing */
    sl_schedule_decl api = rate_decl("a", "5 minutes", 1);
    assert_int_equal(sl_scheduler_set(s, "api", &api, 1, &err), SL_EEXIST);
    assert_non_null(strstr(err.msg, "schedule \"a\" is already declared (by config)"));
    sl_schedule_decl bad[2] = {rate_decl("a", "1 minute", 1), rate_decl("c", "61 minutes", 1)};
    bad[1].rate = NULL;
    bad[1].cron = (char *)"61 * * * ? *";
    assert_int_equal(sl_scheduler_set(s, "config", bad, 2, &err), SL_EINVAL);
    assert_non_null(
        strstr(err.msg, "schedule \"c\": cron \"61 * * * ? *\": minutes: 61 is outside 0-59"));
    sl_schedule_decl twice[2] = {rate_decl("a", "1 minute", 1), rate_decl("a", "1 minute", 1)};
    assert_int_equal(sl_scheduler_set(s, "config", twice, 2, &err), SL_EEXIST);
    /* the api owner's own schedule lives beside config's */
    api.name = (char *)"x";
    assert_int_equal(sl_scheduler_set(s, "api", &api, 1, &err), 0);
    sl_schedule_info *v = NULL;
    size_t n = 0;
    assert_int_equal(sl_scheduler_list(s, 1, &v, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(v[2].name, "x");
    assert_string_equal(v[2].owner, "api");
    sl_schedule_info_free(v, n);
    /* config drops b (api's x stays); b comes back later and goes on from
     * its state: its missed ticks count, catch_up 1 */
    set_now(&f, T(12, 2, 30));
    assert_int_equal(sl_scheduler_set(s, "config", d, 1, &err), 0);
    assert_int_equal(sl_scheduler_list(s, 1, &v, &n), 0);
    assert_int_equal(n, 2);
    sl_schedule_info_free(v, n);
    set_now(&f, T(12, 5, 30));
    sl_scheduler_poke(s); /* a: 12:03, 12:04 (late, skipped: only 12:04), 12:05 */
    size_t before = count(&f);
    assert_int_equal(sl_scheduler_set(s, "config", d, 2, &err), 0);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), before + 1); /* b: its latest missed tick, 12:05 */
    assert_int_equal(tick_of(&f, before), T(12, 5, 0));
    /* a changed expression counts from the change */
    d[0].rate = (char *)"2 minutes";
    set_now(&f, T(12, 6, 30));
    size_t c0 = count(&f);
    assert_int_equal(sl_scheduler_set(s, "config", d, 2, &err), 0);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), c0 + 1); /* b's 12:06 only */
    set_now(&f, T(12, 8, 0));
    sl_scheduler_poke(s); /* a's 12:08, b's 12:07, 12:08 */
    assert_int_equal(count(&f), c0 + 4);
    /* disabled fires nothing and does not catch up once enabled again */
    d[1].enabled = false;
    assert_int_equal(sl_scheduler_set(s, "config", d, 2, &err), 0);
    set_now(&f, T(12, 30, 0));
    sl_scheduler_poke(s);
    size_t c1 = count(&f);
    d[1].enabled = true;
    d[0].enabled = false;
    assert_int_equal(sl_scheduler_set(s, "config", d, 2, &err), 0);
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), c1);
    set_now(&f, T(12, 31, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), c1 + 1);
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);
}

static void test_bad_state_file(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/schedules", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/schedules/state.json", dir);
    FILE *fp = fopen(path, "w");
    fputs("{\"version\": 1, \"schedules\": [", fp);
    fclose(fp);
    sl_slog_set_fd(-1);
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER, .now = T(12, 0, 30)};
    sl_schedule_decl d = rate_decl("tick", "1 minute", 1);
    sl_scheduler *s = start(dir, &f, &d, 1);
    sl_slog_set_fd(2);
    set_now(&f, T(12, 1, 0));
    sl_scheduler_poke(s);
    assert_int_equal(count(&f), 1);
    sl_scheduler_free(s);
    snprintf(path, sizeof path, "%s/schedules/state.json.bad", dir);
    assert_true(tu_file_size(path) > 0);
    sl_schedule_state *st = NULL;
    size_t n = 0;
    assert_int_equal(sl_schedule_state_load(dir, &st, &n, NULL), 0); /* a good one written since */
    assert_int_equal(n, 1);
    sl_schedule_state_free(st, n);
    fake_free(&f);
    tu_rmdir(dir);
}

static void compile_refuses(sl_schedule_decl d, const char *key, const char *want)
{
    sl_error err = {0};
    const char *k = NULL;
    sl_sched *s = NULL;
    int rc = sl_schedule_compile(&d, &s, &k, &err);
    assert_true(rc == SL_EINVAL || (rc == SL_ENOENT && strcmp(key, "timezone") == 0));
    if (!strstr(err.msg, want))
        fail_msg("message \"%s\" does not say \"%s\"", err.msg, want);
    assert_string_equal(k, key);
    assert_null(s);
}

static void test_decl_checks(void **state)
{
    (void)state;
    sl_schedule_decl d = rate_decl("ok", "5 minutes", 1);
    sl_sched *s = NULL;
    assert_int_equal(sl_schedule_compile(&d, &s, NULL, NULL), 0);
    sl_sched_free(s);
    d.rate = NULL;
    compile_refuses(d, "", "one of cron = ");
    d.rate = (char *)"5 minutes";
    d.cron = (char *)"0 3 * * ? *";
    compile_refuses(d, "rate", "give only one of cron, rate and at");
    d.rate = NULL;
    d.timezone = (char *)"Nowhere/Land";
    compile_refuses(d, "timezone", "time zone \"Nowhere/Land\": unknown");
    d.timezone = NULL;
    d.cron = (char *)"0 3 * * * *";
    compile_refuses(d, "cron", "must be ?");
    d.cron = (char *)"0 3 * * ? *";
    d.set = (char *)"../x";
    compile_refuses(d, "set", "a set name is");
    d.set = NULL;
    compile_refuses(d, "", "set is required");
    d.set = (char *)"jobs";
    d.catch_up = -1;
    compile_refuses(d, "catch_up", "out of range");
    d.catch_up = 1;
    d.event_json = (char *)"{\"type\":\"t\"}";
    compile_refuses(d, "event", "event: source is required");
    d.event_json = (char *)"{\"type\":\"t\",\"source\":\"/s\",\"id\":\"x\"}";
    compile_refuses(d, "event", "event: id is made by the scheduler");
    d.event_json = (char *)"[1]";
    compile_refuses(d, "event", "event must be a table");
    d.event_json = (char *)"{\"type\":\"t\",\"source\":\"/s\",\"Bad-Ext\":\"x\"}";
    compile_refuses(d, "event", "event: ");
    d.event_json = NULL;
    compile_refuses(d, "event", "event is required");
    d.event_json = (char *)"{\"type\":\"t\",\"source\":\"/s\",\"subject\":\"x\",\"region\":\"eu\"}";
    d.name = (char *)".hidden";
    compile_refuses(d, "", "a schedule name is");
    d.name = (char *)"ok";
    assert_int_equal(sl_schedule_compile(&d, NULL, NULL, NULL), 0);
}

static void test_event_shape(void **state)
{
    (void)state;
    char a[37], b[37], c[37];
    sl_schedule_event_id("nightly", 1000, a);
    sl_schedule_event_id("nightly", 1000, b);
    assert_string_equal(a, b);
    sl_schedule_event_id("nightly", 1001, c);
    assert_string_not_equal(a, c);
    sl_schedule_event_id("nightl", 1000, c);
    assert_string_not_equal(a, c);
    assert_int_equal(strlen(a), 36);
    assert_int_equal(a[8], '-');
    assert_int_equal(a[14], '8'); /* version 8 */
    assert_true(strchr("89ab", a[19]) != NULL);
    sl_buf out = SL_BUF_INIT;
    assert_int_equal(sl_schedule_event("nightly",
                                       "{\"type\":\"job.nightly\",\"source\":\"/scheduler\","
                                       "\"data\":{\"job\":\"x\"}}",
                                       ms(2026, 12, 24, 17, 0, 0), &out, NULL),
                     0);
    char want[400];
    snprintf(want, sizeof want,
             "{\"data\":{\"job\":\"x\"},\"id\":\"%s\",\"source\":\"/scheduler\","
             "\"specversion\":\"1.0\",\"time\":\"2026-12-24T17:00:00.000Z\",\"type\":"
             "\"job.nightly\"}",
             (sl_schedule_event_id("nightly", ms(2026, 12, 24, 17, 0, 0), a), a));
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    sl_buf_free(&out);
    sl_error err = {0};
    assert_int_equal(sl_schedule_event("x", "nope", 0, &out, &err), SL_EINVAL);
    sl_buf_free(&out);
}

/* The server's fire callback on a real Databus and sets: the event is
 * stored (durably) as the scheduler made it, a missing set is declared,
 * a refused event and a full stop say why. */
static int refuse_type(void *ctx, const sl_set *set, const sl_event *ev, sl_error *err)
{
    (void)ctx;
    (void)set;
    if (ev->type.len == strlen("\"forbidden\"") &&
        !memcmp(ev->type.p, "\"forbidden\"", ev->type.len))
        return sl_error_set(err, SL_EINVAL, "no such type here"), SL_EVENT_SCHEMA_VIOLATION;
    return SL_EVENT_OK;
}

static void test_fire_databus(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    sl_error err = {0};
    sl_databus *bus = NULL;
    sl_sets *sets = NULL;
    sl_databus_options bo = {0};
    assert_int_equal(sl_databus_start(&bo, &bus, &err), 0);
    sl_sets_options so = {.data_dir = dir,
                          .auto_create = false,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = bus};
    sl_set_config_default(&so.defaults);
    so.defaults.partitions = 1;
    so.defaults.ack = SL_ACK_BUFFER; /* the fire is durable all the same */
    assert_int_equal(sl_sets_open(&so, &sets, &err), 0);
    sl_schedule_fire_env env = {.sets = sets, .bus = bus, .validate = refuse_type};
    sl_buf ev = SL_BUF_INIT;
    assert_int_equal(sl_schedule_event("nightly",
                                       "{\"type\":\"job\",\"source\":\"/s\",\"subject\":\"k\"}",
                                       T(3, 0, 0), &ev, &err),
                     0);
    /* the set does not exist yet (auto_create is off): declared */
    assert_int_equal(sl_schedule_fire_databus(&env, "jobs", (const char *)ev.data, ev.len, &err),
                     0);
    sl_set *set = NULL;
    assert_int_equal(sl_sets_get(sets, "jobs", false, &set, &err), 0);
    assert_int_equal(sl_store_end_offset(&set->parts[0]), 1);
    void *rd = NULL;
    assert_int_equal(sl_store_reader_open(&set->parts[0], 0, NULL, &rd, &err), 0);
    sl_record rec;
    assert_int_equal(sl_store_reader_next(&set->parts[0], rd, &rec, &err), 0);
    assert_int_equal(rec.value_len, ev.len);
    assert_memory_equal(rec.value, ev.data, ev.len); /* stored as made: id, time kept */
    assert_int_equal(rec.timestamp, T(3, 0, 0));     /* the record's time is the tick */
    assert_non_null(rec.key);
    assert_memory_equal(rec.key, "k", 1);
    sl_store_reader_close(&set->parts[0], rd);
    sl_buf_free(&ev);
    /* refused by the set's checks: not stored, the reason said */
    assert_int_equal(
        sl_schedule_event("x", "{\"type\":\"forbidden\",\"source\":\"/s\"}", 0, &ev, &err), 0);
    assert_int_equal(sl_schedule_fire_databus(&env, "jobs", (const char *)ev.data, ev.len, &err),
                     SL_EINVAL);
    assert_non_null(strstr(err.msg, "no such type here"));
    assert_int_equal(sl_schedule_fire_databus(&env, "../bad", (const char *)ev.data, ev.len, &err),
                     SL_EINVAL);
    assert_int_equal(sl_store_end_offset(&set->parts[0]), 1);
    /* a stopped bus: an error for the scheduler to retry */
    env.validate = NULL;
    atomic_store(&env.stopping, true);
    sl_databus_stop(bus);
    assert_int_not_equal(
        sl_schedule_fire_databus(&env, "jobs", (const char *)ev.data, ev.len, &err), 0);
    sl_buf_free(&ev);
    sl_databus_free(bus);
    sl_sets_close(sets);
    tu_rmdir(dir);
}

/* The real clock: an `at` one second away fires without a poke. */
static void test_real_clock(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    fake f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    sl_scheduler_options o = {.data_dir = dir, .fire = fake_fire, .ctx = &f};
    sl_scheduler *s = NULL;
    sl_error err = {0};
    char when[SL_TIME_RFC3339_MAX];
    sl_time_format_rfc3339(sl_clock_now_ms() + 1000, when);
    sl_schedule_decl d = rate_decl("soon", NULL, 1);
    d.at = when;
    assert_int_equal(sl_scheduler_init(&o, &s, &err), 0);
    assert_int_equal(sl_scheduler_set(s, "config", &d, 1, &err), 0);
    assert_int_equal(sl_scheduler_start(s, &err), 0);
    int64_t t0 = sl_clock_mono_ms();
    while (count(&f) == 0 && sl_clock_mono_ms() - t0 < 5000)
        usleep(20000);
    assert_int_equal(count(&f), 1);
    assert_true(sl_clock_mono_ms() - t0 < 3000);
    sl_scheduler_free(s);
    fake_free(&f);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_event_per_tick),
        cmocka_unit_test(test_restart_fires_no_tick_twice),
        cmocka_unit_test(test_pending_refired_same_id),
        cmocka_unit_test(test_catch_up),
        cmocka_unit_test(test_late_ticks),
        cmocka_unit_test(test_failed_fire_retried),
        cmocka_unit_test(test_at_once),
        cmocka_unit_test(test_set_keeps_state),
        cmocka_unit_test(test_bad_state_file),
        cmocka_unit_test(test_decl_checks),
        cmocka_unit_test(test_event_shape),
        cmocka_unit_test(test_fire_databus),
        cmocka_unit_test(test_real_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
