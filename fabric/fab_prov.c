/*
 * The provider entry point (fi_prov_ini) and the fabric object. The only
 * symbol this library exports is fi_prov_ini; tmx itself is linked in.
 */
#include <stdlib.h>
#include <string.h>

#include "fab.h"

static void fab_cleanup(void)
{
    fab_ns_fini();
}

struct fi_provider fab_prov = {
    .version = FAB_PROV_VERSION,
    .fi_version = FAB_FI_VERSION,
    .name = FAB_PROV_NAME,
    .getinfo = fab_getinfo,
    .fabric = fab_fabric_open,
    .cleanup = fab_cleanup,
};

FI_EXT_INI
{
    return &fab_prov;
}

const char *fab_prov_strerror(int prov_errno, char *buf, size_t len)
{
    const char *s = tmx_strerror((tmx_status_t)prov_errno);

    if (buf && len > 0) {
        strncpy(buf, s, len - 1);
        buf[len - 1] = '\0';
    }
    return s;
}

int fab_errno(tmx_status_t st)
{
    switch (st) {
    case TMX_OK:
    case TMX_INPROGRESS:
        return 0;
    case TMX_ERR_INVALID:
        return FI_EINVAL;
    case TMX_ERR_NOMEM:
        return FI_ENOMEM;
    case TMX_ERR_TRUNCATED:
        return FI_ETRUNC;
    case TMX_ERR_CANCELED:
        return FI_ECANCELED;
    case TMX_ERR_NO_MESSAGE:
        return FI_ENOMSG;
    case TMX_ERR_AGAIN:
        return FI_EAGAIN;
    case TMX_ERR_UNREACHABLE:
        return FI_EHOSTUNREACH;
    case TMX_ERR_PEER_FAILED:
        return FI_ECONNRESET;
    case TMX_ERR_UNSUPPORTED:
        return FI_EOPNOTSUPP;
    case TMX_ERR_BUSY:
        return FI_EBUSY;
    case TMX_ERR_NO_SPACE:
        return FI_ETOOSMALL;
    case TMX_ERR_TIMEOUT:
        return FI_ETIMEDOUT;
    case TMX_ERR_NOT_FOUND:
        return FI_ENOENT;
    default:
        return FI_EIO;
    }
}

/* --------------------------------------------------------------- fabric */

static int fabric_close(struct fid *fid)
{
    fab_fabric_t *fab = (fab_fabric_t *)fid;

    if (atomic_load(&fab->refs) != 0) {
        FAB_WARN(FI_LOG_FABRIC, "fabric closed with %d domains open\n", atomic_load(&fab->refs));
        return -FI_EBUSY;
    }
    free(fab);
    return 0;
}

static int no_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep,
                         void *context)
{
    return -FI_ENOSYS;
}

static int no_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
                        struct fid_wait **waitset)
{
    return -FI_ENOSYS;
}

/* Before an application sleeps on the wait fds of CQs and EQs: each is
 * checked (a CQ after one progress pass) and armed; -FI_EAGAIN if one
 * has something to read. */
static int fabric_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
    int ret = 0;

    if (fids == NULL && count > 0) {
        FAB_WARN(FI_LOG_FABRIC, "fi_trywait: NULL fids\n");
        return -FI_EINVAL;
    }
    for (int i = 0; i < count && ret == 0; i++) {
        if (fids[i] == NULL) {
            FAB_WARN(FI_LOG_FABRIC, "fi_trywait: NULL fid\n");
            return -FI_EINVAL;
        }
        switch (fids[i]->fclass) {
        case FI_CLASS_CQ:
            ret = fab_cq_trywait((fab_cq_t *)fids[i]);
            break;
        case FI_CLASS_EQ:
            ret = fab_eq_trywait(fids[i]);
            break;
        default:
            FAB_WARN(FI_LOG_FABRIC, "fi_trywait on class %zu: only CQs and EQs wait\n",
                     fids[i]->fclass);
            ret = -FI_EINVAL;
        }
    }
    return ret;
}

static int fabric_domain2(struct fid_fabric *fabric, struct fi_info *info,
                          struct fid_domain **dom, uint64_t flags, void *context)
{
    if (flags != 0)
        return -FI_EBADFLAGS;
    return fab_domain_open(fabric, info, dom, context);
}

static struct fi_ops fabric_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = fabric_close,
    .bind = fab_no_bind,
    .control = fab_no_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

static struct fi_ops_fabric fabric_ops = {
    .size = sizeof(struct fi_ops_fabric),
    .domain = fab_domain_open,
    .passive_ep = no_passive_ep,
    .eq_open = fab_eq_open,
    .wait_open = no_wait_open,
    .trywait = fabric_trywait,
    .domain2 = fabric_domain2,
};

int fab_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    fab_fabric_t *fab;

    if (attr && attr->name && strcmp(attr->name, FAB_FABRIC_NAME) != 0) {
        FAB_WARN(FI_LOG_FABRIC, "unknown fabric name %s\n", attr->name);
        return -FI_ENODATA;
    }
    if ((fab = calloc(1, sizeof(*fab))) == NULL)
        return -FI_ENOMEM;
    fab->fid.fid.fclass = FI_CLASS_FABRIC;
    fab->fid.fid.context = context;
    fab->fid.fid.ops = &fabric_fi_ops;
    fab->fid.ops = &fabric_ops;
    *fabric = &fab->fid;
    return 0;
}
