/*
 * Hostile or careless callers: NULL out-pointers, a poll set holding a
 * closed CQ, a poll set given a CQ of another domain, a CQ's endpoint
 * closed while another thread sleeps in fi_cq_sread, an injected send
 * with FI_DELIVERY_COMPLETE that nobody receives (fi_tsendmsg must not
 * block). Each case runs in a child; a
 * crash or a hang (alarm) is reported per case.
 */
#include "fe_common.h"

#include <pthread.h>

#define CAPS (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE)

static fe_t f;
static fe_ep_t a;

static void setup(enum fi_threading th)
{
    fe_open(&f, fe_hints(CAPS, th), FI_AV_TABLE);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_insert(&f, &a);
}

static void getname_null_len(void)
{
    char buf[64];
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_getname(&a.ep->fid, buf, NULL), -FI_EINVAL);
}

static void getname_null_buf(void)
{
    size_t len = 64;
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_getname(&a.ep->fid, NULL, &len) < 0, 1);
}

static void getopsflag_null(void)
{
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_control(&a.ep->fid, FI_GETOPSFLAG, NULL), -FI_EINVAL);
}

static void getwait_null(void)
{
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_control(&a.cq->fid, FI_GETWAITOBJ, NULL), -FI_EINVAL);
}

static void av_lookup_null_len(void)
{
    char buf[64];
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_av_lookup(f.av, a.addr, buf, NULL), -FI_EINVAL);
}

static void av_remove_null(void)
{
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_av_remove(f.av, NULL, 1, 0), -FI_EINVAL);
}

static void straddr_null_buf(void)
{
    char name[64];
    size_t len = 64, sl = 100;
    setup(FI_THREAD_SAFE);
    fi_getname(&a.ep->fid, name, &len);
    CHECK(fi_av_straddr(f.av, name, NULL, &sl) == NULL || 1, "straddr NULL buf len 100");
}

static void trywait_null(void)
{
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_trywait(f.fabric, NULL, 1), -FI_EINVAL);
}

static void cntr_open_null_attr(void)
{
    struct fid_cntr *c;
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_cntr_open(f.domain, NULL, &c, NULL), 0);
    CHECK_RET(fi_close(&c->fid), 0);
}

/* fi_poll(3): a CQ in a poll set, then closed (fabtests close members
 * before their set): allowed, and the set forgets it (no use of freed
 * memory: run under valgrind or ASan) */
static void poll_closed_cq(void)
{
    struct fid_poll *ps;
    struct fi_poll_attr pa = {0};
    struct fid_cq *cq;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    void *ctx[4];
    setup(FI_THREAD_SAFE);
    MUST(fi_poll_open(f.domain, &pa, &ps));
    MUST(fi_cq_open(f.domain, &ca, &cq, NULL));
    MUST(fi_poll_add(ps, &cq->fid, 0));
    int r = fi_close(&cq->fid);
    CHECK(r == 0, "fi_close of a CQ still in a poll set: %d", r);
    CHECK_RET(fi_poll(ps, ctx, 4), 0);
    CHECK_RET(fi_poll_del(ps, &cq->fid, 0), -FI_EINVAL);
    CHECK_RET(fi_close(&ps->fid), 0);
}

/* A poll set takes the CQs and counters of its own domain only: a
 * closing CQ or counter leaves the poll sets of its domain, so a set of
 * another domain would keep it after it was freed. */
static void poll_other_domain(void)
{
    struct fid_poll *ps;
    struct fi_poll_attr pa = {0};
    struct fid_domain *d2;
    struct fid_cq *cq;
    struct fid_cntr *cntr;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    struct fi_cntr_attr na = {.events = FI_CNTR_EVENTS_COMP};
    void *ctx[4];
    setup(FI_THREAD_SAFE);
    MUST(fi_domain(f.fabric, f.info, &d2, NULL));
    MUST(fi_cq_open(d2, &ca, &cq, &cq));
    MUST(fi_cntr_open(d2, &na, &cntr, &cntr));
    MUST(fi_poll_open(f.domain, &pa, &ps));
    CHECK_RET(fi_poll_add(ps, &cq->fid, 0), -FI_EINVAL);
    CHECK_RET(fi_poll_add(ps, &cntr->fid, 0), -FI_EINVAL);
    CHECK_RET(fi_close(&cq->fid), 0);
    CHECK_RET(fi_close(&cntr->fid), 0);
    CHECK_RET(fi_poll(ps, ctx, 4), 0); /* nothing freed left in it */
    CHECK_RET(fi_close(&ps->fid), 0);
    CHECK_RET(fi_close(&d2->fid), 0);
}

/* fi_poll(3): a counter's context is returned when its success value or
 * its error value changed since the last fi_poll, fi_cntr_set or
 * fi_cntr_add: a failed receive shows, a value the application set or
 * added itself does not. */
static void poll_cntr_errors(void)
{
    struct fid_poll *ps;
    struct fi_poll_attr pa = {0};
    struct fid_cntr *cntr;
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};
    char rb[2];
    void *ctx[4];
    int64_t end;
    setup(FI_THREAD_SAFE);
    MUST(fi_cntr_open(f.domain, &ca, &cntr, &cntr));
    MUST(fi_ep_bind(a.ep, &cntr->fid, FI_RECV));
    MUST(fi_poll_open(f.domain, &pa, &ps));
    MUST(fi_poll_add(ps, &cntr->fid, 0));
    CHECK_RET(fi_poll(ps, ctx, 4), 0);
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 3, 0, (void *)1), 0);
    CHECK_RET(fi_tsend(a.ep, "12345678", 8, NULL, a.addr, 3, (void *)2), 0);
    for (end = fe_now_ms() + 3000; fe_now_ms() < end && fi_cntr_readerr(cntr) == 0;)
        ;
    CHECK(fi_cntr_readerr(cntr) == 1 && fi_cntr_read(cntr) == 0, "the truncated receive counted as an error");
    CHECK(fi_poll(ps, ctx, 4) == 1 && ctx[0] == &cntr, "fi_poll returns the counter whose errors changed");
    CHECK_RET(fi_poll(ps, ctx, 4), 0);
    CHECK_RET(fi_cntr_add(cntr, 5), 0);
    CHECK_RET(fi_cntr_set(cntr, 7), 0);
    CHECK_RET(fi_poll(ps, ctx, 4), 0);
    fe_drain(a.cq, NULL, 50);
    CHECK_RET(fi_close(&ps->fid), 0);
    CHECK_RET(fi_close(&a.ep->fid), 0);
    CHECK_RET(fi_close(&cntr->fid), 0);
}

static volatile int polling;

static void *poller(void *arg)
{
    void *ctx[4];
    while (polling)
        fi_poll(arg, ctx, 4);
    return NULL;
}

/* FI_THREAD_SAFE: one thread polls a set holding the endpoint's CQ while
 * another opens and closes CQs of the domain (each close takes the CQ out
 * of the domain's poll sets). Neither may wait for the other for good. */
static void poll_while_closing(void)
{
    struct fid_poll *ps;
    struct fi_poll_attr pa = {0};
    struct fid_cq *cq;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    pthread_t t;
    int64_t end;
    int i;
    setup(FI_THREAD_SAFE);
    MUST(fi_poll_open(f.domain, &pa, &ps));
    MUST(fi_poll_add(ps, &a.cq->fid, 0));
    polling = 1;
    pthread_create(&t, NULL, poller, ps);
    for (i = 0, end = fe_now_ms() + 1000; fe_now_ms() < end; i++) {
        MUST(fi_cq_open(f.domain, &ca, &cq, NULL));
        MUST(fi_close(&cq->fid));
    }
    polling = 0;
    pthread_join(t, NULL);
    CHECK(i > 0, "%d CQs opened and closed in 1 s while another thread polls", i);
    CHECK_RET(fi_close(&ps->fid), 0);
}

static void *sreader(void *arg)
{
    struct fi_cq_tagged_entry e;
    fi_cq_sread(a.cq, &e, 1, NULL, 1500);
    return arg;
}

/* The endpoint is closed while another thread sleeps in fi_cq_sread on
 * its CQ (FI_THREAD_SAFE): the sleep must not touch the closed endpoint. */
static void close_during_sread(void)
{
    pthread_t t;
    setup(FI_THREAD_SAFE);
    pthread_create(&t, NULL, sreader, NULL);
    usleep(200000);
    CHECK_RET(fi_close(&a.ep->fid), 0);
    pthread_join(t, NULL);
    CHECK_RET(fi_close(&a.cq->fid), 0);
}

/* fi_tsendmsg(FI_INJECT | FI_DELIVERY_COMPLETE) of a message nobody has
 * a receive for: the call must return at once, the caller's buffer is
 * free on return, and the send's completion comes only once a receive
 * has taken the message, with the payload as it was at the call. */
static void inject_delivery_nobody(void)
{
    char sb[2] = "x", rb[4] = {0};
    struct iovec iov = {sb, 1};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .tag = 5, .context = (void *)1};
    struct fi_cq_tagged_entry e;
    int64_t t0;
    ssize_t r;
    setup(getenv("FE_THREADING") ? FI_THREAD_DOMAIN : FI_THREAD_SAFE);
    m.addr = a.addr;
    t0 = fe_now_ms();
    alarm(5);
    r = fi_tsendmsg(a.ep, &m, FI_INJECT | FI_DELIVERY_COMPLETE);
    alarm(0);
    CHECK(r == 0 && fe_now_ms() - t0 < 1000,
          "fi_tsendmsg(FI_INJECT|FI_DELIVERY_COMPLETE) returned %zd after %lld ms", r,
          (long long)(fe_now_ms() - t0));
    sb[0] = 'y'; /* reusable on return: the message keeps "x" */
    CHECK_RET(fe_cq_wait(a.cq, &e, NULL, 200), -FI_EAGAIN); /* nothing matched it yet */
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 5, 0, (void *)2), 0);
    int got_send = 0, got_recv = 0;
    for (int i = 0; i < 2; i++) {
        if (fe_cq_wait(a.cq, &e, NULL, 2000) != 1)
            break;
        got_send += e.op_context == (void *)1;
        got_recv += e.op_context == (void *)2 && e.len == 1;
    }
    CHECK(got_send == 1 && got_recv == 1, "completions once matched: send %d, receive %d", got_send,
          got_recv);
    CHECK(rb[0] == 'x', "the payload as it was at the call: '%c'", rb[0]);
}

/* Flags libfabric defines for these calls: FI_MATCH_COMPLETE on a send
 * (the provider handles it in send_tagged), FI_MORE on a receive. */
static void msg_flags(void)
{
    struct iovec iov = {"x", 1};
    char rb[4];
    struct iovec riov = {rb, sizeof(rb)};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .tag = 6, .context = (void *)1};
    struct fi_msg_tagged rm = {.msg_iov = &riov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 6,
                               .context = (void *)2};
    setup(FI_THREAD_SAFE);
    m.addr = a.addr;
    CHECK_RET(fi_trecvmsg(a.ep, &rm, FI_MORE), 0);
    CHECK_RET(fi_tsendmsg(a.ep, &m, FI_MATCH_COMPLETE), 0);
    fe_drain(a.cq, NULL, 100);
}

/* FI_MATCH_COMPLETE as the endpoint's default (FI_SETOPSFLAG): kept, as
 * every flag of a send it honours per operation, and fi_tsend then
 * completes only once a receive matched the message. */
static void match_complete_default(void)
{
    uint64_t flags = FI_TRANSMIT | FI_MATCH_COMPLETE;
    struct fi_cq_tagged_entry e;
    char rb[4];
    setup(FI_THREAD_SAFE);
    CHECK_RET(fi_control(&a.ep->fid, FI_SETOPSFLAG, &flags), 0);
    flags = FI_TRANSMIT;
    CHECK_RET(fi_control(&a.ep->fid, FI_GETOPSFLAG, &flags), 0);
    CHECK(flags & FI_MATCH_COMPLETE, "FI_GETOPSFLAG after setting FI_MATCH_COMPLETE: 0x%llx",
          (unsigned long long)flags);
    CHECK_RET(fi_tsend(a.ep, "x", 1, NULL, a.addr, 7, (void *)1), 0);
    CHECK_RET(fe_cq_wait(a.cq, &e, NULL, 200), -FI_EAGAIN); /* nothing matched it yet */
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 7, 0, (void *)2), 0);
    CHECK(fe_drain(a.cq, NULL, 100) == 2, "the send and the receive complete once matched");
}

int main(int argc, char **argv)
{
    static const fe_case_t cases[] = {
        {"getname_null_len", getname_null_len},
        {"getname_null_buf", getname_null_buf},
        {"getopsflag_null", getopsflag_null},
        {"getwait_null", getwait_null},
        {"av_lookup_null_len", av_lookup_null_len},
        {"av_remove_null", av_remove_null},
        {"straddr_null_buf", straddr_null_buf},
        {"trywait_null", trywait_null},
        {"cntr_open_null_attr", cntr_open_null_attr},
        {"poll_closed_cq", poll_closed_cq},
        {"poll_other_domain", poll_other_domain},
        {"poll_while_closing", poll_while_closing},
        {"poll_cntr_errors", poll_cntr_errors},
        {"close_during_sread", close_during_sread},
        {"inject_delivery_nobody", inject_delivery_nobody},
        {"msg_flags", msg_flags},
        {"match_complete_default", match_complete_default},
    };
    return fe_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv, 20);
}
