/*
 * The transport interface. A transport moves opaque packets between
 * processes and reads remote memory; it knows nothing of tags or messages.
 * Each transport provides one const tl_ops_t; the core dispatches through it
 * and never tests an operation for NULL (tl_no_get() fills the gap where a
 * transport cannot read remote memory).
 *
 * Threads: the core serialises every call into one interface under its
 * lock, with one exception: wait() runs unlocked (a sleeping thread must
 * not keep the others out), concurrently with any other operation on the
 * same interface, including progress() and another thread's wait(). So no
 * operation but wait() is called concurrently with another, and wait()
 * may touch only what iface_open() fixed for the interface's life (a
 * descriptor, a mapped futex word) and fields that every side reads and
 * writes atomically. Callbacks run inside progress() and check_peers()
 * (and mem_check inside self's get()), never inside wait().
 */
#ifndef TMX_TL_H
#define TMX_TL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <sys/uio.h>

#include "tmx.h"

typedef struct tl_iface tl_iface_t;
typedef struct tl_ep tl_ep_t;
typedef struct tl_ops tl_ops_t;

/* Upward callback: a packet from the context src_uuid arrived. data is
 * valid only during the call; the callee copies what it keeps. Called from
 * progress() only. */
typedef void (*tl_recv_cb_t)(void *arg, uint64_t src_uuid, const void *data, size_t len);

/* A packet handed up in pieces while it arrives: a transport whose
 * packets may exceed one buffer of its own (shm's spans of cells, which
 * the sender is still filling while the receiver copies the first) hands
 * them up as they come instead of gathering them. begin gets the first
 * piece, which holds the packet's headers (at least 64 bytes), and the
 * packet's whole length, and returns what the other pieces go into (NULL:
 * the layer above took or dropped the packet whole and wants nothing
 * more of it); more gets each next piece, in order; end says the packet
 * is whole (TL_STREAM_WHOLE) or never will be (TL_STREAM_GONE: its sender
 * died, or the transport closed; TL_STREAM_BROKEN: its sender broke it off
 * with something else, or the pieces did not add up), and the sink is not
 * used after it. Between begin and end the
 * transport hands up nothing else. Pieces are valid only during the call;
 * all three are called from progress() only. A layer above that gives
 * none gets such packets gathered, through recv_cb. */
typedef struct tl_stream_cb {
    void *(*begin)(void *arg, uint64_t src_uuid, const void *first, size_t first_len, size_t total);
    void (*more)(void *arg, void *sink, const void *piece, size_t len);
    void (*end)(void *arg, void *sink, int how);
} tl_stream_cb_t;

enum tl_stream_end {
    TL_STREAM_BROKEN = -1,
    TL_STREAM_GONE = 0,
    TL_STREAM_WHOLE = 1
};

/* Upward callback: the process behind a context has gone: died or stopped
 * answering (clean == 0), or exited after closing its context (clean ==
 * 1). Every operation naming it must fail, not wait. */
typedef void (*tl_fail_cb_t)(void *arg, uint64_t uuid, int clean);

/* Asks the layer above whether a remote reader may read len bytes at addr
 * under rkey (registered, in bounds, right key). TMX_OK or why not. */
typedef tmx_status_t (*tl_mem_check_t)(void *arg, uint64_t addr, uint64_t len, uint64_t rkey);

/* Remote writes (rendezvous by write, seed 003). put_data: bytes of a
 * peer's emulated write arrived for len bytes at addr under rkey (the key
 * the layer above handed out for that memory): it checks key, bounds and
 * sender, copies them into place and says TMX_OK, or refuses (nothing
 * written; the transport counts the drop). put_done: a write accepted
 * with TMX_INPROGRESS (tl_ops_t.put) has every byte on its way, in order
 * ahead of any packet sent after this call, or failed (status); lkey is
 * the key the write's source memory is lent under, by which the layer
 * above finds it (the write may have outlived its reason). Both from
 * progress() only. */
typedef tmx_status_t (*tl_put_data_t)(void *arg, uint64_t src_uuid, uint64_t addr, uint64_t rkey,
                                      const void *data, size_t len);
typedef void (*tl_put_done_t)(void *arg, uint64_t lkey, tmx_status_t status);

/* Asked, while the layer above has set tl_iface_t.rx_full, before a
 * transport that can leave packets where they are (shm: in the ring) takes
 * one: 1 to take it now (recv_cb follows at once), 0 to leave it and every
 * packet behind it from that peer for a later progress() call. Called
 * from progress() only; data is valid only during the call. */
typedef int (*tl_admit_cb_t)(void *arg, uint64_t src_uuid, const void *data, size_t len);

/* The address the layer above holds for the process uuid on this
 * transport (its section of the process's published address, as
 * ep_create would get it), asked by a transport that hears from uuid
 * before it has an endpoint to it: what the sender's packets must come
 * from. TMX_ERR_NOT_FOUND when the layer above holds none (not a peer, a
 * peer reached through another transport, or one whose endpoint exists).
 * *addr is valid only during the call. Called from progress() only. */
typedef tmx_status_t (*tl_peer_addr_t)(void *arg, const tl_iface_t *iface, uint64_t uuid, const void **addr,
                                       size_t *len);

/* The endpoints the layer above holds (tl_iface_params_t.held). A
 * transport that keeps one endpoint per remote context may find them
 * through the layer above's index of processes instead of one of its own
 * (seed 002: one record per remote process, not two indexes of them).
 * find: the endpoint on iface that the layer above reports uuid's packets
 *       under, if that is one it holds (ep_create made it), else NULL.
 *       Its answer for an endpoint the layer above holds changes only
 *       through ep_destroy, or with a call of ep_unfound (tl_ops_t) on the
 *       endpoint, which the layer above still holds.
 * next: every endpoint on iface that find returns for some uuid, once
 *       each: start with *it = 0 (below 2^31 throughout); NULL at the
 *       end. Endpoints made meanwhile may be missed.
 * Both with recv_arg, under the caller's serialisation; they change
 * nothing the transport could see. */
typedef struct tl_held {
    tl_ep_t *(*find)(void *arg, const tl_iface_t *iface, uint64_t uuid);
    tl_ep_t *(*next)(void *arg, const tl_iface_t *iface, uint32_t *it);
} tl_held_t;

/* How a remote read moves the data: the mechanisms a transport offers
 * (tl_iface_t.get_kinds), among which the layer above chooses, per size,
 * in its protocol table. */
enum tl_get_kind {
    TL_GET_DIRECT = 1u << 0, /* the reader copies from the owner's memory itself
                                (process_vm_readv; memcpy within a process) */
    TL_GET_SHARED = 1u << 1, /* the owner writes the front while the reader reads
                                the rest, each with one-sided copies (a large read
                                is faster with two cores copying) */
    TL_GET_COPY = 1u << 2    /* the owner checks the key and sends the bytes as
                                packets: a read emulated on the owner's side */
};

/* How a remote write moves the data (tl_iface_t.put_kinds). */
enum tl_put_kind {
    TL_PUT_DIRECT = 1u << 0, /* the writer copies into the target's memory itself
                                (process_vm_writev; memcpy within a process) */
    TL_PUT_COPY = 1u << 1    /* the writer sends the bytes as packets; the target
                                checks each against its key (put_data) and places it */
};

/* A remote read in flight, embedded in the caller's object. done() runs
 * from progress() once the data is in place, or with an error status. */
typedef struct tl_get_op {
    void (*done)(struct tl_get_op *op, tmx_status_t status);
} tl_get_op_t;

/* The settings of each transport, parsed and checked once, at context
 * creation, from the one table of settings (the core's config.c): transports
 * never read the environment or the table themselves. */
typedef enum tl_shm_stop_at {
    TL_SHM_STOP_NONE = 0,
    TL_SHM_STOP_CLAIM,
    TL_SHM_STOP_PUBLISH,
    TL_SHM_STOP_HELP,
    TL_SHM_STOP_FBOX
} tl_shm_stop_at_t;

typedef struct tl_shm_settings {
    int cma;                    /* TMX_SHM_CMA: 1 auto, 0 off */
    int fbox;                   /* TMX_SHM_FBOX: 1 short packets through fast boxes, 0 the ring only */
    int stop_at;                /* TMX_SHM_TEST_STOP: enum tl_shm_stop_at */
    uint64_t stop_n;            /*   at the n-th cell (n > 0) */
} tl_shm_settings_t;

typedef struct tl_udp_faults {
    double drop, dup, reorder, corrupt; /* probabilities in [0, 1] */
} tl_udp_faults_t;

typedef struct tl_udp_settings {
    char addr[16];              /* TMX_UDP_ADDR: "auto" or a dotted IPv4 address */
    uint32_t mtu;               /* TMX_UDP_MTU (0: the interface's) */
    uint32_t window;            /* TMX_UDP_WINDOW */
    uint32_t connect_max;       /* TMX_UDP_CONNECT_MAX */
    int offload;                /* TMX_UDP_OFFLOAD */
    int shared_port;            /* TMX_UDP_SHARED_PORT: 1 auto, 0 off */
    uint32_t lanes;             /* TMX_UDP_LANES */
    uint64_t ack_delay_us;      /* TMX_UDP_ACK_DELAY_US */
    uint64_t rto_ms;            /* TMX_UDP_RTO_MS */
    uint64_t peer_timeout_ms;   /* TMX_UDP_PEER_TIMEOUT_MS */
    tl_udp_faults_t faults;     /* TMX_UDP_FAULTS */
} tl_udp_settings_t;

typedef struct tl_settings {
    tl_shm_settings_t shm;
    tl_udp_settings_t udp;
} tl_settings_t;

typedef struct tl_iface_params {
    uint64_t uuid;          /* this context's identity */
    uint64_t job_key;       /* the launched job's key, 0 outside a job */
    tl_recv_cb_t recv_cb;   /* packets */
    tl_fail_cb_t fail_cb;   /* dead peers */
    tl_mem_check_t mem_check; /* remote reads served by emulation */
    void *recv_arg;         /* the argument of recv_cb, admit_cb and mem_check */
    tl_admit_cb_t admit_cb; /* packets, while rx_full is set (may be NULL
                               for a layer above that never sets it) */
    int mt;                 /* threads may wait on it at once (TMX_THREAD_MULTIPLE) */
    const tl_settings_t *settings; /* never NULL; read during iface_open only */
    void *fail_arg;         /* the argument of fail_cb */
    const tl_stream_cb_t *stream; /* packets in pieces (may be NULL: see the type) */
    tl_put_data_t put_data; /* emulated writes into our memory (may be NULL: refused) */
    tl_put_done_t put_done; /* our writes under way (may be NULL for a layer
                               above that never writes) */
    int in_job;             /* the context is one of a launched job's (it
                               will join it): udp may share a port with the
                               job's other processes on the node */
    tl_peer_addr_t peer_addr; /* published addresses (may be NULL: none known);
                                 called with recv_arg */
    int wake_asym;          /* with mt: those threads are the application's one
                               and the offload engine's (tl_iface_t's
                               rare_thread), and the process is registered
                               for membarrier(PRIVATE_EXPEDITED) (the
                               context's asymmetric lock): the application's
                               thread, which progresses all the time, needs
                               no fence before it looks for sleepers of its
                               process, since the engine's runs membarrier
                               when it is about to sleep */
    const tl_held_t *held;  /* the endpoints the layer above holds (may be
                               NULL: a transport then indexes its own) */
} tl_iface_params_t;

/* Common head of every transport's interface object. */
struct tl_iface {
    const tl_ops_t *ops;
    uint16_t num;           /* its number among the process's open
                               interfaces (tl_iface_register) */
    size_t eager_limit;     /* largest payload sent eagerly */
    size_t max_packet;      /* largest packet send() accepts */
    tl_recv_cb_t recv_cb;
    const tl_stream_cb_t *stream; /* NULL: gather, and call recv_cb */
    tl_fail_cb_t fail_cb;
    tl_mem_check_t mem_check;
    tl_admit_cb_t admit_cb;
    tl_peer_addr_t peer_addr;
    const tl_held_t *held;  /* NULL: the layer above offers none */
    void *recv_arg;         /* recv_cb's, admit_cb's, mem_check's, peer_addr's and held's */
    void *fail_arg;         /* fail_cb's */
    /* Set and cleared by the layer above (under its serialisation): set
     * while the memory it holds for unexpected messages is at its bound.
     * A transport that can leave packets where the sender put them asks
     * admit_cb before taking each one while it is set, so that the sender
     * finds no room and slows down; one that cannot ignores it. */
    int rx_full;
    /* Set and cleared by the layer above: set while the memory it holds
     * for unexpected messages is past its soft bound, below rx_full's. A
     * transport tells its senders (peer_pressed), which then send what
     * has more than a few hundred bytes as rendezvous, so that only
     * headers wait and no payload stands in front of a message a receive
     * takes. */
    int rx_pressure;
    /* Set by the transport when polling it would find nothing for a while
     * (nothing queued, pending or recently arrived); the core then polls
     * it only after every sleep and once TL_QUIET_LOOK_US (while others
     * find work, TL_QUIET_BUSY_LOOK_US) have passed since it last did
     * (looking at the clock once in TL_QUIET_POLL_EVERY
     * polls), which keeps a quiet transport's system call out of a busy
     * one's latency yet well inside any retransmission timer. A
     * send or read through the transport clears it. */
    int quiet;
    /* 1 when the owner's mem_check sees every remote read of its memory
     * (reads it serves itself); 0 when the kernel's permission check
     * stands in for it (shm's process_vm_readv: a process the kernel lets
     * read us may read all of our memory, key or not). Kept current by
     * the transport. */
    int get_checked;
    /* The read mechanisms this interface offers now (enum tl_get_kind);
     * a transport whose one-sided copies the kernel refuses at run time
     * drops DIRECT and SHARED from here. */
    unsigned get_kinds;
    /* The write mechanisms this interface offers now (enum tl_put_kind;
     * 0: none, the layer above reads instead). */
    unsigned put_kinds;
    /* 1 when every byte a peer writes into our memory comes through
     * put_data (so the layer above can count them); 0 when a peer may
     * copy into it itself (shm's process_vm_writev). Fixed at open. */
    int put_checked;
    tl_put_data_t put_data; /* recv_arg is its argument, and put_done's */
    tl_put_done_t put_done;
    /* Owned by the layer above: its data for this interface (proto's
     * protocol table). Transports never touch it. */
    const void *above;
    /* With tl_iface_params_t.wake_asym: the offload engine's thread,
     * (uintptr_t)pthread_self(), stored by that thread before it first
     * progresses; 0 before. Only a thread comparing it with itself reads
     * it: the engine's is the side of the asymmetric wake-up that fences
     * when it woke others (and runs membarrier before it sleeps), the
     * application's the side that does neither. */
    _Atomic uintptr_t rare_thread;
};

/* Whether writes between us and our peers are one-sided copies that cost
 * their target no work (TL_PUT_DIRECT, not seen by put_data: shm's
 * process_vm_writev). */
static inline int tl_writes_free(const tl_iface_t *iface)
{
    return (iface->put_kinds & TL_PUT_DIRECT) && !iface->put_checked;
}

/* Whether the calling thread is the offload engine's (rare_thread): the
 * application is then away, and work of ours takes a core from it. */
static inline int tl_on_rare_thread(const tl_iface_t *iface)
{
    return atomic_load_explicit(&iface->rare_thread, memory_order_relaxed) == (uintptr_t)pthread_self();
}

#define TL_QUIET_POLL_EVERY 64
#define TL_QUIET_LOOK_US 50 /* and at most this often: a quiet udp costs a system call per look */
/* The same while other transports are busy: a look every 50 us put that
 * system call into 1 % of shm's round trips (its 99th percentile); a
 * quiet transport's first packet may then wait up to this long. */
#define TL_QUIET_BUSY_LOOK_US 500

/* Common head of every transport's endpoint object: 16 bytes, since a
 * job holds one endpoint per remote process. Its interface is named by
 * number (tl_ep_iface), not by pointer. */
struct tl_ep {
    uint64_t uuid;          /* the remote context (ep_create's uuid): the
                               core reads it here, and keeps no copy */
    uint32_t own;           /* the transport's, never read above it: room
                               that would be padding on 64-bit targets */
    uint16_t iface;         /* its interface's number (tl_iface_t.num) */
    uint8_t kind;           /* enum tl_ep_kind: what the layer above made it for */
    uint8_t own8;           /* the transport's, as own */
};
_Static_assert(sizeof(void *) != 8 || sizeof(tl_ep_t) == 16, "an endpoint's head is 16 bytes");

/* Whom the layer above made an endpoint for (ep_create's peer). */
enum tl_ep_kind {
    TL_EP_NONE = 0,         /* nobody yet: the transport made it on its own */
    TL_EP_ADDED,            /* a process the layer above was given the address of */
    TL_EP_IMPLICIT          /* one known only from its own packets (TMX_PEER_IMPLICIT) */
};

/* Every open interface of the process by number, so that an endpoint can
 * name its own in two bytes: tl_iface_register gives iface a number
 * (iface->num) at open, the lowest free one, TMX_ERR_NO_SPACE with
 * TL_IFACE_MAX open already; tl_iface_unregister frees it at close.
 * Thread-safe. The table takes 512 KiB of address space, of which only
 * the page of the numbers in use is touched. */
#define TL_IFACE_MAX 65536
tmx_status_t tl_iface_register(tl_iface_t *iface);
void tl_iface_unregister(tl_iface_t *iface);
extern tl_iface_t *tl_ifaces[TL_IFACE_MAX];

static inline tl_iface_t *tl_ep_iface(const tl_ep_t *ep)
{
    return tl_ifaces[ep->iface];
}

/* The head of an endpoint made for peer (ep_create's) on iface. */
static inline void tl_ep_init(tl_ep_t *ep, const tl_iface_t *iface, uint64_t uuid, tmx_peer_t peer)
{
    ep->uuid = uuid;
    ep->iface = iface->num;
    ep->kind = peer == TMX_PEER_NONE ? TL_EP_NONE : (peer & TMX_PEER_IMPLICIT) ? TL_EP_IMPLICIT : TL_EP_ADDED;
}

/*
 * Every operation's contract, in five words each:
 *   Blocks      whether it may wait, and for how long at most.
 *   Upcalls     which callbacks of tl_iface_params_t it may run.
 *   In upcall   whether the layer above may call it from inside one of
 *               those callbacks (recv_cb, admit_cb, mem_check, fail_cb,
 *               tl_get_op_t.done).
 *   Buffers     who owns what was passed in, once it returns.
 *   Failure     what an error leaves behind.
 * Threads: see the top of this file; everything but wait() is called
 * under the caller's serialisation, one at a time per interface.
 */
struct tl_ops {
    const char *name;

    /* Opens the transport.
     * Blocks: no (binds a socket or maps a segment). Upcalls: none.
     * In upcall: no. Buffers: params and *params->settings are read
     * during the call only. Failure: nothing is left; *iface untouched. */
    tmx_status_t (*iface_open)(const tl_iface_params_t *params, tl_iface_t **iface);

    /* Closes the transport and every endpoint still open on it; queued
     * packets are dropped and reads in flight are abandoned (no done()).
     * Called after tl_iface_mute(), so that whatever it still does reaches
     * no callback of the layer above.
     * Blocks: for a bounded time: udp lingers up to UDP_LINGER_US to
     * deliver its last segments; shm waits for a peer writing into one of
     * our buffers to finish the chunk it took (one 64 KiB copy), or for
     * that peer to die. Upcalls: none (muted). In upcall: no.
     * Failure: cannot fail; the interface is gone. */
    void (*iface_close)(tl_iface_t *iface);

    /* Writes this transport's address section (*len in: room, out: used).
     * Blocks: no. Upcalls: none. In upcall: yes. Buffers: the caller's.
     * Failure: TMX_ERR_NO_SPACE if it does not fit (*len says how much
     * would); buf unchanged. */
    tmx_status_t (*address)(tl_iface_t *iface, void *buf, size_t *len);

    /* TMX_OK if this transport can reach the process whose address section
     * this is (same host for shm, same job for udp), TMX_ERR_UNREACHABLE if
     * not, TMX_ERR_INVALID for a malformed section.
     * Blocks: no. Upcalls: none. In upcall: yes. Creates no state. */
    tmx_status_t (*reachable)(tl_iface_t *iface, const void *addr, size_t len);

    /* Creates the endpoint to the context uuid from its address section;
     * peer is the caller's number for it, whose kind is kept in tl_ep_t
     * (tl_ep_init): an endpoint the transport already has to uuid may be
     * returned again, for the last number it was made for. Called on
     * first use of a peer. From then on the transport watches the peer and
     * reports its end through fail_cb.
     * Blocks: no (shm opens the peer's segment: a few system calls).
     * Upcalls: none. In upcall: yes (a HELLO's answer, a FIN to a peer
     * first met in recv_cb). Buffers: addr is copied. Failure: no
     * endpoint; TMX_ERR_PEER_FAILED when the peer is known gone. */
    tmx_status_t (*ep_create)(tl_iface_t *iface, const void *addr, size_t len, tmx_peer_t peer,
                              uint64_t uuid, tl_ep_t **ep);

    /* Gives up the caller's use of an endpoint. Packets already accepted
     * by send() are still delivered (udp keeps the endpoint, and answers
     * the peer's retransmissions, until the interface closes); reads in
     * flight through it must have completed or be abandoned with the
     * interface. The caller calls nothing on ep afterwards.
     * Blocks: no. Upcalls: none. In upcall: no (teardown only). */
    void (*ep_destroy)(tl_ep_t *ep);

    /* The layer above's held.find is about to stop returning ep, which it
     * still holds and uses (another of its numbers for the same process
     * is to come first): the transport finds ep through an index of its
     * own from now on. May be NULL for a transport that keeps its own
     * index of every endpoint anyway.
     * Blocks: no. Upcalls: none. In upcall: yes. Failure:
     * TMX_ERR_NOMEM, and nothing changed: the layer above must then not
     * make the change. */
    tmx_status_t (*ep_unfound)(tl_ep_t *ep);

    /* Sends one packet made of the iov pieces (1 to max_packet bytes).
     * Delivered once, in order with the other packets of this endpoint,
     * or the peer is reported through fail_cb.
     * Blocks: no. Upcalls: none (a packet to oneself is delivered by a
     * later progress()). In upcall: yes. Buffers: copied or on the wire
     * when it returns; the caller owns them again. Failure: nothing was
     * sent: TMX_ERR_AGAIN when the transport is full (progress and
     * retry), TMX_ERR_INVALID (logged) for an empty or too large packet,
     * TMX_ERR_PEER_FAILED for a peer known gone, TMX_ERR_NOMEM. */
    tmx_status_t (*send)(tl_ep_t *ep, const struct iovec *iov, int iovcnt);

    /* Reads len bytes at remote address raddr (registered under rkey) of
     * the process behind ep into dst, by mechanism kind (one bit of
     * get_kinds). A read the transport accepted is finished by it even if
     * its mechanism fails on the way (shm: process_vm_readv refused
     * mid-read goes on through cells).
     * Blocks: a one-sided copy (DIRECT, SHARED) runs in the call, for as
     * long as copying len bytes takes; SHARED also waits for the owner to
     * finish the chunk it took (one 64 KiB copy). COPY does not block.
     * Upcalls: mem_check only (self checks the key in the call); done()
     * runs from a later progress(), never inside get(). In upcall: yes
     * (a rendezvous read starts in recv_cb).
     * Buffers: dst belongs to the transport until the read completes;
     * op is the caller's and must live until done() runs.
     * Result: TMX_OK: done now, no done(); TMX_INPROGRESS: done() follows
     * exactly once, with the status; an error (TMX_ERR_INVALID, logged,
     * for a kind not offered; TMX_ERR_PEER_FAILED; TMX_ERR_NOMEM): no data
     * was placed and no done() follows. */
    tmx_status_t (*get)(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                        unsigned kind, tl_get_op_t *op);

    /* Writes len bytes at src into the memory at raddr of the process
     * behind ep, which lent it under rkey, by mechanism kind (one bit of
     * put_kinds); lkey is the key src is lent under here (udp checks it
     * before every resending, as for a read's data).
     * Blocks: DIRECT copies in the call, for as long as copying len bytes
     * takes. COPY does not block. Upcalls: put_data (self places the
     * bytes in the call); put_done from a later progress(), never inside
     * put(). In upcall: yes. Buffers: src stays the transport's until
     * put_done, or, for COPY, until the target acknowledges (the layer
     * above holds it until the target answers).
     * Result: TMX_OK: every byte is in place, no put_done; TMX_INPROGRESS:
     * put_done follows exactly once, unless the interface closes or ep
     * fails first (then never); an error (TMX_ERR_INVALID, logged, for a
     * kind not offered; TMX_ERR_UNSUPPORTED: the kernel refused the copy,
     * and the kind is no longer offered; TMX_ERR_PEER_FAILED; TMX_ERR_IO;
     * TMX_ERR_NOMEM): the write did not complete and bytes may or may not
     * have landed. */
    tmx_status_t (*put)(tl_ep_t *ep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                        uint64_t lkey, unsigned kind);
    /* Handles what arrived and what is due: delivers packets, serves and
     * completes reads, retransmits, reports dead peers. Returns the
     * number of events (0: nothing happened).
     * Blocks: no; a pass is bounded (shm takes at most 64 cells, self the
     * packets queued before it started, udp at most four batches of
     * datagrams), so that callbacks which send cannot keep it running. Upcalls: all of them. In upcall: no.
     * Failure: none to report; what fails goes to fail_cb or done(). */
    int (*progress)(tl_iface_t *iface);

    /* Blocks until something may have arrived, or timeout_us passes (< 0:
     * no limit). May return early; the caller progresses and decides.
     * Called without the caller's serialisation, concurrently with any
     * operation (see "Threads" above): it reads only fixed or atomic
     * fields, and what it learns (woken, how long to sleep) passes to and
     * from progress() through atomic fields.
     * Blocks: up to timeout_us. Upcalls: none. In upcall: no. */
    void (*wait)(tl_iface_t *iface, int64_t timeout_us);

    /* One sleep over several transports. A thread can sleep in one
     * transport's wait() only, so with two that sleep (shm and udp) it
     * would take turns, and what arrives through one would wait out the
     * other's turn. Instead the core arms every such transport and sleeps
     * in one poll() over the descriptors they give. wait_arm tells the
     * transport's senders that a thread is about to sleep (so that they
     * make pfd->fd readable when they bring something), then looks
     * whether something is there already; it fills pfd (fd and events)
     * and *cap_us, the longest the sleep may last for the transport's own
     * timers (< 0: no limit). Returns TL_WAIT_ARMED, TL_WAIT_READY
     * (something is there: the core does not sleep) or TL_WAIT_NONE (the
     * transport has no such descriptor: the core takes turns in wait()).
     * After ARMED or READY the core calls wait_done once, with pfd as
     * poll() left it (revents 0 if it did not sleep), which ends the
     * announcement and takes in what woke it.
     * Same rules as wait(): unserialised, fixed or atomic fields only.
     * Blocks: no. Upcalls: none. In upcall: no. */
    int (*wait_arm)(tl_iface_t *iface, struct pollfd *pfd, int64_t *cap_us);
    void (*wait_done)(tl_iface_t *iface, const struct pollfd *pfd);

    /* Looks for dead peers (a process gone, a closed context, a port the
     * kernel refuses, a silence longer than the peer timeout) and reports
     * them through fail_cb. Called from the wait loop every few
     * milliseconds, not on the fast path.
     * Blocks: no. Upcalls: fail_cb only. In upcall: no. */
    void (*check_peers)(tl_iface_t *iface);

    /* Optional (NULL: never). Whether the peer said it is past its soft
     * bound of unexpected memory (rx_pressure), as far as we know: its
     * sends with payload should be rendezvous. Blocks: no. Upcalls: none.
     * In upcall: yes. */
    int (*peer_pressed)(tl_ep_t *ep);

    /* Optional (NULL: every address passes). Whether addr, an address
     * section of this transport that a packet from the process uuid
     * carried (its HELLO), may be that process's: a transport that can
     * tell where uuid's packets came from refuses an address naming
     * another place (udp: another host or port than its datagrams'), so
     * that no packet can make us send to a third party. TMX_OK, or
     * TMX_ERR_INVALID (logged). Blocks: no. Upcalls: none. In upcall:
     * yes (that is where it is asked, during the packet's recv_cb). */
    tmx_status_t (*sender_check)(tl_iface_t *iface, uint64_t uuid, const void *addr, size_t len);

    /* Optional (NULL: nothing to publish, or published otherwise). Told
     * when rx_pressure changes, for a transport that publishes it to its
     * senders through shared state. Blocks: no. Upcalls: none. */
    void (*pressure_changed)(tl_iface_t *iface);

    /* Optional, all five or none (NULL: no receive offers). Claim words
     * for receive offers (proto.c, RTR): the receiver opens one in its own
     * interface's shared state when it offers a buffer to a sender, and
     * the buffer's one copy is taken with it, by a compare-and-swap that
     * only one taker wins: by the sender before it writes (offer_take,
     * through its endpoint to the receiver), or by the receiver before it
     * reads (offer_take_own), whichever comes first, so that the side
     * that is idle copies. The receiver closes it when the receive ends
     * or the offer does; no take succeeds after that. token names the
     * word and its generation (a stale token takes nothing).
     * offer_open: TMX_OK, or TMX_ERR_AGAIN when every word is open.
     * offer_take, offer_take_own: 1 if this take won. Blocks: no.
     * Upcalls: none. In upcall: yes. */
    tmx_status_t (*offer_open)(tl_iface_t *iface, uint64_t *token);
    int (*offer_take_own)(tl_iface_t *iface, uint64_t token);
    int (*offer_take)(tl_ep_t *ep, uint64_t token);
    void (*offer_close)(tl_iface_t *iface, uint64_t token);
    /* Whether the receiver's word token is still open (a sender's look,
     * taking nothing). */
    int (*offer_live)(tl_ep_t *ep, uint64_t token);

    /* Optional (NULL: nothing to do). Removes what processes of this
     * transport that all died left on the host (shared files, segments),
     * of the job job_key only (0: of any job); what a live process holds
     * stays. Returns the number of entries removed. Called with no
     * interface open, by tmx_host_sweep().
     * Blocks: no (skips what is locked now). Upcalls: none. */
    int (*sweep)(uint64_t job_key);
};

extern const tl_ops_t tl_self_ops;
extern const tl_ops_t tl_shm_ops;
extern const tl_ops_t tl_udp_ops;

/* Stops every upcall of iface: from now on packets are dropped, failed
 * peers ignored and remote reads refused. The first step of teardown,
 * before any endpoint or the interface closes, so that a transport still
 * progressing while it closes never calls into state being freed. */
void tl_iface_mute(tl_iface_t *iface);

enum { TL_WAIT_NONE = 0, TL_WAIT_ARMED = 1, TL_WAIT_READY = 2 };

/* Fallbacks for transports without the operation. */
void tl_no_wait(tl_iface_t *iface, int64_t timeout_us);
int tl_no_wait_arm(tl_iface_t *iface, struct pollfd *pfd, int64_t *cap_us);
void tl_no_wait_done(tl_iface_t *iface, const struct pollfd *pfd);
void tl_no_check_peers(tl_iface_t *iface);
tmx_status_t tl_always_reachable(tl_iface_t *iface, const void *addr, size_t len);

/* Writes an address section of n bytes for tl_ops_t.address(). */
tmx_status_t tl_address_put(void *buf, size_t *len, const void *addr, size_t n);

/* This host's identity: boot id, host name and network namespace, so that
 * test hosts made of network namespaces count as different hosts. */
uint64_t tl_host_id(void);

/* The names of all transports built in, NULL-terminated. */
extern const char *const tl_names[];

/* For transports without remote reads. */
tmx_status_t tl_no_get(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                       unsigned kind, tl_get_op_t *op);

/* Sets iface's put_data and put_done from params (a NULL one refuses
 * every write, or ignores its end). */
void tl_put_cbs_set(tl_iface_t *iface, const tl_iface_params_t *params);

/* For transports without remote writes. */
tmx_status_t tl_no_put(tl_ep_t *ep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                       uint64_t lkey, unsigned kind);

/* The same as tl_get_kind_check for a write (tl_ops_t.put). */
tmx_status_t tl_put_kind_check(const tl_iface_t *iface, unsigned kind);

/* TMX_OK if kind is one mechanism iface offers; else logs and says
 * TMX_ERR_INVALID (for tl_ops_t.get). */
tmx_status_t tl_get_kind_check(const tl_iface_t *iface, unsigned kind);

/* The transport called name, or NULL. */
const tl_ops_t *tl_find(const char *name);

/* Every transport's sweep(job_key); the number of entries removed. */
int tl_sweep(uint64_t job_key);

#endif
