/*
 * Bad arguments and object lifecycle: close order, operations before
 * fi_enable, bind of wrong classes and flags or of another domain's
 * objects, a CQ bound without a direction, two counters for one
 * direction, getname/setname, getopt and setopt, fi_control, memory
 * regions, NULL pointers.
 * Each case runs in a child; "./fe_args CASE" runs one case in-process.
 */
#include "fe_common.h"

#include <rdma/fi_eq.h>

#define CAPS (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE | FI_REMOTE_CQ_DATA)

static void close_order(void)
{
    fe_t f;
    fe_ep_t a;
    char buf[64];

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_insert(&f, &a);
    CHECK_RET(fi_close(&f.domain->fid), -FI_EBUSY);
    CHECK_RET(fi_close(&f.fabric->fid), -FI_EBUSY);
    CHECK_RET(fi_close(&f.av->fid), -FI_EBUSY);
    CHECK_RET(fi_close(&a.cq->fid), -FI_EBUSY);
    /* an endpoint with posted receives, one of them never matched */
    CHECK_RET(fi_trecv(a.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, 5, 0, (void *)1), 0);
    CHECK_RET(fi_recv(a.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, (void *)2), 0);
    /* an unexpected message, and a claimed one */
    CHECK_RET(fi_tsend(a.ep, "x", 1, NULL, a.addr, 77, (void *)3), 0);
    CHECK_RET(fi_tsend(a.ep, "y", 1, NULL, a.addr, 78, (void *)4), 0);
    fe_drain(a.cq, NULL, 50);
    {
        struct fi_msg_tagged m = {.addr = FI_ADDR_UNSPEC, .tag = 78, .context = (void *)5};
        CHECK_RET(fi_trecvmsg(a.ep, &m, FI_PEEK | FI_CLAIM), 0);
        fe_drain(a.cq, NULL, 50);
    }
    CHECK_RET(fi_close(&a.ep->fid), 0);
    CHECK_RET(fi_close(&a.cq->fid), 0);
    fe_close(&f);
}

static void before_enable(void)
{
    fe_t f;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    char buf[16] = "abc";
    struct fi_cq_tagged_entry e;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    MUST(fi_endpoint(f.domain, f.info, &ep, NULL));
    CHECK_RET(fi_enable(ep), -FI_ENOAV);
    CHECK_RET(fi_tsend(ep, buf, 3, NULL, 0, 1, NULL) < 0, 1);
    CHECK_RET(fi_tinject(ep, buf, 3, 0, 1) < 0, 1);
    CHECK_RET(fi_tsenddata(ep, buf, 3, NULL, 7, 0, 1, NULL) < 0, 1);
    CHECK_RET(fi_tinjectdata(ep, buf, 3, 7, 0, 1) < 0, 1);
    CHECK_RET(fi_trecv(ep, buf, 3, NULL, FI_ADDR_UNSPEC, 1, 0, NULL) < 0, 1);
    CHECK_RET(fi_send(ep, buf, 3, NULL, 0, NULL) < 0, 1);
    CHECK_RET(fi_recv(ep, buf, 3, NULL, 0, NULL) < 0, 1);
    CHECK_RET(fi_inject(ep, buf, 3, 0) < 0, 1);
    CHECK_RET(fi_cancel(&ep->fid, (void *)1), -FI_ENOENT);
    MUST(fi_ep_bind(ep, &f.av->fid, 0));
    CHECK_RET(fi_enable(ep), -FI_ENOCQ);
    MUST(fi_cq_open(f.domain, &ca, &cq, NULL));
    /* an operation before enable with a CQ bound */
    MUST(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK_RET(fi_tsend(ep, buf, 3, NULL, 0, 1, NULL) < 0, 1);
    CHECK_RET(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
    CHECK_RET(fi_enable(ep), 0);
    CHECK_RET(fi_enable(ep), 0); /* twice: fine, or an error, never a crash */
    CHECK_RET(fi_close(&ep->fid), 0);
    CHECK_RET(fi_close(&cq->fid), 0);
    fe_close(&f);
}

static void bind_bad(void)
{
    fe_t f;
    struct fid_ep *ep, *ep2;
    struct fid_cq *cq, *cq2;
    struct fid_eq *eq;
    struct fi_eq_attr ea = {.size = 8};
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    MUST(fi_endpoint(f.domain, f.info, &ep, NULL));
    MUST(fi_endpoint(f.domain, f.info, &ep2, NULL));
    MUST(fi_cq_open(f.domain, &ca, &cq, NULL));
    MUST(fi_cq_open(f.domain, &ca, &cq2, NULL));
    MUST(fi_eq_open(f.fabric, &ea, &eq, NULL));
    CHECK_RET(fi_ep_bind(ep, NULL, 0), -FI_EINVAL);
    CHECK_RET(fi_ep_bind(ep, &f.domain->fid, 0) < 0, 1);
    CHECK_RET(fi_ep_bind(ep, &ep2->fid, 0) < 0, 1);
    CHECK_RET(fi_ep_bind(ep, &f.fabric->fid, 0) < 0, 1);
    CHECK_RET(fi_ep_bind(ep, &eq->fid, 0) < 0, 1);
    CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_REMOTE_WRITE), -FI_EBADFLAGS);
    CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT), 0);
    CHECK_RET(fi_ep_bind(ep, &cq2->fid, FI_TRANSMIT), -FI_EINVAL);
    CHECK_RET(fi_ep_bind(ep, &cq2->fid, FI_RECV), 0);
    CHECK_RET(fi_ep_bind(ep, &f.av->fid, 0), 0);
    CHECK_RET(fi_ep_bind(ep, &f.av->fid, 0), -FI_EINVAL);
    CHECK_RET(fi_enable(ep), 0);
    CHECK_RET(fi_close(&ep->fid), 0);
    CHECK_RET(fi_close(&ep2->fid), 0);
    CHECK_RET(fi_close(&cq->fid), 0);
    CHECK_RET(fi_close(&cq2->fid), 0);
    CHECK_RET(fi_close(&eq->fid), 0);
    fe_close(&f);
}

/* fi_endpoint(3): an endpoint binds objects of its own domain; binding
 * another domain's is -FI_EDOMAIN (its CQ would be filled under one
 * domain's lock and read under the other's). */
static void bind_other_domain(void)
{
    fe_t f;
    struct fid_domain *d2;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_cntr *cntr;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    struct fi_cntr_attr na = {.events = FI_CNTR_EVENTS_COMP};

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    MUST(fi_domain(f.fabric, f.info, &d2, NULL));
    MUST(fi_endpoint(f.domain, f.info, &ep, NULL));
    MUST(fi_cq_open(d2, &ca, &cq, NULL));
    MUST(fi_av_open(d2, &aa, &av, NULL));
    MUST(fi_cntr_open(d2, &na, &cntr, NULL));
    CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), -FI_EDOMAIN);
    CHECK_RET(fi_ep_bind(ep, &av->fid, 0), -FI_EDOMAIN);
    CHECK_RET(fi_ep_bind(ep, &cntr->fid, FI_SEND), -FI_EDOMAIN);
    CHECK_RET(fi_close(&cq->fid), 0);
    CHECK_RET(fi_close(&av->fid), 0);
    CHECK_RET(fi_close(&cntr->fid), 0);
    CHECK_RET(fi_close(&ep->fid), 0);
    CHECK_RET(fi_close(&d2->fid), 0);
    fe_close(&f);
}

/* fi_endpoint(3): FI_SELECTIVE_COMPLETION must be OR'ed with FI_TRANSMIT
 * and/or FI_RECV. A bind with no direction must fail, or at least not
 * leave the CQ holding the endpoint after it closed. */
static void bind_cq_nodir(uint64_t flags)
{
    fe_t f;
    fe_ep_t a;
    struct fid_cq *cq2;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    struct fi_cq_tagged_entry e;
    int r;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    MUST(fi_cq_open(f.domain, &ca, &cq2, NULL));
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    r = fi_ep_bind(a.ep, &cq2->fid, flags);
    CHECK(r < 0, "fi_ep_bind(ep, cq, 0x%llx) with no direction = %d (want an error)",
          (unsigned long long)flags, r);
    CHECK_RET(fi_close(&a.ep->fid), 0);
    CHECK_RET(fi_close(&a.cq->fid), 0);
    CHECK_RET(fi_cq_read(cq2, &e, 1), -FI_EAGAIN); /* the closed endpoint must not be driven */
    CHECK_RET(fi_close(&cq2->fid), 0);
    fe_close(&f);
}

static void bind_cq_flags0(void)
{
    bind_cq_nodir(0);
}

static void bind_cq_selective_only(void)
{
    bind_cq_nodir(FI_SELECTIVE_COMPLETION);
}

/* An endpoint with its CQ and the AV bound, not yet enabled. */
static void ep_bound(fe_t *f, fe_ep_t *a)
{
    struct fi_cq_attr qa = {.format = FI_CQ_FORMAT_TAGGED};

    MUST(fi_endpoint(f->domain, f->info, &a->ep, NULL));
    MUST(fi_cq_open(f->domain, &qa, &a->cq, NULL));
    MUST(fi_ep_bind(a->ep, &a->cq->fid, FI_TRANSMIT | FI_RECV));
    MUST(fi_ep_bind(a->ep, &f->av->fid, 0));
}

/* "An endpoint may only be bound to a single CQ or counter for a given
 * type of operation" (fi_endpoint(3)). */
static void bind_two_cntrs(void)
{
    fe_t f;
    fe_ep_t a;
    struct fid_cntr *c1, *c2;
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};
    int r;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    MUST(fi_cntr_open(f.domain, &ca, &c1, NULL));
    MUST(fi_cntr_open(f.domain, &ca, &c2, NULL));
    ep_bound(&f, &a);
    CHECK_RET(fi_ep_bind(a.ep, &c1->fid, FI_SEND), 0);
    r = fi_ep_bind(a.ep, &c2->fid, FI_SEND);
    CHECK(r < 0, "second counter bound for FI_SEND = %d (want an error)", r);
    MUST(fi_enable(a.ep));
    fe_ep_insert(&f, &a);
    CHECK_RET(fi_close(&a.ep->fid), 0);
    CHECK_RET(fi_close(&a.cq->fid), 0);
    CHECK_RET(fi_cntr_read(c1), 0); /* must not drive the closed endpoint */
    CHECK_RET(fi_close(&c1->fid), 0);
    CHECK_RET(fi_close(&c2->fid), 0);
    fe_close(&f);
}

/* fi_endpoint(3) lets a counter be bound for every kind of event; the
 * RMA ones (the provider offers no RMA) must be accepted, as fabtests'
 * ubertest and generic clients bind them, and the send and receive
 * events must still count. */
static void bind_cntr_all_events(void)
{
    fe_t f;
    fe_ep_t a, b;
    struct fid_cntr *c, *c2;
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};
    uint64_t x = 7, y = 0;
    int64_t end;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    MUST(fi_cntr_open(f.domain, &ca, &c, NULL));
    MUST(fi_cntr_open(f.domain, &ca, &c2, NULL));
    ep_bound(&f, &a);
    CHECK_RET(fi_ep_bind(a.ep, &c->fid, 0), -FI_EBADFLAGS);
    CHECK_RET(fi_ep_bind(a.ep, &c->fid, FI_SELECTIVE_COMPLETION), -FI_EBADFLAGS);
    CHECK_RET(fi_ep_bind(a.ep, &c->fid, FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE),
              0);
    CHECK_RET(fi_ep_bind(a.ep, &c2->fid, FI_REMOTE_WRITE), -FI_EINVAL); /* one counter per event */
    CHECK_RET(fi_ep_bind(a.ep, &c2->fid, FI_SEND), -FI_EINVAL);
    MUST(fi_enable(a.ep));
    CHECK_RET(fi_close(&c->fid), -FI_EBUSY); /* held by the endpoint */
    fe_ep_insert(&f, &a);
    fe_ep_open(&f, &b, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_insert(&f, &b);
    MUST(fi_trecv(a.ep, &y, sizeof(y), NULL, b.addr, 5, 0, NULL));
    MUST(fi_tsend(b.ep, &x, sizeof(x), NULL, a.addr, 5, NULL));
    MUST(fi_tsend(a.ep, &x, sizeof(x), NULL, b.addr, 6, NULL));
    end = fe_now_ms() + 5000;
    while (fi_cntr_read(c) < 2 && fe_now_ms() < end) {
        struct fi_cq_tagged_entry e[4];
        (void)fi_cq_read(a.cq, e, 4);
        (void)fi_cq_read(b.cq, e, 4);
    }
    CHECK(fi_cntr_read(c) == 2, "counter bound for every event read %llu (want 2: a send and a receive)",
          (unsigned long long)fi_cntr_read(c));
    CHECK(y == 7, "received %llu", (unsigned long long)y);
    fe_ep_close(&b);
    CHECK_RET(fi_close(&a.ep->fid), 0);
    CHECK_RET(fi_close(&a.cq->fid), 0);
    CHECK_RET(fi_close(&c->fid), 0);
    CHECK_RET(fi_close(&c2->fid), 0);
    fe_close(&f);
}

/* A counter bound only for an RMA event is held by the endpoint all the
 * same: closing it while the endpoint lives is refused. */
static void bind_cntr_rma_only_held(void)
{
    fe_t f;
    fe_ep_t a;
    struct fid_cntr *c;
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    MUST(fi_cntr_open(f.domain, &ca, &c, NULL));
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    CHECK_RET(fi_ep_bind(a.ep, &c->fid, FI_READ), 0);
    CHECK_RET(fi_ep_bind(a.ep, &c->fid, FI_WRITE), 0); /* the same counter, another event */
    CHECK_RET(fi_close(&c->fid), -FI_EBUSY);
    fe_ep_close(&a);
    CHECK_RET(fi_close(&c->fid), 0);
    fe_close(&f);
}

static void names_opts(void)
{
    fe_t f;
    fe_ep_t a;
    char name[128];
    size_t len = 0, v = 0, vl;
    int b;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    CHECK_RET(fi_getname(&a.ep->fid, NULL, &len), -FI_ETOOSMALL);
    CHECK(len == FI_NAME_MAX, "getname size query: len %zu", len);
    len = 10;
    CHECK_RET(fi_getname(&a.ep->fid, name, &len), -FI_ETOOSMALL);
    CHECK(len == FI_NAME_MAX, "getname short buffer: len %zu", len);
    len = sizeof(name);
    CHECK_RET(fi_getname(&a.ep->fid, name, &len), 0);
    CHECK_RET(fi_setname(&a.ep->fid, name, len) < 0, 1);
    vl = sizeof(v);
    CHECK_RET(fi_getopt(&a.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl), -FI_ENOPROTOOPT);
    v = 128;
    CHECK_RET(fi_setopt(&a.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof(v)), -FI_ENOPROTOOPT);
    b = 0;
    CHECK_RET(fi_setopt(&a.ep->fid, FI_OPT_ENDPOINT, FI_OPT_FI_HMEM_P2P, &b, sizeof(b)),
              -FI_ENOPROTOOPT);
    vl = sizeof(v);
    CHECK_RET(fi_getopt(&a.ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &v, &vl), -FI_ENOPROTOOPT);
    CHECK_RET(fi_getopt(&a.ep->fid, 12345, 0, &v, &vl), -FI_ENOPROTOOPT);
    CHECK_RET(fi_setopt(&a.ep->fid, FI_OPT_ENDPOINT, 9999, &v, sizeof(v)), -FI_ENOPROTOOPT);
    /* fi_control */
    CHECK_RET(fi_control(&a.ep->fid, 9999, NULL) < 0, 1);
    CHECK_RET(fi_control(&f.domain->fid, 9999, NULL) < 0, 1);
    CHECK_RET(fi_control(&a.cq->fid, 9999, NULL) < 0, 1);
    CHECK_RET(fi_control(&f.av->fid, 9999, NULL) < 0, 1);
    {
        int fd = -1;
        enum fi_wait_obj wo = 99;
        CHECK_RET(fi_control(&a.cq->fid, FI_GETWAIT, &fd) < 0, 1);
        CHECK_RET(fi_control(&a.cq->fid, FI_GETWAITOBJ, &wo), 0);
        CHECK(wo == FI_WAIT_NONE, "FI_GETWAITOBJ of a CQ with FI_WAIT_UNSPEC: %d", wo);
    }
    {
        uint64_t fl = FI_TRANSMIT;
        CHECK_RET(fi_control(&a.ep->fid, FI_GETOPSFLAG, &fl), 0);
        fl = FI_TRANSMIT | FI_COMPLETION;
        CHECK_RET(fi_control(&a.ep->fid, FI_SETOPSFLAG, &fl), 0);
        fl = FI_RECV | FI_MULTI_RECV; /* not offered on this endpoint */
        CHECK_RET(fi_control(&a.ep->fid, FI_SETOPSFLAG, &fl), 0);
        fl = FI_RECV;
        CHECK_RET(fi_control(&a.ep->fid, FI_GETOPSFLAG, &fl), 0);
        CHECK(!(fl & FI_MULTI_RECV), "rx op flags 0x%llx", (unsigned long long)fl);
        /* fi_endpoint(3): FI_TRANSMIT or FI_RECV, not both; one of them */
        fl = FI_COMPLETION;
        CHECK_RET(fi_control(&a.ep->fid, FI_SETOPSFLAG, &fl), -FI_EINVAL);
        fl = FI_TRANSMIT | FI_RECV | FI_COMPLETION;
        CHECK_RET(fi_control(&a.ep->fid, FI_SETOPSFLAG, &fl), -FI_EINVAL);
        fl = FI_TRANSMIT | FI_RECV;
        CHECK_RET(fi_control(&a.ep->fid, FI_GETOPSFLAG, &fl), -FI_EINVAL);
        fl = 0;
        CHECK_RET(fi_control(&a.ep->fid, FI_GETOPSFLAG, &fl), -FI_EINVAL);
        fl = FI_RECV;
        CHECK_RET(fi_control(&a.ep->fid, FI_GETOPSFLAG, &fl), 0);
        CHECK(!(fl & FI_COMPLETION), "rx op flags untouched by the refused calls: 0x%llx",
              (unsigned long long)fl);
    }
    /* alias */
    CHECK_RET(1, 1);
    {
        struct fid_ep *alias = NULL;
        CHECK_RET(fi_ep_alias(a.ep, &alias, 0) < 0, 1);
    }
    fe_ep_close(&a);
    fe_close(&f);
}

static void nulls(void)
{
    fe_t f;
    fe_ep_t a;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fi_cq_tagged_entry e;
    char buf[8];

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_insert(&f, &a);
    CHECK_RET(fi_cq_open(f.domain, NULL, &cq, NULL), -FI_EINVAL);
    CHECK_RET(fi_av_open(f.domain, NULL, &av, NULL), -FI_EINVAL);
    CHECK_RET(fi_endpoint(f.domain, NULL, &ep, NULL), -FI_EINVAL);
    CHECK_RET(fi_cq_read(a.cq, NULL, 1), -FI_EINVAL);
    CHECK_RET(fi_cq_readerr(a.cq, NULL, 0), -FI_EINVAL);
    CHECK_RET(fi_tsendmsg(a.ep, NULL, 0), -FI_EINVAL);
    CHECK_RET(fi_trecvmsg(a.ep, NULL, 0), -FI_EINVAL);
    CHECK_RET(fi_sendmsg(a.ep, NULL, 0), -FI_EINVAL);
    CHECK_RET(fi_recvmsg(a.ep, NULL, 0), -FI_EINVAL);
    CHECK_RET(fi_tsend(a.ep, NULL, 5, NULL, a.addr, 1, NULL), -FI_EINVAL);
    CHECK_RET(fi_trecv(a.ep, NULL, 5, NULL, FI_ADDR_UNSPEC, 1, 0, NULL), -FI_EINVAL);
    CHECK_RET(fi_tinject(a.ep, NULL, 5, a.addr, 1), -FI_EINVAL);
    CHECK_RET(fi_tinjectdata(a.ep, NULL, 5, 1, a.addr, 1), -FI_EINVAL);
    CHECK_RET(fi_tsenddata(a.ep, NULL, 5, NULL, 1, a.addr, 1, NULL), -FI_EINVAL);
    CHECK_RET(fi_tsend(a.ep, buf, 1, NULL, 12345, 1, NULL), -FI_EINVAL);
    CHECK_RET(fi_tsend(a.ep, buf, 1, NULL, FI_ADDR_UNSPEC, 1, NULL), -FI_EINVAL);
    CHECK_RET(fi_tsend(a.ep, buf, 1, NULL, FI_ADDR_NOTAVAIL, 1, NULL), -FI_EINVAL);
    CHECK_RET(fi_tinject(a.ep, buf, 1, 12345, 1), -FI_EINVAL);
    CHECK_RET(fi_tsend(a.ep, buf, 1, NULL, a.addr, 1ULL << 63, NULL), -FI_EINVAL);
    CHECK_RET(fi_trecv(a.ep, buf, 1, NULL, 12345, 1, 0, NULL), -FI_EINVAL);
    CHECK_RET(fi_av_insert(f.av, NULL, 1, NULL, 0, NULL), -FI_EINVAL);
    CHECK_RET(fi_av_insert(f.av, NULL, 0, NULL, 0, NULL), 0);
    CHECK_RET(fi_av_remove(f.av, NULL, 0, 0), 0);
    CHECK_RET(fi_cq_read(a.cq, &e, 1), -FI_EAGAIN);
    CHECK_RET(fi_cq_readfrom(a.cq, &e, 1, NULL), -FI_EAGAIN);
    fe_ep_close(&a);
    fe_close(&f);
}

static void mr(void)
{
    fe_t f;
    struct fid_mr *m1, *m2, *m3 = NULL;
    char buf[64];

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_MAP);
    CHECK_RET(fi_mr_reg(f.domain, buf, sizeof(buf), FI_SEND | FI_RECV, 0, 42, 0, &m1, NULL), 0);
    CHECK_RET(fi_mr_reg(f.domain, buf, sizeof(buf), FI_SEND | FI_RECV, 0, 42, 0, &m2, NULL), 0);
    (void)fi_mr_desc(m1);
    (void)fi_mr_key(m1);
    CHECK_RET(fi_mr_reg(f.domain, buf, sizeof(buf), FI_REMOTE_READ, 0, 1, 0, &m3, NULL) < 0, 1);
    CHECK_RET(fi_close(&f.domain->fid), -FI_EBUSY);
    CHECK_RET(fi_mr_bind(m1, &f.av->fid, 0) < 0, 1);
    CHECK_RET(fi_mr_enable(m1) < 0 || 1, 1);
    CHECK_RET(fi_close(&m1->fid), 0);
    CHECK_RET(fi_close(&m2->fid), 0);
    fe_close(&f);
}

/* An endpoint opened with FI_SEND only (no FI_RECV) and only a transmit
 * CQ: the provider wants CQs for both directions (fi_tmx(7)) and says so
 * with -FI_ENOCQ, cleanly; with both bound it enables. */
static void send_only_ep(void)
{
    struct fi_info *info;
    struct fi_info *h = fe_hints(FI_TAGGED | FI_SEND, FI_THREAD_SAFE);
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    int r;

    MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
    CHECK(!(info->caps & FI_RECV), "caps with FI_SEND asked: 0x%llx", (unsigned long long)info->caps);
    MUST(fi_fabric(info->fabric_attr, &fab, NULL));
    MUST(fi_domain(fab, info, &dom, NULL));
    MUST(fi_av_open(dom, &aa, &av, NULL));
    MUST(fi_endpoint(dom, info, &ep, NULL));
    MUST(fi_cq_open(dom, &ca, &cq, NULL));
    MUST(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT));
    MUST(fi_ep_bind(ep, &av->fid, 0));
    r = fi_enable(ep);
    CHECK(r == -FI_ENOCQ, "fi_enable of a send-only endpoint with a transmit CQ = %d (%s)", r, fi_strerror(-r));
    MUST(fi_ep_bind(ep, &cq->fid, FI_RECV));
    CHECK_RET(fi_enable(ep), 0);
    fi_close(&ep->fid);
    fi_close(&cq->fid);
    fi_close(&av->fid);
    fi_close(&dom->fid);
    fi_close(&fab->fid);
    fi_freeinfo(info);
    fi_freeinfo(h);
}

/* More endpoints than ever before on one CQ, one AV and one counter (the
 * domain suggests ep_cnt of them): each binds and enables, and a message
 * between the last and the first arrives. */
#define MANY_EPS 100
static void many_eps(void)
{
    fe_t f;
    struct fid_ep *ep[MANY_EPS];
    struct fid_cq *cq;
    struct fid_cntr *cntr;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    struct fi_cntr_attr na = {.events = FI_CNTR_EVENTS_COMP};
    fi_addr_t first = FI_ADDR_NOTAVAIL;
    char name[FI_NAME_MAX], rb[4];
    int n = 0;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    CHECK(f.info->domain_attr->ep_cnt >= MANY_EPS, "ep_cnt %zu", f.info->domain_attr->ep_cnt);
    MUST(fi_cq_open(f.domain, &ca, &cq, NULL));
    MUST(fi_cntr_open(f.domain, &na, &cntr, NULL));
    for (; n < MANY_EPS; n++) {
        size_t len = sizeof(name);
        int r;
        MUST(fi_endpoint(f.domain, f.info, &ep[n], NULL));
        if ((r = fi_ep_bind(ep[n], &cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
            (r = fi_ep_bind(ep[n], &f.av->fid, 0)) != 0 || (r = fi_ep_bind(ep[n], &cntr->fid, FI_RECV)) != 0 ||
            (r = fi_enable(ep[n])) != 0) {
            CHECK(0, "endpoint %d of %d on one CQ, AV and counter: %d (%s)", n + 1, MANY_EPS, r,
                  fi_strerror(-r));
            fi_close(&ep[n]->fid);
            break;
        }
        if (n == 0) {
            MUST(fi_getname(&ep[0]->fid, name, &len));
            CHECK_RET(fi_av_insert(f.av, name, 1, &first, 0, NULL), 1);
        }
    }
    if (n == MANY_EPS) {
        CHECK_RET(fi_trecv(ep[0], rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 9, 0, (void *)1), 0);
        CHECK_RET(fi_tsend(ep[n - 1], "abc", 3, NULL, first, 9, (void *)2), 0);
        CHECK(fe_drain(cq, NULL, 200) == 2 && fi_cntr_read(cntr) == 1, "send and receive complete");
    }
    while (n > 0)
        MUST(fi_close(&ep[--n]->fid));
    MUST(fi_close(&cntr->fid));
    MUST(fi_close(&cq->fid));
    fe_close(&f);
}

int main(int argc, char **argv)
{
    static const fe_case_t cases[] = {
        {"close_order", close_order},
        {"before_enable", before_enable},
        {"bind_bad", bind_bad},
        {"bind_other_domain", bind_other_domain},
        {"bind_cq_flags0", bind_cq_flags0},
        {"bind_cq_selective_only", bind_cq_selective_only},
        {"bind_two_cntrs", bind_two_cntrs},
        {"bind_cntr_all_events", bind_cntr_all_events},
        {"bind_cntr_rma_only_held", bind_cntr_rma_only_held},
        {"names_opts", names_opts},
        {"nulls", nulls},
        {"mr", mr},
        {"send_only_ep", send_only_ep},
        {"many_eps", many_eps},
    };
    return fe_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv, 30);
}
