/*
 * core/base/varint.c — Kafka's zig-zag base-128 varints and the big-endian
 * fixed-width helpers used by batch headers and index entries.
 */
#include "core/base/varint.h"

static int64_t unzigzag(uint64_t u)
{
    if (u & 1)
        return -(int64_t)(u >> 1) - 1;
    return (int64_t)(u >> 1);
}

size_t sl_varint_get(const uint8_t *p, const uint8_t *end, int64_t *v)
{
    size_t avail = end > p ? (size_t)(end - p) : 0;
    uint64_t u = 0;

    /* Like Kafka's reader, bits above 64 in a 10th byte are dropped. */
    for (size_t i = 0; i < SL_VARINT_MAX; i++) {
        if (i >= avail)
            return 0;
        uint8_t b = p[i];
        u |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = unzigzag(u);
            return i + 1;
        }
    }
    return 0;
}

void sl_be16_put(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

void sl_be32_put(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

void sl_be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

uint16_t sl_be16_get(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

uint32_t sl_be32_get(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t sl_be64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}
