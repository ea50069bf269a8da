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

/* The slot an identity hashes to: the hash's high half scaled to cap,
 * which need not be a power of two. */
static uint32_t slot_of(const util_idmap_t *m, uint64_t id)
{
    return (uint32_t)(((util_hash64(id ^ m->seed) >> 32) * m->cap) >> 32);
}

static uint32_t slot_next(const util_idmap_t *m, uint32_t i)
{
    return i + 1 == m->cap ? 0 : i + 1;
}

/* How far slot j is past slot i, along the probe order. */
static uint32_t slot_dist(const util_idmap_t *m, uint32_t i, uint32_t j)
{
    return j >= i ? j - i : j + m->cap - i;
}

void *util_idmap_get(const util_idmap_t *m, uint64_t id)
{
    if (m->cap == 0)
        return NULL;
    for (uint32_t i = slot_of(m, id);; i = slot_next(m, i)) {
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
        i = slot_next(m, i);
    m->vals[i] = val;
    m->n++;
}

/* The values moved to a table of cap slots; -1 without memory (the map
 * is unchanged). */
static int resize(util_idmap_t *m, uint32_t cap)
{
    util_idmap_t old = *m;

    if ((m->vals = calloc(cap, sizeof(*m->vals))) == NULL) {
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

/* Half as large again: a map holds one and a third to two slots per
 * value once it has grown. */
static int grow(util_idmap_t *m)
{
    uint32_t cap = m->cap ? m->cap + m->cap / 2 : UTIL_IDMAP_FIRST;

    return cap > m->cap ? resize(m, cap) : -1;
}

int util_idmap_put(util_idmap_t *m, void *val)
{
    uint64_t id = util_idmap_key(m, val);

    if (m->cap != 0) {
        for (uint32_t i = slot_of(m, id); m->vals[i] != NULL; i = slot_next(m, i)) {
            if (util_idmap_key(m, m->vals[i]) == id) {
                m->vals[i] = val;
                return 0;
            }
        }
    }
    if ((uint64_t)(m->n + 1) * 4 > (uint64_t)m->cap * 3 && grow(m) != 0) /* at most 3/4 full */
        return -1;
    put_new(m, val);
    return 0;
}

/* Linear probing's deletion: later entries of the chain move back into
 * the hole when their home slot allows, so no tombstones build up. */
void util_idmap_del(util_idmap_t *m, uint64_t id)
{
    uint32_t i, j;

    if (m->cap == 0)
        return;
    for (i = slot_of(m, id); m->vals[i] != NULL && util_idmap_key(m, m->vals[i]) != id; i = slot_next(m, i))
        ;
    if (m->vals[i] == NULL)
        return;
    m->vals[i] = NULL;
    m->n--;
    for (j = slot_next(m, i); m->vals[j] != NULL; j = slot_next(m, j)) {
        uint32_t home = slot_of(m, util_idmap_key(m, m->vals[j]));
        /* the entry at j may fill the hole at i if its home is not in (i, j] */
        if (slot_dist(m, home, j) >= slot_dist(m, i, j)) {
            m->vals[i] = m->vals[j];
            m->vals[j] = NULL;
            i = j;
        }
    }
    /* under a quarter full: half the slots (at least UTIL_IDMAP_FIRST),
     * so that what a burst of values made it grow to is given back; kept
     * as it is without memory for the smaller table */
    if (m->cap > UTIL_IDMAP_FIRST && (uint64_t)m->n * 4 < m->cap)
        (void)resize(m, m->cap / 2 > UTIL_IDMAP_FIRST ? m->cap / 2 : UTIL_IDMAP_FIRST);
}
