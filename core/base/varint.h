/*
 * core/base/varint.h — Kafka's variable-length integers: zig-zag encoded base-128
 * varints (protobuf style), as used inside record batch v2 records.
 */
#ifndef SL_VARINT_H
#define SL_VARINT_H

#include <stddef.h>
#include <stdint.h>

#define SL_VARINT_MAX 10 /* bytes a zig-zag int64 can take */

/* Zig-zag maps 0, -1, 1, -2, ... to 0, 1, 2, 3, ... so small negative numbers
 * stay short. Written without shifting signed values, so nothing here depends
 * on implementation-defined behaviour. */
static inline uint64_t sl_varint_zigzag(int64_t v)
{
    if (v < 0)
        return (uint64_t)(-(v + 1)) << 1 | 1;
    return (uint64_t)v << 1;
}

/* Writes v zig-zag encoded to out (room for SL_VARINT_MAX bytes); returns the
 * number of bytes written. Inline, as sl_varint_size(): a record of a batch
 * takes a dozen of them, which as calls were a tenth of building a batch. */
static inline size_t sl_varint_put(uint8_t *out, int64_t v)
{
    uint64_t u = sl_varint_zigzag(v);
    size_t n = 0;
    while (u >= 0x80) {
        out[n++] = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    out[n++] = (uint8_t)u;
    return n;
}

/* Bytes sl_varint_put() would write for v. */
static inline size_t sl_varint_size(int64_t v)
{
    uint64_t u = sl_varint_zigzag(v);
    size_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

/* Reads one zig-zag varint from [p, end) into *v. Returns bytes consumed, or
 * 0 when the input ends inside the varint or it is longer than 10 bytes
 * (*v untouched). Never reads at or past end. */
size_t sl_varint_get(const uint8_t *p, const uint8_t *end, int64_t *v);

/* Big-endian fixed-width helpers for batch headers and index entries. */
void sl_be16_put(uint8_t *p, uint16_t v);
void sl_be32_put(uint8_t *p, uint32_t v);
void sl_be64_put(uint8_t *p, uint64_t v);
uint16_t sl_be16_get(const uint8_t *p);
uint32_t sl_be32_get(const uint8_t *p);
uint64_t sl_be64_get(const uint8_t *p);

#endif
