/*
 * Peers and address blobs. A blob is a header (magic, version, the
 * context's uuid) followed by one section per transport. Endpoints are
 * created on first use of a peer (seed 002), so adding a peer costs a copy
 * of its address only.
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "proto/proto.h"
#include "util/hash.h"
#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))
#define ADDR_MAGIC 0x41584d54u /* "TMXA" */
#define ADDR_VERSION 1
#define ADDR_NAME_LEN 8

typedef struct addr_hdr {
    uint32_t magic;     /* ADDR_MAGIC, little endian */
    uint8_t version;    /* ADDR_VERSION */
    uint8_t n_sections; /* transport sections that follow */
    uint16_t reserved;  /* zero */
    uint64_t uuid;      /* the context's identity, little endian */
} addr_hdr_t;

typedef struct addr_section {
    char name[ADDR_NAME_LEN]; /* transport name, NUL padded */
    uint16_t len;             /* bytes of address that follow, little endian */
} __attribute__((packed)) addr_section_t;

tmx_status_t core_address(tmx_context_h ctx, void *buf, size_t room, size_t *used)
{
    addr_hdr_t hdr = {htole32(ADDR_MAGIC), ADDR_VERSION, 0, 0, htole64(ctx->uuid)};
    unsigned char tmp[TMX_ADDRESS_MAX];
    size_t off = sizeof(hdr);

    for (int i = 0; i < ctx->n_ifaces; i++) {
        tl_iface_t *iface = ctx->ifaces[i];
        addr_section_t sec = {{0}, 0};
        size_t len = sizeof(tmp) - off - sizeof(sec);
        if (iface == ctx->self_iface)
            continue; /* the uuid is the self transport's address */
        if (off + sizeof(sec) > sizeof(tmp) || iface->ops->address(iface, tmp + off + sizeof(sec), &len) != TMX_OK)
            return TMX_ERR_INTERNAL;
        memcpy(sec.name, iface->ops->name, strnlen(iface->ops->name, ADDR_NAME_LEN - 1));
        sec.len = htole16((uint16_t)len);
        memcpy(tmp + off, &sec, sizeof(sec));
        off += sizeof(sec) + len;
        hdr.n_sections++;
    }
    memcpy(tmp, &hdr, sizeof(hdr));
    *used = off;
    if (buf == NULL || room < off)
        return TMX_ERR_NO_SPACE;
    memcpy(buf, tmp, off);
    return TMX_OK;
}

TMX_API tmx_status_t tmx_address(tmx_context_h ctx, void *buf, size_t *len)
{
    size_t used;
    tmx_status_t st;

    if (ctx == NULL || len == NULL) {
        util_error("tmx_address: NULL %s", ctx == NULL ? "context" : "length");
        return TMX_ERR_INVALID;
    }
    core_lock(ctx);
    st = core_address(ctx, buf, *len, &used);
    core_unlock(ctx);
    if (st == TMX_OK || st == TMX_ERR_NO_SPACE)
        *len = used;
    return st;
}

TMX_API tmx_status_t tmx_address_check(const void *addr, size_t len)
{
    const unsigned char *p = addr;
    addr_hdr_t hdr;
    size_t off = sizeof(hdr);

    if (addr == NULL || len < sizeof(hdr) || len > TMX_ADDRESS_MAX)
        return TMX_ERR_INVALID;
    memcpy(&hdr, p, sizeof(hdr));
    if (le32toh(hdr.magic) != ADDR_MAGIC || hdr.version != ADDR_VERSION || hdr.reserved != 0)
        return TMX_ERR_INVALID;
    for (unsigned i = 0; i < hdr.n_sections; i++) {
        addr_section_t sec;
        if (len - off < sizeof(sec))
            return TMX_ERR_INVALID;
        memcpy(&sec, p + off, sizeof(sec));
        off += sizeof(sec);
        if (len - off < le16toh(sec.len) || memchr(sec.name, '\0', ADDR_NAME_LEN) == NULL)
            return TMX_ERR_INVALID;
        off += le16toh(sec.len);
    }
    return off == len ? TMX_OK : TMX_ERR_INVALID;
}

/* A parsed address: the section of the transport that reaches the
 * process (pointing into the caller's buffer; NULL for the self peer). */
typedef struct addr_pick {
    const unsigned char *sec;
    uint16_t len;
    uint8_t iface;
} addr_pick_t;

/* Finds the first section of a transport this context has open. */
static tmx_status_t addr_pick(tmx_context_h ctx, const unsigned char *p, size_t len,
                              unsigned n_sections, addr_pick_t *peer)
{
    size_t off = sizeof(addr_hdr_t);

    for (unsigned i = 0; i < n_sections; i++) {
        addr_section_t sec;
        if (len - off < sizeof(sec))
            goto err_parse;
        memcpy(&sec, p + off, sizeof(sec));
        off += sizeof(sec);
        sec.len = le16toh(sec.len);
        if (len - off < sec.len || memchr(sec.name, '\0', ADDR_NAME_LEN) == NULL)
            goto err_parse;
        for (int k = 0; k < ctx->n_ifaces && peer->sec == NULL; k++) {
            tl_iface_t *iface = ctx->ifaces[k];
            if (iface != ctx->self_iface && strcmp(iface->ops->name, sec.name) == 0 &&
                sec.len != 0 && iface->ops->reachable(iface, p + off, sec.len) == TMX_OK) {
                peer->iface = (uint8_t)k;
                peer->sec = p + off;
                peer->len = sec.len;
            }
        }
        off += sec.len;
    }
    return peer->sec != NULL ? TMX_OK : TMX_ERR_UNREACHABLE;

err_parse:
    util_error("tmx_peer_add: a transport section of the address is malformed");
    return TMX_ERR_INVALID;
}

/* Parses an address into *peer (its address section pointing into addr)
 * and *uuid. */
static tmx_status_t addr_parse(tmx_context_h ctx, const void *addr, size_t len, addr_pick_t *peer,
                               uint64_t *uuid)
{
    addr_hdr_t hdr;

    if (len < sizeof(hdr) || len > TMX_ADDRESS_MAX) {
        util_error("tmx_peer_add: address of %zu bytes (valid: %zu to %d)", len, sizeof(hdr),
                   TMX_ADDRESS_MAX);
        return TMX_ERR_INVALID;
    }
    memcpy(&hdr, addr, sizeof(hdr));
    if (le32toh(hdr.magic) != ADDR_MAGIC || hdr.version != ADDR_VERSION || hdr.reserved != 0) {
        util_error("tmx_peer_add: not a tmx address (magic 0x%x version %u)", le32toh(hdr.magic),
                   hdr.version);
        return TMX_ERR_INVALID;
    }
    memset(peer, 0, sizeof(*peer));
    *uuid = le64toh(hdr.uuid);
    if (*uuid == ctx->uuid && ctx->self_iface != NULL) {
        for (int k = 0; k < ctx->n_ifaces; k++)
            if (ctx->ifaces[k] == ctx->self_iface)
                peer->iface = (uint8_t)k;
        return TMX_OK;
    }
    return addr_pick(ctx, addr, len, hdr.n_sections, peer);
}

/* ------------------------------------------------------- uuid -> peer map */

/* The map keeps peer numbers only: a slot's key is its peer's uuid. The
 * hash's high half scaled to the slots picks the first slot (there need
 * not be a power of two of them). */
static uint32_t uuid_slot(const tmx_context_h ctx, uint64_t uuid)
{
    uint32_t i = (uint32_t)(((util_hash64(uuid ^ ctx->uuid_seed) >> 32) * ctx->uuid_cap) >> 32);

    while (ctx->uuid_vals[i] != TMX_PEER_NONE &&
           core_peer_uuid(ctx, core_peer_get(ctx, ctx->uuid_vals[i])) != uuid)
        i = i + 1 == ctx->uuid_cap ? 0 : i + 1;
    return i;
}

/* At most 3/4 full, growing by half: one and a third to two slots per
 * peer. */
static tmx_status_t uuid_grow(tmx_context_h ctx)
{
    uint32_t old_cap = ctx->uuid_cap, cap = old_cap ? old_cap + old_cap / 2 : 64;
    tmx_peer_t *old_vals = ctx->uuid_vals;

    if (cap <= old_cap || (ctx->uuid_vals = malloc(cap * sizeof(*ctx->uuid_vals))) == NULL) {
        ctx->uuid_vals = old_vals;
        return TMX_ERR_NOMEM;
    }
    ctx->uuid_cap = cap;
    for (uint32_t i = 0; i < cap; i++)
        ctx->uuid_vals[i] = TMX_PEER_NONE;
    for (uint32_t i = 0; i < old_cap; i++) {
        if (old_vals[i] != TMX_PEER_NONE)
            ctx->uuid_vals[uuid_slot(ctx, core_peer_uuid(ctx, core_peer_get(ctx, old_vals[i])))] = old_vals[i];
    }
    free(old_vals);
    return TMX_OK;
}

/* Remembers the first peer number of each context; later duplicates keep
 * the first, so messages are reported with it. An added number replaces an
 * implicit one (override). */
static tmx_status_t uuid_insert(tmx_context_h ctx, uint64_t uuid, tmx_peer_t peer, int override)
{
    uint32_t i;

    if ((uint64_t)(ctx->n_peers + ctx->n_ipeers + 1) * 4 > (uint64_t)ctx->uuid_cap * 3 && uuid_grow(ctx) != TMX_OK)
        return TMX_ERR_NOMEM;
    i = uuid_slot(ctx, uuid);
    if (ctx->uuid_vals[i] == TMX_PEER_NONE || override)
        ctx->uuid_vals[i] = peer;
    if (ctx->last_uuid == uuid)
        ctx->last_peer = TMX_PEER_NONE;
    return TMX_OK;
}

tmx_peer_t core_peer_by_uuid(tmx_context_h ctx, uint64_t uuid)
{
    tmx_peer_t p;

    if (uuid == ctx->last_uuid && ctx->last_peer != TMX_PEER_NONE)
        return ctx->last_peer;
    if (ctx->uuid_cap == 0)
        return TMX_PEER_NONE;
    p = ctx->uuid_vals[uuid_slot(ctx, uuid)];
    if (p != TMX_PEER_NONE) {
        ctx->last_uuid = uuid;
        ctx->last_peer = p;
    }
    return p;
}

static tmx_status_t peers_reserve(core_peer_t **arr, uint32_t n, uint32_t *cap_io)
{
    uint32_t cap = *cap_io ? *cap_io * 2 : 16;
    core_peer_t *p;

    if (n < *cap_io)
        return TMX_OK;
    if (*cap_io >= TMX_PEER_IMPLICIT / 2)
        return TMX_ERR_NO_SPACE;
    p = realloc(*arr, cap * sizeof(*p));
    if (p == NULL)
        return TMX_ERR_NOMEM;
    *arr = p;
    *cap_io = cap;
    return TMX_OK;
}

/* The parsed address points into the caller's buffer: the peer keeps a
 * copy, behind its uuid (core_addr_t), until the endpoint is made from it.
 * The self peer keeps none. */
static tmx_status_t addr_keep(core_peer_t *peer, const addr_pick_t *pick, uint64_t uuid)
{
    core_addr_t *a;

    peer->w = 0;
    if (pick->sec == NULL)
        return TMX_OK;
    if ((a = malloc(offsetof(core_addr_t, bytes) + pick->len)) == NULL)
        return TMX_ERR_NOMEM;
    a->uuid = uuid;
    a->len = pick->len;
    a->iface = pick->iface;
    memcpy(a->bytes, pick->sec, pick->len);
    peer->w = (uintptr_t)a;
    return TMX_OK;
}

static void addr_free(core_peer_t *peer)
{
    if (!core_peer_has_ep(peer)) {
        free(core_peer_addr(peer));
        peer->w &= CORE_PEER_FLAGS;
    }
}

/* Receives posted naming the implicit number would never see the
 * process's messages, which now carry the added number: they name it
 * too, in their places in the post order. (The offload engine holds no
 * receive naming an implicit number: proto keeps those.) */
static void implicit_rekey_recvs(tmx_context_h ctx, tmx_peer_t old, tmx_peer_t added)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &ctx->reqs) {
        struct tmx_request *req = util_container_of(pos, struct tmx_request, link);
        match_recv_t *r = &req->p.recv;
        if (req->p.comp.op != TMX_OP_TRECV || !match_recv_is_posted(r) || r->src != old)
            continue;
        if (match_recv_set_src(&ctx->proto.match, r, added) != TMX_OK) {
            util_error("out of memory: a receive naming peer %u does not see it as peer %u", old, added);
            continue;
        }
        req->p.comp.source = added;
    }
}

/* Messages from a process known only implicitly, still unreceived, move
 * to its added number, in their order (after other senders' messages:
 * MPI orders messages per sender only). */
static void implicit_rekey(tmx_context_h ctx, tmx_peer_t old, tmx_peer_t added)
{
    match_msg_t *m;
    unsigned n = 0;

    while ((m = match_find_msg(&ctx->proto.match, old, 0, TMX_TAG_ANY)) != NULL) {
        match_remove_msg(&ctx->proto.match, m);
        m->src = added;
        if (match_add_msg(&ctx->proto.match, m) != TMX_OK) {
            util_error("out of memory: a message from peer %u lost", added);
            proto_msg_discard(&ctx->proto, util_container_of(m, proto_msg_t, m));
        }
        n++;
    }
    if (n != 0)
        util_debug("peer %u (was %u): %u waiting messages now carry its number", added, old, n);
    implicit_rekey_recvs(ctx, old, added);
}

/* The added number is to come first for a process known so far by the
 * implicit number old: the transport of old's endpoint no longer finds it
 * through us (tl_held_t), and indexes it itself, or the add fails. */
static tmx_status_t implicit_unfound(tmx_context_h ctx, tmx_peer_t old)
{
    core_peer_t *was = core_peer_get(ctx, old);
    tl_ep_t *ep = core_peer_ep_of(was);
    tmx_status_t st;

    if (!core_peer_has_ep(was) || ep == NULL || tl_ep_iface(ep)->ops->ep_unfound == NULL)
        return TMX_OK;
    if ((st = tl_ep_iface(ep)->ops->ep_unfound(ep)) != TMX_OK)
        util_error("tmx_peer_add: peer %u's transport cannot take its endpoint back: %s", old, tmx_strerror(st));
    return st;
}

tmx_status_t core_peer_add(tmx_context_h ctx, const void *addr, size_t len, tmx_peer_t *out)
{
    addr_pick_t pick;
    core_peer_t peer;
    uint64_t uuid;
    tmx_status_t st = addr_parse(ctx, addr, len, &pick, &uuid);
    tmx_peer_t old;

    if (st != TMX_OK || (st = addr_keep(&peer, &pick, uuid)) != TMX_OK)
        return st;
    old = core_peer_by_uuid(ctx, uuid);
    if (old != TMX_PEER_NONE && (old & TMX_PEER_IMPLICIT) && (st = implicit_unfound(ctx, old)) != TMX_OK) {
        addr_free(&peer);
        return st;
    }
    if ((st = peers_reserve(&ctx->peers, ctx->n_peers, &ctx->cap_peers)) != TMX_OK ||
        (st = uuid_insert(ctx, uuid, ctx->n_peers, old != TMX_PEER_NONE && (old & TMX_PEER_IMPLICIT))) !=
            TMX_OK) {
        util_error("tmx_peer_add: cannot grow the peer table past %u", ctx->n_peers);
        addr_free(&peer);
        return st;
    }
    if (uuid == ctx->uuid && ctx->self_peer == TMX_PEER_NONE)
        ctx->self_peer = ctx->n_peers;
    ctx->peers[ctx->n_peers] = peer;
    ctx->watch_all = 0;
    *out = ctx->n_peers++;
    if (old != TMX_PEER_NONE && (old & TMX_PEER_IMPLICIT))
        implicit_rekey(ctx, old, *out);
    return TMX_OK;
}

tmx_status_t core_peer_add_implicit(tmx_context_h ctx, uint64_t uuid, const void *addr, size_t len,
                                    tmx_peer_t *out)
{
    addr_pick_t pick;
    core_peer_t peer;
    uint64_t named;
    tmx_status_t st = addr_parse(ctx, addr, len, &pick, &named);
    tl_iface_t *iface;
    tmx_peer_t num;

    if (st != TMX_OK)
        return st;
    if (named != uuid) {
        util_error("an address names context %016llx, but came from %016llx",
                   (unsigned long long)named, (unsigned long long)uuid);
        return TMX_ERR_INVALID;
    }
    if ((*out = core_peer_by_uuid(ctx, uuid)) != TMX_PEER_NONE)
        return TMX_OK;
    iface = ctx->ifaces[pick.iface];
    if (iface->ops->sender_check != NULL && pick.sec != NULL &&
        (st = iface->ops->sender_check(iface, uuid, pick.sec, pick.len)) != TMX_OK)
        return st; /* it names another place than its packets come from */
    if (ctx->n_ipeers >= CORE_IMPLICIT_MAX) {
        if (util_log_sparse(&ctx->ipeers_refused))
            util_warn("%u processes that were not added are known, the most: %016llx is not (%llu refused so "
                      "far); add it with tmx_peer_add", ctx->n_ipeers, (unsigned long long)uuid,
                      (unsigned long long)ctx->ipeers_refused);
        return TMX_ERR_NOMEM;
    }
    num = TMX_PEER_IMPLICIT | ctx->n_ipeers;
    if ((st = addr_keep(&peer, &pick, uuid)) != TMX_OK)
        return st;
    if ((st = peers_reserve(&ctx->ipeers, ctx->n_ipeers, &ctx->cap_ipeers)) != TMX_OK ||
        (st = uuid_insert(ctx, uuid, num, 0)) != TMX_OK) {
        addr_free(&peer);
        return st;
    }
    proto_peer_hello_set(&peer.proto); /* it knows us: it wrote first */
    ctx->ipeers[ctx->n_ipeers++] = peer;
    ctx->watch_all = 0;
    *out = num;
    util_debug("peer %u: a process that was not added, known from its address", num);
    return TMX_OK;
}

TMX_API tmx_status_t tmx_peer_add(tmx_context_h ctx, const void *addr, size_t len, tmx_peer_t *peer)
{
    tmx_status_t st;

    if (ctx == NULL || addr == NULL || peer == NULL) {
        util_error("tmx_peer_add: NULL %s", ctx == NULL ? "context" : addr == NULL ? "address" : "peer");
        return TMX_ERR_INVALID;
    }
    core_lock(ctx);
    st = core_peer_add(ctx, addr, len, peer);
    core_unlock(ctx);
    return st;
}

TMX_API tmx_status_t tmx_peer_count(tmx_context_h ctx, uint32_t *count)
{
    if (ctx == NULL || count == NULL) {
        util_error("tmx_peer_count: NULL %s", ctx == NULL ? "context" : "count");
        return TMX_ERR_INVALID;
    }
    core_lock(ctx);
    *count = ctx->n_peers;
    core_unlock(ctx);
    return TMX_OK;
}

tmx_status_t core_peer_ep(tmx_context_h ctx, tmx_peer_t peer, tl_ep_t **ep)
{
    core_peer_t *p = core_peer_get(ctx, peer);
    tmx_status_t st;

    if (p == NULL) {
        util_error("peer %u does not exist (%u peers)", peer, ctx->n_peers);
        return TMX_ERR_NOT_FOUND;
    }
    if (core_peer_failed(p))
        return TMX_ERR_PEER_FAILED;
    if (!core_peer_has_ep(p)) {
        core_addr_t *a = core_peer_addr(p);
        tl_iface_t *iface = a != NULL ? ctx->ifaces[a->iface] : ctx->self_iface;
        tl_ep_t *made;
        st = iface->ops->ep_create(iface, a != NULL ? a->bytes : NULL, a != NULL ? a->len : 0, peer,
                                   core_peer_uuid(ctx, p), &made);
        if (st != TMX_OK) {
            util_error("cannot reach peer %u over %s: %s", peer, iface->ops->name, tmx_strerror(st));
            return st;
        }
        if ((uintptr_t)made & CORE_PEER_FLAGS) { /* every endpoint holds pointers */
            util_error("%s made an endpoint at %p, not 8-byte aligned", iface->ops->name, (void *)made);
            iface->ops->ep_destroy(made);
            return TMX_ERR_INTERNAL;
        }
        /* the endpoint holds what it needs of the address, and the uuid */
        addr_free(p);
        p->w |= (uintptr_t)made | CORE_PEER_EP;
    }
    if ((*ep = core_peer_ep_of(p)) == NULL)
        return TMX_ERR_NOT_FOUND; /* gone with the context */
    return TMX_OK;
}

/* tl_peer_addr_t: the address we were given for uuid on iface, while no
 * endpoint holds it (arg: the context's proto). */
tmx_status_t core_peer_addr_cb(void *arg, const tl_iface_t *iface, uint64_t uuid, const void **addr,
                               size_t *len)
{
    tmx_context_h ctx = util_container_of((proto_t *)arg, struct tmx_context, proto);
    core_peer_t *p = core_peer_get(ctx, core_peer_by_uuid(ctx, uuid));
    core_addr_t *a;

    if (p == NULL || core_peer_has_ep(p) || (a = core_peer_addr(p)) == NULL || ctx->ifaces[a->iface] != iface)
        return TMX_ERR_NOT_FOUND;
    *addr = a->bytes;
    *len = a->len;
    return TMX_OK;
}

/* tl_held_t (arg: the context's proto): the endpoint of uuid's first peer
 * number, the one its packets are reported under. */
static tl_ep_t *held_find(void *arg, const tl_iface_t *iface, uint64_t uuid)
{
    tmx_context_h ctx = util_container_of((proto_t *)arg, struct tmx_context, proto);
    core_peer_t *p = core_peer_get(ctx, core_peer_by_uuid(ctx, uuid));
    tl_ep_t *ep;

    if (p == NULL || !core_peer_has_ep(p) || (ep = core_peer_ep_of(p)) == NULL)
        return NULL;
    return ep->iface == iface->num ? ep : NULL;
}

/* Added peers, then implicit ones: the endpoints held_find gives, each
 * under its uuid's first number (a process added twice may hold the same
 * endpoint under both). */
static tl_ep_t *held_next(void *arg, const tl_iface_t *iface, uint32_t *it)
{
    tmx_context_h ctx = util_container_of((proto_t *)arg, struct tmx_context, proto);

    while (*it < ctx->n_peers + ctx->n_ipeers) {
        uint32_t i = (*it)++;
        tmx_peer_t num = i < ctx->n_peers ? i : TMX_PEER_IMPLICIT | (i - ctx->n_peers);
        core_peer_t *p = core_peer_get(ctx, num);
        tl_ep_t *ep = core_peer_ep_of(p);
        if (core_peer_has_ep(p) && ep != NULL && ep->iface == iface->num && core_peer_by_uuid(ctx, ep->uuid) == num)
            return ep;
    }
    return NULL;
}

const tl_held_t core_held = {held_find, held_next};

static void peers_close(core_peer_t *arr, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        tl_ep_t *ep = core_peer_ep_of(&arr[i]);
        if (core_peer_has_ep(&arr[i]) && ep != NULL) {
            tl_ep_iface(ep)->ops->ep_destroy(ep);
            arr[i].w &= CORE_PEER_FLAGS; /* CORE_PEER_EP stays: no address either */
        }
    }
}

void core_peers_close(tmx_context_h ctx)
{
    peers_close(ctx->peers, ctx->n_peers);
    peers_close(ctx->ipeers, ctx->n_ipeers);
}

static void peers_free(tmx_context_h ctx, core_peer_t *arr, uint32_t n)
{
    peers_close(arr, n);
    for (uint32_t i = 0; i < n; i++)
        addr_free(&arr[i]);
    free(arr);
}

void core_peers_fini(tmx_context_h ctx)
{
    peers_free(ctx, ctx->peers, ctx->n_peers);
    peers_free(ctx, ctx->ipeers, ctx->n_ipeers);
    ctx->ipeers = NULL;
    ctx->n_ipeers = ctx->cap_ipeers = 0;
    free(ctx->uuid_vals);
    ctx->uuid_vals = NULL;
    ctx->uuid_cap = 0;
    ctx->peers = NULL;
    ctx->n_peers = 0;
}
