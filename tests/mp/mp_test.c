/*
 * Multi-process tests of the shm transport, one case per run:
 *
 *   tmxrun -n N mp_test CASE
 *
 *   pingpong   (2 ranks) every size boundary and powers of two to 64 MiB
 *   anysource  (8 ranks) wildcard source and masked tags, per-sender order
 *   order      (2 ranks) non-overtaking across eager and rendezvous
 *   truncate   (2 ranks) short buffers, eager and rendezvous
 *   probe      (2 ranks) peek, claim, mrecv, discard, no message, cancel
 *   peerdeath  (3 ranks) rank 2 dies by SIGKILL; the others' operations on
 *                        it fail, and theirs between each other still work
 *   oversub    (N ranks) ring exchange, meant for more ranks than cores
 *   lonely     (2 ranks) large receives complete while the sender sleeps
 *   busy       (2 ranks) rank 1 sleeps MP_BUSY_S s (default 60) without
 *                        calling tmx: busy, not dead; then all completes
 *   hostgone   (2 ranks) rank 1's host vanishes (the script takes its link
 *                        down): rank 0 sees it fail by the silence limit
 *   alltoall   (N ranks) every pair both ways: small at once, large
 *                        (MP_AA_BYTES, default 100000) at once and in
 *                        shifted rounds
 *   scale      (N ranks) every pair both ways, 8 B to all at once, then
 *                        64 KiB (MP_SCALE_BYTES); then each rank prints
 *                        its sockets, descriptors and memory (mp_proc.h)
 *   twoctx     (N ranks) a second context per rank joins the job too; each
 *                        context's messages reach that context only
 *   threads    (2 ranks) a context in multi-threaded mode; two threads per rank
 *                        exchange with the peer's at once, so both wait and
 *                        send together (run under ThreadSanitizer)
 *   pollwait   (2 ranks) ping-pong of rendezvous messages where each rank waits
 *                        by polling (tmx_request_test and tmx_progress in a
 *                        loop of its own, as Open MPI's ofi MTL does), meant
 *                        for both ranks on one core: polling must yield
 *   deadclaim  (4 ranks) rank 3 stops inside a send to rank 0 (after claiming
 *                        a cell of its ring, or before publishing it:
 *                        MP_DC_STOP=claim:N|publish:N) and rank 1 kills it;
 *                        ranks 1 and 2 still deliver everything to rank 0
 *   helpstop   (2 ranks) rank 1 stops right after taking a chunk of rank 0's
 *                        shared copy; rank 0 kills it and destroys its context
 *
 * With MP_MT=1 in the environment every case runs on a context in
 * multi-threaded mode (threads always does).
 *   flood      (N ranks) ranks 1..N-1 stream eager messages at rank 0 before
 *                        it posts a receive: its peak RSS stays within the
 *                        bound on unexpected memory; each message once, in order
 *
 * Every payload is a pattern derived from what identifies the message (size,
 * iteration, sender, sequence), checked byte by byte, and every receive
 * buffer is followed by a guard region that must come back untouched. A
 * failed check prints "mp_test FAIL case=C rank=R: what, with the values"
 * on stderr and exits 1, which makes tmxrun stop the job and exit non-zero.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "mp_proc.h"
#include "tl/shm/shm_layout.h"
#include "tmx.h"

/* The shm transport's protocol switch (eager_limit) and the longest
 * eager message of one cell, from its layout, so that the boundary tests
 * follow the layout. */
#define MP_EAGER ((size_t)SHM_EAGER_LIMIT)
#define MP_CELL_EAGER ((size_t)SHM_CELL_EAGER)
#define MP_CELL ((size_t)SHM_CELL_PAYLOAD)
#define MP_MIB ((size_t)1 << 20)

#define MP_GUARD 4096               /* bytes checked after each receive buffer */
#define MP_GUARD_BYTE 0xa5
#define MP_WAIT_US 30000000         /* no single operation may take longer */
#define MP_BATCH_MAX 100            /* unexpected batches fit in one shm ring */

static tmx_context_h mp_ctx;
static uint32_t mp_rank;
static uint32_t mp_size;
static const char *mp_case = "?";

/* Operations report through their request only: no CQ to drain. */
static const tmx_op_params_t mp_no_cq = {.field_mask = TMX_OP_FIELD_FLAGS,
                                         .flags = TMX_OP_FLAG_NO_CQ};

/* ------------------------------------------------------------ reporting */

static void mp_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void mp_fail(const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "mp_test FAIL case=%s rank=%u: %s\n", mp_case, mp_rank, msg);
    exit(1);
}

static int64_t mp_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------- patterns */

static uint64_t mp_mix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* The pattern's seed for a message identified by three numbers. */
static uint64_t mp_seed(uint64_t a, uint64_t b, uint64_t c)
{
    return mp_mix(a ^ mp_mix(b ^ mp_mix(c)));
}

/* Byte i of a pattern is byte i%8 of mp_mix(seed + i - i%8). */
static void mp_fill(unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = mp_mix(seed + i);
        memcpy(p + i, &w, len - i < 8 ? len - i : 8);
    }
}

/* The first byte of p[0..len) that is not the pattern's, or len. */
static size_t mp_pattern_diff(const unsigned char *p, size_t len, uint64_t seed, unsigned *want)
{
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = mp_mix(seed + i);
        const unsigned char *wb = (const unsigned char *)&w;
        size_t n = len - i < 8 ? len - i : 8;

        if (memcmp(p + i, wb, n) == 0)
            continue;
        for (size_t k = 0; k < n; k++) {
            if (p[i + k] != wb[k]) {
                *want = wb[k];
                return i + k;
            }
        }
    }
    return len;
}

static void mp_check_pattern(const char *what, const unsigned char *p, size_t len, uint64_t seed)
{
    unsigned want = 0;
    size_t at = mp_pattern_diff(p, len, seed, &want);

    if (at != len)
        mp_fail("%s: payload byte %zu of %zu is 0x%02x, expected 0x%02x", what, at, len, p[at],
                want);
}

/* A receive buffer of cap bytes and the guard after it. */
static unsigned char *mp_buf_alloc(size_t cap)
{
    unsigned char *p = malloc(cap + MP_GUARD);

    if (p == NULL)
        mp_fail("out of memory for a %zu-byte buffer", cap);
    memset(p, MP_GUARD_BYTE, cap + MP_GUARD);
    return p;
}

static void mp_guard_set(unsigned char *p, size_t from, size_t to)
{
    memset(p + from, MP_GUARD_BYTE, to - from);
}

/* Bytes [from, to) must still hold the guard byte. */
static void mp_check_guard(const char *what, const unsigned char *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (p[i] != MP_GUARD_BYTE)
            mp_fail("%s: byte %zu, past the %zu bytes that may be written, changed to 0x%02x",
                    what, i, from, p[i]);
    }
}

/* ------------------------------------------------------------ operations */

static void mp_barrier(const char *where)
{
    tmx_status_t st = tmx_job_barrier(mp_ctx);

    if (st != TMX_OK)
        mp_fail("barrier %s: %s", where, tmx_strerror(st));
}

/* Starts a send, retrying while the peer's ring is full (TMX_ERR_AGAIN). */
static tmx_request_h mp_send_p(tmx_peer_t peer, const void *buf, size_t len, uint64_t tag,
                               const tmx_op_params_t *params)
{
    int64_t deadline = mp_now_us() + MP_WAIT_US;
    tmx_request_h req = NULL;
    unsigned tries = 0;

    for (;;) {
        tmx_status_t st = tmx_tsend(mp_ctx, peer, buf, len, tag, params, &req);
        if (st == TMX_OK)
            return req;
        if (st != TMX_ERR_AGAIN)
            mp_fail("tmx_tsend of %zu bytes to peer %u tag 0x%" PRIx64 ": %s", len, peer, tag,
                    tmx_strerror(st));
        if (tmx_progress(mp_ctx) < 0)
            mp_fail("tmx_progress failed while a send waited for room");
        if (++tries % 64 == 0) {
            if (mp_now_us() > deadline)
                mp_fail("send of %zu bytes to peer %u: TMX_ERR_AGAIN for %d s", len, peer,
                        MP_WAIT_US / 1000000);
            sched_yield();
        }
    }
}

static tmx_request_h mp_send(tmx_peer_t peer, const void *buf, size_t len, uint64_t tag)
{
    return mp_send_p(peer, buf, len, tag, &mp_no_cq);
}

/* A send carrying remote completion data. */
static tmx_request_h mp_send_data(tmx_peer_t peer, const void *buf, size_t len, uint64_t tag,
                                  uint64_t data)
{
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS | TMX_OP_FIELD_DATA,
                         .flags = TMX_OP_FLAG_NO_CQ,
                         .data = data};

    return mp_send_p(peer, buf, len, tag, &p);
}

static tmx_request_h mp_recv(tmx_peer_t peer, void *buf, size_t cap, uint64_t tag, uint64_t ignore)
{
    tmx_request_h req = NULL;
    tmx_status_t st = tmx_trecv(mp_ctx, peer, buf, cap, tag, ignore, &mp_no_cq, &req);

    if (st != TMX_OK)
        mp_fail("tmx_trecv of %zu bytes from peer %u tag 0x%" PRIx64 ": %s", cap, peer, tag,
                tmx_strerror(st));
    return req;
}

/* Waits at most timeout_us, releases the request, returns its status. */
static tmx_status_t mp_wait_for(tmx_request_h req, int64_t timeout_us, tmx_completion_t *c,
                                const char *what)
{
    int64_t t0 = mp_now_us();
    tmx_status_t st = tmx_request_wait(req, timeout_us, c);

    if (st == TMX_ERR_TIMEOUT)
        mp_fail("%s: not complete after %.1f s", what, (double)(mp_now_us() - t0) / 1e6);
    tmx_request_free(req);
    return st;
}

static tmx_status_t mp_wait(tmx_request_h req, tmx_completion_t *c, const char *what)
{
    return mp_wait_for(req, MP_WAIT_US, c, what);
}

/* Checks a receive's completion against what the sender sent. */
static void mp_check_recv(const char *what, tmx_status_t st, const tmx_completion_t *c,
                          tmx_peer_t src, uint64_t tag, size_t cap, size_t msg_len)
{
    tmx_status_t want = msg_len > cap ? TMX_ERR_TRUNCATED : TMX_OK;
    size_t len = msg_len > cap ? cap : msg_len;

    if (st != want || c->status != want)
        mp_fail("%s: receive returned %s (completion %s), expected %s", what, tmx_strerror(st),
                tmx_strerror(c->status), tmx_strerror(want));
    if (c->op != TMX_OP_TRECV || c->source != src || c->tag != tag)
        mp_fail("%s: completion op %d source %u tag 0x%" PRIx64 ", expected op %d source %u "
                "tag 0x%" PRIx64, what, (int)c->op, c->source, c->tag, (int)TMX_OP_TRECV, src, tag);
    if (c->length != len || c->msg_length != msg_len)
        mp_fail("%s: completion length %zu msg_length %zu, expected %zu and %zu", what,
                c->length, c->msg_length, len, msg_len);
}

static void mp_check_data(const char *what, const tmx_completion_t *c, uint64_t data)
{
    if (!c->has_data || c->data != data)
        mp_fail("%s: remote data %s0x%" PRIx64 ", expected 0x%" PRIx64, what,
                c->has_data ? "" : "absent, ", c->data, data);
}

/* Waits for a send and checks its completion. */
static void mp_wait_send(tmx_request_h req, tmx_peer_t dst, uint64_t tag, size_t len,
                         const char *what)
{
    tmx_completion_t c;
    tmx_status_t st = mp_wait(req, &c, what);

    if (st != TMX_OK || c.status != TMX_OK)
        mp_fail("%s: send completed with %s", what, tmx_strerror(st));
    if (c.op != TMX_OP_TSEND || c.source != dst || c.tag != tag || c.length != len)
        mp_fail("%s: send completion op %d dest %u tag 0x%" PRIx64 " length %zu, expected "
                "op %d dest %u tag 0x%" PRIx64 " length %zu", what, (int)c.op, c.source, c.tag,
                c.length, (int)TMX_OP_TSEND, dst, tag, len);
}

/* Eager sends complete inside tmx_tsend(); rendezvous ones only on the
 * receiver's FIN, which needs a later progress call. This proves that the
 * sizes around the limit really take the protocols they are meant to. */
static void mp_check_protocol(tmx_request_h req, size_t len, const char *what)
{
    const char *tls = getenv("TMX_TRANSPORTS");
    tmx_status_t st = tmx_request_test(req, NULL);
    int eager = len <= MP_EAGER;

    /* The sizes are shm's boundaries; other transports have their own
     * limits, and these cases then only check the data. A job across
     * hosts (TMX_HOST set by tmxrun --hosts) may reach its peer by udp. */
    if ((tls != NULL && strstr(tls, "shm") == NULL) || getenv("TMX_HOST") != NULL ||
        (getenv("TMX_PROTO") != NULL && *getenv("TMX_PROTO") != '\0'))
        return; /* another table (TMX_PROTO) moves the boundary */
    if (eager && st != TMX_OK)
        mp_fail("%s: a %zu-byte send (eager limit %zu) was not complete at once: %s", what, len,
                MP_EAGER, tmx_strerror(st));
    /* With the offload engine, the FIN may have come and been handled by
     * the engine's thread already. */
    if (!eager && st != TMX_INPROGRESS &&
        (getenv("TMX_OFFLOAD") == NULL || strcmp(getenv("TMX_OFFLOAD"), "1") != 0))
        mp_fail("%s: a %zu-byte send (eager limit %zu) completed before any FIN: %s", what, len,
                MP_EAGER, tmx_strerror(st));
}

/* Takes every packet already in our ring into the matcher. */
static void mp_drain(void)
{
    int n;

    while ((n = tmx_progress(mp_ctx)) > 0)
        ;
    if (n < 0)
        mp_fail("tmx_progress: %s", tmx_strerror((tmx_status_t)n));
}

/* Polls tmx_tprobe until a message matches (peek), for at most MP_WAIT_US. */
static void mp_probe_until(tmx_peer_t src, uint64_t tag, uint64_t ignore, tmx_completion_t *info,
                           const char *what)
{
    int64_t deadline = mp_now_us() + MP_WAIT_US;
    tmx_status_t st;

    while ((st = tmx_tprobe(mp_ctx, src, tag, ignore, 0, info, NULL)) == TMX_ERR_NO_MESSAGE) {
        if (mp_now_us() > deadline)
            mp_fail("%s: no message from peer %u tag 0x%" PRIx64 " after %d s", what, src, tag,
                    MP_WAIT_US / 1000000);
        sched_yield();
    }
    if (st != TMX_OK)
        mp_fail("%s: tmx_tprobe: %s", what, tmx_strerror(st));
}

/* -------------------------------------------------------------- pingpong */

#define PP_TAG UINT64_C(0x5050000000000000)

/* MP_MAX_BYTES caps the sizes, for lossy links where 64 MiB takes long. */
static size_t pp_max(void)
{
    const char *v = getenv("MP_MAX_BYTES");

    return v != NULL && atol(v) > 0 ? (size_t)atol(v) : 64 * MP_MIB;
}

static size_t pp_sizes(size_t *out)
{
    static const size_t fixed[] = {0, 1, MP_CELL_EAGER, MP_CELL_EAGER + 1, MP_CELL - 1, MP_CELL,
                                   MP_CELL + 1, 12345, 2 * MP_CELL + 1, MP_EAGER - 1, MP_EAGER,
                                   MP_EAGER + 1, MP_MIB - 1, 3 * MP_MIB + 7};
    size_t n = 0, max = pp_max();

    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        if (fixed[i] <= max)
            out[n++] = fixed[i];
    }
    for (size_t s = 2; s <= 64 * MP_MIB && s <= max; s *= 2)
        out[n++] = s;
    return n;
}

/* Big messages get two rounds, one preposted and one unexpected: the
 * byte checks, not the copies, cost. */
static unsigned pp_iters(size_t size)
{
    return size < MP_MIB ? 10 : 2;
}

static uint64_t pp_tag(size_t size, unsigned iter, unsigned dir)
{
    return PP_TAG | ((uint64_t)size << 8) | (iter << 1) | dir;
}

/* One direction: send the pattern for (size, iter, dir) to peer. */
static void pp_send(tmx_peer_t peer, unsigned char *sbuf, size_t size, unsigned iter, unsigned dir,
                    const char *what)
{
    uint64_t tag = pp_tag(size, iter, dir);
    tmx_request_h req;

    mp_fill(sbuf, size, mp_seed(size, iter, dir));
    req = mp_send(peer, sbuf, size, tag);
    mp_check_protocol(req, size, what);
    mp_wait_send(req, peer, tag, size, what);
}

/* One direction: receive and check. Odd iterations let the message arrive
 * first (peek until it is there), so both the expected and the unexpected
 * paths are taken at every size. */
static void pp_recv(tmx_peer_t peer, unsigned char *rbuf, size_t size, unsigned iter, unsigned dir,
                    const char *what)
{
    uint64_t tag = pp_tag(size, iter, dir);
    tmx_completion_t c, info;
    tmx_status_t st;

    mp_guard_set(rbuf, size, size + MP_GUARD);
    if (iter % 2 == 1) {
        mp_probe_until(peer, tag, TMX_TAG_EXACT, &info, what);
        if (info.msg_length != size || info.source != peer || info.tag != tag)
            mp_fail("%s: probe saw %zu bytes from %u tag 0x%" PRIx64, what, info.msg_length,
                    info.source, info.tag);
    }
    st = mp_wait(mp_recv(peer, rbuf, size, tag, TMX_TAG_EXACT), &c, what);
    mp_check_recv(what, st, &c, peer, tag, size, size);
    if (c.has_data)
        mp_fail("%s: remote data reported, none was sent", what);
    mp_check_pattern(what, rbuf, size, mp_seed(size, iter, dir));
    mp_check_guard(what, rbuf, size, size + MP_GUARD);
}

static void case_pingpong(void)
{
    size_t sizes[64];
    size_t n = pp_sizes(sizes);
    unsigned char *sbuf = mp_buf_alloc(64 * MP_MIB), *rbuf = mp_buf_alloc(64 * MP_MIB);
    tmx_peer_t peer = 1 - mp_rank;
    char what[128];

    for (size_t i = 0; i < n; i++) {
        for (unsigned it = 0; it < pp_iters(sizes[i]); it++) {
            size_t sz = sizes[i];

            snprintf(what, sizeof(what), "pingpong size=%zu iter=%u (ping 0->1, pong 1->0)", sz,
                     it);
            if (mp_rank == 0) {
                pp_send(peer, sbuf, sz, it, 0, what);
                pp_recv(peer, rbuf, sz, it, 1, what);
            } else {
                pp_recv(peer, rbuf, sz, it, 0, what);
                pp_send(peer, sbuf, sz, it, 1, what);
            }
        }
    }
    free(sbuf);
    free(rbuf);
    if (mp_rank == 0)
        printf("pingpong: %zu sizes from 0 to %zu bytes, eager limit %zu\n", n, sizes[n - 1],
               MP_EAGER);
}

/* ------------------------------------------------------------- anysource */

#define AS_K 64                         /* messages per sender */
#define AS_WINDOW 32                    /* receives rank 0 keeps posted */
#define AS_CLASS UINT64_C(0xa5)                /* top byte of every counted tag */
#define AS_DECOY UINT64_C(0x5a)                /* top byte of one decoy per sender */
#define AS_MAX_SIZE (MP_MIB + 1)

static size_t as_size(uint32_t sender, uint32_t seq)
{
    static const size_t sizes[] = {0, 1, 64, MP_EAGER - 1, MP_EAGER, MP_EAGER + 1, MP_CELL,
                                   3000, 100000, 65539, MP_MIB + 1, 17};
    return sizes[(seq + sender) % (sizeof(sizes) / sizeof(sizes[0]))];
}

static uint64_t as_tag(uint64_t cls, uint32_t sender, uint32_t seq)
{
    return cls << 56 | (uint64_t)sender << 32 | seq;
}

/* Masks that all keep the class bits apart (0xa5 vs 0x5a differ in both
 * nibbles) but otherwise ignore sender and sequence. */
static uint64_t as_ignore(unsigned i)
{
    static const uint64_t masks[] = {UINT64_C(0x00ffffffffffffff), UINT64_C(0x0fffffffffffffff),
                                     UINT64_C(0xf0ffffffffffffff)};
    return masks[i % 3];
}

static void as_send_all(void)
{
    unsigned char *bufs[AS_K];
    tmx_request_h reqs[AS_K + 1];
    char what[96];
    uint64_t decoy = as_tag(AS_DECOY, mp_rank, 0);

    /* The decoy goes first: a receive that ignored its mask would take it. */
    reqs[AS_K] = mp_send_data(0, &mp_rank, sizeof(mp_rank), decoy, decoy);
    for (uint32_t s = 0; s < AS_K; s++) {
        size_t len = as_size(mp_rank, s);
        uint64_t tag = as_tag(AS_CLASS, mp_rank, s);

        bufs[s] = mp_buf_alloc(len);
        mp_fill(bufs[s], len, mp_seed(mp_rank, s, len));
        reqs[s] = mp_send_data(0, bufs[s], len, tag, mp_mix(tag));
    }
    for (uint32_t s = 0; s <= AS_K; s++) {
        snprintf(what, sizeof(what), "anysource send seq=%u", s);
        if (s < AS_K)
            mp_wait_send(reqs[s], 0, as_tag(AS_CLASS, mp_rank, s), as_size(mp_rank, s), what);
        else
            mp_wait_send(reqs[s], 0, decoy, sizeof(mp_rank), what);
    }
    for (uint32_t s = 0; s < AS_K; s++)
        free(bufs[s]);
}

typedef struct as_state {
    uint32_t next_seq[64];              /* per sender: the seq due next */
    unsigned char seen[64][AS_K];
} as_state_t;

/* Checks the n-th completed wildcard receive. */
static void as_check_one(as_state_t *s, unsigned n, tmx_status_t st, const tmx_completion_t *c,
                         const unsigned char *buf)
{
    uint32_t sender = (uint32_t)(c->tag >> 32) & 0xffffff, seq = (uint32_t)c->tag;
    char what[128];

    snprintf(what, sizeof(what), "anysource receive #%u (tag 0x%" PRIx64 " from %u, %zu bytes)",
             n, c->tag, c->source, c->msg_length);
    if (c->tag >> 56 != AS_CLASS)
        mp_fail("%s: a receive masked for class 0x%" PRIx64 " took another class", what, AS_CLASS);
    if (sender == 0 || sender >= mp_size || seq >= AS_K)
        mp_fail("%s: tag names no message that was sent", what);
    mp_check_recv(what, st, c, sender, c->tag, AS_MAX_SIZE, as_size(sender, seq));
    mp_check_data(what, c, mp_mix(c->tag));
    if (s->seen[sender][seq]++)
        mp_fail("%s: sender %u seq %u received twice", what, sender, seq);
    if (seq != s->next_seq[sender])
        mp_fail("%s: sender %u's seq %u overtook seq %u", what, sender, seq, s->next_seq[sender]);
    s->next_seq[sender]++;
    mp_check_pattern(what, buf, c->length, mp_seed(sender, seq, c->length));
    mp_check_guard(what, buf, AS_MAX_SIZE, AS_MAX_SIZE + MP_GUARD);
}

static void as_post(tmx_request_h *req, unsigned char *buf, unsigned i)
{
    *req = mp_recv(TMX_ANY_SOURCE, buf, AS_MAX_SIZE, as_tag(AS_CLASS, 0, 0), as_ignore(i));
}

/* The decoys, received by exact source and tag once the rest are in. */
static void as_recv_decoys(unsigned char *buf)
{
    char what[64];

    for (uint32_t r = 1; r < mp_size; r++) {
        uint64_t tag = as_tag(AS_DECOY, r, 0);
        tmx_completion_t c;
        tmx_status_t st = mp_wait(mp_recv(r, buf, AS_MAX_SIZE, tag, TMX_TAG_EXACT), &c, "decoy");

        snprintf(what, sizeof(what), "anysource decoy from %u", r);
        mp_check_recv(what, st, &c, r, tag, AS_MAX_SIZE, sizeof(uint32_t));
        mp_check_data(what, &c, tag);
        if (memcmp(buf, &r, sizeof(r)) != 0)
            mp_fail("%s: wrong payload", what);
    }
}

static void as_recv_all(void)
{
    unsigned total = (mp_size - 1) * AS_K, posted = 0;
    tmx_request_h reqs[AS_WINDOW];
    unsigned char *bufs[AS_WINDOW];
    as_state_t *s = calloc(1, sizeof(*s));

    if (mp_size > 64 || s == NULL)
        mp_fail("anysource: at most 64 ranks");
    for (unsigned w = 0; w < AS_WINDOW; w++)
        bufs[w] = mp_buf_alloc(AS_MAX_SIZE);
    for (; posted < AS_WINDOW && posted < total; posted++)
        as_post(&reqs[posted], bufs[posted], posted);
    for (unsigned n = 0; n < total; n++) {
        unsigned w = n % AS_WINDOW;
        tmx_completion_t c;
        tmx_status_t st = mp_wait(reqs[w], &c, "anysource receive");

        as_check_one(s, n, st, &c, bufs[w]);
        if (posted < total)
            as_post(&reqs[w], bufs[w], posted++);
    }
    for (uint32_t r = 1; r < mp_size; r++) {
        if (s->next_seq[r] != AS_K)
            mp_fail("anysource: got %u of sender %u's %u messages", s->next_seq[r], r, AS_K);
    }
    as_recv_decoys(bufs[0]);
    printf("anysource: %u messages from %u senders, each once and in order\n", total, mp_size - 1);
    for (unsigned w = 0; w < AS_WINDOW; w++)
        free(bufs[w]);
    free(s);
}

static void case_anysource(void)
{
    if (mp_rank == 0)
        as_recv_all();
    else
        as_send_all();
}

/* ---------------------------------------------------------------- batches */

/* One message of a batch: its length and the receive buffer's capacity. */
typedef struct mp_msg {
    size_t len;
    size_t cap;
} mp_msg_t;

enum batch_mode {
    BATCH_UNEXPECTED, /* every message is in the matcher before any receive */
    BATCH_PREPOSTED,  /* every receive is posted before any message is sent */
    BATCH_MIXED       /* the first half unexpected, the rest preposted */
};

static const char *const batch_mode_names[] = {"unexpected", "preposted", "mixed"};

typedef struct batch {
    const char *label;
    const mp_msg_t *m;
    unsigned n;
    uint64_t tag;
    int same_tag;       /* one tag for all: order is the only thing to go by */
    enum batch_mode mode;
    unsigned round;
} batch_t;

static uint64_t batch_tag(const batch_t *b, unsigned i)
{
    return b->same_tag ? b->tag : b->tag | i;
}

static uint64_t batch_data(const batch_t *b, unsigned i)
{
    return ((uint64_t)b->round << 32) | i;
}

static void batch_send_range(const batch_t *b, unsigned char **bufs, tmx_request_h *reqs,
                             unsigned from, unsigned to)
{
    for (unsigned i = from; i < to; i++) {
        bufs[i] = mp_buf_alloc(b->m[i].len);
        mp_fill(bufs[i], b->m[i].len, mp_seed(b->round, i, b->m[i].len));
        reqs[i] = mp_send_data(0, bufs[i], b->m[i].len, batch_tag(b, i), batch_data(b, i));
    }
}

/* Rank 1's side; the barriers pair with batch_recv()'s. */
static void batch_send(const batch_t *b)
{
    unsigned char *bufs[MP_BATCH_MAX];
    tmx_request_h reqs[MP_BATCH_MAX];
    unsigned half = b->mode == BATCH_MIXED ? b->n / 2 : b->n;
    char what[128];

    if (b->mode == BATCH_PREPOSTED)
        mp_barrier("before preposted sends");
    else
        batch_send_range(b, bufs, reqs, 0, half);
    if (b->mode != BATCH_PREPOSTED)
        mp_barrier("after unexpected sends");
    if (b->mode == BATCH_MIXED)
        mp_barrier("after the receives are posted");
    if (b->mode != BATCH_UNEXPECTED)
        batch_send_range(b, bufs, reqs, b->mode == BATCH_MIXED ? half : 0, b->n);
    for (unsigned i = 0; i < b->n; i++) {
        snprintf(what, sizeof(what), "%s %s send #%u (%zu bytes)", b->label,
                 batch_mode_names[b->mode], i, b->m[i].len);
        mp_wait_send(reqs[i], 0, batch_tag(b, i), b->m[i].len, what);
        free(bufs[i]);
    }
}

static void batch_check(const batch_t *b, unsigned i, tmx_status_t st, const tmx_completion_t *c,
                        const unsigned char *buf)
{
    char what[160];

    snprintf(what, sizeof(what), "%s %s round %u receive #%u (message %zu bytes, buffer %zu)",
             b->label, batch_mode_names[b->mode], b->round, i, b->m[i].len, b->m[i].cap);
    if (c->has_data && c->data != batch_data(b, i) && (c->data >> 32) == b->round)
        mp_fail("%s: got message #%" PRIu64 " instead: order broken", what,
                c->data & 0xffffffffu);
    mp_check_data(what, c, batch_data(b, i));
    mp_check_recv(what, st, c, 1, batch_tag(b, i), b->m[i].cap, b->m[i].len);
    mp_check_pattern(what, buf, c->length, mp_seed(b->round, i, b->m[i].len));
    mp_check_guard(what, buf, b->m[i].cap, b->m[i].cap + MP_GUARD);
}

/* Rank 0's side. Packets sent before a barrier are in our ring after it;
 * mp_drain() moves them into the matcher, so they are truly unexpected. */
static void batch_recv(const batch_t *b)
{
    unsigned char *bufs[MP_BATCH_MAX];
    tmx_request_h reqs[MP_BATCH_MAX];

    if (b->mode != BATCH_PREPOSTED) {
        mp_barrier("after unexpected sends");
        mp_drain();
    }
    for (unsigned i = 0; i < b->n; i++) {
        bufs[i] = mp_buf_alloc(b->m[i].cap);
        reqs[i] = mp_recv(1, bufs[i], b->m[i].cap, batch_tag(b, i), TMX_TAG_EXACT);
    }
    if (b->mode == BATCH_PREPOSTED)
        mp_barrier("before preposted sends");
    if (b->mode == BATCH_MIXED)
        mp_barrier("after the receives are posted");
    for (unsigned i = 0; i < b->n; i++) {
        tmx_completion_t c;
        tmx_status_t st = mp_wait(reqs[i], &c, b->label);

        batch_check(b, i, st, &c, bufs[i]);
        free(bufs[i]);
    }
}

static void batch_run(const batch_t *b)
{
    if (b->n > MP_BATCH_MAX)
        mp_fail("%s: batch of %u messages, at most %d fit", b->label, b->n, MP_BATCH_MAX);
    if (mp_rank == 0)
        batch_recv(b);
    else
        batch_send(b);
    mp_barrier(b->label);
}

/* ------------------------------------------------------------------ order */

#define ORDER_N 96

static void case_order(void)
{
    static const size_t cycle[] = {MP_EAGER - 1, MP_EAGER + 1, MP_EAGER, MP_CELL + 1, 0,
                                   200001, 1, MP_MIB, MP_CELL - 1, 65536, MP_EAGER + 1, MP_EAGER};
    mp_msg_t m[ORDER_N];

    for (unsigned i = 0; i < ORDER_N; i++) {
        m[i].len = cycle[i % (sizeof(cycle) / sizeof(cycle[0]))];
        m[i].cap = m[i].len;
    }
    for (unsigned mode = BATCH_UNEXPECTED; mode <= BATCH_MIXED; mode++) {
        batch_t b = {"order", m, ORDER_N, UINT64_C(0x0d0d000000000000), 1, mode, mode + 1};
        batch_run(&b);
    }
    if (mp_rank == 0)
        printf("order: %d same-tag messages in order, unexpected, preposted and mixed\n", ORDER_N);
}

/* --------------------------------------------------------------- truncate */

static void case_truncate(void)
{
    static const mp_msg_t m[] = {
        {100, 50}, {MP_EAGER, MP_EAGER - 1}, {MP_EAGER, 0}, {1, 0}, {MP_EAGER, 1},
        {MP_EAGER + 1, MP_EAGER}, {MP_EAGER + 1, 1}, {MP_CELL + 1, MP_CELL},
        {MP_MIB, 1000}, {3 * MP_MIB + 7, MP_MIB - 1}, {2 * MP_MIB, 0},
        /* not truncated, between the others: the same checks must pass */
        {MP_EAGER, MP_EAGER}, {MP_EAGER + 1, MP_EAGER + 1}, {1000, 4000}, {MP_MIB, 2 * MP_MIB},
    };
    unsigned n = sizeof(m) / sizeof(m[0]);

    for (unsigned mode = BATCH_UNEXPECTED; mode <= BATCH_PREPOSTED; mode++) {
        batch_t b = {"truncate", m, n, UINT64_C(0x7700000000000000), 0, mode, 10 + mode};
        batch_run(&b);
    }
    if (mp_rank == 0)
        printf("truncate: %u messages into short buffers, unexpected and preposted\n", n);
}

/* ------------------------------------------------------------------ probe */

#define PR_TAG UINT64_C(0x9900000000000000)
#define PR_EAGER_LEN 1000
#define PR_RNDV_LEN (MP_MIB + 3)
#define PR_DISCARD_LEN (2 * MP_MIB)

enum { PR_T_EAGER = 1, PR_T_RNDV, PR_T_DISCARD, PR_T_DISCARD_EAGER, PR_T_NONE, PR_T_CANCEL };

static void pr_expect_probe(tmx_peer_t src, unsigned t, size_t len, const char *what)
{
    tmx_completion_t info;
    tmx_status_t st = tmx_tprobe(mp_ctx, src, PR_TAG | t, TMX_TAG_EXACT, 0, &info, NULL);

    if (st != TMX_OK)
        mp_fail("%s: peek found nothing (%s)", what, tmx_strerror(st));
    if (info.source != 1 || info.tag != (PR_TAG | t) || info.msg_length != len)
        mp_fail("%s: peek saw source %u tag 0x%" PRIx64 " length %zu, expected 1, 0x%" PRIx64
                ", %zu", what, info.source, info.tag, info.msg_length, PR_TAG | t, len);
}

static void pr_expect_none(tmx_peer_t src, unsigned t, const char *what)
{
    tmx_status_t st = tmx_tprobe(mp_ctx, src, PR_TAG | t, TMX_TAG_EXACT, 0, NULL, NULL);

    if (st != TMX_ERR_NO_MESSAGE)
        mp_fail("%s: probe returned %s, expected TMX_ERR_NO_MESSAGE", what, tmx_strerror(st));
}

static tmx_message_h pr_claim(unsigned t, size_t len, const char *what)
{
    tmx_completion_t info;
    tmx_message_h msg = NULL;
    tmx_status_t st = tmx_tprobe(mp_ctx, TMX_ANY_SOURCE, PR_TAG | t, TMX_TAG_EXACT,
                                 TMX_PROBE_FLAG_CLAIM, &info, &msg);

    if (st != TMX_OK || msg == NULL)
        mp_fail("%s: claim: %s", what, tmx_strerror(st));
    if (info.source != 1 || info.msg_length != len)
        mp_fail("%s: claim saw source %u length %zu", what, info.source, info.msg_length);
    pr_expect_none(1, t, what); /* claimed: out of matching */
    return msg;
}

static void pr_mrecv(unsigned t, size_t len, const char *what)
{
    unsigned char *buf = mp_buf_alloc(len);
    tmx_message_h msg = pr_claim(t, len, what);
    tmx_request_h req = NULL;
    tmx_completion_t c;
    tmx_status_t st = tmx_mrecv(mp_ctx, msg, buf, len, &mp_no_cq, &req);

    if (st != TMX_OK)
        mp_fail("%s: tmx_mrecv: %s", what, tmx_strerror(st));
    st = mp_wait(req, &c, what);
    mp_check_recv(what, st, &c, 1, PR_TAG | t, len, len);
    mp_check_pattern(what, buf, len, mp_seed(t, 0, len));
    mp_check_guard(what, buf, len, len + MP_GUARD);
    free(buf);
}

/* Nothing matches: tmx_tprobe must say so, every time, for a while. */
static void pr_no_message(void)
{
    int64_t end = mp_now_us() + 200000;
    unsigned polls = 0;

    while (mp_now_us() < end) {
        pr_expect_none(TMX_ANY_SOURCE, PR_T_NONE, "probe of a tag nobody sent");
        pr_expect_none(1, PR_T_NONE, "probe of a tag nobody sent");
        polls++;
    }
    if (polls == 0)
        mp_fail("probe: no poll in 200 ms");
}

/* Rank 0, step 1: peek, claim and receive, discard. */
static void pr_recv_step1(void)
{
    tmx_completion_t info;
    tmx_message_h msg;

    mp_probe_until(1, PR_TAG | PR_T_DISCARD_EAGER, TMX_TAG_EXACT, &info, "probe wait");
    for (int k = 0; k < 2; k++) { /* a peek leaves the message where it is */
        pr_expect_probe(1, PR_T_EAGER, PR_EAGER_LEN, "peek eager");
        pr_expect_probe(TMX_ANY_SOURCE, PR_T_RNDV, PR_RNDV_LEN, "peek rendezvous");
    }
    pr_mrecv(PR_T_EAGER, PR_EAGER_LEN, "claim+mrecv eager");
    pr_mrecv(PR_T_RNDV, PR_RNDV_LEN, "claim+mrecv rendezvous");
    msg = pr_claim(PR_T_DISCARD, PR_DISCARD_LEN, "discard rendezvous");
    if (tmx_message_discard(mp_ctx, msg) != TMX_OK)
        mp_fail("tmx_message_discard of a rendezvous message failed");
    msg = pr_claim(PR_T_DISCARD_EAGER, 8, "discard eager");
    if (tmx_message_discard(mp_ctx, msg) != TMX_OK)
        mp_fail("tmx_message_discard of an eager message failed");
    pr_expect_none(TMX_ANY_SOURCE, PR_T_DISCARD, "after discard");
    pr_no_message();
}

static tmx_request_h pr_send(unsigned t, size_t len, unsigned char **buf)
{
    *buf = mp_buf_alloc(len);
    mp_fill(*buf, len, mp_seed(t, 0, len));
    return mp_send(0, *buf, len, PR_TAG | t);
}

static void pr_send_step1(void)
{
    static const struct { unsigned t; size_t len; } s[] = {
        {PR_T_EAGER, PR_EAGER_LEN}, {PR_T_RNDV, PR_RNDV_LEN}, {PR_T_DISCARD, PR_DISCARD_LEN},
        {PR_T_DISCARD_EAGER, 8}};
    unsigned char *bufs[4];
    tmx_request_h reqs[4];

    for (int i = 0; i < 4; i++)
        reqs[i] = pr_send(s[i].t, s[i].len, &bufs[i]);
    for (int i = 0; i < 4; i++) {
        mp_wait_send(reqs[i], 0, PR_TAG | s[i].t, s[i].len,
                     s[i].t == PR_T_DISCARD ? "rendezvous send whose message was discarded"
                                            : "probe step 1 send");
        free(bufs[i]);
    }
}

/* Rank 0, step 2: canceled receives complete TMX_ERR_CANCELED and take
 * nothing; the messages sent after them go to the next receives. */
static void pr_cancel_posted_req(tmx_request_h req, const char *what)
{
    tmx_completion_t c;
    tmx_status_t st = tmx_request_cancel(req);

    if (st != TMX_OK)
        mp_fail("cancel of a posted %s: %s", what, tmx_strerror(st));
    st = mp_wait(req, &c, what);
    if (st != TMX_ERR_CANCELED || c.status != TMX_ERR_CANCELED || c.op != TMX_OP_TRECV)
        mp_fail("canceled %s completed with %s, expected TMX_ERR_CANCELED", what,
                tmx_strerror(st));
}

static void pr_cancel_posted(unsigned char *old, size_t cap)
{
    pr_cancel_posted_req(mp_recv(1, old, cap, PR_TAG | PR_T_CANCEL, TMX_TAG_EXACT),
                         "receive");
}

static void pr_recv_step2(void)
{
    unsigned char *old = mp_buf_alloc(PR_RNDV_LEN), *buf = mp_buf_alloc(PR_RNDV_LEN);
    const char *what = "receive after a canceled one";

    unsigned char spare[16];
    tmx_request_h spacer;

    pr_cancel_posted(old, PR_RNDV_LEN);
    pr_cancel_posted(old, 10); /* one the eager message would truncate */
    /* Holds the request object just released, so that a canceled receive
     * left in the matcher is not hidden by the next one reusing it. */
    spacer = mp_recv(1, spare, sizeof(spare), PR_TAG | PR_T_NONE, TMX_TAG_EXACT);
    mp_barrier("probe: receives canceled");
    for (unsigned k = 0; k < 2; k++) {
        size_t len = k == 0 ? PR_EAGER_LEN : PR_RNDV_LEN;
        tmx_completion_t c;
        tmx_status_t st;

        mp_guard_set(buf, 0, PR_RNDV_LEN + MP_GUARD);
        st = mp_wait(mp_recv(1, buf, PR_RNDV_LEN, PR_TAG | PR_T_CANCEL, TMX_TAG_EXACT), &c, what);
        mp_check_recv(what, st, &c, 1, PR_TAG | PR_T_CANCEL, PR_RNDV_LEN, len);
        mp_check_pattern(what, buf, len, mp_seed(PR_T_CANCEL, k, len));
        mp_check_guard(what, buf, len, PR_RNDV_LEN + MP_GUARD);
    }
    mp_check_guard("a canceled receive's buffer", old, 0, PR_RNDV_LEN + MP_GUARD);
    pr_cancel_posted_req(spacer, "spacer receive");
    free(old);
    free(buf);
}

static void pr_send_step2(void)
{
    unsigned char *buf = mp_buf_alloc(PR_RNDV_LEN);

    mp_barrier("probe: receives canceled");
    for (unsigned k = 0; k < 2; k++) {
        size_t len = k == 0 ? PR_EAGER_LEN : PR_RNDV_LEN;

        mp_fill(buf, len, mp_seed(PR_T_CANCEL, k, len));
        mp_wait_send(mp_send(0, buf, len, PR_TAG | PR_T_CANCEL), 0, PR_TAG | PR_T_CANCEL, len,
                     "send after the receiver canceled");
    }
    free(buf);
}

/* A receive that has completed can no longer be canceled. */
static void pr_cancel_done(void)
{
    unsigned char one = 0;
    tmx_request_h req;
    tmx_status_t st;

    if (mp_rank == 1) {
        mp_wait_send(mp_send(0, &one, 1, PR_TAG), 0, PR_TAG, 1, "send for cancel-after-done");
        return;
    }
    req = mp_recv(1, &one, 1, PR_TAG, TMX_TAG_EXACT);
    while ((st = tmx_request_test(req, NULL)) == TMX_INPROGRESS)
        tmx_wait(mp_ctx, 100000);
    if (st != TMX_OK)
        mp_fail("receive for cancel-after-done: %s", tmx_strerror(st));
    st = tmx_request_cancel(req);
    if (st != TMX_ERR_BUSY)
        mp_fail("cancel of a completed receive returned %s, expected TMX_ERR_BUSY",
                tmx_strerror(st));
    tmx_request_free(req);
}

static void case_probe(void)
{
    if (mp_rank == 0)
        pr_recv_step1();
    else
        pr_send_step1();
    mp_barrier("probe step 1");
    if (mp_rank == 0)
        pr_recv_step2();
    else
        pr_send_step2();
    mp_barrier("probe step 2");
    pr_cancel_done();
    if (mp_rank == 0)
        printf("probe: peek, claim, mrecv, discard, no message, cancel\n");
}

/* -------------------------------------------------------------- peerdeath */

/* tmxrun reacts to rank 2's death by sending SIGTERM to the others and
 * SIGKILL 2 s later (RUN_KILL_GRACE_MS). Ranks 0 and 1 ignore the SIGTERM
 * (a handler, so that their sleeps see EINTR as they would in real life)
 * and must finish inside the grace period: detection is bounded by
 * PD_LIMIT_US, well below it, so a failure is reported, not cut short. */
#define PD_LIMIT_US 1500000
#define PD_TAG UINT64_C(0xdead000000000000)
#define PD_RNDV_LEN (MP_MIB + 5)

static volatile sig_atomic_t pd_got_term;

static void pd_on_term(int sig)
{
    (void)sig;
    pd_got_term = 1;
}

static void pd_expect_failed(tmx_request_h req, int64_t t0, const char *what)
{
    tmx_completion_t c;
    int64_t left = PD_LIMIT_US - (mp_now_us() - t0);
    tmx_status_t st = mp_wait_for(req, left > 0 ? left : 0, &c, what);

    if (st != TMX_ERR_PEER_FAILED)
        mp_fail("%s: completed with %s, expected TMX_ERR_PEER_FAILED", what, tmx_strerror(st));
    fprintf(stderr, "mp_test rank %u: %s failed as expected after %.0f ms\n", mp_rank, what,
            (double)(mp_now_us() - t0) / 1000.0);
}

/* Operations started once rank 2 is known dead fail too, at once or soon. */
static void pd_after_death(int64_t t0)
{
    unsigned char b[16] = {0};
    tmx_request_h req = NULL;
    tmx_status_t st = tmx_tsend(mp_ctx, 2, b, sizeof(b), PD_TAG, &mp_no_cq, &req);

    if (st == TMX_OK)
        pd_expect_failed(req, t0, "eager send to dead rank 2");
    else if (st != TMX_ERR_PEER_FAILED)
        mp_fail("send to dead rank 2 returned %s", tmx_strerror(st));
    st = tmx_trecv(mp_ctx, 2, b, sizeof(b), PD_TAG, TMX_TAG_EXACT, &mp_no_cq, &req);
    if (st == TMX_OK)
        pd_expect_failed(req, t0, "receive from dead rank 2, posted after its death");
    else if (st != TMX_ERR_PEER_FAILED)
        mp_fail("receive from dead rank 2 returned %s", tmx_strerror(st));
}

/* Ranks 0 and 1 still talk: eager and rendezvous, both ways. */
static void pd_survivors(void)
{
    static const size_t lens[] = {100, MP_EAGER + 1, PD_RNDV_LEN};
    tmx_peer_t peer = 1 - mp_rank;
    unsigned char *buf = mp_buf_alloc(PD_RNDV_LEN);

    for (unsigned i = 0; i < 3; i++) {
        for (unsigned dir = 0; dir < 2; dir++) {
            uint64_t tag = PD_TAG | 0x100 | (i << 1) | dir;
            tmx_completion_t c;
            tmx_status_t st;

            if (dir == mp_rank) {
                mp_fill(buf, lens[i], mp_seed(i, dir, lens[i]));
                mp_wait_send(mp_send(peer, buf, lens[i], tag), peer, tag, lens[i],
                             "send between survivors");
                continue;
            }
            mp_guard_set(buf, lens[i], PD_RNDV_LEN + MP_GUARD);
            st = mp_wait(mp_recv(peer, buf, PD_RNDV_LEN, tag, TMX_TAG_EXACT), &c,
                         "receive between survivors");
            mp_check_recv("receive between survivors", st, &c, peer, tag, PD_RNDV_LEN, lens[i]);
            mp_check_pattern("receive between survivors", buf, lens[i], mp_seed(i, dir, lens[i]));
            mp_check_guard("receive between survivors", buf, lens[i], PD_RNDV_LEN + MP_GUARD);
        }
    }
    free(buf);
}

/* Rank 0 sends to rank 2 before it dies, so it holds an endpoint to it,
 * and waits for it by name and by wildcard; rank 1 has never touched rank
 * 2 and waits only with a wildcard receive: it must fail all the same.
 * Rank 0 also leaves a copying synchronous send (INJECT | SYNC: the
 * payload is the request's) unmatched at rank 2: it fails, and its copy
 * is freed with the request (sanitized builds would report a leak). */
static void case_peerdeath(void)
{
    struct sigaction sa = {.sa_handler = pd_on_term};
    unsigned char *sbuf, rbuf[64], abuf[64];
    tmx_request_h from2, any, to2 = NULL, sync2 = NULL;
    tmx_op_params_t sync_inject = {.field_mask = TMX_OP_FIELD_FLAGS,
                                   .flags = TMX_OP_FLAG_NO_CQ | TMX_OP_FLAG_INJECT | TMX_OP_FLAG_SYNC};
    int64_t t0;

    if (mp_rank == 2) {
        mp_barrier("before rank 2 dies");
        kill(getpid(), SIGKILL);
        pause();
    }
    sigaction(SIGTERM, &sa, NULL);
    sbuf = mp_buf_alloc(PD_RNDV_LEN);
    mp_fill(sbuf, PD_RNDV_LEN, 1);
    from2 = mp_rank == 0 ? mp_recv(2, rbuf, sizeof(rbuf), PD_TAG, TMX_TAG_EXACT) : NULL;
    any = mp_recv(TMX_ANY_SOURCE, abuf, sizeof(abuf), PD_TAG | 1, TMX_TAG_EXACT);
    if (mp_rank == 0) {
        to2 = mp_send(2, sbuf, PD_RNDV_LEN, PD_TAG);
        mp_check_protocol(to2, PD_RNDV_LEN, "rendezvous send to rank 2");
        sync2 = mp_send_p(2, sbuf, 100, PD_TAG | 2, &sync_inject);
    }
    mp_barrier("before rank 2 dies");
    t0 = mp_now_us();
    if (to2 != NULL)
        pd_expect_failed(to2, t0, "rendezvous send to rank 2 (no FIN can come)");
    if (sync2 != NULL)
        pd_expect_failed(sync2, t0, "copying synchronous send to rank 2 (never matched)");
    if (from2 != NULL)
        pd_expect_failed(from2, t0, "receive from rank 2");
    pd_expect_failed(any, t0, "TMX_ANY_SOURCE receive");
    pd_after_death(t0);
    pd_survivors();
    free(sbuf);
    fprintf(stderr, "mp_test rank %u: survivors done %.0f ms after the barrier%s\n", mp_rank,
            (double)(mp_now_us() - t0) / 1000.0,
            pd_got_term ? " (SIGTERM from tmxrun ignored)" : "");
    printf("peerdeath ok rank %u\n", mp_rank);
}

/* ---------------------------------------------------------------- oversub */

#define OS_ROUNDS 48
#define OS_LIMIT_S 30.0

static size_t os_size(unsigned round)
{
    static const size_t sizes[] = {64, 300000, MP_EAGER + 1, MP_MIB, 0, MP_EAGER};
    return sizes[round % (sizeof(sizes) / sizeof(sizes[0]))];
}

static void case_oversub(void)
{
    tmx_peer_t right = (mp_rank + 1) % mp_size, left = (mp_rank + mp_size - 1) % mp_size;
    unsigned char *sbuf = mp_buf_alloc(MP_MIB), *rbuf = mp_buf_alloc(MP_MIB);
    int64_t t0 = mp_now_us();
    char what[96];

    for (unsigned r = 0; r < OS_ROUNDS; r++) {
        size_t len = os_size(r);
        uint64_t tag = UINT64_C(0x0505000000000000) | r;
        tmx_request_h rreq = mp_recv(left, rbuf, MP_MIB, tag, TMX_TAG_EXACT), sreq;
        tmx_completion_t c;
        tmx_status_t st;

        snprintf(what, sizeof(what), "oversub round %u (%zu bytes, %u -> %u -> %u)", r, len, left,
                 mp_rank, right);
        mp_fill(sbuf, len, mp_seed(mp_rank, r, len));
        mp_guard_set(rbuf, len, MP_MIB + MP_GUARD);
        sreq = mp_send(right, sbuf, len, tag);
        st = mp_wait(rreq, &c, what);
        mp_check_recv(what, st, &c, left, tag, MP_MIB, len);
        mp_check_pattern(what, rbuf, len, mp_seed(left, r, len));
        mp_check_guard(what, rbuf, len, MP_MIB + MP_GUARD);
        mp_wait_send(sreq, right, tag, len, what);
    }
    free(sbuf);
    free(rbuf);
    double s = (double)(mp_now_us() - t0) / 1e6;
    if (s > OS_LIMIT_S)
        mp_fail("oversub: %d rounds took %.1f s (limit %.0f s): waiting does not give way",
                OS_ROUNDS, s, OS_LIMIT_S);
    if (mp_rank == 0)
        printf("oversub: %u ranks, %d ring rounds in %.2f s\n", mp_size, OS_ROUNDS, s);
}

/* ----------------------------------------------------------------- lonely */

/* Large receives complete while their sender makes no progress at all:
 * the receiver copies what a sender that never comes would have written
 * (shm's shared copies must not wait for the owner). Rank 1 sends and then
 * sleeps without calling tmx; rank 0 must be done well before it wakes. */
#define LN_LEN (4 * MP_MIB + 3)
#define LN_SLEEP_US 3000000
#define LN_LIMIT_US 1500000
#define LN_TAG UINT64_C(0x1011000000000000)

static void case_lonely(void)
{
    unsigned char *buf = malloc(LN_LEN + MP_GUARD);
    tmx_completion_t c;

    if (buf == NULL)
        mp_fail("out of memory");
    if (mp_rank == 1) {
        tmx_request_h s;
        mp_fill(buf, LN_LEN, 77);
        s = mp_send(0, buf, LN_LEN, LN_TAG);
        usleep(LN_SLEEP_US); /* no progress: only the receiver works */
        mp_wait(s, NULL, "lonely send");
    } else {
        int64_t t0 = mp_now_us();
        tmx_request_h r;
        memset(buf, MP_GUARD_BYTE, LN_LEN + MP_GUARD);
        r = mp_recv(1, buf, LN_LEN, LN_TAG, TMX_TAG_EXACT);
        mp_check_recv("lonely receive", mp_wait_for(r, LN_LIMIT_US, &c, "lonely receive"), &c, 1, LN_TAG,
                      LN_LEN, LN_LEN);
        mp_check_pattern("lonely receive", buf, LN_LEN, 77);
        mp_check_guard("lonely receive", buf, LN_LEN, LN_LEN + MP_GUARD);
        printf("lonely: %zu bytes received in %.3f s while the sender slept\n", (size_t)LN_LEN,
               (double)(mp_now_us() - t0) / 1e6);
    }
    free(buf);
}

/* ------------------------------------------------------------------- busy */

/* A rank that computes without calling tmx is busy, not dead (udp_live.c):
 * rank 1 sleeps MP_BUSY_S seconds (default 60; at least longer than the
 * old 5 s timeout to mean anything) while rank 0 waits on a receive from
 * it and has an eager and a rendezvous message in flight to it; then
 * rank 1 takes both and answers, and everything completes. */
#define BZ_TAG UINT64_C(0xb0b0000000000000)
#define BZ_LEN (MP_MIB + 5)

static unsigned bz_seconds(void)
{
    const char *v = getenv("MP_BUSY_S");

    return v != NULL && atoi(v) > 0 ? (unsigned)atoi(v) : 60;
}

/* One message each way, so that each side has heard the other. */
static void bz_hello(unsigned char *buf)
{
    tmx_peer_t peer = 1 - mp_rank;
    tmx_completion_t c;
    tmx_request_h r = mp_recv(peer, buf, 64, BZ_TAG, TMX_TAG_EXACT), s;

    mp_fill(buf + 64, 64, mp_seed(mp_rank, 0, 64));
    s = mp_send(peer, buf + 64, 64, BZ_TAG);
    mp_check_recv("busy hello", mp_wait(r, &c, "busy hello"), &c, peer, BZ_TAG, 64, 64);
    mp_check_pattern("busy hello", buf, 64, mp_seed(peer, 0, 64));
    mp_wait_send(s, peer, BZ_TAG, 64, "busy hello");
}

static void bz_recv(unsigned i, size_t len, unsigned char *buf)
{
    tmx_completion_t c;
    uint64_t tag = BZ_TAG | i;
    tmx_status_t st = mp_wait(mp_recv(0, buf, BZ_LEN, tag, TMX_TAG_EXACT), &c, "busy receive");

    mp_check_recv("busy receive", st, &c, 0, tag, BZ_LEN, len);
    mp_check_pattern("busy receive", buf, len, mp_seed(0, i, len));
}

static void case_busy(void)
{
    unsigned sec = bz_seconds();
    int64_t wait_us = ((int64_t)sec + 30) * 1000000, t0;
    unsigned char *buf = mp_buf_alloc(BZ_LEN), *big = mp_buf_alloc(BZ_LEN);
    tmx_request_h s1, s2, r;
    tmx_completion_t c;

    bz_hello(buf);
    if (mp_rank == 1) {
        struct timespec ts = {(time_t)sec, 0};
        fprintf(stderr, "mp_test rank 1: busy for %u s without calling tmx\n", sec);
        while (nanosleep(&ts, &ts) != 0)
            ;
        bz_recv(1, 100, buf);
        bz_recv(2, BZ_LEN, buf);
        mp_fill(big, 100, mp_seed(1, 3, 100));
        mp_wait_send(mp_send(0, big, 100, BZ_TAG | 3), 0, BZ_TAG | 3, 100, "busy answer");
    } else {
        t0 = mp_now_us();
        mp_fill(buf, 100, mp_seed(0, 1, 100));
        mp_fill(big, BZ_LEN, mp_seed(0, 2, BZ_LEN));
        s1 = mp_send(1, buf, 100, BZ_TAG | 1);
        s2 = mp_send(1, big, BZ_LEN, BZ_TAG | 2);
        r = mp_recv(1, buf + 128, 100, BZ_TAG | 3, TMX_TAG_EXACT);
        mp_check_recv("answer from the busy rank", mp_wait_for(r, wait_us, &c, "answer from the busy rank"),
                      &c, 1, BZ_TAG | 3, 100, 100);
        mp_check_pattern("answer from the busy rank", buf + 128, 100, mp_seed(1, 3, 100));
        mp_wait_send(s1, 1, BZ_TAG | 1, 100, "eager send to the busy rank");
        mp_wait_send(s2, 1, BZ_TAG | 2, BZ_LEN, "rendezvous send to the busy rank");
        printf("busy: rank 1 was silent for %u s and is alive: answered after %.1f s\n", sec,
               (double)(mp_now_us() - t0) / 1e6);
    }
    free(buf);
    free(big);
}

/* --------------------------------------------------------------- hostgone */

/* A host that vanishes (its link goes down: no process, no kernel answers,
 * nothing is refused) is found only by the silence limit: rank 1 says it
 * is ready and sleeps, the script takes its host's link down, and rank 0's
 * receive from it must fail, no sooner than TMX_UDP_PEER_TIMEOUT_MS. */
static void case_hostgone(void)
{
    unsigned char buf[128];
    const char *v = getenv("TMX_UDP_PEER_TIMEOUT_MS");
    int64_t limit_us = (v != NULL ? atol(v) : 300000) * 1000, t0;
    tmx_completion_t c;
    tmx_status_t st;
    tmx_request_h r;

    bz_hello(buf);
    if (mp_rank == 1) {
        printf("hostgone: rank 1 ready\n");
        for (;;)
            pause(); /* the host goes away under it */
    }
    r = mp_recv(1, buf, 64, BZ_TAG | 9, TMX_TAG_EXACT);
    t0 = mp_now_us();
    st = mp_wait_for(r, limit_us + 60000000, &c, "receive from the vanished host");
    if (st != TMX_ERR_PEER_FAILED)
        mp_fail("receive from the vanished host: %s, expected TMX_ERR_PEER_FAILED", tmx_strerror(st));
    printf("hostgone ok rank 0: declared failed after %.1f s (limit %.1f s)\n",
           (double)(mp_now_us() - t0) / 1e6, (double)limit_us / 1e6);
}

/* --------------------------------------------------------------- alltoall */

/* Every rank sends to every other, payload-checked: a small message to
 * all at once (every receive posted, then every send), a large one
 * (rendezvous over shm and udp) to all at once, then a large one per
 * shifted round, rank r sending to r + k and receiving from r - k. Meant
 * for jobs of many ranks across hosts on few cores, where peers are slow
 * but none is dead. */
#define AA_SMALL 1000
#define AA_BIG_DEFAULT 100000
#define AA_TAG UINT64_C(0xa2a0000000000000)
#define AA_WAIT_US 120000000 /* oversubscribed ranks are slow */

/* Every receive posted, then every send, all of len bytes: the incast
 * of an MPI_Alltoall's linear algorithm. */
static void aa_burst(size_t len, uint64_t tag)
{
    /* outside malloc: the scale case reads the heap around it */
    unsigned char *in = mp_proc_map((size_t)mp_size * len), *out = mp_proc_map(len);
    tmx_request_h *rr = mp_proc_map(mp_size * sizeof(*rr)), *sr = mp_proc_map(mp_size * sizeof(*sr));
    tmx_completion_t c;

    if (in == NULL || out == NULL || rr == NULL || sr == NULL)
        mp_fail("out of memory");
    mp_fill(out, len, mp_seed(mp_rank, tag, len)); /* the same to all */
    for (uint32_t p = 0; p < mp_size; p++) {
        if (p != mp_rank)
            rr[p] = mp_recv(p, in + (size_t)p * len, len, tag, TMX_TAG_EXACT);
    }
    for (uint32_t k = 1; k < mp_size; k++)
        sr[(mp_rank + k) % mp_size] = mp_send((mp_rank + k) % mp_size, out, len, tag);
    for (uint32_t p = 0; p < mp_size; p++) {
        if (p == mp_rank)
            continue;
        mp_check_recv("alltoall burst", mp_wait_for(rr[p], AA_WAIT_US, &c, "alltoall burst"), &c, p, tag,
                      len, len);
        mp_check_pattern("alltoall burst", in + (size_t)p * len, len, mp_seed(p, tag, len));
        if (mp_wait_for(sr[p], AA_WAIT_US, &c, "alltoall burst send") != TMX_OK)
            mp_fail("alltoall burst send to %u: %s", p, tmx_strerror(c.status));
    }
    mp_proc_unmap(in, (size_t)mp_size * len);
    mp_proc_unmap(out, len);
    mp_proc_unmap(rr, mp_size * sizeof(*rr));
    mp_proc_unmap(sr, mp_size * sizeof(*sr));
}

/* The large messages' size: MP_AA_BYTES, or AA_BIG_DEFAULT. */
static size_t aa_big_len(void)
{
    const char *v = getenv("MP_AA_BYTES");

    return v != NULL && atol(v) > 0 ? (size_t)atol(v) : AA_BIG_DEFAULT;
}

static void aa_big(void)
{
    const size_t AA_BIG = aa_big_len();
    unsigned char *in = mp_buf_alloc(AA_BIG), *out = mp_buf_alloc(AA_BIG);
    tmx_completion_t c;
    char what[80];

    for (uint32_t k = 1; k < mp_size; k++) {
        uint32_t to = (mp_rank + k) % mp_size, from = (mp_rank + mp_size - k) % mp_size;
        uint64_t tag = AA_TAG | 1u << 20 | k;
        tmx_request_h r = mp_recv(from, in, AA_BIG, tag, TMX_TAG_EXACT), s;

        snprintf(what, sizeof(what), "alltoall round %u (%u -> %u -> %u)", k, from, mp_rank, to);
        mp_fill(out, AA_BIG, mp_seed(mp_rank, to, AA_BIG));
        s = mp_send(to, out, AA_BIG, tag);
        mp_check_recv(what, mp_wait_for(r, AA_WAIT_US, &c, what), &c, from, tag, AA_BIG, AA_BIG);
        mp_check_pattern(what, in, AA_BIG, mp_seed(from, mp_rank, AA_BIG));
        if (mp_wait_for(s, AA_WAIT_US, &c, what) != TMX_OK)
            mp_fail("%s: send failed: %s", what, tmx_strerror(c.status));
    }
    free(in);
    free(out);
}

static void case_alltoall(void)
{
    int64_t t0 = mp_now_us();

    aa_burst(AA_SMALL, AA_TAG);
    aa_burst(aa_big_len(), AA_TAG | 2u << 20);
    aa_big();
    if (mp_rank == 0)
        printf("alltoall: %u ranks, every pair both ways, %.1f s\n", mp_size,
               (double)(mp_now_us() - t0) / 1e6);
}

/* ------------------------------------------------------------------ scale */

/* The all-to-all of the scale tests (bench/scale.sh, tests/fault/scale_test.sh):
 * 8 B, then 64 KiB, from every rank to every other at once, payloads
 * checked (aa_burst). The heap is read before any message, after the
 * small round (the peer state created on first use) and after the large
 * one, each time with the test's own buffers unmapped (mp_proc_map); sockets and
 * descriptors at the end, while every rank still holds its own (between
 * two barriers). */
#define SCALE_SMALL 8
#define SCALE_BIG_DEFAULT 65536
#define SCALE_TAG UINT64_C(0x5ca1000000000000)

/* What tmx holds outside malloc: its mapped pools. */
static size_t scale_mapped(void)
{
    size_t mapped = 0;

    if (tmx_context_memory(mp_ctx, &mapped) != TMX_OK)
        mp_fail("tmx_context_memory");
    return mapped;
}

static void case_scale(void)
{
    const char *v = getenv("MP_SCALE_BYTES");
    size_t big = v != NULL && atol(v) > 0 ? (size_t)atol(v) : SCALE_BIG_DEFAULT;
    mp_proc_mem_t m0, m1, m2, m3;
    mp_proc_sockets_t s;
    int64_t t0, settle;

    mp_barrier("before the all-to-all");
    mp_proc_mem(&m0, scale_mapped());
    t0 = mp_now_us();
    aa_burst(SCALE_SMALL, SCALE_TAG);
    mp_proc_mem(&m1, scale_mapped());
    aa_burst(big, SCALE_TAG | 1u << 20);
    mp_proc_mem(&m2, scale_mapped());
    mp_barrier("after the all-to-all");
    if (mp_rank == 0)
        printf("scale: %u ranks, %d B and %zu B to every other rank, %.2f s\n", mp_size,
               SCALE_SMALL, big, (double)(mp_now_us() - t0) / 1e6);
    for (settle = mp_now_us() + MP_PROC_SETTLE_US; mp_now_us() < settle;)
        tmx_wait(mp_ctx, 1000);
    mp_proc_mem(&m3, scale_mapped());
    mp_proc_sockets(&s);
    mp_proc_print("tmx", mp_rank, mp_size, &m0, &m1, &m2, &m3, &s);
}

/* ---------------------------------------------------------------- threads */

#define TH_THREADS 2
#define TH_ITERS 400
#define TH_TAG UINT64_C(0x7400000000000000)
#define TH_MAX ((size_t)300000)

static size_t th_size(unsigned i)
{
    static const size_t sizes[] = {8, 4000, MP_EAGER + 1, 0, TH_MAX, 64};
    return sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
}

/* Thread t exchanges with the peer's thread t: receive posted, send, both
 * waited for, while the other thread does the same. */
static void *th_run(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    tmx_peer_t peer = 1 - mp_rank;
    unsigned char *sbuf = mp_buf_alloc(TH_MAX), *rbuf = mp_buf_alloc(TH_MAX);

    for (unsigned i = 0; i < TH_ITERS; i++) {
        size_t len = th_size(i);
        uint64_t tag = TH_TAG | (uint64_t)t << 32 | i;
        tmx_request_h rreq = mp_recv(peer, rbuf, TH_MAX, tag, TMX_TAG_EXACT);
        tmx_completion_t c;
        tmx_status_t st;

        mp_fill(sbuf, len, mp_seed(mp_rank, t, i));
        tmx_request_h sreq = mp_send(peer, sbuf, len, tag);
        mp_guard_set(rbuf, len, TH_MAX + MP_GUARD);
        st = mp_wait(rreq, &c, "threaded receive");
        mp_check_recv("threaded receive", st, &c, peer, tag, TH_MAX, len);
        mp_check_pattern("threaded receive", rbuf, len, mp_seed(peer, t, i));
        mp_check_guard("threaded receive", rbuf, len, TH_MAX + MP_GUARD);
        mp_wait_send(sreq, peer, tag, len, "threaded send");
    }
    free(sbuf);
    free(rbuf);
    return NULL;
}

static void case_threads(void)
{
    pthread_t th[TH_THREADS];

    for (unsigned t = 0; t < TH_THREADS; t++) {
        if (pthread_create(&th[t], NULL, th_run, (void *)(uintptr_t)t) != 0)
            mp_fail("pthread_create");
    }
    for (unsigned t = 0; t < TH_THREADS; t++)
        pthread_join(th[t], NULL);
    printf("threads: %u threads x %u exchanges each way\n", TH_THREADS, TH_ITERS);
}

/* --------------------------------------------------------------- pollwait */

#define PW_ROUNDS 2000
#define PW_LEN ((size_t)65536)
/* The CPU time a rank may spend on the whole run. A poll loop that keeps
 * the core spins out its time slice in every wait for the peer (about
 * 0.75 ms each: 1.5 s); one that yields spends microseconds. CPU time, not
 * elapsed time, so that other load on the machine does not count. */
#define PW_CPU_LIMIT_S 0.5
#define PW_TAG UINT64_C(0x9011000000000000)

static double pw_cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Waits the way an application's own loop does: test, progress, again;
 * never tmx_request_wait, which has its own way of waiting. */
static void pw_poll(tmx_request_h req, const char *what)
{
    int64_t t0 = mp_now_us();
    tmx_completion_t c;
    tmx_status_t st;

    while ((st = tmx_request_test(req, &c)) == TMX_INPROGRESS) {
        if (tmx_progress(mp_ctx) < 0)
            mp_fail("%s: tmx_progress failed", what);
        if (mp_now_us() - t0 > MP_WAIT_US)
            mp_fail("%s: not complete after %d s", what, MP_WAIT_US / 1000000);
    }
    if (st != TMX_OK)
        mp_fail("%s: %s", what, tmx_strerror(st));
    tmx_request_free(req);
}

static void case_pollwait(void)
{
    tmx_peer_t peer = 1 - mp_rank;
    unsigned char *buf = mp_buf_alloc(PW_LEN);
    int64_t t0 = mp_now_us();
    double cpu0 = pw_cpu_s(), cpu, s;

    for (unsigned i = 0; i < PW_ROUNDS; i++) {
        if (mp_rank == 0) {
            pw_poll(mp_send(peer, buf, PW_LEN, PW_TAG | i), "polled send");
            pw_poll(mp_recv(peer, buf, PW_LEN, PW_TAG | i, TMX_TAG_EXACT), "polled receive");
        } else {
            pw_poll(mp_recv(peer, buf, PW_LEN, PW_TAG | i, TMX_TAG_EXACT), "polled receive");
            pw_poll(mp_send(peer, buf, PW_LEN, PW_TAG | i), "polled send");
        }
    }
    s = (double)(mp_now_us() - t0) / 1e6;
    cpu = pw_cpu_s() - cpu0;
    if (cpu > PW_CPU_LIMIT_S)
        mp_fail("%u polled round trips of %zu bytes took %.2f s of CPU (limit %.1f s) in %.2f s: "
                "polling keeps the core from the peer", PW_ROUNDS, PW_LEN, cpu, PW_CPU_LIMIT_S, s);
    printf("pollwait rank %u: %u polled round trips of %zu bytes in %.3f s, %.3f s of CPU\n", mp_rank,
           PW_ROUNDS, PW_LEN, s, cpu);
    free(buf);
}

/* -------------------------------------------------------------- pollany */

#define PA_TAG UINT64_C(0x9a00000000000000)
#define PA_POLL_US 300000

static unsigned pa_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    unsigned n = 0;

    if (d == NULL)
        mp_fail("pollany: /proc/self/fd: %s", strerror(errno));
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* Rank 0 posts a receive from any source and then only polls
 * (tmx_cq_read), as MPI over the provider does: it must not connect to
 * every rank of the job meanwhile (the wildcard's watch belongs to
 * waits), which would cost descriptors per peer; the message rank 1
 * then sends completes it. */
static void case_pollany(void)
{
    uint64_t v = 0;
    tmx_completion_t c;

    if (mp_rank != 0) {
        mp_barrier("before polling");
        mp_barrier("after polling");
        if (mp_rank == 1) {
            v = 0xfeed;
            mp_wait(mp_send(0, &v, sizeof(v), PA_TAG), &c, "send to the wildcard");
        }
        return;
    }
    mp_barrier("before polling");
    unsigned before = pa_fds();
    tmx_request_h r = mp_recv(TMX_ANY_SOURCE, &v, sizeof(v), PA_TAG, TMX_TAG_EXACT);
    int64_t t0 = mp_now_us();
    size_t n;
    while (mp_now_us() - t0 < PA_POLL_US) {
        if (tmx_cq_read(mp_ctx, &c, 1, &n) != TMX_OK)
            mp_fail("pollany: tmx_cq_read failed");
        if (n != 0)
            mp_fail("pollany: a completion before anything was sent");
    }
    unsigned after = pa_fds();
    if (after > before + 2)
        mp_fail("pollany: polling with a wildcard receive posted opened %u descriptors (%u -> %u): "
                "it connected to the job's ranks", after - before, before, after);
    mp_barrier("after polling");
    mp_check_recv("wildcard receive", mp_wait(r, &c, "wildcard receive"), &c, 1, PA_TAG, sizeof(v),
                  sizeof(v));
    if (v != 0xfeed)
        mp_fail("pollany: payload 0x%" PRIx64, v);
    printf("pollany: %u descriptors before polling, %u after %d ms of polls\n", before, after,
           PA_POLL_US / 1000);
}

/* -------------------------------------------------------------- deadclaim */

/* Whether the process whose /proc/PID/stat is path has stopped itself
 * (state T); stat receives the line read, for a message. */
static int mp_pid_stopped(const char *path, char *stat, size_t room)
{
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(stat, 1, room - 1, f) : 0;
    char *paren;

    if (f != NULL)
        fclose(f);
    stat[n] = '\0';
    paren = strrchr(stat, ')');
    return paren != NULL && paren[1] == ' ' && paren[2] == 'T';
}

#define DC_TAG UINT64_C(0xdc00000000000000)
#define DC_MSGS 600                 /* per live sender: several rings' worth */
#define DC_VICTIM_MSGS 1000
#define DC_LIMIT_US 1500000         /* inside tmxrun's grace after the kill */

/* Rank 3 stops itself in its shm transport (TMX_SHM_TEST_STOP, a test
 * hook) at a cell of its stream to rank 0; the environment is read when
 * the context opens, so this runs before. */
static void dc_arm(void)
{
    const char *rank = getenv("TMX_RANK"), *at = getenv("MP_DC_STOP");

    if (rank != NULL && strcmp(rank, "3") == 0)
        setenv("TMX_SHM_TEST_STOP", at != NULL ? at : "claim:20", 1);
}

/* The live senders' messages: mostly of one cell, every seventh a span
 * of two or three (the victim's: MP_DC_LEN bytes, 64 by default; more
 * than a cell makes it stop inside a span). */
#define DC_MAX (MP_CELL_EAGER + 16000)

static size_t dc_len(unsigned i)
{
    if (i % 7 == 3)
        return MP_CELL_EAGER + 1 + ((size_t)i * 131) % 16000;
    return ((size_t)i * 997) % (MP_CELL_EAGER + 1);
}

static void dc_victim(void)
{
    uint32_t pid = (uint32_t)getpid();
    const char *v = getenv("MP_DC_LEN");
    size_t len = v != NULL && atol(v) > 0 && (size_t)atol(v) <= MP_EAGER ? (size_t)atol(v) : 64;
    unsigned char *buf = mp_buf_alloc(len);

    mp_wait_send(mp_send(1, &pid, sizeof(pid), DC_TAG), 1, DC_TAG, sizeof(pid), "pid to rank 1");
    for (unsigned i = 0; i < DC_VICTIM_MSGS; i++)
        mp_wait_send(mp_send(0, buf, len, DC_TAG | 3u << 20 | i), 0, DC_TAG | 3u << 20 | i, len,
                     "victim's send");
    mp_fail("never stopped: is MP_DC_STOP claim:N, publish:N or fbox:N with N <= %d?", DC_VICTIM_MSGS);
}

/* Waits until rank 3 has stopped itself, then kills it. */
static void dc_kill_victim(void)
{
    uint32_t pid = 0;
    tmx_completion_t c;
    int64_t t0 = mp_now_us();
    char path[64], stat[256];

    mp_check_recv("victim's pid", mp_wait(mp_recv(3, &pid, sizeof(pid), DC_TAG, TMX_TAG_EXACT), &c,
                                          "victim's pid"), &c, 3, DC_TAG, sizeof(pid), sizeof(pid));
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    for (;;) {
        if (mp_pid_stopped(path, stat, sizeof(stat)))
            break;
        if (mp_now_us() - t0 > MP_WAIT_US)
            mp_fail("rank 3 (pid %u) did not stop itself: %s", pid, stat);
        usleep(1000);
    }
    kill((pid_t)pid, SIGKILL);
    fprintf(stderr, "mp_test rank 1: killed rank 3 (pid %u), stopped inside a send\n", pid);
}

static void dc_send_all(void)
{
    unsigned char *buf = mp_buf_alloc(DC_MAX);
    tmx_completion_t c;
    char go = 0;

    if (mp_rank == 1) {
        dc_kill_victim();
        mp_wait_send(mp_send(2, &go, 1, DC_TAG | 1), 2, DC_TAG | 1, 1, "go to rank 2");
    } else {
        mp_wait(mp_recv(1, &go, 1, DC_TAG | 1, TMX_TAG_EXACT), &c, "go from rank 1");
    }
    for (unsigned i = 0; i < DC_MSGS; i++) {
        uint64_t tag = DC_TAG | (uint64_t)mp_rank << 20 | i;
        mp_fill(buf, dc_len(i), mp_seed(mp_rank, i, 0xdc));
        mp_wait_send(mp_send(0, buf, dc_len(i), tag), 0, tag, dc_len(i), "live sender's send");
    }
    mp_wait(mp_recv(0, &go, 1, DC_TAG | 2, TMX_TAG_EXACT), &c, "rank 0's answer");
    free(buf);
}

static void dc_recv_all(void)
{
    unsigned char *bufs = mp_buf_alloc(2 * DC_MSGS * (DC_MAX + MP_GUARD));
    tmx_request_h reqs[2 * DC_MSGS];
    int64_t t0 = mp_now_us();
    char go = 1;

    for (unsigned k = 0; k < 2 * DC_MSGS; k++) {
        unsigned char *b = bufs + (size_t)k * (DC_MAX + MP_GUARD);
        mp_guard_set(b, 0, DC_MAX + MP_GUARD);
        reqs[k] = mp_recv(1 + k / DC_MSGS, b, DC_MAX, DC_TAG | (uint64_t)(1 + k / DC_MSGS) << 20 | k % DC_MSGS,
                          TMX_TAG_EXACT);
    }
    for (unsigned k = 0; k < 2 * DC_MSGS; k++) {
        unsigned char *b = bufs + (size_t)k * (DC_MAX + MP_GUARD);
        uint32_t src = 1 + k / DC_MSGS, i = k % DC_MSGS;
        tmx_completion_t c;
        tmx_status_t st = mp_wait(reqs[k], &c, "receive from a live sender");
        mp_check_recv("receive from a live sender", st, &c, src, DC_TAG | (uint64_t)src << 20 | i, DC_MAX,
                      dc_len(i));
        mp_check_pattern("receive from a live sender", b, dc_len(i), mp_seed(src, i, 0xdc));
        mp_check_guard("receive from a live sender", b, dc_len(i), DC_MAX + MP_GUARD);
    }
    for (tmx_peer_t p = 1; p <= 2; p++)
        mp_wait_send(mp_send(p, &go, 1, DC_TAG | 2), p, DC_TAG | 2, 1, "answer");
    fprintf(stderr, "mp_test rank 0: %u messages from the live senders in %.0f ms\n", 2 * DC_MSGS,
            (double)(mp_now_us() - t0) / 1000.0);
    free(bufs);
}

static void case_deadclaim(void)
{
    struct sigaction sa = {.sa_handler = pd_on_term};

    sigaction(SIGTERM, &sa, NULL);
    mp_barrier("before rank 3 sends"); /* every rank outlives tmxrun's SIGTERM */
    if (mp_rank == 3)
        dc_victim();
    if (mp_rank == 0)
        dc_recv_all();
    else
        dc_send_all();
    printf("deadclaim ok rank %u\n", mp_rank);
}

/* ------------------------------------------------------------------ flood */

/* An unexpected flood: every rank but 0 streams small eager messages to
 * rank 0, which at first only progresses, with no receive posted, so that
 * all it takes is unexpected; once nothing has come for a while (the
 * senders wait, or are done) it receives everything from any source,
 * checking that each message comes once, in order per sender, intact.
 * Rank 0's peak RSS may grow over the whole run by at most the bound on
 * unexpected memory (MP_FLOOD_BOUND, else TMX_UNEXPECTED_MAX) plus
 * FL_SLACK. MP_FLOOD_N sets the messages per sender. */
#define FL_LEN_DEFAULT 64
#define FL_N_DEFAULT 100000
#define FL_SLACK (24 * MP_MIB)
#define FL_QUIET_US 300000          /* no event for this long: the flood waits */
#define FL_HOLD_US 3000000          /* the longest the receiver holds before it receives */
#define FL_BOUND_DEFAULT (64 * MP_MIB)

static unsigned long long fl_env(const char *name, unsigned long long def)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? strtoull(v, NULL, 10) : def;
}

/* A "Vm...:" line of /proc/self/status, in bytes. */
static size_t fl_status_bytes(const char *field)
{
    char line[256];
    size_t kib = 0, n = strlen(field);
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL)
        mp_fail("cannot open /proc/self/status");
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, n) == 0)
            kib = strtoull(line + n, NULL, 10);
    }
    fclose(f);
    return kib * 1024;
}

static size_t fl_len = FL_LEN_DEFAULT; /* MP_FLOOD_LEN: above a cell, spans */

static uint64_t fl_tag(uint32_t sender, uint32_t seq)
{
    return (uint64_t)sender << 32 | seq;
}

static void fl_send_one(const unsigned char *buf, uint64_t tag)
{
    static const tmx_op_params_t inject = {.field_mask = TMX_OP_FIELD_FLAGS,
                                           .flags = TMX_OP_FLAG_INJECT};
    static const tmx_op_params_t eager = {.field_mask = TMX_OP_FIELD_FLAGS,
                                          .flags = TMX_OP_FLAG_NO_CQ};
    int64_t since = 0;

    for (unsigned tries = 1;; tries++) {
        tmx_status_t st = tmx_tsend(mp_ctx, 0, buf, fl_len, tag,
                                    fl_len <= TMX_INJECT_MAX ? &inject : &eager, NULL);
        if (st == TMX_OK)
            return;
        if (st != TMX_ERR_AGAIN)
            mp_fail("flood send tag 0x%" PRIx64 ": %s", tag, tmx_strerror(st));
        tmx_progress(mp_ctx);
        if (tries % 16 != 0)
            continue;
        if (since == 0)
            since = mp_now_us();
        else if (mp_now_us() - since > MP_WAIT_US)
            mp_fail("flood send tag 0x%" PRIx64 ": no room for %d s", tag, MP_WAIT_US / 1000000);
        if (tries > 4096)
            usleep(50); /* the receiver holds us back: let it run */
        else
            sched_yield();
    }
}

static void fl_send_all(unsigned n)
{
    unsigned char *buf = mp_buf_alloc(fl_len);

    for (uint32_t i = 0; i < n; i++) {
        mp_fill(buf, fl_len, mp_seed(mp_rank, i, (unsigned)fl_len));
        fl_send_one(buf, fl_tag(mp_rank, i));
    }
    free(buf);
}

/* Progresses without a receive posted until the flood has begun and then
 * nothing has come for FL_QUIET_US (the senders are done, or wait at the
 * bound) or FL_HOLD_US have passed: everything taken meanwhile was
 * unexpected. */
static void fl_progress_only(void)
{
    int64_t last = mp_now_us(), begun;
    tmx_completion_t info;

    /* the flood may have begun while we were still in the barrier, even
     * up to the bound: then progress takes nothing more, and a probe
     * finds what it took */
    while (tmx_progress(mp_ctx) <= 0 &&
           tmx_tprobe(mp_ctx, TMX_ANY_SOURCE, 0, TMX_TAG_ANY, 0, &info, NULL) != TMX_OK) {
        if (mp_now_us() - last > MP_WAIT_US)
            mp_fail("flood: nothing came for %d s", MP_WAIT_US / 1000000);
        sched_yield();
    }
    begun = last = mp_now_us();

    /* over udp the senders at the bound resend what we leave, and their
     * resends are events too: quiet may never come, so hold at most
     * FL_HOLD_US */
    while (mp_now_us() - last < FL_QUIET_US && mp_now_us() - begun < FL_HOLD_US) {
        if (tmx_progress(mp_ctx) > 0)
            last = mp_now_us();
        else
            sched_yield();
    }
}

static void fl_recv_check(uint32_t *next, const unsigned char *buf, const tmx_completion_t *c,
                          unsigned n)
{
    uint32_t s = (uint32_t)(c->tag >> 32), seq = (uint32_t)c->tag;

    if (s == 0 || s >= mp_size || c->source != s)
        mp_fail("flood: message tag 0x%" PRIx64 " from peer %u: no such sender", c->tag, c->source);
    if (seq != next[s] || seq >= n)
        mp_fail("flood: from sender %u message %u came where %u was due", s, seq, next[s]);
    if (c->length != fl_len)
        mp_fail("flood: message %u of sender %u has %zu bytes, not %zu", seq, s, (size_t)c->length,
                fl_len);
    mp_check_pattern("flood receive", buf, fl_len, mp_seed(s, seq, (unsigned)fl_len));
    next[s]++;
}

static void fl_recv_all(unsigned n)
{
    uint64_t total = (uint64_t)n * (mp_size - 1);
    uint32_t *next = calloc(mp_size, sizeof(*next));
    unsigned char *buf = mp_buf_alloc(fl_len + MP_GUARD);
    tmx_completion_t c;

    if (next == NULL)
        mp_fail("out of memory");
    for (uint64_t k = 0; k < total; k++) {
        tmx_request_h r = mp_recv(TMX_ANY_SOURCE, buf, fl_len, 0, TMX_TAG_ANY);
        tmx_status_t st = mp_wait(r, &c, "flood receive");
        if (st != TMX_OK)
            mp_fail("flood receive %" PRIu64 ": %s", k, tmx_strerror(st));
        fl_recv_check(next, buf, &c, n);
    }
    for (uint32_t s = 1; s < mp_size; s++) {
        if (next[s] != n)
            mp_fail("flood: sender %u delivered %u of %u messages", s, next[s], n);
    }
    free(next);
    free(buf);
}

static void case_flood(void)
{
    unsigned n = (unsigned)fl_env("MP_FLOOD_N", FL_N_DEFAULT);
    size_t bound = fl_env("MP_FLOOD_BOUND", fl_env("TMX_UNEXPECTED_MAX", FL_BOUND_DEFAULT));
    size_t base, peak_held, peak;
    int64_t t0;

    fl_len = (size_t)fl_env("MP_FLOOD_LEN", FL_LEN_DEFAULT);
    if (fl_len == 0 || fl_len > MP_EAGER)
        mp_fail("MP_FLOOD_LEN=%zu: want 1 to %zu (eager messages)", fl_len, MP_EAGER);

    if (mp_rank != 0) {
        mp_barrier("before the flood");
        fl_send_all(n);
        return;
    }
    base = fl_status_bytes("VmRSS:");
    mp_barrier("before the flood");
    t0 = mp_now_us();
    fl_progress_only();
    peak_held = fl_status_bytes("VmHWM:");
    fl_recv_all(n);
    peak = fl_status_bytes("VmHWM:");
    printf("flood: %u senders x %u messages of %zu bytes in %.2f s; receiver RSS %.1f MiB before, "
           "peak %.1f MiB while nothing was received, %.1f MiB in all (bound %.1f MiB + %d MiB)\n",
           mp_size - 1, n, fl_len, (double)(mp_now_us() - t0) / 1e6, base / 1048576.0,
           peak_held / 1048576.0, peak / 1048576.0, bound / 1048576.0, (int)(FL_SLACK / MP_MIB));
    if (bound == 0 || peak > base + bound + FL_SLACK)
        mp_fail("flood: peak RSS grew by %.1f MiB, more than the bound %.1f MiB + %d MiB",
                (peak - base) / 1048576.0, bound / 1048576.0, (int)(FL_SLACK / MP_MIB));
}

/* -------------------------------------------------------------- helpstop */

#define HS_TAG UINT64_C(0x4e1b000000000000)
#define HS_LEN ((size_t)64 << 20)   /* many chunks: the owner has time to take one */

/* Rank 1 (the owner of a large message) stops itself right after taking
 * a chunk of rank 0's shared copy to write; rank 0 then has every other
 * chunk, kills rank 1 and destroys its context while the owner's chunk is
 * still outstanding: teardown waits for it through the endpoint, which
 * must not be freed before (ASan: use after free). */
static void case_helpstop(void)
{
    unsigned char *buf = malloc(HS_LEN);
    uint32_t pid = (uint32_t)getpid();
    tmx_completion_t c;
    struct sigaction sa = {.sa_handler = pd_on_term};

    sigaction(SIGTERM, &sa, NULL); /* outlive tmxrun's SIGTERM after the kill */
    if (buf == NULL)
        mp_fail("no memory for %zu bytes", HS_LEN);
    memset(buf, 0x5a, HS_LEN);
    mp_barrier("before the shared copy");
    if (mp_rank == 1) {
        mp_wait_send(mp_send(0, &pid, sizeof(pid), HS_TAG), 0, HS_TAG, sizeof(pid), "pid to rank 0");
        mp_wait(mp_send(0, buf, HS_LEN, HS_TAG | 1), &c, "large send");
        mp_fail("never stopped: did rank 0 copy every chunk alone?");
    }
    mp_wait(mp_recv(1, &pid, sizeof(pid), HS_TAG, TMX_TAG_EXACT), &c, "rank 1's pid");
    tmx_request_h r = mp_recv(1, buf, HS_LEN, HS_TAG | 1, TMX_TAG_EXACT);
    char path[64], stat[256];
    int64_t t0 = mp_now_us();
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    for (;;) {
        if (mp_pid_stopped(path, stat, sizeof(stat)))
            break;
        if (tmx_request_test(r, &c) != TMX_INPROGRESS) {
            printf("helpstop skipped: rank 0 copied every chunk before rank 1 took one\n");
            kill((pid_t)pid, SIGKILL);
            exit(77);
        }
        if (mp_now_us() - t0 > MP_WAIT_US)
            mp_fail("rank 1 (pid %u) did not stop itself: %s", pid, stat);
        tmx_progress(mp_ctx);
    }
    kill((pid_t)pid, SIGKILL);
    tmx_context_destroy(mp_ctx);
    mp_ctx = NULL;
    printf("helpstop ok rank 0\n");
    free(buf);
}

/* ------------------------------------------------------------------ stale */

/* A buffer at an address that held another buffer, whose memory was
 * unmapped in between (seed 003: a registration cached for the old
 * memory must not serve the new): rank 0 sends from, and rank 1 receives
 * into, memory mapped afresh at the same address each round, with other
 * content, after munmap; then after madvise(MADV_DONTNEED) (the pages
 * replaced by zeros, then refilled); then from and into a malloc'd chunk
 * freed and allocated again (glibc maps chunks this large, and unmaps
 * them on free). The receiver must see each round's own content.
 * Run with each rendezvous protocol over each transport. */
#define ST_LEN (MP_MIB + 4096)
#define ST_ROUNDS 6
#define ST_TAG UINT64_C(0x5700000000000000)

/* len bytes mapped at at (anywhere for NULL); NULL when another mapping
 * took at meanwhile (a thread of the process, the sanitizer's own). */
static unsigned char *st_map_at(unsigned char *at, size_t len, const char *what)
{
    void *p = mmap(at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at != NULL ? MAP_FIXED_NOREPLACE : 0), -1, 0);

    if (p == MAP_FAILED && at != NULL && errno == EEXIST)
        return NULL;
    if (p == MAP_FAILED)
        mp_fail("%s: mmap at %p: %s", what, (void *)at, strerror(errno));
    if (at != NULL && p != at)
        mp_fail("%s: mmap gave %p, not %p", what, p, (void *)at);
    return p;
}

static void st_round(unsigned char *buf, unsigned r, const char *what)
{
    tmx_peer_t peer = 1 - mp_rank;
    uint64_t tag = ST_TAG | r;
    tmx_completion_t c;
    tmx_status_t st;

    if (mp_rank == 0) {
        mp_fill(buf, ST_LEN, mp_seed(r, 0x57, ST_LEN));
        mp_wait_send(mp_send(peer, buf, ST_LEN, tag), peer, tag, ST_LEN, what);
        return;
    }
    memset(buf, 0xee, ST_LEN);
    if (r % 2 == 1) { /* the message first: unexpected */
        tmx_completion_t info;
        mp_probe_until(peer, tag, TMX_TAG_EXACT, &info, what);
    }
    st = mp_wait(mp_recv(peer, buf, ST_LEN, tag, TMX_TAG_EXACT), &c, what);
    mp_check_recv(what, st, &c, peer, tag, ST_LEN, ST_LEN);
    mp_check_pattern(what, buf, ST_LEN, mp_seed(r, 0x57, ST_LEN));
}

static void case_stale(void)
{
    unsigned char *buf = st_map_at(NULL, ST_LEN, "stale"), *at = buf;
    unsigned reused = 0, moved = 0;
    char what[96];

    for (unsigned r = 0; r < ST_ROUNDS; r++) {
        snprintf(what, sizeof(what), "stale round %u (munmap, mmap at the same address)", r);
        st_round(buf, r, what);
        mp_barrier(what);
        munmap(buf, ST_LEN);
        if ((buf = st_map_at(at, ST_LEN, what)) == NULL) { /* the next round elsewhere */
            at = buf = st_map_at(NULL, ST_LEN, what);
            moved++;
        }
    }
    for (unsigned r = ST_ROUNDS; r < 2 * ST_ROUNDS; r++) {
        snprintf(what, sizeof(what), "stale round %u (madvise DONTNEED)", r);
        st_round(buf, r, what);
        mp_barrier(what);
        if (madvise(buf, ST_LEN, MADV_DONTNEED) != 0)
            mp_fail("%s: madvise: %s", what, strerror(errno));
    }
    munmap(buf, ST_LEN);
    buf = malloc(ST_LEN);
    for (unsigned r = 2 * ST_ROUNDS; r < 3 * ST_ROUNDS; r++) {
        snprintf(what, sizeof(what), "stale round %u (free, malloc)", r);
        if (buf == NULL)
            mp_fail("%s: out of memory", what);
        st_round(buf, r, what);
        mp_barrier(what);
        at = buf;
        free(buf);
        buf = malloc(ST_LEN);
        reused += buf == at;
    }
    free(buf);
    printf("stale: %u rounds of %u bytes through memory unmapped and mapped again at the same "
           "address, rank %u (the address was taken by another mapping %u of %u times; malloc "
           "gave the freed address back %u of %u times)\n",
           3 * ST_ROUNDS, (unsigned)ST_LEN, mp_rank, moved, ST_ROUNDS, reused, ST_ROUNDS);
}

/* ------------------------------------------------------------- writebound */

/* Rendezvous by write at the bound of unexpected memory
 * (TMX_UNEXPECTED_MAX tiny, run with TMX_PROTO=shm:write@64k): rank 0
 * sends B (rendezvous), then eager messages that rank 1 has no receive
 * for yet, then floods it until its ring is full; rank 1 waits for B
 * alone before it posts the others. B's WDONE comes behind the
 * unexpected messages, which rank 1 must take beyond its bound for it:
 * B completes on both sides, then every other message arrives, and
 * rank 0 completes B only once rank 1 has it (it destroys its context
 * right after, which must lose nothing). */
#define WB_BIG (256 * 1024)
#define WB_TAG UINT64_C(0x5b00000000000000)

static void case_writebound(void)
{
    unsigned char *b = malloc(WB_BIG), small[64];
    tmx_completion_t comp;
    tmx_status_t st;
    uint32_t n = 0;

    if (b == NULL)
        mp_fail("writebound: out of memory");
    mp_barrier("writebound start");
    if (mp_rank == 0) {
        tmx_request_h r;
        mp_fill(b, WB_BIG, mp_seed(0x5b, 1, WB_BIG));
        r = mp_send(1, b, WB_BIG, WB_TAG);
        for (;; n++) {
            tmx_request_h q = NULL;
            memset(small, (int)(n & 0xff), sizeof(small));
            st = tmx_tsend(mp_ctx, 1, small, sizeof(small), WB_TAG | 1 | (uint64_t)n << 8, &mp_no_cq, &q);
            if (st == TMX_ERR_AGAIN || n == 100000)
                break;
            if (st != TMX_OK)
                mp_fail("writebound: eager send %u: %s", n, tmx_strerror(st));
            tmx_request_free(q);
        }
        st = mp_wait(r, &comp, "writebound: B send");
        if (st != TMX_OK)
            mp_fail("writebound: B send: %s", tmx_strerror(st));
        mp_wait_send(mp_send(1, &n, sizeof(n), WB_TAG | 2), 1, WB_TAG | 2, sizeof(n), "writebound: count");
        printf("writebound: rank 0 sent B and %u eager messages behind it\n", n);
        free(b);
        return;
    }
    st = tmx_request_wait(mp_recv(0, b, WB_BIG, WB_TAG, TMX_TAG_EXACT), 20000000, &comp);
    if (st != TMX_OK)
        mp_fail("writebound: B received with %s while the messages behind it wait", tmx_strerror(st));
    mp_check_pattern("writebound: B", b, WB_BIG, mp_seed(0x5b, 1, WB_BIG));
    /* the rest in order from one source: the eager ones, then the count
     * (one receive matches both, as rank 0 cannot send the count until
     * these are taken) */
    for (uint32_t i = 0;; i++) {
        char what[64];
        unsigned char in[64];
        snprintf(what, sizeof(what), "writebound: message %u after B", i);
        st = mp_wait(mp_recv(0, in, sizeof(in), WB_TAG, UINT64_C(0x00ffffffffffffff)), &comp, what);
        if (st != TMX_OK)
            mp_fail("%s: %s", what, tmx_strerror(st));
        if (comp.tag == (WB_TAG | 2)) {
            memcpy(&n, in, sizeof(n));
            if (n != i)
                mp_fail("writebound: %u eager messages came, rank 0 sent %u", i, n);
            break;
        }
        if (comp.tag != (WB_TAG | 1 | (uint64_t)i << 8) || comp.length != sizeof(small) ||
            in[0] != (unsigned char)(i & 0xff) || in[63] != (unsigned char)(i & 0xff))
            mp_fail("%s: tag 0x%" PRIx64 ", %zu bytes, content %u", what, comp.tag, comp.length, in[0]);
    }
    printf("writebound: rank 1 got B, then %u eager messages\n", n);
    free(b);
}

/* ------------------------------------------------------------------- main */

typedef struct mp_case {
    const char *name;
    uint32_t min_ranks;
    uint32_t max_ranks;
    void (*run)(void);
    int final_barrier;  /* peerdeath cannot: the launcher's barrier fails */
} mp_case_t;

/* ----------------------------------------------------------------- twoctx */

/* A second context of each rank joins the job too (a program with a
 * context per thread or per library), created right after the first:
 * each must get the peers' addresses of its own generation, never
 * another context's, so every message lands on the context it was sent
 * to. Each context receives one message from every rank (itself
 * included) with its own tag, from any source, and checks the sender. */
static void tc_exchange(tmx_context_h c, const char *name, uint32_t tag)
{
    uint32_t *rbuf = calloc(mp_size, sizeof(*rbuf));
    tmx_request_h *r = calloc(mp_size, sizeof(*r)), *s = calloc(mp_size, sizeof(*s));
    uint32_t me = mp_rank;

    if (rbuf == NULL || r == NULL || s == NULL)
        mp_fail("twoctx: out of memory");
    for (uint32_t p = 0; p < mp_size; p++) {
        if (tmx_trecv(c, p, &rbuf[p], sizeof(rbuf[p]), tag, TMX_TAG_EXACT, &mp_no_cq, &r[p]) != TMX_OK)
            mp_fail("twoctx: context %s: receive from %u refused", name, p);
    }
    for (uint32_t p = 0; p < mp_size; p++) {
        if (tmx_tsend(c, p, &me, sizeof(me), tag, &mp_no_cq, &s[p]) != TMX_OK)
            mp_fail("twoctx: context %s: send to %u refused", name, p);
    }
    for (uint32_t p = 0; p < mp_size; p++) {
        tmx_completion_t cr;
        tmx_status_t st = tmx_request_wait(r[p], 10000000, &cr);
        if (st != TMX_OK)
            mp_fail("twoctx: context %s: nothing from rank %u in 10 s (%s): its messages went to another "
                    "context", name, p, tmx_strerror(st));
        if (rbuf[p] != p)
            mp_fail("twoctx: context %s: rank %u's message says rank %u", name, p, rbuf[p]);
        tmx_request_free(r[p]);
        if ((st = tmx_request_wait(s[p], 10000000, NULL)) != TMX_OK)
            mp_fail("twoctx: context %s: send to %u: %s", name, p, tmx_strerror(st));
        tmx_request_free(s[p]);
    }
    free(rbuf);
    free(r);
    free(s);
}

static void case_twoctx(void)
{
    tmx_context_h second;
    uint32_t rank, size;
    tmx_status_t st = tmx_context_create(NULL, &second);

    if (st != TMX_OK)
        mp_fail("twoctx: a second context: %s", tmx_strerror(st));
    if ((st = tmx_job_info(second, &rank, &size)) != TMX_OK || rank != mp_rank || size != mp_size)
        mp_fail("twoctx: the second context is rank %u of %u (%s)", rank, size, tmx_strerror(st));
    tc_exchange(second, "second", 0xB);
    tc_exchange(mp_ctx, "first", 0xA);
    if ((st = tmx_job_barrier(second)) != TMX_OK)
        mp_fail("twoctx: barrier on the second context: %s", tmx_strerror(st));
    tmx_context_destroy(second);
}

static const mp_case_t mp_cases[] = {
    {"pingpong", 2, 2, case_pingpong, 1}, {"anysource", 2, 64, case_anysource, 1},
    {"order", 2, 2, case_order, 1},       {"truncate", 2, 2, case_truncate, 1},
    {"probe", 2, 2, case_probe, 1},       {"peerdeath", 3, 3, case_peerdeath, 0},
    {"oversub", 2, 4096, case_oversub, 1}, {"lonely", 2, 2, case_lonely, 1},
    {"busy", 2, 2, case_busy, 1},         {"alltoall", 2, 4096, case_alltoall, 1},
    {"hostgone", 2, 2, case_hostgone, 0}, {"scale", 2, 4096, case_scale, 1},
    {"deadclaim", 4, 4, case_deadclaim, 0}, {"threads", 2, 2, case_threads, 1},
    {"flood", 2, 64, case_flood, 1},
    {"pollwait", 2, 2, case_pollwait, 1}, {"helpstop", 2, 2, case_helpstop, 0},
    {"stale", 2, 2, case_stale, 1},       {"writebound", 2, 2, case_writebound, 1},
    {"pollany", 3, 64, case_pollany, 1},  {"twoctx", 2, 64, case_twoctx, 1},
};

static const mp_case_t *mp_find(const char *name)
{
    for (size_t i = 0; i < sizeof(mp_cases) / sizeof(mp_cases[0]); i++) {
        if (strcmp(mp_cases[i].name, name) == 0)
            return &mp_cases[i];
    }
    return NULL;
}

static void mp_usage(void)
{
    fprintf(stderr, "usage: tmxrun -n N mp_test CASE\ncases:");
    for (size_t i = 0; i < sizeof(mp_cases) / sizeof(mp_cases[0]); i++)
        fprintf(stderr, " %s (%u..%u ranks)", mp_cases[i].name, mp_cases[i].min_ranks,
                mp_cases[i].max_ranks);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    const mp_case_t *tc = argc == 2 ? mp_find(argv[1]) : NULL;
    int64_t t0 = mp_now_us();
    tmx_status_t st;

    if (tc == NULL) {
        mp_usage();
        return 2;
    }
    mp_case = tc->name;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (tc->run == case_deadclaim)
        dc_arm();
    if (tc->run == case_helpstop && getenv("TMX_RANK") != NULL && strcmp(getenv("TMX_RANK"), "1") == 0)
        setenv("TMX_SHM_TEST_STOP", "help:1", 1);
    const char *mt = getenv("MP_MT");
    tmx_context_params_t cp = {.field_mask = TMX_CONTEXT_FIELD_THREAD_MODE,
                               .thread_mode = tc->run == case_threads || (mt != NULL && strcmp(mt, "1") == 0)
                                                  ? TMX_THREAD_MULTIPLE
                                                  : TMX_THREAD_SINGLE};
    if ((st = tmx_context_create(&cp, &mp_ctx)) != TMX_OK)
        mp_fail("tmx_context_create: %s", tmx_strerror(st));
    if ((st = tmx_job_info(mp_ctx, &mp_rank, &mp_size)) != TMX_OK)
        mp_fail("tmx_job_info: %s (run me under tmxrun)", tmx_strerror(st));
    if (mp_size < tc->min_ranks || mp_size > tc->max_ranks)
        mp_fail("needs %u..%u ranks, got %u", tc->min_ranks, tc->max_ranks, mp_size);
    tc->run();
    if (tc->final_barrier)
        mp_barrier("at the end");
    tmx_context_destroy(mp_ctx);
    if (mp_rank == 0 && tc->final_barrier)
        printf("mp_test %s: ok, %u ranks, %.2f s\n", tc->name, mp_size,
               (double)(mp_now_us() - t0) / 1e6);
    return 0;
}
