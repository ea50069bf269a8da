/*
 * tmxrun: what its files share.
 *
 *   tmxrun.c        options, set-up and tear-down, the poll() loop, and the
 *                   job's fate (signals, reaping, timeout)
 *   tmxrun_io.c     forwarding the ranks' stdout and stderr, line by line
 *   tmxrun_kvs.c    the key-value service (protocol in src/boot/boot.h)
 *   tmxrun_spawn.c  starting the ranks: fork/exec here, or through an agent
 *                   command on other hosts
 *
 * One process, one thread: nothing here locks.
 */
#ifndef TMX_TMXRUN_H
#define TMX_TMXRUN_H

#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The key-value service's side of the protocol between tmxrun and the
 * library (docs/tmxrun.md): what a rank reads in TMX_KVS, TMX_JOBID and on
 * the wire. The library checks the same limits on its side; tmxrun_test
 * runs both against each other. */
#define RUN_KVS_TOKEN_MAX 4096          /* longest key or value, in bytes */
#define RUN_KVS_LINE_MAX (4 + RUN_KVS_TOKEN_MAX + 1 + RUN_KVS_TOKEN_MAX + 1) /* "PUT k v\n" */
#define RUN_ADDR_MAX 256                /* longest TMX_KVS address, with its NUL */
#define RUN_JOBID_DIGITS 16             /* hex digits in TMX_JOBID */

#define RUN_MAX_RANKS 4096
#define RUN_MAX_TIMEOUT_S 10000000      /* --timeout, seconds (about 115 days) */
#define RUN_KILL_GRACE_MS 2000          /* from SIGTERM to SIGKILL */
#define RUN_LINE_MAX 65536              /* longer lines are forwarded in pieces */
#define RUN_OUTQ_HIGH (256 * 1024)      /* output waiting for a slow reader of tmxrun's stdout or
                                           stderr that stops reading the ranks' pipes into it */
#define RUN_CONNS_PER_RANK 4            /* service connections allowed, per rank */
#define RUN_OUT_HIGH 65536              /* a client's unread replies that pause its requests */
#define RUN_STORE_MAX ((size_t)256 << 20) /* bytes of keys and values held at most, each key
                                            counted with RUN_KV_OVERHEAD */
/* What a key holds besides its bytes and its value's: its entry, the
 * headers of its two allocations, its share of the buckets. So that tiny
 * keys cannot make the store hold many times RUN_STORE_MAX. */
#define RUN_KV_OVERHEAD 64
#define RUN_PEER_MAX 64                 /* "pid N" or "IP:PORT" of a client, for log lines */

#define RUN_STDIN_ALL (-1)              /* --stdin all: every rank reads tmxrun's stdin */
#define RUN_STDIN_NONE (-2)             /* --stdin none: every rank reads /dev/null */
#define RUN_STDIN_CHUNK 65536           /* stdin read at most this much ahead of the slowest
                                           rank that reads it */

#define RUN_EXIT_USAGE 2
#define RUN_EXIT_TIMEOUT 124
#define RUN_EXIT_INTERNAL 125           /* tmxrun itself failed, as timeout(1) */

typedef struct run_opts {
    int nranks;
    double timeout_s;   /* 0: no timeout */
    int tag_output;
    char **argv;        /* program and its arguments, NULL-terminated */
    char **hosts;       /* --hosts, split at commas; NULL: every rank here */
    char *hosts_buf;    /* the names hosts[] points into */
    int nhosts;
    const char *agent;  /* --agent: the command that starts a rank on {host} */
    const char *kvs_ip; /* --kvs-addr: IPv4 address to bind and advertise */
    int stdin_to;       /* --stdin: a rank, RUN_STDIN_ALL or RUN_STDIN_NONE */
} run_opts_t;

/* One forwarded output stream (stdout or stderr) of one rank. */
typedef struct run_stream {
    int fd;             /* read end of the rank's pipe; -1 once closed */
    int out_fd;         /* where it goes: 1 or 2 */
    int rank;
    int midline;        /* the last piece written did not end a line */
    char *part;         /* the unfinished line so far */
    size_t part_len;
    size_t part_cap;
} run_stream_t;

/* What waits to go to tmxrun's stdout or stderr: written as the reader
 * takes it, never by a write that could block (which would leave signals,
 * the timeout and the service unanswered while the reader stalls). */
typedef struct run_outq {
    int fd;             /* written through: 1 or 2, or a non-blocking open of the same file */
    int how;            /* enum out_how (tmxrun_io.c) */
    int broken;         /* the reader went away: output is dropped */
    char *buf;
    size_t off;         /* buf[off..len) waits */
    size_t len;
    size_t cap;
    size_t lost;        /* bytes dropped for want of memory */
} run_outq_t;

typedef struct run_rank {
    pid_t pid;          /* also its process group; 0 if never started */
    int exited;
    int in_fd;          /* write end of its stdin pipe (non-blocking); -1: none or closed */
    size_t in_off;      /* how much of job->in_buf it has taken */
    run_stream_t out;
    run_stream_t err;
} run_rank_t;

typedef enum run_conn_state {
    CONN_READY,         /* handling requests as they come */
    CONN_WAIT_GET,      /* a GET waits for its key to be PUT */
    CONN_WAIT_FENCE     /* a FENCE waits for the other ranks */
} run_conn_state_t;

/* One client connection to the key-value service. */
typedef struct run_conn {
    int fd;
    char peer[RUN_PEER_MAX]; /* who the client is, for log lines */
    run_conn_state_t state;
    int eof;            /* the client closed its side */
    int dead;           /* to be freed at the end of this loop pass */
    int skipping;       /* dropping an over-long request up to its newline */
    char *wait_key;     /* the key a deferred GET waits for */
    char *out;          /* replies not yet sent */
    size_t out_len;
    size_t out_cap;
    size_t in_len;
    char in[RUN_KVS_LINE_MAX];
} run_conn_t;

typedef struct run_kv {
    struct run_kv *next;
    char *value;
    char key[];
} run_kv_t;

typedef enum run_poll_kind {
    POLL_SIGNAL,
    POLL_LISTEN,
    POLL_STREAM,
    POLL_CONN,
    POLL_OUTQ,
    POLL_STDIN,         /* tmxrun's stdin */
    POLL_STDIN_RANK     /* a rank's stdin pipe, with input left for it */
} run_poll_kind_t;

typedef struct run_poll_tag {
    run_poll_kind_t kind;
    void *obj;
} run_poll_tag_t;

typedef struct run_job {
    run_opts_t opts;
    run_rank_t *ranks;
    int started;            /* ranks forked */
    int live;               /* ranks forked and not reaped */
    int first_gone;         /* first rank to exit, -1 while none has */
    int exit_code;          /* the first failure's status, 0 while none */
    int signals;            /* stop signals received */
    char fail_reason[160];  /* non-empty once the job is failing */
    int64_t timeout_at;     /* monotonic ms; 0 when not armed */
    int64_t kill_at;
    pid_t self;
    int sig_fd;
    int listen_fd;
    int null_fd;
    run_outq_t outq[3];     /* [1] our stdout, [2] our stderr */
    int out_same;           /* stdout and stderr are one file: outq[1] serves both */
    int outq_on;            /* outq_init ran: run_log goes through outq[2] */
    int timed_out;          /* --timeout passed */
    char *in_buf;           /* the last piece read from our stdin: RUN_STDIN_CHUNK bytes */
    size_t in_len;          /* its length; the next is read once every rank took it */
    int in_eof;             /* our stdin ended (or failed): no more is read */
    int in_tty;             /* our stdin is a terminal (looked at once) */
    sigset_t old_mask;
    struct rlimit nofile;   /* as we found it, restored in the ranks */
    char kvs_addr[RUN_ADDR_MAX];
    char jobid[RUN_JOBID_DIGITS + 1];
    run_conn_t **conns;
    size_t nconns;
    size_t max_conns;
    size_t fence_waiting;
    run_kv_t **buckets;
    size_t nbuckets;        /* a power of two, doubled as keys come */
    size_t nkeys;
    size_t store_bytes;
    struct pollfd *pfds;
    run_poll_tag_t *tags;
} run_job_t;

/* ------------------------------------------------------------- tmxrun.c */

/* "tmxrun: " fmt "\n" on stderr. */
void run_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic milliseconds. */
int64_t now_ms(void);

/* 64 random bits, for names nobody should guess or collide with. */
uint64_t random64(void);

/* Copies at most cap-1 bytes of untrusted text for a log line, with every
 * unprintable byte shown as '?'. Returns out. */
const char *printable(const char *p, size_t n, char *out, size_t cap);

/* Only the first failure counts: it sets the exit status, answers every
 * waiting request with ERR, sends SIGTERM to the ranks and arms SIGKILL for
 * RUN_KILL_GRACE_MS later. */
void job_fail(run_job_t *job, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------- tmxrun_io.c */

/* Sets up stdout and stderr for writes that never block. */
void outq_init(run_job_t *job);

/* Writes what goes at once and queues the rest; drops it all once the
 * reader is gone. */
void out_writev(run_job_t *job, int fd, struct iovec *iov, int cnt);

/* Writes what waits for fd, as far as it goes at once. */
void outq_flush(run_job_t *job, int fd);

/* Output waits for fd: its descriptor for POLLOUT, else -1. */
int outq_poll_fd(const run_job_t *job, int fd);

/* So much waits for fd that the ranks' pipes into it are not read. */
int outq_full(const run_job_t *job, int fd);

/* After the last rank: forwards what the pipes still hold and what waits,
 * as the readers take it, until all is written, a stop signal comes, or
 * the timeout passes; then says what it could not write, closes the
 * pipes and the descriptors outq_init opened. signal_cb handles the
 * signalfd. */
void output_finish(run_job_t *job, void (*signal_cb)(run_job_t *job));

/* Writes what goes at once of what waits, drops the rest, closes what
 * outq_init opened; run_log writes to stderr directly again. */
void outq_fini(run_job_t *job);

/* Takes fd (made non-blocking) as rank's stream, going to out_fd. */
void stream_init(run_stream_t *s, int fd, int out_fd, int rank);

/* Reads and forwards what the pipe holds; returns 0 when it is empty but
 * open, or closed (at end of file or on error). */
int stream_read(run_job_t *job, run_stream_t *s);

/* Forwards the unfinished last line, closes the pipe, frees the buffer.
 * Safe to call again. */
void stream_close(run_job_t *job, run_stream_t *s);


/* Forwards tmxrun's stdin to the ranks that read it (--stdin): the next
 * piece is read only once each of them took the last, so that the slowest
 * sets the pace and nothing piles up here. */

/* Whether rank r reads tmxrun's stdin. */
int stdin_wanted(const run_job_t *job, int r);

/* Our stdin is to be polled: some rank still takes it, every rank took
 * the last piece, and we may read it (not a terminal of which we are in
 * the background: that read would stop tmxrun). */
int stdin_pollable(const run_job_t *job);

/* Reads a piece of our stdin and hands it to the ranks (POLL_STDIN). */
void stdin_read(run_job_t *job);

/* Writes what rank r has not taken yet, as far as its pipe takes it
 * (POLL_STDIN_RANK); closes its pipe once it took all and stdin ended, or
 * it stopped reading. */
void stdin_feed(run_job_t *job, int r);

/* No more input for rank r: its pipe is closed. */
void stdin_close(run_job_t *job, int r);

/* --------------------------------------------------------- tmxrun_kvs.c */

/* Opens the service's listening socket and sets job->kvs_addr: an abstract
 * Unix socket, or TCP when the job has hosts. Returns -1 with a log line. */
int kvs_listen(run_job_t *job);

/* Accepts every pending connection (beyond job->max_conns: closes it). */
void conns_accept(run_job_t *job);

/* Flushes replies (POLLOUT) and reads requests (POLLIN) of one connection. */
void conn_event(run_conn_t *c, short revents);

/* Runs every connection until none can go further, then frees the dead. */
void conns_run(run_job_t *job);

/* Answers the deferred FENCEs (and GETs, if gets_too) with ERR reason. */
void waiters_fail(run_job_t *job, int gets_too, const char *reason);

/* Frees the connections and the store. Safe on a half-built job. */
void kvs_fini(run_job_t *job);

/* ------------------------------------------------------- tmxrun_spawn.c */

/* Starts rank r: forks a child that leads its own process group and dies
 * with tmxrun, with stdin from /dev/null and stdout, stderr into pipes,
 * running the program here or the agent command for the rank's host.
 * Returns -1 after job_fail() when it cannot. */
int rank_spawn(run_job_t *job, int r);

/* The command line that runs cmd (a shell command, used as is) on host
 * through the agent, for sh -c. 0 or ENOMEM. */
int agent_probe_command(const run_job_t *job, const char *host, const char *cmd, char **out);

/* ------------------------------------------------------- tmxrun_route.c */

/* The address of this host that routes to the job's hosts, for the ranks
 * to reach the key-value service at when --kvs-addr is not given (see
 * tmxrun_route.c). 0 with ip set, or -1 when no host told us. */
int route_kvs_ip(const run_job_t *job, char *ip, size_t cap);

/* A 64-bit mixer (the finaliser of MurmurHash3), for job ids and the
 * key-value store's buckets: every input bit affects every output bit. */
static inline uint64_t tmxrun_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

#endif
