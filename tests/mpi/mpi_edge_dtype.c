/*
 * Derived datatypes, non-contiguous on both sides: the sender's vector,
 * indexed or struct type is received as a different non-contiguous type
 * with the same type signature (vector <-> indexed, struct of int/double
 * with holes <-> resized struct), at counts from 0 to beyond the
 * rendezvous threshold; the holes of the receive buffer must stay
 * untouched. Also a contiguous send received into a vector, a receive
 * of fewer elements than posted (MPI_Get_count / MPI_Get_elements), and
 * the same patterns with MPI_ANY_SOURCE and unexpected (sent before the
 * receive is posted).
 */
#include "mpi_check.h"

#define HOLE 0x5A

typedef struct {
    int a;
    char pad1[4];
    double d[3];
    char c;
    char pad2[7];
    short s[2];
} rec_t;

static const int counts[] = {0, 1, 2, 3, 63, 64, 65, 511, 1000, 1024, 2047, 4096, 8191, 8192, 8193, 16384, 40000, 131073};
#define NCOUNTS (int)(sizeof(counts) / sizeof(counts[0]))

/* vector: count blocks of 3 ints, stride 5 ints */
static MPI_Datatype vec_type(void)
{
    MPI_Datatype t;
    MC_CALL(MPI_Type_vector(1, 3, 5, MPI_INT, &t)); /* one block: resized below */
    MPI_Datatype r;
    MC_CALL(MPI_Type_create_resized(t, 0, 5 * (MPI_Aint)sizeof(int), &r));
    MC_CALL(MPI_Type_free(&t));
    MC_CALL(MPI_Type_commit(&r));
    return r;
}

/* indexed: 3 ints at displacements 0, 2 (block of 2)... within 7 ints */
static MPI_Datatype idx_type(void)
{
    int bl[2] = {1, 2}, dp[2] = {1, 4};
    MPI_Datatype t, r;
    MC_CALL(MPI_Type_indexed(2, bl, dp, MPI_INT, &t));
    MC_CALL(MPI_Type_create_resized(t, 0, 7 * (MPI_Aint)sizeof(int), &r));
    MC_CALL(MPI_Type_free(&t));
    MC_CALL(MPI_Type_commit(&r));
    return r;
}

static MPI_Datatype rec_type(void)
{
    int bl[4] = {1, 3, 1, 2};
    MPI_Aint dp[4] = {offsetof(rec_t, a), offsetof(rec_t, d), offsetof(rec_t, c), offsetof(rec_t, s)};
    MPI_Datatype ty[4] = {MPI_INT, MPI_DOUBLE, MPI_CHAR, MPI_SHORT}, t, r;
    MC_CALL(MPI_Type_create_struct(4, bl, dp, ty, &t));
    MC_CALL(MPI_Type_create_resized(t, 0, sizeof(rec_t), &r));
    MC_CALL(MPI_Type_free(&t));
    MC_CALL(MPI_Type_commit(&r));
    return r;
}

/* the same signature in a different layout: a packed struct (different
 * displacements) in a 40-byte extent with the leading field last */
static MPI_Datatype rec_type2(void)
{
    int bl[4] = {1, 3, 1, 2};
    MPI_Aint dp[4] = {36, 0, 24, 28};
    MPI_Datatype ty[4] = {MPI_INT, MPI_DOUBLE, MPI_CHAR, MPI_SHORT}, t, r;
    MC_CALL(MPI_Type_create_struct(4, bl, dp, ty, &t));
    MC_CALL(MPI_Type_create_resized(t, 0, 48, &r));
    MC_CALL(MPI_Type_free(&t));
    MC_CALL(MPI_Type_commit(&r));
    return r;
}

static void fill_ints_vec(int *p, int n, int seed) /* vec layout: ints 0..2 of each 5 */
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 5; j++)
            p[5 * i + j] = j < 3 ? seed + 3 * i + j : -1;
}

static void check_ints_idx(const int *p, int n, int seed, const char *what)
{
    const unsigned char *b = (const unsigned char *)p;
    for (int i = 0; i < n; i++) {
        int want[3] = {seed + 3 * i, seed + 3 * i + 1, seed + 3 * i + 2};
        if (p[7 * i + 1] != want[0] || p[7 * i + 4] != want[1] || p[7 * i + 5] != want[2])
            mc_fail("%s: element %d of %d: %d %d %d, expected %d %d %d", what, i, n, p[7 * i + 1],
                    p[7 * i + 4], p[7 * i + 5], want[0], want[1], want[2]);
        for (int j = 0; j < 7; j++) {
            if (j == 1 || j == 4 || j == 5)
                continue;
            for (size_t k = 0; k < sizeof(int); k++)
                if (b[(7 * (size_t)i + (size_t)j) * sizeof(int) + k] != HOLE)
                    mc_fail("%s: hole int %d of element %d written", what, j, i);
        }
    }
}

static void fill_rec(rec_t *r, int n, int seed)
{
    memset(r, 0x77, sizeof(*r) * (size_t)n);
    for (int i = 0; i < n; i++) {
        r[i].a = seed + i;
        for (int j = 0; j < 3; j++)
            r[i].d[j] = (seed + i) * 0.5 + j;
        r[i].c = (char)(seed + i);
        r[i].s[0] = (short)(seed + 2 * i);
        r[i].s[1] = (short)(seed - i);
    }
}

static void check_rec2(const unsigned char *p, int n, int seed, const char *what)
{
    for (int i = 0; i < n; i++) {
        const unsigned char *e = p + 48 * (size_t)i;
        int a;
        double d[3];
        char c;
        short s[2];
        memcpy(&a, e + 36, 4);
        memcpy(d, e, 24);
        memcpy(&c, e + 24, 1);
        memcpy(s, e + 28, 4);
        if (a != seed + i || c != (char)(seed + i) || s[0] != (short)(seed + 2 * i) || s[1] != (short)(seed - i))
            mc_fail("%s: element %d of %d: a %d c %d s %d %d", what, i, n, a, c, s[0], s[1]);
        for (int j = 0; j < 3; j++)
            if (d[j] != (seed + i) * 0.5 + j)
                mc_fail("%s: element %d d[%d] = %g", what, i, j, d[j]);
        for (int k = 25; k < 28; k++)
            if (e[k] != HOLE)
                mc_fail("%s: element %d hole byte %d written", what, i, k);
        for (int k = 40; k < 48; k++)
            if (e[k] != HOLE)
                mc_fail("%s: element %d hole byte %d written", what, i, k);
    }
}

static void run(int peer, int low, int any, int unexp)
{
    MPI_Datatype vt = vec_type(), it = idx_type(), rt = rec_type(), rt2 = rec_type2();
    int src = any ? MPI_ANY_SOURCE : peer;

    for (int ci = 0; ci < NCOUNTS; ci++) {
        int n = counts[ci], tag = ci + (any ? 100 : 0) + (unexp ? 200 : 0), seed = 1000 * ci + 7;
        int *vbuf = mc_alloc(sizeof(int) * 5 * (size_t)n + 4);
        int *ibuf = mc_alloc(sizeof(int) * 7 * ((size_t)n + 1) + 4);
        rec_t *rbuf = mc_alloc(sizeof(rec_t) * (size_t)n + 4);
        unsigned char *r2 = mc_alloc(48 * ((size_t)n + 1));
        MPI_Request q[2];
        MPI_Status st;

        if (low) {
            fill_ints_vec(vbuf, n, seed);
            fill_rec(rbuf, n, seed);
            if (unexp)
                MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
            MC_CALL(MPI_Isend(vbuf, n, vt, peer, tag, MPI_COMM_WORLD, &q[0]));
            MC_CALL(MPI_Isend(rbuf, n, rt, peer, tag + 1000, MPI_COMM_WORLD, &q[1]));
            if (unexp)
                MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
            MC_CALL(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
        } else {
            int c = -1, e = -1;
            memset(ibuf, HOLE, sizeof(int) * 7 * ((size_t)n + 1));
            memset(r2, HOLE, 48 * ((size_t)n + 1));
            if (unexp) {
                MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
                MC_CALL(MPI_Barrier(MPI_COMM_WORLD)); /* sent (eager) or at least announced */
            }
            /* post one more element than sent: Get_count says n */
            MC_CALL(MPI_Recv(ibuf, n + 1, it, src, tag, MPI_COMM_WORLD, &st));
            MC_CALL(MPI_Get_count(&st, it, &c));
            MC_CALL(MPI_Get_elements(&st, MPI_INT, &e));
            if (c != n || e != 3 * n || st.MPI_SOURCE != peer || st.MPI_TAG != tag)
                mc_fail("vector->indexed n=%d: count %d elements %d source %d tag %d", n, c, e, st.MPI_SOURCE, st.MPI_TAG);
            check_ints_idx(ibuf, n, seed, "vector->indexed");
            for (size_t k = 0; k < 7 * sizeof(int); k++)
                if (((unsigned char *)(ibuf + 7 * n))[k] != HOLE)
                    mc_fail("vector->indexed n=%d: element past the count written", n);
            MC_CALL(MPI_Recv(r2, n + 1, rt2, src, tag + 1000, MPI_COMM_WORLD, &st));
            MC_CALL(MPI_Get_count(&st, rt2, &c));
            if (c != n)
                mc_fail("struct->struct2 n=%d: count %d", n, c);
            check_rec2(r2, n, seed, "struct->struct2");
        }
        free(vbuf);
        free(ibuf);
        free(rbuf);
        free(r2);
    }
    /* contiguous bytes into a vector and back; a partial struct: Get_elements */
    {
        int n = 20000;
        int *flat = mc_alloc(sizeof(int) * 3 * (size_t)n), *v = mc_alloc(sizeof(int) * 5 * (size_t)n);
        MPI_Status st;
        int c = -1, e = -1;
        if (low) {
            for (int i = 0; i < 3 * n; i++)
                flat[i] = i ^ 0x1234;
            MC_CALL(MPI_Send(flat, 3 * n, MPI_INT, peer, 77, MPI_COMM_WORLD));
            MC_CALL(MPI_Send(flat, 3 * n - 1, MPI_INT, peer, 78, MPI_COMM_WORLD));
        } else {
            memset(v, HOLE, sizeof(int) * 5 * (size_t)n);
            MC_CALL(MPI_Recv(v, n, vt, src, 77, MPI_COMM_WORLD, &st));
            for (int i = 0; i < n; i++)
                for (int j = 0; j < 5; j++) {
                    if (j < 3 && v[5 * i + j] != ((3 * i + j) ^ 0x1234))
                        mc_fail("contig->vector: element %d.%d = %d", i, j, v[5 * i + j]);
                    if (j >= 3 && v[5 * i + j] != (int)0x5A5A5A5A)
                        mc_fail("contig->vector: hole %d.%d written", i, j);
                }
            MC_CALL(MPI_Recv(v, n, vt, src, 78, MPI_COMM_WORLD, &st));
            MC_CALL(MPI_Get_count(&st, vt, &c));
            MC_CALL(MPI_Get_elements(&st, MPI_INT, &e));
            if (c != MPI_UNDEFINED || e != 3 * n - 1)
                mc_fail("partial vector: count %d (expected MPI_UNDEFINED) elements %d (expected %d)", c, e, 3 * n - 1);
        }
        free(flat);
        free(v);
    }
    MC_CALL(MPI_Type_free(&vt));
    MC_CALL(MPI_Type_free(&it));
    MC_CALL(MPI_Type_free(&rt));
    MC_CALL(MPI_Type_free(&rt2));
}

int main(int argc, char **argv)
{
    int peer, low;

    mc_init(&argc, &argv, "mpi_edge_dtype");
    alarm(110);
    peer = mc_rank ^ 1;
    low = !(mc_rank & 1);
    if (peer >= mc_size) {
        /* odd rank count: the last rank only joins the barriers */
        for (int i = 0; i < 2 * NCOUNTS; i++) {
            MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
            MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
        }
    } else {
        for (int pass = 0; pass < 4; pass++)
            run(peer, low, pass & 1, pass >> 1);
    }
    mc_finish();
    return 0;
}
