/*
 * tests/fuzz/fuzz_batch.c — the record-batch decoder (core/log/batch.h). The
 * first input byte holds flags, the rest is one stored batch:
 *   bit 0  set batchLength to the bytes given (else as written)
 *   bit 1  recompute the CRC-32C (else most inputs stop at the CRC check)
 *   bit 2  rebuild with zstd (else uncompressed)
 * A batch that passes sl_batch_check is decoded record by record, its lane
 * read and every record validated; one that validates is rebuilt from its
 * records with sl_batch_builder, and the rebuilt batch must decode to the
 * same records (timestamps, keys, values, lane).
 */
#include "core/log/batch.h"
#include "core/base/crc32c.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>
#include <string.h>

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

typedef struct rec {
    int64_t ts;
    const uint8_t *key, *value;
    size_t key_len, value_len;
} rec;

static void rebuild(const rec *v, size_t n, const char *lane, sl_codec codec)
{
    /* One builder per codec for the process, reused as sluice does. */
    static sl_batch_builder b[2];
    static bool init[2];
    int k = codec == SL_CODEC_ZSTD;
    sl_batch_builder *bb = &b[k];
    if (!init[k]) {
        sl_batch_builder_init(bb, codec, 1);
        init[k] = true;
    }
    FZ_CHECK(sl_batch_builder_reset(bb, lane) == 0, "reset with a lane the decoder accepted");
    for (size_t i = 0; i < n; i++) {
        int rc =
            sl_batch_builder_add(bb, v[i].ts, v[i].key, v[i].key_len, v[i].value, v[i].value_len);
        FZ_CHECK(rc == 0, "builder add: %d", rc);
    }
    sl_batch out;
    sl_error err = {0};
    FZ_CHECK(sl_batch_builder_finish(bb, &out, &err) == 0, "finish: %s", err.msg);
    sl_batch_info info;
    FZ_CHECK(sl_batch_check(out.data, out.len, &info, &err) == 0, "rebuilt batch: %s", err.msg);
    FZ_CHECK(info.count == (int32_t)n, "count");
    sl_batch_reader r;
    sl_batch_reader_init(&r);
    FZ_CHECK(sl_batch_reader_open(&r, out.data, out.len, &err) == 0, "open rebuilt: %s", err.msg);
    sl_record x;
    for (size_t i = 0; i < n; i++) {
        int rc = sl_batch_reader_next(&r, &x, &err);
        FZ_CHECK(rc == 0, "record %zu of the rebuilt batch: %s", i, err.msg);
        FZ_CHECK(x.timestamp == v[i].ts, "timestamp %zu", i);
        FZ_CHECK((x.key == NULL) == (v[i].key == NULL), "null key %zu", i);
        FZ_CHECK(x.key_len == v[i].key_len && (!x.key_len || !memcmp(x.key, v[i].key, x.key_len)),
                 "key %zu", i);
        FZ_CHECK(x.value_len == v[i].value_len &&
                     (!x.value_len || !memcmp(x.value, v[i].value, x.value_len)),
                 "value %zu", i);
        FZ_CHECK(x.lane_len == strlen(lane) && !memcmp(x.lane, lane, x.lane_len), "lane %zu", i);
    }
    FZ_CHECK(sl_batch_reader_next(&r, &x, &err) == SL_EEOF, "records after the last");
    sl_batch_reader_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    size_t len = size - 1;
    uint8_t *p = (uint8_t *)fz_dup(data + 1, len, false);
    if ((flags & 1) && len >= SL_BATCH_LOG_OVERHEAD)
        put_be32(p + SL_BATCH_OFF_LENGTH, (uint32_t)(len - SL_BATCH_LOG_OVERHEAD));
    if ((flags & 2) && len >= SL_BATCH_HEADER_SIZE)
        put_be32(p + SL_BATCH_OFF_CRC,
                 sl_crc32c(0, p + SL_BATCH_OFF_ATTRIBUTES, len - SL_BATCH_OFF_ATTRIBUTES));
    sl_batch_info info;
    sl_error err = {0};
    int rc = sl_batch_header(p, len, &info, &err);
    FZ_CHECK(rc == 0 || rc == SL_EPARTIAL || rc == SL_ECORRUPT, "header: %d", rc);
    rc = sl_batch_check(p, len, &info, &err);
    FZ_CHECK(rc == 0 || rc == SL_EPARTIAL || rc == SL_ECORRUPT, "check: %d", rc);
    if (rc) {
        free(p);
        return 0;
    }
    FZ_CHECK(sl_batch_size(&info) <= len, "a checked batch larger than the input");
    size_t blen = sl_batch_size(&info);
    static sl_batch_reader r;
    static bool init;
    if (!init) {
        sl_batch_reader_init(&r);
        init = true;
    }
    rec *v = NULL;
    size_t n = 0;
    bool all_ok = false;
    if (sl_batch_reader_open(&r, p, blen, &err) == 0) {
        /* Grown as records come: the header's count is not to be trusted
         * for an allocation. */
        size_t cap = 0;
        sl_record x;
        while ((rc = sl_batch_reader_next(&r, &x, &err)) == 0) {
            FZ_CHECK(n < (size_t)info.count, "more records than the count");
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                v = realloc(v, cap * sizeof *v);
                FZ_CHECK(v, "oom");
            }
            v[n++] = (rec){x.timestamp, x.key, x.value, x.key_len, x.value_len};
        }
        FZ_CHECK(rc == SL_EEOF || rc == SL_ECORRUPT, "next: %d", rc);
        all_ok = rc == SL_EEOF;
    }
    /* The records point into the reader's buffer (compressed batches) that
     * sl_batch_lane/validate reuse: copy them before. */
    for (size_t i = 0; all_ok && i < n; i++) {
        v[i].key = v[i].key ? (const uint8_t *)fz_dup(v[i].key, v[i].key_len, false) : NULL;
        v[i].value = (const uint8_t *)fz_dup(v[i].value ? v[i].value : (const uint8_t *)"",
                                             v[i].value_len, false);
    }
    /* The reader is reused (as sluice reuses its readers): whatever a batch
     * decompresses to, its buffer stays within twice the largest batch. */
    FZ_CHECK(r.plain.cap <= 2 * (size_t)SL_BATCH_MAX_BYTES + 8192, "reader buffer of %zu bytes",
             r.plain.cap);
    char lane[SL_LANE_MAX + 1];
    if (sl_batch_lane(&r, p, blen, lane, &err) == 0 &&
        sl_batch_validate(&r, p, blen, lane, &err) == 0 && all_ok && n > 0)
        rebuild(v, n, lane, flags & 4 ? SL_CODEC_ZSTD : SL_CODEC_NONE);
    FZ_CHECK(r.plain.cap <= 2 * (size_t)SL_BATCH_MAX_BYTES + 8192, "reader buffer of %zu bytes",
             r.plain.cap);
    for (size_t i = 0; all_ok && i < n; i++) {
        free((void *)v[i].key);
        free((void *)v[i].value);
    }
    free(v);
    free(p);
    return 0;
}
