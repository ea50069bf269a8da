/*
 * Memory registration: the keys under which a peer may access a region of
 * this process, and the check made on every remote access (DESIGN.md,
 * "Registration"). A key is made of a region's slot (its index in the
 * owner's table, so that a check is O(1)) and REG_KEY_RANDOM_BITS bits that
 * a peer cannot predict: SipHash-2-4 under a secret drawn from the kernel
 * when the generator starts, over a counter. Seeing any number of keys
 * tells a peer nothing of the next one, and nothing a peer knows of us
 * (our uuid, our address, our pid) enters the secret. For comparison, an
 * InfiniBand rkey is a 24-bit index with an 8-bit key.
 */
#ifndef TMX_REG_H
#define TMX_REG_H

#include <stdint.h>

#include "tmx.h"

#define REG_KEY_SLOT_BITS 24
#define REG_KEY_RANDOM_BITS (64 - REG_KEY_SLOT_BITS)
#define REG_KEY_SLOTS (UINT32_C(1) << REG_KEY_SLOT_BITS)   /* regions live at once */

typedef struct reg_keygen {
    uint64_t k0, k1;        /* the secret */
    uint64_t counter;       /* keys made so far */
} reg_keygen_t;

/* Draws the secret from the kernel (getrandom; /dev/urandom as fallback).
 * TMX_ERR_INTERNAL, logged, if neither gives randomness: a key a peer
 * could guess is worse than no context. */
tmx_status_t reg_keygen_init(reg_keygen_t *g);

/* A new key for the region in slot (below REG_KEY_SLOTS). */
uint64_t reg_key_make(reg_keygen_t *g, uint32_t slot);

/* The slot a key names; the caller looks it up and calls reg_access_check. */
static inline uint32_t reg_key_slot(uint64_t key)
{
    return (uint32_t)(key & (REG_KEY_SLOTS - 1));
}

/* A registered region as the owner sees it. */
typedef struct reg_region {
    uint64_t base;
    uint64_t len;
    uint64_t key;
} reg_region_t;

/* TMX_OK if len bytes at addr lie inside region r and key is r's key
 * (r NULL: no region in that slot). Otherwise logs why and returns
 * TMX_ERR_NOT_FOUND (unknown key) or TMX_ERR_INVALID (out of bounds). */
tmx_status_t reg_access_check(const reg_region_t *r, uint64_t addr, uint64_t len, uint64_t key);

/* SipHash-2-4 of one 64-bit word under (k0, k1); exposed for its test. */
uint64_t reg_siphash64(uint64_t k0, uint64_t k1, uint64_t m);

#endif
