/*
 * The udp transport's wire header, after seed 001 (the usNIC BTL): every
 * datagram carries one segment of one channel of one peer pair, with a
 * sequence number, a cumulative ACK of each channel piggy-backed, and a
 * fragment's place in the packet it belongs to. Little endian (but port
 * and the node indexes, which are in network order: the port as in a
 * sockaddr, the indexes as a classic BPF program loads them); a receiver
 * checks every field, and the checksum over header and payload, before it
 * trusts any of them.
 */
#ifndef TMX_TL_UDP_WIRE_H
#define TMX_TL_UDP_WIRE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define UDP_WIRE_VERSION 3

enum udp_channel {
    UDP_CH_PRIO = 0,  /* small MTU: control packets (FIN, read requests) */
    UDP_CH_DATA = 1,  /* tagged messages and read data, in order */
    UDP_N_CH = 2
};

enum udp_flag {
    UDP_FLAG_ACK_ONLY = 1u << 0,  /* no segment: only the ACK fields count */
    UDP_FLAG_FIRST = 1u << 1,     /* first segment of a packet */
    UDP_FLAG_LAST = 1u << 2,      /* last segment of a packet */
    UDP_FLAG_GET_REQ = 1u << 3,   /* payload is a udp_get_req_t */
    UDP_FLAG_GET_DATA = 1u << 4,  /* payload is read data for op frag_id */
    UDP_FLAG_SACK = 1u << 5,      /* ACK_ONLY with a udp_sack_t payload */
    UDP_FLAG_STALL = 1u << 6,     /* ACK_ONLY: the sender of this ACK waits for
                                     data on the data channel (a read under
                                     way) and none came for UDP_STALL_US
                                     since segment seq arrived */
    UDP_FLAG_BYE = 1u << 7,       /* ACK_ONLY: the sender closed its context
                                     (a clean exit, not a death) */
    UDP_FLAG_NOBODY = 1u << 8,    /* ACK_ONLY: no process of the node holds
                                     the index that our datagram named (a
                                     refusal, as an ICMP port unreachable is
                                     where ports are per process); src_id and
                                     src_index are that datagram's dst_id and
                                     dst_index */
    UDP_FLAG_PUT_DATA = 1u << 9,  /* payload is written data: offset is the
                                     target address of its first byte,
                                     frag_id and reserved the low and high
                                     halves of the target's key */
    UDP_FLAG_HANDED = 1u << 10,  /* handed on by a node-mate (udp_node.c): pad is the
                                     IPv4 address it first came from */
    UDP_FLAG_PRESSURE = 1u << 11, /* the sender of this datagram is past its soft
                                     bound of unexpected memory: send it
                                     rendezvous (tl.h: rx_pressure) */
    UDP_FLAG_MASK = 0xfff
};

typedef struct udp_hdr {
    uint8_t version;      /* UDP_WIRE_VERSION */
    uint8_t channel;      /* enum udp_channel */
    uint16_t flags;       /* enum udp_flag */
    uint16_t len;         /* payload bytes after this header */
    uint16_t port;        /* the sender's socket port, network order: its
                             datagrams may leave from another (a socket
                             connected to us), replies go to this one */
    uint64_t job_key;     /* the job's key: other jobs' packets are dropped */
    uint64_t src_id;      /* the sending context */
    uint64_t dst_id;      /* the receiving context */
    uint32_t seq;         /* the segment's number in its channel */
    uint32_t ack[UDP_N_CH]; /* per channel: all below this were received */
    uint32_t frag_id;     /* GET_DATA: the read's id; PUT_DATA: the key's
                             low half; else 0 */
    uint64_t offset;      /* GET_DATA, PUT_DATA: where the bytes go; FIRST:
                             packet length */
    uint32_t csum;        /* CRC-32C of header (with csum 0) and payload */
    uint32_t reserved;    /* GET_DATA: the owner's status (non-zero: it
                             refused the read); PUT_DATA: the key's high
                             half; else zero */
    uint16_t src_index;   /* the sender's node index (udp_node.c), network
                             order: replies name it as their dst_index */
    uint16_t dst_index;   /* the receiver's node index, network order: where
                             a node's processes share one port, the kernel
                             steers the datagram by it to its process's
                             socket (seed 002's "SRQ number"); a receiver
                             drops what names another index */
    uint32_t pad;         /* zero; with UDP_FLAG_HANDED, the IPv4 address
                             (network order) the datagram first came from */
} udp_hdr_t;

static_assert(sizeof(udp_hdr_t) == 72, "udp header is 72 bytes");
static_assert(65507 - sizeof(udp_hdr_t) <= UINT16_MAX, "a datagram's payload length fits len");
static_assert(offsetof(udp_hdr_t, port) == 6, "udp header layout");
static_assert(offsetof(udp_hdr_t, job_key) == 8, "udp header layout");
static_assert(offsetof(udp_hdr_t, seq) == 32, "udp header layout");
static_assert(offsetof(udp_hdr_t, offset) == 48, "udp header layout");
static_assert(offsetof(udp_hdr_t, dst_index) == 66, "udp header layout: the steering program loads it");

/* A slot probe (udp_node.c): a datagram a process sends to its node's
 * shared port to learn which slot of the port's group its socket holds.
 * The steering program sends it to the socket in slot `slot`; only the
 * prober knows its nonce. Its first byte is no wire version, so a
 * receiver that does not know it drops it as malformed. */
#define UDP_PROBE_MAGIC 0xa5
typedef struct udp_probe {
    uint8_t magic;        /* UDP_PROBE_MAGIC */
    uint8_t zero;
    uint16_t slot;        /* the slot to steer to, network order */
    uint32_t zero2;
    uint64_t nonce;       /* the prober's, little endian */
} udp_probe_t;

static_assert(sizeof(udp_probe_t) == 16, "udp slot probe is 16 bytes");
static_assert(offsetof(udp_probe_t, slot) == 2, "udp slot probe layout: the steering program loads it");

/* Selective ACK of the data channel: which segments after the cumulative
 * ACK have arrived, so the sender repairs every hole, not only the first. */
#define UDP_SACK_BITS 1024
/* A receiver missing data it waits for reports a stall after this long
 * without any, naming the last segment that came: on a path that keeps
 * order, what was sent less than this after that segment is lost. */
#define UDP_STALL_US 200
typedef struct udp_sack {
    uint32_t base;        /* bit i stands for segment base + 1 + i */
    uint32_t nbits;       /* bits that follow, at most UDP_SACK_BITS */
    uint8_t bits[UDP_SACK_BITS / 8];
} udp_sack_t;

static_assert(sizeof(udp_sack_t) == 8 + UDP_SACK_BITS / 8, "sack layout");

/* A receiver-driven read (seed 001's PUT emulation turned into a GET). */
typedef struct udp_get_req {
    uint64_t op_id;       /* the reader's operation, echoed in frag_id */
    uint64_t raddr;       /* the owner's address */
    uint64_t rkey;        /* its key */
    uint64_t len;         /* bytes */
} udp_get_req_t;

static_assert(sizeof(udp_get_req_t) == 32, "udp read request is 32 bytes");

/* The transport's address section. */
typedef struct udp_addr {
    uint32_t ip;          /* IPv4, network order */
    uint16_t port;        /* network order */
    uint16_t index;       /* the context's node index, network order: its
                             datagrams' dst_index */
    uint64_t job_key;     /* the job this context belongs to */
} udp_addr_t;

static_assert(sizeof(udp_addr_t) == 16, "udp address is 16 bytes");

#endif
