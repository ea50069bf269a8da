/* Fixed-size object pool: a free list refilled in chunks, so hot paths
 * allocate and free in O(1) without calling malloc. Not thread safe; the
 * owner serialises access. */
#ifndef TMX_UTIL_POOL_H
#define TMX_UTIL_POOL_H

#include <stddef.h>

typedef struct util_pool {
    size_t elem_size;     /* bytes per object, rounded up for alignment */
    size_t chunk_elems;   /* objects per chunk */
    void *free_list;      /* singly linked through the first word */
    void *chunks;         /* singly linked list of chunks, for teardown */
    size_t in_use;        /* objects handed out and not yet returned */
} util_pool_t;

void util_pool_init(util_pool_t *pool, size_t elem_size, size_t chunk_elems);

/* Frees every chunk; objects still in use become invalid. */
void util_pool_fini(util_pool_t *pool);

/* Returns an uninitialised object, or NULL when memory is exhausted. */
void *util_pool_get(util_pool_t *pool);

void util_pool_put(util_pool_t *pool, void *obj);

#endif
