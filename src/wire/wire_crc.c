/*
 * wire_crc.c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum of OP_MSG.  Software slice-by-8 everywhere; on x86-64 the SSE4.2
 * crc32 instruction when cpuid says the CPU has it.  Both paths must give
 * identical results (the unit test checks the known vector and both paths
 * agree on random data through the public function).
 */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "wire/wire.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static bool crc_have_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* Slice-by-8 over a pre-inverted crc. */
static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n)
{
    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                      (uint32_t)p[3] << 24;
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        lo ^= c;
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
            crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* Only called after cpuid reported SSE4.2. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c = __builtin_ia32_crc32qi(c, *p++);
        n--;
    }
    unsigned long long c64 = c;
    while (n >= 8) {
        unsigned long long v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n-- > 0)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t sbl_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    uint32_t c = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_have_hw)
        return ~crc_hw(c, p, n);
#endif
    return ~crc_sw(c, p, n);
}

/* Test hook: the software path alone, so the unit test can compare paths. */
uint32_t sbl_crc32c_sw(uint32_t crc, const void *p, size_t n);
uint32_t sbl_crc32c_sw(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    return ~crc_sw(~crc, p, n);
}
