#include "util/pool.h"

#include <stdint.h>
#include <stdlib.h>

#define POOL_ALIGN 16

void util_pool_init(util_pool_t *pool, size_t elem_size, size_t chunk_elems)
{
    if (elem_size < sizeof(void *))
        elem_size = sizeof(void *);
    pool->elem_size = (elem_size + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1);
    pool->chunk_elems = chunk_elems ? chunk_elems : 64;
    pool->free_list = NULL;
    pool->chunks = NULL;
    pool->in_use = 0;
    pool->n_chunks = 0;
    pool->keep = 0;
    pool->limit = 0;
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
    if (pool->in_use != 0 || pool->n_chunks <= keep)
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
        free(chunk);
        chunk = next;
    }
    pool->n_chunks = n;
}

void util_pool_fini(util_pool_t *pool)
{
    void *chunk = pool->chunks;

    while (chunk != NULL) {
        void *next = *(void **)chunk;
        free(chunk);
        chunk = next;
    }
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
    chunk = malloc(POOL_ALIGN + pool->elem_size * pool->chunk_elems);

    if (chunk == NULL)
        return -1;
    *(void **)chunk = pool->chunks;
    pool->chunks = chunk;
    pool->n_chunks++;
    for (size_t i = 0; i < pool->chunk_elems; i++) {
        void *obj = chunk + POOL_ALIGN + i * pool->elem_size;
        *(void **)obj = pool->free_list;
        pool->free_list = obj;
    }
    return 0;
}
