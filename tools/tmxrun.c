/*
 * tmxrun: starts the N ranks of a job on this host and serves them.
 *
 * One process, one thread, one poll() loop over: a signalfd (SIGCHLD and the
 * signals that stop the job), the key-value service's listening socket and
 * its connections (protocol in src/boot/boot.h), and the stdout and stderr
 * pipes of every rank, forwarded line by line.
 *
 * Nothing is left behind: each rank leads its own process group, so that
 * signals reach whatever it started; each rank gets PR_SET_PDEATHSIG(SIGKILL)
 * so that it dies with tmxrun even when tmxrun is killed by SIGKILL; when a
 * rank exits, what remains of its group is killed before it is reaped (the
 * zombie keeps the group's id from being reused); the service listens on an
 * abstract socket, which vanishes with its last descriptor.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"
#include "util/hash.h"

#define RUN_MAX_RANKS 4096
#define RUN_KILL_GRACE_MS 2000          /* from SIGTERM to SIGKILL */
#define RUN_LINE_MAX 65536              /* longer lines are forwarded in pieces */
#define RUN_CONNS_PER_RANK 4            /* service connections allowed, per rank */
#define RUN_OUT_HIGH 65536              /* a client's unread replies that pause its requests */
#define RUN_STORE_MAX ((size_t)256 << 20) /* bytes of keys and values held at most */

#define RUN_EXIT_USAGE 2
#define RUN_EXIT_TIMEOUT 124
#define RUN_EXIT_INTERNAL 125           /* tmxrun itself failed, as timeout(1) */

typedef struct run_opts {
    int nranks;
    double timeout_s;   /* 0: no timeout */
    int tag_output;
    char **argv;        /* program and its arguments, NULL-terminated */
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

typedef struct run_rank {
    pid_t pid;          /* also its process group; 0 if never started */
    int exited;
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
    pid_t pid;          /* the client's, for log lines */
    run_conn_state_t state;
    int eof;            /* the client closed its side */
    int dead;           /* to be freed at the end of this loop pass */
    int skipping;       /* dropping an over-long request up to its newline */
    char *wait_key;     /* the key a deferred GET waits for */
    char *out;          /* replies not yet sent */
    size_t out_len;
    size_t out_cap;
    size_t in_len;
    char in[BOOT_KVS_LINE_MAX];
} run_conn_t;

typedef struct run_kv {
    struct run_kv *next;
    char *value;
    char key[];
} run_kv_t;

typedef enum run_poll_kind { POLL_SIGNAL, POLL_LISTEN, POLL_STREAM, POLL_CONN } run_poll_kind_t;

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
    int out_broken[3];      /* our stdout/stderr went away: drop output */
    sigset_t old_mask;
    struct rlimit nofile;   /* as we found it, restored in the ranks */
    char kvs_addr[BOOT_ADDR_MAX];
    char jobid[BOOT_JOBID_DIGITS + 1];
    run_conn_t **conns;
    size_t nconns;
    size_t max_conns;
    size_t fence_waiting;
    run_kv_t **buckets;
    size_t nbuckets;        /* a power of two */
    size_t store_bytes;
    struct pollfd *pfds;
    run_poll_tag_t *tags;
} run_job_t;

/* ------------------------------------------------------------- utilities */

static void run_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void run_log(const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "tmxrun: %s\n", msg);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t random64(void)
{
    uint64_t r;

    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == (ssize_t)sizeof(r))
        return r;
    return util_hash64((uint64_t)now_ms() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)&r);
}

/* Copies at most cap-1 bytes of untrusted text for a log line, with every
 * unprintable byte shown as '?'. */
static const char *printable(const char *p, size_t n, char *out, size_t cap)
{
    size_t i;

    for (i = 0; i < n && i + 1 < cap; i++)
        out[i] = (p[i] >= ' ' && p[i] <= '~') ? p[i] : '?';
    out[i] = '\0';
    return out;
}

/* Writes everything or gives up on the descriptor for good (reader gone). */
static void out_writev(run_job_t *job, int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0 && !job->out_broken[fd]) {
        ssize_t n = writev(fd, iov, cnt);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) { /* someone made our stdout non-blocking */
            poll(&(struct pollfd){.fd = fd, .events = POLLOUT}, 1, -1);
            continue;
        }
        if (n < 0) {
            job->out_broken[fd] = 1;
            return;
        }
        for (; cnt > 0 && (size_t)n >= iov->iov_len; iov++, cnt--)
            n -= (ssize_t)iov->iov_len;
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
}

/* --------------------------------------------------------------- options */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tmxrun -n N [options] [--] program [args...]\n"
            "Starts N copies of program on this host (ranks 0..N-1) with TMX_RANK,\n"
            "TMX_SIZE, TMX_JOBID and TMX_KVS set, and serves their key-value exchange.\n"
            "  -n N               number of ranks, 1..%d\n"
            "  --timeout SECONDS  stop the job after SECONDS and exit %d\n"
            "  -p, --tag-output   prefix every line of output with \"[rank] \"\n"
            "  -h, --help         show this help\n"
            "Ranks read stdin from /dev/null. Exit status: 0 when every rank exits 0;\n"
            "else the first failing rank's (128+S if killed by signal S); %d on timeout;\n"
            "128+S when tmxrun gets signal S (130 for Ctrl-C); %d on bad usage; %d when\n"
            "tmxrun itself fails.\n",
            RUN_MAX_RANKS, RUN_EXIT_TIMEOUT, RUN_EXIT_TIMEOUT, RUN_EXIT_USAGE, RUN_EXIT_INTERNAL);
}

static int parse_ranks(const char *s, int *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || v > RUN_MAX_RANKS) {
        fprintf(stderr, "tmxrun: -n '%s': expected a number of ranks in 1..%d\n", s,
                RUN_MAX_RANKS);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_timeout(const char *s, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > 1e7) {
        fprintf(stderr, "tmxrun: --timeout '%s': expected seconds, > 0\n", s);
        return -1;
    }
    *out = v;
    return 0;
}

typedef enum run_parse { PARSE_RUN, PARSE_HELP, PARSE_BAD } run_parse_t;

static run_parse_t opts_parse(int argc, char **argv, run_opts_t *o)
{
    static const struct option longs[] = {{"timeout", required_argument, NULL, 't'},
                                          {"tag-output", no_argument, NULL, 'p'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c;

    memset(o, 0, sizeof(*o));
    /* '+': stop at the program's name, so its own options stay its own. */
    while ((c = getopt_long(argc, argv, "+n:ph", longs, NULL)) != -1) {
        if (c == 'h')
            return PARSE_HELP;
        if ((c == 'n' && parse_ranks(optarg, &o->nranks) != 0) ||
            (c == 't' && parse_timeout(optarg, &o->timeout_s) != 0) || c == '?' || c == ':')
            return PARSE_BAD;
        if (c == 'p')
            o->tag_output = 1;
    }
    if (o->nranks == 0 || optind >= argc) {
        fprintf(stderr, "tmxrun: %s\n", o->nranks == 0 ? "-n N is required" : "no program");
        return PARSE_BAD;
    }
    o->argv = argv + optind;
    return PARSE_RUN;
}

/* ------------------------------------------------------- output forwarding */

/* Writes the unfinished line and then p[0..n) as one piece, tagged when it
 * starts a line, with a newline added when end_line is set. */
static void stream_emit(run_job_t *job, run_stream_t *s, const char *p, size_t n, int end_line)
{
    char prefix[16];
    struct iovec iov[4];
    int cnt = 0;

    if (job->opts.tag_output && !s->midline) {
        iov[cnt].iov_base = prefix;
        iov[cnt++].iov_len = (size_t)snprintf(prefix, sizeof(prefix), "[%d] ", s->rank);
    }
    iov[cnt].iov_base = s->part;
    iov[cnt++].iov_len = s->part_len;
    iov[cnt].iov_base = (void *)p;
    iov[cnt++].iov_len = n;
    iov[cnt].iov_base = "\n";
    iov[cnt++].iov_len = end_line ? 1 : 0;
    if (s->part_len + n > 0)
        s->midline = !end_line && (n > 0 ? p[n - 1] : s->part[s->part_len - 1]) != '\n';
    out_writev(job, s->out_fd, iov, cnt);
    s->part_len = 0;
}

/* Keeps an unfinished line until its end comes. A line longer than
 * RUN_LINE_MAX (or any, if memory runs out) goes out in pieces: when lines
 * are tagged each piece becomes a tagged line of its own, so that every
 * line of output still says whose it is. */
static void stream_keep(run_job_t *job, run_stream_t *s, const char *p, size_t n)
{
    size_t cap = s->part_cap ? s->part_cap : 256;
    char *part = s->part;

    while (cap < s->part_len + n)
        cap *= 2;
    if (s->part_len + n > RUN_LINE_MAX ||
        (cap > s->part_cap && (part = realloc(s->part, cap)) == NULL)) {
        stream_emit(job, s, p, n, job->opts.tag_output);
        return;
    }
    s->part = part;
    s->part_cap = cap;
    memcpy(s->part + s->part_len, p, n);
    s->part_len += n;
}

static void stream_feed(run_job_t *job, run_stream_t *s, const char *p, size_t n)
{
    const char *nl;

    while ((nl = memchr(p, '\n', n)) != NULL) {
        size_t len = (size_t)(nl - p) + 1;

        stream_emit(job, s, p, len, 0);
        p += len;
        n -= len;
    }
    if (n > 0)
        stream_keep(job, s, p, n);
}

/* The stream ended: its last line goes out, ended by a newline when lines
 * are tagged, so that the next rank's tag starts a line. */
static void stream_close(run_job_t *job, run_stream_t *s)
{
    if (s->part_len > 0)
        stream_emit(job, s, NULL, 0, job->opts.tag_output);
    free(s->part);
    s->part = NULL;
    s->part_len = s->part_cap = 0;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* Reads what is there; returns 0 when the pipe is empty but open. */
static int stream_read(run_job_t *job, run_stream_t *s)
{
    char buf[16384];
    ssize_t n = read(s->fd, buf, sizeof(buf));

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        stream_close(job, s);
        return 0;
    }
    stream_feed(job, s, buf, (size_t)n);
    return 1;
}

/* After the last rank: take what the pipes still hold, then close them. */
static void streams_drain(run_job_t *job)
{
    for (int r = 0; r < job->opts.nranks; r++) {
        run_stream_t *ss[2] = {&job->ranks[r].out, &job->ranks[r].err};

        for (int i = 0; i < 2; i++) {
            while (ss[i]->fd >= 0 && stream_read(job, ss[i]))
                ;
            stream_close(job, ss[i]);
        }
    }
}

/* ---------------------------------------------------------- the job's fate */

static void ranks_signal(run_job_t *job, int sig)
{
    for (int r = 0; r < job->started; r++) {
        if (!job->ranks[r].exited && kill(-job->ranks[r].pid, sig) != 0)
            kill(job->ranks[r].pid, sig);
    }
}

static void conn_reply(run_conn_t *c, const char *word, const char *arg);

/* Answers the deferred requests that can no longer succeed. */
static void waiters_fail(run_job_t *job, int gets_too, const char *reason)
{
    for (size_t i = 0; i < job->nconns; i++) {
        run_conn_t *c = job->conns[i];

        if (c->state == CONN_WAIT_FENCE || (gets_too && c->state == CONN_WAIT_GET)) {
            conn_reply(c, "ERR", reason);
            free(c->wait_key);
            c->wait_key = NULL;
            c->state = CONN_READY;
        }
    }
    job->fence_waiting = 0;
}

/* Only the first failure counts: it sets the exit status, answers every
 * waiting request with ERR, sends SIGTERM to the ranks and arms SIGKILL for
 * RUN_KILL_GRACE_MS later. */
static void job_fail(run_job_t *job, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void job_fail(run_job_t *job, int code, const char *fmt, ...)
{
    va_list ap;

    if (job->fail_reason[0] != '\0')
        return;
    va_start(ap, fmt);
    vsnprintf(job->fail_reason, sizeof(job->fail_reason), fmt, ap);
    va_end(ap);
    run_log("%s; stopping the job", job->fail_reason);
    job->exit_code = code;
    waiters_fail(job, 1, job->fail_reason);
    ranks_signal(job, SIGTERM);
    job->kill_at = now_ms() + RUN_KILL_GRACE_MS;
}

static void rank_exited(run_job_t *job, int r, int status)
{
    char why[96];
    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);

    job->ranks[r].exited = 1;
    job->live--;
    if (job->first_gone < 0)
        job->first_gone = r;
    if (code != 0 && WIFSIGNALED(status))
        job_fail(job, code, "rank %d was killed by signal %d (%s)", r, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (code != 0)
        job_fail(job, code, "rank %d exited with status %d", r, code);
    if (job->fence_waiting > 0) {
        snprintf(why, sizeof(why), "rank %d exited before reaching the fence", r);
        waiters_fail(job, 0, why);
    }
}

static int rank_of(run_job_t *job, pid_t pid)
{
    for (int r = 0; r < job->started; r++) {
        if (job->ranks[r].pid == pid)
            return r;
    }
    return -1;
}

/* Reaps every rank that exited. Before reaping, kills what the rank left in
 * its process group: the unreaped zombie keeps the group id from reuse. */
static void ranks_reap(run_job_t *job)
{
    siginfo_t si;
    int status, r;

    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
            return;
        kill(-si.si_pid, SIGKILL);
        if (waitpid(si.si_pid, &status, 0) != si.si_pid)
            return;
        r = rank_of(job, si.si_pid);
        if (r >= 0)
            rank_exited(job, r, status);
    }
}

static void job_signal(run_job_t *job, int sig)
{
    if (job->signals++ > 0) {
        run_log("got %s again; killing the job now", strsignal(sig));
        ranks_signal(job, SIGKILL);
        return;
    }
    job_fail(job, 128 + sig, "got signal %d (%s)", sig, strsignal(sig));
}

static void signals_read(run_job_t *job)
{
    struct signalfd_siginfo si;

    while (read(job->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            ranks_reap(job);
        else
            job_signal(job, (int)si.ssi_signo);
    }
}

static void timers_check(run_job_t *job)
{
    int64_t now = now_ms();

    if (job->timeout_at != 0 && now >= job->timeout_at) {
        job->timeout_at = 0;
        job_fail(job, RUN_EXIT_TIMEOUT, "timed out after %g s", job->opts.timeout_s);
    }
    if (job->kill_at != 0 && now >= job->kill_at) {
        job->kill_at = 0;
        run_log("ranks still running %d ms after SIGTERM; sending SIGKILL", RUN_KILL_GRACE_MS);
        ranks_signal(job, SIGKILL);
    }
}

/* ------------------------------------------------------- key-value store */

static run_kv_t **kv_bucket(run_job_t *job, const char *key)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */

    for (const char *p = key; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    return &job->buckets[util_hash64(h) & (job->nbuckets - 1)];
}

static run_kv_t *kv_find(run_job_t *job, const char *key)
{
    run_kv_t *kv = *kv_bucket(job, key);

    while (kv != NULL && strcmp(kv->key, key) != 0)
        kv = kv->next;
    return kv;
}

/* Stores or replaces; returns NULL with a reason when it cannot. */
static run_kv_t *kv_store(run_job_t *job, const char *key, const char *value, const char **why)
{
    run_kv_t *kv = kv_find(job, key);
    size_t klen = strlen(key), vlen = strlen(value);
    size_t old = kv != NULL ? strlen(kv->value) : 0;
    char *v;

    if (job->store_bytes - old + vlen + (kv == NULL ? klen : 0) > RUN_STORE_MAX) {
        *why = "the key-value store is full";
        return NULL;
    }
    *why = "tmxrun is out of memory";
    v = strdup(value);
    if (v == NULL)
        return NULL;
    if (kv == NULL) {
        run_kv_t **b = kv_bucket(job, key);

        kv = malloc(sizeof(*kv) + klen + 1);
        if (kv == NULL)
            goto err_free_value;
        memcpy(kv->key, key, klen + 1);
        kv->value = NULL;
        kv->next = *b;
        *b = kv;
        job->store_bytes += klen;
    }
    free(kv->value);
    kv->value = v;
    job->store_bytes += vlen - old;
    return kv;

err_free_value:
    free(v);
    return NULL;
}

static void kv_free_all(run_job_t *job)
{
    for (size_t i = 0; job->buckets != NULL && i < job->nbuckets; i++) {
        while (job->buckets[i] != NULL) {
            run_kv_t *kv = job->buckets[i];

            job->buckets[i] = kv->next;
            free(kv->value);
            free(kv);
        }
    }
    free(job->buckets);
    job->buckets = NULL;
}

/* ------------------------------------------------------------ connections */

static void conn_flush(run_conn_t *c)
{
    while (c->out_len > 0 && !c->dead) {
        ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            c->dead = 1;
        if (n <= 0)
            return;
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
    }
}

/* Queues "word[ arg]\n" and sends what the socket takes. */
static void conn_reply(run_conn_t *c, const char *word, const char *arg)
{
    size_t wl = strlen(word), al = arg != NULL ? strlen(arg) + 1 : 0;
    size_t need = c->out_len + wl + al + 1;

    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 256;
        char *out;

        while (cap < need)
            cap *= 2;
        out = realloc(c->out, cap);
        if (out == NULL) {
            c->dead = 1;
            return;
        }
        c->out = out;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, word, wl);
    if (arg != NULL) {
        c->out[c->out_len + wl] = ' ';
        memcpy(c->out + c->out_len + wl + 1, arg, al - 1);
    }
    c->out[need - 1] = '\n';
    c->out_len = need;
    conn_flush(c);
}

static void conn_error(run_conn_t *c, const char *req, size_t len, const char *reason)
{
    char shown[64];

    run_log("kvs: bad request from pid %d: %s: '%s'", (int)c->pid, reason,
            printable(req, len, shown, sizeof(shown)));
    conn_reply(c, "ERR", reason);
}

static void kvs_put(run_job_t *job, run_conn_t *c, const char *key, const char *value)
{
    const char *why;
    run_kv_t *kv = kv_store(job, key, value, &why);

    if (kv == NULL) {
        run_log("kvs: PUT %.64s from pid %d: %s", key, (int)c->pid, why);
        conn_reply(c, "ERR", why);
        return;
    }
    conn_reply(c, "OK", NULL);
    for (size_t i = 0; i < job->nconns; i++) {
        run_conn_t *w = job->conns[i];

        if (w->state == CONN_WAIT_GET && strcmp(w->wait_key, key) == 0) {
            conn_reply(w, "VAL", kv->value);
            free(w->wait_key);
            w->wait_key = NULL;
            w->state = CONN_READY;
        }
    }
}

static void kvs_get(run_job_t *job, run_conn_t *c, const char *key)
{
    run_kv_t *kv = kv_find(job, key);

    if (kv != NULL) {
        conn_reply(c, "VAL", kv->value);
    } else if (job->fail_reason[0] != '\0') {
        conn_reply(c, "ERR", job->fail_reason);
    } else if ((c->wait_key = strdup(key)) == NULL) {
        conn_reply(c, "ERR", "tmxrun is out of memory");
    } else {
        c->state = CONN_WAIT_GET;
    }
}

static void kvs_fence(run_job_t *job, run_conn_t *c)
{
    char why[96];

    if (job->fail_reason[0] != '\0') {
        conn_reply(c, "ERR", job->fail_reason);
        return;
    }
    if (job->first_gone >= 0) {
        snprintf(why, sizeof(why), "rank %d exited before reaching the fence", job->first_gone);
        conn_reply(c, "ERR", why);
        return;
    }
    c->state = CONN_WAIT_FENCE;
    if (++job->fence_waiting < (size_t)job->opts.nranks)
        return;
    for (size_t i = 0; i < job->nconns; i++) {
        if (job->conns[i]->state == CONN_WAIT_FENCE) {
            conn_reply(job->conns[i], "OK", NULL);
            job->conns[i]->state = CONN_READY;
        }
    }
    job->fence_waiting = 0;
}

/* Splits line[0..len) at single spaces, NUL-terminating each token (line[len]
 * must be writable). Returns the token count, max+1 if there are more. */
static size_t split(char *line, size_t len, char **tok, size_t *tlen, size_t max)
{
    size_t n = 0, start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i < len && line[i] != ' ')
            continue;
        if (n == max)
            return max + 1;
        tok[n] = line + start;
        tlen[n++] = i - start;
        line[i] = '\0';
        start = i + 1;
    }
    return n;
}

static int is_cmd(const char *tok, size_t len, const char *cmd)
{
    return len == strlen(cmd) && memcmp(tok, cmd, len) == 0;
}

static void kvs_request(run_job_t *job, run_conn_t *c, char *line, size_t len)
{
    char shown[64];
    char *tok[3];
    size_t tlen[3];
    size_t n;

    printable(line, len, shown, sizeof(shown));
    n = split(line, len, tok, tlen, 3);
    if (is_cmd(tok[0], tlen[0], "PUT") && n == 3 && boot_kvs_token_ok(tok[1], tlen[1]) &&
        boot_kvs_token_ok(tok[2], tlen[2]))
        kvs_put(job, c, tok[1], tok[2]);
    else if (is_cmd(tok[0], tlen[0], "GET") && n == 2 && boot_kvs_token_ok(tok[1], tlen[1]))
        kvs_get(job, c, tok[1]);
    else if (is_cmd(tok[0], tlen[0], "FENCE") && n == 1)
        kvs_fence(job, c);
    else if (is_cmd(tok[0], tlen[0], "PUT") || is_cmd(tok[0], tlen[0], "GET"))
        conn_error(c, shown, strlen(shown), "expected PUT <key> <value> or GET <key>, "
                                            "tokens of printable characters");
    else
        conn_error(c, shown, strlen(shown), "expected PUT, GET or FENCE");
}

static void conn_consume(run_conn_t *c, size_t n)
{
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

/* Handles the complete requests buffered, in order, until one has to wait.
 * Returns how many were handled. */
static int conn_run(run_job_t *job, run_conn_t *c)
{
    int handled = 0;
    char *nl;

    while (!c->dead && c->state == CONN_READY && c->out_len < RUN_OUT_HIGH &&
           (nl = memchr(c->in, '\n', c->in_len)) != NULL) {
        size_t len = (size_t)(nl - c->in);

        *nl = '\0';
        if (!c->skipping)
            kvs_request(job, c, c->in, len);
        c->skipping = 0;
        conn_consume(c, len + 1);
        handled++;
    }
    if (c->in_len == sizeof(c->in) && memchr(c->in, '\n', c->in_len) == NULL) {
        if (!c->skipping)
            conn_error(c, c->in, 32, "request longer than the protocol allows");
        c->skipping = 1;
        c->in_len = 0;
    }
    if (c->eof && (c->state != CONN_READY || memchr(c->in, '\n', c->in_len) == NULL))
        c->dead = 1;
    return handled;
}

static void conn_event(run_conn_t *c, short revents)
{
    ssize_t n;

    if (revents & POLLOUT)
        conn_flush(c);
    if (!(revents & ~POLLOUT))
        return;
    if (c->in_len == sizeof(c->in)) {
        if (revents & (POLLHUP | POLLERR))
            c->dead = 1;
        return;
    }
    n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, MSG_DONTWAIT);
    if (n > 0)
        c->in_len += (size_t)n;
    else if (n == 0)
        c->eof = 1;
    else if (errno != EAGAIN && errno != EINTR)
        c->dead = 1;
}

static void conn_free(run_job_t *job, run_conn_t *c)
{
    if (c->state == CONN_WAIT_FENCE)
        job->fence_waiting--;
    close(c->fd);
    free(c->wait_key);
    free(c->out);
    free(c);
}

static void conns_accept(run_job_t *job)
{
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    run_conn_t *c;
    int fd;

    while ((fd = accept4(job->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        c = job->nconns < job->max_conns ? calloc(1, sizeof(*c)) : NULL;
        if (c == NULL) {
            run_log("kvs: refusing a connection: %zu open, limit %zu", job->nconns,
                    job->max_conns);
            close(fd);
            continue;
        }
        c->fd = fd;
        cred.pid = 0;
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen);
        c->pid = cred.pid;
        job->conns[job->nconns++] = c;
    }
}

/* Runs every connection until none can go further (a PUT may wake a GET
 * whose connection has requests buffered behind it), then frees the dead. */
static void conns_run(run_job_t *job)
{
    int progress = 1;

    while (progress) {
        progress = 0;
        for (size_t i = 0; i < job->nconns; i++)
            progress += conn_run(job, job->conns[i]);
    }
    for (size_t i = 0; i < job->nconns;) {
        if (job->conns[i]->dead) {
            conn_free(job, job->conns[i]);
            job->conns[i] = job->conns[--job->nconns];
        } else {
            i++;
        }
    }
}

/* --------------------------------------------------------------- the loop */

static size_t poll_add(run_job_t *job, size_t n, int fd, short events, run_poll_kind_t kind,
                       void *obj)
{
    job->pfds[n] = (struct pollfd){.fd = fd, .events = events};
    job->tags[n] = (run_poll_tag_t){.kind = kind, .obj = obj};
    return n + 1;
}

static size_t poll_build(run_job_t *job)
{
    size_t n = 0;

    n = poll_add(job, n, job->sig_fd, POLLIN, POLL_SIGNAL, NULL);
    n = poll_add(job, n, job->listen_fd, POLLIN, POLL_LISTEN, NULL);
    for (int r = 0; r < job->started; r++) {
        run_rank_t *rk = &job->ranks[r];

        if (rk->out.fd >= 0)
            n = poll_add(job, n, rk->out.fd, POLLIN, POLL_STREAM, &rk->out);
        if (rk->err.fd >= 0)
            n = poll_add(job, n, rk->err.fd, POLLIN, POLL_STREAM, &rk->err);
    }
    for (size_t i = 0; i < job->nconns; i++) {
        run_conn_t *c = job->conns[i];
        short ev = (short)((c->eof ? 0 : POLLIN) | (c->out_len > 0 ? POLLOUT : 0));

        n = poll_add(job, n, c->fd, ev, POLL_CONN, c);
    }
    return n;
}

static int poll_timeout(const run_job_t *job)
{
    int64_t next = 0, now = now_ms();

    if (job->timeout_at != 0)
        next = job->timeout_at;
    if (job->kill_at != 0 && (next == 0 || job->kill_at < next))
        next = job->kill_at;
    if (next == 0)
        return -1;
    return next <= now ? 0 : (int)(next - now);
}

static void poll_dispatch(run_job_t *job, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        short rev = job->pfds[i].revents;

        if (rev == 0)
            continue;
        switch (job->tags[i].kind) {
        case POLL_SIGNAL:
            signals_read(job);
            break;
        case POLL_LISTEN:
            conns_accept(job);
            break;
        case POLL_STREAM:
            stream_read(job, job->tags[i].obj);
            break;
        case POLL_CONN:
            conn_event(job->tags[i].obj, rev);
            break;
        }
    }
}

static void job_loop(run_job_t *job)
{
    while (job->live > 0) {
        size_t n = poll_build(job);

        if (poll(job->pfds, n, poll_timeout(job)) < 0 && errno != EINTR) {
            run_log("poll: %s; killing the job", strerror(errno));
            job->exit_code = job->exit_code ? job->exit_code : RUN_EXIT_INTERNAL;
            ranks_signal(job, SIGKILL);
            while (job->live > 0 && waitpid(-1, NULL, 0) > 0)
                job->live--;
            return;
        }
        timers_check(job);
        poll_dispatch(job, n);
        conns_run(job);
    }
}

/* ------------------------------------------------------------- the ranks */

static void rank_setenv(const run_job_t *job, int r)
{
    char num[16];

    snprintf(num, sizeof(num), "%d", r);
    setenv("TMX_RANK", num, 1);
    snprintf(num, sizeof(num), "%d", job->opts.nranks);
    setenv("TMX_SIZE", num, 1);
    setenv("TMX_JOBID", job->jobid, 1);
    setenv("TMX_KVS", job->kvs_addr, 1);
}

/* In the child: never returns. */
static void rank_exec(const run_job_t *job, int r, int out_fd, int err_fd)
{
    int err;

    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != job->self)
        _exit(RUN_EXIT_INTERNAL); /* tmxrun is already gone */
    setpgid(0, 0);
    if (dup2(job->null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(RUN_EXIT_INTERNAL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &job->old_mask, NULL);
    setrlimit(RLIMIT_NOFILE, &job->nofile);
    rank_setenv(job, r);
    execvp(job->opts.argv[0], job->opts.argv);
    err = errno;
    fprintf(stderr, "tmxrun: rank %d: cannot run '%s': %s\n", r, job->opts.argv[0],
            strerror(err));
    _exit(err == ENOENT ? 127 : 126);
}

static void stream_init(run_stream_t *s, int fd, int out_fd, int rank)
{
    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->out_fd = out_fd;
    s->rank = rank;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int rank_spawn(run_job_t *job, int r)
{
    int outp[2], errp[2];
    int err;
    pid_t pid;

    if (pipe2(outp, O_CLOEXEC) != 0) {
        err = errno;
        goto err_fail_job;
    }
    if (pipe2(errp, O_CLOEXEC) != 0) {
        err = errno;
        goto err_close_out_pipe;
    }
    pid = fork();
    if (pid < 0) {
        err = errno;
        goto err_close_err_pipe;
    }
    if (pid == 0)
        rank_exec(job, r, outp[1], errp[1]);
    setpgid(pid, pid); /* also here: no window in which kill(-pid) misses */
    close(outp[1]);
    close(errp[1]);
    job->ranks[r].pid = pid;
    stream_init(&job->ranks[r].out, outp[0], 1, r);
    stream_init(&job->ranks[r].err, errp[0], 2, r);
    job->started++;
    job->live++;
    return 0;

err_close_err_pipe:
    close(errp[0]);
    close(errp[1]);
err_close_out_pipe:
    close(outp[0]);
    close(outp[1]);
err_fail_job:
    job_fail(job, RUN_EXIT_INTERNAL, "cannot start rank %d: %s", r, strerror(err));
    return -1;
}

static void ranks_spawn(run_job_t *job)
{
    for (int r = 0; r < job->opts.nranks && job->fail_reason[0] == '\0'; r++) {
        if (rank_spawn(job, r) != 0)
            return;
    }
}

/* ------------------------------------------------------ set-up, tear-down */

/* Every descriptor tmxrun may hold: the rank pipes, the connections, a few
 * more. Raises the soft limit as far as needed and allowed. */
static int fds_reserve(run_job_t *job)
{
    rlim_t pipes = 2 * (rlim_t)job->opts.nranks, extra = 32;
    rlim_t conns = RUN_CONNS_PER_RANK * (rlim_t)job->opts.nranks + 16;
    rlim_t want = pipes + conns + extra;
    struct rlimit lim;

    getrlimit(RLIMIT_NOFILE, &job->nofile);
    lim = job->nofile;
    if (lim.rlim_cur < want) {
        lim.rlim_cur = lim.rlim_max < want ? lim.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &lim);
        getrlimit(RLIMIT_NOFILE, &lim);
    }
    if (lim.rlim_cur < pipes + extra + (rlim_t)job->opts.nranks) {
        run_log("%d ranks need about %llu file descriptors; the limit is %llu (ulimit -n)",
                job->opts.nranks, (unsigned long long)want, (unsigned long long)lim.rlim_cur);
        return -1;
    }
    job->max_conns = (size_t)(lim.rlim_cur - pipes - extra);
    if (job->max_conns > conns)
        job->max_conns = (size_t)conns;
    return 0;
}

/* SIGCHLD and the stop signals arrive through a signalfd; SIGPIPE is
 * ignored (a client or our reader may go away). */
static int signals_init(run_job_t *job)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    signal(SIGCHLD, SIG_DFL); /* SIG_IGN inherited would reap for us */
    signal(SIGPIPE, SIG_IGN);
    if (sigprocmask(SIG_BLOCK, &set, &job->old_mask) != 0)
        return -1;
    job->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return job->sig_fd >= 0 ? 0 : -1;
}

static int kvs_listen(run_job_t *job)
{
    boot_addr_t a;

    snprintf(job->kvs_addr, sizeof(job->kvs_addr), "unix:@tmx-kvs-%d-%08x", (int)job->self,
             (unsigned)random64());
    if (boot_addr_parse(job->kvs_addr, &a) != TMX_OK)
        return -1;
    job->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (job->listen_fd < 0)
        return -1;
    if (bind(job->listen_fd, (struct sockaddr *)&a.sa, a.len) != 0 ||
        listen(job->listen_fd, SOMAXCONN) != 0)
        return -1;
    return 0;
}

static int job_alloc(run_job_t *job)
{
    size_t n = (size_t)job->opts.nranks;

    job->nbuckets = 64;
    while (job->nbuckets < 4 * n)
        job->nbuckets *= 2;
    job->ranks = calloc(n, sizeof(*job->ranks));
    for (size_t r = 0; job->ranks != NULL && r < n; r++)
        job->ranks[r].out.fd = job->ranks[r].err.fd = -1;
    job->conns = calloc(job->max_conns, sizeof(*job->conns));
    job->buckets = calloc(job->nbuckets, sizeof(*job->buckets));
    job->pfds = calloc(2 + 2 * n + job->max_conns, sizeof(*job->pfds));
    job->tags = calloc(2 + 2 * n + job->max_conns, sizeof(*job->tags));
    if (job->ranks == NULL || job->conns == NULL || job->buckets == NULL || job->pfds == NULL ||
        job->tags == NULL)
        return -1;
    return 0;
}

/* Safe on a half-built job. */
static void job_fini(run_job_t *job)
{
    for (int r = 0; job->ranks != NULL && r < job->opts.nranks; r++) {
        stream_close(job, &job->ranks[r].out);
        stream_close(job, &job->ranks[r].err);
    }
    for (size_t i = 0; i < job->nconns; i++)
        conn_free(job, job->conns[i]);
    kv_free_all(job);
    free(job->ranks);
    free(job->conns);
    free(job->pfds);
    free(job->tags);
    if (job->listen_fd >= 0)
        close(job->listen_fd);
    if (job->sig_fd >= 0)
        close(job->sig_fd);
    if (job->null_fd >= 0)
        close(job->null_fd);
}

/* Makes sure 0, 1 and 2 are open, so that no pipe of ours lands there. */
static void std_fds_open(void)
{
    int fd;

    while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2)
        ;
    if (fd > 2)
        close(fd);
}

static int job_init(run_job_t *job)
{
    job->first_gone = -1;
    job->sig_fd = job->listen_fd = job->null_fd = -1;
    job->self = getpid();
    std_fds_open();
    snprintf(job->jobid, sizeof(job->jobid), "%016llx", (unsigned long long)random64());
    if (fds_reserve(job) != 0)
        return -1;
    if (job_alloc(job) != 0) {
        run_log("out of memory");
        return -1;
    }
    job->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (job->null_fd < 0 || signals_init(job) != 0 || kvs_listen(job) != 0) {
        run_log("cannot set up: %s", strerror(errno));
        return -1;
    }
    if (job->opts.timeout_s > 0)
        job->timeout_at = now_ms() + (int64_t)ceil(job->opts.timeout_s * 1000);
    return 0;
}

int main(int argc, char **argv)
{
    run_job_t job = {0};
    int rc;

    switch (opts_parse(argc, argv, &job.opts)) {
    case PARSE_HELP:
        usage(stdout);
        return 0;
    case PARSE_BAD:
        usage(stderr);
        return RUN_EXIT_USAGE;
    case PARSE_RUN:
        break;
    }
    if (job_init(&job) != 0) {
        job_fini(&job);
        return RUN_EXIT_INTERNAL;
    }
    ranks_spawn(&job);
    job_loop(&job);
    streams_drain(&job);
    rc = job.exit_code;
    job_fini(&job);
    return rc;
}
