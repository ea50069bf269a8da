/*
 * tmx-perf point-to-point benchmarks, run under tmxrun with two ranks:
 * latency (ping-pong, half round trip), uni- and bi-directional bandwidth
 * (a window of sends), message rate. Rank 0 prints the table.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "perf.h"
#include "tmx.h"

#define P2P_MAX_SIZES 64
#define P2P_DEFAULT_WINDOW 64
#define P2P_MAX_WINDOW 4096
#define P2P_MAX_ITERS 1000000000L /* rank 0 keeps a double per latency iteration */
#define P2P_MAX_SIZE (1ull << 32)
#define P2P_TAG_DATA 1
#define P2P_TAG_ACK 2

typedef enum p2p_test {
    P2P_LAT,
    P2P_BW,
    P2P_BIBW,
    P2P_RATE,
    P2P_OVERLAP,
    P2P_WAKE,
    P2P_OVERLAP_RECV,
    P2P_OVERLAP_SEND,
    P2P_N_TESTS
} p2p_test_t;

typedef struct p2p_opts {
    p2p_test_t test;
    size_t sizes[P2P_MAX_SIZES];
    int n_sizes;
    long iters;          /* 0: chosen per size */
    int window;
    const char *transport;
    int csv;
    int check;
} p2p_opts_t;

typedef struct p2p {
    p2p_opts_t o;
    tmx_context_h ctx;
    uint32_t rank;
    tmx_peer_t peer;
    unsigned char *sbuf;
    unsigned char *rbuf;
    tmx_request_h *reqs;
    double *rtt;         /* lat on rank 0: each round trip, seconds */
} p2p_t;

static const char *const test_names[] = {"lat", "bw", "bibw", "rate", "overlap", "wake", "overlap-recv", "overlap-send"};
static const char *const test_units[] = {"us", "MB/s", "MB/s", "msg/s", "%", "us", "%", "%"};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void p2p_usage(FILE *f)
{
    fprintf(f, "usage: tmxrun -n 2 tmx-perf [-t TEST] [-s SIZE[,SIZE...]] [-n ITER]\n"
               "                [-w WINDOW] [-x TRANSPORT] [-c] [--csv]\n"
               "  -t  test: lat (default), bw, bibw, rate, overlap, overlap-recv,\n"
               "      overlap-send or wake; overlap: both ranks post a receive and a send, rank 0\n"
               "      computes, without calling tmx, work that takes as long as the exchange\n"
               "      alone on a core of its own, then both wait; overlap =\n"
               "      1 - (total - exchange) / exchange, in percent; overlap-recv and\n"
               "      overlap-send: the same with one message, which rank 0 receives\n"
               "      (rank 1 sends) or sends (rank 1 receives) while it computes\n"
               "      (TMX_OFFLOAD=1 runs the offload engine); wake: round trips to a\n"
               "      peer that has gone to sleep in its wait (rank 0 pauses 2 ms\n"
               "      before each), in microseconds\n"
               "  -s  message sizes up to 4096m, suffixes k and m, at most %d of them\n"
               "      (default 1 to 16m, powers of two)\n"
               "  -n  iterations per size, 1 to %ld (default: chosen per size)\n"
               "  -w  sends in flight for bw, bibw and rate, 1 to %d (default %d)\n"
               "  -x  transport between the two ranks (default shm); shm,udp opens\n"
               "      both (the default transports), and shm carries the traffic\n"
               "  -c  check every payload\n"
               "  --csv  print test,transport,size,iterations,value,unit rows\n",
            P2P_MAX_SIZES, P2P_MAX_ITERS, P2P_MAX_WINDOW, P2P_DEFAULT_WINDOW);
}

/* A decimal in [lo, hi]; one strtol cannot hold (ERANGE) is out of range. */
static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *s == '-')
        return -1;
    if (*end == 'k' || *end == 'K')
        shift = 10, end++;
    else if (*end == 'm' || *end == 'M')
        shift = 20, end++;
    if (*end != '\0' || v > P2P_MAX_SIZE >> shift) /* checked before the shift can wrap */
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int parse_sizes(const char *arg, p2p_opts_t *o)
{
    char buf[1024], *save = NULL;

    if (strlen(arg) >= sizeof(buf))
        return -1;
    strcpy(buf, arg);
    o->n_sizes = 0;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (o->n_sizes == P2P_MAX_SIZES || parse_size(t, &o->sizes[o->n_sizes]) != 0)
            return -1;
        o->n_sizes++;
    }
    return o->n_sizes > 0 ? 0 : -1;
}

static int parse_test(const char *s, p2p_test_t *t)
{
    for (int i = 0; i < P2P_N_TESTS; i++) {
        if (strcmp(s, test_names[i]) == 0) {
            *t = (p2p_test_t)i;
            return 0;
        }
    }
    return -1;
}

static void default_sizes(p2p_opts_t *o)
{
    o->n_sizes = 0;
    for (size_t s = 1; s <= (16u << 20); s *= 2)
        o->sizes[o->n_sizes++] = s;
}

/* Says why the value arg of option opt is refused. */
static void p2p_refuse(int opt, const char *arg)
{
    fprintf(stderr, "tmx-perf: -%c '%s': expected ", opt, arg);
    switch (opt) {
    case 't': fprintf(stderr, "a test: lat, bw, bibw, rate, overlap, overlap-recv, overlap-send or wake\n"); break;
    case 's': fprintf(stderr, "1 to %d sizes, each 0 to %llum (suffixes k, m)\n", P2P_MAX_SIZES, P2P_MAX_SIZE >> 20); break;
    case 'n': fprintf(stderr, "iterations, 1 to %ld\n", P2P_MAX_ITERS); break;
    case 'w': fprintf(stderr, "sends in flight, 1 to %d\n", P2P_MAX_WINDOW); break;
    }
}

static int parse_opts(int argc, char **argv, p2p_opts_t *o)
{
    static const struct option lopts[] = {{"csv", no_argument, NULL, 'C'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    long window;
    int c;

    memset(o, 0, sizeof(*o));
    o->window = P2P_DEFAULT_WINDOW;
    o->transport = "shm";
    default_sizes(o);
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:s:n:w:x:ch", lopts, NULL)) != -1) {
        switch (c) {
        case 't': if (parse_test(optarg, &o->test) != 0) goto err_value; break;
        case 's': if (parse_sizes(optarg, o) != 0) goto err_value; break;
        case 'n': if (parse_long(optarg, 1, P2P_MAX_ITERS, &o->iters) != 0) goto err_value; break;
        case 'w': if (parse_long(optarg, 1, P2P_MAX_WINDOW, &window) != 0) goto err_value; o->window = (int)window; break;
        case 'x': o->transport = optarg; break;
        case 'c': o->check = 1; break;
        case 'C': o->csv = 1; break;
        case 'h': p2p_usage(stdout); exit(0);
        default: goto err_usage;
        }
    }
    if (optind != argc)
        goto err_usage;
    return 0;

err_value:
    p2p_refuse(c, optarg);
err_usage:
    p2p_usage(stderr);
    return -1;
}

/* Enough iterations for a stable figure without minutes at 16 MiB. */
static long iters_for(const p2p_t *p, size_t size)
{
    long n;

    if (p->o.iters > 0)
        return p->o.iters;
    n = (long)((size_t)(1u << 30) / (size + 1024));
    if (p->o.test == P2P_LAT)
        n /= 8;
    if (p->o.test == P2P_WAKE)
        return 500; /* a second of pauses */
    if (n > 20000)
        n = 20000;
    return n < 20 ? 20 : n;
}

static int die(const char *what, tmx_status_t st)
{
    fprintf(stderr, "tmx-perf: %s: %s\n", what, tmx_strerror(st));
    exit(1);
}

static const tmx_op_params_t quiet = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_NO_CQ};

static void post_send(p2p_t *p, const void *buf, size_t len, uint64_t tag, tmx_request_h *req)
{
    tmx_status_t st;

    while ((st = tmx_tsend(p->ctx, p->peer, buf, len, tag, &quiet, req)) == TMX_ERR_AGAIN)
        tmx_progress(p->ctx);
    if (st != TMX_OK)
        die("send", st);
}

static void post_recv(p2p_t *p, void *buf, size_t len, uint64_t tag, tmx_request_h *req)
{
    tmx_status_t st = tmx_trecv(p->ctx, p->peer, buf, len, tag, 0, &quiet, req);

    if (st != TMX_OK)
        die("recv", st);
}

static void wait_free(tmx_request_h req)
{
    tmx_status_t st = tmx_request_wait(req, -1, NULL);

    if (st != TMX_OK)
        die("wait", st);
    tmx_request_free(req);
}

static void check_payload(const p2p_t *p, const unsigned char *buf, size_t len, long iter)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != (unsigned char)(i + (size_t)iter)) {
            fprintf(stderr, "tmx-perf: payload mismatch at byte %zu of %zu, iteration %ld\n", i, len, iter);
            exit(1);
        }
    }
}

static void stamp(unsigned char *buf, size_t len, long iter)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i + (size_t)iter);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of n sorted values. */
static double quantile(const double *v, long n, double q)
{
    long k = (long)(q * (double)n + 0.999999) - 1;
    return v[k < 0 ? 0 : (k >= n ? n - 1 : k)];
}

/* Ping-pong: the mean half round trip; rank 0 also keeps every round trip
 * in p->rtt, for percentiles. */
static double run_lat(p2p_t *p, size_t size, long n)
{
    double t0 = 0, ti = 0;
    long warm = n / 10 + 1;

    for (long i = -warm; i < n; i++) {
        tmx_request_h r, s;
        if (i == 0)
            t0 = now_s();
        if (i >= 0 && p->rtt != NULL)
            ti = now_s();
        if (p->o.check && p->rank == 0)
            stamp(p->sbuf, size, i);
        post_recv(p, p->rbuf, size, P2P_TAG_DATA, &r);
        if (p->rank == 0) {
            post_send(p, p->sbuf, size, P2P_TAG_DATA, &s);
            wait_free(s);
            wait_free(r);
        } else {
            wait_free(r);
            post_send(p, p->rbuf, size, P2P_TAG_DATA, &s);
            wait_free(s);
        }
        if (i >= 0 && p->rtt != NULL)
            p->rtt[i] = now_s() - ti;
        if (p->o.check && p->rank == 0)
            check_payload(p, p->rbuf, size, i);
    }
    return (now_s() - t0) * 1e6 / (2.0 * (double)n);
}

/* Round trips to a peer that sleeps: rank 0 pauses 2 ms without calling
 * tmx before each ping, so rank 1, waiting for it, has spun, yielded and
 * gone to sleep in the transports when it comes. The mean round trip is
 * then mostly how soon a sleeper wakes. */
static double run_wake(p2p_t *p, size_t size, long n)
{
    const struct timespec pause = {0, 2000000};
    double sum = 0;

    for (long i = -1; i < n; i++) {
        tmx_request_h r, s;
        double t;
        if (p->o.check && p->rank == 0)
            stamp(p->sbuf, size, i);
        post_recv(p, p->rbuf, size, P2P_TAG_DATA, &r);
        if (p->rank == 0) {
            nanosleep(&pause, NULL);
            t = now_s();
            post_send(p, p->sbuf, size, P2P_TAG_DATA, &s);
            wait_free(s);
            wait_free(r);
            if (i >= 0)
                sum += now_s() - t;
            if (p->o.check)
                check_payload(p, p->rbuf, size, i);
        } else {
            wait_free(r);
            post_send(p, p->rbuf, size, P2P_TAG_DATA, &s);
            wait_free(s);
        }
    }
    return sum * 1e6 / (double)n;
}

/* One window: the sender posts w sends, the receiver w receives; the
 * receiver answers with an empty ack so windows do not overlap. */
static void window_send(p2p_t *p, size_t size, int w)
{
    tmx_request_h ack;

    post_recv(p, NULL, 0, P2P_TAG_ACK, &ack);
    for (int k = 0; k < w; k++)
        post_send(p, p->sbuf, size, P2P_TAG_DATA, &p->reqs[k]);
    for (int k = 0; k < w; k++)
        wait_free(p->reqs[k]);
    wait_free(ack);
}

static void window_recv(p2p_t *p, size_t size, int w)
{
    tmx_request_h ack;

    for (int k = 0; k < w; k++)
        post_recv(p, p->rbuf, size, P2P_TAG_DATA, &p->reqs[k]);
    for (int k = 0; k < w; k++)
        wait_free(p->reqs[k]);
    post_send(p, NULL, 0, P2P_TAG_ACK, &ack);
    wait_free(ack);
}

/* Both directions at once: each rank posts w receives and w sends. */
static void window_both(p2p_t *p, size_t size, int w)
{
    tmx_request_h *rr = p->reqs + w;

    for (int k = 0; k < w; k++)
        post_recv(p, p->rbuf, size, P2P_TAG_DATA, &rr[k]);
    for (int k = 0; k < w; k++)
        post_send(p, p->sbuf, size, P2P_TAG_DATA, &p->reqs[k]);
    for (int k = 0; k < w; k++)
        wait_free(p->reqs[k]);
    for (int k = 0; k < w; k++)
        wait_free(rr[k]);
}

static double run_windows(p2p_t *p, size_t size, long n)
{
    int w = p->o.window;
    long windows = (n + w - 1) / w, warm = windows / 10 + 1;
    double t0 = 0, dt;

    for (long i = -warm; i < windows; i++) {
        if (i == 0)
            t0 = now_s();
        if (p->o.test == P2P_BIBW)
            window_both(p, size, w);
        else if (p->rank == 0)
            window_send(p, size, w);
        else
            window_recv(p, size, w);
    }
    dt = now_s() - t0;
    if (p->o.test == P2P_RATE)
        return (double)(windows * w) / dt;
    return (double)size * (double)(windows * w) * (p->o.test == P2P_BIBW ? 2.0 : 1.0) / dt / 1e6;
}

/* The application's computation, without calling tmx: a fixed amount of
 * work, not a stretch of time, so that a thread of the library that
 * takes the computing core (the offload engine) lengthens it instead of
 * hiding in it. compute_ns is what one step takes alone (compute_calibrate). */
static double compute_ns;

static uint64_t compute_steps(uint64_t n)
{
    uint64_t x = 88172645463325252ull;

    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* The fastest of a few runs: the step's cost when nothing else runs. */
static void compute_calibrate(void)
{
    const uint64_t n = 1u << 20;

    compute_ns = 0;
    for (int r = 0; r < 7; r++) {
        double t0 = now_s(), ns;
        (void)compute_steps(n);
        ns = (now_s() - t0) * 1e9 / (double)n;
        if (compute_ns == 0 || ns < compute_ns)
            compute_ns = ns;
    }
}

/* Work that takes us microseconds when it has its core to itself. */
static void compute_for(double us)
{
    (void)compute_steps((uint64_t)(us * 1e3 / compute_ns));
}

/* Both ranks start an iteration together: an empty exchange. */
static void sync_pair(p2p_t *p)
{
    tmx_request_h r, s;

    post_recv(p, NULL, 0, P2P_TAG_ACK, &r);
    post_send(p, NULL, 0, P2P_TAG_ACK, &s);
    wait_free(s);
    wait_free(r);
}

/* One exchange: a receive and a send posted, compute_us of computation
 * (rank 0 only), then both waited for; its duration in microseconds. With
 * overlap-recv and overlap-send one message only: rank 0 receives it
 * (rank 1 sends) or sends it. */
static double exchange(p2p_t *p, size_t size, double compute_us)
{
    tmx_request_h r = NULL, s = NULL;
    int recv = p->o.test != (p->rank == 0 ? P2P_OVERLAP_SEND : P2P_OVERLAP_RECV);
    int send = p->o.test != (p->rank == 0 ? P2P_OVERLAP_RECV : P2P_OVERLAP_SEND);
    double t0;

    sync_pair(p);
    t0 = now_s();
    if (recv)
        post_recv(p, p->rbuf, size, P2P_TAG_DATA, &r);
    if (send)
        post_send(p, p->sbuf, size, P2P_TAG_DATA, &s);
    if (compute_us > 0 && p->rank == 0)
        compute_for(compute_us);
    if (send)
        wait_free(s);
    if (recv)
        wait_free(r);
    return (now_s() - t0) * 1e6;
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return quantile(v, n, 0.5);
}

/* Overlap of communication with computation: both ranks exchange a
 * message each way; alone, that takes x on rank 0 (median). Then rank 0
 * computes work that takes x alone between posting and waiting, while rank 1 waits as
 * usual, and the exchange takes t on rank 0: overlap is 1 - (t - x) / x,
 * 100 % when the transfer happened entirely while rank 0 computed, 0 when
 * it waited for rank 0's wait. One rank computes so that, on a machine of
 * two cores, a core is left for the copies (a device would make them). */
static double run_overlap(p2p_t *p, size_t size, long n, double *x_us, double *t_us)
{
    double *v = malloc((size_t)n * sizeof(double));

    if (v == NULL)
        die("buffers", TMX_ERR_NOMEM);
    for (long i = -(n / 10 + 1); i < n; i++) {
        double d = exchange(p, size, 0);
        if (i >= 0)
            v[i] = d;
    }
    *x_us = median(v, n);
    if (p->rank == 0)
        compute_calibrate();
    for (long i = 0; i < n; i++)
        v[i] = exchange(p, size, *x_us);
    *t_us = median(v, n);
    free(v);
    return 100.0 * (1.0 - (*t_us - *x_us) / *x_us);
}

static void report_row(const p2p_t *p, const char *name, const char *unit, size_t size, long n,
                       double v)
{
    char tl[64];

    /* -x shm,udp: shm+udp, one CSV field */
    snprintf(tl, sizeof(tl), "%s", p->o.transport);
    for (char *c = tl; *c != '\0'; c++)
        *c = *c == ',' ? '+' : *c;
    if (p->o.csv)
        printf("%s,%s,%zu,%ld,%.3f,%s\n", name, tl, size, n, v, unit);
    else
        printf("%-7s %-6s %10zu %10ld %14.3f %s\n", name, tl, size, n, v, unit);
}

/* lat also gives the median and 99th percentile of the half round trip. */
static void report(const p2p_t *p, size_t size, long n, double v)
{
    if (p->rank != 0)
        return;
    report_row(p, test_names[p->o.test], test_units[p->o.test], size, n, v);
    if (p->o.test == P2P_LAT && p->rtt != NULL) {
        qsort(p->rtt, (size_t)n, sizeof(double), cmp_double);
        report_row(p, "lat_p50", "us", size, n, quantile(p->rtt, n, 0.50) * 1e6 / 2);
        report_row(p, "lat_p99", "us", size, n, quantile(p->rtt, n, 0.99) * 1e6 / 2);
    }
    fflush(stdout);
}

/* Large buffers on huge pages where the kernel offers them (as UCX's and
 * MPI's benchmarks get): fewer pages for the kernel to pin per copy. The
 * length is rounded up to whole huge pages, so that whether a buffer gets
 * them does not depend on what happens to be mapped beside it. */
static unsigned char *buf_alloc(size_t len)
{
    const size_t huge = 2u << 20;
    void *b = NULL;
    size_t align = len >= huge / 2 ? huge : 64;
    size_t alloc = align == huge ? (len + huge - 1) / huge * huge : len;

    if (posix_memalign(&b, align, alloc) != 0)
        return NULL;
    if (align == huge)
        madvise(b, alloc, MADV_HUGEPAGE);
    return b;
}

static void p2p_setup(p2p_t *p)
{
    char tls[64];
    size_t max = 1;
    uint32_t size;
    tmx_context_params_t cp = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS};
    tmx_status_t st;

    snprintf(tls, sizeof(tls), "self,%s", p->o.transport);
    cp.transports = tls;
    if ((st = tmx_context_create(&cp, &p->ctx)) != TMX_OK)
        die("context", st);
    if ((st = tmx_job_info(p->ctx, &p->rank, &size)) != TMX_OK || size != 2) {
        fprintf(stderr, "tmx-perf: run it with two ranks: tmxrun -n 2 tmx-perf ...\n");
        exit(2);
    }
    p->peer = 1 - p->rank;
    for (int i = 0; i < p->o.n_sizes; i++)
        max = p->o.sizes[i] > max ? p->o.sizes[i] : max;
    p->sbuf = buf_alloc(max);
    p->rbuf = buf_alloc(max);
    p->reqs = malloc(2 * (size_t)p->o.window * sizeof(*p->reqs));
    if (p->sbuf == NULL || p->rbuf == NULL || p->reqs == NULL)
        die("buffers", TMX_ERR_NOMEM);
    memset(p->sbuf, 1, max);
    memset(p->rbuf, 2, max);
}

int perf_p2p_main(int argc, char **argv)
{
    p2p_t p;

    memset(&p, 0, sizeof(p));
    if (parse_opts(argc, argv, &p.o) != 0)
        return 2;
    p2p_setup(&p);
    if (p.rank == 0 && p.o.csv)
        printf("test,transport,size,iterations,value,unit\n");
    else if (p.rank == 0)
        printf("%-7s %-6s %10s %10s %14s %s\n", "test", "tl", "size", "iters", "value", "unit");
    for (int i = 0; i < p.o.n_sizes; i++) {
        size_t size = p.o.sizes[i];
        long n = iters_for(&p, size);
        double v;
        if (p.o.test == P2P_LAT && p.rank == 0 && (p.rtt = realloc(p.rtt, (size_t)n * sizeof(double))) == NULL)
            die("buffers", TMX_ERR_NOMEM);
        if (p.rank == 0 && !p.o.csv && size >= (1u << 20))
            fprintf(stderr, "tmx-perf: %s %zu bytes...\n", test_names[p.o.test], size);
        tmx_job_barrier(p.ctx);
        if (p.o.test == P2P_OVERLAP || p.o.test == P2P_OVERLAP_RECV || p.o.test == P2P_OVERLAP_SEND) {
            double x, t;
            if (n > 200)
                n = 200;
            v = run_overlap(&p, size, n, &x, &t);
            report(&p, size, n, v);
            if (p.rank == 0) {
                report_row(&p, "xfer", "us", size, n, x);
                report_row(&p, "total", "us", size, n, t);
                fflush(stdout);
            }
            continue;
        }
        v = p.o.test == P2P_LAT ? run_lat(&p, size, n) : p.o.test == P2P_WAKE ? run_wake(&p, size, n) : run_windows(&p, size, n);
        report(&p, size, n, v);
    }
    tmx_job_barrier(p.ctx);
    free(p.sbuf);
    free(p.rbuf);
    free(p.reqs);
    free(p.rtt);
    tmx_context_destroy(p.ctx);
    return 0;
}
