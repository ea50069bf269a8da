/*
 * tmx's wire headers, after seed 000 ("Sending TM messages"):
 *
 *   eager:              TMH | [data] | payload
 *   rendezvous request: TMH | RVH | [data]
 *   FIN:                TMH | RVH      (a copy of the request's, opcode FIN)
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
    WIRE_OP_HELLO = 4  /* the sender's address blob (tmx_address), sent before
                          anything else to each peer, so that a receiver that
                          never added the sender can answer it */
};

enum wire_flag {
    WIRE_FLAG_DATA = 1u << 0, /* 8 bytes of remote completion data follow */
    WIRE_FLAG_MASK = WIRE_FLAG_DATA
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

#endif
