/*
 * Many communicators: 100 MPI_Comm_dup and 100 MPI_Comm_split (by parity,
 * reversed key) of MPI_COMM_WORLD, alive together. On every one of them,
 * receives with the same tag (and with MPI_ANY_TAG / MPI_ANY_SOURCE) are
 * posted first; the messages are then sent in the reverse order of the
 * communicators, so a receive that matched across communicators gets the
 * wrong payload. Then messages unexpected on all communicators, received
 * in a shuffled communicator order. Then MPI_Comm_free of a communicator
 * with a receive still pending on it (legal: it completes later) while the
 * other communicators carry traffic, and communicators created and freed
 * in a loop (context ids reused) with traffic on each.
 */
#include "mpi_check.h"

#define NDUP 100
#define NCOMM (2 * NDUP)

static MPI_Comm comm[NCOMM];

static int64_t val(int c, int from, int to, int k)
{
    return ((int64_t)c << 40) | ((int64_t)from << 24) | ((int64_t)to << 8) | k;
}

static int partner(MPI_Comm c, int *rank, int *size)
{
    MC_CALL(MPI_Comm_rank(c, rank));
    MC_CALL(MPI_Comm_size(c, size));
    return (*rank + 1) % *size;
}

/* every rank of each communicator sends to the next one (ring) and
 * receives from the previous, tag 5, size len */
static void phase_posted(size_t len, int anysrc)
{
    MPI_Request *q = mc_alloc(sizeof(*q) * 2 * NCOMM);
    int64_t **in = mc_alloc(sizeof(*in) * NCOMM), **out = mc_alloc(sizeof(*out) * NCOMM);
    size_t n = len / sizeof(int64_t);

    for (int c = 0; c < NCOMM; c++) {
        int r, s, prev;
        partner(comm[c], &r, &s);
        prev = (r + s - 1) % s;
        in[c] = mc_alloc(n * sizeof(int64_t));
        MC_CALL(MPI_Irecv(in[c], (int)n, MPI_INT64_T, anysrc ? MPI_ANY_SOURCE : prev,
                          anysrc ? MPI_ANY_TAG : 5, comm[c], &q[c]));
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    for (int c = NCOMM - 1; c >= 0; c--) {
        int r, s, next = partner(comm[c], &r, &s);
        out[c] = mc_alloc(n * sizeof(int64_t));
        for (size_t i = 0; i < n; i++)
            out[c][i] = val(c, r, next, (int)(i & 0xff));
        MC_CALL(MPI_Isend(out[c], (int)n, MPI_INT64_T, next, 5, comm[c], &q[NCOMM + c]));
    }
    MC_CALL(MPI_Waitall(2 * NCOMM, q, MPI_STATUSES_IGNORE));
    for (int c = 0; c < NCOMM; c++) {
        int r, s, prev;
        partner(comm[c], &r, &s);
        prev = (r + s - 1) % s;
        for (size_t i = 0; i < n; i++)
            if (in[c][i] != val(c, prev, r, (int)(i & 0xff)))
                mc_fail("posted (len %zu any %d): comm %d word %zu is %llx, expected %llx", len, anysrc, c, i,
                        (unsigned long long)in[c][i], (unsigned long long)val(c, prev, r, (int)(i & 0xff)));
        free(in[c]);
        free(out[c]);
    }
    free(in);
    free(out);
    free(q);
}

static void phase_unexpected(size_t len)
{
    MPI_Request *q = mc_alloc(sizeof(*q) * NCOMM);
    int64_t **out = mc_alloc(sizeof(*out) * NCOMM), *in;
    size_t n = len / sizeof(int64_t);
    int order[NCOMM];
    uint64_t x = 99;

    for (int c = 0; c < NCOMM; c++) {
        int r, s, next = partner(comm[c], &r, &s);
        out[c] = mc_alloc(n * sizeof(int64_t));
        for (size_t i = 0; i < n; i++)
            out[c][i] = val(c, r, next, (int)(i & 0xff));
        MC_CALL(MPI_Isend(out[c], (int)n, MPI_INT64_T, next, 9, comm[c], &q[c]));
        order[c] = c;
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = NCOMM - 1; i > 0; i--) {
        int j, t;
        x = mc_mix(x);
        j = (int)(x % (uint64_t)(i + 1));
        t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    in = mc_alloc(n * sizeof(int64_t) + 8);
    for (int k = 0; k < NCOMM; k++) {
        int c = order[k], r, s, prev, cnt = -1;
        MPI_Status st;
        partner(comm[c], &r, &s);
        prev = (r + s - 1) % s;
        MC_CALL(MPI_Recv(in, (int)n + 1, MPI_INT64_T, MPI_ANY_SOURCE, MPI_ANY_TAG, comm[c], &st));
        MC_CALL(MPI_Get_count(&st, MPI_INT64_T, &cnt));
        if (st.MPI_SOURCE != prev || st.MPI_TAG != 9 || cnt != (int)n)
            mc_fail("unexpected: comm %d source %d tag %d count %d", c, st.MPI_SOURCE, st.MPI_TAG, cnt);
        for (size_t i = 0; i < n; i++)
            if (in[i] != val(c, prev, r, (int)(i & 0xff)))
                mc_fail("unexpected (len %zu): comm %d word %zu wrong", len, c, i);
    }
    MC_CALL(MPI_Waitall(NCOMM, q, MPI_STATUSES_IGNORE));
    for (int c = 0; c < NCOMM; c++)
        free(out[c]);
    free(in);
    free(out);
    free(q);
}

/* Receives pending on communicators that are then freed; traffic with
 * the same tag on the others meanwhile must not match them; then they
 * are cancelled. */
static void phase_free_pending(void)
{
    MPI_Request q[NDUP];
    int64_t in[NDUP], out[NDUP];
    int next = (mc_rank + 1) % mc_size, prev = (mc_rank + mc_size - 1) % mc_size;

    for (int c = 0; c < NDUP; c += 2) {
        MC_CALL(MPI_Irecv(&in[c], 1, MPI_INT64_T, prev, 3, comm[c], &q[c]));
        MC_CALL(MPI_Comm_free(&comm[c]));
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    /* traffic on the odd ones, same tag */
    for (int c = 1; c < NDUP; c += 2) {
        out[c] = val(c, mc_rank, next, 1);
        MC_CALL(MPI_Sendrecv(&out[c], 1, MPI_INT64_T, next, 3, &in[c], 1, MPI_INT64_T, prev, 3, comm[c],
                             MPI_STATUS_IGNORE));
        if (in[c] != val(c, prev, mc_rank, 1))
            mc_fail("free_pending: traffic on comm %d got %llx", c, (unsigned long long)in[c]);
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    /* every rank freed its copy: nobody can send on them; the pending
     * receives end by MPI_Cancel */
    for (int c = 0; c < NDUP; c += 2) {
        MPI_Status st;
        int flag = 0;
        MC_CALL(MPI_Cancel(&q[c]));
        MC_CALL(MPI_Wait(&q[c], &st));
        MC_CALL(MPI_Test_cancelled(&st, &flag));
        if (!flag)
            mc_fail("free_pending: receive on freed comm %d completed with %llx", c, (unsigned long long)in[c]);
    }
    for (int c = 1; c < NDUP; c += 2)
        MC_CALL(MPI_Comm_free(&comm[c]));
}

/* A receive posted on a communicator, the communicator freed by the
 * receiver only; the sender sends on its copy; the receive completes. */
static void phase_free_then_recv(void)
{
    MPI_Comm d;
    int64_t v = 0, w;
    MPI_Request q;
    int next = (mc_rank + 1) % mc_size, prev = (mc_rank + mc_size - 1) % mc_size;

    for (int round = 0; round < 50; round++) {
        MC_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &d));
        MC_CALL(MPI_Irecv(&v, 1, MPI_INT64_T, prev, 0, d, &q));
        w = val(round, mc_rank, next, 2);
        MC_CALL(MPI_Send(&w, 1, MPI_INT64_T, next, 0, d));
        MC_CALL(MPI_Comm_free(&d));
        MC_CALL(MPI_Wait(&q, MPI_STATUS_IGNORE));
        if (v != val(round, prev, mc_rank, 2))
            mc_fail("free_then_recv round %d: %llx", round, (unsigned long long)v);
    }
}

int main(int argc, char **argv)
{
    static const size_t lens[] = {8, 4096, 70000};

    mc_init(&argc, &argv, "mpi_edge_comms");
    alarm(110);
    for (int c = 0; c < NDUP; c++) {
        MC_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &comm[c]));
        MC_CALL(MPI_Comm_split(MPI_COMM_WORLD, mc_rank % 2, mc_size - mc_rank + c, &comm[NDUP + c]));
        MC_CALL(MPI_Comm_set_errhandler(comm[c], MPI_ERRORS_RETURN));
        MC_CALL(MPI_Comm_set_errhandler(comm[NDUP + c], MPI_ERRORS_RETURN));
    }
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        phase_posted(lens[l], 0);
        phase_posted(lens[l], 1);
        phase_unexpected(lens[l]);
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    }
    if (mc_rank == 0)
        printf("mpi_edge_comms: traffic on %d communicators ok\n", NCOMM), fflush(stdout);
    phase_free_pending();
    for (int c = NDUP; c < NCOMM; c++)
        MC_CALL(MPI_Comm_free(&comm[c]));
    phase_free_then_recv();
    mc_finish();
    return 0;
}
