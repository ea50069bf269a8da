/*
 * The self transport: a process sending to itself. Packets are copied into
 * a FIFO and delivered from progress(), never from inside send(), so the
 * layers above see the same re-entrancy rules as with a real wire. A remote
 * read is a memcpy within the process.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "tl/tl.h"
#include "util/list.h"
#include "util/log.h"

#define SELF_EAGER_LIMIT 8192
static_assert(SELF_EAGER_LIMIT >= TMX_INJECT_MAX, "injected sends go eagerly");
#define SELF_MAX_PACKET (64 * 1024)
#define SELF_MAX_QUEUED 65536  /* packets, the transport's flow control */

typedef struct self_packet {
    util_dlist_t link;
    size_t len;
    unsigned char data[];
} self_packet_t;

typedef struct self_iface {
    tl_iface_t super;
    util_dlist_t queue;   /* packets not yet delivered, oldest first */
    size_t n_queued;
    uint64_t uuid;        /* ours, and so every packet's source */
} self_iface_t;

static tmx_status_t self_iface_open(const tl_iface_params_t *params, tl_iface_t **out)
{
    self_iface_t *si = calloc(1, sizeof(*si));

    if (si == NULL)
        return TMX_ERR_NOMEM;
    si->super.ops = &tl_self_ops;
    si->super.eager_limit = SELF_EAGER_LIMIT;
    si->super.max_packet = SELF_MAX_PACKET;
    si->super.get_checked = 1;
    si->super.recv_cb = params->recv_cb;
    si->super.recv_arg = params->recv_arg;
    si->super.fail_cb = params->fail_cb;
    si->super.fail_arg = params->fail_arg;
    si->super.get_kinds = TL_GET_DIRECT;
    si->super.mem_check = params->mem_check;
    si->super.put_kinds = TL_PUT_DIRECT;
    si->super.put_checked = 1; /* self_put goes through put_data */
    tl_put_cbs_set(&si->super, params);
    si->uuid = params->uuid;
    util_dlist_init(&si->queue);
    if (tl_iface_register(&si->super) != TMX_OK) {
        free(si);
        return TMX_ERR_NO_SPACE;
    }
    *out = &si->super;
    return TMX_OK;
}

static void self_iface_close(tl_iface_t *iface)
{
    self_iface_t *si = (self_iface_t *)iface;
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &si->queue) {
        free(util_container_of(pos, self_packet_t, link));
    }
    tl_iface_unregister(iface);
    free(si);
}

static tmx_status_t self_address(tl_iface_t *iface, void *buf, size_t *len)
{
    *len = 0; /* the context's uuid, in the blob's header, is the address */
    return TMX_OK;
}

static tmx_status_t self_ep_create(tl_iface_t *iface, const void *addr, size_t len,
                                   tmx_peer_t peer, uint64_t uuid, tl_ep_t **out)
{
    tl_ep_t *ep = calloc(1, sizeof(*ep));

    if (ep == NULL)
        return TMX_ERR_NOMEM;
    tl_ep_init(ep, iface, uuid, peer);
    *out = ep;
    return TMX_OK;
}

static void self_ep_destroy(tl_ep_t *ep)
{
    free(ep);
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
    size_t total = 0;

    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    return total;
}

static tmx_status_t self_send(tl_ep_t *ep, const struct iovec *iov, int iovcnt)
{
    self_iface_t *si = (self_iface_t *)tl_ep_iface(ep);
    size_t len = iov_total(iov, iovcnt);
    self_packet_t *pkt;
    size_t off = 0;

    if (len == 0 || len > SELF_MAX_PACKET) {
        util_error("self: packet of %zu bytes: want 1 to %d", len, SELF_MAX_PACKET);
        return TMX_ERR_INVALID;
    }
    if (si->n_queued >= SELF_MAX_QUEUED)
        return TMX_ERR_AGAIN;
    pkt = malloc(sizeof(*pkt) + len);
    if (pkt == NULL)
        return TMX_ERR_AGAIN;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len != 0) /* an empty message may come with no buffer */
            memcpy(pkt->data + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    pkt->len = len;
    util_dlist_push_tail(&si->queue, &pkt->link);
    si->n_queued++;
    si->super.quiet = 0;
    return TMX_OK;
}

/* The address comes from a packet: only a registered region under its key
 * is read, as a remote device would check. */
static tmx_status_t self_get(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                             unsigned kind, tl_get_op_t *op)
{
    tl_iface_t *iface = tl_ep_iface(ep);
    tmx_status_t st;

    if ((st = tl_get_kind_check(iface, kind)) != TMX_OK)
        return st;
    if (len == 0)
        return TMX_OK;
    st = iface->mem_check(iface->recv_arg, raddr, len, rkey);
    if (st == TMX_OK)
        memcpy(dst, (const void *)(uintptr_t)raddr, len);
    return st;
}

/* The target's put_data checks and places the bytes, as for a write
 * from another process through packets. */
static tmx_status_t self_put(tl_ep_t *ep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                             uint64_t lkey, unsigned kind)
{
    self_iface_t *si = (self_iface_t *)tl_ep_iface(ep);
    tmx_status_t st;

    if ((st = tl_put_kind_check(&si->super, kind)) != TMX_OK)
        return st;
    if (len == 0)
        return TMX_OK;
    return si->super.put_data(si->super.recv_arg, si->uuid, raddr, rkey, src, len);
}

/* Delivers only what was queued before this pass, so that packets sent by
 * the callbacks wait for the next pass and progress always returns. */
static int self_progress(tl_iface_t *iface)
{
    self_iface_t *si = (self_iface_t *)iface;
    size_t n = si->n_queued;
    int events = 0;

    for (size_t i = 0; i < n; i++) {
        self_packet_t *pkt = util_container_of(si->queue.next, self_packet_t, link);
        util_dlist_unlink(&pkt->link);
        si->n_queued--;
        iface->recv_cb(iface->recv_arg, si->uuid, pkt->data, pkt->len);
        free(pkt);
        events++;
    }
    iface->quiet = si->n_queued == 0;
    return events;
}

const tl_ops_t tl_self_ops = {
    .name = "self",
    .iface_open = self_iface_open,
    .iface_close = self_iface_close,
    .address = self_address,
    .reachable = tl_always_reachable,
    .ep_create = self_ep_create,
    .ep_destroy = self_ep_destroy,
    .send = self_send,
    .get = self_get,
    .put = self_put,
    .progress = self_progress,
    .wait = tl_no_wait,
    .wait_arm = tl_no_wait_arm,
    .wait_done = tl_no_wait_done,
    .check_peers = tl_no_check_peers,
};
