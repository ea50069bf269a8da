/*
 * MPI_Cancel of posted receives of every size, including ones whose
 * message may just have arrived (the partner sends at the same moment):
 * either the receive was cancelled (MPI_Test_cancelled true, and the
 * message is then received by a second receive) or it completed with the
 * whole message; never both, never neither, never a hang. Also receives
 * cancelled after an MPI_Test, with MPI_ANY_SOURCE, and MPI_Request_free
 * of active sends (eager and rendezvous) whose messages must still arrive
 * intact, the buffers being kept until the receiver says so.
 */
#include "mpi_check.h"

static const size_t sizes[] = {0, 1, 512, 513, 8192, 8193, 65535, 65536, 65537, 131073, 1 << 20, 4 << 20};
#define NS (int)(sizeof(sizes) / sizeof(sizes[0]))

static uint64_t seed_of(int from, int k, int round)
{
    return mc_mix((uint64_t)from << 32 ^ (uint64_t)k << 16 ^ (uint64_t)round);
}

/* The low rank sends; the high rank posts a receive, then cancels it
 * after a varying delay, racing the arrival. */
static void race(int peer, int low, int rounds)
{
    for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < NS; k++) {
            size_t s = sizes[k];
            int tag = k, go = round;
            unsigned char *b = mc_alloc(s);
            if (low) {
                mc_fill(b, s, seed_of(mc_rank, k, round));
                MC_CALL(MPI_Recv(&go, 1, MPI_INT, peer, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                if (round % 4 == 1)
                    usleep(50);
                MC_CALL(MPI_Send(b, (int)s, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            } else {
                MPI_Request q;
                MPI_Status st;
                int c = -1, flag = 0;
                memset(b, 0, s);
                MC_CALL(MPI_Irecv(b, (int)s, MPI_BYTE, round % 2 ? MPI_ANY_SOURCE : peer, tag, MPI_COMM_WORLD, &q));
                MC_CALL(MPI_Send(&go, 1, MPI_INT, peer, 999, MPI_COMM_WORLD));
                if (round % 3 == 0)
                    MC_CALL(MPI_Test(&q, &flag, &st));
                if (round % 5 == 2)
                    usleep((useconds_t)(round * 7 % 200));
                if (!flag) {
                    MC_CALL(MPI_Cancel(&q));
                    MC_CALL(MPI_Wait(&q, &st));
                }
                MC_CALL(MPI_Test_cancelled(&st, &c));
                if (c) {
                    MC_CALL(MPI_Recv(b, (int)s, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                }
                mc_status(c ? "race: after cancel" : "race: not cancelled", &st, peer, tag, s);
                mc_check(c ? "race: after cancel" : "race: not cancelled", b, s, seed_of(peer, k, round));
            }
            free(b);
        }
    }
}

/* Cancel receives that nothing will match, of every size, many at once;
 * and one matched by Iprobe first. */
static void idle(void)
{
    MPI_Request q[NS];
    unsigned char *b[NS];

    for (int k = 0; k < NS; k++) {
        b[k] = mc_alloc(sizes[k]);
        MC_CALL(MPI_Irecv(b[k], (int)sizes[k], MPI_BYTE, k % 2 ? MPI_ANY_SOURCE : (mc_rank + 1) % mc_size,
                          k % 3 ? 12345 : MPI_ANY_TAG, MPI_COMM_WORLD, &q[k]));
    }
    for (int k = NS - 1; k >= 0; k--) {
        MPI_Status st;
        int c = 0;
        MC_CALL(MPI_Cancel(&q[k]));
        MC_CALL(MPI_Wait(&q[k], &st));
        MC_CALL(MPI_Test_cancelled(&st, &c));
        if (!c)
            mc_fail("idle receive %d (size %zu) not cancelled: source %d tag %d", k, sizes[k], st.MPI_SOURCE, st.MPI_TAG);
        free(b[k]);
    }
}

/* MPI_Request_free of active sends; the receiver receives them late and
 * then tells the sender the buffers may go. */
static void request_free(int peer, int low)
{
    unsigned char *b[NS];

    if (low) {
        for (int k = 0; k < NS; k++) {
            MPI_Request q;
            b[k] = mc_alloc(sizes[k]);
            mc_fill(b[k], sizes[k], seed_of(mc_rank, k, 77));
            MC_CALL(MPI_Isend(b[k], (int)sizes[k], MPI_BYTE, peer, 500 + k, MPI_COMM_WORLD, &q));
            MC_CALL(MPI_Request_free(&q));
            if (q != MPI_REQUEST_NULL)
                mc_fail("Request_free did not set MPI_REQUEST_NULL");
        }
        MC_CALL(MPI_Recv(NULL, 0, MPI_BYTE, peer, 599, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int k = 0; k < NS; k++)
            free(b[k]);
    } else {
        usleep(20000);
        for (int k = NS - 1; k >= 0; k--) {
            MPI_Status st;
            b[k] = mc_alloc(sizes[k]);
            MC_CALL(MPI_Recv(b[k], (int)sizes[k], MPI_BYTE, peer, 500 + k, MPI_COMM_WORLD, &st));
            mc_status("Request_free'd send", &st, peer, 500 + k, sizes[k]);
            mc_check("Request_free'd send", b[k], sizes[k], seed_of(peer, k, 77));
            free(b[k]);
        }
        MC_CALL(MPI_Send(NULL, 0, MPI_BYTE, peer, 599, MPI_COMM_WORLD));
    }
}

/* A receive freed with MPI_Request_free while posted, then its message
 * sent: it is received into the buffer (which stays valid), and the
 * next message with that tag goes to the next receive. */
static void recv_free(int peer, int low)
{
    int v = -1, w = -1;

    if (low) {
        int a = 11, c = 22;
        MC_CALL(MPI_Recv(NULL, 0, MPI_BYTE, peer, 698, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MC_CALL(MPI_Send(&a, 1, MPI_INT, peer, 700, MPI_COMM_WORLD));
        MC_CALL(MPI_Send(&c, 1, MPI_INT, peer, 700, MPI_COMM_WORLD));
    } else {
        MPI_Request q;
        MC_CALL(MPI_Irecv(&v, 1, MPI_INT, peer, 700, MPI_COMM_WORLD, &q));
        MC_CALL(MPI_Request_free(&q));
        MC_CALL(MPI_Send(NULL, 0, MPI_BYTE, peer, 698, MPI_COMM_WORLD));
        MC_CALL(MPI_Recv(&w, 1, MPI_INT, peer, 700, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (w != 22)
            mc_fail("receive after a freed receive got %d, expected 22", w);
        for (int i = 0; i < 1000 && v != 11; i++)
            usleep(1000);
        if (v != 11)
            mc_fail("freed receive's buffer holds %d, expected 11", v);
    }
}

int main(int argc, char **argv)
{
    int peer, low;

    mc_init(&argc, &argv, "mpi_edge_cancel");
    alarm(110);
    peer = mc_rank ^ 1;
    low = !(mc_rank & 1);
    idle();
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (peer < mc_size) {
        race(peer, low, 40);
        if (mc_rank == 0)
            printf("mpi_edge_cancel: race ok\n"), fflush(stdout);
        request_free(peer, low);
        recv_free(peer, low);
    }
    idle();
    mc_finish();
    return 0;
}
