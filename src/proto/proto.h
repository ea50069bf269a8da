/*
 * The protocols (seed 000): eager below a per-transport limit, rendezvous
 * above it: the sender posts TMH|RVH, the receiver reads the sender's
 * buffer straight into the user buffer once matched and answers FIN; the
 * sender's request completes on FIN only. Synchronous sends always use
 * rendezvous, so that they complete only after the match. Which protocol
 * runs for a transport and a size is proto's table (proto_table.c).
 *
 * proto sits between core and the transports. It calls the matcher, reg
 * and the transports below it; it reports to core only through the
 * upcalls core registered (proto_upcalls_t), and never drives core's
 * progress loop. Its state is its own: proto_t, and the parts of core's
 * requests, messages and peers it defines here (proto_req_t, proto_msg_t,
 * proto_peer_t), which core embeds and never interprets beyond reading.
 *
 * Calls into proto are serialised by core (its lock); the transports'
 * callbacks below run inside their progress(), under the same lock.
 */
#ifndef TMX_PROTO_H
#define TMX_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "match/match.h"
#include "offload/offload.h"
#include "proto/proto_table.h"
#include "reg/rcache.h"
#include "reg/reg.h"
#include "tl/tl.h"
#include "tmx.h"
#include "util/copy.h"
#include "util/list.h"

typedef struct proto proto_t;

/* proto's state for one peer number: one bit, PROTO_PEER_HELLO (our
 * address went to it), of the word core keeps per peer, which a job holds
 * one of per remote process. The word's other bits are core's: proto
 * reads and sets only its own, through the two calls below. The remote
 * context's uuid is its endpoint's (tl_ep_t.uuid). */
typedef struct proto_peer {
    uintptr_t word;
} proto_peer_t;

#define PROTO_PEER_HELLO ((uintptr_t)4)

static inline int proto_peer_hello(const proto_peer_t *pp)
{
    return (pp->word & PROTO_PEER_HELLO) != 0;
}

static inline void proto_peer_hello_set(proto_peer_t *pp)
{
    pp->word |= PROTO_PEER_HELLO;
}

/* proto's part of a request. Core fills comp (op, user context, remote
 * data), flags, buf and len, and for receives recv (source, tag, ignore)
 * before handing it down; proto fills the rest and reports the end
 * through proto_upcalls_t.complete. */
typedef struct proto_req {
    uint32_t flags;             /* enum tmx_op_flag */
    uint32_t id;                /* rendezvous sends: slot in proto_t.rndv */
    uint32_t fin_wait;          /* rendezvous sends: the slot is held */
    uint8_t wr_wait;            /* rendezvous receives by write: the slot is held,
                                   the sender writes (rndv_src) */
    uint8_t wr_started;         /* rendezvous sends: a CTS came, the write began */
    uint8_t parked;             /* receives: its rendezvous waits in proto_t.parked; sends:
                                   its write into an offer waits in offer_writes (off_link) */
    uint8_t rtr;                /* receives: offered to its sender (RTR), no answer yet;
                                   holds a slot as wr_wait */
    uint8_t rtr_rts;            /* offered, and the sender's RTS matched it (rndv_
                                   fields set): waits for WDONE or RTR_NO */
    uint32_t tx_seq;            /* rendezvous sends, offers on: the tagged packets
                                   sent to the peer up to its RTS (proto_pcnt_t) */
    uint64_t rkey;              /* rendezvous sends: key the FIN must echo */
    uint64_t dest_uuid;         /* rendezvous sends: who may send the FIN */
    void *buf;
    size_t len;
    tmx_completion_t comp;
    match_recv_t recv;          /* receives: the posted entry */
    /* receives, with the offload engine on (set by off_post, when posted;
     * not cleared by proto_req_init, which the fast path pays): */
    uint8_t off_in;             /* the engine holds it (handle off_handle) */
    uint8_t off_host;           /* the host holds it alone (in off_host_only) */
    uint32_t off_handle;
    uint64_t off_token;         /* the engine's read in flight */
    uint8_t off_wr;             /* that "read" is the sender's write (wr_wait) */
    util_dlist_t off_link;      /* in off_host_only, proto_t.parked or offer_writes */
    /* offers (set when made or taken, read only while rtr or parked): */
    uint64_t rtr_token;         /* an offered receive's claim word (tl.h offer_open);
                                   a send that took an offer: the offer's */
    tl_iface_t *rtr_iface;      /* an offered receive's: where its word is */
    tl_get_op_t get;            /* rendezvous receives: the read */
    struct proto *owner;        /* rendezvous receives: for get.done */
    tmx_peer_t rndv_src;        /* rendezvous receives: where FIN goes */
    uint32_t rndv_app_ctx;      /* rendezvous receives: echoed in FIN */
    uint64_t rndv_va;
    uint64_t rndv_rkey;
    uint64_t rndv_len;
    rcache_reg_t *reg;          /* rendezvous: the lent buffer's registration (NULL
                                   without the cache); set with the slot */
    uint64_t wr_uuid;           /* rendezvous receives by write: the writer */
    uint64_t wr_placed;         /* bytes its packets placed, in order (TL_PUT_COPY) */
} proto_req_t;

/* Per remote process, with offers on (TMX_OFFLOAD_OFFER): the tagged packets
 * (eager, rendezvous requests) sent to it and taken from it, by which a
 * sender knows whether a receive offered by RTR could have matched one of
 * its messages already, and whether it runs an engine that writes. Keyed
 * by uuid: peer numbers change when an implicit peer is added. */
typedef struct proto_pcnt {
    uint64_t uuid;              /* 0: a free entry */
    uint32_t tx;
    uint32_t rx;
    uint8_t writer;             /* its rendezvous requests carried WIRE_FLAG_WRITER */
    uint16_t offers_out;        /* our receives offered to it, unanswered (at most
                                   PROTO_OFFERS) */
    uint16_t owed;              /* our answers to its offers waiting for room */
} proto_pcnt_t;

/* An offer (RTR) a receiver made us and we keep for our next send with
 * its tag. */
typedef struct proto_offer {
    uint64_t uuid;              /* the receiver; 0: a free entry */
    uint64_t tag;
    uint64_t ignore;            /* the offered receive's mask */
    uint64_t va;
    uint64_t rkey;
    uint64_t len;
    uint64_t token;             /* its claim word, taken before we write */
    tmx_peer_t peer;            /* the receiver's number here */
} proto_offer_t;

#define PROTO_OFFERS 8           /* offers kept at once; more are declined */
#define PROTO_OFFER_MASK_BITS 3  /* an offered receive ignores at most this many tag bits */

enum proto_msg_kind {
    PROTO_MSG_EAGER = 1,
    PROTO_MSG_RNDV = 2
};

/* An unexpected message. Eager ones own a copy of their payload; a
 * rendezvous one holds only its header (seed 000). Core allocates it
 * zeroed (proto_upcalls_t.msg_alloc) and reads m, len, has_data and data
 * for probes. */
typedef struct proto_msg {
    match_msg_t m;              /* source and tag, in the matcher */
    uint8_t kind;               /* enum proto_msg_kind */
    uint32_t app_ctx;           /* rendezvous: sender's request id */
    uint16_t has_data;
    uint16_t writer;            /* rendezvous: WIRE_FLAG_WRITER came with it */
    uint64_t data;
    uint64_t va;                /* rendezvous: sender's buffer */
    uint64_t rkey;
    size_t len;
    void *payload;              /* eager: malloc'ed copy, NULL if empty */
} proto_msg_t;

/* What proto asks of core. arg is proto_upcalls_t.arg. */
typedef struct proto_upcalls {
    void *arg;
    /* A request has ended with status; proto no longer touches it. */
    void (*complete)(void *arg, proto_req_t *req, tmx_status_t status);
    /* A zeroed message, or NULL when out of memory. */
    proto_msg_t *(*msg_alloc)(void *arg);
    /* A message is kept unexpected, holding bytes of payload: counted
     * against the bound on unexpected memory. */
    void (*msg_kept)(void *arg, proto_msg_t *msg, size_t bytes);
    /* Takes a message back (its payload is already freed). */
    void (*msg_free)(void *arg, proto_msg_t *msg);
    /* The endpoint to a peer (made on first use) and proto's state for
     * it. TMX_ERR_PEER_FAILED for a peer known dead. */
    tmx_status_t (*peer_ep)(void *arg, tmx_peer_t peer, tl_ep_t **ep, proto_peer_t **pp);
    /* The number of the peer that is context uuid, or TMX_PEER_NONE. */
    tmx_peer_t (*peer_by_uuid)(void *arg, uint64_t uuid);
    /* A process that was not added sent its address (HELLO): its number
     * from now on; TMX_ERR_INVALID unless the address is uuid's. */
    tmx_status_t (*peer_add_implicit)(void *arg, uint64_t uuid, const void *addr, size_t len,
                                      tmx_peer_t *out);
    /* This context's address blob into buf (room bytes); *used its size. */
    tmx_status_t (*address)(void *arg, void *buf, size_t room, size_t *used);
} proto_upcalls_t;

typedef struct proto_stream proto_stream_t;

/* A control packet (FIN, CTS, WDONE) that found the transport full, kept
 * until there is room. */
#define PROTO_CTRL_MAX 64
typedef struct proto_ctrl {
    util_dlist_t link;
    tmx_peer_t peer;
    size_t len;
    uint64_t owed_uuid;         /* an answer to an offer of this process's (RTR_NO) */
    unsigned char pkt[PROTO_CTRL_MAX];
} proto_ctrl_t;

/* Control packets kept without memory (malloc failed): a peer waits for
 * each, so it must not be lost for want of a few bytes. */
#define PROTO_CTRL_SPARES 16

struct proto {
    proto_upcalls_t up;
    match_engine_t match;       /* posted receives and unexpected messages */
    proto_req_t **rndv;         /* rendezvous sends by id (a key's slot) */
    uint32_t n_rndv_slots;      /* 64, doubling as a burst needs, back to
                                   64 when the last is over */
    uint32_t n_rndv_used;
    uint32_t rndv_free;         /* head of the free-slot chain */
    reg_keygen_t keygen;        /* remote-access keys (src/reg) */
    util_dlist_t ctrl_pending;  /* FINs waiting for room */
    proto_ctrl_t ctrl_spares[PROTO_CTRL_SPARES]; /* for them, when malloc fails */
    uint32_t ctrl_spares_used;  /* bit i: ctrl_spares[i] is in ctrl_pending */
    util_dlist_t streams;       /* packets streaming in (proto_stream_t) */
    proto_stream_t *spare_stream; /* one freed, for the next */
    uint64_t dropped;           /* packets from the wire that did not parse */
    int unexp_full;             /* set by core at the bound on unexpected memory */
    proto_spec_t spec;          /* TMX_PROTO */
    proto_tl_t tls[PROTO_MAX_TLS]; /* each open transport's table (its iface->above) */
    int n_tls;
    /* The offload engine (src/offload), when on: proto is its host. */
    off_engine_t *off;
    uint32_t off_handled;       /* unexpected messages the host has handled */
    uint32_t off_reported;      /* the count the engine last heard */
    util_dlist_t off_host_only; /* posted receives the engine does not hold */
    uint32_t n_host_only;
    size_t off_min;             /* receives from this size on go to the engine */
    rcache_t *rc;               /* the registration cache (src/reg/rcache.h), or NULL */
    uint32_t n_wr_wait;         /* receives waiting for their sender's write */
    uint64_t wr_engine;         /* rendezvous whose senders the engine's
                                   thread asked to write (write_wanted) */
    /* Receives posted with the engine on that took a rendezvous which
     * came before them: started by the next progress pass, on whichever
     * thread makes it (proto_msg_deliver). */
    util_dlist_t parked;
    /* Receive offers (RTR), with the engine on: */
    int offer_on;               /* TMX_OFFLOAD_OFFER: tagged packets are counted, offers
                                   made and taken; without it every offer is refused */
    proto_pcnt_t *pcnt;         /* open addressing by uuid, pcnt_cap entries */
    uint32_t pcnt_cap, pcnt_used;
    proto_pcnt_t *pcnt_last;    /* the entry found last */
    int pcnt_broken;            /* a count could not be kept: no offers, made or taken */
    proto_offer_t offers[PROTO_OFFERS];
    uint32_t n_offers;
    uint64_t rtr_sent;          /* offers made */
    uint64_t rtr_written;       /* offered receives written by their senders */
    util_dlist_t offer_writes;  /* our sends that took an offer, written by the next
                                   progress pass (off_link; parked set) */
    uint64_t wr_admitted;       /* bytes taken beyond the bound for them */
    uint32_t rts_admitted;      /* rendezvous headers taken beyond the bound
                                   since it was last reached */
};

/* Requests of this many bytes or more keep the offload engine watching
 * (core's CORE_OFF_BIG): a rendezvous send this large says its sender
 * writes on request even while its application computes
 * (WIRE_FLAG_WRITER). */
#define PROTO_OFF_BIG 65536

/* What may be taken beyond the bound of unexpected memory from peers whose
 * writes receives wait for (proto_admit_cb). */
#define PROTO_WR_ADMIT_MAX (16u << 20)

/* Rendezvous headers no receive takes yet, taken beyond the bound (a
 * number, counted from each time the bound is reached; each holds a few
 * hundred bytes): a header holds no payload, and what its sender sent
 * after it (a FIN or CTS our own operations wait for, or a message a
 * posted receive takes) must not wait behind it. */
#define PROTO_RTS_ADMIT_MAX 16384u

/* To a peer past its soft bound of unexpected memory (tl_ops_t's
 * peer_pressed), a message of more bytes goes as rendezvous: its header
 * is as large as that. */
#define PROTO_PRESSED_EAGER_MAX 256

/* Puts the offload engine (src/offload) in front of the matcher: posted
 * receives of min bytes or more go to its list where they can
 * (docs/offload.md, "How the host uses it") and tagged packets go through
 * it. Before any traffic. */
tmx_status_t proto_offload_open(proto_t *p, const off_caps_t *caps, size_t min);

/* Registers every buffer lent for a rendezvous (a send's, or a receive's
 * for a write) through the process's registration cache, bounded to
 * entries, and refuses remote access to one whose memory was unmapped
 * since (docs/registration.md). Before any traffic. */
tmx_status_t proto_regcache_open(proto_t *p, size_t entries);

/* spec: TMX_PROTO as parsed (NULL: the defaults everywhere). */
tmx_status_t proto_init(proto_t *p, const proto_upcalls_t *up, const proto_spec_t *spec);

/* Compiles the protocol table of a transport just opened, before any
 * endpoint of it is used. TMX_ERR_INVALID, logged, when TMX_PROTO asks
 * it for a protocol it does not offer. */
tmx_status_t proto_iface_add(proto_t *p, tl_iface_t *iface);
/* Frees what proto holds (FINs waiting, slots, the matcher's indexes);
 * messages and requests are core's and freed by it. After the transports
 * closed. */
void proto_fini(proto_t *p);

/* Clears proto's part of a new request (on every operation: inline). */
static inline void proto_req_init(proto_req_t *req)
{
    /* What follows recv is set before use: the receive entry when posted,
     * the rendezvous fields when a receive starts reading (rndv_start). */
    util_zero(req, offsetof(proto_req_t, recv));
    req->recv.bin = NULL;
}

/* Starts a send to peer of req->buf, req->len under tag (req->comp
 * carries user context and remote data). On TMX_OK the request completes
 * now (eager) or on FIN; on error nothing was sent and the request is
 * untouched. The endpoint comes from proto_upcalls_t.peer_ep. */
tmx_status_t proto_send(proto_t *p, proto_req_t *req, tmx_peer_t peer, uint64_t tag);

/* The same to an endpoint the caller looked up (ep and pp as peer_ep
 * gives them): the data path, which core serves from its peer table
 * without the upcall. */
tmx_status_t proto_send_ep(proto_t *p, proto_req_t *req, tmx_peer_t peer, tl_ep_t *ep, proto_peer_t *pp,
                           uint64_t tag);

/* Sends an eager message that keeps no request (TMX_OP_FLAG_INJECT) to
 * an endpoint the caller looked up. */
tmx_status_t proto_inject(proto_t *p, tl_ep_t *ep, proto_peer_t *pp, const void *buf, size_t len,
                          uint64_t tag, int has_data, uint64_t data);

/* Delivers the earliest unexpected message that req->recv matches into
 * req: TMX_OK, or TMX_ERR_NO_MESSAGE when none does (nothing changed). */
tmx_status_t proto_recv_match(proto_t *p, proto_req_t *req);

/* Posts a receive that proto_recv_match found nothing for. */
tmx_status_t proto_recv_post(proto_t *p, proto_req_t *req);

/* Takes a posted receive back: TMX_OK, or TMX_ERR_BUSY if a message
 * already matched it, or its sender took its offer (it completes when the
 * sender's write does). The caller completes it. */
tmx_status_t proto_recv_cancel(proto_t *p, proto_req_t *req);

/* A request that can no longer finish because its peer is gone: a
 * rendezvous send gives up its slot (a late FIN is then dropped), a
 * posted receive leaves the matcher, a receive's length says 0 (nothing
 * delivered). The caller completes it. */
void proto_req_abort(proto_t *p, proto_req_t *req);

/* 1 while a send waits for its FIN, a receive is posted, or a receive
 * waits for its sender's write. */
int proto_req_waiting(const proto_req_t *req);

/* The sender a receive waits for the write of, or TMX_PEER_NONE. */
static inline tmx_peer_t proto_req_writer(const proto_req_t *req)
{
    return req->wr_wait || req->parked ? req->rndv_src : TMX_PEER_NONE;
}

/* Delivers an unexpected message (matched or claimed) into a receive and
 * frees the message. */
void proto_msg_deliver(proto_t *p, proto_msg_t *msg, proto_req_t *req);

/* Drops a claimed message; a rendezvous sender still gets its FIN. */
void proto_msg_discard(proto_t *p, proto_msg_t *msg);

/* Frees a message's payload without the upcall (context teardown). */
void proto_msg_clear(proto_msg_t *msg);

/* The transports' callbacks; their argument is the proto_t. */
void proto_recv_cb(void *arg, uint64_t src_uuid, const void *data, size_t len);
/* The same for a packet that streams in (tl_stream_cb_t): proto_stream_cb
 * holds the three. */
void *proto_stream_begin(void *arg, uint64_t src_uuid, const void *first, size_t first_len, size_t total);
void proto_stream_more(void *arg, void *sink, const void *piece, size_t len);
void proto_stream_end(void *arg, void *sink, int how);
extern const tl_stream_cb_t proto_stream_cb;
/* 0 for a packet that would be one more unexpected message while core
 * holds as many bytes as its bound allows (tl_admit_cb_t). */
int proto_admit_cb(void *arg, uint64_t src_uuid, const void *data, size_t len);
/* Remote reads of our rendezvous buffers: key, bounds (src/reg). */
tmx_status_t proto_mem_check_cb(void *arg, uint64_t addr, uint64_t len, uint64_t rkey);
/* Emulated writes into a receive's buffer (tl_put_data_t) and the end of
 * ours (tl_put_done_t). */
tmx_status_t proto_put_data_cb(void *arg, uint64_t src_uuid, uint64_t addr, uint64_t rkey,
                               const void *data, size_t len);
void proto_put_done_cb(void *arg, uint64_t lkey, tmx_status_t status);

/* Test hook: the next n control packets that must wait for room find no
 * memory (0: none). */
void proto_test_fail_alloc(unsigned n);

/* The process uuid failed: offers it made us are dropped. */
void proto_peer_gone(proto_t *p, uint64_t uuid);

/* Retries FINs that found the transport full; the number sent. */
int proto_progress(proto_t *p);

static inline int proto_has_work(const proto_t *p)
{
    return !util_dlist_empty(&p->ctrl_pending) || !util_dlist_empty(&p->parked) ||
           !util_dlist_empty(&p->offer_writes);
}

#endif
