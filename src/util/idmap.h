/*
 * A map from 64-bit identities (context uuids) to pointers: open
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
    uint64_t *keys;
    void **vals;            /* NULL: an empty slot */
    uint32_t cap;           /* a power of two, or 0 before the first put */
    uint32_t n;
    uint64_t seed;
} util_idmap_t;

void util_idmap_init(util_idmap_t *m);
void util_idmap_fini(util_idmap_t *m);

/* The value stored under id, or NULL. */
void *util_idmap_get(const util_idmap_t *m, uint64_t id);

/* Stores val (not NULL) under id, replacing any value there. -1 when out
 * of memory (the map is unchanged), else 0. */
int util_idmap_put(util_idmap_t *m, uint64_t id, void *val);

/* Removes id if present. */
void util_idmap_del(util_idmap_t *m, uint64_t id);

#endif
