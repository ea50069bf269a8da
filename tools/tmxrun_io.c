/* tmxrun: forwarding the ranks' stdout and stderr to tmxrun's own, line by
 * line, so that the lines of different ranks never run into each other;
 * with --tag-output each line says whose it is. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tmxrun.h"

/* Writes everything or gives up on the descriptor for good (reader gone). */
void out_writev(run_job_t *job, int fd, struct iovec *iov, int cnt)
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

/* After the last rank: take what the pipes still hold, then close them. */
void streams_drain(run_job_t *job)
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
