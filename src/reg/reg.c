#include "reg/reg.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "util/log.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void sip_round(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = ROTL(v[1], 13);
    v[1] ^= v[0];
    v[0] = ROTL(v[0], 32);
    v[2] += v[3];
    v[3] = ROTL(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = ROTL(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = ROTL(v[1], 17);
    v[1] ^= v[2];
    v[2] = ROTL(v[2], 32);
}

/* SipHash-2-4 (Aumasson and Bernstein) of the 8-byte little-endian message m. */
uint64_t reg_siphash64(uint64_t k0, uint64_t k1, uint64_t m)
{
    uint64_t v[4] = {k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL,
                     k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL};
    uint64_t last = (uint64_t)8 << 56;

    v[3] ^= m;
    sip_round(v);
    sip_round(v);
    v[0] ^= m;
    v[3] ^= last;
    sip_round(v);
    sip_round(v);
    v[0] ^= last;
    v[2] ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

static int urandom_read(void *buf, size_t len)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = read(fd, buf, len);
    close(fd);
    return n == (ssize_t)len ? 0 : -1;
}

tmx_status_t reg_keygen_init(reg_keygen_t *g)
{
    uint64_t k[2];
    ssize_t n;

    do
        n = getrandom(k, sizeof(k), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(k) && urandom_read(k, sizeof(k)) != 0) {
        util_error("no randomness from the kernel for remote-access keys (getrandom: %s)",
                   n < 0 ? strerror(errno) : "short read");
        return TMX_ERR_INTERNAL;
    }
    g->k0 = k[0];
    g->k1 = k[1];
    g->counter = 0;
    return TMX_OK;
}

uint64_t reg_key_make(reg_keygen_t *g, uint32_t slot)
{
    uint64_t r = reg_siphash64(g->k0, g->k1, g->counter++);

    return (r << REG_KEY_SLOT_BITS) | (slot & (REG_KEY_SLOTS - 1));
}

/* Refusals so far, in the process. A peer that guesses keys, or one that
 * keeps using a key after deregistration, would otherwise fill the log
 * with a line each: the first refusal is logged, then the 2^k-th. */
static uint64_t reg_refusals;

/* The number of this refusal if it is to be logged, else 0. */
static uint64_t refusal_count(void)
{
    uint64_t n = __atomic_add_fetch(&reg_refusals, 1, __ATOMIC_RELAXED);

    return (n & (n - 1)) == 0 ? n : 0;
}

tmx_status_t reg_access_check(const reg_region_t *r, uint64_t addr, uint64_t len, uint64_t key)
{
    uint64_t n;

    if (r == NULL || r->key != key) {
        if ((n = refusal_count()) != 0)
            util_error("refused a remote access under unknown key 0x%llx (%llu refusals so far)",
                       (unsigned long long)key, (unsigned long long)n);
        return TMX_ERR_NOT_FOUND;
    }
    if (addr < r->base || len > r->len || addr - r->base > r->len - len) {
        if ((n = refusal_count()) != 0)
            util_error("refused a remote access of %llu bytes at 0x%llx outside its %llu-byte region "
                       "(%llu refusals so far)", (unsigned long long)len, (unsigned long long)addr,
                       (unsigned long long)r->len, (unsigned long long)n);
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}
