/*
 * Overlap of communication with computation, over MPI (bench/overlap.sh),
 * the same measure as `tmx-perf -t overlap`: two ranks exchange a message
 * each way (MPI_Irecv, MPI_Isend); alone, the exchange takes x on rank 0
 * (median). Then rank 0 computes, between posting and MPI_Waitall and
 * without calling MPI, work that takes x when it has its core to itself,
 * while rank 1 waits as usual, and the exchange takes t on rank 0:
 * overlap = 1 - (t - x) / x, in percent. With -m recv or -m send, one
 * message only, which rank 0 receives (rank 1 sends) or sends (rank 1
 * receives) while it computes, as tmx-perf's overlap-recv and overlap-send.
 *
 * usage: mpirun -n 2 overlap [-s SIZE[,SIZE...]] [-n ITERS] [-m exchange|recv|send]
 * prints: overlap,SIZE,ITERS,OVERLAP_PERCENT,X_US,T_US per size (rank 0)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double now_us(void)
{
    return MPI_Wtime() * 1e6;
}

/* The computation: a fixed amount of work, not a stretch of time, so that
 * a progress thread of the library that takes the computing core
 * lengthens it instead of hiding in it. compute_ns is what one step takes
 * alone (calibrate). */
static double compute_ns;

static unsigned long long compute_steps(unsigned long long n)
{
    unsigned long long x = 88172645463325252ull;

    for (unsigned long long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static void calibrate(void)
{
    const unsigned long long n = 1u << 20;

    compute_ns = 0;
    for (int r = 0; r < 7; r++) {
        double t0 = now_us(), ns;
        (void)compute_steps(n);
        ns = (now_us() - t0) * 1e3 / (double)n;
        if (compute_ns == 0 || ns < compute_ns)
            compute_ns = ns;
    }
}

/* Work that takes us microseconds when it has its core to itself. */
static void compute_for(double us)
{
    (void)compute_steps((unsigned long long)(us * 1e3 / compute_ns));
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* 'e': both ranks receive and send; 'r': rank 0 receives; 's': rank 0 sends. */
static char mode = 'e';

static double exchange(int rank, char *sbuf, char *rbuf, size_t size, double compute_us)
{
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int recv = mode == 'e' || (mode == 'r') == (rank == 0);
    int send = mode == 'e' || (mode == 's') == (rank == 0);
    double t0;

    MPI_Sendrecv(NULL, 0, MPI_BYTE, 1 - rank, 2, NULL, 0, MPI_BYTE, 1 - rank, 2, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    t0 = now_us();
    if (recv)
        MPI_Irecv(rbuf, (int)size, MPI_BYTE, 1 - rank, 1, MPI_COMM_WORLD, &r[0]);
    if (send)
        MPI_Isend(sbuf, (int)size, MPI_BYTE, 1 - rank, 1, MPI_COMM_WORLD, &r[1]);
    if (compute_us > 0 && rank == 0)
        compute_for(compute_us);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    return now_us() - t0;
}

int main(int argc, char **argv)
{
    size_t sizes[32];
    int n_sizes = 0, iters = 50, rank, nranks, c;
    char *list = "65536,262144,1048576,4194304,16777216";
    size_t max = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    while ((c = getopt(argc, argv, "s:n:m:")) != -1) {
        if (c == 's')
            list = optarg;
        else if (c == 'n')
            iters = atoi(optarg);
        else if (c == 'm')
            mode = strcmp(optarg, "recv") == 0 ? 'r' : strcmp(optarg, "send") == 0 ? 's'
                 : strcmp(optarg, "exchange") == 0 ? 'e' : '?';
    }
    for (char *t = strtok(list, ","); t != NULL && n_sizes < 32; t = strtok(NULL, ",")) {
        sizes[n_sizes] = strtoull(t, NULL, 10);
        max = sizes[n_sizes] > max ? sizes[n_sizes] : max;
        n_sizes++;
    }
    if (nranks != 2 || iters < 1 || n_sizes == 0 || max == 0 || mode == '?') {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 overlap [-s SIZE[,SIZE...]] [-n ITERS] [-m exchange|recv|send]\n");
        MPI_Finalize();
        return 2;
    }
    char *sbuf = malloc(max), *rbuf = malloc(max);
    double *v = malloc((size_t)iters * sizeof(double));
    memset(sbuf, 1, max);
    memset(rbuf, 2, max);
    for (int k = 0; k < n_sizes; k++) {
        double x, t;
        for (int i = -(iters / 10 + 1); i < iters; i++) {
            double d = exchange(rank, sbuf, rbuf, sizes[k], 0);
            if (i >= 0)
                v[i] = d;
        }
        x = median(v, iters);
        MPI_Bcast(&x, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0)
            calibrate();
        for (int i = 0; i < iters; i++)
            v[i] = exchange(rank, sbuf, rbuf, sizes[k], x);
        t = median(v, iters);
        if (rank == 0) {
            printf("overlap,%zu,%d,%.1f,%.1f,%.1f\n", sizes[k], iters, 100.0 * (1.0 - (t - x) / x), x,
                   t);
            fflush(stdout);
        }
    }
    free(v);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
