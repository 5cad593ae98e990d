/*
 * bench/log_bench.c — the log store (core/log/log.h) against the physical
 * reference, both measured in the same run, in the same temporary directory,
 * on the same disk and file system: appends against plain write() of the same
 * bytes, durable appends against write() + fdatasync() on the same cadence,
 * sequential reads against read() of the same segment files, offset lookups
 * against pread(), and partition recovery against reading the whole
 * partition once. How to read the table: bench/README.md.
 *
 * Environment: SLUICE_BENCH_DIR (default ./build/bench-tmp), SLUICE_BENCH_MB
 * (data for rows 1-4, default 512), SLUICE_BENCH_RECOVERY_MB (default 1024),
 * SLUICE_BENCH_SEGMENT_MB (default 128), SLUICE_BENCH_REPS (default 3).
 *
 * Exits 0 when it measured everything, goals met or not; 1 on any error.
 */
#include "core/log/batch.h"
#include "core/base/crc32c.h"
#include "core/log/log.h"
#include "bench/tsv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define VALUE_BYTES 1024
#define RECS_PER_BATCH 100
#define SYNC_EVERY (1u << 20)
#define RAW_CHUNK (256u << 10)
#define TOUCH_STRIDE 1024 /* raw reads touch one byte per record-sized stride */
#define POOL_BYTES (8u << 20)
#define TS0 1700000000000LL
#define MAX_REPS 9
#define LOOKUP_SECONDS 1.0
#define MIB (1024.0 * 1024.0)

/* ---- small helpers ------------------------------------------------------ */

/* Set by SIGINT/SIGTERM: the benchmark stops after the current run and
 * still removes its directory. */
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A closed pipe on stdout/stderr must not kill us before the cleanup. */
    signal(SIGPIPE, SIG_IGN);
}

static int check_stop(sl_error *err)
{
    return stop_requested ? sl_error_set(err, SL_ECLOSED, "interrupted") : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64: deterministic record contents and lookup positions. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t rand_next(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return mix64(*state);
}

/* Where record number rec takes its value from in the pool. */
static size_t value_off(uint64_t rec)
{
    return (size_t)(mix64(rec) % (POOL_BYTES - VALUE_BYTES));
}

static int write_all(int fd, const uint8_t *p, size_t len, sl_error *err)
{
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return sl_error_errno(err, w < 0 ? errno : EIO, "write");
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* Removes path and everything under it; a missing path is fine. */
static int rm_tree(const char *path, sl_error *err)
{
    if (access(path, F_OK) < 0)
        return 0;
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return sl_error_errno(err, errno, "remove %s", path);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of dir (only "*.log" ones when logs_only), full paths sorted by
 * name, which for segments is offset order. Caller frees with free_list(). */
typedef struct file_list {
    char **paths;
    uint64_t *sizes;
    int *fds; /* -1 unless opened by open_list() */
    size_t n;
    uint64_t total;
} file_list;

static void free_list(file_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->fds && l->fds[i] >= 0)
            close(l->fds[i]);
        free(l->paths[i]);
    }
    free(l->paths);
    free(l->sizes);
    free(l->fds);
    memset(l, 0, sizeof *l);
}

static int list_files(const char *dir, bool logs_only, file_list *l, sl_error *err)
{
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    if (!d)
        return sl_error_errno(err, errno, "open directory %s", dir);
    size_t cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (logs_only && (len < 5 || strcmp(e->d_name + len - 4, ".log"))))
            continue;
        if (l->n == cap) {
            cap = cap ? cap * 2 : 16;
            char **np = realloc(l->paths, cap * sizeof *np);
            if (!np) {
                rc = SL_ENOMEM;
                break;
            }
            l->paths = np;
        }
        size_t plen = strlen(dir) + len + 2;
        if (!(l->paths[l->n] = malloc(plen))) {
            rc = SL_ENOMEM;
            break;
        }
        snprintf(l->paths[l->n], plen, "%s/%s", dir, e->d_name);
        l->n++;
    }
    closedir(d);
    if (!rc && l->n)
        qsort(l->paths, l->n, sizeof *l->paths, cmp_str);
    if (!rc && !(l->sizes = calloc(l->n ? l->n : 1, sizeof *l->sizes)))
        rc = SL_ENOMEM;
    if (!rc && !(l->fds = malloc((l->n ? l->n : 1) * sizeof *l->fds)))
        rc = SL_ENOMEM;
    for (size_t i = 0; !rc && i < l->n; i++) {
        struct stat st;
        l->fds[i] = -1;
        if (stat(l->paths[i], &st) < 0)
            rc = sl_error_errno(err, errno, "stat %s", l->paths[i]);
        else {
            l->sizes[i] = (uint64_t)st.st_size;
            l->total += l->sizes[i];
        }
    }
    if (rc) {
        if (l->fds)
            for (size_t i = 0; i < l->n; i++)
                l->fds[i] = -1;
        free_list(l);
    }
    return rc;
}

static int open_list(file_list *l, sl_error *err)
{
    for (size_t i = 0; i < l->n; i++)
        if ((l->fds[i] = open(l->paths[i], O_RDONLY | O_CLOEXEC)) < 0)
            return sl_error_errno(err, errno, "open %s", l->paths[i]);
    return 0;
}

/* Reads every file of l front to back in RAW_CHUNK read()s; with touch, sums
 * one byte per TOUCH_STRIDE into *sum. *bytes gets the total read. */
static int raw_read_files(const file_list *l, uint8_t *buf, bool touch, uint64_t *bytes,
                          uint64_t *sum, sl_error *err)
{
    uint64_t got = 0, s = 0;
    for (size_t i = 0; i < l->n; i++) {
        int fd = open(l->paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return sl_error_errno(err, errno, "open %s", l->paths[i]);
        for (;;) {
            ssize_t r = read(fd, buf, RAW_CHUNK);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                int e = errno;
                close(fd);
                return sl_error_errno(err, e, "read %s", l->paths[i]);
            }
            if (r == 0)
                break;
            if (touch)
                for (ssize_t k = 0; k < r; k += TOUCH_STRIDE)
                    s += buf[k];
            got += (uint64_t)r;
        }
        close(fd);
    }
    *bytes = got;
    *sum = s;
    return 0;
}

/* Drops dir's files from the page cache (after making them clean), so the
 * next read comes from the disk. Only our own files are touched. */
static int drop_cache(const char *dir, sl_error *err)
{
    file_list l;
    int rc = list_files(dir, false, &l, err);
    if (rc)
        return rc;
    for (size_t i = 0; !rc && i < l.n; i++) {
        int fd = open(l.paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = sl_error_errno(err, errno, "open %s", l.paths[i]);
            break;
        }
        if (fdatasync(fd) < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
            rc = sl_error_errno(err, errno, "drop %s from the page cache", l.paths[i]);
        close(fd);
    }
    free_list(&l);
    return rc;
}

/* Reads all of dir's files once so that they are in the page cache. */
static int warm_cache(const char *dir, uint8_t *buf, sl_error *err)
{
    file_list l;
    uint64_t bytes, sum;
    int rc = list_files(dir, false, &l, err);
    if (rc)
        return rc;
    rc = raw_read_files(&l, buf, false, &bytes, &sum, err);
    free_list(&l);
    return rc;
}

/* Flushes earlier runs' dirty pages outside the timed regions. */
static void settle(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
}

/* ---- samples and the table ------------------------------------------------ */

typedef struct sample {
    double v[MAX_REPS];
    int n;
} sample;

static void sample_add(sample *s, double v)
{
    if (s->n < MAX_REPS)
        s->v[s->n++] = v;
}

static double sample_min(const sample *s)
{
    double m = s->v[0];
    for (int i = 1; i < s->n; i++)
        m = s->v[i] < m ? s->v[i] : m;
    return m;
}

static double sample_max(const sample *s)
{
    double m = s->v[0];
    for (int i = 1; i < s->n; i++)
        m = s->v[i] > m ? s->v[i] : m;
    return m;
}

typedef enum unit { U_MBPS, U_OPS, U_SECONDS } unit;

typedef struct row {
    const char *id;   /* key in the machine-readable line; NULL = not there */
    const char *name; /* one or two lines, split at '\n' */
    unit unit;
    double goal; /* minimum ratio; 0 = none */
    sample sl, raw;
    /* Append rows only: sluice MB/s without the time spent inside the
     * appends that rolled a segment, and that time in the run with most. */
    sample sl_noroll;
    int rolls;
    double roll_secs, roll_run_secs;
} row;

/* The best of the repeats: highest throughput, shortest time. */
static double best(const row *r, const sample *s)
{
    return r->unit == U_SECONDS ? sample_min(s) : sample_max(s);
}

static double ratio(const row *r)
{
    double raw = best(r, &r->raw);
    return raw > 0 ? best(r, &r->sl) / raw : 0;
}

static const char *unit_name(unit u)
{
    switch (u) {
    case U_MBPS:
        return "MB/s";
    case U_OPS:
        return "ops/s";
    case U_SECONDS:
        return "s";
    }
    return "?";
}

static void fmt_value(char *out, size_t size, unit u, double v)
{
    if (u == U_SECONDS)
        snprintf(out, size, "%.3f", v);
    else if (u == U_OPS && v >= 1e6)
        snprintf(out, size, "%.2fM", v / 1e6);
    else
        snprintf(out, size, "%.1f", v);
}

static void fmt_range(char *out, size_t size, unit u, const sample *s)
{
    char a[32], b[32];
    fmt_value(a, sizeof a, u, sample_min(s));
    fmt_value(b, sizeof b, u, sample_max(s));
    snprintf(out, size, "%s..%s", a, b);
}

/* The row for `make bench`'s report (bench/tsv.h): key log.<number>, e.g.
 * log.1a, and the reference of the row's group by its number. */
static void tsv_row(const row *r, const char *name1, const char *name2)
{
    char key[16], figure[160], goal[16] = "";
    const char *ref = "raw";
    int n = (int)strcspn(name1, " ");
    snprintf(key, sizeof key, "log.%.*s", n, name1);
    snprintf(figure, sizeof figure, "%s%s%s", name1, name2[0] ? " " : "",
             name2 + strspn(name2, " "));
    switch (name1[0]) {
    case '1':
    case '2':
        ref = "raw write() of the same batches";
        break;
    case '3':
        ref = "raw read() of the segment files";
        break;
    case '4':
        ref = "1 KiB pread()";
        break;
    case '5':
        ref = "cat of the partition";
        break;
    }
    if (r->goal > 0)
        snprintf(goal, sizeof goal, ">= %.2f", r->goal);
    sl_bench_tsv_row(key, figure, unit_name(r->unit), best(r, &r->sl), ref, best(r, &r->raw),
                     ratio(r), goal, r->goal > 0 ? ratio(r) >= r->goal : SL_BENCH_NO_GOAL);
}

static void print_row(const row *r, double bytes_per_record)
{
    char name1[64], name2[64] = "", sl[32], raw[32], goal[16] = "-", met[8] = "-";
    char nsl[48], nraw[48];
    const char *nl = strchr(r->name, '\n');
    if (nl) {
        snprintf(name1, sizeof name1, "%.*s", (int)(nl - r->name), r->name);
        snprintf(name2, sizeof name2, "%s", nl + 1);
    } else {
        snprintf(name1, sizeof name1, "%s", r->name);
    }
    fmt_value(sl, sizeof sl, r->unit, best(r, &r->sl));
    fmt_value(raw, sizeof raw, r->unit, best(r, &r->raw));
    fmt_range(nsl, sizeof nsl, r->unit, &r->sl);
    fmt_range(nraw, sizeof nraw, r->unit, &r->raw);
    if (r->goal > 0) {
        snprintf(goal, sizeof goal, ">=%.2f", r->goal);
        snprintf(met, sizeof met, "%s", ratio(r) >= r->goal ? "yes" : "MISS");
    }
    printf("%-40s %-5s %10s %10s %6.2f %6s %4s   %-19s %s\n", name1, unit_name(r->unit), sl, raw,
           ratio(r), goal, met, nsl, nraw);
    tsv_row(r, name1, name2);
    if (r->unit == U_MBPS) {
        /* Both sides moved the same bytes, so records/s follows from MB/s. */
        double k = 1e6 / bytes_per_record;
        snprintf(sl, sizeof sl, "%.0fk", best(r, &r->sl) * k / 1e3);
        snprintf(raw, sizeof raw, "%.0fk", best(r, &r->raw) * k / 1e3);
        printf("%-40s %-5s %10s %10s\n", name2, "rec/s", sl, raw);
    } else if (name2[0]) {
        printf("%s\n", name2);
    }
}

/* ---- the data ------------------------------------------------------------ */

typedef struct bench {
    char root[2048];
    char tmp[2100];
    char logdir[2200];
    char rawdir[2200];
    sl_log_config cfg;
    uint64_t want_bytes;
    uint64_t recovery_bytes;
    int reps;
    uint8_t *pool;  /* POOL_BYTES of PRNG bytes the record values come from */
    uint8_t *arena; /* every batch, encoded once */
    sl_batch *batches;
    size_t nbatches;
    size_t batch_len;
    uint64_t total_bytes;
    uint64_t total_records;
    uint64_t value_sum; /* sum of the first byte of every value */
    uint8_t *iobuf;     /* RAW_CHUNK bytes for the raw reads */
    sl_batch_builder builder;
} bench;

/* Builds batch number i (records i*100 .. i*100+99) in B->builder. */
static int build_batch(bench *B, size_t i, sl_batch *out, sl_error *err)
{
    int rc = sl_batch_builder_reset(&B->builder, "");
    uint64_t first = (uint64_t)i * RECS_PER_BATCH;
    for (int k = 0; !rc && k < RECS_PER_BATCH; k++) {
        uint64_t rec = first + (uint64_t)k;
        rc = sl_batch_builder_add(&B->builder, TS0 + (int64_t)rec, NULL, 0,
                                  B->pool + value_off(rec), VALUE_BYTES);
    }
    if (rc)
        return sl_error_set(err, rc, "batch builder: %s", sl_strerror(rc));
    return sl_batch_builder_finish(&B->builder, out, err);
}

/* Fills the value pool and encodes every batch once into the arena. */
static int prepare_data(bench *B, sl_error *err)
{
    if (!(B->pool = malloc(POOL_BYTES)) || !(B->iobuf = malloc(RAW_CHUNK)))
        return SL_ENOMEM;
    uint64_t st = 0x5eed;
    for (size_t i = 0; i < POOL_BYTES; i += 8) {
        uint64_t v = rand_next(&st);
        memcpy(B->pool + i, &v, 8);
    }
    sl_batch_builder_init(&B->builder, SL_CODEC_NONE, 0);
    sl_batch b;
    int rc = build_batch(B, 0, &b, err);
    if (rc)
        return rc;
    /* Every batch has the same size: the deltas are the same in each. */
    B->batch_len = b.len;
    B->nbatches = (size_t)((B->want_bytes + b.len - 1) / b.len);
    B->total_bytes = (uint64_t)B->nbatches * b.len;
    B->total_records = (uint64_t)B->nbatches * RECS_PER_BATCH;
    if (!(B->arena = malloc(B->total_bytes)) ||
        !(B->batches = calloc(B->nbatches, sizeof *B->batches)))
        return SL_ENOMEM;
    for (size_t i = 0; i < B->nbatches; i++) {
        if ((rc = build_batch(B, i, &b, err)))
            return rc;
        if (b.len != B->batch_len)
            return sl_error_set(err, SL_EINVAL, "batch %zu has %zu bytes, expected %zu", i, b.len,
                                B->batch_len);
        B->batches[i] = b;
        B->batches[i].data = B->arena + i * B->batch_len;
        B->batches[i].lane = "";
        memcpy(B->batches[i].data, b.data, b.len);
    }
    for (uint64_t r = 0; r < B->total_records; r++)
        B->value_sum += B->pool[value_off(r)];
    return 0;
}

static void free_data(bench *B)
{
    sl_batch_builder_free(&B->builder);
    free(B->pool);
    free(B->iobuf);
    free(B->arena);
    free(B->batches);
}

/* ---- rows 1 and 2: appends ----------------------------------------------- */

typedef struct append_result {
    double secs;
    double roll_secs; /* sluice: time inside appends that rolled a segment */
    int rolls;
} append_result;

/* Appends every batch to a new log in B->logdir: built from records when
 * build, else the pre-encoded copies; with durable, sl_log_sync() once 1 MiB
 * was appended since the last sync and at the end. The log is left on disk
 * when keep, else removed. */
static int sluice_append(bench *B, bool build, bool durable, bool keep, append_result *res,
                         sl_error *err)
{
    int rc = rm_tree(B->logdir, err);
    if (rc)
        return rc;
    settle(B->tmp);
    sl_log *log;
    sl_log_open_options o = {.create = true};
    if ((rc = sl_log_open(B->logdir, &B->cfg, &o, &log, err)))
        return rc;
    memset(res, 0, sizeof *res);
    size_t segs = 1;
    uint64_t since_sync = 0;
    double t0 = now_s();
    for (size_t i = 0; i < B->nbatches; i++) {
        sl_batch b;
        if (build)
            rc = build_batch(B, i, &b, err);
        else
            b = B->batches[i];
        if (rc)
            break;
        int64_t base;
        double ta = now_s();
        if ((rc = sl_log_append(log, &b, &base, err)))
            break;
        size_t n = sl_log_segment_count(log);
        if (n != segs) {
            res->roll_secs += now_s() - ta;
            res->rolls++;
            segs = n;
        }
        since_sync += b.len;
        if (durable && since_sync >= SYNC_EVERY) {
            if ((rc = sl_log_sync(log, err)))
                break;
            since_sync = 0;
        }
    }
    if (!rc && durable)
        rc = sl_log_sync(log, err);
    res->secs = now_s() - t0;
    if (!rc && (uint64_t)sl_log_end_offset(log) != B->total_records)
        rc = sl_error_set(err, SL_EIO, "log ends at offset %" PRId64 ", expected %" PRIu64,
                          sl_log_end_offset(log), B->total_records);
    sl_log_close(log);
    if (!rc && !keep)
        rc = rm_tree(B->logdir, err);
    return rc;
}

/* Opens raw file number k in B->rawdir for writing. */
static int raw_open(bench *B, int k, int *fd, sl_error *err)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/%020d.raw", B->rawdir, k);
    if ((*fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        return sl_error_errno(err, errno, "open %s", path);
    return 0;
}

/* The physical reference for the appends: write() of the same pre-encoded
 * bytes in the same sizes, starting a new file where the log rolls a
 * segment. With durable: fdatasync() on the same 1 MiB cadence, before
 * leaving a file, and at the end, plus one fsync() of the directory after a
 * file was created (without it the new file is not durable either). */
static int raw_append(bench *B, bool durable, append_result *res, sl_error *err)
{
    int rc = rm_tree(B->rawdir, err);
    if (rc)
        return rc;
    settle(B->tmp);
    if (mkdir(B->rawdir, 0755) < 0)
        return sl_error_errno(err, errno, "mkdir %s", B->rawdir);
    int dfd = open(B->rawdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd = -1, files = 0;
    if (dfd < 0)
        return sl_error_errno(err, errno, "open %s", B->rawdir);
    if ((rc = raw_open(B, files++, &fd, err))) {
        close(dfd);
        return rc;
    }
    memset(res, 0, sizeof *res);
    bool dir_dirty = true;
    uint64_t in_file = 0, since_sync = 0;
    double t0 = now_s();
    for (size_t i = 0; !rc && i < B->nbatches; i++) {
        const sl_batch *b = &B->batches[i];
        if (in_file && in_file + b->len > B->cfg.segment_bytes) {
            if (durable && fdatasync(fd) < 0) {
                rc = sl_error_errno(err, errno, "fdatasync");
                break;
            }
            close(fd);
            if ((rc = raw_open(B, files++, &fd, err)))
                break;
            in_file = 0;
            dir_dirty = true;
        }
        if ((rc = write_all(fd, b->data, b->len, err)))
            break;
        in_file += b->len;
        since_sync += b->len;
        if (durable && since_sync >= SYNC_EVERY) {
            if (fdatasync(fd) < 0 || (dir_dirty && fsync(dfd) < 0))
                rc = sl_error_errno(err, errno, "fdatasync");
            dir_dirty = false;
            since_sync = 0;
        }
    }
    if (!rc && durable && (fdatasync(fd) < 0 || (dir_dirty && fsync(dfd) < 0)))
        rc = sl_error_errno(err, errno, "fdatasync");
    res->secs = now_s() - t0;
    if (fd >= 0)
        close(fd);
    close(dfd);
    int rc2 = rm_tree(B->rawdir, err);
    return rc ? rc : rc2;
}

/* Rows 1 and 2: reps runs of each side, alternating which goes first. Each
 * run deletes what it wrote, so every run starts from the same state (on a
 * VM, writing into memory the guest has not touched for a while is much
 * slower than into memory just freed by a deleted file). */
static int append_row(bench *B, row *r, bool build, bool durable, sl_error *err)
{
    for (int k = 0; k < B->reps; k++) {
        for (int side = 0; side < 2; side++) {
            bool sluice_turn = (side == 0) == (k % 2 == 0);
            append_result res;
            int rc = check_stop(err);
            if (rc)
                return rc;
            if (sluice_turn) {
                rc = sluice_append(B, build, durable, false, &res, err);
                if (!rc && res.roll_secs >= r->roll_secs) {
                    r->rolls = res.rolls;
                    r->roll_secs = res.roll_secs;
                    r->roll_run_secs = res.secs;
                }
                if (!rc)
                    sample_add(&r->sl_noroll,
                               (double)B->total_bytes / (res.secs - res.roll_secs) / 1e6);
            } else {
                rc = raw_append(B, durable, &res, err);
            }
            if (rc)
                return rc;
            sample_add(sluice_turn ? &r->sl : &r->raw, (double)B->total_bytes / res.secs / 1e6);
            fprintf(stderr, "  %-6s %-40.*s %8.3f s\n", sluice_turn ? "sluice" : "raw",
                    (int)strcspn(r->name, "\n"), r->name, res.secs);
        }
    }
    return 0;
}

/* ---- rows 3 and 4: reads ------------------------------------------------- */

/* Reads the whole log with one reader, CRC-checked and decoded, touching the
 * first byte of every value; checks the records and their contents. */
static int sluice_read(bench *B, sl_log *log, double *secs, sl_error *err)
{
    sl_log_reader *r;
    sl_record rec;
    uint64_t n = 0, sum = 0;
    double t0 = now_s();
    int rc = sl_log_reader_open(log, sl_log_start_offset(log), NULL, &r, err);
    if (rc)
        return rc;
    while ((rc = sl_log_reader_next(r, &rec, err)) == 0) {
        sum += rec.value[0];
        n++;
    }
    sl_log_reader_close(r);
    *secs = now_s() - t0;
    if (rc != SL_EEOF)
        return rc;
    if (n != B->total_records || sum != B->value_sum)
        return sl_error_set(err, SL_ECORRUPT,
                            "read %" PRIu64 " records (checksum %" PRIu64 "), expected %" PRIu64
                            " (%" PRIu64 ")",
                            n, sum, B->total_records, B->value_sum);
    return 0;
}

static volatile uint64_t sink; /* keeps the raw side's touching from being optimised out */

static int raw_read(bench *B, const file_list *logs, double *secs, sl_error *err)
{
    uint64_t bytes, sum;
    double t0 = now_s();
    int rc = raw_read_files(logs, B->iobuf, true, &bytes, &sum, err);
    *secs = now_s() - t0;
    sink += sum;
    if (!rc && bytes != B->total_bytes)
        rc = sl_error_set(err, SL_EIO, "read %" PRIu64 " bytes, expected %" PRIu64, bytes,
                          B->total_bytes);
    return rc;
}

/* Random offset lookups for LOOKUP_SECONDS: open a reader at the offset,
 * read one record (checked against what was written), close. */
static int sluice_lookups(bench *B, sl_log *log, double *ops, sl_error *err)
{
    uint64_t st = 7, n = 0;
    int64_t start = sl_log_start_offset(log), span = sl_log_end_offset(log) - start;
    double t0 = now_s(), t;
    do {
        for (int k = 0; k < 64; k++, n++) {
            int64_t off = start + (int64_t)(rand_next(&st) % (uint64_t)span);
            sl_log_reader *r;
            sl_record rec;
            int rc = sl_log_reader_open(log, off, NULL, &r, err);
            if (rc)
                return rc;
            rc = sl_log_reader_next(r, &rec, err);
            /* rec points into the reader: check it before closing. */
            if (!rc && (rec.offset != off || rec.value_len != VALUE_BYTES ||
                        rec.value[0] != B->pool[value_off((uint64_t)off)]))
                rc = sl_error_set(err, SL_ECORRUPT,
                                  "lookup of offset %" PRId64 " returned offset %" PRId64
                                  " or a wrong value",
                                  off, rec.offset);
            sl_log_reader_close(r);
            if (rc)
                return rc;
        }
    } while ((t = now_s() - t0) < LOOKUP_SECONDS);
    *ops = (double)n / t;
    return 0;
}

/* The reference: pread() of 1 KiB at a random byte of the same segment
 * files, kept open as the log keeps its segments open. */
static int raw_lookups(const file_list *logs, double *ops, sl_error *err)
{
    uint64_t st = 7, n = 0, sum = 0;
    uint8_t buf[VALUE_BYTES];
    double t0 = now_s(), t;
    do {
        for (int k = 0; k < 64; k++, n++) {
            uint64_t pos = rand_next(&st) % (logs->total - VALUE_BYTES);
            size_t f = 0;
            while (pos >= logs->sizes[f]) /* a handful of files: a scan is enough */
                pos -= logs->sizes[f++];
            if (pos + VALUE_BYTES > logs->sizes[f])
                pos = logs->sizes[f] - VALUE_BYTES;
            if (pread(logs->fds[f], buf, VALUE_BYTES, (off_t)pos) != VALUE_BYTES)
                return sl_error_errno(err, errno, "pread %s", logs->paths[f]);
            sum += buf[0];
        }
    } while ((t = now_s() - t0) < LOOKUP_SECONDS);
    sink += sum;
    *ops = (double)n / t;
    return 0;
}

/* Rows 3 (rd) and 4 (lk) on the log in B->logdir; either may be NULL. */
static int read_rows(bench *B, row *rd, row *lk, sl_error *err)
{
    file_list logs;
    int rc = list_files(B->logdir, true, &logs, err);
    if (rc)
        return rc;
    sl_log *log = NULL;
    if (logs.total != B->total_bytes) {
        rc = sl_error_set(err, SL_EIO, "segments hold %" PRIu64 " bytes, expected %" PRIu64,
                          logs.total, B->total_bytes);
        goto done;
    }
    if ((rc = open_list(&logs, err)) || (rc = warm_cache(B->logdir, B->iobuf, err)))
        goto done;
    if ((rc = sl_log_open(B->logdir, &B->cfg, NULL, &log, err)))
        goto done;
    for (int k = 0; rd && k < B->reps; k++) {
        for (int side = 0; side < 2; side++) {
            bool sluice_turn = (side == 0) == (k % 2 == 0);
            double secs = 0;
            if ((rc = check_stop(err)))
                goto done;
            rc = sluice_turn ? sluice_read(B, log, &secs, err) : raw_read(B, &logs, &secs, err);
            if (rc)
                goto done;
            sample_add(sluice_turn ? &rd->sl : &rd->raw, (double)B->total_bytes / secs / 1e6);
            fprintf(stderr, "  %-6s %-40s %8.3f s\n", sluice_turn ? "sluice" : "raw",
                    "sequential read", secs);
        }
    }
    for (int k = 0; lk && k < B->reps; k++) {
        for (int side = 0; side < 2; side++) {
            bool sluice_turn = (side == 0) == (k % 2 == 0);
            double ops = 0;
            if ((rc = check_stop(err)))
                goto done;
            rc = sluice_turn ? sluice_lookups(B, log, &ops, err) : raw_lookups(&logs, &ops, err);
            if (rc)
                goto done;
            sample_add(sluice_turn ? &lk->sl : &lk->raw, ops);
            fprintf(stderr, "  %-6s %-40s %8.0f ops/s\n", sluice_turn ? "sluice" : "raw",
                    "random offset lookup", ops);
        }
    }
done:
    sl_log_close(log);
    free_list(&logs);
    return rc;
}

/* ---- row 5: recovery ----------------------------------------------------- */

typedef enum recovery { REC_CLEAN, REC_CRASH, REC_FULL } recovery;

static void count_notes(void *ctx, const char *msg)
{
    (void)msg;
    (*(int *)ctx)++;
}

/* Writes a partition of about B->recovery_bytes (the pre-encoded batches
 * over and over) and closes it cleanly. It is cut to whole segments, so the
 * active segment is full: the worst case for crash recovery. */
static int make_partition(bench *B, uint64_t *records, sl_error *err)
{
    int rc = rm_tree(B->logdir, err);
    if (rc)
        return rc;
    sl_log *log;
    sl_log_open_options o = {.create = true};
    if ((rc = sl_log_open(B->logdir, &B->cfg, &o, &log, err)))
        return rc;
    uint64_t per_seg = B->cfg.segment_bytes / B->batch_len, n = B->recovery_bytes / B->batch_len;
    if (per_seg == 0)
        per_seg = 1;
    if (n > per_seg)
        n -= n % per_seg;
    if (n == 0)
        n = 1;
    for (uint64_t k = 0; !rc && k < n; k++) {
        int64_t base;
        sl_batch b = B->batches[k % B->nbatches];
        rc = sl_log_append(log, &b, &base, err);
    }
    *records = (uint64_t)sl_log_end_offset(log);
    sl_log_close(log);
    return rc;
}

/* Times sl_log_open() of the partition as mode says (after a clean close,
 * after a crash = no .clean marker, or with full_recovery). */
static int sluice_recover(bench *B, recovery mode, bool cold, uint64_t records, double *secs,
                          int *notes, sl_error *err)
{
    char path[2300];
    int rc = cold ? drop_cache(B->logdir, err) : warm_cache(B->logdir, B->iobuf, err);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/.clean", B->logdir);
    if (access(path, F_OK) < 0)
        return sl_error_set(err, SL_EIO, "%s is missing: the last close was not clean", path);
    if (mode == REC_CRASH && unlink(path) < 0)
        return sl_error_errno(err, errno, "remove %s", path);
    sl_log_open_options o = {
        .full_recovery = mode == REC_FULL, .notify = count_notes, .notify_ctx = notes};
    sl_log *log;
    *notes = 0;
    double t0 = now_s();
    rc = sl_log_open(B->logdir, &B->cfg, &o, &log, err);
    *secs = now_s() - t0;
    if (rc)
        return rc;
    if ((uint64_t)sl_log_end_offset(log) != records)
        rc = sl_error_set(err, SL_ECORRUPT, "recovered log ends at %" PRId64 ", expected %" PRIu64,
                          sl_log_end_offset(log), records);
    sl_log_close(log);
    return rc;
}

static int raw_recover(bench *B, bool cold, double *secs, sl_error *err)
{
    file_list logs;
    uint64_t bytes, sum;
    int rc = cold ? drop_cache(B->logdir, err) : warm_cache(B->logdir, B->iobuf, err);
    if (rc || (rc = list_files(B->logdir, true, &logs, err)))
        return rc;
    double t0 = now_s();
    rc = raw_read_files(&logs, B->iobuf, false, &bytes, &sum, err);
    *secs = now_s() - t0;
    free_list(&logs);
    return rc;
}

typedef struct partition_info {
    uint64_t bytes;
    uint64_t active_bytes;
    size_t segments;
    int notes[3]; /* notices from the last open of each kind */
} partition_info;

static int recovery_rows(bench *B, row *rows, partition_info *pi, sl_error *err)
{
    uint64_t records;
    int rc = make_partition(B, &records, err);
    if (rc)
        return rc;
    file_list logs;
    if ((rc = list_files(B->logdir, true, &logs, err)))
        return rc;
    pi->bytes = logs.total;
    pi->segments = logs.n;
    pi->active_bytes = logs.n ? logs.sizes[logs.n - 1] : 0;
    free_list(&logs);
    /* rows: clean cold, crash cold, full cold, then the same warm. */
    for (int i = 0; i < 6; i++) {
        recovery mode = (recovery)(i % 3);
        bool cold = i < 3;
        for (int k = 0; k < B->reps; k++) {
            for (int side = 0; side < 2; side++) {
                bool sluice_turn = (side == 0) == (k % 2 == 0);
                double secs = 0;
                if ((rc = check_stop(err)))
                    return rc;
                if (sluice_turn)
                    rc = sluice_recover(B, mode, cold, records, &secs, &pi->notes[mode], err);
                else
                    rc = raw_recover(B, cold, &secs, err);
                if (rc)
                    return rc;
                sample_add(sluice_turn ? &rows[i].sl : &rows[i].raw, secs);
                fprintf(stderr, "  %-6s %-40s %8.3f s\n", sluice_turn ? "sluice" : "raw",
                        rows[i].name, secs);
            }
        }
    }
    return rm_tree(B->logdir, err);
}

/* ---- setup and the report ------------------------------------------------- */

static int env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi, uint64_t *out,
                   sl_error *err)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return sl_error_set(err, SL_EINVAL, "%s=%s: expected an integer in %" PRIu64 "..%" PRIu64,
                            name, s, lo, hi);
    *out = v;
    return 0;
}

static const char *fs_name(long type)
{
    switch ((unsigned long)type) {
    case 0xEF53:
        return "ext2/3/4";
    case 0x58465342:
        return "xfs";
    case 0x9123683E:
        return "btrfs";
    case 0x01021994:
        return "tmpfs (not a disk: the figures say nothing about storage)";
    case 0x794c7630:
        return "overlayfs";
    case 0x2FC12FC1:
        return "zfs";
    default:
        return "other";
    }
}

static int setup(bench *B, sl_error *err)
{
    uint64_t mb, rec_mb, seg_mb, reps;
    int rc;
    if ((rc = env_u64("SLUICE_BENCH_MB", 512, 1, 1 << 20, &mb, err)) ||
        (rc = env_u64("SLUICE_BENCH_RECOVERY_MB", 1024, 1, 1 << 20, &rec_mb, err)) ||
        (rc = env_u64("SLUICE_BENCH_SEGMENT_MB", 128, 1, 4095, &seg_mb, err)) ||
        (rc = env_u64("SLUICE_BENCH_REPS", 3, 1, MAX_REPS, &reps, err)))
        return rc;
    B->want_bytes = mb << 20;
    B->recovery_bytes = rec_mb << 20;
    B->reps = (int)reps;
    sl_log_config_default(&B->cfg);
    B->cfg.segment_bytes = seg_mb << 20;
    B->cfg.segment_ms = 0; /* rolls by size only, so runs are repeatable */
    B->cfg.retention_ms = -1;

    const char *root = getenv("SLUICE_BENCH_DIR");
    snprintf(B->root, sizeof B->root, "%s", root && *root ? root : "./build/bench-tmp");
    for (char *p = B->root + 1; *p; p++) { /* mkdir -p */
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(B->root, 0755) < 0 && errno != EEXIST)
            rc = sl_error_errno(err, errno, "mkdir %s", B->root);
        *p = '/';
        if (rc)
            return rc;
    }
    if (mkdir(B->root, 0755) < 0 && errno != EEXIST)
        return sl_error_errno(err, errno, "mkdir %s", B->root);
    snprintf(B->tmp, sizeof B->tmp, "%s/log_bench.XXXXXX", B->root);
    if (!mkdtemp(B->tmp)) {
        B->tmp[0] = '\0'; /* nothing of ours to clean up */
        return sl_error_errno(err, errno, "create a temporary directory under %s", B->root);
    }
    snprintf(B->logdir, sizeof B->logdir, "%s/log", B->tmp);
    snprintf(B->rawdir, sizeof B->rawdir, "%s/raw", B->tmp);

    /* Rows 1-4 hold at most the log and the raw copy at once; row 5 the
     * partition alone. Indexes and slack: 64 MiB. */
    uint64_t need = 2 * B->want_bytes > B->recovery_bytes ? 2 * B->want_bytes : B->recovery_bytes;
    need += 64u << 20;
    struct statvfs vs;
    if (statvfs(B->tmp, &vs) < 0)
        return sl_error_errno(err, errno, "statvfs %s", B->tmp);
    uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
    if (avail < need)
        return sl_error_set(err, SL_ENOSPC,
                            "%s has %.0f MiB free, the benchmark needs %.0f MiB "
                            "(set SLUICE_BENCH_MB / SLUICE_BENCH_RECOVERY_MB lower)",
                            B->tmp, (double)avail / MIB, (double)need / MIB);
    return 0;
}

static void print_header(const bench *B)
{
    struct statfs fs;
    struct statvfs vs;
    const char *fsn = statfs(B->tmp, &fs) == 0 ? fs_name(fs.f_type) : "unknown";
    double free_gib =
        statvfs(B->tmp, &vs) == 0 ? (double)vs.f_bavail * (double)vs.f_frsize / (MIB * 1024) : 0;
    printf("log_bench: sluice log store vs the raw file system, measured in the same run\n");
    printf("  dir       %s (%s, %.1f GiB free)\n", B->tmp, fsn, free_gib);
    printf("  data      %.1f MiB = %zu batches x %d records; %d-byte values, null keys; "
           "%zu-byte batches (codec none)\n",
           (double)B->total_bytes / MIB, B->nbatches, RECS_PER_BATCH, VALUE_BYTES, B->batch_len);
    printf("  log       %.0f MiB segments, 4 KiB index interval; crc32c %s\n",
           (double)B->cfg.segment_bytes / MIB,
           sl_crc32c_hw_available() ? "hardware (SSE4.2)" : "software");
    printf("  repeats   best of %d per side, sluice/raw order alternating; noise = min..max "
           "of the %d runs\n\n",
           B->reps, B->reps);
    printf("%-40s %-5s %10s %10s %6s %6s %4s   %-19s %s\n", "row", "unit", "sluice", "raw", "ratio",
           "goal", "met", "noise sluice", "noise raw");
}

/* Which row groups SLUICE_BENCH_ROWS asks for (default: all), so that one
 * row can be run alone under a profiler. */
enum { G_APPEND = 1, G_DURABLE = 2, G_READ = 4, G_LOOKUP = 8, G_RECOVERY = 16 };

static int parse_groups(unsigned *out, sl_error *err)
{
    static const struct {
        const char *name;
        unsigned bit;
    } groups[] = {{"append", G_APPEND},
                  {"durable", G_DURABLE},
                  {"read", G_READ},
                  {"lookup", G_LOOKUP},
                  {"recovery", G_RECOVERY}};
    const char *s = getenv("SLUICE_BENCH_ROWS");
    if (!s || !*s) {
        *out = G_APPEND | G_DURABLE | G_READ | G_LOOKUP | G_RECOVERY;
        return 0;
    }
    *out = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        size_t i = 0;
        for (; i < sizeof groups / sizeof *groups; i++)
            if (strlen(groups[i].name) == len && strncmp(s, groups[i].name, len) == 0)
                break;
        if (i == sizeof groups / sizeof *groups)
            return sl_error_set(err, SL_EINVAL,
                                "SLUICE_BENCH_ROWS: unknown group \"%.*s\" "
                                "(append, durable, read, lookup, recovery)",
                                (int)len, s);
        *out |= groups[i].bit;
        s += len + (s[len] == ',');
    }
    return 0;
}

enum {
    R_APPEND,
    R_APPEND_STORE,
    R_DURABLE,
    R_DURABLE_STORE,
    R_READ,
    R_LOOKUP,
    R_RECOVERY, /* six rows: clean, crash, full; cold then warm */
    R_COUNT = R_RECOVERY + 6
};

static void print_report(const bench *B, const row *rows, const partition_info *pi)
{
    print_header(B);
    double bpr = (double)B->total_bytes / (double)B->total_records;
    for (int i = 0; i < R_COUNT; i++) {
        if (!rows[i].sl.n)
            continue;
        if (i == R_RECOVERY)
            printf("   (rows 5: a partition of %.1f MiB in %zu segments; unit s, lower is "
                   "better; ratio = time sluice / time raw)\n",
                   (double)pi->bytes / MIB, pi->segments);
        print_row(&rows[i], bpr);
    }
    printf("\nnotes\n");
    if (rows[R_APPEND].sl.n || rows[R_DURABLE].sl.n) {
        printf("  1, 2  raw = write() of the identical encoded batches, one call per batch, a "
               "new file where the log rolls a segment;\n"
               "        no sync in 1; in 2 fdatasync on the same 1 MiB cadence, before leaving "
               "a file and at the end, directory fsync\n"
               "        after creating a file. \"no sync\" = no sl_log_sync() calls (a roll "
               "does not sync; the next sl_log_sync() does).\n"
               "        Goal rows: 1b/2b compare the store with raw writes of the same bytes; "
               "1a/2a add sluice's record encoding,\n"
               "        which raw does not do (it writes pre-encoded batches).\n");
        printf("  1, 2  sluice time inside the appends that rolled a segment (seal: trim "
               "indexes, create the next segment),\n"
               "        in the run with the most, and sluice MB/s (best) with that time "
               "taken out:\n");
        for (int i = R_APPEND; i <= R_DURABLE_STORE; i++) {
            const row *r = &rows[i];
            if (!r->sl.n)
                continue;
            double mbps = sample_max(&r->sl_noroll), raw = best(r, &r->raw);
            printf("        %-3.3s %d rolls took %.3f s of %.3f s; without them %.1f MB/s, "
                   "ratio %.2f\n",
                   r->name, r->rolls, r->roll_secs, r->roll_run_secs, mbps,
                   raw > 0 ? mbps / raw : 0);
        }
    }
    if (rows[R_READ].sl.n)
        printf("  3     raw = read() of the log's own segment files in 256 KiB chunks, one "
               "byte summed per 1 KiB; sluice = one\n"
               "        sl_log_reader (lane NULL) from the start offset to SL_EEOF, the "
               "first byte of every value summed. Both\n"
               "        warm: the files were read once before and are in the page cache.\n");
    if (rows[R_LOOKUP].sl.n)
        printf("  4     %.1f s per run, same random sequence on each side; every sluice record "
               "is checked against what was written.\n",
               LOOKUP_SECONDS);
    if (rows[R_RECOVERY].sl.n)
        printf("  5     raw = one sequential read of every .log byte of the partition (cat). "
               "Timed: sl_log_open() alone.\n"
               "        clean: scans from the last index entry; crash (.clean removed): "
               "CRC-checks the active segment, %.1f MiB\n"
               "        here (and any closed segment past the recovery point), rebuilds its "
               "indexes and lane sidecar; full_recovery: every batch of "
               "every segment, all indexes rebuilt.\n"
               "        Cold = the partition's files dropped with posix_fadvise(DONTNEED) "
               "(a VM host cache may still help).\n"
               "        Notices from one open: clean %d, crash %d, full %d.\n",
               (double)pi->active_bytes / MIB, pi->notes[REC_CLEAN], pi->notes[REC_CRASH],
               pi->notes[REC_FULL]);
    printf("\nlog_bench:");
    for (int i = 0; i < R_COUNT; i++)
        if (rows[i].id && rows[i].sl.n)
            printf(" %s=%.2f", rows[i].id, ratio(&rows[i]));
    printf("\n");
}

int main(void)
{
    static bench B;
    static row rows[R_COUNT] = {
        [R_APPEND] = {.id = "append",
                      .unit = U_MBPS,
                      .goal = 0.85,
                      .name = "1a append, build+store, no sync\n"
                              "   (sl_batch_builder + sl_log_append)"},
        [R_APPEND_STORE] = {.id = "append_store",
                            .unit = U_MBPS,
                            .goal = 0.85,
                            .name = "1b append, store only, no sync\n"
                                    "   (pre-built batches, no encoding)"},
        [R_DURABLE] = {.id = "durable",
                       .unit = U_MBPS,
                       .goal = 0.75,
                       .name = "2a durable append, build+store,\n"
                               "   sl_log_sync every 1 MiB"},
        [R_DURABLE_STORE] = {.id = "durable_store",
                             .unit = U_MBPS,
                             .goal = 0.75,
                             .name = "2b durable append, store only,\n"
                                     "   sl_log_sync every 1 MiB"},
        [R_READ] = {.id = "read",
                    .unit = U_MBPS,
                    .goal = 0.8,
                    .name = "3  sequential read, warm page cache\n"
                            "   (CRC-checked, records decoded)"},
        [R_LOOKUP] = {.id = "lookup",
                      .unit = U_OPS,
                      .name = "4  random offset lookup, warm\n"
                              "   (reader open+next+close vs 1 KiB pread)"},
        [R_RECOVERY + 0] = {.id = "recovery_clean",
                            .unit = U_SECONDS,
                            .name = "5a recovery, clean close, cold cache"},
        [R_RECOVERY + 1] = {.id = "recovery_crash",
                            .unit = U_SECONDS,
                            .name = "5b recovery, crash, cold cache"},
        [R_RECOVERY + 2] = {.id = "recovery_full",
                            .unit = U_SECONDS,
                            .name = "5c recovery, full_recovery, cold cache"},
        [R_RECOVERY + 3] = {.unit = U_SECONDS, .name = "5d recovery, clean close, warm cache"},
        [R_RECOVERY + 4] = {.unit = U_SECONDS, .name = "5e recovery, crash, warm cache"},
        [R_RECOVERY + 5] = {.unit = U_SECONDS, .name = "5f recovery, full_recovery, warm cache"},
    };
    sl_error err = {0};
    partition_info pi = {0};
    unsigned groups;
    append_result warmup;
    int rc;

    catch_signals();
    if ((rc = parse_groups(&groups, &err)) || (rc = setup(&B, &err)) ||
        (rc = prepare_data(&B, &err)))
        goto fail;
    fprintf(stderr, "log_bench: working in %s\n", B.tmp);
    if (groups & (G_APPEND | G_DURABLE)) {
        /* One untimed pair first: the first runs pay for faulting in buffers. */
        if ((rc = sluice_append(&B, true, false, false, &warmup, &err)) ||
            (rc = raw_append(&B, false, &warmup, &err)))
            goto fail;
    }
    if (groups & G_APPEND) {
        if ((rc = append_row(&B, &rows[R_APPEND], true, false, &err)) ||
            (rc = append_row(&B, &rows[R_APPEND_STORE], false, false, &err)))
            goto fail;
    }
    if (groups & (G_READ | G_LOOKUP)) {
        /* Rows 3-4 read a log written now, untimed, the way 1b writes it. */
        if ((rc = sluice_append(&B, false, false, true, &warmup, &err)))
            goto fail;
        if ((rc = read_rows(&B, groups & G_READ ? &rows[R_READ] : NULL,
                            groups & G_LOOKUP ? &rows[R_LOOKUP] : NULL, &err)) ||
            (rc = rm_tree(B.logdir, &err)))
            goto fail;
    }
    if (groups & G_DURABLE) {
        if ((rc = append_row(&B, &rows[R_DURABLE], true, true, &err)) ||
            (rc = append_row(&B, &rows[R_DURABLE_STORE], false, true, &err)))
            goto fail;
    }
    if ((groups & G_RECOVERY) && (rc = recovery_rows(&B, &rows[R_RECOVERY], &pi, &err)))
        goto fail;
    print_report(&B, rows, &pi);
    fflush(stdout);
    free_data(&B);
    return rm_tree(B.tmp, &err) ? 1 : 0;
fail:
    if (stop_requested)
        fprintf(stderr, "log_bench: interrupted\n");
    else
        fprintf(stderr, "log_bench: %s%s%s\n", sl_strerror(rc), err.msg[0] ? ": " : "", err.msg);
    if (B.tmp[0])
        rm_tree(B.tmp, NULL);
    free_data(&B);
    return 1;
}
