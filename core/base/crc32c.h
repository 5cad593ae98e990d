/*
 * core/base/crc32c.h — CRC-32C (Castagnoli, polynomial 0x1EDC6F41 / reflected
 * 0x82F63B78), the checksum of Kafka's record batch v2.
 *
 * Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run
 * time) and portable slicing-by-8 tables otherwise; both give identical
 * results.
 */
#ifndef SL_CRC32C_H
#define SL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) with len bytes at buf and returns the new value.
 * sl_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t sl_crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable path alone, for tests that compare both implementations. */
uint32_t sl_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* 1 when sl_crc32c() uses the hardware instruction. */
int sl_crc32c_hw_available(void);

#endif
