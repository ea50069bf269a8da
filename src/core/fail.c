/* Peers that have gone, and the operations that waited for them. */
#include "core/core.h"
#include "util/log.h"

static int peer_gone(tmx_context_h ctx, tmx_peer_t peer)
{
    core_peer_t *p = core_peer_get(ctx, peer);

    return p != NULL && core_peer_failed(p);
}

/* Operations that can no longer finish: sends waiting for a FIN from the
 * peer, receives naming it or waiting for its write, and, when it died rather than closed,
 * receives from any source (they may have been waiting for it: failing
 * them is how MPI's fault tolerance reports a pending wildcard). */
static int req_doomed(tmx_context_h ctx, struct tmx_request *req, int clean)
{
    if (req->state == CORE_REQ_DONE)
        return 0;
    if (!proto_req_waiting(&req->p))
        return 0;
    if (req->p.comp.op == TMX_OP_TSEND)
        return peer_gone(ctx, req->p.comp.source);
    if (proto_req_writer(&req->p) != TMX_PEER_NONE) /* matched: its sender writes */
        return peer_gone(ctx, proto_req_writer(&req->p));
    if (req->p.recv.src == TMX_ANY_SOURCE)
        return !clean;
    return peer_gone(ctx, req->p.recv.src);
}

static void req_fail(tmx_context_h ctx, struct tmx_request *req)
{
    proto_req_abort(&ctx->proto, &req->p);
    core_req_complete(req, TMX_ERR_PEER_FAILED);
}

void core_peer_failed_cb(void *arg, uint64_t uuid, int clean)
{
    tmx_context_h ctx = arg;
    util_dlist_t *pos, *tmp;
    unsigned n = 0;

    /* A process that is no peer of ours (a stranger that wrote to our
     * port, or one whose address we never added): nothing it sent was
     * delivered, so no receive, from any source, can wait for it. */
    if (core_peer_by_uuid(ctx, uuid) == TMX_PEER_NONE) {
        util_debug("a process that is no peer (uuid %016llx) %s", (unsigned long long)uuid,
                   clean ? "has exited" : "is gone");
        return;
    }
    proto_peer_gone(&ctx->proto, uuid);
    for (uint32_t i = 0; i < ctx->n_peers; i++) {
        if (core_peer_uuid(ctx, &ctx->peers[i]) == uuid)
            ctx->peers[i].w |= CORE_PEER_FAILED;
    }
    for (uint32_t i = 0; i < ctx->n_ipeers; i++) {
        if (core_peer_uuid(ctx, &ctx->ipeers[i]) == uuid)
            ctx->ipeers[i].w |= CORE_PEER_FAILED;
    }
    util_dlist_foreach_safe(pos, tmp, &ctx->reqs) {
        struct tmx_request *req = util_container_of(pos, struct tmx_request, link);
        if (req_doomed(ctx, req, clean)) {
            req_fail(ctx, req);
            n++;
        }
    }
    if (n != 0 || !clean)
        util_warn("peer %u %s: %u pending operations failed", core_peer_by_uuid(ctx, uuid),
                  clean ? "has exited" : "died", n);
}

/* Transports watch only the peers they have endpoints to, and endpoints
 * are made on first use. A receive from any source may be waiting for any
 * peer, so once one has waited long enough to sleep, every peer is
 * connected and so watched: a dead one then fails it instead of leaving it
 * hanging. Rare, and paid once. */
void core_watch_for_wildcards(tmx_context_h ctx)
{
    tl_ep_t *ep;

    if (ctx->watch_all || !match_any_source_posted(&ctx->proto.match))
        return;
    ctx->watch_all = 1;
    for (uint32_t i = 0; i < ctx->n_peers; i++) {
        if (!(ctx->peers[i].w & (CORE_PEER_EP | CORE_PEER_FAILED)) &&
            core_peer_ep(ctx, i, &ep) == TMX_ERR_PEER_FAILED)
            core_peer_failed_cb(ctx, core_peer_uuid(ctx, &ctx->peers[i]), 0);
    }
    for (uint32_t i = 0; i < ctx->n_ipeers; i++) {
        if (!(ctx->ipeers[i].w & (CORE_PEER_EP | CORE_PEER_FAILED)) &&
            core_peer_ep(ctx, TMX_PEER_IMPLICIT | i, &ep) == TMX_ERR_PEER_FAILED)
            core_peer_failed_cb(ctx, core_peer_uuid(ctx, &ctx->ipeers[i]), 0);
    }
}
