/*
 * cli/cli_log.c — `sluice log …`: operator tools that work directly on a
 * partition directory: append, dump, verify, recover.
 */
#include "cli/cli.h"
#include "core/base/lane_name.h"
#include "core/base/clock.h"
#include "core/log/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define APPEND_BATCH_RECORDS 1000
#define APPEND_BATCH_BYTES (1u << 20)

static const char log_usage[] =
    "usage:\n"
    "  sluice log append PARTITION_DIR [--compression zstd|none] [--sync] [--lane L]\n"
    "                    [--segment-bytes N]\n"
    "      each stdin line becomes one record's value; lines are batched (up to 1000\n"
    "      records or 1 MiB per batch); prints the last offset. --sync fdatasyncs at the end.\n"
    "  sluice log dump PARTITION_DIR [--from OFFSET] [--max N] [--lane L|*]\n"
    "      prints each batch header and its records (default: every lane).\n"
    "  sluice log verify PARTITION_DIR\n"
    "      reads everything without changing it; exit 1 naming the first damaged byte.\n"
    "  sluice log recover PARTITION_DIR\n"
    "      CRC-checks every batch, truncates at the first bad one, rebuilds indexes.\n";

static const sl_cli_usage k_usage = {"log", log_usage, false};

static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static void print_notice(void *ctx, const char *msg)
{
    fprintf((FILE *)ctx, "%s\n", msg);
}

/* A running server parks idle partitions, which releases their own .lock:
 * the data directory's .lock (DATA/.lock, for DATA/sets/SET/PARTITION) is
 * what says the partition is in use. It is taken shared for the life of the
 * command, so a server cannot start meanwhile either. Returns 0, or -1 after
 * saying why. */
static int lock_data_dir(const char *dir)
{
    char real[PATH_MAX], data[PATH_MAX + 16], path[PATH_MAX + 32];
    if (!realpath(dir, real))
        return 0; /* a partition yet to be created: sl_log_open() says the rest */
    char *cut = real + strlen(real);
    for (int up = 0; up < 3; up++) { /* PARTITION, SET, "sets" */
        while (cut > real && cut[-1] != '/')
            cut--;
        if (cut == real)
            return 0;
        if (up == 2 && strcmp(cut, "sets") != 0)
            return 0; /* not inside a data directory */
        *--cut = '\0';
    }
    snprintf(data, sizeof data, "%s", real[0] ? real : "/");
    snprintf(path, sizeof path, "%s/.lock", real);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0; /* no server ever held it */
    if (flock(fd, LOCK_SH | LOCK_NB) == 0)
        return 0; /* held (fd left open) until the command exits */
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK)
        return 0;
    fprintf(stderr,
            "sluice log: %s is a partition of data directory %s, which a running server "
            "holds (%s is locked): stop `sluice serve` first (or read the set over HTTP)\n",
            dir, data, path);
    return -1;
}

static int open_log(const char *dir, const sl_log_config *cfg, bool create, bool full, sl_log **log)
{
    if (lock_data_dir(dir))
        return SL_EEXIST;
    sl_log_open_options o = {.create = create,
                             .full_recovery = full,
                             .notify = print_notice,
                             .notify_ctx = full ? stdout : stderr};
    sl_error err = {0};
    int rc = sl_log_open(dir, cfg, &o, log, &err);
    if (rc)
        fprintf(stderr, "sluice log: %s\n", err.msg[0] ? err.msg : sl_strerror(rc));
    return rc;
}

static int flush_batch(sl_log *log, sl_batch_builder *b, int64_t *last)
{
    if (b->count == 0)
        return 0;
    sl_batch batch;
    sl_error err = {0};
    int64_t base;
    int rc = sl_batch_builder_finish(b, &batch, &err);
    if (!rc)
        rc = sl_log_append(log, &batch, &base, &err);
    if (rc) {
        fprintf(stderr, "sluice log append: %s\n", err.msg[0] ? err.msg : sl_strerror(rc));
        return rc;
    }
    *last = base + batch.count - 1;
    return sl_batch_builder_reset(b, b->lane);
}

static int cmd_append(const char *dir, int argc, char **argv)
{
    sl_codec codec = SL_CODEC_NONE;
    bool sync = false;
    const char *lane = "";
    sl_log_config cfg;
    sl_log_config_default(&cfg);
    for (int i = 0; i < argc; i++) {
        int64_t v;
        if (strcmp(argv[i], "--sync") == 0) {
            sync = true;
        } else if (strcmp(argv[i], "--compression") == 0 && i + 1 < argc) {
            if (sl_codec_parse(argv[++i], &codec))
                return sl_cli_usage_error(&k_usage, "unknown compression \"%s\" (none or zstd)",
                                          argv[i]);
        } else if (strcmp(argv[i], "--lane") == 0 && i + 1 < argc) {
            lane = argv[++i];
            if (!sl_lane_valid(lane, strlen(lane)))
                return sl_cli_usage_error(&k_usage, "invalid lane \"%s\" (want [a-z0-9-]{1,32})",
                                          lane);
        } else if (strcmp(argv[i], "--segment-bytes") == 0 && i + 1 < argc) {
            if (parse_i64(argv[++i], &v) || v < 1024 || v > UINT32_MAX)
                return sl_cli_usage_error(&k_usage, "--segment-bytes %s: want 1024..4294967295",
                                          argv[i]);
            cfg.segment_bytes = (uint64_t)v;
        } else {
            return sl_cli_usage_error(&k_usage, "unknown append option \"%s\"", argv[i]);
        }
    }
    sl_log *log;
    if (open_log(dir, &cfg, true, false, &log))
        return 1;
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 0);
    sl_batch_builder_reset(&b, lane);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t last = -1, lines = 0;
    int rc = 0;
    while (!rc && (n = getline(&line, &cap, stdin)) >= 0) {
        if (n && line[n - 1] == '\n')
            n--;
        lines++;
        rc = sl_batch_builder_add(&b, sl_clock_now_ms(), NULL, 0, line, (size_t)n);
        if (rc == SL_ETOOBIG && b.count) { /* the line does not fit this batch: next one */
            if (!(rc = flush_batch(log, &b, &last)))
                rc = sl_batch_builder_add(&b, sl_clock_now_ms(), NULL, 0, line, (size_t)n);
        }
        if (rc == SL_ETOOBIG)
            fprintf(stderr, "sluice log append: line %" PRId64 " is too long for a batch\n", lines);
        if (!rc &&
            (b.count >= APPEND_BATCH_RECORDS || sl_batch_builder_bytes(&b) >= APPEND_BATCH_BYTES))
            rc = flush_batch(log, &b, &last);
    }
    if (!rc)
        rc = flush_batch(log, &b, &last);
    sl_error err = {0};
    if (!rc && sync && (rc = sl_log_sync(log, &err)))
        fprintf(stderr, "sluice log append: %s\n", err.msg);
    free(line);
    sl_batch_builder_free(&b);
    sl_log_close(log);
    if (rc)
        return 1;
    printf("%" PRId64 "\n", last);
    return 0;
}

/* Prints bytes as JSON-ish text: printable ASCII as is, the rest escaped. */
static void print_bytes(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f)
            putchar(p[i]);
        else
            printf("\\x%02x", p[i]);
    }
}

static int cmd_dump(const char *dir, int argc, char **argv)
{
    int64_t from = -1, max = INT64_MAX;
    const char *lane = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--from") == 0 && i + 1 < argc) {
            if (parse_i64(argv[++i], &from) || from < 0)
                return sl_cli_usage_error(&k_usage, "--from %s: want an offset", argv[i]);
        } else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc) {
            if (parse_i64(argv[++i], &max) || max < 0)
                return sl_cli_usage_error(&k_usage, "--max %s: want a count", argv[i]);
        } else if (strcmp(argv[i], "--lane") == 0 && i + 1 < argc) {
            lane = strcmp(argv[++i], "*") == 0 ? NULL : argv[i];
        } else {
            return sl_cli_usage_error(&k_usage, "unknown dump option \"%s\"", argv[i]);
        }
    }
    sl_log_config cfg;
    sl_log_config_default(&cfg);
    sl_log *log;
    if (open_log(dir, &cfg, false, false, &log))
        return 1;
    int64_t start = sl_log_start_offset(log), end = sl_log_end_offset(log);
    if (from < 0)
        from = start;
    printf("partition %s: offsets %" PRId64 "..%" PRId64 ", %zu segments, %" PRIu64 " bytes\n", dir,
           start, end, sl_log_segment_count(log), sl_log_size_bytes(log));
    sl_log_reader *r;
    sl_error err = {0};
    int rc = sl_log_reader_open(log, from, lane, &r, &err);
    int64_t shown = 0, batch = -1;
    sl_record rec;
    while (!rc && shown < max && !(rc = sl_log_reader_next(r, &rec, &err))) {
        const sl_batch_info *in = sl_log_reader_batch(r);
        if (in->base_offset != batch) {
            batch = in->base_offset;
            printf("batch offsets=%" PRId64 "..%" PRId64 " records=%d bytes=%zu codec=%s "
                   "crc=%08x max_ts=%" PRId64 "\n",
                   in->base_offset, in->base_offset + in->last_offset_delta, in->count,
                   sl_batch_size(in), sl_codec_name((sl_codec)(in->attributes & 7)), in->crc,
                   in->max_ts);
        }
        printf("  offset=%" PRId64 " ts=%" PRId64, rec.offset, rec.timestamp);
        if (rec.lane_len) {
            printf(" lane=");
            print_bytes((const uint8_t *)rec.lane, rec.lane_len);
        }
        if (rec.key) {
            printf(" key=");
            print_bytes(rec.key, rec.key_len);
        }
        printf(" value=");
        print_bytes(rec.value, rec.value_len);
        putchar('\n');
        shown++;
    }
    if (rc == SL_EEOF || shown == max)
        rc = 0;
    if (rc)
        fprintf(stderr, "sluice log dump: %s\n", err.msg[0] ? err.msg : sl_strerror(rc));
    sl_log_reader_close(r);
    sl_log_close(log);
    return rc ? 1 : 0;
}

static int cmd_verify(const char *dir)
{
    sl_log_verify_report rep;
    sl_error err = {0};
    int rc = sl_log_verify(dir, &rep, &err);
    if (rc) {
        fprintf(stderr, "sluice log verify: %s\n", err.msg[0] ? err.msg : sl_strerror(rc));
        return 1;
    }
    printf("%zu segments, %" PRIu64 " batches, %" PRIu64 " records, %" PRIu64
           " bytes, offsets %" PRId64 "..%" PRId64 "\n",
           rep.segments, rep.batches, rep.records, rep.bytes, rep.first_offset, rep.next_offset);
    if (rep.damaged) {
        printf("damaged: %s\n", rep.where);
        return 1;
    }
    printf("ok\n");
    return 0;
}

static int cmd_recover(const char *dir)
{
    sl_log_config cfg;
    sl_log_config_default(&cfg);
    sl_log *log;
    if (open_log(dir, &cfg, false, true, &log))
        return 1;
    printf("recovered %s: offsets %" PRId64 "..%" PRId64 ", %zu segments\n", dir,
           sl_log_start_offset(log), sl_log_end_offset(log), sl_log_segment_count(log));
    sl_log_close(log);
    return 0;
}

int sl_cli_log_main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(log_usage, stdout);
        return 0;
    }
    if (argc < 3)
        return sl_cli_usage_error(&k_usage, "missing command or partition directory");
    const char *cmd = argv[1], *dir = argv[2];
    if (strcmp(cmd, "append") == 0)
        return cmd_append(dir, argc - 3, argv + 3);
    if (strcmp(cmd, "dump") == 0)
        return cmd_dump(dir, argc - 3, argv + 3);
    if (argc > 3)
        return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", argv[3]);
    if (strcmp(cmd, "verify") == 0)
        return cmd_verify(dir);
    if (strcmp(cmd, "recover") == 0)
        return cmd_recover(dir);
    return sl_cli_usage_error(&k_usage, "unknown command \"%s\"", cmd);
}
