/*
 * Matched probes between pairs (2k, 2k+1): the low rank sends messages of
 * eager and rendezvous sizes on several tags, in two rounds; the high
 * rank takes them by MPI_Mprobe + MPI_Mrecv (any source, any tag) and by
 * MPI_Improbe + MPI_Imrecv (exact), checks status and payload, and that a
 * matched message is no longer seen by MPI_Iprobe. Then the roles swap.
 * MPI_PROC_NULL gives MPI_MESSAGE_NO_PROC. An odd last rank only joins.
 */
#include "mpi_check.h"

#define MP_PER_ROUND 12
static const size_t mp_sizes[] = {0, 7, 4096, 65536, (1 << 20) + 3};
#define MP_NSIZES (sizeof(mp_sizes) / sizeof(mp_sizes[0]))

static uint64_t mp_seed(int from, int i)
{
    return mc_mix((uint64_t)from << 32 ^ (uint64_t)i);
}

static size_t mp_len(int i)
{
    return mp_sizes[(size_t)i % MP_NSIZES];
}

static void mp_send(int peer)
{
    MPI_Request q[MP_PER_ROUND];
    unsigned char *b[MP_PER_ROUND];

    for (int i = 0; i < MP_PER_ROUND; i++) {
        b[i] = mc_alloc(mp_len(i));
        mc_fill(b[i], mp_len(i), mp_seed(mc_rank, i));
        MC_CALL(MPI_Isend(b[i], (int)mp_len(i), MPI_BYTE, peer, i, MPI_COMM_WORLD, &q[i]));
    }
    MC_CALL(MPI_Waitall(MP_PER_ROUND, q, MPI_STATUSES_IGNORE));
    for (int i = 0; i < MP_PER_ROUND; i++)
        free(b[i]);
}

/* Message i, by Mprobe (any source, any tag) or Improbe (exact). */
static void mp_take(int peer, int i)
{
    MPI_Message m = MPI_MESSAGE_NULL;
    MPI_Status st;
    MPI_Request q;
    unsigned char *b = mc_alloc(mp_len(i));
    int flag = 0;

    if (i % 2 == 0) {
        MC_CALL(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &st));
    } else {
        while (!flag)
            MC_CALL(MPI_Improbe(peer, i, MPI_COMM_WORLD, &flag, &m, &st));
    }
    mc_status("mprobe", &st, peer, i, mp_len(i));
    MC_CALL(MPI_Iprobe(peer, i, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    if (flag)
        mc_fail("message %d still seen by Iprobe after it was matched", i);
    if (i % 3 == 0) {
        MC_CALL(MPI_Mrecv(b, (int)mp_len(i), MPI_BYTE, &m, &st));
    } else {
        MC_CALL(MPI_Imrecv(b, (int)mp_len(i), MPI_BYTE, &m, &q));
        MC_CALL(MPI_Wait(&q, &st));
    }
    if (m != MPI_MESSAGE_NULL)
        mc_fail("message handle not reset by the receive");
    mc_status("mrecv", &st, peer, i, mp_len(i));
    mc_check("mrecv payload", b, mp_len(i), mp_seed(peer, i));
    free(b);
}

static void mp_round(int sender, int peer)
{
    if (sender) {
        mp_send(peer);
        return;
    }
    for (int i = 0; i < MP_PER_ROUND; i++)
        mp_take(peer, i);
}

static void mp_proc_null(void)
{
    MPI_Message m;
    MPI_Status st;
    int count = -1;

    MC_CALL(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st));
    MC_CALL(MPI_Get_count(&st, MPI_BYTE, &count));
    if (m != MPI_MESSAGE_NO_PROC || st.MPI_SOURCE != MPI_PROC_NULL || count != 0)
        mc_fail("Mprobe of MPI_PROC_NULL: source %d count %d", st.MPI_SOURCE, count);
    MC_CALL(MPI_Mrecv(NULL, 0, MPI_BYTE, &m, &st));
}

int main(int argc, char **argv)
{
    int peer, low;

    mc_init(&argc, &argv, "mpi_mprobe");
    peer = mc_rank ^ 1;
    low = (mc_rank & 1) == 0;
    mp_proc_null();
    if (peer < mc_size) {
        for (int round = 0; round < 4; round++) {
            mp_round(low == (round % 2 == 0), peer);
            MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
        }
    } else {
        for (int round = 0; round < 4; round++)
            MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    }
    mc_intercomm_phase(MC_INTER_MPROBE); /* the same over an intercommunicator */
    mc_finish();
    return 0;
}
