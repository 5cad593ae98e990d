/*
 * cli/cli_demo.c — `sluice demo [DIR]`: the log store on its own, without a
 * server (what `make run` showed before the server existed). Appends sample
 * CloudEvents to a real partition (default ./sluice-data/sets/demo/0), reads
 * them back by lane and by time, and verifies the files, printing what it
 * did and how long it took.
 */
#include "cli/cli.h"
#include "core/base/clock.h"
#include "core/log/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define DEMO_EVENTS 100000
#define DEMO_BATCH 100

static int fail(const char *what, const sl_error *err, int rc)
{
    fprintf(stderr, "sluice demo: %s: %s\n", what, err->msg[0] ? err->msg : sl_strerror(rc));
    return 1;
}

static double ms_since(int64_t t0)
{
    return (double)(sl_clock_mono_ns() - t0) / 1e6;
}

int sl_cli_demo_main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "./sluice-data/sets/demo/0";
    sl_log_config cfg;
    sl_log_config_default(&cfg);
    sl_log_open_options o = {.create = true};
    sl_log *log;
    sl_error err = {0};
    int rc = sl_log_open(dir, &cfg, &o, &log, &err);
    if (rc)
        return fail("open", &err, rc);
    int64_t first = sl_log_end_offset(log), t_mid = 0;
    printf("partition %s: %zu segment(s), offsets %" PRId64 "..%" PRId64 "\n", dir,
           sl_log_segment_count(log), sl_log_start_offset(log), first);

    /* Every tenth batch belongs to the test lane "feature-x". */
    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_ZSTD, 0);
    int64_t t0 = sl_clock_mono_ns(), base;
    char ev[512];
    for (int i = 0; i < DEMO_EVENTS && !rc; i += DEMO_BATCH) {
        const char *lane = (i / DEMO_BATCH) % 10 == 9 ? "feature-x" : "";
        sl_batch_builder_reset(&b, lane);
        for (int k = i; k < i + DEMO_BATCH && !rc; k++) {
            int64_t now = sl_clock_now_ms();
            if (k == DEMO_EVENTS / 2)
                t_mid = now;
            int n = snprintf(ev, sizeof ev,
                             "{\"specversion\":\"1.0\",\"id\":\"demo-%d\",\"source\":\"/demo\","
                             "\"type\":\"demo.order.created\",\"lane\":\"%s\",\"data\":"
                             "{\"order\":%d,\"amount\":%d.%02d}}",
                             k, lane, k, k % 500, k % 100);
            char key[16];
            int kl = snprintf(key, sizeof key, "c%d", k % 64);
            rc = sl_batch_builder_add(&b, now, key, (size_t)kl, ev, (size_t)n);
        }
        sl_batch batch;
        if (!rc)
            rc = sl_batch_builder_finish(&b, &batch, &err);
        if (!rc)
            rc = sl_log_append(log, &batch, &base, &err);
    }
    if (!rc)
        rc = sl_log_sync(log, &err);
    sl_batch_builder_free(&b);
    if (rc) {
        sl_log_close(log);
        return fail("append", &err, rc);
    }
    printf("appended %d events (zstd batches of %d, every 10th batch in lane feature-x) and "
           "fdatasync'ed in %.1f ms\n",
           DEMO_EVENTS, DEMO_BATCH, ms_since(t0));

    const char *lanes[] = {"", "feature-x"};
    for (int l = 0; l < 2; l++) {
        sl_log_reader *r;
        t0 = sl_clock_mono_ns();
        if ((rc = sl_log_reader_open(log, first, lanes[l], &r, &err)))
            break;
        sl_record rec;
        int64_t n = 0;
        while ((rc = sl_log_reader_next(r, &rec, &err)) == 0)
            n++;
        sl_log_reader_close(r);
        if (rc != SL_EEOF)
            break;
        rc = 0;
        printf("read back %" PRId64 " events of lane \"%s\" in %.1f ms\n", n, lanes[l],
               ms_since(t0));
    }
    int64_t at = 0;
    if (!rc && !(rc = sl_log_offset_for_time(log, t_mid, &at, &err)))
        printf("first event at or after the middle timestamp: offset %" PRId64 "\n", at);
    size_t segs = sl_log_segment_count(log);
    uint64_t bytes = sl_log_size_bytes(log);
    sl_log_close(log);
    if (rc)
        return fail("read", &err, rc);

    sl_log_verify_report rep;
    if ((rc = sl_log_verify(dir, &rep, &err)))
        return fail("verify", &err, rc);
    printf("verify: %zu segment(s), %" PRIu64 " records, %" PRIu64 " bytes on disk: %s\n", segs,
           rep.records, bytes, rep.damaged ? rep.where : "ok");
    printf("\ninspect it yourself:\n  ./bin/sluice log dump %s --from %" PRId64 " --max 3\n"
           "  ./bin/sluice log verify %s\n",
           dir, at, dir);
    return rep.damaged ? 1 : 0;
}
