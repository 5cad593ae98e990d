/*
 * tests/unit/test_databus.c — the Databus (core/bus/databus.h): offsets handed
 * out at publish time, what the writer stores for them, durable completion
 * and group commit, partitioning (Kafka's murmur2), lanes, linger, the
 * bounded buffers and their refusals, shutdown, the append callback and a
 * failing disk. A bus is started and sets are opened with on_open =
 * sl_databus_attach, as server/serve.c wires them; every check reads the
 * records back from the partition logs.
 */
#include "testutil.h"

#include "core/bus/databus.h"
#include "core/log/log_internal.h" /* to see which segments are synced */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- fixture --------------------------------------------------------------- */

typedef struct fx {
    char *dir;
    sl_databus *bus;
    sl_sets *sets;
} fx;

/* buffer_sync_ms of the next fx_open() (0: the bus's default). */
static int64_t g_buffer_sync_ms;

static void fx_open(fx *f)
{
    sl_error err = {0};
    sl_databus_options bo = {.buffer_sync_ms = g_buffer_sync_ms};
    if (sl_databus_start(&bo, &f->bus, &err))
        fail_msg("sl_databus_start: %s", err.msg);
    sl_sets_options so = {.data_dir = f->dir,
                          .auto_create = true,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = f->bus};
    sl_set_config_default(&so.defaults);
    if (sl_sets_open(&so, &f->sets, &err))
        fail_msg("sl_sets_open: %s", err.msg);
}

/* server/serve.c's order: the bus first (it drains into the logs), then the
 * sets. */
static void fx_close(fx *f)
{
    sl_databus_free(f->bus);
    sl_sets_close(f->sets);
    f->bus = NULL;
    f->sets = NULL;
}

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    fx_open(f);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    fx_close(f);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

static sl_set_config set_config(int32_t partitions, sl_ack ack, uint32_t linger_ms)
{
    sl_set_config c;
    sl_set_config_default(&c);
    c.partitions = partitions;
    c.ack = ack;
    c.linger_ms = linger_ms;
    c.log.retention_ms = -1;
    return c;
}

static sl_set *define(fx *f, const char *name, const sl_set_config *c)
{
    sl_set *s = NULL;
    sl_error err = {0};
    if (sl_sets_define(f->sets, name, c, &s, &err))
        fail_msg("define %s: %s", name, err.msg);
    assert_non_null(s->bus);
    return s;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until nothing of set is buffered; false after timeout_ms. */
static bool wait_drained(sl_set *set, int timeout_ms)
{
    int64_t until = mono_ms() + timeout_ms;
    for (;;) {
        uint64_t bytes, limit;
        sl_databus_fill(set, &bytes, &limit);
        if (bytes == 0)
            return true;
        if (mono_ms() > until)
            return false;
        sleep_ms(2);
    }
}

/* ---- published events and what is stored -------------------------------- */

/* One event as published: its value is tu_value(id, size). */
typedef struct pubrec {
    int64_t id;
    size_t size;
    char key[64];
    size_t klen;
    bool has_key;
    const char *lane;
    int64_t ts;
    int32_t part; /* from the results */
    int64_t off;
} pubrec;

static pubrec mkpub(int64_t id, size_t size, const char *key, const char *lane, int64_t ts)
{
    pubrec p = {.id = id, .size = size, .lane = lane, .ts = ts, .part = -1, .off = -1};
    if (key) {
        assert_true(strlen(key) < sizeof p.key);
        p.has_key = true;
        p.klen = (size_t)snprintf(p.key, sizeof p.key, "%s", key);
    }
    return p;
}

static void on_done(void *ctx, int status);
static void mark_published(void *ctx);

/* Publishes pr[0 .. n) in one call; on success fills their part/off (and,
 * with on_done, lets the callback look at them: it may run before the
 * publish returns, on the Databus' syncer thread). */
/* The ack of the next publish() (-1: the set's, through sl_databus_publish()). */
static int g_ack = -1;

static int publish(sl_databus *bus, sl_set *set, pubrec *pr, size_t n, sl_databus_done_fn *done,
                   void *ctx, sl_error *err)
{
    sl_databus_event *evs = calloc(n ? n : 1, sizeof *evs);
    sl_databus_result *res = calloc(n ? n : 1, sizeof *res);
    char **vals = calloc(n ? n : 1, sizeof *vals);
    assert_non_null(evs);
    assert_non_null(res);
    assert_non_null(vals);
    for (size_t i = 0; i < n; i++) {
        vals[i] = malloc(pr[i].size + 64);
        assert_non_null(vals[i]);
        evs[i].value = vals[i];
        evs[i].value_len = tu_value(vals[i], pr[i].size, pr[i].id);
        evs[i].key = pr[i].has_key ? pr[i].key : NULL;
        evs[i].key_len = pr[i].klen;
        evs[i].lane = pr[i].lane;
        evs[i].ts_ms = pr[i].ts;
        res[i].partition = -7;
        res[i].offset = -7;
    }
    int rc = g_ack < 0
                 ? sl_databus_publish(bus, set, evs, n, res, done, ctx, err)
                 : sl_databus_publish_ack(bus, set, (sl_ack)g_ack, evs, n, res, done, ctx, err);
    if (rc >= 0)
        for (size_t i = 0; i < n; i++) {
            pr[i].part = res[i].partition;
            pr[i].off = res[i].offset;
        }
    if (done == on_done)
        mark_published(ctx);
    for (size_t i = 0; i < n; i++)
        free(vals[i]);
    free(vals);
    free(evs);
    free(res);
    return rc;
}

/* A record as read back, with the base offset of its batch. */
typedef struct stored {
    int64_t offset;
    int64_t ts;
    char *value;
    size_t vlen;
    char *key; /* NULL for a null key */
    size_t klen;
    char lane[SL_LANE_MAX + 1];
    int64_t batch_base;
} stored;

typedef struct part_data {
    stored *v;
    size_t n;
} part_data;

/* Reads every record of log from offset 0 with lane filter (NULL = all). */
static part_data read_part(sl_log *log, const char *lane)
{
    part_data d = {0};
    size_t cap = 0;
    sl_log_reader *r;
    sl_error err = {0};
    if (sl_log_reader_open(log, 0, lane, &r, &err))
        fail_msg("reader_open: %s", err.msg);
    sl_record rec;
    int rc;
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
        if (d.n == cap) {
            cap = cap ? cap * 2 : 64;
            d.v = realloc(d.v, cap * sizeof *d.v);
            assert_non_null(d.v);
        }
        stored *s = &d.v[d.n++];
        s->offset = rec.offset;
        s->ts = rec.timestamp;
        s->vlen = rec.value_len;
        s->value = malloc(rec.value_len + 1);
        memcpy(s->value, rec.value, rec.value_len);
        s->klen = rec.key_len;
        s->key = NULL;
        if (rec.key) {
            s->key = malloc(rec.key_len + 1);
            memcpy(s->key, rec.key, rec.key_len);
        }
        assert_true(rec.lane_len <= SL_LANE_MAX);
        memcpy(s->lane, rec.lane, rec.lane_len);
        s->lane[rec.lane_len] = '\0';
        s->batch_base = sl_log_reader_batch(r)->base_offset;
    }
    if (rc != SL_EEOF)
        fail_msg("reader_next: %s", err.msg);
    sl_log_reader_close(r);
    return d;
}

static void part_data_free(part_data *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].value);
        free(d->v[i].key);
    }
    free(d->v);
    d->v = NULL;
    d->n = 0;
}

static const stored *find_offset(const part_data *d, int64_t off)
{
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->v[mid].offset < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->n && d->v[lo].offset == off ? &d->v[lo] : NULL;
}

/* Checks that every published event is in its partition's log at its
 * offset with identical value, key, timestamp and lane. */
static void verify_stored(sl_set *set, const pubrec *pr, size_t n)
{
    part_data *pd = calloc((size_t)set->nparts, sizeof *pd);
    bool *loaded = calloc((size_t)set->nparts, sizeof *loaded);
    char *v = NULL;
    size_t vcap = 0;
    for (size_t i = 0; i < n; i++) {
        const pubrec *p = &pr[i];
        assert_true(p->part >= 0 && p->part < set->nparts);
        if (!loaded[p->part]) {
            pd[p->part] = read_part(TU_LOG(set, p->part), NULL);
            loaded[p->part] = true;
        }
        const stored *s = find_offset(&pd[p->part], p->off);
        if (!s)
            fail_msg("event %lld: nothing stored at %s/%d offset %lld", (long long)p->id, set->name,
                     p->part, (long long)p->off);
        if (vcap < p->size + 64) {
            vcap = p->size + 64;
            v = realloc(v, vcap);
        }
        size_t len = tu_value(v, p->size, p->id);
        if (s->vlen != len || memcmp(s->value, v, len) != 0)
            fail_msg("event %lld at %s/%d offset %lld: stored value %.*s", (long long)p->id,
                     set->name, p->part, (long long)p->off, (int)(s->vlen < 60 ? s->vlen : 60),
                     s->value);
        assert_int_equal(s->ts, p->ts);
        if (p->has_key) {
            assert_non_null(s->key);
            assert_int_equal(s->klen, p->klen);
            assert_memory_equal(s->key, p->key, p->klen);
        } else {
            assert_null(s->key);
        }
        assert_string_equal(s->lane, p->lane);
    }
    for (int32_t k = 0; k < set->nparts; k++)
        part_data_free(&pd[k]);
    free(pd);
    free(loaded);
    free(v);
}

/* A key (written to key) that maps to partition part of set. */
static void key_for(sl_set *set, int32_t part, char *key, size_t size)
{
    for (int i = 0; i < 100000; i++) {
        snprintf(key, size, "key-%d", i);
        if (sl_databus_partition(set, key, strlen(key)) == part)
            return;
    }
    fail_msg("no key for partition %d", part);
}

/* ---- durable completions ------------------------------------------------- */

static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;

/* One durable publish: what it covers and what the callback saw. */
typedef struct done_rec {
    sl_set *set;
    const pubrec *pr; /* the events of the publish */
    size_t n;
    bool check;     /* look at the log inside the callback */
    bool published; /* publish() filled pr[].part/off (under done_mu) */
    int calls;
    int status;
    bool end_ok;               /* log end offset covered every event at callback time */
    bool synced_ok;            /* every event's batch fdatasync'ed at callback time */
    bool read_ok;              /* every event readable at its offset at callback time */
    sl_databus_done_fn *chain; /* optional: called after recording */
} done_rec;

/* Every segment of log has all its bytes synced (after sl_databus_stop). */
static bool log_fully_synced(sl_log *log)
{
    bool ok = true;
    pthread_rwlock_rdlock(&log->lock);
    for (size_t i = 0; i < log->n; i++)
        ok &= log->segs[i]->synced == sl_segment_size(log->segs[i]);
    pthread_rwlock_unlock(&log->lock);
    return ok;
}

/* The batch holding offset is within the synced bytes of its segment. Called
 * on the syncer thread (the only one that moves synced), so it is stable;
 * later appends may well be unsynced yet, which is fine. */
static bool offset_synced(sl_log *log, int64_t offset)
{
    sl_log_slice sl;
    if (sl_log_slice_get(log, offset, NULL, 1, &sl, NULL) || !sl.len)
        return false;
    bool ok = ((sl_segment *)sl.seg)->synced >= sl.pos + sl.len;
    sl_log_slice_release(&sl);
    return ok;
}

static bool readable(sl_log *log, const pubrec *p)
{
    sl_log_reader *r;
    if (sl_log_reader_open(log, p->off, NULL, &r, NULL))
        return false;
    sl_record rec;
    bool ok = sl_log_reader_next(r, &rec, NULL) == 0 && rec.offset == p->off;
    if (ok) {
        char *v = malloc(p->size + 64);
        size_t len = tu_value(v, p->size, p->id);
        ok = rec.value_len == len && memcmp(rec.value, v, len) == 0;
        free(v);
    }
    sl_log_reader_close(r);
    return ok;
}

static void mark_published(void *ctx)
{
    done_rec *d = ctx;
    pthread_mutex_lock(&done_mu);
    d->published = true;
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&done_mu);
}

static void on_done(void *ctx, int status)
{
    done_rec *d = ctx;
    bool end_ok = true, synced_ok = true, read_ok = true;
    if (d->check) {
        /* The offsets to look at are only known once publish() returned;
         * waiting here holds the syncer, so the log cannot move on meanwhile. */
        pthread_mutex_lock(&done_mu);
        while (!d->published)
            pthread_cond_wait(&done_cv, &done_mu);
        pthread_mutex_unlock(&done_mu);
        for (size_t i = 0; i < d->n; i++) {
            sl_log *log = TU_LOG(d->set, d->pr[i].part);
            end_ok &= sl_log_end_offset(log) >= d->pr[i].off + 1;
            synced_ok &= offset_synced(log, d->pr[i].off);
            read_ok &= readable(log, &d->pr[i]);
        }
    }
    pthread_mutex_lock(&done_mu);
    d->calls++;
    d->status = status;
    d->end_ok = end_ok;
    d->synced_ok = synced_ok;
    d->read_ok = read_ok;
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&done_mu);
}

/* Waits until d has been called; false after timeout_ms. */
static bool wait_done(done_rec *d, int timeout_ms)
{
    int64_t until = mono_ms() + timeout_ms;
    pthread_mutex_lock(&done_mu);
    while (d->calls == 0 && mono_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&done_cv, &done_mu, &ts);
    }
    bool ok = d->calls > 0;
    pthread_mutex_unlock(&done_mu);
    return ok;
}

static int calls_of(done_rec *d)
{
    pthread_mutex_lock(&done_mu);
    int c = d->calls;
    pthread_mutex_unlock(&done_mu);
    return c;
}

/* ---- publishing with ack = buffer ---------------------------------------- */

static void test_publish_buffer_ack(void **state)
{
    fx *f = *state;
    /* Data already in the logs before the bus attaches: offsets continue
     * from each log's end. */
    fx_close(f);
    {
        sl_sets_options so = {.data_dir = f->dir};
        sl_set_config_default(&so.defaults);
        sl_sets *sets;
        sl_error err = {0};
        assert_int_equal(sl_sets_open(&so, &sets, &err), 0);
        sl_set_config c = set_config(3, SL_ACK_BUFFER, 2);
        sl_set *s;
        assert_int_equal(sl_sets_define(sets, "orders", &c, &s, &err), 0);
        tu_append(TU_LOG(s, 0), 0, 5, 2, 40, 1, "", SL_CODEC_NONE);
        tu_append(TU_LOG(s, 2), 0, 12, 5, 40, 1, "", SL_CODEC_NONE);
        sl_sets_close(sets);
    }
    fx_open(f);
    sl_set *set;
    sl_error err = {0};
    assert_int_equal(sl_sets_get(f->sets, "orders", false, &set, &err), 0);
    assert_int_equal(set->cfg.ack, SL_ACK_BUFFER);
    int64_t start[3], next[3], count[3] = {0};
    for (int p = 0; p < 3; p++)
        start[p] = next[p] = sl_log_end_offset(TU_LOG(set, p));
    assert_int_equal(start[0], 5);
    assert_int_equal(start[1], 0);
    assert_int_equal(start[2], 12);

    enum { ROUNDS = 12, PER = 40 };
    pubrec *pr = calloc(ROUNDS * PER, sizeof *pr);
    static const char *const lanes[] = {"", "", "x", "", "yy-1"};
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < PER; i++) {
            int64_t id = r * PER + i;
            char key[32];
            snprintf(key, sizeof key, "user-%d", (int)(id % 13));
            pr[id] = mkpub(id, 20 + (size_t)(id * 37 % 500), key, lanes[id % 5],
                           1700000000000 + id * 3 - (id % 7));
        }
        int rc = publish(f->bus, set, pr + r * PER, PER, NULL, NULL, &err);
        if (rc != 0)
            fail_msg("publish round %d: %d %s", r, rc, err.msg);
        for (int i = 0; i < PER; i++) {
            pubrec *p = &pr[r * PER + i];
            assert_true(p->part >= 0 && p->part < 3);
            if (p->off != next[p->part])
                fail_msg("event %lld: offset %lld in partition %d, want %lld", (long long)p->id,
                         (long long)p->off, p->part, (long long)next[p->part]);
            next[p->part]++;
            count[p->part]++;
        }
        if (r % 4 == 3)
            sleep_ms(5); /* let some rounds be written while others queue */
    }
    assert_int_equal(atomic_load(&set->stats.events_in), ROUNDS * PER);
    sl_databus_stop(f->bus);
    for (int p = 0; p < 3; p++) {
        assert_true(count[p] > 0);
        assert_int_equal(sl_log_end_offset(TU_LOG(set, p)), start[p] + count[p]);
    }
    verify_stored(set, pr, ROUNDS * PER);
    /* What was there before is untouched. */
    for (int p = 0; p < 3; p += 2) {
        part_data d = read_part(TU_LOG(set, p), NULL);
        assert_int_equal(d.n, start[p] + count[p]);
        char v[128];
        for (int64_t o = 0; o < start[p]; o++) {
            size_t len = tu_value(v, 40, o);
            assert_int_equal(d.v[o].offset, o);
            assert_int_equal(d.v[o].vlen, len);
            assert_memory_equal(d.v[o].value, v, len);
        }
        part_data_free(&d);
    }
    free(pr);
}

/* ---- durable --------------------------------------------------------------- */

static void test_durable_callback(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(2, SL_ACK_DURABLE, 2);
    sl_set *set = define(f, "durable", &c);
    enum { PUBS = 25, PER = 4 };
    pubrec pr[PUBS * PER];
    done_rec d[PUBS];
    sl_error err = {0};
    for (int k = 0; k < PUBS; k++) {
        for (int i = 0; i < PER; i++) {
            int64_t id = k * PER + i;
            char key[16];
            snprintf(key, sizeof key, "k%d", (int)id);
            pr[id] = mkpub(id, 100, key, "", 5000 + id);
        }
        d[k] = (done_rec){.set = set, .pr = pr + k * PER, .n = PER, .check = true};
        int rc = publish(f->bus, set, pr + k * PER, PER, on_done, &d[k], &err);
        if (rc != 1)
            fail_msg("durable publish %d returned %d (%s), want 1", k, rc, err.msg);
        if (k % 5 == 0)
            assert_true(wait_done(&d[k], 10000));
    }
    for (int k = 0; k < PUBS; k++) {
        if (!wait_done(&d[k], 10000))
            fail_msg("publish %d: no callback after 10 s", k);
    }
    sleep_ms(50);
    for (int k = 0; k < PUBS; k++) {
        assert_int_equal(calls_of(&d[k]), 1);
        assert_int_equal(d[k].status, 0);
        if (!d[k].end_ok || !d[k].synced_ok || !d[k].read_ok)
            fail_msg("publish %d completed early: end %d synced %d readable %d", k, d[k].end_ok,
                     d[k].synced_ok, d[k].read_ok);
    }
    const sl_databus_stats *st = sl_databus_get_stats(f->bus);
    assert_true(atomic_load(&st->syncs) >= 1);
    sl_databus_stop(f->bus);
    for (int k = 0; k < PUBS; k++)
        assert_int_equal(calls_of(&d[k]), 1);
    verify_stored(set, pr, PUBS * PER);
}

/* A publish may ask for more durability than its set's, never less: on a
 * buffer set that would sync only once an hour and linger a minute,
 * ack = durable is answered (done) once its events are appended and synced,
 * together with the buffer-acked ones before them; ack = buffer on a
 * durable set is still a durable publish. */
static void test_publish_ack_override(void **state)
{
    fx *f = *state;
    fx_close(f);
    g_buffer_sync_ms = 3600 * 1000;
    fx_open(f);
    g_buffer_sync_ms = 0;
    sl_set_config c = set_config(2, SL_ACK_BUFFER, 60000);
    sl_set *set = define(f, "lazy", &c);
    sl_error err = {0};
    pubrec pr[6];
    for (int i = 0; i < 6; i++)
        pr[i] = mkpub(i, 80, "same-key", "", 7000 + i);
    /* buffer-acked first: queued, answered at once, lingering */
    assert_int_equal(publish(f->bus, set, pr, 3, NULL, NULL, &err), 0);
    g_ack = SL_ACK_DURABLE;
    done_rec d = {.set = set, .pr = pr, .n = 6, .check = true};
    int rc = publish(f->bus, set, pr + 3, 3, on_done, &d, &err);
    g_ack = -1;
    if (rc != 1)
        fail_msg("ack = durable on a buffer set returned %d (%s), want 1 (a durable wait)", rc,
                 err.msg);
    if (!wait_done(&d, 20000))
        fail_msg("ack = durable on a buffer set: no callback after 20 s (waiting for the "
                 "hourly sync?)");
    assert_int_equal(d.status, 0);
    if (!d.end_ok || !d.synced_ok || !d.read_ok)
        fail_msg("completed early: end %d synced %d readable %d", d.end_ok, d.synced_ok, d.read_ok);
    assert_int_equal(calls_of(&d), 1);

    sl_set_config dc = set_config(1, SL_ACK_DURABLE, 0);
    sl_set *dset = define(f, "strict", &dc);
    pubrec q = mkpub(100, 50, NULL, "", 9000);
    done_rec dd = {.set = dset, .pr = &q, .n = 1, .check = true};
    g_ack = SL_ACK_BUFFER;
    rc = publish(f->bus, dset, &q, 1, on_done, &dd, &err);
    g_ack = -1;
    assert_int_equal(rc, 1); /* never less durable than the set */
    assert_true(wait_done(&dd, 20000));
    assert_int_equal(dd.status, 0);
    assert_true(dd.synced_ok);
    sl_databus_stop(f->bus);
    verify_stored(set, pr, 6);
}

#define CONC_THREADS 4
#define CONC_EVENTS 2000
#define CONC_WINDOW 16

typedef struct conc_arg {
    fx *f;
    sl_set *set;
    int t;
    pubrec *pr;
    done_rec *d;
    int rc;
    sl_error err;
} conc_arg;

/* Each publisher keeps up to CONC_WINDOW publishes in flight, as HTTP
 * clients with a few connections do, so rounds carry several waiters. */
static void *conc_main(void *p)
{
    conc_arg *a = p;
    for (int i = 0; i < CONC_EVENTS && !a->rc; i++) {
        if (i >= CONC_WINDOW && !wait_done(&a->d[i - CONC_WINDOW], 20000)) {
            a->rc = -1;
            snprintf(a->err.msg, sizeof a->err.msg, "no callback for event %d", i);
            break;
        }
        int64_t id = (int64_t)a->t * CONC_EVENTS + i;
        char key[24];
        snprintf(key, sizeof key, "t%d-%d", a->t, i % 17);
        a->pr[i] = mkpub(id, 60 + (size_t)(i % 50), key, i % 3 ? "" : "c", id);
        a->d[i] = (done_rec){.set = a->set, .pr = &a->pr[i], .n = 1};
        int rc = publish(a->f->bus, a->set, &a->pr[i], 1, on_done, &a->d[i], &a->err);
        if (rc != 1)
            a->rc = rc ? rc : -2;
    }
    return NULL;
}

static void test_durable_concurrent(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(4, SL_ACK_DURABLE, 2);
    sl_set *set = define(f, "conc", &c);
    conc_arg a[CONC_THREADS];
    pthread_t th[CONC_THREADS];
    for (int t = 0; t < CONC_THREADS; t++) {
        a[t] = (conc_arg){.f = f, .set = set, .t = t};
        a[t].pr = calloc(CONC_EVENTS, sizeof *a[t].pr);
        a[t].d = calloc(CONC_EVENTS, sizeof *a[t].d);
        assert_int_equal(pthread_create(&th[t], NULL, conc_main, &a[t]), 0);
    }
    for (int t = 0; t < CONC_THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < CONC_THREADS; t++)
        if (a[t].rc)
            fail_msg("publisher %d: %d %s", t, a[t].rc, a[t].err.msg);
    for (int t = 0; t < CONC_THREADS; t++)
        for (int i = 0; i < CONC_EVENTS; i++)
            if (!wait_done(&a[t].d[i], 20000))
                fail_msg("publisher %d event %d: no callback", t, i);
    sleep_ms(20);
    for (int t = 0; t < CONC_THREADS; t++)
        for (int i = 0; i < CONC_EVENTS; i++) {
            if (calls_of(&a[t].d[i]) != 1 || a[t].d[i].status != 0)
                fail_msg("publisher %d event %d: %d calls, status %d", t, i, calls_of(&a[t].d[i]),
                         a[t].d[i].status);
        }
    const sl_databus_stats *st = sl_databus_get_stats(f->bus);
    uint64_t syncs = atomic_load(&st->syncs), pubs = CONC_THREADS * CONC_EVENTS;
    print_message("    %llu publishes, %llu syncs, %llu batches\n", (unsigned long long)pubs,
                  (unsigned long long)syncs, (unsigned long long)atomic_load(&st->batches));
    assert_true(syncs > 0);
    if (syncs >= pubs)
        fail_msg("no group commit: %llu syncs for %llu publishes", (unsigned long long)syncs,
                 (unsigned long long)pubs);
    sl_databus_stop(f->bus);
    int64_t total = 0;
    for (int32_t p = 0; p < set->nparts; p++)
        total += sl_log_end_offset(TU_LOG(set, p));
    assert_int_equal(total, CONC_THREADS * CONC_EVENTS);
    for (int t = 0; t < CONC_THREADS; t++) {
        verify_stored(set, a[t].pr, CONC_EVENTS);
        free(a[t].pr);
        free(a[t].d);
    }
}

/* ---- partitioning ----------------------------------------------------------- */

static void test_same_key_same_partition(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(8, SL_ACK_BUFFER, 1);
    sl_set *set = define(f, "keyed", &c);
    enum { KEYS = 40, REPEAT = 5 };
    pubrec pr[KEYS * REPEAT];
    int32_t part_of[KEYS];
    int used[8] = {0};
    sl_error err = {0};
    for (int r = 0; r < REPEAT; r++) {
        for (int k = 0; k < KEYS; k++) {
            char key[32];
            snprintf(key, sizeof key, "customer-%d", k * 7919);
            pr[r * KEYS + k] = mkpub(r * KEYS + k, 30, key, "", 100 + r);
        }
        /* A different split into publishes each round. */
        for (int k = 0; k < KEYS;) {
            int n = 1 + (k + r) % 6;
            if (k + n > KEYS)
                n = KEYS - k;
            assert_int_equal(publish(f->bus, set, &pr[r * KEYS + k], (size_t)n, NULL, NULL, &err),
                             0);
            k += n;
        }
        for (int k = 0; k < KEYS; k++) {
            const pubrec *p = &pr[r * KEYS + k];
            if (r == 0) {
                part_of[k] = p->part;
                used[p->part]++;
            }
            assert_int_equal(p->part, part_of[k]);
            assert_int_equal(sl_databus_partition(set, p->key, p->klen), part_of[k]);
        }
    }
    int nused = 0;
    for (int p = 0; p < 8; p++)
        nused += used[p] > 0;
    assert_true(nused >= 6); /* 40 keys are spread, not all in one place */
    sl_databus_stop(f->bus);
    verify_stored(set, pr, KEYS * REPEAT);
}

/* Kafka's org.apache.kafka.common.utils.Utils.murmur2 of these keys, as its
 * UtilsTest lists them; the default partitioner takes
 * (murmur2(key) & 0x7fffffff) % partitions. */
static void test_murmur2_kafka_compat(void **state)
{
    fx *f = *state;
    static const struct {
        const char *key;
        int32_t murmur2;
    } kafka[] = {
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    enum { N = sizeof kafka / sizeof *kafka };
    sl_set_config c = set_config(1024, SL_ACK_BUFFER, 1);
    sl_set *set = define(f, "kafka", &c);
    assert_int_equal(set->nparts, 1024);
    pubrec pr[N];
    for (int i = 0; i < N; i++) {
        int32_t want = (int32_t)(((uint32_t)kafka[i].murmur2 & 0x7fffffffu) % 1024u);
        int32_t got = sl_databus_partition(set, kafka[i].key, strlen(kafka[i].key));
        if (got != want)
            fail_msg("key \"%s\": partition %d, Kafka's is %d", kafka[i].key, got, want);
        pr[i] = mkpub(i, 50, kafka[i].key, "", 42);
    }
    sl_error err = {0};
    assert_int_equal(publish(f->bus, set, pr, N, NULL, NULL, &err), 0);
    for (int i = 0; i < N; i++) {
        int32_t want = (int32_t)(((uint32_t)kafka[i].murmur2 & 0x7fffffffu) % 1024u);
        assert_int_equal(pr[i].part, want);
        assert_int_equal(pr[i].off, 0);
    }
    sl_databus_stop(f->bus);
    verify_stored(set, pr, N);
    int64_t total = 0;
    for (int32_t p = 0; p < 1024; p++)
        total += sl_log_end_offset(TU_LOG(set, p));
    assert_int_equal(total, N);
}

/* NULL keys go round robin, one partition after the other, and are stored
 * as null keys (verify_stored). */
static void test_null_key_round_robin(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(4, SL_ACK_BUFFER, 1);
    sl_set *set = define(f, "rr", &c);
    enum { N = 400 };
    pubrec *pr = calloc(N + 100 + 20, sizeof *pr);
    for (int i = 0; i < N; i++)
        pr[i] = mkpub(i, 40, NULL, "", i);
    sl_error err = {0};
    assert_int_equal(publish(f->bus, set, pr, N, NULL, NULL, &err), 0);
    int per[4] = {0};
    for (int i = 0; i < N; i++) {
        per[pr[i].part]++;
        if (i)
            assert_int_equal(pr[i].part, (pr[i - 1].part + 1) % 4);
    }
    for (int p = 0; p < 4; p++)
        assert_int_equal(per[p], N / 4);
    /* One event per publish spreads the same way. */
    int per1[4] = {0};
    for (int i = N; i < N + 100; i++) {
        pr[i] = mkpub(i, 40, NULL, "", i);
        assert_int_equal(publish(f->bus, set, &pr[i], 1, NULL, NULL, &err), 0);
        per1[pr[i].part]++;
    }
    for (int p = 0; p < 4; p++)
        assert_int_equal(per1[p], 25);
    /* An empty key is a key, not "no key": always the same partition. */
    for (int i = N + 100; i < N + 120; i++) {
        pr[i] = mkpub(i, 40, "", "", i);
        assert_true(pr[i].has_key && pr[i].klen == 0);
        assert_int_equal(publish(f->bus, set, &pr[i], 1, NULL, NULL, &err), 0);
        assert_int_equal(pr[i].part, pr[N + 100].part);
    }
    sl_databus_stop(f->bus);
    for (int p = 0; p < 4; p++)
        assert_int_equal(sl_log_end_offset(TU_LOG(set, p)),
                         per[p] + per1[p] + (p == pr[N + 100].part ? 20 : 0));
    verify_stored(set, pr, N + 120);
    free(pr);
}

/* ---- lanes and batching ---------------------------------------------------- */

static void test_lanes_homogeneous_batches(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(1, SL_ACK_BUFFER, 20);
    sl_set *set = define(f, "lanes", &c);
    static const char *const lanes[] = {"", "a", "b"};
    enum { N = 300 };
    pubrec pr[N];
    int runs = 0, per_lane[3] = {0};
    uint32_t x = 12345;
    for (int i = 0, li = 0; i < N;) {
        x = x * 1103515245 + 12345;
        int len = 1 + (int)(x >> 16) % 5;
        li = (li + 1 + (int)((x >> 8) % 2)) % 3;
        runs++;
        for (int k = 0; k < len && i < N; k++, i++) {
            char key[16];
            snprintf(key, sizeof key, "k%d", i % 9);
            pr[i] = mkpub(i, 50 + (size_t)(i % 30), key, lanes[li], 9000 + i);
            per_lane[li]++;
        }
    }
    sl_error err = {0};
    assert_int_equal(publish(f->bus, set, pr, N, NULL, NULL, &err), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(pr[i].off, i);
    sl_databus_stop(f->bus);
    verify_stored(set, pr, N);

    /* Every batch holds one lane. */
    part_data all = read_part(TU_LOG(set, 0), NULL);
    assert_int_equal(all.n, N);
    int batches = 0;
    for (size_t i = 0; i < all.n; i++) {
        if (i == 0 || all.v[i].batch_base != all.v[i - 1].batch_base) {
            batches++;
            assert_int_equal(all.v[i].batch_base, all.v[i].offset);
        } else {
            if (strcmp(all.v[i].lane, all.v[i - 1].lane) != 0)
                fail_msg("batch at %lld mixes lanes \"%s\" and \"%s\"",
                         (long long)all.v[i].batch_base, all.v[i - 1].lane, all.v[i].lane);
        }
    }
    /* One round took everything: a batch per run of equal lanes. */
    assert_int_equal(batches, runs);
    part_data_free(&all);

    /* A reader per lane sees exactly that lane's events, in order. */
    for (int li = 0; li < 3; li++) {
        part_data d = read_part(TU_LOG(set, 0), lanes[li]);
        assert_int_equal(d.n, per_lane[li]);
        size_t k = 0;
        for (int i = 0; i < N; i++) {
            if (strcmp(pr[i].lane, lanes[li]) != 0)
                continue;
            assert_true(k < d.n);
            assert_int_equal(d.v[k].offset, pr[i].off);
            assert_string_equal(d.v[k].lane, lanes[li]);
            k++;
        }
        assert_int_equal(k, d.n);
        part_data_free(&d);
    }
}

static void test_linger_batches(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(1, SL_ACK_BUFFER, 50);
    sl_set *set = define(f, "linger", &c);
    enum { N = 200 };
    pubrec pr[N];
    sl_error err = {0};
    const sl_databus_stats *st = sl_databus_get_stats(f->bus);
    uint64_t b0 = atomic_load(&st->batches);
    for (int i = 0; i < N; i++) {
        pr[i] = mkpub(i, 80, "k", "", i);
        assert_int_equal(publish(f->bus, set, &pr[i], 1, NULL, NULL, &err), 0);
    }
    assert_true(wait_drained(set, 5000));
    part_data d = read_part(TU_LOG(set, 0), NULL);
    assert_int_equal(d.n, N);
    int batches = 0;
    for (size_t i = 0; i < d.n; i++)
        batches += i == 0 || d.v[i].batch_base != d.v[i - 1].batch_base;
    part_data_free(&d);
    print_message("    %d publishes stored in %d batches\n", N, batches);
    if (batches * 4 > N)
        fail_msg("linger 50 ms: %d publishes became %d batches", N, batches);
    assert_int_equal(atomic_load(&st->batches) - b0, (uint64_t)batches);

    /* Nothing is written before the linger is over. */
    pubrec late = mkpub(N, 80, "k", "", N);
    int64_t t0 = mono_ms();
    assert_int_equal(publish(f->bus, set, &late, 1, NULL, NULL, &err), 0);
    sleep_ms(15);
    if (mono_ms() - t0 < 40)
        assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), N);
    assert_true(wait_drained(set, 5000));
    assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), N + 1);
    sl_databus_stop(f->bus);
    verify_stored(set, pr, N);
}

/* ---- back-pressure ----------------------------------------------------------- */

#define FRAME_HDR 17 /* core/bus/databus.c: bytes buffered per event besides lane, key, value */

static void test_backpressure(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(2, SL_ACK_BUFFER, 1000);
    c.buffer_bytes = 4096;
    sl_set *set = define(f, "small", &c);
    char ka[32], kb[32];
    key_for(set, 0, ka, sizeof ka);
    key_for(set, 1, kb, sizeof kb);
    assert_int_equal(strlen(ka), strlen(kb));
    const sl_databus_stats *st = sl_databus_get_stats(f->bus);
    uint64_t full0 = atomic_load(&st->full);
    sl_error err = {0};

    /* 200-byte values: each event takes about 222 bytes of the buffer. */
    pubrec a[64];
    int accepted = 0, rc = 0;
    int64_t t0 = mono_ms();
    for (int i = 0; i < 64; i++) {
        a[i] = mkpub(i, 200, ka, "", i);
        memset(&err, 0, sizeof err);
        rc = publish(f->bus, set, &a[i], 1, NULL, NULL, &err);
        if (rc)
            break;
        assert_int_equal(a[i].off, i);
        accepted++;
    }
    assert_int_equal(rc, SL_EFULL);
    bool fast = mono_ms() - t0 < 500; /* the writer cannot have drained yet */
    if (!fast)
        print_message("    (slow machine: skipping the checks that need < 500 ms)\n");
    if (fast) {
        char v[300];
        size_t frame = FRAME_HDR + strlen(ka) + tu_value(v, 200, 0);
        assert_int_equal(accepted, (int)(4096 / frame));
    }
    assert_true(accepted >= 10);
    assert_non_null(strstr(err.msg, "buffer full"));
    assert_non_null(strstr(err.msg, "small"));
    assert_int_equal(atomic_load(&st->full), full0 + 1);
    uint64_t bytes, limit;
    sl_databus_fill(set, &bytes, &limit);
    assert_int_equal(limit, 2 * 4096);
    if (fast)
        assert_true(bytes > 4096 - 300 && bytes <= 4096);

    /* All or nothing: the share for the empty partition 1 would fit, the
     * share for partition 0 does not; nothing is queued. */
    pubrec mixed[2] = {mkpub(1000, 200, kb, "", 1), mkpub(1001, 200, ka, "", 2)};
    memset(&err, 0, sizeof err);
    rc = publish(f->bus, set, mixed, 2, NULL, NULL, &err);
    if (fast) {
        assert_int_equal(rc, SL_EFULL);
        assert_int_equal(atomic_load(&st->full), full0 + 2);
        uint64_t bytes2;
        sl_databus_fill(set, &bytes2, &limit);
        assert_int_equal(bytes2, bytes);
        /* The refused event took no offset in partition 1. */
        pubrec b0 = mkpub(2000, 100, kb, "", 3);
        assert_int_equal(publish(f->bus, set, &b0, 1, NULL, NULL, &err), 0);
        assert_int_equal(b0.part, 1);
        assert_int_equal(b0.off, 0);
        /* Still nothing written: the linger is 1 s. */
        assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), 0);

        /* Once the writer drains (after the linger), publishing works again. */
        assert_true(wait_drained(set, 5000));
        assert_true(mono_ms() - t0 >= 900);
        assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), accepted);
        assert_int_equal(sl_log_end_offset(TU_LOG(set, 1)), 1);
        pubrec again = mkpub(3000, 200, ka, "", 4);
        assert_int_equal(publish(f->bus, set, &again, 1, NULL, NULL, &err), 0);
        assert_int_equal(again.off, accepted);
        sl_databus_stop(f->bus);
        assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), accepted + 1);
        assert_int_equal(sl_log_end_offset(TU_LOG(set, 1)), 1);
        verify_stored(set, a, (size_t)accepted);
        verify_stored(set, &b0, 1);
        verify_stored(set, &again, 1);
    }
}

/* A publisher refused with SL_EFULL waits for room: the writer stops
 * lingering (1 s here) while it waits, frees the buffer, and the publish
 * that was refused is taken. */
static void test_wait_room(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(1, SL_ACK_BUFFER, 1000);
    c.buffer_bytes = 4096;
    sl_set *set = define(f, "room", &c);
    sl_error err = {0};
    pubrec a[64];
    int rc = 0, i = 0;
    for (; i < 64 && !rc; i++) {
        a[i] = mkpub(i, 200, NULL, "", i);
        rc = publish(f->bus, set, &a[i], 1, NULL, NULL, &err);
    }
    assert_int_equal(rc, SL_EFULL);
    int64_t t0 = mono_ms();
    while (rc == SL_EFULL && mono_ms() - t0 < 10000) {
        sl_databus_wait_room(f->bus, 100);
        rc = publish(f->bus, set, &a[i - 1], 1, NULL, NULL, &err);
    }
    assert_int_equal(rc, 0);
    assert_true(sl_log_end_offset(TU_LOG(set, 0)) > 0);
    /* At once while stopping. */
    sl_databus_stop(f->bus);
    sl_databus_wait_room(f->bus, 60000);
    assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), i);
}

static void test_toobig(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(2, SL_ACK_BUFFER, 20);
    c.buffer_bytes = 4096;
    sl_set *set = define(f, "tiny", &c);
    char ka[32], kb[32];
    key_for(set, 0, ka, sizeof ka);
    key_for(set, 1, kb, sizeof kb);
    const sl_databus_stats *st = sl_databus_get_stats(f->bus);
    uint64_t full0 = atomic_load(&st->full);
    sl_error err = {0};

    /* 20 events of ~222 bytes for one partition: more than its whole buffer. */
    pubrec big[20];
    for (int i = 0; i < 20; i++)
        big[i] = mkpub(i, 200, ka, "", i);
    assert_int_equal(publish(f->bus, set, big, 20, NULL, NULL, &err), SL_ETOOBIG);
    assert_non_null(strstr(err.msg, "more than its whole buffer"));
    assert_non_null(strstr(err.msg, "tiny"));
    assert_int_equal(atomic_load(&st->full), full0); /* not a "full" refusal */
    uint64_t bytes, limit;
    sl_databus_fill(set, &bytes, &limit);
    assert_int_equal(bytes, 0);

    /* The same bytes split over two partitions fit. */
    for (int i = 0; i < 20; i++)
        big[i] = mkpub(i, 200, i % 2 ? ka : kb, "", i);
    assert_int_equal(publish(f->bus, set, big, 20, NULL, NULL, &err), 0);
    assert_int_equal(big[0].off, 0);
    assert_int_equal(big[1].off, 0);
    assert_true(wait_drained(set, 5000));

    /* A single event of exactly buffer_bytes (with its framing) is accepted
     * into an empty buffer; one byte more never can be. */
    char v[4200];
    size_t base = tu_value(v, 0, 77); /* the smallest value tu_value makes */
    size_t want = 4096 - FRAME_HDR - strlen(ka);
    assert_true(want > base);
    pubrec exact = mkpub(77, want, ka, "", 5);
    assert_int_equal(tu_value(v, want, 77), want);
    assert_int_equal(publish(f->bus, set, &exact, 1, NULL, NULL, &err), 0);
    assert_int_equal(exact.off, 10);
    assert_true(wait_drained(set, 5000));
    pubrec over = mkpub(78, want + 1, ka, "", 6);
    assert_int_equal(publish(f->bus, set, &over, 1, NULL, NULL, &err), SL_ETOOBIG);
    sl_databus_stop(f->bus);
    assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), 11);
    assert_int_equal(sl_log_end_offset(TU_LOG(set, 1)), 10);
    verify_stored(set, big, 20);
    verify_stored(set, &exact, 1);
}

/* ---- shutdown ------------------------------------------------------------------ */

static void test_stop_drains_and_refuses(void **state)
{
    fx *f = *state;
    sl_set_config cb = set_config(4, SL_ACK_BUFFER, 1000);
    sl_set *buf = define(f, "buf", &cb);
    sl_set_config cd = set_config(2, SL_ACK_DURABLE, 1000);
    sl_set *dur = define(f, "dur", &cd);
    enum { N = 500, ND = 50 };
    pubrec *pr = calloc(N, sizeof *pr);
    int64_t per[4] = {0};
    sl_error err = {0};
    for (int r = 0; r < 5; r++) {
        for (int i = 0; i < N / 5; i++) {
            int id = r * (N / 5) + i;
            char key[16];
            snprintf(key, sizeof key, "s%d", id % 11);
            pr[id] = mkpub(id, 120, key, "", id);
        }
        assert_int_equal(publish(f->bus, buf, pr + r * (N / 5), N / 5, NULL, NULL, &err), 0);
    }
    for (int i = 0; i < N; i++)
        per[pr[i].part]++;
    pubrec pd[ND];
    for (int i = 0; i < ND; i++)
        pd[i] = mkpub(i, 90, i % 2 ? "odd" : "even", "", i);
    done_rec d = {.set = dur, .pr = pd, .n = ND, .check = true};
    assert_int_equal(publish(f->bus, dur, pd, ND, on_done, &d, &err), 1);
    /* Nothing is written yet (linger 1 s); stop must drain it all. */
    sl_databus_stop(f->bus);
    assert_int_equal(calls_of(&d), 1);
    assert_int_equal(d.status, 0);
    assert_true(d.end_ok && d.synced_ok && d.read_ok);
    int64_t total = 0;
    for (int p = 0; p < 4; p++) {
        assert_int_equal(sl_log_end_offset(TU_LOG(buf, p)), per[p]);
        total += sl_log_end_offset(TU_LOG(buf, p));
    }
    assert_int_equal(total, N);
    assert_int_equal(sl_log_end_offset(TU_LOG(dur, 0)) + sl_log_end_offset(TU_LOG(dur, 1)), ND);
    uint64_t bytes, limit;
    sl_databus_fill(buf, &bytes, &limit);
    assert_int_equal(bytes, 0);
    /* The buffer set's data is synced too. */
    for (int p = 0; p < 4; p++)
        assert_true(log_fully_synced(TU_LOG(buf, p)));

    /* After stop: refused, with a message, and no callback. */
    pubrec late = mkpub(9999, 50, "late", "", 1);
    memset(&err, 0, sizeof err);
    assert_int_equal(publish(f->bus, buf, &late, 1, NULL, NULL, &err), SL_ESHUTDOWN);
    assert_true(err.msg[0] != '\0');
    done_rec d2 = {0};
    memset(&err, 0, sizeof err);
    assert_int_equal(publish(f->bus, dur, &late, 1, on_done, &d2, &err), SL_ESHUTDOWN);
    assert_true(err.msg[0] != '\0');
    sl_databus_stop(f->bus); /* a second stop is harmless */
    sleep_ms(20);
    assert_int_equal(calls_of(&d2), 0);
    assert_int_equal(calls_of(&d), 1);
    verify_stored(buf, pr, N);
    verify_stored(dur, pd, ND);
    free(pr);
}

/* ---- the append callback ---------------------------------------------------------- */

typedef struct append_log {
    pthread_mutex_t mu;
    int n;
    struct {
        sl_set *set;
        int32_t part;
        int64_t end;
        int64_t log_end; /* the log's end offset when the callback ran */
    } v[4096];
} append_log;

static void on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane)
{
    (void)lane;
    append_log *a = ctx;
    int64_t log_end = sl_log_end_offset(TU_LOG(set, partition));
    pthread_mutex_lock(&a->mu);
    if (a->n < 4096) {
        a->v[a->n].set = set;
        a->v[a->n].part = partition;
        a->v[a->n].end = end;
        a->v[a->n].log_end = log_end;
    }
    a->n++;
    pthread_mutex_unlock(&a->mu);
}

static void test_on_append(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(3, SL_ACK_BUFFER, 1);
    sl_set *set = define(f, "tail", &c);
    append_log *a = calloc(1, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    sl_databus_set_on_append(f->bus, on_append, a);
    enum { ROUNDS = 30, PER = 7 };
    static const char *const tail_keys[] = {"a", "b", "c", "d", "e"};
    pubrec pr[ROUNDS * PER];
    sl_error err = {0};
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < PER; i++)
            pr[r * PER + i] = mkpub(r * PER + i, 60, tail_keys[(r + i) % 5], "", r);
        assert_int_equal(publish(f->bus, set, pr + r * PER, PER, NULL, NULL, &err), 0);
        sleep_ms(3);
    }
    sl_databus_stop(f->bus);
    pthread_mutex_lock(&a->mu);
    int n = a->n;
    pthread_mutex_unlock(&a->mu);
    assert_true(n >= 3 && n <= 4096);
    int64_t last[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        assert_ptr_equal(a->v[i].set, set);
        int32_t p = a->v[i].part;
        assert_true(p >= 0 && p < 3);
        if (a->v[i].end <= last[p])
            fail_msg("partition %d: end %lld after %lld", p, (long long)a->v[i].end,
                     (long long)last[p]);
        assert_true(a->v[i].log_end >= a->v[i].end); /* readable when announced */
        last[p] = a->v[i].end;
    }
    for (int p = 0; p < 3; p++)
        assert_int_equal(last[p], sl_log_end_offset(TU_LOG(set, p)));
    verify_stored(set, pr, ROUNDS * PER);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void test_on_append_replaced(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(1, SL_ACK_BUFFER, 0);
    sl_set *set = define(f, "swap", &c);
    append_log *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    pthread_mutex_init(&a->mu, NULL);
    pthread_mutex_init(&b->mu, NULL);
    sl_error err = {0};
    sl_databus_set_on_append(f->bus, on_append, a);
    pubrec p1 = mkpub(1, 50, "x", "", 1);
    assert_int_equal(publish(f->bus, set, &p1, 1, NULL, NULL, &err), 0);
    assert_true(wait_drained(set, 5000));
    sl_databus_set_on_append(f->bus, on_append, b);
    pubrec p2 = mkpub(2, 50, "x", "", 2);
    assert_int_equal(publish(f->bus, set, &p2, 1, NULL, NULL, &err), 0);
    assert_true(wait_drained(set, 5000));
    sl_databus_set_on_append(f->bus, NULL, NULL);
    pubrec p3 = mkpub(3, 50, "x", "", 3);
    assert_int_equal(publish(f->bus, set, &p3, 1, NULL, NULL, &err), 0);
    sl_databus_stop(f->bus);
    assert_int_equal(a->n, 1);
    assert_int_equal(a->v[0].end, 1);
    assert_int_equal(b->n, 1);
    assert_int_equal(b->v[0].end, 2);
    assert_int_equal(sl_log_end_offset(TU_LOG(set, 0)), 3);
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&b->mu);
    free(a);
    free(b);
}

/* ---- a failing disk ------------------------------------------------------------------- */

/* The writer cannot create the next segment while the process is out of
 * file descriptors (RLIMIT_NOFILE lowered to the lowest free descriptor):
 * the append fails, the events stay queued, new publishes are refused, and
 * once descriptors are back the retry stores everything. */
static void test_failing_disk(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(1, SL_ACK_DURABLE, 0);
    c.log = tu_config(8192);
    sl_set *set = define(f, "disk", &c);
    sl_log *log = TU_LOG(set, 0);
    sl_error err = {0};
    enum { MAXP = 16 };
    pubrec pr[MAXP];
    done_rec d[MAXP] = {0};
    int n = 0;
    /* Fill the first segment until the next event needs a new one. */
    while (sl_log_size_bytes(log) + 1200 <= 8192) {
        assert_true(n < MAXP - 2);
        pr[n] = mkpub(n, 1000, "disk", "", n);
        d[n] = (done_rec){.set = set, .pr = &pr[n], .n = 1};
        assert_int_equal(publish(f->bus, set, &pr[n], 1, on_done, &d[n], &err), 1);
        assert_true(wait_done(&d[n], 5000));
        assert_int_equal(d[n].status, 0);
        n++;
    }
    assert_int_equal(sl_log_segment_count(log), 1);
    int64_t end0 = sl_log_end_offset(log);
    assert_int_equal(end0, n);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int fd = dup(0);
    assert_true(fd >= 0);
    close(fd);
    lim = old;
    lim.rlim_cur = (rlim_t)fd;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);

    int e = n;
    pr[e] = mkpub(e, 1000, "disk", "", e);
    d[e] = (done_rec){.set = set, .pr = &pr[e], .n = 1};
    int rc_e = publish(f->bus, set, &pr[e], 1, on_done, &d[e], &err);
    sleep_ms(400);
    int calls_while_failing = calls_of(&d[e]);
    int64_t end_while_failing = sl_log_end_offset(log);
    pubrec refused = mkpub(100, 100, "disk", "", 100);
    sl_error ferr = {0};
    int rc_f = publish(f->bus, set, &refused, 1, on_done, &d[e + 1], &ferr);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);

    assert_int_equal(rc_e, 1);
    assert_int_equal(pr[e].off, end0);
    assert_int_equal(calls_while_failing, 0);
    assert_int_equal(end_while_failing, end0);
    if (rc_f != SL_EIO && rc_f != SL_ENOSPC)
        fail_msg("publish while the disk fails returned %d (%s)", rc_f, ferr.msg);
    assert_non_null(strstr(ferr.msg, "disk"));

    /* Descriptors are back: the queued event is written by a retry. */
    assert_true(wait_done(&d[e], 5000));
    assert_int_equal(d[e].status, 0);
    assert_int_equal(sl_log_end_offset(log), end0 + 1);
    assert_int_equal(sl_log_segment_count(log), 2);
    n = e + 1;
    pr[n] = mkpub(n, 1000, "disk", "", n);
    d[n] = (done_rec){.set = set, .pr = &pr[n], .n = 1};
    assert_int_equal(publish(f->bus, set, &pr[n], 1, on_done, &d[n], &err), 1);
    assert_true(wait_done(&d[n], 5000));
    assert_int_equal(pr[n].off, end0 + 1);
    n++;
    sl_databus_stop(f->bus);
    verify_stored(set, pr, (size_t)n);

    /* The partition is sound on disk. */
    char pdir[4300];
    snprintf(pdir, sizeof pdir, "%s/sets/disk/0", f->dir);
    fx_close(f);
    sl_log_verify_report rep;
    assert_int_equal(sl_log_verify(pdir, &rep, &err), 0);
    if (rep.damaged)
        fail_msg("%s damaged: %s", pdir, rep.where);
    assert_int_equal(rep.records, n);
    assert_int_equal(rep.next_offset, n);
    fx_open(f);
}

/* ---- known failures ----------------------------------------------------------------- */

/* A lane the batch builder refuses ([a-z0-9-]{0,32}) is taken by publish;
 * the writer ignores sl_batch_builder_reset()'s error and adds the record to
 * the builder's previous, already appended batch, so the old records are
 * stored again at the new offsets and later offsets shift. publish should
 * refuse such an event with SL_EINVAL. */
static void test_invalid_lane_refused(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(1, SL_ACK_BUFFER, 0);
    sl_set *set = define(f, "badlane", &c);
    sl_error err = {0};
    pubrec p0 = mkpub(0, 50, "x", "", 1);
    assert_int_equal(publish(f->bus, set, &p0, 1, NULL, NULL, &err), 0);
    assert_true(wait_drained(set, 5000));
    pubrec bad = mkpub(1, 50, "x", "Not A Lane", 2);
    memset(&err, 0, sizeof err);
    int rc = publish(f->bus, set, &bad, 1, NULL, NULL, &err);
    bool drained = wait_drained(set, 2000);
    pubrec p2 = mkpub(2, 50, "x", "", 3);
    int rc2 = publish(f->bus, set, &p2, 1, NULL, NULL, &err);
    sl_databus_stop(f->bus);
    int64_t end = sl_log_end_offset(TU_LOG(set, 0));
    part_data d = read_part(TU_LOG(set, 0), NULL);
    char desc[1024] = "";
    for (size_t i = 0; i < d.n && strlen(desc) < 900; i++) {
        size_t l = strlen(desc);
        snprintf(desc + l, sizeof desc - l, " [%lld lane \"%s\" %.*s]", (long long)d.v[i].offset,
                 d.v[i].lane, (int)(d.v[i].vlen < 8 ? d.v[i].vlen : 8), d.v[i].value);
    }
    part_data_free(&d);
    if (rc != SL_EINVAL)
        fail_msg("publish with lane \"Not A Lane\" returned %d (want SL_EINVAL); drained %d; "
                 "next publish %d at offset %lld; log end %lld; stored:%s",
                 rc, drained, rc2, (long long)p2.off, (long long)end, desc);
    assert_int_equal(rc2, 0);
    assert_int_equal(end, 2);
    verify_stored(set, &p0, 1);
    verify_stored(set, &p2, 1);
}

/* A durable publish of zero events returns 1 ("done will be called") but no
 * round is started for it: the callback comes only with the next write to
 * any set, or at shutdown with SL_ESHUTDOWN. */
static void test_empty_durable_publish(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(2, SL_ACK_DURABLE, 2);
    sl_set *set = define(f, "empty", &c);
    sl_error err = {0};
    done_rec d = {.set = set};
    int rc = publish(f->bus, set, NULL, 0, on_done, &d, &err);
    if (rc == 0)
        return; /* complete at once: fine */
    assert_int_equal(rc, 1);
    bool called = wait_done(&d, 1000);
    sl_databus_stop(f->bus);
    if (!called || d.status != 0)
        fail_msg("empty durable publish: callback %s within 1 s; at stop: %d call(s), "
                 "status %d",
                 called ? "called" : "not called", calls_of(&d), d.status);
}

/* on_open = attach, then refuse the second set: sl_sets_open() fails and
 * closes the first set; without the on_close hook (sl_databus_detach) it
 * would stay linked into the bus, which would then read the freed set. Only ASan
 * sees it, so the scenario runs in a child process: its report then fails
 * this test instead of ending the whole binary. */
typedef struct attach_refuse {
    sl_databus *bus;
    int n;
} attach_refuse;

static int attach_then_refuse(sl_set *set, void *ctx, sl_error *err)
{
    attach_refuse *ar = ctx;
    if (++ar->n == 2)
        return sl_error_set(err, SL_EIO, "refusing %s", set->name);
    return sl_databus_attach(set, ar->bus, err);
}

static void detach_bus(sl_set *set, void *ctx)
{
    sl_databus_detach(set, ((attach_refuse *)ctx)->bus);
}

static void test_sets_open_failure_detaches(void **state)
{
    fx *f = *state;
    sl_set_config c = set_config(2, SL_ACK_BUFFER, 2);
    define(f, "first", &c);
    define(f, "second", &c);
    fx_close(f); /* no writer thread while forking */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sl_databus *bus;
        sl_databus_options bo = {0};
        if (sl_databus_start(&bo, &bus, NULL))
            _exit(2);
        attach_refuse ar = {.bus = bus};
        sl_sets_options so = {
            .data_dir = f->dir, .on_open = attach_then_refuse, .on_close = detach_bus, .ctx = &ar};
        sl_set_config_default(&so.defaults);
        sl_sets *sets = NULL;
        sl_error err = {0};
        int rc = sl_sets_open(&so, &sets, &err);
        if (rc != SL_EIO || ar.n != 2)
            _exit(3);
        /* server/serve.c does exactly this after a failed open. */
        sl_databus_free(bus);
        sl_sets_close(sets);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    fx_open(f);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("bus freed after a failed sl_sets_open: child %s %d (a sanitizer report "
                 "above names the freed set)",
                 WIFEXITED(status) ? "exited with" : "killed by",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_publish_buffer_ack),
        T(test_durable_callback),
        T(test_publish_ack_override),
        T(test_durable_concurrent),
        T(test_same_key_same_partition),
        T(test_murmur2_kafka_compat),
        T(test_lanes_homogeneous_batches),
        T(test_linger_batches),
        T(test_backpressure),
        T(test_wait_room),
        T(test_toobig),
        T(test_stop_drains_and_refuses),
        T(test_on_append),
        T(test_on_append_replaced),
        T(test_failing_disk),
        /* Known failures (see the comments above each): last, so that the
         * tests above always run. */
        T(test_invalid_lane_refused),
        T(test_empty_durable_publish),
        T(test_sets_open_failure_detaches),
        /* The only test publishing null keys: under UBSan, frame_put()'s
         * memcpy(…, NULL, 0) ends the binary here (core/bus/databus.c:177). */
        T(test_null_key_round_robin),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
