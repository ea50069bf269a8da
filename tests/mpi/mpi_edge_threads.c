/*
 * MPI_THREAD_MULTIPLE (if granted; otherwise the program says so and
 * passes): NT threads per rank send and receive at once, around a ring
 * and to random peers, mixed sizes (eager and rendezvous):
 *  - thread t on its own duplicate of MPI_COMM_WORLD, same tags as the others;
 *  - thread t on MPI_COMM_WORLD itself with tags of its own, receiving with
 *    MPI_ANY_SOURCE (and its tag), probing with MPI_Iprobe first at times;
 *  - one thread doing MPI_Allreduce on a communicator of its own while the
 *    others carry point-to-point.
 */
#include "mpi_check.h"
#include <pthread.h>

#define NT 4
#define ROUNDS 200

static MPI_Comm tcomm[NT + 1];
static const size_t sizes[] = {0, 8, 600, 8200, 65537, 300000};
#define NS (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t seed_of(int from, int to, int t, int r)
{
    return mc_mix((uint64_t)from << 48 ^ (uint64_t)to << 32 ^ (uint64_t)t << 20 ^ (uint64_t)r);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    int next = (mc_rank + 1) % mc_size, prev = (mc_rank + mc_size - 1) % mc_size;
    unsigned char *out = mc_alloc(300000), *in = mc_alloc(300000);

    for (int r = 0; r < ROUNDS; r++) {
        size_t s = sizes[(r + t) % NS];
        MPI_Request q[2];
        MPI_Status st[2];
        /* own communicator, tag r % 7 (the same in every thread) */
        mc_fill(out, s, seed_of(mc_rank, next, t, r));
        MC_CALL(MPI_Irecv(in, (int)s, MPI_BYTE, prev, r % 7, tcomm[t], &q[0]));
        MC_CALL(MPI_Isend(out, (int)s, MPI_BYTE, next, r % 7, tcomm[t], &q[1]));
        MC_CALL(MPI_Waitall(2, q, st));
        mc_status("thread own comm", &st[0], prev, r % 7, s);
        mc_check("thread own comm", in, s, seed_of(prev, mc_rank, t, r));
        /* world, tag of this thread, any source */
        mc_fill(out, s, seed_of(mc_rank, next, t + 100, r));
        MC_CALL(MPI_Isend(out, (int)s, MPI_BYTE, next, 1000 + t, MPI_COMM_WORLD, &q[1]));
        if (r % 3 == 0) {
            int flag = 0;
            MPI_Status ps;
            while (!flag)
                MC_CALL(MPI_Iprobe(MPI_ANY_SOURCE, 1000 + t, MPI_COMM_WORLD, &flag, &ps));
            mc_status("thread probe", &ps, prev, 1000 + t, s);
        }
        MC_CALL(MPI_Recv(in, (int)s, MPI_BYTE, MPI_ANY_SOURCE, 1000 + t, MPI_COMM_WORLD, &st[0]));
        MC_CALL(MPI_Wait(&q[1], MPI_STATUS_IGNORE));
        mc_status("thread world", &st[0], prev, 1000 + t, s);
        mc_check("thread world", in, s, seed_of(prev, mc_rank, t + 100, r));
    }
    free(out);
    free(in);
    return NULL;
}

static void *reducer(void *arg)
{
    (void)arg;
    for (int r = 0; r < ROUNDS; r++) {
        long v[1000], w[1000];
        for (int i = 0; i < 1000; i++)
            v[i] = mc_rank + i + r;
        MC_CALL(MPI_Allreduce(v, w, 1000, MPI_LONG, MPI_SUM, tcomm[NT]));
        for (int i = 0; i < 1000; i++)
            if (w[i] != (long)mc_size * (i + r) + (long)mc_size * (mc_size - 1) / 2)
                mc_fail("reducer round %d: [%d] = %ld", r, i, w[i]);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = -1;
    pthread_t th[NT + 1];

    mc_name = "mpi_edge_threads";
    signal(SIGALRM, mc_watchdog);
    alarm(110);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &mc_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mc_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (mc_rank == 0)
            printf("mpi_edge_threads: MPI_THREAD_MULTIPLE not granted (%d): nothing to test\n", provided);
        mc_finish();
        return 0;
    }
    for (int t = 0; t <= NT; t++) {
        MC_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &tcomm[t]));
        MC_CALL(MPI_Comm_set_errhandler(tcomm[t], MPI_ERRORS_RETURN));
    }
    for (int t = 0; t < NT; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    pthread_create(&th[NT], NULL, reducer, NULL);
    for (int t = 0; t <= NT; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t <= NT; t++)
        MC_CALL(MPI_Comm_free(&tcomm[t]));
    if (mc_rank == 0)
        printf("mpi_edge_threads: %d threads x %d rounds ok\n", NT, ROUNDS), fflush(stdout);
    mc_finish();
    return 0;
}
