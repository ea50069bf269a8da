/*
 * tmxrun: starting the ranks.
 *
 * Every rank is a child of tmxrun that leads its own process group (so that
 * signals reach whatever it starts) and has PR_SET_PDEATHSIG(SIGKILL) (so
 * that it dies with tmxrun even when tmxrun is killed by SIGKILL).
 *
 * Without --hosts the child execs the program with TMX_RANK, TMX_SIZE,
 * TMX_JOBID and TMX_KVS set. With --hosts it runs, through /bin/sh -c,
 *
 *   exec AGENT CMD      where CMD is
 *   env TMX_RANK=.. TMX_SIZE=.. TMX_JOBID=.. TMX_KVS=.. TMX_HOST=.. \
 *       [tmxrun's own TMX_* variables] program args...
 *
 * AGENT is the --agent command with {host} replaced by the rank's host;
 * every word tmxrun adds is quoted for the shell. The variables travel in
 * the command line, since ssh does not carry the environment. An agent
 * that runs its arguments as a command (env, ip netns exec) takes CMD as
 * is; one that hands them to another shell, as ssh does, would split the
 * quoted words once more: it takes CMD as one quoted word where the agent
 * says {cmd} instead ('ssh {host} {cmd}').
 *
 * "exec" makes the agent the child that tmxrun watches and signals; an
 * agent that execs what follows (env, ip netns exec) makes it the rank
 * itself; ssh stands in for the remote rank.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "tmxrun.h"

/* Linux's limit on the length of one argument (MAX_ARG_STRLEN), which the
 * command given to sh -c must respect. */
#define RUN_CMD_MAX (32 * 4096)

/* ------------------------------------------------------ the agent command */

/* A growing string. After a failed allocation it stays failed and empty. */
typedef struct run_buf {
    char *p;
    size_t len;
    size_t cap;
    int failed;
} run_buf_t;

static void buf_add(run_buf_t *b, const char *s, size_t n)
{
    size_t cap = b->cap ? b->cap : 256;
    char *p;

    if (b->failed)
        return;
    while (cap < b->len + n + 1)
        cap *= 2;
    if (cap > b->cap) {
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_str(run_buf_t *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

/* True when no shell treats any character of s specially, so that s may
 * go unquoted (which keeps the command readable in ps). */
static int word_plain(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("_./:=@%+,-", *s) != NULL))
            return 0;
    }
    return 1;
}

/* Appends s as one shell word: as it is when plain, else in single quotes,
 * each ' in it written as '\''. */
static void buf_word(run_buf_t *b, const char *s)
{
    const char *q;

    if (word_plain(s)) {
        buf_str(b, s);
        return;
    }
    buf_str(b, "'");
    while ((q = strchr(s, '\'')) != NULL) {
        buf_add(b, s, (size_t)(q - s));
        buf_str(b, "'\\''");
        s = q + 1;
    }
    buf_str(b, s);
    buf_str(b, "'");
}

/* Appends " name=value", the value quoted. */
static void buf_assign(run_buf_t *b, const char *name, const char *value)
{
    buf_str(b, " ");
    buf_str(b, name);
    buf_str(b, "=");
    buf_word(b, value);
}

/* The agent with each {host} replaced by the quoted host name and each
 * {cmd} by the quoted rank command; without {cmd}, the rank command
 * follows it. */
static void agent_expand(run_buf_t *b, const char *agent, const char *host, const char *cmd)
{
    int cmd_placed = 0;
    const char *at;

    while ((at = strchr(agent, '{')) != NULL) {
        buf_add(b, agent, (size_t)(at - agent));
        if (strncmp(at, "{host}", 6) == 0) {
            buf_word(b, host);
            agent = at + 6;
        } else if (strncmp(at, "{cmd}", 5) == 0) {
            buf_word(b, cmd);
            cmd_placed = 1;
            agent = at + 5;
        } else {
            buf_add(b, at, 1);
            agent = at + 1;
        }
    }
    buf_str(b, agent);
    if (!cmd_placed) {
        buf_str(b, " ");
        buf_str(b, cmd);
    }
}

/* The variables tmxrun sets itself win over inherited ones of the same
 * name (tmxrun may run inside another job). */
static int env_is_ours(const char *entry)
{
    static const char *const ours[] = {"TMX_RANK=", "TMX_SIZE=", "TMX_JOBID=", "TMX_KVS=",
                                       "TMX_HOST="};

    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
        if (strncmp(entry, ours[i], strlen(ours[i])) == 0)
            return 1;
    }
    return 0;
}

/* tmxrun's own TMX_* settings (TMX_LOG_LEVEL, TMX_TRANSPORTS, ...), which
 * ranks started here would inherit. */
static void env_forward(run_buf_t *b)
{
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "TMX_", 4) == 0 && strchr(*e, '=') != NULL && !env_is_ours(*e)) {
            buf_str(b, " ");
            buf_word(b, *e);
        }
    }
}

/* "env TMX_RANK=.. ... program args", each word quoted. */
static void rank_command(run_buf_t *b, const run_job_t *job, int r, const char *host)
{
    char num[16];

    buf_str(b, "env -u PMIX_NAMESPACE -u PMIX_RANK"); /* see rank_setenv */
    snprintf(num, sizeof(num), "%d", r);
    buf_assign(b, "TMX_RANK", num);
    snprintf(num, sizeof(num), "%d", job->opts.nranks);
    buf_assign(b, "TMX_SIZE", num);
    buf_assign(b, "TMX_JOBID", job->jobid);
    buf_assign(b, "TMX_KVS", job->kvs_addr);
    buf_assign(b, "TMX_HOST", host);
    env_forward(b);
    for (char **a = job->opts.argv; *a != NULL; a++) {
        buf_str(b, " ");
        buf_word(b, *a);
    }
}

/* Builds the command line that starts rank r on its host (see the top of
 * this file). Returns 0 or an errno value: ENOMEM, or E2BIG when the
 * command is too long for sh -c. */
static int agent_command(const run_job_t *job, int r, char **out)
{
    const char *host = job->opts.hosts[r % job->opts.nhosts];
    run_buf_t cmd = {0}, b = {0};

    rank_command(&cmd, job, r, host);
    buf_str(&b, "exec ");
    if (!cmd.failed)
        agent_expand(&b, job->opts.agent, host, cmd.p);
    free(cmd.p);
    if (cmd.failed || b.failed || b.len >= RUN_CMD_MAX) {
        free(b.p);
        return cmd.failed || b.failed ? ENOMEM : E2BIG;
    }
    *out = b.p;
    return 0;
}

int agent_probe_command(const run_job_t *job, const char *host, const char *cmd, char **out)
{
    run_buf_t b = {0};

    buf_str(&b, "exec ");
    agent_expand(&b, job->opts.agent, host, cmd);
    if (b.failed) {
        free(b.p);
        return ENOMEM;
    }
    *out = b.p;
    return 0;
}

/* -------------------------------------------------------------- the child */

static void rank_setenv(const run_job_t *job, int r)
{
    char num[16];

    /* Our ranks are no PMIx launcher's, even when tmxrun runs under one:
     * a process that finds PMIx variables beside TMX_KVS then knows that
     * a PMIx launcher started it after us, and joins that job
     * (src/boot/job.c). */
    unsetenv("PMIX_NAMESPACE");
    unsetenv("PMIX_RANK");
    snprintf(num, sizeof(num), "%d", r);
    setenv("TMX_RANK", num, 1);
    snprintf(num, sizeof(num), "%d", job->opts.nranks);
    setenv("TMX_SIZE", num, 1);
    setenv("TMX_JOBID", job->jobid, 1);
    setenv("TMX_KVS", job->kvs_addr, 1);
}

/* Everything but the exec: own process group, death with tmxrun, the
 * standard descriptors, the signal state and limits tmxrun found. */
static void child_prepare(const run_job_t *job, int in_fd, int out_fd, int err_fd)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != job->self)
        _exit(RUN_EXIT_INTERNAL); /* tmxrun is already gone */
    setpgid(0, 0);
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(RUN_EXIT_INTERNAL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGTTIN, SIG_DFL);
    sigprocmask(SIG_SETMASK, &job->old_mask, NULL);
    setrlimit(RLIMIT_NOFILE, &job->nofile);
}

/* In the child: never returns. cmd is the agent command, NULL to run the
 * program here. */
static void rank_exec(const run_job_t *job, int r, const char *cmd, int in_fd, int out_fd,
                      int err_fd)
{
    const char *what = cmd != NULL ? "/bin/sh" : job->opts.argv[0];
    int err;

    child_prepare(job, in_fd, out_fd, err_fd);
    if (cmd != NULL) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    } else {
        rank_setenv(job, r);
        execvp(job->opts.argv[0], job->opts.argv);
    }
    err = errno;
    fprintf(stderr, "tmxrun: rank %d: cannot run '%s': %s\n", r, what, strerror(err));
    _exit(err == ENOENT ? 127 : 126);
}

/* ------------------------------------------------------------- the parent */

int rank_spawn(run_job_t *job, int r)
{
    int outp[2], errp[2], inp[2] = {-1, -1};
    char *cmd = NULL;
    int err;
    pid_t pid;

    if (job->opts.hosts != NULL && (err = agent_command(job, r, &cmd)) != 0)
        goto err_fail_job;
    if (pipe2(outp, O_CLOEXEC) != 0) {
        err = errno;
        goto err_free_command;
    }
    if (pipe2(errp, O_CLOEXEC) != 0) {
        err = errno;
        goto err_close_out_pipe;
    }
    if (stdin_wanted(job, r) && pipe2(inp, O_CLOEXEC) != 0) {
        err = errno;
        goto err_close_err_pipe;
    }
    pid = fork();
    if (pid < 0) {
        err = errno;
        goto err_close_in_pipe;
    }
    if (pid == 0)
        rank_exec(job, r, cmd, inp[0] >= 0 ? inp[0] : job->null_fd, outp[1], errp[1]);
    setpgid(pid, pid); /* also here: no window in which kill(-pid) misses */
    free(cmd);
    close(outp[1]);
    close(errp[1]);
    if (inp[0] >= 0) {
        close(inp[0]);
        fcntl(inp[1], F_SETFL, fcntl(inp[1], F_GETFL) | O_NONBLOCK);
        job->ranks[r].in_fd = inp[1];
    }
    job->ranks[r].pid = pid;
    stream_init(&job->ranks[r].out, outp[0], 1, r);
    stream_init(&job->ranks[r].err, errp[0], 2, r);
    job->started++;
    job->live++;
    return 0;

err_close_in_pipe:
    if (inp[0] >= 0) {
        close(inp[0]);
        close(inp[1]);
    }
err_close_err_pipe:
    close(errp[0]);
    close(errp[1]);
err_close_out_pipe:
    close(outp[0]);
    close(outp[1]);
err_free_command:
    free(cmd);
err_fail_job:
    job_fail(job, RUN_EXIT_INTERNAL, "cannot start rank %d: %s", r, strerror(err));
    return -1;
}
