/*
 * core/base/crc32c.c — CRC-32C for record batch checksums: portable slicing-by-8
 * tables, and on x86-64 an SSE4.2 path that runs three independent crc32
 * streams side by side and stitches them together with zeros-operator tables.
 *
 * Everything below works on the raw CRC register; sl_crc32c() and
 * sl_crc32c_sw() apply the pre- and post-inversion, so a result can be fed
 * back in as the starting value to checksum a buffer in pieces.
 */
#include "core/base/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u /* reflected 0x1EDC6F41 */

/* sw_table[k][b] is the register after byte b followed by k zero bytes. */
static uint32_t sw_table[8][256];
static int use_hw;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t sw_raw(uint32_t crc, const uint8_t *p, size_t len)
{
    /* Bytes one at a time until p is 8-aligned, so the main loop's loads are. */
    while (len && ((uintptr_t)p & 7)) {
        crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo = crc ^ le32(p);
        uint32_t hi = le32(p + 4);
        crc = sw_table[7][lo & 0xff] ^ sw_table[6][(lo >> 8) & 0xff] ^
              sw_table[5][(lo >> 16) & 0xff] ^ sw_table[4][lo >> 24] ^ sw_table[3][hi & 0xff] ^
              sw_table[2][(hi >> 8) & 0xff] ^ sw_table[1][(hi >> 16) & 0xff] ^
              sw_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static void build_sw_tables(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        sw_table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t prev = sw_table[k - 1][b];
            sw_table[k][b] = (prev >> 8) ^ sw_table[0][prev & 0xff];
        }
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/*
 * The register update is linear over GF(2) in (register, data) together, so
 * crc(r, A||B) == Z(r after A) ^ crc(0, B), where Z is the effect of feeding
 * |B| zero bytes. Three blocks are therefore checksummed independently (two of
 * them from 0) and combined with Z applied twice. The crc32 instruction has a
 * latency of 3 cycles and a throughput of 1, so three streams keep it busy.
 *
 * Z is a 32x32 bit matrix; it is applied a byte of the register at a time
 * through 4 tables of 256 entries, built once at init.
 */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256
#define TARGET_SSE42 __attribute__((target("sse4.2")))

static uint32_t zeros_long[4][256];
static uint32_t zeros_short[4][256];

static void build_zeros_table(uint32_t tab[4][256], size_t nbytes)
{
    static const uint8_t zeros[512];
    uint32_t col[32];

    /* Column i is what nbytes zero bytes make of a register holding bit i. */
    for (int i = 0; i < 32; i++) {
        uint32_t r = (uint32_t)1 << i;
        for (size_t left = nbytes; left;) {
            size_t n = left < sizeof zeros ? left : sizeof zeros;
            r = sw_raw(r, zeros, n);
            left -= n;
        }
        col[i] = r;
    }
    /* Each entry is the XOR of the columns of its set bits. */
    for (int k = 0; k < 4; k++) {
        tab[k][0] = 0;
        for (int bit = 0; bit < 8; bit++)
            for (int b = 1 << bit; b < 2 << bit; b++)
                tab[k][b] = tab[k][b ^ (1 << bit)] ^ col[8 * k + bit];
    }
}

static uint32_t zeros_apply(const uint32_t tab[4][256], uint32_t crc)
{
    return tab[0][crc & 0xff] ^ tab[1][(crc >> 8) & 0xff] ^ tab[2][(crc >> 16) & 0xff] ^
           tab[3][crc >> 24];
}

static uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v); /* x86 is little-endian, which crc32 expects */
    return v;
}

/* Consumes 3 * block bytes at a time, while they last, as three interleaved
 * streams; *pp and *lenp are advanced past what was consumed. */
TARGET_SSE42 static inline uint32_t hw_three_way(uint32_t crc, const uint8_t **pp, size_t *lenp,
                                                 size_t block, const uint32_t tab[4][256])
{
    const uint8_t *p = *pp;
    size_t len = *lenp;
    while (len >= 3 * block) {
        uint64_t c0 = crc, c1 = 0, c2 = 0;
        const uint8_t *stop = p + block;
        do {
            c0 = _mm_crc32_u64(c0, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + block));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * block));
            p += 8;
        } while (p < stop);
        crc = zeros_apply(tab, (uint32_t)c0) ^ (uint32_t)c1;
        crc = zeros_apply(tab, crc) ^ (uint32_t)c2;
        p += 2 * block;
        len -= 3 * block;
    }
    *pp = p;
    *lenp = len;
    return crc;
}

TARGET_SSE42 static uint32_t hw_raw(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = _mm_crc32_u8(crc, *p++);
        len--;
    }
    crc = hw_three_way(crc, &p, &len, LONG_BLOCK, zeros_long);
    crc = hw_three_way(crc, &p, &len, SHORT_BLOCK, zeros_short);
    uint64_t c = crc;
    while (len >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        len -= 8;
    }
    crc = (uint32_t)c;
    while (len--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}

static int hw_detect(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2"))
        return 0;
    build_zeros_table(zeros_long, LONG_BLOCK);
    build_zeros_table(zeros_short, SHORT_BLOCK);
    return 1;
}
#else
static int hw_detect(void)
{
    return 0;
}

static uint32_t hw_raw(uint32_t crc, const uint8_t *p, size_t len)
{
    return sw_raw(crc, p, len);
}
#endif

static void crc32c_init(void)
{
    build_sw_tables();
    use_hw = hw_detect();
}

uint32_t sl_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&init_once, crc32c_init);
    if (use_hw)
        return ~hw_raw(~crc, buf, len);
    return ~sw_raw(~crc, buf, len);
}

uint32_t sl_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&init_once, crc32c_init);
    return ~sw_raw(~crc, buf, len);
}

int sl_crc32c_hw_available(void)
{
    pthread_once(&init_once, crc32c_init);
    return use_hw;
}
