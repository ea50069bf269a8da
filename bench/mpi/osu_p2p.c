/*
 * osu_p2p - an OSU-style MPI point-to-point benchmark for two ranks (built
 * by bench/openmpi.sh with mpicc; the same program for every Open MPI
 * configuration it compares).
 *
 *   lat   ping-pong, one way = round trip / 2: mean, median, 99th
 *         percentile and minimum over the timed round trips (osu_latency);
 *         with -e rank 1 answers with the buffer it just received (whose
 *         lines its cache holds, written, as an application's freshly
 *         made data), not with a send buffer nobody writes
 *   bw    rank 0 posts a window of MPI_Isend, rank 1 as many MPI_Irecv;
 *         rank 1 answers each window with a 4-byte ack (osu_bw); MB/s
 *   rate  the bw loop at one small size, reported in messages/s (osu_mbw_mr):
 *         with 2N ranks, N pairs (rank r with rank r + N) run it at once
 *         and the figure is the sum of the pairs' rates
 *
 * lat and bw take two ranks; rate takes any even number.
 *
 * Every size runs after a barrier, with warm-up iterations (a tenth, plus
 * one) before the timed ones. After each size one more round trip carries a
 * stamped payload that rank 0 checks, so a figure is only printed for data
 * that really arrived. Rank 0 prints CSV rows:
 *   lat,SIZE,ROUND_TRIPS,MEAN_US,MEDIAN_US,P99_US,MIN_US
 *   bw,SIZE,MESSAGES,MB_PER_S,MSG_PER_S
 *   rate,SIZE,MESSAGES,MB_PER_S,MSG_PER_S,PAIRS   (sums over the pairs)
 * MB are 10^6 bytes.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES 64
#define TAG_DATA 1
#define TAG_ACK 2
#define TAG_CHECK 3

typedef struct opts {
    size_t sizes[MAX_SIZES];
    int n_sizes;
    int lat, bw, rate;   /* which tests, in this order */
    int window;
    size_t rate_size;
    long div;            /* iteration counts divided by this (--quick) */
    int pin;             /* rank r on core r */
    int echo;            /* lat: the answer is the buffer just received */
} opts_t;

typedef struct bench {
    opts_t o;
    int rank;
    int size;            /* ranks in the job */
    int peer;
    int leader;          /* sends in its pair: rank < size / 2 */
    unsigned char *sbuf;
    unsigned char *rbuf;
    MPI_Request *reqs;
    double *rtt;         /* rank 0, lat: every timed round trip (s) */
} bench_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mpirun -n 2 osu_p2p [-t lat,bw,rate] [-s SIZE[,SIZE...]] [-w WINDOW]\n"
               "               [-r RATE_SIZE] [-d DIVISOR] [-p] [-e]\n"
               "       mpirun -n 2N osu_p2p -t rate ...   (N pairs)\n"
               "  -s  sizes (suffixes k, m); default 1 B to 16 MiB in powers of two\n"
               "  -d  divide every iteration count by DIVISOR (at least 20 remain)\n"
               "  -p  pin rank r to core r modulo the cores online (sched_setaffinity,\n"
               "      before MPI_Init)\n"
               "  -e  lat: rank 1 answers with the buffer it received (written data)\n");
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);

    if (end == s)
        return -1;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    if (*end != '\0' || v > (1ull << 30))
        return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_list(char *arg, opts_t *o, int sizes)
{
    char *save = NULL;

    if (sizes)
        o->n_sizes = 0;
    else
        o->lat = o->bw = o->rate = 0;
    for (char *t = strtok_r(arg, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (sizes && (o->n_sizes == MAX_SIZES || parse_size(t, &o->sizes[o->n_sizes++]) != 0))
            return -1;
        if (!sizes && strcmp(t, "lat") == 0)
            o->lat = 1;
        else if (!sizes && strcmp(t, "bw") == 0)
            o->bw = 1;
        else if (!sizes && strcmp(t, "rate") == 0)
            o->rate = 1;
        else if (!sizes)
            return -1;
    }
    return (sizes && o->n_sizes == 0) || (!sizes && !(o->lat || o->bw || o->rate)) ? -1 : 0;
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    int c;

    memset(o, 0, sizeof(*o));
    o->lat = o->bw = o->rate = 1;
    o->window = 64;
    o->rate_size = 8;
    o->div = 1;
    for (size_t s = 1; s <= (16u << 20); s *= 2)
        o->sizes[o->n_sizes++] = s;
    while ((c = getopt(argc, argv, "t:s:w:r:d:pe")) != -1) {
        switch (c) {
        case 't': if (parse_list(optarg, o, 0) != 0) return -1; break;
        case 's': if (parse_list(optarg, o, 1) != 0) return -1; break;
        case 'w': if ((o->window = atoi(optarg)) <= 0 || o->window > 4096) return -1; break;
        case 'r': if (parse_size(optarg, &o->rate_size) != 0) return -1; break;
        case 'd': if ((o->div = atol(optarg)) <= 0) return -1; break;
        case 'p': o->pin = 1; break;
        case 'e': o->echo = 1; break;
        default: return -1;
        }
    }
    return optind == argc ? 0 : -1;
}

/* Before MPI_Init, so that every thread the library starts inherits it.
 * Open MPI's launcher puts the rank in the environment. */
static void pin_to_rank(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    cpu_set_t set;

    if (r == NULL)
        return;
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    CPU_ZERO(&set);
    CPU_SET(atoi(r) % (n > 0 ? (int)n : 1), &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        perror("osu_p2p: sched_setaffinity");
}

static void print_cpus(char *out, size_t len)
{
    cpu_set_t set;
    size_t k = 0;

    out[0] = '\0';
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE && k + 8 < len; c++)
        if (CPU_ISSET(c, &set))
            k += (size_t)snprintf(out + k, len - k, "%s%d", k ? "," : "", c);
}

/* One line per rank, in rank order: where it runs and on which cores. */
static void report_placement(const bench_t *b)
{
    char line[512], host[MPI_MAX_PROCESSOR_NAME], cpus[256];
    char *all = b->rank == 0 ? malloc((size_t)b->size * sizeof(line)) : NULL;
    int len;

    MPI_Get_processor_name(host, &len);
    print_cpus(cpus, sizeof(cpus));
    snprintf(line, sizeof(line), "# rank %d on %s, cores %s", b->rank, host, cpus);
    if (b->rank == 0 && all == NULL)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Gather(line, sizeof(line), MPI_CHAR, all, sizeof(line), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (b->rank == 0) {
        char ver[MPI_MAX_LIBRARY_VERSION_STRING];
        MPI_Get_library_version(ver, &len);
        ver[strcspn(ver, "\n")] = '\0';
        printf("# %s\n", ver);
        for (int r = 0; r < b->size; r++)
            printf("%s\n", all + (size_t)r * sizeof(line));
        free(all);
    }
}

/* Large buffers on huge pages where the kernel offers them, as tmx-perf
 * allocates its own. */
static unsigned char *buf_alloc(size_t len)
{
    void *p = NULL;
    size_t align = len >= (1u << 20) ? (2u << 20) : 4096;

    if (posix_memalign(&p, align, len) != 0)
        return NULL;
    if (align > 4096)
        madvise(p, len, MADV_HUGEPAGE);
    memset(p, 0, len);
    return p;
}

static void stamp(unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 7 + seed);
}

/* The leader of each pair sends a stamped payload, its peer returns what
 * it got, the leader checks it. Exits (aborting the job) on a mismatch. */
static void check_round_trip(bench_t *b, size_t size, unsigned seed)
{
    if (b->leader) {
        stamp(b->sbuf, size, seed);
        memset(b->rbuf, 0, size);
        MPI_Send(b->sbuf, (int)size, MPI_BYTE, b->peer, TAG_CHECK, MPI_COMM_WORLD);
        MPI_Recv(b->rbuf, (int)size, MPI_BYTE, b->peer, TAG_CHECK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (memcmp(b->sbuf, b->rbuf, size) != 0) {
            fprintf(stderr, "osu_p2p: payload of %zu bytes came back changed\n", size);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    } else {
        MPI_Recv(b->rbuf, (int)size, MPI_BYTE, b->peer, TAG_CHECK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(b->rbuf, (int)size, MPI_BYTE, b->peer, TAG_CHECK, MPI_COMM_WORLD);
    }
}

/* Iteration counts: about 2^28 bytes each way per size for a ping-pong and
 * 2^30 for a window stream, within [min, max] (osu_latency runs 10000 round
 * trips below 8 KiB, 1000 above; osu_bw 100 / 20 windows of 64). */
static long lat_iters(const bench_t *b, size_t s)
{
    long n = (long)((1ul << 28) / (s + 1024));
    n = n > 10000 ? 10000 : n;
    n /= b->o.div;
    return n < 20 ? 20 : n;
}

static long bw_windows(const bench_t *b, size_t s)
{
    long n = (long)((1ul << 30) / ((s + 1024) * (size_t)b->o.window));
    n = n > 200 ? 200 : n;
    n /= b->o.div;
    return n < 2 ? 2 : n;
}

static int cmp_double(const void *a, const void *c)
{
    double x = *(const double *)a, y = *(const double *)c;
    return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of n sorted values. */
static double quantile(const double *v, long n, double q)
{
    long k = (long)(q * (double)n + 0.999999) - 1;
    return v[k < 0 ? 0 : (k >= n ? n - 1 : k)];
}

static void ping_pong(bench_t *b, size_t size)
{
    if (b->leader) {
        MPI_Send(b->sbuf, (int)size, MPI_BYTE, b->peer, TAG_DATA, MPI_COMM_WORLD);
        MPI_Recv(b->rbuf, (int)size, MPI_BYTE, b->peer, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(b->rbuf, (int)size, MPI_BYTE, b->peer, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(b->o.echo ? b->rbuf : b->sbuf, (int)size, MPI_BYTE, b->peer, TAG_DATA, MPI_COMM_WORLD);
    }
}

/* Rank 0 reads the clock once per round trip: the differences are the
 * samples, the whole span gives the mean (the clock read is in both). */
static void run_lat(bench_t *b, size_t size)
{
    long n = lat_iters(b, size), warm = n / 10 + 1;
    double t0, t1;

    for (long i = 0; i < warm; i++)
        ping_pong(b, size);
    t0 = t1 = now_s();
    for (long i = 0; i < n; i++) {
        ping_pong(b, size);
        if (b->rank == 0) {
            double t = now_s();
            b->rtt[i] = t - t1;
            t1 = t;
        }
    }
    check_round_trip(b, size, (unsigned)size);
    if (b->rank != 0)
        return;
    qsort(b->rtt, (size_t)n, sizeof(double), cmp_double);
    printf("lat,%zu,%ld,%.4f,%.4f,%.4f,%.4f\n", size, n, (t1 - t0) * 1e6 / (2.0 * (double)n),
           quantile(b->rtt, n, 0.5) * 1e6 / 2, quantile(b->rtt, n, 0.99) * 1e6 / 2, b->rtt[0] * 1e6 / 2);
    fflush(stdout);
}

/* One window: the leader posts w sends, its peer w receives (into one
 * buffer, as osu_bw does) and then acks, so windows do not overlap. */
static void window(bench_t *b, size_t size)
{
    int w = b->o.window, ack = 0;

    for (int k = 0; k < w; k++) {
        if (b->leader)
            MPI_Isend(b->sbuf, (int)size, MPI_BYTE, b->peer, TAG_DATA, MPI_COMM_WORLD, &b->reqs[k]);
        else
            MPI_Irecv(b->rbuf, (int)size, MPI_BYTE, b->peer, TAG_DATA, MPI_COMM_WORLD, &b->reqs[k]);
    }
    MPI_Waitall(w, b->reqs, MPI_STATUSES_IGNORE);
    if (b->leader)
        MPI_Recv(&ack, 1, MPI_INT, b->peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
        MPI_Send(&ack, 1, MPI_INT, b->peer, TAG_ACK, MPI_COMM_WORLD);
}

static void run_windows(bench_t *b, const char *name, size_t size, long windows)
{
    long warm = windows / 10 + 1, msgs = windows * b->o.window;
    double t0, dt;

    for (long i = 0; i < warm; i++)
        window(b, size);
    t0 = now_s();
    for (long i = 0; i < windows; i++)
        window(b, size);
    dt = now_s() - t0;
    check_round_trip(b, size, (unsigned)size + 1);
    if (b->size > 2) {
        /* every pair's rate, summed; followers add nothing */
        double mine = b->leader ? (double)msgs / dt : 0.0, sum = 0.0;
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (b->rank == 0)
            printf("%s,%zu,%ld,%.3f,%.1f,%d\n", name, size, msgs * (b->size / 2),
                   (double)size * sum / 1e6, sum, b->size / 2);
        fflush(stdout);
        return;
    }
    if (b->rank != 0)
        return;
    printf("%s,%zu,%ld,%.3f,%.1f%s\n", name, size, msgs, (double)size * (double)msgs / dt / 1e6,
           (double)msgs / dt, strcmp(name, "rate") == 0 ? ",1" : "");
    fflush(stdout);
}

static int setup(bench_t *b)
{
    size_t max = b->o.rate_size;
    int size;

    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || size % 2 != 0 || (size != 2 && (b->o.lat || b->o.bw))) {
        if (b->rank == 0)
            fprintf(stderr, "osu_p2p: run lat and bw with two ranks (mpirun -n 2), rate with an "
                            "even number of ranks (%d given)\n", size);
        return -1;
    }
    b->size = size;
    b->leader = b->rank < size / 2;
    b->peer = b->leader ? b->rank + size / 2 : b->rank - size / 2;
    for (int i = 0; i < b->o.n_sizes; i++)
        max = b->o.sizes[i] > max ? b->o.sizes[i] : max;
    b->sbuf = buf_alloc(max);
    b->rbuf = buf_alloc(max);
    b->reqs = malloc((size_t)b->o.window * sizeof(*b->reqs));
    b->rtt = malloc(10000 * sizeof(double));
    if (b->sbuf == NULL || b->rbuf == NULL || b->reqs == NULL || b->rtt == NULL) {
        fprintf(stderr, "osu_p2p: out of memory for %zu-byte buffers\n", max);
        return -1;
    }
    return 0;
}

static void run_all(bench_t *b)
{
    const opts_t *o = &b->o;

    if (o->lat && b->rank == 0)
        printf("lat,size,round_trips,mean_us,median_us,p99_us,min_us\n");
    for (int i = 0; o->lat && i < o->n_sizes; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        run_lat(b, o->sizes[i]);
    }
    if (o->bw && b->rank == 0)
        printf("bw,size,messages,MB_per_s,msg_per_s\n");
    for (int i = 0; o->bw && i < o->n_sizes; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        run_windows(b, "bw", o->sizes[i], bw_windows(b, o->sizes[i]));
    }
    if (o->rate) {
        /* ten times the windows of a bw run at that size: a rate needs more
         * than the few milliseconds such a run of small messages takes */
        if (b->rank == 0)
            printf("rate,size,messages,MB_per_s,msg_per_s,pairs\n");
        MPI_Barrier(MPI_COMM_WORLD);
        run_windows(b, "rate", o->rate_size, 10 * bw_windows(b, o->rate_size));
    }
}

int main(int argc, char **argv)
{
    bench_t b;

    memset(&b, 0, sizeof(b));
    if (parse_opts(argc, argv, &b.o) != 0) {
        usage(stderr);
        return 2;
    }
    if (b.o.pin)
        pin_to_rank();
    MPI_Init(&argc, &argv);
    if (setup(&b) != 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    report_placement(&b);
    run_all(&b);
    MPI_Barrier(MPI_COMM_WORLD);
    if (b.rank == 0)
        printf("# osu_p2p done\n");
    free(b.sbuf);
    free(b.rbuf);
    free(b.reqs);
    free(b.rtt);
    MPI_Finalize();
    return 0;
}
