/*
 * tests/fuzz/mkseeds.c — writes the binary seed inputs of the batch and log
 * harnesses with the real writer (sl_batch_builder, sl_log_append), so the
 * seeds are what sluice stores. Not part of any build target; run by hand:
 *
 *   cc -D_GNU_SOURCE -I. -o build/fuzz/mkseeds tests/fuzz/mkseeds.c \
 *      build/rel/libsluice-core.a $(pkg-config --libs libzstd lua5.4 jansson ...)
 *   build/fuzz/mkseeds tests/fuzz/corpus
 */
#include "core/log/batch.h"
#include "core/log/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *out_dir;

static void put(const char *sub, const char *name, const void *p, size_t n, unsigned char flags,
                bool with_flags)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", out_dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (with_flags)
        fputc(flags, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

static void event(char *buf, size_t cap, int i)
{
    snprintf(buf, cap,
             "{\"specversion\":\"1.0\",\"id\":\"e%d\",\"source\":\"/shop\",\"type\":\"order."
             "created\",\"time\":\"2024-05-01T12:00:0%dZ\",\"data\":{\"amount\":%d}}",
             i, i % 10, i * 7);
}

static void build(sl_batch_builder *b, const char *lane, int n, int first, sl_batch *out)
{
    char ev[256], key[16];
    sl_batch_builder_reset(b, lane);
    for (int i = 0; i < n; i++) {
        event(ev, sizeof ev, first + i);
        snprintf(key, sizeof key, "k%d", (first + i) % 3);
        sl_batch_builder_add(b, 1714564800000 + (first + i) * 1000, i % 2 ? key : NULL,
                             i % 2 ? strlen(key) : 0, ev, strlen(ev));
    }
    sl_error err = {0};
    if (sl_batch_builder_finish(b, out, &err)) {
        fprintf(stderr, "finish: %s\n", err.msg);
        exit(1);
    }
}

static void batches(void)
{
    static const struct {
        const char *name, *lane;
        int n;
        sl_codec codec;
    } v[] = {
        {"one-record", "", 1, SL_CODEC_NONE},          {"five-records", "", 5, SL_CODEC_NONE},
        {"lane", "feature-x", 3, SL_CODEC_NONE},       {"zstd", "", 6, SL_CODEC_ZSTD},
        {"zstd-lane", "release-42", 4, SL_CODEC_ZSTD},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        sl_batch_builder b;
        sl_batch out;
        sl_batch_builder_init(&b, v[i].codec, 0);
        build(&b, v[i].lane, v[i].n, (int)i * 10, &out);
        put("batch", v[i].name, out.data, out.len, 2, true); /* flags: fix the CRC */
        sl_batch_builder_free(&b);
    }
}

static void append_file(sl_buf *b, const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        sl_buf_append(b, tmp, n);
    fclose(f);
}

/* A real partition: n batches (lanes alternating when mixed), closed
 * cleanly or not, then its files in the harness's SLFZ layout. */
static void log_seed(const char *name, int nbatches, bool mixed, bool roll, sl_codec codec,
                     unsigned char flags)
{
    char dir[] = "/tmp/sluice-mkseeds-XXXXXX";
    if (!mkdtemp(dir))
        exit(1);
    sl_log_config cfg;
    sl_log_config_default(&cfg);
    cfg.segment_bytes = 1 << 20;
    cfg.index_interval_bytes = 64;
    sl_log *log;
    sl_error err = {0};
    if (sl_log_open(dir, &cfg, NULL, &log, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        exit(1);
    }
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 0);
    for (int i = 0; i < nbatches; i++) {
        sl_batch out;
        int64_t base;
        build(&b, mixed && i % 2 ? "lane-a" : "", 1 + i % 3, i * 3, &out);
        sl_log_append(log, &out, &base, &err);
        if (roll && i == nbatches / 2)
            sl_log_roll(log, &err);
    }
    sl_batch_builder_free(&b);
    sl_log_close(log);
    sl_buf all = SL_BUF_INIT;
    static const char *const parts[] = {
        "00000000000000000000.log",
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
        "00000000000000000000.lanes",
    };
    for (size_t i = 0; i < 4; i++) {
        if (i)
            sl_buf_append(&all, "SLFZ", 4);
        append_file(&all, dir, parts[i]);
    }
    if (roll) {
        /* The second segment's base is whatever the roll gave it; the
         * harness names it ...10, so renumber (flag bit 3) when needed. */
        char path[1024];
        for (int64_t base = 1; base < 200; base++) {
            snprintf(path, sizeof path, "%s/%020lld.log", dir, (long long)base);
            if (access(path, F_OK) == 0) {
                sl_buf_append(&all, "SLFZ", 4);
                char nm[64];
                snprintf(nm, sizeof nm, "%020lld.log", (long long)base);
                append_file(&all, dir, nm);
                sl_buf_append(&all, "SLFZ", 4);
                snprintf(nm, sizeof nm, "%020lld.index", (long long)base);
                append_file(&all, dir, nm);
                break;
            }
        }
    }
    put("log", name, all.data, all.len, flags, true);
    sl_buf_free(&all);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {
    }
}

int main(int argc, char **argv)
{
    out_dir = argc > 1 ? argv[1] : "tests/fuzz/corpus";
    char p[1024];
    snprintf(p, sizeof p, "%s/batch", out_dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/log", out_dir);
    mkdir(p, 0755);
    batches();
    log_seed("clean-one-segment", 6, false, false, SL_CODEC_NONE, 1);
    log_seed("crashed-one-segment", 6, false, false, SL_CODEC_NONE, 0);
    log_seed("full-recovery-lanes", 8, true, false, SL_CODEC_NONE, 2);
    log_seed("two-segments", 10, true, true, SL_CODEC_NONE, 0);
    log_seed("two-segments-full", 10, false, true, SL_CODEC_ZSTD, 2 | 16);
    log_seed("zstd-fix-crc", 5, true, false, SL_CODEC_ZSTD, 4 | 8 | 2);
    log_seed("empty", 0, false, false, SL_CODEC_NONE, 2);
    return 0;
}
