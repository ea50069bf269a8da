/*
 * halo - the communication pattern of a molecular-dynamics step (LAMMPS's
 * Lennard-Jones benchmark in.lj): a 3-D domain decomposition (MPI_Dims_create
 * over the ranks, periodic), and per step a compute phase, then halo
 * exchanges with the 6 face neighbours (x, then y, then z, both directions,
 * each a MPI_Irecv/MPI_Send pair of a few KB, as LAMMPS's Comm::exchange and
 * borders do), then one MPI_Allreduce of a few doubles (thermodynamic output
 * and neighbour-list checks). Built by bench/oversub.sh with mpicc.
 *
 *   halo [-s STEPS] [-b HALO_BYTES] [-w COMPUTE_US]
 *
 * STEPS (default 500), bytes per face message (default 6144), and the
 * compute per step in microseconds of a floating-point loop calibrated at
 * start (default 600: 32000 atoms over 4 ranks). Every message carries a
 * stamp (step, direction, sender) that the receiver checks, and the
 * allreduce's sum is checked against the expected value, so a figure is
 * only printed for a run that exchanged what it should. Rank 0 prints
 *   halo,RANKS,STEPS,BYTES,COMPUTE_US,SECONDS
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile double halo_sink;

/* A loop of dependent multiply-adds, n iterations. */
static void compute(long n)
{
    double x = 1.0;

    for (long i = 0; i < n; i++)
        x = x * 0.999999 + 1e-7;
    halo_sink = x;
}

/* Iterations of compute() that take us microseconds on this core. */
static long calibrate(double us)
{
    long n = 1000000;
    double t0 = MPI_Wtime();

    compute(n);
    double per = (MPI_Wtime() - t0) / (double)n;
    return per > 0 ? (long)(us * 1e-6 / per) : n;
}

static void stamp(unsigned char *buf, int len, int step, int dir, int rank)
{
    uint32_t s[3] = {(uint32_t)step, (uint32_t)dir, (uint32_t)rank};

    memset(buf, (step + dir + rank) & 0xff, (size_t)len);
    memcpy(buf, s, sizeof(s));
}

static void check(const unsigned char *buf, int len, int step, int dir, int rank)
{
    uint32_t s[3];

    memcpy(s, buf, sizeof(s));
    if (s[0] != (uint32_t)step || s[1] != (uint32_t)dir || s[2] != (uint32_t)rank ||
        buf[len - 1] != ((step + dir + rank) & 0xff)) {
        fprintf(stderr, "halo: step %d dir %d: got stamp %u/%u/%u, expected from rank %d\n", step, dir,
                s[0], s[1], s[2], rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Exchanges with both neighbours along dim: receive from the lower one
 * what it sends up, and the other way. */
static void exchange(MPI_Comm cart, int dim, int step, int len, unsigned char *sbuf, unsigned char *rbuf)
{
    int lo, hi, me;

    MPI_Comm_rank(cart, &me);
    MPI_Cart_shift(cart, dim, 1, &lo, &hi);
    for (int way = 0; way < 2; way++) {
        int to = way == 0 ? hi : lo, from = way == 0 ? lo : hi, dir = dim * 2 + way;
        MPI_Request r;
        MPI_Irecv(rbuf, len, MPI_BYTE, from, dir, cart, &r);
        stamp(sbuf, len, step, dir, me);
        MPI_Send(sbuf, len, MPI_BYTE, to, dir, cart);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        check(rbuf, len, step, dir, from);
    }
}

int main(int argc, char **argv)
{
    int steps = 500, len = 6144, rank, size, dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1};
    double work_us = 600;
    MPI_Comm cart;

    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-s") == 0)
            steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-b") == 0)
            len = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-w") == 0)
            work_us = atof(argv[i + 1]);
    }
    if (len < 16)
        len = 16;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 3, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    long iters = calibrate(work_us);
    unsigned char *sbuf = malloc((size_t)len), *rbuf = malloc((size_t)len);
    MPI_Barrier(cart);
    double t0 = MPI_Wtime();
    for (int step = 0; step < steps; step++) {
        double v[4] = {1.0, (double)rank, (double)step, 0.5}, sum[4];
        compute(iters);
        for (int dim = 0; dim < 3; dim++)
            exchange(cart, dim, step, len, sbuf, rbuf);
        MPI_Allreduce(v, sum, 4, MPI_DOUBLE, MPI_SUM, cart);
        if (sum[0] != size || sum[1] != (double)size * (size - 1) / 2 || sum[2] != (double)step * size) {
            fprintf(stderr, "halo: step %d: allreduce gave %g %g %g\n", step, sum[0], sum[1], sum[2]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0)
        printf("halo,%d,%d,%d,%.0f,%.3f\n", size, steps, len, work_us, t);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
