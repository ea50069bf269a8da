/*
 * Floods of unexpected messages:
 *  - rank 1 sends 100000 small messages (MPI_Send, 8 to 64 bytes) to rank
 *    0, which sleeps before posting anything, then receives them all in
 *    order (exact source and tag, then any tag);
 *  - every other rank floods rank 0 at once; rank 0 receives with
 *    MPI_ANY_SOURCE and checks the order per source;
 *  - more unexpected bytes than the provider's bound on unexpected data
 *    (TMX_UNEXPECTED_MAX, 64 MiB by default): 1500 MPI_Isend of 60000
 *    bytes (eager size, 90 MB in all) with distinct tags to a receiver
 *    that sleeps, then receives them in the REVERSE order of the tags.
 *    This is correct MPI (every send is matched by a posted receive), so
 *    it must complete, whatever flow control the transport does;
 *  - cross (3 ranks or more): ranks 2.. flood rank 0 with blocking
 *    MPI_Send (more than the bound in all), rank 1 sends one message that
 *    rank 0 receives first. A safe program: it needs no buffering.
 * Argument: one, all, bound [N SIZE], cross [N SIZE SIZE1] runs only that part.
 */
#include "mpi_check.h"

#define FLOOD 100000

static void flood_one(void)
{
    unsigned char b[64];

    if (mc_rank == 1) {
        for (int i = 0; i < FLOOD; i++) {
            size_t s = 8 + (size_t)(i % 57);
            memcpy(b, &i, sizeof(i));
            mc_fill(b + 4, s - 4, (uint64_t)i);
            MC_CALL(MPI_Send(b, (int)s, MPI_BYTE, 0, i < FLOOD / 2 ? 1 : 2, MPI_COMM_WORLD));
        }
    } else if (mc_rank == 0) {
        sleep(2);
        for (int i = 0; i < FLOOD; i++) {
            MPI_Status st;
            int v;
            size_t s = 8 + (size_t)(i % 57);
            if (i < FLOOD / 2)
                MC_CALL(MPI_Recv(b, 64, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &st));
            else
                MC_CALL(MPI_Recv(b, 64, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            mc_status("flood", &st, 1, i < FLOOD / 2 ? 1 : 2, s);
            memcpy(&v, b, sizeof(v));
            if (v != i)
                mc_fail("flood: message %d carries %d", i, v);
            mc_check("flood", b + 4, s - 4, (uint64_t)i);
        }
    }
}

static void flood_all(void)
{
    int per = 40000 / (mc_size - 1);

    if (mc_rank != 0) {
        for (int i = 0; i < per; i++) {
            int m[2] = {mc_rank, i};
            MC_CALL(MPI_Send(m, 2, MPI_INT, 0, 3, MPI_COMM_WORLD));
        }
    } else {
        int *next = calloc((size_t)mc_size, sizeof(int));
        sleep(1);
        for (int k = 0; k < per * (mc_size - 1); k++) {
            int m[2];
            MPI_Status st;
            MC_CALL(MPI_Recv(m, 2, MPI_INT, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &st));
            if (m[0] != st.MPI_SOURCE || m[1] != next[m[0]])
                mc_fail("flood_all: from %d (source %d) message %d, expected %d", m[0], st.MPI_SOURCE, m[1],
                        next[m[0]]);
            next[m[0]]++;
        }
        free(next);
    }
}

static void over_bound(int n, size_t s)
{
    if (mc_rank == 1) {
        MPI_Request *q = mc_alloc(sizeof(*q) * (size_t)n);
        unsigned char **b = mc_alloc(sizeof(*b) * (size_t)n);
        for (int i = 0; i < n; i++) {
            b[i] = mc_alloc(s);
            mc_fill(b[i], s, (uint64_t)i * 3 + 1);
            MC_CALL(MPI_Isend(b[i], (int)s, MPI_BYTE, 0, 10 + i, MPI_COMM_WORLD, &q[i]));
        }
        MC_CALL(MPI_Waitall(n, q, MPI_STATUSES_IGNORE));
        for (int i = 0; i < n; i++)
            free(b[i]);
        free(b);
        free(q);
    } else if (mc_rank == 0) {
        unsigned char *in = mc_alloc(s);
        sleep(2);
        for (int i = n - 1; i >= 0; i--) {
            MPI_Status st;
            MC_CALL(MPI_Recv(in, (int)s, MPI_BYTE, 1, 10 + i, MPI_COMM_WORLD, &st));
            mc_status("over bound", &st, 1, 10 + i, s);
            mc_check("over bound", in, s, (uint64_t)i * 3 + 1);
            if (i % 500 == 0 || getenv("EDGE_VERBOSE"))
                printf("mpi_edge_flood: over bound: tag %d received\n", 10 + i), fflush(stdout);
        }
        free(in);
    }
}

/* A safe program (it needs no buffering at all): ranks 2.. send n
 * messages of s bytes each to rank 0 with blocking MPI_Send; rank 1,
 * later, sends one message of s1 bytes; rank 0 receives rank 1's message
 * first, then the others in order. With zero buffering the senders of
 * rank 2.. just wait in MPI_Send; rank 1's send and rank 0's posted
 * receive match and must complete (MPI 3.1, 3.7.4, progress). */
static void cross(int n, size_t s, size_t s1)
{
    unsigned char *b = mc_alloc(s > s1 ? s : s1);

    if (mc_size < 3)
        return;
    if (mc_rank >= 2) {
        for (int i = 0; i < n; i++) {
            mc_fill(b, s, (uint64_t)mc_rank << 32 | (uint64_t)i);
            MC_CALL(MPI_Send(b, (int)s, MPI_BYTE, 0, 20, MPI_COMM_WORLD));
        }
    } else if (mc_rank == 1) {
        sleep(1);
        mc_fill(b, s1, 999);
        MC_CALL(MPI_Send(b, (int)s1, MPI_BYTE, 0, 21, MPI_COMM_WORLD));
    } else {
        MPI_Status st;
        MC_CALL(MPI_Recv(b, (int)s1, MPI_BYTE, 1, 21, MPI_COMM_WORLD, &st));
        mc_status("cross: rank 1's message", &st, 1, 21, s1);
        mc_check("cross: rank 1's message", b, s1, 999);
        if (getenv("EDGE_VERBOSE"))
            printf("mpi_edge_flood: cross: rank 1's message received\n"), fflush(stdout);
        for (int r = 2; r < mc_size; r++)
            for (int i = 0; i < n; i++) {
                MC_CALL(MPI_Recv(b, (int)s, MPI_BYTE, r, 20, MPI_COMM_WORLD, &st));
                mc_status("cross", &st, r, 20, s);
                mc_check("cross", b, s, (uint64_t)r << 32 | (uint64_t)i);
            }
    }
    free(b);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : "";

    mc_init(&argc, &argv, "mpi_edge_flood");
    alarm(110);
    if (mc_size < 2)
        mc_fail("needs 2 ranks");
    if (!*only || strcmp(only, "one") == 0) {
        flood_one();
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
        if (mc_rank == 0)
            printf("mpi_edge_flood: one ok\n"), fflush(stdout);
    }
    if (!*only || strcmp(only, "all") == 0) {
        flood_all();
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
        if (mc_rank == 0)
            printf("mpi_edge_flood: all ok\n"), fflush(stdout);
    }
    if (!*only || strcmp(only, "bound") == 0) {
        over_bound(argc > 2 ? atoi(argv[2]) : 1500, argc > 3 ? (size_t)atol(argv[3]) : 60000);
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    }
    if (!*only || strcmp(only, "cross") == 0) {
        cross(argc > 2 ? atoi(argv[2]) : 2500 / (mc_size - 1), argc > 3 ? (size_t)atol(argv[3]) : 60000,
              argc > 4 ? (size_t)atol(argv[4]) : 4000);
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    }
    mc_finish();
    return 0;
}
