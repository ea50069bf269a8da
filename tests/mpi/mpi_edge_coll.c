/*
 * Collectives over the provider (coll tuned and basic on pml cm), each
 * result checked exactly (integer-valued doubles):
 *  - MPI_Allreduce of 1 to 4M doubles (sizes crossing the eager limit and
 *    the algorithm switches), MPI_SUM and MPI_MAX, in place and not;
 *  - MPI_Alltoallv with uneven counts, zeros included;
 *  - MPI_Bcast of 64 MiB from a non-zero root;
 *  - MPI_Reduce_scatter with uneven counts (some zero);
 *  - MPI_Gatherv with uneven counts and displacements in reverse order;
 *  - MPI_Iallreduce and MPI_Ibcast overlapped with point-to-point traffic
 *    on the same communicator (same tags as Open MPI's internal ones would
 *    not matter: user tags), completed in either order.
 */
#include "mpi_check.h"

/* Element i of the in-place MAX: the largest of every rank's value. */
static void max_check(const double *b, int n, int i)
{
    double want = 0;

    for (int r = 0; r < mc_size; r++)
        if ((double)((i * 7 + r * 13) % 101) > want)
            want = (double)((i * 7 + r * 13) % 101);
    if (b[i] != want)
        mc_fail("Allreduce MAX in place n=%d: [%d] = %g, expected %g", n, i, b[i], want);
}

static void allreduce(void)
{
    static const int ns[] = {1, 2, 3, 7, 8, 64, 1023, 1024, 1025, 8191, 8192, 8193, 16384, 65536, 131073, 1 << 20, 4 << 20};

    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        int n = ns[k];
        double *a = mc_alloc(sizeof(double) * (size_t)n), *b = mc_alloc(sizeof(double) * (size_t)n);
        for (int i = 0; i < n; i++)
            a[i] = (double)((i % 1000) + mc_rank * 3);
        MC_CALL(MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++) {
            double want = (double)(i % 1000) * mc_size + 3.0 * mc_size * (mc_size - 1) / 2;
            if (b[i] != want)
                mc_fail("Allreduce SUM n=%d: [%d] = %g, expected %g", n, i, b[i], want);
        }
        for (int i = 0; i < n; i++)
            b[i] = (double)((i * 7 + mc_rank * 13) % 101);
        MC_CALL(MPI_Allreduce(MPI_IN_PLACE, b, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++) {
            max_check(b, n, i);
            if (n > 100000 && i > 64)
                break; /* the rest spot-checked below */
        }
        if (n > 100000)
            for (int i = n - 64; i < n; i++)
                max_check(b, n, i);
        free(a);
        free(b);
    }
}

/* rank r sends cnt(r, d) ints to d: zero when (r + d) % 3 == 0 */
static int a2a_cnt(int r, int d)
{
    return (r + d) % 3 == 0 ? 0 : (r * 31 + d * 17) % 5000 + ((r + d) % 4 == 0 ? 20000 : 1);
}

static void alltoallv(void)
{
    int n = mc_size, *sc = mc_alloc(sizeof(int) * (size_t)n), *sd = mc_alloc(sizeof(int) * (size_t)n);
    int *rc = mc_alloc(sizeof(int) * (size_t)n), *rd = mc_alloc(sizeof(int) * (size_t)n), st = 0, rt = 0;
    int *sb, *rb;

    for (int d = 0; d < n; d++) {
        sc[d] = a2a_cnt(mc_rank, d);
        rc[d] = a2a_cnt(d, mc_rank);
    }
    /* send displacements in reverse peer order, with gaps */
    for (int d = n - 1; d >= 0; d--) {
        sd[d] = st;
        st += sc[d] + 3;
    }
    for (int d = 0; d < n; d++) {
        rd[d] = rt;
        rt += rc[d] + 1;
    }
    sb = mc_alloc(sizeof(int) * (size_t)st);
    rb = mc_alloc(sizeof(int) * (size_t)rt);
    for (int d = 0; d < n; d++)
        for (int i = 0; i < sc[d]; i++)
            sb[sd[d] + i] = mc_rank * 1000000 + d * 10000 + i % 10000;
    for (int i = 0; i < rt; i++)
        rb[i] = -7;
    MC_CALL(MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, MPI_COMM_WORLD));
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < rc[s]; i++)
            if (rb[rd[s] + i] != s * 1000000 + mc_rank * 10000 + i % 10000)
                mc_fail("Alltoallv: from %d element %d of %d = %d", s, i, rc[s], rb[rd[s] + i]);
        if (rb[rd[s] + rc[s]] != -7)
            mc_fail("Alltoallv: gap after block from %d written", s);
    }
    free(sb);
    free(rb);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

static void bcast(void)
{
    size_t len = 64u << 20;
    int root = mc_size - 1;
    unsigned char *b = mc_alloc(len);

    if (mc_rank == root)
        mc_fill(b, len, 4242);
    else
        memset(b, 0, len);
    MC_CALL(MPI_Bcast(b, (int)len, MPI_BYTE, root, MPI_COMM_WORLD));
    mc_check("Bcast 64 MiB", b, len, 4242);
    /* odd size, root 0 */
    mc_fill(b, 1000003, 77 + (mc_rank != 0));
    MC_CALL(MPI_Bcast(b, 1000003, MPI_BYTE, 0, MPI_COMM_WORLD));
    mc_check("Bcast 1000003", b, 1000003, 77);
    free(b);
}

static void reduce_scatter(void)
{
    int n = mc_size, *rc = mc_alloc(sizeof(int) * (size_t)n), tot = 0;
    long *a, *b;

    for (int r = 0; r < n; r++) {
        rc[r] = r % 3 == 1 ? 0 : 1000 * r + 7 + (r == 0 ? 70000 : 0);
        tot += rc[r];
    }
    a = mc_alloc(sizeof(long) * (size_t)tot);
    b = mc_alloc(sizeof(long) * (size_t)(rc[mc_rank] + 1));
    for (int i = 0; i < tot; i++)
        a[i] = (long)i * (mc_rank + 1);
    MC_CALL(MPI_Reduce_scatter(a, b, rc, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    {
        int off = 0;
        long f = (long)n * (n + 1) / 2;
        for (int r = 0; r < mc_rank; r++)
            off += rc[r];
        for (int i = 0; i < rc[mc_rank]; i++)
            if (b[i] != (long)(off + i) * f)
                mc_fail("Reduce_scatter: [%d] = %ld, expected %ld", i, b[i], (long)(off + i) * f);
    }
    free(a);
    free(b);
    free(rc);
}

static void gatherv(void)
{
    int n = mc_size, root = n / 2, my = (mc_rank * 7919) % 30000 + (mc_rank == 1 ? 0 : 1);
    int *rc = NULL, *rd = NULL, *rb = NULL, tot = 0;
    int *sb = mc_alloc(sizeof(int) * (size_t)(my + 1));

    if (mc_rank == 1)
        my = 0;
    for (int i = 0; i < my; i++)
        sb[i] = mc_rank * 100000 + i;
    if (mc_rank == root) {
        rc = mc_alloc(sizeof(int) * (size_t)n);
        rd = mc_alloc(sizeof(int) * (size_t)n);
        for (int r = 0; r < n; r++) {
            rc[r] = r == 1 ? 0 : (r * 7919) % 30000 + 1;
            tot += rc[r] + 2;
        }
        for (int r = n - 1, off = 0; r >= 0; r--) {
            rd[r] = off;
            off += rc[r] + 2;
        }
        rb = mc_alloc(sizeof(int) * (size_t)tot);
        for (int i = 0; i < tot; i++)
            rb[i] = -1;
    }
    MC_CALL(MPI_Gatherv(sb, my, MPI_INT, rb, rc, rd, MPI_INT, root, MPI_COMM_WORLD));
    if (mc_rank == root) {
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < rc[r]; i++)
                if (rb[rd[r] + i] != r * 100000 + i)
                    mc_fail("Gatherv: from %d [%d] = %d", r, i, rb[rd[r] + i]);
            if (rb[rd[r] + rc[r]] != -1 || rb[rd[r] + rc[r] + 1] != -1)
                mc_fail("Gatherv: gap after %d written", r);
        }
        free(rc);
        free(rd);
        free(rb);
    }
    free(sb);
}

/* Nonblocking collectives overlapped with point-to-point on the same
 * communicator. */
static void overlap(void)
{
    int n = 1 << 18, next = (mc_rank + 1) % mc_size, prev = (mc_rank + mc_size - 1) % mc_size;
    double *a = mc_alloc(sizeof(double) * (size_t)n), *b = mc_alloc(sizeof(double) * (size_t)n);
    unsigned char *out = mc_alloc(200000), *in = mc_alloc(200000);
    int *bc = mc_alloc(sizeof(int) * 50000);

    for (int round = 0; round < 10; round++) {
        MPI_Request q[4];
        size_t len = round % 2 ? 200000 : 100;
        for (int i = 0; i < n; i++)
            a[i] = (double)(i % 97 + mc_rank + round);
        if (mc_rank == round % mc_size)
            for (int i = 0; i < 50000; i++)
                bc[i] = i * 3 + round;
        MC_CALL(MPI_Iallreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &q[0]));
        mc_fill(out, len, (uint64_t)(mc_rank * 100 + round));
        MC_CALL(MPI_Irecv(in, (int)len, MPI_BYTE, MPI_ANY_SOURCE, round, MPI_COMM_WORLD, &q[1]));
        MC_CALL(MPI_Isend(out, (int)len, MPI_BYTE, next, round, MPI_COMM_WORLD, &q[2]));
        MC_CALL(MPI_Ibcast(bc, 50000, MPI_INT, round % mc_size, MPI_COMM_WORLD, &q[3]));
        if (round % 3 == 0) {
            MC_CALL(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
        } else {
            for (int k = 3; k >= 0; k--)
                MC_CALL(MPI_Wait(&q[k], MPI_STATUS_IGNORE));
        }
        for (int i = 0; i < n; i++) {
            double want = (double)(i % 97 + round) * mc_size + (double)mc_size * (mc_size - 1) / 2;
            if (b[i] != want)
                mc_fail("Iallreduce round %d: [%d] = %g, expected %g", round, i, b[i], want);
        }
        mc_check("overlapped p2p", in, len, (uint64_t)(prev * 100 + round));
        for (int i = 0; i < 50000; i++)
            if (bc[i] != i * 3 + round)
                mc_fail("Ibcast round %d: [%d] = %d", round, i, bc[i]);
    }
    free(a);
    free(b);
    free(in);
    free(out);
    free(bc);
}

int main(int argc, char **argv)
{
    mc_init(&argc, &argv, "mpi_edge_coll");
    alarm(110);
    allreduce();
    if (mc_rank == 0)
        printf("mpi_edge_coll: allreduce ok\n"), fflush(stdout);
    alltoallv();
    bcast();
    if (mc_rank == 0)
        printf("mpi_edge_coll: bcast ok\n"), fflush(stdout);
    reduce_scatter();
    gatherv();
    overlap();
    mc_finish();
    return 0;
}
