/*
 * The tag-matching offload interface (seed 000, "Tag Matching Verbs"): a
 * TM-SRQ as a device would offer it, with the seed's vocabulary, and its
 * implementation in software (offload.c). Software above it (the host)
 * keeps the complete matcher; the engine holds a bounded list of tagged
 * buffers and completes the expected messages that match them on its own.
 *
 * The parts:
 * - capabilities: max_num_tags (tagged buffers in the list), max_ops
 *   (operations posted and not yet processed), max_rndv_hdr_size (the
 *   largest rendezvous request the engine parses);
 * - an operation queue (off_post_ops): ADD a tagged buffer (returns a
 *   handle at once), DEL one by handle, SYNC; each carries the number of
 *   unexpected messages the host has handled. Operations are processed in
 *   the order posted, when the engine runs (off_engine_run);
 * - arrivals (off_arrive): messages from the wire with their TMH (and RVH
 *   for a rendezvous request), handed in per-source send order;
 * - completions (off_poll_cq), in the order the engine made them.
 *
 * The synchronisation rule. Every message the engine deems unexpected (no
 * matchable tag in its list) goes to the host and adds one to the engine's
 * unexpected count. From then on, a tag added while the host's reported
 * count is below the engine's is not matchable: only when an operation
 * reports the engine's count (the host has handled, against its whole
 * list, every message the engine passed on) do such tags become matchable
 * again. So every matchable tag is older than every tag that is not, and a
 * message can never take a newer tag while an older message that also
 * matches it is on its way to the host (the m1/m2/b1 race of the seed).
 *
 * A receive here names a source (or OFF_ANY_SOURCE) besides tag and
 * ignore mask; a device that matches tags only would carry the source in
 * tag bits, as MPI libraries do over hardware tag matching.
 *
 * Threads: every call may come from any thread; the engine serialises
 * them under its own lock (unless off_engine_set_serialised). Callbacks
 * (off_dev_ops_t) run without that lock, from off_arrive and
 * off_read_done.
 */
#ifndef TMX_OFFLOAD_H
#define TMX_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "tmx.h"

#define OFF_ANY_SOURCE UINT32_MAX

/* Defaults and limits of the software engine. */
#define OFF_DEF_MAX_NUM_TAGS 64
#define OFF_DEF_MAX_OPS 256
#define OFF_DEF_MAX_RNDV_HDR_SIZE 64
#define OFF_MAX_NUM_TAGS 65535 /* a handle holds a 16-bit index */
#define OFF_RNDV_HDR_FIXED 32  /* TMH and RVH: max_rndv_hdr_size is at least this */
#define OFF_MSG_MAX ((size_t)1 << 40) /* a message's data longer than this is refused */

typedef struct off_caps {
    uint32_t max_num_tags;
    uint32_t max_ops;
    uint32_t max_rndv_hdr_size;
} off_caps_t;

/* ------------------------------------------------------------ messages */

/* TMH opcodes (seed 000, "Sending TM messages"). */
enum off_tm_op {
    OFF_TM_NO_TAG = 0, /* never matched: straight to the host, not counted */
    OFF_TM_EAGER = 1,  /* TMH | payload */
    OFF_TM_RNDV = 2,   /* TMH | RVH | optional meta-data */
    OFF_TM_FIN = 3     /* a rendezvous is done: for the sender's host */
};

/* One arriving message: TMH, RVH, payload. For a rendezvous request,
 * data/len are its meta-data and va/rkey/rlen the sender's buffer. */
typedef struct off_msg {
    uint8_t op;          /* enum off_tm_op */
    uint32_t src;        /* the sending peer (never OFF_ANY_SOURCE) */
    uint32_t app_ctx;    /* TMH user data */
    uint64_t tag;
    const void *data;
    size_t len;
    uint64_t va;         /* RVH */
    uint64_t rkey;
    uint64_t rlen;
    uint64_t imm;        /* immediate data the sender attached (tmx's remote */
    uint8_t has_imm;     /* CQ data), handed back in completions */
    uint16_t flags;      /* the TMH's flags, for the device's read (tmx:
                            WIRE_FLAG_WRITER, the sender writes on request) */
} off_msg_t;

/* ---------------------------------------------------------- operations */

enum off_opcode {
    OFF_WR_TAG_ADD = 1,
    OFF_WR_TAG_DEL = 2,
    OFF_WR_TAG_SYNC = 3
};

#define OFF_OPS_SIGNALED 1u /* a completion also when the operation succeeds */

typedef struct off_op {
    uint64_t wr_id;              /* names the operation in its completion */
    uint8_t opcode;              /* enum off_opcode */
    uint8_t flags;               /* OFF_OPS_SIGNALED */
    uint32_t unexpected_cnt;     /* unexpected messages the host has handled */
    uint32_t handle;             /* DEL: in; ADD: out */
    struct {
        uint64_t recv_wr_id;     /* names the tagged buffer in completions */
        void *buf;
        size_t len;
        uint32_t src;            /* a peer or OFF_ANY_SOURCE */
        uint64_t tag;
        uint64_t ignore;         /* bits of tag that do not matter */
    } add;
} off_op_t;

/* --------------------------------------------------------- completions */

enum off_wc_opcode {
    OFF_WC_TM_ADD = 1,   /* an operation's completion */
    OFF_WC_TM_DEL,
    OFF_WC_TM_SYNC,
    OFF_WC_RECV,         /* an unexpected message, whole, for the host */
    OFF_WC_TM_NO_TAG,    /* a NO_TAG or FIN message, for the host */
    OFF_WC_TM_RECV       /* a tagged buffer matched, or its data landed */
};

/* Flags of completions. */
#define OFF_WC_TM_MATCH 1u       /* a match was made (TM_RECV) */
#define OFF_WC_TM_DATA_VALID 2u  /* all the data is in the buffer (TM_RECV) */
#define OFF_WC_TM_SYNC_REQ 4u    /* the engine is ahead: the host should SYNC */

enum off_wc_status {
    OFF_WC_SUCCESS = 0,
    OFF_WC_TM_ERR,             /* DEL of a tag already consumed (or unknown) */
    OFF_WC_TM_RNDV_INCOMPLETE, /* the buffer cannot take the rendezvous: the
                                  message (msg) goes on in the host */
    OFF_WC_TRUNCATED,          /* an eager message longer than its buffer:
                                  byte_len bytes delivered, msg.len sent */
    OFF_WC_REM_ERR,            /* the rendezvous read failed (dev status) */
    OFF_WC_LOC_ERR             /* RECV: no memory for the message's data,
                                  which is lost (counted all the same) */
};

typedef struct off_cqe {
    uint8_t opcode;      /* enum off_wc_opcode */
    uint8_t flags;       /* OFF_WC_TM_* */
    uint8_t status;      /* enum off_wc_status */
    uint64_t wr_id;      /* the operation's, or the tagged buffer's recv_wr_id */
    uint32_t handle;     /* TM_RECV: the tagged buffer's handle */
    uint32_t src;        /* TM_RECV and messages: the sender */
    uint32_t priv;       /* TM_RECV: the TMH's app_ctx */
    uint64_t tag;
    size_t byte_len;     /* TM_RECV: bytes placed in the buffer */
    /* RECV, TM_NO_TAG, RNDV_INCOMPLETE: the message, headers included;
     * its data is a copy the host owns (off_cqe_release). */
    off_msg_t msg;
    tmx_status_t dev_status; /* REM_ERR: what the device's read said */
} off_cqe_t;

/* ----------------------------------------------------------- the engine */

typedef struct off_engine off_engine_t;

/* What the engine needs from the transports below it. */
typedef struct off_dev_ops {
    /* Starts the rendezvous read of m's rlen bytes into buf, the tagged
     * buffer recv_wr_id; the device calls off_read_done(e, token, status)
     * when the data is in place (from inside this call or later, from any
     * thread). */
    void (*read)(void *arg, const off_msg_t *m, void *buf, uint64_t recv_wr_id, uint64_t token);
    /* Sends FIN for m to its sender; status is the read's. */
    void (*fin)(void *arg, const off_msg_t *m, tmx_status_t status);
} off_dev_ops_t;

/* Opens an engine with caps (NULL: defaults); caps values of 0 take the
 * default. TMX_ERR_INVALID, logged, for a capability beyond the limits. */
tmx_status_t off_engine_open(const off_caps_t *caps, const off_dev_ops_t *dev, void *dev_arg,
                             off_engine_t **out);

/* Frees the engine: tagged buffers still listed are forgotten, reads in
 * flight must have been completed or abandoned by the device first. */
void off_engine_close(off_engine_t *e);

/* Declares that one caller serialises every call into e, callbacks
 * included (tmx's core does, under its context lock): the engine then
 * takes no lock of its own. Before any other call. */
void off_engine_set_serialised(off_engine_t *e);

void off_engine_caps(const off_engine_t *e, off_caps_t *caps);

/* Queues n operations in order. An ADD gets its handle here. Stops at the
 * first that cannot be queued (*bad points at it) with TMX_ERR_AGAIN
 * (max_ops queued, or max_num_tags listed and queued) or TMX_ERR_INVALID
 * (bad opcode or arguments; logged); the ones before it stay queued. */
tmx_status_t off_post_ops(off_engine_t *e, off_op_t *ops, size_t n, off_op_t **bad);

/* Processes up to max queued operations (SIZE_MAX: all); returns how many. */
size_t off_engine_run(off_engine_t *e, size_t max);

/* Matches an arriving message: it is copied into its tagged buffer (eager)
 * or its read started (rendezvous), or passed to the host whole. A
 * message with data NULL and len > 0, or len above OFF_MSG_MAX, is
 * refused (logged), as is one that
 * finds no memory for its completion: it is then lost, and the engine's
 * state is unchanged. The completions waiting to be taken are bounded by
 * what the host leaves there: tmx's host takes them after every arrival. */
void off_arrive(off_engine_t *e, const off_msg_t *m);

/* The same for a host that serialises every call (off_engine_set_serialised)
 * and handles a message the moment the engine hands it back: 0 when no
 * matchable tag takes m, which then counts as unexpected (the host's count
 * must take it into account as for an OFF_WC_RECV completion) but makes no
 * completion and no copy: the host has it in hand. 1 when the engine took
 * it. 3 when it refused it (logged, as off_arrive; the engine's state is
 * unchanged): the host tells a rendezvous sender, which would otherwise
 * wait for ever for its read. 2 when an eager message
 * matched while no completion waited in the ring and direct is not NULL:
 * its one completion is written to *direct instead of the ring (its tagged
 * buffer is then already free), for the host to take as if it had polled
 * it, before any later one: the order of completions is kept, without the
 * trip through the ring. */
int off_arrive_inline(off_engine_t *e, const off_msg_t *m, off_cqe_t *direct);

/* What off_arrive_inline does with a message when no matchable tag is
 * listed, whatever the message: for a serialised host, before it builds
 * the message. 1 when no tag is matchable: the message counts as
 * unexpected, exactly as off_arrive_inline's 0, and is the host's. 0 when
 * some tag is: nothing changes, and the message goes to
 * off_arrive_inline. The usual case while every receive is short (the
 * host keeps those): an arrival then costs the engine a look and a count. */
int off_arrive_unlisted(off_engine_t *e);

/* The device's answer to dev->read. Its DATA_VALID completion never lacks
 * memory: the room for it was reserved when the request matched (a
 * request that found no room for both its completions was refused). */
void off_read_done(off_engine_t *e, uint64_t token, tmx_status_t status);

/* The device gives up a read it started and the host ends that receive
 * itself (its sender failed): the tagged buffer is free again at once,
 * with no completion and no FIN. 0, or -1 (logged) for a token that
 * names no read in flight. */
int off_read_abandon(off_engine_t *e, uint64_t token);

/* Whether no completion waits to be taken. */
int off_cq_empty(off_engine_t *e);

/* Takes up to n completions, oldest first. A tagged buffer's slot is
 * free again once its last completion (DATA_VALID, or RNDV_INCOMPLETE)
 * has been taken: until then a DEL of its handle fails with TM_ERR, so a
 * stale handle can never name a buffer added later. */
size_t off_poll_cq(off_engine_t *e, off_cqe_t *out, size_t n);

/* Frees what a completion owns (a message's data copy). */
void off_cqe_release(off_cqe_t *c);

/* Counters, for tools and tests. */
typedef struct off_stats {
    uint64_t matched;        /* messages the engine matched itself */
    uint64_t unexpected;     /* messages passed to the host (its count) */
    uint64_t added_unsynced; /* ADDs that found the engine ahead of the host */
    uint32_t listed;         /* tagged buffers in the list now */
    uint32_t reading;        /* tagged buffers whose read is in flight now */
} off_stats_t;

void off_engine_stats(off_engine_t *e, off_stats_t *s);

/* Tests: the next n reservations of room for a completion fail, as they
 * do without memory. */
void off_engine_fail_cq(off_engine_t *e, unsigned n);

/* Whether two receives (source or OFF_ANY_SOURCE, tag, ignore mask) can
 * both match some message. The host gives the engine a receive only when
 * it overlaps none of the receives the host holds alone: the engine then
 * never takes a message that an older receive of the host's matches. */
static inline int off_recvs_overlap(uint32_t s1, uint64_t t1, uint64_t i1, uint32_t s2, uint64_t t2,
                                    uint64_t i2)
{
    return (s1 == OFF_ANY_SOURCE || s2 == OFF_ANY_SOURCE || s1 == s2) && ((t1 ^ t2) & ~i1 & ~i2) == 0;
}

#endif
