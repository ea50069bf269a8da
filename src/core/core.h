/*
 * Internals of the core: the context, its peers, requests, unexpected
 * messages and completion queue. proto, below, never sees this file.
 */
#ifndef TMX_CORE_H
#define TMX_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "boot/job.h"
#include "core/config.h"
#include "match/match.h"
#include "proto/proto.h"
#include "tl/tl.h"
#include "tmx.h"
#include "util/list.h"
#include "util/pool.h"

#define CORE_MAX_TLS 4
#define CORE_SPIN_POLLS 4000        /* a core of our own: spin this long */
#define CORE_SPIN_POLLS_SHARED 16   /* more ranks than cores: yield early */
/* Processes that wrote to us without being added (implicit peers), at
 * most: each is kept for good (its number may be in the application's
 * hands), and any process of the job can make up new identities. */
#define CORE_IMPLICIT_MAX 65536
/* Progress passes a receive from a failed peer makes to take in what that
 * peer sent before it failed: a pass reads a batch of every transport,
 * so this covers a full shm ring and a full UDP socket buffer. */
#define CORE_DRAIN_PASSES 4096

/* A peer's address while it has no endpoint: the transport's section of
 * the address it was added with (a copy), behind its identity (the remote
 * context's uuid) and the transport that reaches it. */
typedef struct core_addr {
    uint64_t uuid;
    uint16_t len;               /* bytes of bytes[] */
    uint8_t iface;              /* the transport: ctx->ifaces[iface] */
    unsigned char bytes[];
} core_addr_t;

/* A remote process: one word. Its low three bits are flags; the rest
 * points at its endpoint once that is made (CORE_PEER_EP: made on first
 * use), before that at the copy of its address (core_addr_t; NULL for the
 * self peer, which has none). Its identity is kept once: in the endpoint
 * (tl_ep_t.uuid), or in the address's copy (core_peer_uuid). An endpoint
 * gone with the context leaves CORE_PEER_EP with no pointer. */
typedef union core_peer {
    uintptr_t w;
    proto_peer_t proto;         /* proto's bit of the word: PROTO_PEER_HELLO */
} core_peer_t;
_Static_assert(sizeof(void *) != 8 || sizeof(core_peer_t) == 8,
               "a peer entry is 8 bytes on 64-bit targets: one per remote process");

#define CORE_PEER_EP ((uintptr_t)1)     /* the pointer is to its endpoint */
#define CORE_PEER_FAILED ((uintptr_t)2) /* its process died or stopped answering */
#define CORE_PEER_FLAGS ((uintptr_t)7)  /* these two and PROTO_PEER_HELLO */
_Static_assert((CORE_PEER_EP | CORE_PEER_FAILED | PROTO_PEER_HELLO) == CORE_PEER_FLAGS &&
                   !((CORE_PEER_EP | CORE_PEER_FAILED) & PROTO_PEER_HELLO),
               "core's flags and proto's fill the low bits of a pointer to 8-byte aligned memory");

static inline int core_peer_has_ep(const core_peer_t *p)
{
    return (p->w & CORE_PEER_EP) != 0;
}

static inline int core_peer_failed(const core_peer_t *p)
{
    return (p->w & CORE_PEER_FAILED) != 0;
}

/* Its endpoint (core_peer_has_ep), NULL once gone with the context. */
static inline tl_ep_t *core_peer_ep_of(const core_peer_t *p)
{
    return (tl_ep_t *)(p->w & ~CORE_PEER_FLAGS);
}

/* Its address (!core_peer_has_ep), NULL for the self peer. */
static inline core_addr_t *core_peer_addr(const core_peer_t *p)
{
    return (core_addr_t *)(p->w & ~CORE_PEER_FLAGS);
}

enum core_req_state {
    CORE_REQ_PENDING = 0,  /* with proto: waiting in the matcher, for the wire or a FIN */
    CORE_REQ_DONE = 2
};

/* A request: core's bookkeeping, then proto's part (p), which carries
 * the buffer, the completion and the protocol state. */
struct tmx_request {
    void *pool_link;            /* the pool's free-list word, kept apart */
    tmx_context_h ctx;
    util_dlist_t link;          /* in ctx->reqs: live requests */
    uint8_t state;              /* enum core_req_state */
    uint8_t handle_held;        /* the caller holds a handle */
    uint8_t big;                /* counted in ctx->off_big */
    uint8_t offered;            /* counted in ctx->off_offered */
    uint8_t owns_buf;           /* p.buf is a copy it frees (a copying
                                   synchronous send: INJECT with SYNC) */
    uint8_t cq_slot;            /* holds one of cq.reserved */
    proto_req_t p;
};

/* An unexpected message: core's bookkeeping, then proto's part. */
struct tmx_message {
    void *pool_link;            /* the pool's free-list word, kept apart */
    tmx_context_h ctx;
    util_dlist_t link;          /* in ctx->msgs: live messages */
    uint8_t claimed;
    size_t charge;              /* bytes counted in ctx->unexp_bytes */
    proto_msg_t p;
};

typedef struct core_cq {
    tmx_completion_t *ring;
    size_t cap;                 /* a power of two */
    size_t head;                /* next to read */
    size_t count;
    size_t reserved;            /* slots promised to operations in flight
                                   (core_cq_reserve): count + reserved <= cap */
} core_cq_t;

struct tmx_context {
    pthread_mutex_t lock;
    int mt;                     /* TMX_THREAD_MULTIPLE */
    uint64_t uuid;
    char name[32];
    tl_iface_t *ifaces[CORE_MAX_TLS];
    int n_ifaces;
    tl_iface_t *self_iface;
    core_peer_t *peers;
    uint32_t n_peers;
    uint32_t cap_peers;
    core_peer_t *ipeers;        /* implicit peers: TMX_PEER_IMPLICIT | index */
    uint32_t n_ipeers;
    uint32_t cap_ipeers;
    uint64_t ipeers_refused;    /* past CORE_IMPLICIT_MAX (a count for the log) */
    tmx_peer_t self_peer;       /* first peer naming this context */
    tmx_peer_t *uuid_vals;      /* uuid -> first peer: open addressing, the
                                   key the peer's own uuid */
    uint32_t uuid_cap;          /* slots, or 0 */
    uint64_t uuid_seed;         /* secret: peers cannot aim uuids at one chain */
    uint64_t last_uuid;         /* one-entry cache in front of the table */
    tmx_peer_t last_peer;
    int64_t next_peer_check_us;
    int64_t next_poll_check_us; /* the same, from a poll loop (core_poll_yield) */
    int64_t pool_trim_us;       /* core_pools_trim's last look */
    unsigned spin_polls;        /* fruitless polls before yielding */
    unsigned idle_polls;        /* fruitless tmx_cq_read/tmx_progress calls in a row */
    unsigned polls;             /* core_progress calls, for quiet transports */
    int64_t quiet_look_us;      /* when quiet transports were last polled */
    unsigned busy_polls;        /* polls that found work since then */
    int watch_all;              /* every peer connected, so watched */
    boot_job_t job;             /* the launched job, if any */
    int boot_join;              /* the context joins a launched job (TMX_BOOT_AUTO) */
    proto_t proto;              /* the protocols, the matcher, the rendezvous slots */
    util_pool_t req_pool;
    util_pool_t msg_pool;
    util_dlist_t reqs;
    util_dlist_t msgs;
    size_t unexp_bytes;         /* held by unexpected messages (core_unexp_charge) */
    size_t unexp_max;           /* TMX_UNEXPECTED_MAX; 0: no bound */
    int ifaces_pressed;         /* past the soft bound (unexp_update): the
                                   transports' rx_pressure */
    config_t cfg;               /* the settings, parsed at creation */
    core_cq_t cq;
    /* The offload engine's thread (engine.c), when TMX_OFFLOAD is on. */
    int off_on;
    pthread_t off_thread;
    atomic_int off_stop;
    _Atomic uint64_t app_calls; /* core_progress calls (by the application, mostly) */
    _Atomic uint64_t off_post_calls; /* app_calls when the latest request of CORE_OFF_BIG bytes was posted */
    atomic_uint off_big;        /* live requests of CORE_OFF_BIG bytes or more */
    atomic_uint off_offered;    /* live receives offered to their senders (proto.c,
                                   RTR): not watched, but the engine looks more
                                   often while asleep (engine.c) */
    atomic_uint off_posts;      /* such requests started so far */
    atomic_int off_word;        /* the engine's futex word: 1 when woken */
    atomic_int off_sleeping;    /* the engine waits on off_word (2: until a wait ends) */
    atomic_int app_waiting;     /* application threads inside tmx_request_wait */
    /* A context of one application thread with the engine: the lock is
     * asymmetric (engine.c): two plain stores for the application, a
     * membarrier() for the engine's thread. */
    int asym;
    atomic_int app_in;          /* the application is inside */
    atomic_int eng_in;          /* the engine's thread is inside */
};

/* Requests from this size on (rendezvous and long streams) are what the
 * offload engine's thread watches for while the application computes;
 * with none live it sleeps (engine.c). */
#define CORE_OFF_BIG PROTO_OFF_BIG

/* The application's way in while the engine's thread holds the context. */
void core_asym_wait(tmx_context_h ctx);

static inline void core_lock(tmx_context_h ctx)
{
    if (ctx->asym) {
        /* The engine's thread stores eng_in, runs membarrier() (a full
         * barrier on every thread of ours) and then reads app_in: so a
         * compiler barrier suffices here (the asymmetric Dekker pattern). */
        atomic_store_explicit(&ctx->app_in, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
        if (__builtin_expect(atomic_load_explicit(&ctx->eng_in, memory_order_acquire), 0))
            core_asym_wait(ctx);
    } else if (ctx->mt) {
        pthread_mutex_lock(&ctx->lock);
    }
}

static inline void core_unlock(tmx_context_h ctx)
{
    if (ctx->asym)
        atomic_store_explicit(&ctx->app_in, 0, memory_order_release);
    else if (ctx->mt)
        pthread_mutex_unlock(&ctx->lock);
}

/* cq.c */
tmx_status_t core_cq_init(core_cq_t *cq);
void core_cq_fini(core_cq_t *cq);
/* A slot for a completion to come: TMX_ERR_NOMEM if the queue cannot
 * grow to hold it. core_cq_push of a reserved completion cannot fail. */
tmx_status_t core_cq_reserve(core_cq_t *cq);
tmx_status_t core_cq_push(core_cq_t *cq, const tmx_completion_t *c);
void core_cq_test_fail_grow(unsigned n);
size_t core_cq_pop(core_cq_t *cq, tmx_completion_t *out, size_t max);

/* request.c */
struct tmx_request *core_req_alloc(tmx_context_h ctx, const tmx_op_params_t *params,
                                   tmx_op_type_t op);
void core_req_complete(struct tmx_request *req, tmx_status_t status);
void core_req_release(struct tmx_request *req);
tmx_status_t core_op_params_refuse(const tmx_op_params_t *params, uint32_t allowed_flags);

#define CORE_OP_FIELDS (TMX_OP_FIELD_FLAGS | TMX_OP_FIELD_USER_CONTEXT | TMX_OP_FIELD_DATA)

/* Checks an operation's parameters (NULL is fine); inline, since every
 * operation pays it. */
static inline tmx_status_t core_op_params_check(const tmx_op_params_t *params,
                                                uint32_t allowed_flags)
{
    if (params == NULL)
        return TMX_OK;
    if ((params->field_mask & ~(uint64_t)CORE_OP_FIELDS) ||
        ((params->field_mask & TMX_OP_FIELD_FLAGS) && (params->flags & ~allowed_flags)))
        return core_op_params_refuse(params, allowed_flags);
    return TMX_OK;
}
int core_progress(tmx_context_h ctx);
int64_t core_now_us(void);

/* Blocks in the transports until something may have happened or the
 * deadline (CLOCK_MONOTONIC us) passes; spins first, then yields, then
 * sleeps. *spins carries the caller's count of fruitless rounds. */
void core_idle(tmx_context_h ctx, unsigned *spins, int64_t deadline_us);

/* For the calls an application polls in a loop of its own (tmx_cq_read,
 * tmx_progress): events is what this call found. After spin_polls
 * fruitless calls in a row it yields the core as core_idle does. The
 * caller holds the context lock. */
void core_poll_yield(tmx_context_h ctx);
static inline void core_poll_idle(tmx_context_h ctx, int events)
{
    if (events > 0)
        ctx->idle_polls = 0;
    else if (__builtin_expect(++ctx->idle_polls >= ctx->spin_polls, 0))
        core_poll_yield(ctx);
}

/* Looks for dead peers, every CORE_PEER_CHECK_US at most: from a wait
 * gone idle. Locked. */
void core_check_peers(tmx_context_h ctx, int64_t now);
/* Gives the request and message pools' extra chunks back when none of
 * their objects is in use; at most every 20 ms (from progress, idle
 * waits, and the return of a pool's last object). Locked. */
void core_pools_trim(tmx_context_h ctx, int64_t now);
/* Sleeps in the transports, unlocked, up to timeout_us. */
void core_idle_sleep(tmx_context_h ctx, int64_t timeout_us);

/* engine.c: the offload engine's thread. */
tmx_status_t core_offload_start(tmx_context_h ctx);
/* Chooses the asymmetric lock for a context of one application thread,
 * where the kernel offers membarrier(); otherwise the mutex stays. */
void core_offload_lock_mode(tmx_context_h ctx, int app_threads);
/* Counts a request the engine should advance, waking it if it sleeps. */
void core_offload_big(tmx_context_h ctx, struct tmx_request *req);
static inline void core_offload_watch(tmx_context_h ctx, struct tmx_request *req)
{
    if (ctx->off_on && req->p.len >= CORE_OFF_BIG)
        core_offload_big(ctx, req);
}
/* Stops and joins it; the caller does not hold the lock. */
void core_offload_stop(tmx_context_h ctx);
/* An application thread enters and leaves tmx_request_wait (one whose
 * request is not done yet): while one is inside, the traffic advances and
 * the engine sleeps instead of looking (engine_wait_out); leaving wakes it
 * from that sleep (off_sleeping 2, not its other sleeps) while requests it
 * watches are live. */
static inline void core_offload_wait_begin(tmx_context_h ctx)
{
    if (ctx->off_on)
        atomic_fetch_add_explicit(&ctx->app_waiting, 1, memory_order_relaxed);
}
void core_offload_wake(tmx_context_h ctx);
static inline void core_offload_wait_end(tmx_context_h ctx, int waiting)
{
    /* seq_cst: the engine stores off_sleeping and then reads app_waiting */
    if (ctx->off_on && waiting && atomic_fetch_sub(&ctx->app_waiting, 1) == 1 &&
        atomic_load(&ctx->off_sleeping) == 2 && atomic_load_explicit(&ctx->off_big, memory_order_relaxed) != 0)
        core_offload_wake(ctx);
}

/* fail.c */
void core_peer_failed_cb(void *arg, uint64_t uuid, int clean);
void core_watch_for_wildcards(tmx_context_h ctx);

/* peer.c */
/* The peer a number names, added or implicit; NULL for no peer. */
static inline core_peer_t *core_peer_get(tmx_context_h ctx, tmx_peer_t peer)
{
    if (peer < ctx->n_peers) /* TMX_ANY_SOURCE and TMX_PEER_NONE are never below */
        return &ctx->peers[peer];
    if (peer == TMX_ANY_SOURCE || peer == TMX_PEER_NONE || !(peer & TMX_PEER_IMPLICIT))
        return NULL;
    return (peer & ~TMX_PEER_IMPLICIT) < ctx->n_ipeers ? &ctx->ipeers[peer & ~TMX_PEER_IMPLICIT] : NULL;
}
/* A peer's identity: its remote context's uuid (0 once its endpoint went
 * with the context). */
static inline uint64_t core_peer_uuid(const struct tmx_context *ctx, const core_peer_t *p)
{
    if (core_peer_has_ep(p))
        return core_peer_ep_of(p) != NULL ? core_peer_ep_of(p)->uuid : 0;
    return core_peer_addr(p) != NULL ? core_peer_addr(p)->uuid : ctx->uuid; /* self: no address */
}
tmx_status_t core_peer_ep(tmx_context_h ctx, tmx_peer_t peer, tl_ep_t **ep);
/* The endpoints peers hold, for the transports (tl_iface_params_t.held). */
extern const tl_held_t core_held;
tmx_status_t core_peer_addr_cb(void *arg, const tl_iface_t *iface, uint64_t uuid, const void **addr,
                               size_t *len);
/* The endpoint to peer and proto's state of it, made if need be: the
 * usual case (connected, alive) inline, for every send. */
static inline tmx_status_t core_peer_ready(tmx_context_h ctx, tmx_peer_t peer, tl_ep_t **ep,
                                           proto_peer_t **pp)
{
    core_peer_t *p = core_peer_get(ctx, peer);
    tmx_status_t st;

    if (p != NULL && (p->w & (CORE_PEER_EP | CORE_PEER_FAILED)) == CORE_PEER_EP && core_peer_ep_of(p) != NULL) {
        *ep = core_peer_ep_of(p);
        *pp = &p->proto;
        return TMX_OK;
    }
    if ((st = core_peer_ep(ctx, peer, ep)) == TMX_OK)
        *pp = &p->proto;
    return st;
}
/* A process that sent us its address without being added (proto.c's
 * HELLO): *out is its number, TMX_PEER_IMPLICIT set, or the number it
 * already has. TMX_ERR_INVALID unless the address is that of uuid and
 * names the place its packets come from (tl_ops_t.sender_check). */
tmx_status_t core_peer_add_implicit(tmx_context_h ctx, uint64_t uuid, const void *addr, size_t len,
                                    tmx_peer_t *out);
/* This context's address blob into buf (room bytes); *used its size. */
tmx_status_t core_address(tmx_context_h ctx, void *buf, size_t room, size_t *used);
tmx_peer_t core_peer_by_uuid(tmx_context_h ctx, uint64_t uuid);
tmx_status_t core_peer_add(tmx_context_h ctx, const void *addr, size_t len, tmx_peer_t *out);
/* Destroys every peer's endpoint (teardown: after the transports are
 * muted, before they close); core_peers_fini then frees the peers. */
void core_peers_close(tmx_context_h ctx);
void core_peers_fini(tmx_context_h ctx);

/* message lifetime */
struct tmx_message *core_msg_alloc(tmx_context_h ctx);
/* Frees a message (proto freed its payload) and takes back what it was
 * charged. */
void core_msg_free(tmx_context_h ctx, struct tmx_message *msg);

/* Counts a message kept unexpected against TMX_UNEXPECTED_MAX: its record
 * and the bytes of payload it holds (an eager payload's copy; a
 * rendezvous one holds only its header).
 * At the bound the transports are told (tl_iface_t.rx_full) to leave what
 * they can where the senders put it, until receives take messages. */
void core_unexp_charge(tmx_context_h ctx, struct tmx_message *msg, size_t bytes);

#endif
