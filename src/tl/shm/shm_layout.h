/*
 * The shared-memory layout of the shm transport: one segment per receiving
 * process, holding a bounded multi-producer single-consumer queue of fixed
 * cells with inline payload (a sequence-numbered ring after D. Vyukov).
 *
 * Visibility (seed 004): a producer writes a cell's header and payload,
 * then publishes it with a release store of the cell's seq; the consumer
 * reads seq with an acquire load and only then touches the payload. No one
 * ever polls on payload bytes.
 *
 * Flow control: the ring is bounded; a producer that finds the next cell
 * still in use gets TMX_ERR_AGAIN, so a fast sender cannot grow memory.
 *
 * A producer that dies between claiming a cell and publishing it would
 * block the ring for ever: before it claims, a producer writes the
 * position it is about to claim into its slot's claims[] line, and while
 * it holds slot i it holds an open file description lock on byte i of the
 * segment's memfd, which the kernel drops when the process is gone. A
 * consumer whose next cell stays claimed but unpublished looks for the
 * slots claiming that position; when none of them holds its lock, it
 * skips the cell with a compare-and-swap (shm.c: ring_unblock), and a
 * publish that finds its cell skipped fails instead of overwriting it. A
 * live producer is never skipped, however slow or stopped.
 *
 * Offsets, not pointers: every process maps the segment at its own address.
 */
#ifndef TMX_TL_SHM_LAYOUT_H
#define TMX_TL_SHM_LAYOUT_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC 0x4d48534du   /* "MSHM" */
#define SHM_VERSION 13
#define SHM_CACHE_LINE 64
#define SHM_CELL_SIZE 8320      /* bytes per cell, header included: 8 KiB of payload and its headers */
#define SHM_N_CELLS 128         /* a power of two */
#define SHM_N_JOBS 64           /* shared copies under way per reader */
#define SHM_N_SENDERS 1024      /* processes that may send to one segment */
#define SHM_N_FBOX 32           /* fast boxes per segment (at most 64: one word of bits) */
#define SHM_N_OFFERS 64         /* receive offers open at once per segment (tl.h offer_open) */
#define SHM_FBOX_SIZE 8192      /* bytes of entries per fast box, a power of two */
#define SHM_FBOX_MAX 512        /* the longest packet a fast box carries */

/* A shared copy (shm_get.c): a reader that fetches a large message asks
 * the owner of the memory to help. The message is cut into chunks of
 * SHM_JOB_CHUNK bytes; the owner writes chunks from the front into the
 * reader's buffer (process_vm_writev) while the reader reads chunks from
 * the back, each taking one with a compare-and-swap on the claim word that
 * keeps front <= back. The reader never waits for an owner that does not
 * come (it takes every chunk left), only for a chunk being written; and
 * once front meets back the owner can take nothing more, so nothing is
 * written into a buffer the reader has given back. */
#define SHM_JOB_CHUNK (64 * 1024)
#define SHM_JOB_IDX_BITS 21                      /* chunk indices */
#define SHM_JOB_GEN_BITS (64 - 2 * SHM_JOB_IDX_BITS)
#define SHM_JOB_FAILED (1ull << 63)              /* in done: a write failed */

typedef struct shm_job {
    _Atomic uint64_t claim;     /* generation | front | back */
    _Atomic uint64_t done;      /* chunks the owner has written (| FAILED) */
    uint8_t pad[SHM_CACHE_LINE - 16];
} shm_job_t;

#define SHM_NO_CLAIM UINT64_MAX  /* in shm_claim_t.pos: none */

/* A sender slot: who sends, read by the consumer for every cell, so it
 * holds nothing that changes while the slot is taken. */
typedef struct shm_sender {
    _Atomic uint64_t uuid;      /* the sending context; 0: the slot is free */
    _Atomic uint32_t pid;       /* its process in its own pid namespace, for people; liveness is the slot's lock */
    uint32_t reserved;          /* zero */
} shm_sender_t;

/* What a sender slot claims, a cache line of its own: its producer writes
 * it before every cell it claims, and neither the consumer (which reads it
 * only when a cell stays unpublished) nor another producer should pay for
 * that. */
typedef struct shm_claim {
    _Atomic uint64_t pos;       /* the first position it claims or claimed last; SHM_NO_CLAIM */
    _Atomic uint32_t n;         /* how many from there (a span: several) */
    uint8_t pad[SHM_CACHE_LINE - 12];
} shm_claim_t;

/* Fast boxes: short packets from one sender to this segment's owner, in a
 * byte ring of SHM_FBOX_SIZE of their own (after the cells), the way
 * vader's fast boxes and UCX's mm FIFO pack them: no compare-and-swap on
 * a word that every sender shares, several packets to a cache line, and
 * nothing the consumer writes per packet. A sender takes a free box (a
 * compare-and-swap of owner from 0 to its slot + 1, then its bit in
 * fbox_used) and is its only producer; the owner of the segment is its
 * only consumer.
 *
 * Each entry is an 8-byte header word and the packet, padded to 8 bytes;
 * an entry never wraps (SHM_FBOX_SKIP sends the consumer to the start).
 * A header names the entry's position (its byte count since the box was
 * made, over 8, in 32 bits) beside its length, so that a consumer can
 * tell a header of this lap from one of an earlier lap.
 * Visibility (seed 004): the producer writes the packet, then zero into
 * the header word that follows the entry, then the entry's header with a
 * release store (seq_cst: it pairs with a sleeping consumer, as a cell's
 * publish does); the consumer reads the header at its position with an
 * acquire load, and a zero there means nothing yet. So an honest
 * producer never leaves a stale header where the consumer looks, and a
 * header that names another position, or is malformed, is a broken box.
 * The consumer publishes the bytes it has taken in read, once per batch;
 * the producer reads it only when the box looks full, and then falls
 * back to the ring.
 *
 * Order: a sender's packets must arrive in the order it sent them, and a
 * box and the ring are two paths. The producer puts a packet into its box
 * only when the last cell it published to the ring has been consumed (its
 * seq moved on), and the consumer, before it takes a cell from a sender
 * with a box, takes everything in that box: what is in a box is always
 * older than any of its sender's cells still in the ring. A producer that
 * dies leaves at most an unpublished entry in its own box, which blocks
 * no one. The box is freed with the sender's slot (its goodbye cell), and
 * the consumer zeroes the header at its position so that the next owner
 * starts from a clean word. */
#define SHM_FBOX_VALID (1ull << 63)   /* an entry: the low 16 bits are its length */
#define SHM_FBOX_SKIP (1ull << 62)    /* the rest of the box is empty: go on at its start */
#define SHM_FBOX_LEN_MASK 0xffffull
#define SHM_FBOX_POS(pos) (((uint64_t)(pos) >> 3 & 0xffffffffull) << 16) /* in a header */
#define SHM_FBOX_NONE 0xff            /* no box */
#define SHM_FBOX_ALL (SHM_N_FBOX == 64 ? ~0ull : (1ull << SHM_N_FBOX) - 1) /* fbox_used's bits */

typedef struct shm_fbox_ctl {
    _Atomic uint32_t owner;     /* the producer's sender slot + 1; 0: free */
    uint32_t reserved;          /* zero */
    uint8_t pad0[SHM_CACHE_LINE - 8];
    _Atomic uint64_t read;      /* bytes the consumer has taken, ever (its own line) */
    uint8_t pad1[SHM_CACHE_LINE - 8];
} shm_fbox_ctl_t;

static inline uint32_t shm_fbox_entry(uint32_t len)
{
    return (uint32_t)(8 + len + 7) & ~7u;
}

/* Segment header; the hot words sit on their own cache lines so that
 * producers and the consumer do not false-share. */
typedef struct shm_seg_hdr {
    uint32_t magic;             /* SHM_MAGIC */
    uint16_t version;           /* SHM_VERSION */
    uint16_t reserved;          /* zero */
    uint32_t hdr_size;          /* sizeof(shm_seg_hdr_t), checked on map */
    uint32_t n_cells;           /* ring size, a power of two */
    uint64_t owner_uuid;        /* the receiving context */
    uint32_t cell_size;         /* bytes per cell */
    _Atomic uint32_t closed;    /* set when the owner closed it cleanly */
    _Atomic uint64_t fbox_used; /* bit i: fbox[i] has a producer (read at each poll) */
    _Atomic uint32_t pressure;  /* the owner is past its soft bound of unexpected
                                   memory: senders send rendezvous (tl.h) */
    uint8_t pad0[SHM_CACHE_LINE - 44];
    _Atomic uint64_t tail;      /* next position producers claim */
    uint8_t pad1[SHM_CACHE_LINE - 8];
    _Atomic uint32_t sleeping;  /* consumer threads asleep, or about to be */
    _Atomic uint32_t wake_seq;  /* futex word, bumped by producers to wake it */
    _Atomic uint32_t fd_sleeping; /* of the sleepers, those asleep in poll() on
                                   the owner's wake socket (with another
                                   transport's descriptors), not on wake_seq */
    uint32_t reserved2;         /* zero */
    _Atomic uint64_t wake_name; /* names that socket (shm_wake_addr), 0: none */
    uint8_t pad2[SHM_CACHE_LINE - 24];
    shm_job_t jobs[SHM_N_JOBS]; /* shared copies into this process */
    /* Who sends here: a sender takes a slot (compare-and-swap of uuid
     * from 0 to its context's uuid) before its first cell and names the
     * slot in every cell, so that a cell's header need not carry the
     * uuid. It gives the slot back with a packet cell of length 0 after
     * its last one, and the owner frees the slot when it consumes that
     * cell: no cell naming the slot is left then. */
    shm_sender_t senders[SHM_N_SENDERS];
    shm_claim_t claims[SHM_N_SENDERS]; /* claims[i] is senders[i]'s */
    shm_fbox_ctl_t fbox[SHM_N_FBOX];   /* their entries follow the cells */
    /* Claim words of receive offers (tl.h's offer_open): generation << 2 |
     * state; the owner opens a free one and frees it, the offer's one copy
     * is taken by a compare-and-swap from open, by the sender before it
     * writes or by the owner before it reads. */
    _Atomic uint64_t offers[SHM_N_OFFERS];
} shm_seg_hdr_t;

enum shm_offer_state {
    SHM_OFFER_FREE = 0,
    SHM_OFFER_OPEN = 1,
    SHM_OFFER_TAKEN = 2
};

enum shm_cell_kind {
    SHM_KIND_PACKET = 0,        /* a packet for the layer above */
    SHM_KIND_GET_REQ = 1,       /* copy-mode read: shm_get_req_t */
    SHM_KIND_GET_DATA = 2,      /* copy-mode read: shm_get_data_t + bytes */
    SHM_KIND_HELP = 3,          /* shared copy: shm_help_req_t */
    SHM_KIND_SPAN = 4,          /* the first cell of a span: shm_span_t + bytes */
    SHM_KIND_CONT = 5           /* a later cell of a span: bytes */
};

/* A span: a packet longer than a cell, in 2 to SHM_SPAN_CELLS consecutive
 * ring positions claimed at once (one compare-and-swap of tail by their
 * number). Each cell keeps its header and its own seq; the first holds
 * the packet's length and the first bytes, each later cell (kind CONT,
 * the same sender slot) the next ones, in parts of equal size
 * (shm_span_part). The producer publishes each cell as soon as it has
 * filled it, in order, and the consumer hands each up and frees it as
 * soon as it is published: the two copies overlap, so a span costs about
 * one copy of its bytes and one part more, not two. A consumer whose next
 * cell stays unpublished waits for it as for any cell (a dead claimant's
 * is skipped, and ends the packet unfinished). A CONT cell met on its own
 * (its first was skipped, or a peer wrote nonsense) is dropped. */
#define SHM_SPAN_CELLS 9

typedef struct shm_span {
    uint64_t len;               /* the whole packet's bytes, little endian */
} shm_span_t;

/* Copy-mode remote read, used where process_vm_readv is refused: the
 * reader asks, the owner of the memory streams it back in cells. */
typedef struct shm_get_req {
    uint64_t op_id;             /* the reader's operation */
    uint64_t raddr;             /* the owner's address */
    uint64_t rkey;              /* the key it was registered under */
    uint64_t len;               /* bytes to read */
} shm_get_req_t;

typedef struct shm_get_data {
    uint64_t op_id;             /* as in the request */
    uint64_t offset;            /* where these bytes go */
    int32_t status;             /* TMX_OK, or why the owner refused */
    uint32_t len;               /* bytes that follow */
} shm_get_data_t;

/* Shared copy: help copy len bytes of yours at raddr (registered under
 * rkey) to my dst, as job's claim word in generation gen allows. */
typedef struct shm_help_req {
    uint32_t job;
    uint32_t reserved;          /* zero */
    uint64_t gen;
    uint64_t raddr;
    uint64_t rkey;
    uint64_t len;
    uint64_t dst;
} shm_help_req_t;

static_assert(sizeof(shm_get_req_t) == 32, "get request layout");
static_assert(sizeof(shm_help_req_t) == 48, "help request layout");
static_assert(sizeof(shm_get_data_t) == 24, "get data layout");

/* One cell. seq == position: free for the producer of that position;
 * seq == position + 1: published, for the consumer. Positions are 64-bit
 * (tail) and seq holds their low 32 bits: no producer can be 2^31
 * positions behind a ring of SHM_N_CELLS. The header is 8 bytes so that
 * it, tmx's 16-byte tag header, 8 bytes of remote data and 32 bytes of
 * payload share one cache line: the one line the consumer must fetch for
 * a small message. */
typedef struct shm_cell {
    _Atomic uint32_t seq;       /* ring sequence, see above */
    uint16_t len;               /* packet bytes */
    uint16_t slot_kind;         /* the sender's slot in senders[] | enum shm_cell_kind << SHM_KIND_SHIFT */
    unsigned char payload[];    /* the packet, inline */
} shm_cell_t;

#define SHM_KIND_SHIFT 13
#define SHM_SLOT_MASK ((1u << SHM_KIND_SHIFT) - 1)
#define SHM_LEN_MASK 0xffffu

static inline uint32_t shm_cell_len(const shm_cell_t *cell)
{
    return cell->len;
}

static inline uint32_t shm_cell_kind(const shm_cell_t *cell)
{
    return (uint32_t)cell->slot_kind >> SHM_KIND_SHIFT;
}

/* Names the slot a cell came from, its kind kept (tests and the fuzz
 * target write slots nobody holds). */
static inline void shm_cell_set_slot(shm_cell_t *cell, uint32_t slot)
{
    uint16_t sk = __atomic_load_n(&cell->slot_kind, __ATOMIC_RELAXED);

    __atomic_store_n(&cell->slot_kind, (uint16_t)((sk & ~SHM_SLOT_MASK) | (slot & SHM_SLOT_MASK)),
                     __ATOMIC_RELAXED);
}

/* A cell's header words as the consumer takes them: each read once, for
 * a peer may rewrite them at any time, so that every check and every use
 * go by the same values. */
typedef struct shm_cell_head {
    uint32_t len, kind;
    uint32_t slot;              /* < SHM_N_SENDERS, or a cell that does not parse */
} shm_cell_head_t;

static inline shm_cell_head_t shm_cell_head(const shm_cell_t *cell)
{
    uint16_t sk = __atomic_load_n(&cell->slot_kind, __ATOMIC_RELAXED);
    shm_cell_head_t h = {__atomic_load_n(&cell->len, __ATOMIC_RELAXED), (uint32_t)sk >> SHM_KIND_SHIFT,
                         sk & SHM_SLOT_MASK};

    return h;
}

/* The uuid of the context that holds sender slot slot, or 0 if none
 * (or the slot is out of range: a cell that does not parse). */
static inline uint64_t shm_slot_uuid(shm_seg_hdr_t *seg, uint32_t slot)
{
    if (slot >= SHM_N_SENDERS)
        return 0;
    return atomic_load_explicit(&seg->senders[slot].uuid, memory_order_relaxed);
}

/* The uuid of the context that published a cell, or 0 if its slot names
 * no sender (a cell that does not parse). */
static inline uint64_t shm_cell_src(shm_seg_hdr_t *seg, const shm_cell_t *cell)
{
    return shm_slot_uuid(seg, __atomic_load_n(&cell->slot_kind, __ATOMIC_RELAXED) & SHM_SLOT_MASK);
}

#define SHM_CELL_PAYLOAD (SHM_CELL_SIZE - sizeof(shm_cell_t))
/* A span has as many cells as parts of this size take (shm_span_cells):
 * fewer bytes than a cell holds, so that a packet of two cells' worth
 * (16 KiB) goes in three parts, not two, and the sender's copy of a part
 * and the receiver's of the one before overlap more. Parts are equal and
 * in whole cache lines, so one may be up to 63 bytes longer (8192). */
#define SHM_SPAN_STEP (SHM_CELL_PAYLOAD - 128)
/* The longest packet: a span of SHM_SPAN_CELLS cells. */
#define SHM_MAX_PACKET (SHM_SPAN_CELLS * SHM_SPAN_STEP - sizeof(shm_span_t))

/* The longest payload the transport offers for eager messages
 * (tl_iface_t.eager_limit): in one cell up to about 8 KiB, in a span up
 * to 64 KiB. Eager through a span costs a second copy that a rendezvous
 * read does not (overlapped with the first: see the span above), but
 * saves the RTS, the kernel's process_vm_readv and the FIN: below 64 KiB
 * that wins (bench/results/openmpi.md). */
#define SHM_EAGER_LIMIT (64 * 1024)
/* The longest that fits one cell with the protocol's headers. */
#define SHM_CELL_EAGER (SHM_CELL_PAYLOAD - 64)

/* Cells of the span that carries len bytes (len > SHM_CELL_PAYLOAD: at
 * least two). */
static inline uint32_t shm_span_cells(uint64_t len)
{
    return (uint32_t)((len + sizeof(shm_span_t) + SHM_SPAN_STEP - 1) / SHM_SPAN_STEP);
}
/* The bytes cell j of the span of n cells that carries len bytes holds,
 * span header included: equal parts, in whole cache lines, the last one
 * what remains (never empty: each part is less than len / (n - 1)). */
static inline uint32_t shm_span_part(uint64_t len, uint32_t n, uint32_t j)
{
    uint64_t all = len + sizeof(shm_span_t);
    uint64_t part = (all + n - 1) / n;

    part = (part + SHM_CACHE_LINE - 1) & ~(uint64_t)(SHM_CACHE_LINE - 1);
    if (part > SHM_CELL_PAYLOAD)
        part = SHM_CELL_PAYLOAD;
    return (uint32_t)(j + 1 < n ? part : all - (uint64_t)(n - 1) * part);
}
#define SHM_SEG_SIZE (sizeof(shm_seg_hdr_t) + (size_t)SHM_N_CELLS * SHM_CELL_SIZE + \
                      (size_t)SHM_N_FBOX * SHM_FBOX_SIZE)

static_assert(sizeof(shm_sender_t) == 16, "a sender slot is 16 bytes");
static_assert(sizeof(shm_claim_t) == SHM_CACHE_LINE, "a sender's claim is one line");
static_assert(sizeof(shm_seg_hdr_t) == (3 + SHM_N_JOBS + SHM_N_SENDERS + 2 * SHM_N_FBOX) * SHM_CACHE_LINE +
                                          SHM_N_SENDERS * 16 + SHM_N_OFFERS * 8,
              "segment header: three lines, one per job, the senders, one line per claim, two per box, "
              "the offers' words");
static_assert(SHM_N_OFFERS * 8 % SHM_CACHE_LINE == 0, "the offers' words fill whole lines");
static_assert(sizeof(shm_fbox_ctl_t) == 2 * SHM_CACHE_LINE, "a box's words are two lines");
static_assert(SHM_N_FBOX <= 64 && SHM_N_FBOX < SHM_FBOX_NONE, "a box's bit fits fbox_used");
static_assert((SHM_FBOX_SIZE & (SHM_FBOX_SIZE - 1)) == 0, "a box's size is a power of two");
static_assert(((8 + SHM_FBOX_MAX + 7) & ~7) + 8 <= SHM_FBOX_SIZE / 4, "a box holds several of its longest");
static_assert(SHM_FBOX_MAX <= SHM_FBOX_LEN_MASK, "an entry's length fits its header");
static_assert(offsetof(shm_seg_hdr_t, claims) % SHM_CACHE_LINE == 0, "claims on lines of their own");
static_assert(offsetof(shm_seg_hdr_t, tail) == SHM_CACHE_LINE, "tail on its own line");
static_assert(offsetof(shm_seg_hdr_t, sleeping) == 2 * SHM_CACHE_LINE, "wake words on their own line");
static_assert(sizeof(shm_cell_t) == 8, "cell header is 8 bytes");
static_assert(SHM_CELL_SIZE - sizeof(shm_cell_t) <= SHM_LEN_MASK, "a cell's length fits its field");
static_assert(SHM_KIND_CONT <= UINT16_MAX >> SHM_KIND_SHIFT, "a cell's kind fits its field");
static_assert(SHM_SPAN_CELLS < SHM_N_CELLS, "a span fits the ring");
static_assert(SHM_N_SENDERS <= SHM_SLOT_MASK, "a sender slot fits its field");
static_assert(SHM_CELL_SIZE - sizeof(shm_cell_t) >= 8192 + 64, "8 KiB of payload and its headers fit a cell");
static_assert(sizeof(shm_seg_hdr_t) % SHM_CACHE_LINE == 0, "cells are line-aligned");
static_assert(SHM_CELL_SIZE % SHM_CACHE_LINE == 0, "cells are whole cache lines");
static_assert((SHM_N_CELLS & (SHM_N_CELLS - 1)) == 0, "ring size is a power of two");
static_assert(sizeof(_Atomic uint64_t) == 8 && sizeof(_Atomic uint32_t) == 4, "lock-free words");

static inline uint32_t shm_seq(uint64_t pos)
{
    return (uint32_t)pos;
}

static inline shm_cell_t *shm_cell(shm_seg_hdr_t *seg, uint64_t pos)
{
    return (shm_cell_t *)((char *)seg + sizeof(*seg) + (pos & (SHM_N_CELLS - 1)) * SHM_CELL_SIZE);
}

/* The entries of fast box i. */
static inline unsigned char *shm_fbox_data(shm_seg_hdr_t *seg, uint32_t i)
{
    return (unsigned char *)seg + sizeof(*seg) + (size_t)SHM_N_CELLS * SHM_CELL_SIZE + (size_t)i * SHM_FBOX_SIZE;
}

/* The header word at byte offset off (a multiple of 8) of box data. */
static inline _Atomic uint64_t *shm_fbox_word(unsigned char *data, uint64_t off)
{
    return (_Atomic uint64_t *)(void *)(data + (off & (SHM_FBOX_SIZE - 1)));
}

/* The transport's address section, inside the address blob. */
typedef struct shm_addr {
    uint64_t host_id;           /* boot id, hostname and network namespace */
    uint32_t pid;               /* the owner, for process_vm_readv and /proc */
    int32_t fd;                 /* the owner's memfd of the segment */
    uint64_t seg_size;          /* SHM_SEG_SIZE of the owner's build */
} shm_addr_t;

static_assert(sizeof(shm_addr_t) == 24, "shm address is 24 bytes");

#endif
