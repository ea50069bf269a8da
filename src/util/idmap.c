#include "util/idmap.h"

#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

#include "util/hash.h"

void util_idmap_init(util_idmap_t *m, size_t key_off)
{
    struct timespec ts;

    *m = (util_idmap_t){0};
    m->key_off = key_off;
    /* Without randomness the map still works, only less well guarded. */
    if (getrandom(&m->seed, sizeof(m->seed), GRND_NONBLOCK) != sizeof(m->seed)) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        m->seed = util_hash64((uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)m);
    }
}

void util_idmap_fini(util_idmap_t *m)
{
    size_t key_off = m->key_off;

    free(m->vals);
    *m = (util_idmap_t){0};
    m->key_off = key_off;
}

static uint32_t slot_of(const util_idmap_t *m, uint64_t id)
{
    return (uint32_t)util_hash64(id ^ m->seed) & (m->cap - 1);
}

void *util_idmap_get(const util_idmap_t *m, uint64_t id)
{
    if (m->cap == 0)
        return NULL;
    for (uint32_t i = slot_of(m, id);; i = (i + 1) & (m->cap - 1)) {
        if (m->vals[i] == NULL)
            return NULL;
        if (util_idmap_key(m, m->vals[i]) == id)
            return m->vals[i];
    }
}

static void put_new(util_idmap_t *m, void *val)
{
    uint32_t i = slot_of(m, util_idmap_key(m, val));

    while (m->vals[i] != NULL)
        i = (i + 1) & (m->cap - 1);
    m->vals[i] = val;
    m->n++;
}

static int grow(util_idmap_t *m)
{
    util_idmap_t old = *m;
    uint32_t cap = old.cap ? old.cap * 2 : 16;

    m->vals = calloc(cap, sizeof(*m->vals));
    if (m->vals == NULL || cap == 0) {
        free(m->vals);
        *m = old;
        return -1;
    }
    m->cap = cap;
    m->n = 0;
    for (uint32_t i = 0; i < old.cap; i++) {
        if (old.vals[i] != NULL)
            put_new(m, old.vals[i]);
    }
    free(old.vals);
    return 0;
}

int util_idmap_put(util_idmap_t *m, void *val)
{
    uint64_t id = util_idmap_key(m, val);

    if (m->cap != 0) {
        for (uint32_t i = slot_of(m, id); m->vals[i] != NULL; i = (i + 1) & (m->cap - 1)) {
            if (util_idmap_key(m, m->vals[i]) == id) {
                m->vals[i] = val;
                return 0;
            }
        }
    }
    if ((m->n + 1) * 2 > m->cap && grow(m) != 0)
        return -1;
    put_new(m, val);
    return 0;
}

/* Linear probing's deletion: later entries of the chain move back into
 * the hole when their home slot allows, so no tombstones build up. */
void util_idmap_del(util_idmap_t *m, uint64_t id)
{
    uint32_t i, j, mask = m->cap - 1;

    if (m->cap == 0)
        return;
    for (i = slot_of(m, id); m->vals[i] != NULL && util_idmap_key(m, m->vals[i]) != id; i = (i + 1) & mask)
        ;
    if (m->vals[i] == NULL)
        return;
    m->vals[i] = NULL;
    m->n--;
    for (j = (i + 1) & mask; m->vals[j] != NULL; j = (j + 1) & mask) {
        uint32_t home = slot_of(m, util_idmap_key(m, m->vals[j]));
        /* the entry at j may fill the hole at i if its home is not in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->vals[i] = m->vals[j];
            m->vals[j] = NULL;
            i = j;
        }
    }
}
