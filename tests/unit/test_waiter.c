/*
 * tests/unit/test_waiter.c — the long-poll wait (core/bus/waits.h): a
 * waiter wakes on an append past its position and not before, on the
 * right set and partition only, at its deadline (also one earlier than the
 * timer's current sleep), at stop (and none may start after), never after
 * a cancel, exactly once; and an append racing the registration is never
 * missed. The partitions are real logs in a temporary directory.
 */
#include "testutil.h"

#include "core/base/clock.h"
#include "core/bus/set.h"
#include "core/bus/waits.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- helpers ------------------------------------------------------------- */

typedef struct fixture {
    char *dir;
    sl_sets *sets;
    sl_set *a, *b; /* two sets, 4 partitions each */
    sl_waits *ws;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    sl_sets_options o = {.data_dir = f->dir, .auto_create = true};
    sl_set_config_default(&o.defaults);
    sl_error err = {0};
    if (sl_sets_open(&o, &f->sets, &err) || sl_sets_get(f->sets, "a", true, &f->a, &err) ||
        sl_sets_get(f->sets, "b", true, &f->b, &err) || sl_waits_start(&f->ws, &err)) {
        print_error("setup: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sl_waits_free(f->ws);
    sl_sets_close(f->sets);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* One waiter and what happened to it. The wake callback runs on another
 * thread (an appender's, the timer's), so the counts are atomic and a
 * condition variable tells the test. */
typedef struct probe {
    sl_wait w;
    _Atomic int parked, woken;
    _Atomic bool woke_parked; /* park had run when wake ran */
    int64_t woken_ns;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} probe;

static void probe_park(sl_wait *w)
{
    probe *p = w->data;
    atomic_fetch_add(&p->parked, 1);
}

static void probe_wake(sl_wait *w)
{
    probe *p = w->data;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->woke_parked, atomic_load(&p->parked) > 0);
    p->woken_ns = sl_clock_mono_ns();
    atomic_fetch_add(&p->woken, 1);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

static void probe_init(probe *p)
{
    memset(p, 0, sizeof *p);
    p->w = (sl_wait){.data = p, .wake = probe_wake, .park = probe_park};
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
}

static void probe_destroy(probe *p)
{
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
}

/* Waits up to ms for p to be woken; returns whether it was. */
static bool probe_wait(probe *p, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&p->lock);
    while (!atomic_load(&p->woken) && pthread_cond_timedwait(&p->cond, &p->lock, &ts) == 0)
        ;
    bool ok = atomic_load(&p->woken) > 0;
    pthread_mutex_unlock(&p->lock);
    return ok;
}

static int64_t far_ns(void)
{
    return sl_clock_mono_ns() + 60 * 1000000000LL;
}

/* Appends n records to partition part of s; returns its new end. */
static int64_t append(sl_set *s, int32_t part, int n)
{
    int64_t end = sl_store_end_offset(&s->parts[part]);
    tu_append(TU_LOG(s, part), end, n, n, 40, 1, "", SL_CODEC_NONE);
    return sl_store_end_offset(&s->parts[part]);
}

/* ---- tests --------------------------------------------------------------- */

/* An append past the position wakes the waiter, once; park ran first. */
static void test_wake_on_append(void **state)
{
    fixture *f = *state;
    probe p;
    probe_init(&p);
    assert_true(sl_waits_add(f->ws, &p.w, f->a, 0, 0, far_ns()));
    assert_int_equal(atomic_load(&p.parked), 1);
    assert_int_equal(atomic_load(&p.woken), 0);
    assert_ptr_equal(p.w.set, f->a);
    assert_int_equal(p.w.part, 0);
    assert_int_equal(p.w.pos, 0);
    int64_t end = append(f->a, 0, 1);
    assert_int_equal(end, 1);
    sl_waits_on_append(f->ws, f->a, 0, end);
    assert_int_equal(atomic_load(&p.woken), 1);
    assert_true(atomic_load(&p.woke_parked));
    /* woken means gone: later appends and stop do not wake it again */
    sl_waits_on_append(f->ws, f->a, 0, append(f->a, 0, 1));
    assert_false(sl_waits_cancel(f->ws, &p.w));
    sl_waits_stop(f->ws);
    assert_int_equal(atomic_load(&p.woken), 1);
    probe_destroy(&p);
}

/* Appends that do not pass the position, or land on another partition or
 * set, wake nothing; a position already passed is not waited for. */
static void test_not_before_position(void **state)
{
    fixture *f = *state;
    int64_t end = append(f->a, 1, 3);
    assert_int_equal(end, 3);
    probe late;
    probe_init(&late);
    /* the end (3) is past 2 already: not registered, no callback */
    assert_false(sl_waits_add(f->ws, &late.w, f->a, 1, 2, far_ns()));
    assert_int_equal(atomic_load(&late.parked), 0);
    assert_int_equal(atomic_load(&late.woken), 0);

    probe p;
    probe_init(&p);
    assert_true(sl_waits_add(f->ws, &p.w, f->a, 1, 5, far_ns()));
    sl_waits_on_append(f->ws, f->a, 1, 3);
    sl_waits_on_append(f->ws, f->a, 1, 5); /* end == pos: nothing new yet */
    sl_waits_on_append(f->ws, f->a, 0, 100);
    sl_waits_on_append(f->ws, f->a, 2, 100);
    sl_waits_on_append(f->ws, f->b, 1, 100);
    assert_int_equal(atomic_load(&p.woken), 0);
    sl_waits_on_append(f->ws, f->a, 1, 6);
    assert_int_equal(atomic_load(&p.woken), 1);
    probe_destroy(&p);
    probe_destroy(&late);
}

/* The timer wakes a waiter at its deadline, not before; one with a later
 * deadline keeps waiting. */
static void test_deadline(void **state)
{
    fixture *f = *state;
    probe soon, later;
    probe_init(&soon);
    probe_init(&later);
    int64_t t0 = sl_clock_mono_ns();
    assert_true(sl_waits_add(f->ws, &later.w, f->a, 0, 0, t0 + 3000 * 1000000LL));
    assert_true(sl_waits_add(f->ws, &soon.w, f->a, 0, 0, t0 + 100 * 1000000LL));
    assert_true(probe_wait(&soon, 5000));
    assert_true(soon.woken_ns >= t0 + 100 * 1000000LL);
    assert_true(soon.woken_ns < t0 + 2000 * 1000000LL);
    assert_int_equal(atomic_load(&later.woken), 0);
    assert_true(probe_wait(&later, 10000));
    assert_true(later.woken_ns >= t0 + 3000 * 1000000LL);
    assert_int_equal(atomic_load(&soon.woken), 1);
    assert_int_equal(atomic_load(&later.woken), 1);
    probe_destroy(&soon);
    probe_destroy(&later);
}

/* A deadline sooner than the one the timer sleeps towards wakes it
 * early: the timer is told of every new waiter. */
static void test_earlier_deadline_added(void **state)
{
    fixture *f = *state;
    probe far, near;
    probe_init(&far);
    probe_init(&near);
    assert_true(sl_waits_add(f->ws, &far.w, f->a, 0, 0, far_ns()));
    struct timespec nap = {0, 50 * 1000000}; /* the timer is asleep now */
    nanosleep(&nap, NULL);
    int64_t t0 = sl_clock_mono_ns();
    assert_true(sl_waits_add(f->ws, &near.w, f->a, 0, 0, t0 + 20 * 1000000LL));
    assert_true(probe_wait(&near, 5000));
    assert_true(near.woken_ns - t0 < 900 * 1000000LL);
    assert_int_equal(atomic_load(&far.woken), 0);
    sl_waits_stop(f->ws);
    assert_int_equal(atomic_load(&far.woken), 1);
    probe_destroy(&far);
    probe_destroy(&near);
}

/* Stop wakes every waiter at once, exactly once; none may start after;
 * stopping again is harmless. */
static void test_stop(void **state)
{
    fixture *f = *state;
    enum { N = 50 };
    probe *p = calloc(N, sizeof *p);
    for (int i = 0; i < N; i++) {
        probe_init(&p[i]);
        assert_true(sl_waits_add(f->ws, &p[i].w, i % 2 ? f->a : f->b, i % 4, 0, far_ns()));
    }
    int64_t t0 = sl_clock_mono_ns();
    sl_waits_stop(f->ws);
    for (int i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&p[i].woken), 1); /* when stop returns, not later */
        assert_true(p[i].woken_ns - t0 < 2000 * 1000000LL);
    }
    probe after;
    probe_init(&after);
    assert_false(sl_waits_add(f->ws, &after.w, f->a, 0, 0, far_ns()));
    assert_int_equal(atomic_load(&after.parked), 0);
    sl_waits_stop(f->ws);
    sl_waits_on_append(f->ws, f->a, 0, 10);
    for (int i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&p[i].woken), 1);
        probe_destroy(&p[i]);
    }
    assert_int_equal(atomic_load(&after.woken), 0);
    probe_destroy(&after);
    free(p);
}

/* A cancelled waiter is never woken; cancelling twice says so. */
static void test_cancel(void **state)
{
    fixture *f = *state;
    probe p, q;
    probe_init(&p);
    probe_init(&q);
    assert_true(sl_waits_add(f->ws, &p.w, f->a, 3, 0, sl_clock_mono_ns() + 50 * 1000000LL));
    assert_true(sl_waits_add(f->ws, &q.w, f->a, 3, 0, far_ns()));
    assert_true(sl_waits_cancel(f->ws, &p.w));
    assert_false(sl_waits_cancel(f->ws, &p.w));
    struct timespec nap = {0, 200 * 1000000}; /* past p's deadline */
    nanosleep(&nap, NULL);
    sl_waits_on_append(f->ws, f->a, 3, append(f->a, 3, 1));
    assert_int_equal(atomic_load(&q.woken), 1);
    sl_waits_stop(f->ws);
    assert_int_equal(atomic_load(&p.woken), 0);
    assert_int_equal(atomic_load(&q.woken), 1);
    probe_destroy(&p);
    probe_destroy(&q);
}

/* An appender writes one record and then tells the registry, as the
 * Databus does, at the very moment a reader that has just read the end
 * registers to wait past it; round after round. The append lands between
 * the read and the registration often: with no re-check under the lock,
 * that waiter would wait for an append that never comes. */
enum { RACE_ROUNDS = 3000 };

typedef struct race {
    fixture *f;
    pthread_barrier_t go;
} race;

static void *appender(void *arg)
{
    race *r = arg;
    sl_set *s = r->f->a;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        pthread_barrier_wait(&r->go);
        sl_waits_on_append(r->f->ws, s, 2, append(s, 2, 1));
    }
    return NULL;
}

static void test_append_race(void **state)
{
    fixture *f = *state;
    race r = {.f = f};
    pthread_barrier_init(&r.go, NULL, 2);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, appender, &r), 0);
    int waited = 0, missed = 0;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        probe p;
        probe_init(&p);
        int64_t pos = sl_store_end_offset(&f->a->parts[2]);
        pthread_barrier_wait(&r.go);
        if (sl_waits_add(f->ws, &p.w, f->a, 2, pos, far_ns())) {
            waited++;
            if (!probe_wait(&p, missed ? 10 : 2000)) { /* a miss costs 2 s once */
                missed++;
                assert_true(sl_waits_cancel(f->ws, &p.w));
            }
        }
        probe_destroy(&p);
    }
    pthread_join(t, NULL);
    pthread_barrier_destroy(&r.go);
    assert_int_equal(sl_store_end_offset(&f->a->parts[2]), RACE_ROUNDS);
    print_message("%d of %d rounds waited for the append, %d missed it\n", waited, RACE_ROUNDS,
                  missed);
    assert_int_equal(missed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wake_on_append, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_before_position, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_earlier_deadline_added, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_race, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
