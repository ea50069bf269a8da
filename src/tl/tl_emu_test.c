/*
 * The emulated remote read (src/tl/tl_emu.c) between two sides joined by
 * queues in memory: a "wire" that holds requests and chunks until the test
 * delivers them, can refuse room (TMX_ERR_AGAIN) and can be tampered with.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "unit.h"

#include "tl/tl_emu.h"

#define KEY 0x1234
#define MAX_MSGS 8192

typedef struct msg {
    int is_req;
    tl_emu_req_t req;
    uint32_t id;
    uint64_t offset;
    tmx_status_t status;
    size_t n;
    unsigned char data[256];
} msg_t;

/* One side: an interface, its endpoint to the other side, its emu. */
typedef struct side {
    tl_iface_t iface;
    tl_ep_t ep;                 /* to the other side */
    tl_emu_t emu;
    msg_t *out;                 /* sent, not yet delivered */
    size_t n_out;
    int room;                   /* sends accepted before TMX_ERR_AGAIN; -1: any */
    const unsigned char *lent;  /* the memory lent under KEY */
    size_t lent_len;
    unsigned keys;              /* and under KEY + 1 .. KEY + keys - 1 too, if more than 1 */
    int mem_checks;
    int waited;
} side_t;

typedef struct op {
    tl_get_op_t super;
    int done;
    tmx_status_t status;
} op_t;

static const tl_ops_t fake_ops = {.name = "fake"};

static void op_done(tl_get_op_t *o, tmx_status_t st)
{
    op_t *op = (op_t *)o;

    op->done++;
    op->status = st;
}

static side_t *side_of(tl_ep_t *ep)
{
    return (side_t *)((char *)ep - offsetof(side_t, ep));
}

static int take_room(side_t *s)
{
    if (s->room == 0)
        return 0;
    if (s->room > 0)
        s->room--;
    return 1;
}

static tmx_status_t req_send(tl_ep_t *ep, const tl_emu_req_t *req)
{
    side_t *s = side_of(ep);

    if (!take_room(s))
        return TMX_ERR_AGAIN;
    assert_true(s->n_out < MAX_MSGS);
    s->out[s->n_out++] = (msg_t){.is_req = 1, .req = *req};
    return TMX_OK;
}

static tmx_status_t data_send(tl_ep_t *ep, uint32_t id, uint64_t offset, tmx_status_t status,
                              const void *src, size_t n, uint64_t rkey)
{
    side_t *s = side_of(ep);
    msg_t *m;

    (void)rkey;
    if (!take_room(s))
        return TMX_ERR_AGAIN;
    assert_true(s->n_out < MAX_MSGS);
    assert_true(n <= sizeof(m->data));
    m = &s->out[s->n_out++];
    *m = (msg_t){.id = id, .offset = offset, .status = status, .n = n};
    if (n > 0)
        memcpy(m->data, src, n);
    return TMX_OK;
}

static void waiting(tl_ep_t *ep, uint64_t since, uint64_t now, uint64_t *reported)
{
    (void)since;
    (void)now;
    assert_non_null(reported); /* the read's own, kept across calls */
    side_of(ep)->waited++;
}

static const tl_emu_ops_t ops = {req_send, data_send, waiting, NULL};

static tmx_status_t mem_check(void *arg, uint64_t addr, size_t len, uint64_t rkey)
{
    side_t *s = arg;
    uintptr_t base = (uintptr_t)s->lent;

    s->mem_checks++;
    if (s->lent == NULL || rkey - KEY >= (s->keys > 1 ? s->keys : 1) || addr < base || len > s->lent_len ||
        addr - base > s->lent_len - len)
        return TMX_ERR_NOT_FOUND;
    return TMX_OK;
}

static void side_init(side_t *s, size_t chunk)
{
    memset(s, 0, sizeof(*s));
    s->iface.ops = &fake_ops;
    s->iface.mem_check = mem_check;
    s->iface.recv_arg = s;
    assert_int_equal(tl_iface_register(&s->iface), TMX_OK);
    tl_ep_init(&s->ep, &s->iface, 0, TMX_PEER_NONE);
    s->out = calloc(MAX_MSGS, sizeof(msg_t));
    assert_non_null(s->out);
    s->room = -1;
    tl_emu_init(&s->emu, &s->iface, &ops, chunk);
}

static void side_fini(side_t *s)
{
    tl_emu_abandon(&s->emu);
    tl_iface_unregister(&s->iface);
    free(s->out);
}

/* Delivers what from sent to to; returns how many messages. */
static size_t deliver(side_t *from, side_t *to)
{
    size_t n = from->n_out;

    for (size_t i = 0; i < n; i++) {
        msg_t *m = &from->out[i];
        if (m->is_req)
            assert_int_equal(tl_emu_req_arrive(&to->emu, &to->ep, &m->req), TMX_OK);
        else
            (void)tl_emu_data_arrive(&to->emu, &to->ep, m->id, m->offset, m->status, m->data, m->n, 0);
    }
    from->n_out = 0;
    return n;
}

/* Runs both sides until nothing moves. */
static void run(side_t *a, side_t *b)
{
    for (int i = 0; i < 10000; i++) {
        tl_emu_progress(&a->emu, 0);
        tl_emu_progress(&b->emu, 0);
        if (deliver(a, b) + deliver(b, a) == 0 && !tl_emu_busy(&b->emu))
            return;
    }
}

/* Every length around the chunk size arrives whole, in chunk-size pieces. */
static void reads_every_size(void **state)
{
    static const size_t sizes[] = {1, 63, 64, 65, 127, 128, 129, 1000, 4096};
    side_t r, o;
    unsigned char src[4096], dst[4097];

    (void)state;
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (unsigned char)(i * 7 + 3);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        op_t op = {{op_done}, 0, TMX_OK};
        side_init(&r, 64);
        side_init(&o, 64);
        o.lent = src;
        o.lent_len = sizes[k];
        memset(dst, 0, sizeof(dst));
        assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizes[k], (uintptr_t)src, KEY, &op.super),
                         TMX_INPROGRESS);
        run(&r, &o);
        assert_int_equal(op.done, 1);
        assert_int_equal(op.status, TMX_OK);
        assert_memory_equal(dst, src, sizes[k]);
        assert_int_equal(dst[sizes[k]], 0); /* nothing past the end */
        assert_int_equal(o.mem_checks, 1 + (int)((sizes[k] + 63) / 64)); /* once, then per chunk */
        assert_false(tl_emu_busy(&r.emu));
        assert_false(tl_emu_busy(&o.emu));
        side_fini(&r);
        side_fini(&o);
    }
}

static void zero_length_completes_at_once(void **state)
{
    side_t r;
    op_t op = {{op_done}, 0, TMX_OK};

    (void)state;
    side_init(&r, 64);
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, NULL, 0, 0, KEY, &op.super), TMX_OK);
    assert_int_equal(op.done, 0);
    assert_false(tl_emu_busy(&r.emu));
    side_fini(&r);
}

/* A key the owner never lent, or bounds past what it lent: one refusal,
 * no byte read, the reader's buffer untouched. */
static void refused_reads(void **state)
{
    unsigned char src[100], dst[200];
    uint64_t keys[] = {KEY + 1, KEY, KEY};
    size_t lens[] = {100, 101, 100};
    uintptr_t addrs[] = {(uintptr_t)src, (uintptr_t)src, (uintptr_t)src + 1};

    (void)state;
    memset(src, 0xab, sizeof(src));
    for (int k = 0; k < 3; k++) {
        side_t r, o;
        op_t op = {{op_done}, 0, TMX_OK};
        side_init(&r, 64);
        side_init(&o, 64);
        o.lent = src;
        o.lent_len = sizeof(src);
        memset(dst, 0, sizeof(dst));
        assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, lens[k], addrs[k], keys[k], &op.super), TMX_INPROGRESS);
        run(&r, &o);
        assert_int_equal(op.done, 1);
        assert_int_equal(op.status, TMX_ERR_NOT_FOUND);
        for (size_t i = 0; i < sizeof(dst); i++)
            assert_int_equal(dst[i], 0);
        side_fini(&r);
        side_fini(&o);
    }
}

/* The owner's send ends while the read is served: the next chunk is
 * refused, and nothing after it is read from the owner's memory. */
static void lending_ends_midway(void **state)
{
    unsigned char src[640], dst[640];
    side_t r, o;
    op_t op = {{op_done}, 0, TMX_OK};

    (void)state;
    memset(src, 0x5a, sizeof(src));
    memset(dst, 0, sizeof(dst));
    side_init(&r, 64);
    side_init(&o, 64);
    o.lent = src;
    o.lent_len = sizeof(src);
    o.room = 3; /* three chunks go, then the wire is full */
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), (uintptr_t)src, KEY, &op.super), TMX_INPROGRESS);
    deliver(&r, &o);
    tl_emu_progress(&o.emu, 0);
    assert_int_equal(o.n_out, 3);
    deliver(&o, &r);
    assert_int_equal(op.done, 0);
    o.lent = NULL; /* the memory is the application's again */
    o.room = -1;
    run(&r, &o);
    assert_int_equal(op.done, 1);
    assert_int_equal(op.status, TMX_ERR_NOT_FOUND);
    for (size_t i = 192; i < sizeof(dst); i++)
        assert_int_equal(dst[i], 0);
    assert_false(tl_emu_busy(&o.emu));
    side_fini(&r);
    side_fini(&o);
}

/* No room for the request: it goes from a later progress, which also
 * reports the read as waiting once it is out. */
static void request_waits_for_room(void **state)
{
    unsigned char src[10] = "abcdefghi", dst[10] = {0};
    side_t r, o;
    op_t op = {{op_done}, 0, TMX_OK};

    (void)state;
    side_init(&r, 64);
    side_init(&o, 64);
    o.lent = src;
    o.lent_len = sizeof(src);
    r.room = 0;
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), (uintptr_t)src, KEY, &op.super), TMX_INPROGRESS);
    assert_int_equal(r.n_out, 0);
    assert_int_equal(tl_emu_progress(&r.emu, 0), 0);
    r.room = -1;
    assert_int_equal(tl_emu_progress(&r.emu, 0), 1);
    assert_int_equal(r.n_out, 1);
    tl_emu_progress(&r.emu, 0);
    assert_true(r.waited >= 1);
    run(&r, &o);
    assert_int_equal(op.status, TMX_OK);
    assert_memory_equal(dst, src, sizeof(src));
    side_fini(&r);
    side_fini(&o);
}

/* Data that does not belong to a read waiting for it is refused whole:
 * an unknown id, bytes past the end, a chunk out of order, a duplicate,
 * a chunk from another peer. */
static void bad_data_refused(void **state)
{
    unsigned char dst[128], junk[64];
    side_t r, other;
    op_t op = {{op_done}, 0, TMX_OK};
    uint32_t id;

    (void)state;
    memset(junk, 0xee, sizeof(junk));
    memset(dst, 0, sizeof(dst));
    side_init(&r, 64);
    side_init(&other, 64);
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), 0x1000, KEY, &op.super), TMX_INPROGRESS);
    id = r.out[0].req.id;
    assert_int_equal(tl_emu_data_arrive(&r.emu, &r.ep, id + 1, 0, TMX_OK, junk, 64, 0), TMX_ERR_INVALID);
    assert_int_equal(tl_emu_data_arrive(&r.emu, &r.ep, id, 100, TMX_OK, junk, 64, 0), TMX_ERR_INVALID);
    assert_int_equal(tl_emu_data_arrive(&r.emu, &r.ep, id, 64, TMX_OK, junk, 64, 0), TMX_ERR_INVALID);
    assert_int_equal(tl_emu_data_arrive(&r.emu, &other.ep, id, 0, TMX_OK, junk, 64, 0), TMX_ERR_INVALID);
    assert_int_equal(tl_emu_data_arrive(&r.emu, &r.ep, id, 0, TMX_OK, junk, 64, 0), TMX_OK);
    assert_int_equal(tl_emu_data_arrive(&r.emu, &r.ep, id, 0, TMX_OK, junk, 64, 0), TMX_ERR_INVALID);
    assert_int_equal(op.done, 0);
    for (size_t i = 64; i < sizeof(dst); i++)
        assert_int_equal(dst[i], 0);
    /* a status that is no error code still ends the read as an error */
    assert_int_equal(tl_emu_data_arrive(&r.emu, &r.ep, id, 64, (tmx_status_t)7, NULL, 0, 0), TMX_OK);
    assert_int_equal(op.done, 1);
    assert_true(op.status < 0);
    side_fini(&r);
    side_fini(&other);
}

/* A peer's failure completes its reads and drops what we served it; the
 * reads of other peers go on. */
static void ep_failure(void **state)
{
    unsigned char dst[64];
    side_t r, o;
    op_t op = {{op_done}, 0, TMX_OK};
    tl_emu_req_t req = {9, 0x1000, KEY, 1 << 20};

    (void)state;
    side_init(&r, 64);
    side_init(&o, 64);
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), 0x1000, KEY, &op.super), TMX_INPROGRESS);
    o.room = 0;
    assert_int_equal(tl_emu_req_arrive(&o.emu, &o.ep, &req), TMX_OK);
    assert_true(tl_emu_busy(&o.emu));
    tl_emu_ep_fail(&r.emu, &r.ep);
    assert_int_equal(op.done, 1);
    assert_int_equal(op.status, TMX_ERR_PEER_FAILED);
    tl_emu_ep_fail(&o.emu, &o.ep);
    assert_false(tl_emu_busy(&o.emu));
    assert_false(tl_emu_busy(&r.emu));
    side_fini(&r);
    side_fini(&o);
}

/* Any process can ask for memory nobody lent, as often as it likes,
 * without ever acknowledging: a refusal goes at once when there is room;
 * those waiting for room are bounded (TL_EMU_REFUSED_MAX for strangers,
 * TL_EMU_REFUSED_PEERS_MAX for peers, so that strangers cannot crowd out
 * a peer's), the rest dropped, and the ones kept go once room comes. */
static void refusals_bounded(void **state)
{
    side_t o, p, im; /* p: an added peer of the layer above, reading from o */

    (void)state;
    side_init(&o, 64);
    side_init(&p, 64);
    side_init(&im, 64);
    tl_ep_init(&o.ep, &o.iface, 0, TMX_PEER_NONE); /* a stranger */
    tl_ep_init(&p.ep, &p.iface, 0, 5);
    tl_ep_init(&im.ep, &im.iface, 0, TMX_PEER_IMPLICIT | 3); /* anyone, after one HELLO: a stranger's bound too */
    o.room = 1; /* room for one: answered at once, nothing kept */
    assert_int_equal(tl_emu_req_arrive(&o.emu, &o.ep, &(tl_emu_req_t){1, 0x1000, KEY, 64}), TMX_OK);
    assert_int_equal(o.n_out, 1);
    assert_int_not_equal(o.out[0].status, TMX_OK);
    assert_false(tl_emu_busy(&o.emu));
    for (uint32_t i = 0; i < 10 * TL_EMU_REFUSED_MAX; i++) {
        tmx_status_t st = tl_emu_req_arrive(&o.emu, &o.ep, &(tl_emu_req_t){i + 2, 0x1000, KEY, 64});
        assert_int_equal(st, i < TL_EMU_REFUSED_MAX ? TMX_OK : TMX_ERR_AGAIN);
    }
    assert_int_equal(o.emu.n_refused[0], TL_EMU_REFUSED_MAX);
    im.room = 0;
    assert_int_equal(tl_emu_req_arrive(&o.emu, &im.ep, &(tl_emu_req_t){99, 0x1000, KEY, 64}), TMX_ERR_AGAIN);
    /* the strangers' refusals waiting do not stop a peer's from waiting,
     * up to a bound of their own */
    p.room = 0;
    for (uint32_t i = 0; i < TL_EMU_REFUSED_PEERS_MAX + 1; i++) {
        tmx_status_t st = tl_emu_req_arrive(&o.emu, &p.ep, &(tl_emu_req_t){100000 + i, 0x1000, KEY, 64});
        assert_int_equal(st, i < TL_EMU_REFUSED_PEERS_MAX ? TMX_OK : TMX_ERR_AGAIN);
    }
    assert_int_equal(o.emu.n_refused[1], TL_EMU_REFUSED_PEERS_MAX);
    o.room = p.room = -1;
    tl_emu_progress(&o.emu, 0);
    assert_int_equal(o.n_out, 1 + TL_EMU_REFUSED_MAX);
    assert_int_equal(p.n_out, TL_EMU_REFUSED_PEERS_MAX);
    assert_int_equal(p.out[0].id, 100000);
    assert_int_not_equal(p.out[0].status, TMX_OK);
    assert_int_equal(o.emu.n_refused[0], 0);
    assert_int_equal(o.emu.n_refused[1], 0);
    assert_false(tl_emu_busy(&o.emu));
    side_fini(&im);
    side_fini(&p);
    side_fini(&o);
}

/* Abandoned at close: no done() after, and data arriving then is refused. */
static void abandon_calls_nothing(void **state)
{
    unsigned char dst[64];
    side_t r;
    op_t op = {{op_done}, 0, TMX_OK};
    uint32_t id;

    (void)state;
    side_init(&r, 64);
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), 0x1000, KEY, &op.super), TMX_INPROGRESS);
    id = r.out[0].req.id;
    tl_emu_abandon(&r.emu);
    tl_emu_abandon(&r.emu);
    assert_int_equal(tl_emu_data_arrive(&r.emu, &r.ep, id, 0, TMX_OK, dst, 64, 0), TMX_ERR_INVALID);
    assert_int_equal(op.done, 0);
    side_fini(&r);
}

/* Many reads at once, interleaved on one wire, each whole (each under a
 * key of its own, as the layer above lends memory: one read per key). */
static void many_reads_interleaved(void **state)
{
    enum { N = 16, LEN = 1000 };
    static unsigned char src[N][LEN], dst[N][LEN];
    side_t r, o;
    op_t ops_[N];

    (void)state;
    side_init(&r, 64);
    side_init(&o, 64);
    o.lent = &src[0][0];
    o.lent_len = sizeof(src);
    o.keys = N;
    for (int k = 0; k < N; k++) {
        memset(src[k], k + 1, LEN);
        ops_[k] = (op_t){{op_done}, 0, TMX_OK};
        assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst[k], LEN, (uintptr_t)src[k], KEY + k, &ops_[k].super),
                         TMX_INPROGRESS);
    }
    o.room = 5;
    for (int i = 0; i < 1000 && tl_emu_busy(&r.emu); i++) {
        o.room = 5; /* a little at a time */
        tl_emu_progress(&o.emu, 0);
        deliver(&r, &o);
        deliver(&o, &r);
    }
    for (int k = 0; k < N; k++) {
        assert_int_equal(ops_[k].done, 1);
        assert_int_equal(ops_[k].status, TMX_OK);
        assert_memory_equal(dst[k], src[k], LEN);
    }
    side_fini(&r);
    side_fini(&o);
}

/* A key lends its memory to one read at a time (the layer above gives a
 * rendezvous send's key to its one receiver, which reads it once): the
 * same read asked again and again while it is served, by its reader or
 * anyone who learned the key, is refused, within the bound on refusals,
 * so that the reads a process serves are bounded by the memory it lends,
 * not by the requests it is sent. */
static void one_read_per_key(void **state)
{
    enum { N = 2 * TL_EMU_REFUSED_PEERS_MAX };
    unsigned char src[64];
    side_t o;
    uint32_t accepted = 0, data = 0, refusals = 0;

    (void)state;
    memset(src, 0x77, sizeof(src));
    side_init(&o, 64);
    o.lent = src;
    o.lent_len = sizeof(src);
    tl_ep_init(&o.ep, &o.iface, 0, 5); /* the reader: an added peer, the larger bound on refusals */
    o.room = 0;    /* nothing goes to it: every request waits */
    for (uint32_t i = 0; i < N; i++) {
        tmx_status_t st = tl_emu_req_arrive(&o.emu, &o.ep, &(tl_emu_req_t){i + 1, (uintptr_t)src, KEY, 64});
        assert_true(st == TMX_OK || st == TMX_ERR_AGAIN);
        accepted += st == TMX_OK;
    }
    assert_int_equal(accepted, 1 + TL_EMU_REFUSED_PEERS_MAX);
    o.room = -1;
    tl_emu_progress(&o.emu, 0);
    for (size_t k = 0; k < o.n_out; k++) {
        data += o.out[k].status == TMX_OK;
        refusals += o.out[k].status == TMX_ERR_BUSY;
    }
    assert_int_equal(data, 1); /* the first read, whole in one chunk */
    assert_int_equal(o.out[0].id, 1);
    assert_int_equal(o.out[0].n, 64);
    assert_int_equal(refusals, accepted - 1);
    assert_false(tl_emu_busy(&o.emu));
    /* once it was served, the key may be read again */
    assert_int_equal(tl_emu_req_arrive(&o.emu, &o.ep, &(tl_emu_req_t){N + 1, (uintptr_t)src, KEY, 64}), TMX_OK);
    tl_emu_progress(&o.emu, 0);
    assert_int_equal(o.out[o.n_out - 1].status, TMX_OK);
    assert_int_equal(o.out[o.n_out - 1].n, 64);
    side_fini(&o);
}

/* No memory: a reader that cannot keep its read is told at once and sends
 * nothing; an owner that cannot keep a request refuses it at once with
 * TMX_ERR_NOMEM, or, without room, as soon as there is, so that the read
 * fails now instead of waiting until one side fails; past
 * TL_EMU_NOMEM_MAX refusals waiting, a request is dropped. */
static void no_memory_refused(void **state)
{
    unsigned char src[64], dst[64];
    side_t r, o;
    op_t op = {{op_done}, 0, TMX_OK}, op2 = {{op_done}, 0, TMX_OK};

    (void)state;
    side_init(&r, 64);
    side_init(&o, 64);
    o.lent = src;
    o.lent_len = sizeof(src);
    tl_emu_test_fail_alloc(1);
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), (uintptr_t)src, KEY, &op.super), TMX_ERR_NOMEM);
    assert_int_equal(r.n_out, 0);
    assert_false(tl_emu_busy(&r.emu));
    /* the owner: refused at once */
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), (uintptr_t)src, KEY, &op.super), TMX_INPROGRESS);
    tl_emu_test_fail_alloc(1);
    deliver(&r, &o);
    assert_int_equal(o.n_out, 1);
    assert_int_equal(o.out[0].status, TMX_ERR_NOMEM);
    assert_int_equal(o.out[0].n, 0);
    assert_false(tl_emu_busy(&o.emu));
    deliver(&o, &r);
    assert_int_equal(op.done, 1);
    assert_int_equal(op.status, TMX_ERR_NOMEM);
    assert_false(tl_emu_busy(&r.emu));
    /* no room: the refusal waits, without memory, and goes with room */
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), (uintptr_t)src, KEY, &op2.super), TMX_INPROGRESS);
    o.room = 0;
    tl_emu_test_fail_alloc(1);
    deliver(&r, &o);
    assert_int_equal(o.n_out, 0);
    assert_true(tl_emu_busy(&o.emu));
    tl_emu_progress(&o.emu, 0);
    assert_int_equal(o.n_out, 0);
    o.room = -1;
    assert_int_equal(tl_emu_progress(&o.emu, 0), 1);
    assert_false(tl_emu_busy(&o.emu));
    deliver(&o, &r);
    assert_int_equal(op2.done, 1);
    assert_int_equal(op2.status, TMX_ERR_NOMEM);
    /* bounded: the rest are dropped; a failed reader's go with it */
    o.room = 0;
    tl_emu_test_fail_alloc(TL_EMU_NOMEM_MAX + 1);
    for (uint32_t i = 0; i < TL_EMU_NOMEM_MAX + 1; i++)
        assert_int_equal(tl_emu_req_arrive(&o.emu, &o.ep, &(tl_emu_req_t){1000 + i, (uintptr_t)src, KEY, 64}),
                         i < TL_EMU_NOMEM_MAX ? TMX_OK : TMX_ERR_NOMEM);
    assert_true(tl_emu_busy(&o.emu));
    tl_emu_ep_fail(&o.emu, &o.ep);
    assert_false(tl_emu_busy(&o.emu));
    o.room = -1;
    tl_emu_progress(&o.emu, 0);
    assert_int_equal(o.n_out, 0);
    /* and memory back, served as ever */
    run(&r, &o);
    assert_int_equal(tl_emu_get(&r.emu, &r.ep, dst, sizeof(dst), (uintptr_t)src, KEY, &op.super), TMX_INPROGRESS);
    run(&r, &o);
    assert_int_equal(op.done, 2);
    assert_int_equal(op.status, TMX_OK);
    side_fini(&r);
    side_fini(&o);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_every_size),
        cmocka_unit_test(zero_length_completes_at_once),
        cmocka_unit_test(refused_reads),
        cmocka_unit_test(lending_ends_midway),
        cmocka_unit_test(request_waits_for_room),
        cmocka_unit_test(bad_data_refused),
        cmocka_unit_test(ep_failure),
        cmocka_unit_test(refusals_bounded),
        cmocka_unit_test(abandon_calls_nothing),
        cmocka_unit_test(many_reads_interleaved),
        cmocka_unit_test(one_read_per_key),
        cmocka_unit_test(no_memory_refused),
    };
    return UNIT_MAIN(argc, argv, tests);
}
