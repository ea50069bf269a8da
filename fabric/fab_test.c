/*
 * The tmx provider through libfabric's normal API: three endpoints in one
 * process (shm between their tmx contexts) and a forked process.
 * Run with FI_PROVIDER_PATH naming the build's fabric/ and FI_PROVIDER=tmx.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define N_EP 3
#define BIG (1u << 20)
#define WAIT_MS 20000

typedef struct node {
    struct fid_ep *ep;
    struct fid_cq *cq;
    fi_addr_t addr;
} node_t;

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static node_t nodes[N_EP];

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct fi_info *hints_new(void)
{
    struct fi_info *h = fi_allocinfo();

    h->fabric_attr->prov_name = strdup("tmx");
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE | FI_REMOTE_CQ_DATA;
    h->mode = FI_CONTEXT;
    h->domain_attr->threading = FI_THREAD_SAFE;
    return h;
}

static void node_open(node_t *n, uint64_t cq_flags)
{
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};

    assert_int_equal(fi_endpoint(domain, info, &n->ep, NULL), 0);
    assert_int_equal(fi_cq_open(domain, &ca, &n->cq, NULL), 0);
    assert_int_equal(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV | cq_flags), 0);
    assert_int_equal(fi_ep_bind(n->ep, &av->fid, 0), 0);
    assert_int_equal(fi_enable(n->ep), 0);
}

static void node_insert(node_t *n)
{
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);

    assert_int_equal(fi_getname(&n->ep->fid, name, &len), 0);
    assert_int_equal(len, FI_NAME_MAX);
    assert_int_equal(fi_av_insert(av, name, 1, &n->addr, 0, NULL), 1);
}

static void node_close(node_t *n)
{
    assert_int_equal(fi_close(&n->ep->fid), 0);
    assert_int_equal(fi_close(&n->cq->fid), 0);
}

static int setup(void **state)
{
    struct fi_info *h = hints_new();
    struct fi_av_attr aa = {.type = FI_AV_TABLE};

    if (fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info) != 0)
        return -1;
    fi_freeinfo(h);
    if (fi_fabric(info->fabric_attr, &fabric, NULL) || fi_domain(fabric, info, &domain, NULL) ||
        fi_av_open(domain, &aa, &av, NULL))
        return -1;
    for (int i = 0; i < N_EP; i++)
        node_open(&nodes[i], 0);
    for (int i = 0; i < N_EP; i++)
        node_insert(&nodes[i]);
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < N_EP; i++)
        node_close(&nodes[i]);
    fi_close(&av->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    return 0;
}

/* Reads one entry, for up to WAIT_MS. Other endpoints in this process are
 * not driven meanwhile: shm and self move data without the sender's help
 * up to the rendezvous read, which the receiver does. */
static ssize_t cq_wait(struct fid_cq *cq, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
    int64_t end = now_ms() + WAIT_MS;
    ssize_t ret;

    do {
        ret = fi_cq_readfrom(cq, e, 1, src);
        if (ret != -FI_EAGAIN)
            return ret;
    } while (now_ms() < end);
    return -FI_ETIMEDOUT;
}

static void cq_empty(struct fid_cq *cq)
{
    struct fi_cq_tagged_entry e;

    assert_int_equal(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
}

static void cq_wait_err(struct fid_cq *cq, struct fi_cq_err_entry *err)
{
    struct fi_cq_tagged_entry e;

    assert_int_equal(cq_wait(cq, &e, NULL), -FI_EAVAIL);
    memset(err, 0, sizeof(*err));
    assert_int_equal(fi_cq_readerr(cq, err, 0), 1);
}

/* The sender's completion may need the receiver's progress (rendezvous):
 * poll both until both are there. */
static void complete_pair(node_t *s, node_t *r, void *sctx, void *rctx,
                          struct fi_cq_tagged_entry *re, fi_addr_t *src)
{
    struct fi_cq_tagged_entry se;
    int got_s = 0, got_r = 0;
    int64_t end = now_ms() + WAIT_MS;

    while ((!got_s || !got_r) && now_ms() < end) {
        if (!got_s && fi_cq_read(s->cq, &se, 1) == 1) {
            assert_ptr_equal(se.op_context, sctx);
            assert_true(se.flags & FI_SEND);
            got_s = 1;
        }
        if (!got_r && fi_cq_readfrom(r->cq, re, 1, src) == 1) {
            assert_ptr_equal(re->op_context, rctx);
            got_r = 1;
        }
    }
    assert_true(got_s && got_r);
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31 + seed);
}

static void transfer(node_t *s, node_t *r, size_t len, uint64_t tag)
{
    unsigned char *out = malloc(len + 1), *in = calloc(1, len + 1);
    struct fi_cq_tagged_entry re;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    int sctx, rctx;

    fill(out, len, (unsigned)tag);
    assert_int_equal(fi_trecv(r->ep, in, len, NULL, FI_ADDR_UNSPEC, tag, 0, &rctx), 0);
    assert_int_equal(fi_tsend(s->ep, out, len, NULL, r->addr, tag, &sctx), 0);
    complete_pair(s, r, &sctx, &rctx, &re, &src);
    assert_int_equal(re.len, len);
    assert_int_equal(re.tag, tag);
    assert_int_equal(re.flags & (FI_TAGGED | FI_RECV), FI_TAGGED | FI_RECV);
    assert_int_equal(src, s->addr);
    assert_memory_equal(in, out, len);
    free(out);
    free(in);
}

static void test_tsend_trecv(void **state)
{
    size_t sizes[] = {0, 1, 100, 4096, 70000, BIG};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        transfer(&nodes[0], &nodes[1], sizes[i], 7 + i);
        transfer(&nodes[1], &nodes[0], sizes[i], 0x7fffffffffffffffULL - i);
    }
    transfer(&nodes[0], &nodes[0], 1000, 3);    /* to itself */
}

static void test_directed_vs_any(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1], *c = &nodes[2];
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
    char from_c[8] = {0}, any[8] = {0};
    int dctx, actx, s1, s2;

    assert_int_equal(fi_trecv(b->ep, from_c, 8, NULL, c->addr, 5, 0, &dctx), 0);
    assert_int_equal(fi_tsend(a->ep, "from-a", 7, NULL, b->addr, 5, &s1), 0);
    assert_int_equal(fi_trecv(b->ep, any, 8, NULL, FI_ADDR_UNSPEC, 5, 0, &actx), 0);
    assert_int_equal(cq_wait(b->cq, &e, &src), 1);
    assert_ptr_equal(e.op_context, &actx);
    assert_int_equal(src, a->addr);
    assert_string_equal(any, "from-a");
    assert_int_equal(fi_tsend(c->ep, "from-c", 7, NULL, b->addr, 5, &s2), 0);
    assert_int_equal(cq_wait(b->cq, &e, &src), 1);
    assert_ptr_equal(e.op_context, &dctx);
    assert_int_equal(src, c->addr);
    assert_string_equal(from_c, "from-c");
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
    assert_int_equal(cq_wait(c->cq, &e, NULL), 1);
}

static void test_tag_ignore(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    struct fi_cq_tagged_entry e;
    char buf[4];
    int rctx, sctx;

    assert_int_equal(fi_trecv(b->ep, buf, 4, NULL, FI_ADDR_UNSPEC, 0x1200, 0xff, &rctx), 0);
    assert_int_equal(fi_tsend(a->ep, "abc", 4, NULL, b->addr, 0x12ab, &sctx), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_int_equal(e.tag, 0x12ab);
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
}

static void test_inject_and_data(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    struct fi_cq_tagged_entry e;
    char buf[64], msg[64] = "injected";
    int r1, r2, r3, sctx;

    assert_int_equal(fi_trecv(b->ep, buf, 64, NULL, a->addr, 1, 0, &r1), 0);
    assert_int_equal(fi_tinject(a->ep, msg, 9, b->addr, 1), 0);
    memset(msg, 'x', sizeof(msg));                  /* reusable at once */
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_string_equal(buf, "injected");
    assert_false(e.flags & FI_REMOTE_CQ_DATA);

    assert_int_equal(fi_trecv(b->ep, buf, 64, NULL, a->addr, 2, 0, &r2), 0);
    assert_int_equal(fi_tinjectdata(a->ep, "d1", 3, 0xdead, b->addr, 2), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_true(e.flags & FI_REMOTE_CQ_DATA);
    assert_int_equal(e.data, 0xdead);

    assert_int_equal(fi_trecv(b->ep, buf, 64, NULL, a->addr, 3, 0, &r3), 0);
    assert_int_equal(fi_tsenddata(a->ep, "d2", 3, NULL, 0xbeefcafe12345678ULL, b->addr, 3, &sctx),
                     0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_int_equal(e.data, 0xbeefcafe12345678ULL);
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &sctx);
    cq_empty(a->cq);   /* injects report nothing */
}

static ssize_t peek(node_t *n, uint64_t tag, uint64_t flags, void *ctx, void *buf, size_t len)
{
    struct iovec iov = {buf, len};
    struct fi_msg_tagged m = {.msg_iov = buf ? &iov : NULL, .iov_count = buf ? 1 : 0,
                              .addr = FI_ADDR_UNSPEC, .tag = tag, .context = ctx};

    return fi_trecvmsg(n->ep, &m, flags);
}

static void test_peek_nothing(void **state)
{
    struct fi_cq_err_entry err;
    int ctx;

    assert_int_equal(peek(&nodes[1], 99, FI_PEEK | FI_COMPLETION, &ctx, NULL, 0), 0);
    cq_wait_err(nodes[1].cq, &err);
    assert_int_equal(err.err, FI_ENOMSG);
    assert_ptr_equal(err.op_context, &ctx);
}

/* Peeks until the message sent to n has arrived. */
static void peek_until(node_t *n, uint64_t tag, uint64_t flags, void *ctx,
                       struct fi_cq_tagged_entry *e)
{
    struct fi_cq_err_entry err;
    int64_t end = now_ms() + WAIT_MS;

    while (now_ms() < end) {
        assert_int_equal(peek(n, tag, flags, ctx, NULL, 0), 0);
        if (cq_wait(n->cq, e, NULL) == 1)
            return;
        assert_int_equal(fi_cq_readerr(n->cq, &err, 0), 1);
        assert_int_equal(err.err, FI_ENOMSG);
    }
    fail_msg("message with tag %llu never arrived", (unsigned long long)tag);
}

static void test_peek_claim(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    struct fi_cq_tagged_entry e;
    char buf[16] = {0};
    int s1, s2, pctx, cctx;

    assert_int_equal(fi_tsenddata(a->ep, "claimed", 8, NULL, 42, b->addr, 11, &s1), 0);
    peek_until(b, 11, FI_PEEK, &pctx, &e);
    assert_int_equal(e.len, 8);
    assert_int_equal(e.tag, 11);
    assert_int_equal(e.data, 42);
    peek_until(b, 11, FI_PEEK | FI_CLAIM, &cctx, &e);
    assert_int_equal(peek(b, 11, FI_PEEK, &pctx, NULL, 0), 0);   /* claimed: gone */
    struct fi_cq_err_entry err;
    cq_wait_err(b->cq, &err);
    assert_int_equal(err.err, FI_ENOMSG);
    assert_int_equal(peek(b, 11, FI_CLAIM, &cctx, buf, sizeof(buf)), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &cctx);
    assert_string_equal(buf, "claimed");
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);

    assert_int_equal(fi_tsend(a->ep, "dropped", 8, NULL, b->addr, 12, &s2), 0);
    peek_until(b, 12, FI_PEEK | FI_CLAIM, &cctx, &e);
    assert_int_equal(peek(b, 12, FI_CLAIM | FI_DISCARD, &cctx, NULL, 0), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_int_equal(peek(b, 12, FI_PEEK, &pctx, NULL, 0), 0);
    cq_wait_err(b->cq, &err);
    assert_int_equal(err.err, FI_ENOMSG);
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
}

static void test_cancel(void **state)
{
    struct fi_cq_err_entry err;
    char buf[8];
    int ctx;

    assert_int_equal(fi_trecv(nodes[1].ep, buf, 8, NULL, FI_ADDR_UNSPEC, 77, 0, &ctx), 0);
    assert_int_equal(fi_cancel(&nodes[1].ep->fid, &ctx), 0);
    cq_wait_err(nodes[1].cq, &err);
    assert_int_equal(err.err, FI_ECANCELED);
    assert_ptr_equal(err.op_context, &ctx);
    assert_int_equal(fi_cancel(&nodes[1].ep->fid, &ctx), -FI_ENOENT);
}

/* tmx cannot cancel a send: fi_cancel says so (-FI_ENOENT) and the send
 * completes normally once received, as fi_cancel(3) allows. Open MPI's
 * MPI_Cancel of a send relies on this. */
static void test_cancel_send(void **state)
{
    unsigned char *out = malloc(BIG), *in = calloc(1, BIG);
    struct fi_cq_tagged_entry re;
    fi_addr_t src;
    int sctx, rctx;

    fill(out, BIG, 5);
    assert_int_equal(fi_tsend(nodes[0].ep, out, BIG, NULL, nodes[1].addr, 78, &sctx), 0);
    assert_int_equal(fi_cancel(&nodes[0].ep->fid, &sctx), -FI_ENOENT);
    assert_int_equal(fi_trecv(nodes[1].ep, in, BIG, NULL, FI_ADDR_UNSPEC, 78, 0, &rctx), 0);
    complete_pair(&nodes[0], &nodes[1], &sctx, &rctx, &re, &src);
    assert_int_equal(re.len, BIG);
    assert_memory_equal(in, out, BIG);
    free(out);
    free(in);
}

static void test_truncation(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    struct fi_cq_err_entry err;
    struct fi_cq_tagged_entry e;
    unsigned char out[100], in[10];
    int rctx, sctx;

    fill(out, sizeof(out), 1);
    assert_int_equal(fi_trecv(b->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 8, 0, &rctx), 0);
    assert_int_equal(fi_tsend(a->ep, out, sizeof(out), NULL, b->addr, 8, &sctx), 0);
    cq_wait_err(b->cq, &err);
    assert_int_equal(err.err, FI_ETRUNC);
    assert_int_equal(err.olen, 90);
    assert_int_equal(err.len, 10);
    assert_ptr_equal(err.op_context, &rctx);
    assert_memory_equal(in, out, sizeof(in));
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
}

static void test_msg_ops(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    struct fi_cq_tagged_entry e;
    char tbuf[8] = {0}, mbuf[8] = {0};
    int tctx, mctx, s1, s2;

    /* A tagged receive for any tag must not take an untagged message. */
    assert_int_equal(fi_trecv(b->ep, tbuf, 8, NULL, FI_ADDR_UNSPEC, 0, ~0ULL >> 1, &tctx), 0);
    assert_int_equal(fi_send(a->ep, "msg", 4, NULL, b->addr, &s1), 0);
    assert_int_equal(fi_recv(b->ep, mbuf, 8, NULL, FI_ADDR_UNSPEC, &mctx), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &mctx);
    assert_int_equal(e.flags & (FI_MSG | FI_RECV), FI_MSG | FI_RECV);
    assert_string_equal(mbuf, "msg");
    assert_int_equal(fi_tsend(a->ep, "tag", 4, NULL, b->addr, 1, &s2), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &tctx);
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
    /* Bit 63 belongs to untagged messages while FI_MSG is on. */
    assert_int_equal(fi_tsend(a->ep, "x", 1, NULL, b->addr, 1ULL << 63, &s2), -FI_EINVAL);
}

/* A NULL buffer with a length (what Open MPI 4.1's pml cm passes for a
 * persistent operation from MPI_BOTTOM) is refused at the call, on every
 * path, and the endpoint goes on working. */
static void test_null_buffer_refused(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    int ctx;

    assert_int_equal(fi_tsend(a->ep, NULL, 4, NULL, b->addr, 9, &ctx), -FI_EINVAL);
    assert_int_equal(fi_tinject(a->ep, NULL, 4, b->addr, 9), -FI_EINVAL);
    assert_int_equal(fi_tsenddata(a->ep, NULL, 4, NULL, 1, b->addr, 9, &ctx), -FI_EINVAL);
    assert_int_equal(fi_trecv(b->ep, NULL, 4, NULL, FI_ADDR_UNSPEC, 9, 0, &ctx), -FI_EINVAL);
    assert_int_equal(fi_send(a->ep, NULL, 4, NULL, b->addr, &ctx), -FI_EINVAL);
    assert_int_equal(fi_recv(b->ep, NULL, 4, NULL, FI_ADDR_UNSPEC, &ctx), -FI_EINVAL);
    transfer(a, b, 100, 9);
}

static void test_selective(void **state)
{
    node_t s;
    node_t *b = &nodes[1];
    struct fi_cq_tagged_entry e;
    char buf[8];
    int c1, c2, r1, r2;
    struct iovec iov = {"two", 4};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = b->addr, .tag = 21,
                              .context = &c2};

    /* tmx drops messages from senders missing in the receiver's AV. */
    node_open(&s, FI_SELECTIVE_COMPLETION);
    node_insert(&s);
    assert_int_equal(fi_trecv(b->ep, buf, 8, NULL, FI_ADDR_UNSPEC, 20, 0, &r1), 0);
    assert_int_equal(fi_tsend(s.ep, "one", 4, NULL, b->addr, 20, &c1), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_int_equal(fi_trecv(b->ep, buf, 8, NULL, FI_ADDR_UNSPEC, 21, 0, &r2), 0);
    assert_int_equal(fi_tsendmsg(s.ep, &m, FI_COMPLETION), 0);
    assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
    assert_int_equal(cq_wait(s.cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &c2);   /* only the one that asked */
    cq_empty(s.cq);
    node_close(&s);
}

/* With selective completion a receive without FI_COMPLETION is silent
 * when it succeeds, but a truncated or canceled one still reports, with
 * the kind (tagged or untagged) it was posted as. */
static void test_selective_recv_errors(void **state)
{
    node_t s;
    node_t *a = &nodes[0];
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    struct iovec iov;
    char buf[4], big[16] = "sixteen bytes!!";
    int r1, r2, r3, r4, c1, c2;
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 31,
                              .context = &r4};

    node_open(&s, FI_SELECTIVE_COMPLETION);
    node_insert(&s);
    assert_int_equal(fi_trecv(s.ep, buf, 4, NULL, FI_ADDR_UNSPEC, 30, 0, &r1), 0);
    assert_int_equal(fi_tsend(a->ep, "abc", 4, NULL, s.addr, 30, &c1), 0);
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
    assert_int_equal(fi_trecv(s.ep, buf, 4, NULL, FI_ADDR_UNSPEC, 30, 0, &r2), 0);
    assert_int_equal(fi_tsend(a->ep, big, sizeof(big), NULL, s.addr, 30, &c2), 0);
    assert_int_equal(cq_wait(a->cq, &e, NULL), 1);
    cq_wait_err(s.cq, &err);                /* the first was silent */
    assert_ptr_equal(err.op_context, &r2);
    assert_int_equal(err.err, FI_ETRUNC);
    assert_int_equal(err.olen, sizeof(big) - 4);
    assert_int_equal(err.flags, FI_TAGGED | FI_RECV);
    assert_int_equal(fi_recv(s.ep, buf, 4, NULL, FI_ADDR_UNSPEC, &r3), 0);
    assert_int_equal(fi_cancel(&s.ep->fid, &r3), 0);
    cq_wait_err(s.cq, &err);
    assert_ptr_equal(err.op_context, &r3);
    assert_int_equal(err.err, FI_ECANCELED);
    assert_int_equal(err.flags, FI_MSG | FI_RECV);
    iov = (struct iovec){buf, 4};
    assert_int_equal(fi_trecvmsg(s.ep, &m, FI_COMPLETION), 0);
    assert_int_equal(fi_cancel(&s.ep->fid, &r4), 0);
    cq_wait_err(s.cq, &err);
    assert_ptr_equal(err.op_context, &r4);
    assert_int_equal(err.tag, 31);
    cq_empty(s.cq);
    node_close(&s);
}

/* An endpoint of its own whose sends and receives go to two CQs. */
static void split_open(node_t *n, struct fid_cq **tx, enum fi_cq_format txf, enum fi_cq_format rxf)
{
    struct fi_cq_attr ta = {.format = txf}, ra = {.format = rxf};

    assert_int_equal(fi_endpoint(domain, info, &n->ep, NULL), 0);
    assert_int_equal(fi_cq_open(domain, &ta, tx, NULL), 0);
    assert_int_equal(fi_cq_open(domain, &ra, &n->cq, NULL), 0);
    assert_int_equal(fi_ep_bind(n->ep, &(*tx)->fid, FI_TRANSMIT), 0);
    assert_int_equal(fi_ep_bind(n->ep, &n->cq->fid, FI_RECV), 0);
    assert_int_equal(fi_ep_bind(n->ep, &av->fid, 0), 0);
    assert_int_equal(fi_enable(n->ep), 0);
    node_insert(n);
}

static void split_close(node_t *n, struct fid_cq *tx)
{
    node_close(n);
    assert_int_equal(fi_close(&tx->fid), 0);
}

/* Reading the receive CQ also moves the endpoint's send completions to
 * its send CQ; each CQ writes its own format and nothing past it. */
static void test_split_cqs(void **state)
{
    node_t n;
    struct fid_cq *tx;
    struct fi_cq_data_entry d[2];
    struct fi_cq_entry c[2];
    char buf[8];
    int r1, s1;
    int64_t end = now_ms() + WAIT_MS;
    ssize_t ret;

    split_open(&n, &tx, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_DATA);
    memset(d, 0xee, sizeof(d));
    assert_int_equal(fi_trecv(n.ep, buf, 8, NULL, FI_ADDR_UNSPEC, 5, 0, &r1), 0);
    assert_int_equal(fi_tsenddata(n.ep, "abc", 4, NULL, 77, n.addr, 5, &s1), 0);
    while ((ret = fi_cq_read(n.cq, d, 2)) == -FI_EAGAIN && now_ms() < end)
        ;
    assert_int_equal(ret, 1);
    assert_ptr_equal(d[0].op_context, &r1);
    assert_int_equal(d[0].flags, FI_TAGGED | FI_RECV | FI_REMOTE_CQ_DATA);
    assert_int_equal(d[0].len, 4);
    assert_int_equal(d[0].data, 77);
    assert_ptr_equal(d[1].op_context, (void *)0xeeeeeeeeeeeeeeeeULL);
    assert_string_equal(buf, "abc");
    memset(c, 0xee, sizeof(c));
    assert_int_equal(fi_cq_read(tx, c, 2), 1);
    assert_ptr_equal(c[0].op_context, &s1);
    assert_ptr_equal(c[1].op_context, (void *)0xeeeeeeeeeeeeeeeeULL);
    split_close(&n, tx);
}

static void test_send_kinds(void **state)
{
    node_t n;
    struct fid_cq *tx;
    struct fi_cq_msg_entry m;
    struct fi_cq_tagged_entry e;
    char buf[8];
    int r1, r2, s1, s2;

    split_open(&n, &tx, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_TAGGED);
    assert_int_equal(fi_recv(n.ep, buf, 8, NULL, FI_ADDR_UNSPEC, &r1), 0);
    assert_int_equal(fi_send(n.ep, "m", 2, NULL, n.addr, &s1), 0);
    assert_int_equal(cq_wait(n.cq, &e, NULL), 1);
    assert_int_equal(e.flags, FI_MSG | FI_RECV);
    assert_int_equal(fi_cq_read(tx, &m, 1), 1);
    assert_ptr_equal(m.op_context, &s1);
    assert_int_equal(m.flags, FI_MSG | FI_SEND);
    assert_int_equal(fi_trecv(n.ep, buf, 8, NULL, FI_ADDR_UNSPEC, 6, 0, &r2), 0);
    assert_int_equal(fi_tsend(n.ep, "t", 2, NULL, n.addr, 6, &s2), 0);
    assert_int_equal(cq_wait(n.cq, &e, NULL), 1);
    assert_int_equal(e.flags, FI_TAGGED | FI_RECV);
    assert_int_equal(fi_cq_read(tx, &m, 1), 1);
    assert_ptr_equal(m.op_context, &s2);
    assert_int_equal(m.flags, FI_TAGGED | FI_SEND);
    split_close(&n, tx);
}

/* An error between two successes: the read stops before it, the error
 * waits for fi_cq_readerr, and the success after it is not lost. */
static void test_error_in_line(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    struct fi_cq_tagged_entry e[8];
    struct fi_cq_err_entry err;
    char b1[8], b2[2], b3[8];
    int r1, r2, r3;
    int64_t end = now_ms() + WAIT_MS;
    ssize_t ret;

    assert_int_equal(fi_trecv(b->ep, b1, 8, NULL, FI_ADDR_UNSPEC, 30, 0, &r1), 0);
    assert_int_equal(fi_trecv(b->ep, b2, 2, NULL, FI_ADDR_UNSPEC, 31, 0, &r2), 0);
    assert_int_equal(fi_trecv(b->ep, b3, 8, NULL, FI_ADDR_UNSPEC, 32, 0, &r3), 0);
    assert_int_equal(fi_tinject(a->ep, "one", 4, b->addr, 30), 0);
    assert_int_equal(fi_tinject(a->ep, "two", 4, b->addr, 31), 0);
    assert_int_equal(fi_tinject(a->ep, "six", 4, b->addr, 32), 0);
    while ((ret = fi_cq_read(b->cq, e, 8)) == -FI_EAGAIN && now_ms() < end)
        ;
    assert_int_equal(ret, 1);
    assert_ptr_equal(e[0].op_context, &r1);
    cq_wait_err(b->cq, &err);
    assert_ptr_equal(err.op_context, &r2);
    assert_int_equal(err.err, FI_ETRUNC);
    assert_int_equal(cq_wait(b->cq, e, NULL), 1);
    assert_ptr_equal(e[0].op_context, &r3);
    assert_string_equal(b3, "six");
}

/* fi_cancel finds the receive by its context among others posted. */
static void test_cancel_among_many(void **state)
{
    node_t *a = &nodes[0], *b = &nodes[1];
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    char buf[100][8];
    int ctx[100];

    for (int i = 0; i < 100; i++)
        assert_int_equal(fi_trecv(b->ep, buf[i], 8, NULL, FI_ADDR_UNSPEC, 50, 0, &ctx[i]), 0);
    assert_int_equal(fi_cancel(&b->ep->fid, &ctx[70]), 0);
    cq_wait_err(b->cq, &err);
    assert_int_equal(err.err, FI_ECANCELED);
    assert_ptr_equal(err.op_context, &ctx[70]);
    assert_int_equal(fi_cancel(&b->ep->fid, &ctx[70]), -FI_ENOENT);
    for (int i = 0; i < 100; i++) {
        if (i == 70)
            continue;
        assert_int_equal(fi_tinject(a->ep, "x", 2, b->addr, 50), 0);
        assert_int_equal(cq_wait(b->cq, &e, NULL), 1);
        assert_ptr_equal(e.op_context, &ctx[i]);
        assert_int_equal(fi_cancel(&b->ep->fid, &ctx[i]), -FI_ENOENT);
    }
}

static void test_sread_timeout(void **state)
{
    struct fi_cq_tagged_entry e;
    int64_t t0 = now_ms();

    assert_int_equal(fi_cq_sread(nodes[2].cq, &e, 1, NULL, 100), -FI_EAGAIN);
    assert_true(now_ms() - t0 >= 90);
    assert_true(now_ms() - t0 < 5000);
}

static void *sread_thread(void *arg)
{
    struct fi_cq_tagged_entry e;

    return (void *)(intptr_t)fi_cq_sread(nodes[2].cq, &e, 1, NULL, -1);
}

static void test_sread_signal(void **state)
{
    pthread_t t;
    void *ret;
    int64_t t0;

    assert_int_equal(pthread_create(&t, NULL, sread_thread, NULL), 0);
    usleep(100000);
    t0 = now_ms();
    assert_int_equal(fi_cq_signal(nodes[2].cq), 0);
    pthread_join(t, &ret);
    /* fi_cq(3): signaled with nothing to read, -FI_EAGAIN (as a timeout) */
    assert_int_equal((intptr_t)ret, -FI_EAGAIN);
    assert_true(now_ms() - t0 < 1000);
}

static void *sread_recv_thread(void *arg)
{
    struct fi_cq_tagged_entry e;

    return (void *)(intptr_t)fi_cq_sread(nodes[2].cq, &e, 1, NULL, WAIT_MS);
}

static void test_sread_wakes_on_message(void **state)
{
    pthread_t t;
    void *ret;
    char buf[4];
    int rctx, sctx;
    struct fi_cq_tagged_entry e;

    assert_int_equal(fi_trecv(nodes[2].ep, buf, 4, NULL, FI_ADDR_UNSPEC, 30, 0, &rctx), 0);
    assert_int_equal(pthread_create(&t, NULL, sread_recv_thread, NULL), 0);
    usleep(50000);
    assert_int_equal(fi_tsend(nodes[0].ep, "zz", 3, NULL, nodes[2].addr, 30, &sctx), 0);
    pthread_join(t, &ret);
    assert_int_equal((intptr_t)ret, 1);
    assert_int_equal(cq_wait(nodes[0].cq, &e, NULL), 1);
}

static void expect_refused(struct fi_info *h)
{
    struct fi_info *out = NULL;

    assert_int_equal(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &out), -FI_ENODATA);
    fi_freeinfo(h);
}

static void test_hints_refused(void **state)
{
    struct fi_info *h;

    h = hints_new(), h->ep_attr->type = FI_EP_MSG, expect_refused(h);
    h = hints_new(), h->caps |= FI_RMA, expect_refused(h);
    h = hints_new(), h->caps |= FI_MULTI_RECV, expect_refused(h); /* with FI_DIRECTED_RECV */
    h = hints_new(), h->domain_attr->data_progress = FI_PROGRESS_AUTO, expect_refused(h);
    h = hints_new(), h->tx_attr->inject_size = 1 << 20, expect_refused(h);
    h = hints_new(), h->tx_attr->iov_limit = 4, expect_refused(h);
    h = hints_new(), h->domain_attr->cq_data_size = 16, expect_refused(h);
    h = hints_new(), h->tx_attr->msg_order = FI_ORDER_RAW, expect_refused(h);
    h = hints_new(), h->addr_format = FI_SOCKADDR_IN6, expect_refused(h);
}

/* An endpoint of the shared domain opened with info mi, its own CQ bound
 * with bind_flags, in the AV at *addr. */
static void extra_open(struct fi_info *mi, uint64_t bind_flags, struct fid_ep **ep,
                       struct fid_cq **cq, fi_addr_t *addr)
{
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);

    assert_int_equal(fi_endpoint(domain, mi, ep, NULL), 0);
    assert_int_equal(fi_cq_open(domain, &ca, cq, NULL), 0);
    assert_int_equal(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV | bind_flags), 0);
    assert_int_equal(fi_ep_bind(*ep, &av->fid, 0), 0);
    assert_int_equal(fi_enable(*ep), 0);
    assert_int_equal(fi_getname(&(*ep)->fid, name, &len), 0);
    assert_int_equal(fi_av_insert(av, name, 1, addr, 0, NULL), 1);
}

/* ------------------------------------------------------- FI_MULTI_RECV */

#define MR_MAX 32

/* What a multi-receive endpoint's CQ gave, errors included, in order. */
typedef struct mr_log {
    struct fi_cq_tagged_entry e[MR_MAX];
    int err[MR_MAX];
    int n;
} mr_log_t;

static void mr_poll(struct fid_cq *cq, mr_log_t *log)
{
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    ssize_t ret = fi_cq_read(cq, &e, 1);

    if (ret == 1) {
        assert_true(log->n < MR_MAX);
        log->err[log->n] = 0;
        log->e[log->n++] = e;
    } else if (ret == -FI_EAVAIL) {
        memset(&err, 0, sizeof(err));
        assert_int_equal(fi_cq_readerr(cq, &err, 0), 1);
        assert_true(log->n < MR_MAX);
        log->err[log->n] = err.err;
        log->e[log->n++] = (struct fi_cq_tagged_entry){.op_context = err.op_context,
                                                       .flags = err.flags, .len = err.len,
                                                       .buf = err.buf};
    } else {
        assert_int_equal(ret, -FI_EAGAIN);
    }
}

/* An untagged send from nodes[0], to its completion, while the receiver's
 * CQ is read into log (a rendezvous needs the receiver's progress). */
static void mr_send(fi_addr_t to, const void *buf, size_t len, struct fid_cq *rcq, mr_log_t *log)
{
    struct fi_cq_tagged_entry se;
    int sctx;
    int64_t end = now_ms() + WAIT_MS;
    ssize_t ret;

    assert_int_equal(fi_send(nodes[0].ep, buf, len, NULL, to, &sctx), 0);
    for (;;) {
        assert_true(now_ms() < end);
        mr_poll(rcq, log);
        if ((ret = fi_cq_read(nodes[0].cq, &se, 1)) == 1)
            break;
        assert_int_equal(ret, -FI_EAGAIN);
    }
    assert_ptr_equal(se.op_context, &sctx);
}

/* Reads rcq until log holds n entries. */
static void mr_wait(struct fid_cq *rcq, mr_log_t *log, int n)
{
    int64_t end = now_ms() + WAIT_MS;

    while (log->n < n) {
        assert_true(now_ms() < end);
        mr_poll(rcq, log);
    }
}

static void mr_expect(const mr_log_t *log, int i, void *ctx, void *buf, size_t len, uint64_t flags,
                      int err)
{
    assert_true(i < log->n);
    assert_ptr_equal(log->e[i].op_context, ctx);
    assert_int_equal(log->err[i], err);
    if (err == 0) {
        assert_ptr_equal(log->e[i].buf, buf);
        assert_int_equal(log->e[i].len, len);
    }
    assert_int_equal(log->e[i].flags & (FI_MSG | FI_RECV | FI_MULTI_RECV | FI_TAGGED), flags);
}

/* A multi-receive buffer takes message after message, packed, first in
 * line however many receives were posted after it, until less than the
 * minimum is left: its last message's entry carries FI_MULTI_RECV. An
 * ordinary untagged receive posted behind it waits its turn; messages
 * that find no receive wait in tmx; a message larger than the room left
 * is truncated and releases the buffer; a rendezvous lands in place; a
 * cancel releases a buffer; tagged traffic is unaffected. */
static void test_multi_recv(void **state)
{
    struct fi_info *h = hints_new(), *mi = NULL;
    struct fid_ep *ep;
    struct fid_cq *cq;
    fi_addr_t addr;
    char a[100], b[64], c[50], d[50], t[8];
    size_t min = 16, got = 0, glen = sizeof(got);
    int ca_, cb, cc, cd, ct, cbig;
    mr_log_t log = {.n = 0};
    struct fi_msg msg;
    struct iovec iov;
    char *big = malloc(3 * BIG), *src = malloc(BIG);

    (void)state;
    h->caps = FI_TAGGED | FI_MSG | FI_MULTI_RECV | FI_SOURCE;
    h->rx_attr->op_flags = FI_MULTI_RECV;
    assert_int_equal(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &mi), 0);
    fi_freeinfo(h);
    assert_true(mi->caps & FI_MULTI_RECV);
    assert_false(mi->caps & FI_DIRECTED_RECV);
    assert_true(mi->rx_attr->op_flags & FI_MULTI_RECV);
    extra_open(mi, 0, &ep, &cq, &addr);
    assert_int_equal(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen), 0);
    assert_int_equal(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)),
                     0);
    assert_int_equal(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen), 0);
    assert_int_equal(got, 16);

    /* a (multi, by the default op flag), then b (an ordinary receive) */
    assert_int_equal(fi_recv(ep, a, sizeof(a), NULL, FI_ADDR_UNSPEC, &ca_), 0);
    iov = (struct iovec){b, sizeof(b)};
    msg = (struct fi_msg){.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &cb};
    assert_int_equal(fi_recvmsg(ep, &msg, FI_COMPLETION), 0);
    for (int i = 0; i < 3; i++) {
        char m[30];
        memset(m, 'x' + i, sizeof(m));
        mr_send(addr, m, sizeof(m), cq, &log);
    }
    mr_send(addr, "fifth", 5, cq, &log);
    mr_send(addr, "twenty bytes message", 20, cq, &log); /* nothing posted: waits */
    mr_wait(cq, &log, 4);
    mr_expect(&log, 0, &ca_, a, 30, FI_MSG | FI_RECV, 0);
    mr_expect(&log, 1, &ca_, a + 30, 30, FI_MSG | FI_RECV, 0);
    mr_expect(&log, 2, &ca_, a + 60, 30, FI_MSG | FI_RECV | FI_MULTI_RECV, 0); /* 10 < 16 left */
    mr_expect(&log, 3, &cb, b, 5, FI_MSG | FI_RECV, 0);
    for (int i = 0; i < 90; i++)
        assert_int_equal(a[i], 'x' + i / 30);
    assert_memory_equal(b, "fifth", 5);
    assert_int_equal(log.n, 4);

    /* c takes the waiting message and the next; d waits behind it */
    iov = (struct iovec){c, sizeof(c)};
    msg = (struct fi_msg){.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &cc};
    assert_int_equal(fi_recvmsg(ep, &msg, FI_MULTI_RECV), 0);
    assert_int_equal(fi_recv(ep, d, sizeof(d), NULL, FI_ADDR_UNSPEC, &cd), 0);
    mr_send(addr, "0123456789", 10, cq, &log);
    mr_wait(cq, &log, 6);
    mr_expect(&log, 4, &cc, c, 20, FI_MSG | FI_RECV, 0);
    mr_expect(&log, 5, &cc, c + 20, 10, FI_MSG | FI_RECV, 0);
    assert_memory_equal(c, "twenty bytes message0123456789", 30);
    /* 20 left, above the minimum: a message of 25 is truncated to 20 and
     * releases c */
    mr_send(addr, "twenty-five bytes message", 25, cq, &log);
    mr_wait(cq, &log, 7);
    mr_expect(&log, 6, &cc, NULL, 0, FI_MSG | FI_RECV | FI_MULTI_RECV, FI_ETRUNC);
    /* d (multi as well: the default op flag) is next; a cancel releases it */
    mr_send(addr, "dd", 2, cq, &log);
    mr_wait(cq, &log, 8);
    mr_expect(&log, 7, &cd, d, 2, FI_MSG | FI_RECV, 0);
    assert_int_equal(fi_cancel(&ep->fid, &cd), 0);
    mr_wait(cq, &log, 9);
    mr_expect(&log, 8, &cd, NULL, 0, FI_MSG | FI_RECV | FI_MULTI_RECV, FI_ECANCELED);
    assert_int_equal(fi_cancel(&ep->fid, &cd), -FI_ENOENT);

    /* rendezvous messages land in place, one after the other */
    assert_int_equal(fi_recv(ep, big, 3 * BIG, NULL, FI_ADDR_UNSPEC, &cbig), 0);
    for (int i = 0; i < 2; i++) {
        memset(src, 'A' + i, BIG);
        mr_send(addr, src, BIG, cq, &log);
        mr_wait(cq, &log, 10 + i);
        mr_expect(&log, 9 + i, &cbig, big + (size_t)i * BIG, BIG, FI_MSG | FI_RECV, 0);
        assert_int_equal(big[(size_t)i * BIG], 'A' + i);
        assert_int_equal(big[(size_t)(i + 1) * BIG - 1], 'A' + i);
    }

    /* tagged traffic goes its own way */
    assert_int_equal(fi_trecv(ep, t, sizeof(t), NULL, FI_ADDR_UNSPEC, 7, 0, &ct), 0);
    assert_int_equal(fi_tinject(nodes[0].ep, "tag", 4, addr, 7), 0);
    mr_wait(cq, &log, 12);
    assert_ptr_equal(log.e[11].op_context, &ct);
    assert_int_equal(log.e[11].flags & (FI_TAGGED | FI_MSG), FI_TAGGED);
    assert_string_equal(t, "tag");
    assert_int_equal(fi_cancel(&ep->fid, &cbig), 0); /* still takes: released */
    mr_wait(cq, &log, 13);
    mr_expect(&log, 12, &cbig, NULL, 0, FI_MSG | FI_RECV | FI_MULTI_RECV, FI_ECANCELED);

    assert_int_equal(fi_close(&ep->fid), 0);
    assert_int_equal(fi_close(&cq->fid), 0);
    fi_freeinfo(mi);
    free(big);
    free(src);
}

/* A multi-receive endpoint of this domain, with FI_SELECTIVE_COMPLETION
 * when selective; its address in the AV goes to *addr. */
static void mr_open(int selective, struct fid_ep **ep, struct fid_cq **cq, fi_addr_t *addr,
                    struct fi_info **mi)
{
    struct fi_info *h = hints_new();

    h->caps = FI_MSG | FI_MULTI_RECV;
    assert_int_equal(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, mi), 0);
    fi_freeinfo(h);
    extra_open(*mi, selective ? FI_SELECTIVE_COMPLETION : 0, ep, cq, addr);
}

/* An endpoint with FI_MSG alone and one with FI_MSG and FI_TAGGED
 * exchange untagged messages both ways. */
static void test_msg_only_endpoint(void **state)
{
    struct fi_info *h = hints_new(), *mi = NULL;
    struct fi_cq_tagged_entry e;
    struct fid_ep *ep;
    struct fid_cq *cq;
    fi_addr_t addr;
    char b[16];
    int rctx, sctx;

    (void)state;
    h->caps = FI_MSG;
    assert_int_equal(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &mi), 0);
    fi_freeinfo(h);
    assert_false(mi->caps & FI_TAGGED);
    extra_open(mi, 0, &ep, &cq, &addr);

    assert_int_equal(fi_recv(ep, b, sizeof(b), NULL, FI_ADDR_UNSPEC, &rctx), 0);
    assert_int_equal(fi_inject(nodes[0].ep, "to msg-only", 12, addr), 0);
    assert_int_equal(cq_wait(cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &rctx);
    assert_int_equal(e.flags & (FI_MSG | FI_TAGGED | FI_RECV), FI_MSG | FI_RECV);
    assert_string_equal(b, "to msg-only");

    assert_int_equal(fi_recv(nodes[0].ep, b, sizeof(b), NULL, FI_ADDR_UNSPEC, &rctx), 0);
    assert_int_equal(fi_send(ep, "back", 5, NULL, nodes[0].addr, &sctx), 0);
    assert_int_equal(cq_wait(nodes[0].cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &rctx);
    assert_string_equal(b, "back");
    assert_int_equal(cq_wait(cq, &e, NULL), 1);
    assert_ptr_equal(e.op_context, &sctx);

    assert_int_equal(fi_close(&ep->fid), 0);
    assert_int_equal(fi_close(&cq->fid), 0);
    fi_freeinfo(mi);
}

/* The hints FI_MULTI_RECV cannot go with; a multi-receive buffer under
 * selective completion still reports its release; a blocking send
 * (FI_INJECT | FI_DELIVERY_COMPLETE) from one thread to a multi-receive
 * endpoint of the same domain completes (the provider, not tmx, hands
 * that endpoint its untagged messages). */
static void test_multi_recv_rules(void **state)
{
    struct fi_info *h, *mi = NULL;
    struct fid_ep *ep;
    struct fid_cq *cq;
    fi_addr_t addr;
    char a[64];
    int ca_;
    size_t min = 10;
    mr_log_t log = {.n = 0};
    struct fi_msg msg;
    struct iovec iov;

    (void)state;
    h = hints_new(), h->caps = FI_MSG, h->rx_attr->op_flags = FI_MULTI_RECV, expect_refused(h);
    h = hints_new(), h->caps = 0, h->rx_attr->op_flags = FI_MULTI_RECV, expect_refused(h);
    h = hints_new(), h->caps = FI_TAGGED | FI_MULTI_RECV, expect_refused(h);
    h = hints_new(), h->caps = FI_MSG | FI_MULTI_RECV,
    h->domain_attr->data_progress = FI_PROGRESS_AUTO, expect_refused(h);

    mr_open(1, &ep, &cq, &addr, &mi);
    assert_int_equal(mi->domain_attr->data_progress, FI_PROGRESS_MANUAL);
    assert_int_equal(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)),
                     0);
    iov = (struct iovec){a, sizeof(a)};
    msg = (struct fi_msg){.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &ca_};
    assert_int_equal(fi_recvmsg(ep, &msg, FI_MULTI_RECV), 0); /* no FI_COMPLETION */
    for (int i = 0; i < 3; i++) {
        char m[20];
        struct fi_msg sm;
        struct iovec siov = {m, sizeof(m)};
        memset(m, 'p' + i, sizeof(m));
        sm = (struct fi_msg){.msg_iov = &siov, .iov_count = 1, .addr = addr};
        /* blocks until delivered: this thread must hand it over itself */
        assert_int_equal(fi_sendmsg(nodes[0].ep, &sm, FI_INJECT | FI_DELIVERY_COMPLETE), 0);
    }
    mr_wait(cq, &log, 1);
    /* 64 - 60 = 4 left, below the minimum: released */
    mr_expect(&log, 0, &ca_, a + 40, 20, FI_MSG | FI_RECV | FI_MULTI_RECV, 0);
    for (int i = 0; i < 60; i++)
        assert_int_equal(a[i], 'p' + i / 20);
    mr_poll(cq, &log);
    assert_int_equal(log.n, 1);
    assert_int_equal(fi_close(&ep->fid), 0);
    assert_int_equal(fi_close(&cq->fid), 0);
    fi_freeinfo(mi);
}

/* With tmx's offload engine (TMX_OFFLOAD=1) data progress is automatic:
 * asked for, it is granted, and reported without being asked; control
 * progress stays manual. */
static void test_progress_auto_with_engine(void **state)
{
    struct fi_info *h, *out = NULL;

    setenv("TMX_OFFLOAD", "1", 1);
    h = hints_new();
    h->domain_attr->data_progress = FI_PROGRESS_AUTO;
    assert_int_equal(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &out), 0);
    assert_int_equal(out->domain_attr->data_progress, FI_PROGRESS_AUTO);
    assert_int_equal(out->domain_attr->control_progress, FI_PROGRESS_MANUAL);
    fi_freeinfo(out);
    fi_freeinfo(h);
    h = hints_new(), h->domain_attr->control_progress = FI_PROGRESS_AUTO, expect_refused(h);
    unsetenv("TMX_OFFLOAD");
    h = hints_new();
    assert_int_equal(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &out), 0);
    assert_int_equal(out->domain_attr->data_progress, FI_PROGRESS_MANUAL);
    fi_freeinfo(out);
    fi_freeinfo(h);
}

static void test_tag_formats(void **state)
{
    struct fi_info *h = hints_new(), *out = NULL;

    h->caps = FI_TAGGED;
    assert_int_equal(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &out), 0);
    assert_int_equal(out->ep_attr->mem_tag_format, 0xaaaaaaaaaaaaaaaaULL);
    assert_false(out->caps & FI_MSG);
    assert_int_equal(out->domain_attr->cq_data_size, 8);
    fi_freeinfo(out);
    fi_freeinfo(h);
    assert_int_equal(info->ep_attr->mem_tag_format, 0x5555555555555555ULL);
}

static void test_av_ops(void **state)
{
    char name[FI_NAME_MAX], str[256];
    size_t len = sizeof(name), slen = sizeof(str);
    fi_addr_t bad = 12345;
    char junk[FI_NAME_MAX] = {5, 1, 2, 3, 4, 5};

    assert_int_equal(fi_av_lookup(av, nodes[1].addr, name, &len), 0);
    assert_int_equal(len, FI_NAME_MAX);
    fi_av_straddr(av, name, str, &slen);
    assert_memory_equal(str, "tmx://", 6);
    assert_int_equal(fi_av_lookup(av, bad, name, &len), -FI_ENOENT);
    assert_int_equal(fi_av_insert(av, junk, 1, &bad, 0, NULL), 0);
    assert_int_equal(bad, FI_ADDR_NOTAVAIL);
    assert_int_equal(fi_av_remove(av, &bad, 1, 0), -FI_EINVAL);
}

/* A name inserted again (Open MPI does so for an intercommunicator's
 * remote group) names the same peer: a receive directed at the address
 * the second insert returned takes that peer's message and reports it as
 * its source; removing one insertion leaves the other usable. */
static void test_av_insert_again(void **state)
{
    node_t *b = &nodes[1], *c = &nodes[2];
    struct fi_cq_tagged_entry e;
    char name[FI_NAME_MAX], buf[8] = {0};
    size_t len = sizeof(name);
    fi_addr_t again = FI_ADDR_NOTAVAIL, src = FI_ADDR_NOTAVAIL;
    int rctx, sctx;

    assert_int_equal(fi_av_lookup(av, c->addr, name, &len), 0);
    assert_int_equal(fi_av_insert(av, name, 1, &again, 0, NULL), 1);
    assert_int_equal(again, c->addr);
    assert_int_equal(fi_trecv(b->ep, buf, sizeof(buf), NULL, again, 9, 0, &rctx), 0);
    assert_int_equal(fi_tsend(c->ep, "again", 6, NULL, b->addr, 9, &sctx), 0);
    assert_int_equal(cq_wait(b->cq, &e, &src), 1);
    assert_ptr_equal(e.op_context, &rctx);
    assert_int_equal(src, again);
    assert_string_equal(buf, "again");
    assert_int_equal(cq_wait(c->cq, &e, NULL), 1);
    assert_int_equal(fi_av_remove(av, &again, 1, 0), 0);
    transfer(b, c, 100, 10);
}

/* A second process over shm: names through a pipe, 1 MiB each way. */
static int child_run(int rfd, int wfd)
{
    struct fi_info *h = hints_new(), *fi;
    struct fid_fabric *f;
    struct fid_domain *d;
    struct fid_av *cav;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    struct fi_cq_tagged_entry e;
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);
    fi_addr_t peer;
    unsigned char *buf = malloc(BIG);
    int ctx;

    if (fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &fi) || fi_fabric(fi->fabric_attr, &f, NULL) ||
        fi_domain(f, fi, &d, NULL) || fi_av_open(d, &aa, &cav, NULL) ||
        fi_endpoint(d, fi, &ep, NULL) || fi_cq_open(d, &ca, &cq, NULL) ||
        fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) || fi_ep_bind(ep, &cav->fid, 0) ||
        fi_enable(ep) || fi_getname(&ep->fid, name, &len))
        return 2;
    if (write(wfd, name, sizeof(name)) != sizeof(name) || read(rfd, name, sizeof(name)) != sizeof(name))
        return 3;
    if (fi_av_insert(cav, name, 1, &peer, 0, NULL) != 1)
        return 4;
    /* Echo one message back. */
    if (fi_trecv(ep, buf, BIG, NULL, peer, 40, 0, &ctx))
        return 5;
    while (fi_cq_read(cq, &e, 1) != 1)
        ;
    if (fi_tsend(ep, buf, e.len, NULL, peer, 41, &ctx))
        return 6;
    while (fi_cq_read(cq, &e, 1) != 1)
        ;
    fi_close(&ep->fid), fi_close(&cq->fid), fi_close(&cav->fid), fi_close(&d->fid);
    fi_close(&f->fid), fi_freeinfo(fi), fi_freeinfo(h), free(buf);
    return 0;
}

static void test_fork_shm(void **state)
{
    int to_child[2], to_parent[2], status;
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);
    fi_addr_t peer;
    unsigned char *out = malloc(BIG), *in = calloc(1, BIG);
    struct fi_cq_tagged_entry e;
    int sctx, rctx;
    pid_t pid;

    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(to_parent), 0);
    if ((pid = fork()) == 0) {
        alarm(WAIT_MS / 1000 + 10);
        _exit(child_run(to_child[0], to_parent[1]));
    }
    assert_int_equal(fi_getname(&nodes[0].ep->fid, name, &len), 0);
    assert_int_equal(write(to_child[1], name, sizeof(name)), sizeof(name));
    assert_int_equal(read(to_parent[0], name, sizeof(name)), sizeof(name));
    assert_int_equal(fi_av_insert(av, name, 1, &peer, 0, NULL), 1);
    fill(out, BIG, 9);
    assert_int_equal(fi_trecv(nodes[0].ep, in, BIG, NULL, peer, 41, 0, &rctx), 0);
    assert_int_equal(fi_tsend(nodes[0].ep, out, BIG, NULL, peer, 40, &sctx), 0);
    assert_int_equal(cq_wait(nodes[0].cq, &e, NULL), 1);
    assert_int_equal(cq_wait(nodes[0].cq, &e, NULL), 1);
    assert_memory_equal(in, out, BIG);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(to_child[0]), close(to_child[1]), close(to_parent[0]), close(to_parent[1]);
    free(out);
    free(in);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tag_formats),
        cmocka_unit_test(test_hints_refused),
        cmocka_unit_test(test_multi_recv),
        cmocka_unit_test(test_multi_recv_rules),
        cmocka_unit_test(test_msg_only_endpoint),
        cmocka_unit_test(test_progress_auto_with_engine),
        cmocka_unit_test(test_tsend_trecv),
        cmocka_unit_test(test_directed_vs_any),
        cmocka_unit_test(test_tag_ignore),
        cmocka_unit_test(test_inject_and_data),
        cmocka_unit_test(test_peek_nothing),
        cmocka_unit_test(test_peek_claim),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cancel_send),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_msg_ops),
        cmocka_unit_test(test_null_buffer_refused),
        cmocka_unit_test(test_selective),
        cmocka_unit_test(test_selective_recv_errors),
        cmocka_unit_test(test_split_cqs),
        cmocka_unit_test(test_send_kinds),
        cmocka_unit_test(test_error_in_line),
        cmocka_unit_test(test_cancel_among_many),
        cmocka_unit_test(test_sread_timeout),
        cmocka_unit_test(test_sread_signal),
        cmocka_unit_test(test_sread_wakes_on_message),
        cmocka_unit_test(test_av_ops),
        cmocka_unit_test(test_av_insert_again),
        cmocka_unit_test(test_fork_shm),
    };

    const unit_group_t group = {"fab", tests, sizeof(tests) / sizeof(tests[0]), setup, teardown};

    return unit_main(argc, argv, &group, 1);
}
