#include "reg/rcache.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"
#include "util/spin.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

/* Not UFFD_FEATURE_EVENT_FORK: a fork would wait for the monitor to take
 * the child's userfaultfd; without it the kernel drops the child's
 * registrations. */
#define RCACHE_EVENTS \
    (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)

typedef enum entry_state {
    ENTRY_FREE,     /* on the free list */
    ENTRY_LIVE,     /* in the tree; on the LRU list when unreferenced */
    ENTRY_DEAD      /* invalidated or evicted while referenced: freed on the last put */
} entry_state_t;

/* An entry of the array, or an uncached registration. The tree is a treap
 * ordered by (base, address of the entry) whose nodes know the largest end
 * in their subtree, so that a range is found in O(log n). */
typedef struct rcache_entry {
    rcache_reg_t reg;                   /* first: a reg is its entry */
    atomic_int valid;
    int uncached;                       /* set at creation, never changed */
    entry_state_t state;                /* under the cache's lock */
    uint32_t refs;
    uint32_t prio;                      /* treap priority */
    uint64_t max_end;                   /* largest base + len in the subtree */
    struct rcache_entry *left, *right;
    struct rcache_entry *prev, *next;   /* LRU list (live, unreferenced), or free list */
    struct rcache_entry *doomed;        /* the entries an event invalidates */
} rcache_entry_t;

struct rcache {
    pthread_mutex_t lock;       /* everything below but users, forked */
    int dead;                   /* inherited by a fork's child: its tree and
                                   LRU list are never touched again */
    rcache_entry_t *entries;    /* the array, max_entries long */
    size_t max_entries;
    uint64_t max_bytes;         /* 0: no bound */
    uint64_t page;
    rcache_entry_t *root;       /* live entries */
    rcache_entry_t lru;         /* sentinel: lru.next is the least recently used */
    rcache_entry_t *free_list;
    uint32_t prio_seed;
    int cached;                 /* 0: uncached registrations only */
    rcache_stats_t stats;
    int uffd, wakefd;           /* -1 when closed */
    pthread_t monitor;
    int monitor_running;
    unsigned users;             /* under global_lock */
};

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static rcache_t *global_cache;          /* under global_lock */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t next_id = 1;
static atomic_int force_uncached;
static atomic_int off_logged;
/* Odd while a monitor is between reading events and having invalidated
 * their entries: a thread whose unmap the read released may be there. */
static atomic_uint drain_seq;

/* ------------------------------------------------------------- the tree */

static uint64_t entry_end(const rcache_entry_t *e)
{
    return e->reg.base + e->reg.len;
}

static void tree_update(rcache_entry_t *e)
{
    e->max_end = entry_end(e);
    if (e->left != NULL && e->left->max_end > e->max_end)
        e->max_end = e->left->max_end;
    if (e->right != NULL && e->right->max_end > e->max_end)
        e->max_end = e->right->max_end;
}

static int entry_before(const rcache_entry_t *a, const rcache_entry_t *b)
{
    return a->reg.base < b->reg.base || (a->reg.base == b->reg.base && a < b);
}

/* l gets the nodes of t before key, r the others. */
static void tree_split(rcache_entry_t *t, const rcache_entry_t *key, rcache_entry_t **l,
                       rcache_entry_t **r)
{
    if (t == NULL) {
        *l = *r = NULL;
    } else if (entry_before(t, key)) {
        tree_split(t->right, key, &t->right, r);
        *l = t;
        tree_update(t);
    } else {
        tree_split(t->left, key, l, &t->left);
        *r = t;
        tree_update(t);
    }
}

/* Every node of a before every node of b. */
static rcache_entry_t *tree_merge(rcache_entry_t *a, rcache_entry_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (a->prio > b->prio) {
        a->right = tree_merge(a->right, b);
        tree_update(a);
        return a;
    }
    b->left = tree_merge(a, b->left);
    tree_update(b);
    return b;
}

static void tree_insert(rcache_t *c, rcache_entry_t *e)
{
    rcache_entry_t *l, *r;

    c->prio_seed = c->prio_seed * 1664525u + 1013904223u;
    e->prio = c->prio_seed;
    e->left = e->right = NULL;
    tree_update(e);
    tree_split(c->root, e, &l, &r);
    c->root = tree_merge(tree_merge(l, e), r);
}

static rcache_entry_t *tree_remove(rcache_entry_t *t, rcache_entry_t *e)
{
    if (t == e)
        return tree_merge(e->left, e->right);
    if (entry_before(e, t))
        t->left = tree_remove(t->left, e);
    else
        t->right = tree_remove(t->right, e);
    tree_update(t);
    return t;
}

/* The node of exactly [start, end), or NULL. A hit is only ever the very
 * page range asked for: an entry that covers more would be dropped when
 * memory outside the range asked for goes, and with it a registration
 * whose own pages were never touched. One path down, but where nodes
 * start at start (rotations put them on either side) both subtrees. */
static rcache_entry_t *tree_find_exact(rcache_entry_t *n, uint64_t start, uint64_t end)
{
    rcache_entry_t *e;

    while (n != NULL && n->max_end >= end) {
        if (n->reg.base > start) {
            n = n->left;
        } else if (n->reg.base < start) {
            n = n->right;
        } else {
            if (entry_end(n) == end)
                return n;
            if ((e = tree_find_exact(n->left, start, end)) != NULL)
                return e;
            n = n->right;
        }
    }
    return NULL;
}

/* Calls fn on each node overlapping [start, end), in order of base. */
static void tree_visit(rcache_entry_t *n, uint64_t start, uint64_t end,
                       void (*fn)(rcache_entry_t *, void *), void *arg)
{
    if (n == NULL || n->max_end <= start)
        return;
    tree_visit(n->left, start, end, fn, arg);
    if (n->reg.base >= end)
        return;
    if (entry_end(n) > start)
        fn(n, arg);
    tree_visit(n->right, start, end, fn, arg);
}

/* ------------------------------------------------------- the userfaultfd */

static int uffd_register(rcache_t *c, uint64_t base, uint64_t len)
{
    struct uffdio_register r = {.range = {.start = base, .len = len},
                                .mode = UFFDIO_REGISTER_MODE_WP};

    return ioctl(c->uffd, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

/* An ioctl that takes the mm's lock, never a wait on the monitor: no
 * thread waits for an event while holding that lock (munmap, mremap and
 * madvise drop it first). So it may be called under the cache's lock. It
 * fails (EINVAL) where no mapping is left, which is fine: nothing there to
 * unregister. */
static void uffd_unregister(rcache_t *c, uint64_t start, uint64_t end)
{
    struct uffdio_range r = {.start = start, .len = end - start};

    (void)ioctl(c->uffd, UFFDIO_UNREGISTER, &r);
}

/* 1 while an unmap, remap or discard of memory registered with us is
 * under way in some thread: the kernel counts it (the userfaultfd's
 * mmap_changing) from before the memory goes until that thread has seen
 * its event read, and meanwhile refuses UFFDIO_WRITEPROTECT with EAGAIN
 * before looking at anything else. Asked with a misaligned range, which
 * it then refuses (EINVAL) without taking the mm's lock or touching a
 * page. A kernel without the ioctl answers otherwise: 0. */
static int events_in_flight(const rcache_t *c)
{
    struct uffdio_writeprotect wp = {.range = {.start = 1, .len = c->page}, .mode = 0};

    return ioctl(c->uffd, UFFDIO_WRITEPROTECT, &wp) != 0 && errno == EAGAIN;
}

typedef struct gap_walk {
    rcache_t *c;
    uint64_t cur;
} gap_walk_t;

static void gap_visit(rcache_entry_t *e, void *arg)
{
    gap_walk_t *g = arg;

    if (e->reg.base > g->cur)
        uffd_unregister(g->c, g->cur, e->reg.base);
    if (entry_end(e) > g->cur)
        g->cur = entry_end(e);
}

/* Unregisters the pages of [start, end) that no live entry covers, so
 * that overlapping entries keep their events. */
static void unregister_uncovered(rcache_t *c, uint64_t start, uint64_t end)
{
    gap_walk_t g = {c, start};

    tree_visit(c->root, start, end, gap_visit, &g);
    if (g.cur < end)
        uffd_unregister(c, g.cur, end);
}

/* ------------------------------------------------------------ entries */

static void lru_unlink(rcache_entry_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
}

static void lru_append(rcache_t *c, rcache_entry_t *e)
{
    e->prev = c->lru.prev;
    e->next = &c->lru;
    c->lru.prev->next = e;
    c->lru.prev = e;
}

static void entry_free(rcache_t *c, rcache_entry_t *e)
{
    e->state = ENTRY_FREE;
    e->next = c->free_list;
    c->free_list = e;
}

/* Takes e out of the tree; it is freed now if unreferenced, else on its
 * last put. Its pages stay registered: the caller unregisters them. */
static void entry_drop(rcache_t *c, rcache_entry_t *e)
{
    atomic_store_explicit(&e->valid, 0, memory_order_release);
    c->root = tree_remove(c->root, e);
    c->stats.entries--;
    c->stats.bytes -= e->reg.len;
    if (e->refs > 0) {
        e->state = ENTRY_DEAD;
        return;
    }
    lru_unlink(e);
    entry_free(c, e);
}

static void evict_oldest(rcache_t *c)
{
    rcache_entry_t *e = c->lru.next;
    uint64_t base = e->reg.base, end = entry_end(e);

    entry_drop(c, e);
    unregister_uncovered(c, base, end);
    c->stats.evictions++;
}

/* Evicts until a new entry of len bytes fits; 0 if it cannot. */
static int make_room(rcache_t *c, uint64_t len)
{
    if (c->max_bytes != 0 && len > c->max_bytes)
        return 0;
    while ((c->free_list == NULL || (c->max_bytes != 0 && c->stats.bytes + len > c->max_bytes)) &&
           c->lru.next != &c->lru)
        evict_oldest(c);
    return c->free_list != NULL && (c->max_bytes == 0 || c->stats.bytes + len <= c->max_bytes);
}

static void doom_visit(rcache_entry_t *e, void *arg)
{
    rcache_entry_t **list = arg;

    e->doomed = *list;
    *list = e;
}

/* Drops every entry overlapping [start, end), whose memory went away, and
 * unregisters their pages, but for those of [start, end) when gone is
 * set: nothing there is registered any more (an unmap), and what may have
 * taken its place (a file mapped there with MAP_FIXED) the kernel would
 * refuse to unregister, and with it the rest of the range. */
static void invalidate_range(rcache_t *c, uint64_t start, uint64_t end, int gone)
{
    rcache_entry_t *list = NULL;

    tree_visit(c->root, start, end, doom_visit, &list);
    for (rcache_entry_t *e = list; e != NULL; e = e->doomed) {
        entry_drop(c, e);
        c->stats.invalidations++;
    }
    for (rcache_entry_t *e = list; e != NULL; e = e->doomed) {
        if (!gone) {
            unregister_uncovered(c, e->reg.base, entry_end(e));
            continue;
        }
        if (e->reg.base < start)
            unregister_uncovered(c, e->reg.base, start);
        if (entry_end(e) > end)
            unregister_uncovered(c, end, entry_end(e));
    }
}

/* A new cached entry for [base, base + len), referenced; NULL (nothing
 * changed) if there is no room, or if the kernel will not register the
 * range (*err: why). */
static rcache_entry_t *entry_new(rcache_t *c, uint64_t base, uint64_t len, int *err)
{
    rcache_entry_t *e;

    if (!make_room(c, len))
        return NULL;
    *err = uffd_register(c, base, len);
    if (*err != 0)
        return NULL;
    e = c->free_list;
    c->free_list = e->next;
    e->next = NULL;
    e->reg.id = atomic_fetch_add(&next_id, 1);
    e->reg.base = base;
    e->reg.len = len;
    e->refs = 1;
    e->state = ENTRY_LIVE;
    atomic_store_explicit(&e->valid, 1, memory_order_release);
    tree_insert(c, e);
    c->stats.entries++;
    c->stats.bytes += len;
    c->stats.misses++;
    return e;
}

static rcache_entry_t *entry_hit(rcache_t *c, rcache_entry_t *e)
{
    if (e->refs++ == 0)
        lru_unlink(e);
    c->stats.hits++;
    return e;
}

static rcache_entry_t *uncached_new(uint64_t base, uint64_t len)
{
    rcache_entry_t *e = calloc(1, sizeof(*e));

    if (e == NULL) {
        util_error("out of memory for an uncached registration of %llu bytes",
                   (unsigned long long)len);
        return NULL;
    }
    e->reg.id = atomic_fetch_add(&next_id, 1);
    e->reg.base = base;
    e->reg.len = len;
    e->refs = 1;
    e->uncached = 1;
    atomic_init(&e->valid, 1);
    return e;
}

/* ------------------------------------------------------------ the monitor */

static void monitor_handle(rcache_t *c, const struct uffd_msg *m)
{
    switch (m->event) {
    case UFFD_EVENT_UNMAP:
        invalidate_range(c, m->arg.remove.start, m->arg.remove.end, 1);
        break;
    case UFFD_EVENT_REMOVE: /* the pages stay mapped, and registered */
        invalidate_range(c, m->arg.remove.start, m->arg.remove.end, 0);
        break;
    case UFFD_EVENT_REMAP:
        /* The moved pages keep the registration at their new place, where
         * no entry is: unregister them there. (MREMAP_DONTUNMAP leaves the
         * old mapping, registered: unregistered as well.) */
        invalidate_range(c, m->arg.remap.from, m->arg.remap.from + m->arg.remap.len, 0);
        unregister_uncovered(c, m->arg.remap.to, m->arg.remap.to + m->arg.remap.len);
        break;
    default:
        break;
    }
}

/* Reads every pending event and invalidates, all under the lock: a thread
 * unmapping is released by the read, and must find its entries invalid
 * when it returns. No allocation here (deadlock rule). */
static void monitor_drain(rcache_t *c)
{
    struct uffd_msg msgs[16];
    ssize_t n;

    pthread_mutex_lock(&c->lock);
    atomic_fetch_add_explicit(&drain_seq, 1, memory_order_acq_rel);
    for (;;) {
        n = read(c->uffd, msgs, sizeof(msgs));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++)
            monitor_handle(c, &msgs[i]);
    }
    atomic_fetch_add_explicit(&drain_seq, 1, memory_order_release);
    pthread_mutex_unlock(&c->lock);
}

static void *monitor_main(void *arg)
{
    rcache_t *c = arg;
    struct pollfd p[2] = {{.fd = c->uffd, .events = POLLIN}, {.fd = c->wakefd, .events = POLLIN}};

    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            util_error("registration cache monitor: poll: %s", strerror(errno));
            return NULL;
        }
        if (p[0].revents != 0)
            monitor_drain(c);
        if (p[1].revents != 0)
            return NULL;
    }
}

static void log_off(const char *why, int err)
{
    if (atomic_exchange(&off_logged, 1) == 0)
        util_warn("registration cache off: %s%s%s; each registration is made for one use", why,
                  err != 0 ? ": " : "", err != 0 ? strerror(err) : "");
}

/* A userfaultfd with the events, or -1 (logged once). */
static int uffd_open(void)
{
    struct uffdio_api api = {.api = UFFD_API, .features = RCACHE_EVENTS};
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    int err;

    if (fd < 0 && errno != ENOSYS)
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        log_off("no userfaultfd", errno);
        return -1;
    }
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        err = errno;
        close(fd);
        log_off("UFFDIO_API refused the unmap, remove and remap events", err);
        return -1;
    }
    if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
        close(fd);
        log_off("the kernel has no write-protect registration (the only mode that leaves faults "
                "alone)", 0);
        return -1;
    }
    return fd;
}

/* Opens the userfaultfd and starts the monitor; 0, or -1 (logged once). */
static int monitor_start(rcache_t *c)
{
    sigset_t all, old;
    int err;

    if (atomic_load(&force_uncached)) {
        log_off("forced by a test", 0);
        return -1;
    }
    c->uffd = uffd_open();
    if (c->uffd < 0)
        return -1;
    c->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wakefd < 0) {
        log_off("eventfd", errno);
        return -1;
    }
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&c->monitor, NULL, monitor_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        log_off("no monitor thread", err);
        return -1;
    }
    c->monitor_running = 1;
    return 0;
}

/* Unregisters every range first, so that no free() from here on can wait
 * for the monitor; then stops it. */
static void monitor_stop(rcache_t *c)
{
    uint64_t one = 1;

    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->max_entries; i++) {
        rcache_entry_t *e = &c->entries[i];
        if (e->state == ENTRY_LIVE)
            uffd_unregister(c, e->reg.base, entry_end(e));
    }
    c->cached = 0;
    pthread_mutex_unlock(&c->lock);
    if (write(c->wakefd, &one, sizeof(one)) != sizeof(one))
        util_error("registration cache: cannot wake its monitor: %s", strerror(errno));
    pthread_join(c->monitor, NULL);
    c->monitor_running = 0;
}

/* ------------------------------------------------------------ the cache */

static void cache_destroy(rcache_t *c)
{
    if (c->monitor_running)
        monitor_stop(c);
    if (c->uffd >= 0)
        close(c->uffd);
    if (c->wakefd >= 0)
        close(c->wakefd);
    pthread_mutex_destroy(&c->lock);
    free(c->entries);
    free(c);
}

static rcache_t *cache_create(size_t max_entries, uint64_t max_bytes)
{
    rcache_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        goto err_nomem;
    c->uffd = c->wakefd = -1;
    pthread_mutex_init(&c->lock, NULL);
    c->lru.prev = c->lru.next = &c->lru;
    c->page = (uint64_t)sysconf(_SC_PAGESIZE);
    c->max_entries = max_entries;
    c->max_bytes = max_bytes;
    c->prio_seed = (uint32_t)getpid();
    if (max_entries == 0)
        return c;
    c->entries = calloc(max_entries, sizeof(c->entries[0]));
    if (c->entries == NULL)
        goto err_free_cache;
    for (size_t i = max_entries; i-- > 0;)
        entry_free(c, &c->entries[i]);
    c->cached = monitor_start(c) == 0;
    return c;

err_free_cache:
    cache_destroy(c);
err_nomem:
    util_error("out of memory for a registration cache of %zu entries", max_entries);
    return NULL;
}

/* In the child of a fork: the monitor was not copied and the kernel
 * dropped the child's registrations, so the caches it holds cache nothing
 * more; the next acquire after their release starts afresh. */
static void atfork_child(void)
{
    rcache_t *c = global_cache;

    if (c != NULL) {
        pthread_mutex_init(&c->lock, NULL);
        c->dead = 1;
        for (size_t i = 0; i < c->max_entries; i++)
            atomic_store(&c->entries[i].valid, 0);
        c->cached = 0;
        c->monitor_running = 0;
        if (c->uffd >= 0)
            close(c->uffd);
        if (c->wakefd >= 0)
            close(c->wakefd);
        c->uffd = c->wakefd = -1;
        global_cache = NULL;
    }
    pthread_mutex_unlock(&global_lock);
}

/* The cache's own lock is not taken across fork: a thread freeing memory
 * may be waiting for the monitor, which may be waiting for that lock,
 * while fork waits for the allocator that thread holds. The child gets
 * the lock anew and never touches the tree or the LRU list, which a
 * thread of the parent may have left half changed (dead). */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&global_lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&global_lock);
}

static void atfork_register(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

rcache_t *rcache_acquire(size_t max_entries, uint64_t max_bytes)
{
    rcache_t *c;

    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&global_lock);
    if (global_cache == NULL)
        global_cache = cache_create(max_entries, max_bytes);
    c = global_cache;
    if (c != NULL)
        c->users++;
    pthread_mutex_unlock(&global_lock);
    return c;
}

void rcache_release(rcache_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&global_lock);
    if (--c->users == 0) {
        if (global_cache == c)
            global_cache = NULL;
        cache_destroy(c);
    }
    pthread_mutex_unlock(&global_lock);
}

tmx_status_t rcache_get(rcache_t *c, const void *addr, size_t len, rcache_reg_t **out)
{
    uintptr_t a = (uintptr_t)addr;
    uint64_t base, end;
    rcache_entry_t *e = NULL;
    int err = 0;

    if (c == NULL || addr == NULL || out == NULL || len == 0 || a + len < a ||
        a + len > UINTPTR_MAX - (c->page - 1)) {
        util_error("rcache_get: bad arguments (cache %p, addr %p, len %zu, out %p)", (void *)c,
                   addr, len, (void *)out);
        return TMX_ERR_INVALID;
    }
    base = a & ~(c->page - 1);
    end = (a + len + c->page - 1) & ~(c->page - 1);
    pthread_mutex_lock(&c->lock);
    /* Memory at this address may be new memory where another thread's
     * munmap has just taken the old away, its event not read yet: the old
     * memory's entry would be found, and dropped by that event after we
     * lent the new memory under it; a new entry would be dropped by it
     * too. So the monitor reads such events first (it needs the lock). */
    for (unsigned turns = 0; c->cached && events_in_flight(c);) {
        pthread_mutex_unlock(&c->lock);
        util_spin_wait(&turns);
        pthread_mutex_lock(&c->lock);
    }
    if (c->cached) {
        e = tree_find_exact(c->root, base, end);
        e = e != NULL ? entry_hit(c, e) : entry_new(c, base, end - base, &err);
    }
    if (e == NULL)
        c->stats.uncached++;
    pthread_mutex_unlock(&c->lock);
    if (err != 0)
        util_debug("not caching [%#llx, %#llx): UFFDIO_REGISTER: %s (file-backed or unmapped?)",
                   (unsigned long long)base, (unsigned long long)end, strerror(err));
    if (e == NULL && (e = uncached_new(base, end - base)) == NULL)
        return TMX_ERR_NOMEM;
    *out = &e->reg;
    return TMX_OK;
}

void rcache_put(rcache_t *c, rcache_reg_t *reg)
{
    rcache_entry_t *e = (rcache_entry_t *)reg;

    if (e == NULL)
        return;
    if (e->uncached) {
        free(e);
        return;
    }
    pthread_mutex_lock(&c->lock);
    if (--e->refs == 0 && !c->dead) {
        if (e->state == ENTRY_LIVE)
            lru_append(c, e);
        else
            entry_free(c, e);
    }
    pthread_mutex_unlock(&c->lock);
}

/* The unmap that released us may have been read but not yet applied:
 * then wait for the monitor to finish that round. */
int rcache_reg_valid(const rcache_reg_t *reg)
{
    const rcache_entry_t *e = (const rcache_entry_t *)reg;
    unsigned seq = atomic_load_explicit(&drain_seq, memory_order_acquire);

    if (!atomic_load_explicit(&e->valid, memory_order_acquire))
        return 0;
    if (!(seq & 1))
        return 1;
    for (unsigned turns = 0; atomic_load_explicit(&drain_seq, memory_order_acquire) == seq;)
        util_spin_wait(&turns);
    return atomic_load_explicit(&e->valid, memory_order_acquire);
}

void rcache_stats(rcache_t *c, rcache_stats_t *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

void rcache_test_force_uncached(int on)
{
    atomic_store(&force_uncached, on != 0);
    atomic_store(&off_logged, 0);
}
