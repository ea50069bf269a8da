/*
 * Tagged and untagged data transfers between two endpoints of one domain
 * (tmx's shm/self between their contexts): FI_PEEK, FI_CLAIM, FI_DISCARD,
 * iov counts, inject limits, zero-length, FI_REMOTE_CQ_DATA, selective
 * completion, FI_DIRECTED_RECV, fi_cancel and fi_cq_readerr, truncation,
 * CQ formats, fi_cq_read counts, fi_cq_readfrom, fi_cq_sread timeouts,
 * CQ overflow. FE_THREADING=domain runs them in an FI_THREAD_DOMAIN domain
 * (the provider's lock-free paths); the default is FI_THREAD_SAFE.
 */
#include "fe_common.h"

#include <pthread.h>

#define CAPS (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE | FI_REMOTE_CQ_DATA)
#define T 3000 /* ms to wait for a completion */

static fe_t f;
static fe_ep_t a, b;

static enum fi_threading threading(void)
{
    const char *t = getenv("FE_THREADING");
    return t && strcmp(t, "domain") == 0 ? FI_THREAD_DOMAIN : FI_THREAD_SAFE;
}

static void pair_open(enum fi_cq_format fmt, uint64_t bind)
{
    fe_open(&f, fe_hints(CAPS, threading()), FI_AV_TABLE);
    fe_ep_open(&f, &a, fmt, bind);
    fe_ep_open(&f, &b, fmt, bind);
    fe_ep_insert(&f, &a);
    fe_ep_insert(&f, &b);
}

static void pair_close(void)
{
    fe_ep_close(&a);
    fe_ep_close(&b);
    fe_close(&f);
}

/* Waits for b's send to complete (b's CQ) while a's CQ is left alone. */
static void send_done(void *ctx)
{
    struct fi_cq_tagged_entry e;
    ssize_t r = fe_cq_wait(b.cq, &e, NULL, T);
    CHECK(r == 1 && e.op_context == ctx, "send completion: r=%zd ctx=%p want %p", r,
          r == 1 ? e.op_context : NULL, ctx);
}

static ssize_t trecvmsg(fe_ep_t *e, void *buf, size_t len, fi_addr_t src, uint64_t tag,
                        uint64_t ignore, void *ctx, uint64_t flags)
{
    struct iovec iov = {buf, len};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = buf ? 1 : 0, .addr = src, .tag = tag,
                              .ignore = ignore, .context = ctx};
    return fi_trecvmsg(e->ep, &m, flags);
}

static void peek_claim(void)
{
    struct fi_context c1, c2, c3, c4;
    struct fi_cq_err_entry err;
    struct fi_cq_tagged_entry e;
    fi_addr_t src = 0;
    char buf[64];
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    /* peek of nothing */
    CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 10, 0, &c1, FI_PEEK), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ENOMSG && err.op_context == &c1,
          "peek of nothing: r=%zd err=%d ctx ok=%d", r, err.err, err.op_context == &c1);
    CHECK((err.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED), "ENOMSG flags 0x%llx",
          (unsigned long long)err.flags);
    /* a message arrives; peek sees it and leaves it */
    CHECK_RET(fi_tsenddata(b.ep, "hello", 5, NULL, 0xdada, a.addr, 10, &c4), 0);
    send_done(&c4);
    for (int i = 0; i < 200; i++) {
        CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 10, 0, &c1, FI_PEEK), 0) ;
        r = fe_cq_wait(a.cq, &e, &src, T);
        if (r == 1)
            break;
        fi_cq_readerr(a.cq, &err, 0);
        usleep(1000);
    }
    CHECK(r == 1 && e.op_context == &c1 && e.len == 5 && e.tag == 10 && src == b.addr &&
              (e.flags & FI_REMOTE_CQ_DATA) && e.data == 0xdada,
          "peek found: r=%zd len=%zu tag=%llu src=%llu data=%llx flags=%llx", r, e.len,
          (unsigned long long)e.tag, (unsigned long long)src, (unsigned long long)e.data,
          (unsigned long long)e.flags);
    /* peek|claim, then a plain peek no longer sees it */
    CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 10, 0, &c2, FI_PEEK | FI_CLAIM), 0);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.op_context == &c2 && e.len == 5, "peek|claim: r=%zd", r);
    CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 10, 0, &c1, FI_PEEK), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ENOMSG, "claimed message hidden from peek: r=%zd err=%d", r, err.err);
    /* a claim of an unknown context */
    CHECK_RET(trecvmsg(&a, buf, sizeof(buf), FI_ADDR_UNSPEC, 10, 0, &c3, FI_CLAIM) < 0, 1);
    /* the paired claim receives it */
    memset(buf, 0, sizeof(buf));
    CHECK_RET(trecvmsg(&a, buf, sizeof(buf), FI_ADDR_UNSPEC, 10, 0, &c2, FI_CLAIM), 0);
    r = fe_cq_wait(a.cq, &e, &src, T);
    CHECK(r == 1 && e.op_context == &c2 && e.len == 5 && memcmp(buf, "hello", 5) == 0 &&
              e.tag == 10 && src == b.addr && e.data == 0xdada,
          "claim receive: r=%zd len=%zu buf=%.5s tag=%llu src=%llu", r, e.len, buf,
          (unsigned long long)e.tag, (unsigned long long)src);
    /* the same context claims nothing any more */
    CHECK_RET(trecvmsg(&a, buf, sizeof(buf), FI_ADDR_UNSPEC, 10, 0, &c2, FI_CLAIM) < 0, 1);
    /* peek|discard */
    CHECK_RET(fi_tsend(b.ep, "gone", 4, NULL, a.addr, 11, &c4), 0);
    send_done(&c4);
    do {
        CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 11, 0, &c1, FI_PEEK | FI_DISCARD), 0);
        r = fe_cq_wait(a.cq, &e, NULL, T);
        if (r != 1)
            fi_cq_readerr(a.cq, &err, 0);
    } while (r != 1);
    CHECK(e.op_context == &c1 && e.len == 4, "peek|discard: len %zu", e.len);
    CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 11, 0, &c1, FI_PEEK), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ENOMSG, "discarded message gone: r=%zd err=%d", r, err.err);
    /* peek|claim then claim|discard */
    CHECK_RET(fi_tsend(b.ep, "drop", 4, NULL, a.addr, 12, &c4), 0);
    send_done(&c4);
    CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 12, 0, &c3, FI_PEEK | FI_CLAIM), 0);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.op_context == &c3, "peek|claim 2: r=%zd", r);
    CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 12, 0, &c3, FI_CLAIM | FI_DISCARD), 0);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.op_context == &c3, "claim|discard completion: r=%zd", r);
    CHECK_RET(trecvmsg(&a, NULL, 0, FI_ADDR_UNSPEC, 12, 0, &c1, FI_PEEK), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ENOMSG, "claim-discarded message gone: r=%zd", r);
    /* FI_DISCARD alone is not a peek or claim */
    CHECK_RET(trecvmsg(&a, buf, 4, FI_ADDR_UNSPEC, 12, 0, &c1, FI_DISCARD) < 0, 1);
    /* peek directed at a source that did not send */
    CHECK_RET(fi_tsend(b.ep, "d", 1, NULL, a.addr, 13, &c4), 0);
    send_done(&c4);
    usleep(20000);
    CHECK_RET(trecvmsg(&a, NULL, 0, a.addr, 13, 0, &c1, FI_PEEK), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ENOMSG, "peek from the wrong source: r=%zd err=%d", r, err.err);
    CHECK_RET(trecvmsg(&a, buf, 1, b.addr, 13, 0, &c1, 0), 0);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1, "directed receive of it: r=%zd", r);
    pair_close();
}

static void iovs(void)
{
    struct iovec iov[3] = {{"ab", 2}, {"cd", 2}, {"ef", 2}};
    char rb[3][8];
    struct iovec riov[3] = {{rb[0], 8}, {rb[1], 8}, {rb[2], 8}};
    struct fi_msg_tagged m;
    struct fi_cq_tagged_entry e;
    size_t lim;
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    lim = f.info->tx_attr->iov_limit;
    CHECK(lim >= 1 && lim < 3, "iov_limit %zu", lim);
    /* count 0: a zero-length message */
    m = (struct fi_msg_tagged){.msg_iov = NULL, .iov_count = 0, .addr = FI_ADDR_UNSPEC, .tag = 20,
                               .context = (void *)0x20};
    CHECK_RET(fi_trecvmsg(a.ep, &m, 0), 0);
    m = (struct fi_msg_tagged){.msg_iov = NULL, .iov_count = 0, .addr = a.addr, .tag = 20,
                               .context = (void *)0x21};
    CHECK_RET(fi_tsendmsg(b.ep, &m, FI_COMPLETION), 0);
    send_done((void *)0x21);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.op_context == (void *)0x20 && e.len == 0, "zero-length via iov_count 0: r=%zd len=%zu", r, e.len);
    /* count = limit */
    m = (struct fi_msg_tagged){.msg_iov = riov, .iov_count = lim, .addr = FI_ADDR_UNSPEC, .tag = 21,
                               .context = (void *)0x22};
    CHECK_RET(fi_trecvmsg(a.ep, &m, 0), 0);
    m = (struct fi_msg_tagged){.msg_iov = iov, .iov_count = lim, .addr = a.addr, .tag = 21,
                               .context = (void *)0x23};
    CHECK_RET(fi_tsendmsg(b.ep, &m, 0), 0);
    send_done((void *)0x23);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.len == 2 * lim, "iov_count = limit: r=%zd len=%zu", r, e.len);
    /* count = limit + 1 */
    m = (struct fi_msg_tagged){.msg_iov = riov, .iov_count = lim + 1, .addr = FI_ADDR_UNSPEC,
                               .tag = 22, .context = (void *)0x24};
    CHECK_RET(fi_trecvmsg(a.ep, &m, 0), -FI_EINVAL);
    m = (struct fi_msg_tagged){.msg_iov = iov, .iov_count = lim + 1, .addr = a.addr, .tag = 22,
                               .context = (void *)0x25};
    CHECK_RET(fi_tsendmsg(b.ep, &m, 0), -FI_EINVAL);
    CHECK_RET(fi_tsendv(b.ep, iov, NULL, lim + 1, a.addr, 22, NULL), -FI_EINVAL);
    CHECK_RET(fi_trecvv(a.ep, riov, NULL, lim + 1, FI_ADDR_UNSPEC, 22, 0, NULL), -FI_EINVAL);
    CHECK_RET(fi_sendv(b.ep, iov, NULL, lim + 1, a.addr, NULL), -FI_EINVAL);
    CHECK_RET(fi_recvv(a.ep, riov, NULL, lim + 1, FI_ADDR_UNSPEC, NULL), -FI_EINVAL);
    /* bad flags */
    CHECK_RET(fi_tsendmsg(b.ep, &m, FI_MULTI_RECV) < 0, 1);
    CHECK_RET(fe_drain(a.cq, b.cq, 50), 0);
    pair_close();
}

static void inject_data(void)
{
    static char big[8192];
    char rb[8192];
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
    size_t isz;
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    isz = f.info->tx_attr->inject_size;
    CHECK_RET(fi_tinject(b.ep, big, isz + 1, a.addr, 30) < 0, 1);
    CHECK_RET(fi_tinjectdata(b.ep, big, isz + 1, 5, a.addr, 30) < 0, 1);
    CHECK_RET(fi_inject(b.ep, big, isz + 1, a.addr) < 0, 1);
    CHECK_RET(fi_injectdata(b.ep, big, isz + 1, 5, a.addr) < 0, 1);
    {
        struct iovec iov = {big, isz + 1};
        struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = a.addr, .tag = 30};
        CHECK_RET(fi_tsendmsg(b.ep, &m, FI_INJECT) < 0, 1);
    }
    CHECK_RET(fe_drain(a.cq, b.cq, 50), 0);
    /* at the limit, zero length, with data */
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 31, 0, (void *)1), 0);
    CHECK_RET(fi_tinject(b.ep, big, isz, a.addr, 31), 0);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.len == isz && !(e.flags & FI_REMOTE_CQ_DATA), "inject at limit: r=%zd len=%zu flags=%llx", r, e.len, (unsigned long long)e.flags);
    CHECK_RET(fi_trecv(a.ep, NULL, 0, NULL, FI_ADDR_UNSPEC, 32, 0, (void *)2), 0);
    CHECK_RET(fi_tinjectdata(b.ep, NULL, 0, 0x1234, a.addr, 32), 0);
    r = fe_cq_wait(a.cq, &e, &src, T);
    CHECK(r == 1 && e.len == 0 && (e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x1234 && src == b.addr,
          "zero-length injectdata: r=%zd flags=%llx data=%llx src=%llu", r, (unsigned long long)e.flags,
          (unsigned long long)e.data, (unsigned long long)src);
    /* tsendmsg with FI_REMOTE_CQ_DATA and FI_INJECT: completion written */
    {
        struct iovec iov = {"xy", 2};
        struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = a.addr, .tag = 33,
                                  .context = (void *)3, .data = 0xbeef};
        CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 33, 0, (void *)4), 0);
        CHECK_RET(fi_tsendmsg(b.ep, &m, FI_INJECT | FI_REMOTE_CQ_DATA | FI_COMPLETION), 0);
        send_done((void *)3);
        r = fe_cq_wait(a.cq, &e, NULL, T);
        CHECK(r == 1 && e.data == 0xbeef && (e.flags & FI_REMOTE_CQ_DATA) && e.len == 2,
              "tsendmsg data: r=%zd", r);
        /* data given without FI_REMOTE_CQ_DATA is not delivered */
        CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 33, 0, (void *)5), 0);
        CHECK_RET(fi_tsendmsg(b.ep, &m, 0), 0);
        send_done((void *)3);
        r = fe_cq_wait(a.cq, &e, NULL, T);
        CHECK(r == 1 && !(e.flags & FI_REMOTE_CQ_DATA), "no data flag: flags %llx", (unsigned long long)e.flags);
    }
    /* untagged with data */
    CHECK_RET(fi_recv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, (void *)6), 0);
    CHECK_RET(fi_senddata(b.ep, "m", 1, NULL, 77, a.addr, (void *)7), 0);
    send_done((void *)7);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.op_context == (void *)6 && (e.flags & FI_MSG) && !(e.flags & FI_TAGGED) &&
              e.data == 77 && (e.flags & FI_REMOTE_CQ_DATA),
          "untagged senddata: flags %llx", (unsigned long long)e.flags);
    /* large message (rendezvous) with data */
    {
        static char L[1 << 20], R[1 << 20];
        memset(L, 7, sizeof(L));
        CHECK_RET(fi_trecv(a.ep, R, sizeof(R), NULL, FI_ADDR_UNSPEC, 34, 0, (void *)8), 0);
        CHECK_RET(fi_tsenddata(b.ep, L, sizeof(L), NULL, 0x99, a.addr, 34, (void *)9), 0);
        int got = 0;
        int64_t end = fe_now_ms() + T;
        while (got != 3 && fe_now_ms() < end) {
            if (fi_cq_read(a.cq, &e, 1) == 1) {
                CHECK(e.len == sizeof(R) && e.data == 0x99 && R[12345] == 7, "big data recv");
                got |= 1;
            }
            if (fi_cq_read(b.cq, &e, 1) == 1)
                got |= 2;
        }
        CHECK(got == 3, "big senddata done: %d", got);
    }
    pair_close();
}

static void selective(void)
{
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    char rb[16];
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, FI_SELECTIVE_COMPLETION);
    struct iovec iov = {"s", 1};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = a.addr, .tag = 40,
                              .context = (void *)1};
    struct iovec riov = {rb, sizeof(rb)};
    struct fi_msg_tagged rm = {.msg_iov = &riov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 40,
                               .context = (void *)2};
    /* neither side asks: no entries */
    CHECK_RET(fi_trecvmsg(a.ep, &rm, 0), 0);
    CHECK_RET(fi_tsendmsg(b.ep, &m, 0), 0);
    CHECK_RET(fe_drain(a.cq, b.cq, 100), 0);
    /* both ask */
    CHECK_RET(fi_trecvmsg(a.ep, &rm, FI_COMPLETION), 0);
    CHECK_RET(fi_tsendmsg(b.ep, &m, FI_COMPLETION), 0);
    send_done((void *)1);
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == 1 && e.op_context == (void *)2, "selective recv with FI_COMPLETION: r=%zd", r);
    /* fi_tsend / fi_trecv / fi_tinject without op flags: no entries */
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 41, 0, (void *)3), 0);
    CHECK_RET(fi_tsend(b.ep, "t", 1, NULL, a.addr, 41, (void *)4), 0);
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 42, 0, (void *)3), 0);
    CHECK_RET(fi_tsenddata(b.ep, "t", 1, NULL, 1, a.addr, 42, (void *)4), 0);
    CHECK_RET(fe_drain(a.cq, b.cq, 100), 0);
    /* a failure still reports: truncation of a receive without FI_COMPLETION */
    riov.iov_len = 1;
    rm.tag = 43;
    CHECK_RET(fi_trecvmsg(a.ep, &rm, 0), 0);
    iov.iov_base = "toolong";
    iov.iov_len = 7;
    m.tag = 43;
    CHECK_RET(fi_tsendmsg(b.ep, &m, 0), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ETRUNC && err.olen == 6 && err.op_context == (void *)2,
          "selective truncation: r=%zd err=%d olen=%zu", r, err.err, err.olen);
    /* a cancel of a receive without FI_COMPLETION reports */
    rm.tag = 44;
    rm.context = (void *)5;
    CHECK_RET(fi_trecvmsg(a.ep, &rm, 0), 0);
    CHECK_RET(fi_cancel(&a.ep->fid, (void *)5), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ECANCELED && err.op_context == (void *)5, "selective cancel: r=%zd err=%d", r, err.err);
    fe_drain(a.cq, b.cq, 50);
    pair_close();
}

static void directed(void)
{
    fe_ep_t c;
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
    char rb[16];
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_open(&f, &c, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_insert(&f, &c);
    /* a receive from c; b sends: no match */
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, c.addr, 50, 0, (void *)1), 0);
    CHECK_RET(fi_tsend(b.ep, "b", 1, NULL, a.addr, 50, (void *)2), 0);
    send_done((void *)2);
    r = fe_cq_wait(a.cq, &e, NULL, 200);
    CHECK(r == -FI_EAGAIN, "directed receive ignores another source: r=%zd", r);
    CHECK_RET(fi_tsend(c.ep, "c", 1, NULL, a.addr, 50, (void *)3), 0);
    r = fe_cq_wait(a.cq, &e, &src, T);
    CHECK(r == 1 && e.op_context == (void *)1 && rb[0] == 'c' && src == c.addr,
          "directed receive from c: r=%zd buf=%c src=%llu", r, rb[0], (unsigned long long)src);
    /* b's message is taken by FI_ADDR_UNSPEC */
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 50, 0, (void *)4), 0);
    r = fe_cq_wait(a.cq, &e, &src, T);
    CHECK(r == 1 && rb[0] == 'b' && src == b.addr, "any-source receive: r=%zd src=%llu", r, (unsigned long long)src);
    /* untagged directed */
    CHECK_RET(fi_recv(a.ep, rb, sizeof(rb), NULL, c.addr, (void *)5), 0);
    CHECK_RET(fi_send(b.ep, "B", 1, NULL, a.addr, (void *)6), 0);
    send_done((void *)6);
    r = fe_cq_wait(a.cq, &e, NULL, 200);
    CHECK(r == -FI_EAGAIN, "untagged directed receive ignores b: r=%zd", r);
    CHECK_RET(fi_cancel(&a.ep->fid, (void *)5), 0);
    fe_drain(a.cq, NULL, 50);
    fe_drain(c.cq, NULL, 50);
    fe_ep_close(&c);
    pair_close();
}

static void cancels(void)
{
    struct fi_cq_err_entry err;
    struct fi_cq_tagged_entry e;
    char rb[16];
    static char big[4 << 20];
    char edata[4];
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 60, 0, (void *)1), 0);
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 61, 0, (void *)2), 0);
    CHECK_RET(fi_cancel(&a.ep->fid, (void *)1), 0);
    CHECK_RET(fi_cancel(&a.ep->fid, (void *)1), -FI_ENOENT);
    CHECK_RET(fi_cancel(&a.ep->fid, (void *)99), -FI_ENOENT);
    /* read the error with a short err_data buffer */
    r = fe_cq_wait(a.cq, &e, NULL, T);
    CHECK(r == -FI_EAVAIL, "cancel -> -FI_EAVAIL: %zd", r);
    memset(&err, 0, sizeof(err));
    err.err_data = edata;
    err.err_data_size = sizeof(edata);
    r = fi_cq_readerr(a.cq, &err, 0);
    CHECK(r == 1 && err.err == FI_ECANCELED && err.op_context == (void *)1 &&
              (err.flags & FI_RECV) && err.err_data_size <= sizeof(edata),
          "cancel error: r=%zd err=%d ctx=%p flags=%llx err_data_size=%zu", r, err.err, err.op_context,
          (unsigned long long)err.flags, err.err_data_size);
    {
        char sb[64];
        const char *s = fi_cq_strerror(a.cq, err.prov_errno, err.err_data, sb, sizeof(sb));
        CHECK(s != NULL && sb[0] != 0, "fi_cq_strerror: %s / %s", s ? s : "(null)", sb);
        s = fi_cq_strerror(a.cq, 123456, NULL, NULL, 0);
        CHECK(s != NULL, "fi_cq_strerror of an unknown code: %s", s ? s : "(null)");
        s = fi_cq_strerror(a.cq, -5, NULL, sb, 1);
        CHECK(s != NULL && sb[0] == 0, "fi_cq_strerror with len 1");
    }
    CHECK_RET(fi_cq_readerr(a.cq, &err, 0), -FI_EAGAIN);
    CHECK_RET(fi_cancel(&a.ep->fid, (void *)2), 0);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ECANCELED && err.op_context == (void *)2, "second cancel: r=%zd", r);
    /* cancel a rendezvous send that nobody receives */
    CHECK_RET(fi_tsend(b.ep, big, sizeof(big), NULL, a.addr, 62, (void *)3), 0);
    usleep(10000);
    fi_cq_read(b.cq, &e, 1);
    r = fi_cancel(&b.ep->fid, (void *)3);
    CHECK(r == 0 || r == -FI_ENOENT, "cancel of a pending big send: %zd", r);
    if (r == 0) {
        r = fe_cq_wait_err(b.cq, &err, T);
        CHECK(r == 1 && err.err == FI_ECANCELED && err.op_context == (void *)3 && (err.flags & FI_SEND),
              "send cancel error: r=%zd err=%d flags=%llx", r, err.err, (unsigned long long)err.flags);
    }
    /* the receiver must not get a broken message afterwards */
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 62, 0, (void *)4), 0);
    r = fe_cq_wait(a.cq, &e, NULL, 300);
    CHECK(r == -FI_EAGAIN || r == -FI_EAVAIL, "receive after the send was canceled: %zd", r);
    if (r == -FI_EAVAIL) {
        fi_cq_readerr(a.cq, &err, 0);
        printf("     (receive after cancel: err %d olen %zu)\n", err.err, err.olen);
    }
    fi_cancel(&a.ep->fid, (void *)4);
    fe_drain(a.cq, b.cq, 50);
    pair_close();
}

static void truncation(void)
{
    struct fi_cq_err_entry err;
    char rb[4];
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 70, 0, (void *)1), 0);
    CHECK_RET(fi_tsenddata(b.ep, "0123456789", 10, NULL, 5, a.addr, 70, (void *)2), 0);
    send_done((void *)2);
    r = fe_cq_wait_err(a.cq, &err, T);
    CHECK(r == 1 && err.err == FI_ETRUNC && err.olen == 6 && err.len == 4 && err.tag == 70 &&
              err.op_context == (void *)1 && (err.flags & FI_RECV) && err.data == 5,
          "truncation: r=%zd err=%d olen=%zu len=%zu tag=%llu flags=%llx data=%llu", r, err.err,
          err.olen, err.len, (unsigned long long)err.tag, (unsigned long long)err.flags,
          (unsigned long long)err.data);
    pair_close();
}

/* Each format writes exactly its entry size. */
static void formats(void)
{
    static const enum fi_cq_format fmts[] = {FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT,
                                             FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED};
    static const size_t sizes[] = {sizeof(struct fi_cq_entry), sizeof(struct fi_cq_entry),
                                   sizeof(struct fi_cq_msg_entry), sizeof(struct fi_cq_data_entry),
                                   sizeof(struct fi_cq_tagged_entry)};

    for (int k = 0; k < 5; k++) {
        unsigned char out[3 * sizeof(struct fi_cq_tagged_entry)];
        char rb[16];
        ssize_t r = -FI_EAGAIN;
        int64_t end;

        pair_open(fmts[k], 0);
        CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 80, 0, (void *)0x11), 0);
        CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 81, 0, (void *)0x12), 0);
        CHECK_RET(fi_tsenddata(b.ep, "abc", 3, NULL, 0x77, a.addr, 80, (void *)0x21), 0);
        CHECK_RET(fi_tsend(b.ep, "abcd", 4, NULL, a.addr, 81, (void *)0x22), 0);
        usleep(20000);
        memset(out, 0xee, sizeof(out));
        end = fe_now_ms() + T;
        while (r == -FI_EAGAIN && fe_now_ms() < end)
            r = fi_cq_read(a.cq, out, 1);
        CHECK(r == 1, "format %d: read 1: %zd", fmts[k], r);
        CHECK(out[sizes[k]] == 0xee && out[sizeof(out) - 1] == 0xee,
              "format %d: wrote no more than one entry of %zu bytes", fmts[k], sizes[k]);
        {
            struct fi_cq_tagged_entry *t = (void *)out;
            void *ctx = t->op_context;
            CHECK(ctx == (void *)0x11 || ctx == (void *)0x12, "format %d: context %p", fmts[k], ctx);
            if (k >= 2)
                CHECK((t->flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED) &&
                          t->len == (ctx == (void *)0x11 ? 3u : 4u),
                      "format %d: flags %llx len %zu", fmts[k], (unsigned long long)t->flags, t->len);
            if (k >= 3 && ctx == (void *)0x11)
                CHECK(t->data == 0x77, "format %d: data %llx", fmts[k], (unsigned long long)t->data);
            if (k == 4)
                CHECK(t->tag == (ctx == (void *)0x11 ? 80u : 81u), "format TAGGED: tag %llu",
                      (unsigned long long)t->tag);
        }
        /* count 0 with an entry waiting: not an error */
        r = fi_cq_read(a.cq, out, 0);
        CHECK(r == 0 || r == -FI_EAGAIN, "format %d: fi_cq_read count 0 with an entry queued: %zd (%s)",
              fmts[k], r, fi_strerror((int)-r));
        /* count larger than available */
        r = -FI_EAGAIN;
        end = fe_now_ms() + T;
        while (r == -FI_EAGAIN && fe_now_ms() < end)
            r = fi_cq_read(a.cq, out, 3);
        CHECK(r == 1, "format %d: read 3 with 1 left: %zd", fmts[k], r);
        fe_drain(a.cq, b.cq, 30);
        pair_close();
    }
}

/* fi_cq_read with count 0 while a success entry waits in the CQ: a
 * send's completion is written to the CQ at once (the provider's ring). */
static void count0_ring(void)
{
    struct fi_cq_tagged_entry e[4];
    struct fi_cq_err_entry err;
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    CHECK_RET(fi_tsend(b.ep, "abc", 3, NULL, a.addr, 90, (void *)2), 0);
    r = fi_cq_read(b.cq, e, 0);
    CHECK(r == 0 || r == -FI_EAGAIN, "fi_cq_read(count 0) with a success entry queued: %zd (%s)", r,
          fi_strerror((int)-r));
    if (r == -FI_EAVAIL) {
        memset(&err, 0, sizeof(err));
        r = fi_cq_readerr(b.cq, &err, 0);
        CHECK(r == 1, "  and fi_cq_readerr after that -FI_EAVAIL: %zd (%s)", r, fi_strerror((int)-r));
    }
    r = fi_cq_read(b.cq, e, 4);
    CHECK(r == 1 && e[0].op_context == (void *)2 && (e[0].flags & FI_SEND), "then the entry: %zd", r);
    fe_drain(a.cq, b.cq, 30);
    pair_close();
}

static void *late_sender(void *arg)
{
    usleep(300000);
    fi_tinject(b.ep, "w", 1, a.addr, 100);
    return arg;
}

static void sread(void)
{
    struct fi_cq_tagged_entry e;
    fi_addr_t src = 12345;
    char rb[8];
    int64_t t0;
    ssize_t r;
    pthread_t th;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    t0 = fe_now_ms();
    r = fi_cq_sread(a.cq, &e, 1, NULL, 0);
    CHECK(r == -FI_EAGAIN && fe_now_ms() - t0 < 100, "sread timeout 0: %zd in %lld ms", r,
          (long long)(fe_now_ms() - t0));
    t0 = fe_now_ms();
    r = fi_cq_sread(a.cq, &e, 1, NULL, 150);
    int64_t dt = fe_now_ms() - t0;
    CHECK(r == -FI_EAGAIN && dt >= 140 && dt < 1000, "sread timeout 150: %zd in %lld ms", r, (long long)dt);
    t0 = fe_now_ms();
    r = fi_cq_sreadfrom(a.cq, &e, 1, &src, NULL, 20);
    CHECK(r == -FI_EAGAIN, "sreadfrom timeout 20: %zd", r);
    if (threading() == FI_THREAD_SAFE) {
        CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 100, 0, (void *)1), 0);
        pthread_create(&th, NULL, late_sender, NULL);
        t0 = fe_now_ms();
        r = fi_cq_sreadfrom(a.cq, &e, 1, &src, NULL, -1);
        dt = fe_now_ms() - t0;
        CHECK(r == 1 && e.op_context == (void *)1 && src == b.addr && dt >= 250 && dt < 2000,
              "blocking sreadfrom woken by an arrival: %zd after %lld ms, src %llu", r, (long long)dt,
              (unsigned long long)src);
        pthread_join(th, NULL);
        /* signal */
        CHECK_RET(fi_cq_signal(a.cq), 0);
        r = fi_cq_sread(a.cq, &e, 1, NULL, 2000);
        CHECK(r == -FI_ECANCELED || r == -FI_EAGAIN, "sread after signal: %zd", r);
    }
    fe_drain(a.cq, b.cq, 30);
    pair_close();
}

/* More completions than the CQ's size, not read until the end. */
static void overflow(void)
{
    enum { N = 300 };
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .size = 8};
    struct fid_cq *rcq, *tcq;
    struct fid_ep *ep;
    fi_addr_t self;
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);
    static char rb[N][8];
    int tx = 0, rx = 0, errs = 0;
    ssize_t r;

    fe_open(&f, fe_hints(CAPS, threading()), FI_AV_TABLE);
    MUST(fi_endpoint(f.domain, f.info, &ep, NULL));
    MUST(fi_cq_open(f.domain, &ca, &rcq, NULL));
    MUST(fi_cq_open(f.domain, &ca, &tcq, NULL));
    MUST(fi_ep_bind(ep, &rcq->fid, FI_RECV));
    MUST(fi_ep_bind(ep, &tcq->fid, FI_TRANSMIT));
    MUST(fi_ep_bind(ep, &f.av->fid, 0));
    MUST(fi_enable(ep));
    MUST(fi_getname(&ep->fid, name, &len));
    CHECK_RET(fi_av_insert(f.av, name, 1, &self, 0, NULL), 1);
    for (int i = 0; i < N; i++) {
        r = fi_trecv(ep, rb[i], 8, NULL, FI_ADDR_UNSPEC, 200 + i, 0, (void *)(intptr_t)(i + 1));
        if (r != 0) {
            CHECK(r == -FI_EAGAIN, "trecv %d: %zd", i, r);
            break;
        }
        r = fi_tsend(ep, "12345678", 8, NULL, self, 200 + i, (void *)(intptr_t)(1000 + i));
        if (r != 0) {
            CHECK(r == -FI_EAGAIN, "tsend %d: %zd", i, r);
            break;
        }
    }
    usleep(50000);
    int64_t end = fe_now_ms() + T;
    while ((tx < N || rx < N) && fe_now_ms() < end) {
        struct fi_cq_tagged_entry e[16];
        struct fi_cq_err_entry err;
        if ((r = fi_cq_read(tcq, e, 16)) > 0)
            tx += (int)r;
        else if (r == -FI_EAVAIL && fi_cq_readerr(tcq, &err, 0) == 1)
            errs++;
        if ((r = fi_cq_read(rcq, e, 16)) > 0)
            rx += (int)r;
        else if (r == -FI_EAVAIL && fi_cq_readerr(rcq, &err, 0) == 1)
            errs++;
    }
    CHECK(tx == N && rx == N && errs == 0, "overflowed CQs (size 8): %d tx, %d rx of %d, %d errors",
          tx, rx, N, errs);
    MUST(fi_close(&ep->fid));
    MUST(fi_close(&rcq->fid));
    MUST(fi_close(&tcq->fid));
    fe_close(&f);
}

static void readfrom_sends(void)
{
    struct fi_cq_tagged_entry e;
    fi_addr_t src = 7;
    ssize_t r;

    pair_open(FI_CQ_FORMAT_TAGGED, 0);
    CHECK_RET(fi_tsend(b.ep, "x", 1, NULL, a.addr, 110, (void *)1), 0);
    r = fe_cq_wait(b.cq, &e, &src, T);
    CHECK(r == 1 && src == FI_ADDR_NOTAVAIL, "readfrom of a send: src %llu", (unsigned long long)src);
    fe_drain(a.cq, b.cq, 30);
    pair_close();
}

int main(int argc, char **argv)
{
    static const fe_case_t cases[] = {
        {"peek_claim", peek_claim},   {"iovs", iovs},
        {"inject_data", inject_data}, {"selective", selective},
        {"directed", directed},       {"cancels", cancels},
        {"truncation", truncation},   {"formats", formats},
        {"count0_ring", count0_ring}, {"sread", sread},
        {"overflow", overflow},       {"readfrom_sends", readfrom_sends},
    };
    return fe_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv, 60);
}
