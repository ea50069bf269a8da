/*
 * Remote reads for the shm transport. The fast path is one
 * process_vm_readv straight into the user buffer. Where the kernel refuses
 * it (EPERM under some ptrace settings, ENOSYS), the transport switches
 * once, with a log line, to a pipelined copy through cells: the reader
 * sends a request and the owner of the memory, after checking the key with
 * the layer above, streams the bytes back (seed 001's PUT emulation turned
 * into a GET).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/config.h"
#include "tl/shm/shm.h"
#include "util/log.h"

#define SHM_DATA_CHUNK (SHM_CELL_PAYLOAD - sizeof(shm_get_data_t))

/* A copy-mode read this process waits for. */
typedef struct shm_get_op {
    util_dlist_t link;
    uint64_t id;
    shm_ep_t *ep;
    unsigned char *dst;
    shm_get_req_t req;          /* what we asked, host order */
    uint64_t received;
    int req_sent;
    tmx_status_t status;
    tl_get_op_t *op;
} shm_get_op_t;

/* A copy-mode read this process answers. */
typedef struct shm_serve {
    util_dlist_t link;
    shm_ep_t *ep;               /* the reader */
    shm_get_req_t req;
    uint64_t offset;
    tmx_status_t status;        /* non-OK: send one refusal and stop */
} shm_serve_t;

int shm_cma_mode(void)
{
    const char *v = config_get("TMX_SHM_CMA");

    if (v != NULL && strcasecmp(v, "off") == 0)
        return SHM_CMA_OFF;
    if (v != NULL && strcasecmp(v, "auto") != 0)
        util_warn("TMX_SHM_CMA=%s: expected auto or off; using auto", v);
    return SHM_CMA_ON;
}

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
    return TMX_OK;
}

/* ------------------------------------------------------- copy mode: reader */

static int get_req_push(shm_iface_t *si, shm_get_op_t *g)
{
    uint64_t pos;
    shm_cell_t *cell = shm_cell_claim(g->ep->seg, &pos);
    shm_get_req_t wire;

    if (cell == NULL)
        return 0;
    wire.op_id = htole64(g->req.op_id);
    wire.raddr = htole64(g->req.raddr);
    wire.rkey = htole64(g->req.rkey);
    wire.len = htole64(g->req.len);
    memcpy(cell->payload, &wire, sizeof(wire));
    shm_cell_publish(g->ep->seg, cell, pos, SHM_KIND_GET_REQ, sizeof(wire), si->uuid);
    g->req_sent = 1;
    return 1;
}

static tmx_status_t copy_get(shm_iface_t *si, shm_ep_t *ep, void *dst, size_t len, uint64_t raddr,
                             uint64_t rkey, tl_get_op_t *op)
{
    shm_get_op_t *g = calloc(1, sizeof(*g));

    if (g == NULL)
        return TMX_ERR_NOMEM;
    g->id = ++si->next_get_id;
    g->ep = ep;
    g->dst = dst;
    g->req = (shm_get_req_t){g->id, raddr, rkey, len};
    g->op = op;
    g->status = TMX_OK;
    util_dlist_push_tail(&si->gets, &g->link);
    get_req_push(si, g);
    return TMX_INPROGRESS;
}

tmx_status_t shm_get(tl_ep_t *tep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                     tl_get_op_t *op)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    shm_iface_t *si = (shm_iface_t *)tep->iface;
    tmx_status_t st;

    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    if (len == 0)
        return TMX_OK;
    if (si->cma == SHM_CMA_ON) {
        st = cma_copy(ep, dst, len, raddr, 0);
        if (st != TMX_ERR_UNSUPPORTED)
            return st;
        util_warn("shm: process_vm_readv refused (%s); copying through shared memory from now on",
                  strerror(errno));
        si->cma = SHM_CMA_OFF;
    }
    return copy_get(si, ep, dst, len, raddr, rkey, op);
}

/* One process_vm_writev into the peer that asked for the bytes. Without
 * CMA the peer reads them itself. */
tmx_status_t shm_put(tl_ep_t *tep, uint64_t raddr, const void *src, size_t len)
{
    shm_ep_t *ep = (shm_ep_t *)tep;

    if (ep->failed)
        return TMX_ERR_PEER_FAILED;
    if (((shm_iface_t *)tep->iface)->cma != SHM_CMA_ON)
        return TMX_ERR_UNSUPPORTED;
    return cma_copy(ep, (void *)src, len, raddr, 1);
}

static shm_get_op_t *get_find(shm_iface_t *si, uint64_t id)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &si->gets) {
        shm_get_op_t *g = util_container_of(pos, shm_get_op_t, link);
        if (g->id == id)
            return g;
    }
    return NULL;
}

static void get_finish(shm_get_op_t *g, tmx_status_t st)
{
    util_dlist_unlink(&g->link);
    g->op->done(g->op, st);
    free(g);
}

static void get_data_arrive(shm_iface_t *si, shm_cell_t *cell)
{
    shm_get_data_t d;
    shm_get_op_t *g;

    memcpy(&d, cell->payload, sizeof(d));
    d.op_id = le64toh(d.op_id);
    d.offset = le64toh(d.offset);
    d.len = le32toh(d.len);
    g = get_find(si, d.op_id);
    if (g == NULL || g->ep->uuid != cell->src_uuid || cell->len != sizeof(d) + d.len ||
        d.offset > g->req.len || d.len > g->req.len - d.offset) {
        si->dropped++;
        util_warn("shm: dropped copy-mode data for unknown or bad read %llu", (unsigned long long)d.op_id);
        return;
    }
    if ((int32_t)le32toh((uint32_t)d.status) != TMX_OK) {
        util_error("shm: peer %u refused a read of %llu bytes: %s", g->ep->super.peer,
                   (unsigned long long)g->req.len, tmx_strerror((tmx_status_t)(int32_t)le32toh((uint32_t)d.status)));
        get_finish(g, (tmx_status_t)(int32_t)le32toh((uint32_t)d.status));
        return;
    }
    memcpy(g->dst + d.offset, cell->payload + sizeof(d), d.len);
    g->received += d.len;
    if (g->received == g->req.len)
        get_finish(g, TMX_OK);
}

/* ------------------------------------------------------- copy mode: owner */

static shm_ep_t *ep_by_uuid(shm_iface_t *si, uint64_t uuid)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &si->eps) {
        shm_ep_t *ep = util_container_of(pos, shm_ep_t, link);
        if (ep->uuid == uuid)
            return ep;
    }
    return NULL;
}

static void get_req_arrive(shm_iface_t *si, shm_cell_t *cell)
{
    shm_get_req_t r;
    shm_serve_t *s;
    shm_ep_t *ep = ep_by_uuid(si, cell->src_uuid);

    if (ep == NULL || cell->len != sizeof(r) || (s = calloc(1, sizeof(*s))) == NULL) {
        si->dropped++;
        util_warn("shm: dropped a copy-mode read request");
        return;
    }
    memcpy(&r, cell->payload, sizeof(r));
    s->req = (shm_get_req_t){le64toh(r.op_id), le64toh(r.raddr), le64toh(r.rkey), le64toh(r.len)};
    s->ep = ep;
    s->status = si->super.mem_check(si->super.recv_arg, s->req.raddr, s->req.len, s->req.rkey);
    util_dlist_push_tail(&si->serves, &s->link);
}

void shm_get_cell(shm_iface_t *si, shm_cell_t *cell)
{
    if (cell->kind == SHM_KIND_GET_DATA && cell->len >= sizeof(shm_get_data_t)) {
        get_data_arrive(si, cell);
    } else if (cell->kind == SHM_KIND_GET_REQ) {
        get_req_arrive(si, cell);
    } else {
        si->dropped++;
        util_warn("shm: dropped a cell of unknown kind %u", cell->kind);
    }
}

/* Pushes as many chunks as the reader's ring takes; 1 when finished. */
static int serve_push(shm_iface_t *si, shm_serve_t *s)
{
    do {
        uint64_t pos;
        shm_cell_t *cell = shm_cell_claim(s->ep->seg, &pos);
        uint64_t left = s->req.len - s->offset;
        uint32_t n = s->status != TMX_OK ? 0 : (uint32_t)(left < SHM_DATA_CHUNK ? left : SHM_DATA_CHUNK);
        shm_get_data_t d = {htole64(s->req.op_id), htole64(s->offset),
                            (int32_t)htole32((uint32_t)s->status), htole32(n)};
        if (cell == NULL)
            return 0;
        memcpy(cell->payload, &d, sizeof(d));
        memcpy(cell->payload + sizeof(d), (const void *)(uintptr_t)(s->req.raddr + s->offset), n);
        shm_cell_publish(s->ep->seg, cell, pos, SHM_KIND_GET_DATA, (uint32_t)(sizeof(d) + n), si->uuid);
        s->offset += n;
    } while (s->status == TMX_OK && s->offset < s->req.len);
    return 1;
}

int shm_get_progress(shm_iface_t *si)
{
    util_dlist_t *pos, *tmp;
    int events = 0;

    util_dlist_foreach_safe(pos, tmp, &si->serves) {
        shm_serve_t *s = util_container_of(pos, shm_serve_t, link);
        if (s->ep->failed || serve_push(si, s)) {
            util_dlist_unlink(&s->link);
            free(s);
            events++;
        }
    }
    util_dlist_foreach(pos, &si->gets) {
        shm_get_op_t *g = util_container_of(pos, shm_get_op_t, link);
        if (!g->req_sent)
            events += get_req_push(si, g);
    }
    return events;
}

void shm_get_fail_ep(shm_iface_t *si, shm_ep_t *ep)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &si->gets) {
        shm_get_op_t *g = util_container_of(pos, shm_get_op_t, link);
        if (g->ep == ep)
            get_finish(g, TMX_ERR_PEER_FAILED);
    }
}

void shm_get_fini(shm_iface_t *si)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &si->gets) {
        free(util_container_of(pos, shm_get_op_t, link));
    }
    util_dlist_foreach_safe(pos, tmp, &si->serves) {
        free(util_container_of(pos, shm_serve_t, link));
    }
}
