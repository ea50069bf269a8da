/*
 * Remote reads for the shm transport. The fast path is one
 * process_vm_readv straight into the user buffer. Where the kernel refuses
 * it (EPERM under some ptrace settings, ENOSYS), the transport switches
 * once, with a log line, to a pipelined copy through cells: the reader
 * sends a request and the owner of the memory, after checking the key with
 * the layer above, streams the bytes back (seed 001's PUT emulation turned
 * into a GET).
 *
 * A shared copy (TL_GET_SHARED, which proto's table picks for large
 * reads) splits one read between two cores: one core copies at a fraction
 * of what two reach, so the reader asks the memory's owner to write the
 * first part with process_vm_writev while it reads the rest (shm_layout.h's
 * job word says who copies what).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tl/shm/shm.h"
#include "util/log.h"
#include "util/spin.h"

#define SHM_DATA_CHUNK (SHM_CELL_PAYLOAD - sizeof(shm_get_data_t))

/* A shared copy whose owner was still writing when the reader had taken
 * every chunk left. */
typedef struct shm_help_op {
    util_dlist_t link;
    shm_ep_t *ep;               /* the owner */
    unsigned job;
    uint64_t owner_chunks;      /* chunks the owner took: done when written */
    unsigned char *dst;
    uint64_t raddr;
    size_t len;
    tmx_status_t status;        /* of the reader's own chunks */
    tl_get_op_t *op;
} shm_help_op_t;

int shm_peer_dead(shm_ep_t *ep)
{
    struct pollfd pfd = {ep->pidfd, POLLIN, 0};

    if (ep->pidfd >= 0)
        return poll(&pfd, 1, 0) == 1;
    return kill((pid_t)ep->pid, 0) != 0 && errno == ESRCH;
}

/* ----------------------------------------------------- process_vm_readv */

/* Moves len bytes between local and the peer's raddr with
 * process_vm_readv (write == 0) or process_vm_writev. TMX_ERR_UNSUPPORTED
 * (errno kept) where the kernel refuses it. */
static tmx_status_t cma_copy(shm_ep_t *ep, void *local, size_t len, uint64_t raddr, int write)
{
    size_t done = 0;

    /* A context that closed abandoned its buffers (tmx_context_destroy):
     * its process may have reused them since. */
    if (atomic_load_explicit(&ep->seg->closed, memory_order_acquire)) {
        util_warn("shm: pid %u closed its context: its %zu bytes at 0x%llx are no longer %s", ep->pid, len,
                  (unsigned long long)raddr, write ? "written" : "read");
        return TMX_ERR_PEER_FAILED;
    }
    while (done < len) {
        struct iovec l = {(char *)local + done, len - done};
        struct iovec r = {(void *)(uintptr_t)(raddr + done), len - done};
        ssize_t n = write ? process_vm_writev((pid_t)ep->pid, &l, 1, &r, 1, 0)
                          : process_vm_readv((pid_t)ep->pid, &l, 1, &r, 1, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES))
            return TMX_ERR_UNSUPPORTED;
        util_error("shm: process_vm_%s of %zu bytes %s pid %u: %s", write ? "writev" : "readv",
                   len - done, write ? "to" : "from", ep->pid, n < 0 ? strerror(errno) : "no progress");
        return n < 0 && errno == ESRCH ? TMX_ERR_PEER_FAILED : TMX_ERR_IO;
    }
    /* closed during the copy: what was read may be the reused memory */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ep->seg->closed, memory_order_relaxed)) {
        util_warn("shm: pid %u closed its context during a copy of %zu bytes: the copy is void", ep->pid, len);
        return TMX_ERR_PEER_FAILED;
    }
    return TMX_OK;
}

/* The kernel refuses process_vm_readv here: reads go through cells, and
 * only COPY is offered from now on. */
static void cma_refused(shm_iface_t *si)
{
    si->cma = SHM_CMA_OFF;
    si->super.get_checked = 1;
    si->super.get_kinds = TL_GET_COPY;
    si->super.put_kinds = 0;
}

/* ------------------------------------------------------------- copy mode */

/* Copy mode is the emulated remote read of tl_emu.h, its request and each
 * chunk in one cell. */
static tmx_status_t copy_req_send(tl_ep_t *tep, const tl_emu_req_t *req)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    shm_get_req_t wire = {htole64(req->id), htole64(req->raddr), htole64(req->rkey), htole64(req->len)};
    uint64_t pos;
    shm_cell_t *cell = shm_cell_claim(ep, &pos);

    if (cell == NULL)
        return TMX_ERR_AGAIN;
    memcpy(cell->payload, &wire, sizeof(wire));
    shm_cell_publish(ep, cell, pos, SHM_KIND_GET_REQ, sizeof(wire));
    return TMX_OK;
}

static tmx_status_t copy_data_send(tl_ep_t *tep, uint32_t id, uint64_t offset, tmx_status_t status,
                                   const void *src, size_t n, uint64_t rkey)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    shm_get_data_t d = {htole64(id), htole64(offset), (int32_t)htole32((uint32_t)status), htole32((uint32_t)n)};
    uint64_t pos;
    shm_cell_t *cell = shm_cell_claim(ep, &pos);

    (void)rkey; /* the bytes are copied now, once */
    if (cell == NULL)
        return TMX_ERR_AGAIN;
    memcpy(cell->payload, &d, sizeof(d));
    if (n > 0)
        memcpy(cell->payload + sizeof(d), src, n);
    shm_cell_publish(ep, cell, pos, SHM_KIND_GET_DATA, (uint32_t)(sizeof(d) + n));
    return TMX_OK;
}

static const tl_emu_ops_t shm_emu_ops = {copy_req_send, copy_data_send, NULL, NULL}; /* no writes: DIRECT only */

static tmx_status_t copy_get(shm_iface_t *si, shm_ep_t *ep, void *dst, size_t len, uint64_t raddr,
                             uint64_t rkey, tl_get_op_t *op)
{
    return tl_emu_get(&si->emu, &ep->super, dst, len, raddr, rkey, op);
}

/* ------------------------------------------------------- shared copies */

static shm_ep_t *ep_by_uuid(shm_iface_t *si, uint64_t uuid);

#define JOB_IDX_MASK ((1ull << SHM_JOB_IDX_BITS) - 1)
#define JOB_GEN_MASK ((1ull << SHM_JOB_GEN_BITS) - 1)

static uint64_t claim_pack(uint64_t gen, uint64_t front, uint64_t back)
{
    return gen << (2 * SHM_JOB_IDX_BITS) | front << SHM_JOB_IDX_BITS | back;
}

static uint64_t claim_gen(uint64_t v)
{
    return v >> (2 * SHM_JOB_IDX_BITS);
}

static uint64_t claim_front(uint64_t v)
{
    return (v >> SHM_JOB_IDX_BITS) & JOB_IDX_MASK;
}

static uint64_t claim_back(uint64_t v)
{
    return v & JOB_IDX_MASK;
}

static void job_release(shm_iface_t *si, unsigned job)
{
    si->jobs_free |= 1ull << job;
}

static int help_push(shm_iface_t *si, shm_ep_t *ep, const shm_help_req_t *h)
{
    uint64_t pos;
    shm_cell_t *cell = shm_cell_claim(ep, &pos);
    shm_help_req_t wire = {htole32(h->job), 0, htole64(h->gen), htole64(h->raddr), htole64(h->rkey),
                           htole64(h->len), htole64(h->dst)};

    if (cell == NULL)
        return 0;
    memcpy(cell->payload, &wire, sizeof(wire));
    shm_cell_publish(ep, cell, pos, SHM_KIND_HELP, sizeof(wire));
    return 1;
}

/* Takes chunk front (owner) or back - 1 (reader) of a job of n chunks in
 * generation gen; its index, or -1 when none is left. The word is in the
 * reader's segment, where any local process can write: one that names a
 * chunk past the job's n is taken for none left, so that neither side
 * copies outside the bytes the job names (the owner's were checked with
 * mem_check, the reader's are its buffer). */
static int64_t chunk_take(_Atomic uint64_t *claim, uint64_t gen, uint64_t n, int owner)
{
    uint64_t v = atomic_load_explicit(claim, memory_order_acquire);

    for (;;) {
        uint64_t f = claim_front(v), b = claim_back(v);
        if (claim_gen(v) != gen || f >= b || b > n)
            return -1;
        if (atomic_compare_exchange_weak_explicit(claim, &v, owner ? claim_pack(gen, f + 1, b)
                                                                   : claim_pack(gen, f, b - 1),
                                                  memory_order_acq_rel, memory_order_acquire))
            return owner ? (int64_t)f : (int64_t)b - 1;
    }
}

/* Copies chunk k of a shared copy: read (reader) or write (owner). */
static tmx_status_t chunk_copy(shm_ep_t *ep, unsigned char *local, uint64_t remote, size_t len,
                               uint64_t k, int write)
{
    uint64_t off = k * SHM_JOB_CHUNK;
    size_t n = len - off < SHM_JOB_CHUNK ? len - off : SHM_JOB_CHUNK;

    return cma_copy(ep, local + off, n, remote + off, write);
}

/* Reads the owner's chunks ourselves, after it reported a failed write. */
static tmx_status_t owner_chunks_reread(shm_ep_t *ep, unsigned char *dst, uint64_t raddr, size_t len,
                                        uint64_t chunks)
{
    size_t n = chunks * SHM_JOB_CHUNK < len ? chunks * SHM_JOB_CHUNK : len;
    tmx_status_t st = cma_copy(ep, dst, n, raddr, 0);

    return st == TMX_ERR_UNSUPPORTED ? TMX_ERR_IO : st;
}

/* 1 once the owner has written the chunks it took (0: still writing). */
static int owner_finished(shm_iface_t *si, shm_help_op_t *w)
{
    uint64_t d = atomic_load_explicit(&si->seg->jobs[w->job].done, memory_order_acquire);

    if ((d & ~SHM_JOB_FAILED) < w->owner_chunks)
        return 0;
    if ((d & SHM_JOB_FAILED) && w->status == TMX_OK)
        w->status = owner_chunks_reread(w->ep, w->dst, w->raddr, w->len, w->owner_chunks);
    return 1;
}

static tmx_status_t shared_get(shm_iface_t *si, shm_ep_t *ep, unsigned char *dst, size_t len,
                               uint64_t raddr, uint64_t rkey, tl_get_op_t *op)
{
    uint64_t n = (len + SHM_JOB_CHUNK - 1) / SHM_JOB_CHUNK;
    unsigned job = (unsigned)__builtin_ctzll(si->jobs_free);
    shm_job_t *j = &si->seg->jobs[job];
    shm_help_req_t h = {job, 0, 0, raddr, rkey, len, (uintptr_t)dst};
    shm_help_op_t w = {.ep = ep, .job = job, .dst = dst, .raddr = raddr, .len = len, .status = TMX_OK};
    shm_help_op_t *wait;
    uint64_t mine = 0;
    int64_t k;

    if ((si->job_gen = (si->job_gen + 1) & JOB_GEN_MASK) == 0)
        si->job_gen = 1; /* generation 0 names no job */
    h.gen = si->job_gen;
    atomic_store_explicit(&j->done, 0, memory_order_relaxed);
    atomic_store_explicit(&j->claim, claim_pack(h.gen, 0, n), memory_order_release);
    if (!help_push(si, ep, &h)) /* ring full: alone, but through the same claims */
        util_debug("shm: shared copy of %zu bytes: no room to ask for help", len);
    si->jobs_free &= ~(1ull << job);
    while ((k = chunk_take(&j->claim, h.gen, n, 0)) >= 0) {
        tmx_status_t st = TMX_OK;
        if (w.status != TMX_ERR_UNSUPPORTED) /* once refused, only claim the rest */
            st = chunk_copy(ep, dst, raddr, len, (uint64_t)k, 0);
        if (st != TMX_OK && w.status == TMX_OK)
            w.status = st;
        mine++;
    }
    w.owner_chunks = claim_front(atomic_load_explicit(&j->claim, memory_order_acquire));
    if (w.owner_chunks + mine != n) { /* someone else wrote our job word */
        util_error("shm: shared copy of %zu bytes: its job word says the owner took %llu of %llu chunks, "
                   "and we read %llu: the copy is void", len, (unsigned long long)w.owner_chunks,
                   (unsigned long long)n, (unsigned long long)mine);
        w.owner_chunks = w.owner_chunks < n - mine ? w.owner_chunks : n - mine;
        if (w.status == TMX_OK)
            w.status = TMX_ERR_IO;
    }
    if (w.status == TMX_ERR_UNSUPPORTED) {
        /* the kernel refuses CMA here: once the owner's chunks under way
         * are written, copy through cells from now on, as shm_get does */
        for (unsigned turns = 0; !owner_finished(si, &w) && !ep->failed && !shm_peer_dead(ep);)
            util_spin_wait(&turns);
        job_release(si, job);
        util_warn("shm: process_vm_readv refused; copying through shared memory from now on");
        cma_refused(si);
        return copy_get(si, ep, dst, len, raddr, rkey, op);
    }
    if (owner_finished(si, &w)) {
        util_debug("shm: shared copy of %zu bytes: the owner wrote %llu of %llu chunks", len,
                   (unsigned long long)w.owner_chunks, (unsigned long long)n);
        job_release(si, job);
        return w.status;
    }
    /* The owner is writing a chunk it took: ours once it has. A read that
     * failed still waits, so that nothing is written after we returned the
     * buffer. */
    if ((wait = malloc(sizeof(*wait))) == NULL) {
        for (unsigned turns = 0; !owner_finished(si, &w) && !ep->failed && !shm_peer_dead(ep);)
            util_spin_wait(&turns);
        job_release(si, job);
        return w.status == TMX_OK ? TMX_ERR_NOMEM : w.status;
    }
    *wait = w;
    wait->op = op;
    util_dlist_push_tail(&si->helps, &wait->link);
    return TMX_INPROGRESS;
}

/* Owner side: write chunks from the front while the reader has left some.
 * The bytes must be a registered region of ours (mem_check). */
static void help_arrive(shm_iface_t *si, shm_cell_t *cell, const shm_cell_head_t *ch)
{
    shm_ep_t *ep = ep_by_uuid(si, shm_slot_uuid(si->seg, ch->slot));
    shm_help_req_t h;
    shm_job_t *j;
    uint64_t n;
    int64_t k;

    memcpy(&h, cell->payload, sizeof(h));
    h.job = le32toh(h.job);
    h.gen = le64toh(h.gen);
    h.raddr = le64toh(h.raddr);
    h.rkey = le64toh(h.rkey);
    h.len = le64toh(h.len);
    h.dst = le64toh(h.dst);
    if (ep == NULL || ep->failed || ch->len != sizeof(h) || h.job >= SHM_N_JOBS || h.gen == 0 ||
        h.gen > JOB_GEN_MASK || h.len / SHM_JOB_CHUNK >= JOB_IDX_MASK) {
        si->dropped++;
        util_warn("shm: dropped a bad shared-copy request");
        return;
    }
    /* The offload engine's thread leaves it to the reader: the
     * application is away, computing, and a copy here would take a core
     * from it. */
    if (si->cma != SHM_CMA_ON || tl_on_rare_thread(&si->super) ||
        si->super.mem_check(si->super.recv_arg, h.raddr, h.len, h.rkey) != TMX_OK)
        return; /* the reader copies it all */
    j = &ep->seg->jobs[h.job];
    /* at most the job's chunks, however often its word is rewritten */
    n = (h.len + SHM_JOB_CHUNK - 1) / SHM_JOB_CHUNK;
    for (uint64_t taken = 0; taken < n && (k = chunk_take(&j->claim, h.gen, n, 1)) >= 0; taken++) {
        shm_stop_help();
        tmx_status_t st = shm_peer_dead(ep) ? TMX_ERR_PEER_FAILED
                                            : chunk_copy(ep, (unsigned char *)(uintptr_t)h.raddr, h.dst,
                                                         h.len, (uint64_t)k, 1);
        atomic_fetch_add_explicit(&j->done, 1 | (st == TMX_OK ? 0 : SHM_JOB_FAILED),
                                  memory_order_release);
        if (st != TMX_OK)
            break;
    }
}

/* Shared copies whose owner was still writing a chunk. */
static int helps_progress(shm_iface_t *si)
{
    util_dlist_t *pos, *tmp;
    int events = 0;

    util_dlist_foreach_safe(pos, tmp, &si->helps) {
        shm_help_op_t *w = util_container_of(pos, shm_help_op_t, link);
        if (!owner_finished(si, w)) {
            if (!w->ep->failed && !shm_peer_dead(w->ep))
                continue;
            w->status = TMX_ERR_PEER_FAILED;
        }
        util_dlist_unlink(&w->link);
        job_release(si, w->job);
        w->op->done(w->op, w->status);
        free(w);
        events++;
    }
    return events;
}

/* The three mechanisms: DIRECT reads with process_vm_readv; SHARED is a
 * shared copy (DIRECT when every job slot is taken or the read is too
 * large for one job); COPY goes through cells. A read whose CMA the
 * kernel refuses goes on through cells, and CMA is not offered again. */
tmx_status_t shm_get(tl_ep_t *tep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                     unsigned kind, tl_get_op_t *op)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    shm_iface_t *si = (shm_iface_t *)tl_ep_iface(tep);
    tmx_status_t st;

    if ((st = tl_get_kind_check(tl_ep_iface(tep), kind)) != TMX_OK)
        return st;
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    if (len == 0)
        return TMX_OK;
    if (kind == TL_GET_SHARED && si->jobs_free != 0 && len / SHM_JOB_CHUNK < JOB_IDX_MASK)
        return shared_get(si, ep, dst, len, raddr, rkey, op);
    if (kind != TL_GET_COPY) {
        st = cma_copy(ep, dst, len, raddr, 0);
        if (st != TMX_ERR_UNSUPPORTED)
            return st;
        util_warn("shm: process_vm_readv refused (%s); copying through shared memory from now on",
                  strerror(errno));
        cma_refused(si);
    }
    return copy_get(si, ep, dst, len, raddr, rkey, op);
}

/* Writes are DIRECT only (process_vm_writev): where the kernel refuses
 * it, none is offered any more and the layer above reads instead. The
 * target's memory is checked by the kernel's permission, as for reads
 * (get_checked). */
tmx_status_t shm_put(tl_ep_t *tep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                     uint64_t lkey, unsigned kind)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    shm_iface_t *si = (shm_iface_t *)tl_ep_iface(tep);
    tmx_status_t st;

    if ((st = tl_put_kind_check(tl_ep_iface(tep), kind)) != TMX_OK)
        return st;
    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    if (len == 0)
        return TMX_OK;
    st = cma_copy(ep, (void *)src, len, raddr, 1);
    if (st == TMX_ERR_UNSUPPORTED) {
        util_warn("shm: process_vm_writev refused (%s); rendezvous by write is off from now on",
                  strerror(errno));
        si->super.put_kinds = 0;
    }
    return st;
}

static void get_data_arrive(shm_iface_t *si, shm_cell_t *cell, const shm_cell_head_t *ch)
{
    shm_get_data_t d;
    shm_ep_t *ep = ep_by_uuid(si, shm_slot_uuid(si->seg, ch->slot));

    memcpy(&d, cell->payload, sizeof(d));
    d.op_id = le64toh(d.op_id);
    d.offset = le64toh(d.offset);
    d.len = le32toh(d.len);
    if (ep == NULL || d.op_id > UINT32_MAX || ch->len != sizeof(d) + d.len ||
        tl_emu_data_arrive(&si->emu, &ep->super, (uint32_t)d.op_id, d.offset,
                           (tmx_status_t)(int32_t)le32toh((uint32_t)d.status), cell->payload + sizeof(d),
                           d.len, 0) != TMX_OK) {
        si->dropped++;
        util_warn("shm: dropped copy-mode data for unknown or bad read %llu", (unsigned long long)d.op_id);
    }
}

/* ------------------------------------------------------- copy mode: owner */

static shm_ep_t *ep_by_uuid(shm_iface_t *si, uint64_t uuid)
{
    return util_idmap_get(&si->ep_map, uuid);
}

static void get_req_arrive(shm_iface_t *si, shm_cell_t *cell, const shm_cell_head_t *ch)
{
    shm_get_req_t w;
    tl_emu_req_t r;
    shm_ep_t *ep = ep_by_uuid(si, shm_slot_uuid(si->seg, ch->slot));

    if (ep != NULL && ch->len == sizeof(w)) {
        memcpy(&w, cell->payload, sizeof(w));
        r = (tl_emu_req_t){(uint32_t)le64toh(w.op_id), le64toh(w.raddr), le64toh(w.rkey), le64toh(w.len)};
        if (tl_emu_req_arrive(&si->emu, &ep->super, &r) == TMX_OK)
            return;
    }
    if (util_log_sparse(&si->dropped))
        util_warn("shm: dropped a copy-mode read request (%llu packets dropped so far)",
                  (unsigned long long)si->dropped);
}

/* The header's words as the consumer read them once (shm_cell_head): a
 * peer may rewrite the cell meanwhile. */
void shm_get_cell(shm_iface_t *si, shm_cell_t *cell, const shm_cell_head_t *ch)
{
    if (ch->kind == SHM_KIND_GET_DATA && ch->len >= sizeof(shm_get_data_t)) {
        get_data_arrive(si, cell, ch);
    } else if (ch->kind == SHM_KIND_GET_REQ) {
        get_req_arrive(si, cell, ch);
    } else if (ch->kind == SHM_KIND_HELP) {
        help_arrive(si, cell, ch);
    } else {
        si->dropped++;
        util_warn("shm: dropped a cell of unknown kind %u", ch->kind);
    }
}

int shm_get_progress(shm_iface_t *si)
{
    int events = 0;

    if (tl_emu_busy(&si->emu))
        events += tl_emu_progress(&si->emu, 0);
    if (!util_dlist_empty(&si->helps))
        events += helps_progress(si);
    return events;
}

void shm_get_fail_ep(shm_iface_t *si, shm_ep_t *ep)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &si->helps) {
        shm_help_op_t *w = util_container_of(pos, shm_help_op_t, link);
        if (w->ep == ep) {
            util_dlist_unlink(&w->link);
            job_release(si, w->job);
            w->op->done(w->op, TMX_ERR_PEER_FAILED);
            free(w);
        }
    }

    tl_emu_ep_fail(&si->emu, &ep->super);
}

void shm_get_init(shm_iface_t *si)
{
    tl_emu_init(&si->emu, &si->super, &shm_emu_ops, SHM_DATA_CHUNK);
    si->jobs_free = SHM_N_JOBS == 64 ? ~0ull : (1ull << SHM_N_JOBS) - 1;
    util_dlist_init(&si->helps);
    /* generation 0 is never handed out, and nothing is left to take */
    for (unsigned j = 0; j < SHM_N_JOBS; j++)
        atomic_store_explicit(&si->seg->jobs[j].claim, 0, memory_order_relaxed);
}

/* Reads abandoned by a closing context: an owner writing into their
 * buffers is waited for (a write is bounded), so that nothing lands there
 * once the context is gone. */
void shm_get_fini(shm_iface_t *si)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &si->helps) {
        shm_help_op_t *w = util_container_of(pos, shm_help_op_t, link);
        for (unsigned turns = 0; !owner_finished(si, w) && !w->ep->failed && !shm_peer_dead(w->ep);)
            util_spin_wait(&turns);
        free(w);
    }

    tl_emu_abandon(&si->emu);
}
