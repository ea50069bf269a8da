#include "proto/proto.h"

#include <endian.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"
#include "util/copy.h"
#include "util/fault.h"
#include "util/hash.h"
#include "util/log.h"

/* Set in a FIN's flags when the receiver could not read the data. */
#define PROTO_FIN_FAILED (1u << 15)

_Static_assert(PROTO_CTRL_MAX >= sizeof(wire_tmh_t) + sizeof(wire_ctsh_t) &&
                   PROTO_CTRL_MAX >= sizeof(wire_tmh_t) + sizeof(wire_rkh_t) &&
                   PROTO_CTRL_MAX >= sizeof(wire_tmh_t) + sizeof(wire_rvh_t),
               "a control packet fits a proto_ctrl_t");

static atomic_uint ctrl_alloc_fails; /* proto_test_fail_alloc */

void proto_test_fail_alloc(unsigned n)
{
    atomic_store(&ctrl_alloc_fails, n);
}

/* Room to keep a control packet until the transport takes it: malloc'ed,
 * or, without memory, one of the spares (NULL when those are taken too). */
static proto_ctrl_t *ctrl_alloc(proto_t *p)
{
    proto_ctrl_t *q;

    if (!util_fault_take(&ctrl_alloc_fails) && (q = malloc(sizeof(*q))) != NULL)
        return q;
    for (unsigned i = 0; i < PROTO_CTRL_SPARES; i++) {
        if (!(p->ctrl_spares_used & (1u << i))) {
            p->ctrl_spares_used |= 1u << i;
            return &p->ctrl_spares[i];
        }
    }
    return NULL;
}

static void ctrl_free(proto_t *p, proto_ctrl_t *q)
{
    if (q >= p->ctrl_spares && q < p->ctrl_spares + PROTO_CTRL_SPARES)
        p->ctrl_spares_used &= ~(1u << (q - p->ctrl_spares));
    else
        free(q);
}

/* What a tagged packet carries once parsed and checked. */
typedef struct proto_in {
    wire_tmh_t tmh;
    wire_rvh_t rvh;
    wire_ctsh_t cts;
    wire_rkh_t rkh;
    uint64_t rtr_token;
    uint64_t data;
    uint32_t has_data;
    const unsigned char *payload;
    size_t payload_len;
} proto_in_t;

static int parse_fail(proto_t *p, tmx_peer_t src, const char *why, size_t len);

/* ------------------------------------------------------------------- init */

/* An eager message arriving in pieces (tl_stream_cb_t): the receive it
 * matched on its first piece, or the unexpected message it will be once
 * whole (it joins the matcher only then, when a receive posted meanwhile
 * may take it at once). */
struct proto_stream {
    util_dlist_t link;          /* in proto_t.streams, freed by proto_fini */
    proto_req_t *req;
    proto_msg_t *msg;
    unsigned char *dst;         /* where the next bytes go */
    size_t room;                /* bytes still wanted there (the rest is cut off) */
    size_t left;                /* bytes the message has still to bring */
    uint64_t uuid;              /* its sender (whose peer number may change meanwhile) */
};

tmx_status_t proto_init(proto_t *p, const proto_upcalls_t *up, const proto_spec_t *spec)
{
    tmx_status_t st;

    *p = (proto_t){0};
    p->up = *up;
    if (spec != NULL)
        p->spec = *spec;
    p->rndv_free = UINT32_MAX;
    util_dlist_init(&p->ctrl_pending);
    util_dlist_init(&p->parked);
    util_dlist_init(&p->offer_writes);
    util_dlist_init(&p->streams);
    if ((st = reg_keygen_init(&p->keygen)) != TMX_OK)
        return st;
    return match_init(&p->match);
}

tmx_status_t proto_iface_add(proto_t *p, tl_iface_t *iface)
{
    proto_tl_t *t;
    tmx_status_t st;

    if (p->n_tls == PROTO_MAX_TLS)
        return TMX_ERR_NO_SPACE;
    t = &p->tls[p->n_tls];
    if ((st = proto_tl_compile(t, &p->spec, iface)) != TMX_OK)
        return st;
    p->n_tls++;
    iface->above = t;
    return TMX_OK;
}

tmx_status_t proto_regcache_open(proto_t *p, size_t entries)
{
    if ((p->rc = rcache_acquire(entries, 0)) == NULL) {
        util_error("cannot open the registration cache");
        return TMX_ERR_NOMEM;
    }
    return TMX_OK;
}

/* The buffer of a rendezvous that takes a slot: its registration. One the
 * cache cannot give leaves the buffer unregistered (the access checks by
 * key and bounds stand). */
static void reg_take(proto_t *p, proto_req_t *req, size_t len)
{
    req->reg = NULL;
    if (p->rc != NULL && len != 0)
        rcache_get(p->rc, req->buf, len, &req->reg);
}

/* Memory lent under a registration the cache has since dropped (unmapped,
 * its pages replaced) is not the buffer that was lent. */
static tmx_status_t reg_live(const proto_req_t *req)
{
    if (req->reg == NULL || rcache_reg_valid(req->reg))
        return TMX_OK;
    util_error("a buffer lent for a rendezvous was unmapped or its pages replaced before the "
               "rendezvous ended: access refused");
    return TMX_ERR_INVALID;
}

static void regcache_close(proto_t *p)
{
    rcache_stats_t st;

    if (p->rc == NULL)
        return;
    for (uint32_t i = 0; i < p->n_rndv_slots; i++) {
        proto_req_t *req = (uintptr_t)p->rndv[i] & 1 ? NULL : p->rndv[i]; /* 1: RNDV_FREE_BIT */
        if (req != NULL && req->reg != NULL) {
            rcache_put(p->rc, req->reg);
            req->reg = NULL;
        }
    }
    rcache_stats(p->rc, &st);
    util_info("registration cache: %llu hits, %llu misses, %llu uncached, %llu evicted, %llu "
              "invalidated (memory unmapped), %llu entries of %llu bytes live",
              (unsigned long long)st.hits, (unsigned long long)st.misses,
              (unsigned long long)st.uncached, (unsigned long long)st.evictions,
              (unsigned long long)st.invalidations, (unsigned long long)st.entries,
              (unsigned long long)st.bytes);
    rcache_release(p->rc);
    p->rc = NULL;
}

void proto_fini(proto_t *p)
{
    util_dlist_t *pos, *tmp;

    regcache_close(p);

    util_dlist_foreach_safe(pos, tmp, &p->ctrl_pending) {
        ctrl_free(p, util_container_of(pos, proto_ctrl_t, link));
    }
    util_dlist_init(&p->ctrl_pending);
    util_dlist_init(&p->parked); /* their receives are core's */
    util_dlist_init(&p->offer_writes); /* and these sends */
    /* packets a transport was handing up when it closed: their receives
     * and messages are core's */
    util_dlist_foreach_safe(pos, tmp, &p->streams) {
        free(util_container_of(pos, proto_stream_t, link));
    }
    util_dlist_init(&p->streams);
    free(p->spare_stream);
    p->spare_stream = NULL;
    if (p->off != NULL) {
        off_stats_t st;
        off_engine_stats(p->off, &st);
        util_debug("offload engine: matched %llu messages itself, passed %llu to software, %llu "
                   "receives added while it was ahead",
                   (unsigned long long)st.matched, (unsigned long long)st.unexpected,
                   (unsigned long long)st.added_unsynced);
        util_debug("receive offers: %llu made, %llu written into by their senders",
                   (unsigned long long)p->rtr_sent, (unsigned long long)p->rtr_written);
        off_engine_close(p->off);
        p->off = NULL;
    }
    free(p->pcnt);
    p->pcnt = NULL;
    p->pcnt_last = NULL;
    p->pcnt_cap = p->pcnt_used = 0;
    match_fini(&p->match);
    free(p->rndv);
    p->rndv = NULL;
    p->n_rndv_slots = p->n_rndv_used = 0;
}

/* ------------------------------------------------------ rendezvous slots */

#define RNDV_FREE_BIT ((uintptr_t)1)
#define RNDV_FIRST_SLOTS 64

/* Slots from..n-1 become free, chained in order ahead of the free ones. */
static void rndv_chain(proto_t *p, uint32_t from, uint32_t n)
{
    for (uint32_t i = from; i < n; i++) {
        uint32_t next = i + 1 < n ? i + 1 : p->rndv_free;
        p->rndv[i] = (proto_req_t *)(((uintptr_t)next << 1) | RNDV_FREE_BIT);
    }
    p->rndv_free = from;
    p->n_rndv_slots = n;
}

static tmx_status_t rndv_grow(proto_t *p)
{
    uint32_t n = p->n_rndv_slots ? p->n_rndv_slots * 2 : RNDV_FIRST_SLOTS;
    proto_req_t **slots;

    if (n > REG_KEY_SLOTS) /* a key names its slot in REG_KEY_SLOT_BITS bits */
        return TMX_ERR_AGAIN;
    slots = realloc(p->rndv, n * sizeof(*slots));
    if (slots == NULL)
        return TMX_ERR_NOMEM;
    p->rndv = slots;
    rndv_chain(p, p->n_rndv_slots, n);
    return TMX_OK;
}

/* The last rendezvous send of a burst is over: the array goes back to its
 * first size (a key naming a slot beyond it finds none, as a key naming a
 * free slot does). */
static void rndv_shrink(proto_t *p)
{
    proto_req_t **slots = realloc(p->rndv, RNDV_FIRST_SLOTS * sizeof(*slots));

    if (slots == NULL)
        return; /* the larger one stays, correct */
    p->rndv = slots;
    p->rndv_free = UINT32_MAX;
    rndv_chain(p, 0, RNDV_FIRST_SLOTS);
}

static tmx_status_t rndv_slot_get(proto_t *p, proto_req_t *req)
{
    uint32_t id;
    tmx_status_t st;

    if (p->rndv_free == UINT32_MAX && (st = rndv_grow(p)) != TMX_OK) {
        util_error("cannot track more than %u rendezvous sends at once: %s", p->n_rndv_slots,
                   tmx_strerror(st));
        return st;
    }
    id = p->rndv_free;
    p->rndv_free = (uint32_t)((uintptr_t)p->rndv[id] >> 1);
    p->rndv[id] = req;
    p->n_rndv_used++;
    req->id = id;
    req->fin_wait = 1;
    /* The slot in the key lets a remote read be checked in O(1). */
    req->rkey = reg_key_make(&p->keygen, id);
    return TMX_OK;
}

static proto_req_t *rndv_lookup(const proto_t *p, uint32_t id)
{
    if (id >= p->n_rndv_slots || ((uintptr_t)p->rndv[id] & RNDV_FREE_BIT))
        return NULL;
    return p->rndv[id];
}

static void rndv_slot_put(proto_t *p, proto_req_t *req)
{
    if (req->reg != NULL) {
        rcache_put(p->rc, req->reg);
        req->reg = NULL;
    }
    p->rndv[req->id] = (proto_req_t *)(((uintptr_t)p->rndv_free << 1) | RNDV_FREE_BIT);
    p->rndv_free = req->id;
    req->fin_wait = 0;
    if (--p->n_rndv_used == 0 && p->n_rndv_slots > RNDV_FIRST_SLOTS)
        rndv_shrink(p);
}

/* An rkey names the rendezvous send's slot. A receive's slot (a buffer
 * lent for a write) is not read. */
tmx_status_t proto_mem_check_cb(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    proto_t *p = arg;
    proto_req_t *req = rndv_lookup(p, reg_key_slot(rkey));
    reg_region_t r;
    tmx_status_t st;

    if (req == NULL || req->comp.op != TMX_OP_TSEND)
        return reg_access_check(NULL, addr, len, rkey);
    r = (reg_region_t){(uintptr_t)req->buf, req->len, req->rkey};
    if ((st = reg_access_check(&r, addr, len, rkey)) != TMX_OK)
        return st;
    return reg_live(req);
}

/* ------------------------------------------- tagged packets per process */

static tmx_status_t pcnt_grow(proto_t *p)
{
    uint32_t cap = p->pcnt_cap != 0 ? p->pcnt_cap * 2 : 16;
    proto_pcnt_t *n;

    if (cap < p->pcnt_cap || (n = calloc(cap, sizeof(*n))) == NULL)
        return TMX_ERR_NOMEM;
    for (uint32_t j = 0; j < p->pcnt_cap; j++) {
        uint32_t i;
        if (p->pcnt[j].uuid == 0)
            continue;
        for (i = (uint32_t)util_hash64(p->pcnt[j].uuid) & (cap - 1); n[i].uuid != 0; i = (i + 1) & (cap - 1))
            ;
        n[i] = p->pcnt[j];
    }
    free(p->pcnt);
    p->pcnt = n;
    p->pcnt_cap = cap;
    p->pcnt_last = NULL;
    return TMX_OK;
}

/* The counts of the process uuid, made on its first packet; NULL when
 * there is no memory for them, and from then on no offer is made or
 * taken, since an offer relies on every count. Kept with the engine on
 * only, for peers (their number is bounded by core). */
static proto_pcnt_t *pcnt_get(proto_t *p, uint64_t uuid)
{
    uint32_t i;

    if (p->pcnt_broken || uuid == 0)
        return NULL;
    if (p->pcnt_last != NULL && p->pcnt_last->uuid == uuid) /* a peer's messages come in runs */
        return p->pcnt_last;
    if (p->pcnt_cap != 0) {
        for (i = (uint32_t)util_hash64(uuid) & (p->pcnt_cap - 1); p->pcnt[i].uuid != 0;
             i = (i + 1) & (p->pcnt_cap - 1)) {
            if (p->pcnt[i].uuid == uuid)
                return p->pcnt_last = &p->pcnt[i];
        }
    }
    if ((p->pcnt_used + 1) * 2 > p->pcnt_cap && pcnt_grow(p) != TMX_OK) {
        util_error("out of memory counting packets per peer: no receive is offered to its sender from now on");
        p->pcnt_broken = 1;
        return NULL;
    }
    for (i = (uint32_t)util_hash64(uuid) & (p->pcnt_cap - 1); p->pcnt[i].uuid != 0; i = (i + 1) & (p->pcnt_cap - 1))
        ;
    p->pcnt[i] = (proto_pcnt_t){.uuid = uuid};
    p->pcnt_used++;
    return p->pcnt_last = &p->pcnt[i];
}

/* A tagged packet went to ep's process (engine on): counted, and a
 * rendezvous send keeps its number. */
static void tx_count(proto_t *p, const tl_ep_t *ep, proto_req_t *req)
{
    proto_pcnt_t *c = pcnt_get(p, ep->uuid);

    if (c == NULL)
        return;
    c->tx++;
    if (req != NULL)
        req->tx_seq = c->tx;
}

/* A tagged packet from uuid was taken (matched, or kept unexpected). */
static void rx_count(proto_t *p, uint64_t uuid, const proto_in_t *in)
{
    proto_pcnt_t *c = pcnt_get(p, uuid);

    if (c == NULL)
        return;
    c->rx++;
    if (in->tmh.opcode == WIRE_OP_RNDV && (in->tmh.flags & WIRE_FLAG_WRITER))
        c->writer = 1;
}

/* The offer of uuid that a message with tag matches (under the offered
 * receive's mask), or -1. */
static int offer_find(const proto_t *p, uint64_t uuid, uint64_t tag)
{
    for (int i = 0; i < PROTO_OFFERS; i++) {
        if (p->offers[i].uuid == uuid && ((p->offers[i].tag ^ tag) & ~p->offers[i].ignore) == 0)
            return i;
    }
    return -1;
}

/* Takes our offered receive's one copy for ourselves: 0 if its sender
 * took it first (it writes, and WDONE follows). */
static int offer_take_own(const proto_req_t *req)
{
    return req->rtr_iface->ops->offer_take_own(req->rtr_iface, req->rtr_token);
}

static void offer_end(proto_t *p, proto_req_t *req);

/* Our receive's offer is over: answered, spent, or ended with it; its
 * claim word is closed, so that no later take succeeds. */
static void offer_clear(proto_t *p, proto_req_t *req)
{
    proto_pcnt_t *c = pcnt_get(p, req->wr_uuid);

    /* taken first, so that no take of the sender's wins between (ours or
     * its won already, whichever path ends the offer) */
    (void)offer_take_own(req);
    req->rtr_iface->ops->offer_close(req->rtr_iface, req->rtr_token);
    if (c != NULL && c->offers_out != 0)
        c->offers_out--;
    req->rtr = req->rtr_rts = 0;
}

static void offer_drop(proto_t *p, int i)
{
    p->offers[i].uuid = 0;
    p->n_offers--;
}

void proto_peer_gone(proto_t *p, uint64_t uuid)
{
    for (int i = 0; i < PROTO_OFFERS && p->n_offers != 0; i++) {
        if (p->offers[i].uuid == uuid)
            offer_drop(p, i);
    }
}

static void offer_use(proto_t *p, proto_req_t *req, tmx_peer_t peer, int i);

/* We take the one copy of peer's offer token, to write it: 0 if the
 * receiver took it first (it reads), over a transport without claim
 * words, or on the offload engine's thread (our application computes:
 * the copy would take its core, and the receiver takes it instead when
 * the request reaches it). */
static int offer_taken(proto_t *p, tmx_peer_t peer, uint64_t token)
{
    tl_ep_t *ep;
    proto_peer_t *pp;

    if (p->up.peer_ep(p->up.arg, peer, &ep, &pp) != TMX_OK || tl_ep_iface(ep)->ops->offer_take == NULL ||
        tl_on_rare_thread(tl_ep_iface(ep)))
        return 0;
    return tl_ep_iface(ep)->ops->offer_take(ep, token);
}

/* Whether the offer token of peer's is still open (not taken, closed or
 * reopened): a kept one that is not will never be written into. */
static int offer_live(proto_t *p, tmx_peer_t peer, uint64_t token)
{
    tl_ep_t *ep;
    proto_peer_t *pp;

    return p->up.peer_ep(p->up.arg, peer, &ep, &pp) == TMX_OK && tl_ep_iface(ep)->ops->offer_live != NULL &&
           tl_ep_iface(ep)->ops->offer_live(ep, token);
}

static void offer_no(proto_t *p, tmx_peer_t peer, uint64_t uuid, uint64_t tag, uint64_t rkey);

/* ------------------------------------------------------------------- send */

/* A receive that failed (not truncated) delivered nothing the caller may
 * use, whatever part of it landed: its length says 0 (tmx.h), msg_length
 * keeps the message's. */
static void recv_failed(proto_req_t *req)
{
    if (req->comp.op == TMX_OP_TRECV)
        req->comp.length = 0;
}

static void req_complete(proto_t *p, proto_req_t *req, tmx_status_t st)
{
    if (st < 0 && st != TMX_ERR_TRUNCATED)
        recv_failed(req);
    p->up.complete(p->up.arg, req, st);
}

static tmx_status_t send_eager(tl_ep_t *ep, const void *buf, size_t len, uint64_t tag,
                               int has_data, uint64_t data_host)
{
    wire_tmh_t tmh;
    uint64_t data = htole64(data_host);
    struct iovec iov[3];
    int n = 0;

    /* Pieces, not one packet assembled here: packing saved the
     * transport's walk over them (about 40 instructions) but measured
     * slower (tmx-perf latency at 8 B, interleaved: about 3 %), likely as
     * the transport's wide loads of the packet waited for the narrow
     * stores that had just written it. */
    wire_tmh_pack(&tmh, WIRE_OP_EAGER, has_data ? WIRE_FLAG_DATA : 0, 0, tag);
    iov[n++] = (struct iovec){&tmh, sizeof(tmh)};
    if (has_data)
        iov[n++] = (struct iovec){&data, sizeof(data)};
    iov[n++] = (struct iovec){(void *)buf, len};
    return tl_ep_iface(ep)->ops->send(ep, iov, n);
}

/* The RTS flag of a rendezvous send of len bytes through ep: WRITER where
 * this process's engine runs, so that it answers a CTS while the
 * application computes, and its writes cost the receiver nothing. */
static uint16_t writer_flag(const proto_t *p, const tl_ep_t *ep, size_t len)
{
    return p->off != NULL && len >= PROTO_OFF_BIG && tl_writes_free(tl_ep_iface(ep)) ? WIRE_FLAG_WRITER : 0;
}

static tmx_status_t send_rndv(proto_t *p, tl_ep_t *ep, const proto_peer_t *pp, proto_req_t *req,
                              uint64_t tag)
{
    wire_tmh_t tmh;
    wire_rvh_t rvh;
    uint64_t data = htole64(req->comp.data);
    struct iovec iov[3];
    int n = 0;
    tmx_status_t st = rndv_slot_get(p, req);

    if (st != TMX_OK)
        return st;
    req->dest_uuid = ep->uuid;
    req->wr_started = 0;
    reg_take(p, req, req->len);
    wire_tmh_pack(&tmh, WIRE_OP_RNDV,
                  (uint16_t)((req->comp.has_data ? WIRE_FLAG_DATA : 0) | writer_flag(p, ep, req->len)), req->id,
                  tag);
    wire_rvh_pack(&rvh, (uintptr_t)req->buf, req->rkey, req->len);
    iov[n++] = (struct iovec){&tmh, sizeof(tmh)};
    iov[n++] = (struct iovec){&rvh, sizeof(rvh)};
    if (req->comp.has_data)
        iov[n++] = (struct iovec){&data, sizeof(data)};
    st = tl_ep_iface(ep)->ops->send(ep, iov, n);
    if (st != TMX_OK)
        rndv_slot_put(p, req);
    return st;
}

/* HELLO: our address, once per peer before any other packet (the
 * transports keep order), so that a process that never added us can
 * receive from us and answer. */
static tmx_status_t hello_send(proto_t *p, proto_peer_t *pp, tl_ep_t *ep)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    wire_tmh_t tmh;
    size_t len;
    struct iovec iov[2] = {{&tmh, sizeof(tmh)}, {addr, 0}};
    tmx_status_t st = p->up.address(p->up.arg, addr, sizeof(addr), &len);

    if (st != TMX_OK)
        return st;
    wire_tmh_pack(&tmh, WIRE_OP_HELLO, 0, 0, 0);
    iov[1].iov_len = len;
    if ((st = tl_ep_iface(ep)->ops->send(ep, iov, 2)) == TMX_OK)
        proto_peer_hello_set(pp);
    return st;
}

/* The endpoint to a peer, ready for packets: HELLO went first. */
static tmx_status_t proto_ep(proto_t *p, tmx_peer_t peer, tl_ep_t **ep, proto_peer_t **pp)
{
    tmx_status_t st = p->up.peer_ep(p->up.arg, peer, ep, pp);

    if (st != TMX_OK || proto_peer_hello(*pp))
        return st;
    return hello_send(p, *pp, *ep);
}

/* A tagged packet went to ep's process (engine on): counted; and the
 * first with the tag of an offer that process made us spends it, written
 * into the offered buffer if it is a rendezvous (req), else not. */
static void sent_tagged(proto_t *p, const tl_ep_t *ep, proto_req_t *req, tmx_peer_t peer, uint64_t tag)
{
    int i;

    tx_count(p, ep, req);
    if (p->n_offers == 0 || (i = offer_find(p, ep->uuid, tag)) < 0)
        return;
    if (req != NULL)
        offer_use(p, req, peer, i);
    offer_drop(p, i);
}

tmx_status_t proto_send(proto_t *p, proto_req_t *req, tmx_peer_t peer, uint64_t tag)
{
    tl_ep_t *ep;
    proto_peer_t *pp;
    tmx_status_t st = p->up.peer_ep(p->up.arg, peer, &ep, &pp);

    return st != TMX_OK ? st : proto_send_ep(p, req, peer, ep, pp, tag);
}

tmx_status_t proto_send_ep(proto_t *p, proto_req_t *req, tmx_peer_t peer, tl_ep_t *ep, proto_peer_t *pp,
                           uint64_t tag)
{
    tmx_status_t st;

    if (!proto_peer_hello(pp) && (st = hello_send(p, pp, ep)) != TMX_OK)
        return st;
    /* To a peer past its soft bound, a send that will say when it is done
     * goes as rendezvous; one that says nothing (no completion entry: its
     * caller reuses the buffer when the call returns, as eager allows)
     * stays eager */
    if (req->len < ((const proto_tl_t *)tl_ep_iface(ep)->above)->eager_end &&
        !(req->flags & TMX_OP_FLAG_SYNC) &&
        (req->len <= PROTO_PRESSED_EAGER_MAX || (req->flags & (TMX_OP_FLAG_NO_CQ | TMX_OP_FLAG_CQ_ERRORS_ONLY)) ||
         tl_ep_iface(ep)->ops->peer_pressed == NULL || !tl_ep_iface(ep)->ops->peer_pressed(ep))) {
        util_debug("send %zu bytes to peer %u: eager", req->len, peer);
        st = send_eager(ep, req->buf, req->len, tag, req->comp.has_data, req->comp.data);
        if (st == TMX_OK) {
            if (__builtin_expect(p->offer_on, 0))
                sent_tagged(p, ep, NULL, peer, tag);
            req_complete(p, req, TMX_OK);
        }
        return st;
    }
    util_debug("send %zu bytes to peer %u: rendezvous", req->len, peer);
    st = send_rndv(p, ep, pp, req, tag);
    if (st == TMX_OK && p->offer_on)
        sent_tagged(p, ep, req, peer, tag);
    return st;
}

/* An eager send without a request (TMX_OP_FLAG_INJECT): every transport's
 * eager limit is at least TMX_INJECT_MAX. */
tmx_status_t proto_inject(proto_t *p, tl_ep_t *ep, proto_peer_t *pp, const void *buf, size_t len,
                          uint64_t tag, int has_data, uint64_t data)
{
    tmx_status_t st;

    if (!proto_peer_hello(pp) && (st = hello_send(p, pp, ep)) != TMX_OK)
        return st;
    st = send_eager(ep, buf, len, tag, has_data, data);
    if (st == TMX_OK && __builtin_expect(p->offer_on, 0))
        sent_tagged(p, ep, NULL, TMX_PEER_NONE, tag);
    return st;
}

/* -------------------------------------------------------------------- FIN */

static tmx_status_t ctrl_send_now(proto_t *p, tmx_peer_t peer, const void *pkt, size_t len)
{
    struct iovec iov = {(void *)pkt, len};
    tl_ep_t *ep;
    proto_peer_t *pp;
    tmx_status_t st = proto_ep(p, peer, &ep, &pp);

    if (st != TMX_OK)
        return st;
    return tl_ep_iface(ep)->ops->send(ep, &iov, 1);
}

static const char *ctrl_name(const proto_ctrl_t *c)
{
    switch (c->pkt[0]) {
    case WIRE_OP_FIN: return "FIN";
    case WIRE_OP_CTS: return "CTS";
    case WIRE_OP_RTR: return "RTR";
    case WIRE_OP_RTR_NO: return "RTR_NO";
    default: return "WDONE";
    }
}

/* Sends a control packet (TMH, then rest), queueing it if the transport
 * is full: a peer must never wait forever for its FIN, CTS or WDONE. (No
 * order among them matters: each names its own request.) Returns the
 * queued copy, NULL if it went (or was lost, logged). */
static proto_ctrl_t *ctrl_send(proto_t *p, tmx_peer_t peer, const wire_tmh_t *tmh, const void *rest,
                               size_t rest_len)
{
    proto_ctrl_t c;
    proto_ctrl_t *q;
    tmx_status_t st;

    c.len = sizeof(*tmh) + rest_len;
    memcpy(c.pkt, tmh, sizeof(*tmh));
    memcpy(c.pkt + sizeof(*tmh), rest, rest_len);
    st = ctrl_send_now(p, peer, c.pkt, c.len);
    if (st != TMX_ERR_AGAIN) {
        if (st != TMX_OK)
            util_error("%s to peer %u lost: %s", ctrl_name(&c), peer, tmx_strerror(st));
        return NULL;
    }
    if ((q = ctrl_alloc(p)) == NULL) {
        util_error("%s to peer %u lost: out of memory", ctrl_name(&c), peer);
        return NULL;
    }
    *q = c;
    q->peer = peer;
    q->owed_uuid = 0;
    util_dlist_push_tail(&p->ctrl_pending, &q->link);
    return q;
}

/* Sends FIN for a rendezvous request: the sender may release its buffer. */
static void fin_send(proto_t *p, tmx_peer_t peer, uint32_t app_ctx, uint64_t tag, uint64_t va,
                     uint64_t rkey, uint64_t len, int failed)
{
    wire_tmh_t tmh;
    wire_rvh_t rvh;

    wire_tmh_pack(&tmh, WIRE_OP_FIN, failed ? PROTO_FIN_FAILED : 0, app_ctx, tag);
    wire_rvh_pack(&rvh, va, rkey, len);
    ctrl_send(p, peer, &tmh, &rvh, sizeof(rvh));
}

static void rndv_start(proto_t *p, proto_req_t *req, tmx_peer_t src, uint32_t app_ctx,
                       uint64_t va, uint64_t rkey, uint64_t len, int writer);

static void write_start(proto_t *p, proto_req_t *req);

/* Parked receives first (proto_msg_deliver), then writes into offered
 * receives (offer_use), then control packets that waited for room. */
int proto_progress(proto_t *p)
{
    util_dlist_t *pos, *tmp;
    int events = 0;

    util_dlist_foreach_safe(pos, tmp, &p->parked) {
        proto_req_t *req = util_container_of(pos, proto_req_t, off_link);
        util_dlist_unlink(&req->off_link);
        req->parked = 0;
        rndv_start(p, req, req->rndv_src, req->rndv_app_ctx, req->rndv_va, req->rndv_rkey, req->rndv_len, 1);
        events++;
    }
    util_dlist_foreach_safe(pos, tmp, &p->offer_writes) {
        proto_req_t *req = util_container_of(pos, proto_req_t, off_link);
        util_dlist_unlink(&req->off_link);
        req->parked = 0;
        if (offer_taken(p, req->rndv_src, req->rtr_token)) { /* else the receiver reads, then FIN */
            req->wr_started = 1;
            write_start(p, req);
        }
        events++;
    }
    util_dlist_foreach_safe(pos, tmp, &p->ctrl_pending) {
        proto_ctrl_t *q = util_container_of(pos, proto_ctrl_t, link);
        tmx_status_t st = ctrl_send_now(p, q->peer, q->pkt, q->len);
        if (st == TMX_ERR_AGAIN)
            continue; /* that peer is full; others may not be */
        if (st != TMX_OK)
            util_error("%s to peer %u lost: %s", ctrl_name(q), q->peer, tmx_strerror(st));
        util_dlist_unlink(&q->link);
        if (q->owed_uuid != 0) { /* an answer to an offer (offer_no) */
            proto_pcnt_t *c = pcnt_get(p, q->owed_uuid);
            if (c != NULL && c->owed != 0)
                c->owed--;
        }
        ctrl_free(p, q);
        events++;
    }
    return events;
}

/* ---------------------------------------------------------------- receive */

static void recv_fill(proto_req_t *req, tmx_peer_t src, uint64_t tag, size_t msg_len,
                      uint32_t has_data, uint64_t data)
{
    req->comp.source = src;
    req->comp.tag = tag;
    req->comp.msg_length = msg_len;
    req->comp.length = msg_len < req->len ? msg_len : req->len;
    req->comp.has_data = has_data;
    req->comp.data = data;
}

static tmx_status_t recv_status(const proto_req_t *req)
{
    return req->comp.msg_length > req->len ? TMX_ERR_TRUNCATED : TMX_OK;
}

static void eager_deliver(proto_t *p, proto_req_t *req, const void *payload)
{
    util_copy(req->buf, payload, req->comp.length);
    req_complete(p, req, recv_status(req));
}

static void rndv_finish(proto_t *p, proto_req_t *req, tmx_status_t st)
{
    fin_send(p, req->rndv_src, req->rndv_app_ctx, req->comp.tag, req->rndv_va, req->rndv_rkey,
             req->rndv_len, st != TMX_OK);
    req_complete(p, req, st == TMX_OK ? recv_status(req) : st);
}

static void rndv_get_done(tl_get_op_t *op, tmx_status_t st)
{
    proto_req_t *req = util_container_of(op, proto_req_t, get);

    rndv_finish(req->owner, req, st);
}

/* The table's mechanism for a read of len bytes, or, where the transport
 * stopped offering it (shm when the kernel refuses CMA), its emulated
 * read. */
static unsigned read_kind(const tl_iface_t *iface, uint64_t len)
{
    unsigned kind = proto_tl_kind(iface->above, len);

    if (kind == PROTO_WRITE) /* the sender could not write: the first read */
        kind = TL_GET_DIRECT;
    if (iface->get_kinds & kind)
        return kind;
    if (iface->get_kinds & TL_GET_COPY)
        return TL_GET_COPY;
    return iface->get_kinds & -iface->get_kinds;
}

/* Reads the sender's buffer (req's rndv_ fields) into the receive's,
 * then FIN. The completion follows the read (seed 004). */
static void rndv_read(proto_t *p, proto_req_t *req)
{
    tl_ep_t *ep;
    proto_peer_t *pp;
    tmx_status_t st = p->up.peer_ep(p->up.arg, req->rndv_src, &ep, &pp);

    if (st == TMX_OK)
        st = tl_ep_iface(ep)->ops->get(ep, req->buf, req->comp.length, req->rndv_va, req->rndv_rkey,
                                 read_kind(tl_ep_iface(ep), req->comp.length), &req->get);
    if (st == TMX_INPROGRESS)
        return;
    if (st != TMX_OK)
        util_error("rendezvous read of %zu bytes from peer %u failed: %s", req->comp.length,
                   req->rndv_src, tmx_strerror(st));
    rndv_finish(p, req, st);
}

/* A receive no longer waits for a write (WDONE came, or it was aborted). */
static void wr_wait_end(proto_t *p, proto_req_t *req)
{
    rndv_slot_put(p, req);
    req->wr_wait = 0;
    if (--p->n_wr_wait == 0)
        p->wr_admitted = 0;
}

/* Rendezvous by write (seed 003), the receiver's side: lends the receive's
 * buffer under a key of its own (a slot of the rendezvous table, as a
 * send's) and asks the sender to write into it (CTS). The receive then
 * waits for WDONE (wdone_arrive); TMX_OK, or an error and nothing was
 * sent (the caller reads instead). */
static tmx_status_t write_ask(proto_t *p, proto_req_t *req, const tl_ep_t *ep)
{
    wire_tmh_t tmh;
    wire_ctsh_t cts;
    tmx_status_t st = rndv_slot_get(p, req);

    if (st != TMX_OK)
        return st;
    req->fin_wait = 0;
    req->wr_wait = 1;
    p->n_wr_wait++;
    reg_take(p, req, req->comp.length);
    req->wr_uuid = ep->uuid;
    req->wr_placed = 0;
    wire_tmh_pack(&tmh, WIRE_OP_CTS, 0, req->rndv_app_ctx, req->comp.tag);
    wire_ctsh_pack(&cts, (uintptr_t)req->buf, req->rkey, req->comp.length, req->rndv_rkey);
    ctrl_send(p, req->rndv_src, &tmh, &cts, sizeof(cts));
    return TMX_OK;
}

/* Whether a matched rendezvous of len bytes is to be written by its
 * sender rather than read: 1 where the protocol table says write; 2 where
 * the offload engine's thread starts it (the application is away,
 * computing), the sender's engine runs (writer: it answers while its own
 * application computes), a peer's write costs us no work
 * (tl_writes_free) and TMX_PROTO did not set the table: a read would take
 * a core from the computation, the sender's write takes none of ours.
 * At the bound of unexpected memory a WDONE could wait in the sender's
 * queue behind messages we do not take: never then. */
static int write_wanted(const proto_t *p, const tl_ep_t *ep, uint64_t len, int writer)
{
    const tl_iface_t *iface = tl_ep_iface(ep);
    const proto_tl_t *t = iface->above;

    if (len == 0 || p->unexp_full)
        return 0;
    if (proto_tl_kind(t, len) == PROTO_WRITE)
        return 1;
    return writer && tl_writes_free(iface) && !t->set && tl_on_rare_thread(iface) ? 2 : 0;
}

/* The receive has matched a rendezvous request: per the protocol table,
 * read straight into the user buffer, or have the sender write into it
 * (write_wanted). */
static void rndv_start(proto_t *p, proto_req_t *req, tmx_peer_t src, uint32_t app_ctx,
                       uint64_t va, uint64_t rkey, uint64_t len, int writer)
{
    tl_ep_t *ep;
    proto_peer_t *pp;
    int w;

    req->rndv_src = src;
    req->rndv_app_ctx = app_ctx;
    req->rndv_va = va;
    req->rndv_rkey = rkey;
    req->rndv_len = len;
    req->owner = p;
    req->get.done = rndv_get_done;
    req->off_wr = 0; /* software's, even with the engine on (off_post may never have run) */
    if (req->rtr) { /* offered: we read if we take the copy first */
        if (!offer_take_own(req)) { /* the sender did: it writes, WDONE follows */
            req->rtr_rts = 1;
            return;
        }
        offer_end(p, req);
    }
    if (p->up.peer_ep(p->up.arg, src, &ep, &pp) == TMX_OK &&
        (w = write_wanted(p, ep, req->comp.length, writer)) != 0 && write_ask(p, req, ep) == TMX_OK) {
        p->wr_engine += w == 2;
        return;
    }
    rndv_read(p, req);
}

/* ------------------------------------------------ rendezvous by write */

/* The sender's write ended (st): WDONE tells the receiver, whose buffer
 * then holds the data, or that it must read instead (WIRE_WDONE_NOWRITE).
 * Either way the receiver answers FIN, and the send completes on it only:
 * a WDONE still queued here (the transport full) when the application
 * destroys its context must not leave a send reported done whose
 * receive never completes. */
static void write_end(proto_t *p, proto_req_t *req, tmx_status_t st)
{
    wire_tmh_t tmh;
    wire_rvh_t rvh;
    uint16_t flags = st != TMX_OK ? WIRE_WDONE_NOWRITE : WIRE_WDONE_ACK;

    if (st == TMX_ERR_PEER_FAILED)
        return; /* the send fails with its peer (core's failure path) */
    if (st != TMX_OK)
        util_warn("rendezvous write of %llu bytes to peer %u failed (%s): the receiver reads instead",
                  (unsigned long long)req->rndv_len, req->rndv_src, tmx_strerror(st));
    wire_tmh_pack(&tmh, WIRE_OP_WDONE, flags, reg_key_slot(req->rndv_rkey), req->id);
    wire_rvh_pack(&rvh, req->rndv_va, req->rndv_rkey, req->rndv_len);
    ctrl_send(p, req->rndv_src, &tmh, &rvh, sizeof(rvh));
}

/* A CTS must name a rendezvous send of ours to its sender, with our key,
 * once; the sender then writes (the send's rndv_ fields keep where). */
static void cts_arrive(proto_t *p, uint64_t src_uuid, tmx_peer_t src, const proto_in_t *in,
                       size_t len)
{
    proto_req_t *req = rndv_lookup(p, in->tmh.app_ctx);

    if (req == NULL || req->comp.op != TMX_OP_TSEND || req->rkey != in->cts.skey ||
        req->dest_uuid != src_uuid || req->wr_started || in->cts.len == 0 || in->cts.len > req->len) {
        parse_fail(p, src, "CTS names no rendezvous send of ours", len);
        return;
    }
    if (req->parked) { /* queued to write into an offer whose copy the receiver took */
        util_dlist_unlink(&req->off_link);
        req->parked = 0;
    }
    req->wr_started = 1;
    req->rndv_src = src;
    req->rndv_va = in->cts.va;
    req->rndv_rkey = in->cts.rkey;
    req->rndv_len = in->cts.len;
    write_start(p, req);
}

/* Writes the send's rndv_len bytes where its rndv_ fields say; WDONE
 * follows (write_end). */
static void write_start(proto_t *p, proto_req_t *req)
{
    tl_ep_t *ep;
    proto_peer_t *pp;
    unsigned kind;
    tmx_status_t st = p->up.peer_ep(p->up.arg, req->rndv_src, &ep, &pp);

    if (st == TMX_OK) {
        kind = tl_ep_iface(ep)->put_kinds & -tl_ep_iface(ep)->put_kinds;
        st = kind == 0 ? TMX_ERR_UNSUPPORTED
                       : tl_ep_iface(ep)->ops->put(ep, req->buf, req->rndv_len, req->rndv_va, req->rndv_rkey,
                                                   req->rkey, kind);
    }
    if (st != TMX_INPROGRESS)
        write_end(p, req, st);
}

/* A write accepted with TMX_INPROGRESS has every byte on its way (or
 * failed): lkey names the send, which may have ended meanwhile. */
void proto_put_done_cb(void *arg, uint64_t lkey, tmx_status_t status)
{
    proto_t *p = arg;
    proto_req_t *req = rndv_lookup(p, reg_key_slot(lkey));

    if (req == NULL || req->comp.op != TMX_OP_TSEND || req->rkey != lkey || !req->wr_started) {
        util_debug("the end of a write whose send has ended: ignored");
        return;
    }
    write_end(p, req, status);
}

/* Written bytes that came as packets: only into a receive that lent its
 * buffer to that very sender, under its key, inside the buffer. */
tmx_status_t proto_put_data_cb(void *arg, uint64_t src_uuid, uint64_t addr, uint64_t rkey,
                               const void *data, size_t len)
{
    proto_t *p = arg;
    proto_req_t *req = rndv_lookup(p, reg_key_slot(rkey));
    reg_region_t r;
    tmx_status_t st;

    if (req == NULL || req->comp.op != TMX_OP_TRECV || !req->wr_wait || req->wr_uuid != src_uuid)
        return reg_access_check(NULL, addr, len, rkey);
    r = (reg_region_t){(uintptr_t)req->buf, req->comp.length, req->rkey};
    if ((st = reg_access_check(&r, addr, len, rkey)) != TMX_OK || (st = reg_live(req)) != TMX_OK)
        return st;
    /* the parts come in order (the transports keep it), so counting
     * them is knowing that every byte landed */
    if (addr != (uintptr_t)req->buf + req->wr_placed) {
        util_warn("written data from peer %u out of order: %llu bytes at offset %llu, %llu expected",
                  req->rndv_src, (unsigned long long)len, (unsigned long long)(addr - (uintptr_t)req->buf),
                  (unsigned long long)req->wr_placed);
        return TMX_ERR_INVALID;
    }
    memcpy((void *)(uintptr_t)addr, data, len);
    req->wr_placed += len;
    return TMX_OK;
}

static void off_get(proto_t *p, proto_req_t *req);
static void off_drain(proto_t *p);

/* WDONE must name a receive of ours that lent its buffer to this sender,
 * with the buffer's address, key and length. */
static void wdone_arrive(proto_t *p, uint64_t src_uuid, tmx_peer_t src, const proto_in_t *in,
                         size_t len)
{
    proto_req_t *req = rndv_lookup(p, in->tmh.app_ctx);
    tmx_status_t st = TMX_OK;
    tl_ep_t *ep;
    proto_peer_t *pp;

    if (req == NULL || req->comp.op != TMX_OP_TRECV || !req->wr_wait || req->rkey != in->rvh.rkey ||
        (uintptr_t)req->buf != in->rvh.va || req->wr_uuid != src_uuid || (req->rtr && !req->rtr_rts) ||
        in->rvh.len != req->comp.length) {
        parse_fail(p, src, "WDONE names no receive of ours", len);
        return;
    }
    wr_wait_end(p, req);
    if (req->rtr) {
        offer_clear(p, req);
        /* the write was for the request that matched the receive (its
         * sender's id in the tag): a sender whose counts went astray wrote
         * another message, which the receive must not pass for this one */
        if (in->tmh.tag != req->rndv_app_ctx) {
            util_error("peer %u wrote its request %llu into a receive that its request %u matched",
                       src, (unsigned long long)in->tmh.tag, req->rndv_app_ctx);
            fin_send(p, req->rndv_src, req->rndv_app_ctx, req->comp.tag, req->rndv_va, req->rndv_rkey,
                     req->rndv_len, 1);
            req_complete(p, req, TMX_ERR_PROTO);
            return;
        }
        p->rtr_written += !(in->tmh.flags & WIRE_WDONE_NOWRITE);
    }
    if (in->tmh.flags & WIRE_WDONE_NOWRITE) {
        if (p->off != NULL && req->off_wr) {
            req->off_wr = 0;
            off_get(p, req);
            off_drain(p);
        } else {
            rndv_read(p, req);
        }
        return;
    }
    /* Bytes that came as packets were counted; a path without one-sided
     * writes brings no others. */
    if (req->wr_placed != req->comp.length &&
        (req->wr_placed != 0 || p->up.peer_ep(p->up.arg, src, &ep, &pp) != TMX_OK || tl_ep_iface(ep)->put_checked)) {
        util_error("peer %u wrote %llu of %zu bytes of a rendezvous message", src,
                   (unsigned long long)req->wr_placed, req->comp.length);
        st = TMX_ERR_PROTO;
    }
    if (p->off != NULL && req->off_wr) { /* the engine's: it sends FIN and completes */
        req->off_wr = 0;
        off_read_done(p->off, req->off_token, st);
        off_drain(p);
        return;
    }
    fin_send(p, req->rndv_src, req->rndv_app_ctx, req->comp.tag, req->rndv_va, req->rndv_rkey,
             req->rndv_len, st != TMX_OK);
    req_complete(p, req, st == TMX_OK ? recv_status(req) : st);
}

/* ---------------------------------------------- receive offers (RTR) */

/* With the offload engine on, a large receive that names its sender and
 * tag offers its buffer to that sender as it is posted, so that the
 * sender writes the message straight into it (seed 003's rendezvous by
 * write, started by the receiver) and the receiver's cores do nothing: it
 * may compute all along. MPI's order holds because the offer says how
 * many tagged packets the receiver had taken from the sender when it
 * posted: the sender takes the offer only if every tagged packet it sent
 * since is a rendezvous request it still holds (it knows their tags), and
 * writes the first of its messages with the offer's tag after that count,
 * which is the one the receive matches. Otherwise it says no (RTR_NO) and
 * the rendezvous goes as usual. */

/* Says no to an offer of uuid's. An answer that waits for room is
 * counted against its receiver (rtr_arrive bounds them). */
static void offer_no(proto_t *p, tmx_peer_t peer, uint64_t uuid, uint64_t tag, uint64_t rkey)
{
    wire_tmh_t tmh;
    wire_rkh_t k = {htole64(rkey)};
    proto_ctrl_t *q;
    proto_pcnt_t *c;

    wire_tmh_pack(&tmh, WIRE_OP_RTR_NO, 0, 0, tag);
    if ((q = ctrl_send(p, peer, &tmh, &k, sizeof(k))) != NULL && (c = pcnt_get(p, uuid)) != NULL) {
        q->owed_uuid = uuid;
        c->owed++;
    }
}

/* Our rendezvous send req (its RTS just went) takes offer i: the write
 * waits for the next progress pass, which first handles what the
 * receiver sent meanwhile. */
static void offer_use(proto_t *p, proto_req_t *req, tmx_peer_t peer, int i)
{
    const proto_offer_t *o = &p->offers[i];
    uint64_t len = req->len < o->len ? req->len : o->len;

    if (len == 0 || req->wr_started || req->parked) {
        offer_no(p, peer, o->uuid, o->tag, o->rkey);
        return;
    }
    req->rndv_src = peer;
    req->rndv_va = o->va;
    req->rndv_rkey = o->rkey;
    req->rndv_len = len;
    req->rtr_token = o->token;
    req->parked = 1;
    util_dlist_push_tail(&p->offer_writes, &req->off_link);
}

/* An offer: taken now by a rendezvous send of ours it matches, kept for
 * our next send with its tag, or refused. */
static void rtr_arrive(proto_t *p, uint64_t src_uuid, tmx_peer_t src, const proto_in_t *in, size_t len)
{
    const wire_ctsh_t *o = &in->cts;
    proto_req_t *first = NULL;
    proto_pcnt_t *c;
    uint32_t k, n = 0, seen = in->tmh.app_ctx;
    uint64_t ignore = o->skey;

    if (o->len == 0) {
        parse_fail(p, src, "RTR without a buffer", len);
        return;
    }
    if (!p->offer_on || (c = pcnt_get(p, src_uuid)) == NULL)
        goto no; /* without offers of our own we keep no counts */
    for (int i = 0; i < PROTO_OFFERS && p->n_offers != 0; i++) { /* kept, but closed since (a cancel) */
        if (p->offers[i].uuid != 0 && !offer_live(p, p->offers[i].peer, p->offers[i].token))
            offer_drop(p, i);
    }
    if (p->n_offers == PROTO_OFFERS)
        goto no;
    /* an answer may have to wait for room: a receiver has at most
     * PROTO_OFFERS offers out to us (offer_wanted), so one with more
     * answers owed breaks the protocol, and what it can make us keep is
     * bounded */
    if (c->owed >= 2 * PROTO_OFFERS) {
        parse_fail(p, src, "RTR beyond the offers a receiver may have out", len);
        return;
    }
    for (int i = 0; i < PROTO_OFFERS; i++) { /* one that overlaps, kept: the receiver's mistake */
        if (p->offers[i].uuid == src_uuid &&
            ((p->offers[i].tag ^ in->tmh.tag) & ~(p->offers[i].ignore | ignore)) == 0)
            goto no;
    }
    /* the tagged packets we sent it that it had not taken when it posted:
     * each must be a rendezvous request we still hold (a later FIN than
     * the offer cannot have come before it) */
    k = c->tx - seen;
    if (k > p->n_rndv_used)
        goto no;
    for (uint32_t i = 0; i < p->n_rndv_slots && k != 0; i++) {
        proto_req_t *r = rndv_lookup(p, i);
        if (r == NULL || r->comp.op != TMX_OP_TSEND || r->dest_uuid != src_uuid ||
            (uint32_t)(r->tx_seq - seen - 1) >= k)
            continue;
        n++;
        if (((r->comp.tag ^ in->tmh.tag) & ~ignore) == 0 &&
            (first == NULL || (int32_t)(r->tx_seq - first->tx_seq) < 0))
            first = r;
    }
    if (n != k)
        goto no; /* an eager message among them may have matched the receive */
    if (first != NULL) { /* the message the receive matches: written now */
        if (first->wr_started || first->parked || first->len == 0)
            goto no;
        /* unless the receiver takes the copy (offer_taken): it reads, then FIN */
        if (!offer_taken(p, src, in->rtr_token))
            return;
        first->wr_started = 1;
        first->rndv_src = src;
        first->rndv_va = o->va;
        first->rndv_rkey = o->rkey;
        first->rndv_len = first->len < o->len ? first->len : o->len;
        write_start(p, first);
        return;
    }
    for (int i = 0; i < PROTO_OFFERS; i++) {
        if (p->offers[i].uuid == 0) {
            p->offers[i] = (proto_offer_t){src_uuid, in->tmh.tag, ignore, o->va, o->rkey, o->len, in->rtr_token, src};
            p->n_offers++;
            return;
        }
    }
no:
    offer_no(p, src, src_uuid, in->tmh.tag, o->rkey);
}

/* Our offered receive's slot and state go. */
static void offer_end(proto_t *p, proto_req_t *req)
{
    offer_clear(p, req);
    wr_wait_end(p, req);
}

/* An offered receive that a message other than a rendezvous took: its
 * sender sent that message instead of writing, so the copy is ours; were
 * it taken, the sender would be writing another message into it. */
static void offer_spent(proto_t *p, proto_req_t *req)
{
    if (!offer_take_own(req))
        util_error("peer %u writes into a receive that another of its messages took", req->rndv_src);
    offer_end(p, req);
}

/* The sender will not write into our offer: the receive goes on as any
 * other, and a rendezvous that matched it meanwhile starts now. One for
 * an offer that has ended (a message of the sender's took it) is late. */
static void rtr_no_arrive(proto_t *p, uint64_t src_uuid, tmx_peer_t src, const proto_in_t *in)
{
    proto_req_t *req = rndv_lookup(p, reg_key_slot(in->rkh.rkey));
    int rts;

    if (req == NULL || req->comp.op != TMX_OP_TRECV || !req->rtr || req->rkey != in->rkh.rkey ||
        req->wr_uuid != src_uuid) {
        util_debug("RTR_NO from peer %u for an offer that has ended: ignored", src);
        return;
    }
    rts = req->rtr_rts;
    offer_end(p, req);
    if (rts)
        rndv_start(p, req, req->rndv_src, req->rndv_app_ctx, req->rndv_va, req->rndv_rkey, req->rndv_len, 1);
}

/* Whether a receive about to be posted is offered to its sender: a large
 * one naming one peer (not by an implicit number, which may change) and
 * a tag with at most PROTO_OFFER_MASK_BITS ignored bits, that no older
 * receive could take a message of that sender's with such a tag before
 * it, to a sender whose engine writes, over a transport with claim words
 * whose writes cost us nothing, with nothing queued that the offer could
 * overtake. */
static int offer_wanted(proto_t *p, const proto_req_t *req, tl_ep_t **ep)
{
    const match_recv_t *r = &req->recv;
    proto_pcnt_t *c;
    proto_peer_t *pp;
    util_dlist_t *pos;
    uint64_t sub = 0;

    if (!p->offer_on || req->len < PROTO_OFF_BIG || r->src == TMX_ANY_SOURCE || (r->src & TMX_PEER_IMPLICIT) ||
        __builtin_popcountll(r->ignore) > PROTO_OFFER_MASK_BITS || p->unexp_full ||
        !util_dlist_empty(&p->ctrl_pending))
        return 0;
    if (p->up.peer_ep(p->up.arg, r->src, ep, &pp) != TMX_OK || !proto_peer_hello(pp) ||
        !tl_writes_free(tl_ep_iface(*ep)) || tl_ep_iface(*ep)->ops->offer_open == NULL ||
        ((const proto_tl_t *)tl_ep_iface(*ep)->above)->set)
        return 0;
    if ((c = pcnt_get(p, (*ep)->uuid)) == NULL || !c->writer || c->offers_out >= PROTO_OFFERS)
        return 0;
    /* a message of the sender's streaming in is counted, but goes to the
     * posted receives only when whole: it could take this one */
    util_dlist_foreach(pos, &p->streams) {
        if (util_container_of(pos, proto_stream_t, link)->uuid == (*ep)->uuid)
            return 0;
    }
    /* every tag it matches: those of a mask of few bits (Open MPI's ofi
     * MTL ignores its synchronous-send bit) */
    do {
        if (match_find_recv(&p->match, r->src, (r->tag & ~r->ignore) | sub) != NULL)
            return 0;
        sub = (sub - r->ignore) & r->ignore;
    } while (sub != 0);
    return 1;
}

/* Offers a receive just posted (offer_wanted) to its sender: its buffer
 * lent under a key of its own, as for a CTS. */
static void offer_make(proto_t *p, proto_req_t *req, tl_ep_t *ep)
{
    proto_pcnt_t *c = pcnt_get(p, ep->uuid);
    tl_iface_t *ifc = tl_ep_iface(ep);
    unsigned char pkt[sizeof(wire_tmh_t) + sizeof(wire_ctsh_t) + sizeof(wire_rkh_t)];
    struct iovec iov = {pkt, sizeof(pkt)};
    wire_tmh_t tmh;
    wire_ctsh_t cts;
    wire_rkh_t tok;

    if (c == NULL || ifc->ops->offer_open(ifc, &req->rtr_token) != TMX_OK)
        return;
    if (rndv_slot_get(p, req) != TMX_OK) {
        ifc->ops->offer_close(ifc, req->rtr_token);
        return;
    }
    req->fin_wait = 0;
    wire_tmh_pack(&tmh, WIRE_OP_RTR, 0, c->rx, req->recv.tag);
    wire_ctsh_pack(&cts, (uintptr_t)req->buf, req->rkey, req->len, req->recv.ignore);
    tok.rkey = htole64(req->rtr_token);
    memcpy(pkt, &tmh, sizeof(tmh));
    memcpy(pkt + sizeof(tmh), &cts, sizeof(cts));
    memcpy(pkt + sizeof(tmh) + sizeof(cts), &tok, sizeof(tok));
    /* now or never: queued, it could follow a later control packet */
    if (ifc->ops->send(ep, &iov, 1) != TMX_OK) {
        ifc->ops->offer_close(ifc, req->rtr_token);
        rndv_slot_put(p, req);
        return;
    }
    req->rtr_iface = ifc;
    req->wr_wait = 1;
    p->n_wr_wait++;
    reg_take(p, req, req->len);
    req->wr_uuid = ep->uuid;
    req->wr_placed = 0;
    req->rndv_src = req->recv.src;
    req->rtr = 1;
    c->offers_out++;
    p->rtr_sent++;
}

/* --------------------------------------------- the offload engine's host */

/* Posts one operation to the engine with the host's count, and has the
 * engine process it now: proto is the engine's only caller, under core's
 * lock, so operations need not wait for a thread. */
static void off_op(proto_t *p, off_op_t *op)
{
    tmx_status_t st;

    op->unexpected_cnt = p->off_handled;
    /* The queue is run empty after every operation, so it has room; were
     * it full, running it makes room (a DEL must not be lost: the engine
     * would keep a tag naming a request that completes elsewhere). */
    while ((st = off_post_ops(p->off, op, 1, NULL)) == TMX_ERR_AGAIN)
        off_engine_run(p->off, SIZE_MAX);
    if (st != TMX_OK) {
        util_error("offload: operation %u refused: %s", op->opcode, tmx_strerror(st));
        return;
    }
    p->off_reported = p->off_handled;
    off_engine_run(p->off, SIZE_MAX);
}

/* A posted receive leaves the matcher: taken by a message the host
 * matched, cancelled or aborted. The engine gives up its copy. */
static void recv_take(proto_t *p, proto_req_t *req)
{
    match_remove_recv(&p->match, &req->recv);
    if (p->off == NULL)
        return;
    if (req->off_in) {
        off_op_t del = {.opcode = OFF_WR_TAG_DEL, .handle = req->off_handle};
        req->off_in = 0;
        off_op(p, &del);
    } else if (req->off_host) {
        req->off_host = 0;
        util_dlist_unlink(&req->off_link);
        p->n_host_only--;
    }
}

/* A receive goes to the engine unless it could match a message that a
 * receive the host holds alone (older) also matches: the engine would
 * take that message first. Beyond this many such receives, none goes. */
#define OFF_HOST_SCAN_MAX 64

static int off_may_hold(const proto_t *p, const match_recv_t *r)
{
    util_dlist_t *pos;

    if (p->n_host_only > OFF_HOST_SCAN_MAX)
        return 0;
    util_dlist_foreach(pos, &p->off_host_only) {
        const proto_req_t *o = util_container_of(pos, proto_req_t, off_link);
        if (off_recvs_overlap(r->src, r->tag, r->ignore, o->recv.src, o->recv.tag, o->recv.ignore))
            return 0;
    }
    return 1;
}

static void off_post(proto_t *p, proto_req_t *req, int host)
{
    const match_recv_t *r = &req->recv;

    req->off_in = 0;
    req->off_host = 0;
    req->off_wr = 0;

    /* a receive naming an implicit number may be given the added one
     * (core's implicit_rekey_recvs): the host keeps it */
    if (!host && req->len >= p->off_min && (r->src == TMX_ANY_SOURCE || !(r->src & TMX_PEER_IMPLICIT)) &&
        off_may_hold(p, r)) {
        off_op_t add = {.opcode = OFF_WR_TAG_ADD};
        add.add.recv_wr_id = (uintptr_t)req;
        add.add.buf = req->buf;
        add.add.len = req->len;
        add.add.src = r->src;
        add.add.tag = r->tag;
        add.add.ignore = r->ignore;
        add.unexpected_cnt = p->off_handled;
        if (off_post_ops(p->off, &add, 1, NULL) == TMX_OK) {
            p->off_reported = p->off_handled;
            off_engine_run(p->off, SIZE_MAX);
            req->off_in = 1;
            req->off_handle = add.handle;
            return;
        }
    }
    req->off_host = 1; /* the engine is full, the receive overlaps, or it is offered */
    util_dlist_push_tail(&p->off_host_only, &req->off_link);
    p->n_host_only++;
}

static void off_get_done(tl_get_op_t *op, tmx_status_t st);

/* The engine's read of the receive's rndv_ fields into its buffer; the
 * engine hears of its end (off_read_done), which sends FIN. */
static void off_get(proto_t *p, proto_req_t *req)
{
    tl_ep_t *ep;
    proto_peer_t *pp;
    tmx_status_t st = p->up.peer_ep(p->up.arg, req->rndv_src, &ep, &pp);

    req->get.done = off_get_done;
    if (st == TMX_OK)
        st = tl_ep_iface(ep)->ops->get(ep, req->buf, req->rndv_len, req->rndv_va, req->rndv_rkey,
                                 read_kind(tl_ep_iface(ep), req->rndv_len), &req->get);
    if (st == TMX_INPROGRESS)
        return;
    if (st != TMX_OK)
        util_error("rendezvous read of %llu bytes from peer %u failed: %s",
                   (unsigned long long)req->rndv_len, req->rndv_src, tmx_strerror(st));
    off_read_done(p->off, req->off_token, st);
}

/* The engine matched a rendezvous request: the transport reads, or the
 * sender is asked to write (write_wanted); either way the engine hears
 * when the data is in place. */
static void off_dev_read(void *arg, const off_msg_t *m, void *buf, uint64_t recv_wr_id,
                         uint64_t token)
{
    proto_t *p = arg;
    proto_req_t *req = (proto_req_t *)(uintptr_t)recv_wr_id;
    tl_ep_t *ep;
    proto_peer_t *pp;
    int w;

    (void)buf; /* the receive's own */
    req->off_token = token;
    req->off_wr = 0;
    req->owner = p;
    req->rndv_src = m->src;
    req->rndv_app_ctx = m->app_ctx;
    req->rndv_va = m->va;
    req->rndv_rkey = m->rkey;
    req->rndv_len = m->rlen;
    if (p->up.peer_ep(p->up.arg, m->src, &ep, &pp) == TMX_OK &&
        (w = write_wanted(p, ep, m->rlen, (m->flags & WIRE_FLAG_WRITER) != 0)) != 0) {
        /* the receive's length and tag as the MATCH completion will set
         * them (the engine took it: it holds all of m->rlen): WDONE is
         * checked against them */
        req->comp.length = m->rlen;
        req->comp.tag = m->tag;
        req->off_wr = 1; /* before the CTS: its WDONE is the engine's */
        if (write_ask(p, req, ep) == TMX_OK) {
            util_debug("offload: rendezvous of %llu bytes from peer %u matched: its sender writes",
                       (unsigned long long)m->rlen, m->src);
            p->wr_engine += w == 2;
            return;
        }
        req->off_wr = 0;
    }
    off_get(p, req);
}

static void off_get_done(tl_get_op_t *op, tmx_status_t st)
{
    proto_req_t *req = util_container_of(op, proto_req_t, get);
    proto_t *p = req->owner;

    off_read_done(p->off, req->off_token, st);
    off_drain(p);
}

static void off_dev_fin(void *arg, const off_msg_t *m, tmx_status_t status)
{
    fin_send(arg, m->src, m->app_ctx, m->tag, m->va, m->rkey, m->rlen, status != TMX_OK);
}

static const off_dev_ops_t off_dev_ops = {off_dev_read, off_dev_fin};

tmx_status_t proto_offload_open(proto_t *p, const off_caps_t *caps, size_t min)
{
    tmx_status_t st = off_engine_open(caps, &off_dev_ops, p, &p->off);

    if (st != TMX_OK)
        return st;
    off_engine_set_serialised(p->off);
    util_dlist_init(&p->off_host_only);
    p->off_min = min;
    return TMX_OK;
}

static inline void tagged_match(proto_t *p, tmx_peer_t src, const proto_in_t *in);

/* The host's side of one completion of the engine. */
static void off_completion(proto_t *p, off_cqe_t *c)
{
    proto_req_t *req = (proto_req_t *)(uintptr_t)c->wr_id;

    switch (c->opcode) {
    case OFF_WC_TM_RECV:
        if (c->flags & OFF_WC_TM_MATCH) {
            size_t len = c->msg.op == OFF_TM_EAGER ? c->msg.len : c->msg.rlen;
            match_remove_recv(&p->match, &req->recv);
            req->off_in = 0;
            recv_fill(req, c->src, c->tag, len, c->msg.has_imm, c->msg.imm);
        }
        if (c->status == OFF_WC_TM_RNDV_INCOMPLETE) {
            rndv_start(p, req, c->src, c->priv, c->msg.va, c->msg.rkey, c->msg.rlen,
                       (c->msg.flags & WIRE_FLAG_WRITER) != 0);
        } else if (c->status == OFF_WC_LOC_ERR) {
            fin_send(p, c->src, c->priv, c->tag, c->msg.va, c->msg.rkey, c->msg.rlen, 1);
            req_complete(p, req, TMX_ERR_NOMEM);
        } else if (c->status == OFF_WC_REM_ERR) {
            req_complete(p, req, c->dev_status);
        } else if (c->flags & OFF_WC_TM_DATA_VALID) {
            req_complete(p, req, recv_status(req));
        }
        break;
    case OFF_WC_RECV: {
        proto_in_t in = {0};
        p->off_handled++;
        if (c->status == OFF_WC_LOC_ERR)
            break; /* lost, and logged, by the engine */
        in.tmh.opcode = c->msg.op == OFF_TM_EAGER ? WIRE_OP_EAGER : WIRE_OP_RNDV;
        in.tmh.app_ctx = c->priv;
        in.tmh.flags = c->msg.flags;
        in.tmh.tag = c->tag;
        in.rvh.va = c->msg.va;
        in.rvh.rkey = c->msg.rkey;
        in.rvh.len = c->msg.rlen;
        in.has_data = c->msg.has_imm;
        in.data = c->msg.imm;
        in.payload = c->msg.data;
        in.payload_len = c->msg.len;
        tagged_match(p, c->src, &in);
        break;
    }
    case OFF_WC_TM_DEL:
    case OFF_WC_TM_ADD:
    case OFF_WC_TM_SYNC:
        util_error("offload: operation 0x%llx failed (%u)", (unsigned long long)c->wr_id, c->status);
        break;
    default:
        break;
    }
}

/* A completion asked the host to catch up: it reports its count. */
static void off_sync_if(proto_t *p, int sync)
{
    if (sync && p->off_reported != p->off_handled) {
        off_op_t op = {.opcode = OFF_WR_TAG_SYNC};
        off_op(p, &op);
    }
}

/* Handles every completion the engine has made. */
static void off_drain(proto_t *p)
{
    off_cqe_t c[16];
    size_t n;
    int sync = 0;

    while ((n = off_poll_cq(p->off, c, 16)) > 0) {
        for (size_t i = 0; i < n; i++) {
            sync |= (c[i].flags & OFF_WC_TM_SYNC_REQ) != 0;
            off_completion(p, &c[i]);
            off_cqe_release(&c[i]);
        }
    }
    off_sync_if(p, sync);
}

void proto_msg_clear(proto_msg_t *msg)
{
    free(msg->payload);
    msg->payload = NULL;
}

static void msg_free(proto_t *p, proto_msg_t *msg)
{
    proto_msg_clear(msg);
    p->up.msg_free(p->up.arg, msg);
}

/* A receive posted (or a message claimed) takes a message that came
 * before it. With the offload engine on, a large rendezvous from a sender
 * that writes on request is not started in the posting call: it waits for
 * the next progress pass (proto_progress). An application that waits next
 * makes that pass itself and reads; one that computes leaves it to the
 * engine's thread, which has the sender write (write_wanted), so the post
 * returns at once either way. */
void proto_msg_deliver(proto_t *p, proto_msg_t *msg, proto_req_t *req)
{
    if (__builtin_expect(req->rtr, 0)) { /* not expected: offer_wanted keeps such messages away */
        util_error("a message from peer %u went to a receive offered to it: the offer ends", msg->m.src);
        offer_spent(p, req);
    }
    recv_fill(req, msg->m.src, msg->m.tag, msg->len, msg->has_data, msg->data);
    if (msg->kind == PROTO_MSG_EAGER) {
        eager_deliver(p, req, msg->payload);
    } else if (p->off != NULL && msg->writer && req->comp.length >= PROTO_OFF_BIG) {
        req->rndv_src = msg->m.src;
        req->rndv_app_ctx = msg->app_ctx;
        req->rndv_va = msg->va;
        req->rndv_rkey = msg->rkey;
        req->rndv_len = msg->len;
        req->parked = 1;
        util_dlist_push_tail(&p->parked, &req->off_link);
    } else {
        rndv_start(p, req, msg->m.src, msg->app_ctx, msg->va, msg->rkey, msg->len, msg->writer);
    }
    msg_free(p, msg);
}

void proto_msg_discard(proto_t *p, proto_msg_t *msg)
{
    if (msg->kind == PROTO_MSG_RNDV)
        fin_send(p, msg->m.src, msg->app_ctx, msg->m.tag, msg->va, msg->rkey, msg->len, 0);
    msg_free(p, msg);
}

tmx_status_t proto_recv_match(proto_t *p, proto_req_t *req)
{
    match_recv_t *r = &req->recv;
    match_msg_t *m = match_find_msg(&p->match, r->src, r->tag, r->ignore);

    if (m == NULL)
        return TMX_ERR_NO_MESSAGE;
    match_remove_msg(&p->match, m);
    proto_msg_deliver(p, util_container_of(m, proto_msg_t, m), req);
    return TMX_OK;
}

tmx_status_t proto_recv_post(proto_t *p, proto_req_t *req)
{
    tl_ep_t *ep = NULL;
    tmx_status_t st;
    int offer;

    if (p->off == NULL)
        return match_post(&p->match, &req->recv);
    /* an offered receive is the host's: its sender's write completes it */
    offer = offer_wanted(p, req, &ep);
    off_post(p, req, offer);
    if ((st = match_post(&p->match, &req->recv)) == TMX_OK && offer)
        offer_make(p, req, ep);
    return st;
}

tmx_status_t proto_recv_cancel(proto_t *p, proto_req_t *req)
{
    if (!match_recv_is_posted(&req->recv))
        return TMX_ERR_BUSY;
    if (req->rtr) { /* cancelled only if its sender did not take the copy */
        if (!offer_take_own(req))
            return TMX_ERR_BUSY;
        offer_end(p, req);
    }
    recv_take(p, req);
    return TMX_OK;
}

int proto_req_waiting(const proto_req_t *req)
{
    if (req->comp.op == TMX_OP_TSEND)
        return req->fin_wait;
    return req->wr_wait || req->parked || match_recv_is_posted(&req->recv);
}

void proto_req_abort(proto_t *p, proto_req_t *req)
{
    recv_failed(req);
    if (req->comp.op == TMX_OP_TSEND) {
        if (req->parked) { /* a write into an offer, not started */
            util_dlist_unlink(&req->off_link);
            req->parked = 0;
        }
        if (req->fin_wait)
            rndv_slot_put(p, req);
    } else if (req->rtr) { /* late writes and WDONE find no slot */
        offer_end(p, req);
        if (match_recv_is_posted(&req->recv))
            recv_take(p, req);
    } else if (req->wr_wait) {
        wr_wait_end(p, req); /* late writes and WDONE find no slot */
        if (p->off != NULL && req->off_wr) { /* the engine forgets it: core completes it */
            req->off_wr = 0;
            off_read_abandon(p->off, req->off_token);
        }
    } else if (req->parked) {
        util_dlist_unlink(&req->off_link);
        req->parked = 0;
    } else if (match_recv_is_posted(&req->recv)) {
        recv_take(p, req);
    }
}

/* ------------------------------------------------------------ from wire */


static int parse_fail(proto_t *p, tmx_peer_t src, const char *why, size_t len)
{
    if (util_log_sparse(&p->dropped))
        util_warn("dropped a %zu-byte packet from peer %u: %s (%llu dropped so far)", len, src, why,
                  (unsigned long long)p->dropped);
    return -1;
}

/* A tagged packet's remote data, if its flags say so, and its payload,
 * from off on. */
static inline int parse_tail(proto_t *pr, tmx_peer_t src, const unsigned char *p, size_t len, size_t off,
                             proto_in_t *in)
{
    in->has_data = (in->tmh.flags & WIRE_FLAG_DATA) != 0;
    in->data = 0;
    if (in->has_data) {
        if (len < off + sizeof(uint64_t))
            return parse_fail(pr, src, "truncated remote data", len);
        memcpy(&in->data, p + off, sizeof(in->data));
        in->data = le64toh(in->data);
        off += sizeof(uint64_t);
    }
    in->payload = p + off;
    in->payload_len = len - off;
    return 0;
}

static int parse_packet(proto_t *pr, tmx_peer_t src, const unsigned char *p, size_t len,
                        proto_in_t *in)
{
    size_t off = sizeof(wire_tmh_t);

    if (len < sizeof(wire_tmh_t))
        return parse_fail(pr, src, "shorter than a TMH", len);
    memcpy(&in->tmh, p, sizeof(in->tmh));
    wire_tmh_unpack(&in->tmh);
    if (in->tmh.version != WIRE_VERSION)
        return parse_fail(pr, src, "unknown wire version", len);
    if (__builtin_expect(in->tmh.opcode == WIRE_OP_EAGER && !(in->tmh.flags & ~WIRE_FLAG_MASK), 1)) {
        /* the common packet: as below, without the other opcodes' tests */
        return parse_tail(pr, src, p, len, off, in);
    }
    if (in->tmh.opcode == WIRE_OP_RNDV || in->tmh.opcode == WIRE_OP_FIN ||
        in->tmh.opcode == WIRE_OP_WDONE) {
        if (len < off + sizeof(wire_rvh_t))
            return parse_fail(pr, src, "rendezvous packet without RVH", len);
        memcpy(&in->rvh, p + off, sizeof(in->rvh));
        wire_rvh_unpack(&in->rvh);
        off += sizeof(wire_rvh_t);
    }
    if (in->tmh.opcode == WIRE_OP_RTR_NO) {
        if (len != off + sizeof(wire_rkh_t))
            return parse_fail(pr, src, "RTR_NO of the wrong length", len);
        memcpy(&in->rkh, p + off, sizeof(in->rkh));
        in->rkh.rkey = le64toh(in->rkh.rkey);
        return in->tmh.flags != 0 ? parse_fail(pr, src, "bad RTR_NO flags", len) : 0;
    }
    if (in->tmh.opcode == WIRE_OP_CTS || in->tmh.opcode == WIRE_OP_RTR) {
        size_t want = off + sizeof(wire_ctsh_t) + (in->tmh.opcode == WIRE_OP_RTR ? sizeof(wire_rkh_t) : 0);
        if (len != want)
            return parse_fail(pr, src, "CTS or RTR of the wrong length", len);
        memcpy(&in->cts, p + off, sizeof(in->cts));
        wire_ctsh_unpack(&in->cts);
        if (in->tmh.opcode == WIRE_OP_RTR) {
            memcpy(&in->rtr_token, p + off + sizeof(wire_ctsh_t), sizeof(in->rtr_token));
            in->rtr_token = le64toh(in->rtr_token);
        }
        return in->tmh.flags != 0 ? parse_fail(pr, src, "bad CTS or RTR flags", len) : 0;
    }
    if (in->tmh.opcode == WIRE_OP_WDONE) {
        if (len != off)
            return parse_fail(pr, src, "WDONE with trailing bytes", len);
        if ((in->tmh.flags & ~WIRE_WDONE_MASK) || in->tmh.flags == WIRE_WDONE_MASK)
            return parse_fail(pr, src, "bad WDONE flags", len);
        return 0;
    }
    if (in->tmh.opcode == WIRE_OP_FIN) {
        if (len != off)
            return parse_fail(pr, src, "FIN with trailing bytes", len);
        return (in->tmh.flags & ~PROTO_FIN_FAILED) ? parse_fail(pr, src, "bad FIN flags", len) : 0;
    }
    if (in->tmh.flags & ~(in->tmh.opcode == WIRE_OP_RNDV ? WIRE_FLAG_RNDV_MASK : WIRE_FLAG_MASK))
        return parse_fail(pr, src, "unknown flags", len);
    if (parse_tail(pr, src, p, len, off, in) != 0)
        return -1;
    if (in->tmh.opcode == WIRE_OP_RNDV && in->payload_len != 0)
        return parse_fail(pr, src, "rendezvous request with trailing bytes", len);
    return 0;
}

static void unexpected_store(proto_t *p, tmx_peer_t src, const proto_in_t *in)
{
    proto_msg_t *msg = p->up.msg_alloc(p->up.arg);

    if (msg == NULL)
        goto err_nomem;
    msg->m.src = src;
    msg->m.tag = in->tmh.tag;
    msg->has_data = in->has_data;
    msg->data = in->data;
    if (in->tmh.opcode == WIRE_OP_EAGER) {
        msg->kind = PROTO_MSG_EAGER;
        msg->len = in->payload_len;
        if (msg->len != 0 && (msg->payload = malloc(msg->len)) == NULL)
            goto err_free;
        if (msg->len != 0)
            memcpy(msg->payload, in->payload, msg->len);
    } else {
        msg->kind = PROTO_MSG_RNDV;
        msg->app_ctx = in->tmh.app_ctx;
        msg->writer = (in->tmh.flags & WIRE_FLAG_WRITER) != 0;
        msg->va = in->rvh.va;
        msg->rkey = in->rvh.rkey;
        msg->len = in->rvh.len;
    }
    if (match_add_msg(&p->match, &msg->m) == TMX_OK) {
        p->up.msg_kept(p->up.arg, msg, msg->kind == PROTO_MSG_EAGER ? msg->len : 0);
        return;
    }
err_free:
    msg_free(p, msg);
err_nomem:
    /* The reliable transports only hand up what they can keep; losing an
     * unexpected message here is loud, since MPI cannot recover it. A
     * rendezvous sender would wait for ever for the read and the FIN:
     * it is sent the FIN of a failed read, and its send fails. */
    util_error("out of memory: message from peer %u tag 0x%llx lost%s", src, (unsigned long long)in->tmh.tag,
               in->tmh.opcode == WIRE_OP_RNDV ? " (its sender is told)" : "");
    if (in->tmh.opcode == WIRE_OP_RNDV)
        fin_send(p, src, in->tmh.app_ctx, in->tmh.tag, in->rvh.va, in->rvh.rkey, in->rvh.len, 1);
}

/* A tagged message the host matches itself: against every posted
 * receive, in post order. */
static inline void tagged_match(proto_t *p, tmx_peer_t src, const proto_in_t *in)
{
    match_recv_t *r = match_find_recv(&p->match, src, in->tmh.tag);
    proto_req_t *req;
    size_t msg_len = in->tmh.opcode == WIRE_OP_EAGER ? in->payload_len : in->rvh.len;

    if (r == NULL) {
        unexpected_store(p, src, in);
        return;
    }
    req = util_container_of(r, proto_req_t, recv);
    recv_take(p, req);
    recv_fill(req, src, in->tmh.tag, msg_len, in->has_data, in->data);
    if (in->tmh.opcode == WIRE_OP_EAGER) {
        if (__builtin_expect(req->rtr, 0))
            offer_spent(p, req);
        eager_deliver(p, req, in->payload);
    } else
        rndv_start(p, req, src, in->tmh.app_ctx, in->rvh.va, in->rvh.rkey, in->rvh.len,
                   (in->tmh.flags & WIRE_FLAG_WRITER) != 0);
}

/* A tagged message through the offload engine: the engine completes a
 * receive it holds, or hands the message back. */
static __attribute__((noinline)) void off_tagged_arrive(proto_t *p, tmx_peer_t src,
                                                        const proto_in_t *in)
{
    off_cqe_t c;
    off_msg_t m;

    if (off_arrive_unlisted(p->off)) { /* no receive of the engine's could take it */
        p->off_handled++;
        tagged_match(p, src, in);
        if (!off_cq_empty(p->off))
            off_drain(p);
        return;
    }
    m = (off_msg_t){.op = in->tmh.opcode == WIRE_OP_EAGER ? OFF_TM_EAGER : OFF_TM_RNDV,
                    .src = src,
                    .app_ctx = in->tmh.app_ctx,
                    .tag = in->tmh.tag,
                    .va = in->rvh.va,
                    .rkey = in->rvh.rkey,
                    .rlen = in->tmh.opcode == WIRE_OP_EAGER ? 0 : in->rvh.len,
                    .imm = in->data,
                    .has_imm = (uint8_t)in->has_data,
                    .flags = in->tmh.flags};
    if (in->tmh.opcode == WIRE_OP_EAGER) {
        m.data = in->payload;
        m.len = in->payload_len;
    }
    switch (off_arrive_inline(p->off, &m, &c)) {
    case 0: /* no tag of the engine's: every short receive is the host's */
        p->off_handled++; /* the engine's, handed back at once */
        tagged_match(p, src, in);
        break;
    case 2: /* an expected eager message: its completion, direct */
        off_completion(p, &c);
        off_sync_if(p, (c.flags & OFF_WC_TM_SYNC_REQ) != 0);
        break;
    case 3: /* refused, lost (logged): a rendezvous sender is told, as by
               unexpected_store, so that its send fails instead of waiting */
        if (in->tmh.opcode == WIRE_OP_RNDV)
            fin_send(p, src, in->tmh.app_ctx, in->tmh.tag, in->rvh.va, in->rvh.rkey, in->rvh.len, 1);
        off_drain(p);
        return;
    default:
        off_drain(p);
        return;
    }
    if (!off_cq_empty(p->off)) /* made by something else meanwhile */
        off_drain(p);
}

static inline void tagged_arrive(proto_t *p, tmx_peer_t src, const proto_in_t *in)
{
    if (__builtin_expect(p->off != NULL, 0))
        off_tagged_arrive(p, src, in);
    else
        tagged_match(p, src, in);
}

/* A FIN must name a rendezvous send of ours to its sender, with its
 * address and key; any other is stale or forged and is dropped. */
static void fin_arrive(proto_t *p, uint64_t src_uuid, tmx_peer_t src, const proto_in_t *in,
                       size_t len)
{
    proto_req_t *req = rndv_lookup(p, in->tmh.app_ctx);

    if (req == NULL || req->comp.op != TMX_OP_TSEND || req->rkey != in->rvh.rkey ||
        (uintptr_t)req->buf != in->rvh.va || req->dest_uuid != src_uuid) {
        parse_fail(p, src, "FIN names no rendezvous send of ours", len);
        return;
    }
    if (req->parked) { /* queued to write into an offer: the receiver read it, or refused it */
        util_dlist_unlink(&req->off_link);
        req->parked = 0;
    }
    rndv_slot_put(p, req);
    if (in->tmh.flags & PROTO_FIN_FAILED) {
        util_error("peer %u could not read a %zu-byte rendezvous message", src, req->len);
        req_complete(p, req, TMX_ERR_IO);
        return;
    }
    req_complete(p, req, TMX_OK);
}

/* A HELLO from a process we know is a repeat; from one we do not, it
 * makes the process an implicit peer. Its address must name this very
 * sender. */
static void hello_arrive(proto_t *p, uint64_t src_uuid, tmx_peer_t src, const unsigned char *data,
                         size_t len)
{
    tmx_peer_t num;
    tmx_status_t st;

    if (src != TMX_PEER_NONE)
        return;
    st = p->up.peer_add_implicit(p->up.arg, src_uuid, data + sizeof(wire_tmh_t),
                                 len - sizeof(wire_tmh_t), &num);
    if (st != TMX_OK)
        parse_fail(p, src, "HELLO without a usable address of its sender, or no room for it", len);
}

/* 1 if a receive waits for a write from the process uuid (at the bound
 * only: a walk of the slots). */
static int writer_waited(const proto_t *p, uint64_t uuid)
{
    for (uint32_t i = 0; i < p->n_rndv_slots; i++) {
        const proto_req_t *req = rndv_lookup(p, i);
        if (req != NULL && req->comp.op == TMX_OP_TRECV && req->wr_wait && req->wr_uuid == uuid)
            return 1;
    }
    return 0;
}

/* Asked only at the bound of unexpected memory: a packet that would be
 * kept as one more unexpected message waits where the transport has it;
 * anything else (a FIN, a HELLO, a message a posted receive takes, a
 * packet that will be dropped) is taken, so that the wait cannot hold up
 * what needs no memory. */
int proto_admit_cb(void *arg, uint64_t src_uuid, const void *data, size_t len)
{
    proto_t *p = arg;
    const unsigned char *d = data;
    wire_tmh_t tmh;
    tmx_peer_t src;

    if (!p->unexp_full || len < sizeof(tmh) || (d[0] != WIRE_OP_EAGER && d[0] != WIRE_OP_RNDV))
        return 1; /* d[0]: the opcode byte */
    if ((src = p->up.peer_by_uuid(p->up.arg, src_uuid)) == TMX_PEER_NONE)
        return 1;
    memcpy(&tmh, d, sizeof(tmh));
    wire_tmh_unpack(&tmh);
    if (match_find_recv(&p->match, src, tmh.tag) != NULL)
        return 1;
    if (d[0] == WIRE_OP_RNDV && p->rts_admitted < PROTO_RTS_ADMIT_MAX) {
        p->rts_admitted++;
        return 1;
    }
    /* A receive waiting for this peer's write needs its WDONE, which
     * comes behind what the peer sent before it: taken, beyond the
     * bound, up to PROTO_WR_ADMIT_MAX bytes while writes are pending. */
    if (p->n_wr_wait != 0 && p->wr_admitted + len <= PROTO_WR_ADMIT_MAX && writer_waited(p, src_uuid)) {
        p->wr_admitted += len;
        return 1;
    }
    return 0;
}

/* A parsed packet of a known peer, by opcode (inlined in both callers:
 * the per-packet path). */
static inline __attribute__((always_inline)) void packet_arrive(proto_t *p, uint64_t src_uuid,
                                                                tmx_peer_t src, const proto_in_t *in,
                                                                size_t len)
{
    switch (in->tmh.opcode) {
    case WIRE_OP_EAGER:
    case WIRE_OP_RNDV:
        if (__builtin_expect(p->offer_on, 0))
            rx_count(p, src_uuid, in);
        tagged_arrive(p, src, in);
        break;
    case WIRE_OP_RTR:
        rtr_arrive(p, src_uuid, src, in, len);
        break;
    case WIRE_OP_RTR_NO:
        rtr_no_arrive(p, src_uuid, src, in);
        break;
    case WIRE_OP_FIN:
        fin_arrive(p, src_uuid, src, in, len);
        break;
    case WIRE_OP_CTS:
        cts_arrive(p, src_uuid, src, in, len);
        break;
    case WIRE_OP_WDONE:
        wdone_arrive(p, src_uuid, src, in, len);
        break;
    default:
        parse_fail(p, src, "unknown opcode", len);
    }
}

void proto_recv_cb(void *arg, uint64_t src_uuid, const void *data, size_t len)
{
    proto_t *p = arg;
    tmx_peer_t src = p->up.peer_by_uuid(p->up.arg, src_uuid);
    proto_in_t in;

    if (len >= sizeof(wire_tmh_t) && *(const unsigned char *)data == WIRE_OP_HELLO) { /* the opcode byte */
        hello_arrive(p, src_uuid, src, data, len);
        return;
    }
    if (src == TMX_PEER_NONE) {
        parse_fail(p, src, "sender is not a peer of ours", len);
        return;
    }
    if (parse_packet(p, src, data, len, &in) != 0)
        return;
    packet_arrive(p, src_uuid, src, &in, len);
}

/* ----------------------------------------------- packets that stream in */


static void stream_put(proto_stream_t *s, const void *data, size_t len)
{
    size_t c = len < s->room ? len : s->room;

    if (c != 0) {
        memcpy(s->dst, data, c);
        s->dst += c;
        s->room -= c;
    }
    s->left = len <= s->left ? s->left - len : SIZE_MAX; /* more than it said: broken */
}

/* One at a time streams in through each transport: one spare saves a
 * malloc per message. */
static void stream_free(proto_t *p, proto_stream_t *s)
{
    if (p->spare_stream == NULL)
        p->spare_stream = s;
    else
        free(s);
}

/* Where the payload goes: the first matching posted receive, or else a
 * new message; NULL (logged) when there is no memory for one. */
static proto_stream_t *stream_open(proto_t *p, uint64_t uuid, tmx_peer_t src, const proto_in_t *in)
{
    proto_stream_t *s = p->spare_stream != NULL ? p->spare_stream : malloc(sizeof(*s));
    match_recv_t *r;

    if (s == NULL)
        goto err_nomem;
    p->spare_stream = NULL;
    *s = (proto_stream_t){0};
    s->uuid = uuid;
    s->left = in->payload_len;
    if ((r = match_find_recv(&p->match, src, in->tmh.tag)) != NULL) {
        s->req = util_container_of(r, proto_req_t, recv);
        recv_take(p, s->req);
        if (s->req->rtr)
            offer_spent(p, s->req);
        recv_fill(s->req, src, in->tmh.tag, in->payload_len, in->has_data, in->data);
        s->dst = s->req->buf;
        s->room = s->req->comp.length;
    } else {
        if ((s->msg = p->up.msg_alloc(p->up.arg)) == NULL)
            goto err_free;
        s->msg->m.src = src;
        s->msg->m.tag = in->tmh.tag;
        s->msg->has_data = in->has_data;
        s->msg->data = in->data;
        s->msg->kind = PROTO_MSG_EAGER;
        s->msg->len = in->payload_len;
        if ((s->msg->payload = malloc(s->msg->len)) == NULL)
            goto err_msg;
        s->dst = s->msg->payload;
        s->room = s->msg->len;
    }
    util_dlist_push_tail(&p->streams, &s->link);
    return s;

err_msg:
    msg_free(p, s->msg);
err_free:
    stream_free(p, s);
err_nomem:
    util_error("out of memory: message from peer %u tag 0x%llx lost", src, (unsigned long long)in->tmh.tag);
    return NULL;
}

void *proto_stream_begin(void *arg, uint64_t src_uuid, const void *first, size_t first_len, size_t total)
{
    proto_t *p = arg;
    tmx_peer_t src = p->up.peer_by_uuid(p->up.arg, src_uuid);
    proto_stream_t *s;
    proto_in_t in = {0};

    if (src == TMX_PEER_NONE) {
        parse_fail(p, src, "sender is not a peer of ours", total);
        return NULL;
    }
    if (first_len < sizeof(wire_tmh_t) || first_len > total ||
        *(const unsigned char *)first != WIRE_OP_EAGER) { /* the opcode byte */
        parse_fail(p, src, "a packet in pieces that is not an eager message", total);
        return NULL;
    }
    if (parse_packet(p, src, first, first_len, &in) != 0)
        return NULL;
    in.payload_len = total - (first_len - in.payload_len);
    if (p->offer_on)
        rx_count(p, src_uuid, &in);
    if ((s = stream_open(p, src_uuid, src, &in)) != NULL)
        stream_put(s, in.payload, first_len - (size_t)(in.payload - (const unsigned char *)first));
    return s;
}

void proto_stream_more(void *arg, void *sink, const void *piece, size_t len)
{
    stream_put(sink, piece, len);
}

/* The message is whole, or never will be (tl.h: enum tl_stream_end); one
 * whose pieces did not add up to its length is broken. Its sender's peer
 * number is looked up again: tmx_peer_add may have given the process a
 * number of its own while the message streamed in. */
void proto_stream_end(void *arg, void *sink, int how)
{
    proto_t *p = arg;
    proto_stream_t *s = sink;
    proto_req_t *req = s->req;
    proto_msg_t *msg = s->msg;
    tmx_peer_t src = p->up.peer_by_uuid(p->up.arg, s->uuid);
    tmx_status_t st = TMX_OK;
    match_recv_t *r;

    if (how == TL_STREAM_WHOLE && s->left != 0) {
        util_warn("a message from peer %u in pieces ended %s its length", src,
                  s->left == SIZE_MAX ? "past" : "short of");
        how = TL_STREAM_BROKEN;
    }
    if (how != TL_STREAM_WHOLE)
        st = how == TL_STREAM_GONE ? TMX_ERR_PEER_FAILED : TMX_ERR_PROTO;
    util_dlist_unlink(&s->link);
    stream_free(p, s);
    if (req != NULL) {
        if (src != TMX_PEER_NONE)
            req->comp.source = src;
        req_complete(p, req, st == TMX_OK ? recv_status(req) : st);
        return;
    }
    if (st != TMX_OK) {
        msg_free(p, msg);
        return;
    }
    if (src != TMX_PEER_NONE)
        msg->m.src = src;
    if ((r = match_find_recv(&p->match, msg->m.src, msg->m.tag)) != NULL) {
        recv_take(p, util_container_of(r, proto_req_t, recv));
        proto_msg_deliver(p, msg, util_container_of(r, proto_req_t, recv));
    } else if (match_add_msg(&p->match, &msg->m) == TMX_OK) {
        p->up.msg_kept(p->up.arg, msg, msg->len);
    } else {
        util_error("out of memory: message from peer %u tag 0x%llx lost", msg->m.src,
                   (unsigned long long)msg->m.tag);
        msg_free(p, msg);
    }
}

const tl_stream_cb_t proto_stream_cb = {proto_stream_begin, proto_stream_more, proto_stream_end};

