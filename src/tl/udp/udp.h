/* Internals of the udp transport, shared by its files. */
#ifndef TMX_TL_UDP_H
#define TMX_TL_UDP_H

#include <endian.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <stdint.h>

#include "tl/tl.h"
#include "tl/tl_emu.h"
#include "tl/udp/udp_wire.h"
#include "util/idmap.h"
#include "util/list.h"
#include "util/pool.h"
#include "util/wheel.h"

#define UDP_PRIO_MTU 512         /* priority channel datagrams, bytes */
#define UDP_MAX_DGRAM 65507      /* IPv4 UDP payload limit */
#define UDP_RECV_BATCH 32        /* datagrams per recvmmsg */
#define UDP_GSO_MAX 64           /* datagrams per GSO send (the kernel's
                                    limit) and per sendmmsg */
#define UDP_CLOCK_POLL_EVERY 8   /* empty polls per clock reading */
#define UDP_TICK_US 50           /* timer wheel slot: timers fire this late at most */
#define UDP_MAX_PACKET (256 * 1024) /* upper-layer packet, before fragments */
#define UDP_OOO_MAX_BYTES (256u << 20) /* memory early segments hold, all peers */

enum { UDP_SEG_MALLOC, UDP_SEG_POOL, UDP_SEG_HDR_POOL };

/* A segment sent and not yet acknowledged: the datagram image, kept for
 * retransmission. */
typedef struct udp_seg {
    uint64_t sent_us;            /* the latest sending */
    uint64_t first_sent_us;
    uint32_t seq;
    uint32_t len;                /* datagram bytes */
    uint32_t sacked;             /* the receiver holds it (selective ACK) */
    uint32_t pooled;             /* UDP_SEG_MALLOC, _POOL or _HDR_POOL */
    uint32_t resent;             /* sent more than once: no RTT sample (Karn) */
    const unsigned char *ext;    /* the payload when it is not in buf: a
                                    read served straight from the owner's
                                    memory (udp_send_segs) */
    uint64_t ext_key;            /* that memory's key, checked before each
                                    sending (seg_stamp) */
    uint32_t lane;               /* 0, or 1 + the lane it goes on, every
                                    time (udp_node.c, lanes) */
    _Alignas(8) unsigned char buf[]; /* a udp_hdr_t is read in place */
} udp_seg_t;

/* Slots of a flow's first window (a power of two), held in the flow
 * itself: a window grows, doubling, up to TMX_UDP_WINDOW as the segments
 * in flight need it. */
#define UDP_WIN_FIRST 8u

typedef struct udp_tx {
    uint32_t next_seq;           /* the next segment's number */
    uint32_t una;                /* oldest unacknowledged */
    udp_seg_t **win;             /* in flight, by udp_tx_slot(seq): win0, or
                                    an array of its own once it grew */
    uint32_t win_mask;           /* win's slots - 1: it grows from UDP_WIN_FIRST
                                    to the window as the flight does */
    uint32_t dup_acks;
    uint64_t rto_us;             /* current retransmit timeout, backs off */
    uint64_t last_progress_us;   /* when una last moved, for failure */
    uint32_t rack_seq;           /* the highest segment known delivered */
    uint64_t rack_us;            /* the latest first sending of a segment
                                    known delivered (RACK, see udp_rel.c) */
    int probed;                  /* the tail probe of this flight went out */
    util_timer_t timer;          /* retransmit */
    struct udp_iface *ui;        /* for the timer's callback */
    struct udp_ep *ep;
    int ch;
    udp_seg_t *win0[UDP_WIN_FIRST]; /* the first window */
} udp_tx_t;

typedef struct udp_rx {
    uint32_t expected;           /* the next segment to deliver */
    udp_seg_t **ooo;             /* arrived early, by udp_rx_slot(seq) */
    uint32_t ooo_mask;           /* ooo's slots - 1: more than the furthest
                                    kept is ahead (grows as win does) */
    uint32_t unacked;            /* delivered since our last ACK */
    uint32_t n_ooo;              /* segments held in ooo */
    uint32_t highest;            /* highest segment number seen */
    int ack_now;                 /* an ACK must go out at once */
    unsigned char *reasm;        /* a packet being reassembled */
    size_t reasm_len;
    size_t reasm_total;
    size_t reasm_charged;        /* of it, counted in udp_iface_t.reasm_bytes
                                    (a stranger's) */
} udp_rx_t;

/* A remote address: with a port per node, every process of a remote node
 * is at it, and this is the node's state (seed 002: state per remote
 * node, not per remote process): the address, the path's round-trip
 * estimates, and a socket connected to it when one could be had. */
typedef struct udp_conn {
    struct sockaddr_in sa;       /* the address */
    uint64_t key;                /* sa as a key of udp_sock_t.conns */
    uint32_t id;                 /* its slot in udp_sock_t.conn_tab */
    int fd;                      /* a socket connected to sa, or -1 */
    uint32_t refs;               /* endpoints at this address */
    uint32_t users;              /* of those, the ones that send through fd */
    int errq;                    /* fd's error queue may name a refusal */
    uint32_t srtt_us, rttvar_us; /* smoothed round trip and its deviation,
                                    both channels, every process there;
                                    srtt 0 until a sample */
} udp_conn_t;

/* What a peer's reliable exchange needs while it is under way (seed 001)
 * and not when it is over: made by the first segment either way, or by a
 * keepalive, a refusal or a bye (udp_flow), freed once nothing is in
 * flight, early, owed or pending (udp_flow_settle). An idle peer holds
 * only its udp_ep_t (seed 002: what stays per remote process is a few
 * words of sequence state). */
typedef struct udp_flow {
    struct udp_ep *ep;
    udp_tx_t tx[UDP_N_CH];
    udp_rx_t rx[UDP_N_CH];
    util_dlist_t ack_link;       /* in udp_iface_t.acks while an ACK is due */
    util_dlist_t link;           /* in udp_iface_t.flows (udp_flow_walk) */
    int ack_queued;
    uint32_t probe;              /* when the peer was last probed while
                                    silent, if probed (udp_live_stamp) */
    uint64_t ack_due_us;
    uint64_t refused_us;         /* when the last refusal was counted */
    uint32_t bye_seq[UDP_N_CH];  /* the bye's next_seq per channel */
    uint64_t bye_us;             /* when the bye came */
    uint64_t rx_data_us;         /* when the data channel last brought one */
    uint32_t rx_data_seq;        /* and its sequence number */
    uint8_t probed;              /* probe is set */
    uint8_t n_refused;           /* refusals in a row, nothing heard between */
    uint8_t refused;             /* a checked refusal to act on (udp_live.c) */
    uint8_t bye;                 /* the peer said bye: it sends no more */
    uint64_t stall_sent_us;      /* when we last reported a stall to the peer
                                    (for any read or write that waits) */
    uint64_t stall_handled_us;   /* when we last acted on the peer's report */
    uint64_t put_rx_us;          /* when the current write's first data came */
} udp_flow_t;

/* A peer context: made on first contact either way, kept until the
 * interface closes. 48 bytes on 64-bit targets: one per remote process
 * (seed 002), so what only an exchange under way or a refusal needs is
 * in the flow, and its node's state is named by a number. */
typedef struct udp_ep {
    tl_ep_t super;               /* super.own: when the peer was last heard
                                    (udp_ep_heard, udp_ep_silence) */
    union {
        udp_flow_t *flow;        /* has_flow: the exchange under way */
        struct {                 /* !has_flow: the flow's sequence numbers */
            uint32_t next_seq[UDP_N_CH]; /* the next segment's number */
            uint32_t expected[UDP_N_CH]; /* the next segment due */
        } idle;
    };
    uint32_t conn;               /* its address, shared with the endpoints of
                                    the same node: udp_ep_conn */
    uint16_t index;              /* its node index: our datagrams' dst_index */
    uint16_t lane : 5;           /* 1 + the lane its bulk data takes, 0
                                    before its first (udp_node.c, lanes) */
    uint16_t has_flow : 1;
    uint16_t probed : 1;         /* a keepalive went to it once (udp_live.c) */
    uint16_t connected : 1;      /* the core made it (not just a receive) */
    uint16_t sock : 1;           /* it sends through conn->fd */
    uint16_t failed : 1;
    uint16_t rx_data_seen : 1;   /* a data segment was delivered or kept */
    uint16_t rx_left : 1;        /* its data waits with it: we were at the
                                    bound (udp_rel.c: rx_leave) */
    uint16_t rx_refill : 1;      /* and is being resent: later segments
                                    are not kept early until it is in */
    uint16_t put_rx : 1;         /* it writes into our memory: written data
                                    came and no packet since (its WDONE) */
    uint16_t pressed : 1;        /* its last datagram said it is past its soft
                                    bound (UDP_FLAG_PRESSURE) */
    uint16_t listed : 1;         /* in udp_iface_t.ep_map: the layer above
                                    does not find it for us (udp_ep_find) */
} udp_ep_t;
_Static_assert(sizeof(void *) != 8 || sizeof(udp_ep_t) == 40,
               "an endpoint is 40 bytes on 64-bit targets: one per remote process");

typedef struct udp_faults {
    double drop, dup, reorder, corrupt;
    unsigned char *held;         /* a datagram held back for reordering */
    size_t held_len;
    struct udp_ep *held_ep;
    uint64_t rng;
    uint64_t dropped, duplicated, reordered, corrupted;
} udp_faults_t;

/* The settings as given at open, and what follows from them. Fixed
 * once the interface is open. */
typedef struct udp_cfg {
    tl_udp_settings_t set;
    uint32_t window;             /* a power of two */
    uint32_t mtu;                /* data channel datagram payload bytes */
    uint64_t ack_delay_us;
    uint64_t rto_us;
    uint64_t peer_timeout_us;
    uint32_t conn_max;           /* connected sockets (remote addresses), at most */
} udp_cfg_t;

/* Socket buffers asked for (SO_SNDBUFFORCE/RCVBUFFORCE as root). */
#define UDP_SOCKBUF (8 << 20)

/* Lanes for bulk data between two nodes, at most (TMX_UDP_LANES). */
#define UDP_LANES_MAX 16
_Static_assert(UDP_LANES_MAX < 32, "udp_ep_t.lane holds 1 + a lane in 5 bits");

/* The sockets and what reading them needs. */
typedef struct udp_sock {
    int fd;                      /* the interface's: every peer's datagrams
                                    arrive here (udp_wait polls it unlocked) */
    struct sockaddr_in self_sa;  /* its address, the one published */
    uint16_t index;              /* our node index: datagrams naming
                                    another are not ours (udp_node.c) */
    uint32_t n_conn;             /* connected sockets (udp_conn_t) */
    util_idmap_t conns;          /* udp_conn_t by remote address */
    udp_conn_t **conn_tab;       /* the same by id (udp_ep_t.conn); a free
                                    slot holds the next free one's id
                                    (udp_sock.c) */
    uint32_t conn_slots;         /* conn_tab's slots */
    uint32_t conn_free;          /* the first free slot (UINT32_MAX >> 1: none) */
    unsigned char *rbufs;        /* UDP_RECV_BATCH receive buffers */
    /* recvmmsg's arguments, built once: a receive resets only what the
     * kernel wrote into the messages it filled. */
    struct mmsghdr rmsgs[UDP_RECV_BATCH];
    struct iovec riov[UDP_RECV_BATCH];
    struct sockaddr_in rfrom[UDP_RECV_BATCH];
    char rctl[UDP_RECV_BATCH][CMSG_SPACE(sizeof(int))];
    unsigned recv_vlen;          /* datagrams asked of the next read */
    unsigned recv_streak;        /* single reads in a row that found one */
    int gso;                     /* the kernel takes UDP_SEGMENT sends */
    int gro_ok;                  /* and UDP_GRO: not refused yet */
    int gro_on;                  /* GRO is on (udp_gro_set) */
    uint64_t gro_used_us;        /* when a read last wanted it */
    int errq;                    /* the error queue may name refusals */
    /* lanes (udp_node.c): sockets bound to the node's lane ports, for bulk data */
    uint32_t lanes;              /* lanes open (0: none) */
    int lane_fd[UDP_LANES_MAX];
    uint32_t lane_next;          /* the lane the next peer is given */
    int tx_lane;                 /* the lane of the segments being sent, or -1 */
} udp_sock_t;

/* One port per node (udp_node.c). */
#define UDP_NODE_MAX 1024        /* processes of a job that share a node's port */
struct udp_node_table;
typedef struct udp_node {
    struct udp_node_table *tab;  /* the node's table, mapped; NULL: a port
                                    of our own */
    int fd;                      /* its file, which flock locks */
    char path[80];
    uint32_t gen;                /* the table's generation we last acted on */
    int recheck;                 /* a datagram for another index came */
    uint64_t checked_us;         /* when we last checked the node's processes */
    uint64_t nonce, probes;      /* our current slot probe */
    int hits, hit_slot;          /* and what came back of it */
} udp_node_t;

/* Counts, for the log at close and for tests. */
typedef struct udp_stats {
    uint64_t dropped;            /* datagrams that did not parse or belong */
    uint64_t retransmits;        /* segments sent again, for any reason */
    uint64_t timeouts;           /* retransmit timers that fired */
    uint64_t probes;             /* tail loss probes sent */
    uint64_t refusals_bad;       /* refusals quoting no datagram of ours */
    uint64_t stalls_sent;        /* stall reports sent */
    uint64_t segs_sent;          /* new segments sent */
    uint64_t dgrams_in;          /* datagrams received */
    uint64_t misrouted;          /* of the dropped: for another node index */
    uint64_t forged;             /* of the dropped: naming a sender on another host */
    uint64_t handed_on;          /* of those: sent on to their process */
    uint64_t lane_segs;          /* segments sent on a lane, resent too */
    uint64_t nobody_sent;        /* NOBODY notices sent: datagrams for a
                                    context that is not here */
} udp_stats_t;

typedef struct udp_iface {
    tl_iface_t super;
    udp_cfg_t cfg;
    udp_sock_t sock;
    udp_node_t node;
    int in_job;                  /* tl_iface_params_t.in_job */
    udp_stats_t stats;
    udp_faults_t faults;         /* injected, for tests (TMX_UDP_FAULTS) */
    uint64_t uuid;
    uint64_t job_key;
    /* peers */
    util_idmap_t ep_map;         /* uuid -> udp_ep_t: the endpoints the
                                    layer above does not find for us
                                    (tl_held_t): strangers, processes met
                                    before it made their endpoint, those it
                                    let go; the others are found through it
                                    (udp_ep_find, udp_ep_next) */
    util_pool_t ep_pool;         /* the endpoints, 16 to a chunk: no
                                    allocator header per remote process */
    uint32_t n_eps;
    uint32_t n_flows;            /* endpoints with a flow (udp_flow_t) */
    util_dlist_t acks;           /* endpoints owing an ACK */
    util_dlist_t flows;          /* every flow: what a look at the peers
                                    with an exchange under way walks, not
                                    every endpoint (udp_flow_walk) */
    struct udp_flow *walk_next;  /* the flow a walk takes next */
    int refusals;                /* some endpoint was refused */
    int byes;                    /* peers that said bye with data missing */
    int closing;                 /* iface_close lingers: reads are gone */
    /* transmit and receive */
    util_wheel_t wheel;          /* retransmit timers */
    util_pool_t segs;            /* segment buffers up to seg_cap bytes */
    util_pool_t hsegs;           /* segments of a header alone */
    uint32_t seg_cap;
    unsigned char *gather;       /* a datagram sent in pieces, gathered for
                                    the fault injector (udp_datagram_sendv) */
    uint64_t ooo_bytes;          /* memory early segments hold: their
                                    buffers and the arrays they are in */
    uint64_t reasm_bytes;        /* held by strangers' packets being put together */
    uint64_t reasm_full;         /* first segments refused for want of room (log count) */
    uint64_t reasm_failed;       /* packets whose pieces did not fit (log count) */
    uint32_t n_left;             /* peers whose data we left (rx_left) */
    uint32_t n_put_rx;           /* peers writing into our memory (put_rx) */
    uint64_t rx_now_us;          /* the clock when the current batch came */
    uint64_t misrouted_log_us;   /* when a misrouted datagram was last logged */
    uint64_t forged_log_us;      /* when a forged one was */
    uint64_t put_refused;        /* written data refused, read data and read */
    uint64_t get_data_dropped;   /* requests dropped: counts for the log */
    uint64_t get_req_dropped;    /* (util_log_sparse) */
    uint64_t no_room;            /* datagrams of new peers past UDP_MAX_EPS */
    uint64_t evicted;            /* strangers forgotten to make room */
    uint64_t addr_refused;       /* addresses naming another place than their
                                    sender's datagrams (log count) */
    uint32_t evict_it;           /* where the look for a stranger stopped */
    struct udp_ep *rx_ep;        /* the endpoint whose datagram is being handled
                                    (udp_dgram_input), which an upcall must
                                    not free */
    tl_emu_t emu;                /* remote reads (udp_get.c) */
    /* polling and waiting */
    uint32_t hot_polls;          /* polls left that look at the socket */
    uint32_t clock_polls;        /* empty polls, to read the clock every
                                    UDP_CLOCK_POLL_EVERY of them */
    uint64_t poll_now_us;        /* the clock as a poll last read it */
    int woken;                   /* udp_wait saw the socket readable
                                    (written unlocked: atomic) */
    int slept;                   /* udp_wait returned: the poll's clock
                                    reading is stale (atomic) */
    int errq_woken;              /* udp_wait saw POLLERR (atomic) */
    int64_t wait_cap_us;         /* the longest udp_wait sleeps, set by
                                    progress (atomic: wait runs unlocked) */
} udp_iface_t;

/* What udp_send_segs sends: a packet, or a piece of a read's data, to cut
 * into segments of one channel. */
typedef struct udp_send_desc {
    int ch;                      /* UDP_CH_PRIO or UDP_CH_DATA */
    uint16_t flags;              /* UDP_FLAG_GET_REQ, UDP_FLAG_GET_DATA or 0;
                                    FIRST and LAST are added to packets */
    uint32_t frag_id;            /* GET_DATA: the read's id */
    uint64_t offset;             /* GET_DATA: where the first byte goes */
    uint32_t aux;                /* the header's reserved word (GET_DATA:
                                    the owner's status) */
    const struct iovec *iov;     /* the bytes, in pieces (none: an empty
                                    segment, a keepalive) */
    int iovcnt;
    size_t len;                  /* the sum of the pieces */
    uint64_t rkey;               /* GET_DATA: the key the bytes are lent under */
} udp_send_desc_t;

/* One segment's header fields, as hdr_fill writes them. */
typedef struct udp_seg_desc {
    int ch;
    uint16_t flags;
    uint32_t frag_id;
    uint64_t offset;             /* GET_DATA: where; FIRST: the packet's length */
    uint32_t aux;
    size_t n;                    /* payload bytes */
} udp_seg_desc_t;

/* udp.c: the interface */
uint64_t udp_now_us(void);

/* udp_sock.c: sockets */
/* Binds the interface's socket (TMX_UDP_ADDR, see pick_local) and sets up
 * batched reads; *ifmtu: the MTU of the interface chosen. */
tmx_status_t udp_sock_open(udp_iface_t *ui, uint32_t *ifmtu);
void udp_sock_close(udp_iface_t *ui);
/* Reads what waited on the socket, one datagram or a batch, and hands it
 * to udp_buf_input. Returns the number of buffers read. */
int udp_sock_recv(udp_iface_t *ui);
/* A socket to send from, connected to ep's address and shared with the
 * endpoints at that address (at most cfg.conn_max of them; else the
 * interface's socket sends), and ep's end of it. */
void udp_sock_ep_connect(udp_iface_t *ui, udp_ep_t *ep);
void udp_sock_ep_disconnect(udp_iface_t *ui, udp_ep_t *ep);
/* The state of a remote address, made if need be, with one more
 * endpoint counted at it; NULL when out of memory. */
udp_conn_t *udp_conn_get(udp_iface_t *ui, const struct sockaddr_in *sa);
/* One endpoint less at c: freed with the last. */
void udp_conn_put(udp_iface_t *ui, udp_conn_t *c);
/* ep's address is sa from now on (the one it published); -1 when out of
 * memory (it keeps the old one). */
int udp_ep_move(udp_iface_t *ui, udp_ep_t *ep, const struct sockaddr_in *sa);
/* GRO on or off (a system call when it changes). */
void udp_gro_set(udp_iface_t *ui, int on);

/* udp_node.c: one port per node */
/* Binds fd to the node's shared port and takes a node index, if the
 * settings allow and the node's port can be shared; TMX_ERR_UNSUPPORTED
 * (the reason logged once per process) when the caller is to bind a port
 * of its own, fd left unbound or closed. */
tmx_status_t udp_node_open(udp_iface_t *ui, int fd);
/* Removes the node tables (any namespace) of job job_key (0: any job)
 * whose processes all died; returns how many (tl_ops_t.sweep). */
int udp_node_sweep(uint64_t job_key);
/* The port a job's processes share on a node (a hash of its key). */
uint16_t udp_node_port(uint64_t job_key);
/* The slot of the group the node's table gives index (-1: nobody holds
 * it, -2: its process looks for its slot), for tests and logs. */
int udp_node_slot(const udp_iface_t *ui, uint16_t index);
/* Leaves the node's port and closes the socket (a port of our own: nothing). */
void udp_node_close(udp_iface_t *ui);
/* A check of the node's processes, at most once a second (force: now,
 * after a datagram for another index, at most every 10 ms). */
void udp_node_check(udp_iface_t *ui, uint64_t now, int force);
/* From progress, for a shared port: acts on a change of the table. */
void udp_node_progress(udp_iface_t *ui, uint64_t now);
/* h (in host order but port) came for another index; dgram is the
 * datagram as it came (len bytes), rewritten in place (flags, first
 * sender, checksum) and handed on to the node's port when a process of
 * the node holds that index. */
void udp_node_misrouted(udp_iface_t *ui, const udp_hdr_t *h, const struct sockaddr_in *from,
                        unsigned char *dgram, size_t len);
/* The lanes (TMX_UDP_LANES sockets bound to the node's lane ports) are
 * opened as the node's port is joined: sock.lanes stays 0 if there are
 * none (a port of our own, a socket refused: said once). */
void udp_node_lanes_close(udp_iface_t *ui);
/* The local port of our socket for a lane, 0 if it has none (tests). */
uint16_t udp_node_lane_port(const udp_iface_t *ui, unsigned lane);
/* Tells the sender of h (in host order but port; from: where it came
 * from) that no process here holds the context and index it names: an
 * ACK flagged UDP_FLAG_NOBODY, counted by its receiver as a refusal. */
void udp_nobody_send(udp_iface_t *ui, const udp_hdr_t *h, const struct sockaddr_in *from);
/* 1 if buf is a slot probe (ours are counted), which is not a datagram. */
int udp_node_probe_input(udp_iface_t *ui, const unsigned char *buf, size_t len);

/* udp_ep.c: endpoints */
udp_ep_t *udp_ep_find(udp_iface_t *ui, uint64_t uuid);
/* The same for a datagram's sender, which leaves ep_map if the layer
 * above finds it: not while ep_map is walked. */
udp_ep_t *udp_ep_find_rx(udp_iface_t *ui, uint64_t uuid);
/* tl_ops_t.ep_unfound: ep goes into ep_map. */
tmx_status_t udp_ep_unfound(tl_ep_t *tep);
/* Every endpoint the layer above still holds goes into ep_map (the
 * interface closes). */
void udp_ep_list_all(udp_iface_t *ui);
/* A new endpoint for the context uuid at sa, node index index; NULL
 * without memory. */
udp_ep_t *udp_ep_new(udp_iface_t *ui, uint64_t uuid, const struct sockaddr_in *sa, uint16_t index);
/* Endpoints known at most: past it a new one is made only in the place
 * of a stranger (a process the layer above neither made an endpoint to
 * nor was given the address of), looked for among the next
 * UDP_EVICT_LOOK endpoints from where the last look stopped, so that
 * identities made up by whoever writes to our port cannot keep a peer
 * out. */
#define UDP_MAX_EPS 65536
#define UDP_EVICT_LOOK 64
/* Forgets one stranger, as udp_ep_free does, with what it held (pieces of
 * packets, refusals of its reads): 1 if one went. */
int udp_ep_evict_stranger(udp_iface_t *ui);
void udp_ep_free(udp_iface_t *ui, udp_ep_t *ep);
/* Declares ep failed (why: for the log) and tells the layer above. */
void udp_ep_fail(udp_iface_t *ui, udp_ep_t *ep, const char *why);
/* The same for a peer that said it closed (clean: not logged as a death). */
void udp_ep_gone(udp_iface_t *ui, udp_ep_t *ep);
/* Tells every peer we talked with that we close. */
void udp_bye_all(udp_iface_t *ui);
/* tl_ops_t operations */
tmx_status_t udp_address(tl_iface_t *iface, void *buf, size_t *len);
tmx_status_t udp_reachable(tl_iface_t *iface, const void *addr, size_t len);
tmx_status_t udp_ep_create(tl_iface_t *iface, const void *addr, size_t len, tmx_peer_t peer,
                           uint64_t uuid, tl_ep_t **out);
void udp_ep_destroy(tl_ep_t *tep);
tmx_status_t udp_sender_check(tl_iface_t *iface, uint64_t uuid, const void *addr, size_t len);

/* udp_tx.c: transmit */
/* Sends d as segments of channel d->ch, all or nothing: TMX_ERR_AGAIN
 * when the window cannot take every segment. Read data (GET_DATA, one
 * piece) is not copied: d->rkey is the key of its memory. */
tmx_status_t udp_send_segs(udp_iface_t *ui, udp_ep_t *ep, const udp_send_desc_t *d);
/* tl_ops_t.send */
tmx_status_t udp_send(tl_ep_t *tep, const struct iovec *iov, int iovcnt);
/* Sends segments again (stamped anew), batched in few system calls. */
void udp_segs_retransmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t **segs, size_t n);
void udp_seg_retransmit(udp_iface_t *ui, udp_ep_t *ep, udp_seg_t *seg);
/* Segments holding up to len datagram bytes: from the pool when they fit
 * (every segment we build does), so the data path never calls malloc. */
udp_seg_t *udp_seg_alloc(udp_iface_t *ui, size_t len);
void udp_seg_free(udp_iface_t *ui, udp_seg_t *seg);

/* udp_rx.c: receive */
/* Handles one received datagram; everything in it is checked first.
 * ui->rx_now_us is the time it arrived. */
void udp_dgram_input(udp_iface_t *ui, unsigned char *buf, size_t len, const struct sockaddr_in *from);
/* A buffer read from the socket: gro datagrams of that size coalesced by
 * the kernel (0: one datagram); udp_gro_guess finds that size from the
 * headers when the kernel's note of it was not read. */
void udp_buf_input(udp_iface_t *ui, unsigned char *buf, size_t len, size_t gro,
                   const struct sockaddr_in *from);
size_t udp_gro_guess(const unsigned char *buf, size_t len);

/* udp_rel.c: reliability */
void udp_tx_fini(udp_tx_t *tx);
void udp_tx_track(udp_iface_t *ui, udp_ep_t *ep, int ch, udp_seg_t *seg, uint64_t now);
void udp_tx_acked(udp_iface_t *ui, udp_ep_t *ep, int ch, uint32_t ack);
void udp_tx_sacked(udp_iface_t *ui, udp_ep_t *ep, const unsigned char *p, size_t len);
void udp_rx_segment(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p);
/* Drops the packets ep's segments were putting together (it failed). */
void udp_rx_reasm_drop(udp_iface_t *ui, udp_ep_t *ep);
void udp_rx_fini(udp_iface_t *ui, udp_rx_t *rx);
void udp_ack_schedule(udp_iface_t *ui, udp_ep_t *ep);
/* The layer above left its bound (rx_full clear): peers whose data was
 * left are asked to resend it now. */
void udp_rx_resume(udp_iface_t *ui);
/* A read (or a write into our memory) from ep waits for data: if none
 * came since `since` for UDP_STALL_US, tell ep, at most once per
 * UDP_STALL_US, then less often as the silence grows (an eighth of it,
 * up to a second): *reported says when it was last told for that wait, and
 * is kept by the waiter (a read's state, or the flow a write pins), as
 * the flow may come and go meanwhile. */
void udp_rx_stall_check(udp_iface_t *ui, udp_ep_t *ep, uint64_t since, uint64_t now, uint64_t *reported);
/* ep reported a stall after segment last: resend what it cannot have
 * received. */
void udp_tx_stalled(udp_iface_t *ui, udp_ep_t *ep, uint32_t last);
int udp_ack_flush(udp_iface_t *ui, uint64_t now);
/* Tells ep that this context closes (an ACK with UDP_FLAG_BYE). */
void udp_bye_send(udp_iface_t *ui, udp_ep_t *ep);
void udp_datagram_send(udp_iface_t *ui, udp_ep_t *ep, unsigned char *buf, size_t len);
/* The same with the datagram's len bytes in n pieces (gathered into one
 * buffer for the fault injector). */
void udp_datagram_sendv(udp_iface_t *ui, udp_ep_t *ep, const struct iovec *iov, int n, size_t len);

/* udp_live.c: peer liveness (keepalives, refusals, the silence limit) */
/* IP_RECVERR on the shared socket, so that refusals name their peer. */
void udp_live_socket(udp_iface_t *ui);
/* A send or read on fd (to ep, or NULL) failed with err: a refusal is
 * noted, and acted on by the next progress. */
void udp_live_send_error(udp_iface_t *ui, udp_ep_t *ep, int fd, int err);
/* Fails the peers whose port was refused. Called from progress. */
void udp_live_progress(udp_iface_t *ui);
/* Probes silent peers and reads refusals (check_peers). */
void udp_live_check(udp_iface_t *ui, uint64_t now);
/* IP_RECVERR on a socket connected to a peer: its refusals quote the
 * datagram refused, which is checked before it counts. */
void udp_live_ep_socket(int fd);
/* The peer was heard from: refusals counted so far were not its death. */
void udp_live_heard(udp_ep_t *ep);
/* A bye came naming next_seq of each channel: a clean exit once all below
 * arrived (now or later), a failure if it is still missing later. */
void udp_live_bye(udp_iface_t *ui, udp_ep_t *ep, const uint32_t next_seq[UDP_N_CH]);
/* After a segment arrived from a peer that said bye. */
void udp_live_bye_check(udp_iface_t *ui, udp_ep_t *ep);
/* The timeout before backoff (udp_rel.c). */
uint64_t udp_rto_base(const udp_iface_t *ui, const udp_ep_t *ep);
/* A NOBODY notice came: no process holds the index of peer uuid. Counted
 * as a refusal would be. */
void udp_live_nobody(udp_iface_t *ui, uint64_t uuid);
/* How long between probes of a peer silent for silence_us. */
uint64_t udp_probe_interval(uint64_t silence_us);

/* udp_get.c: remote reads (tl_emu.h) */
void udp_get_init(udp_iface_t *ui);
tmx_status_t udp_put(tl_ep_t *ep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                     uint64_t lkey, unsigned kind);
void udp_put_data_arrive(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h, const unsigned char *p);
/* A write from ep into our memory is over (its next packet came, or it
 * failed): no more stall reports for it. */
void udp_put_rx_end(udp_iface_t *ui, udp_ep_t *ep);
/* Stall reports to the peers writing into our memory (udp_rx_stall_check,
 * as a read's reader sends them). */
void udp_put_rx_check(udp_iface_t *ui, uint64_t now);
tmx_status_t udp_get(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                     unsigned kind, tl_get_op_t *op);
void udp_get_req_arrive(udp_iface_t *ui, udp_ep_t *ep, const unsigned char *p, size_t len);
void udp_get_data_arrive(udp_iface_t *ui, udp_ep_t *ep, const udp_hdr_t *h,
                         const unsigned char *p);

/* udp_fault.c: fault injection */
void udp_faults_init(udp_faults_t *f, const tl_udp_faults_t *rates, uint64_t seed);
void udp_faults_fini(udp_faults_t *f);
/* ep goes: a datagram held back for it is dropped (lost, as the injector
 * may lose any). */
void udp_faults_forget(udp_faults_t *f, const struct udp_ep *ep);
/* The slot of a sequence number in a window's array (a power of two no
 * larger than the window, so slots stay consistent when the 32-bit
 * numbers wrap; an array holds only numbers less than its size apart). */
static inline uint32_t udp_tx_slot(const udp_tx_t *tx, uint32_t seq)
{
    return seq & tx->win_mask;
}

static inline uint32_t udp_rx_slot(const udp_rx_t *rx, uint32_t seq)
{
    return seq & rx->ooo_mask;
}

/* A window (or early-arrival array) of this many slots or more goes back
 * to UDP_WIN_FIRST once its flight is over (or it is empty). */
#define UDP_WIN_SHRINK_AT 64u

/* Room in tx's window for n more segments in flight, growing its array
 * if needed: 0, or TMX_ERR_AGAIN when the window is full (or no memory
 * to grow it). */
tmx_status_t udp_tx_reserve(udp_iface_t *ui, udp_tx_t *tx, uint32_t n);

/* ep's flow, or NULL while it is idle. */
static inline udp_flow_t *udp_ep_flow(const udp_ep_t *ep)
{
    return ep->has_flow ? ep->flow : NULL;
}

/* The peer said bye and we wait for data it overtook (udp_live.c). */
static inline int udp_ep_bye(const udp_ep_t *ep)
{
    return ep->has_flow && ep->flow->bye;
}

/* Refusals of ep counted in a row, nothing heard between. */
static inline unsigned udp_ep_refusals(const udp_ep_t *ep)
{
    return ep->has_flow ? ep->flow->n_refused : 0;
}

/* The flow of ep, made now if it has none; NULL without memory. */
udp_flow_t *udp_flow_make(udp_iface_t *ui, udp_ep_t *ep);
static inline udp_flow_t *udp_flow(udp_iface_t *ui, udp_ep_t *ep)
{
    return __builtin_expect(ep->has_flow, 1) ? ep->flow : udp_flow_make(ui, ep);
}
/* Frees ep's flow if its exchange is over: nothing in flight, early or
 * being reassembled, no ACK owed, no refusal, bye or write pending.
 * Called where no pointer into the flow is held. */
void udp_flow_settle(udp_iface_t *ui, udp_ep_t *ep);
/* ep failed: what its flow holds for an exchange that cannot go on goes
 * (segments in flight, early segments, which count against what all
 * peers may keep, and pieces of packets), not when the interface closes;
 * the flow stays, with its refusals (why it failed) and its sequence
 * numbers. Its timers are cancelled. */
void udp_flow_empty(udp_iface_t *ui, udp_ep_t *ep);
/* Frees ep's flow whatever it holds (the endpoint goes). */
void udp_flow_free(udp_iface_t *ui, udp_ep_t *ep);

/* The next segment's number on ch, and the next segment due from the
 * peer, with or without a flow. */
static inline uint32_t udp_ep_next_seq(const udp_ep_t *ep, int ch)
{
    return ep->has_flow ? ep->flow->tx[ch].next_seq : ep->idle.next_seq[ch];
}

static inline uint32_t udp_ep_expected(const udp_ep_t *ep, int ch)
{
    return ep->has_flow ? ep->flow->rx[ch].expected : ep->idle.expected[ch];
}

static inline void udp_hdr_fill_acks(const udp_ep_t *ep, udp_hdr_t *h)
{
    for (int ch = 0; ch < UDP_N_CH; ch++)
        h->ack[ch] = htole32(udp_ep_expected(ep, ch));
}

/* ep's address and its state: its node's, with a port per node. */
static inline udp_conn_t *udp_ep_conn(const udp_iface_t *ui, const udp_ep_t *ep)
{
    return ui->sock.conn_tab[ep->conn];
}

/* Where a datagram to ep goes: through its own connected socket when it
 * has one (no address to give), else the interface's with its address. */
static inline int udp_ep_dest(const udp_iface_t *ui, const udp_ep_t *ep, const struct sockaddr_in **sa)
{
    if (__builtin_expect(ui->sock.tx_lane >= 0, 0)) { /* bulk data: the lane's socket, unconnected */
        *sa = &udp_ep_conn(ui, ep)->sa;
        return ui->sock.lane_fd[ui->sock.tx_lane];
    }
    if (ep->sock) {
        *sa = NULL;
        return udp_ep_conn(ui, ep)->fd;
    }
    *sa = &udp_ep_conn(ui, ep)->sa;
    return ui->sock.fd;
}

/* Liveness times: 32 bits in units of 1024 us, so ages are exact to a
 * unit up to 50 days and wrap beyond. A stamp up to UDP_LIVE_AHEAD units
 * in the future (a datagram's arrival time, read after the clock of the
 * caller) has age 0. */
#define UDP_LIVE_SHIFT 10
#define UDP_LIVE_AHEAD 1024u /* about a second */
static inline uint32_t udp_live_stamp(uint64_t us)
{
    return (uint32_t)(us >> UDP_LIVE_SHIFT);
}

static inline uint64_t udp_live_age(uint64_t now_us, uint32_t stamp)
{
    uint32_t d = udp_live_stamp(now_us) - stamp;

    return d > UINT32_MAX - UDP_LIVE_AHEAD ? 0 : (uint64_t)d << UDP_LIVE_SHIFT;
}

/* ep's peer was heard at time us (a stamp in tl_ep_t's own word). */
static inline void udp_ep_heard(udp_ep_t *ep, uint64_t us)
{
    ep->super.own = udp_live_stamp(us);
}

/* How long ep's peer has been silent at now_us. */
static inline uint64_t udp_ep_silence(const udp_ep_t *ep, uint64_t now_us)
{
    return udp_live_age(now_us, ep->super.own);
}

/* Every endpoint, one at a time: for (it = 0; (ep = udp_ep_next(ui,
 * &it)) != NULL;): those the layer above holds and finds for us, then
 * ep_map's. An endpoint made or freed meanwhile, or moved into or out of
 * ep_map, may be missed or met twice (util_idmap_next). A walk takes a
 * step per number the layer above holds: what looks only at the peers
 * with an exchange under way walks the flows instead (udp_flow_walk). */
#define UDP_IT_MAP 0x80000000u
static inline udp_ep_t *udp_ep_next(udp_iface_t *ui, uint32_t *it)
{
    uint32_t i;
    udp_ep_t *ep;

    if (!(*it & UDP_IT_MAP)) {
        while (ui->super.held != NULL &&
               (ep = (udp_ep_t *)ui->super.held->next(ui->super.recv_arg, &ui->super, it)) != NULL) {
            if (!ep->listed)
                return ep;
        }
        *it = UDP_IT_MAP;
    }
    i = *it & ~UDP_IT_MAP;
    ep = util_idmap_next(&ui->ep_map, &i);
    *it = i | UDP_IT_MAP;
    return ep;
}

/* Every flow, one at a time: for (fl = udp_flow_walk(ui, NULL); fl !=
 * NULL; fl = udp_flow_walk(ui, fl)). A step may free any flow, its own
 * included (udp_flow_free moves the walk on); a flow made meanwhile may
 * be met or not. Walks do not nest. */
static inline udp_flow_t *udp_flow_at(udp_iface_t *ui, util_dlist_t *pos)
{
    return pos == &ui->flows ? NULL : util_container_of(pos, udp_flow_t, link);
}

static inline udp_flow_t *udp_flow_walk(udp_iface_t *ui, const udp_flow_t *prev)
{
    udp_flow_t *fl = prev == NULL ? udp_flow_at(ui, ui->flows.next) : ui->walk_next;

    ui->walk_next = fl == NULL ? NULL : udp_flow_at(ui, fl->link.next);
    return fl;
}

/* The connected socket ep sends through, or -1 (the interface's). */
static inline int udp_ep_fd(const udp_iface_t *ui, const udp_ep_t *ep)
{
    return ep->sock ? udp_ep_conn(ui, ep)->fd : -1;
}

static inline int udp_faults_active(const udp_faults_t *f)
{
    return f->drop > 0 || f->dup > 0 || f->reorder > 0 || f->corrupt > 0;
}

#endif
