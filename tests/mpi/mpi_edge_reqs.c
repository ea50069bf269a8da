/*
 * Many outstanding requests, completed in random order:
 *  - every rank posts thousands of MPI_Irecv (specific and any source,
 *    specific and any tag mixed) and MPI_Isend to every other rank of
 *    mixed sizes (eager and rendezvous), in shuffled order, and completes
 *    them with MPI_Waitany, MPI_Testsome, MPI_Waitsome or MPI_Testall loops;
 *  - MPI_Issend polled with MPI_Test: not complete before the partner
 *    posts the receive (told by a separate message), complete after;
 *  - MPI_Iprobe(ANY_SOURCE, ANY_TAG) loops draining unexpected messages
 *    of mixed sizes, received by the envelope the probe returned;
 *  - MPI_Improbe + MPI_Imrecv drains of the same.
 */
#include "mpi_check.h"

static uint64_t rng = 12345;

static uint32_t rnd(void)
{
    rng = mc_mix(rng);
    return (uint32_t)(rng >> 11);
}

static const size_t mixed[] = {0, 1, 8, 100, 511, 512, 513, 4000, 8129, 8200, 16000, 65535, 65536, 65537, 200000};
#define NMIXED (sizeof(mixed) / sizeof(mixed[0]))

static size_t size_of(int from, int to, int k)
{
    return mixed[mc_mix((uint64_t)from * 7919 + (uint64_t)to * 104729 + (uint64_t)k) % NMIXED];
}

static uint64_t seed_of(int from, int to, int k)
{
    return mc_mix((uint64_t)from << 40 ^ (uint64_t)to << 20 ^ (uint64_t)k ^ 0x5555);
}

/* Each rank sends per messages to every other rank, tag = k (k-th message
 * to that peer). Receives: specific source + specific tag. Completion by
 * method m. */
static void phase_many(int per, int method)
{
    int peers = mc_size - 1, nr = peers * per, ns = peers * per, n = nr + ns;
    MPI_Request *q = mc_alloc(sizeof(*q) * (size_t)n);
    unsigned char **buf = mc_alloc(sizeof(*buf) * (size_t)n);
    int *order = mc_alloc(sizeof(int) * (size_t)n), *idx = mc_alloc(sizeof(int) * (size_t)n);
    int *info = mc_alloc(sizeof(int) * (size_t)n * 2);
    MPI_Status *sts = mc_alloc(sizeof(*sts) * (size_t)n);
    int left = n;

    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    /* request i < nr: receive from peer p = i / per (skipping self), k = i % per */
    for (int oi = 0; oi < n; oi++) {
        int i = order[oi];
        int recv = i < nr, j = recv ? i : i - nr, p = j / per, k = j % per;
        size_t s;
        if (p >= mc_rank)
            p++;
        info[2 * i] = p;
        info[2 * i + 1] = k;
        if (recv) {
            s = size_of(p, mc_rank, k);
            buf[i] = mc_alloc(s);
            MC_CALL(MPI_Irecv(buf[i], (int)s, MPI_BYTE, p, k, MPI_COMM_WORLD, &q[i]));
        } else {
            s = size_of(mc_rank, p, k);
            buf[i] = mc_alloc(s);
            mc_fill(buf[i], s, seed_of(mc_rank, p, k));
            MC_CALL(MPI_Isend(buf[i], (int)s, MPI_BYTE, p, k, MPI_COMM_WORLD, &q[i]));
        }
    }
    while (left > 0) {
        int got = 0;
        if (method == 0) {
            int which;
            MC_CALL(MPI_Waitany(n, q, &which, &sts[0]));
            if (which == MPI_UNDEFINED)
                mc_fail("Waitany: MPI_UNDEFINED with %d left", left);
            idx[0] = which;
            got = 1;
        } else if (method == 1) {
            MC_CALL(MPI_Testsome(n, q, &got, idx, sts));
            if (got == MPI_UNDEFINED)
                mc_fail("Testsome: MPI_UNDEFINED with %d left", left);
        } else if (method == 2) {
            MC_CALL(MPI_Waitsome(n, q, &got, idx, sts));
            if (got == MPI_UNDEFINED || got == 0)
                mc_fail("Waitsome: %d with %d left", got, left);
        } else {
            int flag = 0;
            MC_CALL(MPI_Testall(n, q, &flag, sts));
            if (flag) {
                got = 0;
                for (int i = 0; i < n; i++)
                    if (buf[i] != NULL) {
                        idx[got] = i;
                        sts[got] = sts[i];
                        got++;
                    }
                /* sts[i] for i < got were copied in increasing order: safe */
            }
        }
        for (int g = 0; g < got; g++) {
            int i = idx[g], p = info[2 * i], k = info[2 * i + 1];
            if (buf[i] == NULL)
                mc_fail("method %d: request %d completed twice", method, i);
            if (i < nr) {
                size_t s = size_of(p, mc_rank, k);
                if (method != 3)
                    mc_status("many recv", &sts[g], p, k, s);
                mc_check("many recv", buf[i], s, seed_of(p, mc_rank, k));
            }
            free(buf[i]);
            buf[i] = NULL;
            left--;
            if (q[i] != MPI_REQUEST_NULL)
                mc_fail("method %d: completed request %d not set to MPI_REQUEST_NULL", method, i);
        }
    }
    free(q);
    free(buf);
    free(order);
    free(idx);
    free(info);
    free(sts);
}

/* Issend to the partner: incomplete until the partner posts. */
static void phase_issend(void)
{
    int peer = mc_rank ^ 1, low = !(mc_rank & 1);
    static const size_t s_list[] = {0, 1, 1000, 8192, 65536, 65537, 1 << 20};

    if (peer >= mc_size)
        return;
    for (size_t k = 0; k < sizeof(s_list) / sizeof(s_list[0]); k++) {
        size_t s = s_list[k];
        unsigned char *b = mc_alloc(s);
        MPI_Request q;
        int flag = 0, go = 0;
        if (low) {
            mc_fill(b, s, seed_of(mc_rank, peer, 900 + (int)k));
            MC_CALL(MPI_Issend(b, (int)s, MPI_BYTE, peer, 900, MPI_COMM_WORLD, &q));
            for (int i = 0; i < 200; i++) {
                MC_CALL(MPI_Test(&q, &flag, MPI_STATUS_IGNORE));
                if (flag)
                    mc_fail("Issend of %zu completed before the receive was posted", s);
                usleep(100);
            }
            MC_CALL(MPI_Send(&go, 1, MPI_INT, peer, 901, MPI_COMM_WORLD));
            while (!flag)
                MC_CALL(MPI_Test(&q, &flag, MPI_STATUS_IGNORE));
        } else {
            MPI_Status st;
            MC_CALL(MPI_Recv(&go, 1, MPI_INT, peer, 901, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MC_CALL(MPI_Recv(b, (int)s, MPI_BYTE, peer, 900, MPI_COMM_WORLD, &st));
            mc_status("Issend", &st, peer, 900, s);
            mc_check("Issend", b, s, seed_of(peer, mc_rank, 900 + (int)k));
        }
        free(b);
    }
}

/* Every rank sends per messages of mixed sizes to every other rank, then
 * a barrier; each drains them by probing. */
static void phase_drain(int per, int matched)
{
    int peers = mc_size - 1, ns = peers * per;
    MPI_Request *q = mc_alloc(sizeof(*q) * (size_t)ns);
    unsigned char **b = mc_alloc(sizeof(*b) * (size_t)ns);
    int *next = calloc((size_t)mc_size, sizeof(int));
    int base = matched ? 3000 : 2000;

    for (int i = 0; i < ns; i++) {
        int p = i % peers, k = i / peers;
        size_t s;
        if (p >= mc_rank)
            p++;
        s = size_of(mc_rank, p, base + k);
        b[i] = mc_alloc(s);
        mc_fill(b[i], s, seed_of(mc_rank, p, base + k));
        MC_CALL(MPI_Isend(b[i], (int)s, MPI_BYTE, p, base + k, MPI_COMM_WORLD, &q[i]));
    }
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    for (int got = 0; got < ns;) {
        MPI_Status st;
        MPI_Message m;
        int flag = 0, count = -1, p, k;
        unsigned char *in;
        if (matched)
            MC_CALL(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m, &st));
        else
            MC_CALL(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        if (!flag)
            continue;
        p = st.MPI_SOURCE;
        k = st.MPI_TAG - base;
        if (p < 0 || p >= mc_size || p == mc_rank)
            mc_fail("drain: probe source %d", p);
        if (k != next[p])
            mc_fail("drain: from %d tag %d, expected %d (non-overtaking)", p, st.MPI_TAG, base + next[p]);
        next[p]++;
        MC_CALL(MPI_Get_count(&st, MPI_BYTE, &count));
        if ((size_t)count != size_of(p, mc_rank, base + k))
            mc_fail("drain: probe count %d, expected %zu", count, size_of(p, mc_rank, base + k));
        in = mc_alloc((size_t)count);
        if (matched) {
            MPI_Request r;
            MC_CALL(MPI_Imrecv(in, count, MPI_BYTE, &m, &r));
            if (m != MPI_MESSAGE_NULL)
                mc_fail("Imrecv did not set the message to MPI_MESSAGE_NULL");
            MC_CALL(MPI_Wait(&r, &st));
        } else {
            MC_CALL(MPI_Recv(in, count, MPI_BYTE, p, st.MPI_TAG, MPI_COMM_WORLD, &st));
        }
        mc_status("drain", &st, p, base + k, (size_t)count);
        mc_check("drain", in, (size_t)count, seed_of(p, mc_rank, base + k));
        free(in);
        got++;
    }
    MC_CALL(MPI_Waitall(ns, q, MPI_STATUSES_IGNORE));
    {
        int flag = 1;
        MPI_Status st;
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
        MC_CALL(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        if (flag)
            mc_fail("drain: a message left: source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
        MC_CALL(MPI_Barrier(MPI_COMM_WORLD)); /* before anyone sends the next phase */
    }
    for (int i = 0; i < ns; i++)
        free(b[i]);
    free(b);
    free(q);
    free(next);
}

int main(int argc, char **argv)
{
    int per;

    mc_init(&argc, &argv, "mpi_edge_reqs");
    alarm(110);
    rng = (uint64_t)mc_rank * 1000003 + 17;
    per = 3000 / (mc_size - 1 > 0 ? mc_size - 1 : 1);
    if (mc_size > 1) {
        for (int m = 0; m < 4; m++) {
            phase_many(per, m);
            MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
            if (mc_rank == 0)
                printf("mpi_edge_reqs: method %d ok (%d requests)\n", m, 2 * per * (mc_size - 1)), fflush(stdout);
        }
        phase_issend();
        phase_drain(400 / (mc_size - 1), 0);
        phase_drain(400 / (mc_size - 1), 1);
    }
    mc_finish();
    return 0;
}
