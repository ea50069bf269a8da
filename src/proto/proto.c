#include "proto/proto.h"

#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"
#include "util/log.h"

/* Set in a FIN's flags when the receiver could not read the data. */
#define PROTO_FIN_FAILED (1u << 15)

/* A FIN that found the transport full, kept until there is room. */
typedef struct proto_ctrl {
    util_dlist_t link;
    tmx_peer_t peer;
    wire_tmh_t tmh;
    wire_rvh_t rvh;
} proto_ctrl_t;

/* ------------------------------------------------------------------- send */

static tmx_status_t send_eager(tl_ep_t *ep, const void *buf, size_t len, uint64_t tag,
                               int has_data, uint64_t data_host)
{
    wire_tmh_t tmh;
    uint64_t data = htole64(data_host);
    struct iovec iov[3];
    int n = 0;

    wire_tmh_pack(&tmh, WIRE_OP_EAGER, has_data ? WIRE_FLAG_DATA : 0, 0, tag);
    iov[n++] = (struct iovec){&tmh, sizeof(tmh)};
    if (has_data)
        iov[n++] = (struct iovec){&data, sizeof(data)};
    iov[n++] = (struct iovec){(void *)buf, len};
    return ep->iface->ops->send(ep, iov, n);
}

static tmx_status_t send_rndv(tmx_context_h ctx, tl_ep_t *ep, struct tmx_request *req,
                              const void *buf, size_t len, uint64_t tag)
{
    wire_tmh_t tmh;
    wire_rvh_t rvh;
    uint64_t data = htole64(req->comp.data);
    struct iovec iov[3];
    int n = 0;
    tmx_status_t st = core_rndv_slot_get(ctx, req);

    if (st != TMX_OK)
        return st;
    wire_tmh_pack(&tmh, WIRE_OP_RNDV, req->comp.has_data ? WIRE_FLAG_DATA : 0, req->id, tag);
    wire_rvh_pack(&rvh, (uintptr_t)buf, req->rkey, len);
    iov[n++] = (struct iovec){&tmh, sizeof(tmh)};
    iov[n++] = (struct iovec){&rvh, sizeof(rvh)};
    if (req->comp.has_data)
        iov[n++] = (struct iovec){&data, sizeof(data)};
    st = ep->iface->ops->send(ep, iov, n);
    if (st != TMX_OK)
        core_rndv_slot_put(ctx, req);
    return st;
}

/* HELLO: our address, once per peer before any other packet (the
 * transports keep order), so that a process that never added us can
 * receive from us and answer. */
static tmx_status_t hello_send(tmx_context_h ctx, core_peer_t *p, tl_ep_t *ep)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    wire_tmh_t tmh;
    size_t len;
    struct iovec iov[2] = {{&tmh, sizeof(tmh)}, {addr, 0}};
    tmx_status_t st = core_address(ctx, addr, sizeof(addr), &len);

    if (st != TMX_OK)
        return st;
    wire_tmh_pack(&tmh, WIRE_OP_HELLO, 0, 0, 0);
    iov[1].iov_len = len;
    if ((st = ep->iface->ops->send(ep, iov, 2)) == TMX_OK)
        p->hello_sent = 1;
    return st;
}

/* The endpoint to a peer, ready for packets: HELLO went first. */
static tmx_status_t proto_ep(tmx_context_h ctx, tmx_peer_t peer, tl_ep_t **ep)
{
    core_peer_t *p = core_peer_get(ctx, peer);
    tmx_status_t st;

    if (p != NULL && p->ep != NULL && p->hello_sent && !p->failed) {
        *ep = p->ep; /* the usual case */
        return TMX_OK;
    }
    st = core_peer_ep(ctx, peer, ep);
    if (st != TMX_OK || p->hello_sent)
        return st;
    return hello_send(ctx, p, *ep);
}

tmx_status_t proto_send(tmx_context_h ctx, struct tmx_request *req, tmx_peer_t peer,
                        const void *buf, size_t len, uint64_t tag)
{
    tl_ep_t *ep;
    tmx_status_t st = proto_ep(ctx, peer, &ep);

    if (st != TMX_OK)
        return st;
    req->buf = (void *)buf;
    req->len = len;
    if (len <= ep->iface->eager_limit && !(req->flags & TMX_OP_FLAG_SYNC)) {
        util_debug("send %zu bytes to peer %u: eager", len, peer);
        st = send_eager(ep, buf, len, tag, req->comp.has_data, req->comp.data);
        if (st == TMX_OK)
            core_req_complete(req, TMX_OK);
        return st;
    }
    util_debug("send %zu bytes to peer %u: rendezvous", len, peer);
    return send_rndv(ctx, ep, req, buf, len, tag);
}

/* An eager send without a request (TMX_OP_FLAG_INJECT): every transport's
 * eager limit is at least TMX_INJECT_MAX. */
tmx_status_t proto_inject(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                          uint64_t tag, int has_data, uint64_t data)
{
    tl_ep_t *ep;
    tmx_status_t st = proto_ep(ctx, peer, &ep);

    if (st != TMX_OK)
        return st;
    return send_eager(ep, buf, len, tag, has_data, data);
}

/* -------------------------------------------------------------------- FIN */

static tmx_status_t fin_send_now(tmx_context_h ctx, tmx_peer_t peer, const wire_tmh_t *tmh,
                                 const wire_rvh_t *rvh)
{
    struct iovec iov[2] = {{(void *)tmh, sizeof(*tmh)}, {(void *)rvh, sizeof(*rvh)}};
    tl_ep_t *ep;
    tmx_status_t st = proto_ep(ctx, peer, &ep);

    if (st != TMX_OK)
        return st;
    return ep->iface->ops->send(ep, iov, 2);
}

/* Sends FIN for a rendezvous request, queueing it if the transport is
 * full: a sender must never wait forever for its FIN. */
static void fin_send(tmx_context_h ctx, tmx_peer_t peer, uint32_t app_ctx, uint64_t tag,
                     uint64_t va, uint64_t rkey, uint64_t len, int failed)
{
    proto_ctrl_t c;
    proto_ctrl_t *q;
    tmx_status_t st;

    wire_tmh_pack(&c.tmh, WIRE_OP_FIN, failed ? PROTO_FIN_FAILED : 0, app_ctx, tag);
    wire_rvh_pack(&c.rvh, va, rkey, len);
    st = fin_send_now(ctx, peer, &c.tmh, &c.rvh);
    if (st != TMX_ERR_AGAIN) {
        if (st != TMX_OK)
            util_error("FIN to peer %u lost: %s", peer, tmx_strerror(st));
        return;
    }
    q = malloc(sizeof(*q));
    if (q == NULL) {
        util_error("FIN to peer %u lost: out of memory", peer);
        return;
    }
    *q = c;
    q->peer = peer;
    util_dlist_push_tail(&ctx->ctrl_pending, &q->link);
}

int proto_progress(tmx_context_h ctx)
{
    util_dlist_t *pos, *tmp;
    int events = 0;

    util_dlist_foreach_safe(pos, tmp, &ctx->ctrl_pending) {
        proto_ctrl_t *q = util_container_of(pos, proto_ctrl_t, link);
        if (fin_send_now(ctx, q->peer, &q->tmh, &q->rvh) == TMX_ERR_AGAIN)
            break;
        util_dlist_unlink(&q->link);
        free(q);
        events++;
    }
    return events;
}

void proto_fini(tmx_context_h ctx)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &ctx->ctrl_pending) {
        free(util_container_of(pos, proto_ctrl_t, link));
    }
    util_dlist_init(&ctx->ctrl_pending);
}

/* ---------------------------------------------------------------- receive */

static void recv_fill(struct tmx_request *req, tmx_peer_t src, uint64_t tag, size_t msg_len,
                      uint32_t has_data, uint64_t data)
{
    req->comp.source = src;
    req->comp.tag = tag;
    req->comp.msg_length = msg_len;
    req->comp.length = msg_len < req->len ? msg_len : req->len;
    req->comp.has_data = has_data;
    req->comp.data = data;
}

static tmx_status_t recv_status(const struct tmx_request *req)
{
    return req->comp.msg_length > req->len ? TMX_ERR_TRUNCATED : TMX_OK;
}

static void eager_deliver(struct tmx_request *req, const void *payload)
{
    if (req->comp.length != 0)
        memcpy(req->buf, payload, req->comp.length);
    core_req_complete(req, recv_status(req));
}

static void rndv_finish(struct tmx_request *req, tmx_status_t st)
{
    tmx_context_h ctx = req->ctx;

    fin_send(ctx, req->rndv_src, req->rndv_app_ctx, req->comp.tag, req->rndv_va, req->rndv_rkey,
             req->rndv_len, st != TMX_OK);
    core_req_complete(req, st == TMX_OK ? recv_status(req) : st);
}

static void rndv_get_done(tl_get_op_t *op, tmx_status_t st)
{
    rndv_finish(util_container_of(op, struct tmx_request, get), st);
}

/* The receive has matched a rendezvous request: read straight into the
 * user buffer, then FIN. The completion follows the read (seed 004). */
static void rndv_start(tmx_context_h ctx, struct tmx_request *req, tmx_peer_t src)
{
    tl_ep_t *ep;
    tmx_status_t st = core_peer_ep(ctx, src, &ep);

    req->state = CORE_REQ_ACTIVE;
    req->rndv_src = src;
    req->get.done = rndv_get_done;
    if (st == TMX_OK)
        st = ep->iface->ops->get(ep, req->buf, req->comp.length, req->rndv_va, req->rndv_rkey,
                                 &req->get);
    if (st == TMX_INPROGRESS)
        return;
    if (st != TMX_OK)
        util_error("rendezvous read of %zu bytes from peer %u failed: %s", req->comp.length, src,
                   tmx_strerror(st));
    rndv_finish(req, st);
}

void proto_msg_deliver(tmx_context_h ctx, struct tmx_message *msg, struct tmx_request *req)
{
    recv_fill(req, msg->m.src, msg->m.tag, msg->len, msg->has_data, msg->data);
    if (msg->kind == CORE_MSG_EAGER) {
        eager_deliver(req, msg->payload);
    } else {
        req->rndv_app_ctx = msg->app_ctx;
        req->rndv_va = msg->va;
        req->rndv_rkey = msg->rkey;
        req->rndv_len = msg->len;
        rndv_start(ctx, req, msg->m.src);
    }
    core_msg_free(ctx, msg);
}

void proto_msg_discard(tmx_context_h ctx, struct tmx_message *msg)
{
    if (msg->kind == CORE_MSG_RNDV)
        fin_send(ctx, msg->m.src, msg->app_ctx, msg->m.tag, msg->va, msg->rkey, msg->len, 0);
    core_msg_free(ctx, msg);
}

/* A receive naming a peer must fail if the peer dies, and the transports
 * watch only the peers they have endpoints to: connect now, as a send
 * would. A peer known dead (or gone before we connected) fails the receive
 * unless what it sent before dying, perhaps still in our ring, matches. */
static match_msg_t *recv_watch(tmx_context_h ctx, match_recv_t *r, tmx_status_t *st)
{
    tl_ep_t *ep;

    if (r->src == TMX_ANY_SOURCE || (*st = core_peer_ep(ctx, r->src, &ep)) == TMX_OK)
        return NULL;
    while (core_progress(ctx) > 0)
        ;
    return match_find_msg(&ctx->match, r->src, r->tag, r->ignore);
}

tmx_status_t proto_recv(tmx_context_h ctx, struct tmx_request *req)
{
    match_recv_t *r = &req->recv;
    match_msg_t *m = match_find_msg(&ctx->match, r->src, r->tag, r->ignore);
    tmx_status_t st = TMX_OK;

    if (m == NULL && (m = recv_watch(ctx, r, &st)) == NULL)
        return st == TMX_OK ? match_post(&ctx->match, r) : st;
    match_remove_msg(&ctx->match, m);
    proto_msg_deliver(ctx, util_container_of(m, struct tmx_message, m), req);
    return TMX_OK;
}

/* ------------------------------------------------------------ from wire */

/* What a tagged packet carries once parsed and checked. */
typedef struct proto_in {
    wire_tmh_t tmh;
    wire_rvh_t rvh;
    uint64_t data;
    uint32_t has_data;
    const unsigned char *payload;
    size_t payload_len;
} proto_in_t;

static int parse_fail(tmx_context_h ctx, tmx_peer_t src, const char *why, size_t len)
{
    ctx->dropped++;
    util_warn("dropped a %zu-byte packet from peer %u: %s", len, src, why);
    return -1;
}

static int parse_packet(tmx_context_h ctx, tmx_peer_t src, const unsigned char *p, size_t len,
                        proto_in_t *in)
{
    size_t off = sizeof(wire_tmh_t);

    if (len < sizeof(wire_tmh_t))
        return parse_fail(ctx, src, "shorter than a TMH", len);
    memcpy(&in->tmh, p, sizeof(in->tmh));
    wire_tmh_unpack(&in->tmh);
    if (in->tmh.version != WIRE_VERSION)
        return parse_fail(ctx, src, "unknown wire version", len);
    if (in->tmh.opcode == WIRE_OP_RNDV || in->tmh.opcode == WIRE_OP_FIN) {
        if (len < off + sizeof(wire_rvh_t))
            return parse_fail(ctx, src, "rendezvous packet without RVH", len);
        memcpy(&in->rvh, p + off, sizeof(in->rvh));
        wire_rvh_unpack(&in->rvh);
        off += sizeof(wire_rvh_t);
    }
    if (in->tmh.opcode == WIRE_OP_FIN) {
        if (len != off)
            return parse_fail(ctx, src, "FIN with trailing bytes", len);
        return (in->tmh.flags & ~PROTO_FIN_FAILED) ? parse_fail(ctx, src, "bad FIN flags", len) : 0;
    }
    if (in->tmh.flags & ~WIRE_FLAG_MASK)
        return parse_fail(ctx, src, "unknown flags", len);
    in->has_data = (in->tmh.flags & WIRE_FLAG_DATA) != 0;
    in->data = 0;
    if (in->has_data) {
        if (len < off + sizeof(uint64_t))
            return parse_fail(ctx, src, "truncated remote data", len);
        memcpy(&in->data, p + off, sizeof(in->data));
        in->data = le64toh(in->data);
        off += sizeof(uint64_t);
    }
    in->payload = p + off;
    in->payload_len = len - off;
    if (in->tmh.opcode == WIRE_OP_RNDV && in->payload_len != 0)
        return parse_fail(ctx, src, "rendezvous request with trailing bytes", len);
    return 0;
}

static void unexpected_store(tmx_context_h ctx, tmx_peer_t src, const proto_in_t *in)
{
    struct tmx_message *msg = core_msg_alloc(ctx);

    if (msg == NULL)
        goto err_nomem;
    msg->m.src = src;
    msg->m.tag = in->tmh.tag;
    msg->has_data = in->has_data;
    msg->data = in->data;
    if (in->tmh.opcode == WIRE_OP_EAGER) {
        msg->kind = CORE_MSG_EAGER;
        msg->len = in->payload_len;
        if (msg->len != 0 && (msg->payload = malloc(msg->len)) == NULL)
            goto err_free;
        if (msg->len != 0)
            memcpy(msg->payload, in->payload, msg->len);
    } else {
        msg->kind = CORE_MSG_RNDV;
        msg->app_ctx = in->tmh.app_ctx;
        msg->va = in->rvh.va;
        msg->rkey = in->rvh.rkey;
        msg->len = in->rvh.len;
    }
    if (match_add_msg(&ctx->match, &msg->m) == TMX_OK) {
        core_unexp_charge(ctx, msg);
        return;
    }
err_free:
    core_msg_free(ctx, msg);
err_nomem:
    /* The reliable transports only hand up what they can keep; losing an
     * unexpected message here is loud, since MPI cannot recover it. */
    util_error("out of memory: message from peer %u tag 0x%llx lost", src,
               (unsigned long long)in->tmh.tag);
}

static void tagged_arrive(tmx_context_h ctx, tmx_peer_t src, const proto_in_t *in)
{
    match_recv_t *r = match_find_recv(&ctx->match, src, in->tmh.tag);
    struct tmx_request *req;
    size_t msg_len = in->tmh.opcode == WIRE_OP_EAGER ? in->payload_len : in->rvh.len;

    if (r == NULL) {
        unexpected_store(ctx, src, in);
        return;
    }
    match_remove_recv(&ctx->match, r);
    req = util_container_of(r, struct tmx_request, recv);
    recv_fill(req, src, in->tmh.tag, msg_len, in->has_data, in->data);
    if (in->tmh.opcode == WIRE_OP_EAGER) {
        eager_deliver(req, in->payload);
        return;
    }
    req->rndv_app_ctx = in->tmh.app_ctx;
    req->rndv_va = in->rvh.va;
    req->rndv_rkey = in->rvh.rkey;
    req->rndv_len = in->rvh.len;
    rndv_start(ctx, req, src);
}

/* A FIN must name a rendezvous send of ours with its address and key; any
 * other is stale or forged and is dropped. */
static void fin_arrive(tmx_context_h ctx, tmx_peer_t src, const proto_in_t *in, size_t len)
{
    struct tmx_request *req = core_rndv_lookup(ctx, in->tmh.app_ctx);

    if (req == NULL || req->comp.op != TMX_OP_TSEND || req->rkey != in->rvh.rkey ||
        (uintptr_t)req->buf != in->rvh.va ||
        core_peer_get(ctx, req->comp.source)->uuid != core_peer_get(ctx, src)->uuid) {
        parse_fail(ctx, src, "FIN names no rendezvous send of ours", len);
        return;
    }
    core_rndv_slot_put(ctx, req);
    if (in->tmh.flags & PROTO_FIN_FAILED) {
        util_error("peer %u could not read a %zu-byte rendezvous message", src, req->len);
        core_req_complete(req, TMX_ERR_IO);
        return;
    }
    core_req_complete(req, TMX_OK);
}

/* A HELLO from a process we know is a repeat; from one we do not, it
 * makes the process an implicit peer. Its address must name this very
 * sender. */
static void hello_arrive(tmx_context_h ctx, uint64_t src_uuid, tmx_peer_t src, const unsigned char *p,
                         size_t len)
{
    tmx_peer_t num;
    tmx_status_t st;

    if (src != TMX_PEER_NONE)
        return;
    st = core_peer_add_implicit(ctx, src_uuid, p + sizeof(wire_tmh_t), len - sizeof(wire_tmh_t), &num);
    if (st != TMX_OK)
        parse_fail(ctx, src, "HELLO without a usable address of its sender", len);
}

/* Asked only at the bound of unexpected memory: a packet that would be
 * kept as one more unexpected message waits where the transport has it;
 * anything else (a FIN, a HELLO, a message a posted receive takes, a
 * packet that will be dropped) is taken, so that the wait cannot hold up
 * what needs no memory. */
int proto_admit_cb(void *arg, uint64_t src_uuid, const void *data, size_t len)
{
    tmx_context_h ctx = arg;
    const unsigned char *p = data;
    wire_tmh_t tmh;
    tmx_peer_t src;

    if (!core_unexp_full(ctx) || len < sizeof(tmh) || (p[0] != WIRE_OP_EAGER && p[0] != WIRE_OP_RNDV))
        return 1; /* p[0]: the opcode byte */
    if ((src = core_peer_by_uuid(ctx, src_uuid)) == TMX_PEER_NONE)
        return 1;
    memcpy(&tmh, p, sizeof(tmh));
    wire_tmh_unpack(&tmh);
    return match_find_recv(&ctx->match, src, tmh.tag) != NULL;
}

void proto_recv_cb(void *arg, uint64_t src_uuid, const void *data, size_t len)
{
    tmx_context_h ctx = arg;
    tmx_peer_t src = core_peer_by_uuid(ctx, src_uuid);
    proto_in_t in;

    if (len >= sizeof(wire_tmh_t) && *(const unsigned char *)data == WIRE_OP_HELLO) { /* the opcode byte */
        hello_arrive(ctx, src_uuid, src, data, len);
        return;
    }
    if (src == TMX_PEER_NONE) {
        parse_fail(ctx, src, "sender is not a peer of ours", len);
        return;
    }
    if (parse_packet(ctx, src, data, len, &in) != 0)
        return;
    switch (in.tmh.opcode) {
    case WIRE_OP_EAGER:
    case WIRE_OP_RNDV:
        tagged_arrive(ctx, src, &in);
        break;
    case WIRE_OP_FIN:
        fin_arrive(ctx, src, &in, len);
        break;
    default:
        parse_fail(ctx, src, "unknown opcode", len);
    }
}
