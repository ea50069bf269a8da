/*
 * Two processes (fork), names exchanged over pipes: a blocking
 * fi_cq_sread woken by the other process's message, a FI_WAIT_FD CQ with
 * fi_trywait and poll(), a message from a process not yet in the AV
 * (source FI_ADDR_NOTAVAIL, then its fi_addr once inserted), and the peer
 * dying while a receive directed at it is posted and a send to it is
 * pending (each must end, not hang).
 */
#include "fe_common.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#define CAPS (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE)

static fe_t f;
static fe_ep_t me;

static void open_one(enum fi_wait_obj wo)
{
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = wo};
    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    MUST(fi_endpoint(f.domain, f.info, &me.ep, NULL));
    MUST(fi_cq_open(f.domain, &ca, &me.cq, NULL));
    MUST(fi_ep_bind(me.ep, &me.cq->fid, FI_TRANSMIT | FI_RECV));
    MUST(fi_ep_bind(me.ep, &f.av->fid, 0));
    MUST(fi_enable(me.ep));
}

static void xwrite(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n)
        exit(3);
}

static void xread(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        if (r <= 0)
            exit(3);
        got += (size_t)r;
    }
}

/* the child: opens, sends its name, reads the parent's, then follows
 * commands: 's' tag -> send, 'q' -> exit, 'k' -> hang until killed */
static void child(int rfd, int wfd)
{
    char name[FI_NAME_MAX], peer[FI_NAME_MAX];
    size_t len = sizeof(name);
    fi_addr_t p;
    char cmd;
    struct fi_cq_tagged_entry e;

    open_one(FI_WAIT_UNSPEC);
    MUST(fi_getname(&me.ep->fid, name, &len));
    xwrite(wfd, name, sizeof(name));
    xread(rfd, peer, sizeof(peer));
    if (fi_av_insert(f.av, peer, 1, &p, 0, NULL) != 1)
        _exit(4);
    for (;;) {
        xread(rfd, &cmd, 1);
        if (cmd == 's') {
            uint64_t tag;
            xread(rfd, &tag, sizeof(tag));
            fi_tinject(me.ep, "hi", 2, p, tag);
        } else if (cmd == 'b') { /* a big send, then drive progress until 'q' */
            static char big[8 << 20];
            fi_tsend(me.ep, big, sizeof(big), NULL, p, 99, NULL);
            for (;;) {
                fi_cq_read(me.cq, &e, 1);
                struct pollfd pf = {rfd, POLLIN, 0};
                if (poll(&pf, 1, 0) > 0)
                    break;
            }
        } else if (cmd == 'q') {
            _exit(0);
        } else if (cmd == 'k') {
            pause();
        }
        fi_cq_read(me.cq, &e, 1);
    }
}

static pid_t pid;
static int to_child, from_child;
static fi_addr_t peer_addr;
static char peer_name[FI_NAME_MAX];

static void start(enum fi_wait_obj wo, int insert)
{
    int p1[2], p2[2];
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);

    if (pipe(p1) || pipe(p2))
        exit(3);
    fflush(stdout);
    if ((pid = fork()) == 0) {
        close(p1[1]);
        close(p2[0]);
        child(p1[0], p2[1]);
    }
    close(p1[0]);
    close(p2[1]);
    to_child = p1[1];
    from_child = p2[0];
    open_one(wo);
    MUST(fi_getname(&me.ep->fid, name, &len));
    xread(from_child, peer_name, sizeof(peer_name));
    xwrite(to_child, name, sizeof(name));
    if (insert && fi_av_insert(f.av, peer_name, 1, &peer_addr, 0, NULL) != 1) {
        printf("FATAL insert\n");
        exit(2);
    }
}

static void child_send(uint64_t tag)
{
    xwrite(to_child, "s", 1);
    xwrite(to_child, &tag, sizeof(tag));
}

static void finish(void)
{
    int st;
    xwrite(to_child, "q", 1);
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit status %d", st);
    fe_ep_close(&me);
    fe_close(&f);
}

static void sread_block(void)
{
    struct fi_cq_tagged_entry e;
    fi_addr_t src = 0;
    char rb[8];
    int64_t t0;
    ssize_t r;

    start(FI_WAIT_UNSPEC, 1);
    CHECK_RET(fi_trecv(me.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 5, 0, (void *)1), 0);
    r = fi_cq_sread(me.cq, &e, 1, NULL, 100);
    CHECK(r == -FI_EAGAIN, "sread 100 ms with nothing: %zd", r);
    child_send(5);
    t0 = fe_now_ms();
    r = fi_cq_sreadfrom(me.cq, &e, 1, &src, NULL, -1);
    CHECK(r == 1 && e.op_context == (void *)1 && src == peer_addr && fe_now_ms() - t0 < 3000,
          "blocking sreadfrom across processes: %zd src %llu", r, (unsigned long long)src);
    finish();
}

static void wait_fd(void)
{
    struct fi_cq_tagged_entry e;
    struct fid *fids[1];
    char rb[8];
    int fd = -1;
    ssize_t r;

    start(FI_WAIT_FD, 1);
    CHECK_RET(fi_control(&me.cq->fid, FI_GETWAIT, &fd), 0);
    fids[0] = &me.cq->fid;
    CHECK_RET(fi_trywait(f.fabric, fids, 1), 0);
    {
        struct pollfd pf = {fd, POLLIN, 0};
        CHECK_RET(poll(&pf, 1, 100), 0);
    }
    CHECK_RET(fi_trecv(me.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 6, 0, (void *)2), 0);
    CHECK_RET(fi_trywait(f.fabric, fids, 1), 0);
    child_send(6);
    {
        struct pollfd pf = {fd, POLLIN, 0};
        int n = poll(&pf, 1, 3000);
        CHECK(n == 1, "wait fd readable after the child's message: %d", n);
    }
    r = fi_cq_read(me.cq, &e, 1);
    CHECK(r == 1 && e.op_context == (void *)2, "read after poll: %zd", r);
    /* trywait with something there */
    child_send(7);
    usleep(100000);
    r = fi_trywait(f.fabric, fids, 1);
    CHECK(r == 0, "trywait with an unexpected message only (no completion): %zd", r);
    /* fi_trywait on a non-wait CQ and on an endpoint */
    fids[0] = &me.ep->fid;
    CHECK_RET(fi_trywait(f.fabric, fids, 1) < 0, 1);
    finish();
}

static void not_in_av(void)
{
    struct fi_cq_tagged_entry e;
    fi_addr_t src = 0;
    char rb[8];
    ssize_t r;

    start(FI_WAIT_UNSPEC, 0);
    CHECK_RET(fi_trecv(me.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 8, 0, (void *)3), 0);
    child_send(8);
    r = fe_cq_wait(me.cq, &e, &src, 3000);
    CHECK(r == 1 && src == FI_ADDR_NOTAVAIL, "source of an unknown process: %llu", (unsigned long long)src);
    child_send(9);
    usleep(50000);
    fi_cq_read(me.cq, &e, 1);
    CHECK_RET(fi_av_insert(f.av, peer_name, 1, &peer_addr, 0, NULL), 1);
    CHECK_RET(fi_trecv(me.ep, rb, sizeof(rb), NULL, peer_addr, 9, 0, (void *)4), 0);
    r = fe_cq_wait(me.cq, &e, &src, 3000);
    CHECK(r == 1 && src == peer_addr, "earlier message received after the insert, src %llu want %llu: %zd",
          (unsigned long long)src, (unsigned long long)peer_addr, r);
    finish();
}

static void peer_dies(void)
{
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    static char big[8 << 20];
    char rb[8];
    int st;
    ssize_t r;

    start(FI_WAIT_UNSPEC, 1);
    CHECK_RET(fi_trecv(me.ep, rb, sizeof(rb), NULL, peer_addr, 10, 0, (void *)5), 0);
    CHECK_RET(fi_tsend(me.ep, big, sizeof(big), NULL, peer_addr, 11, (void *)6), 0);
    usleep(100000);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    int got5 = 0, got6 = 0;
    int64_t end = fe_now_ms() + 20000;
    while (fe_now_ms() < end && !(got5 && got6)) {
        r = getenv("FE_SREAD") ? fi_cq_sread(me.cq, &e, 1, NULL, 100) : fi_cq_read(me.cq, &e, 1);
        if (r == 1) {
            got5 |= e.op_context == (void *)5 ? 1 : 0;
            got6 |= e.op_context == (void *)6 ? 1 : 0;
        } else if (r == -FI_EAVAIL) {
            memset(&err, 0, sizeof(err));
            fi_cq_readerr(me.cq, &err, 0);
            printf("     error entry ctx %p err %d (%s)\n", err.op_context, err.err, fi_strerror(err.err));
            got5 |= err.op_context == (void *)5 ? 2 : 0;
            got6 |= err.op_context == (void *)6 ? 2 : 0;
        }
    }
    CHECK(got6, "pending big send to a killed peer ends: %d", got6);
    printf("     directed receive from the killed peer: %s\n", got5 ? "ended" : "still pending");
    if (!got5)
        CHECK_RET(fi_cancel(&me.ep->fid, (void *)5), 0);
    r = fi_tsend(me.ep, "z", 1, NULL, peer_addr, 12, (void *)7);
    printf("     send to the dead peer afterwards: %zd\n", r);
    fe_drain(me.cq, NULL, 200);
    fe_ep_close(&me);
    fe_close(&f);
}

int main(int argc, char **argv)
{
    static const fe_case_t cases[] = {
        {"sread_block", sread_block},
        {"wait_fd", wait_fd},
        {"not_in_av", not_in_av},
        {"peer_dies", peer_dies},
    };
    return fe_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv, 60);
}
