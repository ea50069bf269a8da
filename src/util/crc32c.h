/* CRC-32C (Castagnoli): with carry-less multiplication over 512-bit
 * registers where the CPU has it (VPCLMULQDQ, AVX-512), else with the
 * SSE4.2 instruction, else by table. */
#ifndef TMX_UTIL_CRC32C_H
#define TMX_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t util_crc32c(uint32_t crc, const void *data, size_t len);

enum util_crc32c_impl {
    UTIL_CRC32C_TABLE = 0,
    UTIL_CRC32C_SSE42 = 1,   /* the crc32 instruction, three chains */
    UTIL_CRC32C_VPCLMUL = 2  /* folding by carry-less multiplication */
};

/* For tests: uses at most the given implementation from now on; returns
 * the one now in use (the best the CPU has, up to that). */
int util_crc32c_limit(int impl);

#endif
