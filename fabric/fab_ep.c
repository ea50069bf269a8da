/*
 * Endpoints: one tmx context each, created with TMX_BOOT_NONE since the
 * address vector supplies the peers. Messages claimed with FI_CLAIM wait
 * for their receive in a fab_op from the endpoint's pool.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

#define OPS_PER_CHUNK 64

struct fab_op_chunk {
    struct fab_op_chunk *next;
    fab_op_t ops[OPS_PER_CHUNK];
};

/* --------------------------------------------------------------- op pool */

int fab_ops_grow(fab_ep_t *ep)
{
    struct fab_op_chunk *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return -FI_ENOMEM;
    c->next = ep->chunks;
    ep->chunks = c;
    for (int i = 0; i < OPS_PER_CHUNK; i++) {
        c->ops[i].next = ep->free_ops;
        ep->free_ops = &c->ops[i];
    }
    return 0;
}

int fab_eps_reserve(fab_ep_t ***eps, int n, int *cap)
{
    int c = *cap > 0 ? *cap * 2 : 4;
    fab_ep_t **e;

    if (n < *cap)
        return 0;
    if ((e = realloc(*eps, (size_t)c * sizeof(*e))) == NULL)
        return -FI_ENOMEM;
    *eps = e;
    *cap = c;
    return 0;
}

void fab_op_list_add(fab_op_t *head, fab_op_t *op)
{
    op->next = head->next;
    op->prev = head;
    head->next->prev = op;
    head->next = op;
}

void fab_op_list_del(fab_op_t *op)
{
    op->prev->next = op->next;
    op->next->prev = op->prev;
}

/* ---------------------------------------------------------------- cancel */

static ssize_t ep_cancel(fid_t fid, void *context)
{
    fab_ep_t *ep = (fab_ep_t *)fid;
    ssize_t ret;

    fab_lock(ep->dom);
    if (ep->urq_on && fab_urq_cancel(ep, context) == 0)
        ret = 0;
    else
        ret = tmx_cancel(ep->tmx, context) == TMX_OK ? 0 : -FI_ENOENT;
    fab_unlock(ep->dom);
    return ret;
}

/* FI_OPT_MIN_MULTI_RECV, on an endpoint with FI_MULTI_RECV: a multi-receive
 * buffer is released once less than this is left in it. */
static int ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
    fab_ep_t *ep = (fab_ep_t *)fid;

    if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV || !ep->urq_on)
        return -FI_ENOPROTOOPT;
    if (optval == NULL || optlen == NULL || *optlen < sizeof(size_t))
        return -FI_ETOOSMALL;
    *(size_t *)optval = ep->min_multi_recv;
    *optlen = sizeof(size_t);
    return 0;
}

static int ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
    fab_ep_t *ep = (fab_ep_t *)fid;

    if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV || !ep->urq_on)
        return -FI_ENOPROTOOPT;
    if (optval == NULL || optlen != sizeof(size_t)) {
        FAB_WARN(FI_LOG_EP_CTRL, "FI_OPT_MIN_MULTI_RECV: want a size_t\n");
        return -FI_EINVAL;
    }
    fab_lock(ep->dom);
    ep->min_multi_recv = *(const size_t *)optval;
    fab_unlock(ep->dom);
    return 0;
}

static int no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
                     struct fid_ep **tx_ep, void *context)
{
    return -FI_ENOSYS;
}

static int no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
                     struct fid_ep **rx_ep, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t ep_size_left(struct fid_ep *ep)
{
    return FAB_QUEUE_SIZE;
}

static struct fi_ops_ep ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = ep_cancel,
    .getopt = ep_getopt,
    .setopt = ep_setopt,
    .tx_ctx = no_tx_ctx,
    .rx_ctx = no_rx_ctx,
    .rx_size_left = ep_size_left,
    .tx_size_left = ep_size_left,
};

/* ------------------------------------------------------------------ names */

static int ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
    fab_ep_t *ep = (fab_ep_t *)fid;
    unsigned char blob[TMX_ADDRESS_MAX], name[FAB_ADDR_LEN];
    size_t len = sizeof(blob), room;
    tmx_status_t st;

    if (addrlen == NULL) {
        FAB_WARN(FI_LOG_EP_CTRL, "fi_getname: NULL length\n");
        return -FI_EINVAL;
    }
    room = addr != NULL ? *addrlen : 0; /* no buffer: a query of the length */
    if (ep->ns_fd >= 0)
        return fab_ns_getname(ep, addr, addrlen);
    if ((st = tmx_address(ep->tmx, blob, &len)) != TMX_OK) {
        FAB_WARN(FI_LOG_EP_CTRL, "tmx_address: %s\n", tmx_strerror(st));
        return -fab_errno(st);
    }
    if (fab_name_encode(blob, len, name) != 0) {
        FAB_WARN(FI_LOG_EP_CTRL, "tmx address of %zu bytes does not fit in %d; use fewer "
                 "transports (TMX_TRANSPORTS)\n", len, FAB_ADDR_LEN);
        return -FI_EOVERFLOW;
    }
    *addrlen = FAB_ADDR_LEN;
    if (room < FAB_ADDR_LEN)
        return -FI_ETOOSMALL;
    memcpy(addr, name, FAB_ADDR_LEN);
    return 0;
}

static int no_setname(fid_t fid, void *addr, size_t addrlen)
{
    return -FI_ENOSYS;
}

static int no_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
    return -FI_ENOSYS;
}

static int no_connect(struct fid_ep *ep, const void *addr, const void *param, size_t paramlen)
{
    return -FI_ENOSYS;
}

static int no_listen(struct fid_pep *pep)
{
    return -FI_ENOSYS;
}

static int no_accept(struct fid_ep *ep, const void *param, size_t paramlen)
{
    return -FI_ENOSYS;
}

static int no_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen)
{
    return -FI_ENOSYS;
}

static int no_shutdown(struct fid_ep *ep, uint64_t flags)
{
    return -FI_ENOSYS;
}

static int no_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc,
                   void *context)
{
    return -FI_ENOSYS;
}

struct fi_ops_cm fab_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = no_setname,
    .getname = ep_getname,
    .getpeer = no_getpeer,
    .connect = no_connect,
    .listen = no_listen,
    .accept = no_accept,
    .reject = no_reject,
    .shutdown = no_shutdown,
    .join = no_join,
};

/* ------------------------------------------------------- bind and enable */

static int bind_cq(fab_ep_t *ep, fab_cq_t *cq, uint64_t flags)
{
    int ret;

    if (flags & ~(uint64_t)(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) {
        FAB_WARN(FI_LOG_EP_CTRL, "CQ bind flags 0x%llx\n", (unsigned long long)flags);
        return -FI_EBADFLAGS;
    }
    if (!(flags & (FI_TRANSMIT | FI_RECV))) {
        /* fi_endpoint(3): FI_SELECTIVE_COMPLETION goes with one of them */
        FAB_WARN(FI_LOG_EP_CTRL, "CQ bind flags 0x%llx name no direction (FI_TRANSMIT, FI_RECV)\n",
                 (unsigned long long)flags);
        return -FI_EBADFLAGS;
    }
    if (((flags & FI_TRANSMIT) && ep->tx_cq) || ((flags & FI_RECV) && ep->rx_cq)) {
        FAB_WARN(FI_LOG_EP_CTRL, "a CQ is already bound for that direction\n");
        return -FI_EINVAL;
    }
    if ((ret = fab_cq_attach(cq, ep)) != 0)
        return ret;
    if (flags & FI_TRANSMIT) {
        ep->tx_cq = cq;
        ep->tx_selective = !!(flags & FI_SELECTIVE_COMPLETION);
    }
    if (flags & FI_RECV) {
        ep->rx_cq = cq;
        ep->rx_selective = !!(flags & FI_SELECTIVE_COMPLETION);
    }
    return 0;
}

static int bind_av(fab_ep_t *ep, fab_av_t *av)
{
    int ret;

    if (ep->av) {
        FAB_WARN(FI_LOG_EP_CTRL, "an AV is already bound\n");
        return -FI_EINVAL;
    }
    if ((ret = fab_av_attach(av, ep)) != 0)
        return ret;
    ep->av = av;
    return 0;
}

/* The counter bound to ep for each event of fi_endpoint(3), in the order
 * FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE. */
static const uint64_t cntr_events[6] = {FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE};

static fab_cntr_t **cntr_slot(fab_ep_t *ep, int k)
{
    return k == 0 ? &ep->tx_cntr : k == 1 ? &ep->rx_cntr : &ep->rma_cntr[k - 2];
}

/* Any of fi_endpoint(3)'s counter events: the RMA ones are accepted, as
 * any provider accepts them, and never count here, since the provider
 * offers no RMA (a generic client binds one counter for every event).
 * One counter per event, and a counter bound for any is held by ep. */
static int bind_cntr(fab_ep_t *ep, fab_cntr_t *cntr, uint64_t flags)
{
    int ret;

    if (flags & ~(uint64_t)(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) ||
        !flags) {
        FAB_WARN(FI_LOG_EP_CTRL,
                 "counter bind flags 0x%llx: FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ and "
                 "FI_REMOTE_WRITE only, at least one\n",
                 (unsigned long long)flags);
        return -FI_EBADFLAGS;
    }
    for (int k = 0; k < 6; k++) {
        if ((flags & cntr_events[k]) && *cntr_slot(ep, k) != NULL) {
            FAB_WARN(FI_LOG_EP_CTRL, "a counter is already bound for event 0x%llx\n",
                     (unsigned long long)cntr_events[k]);
            return -FI_EINVAL;
        }
    }
    if ((ret = fab_cntr_attach(cntr, ep)) != 0)
        return ret;
    for (int k = 0; k < 6; k++) {
        if (flags & cntr_events[k])
            *cntr_slot(ep, k) = cntr;
    }
    return 0;
}

/* Objects of the endpoint's domain only (fi_endpoint(3), -FI_EDOMAIN):
 * another domain's CQ would be filled under this domain's lock and read
 * under its own. */
static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    fab_ep_t *ep = (fab_ep_t *)fid;
    fab_domain_t *dom;
    int ret;

    if (bfid == NULL)
        return -FI_EINVAL;
    if ((dom = fab_fid_domain(bfid)) != NULL && dom != ep->dom) {
        FAB_WARN(FI_LOG_EP_CTRL, "cannot bind class %zu of another domain\n", bfid->fclass);
        return -FI_EDOMAIN;
    }
    switch (bfid->fclass) {
    case FI_CLASS_CQ:
        fab_lock(ep->dom);
        ret = bind_cq(ep, (fab_cq_t *)bfid, flags);
        fab_unlock(ep->dom);
        return ret;
    case FI_CLASS_AV:
        return bind_av(ep, (fab_av_t *)bfid);
    case FI_CLASS_CNTR:
        fab_lock(ep->dom);
        ret = bind_cntr(ep, (fab_cntr_t *)bfid, flags);
        fab_unlock(ep->dom);
        return ret;
    default:
        FAB_WARN(FI_LOG_EP_CTRL, "cannot bind class %zu (EQs are not bound)\n",
                 bfid->fclass);
        return -FI_ENOSYS;
    }
}

static int ep_enable(fab_ep_t *ep)
{
    if (ep->av == NULL) {
        FAB_WARN(FI_LOG_EP_CTRL, "fi_enable without an AV\n");
        return -FI_ENOAV;
    }
    /* both, even for an endpoint whose capabilities name one direction:
     * the fast paths of either take both for granted */
    if (ep->tx_cq == NULL || ep->rx_cq == NULL) {
        FAB_WARN(FI_LOG_EP_CTRL, "fi_enable without CQs for both directions\n");
        return -FI_ENOCQ;
    }
    ep->enabled = 1;
    return 0;
}

static int ep_control(struct fid *fid, int command, void *arg)
{
    fab_ep_t *ep = (fab_ep_t *)fid;
    uint64_t *flags = arg;

    if (arg == NULL && (command == FI_GETOPSFLAG || command == FI_SETOPSFLAG)) {
        FAB_WARN(FI_LOG_EP_CTRL, "fi_control: NULL flags\n");
        return -FI_EINVAL;
    }
    /* fi_endpoint(3): the flags name FI_TRANSMIT or FI_RECV, not both */
    if ((command == FI_GETOPSFLAG || command == FI_SETOPSFLAG) &&
        !(*flags & FI_TRANSMIT) == !(*flags & FI_RECV)) {
        FAB_WARN(FI_LOG_EP_CTRL, "fi_control: flags 0x%llx name %s of FI_TRANSMIT and FI_RECV\n",
                 (unsigned long long)*flags, (*flags & FI_TRANSMIT) ? "both" : "neither");
        return -FI_EINVAL;
    }
    switch (command) {
    case FI_ENABLE:
        return ep_enable(ep);
    case FI_GETOPSFLAG:
        *flags = (*flags & FI_TRANSMIT) ? ep->tx_op_flags : ep->rx_op_flags;
        return 0;
    case FI_SETOPSFLAG:
        if (*flags & FI_TRANSMIT)
            ep->tx_op_flags = *flags & FAB_TX_OP_FLAGS;
        else
            ep->rx_op_flags = *flags & (FAB_RX_OP_FLAGS | (ep->urq_on ? FI_MULTI_RECV : 0));
        return 0;
    default:
        return -FI_ENOSYS;
    }
}

/* ----------------------------------------------------------------- close */

static int ep_close(struct fid *fid)
{
    fab_ep_t *ep = (fab_ep_t *)fid;

    if (ep->av)
        fab_av_detach(ep->av, ep);
    fab_lock(ep->dom);
    if (ep->tx_cq)
        fab_cq_detach(ep->tx_cq, ep);
    if (ep->rx_cq && ep->rx_cq != ep->tx_cq)
        fab_cq_detach(ep->rx_cq, ep);
    for (int k = 0; k < 6; k++) { /* each counter once: attached once */
        fab_cntr_t *c = *cntr_slot(ep, k);
        int seen = 0;
        for (int j = 0; j < k && !seen; j++)
            seen = *cntr_slot(ep, j) == c;
        if (c != NULL && !seen)
            fab_cntr_detach(c, ep);
    }
    fab_unlock(ep->dom);
    /* a thread asleep in fi_cq_sread or fi_cntr_wait on its context
     * (cq_sleep) wakes within a slice; no other can start, detached */
    while (atomic_load(&ep->sleepers) != 0)
        sched_yield();
    fab_ns_close(ep);
    tmx_context_destroy(ep->tmx);
    fab_urq_free(ep);
    while (ep->chunks) {
        struct fab_op_chunk *c = ep->chunks;
        ep->chunks = c->next;
        free(c);
    }
    atomic_fetch_sub(&ep->dom->refs, 1);
    fi_freeinfo(ep->info);
    free(ep);
    return 0;
}

static struct fi_ops ep_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = ep_close,
    .bind = ep_bind,
    .control = ep_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

static int ep_tmx_open(fab_ep_t *ep)
{
    tmx_context_params_t p = {
        .field_mask = TMX_CONTEXT_FIELD_THREAD_MODE | TMX_CONTEXT_FIELD_BOOT |
                      TMX_CONTEXT_FIELD_NAME,
        .thread_mode = ep->dom->ctx_mt ? TMX_THREAD_MULTIPLE : TMX_THREAD_SINGLE,
        .boot = TMX_BOOT_NONE,
        .name = "fi_tmx",
    };
    tmx_status_t st = tmx_context_create(&p, &ep->tmx);

    if (st != TMX_OK) {
        FAB_WARN(FI_LOG_EP_CTRL, "tmx_context_create: %s\n", tmx_strerror(st));
        return -fab_errno(st);
    }
    return 0;
}

static void ep_init(fab_ep_t *ep, fab_domain_t *dom, void *context)
{
    ep->dom = dom;
    ep->fid.fid.fclass = FI_CLASS_EP;
    ep->fid.fid.context = context;
    ep->fid.fid.ops = &ep_fi_ops;
    ep->fid.ops = &ep_ops;
    ep->fid.cm = &fab_cm_ops;
    ep->fid.msg = &fab_msg_ops;
    ep->fid.rma = &fab_no_rma_ops;
    ep->fid.tagged = &fab_tagged_ops;
    ep->fid.atomic = &fab_no_atomic_ops;
    ep->fid.collective = &fab_no_coll_ops;
    ep->claimed.next = ep->claimed.prev = &ep->claimed;
    ep->urq_live.next = ep->urq_live.prev = &ep->urq_live;
    ep->min_multi_recv = FAB_MIN_MULTI_RECV_DEFAULT;
}

static void ep_take_info(fab_ep_t *ep, const struct fi_info *info)
{
    ep->caps = info->caps ? info->caps : FAB_CAPS;
    if (!(ep->caps & (FI_TAGGED | FI_MSG)))
        ep->caps |= FI_TAGGED | FI_MSG;
    ep->msg_bit = (ep->caps & FI_TAGGED) && (ep->caps & FI_MSG) ? FAB_MSG_BIT : 0;
    ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
    ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
    ep->urq_on = (ep->caps & FI_MULTI_RECV) && (ep->caps & FI_MSG);
    if (!ep->urq_on)
        ep->rx_op_flags &= ~(uint64_t)FI_MULTI_RECV;
    ep->addr_format = info->addr_format;
}

/* A tmx name cannot be chosen: an endpoint named by tmx names takes no
 * source, or the empty name (zeros) fi_getinfo answers with; any other
 * would not be the endpoint's name. IPv4 sources are the name socket's
 * (fab_ns_open). */
static int tmx_source_ok(const struct fi_info *info)
{
    const unsigned char *a = info->src_addr;

    if (info->addr_format == FI_SOCKADDR_IN || info->addr_format == FI_ADDR_STR || a == NULL)
        return 1;
    for (size_t i = 0; i < info->src_addrlen; i++) {
        if (a[i] != 0)
            return 0;
    }
    return 1;
}

int fab_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
                void *context)
{
    fab_domain_t *dom = (fab_domain_t *)domain;
    fab_ep_t *ep;
    int ret;

    if (info == NULL || (ret = fab_info_check(info)) != 0) {
        FAB_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info missing or not one of ours\n");
        return -FI_EINVAL;
    }
    if (!tmx_source_ok(info)) {
        FAB_WARN(FI_LOG_EP_CTRL, "fi_endpoint: a tmx name cannot be chosen as the source\n");
        return -FI_EINVAL;
    }
    if ((ep = calloc(1, sizeof(*ep))) == NULL)
        return -FI_ENOMEM;
    if ((ep->info = fi_dupinfo(info)) == NULL) {
        ret = -FI_ENOMEM;
        goto err_free_ep;
    }
    ep_init(ep, dom, context);
    ep_take_info(ep, info);
    if ((ret = ep_tmx_open(ep)) != 0)
        goto err_free_info;
    if ((ret = fab_ns_open(ep, info)) != 0)
        goto err_destroy_tmx;
    atomic_fetch_add(&dom->refs, 1);
    *out = &ep->fid;
    return 0;

err_destroy_tmx:
    tmx_context_destroy(ep->tmx);
err_free_info:
    fi_freeinfo(ep->info);
err_free_ep:
    free(ep);
    return ret;
}
