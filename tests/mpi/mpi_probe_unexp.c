/*
 * MPI_Probe and MPI_Iprobe of messages that arrived unexpected: every
 * rank sends to every rank (itself included) messages of eager and
 * rendezvous sizes, a barrier lets them arrive, then each rank finds them
 * by Probe or Iprobe (exact source and tag, any source, any tag), checks
 * the status, receives from the source the probe named and checks the
 * payload. Iprobe of nothing must say so.
 */
#include "mpi_check.h"

static const size_t pu_sizes[] = {0, 24, 5000, 200000};
#define PU_NSIZES ((int)(sizeof(pu_sizes) / sizeof(pu_sizes[0])))

static uint64_t pu_seed(int from, int to, int tag)
{
    return mc_mix((uint64_t)from << 40 ^ (uint64_t)to << 20 ^ (uint64_t)tag);
}

static void pu_probe(int src, int tag, MPI_Status *st, int i)
{
    int flag = 0;

    if (i % 2 == 0) {
        MC_CALL(MPI_Probe(src, tag, MPI_COMM_WORLD, st));
        return;
    }
    while (!flag)
        MC_CALL(MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, st));
}

/* Receives the message a probe found, as the probe described it. */
static void pu_take(const MPI_Status *st)
{
    int tag = st->MPI_TAG, from = st->MPI_SOURCE, count = -1;
    size_t len = pu_sizes[tag % PU_NSIZES];
    unsigned char *b = mc_alloc(len);
    MPI_Status rs;

    MC_CALL(MPI_Get_count(st, MPI_BYTE, &count));
    if (from < 0 || from >= mc_size || count < 0 || (size_t)count != len)
        mc_fail("probe reported source %d tag %d count %d", from, tag, count);
    MC_CALL(MPI_Recv(b, (int)len, MPI_BYTE, from, tag, MPI_COMM_WORLD, &rs));
    mc_status("recv after probe", &rs, from, tag, len);
    mc_check("probed payload", b, len, pu_seed(from, mc_rank, tag));
    free(b);
}

int main(int argc, char **argv)
{
    int n, per = 2 * PU_NSIZES, flag = 1;
    MPI_Request *q;
    unsigned char **b;
    MPI_Status st;

    mc_init(&argc, &argv, "mpi_probe_unexp");
    n = mc_size * per;
    q = mc_alloc(sizeof(*q) * (size_t)n);
    b = mc_alloc(sizeof(*b) * (size_t)n);
    for (int i = 0; i < n; i++) {
        int d = i / per, tag = i % per;
        size_t len = pu_sizes[tag % PU_NSIZES];
        b[i] = mc_alloc(len);
        mc_fill(b[i], len, pu_seed(mc_rank, d, tag));
        MC_CALL(MPI_Isend(b[i], (int)len, MPI_BYTE, d, tag, MPI_COMM_WORLD, &q[i]));
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    /* exact source and tag for the first half of the tags */
    for (int s = 0; s < mc_size; s++)
        for (int tag = 0; tag < PU_NSIZES; tag++) {
            pu_probe(s, tag, &st, s + tag);
            mc_status("exact probe", &st, s, tag, pu_sizes[tag]);
            pu_take(&st);
        }
    /* then by source with any tag (two each), then by any source and tag */
    for (int i = 0; i < 2 * mc_size; i++) {
        pu_probe(i / 2, MPI_ANY_TAG, &st, i);
        if (st.MPI_SOURCE != i / 2 || st.MPI_TAG < PU_NSIZES)
            mc_fail("probe of source %d found source %d tag %d", i / 2, st.MPI_SOURCE, st.MPI_TAG);
        pu_take(&st);
    }
    for (int i = 0; i < n - 2 * mc_size - mc_size * PU_NSIZES; i++) {
        pu_probe(MPI_ANY_SOURCE, MPI_ANY_TAG, &st, i);
        if (st.MPI_TAG < PU_NSIZES)
            mc_fail("wildcard probe found tag %d, already received", st.MPI_TAG);
        pu_take(&st);
    }
    MC_CALL(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
    if (flag)
        mc_fail("Iprobe found source %d tag %d after all were received", st.MPI_SOURCE, st.MPI_TAG);
    MC_CALL(MPI_Waitall(n, q, MPI_STATUSES_IGNORE));
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
    free(q);
    mc_intercomm_phase(MC_INTER_PROBE); /* the same over an intercommunicator */
    mc_finish();
    return 0;
}
