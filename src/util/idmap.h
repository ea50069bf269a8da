/*
 * A map from 64-bit identities (context uuids) to objects that carry them: open
 * addressing with linear probing, O(1) per lookup. Identities come from
 * the wire, so the slot is a hash of the identity mixed with a secret
 * seed drawn per map: a peer cannot choose identities that pile up on one
 * probe chain, since it does not know where any identity lands. Not
 * thread-safe: its owner serialises.
 */
#ifndef TMX_UTIL_IDMAP_H
#define TMX_UTIL_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct util_idmap {
    void **vals;            /* NULL: an empty slot */
    uint32_t cap;           /* slots: 0 before the first put, then
                               UTIL_IDMAP_FIRST, growing by half,
                               shrinking by half */
    uint32_t n;
    uint64_t seed;
    size_t key_off;         /* a value's key: the uint64_t at this offset */
} util_idmap_t;

#define UTIL_IDMAP_FIRST 16

/* Values carry their own key (a uint64_t at key_off in the object), so a
 * slot is one pointer: 8 bytes per slot. The map is at most 3/4 full and
 * grows by half, so it holds one and a third to two slots per entry (a
 * map of peers has one per remote process), and a lookup reads 2.5 slots
 * on average when the map is fullest. Under a quarter full, a deletion
 * halves it (down to UTIL_IDMAP_FIRST slots). */
void util_idmap_init(util_idmap_t *m, size_t key_off);
void util_idmap_fini(util_idmap_t *m);

static inline uint64_t util_idmap_key(const util_idmap_t *m, const void *val)
{
    return *(const uint64_t *)((const char *)val + m->key_off);
}

/* The value stored under id, or NULL. */
void *util_idmap_get(const util_idmap_t *m, uint64_t id);

/* Stores val (not NULL) under its key, replacing any value there. -1 when
 * out of memory (the map is unchanged), else 0. */
int util_idmap_put(util_idmap_t *m, void *val);

/* Removes id if present. */
void util_idmap_del(util_idmap_t *m, uint64_t id);

/* Iteration in slot order: the value at slot *i or after, and *i past
 * it; NULL at the end. Start with *i = 0. A map changed meanwhile (a put
 * that grows it, a del that moves later values back or shrinks it) may
 * make the walk skip or repeat values, never give a removed one. */
static inline void *util_idmap_next(const util_idmap_t *m, uint32_t *i)
{
    while (*i < m->cap) {
        void *v = m->vals[(*i)++];
        if (v != NULL)
            return v;
    }
    return NULL;
}

#endif
