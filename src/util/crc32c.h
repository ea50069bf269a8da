/* CRC-32C (Castagnoli), with the SSE4.2 instruction where the CPU has it. */
#ifndef TMX_UTIL_CRC32C_H
#define TMX_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t util_crc32c(uint32_t crc, const void *data, size_t len);

#endif
