/*
 * tmx's wire headers, after seed 000 ("Sending TM messages"):
 *
 *   eager:              TMH | [data] | payload
 *   rendezvous request: TMH | RVH | [data]
 *   FIN:                TMH | RVH      (a copy of the request's, opcode FIN)
 *
 * and for rendezvous by write (seed 003), the receiver's answer to a
 * rendezvous request and the writer's last word:
 *
 *   CTS:                TMH | CTSH     (where to write, under which key)
 *   WDONE:              TMH | RVH      (the write is in place: the
 *                                       immediate naming the receive)
 *
 * [data] is the 8-byte remote completion data, present when the TMH flags
 * carry WIRE_FLAG_DATA. All fields are little endian on the wire; the
 * wire_* helpers convert. A receiver validates every field before use.
 */
#ifndef TMX_PROTO_WIRE_H
#define TMX_PROTO_WIRE_H

#include <assert.h>
#include <endian.h>
#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION 1

enum wire_opcode {
    WIRE_OP_EAGER = 1, /* tagged message with its payload */
    WIRE_OP_RNDV = 2,  /* tagged rendezvous request: the receiver reads */
    WIRE_OP_FIN = 3,   /* rendezvous done: the sender may release its buffer */
    WIRE_OP_HELLO = 4, /* the sender's address blob (tmx_address), sent before
                          anything else to each peer, so that a receiver that
                          never added the sender can answer it */
    WIRE_OP_CTS = 5,   /* clear to send: the matched receiver asks the sender
                          to write into its buffer (app_ctx: the sender's
                          request id, from the request) */
    WIRE_OP_WDONE = 6, /* the sender's write is in place (app_ctx: the
                          receiver's slot, from its key; tag: the sender's
                          request id, as in its RTS; RVH: the receiver's
                          buffer, key and the bytes written) */
    WIRE_OP_RTR = 7,   /* ready to receive: a posted receive that names its
                          sender offers its buffer before the message came
                          (tag: the receive's; app_ctx: the tagged packets
                          the receiver has taken from this sender so far;
                          CTSH: its buffer, its key, its length, and in skey
                          the receive's ignore mask; then an RKH: the token
                          of the claim word the one copy is taken with);
                          the sender writes the first message it sends with
                          a matching tag after those, if it goes by
                          rendezvous and takes the word first, and answers
                          WDONE; or it says RTR_NO */
    WIRE_OP_RTR_NO = 8 /* the sender will not write into an offered buffer
                          (RKH: the offer's key) */
};

enum wire_wdone_flag {
    WIRE_WDONE_ACK = 1u << 0,     /* the bytes went as packets: answer FIN once
                                     every one is in place */
    WIRE_WDONE_NOWRITE = 1u << 1, /* the sender could not write: read the data
                                     as for any rendezvous request, then FIN */
    WIRE_WDONE_MASK = WIRE_WDONE_ACK | WIRE_WDONE_NOWRITE
};

enum wire_flag {
    WIRE_FLAG_DATA = 1u << 0,   /* 8 bytes of remote completion data follow */
    WIRE_FLAG_WRITER = 1u << 1, /* rendezvous requests only: the sender's
                                   offload engine runs and its transport
                                   writes into the receiver's memory, so it
                                   answers a CTS even while its application
                                   computes (every process of a job runs
                                   the same build: one older than this flag
                                   drops such requests) */
    WIRE_FLAG_MASK = WIRE_FLAG_DATA,                   /* any tagged packet */
    WIRE_FLAG_RNDV_MASK = WIRE_FLAG_DATA | WIRE_FLAG_WRITER /* a rendezvous request */
};

/* Tag Matching Header: seed 000's ibv_tmh with the reserved bytes used. */
typedef struct wire_tmh {
    uint8_t opcode;    /* enum wire_opcode */
    uint8_t version;   /* WIRE_VERSION */
    uint16_t flags;    /* enum wire_flag */
    uint32_t app_ctx;  /* rendezvous: the sender's request id, echoed in FIN */
    uint64_t tag;      /* the message's tag */
} wire_tmh_t;

/* Rendezvous Header: seed 000's ibv_rvh, with key and length widened to
 * 64 bits so that one request covers any buffer. */
typedef struct wire_rvh {
    uint64_t va;       /* sender's buffer address */
    uint64_t rkey;     /* key under which the buffer may be read */
    uint64_t len;      /* message length in bytes */
} wire_rvh_t;

/* Clear-To-Send Header: the receiver's buffer and the key it lends it
 * under, the bytes to write, and the sender's own key echoed (the
 * request's RVH.rkey), so that a CTS names one rendezvous send exactly. */
typedef struct wire_ctsh {
    uint64_t va;       /* receiver's buffer address */
    uint64_t rkey;     /* key under which it may be written */
    uint64_t len;      /* bytes to write: the message, cut to the buffer */
    uint64_t skey;     /* the sender's key, from the request */
} wire_ctsh_t;

/* Receive Key Header: the key of an offered receive (RTR_NO); after an
 * RTR's CTSH, the token of its claim word (tl.h offer_open). */
typedef struct wire_rkh {
    uint64_t rkey;
} wire_rkh_t;

static_assert(sizeof(wire_ctsh_t) == 32, "CTSH is 32 bytes");
static_assert(sizeof(wire_rkh_t) == 8, "RKH is 8 bytes");
static_assert(sizeof(wire_tmh_t) == 16, "TMH is 16 bytes");
static_assert(offsetof(wire_tmh_t, app_ctx) == 4, "TMH layout");
static_assert(offsetof(wire_tmh_t, tag) == 8, "TMH layout");
static_assert(sizeof(wire_rvh_t) == 24, "RVH is 24 bytes");

static inline void wire_tmh_pack(wire_tmh_t *h, uint8_t op, uint16_t flags, uint32_t app_ctx,
                                 uint64_t tag)
{
    h->opcode = op;
    h->version = WIRE_VERSION;
    h->flags = htole16(flags);
    h->app_ctx = htole32(app_ctx);
    h->tag = htole64(tag);
}

static inline void wire_tmh_unpack(wire_tmh_t *h)
{
    h->flags = le16toh(h->flags);
    h->app_ctx = le32toh(h->app_ctx);
    h->tag = le64toh(h->tag);
}

static inline void wire_rvh_pack(wire_rvh_t *r, uint64_t va, uint64_t rkey, uint64_t len)
{
    r->va = htole64(va);
    r->rkey = htole64(rkey);
    r->len = htole64(len);
}

static inline void wire_rvh_unpack(wire_rvh_t *r)
{
    r->va = le64toh(r->va);
    r->rkey = le64toh(r->rkey);
    r->len = le64toh(r->len);
}

static inline void wire_ctsh_pack(wire_ctsh_t *c, uint64_t va, uint64_t rkey, uint64_t len,
                                  uint64_t skey)
{
    c->va = htole64(va);
    c->rkey = htole64(rkey);
    c->len = htole64(len);
    c->skey = htole64(skey);
}

static inline void wire_ctsh_unpack(wire_ctsh_t *c)
{
    c->va = le64toh(c->va);
    c->rkey = le64toh(c->rkey);
    c->len = le64toh(c->len);
    c->skey = le64toh(c->skey);
}

#endif
