#include "util/crc32c.h"

#include <string.h>

static uint32_t crc_table[256];
static int crc_hw = -1;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
        crc_table[i] = c;
    }
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw64(uint32_t crc, const unsigned char *p,
                                                          size_t len)
{
    uint64_t c = crc;

    for (; len >= 8; len -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    crc = (uint32_t)c;
    for (; len > 0; len--)
        crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
#endif

static void crc_init(void)
{
    table_init();
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#else
    crc_hw = 0;
#endif
}

uint32_t util_crc32c(uint32_t crc, const void *data, size_t len)
{
    if (crc_hw < 0)
        crc_init();
    crc = ~crc;
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_hw64(crc, data, len);
#endif
    return ~crc_sw(crc, data, len);
}
