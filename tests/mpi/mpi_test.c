/*
 * MPI conformance of point-to-point messaging, meant to run under Open MPI
 * over the tmx libfabric provider (pml cm, mtl ofi), any number of ranks:
 *
 *   mpirun -n N mpi_test [CASE...]        (no CASE: all of them, in order)
 *
 *   pingpong   pairs (0,1), (2,3)...: every size boundary, 0 B to 4 MiB + 1
 *   ring       to the right with Isend/Irecv, to the left with Sendrecv
 *   anysource  rank 0 receives from all: MPI_ANY_SOURCE, MPI_ANY_TAG, both,
 *              per-sender order; wildcard receives posted before the sends
 *   probe      MPI_Probe (exact and wildcard), MPI_Iprobe loops, no message
 *   mprobe     MPI_Mprobe/MPI_Mrecv and MPI_Improbe/MPI_Imrecv: a matched
 *              message is no longer seen by probes
 *   cancel     posted receives cancelled (MPI_Test_cancelled), wildcard
 *              and exact, and their tags still usable afterwards
 *   truncate   MPI_ERR_TRUNCATE from MPI_Recv and MPI_Wait, nothing written
 *              past the buffer, the pair still working afterwards
 *   ssend      MPI_Issend does not complete before the receive is posted
 *   order      non-overtaking: many messages on one tag, mixed sizes, both
 *              unexpected and pre-posted
 *   alltoall   every rank to every rank (itself included), Isend, Irecv,
 *              Waitall
 *
 * Pair cases run on the pairs (2k, 2k+1) at once; with an odd number of
 * ranks the last one only joins the barriers. Every payload is a pattern
 * derived from what identifies the message, checked byte by byte, and every
 * receive buffer has a guard after it that must come back untouched. Errors
 * are returned (MPI_ERRORS_RETURN) and checked at each call. A failure
 * prints "mpi_test FAIL case=C rank=R/N: what, with the values" on stderr
 * and calls MPI_Abort; a case (or MPI_Init, MPI_Finalize) that makes no
 * progress for MT_CASE_SECONDS, or MPI_TEST_SECONDS when set (the start of
 * a large job on a small machine takes longer), ends the process. Rank 0 prints one line per case that passed.
 */
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MT_KIB ((size_t)1 << 10)
#define MT_MIB ((size_t)1 << 20)
#define MT_GUARD 256             /* bytes checked after each receive buffer */
#define MT_GUARD_BYTE 0xa5
#define MT_CASE_SECONDS 60       /* no case may take longer, by default */
#define MT_SSEND_HOLD_MS 20      /* how long an Issend is watched not completing */

static unsigned mt_seconds = MT_CASE_SECONDS;
static int mt_rank;
static int mt_size;
static const char *mt_case = "init";

/* ------------------------------------------------------------ reporting */

static void mt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void mt_fail(const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "mpi_test FAIL case=%s rank=%d/%d: %s\n", mt_case, mt_rank, mt_size, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* Checks the return code of an MPI call. */
#define MT_CALL(call) mt_check_rc((call), #call, __LINE__)

static void mt_check_rc(int rc, const char *what, int line)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (rc == MPI_SUCCESS)
        return;
    MPI_Error_string(rc, s, &len);
    mt_fail("line %d: %s returned %d (%s)", line, what, rc, s);
}

/* A case stuck in a call: the watchdog says which and ends the process,
 * which makes mpirun end the job. */
static void mt_watchdog(int sig)
{
    char msg[160];
    int n = snprintf(msg, sizeof(msg), "mpi_test FAIL case=%s rank=%d/%d: no progress in %u s\n",
                     mt_case, mt_rank, mt_size, mt_seconds);

    (void)sig;
    if (n > 0 && write(STDERR_FILENO, msg, (size_t)n) < 0)
        _exit(3);
    _exit(2);
}

static double mt_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------- patterns */

static uint64_t mt_mix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* The pattern's seed for a message identified by four numbers. */
static uint64_t mt_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mt_mix(a ^ mt_mix(b ^ mt_mix(c ^ mt_mix(d))));
}

/* Byte i of a pattern is byte i%8 of mt_mix(seed + i - i%8). */
static void mt_fill(unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = mt_mix(seed + i);
        memcpy(p + i, &w, len - i < 8 ? len - i : 8);
    }
}

static void mt_check_pattern(const char *what, const unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = mt_mix(seed + i);
        const unsigned char *wb = (const unsigned char *)&w;
        size_t n = len - i < 8 ? len - i : 8;

        if (memcmp(p + i, wb, n) == 0)
            continue;
        for (size_t k = 0; k < n; k++) {
            if (p[i + k] != wb[k])
                mt_fail("%s: payload byte %zu of %zu is 0x%02x, expected 0x%02x", what, i + k,
                        len, p[i + k], wb[k]);
        }
    }
}

/* A buffer of cap bytes followed by the guard; the whole of it is set to
 * the guard byte. */
static unsigned char *mt_alloc(size_t cap)
{
    unsigned char *p = malloc(cap + MT_GUARD);

    if (p == NULL)
        mt_fail("out of memory for a %zu-byte buffer", cap);
    memset(p, MT_GUARD_BYTE, cap + MT_GUARD);
    return p;
}

/* Bytes [from, to) must still hold the guard byte. */
static void mt_check_guard(const char *what, const unsigned char *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (p[i] != MT_GUARD_BYTE)
            mt_fail("%s: byte %zu, past the %zu bytes that may be written, changed to 0x%02x",
                    what, i, from, p[i]);
    }
}

/* A message's envelope and length as the status reports them. */
static void mt_check_status(const char *what, const MPI_Status *st, int src, int tag, size_t len)
{
    int count = -1;

    MT_CALL(MPI_Get_count(st, MPI_BYTE, &count));
    if (st->MPI_SOURCE != src || st->MPI_TAG != tag || count < 0 || (size_t)count != len)
        mt_fail("%s: status source %d tag %d count %d, expected source %d tag %d count %zu", what,
                st->MPI_SOURCE, st->MPI_TAG, count, src, tag, len);
}

/* Receives into an exactly sized buffer and checks envelope, payload and
 * guard. src and tag may be wildcards; want_src and want_tag are what the
 * status must say. */
static void mt_recv_check(const char *what, size_t len, int src, int tag, int want_src,
                          int want_tag, uint64_t seed)
{
    unsigned char *buf = mt_alloc(len);
    MPI_Status st;

    MT_CALL(MPI_Recv(buf, (int)len, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st));
    mt_check_status(what, &st, want_src, want_tag, len);
    mt_check_pattern(what, buf, len, seed);
    mt_check_guard(what, buf, len, len + MT_GUARD);
    free(buf);
}

static void mt_send_pattern(size_t len, int dst, int tag, uint64_t seed)
{
    unsigned char *buf = mt_alloc(len);

    mt_fill(buf, len, seed);
    MT_CALL(MPI_Send(buf, (int)len, MPI_BYTE, dst, tag, MPI_COMM_WORLD));
    free(buf);
}

static void mt_send_empty(int dst, int tag)
{
    MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, dst, tag, MPI_COMM_WORLD));
}

static void mt_recv_empty(int src, int tag)
{
    MPI_Status st;

    MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st));
    mt_check_status("empty message", &st, src, tag, 0);
}

/* ------------------------------------------------------------- pairs */

/* The partner of this rank in the pair cases, or -1 (the odd rank out). */
static int mt_partner(void)
{
    int p = mt_rank ^ 1;

    return p < mt_size ? p : -1;
}

/* The lower rank of a pair sends first. */
static int mt_is_low(void)
{
    return (mt_rank & 1) == 0;
}

/* Sizes around every boundary a transport or provider is likely to have:
 * the shm cell (8 KiB, eager limit 8104 bytes), the udp eager limit
 * (32 KiB), 64 KiB, 1 MiB, and a large odd size. */
static const size_t mt_sizes[] = {
    0,     1,     2,     7,     8,     63,    64,    65,    4095,  4096,  8103,
    8104,  8105,  8167,  8168,  8169,  8192,  16384, 32767, 32768, 32769, 65535,
    65536, 65537, 100000, MT_MIB - 1, MT_MIB, MT_MIB + 1, 4 * MT_MIB + 1,
};
#define MT_N_SIZES (sizeof(mt_sizes) / sizeof(mt_sizes[0]))

/* ------------------------------------------------------------- cases */

static void case_pingpong(void)
{
    int peer = mt_partner();
    char what[96];

    if (peer < 0)
        return;
    for (size_t s = 0; s < MT_N_SIZES; s++) {
        size_t len = mt_sizes[s];
        int iters = len > 64 * MT_KIB ? 2 : 3;

        for (int it = 0; it < iters; it++) {
            uint64_t ping = mt_seed(1, s, (uint64_t)it, (uint64_t)(mt_rank & ~1));
            uint64_t pong = mt_seed(2, s, (uint64_t)it, (uint64_t)(mt_rank & ~1));

            snprintf(what, sizeof(what), "%zu bytes, iteration %d, from rank %d", len, it, peer);
            if (mt_is_low()) {
                mt_send_pattern(len, peer, 1, ping);
                mt_recv_check(what, len, peer, 1, peer, 1, pong);
            } else {
                mt_recv_check(what, len, peer, 1, peer, 1, ping);
                mt_send_pattern(len, peer, 1, pong);
            }
        }
    }
}

static void case_ring(void)
{
    static const size_t sizes[] = {0, 1, 8105, 65536, MT_MIB + 1};
    int right = (mt_rank + 1) % mt_size;
    int left = (mt_rank + mt_size - 1) % mt_size;
    char what[96];

    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s];
        unsigned char *out = mt_alloc(len);
        unsigned char *in = mt_alloc(len);
        MPI_Request reqs[2];
        MPI_Status st[2];

        /* To the right: the receive posted first. */
        mt_fill(out, len, mt_seed(3, s, (uint64_t)mt_rank, 0));
        MT_CALL(MPI_Irecv(in, (int)len, MPI_BYTE, left, 2, MPI_COMM_WORLD, &reqs[0]));
        MT_CALL(MPI_Isend(out, (int)len, MPI_BYTE, right, 2, MPI_COMM_WORLD, &reqs[1]));
        MT_CALL(MPI_Waitall(2, reqs, st));
        snprintf(what, sizeof(what), "%zu bytes to the right, from rank %d", len, left);
        mt_check_status(what, &st[0], left, 2, len);
        mt_check_pattern(what, in, len, mt_seed(3, s, (uint64_t)left, 0));
        mt_check_guard(what, in, len, len + MT_GUARD);

        /* To the left. */
        memset(in, MT_GUARD_BYTE, len + MT_GUARD);
        mt_fill(out, len, mt_seed(4, s, (uint64_t)mt_rank, 0));
        MT_CALL(MPI_Sendrecv(out, (int)len, MPI_BYTE, left, 3, in, (int)len, MPI_BYTE, right, 3,
                             MPI_COMM_WORLD, &st[0]));
        snprintf(what, sizeof(what), "%zu bytes to the left, from rank %d", len, right);
        mt_check_status(what, &st[0], right, 3, len);
        mt_check_pattern(what, in, len, mt_seed(4, s, (uint64_t)right, 0));
        mt_check_guard(what, in, len, len + MT_GUARD);
        free(out);
        free(in);
    }
}

/* anysource: each sender's messages, by phase and sequence number. */
#define MT_ANY_COUNT 24
#define MT_ANY_CAP (40 * MT_KIB)

static size_t mt_any_len(int seq)
{
    static const size_t sizes[] = {0, 5, 8105, 40000, 64, 32769};

    return sizes[seq % 6];
}

static uint64_t mt_any_seed(int phase, int src, int seq)
{
    return mt_seed(5, (uint64_t)phase, (uint64_t)src, (uint64_t)seq);
}

/* Each sender: phase 0 on tag 10, phase 1 on tags 100+seq, phase 2 on tags
 * 300+seq, all started at once. */
static void mt_any_send(void)
{
    MPI_Request reqs[3 * MT_ANY_COUNT];
    unsigned char *bufs[3 * MT_ANY_COUNT];

    for (int ph = 0; ph < 3; ph++) {
        for (int seq = 0; seq < MT_ANY_COUNT; seq++) {
            int k = ph * MT_ANY_COUNT + seq;
            size_t len = mt_any_len(seq + ph);
            int tag = ph == 0 ? 10 : ph == 1 ? 100 + seq : 300 + seq;

            bufs[k] = mt_alloc(len);
            mt_fill(bufs[k], len, mt_any_seed(ph, mt_rank, seq));
            MT_CALL(MPI_Isend(bufs[k], (int)len, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &reqs[k]));
        }
    }
    MT_CALL(MPI_Waitall(3 * MT_ANY_COUNT, reqs, MPI_STATUSES_IGNORE));
    for (int k = 0; k < 3 * MT_ANY_COUNT; k++)
        free(bufs[k]);
}

/* Receives one message of phase ph with a wildcard receive and checks that
 * it is the next one of its sender. */
static void mt_any_recv_next(int ph, int src, int tag, int *next, unsigned char *buf)
{
    MPI_Status st;
    char what[128];
    int count = -1;

    memset(buf, MT_GUARD_BYTE, MT_ANY_CAP + MT_GUARD);
    MT_CALL(MPI_Recv(buf, (int)MT_ANY_CAP, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st));
    if (st.MPI_SOURCE < 1 || st.MPI_SOURCE >= mt_size)
        mt_fail("phase %d: status source %d out of range", ph, st.MPI_SOURCE);
    int seq = next[st.MPI_SOURCE]++;
    int want_tag = ph == 0 ? 10 : ph == 1 ? 100 + seq : 300 + seq;
    size_t len = mt_any_len(seq + ph);

    MT_CALL(MPI_Get_count(&st, MPI_BYTE, &count));
    snprintf(what, sizeof(what), "phase %d (src %d, tag %d), message %d of rank %d", ph, src, tag,
             seq, st.MPI_SOURCE);
    if (seq >= MT_ANY_COUNT)
        mt_fail("%s: more messages than were sent", what);
    if (st.MPI_TAG != want_tag || count < 0 || (size_t)count != len)
        mt_fail("%s: tag %d count %d, expected tag %d count %zu (order broken?)", what,
                st.MPI_TAG, count, want_tag, len);
    mt_check_pattern(what, buf, len, mt_any_seed(ph, st.MPI_SOURCE, seq));
    mt_check_guard(what, buf, len, MT_ANY_CAP + MT_GUARD);
}

static void mt_any_root(void)
{
    unsigned char *buf = mt_alloc(MT_ANY_CAP);
    int *next = calloc((size_t)mt_size, sizeof(*next));
    int senders = mt_size - 1;

    if (next == NULL)
        mt_fail("out of memory");
    /* Phase 0: MPI_ANY_SOURCE, one tag. */
    for (int i = 0; i < senders * MT_ANY_COUNT; i++)
        mt_any_recv_next(0, MPI_ANY_SOURCE, 10, next, buf);
    /* Phase 1: MPI_ANY_TAG from each sender in turn; tags come in order. */
    memset(next, 0, (size_t)mt_size * sizeof(*next));
    for (int src = 1; src < mt_size; src++) {
        for (int i = 0; i < MT_ANY_COUNT; i++)
            mt_any_recv_next(1, src, MPI_ANY_TAG, next, buf);
    }
    /* Phase 2: both wildcards. */
    memset(next, 0, (size_t)mt_size * sizeof(*next));
    for (int i = 0; i < senders * MT_ANY_COUNT; i++)
        mt_any_recv_next(2, MPI_ANY_SOURCE, MPI_ANY_TAG, next, buf);
    for (int src = 1; src < mt_size; src++) {
        if (next[src] != MT_ANY_COUNT)
            mt_fail("phase 2: %d messages from rank %d, expected %d", next[src], src,
                    MT_ANY_COUNT);
    }
    free(next);
    free(buf);
}

/* Wildcard receives posted before any sender starts: each sender's one
 * message must land in exactly one of them. */
static void mt_any_preposted(void)
{
    int senders = mt_size - 1;

    if (mt_rank != 0) {
        mt_recv_empty(0, 11);
        mt_send_pattern(100 + (size_t)mt_rank, 0, 12, mt_seed(6, (uint64_t)mt_rank, 0, 0));
        return;
    }
    MPI_Request *reqs = malloc((size_t)senders * sizeof(*reqs));
    MPI_Status *st = malloc((size_t)senders * sizeof(*st));
    unsigned char **bufs = malloc((size_t)senders * sizeof(*bufs));
    int *seen = calloc((size_t)mt_size, sizeof(*seen));
    size_t cap = 100 + (size_t)mt_size;
    char what[96];

    if (reqs == NULL || st == NULL || bufs == NULL || seen == NULL)
        mt_fail("out of memory");
    for (int i = 0; i < senders; i++) {
        bufs[i] = mt_alloc(cap);
        MT_CALL(MPI_Irecv(bufs[i], (int)cap, MPI_BYTE, MPI_ANY_SOURCE, 12, MPI_COMM_WORLD,
                          &reqs[i]));
    }
    for (int dst = 1; dst < mt_size; dst++)
        mt_send_empty(dst, 11);
    MT_CALL(MPI_Waitall(senders, reqs, st));
    for (int i = 0; i < senders; i++) {
        int src = st[i].MPI_SOURCE;

        snprintf(what, sizeof(what), "pre-posted wildcard receive %d, from rank %d", i, src);
        if (src < 1 || src >= mt_size || seen[src]++)
            mt_fail("%s: source out of range or seen twice", what);
        mt_check_status(what, &st[i], src, 12, 100 + (size_t)src);
        mt_check_pattern(what, bufs[i], 100 + (size_t)src, mt_seed(6, (uint64_t)src, 0, 0));
        mt_check_guard(what, bufs[i], 100 + (size_t)src, cap + MT_GUARD);
        free(bufs[i]);
    }
    free(seen);
    free(bufs);
    free(st);
    free(reqs);
}

static void case_anysource(void)
{
    if (mt_size < 2)
        return;
    if (mt_rank == 0)
        mt_any_root();
    else
        mt_any_send();
    mt_any_preposted();
}

static const size_t mt_probe_sizes[] = {0, 100, 8105, 70000, MT_MIB + 1};
#define MT_N_PROBE (sizeof(mt_probe_sizes) / sizeof(mt_probe_sizes[0]))

static uint64_t mt_probe_seed(int tag, size_t s, int low)
{
    return mt_seed(7, (uint64_t)tag, s, (uint64_t)low);
}

/* Probes (blocking, or Iprobe in a loop) for the message and checks its
 * envelope, then receives it. */
static void mt_probe_one(int iprobe, int src, int tag, int peer, size_t s)
{
    size_t len = mt_probe_sizes[s];
    MPI_Status st;
    char what[96];

    snprintf(what, sizeof(what), "%s(%d, %d) of %zu bytes", iprobe ? "MPI_Iprobe" : "MPI_Probe",
             src, tag, len);
    if (iprobe) {
        int flag = 0;

        while (!flag)
            MT_CALL(MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, &st));
    } else {
        MT_CALL(MPI_Probe(src, tag, MPI_COMM_WORLD, &st));
    }
    int want_tag = tag == MPI_ANY_TAG ? st.MPI_TAG : tag;
    mt_check_status(what, &st, peer, want_tag, len);
    /* The probe leaves the message in place: the same probe sees it again. */
    if (!iprobe) {
        MPI_Status again;
        MT_CALL(MPI_Probe(src, tag, MPI_COMM_WORLD, &again));
        mt_check_status(what, &again, peer, st.MPI_TAG, len);
    }
    mt_recv_check(what, len, peer, st.MPI_TAG, peer, st.MPI_TAG,
                  mt_probe_seed(st.MPI_TAG, s, peer & ~1));
}

static void mt_check_no_message(const char *what, int src, int tag)
{
    MPI_Status st;
    int flag = 1;

    MT_CALL(MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, &st));
    if (flag)
        mt_fail("%s: MPI_Iprobe(%d, %d) found a message (source %d tag %d) where none was sent",
                what, src, tag, st.MPI_SOURCE, st.MPI_TAG);
}

static void case_probe(void)
{
    int peer = mt_partner();
    /* Tags: 20 for MPI_Probe, 21 for MPI_Iprobe; 29 is never sent. */
    static const int tags[] = {20, 21};

    if (peer < 0)
        return;
    if (mt_is_low()) {
        for (int t = 0; t < 2; t++) {
            for (size_t s = 0; s < MT_N_PROBE; s++)
                mt_send_pattern(mt_probe_sizes[s], peer, tags[t], mt_probe_seed(tags[t], s, mt_rank));
        }
        mt_recv_empty(peer, 22);
        return;
    }
    mt_check_no_message("before any message", MPI_ANY_SOURCE, 29);
    for (size_t s = 0; s < MT_N_PROBE; s++) {
        int src = s % 2 ? MPI_ANY_SOURCE : peer;
        int tag = s % 3 == 2 ? MPI_ANY_TAG : tags[0];

        mt_probe_one(0, src, tag, peer, s);
    }
    for (size_t s = 0; s < MT_N_PROBE; s++) {
        int src = s % 2 ? peer : MPI_ANY_SOURCE;
        int tag = s % 3 == 1 ? MPI_ANY_TAG : tags[1];

        mt_probe_one(1, src, tag, peer, s);
        mt_check_no_message("between messages", peer, 29);
    }
    mt_check_no_message("after all messages", MPI_ANY_SOURCE, MPI_ANY_TAG);
    mt_send_empty(peer, 22);
}

/* mprobe: pairs of messages (a, b) on one tag. */
static const size_t mt_mprobe_pairs[][2] = {
    {0, 8105}, {70000, 1}, {MT_MIB + 1, 3}, {8104, 32769},
};
#define MT_N_MPROBE (sizeof(mt_mprobe_pairs) / sizeof(mt_mprobe_pairs[0]))

static void mt_mprobe_pair(int peer, size_t k)
{
    size_t la = mt_mprobe_pairs[k][0], lb = mt_mprobe_pairs[k][1];
    uint64_t sa = mt_seed(8, k, 0, (uint64_t)(peer & ~1));
    uint64_t sb = mt_seed(8, k, 1, (uint64_t)(peer & ~1));
    int src = k % 2 ? MPI_ANY_SOURCE : peer;
    int tag = k % 4 == 3 ? MPI_ANY_TAG : 30;
    unsigned char *a = mt_alloc(la), *b = mt_alloc(lb);
    MPI_Message ma, mb;
    MPI_Request req;
    MPI_Status st;
    char what[96];
    int flag = 0;

    snprintf(what, sizeof(what), "pair %zu, MPI_Mprobe(%d, %d) of %zu bytes", k, src, tag, la);
    MT_CALL(MPI_Mprobe(src, tag, MPI_COMM_WORLD, &ma, &st));
    mt_check_status(what, &st, peer, 30, la);
    /* The first message is claimed: a probe now sees the second. */
    snprintf(what, sizeof(what), "pair %zu, MPI_Probe after MPI_Mprobe", k);
    MT_CALL(MPI_Probe(src, tag, MPI_COMM_WORLD, &st));
    mt_check_status(what, &st, peer, 30, lb);

    snprintf(what, sizeof(what), "pair %zu, MPI_Mrecv of %zu bytes", k, la);
    MT_CALL(MPI_Mrecv(a, (int)la, MPI_BYTE, &ma, &st));
    if (ma != MPI_MESSAGE_NULL)
        mt_fail("%s: the message handle is not MPI_MESSAGE_NULL afterwards", what);
    mt_check_status(what, &st, peer, 30, la);
    mt_check_pattern(what, a, la, sa);
    mt_check_guard(what, a, la, la + MT_GUARD);

    snprintf(what, sizeof(what), "pair %zu, MPI_Improbe(%d, %d) of %zu bytes", k, src, tag, lb);
    while (!flag)
        MT_CALL(MPI_Improbe(src, tag, MPI_COMM_WORLD, &flag, &mb, &st));
    mt_check_status(what, &st, peer, 30, lb);
    mt_check_no_message(what, src, tag);
    MT_CALL(MPI_Imrecv(b, (int)lb, MPI_BYTE, &mb, &req));
    MT_CALL(MPI_Wait(&req, &st));
    mt_check_status(what, &st, peer, 30, lb);
    mt_check_pattern(what, b, lb, sb);
    mt_check_guard(what, b, lb, lb + MT_GUARD);
    free(a);
    free(b);
}

static void case_mprobe(void)
{
    int peer = mt_partner();

    if (peer < 0)
        return;
    for (size_t k = 0; k < MT_N_MPROBE; k++) {
        if (mt_is_low()) {
            /* Both at once: the peer probes the second before receiving
             * the first. */
            unsigned char *bufs[2];
            MPI_Request reqs[2];

            for (int i = 0; i < 2; i++) {
                size_t len = mt_mprobe_pairs[k][i];

                bufs[i] = mt_alloc(len);
                mt_fill(bufs[i], len, mt_seed(8, k, (uint64_t)i, (uint64_t)mt_rank));
                MT_CALL(MPI_Isend(bufs[i], (int)len, MPI_BYTE, peer, 30, MPI_COMM_WORLD,
                                  &reqs[i]));
            }
            MT_CALL(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
            free(bufs[0]);
            free(bufs[1]);
            mt_recv_empty(peer, 31);
        } else {
            int flag = 1;
            MPI_Message m;
            MPI_Status st;

            MT_CALL(MPI_Improbe(peer, 39, MPI_COMM_WORLD, &flag, &m, &st));
            if (flag)
                mt_fail("MPI_Improbe(%d, 39) found a message where none was sent", peer);
            mt_mprobe_pair(peer, k);
            mt_send_empty(peer, 31);
        }
    }
}

/* Posts a receive that nothing will match, cancels it and checks that it
 * reports being cancelled. */
static void mt_cancel_one(int src, int tag, size_t len)
{
    unsigned char *buf = mt_alloc(len);
    MPI_Request req;
    MPI_Status st;
    int cancelled = 0;

    MT_CALL(MPI_Irecv(buf, (int)len, MPI_BYTE, src, tag, MPI_COMM_WORLD, &req));
    MT_CALL(MPI_Cancel(&req));
    MT_CALL(MPI_Wait(&req, &st));
    MT_CALL(MPI_Test_cancelled(&st, &cancelled));
    if (!cancelled)
        mt_fail("receive (%d, %d) of %zu bytes: MPI_Test_cancelled is false after MPI_Cancel", src,
                tag, len);
    if (req != MPI_REQUEST_NULL)
        mt_fail("receive (%d, %d): request not freed by MPI_Wait", src, tag);
    mt_check_guard("cancelled receive", buf, 0, len + MT_GUARD);
    free(buf);
}

static void case_cancel(void)
{
    int peer = mt_partner();

    /* Nothing is sent on this communicator until every rank has cancelled
     * its receives (the barrier's messages match no receive here). */
    mt_cancel_one(MPI_ANY_SOURCE, 40, 16);
    mt_cancel_one(MPI_ANY_SOURCE, MPI_ANY_TAG, 0);
    if (peer >= 0) {
        mt_cancel_one(peer, 41, 4 * MT_MIB + 1);
        mt_cancel_one(peer, 42, 8105);
    }
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    if (peer < 0)
        return;
    /* The cancelled receives must not take the messages that follow. */
    unsigned char *out41 = mt_alloc(8105), *out40 = mt_alloc(16);
    MPI_Request reqs[2];

    mt_fill(out41, 8105, mt_seed(9, 41, (uint64_t)mt_rank, 0));
    mt_fill(out40, 16, mt_seed(9, 40, (uint64_t)mt_rank, 0));
    MT_CALL(MPI_Isend(out41, 8105, MPI_BYTE, peer, 41, MPI_COMM_WORLD, &reqs[0]));
    MT_CALL(MPI_Isend(out40, 16, MPI_BYTE, peer, 40, MPI_COMM_WORLD, &reqs[1]));
    mt_recv_check("message after cancel, tag 41", 8105, peer, 41, peer, 41,
                  mt_seed(9, 41, (uint64_t)peer, 0));
    mt_recv_check("message after cancel, tag 40", 16, MPI_ANY_SOURCE, 40, peer, 40,
                  mt_seed(9, 40, (uint64_t)peer, 0));
    MT_CALL(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
    free(out41);
    free(out40);
}

/* truncate: (sent, buffer) sizes; each truncated message is followed by
 * one that fits, which must arrive intact. */
static const size_t mt_trunc[][2] = {
    {100, 10}, {8105, 8104}, {70000, 1000}, {MT_MIB + 1, MT_MIB}, {4 * MT_MIB + 1, 0},
};
#define MT_N_TRUNC (sizeof(mt_trunc) / sizeof(mt_trunc[0]))

static void mt_expect_truncate(const char *what, int rc)
{
    int cls = -1;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (rc == MPI_SUCCESS)
        mt_fail("%s: returned MPI_SUCCESS, expected MPI_ERR_TRUNCATE", what);
    MPI_Error_class(rc, &cls);
    if (cls != MPI_ERR_TRUNCATE) {
        MPI_Error_string(rc, s, &len);
        mt_fail("%s: error class %d (%s), expected MPI_ERR_TRUNCATE (%d)", what, cls, s,
                MPI_ERR_TRUNCATE);
    }
}

static void mt_truncate_recv(int peer, size_t k, int nonblocking)
{
    size_t sent = mt_trunc[k][0], cap = mt_trunc[k][1];
    unsigned char *buf = mt_alloc(cap);
    MPI_Status st;
    char what[96];
    int rc;

    snprintf(what, sizeof(what), "%s of %zu bytes into %zu", nonblocking ? "MPI_Wait" : "MPI_Recv",
             sent, cap);
    if (nonblocking) {
        MPI_Request req;
        MT_CALL(MPI_Irecv(buf, (int)cap, MPI_BYTE, peer, 50, MPI_COMM_WORLD, &req));
        mt_send_empty(peer, 51);
        rc = MPI_Wait(&req, &st);
    } else {
        mt_send_empty(peer, 51);
        rc = MPI_Recv(buf, (int)cap, MPI_BYTE, peer, 50, MPI_COMM_WORLD, &st);
    }
    mt_expect_truncate(what, rc);
    mt_check_guard(what, buf, cap, cap + MT_GUARD);
    free(buf);
    snprintf(what, sizeof(what), "message after a truncated one (%zu bytes into %zu)", sent, cap);
    mt_recv_check(what, cap, peer, 50, peer, 50, mt_seed(10, k, 1, (uint64_t)(peer & ~1)));
}

static void case_truncate(void)
{
    int peer = mt_partner();

    if (peer < 0)
        return;
    for (int nb = 0; nb < 2; nb++) {
        for (size_t k = 0; k < MT_N_TRUNC; k++) {
            if (mt_is_low()) {
                /* Sent once the receive is (or is about to be) posted. */
                mt_recv_empty(peer, 51);
                mt_send_pattern(mt_trunc[k][0], peer, 50, mt_seed(10, k, 0, (uint64_t)mt_rank));
                mt_send_pattern(mt_trunc[k][1], peer, 50, mt_seed(10, k, 1, (uint64_t)mt_rank));
            } else {
                mt_truncate_recv(peer, k, nb);
            }
        }
    }
}

static void case_ssend(void)
{
    static const size_t sizes[] = {0, 1, 8105, 70000, MT_MIB + 1};
    int peer = mt_partner();
    char what[96];

    if (peer < 0)
        return;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s];
        uint64_t seed = mt_seed(11, s, (uint64_t)(mt_rank & ~1), 0);

        snprintf(what, sizeof(what), "MPI_Issend of %zu bytes", len);
        if (mt_is_low()) {
            unsigned char *buf = mt_alloc(len);
            MPI_Request req;
            MPI_Status st;
            int done = 0;
            double t0 = mt_now_ms();
            long tests = 0;

            mt_fill(buf, len, seed);
            MT_CALL(MPI_Issend(buf, (int)len, MPI_BYTE, peer, 60, MPI_COMM_WORLD, &req));
            /* The peer posts its receive only after the message on tag 61,
             * so nothing may complete the send before that. */
            while (mt_now_ms() - t0 < MT_SSEND_HOLD_MS || tests < 100) {
                MT_CALL(MPI_Test(&req, &done, &st));
                if (done)
                    mt_fail("%s completed after %ld tests, before the receive was posted", what,
                            tests);
                tests++;
            }
            mt_send_empty(peer, 61);
            MT_CALL(MPI_Wait(&req, &st));
            /* Blocking MPI_Ssend of the same size: completes once received. */
            MT_CALL(MPI_Ssend(buf, (int)len, MPI_BYTE, peer, 62, MPI_COMM_WORLD));
            free(buf);
        } else {
            mt_recv_empty(peer, 61);
            mt_recv_check(what, len, peer, 60, peer, 60, seed);
            mt_recv_check("MPI_Ssend", len, peer, 62, peer, 62, seed);
        }
    }
}

/* order: messages on one tag, sizes chosen by sequence number. */
#define MT_ORDER_COUNT 200

static size_t mt_order_len(int seq)
{
    static const size_t sizes[] = {0, 1, 8104, 8105, 100, 70000, 3, 32769, 8168, 1000};

    return seq % 50 == 49 ? MT_MIB + 1 : sizes[seq % 10];
}

static void mt_order_send(int peer, int round)
{
    MPI_Request reqs[MT_ORDER_COUNT];
    unsigned char *bufs[MT_ORDER_COUNT];

    for (int i = 0; i < MT_ORDER_COUNT; i++) {
        size_t len = mt_order_len(i);

        bufs[i] = mt_alloc(len);
        mt_fill(bufs[i], len, mt_seed(12, (uint64_t)round, (uint64_t)i, (uint64_t)mt_rank));
        MT_CALL(MPI_Isend(bufs[i], (int)len, MPI_BYTE, peer, 70, MPI_COMM_WORLD, &reqs[i]));
    }
    /* Round 0: the peer posts its receives only after this marker, so
     * most messages arrive unexpected. */
    if (round == 0)
        mt_send_empty(peer, 71);
    MT_CALL(MPI_Waitall(MT_ORDER_COUNT, reqs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < MT_ORDER_COUNT; i++)
        free(bufs[i]);
}

/* Every receive has room for 64 bytes more than its message, so a message
 * out of order shows as a wrong count or payload. */
static void mt_order_recv(int peer, int round)
{
    MPI_Request reqs[MT_ORDER_COUNT];
    MPI_Status st[MT_ORDER_COUNT];
    unsigned char *bufs[MT_ORDER_COUNT];
    char what[96];

    if (round == 0)
        mt_recv_empty(peer, 71);
    for (int i = 0; i < MT_ORDER_COUNT; i++) {
        size_t cap = mt_order_len(i) + 64;

        bufs[i] = mt_alloc(cap);
        MT_CALL(MPI_Irecv(bufs[i], (int)cap, MPI_BYTE, i % 3 ? peer : MPI_ANY_SOURCE, 70,
                          MPI_COMM_WORLD, &reqs[i]));
    }
    /* Round 1: the receives are posted before any message is sent. */
    if (round == 1)
        mt_send_empty(peer, 72);
    MT_CALL(MPI_Waitall(MT_ORDER_COUNT, reqs, st));
    for (int i = 0; i < MT_ORDER_COUNT; i++) {
        size_t len = mt_order_len(i);

        snprintf(what, sizeof(what), "round %d (%s), receive %d", round,
                 round ? "pre-posted" : "unexpected", i);
        mt_check_status(what, &st[i], peer, 70, len);
        mt_check_pattern(what, bufs[i], len, mt_seed(12, (uint64_t)round, (uint64_t)i,
                                                    (uint64_t)peer));
        mt_check_guard(what, bufs[i], len + 64, len + 64 + MT_GUARD);
        free(bufs[i]);
    }
}

static void case_order(void)
{
    int peer = mt_partner();

    if (peer < 0)
        return;
    for (int round = 0; round < 2; round++) {
        if (mt_is_low()) {
            if (round == 1)
                mt_recv_empty(peer, 72);
            mt_order_send(peer, round);
        } else {
            mt_order_recv(peer, round);
        }
    }
}

static void mt_alltoall_round(size_t len, int round)
{
    int n = mt_size;
    MPI_Request *reqs = malloc(2 * (size_t)n * sizeof(*reqs));
    MPI_Status *st = malloc(2 * (size_t)n * sizeof(*st));
    unsigned char **in = malloc((size_t)n * sizeof(*in));
    unsigned char **out = malloc((size_t)n * sizeof(*out));
    char what[96];

    if (reqs == NULL || st == NULL || in == NULL || out == NULL)
        mt_fail("out of memory");
    for (int p = 0; p < n; p++) {
        in[p] = mt_alloc(len);
        out[p] = mt_alloc(len);
        mt_fill(out[p], len, mt_seed(13, (uint64_t)round, (uint64_t)mt_rank, (uint64_t)p));
    }
    /* Odd rounds start the sends first. */
    for (int i = 0; i < n; i++) {
        int p = (mt_rank + i) % n;
        int q = (mt_rank + n - i) % n;
        int recv_slot = round % 2 ? n + i : i;
        int send_slot = round % 2 ? i : n + i;

        MT_CALL(MPI_Irecv(in[q], (int)len, MPI_BYTE, q, 80 + round, MPI_COMM_WORLD,
                          &reqs[recv_slot]));
        MT_CALL(MPI_Isend(out[p], (int)len, MPI_BYTE, p, 80 + round, MPI_COMM_WORLD,
                          &reqs[send_slot]));
    }
    MT_CALL(MPI_Waitall(2 * n, reqs, st));
    for (int i = 0; i < n; i++) {
        int q = (mt_rank + n - i) % n;

        snprintf(what, sizeof(what), "round %d, %zu bytes from rank %d", round, len, q);
        mt_check_status(what, &st[round % 2 ? n + i : i], q, 80 + round, len);
        mt_check_pattern(what, in[q], len, mt_seed(13, (uint64_t)round, (uint64_t)q,
                                                   (uint64_t)mt_rank));
        mt_check_guard(what, in[q], len, len + MT_GUARD);
    }
    for (int p = 0; p < n; p++) {
        free(in[p]);
        free(out[p]);
    }
    free(out);
    free(in);
    free(st);
    free(reqs);
}

static void case_alltoall(void)
{
    static const size_t sizes[] = {0, 1, 8105, 32769, 65536, 300000};

    for (int round = 0; round < (int)(sizeof(sizes) / sizeof(sizes[0])); round++)
        mt_alltoall_round(sizes[round], round);
}

/* ------------------------------------------------------------- main */

static const struct {
    const char *name;
    void (*run)(void);
} mt_cases[] = {
    {"pingpong", case_pingpong}, {"ring", case_ring},         {"anysource", case_anysource},
    {"probe", case_probe},       {"mprobe", case_mprobe},     {"cancel", case_cancel},
    {"truncate", case_truncate}, {"ssend", case_ssend},       {"order", case_order},
    {"alltoall", case_alltoall},
};
#define MT_N_CASES (sizeof(mt_cases) / sizeof(mt_cases[0]))

static void mt_run_case(size_t c)
{
    double t0;

    mt_case = mt_cases[c].name;
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    t0 = mt_now_ms();
    alarm(mt_seconds);
    mt_cases[c].run();
    MT_CALL(MPI_Barrier(MPI_COMM_WORLD));
    alarm(0);
    if (mt_rank == 0) {
        printf("mpi_test ok   %-10s %d ranks %8.1f ms\n", mt_case, mt_size, mt_now_ms() - t0);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    char host[MPI_MAX_PROCESSOR_NAME];
    int hostlen = 0;
    const char *secs = getenv("MPI_TEST_SECONDS");
    double t0 = mt_now_ms();

    if (secs != NULL && atoi(secs) > 0)
        mt_seconds = (unsigned)atoi(secs);
    signal(SIGALRM, mt_watchdog);
    alarm(mt_seconds);
    MT_CALL(MPI_Init(&argc, &argv));
    MT_CALL(MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank));
    MT_CALL(MPI_Comm_size(MPI_COMM_WORLD, &mt_size));
    MT_CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MT_CALL(MPI_Get_processor_name(host, &hostlen));
    if (getenv("MPI_TEST_VERBOSE") != NULL)
        printf("mpi_test rank %d/%d on %s, MPI_Init %.0f ms\n", mt_rank, mt_size, host,
               mt_now_ms() - t0);

    for (int a = 1; a < argc; a++) {
        size_t c = 0;

        while (c < MT_N_CASES && strcmp(argv[a], mt_cases[c].name) != 0)
            c++;
        if (c == MT_N_CASES)
            mt_fail("unknown case '%s'", argv[a]);
    }
    int passed = 0;
    for (size_t c = 0; c < MT_N_CASES; c++) {
        int chosen = argc == 1;

        for (int a = 1; a < argc; a++)
            chosen |= strcmp(argv[a], mt_cases[c].name) == 0;
        if (chosen) {
            mt_run_case(c);
            passed++;
        }
    }
    mt_case = "finalize";
    alarm(mt_seconds);
    MT_CALL(MPI_Finalize());
    alarm(0);
    if (mt_rank == 0)
        printf("mpi_test passed %d cases with %d ranks\n", passed, mt_size);
    return 0;
}
