/* The object pool: objects come back for reuse, a pool that keeps chunks
 * gives the rest back once the last object is returned, and what it kept
 * serves again (ASan sees any object handed out twice or freed under use). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit.h"

#include "util/pool.h"

#define N 1000

/* Without keep, a pool holds its high water until fini. */
static void test_no_keep_holds(void **state)
{
    util_pool_t p;
    void *o[N];

    (void)state;
    util_pool_init(&p, 40, 16);
    for (int i = 0; i < N; i++)
        assert_non_null(o[i] = util_pool_get(&p));
    assert_int_equal(p.n_chunks, (N + 15) / 16);
    for (int i = 0; i < N; i++)
        util_pool_put(&p, o[i]);
    assert_int_equal(p.n_chunks, (N + 15) / 16);
    assert_int_equal(p.in_use, 0);
    util_pool_fini(&p);
}

/* With keep, a burst's chunks go when the last object is back, not
 * before, once the pool grew past twice keep; the kept chunks serve every
 * object again, each once. */
static void test_keep_trims_when_idle(void **state)
{
    util_pool_t p;
    void *o[N];

    (void)state;
    util_pool_init(&p, 40, 16);
    util_pool_set_keep(&p, 2);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            assert_non_null(o[i] = util_pool_get(&p));
            memset(o[i], 0xa5, 40);
        }
        assert_int_equal(p.n_chunks, (N + 15) / 16);
        for (int i = 0; i < N - 1; i++)
            util_pool_put(&p, o[i]);
        assert_int_equal(p.n_chunks, (N + 15) / 16); /* one still out */
        util_pool_put(&p, o[N - 1]);
        assert_int_equal(p.n_chunks, 2);
        /* the kept chunks hold exactly their objects, all distinct */
        for (int i = 0; i < 32; i++) {
            assert_non_null(o[i] = util_pool_get(&p));
            for (int k = 0; k < i; k++)
                assert_ptr_not_equal(o[i], o[k]);
        }
        assert_int_equal(p.n_chunks, 2);
        assert_non_null(o[32] = util_pool_get(&p)); /* a third chunk */
        assert_int_equal(p.n_chunks, 3);
        for (int i = 0; i <= 32; i++)
            util_pool_put(&p, o[i]);
        assert_int_equal(p.n_chunks, 3); /* within twice keep: kept, no churn */
        for (int i = 0; i < 65; i++)
            assert_non_null(o[i] = util_pool_get(&p)); /* a fifth chunk */
        assert_int_equal(p.n_chunks, 5);
        for (int i = 0; i < 65; i++)
            util_pool_put(&p, o[i]);
        assert_int_equal(p.n_chunks, 2);
    }
    util_pool_fini(&p);
}

/* A pool within its keep never frees. */
static void test_within_keep(void **state)
{
    util_pool_t p;
    void *a, *b;

    (void)state;
    util_pool_init(&p, 8, 4);
    util_pool_set_keep(&p, 1);
    a = util_pool_get(&p);
    util_pool_put(&p, a);
    b = util_pool_get(&p);
    assert_ptr_equal(a, b);
    util_pool_put(&p, b);
    assert_int_equal(p.n_chunks, 1);
    util_pool_fini(&p);
}

/* reserve makes room for n gets at once, or fails at the limit with the
 * objects in use untouched; a pool at its limit refuses a get. */
static void test_reserve_and_limit(void **state)
{
    util_pool_t p;
    void *objs[12];

    (void)state;
    util_pool_init(&p, 32, 4);
    util_pool_set_limit(&p, 2);
    assert_int_equal(util_pool_reserve(&p, 8), 0);
    assert_int_equal(p.n_chunks, 2);
    for (int i = 0; i < 8; i++)
        assert_non_null(objs[i] = util_pool_get(&p));
    assert_null(util_pool_get(&p));
    assert_int_equal(util_pool_reserve(&p, 1), -1);
    util_pool_put(&p, objs[7]);
    assert_int_equal(util_pool_reserve(&p, 1), 0);
    assert_int_equal(p.n_chunks, 2);
    util_pool_set_limit(&p, 0);
    assert_int_equal(util_pool_reserve(&p, 5), 0); /* 1 free: one more chunk */
    assert_int_equal(p.n_chunks, 3);
    for (int i = 7; i < 12; i++)
        assert_non_null(objs[i] = util_pool_get(&p));
    for (int i = 0; i < 12; i++)
        util_pool_put(&p, objs[i]);
    assert_int_equal(p.in_use, 0);
    util_pool_fini(&p);
}

/* trim_to gives back all but n chunks once idle, whatever keep says,
 * never the last one, and nothing while an object is in use. */
static void test_trim_to(void **state)
{
    util_pool_t p;
    void *o[40];

    (void)state;
    util_pool_init(&p, 24, 8);
    util_pool_set_keep(&p, 4);
    for (int i = 0; i < 40; i++)
        assert_non_null(o[i] = util_pool_get(&p));
    for (int i = 1; i < 40; i++)
        util_pool_put(&p, o[i]);
    util_pool_trim_to(&p, 1);
    assert_int_equal(p.n_chunks, 5); /* one still in use */
    util_pool_put(&p, o[0]);
    assert_int_equal(p.n_chunks, 5); /* within twice keep: kept */
    util_pool_trim_to(&p, 0);
    assert_int_equal(p.n_chunks, 1);
    for (int i = 0; i < 8; i++) /* the kept chunk serves every object once */
        assert_non_null(o[i] = util_pool_get(&p));
    assert_int_equal(p.n_chunks, 1);
    for (int i = 0; i < 8; i++)
        util_pool_put(&p, o[i]);
    util_pool_fini(&p);
}

/* A mapped pool fills whole pages; a chunk it trims reads as zeros (its
 * objects' fields too) and is the next grow's, and a chunk that cannot be
 * trimmed stays whole. */
static void test_mapped(void **state)
{
    util_pool_t p;
    unsigned char *o[N];
    size_t one;

    (void)state;
    assert_int_equal(util_pool_init_mapped(&p, 320, 64), 0);
    assert_int_equal(p.chunk_bytes % 4096, 0);
    assert_true(p.chunk_elems >= 64);
    util_pool_set_keep(&p, 1);
    assert_int_equal(util_pool_grow(&p), 0);
    one = util_pool_bytes(&p);
    assert_int_equal(one, p.chunk_bytes);
    for (int i = 0; i < N; i++) {
        assert_non_null(o[i] = util_pool_get(&p));
        memset(o[i] + sizeof(void *), 0xab, 320 - sizeof(void *));
    }
    assert_true(p.n_chunks > 2);
    for (int i = 0; i < N; i++)
        util_pool_put(&p, o[i]);
    assert_int_equal(util_pool_bytes(&p), one); /* the rest given back */
    assert_true(p.n_spare > 0);
    size_t zeroed = 0;
    for (int i = 0; i < N; i++)
        zeroed += o[i][100] == 0; /* readable: zeros once given back, else as left */
    assert_true(zeroed >= (size_t)N - p.chunk_elems);
    /* a new burst reuses the spare mappings: no more than before */
    size_t spare = p.n_spare;
    for (int i = 0; i < N; i++)
        assert_non_null(o[i] = util_pool_get(&p));
    assert_true(p.n_spare < spare);
    for (int i = 0; i < N; i++)
        util_pool_put(&p, o[i]);
    assert_int_equal(p.n_spare, spare);
    util_pool_fini(&p);
    assert_int_equal(p.n_spare, 0);
    assert_null(p.spare);
}

/* With every page locked (mlockall), pages cannot be given back: the
 * first trim finds out, the chunks stay whole and live, and the pool
 * stops trying. In a child, which the lock does not outlive. */
static void test_mapped_locked(void **state)
{
    pid_t pid;
    int status;

    (void)state;
    if ((pid = fork()) == 0) {
        util_pool_t p;
        void *o[N];
        char *probe;
        if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
            _exit(77); /* not allowed here (RLIMIT_MEMLOCK): nothing to see */
        probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (probe == MAP_FAILED)
            _exit(6);
        probe[0] = 1;
        if (madvise(probe, 4096, MADV_DONTNEED) == 0)
            _exit(77); /* nothing locked after all (ASan makes mlockall a no-op) */
        if (util_pool_init_mapped(&p, 320, 64) != 0)
            _exit(1);
        for (int i = 0; i < N; i++)
            if ((o[i] = util_pool_get(&p)) == NULL)
                _exit(2);
        size_t n = p.n_chunks;
        for (int i = 0; i < N; i++)
            util_pool_put(&p, o[i]);
        util_pool_trim_to(&p, 1);
        if (!p.stuck || p.n_chunks != n || p.n_spare != 0)
            _exit(3);
        util_pool_trim_to(&p, 1); /* no second try */
        for (int i = 0; i < N; i++) /* every object still there, once each */
            if ((o[i] = util_pool_get(&p)) == NULL)
                _exit(4);
        if (p.n_chunks != n)
            _exit(5);
        util_pool_fini(&p);
        _exit(0);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        print_message("memory cannot be locked here: the locked case is not tried\n");
        return;
    }
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Under AddressSanitizer a returned object is poisoned past its first
 * word (the free-list link) until the pool hands it out again, and stays
 * usable while handed out; a mapped pool's objects are never poisoned
 * (freed requests are read on purpose). Without ASan there is nothing to
 * see: the case says so. */
static void test_poisoned_when_free(void **state)
{
#ifdef UTIL_POOL_ASAN
    util_pool_t p, mp;
    char *a, *b;

    (void)state;
    util_pool_init(&p, 40, 4);
    a = util_pool_get(&p);
    b = util_pool_get(&p);
    assert_non_null(a);
    assert_non_null(b);
    assert_false(__asan_region_is_poisoned(a, 40));
    memset(a, 1, 48); /* the whole rounded-up object */
    util_pool_put(&p, a);
    assert_false(__asan_address_is_poisoned(a));
    assert_true(__asan_address_is_poisoned(a + 8));
    assert_true(__asan_address_is_poisoned(a + 47));
    assert_false(__asan_region_is_poisoned(b, 48)); /* its neighbour is untouched */
    assert_ptr_equal(util_pool_get(&p), a);
    assert_false(__asan_region_is_poisoned(a, 48));
    /* the chunk's other objects, never handed out, are poisoned too */
    {
        char *c = util_pool_get(&p);
        util_pool_put(&p, c);
        assert_true(__asan_address_is_poisoned(c + 8));
    }
    util_pool_put(&p, a);
    util_pool_put(&p, b);
    util_pool_fini(&p);

    assert_int_equal(util_pool_init_mapped(&mp, 40, 4), 0);
    a = util_pool_get(&mp);
    util_pool_put(&mp, a);
    assert_false(__asan_region_is_poisoned(a, 40));
    util_pool_fini(&mp);
#else
    (void)state;
    print_message("not built with AddressSanitizer: nothing is poisoned\n");
#endif
}

/* Objects aligned to 8 take their size rounded to 8, not 16: 72 bytes
 * each, 8-aligned, and none overlaps the next. */
static void test_align8(void **state)
{
    util_pool_t p;
    char *o[40];

    (void)state;
    util_pool_init_align(&p, 72, 16, 8);
    assert_int_equal(p.elem_size, 72);
    for (int i = 0; i < 40; i++) {
        o[i] = util_pool_get(&p);
        assert_non_null(o[i]);
        assert_int_equal((uintptr_t)o[i] % 8, 0);
        memset(o[i], i, 72);
    }
    for (int i = 0; i < 40; i++) {
        for (int k = 0; k < 72; k++)
            assert_int_equal((unsigned char)o[i][k], i);
        util_pool_put(&p, o[i]);
    }
    assert_int_equal(p.n_chunks, 3);
    util_pool_fini(&p);
    util_pool_init_align(&p, 72, 16, 12); /* not a power of two: 16 */
    assert_int_equal(p.elem_size, 80);
    util_pool_fini(&p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_keep_holds),
        cmocka_unit_test(test_keep_trims_when_idle),
        cmocka_unit_test(test_within_keep),
        cmocka_unit_test(test_reserve_and_limit),
        cmocka_unit_test(test_trim_to),
        cmocka_unit_test(test_mapped),
        cmocka_unit_test(test_mapped_locked),
        cmocka_unit_test(test_poisoned_when_free),
        cmocka_unit_test(test_align8),
    };

    return UNIT_MAIN(argc, argv, tests);
}
