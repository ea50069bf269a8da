/*
 * The domain, and memory regions. tmx needs no registration (rendezvous
 * buffers are handled inside tmx), so a memory region is only a handle
 * that applications written for FI_MR_LOCAL providers may pass as desc.
 */
#include <stdlib.h>
#include <string.h>

#include "fab.h"

typedef struct fab_mr {
    struct fid_mr fid;
    fab_domain_t *dom;
} fab_mr_t;

static int mr_close(struct fid *fid)
{
    fab_mr_t *mr = (fab_mr_t *)fid;

    atomic_fetch_sub(&mr->dom->refs, 1);
    free(mr);
    return 0;
}

static struct fi_ops mr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = mr_close,
    .bind = fab_no_bind,
    .control = fab_no_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

static int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags,
                      struct fid_mr **out)
{
    fab_domain_t *dom = (fab_domain_t *)fid;
    fab_mr_t *mr;

    if (attr == NULL || (attr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE))) {
        FAB_WARN(FI_LOG_MR, "remote access asked of a memory region (tmx has no RMA)\n");
        return -FI_EINVAL;
    }
    if ((mr = calloc(1, sizeof(*mr))) == NULL)
        return -FI_ENOMEM;
    mr->fid.fid.fclass = FI_CLASS_MR;
    mr->fid.fid.context = attr->context;
    mr->fid.fid.ops = &mr_fi_ops;
    mr->fid.mem_desc = NULL;
    mr->fid.key = 0;
    mr->dom = dom;
    atomic_fetch_add(&dom->refs, 1);
    *out = &mr->fid;
    return 0;
}

static int mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
                   uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
                   void *context)
{
    struct fi_mr_attr attr = {.mr_iov = iov, .iov_count = count, .access = access,
                              .offset = offset, .requested_key = requested_key,
                              .context = context};

    return mr_regattr(fid, &attr, flags, mr);
}

static int mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
                  uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
    struct iovec iov = {(void *)buf, len};

    return mr_regv(fid, &iov, 1, access, offset, requested_key, flags, mr, context);
}

static struct fi_ops_mr domain_mr_ops = {
    .size = sizeof(struct fi_ops_mr),
    .reg = mr_reg,
    .regv = mr_regv,
    .regattr = mr_regattr,
};

/* --------------------------------------------------------------- domain */

static int domain_close(struct fid *fid)
{
    fab_domain_t *dom = (fab_domain_t *)fid;

    if (atomic_load(&dom->refs) != 0) {
        FAB_WARN(FI_LOG_DOMAIN, "domain closed with %d objects open\n", atomic_load(&dom->refs));
        return -FI_EBUSY;
    }
    atomic_fetch_sub(&dom->fab->refs, 1);
    pthread_mutex_destroy(&dom->lock);
    pthread_mutex_destroy(&dom->poll_lock);
    fi_freeinfo(dom->info);
    free(dom);
    return 0;
}

static struct fi_ops domain_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = domain_close,
    .bind = fab_no_bind,
    .control = fab_no_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

static int no_scalable_ep(struct fid_domain *domain, struct fi_info *info, struct fid_ep **sep,
                          void *context)
{
    return -FI_ENOSYS;
}

static int no_stx_ctx(struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **stx,
                      void *context)
{
    return -FI_ENOSYS;
}

static int no_srx_ctx(struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep,
                      void *context)
{
    return -FI_ENOSYS;
}

static int no_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op,
                           struct fi_atomic_attr *attr, uint64_t flags)
{
    return -FI_ENOSYS;
}

static int no_query_collective(struct fid_domain *domain, enum fi_collective_op coll,
                               struct fi_collective_attr *attr, uint64_t flags)
{
    return -FI_ENOSYS;
}

static int domain_endpoint2(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
                            uint64_t flags, void *context)
{
    if (flags != 0)
        return -FI_EBADFLAGS;
    return fab_ep_open(domain, info, ep, context);
}

static struct fi_ops_domain domain_ops = {
    .size = sizeof(struct fi_ops_domain),
    .av_open = fab_av_open,
    .cq_open = fab_cq_open,
    .endpoint = fab_ep_open,
    .scalable_ep = no_scalable_ep,
    .cntr_open = fab_cntr_open,
    .poll_open = fab_poll_open,
    .stx_ctx = no_stx_ctx,
    .srx_ctx = no_srx_ctx,
    .query_atomic = no_query_atomic,
    .query_collective = no_query_collective,
    .endpoint2 = domain_endpoint2,
};

int fab_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **out,
                    void *context)
{
    fab_fabric_t *fab = (fab_fabric_t *)fabric;
    fab_domain_t *dom;
    int ret;

    if ((ret = fab_info_check(info)) != 0) {
        FAB_WARN(FI_LOG_DOMAIN, "fi_domain: info asks for what tmx does not offer\n");
        return ret;
    }
    if ((dom = calloc(1, sizeof(*dom))) == NULL)
        return -FI_ENOMEM;
    if ((dom->info = fi_dupinfo(info)) == NULL)
        goto err_free_dom;
    /* Only FI_THREAD_DOMAIN has the application serialise every object of
     * the domain. Under FI_THREAD_FID and FI_THREAD_ENDPOINT one thread may
     * send on an endpoint while another reads its CQ, and under
     * FI_THREAD_COMPLETION one thread may insert into the AV while others
     * drive its endpoints (the AV shares no completion structure with
     * them, fi_domain(3)), and an insertion adds a peer to every bound
     * endpoint's context: those lock as FI_THREAD_SAFE does. */
    dom->mt = info->domain_attr == NULL || info->domain_attr->threading != FI_THREAD_DOMAIN;
    dom->ctx_mt = dom->mt;
    pthread_mutex_init(&dom->lock, NULL);
    pthread_mutex_init(&dom->poll_lock, NULL);
    dom->fab = fab;
    dom->fid.fid.fclass = FI_CLASS_DOMAIN;
    dom->fid.fid.context = context;
    dom->fid.fid.ops = &domain_fi_ops;
    dom->fid.ops = &domain_ops;
    dom->fid.mr = &domain_mr_ops;
    atomic_fetch_add(&fab->refs, 1);
    *out = &dom->fid;
    return 0;

err_free_dom:
    free(dom);
    return -FI_ENOMEM;
}
