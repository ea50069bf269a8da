/* Copies of a few bytes without a call to memcpy: most messages are
 * short, and for them the call (through the PLT to an ifunc'ed routine)
 * costs more than the copy. Overlapping fixed-size moves, which the
 * compiler turns into a load and a store each. */
#ifndef TMX_UTIL_COPY_H
#define TMX_UTIL_COPY_H

#include <stddef.h>
#include <string.h>

static inline void util_copy(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;

    if (n >= 8 && n <= 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n > 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n > 32 && n <= 64) {
        memcpy(d, s, 32);
        memcpy(d + n - 32, s + n - 32, 32);
    } else if (n >= 4 && n < 8) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n > 0 && n < 4) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    } else if (n != 0) { /* an empty copy may come with no buffers */
        memcpy(d, s, n);
    }
}

/* Zeroes n bytes, n a constant of the caller's, in pieces of at most 64:
 * the compiler writes each as a few vector stores. A memset of 96 bytes
 * or more it turns into rep stos, whose start-up costs tens of cycles:
 * too much for what every request pays when it is made. */
static inline void util_zero(void *p, size_t n)
{
    unsigned char *c = p;

    for (; n > 64; c += 64, n -= 64)
        memset(c, 0, 64);
    memset(c, 0, n);
}

#endif
