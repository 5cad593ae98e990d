/*
 * core/log/batch.c — encoder and decoder for Kafka record batch v2 (layout in
 * core/log/batch.h). Decoding never trusts a length: every field is checked
 * against the end of the buffer before it is read.
 */
#include "core/log/batch.h"
#include "core/base/lane_name.h"
#include "core/base/crc32c.h"
#include "core/base/varint.h"

#include <inttypes.h>
#include <string.h>
#include <zstd.h>

#define ATTR_CODEC_MASK 0x07

int sl_codec_parse(const char *name, sl_codec *out)
{
    if (strcmp(name, "none") == 0)
        *out = SL_CODEC_NONE;
    else if (strcmp(name, "zstd") == 0)
        *out = SL_CODEC_ZSTD;
    else
        return SL_EINVAL;
    return 0;
}

const char *sl_codec_name(sl_codec c)
{
    return c == SL_CODEC_ZSTD ? "zstd" : "none";
}

int sl_batch_header(const uint8_t *p, size_t avail, sl_batch_info *out, sl_error *err)
{
    if (avail < SL_BATCH_HEADER_SIZE)
        return SL_EPARTIAL;
    sl_batch_info in;
    in.base_offset = (int64_t)sl_be64_get(p + SL_BATCH_OFF_BASE_OFFSET);
    in.length = (int32_t)sl_be32_get(p + SL_BATCH_OFF_LENGTH);
    in.crc = sl_be32_get(p + SL_BATCH_OFF_CRC);
    in.attributes = (int16_t)sl_be16_get(p + SL_BATCH_OFF_ATTRIBUTES);
    in.last_offset_delta = (int32_t)sl_be32_get(p + SL_BATCH_OFF_LAST_DELTA);
    in.base_ts = (int64_t)sl_be64_get(p + SL_BATCH_OFF_BASE_TS);
    in.max_ts = (int64_t)sl_be64_get(p + SL_BATCH_OFF_MAX_TS);
    in.count = (int32_t)sl_be32_get(p + SL_BATCH_OFF_COUNT);
    if (p[SL_BATCH_OFF_MAGIC] != 2)
        return sl_error_set(err, SL_ECORRUPT, "magic byte is %u, expected 2",
                            p[SL_BATCH_OFF_MAGIC]);
    if (in.length < SL_BATCH_HEADER_SIZE - SL_BATCH_LOG_OVERHEAD ||
        (uint32_t)in.length > SL_BATCH_MAX_BYTES)
        return sl_error_set(err, SL_ECORRUPT, "batch length %d is out of range", in.length);
    if (in.base_offset < 0)
        return sl_error_set(err, SL_ECORRUPT, "negative base offset %lld",
                            (long long)in.base_offset);
    if (in.count < 0 || in.last_offset_delta < 0 ||
        (int64_t)in.count > (int64_t)in.last_offset_delta + 1)
        return sl_error_set(err, SL_ECORRUPT, "record count %d does not fit lastOffsetDelta %d",
                            in.count, in.last_offset_delta);
    int codec = in.attributes & ATTR_CODEC_MASK;
    if (codec != SL_CODEC_NONE && codec != SL_CODEC_ZSTD)
        return sl_error_set(err, SL_ECORRUPT, "unsupported compression codec %d", codec);
    *out = in;
    return 0;
}

int sl_batch_check(const uint8_t *p, size_t avail, sl_batch_info *out, sl_error *err)
{
    sl_batch_info in;
    int rc = sl_batch_header(p, avail, &in, err);
    if (rc)
        return rc;
    size_t size = sl_batch_size(&in);
    if (avail < size)
        return SL_EPARTIAL;
    uint32_t crc = sl_crc32c(0, p + SL_BATCH_OFF_ATTRIBUTES, size - SL_BATCH_OFF_ATTRIBUTES);
    if (crc != in.crc)
        return sl_error_set(err, SL_ECORRUPT, "CRC-32C mismatch (stored %08x, computed %08x)",
                            in.crc, crc);
    *out = in;
    return 0;
}

/* ---- encoding ---------------------------------------------------------- */

void sl_batch_builder_init(sl_batch_builder *b, sl_codec codec, int zstd_level)
{
    memset(b, 0, sizeof *b);
    b->codec = codec;
    b->level = zstd_level;
}

int sl_batch_builder_reset(sl_batch_builder *b, const char *lane)
{
    size_t len = lane ? strlen(lane) : 0;
    if (!sl_lane_valid(lane, len))
        return SL_EINVAL;
    memmove(b->lane, lane ? lane : "", len); /* lane may be b->lane itself */
    b->lane[len] = '\0';
    b->lane_len = len;
    b->compressed = false;
    /* Records are encoded right after room for the header, so an
     * uncompressed batch is finished without copying them again. */
    if (sl_buf_reserve(&b->out, SL_BATCH_HEADER_SIZE))
        return SL_ENOMEM;
    b->out.len = SL_BATCH_HEADER_SIZE;
    b->count = 0;
    return 0;
}

size_t sl_batch_builder_bytes(const sl_batch_builder *b)
{
    return b->out.len;
}

int sl_batch_builder_add_raw(sl_batch_builder *b, int64_t ts_ms, const void *key, size_t key_len,
                             const void *value, size_t value_len, const void *headers,
                             size_t headers_len, int32_t header_count)
{
    if (header_count < 0 || (header_count > 0 && !headers))
        return SL_EINVAL;
    if (b->count == INT32_MAX || key_len > SL_BATCH_MAX_BYTES || value_len > SL_BATCH_MAX_BYTES ||
        headers_len > SL_BATCH_MAX_BYTES)
        return SL_ETOOBIG;
    int64_t base_ts = b->count == 0 ? ts_ms : b->base_ts;
    int64_t ts_delta = ts_ms - base_ts;
    int64_t klen = key ? (int64_t)key_len : -1;
    int64_t vlen = value ? (int64_t)value_len : -1; /* a null value (a tombstone) stays null */
    if (!value)
        value_len = 0;

    /* The body is everything after the length varint. */
    size_t body = 1 + sl_varint_size(ts_delta) + sl_varint_size(b->count) + sl_varint_size(klen) +
                  (key ? key_len : 0) + sl_varint_size(vlen) + value_len +
                  sl_varint_size(header_count) + headers_len;
    size_t total = sl_varint_size((int64_t)body) + body;
    if (b->out.len < SL_BATCH_HEADER_SIZE)
        return SL_EINVAL; /* not reset */
    if (b->out.len + total > SL_BATCH_MAX_BYTES)
        return SL_ETOOBIG;
    if (b->out.cap - b->out.len < total && sl_buf_reserve(&b->out, total))
        return SL_ENOMEM;

    uint8_t *w = b->out.data + b->out.len;
    w += sl_varint_put(w, (int64_t)body);
    *w++ = 0; /* record attributes: unused in v2 */
    w += sl_varint_put(w, ts_delta);
    w += sl_varint_put(w, b->count);
    w += sl_varint_put(w, klen);
    if (key_len && key) {
        memcpy(w, key, key_len);
        w += key_len;
    }
    w += sl_varint_put(w, vlen);
    if (value_len) {
        memcpy(w, value, value_len);
        w += value_len;
    }
    w += sl_varint_put(w, header_count);
    if (headers_len) {
        memcpy(w, headers, headers_len);
        w += headers_len;
    }
    b->out.len += total;
    if (b->count == 0)
        b->base_ts = b->max_ts = ts_ms;
    b->count++;
    if (ts_ms > b->max_ts)
        b->max_ts = ts_ms;
    return 0;
}

/* One record header in Kafka's encoding: key length, key, value length,
 * value (varints). */
static uint8_t *put_header(uint8_t *w, const char *k, size_t klen, const char *v, size_t vlen)
{
    w += sl_varint_put(w, (int64_t)klen);
    memcpy(w, k, klen);
    w += klen;
    w += sl_varint_put(w, (int64_t)vlen);
    memcpy(w, v, vlen);
    return w + vlen;
}

int sl_batch_builder_add(sl_batch_builder *b, int64_t ts_ms, const void *key, size_t key_len,
                         const void *value, size_t value_len)
{
    /* Every stored CloudEvent says so (the Kafka binding's structured mode),
     * so a Kafka consumer gets the record as it is; a non-base lane follows. */
    uint8_t hdr[64 + SL_LANE_MAX];
    uint8_t *w = put_header(hdr, SL_BATCH_CE_HEADER_KEY, sizeof SL_BATCH_CE_HEADER_KEY - 1,
                            SL_BATCH_CE_HEADER_VALUE, sizeof SL_BATCH_CE_HEADER_VALUE - 1);
    int32_t n = 1;
    if (b->lane_len) {
        w = put_header(w, "lane", 4, b->lane, b->lane_len);
        n++;
    }
    return sl_batch_builder_add_raw(b, ts_ms, key, key_len, value, value_len, hdr,
                                    (size_t)(w - hdr), n);
}

static int compress_records(sl_batch_builder *b, sl_error *err)
{
    if (!b->zctx) {
        b->zctx = ZSTD_createCCtx();
        if (!b->zctx)
            return SL_ENOMEM;
        if (b->level)
            ZSTD_CCtx_setParameter(b->zctx, ZSTD_c_compressionLevel, b->level);
    }
    /* Compress the records into recs behind a copy of the header room,
     * then swap the buffers so out holds the batch. */
    size_t plain = b->out.len - SL_BATCH_HEADER_SIZE;
    size_t bound = ZSTD_compressBound(plain);
    b->recs.len = 0;
    if (sl_buf_reserve(&b->recs, SL_BATCH_HEADER_SIZE + bound))
        return SL_ENOMEM;
    size_t n = ZSTD_compress2(b->zctx, b->recs.data + SL_BATCH_HEADER_SIZE, bound,
                              b->out.data + SL_BATCH_HEADER_SIZE, plain);
    if (ZSTD_isError(n))
        return sl_error_set(err, SL_EIO, "zstd compression failed: %s", ZSTD_getErrorName(n));
    b->recs.len = SL_BATCH_HEADER_SIZE + n;
    sl_buf t = b->out;
    b->out = b->recs;
    b->recs = t;
    b->compressed = true;
    return 0;
}

int sl_batch_builder_finish(sl_batch_builder *b, sl_batch *out, sl_error *err)
{
    if (b->count == 0)
        return sl_error_set(err, SL_EINVAL, "cannot finish an empty batch");
    if (b->compressed)
        return sl_error_set(err, SL_EINVAL, "batch already finished; reset it first");
    int rc = b->codec == SL_CODEC_ZSTD ? compress_records(b, err) : 0;
    if (rc)
        return rc;
    if (b->out.len > SL_BATCH_MAX_BYTES)
        return sl_error_set(err, SL_ETOOBIG, "batch of %zu bytes is over the limit", b->out.len);

    uint8_t *h = b->out.data;
    sl_be64_put(h + SL_BATCH_OFF_BASE_OFFSET, 0);
    sl_be32_put(h + SL_BATCH_OFF_LENGTH, (uint32_t)(b->out.len - SL_BATCH_LOG_OVERHEAD));
    sl_be32_put(h + SL_BATCH_OFF_EPOCH, 0);
    h[SL_BATCH_OFF_MAGIC] = 2;
    sl_be16_put(h + SL_BATCH_OFF_ATTRIBUTES, (uint16_t)b->codec);
    sl_be32_put(h + SL_BATCH_OFF_LAST_DELTA, (uint32_t)(b->count - 1));
    sl_be64_put(h + SL_BATCH_OFF_BASE_TS, (uint64_t)b->base_ts);
    sl_be64_put(h + SL_BATCH_OFF_MAX_TS, (uint64_t)b->max_ts);
    sl_be64_put(h + SL_BATCH_OFF_PRODUCER_ID, UINT64_MAX);
    sl_be16_put(h + SL_BATCH_OFF_PRODUCER_EPOCH, UINT16_MAX);
    sl_be32_put(h + SL_BATCH_OFF_BASE_SEQ, UINT32_MAX);
    sl_be32_put(h + SL_BATCH_OFF_COUNT, (uint32_t)b->count);
    sl_be32_put(h + SL_BATCH_OFF_CRC,
                sl_crc32c(0, h + SL_BATCH_OFF_ATTRIBUTES, b->out.len - SL_BATCH_OFF_ATTRIBUTES));
    out->data = b->out.data;
    out->len = b->out.len;
    out->count = b->count;
    out->max_ts = b->max_ts;
    out->lane = b->lane;
    return 0;
}

void sl_batch_builder_free(sl_batch_builder *b)
{
    sl_buf_free(&b->recs);
    sl_buf_free(&b->out);
    ZSTD_freeCCtx(b->zctx);
    b->zctx = NULL;
}

/* ---- decoding ---------------------------------------------------------- */

void sl_batch_reader_init(sl_batch_reader *r)
{
    memset(r, 0, sizeof *r);
}

static int decompress_records(sl_batch_reader *r, const uint8_t *src, size_t len, sl_error *err)
{
    if (!r->dctx) {
        r->dctx = ZSTD_createDCtx();
        if (!r->dctx)
            return SL_ENOMEM;
    }
    ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
    unsigned long long hint = ZSTD_getFrameContentSize(src, len);
    size_t want = hint <= SL_BATCH_MAX_BYTES           ? (size_t)hint
                  : len < (SL_BATCH_MAX_BYTES + 1) / 4 ? len * 4
                                                       : SL_BATCH_MAX_BYTES + 1;
    r->plain.len = 0;
    ZSTD_inBuffer in = {src, len, 0};
    for (;;) {
        if (want < 4096)
            want = 4096;
        if (sl_buf_reserve(&r->plain, want))
            return SL_ENOMEM;
        /* zstd may write at most one byte past the largest batch: a small
         * frame can expand to gigabytes, and the buffer is reused. */
        size_t room = r->plain.cap - r->plain.len, most = SL_BATCH_MAX_BYTES + 1 - r->plain.len;
        ZSTD_outBuffer outb = {r->plain.data + r->plain.len, room < most ? room : most, 0};
        size_t rc = ZSTD_decompressStream(r->dctx, &outb, &in);
        if (ZSTD_isError(rc))
            return sl_error_set(err, SL_ECORRUPT, "zstd: %s", ZSTD_getErrorName(rc));
        r->plain.len += outb.pos;
        if (r->plain.len > SL_BATCH_MAX_BYTES)
            return sl_error_set(err, SL_ECORRUPT, "records decompress to over %u bytes",
                                SL_BATCH_MAX_BYTES);
        if (rc == 0 && in.pos == in.size)
            return 0;
        if (in.pos == in.size && outb.pos < outb.size)
            return sl_error_set(err, SL_ECORRUPT, "zstd frame is truncated");
        /* More room: double once zstd filled what there was, asking for at
         * most one byte over the largest batch (sl_buf rounds a reservation
         * up to a power of two, so the buffer stays under twice the limit).
         * It used to double or quadruple
         * on every pass, and a reused reader kept the buffer, so batches
         * that expand to a lot grew it to gigabytes (found by fuzzing:
         * tests/fuzz/regress/batch/). */
        want = r->plain.len < r->plain.cap ? r->plain.cap - r->plain.len : r->plain.cap;
        if (want > SL_BATCH_MAX_BYTES + 1 - r->plain.len)
            want = SL_BATCH_MAX_BYTES + 1 - r->plain.len;
    }
}

int sl_batch_reader_open(sl_batch_reader *r, const uint8_t *p, size_t len, sl_error *err)
{
    int rc = sl_batch_header(p, len, &r->info, err);
    if (rc)
        return rc == SL_EPARTIAL ? SL_ECORRUPT : rc;
    if (sl_batch_size(&r->info) > len)
        return sl_error_set(err, SL_ECORRUPT, "batch is longer than its buffer");
    const uint8_t *recs = p + SL_BATCH_HEADER_SIZE;
    size_t recs_len = sl_batch_size(&r->info) - SL_BATCH_HEADER_SIZE;
    r->index = 0;
    if ((r->info.attributes & ATTR_CODEC_MASK) == SL_CODEC_ZSTD) {
        rc = decompress_records(r, recs, recs_len, err);
        if (rc)
            return rc;
        r->p = r->plain.data;
        r->end = r->plain.data + r->plain.len;
    } else {
        r->p = recs;
        r->end = recs + recs_len;
    }
    return 0;
}

/* sl_varint_get() with the one-byte case (most fields of most records)
 * inlined: record decoding reads about six varints per record. */
static inline size_t get_varint(const uint8_t *p, const uint8_t *end, int64_t *v)
{
    if (p < end && *p < 0x80) {
        *v = (int64_t)(*p >> 1) ^ -(int64_t)(*p & 1);
        return 1;
    }
    return sl_varint_get(p, end, v);
}

/* Reads a length-prefixed byte string; -1 means null. */
static const uint8_t *get_bytes(const uint8_t **pp, const uint8_t *end, size_t *len, int *ok)
{
    int64_t n;
    size_t used = get_varint(*pp, end, &n);
    if (!used || n < -1 || (n > 0 && (uint64_t)n > (uint64_t)(end - *pp - (ptrdiff_t)used))) {
        *ok = 0;
        return NULL;
    }
    *pp += used;
    if (n == -1) {
        *len = 0;
        return NULL;
    }
    const uint8_t *s = *pp;
    *pp += n;
    *len = (size_t)n;
    return s;
}

int sl_batch_reader_next(sl_batch_reader *r, sl_record *rec, sl_error *err)
{
    if (r->index >= r->info.count) {
        if (r->p != r->end)
            return sl_error_set(err, SL_ECORRUPT, "%td bytes after the last record", r->end - r->p);
        return SL_EEOF;
    }
    const uint8_t *p = r->p;
    int64_t len, ts_delta, off_delta, nh;
    size_t used = get_varint(p, r->end, &len);
    if (!used || len < 1 || len > r->end - p - (ptrdiff_t)used)
        return sl_error_set(err, SL_ECORRUPT, "record %d: bad length", r->index);
    p += used;
    const uint8_t *end = p + len;
    p++; /* attributes */
    int ok = 1;
    if (!(used = get_varint(p, end, &ts_delta)))
        ok = 0;
    p += used;
    if (ok && !(used = get_varint(p, end, &off_delta)))
        ok = 0;
    p += used;
    if (!ok || off_delta < 0 || off_delta > r->info.last_offset_delta)
        return sl_error_set(err, SL_ECORRUPT, "record %d: bad timestamp or offset delta", r->index);
    rec->offset = r->info.base_offset + off_delta;
    rec->timestamp = r->info.base_ts + ts_delta;
    rec->key = get_bytes(&p, end, &rec->key_len, &ok);
    if (ok)
        rec->value = get_bytes(&p, end, &rec->value_len, &ok);
    if (!ok)
        return sl_error_set(err, SL_ECORRUPT, "record %d: bad key or value length", r->index);
    if (!(used = get_varint(p, end, &nh)) || nh < 0 || nh > end - p)
        return sl_error_set(err, SL_ECORRUPT, "record %d: bad header count", r->index);
    p += used;
    rec->headers = p;
    rec->header_count = (int32_t)nh;
    rec->lane = "";
    rec->lane_len = 0;
    for (int64_t i = 0; i < nh; i++) {
        size_t klen, vlen;
        const uint8_t *k = get_bytes(&p, end, &klen, &ok);
        const uint8_t *v = ok ? get_bytes(&p, end, &vlen, &ok) : NULL;
        if (!ok || !k)
            return sl_error_set(err, SL_ECORRUPT, "record %d: bad header %lld", r->index,
                                (long long)i);
        if (klen == 4 && memcmp(k, "lane", 4) == 0 && v) {
            rec->lane = (const char *)v;
            rec->lane_len = vlen;
        }
    }
    rec->headers_len = (size_t)(p - rec->headers);
    if (p != end)
        return sl_error_set(err, SL_ECORRUPT, "record %d: length does not match its fields",
                            r->index);
    r->p = end;
    r->index++;
    return 0;
}

void sl_batch_reader_free(sl_batch_reader *r)
{
    sl_buf_free(&r->plain);
    ZSTD_freeDCtx(r->dctx);
    r->dctx = NULL;
}

int sl_batch_lane(sl_batch_reader *br, const uint8_t *p, size_t len, char *lane, sl_error *err)
{
    sl_record rec;
    int rc = sl_batch_reader_open(br, p, len, err);
    if (!rc)
        rc = sl_batch_reader_next(br, &rec, err);
    if (rc == SL_EEOF) {
        lane[0] = '\0';
        return 0;
    }
    if (rc)
        return rc;
    if (!sl_lane_valid(rec.lane, rec.lane_len))
        return sl_error_set(err, SL_ECORRUPT, "invalid lane header");
    memcpy(lane, rec.lane, rec.lane_len);
    lane[rec.lane_len] = '\0';
    return 0;
}

int sl_batch_validate(sl_batch_reader *br, const uint8_t *p, size_t len, const char *lane,
                      sl_error *err)
{
    sl_record rec;
    int rc = sl_batch_reader_open(br, p, len, err);
    size_t ll = strlen(lane);
    while (!rc && !(rc = sl_batch_reader_next(br, &rec, err)))
        if (rec.lane_len != ll || memcmp(rec.lane, lane, ll) != 0)
            return sl_error_set(err, SL_ECORRUPT,
                                "record at offset %" PRId64 " has another lane than its batch",
                                rec.offset);
    return rc == SL_EEOF ? 0 : rc;
}
