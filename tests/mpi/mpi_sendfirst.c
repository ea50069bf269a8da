/*
 * Exchanges where both ranks of a pair (2k, 2k+1) post their sends before
 * their receives, over many datatypes (contiguous, vector with gaps,
 * struct, derived contiguous) and counts from 0 to past the rendezvous
 * threshold, so that both sides wait in a rendezvous send while the other
 * side's data arrives unexpected. Each exchange is done as Isend then
 * Recv then Wait, and as MPI_Sendrecv; payloads are checked element by
 * element, gaps of vector types must stay untouched.
 */
#include "mpi_check.h"

static const int sf_counts[] = {0, 1, 3, 1000, 16411, 65537};
#define SF_NCOUNTS ((int)(sizeof(sf_counts) / sizeof(sf_counts[0])))
#define SF_NTYPES 6

typedef struct sf_type {
    const char *name;
    MPI_Datatype t;
    size_t extent;              /* bytes one element spans in memory */
} sf_type_t;

static sf_type_t sf_types[SF_NTYPES];

static void sf_types_make(void)
{
    MPI_Datatype vec, st, con;
    int bl[2] = {1, 3};
    MPI_Aint disp[2] = {0, 8};
    MPI_Datatype tt[2] = {MPI_DOUBLE, MPI_INT};

    MC_CALL(MPI_Type_vector(2, 3, 5, MPI_INT, &vec));   /* 6 ints in 10 */
    MC_CALL(MPI_Type_create_resized(vec, 0, 10 * sizeof(int), &vec));
    MC_CALL(MPI_Type_create_struct(2, bl, disp, tt, &st)); /* 20 bytes in 24 */
    MC_CALL(MPI_Type_create_resized(st, 0, 24, &st));
    MC_CALL(MPI_Type_contiguous(3, MPI_SHORT, &con));
    MC_CALL(MPI_Type_commit(&vec));
    MC_CALL(MPI_Type_commit(&st));
    MC_CALL(MPI_Type_commit(&con));
    sf_types[0] = (sf_type_t){"MPI_CHAR", MPI_CHAR, 1};
    sf_types[1] = (sf_type_t){"MPI_INT", MPI_INT, sizeof(int)};
    sf_types[2] = (sf_type_t){"MPI_DOUBLE", MPI_DOUBLE, sizeof(double)};
    sf_types[3] = (sf_type_t){"vector", vec, 10 * sizeof(int)};
    sf_types[4] = (sf_type_t){"struct", st, 24};
    sf_types[5] = (sf_type_t){"contiguous", con, 3 * sizeof(short)};
}

/* Bytes of one element that carry data (the rest are gaps). */
static int sf_is_data(int k, size_t off)
{
    if (k == 3)
        return (off / sizeof(int)) % 5 < 3;
    if (k == 4)
        return off < 4 ? 1 : off < 8 ? 0 : off < 20;
    return 1;
}

static uint64_t sf_seed(int from, int k, int c, int way)
{
    return mc_mix((uint64_t)from << 40 ^ (uint64_t)k << 32 ^ (uint64_t)c << 4 ^ (uint64_t)way);
}

/* Data bytes follow the pattern; gaps hold 0x5a on both sides. */
static void sf_fill(unsigned char *b, int k, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = sf_is_data(k, i % sf_types[k].extent) ? mc_byte(seed, i) : 0x5a;
}

static void sf_verify(const unsigned char *b, int k, size_t n, uint64_t seed, int c)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char want = sf_is_data(k, i % sf_types[k].extent) ? mc_byte(seed, i) : 0x5a;
        if (b[i] != want)
            mc_fail("%s count %d: byte %zu of %zu is 0x%02x, expected 0x%02x", sf_types[k].name, c,
                    i, n, b[i], want);
    }
}

static void sf_exchange(int peer, int k, int ci, int way)
{
    int c = sf_counts[ci], got = -1;
    size_t n = (size_t)c * sf_types[k].extent;
    unsigned char *out = mc_alloc(n), *in = mc_alloc(n);
    MPI_Datatype t = sf_types[k].t;
    MPI_Request q;
    MPI_Status st;

    sf_fill(out, k, n, sf_seed(mc_rank, k, c, way));
    sf_fill(in, k, n, 0);   /* gaps set; data overwritten */
    if (way == 0) {
        MC_CALL(MPI_Isend(out, c, t, peer, k, MPI_COMM_WORLD, &q));
        MC_CALL(MPI_Recv(in, c, t, peer, k, MPI_COMM_WORLD, &st));
        MC_CALL(MPI_Wait(&q, MPI_STATUS_IGNORE));
    } else {
        MC_CALL(MPI_Sendrecv(out, c, t, peer, 100 + k, in, c, t, peer, 100 + k, MPI_COMM_WORLD,
                             &st));
    }
    MC_CALL(MPI_Get_count(&st, t, &got));
    if (got != c || st.MPI_SOURCE != peer)
        mc_fail("%s: count %d from %d, expected %d from %d", sf_types[k].name, got, st.MPI_SOURCE,
                c, peer);
    sf_verify(in, k, n, sf_seed(peer, k, c, way), c);
    free(out);
    free(in);
}

int main(int argc, char **argv)
{
    int peer;

    mc_init(&argc, &argv, "mpi_sendfirst");
    sf_types_make();
    peer = mc_rank ^ 1;
    if (peer < mc_size) {
        for (int way = 0; way < 2; way++)
            for (int k = 0; k < SF_NTYPES; k++)
                for (int ci = 0; ci < SF_NCOUNTS; ci++)
                    sf_exchange(peer, k, ci, way);
    }
    for (int k = 3; k < SF_NTYPES; k++)
        MC_CALL(MPI_Type_free(&sf_types[k].t));
    mc_intercomm_phase(MC_INTER_SENDFIRST); /* the same over an intercommunicator */
    mc_finish();
    return 0;
}
