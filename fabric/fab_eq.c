/*
 * Event queues. An RDM endpoint of this provider raises no events (no
 * connections, synchronous AV inserts), but applications such as
 * fi_pingpong open an EQ whatever the endpoint type: it opens, stays empty,
 * and cannot be bound to anything.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fab.h"

typedef struct fab_eq {
    struct fid_eq fid;
    fab_fabric_t *fab;
} fab_eq_t;

static ssize_t eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
    return -FI_EAGAIN;
}

static ssize_t eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags)
{
    return -FI_EAGAIN;
}

static ssize_t eq_write(struct fid_eq *eq, uint32_t event, const void *buf, size_t len,
                        uint64_t flags)
{
    return -FI_ENOSYS;
}

/* Nothing will ever arrive: sleep out the timeout (never forever). */
static ssize_t eq_sread(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout,
                        uint64_t flags)
{
    if (timeout < 0) {
        FAB_WARN(FI_LOG_EQ, "fi_eq_sread without timeout on an EQ that has no events\n");
        return -FI_EAGAIN;
    }
    usleep((useconds_t)timeout * 1000);
    return -FI_EAGAIN;
}

static const char *eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data,
                               char *buf, size_t len)
{
    return fab_prov_strerror(prov_errno, buf, len);
}

static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq),
    .read = eq_read,
    .readerr = eq_readerr,
    .write = eq_write,
    .sread = eq_sread,
    .strerror = eq_strerror,
};

static int eq_close(struct fid *fid)
{
    fab_eq_t *eq = (fab_eq_t *)fid;

    atomic_fetch_sub(&eq->fab->refs, 1);
    free(eq);
    return 0;
}

static struct fi_ops eq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = eq_close,
    .bind = fab_no_bind,
    .control = fab_no_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

int fab_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **out,
                void *context)
{
    fab_fabric_t *fab = (fab_fabric_t *)fabric;
    fab_eq_t *eq;

    if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) {
        FAB_WARN(FI_LOG_EQ, "EQ wait object %d: only FI_WAIT_NONE or UNSPEC\n", attr->wait_obj);
        return -FI_ENOSYS;
    }
    if ((eq = calloc(1, sizeof(*eq))) == NULL)
        return -FI_ENOMEM;
    eq->fab = fab;
    eq->fid.fid.fclass = FI_CLASS_EQ;
    eq->fid.fid.context = context;
    eq->fid.fid.ops = &eq_fi_ops;
    eq->fid.ops = &eq_ops;
    atomic_fetch_add(&fab->refs, 1);
    *out = &eq->fid;
    return 0;
}
