/*
 * Point-to-point across an intercommunicator: the ranks split into two
 * halves joined by MPI_Intercomm_create; every rank sends to every rank of
 * the other half (8 B, 64 KiB and 1 MiB + 1, so eager and rendezvous),
 * which receives them once in order (exact source and tag) and once in a
 * shuffled order found by MPI_Probe / MPI_Iprobe on any source; then an
 * MPI_Issend and collectives on the intercommunicator and its merge.
 * Needs 2 ranks or more.
 */
#include "mpi_check.h"

static const size_t ic_sizes[] = {8, 64 * 1024, (1 << 20) + 1};
#define IC_NSIZES (sizeof(ic_sizes) / sizeof(ic_sizes[0]))

static uint64_t ic_seed(int low, int from, int to, int tag)
{
    return mc_mix((uint64_t)low << 48 ^ (uint64_t)from << 32 ^ (uint64_t)to << 16 ^ (uint64_t)tag);
}

/* Sends one message of each size to every remote rank (tags round * 10
 * + size index), all at once: the receiver takes them in any order. */
static void ic_send_all(MPI_Comm ic, int low, int me, int rsize, int round)
{
    int n = rsize * (int)IC_NSIZES;
    MPI_Request *q = mc_alloc(sizeof(*q) * (size_t)n);
    unsigned char **b = mc_alloc(sizeof(*b) * (size_t)n);

    for (int i = 0; i < n; i++) {
        int d = i / (int)IC_NSIZES, k = i % (int)IC_NSIZES, tag = round * 10 + k;
        b[i] = mc_alloc(ic_sizes[k]);
        mc_fill(b[i], ic_sizes[k], ic_seed(low, me, d, tag));
        MC_CALL(MPI_Isend(b[i], (int)ic_sizes[k], MPI_BYTE, d, tag, ic, &q[i]));
    }
    MC_CALL(MPI_Waitall(n, q, MPI_STATUSES_IGNORE));
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
    free(q);
}

static void ic_recv_one(MPI_Comm ic, int low, int me, int src, int tag, int probe)
{
    size_t len = ic_sizes[tag % 10];
    unsigned char *b = mc_alloc(len);
    MPI_Status st;
    int flag = 0;

    if (probe == 1) {
        MC_CALL(MPI_Probe(src, tag, ic, &st));
        mc_status("probe", &st, src, tag, len);
    } else if (probe == 2) {
        while (!flag)
            MC_CALL(MPI_Iprobe(src, tag, ic, &flag, &st));
        mc_status("iprobe", &st, src, tag, len);
    }
    MC_CALL(MPI_Recv(b, (int)len, MPI_BYTE, src, tag, ic, &st));
    mc_status("recv", &st, src, tag, len);
    mc_check("intercomm payload", b, len, ic_seed(!low, src, me, tag));
    free(b);
}

/* Round 0 in order; round 1 any source first (Probe), then a shuffled
 * exact order found by Iprobe. */
static void ic_recv_all(MPI_Comm ic, int low, int me, int rsize, int round)
{
    int n = rsize * (int)IC_NSIZES, *order = mc_alloc(sizeof(int) * (size_t)n);

    for (int i = 0; i < n; i++)
        order[i] = i;
    if (round == 1) {
        srand((unsigned)me * 7u + 1u);
        for (int i = n - 1; i > 0; i--) {
            int j = rand() % (i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    for (int i = 0; i < n; i++) {
        int src = order[i] / (int)IC_NSIZES, tag = round * 10 + order[i] % (int)IC_NSIZES;
        ic_recv_one(ic, low, me, src, tag, round == 0 ? 0 : 1 + (i & 1));
    }
    free(order);
}

static void ic_any_source(MPI_Comm ic, int low, int me, int rsize)
{
    MPI_Status st;
    int *seen = calloc((size_t)rsize, sizeof(int)), v = me;

    for (int d = 0; d < rsize; d++)
        MC_CALL(MPI_Send(&v, 1, MPI_INT, d, 50 + low, ic));
    for (int i = 0; i < rsize; i++) {
        MC_CALL(MPI_Probe(MPI_ANY_SOURCE, 50 + !low, ic, &st));
        MC_CALL(MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, 50 + !low, ic, &st));
        if (v != st.MPI_SOURCE || v < 0 || v >= rsize || seen[v]++)
            mc_fail("any source: got %d from %d", v, st.MPI_SOURCE);
    }
    free(seen);
}

static void ic_collectives(MPI_Comm ic, int low)
{
    MPI_Comm merged;
    int v = low ? 1 : 2, sum = 0, root;

    MC_CALL(MPI_Barrier(ic));
    root = low ? (mc_rank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    v = 4242;
    MC_CALL(MPI_Bcast(&v, 1, MPI_INT, root, ic));
    if (v != 4242)
        mc_fail("intercomm bcast got %d", v);
    MC_CALL(MPI_Intercomm_merge(ic, !low, &merged));
    v = 1;
    MC_CALL(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, merged));
    if (sum != mc_size)
        mc_fail("allreduce over the merged communicator gave %d", sum);
    MPI_Comm_free(&merged);
}

int main(int argc, char **argv)
{
    MPI_Comm half, ic;
    int low, me, rsize, v = 0;
    MPI_Request q;

    mc_init(&argc, &argv, "mpi_intercomm");
    if (mc_size < 2)
        mc_fail("needs 2 ranks or more");
    low = mc_rank < mc_size / 2;
    MC_CALL(MPI_Comm_split(MPI_COMM_WORLD, low, mc_rank, &half));
    MC_CALL(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, low ? mc_size / 2 : 0, 77, &ic));
    MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN);
    MPI_Comm_rank(ic, &me);
    MPI_Comm_remote_size(ic, &rsize);
    for (int round = 0; round < 2; round++) {
        if (low) {
            ic_send_all(ic, low, me, rsize, round);
            ic_recv_all(ic, low, me, rsize, round);
        } else {
            ic_recv_all(ic, low, me, rsize, round);
            ic_send_all(ic, low, me, rsize, round);
        }
    }
    ic_any_source(ic, low, me, rsize);
    if (me < rsize) {   /* an Issend to the same rank number across */
        MC_CALL(MPI_Issend(&me, 1, MPI_INT, me, 60, ic, &q));
        MC_CALL(MPI_Recv(&v, 1, MPI_INT, me, 60, ic, MPI_STATUS_IGNORE));
        MC_CALL(MPI_Wait(&q, MPI_STATUS_IGNORE));
        if (v != me)
            mc_fail("issend across got %d", v);
    }
    ic_collectives(ic, low);
    MPI_Comm_free(&ic);
    MPI_Comm_free(&half);
    mc_finish();
    return 0;
}
