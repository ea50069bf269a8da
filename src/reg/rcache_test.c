/* The registration cache (src/reg/rcache.h): hits and misses, and
 * invalidation by each way memory goes away. Each case runs in a process
 * of its own, so each starts with no cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

#include "reg/rcache.h"

/* Defined when a sanitizer's allocator replaces glibc's malloc. */
extern void __asan_init(void) __attribute__((weak));
extern void __tsan_init(void) __attribute__((weak));

static size_t page;

static void *map_pages(size_t n)
{
    void *p = mmap(NULL, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    assert_true(p != MAP_FAILED);
    memset(p, 0x5a, n * page);
    return p;
}

/* n pages mapped exactly at addr, or NULL if something else is there. */
static char *map_at(void *addr, size_t n)
{
    void *p = mmap(addr, n * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

    if (p == MAP_FAILED)
        return NULL;
    if (p != addr) {   /* a kernel before 4.17 takes the flag as a hint */
        munmap(p, n * page);
        return NULL;
    }
    return p;
}

static rcache_reg_t *get(rcache_t *rc, const void *addr, size_t len)
{
    rcache_reg_t *reg = NULL;

    assert_int_equal(rcache_get(rc, addr, len, &reg), TMX_OK);
    assert_non_null(reg);
    return reg;
}

static rcache_stats_t stats(rcache_t *rc)
{
    rcache_stats_t s;

    rcache_stats(rc, &s);
    return s;
}

/* A cache that is fed by the kernel's events, or the case is skipped. */
static rcache_t *cache_or_skip(size_t max_entries, uint64_t max_bytes)
{
    rcache_t *rc = rcache_acquire(max_entries, max_bytes);
    void *p = map_pages(1);
    rcache_reg_t *reg;

    assert_non_null(rc);
    reg = get(rc, p, 1);
    rcache_put(rc, reg);
    munmap(p, page);
    if (stats(rc).uncached != 0)
        unit_skip("no userfaultfd here (valgrind, seccomp or no permission): the cache "
                  "serves uncached registrations only, see uffd_unavailable_fallback");
    return rc;
}

/* 1 if the mapping holding addr is registered with a userfaultfd in
 * write-protect mode ("uw" among its VmFlags in /proc/self/smaps). */
static int vma_uffd_wp(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, found = -1;

    assert_non_null(f);
    while (found < 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0)
            found = strstr(line, " uw") != NULL;
    }
    fclose(f);
    assert_true(found >= 0);
    return found;
}

/* A page of a file: never cached, so each get of it is a new id. */
static void *file_page(void)
{
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    void *p;

    assert_true(fd >= 0);
    p = mmap(NULL, page, PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(p != MAP_FAILED);
    close(fd);
    return p;
}

static void hit_on_same_and_sub_range(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(4);
    rcache_reg_t *a, *b, *c;
    rcache_stats_t s0 = stats(rc), s;

    a = get(rc, p + 10, 3 * page);
    assert_int_equal(a->base, (uintptr_t)p);
    assert_int_equal(a->len, 4 * page);
    b = get(rc, p + 10, 3 * page);
    assert_ptr_equal(b, a);
    /* a range inside a's is an entry of its own: a hit is only ever the
     * very pages asked for, so that memory going outside them (here the
     * last two pages of a) never drops a registration of these */
    c = get(rc, p + page + 7, 100);
    assert_ptr_not_equal(c, a);
    assert_int_equal(c->base, (uintptr_t)p + page);
    assert_int_equal(c->len, page);
    assert_true(rcache_reg_valid(a));
    s = stats(rc);
    assert_int_equal(s.misses - s0.misses, 2);
    assert_int_equal(s.hits - s0.hits, 1);
    assert_int_equal(s.entries, 2);
    assert_int_equal(s.bytes, 5 * page);
    munmap(p + 2 * page, 2 * page);
    assert_false(rcache_reg_valid(a));
    assert_true(rcache_reg_valid(c));
    rcache_put(rc, a);
    rcache_put(rc, b);
    rcache_put(rc, c);
    munmap(p, 2 * page);
    rcache_release(rc);
}

/* Registration changes no fault: the first touch of a registered page,
 * and the touch after MADV_DONTNEED, fault in as before (a missing-page
 * registration would stop them until someone answered). */
static void faults_unchanged(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    rcache_reg_t *a;

    assert_true(p != MAP_FAILED);
    a = get(rc, p, 4 * page);   /* no page touched yet */
    assert_true(vma_uffd_wp(p));
    assert_int_equal(p[page], 0);
    for (size_t i = 0; i < 4 * page; i += page)
        p[i] = 7;
    assert_true(rcache_reg_valid(a));
    rcache_put(rc, a);
    assert_int_equal(madvise(p, 4 * page, MADV_DONTNEED), 0);
    a = get(rc, p, 4 * page);
    p[0] = 1;
    assert_int_equal(p[0] + p[page], 1);
    assert_true(rcache_reg_valid(a));
    rcache_put(rc, a);
    munmap(p, 4 * page);
    rcache_release(rc);
}

static void miss_on_larger_range(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(4);
    rcache_reg_t *a = get(rc, p, 2 * page), *b = get(rc, p, 4 * page);
    rcache_stats_t s = stats(rc);

    assert_ptr_not_equal(a, b);
    assert_int_not_equal(a->id, b->id);
    assert_int_equal(b->len, 4 * page);
    assert_int_equal(s.hits, 0);
    assert_int_equal(s.misses, 3);   /* with cache_or_skip's */
    assert_int_equal(s.entries, 2);
    rcache_put(rc, a);
    rcache_put(rc, b);
    munmap(p, 4 * page);
    rcache_release(rc);
}

static void munmap_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(4), *q;
    rcache_reg_t *a = get(rc, p, 4 * page), *b;
    uint64_t old_id = a->id, inval = stats(rc).invalidations;

    assert_int_equal(munmap(p + 2 * page, page), 0);
    assert_false(rcache_reg_valid(a));   /* already when munmap returns */
    assert_int_equal(stats(rc).invalidations, inval + 1);
    rcache_put(rc, a);
    munmap(p, 4 * page);
    q = map_at(p, 4);
    if (q == NULL)
        unit_skip("could not map again at %p", (void *)p);
    memset(q, 0x33, 4 * page);
    b = get(rc, q, 4 * page);
    assert_int_not_equal(b->id, old_id);
    assert_true(rcache_reg_valid(b));
    assert_int_equal(stats(rc).entries, 1);
    rcache_put(rc, b);
    munmap(q, 4 * page);
    rcache_release(rc);
}

/* Also shows that a moved range can be cached at its new place: the
 * registration the move carried there was dropped. */
static void mremap_move_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(4), *dst = map_pages(4), *q;
    rcache_reg_t *a = get(rc, p, 4 * page), *b;

    q = mremap(p, 4 * page, 4 * page, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    assert_ptr_equal(q, dst);
    assert_false(rcache_reg_valid(a));
    assert_int_equal(stats(rc).misses, 2);   /* the lock: the monitor is done */
    assert_false(vma_uffd_wp(q));
    b = get(rc, q, 4 * page);
    assert_int_not_equal(b->id, a->id);
    assert_int_equal(stats(rc).misses, 3);
    rcache_put(rc, a);
    rcache_put(rc, b);
    munmap(q, 4 * page);
    assert_false(rcache_reg_valid(b));
    rcache_release(rc);
}

/* A shrink unmaps the tail: the entry reaching into it goes, one inside
 * the kept part stays and still gets its events. */
static void mremap_shrink_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(8);
    rcache_reg_t *head = get(rc, p, 2 * page), *all = get(rc, p, 8 * page), *again;

    assert_ptr_equal(mremap(p, 8 * page, 4 * page, 0), p);
    assert_false(rcache_reg_valid(all));
    assert_true(rcache_reg_valid(head));
    again = get(rc, p, 2 * page);
    assert_ptr_equal(again, head);
    rcache_put(rc, again);
    munmap(p, page);
    assert_false(rcache_reg_valid(head));
    rcache_put(rc, head);
    rcache_put(rc, all);
    munmap(p, 4 * page);
    rcache_release(rc);
}

static void madvise_dontneed_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(4);
    rcache_reg_t *a = get(rc, p, 4 * page), *b;

    assert_int_equal(madvise(p + 3 * page, page, MADV_DONTNEED), 0);
    assert_false(rcache_reg_valid(a));
    assert_int_equal(p[3 * page], 0);   /* faults still work: a zero page */
    p[3 * page] = 1;
    b = get(rc, p, 4 * page);
    assert_int_not_equal(b->id, a->id);
    assert_true(rcache_reg_valid(b));
    rcache_put(rc, a);
    rcache_put(rc, b);
    munmap(p, 4 * page);
    rcache_release(rc);
}

/* Shared anonymous memory (shmem) is cached too; MADV_REMOVE frees its
 * pages. */
static void madvise_remove_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    rcache_reg_t *a;

    assert_true(p != MAP_FAILED);
    memset(p, 1, 4 * page);
    a = get(rc, p, 4 * page);
    if (stats(rc).entries == 0)
        unit_skip("this kernel does not register shared memory in write-protect mode");
    assert_int_equal(madvise(p + page, page, MADV_REMOVE), 0);
    assert_false(rcache_reg_valid(a));
    assert_int_equal(p[page], 0);
    rcache_put(rc, a);
    munmap(p, 4 * page);
    rcache_release(rc);
}

/* A mapping placed over a cached range with MAP_FIXED unmaps what was
 * there. */
static void map_fixed_over_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(4), *q;
    rcache_reg_t *a = get(rc, p, 4 * page), *b;

    q = mmap(p + page, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0);
    assert_ptr_equal(q, p + page);
    assert_false(rcache_reg_valid(a));
    b = get(rc, p, 4 * page);
    assert_int_not_equal(b->id, a->id);
    rcache_put(rc, a);
    rcache_put(rc, b);
    munmap(p, 4 * page);
    rcache_release(rc);
}

/* A file mapped over part of an entry (which the kernel will not register
 * for us): the entry goes, and the rest of its pages, still the
 * application's anonymous memory, are no longer registered. */
static void file_over_part_unregisters_rest(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(4);
    rcache_reg_t *a = get(rc, p, 4 * page);
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

    assert_true(fd >= 0);
    assert_true(vma_uffd_wp(p));
    assert_ptr_equal(mmap(p + 2 * page, 2 * page, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0), p + 2 * page);
    close(fd);
    assert_false(rcache_reg_valid(a));
    assert_int_equal(stats(rc).entries, 0);
    assert_false(vma_uffd_wp(p));
    assert_false(vma_uffd_wp(p + page));
    rcache_put(rc, a);
    munmap(p, 4 * page);
    rcache_release(rc);
}

/* glibc's free() of a chunk above the mmap threshold unmaps it from inside
 * libc, not through the PLT: the event still comes. */
static void free_of_large_malloc_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    size_t len = 1 << 20;
    char *buf, *buf2;
    uintptr_t old;
    rcache_reg_t *a, *b;

    if (__asan_init != NULL || __tsan_init != NULL)
        unit_skip("a sanitizer's allocator replaces glibc's malloc and keeps freed memory mapped");
    /* A fixed threshold: glibc would otherwise raise it on the first free. */
    assert_int_equal(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
    buf = malloc(len);
    assert_non_null(buf);
    memset(buf, 1, len);
    a = get(rc, buf, len);
    old = (uintptr_t)buf;
    free(buf);
    assert_false(rcache_reg_valid(a));
    buf2 = malloc(len);
    assert_non_null(buf2);
    memset(buf2, 2, len);
    if ((uintptr_t)buf2 != old)
        print_message("the new chunk is at %p, not %#lx: its get is a miss anyway\n", (void *)buf2,
                      (unsigned long)old);
    b = get(rc, buf2, len);
    assert_int_not_equal(b->id, a->id);
    assert_true(rcache_reg_valid(b));
    assert_int_equal(stats(rc).hits, 0);
    rcache_put(rc, a);
    free(buf2);
    assert_false(rcache_reg_valid(b));
    rcache_put(rc, b);
    rcache_release(rc);
}

/* Nothing in between may allocate: malloc could move the break. */
static void sbrk_shrink_invalidates(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    uintptr_t cur = (uintptr_t)sbrk(0);
    char *p;
    rcache_reg_t *a;

    if (cur == (uintptr_t)-1 || sbrk((intptr_t)((page - cur % page) % page)) == (void *)-1)
        unit_skip("no sbrk here");
    p = sbrk((intptr_t)(4 * page));
    if (p == (void *)-1)
        unit_skip("sbrk cannot grow the heap here");
    memset(p, 1, 4 * page);
    a = get(rc, p, 4 * page);
    assert_true(rcache_reg_valid(a));
    assert_ptr_equal(sbrk(-(intptr_t)(2 * page)), p + 4 * page);
    assert_false(rcache_reg_valid(a));
    rcache_put(rc, a);
    sbrk(-(intptr_t)(2 * page));
    rcache_release(rc);
}

static void lru_eviction(void **state)
{
    rcache_t *rc = cache_or_skip(2, 0);
    char *a = map_pages(1), *b = map_pages(1), *c = map_pages(1);
    rcache_reg_t *ra = get(rc, a, 1), *rb = get(rc, b, 1), *r;
    uint64_t a_id = ra->id, b_id = rb->id;

    rcache_put(rc, ra);
    rcache_put(rc, rb);
    rcache_put(rc, get(rc, a, 1));   /* a is now the most recently used */
    r = get(rc, c, 1);               /* evicts b */
    assert_int_equal(stats(rc).evictions, 1);
    rcache_put(rc, r);
    r = get(rc, a, 1);
    assert_int_equal(r->id, a_id);
    rcache_put(rc, r);
    r = get(rc, b, 1);
    assert_int_not_equal(r->id, b_id);
    rcache_put(rc, r);
    assert_int_equal(stats(rc).entries, 2);
    munmap(a, page);
    munmap(b, page);
    munmap(c, page);
    rcache_release(rc);
}

static void byte_bound_evicts(void **state)
{
    rcache_t *rc = cache_or_skip(16, 4 * page);
    char *p = map_pages(8);

    rcache_put(rc, get(rc, p, 2 * page));
    rcache_put(rc, get(rc, p + 2 * page, 2 * page));
    rcache_put(rc, get(rc, p + 4 * page, page));   /* evicts p's entry */
    assert_int_equal(stats(rc).bytes, 3 * page);
    assert_int_equal(stats(rc).evictions, 1);
    rcache_put(rc, get(rc, p, 8 * page));   /* more than the bound: uncached */
    assert_int_equal(stats(rc).uncached, 1);
    munmap(p, 8 * page);
    rcache_release(rc);
}

/* Evicting x unregisters only its pages that the overlapping live entry y
 * does not cover: y still gets its events. */
static void eviction_keeps_overlapping_coverage(void **state)
{
    rcache_t *rc = cache_or_skip(2, 0);
    char *p = map_pages(8), *other = map_pages(1);
    rcache_reg_t *x = get(rc, p, 4 * page), *y = get(rc, p + 2 * page, 4 * page), *z;

    rcache_put(rc, x);
    rcache_put(rc, y);
    rcache_put(rc, get(rc, p + 2 * page, 4 * page)); /* y most recently used */
    z = get(rc, other, 1);                       /* evicts x */
    assert_int_equal(stats(rc).evictions, 1);
    y = get(rc, p + 2 * page, 4 * page);
    assert_true(rcache_reg_valid(y));
    assert_false(vma_uffd_wp(p));
    assert_true(vma_uffd_wp(p + 2 * page));
    assert_true(vma_uffd_wp(p + 5 * page));
    assert_false(vma_uffd_wp(p + 6 * page));
    munmap(p + 3 * page, page);
    assert_false(rcache_reg_valid(y));
    rcache_put(rc, y);
    rcache_put(rc, z);
    munmap(p, 8 * page);
    munmap(other, page);
    rcache_release(rc);
}

static void all_referenced_gives_uncached(void **state)
{
    rcache_t *rc = cache_or_skip(2, 0);
    char *p = map_pages(3);
    rcache_reg_t *a = get(rc, p, 1), *b = get(rc, p + page, 1), *c, *c2;

    c = get(rc, p + 2 * page, 1);
    assert_int_equal(stats(rc).uncached, 1);
    assert_true(rcache_reg_valid(c));
    c2 = get(rc, p + 2 * page, 1);   /* not cached: another one */
    assert_int_not_equal(c->id, c2->id);
    assert_int_equal(stats(rc).entries, 2);
    rcache_put(rc, c);
    rcache_put(rc, c2);
    rcache_put(rc, a);
    c = get(rc, p + 2 * page, 1);    /* now a can go */
    assert_int_equal(stats(rc).evictions, 1);
    assert_int_equal(stats(rc).uncached, 2);
    rcache_put(rc, c);
    rcache_put(rc, b);
    munmap(p, 3 * page);
    rcache_release(rc);
}

static void file_backed_is_uncached(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    void *p = file_page();
    rcache_reg_t *r = get(rc, p, 1);

    assert_int_equal(stats(rc).uncached, 1);
    assert_int_equal(stats(rc).entries, 0);
    assert_true(rcache_reg_valid(r));
    rcache_put(rc, r);
    munmap(p, page);
    rcache_release(rc);
}

typedef struct race {
    rcache_t *rc;
    _Atomic(char *) p;
    atomic_int stop;
    atomic_long gets;
    atomic_int failed;
} race_t;

static void *race_getter(void *arg)
{
    race_t *r = arg;

    while (!atomic_load(&r->stop)) {
        char *p = atomic_load(&r->p);
        rcache_reg_t *reg;
        if (p == NULL)
            continue;
        if (rcache_get(r->rc, p + (atomic_load(&r->gets) % 4) * page, page, &reg) != TMX_OK) {
            atomic_store(&r->failed, 1);
            return NULL;
        }
        rcache_put(r->rc, reg);
        atomic_fetch_add(&r->gets, 1);
    }
    return NULL;
}

/* One thread maps and unmaps while another gets: when munmap returns, no
 * entry covering the range is left, whatever the getter did meanwhile. A
 * get there then makes a registration newer than the munmap (ids grow),
 * uncached, or cached if something else was mapped there meanwhile. */
static void munmap_races_get(void **state)
{
    race_t r = {.rc = cache_or_skip(64, 0)};
    void *fp = file_page();
    pthread_t t;

    assert_int_equal(pthread_create(&t, NULL, race_getter, &r), 0);
    for (int i = 0; i < 2000; i++) {
        char *p = map_pages(4);
        rcache_reg_t *mine, *mark, *after;
        atomic_store(&r.p, p);
        mine = get(r.rc, p, 4 * page);
        long g = atomic_load(&r.gets);
        while (atomic_load(&r.gets) < g + 2 && !atomic_load(&r.failed))
            ;
        atomic_store(&r.p, NULL);
        assert_int_equal(munmap(p, 4 * page), 0);
        assert_false(rcache_reg_valid(mine));
        mark = get(r.rc, fp, 1);
        after = get(r.rc, p, page);
        assert_true(after->id > mark->id);
        rcache_put(r.rc, after);
        rcache_put(r.rc, mark);
        rcache_put(r.rc, mine);
    }
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    assert_false(atomic_load(&r.failed));
    print_message("%ld gets by the other thread\n", atomic_load(&r.gets));
    munmap(fp, page);
    rcache_release(r.rc);
}

/* Two threads take turns at one address: the other maps it, registers it
 * and unmaps it; this one maps it again the moment the other's munmap has
 * taken the old mapping away, while that munmap still waits for the
 * monitor, and registers the new memory there. */
typedef struct reuse {
    rcache_t *rc;
    char *at;
    size_t len;
    atomic_int round;           /* the other's turn: it maps and registers */
    atomic_int ready;           /* registered under old_id, about to unmap */
    atomic_int unmapped;        /* its munmap of that round has returned */
    atomic_ullong old_id;
    atomic_int failed;
} reuse_t;

static void *reuse_other(void *arg)
{
    reuse_t *u = arg;

    for (int i = 1; i <= 200; i++) {
        rcache_reg_t *reg;
        void *p;
        while (atomic_load(&u->round) != i && !atomic_load(&u->failed))
            ;
        if (atomic_load(&u->failed))
            return NULL;
        p = mmap(u->at, u->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != u->at || rcache_get(u->rc, p, u->len, &reg) != TMX_OK) {
            atomic_store(&u->failed, 1);   /* something else took the address */
            return NULL;
        }
        atomic_store(&u->old_id, reg->id);
        rcache_put(u->rc, reg);
        atomic_store(&u->ready, i);
        munmap(p, u->len);
        atomic_store(&u->unmapped, i);
    }
    return NULL;
}

/* Maps u->at the moment the other's mapping of round i is gone (its
 * munmap not returned yet, as a rule); NULL when something else took the
 * address. Returns once that munmap has. */
static char *reuse_take(reuse_t *u, int i)
{
    void *p;

    do
        p = mmap(u->at, u->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    while (p == MAP_FAILED && errno == EEXIST && atomic_load(&u->unmapped) != i);
    if (p == MAP_FAILED && errno == EEXIST) /* too late: the round is lost */
        p = mmap(u->at, u->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && p != u->at)
        munmap(p, u->len);
    return p == u->at ? p : NULL;
}

/* New memory at an address whose old mapping another thread is unmapping
 * (munmap has taken it away and waits for the monitor to read its event)
 * is new memory: a get of it must not find the old memory's entry, which
 * the event then drops (a rendezvous lending the new memory would be
 * refused for nothing, and until the event came, an unmap of the new
 * memory would go unseen, its pages never registered). The get waits for
 * such events to be read. */
static void get_waits_for_unmap_in_flight(void **state)
{
    reuse_t u = {.rc = cache_or_skip(16, 0), .len = 16 * page};
    int rounds = 0;
    pthread_t t;

    assert_int_equal(pthread_create(&t, NULL, reuse_other, &u), 0); /* its stack first */
    u.at = (char *)map_pages(16);
    munmap(u.at, u.len);
    for (int i = 1; i <= 200 && !atomic_load(&u.failed); i++) {
        rcache_reg_t *mine;
        char *p;
        atomic_store(&u.round, i);
        while (atomic_load(&u.ready) != i && !atomic_load(&u.failed))
            ;
        if (atomic_load(&u.failed) || (p = reuse_take(&u, i)) == NULL)
            break;
        mine = get(u.rc, p, u.len);
        while (atomic_load(&u.unmapped) != i)
            ;
        assert_int_not_equal(mine->id, atomic_load(&u.old_id));
        assert_true(rcache_reg_valid(mine));
        rcache_put(u.rc, mine);
        munmap(p, u.len);
        rounds++;
    }
    atomic_store(&u.failed, 1);
    pthread_join(t, NULL);
    print_message("%d rounds\n", rounds);
    rcache_release(u.rc);
}

/* The child of a fork runs without the parent's monitor: what it holds is
 * invalid and caches nothing; once released, a new acquire starts afresh.
 * The parent is unaffected. */
static int fork_child_checks(rcache_t *rc, char *p, rcache_reg_t *held)
{
    rcache_reg_t *r;
    rcache_t *fresh;
    char *q;

    if (rcache_reg_valid(held))
        return 1;
    if (rcache_get(rc, p, page, &r) != TMX_OK || stats(rc).uncached != 1)
        return 2;
    rcache_put(rc, r);
    rcache_put(rc, held);
    rcache_release(rc);
    if (__tsan_init != NULL)
        return 0;   /* ThreadSanitizer cannot start threads in a forked child */
    fresh = rcache_acquire(16, 0);
    q = map_pages(2);
    if (rcache_get(fresh, q, page, &r) != TMX_OK || stats(fresh).misses != 1)
        return 3;
    munmap(q, 2 * page);
    if (rcache_reg_valid(r))
        return 4;
    rcache_put(fresh, r);
    rcache_release(fresh);
    return 0;
}

static void fork_child_starts_afresh(void **state)
{
    rcache_t *rc = cache_or_skip(16, 0);
    char *p = map_pages(2);
    rcache_reg_t *held = get(rc, p, 2 * page);
    int status;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fork_child_checks(rc, p, held));
    if (__tsan_init != NULL)
        print_message("under ThreadSanitizer the child does not try a fresh cache (no threads "
                      "after a multi-threaded fork)\n");
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(rcache_reg_valid(held));
    munmap(p, page);
    assert_false(rcache_reg_valid(held));
    rcache_put(rc, held);
    rcache_release(rc);
}

static void uffd_unavailable_fallback(void **state)
{
    char *p = map_pages(2);
    rcache_t *rc;
    rcache_reg_t *a, *b;
    rcache_stats_t s;

    rcache_test_force_uncached(1);
    rc = rcache_acquire(16, 0);
    assert_non_null(rc);
    a = get(rc, p + 5, 10);
    b = get(rc, p + 5, 10);
    assert_true(rcache_reg_valid(a));
    assert_int_equal(a->base, (uintptr_t)p);
    assert_int_equal(a->len, page);
    assert_int_not_equal(a->id, b->id);
    s = stats(rc);
    assert_int_equal(s.uncached, 2);
    assert_int_equal(s.hits + s.misses + s.entries, 0);
    rcache_put(rc, a);
    rcache_put(rc, b);
    munmap(p, 2 * page);
    rcache_release(rc);
    rcache_test_force_uncached(0);
}

static void zero_entries_caches_nothing(void **state)
{
    rcache_t *rc = rcache_acquire(0, 0);
    char *p = map_pages(1);
    rcache_reg_t *a;

    a = get(rc, p, 1);
    assert_int_equal(stats(rc).uncached, 1);
    rcache_put(rc, a);
    munmap(p, page);
    rcache_release(rc);
}

static void refcounted_and_shared(void **state)
{
    rcache_t *rc = cache_or_skip(4, 0), *rc2 = rcache_acquire(100, 0);
    char *p = map_pages(8);

    assert_ptr_equal(rc, rc2);   /* the first acquire's bounds: 4 entries */
    for (int i = 0; i < 8; i++)
        rcache_put(rc, get(rc, p + i * page, 1));
    assert_int_equal(stats(rc).entries, 4);
    rcache_release(rc2);
    rcache_release(rc);
    rc = rcache_acquire(16, 0);   /* a new cache, with a new userfaultfd */
    rcache_put(rc, get(rc, p, 1));
    assert_int_equal(stats(rc).misses, 1);
    assert_int_equal(stats(rc).entries, 1);
    munmap(p, 8 * page);
    assert_int_equal(stats(rc).entries, 0);
    rcache_release(rc);
}

static void bad_input(void **state)
{
    rcache_t *rc = rcache_acquire(4, 0);
    char buf[16];
    rcache_reg_t *reg = NULL;

    assert_int_equal(rcache_get(NULL, buf, 1, &reg), TMX_ERR_INVALID);
    assert_int_equal(rcache_get(rc, NULL, 1, &reg), TMX_ERR_INVALID);
    assert_int_equal(rcache_get(rc, buf, 0, &reg), TMX_ERR_INVALID);
    assert_int_equal(rcache_get(rc, buf, 1, NULL), TMX_ERR_INVALID);
    assert_int_equal(rcache_get(rc, (void *)(UINTPTR_MAX - 10), 100, &reg), TMX_ERR_INVALID);
    assert_int_equal(rcache_get(rc, (void *)(UINTPTR_MAX - 10), 5, &reg), TMX_ERR_INVALID);
    assert_null(reg);
    rcache_put(rc, NULL);
    rcache_release(NULL);
    rcache_release(rc);
}

static int setup(void **state)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hit_on_same_and_sub_range),
        cmocka_unit_test(faults_unchanged),
        cmocka_unit_test(miss_on_larger_range),
        cmocka_unit_test(munmap_invalidates),
        cmocka_unit_test(mremap_move_invalidates),
        cmocka_unit_test(mremap_shrink_invalidates),
        cmocka_unit_test(madvise_dontneed_invalidates),
        cmocka_unit_test(madvise_remove_invalidates),
        cmocka_unit_test(map_fixed_over_invalidates),
        cmocka_unit_test(file_over_part_unregisters_rest),
        cmocka_unit_test(free_of_large_malloc_invalidates),
        cmocka_unit_test(sbrk_shrink_invalidates),
        cmocka_unit_test(lru_eviction),
        cmocka_unit_test(byte_bound_evicts),
        cmocka_unit_test(eviction_keeps_overlapping_coverage),
        cmocka_unit_test(all_referenced_gives_uncached),
        cmocka_unit_test(file_backed_is_uncached),
        cmocka_unit_test(munmap_races_get),
        cmocka_unit_test(get_waits_for_unmap_in_flight),
        cmocka_unit_test(fork_child_starts_afresh),
        cmocka_unit_test(uffd_unavailable_fallback),
        cmocka_unit_test(zero_entries_caches_nothing),
        cmocka_unit_test(refcounted_and_shared),
        cmocka_unit_test(bad_input),
    };
    const unit_group_t group = {"", tests, sizeof(tests) / sizeof(tests[0]), setup, NULL};

    return unit_main(argc, argv, &group, 1);
}
