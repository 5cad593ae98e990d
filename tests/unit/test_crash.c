/*
 * tests/unit/test_crash.c — kill -9 while appending. A child process appends
 * batches of varied sizes, codecs and lanes to a log with small segments,
 * syncs every few batches and reports each synced end offset through a pipe;
 * the parent kills it after a random delay, reopens the log (the crash path:
 * no .clean marker), and checks that every synced record survived byte for
 * byte, that nothing after the recovered end is half there, and that
 * sl_log_verify() finds the log clean. The next child continues from the
 * recovered end. A second run also cuts the unsynced tail of the active
 * segment after the kill, as a lost page cache would.
 *
 * Records are deterministic: record o has value tu_value(o) of value_size(o)
 * bytes, key "k<o % 7>", and timestamp ts_base + o where ts_base grows with
 * each child, so the parent can check any record without keeping copies.
 * SLUICE_SOAK=1 runs ten times as many cycles.
 */
#include "testutil.h"

#include "core/log/log_internal.h"
#include "core/base/varint.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEG_BYTES (256u << 10)
#define TS0 1700000000000LL
#define CYCLE_TS_STEP 100000000LL /* each child's timestamps start this much later */
#define MAX_VALUE 1200
#define MAX_CYCLES 400
#define RETAIN_BYTES (6 << 20) /* the parent trims the log to about this */

static const char *const lanes[] = {"", "a", "b"};

/* ---- deterministic records ------------------------------------------------ */

static size_t value_size(int64_t off)
{
    return 8 + (size_t)(((uint64_t)off * 2654435761u) >> 7) % MAX_VALUE;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the child ------------------------------------------------------------ */

/* Exit codes of a child that failed on its own (it is normally killed). */
enum {
    CHILD_OPEN = 10,
    CHILD_START,
    CHILD_BUILD,
    CHILD_APPEND,
    CHILD_OFFSET,
    CHILD_SYNC,
    CHILD_PIPE,
    CHILD_TIMEOUT,
};

static void child_fail(int code, const char *what, const sl_error *err) __attribute__((noreturn));
static void child_fail(int code, const char *what, const sl_error *err)
{
    fprintf(stderr, "crash child: %s: %s\n", what, err && err->msg[0] ? err->msg : "-");
    _exit(code);
}

/* Appends until killed. Uses no cmocka call: a failed assert would longjmp
 * into the parent's copy of cmocka's state; a failure is an exit code (and a
 * line on stderr). */
static void child_main(const char *dir, int64_t start, int64_t ts_base, uint64_t seed, int wfd)
    __attribute__((noreturn));
static void child_main(const char *dir, int64_t start, int64_t ts_base, uint64_t seed, int wfd)
{
    sl_log_config cfg = tu_config(SEG_BYTES);
    sl_log_open_options o = {.create = true};
    sl_log *log;
    sl_error err = {0};
    if (sl_log_open(dir, &cfg, &o, &log, &err))
        child_fail(CHILD_OPEN, "open", &err);
    int64_t off = sl_log_end_offset(log);
    if (off != start) {
        snprintf(err.msg, sizeof err.msg, "end offset %" PRId64 ", the parent saw %" PRId64, off,
                 start);
        child_fail(CHILD_START, "reopen", &err);
    }
    sl_batch_builder b[2];
    sl_batch_builder_init(&b[0], SL_CODEC_NONE, 0);
    sl_batch_builder_init(&b[1], SL_CODEC_ZSTD, 0);
    char *v = malloc(MAX_VALUE + 128);
    if (!v)
        child_fail(CHILD_BUILD, "malloc", NULL);
    int64_t t_end = now_ms() + 20000; /* the parent kills long before */
    int since_sync = 0, sync_every = 1;
    while (now_ms() < t_end) {
        uint64_t r = rng_next(&seed);
        int n = r % 16 == 0 ? 60 + (int)((r >> 8) % 140) : 1 + (int)((r >> 8) % 24);
        sl_batch_builder *bb = &b[(r >> 20) % 3 == 0];
        const char *lane = lanes[(r >> 24) % 5 < 3 ? 0 : 1 + (r >> 28) % 2];
        if (sl_batch_builder_reset(bb, lane))
            child_fail(CHILD_BUILD, "builder_reset", NULL);
        for (int k = 0; k < n; k++) {
            int64_t i = off + k;
            size_t len = tu_value(v, value_size(i), i);
            char key[32];
            int kl = snprintf(key, sizeof key, "k%lld", (long long)(i % 7));
            if (sl_batch_builder_add(bb, ts_base + i, key, (size_t)kl, v, len))
                child_fail(CHILD_BUILD, "builder_add", NULL);
        }
        sl_batch batch;
        if (sl_batch_builder_finish(bb, &batch, &err))
            child_fail(CHILD_BUILD, "builder_finish", &err);
        int64_t base = -1;
        if (sl_log_append(log, &batch, &base, &err))
            child_fail(CHILD_APPEND, "append", &err);
        if (base != off)
            child_fail(CHILD_OFFSET, "append returned another base offset", NULL);
        off += n;
        if (++since_sync >= sync_every) {
            if (sl_log_sync(log, &err))
                child_fail(CHILD_SYNC, "sync", &err);
            if (write(wfd, &off, sizeof off) != (ssize_t)sizeof off)
                child_fail(CHILD_PIPE, "write to the parent", NULL);
            since_sync = 0;
            sync_every = 1 + (int)(rng_next(&seed) % 4);
        }
        /* Keeps the log to a size the parent can re-read every cycle. */
        usleep(300);
    }
    child_fail(CHILD_TIMEOUT, "not killed within 20 s", NULL);
}

/* ---- an independent look at the companions -------------------------------- */

/* ---- the parent ----------------------------------------------------------- */

/* Which child wrote which offsets: [starts[i], starts[i + 1]) used ts_bases[i]. */
typedef struct history {
    int64_t starts[MAX_CYCLES + 1];
    int64_t ts_bases[MAX_CYCLES + 1];
    int n;
} history;

static int64_t expected_ts(const history *h, int64_t off)
{
    int i = h->n - 1;
    while (i > 0 && h->starts[i] > off)
        i--;
    return h->ts_bases[i] + off;
}

typedef struct notes {
    int n;
    char last[1024];
} notes;

static void on_notify(void *ctx, const char *msg)
{
    notes *nt = ctx;
    nt->n++;
    snprintf(nt->last, sizeof nt->last, "%s", msg);
}

/* Reads every record from the log's start (lane filter: NULL = all) and
 * checks each one; returns how many there were. */
static int64_t check_records(sl_log *log, const char *lane, const history *h, int cycle)
{
    int64_t start = sl_log_start_offset(log), end = sl_log_end_offset(log);
    sl_log_reader *r;
    sl_error err = {0};
    if (sl_log_reader_open(log, start, lane, &r, &err))
        fail_msg("cycle %d: reader_open: %s", cycle, err.msg);
    char *v = malloc(MAX_VALUE + 128);
    assert_non_null(v);
    int64_t n = 0, prev = start - 1;
    sl_record rec;
    int rc;
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
        if (lane ? rec.offset <= prev : rec.offset != prev + 1)
            fail_msg("cycle %d: offset %" PRId64 " after %" PRId64, cycle, rec.offset, prev);
        prev = rec.offset;
        size_t len = tu_value(v, value_size(rec.offset), rec.offset);
        if (rec.value_len != len || memcmp(rec.value, v, len) != 0)
            fail_msg("cycle %d: record %" PRId64 " has a wrong value (%zu bytes, expected %zu)",
                     cycle, rec.offset, rec.value_len, len);
        if (rec.timestamp != expected_ts(h, rec.offset))
            fail_msg("cycle %d: record %" PRId64 " has timestamp %" PRId64 ", expected %" PRId64,
                     cycle, rec.offset, rec.timestamp, expected_ts(h, rec.offset));
        char key[32];
        int kl = snprintf(key, sizeof key, "k%lld", (long long)(rec.offset % 7));
        if (rec.key_len != (size_t)kl || memcmp(rec.key, key, (size_t)kl) != 0)
            fail_msg("cycle %d: record %" PRId64 " has a wrong key", cycle, rec.offset);
        if (lane && (rec.lane_len != strlen(lane) || memcmp(rec.lane, lane, rec.lane_len)))
            fail_msg("cycle %d: record %" PRId64 " of another lane in a \"%s\" read", cycle,
                     rec.offset, lane);
        n++;
    }
    if (rc != SL_EEOF)
        fail_msg("cycle %d: reading after offset %" PRId64 ": %s (%s)", cycle, prev, err.msg,
                 sl_strerror(rc));
    if (!lane && prev != end - 1)
        fail_msg("cycle %d: last record %" PRId64 ", end offset %" PRId64, cycle, prev, end);
    free(v);
    sl_log_reader_close(r);
    return n;
}

/* Position in the active .log right after the batch ending at offset synced
 * (0 when the active segment starts at or after it). */
static uint64_t synced_size(const char *path, int64_t synced, uint64_t size, uint64_t *boundaries,
                            size_t *nb, size_t max_nb)
{
    *nb = 0;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint64_t pos = 0, at = 0;
    uint8_t h[SL_BATCH_HEADER_SIZE];
    while (pos + sizeof h <= size && fseeko(f, (off_t)pos, SEEK_SET) == 0 &&
           fread(h, 1, sizeof h, f) == sizeof h) {
        sl_batch_info in;
        if (sl_batch_header(h, sizeof h, &in, NULL) || pos + sl_batch_size(&in) > size)
            break;
        pos += sl_batch_size(&in);
        if (in.base_offset + in.last_offset_delta + 1 <= synced)
            at = pos;
        else if (*nb < max_nb)
            boundaries[(*nb)++] = pos; /* unsynced batch ends: tear points */
    }
    fclose(f);
    return at;
}

/* Cuts the active .log somewhere past its synced part, as if the page cache
 * holding the unsynced bytes had been lost: a few bytes, a random amount, or
 * exactly at a batch boundary. */
static void tear_tail(const char *dir, int64_t synced, uint64_t *rng)
{
    int64_t *bases;
    size_t n;
    sl_error err = {0};
    assert_int_equal(sl__log_list_bases(dir, &bases, &n, &err), 0);
    if (n == 0) {
        free(bases);
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%020" PRId64 ".log", dir, bases[n - 1]);
    uint64_t size = (uint64_t)tu_file_size(path);
    uint64_t ends[4096];
    size_t nb;
    uint64_t keep = synced_size(path, synced, size, ends, &nb, 4096);
    free(bases);
    if (size <= keep)
        return;
    uint64_t r = rng_next(rng), to;
    switch (r % 3) {
    case 0: /* a few bytes */
        to = size - 1 - (r >> 8) % 64;
        break;
    case 1: /* anywhere in the unsynced part */
        to = keep + (r >> 8) % (size - keep);
        break;
    default: /* on a batch boundary past the synced part */
        to = nb ? ends[(r >> 8) % nb] : keep;
        break;
    }
    if (to < keep)
        to = keep;
    assert_int_equal(truncate(path, (off_t)to), 0);
}

static void crash_cycles(bool tear, uint64_t seed)
{
    int cycles = getenv("SLUICE_SOAK") ? 200 : 20;
    char *dir = tu_tmpdir();
    sl_log_config cfg = tu_config(SEG_BYTES);
    cfg.retention_bytes = RETAIN_BYTES; /* applied by the parent only */
    history *h = calloc(1, sizeof *h);
    assert_non_null(h);
    uint64_t rng = seed;
    int64_t start = 0, end = 0, total_synced = 0;
    int killed_mid_write = 0;

    for (int c = 0; c < cycles; c++) {
        h->starts[h->n] = end;
        h->ts_bases[h->n] = TS0 + (int64_t)c * CYCLE_TS_STEP;
        h->n++;
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child_main(dir, end, h->ts_bases[h->n - 1], seed + (uint64_t)c * 7919 + 1, fds[1]);
        }
        close(fds[1]);

        /* Collect synced offsets until the kill; everything below end was
         * made durable by the parent's close in the previous cycle. */
        int64_t synced = end, delay = 5 + (int64_t)(rng_next(&rng) % 76);
        int64_t deadline = now_ms() + delay;
        uint8_t buf[8192];
        size_t have = 0;
        bool eof = false;
        for (;;) {
            int64_t left = deadline - now_ms();
            if (left <= 0)
                break;
            struct pollfd p = {.fd = fds[0], .events = POLLIN};
            int pr = poll(&p, 1, (int)left);
            if (pr < 0 && errno == EINTR)
                continue;
            if (pr <= 0)
                break;
            ssize_t got = read(fds[0], buf + have, sizeof buf - have);
            if (got <= 0) {
                eof = true;
                break;
            }
            have += (size_t)got;
            size_t whole = have / 8 * 8;
            if (whole) {
                int64_t last;
                memcpy(&last, buf + whole - 8, 8);
                assert_true(last >= synced);
                synced = last;
                memmove(buf, buf + whole, have - whole);
                have -= whole;
            }
        }
        kill(pid, SIGKILL);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        for (ssize_t got; !eof && (got = read(fds[0], buf + have, sizeof buf - have)) > 0;) {
            have += (size_t)got;
            size_t whole = have / 8 * 8;
            if (whole) {
                int64_t last;
                memcpy(&last, buf + whole - 8, 8);
                synced = last;
                memmove(buf, buf + whole, have - whole);
                have -= whole;
            }
        }
        close(fds[0]);
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
            fail_msg("cycle %d: the child ended by itself (exit code %d)", c,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        if (synced > end)
            killed_mid_write++;
        total_synced += synced - end;
        if (tear)
            tear_tail(dir, synced, &rng);

        /* Reopen: the crash path, and every fifth time full recovery. */
        notes nt;
        memset(&nt, 0, sizeof nt);
        sl_log_open_options o = {
            .full_recovery = c % 5 == 4, .notify = on_notify, .notify_ctx = &nt};
        sl_log *log;
        sl_error err = {0};
        if (sl_log_open(dir, &cfg, &o, &log, &err))
            fail_msg("cycle %d: reopen after the kill: %s", c, err.msg);
        int64_t e = sl_log_end_offset(log);
        if (e < synced)
            fail_msg("cycle %d: end offset %" PRId64 " after recovery, but %" PRId64
                     " was synced (last repair: %s)",
                     c, e, synced, nt.n ? nt.last : "none");
        if (sl_log_start_offset(log) != start)
            fail_msg("cycle %d: start offset %" PRId64 " after recovery, expected %" PRId64, c,
                     sl_log_start_offset(log), start);
        assert_int_equal(check_records(log, NULL, h, c), e - start);
        int64_t by_lane = 0;
        for (size_t l = 0; l < sizeof lanes / sizeof *lanes; l++)
            by_lane += check_records(log, lanes[l], h, c);
        assert_int_equal(by_lane, e - start);
        /* Time lookups find the first record at or after a timestamp. */
        for (int k = 0; k < 20 && e > start; k++) {
            int64_t off = start + (int64_t)(rng_next(&rng) % (uint64_t)(e - start)), got = -1;
            assert_int_equal(sl_log_offset_for_time(log, expected_ts(h, off), &got, &err), 0);
            if (got != off)
                fail_msg("cycle %d: offset_for_time(ts of %" PRId64 ") = %" PRId64, c, off, got);
        }
        /* Keep the log small enough to re-read every cycle; the next
         * recovery then starts from a later first segment. */
        int deleted = 0;
        assert_int_equal(sl_log_retain(log, TS0, &deleted, &err), 0);
        int64_t new_start = sl_log_start_offset(log);
        sl_log_close(log);

        sl_log_verify_report rep;
        if (sl_log_verify(dir, &rep, &err))
            fail_msg("cycle %d: verify: %s", c, err.msg);
        if (rep.damaged)
            fail_msg("cycle %d: verify after recovery: %s", c, rep.where);
        assert_int_equal(rep.next_offset, e);
        assert_int_equal(rep.records, (uint64_t)(e - new_start));
        assert_int_equal(rep.first_offset, new_start);
        char when[64];
        snprintf(when, sizeof when, "cycle %d", c);
        tu_check_companions(dir, when);

        /* Drop what a child wrote past the recovered end from the history. */
        h->starts[h->n] = e;
        end = e;
        start = new_start;
    }
    print_message("%d cycles, %d killed after syncing, %" PRId64 " records synced, log [%" PRId64
                  ", %" PRId64 ")\n",
                  cycles, killed_mid_write, total_synced, start, end);
    /* The kills must have landed while children were writing. */
    assert_true(killed_mid_write >= cycles / 4);
    free(h);
    tu_rmdir(dir);
}

static void test_crash_kill(void **state)
{
    (void)state;
    crash_cycles(false, 0x243F6A8885A308D3ull);
}

static void test_crash_kill_lost_tail(void **state)
{
    (void)state;
    crash_cycles(true, 0x13198A2E03707344ull);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crash_kill),
        cmocka_unit_test(test_crash_kill_lost_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
