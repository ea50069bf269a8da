/*
 * Persistent and absolute-address operations, the kinds mpi4py's suite
 * drives through coll basic's Alltoallw:
 * - MPI_Send_init/MPI_Recv_init (and Ssend_init) around a ring, started
 *   again and again with MPI_Startall, eager and past the rendezvous
 *   threshold, payloads checked after every round;
 * - MPI_Alltoallw over every rank with a different count and datatype per
 *   peer (contiguous and vector), payloads and untouched gaps checked;
 * - Send/Recv from MPI_BOTTOM with struct datatypes holding the buffers'
 *   absolute addresses (non-persistent: Open MPI 4.1's pml cm hands a
 *   persistent one's buffer to the MTL as NULL, see README.md).
 */
#include "mpi_check.h"

static const int mp_counts[] = {1, 100, 20000};
#define MP_NCOUNTS ((int)(sizeof(mp_counts) / sizeof(mp_counts[0])))
#define MP_ROUNDS 20

static void mp_ring(int count, int sync)
{
    int right = (mc_rank + 1) % mc_size, left = (mc_rank + mc_size - 1) % mc_size;
    size_t len = (size_t)count * sizeof(int);
    unsigned char *sbuf = mc_alloc(len), *rbuf = mc_alloc(len);
    MPI_Request r[2];
    MPI_Status st[2];

    MC_CALL(MPI_Recv_init(rbuf, count, MPI_INT, left, 5, MPI_COMM_WORLD, &r[0]));
    if (sync)
        MC_CALL(MPI_Ssend_init(sbuf, count, MPI_INT, right, 5, MPI_COMM_WORLD, &r[1]));
    else
        MC_CALL(MPI_Send_init(sbuf, count, MPI_INT, right, 5, MPI_COMM_WORLD, &r[1]));
    for (int round = 0; round < MP_ROUNDS; round++) {
        mc_fill(sbuf, len, mc_mix((uint64_t)mc_rank << 32 | (uint64_t)round << 8 | (uint64_t)count));
        memset(rbuf, 0xee, len);
        MC_CALL(MPI_Startall(2, r));
        MC_CALL(MPI_Waitall(2, r, st));
        mc_status("persistent ring", &st[0], left, 5, len);
        mc_check("persistent ring", rbuf, len, mc_mix((uint64_t)left << 32 | (uint64_t)round << 8 | (uint64_t)count));
    }
    MC_CALL(MPI_Request_free(&r[0]));
    MC_CALL(MPI_Request_free(&r[1]));
    free(sbuf);
    free(rbuf);
}

/* Peer p gets (p + mc_rank) % 3 + 1 blocks of 3 ints; odd peers as one
 * vector of blocks with gaps of 2 ints. */
static void mp_alltoallw(void)
{
    int n = mc_size, *sc = calloc(n, sizeof(int)), *rc = calloc(n, sizeof(int));
    int *sd = calloc(n, sizeof(int)), *rd = calloc(n, sizeof(int));
    MPI_Datatype *stp = calloc(n, sizeof(MPI_Datatype)), *rtp = calloc(n, sizeof(MPI_Datatype));
    int *sbuf = mc_alloc((size_t)n * 15 * sizeof(int)), *rbuf = mc_alloc((size_t)n * 15 * sizeof(int));

    if (!sc || !rc || !sd || !rd || !stp || !rtp)
        mc_fail("out of memory");
    for (int p = 0; p < n; p++) {
        int sblocks = (p + mc_rank) % 3 + 1, rblocks = (mc_rank + p) % 3 + 1;
        MC_CALL(MPI_Type_vector(sblocks, 3, 5, MPI_INT, &stp[p]));
        MC_CALL(MPI_Type_vector(rblocks, 3, 5, MPI_INT, &rtp[p]));
        MC_CALL(MPI_Type_commit(&stp[p]));
        MC_CALL(MPI_Type_commit(&rtp[p]));
        sc[p] = rc[p] = 1;
        sd[p] = rd[p] = p * 15 * (int)sizeof(int);
        for (int i = 0; i < 15; i++) {
            sbuf[p * 15 + i] = mc_rank * 100000 + p * 100 + i;
            rbuf[p * 15 + i] = -1;
        }
    }
    MC_CALL(MPI_Alltoallw(sbuf, sc, sd, stp, rbuf, rc, rd, rtp, MPI_COMM_WORLD));
    for (int p = 0; p < n; p++) {
        int blocks = (mc_rank + p) % 3 + 1;
        for (int i = 0; i < 15; i++) {
            int data = i / 5 < blocks && i % 5 < 3;
            int want = data ? p * 100000 + mc_rank * 100 + i : -1;
            if (rbuf[p * 15 + i] != want)
                mc_fail("alltoallw from %d: int %d is %d, not %d", p, i, rbuf[p * 15 + i], want);
        }
        MC_CALL(MPI_Type_free(&stp[p]));
        MC_CALL(MPI_Type_free(&rtp[p]));
    }
    free(sc), free(rc), free(sd), free(rd), free(stp), free(rtp), free(sbuf), free(rbuf);
}

static void mp_bottom(int count)
{
    int right = (mc_rank + 1) % mc_size, left = (mc_rank + mc_size - 1) % mc_size;
    size_t len = (size_t)count * sizeof(int);
    unsigned char *sbuf = mc_alloc(len), *rbuf = mc_alloc(len);
    MPI_Aint sa, ra;
    MPI_Datatype st, rt, it = MPI_INT;
    MPI_Status s;

    mc_fill(sbuf, len, mc_mix((uint64_t)mc_rank << 32 | (uint64_t)count));
    memset(rbuf, 0xee, len);
    MC_CALL(MPI_Get_address(sbuf, &sa));
    MC_CALL(MPI_Get_address(rbuf, &ra));
    MC_CALL(MPI_Type_create_struct(1, &count, &sa, &it, &st));
    MC_CALL(MPI_Type_create_struct(1, &count, &ra, &it, &rt));
    MC_CALL(MPI_Type_commit(&st));
    MC_CALL(MPI_Type_commit(&rt));
    MC_CALL(MPI_Sendrecv(MPI_BOTTOM, 1, st, right, 6, MPI_BOTTOM, 1, rt, left, 6, MPI_COMM_WORLD, &s));
    mc_status("bottom", &s, left, 6, len);
    mc_check("bottom", rbuf, len, mc_mix((uint64_t)left << 32 | (uint64_t)count));
    MC_CALL(MPI_Type_free(&st));
    MC_CALL(MPI_Type_free(&rt));
    free(sbuf);
    free(rbuf);
}

int main(int argc, char **argv)
{
    mc_init(&argc, &argv, "mpi_persist");
    for (int i = 0; i < MP_NCOUNTS; i++) {
        mp_ring(mp_counts[i], 0);
        mp_ring(mp_counts[i], 1);
        mp_bottom(mp_counts[i]);
    }
    for (int i = 0; i < 5; i++)
        mp_alltoallw();
    mc_finish();
    return 0;
}
