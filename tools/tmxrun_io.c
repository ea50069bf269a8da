/* tmxrun: forwarding the ranks' stdout and stderr to tmxrun's own, line by
 * line, so that the lines of different ranks never run into each other;
 * with --tag-output each line says whose it is.
 *
 * tmxrun never waits in a write for whoever reads its output: a pager or
 * a stopped pipeline would leave Ctrl-C, the timeout and the ranks'
 * requests unanswered. What the reader does not take at once waits in a
 * queue per output, and while RUN_OUTQ_HIGH bytes wait the ranks' pipes
 * into it are not read, so that the ranks wait in their writes instead. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "tmxrun.h"

enum out_how {
    OUT_FILE,     /* a regular file or a block device: no reader to wait for */
    OUT_NONBLOCK, /* a pipe, FIFO or terminal, opened again with O_NONBLOCK */
    OUT_SOCKET,   /* a socket: send(MSG_DONTWAIT) */
    OUT_POLLED    /* could not be opened again: written PIPE_BUF bytes at a time when poll()
                     says it takes them (a pipe then takes them without waiting) */
};

/* stdout and stderr sharing one file (2>&1) share one queue, so that a
 * line of one never goes out in the middle of a line of the other. */
static run_outq_t *outq_of(run_job_t *job, int fd)
{
    return fd == 2 && job->out_same ? &job->outq[1] : &job->outq[fd];
}

static void outq_open(run_outq_t *q, int fd, const struct stat *st)
{
    char path[32];
    int nfd;

    q->fd = fd;
    q->how = OUT_POLLED;
    if (S_ISREG(st->st_mode) || S_ISBLK(st->st_mode)) {
        q->how = OUT_FILE;
        return;
    }
    if (S_ISSOCK(st->st_mode)) {
        q->how = OUT_SOCKET;
        return;
    }
    /* O_NONBLOCK on the description we share with the shell would be the
     * shell's too: a description of our own */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    nfd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (nfd >= 0) {
        q->fd = nfd;
        q->how = OUT_NONBLOCK;
    }
}

void outq_init(run_job_t *job)
{
    struct stat st[3];

    for (int fd = 1; fd <= 2; fd++) {
        job->outq[fd].fd = fd;
        job->outq[fd].how = OUT_FILE; /* not a descriptor fstat knows: write and see */
        if (fstat(fd, &st[fd]) == 0)
            outq_open(&job->outq[fd], fd, &st[fd]);
        else
            st[fd].st_ino = 0;
    }
    job->out_same = st[1].st_ino != 0 && st[1].st_dev == st[2].st_dev && st[1].st_ino == st[2].st_ino;
    job->outq_on = 1;
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
    size_t n = 0;

    for (int i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    return n;
}

/* Writes what goes at once: bytes written, or -1 when the reader is gone. */
static ssize_t out_try(run_outq_t *q, const struct iovec *iov, int cnt)
{
    struct iovec cut[4];
    struct pollfd p = {.fd = q->fd, .events = POLLOUT};
    size_t room = PIPE_BUF;
    ssize_t n;

    for (;;) {
        switch (q->how) {
        case OUT_SOCKET:
            n = sendmsg(q->fd, &(struct msghdr){.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt},
                        MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0 && errno == ENOTSOCK) {
                q->how = OUT_POLLED;
                continue;
            }
            break;
        case OUT_POLLED:
            if (poll(&p, 1, 0) == 0)
                return 0;
            /* at most PIPE_BUF bytes, which a pipe with room takes whole */
            cnt = cnt < 4 ? cnt : 4;
            for (int i = 0; i < cnt; i++) {
                cut[i] = iov[i];
                cut[i].iov_len = cut[i].iov_len < room ? cut[i].iov_len : room;
                room -= cut[i].iov_len;
            }
            n = writev(q->fd, cut, cnt);
            break;
        default:
            n = writev(q->fd, iov, cnt);
            break;
        }
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
}

static void outq_break(run_outq_t *q)
{
    q->broken = 1;
    free(q->buf);
    q->buf = NULL;
    q->off = q->len = q->cap = 0;
}

static void outq_append(run_outq_t *q, const struct iovec *iov, int cnt, size_t skip)
{
    size_t add = iov_total(iov, cnt) - skip, cap = q->cap ? q->cap : 4096;
    char *buf;

    if (add == 0)
        return;
    if (q->off > 0 && q->len + add > q->cap) {
        memmove(q->buf, q->buf + q->off, q->len - q->off);
        q->len -= q->off;
        q->off = 0;
    }
    while (cap < q->len + add)
        cap *= 2;
    if (cap > q->cap) {
        if ((buf = realloc(q->buf, cap)) == NULL) {
            q->lost += add;
            return;
        }
        q->buf = buf;
        q->cap = cap;
    }
    for (int i = 0; i < cnt; i++) {
        size_t k = skip < iov[i].iov_len ? skip : iov[i].iov_len;

        if (iov[i].iov_len > k) /* an empty piece may have no base */
            memcpy(q->buf + q->len, (const char *)iov[i].iov_base + k, iov[i].iov_len - k);
        q->len += iov[i].iov_len - k;
        skip -= k;
    }
}

void out_writev(run_job_t *job, int fd, struct iovec *iov, int cnt)
{
    run_outq_t *q = outq_of(job, fd);
    ssize_t n = 0;

    if (q->broken)
        return;
    if (q->off == q->len && (n = out_try(q, iov, cnt)) < 0) {
        outq_break(q);
        return;
    }
    outq_append(q, iov, cnt, (size_t)n);
}

void outq_flush(run_job_t *job, int fd)
{
    run_outq_t *q = outq_of(job, fd);
    ssize_t n;

    if (q->broken || q->off == q->len)
        return;
    n = out_try(q, &(struct iovec){.iov_base = q->buf + q->off, .iov_len = q->len - q->off}, 1);
    if (n < 0) {
        outq_break(q);
        return;
    }
    q->off += (size_t)n;
    if (q->off == q->len) {
        q->off = q->len = 0;
        if (q->cap > RUN_OUTQ_HIGH / 4) { /* a burst's buffer is not kept */
            free(q->buf);
            q->buf = NULL;
            q->cap = 0;
        }
    }
}

int outq_poll_fd(const run_job_t *job, int fd)
{
    const run_outq_t *q = outq_of((run_job_t *)job, fd);

    if (fd == 2 && job->out_same)
        return -1; /* polled as stdout */
    return !q->broken && q->off < q->len ? q->fd : -1;
}

int outq_full(const run_job_t *job, int fd)
{
    const run_outq_t *q = outq_of((run_job_t *)job, fd);

    return q->len - q->off >= RUN_OUTQ_HIGH;
}

void stream_init(run_stream_t *s, int fd, int out_fd, int rank)
{
    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->out_fd = out_fd;
    s->rank = rank;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

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
void stream_close(run_job_t *job, run_stream_t *s)
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
int stream_read(run_job_t *job, run_stream_t *s)
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

/* ---------------------------------------------------------------- stdin */

int stdin_wanted(const run_job_t *job, int r)
{
    return job->opts.stdin_to == RUN_STDIN_ALL || job->opts.stdin_to == r;
}

int stdin_pollable(const run_job_t *job)
{
    int takers = 0;
    pid_t fg;

    if (job->in_eof)
        return 0;
    for (int r = 0; r < job->started; r++) {
        if (job->ranks[r].in_fd < 0)
            continue;
        if (job->ranks[r].in_off < job->in_len)
            return 0; /* the last piece is not taken yet */
        takers++;
    }
    /* a terminal's background process group that reads it is stopped */
    return takers > 0 && (!job->in_tty || ((fg = tcgetpgrp(0)) >= 0 && fg == getpgrp()));
}

void stdin_close(run_job_t *job, int r)
{
    if (job->ranks[r].in_fd >= 0)
        close(job->ranks[r].in_fd);
    job->ranks[r].in_fd = -1;
}

void stdin_feed(run_job_t *job, int r)
{
    run_rank_t *rk = &job->ranks[r];

    while (rk->in_fd >= 0 && rk->in_off < job->in_len) {
        ssize_t n = write(rk->in_fd, job->in_buf + rk->in_off, job->in_len - rk->in_off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) { /* it closed its stdin: it reads no more */
            stdin_close(job, r);
            return;
        }
        rk->in_off += (size_t)n;
    }
    if (job->in_eof && rk->in_off == job->in_len)
        stdin_close(job, r);
}

void stdin_read(run_job_t *job)
{
    ssize_t n;

    if (job->in_buf == NULL && (job->in_buf = malloc(RUN_STDIN_CHUNK)) == NULL) {
        run_log("out of memory: the ranks' stdin ends here");
        n = 0;
    } else {
        n = read(0, job->in_buf, RUN_STDIN_CHUNK);
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR || errno == EIO))
        return; /* EIO: sent to the background of the terminal meanwhile */
    if (n < 0)
        run_log("stdin: %s: the ranks' stdin ends here", strerror(errno));
    job->in_len = n > 0 ? (size_t)n : 0;
    job->in_eof = n <= 0;
    for (int r = 0; r < job->started; r++) {
        job->ranks[r].in_off = 0;
        stdin_feed(job, r);
    }
}

/* ------------------------------------------------------------- the end */

static size_t finish_poll_build(run_job_t *job, size_t *open)
{
    size_t n = 0;

    *open = 0;
    job->pfds[n] = (struct pollfd){.fd = job->sig_fd, .events = POLLIN};
    job->tags[n++] = (run_poll_tag_t){.kind = POLL_SIGNAL};
    for (int r = 0; r < job->opts.nranks; r++) {
        run_stream_t *ss[2] = {&job->ranks[r].out, &job->ranks[r].err};

        for (int i = 0; i < 2; i++) {
            if (ss[i]->fd < 0)
                continue;
            (*open)++;
            if (!outq_full(job, ss[i]->out_fd)) {
                job->pfds[n] = (struct pollfd){.fd = ss[i]->fd, .events = POLLIN};
                job->tags[n++] = (run_poll_tag_t){.kind = POLL_STREAM, .obj = ss[i]};
            }
        }
    }
    for (int fd = 1; fd <= 2; fd++) {
        if (outq_poll_fd(job, fd) >= 0) {
            job->pfds[n] = (struct pollfd){.fd = outq_poll_fd(job, fd), .events = POLLOUT};
            job->tags[n++] = (run_poll_tag_t){.kind = POLL_OUTQ, .obj = &job->outq[fd]};
        }
    }
    return n;
}

/* What is not written: queued, lost, and still in the pipes. */
static size_t output_unwritten(run_job_t *job)
{
    size_t n = 0;
    int held;

    for (int fd = 1; fd <= 2; fd++) {
        if (fd == 1 || !job->out_same)
            n += job->outq[fd].len - job->outq[fd].off + job->outq[fd].lost;
    }
    for (int r = 0; r < job->opts.nranks; r++) {
        if (job->ranks[r].out.fd >= 0 && ioctl(job->ranks[r].out.fd, FIONREAD, &held) == 0 && held > 0)
            n += (size_t)held;
        if (job->ranks[r].err.fd >= 0 && ioctl(job->ranks[r].err.fd, FIONREAD, &held) == 0 && held > 0)
            n += (size_t)held;
    }
    return n;
}

void output_finish(run_job_t *job, void (*signal_cb)(run_job_t *job))
{
    const char *why = NULL;
    size_t open, n, left;

    for (;;) {
        int64_t now = now_ms();
        int timeout = -1;

        n = finish_poll_build(job, &open);
        if (open == 0 && n == 1)
            break; /* all written */
        if (job->signals > 0) {
            why = "stopped by a signal";
            break;
        }
        if (job->timed_out || (job->timeout_at != 0 && now >= job->timeout_at)) {
            if (!job->timed_out)
                job_fail(job, RUN_EXIT_TIMEOUT, "timed out after %g s", job->opts.timeout_s);
            job->timed_out = 1;
            why = "timed out";
            break;
        }
        if (job->timeout_at != 0)
            timeout = job->timeout_at - now > INT_MAX ? INT_MAX : (int)(job->timeout_at - now);
        if (poll(job->pfds, n, timeout) < 0 && errno != EINTR) {
            why = strerror(errno);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (job->pfds[i].revents == 0)
                continue;
            if (job->tags[i].kind == POLL_SIGNAL)
                signal_cb(job);
            else if (job->tags[i].kind == POLL_STREAM)
                stream_read(job, job->tags[i].obj);
            else
                outq_flush(job, job->tags[i].obj == &job->outq[1] ? 1 : 2);
        }
    }
    left = why != NULL ? output_unwritten(job) : 0;
    for (int r = 0; r < job->opts.nranks; r++) {
        stream_close(job, &job->ranks[r].out);
        stream_close(job, &job->ranks[r].err);
    }
    if (why != NULL && left > 0)
        run_log("%zu bytes of the ranks' output not written (%s): its reader did not take them",
                left, why);
    outq_fini(job);
}

void outq_fini(run_job_t *job)
{
    if (!job->outq_on)
        return;
    for (int fd = 1; fd <= 2; fd++) {
        outq_flush(job, fd); /* what goes at once: a last log line, if its reader takes it */
        if (job->outq[fd].how == OUT_NONBLOCK)
            close(job->outq[fd].fd);
        free(job->outq[fd].buf);
        job->outq[fd] = (run_outq_t){.fd = -1, .broken = 1};
    }
    job->outq_on = 0;
}
