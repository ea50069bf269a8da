/*
 * Helpers shared by the small MPI programs of tests/mpi/ (one program per
 * kind of program that once hung or crashed over the provider): failure
 * reports, checked calls, payload patterns and a watchdog. A failure
 * prints "NAME FAIL rank=R/N: what" on stderr and aborts the job; a
 * program that makes no progress for MC_SECONDS ends its process, so that
 * a hang fails instead of blocking. The program prints "NAME passed" from
 * rank 0 at the end.
 */
#ifndef MPI_CHECK_H
#define MPI_CHECK_H

#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MC_SECONDS 45 /* the whole program: a few seconds, more on a loaded machine */

static const char *mc_name = "mpi";
static int mc_rank, mc_size;

static void mc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void mc_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s FAIL rank=%d/%d: %s\n", mc_name, mc_rank, mc_size, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

#define MC_CALL(call) mc_check_rc((call), #call, __LINE__)

static inline void mc_check_rc(int rc, const char *what, int line)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (rc == MPI_SUCCESS)
        return;
    MPI_Error_string(rc, s, &len);
    mc_fail("line %d: %s returned %d (%s)", line, what, rc, s);
}

static void mc_watchdog(int sig)
{
    static const char msg[] = "FAIL: no progress (watchdog)\n";

    (void)sig;
    if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
        _exit(3);
    _exit(2);
}

static inline void mc_init(int *argc, char ***argv, const char *name)
{
    mc_name = name;
    signal(SIGALRM, mc_watchdog);
    alarm(MC_SECONDS);
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &mc_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mc_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (getenv("MPI_TEST_VERBOSE") != NULL) {
        char host[MPI_MAX_PROCESSOR_NAME];
        int len = 0;

        MPI_Get_processor_name(host, &len);
        printf("%s rank %d/%d on %s\n", name, mc_rank, mc_size, host);
        fflush(stdout);
    }
}

static inline void mc_finish(void)
{
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (mc_rank == 0)
        printf("%s passed\n", mc_name);
    fflush(stdout);
    MPI_Finalize();
}

static inline uint64_t mc_mix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* Byte i of the pattern of seed is a byte of mc_mix(seed + i / 8). */
static inline unsigned char mc_byte(uint64_t seed, size_t i)
{
    return (unsigned char)(mc_mix(seed + i / 8) >> (8 * (i % 8)));
}

static inline void mc_fill(void *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        ((unsigned char *)p)[i] = mc_byte(seed, i);
}

static inline void mc_check(const char *what, const void *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++) {
        if (((const unsigned char *)p)[i] != mc_byte(seed, i))
            mc_fail("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, len,
                    ((const unsigned char *)p)[i], mc_byte(seed, i));
    }
}

static inline void *mc_alloc(size_t len)
{
    void *p = malloc(len ? len : 1);

    if (p == NULL)
        mc_fail("out of memory for %zu bytes", len);
    return p;
}

/* Envelope and byte count of a status. */
static inline void mc_status(const char *what, const MPI_Status *st, int src, int tag, size_t len)
{
    int count = -1;

    MC_CALL(MPI_Get_count(st, MPI_BYTE, &count));
    if (st->MPI_SOURCE != src || st->MPI_TAG != tag || count < 0 || (size_t)count != len)
        mc_fail("%s: status source %d tag %d count %d, expected %d %d %zu", what, st->MPI_SOURCE,
                st->MPI_TAG, count, src, tag, len);
}

enum mc_inter_kind {
    MC_INTER_BSEND,     /* MPI_Bsend, then MPI_Recv */
    MC_INTER_PROBE,     /* MPI_Isend; after a barrier, MPI_Probe (any source) of the unexpected */
    MC_INTER_MPROBE,    /* MPI_Isend, then MPI_Mprobe (any source) and MPI_Mrecv */
    MC_INTER_SENDFIRST  /* MPI_Isend to every remote rank before any MPI_Recv */
};

/* The program's kind of traffic once more over an intercommunicator
 * between the lower and the upper half of MPI_COMM_WORLD, as MPICH's test
 * harness runs each of its point-to-point tests over intercommunicators
 * too: every rank sends an eager and a rendezvous message to every rank
 * of the remote group, and takes the remote group's messages as kind
 * says, checking status and payload. */
static inline void mc_intercomm_phase(int kind)
{
    static const size_t sizes[] = {8, 70000};
    MPI_Comm half, inter;
    int low = mc_rank < mc_size / 2, remote, lrank, n;
    MPI_Request *q;
    unsigned char **out;
    void *bbuf = NULL;
    int bsize = 0;

    if (mc_size < 2)
        return;
    MC_CALL(MPI_Comm_split(MPI_COMM_WORLD, low, mc_rank, &half));
    MC_CALL(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, low ? mc_size / 2 : 0, 4242, &inter));
    MC_CALL(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
    MC_CALL(MPI_Comm_remote_size(inter, &remote));
    MC_CALL(MPI_Comm_rank(inter, &lrank));
    n = 2 * remote;
    q = mc_alloc(sizeof(*q) * (size_t)n);
    out = mc_alloc(sizeof(*out) * (size_t)n);
    if (kind == MC_INTER_BSEND) {
        bsize = n * (int)(sizes[1] + MPI_BSEND_OVERHEAD);
        bbuf = mc_alloc((size_t)bsize);
        MC_CALL(MPI_Buffer_attach(bbuf, bsize));
    }
    for (int i = 0; i < n; i++) {
        int d = i / 2, tag = i % 2;
        out[i] = mc_alloc(sizes[tag]);
        mc_fill(out[i], sizes[tag], mc_mix((uint64_t)low << 50 ^ (uint64_t)lrank << 30 ^ (uint64_t)d << 10 ^ (uint64_t)tag));
        q[i] = MPI_REQUEST_NULL;
        if (kind == MC_INTER_BSEND)
            MC_CALL(MPI_Bsend(out[i], (int)sizes[tag], MPI_BYTE, d, tag, inter));
        else
            MC_CALL(MPI_Isend(out[i], (int)sizes[tag], MPI_BYTE, d, tag, inter, &q[i]));
    }
    if (kind == MC_INTER_PROBE)
        MC_CALL(MPI_Barrier(inter)); /* they arrive before any receive */
    for (int k = 0; k < n; k++) {
        MPI_Status st;
        MPI_Message m = MPI_MESSAGE_NULL;
        int src = k / 2, tag = k % 2;
        unsigned char *in;
        if (kind == MC_INTER_PROBE) {
            MC_CALL(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, inter, &st));
            src = st.MPI_SOURCE;
            tag = st.MPI_TAG;
        } else if (kind == MC_INTER_MPROBE) {
            MC_CALL(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, inter, &m, &st));
            src = st.MPI_SOURCE;
            tag = st.MPI_TAG;
        }
        if (src < 0 || src >= remote || tag < 0 || tag > 1)
            mc_fail("intercommunicator: a probe found source %d tag %d (remote group of %d)", src, tag, remote);
        in = mc_alloc(sizes[tag]);
        if (kind == MC_INTER_MPROBE)
            MC_CALL(MPI_Mrecv(in, (int)sizes[tag], MPI_BYTE, &m, &st));
        else
            MC_CALL(MPI_Recv(in, (int)sizes[tag], MPI_BYTE, src, tag, inter, &st));
        mc_status("intercommunicator receive", &st, src, tag, sizes[tag]);
        mc_check("intercommunicator payload", in, sizes[tag],
                 mc_mix((uint64_t)!low << 50 ^ (uint64_t)src << 30 ^ (uint64_t)lrank << 10 ^ (uint64_t)tag));
        free(in);
    }
    MC_CALL(MPI_Waitall(n, q, MPI_STATUSES_IGNORE));
    if (kind == MC_INTER_BSEND) {
        MC_CALL(MPI_Buffer_detach(&bbuf, &bsize));
        free(bbuf);
    }
    for (int i = 0; i < n; i++)
        free(out[i]);
    free(out);
    free(q);
    MC_CALL(MPI_Comm_free(&inter));
    MC_CALL(MPI_Comm_free(&half));
}

#endif
