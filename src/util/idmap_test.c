/* util_idmap against a plain array: random puts, gets and deletes of ids
 * from a small pool (so that chains form, deletions fill holes and the map
 * grows), every answer compared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "unit.h"

#include "util/hash.h"
#include "util/idmap.h"

enum { POOL = 3000, OPS = 400000 };

/* A value: its key, and something else before it (the key is at an offset). */
typedef struct obj {
    int other;
    uint64_t id;
} obj_t;

static void random_against_array(void **state)
{
    static uint64_t ids[POOL];
    static obj_t objs[2][POOL]; /* two objects per id: put replaces */
    static void *ref[POOL];
    util_idmap_t m;
    uint64_t r = 42;
    uint32_t live = 0;

    util_idmap_init(&m, offsetof(obj_t, id));
    for (int i = 0; i < POOL; i++) {
        ids[i] = util_hash64((uint64_t)i) & ~0xfffull; /* low bits alike */
        objs[0][i].id = objs[1][i].id = ids[i];
    }
    for (int op = 0; op < OPS; op++) {
        uint32_t k = (uint32_t)((r = util_hash64(r + op)) % POOL);
        switch (r >> 62) {
        case 0:
        case 1:
            assert_ptr_equal(util_idmap_get(&m, ids[k]), ref[k]);
            break;
        case 2:
            live += ref[k] == NULL;
            ref[k] = &objs[op & 1][k];
            assert_int_equal(util_idmap_put(&m, ref[k]), 0);
            break;
        default:
            live -= ref[k] != NULL;
            ref[k] = NULL;
            util_idmap_del(&m, ids[k]);
            break;
        }
        assert_int_equal(m.n, live);
        assert_true((uint64_t)m.n * 4 <= (uint64_t)m.cap * 3); /* never more than 3/4 full */
        assert_true(m.cap <= UTIL_IDMAP_FIRST || (uint64_t)m.n * 4 >= m.cap); /* nor less than 1/4 */
    }
    for (int i = 0; i < POOL; i++)
        assert_ptr_equal(util_idmap_get(&m, ids[i]), ref[i]);
    util_idmap_fini(&m);
}

static void empty_and_absent(void **state)
{
    util_idmap_t m;
    obj_t x = {0, 7};

    util_idmap_init(&m, offsetof(obj_t, id));
    assert_null(util_idmap_get(&m, 7));
    util_idmap_del(&m, 7);
    assert_int_equal(util_idmap_put(&m, &x), 0);
    assert_ptr_equal(util_idmap_get(&m, 7), &x);
    assert_null(util_idmap_get(&m, 8));
    util_idmap_del(&m, 7);
    assert_null(util_idmap_get(&m, 7));
    util_idmap_fini(&m);
}

/* A map that grew for many values gives its slots back as they go, and
 * keeps finding the others. */
static void shrinks_as_emptied(void **state)
{
    static obj_t objs[POOL];
    util_idmap_t m;
    uint32_t peak;

    util_idmap_init(&m, offsetof(obj_t, id));
    for (int i = 0; i < POOL; i++) {
        objs[i].id = util_hash64((uint64_t)i + 1);
        assert_int_equal(util_idmap_put(&m, &objs[i]), 0);
    }
    peak = m.cap;
    for (int i = 0; i < POOL - 5; i++) {
        util_idmap_del(&m, objs[i].id);
        if (i % 97 == 0) {
            for (int j = i + 1; j < POOL; j++)
                assert_ptr_equal(util_idmap_get(&m, objs[j].id), &objs[j]);
        }
    }
    assert_true(peak >= POOL);
    assert_true(m.cap <= 4 * 5); /* at least a quarter full again */
    for (int j = POOL - 5; j < POOL; j++)
        assert_ptr_equal(util_idmap_get(&m, objs[j].id), &objs[j]);
    assert_null(util_idmap_get(&m, objs[0].id));
    util_idmap_fini(&m);
}

/* Two maps place the same ids differently: the seed is per map. */
static void seeds_differ(void **state)
{
    util_idmap_t a, b;

    util_idmap_init(&a, 0);
    util_idmap_init(&b, 0);
    assert_true(a.seed != b.seed);
    util_idmap_fini(&a);
    util_idmap_fini(&b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_against_array),
        cmocka_unit_test(empty_and_absent),
        cmocka_unit_test(shrinks_as_emptied),
        cmocka_unit_test(seeds_differ),
    };

    return UNIT_MAIN(argc, argv, tests);
}
