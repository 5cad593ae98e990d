/*
 * core/log/batch.h — Kafka record batch v2, byte for byte: the unit sluice writes
 * to and reads from its logs.
 *
 * Batch layout (all integers big-endian), as Kafka's DefaultRecordBatch:
 *
 *   off  size  field
 *     0     8  baseOffset            first offset; assigned by the log on append
 *     8     4  batchLength           bytes after this field (total = 12 + batchLength)
 *    12     4  partitionLeaderEpoch  0
 *    16     1  magic                 2
 *    17     4  crc                   CRC-32C of bytes 21 .. end
 *    21     2  attributes            bits 0-2 codec (0 none, 4 zstd); 3 timestamp type
 *    23     4  lastOffsetDelta       recordsCount - 1
 *    27     8  baseTimestamp         ms, timestamp of the first record
 *    35     8  maxTimestamp          ms, largest record timestamp
 *    43     8  producerId            -1
 *    51     2  producerEpoch         -1
 *    53     4  baseSequence          -1
 *    57     4  recordsCount
 *    61     …  records, compressed as one zstd frame when the codec says so
 *
 * Record layout (varint = zig-zag base-128, see core/base/varint.h):
 *
 *   length varint | attributes int8 | timestampDelta varint | offsetDelta varint
 *   | keyLength varint (-1 = null) | key | valueLength varint | value
 *   | headerCount varint | { keyLen varint | key | valueLen varint | value } …
 *
 * sluice stores the event's partition key as the record key, the CloudEvent
 * JSON as the value, and a non-base lane as the record header "lane". Every
 * record of a batch has the same lane (the writer keeps batches
 * lane-homogeneous), which is what lets the log's lane sidecar skip batches.
 */
#ifndef SL_BATCH_H
#define SL_BATCH_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/base/lane_name.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_BATCH_HEADER_SIZE 61
#define SL_BATCH_LOG_OVERHEAD 12       /* baseOffset + batchLength */
#define SL_BATCH_MAX_BYTES (64u << 20) /* largest batch, stored or decompressed */

/* Byte positions of the header fields. */
enum {
    SL_BATCH_OFF_BASE_OFFSET = 0,
    SL_BATCH_OFF_LENGTH = 8,
    SL_BATCH_OFF_EPOCH = 12,
    SL_BATCH_OFF_MAGIC = 16,
    SL_BATCH_OFF_CRC = 17,
    SL_BATCH_OFF_ATTRIBUTES = 21,
    SL_BATCH_OFF_LAST_DELTA = 23,
    SL_BATCH_OFF_BASE_TS = 27,
    SL_BATCH_OFF_MAX_TS = 35,
    SL_BATCH_OFF_PRODUCER_ID = 43,
    SL_BATCH_OFF_PRODUCER_EPOCH = 51,
    SL_BATCH_OFF_BASE_SEQ = 53,
    SL_BATCH_OFF_COUNT = 57,
};

/* Compression codecs, as Kafka numbers them in attributes bits 0-2. */
typedef enum sl_codec { SL_CODEC_NONE = 0, SL_CODEC_ZSTD = 4 } sl_codec;

/* Parses "none" or "zstd". Returns 0 or SL_EINVAL. */
int sl_codec_parse(const char *name, sl_codec *out);
const char *sl_codec_name(sl_codec c);

/* A decoded batch header. */
typedef struct sl_batch_info {
    int64_t base_offset;
    int32_t length; /* batchLength: the batch occupies 12 + length bytes */
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_ts;
    int64_t max_ts;
    int32_t count;
} sl_batch_info;

/* Total bytes of the batch described by info. */
static inline size_t sl_batch_size(const sl_batch_info *info)
{
    return SL_BATCH_LOG_OVERHEAD + (size_t)info->length;
}

/* Decodes and sanity-checks the 61-byte header at p (avail bytes readable).
 * Returns 0, SL_EPARTIAL when avail < 61, or SL_ECORRUPT (bad magic, length,
 * counts or codec) with the reason in err. Does not check the CRC. */
int sl_batch_header(const uint8_t *p, size_t avail, sl_batch_info *out, sl_error *err);

/* sl_batch_header() plus: the whole batch is within avail (else SL_EPARTIAL)
 * and its CRC-32C matches (else SL_ECORRUPT). */
int sl_batch_check(const uint8_t *p, size_t avail, sl_batch_info *out, sl_error *err);

/* An encoded batch ready for sl_log_append(). */
typedef struct sl_batch {
    uint8_t *data; /* 12 + batchLength bytes; the log writes baseOffset into it */
    size_t len;
    int32_t count;
    int64_t max_ts;
    const char *lane; /* "" for the base lane; NUL-terminated */
} sl_batch;

/* Builds one batch at a time from records; reusable across batches so the
 * buffers and the zstd context are allocated once. */
typedef struct sl_batch_builder {
    sl_buf out;      /* header room + encoded records; the finished batch */
    sl_buf recs;     /* scratch for compression (swapped with out) */
    bool compressed; /* finish() swapped in the compressed form */
    int32_t count;
    int64_t base_ts;
    int64_t max_ts;
    char lane[SL_LANE_MAX + 1];
    size_t lane_len;
    sl_codec codec;
    int level;  /* zstd level */
    void *zctx; /* ZSTD_CCtx, created on first zstd finish */
} sl_batch_builder;

/* Prepares an empty builder. zstd_level 0 means zstd's default. */
void sl_batch_builder_init(sl_batch_builder *b, sl_codec codec, int zstd_level);

/* Starts a new batch whose records all carry lane ("" or NULL = base).
 * Returns 0 or SL_EINVAL for a lane that is not [a-z0-9-]{1,32}. */
int sl_batch_builder_reset(sl_batch_builder *b, const char *lane);

/* Appends a record (after sl_batch_builder_reset()) with the headers of a
 * stored CloudEvent: content-type (SL_BATCH_CE_HEADER_*), then lane when
 * the builder's lane is not the base. key may be NULL (null
 * key, key_len ignored). Returns 0, SL_ETOOBIG when the batch would pass
 * SL_BATCH_MAX_BYTES or the record count INT32_MAX, SL_EINVAL when the builder
 * was not reset, or SL_ENOMEM; the batch is unchanged on error. */
int sl_batch_builder_add(sl_batch_builder *b, int64_t ts_ms, const void *key, size_t key_len,
                         const void *value, size_t value_len);

/* The header sl_batch_builder_add() gives every record, before the lane
 * header of a non-base lane: stored values are CloudEvents in the Kafka
 * binding's structured mode. */
#define SL_BATCH_CE_HEADER_KEY "content-type"
#define SL_BATCH_CE_HEADER_VALUE "application/cloudevents+json"

/* sl_batch_builder_add() for a record that keeps its own headers (a Kafka
 * client's): headers[0..headers_len) are header_count entries in Kafka's
 * record header encoding (key length varint, key, value length varint,
 * value), written as they are after the count; the builder adds neither
 * content-type nor lane (the caller keeps batches lane-homogeneous: a lane
 * header among them must name the builder's lane). Returns as
 * sl_batch_builder_add(); SL_EINVAL for a negative count. */
int sl_batch_builder_add_raw(sl_batch_builder *b, int64_t ts_ms, const void *key, size_t key_len,
                             const void *value, size_t value_len, const void *headers,
                             size_t headers_len, int32_t header_count);

/* Uncompressed bytes the batch would take so far (for batching decisions). */
size_t sl_batch_builder_bytes(const sl_batch_builder *b);

/* Encodes the header (baseOffset 0), compresses if configured, computes the
 * CRC. out->data points into the builder and stays valid until the next
 * reset/add/free. Returns 0, SL_EINVAL for an empty batch, SL_ENOMEM or
 * SL_EIO (compression failed). */
int sl_batch_builder_finish(sl_batch_builder *b, sl_batch *out, sl_error *err);

/* Frees the builder's memory. */
void sl_batch_builder_free(sl_batch_builder *b);

/* One record as decoded from a batch; pointers into the batch (or its
 * decompressed copy) and valid until the reader moves on. */
typedef struct sl_record {
    int64_t offset;
    int64_t timestamp;
    const uint8_t *key; /* NULL for a null key */
    size_t key_len;
    const uint8_t *value; /* NULL for a null value */
    size_t value_len;
    const uint8_t *headers; /* raw headers, header_count of them */
    size_t headers_len;
    int32_t header_count;
    const char *lane; /* value of header "lane", not NUL-terminated; "" if none */
    size_t lane_len;
} sl_record;

/* Iterates the records of one batch. */
typedef struct sl_batch_reader {
    sl_batch_info info;
    const uint8_t *p;
    const uint8_t *end;
    int32_t index;
    sl_buf plain; /* decompressed records, reused */
    void *dctx;   /* ZSTD_DCtx, created on first use */
} sl_batch_reader;

void sl_batch_reader_init(sl_batch_reader *r);

/* Points r at the batch in [p, p+len), which must already have passed
 * sl_batch_check(); decompresses if needed. The batch bytes must outlive the
 * iteration. Returns 0, SL_ECORRUPT (bad compressed data, with err) or
 * SL_ENOMEM. */
int sl_batch_reader_open(sl_batch_reader *r, const uint8_t *p, size_t len, sl_error *err);

/* Next record into rec. Returns 0, SL_EEOF after the last one, or
 * SL_ECORRUPT when a record is malformed (reason in err). */
int sl_batch_reader_next(sl_batch_reader *r, sl_record *rec, sl_error *err);

/* The lane of a checked batch: the "lane" header of its first record, copied
 * to lane (SL_LANE_MAX + 1 bytes; "" for base). Uses br for decoding.
 * Returns 0 or SL_ECORRUPT with err. */
int sl_batch_lane(sl_batch_reader *br, const uint8_t *p, size_t len, char *lane, sl_error *err);

/* Decodes every record of a checked batch and confirms each carries lane.
 * Returns 0 or SL_ECORRUPT with err naming the record. */
int sl_batch_validate(sl_batch_reader *br, const uint8_t *p, size_t len, const char *lane,
                      sl_error *err);

/* Frees the reader's memory. */
void sl_batch_reader_free(sl_batch_reader *r);

#endif
