/*
 * Internals of the tmx libfabric provider: a thin adapter from libfabric's
 * tagged and message API onto include/tmx.h. One tmx context per endpoint;
 * an endpoint's tmx peer i is entry i of the address vector bound to it, so
 * fi_addr_t values are tmx peer numbers. Completions flow from the context's
 * queue into the libfabric CQs the endpoint is bound to.
 */
#ifndef FAB_H
#define FAB_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include "tmx.h"

#define FAB_PROV_NAME "tmx"
#define FAB_FABRIC_NAME "tmx"
#define FAB_DOMAIN_NAME "tmx"
#define FAB_PROV_VERSION FI_VERSION(TMX_VERSION_MAJOR, TMX_VERSION_MINOR)
#define FAB_FI_VERSION FI_VERSION(1, 17)

/* The fi name: a length byte, then the tmx address blob with zero runs
 * folded (a zero byte followed by the run's length). Fixed at FI_NAME_MAX
 * because fi_av_insert takes packed addresses of one size and Open MPI
 * reads names into FI_NAME_MAX bytes. */
#define FAB_ADDR_LEN FI_NAME_MAX

#define FAB_INJECT_SIZE TMX_INJECT_MAX /* tmx's injected sends */
#define FAB_MAX_MSG_SIZE ((size_t)1 << 40)
#define FAB_CQ_DATA_SIZE 8
#define FAB_QUEUE_SIZE 65536        /* tx/rx depth reported; tmx queues grow */
#define FAB_DRAIN_BATCH 32          /* tmx completions taken per tmx_cq_read */
#define FAB_NS_TIMEOUT_MS 10000     /* fi_av_insert of an IPv4 name waits this long */
#define FAB_NS_REFUSED_MS 2000      /* or this long once its port is refused */

/* Untagged messages are tagged FAB_MSG_BIT (bit 63, the rest 0) on every
 * endpoint. With FI_MSG and FI_TAGGED together, tagged traffic therefore
 * keeps 63 bits; without FI_MSG, all 64 bits are the app's. */
#define FAB_MSG_BIT ((uint64_t)1 << 63)
#define FAB_TAG_FORMAT_64 0xaaaaaaaaaaaaaaaaULL
#define FAB_TAG_FORMAT_63 0x5555555555555555ULL

#define FAB_CAPS (FI_TAGGED | FI_MSG | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_SOURCE | \
                  FI_LOCAL_COMM | FI_REMOTE_COMM | FI_REMOTE_CQ_DATA)
#define FAB_TX_OP_FLAGS (FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | \
                         FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE | \
                         FI_REMOTE_CQ_DATA)
#define FAB_RX_OP_FLAGS (FI_COMPLETION | FI_PEEK | FI_CLAIM | FI_DISCARD)

extern struct fi_provider fab_prov;

#define FAB_WARN(subsys, ...) FI_WARN(&fab_prov, subsys, __VA_ARGS__)

typedef struct fab_domain fab_domain_t;
typedef struct fab_ep fab_ep_t;
typedef struct fab_cq fab_cq_t;
typedef struct fab_av fab_av_t;
typedef struct fab_cntr fab_cntr_t;

typedef struct fab_fabric {
    struct fid_fabric fid;
    atomic_int refs;
} fab_fabric_t;

struct fab_domain {
    struct fid_domain fid;
    fab_fabric_t *fab;
    atomic_int refs;
    int mt;                     /* take the lock: FI_THREAD_SAFE, or a wait fd's thread */
    int ctx_mt;                 /* tmx contexts made TMX_THREAD_MULTIPLE */
    pthread_mutex_t lock;       /* guards provider state when mt */
    struct fi_info *info;
    /* Its poll sets (fab_poll.c). fi_poll holds a set's lock while it
     * drives the members under lock, so the list has a lock of its own,
     * taken before a set's and never while lock is held. */
    pthread_mutex_t poll_lock;
    struct fab_poll *polls;     /* under poll_lock */
};

typedef struct fab_av_entry {
    unsigned char name[FAB_ADDR_LEN]; /* the tmx name */
    struct sockaddr_in sa;      /* the IPv4 name inserted, if any */
    int valid;                  /* insertions of the name not yet removed */
} fab_av_entry_t;

struct fab_av {
    struct fid_av fid;
    fab_domain_t *dom;
    atomic_int refs;
    enum fi_av_type type;
    uint32_t addr_format;       /* the domain's: tmx names, sockaddr_in or strings */
    fab_av_entry_t *ent;
    size_t n, cap;
    fab_ep_t **eps;             /* bound to it (fab_eps_reserve) */
    int n_eps, cap_eps;
};

/* One completion as kept until the application reads it. */
typedef struct fab_cqe {
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
    int err;                    /* positive FI_E* code, 0 for success */
    size_t olen;                /* truncation: bytes that did not fit */
    int prov_errno;             /* the tmx status */
} fab_cqe_t;

/* A CQ's wait fd (FI_WAIT_FD): an eventfd, and a thread that, once
 * fi_trywait has armed it, sleeps in tmx_wait on the CQ's contexts and
 * writes the eventfd when a completion reaches the CQ. */
typedef struct fab_cq_waiter {
    int fd;                     /* the eventfd; -1 without FI_WAIT_FD */
    pthread_t thread;
    pthread_mutex_t lock;       /* guards armed and stop */
    pthread_cond_t cond;
    int armed, stop;
    _Atomic(tmx_context_h) busy; /* the context the thread sleeps in */
} fab_cq_waiter_t;

struct fab_cq {
    struct fid_cq fid;
    fab_domain_t *dom;
    atomic_int refs;
    enum fi_cq_format format;
    fab_cqe_t *ring;
    size_t cap, head, count;    /* cap a power of two; grows */
    fab_ep_t **eps;             /* bound to it (fab_eps_reserve) */
    int n_eps, cap_eps;
    atomic_int signaled;
    fab_cq_waiter_t w;
};

struct fab_cntr {
    struct fid_cntr fid;
    fab_domain_t *dom;
    atomic_int refs;
    atomic_uint_least64_t cnt, err;
    /* The values as fi_poll last saw them, or fi_cntr_add and the like
     * left them: fi_poll reports a change from these (fi_poll(3)). */
    atomic_uint_least64_t poll_cnt, poll_err;
    fab_ep_t **eps;             /* driven by reads and waits (fab_eps_reserve) */
    int n_eps, cap_eps;
};

/* The domain of a CQ, AV or counter; NULL for another class. */
static inline fab_domain_t *fab_fid_domain(const struct fid *f)
{
    switch (f->fclass) {
    case FI_CLASS_CQ:
        return ((const fab_cq_t *)f)->dom;
    case FI_CLASS_AV:
        return ((const fab_av_t *)f)->dom;
    case FI_CLASS_CNTR:
        return ((const fab_cntr_t *)f)->dom;
    default:
        return NULL;
    }
}

/* The tmx user context of an operation that wants no CQ entry but is
 * counted: the CQ counts its completion and drops its success. */
extern char fab_count_only;
#define FAB_COUNT_ONLY ((void *)&fab_count_only)

/* A receive in flight or a claimed message, carried as the tmx user
 * context. Sends need none: their tmx user context is the application's,
 * and the tag tells tagged from untagged. */
typedef struct fab_op {
    struct fab_op *next, *prev; /* free list, or ep->claimed */
    void *context;              /* the application's */
    tmx_message_h msg;          /* the claimed message */
    struct fab_urecv *u;        /* an untagged receive's message: its receive */
    void *buf;                  /* and where in its buffer it went */
} fab_op_t;

/* An untagged receive of an endpoint with FI_MULTI_RECV (fab_msg.c): the
 * provider keeps these in post order and hands each message, claimed from
 * tmx, to the first; a multi-receive buffer takes message after message,
 * packed, until less than the endpoint's minimum is left. */
typedef struct fab_urecv {
    struct fab_urecv *next, *prev; /* the endpoint's live receives */
    char *buf;
    size_t len, off;            /* off: the bytes its messages took */
    void *context;              /* the application's */
    unsigned inflight;          /* its messages not yet completed */
    uint8_t multi;              /* FI_MULTI_RECV */
    uint8_t quiet;              /* no completion for success (FI_SELECTIVE_COMPLETION) */
    uint8_t released;           /* it takes no more: out of the queue */
} fab_urecv_t;

/* The minimum that FI_OPT_MIN_MULTI_RECV sets, until it does. */
#define FAB_MIN_MULTI_RECV_DEFAULT 64

struct fab_ep {
    struct fid_ep fid;
    fab_domain_t *dom;
    struct fi_info *info;
    tmx_context_h tmx;
    atomic_int sleepers;        /* threads in tmx_wait on tmx, unlocked
                                   (cq_sleep): its close waits for them */
    fab_av_t *av;
    fab_cq_t *tx_cq, *rx_cq;
    fab_cntr_t *tx_cntr, *rx_cntr; /* FI_SEND and FI_RECV counters */
    fab_cntr_t *rma_cntr[4];    /* FI_READ, FI_WRITE, FI_REMOTE_READ and
                                   FI_REMOTE_WRITE counters: bound, held,
                                   never counted (no RMA) */
    int tx_selective, rx_selective;
    uint64_t tx_op_flags, rx_op_flags;
    uint64_t msg_bit;           /* FAB_MSG_BIT with FI_MSG|FI_TAGGED, else 0 */
    int enabled;
    fab_op_t claimed;           /* claimed messages, by context */
    /* With FI_MULTI_RECV: every untagged receive waits here, not in tmx */
    int urq_on;
    fab_urecv_t *urq_head;      /* the first that still takes messages */
    fab_urecv_t urq_live;       /* every live one, queued first, in post order */
    size_t min_multi_recv;      /* FI_OPT_MIN_MULTI_RECV */
    fab_op_t *free_ops;
    struct fab_op_chunk *chunks; /* every op ever allocated, freed at close */
    uint64_t caps;
    uint32_t addr_format;       /* of fi_getname and the AV */
    /* The name socket (fab_name.c), for FI_SOCKADDR_IN and FI_ADDR_STR */
    int ns_fd;                  /* -1 when the name is the tmx name */
    struct sockaddr_in ns_sa;   /* the endpoint's IPv4 name */
    unsigned char ns_blob[TMX_ADDRESS_MAX]; /* what a query is answered */
    size_t ns_blob_len;
    struct fab_ep *ns_next;     /* the process's endpoints with a name socket */
};

static inline int64_t fab_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline void fab_lock(fab_domain_t *dom)
{
    if (dom->mt)
        pthread_mutex_lock(&dom->lock);
}

static inline void fab_unlock(fab_domain_t *dom)
{
    if (dom->mt)
        pthread_mutex_unlock(&dom->lock);
}

/* Checked on every send and every receive completion. */
static inline int fab_av_valid(const fab_av_t *av, fi_addr_t addr)
{
    return av != NULL && addr < av->n && av->ent[addr].valid;
}

/* fab_stubs.c: fi_no_* operations, for dispatch that never tests NULL */
int fab_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int fab_no_control(struct fid *fid, int command, void *arg);
int fab_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context);
int fab_no_tostr(const struct fid *fid, char *buf, size_t len);
int fab_no_ops_set(struct fid *fid, const char *name, uint64_t flags, void *ops, void *context);
extern struct fi_ops_cm fab_cm_ops;
extern struct fi_ops_rma fab_no_rma_ops;
extern struct fi_ops_atomic fab_no_atomic_ops;
extern struct fi_ops_collective fab_no_coll_ops;

/* fab_info.c */
int fab_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                const struct fi_info *hints, struct fi_info **info);
int fab_info_check(const struct fi_info *info);

/* fab_prov.c */
int fab_errno(tmx_status_t st);
/* fi_cq_strerror / fi_eq_strerror: tmx's name for prov_errno, also copied
 * into buf (len bytes, NUL-terminated) when buf is given. */
const char *fab_prov_strerror(int prov_errno, char *buf, size_t len);
int fab_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);

/* fab_eq.c */
int fab_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq,
                void *context);
/* fi_trywait on an EQ: -FI_EAGAIN if an event is there, else 0. */
int fab_eq_trywait(struct fid *eq);

/* fab_domain.c */
int fab_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom,
                    void *context);

/* fab_av.c */
int fab_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
                void *context);
int fab_av_attach(fab_av_t *av, fab_ep_t *ep);
void fab_av_detach(fab_av_t *av, fab_ep_t *ep);
int fab_name_encode(const void *blob, size_t len, unsigned char *name);
int fab_name_decode(const unsigned char *name, void *blob, size_t *len);

/* fab_name.c: IPv4 names (FI_SOCKADDR_IN, FI_ADDR_STR) */
int fab_fmt_ok(uint32_t fmt);
int fab_sa_to_str(const struct sockaddr_in *sa, char *buf, size_t len);
int fab_str_to_sa(const char *s, struct sockaddr_in *sa);
int fab_resolve_node(const char *node, const char *service, int passive, struct sockaddr_in *sa);
/* Binds the endpoint's name socket when its info's format is IPv4. */
int fab_ns_open(fab_ep_t *ep, const struct fi_info *info);
void fab_ns_close(fab_ep_t *ep);
/* fi_getname of an endpoint with a name socket, in its info's format. */
int fab_ns_getname(fab_ep_t *ep, void *addr, size_t *addrlen);
/* Stops the thread that answers name queries (at provider cleanup). */
void fab_ns_fini(void);
/* One IPv4 name to resolve, and the result: ret 0 with the tmx address
 * in blob, or a negative FI_E* code. */
typedef struct fab_ns_name {
    struct sockaddr_in to;
    int ret;
    size_t len;
    unsigned char blob[TMX_ADDRESS_MAX];
} fab_ns_name_t;
/* What a query announces of an endpoint with a name socket: its IPv4
 * name and tmx address. */
typedef struct fab_ns_self {
    struct sockaddr_in sa;
    size_t len;
    unsigned char blob[TMX_ADDRESS_MAX];
} fab_ns_self_t;
/* Copies the announcement of ep into *self: 1, or 0 when ep has no name
 * socket. The caller keeps ep open meanwhile (the AV's lock). */
int fab_ns_self_of(const fab_ep_t *ep, fab_ns_self_t *self);
/* The tmx addresses behind n IPv4 names, resolved at once: as each
 * name's owner announced it when it queried us, or asked of its name
 * socket (announcing the n_selves selves, or no one). A name waits up to
 * FAB_NS_TIMEOUT_MS for an answer, or FAB_NS_REFUSED_MS once its port is
 * refused: the caller holds no lock. */
void fab_ns_resolve(fab_ns_name_t *names, size_t n, const fab_ns_self_t *selves, int n_selves);

/* fab_info.c: 1 when tmx's offload engine runs (TMX_OFFLOAD=1). */
int fab_offload_on(void);

/* fab_poll.c */
int fab_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **ps);
/* A CQ or counter being closed leaves its domain's poll sets; the caller
 * does not hold the domain lock. */
void fab_poll_forget(fab_domain_t *dom, struct fid *member);

/* fab_cntr.c */
int fab_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr,
                  void *context);
int fab_cntr_attach(fab_cntr_t *cntr, fab_ep_t *ep);
void fab_cntr_detach(fab_cntr_t *cntr, fab_ep_t *ep);
void fab_cntr_count(fab_cntr_t *cntr, int failed);
/* fi_poll: 1 if the counter's success or error value changed since the
 * last fi_poll, fi_cntr_add, fi_cntr_set, fi_cntr_adderr or fi_cntr_seterr
 * (after one progress pass); the change is then seen. */
int fab_cntr_poll(fab_cntr_t *cntr);

/* fab_cq.c */
/* Moves what the endpoint's context completed into its CQs and counters;
 * the caller holds the domain lock. */
void fab_ep_drain(fab_ep_t *ep);
/* 1 if the CQ has an entry to read, after one progress pass if empty. */
int fab_cq_ready(fab_cq_t *cq);
int fab_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
                void *context);
int fab_cq_attach(fab_cq_t *cq, fab_ep_t *ep);
/* fi_control's FI_GETWAIT and FI_GETWAITOBJ for a CQ or EQ whose wait
 * file descriptor is fd (-1: none). */
int fab_wait_control(int fd, int command, void *arg);
void fab_cq_detach(fab_cq_t *cq, fab_ep_t *ep);
int fab_cq_push(fab_cq_t *cq, const fab_cqe_t *c);
/* fi_trywait on a CQ: -FI_EAGAIN if a completion is there (after one
 * progress pass); else arms the wait fd and returns 0. */
int fab_cq_trywait(fab_cq_t *cq);

/* fab_ep.c */
int fab_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
                void *context);
int fab_ops_grow(fab_ep_t *ep);
/* Room for one more in the endpoints bound to an AV, CQ or counter (n of
 * them in *eps, which holds *cap): 0, or -FI_ENOMEM with *eps unchanged.
 * The owner frees *eps when it closes. */
int fab_eps_reserve(fab_ep_t ***eps, int n, int *cap);
void fab_op_list_add(fab_op_t *head, fab_op_t *op);
void fab_op_list_del(fab_op_t *op);

/* Ops (claimed messages waiting for their receive) come from a free list
 * that grows by chunks and never shrinks. */
static inline fab_op_t *fab_op_get(fab_ep_t *ep, void *context)
{
    fab_op_t *op;

    if (ep->free_ops == NULL && fab_ops_grow(ep) != 0)
        return NULL;
    op = ep->free_ops;
    ep->free_ops = op->next;
    op->context = context;
    op->msg = NULL;
    return op;
}

static inline void fab_op_put(fab_ep_t *ep, fab_op_t *op)
{
    op->next = ep->free_ops;
    ep->free_ops = op;
}

/* fab_msg.c */
extern struct fi_ops_tagged fab_tagged_ops;
extern struct fi_ops_msg fab_msg_ops;
/* Hands the untagged messages tmx holds to the waiting receives (with
 * FI_MULTI_RECV); the caller holds the domain lock. Returns how many. */
int fab_urq_progress(fab_ep_t *ep);
/* fi_cancel of a waiting untagged receive: 0, or -FI_ENOENT. */
int fab_urq_cancel(fab_ep_t *ep, void *context);
/* Unlinks and frees one untagged receive. */
void fab_urq_free_one(fab_urecv_t *u);
/* At close: frees every untagged receive. */
void fab_urq_free(fab_ep_t *ep);
/* fab_cq.c: the CQ entry of one of their messages; the CQ, or NULL for a
 * success that wants no entry. */
fab_cq_t *fab_urq_complete(fab_ep_t *ep, const tmx_completion_t *c, fab_cqe_t *e);

#endif
