/*
 * Message sizes at every protocol boundary of the provider, each +-1
 * byte: 0, 1, the shm fast box (512), a cell (8 KiB +-64, byte by byte),
 * 16 KiB, 32 KiB, the eager limit (64 KiB), 128 KiB, 1 MiB, 16 MiB and
 * 64 MiB, plus UDP datagram sizes (1400 to 1500 B, 9000 B). For each size,
 * between the partners of a pair (rank ^ 1):
 *  - expected: a receive posted first (exact source and tag, into a buffer
 *    with guard bytes past the end), then the reply received with
 *    MPI_ANY_SOURCE / MPI_ANY_TAG into a larger buffer, MPI_Get_count checked;
 *  - unexpected: all sizes (up to 1 MiB) sent with MPI_Isend before the
 *    partner posts anything, then received in reverse order;
 *  - MPI_Sendrecv_replace around the ring of all ranks.
 * Payload checked byte by byte.
 */
#include "mpi_check.h"

#define GUARD 64
#define GUARD_BYTE 0xA5

static size_t *sz;
static int nsz;

static void add(size_t s)
{
    for (int i = 0; i < nsz; i++)
        if (sz[i] == s)
            return;
    sz[nsz++] = s;
}

static void build_sizes(int big)
{
    static const size_t base[] = {0, 1, 2, 7, 8, 9, 63, 64, 65, 255, 256, 257, 511, 512, 513,
                                  1023, 1024, 1025, 1399, 1400, 1401, 1448, 1449, 1450, 1471,
                                  1472, 1473, 1499, 1500, 1501, 4095, 4096, 4097, 8999, 9000,
                                  9001, 16383, 16384, 16385, 32767, 32768, 32769, 65471, 65472,
                                  65473, 65535, 65536, 65537, 131071, 131072, 131073, 262143,
                                  262144, 262145, 1048575, 1048576, 1048577};
    sz = mc_alloc(sizeof(*sz) * 1024);
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        add(base[i]);
    for (size_t s = 8192 - 64 - 2; s <= 8192 + 64 + 2; s++)
        add(s);
    for (size_t s = 8320 - 256; s <= 8320 + 8; s += 8)
        add(s);
    /* 16 KiB and 2 cells' worth of span parts */
    for (size_t s = 16192; s <= 16640; s += 32)
        add(s);
    if (big) {
        add(4 * 1048576 + 1);
        add(16 * 1048576 - 1);
        add(16 * 1048576);
        add(16 * 1048576 + 1);
        add(64 * 1048576);
        add(64 * 1048576 + 3);
    }
}

static uint64_t seed_of(int from, int to, size_t s, int k)
{
    return mc_mix((uint64_t)from << 48 ^ (uint64_t)to << 40 ^ (uint64_t)s << 2 ^ (uint64_t)k);
}

static void check_guard(const char *what, const unsigned char *p, size_t from, size_t n)
{
    for (size_t i = from; i < from + n; i++)
        if (p[i] != GUARD_BYTE)
            mc_fail("%s: guard byte %zu (len %zu) overwritten: 0x%02x", what, i, from, p[i]);
}

/* Expected and any-source/any-tag replies, one size at a time. */
static void phase_expected(int peer, int low)
{
    for (int i = 0; i < nsz; i++) {
        size_t s = sz[i];
        int tag = 1000 + i;
        unsigned char *out = mc_alloc(s), *in = mc_alloc(s + 2 * GUARD + 100);
        MPI_Status st;
        MPI_Request rq;

        memset(in, GUARD_BYTE, s + 2 * GUARD + 100);
        if (low) {
            mc_fill(out, s, seed_of(mc_rank, peer, s, 0));
            MC_CALL(MPI_Send(out, (int)s, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            /* the reply: any source, any tag, larger buffer */
            MC_CALL(MPI_Recv(in, (int)s + 100, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            mc_status("any/any reply", &st, peer, tag + 1, s);
            mc_check("any/any reply", in, s, seed_of(peer, mc_rank, s, 1));
            check_guard("any/any reply", in, s, 100 + 2 * GUARD);
        } else {
            MC_CALL(MPI_Irecv(in, (int)s, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq));
            MC_CALL(MPI_Wait(&rq, &st));
            mc_status("expected", &st, peer, tag, s);
            mc_check("expected", in, s, seed_of(peer, mc_rank, s, 0));
            check_guard("expected", in, s, 2 * GUARD + 100);
            mc_fill(out, s, seed_of(mc_rank, peer, s, 1));
            MC_CALL(MPI_Isend(out, (int)s, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD, &rq));
            MC_CALL(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        }
        free(out);
        free(in);
    }
}

/* All sizes up to 1 MiB + 1 sent before any receive, received in reverse. */
static void phase_unexpected(int peer, int low)
{
    int n = 0;
    MPI_Request *q = mc_alloc(sizeof(*q) * (size_t)nsz);
    unsigned char **b = mc_alloc(sizeof(*b) * (size_t)nsz);

    for (int i = 0; i < nsz; i++) {
        if (sz[i] > 1048577)
            continue;
        b[n] = mc_alloc(sz[i]);
        if (low) {
            mc_fill(b[n], sz[i], seed_of(mc_rank, peer, sz[i], 2));
            MC_CALL(MPI_Isend(b[n], (int)sz[i], MPI_BYTE, peer, 5000 + i, MPI_COMM_WORLD, &q[n]));
        }
        n++;
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (!low) {
        int j = n;
        for (int i = nsz - 1; i >= 0; i--) {
            MPI_Status st;
            int flag = 0;
            if (sz[i] > 1048577)
                continue;
            j--;
            /* probe first: the envelope of an unexpected message */
            MC_CALL(MPI_Probe(peer, 5000 + i, MPI_COMM_WORLD, &st));
            mc_status("unexpected probe", &st, peer, 5000 + i, sz[i]);
            MC_CALL(MPI_Iprobe(peer, 5000 + i, MPI_COMM_WORLD, &flag, &st));
            if (!flag)
                mc_fail("Iprobe after Probe found nothing (size %zu)", sz[i]);
            MC_CALL(MPI_Recv(b[j], (int)sz[i], MPI_BYTE, peer, 5000 + i, MPI_COMM_WORLD, &st));
            mc_status("unexpected", &st, peer, 5000 + i, sz[i]);
            mc_check("unexpected", b[j], sz[i], seed_of(peer, mc_rank, sz[i], 2));
        }
    } else {
        MC_CALL(MPI_Waitall(n, q, MPI_STATUSES_IGNORE));
    }
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
    free(q);
}

static void phase_replace(void)
{
    int right = (mc_rank + 1) % mc_size, left = (mc_rank + mc_size - 1) % mc_size;

    for (int i = 0; i < nsz; i++) {
        size_t s = sz[i];
        unsigned char *b = mc_alloc(s);
        MPI_Status st;

        mc_fill(b, s, seed_of(mc_rank, right, s, 3));
        MC_CALL(MPI_Sendrecv_replace(b, (int)s, MPI_BYTE, right, 7, left, 7, MPI_COMM_WORLD, &st));
        mc_status("Sendrecv_replace", &st, left, 7, s);
        mc_check("Sendrecv_replace", b, s, seed_of(left, mc_rank, s, 3));
        free(b);
    }
}

int main(int argc, char **argv)
{
    int peer, low;

    mc_init(&argc, &argv, "mpi_edge_sizes");
    alarm(110);
    build_sizes(getenv("EDGE_SMALL") == NULL);
    peer = mc_rank ^ 1;
    low = (mc_rank & 1) == 0;
    if (peer < mc_size) {
        phase_expected(peer, low);
        if (mc_rank == 0)
            printf("mpi_edge_sizes: expected ok (%d sizes)\n", nsz), fflush(stdout);
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (peer < mc_size)
        phase_unexpected(peer, low);
    else
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (mc_rank == 0)
        printf("mpi_edge_sizes: unexpected ok\n"), fflush(stdout);
    phase_replace();
    mc_finish();
    return 0;
}
