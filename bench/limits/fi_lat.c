/*
 * fi_lat: a tagged ping-pong over any libfabric RDM provider that times
 * every round trip, so that a latency distribution (median, 99th
 * percentile) can be compared where fi_pingpong reports only a mean.
 *
 *   server: fi_lat -p PROVIDER -B PORT -s SIZE -n ITERS
 *   client: fi_lat -p PROVIDER -P PORT -s SIZE -n ITERS SERVER_IP
 *
 * Endpoint names are exchanged over a TCP connection to PORT. The client
 * prints one line: "fi_lat provider=... size=... iters=... mean_us=...
 * p50_us=... p99_us=..." (half round trips). Exit status 0 on success.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define TAG 0x1234

typedef struct lat {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    fi_addr_t peer;
    struct fi_context sctx, rctx;
} lat_t;

static void die(const char *what, int rc)
{
    fprintf(stderr, "fi_lat: %s: %s\n", what, rc < 0 ? fi_strerror(-rc) : "failed");
    exit(1);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void lat_open(lat_t *l, const char *prov)
{
    struct fi_info *hints = fi_allocinfo();
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr ava = {.type = FI_AV_MAP};
    int rc;

    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(prov);
    if ((rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &l->info)) != 0)
        die("fi_getinfo", rc);
    fi_freeinfo(hints);
    if ((rc = fi_fabric(l->info->fabric_attr, &l->fabric, NULL)) != 0)
        die("fi_fabric", rc);
    if ((rc = fi_domain(l->fabric, l->info, &l->domain, NULL)) != 0)
        die("fi_domain", rc);
    if ((rc = fi_endpoint(l->domain, l->info, &l->ep, NULL)) != 0)
        die("fi_endpoint", rc);
    if ((rc = fi_cq_open(l->domain, &cqa, &l->cq, NULL)) != 0)
        die("fi_cq_open", rc);
    if ((rc = fi_av_open(l->domain, &ava, &l->av, NULL)) != 0)
        die("fi_av_open", rc);
    if ((rc = fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
        (rc = fi_ep_bind(l->ep, &l->av->fid, 0)) != 0)
        die("fi_ep_bind", rc);
    if ((rc = fi_enable(l->ep)) != 0)
        die("fi_enable", rc);
}

static void lat_close(lat_t *l)
{
    fi_close(&l->ep->fid);
    fi_close(&l->av->fid);
    fi_close(&l->cq->fid);
    fi_close(&l->domain->fid);
    fi_close(&l->fabric->fid);
    fi_freeinfo(l->info);
}

/* The out-of-band TCP connection: the server listens, the client connects. */
static int oob_connect(const char *server, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0)
        die("socket", 0);
    if (server == NULL) {
        int lfd = fd;
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0)
            die("bind/listen", 0);
        fd = accept(lfd, NULL, NULL);
        close(lfd);
        if (fd < 0)
            die("accept", 0);
        return fd;
    }
    if (inet_pton(AF_INET, server, &sa.sin_addr) != 1)
        die("server address", 0);
    for (int i = 0; connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0; i++) {
        if (i == 100)
            die("connect", 0);
        usleep(50000);
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
    }
    return fd;
}

static void oob_xfer(int fd, void *out, void *in, size_t len)
{
    if (write(fd, out, len) != (ssize_t)len)
        die("oob write", 0);
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, (char *)in + got, len - got);
        if (n <= 0)
            die("oob read", 0);
        got += (size_t)n;
    }
}

static void exchange_names(lat_t *l, int fd)
{
    char mine[256], theirs[256];
    size_t len = sizeof(mine);
    uint32_t n, m;
    int rc;

    if ((rc = fi_getname(&l->ep->fid, mine, &len)) != 0)
        die("fi_getname", rc);
    n = (uint32_t)len;
    oob_xfer(fd, &n, &m, sizeof(n));
    if (m > sizeof(theirs))
        die("peer name too long", 0);
    memset(theirs, 0, sizeof(theirs));
    oob_xfer(fd, mine, theirs, n > m ? n : m);
    if (fi_av_insert(l->av, theirs, 1, &l->peer, 0, NULL) != 1)
        die("fi_av_insert", 0);
}

/* Spins on the CQ until the operation with context ctx completes. */
static void wait_for(lat_t *l, void *ctx, int *sdone, int *rdone)
{
    struct fi_cq_tagged_entry e;

    while ((ctx == &l->sctx && !*sdone) || (ctx == &l->rctx && !*rdone)) {
        ssize_t n = fi_cq_read(l->cq, &e, 1);
        if (n == 1) {
            if (e.op_context == &l->sctx)
                *sdone = 1;
            else if (e.op_context == &l->rctx)
                *rdone = 1;
        } else if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(l->cq, &err, 0);
            die("completion error", -err.err);
        } else if (n != -FI_EAGAIN) {
            die("fi_cq_read", (int)n);
        }
    }
}

static void post_recv(lat_t *l, void *buf, size_t size)
{
    ssize_t rc;
    while ((rc = fi_trecv(l->ep, buf, size, NULL, l->peer, TAG, 0, &l->rctx)) == -FI_EAGAIN)
        fi_cq_read(l->cq, NULL, 0);
    if (rc != 0)
        die("fi_trecv", (int)rc);
}

static void post_send(lat_t *l, void *buf, size_t size)
{
    ssize_t rc;
    while ((rc = fi_tsend(l->ep, buf, size, NULL, l->peer, TAG, &l->sctx)) == -FI_EAGAIN)
        fi_cq_read(l->cq, NULL, 0);
    if (rc != 0)
        die("fi_tsend", (int)rc);
}

/* One round trip; the client sends first. */
static void round_trip(lat_t *l, int client, char *sbuf, char *rbuf, size_t size)
{
    int sdone = 0, rdone = 0;

    post_recv(l, rbuf, size);
    if (client) {
        post_send(l, sbuf, size);
        wait_for(l, &l->rctx, &sdone, &rdone);
        wait_for(l, &l->sctx, &sdone, &rdone);
    } else {
        wait_for(l, &l->rctx, &sdone, &rdone);
        post_send(l, sbuf, size);
        wait_for(l, &l->sctx, &sdone, &rdone);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(const double *v, long n, double q)
{
    long k = (long)(q * (double)n + 0.999999) - 1;
    return v[k < 0 ? 0 : (k >= n ? n - 1 : k)];
}

static void usage(void)
{
    fprintf(stderr, "usage: fi_lat -p PROVIDER (-B PORT | -P PORT SERVER_IP) [-s SIZE] [-n ITERS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *prov = NULL, *server = NULL;
    long iters = 10000, warm;
    size_t size = 8;
    int port = 0, opt, fd;
    double *rtt, sum = 0;
    char *sbuf, *rbuf, c = 0;
    lat_t l = {0};

    while ((opt = getopt(argc, argv, "p:B:P:s:n:")) != -1) {
        switch (opt) {
        case 'p': prov = optarg; break;
        case 'B': port = atoi(optarg); break;
        case 'P': port = atoi(optarg); break;
        case 's': size = (size_t)strtoull(optarg, NULL, 10); break;
        case 'n': iters = atol(optarg); break;
        default: usage();
        }
    }
    if (optind < argc)
        server = argv[optind];
    if (prov == NULL || port <= 0 || iters <= 0)
        usage();
    warm = iters / 10 + 1;
    sbuf = calloc(1, size + 1);
    rbuf = calloc(1, size + 1);
    rtt = calloc((size_t)iters, sizeof(double));
    if (sbuf == NULL || rbuf == NULL || rtt == NULL)
        die("memory", 0);
    lat_open(&l, prov);
    fd = oob_connect(server, port);
    exchange_names(&l, fd);
    for (long i = -warm; i < iters; i++) {
        double t0 = now_us();
        round_trip(&l, server != NULL, sbuf, rbuf, size);
        if (i >= 0)
            rtt[i] = now_us() - t0;
    }
    oob_xfer(fd, &c, &c, 1); /* neither side closes while the other still runs */
    close(fd);
    if (server != NULL) {
        for (long i = 0; i < iters; i++)
            sum += rtt[i];
        qsort(rtt, (size_t)iters, sizeof(double), cmp_double);
        printf("fi_lat provider=%s size=%zu iters=%ld mean_us=%.3f p50_us=%.3f p99_us=%.3f\n", prov, size,
               iters, sum / (double)iters / 2, quantile(rtt, iters, 0.5) / 2, quantile(rtt, iters, 0.99) / 2);
    }
    lat_close(&l);
    free(sbuf);
    free(rbuf);
    free(rtt);
    return 0;
}
