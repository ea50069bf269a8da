/*
 * The protocols alone, without core or a real transport: proto is driven
 * through its own interface, with the upcalls played by this test and a
 * transport that records every packet it is given. What it checks is the
 * wire and the upcalls proto makes: HELLO first, eager and rendezvous
 * choice, the FIN and who may send it, remote-read checks, truncation,
 * unexpected messages and their accounting, FINs that wait for room,
 * admission at the bound, and rendezvous by write on both sides (CTS,
 * the writes, WDONE) against forged and stale packets.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "unit.h"

#include "offload/offload.h"
#include "proto/proto.h"
#include "proto/wire.h"

#define N_PEERS 2
#define MAX_PKTS 32
#define EAGER_LIMIT 64
#define UUID_A 0xa0a0a0a0a0a0a0a0ULL /* peer 0 */
#define UUID_B 0xb0b0b0b0b0b0b0b0ULL /* peer 1 */
#define UUID_STRANGER 0x5555555555555555ULL

typedef struct pkt {
    tmx_peer_t to;
    size_t len;
    unsigned char data[256];
} pkt_t;

/* The test's world: a fake transport and a fake core. */
typedef struct world {
    proto_t p;
    tl_iface_t iface;
    tl_ep_t ep[N_PEERS];
    proto_peer_t pp[N_PEERS];
    int full;                   /* send answers TMX_ERR_AGAIN */
    tmx_status_t get_status;    /* what get answers; TMX_OK copies at once */
    tl_get_op_t *get_pending;
    unsigned get_kind;          /* the mechanism of the last read */
    tmx_status_t put_status;    /* what put answers; TMX_OK copies at once */
    int n_puts;
    pkt_t pkts[MAX_PKTS];
    int n_pkts;
    proto_req_t *done[32];      /* complete() calls, in order */
    tmx_status_t done_st[32];
    int n_done;
    size_t kept_bytes;
    int msgs_live;
    proto_msg_t *msgs[32];      /* every message allocated, until freed */
    int implicit_calls;
    tmx_peer_t a_num;           /* UUID_A's peer number (tmx_peer_add may change one) */
    int msg_alloc_fail;         /* msg_alloc answers NULL (no memory) */
} world_t;

static world_t *W; /* one world per case (each case runs in its own child) */

/* ------------------------------------------------------------ transport */

static tmx_status_t fake_send(tl_ep_t *ep, const struct iovec *iov, int iovcnt)
{
    pkt_t *k;

    if (W->full)
        return TMX_ERR_AGAIN;
    assert_true(W->n_pkts < MAX_PKTS);
    k = &W->pkts[W->n_pkts++];
    k->to = (tmx_peer_t)(ep - W->ep); /* the peer number is the index */
    k->len = 0;
    for (int i = 0; i < iovcnt; i++) {
        assert_true(k->len + iov[i].iov_len <= sizeof(k->data));
        memcpy(k->data + k->len, iov[i].iov_base, iov[i].iov_len);
        k->len += iov[i].iov_len;
    }
    return TMX_OK;
}

/* Reads in this very process: raddr is a pointer of ours. */
static tmx_status_t fake_get(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                             unsigned kind, tl_get_op_t *op)
{
    (void)ep;
    (void)rkey;
    W->get_kind = kind;
    if (tl_get_kind_check(tl_ep_iface(ep), kind) != TMX_OK)
        return TMX_ERR_INVALID;
    if (W->get_status == TMX_INPROGRESS) {
        W->get_pending = op;
        return TMX_INPROGRESS;
    }
    if (W->get_status == TMX_OK)
        memcpy(dst, (const void *)(uintptr_t)raddr, len);
    return W->get_status;
}

/* Writes in this very process: raddr is a pointer of ours. */
static tmx_status_t fake_put(tl_ep_t *ep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                             uint64_t lkey, unsigned kind)
{
    (void)rkey;
    (void)lkey;
    if (tl_put_kind_check(tl_ep_iface(ep), kind) != TMX_OK)
        return TMX_ERR_INVALID;
    W->n_puts++;
    if (W->put_status == TMX_OK)
        memcpy((void *)(uintptr_t)raddr, src, len);
    return W->put_status;
}

/* Claim words of offers: a token is open (as any the test makes up) until
 * taken or closed. */
enum { FAKE_OPEN, FAKE_TAKEN, FAKE_CLOSED };
static uint64_t fake_tokens[64];
static int fake_states[64];
static int n_fake_tokens;
static uint64_t fake_next_token = 0x100;

static int *fake_state(uint64_t token)
{
    for (int i = 0; i < n_fake_tokens; i++) {
        if (fake_tokens[i] == token)
            return &fake_states[i];
    }
    assert_true(n_fake_tokens < 64);
    fake_tokens[n_fake_tokens] = token;
    fake_states[n_fake_tokens] = FAKE_OPEN;
    return &fake_states[n_fake_tokens++];
}

static tmx_status_t fake_offer_open(tl_iface_t *iface, uint64_t *token)
{
    (void)iface;
    *token = fake_next_token++;
    *fake_state(*token) = FAKE_OPEN;
    return TMX_OK;
}

static int fake_offer_take_own(tl_iface_t *iface, uint64_t token)
{
    int *st = fake_state(token);

    (void)iface;
    if (*st != FAKE_OPEN)
        return 0;
    *st = FAKE_TAKEN;
    return 1;
}

static int fake_offer_take(tl_ep_t *ep, uint64_t token)
{
    return fake_offer_take_own(tl_ep_iface(ep), token);
}

static void fake_offer_close(tl_iface_t *iface, uint64_t token)
{
    (void)iface;
    *fake_state(token) = FAKE_CLOSED;
}

static int fake_offer_live(tl_ep_t *ep, uint64_t token)
{
    (void)ep;
    return *fake_state(token) == FAKE_OPEN;
}

static const tl_ops_t fake_ops = {.name = "fake",
                                  .send = fake_send,
                                  .get = fake_get,
                                  .put = fake_put,
                                  .offer_open = fake_offer_open,
                                  .offer_take_own = fake_offer_take_own,
                                  .offer_take = fake_offer_take,
                                  .offer_close = fake_offer_close,
                                  .offer_live = fake_offer_live};

/* ----------------------------------------------------------------- core */

static void up_complete(void *arg, proto_req_t *req, tmx_status_t st)
{
    (void)arg;
    assert_true(W->n_done < 32);
    W->done[W->n_done] = req;
    W->done_st[W->n_done++] = st;
}

static proto_msg_t *up_msg_alloc(void *arg)
{
    proto_msg_t *m;

    (void)arg;
    if (W->msg_alloc_fail)
        return NULL;
    m = calloc(1, sizeof(*m));
    for (int i = 0; i < 32; i++) {
        if (W->msgs[i] == NULL) {
            W->msgs[i] = m;
            W->msgs_live++;
            return m;
        }
    }
    fail_msg("more than 32 messages");
    return NULL;
}

static void up_msg_kept(void *arg, proto_msg_t *msg, size_t bytes)
{
    (void)arg;
    (void)msg;
    W->kept_bytes += bytes;
}

static void up_msg_free(void *arg, proto_msg_t *msg)
{
    (void)arg;
    assert_null(msg->payload); /* proto frees what it allocated */
    for (int i = 0; i < 32; i++) {
        if (W->msgs[i] == msg)
            W->msgs[i] = NULL;
    }
    W->msgs_live--;
    free(msg);
}

static tmx_status_t up_peer_ep(void *arg, tmx_peer_t peer, tl_ep_t **ep, proto_peer_t **pp)
{
    (void)arg;
    if (peer >= N_PEERS)
        return TMX_ERR_PEER_FAILED;
    *ep = &W->ep[peer];
    *pp = &W->pp[peer];
    return TMX_OK;
}

static tmx_peer_t up_peer_by_uuid(void *arg, uint64_t uuid)
{
    (void)arg;
    return uuid == UUID_A ? W->a_num : uuid == UUID_B ? 1 : TMX_PEER_NONE;
}

static tmx_status_t up_peer_add_implicit(void *arg, uint64_t uuid, const void *addr, size_t len,
                                         tmx_peer_t *out)
{
    (void)arg;
    (void)uuid;
    W->implicit_calls++;
    if (len != 4 || memcmp(addr, "ADDR", 4) != 0)
        return TMX_ERR_INVALID;
    *out = TMX_PEER_IMPLICIT;
    return TMX_OK;
}

static tmx_status_t up_address(void *arg, void *buf, size_t room, size_t *used)
{
    (void)arg;
    *used = 4;
    if (room < 4)
        return TMX_ERR_NO_SPACE;
    memcpy(buf, "ADDR", 4);
    return TMX_OK;
}

static int setup(void **state)
{
    proto_upcalls_t up = {NULL, up_complete, up_msg_alloc, up_msg_kept, up_msg_free,
                          up_peer_ep, up_peer_by_uuid, up_peer_add_implicit, up_address};

    W = calloc(1, sizeof(*W));
    W->iface.ops = &fake_ops;
    W->iface.eager_limit = EAGER_LIMIT;
    W->iface.max_packet = 256;
    assert_int_equal(tl_iface_register(&W->iface), TMX_OK);
    for (int i = 0; i < N_PEERS; i++) {
        tl_ep_init(&W->ep[i], &W->iface, i == 0 ? UUID_A : UUID_B, (tmx_peer_t)i);
        W->pp[i] = (proto_peer_t){0};
    }
    W->iface.get_kinds = TL_GET_DIRECT | TL_GET_COPY;
    assert_int_equal(proto_init(&W->p, &up, NULL), TMX_OK);
    assert_int_equal(proto_iface_add(&W->p, &W->iface), TMX_OK);
    *state = W;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    proto_fini(&W->p);
    for (int i = 0; i < 32; i++) {
        if (W->msgs[i] != NULL)
            proto_msg_clear(W->msgs[i]);
        free(W->msgs[i]);
    }
    tl_iface_unregister(&W->iface);
    free(W);
    return 0;
}

/* ------------------------------------------------------------- helpers */

static void req_send(proto_req_t *r, void *buf, size_t len, uint32_t flags)
{
    proto_req_init(r);
    r->comp.op = TMX_OP_TSEND;
    r->flags = flags;
    r->buf = buf;
    r->len = len;
}

static void req_recv(proto_req_t *r, void *buf, size_t len, tmx_peer_t src, uint64_t tag)
{
    proto_req_init(r);
    r->comp.op = TMX_OP_TRECV;
    r->buf = buf;
    r->len = len;
    r->recv.src = src;
    r->recv.tag = tag;
    r->recv.ignore = 0;
}

static wire_tmh_t pkt_tmh(const pkt_t *k)
{
    wire_tmh_t h;

    assert_true(k->len >= sizeof(h));
    memcpy(&h, k->data, sizeof(h));
    wire_tmh_unpack(&h);
    return h;
}

static wire_rvh_t pkt_rvh(const pkt_t *k)
{
    wire_rvh_t r;

    assert_true(k->len >= sizeof(wire_tmh_t) + sizeof(r));
    memcpy(&r, k->data + sizeof(wire_tmh_t), sizeof(r));
    wire_rvh_unpack(&r);
    return r;
}

/* A packet from uuid, as a transport hands it up. */
static void in_eager(uint64_t uuid, uint64_t tag, const void *payload, size_t len)
{
    unsigned char b[256];
    wire_tmh_t h;

    wire_tmh_pack(&h, WIRE_OP_EAGER, 0, 0, tag);
    memcpy(b, &h, sizeof(h));
    memcpy(b + sizeof(h), payload, len);
    proto_recv_cb(&W->p, uuid, b, sizeof(h) + len);
}

static void in_rvh(uint64_t uuid, uint8_t op, uint16_t flags, uint32_t app_ctx, uint64_t tag,
                   uint64_t va, uint64_t rkey, uint64_t len)
{
    unsigned char b[sizeof(wire_tmh_t) + sizeof(wire_rvh_t)];
    wire_tmh_t h;
    wire_rvh_t r;

    wire_tmh_pack(&h, op, flags, app_ctx, tag);
    wire_rvh_pack(&r, va, rkey, len);
    memcpy(b, &h, sizeof(h));
    memcpy(b + sizeof(h), &r, sizeof(r));
    proto_recv_cb(&W->p, uuid, b, sizeof(b));
}

static wire_ctsh_t pkt_ctsh(const pkt_t *k)
{
    wire_ctsh_t c;

    assert_true(k->len == sizeof(wire_tmh_t) + sizeof(c) || k->len == sizeof(wire_tmh_t) + sizeof(c) + 8);
    memcpy(&c, k->data + sizeof(wire_tmh_t), sizeof(c));
    wire_ctsh_unpack(&c);
    return c;
}

/* A TMH and a CTSH from uuid (CTS; RTR, then the token). */
static void in_tmh_ctsh(uint64_t uuid, uint8_t op, uint32_t app_ctx, uint64_t tag, uint64_t va, uint64_t rkey,
                        uint64_t len, uint64_t skey)
{
    unsigned char b[sizeof(wire_tmh_t) + sizeof(wire_ctsh_t) + 8];
    uint64_t token = htole64(rkey ^ 0x70c0); /* an RTR's: one per offer */
    wire_tmh_t h;
    wire_ctsh_t c;

    wire_tmh_pack(&h, op, 0, app_ctx, tag);
    wire_ctsh_pack(&c, va, rkey, len, skey);
    memcpy(b, &h, sizeof(h));
    memcpy(b + sizeof(h), &c, sizeof(c));
    memcpy(b + sizeof(h) + sizeof(c), &token, sizeof(token));
    proto_recv_cb(&W->p, uuid, b, sizeof(h) + sizeof(c) + (op == WIRE_OP_RTR ? sizeof(token) : 0));
}

static void in_cts(uint64_t uuid, uint32_t app_ctx, uint64_t va, uint64_t rkey, uint64_t len,
                   uint64_t skey)
{
    in_tmh_ctsh(uuid, WIRE_OP_CTS, app_ctx, 0, va, rkey, len, skey);
}

/* Every rendezvous of the fake transport by write. */
static void table_write(void)
{
    W->iface.put_kinds = TL_PUT_DIRECT;
    W->p.tls[0].n_rules = 1;
    W->p.tls[0].rules[0] = (proto_rule_t){0, PROTO_WRITE};
}

/* ---------------------------------------------------------------- cases */

/* The first packet to a peer is HELLO with our address; an eager send
 * completes at once, its payload after the TMH. */
static void eager_send_hello_first(void **state)
{
    proto_req_t r;
    char buf[10] = "abcdefghi";

    (void)state;
    req_send(&r, buf, sizeof(buf), 0);
    assert_int_equal(proto_send(&W->p, &r, 1, 0x77), TMX_OK);
    assert_int_equal(W->n_pkts, 2);
    assert_int_equal(pkt_tmh(&W->pkts[0]).opcode, WIRE_OP_HELLO);
    assert_memory_equal(W->pkts[0].data + sizeof(wire_tmh_t), "ADDR", 4);
    assert_int_equal(pkt_tmh(&W->pkts[1]).opcode, WIRE_OP_EAGER);
    assert_int_equal(pkt_tmh(&W->pkts[1]).tag, 0x77);
    assert_int_equal(W->pkts[1].len, sizeof(wire_tmh_t) + sizeof(buf));
    assert_memory_equal(W->pkts[1].data + sizeof(wire_tmh_t), buf, sizeof(buf));
    assert_int_equal(W->n_done, 1);
    assert_ptr_equal(W->done[0], &r);
    assert_int_equal(W->done_st[0], TMX_OK);
    /* one HELLO per peer */
    req_send(&r, buf, 1, 0);
    assert_int_equal(proto_send(&W->p, &r, 1, 1), TMX_OK);
    assert_int_equal(W->n_pkts, 3);
    assert_int_equal(pkt_tmh(&W->pkts[2]).opcode, WIRE_OP_EAGER);
}

/* A send the transport refuses leaves nothing behind and completes
 * nothing: the caller retries. */
static void send_refused_untouched(void **state)
{
    proto_req_t r;
    char buf[100] = {0};

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    W->full = 1;
    req_send(&r, buf, 8, 0);
    assert_int_equal(proto_send(&W->p, &r, 0, 1), TMX_ERR_AGAIN);
    req_send(&r, buf, sizeof(buf), 0);
    assert_int_equal(proto_send(&W->p, &r, 0, 1), TMX_ERR_AGAIN);
    assert_int_equal(r.fin_wait, 0); /* no rendezvous slot held */
    assert_int_equal(W->n_done, 0);
    assert_int_equal(proto_send(&W->p, &r, 7, 1), TMX_ERR_PEER_FAILED);
}

/* Above the eager limit, and for synchronous sends at any size, the send
 * is a rendezvous: TMH|RVH naming the buffer, a key under which only that
 * buffer may be read, and completion on the FIN of that very peer. */
static void rendezvous_send_and_fin(void **state)
{
    proto_req_t r, s;
    char big[EAGER_LIMIT + 1] = {0}, small[4] = {0};
    wire_tmh_t h;
    wire_rvh_t v;

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    proto_peer_hello_set(&W->pp[1]);
    req_send(&r, big, sizeof(big), 0);
    assert_int_equal(proto_send(&W->p, &r, 0, 5), TMX_OK);
    req_send(&s, small, sizeof(small), TMX_OP_FLAG_SYNC);
    assert_int_equal(proto_send(&W->p, &s, 0, 6), TMX_OK);
    assert_int_equal(W->n_pkts, 2);
    assert_int_equal(W->n_done, 0);
    h = pkt_tmh(&W->pkts[0]);
    v = pkt_rvh(&W->pkts[0]);
    assert_int_equal(h.opcode, WIRE_OP_RNDV);
    assert_int_equal(v.va, (uintptr_t)big);
    assert_int_equal(v.len, sizeof(big));
    assert_int_equal(pkt_tmh(&W->pkts[1]).opcode, WIRE_OP_RNDV);
    assert_int_equal(pkt_rvh(&W->pkts[1]).len, sizeof(small));
    /* the key opens that buffer only */
    assert_int_equal(proto_mem_check_cb(&W->p, v.va, v.len, v.rkey), TMX_OK);
    assert_int_equal(proto_mem_check_cb(&W->p, v.va + 1, 8, v.rkey), TMX_OK);
    assert_int_not_equal(proto_mem_check_cb(&W->p, v.va, v.len + 1, v.rkey), TMX_OK);
    assert_int_not_equal(proto_mem_check_cb(&W->p, v.va - 1, 2, v.rkey), TMX_OK);
    assert_int_not_equal(proto_mem_check_cb(&W->p, v.va, 8, v.rkey ^ (1ULL << 40)), TMX_OK);
    assert_int_not_equal(proto_mem_check_cb(&W->p, v.va, 8, pkt_rvh(&W->pkts[1]).rkey), TMX_OK);
    /* a FIN from another peer, with a wrong key or a wrong address is dropped */
    in_rvh(UUID_B, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va, v.rkey, v.len);
    in_rvh(UUID_A, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va, v.rkey ^ 1, v.len);
    in_rvh(UUID_A, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va + 8, v.rkey, v.len);
    in_rvh(UUID_STRANGER, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va, v.rkey, v.len);
    assert_int_equal(W->p.dropped, 4);
    assert_int_equal(W->n_done, 0);
    /* the right one completes the send, and the key stops working */
    in_rvh(UUID_A, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va, v.rkey, v.len);
    assert_int_equal(W->n_done, 1);
    assert_ptr_equal(W->done[0], &r);
    assert_int_equal(W->done_st[0], TMX_OK);
    assert_int_not_equal(proto_mem_check_cb(&W->p, v.va, v.len, v.rkey), TMX_OK);
    /* a repeat is stale */
    in_rvh(UUID_A, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va, v.rkey, v.len);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->p.dropped, 5);
    /* a FIN saying the reader failed fails the send */
    h = pkt_tmh(&W->pkts[1]);
    v = pkt_rvh(&W->pkts[1]);
    in_rvh(UUID_A, WIRE_OP_FIN, 1u << 15, h.app_ctx, 6, v.va, v.rkey, v.len);
    assert_int_equal(W->n_done, 2);
    assert_ptr_equal(W->done[1], &s);
    assert_int_equal(W->done_st[1], TMX_ERR_IO);
}

/* A rendezvous request that cannot be kept as an unexpected message (no
 * memory) is refused at once: the receiver sends the FIN of a failed read,
 * and the sender's send fails instead of waiting for ever for a read and a
 * FIN that never come. Here the world is both sides: our own request comes
 * back to us from UUID_A. */
static void unexpected_rendezvous_no_memory_refused(void **state)
{
    proto_req_t r;
    char big[EAGER_LIMIT + 1] = {0};
    wire_tmh_t h;
    wire_rvh_t v;

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    req_send(&r, big, sizeof(big), 0);
    assert_int_equal(proto_send(&W->p, &r, 0, 9), TMX_OK);
    assert_int_equal(W->n_pkts, 1);
    h = pkt_tmh(&W->pkts[0]);
    v = pkt_rvh(&W->pkts[0]);
    W->msg_alloc_fail = 1;
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, h.app_ctx, 9, v.va, v.rkey, v.len);
    assert_int_equal(W->msgs_live, 0);
    assert_int_equal(W->n_pkts, 2); /* the refusal */
    assert_int_equal(W->pkts[1].to, 0);
    assert_int_equal(pkt_tmh(&W->pkts[1]).opcode, WIRE_OP_FIN);
    assert_int_equal(pkt_tmh(&W->pkts[1]).flags, 1u << 15);
    assert_int_equal(pkt_tmh(&W->pkts[1]).app_ctx, h.app_ctx);
    assert_int_equal(pkt_rvh(&W->pkts[1]).rkey, v.rkey);
    assert_int_equal(W->n_done, 0);
    in_rvh(UUID_A, WIRE_OP_FIN, pkt_tmh(&W->pkts[1]).flags, h.app_ctx, 9, pkt_rvh(&W->pkts[1]).va,
           pkt_rvh(&W->pkts[1]).rkey, pkt_rvh(&W->pkts[1]).len);
    assert_int_equal(W->n_done, 1);
    assert_ptr_equal(W->done[0], &r);
    assert_int_not_equal(W->done_st[0], TMX_OK);
    /* an eager message lost so has no sender waiting: nothing is sent */
    in_eager(UUID_A, 10, "abc", 3);
    assert_int_equal(W->n_pkts, 2);
}

/* A burst of rendezvous sends grows the slot array; once the last is
 * over it goes back to its first size, and a key naming a slot beyond
 * that opens nothing. */
static void rendezvous_burst_gives_slots_back(void **state)
{
    enum { N = 100 };
    static proto_req_t r[N];
    static char big[N][EAGER_LIMIT + 1];
    static wire_tmh_t h[N];
    static wire_rvh_t v[N];

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    for (int i = 0; i < N; i++) {
        req_send(&r[i], big[i], sizeof(big[i]), 0);
        assert_int_equal(proto_send(&W->p, &r[i], 0, 5), TMX_OK);
        assert_int_equal(W->n_pkts, 1);
        h[i] = pkt_tmh(&W->pkts[0]);
        v[i] = pkt_rvh(&W->pkts[0]);
        W->n_pkts = 0;
    }
    assert_int_equal(W->p.n_rndv_slots, 128);
    for (int i = 0; i < N; i++) {
        assert_int_equal(W->p.n_rndv_slots, 128); /* while one is under way */
        assert_int_equal(proto_mem_check_cb(&W->p, v[N - 1].va, v[N - 1].len, v[N - 1].rkey), TMX_OK);
        in_rvh(UUID_A, WIRE_OP_FIN, 0, h[i].app_ctx, 5, v[i].va, v[i].rkey, v[i].len);
        assert_int_equal(W->n_done, 1);
        assert_ptr_equal(W->done[0], &r[i]);
        W->n_done = 0;
    }
    assert_int_equal(W->p.n_rndv_slots, 64);
    assert_int_not_equal(proto_mem_check_cb(&W->p, v[N - 1].va, v[N - 1].len, v[N - 1].rkey), TMX_OK);
    in_rvh(UUID_A, WIRE_OP_FIN, 0, h[N - 1].app_ctx, 5, v[N - 1].va, v[N - 1].rkey, v[N - 1].len);
    assert_int_equal(W->n_done, 0); /* a FIN naming a slot gone is stale */
    /* the slots left work as before */
    req_send(&r[0], big[0], sizeof(big[0]), 0);
    assert_int_equal(proto_send(&W->p, &r[0], 0, 5), TMX_OK);
    h[0] = pkt_tmh(&W->pkts[0]);
    v[0] = pkt_rvh(&W->pkts[0]);
    assert_int_equal(proto_mem_check_cb(&W->p, v[0].va, v[0].len, v[0].rkey), TMX_OK);
    in_rvh(UUID_A, WIRE_OP_FIN, 0, h[0].app_ctx, 5, v[0].va, v[0].rkey, v[0].len);
    assert_int_equal(W->n_done, 1);
}

/* A message longer than the posted buffer delivers what fits and
 * completes with TMX_ERR_TRUNCATED; the completion names the sender. */
static void expected_eager_truncated(void **state)
{
    proto_req_t r;
    char got[4] = {0};

    (void)state;
    req_recv(&r, got, sizeof(got), TMX_ANY_SOURCE, 9);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_ERR_NO_MESSAGE);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    assert_true(proto_req_waiting(&r));
    in_eager(UUID_B, 8, "xxxxxxxx", 8); /* another tag: unexpected */
    in_eager(UUID_B, 9, "12345678", 8);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_ERR_TRUNCATED);
    assert_int_equal(r.comp.source, 1);
    assert_int_equal(r.comp.length, 4);
    assert_int_equal(r.comp.msg_length, 8);
    assert_memory_equal(got, "1234", 4);
    assert_false(proto_req_waiting(&r));
    assert_int_equal(W->msgs_live, 1);
    assert_int_equal(W->kept_bytes, 8);
}

/* An unexpected eager message is copied, counted with its payload, and
 * delivered to the receive that comes later; then freed. */
static void unexpected_eager_then_receive(void **state)
{
    proto_req_t r;
    char got[16] = {0};

    (void)state;
    in_eager(UUID_A, 3, "hello", 5);
    in_eager(UUID_A, 3, "world", 5);
    assert_int_equal(W->msgs_live, 2);
    assert_int_equal(W->kept_bytes, 10);
    req_recv(&r, got, sizeof(got), 0, 3);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_OK);
    assert_memory_equal(got, "hello", 5); /* the earliest first */
    assert_int_equal(r.comp.length, 5);
    assert_int_equal(W->msgs_live, 1);
    /* a receive naming another peer does not take it */
    req_recv(&r, got, sizeof(got), 1, 3);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_ERR_NO_MESSAGE);
}

/* An unexpected rendezvous message holds only its header; once matched,
 * the receiver reads the sender's buffer and answers FIN naming it. */
static void unexpected_rendezvous_read_then_fin(void **state)
{
    proto_req_t r;
    char src_buf[100], got[100] = {0};
    wire_tmh_t h;
    wire_rvh_t v;

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    memset(src_buf, 'r', sizeof(src_buf));
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 42, 7, (uintptr_t)src_buf, 0x1234, sizeof(src_buf));
    assert_int_equal(W->msgs_live, 1);
    assert_int_equal(W->kept_bytes, 0);
    W->get_status = TMX_INPROGRESS;
    req_recv(&r, got, sizeof(got), TMX_ANY_SOURCE, 7);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->msgs_live, 0);
    assert_int_equal(W->n_done, 0); /* not before the data is there */
    assert_int_equal(W->n_pkts, 0);
    memcpy(got, src_buf, sizeof(got));
    W->get_pending->done(W->get_pending, TMX_OK);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_OK);
    assert_int_equal(W->n_pkts, 1);
    h = pkt_tmh(&W->pkts[0]);
    v = pkt_rvh(&W->pkts[0]);
    assert_int_equal(W->pkts[0].to, 0);
    assert_int_equal(h.opcode, WIRE_OP_FIN);
    assert_int_equal(h.flags, 0);
    assert_int_equal(h.app_ctx, 42);
    assert_int_equal(v.va, (uintptr_t)src_buf);
    assert_int_equal(v.rkey, 0x1234);
}

/* WIRE_FLAG_WRITER is a rendezvous request's alone: on an eager packet or
 * a FIN it is dropped; a request carrying it is kept, and without the
 * engine (or from a thread that is not the engine's) the receiver reads
 * as for any request. */
static void writer_flag_on_requests_only(void **state)
{
    proto_req_t r;
    char src_buf[100], got[100] = {0};
    unsigned char b[sizeof(wire_tmh_t) + 1];
    wire_tmh_t h;

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    wire_tmh_pack(&h, WIRE_OP_EAGER, WIRE_FLAG_WRITER, 0, 7);
    memcpy(b, &h, sizeof(h));
    b[sizeof(h)] = 'x';
    proto_recv_cb(&W->p, UUID_A, b, sizeof(b));
    assert_int_equal(W->p.dropped, 1);
    in_rvh(UUID_A, WIRE_OP_FIN, WIRE_FLAG_WRITER, 1, 7, 0, 0, 0);
    assert_int_equal(W->p.dropped, 2);
    assert_int_equal(W->msgs_live, 0);
    memset(src_buf, 'w', sizeof(src_buf));
    in_rvh(UUID_A, WIRE_OP_RNDV, WIRE_FLAG_WRITER | WIRE_FLAG_DATA, 42, 7, (uintptr_t)src_buf, 0x77,
           sizeof(src_buf));
    assert_int_equal(W->p.dropped, 3); /* DATA says 8 more bytes that are not there */
    in_rvh(UUID_A, WIRE_OP_RNDV, WIRE_FLAG_WRITER, 42, 7, (uintptr_t)src_buf, 0x77, sizeof(src_buf));
    assert_int_equal(W->p.dropped, 3);
    assert_int_equal(W->msgs_live, 1);
    W->get_status = TMX_INPROGRESS;
    req_recv(&r, got, sizeof(got), TMX_ANY_SOURCE, 7);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_non_null(W->get_pending); /* read, not a CTS */
    assert_int_equal(W->n_pkts, 0);
    memcpy(got, src_buf, sizeof(got));
    W->get_pending->done(W->get_pending, TMX_OK);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(pkt_tmh(&W->pkts[0]).opcode, WIRE_OP_FIN);
    assert_int_equal(W->p.wr_engine, 0);
}

/* A read that fails fails the receive and tells the sender so in its FIN. */
static void failed_read_fails_both_sides(void **state)
{
    proto_req_t r;
    char got[100];

    (void)state;
    proto_peer_hello_set(&W->pp[1]);
    req_recv(&r, got, sizeof(got), 1, 7);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    W->get_status = TMX_ERR_IO;
    in_rvh(UUID_B, WIRE_OP_RNDV, 0, 3, 7, 0x1000, 0x99, 100);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_ERR_IO);
    assert_int_equal(r.comp.length, 0); /* nothing delivered (tmx.h) */
    assert_int_equal(r.comp.msg_length, 100);
    assert_int_equal(W->n_pkts, 1);
    assert_int_equal(pkt_tmh(&W->pkts[0]).opcode, WIRE_OP_FIN);
    assert_int_equal(pkt_tmh(&W->pkts[0]).flags, 1u << 15);
}

/* A read that fails later, or a receive waiting for its sender's write
 * when the sender is gone, delivered nothing: the completion's length
 * says 0 (tmx.h), the message's length stays in msg_length. */
static void failed_rendezvous_delivers_nothing(void **state)
{
    proto_req_t r;
    char src[100], got[100];

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    memset(src, 's', sizeof(src));
    req_recv(&r, got, sizeof(got), 0, 7);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    W->get_status = TMX_INPROGRESS;
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 3, 7, (uintptr_t)src, 0x99, sizeof(src));
    assert_int_equal(W->n_done, 0);
    W->get_pending->done(W->get_pending, TMX_ERR_PEER_FAILED);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_ERR_PEER_FAILED);
    assert_int_equal(r.comp.length, 0);
    assert_int_equal(r.comp.msg_length, sizeof(src));
    /* by write: the sender is gone before its WDONE (core then completes
     * the receive with TMX_ERR_PEER_FAILED) */
    table_write();
    req_recv(&r, got, 60, 0, 8);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 4, 8, (uintptr_t)src, 0x9a, sizeof(src));
    assert_int_equal(proto_req_writer(&r), 0);
    assert_int_equal(r.comp.length, 60);
    proto_req_abort(&W->p, &r);
    assert_false(proto_req_waiting(&r));
    assert_int_equal(r.comp.length, 0);
    assert_int_equal(r.comp.msg_length, sizeof(src));
}

/* A FIN that finds the transport full waits in proto, and goes out on
 * proto_progress once there is room: a sender never waits forever. */
static void fin_waits_for_room(void **state)
{
    proto_req_t r;
    char src_buf[80] = {0}, got[80];

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 11, 1, (uintptr_t)src_buf, 5, sizeof(src_buf));
    W->full = 1;
    req_recv(&r, got, sizeof(got), 0, 1);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->n_done, 1); /* the data is here: the receive is done */
    assert_true(proto_has_work(&W->p));
    assert_int_equal(proto_progress(&W->p), 0);
    W->full = 0;
    assert_int_equal(proto_progress(&W->p), 1);
    assert_false(proto_has_work(&W->p));
    assert_int_equal(W->n_pkts, 1);
    assert_int_equal(pkt_tmh(&W->pkts[0]).opcode, WIRE_OP_FIN);
    assert_int_equal(pkt_tmh(&W->pkts[0]).app_ctx, 11);
}

/* A FIN that must wait for room when there is no memory to keep it waits
 * in a spare, and goes once there is room: the sender is not left waiting
 * until we fail. Past the spares it is lost (logged). */
static void fin_waits_without_memory(void **state)
{
    proto_req_t r[PROTO_CTRL_SPARES + 1];
    char src_buf[80] = {0}, got[80];

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    W->full = 1;
    proto_test_fail_alloc(PROTO_CTRL_SPARES + 1);
    for (uint32_t i = 0; i < PROTO_CTRL_SPARES + 1; i++) {
        in_rvh(UUID_A, WIRE_OP_RNDV, 0, 100 + i, 1, (uintptr_t)src_buf, 5, sizeof(src_buf));
        req_recv(&r[i], got, sizeof(got), 0, 1);
        assert_int_equal(proto_recv_match(&W->p, &r[i]), TMX_OK);
    }
    proto_test_fail_alloc(0);
    assert_int_equal(W->n_done, PROTO_CTRL_SPARES + 1); /* the data is here: done */
    assert_true(proto_has_work(&W->p));
    W->full = 0;
    assert_int_equal(proto_progress(&W->p), PROTO_CTRL_SPARES);
    assert_false(proto_has_work(&W->p));
    assert_int_equal(W->n_pkts, PROTO_CTRL_SPARES);
    for (int i = 0; i < PROTO_CTRL_SPARES; i++) {
        assert_int_equal(pkt_tmh(&W->pkts[i]).opcode, WIRE_OP_FIN);
        assert_int_equal(pkt_tmh(&W->pkts[i]).app_ctx, 100 + i);
    }
    /* the spares are free again */
    W->full = 1;
    proto_test_fail_alloc(1);
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 200, 1, (uintptr_t)src_buf, 5, sizeof(src_buf));
    req_recv(&r[0], got, sizeof(got), 0, 1);
    assert_int_equal(proto_recv_match(&W->p, &r[0]), TMX_OK);
    W->full = 0;
    assert_int_equal(proto_progress(&W->p), 1);
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).app_ctx, 200);
}

/* At the bound on unexpected memory, a packet that would be kept waits in
 * the transport; one that a posted receive takes, a FIN and anything that
 * will be dropped are admitted. */
static void admission_at_the_bound(void **state)
{
    proto_req_t r;
    char got[8];
    unsigned char b[sizeof(wire_tmh_t) + 4];
    wire_tmh_t h;

    (void)state;
    wire_tmh_pack(&h, WIRE_OP_EAGER, 0, 0, 4);
    memcpy(b, &h, sizeof(h));
    assert_int_equal(proto_admit_cb(&W->p, UUID_A, b, sizeof(b)), 1); /* not full */
    W->p.unexp_full = 1;
    assert_int_equal(proto_admit_cb(&W->p, UUID_A, b, sizeof(b)), 0);
    assert_int_equal(proto_admit_cb(&W->p, UUID_STRANGER, b, sizeof(b)), 1);
    assert_int_equal(proto_admit_cb(&W->p, UUID_A, b, 3), 1);
    req_recv(&r, got, sizeof(got), 0, 4);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    assert_int_equal(proto_admit_cb(&W->p, UUID_A, b, sizeof(b)), 1);
    assert_int_equal(proto_admit_cb(&W->p, UUID_B, b, sizeof(b)), 0);
    wire_tmh_pack(&h, WIRE_OP_FIN, 0, 0, 4);
    memcpy(b, &h, sizeof(h));
    assert_int_equal(proto_admit_cb(&W->p, UUID_B, b, sizeof(b)), 1);
}

/* HELLO from a process that is not a peer makes it one (through core);
 * from a known peer it is a repeat; a bad one is dropped and counted. */
static void hello_from_strangers(void **state)
{
    unsigned char b[sizeof(wire_tmh_t) + 4];
    wire_tmh_t h;

    (void)state;
    wire_tmh_pack(&h, WIRE_OP_HELLO, 0, 0, 0);
    memcpy(b, &h, sizeof(h));
    memcpy(b + sizeof(h), "ADDR", 4);
    proto_recv_cb(&W->p, UUID_A, b, sizeof(b));
    assert_int_equal(W->implicit_calls, 0);
    proto_recv_cb(&W->p, UUID_STRANGER, b, sizeof(b));
    assert_int_equal(W->implicit_calls, 1);
    assert_int_equal(W->p.dropped, 0);
    proto_recv_cb(&W->p, UUID_STRANGER, b, sizeof(b) - 1);
    assert_int_equal(W->implicit_calls, 2);
    assert_int_equal(W->p.dropped, 1);
    /* anything but HELLO from a stranger is dropped */
    in_eager(UUID_STRANGER, 1, "x", 1);
    assert_int_equal(W->p.dropped, 2);
    assert_int_equal(W->msgs_live, 0);
}

/* Requests whose peer has gone: a send gives up its slot (its key stops
 * working and a late FIN is stale), a receive leaves the matcher. */
static void abort_releases(void **state)
{
    proto_req_t s, r;
    char big[EAGER_LIMIT * 2] = {0}, got[8];
    wire_tmh_t h;
    wire_rvh_t v;

    (void)state;
    proto_peer_hello_set(&W->pp[0]);
    req_send(&s, big, sizeof(big), 0);
    assert_int_equal(proto_send(&W->p, &s, 0, 1), TMX_OK);
    h = pkt_tmh(&W->pkts[0]);
    v = pkt_rvh(&W->pkts[0]);
    assert_true(proto_req_waiting(&s));
    proto_req_abort(&W->p, &s);
    assert_false(proto_req_waiting(&s));
    assert_int_not_equal(proto_mem_check_cb(&W->p, v.va, v.len, v.rkey), TMX_OK);
    in_rvh(UUID_A, WIRE_OP_FIN, 0, h.app_ctx, 1, v.va, v.rkey, v.len);
    assert_int_equal(W->n_done, 0);
    assert_int_equal(W->p.dropped, 1);
    req_recv(&r, got, sizeof(got), 0, 2);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    proto_req_abort(&W->p, &r);
    assert_int_equal(proto_recv_cancel(&W->p, &r), TMX_ERR_BUSY);
    in_eager(UUID_A, 2, "y", 1);
    assert_int_equal(W->n_done, 0);
    assert_int_equal(W->msgs_live, 1);
}

/* A claimed rendezvous message that is discarded still releases its
 * sender with a FIN; an eager one is simply freed. */
static void discard_sends_fin(void **state)
{
    match_msg_t *m;

    (void)state;
    proto_peer_hello_set(&W->pp[1]);
    in_rvh(UUID_B, WIRE_OP_RNDV, 0, 8, 3, 0x5000, 0x77, 1000);
    in_eager(UUID_B, 4, "e", 1);
    m = match_find_msg(&W->p.match, 1, 3, 0);
    assert_non_null(m);
    match_remove_msg(&W->p.match, m);
    proto_msg_discard(&W->p, util_container_of(m, proto_msg_t, m));
    assert_int_equal(W->n_pkts, 1);
    assert_int_equal(pkt_tmh(&W->pkts[0]).opcode, WIRE_OP_FIN);
    assert_int_equal(pkt_tmh(&W->pkts[0]).app_ctx, 8);
    m = match_find_msg(&W->p.match, 1, 4, 0);
    match_remove_msg(&W->p.match, m);
    proto_msg_discard(&W->p, util_container_of(m, proto_msg_t, m));
    assert_int_equal(W->n_pkts, 1);
    assert_int_equal(W->msgs_live, 0);
}

/* TMX_PROTO's syntax: what parses, and what is refused with a reason. */
static void spec_syntax(void **state)
{
    static const char *const good[] = {"", "shm:eager@0,get@4k,coop@1m", "udp:copy@0",
                                       "shm:coop@64K;udp:eager@0,copy@1k", "self:get@0"};
    static const char *const bad[] = {"shm", "shm:", "shm:fast@0", "shm:get", "shm:get@x",
                                      "shm:get@1k,coop@1k", "shm:get@0,eager@1m",
                                      "nosuch:get@0", "shm:get@0;shm:copy@0", "shm:get@99999999999g",
                                      ":get@0", "shm:eager@4k,get@8k", "udp:eager@1"};
    proto_spec_t spec;
    const char *why;

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        why = NULL;
        if (!proto_spec_parse(good[i], &spec, &why))
            fail_msg("'%s' refused: %s", good[i], why);
    }
    assert_true(proto_spec_parse("shm:eager@0,get@4k,coop@1m", &spec, &why));
    assert_int_equal(spec.n, 1);
    assert_int_equal(spec.t[0].n_rules, 3);
    assert_int_equal(spec.t[0].rules[1].from, 4096);
    assert_int_equal(spec.t[0].rules[2].kind, PROTO_COOP);
    assert_int_equal(spec.t[0].rules[2].from, 1u << 20);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        if (proto_spec_parse(bad[i], &spec, &why))
            fail_msg("'%s' accepted", bad[i]);
        assert_non_null(why);
    }
}

/* The table decides: eager below its end (never past the transport's
 * limit), the read mechanism of each rendezvous size on the receiver's
 * side, the first rendezvous rule for synchronous sends below it, and
 * the emulated read where a mechanism stopped being offered. */
static void table_decides(void **state)
{
    proto_spec_t spec = {0};
    proto_req_t r;
    char src_buf[4096] = {0}, got[4096];

    (void)state;
    /* the defaults: eager to the limit, then get */
    assert_int_equal(W->p.tls[0].eager_end, EAGER_LIMIT + 1);
    assert_int_equal(proto_tl_kind(&W->p.tls[0], 1u << 30), PROTO_GET);
    /* fake:copy@16,get@1000 (eager before 16) */
    spec.n = 1;
    strcpy(spec.t[0].tl, "fake");
    spec.t[0].n_rules = 2;
    spec.t[0].rules[0] = (proto_rule_t){16, PROTO_COPY};
    spec.t[0].rules[1] = (proto_rule_t){1000, PROTO_GET};
    W->p.spec = spec;
    W->p.n_tls = 0;
    assert_int_equal(proto_iface_add(&W->p, &W->iface), TMX_OK);
    assert_int_equal(W->p.tls[0].eager_end, 16);
    proto_peer_hello_set(&W->pp[0]);
    req_send(&r, src_buf, 15, 0);
    assert_int_equal(proto_send(&W->p, &r, 0, 1), TMX_OK);
    assert_int_equal(pkt_tmh(&W->pkts[0]).opcode, WIRE_OP_EAGER);
    req_send(&r, src_buf, 16, 0);
    assert_int_equal(proto_send(&W->p, &r, 0, 1), TMX_OK);
    assert_int_equal(pkt_tmh(&W->pkts[1]).opcode, WIRE_OP_RNDV);
    /* the receiver's reads */
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 1, 5, (uintptr_t)src_buf, 1, 100);
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 2, 5, (uintptr_t)src_buf, 1, 2000);
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 3, 5, (uintptr_t)src_buf, 1, 4); /* a synchronous one */
    req_recv(&r, got, sizeof(got), 0, 5);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->get_kind, TL_GET_COPY);
    req_recv(&r, got, sizeof(got), 0, 5);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->get_kind, TL_GET_DIRECT);
    req_recv(&r, got, sizeof(got), 0, 5);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->get_kind, TL_GET_COPY);
    /* a mechanism withdrawn: the emulated read */
    W->iface.get_kinds = TL_GET_COPY;
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 4, 5, (uintptr_t)src_buf, 1, 3000);
    req_recv(&r, got, sizeof(got), 0, 5);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->get_kind, TL_GET_COPY);
    assert_int_equal(W->n_done, 5); /* the eager send and the four receives */
    for (int i = 1; i < 5; i++)
        assert_int_equal(W->done_st[i], TMX_OK);
    /* a protocol the transport does not offer is refused */
    spec.t[0].rules[1] = (proto_rule_t){1000, PROTO_COOP};
    W->p.spec = spec;
    W->p.n_tls = 0;
    assert_int_equal(proto_iface_add(&W->p, &W->iface), TMX_ERR_INVALID);
}

/* ------------------------------------------------- packets that stream in */

/* An eager message of total payload bytes from uuid, in pieces: the first
 * holds the header and 64 bytes, the rest come in pieces of 100 bytes,
 * short by missing bytes; it ends as how says. Byte i of the payload is
 * (unsigned char)(i * 7). */
static void stream_in(uint64_t uuid, uint64_t tag, size_t total, size_t missing, int how,
                      void (*between)(void))
{
    unsigned char b[256];
    wire_tmh_t h;
    void *sink;
    size_t off = 64;

    wire_tmh_pack(&h, WIRE_OP_EAGER, 0, 0, tag);
    memcpy(b, &h, sizeof(h));
    for (size_t i = 0; i < 64; i++)
        b[sizeof(h) + i] = (unsigned char)(i * 7);
    sink = proto_stream_begin(&W->p, uuid, b, sizeof(h) + 64, sizeof(h) + total);
    assert_non_null(sink);
    if (between != NULL)
        between();
    while (off < total - missing) {
        size_t n = total - missing - off < 100 ? total - missing - off : 100;
        for (size_t i = 0; i < n; i++)
            b[i] = (unsigned char)((off + i) * 7);
        proto_stream_more(&W->p, sink, b, n);
        off += n;
    }
    proto_stream_end(&W->p, sink, how);
}

static void renumber_a(void)
{
    W->a_num = 1; /* as tmx_peer_add does for a process known implicitly */
}

/* A message streaming in while its sender gets another peer number joins
 * the matcher under the new number, before a later message of the same
 * sender: a receive naming the new number takes it first. */
static void stream_sender_renumbered(void **state)
{
    proto_req_t r;
    unsigned char got[1000];

    (void)state;
    stream_in(UUID_A, 7, 900, 0, TL_STREAM_WHOLE, renumber_a);
    in_eager(UUID_A, 7, "later", 5);
    req_recv(&r, got, sizeof(got), 1, 7);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(W->done_st[0], TMX_OK);
    assert_int_equal(r.comp.msg_length, 900);
    assert_int_equal(r.comp.source, 1);
    for (size_t i = 0; i < 900; i++)
        assert_int_equal(got[i], (unsigned char)(i * 7));
    req_recv(&r, got, sizeof(got), 1, 7);
    assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
    assert_int_equal(r.comp.msg_length, 5);
}

/* Pieces that do not add up to the message's length break it: a receive
 * it matched fails with TMX_ERR_PROTO, an unexpected one is dropped; a
 * sender that dies fails it with TMX_ERR_PEER_FAILED. */
static void stream_short_or_cut(void **state)
{
    proto_req_t r;
    unsigned char got[1000];

    (void)state;
    req_recv(&r, got, sizeof(got), 0, 7);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    stream_in(UUID_A, 7, 900, 10, TL_STREAM_WHOLE, NULL);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_ERR_PROTO);
    assert_int_equal(r.comp.length, 0);
    stream_in(UUID_A, 7, 900, 10, TL_STREAM_WHOLE, NULL);
    assert_int_equal(W->msgs_live, 0);
    req_recv(&r, got, sizeof(got), 0, 7);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    stream_in(UUID_A, 7, 900, 300, TL_STREAM_GONE, NULL);
    assert_int_equal(W->done_st[1], TMX_ERR_PEER_FAILED);
    assert_int_equal(r.comp.length, 0);
    stream_in(UUID_A, 7, 900, 0, TL_STREAM_WHOLE, NULL);
    assert_int_equal(W->msgs_live, 1);
}

/* A zero-length receive with no buffer takes a streamed message as
 * truncated, touching nothing. */
static void stream_into_empty_receive(void **state)
{
    proto_req_t r;

    (void)state;
    req_recv(&r, NULL, 0, 0, 7);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    stream_in(UUID_A, 7, 900, 0, TL_STREAM_WHOLE, NULL);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_ERR_TRUNCATED);
    assert_int_equal(r.comp.length, 0);
}

/* Rendezvous by write, the receiver: a matched rendezvous request is
 * answered with CTS (our buffer, a key of its own, the length cut to the
 * buffer, the sender's key echoed); WDONE completes the receive and is
 * answered with FIN; bytes that came as packets must all have landed, in
 * order, and on a path where every write is a packet (put_checked) none
 * may be missing; NOWRITE makes it read instead. */
static void write_receiver(void **state)
{
    proto_req_t r;
    char src[100], got[80];
    wire_tmh_t h;
    wire_ctsh_t c;
    uint32_t slot;

    (void)state;
    table_write();
    proto_peer_hello_set(&W->pp[0]);
    memset(src, 'w', sizeof(src));
    for (int round = 0; round < 6; round++) {
        int before = W->n_pkts, done = W->n_done;
        memset(got, 0, sizeof(got));
        req_recv(&r, got, sizeof(got), 0, 3);
        assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
        in_rvh(UUID_A, WIRE_OP_RNDV, 0, 40 + round, 3, (uintptr_t)src, 0x1234, sizeof(src));
        assert_int_equal(W->n_pkts, before + 1);
        h = pkt_tmh(&W->pkts[before]);
        c = pkt_ctsh(&W->pkts[before]);
        assert_int_equal(h.opcode, WIRE_OP_CTS);
        assert_int_equal(h.app_ctx, 40 + round);
        assert_int_equal(c.va, (uintptr_t)got);
        assert_int_equal(c.len, sizeof(got));
        assert_int_equal(c.skey, 0x1234);
        assert_int_equal(W->n_done, done);
        assert_true(proto_req_waiting(&r));
        assert_int_equal(proto_req_writer(&r), 0);
        /* the key lends the buffer for writing, never for reading */
        assert_int_not_equal(proto_mem_check_cb(&W->p, c.va, 8, c.rkey), TMX_OK);
        slot = reg_key_slot(c.rkey);
        if (round == 0) { /* written in place (DIRECT) */
            memcpy(got, src, sizeof(got));
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(W->n_pkts, before + 2);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_FIN);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).flags, 0);
            assert_int_equal(W->done_st[done], TMX_ERR_TRUNCATED); /* 100 bytes into 80 */
        } else if (round == 4) { /* a path where every write is a packet: none came */
            W->iface.put_checked = 1;
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, slot, 0, c.va, c.rkey, c.len);
            W->iface.put_checked = 0;
            assert_int_not_equal(pkt_tmh(&W->pkts[before + 1]).flags, 0);
            assert_int_equal(W->done_st[done], TMX_ERR_PROTO);
        } else if (round == 5) { /* parts out of order or repeated are refused */
            assert_int_equal(proto_put_data_cb(&W->p, UUID_A, c.va, c.rkey, src, 40), TMX_OK);
            assert_int_not_equal(proto_put_data_cb(&W->p, UUID_A, c.va, c.rkey, src, 40), TMX_OK);
            assert_int_not_equal(proto_put_data_cb(&W->p, UUID_A, c.va + 60, c.rkey, src, 20), TMX_OK);
            assert_int_equal(proto_put_data_cb(&W->p, UUID_A, c.va + 40, c.rkey, src, 40), TMX_OK);
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).flags, 0);
            assert_int_equal(W->done_st[done], TMX_ERR_TRUNCATED);
        } else if (round == 1) { /* as packets, all of them: FIN */
            assert_int_equal(proto_put_data_cb(&W->p, UUID_A, c.va, c.rkey, src, 50), TMX_OK);
            assert_int_equal(proto_put_data_cb(&W->p, UUID_A, c.va + 50, c.rkey, src, 30), TMX_OK);
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(W->n_pkts, before + 2);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_FIN);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).app_ctx, 41);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).flags, 0);
            assert_int_equal(pkt_rvh(&W->pkts[before + 1]).rkey, 0x1234);
            assert_int_equal(W->done_st[done], TMX_ERR_TRUNCATED);
        } else if (round == 2) { /* as packets, some missing: fails both sides */
            assert_int_equal(proto_put_data_cb(&W->p, UUID_A, c.va, c.rkey, src, 50), TMX_OK);
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_FIN);
            assert_int_not_equal(pkt_tmh(&W->pkts[before + 1]).flags, 0);
            assert_int_equal(W->done_st[done], TMX_ERR_PROTO);
        } else { /* the sender cannot write: we read, then FIN */
            W->get_status = TMX_OK;
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_NOWRITE, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(W->get_kind, TL_GET_DIRECT);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_FIN);
            assert_int_equal(W->done_st[done], TMX_ERR_TRUNCATED);
        }
        assert_int_equal(W->n_done, done + 1);
        assert_ptr_equal(W->done[done], &r);
        assert_false(proto_req_waiting(&r));
        /* what was delivered: what fit, or nothing for a failure */
        assert_int_equal(r.comp.length, round == 2 || round == 4 ? 0 : sizeof(got));
        assert_int_equal(r.comp.msg_length, sizeof(src));
        if (round != 2 && round != 4)
            assert_memory_equal(got, src, sizeof(got));
        /* the slot is gone: late writes and a repeated WDONE are refused */
        assert_int_not_equal(proto_put_data_cb(&W->p, UUID_A, c.va, c.rkey, src, 8), TMX_OK);
        in_rvh(UUID_A, WIRE_OP_WDONE, 0, slot, 0, c.va, c.rkey, c.len);
        assert_int_equal(W->n_done, done + 1);
    }
    assert_int_equal(W->p.dropped, 6);
}

/* The receiver's side against forged writes: only the sender it lent the
 * buffer to, under its key, inside it; a WDONE must name it exactly, and
 * no FIN or CTS may name a receive's slot. */
static void write_receiver_hostile(void **state)
{
    proto_req_t r;
    char got[64] = {0}, junk[128];
    wire_ctsh_t c;
    wire_tmh_t h;
    uint32_t slot;

    (void)state;
    table_write();
    proto_peer_hello_set(&W->pp[1]);
    memset(junk, 'j', sizeof(junk));
    req_recv(&r, got, sizeof(got), TMX_ANY_SOURCE, 9);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    in_rvh(UUID_B, WIRE_OP_RNDV, 0, 5, 9, 0x1000, 0x77, 64);
    h = pkt_tmh(&W->pkts[0]);
    c = pkt_ctsh(&W->pkts[0]);
    assert_int_equal(h.opcode, WIRE_OP_CTS);
    assert_int_equal(proto_req_writer(&r), 1);
    slot = reg_key_slot(c.rkey);
    /* writes from another peer, under another key, outside the buffer */
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_A, c.va, c.rkey, junk, 8), TMX_OK);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_STRANGER, c.va, c.rkey, junk, 8), TMX_OK);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_B, c.va, c.rkey ^ (1ULL << 50), junk, 8), TMX_OK);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_B, c.va + 60, c.rkey, junk, 8), TMX_OK);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_B, c.va - 1, c.rkey, junk, 2), TMX_OK);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_B, c.va, c.rkey, junk, 65), TMX_OK);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_B, UINT64_MAX - 3, c.rkey, junk, 8), TMX_OK);
    for (size_t i = 0; i < sizeof(got); i++)
        assert_int_equal(got[i], 0);
    /* WDONE from another peer, with a wrong key, address or length; FIN
     * and CTS naming the receive's slot */
    in_rvh(UUID_A, WIRE_OP_WDONE, 0, slot, 0, c.va, c.rkey, c.len);
    in_rvh(UUID_B, WIRE_OP_WDONE, 0, slot, 0, c.va, c.rkey ^ 1, c.len);
    in_rvh(UUID_B, WIRE_OP_WDONE, 0, slot, 0, c.va + 1, c.rkey, c.len);
    in_rvh(UUID_B, WIRE_OP_WDONE, 0, slot, 0, c.va, c.rkey, c.len - 1);
    in_rvh(UUID_B, WIRE_OP_WDONE, WIRE_WDONE_MASK, slot, 0, c.va, c.rkey, c.len);
    in_rvh(UUID_B, WIRE_OP_WDONE, 1u << 7, slot, 0, c.va, c.rkey, c.len);
    in_rvh(UUID_B, WIRE_OP_FIN, 0, slot, 0, c.va, c.rkey, c.len);
    in_cts(UUID_B, slot, c.va, c.rkey, c.len, c.rkey);
    assert_int_equal(W->p.dropped, 8);
    assert_int_equal(W->n_done, 0);
    assert_true(proto_req_waiting(&r));
    /* abort (its writer died): the slot goes, late packets find nothing */
    proto_req_abort(&W->p, &r);
    assert_false(proto_req_waiting(&r));
    assert_int_equal(proto_req_writer(&r), TMX_PEER_NONE);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_B, c.va, c.rkey, junk, 8), TMX_OK);
    in_rvh(UUID_B, WIRE_OP_WDONE, 0, slot, 0, c.va, c.rkey, c.len);
    assert_int_equal(W->p.dropped, 9);
    assert_int_equal(W->n_done, 0);
}

/* Rendezvous by write, the sender: a CTS from the peer the request went
 * to, echoing its key, starts one write; written in place, or as packets
 * once put_done says they all went, WDONE(ACK) follows, and the send
 * completes on the receiver's FIN only; a write that fails says NOWRITE
 * and waits for the FIN of the receiver's read. Forged and repeated CTS
 * are dropped. */
static void write_sender(void **state)
{
    proto_req_t r[3];
    char big[3][EAGER_LIMIT * 2], dst[3][EAGER_LIMIT * 2];
    tmx_status_t how[3] = {TMX_OK, TMX_INPROGRESS, TMX_ERR_IO};
    uint64_t tkey = 0xabcdef0000000005ULL;

    (void)state;
    W->iface.put_kinds = TL_PUT_DIRECT;
    proto_peer_hello_set(&W->pp[1]);
    for (int i = 0; i < 3; i++) {
        int before = W->n_pkts, done = W->n_done, dropped = (int)W->p.dropped;
        wire_tmh_t h;
        wire_rvh_t v;
        memset(big[i], 'a' + i, sizeof(big[i]));
        memset(dst[i], 0, sizeof(dst[i]));
        req_send(&r[i], big[i], sizeof(big[i]), 0);
        assert_int_equal(proto_send(&W->p, &r[i], 1, 7), TMX_OK);
        h = pkt_tmh(&W->pkts[before]);
        v = pkt_rvh(&W->pkts[before]);
        assert_int_equal(h.opcode, WIRE_OP_RNDV);
        /* forged: another peer, a wrong key, too long, empty */
        in_cts(UUID_A, h.app_ctx, (uintptr_t)dst[i], tkey, 16, v.rkey);
        in_cts(UUID_B, h.app_ctx, (uintptr_t)dst[i], tkey, 16, v.rkey ^ 1);
        in_cts(UUID_B, h.app_ctx, (uintptr_t)dst[i], tkey, sizeof(big[i]) + 1, v.rkey);
        in_cts(UUID_B, h.app_ctx, (uintptr_t)dst[i], tkey, 0, v.rkey);
        assert_int_equal((int)W->p.dropped, dropped + 4);
        assert_int_equal(W->n_puts, i);
        W->put_status = how[i];
        in_cts(UUID_B, h.app_ctx, (uintptr_t)dst[i], tkey, 100, v.rkey);
        assert_int_equal(W->n_puts, i + 1);
        /* once only */
        in_cts(UUID_B, h.app_ctx, (uintptr_t)dst[i], tkey, 100, v.rkey);
        assert_int_equal((int)W->p.dropped, dropped + 5);
        assert_int_equal(W->n_puts, i + 1);
        if (how[i] == TMX_INPROGRESS) {
            assert_int_equal(W->n_pkts, before + 1);
            proto_put_done_cb(&W->p, v.rkey ^ (1ULL << 45), TMX_OK); /* not this send's: ignored */
            assert_int_equal(W->n_pkts, before + 1);
            proto_put_done_cb(&W->p, v.rkey, TMX_OK);
        }
        assert_int_equal(W->n_pkts, before + 2);
        h = pkt_tmh(&W->pkts[before + 1]);
        assert_int_equal(h.opcode, WIRE_OP_WDONE);
        assert_int_equal(h.app_ctx, reg_key_slot(tkey));
        assert_int_equal(pkt_rvh(&W->pkts[before + 1]).rkey, tkey);
        assert_int_equal(pkt_rvh(&W->pkts[before + 1]).va, (uintptr_t)dst[i]);
        assert_int_equal(pkt_rvh(&W->pkts[before + 1]).len, 100);
        if (how[i] == TMX_OK)
            assert_memory_equal(dst[i], big[i], 100);
        assert_int_equal(h.flags, how[i] == TMX_ERR_IO ? WIRE_WDONE_NOWRITE : WIRE_WDONE_ACK);
        assert_int_equal(W->n_done, done);
        assert_true(proto_req_waiting(&r[i]));
        /* the receiver's FIN ends it */
        h = pkt_tmh(&W->pkts[before]);
        in_rvh(UUID_B, WIRE_OP_FIN, 0, h.app_ctx, 7, v.va, v.rkey, v.len);
        assert_int_equal(W->n_done, done + 1);
        assert_int_equal(W->done_st[done], TMX_OK);
        /* a late put_done is ignored */
        proto_put_done_cb(&W->p, v.rkey, TMX_OK);
        assert_int_equal(W->n_pkts, before + 2);
    }
}

/* With the registration cache: a buffer lent for a rendezvous is
 * registered once and found again by the next send from it (a hit);
 * unmapped under a send that lends it (the application's bug), it is
 * refused to the reader, and so is new memory mapped at the same address;
 * a send from that new memory registers it anew (a miss). The same for
 * a receive lent for a write. */
static void regcache_lends_live_memory(void **state)
{
    size_t len = 1u << 20;
    unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char src[64];
    proto_req_t r;
    rcache_stats_t st;
    wire_tmh_t h;
    wire_rvh_t v;
    wire_ctsh_t c;

    (void)state;
    assert_true(buf != MAP_FAILED);
    assert_int_equal(proto_regcache_open(&W->p, 64), TMX_OK);
    proto_peer_hello_set(&W->pp[0]);
    for (int i = 0; i < 4; i++) {
        int before = W->n_pkts, done = W->n_done;
        req_send(&r, buf, len, 0);
        assert_int_equal(proto_send(&W->p, &r, 0, 5), TMX_OK);
        rcache_stats(W->p.rc, &st);
        if (st.uncached != 0) {
            print_message("the registration cache runs without userfaultfd here: skipped\n");
            munmap(buf, len);
            return;
        }
        h = pkt_tmh(&W->pkts[before]);
        v = pkt_rvh(&W->pkts[before]);
        assert_int_equal(proto_mem_check_cb(&W->p, v.va, v.len, v.rkey), TMX_OK);
        if (i == 2) {
            void *again;
            assert_int_equal(munmap(buf, len), 0);
            assert_int_not_equal(proto_mem_check_cb(&W->p, v.va, v.len, v.rkey), TMX_OK);
            again = mmap(buf, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (again == MAP_FAILED && errno == EEXIST) {
                /* another thread's mapping (the sanitizer's, say) took the
                 * hole between the two calls: the new memory cannot be
                 * placed there, and what follows cannot be checked */
                in_rvh(UUID_A, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va, v.rkey, v.len);
                print_message("the unmapped address was taken meanwhile: the rest skipped\n");
                return;
            }
            assert_ptr_equal(again, buf);
            assert_int_not_equal(proto_mem_check_cb(&W->p, v.va, 8, v.rkey), TMX_OK);
        }
        in_rvh(UUID_A, WIRE_OP_FIN, 0, h.app_ctx, 5, v.va, v.rkey, v.len);
        assert_int_equal(W->n_done, done + 1);
    }
    rcache_stats(W->p.rc, &st);
    assert_int_equal(st.misses, 2);        /* the first send, and the first from the new memory */
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.invalidations, 1);
    /* a receive lent for a write: written parts refused once it is unmapped */
    table_write();
    req_recv(&r, buf, len, 0, 8);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 3, 8, 0x1000, 0x99, len);
    c = pkt_ctsh(&W->pkts[W->n_pkts - 1]);
    memset(src, 'q', sizeof(src));
    assert_int_equal(proto_put_data_cb(&W->p, UUID_A, c.va, c.rkey, src, sizeof(src)), TMX_OK);
    assert_int_equal(munmap(buf, len), 0);
    assert_int_not_equal(proto_put_data_cb(&W->p, UUID_A, c.va + sizeof(src), c.rkey, src, sizeof(src)),
                         TMX_OK);
    proto_req_abort(&W->p, &r);
}

/* A rendezvous that the engine matches but cannot complete for want of
 * memory is lost (logged); its sender is told with a failed FIN instead
 * of waiting for ever, and the receive stays posted for the next. */
static void offload_refusal_tells_sender(void **state)
{
    proto_req_t r;
    char src[100], got[100];
    off_stats_t st;

    (void)state;
    assert_int_equal(proto_offload_open(&W->p, NULL, 0), TMX_OK);
    proto_peer_hello_set(&W->pp[0]);
    memset(src, 's', sizeof(src));
    memset(got, 0, sizeof(got));
    req_recv(&r, got, sizeof(got), 0, 7);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    off_engine_fail_cq(W->p.off, 1);
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 50, 7, (uintptr_t)src, 0x55, sizeof(src));
    assert_int_equal(W->n_pkts, 1);
    assert_int_equal(W->pkts[0].to, 0);
    assert_int_equal(pkt_tmh(&W->pkts[0]).opcode, WIRE_OP_FIN);
    assert_int_equal(pkt_tmh(&W->pkts[0]).flags, 1u << 15);
    assert_int_equal(pkt_tmh(&W->pkts[0]).app_ctx, 50);
    assert_int_equal(pkt_rvh(&W->pkts[0]).rkey, 0x55);
    assert_int_equal(W->n_done, 0);
    assert_true(proto_req_waiting(&r));
    off_engine_stats(W->p.off, &st);
    assert_int_equal(st.matched, 0);
    /* the next one finds the receive */
    W->get_status = TMX_OK;
    in_rvh(UUID_A, WIRE_OP_RNDV, 0, 51, 7, (uintptr_t)src, 0x56, sizeof(src));
    off_engine_stats(W->p.off, &st);
    assert_int_equal(st.matched, 1);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_OK);
    assert_memory_equal(got, src, sizeof(got));
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).opcode, WIRE_OP_FIN);
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).flags, 0);
}

/* ------------------------------------------------------ receive offers */

#define OFFER_LEN 65536 /* PROTO_OFF_BIG: a receive this large is offered */

/* The claim word's token an RTR we sent carries. */
static uint64_t pkt_rtr_token(const pkt_t *k)
{
    uint64_t t;

    assert_int_equal(k->len, sizeof(wire_tmh_t) + sizeof(wire_ctsh_t) + sizeof(t));
    memcpy(&t, k->data + sizeof(wire_tmh_t) + sizeof(wire_ctsh_t), sizeof(t));
    return le64toh(t);
}

/* An offer (RTR) from uuid: count is app_ctx, ignore skey. */
static void in_rtr(uint64_t uuid, uint64_t tag, uint64_t va, uint64_t rkey, uint64_t len, uint32_t count,
                   uint64_t ignore)
{
    in_tmh_ctsh(uuid, WIRE_OP_RTR, count, tag, va, rkey, len, ignore);
}

static void in_rkh(uint64_t uuid, uint8_t op, uint64_t tag, uint64_t rkey)
{
    unsigned char b[sizeof(wire_tmh_t) + sizeof(wire_rkh_t)];
    wire_tmh_t h;
    wire_rkh_t k = {htole64(rkey)};

    wire_tmh_pack(&h, op, 0, 0, tag);
    memcpy(b, &h, sizeof(h));
    memcpy(b + sizeof(h), &k, sizeof(k));
    proto_recv_cb(&W->p, uuid, b, sizeof(b));
}

static uint64_t pkt_rkh(const pkt_t *k)
{
    wire_rkh_t r;

    assert_int_equal(k->len, sizeof(wire_tmh_t) + sizeof(r));
    memcpy(&r, k->data + sizeof(wire_tmh_t), sizeof(r));
    return le64toh(r.rkey);
}

/* The engine on, writes that cost the receiver nothing, and peer B (1)
 * known as a writer: its rendezvous request (tag 99, WRITER) came, kept
 * unexpected, its one tagged packet so far. */
static void offers_on(char *wbuf)
{
    assert_int_equal(proto_offload_open(&W->p, NULL, 0), TMX_OK);
    W->p.offer_on = 1;
    W->iface.put_kinds = TL_PUT_DIRECT;
    proto_peer_hello_set(&W->pp[0]);
    proto_peer_hello_set(&W->pp[1]);
    in_rvh(UUID_B, WIRE_OP_RNDV, WIRE_FLAG_WRITER, 40, 99, (uintptr_t)wbuf, 0x40, OFFER_LEN);
}

/* Posts a receive of OFFER_LEN from B, tag 7, and checks its offer:
 * returned (the CTSH), sent last, naming the buffer and the tagged
 * packets taken from B so far (taken). */
static wire_ctsh_t offer_post(proto_req_t *r, char *buf, uint64_t taken)
{
    int before = W->n_pkts;
    wire_ctsh_t c;

    req_recv(r, buf, OFFER_LEN, 1, 7);
    assert_int_equal(proto_recv_post(&W->p, r), TMX_OK);
    assert_int_equal(W->n_pkts, before + 1);
    assert_int_equal(W->pkts[before].to, 1);
    assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_RTR);
    assert_int_equal(pkt_tmh(&W->pkts[before]).tag, 7);
    c = pkt_ctsh(&W->pkts[before]);
    assert_int_equal(c.va, (uintptr_t)buf);
    assert_int_equal(c.len, OFFER_LEN);
    assert_int_equal(pkt_tmh(&W->pkts[before]).app_ctx, taken);
    assert_int_equal(c.skey, r->recv.ignore);
    assert_int_equal(c.rkey, r->rkey);
    assert_true(proto_req_waiting(r));
    assert_int_equal(proto_req_writer(r), 1);
    return c;
}

/* An offered receive whose sender took the copy first: its RTS matches
 * it and nothing is read; its WDONE completes it and FIN goes back. One
 * whose RTS comes first: the receiver takes the copy and reads at once,
 * and the sender's late take fails. */
static void offer_written_or_read(void **state)
{
    static char wbuf[OFFER_LEN], got[OFFER_LEN], src[OFFER_LEN];
    proto_req_t r;
    wire_ctsh_t c;

    (void)state;
    offers_on(wbuf);
    memset(src, 's', sizeof(src));
    for (int round = 0; round < 2; round++) {
        int before;
        uint64_t token;
        memset(got, 0, sizeof(got));
        c = offer_post(&r, got, 1 + (uint64_t)round);
        token = pkt_rtr_token(&W->pkts[W->n_pkts - 1]);
        if (round == 0) /* the sender's take */
            assert_true(fake_offer_take(&W->ep[1], token));
        before = W->n_pkts;
        W->get_kind = 0;
        W->get_status = TMX_OK;
        in_rvh(UUID_B, WIRE_OP_RNDV, WIRE_FLAG_WRITER, 50 + round, 7, (uintptr_t)src, 0x55, sizeof(src) - 10);
        if (round == 0) {
            assert_int_equal(W->get_kind, 0); /* no read: the sender writes */
            assert_int_equal(W->n_pkts, before);
            assert_int_equal(W->n_done, 0);
            assert_true(proto_req_waiting(&r));
            assert_int_equal(proto_recv_cancel(&W->p, &r), TMX_ERR_BUSY);
            memcpy(got, src, sizeof(src) - 10);
            in_rvh(UUID_B, WIRE_OP_WDONE, WIRE_WDONE_ACK, reg_key_slot(c.rkey), 50, c.va, c.rkey,
                   sizeof(src) - 10);
            assert_int_equal(W->p.rtr_written, 1);
            assert_int_equal(*fake_state(token), FAKE_CLOSED);
        } else {
            assert_int_equal(W->get_kind, TL_GET_DIRECT); /* read at once */
            assert_false(fake_offer_take(&W->ep[1], token)); /* the sender's, too late */
            assert_int_equal(*fake_state(token), FAKE_CLOSED);
            assert_int_equal(W->p.rtr_written, 1);
        }
        assert_int_equal(W->n_done, round + 1);
        assert_int_equal(W->done_st[round], TMX_OK);
        assert_int_equal(r.comp.length, sizeof(src) - 10);
        assert_memory_equal(got, src, sizeof(src) - 10);
        assert_int_equal(W->n_pkts, before + 1);
        assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_FIN);
        assert_int_equal(pkt_tmh(&W->pkts[before]).app_ctx, 50 + round);
        assert_int_equal(W->p.n_wr_wait, 0);
        assert_int_equal(W->p.rtr_sent, round + 1);
    }
    /* a write for another request of the sender's than the one that
     * matched: the receive fails, and the sender's request is told */
    c = offer_post(&r, got, 3);
    assert_true(fake_offer_take(&W->ep[1], pkt_rtr_token(&W->pkts[W->n_pkts - 1])));
    in_rvh(UUID_B, WIRE_OP_RNDV, WIRE_FLAG_WRITER, 60, 7, (uintptr_t)src, 0x66, sizeof(src));
    in_rvh(UUID_B, WIRE_OP_WDONE, WIRE_WDONE_ACK, reg_key_slot(c.rkey), 61, c.va, c.rkey, sizeof(src));
    assert_int_equal(W->n_done, 3);
    assert_int_equal(W->done_st[2], TMX_ERR_PROTO);
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).opcode, WIRE_OP_FIN);
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).app_ctx, 60);
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).flags, 1u << 15);
    assert_int_equal(W->p.n_wr_wait, 0);
    /* a late or forged answer names no offer: ignored, nothing dropped */
    in_rkh(UUID_B, WIRE_OP_RTR_NO, 7, c.rkey);
    in_rvh(UUID_B, WIRE_OP_WDONE, WIRE_WDONE_ACK, reg_key_slot(c.rkey), 0, c.va, c.rkey, 10);
    assert_int_equal(W->p.dropped, 1); /* the WDONE */
    assert_int_equal(W->n_done, 3);
}

/* An offered receive that an eager message of its sender takes (the
 * sender spent the offer on it): completed with it, its slot given back,
 * its word closed, the sender's late RTR_NO ignored. A cancel takes the
 * copy and cancels; an abort (the sender died) gives everything back. */
static void offer_spent_or_cancelled(void **state)
{
    static char wbuf[OFFER_LEN], got[OFFER_LEN];
    proto_req_t r;
    wire_ctsh_t c;
    uint64_t token;
    int before;

    (void)state;
    offers_on(wbuf);
    c = offer_post(&r, got, 1);
    token = pkt_rtr_token(&W->pkts[W->n_pkts - 1]);
    in_eager(UUID_B, 7, "hello", 5);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_OK);
    assert_memory_equal(got, "hello", 5);
    assert_int_equal(W->p.n_wr_wait, 0);
    assert_int_equal(W->p.n_rndv_used, 0);
    assert_int_equal(*fake_state(token), FAKE_CLOSED);
    in_rkh(UUID_B, WIRE_OP_RTR_NO, 7, c.rkey);
    assert_int_equal(W->p.dropped, 0);

    /* cancel: the copy is the receiver's, nothing is sent */
    c = offer_post(&r, got, 2);
    token = pkt_rtr_token(&W->pkts[W->n_pkts - 1]);
    before = W->n_pkts;
    assert_int_equal(proto_recv_cancel(&W->p, &r), TMX_OK);
    assert_int_equal(W->n_pkts, before);
    assert_false(proto_req_waiting(&r));
    assert_int_equal(W->p.n_wr_wait, 0);
    assert_int_equal(*fake_state(token), FAKE_CLOSED);

    /* an abort (the sender died) gives everything back */
    c = offer_post(&r, got, 2);
    token = pkt_rtr_token(&W->pkts[W->n_pkts - 1]);
    proto_req_abort(&W->p, &r);
    assert_false(proto_req_waiting(&r));
    assert_int_equal(W->p.n_wr_wait, 0);
    assert_int_equal(W->p.n_rndv_used, 0);
    assert_int_equal(*fake_state(token), FAKE_CLOSED);
    assert_int_equal(W->n_done, 1);
}

/* No offer where the sender's message could go elsewhere first or the
 * sender does not write: a wildcard source, a mask of more than three
 * bits, a short receive, an older receive that matches some of the same
 * messages, a sender that never showed an engine, a transport whose
 * writes the receiver checks. A mask of two bits is offered with it. */
static void offer_not_made(void **state)
{
    static char wbuf[OFFER_LEN], a[OFFER_LEN], b[OFFER_LEN];
    proto_req_t r1, r2;
    int before;

    (void)state;
    offers_on(wbuf);
    before = W->n_pkts;
    req_recv(&r1, a, OFFER_LEN, TMX_ANY_SOURCE, 7);
    assert_int_equal(proto_recv_post(&W->p, &r1), TMX_OK);
    req_recv(&r2, b, OFFER_LEN, 1, 7); /* behind the wildcard */
    assert_int_equal(proto_recv_post(&W->p, &r2), TMX_OK);
    assert_int_equal(W->n_pkts, before);
    assert_int_equal(proto_recv_cancel(&W->p, &r1), TMX_OK);
    assert_int_equal(proto_recv_cancel(&W->p, &r2), TMX_OK);
    req_recv(&r1, a, OFFER_LEN - 1, 1, 7);
    assert_int_equal(proto_recv_post(&W->p, &r1), TMX_OK);
    assert_int_equal(proto_recv_cancel(&W->p, &r1), TMX_OK);
    req_recv(&r1, a, OFFER_LEN, 0, 7); /* A showed no engine */
    assert_int_equal(proto_recv_post(&W->p, &r1), TMX_OK);
    assert_int_equal(proto_recv_cancel(&W->p, &r1), TMX_OK);
    req_recv(&r1, a, OFFER_LEN, 1, 7);
    r1.recv.ignore = 0xf0; /* four bits: too many tags to check */
    assert_int_equal(proto_recv_post(&W->p, &r1), TMX_OK);
    assert_int_equal(proto_recv_cancel(&W->p, &r1), TMX_OK);
    req_recv(&r2, b, OFFER_LEN - 1, 1, 7 | 0x100); /* older (not offered: short), takes tag 7|0x100 */
    assert_int_equal(proto_recv_post(&W->p, &r2), TMX_OK);
    req_recv(&r1, a, OFFER_LEN, 1, 7);
    r1.recv.ignore = 0x101;
    assert_int_equal(proto_recv_post(&W->p, &r1), TMX_OK);
    assert_int_equal(proto_recv_cancel(&W->p, &r1), TMX_OK);
    assert_int_equal(proto_recv_cancel(&W->p, &r2), TMX_OK);
    W->iface.put_checked = 1;
    req_recv(&r1, a, OFFER_LEN, 1, 7);
    assert_int_equal(proto_recv_post(&W->p, &r1), TMX_OK);
    assert_int_equal(proto_recv_cancel(&W->p, &r1), TMX_OK);
    assert_int_equal(W->n_pkts, before);
    assert_int_equal(W->p.rtr_sent, 0);
    /* a mask of few bits, nothing older: offered, with its mask */
    W->iface.put_checked = 0;
    req_recv(&r1, a, OFFER_LEN, 1, 7);
    r1.recv.ignore = 0x101;
    assert_int_equal(proto_recv_post(&W->p, &r1), TMX_OK);
    assert_int_equal(W->n_pkts, before + 1);
    assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_RTR);
    assert_int_equal(pkt_ctsh(&W->pkts[before]).skey, 0x101);
    assert_int_equal(W->p.rtr_sent, 1);
}

/* The sender's side: an offer from B (tag 7) is taken by our rendezvous
 * send it matches, written at once (the send's RTS went after the count
 * the offer gives), or kept for our next send with its tag, written then
 * in a progress pass; refused where an eager message of ours went since
 * the count (it may have matched the receive), or when it is malformed. */
static void offer_sender(void **state)
{
    static char sbuf[100000], rbuf[OFFER_LEN];
    proto_req_t s, s2;
    int before;
    uint64_t dropped;

    (void)state;
    assert_int_equal(proto_offload_open(&W->p, NULL, 0), TMX_OK);
    W->iface.put_kinds = TL_PUT_DIRECT;
    W->put_status = TMX_OK;
    memset(sbuf, 'x', sizeof(sbuf));
    /* 0. offers off here: no counts kept, every offer refused */
    in_rtr(UUID_B, 7, (uintptr_t)rbuf, 0x0234, OFFER_LEN, 0, 0);
    assert_true(W->n_pkts >= 1); /* HELLO may go first */
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).opcode, WIRE_OP_RTR_NO);
    assert_int_equal(W->p.n_offers, 0);
    W->p.offer_on = 1;

    /* 1. our RTS went (packet 1 to B), then the offer counting none */
    req_send(&s, sbuf, sizeof(sbuf), 0);
    s.comp.tag = 7;
    assert_int_equal(proto_send(&W->p, &s, 1, 7), TMX_OK);
    before = W->n_pkts;
    in_rtr(UUID_B, 7, (uintptr_t)rbuf, 0x1234, OFFER_LEN, 0, 0);
    assert_int_equal(W->n_puts, 1);
    assert_memory_equal(rbuf, sbuf, OFFER_LEN);
    assert_int_equal(W->n_pkts, before + 1);
    assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_WDONE);
    assert_int_equal(pkt_tmh(&W->pkts[before]).tag, s.id);
    assert_int_equal(pkt_rvh(&W->pkts[before]).len, OFFER_LEN);
    assert_int_equal(pkt_rvh(&W->pkts[before]).rkey, 0x1234);
    in_rvh(UUID_B, WIRE_OP_FIN, 0, s.id, 7, (uintptr_t)sbuf, s.rkey, sizeof(sbuf));
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_OK);

    /* 2. an offer counting both our packets, kept; our next send with the
     * tag writes in the next progress pass, after its RTS */
    before = W->n_pkts;
    in_rtr(UUID_B, 7, (uintptr_t)rbuf, 0x2234, OFFER_LEN, 1, 0);
    assert_int_equal(W->n_pkts, before);
    assert_int_equal(W->p.n_offers, 1);
    memset(rbuf, 0, sizeof(rbuf));
    req_send(&s, sbuf, sizeof(sbuf), 0);
    s.comp.tag = 7;
    assert_int_equal(proto_send(&W->p, &s, 1, 7), TMX_OK);
    assert_int_equal(W->p.n_offers, 0);
    assert_int_equal(W->n_puts, 1);
    assert_true(proto_has_work(&W->p));
    assert_int_equal(proto_progress(&W->p), 1);
    assert_int_equal(W->n_puts, 2);
    assert_memory_equal(rbuf, sbuf, OFFER_LEN);
    assert_int_equal(W->n_pkts, before + 2);
    assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_RNDV);
    assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_WDONE);
    in_rvh(UUID_B, WIRE_OP_FIN, 0, s.id, 7, (uintptr_t)sbuf, s.rkey, sizeof(sbuf));
    assert_int_equal(W->n_done, 2);

    /* 3. kept, then spent by an eager message with the tag: no write */
    in_rtr(UUID_B, 7, (uintptr_t)rbuf, 0x3234, OFFER_LEN, 2, 0);
    assert_int_equal(W->p.n_offers, 1);
    req_send(&s, sbuf, 10, 0);
    assert_int_equal(proto_send(&W->p, &s, 1, 7), TMX_OK);
    assert_int_equal(W->p.n_offers, 0);
    assert_false(proto_has_work(&W->p));
    assert_int_equal(W->n_puts, 2);

    /* 4. an eager message since the count: refused */
    before = W->n_pkts;
    in_rtr(UUID_B, 7, (uintptr_t)rbuf, 0x4234, OFFER_LEN, 2, 0);
    assert_int_equal(W->n_pkts, before + 1);
    assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_RTR_NO);
    assert_int_equal(pkt_rkh(&W->pkts[before]), 0x4234);

    /* 5. kept, but the receiver takes the copy first (it reads): our send
     * with the tag writes nothing, and waits for FIN */
    in_rtr(UUID_B, 8, (uintptr_t)rbuf, 0x5234, OFFER_LEN, 3, 0);
    assert_int_equal(W->p.n_offers, 1);
    assert_true(fake_offer_take_own(&W->iface, 0x5234 ^ 0x70c0));
    req_send(&s, sbuf, sizeof(sbuf), 0);
    s.comp.tag = 8;
    before = W->n_pkts;
    assert_int_equal(proto_send(&W->p, &s, 1, 8), TMX_OK);
    assert_int_equal(proto_progress(&W->p), 1);
    assert_int_equal(W->n_puts, 2);
    assert_int_equal(W->n_pkts, before + 1); /* the RTS only */
    in_rvh(UUID_B, WIRE_OP_FIN, 0, s.id, 8, (uintptr_t)sbuf, s.rkey, sizeof(sbuf));
    assert_int_equal(W->n_done, 4); /* with step 3's eager send */
    assert_int_equal(W->done_st[3], TMX_OK);
    /* a count above ours: refused */
    before = W->n_pkts;
    in_rtr(UUID_B, 8, (uintptr_t)rbuf, 0x6234, OFFER_LEN, 9, 0);
    assert_int_equal(W->n_pkts, before + 1);
    assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_RTR_NO);

    /* 6. malformed: dropped, nothing written or sent */
    dropped = W->p.dropped;
    before = W->n_pkts;
    in_rtr(UUID_B, 8, (uintptr_t)rbuf, 0x7234, 0, 4, 0);
    in_rvh(UUID_B, WIRE_OP_RTR, 0, 0, 8, 1, 2, 3); /* the wrong length */
    in_rvh(UUID_B, WIRE_OP_RTR_NO, 0, 0, 8, 1, 2, 3);
    assert_int_equal(W->p.dropped, dropped + 3);
    assert_int_equal(W->n_pkts, before);
    assert_int_equal(W->n_puts, 2);
    /* a masked offer: taken by a send whose tag differs in its bits */
    in_rtr(UUID_B, 9, (uintptr_t)rbuf, 0x9234, OFFER_LEN, 4, 0x100);
    assert_int_equal(W->p.n_offers, 1);
    req_send(&s, sbuf, sizeof(sbuf), 0);
    s.comp.tag = 9 | 0x100;
    assert_int_equal(proto_send(&W->p, &s, 1, 9 | 0x100), TMX_OK);
    assert_int_equal(W->p.n_offers, 0);
    assert_int_equal(proto_progress(&W->p), 1);
    assert_int_equal(W->n_puts, 3);
    /* kept offers whose words the receiver closed since (cancelled
     * receives) are dropped when the table would refuse a new one */
    for (int i = 0; i < PROTO_OFFERS; i++)
        in_rtr(UUID_B, 100 + (uint64_t)i, (uintptr_t)rbuf, 0xa000 + (uint64_t)i, OFFER_LEN, 5, 0);
    assert_int_equal(W->p.n_offers, PROTO_OFFERS);
    for (int i = 0; i < PROTO_OFFERS; i++)
        fake_offer_close(&W->iface, (0xa000 + (uint64_t)i) ^ 0x70c0);
    before = W->n_pkts;
    in_rtr(UUID_B, 200, (uintptr_t)rbuf, 0xb000, OFFER_LEN, 5, 0);
    assert_int_equal(W->n_pkts, before); /* kept, not refused */
    assert_int_equal(W->p.n_offers, 1);
    /* on the offload engine's thread (our application computes), a
     * request the offer matches is not written: the receiver takes the
     * copy when the request reaches it */
    req_send(&s2, sbuf, sizeof(sbuf), 0); /* s, the masked one, still waits for its FIN */
    s2.comp.tag = 201;
    assert_int_equal(proto_send(&W->p, &s2, 1, 201), TMX_OK);
    atomic_store(&W->iface.rare_thread, (uintptr_t)pthread_self());
    before = W->n_pkts;
    in_rtr(UUID_B, 201, (uintptr_t)rbuf, 0xc000, OFFER_LEN, 5, 0);
    assert_int_equal(W->n_puts, 3);
    assert_int_equal(W->n_pkts, before);
    assert_int_equal(*fake_state(0xc000 ^ 0x70c0), FAKE_OPEN);
    atomic_store(&W->iface.rare_thread, (uintptr_t)0);
    /* B fails: what it offered goes */
    in_rtr(UUID_B, 10, (uintptr_t)rbuf, 0x8234, OFFER_LEN, 6, 0);
    assert_int_equal(W->p.n_offers, 2);
    proto_peer_gone(&W->p, UUID_B);
    assert_int_equal(W->p.n_offers, 0);
}

/* A message of the sender's streaming in (a shm span) when a receive it
 * could take is posted: counted, but matched only when whole, so no offer
 * is made; the receive takes the message once whole. */
static void offer_not_while_streaming(void **state)
{
    static char wbuf[OFFER_LEN], got[OFFER_LEN];
    unsigned char first[sizeof(wire_tmh_t) + 64];
    char rest[400];
    proto_req_t r;
    wire_tmh_t h;
    void *sink;
    int before;

    (void)state;
    offers_on(wbuf);
    wire_tmh_pack(&h, WIRE_OP_EAGER, 0, 0, 7);
    memcpy(first, &h, sizeof(h));
    memset(first + sizeof(h), 'f', 64);
    memset(rest, 'r', sizeof(rest));
    sink = proto_stream_begin(&W->p, UUID_B, first, sizeof(first), sizeof(first) + sizeof(rest));
    assert_non_null(sink);
    before = W->n_pkts;
    req_recv(&r, got, OFFER_LEN, 1, 7);
    assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
    assert_int_equal(W->n_pkts, before);
    assert_int_equal(W->p.rtr_sent, 0);
    proto_stream_more(&W->p, sink, rest, sizeof(rest));
    proto_stream_end(&W->p, sink, TL_STREAM_WHOLE);
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_OK);
    assert_int_equal(r.comp.length, 64 + sizeof(rest));
    assert_memory_equal(got + 64, rest, sizeof(rest));
}

/* The sender's rendezvous took a kept offer, and its receiver refused the
 * request (FIN, failed) before the write's progress pass: the send ends
 * there, is no longer queued, and nothing is written (the receiver's
 * offered receive takes the word itself when a request reaches it). */
static void offer_refused_before_write(void **state)
{
    static char sbuf[100000], rbuf[OFFER_LEN];
    proto_req_t s;

    (void)state;
    assert_int_equal(proto_offload_open(&W->p, NULL, 0), TMX_OK);
    W->p.offer_on = 1;
    W->iface.put_kinds = TL_PUT_DIRECT;
    W->put_status = TMX_OK;
    in_rtr(UUID_B, 7, (uintptr_t)rbuf, 0x1234, OFFER_LEN, 0, 0);
    assert_int_equal(W->p.n_offers, 1);
    req_send(&s, sbuf, sizeof(sbuf), 0);
    s.comp.tag = 7;
    assert_int_equal(proto_send(&W->p, &s, 1, 7), TMX_OK);
    assert_true(proto_has_work(&W->p));
    in_rvh(UUID_B, WIRE_OP_FIN, 1u << 15, s.id, 7, (uintptr_t)sbuf, s.rkey, sizeof(sbuf));
    assert_int_equal(W->n_done, 1);
    assert_int_equal(W->done_st[0], TMX_ERR_IO);
    assert_int_equal(pkt_tmh(&W->pkts[W->n_pkts - 1]).opcode, WIRE_OP_RNDV); /* nothing since */
    assert_false(proto_has_work(&W->p));
    assert_int_equal(proto_progress(&W->p), 0);
    assert_int_equal(W->n_puts, 0);
}

/* With the offload engine in front of the matcher, a rendezvous the
 * engine matches follows the protocol table too: read, or, where the
 * table says write, the sender is asked to write, and the engine
 * completes the receive on WDONE and sends FIN; a sender that cannot
 * write gets a read; a writer that fails leaves the engine no tagged
 * buffer held. */
static void offload_follows_table(void **state)
{
    proto_req_t r;
    char src[100], got[100];
    off_stats_t st;
    wire_ctsh_t c = {0};
    uint32_t slot = 0;
    proto_tl_t table = W->p.tls[0];

    (void)state;
    assert_int_equal(proto_offload_open(&W->p, NULL, 0), TMX_OK);
    proto_peer_hello_set(&W->pp[0]);
    for (int round = 0; round < 5; round++) {
        int before = W->n_pkts, done = W->n_done, ask = round >= 1 && round <= 3;
        memset(src, 'a' + round, sizeof(src));
        memset(got, 0, sizeof(got));
        if (ask)
            table_write();
        else
            W->p.tls[0] = table;
        req_recv(&r, got, sizeof(got), 0, 7);
        assert_int_equal(proto_recv_post(&W->p, &r), TMX_OK);
        W->get_kind = 0;
        in_rvh(UUID_A, WIRE_OP_RNDV, 0, 60 + round, 7, (uintptr_t)src, 0x77, sizeof(src));
        off_engine_stats(W->p.off, &st);
        assert_int_equal(st.matched, round + 1); /* the engine took each */
        if (!ask) { /* read at once, then FIN */
            assert_int_equal(W->get_kind, TL_GET_DIRECT);
            assert_int_equal(W->n_pkts, before + 1);
            assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_FIN);
            assert_int_equal(W->n_done, done + 1);
            assert_int_equal(W->done_st[done], TMX_OK);
            assert_memory_equal(got, src, sizeof(got));
            continue;
        }
        assert_int_equal(W->get_kind, 0);
        assert_int_equal(W->n_pkts, before + 1);
        assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_CTS);
        assert_int_equal(pkt_tmh(&W->pkts[before]).app_ctx, 60 + round);
        c = pkt_ctsh(&W->pkts[before]);
        assert_int_equal(c.va, (uintptr_t)got);
        assert_int_equal(c.len, sizeof(src));
        assert_int_equal(c.skey, 0x77);
        assert_int_equal(W->n_done, done);
        assert_true(proto_req_waiting(&r));
        assert_int_equal(proto_req_writer(&r), 0);
        off_engine_stats(W->p.off, &st);
        assert_int_equal(st.reading, 1);
        slot = reg_key_slot(c.rkey);
        if (round == 1) { /* written: the engine completes it and sends FIN */
            memcpy(got, src, sizeof(got));
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(W->n_pkts, before + 2);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_FIN);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).app_ctx, 61);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).flags, 0);
            assert_int_equal(pkt_rvh(&W->pkts[before + 1]).rkey, 0x77);
            assert_int_equal(W->n_done, done + 1);
            assert_int_equal(W->done_st[done], TMX_OK);
        } else if (round == 2) { /* the sender cannot write: the engine reads */
            W->get_status = TMX_OK;
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_NOWRITE, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(W->get_kind, TL_GET_DIRECT);
            assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_FIN);
            assert_int_equal(W->n_done, done + 1);
            assert_int_equal(W->done_st[done], TMX_OK);
            assert_memory_equal(got, src, sizeof(got));
        } else { /* the writer failed: core ends the receive, the engine forgets it */
            proto_req_abort(&W->p, &r);
            assert_int_equal(W->n_done, done);
            assert_false(proto_req_waiting(&r));
            in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, slot, 0, c.va, c.rkey, c.len);
            assert_int_equal(W->n_done, done);
            assert_int_equal(W->n_pkts, before + 1);
        }
        off_engine_stats(W->p.off, &st);
        assert_int_equal(st.reading, 0);
        assert_int_equal(st.listed, 0);
        assert_false(proto_req_waiting(&r));
    }
    assert_int_equal(W->p.dropped, 1); /* the WDONE after the abort */
    /* a message that came first, taken by a receive as it is posted:
     * software's write, whatever the request's memory held before */
    {
        int before, done = W->n_done;
        table_write();
        memset(src, 'z', sizeof(src));
        in_rvh(UUID_A, WIRE_OP_RNDV, 0, 70, 7, (uintptr_t)src, 0x78, sizeof(src));
        memset(&r, 0xbe, sizeof(r));
        req_recv(&r, got, sizeof(got), 0, 7);
        before = W->n_pkts;
        assert_int_equal(proto_recv_match(&W->p, &r), TMX_OK);
        assert_int_equal(W->n_pkts, before + 1);
        assert_int_equal(pkt_tmh(&W->pkts[before]).opcode, WIRE_OP_CTS);
        c = pkt_ctsh(&W->pkts[before]);
        memcpy(got, src, sizeof(got));
        in_rvh(UUID_A, WIRE_OP_WDONE, WIRE_WDONE_ACK, reg_key_slot(c.rkey), 0, c.va, c.rkey, c.len);
        assert_int_equal(W->n_pkts, before + 2);
        assert_int_equal(pkt_tmh(&W->pkts[before + 1]).opcode, WIRE_OP_FIN);
        assert_int_equal(W->n_done, done + 1);
        assert_int_equal(W->done_st[done], TMX_OK);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eager_send_hello_first),
        cmocka_unit_test(send_refused_untouched),
        cmocka_unit_test(rendezvous_send_and_fin),
        cmocka_unit_test(rendezvous_burst_gives_slots_back),
        cmocka_unit_test(unexpected_rendezvous_no_memory_refused),
        cmocka_unit_test(expected_eager_truncated),
        cmocka_unit_test(unexpected_eager_then_receive),
        cmocka_unit_test(unexpected_rendezvous_read_then_fin),
        cmocka_unit_test(failed_read_fails_both_sides),
        cmocka_unit_test(failed_rendezvous_delivers_nothing),
        cmocka_unit_test(fin_waits_for_room),
        cmocka_unit_test(fin_waits_without_memory),
        cmocka_unit_test(admission_at_the_bound),
        cmocka_unit_test(hello_from_strangers),
        cmocka_unit_test(writer_flag_on_requests_only),
        cmocka_unit_test(abort_releases),
        cmocka_unit_test(discard_sends_fin),
        cmocka_unit_test(spec_syntax),
        cmocka_unit_test(table_decides),
        cmocka_unit_test(stream_sender_renumbered),
        cmocka_unit_test(stream_short_or_cut),
        cmocka_unit_test(stream_into_empty_receive),
        cmocka_unit_test(write_receiver),
        cmocka_unit_test(write_receiver_hostile),
        cmocka_unit_test(write_sender),
        cmocka_unit_test(regcache_lends_live_memory),
        cmocka_unit_test(offload_follows_table),
        cmocka_unit_test(offload_refusal_tells_sender),
        cmocka_unit_test(offer_written_or_read),
        cmocka_unit_test(offer_spent_or_cancelled),
        cmocka_unit_test(offer_not_made),
        cmocka_unit_test(offer_sender),
        cmocka_unit_test(offer_not_while_streaming),
        cmocka_unit_test(offer_refused_before_write),
    };
    return unit_main(argc, argv,
                     &(const unit_group_t){"", tests, sizeof(tests) / sizeof(tests[0]), setup, teardown},
                     1);
}
