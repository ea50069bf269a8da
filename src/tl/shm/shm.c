/*
 * The shm transport: processes on one host. Each process owns one segment
 * (shm_layout.h), a memfd that is never linked into any file system, so
 * nothing is left in /dev/shm whatever happens; a peer maps it on first use
 * by opening /proc/<pid>/fd/<fd>. Remote reads use process_vm_readv.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/copy.h"
#include "util/hash.h"
#include "util/log.h"

static_assert(SHM_CELL_PAYLOAD - 64 >= TMX_INJECT_MAX, "an injected send fits one cell");

#define SHM_RECV_BUDGET 64  /* packets handled per progress call */
static_assert(SHM_EAGER_LIMIT + 64 <= SHM_MAX_PACKET, "an eager message and its headers fit a span");
#define SHM_STUCK_POLLS 4096 /* empty polls between looks at a blocked ring */
#define SHM_STUCK_US 10000  /* a cell claimed this long, unpublished: ask who claimed it */

enum shm_stop_at {
    SHM_STOP_NONE = TL_SHM_STOP_NONE,
    SHM_STOP_CLAIM = TL_SHM_STOP_CLAIM,     /* right after claiming a cell */
    SHM_STOP_PUBLISH = TL_SHM_STOP_PUBLISH, /* right before publishing it */
    SHM_STOP_HELP = TL_SHM_STOP_HELP,       /* right after taking a chunk of a shared copy to write */
    SHM_STOP_FBOX = TL_SHM_STOP_FBOX        /* right before publishing a fast-box entry */
};

/* Test hook (TMX_SHM_TEST_STOP): this process stops itself with SIGSTOP
 * at the n-th cell it claims or publishes, so that a test can kill it
 * exactly there. Process-wide, as signals are. */
static struct {
    int at;                 /* enum shm_stop_at */
    unsigned long n;
    _Atomic unsigned long count;
} shm_stop;

static void stop_hook_init(const tl_shm_settings_t *s)
{
    if (s->stop_at == TL_SHM_STOP_NONE)
        return;
    shm_stop.at = s->stop_at;
    shm_stop.n = (unsigned long)s->stop_n;
}

static inline void stop_hook(int at)
{
    if (__builtin_expect(shm_stop.at == at, 0) &&
        atomic_fetch_add_explicit(&shm_stop.count, 1, memory_order_relaxed) + 1 == shm_stop.n)
        raise(SIGSTOP);
}

void shm_stop_help(void)
{
    stop_hook(SHM_STOP_HELP);
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static void seg_init(shm_seg_hdr_t *seg, uint64_t uuid)
{
    seg->magic = SHM_MAGIC;
    seg->version = SHM_VERSION;
    seg->hdr_size = sizeof(*seg);
    seg->n_cells = SHM_N_CELLS;
    seg->cell_size = SHM_CELL_SIZE;
    seg->owner_uuid = uuid;
    atomic_store_explicit(&seg->closed, 0, memory_order_relaxed);
    atomic_store_explicit(&seg->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&seg->sleeping, 0, memory_order_relaxed);
    atomic_store_explicit(&seg->wake_seq, 0, memory_order_relaxed);
    atomic_store_explicit(&seg->fd_sleeping, 0, memory_order_relaxed);
    atomic_store_explicit(&seg->wake_name, 0, memory_order_relaxed);
    for (uint64_t i = 0; i < SHM_N_CELLS; i++)
        atomic_store_explicit(&shm_cell(seg, i)->seq, shm_seq(i), memory_order_relaxed);
    atomic_store_explicit(&seg->fbox_used, 0, memory_order_relaxed);
    for (int i = 0; i < SHM_N_FBOX; i++) {
        atomic_store_explicit(&seg->fbox[i].owner, 0, memory_order_relaxed);
        atomic_store_explicit(&seg->fbox[i].read, 0, memory_order_relaxed);
        atomic_store_explicit(shm_fbox_word(shm_fbox_data(seg, (uint32_t)i), 0), 0, memory_order_relaxed);
    }
    for (int i = 0; i < SHM_N_SENDERS; i++) {
        atomic_store_explicit(&seg->senders[i].uuid, 0, memory_order_relaxed);
        atomic_store_explicit(&seg->claims[i].pos, SHM_NO_CLAIM, memory_order_relaxed);
        atomic_store_explicit(&seg->senders[i].pid, 0, memory_order_relaxed);
    }
    atomic_thread_fence(memory_order_release);
}


#define SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW) /* a segment's size never changes */

static tmx_status_t seg_create(shm_iface_t *si, uint64_t uuid)
{
    si->fd = memfd_create("tmx-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (si->fd < 0) {
        util_error("shm: memfd_create: %s", strerror(errno));
        return TMX_ERR_IO;
    }
    /* sealed at its size: any local process can open it through /proc,
     * and one that cut it short would kill us and our senders with
     * SIGBUS (or wipe it, growing it again) */
    if (ftruncate(si->fd, SHM_SEG_SIZE) != 0 || fcntl(si->fd, F_ADD_SEALS, SHM_SEALS | F_SEAL_SEAL) != 0)
        goto err_close_fd;
    si->seg = mmap(NULL, SHM_SEG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, si->fd, 0);
    if (si->seg == MAP_FAILED)
        goto err_close_fd;
    seg_init(si->seg, uuid);
    return TMX_OK;

err_close_fd:
    util_error("shm: cannot create a %zu-byte segment: %s", (size_t)SHM_SEG_SIZE, strerror(errno));
    close(si->fd);
    si->fd = -1;
    return TMX_ERR_NOMEM;
}

static void wake_open(shm_iface_t *si);

static tmx_status_t shm_iface_open(const tl_iface_params_t *params, tl_iface_t **out)
{
    shm_iface_t *si = calloc(1, sizeof(*si));
    tmx_status_t st;

    if (si == NULL)
        return TMX_ERR_NOMEM;
    si->super.ops = &tl_shm_ops;
    si->super.eager_limit = SHM_EAGER_LIMIT;
    si->super.max_packet = SHM_MAX_PACKET;
    si->super.recv_cb = params->recv_cb;
    si->super.stream = params->stream;
    si->super.recv_arg = params->recv_arg;
    si->super.fail_cb = params->fail_cb;
    si->super.fail_arg = params->fail_arg;
    si->super.mem_check = params->mem_check;
    si->super.admit_cb = params->admit_cb;
    si->uuid = params->uuid;
    si->mt = params->mt;
    si->wake_asym = params->mt && params->wake_asym;
    si->host_id = tl_host_id();
    si->cma = params->settings->shm.cma ? SHM_CMA_ON : SHM_CMA_OFF;
    si->fbox = params->settings->shm.fbox;
    memset(si->slot_fbox, SHM_FBOX_NONE, sizeof(si->slot_fbox));
    si->super.get_checked = si->cma == SHM_CMA_OFF;
    si->super.get_kinds = si->cma == SHM_CMA_ON ? TL_GET_DIRECT | TL_GET_SHARED | TL_GET_COPY : TL_GET_COPY;
    si->super.put_kinds = si->cma == SHM_CMA_ON ? TL_PUT_DIRECT : 0;
    tl_put_cbs_set(&si->super, params);
    util_dlist_init(&si->eps);
    util_idmap_init(&si->ep_map, offsetof(shm_ep_t, super.uuid));
    util_dlist_init(&si->closed_eps);
    if (si->super.stream == NULL && (si->bounce = malloc(SHM_MAX_PACKET)) == NULL) {
        free(si);
        return TMX_ERR_NOMEM;
    }
    if ((st = tl_iface_register(&si->super)) != TMX_OK) {
        free(si->bounce);
        free(si);
        return st;
    }
    if ((st = seg_create(si, params->uuid)) != TMX_OK) {
        tl_iface_unregister(&si->super);
        free(si->bounce);
        free(si);
        return st;
    }
    wake_open(si);
    shm_get_init(si);
    stop_hook_init(&params->settings->shm);
    *out = &si->super;
    return TMX_OK;
}

/* The liveness lock of sender slot i: a write lock on byte i of the
 * owner's memfd, taken through our own open of it (an open file
 * description lock). The kernel drops it when the last descriptor of that
 * open goes, so exactly when our process is gone (or we closed the
 * endpoint), whatever its pid and pid namespace; a stopped process keeps
 * it. */
static struct flock slot_lock(uint32_t i, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)i, .l_len = 1};

    return fl;
}

/* Whether some process holds sender slot i's liveness lock. fd is any
 * open of the segment other than the sender's own (the owner's). */
static int slot_alive(int fd, uint32_t i)
{
    struct flock fl = slot_lock(i, F_WRLCK);

    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
        util_warn("shm: cannot test sender slot %u's lock: %s", i, strerror(errno));
        return 1; /* never skip a cell on a doubt */
    }
    return fl.l_type != F_UNLCK;
}

/* Takes a free sender slot in the peer's segment and its liveness lock.
 * Never one still holding our uuid: that one may have a goodbye on its
 * way (slot_give_back) that would free it under us. A slot whose last
 * sender has not yet closed its open of the segment (its lock still
 * held) is left for another. The lock is ours before our first claim. */
static tmx_status_t slot_take(shm_ep_t *ep, uint64_t self)
{
    for (uint32_t i = 0; i < SHM_N_SENDERS; i++) {
        shm_sender_t *s = &ep->seg->senders[i];
        struct flock fl = slot_lock(i, F_WRLCK);
        uint64_t v = 0;
        if (atomic_load_explicit(&s->uuid, memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong_explicit(&s->uuid, &v, self, memory_order_release,
                                                     memory_order_relaxed))
            continue;
        if (fcntl(ep->seg_fd, F_OFD_SETLK, &fl) != 0) {
            atomic_store_explicit(&s->uuid, 0, memory_order_release);
            continue;
        }
        /* the owner frees the slot of a sender that is gone holding its
         * lock (slots_reclaim): it may have taken us for one before we
         * had the lock */
        if (atomic_load_explicit(&s->uuid, memory_order_acquire) != self) {
            fl.l_type = F_UNLCK;
            fcntl(ep->seg_fd, F_OFD_SETLK, &fl);
            continue;
        }
        atomic_store_explicit(&ep->seg->claims[i].pos, SHM_NO_CLAIM, memory_order_relaxed);
        atomic_store_explicit(&ep->seg->claims[i].n, 1, memory_order_relaxed);
        atomic_store_explicit(&s->pid, (uint32_t)getpid(), memory_order_relaxed);
        ep->slot = (uint16_t)i;
        ep->has_slot = 1;
        return TMX_OK;
    }
    util_error("shm: peer %016llx's segment has no free sender slot (%d senders hold one)",
               (unsigned long long)ep->super.uuid, SHM_N_SENDERS);
    return TMX_ERR_UNREACHABLE;
}

/* Gives our slot back with a goodbye: a packet cell of length 0 after all
 * our cells. The owner consumes its ring in order, so when it frees the
 * slot no cell of ours is left to name it. A full ring (or a dead owner)
 * keeps the slot; a process that dies keeps its slots too. */
static void slot_give_back(shm_ep_t *ep)
{
    shm_cell_t *cell;
    uint64_t pos;

    if (!ep->has_slot || ep->failed)
        return;
    ep->has_slot = 0;
    if ((cell = shm_cell_claim(ep, &pos)) == NULL) {
        util_debug("shm: peer %016llx's ring is full: sender slot %u stays taken", (unsigned long long)ep->super.uuid,
                   ep->slot);
        return;
    }
    shm_cell_publish(ep, cell, pos, SHM_KIND_PACKET, 0);
}

static void ep_unmap(shm_ep_t *ep)
{
    slot_give_back(ep);
    if (ep->seg != NULL)
        munmap(ep->seg, SHM_SEG_SIZE);
    if (ep->seg_fd >= 0)
        close(ep->seg_fd); /* drops our slot's liveness lock */
    if (ep->pidfd >= 0)
        close(ep->pidfd);
}

static void eps_free(util_dlist_t *eps)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, eps) {
        shm_ep_t *ep = util_container_of(pos, shm_ep_t, link);
        ep_unmap(ep);
        free(ep);
    }
}

static void span_end(shm_iface_t *si, int ok);

static void shm_iface_close(tl_iface_t *iface)
{
    shm_iface_t *si = (shm_iface_t *)iface;

    si->closing = 1;
    if (si->rx.on)
        span_end(si, TL_STREAM_GONE); /* lets the layer above let go of its sink */
    shm_get_fini(si); /* before the endpoints it waits on go */
    eps_free(&si->eps);
    eps_free(&si->closed_eps);
    util_idmap_fini(&si->ep_map);
    /* Our buffers are abandoned from here (tmx_context_destroy): a peer
     * reading them checks this word before and after each copy
     * (shm_get.c: cma_copy), and it must be visible before any write the
     * application makes to them once we return. */
    atomic_store_explicit(&si->seg->closed, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    atomic_store_explicit(&si->seg->wake_name, 0, memory_order_relaxed);
    munmap(si->seg, SHM_SEG_SIZE);
    close(si->fd);
    if (si->wake_fd >= 0)
        close(si->wake_fd);
    free(si->bounce);
    tl_iface_unregister(iface);
    free(si);
}

static tmx_status_t shm_address(tl_iface_t *iface, void *buf, size_t *len)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    shm_addr_t a = {htole64(si->host_id), htole32((uint32_t)getpid()), (int32_t)htole32((uint32_t)si->fd),
                    htole64(SHM_SEG_SIZE)};

    return tl_address_put(buf, len, &a, sizeof(a));
}

static tmx_status_t shm_reachable(tl_iface_t *iface, const void *addr, size_t len)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    shm_addr_t a;

    if (len != sizeof(a))
        return TMX_ERR_INVALID;
    memcpy(&a, addr, sizeof(a));
    if (le64toh(a.host_id) != si->host_id)
        return TMX_ERR_UNREACHABLE;
    if (le64toh(a.seg_size) != SHM_SEG_SIZE) {
        util_warn("shm: peer's segment size %llu differs from ours (%zu): another tmx build?",
                  (unsigned long long)le64toh(a.seg_size), (size_t)SHM_SEG_SIZE);
        return TMX_ERR_UNREACHABLE;
    }
    return TMX_OK;
}

/* Maps the peer's segment through its memfd and checks that it is the
 * segment of the context we were told about. */
static tmx_status_t ep_map(shm_ep_t *ep, const shm_addr_t *a, uint64_t uuid)
{
    char path[64];
    struct stat st;
    int fd;

    snprintf(path, sizeof(path), "/proc/%u/fd/%d", ep->pid, (int)le32toh((uint32_t)a->fd));
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        util_error("shm: cannot open peer %016llx's segment %s: %s", (unsigned long long)ep->super.uuid, path,
                   strerror(errno));
        return errno == ENOENT ? TMX_ERR_PEER_FAILED : TMX_ERR_UNREACHABLE;
    }
    ep->seg_fd = fd; /* kept: it holds our slot's liveness lock */
    if (fstat(fd, &st) != 0 || st.st_size != (off_t)SHM_SEG_SIZE ||
        (fcntl(fd, F_GET_SEALS) & SHM_SEALS) != SHM_SEALS) {
        util_error("shm: %s is not the segment of peer %016llx: not a sealed file of %zu bytes", path,
                   (unsigned long long)ep->super.uuid, (size_t)SHM_SEG_SIZE);
        return TMX_ERR_UNREACHABLE;
    }
    ep->seg = mmap(NULL, SHM_SEG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ep->seg == MAP_FAILED) {
        ep->seg = NULL;
        util_error("shm: cannot map peer %016llx's segment: %s", (unsigned long long)ep->super.uuid, strerror(errno));
        return TMX_ERR_NOMEM;
    }
    if (ep->seg->magic != SHM_MAGIC || ep->seg->version != SHM_VERSION ||
        ep->seg->hdr_size != sizeof(shm_seg_hdr_t) || ep->seg->n_cells != SHM_N_CELLS ||
        ep->seg->cell_size != SHM_CELL_SIZE || ep->seg->owner_uuid != uuid) {
        util_error("shm: %s is not the segment of peer %016llx", path, (unsigned long long)ep->super.uuid);
        return TMX_ERR_UNREACHABLE;
    }
    return TMX_OK;
}

static void fbox_share_order(shm_ep_t *other, shm_ep_t *ep);

static tmx_status_t shm_ep_create(tl_iface_t *iface, const void *addr, size_t len, tmx_peer_t peer,
                                  uint64_t uuid, tl_ep_t **out)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    shm_ep_t *ep;
    shm_addr_t a;
    tmx_status_t st = shm_reachable(iface, addr, len);

    if (st != TMX_OK)
        return st;
    memcpy(&a, addr, sizeof(a));
    if ((ep = calloc(1, sizeof(*ep))) == NULL)
        return TMX_ERR_NOMEM;
    tl_ep_init(&ep->super, iface, uuid, peer);
    ep->pid = le32toh(a.pid);
    ep->pidfd = (int)syscall(SYS_pidfd_open, ep->pid, 0);
    ep->seg_fd = -1;
    ep->fbox = SHM_FBOX_NONE;
    ep->fb_use = (uint8_t)si->fbox;
    ep->ring_last = SHM_NO_CLAIM;
    if ((st = ep_map(ep, &a, uuid)) != TMX_OK || (st = slot_take(ep, si->uuid)) != TMX_OK) {
        ep_unmap(ep);
        free(ep);
        return st;
    }
    ep->after_box = SHM_FBOX_NONE;
    {
        shm_ep_t *other = util_idmap_get(&si->ep_map, uuid);
        if (other != NULL) /* the same context twice: no boxes for either */
            fbox_share_order(other, ep);
    }
    if (util_idmap_put(&si->ep_map, ep) != 0) {
        slot_give_back(ep);
        ep_unmap(ep);
        free(ep);
        return TMX_ERR_NOMEM;
    }
    util_dlist_push_tail(&si->eps, &ep->link);
    *out = &ep->super;
    return TMX_OK;
}

/* Two endpoints to one context (the layer above added it twice) send in
 * one order, as through one ring: neither uses a box from now on, and the
 * new one sends nothing until the box of the other (or the one it had to
 * wait for) is consumed up to its last entry (shm_send). */
static void fbox_share_order(shm_ep_t *other, shm_ep_t *ep)
{
    other->fb_use = 0;
    ep->fb_use = 0;
    if (other->fbox != SHM_FBOX_NONE) {
        ep->after_box = other->fbox;
        ep->after_pos = other->fb_write;
    } else {
        ep->after_box = other->after_box;
        ep->after_pos = other->after_pos;
    }
}

/* Whether what the box we wait for held is consumed. */
static int fbox_passed(shm_ep_t *ep)
{
    if ((int64_t)(atomic_load_explicit(&ep->seg->fbox[ep->after_box].read, memory_order_acquire) -
                  ep->after_pos) < 0)
        return 0;
    ep->after_box = SHM_FBOX_NONE;
    return 1;
}

/* The uuid's live endpoint is gone: another one to the same context (added
 * twice by the layer above), if any, answers for it now. Rare: a scan. */
static void ep_map_forget(shm_iface_t *si, uint64_t uuid)
{
    util_dlist_t *pos;

    util_idmap_del(&si->ep_map, uuid);
    util_dlist_foreach(pos, &si->eps) {
        shm_ep_t *other = util_container_of(pos, shm_ep_t, link);
        if (other->super.uuid == uuid) {
            util_idmap_put(&si->ep_map, other); /* a slot was just freed */
            return;
        }
    }
}

/* Gives our slot back at once, but keeps the endpoint (its mapping,
 * pidfd and memory) until the transport closes: a shared copy the owner
 * may still be writing names it (shm_get_fini waits for the write), and
 * the core closes endpoints before transports. */
static void shm_ep_destroy(tl_ep_t *tep)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    shm_iface_t *si = (shm_iface_t *)tl_ep_iface(&ep->super);

    slot_give_back(ep);
    util_dlist_unlink(&ep->link);
    util_dlist_push_tail(&si->closed_eps, &ep->link);
    if (util_idmap_get(&si->ep_map, ep->super.uuid) == ep)
        ep_map_forget(si, ep->super.uuid);
}

/* The cell at pos + n - 1 was taken in this lap (its seq is ahead), so
 * the tail, which moves only forward, is past it. A tail still at pos was
 * written back by someone else (any local process can write the
 * segment): we move it past that cell, and *pos with it, rather than spin
 * on it for ever. 0 if the tail had moved on. */
static int tail_behind(shm_seg_hdr_t *seg, uint64_t *pos, uint32_t n)
{
    uint64_t t = *pos;

    if (atomic_load_explicit(&seg->tail, memory_order_relaxed) != t ||
        !atomic_compare_exchange_strong_explicit(&seg->tail, &t, t + n, memory_order_relaxed,
                                                 memory_order_relaxed))
        return 0;
    util_warn("shm: the tail of a ring stood at %llu, behind cells already taken: moved to %llu",
              (unsigned long long)*pos, (unsigned long long)(*pos + n));
    *pos += n;
    return 1;
}

/* Claims the next n consecutive positions of the peer's ring (n > 1: a
 * span). Our slot names the first and their number before the
 * compare-and-swap that takes them (release: a consumer that sees the
 * new tail sees our claim), so that a consumer can tell who holds a cell
 * that stays unpublished (ring_unblock). The consumer frees cells in
 * order, so the last of them free means all of them are. */
static inline shm_cell_t *cells_claim(shm_ep_t *ep, uint32_t n, uint64_t *out_pos)
{
    shm_seg_hdr_t *seg = ep->seg;
    shm_claim_t *claim = &seg->claims[ep->slot];
    uint64_t pos = atomic_load_explicit(&seg->tail, memory_order_relaxed);

    if (atomic_load_explicit(&claim->n, memory_order_relaxed) != n)
        atomic_store_explicit(&claim->n, n, memory_order_relaxed);
    for (;;) {
        shm_cell_t *last = shm_cell(seg, pos + n - 1);
        uint32_t seq = atomic_load_explicit(&last->seq, memory_order_acquire);
        int32_t diff = (int32_t)(seq - shm_seq(pos + n - 1));
        if (diff == 0) {
            atomic_store_explicit(&claim->pos, pos, memory_order_relaxed);
            if (atomic_compare_exchange_weak_explicit(&seg->tail, &pos, pos + n, memory_order_release,
                                                      memory_order_relaxed)) {
                *out_pos = pos;
                stop_hook(SHM_STOP_CLAIM);
                return shm_cell(seg, pos);
            }
        } else if (diff < 0) {
            atomic_store_explicit(&claim->pos, SHM_NO_CLAIM, memory_order_relaxed);
            return NULL;
        } else if (!tail_behind(seg, &pos, n)) {
            pos = atomic_load_explicit(&seg->tail, memory_order_relaxed);
        }
    }
}

/* Claims the next cell of the peer's ring. */
shm_cell_t *shm_cell_claim(shm_ep_t *ep, uint64_t *out_pos)
{
    return cells_claim(ep, 1, out_pos);
}

shm_cell_t *shm_cells_claim(shm_ep_t *ep, uint32_t n, uint64_t *out_pos)
{
    return n >= 1 && n <= SHM_SPAN_CELLS ? cells_claim(ep, n, out_pos) : NULL;
}

/* The abstract Unix socket address of a wake name: abstract, so nothing
 * is left in the file system, and scoped by the network namespace, which
 * the peers of shm share (tl_host_id). */
static socklen_t wake_addr(uint64_t name, struct sockaddr_un *sa)
{
    int n;

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "tmx-shm-wake-%016llx", (unsigned long long)name);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Our wake socket, under a random name published in our segment: a
 * thread of ours that sleeps in poll() over several transports' descriptors
 * (shm_wait_arm) is woken by a datagram to it. Without one (no socket, or
 * no free name) such a sleep falls back to turns (core_idle_sleep). */
static void wake_open(shm_iface_t *si)
{
    struct sockaddr_un sa;

    si->wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (si->wake_fd < 0) {
        util_debug("shm: no wake socket (%s): a sleep over several transports takes turns", strerror(errno));
        return;
    }
    for (int tries = 0; tries < 4; tries++) {
        uint64_t name = 0;

        if (getrandom(&name, sizeof(name), GRND_NONBLOCK) != (ssize_t)sizeof(name))
            name = util_hash64(si->uuid ^ ((uint64_t)getpid() << 32) ^ (uint64_t)tries);
        if (name == 0)
            continue;
        if (bind(si->wake_fd, (struct sockaddr *)&sa, wake_addr(name, &sa)) == 0) {
            si->wake_name = name;
            atomic_store_explicit(&si->seg->wake_name, name, memory_order_release);
            return;
        }
        if (errno != EADDRINUSE)
            break;
    }
    util_debug("shm: wake socket unbound (%s): a sleep over several transports takes turns", strerror(errno));
}

/* Wakes the owner's threads asleep on its wake socket (best effort: a full
 * socket already holds a wake, and a name that leads nowhere only makes
 * the sleep last until its cap). */
static void wake_send(const shm_iface_t *si, shm_seg_hdr_t *seg)
{
    uint64_t name = atomic_load_explicit(&seg->wake_name, memory_order_relaxed);
    struct sockaddr_un sa;
    char b = 0;

    if (name != 0 && si->wake_fd >= 0)
        (void)sendto(si->wake_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, wake_addr(name, &sa));
}

/* fd_sleeping is read after sleeping: a sleeper counts itself in
 * fd_sleeping before sleeping (both seq_cst), so once we saw it in
 * sleeping we see it there too. */
static void seg_wake_now(const shm_iface_t *si, shm_seg_hdr_t *seg)
{
    atomic_fetch_add_explicit(&seg->wake_seq, 1, memory_order_relaxed);
    futex(&seg->wake_seq, FUTEX_WAKE, INT_MAX, NULL);
    if (atomic_load_explicit(&seg->fd_sleeping, memory_order_seq_cst) != 0)
        wake_send(si, seg);
}

/* Wakes the consumer's threads if any announced that it sleeps. The
 * seq_cst fence pairs with the one in shm_wait(): either a sleeper sees
 * what we did before, or we see its count. */
static void seg_wake(const shm_iface_t *si, shm_seg_hdr_t *seg)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&seg->sleeping, memory_order_relaxed) != 0)
        seg_wake_now(si, seg);
}

/* The same after a seq_cst read-modify-write of a cell's seq (a publish):
 * the sleeper counts itself with a seq_cst read-modify-write and then
 * reads that seq with a seq_cst load (shm_wait), so in the single order
 * of seq_cst operations either its load follows our publish, or our load
 * of the count follows its increment. No fence: on x86 the publish's
 * locked instruction already orders the load, which a fence would order a
 * second time on every send. */
static inline void seg_wake_published(shm_ep_t *ep)
{
    if (atomic_load_explicit(&ep->seg->sleeping, memory_order_seq_cst) != 0)
        seg_wake_now((const shm_iface_t *)tl_ep_iface(&ep->super), ep->seg);
}

#define SHM_FBOX_RETRY 4096 /* short sends between looks for a free fast box */

/* Takes a free fast box in the peer's segment (shm_layout.h), or none:
 * all are taken, and the ring serves until another look, SHM_FBOX_RETRY
 * short sends later. We start where its last consumer stopped. */
static int fbox_take(shm_ep_t *ep)
{
    shm_seg_hdr_t *seg = ep->seg;

    if (ep->fbox_retry != 0) {
        ep->fbox_retry--;
        return 0;
    }
    for (uint32_t i = 0; i < SHM_N_FBOX; i++) {
        uint32_t v = 0;
        if (atomic_load_explicit(&seg->fbox[i].owner, memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong_explicit(&seg->fbox[i].owner, &v, (uint32_t)ep->slot + 1u,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        ep->fbox = (uint8_t)i;
        ep->fb_write = atomic_load_explicit(&seg->fbox[i].read, memory_order_acquire) & ~(uint64_t)7;
        ep->fb_read = ep->fb_write;
        atomic_fetch_or_explicit(&seg->fbox_used, 1ull << i, memory_order_seq_cst); /* as a publish, for shm_wait */
        return 1;
    }
    ep->fbox_retry = SHM_FBOX_RETRY;
    return 0;
}

/* Puts a packet of total bytes (1 to SHM_FBOX_MAX) into our fast box: 1
 * if it went, 0 if it goes through the ring (no box, the box full, or a
 * cell of ours still unconsumed in the ring, which it must not
 * overtake). See shm_layout.h for the order of the writes. */
static inline int fbox_send(shm_ep_t *ep, const struct iovec *iov, int iovcnt, size_t total)
{
    uint64_t w, o, skip, at;
    uint32_t need = shm_fbox_entry((uint32_t)total);
    unsigned char *data, *e;
    size_t off = 8;

    if (__builtin_expect(ep->ring_last != SHM_NO_CLAIM, 0)) {
        if (atomic_load_explicit(&shm_cell(ep->seg, ep->ring_last)->seq, memory_order_acquire) ==
            shm_seq(ep->ring_last + 1))
            return 0; /* published, not yet consumed */
        ep->ring_last = SHM_NO_CLAIM;
    }
    if (__builtin_expect(ep->fbox == SHM_FBOX_NONE, 0) && !fbox_take(ep))
        return 0;
    w = ep->fb_write;
    o = w & (SHM_FBOX_SIZE - 1);
    skip = o + need > SHM_FBOX_SIZE ? SHM_FBOX_SIZE - o : 0;
    if (w + skip + need + 8 > ep->fb_read + SHM_FBOX_SIZE) {
        ep->fb_read = atomic_load_explicit(&ep->seg->fbox[ep->fbox].read, memory_order_acquire) & ~(uint64_t)7;
        if (w + skip + need + 8 > ep->fb_read + SHM_FBOX_SIZE)
            return 0; /* full */
    }
    at = skip != 0 ? 0 : o;
    data = shm_fbox_data(ep->seg, ep->fbox);
    e = data + at;
    for (int i = 0; i < iovcnt; i++) {
        util_copy(e + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    atomic_store_explicit(shm_fbox_word(data, at + need), 0, memory_order_relaxed);
    stop_hook(SHM_STOP_FBOX);
    if (skip != 0) {
        atomic_store_explicit(shm_fbox_word(data, 0), SHM_FBOX_VALID | SHM_FBOX_POS(w + skip) | total,
                              memory_order_release);
        atomic_store_explicit(shm_fbox_word(data, o), SHM_FBOX_SKIP | SHM_FBOX_POS(w), memory_order_seq_cst);
    } else {
        atomic_store_explicit(shm_fbox_word(data, o), SHM_FBOX_VALID | SHM_FBOX_POS(w) | total,
                              memory_order_seq_cst);
    }
    ep->fb_write = w + skip + need;
    seg_wake_published(ep);
    return 1;
}

static tmx_status_t span_send(shm_ep_t *ep, const struct iovec *iov, int iovcnt, size_t total);

static tmx_status_t shm_send(tl_ep_t *tep, const struct iovec *iov, int iovcnt)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    shm_cell_t *cell;
    uint64_t pos;
    size_t off = 0, total = 0;

    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (total == 0 || total > SHM_MAX_PACKET) { /* an empty cell says goodbye */
        util_error("shm: packet of %zu bytes: want 1 to %zu", total, (size_t)SHM_MAX_PACKET);
        return TMX_ERR_INVALID;
    }
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    if (__builtin_expect(ep->after_box != SHM_FBOX_NONE, 0) && !fbox_passed(ep))
        return TMX_ERR_AGAIN;
    if (total <= SHM_FBOX_MAX && ep->fb_use && fbox_send(ep, iov, iovcnt, total))
        return TMX_OK;
    if (total > SHM_CELL_PAYLOAD)
        return span_send(ep, iov, iovcnt, total);
    if ((cell = cells_claim(ep, 1, &pos)) == NULL)
        return TMX_ERR_AGAIN;
    for (int i = 0; i < iovcnt; i++) {
        util_copy(cell->payload + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    return shm_cell_publish(ep, cell, pos, SHM_KIND_PACKET, (uint32_t)off);
}

/* Publishes the cell we claimed at pos: a compare-and-swap from the
 * unpublished state, so that if the consumer skipped it (it took us for
 * dead, ring_unblock) we neither overwrite the next lap's cell nor move
 * its sequence backwards; the packet is then lost and the peer failed. */
static inline int cell_publish_quiet(shm_ep_t *ep, shm_cell_t *cell, uint64_t pos, uint32_t kind,
                                     uint32_t len)
{
    uint32_t seq = shm_seq(pos);

    cell->len = (uint16_t)len;
    cell->slot_kind = (uint16_t)(ep->slot | kind << SHM_KIND_SHIFT);
    ep->ring_last = pos; /* no box entry of ours may overtake it (fbox_send) */
    stop_hook(SHM_STOP_PUBLISH);
    if (!atomic_compare_exchange_strong_explicit(&cell->seq, &seq, shm_seq(pos + 1), memory_order_seq_cst,
                                                 memory_order_relaxed)) {
        util_error("shm: peer %016llx skipped ring position %llu that we held: it took us for dead",
                   (unsigned long long)ep->super.uuid, (unsigned long long)pos);
        ep->lost = 1; /* shm_check_peers fails it */
        return 0;
    }
    return 1;
}

tmx_status_t shm_cell_publish(shm_ep_t *ep, shm_cell_t *cell, uint64_t pos, uint32_t kind, uint32_t len)
{
    if (!cell_publish_quiet(ep, cell, pos, kind, len))
        return TMX_ERR_PEER_FAILED;
    seg_wake_published(ep);
    return TMX_OK;
}

/* Copies the next len bytes of the packet in iov into dst: *i and *off
 * say where the last call stopped. */
static void iov_take(unsigned char *dst, size_t len, const struct iovec *iov, int *i, size_t *off)
{
    while (len > 0) {
        size_t c = iov[*i].iov_len - *off;
        if (c > len)
            c = len;
        memcpy(dst, (const unsigned char *)iov[*i].iov_base + *off, c);
        dst += c;
        len -= c;
        if ((*off += c) == iov[*i].iov_len) {
            ++*i;
            *off = 0;
        }
    }
}

/* A packet longer than a cell, as a span (shm_layout.h): each cell
 * published as soon as it is filled, in order, so that the consumer
 * copies one part out while we copy the next in. A publish that finds
 * its cell skipped (the consumer took us for dead) does not stop the
 * others: every cell we claimed must leave the unpublished state. */
static tmx_status_t span_send(shm_ep_t *ep, const struct iovec *iov, int iovcnt, size_t total)
{
    uint32_t n = shm_span_cells(total);
    shm_span_t head = {htole64(total)};
    uint64_t pos;
    shm_cell_t *cell = cells_claim(ep, n, &pos);
    size_t off = 0;
    int i = 0, ok = 1;

    if (cell == NULL)
        return TMX_ERR_AGAIN;
    while (i < iovcnt && iov[i].iov_len == 0)
        i++;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t len = shm_span_part(total, n, j);
        cell = shm_cell(ep->seg, pos + j);
        if (j == 0) {
            memcpy(cell->payload, &head, sizeof(head));
            iov_take(cell->payload + sizeof(head), len - sizeof(head), iov, &i, &off);
        } else {
            iov_take(cell->payload, len, iov, &i, &off);
        }
        ok &= cell_publish_quiet(ep, cell, pos + j, j == 0 ? SHM_KIND_SPAN : SHM_KIND_CONT, len);
        seg_wake_published(ep);
    }
    return ok ? TMX_OK : TMX_ERR_PEER_FAILED;
}

/* ------------------------------------------------- fast boxes, consumer */

/* A box whose sender wrote nonsense into it is polled no more (its slot
 * keeps it until its goodbye). */
static void fbox_break(shm_iface_t *si, uint32_t i, uint64_t h)
{
    si->fb_on &= ~(1ull << i);
    atomic_fetch_or_explicit(&si->fb_broken, 1ull << i, memory_order_relaxed);
    si->dropped++;
    util_warn("shm: fast box %u of sender slot %u holds a header %#llx at %llu that no sender writes: "
              "it is read no more", i, si->fb_slot[i], (unsigned long long)h,
              (unsigned long long)si->fb_rd[i]);
}

/* Takes in the boxes whose bits changed in fbox_used: a box a sender
 * took is polled from now on (its slot read once, here); a bit cleared
 * by someone else than us stops the polling. */
static void fbox_refresh(shm_iface_t *si, uint64_t used)
{
    uint64_t changed = (used ^ si->fb_seen) & SHM_FBOX_ALL;

    while (changed != 0) {
        uint32_t i = (uint32_t)__builtin_ctzll(changed), owner, slot;
        uint64_t bit = 1ull << i;
        changed &= changed - 1;
        if ((used & bit) == 0) { /* not by us (fbox_release): a box read no more */
            if (si->slot_fbox[si->fb_slot[i]] == i)
                si->slot_fbox[si->fb_slot[i]] = SHM_FBOX_NONE;
            si->fb_on &= ~bit;
            si->fb_seen &= ~bit;
            continue;
        }
        owner = atomic_load_explicit(&si->seg->fbox[i].owner, memory_order_acquire);
        if (owner == 0)
            continue; /* not a sender's (a taker sets owner first): looked at again */
        si->fb_seen |= bit;
        slot = owner - 1;
        if (slot >= SHM_N_SENDERS || si->slot_fbox[slot] != SHM_FBOX_NONE) {
            si->dropped++;
            util_warn("shm: fast box %u names sender slot %u, which has %s: it is read no more", i, slot,
                      owner == 0 || slot >= SHM_N_SENDERS ? "no sender" : "a box already");
            atomic_fetch_or_explicit(&si->fb_broken, bit, memory_order_relaxed);
            continue;
        }
        si->fb_slot[i] = (uint16_t)slot;
        si->slot_fbox[slot] = (uint8_t)i;
        si->fb_on |= bit;
    }
}

/* Frees box i for another sender: its sender said goodbye, and it holds
 * nothing more. The header word at our position is zeroed (a broken box
 * may hold anything there) before the box is free. */
static void fbox_release(shm_iface_t *si, uint32_t i)
{
    shm_seg_hdr_t *seg = si->seg;
    uint64_t bit = 1ull << i;

    si->slot_fbox[si->fb_slot[i]] = SHM_FBOX_NONE;
    si->fb_on &= ~bit;
    si->fb_seen &= ~bit;
    atomic_fetch_and_explicit(&seg->fbox_used, ~bit, memory_order_relaxed);
    atomic_fetch_and_explicit(&si->fb_broken, ~bit, memory_order_relaxed);
    atomic_store_explicit(shm_fbox_word(shm_fbox_data(seg, i), si->fb_rd[i]), 0, memory_order_relaxed);
    atomic_store_explicit(&seg->fbox[i].read, si->fb_rd[i], memory_order_relaxed);
    atomic_store_explicit(&seg->fbox[i].owner, 0, memory_order_release);
}

/* Hands up what box i holds, at most budget packets; *held when the
 * layer above, at its bound of unexpected memory, leaves the next one
 * there (as cell_leave leaves a cell). */
static int fbox_drain(shm_iface_t *si, uint32_t i, int budget, int *held)
{
    unsigned char *data = shm_fbox_data(si->seg, i);
    uint64_t rd = si->fb_rd[i], src = 0;
    int n = 0;

    while (n < budget) {
        uint64_t o = rd & (SHM_FBOX_SIZE - 1);
        uint64_t h = atomic_load_explicit(shm_fbox_word(data, o), memory_order_acquire);
        uint32_t len = (uint32_t)(h & SHM_FBOX_LEN_MASK);
        if (h == 0)
            break;
        if (h == (SHM_FBOX_SKIP | SHM_FBOX_POS(rd)) && o != 0) {
            rd += SHM_FBOX_SIZE - o;
            continue;
        }
        if (src == 0)
            src = atomic_load_explicit(&si->seg->senders[si->fb_slot[i]].uuid, memory_order_relaxed);
        if (h != (SHM_FBOX_VALID | SHM_FBOX_POS(rd) | len) || len == 0 || len > SHM_FBOX_MAX ||
            o + shm_fbox_entry(len) > SHM_FBOX_SIZE || src == 0) {
            si->fb_rd[i] = rd;
            fbox_break(si, i, h);
            break;
        }
        if (si->super.rx_full && !si->super.admit_cb(si->super.recv_arg, src, data + o + 8, len)) {
            *held = 1;
            break;
        }
        si->super.recv_cb(si->super.recv_arg, src, data + o + 8, len);
        rd += shm_fbox_entry(len);
        n++;
    }
    if (rd != si->fb_rd[i] || n != 0) {
        si->fb_rd[i] = rd;
        atomic_store_explicit(&si->seg->fbox[i].read, rd, memory_order_release);
    }
    return n;
}

/* Polls every box a sender holds; used is fbox_used as just read. */
static int fbox_poll(shm_iface_t *si, uint64_t used, int budget, int *held)
{
    int events = 0;

    if (used != si->fb_seen)
        fbox_refresh(si, used);
    for (uint64_t on = si->fb_on; on != 0 && events < budget; on &= on - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(on);
        /* an empty box, the usual case, costs one load here */
        if (atomic_load_explicit(shm_fbox_word(shm_fbox_data(si->seg, i), si->fb_rd[i] & (SHM_FBOX_SIZE - 1)),
                                 memory_order_relaxed) != 0)
            events += fbox_drain(si, i, budget - events, held);
    }
    return events;
}

/* Before a cell from a sender that holds a box, everything in its box,
 * which is older (shm_layout.h); 0 if the layer above leaves some there,
 * and the cell must wait too. */
static inline int fbox_before_cell(shm_iface_t *si, const shm_cell_head_t *ch, int *events)
{
    uint64_t used = atomic_load_explicit(&si->seg->fbox_used, memory_order_relaxed) & SHM_FBOX_ALL;
    uint32_t i;
    int held = 0;

    if ((used | si->fb_seen) == 0)
        return 1;
    if (used != si->fb_seen)
        fbox_refresh(si, used);
    if (ch->slot >= SHM_N_SENDERS || (i = si->slot_fbox[ch->slot]) == SHM_FBOX_NONE ||
        (si->fb_on >> i & 1) == 0)
        return 1;
    /* what is older than the cell fits the box: at most a box of the
     * shortest entries (a budget that also bounds a broken box) */
    *events += fbox_drain(si, i, SHM_FBOX_SIZE / 16, &held);
    return !held;
}

/* Whether box i holds a published entry at its consumer's position as
 * published in read: for shm_wait, unlocked, and ring_holds_from. */
static int fbox_ready(shm_seg_hdr_t *seg, uint32_t i)
{
    uint64_t rd = atomic_load_explicit(&seg->fbox[i].read, memory_order_relaxed);

    return atomic_load_explicit(shm_fbox_word(shm_fbox_data(seg, i), rd & ~(uint64_t)7), memory_order_seq_cst) != 0;
}

/* Handles one published cell; a cell that does not parse is dropped. */
static void cell_deliver(shm_iface_t *si, shm_cell_t *cell, const shm_cell_head_t *ch)
{
    uint64_t src = shm_slot_uuid(si->seg, ch->slot);

    if (ch->len == 0 && src != 0 && ch->kind == SHM_KIND_PACKET) {
        if (si->slot_fbox[ch->slot] != SHM_FBOX_NONE) /* emptied by fbox_before_cell */
            fbox_release(si, si->slot_fbox[ch->slot]);
        atomic_store_explicit(&si->seg->senders[ch->slot].uuid, 0, memory_order_release); /* goodbye */
        return;
    }
    if (ch->len == 0 || ch->len > SHM_CELL_PAYLOAD || src == 0) {
        si->dropped++;
        util_warn("shm: dropped a cell of length %u from sender slot %u", ch->len, ch->slot);
        return;
    }
    if (ch->kind == SHM_KIND_PACKET) {
        si->super.recv_cb(si->super.recv_arg, src, cell->payload, ch->len);
    } else if (ch->kind == SHM_KIND_CONT) {
        si->dropped++;
        util_warn("shm: dropped a cell of a span without its first, from sender slot %u", ch->slot);
    } else {
        shm_get_cell(si, cell, ch);
    }
}

/* The first cell of a span, at head: hands up its piece and starts
 * taking the later cells as they are published (span_more). One that
 * does not hold together (a length out of range, or the cell's not the
 * one its length makes) is dropped: the consumer meets the later cells
 * on their own, and drops them too. */
static void span_begin(shm_iface_t *si, shm_cell_t *first, const shm_cell_head_t *ch)
{
    uint64_t src = shm_slot_uuid(si->seg, ch->slot);
    uint32_t len = ch->len, n;
    shm_span_t head;
    uint64_t total;

    memcpy(&head, first->payload, sizeof(head));
    total = le64toh(head.len);
    if (src == 0 || total <= SHM_CELL_PAYLOAD || total > SHM_MAX_PACKET ||
        len != shm_span_part(total, (n = shm_span_cells(total)), 0)) {
        si->dropped++;
        util_warn("shm: dropped a span of %llu bytes from sender slot %u that does not hold together",
                  (unsigned long long)total, ch->slot);
        return;
    }
    si->rx.on = 1;
    si->rx.slot = (uint16_t)ch->slot;
    si->rx.n = n;
    si->rx.j = 1;
    si->rx.total = total;
    si->rx.src = src;
    si->rx.sink = NULL;
    len -= sizeof(head);
    if (si->super.stream != NULL) {
        si->rx.sink = si->super.stream->begin(si->super.recv_arg, src, first->payload + sizeof(head), len, total);
    } else {
        memcpy(si->bounce, first->payload + sizeof(head), len);
        si->rx.off = len;
    }
}

/* Whether cell, at head, is the next of the span under way. */
static int span_next(const shm_iface_t *si, const shm_cell_head_t *ch)
{
    return ch->kind == SHM_KIND_CONT && ch->slot == si->rx.slot &&
           ch->len == shm_span_part(si->rx.total, si->rx.n, si->rx.j);
}

static void span_more(shm_iface_t *si, const shm_cell_t *cell, uint32_t len)
{
    if (si->super.stream != NULL) {
        if (si->rx.sink != NULL)
            si->super.stream->more(si->super.recv_arg, si->rx.sink, cell->payload, len);
    } else {
        memcpy(si->bounce + si->rx.off, cell->payload, len);
        si->rx.off += len;
    }
}

/* The span under way is whole (TL_STREAM_WHOLE), or never will be: its
 * sender died before publishing the next cell, or the transport closes
 * (TL_STREAM_GONE), or it broke the span off with another cell
 * (TL_STREAM_BROKEN). */
static void span_end(shm_iface_t *si, int how)
{
    si->rx.on = 0;
    if (how == TL_STREAM_BROKEN || (how == TL_STREAM_GONE && !si->closing)) {
        si->dropped++;
        util_warn("shm: a span of %llu bytes from sender slot %u ended after %u of its %u cells",
                  (unsigned long long)si->rx.total, si->rx.slot, si->rx.j, si->rx.n);
    }
    if (si->super.stream != NULL) {
        if (si->rx.sink != NULL)
            si->super.stream->end(si->super.recv_arg, si->rx.sink, how);
    } else if (how == TL_STREAM_WHOLE) {
        si->super.recv_cb(si->super.recv_arg, si->rx.src, si->bounce, si->rx.off);
    }
    si->rx.sink = NULL;
}

static int64_t shm_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Whether no live process claims the cell at pos, which the tail has
 * passed: no sender slot that claims pos holds its liveness lock
 * (slot_lock). A producer that failed to claim pos may still name it, so
 * one live claimant is enough to wait. A producer names a position in its
 * slot before it moves the tail past it, so a position no slot names was
 * claimed by no one: the tail was moved by someone else than a producer.
 * The pid a slot names is not asked: it may have been reused, or belong
 * to another pid namespace. */
static int claimants_gone(shm_iface_t *si, uint64_t pos)
{
    for (uint32_t i = 0; i < SHM_N_SENDERS; i++) {
        uint64_t first = atomic_load_explicit(&si->seg->claims[i].pos, memory_order_relaxed);
        uint32_t n = atomic_load_explicit(&si->seg->claims[i].n, memory_order_relaxed);
        if (first == SHM_NO_CLAIM || pos < first || pos - first >= (n > SHM_SPAN_CELLS ? 1 : n))
            continue;
        if (slot_alive(si->fd, i))
            return 0;
    }
    return 1;
}

/* A producer that died between claiming our next cell and publishing it
 * would block the ring for good, and with it every live sender. When the
 * cell has stayed claimed and unpublished for SHM_STUCK_US and its
 * claimant is gone, skip it: give it to the producer of the next lap and
 * move on. A claimant that is only slow (preempted, stopped) is waited
 * for. */
static void ring_unblock(shm_iface_t *si)
{
    shm_seg_hdr_t *seg = si->seg;
    shm_cell_t *cell = shm_cell(seg, si->head);
    int taken = (int64_t)(atomic_load_explicit(&seg->tail, memory_order_acquire) - si->head) > 0;
    uint32_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
    int64_t now;

    if (seq == shm_seq(si->head + 1) || (seq == shm_seq(si->head) && !taken)) {
        si->stuck_since_us = 0;
        return; /* published, or free and not claimed */
    }
    now = shm_now_us();
    if (si->stuck_head != si->head || si->stuck_since_us == 0) {
        si->stuck_head = si->head;
        si->stuck_since_us = now;
        return;
    }
    if (now - si->stuck_since_us < SHM_STUCK_US)
        return;
    if (seq != shm_seq(si->head) && !taken) {
        /* a seq no producer writes, in a cell none claimed: free again */
        if (atomic_compare_exchange_strong_explicit(&cell->seq, &seq, shm_seq(si->head), memory_order_release,
                                                    memory_order_relaxed))
            util_warn("shm: ring position %llu held a seq %u that no sender writes: freed",
                      (unsigned long long)si->head, seq);
        si->stuck_since_us = 0;
        return;
    }
    /* claimed and unpublished: skipped once no live producer holds it; a
     * seq no producer writes (nor can publish over) is skipped at once */
    if (seq == shm_seq(si->head) && !claimants_gone(si, si->head))
        return;
    si->stuck_since_us = 0;
    if (!atomic_compare_exchange_strong_explicit(&cell->seq, &seq, shm_seq(si->head + SHM_N_CELLS),
                                                 memory_order_release, memory_order_relaxed))
        return; /* published after all: progress delivers it */
    util_warn("shm: skipped ring position %llu: %s", (unsigned long long)si->head,
              seq == shm_seq(si->head) ? "its sender died before publishing it, or no sender claimed it"
                                       : "it held a seq that no sender writes");
    if (si->rx.on)
        span_end(si, TL_STREAM_GONE);
    si->head++;
    si->skipped++;
    atomic_store_explicit(&si->wait_head, si->head, memory_order_relaxed);
}

/* Take or leave: while the layer above is at its bound of unexpected
 * memory (rx_full), a packet it will not take now stays in its cell. The
 * head does not move, so senders soon find the ring full (TMX_ERR_AGAIN)
 * and wait with their data in their own buffers, and nothing behind it is
 * lost or overtaken; it is offered again at every progress call. */
static int cell_leave(shm_iface_t *si, shm_cell_t *cell, const shm_cell_head_t *ch)
{
    uint64_t src;

    if (!si->super.rx_full || ch->len == 0 || ch->len > SHM_CELL_PAYLOAD ||
        (src = shm_slot_uuid(si->seg, ch->slot)) == 0)
        return 0;
    if (ch->kind == SHM_KIND_SPAN && ch->len > sizeof(shm_span_t))
        return !si->super.admit_cb(si->super.recv_arg, src, cell->payload + sizeof(shm_span_t),
                                   ch->len - sizeof(shm_span_t));
    if (ch->kind != SHM_KIND_PACKET)
        return 0;
    return !si->super.admit_cb(si->super.recv_arg, src, cell->payload, ch->len);
}

/* The epoch this thread saw at the end of its last progress call, which
 * ran under the core's lock: a thread that finds it changed in shm_wait
 * knows that another thread's progress ran since, and may have completed
 * what it waits for. */
static _Thread_local struct {
    const shm_iface_t *si;
    uint64_t epoch;
} shm_seen;

/* With wake_asym: whether this is the offload engine's thread, the one of
 * the two that progresses and sleeps rarely. */
static inline int on_rare_thread(const shm_iface_t *si)
{
    return tl_on_rare_thread(&si->super);
}

/* Progress that found work moves the epoch and wakes the threads asleep
 * in shm_wait (the seq_cst fence in seg_wake pairs with theirs): a thread
 * that unlocked, found its cell unpublished because another thread
 * consumed it and then slept, would sleep with its request done. Those
 * threads are all this process's. With wake_asym they are two, and the
 * application's, which progresses on every message, needs only the
 * compiler's fence: the engine's runs membarrier(), which makes every
 * thread of ours pass a full fence, when it is about to sleep
 * (sleep_fence). The engine's fences as before, so the application's
 * sleeps cost no system call. */
static void epoch_note(shm_iface_t *si, int events)
{
    uint64_t e = atomic_load_explicit(&si->epoch, memory_order_relaxed);

    if (events != 0) {
        atomic_store_explicit(&si->epoch, ++e, memory_order_relaxed);
        if (si->wake_asym && !on_rare_thread(si)) {
            atomic_signal_fence(memory_order_seq_cst);
            if (atomic_load_explicit(&si->seg->sleeping, memory_order_relaxed) != 0)
                seg_wake_now(si, si->seg);
        } else {
            seg_wake(si, si->seg);
        }
    }
    shm_seen.si = si;
    shm_seen.epoch = e;
}

static __attribute__((noinline)) int progress_full(shm_iface_t *si);

/* The end of a poll that took the short way: with threads, what
 * progress_full would note (epoch_note), out of line. */
static __attribute__((noinline)) int progress_short_mt(shm_iface_t *si, int events)
{
    epoch_note(si, events);
    return events;
}

/* The common polls in few instructions: with no box taken or freed since
 * the last look and nothing under way (no copy, no cell or entry held),
 * the boxes that hold entries are drained here and, if no cell is
 * published at the head, that is all; a poll that finds nothing returns
 * at once (with threads, having noted the epoch as progress_full does).
 * Anything else is progress_full's, which would do the same here. */
static int shm_progress(tl_iface_t *iface)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    uint64_t used = atomic_load_explicit(&si->seg->fbox_used, memory_order_acquire) & SHM_FBOX_ALL;

    if (used != si->fb_seen || si->rx.on || (si->held | si->fb_held) ||
        tl_emu_busy(&si->emu) || !util_dlist_empty(&si->helps))
        return progress_full(si);
    /* boxes first, as progress_full takes them: a short message on its
     * own, the usual arrival, is handed up from here */
    int fb_held = 0, events = si->fb_on != 0 ? fbox_poll(si, used, SHM_RECV_BUDGET, &fb_held) : 0;

    /* a box left at the bound of unexpected memory (progress_full notes
     * it), or a cell published: progress_full's, and if only the boxes
     * moved, the epoch moves for them */
    if (fb_held ||
        atomic_load_explicit(&shm_cell(si->seg, si->head)->seq, memory_order_acquire) == shm_seq(si->head + 1)) {
        int more = progress_full(si);
        if (__builtin_expect(si->mt, 0) && events != 0 && more == 0)
            epoch_note(si, events);
        return events + more;
    }
    if (__builtin_expect(events == 0 && ++si->empty_polls % SHM_STUCK_POLLS == 0, 0)) {
        si->empty_polls--; /* progress_full counts this poll, and looks for a dead claimant */
        return progress_full(si);
    }
    if (__builtin_expect(si->mt, 0))
        return progress_short_mt(si, events);
    return events;
}

static int progress_full(shm_iface_t *si)
{
    uint64_t used = atomic_load_explicit(&si->seg->fbox_used, memory_order_acquire) & SHM_FBOX_ALL;
    int events = 0, ring = 0, held = 0, fb_held = 0;

    /* boxes first (not while a span streams in: nothing else is handed up
     * between its begin and end) */
    if ((used | si->fb_seen) != 0 && !si->rx.on)
        events = fbox_poll(si, used, SHM_RECV_BUDGET, &fb_held);
    /* the common poll that finds nothing, kept short: no cell, no copy
     * under way, one thread (a held cell is a published one) */
    if (events == 0 && !fb_held &&
        atomic_load_explicit(&shm_cell(si->seg, si->head)->seq, memory_order_acquire) != shm_seq(si->head + 1) &&
        !si->mt && !tl_emu_busy(&si->emu) && util_dlist_empty(&si->helps)) {
        if (__builtin_expect(si->held | si->fb_held, 0)) {
            __atomic_store_n(&si->held, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&si->fb_held, 0, __ATOMIC_RELAXED);
        }
        if (__builtin_expect(++si->empty_polls % SHM_STUCK_POLLS == 0, 0))
            ring_unblock(si);
        return 0;
    }
    while (ring < SHM_RECV_BUDGET) {
        shm_cell_t *cell = shm_cell(si->seg, si->head);
        shm_cell_head_t ch;
        if (atomic_load_explicit(&cell->seq, memory_order_acquire) != shm_seq(si->head + 1))
            break;
        ch = shm_cell_head(cell);
        if (__builtin_expect(si->rx.on, 0)) {
            if (!span_next(si, &ch)) {
                span_end(si, TL_STREAM_BROKEN); /* broken off: the cell is judged on its own */
                continue;
            }
            span_more(si, cell, ch.len);
            if (++si->rx.j == si->rx.n)
                span_end(si, TL_STREAM_WHOLE);
        } else if (!fbox_before_cell(si, &ch, &events)) {
            held = 1;
            break;
        } else if ((held = cell_leave(si, cell, &ch)) != 0) {
            break;
        } else if (__builtin_expect(ch.kind == SHM_KIND_SPAN, 0)) {
            span_begin(si, cell, &ch);
        } else {
            cell_deliver(si, cell, &ch);
        }
        atomic_store_explicit(&cell->seq, shm_seq(si->head + SHM_N_CELLS), memory_order_release);
        si->head++;
        ring++;
    }
    if (ring != 0)
        atomic_store_explicit(&si->wait_head, si->head, memory_order_relaxed);
    events += ring;
    if (tl_emu_busy(&si->emu) || !util_dlist_empty(&si->helps))
        events += shm_get_progress(si);
    if (events == 0 && ++si->empty_polls % SHM_STUCK_POLLS == 0)
        ring_unblock(si);
    __atomic_store_n(&si->held, held, __ATOMIC_RELAXED); /* read by shm_wait, unlocked */
    __atomic_store_n(&si->fb_held, fb_held, __ATOMIC_RELAXED);
    if (si->mt)
        epoch_note(si, events);
    return events;
}

/* Sleeps until a producer publishes a cell or timeout_us passes. Runs
 * without the core's lock, beside other threads' progress and waits (see
 * tl.h): it reads the consumer's position only as wait_head, and sleeps
 * only if the cell there still waits for its producer; a cell already
 * published, or already consumed by another thread (head has moved on),
 * sends it back to progress. Each sleeper counts itself in sleeping, so
 * one waking up does not hide the others from producers. With threads,
 * it also returns if another thread's progress ran since this thread's
 * last (epoch_note), which may have completed what this one waits for. */
/* Whether a sleeper, counted in sleeping, must not sleep: a cell or a box
 * entry is published, or (threads) another thread progressed since this
 * one last did. */
static int shm_ready(shm_iface_t *si)
{
    shm_seg_hdr_t *seg = si->seg;
    uint64_t head = atomic_load_explicit(&si->wait_head, memory_order_relaxed);

    atomic_thread_fence(memory_order_seq_cst); /* pairs with seg_wake's */
    /* a cell left in the ring (cell_leave) is no reason to stay awake;
     * seq_cst: pairs with seg_wake_published */
    if (!__atomic_load_n(&si->held, __ATOMIC_RELAXED) &&
        atomic_load_explicit(&shm_cell(seg, head)->seq, memory_order_seq_cst) != shm_seq(head))
        return 1;
    if (!__atomic_load_n(&si->fb_held, __ATOMIC_RELAXED)) {
        uint64_t boxes = atomic_load_explicit(&seg->fbox_used, memory_order_seq_cst) & SHM_FBOX_ALL &
                         ~atomic_load_explicit(&si->fb_broken, memory_order_relaxed);
        for (; boxes != 0; boxes &= boxes - 1) {
            if (fbox_ready(seg, (uint32_t)__builtin_ctzll(boxes)))
                return 1;
        }
    }
    return si->mt && (shm_seen.si != si || atomic_load_explicit(&si->epoch, memory_order_relaxed) != shm_seen.epoch);
}

/* A sleeper that counted itself, before it looks: with wake_asym, the
 * engine's thread makes the fence the application's leaves out
 * (epoch_note). */
static void sleep_fence(const shm_iface_t *si)
{
    if (si->wake_asym && on_rare_thread(si) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
        util_error("shm: membarrier failed (%s) though registered: a wake may come late",
                   strerror(errno));
}

static void shm_wait(tl_iface_t *iface, int64_t timeout_us)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    shm_seg_hdr_t *seg = si->seg;
    uint32_t seq = atomic_load_explicit(&seg->wake_seq, memory_order_relaxed);
    struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000};

    atomic_fetch_add_explicit(&seg->sleeping, 1, memory_order_seq_cst);
    sleep_fence(si);
    if (!shm_ready(si))
        futex(&seg->wake_seq, FUTEX_WAIT, seq, timeout_us < 0 ? NULL : &ts);
    atomic_fetch_sub_explicit(&seg->sleeping, 1, memory_order_relaxed);
}

/* A sleep in poll() beside other transports (tl.h): counted in
 * fd_sleeping, then in sleeping, so that a producer that sees us asleep
 * also sends a datagram to our wake socket. */
static int shm_wait_arm(tl_iface_t *iface, struct pollfd *pfd, int64_t *cap_us)
{
    shm_iface_t *si = (shm_iface_t *)iface;

    if (si->wake_name == 0)
        return TL_WAIT_NONE;
    pfd->fd = si->wake_fd;
    pfd->events = POLLIN;
    pfd->revents = 0;
    *cap_us = -1;
    atomic_fetch_add_explicit(&si->seg->fd_sleeping, 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(&si->seg->sleeping, 1, memory_order_seq_cst);
    sleep_fence(si);
    return shm_ready(si) ? TL_WAIT_READY : TL_WAIT_ARMED;
}

/* Ends the sleep, and takes the wakes out of the socket (a few at a time:
 * whatever floods it, the next sleep just returns at once). */
static void shm_wait_done(tl_iface_t *iface, const struct pollfd *pfd)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    char buf[8];

    atomic_fetch_sub_explicit(&si->seg->sleeping, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&si->seg->fd_sleeping, 1, memory_order_relaxed);
    if (pfd->revents & POLLIN) {
        for (int i = 0; i < 64 && recv(si->wake_fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0; i++)
            ;
    }
}

/* Whether our ring still holds a published cell from uuid: what a peer
 * sent before it closed or died is delivered before it is reported gone,
 * or a receive waiting for that very message would fail instead. Only
 * when a peer goes, so a scan of the ring is cheap enough. */
static int ring_holds_from(shm_iface_t *si, uint64_t uuid)
{
    uint64_t used = atomic_load_explicit(&si->seg->fbox_used, memory_order_acquire) & SHM_FBOX_ALL;

    if (used != si->fb_seen)
        fbox_refresh(si, used);
    for (uint64_t on = si->fb_on; on != 0; on &= on - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(on);
        if (atomic_load_explicit(&si->seg->senders[si->fb_slot[i]].uuid, memory_order_relaxed) == uuid &&
            atomic_load_explicit(shm_fbox_word(shm_fbox_data(si->seg, i), si->fb_rd[i]), memory_order_acquire) != 0)
            return 1;
    }
    for (uint64_t pos = si->head; pos < si->head + SHM_N_CELLS; pos++) {
        shm_cell_t *cell = shm_cell(si->seg, pos);
        if (atomic_load_explicit(&cell->seq, memory_order_acquire) == shm_seq(pos + 1) &&
            shm_cell_src(si->seg, cell) == uuid)
            return 1;
    }
    return 0;
}

/* A box whose sender is gone without a goodbye (killed, or its ring was
 * full when it closed: its slot's lock is free) is freed for another
 * sender once it holds nothing published. */
static void fbox_reclaim(shm_iface_t *si)
{
    for (uint64_t on = si->fb_on; on != 0; on &= on - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(on);
        if (atomic_load_explicit(shm_fbox_word(shm_fbox_data(si->seg, i), si->fb_rd[i]), memory_order_acquire) != 0 ||
            slot_alive(si->fd, si->fb_slot[i]))
            continue;
        util_debug("shm: fast box %u of sender slot %u, whose sender is gone, is free again", i, si->fb_slot[i]);
        fbox_release(si, i);
    }
}

#define SHM_RECLAIM_SLOTS 64 /* sender slots looked at per check_peers */

/* Whether sender slot i may still be named by a cell of our ring: one it
 * published, or one it claimed that is not consumed or skipped yet. */
static int slot_in_ring(shm_iface_t *si, uint32_t i)
{
    shm_seg_hdr_t *seg = si->seg;
    uint64_t tail = atomic_load_explicit(&seg->tail, memory_order_acquire);
    uint64_t first = atomic_load_explicit(&seg->claims[i].pos, memory_order_relaxed);
    uint32_t n = atomic_load_explicit(&seg->claims[i].n, memory_order_relaxed);

    if (first != SHM_NO_CLAIM && first < tail && first + (n > SHM_SPAN_CELLS ? 1 : n) > si->head)
        return 1;
    for (uint64_t pos = si->head; pos < si->head + SHM_N_CELLS; pos++) {
        shm_cell_t *cell = shm_cell(seg, pos);
        if (atomic_load_explicit(&cell->seq, memory_order_acquire) == shm_seq(pos + 1) &&
            shm_cell_head(cell).slot == i)
            return 1;
    }
    return 0;
}

/* Frees sender slot i if its sender is gone without a goodbye (killed,
 * or its ring was full when it closed) and nothing of it is left: its box
 * given back, no cell of it in our ring. We hold its lock meanwhile, so
 * that a sender taking it (slot_take) waits for our verdict. */
static void slot_reclaim(shm_iface_t *si, uint32_t i)
{
    shm_sender_t *s = &si->seg->senders[i];
    uint64_t uuid = atomic_load_explicit(&s->uuid, memory_order_acquire);
    struct flock fl = slot_lock(i, F_WRLCK);
    uint8_t box;

    if (uuid == 0 || fcntl(si->fd, F_OFD_SETLK, &fl) != 0)
        return; /* free, or its sender holds it */
    if ((box = si->slot_fbox[i]) != SHM_FBOX_NONE && (si->fb_on >> box & 1) == 0)
        fbox_release(si, box); /* broken: what it holds is not read */
    if (si->slot_fbox[i] == SHM_FBOX_NONE && !(si->rx.on && si->rx.slot == i) && !slot_in_ring(si, i) &&
        atomic_compare_exchange_strong_explicit(&s->uuid, &uuid, 0, memory_order_release, memory_order_relaxed))
        util_debug("shm: sender slot %u, whose sender (pid %u) is gone, is free again", i,
                   atomic_load_explicit(&s->pid, memory_order_relaxed));
    fl.l_type = F_UNLCK;
    fcntl(si->fd, F_OFD_SETLK, &fl);
}

/* Looks at the next SHM_RECLAIM_SLOTS sender slots for one whose sender
 * is gone: without it, every sender killed would keep its slot for good,
 * and after SHM_N_SENDERS of them no process could send to us. */
static void slots_reclaim(shm_iface_t *si)
{
    uint64_t used = atomic_load_explicit(&si->seg->fbox_used, memory_order_acquire) & SHM_FBOX_ALL;

    if (used != si->fb_seen)
        fbox_refresh(si, used); /* every box a slot holds is known */
    for (int k = 0; k < SHM_RECLAIM_SLOTS; k++) {
        uint32_t i = si->reclaim_next++ % SHM_N_SENDERS;
        if (atomic_load_explicit(&si->seg->senders[i].uuid, memory_order_relaxed) != 0)
            slot_reclaim(si, i);
    }
}

/* Reports peers whose process has exited or whose context has closed
 * (seed: every operation on a dead peer fails instead of hanging). Cheap:
 * a load and one poll per peer. */
static void shm_check_peers(tl_iface_t *iface)
{
    shm_iface_t *si = (shm_iface_t *)iface;
    util_dlist_t *pos;

    ring_unblock(si);
    fbox_reclaim(si);
    slots_reclaim(si);
    util_dlist_foreach(pos, &si->eps) {
        shm_ep_t *ep = util_container_of(pos, shm_ep_t, link);
        /* a context that closed is gone as surely as a process that died:
         * nothing will take what we send it */
        int closed = atomic_load_explicit(&ep->seg->closed, memory_order_acquire) != 0;
        if (ep->failed || (!ep->lost && !closed && !shm_peer_dead(ep)) || ring_holds_from(si, ep->super.uuid))
            continue;
        int clean = !ep->lost && closed;
        ep->failed = 1;
        if (!clean)
            util_warn("shm: peer %016llx (pid %u) died", (unsigned long long)ep->super.uuid, ep->pid);
        shm_get_fail_ep(si, ep);
        si->super.fail_cb(si->super.fail_arg, ep->super.uuid, clean);
    }
}

/* The soft bound (tl.h: rx_pressure), in our segment's header, where
 * every sender reads it before a send with payload. */
static void shm_pressure_changed(tl_iface_t *iface)
{
    shm_iface_t *si = (shm_iface_t *)iface;

    atomic_store_explicit(&si->seg->pressure, (uint32_t)iface->rx_pressure, memory_order_relaxed);
}

static int shm_peer_pressed(tl_ep_t *tep)
{
    return atomic_load_explicit(&((shm_ep_t *)tep)->seg->pressure, memory_order_relaxed) != 0;
}

/* ------------------------------------------------- receive offers' words */

#define SHM_OFFER_IDX_BITS 8

/* The word a token names, and the value it had open; NULL for a token no
 * word has. */
static _Atomic uint64_t *offer_word(shm_seg_hdr_t *seg, uint64_t token, uint64_t *open)
{
    uint64_t i = token & ((1u << SHM_OFFER_IDX_BITS) - 1);

    if (i >= SHM_N_OFFERS)
        return NULL;
    *open = (token >> SHM_OFFER_IDX_BITS) << 2 | SHM_OFFER_OPEN;
    return &seg->offers[i];
}

static tmx_status_t shm_offer_open(tl_iface_t *iface, uint64_t *token)
{
    shm_iface_t *si = (shm_iface_t *)iface;

    for (uint32_t k = 0; k < SHM_N_OFFERS; k++) {
        uint32_t i = (si->offer_next + k) % SHM_N_OFFERS;
        uint64_t w = atomic_load_explicit(&si->seg->offers[i], memory_order_relaxed);
        uint64_t gen = ((w >> 2) + 1) & (UINT64_MAX >> (SHM_OFFER_IDX_BITS + 2));
        if ((w & 3) != SHM_OFFER_FREE)
            continue;
        atomic_store_explicit(&si->seg->offers[i], gen << 2 | SHM_OFFER_OPEN, memory_order_release);
        si->offer_next = i + 1;
        *token = gen << SHM_OFFER_IDX_BITS | i;
        return TMX_OK;
    }
    return TMX_ERR_AGAIN;
}

static int offer_take_in(shm_seg_hdr_t *seg, uint64_t token)
{
    uint64_t open;
    _Atomic uint64_t *w = offer_word(seg, token, &open);

    return w != NULL && atomic_compare_exchange_strong_explicit(w, &open, (open & ~(uint64_t)3) | SHM_OFFER_TAKEN,
                                                                memory_order_acq_rel, memory_order_relaxed);
}

static int shm_offer_take_own(tl_iface_t *iface, uint64_t token)
{
    return offer_take_in(((shm_iface_t *)iface)->seg, token);
}

static int shm_offer_take(tl_ep_t *tep, uint64_t token)
{
    shm_ep_t *ep = (shm_ep_t *)tep;

    return !ep->failed && offer_take_in(ep->seg, token);
}

static int shm_offer_live(tl_ep_t *tep, uint64_t token)
{
    uint64_t open;
    _Atomic uint64_t *w = offer_word(((shm_ep_t *)tep)->seg, token, &open);

    return w != NULL && atomic_load_explicit(w, memory_order_relaxed) == open;
}

static void shm_offer_close(tl_iface_t *iface, uint64_t token)
{
    uint64_t open;
    _Atomic uint64_t *w = offer_word(((shm_iface_t *)iface)->seg, token, &open);
    uint64_t v;

    if (w == NULL)
        return;
    v = atomic_load_explicit(w, memory_order_relaxed);
    if ((v & ~(uint64_t)3) == (open & ~(uint64_t)3)) /* still this offer's generation */
        atomic_store_explicit(w, (open & ~(uint64_t)3) | SHM_OFFER_FREE, memory_order_release);
}

const tl_ops_t tl_shm_ops = {
    .name = "shm",
    .iface_open = shm_iface_open,
    .iface_close = shm_iface_close,
    .address = shm_address,
    .reachable = shm_reachable,
    .ep_create = shm_ep_create,
    .ep_destroy = shm_ep_destroy,
    .send = shm_send,
    .get = shm_get,
    .put = shm_put,
    .progress = shm_progress,
    .wait = shm_wait,
    .wait_arm = shm_wait_arm,
    .wait_done = shm_wait_done,
    .check_peers = shm_check_peers,
    .peer_pressed = shm_peer_pressed,
    .pressure_changed = shm_pressure_changed,
    .offer_open = shm_offer_open,
    .offer_take_own = shm_offer_take_own,
    .offer_take = shm_offer_take,
    .offer_close = shm_offer_close,
    .offer_live = shm_offer_live,
};
