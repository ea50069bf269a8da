/*
 * tmxrun: starts the N ranks of a job, on this host or through an agent
 * command on others, and serves them.
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
 * abstract socket, which vanishes with its last descriptor (on TCP for a
 * job with --hosts).
 *
 * This file: options, set-up and tear-down, the loop and the job's fate;
 * the rest is listed in tmxrun.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tmx.h"
#include "tmxrun.h"

/* ------------------------------------------------------------- utilities */

/* Once the job is set up its log lines go where the ranks' stderr goes,
 * never waiting for its reader. */
static run_job_t *log_job;

void run_log(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_job == NULL || !log_job->outq_on) {
        fprintf(stderr, "tmxrun: %s\n", msg);
        return;
    }
    len = len < 0 ? 0 : len >= (int)sizeof(msg) ? (int)sizeof(msg) - 1 : len;
    out_writev(log_job, 2,
               (struct iovec[3]){{"tmxrun: ", 8}, {msg, (size_t)len}, {"\n", 1}}, 3);
}

int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t random64(void)
{
    uint64_t r;

    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == (ssize_t)sizeof(r))
        return r;
    return tmxrun_mix64((uint64_t)now_ms() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)&r);
}

const char *printable(const char *p, size_t n, char *out, size_t cap)
{
    size_t i;

    for (i = 0; i < n && i + 1 < cap; i++)
        out[i] = (p[i] >= ' ' && p[i] <= '~') ? p[i] : '?';
    out[i] = '\0';
    return out;
}

/* --------------------------------------------------------------- options */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tmxrun -n N [options] [--] program [args...]\n"
            "Starts N copies of program (ranks 0..N-1), on this host or through an\n"
            "agent on others, with TMX_RANK, TMX_SIZE, TMX_JOBID and TMX_KVS set, and\n"
            "serves their key-value exchange.\n"
            "  -n N               number of ranks, 1..%d\n"
            "  --timeout SECONDS  stop the job after SECONDS (at most %d) and exit %d\n"
            "  -p, --tag-output   prefix every line of output with \"[rank] \"\n"
            "  --hosts H1,H2,...  start rank r on host H(r %% count) through the agent;\n"
            "                     the key-value service then listens on TCP\n"
            "  --agent 'CMD'      with --hosts: the command that runs a program on\n"
            "                     {host}, e.g. 'ip netns exec {host}' or 'ssh {host}\n"
            "                     {cmd}'; run by /bin/sh -c, followed by (or with {cmd}\n"
            "                     replaced by) env TMX_RANK=.. ... program args, quoted\n"
            "                     (tmxrun's own TMX_* variables go in the env list)\n"
            "  --kvs-addr IP      with --hosts: listen on IP only and tell the ranks\n"
            "                     to connect there (default: listen on every address,\n"
            "                     advertise the one on the route to the hosts)\n"
            "  --stdin R|all|none which ranks read tmxrun's stdin: rank R (default 0,\n"
            "                     as mpirun), every rank (each gets all of it), or\n"
            "                     none; the others read /dev/null\n"
            "  -h, --help         show this help\n"
            "Exit status: 0 when every rank exits 0;\n"
            "else the first failing rank's (128+S if killed by signal S); %d on timeout;\n"
            "128+S when tmxrun gets SIGINT, SIGTERM, SIGHUP or SIGQUIT (130 for Ctrl-C),\n"
            "which stop the job; %d on bad usage; %d when tmxrun itself fails.\n"
            "SIGUSR1 and SIGUSR2 go on to every rank's process group.\n",
            RUN_MAX_RANKS, RUN_MAX_TIMEOUT_S, RUN_EXIT_TIMEOUT, RUN_EXIT_TIMEOUT, RUN_EXIT_USAGE,
            RUN_EXIT_INTERNAL);
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
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > RUN_MAX_TIMEOUT_S) {
        fprintf(stderr, "tmxrun: --timeout '%s': expected seconds, > 0 and at most %d\n", s,
                RUN_MAX_TIMEOUT_S);
        return -1;
    }
    *out = v;
    return 0;
}

/* Splits a copy of s at commas into o->hosts; a later --hosts replaces an
 * earlier one. */
static int parse_hosts(const char *s, run_opts_t *o)
{
    char *list = strdup(s);
    char **hosts = calloc(RUN_MAX_RANKS, sizeof(*hosts));
    int n = 0;

    if (list == NULL || hosts == NULL) {
        fprintf(stderr, "tmxrun: out of memory\n");
        goto err_free;
    }
    for (char *h = list, *comma; h != NULL && n <= RUN_MAX_RANKS; h = comma) {
        if ((comma = strchr(h, ',')) != NULL)
            *comma++ = '\0';
        if (*h == '\0' || n == RUN_MAX_RANKS) {
            fprintf(stderr, "tmxrun: --hosts '%s': expected 1..%d comma-separated names\n", s,
                    RUN_MAX_RANKS);
            goto err_free;
        }
        hosts[n++] = h;
    }
    free(o->hosts_buf);
    free(o->hosts);
    o->hosts_buf = list;
    o->hosts = hosts;
    o->nhosts = n;
    return 0;

err_free:
    free(list);
    free(hosts);
    return -1;
}

static int parse_agent(const char *s, run_opts_t *o)
{
    if (strstr(s, "{host}") == NULL) {
        fprintf(stderr, "tmxrun: --agent '%s': expected a command with {host} in it\n", s);
        return -1;
    }
    o->agent = s;
    return 0;
}

static int parse_stdin(const char *s, run_opts_t *o)
{
    char *end;
    long v;

    if (strcmp(s, "all") == 0) {
        o->stdin_to = RUN_STDIN_ALL;
        return 0;
    }
    if (strcmp(s, "none") == 0) {
        o->stdin_to = RUN_STDIN_NONE;
        return 0;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0 || v >= RUN_MAX_RANKS) {
        fprintf(stderr, "tmxrun: --stdin '%s': expected a rank, 'all' or 'none'\n", s);
        return -1;
    }
    o->stdin_to = (int)v;
    return 0;
}

static int parse_kvs_addr(const char *s, run_opts_t *o)
{
    struct in_addr in;

    if (inet_pton(AF_INET, s, &in) != 1) {
        fprintf(stderr, "tmxrun: --kvs-addr '%s': expected an IPv4 address\n", s);
        return -1;
    }
    o->kvs_ip = s;
    return 0;
}

/* The options that only make sense together. */
static int opts_check(const run_opts_t *o)
{
    const char *why = NULL;

    if (o->nranks == 0)
        why = "-n N is required";
    else if (o->argv == NULL || o->argv[0] == NULL)
        why = "no program";
    else if (o->stdin_to >= o->nranks)
        why = "--stdin names a rank the job does not have";
    else if (o->hosts == NULL && (o->agent != NULL || o->kvs_ip != NULL))
        why = "--agent and --kvs-addr go with --hosts";
    else if (o->hosts != NULL && o->agent == NULL)
        why = "--hosts needs --agent, e.g. --agent 'ssh {host}'";
    else if (o->hosts != NULL && strchr(o->argv[0], '=') != NULL)
        why = "with --hosts the program's name cannot have '=' in it (env would take it for "
              "a variable)";
    if (why != NULL)
        fprintf(stderr, "tmxrun: %s\n", why);
    return why != NULL ? -1 : 0;
}

static int opt_apply(int c, const char *arg, run_opts_t *o)
{
    switch (c) {
    case 'n':
        return parse_ranks(arg, &o->nranks);
    case 't':
        return parse_timeout(arg, &o->timeout_s);
    case 'p':
        o->tag_output = 1;
        return 0;
    case 'H':
        return parse_hosts(arg, o);
    case 'A':
        return parse_agent(arg, o);
    case 'K':
        return parse_kvs_addr(arg, o);
    case 'I':
        return parse_stdin(arg, o);
    default:
        return -1; /* '?' or ':': getopt has said what is wrong */
    }
}

typedef enum run_parse { PARSE_RUN, PARSE_HELP, PARSE_BAD } run_parse_t;

static void opts_free(run_opts_t *o)
{
    free(o->hosts);
    free(o->hosts_buf);
    o->hosts = NULL;
    o->hosts_buf = NULL;
}

/* Whatever it returns, o may hold memory: free it with opts_free(). */
static run_parse_t opts_parse(int argc, char **argv, run_opts_t *o)
{
    static const struct option longs[] = {{"timeout", required_argument, NULL, 't'},
                                          {"tag-output", no_argument, NULL, 'p'},
                                          {"hosts", required_argument, NULL, 'H'},
                                          {"agent", required_argument, NULL, 'A'},
                                          {"kvs-addr", required_argument, NULL, 'K'},
                                          {"stdin", required_argument, NULL, 'I'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c;

    /* '+': stop at the program's name, so its own options stay its own. */
    while ((c = getopt_long(argc, argv, "+n:ph", longs, NULL)) != -1) {
        if (c == 'h')
            return PARSE_HELP;
        if (opt_apply(c, optarg, o) != 0)
            return PARSE_BAD;
    }
    o->argv = argv + optind;
    return opts_check(o) == 0 ? PARSE_RUN : PARSE_BAD;
}

/* ---------------------------------------------------------- the job's fate */

static void ranks_signal(run_job_t *job, int sig)
{
    for (int r = 0; r < job->started; r++) {
        if (!job->ranks[r].exited && kill(-job->ranks[r].pid, sig) != 0)
            kill(job->ranks[r].pid, sig);
    }
}

void job_fail(run_job_t *job, int code, const char *fmt, ...)
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
    stdin_close(job, r);
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
        else if (si.ssi_signo == SIGCONT)
            continue; /* the loop looks at the terminal again */
        else if (si.ssi_signo == SIGUSR1 || si.ssi_signo == SIGUSR2)
            ranks_signal(job, (int)si.ssi_signo); /* the ranks', as mpirun and srun forward them */
        else
            job_signal(job, (int)si.ssi_signo);
    }
}

static void timers_check(run_job_t *job)
{
    int64_t now = now_ms();

    if (job->timeout_at != 0 && now >= job->timeout_at) {
        job->timeout_at = 0;
        job->timed_out = 1;
        job_fail(job, RUN_EXIT_TIMEOUT, "timed out after %g s", job->opts.timeout_s);
    }
    if (job->kill_at != 0 && now >= job->kill_at) {
        job->kill_at = 0;
        run_log("ranks still running %d ms after SIGTERM; sending SIGKILL", RUN_KILL_GRACE_MS);
        ranks_signal(job, SIGKILL);
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

        /* not while their output waits for its reader (tmxrun_io.c) */
        if (rk->out.fd >= 0 && !outq_full(job, 1))
            n = poll_add(job, n, rk->out.fd, POLLIN, POLL_STREAM, &rk->out);
        if (rk->err.fd >= 0 && !outq_full(job, 2))
            n = poll_add(job, n, rk->err.fd, POLLIN, POLL_STREAM, &rk->err);
    }
    for (int fd = 1; fd <= 2; fd++) {
        if (outq_poll_fd(job, fd) >= 0)
            n = poll_add(job, n, outq_poll_fd(job, fd), POLLOUT, POLL_OUTQ, &job->outq[fd]);
    }
    if (stdin_pollable(job))
        n = poll_add(job, n, 0, POLLIN, POLL_STDIN, NULL);
    for (int r = 0; r < job->started; r++) {
        if (job->ranks[r].in_fd >= 0 && job->ranks[r].in_off < job->in_len)
            n = poll_add(job, n, job->ranks[r].in_fd, POLLOUT, POLL_STDIN_RANK, &job->ranks[r]);
    }
    for (size_t i = 0; i < job->nconns; i++) {
        run_conn_t *c = job->conns[i];
        /* A full input buffer waits for its requests to be handled (a
         * deferred GET or FENCE, unread replies): POLLIN would be ready at
         * once, and for ever. A hang-up is reported without asking. */
        int more_in = !c->eof && c->in_len < sizeof(c->in);
        short ev = (short)((more_in ? POLLIN : 0) | (c->out_len > 0 ? POLLOUT : 0));

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
    if (next <= now)
        return 0;
    return next - now > INT_MAX ? INT_MAX : (int)(next - now); /* poll() sleeps for ever below 0 */
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
            if (!outq_full(job, ((run_stream_t *)job->tags[i].obj)->out_fd))
                stream_read(job, job->tags[i].obj);
            break;
        case POLL_OUTQ:
            outq_flush(job, job->tags[i].obj == &job->outq[1] ? 1 : 2);
            break;
        case POLL_STDIN:
            stdin_read(job);
            break;
        case POLL_STDIN_RANK:
            stdin_feed(job, (int)((run_rank_t *)job->tags[i].obj - job->ranks));
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
    rlim_t pipes = 3 * (rlim_t)job->opts.nranks, extra = 32;
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

/* SIGCHLD, the stop signals and the ones forwarded to the ranks (SIGUSR1,
 * SIGUSR2) arrive through a signalfd; SIGPIPE is ignored (a client or our
 * reader may go away). */
static int signals_init(run_job_t *job)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGQUIT); /* Ctrl-\: by default we would die, and leave the ranks' children */
    sigaddset(&set, SIGCONT); /* brought to the foreground: stdin may be read again */
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    signal(SIGCHLD, SIG_DFL); /* SIG_IGN inherited would reap for us */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTTIN, SIG_IGN); /* a read of the terminal from its background fails instead */
    if (sigprocmask(SIG_BLOCK, &set, &job->old_mask) != 0)
        return -1;
    job->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return job->sig_fd >= 0 ? 0 : -1;
}


static int job_alloc(run_job_t *job)
{
    size_t n = (size_t)job->opts.nranks;

    job->nbuckets = 64;
    while (job->nbuckets < 4 * n)
        job->nbuckets *= 2;
    job->ranks = calloc(n, sizeof(*job->ranks));
    for (size_t r = 0; job->ranks != NULL && r < n; r++)
        job->ranks[r].out.fd = job->ranks[r].err.fd = job->ranks[r].in_fd = -1;
    job->conns = calloc(job->max_conns, sizeof(*job->conns));
    job->buckets = calloc(job->nbuckets, sizeof(*job->buckets));
    job->pfds = calloc(5 + 3 * n + job->max_conns, sizeof(*job->pfds));
    job->tags = calloc(5 + 3 * n + job->max_conns, sizeof(*job->tags));
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
        stdin_close(job, r);
    }
    free(job->in_buf);
    kvs_fini(job);
    outq_fini(job);
    free(job->ranks);
    free(job->conns);
    free(job->pfds);
    free(job->tags);
    opts_free(&job->opts);
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
    outq_init(job);
    log_job = job;
    job->in_tty = isatty(0);
    snprintf(job->jobid, sizeof(job->jobid), "%016llx", (unsigned long long)random64());
    if (fds_reserve(job) != 0)
        return -1;
    if (job_alloc(job) != 0) {
        run_log("out of memory");
        return -1;
    }
    job->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (job->null_fd < 0 || signals_init(job) != 0) {
        run_log("cannot set up: %s", strerror(errno));
        return -1;
    }
    if (kvs_listen(job) != 0)
        return -1;
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
        opts_free(&job.opts);
        return 0;
    case PARSE_BAD:
        usage(stderr);
        opts_free(&job.opts);
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
    /* ranks killed whole leave the table of their shared UDP port behind */
    (void)tmx_host_sweep(job.jobid);
    output_finish(&job, signals_read);
    rc = job.exit_code;
    job_fini(&job);
    return rc;
}
