/*
 * core/base/varint.h — Kafka's variable-length integers: zig-zag encoded base-128
 * varints (protobuf style), as used inside record batch v2 records.
 */
#ifndef SL_VARINT_H
#define SL_VARINT_H

#include <stddef.h>
#include <stdint.h>

#define SL_VARINT_MAX 10 /* bytes a zig-zag int64 can take */

/* Writes v zig-zag encoded to out (room for SL_VARINT_MAX bytes); returns the
 * number of bytes written. */
size_t sl_varint_put(uint8_t *out, int64_t v);

/* Bytes sl_varint_put() would write for v. */
size_t sl_varint_size(int64_t v);

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
