#include <stdlib.h>

#include "core/core.h"
#include "util/fault.h"
#include "util/log.h"

#define CQ_INITIAL 256

tmx_status_t core_cq_init(core_cq_t *cq)
{
    cq->ring = malloc(CQ_INITIAL * sizeof(*cq->ring));
    if (cq->ring == NULL)
        return TMX_ERR_NOMEM;
    cq->cap = CQ_INITIAL;
    cq->head = 0;
    cq->count = 0;
    cq->reserved = 0;
    return TMX_OK;
}

void core_cq_fini(core_cq_t *cq)
{
    free(cq->ring);
    cq->ring = NULL;
}

static atomic_uint grow_fails; /* core_cq_test_fail_grow */

void core_cq_test_fail_grow(unsigned n)
{
    atomic_store(&grow_fails, n);
}

/* Doubles the ring, unrolling it so that head is 0 again. */
static tmx_status_t cq_grow(core_cq_t *cq)
{
    size_t cap = cq->cap * 2;
    tmx_completion_t *ring = util_fault_take(&grow_fails) ? NULL : malloc(cap * sizeof(*ring));

    if (ring == NULL)
        return TMX_ERR_NOMEM;
    for (size_t i = 0; i < cq->count; i++)
        ring[i] = cq->ring[(cq->head + i) & (cq->cap - 1)];
    free(cq->ring);
    cq->ring = ring;
    cq->cap = cap;
    cq->head = 0;
    return TMX_OK;
}

/* The queue grows rather than overruns: every operation accepted has
 * exactly one entry waiting for it, so its size is bounded by the
 * operations the caller has in flight. It grows when an operation is
 * accepted, which can fail then with TMX_ERR_NOMEM, and not when the
 * operation completes, where a failure would lose its completion. */
tmx_status_t core_cq_reserve(core_cq_t *cq)
{
    if (cq->count + cq->reserved == cq->cap && cq_grow(cq) != TMX_OK) {
        util_error("out of memory growing the completion queue past %zu entries: operation refused",
                   cq->cap);
        return TMX_ERR_NOMEM;
    }
    cq->reserved++;
    return TMX_OK;
}

tmx_status_t core_cq_push(core_cq_t *cq, const tmx_completion_t *c)
{
    if (cq->count + cq->reserved >= cq->cap && cq_grow(cq) != TMX_OK) {
        util_error("out of memory growing the completion queue past %zu entries", cq->cap);
        return TMX_ERR_NOMEM;
    }
    cq->ring[(cq->head + cq->count) & (cq->cap - 1)] = *c;
    cq->count++;
    return TMX_OK;
}

size_t core_cq_pop(core_cq_t *cq, tmx_completion_t *out, size_t max)
{
    size_t n = max < cq->count ? max : cq->count;

    for (size_t i = 0; i < n; i++)
        out[i] = cq->ring[(cq->head + i) & (cq->cap - 1)];
    cq->head = (cq->head + n) & (cq->cap - 1);
    cq->count -= n;
    return n;
}
