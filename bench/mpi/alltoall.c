/*
 * alltoall - mp_test's scale case in MPI, for bench/scale.sh: 8 B, then
 * 64 KiB, from every rank to every other at once (every MPI_Irecv posted,
 * then every MPI_Isend, then MPI_Waitall), every payload checked; then each
 * rank prints the same line as mp_test (tests/mp/mp_proc.h): its sockets,
 * descriptors, peak RSS and malloc'd bytes. Built by bench/scale.sh with
 *   mpicc -O2 -I tests/mp bench/mpi/alltoall.c
 *
 *   alltoall [BIG_BYTES]     (default 65536)
 *
 * The heap is read right after MPI_Init (before any message: a barrier
 * would already open connections), after the 8 B round and after the
 * large one, the program's own buffers unmapped each time (mp_proc_map); sockets and
 * descriptors at the end, between two barriers, so that every rank still
 * holds its own. A wrong payload prints "alltoall FAIL ..." and aborts.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_proc.h"

#define AA_SMALL 8
#define AA_BIG_DEFAULT 65536

static int aa_rank, aa_size;

static uint64_t aa_mix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* Byte i of the message from rank src of len bytes. */
static unsigned char aa_byte(int src, size_t len, size_t i)
{
    uint64_t w = aa_mix(aa_mix((uint64_t)src << 32 ^ len) + i / 8);

    return (unsigned char)(w >> (8 * (i % 8)));
}

static void aa_round(size_t len, int tag)
{
    /* outside malloc, as mp_test's: the heap is read around the rounds */
    unsigned char *in = mp_proc_map((size_t)aa_size * len), *out = mp_proc_map(len);
    MPI_Request *req = mp_proc_map(2 * (size_t)aa_size * sizeof(*req));
    int n = 0;

    if (in == NULL || out == NULL || req == NULL) {
        fprintf(stderr, "alltoall FAIL rank %d: out of memory\n", aa_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(in, 0xa5, (size_t)aa_size * len);
    for (size_t i = 0; i < len; i++)
        out[i] = aa_byte(aa_rank, len, i);
    for (int p = 0; p < aa_size; p++) {
        if (p != aa_rank)
            MPI_Irecv(in + (size_t)p * len, (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD, &req[n++]);
    }
    for (int k = 1; k < aa_size; k++)
        MPI_Isend(out, (int)len, MPI_BYTE, (aa_rank + k) % aa_size, tag, MPI_COMM_WORLD, &req[n++]);
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    for (int p = 0; p < aa_size; p++) {
        for (size_t i = 0; p != aa_rank && i < len; i++) {
            if (in[(size_t)p * len + i] != aa_byte(p, len, i)) {
                fprintf(stderr, "alltoall FAIL rank %d: byte %zu of %zu from rank %d is 0x%02x, expected 0x%02x\n",
                        aa_rank, i, len, p, in[(size_t)p * len + i], aa_byte(p, len, i));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    mp_proc_unmap(in, (size_t)aa_size * len);
    mp_proc_unmap(out, len);
    mp_proc_unmap(req, 2 * (size_t)aa_size * sizeof(*req));
}

int main(int argc, char **argv)
{
    size_t big = argc > 1 && atol(argv[1]) > 0 ? (size_t)atol(argv[1]) : AA_BIG_DEFAULT;
    mp_proc_mem_t m0, m1, m2, m3;
    mp_proc_sockets_t s;
    double t0;

    MPI_Init(&argc, &argv);
    mp_proc_mem(&m0, 0);
    MPI_Comm_rank(MPI_COMM_WORLD, &aa_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &aa_size);
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    aa_round(AA_SMALL, 1);
    mp_proc_mem(&m1, 0);
    aa_round(big, 2);
    mp_proc_mem(&m2, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (aa_rank == 0)
        printf("scale: %d ranks, %d B and %zu B to every other rank, %.2f s\n", aa_size, AA_SMALL,
               big, MPI_Wtime() - t0);
    for (double end = MPI_Wtime() + MP_PROC_SETTLE_US / 1e6; MPI_Wtime() < end;) {
        int flag;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    }
    mp_proc_mem(&m3, 0);
    mp_proc_sockets(&s);
    mp_proc_print("ompi", (unsigned)aa_rank, (unsigned)aa_size, &m0, &m1, &m2, &m3, &s);
    MPI_Barrier(MPI_COMM_WORLD);
    if (aa_rank == 0)
        printf("alltoall: ok, %d ranks\n", aa_size);
    MPI_Finalize();
    return 0;
}
