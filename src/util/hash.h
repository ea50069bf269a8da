/* Hash mixing for 64-bit keys (the finaliser of MurmurHash3): cheap, and
 * every input bit affects every output bit, so masked tags spread well. */
#ifndef TMX_UTIL_HASH_H
#define TMX_UTIL_HASH_H

#include <stdint.h>

static inline uint64_t util_hash64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t util_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t m = c * 0x9e3779b97f4a7c15ULL;

    return util_hash64(a ^ (b * 0xbf58476d1ce4e5b9ULL) ^ ((m << 31) | (m >> 33)));
}

#endif
