/* The public operations: argument checks, then the protocols. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "proto/proto.h"
#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))

#define SEND_FLAGS                                                                                 \
    (TMX_OP_FLAG_NO_CQ | TMX_OP_FLAG_CQ_ERRORS_ONLY | TMX_OP_FLAG_SYNC | TMX_OP_FLAG_DATA |        \
     TMX_OP_FLAG_INJECT)
#define RECV_FLAGS (TMX_OP_FLAG_NO_CQ | TMX_OP_FLAG_CQ_ERRORS_ONLY)

/* The peer an operation names exists (added or implicit). Under the
 * context's lock, which every operation takes anyway: the peer tables
 * grow under it (tmx_peer_add in another thread, the offload engine's
 * thread making an implicit peer of a process that wrote to us). */
static tmx_status_t peer_check_locked(tmx_context_h ctx, tmx_peer_t peer, const char *fn)
{
    if (__builtin_expect(core_peer_get(ctx, peer) != NULL, 1))
        return TMX_OK;
    util_error("%s: peer %u does not exist (%u peers)", fn, peer, ctx->n_peers);
    return TMX_ERR_INVALID;
}

static tmx_status_t send_check(tmx_context_h ctx, const void *buf, size_t len,
                               const tmx_op_params_t *params)
{
    if (ctx == NULL || (buf == NULL && len != 0)) {
        util_error("tmx_tsend: NULL %s", ctx == NULL ? "context" : "buffer");
        return TMX_ERR_INVALID;
    }
    return core_op_params_check(params, SEND_FLAGS);
}

/* Hands the request to the caller, or takes it back if starting failed. */
static tmx_status_t submit_end(struct tmx_request *req, tmx_status_t st, tmx_request_h *out)
{
    if (st != TMX_OK) {
        if (req->big)
            atomic_fetch_sub_explicit(&req->ctx->off_big, 1, memory_order_relaxed);
        core_req_release(req);
        return st;
    }
    if (out != NULL)
        *out = req;
    return TMX_OK;
}

/* A send that keeps nothing: the payload goes into the transport now. */
static inline tmx_status_t inject(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                                  uint64_t tag, int has_data, uint64_t data, const char *fn)
{
    tl_ep_t *ep;
    proto_peer_t *pp;
    tmx_status_t st;

    core_lock(ctx);
    if ((st = peer_check_locked(ctx, peer, fn)) == TMX_OK &&
        (st = core_peer_ready(ctx, peer, &ep, &pp)) == TMX_OK)
        st = proto_inject(&ctx->proto, ep, pp, buf, len, tag, has_data, data);
    core_unlock(ctx);
    return st;
}

static tmx_status_t send_inject(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                                uint64_t tag, const tmx_op_params_t *params, tmx_request_h *out)
{
    uint64_t f = params->field_mask;
    int has_data = (f & TMX_OP_FIELD_DATA) || (params->flags & TMX_OP_FLAG_DATA);

    if (out != NULL || len > TMX_INJECT_MAX) {
        util_error("tmx_tsend: an injected send takes no request and at most %d bytes "
                   "(%zu given)", TMX_INJECT_MAX, len);
        return TMX_ERR_INVALID;
    }
    return inject(ctx, peer, buf, len, tag, has_data, (f & TMX_OP_FIELD_DATA) ? params->data : 0,
                  "tmx_tsend");
}

TMX_API tmx_status_t tmx_tinject(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                                 uint64_t tag, int has_data, uint64_t data)
{
    if (__builtin_expect(ctx == NULL || (buf == NULL && len != 0) || len > TMX_INJECT_MAX, 0)) {
        if (ctx == NULL || (buf == NULL && len != 0))
            util_error("tmx_tinject: NULL %s", ctx == NULL ? "context" : "buffer");
        else
            util_error("tmx_tinject: %zu bytes, above TMX_INJECT_MAX (%d)", len, TMX_INJECT_MAX);
        return TMX_ERR_INVALID;
    }
    return inject(ctx, peer, buf, len, tag, has_data != 0, has_data ? data : 0, "tmx_tinject");
}

TMX_API tmx_status_t tmx_tsend(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                               uint64_t tag, const tmx_op_params_t *params, tmx_request_h *out)
{
    struct tmx_request *req;
    tl_ep_t *ep;
    proto_peer_t *pp;
    void *copy = NULL;
    tmx_status_t st = send_check(ctx, buf, len, params);

    if (st != TMX_OK)
        return st;
    if (params != NULL && (params->field_mask & TMX_OP_FIELD_FLAGS) &&
        (params->flags & TMX_OP_FLAG_INJECT)) {
        if (!(params->flags & TMX_OP_FLAG_SYNC))
            return send_inject(ctx, peer, buf, len, tag, params, out);
        /* copying and synchronous: the payload is the request's own, the
         * caller's buffer free on return, the completion on the match */
        if (len > TMX_INJECT_MAX) {
            util_error("tmx_tsend: an injected send takes at most %d bytes (%zu given)", TMX_INJECT_MAX,
                       len);
            return TMX_ERR_INVALID;
        }
        if ((copy = malloc(len ? len : 1)) == NULL) {
            util_error("tmx_tsend: out of memory copying a synchronous injected send");
            return TMX_ERR_NOMEM;
        }
        if (len != 0)
            memcpy(copy, buf, len);
        buf = copy;
    }
    core_lock(ctx);
    if ((st = peer_check_locked(ctx, peer, "tmx_tsend")) != TMX_OK ||
        (req = core_req_alloc(ctx, params, TMX_OP_TSEND)) == NULL) {
        core_unlock(ctx);
        free(copy);
        return st != TMX_OK ? st : TMX_ERR_NOMEM;
    }
    req->owns_buf = copy != NULL;
    req->handle_held = out != NULL;
    req->p.comp.source = peer;
    req->p.comp.tag = tag;
    req->p.comp.length = len;
    req->p.comp.msg_length = len;
    req->p.buf = (void *)buf;
    req->p.len = len;
    core_offload_watch(ctx, req);
    if ((st = core_peer_ready(ctx, peer, &ep, &pp)) == TMX_OK)
        st = proto_send_ep(&ctx->proto, &req->p, peer, ep, pp, tag);
    st = submit_end(req, st, out);
    core_unlock(ctx);
    return st;
}

static tmx_status_t recv_check(tmx_context_h ctx, const void *buf, size_t len,
                               const tmx_op_params_t *params)
{
    if (ctx == NULL || (buf == NULL && len != 0)) {
        util_error("tmx_trecv: NULL %s", ctx == NULL ? "context" : "buffer");
        return TMX_ERR_INVALID;
    }
    return core_op_params_check(params, RECV_FLAGS);
}

/* Matches a new receive against the unexpected messages, or posts it. A
 * receive naming a peer must fail if the peer dies, and the transports
 * watch only the peers they have endpoints to: it connects now, as a send
 * would. A peer known dead (or gone before we connected) fails the
 * receive, unless what it sent before dying, perhaps still in our ring,
 * matches. */
static tmx_status_t recv_start(tmx_context_h ctx, struct tmx_request *req)
{
    tmx_peer_t src = req->p.recv.src;
    tl_ep_t *ep;
    proto_peer_t *pp;
    tmx_status_t st;

    if (proto_recv_match(&ctx->proto, &req->p) == TMX_OK)
        return TMX_OK;
    if (src == TMX_ANY_SOURCE || (st = core_peer_ready(ctx, src, &ep, &pp)) == TMX_OK)
        return proto_recv_post(&ctx->proto, &req->p);
    /* what it sent before it failed may still wait in the transports;
     * a bounded drain, since others' steady traffic would never let
     * progress come back empty */
    for (int i = 0; i < CORE_DRAIN_PASSES && core_progress(ctx) > 0; i++)
        ;
    return proto_recv_match(&ctx->proto, &req->p) == TMX_OK ? TMX_OK : st;
}

TMX_API tmx_status_t tmx_trecv(tmx_context_h ctx, tmx_peer_t peer, void *buf, size_t len,
                               uint64_t tag, uint64_t ignore, const tmx_op_params_t *params,
                               tmx_request_h *out)
{
    struct tmx_request *req;
    tmx_status_t st = recv_check(ctx, buf, len, params);

    if (st != TMX_OK)
        return st;
    core_lock(ctx);
    if ((peer != TMX_ANY_SOURCE && (st = peer_check_locked(ctx, peer, "tmx_trecv")) != TMX_OK) ||
        (req = core_req_alloc(ctx, params, TMX_OP_TRECV)) == NULL) {
        core_unlock(ctx);
        return st != TMX_OK ? st : TMX_ERR_NOMEM;
    }
    req->handle_held = out != NULL;
    req->p.buf = buf;
    req->p.len = len;
    req->p.recv.src = peer;
    req->p.recv.tag = tag;
    req->p.recv.ignore = ignore;
    req->p.comp.source = peer; /* until a message matches */
    req->p.comp.tag = tag;
    /* held across the start, which may complete it: released below if the
     * caller keeps no handle */
    req->handle_held = 1;
    st = recv_start(ctx, req);
    /* watched once posted or started; not a receive offered to its sender
     * (proto.c, RTR): the sender's write moves it, and the engine's looks
     * would take the computing core */
    if (st == TMX_OK && req->state != CORE_REQ_DONE) {
        if (req->p.rtr) {
            req->offered = 1;
            atomic_fetch_add_explicit(&ctx->off_offered, 1, memory_order_relaxed);
        } else {
            core_offload_watch(ctx, req);
        }
    }
    req->handle_held = out != NULL;
    if (st == TMX_OK && req->state == CORE_REQ_DONE && out == NULL)
        core_req_release(req);
    else
        st = submit_end(req, st, out);
    core_unlock(ctx);
    return st;
}

static void probe_fill(const struct tmx_message *msg, tmx_completion_t *info)
{
    info->user_context = NULL;
    info->status = TMX_OK;
    info->op = TMX_OP_TRECV;
    info->source = msg->p.m.src;
    info->tag = msg->p.m.tag;
    info->length = msg->p.len;
    info->msg_length = msg->p.len;
    info->has_data = msg->p.has_data;
    info->data = msg->p.data;
}

static tmx_status_t probe_check(tmx_context_h ctx, uint32_t flags, tmx_message_h *msg)
{
    if (ctx == NULL) {
        util_error("tmx_tprobe: NULL context");
        return TMX_ERR_INVALID;
    }
    if (flags & ~(uint32_t)TMX_PROBE_FLAG_CLAIM) {
        util_error("tmx_tprobe: unknown flag bits 0x%x", flags & ~(uint32_t)TMX_PROBE_FLAG_CLAIM);
        return TMX_ERR_INVALID;
    }
    if ((flags & TMX_PROBE_FLAG_CLAIM) && msg == NULL) {
        util_error("tmx_tprobe: CLAIM without a message handle to return");
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

TMX_API tmx_status_t tmx_tprobe(tmx_context_h ctx, tmx_peer_t peer, uint64_t tag, uint64_t ignore,
                                uint32_t flags, tmx_completion_t *info, tmx_message_h *out)
{
    match_msg_t *m;
    struct tmx_message *msg;
    tmx_status_t st = probe_check(ctx, flags, out);

    if (st != TMX_OK)
        return st;
    core_lock(ctx);
    if (peer != TMX_ANY_SOURCE && (st = peer_check_locked(ctx, peer, "tmx_tprobe")) != TMX_OK) {
        core_unlock(ctx);
        return st;
    }
    core_progress(ctx);
    m = match_find_msg(&ctx->proto.match, peer, tag, ignore);
    if (m == NULL) {
        core_unlock(ctx);
        return TMX_ERR_NO_MESSAGE;
    }
    msg = util_container_of(m, struct tmx_message, p.m);
    if (info != NULL)
        probe_fill(msg, info);
    if (flags & TMX_PROBE_FLAG_CLAIM) {
        match_remove_msg(&ctx->proto.match, m);
        msg->claimed = 1;
        *out = msg;
    }
    core_unlock(ctx);
    return TMX_OK;
}

static tmx_status_t claimed_check(tmx_context_h ctx, tmx_message_h msg, const char *fn)
{
    if (ctx == NULL || msg == NULL) {
        util_error("%s: NULL %s", fn, ctx == NULL ? "context" : "message");
        return TMX_ERR_INVALID;
    }
    if (msg->ctx != ctx || !msg->claimed) {
        util_error("%s: message %p is not a claimed message of this context", fn, (void *)msg);
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

TMX_API tmx_status_t tmx_mrecv(tmx_context_h ctx, tmx_message_h msg, void *buf, size_t len,
                               const tmx_op_params_t *params, tmx_request_h *out)
{
    struct tmx_request *req;
    tmx_status_t st;

    if (buf == NULL && len != 0) {
        util_error("tmx_mrecv: NULL buffer of %zu bytes", len);
        return TMX_ERR_INVALID;
    }
    if ((st = core_op_params_check(params, RECV_FLAGS)) != TMX_OK)
        return st;
    if (ctx != NULL)
        core_lock(ctx);
    if ((st = claimed_check(ctx, msg, "tmx_mrecv")) != TMX_OK)
        goto out_unlock;
    req = core_req_alloc(ctx, params, TMX_OP_TRECV);
    if (req == NULL) {
        /* the handle is consumed whatever the result (tmx.h): the
         * message is dropped, and a rendezvous sender released */
        util_error("tmx_mrecv: no memory for the request: a %zu-byte message from peer %u dropped",
                   msg->p.len, msg->p.m.src);
        proto_msg_discard(&ctx->proto, &msg->p);
        st = TMX_ERR_NOMEM;
        goto out_unlock;
    }
    req->handle_held = out != NULL;
    req->p.buf = buf;
    req->p.len = len;
    if (out != NULL)
        *out = req;
    core_offload_watch(ctx, req);
    proto_msg_deliver(&ctx->proto, &msg->p, &req->p);
out_unlock:
    if (ctx != NULL)
        core_unlock(ctx);
    return st;
}

TMX_API tmx_status_t tmx_message_discard(tmx_context_h ctx, tmx_message_h msg)
{
    tmx_status_t st;

    if (ctx != NULL)
        core_lock(ctx);
    st = claimed_check(ctx, msg, "tmx_message_discard");
    if (st == TMX_OK)
        proto_msg_discard(&ctx->proto, &msg->p);
    if (ctx != NULL)
        core_unlock(ctx);
    return st;
}

static __attribute__((noinline)) tmx_status_t cq_read_locked(tmx_context_h ctx, tmx_completion_t *out,
                                                             size_t max, size_t *count)
{
    if (ctx->cq.count == 0) {
        int events = core_progress(ctx);
        if (ctx->cq.count == 0) {
            *count = 0;
            core_poll_idle(ctx, events);
            return TMX_OK;
        }
    }
    ctx->idle_polls = 0;
    *count = core_cq_pop(&ctx->cq, out, max);
    return TMX_OK;
}

TMX_API tmx_status_t tmx_cq_read(tmx_context_h ctx, tmx_completion_t *out, size_t max,
                                 size_t *count)
{
    tmx_status_t st;

    if (ctx == NULL || count == NULL || (out == NULL && max != 0)) {
        util_error("tmx_cq_read: NULL %s", ctx == NULL ? "context" : count == NULL ? "count" : "entries");
        return TMX_ERR_INVALID;
    }
    /* the usual poll, of one thread, that finds nothing: kept short */
    if (__builtin_expect(!ctx->asym && !ctx->mt && ctx->cq.count == 0, 1)) {
        int events = core_progress(ctx);
        if (__builtin_expect(ctx->cq.count == 0, 1)) {
            *count = 0;
            core_poll_idle(ctx, events);
            return TMX_OK;
        }
    }
    core_lock(ctx);
    st = cq_read_locked(ctx, out, max, count);
    core_unlock(ctx);
    return st;
}

TMX_API int tmx_progress(tmx_context_h ctx)
{
    int events;

    if (ctx == NULL) {
        util_error("tmx_progress: NULL context");
        return TMX_ERR_INVALID;
    }
    core_lock(ctx);
    events = core_progress(ctx);
    core_poll_idle(ctx, events);
    core_unlock(ctx);
    return events;
}
