/*
 * tmx — MPI-style tagged point-to-point messaging.
 *
 * Public API, version 0. Every call that can fail returns a tmx_status_t:
 * TMX_OK (0), TMX_INPROGRESS (1), or a negative error code that
 * tmx_strerror() names. Handles are opaque; parameter structs carry a field
 * mask so that fields can be added without breaking callers, and unknown
 * mask or flag bits are rejected with TMX_ERR_INVALID.
 *
 * Matching follows MPI (see docs/matching.md): messages from one source are
 * matched in the order they were sent; receives are matched in the order they
 * were posted; a receive takes the earliest-arrived matching message. A
 * receive matches a message when the sources agree (or the receive names
 * TMX_ANY_SOURCE) and (msg_tag & ~ignore) == (recv_tag & ~ignore).
 */
#ifndef TMX_H
#define TMX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TMX_VERSION_MAJOR 0
#define TMX_VERSION_MINOR 1
#define TMX_VERSION_PATCH 0
#define TMX_VERSION ((TMX_VERSION_MAJOR << 16) | (TMX_VERSION_MINOR << 8) | TMX_VERSION_PATCH)

/* Status codes. Zero is success, one is "not finished yet", negatives are
 * errors. The numeric values are part of the ABI. */
typedef enum tmx_status {
    TMX_OK = 0,
    TMX_INPROGRESS = 1,        /* operation accepted, not complete yet */
    TMX_ERR_INVALID = -1,      /* bad argument, unknown flag or field bit */
    TMX_ERR_NOMEM = -2,        /* out of memory */
    TMX_ERR_TRUNCATED = -3,    /* message longer than the receive buffer */
    TMX_ERR_CANCELED = -4,     /* operation canceled */
    TMX_ERR_NO_MESSAGE = -5,   /* probe found no matching message */
    TMX_ERR_AGAIN = -6,        /* resources busy: progress and retry */
    TMX_ERR_UNREACHABLE = -7,  /* no transport reaches the peer */
    TMX_ERR_PEER_FAILED = -8,  /* the peer died or stopped answering */
    TMX_ERR_UNSUPPORTED = -9,  /* valid request this build cannot do */
    TMX_ERR_BUSY = -10,        /* object in use (e.g. cancel after match) */
    TMX_ERR_NO_SPACE = -11,    /* output buffer too small; size returned */
    TMX_ERR_TIMEOUT = -12,     /* wait timed out */
    TMX_ERR_IO = -13,          /* system call failed */
    TMX_ERR_PROTO = -14,       /* malformed data from the wire */
    TMX_ERR_NOT_FOUND = -15,   /* no such peer, key or object */
    TMX_ERR_INTERNAL = -16     /* a bug in tmx; see the log */
} tmx_status_t;

/* Returns a static, human-readable name for a status; never NULL. */
const char *tmx_strerror(tmx_status_t status);

/* Returns the library's TMX_VERSION, to compare with the header's. */
unsigned tmx_version(void);

/* ---------------------------------------------------------------- context */

typedef struct tmx_context *tmx_context_h;
typedef struct tmx_request *tmx_request_h;
typedef struct tmx_message *tmx_message_h;

/* Peers are small integers assigned by tmx_peer_add() in insertion order:
 * the first peer added is 0, the next 1, and so on. */
typedef uint32_t tmx_peer_t;
#define TMX_ANY_SOURCE ((tmx_peer_t)UINT32_MAX)
#define TMX_PEER_NONE ((tmx_peer_t)UINT32_MAX - 1)

/* A process that was never added as a peer may still send to us (it added
 * our address): its messages are received like any other, and reported
 * with a source number that has TMX_PEER_IMPLICIT set. Such a number works
 * for sends and receives like an added peer's. Once tmx_peer_add() adds
 * that process, its messages, including those not yet received, are
 * reported with the added number, which receives must then name. */
#define TMX_PEER_IMPLICIT ((tmx_peer_t)1 << 31)

/* Ignore masks: a set bit is a tag bit that does not take part in matching. */
#define TMX_TAG_EXACT ((uint64_t)0)
#define TMX_TAG_ANY (~(uint64_t)0)

typedef enum tmx_thread_mode {
    TMX_THREAD_SINGLE = 0,  /* one thread at a time calls into the context */
    TMX_THREAD_MULTIPLE = 1 /* any thread may call any function at any time */
} tmx_thread_mode_t;

enum tmx_context_field {
    TMX_CONTEXT_FIELD_THREAD_MODE = 1u << 0,
    TMX_CONTEXT_FIELD_TRANSPORTS = 1u << 1,
    TMX_CONTEXT_FIELD_NAME = 1u << 2,
    TMX_CONTEXT_FIELD_BOOT = 1u << 3,
    TMX_CONTEXT_FIELD_SETTINGS = 1u << 4,
    TMX_CONTEXT_FIELD_OFFLOAD = 1u << 5
};

typedef enum tmx_boot_mode {
    /* Join the job when started by tmxrun (or a PMIx launcher): every
     * rank is added as a peer, peer i being rank i. Outside a launched
     * job, nothing happens. A process may join with several contexts:
     * its n-th joining context meets the other ranks' n-th, so every rank
     * creates its joining contexts in the same order (one at a time). */
    TMX_BOOT_AUTO = 0,
    /* Never join; the caller adds peers itself (e.g. a libfabric AV). */
    TMX_BOOT_NONE = 1
} tmx_boot_mode_t;

typedef struct tmx_context_params {
    uint64_t field_mask;           /* which fields below are set */
    tmx_thread_mode_t thread_mode; /* default TMX_THREAD_SINGLE */
    const char *transports;        /* comma list, e.g. "self,shm"; default
                                      the TMX_TRANSPORTS setting */
    const char *name;              /* label used in log lines */
    tmx_boot_mode_t boot;          /* default TMX_BOOT_AUTO */
    const char *const *settings;   /* NULL-terminated "NAME=VALUE" strings
                                      that take precedence over the
                                      environment (tmx-info lists the
                                      names); a name that is no setting,
                                      or a value out of range, fails
                                      tmx_context_create with
                                      TMX_ERR_INVALID */
    int offload;                   /* 1: run the offload engine, a thread
                                      of the context's own that advances
                                      its traffic while the application
                                      computes, so that tmx_progress is
                                      optional; 0: never; default the
                                      TMX_OFFLOAD setting. The context
                                      then locks as in
                                      TMX_THREAD_MULTIPLE. */
} tmx_context_params_t;

/* Creates a context. params may be NULL for all defaults. On success
 * *ctx is set; on failure it is left untouched. */
tmx_status_t tmx_context_create(const tmx_context_params_t *params, tmx_context_h *ctx);

/* Destroys a context. Outstanding operations are abandoned: their buffers
 * are no longer touched once this returns and no completion is reported.
 * Unreleased request and message handles become invalid. NULL is accepted.
 * No other call on ctx may run concurrently with this one (a thread still
 * in tmx_*_wait, tmx_progress or tmx_cq_read on ctx) or start after it: the
 * caller makes its other threads leave the context first, as libfabric's
 * fi_close and UCX's ucp_worker_destroy require. */
tmx_status_t tmx_context_destroy(tmx_context_h ctx);

/* Writes this process's address blob into buf. *len is the buffer's size
 * on entry and the blob's size on return. If buf is too small the call
 * returns TMX_ERR_NO_SPACE with *len set to the size needed. The blob is
 * opaque, position independent and at most TMX_ADDRESS_MAX bytes. */
#define TMX_ADDRESS_MAX 256
tmx_status_t tmx_address(tmx_context_h ctx, void *buf, size_t *len);

/* Adds a peer from an address blob produced by tmx_address() in any process
 * of the job (including this one). Connection state is created on first use,
 * not here. *peer receives the peer's number. Adding the same address twice
 * gives two numbers naming the same process; messages from that process are
 * reported with the first. */
tmx_status_t tmx_peer_add(tmx_context_h ctx, const void *addr, size_t len, tmx_peer_t *peer);

/* TMX_OK when addr is a well-formed address blob (its header, and
 * transport sections that add up to len), TMX_ERR_INVALID otherwise; no
 * context needed, nothing logged. tmx_peer_add() may still refuse a
 * well-formed blob that no transport of its context reaches. */
tmx_status_t tmx_address_check(const void *addr, size_t len);

/* Number of peers added so far. */
tmx_status_t tmx_peer_count(tmx_context_h ctx, uint32_t *count);

/* Bytes of private memory the context has mapped for itself and not given
 * back: its request and message pools, which go back to one chunk each
 * when progress finds no request or message left (every 20 ms at most).
 * What it allocates with malloc is not counted here (malloc's own
 * figures, mallinfo2(), count it). */
tmx_status_t tmx_context_memory(tmx_context_h ctx, size_t *mapped);

/* For a context that joined a launched job (tmxrun): this process's rank
 * and the job's size; peer i is rank i. TMX_ERR_NOT_FOUND otherwise. */
tmx_status_t tmx_job_info(tmx_context_h ctx, uint32_t *rank, uint32_t *size);

/* Blocks until every rank of the job has called it (through the
 * launcher, not the data path). TMX_ERR_PEER_FAILED if a rank died. */
tmx_status_t tmx_job_barrier(tmx_context_h ctx);

/* ------------------------------------------------------------- operations */

typedef enum tmx_op_type {
    TMX_OP_TSEND = 1,
    TMX_OP_TRECV = 2
} tmx_op_type_t;

/* Operation flags. */
enum tmx_op_flag {
    /* No completion-queue entry; the caller tracks the operation through its
     * request handle (or not at all). */
    TMX_OP_FLAG_NO_CQ = 1u << 0,
    /* Send: complete only once the receiver has matched the message (MPI's
     * synchronous send, libfabric's FI_TRANSMIT_COMPLETE-after-match). */
    TMX_OP_FLAG_SYNC = 1u << 1,
    /* Send: carry params->data to the receiver's completion (remote CQ data).
     * Implied when TMX_OP_FIELD_DATA is set. */
    TMX_OP_FLAG_DATA = 1u << 2,
    /* Send: the payload (at most TMX_INJECT_MAX bytes) is copied or on the
     * wire when tmx_tsend returns TMX_OK, and nothing is kept: no request
     * (req must be NULL) and no completion. TMX_ERR_AGAIN: nothing was
     * sent; progress and retry. libfabric's fi_inject. With
     * TMX_OP_FLAG_SYNC: the payload is copied and the caller's buffer is
     * free on return, and the send is otherwise a synchronous one, with a
     * request if req is given and a completion once the receiver matched
     * it (libfabric's FI_INJECT with FI_DELIVERY_COMPLETE). */
    TMX_OP_FLAG_INJECT = 1u << 3,
    /* A completion-queue entry only if the operation fails; a success is
     * seen through the request handle only (libfabric's
     * FI_SELECTIVE_COMPLETION for an operation without FI_COMPLETION). */
    TMX_OP_FLAG_CQ_ERRORS_ONLY = 1u << 4
};

/* The largest message TMX_OP_FLAG_INJECT takes, on every transport. */
#define TMX_INJECT_MAX 4096

enum tmx_op_field {
    TMX_OP_FIELD_FLAGS = 1u << 0,
    TMX_OP_FIELD_USER_CONTEXT = 1u << 1,
    TMX_OP_FIELD_DATA = 1u << 2
};

typedef struct tmx_op_params {
    uint64_t field_mask;  /* which fields below are set */
    uint32_t flags;       /* enum tmx_op_flag */
    void *user_context;   /* returned unchanged in the completion */
    uint64_t data;        /* remote CQ data for a send */
} tmx_op_params_t;

/* Completion entry, written to the completion queue and returned by the
 * request calls. */
typedef struct tmx_completion {
    void *user_context;   /* from the operation's parameters */
    tmx_status_t status;  /* TMX_OK, TMX_ERR_TRUNCATED, TMX_ERR_CANCELED, ... */
    tmx_op_type_t op;     /* which operation completed */
    tmx_peer_t source;    /* receives: the sender; sends: the destination */
    uint64_t tag;         /* receives: the message's tag; sends: the tag sent */
    size_t length;        /* bytes placed in the receive buffer (0 when
                             the receive failed other than by truncation:
                             nothing in it may be used), or sent */
    size_t msg_length;    /* receives: the message's full length, once one
                             matched (with TMX_OK, length == msg_length;
                             TMX_ERR_TRUNCATED, length < msg_length) */
    uint64_t data;        /* remote CQ data, if has_data */
    uint32_t has_data;    /* non-zero when the sender attached data */
} tmx_completion_t;

/* Sends len bytes from buf to peer with the given tag. The buffer must stay
 * untouched until the send completes. params may be NULL.
 * Returns TMX_OK when the send was accepted; its completion is reported
 * later through the completion queue (unless TMX_OP_FLAG_NO_CQ) and through
 * *req when req is non-NULL. TMX_ERR_AGAIN means the transport is full:
 * call tmx_progress() and retry. On error no completion is reported and
 * *req is untouched. A send completes when its buffer may be reused. */
tmx_status_t tmx_tsend(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                       uint64_t tag, const tmx_op_params_t *params, tmx_request_h *req);

/* An injected send in one call, the short path of tmx_tsend() with
 * TMX_OP_FLAG_INJECT (libfabric's fi_tinject and fi_tinjectdata): at most
 * TMX_INJECT_MAX bytes, reusable on return, no request and no completion.
 * has_data non-zero attaches data as remote CQ data. TMX_ERR_AGAIN:
 * nothing was sent; progress and retry. */
tmx_status_t tmx_tinject(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                         uint64_t tag, int has_data, uint64_t data);

/* Posts a receive of up to len bytes into buf for a message from peer (or
 * TMX_ANY_SOURCE) whose tag equals tag in every bit not set in ignore.
 * Completion and request as for tmx_tsend(). A longer message completes
 * with TMX_ERR_TRUNCATED after delivering the first len bytes. */
tmx_status_t tmx_trecv(tmx_context_h ctx, tmx_peer_t peer, void *buf, size_t len, uint64_t tag,
                       uint64_t ignore, const tmx_op_params_t *params, tmx_request_h *req);

enum tmx_probe_flag {
    /* Remove the message from matching and return a handle to it in *msg
     * (MPI_Mprobe, FI_CLAIM). Without it the message stays (MPI_Iprobe,
     * FI_PEEK). */
    TMX_PROBE_FLAG_CLAIM = 1u << 0
};

/* Looks for the earliest-arrived message that a receive with the same
 * (peer, tag, ignore) would match, after one progress pass. Returns TMX_OK
 * and fills *info (source, tag, msg_length, data) if there is one, and
 * TMX_ERR_NO_MESSAGE if not. With TMX_PROBE_FLAG_CLAIM, *msg receives a
 * handle that must be passed to tmx_mrecv() or tmx_message_discard(). */
tmx_status_t tmx_tprobe(tmx_context_h ctx, tmx_peer_t peer, uint64_t tag, uint64_t ignore,
                        uint32_t flags, tmx_completion_t *info, tmx_message_h *msg);

/* Receives a claimed message into buf; consumes the handle whatever the
 * result (except TMX_ERR_INVALID on bad arguments, which leaves it valid). */
tmx_status_t tmx_mrecv(tmx_context_h ctx, tmx_message_h msg, void *buf, size_t len,
                       const tmx_op_params_t *params, tmx_request_h *req);

/* Drops a claimed message (FI_CLAIM | FI_DISCARD); its sender completes
 * normally. Consumes the handle. */
tmx_status_t tmx_message_discard(tmx_context_h ctx, tmx_message_h msg);

/* ------------------------------------------------------- completion queue */

/* Drives progress once if the queue is empty, then moves up to max entries
 * into out. *count receives the number moved (possibly 0). Like
 * tmx_progress, a call that finds nothing after many that found nothing
 * yields the processor (sched_yield), so that a loop polling it for a
 * completion lets the process it waits for run on a shared core. */
tmx_status_t tmx_cq_read(tmx_context_h ctx, tmx_completion_t *out, size_t max, size_t *count);

/* Drives all transports once. Returns the number of events handled (>= 0)
 * or a negative status. May yield the processor as tmx_cq_read does. */
int tmx_progress(tmx_context_h ctx);

/* Drives progress until at least one event happened or a completion is
 * waiting, or timeout_us passed (< 0: no limit): spins briefly, then
 * sleeps until a peer wakes it. Returns the events handled, at least 1
 * when a completion waits in the queue (0 only on timeout), or a
 * negative status. */
int tmx_wait(tmx_context_h ctx, int64_t timeout_us);

/* --------------------------------------------------------------- requests */

/* Returns TMX_INPROGRESS while the operation runs; otherwise its final
 * status, and fills *out if out is non-NULL. Does not drive progress. */
tmx_status_t tmx_request_test(tmx_request_h req, tmx_completion_t *out);

/* Drives progress until the request completes, then as tmx_request_test().
 * timeout_us < 0 waits forever; on timeout returns TMX_ERR_TIMEOUT. */
tmx_status_t tmx_request_wait(tmx_request_h req, int64_t timeout_us, tmx_completion_t *out);

/* Cancels a posted receive that has not matched yet: it completes with
 * TMX_ERR_CANCELED. Returns TMX_ERR_BUSY if the operation has already
 * matched or completed (it then completes normally), TMX_ERR_UNSUPPORTED
 * for sends. */
tmx_status_t tmx_request_cancel(tmx_request_h req);

/* Cancels, as tmx_request_cancel() does, the earliest-posted receive of
 * ctx that has not matched yet and was posted with this user_context: for
 * callers that keep no handles (libfabric's fi_cancel). Returns TMX_OK if
 * one was canceled, TMX_ERR_NOT_FOUND if there is none. A canceled
 * receive's completion carries the source and tag it was posted with. */
tmx_status_t tmx_cancel(tmx_context_h ctx, void *user_context);

/* Releases a request handle. An operation still running continues and
 * reports through the completion queue as requested; only the handle goes. */
tmx_status_t tmx_request_free(tmx_request_h req);

/* -------------------------------------------------------------- settings */

/* Writes the table of TMX_* settings (name, value, default, what it
 * accepts, help) and the launcher's variables to the given stdio stream
 * (a FILE *). */
void tmx_config_print(void *stream);

/* The value a context created now would take for the setting name (from
 * the environment, else its default), as a string in value (len bytes,
 * the terminating NUL included): TMX_OK; TMX_ERR_NOT_FOUND for a name that
 * is no setting; TMX_ERR_INVALID for a value it does not accept (logged);
 * TMX_ERR_TRUNCATED when len is too small. Overrides given to
 * tmx_context_create are not seen. */
tmx_status_t tmx_config_get(const char *name, char *value, size_t len);

/* Writes what tmx-info shows: the version, each transport with its
 * capabilities and the protocol it uses at each message size, then the
 * settings as tmx_config_print() does, to a stdio stream (a FILE *).
 * TMX_OK; TMX_ERR_INVALID when a setting does not parse (logged once): the
 * transports are then left out, the settings still printed. */
tmx_status_t tmx_info_print(void *stream);

/* --------------------------------------------------------------- launchers */

/* Removes what tmx processes that all died left on this host: the table
 * of a shared UDP port (docs/udp.md) outlives a job whose processes were
 * all killed, until the next tmx process on the host joins a port. A
 * launcher calls this once the processes of its job on the host have
 * exited (tmxrun does), with its job's identity as it gave it in
 * TMX_JOBID (16 hex digits, not all zero): only that job's entries are
 * looked at. NULL looks at every job's. What a live process holds is never touched.
 * Returns the number of entries removed, or TMX_ERR_INVALID (logged) for
 * any other jobid. */
int tmx_host_sweep(const char *jobid);

#ifdef __cplusplus
}
#endif

#endif /* TMX_H */
