/*
 * fi_poll - what an fi_cq_read that finds nothing costs: opens an RDM
 * endpoint of one provider (FI_PROVIDER, default tmx), binds a tagged CQ
 * and an AV, and reads the CQ N times (argument, default 1000000) with
 * nothing to find. bench/cost.sh runs it under callgrind with N and with
 * 0 and divides the difference by N: the instructions of one empty poll,
 * the price Open MPI's ofi MTL pays on every turn of its progress loop.
 * It also prints the time per call, which on a shared machine is only a
 * rough figure.
 */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "fi_poll: %s: %s\n", #call, fi_strerror(-rc_));                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    const char *prov = getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : "tmx";
    struct fi_info *hints = fi_allocinfo(), *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    struct fi_cq_tagged_entry e[16];
    struct timespec t0, t1;
    long found = 0;

    if (hints == NULL || n < 0)
        return 1;
    hints->caps = FI_TAGGED;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup(prov);
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->mode = ~0ULL;
    CHECK(fi_getinfo(FI_VERSION(1, 12), NULL, NULL, 0, hints, &info));
    CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
    CHECK(fi_domain(fab, info, &dom, NULL));
    CHECK(fi_cq_open(dom, &cq_attr, &cq, NULL));
    CHECK(fi_av_open(dom, &av_attr, &av, NULL));
    CHECK(fi_endpoint(dom, info, &ep, NULL));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_ep_bind(ep, &av->fid, 0));
    CHECK(fi_enable(ep));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++)
        found += fi_cq_read(cq, e, 16) > 0;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (n > 0)
        printf("%s: %.1f ns per empty fi_cq_read (%ld found something)\n", prov,
               ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / (double)n,
               found);
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&dom->fid);
    fi_close(&fab->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return found != 0;
}
