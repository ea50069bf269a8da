/*
 * MPI_Finalize with messages still unexpected at the receiver: every rank
 * sends to the next eager messages (MPI_Send, which completed: 0 to 4000
 * bytes) and a buffered 4000-byte message (MPI_Bsend, buffer detached),
 * that the receiver never receives; each receives only
 * a part (the first message), probes that the rest arrived, and finalizes.
 * MPI_Finalize must return on every rank and the job exit 0 (MPI 3.1,
 * 8.7: a completed send whose message is never received is not pending
 * communication). Run with argument "abort": rank 0 calls MPI_Abort(7)
 * while the others are blocked in MPI_Recv, a rendezvous MPI_Send and
 * MPI_Barrier: the job must end (mpirun exit status non-zero) well within
 * the watchdog's time; "mpi_edge_finalize abort-ok" is printed by rank 0
 * just before.
 */
#include "mpi_check.h"

static const size_t sizes[] = {0, 8, 511, 512, 513, 1000, 4000}; /* eager everywhere (vader: 4 KiB) */
#define NS (int)(sizeof(sizes) / sizeof(sizes[0]))

int main(int argc, char **argv)
{
    int next, prev;
    unsigned char *b = NULL;

    mc_init(&argc, &argv, "mpi_edge_finalize");
    next = (mc_rank + 1) % mc_size;
    prev = (mc_rank + mc_size - 1) % mc_size;
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
        if (mc_rank == 0) {
            sleep(1);
            printf("mpi_edge_finalize abort-ok\n");
            fflush(stdout);
            MPI_Abort(MPI_COMM_WORLD, 7);
        } else if (mc_rank % 3 == 1) {
            int v;
            MPI_Recv(&v, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (mc_rank % 3 == 2) {
            b = mc_alloc(1 << 20);
            MPI_Send(b, 1 << 20, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
        }
        mc_fail("returned from a call blocked by the abort");
    }
    for (int k = 0; k < NS; k++) {
        b = mc_alloc(sizes[k]);
        mc_fill(b, sizes[k], (uint64_t)k);
        MC_CALL(MPI_Send(b, (int)sizes[k], MPI_BYTE, next, k, MPI_COMM_WORLD));
        free(b);
    }
    {
        int bs = 4000 + MPI_BSEND_OVERHEAD;
        void *bb = mc_alloc((size_t)bs);
        b = mc_alloc(4000);
        MC_CALL(MPI_Buffer_attach(bb, bs));
        MC_CALL(MPI_Bsend(b, 4000, MPI_BYTE, next, 99, MPI_COMM_WORLD));
        /* detaching waits until the buffered message is sent (eager
         * size: the receiver takes it unexpected without receiving it) */
        MC_CALL(MPI_Buffer_detach(&bb, &bs));
        free(bb);
        free(b);
    }
    b = mc_alloc(1);
    MC_CALL(MPI_Recv(b, 0, MPI_BYTE, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    free(b);
    for (int k = 1; k < NS; k++) {
        MPI_Status st;
        MC_CALL(MPI_Probe(prev, k, MPI_COMM_WORLD, &st));
        mc_status("unexpected at finalize", &st, prev, k, sizes[k]);
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (mc_rank == 0)
        printf("mpi_edge_finalize passed\n");
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
