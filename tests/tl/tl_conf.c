/*
 * The transport conformance suite: what tl.h promises, checked the same
 * way over each transport (tl_conf TRANSPORT [CASE...]): packets of every
 * size up to max_packet and the refusal of a larger one, packets gathered
 * from several pieces, remote reads across size boundaries and their
 * refusals (wrong key, out of bounds), remote writes across size
 * boundaries and their refusals, the failure upcall when a peer
 * closes, closing with reads and packets in flight, and wait() in one
 * thread while another progresses and sends (run under ThreadSanitizer
 * too). Two interfaces of the transport live in this process and talk to
 * each other; self, which reaches only its own interface, talks to itself.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "unit.h"

#include "core/config.h"
#include "tl/tl.h"

#define LENT_KEY 0x1e47ULL
#define UUID_A 0xa11ce0001ULL
#define UUID_B 0xb0b000002ULL
#define WAIT_S 10

static const tl_ops_t *ops;
static int is_self;

typedef struct side {
    tl_iface_t *iface;
    uint64_t uuid;
    _Atomic size_t packets;     /* delivered to the layer above */
    unsigned char last[1 << 19]; /* the last packet's bytes */
    size_t last_len;
    size_t stream_total;        /* the packet streaming in (on_begin) */
    uint64_t last_src;
    int failures, clean;        /* peers reported failed, of which closed cleanly */
    size_t packets_at_failure;  /* packets delivered when the first was reported */
    unsigned char *lent;        /* memory others may read */
    size_t lent_len;
    unsigned refused;           /* mem_check answers other than TMX_OK */
    _Atomic size_t placed;      /* bytes put_data placed in lent */
    unsigned put_refused;       /* put_data answers other than TMX_OK */
    _Atomic size_t puts_done;   /* put_done calls */
    tmx_status_t put_status;    /* the last one's */
} side_t;

static void on_recv(void *arg, uint64_t src, const void *data, size_t len)
{
    side_t *s = arg;

    assert_true(len <= sizeof(s->last));
    memcpy(s->last, data, len);
    s->last_len = len;
    s->last_src = src;
    atomic_fetch_add(&s->packets, 1);
}

/* A packet streaming in (shm's spans): gathered as one. */
static void *on_begin(void *arg, uint64_t src, const void *first, size_t first_len, size_t total)
{
    side_t *s = arg;

    assert_true(first_len >= 64 && first_len < total && total <= sizeof(s->last));
    memcpy(s->last, first, first_len);
    s->last_len = first_len;
    s->last_src = src;
    s->stream_total = total;
    return s;
}

static void on_more(void *arg, void *sink, const void *piece, size_t len)
{
    side_t *s = sink;

    assert_ptr_equal(sink, arg);
    assert_true(len > 0 && s->last_len + len <= s->stream_total);
    memcpy(s->last + s->last_len, piece, len);
    s->last_len += len;
}

static void on_end(void *arg, void *sink, int how)
{
    side_t *s = sink;

    assert_ptr_equal(sink, arg);
    assert_int_equal(how, TL_STREAM_WHOLE);
    assert_int_equal(s->last_len, s->stream_total);
    atomic_fetch_add(&s->packets, 1);
}

static const tl_stream_cb_t on_stream = {on_begin, on_more, on_end};

static void on_fail(void *arg, uint64_t uuid, int clean)
{
    side_t *s = arg;

    if (s->failures++ == 0)
        s->packets_at_failure = atomic_load(&s->packets);
    s->clean += clean;
}

static tmx_status_t on_mem_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    side_t *s = arg;
    uint64_t base = (uintptr_t)s->lent;

    if (s->lent == NULL || rkey != LENT_KEY) {
        s->refused++;
        return TMX_ERR_NOT_FOUND;
    }
    if (addr < base || len > s->lent_len || addr - base > s->lent_len - len) {
        s->refused++;
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

/* Written bytes, only into lent memory under its key. */
static tmx_status_t on_put_data(void *arg, uint64_t src, uint64_t addr, uint64_t rkey, const void *data,
                                size_t len)
{
    side_t *s = arg;

    (void)src;
    if (on_mem_check(arg, addr, len, rkey) != TMX_OK) {
        s->put_refused++;
        return TMX_ERR_INVALID;
    }
    memcpy((void *)(uintptr_t)addr, data, len);
    atomic_fetch_add(&s->placed, len);
    return TMX_OK;
}

static void on_put_done(void *arg, uint64_t lkey, tmx_status_t status)
{
    side_t *s = arg;

    assert_int_equal(lkey, LENT_KEY);
    s->put_status = status;
    atomic_fetch_add(&s->puts_done, 1);
}

/* ------------------------------------------------------------ the pair */

typedef struct pair {
    side_t *a, *b;              /* b == a over self */
    tl_ep_t *ab;                /* a's endpoint to b */
    tl_ep_t *ba;
} pair_t;

static void side_open(side_t *s, uint64_t uuid, int mt)
{
    config_t cfg;
    tl_iface_params_t p = {uuid, 0x70b, on_recv, on_fail, on_mem_check, s, NULL, mt, &cfg.tl, s, &on_stream,
                           on_put_data, on_put_done, 0, NULL, 0, NULL};

    memset(s, 0, sizeof(*s));
    s->uuid = uuid;
    assert_int_equal(config_load(&cfg, NULL), TMX_OK);
    assert_int_equal(ops->iface_open(&p, &s->iface), TMX_OK);
}

static tl_ep_t *connect_to(side_t *from, side_t *to, tmx_peer_t peer)
{
    unsigned char addr[256];
    size_t len = sizeof(addr);
    tl_ep_t *ep;

    assert_int_equal(ops->address(to->iface, addr, &len), TMX_OK);
    assert_int_equal(ops->reachable(from->iface, addr, len), TMX_OK);
    assert_int_equal(ops->ep_create(from->iface, addr, len, peer, to->uuid, &ep), TMX_OK);
    return ep;
}

static void pair_open(pair_t *p, int mt)
{
    p->a = calloc(1, sizeof(side_t));
    p->b = is_self ? p->a : calloc(1, sizeof(side_t));
    assert_non_null(p->a);
    assert_non_null(p->b);
    side_open(p->a, UUID_A, mt);
    if (!is_self)
        side_open(p->b, UUID_B, mt);
    p->ab = connect_to(p->a, p->b, 1);
    p->ba = is_self ? p->ab : connect_to(p->b, p->a, 0);
}

/* The teardown order of tl.h: upcalls stop, endpoints close, then the
 * interface. */
static void side_close(side_t *s, tl_ep_t *ep)
{
    tl_iface_mute(s->iface);
    if (ep != NULL)
        ops->ep_destroy(ep);
    ops->iface_close(s->iface);
}

static void pair_close(pair_t *p)
{
    side_close(p->a, p->ab);
    if (!is_self)
        side_close(p->b, p->ba);
    free(p->a);
    if (!is_self)
        free(p->b);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pump(pair_t *p)
{
    ops->progress(p->a->iface);
    if (!is_self)
        ops->progress(p->b->iface);
}

/* Progresses both sides until *flag reaches want, or fails the case. */
static void pump_until(pair_t *p, _Atomic size_t *count, size_t want)
{
    double end = now_s() + WAIT_S;

    while (atomic_load(count) < want) {
        assert_true(now_s() < end);
        pump(p);
    }
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 9));
}

/* ------------------------------------------------------------ packets */

static void send_one(pair_t *p, const unsigned char *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};
    size_t before = atomic_load(&p->b->packets);
    double end = now_s() + WAIT_S;
    tmx_status_t st;

    while ((st = ops->send(p->ab, &iov, 1)) == TMX_ERR_AGAIN) {
        assert_true(now_s() < end);
        pump(p);
    }
    assert_int_equal(st, TMX_OK);
    pump_until(p, &p->b->packets, before + 1);
    assert_int_equal(p->b->last_len, len);
    assert_true(len == 0 || memcmp(p->b->last, buf, len) == 0);
    assert_true(p->b->last_src == p->a->uuid);
}

static void packets_every_size(void **state)
{
    pair_t p;
    size_t max;
    unsigned char *buf;

    pair_open(&p, 0);
    max = p.a->iface->max_packet;
    assert_true(max <= sizeof(p.b->last));
    assert_true(p.a->iface->eager_limit <= max);
    buf = malloc(max + 1);
    assert_non_null(buf);
    fill(buf, max + 1, 1);
    size_t sizes[] = {1, 2, 63, 64, 65, 4095, 4096, 4097, max / 2, max - 1, max};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        print_message("%zu bytes\n", sizes[i]);
        send_one(&p, buf, sizes[i]);
    }
    /* one byte more, or none, is refused at once, and nothing arrives */
    struct iovec big = {buf, max + 1}, none = {buf, 0};
    size_t before = atomic_load(&p.b->packets);
    assert_int_equal(ops->send(p.ab, &big, 1), TMX_ERR_INVALID);
    assert_int_equal(ops->send(p.ab, &none, 1), TMX_ERR_INVALID);
    assert_int_equal(ops->send(p.ab, NULL, 0), TMX_ERR_INVALID);
    for (int i = 0; i < 100; i++)
        pump(&p);
    assert_int_equal(atomic_load(&p.b->packets), before);
    free(buf);
    pair_close(&p);
}

static void packets_gathered(void **state)
{
    pair_t p;
    unsigned char a[100], b[1], c[3000], all[3101];
    struct iovec iov[4] = {{a, sizeof(a)}, {NULL, 0}, {b, sizeof(b)}, {c, sizeof(c)}};

    pair_open(&p, 0);
    fill(a, sizeof(a), 2);
    fill(b, sizeof(b), 3);
    fill(c, sizeof(c), 4);
    memcpy(all, a, sizeof(a));
    memcpy(all + sizeof(a), b, sizeof(b));
    memcpy(all + sizeof(a) + sizeof(b), c, sizeof(c));
    assert_int_equal(ops->send(p.ab, iov, 4), TMX_OK);
    pump_until(&p, &p.b->packets, 1);
    assert_int_equal(p.b->last_len, sizeof(all));
    assert_memory_equal(p.b->last, all, sizeof(all));
    pair_close(&p);
}

/* Many packets in a row arrive, each once and in order. */
static void packets_in_order(void **state)
{
    enum { N = 5000 };
    pair_t p;
    uint32_t i = 0, seen = 0;
    double end = now_s() + WAIT_S;

    pair_open(&p, 0);
    while (seen < N) {
        struct iovec iov = {&i, sizeof(i)};
        size_t before = atomic_load(&p.b->packets);
        if (i < N && ops->send(p.ab, &iov, 1) == TMX_OK)
            i++;
        pump(&p);
        if (atomic_load(&p.b->packets) != before) {
            uint32_t got;
            memcpy(&got, p.b->last, sizeof(got));
            assert_true(got >= seen); /* the last of those delivered in this pass */
            seen = (uint32_t)atomic_load(&p.b->packets);
        }
        assert_true(now_s() < end);
    }
    assert_int_equal(atomic_load(&p.b->packets), N);
    pair_close(&p);
}

/* ------------------------------------------------------------ remote reads */

typedef struct read_op {
    tl_get_op_t super;
    _Atomic size_t done;
    tmx_status_t status;
} read_op_t;

static void read_done(tl_get_op_t *op, tmx_status_t status)
{
    read_op_t *r = (read_op_t *)op;

    r->status = status;
    atomic_store(&r->done, 1);
}

/* The first read mechanism a offers. */
static unsigned first_kind(const pair_t *p)
{
    unsigned k = p->a->iface->get_kinds;

    return k & -k;
}

/* a reads len bytes of b's lent memory at off, under key, by mechanism
 * kind; the status. */
static tmx_status_t read_kind(pair_t *p, unsigned kind, unsigned char *dst, size_t off, size_t len,
                              uint64_t key)
{
    read_op_t r = {{read_done}, 0, TMX_OK};
    tmx_status_t st = ops->get(p->ab, dst, len, (uintptr_t)p->b->lent + off, key, kind, &r.super);

    if (st != TMX_INPROGRESS)
        return st;
    pump_until(p, &r.done, 1);
    return r.status;
}

static tmx_status_t read_from(pair_t *p, unsigned char *dst, size_t off, size_t len, uint64_t key)
{
    return read_kind(p, first_kind(p), dst, off, len, key);
}

static void reads_every_size(void **state)
{
    pair_t p;
    size_t lim, lent = (4u << 20) + 3;
    unsigned char *dst;

    pair_open(&p, 0);
    lim = p.a->iface->eager_limit;
    p.b->lent = malloc(lent);
    p.b->lent_len = lent;
    dst = malloc(lent);
    assert_non_null(p.b->lent);
    assert_non_null(dst);
    fill(p.b->lent, lent, 5);
    size_t sizes[] = {1, 7, lim - 1, lim, lim + 1, 65535, 65536, 65537, 1u << 20, lent};
    assert_int_not_equal(p.a->iface->get_kinds, 0);
    for (unsigned kind = 1; kind <= TL_GET_COPY; kind <<= 1) {
        if (!(p.a->iface->get_kinds & kind))
            continue;
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t off = sizes[i] < lent ? (lent - sizes[i]) / 2 : 0;
            memset(dst, 0, sizes[i]);
            assert_int_equal(read_kind(&p, kind, dst, off, sizes[i], LENT_KEY), TMX_OK);
            assert_memory_equal(dst, p.b->lent + off, sizes[i]);
        }
    }
    /* a mechanism not offered is refused, with nothing placed */
    for (unsigned kind = 1; kind <= TL_GET_COPY; kind <<= 1) {
        if (!(p.a->iface->get_kinds & kind)) {
            dst[0] = 0xee;
            assert_int_equal(read_kind(&p, kind, dst, 0, 100, LENT_KEY), TMX_ERR_INVALID);
            assert_int_equal(dst[0], 0xee);
        }
    }
    assert_int_equal(read_kind(&p, 0, dst, 0, 100, LENT_KEY), TMX_ERR_INVALID);
    assert_int_equal(read_kind(&p, p.a->iface->get_kinds | 8, dst, 0, 100, LENT_KEY), TMX_ERR_INVALID);
    free(p.b->lent);
    p.b->lent = NULL;
    free(dst);
    pair_close(&p);
}

static void reads_refused(void **state)
{
    pair_t p;
    unsigned char lent[4096], dst[8192];
    size_t refused;

    pair_open(&p, 0);
    p.b->lent = lent;
    p.b->lent_len = sizeof(lent);
    fill(lent, sizeof(lent), 6);
    memset(dst, 0xee, sizeof(dst));
    if (p.a->iface->get_kinds & TL_GET_COPY) {
        /* emulated reads are served by the owner, which checks every one */
        assert_int_not_equal(read_kind(&p, TL_GET_COPY, dst, 0, 100, LENT_KEY + 1), TMX_OK);
        assert_int_not_equal(read_kind(&p, TL_GET_COPY, dst, 4000, 200, LENT_KEY), TMX_OK);
        assert_int_not_equal(read_kind(&p, TL_GET_COPY, dst, 0, sizeof(dst), LENT_KEY), TMX_OK);
        for (size_t i = 0; i < sizeof(dst); i++)
            assert_int_equal(dst[i], 0xee);
        assert_int_equal(read_kind(&p, TL_GET_COPY, dst, 96, 4000, LENT_KEY), TMX_OK);
        assert_memory_equal(dst, lent + 96, 4000);
        memset(dst, 0xee, sizeof(dst));
    }
    if (!p.a->iface->get_checked) {
        print_message("%s reads without asking the owner (the kernel checks): no refusals to see\n",
                      ops->name);
        assert_int_equal(read_from(&p, dst, 96, 4000, LENT_KEY), TMX_OK);
        assert_memory_equal(dst, lent + 96, 4000);
        p.b->lent = NULL;
        pair_close(&p);
        return;
    }
    assert_int_not_equal(read_from(&p, dst, 0, 100, LENT_KEY + 1), TMX_OK);     /* wrong key */
    assert_int_not_equal(read_from(&p, dst, 4000, 200, LENT_KEY), TMX_OK);     /* past the end */
    assert_int_not_equal(read_from(&p, dst, 0, sizeof(dst), LENT_KEY), TMX_OK); /* longer */
    refused = p.b->refused;
    assert_true(refused >= 3);
    /* nothing was placed, and the transport still reads what it may */
    for (size_t i = 0; i < sizeof(dst); i++)
        assert_int_equal(dst[i], 0xee);
    assert_int_equal(read_from(&p, dst, 96, 4000, LENT_KEY), TMX_OK);
    assert_memory_equal(dst, lent + 96, 4000);
    p.b->lent = NULL;
    pair_close(&p);
}

/* ------------------------------------------------------------ writes */

/* a writes len bytes at src (in its lent memory) to dst (in b's), under
 * key, by mechanism kind; the status once every byte is in place
 * (put_checked: counted by b's put_data) or the write failed. A write b
 * will refuse (lands == 0) is waited for only until a has sent it all. */
static tmx_status_t write_lands(pair_t *p, unsigned kind, const unsigned char *src, unsigned char *dst,
                                size_t len, uint64_t key, int lands)
{
    size_t placed = atomic_load(&p->b->placed), done = atomic_load(&p->a->puts_done);
    tmx_status_t st = ops->put(p->ab, src, len, (uintptr_t)dst, key, LENT_KEY, kind);

    if (st == TMX_INPROGRESS) {
        pump_until(p, &p->a->puts_done, done + 1);
        st = p->a->put_status;
    }
    if (st == TMX_OK && p->b->iface->put_checked && lands)
        pump_until(p, &p->b->placed, placed + len);
    return st;
}

static tmx_status_t write_kind(pair_t *p, unsigned kind, const unsigned char *src, unsigned char *dst,
                               size_t len, uint64_t key)
{
    return write_lands(p, kind, src, dst, len, key, 1);
}

/* Over self, a and b are one side: its lent memory holds both the source
 * (front half) and the target (back half). */
static void writes_every_size(void **state)
{
    pair_t p;
    size_t lim, len = (4u << 20) + 3;
    unsigned char *src, *dst;

    pair_open(&p, 0);
    if (p.a->iface->put_kinds == 0) {
        print_message("%s offers no writes here\n", ops->name);
        pair_close(&p);
        return;
    }
    lim = p.a->iface->eager_limit;
    src = malloc(2 * len);
    assert_non_null(src);
    dst = is_self ? src + len : malloc(len);
    assert_non_null(dst);
    p.a->lent = src;
    p.a->lent_len = is_self ? 2 * len : len;
    if (!is_self) {
        p.b->lent = dst;
        p.b->lent_len = len;
    }
    fill(src, len, 9);
    size_t sizes[] = {1, 7, lim - 1, lim, lim + 1, 65535, 65536, 65537, 1u << 20, len};
    for (unsigned kind = 1; kind <= TL_PUT_COPY; kind <<= 1) {
        if (!(p.a->iface->put_kinds & kind))
            continue;
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t off = sizes[i] < len ? (len - sizes[i]) / 2 : 0;
            memset(dst, 0, len);
            assert_int_equal(write_kind(&p, kind, src, dst + off, sizes[i], LENT_KEY), TMX_OK);
            assert_memory_equal(dst + off, src, sizes[i]);
            if (off > 0)
                assert_int_equal(dst[off - 1], 0);
            if (off + sizes[i] < len)
                assert_int_equal(dst[off + sizes[i]], 0);
        }
    }
    /* a mechanism not offered is refused, with nothing placed */
    memset(dst, 0xee, 100);
    assert_int_equal(write_kind(&p, 0, src, dst, 100, LENT_KEY), TMX_ERR_INVALID);
    assert_int_equal(write_kind(&p, p.a->iface->put_kinds | 8, src, dst, 100, LENT_KEY), TMX_ERR_INVALID);
    assert_int_equal(dst[0], 0xee);
    p.a->lent = p.b->lent = NULL;
    if (!is_self)
        free(dst);
    free(src);
    pair_close(&p);
}

/* Written data the target did not lend (a wrong key, past the end) is
 * refused by the target where it sees every write (put_checked), and
 * nothing lands. */
static void writes_refused(void **state)
{
    pair_t p;
    unsigned char src[8192], lent[4096];
    unsigned kind;
    size_t before;

    pair_open(&p, 0);
    if (is_self || !p.b->iface->put_checked || p.a->iface->put_kinds == 0) {
        print_message("%s: no writes from another interface that their target sees\n", ops->name);
        pair_close(&p);
        return;
    }
    fill(src, sizeof(src), 3);
    p.a->lent = src;
    p.a->lent_len = sizeof(src);
    p.b->lent = lent;
    p.b->lent_len = sizeof(lent);
    memset(lent, 0xee, sizeof(lent));
    kind = p.a->iface->put_kinds & -p.a->iface->put_kinds;
    before = p.b->put_refused;
    write_lands(&p, kind, src, lent, 100, LENT_KEY + 1, 0);   /* wrong key */
    write_lands(&p, kind, src, lent + 4000, 200, LENT_KEY, 0); /* past the end */
    write_lands(&p, kind, src, lent, sizeof(src), LENT_KEY, 0); /* longer */
    /* the writes above went in order ahead of this one: once it is in,
     * they were all seen */
    assert_int_equal(write_kind(&p, kind, src, lent + 96, 4000, LENT_KEY), TMX_OK);
    assert_true(p.b->put_refused >= before + 3);
    for (size_t i = 0; i < 96; i++)
        assert_int_equal(lent[i], 0xee);
    assert_memory_equal(lent + 96, src, 4000);
    p.a->lent = p.b->lent = NULL;
    pair_close(&p);
}

/* ------------------------------------------------------------ failures */

/* b closes: a learns it through fail_cb (from progress or check_peers),
 * and a send to b then fails or goes nowhere, never crashes. */
static void peer_close_reported(void **state)
{
    pair_t p;
    double end;

    if (is_self)
        unit_skip("self has no other peer to lose");
    pair_open(&p, 0);
    send_one(&p, (const unsigned char *)"hello", 5);
    side_close(p.b, p.ba);
    end = now_s() + 30;
    while (p.a->failures == 0) {
        assert_true(now_s() < end);
        ops->progress(p.a->iface);
        ops->check_peers(p.a->iface);
        ops->wait(p.a->iface, 1000);
    }
    assert_int_equal(p.a->failures, 1);
    free(p.b);
    p.b = NULL;
    side_close(p.a, p.ab);
    free(p.a);
}

/* What a peer sent before it closed arrives before it is reported gone,
 * however check_peers and progress interleave: a receive waiting for its
 * last message must get it, not a failure. check_peers runs first here. */
static void peer_close_after_sending(void **state)
{
    enum { N = 20 };
    pair_t p;
    double end;

    if (is_self)
        unit_skip("self has no other peer to lose");
    pair_open(&p, 0);
    for (uint32_t i = 0; i < N; i++) {
        struct iovec iov = {&i, sizeof(i)};
        assert_int_equal(ops->send(p.ba, &iov, 1), TMX_OK);
    }
    ops->progress(p.b->iface); /* udp: out of its queue onto the wire */
    side_close(p.b, p.ba);
    end = now_s() + 30;
    while (p.a->failures == 0) {
        assert_true(now_s() < end);
        ops->check_peers(p.a->iface);
        ops->progress(p.a->iface);
    }
    assert_int_equal(p.a->packets_at_failure, N);
    free(p.b);
    side_close(p.a, p.ab);
    free(p.a);
}

/* Closing with a large read of ours and packets in flight: no callback
 * runs afterwards and nothing leaks (ASan and valgrind look). */
static void close_with_work_in_flight(void **state)
{
    pair_t p;
    size_t lent = 8u << 20;
    unsigned char *dst = malloc(lent), small[64] = {0};
    read_op_t r = {{read_done}, 0, TMX_OK};
    struct iovec iov = {small, sizeof(small)};
    tmx_status_t st;

    assert_non_null(dst);
    pair_open(&p, 0);
    p.b->lent = calloc(1, lent);
    p.b->lent_len = lent;
    assert_non_null(p.b->lent);
    st = ops->get(p.ab, dst, lent, (uintptr_t)p.b->lent, LENT_KEY, first_kind(&p), &r.super);
    assert_true(st == TMX_OK || st == TMX_INPROGRESS);
    for (int i = 0; i < 20; i++)
        (void)ops->send(p.ab, &iov, 1);
    for (int i = 0; i < 3; i++)
        pump(&p);
    side_close(p.a, p.ab);
    if (!is_self) {
        for (int i = 0; i < 100; i++)
            ops->progress(p.b->iface);
        side_close(p.b, p.ba);
    }
    free(p.b->lent);
    if (!is_self)
        free(p.b);
    free(p.a);
    free(dst);
}

/* ------------------------------------------------------------ threads */

typedef struct mt_arg {
    pair_t *p;
    pthread_mutex_t *lock;
    _Atomic int stop;
} mt_arg_t;

/* The core's rule: wait() runs unlocked, everything else under the lock. */
static void *mt_waiter(void *arg)
{
    mt_arg_t *m = arg;

    while (!atomic_load(&m->stop)) {
        ops->wait(m->p->b->iface, 2000);
        pthread_mutex_lock(m->lock);
        ops->progress(m->p->b->iface);
        pthread_mutex_unlock(m->lock);
    }
    return NULL;
}

static void wait_in_another_thread(void **state)
{
    enum { N = 2000 };
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pair_t p;
    mt_arg_t m = {&p, &lock, 0};
    pthread_t t[2];
    uint32_t sent = 0;
    double end = now_s() + 60;

    pair_open(&p, 1);
    assert_int_equal(pthread_create(&t[0], NULL, mt_waiter, &m), 0);
    assert_int_equal(pthread_create(&t[1], NULL, mt_waiter, &m), 0);
    while (atomic_load(&p.b->packets) < N) {
        assert_true(now_s() < end);
        pthread_mutex_lock(&lock);
        if (sent < N) {
            struct iovec iov = {&sent, sizeof(sent)};
            if (ops->send(p.ab, &iov, 1) == TMX_OK)
                sent++;
        }
        if (!is_self)
            ops->progress(p.a->iface);
        pthread_mutex_unlock(&lock);
    }
    atomic_store(&m.stop, 1);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    assert_int_equal(atomic_load(&p.b->packets), N);
    pair_close(&p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packets_every_size),
        cmocka_unit_test(packets_gathered),
        cmocka_unit_test(packets_in_order),
        cmocka_unit_test(reads_every_size),
        cmocka_unit_test(reads_refused),
        cmocka_unit_test(writes_every_size),
        cmocka_unit_test(writes_refused),
        cmocka_unit_test(peer_close_reported),
        cmocka_unit_test(peer_close_after_sending),
        cmocka_unit_test(close_with_work_in_flight),
        cmocka_unit_test(wait_in_another_thread),
    };

    if (argc < 2 || (ops = tl_find(argv[1])) == NULL) {
        fprintf(stderr, "usage: %s TRANSPORT [CASE...]  (TRANSPORT: self, shm or udp)\n", argv[0]);
        return 2;
    }
    is_self = ops == &tl_self_ops;
    setenv("TMX_UDP_ADDR", "127.0.0.1", 1); /* both sides on one host, any network */
    return UNIT_MAIN(argc - 1, argv + 1, tests);
}
