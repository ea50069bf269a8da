/* Fixed-size object pool: a free list refilled in chunks, so hot paths
 * allocate and free in O(1) without calling malloc. Not thread safe; the
 * owner serialises access. */
#ifndef TMX_UTIL_POOL_H
#define TMX_UTIL_POOL_H

#include <stddef.h>

/* Under AddressSanitizer, an object on a pool's free list is poisoned
 * (all but its first word, the free-list link), so that a use after
 * util_pool_put is reported as one after free() would be. Mapped pools
 * are left alone: the API reads a freed request's fields on purpose, to
 * refuse a stale handle (util_pool_init_mapped). */
#if defined(__SANITIZE_ADDRESS__)
#define UTIL_POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UTIL_POOL_ASAN 1
#endif
#endif
#ifdef UTIL_POOL_ASAN
#include <sanitizer/asan_interface.h>
#endif

typedef struct util_pool {
    size_t elem_size;     /* bytes per object, rounded up for alignment */
    size_t chunk_elems;   /* objects per chunk */
    void *free_list;      /* singly linked through the first word */
    void *chunks;         /* singly linked list of chunks, for teardown */
    size_t in_use;        /* objects handed out and not yet returned */
    size_t n_chunks;
    size_t keep;          /* chunks kept when the last object comes back
                             (0: all, always) */
    size_t limit;         /* chunks at most (0: no bound) */
    size_t chunk_bytes;   /* bytes a chunk takes (mapped: whole pages) */
    int mapped;           /* chunks are private mappings (util_pool_init_mapped) */
    void **spare;         /* mapped: trimmed chunks, pages given back */
    int stuck;            /* mapped: pages could not be given back (locked
                             memory): no more trims */
    size_t n_spare, spare_cap;
} util_pool_t;

void util_pool_init(util_pool_t *pool, size_t elem_size, size_t chunk_elems);

/* The same, objects aligned to align (a power of two from 8 to 16)
 * instead of 16: a pool of many small objects whose type needs no more
 * (an object of 72 bytes then takes 72, not 80). */
void util_pool_init_align(util_pool_t *pool, size_t elem_size, size_t chunk_elems, size_t align);

/* A pool whose chunks are private anonymous mappings that stay mapped
 * until fini: a chunk it trims gives its pages back to the system
 * (madvise MADV_DONTNEED) and is reused by a later grow. Memory that held
 * an object stays readable, as zeros once given back, so a stale handle
 * to a trimmed object can be recognised as such (its fields read 0)
 * instead of reading memory malloc has handed to someone else. The chunk
 * count is rounded up so that chunks fill whole pages. */
int util_pool_init_mapped(util_pool_t *pool, size_t elem_size, size_t chunk_elems);

/* Bytes the pool's live chunks take (what is given back is not counted). */
static inline size_t util_pool_bytes(const util_pool_t *pool)
{
    return pool->n_chunks * pool->chunk_bytes;
}

/* Frees every chunk; objects still in use become invalid. */
void util_pool_fini(util_pool_t *pool);

/* Adds a chunk of objects to the free list; -1 when out of memory. */
int util_pool_grow(util_pool_t *pool);

/* From now on, whenever the last object in use comes back to a pool that
 * has grown past twice keep chunks, the chunks beyond keep are freed: a
 * burst's high water is not held for ever, and a load that hovers around
 * keep does not free and allocate a chunk each time it goes idle. */
void util_pool_set_keep(util_pool_t *pool, size_t keep);

/* Frees the chunks beyond keep; only with no object in use. */
void util_pool_trim(util_pool_t *pool);

/* Frees the chunks beyond n (at least 1 stays); only with no object in
 * use: for an owner that knows it has gone idle, where keep serves a
 * load that comes and goes. */
void util_pool_trim_to(util_pool_t *pool, size_t n);

/* The pool grows to at most limit chunks (0: no bound): past it, a get
 * returns NULL as when memory is exhausted. */
void util_pool_set_limit(util_pool_t *pool, size_t limit);

/* Grows the pool until n objects are free, so that the next n gets
 * succeed; -1 (and the pool as it was or larger) when it cannot. */
int util_pool_reserve(util_pool_t *pool, size_t n);

/* Marks a free object unusable (poison 1) or usable again (0), under
 * AddressSanitizer; nothing otherwise. */
static inline void util_pool_poison(const util_pool_t *pool, void *obj, int poison)
{
#ifdef UTIL_POOL_ASAN
    if (pool->mapped)
        return;
    if (poison)
        ASAN_POISON_MEMORY_REGION((char *)obj + sizeof(void *), pool->elem_size - sizeof(void *));
    else
        ASAN_UNPOISON_MEMORY_REGION((char *)obj + sizeof(void *), pool->elem_size - sizeof(void *));
#else
    (void)pool;
    (void)obj;
    (void)poison;
#endif
}

/* Returns an uninitialised object, or NULL when memory is exhausted.
 * Inline: every message takes and gives back a few. */
static inline void *util_pool_get(util_pool_t *pool)
{
    void *obj;

    if (__builtin_expect(pool->free_list == NULL, 0) && util_pool_grow(pool) != 0)
        return NULL;
    obj = pool->free_list;
    pool->free_list = *(void **)obj;
    pool->in_use++;
    util_pool_poison(pool, obj, 0);
    return obj;
}

static inline void util_pool_put(util_pool_t *pool, void *obj)
{
    *(void **)obj = pool->free_list;
    pool->free_list = obj;
    util_pool_poison(pool, obj, 1);
    if (--pool->in_use == 0 && __builtin_expect(pool->keep != 0 && pool->n_chunks > 2 * pool->keep, 0))
        util_pool_trim(pool);
}

#endif
