/*
 * The emulated remote read (seed 001's RDMA emulation, turned from a PUT
 * into a GET), written once for every transport without one-sided access
 * of its own: udp, and shm where the kernel refuses process_vm_readv.
 *
 * The reader sends a request naming the owner's memory, its key and
 * length. The owner asks the layer above (tl_iface_t.mem_check) about
 * every chunk before it sends it, so that memory whose send ended
 * meanwhile is never read, and streams the chunks back; a refusal travels
 * as a status with no bytes. The reader copies each chunk into place,
 * checking it against the read it belongs to, and completes the read when
 * every byte is in. The transport says how a request and a chunk travel
 * (tl_emu_ops_t) and decodes what arrives into the calls below.
 *
 * Threads: none of its own; every call is made under the transport's
 * serialisation, like the tl_ops_t operation that makes it.
 */
#ifndef TMX_TL_EMU_H
#define TMX_TL_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "tl/tl.h"
#include "util/list.h"

/* A read request, host order (each transport has its wire form). */
typedef struct tl_emu_req {
    uint32_t id;                /* the reader's, unique among its reads of one owner */
    uint64_t raddr;             /* the owner's memory */
    uint64_t rkey;              /* its key */
    uint64_t len;               /* bytes to read */
} tl_emu_req_t;

typedef struct tl_emu_ops {
    /* Sends req to the owner ep. TMX_OK; TMX_ERR_AGAIN when there is no
     * room now (it is sent again from tl_emu_progress); anything else
     * fails the read. Blocks: no. */
    tmx_status_t (*req_send)(tl_ep_t *ep, const tl_emu_req_t *req);
    /* Sends n bytes at src, the part at offset of read id, to the reader
     * ep; or, status not TMX_OK (n == 0), the owner's refusal. src stays
     * readable while the layer above lends it under rkey (a transport
     * that keeps src to send again checks rkey with mem_check before it
     * does). TMX_OK; TMX_ERR_AGAIN: no room, the same chunk is offered
     * again later; anything else ends the serving. Blocks: no. */
    tmx_status_t (*data_send)(tl_ep_t *ep, uint32_t id, uint64_t offset, tmx_status_t status,
                              const void *src, size_t n, uint64_t rkey);
    /* Optional: a read from ep, asked (or last fed data) at since_us,
     * still waits at now_us (udp reports a stall to the owner, at most
     * once per its interval: *reported_us, the read's own, says when it
     * last did). */
    void (*waiting)(tl_ep_t *ep, uint64_t since_us, uint64_t now_us, uint64_t *reported_us);
    /* Optional (writes, tl_emu_put): sends n bytes at src, the part of a
     * write that goes to raddr, lent under rkey by the target ep; lkey is
     * src's key here (checked again before any resending). TMX_OK;
     * TMX_ERR_AGAIN: no room, the same part is offered again later;
     * anything else ends the write. Blocks: no. */
    tmx_status_t (*put_send)(tl_ep_t *ep, uint64_t raddr, uint64_t rkey, const void *src, size_t n,
                             uint64_t lkey);
} tl_emu_ops_t;

/* Requests that found no memory to serve them and no room to refuse them
 * at once, kept (without memory) until there is room: past that, dropped. */
#define TL_EMU_NOMEM_MAX 64

typedef struct tl_emu {
    tl_iface_t *iface;          /* mem_check and recv_arg */
    const tl_emu_ops_t *ops;
    size_t chunk;               /* bytes per data_send */
    util_dlist_t gets;          /* reads we wait for */
    util_dlist_t serves;        /* reads we answer */
    util_dlist_t pushes;        /* writes we make */
    uint32_t next_id;
    uint32_t n_refused[2];      /* serves refused on arrival, waiting for room:
                                   [0] strangers' (no peer number, or an
                                   implicit one), [1] added peers' */
    /* Requests we had no memory to serve, refused without any, waiting
     * for room to send the refusal (tl_emu_req_arrive). */
    struct tl_emu_nomem {
        tl_ep_t *ep;
        uint32_t id;
        uint64_t rkey;
    } nomem[TL_EMU_NOMEM_MAX];
    uint32_t n_nomem;
} tl_emu_t;

/* Refusals of reads waiting for room to go, at most, to processes that are
 * no added peer of the layer above (strangers, implicit peers included:
 * anyone can be one, under as many identities as it likes) and to its
 * added peers: past either bound, further
 * refused requests from that kind are dropped (a process can ask for
 * nothing lent at will), and strangers asking cannot crowd out a peer's
 * refusal, which its reader waits for. */
#define TL_EMU_REFUSED_MAX 256
#define TL_EMU_REFUSED_PEERS_MAX 4096

/* Ready for reads over iface, in chunks of at most chunk bytes. */
void tl_emu_init(tl_emu_t *e, tl_iface_t *iface, const tl_emu_ops_t *ops, size_t chunk);

/* Starts reading len bytes at raddr (key rkey) of ep's process into dst.
 * TMX_OK at once when len is 0; TMX_INPROGRESS, then op->done() from
 * tl_emu_data_arrive or tl_emu_ep_fail; TMX_ERR_NOMEM. dst belongs to the
 * read until done(). */
tmx_status_t tl_emu_get(tl_emu_t *e, tl_ep_t *ep, void *dst, size_t len, uint64_t raddr,
                        uint64_t rkey, tl_get_op_t *op);

/* A request from the reader ep arrived: it is served from
 * tl_emu_progress. A key lends its memory to one read at a time (the
 * layer above gives each key to one reader, which reads once): a request
 * under a key whose read is being served is refused (TMX_ERR_BUSY), as
 * one for memory not lent is. One we have no memory to serve is refused
 * with TMX_ERR_NOMEM (logged here), at once or, without room now, from
 * tl_emu_progress, so that its read fails instead of waiting: TMX_OK.
 * TMX_ERR_NOMEM: not even that (TL_EMU_NOMEM_MAX such refusals wait for
 * room already): dropped, its read waits until ep fails (the caller
 * logs it). TMX_ERR_AGAIN: refused and dropped, since
 * TL_EMU_REFUSED_MAX refusals to strangers (TL_EMU_REFUSED_PEERS_MAX to
 * peers) wait for room already. */
tmx_status_t tl_emu_req_arrive(tl_emu_t *e, tl_ep_t *ep, const tl_emu_req_t *req);

/* A chunk of read id from the owner ep arrived (n bytes at p for offset,
 * or the owner's refusal) at now_us (the caller's CLOCK_MONOTONIC clock,
 * as for tl_emu_progress; 0 if it keeps none). TMX_OK when taken;
 * TMX_ERR_INVALID when no read of ep has that id or the bytes fall
 * outside it: nothing is written, the caller counts and logs the drop.
 * May call done(). */
tmx_status_t tl_emu_data_arrive(tl_emu_t *e, tl_ep_t *ep, uint32_t id, uint64_t offset,
                                tmx_status_t status, const void *p, size_t n, uint64_t now_us);

/* Starts writing len bytes at src (lent here under lkey) to raddr, lent
 * under rkey by ep's process, in chunks through ops->put_send (which must
 * be set). TMX_INPROGRESS: iface->put_done(lkey) follows from
 * tl_emu_progress once every chunk is on its way, or with the error that
 * ended the write (the memory no longer lent under lkey, the transport's
 * refusal); never if ep fails or the interface closes first.
 * TMX_ERR_NOMEM: nothing was sent. */
tmx_status_t tl_emu_put(tl_emu_t *e, tl_ep_t *ep, const void *src, size_t len, uint64_t raddr,
                        uint64_t rkey, uint64_t lkey);

/* Sends what waits and the window takes: requests not yet sent, chunks of
 * reads served. now_us: the caller's clock, for ops->waiting. Returns the
 * number of events. */
int tl_emu_progress(tl_emu_t *e, uint64_t now_us);

/* Reads or serves are under way (asked by every progress: inline). */
static inline int tl_emu_busy(const tl_emu_t *e)
{
    return !util_dlist_empty(&e->gets) || !util_dlist_empty(&e->serves) ||
           !util_dlist_empty(&e->pushes) || e->n_nomem != 0;
}

/* ep failed: its reads complete with TMX_ERR_PEER_FAILED, what we served
 * or wrote it is dropped. Calls done() (not put_done). */
void tl_emu_ep_fail(tl_emu_t *e, tl_ep_t *ep);

/* Test hook: the next n allocations of any tl_emu fail, as when memory
 * runs out (0: none fail). */
void tl_emu_test_fail_alloc(unsigned n);

/* The interface closes: reads are abandoned without done() (their data,
 * arriving later, is dropped), serves and writes end (no put_done). Safe to call more than once. */
void tl_emu_abandon(tl_emu_t *e);

#endif
