#include "util/pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/log.h"

#define POOL_ALIGN 16

void util_pool_init(util_pool_t *pool, size_t elem_size, size_t chunk_elems)
{
    util_pool_init_align(pool, elem_size, chunk_elems, POOL_ALIGN);
}

void util_pool_init_align(util_pool_t *pool, size_t elem_size, size_t chunk_elems, size_t align)
{
    if (align < sizeof(void *) || align > POOL_ALIGN || (align & (align - 1)) != 0)
        align = POOL_ALIGN;
    if (elem_size < sizeof(void *))
        elem_size = sizeof(void *);
    pool->elem_size = (elem_size + align - 1) & ~(size_t)(align - 1);
    pool->chunk_elems = chunk_elems ? chunk_elems : 64;
    pool->free_list = NULL;
    pool->chunks = NULL;
    pool->in_use = 0;
    pool->n_chunks = 0;
    pool->keep = 0;
    pool->limit = 0;
    pool->chunk_bytes = POOL_ALIGN + pool->elem_size * pool->chunk_elems;
    pool->mapped = 0;
    pool->spare = NULL;
    pool->n_spare = pool->spare_cap = 0;
    pool->stuck = 0;
}

int util_pool_init_mapped(util_pool_t *pool, size_t elem_size, size_t chunk_elems)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t bytes;

    util_pool_init(pool, elem_size, chunk_elems);
    if (page <= 0)
        return -1;
    bytes = (pool->chunk_bytes + (size_t)page - 1) & ~((size_t)page - 1);
    pool->chunk_elems = (bytes - POOL_ALIGN) / pool->elem_size;
    pool->chunk_bytes = bytes;
    pool->mapped = 1;
    return 0;
}

static void chunk_release(util_pool_t *pool, void *chunk)
{
    if (pool->mapped)
        munmap(chunk, pool->chunk_bytes);
    else
        free(chunk);
}

/* A trimmed chunk: a mapped pool keeps its addresses and gives its pages
 * back; -1 when it cannot be remembered (the caller keeps it live). */
static int chunk_retire(util_pool_t *pool, void *chunk)
{
    if (!pool->mapped) {
        free(chunk);
        return 0;
    }
    if (pool->stuck)
        return -1; /* a chunk before this one could not be given back */
    if (pool->n_spare == pool->spare_cap) {
        size_t cap = pool->spare_cap ? pool->spare_cap * 2 : 8;
        void **spare = realloc(pool->spare, cap * sizeof(*spare));
        if (spare == NULL)
            return -1;
        pool->spare = spare;
        pool->spare_cap = cap;
    }
    /* MADV_DONTNEED on private anonymous memory: the pages are freed and
     * read as zeros from now on. Locked memory (mlockall) refuses: the
     * pool then stops trying. */
    if (madvise(chunk, pool->chunk_bytes, MADV_DONTNEED) != 0) {
        util_info("a pool cannot give its memory back (%s): from now on it keeps what it grew to",
                  strerror(errno));
        pool->stuck = 1;
        return -1;
    }
    pool->spare[pool->n_spare++] = chunk;
    return 0;
}

void util_pool_set_keep(util_pool_t *pool, size_t keep)
{
    pool->keep = keep;
}

void util_pool_set_limit(util_pool_t *pool, size_t limit)
{
    pool->limit = limit;
}

int util_pool_reserve(util_pool_t *pool, size_t n)
{
    while (pool->n_chunks * pool->chunk_elems - pool->in_use < n) {
        if (util_pool_grow(pool) != 0)
            return -1;
    }
    return 0;
}

void util_pool_trim(util_pool_t *pool)
{
    if (pool->keep != 0)
        util_pool_trim_to(pool, pool->keep);
}

void util_pool_trim_to(util_pool_t *pool, size_t keep)
{
    char *chunk = pool->chunks, *next;
    size_t n = 0;

    if (keep == 0)
        keep = 1;
    if (pool->in_use != 0 || pool->n_chunks <= keep || pool->stuck)
        return;
    /* the kept chunks' objects make the free list anew */
    pool->free_list = NULL;
    while (chunk != NULL && n < keep) {
        for (size_t i = 0; i < pool->chunk_elems; i++) {
            void *obj = chunk + POOL_ALIGN + i * pool->elem_size;
            *(void **)obj = pool->free_list;
            pool->free_list = obj;
        }
        n++;
        if (n == keep) {
            next = *(void **)chunk;
            *(void **)chunk = NULL;
            chunk = next;
            break;
        }
        chunk = *(void **)chunk;
    }
    while (chunk != NULL) {
        next = *(void **)chunk;
        if (chunk_retire(pool, chunk) != 0) {
            /* kept live after all: its objects go back on the free list */
            *(void **)chunk = pool->chunks;
            pool->chunks = chunk;
            n++;
            for (size_t i = 0; i < pool->chunk_elems; i++) {
                void *obj = chunk + POOL_ALIGN + i * pool->elem_size;
                *(void **)obj = pool->free_list;
                pool->free_list = obj;
            }
        }
        chunk = next;
    }
    pool->n_chunks = n;
}

void util_pool_fini(util_pool_t *pool)
{
    void *chunk = pool->chunks;

    while (chunk != NULL) {
        void *next = *(void **)chunk;
        chunk_release(pool, chunk);
        chunk = next;
    }
    for (size_t i = 0; i < pool->n_spare; i++)
        chunk_release(pool, pool->spare[i]);
    free(pool->spare);
    pool->spare = NULL;
    pool->n_spare = pool->spare_cap = 0;
    pool->chunks = NULL;
    pool->free_list = NULL;
    pool->in_use = 0;
    pool->n_chunks = 0;
}

int util_pool_grow(util_pool_t *pool)
{
    char *chunk;

    if (pool->limit != 0 && pool->n_chunks >= pool->limit)
        return -1;
    if (pool->n_spare != 0) {
        chunk = pool->spare[--pool->n_spare];
    } else if (pool->mapped) {
        chunk = mmap(NULL, pool->chunk_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (chunk == MAP_FAILED)
            return -1;
    } else {
        chunk = malloc(pool->chunk_bytes);
        if (chunk == NULL)
            return -1;
    }
    *(void **)chunk = pool->chunks;
    pool->chunks = chunk;
    pool->n_chunks++;
    for (size_t i = 0; i < pool->chunk_elems; i++) {
        void *obj = chunk + POOL_ALIGN + i * pool->elem_size;
        *(void **)obj = pool->free_list;
        pool->free_list = obj;
        util_pool_poison(pool, obj, 1);
    }
    return 0;
}
