/*
 * Operations the provider does not offer. libfabric dispatches through ops
 * tables without testing for NULL, so every slot gets one of these, each
 * answering -FI_ENOSYS.
 */
#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_rma.h>

#include "fab.h"

int fab_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    return -FI_ENOSYS;
}

int fab_no_control(struct fid *fid, int command, void *arg)
{
    return -FI_ENOSYS;
}

int fab_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
    return -FI_ENOSYS;
}

int fab_no_tostr(const struct fid *fid, char *buf, size_t len)
{
    return -FI_ENOSYS;
}

int fab_no_ops_set(struct fid *fid, const char *name, uint64_t flags, void *ops, void *context)
{
    return -FI_ENOSYS;
}

/* ------------------------------------------------------------------- RMA */

static ssize_t no_rma_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src,
                           uint64_t addr, uint64_t key, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_rma_readv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
                            fi_addr_t src, uint64_t addr, uint64_t key, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_rma_msg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
    return -FI_ENOSYS;
}

static ssize_t no_rma_write(struct fid_ep *ep, const void *buf, size_t len, void *desc,
                            fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_rma_writev(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
                             fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_rma_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest,
                             uint64_t addr, uint64_t key)
{
    return -FI_ENOSYS;
}

static ssize_t no_rma_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc,
                                uint64_t data, fi_addr_t dest, uint64_t addr, uint64_t key,
                                void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_rma_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data,
                                 fi_addr_t dest, uint64_t addr, uint64_t key)
{
    return -FI_ENOSYS;
}

struct fi_ops_rma fab_no_rma_ops = {
    .size = sizeof(struct fi_ops_rma),
    .read = no_rma_read,
    .readv = no_rma_readv,
    .readmsg = no_rma_msg,
    .write = no_rma_write,
    .writev = no_rma_writev,
    .writemsg = no_rma_msg,
    .inject = no_rma_inject,
    .writedata = no_rma_writedata,
    .injectdata = no_rma_injectdata,
};

/* ---------------------------------------------------------------- atomics */

static ssize_t no_atomic_write(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                               fi_addr_t dest, uint64_t addr, uint64_t key,
                               enum fi_datatype datatype, enum fi_op op, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_writev(struct fid_ep *ep, const struct fi_ioc *iov, void **desc,
                                size_t count, fi_addr_t dest, uint64_t addr, uint64_t key,
                                enum fi_datatype datatype, enum fi_op op, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_writemsg(struct fid_ep *ep, const struct fi_msg_atomic *msg,
                                  uint64_t flags)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_inject(struct fid_ep *ep, const void *buf, size_t count, fi_addr_t dest,
                                uint64_t addr, uint64_t key, enum fi_datatype datatype,
                                enum fi_op op)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_readwrite(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                                   void *result, void *result_desc, fi_addr_t dest,
                                   uint64_t addr, uint64_t key, enum fi_datatype datatype,
                                   enum fi_op op, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_readwritev(struct fid_ep *ep, const struct fi_ioc *iov, void **desc,
                                    size_t count, struct fi_ioc *resultv, void **result_desc,
                                    size_t result_count, fi_addr_t dest, uint64_t addr,
                                    uint64_t key, enum fi_datatype datatype, enum fi_op op,
                                    void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_readwritemsg(struct fid_ep *ep, const struct fi_msg_atomic *msg,
                                      struct fi_ioc *resultv, void **result_desc,
                                      size_t result_count, uint64_t flags)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_compwrite(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                                   const void *compare, void *compare_desc, void *result,
                                   void *result_desc, fi_addr_t dest, uint64_t addr,
                                   uint64_t key, enum fi_datatype datatype, enum fi_op op,
                                   void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_compwritev(struct fid_ep *ep, const struct fi_ioc *iov, void **desc,
                                    size_t count, const struct fi_ioc *comparev,
                                    void **compare_desc, size_t compare_count,
                                    struct fi_ioc *resultv, void **result_desc,
                                    size_t result_count, fi_addr_t dest, uint64_t addr,
                                    uint64_t key, enum fi_datatype datatype, enum fi_op op,
                                    void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_atomic_compwritemsg(struct fid_ep *ep, const struct fi_msg_atomic *msg,
                                      const struct fi_ioc *comparev, void **compare_desc,
                                      size_t compare_count, struct fi_ioc *resultv,
                                      void **result_desc, size_t result_count, uint64_t flags)
{
    return -FI_ENOSYS;
}

static int no_atomic_valid(struct fid_ep *ep, enum fi_datatype datatype, enum fi_op op,
                           size_t *count)
{
    return -FI_ENOSYS;
}

struct fi_ops_atomic fab_no_atomic_ops = {
    .size = sizeof(struct fi_ops_atomic),
    .write = no_atomic_write,
    .writev = no_atomic_writev,
    .writemsg = no_atomic_writemsg,
    .inject = no_atomic_inject,
    .readwrite = no_atomic_readwrite,
    .readwritev = no_atomic_readwritev,
    .readwritemsg = no_atomic_readwritemsg,
    .compwrite = no_atomic_compwrite,
    .compwritev = no_atomic_compwritev,
    .compwritemsg = no_atomic_compwritemsg,
    .writevalid = no_atomic_valid,
    .readwritevalid = no_atomic_valid,
    .compwritevalid = no_atomic_valid,
};

/* ------------------------------------------------------------ collectives */

static ssize_t no_coll_barrier(struct fid_ep *ep, fi_addr_t coll_addr, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_coll_broadcast(struct fid_ep *ep, void *buf, size_t count, void *desc,
                                 fi_addr_t coll_addr, fi_addr_t root_addr,
                                 enum fi_datatype datatype, uint64_t flags, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_coll_xfer(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                            void *result, void *result_desc, fi_addr_t coll_addr,
                            enum fi_datatype datatype, uint64_t flags, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_coll_reduce_all(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                                  void *result, void *result_desc, fi_addr_t coll_addr,
                                  enum fi_datatype datatype, enum fi_op op, uint64_t flags,
                                  void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_coll_reduce(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                              void *result, void *result_desc, fi_addr_t coll_addr,
                              fi_addr_t root_addr, enum fi_datatype datatype, enum fi_op op,
                              uint64_t flags, void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_coll_rooted(struct fid_ep *ep, const void *buf, size_t count, void *desc,
                              void *result, void *result_desc, fi_addr_t coll_addr,
                              fi_addr_t root_addr, enum fi_datatype datatype, uint64_t flags,
                              void *context)
{
    return -FI_ENOSYS;
}

static ssize_t no_coll_msg(struct fid_ep *ep, const struct fi_msg_collective *msg,
                           struct fi_ioc *resultv, void **result_desc, size_t result_count,
                           uint64_t flags)
{
    return -FI_ENOSYS;
}

static ssize_t no_coll_barrier2(struct fid_ep *ep, fi_addr_t coll_addr, uint64_t flags,
                                void *context)
{
    return -FI_ENOSYS;
}

struct fi_ops_collective fab_no_coll_ops = {
    .size = sizeof(struct fi_ops_collective),
    .barrier = no_coll_barrier,
    .broadcast = no_coll_broadcast,
    .alltoall = no_coll_xfer,
    .allreduce = no_coll_reduce_all,
    .allgather = no_coll_xfer,
    .reduce_scatter = no_coll_reduce_all,
    .reduce = no_coll_reduce,
    .scatter = no_coll_rooted,
    .gather = no_coll_rooted,
    .msg = no_coll_msg,
    .barrier2 = no_coll_barrier2,
};
