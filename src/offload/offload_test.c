/*
 * The software TM-SRQ (offload.h): its operations, completions and limits,
 * the m1/m2/b1 race of seed 000 scripted at every position, DEL racing a
 * consuming message, RNDV_INCOMPLETE, and a differential test: a host that
 * keeps the complete matcher (src/match) and hands tags to the engine, as
 * tmx's core is to, against the software matcher alone, over random
 * operations and schedules, single-threaded and with the engine on a
 * thread of its own (run under ThreadSanitizer in CI).
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "match/match.h"
#include "offload/offload.h"

/* ------------------------------------------------------------ a device */

/* Reads copy at once from the sender's buffer (va is a pointer here), or
 * are held until dev_complete_reads when defer is set. */
typedef struct tdev {
    off_engine_t *e;
    int defer;
    tmx_status_t status;
    struct {
        off_msg_t m;
        void *buf;
        uint64_t token;
    } held[4096];
    size_t n_held;
    size_t fins;
    pthread_mutex_t lock;
} tdev_t;

static void dev_read(void *arg, const off_msg_t *m, void *buf, uint64_t recv_wr_id, uint64_t token)
{
    tdev_t *d = arg;

    (void)recv_wr_id;
    pthread_mutex_lock(&d->lock);
    if (d->defer) {
        assert_true(d->n_held < 4096);
        d->held[d->n_held].m = *m;
        d->held[d->n_held].buf = buf;
        d->held[d->n_held].token = token;
        d->n_held++;
        pthread_mutex_unlock(&d->lock);
        return;
    }
    pthread_mutex_unlock(&d->lock);
    memcpy(buf, (const void *)(uintptr_t)m->va, m->rlen);
    off_read_done(d->e, token, d->status);
}

static void dev_fin(void *arg, const off_msg_t *m, tmx_status_t status)
{
    tdev_t *d = arg;

    (void)m;
    (void)status;
    pthread_mutex_lock(&d->lock);
    d->fins++;
    pthread_mutex_unlock(&d->lock);
}

static const off_dev_ops_t dev_ops = {dev_read, dev_fin};

/* Completes held reads, the n-th first when pick says so. */
static void dev_complete_reads(tdev_t *d, unsigned pick)
{
    while (d->n_held > 0) {
        size_t k = pick % d->n_held;
        off_msg_t m = d->held[k].m;
        void *buf = d->held[k].buf;
        uint64_t token = d->held[k].token;
        d->held[k] = d->held[--d->n_held];
        memcpy(buf, (const void *)(uintptr_t)m.va, m.rlen);
        off_read_done(d->e, token, TMX_OK);
        pick = pick * 1103515245u + 12345u;
    }
}

static void dev_open(tdev_t *d, const off_caps_t *caps)
{
    memset(d, 0, sizeof(*d));
    pthread_mutex_init(&d->lock, NULL);
    d->status = TMX_OK;
    assert_int_equal(off_engine_open(caps, &dev_ops, d, &d->e), TMX_OK);
}

static void dev_close(tdev_t *d)
{
    off_engine_close(d->e);
    pthread_mutex_destroy(&d->lock);
}

static off_op_t op_add(uint64_t id, void *buf, size_t len, uint32_t src, uint64_t tag,
                       uint64_t ignore, uint32_t cnt)
{
    off_op_t op = {.wr_id = id, .opcode = OFF_WR_TAG_ADD, .unexpected_cnt = cnt};

    op.add.recv_wr_id = id;
    op.add.buf = buf;
    op.add.len = len;
    op.add.src = src;
    op.add.tag = tag;
    op.add.ignore = ignore;
    return op;
}

static off_msg_t msg_eager(uint32_t src, uint64_t tag, const void *data, size_t len)
{
    off_msg_t m = {.op = OFF_TM_EAGER, .src = src, .tag = tag, .data = data, .len = len};
    return m;
}

static size_t poll_all(off_engine_t *e, off_cqe_t *out, size_t n)
{
    return off_poll_cq(e, out, n);
}

/* ----------------------------------------------------- single behaviours */

static void test_eager_match_and_unexpected(void **state)
{
    tdev_t d;
    char buf[8] = {0};
    off_op_t op = op_add(7, buf, sizeof(buf), 1, 0x10, 0, 0);
    off_cqe_t c[4];
    off_msg_t m;

    (void)state;
    dev_open(&d, NULL);
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    assert_int_equal(off_engine_run(d.e, SIZE_MAX), 1);
    m = msg_eager(2, 0x10, "other", 6); /* another source: unexpected */
    off_arrive(d.e, &m);
    m = msg_eager(1, 0x10, "hello", 6);
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 4), 2);
    assert_int_equal(c[0].opcode, OFF_WC_RECV);
    assert_int_equal(c[0].src, 2);
    assert_true(c[0].flags & OFF_WC_TM_SYNC_REQ);
    assert_int_equal(c[0].msg.len, 6);
    assert_string_equal(c[0].msg.data, "other");
    off_cqe_release(&c[0]);
    assert_int_equal(c[1].opcode, OFF_WC_TM_RECV);
    assert_int_equal(c[1].flags & (OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID),
                     OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID);
    assert_int_equal(c[1].wr_id, 7);
    assert_int_equal(c[1].byte_len, 6);
    assert_string_equal(buf, "hello");
    dev_close(&d);
}

static void test_eager_truncated(void **state)
{
    tdev_t d;
    char buf[4] = {0};
    off_op_t op = op_add(1, buf, 3, OFF_ANY_SOURCE, 0, ~0ull, 0);
    off_msg_t m = msg_eager(0, 99, "abcdef", 6);
    off_cqe_t c;

    (void)state;
    dev_open(&d, NULL);
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, &c, 1), 1);
    assert_int_equal(c.status, OFF_WC_TRUNCATED);
    assert_int_equal(c.byte_len, 3);
    assert_int_equal(c.msg.len, 6);
    assert_memory_equal(buf, "abc\0", 4);
    dev_close(&d);
}

/* A rendezvous request matched by the engine: MATCH at once, DATA_VALID
 * when the read lands, then FIN; a failed read still sends FIN. */
static void test_rndv_two_completions(void **state)
{
    tdev_t d;
    char src[32] = "the rendezvous payload", buf[32] = {0};
    off_op_t ops[2] = {op_add(1, buf, sizeof(buf), 3, 5, 0, 0), op_add(2, buf, sizeof(buf), 3, 6, 0, 0)};
    off_msg_t m = {.op = OFF_TM_RNDV, .src = 3, .tag = 5, .va = (uintptr_t)src, .rkey = 9,
                   .rlen = sizeof(src)};
    off_cqe_t c[2];

    (void)state;
    dev_open(&d, NULL);
    d.defer = 1;
    assert_int_equal(off_post_ops(d.e, ops, 2, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 2), 1);
    assert_int_equal(c[0].flags & (OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID), OFF_WC_TM_MATCH);
    assert_int_equal(d.fins, 0);
    dev_complete_reads(&d, 0);
    assert_int_equal(poll_all(d.e, c, 2), 1);
    assert_int_equal(c[0].flags & (OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID), OFF_WC_TM_DATA_VALID);
    assert_int_equal(c[0].wr_id, 1);
    assert_int_equal(c[0].byte_len, sizeof(src));
    assert_string_equal(buf, src);
    assert_int_equal(d.fins, 1);
    /* a read that fails */
    d.defer = 0;
    d.status = TMX_ERR_PEER_FAILED;
    m.tag = 6;
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 2), 2);
    assert_int_equal(c[1].status, OFF_WC_REM_ERR);
    assert_int_equal(c[1].dev_status, TMX_ERR_PEER_FAILED);
    assert_int_equal(d.fins, 2);
    /* a completion for no read in flight is refused */
    off_read_done(d.e, 12345, TMX_OK);
    assert_int_equal(poll_all(d.e, c, 2), 0);
    dev_close(&d);
}

/* A read the device abandons (the host ends the receive itself): the
 * tagged buffer is free at once, with no completion and no FIN; a later
 * completion of that read, or a second abandon, is refused; the slot
 * serves a new buffer. */
static void test_read_abandoned(void **state)
{
    tdev_t d;
    char src[16] = "abandoned", buf[16] = {0};
    off_op_t add = op_add(1, buf, sizeof(buf), 3, 5, 0, 0);
    off_msg_t m = {.op = OFF_TM_RNDV, .src = 3, .tag = 5, .va = (uintptr_t)src, .rkey = 9,
                   .rlen = sizeof(src)};
    off_caps_t caps = {.max_num_tags = 1};
    off_stats_t st;
    off_cqe_t c[2];
    uint64_t token;

    (void)state;
    dev_open(&d, &caps);
    d.defer = 1;
    assert_int_equal(off_post_ops(d.e, &add, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 2), 1); /* MATCH */
    assert_int_equal(d.n_held, 1);
    token = d.held[0].token;
    d.n_held = 0;
    off_engine_stats(d.e, &st);
    assert_int_equal(st.reading, 1);
    assert_int_equal(off_read_abandon(d.e, token), 0);
    off_engine_stats(d.e, &st);
    assert_int_equal(st.reading, 0);
    assert_int_equal(poll_all(d.e, c, 2), 0);
    assert_int_equal(d.fins, 0);
    assert_int_equal(off_read_abandon(d.e, token), -1);
    off_read_done(d.e, token, TMX_OK);
    assert_int_equal(poll_all(d.e, c, 2), 0);
    assert_int_equal(d.fins, 0);
    /* the one slot takes a new buffer, which the next message fills */
    add = op_add(2, buf, sizeof(buf), 3, 5, 0, 0);
    assert_int_equal(off_post_ops(d.e, &add, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    d.defer = 0;
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 2), 2);
    assert_int_equal(c[1].wr_id, 2);
    assert_true(c[1].flags & OFF_WC_TM_DATA_VALID);
    assert_string_equal(buf, src);
    assert_int_equal(d.fins, 1);
    dev_close(&d);
}

/* A read's end always finds room for its DATA_VALID: the ring keeps it
 * from the match on, so that a ring that cannot grow then does not lose
 * the completion (the receive waited for ever, its slot never freed,
 * while FIN told the sender all was well). Without that room at the
 * match, the request is refused whole, as other messages are. */
static void test_read_done_room_kept(void **state)
{
    tdev_t d;
    char src[70][16], buf[70][16];
    off_op_t add;
    off_msg_t m = {.op = OFF_TM_RNDV, .src = 3, .rkey = 9, .rlen = 16};
    off_cqe_t c[160];
    off_stats_t st;
    size_t n;

    (void)state;
    dev_open(&d, &(off_caps_t){.max_num_tags = 70});
    d.defer = 1;
    /* 70 reads in flight, their MATCH taken: the ring's 64 would not do */
    for (int i = 0; i < 70; i++) {
        snprintf(src[i], sizeof(src[i]), "payload %d", i);
        add = op_add((uint64_t)i, buf[i], sizeof(buf[i]), 3, (uint64_t)i, 0, 0);
        assert_int_equal(off_post_ops(d.e, &add, 1, NULL), TMX_OK);
        off_engine_run(d.e, SIZE_MAX);
        m.tag = (uint64_t)i;
        m.va = (uintptr_t)src[i];
        off_arrive(d.e, &m);
    }
    assert_int_equal(poll_all(d.e, c, 160), 70);
    assert_int_equal(d.n_held, 70);
    off_engine_fail_cq(d.e, 1000); /* from now on the ring cannot grow */
    dev_complete_reads(&d, 7);
    n = poll_all(d.e, c, 160);
    assert_int_equal(n, 70);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(c[k].flags & OFF_WC_TM_DATA_VALID, OFF_WC_TM_DATA_VALID);
        assert_int_equal(c[k].status, OFF_WC_SUCCESS);
        assert_string_equal(buf[c[k].wr_id], src[c[k].wr_id]);
    }
    assert_int_equal(d.fins, 70);
    off_engine_stats(d.e, &st);
    assert_int_equal(st.reading, 0);
    /* a request that finds no room for both its completions is refused,
     * its tag kept */
    add = op_add(0, buf[0], sizeof(buf[0]), 3, 0, 0, 0);
    assert_int_equal(off_post_ops(d.e, &add, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    m.tag = 0;
    m.va = (uintptr_t)src[0];
    assert_int_equal(off_arrive_inline(d.e, &m, NULL), 3);
    off_engine_stats(d.e, &st);
    assert_int_equal(st.listed, 1);
    assert_int_equal(st.reading, 0);
    dev_close(&d);
}

static void test_rndv_incomplete(void **state)
{
    tdev_t d;
    char buf[4];
    uint64_t meta = 0x1122334455667788ull;
    off_op_t op = op_add(4, buf, sizeof(buf), 0, 1, 0, 0);
    off_msg_t m = {.op = OFF_TM_RNDV, .src = 0, .tag = 1, .app_ctx = 77, .data = &meta,
                   .len = sizeof(meta), .va = 0x1000, .rkey = 0xabc, .rlen = 100};
    off_cqe_t c;

    (void)state;
    dev_open(&d, NULL);
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, &c, 1), 1);
    assert_int_equal(c.opcode, OFF_WC_TM_RECV);
    assert_int_equal(c.status, OFF_WC_TM_RNDV_INCOMPLETE);
    assert_true(c.flags & OFF_WC_TM_MATCH);
    assert_int_equal(c.wr_id, 4);
    assert_int_equal(c.priv, 77);
    assert_int_equal(c.msg.va, 0x1000);
    assert_int_equal(c.msg.rkey, 0xabc);
    assert_int_equal(c.msg.rlen, 100);
    assert_int_equal(c.msg.len, sizeof(meta));
    assert_memory_equal(c.msg.data, &meta, sizeof(meta));
    off_cqe_release(&c);
    assert_int_equal(d.fins, 0); /* the host finishes it */
    dev_close(&d);
}

/* A request bigger than max_rndv_hdr_size is the host's, and counted. */
/* A request larger than max_rndv_hdr_size: the engine does not read it,
 * but a tag it matches is consumed all the same (RNDV_INCOMPLETE, the
 * host finishes it), so that a later message cannot take that tag while
 * the older one is with the host. At the limit, the engine reads it. */
static void test_rndv_header_too_big(void **state)
{
    tdev_t d;
    char buf[64], meta[64] = {0}, src[8] = "payload";
    off_caps_t caps = {.max_rndv_hdr_size = 48};
    off_op_t ops[2] = {op_add(1, buf, sizeof(buf), 0, 1, 0, 0), op_add(2, buf, sizeof(buf), 0, 2, 0, 0)};
    off_msg_t m = {.op = OFF_TM_RNDV, .src = 0, .tag = 1, .data = meta, .len = 17, .rlen = 8,
                   .va = (uintptr_t)src};
    off_msg_t m2 = msg_eager(0, 1, "m2", 3);
    off_cqe_t c[3];
    off_stats_t s;
    off_engine_t *e;

    (void)state;
    dev_open(&d, &caps);
    assert_int_equal(off_post_ops(d.e, ops, 2, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m);
    off_arrive(d.e, &m2);
    assert_int_equal(poll_all(d.e, c, 3), 2);
    assert_int_equal(c[0].opcode, OFF_WC_TM_RECV);
    assert_int_equal(c[0].status, OFF_WC_TM_RNDV_INCOMPLETE);
    assert_int_equal(c[0].wr_id, 1);
    assert_int_equal(c[0].msg.len, 17);
    assert_int_equal(c[1].opcode, OFF_WC_RECV); /* m2 does not overtake it */
    off_cqe_release(&c[0]);
    off_cqe_release(&c[1]);
    /* at the limit: 16 bytes of meta-data */
    m.tag = 2;
    m.len = 16;
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 3), 2);
    assert_int_equal(c[0].flags & OFF_WC_TM_DATA_VALID, 0);
    assert_int_equal(c[1].flags & OFF_WC_TM_DATA_VALID, OFF_WC_TM_DATA_VALID);
    assert_string_equal(buf, "payload");
    off_engine_stats(d.e, &s);
    assert_int_equal(s.unexpected, 1);
    assert_int_equal(s.listed, 0);
    /* a length that would wrap the check is refused, and no crash */
    ops[0] = op_add(3, buf, sizeof(buf), 0, 3, 0, 1);
    assert_int_equal(off_post_ops(d.e, ops, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    m.tag = 3;
    m.len = SIZE_MAX - 31;
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 1), 0);
    off_engine_stats(d.e, &s);
    assert_int_equal(s.listed, 1); /* the tag stays */
    /* data NULL with a length is refused */
    m.data = NULL;
    m.len = 4;
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 1), 0);
    dev_close(&d);
    caps.max_rndv_hdr_size = 31;
    assert_int_equal(off_engine_open(&caps, &dev_ops, NULL, &e), TMX_ERR_INVALID);
}

/* A slot is free again only once its buffer's last completion is taken:
 * a DEL of a consumed buffer fails until then and after, and never
 * removes the buffer added later in the same slot. */
static void test_stale_handle(void **state)
{
    tdev_t d;
    char buf[8];
    off_caps_t caps = {.max_num_tags = 1};
    off_op_t add = op_add(1, buf, sizeof(buf), 0, 1, 0, 0), del, add2;
    off_msg_t m = msg_eager(0, 1, "x", 2);
    off_cqe_t c[2];
    off_stats_t s;

    (void)state;
    dev_open(&d, &caps);
    assert_int_equal(off_post_ops(d.e, &add, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m); /* consumed, not yet taken */
    del = (off_op_t){.opcode = OFF_WR_TAG_DEL, .handle = add.handle, .wr_id = 9};
    assert_int_equal(off_post_ops(d.e, &del, 1, NULL), TMX_OK);
    add2 = op_add(2, buf, sizeof(buf), 0, 1, 0, 0);
    assert_int_equal(off_post_ops(d.e, &add2, 1, NULL), TMX_ERR_AGAIN); /* the slot is not free */
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(poll_all(d.e, c, 2), 2);
    assert_int_equal(c[0].opcode, OFF_WC_TM_RECV);
    assert_int_equal(c[1].opcode, OFF_WC_TM_DEL);
    assert_int_equal(c[1].status, OFF_WC_TM_ERR);
    assert_int_equal(off_post_ops(d.e, &add2, 1, NULL), TMX_OK);
    assert_int_equal(add2.handle & 0xffff, add.handle & 0xffff); /* the same slot */
    assert_int_not_equal(add2.handle, add.handle);
    assert_int_equal(off_post_ops(d.e, &del, 1, NULL), TMX_OK); /* the stale handle */
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(poll_all(d.e, c, 2), 1);
    assert_int_equal(c[0].status, OFF_WC_TM_ERR);
    off_engine_stats(d.e, &s);
    assert_int_equal(s.listed, 1); /* the new buffer stays */
    del.handle = add2.handle;
    del.flags = OFF_OPS_SIGNALED;
    assert_int_equal(off_post_ops(d.e, &del, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(poll_all(d.e, c, 2), 1);
    assert_int_equal(c[0].status, OFF_WC_SUCCESS);
    dev_close(&d);
}

/* A buffer whose read is in flight is consumed: DEL fails; the read's end
 * completes it and sends FIN once; a second end for it is refused. */
static void test_del_while_reading(void **state)
{
    tdev_t d;
    char src[16] = "read me", buf[16] = {0};
    off_op_t add = op_add(1, buf, sizeof(buf), 0, 1, 0, 0), del;
    off_msg_t m = {.op = OFF_TM_RNDV, .src = 0, .tag = 1, .va = (uintptr_t)src, .rlen = sizeof(src)};
    off_cqe_t c[3];
    uint64_t token;

    (void)state;
    dev_open(&d, NULL);
    d.defer = 1;
    assert_int_equal(off_post_ops(d.e, &add, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m);
    del = (off_op_t){.opcode = OFF_WR_TAG_DEL, .flags = OFF_OPS_SIGNALED, .handle = add.handle};
    assert_int_equal(off_post_ops(d.e, &del, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(poll_all(d.e, c, 3), 2);
    assert_int_equal(c[0].flags & OFF_WC_TM_MATCH, OFF_WC_TM_MATCH);
    assert_int_equal(c[1].opcode, OFF_WC_TM_DEL);
    assert_int_equal(c[1].status, OFF_WC_TM_ERR);
    token = d.held[0].token;
    dev_complete_reads(&d, 0);
    assert_int_equal(poll_all(d.e, c, 3), 1);
    assert_int_equal(c[0].flags & OFF_WC_TM_DATA_VALID, OFF_WC_TM_DATA_VALID);
    assert_string_equal(buf, "read me");
    assert_int_equal(d.fins, 1);
    off_read_done(d.e, token, TMX_OK); /* again: refused */
    assert_int_equal(poll_all(d.e, c, 3), 0);
    assert_int_equal(d.fins, 1);
    dev_close(&d);
}

/* The host's count reaches the engine with any operation: a tag added
 * while the engine was ahead matches nothing until an ADD, a DEL or a
 * SYNC reports the engine's count. */
static void test_sync_by_any_operation(void **state)
{
    for (int how = OFF_WR_TAG_ADD; how <= OFF_WR_TAG_SYNC; how++) {
        tdev_t d;
        char b1[8] = {0}, b2[8];
        off_op_t op = op_add(1, b1, sizeof(b1), 0, 7, 0, 0);
        off_msg_t m1 = msg_eager(0, 5, "m1", 3), m2 = msg_eager(0, 7, "m2", 3),
                  m3 = msg_eager(0, 7, "m3", 3);
        off_cqe_t c[4];

        dev_open(&d, NULL);
        off_arrive(d.e, &m1); /* unexpected: the engine is one ahead */
        assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK); /* count 0: stale */
        off_engine_run(d.e, SIZE_MAX);
        off_arrive(d.e, &m2); /* b1 is not matchable yet */
        assert_int_equal(poll_all(d.e, c, 4), 2);
        assert_int_equal(c[1].opcode, OFF_WC_RECV);
        assert_true(c[1].flags & OFF_WC_TM_SYNC_REQ);
        off_cqe_release(&c[0]);
        off_cqe_release(&c[1]);
        /* the host handled both (count 2), and says so */
        if (how == OFF_WR_TAG_ADD)
            op = op_add(2, b2, sizeof(b2), 1, 9, 0, 2);
        else if (how == OFF_WR_TAG_DEL)
            op = (off_op_t){.opcode = OFF_WR_TAG_DEL, .handle = 0xfffff, .unexpected_cnt = 2};
        else
            op = (off_op_t){.opcode = OFF_WR_TAG_SYNC, .unexpected_cnt = 2};
        assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
        off_engine_run(d.e, SIZE_MAX);
        while (poll_all(d.e, c, 1) == 1) /* the bogus DEL's error */
            off_cqe_release(&c[0]);
        off_arrive(d.e, &m3);
        assert_int_equal(poll_all(d.e, c, 4), 1);
        assert_int_equal(c[0].opcode, OFF_WC_TM_RECV);
        assert_int_equal(c[0].wr_id, 1);
        assert_false(c[0].flags & OFF_WC_TM_SYNC_REQ);
        assert_string_equal(b1, "m3");
        dev_close(&d);
    }
}

static void test_no_tag_and_fin_go_to_host(void **state)
{
    tdev_t d;
    char buf[8];
    off_op_t op = op_add(1, buf, sizeof(buf), OFF_ANY_SOURCE, 0, ~0ull, 0);
    off_msg_t m = {.op = OFF_TM_NO_TAG, .src = 1, .data = "x", .len = 1};
    off_cqe_t c[2];
    off_stats_t s;

    (void)state;
    dev_open(&d, NULL);
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    off_arrive(d.e, &m);
    m.op = OFF_TM_FIN;
    off_arrive(d.e, &m);
    assert_int_equal(poll_all(d.e, c, 2), 2);
    assert_int_equal(c[0].opcode, OFF_WC_TM_NO_TAG);
    assert_int_equal(c[1].opcode, OFF_WC_TM_NO_TAG);
    assert_int_equal(c[1].msg.op, OFF_TM_FIN);
    assert_false(c[0].flags & OFF_WC_TM_SYNC_REQ); /* not counted */
    off_cqe_release(&c[0]);
    off_cqe_release(&c[1]);
    off_engine_stats(d.e, &s);
    assert_int_equal(s.unexpected, 0);
    assert_int_equal(s.listed, 1);
    dev_close(&d);
}

/* max_num_tags, max_ops, bad operations and capabilities. */
static void test_limits(void **state)
{
    tdev_t d;
    char buf[4];
    off_caps_t caps = {.max_num_tags = 2, .max_ops = 3}, got;
    off_op_t ops[4], *bad;
    off_engine_t *e;
    off_cqe_t c;

    (void)state;
    dev_open(&d, &caps);
    off_engine_caps(d.e, &got);
    assert_int_equal(got.max_num_tags, 2);
    assert_int_equal(got.max_ops, 3);
    assert_int_equal(got.max_rndv_hdr_size, OFF_DEF_MAX_RNDV_HDR_SIZE);
    for (int i = 0; i < 3; i++)
        ops[i] = op_add((uint64_t)i, buf, 4, 0, (uint64_t)i, 0, 0);
    /* the third ADD finds no tag free, although max_ops would take it */
    assert_int_equal(off_post_ops(d.e, ops, 3, &bad), TMX_ERR_AGAIN);
    assert_ptr_equal(bad, &ops[2]);
    ops[2] = (off_op_t){.opcode = OFF_WR_TAG_SYNC};
    assert_int_equal(off_post_ops(d.e, &ops[2], 1, NULL), TMX_OK);
    /* max_ops queued */
    assert_int_equal(off_post_ops(d.e, &ops[2], 1, NULL), TMX_ERR_AGAIN);
    assert_int_equal(off_engine_run(d.e, 2), 2);
    assert_int_equal(off_engine_run(d.e, SIZE_MAX), 1);
    /* bad operations */
    ops[0] = (off_op_t){.opcode = 9};
    assert_int_equal(off_post_ops(d.e, ops, 1, &bad), TMX_ERR_INVALID);
    ops[0] = (off_op_t){.opcode = OFF_WR_TAG_SYNC, .flags = 0x80};
    assert_int_equal(off_post_ops(d.e, ops, 1, NULL), TMX_ERR_INVALID);
    ops[0] = op_add(1, NULL, 4, 0, 0, 0, 0);
    assert_int_equal(off_post_ops(d.e, ops, 1, NULL), TMX_ERR_INVALID);
    /* a DEL of a handle never given, of a stale one: TM_ERR, completed
     * although unsignaled */
    ops[0] = (off_op_t){.opcode = OFF_WR_TAG_DEL, .handle = 0xffffffffu, .wr_id = 5};
    ops[1] = (off_op_t){.opcode = OFF_WR_TAG_DEL, .handle = 1u << 16, .wr_id = 6};
    assert_int_equal(off_post_ops(d.e, ops, 2, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(poll_all(d.e, &c, 1), 1);
    assert_int_equal(c.opcode, OFF_WC_TM_DEL);
    assert_int_equal(c.status, OFF_WC_TM_ERR);
    assert_int_equal(c.wr_id, 5);
    assert_int_equal(poll_all(d.e, &c, 1), 1);
    assert_int_equal(c.wr_id, 6);
    assert_int_equal(c.status, OFF_WC_TM_ERR);
    dev_close(&d);
    caps.max_num_tags = OFF_MAX_NUM_TAGS + 1;
    assert_int_equal(off_engine_open(&caps, &dev_ops, NULL, &e), TMX_ERR_INVALID);
}

/* DEL racing a message that consumes its tag: processed after the
 * message, the DEL fails and the host sees the match first; processed
 * before, it succeeds and the message is unexpected. */
static void test_del_racing_consume(void **state)
{
    for (int del_first = 0; del_first < 2; del_first++) {
        tdev_t d;
        char buf[8] = {0};
        off_op_t op = op_add(1, buf, sizeof(buf), 0, 3, 0, 0), del;
        off_msg_t m = msg_eager(0, 3, "m1", 3);
        off_cqe_t c[3];

        dev_open(&d, NULL);
        assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
        off_engine_run(d.e, SIZE_MAX);
        del = (off_op_t){.opcode = OFF_WR_TAG_DEL, .flags = OFF_OPS_SIGNALED, .handle = op.handle,
                         .wr_id = 100};
        assert_int_equal(off_post_ops(d.e, &del, 1, NULL), TMX_OK);
        if (del_first)
            off_engine_run(d.e, SIZE_MAX);
        off_arrive(d.e, &m);
        off_engine_run(d.e, SIZE_MAX);
        assert_int_equal(poll_all(d.e, c, 3), 2);
        if (del_first) {
            assert_int_equal(c[0].opcode, OFF_WC_TM_DEL);
            assert_int_equal(c[0].status, OFF_WC_SUCCESS);
            assert_int_equal(c[1].opcode, OFF_WC_RECV);
            off_cqe_release(&c[1]);
        } else {
            assert_int_equal(c[0].opcode, OFF_WC_TM_RECV);
            assert_string_equal(buf, "m1");
            assert_int_equal(c[1].opcode, OFF_WC_TM_DEL);
            assert_int_equal(c[1].status, OFF_WC_TM_ERR);
        }
        dev_close(&d);
    }
}

/* A serialised host takes what the engine does not match at once
 * (off_arrive_inline): no completion, no copy, but counted, so that a tag
 * the host adds with a stale count is not matchable. */
static void test_arrive_inline(void **state)
{
    tdev_t d;
    char b1[8] = {0};
    off_op_t op = op_add(1, b1, sizeof(b1), 0, 7, 0, 0);
    off_msg_t m1 = msg_eager(0, 7, "m1", 3), m2 = msg_eager(0, 7, "m2", 3);
    off_cqe_t c[2];
    off_stats_t s;

    (void)state;
    dev_open(&d, NULL);
    off_engine_set_serialised(d.e);
    assert_int_equal(off_arrive_inline(d.e, &m1, NULL), 0); /* no tag: the host's, in hand */
    assert_int_equal(poll_all(d.e, c, 2), 0);
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK); /* count 0: one behind */
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(off_arrive_inline(d.e, &m2, NULL), 0); /* b1 not matchable yet */
    op = (off_op_t){.opcode = OFF_WR_TAG_SYNC, .unexpected_cnt = 2};
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(off_arrive_inline(d.e, &m1, NULL), 1);
    assert_int_equal(poll_all(d.e, c, 2), 1);
    assert_int_equal(c[0].opcode, OFF_WC_TM_RECV);
    assert_string_equal(b1, "m1");
    off_engine_stats(d.e, &s);
    assert_int_equal(s.unexpected, 2);
    assert_int_equal(s.matched, 1);
    dev_close(&d);
}

/* off_arrive_unlisted is off_arrive_inline's 0 without the message, and
 * only while no tag is matchable: it counts what it takes, so that a tag
 * added with a stale count stays unmatchable, and leaves a matchable tag
 * to off_arrive_inline. */
static void test_arrive_unlisted(void **state)
{
    tdev_t d;
    char b1[8] = {0};
    off_op_t op = op_add(1, b1, sizeof(b1), 0, 7, 0, 0);
    off_msg_t m1 = msg_eager(0, 7, "m1", 3);
    off_cqe_t c[2];
    off_stats_t s;

    (void)state;
    dev_open(&d, NULL);
    off_engine_set_serialised(d.e);
    assert_int_equal(off_arrive_unlisted(d.e), 1); /* an empty list: the host's */
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK); /* count 0: one behind */
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(off_arrive_unlisted(d.e), 1); /* b1 listed, not matchable yet */
    off_engine_stats(d.e, &s);
    assert_int_equal(s.unexpected, 2);
    assert_int_equal(s.listed, 1);
    op = (off_op_t){.opcode = OFF_WR_TAG_SYNC, .unexpected_cnt = 1};
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(off_arrive_inline(d.e, &m1, NULL), 0); /* still one behind */
    op = (off_op_t){.opcode = OFF_WR_TAG_SYNC, .unexpected_cnt = 3};
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(off_arrive_unlisted(d.e), 0); /* b1 matchable: not counted */
    assert_int_equal(off_arrive_inline(d.e, &m1, NULL), 1);
    assert_int_equal(poll_all(d.e, c, 2), 1);
    assert_string_equal(b1, "m1");
    off_engine_stats(d.e, &s);
    assert_int_equal(s.unexpected, 3);
    assert_int_equal(s.matched, 1);
    assert_int_equal(off_arrive_unlisted(d.e), 1); /* empty again */
    dev_close(&d);
}

/* An eager message matched while no completion waits gives its one
 * completion to the host directly (off_arrive_inline's 2), with its
 * buffer already free; with a completion waiting it goes behind it in the
 * ring, so that the order of completions holds either way. */
static void test_arrive_direct(void **state)
{
    tdev_t d;
    char b1[8] = {0}, b2[2] = {0}, b3[8] = {0};
    off_op_t op = op_add(1, b1, sizeof(b1), 5, 7, 0, 0);
    off_msg_t m = msg_eager(5, 7, "m1", 3);
    off_cqe_t c[3], direct;
    uint32_t h1;

    (void)state;
    dev_open(&d, NULL);
    off_engine_set_serialised(d.e);
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    h1 = op.handle;
    off_engine_run(d.e, SIZE_MAX);
    memset(&direct, 0xa5, sizeof(direct));
    assert_int_equal(off_arrive_inline(d.e, &m, &direct), 2);
    assert_int_equal(direct.opcode, OFF_WC_TM_RECV);
    assert_int_equal(direct.flags, OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID);
    assert_int_equal(direct.status, OFF_WC_SUCCESS);
    assert_int_equal(direct.wr_id, 1);
    assert_int_equal(direct.src, 5);
    assert_int_equal(direct.tag, 7);
    assert_int_equal(direct.byte_len, 3);
    assert_int_equal(direct.msg.len, 3);
    assert_null(direct.msg.data);
    assert_string_equal(b1, "m1");
    assert_int_equal(poll_all(d.e, c, 3), 0);
    /* the buffer is free: its handle names nothing, its slot is reused */
    op = (off_op_t){.opcode = OFF_WR_TAG_DEL, .handle = h1, .wr_id = 9};
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    assert_int_equal(poll_all(d.e, c, 3), 1);
    assert_int_equal(c[0].opcode, OFF_WC_TM_DEL);
    assert_int_equal(c[0].status, OFF_WC_TM_ERR);

    /* truncated: as much as fits, and said so */
    op = op_add(2, b2, sizeof(b2), 5, 8, 0, 0);
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    m = msg_eager(5, 8, "xyz", 3);
    assert_int_equal(off_arrive_inline(d.e, &m, &direct), 2);
    assert_int_equal(direct.status, OFF_WC_TRUNCATED);
    assert_int_equal(direct.byte_len, 2);
    assert_int_equal(direct.msg.len, 3);
    assert_memory_equal(b2, "xy", 2);

    /* a completion waits (a signaled ADD's): the match goes behind it */
    op = op_add(3, b3, sizeof(b3), 5, 9, 0, 0);
    op.flags = OFF_OPS_SIGNALED;
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    m = msg_eager(5, 9, "m3", 3);
    assert_int_equal(off_arrive_inline(d.e, &m, &direct), 1);
    assert_int_equal(poll_all(d.e, c, 3), 2);
    assert_int_equal(c[0].opcode, OFF_WC_TM_ADD);
    assert_int_equal(c[1].opcode, OFF_WC_TM_RECV);
    assert_int_equal(c[1].flags, OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID);
    assert_int_equal(c[1].wr_id, 3);
    assert_string_equal(b3, "m3");

    /* the engine is ahead of the host: a direct completion asks for SYNC */
    m = msg_eager(6, 1, "u", 2);
    assert_int_equal(off_arrive_inline(d.e, &m, &direct), 0);
    op = op_add(4, b1, sizeof(b1), 5, 10, 0, 1); /* the host's count is 1 */
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    op = (off_op_t){.opcode = OFF_WR_TAG_SYNC, .unexpected_cnt = 0}; /* a stale report */
    assert_int_equal(off_post_ops(d.e, &op, 1, NULL), TMX_OK);
    off_engine_run(d.e, SIZE_MAX);
    m = msg_eager(5, 10, "m4", 3);
    assert_int_equal(off_arrive_inline(d.e, &m, &direct), 2);
    assert_true(direct.flags & OFF_WC_TM_SYNC_REQ);
    assert_string_equal(b1, "m4");
    dev_close(&d);
}

/* ----------------------------------------------------------- the host */

/* The host side of the interface, as the core keeps it: every posted
 * receive is in its matcher (hm) in post order, whether the engine holds
 * it too or not; the engine gets a receive only while no receive is the
 * host's alone (so every tag it holds is older than every receive it does
 * not); an unexpected message is matched against hm, and a tag the host
 * takes for it is deleted from the engine. */
#define H_RECVS 2048
#define H_MSGS 2048

typedef struct h_recv {
    match_recv_t mr;
    util_dlist_t host_link;  /* in host_only while the host holds it alone */
    int id;
    int in_engine;
    uint32_t handle;
    uint64_t buf[2];
} h_recv_t;

typedef struct h_msg {
    match_msg_t mm;
    int id;
} h_msg_t;

typedef struct host {
    tdev_t d;
    match_engine_t hm;
    h_recv_t *recv;
    h_msg_t *msg;
    int n_recv;
    uint32_t handled, reported;
    int n_host_only;
    util_dlist_t host_only;
    int sync_req;
    int *pair;          /* recv id -> msg id, -1 */
    int threaded;       /* an engine thread runs operations */
} host_t;

typedef struct ref {
    match_engine_t m;
    match_recv_t *r;
    match_msg_t *msg;
    int *pair;
} ref_t;

static ref_t *ref_open(int n)
{
    ref_t *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    f->r = calloc((size_t)n, sizeof(*f->r));
    f->msg = calloc((size_t)n, sizeof(*f->msg));
    f->pair = malloc((size_t)n * sizeof(int));
    assert_true(f->r && f->msg && f->pair);
    assert_int_equal(match_init(&f->m), TMX_OK);
    for (int i = 0; i < n; i++)
        f->pair[i] = -1;
    return f;
}

static void ref_close(ref_t *f)
{
    match_fini(&f->m);
    free(f->r);
    free(f->msg);
    free(f->pair);
    free(f);
}

/* A host for n receives and n messages. */
static int diff_inline;       /* diff_run's host takes arrivals inline */
static uint64_t diff_direct;  /* direct completions it took */

static void host_open(host_t *h, const off_caps_t *caps, int n)
{
    memset(h, 0, sizeof(*h));
    dev_open(&h->d, caps);
    assert_int_equal(match_init(&h->hm), TMX_OK);
    util_dlist_init(&h->host_only);
    h->recv = calloc((size_t)n, sizeof(*h->recv));
    h->msg = calloc((size_t)n, sizeof(*h->msg));
    h->pair = malloc((size_t)n * sizeof(int));
    assert_non_null(h->recv);
    assert_non_null(h->msg);
    for (int i = 0; i < n; i++)
        h->pair[i] = -1;
}

static void host_close(host_t *h)
{
    match_fini(&h->hm);
    dev_close(&h->d);
    free(h->recv);
    free(h->msg);
    free(h->pair);
}

/* Posts op, making room: the engine thread runs the queue, or we do. */
static void host_op(host_t *h, off_op_t *op)
{
    tmx_status_t st;

    op->unexpected_cnt = h->handled;
    while ((st = off_post_ops(h->d.e, op, 1, NULL)) == TMX_ERR_AGAIN) {
        if (h->threaded)
            sched_yield();
        else
            off_engine_run(h->d.e, SIZE_MAX);
    }
    assert_int_equal(st, TMX_OK);
    h->reported = h->handled;
}

static void host_pair(host_t *h, int r, int m)
{
    assert_int_equal(h->pair[r], -1);
    h->pair[r] = m;
}

/* A receive may go to the engine when it overlaps none of the receives
 * the host holds alone (beyond HOST_SCAN_MAX of those, none goes). */
#define HOST_SCAN_MAX 64

static int host_may_offload(const host_t *h, uint32_t src, uint64_t tag, uint64_t ignore)
{
    util_dlist_t *pos;

    if (h->n_host_only > HOST_SCAN_MAX)
        return 0;
    util_dlist_foreach(pos, &h->host_only) {
        const h_recv_t *o = util_container_of(pos, h_recv_t, host_link);
        if (off_recvs_overlap(src, tag, ignore, o->mr.src, o->mr.tag, o->mr.ignore))
            return 0;
    }
    return 1;
}

static void host_post(host_t *h, int id, uint32_t src, uint64_t tag, uint64_t ignore)
{
    h_recv_t *r = &h->recv[id];
    match_msg_t *mm;

    r->id = id;
    r->mr.src = src;
    r->mr.tag = tag;
    r->mr.ignore = ignore;
    if ((mm = match_find_msg(&h->hm, src, tag, ignore)) != NULL) {
        match_remove_msg(&h->hm, mm);
        host_pair(h, id, ((h_msg_t *)mm)->id);
        return;
    }
    if (host_may_offload(h, src, tag, ignore)) {
        off_op_t op = op_add((uint64_t)id, r->buf, sizeof(r->buf),
                             src == TMX_ANY_SOURCE ? OFF_ANY_SOURCE : src, tag, ignore, 0);
        op.unexpected_cnt = h->handled;
        tmx_status_t st = off_post_ops(h->d.e, &op, 1, NULL);
        if (st == TMX_OK) {
            r->in_engine = 1;
            r->handle = op.handle;
            h->reported = h->handled;
        } else {
            assert_int_equal(st, TMX_ERR_AGAIN); /* full: the host keeps it */
        }
    }
    if (!r->in_engine) {
        h->n_host_only++;
        util_dlist_push_tail(&h->host_only, &r->host_link);
    }
    assert_int_equal(match_post(&h->hm, &r->mr), TMX_OK);
}

/* The message id a completion carries (eager data, rendezvous meta-data
 * or the buffer the read filled). */
static int cqe_msg_id(const off_cqe_t *c, const h_recv_t *r)
{
    uint64_t v;

    if (c->opcode == OFF_WC_TM_RECV && c->status != OFF_WC_TM_RNDV_INCOMPLETE)
        v = r->buf[0];
    else
        memcpy(&v, c->msg.data, sizeof(v));
    return (int)v;
}

static void host_unexpected(host_t *h, off_cqe_t *c)
{
    int id = cqe_msg_id(c, NULL);
    match_recv_t *mr;

    h->handled++;
    if ((mr = match_find_recv(&h->hm, c->src, c->tag)) != NULL) {
        h_recv_t *r = (h_recv_t *)mr;
        match_remove_recv(&h->hm, mr);
        if (r->in_engine) {
            off_op_t del = {.opcode = OFF_WR_TAG_DEL, .flags = OFF_OPS_SIGNALED,
                            .handle = r->handle, .wr_id = (uint64_t)r->id};
            host_op(h, &del);
        } else {
            h->n_host_only--;
            util_dlist_unlink(&r->host_link);
        }
        host_pair(h, r->id, id);
    } else {
        h_msg_t *m = &h->msg[id];
        m->id = id;
        m->mm.src = c->src;
        m->mm.tag = c->tag;
        assert_int_equal(match_add_msg(&h->hm, &m->mm), TMX_OK);
    }
}

static size_t host_poll(host_t *h)
{
    off_cqe_t c[16];
    size_t n, total = 0;

    while ((n = off_poll_cq(h->d.e, c, 16)) > 0) {
        total += n;
        for (size_t i = 0; i < n; i++) {
            h_recv_t *r = c[i].opcode == OFF_WC_TM_RECV ? &h->recv[c[i].wr_id] : NULL;
            h->sync_req |= (c[i].flags & OFF_WC_TM_SYNC_REQ) != 0;
            switch (c[i].opcode) {
            case OFF_WC_RECV:
                host_unexpected(h, &c[i]);
                break;
            case OFF_WC_TM_RECV:
                if (c[i].flags & OFF_WC_TM_MATCH)
                    match_remove_recv(&h->hm, &r->mr);
                if ((c[i].flags & OFF_WC_TM_DATA_VALID) ||
                    c[i].status == OFF_WC_TM_RNDV_INCOMPLETE)
                    host_pair(h, r->id, cqe_msg_id(&c[i], r));
                break;
            case OFF_WC_TM_DEL:
                assert_int_equal(c[i].status, OFF_WC_SUCCESS); /* never consumed meanwhile */
                break;
            default:
                fail_msg("unexpected completion %u", c[i].opcode);
            }
            off_cqe_release(&c[i]);
        }
    }
    if (h->sync_req && h->reported != h->handled) {
        off_op_t sync = {.opcode = OFF_WR_TAG_SYNC};
        host_op(h, &sync);
    }
    h->sync_req = 0;
    return total;
}

/* A host that takes arrivals inline, as tmx's does (off_arrive_inline):
 * a message no tag takes is in hand at once, counted and matched here; a
 * direct completion is handled as if polled; the ring is drained only if
 * something waits in it. */
static void host_arrive_inline(host_t *h, const off_msg_t *m)
{
    static unsigned turn;
    off_cqe_t c;
    h_recv_t *r;

    /* every other arrival looks first whether any tag could take it, as
     * tmx's host does, so that both ways are held to the matcher alone */
    switch ((turn++ & 1) && off_arrive_unlisted(h->d.e) ? 0 : off_arrive_inline(h->d.e, m, &c)) {
    case 0: {
        off_cqe_t u = {.opcode = OFF_WC_RECV, .src = m->src, .tag = m->tag, .msg = *m};
        host_unexpected(h, &u);
        break;
    }
    case 2:
        assert_int_equal(c.opcode, OFF_WC_TM_RECV);
        assert_int_equal(c.flags & (OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID),
                         OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID);
        r = &h->recv[c.wr_id];
        match_remove_recv(&h->hm, &r->mr);
        host_pair(h, r->id, cqe_msg_id(&c, r));
        if ((c.flags & OFF_WC_TM_SYNC_REQ) && h->reported != h->handled) {
            off_op_t sync = {.opcode = OFF_WR_TAG_SYNC};
            host_op(h, &sync);
        }
        diff_direct++;
        break;
    default:
        break;
    }
    if (!off_cq_empty(h->d.e))
        host_poll(h);
}

static void ref_post(ref_t *f, int id, uint32_t src, uint64_t tag, uint64_t ignore)
{
    match_msg_t *mm;

    f->r[id].src = src;
    f->r[id].tag = tag;
    f->r[id].ignore = ignore;
    if ((mm = match_find_msg(&f->m, src, tag, ignore)) != NULL) {
        match_remove_msg(&f->m, mm);
        f->pair[id] = (int)(mm - f->msg);
        return;
    }
    assert_int_equal(match_post(&f->m, &f->r[id]), TMX_OK);
}

static void ref_arrive(ref_t *f, int id, uint32_t src, uint64_t tag)
{
    match_recv_t *r;

    if ((r = match_find_recv(&f->m, src, tag)) != NULL) {
        match_remove_recv(&f->m, r);
        f->pair[r - f->r] = id;
        return;
    }
    f->msg[id].src = src;
    f->msg[id].tag = tag;
    assert_int_equal(match_add_msg(&f->m, &f->msg[id]), TMX_OK);
}

/* A message of the scripts: eager, a rendezvous that fits, or one that
 * does not (RNDV_INCOMPLETE); its id is its payload. */
static uint64_t msg_ids[H_MSGS];

static off_msg_t make_msg(int id, uint32_t src, uint64_t tag, int kind)
{
    off_msg_t m = {.src = src, .tag = tag};

    msg_ids[id] = (uint64_t)id;
    if (kind == 0) {
        m.op = OFF_TM_EAGER;
        m.data = &msg_ids[id];
        m.len = sizeof(uint64_t);
    } else {
        m.op = OFF_TM_RNDV;
        m.data = &msg_ids[id];
        m.len = sizeof(uint64_t);
        m.va = (uintptr_t)&msg_ids[id];
        m.rkey = 1;
        m.rlen = kind == 1 ? sizeof(uint64_t) : 64;
    }
    return m;
}

/* Runs the engine and the host until nothing moves. */
static void drain(host_t *h)
{
    do {
        off_engine_run(h->d.e, SIZE_MAX);
        dev_complete_reads(&h->d, 0);
    } while (host_poll(h) > 0 || off_engine_run(h->d.e, SIZE_MAX) > 0);
}

static void compare(const host_t *h, const ref_t *f, int n_recv)
{
    for (int i = 0; i < n_recv; i++) {
        if (h->pair[i] != f->pair[i])
            fail_msg("receive %d: engine and host gave message %d, the matcher alone %d", i,
                     h->pair[i], f->pair[i]);
    }
}

/* The seed's race: messages m1, m2 and receives b1, b2 that all match,
 * with the engine's processing (R) and the host's polling (H) at every
 * position: b1 must get m1 and b2 m2, whatever the schedule. Also with
 * b1 from any source and with a rendezvous m1. */
static void test_race_every_position(void **state)
{
    static const char *letters = "APRH";
    int scripts = 0;

    (void)state;
    for (int variant = 0; variant < 3; variant++) {
        /* words of length 8: two A (arrivals), two P (posts), R and H elsewhere */
        for (unsigned w = 0; w < 65536; w++) {
            char s[9];
            int na = 0, np = 0;
            for (int i = 0; i < 8; i++) {
                s[i] = letters[(w >> (2 * i)) & 3];
                na += s[i] == 'A';
                np += s[i] == 'P';
            }
            s[8] = 0;
            if (na != 2 || np != 2)
                continue;
            host_t *h = malloc(sizeof(*h));
            ref_t *f = ref_open(2);
            int a = 0, p = 0;
            host_open(h, NULL, 2);
            h->d.defer = 1;
            for (int i = 0; i < 8; i++) {
                if (s[i] == 'A') {
                    off_msg_t m = make_msg(a, 0, 5, variant == 2 && a == 0 ? 1 : 0);
                    off_arrive(h->d.e, &m);
                    ref_arrive(f, a, 0, 5);
                    a++;
                } else if (s[i] == 'P') {
                    uint32_t src = variant == 1 && p == 0 ? TMX_ANY_SOURCE : 0;
                    host_post(h, p, src, 5, 0);
                    ref_post(f, p, src, 5, 0);
                    p++;
                } else if (s[i] == 'R') {
                    off_engine_run(h->d.e, SIZE_MAX);
                } else {
                    host_poll(h);
                }
            }
            drain(h);
            if (h->pair[0] != 0 || h->pair[1] != 1)
                fail_msg("script %s (variant %d): b1 got m%d, b2 got m%d", s, variant,
                         h->pair[0] + 1, h->pair[1] + 1);
            compare(h, f, 2);
            ref_close(f);
            host_close(h);
            free(h);
            scripts++;
        }
    }
    assert_int_equal(scripts, 3 * 420 * 16);
}

/* Random operations and schedules, engine and host against the matcher
 * alone: the same pairs of receive and message, every one. */
static void diff_run(unsigned seed, int n_ops, int threaded);
static uint64_t diff_matched, diff_msgs; /* by the engine itself; in all */

static void test_differential(void **state)
{
    const char *env = getenv("OFFLOAD_DIFF_OPS");
    int total = env ? atoi(env) : 1000000;

    (void)state;
    diff_matched = diff_msgs = 0;
    for (unsigned seed = 1; total > 0; seed++) {
        int n = total < 4000 ? total : 4000;
        diff_run(seed, n, 0);
        total -= n;
    }
    /* and the engine did take its share: a host that kept it out of sync,
     * or never gave it a receive, would pass the comparison alone */
    print_message("the engine matched %llu of %llu messages\n", (unsigned long long)diff_matched,
                  (unsigned long long)diff_msgs);
    assert_true(diff_matched * 20 >= diff_msgs);
}

/* The wire, for the threaded run: arrivals queued by the test thread and
 * handed to the engine by the engine's thread, with the operations. */
typedef struct wire {
    pthread_mutex_t lock;
    off_msg_t q[H_MSGS];
    size_t head, n;
    int stop;
    off_engine_t *e;
} wire_t;

static void *engine_thread(void *arg)
{
    wire_t *w = arg;

    for (;;) {
        off_msg_t m;
        int have = 0, stop;
        pthread_mutex_lock(&w->lock);
        if (w->n > 0) {
            m = w->q[w->head++ % H_MSGS];
            w->n--;
            have = 1;
        }
        stop = w->stop && w->n == 0;
        pthread_mutex_unlock(&w->lock);
        size_t ran = off_engine_run(w->e, 4);
        if (have)
            off_arrive(w->e, &m);
        if (stop)
            return NULL;
        if (!have && ran == 0)
            sched_yield();
    }
}

static void diff_run(unsigned seed, int n_ops, int threaded)
{
    host_t *h = malloc(sizeof(*h));
    ref_t *f = ref_open(H_RECVS);
    off_caps_t caps = {.max_num_tags = 1 + seed % 16, .max_ops = 2 + seed % 8};
    /* receives posted ahead of their messages, behind them, or as many */
    unsigned posts = 4 + seed % 3;
    wire_t *w = NULL;
    pthread_t t;
    int n_recv = 0, n_msg = 0;
    unsigned x = seed * 2654435761u + 1;

#define RND() (x = x * 1103515245u + 12345u, (x >> 8))
    host_open(h, &caps, H_RECVS);
    if (diff_inline && !threaded)
        off_engine_set_serialised(h->d.e);
    h->d.defer = !threaded;
    h->threaded = threaded;
    if (threaded) {
        w = calloc(1, sizeof(*w));
        pthread_mutex_init(&w->lock, NULL);
        w->e = h->d.e;
        assert_int_equal(pthread_create(&t, NULL, engine_thread, w), 0);
    }
    /* Messages mostly answer one of the last receives posted, and the
     * backlog of either side stays within a window, as in an application:
     * otherwise receives nothing matches pile up with the host. */
    struct { uint32_t src; uint64_t tag, ignore; } recent[32];
    int window = 2 + (int)(seed % 24);
    for (int op = 0; op < n_ops; op++) {
        unsigned k = RND() % 16, p = posts;
        if (n_recv - n_msg > window)
            p = 2;
        else if (n_msg - n_recv > window)
            p = 8;
        if (k < p && n_recv < H_RECVS) {
            uint32_t src = RND() % 4 == 0 ? TMX_ANY_SOURCE : RND() % 3;
            uint64_t tag = RND() % 4, ignore = RND() % 5 == 0 ? 1 : 0;
            if (RND() % 16 == 0)
                ignore = ~0ull;
            host_post(h, n_recv, src, tag, ignore);
            ref_post(f, n_recv, src, tag, ignore);
            recent[n_recv % 32].src = src;
            recent[n_recv % 32].tag = tag;
            recent[n_recv % 32].ignore = ignore;
            n_recv++;
        } else if (k < 10 && k >= p && n_msg < H_MSGS) {
            uint32_t src = RND() % 3;
            uint64_t tag = RND() % 4;
            if (n_recv > 0 && RND() % 4 != 0) {
                int q = n_recv - 1 - (int)(RND() % (unsigned)(n_recv < 32 ? n_recv : 32));
                src = recent[q % 32].src == TMX_ANY_SOURCE ? src : recent[q % 32].src;
                tag = (recent[q % 32].tag & ~recent[q % 32].ignore) | (tag & recent[q % 32].ignore);
            }
            off_msg_t m = make_msg(n_msg, src, tag, RND() % 4 == 0 ? 1 + RND() % 2 : 0);
            ref_arrive(f, n_msg, src, tag);
            if (threaded) {
                for (;;) {
                    pthread_mutex_lock(&w->lock);
                    if (w->n < H_MSGS) {
                        w->q[(w->head + w->n++) % H_MSGS] = m;
                        pthread_mutex_unlock(&w->lock);
                        break;
                    }
                    pthread_mutex_unlock(&w->lock);
                    sched_yield();
                }
            } else if (diff_inline) {
                host_arrive_inline(h, &m);
            } else {
                off_arrive(h->d.e, &m);
            }
            n_msg++;
        } else if (k < 12 && !threaded) {
            off_engine_run(h->d.e, RND() % 16);
        } else if (k < 13 && !threaded) {
            dev_complete_reads(&h->d, RND());
        } else {
            host_poll(h);
        }
    }
    if (threaded) {
        pthread_mutex_lock(&w->lock);
        w->stop = 1;
        pthread_mutex_unlock(&w->lock);
        pthread_join(t, NULL);
        pthread_mutex_destroy(&w->lock);
        free(w);
        h->threaded = 0; /* from now on this thread runs the engine's queue */
    }
    drain(h);
    compare(h, f, n_recv);
    off_stats_t st;
    off_engine_stats(h->d.e, &st);
    diff_matched += st.matched;
    diff_msgs += (uint64_t)n_msg;
    ref_close(f);
    host_close(h);
    free(h);
#undef RND
}

/* The same with a host that takes arrivals inline: what the engine does
 * not match, and the completions it hands back directly. */
static void test_differential_inline(void **state)
{
    const char *env = getenv("OFFLOAD_DIFF_OPS");
    int total = env ? atoi(env) : 1000000;

    (void)state;
    diff_matched = diff_msgs = diff_direct = 0;
    diff_inline = 1;
    for (unsigned seed = 1; total > 0; seed++) {
        int n = total < 4000 ? total : 4000;
        diff_run(seed, n, 0);
        total -= n;
    }
    diff_inline = 0;
    print_message("the engine matched %llu of %llu messages, %llu completed directly\n",
                  (unsigned long long)diff_matched, (unsigned long long)diff_msgs,
                  (unsigned long long)diff_direct);
    assert_true(diff_matched * 20 >= diff_msgs);
    assert_true(diff_direct * 100 >= diff_msgs);
}

static void test_differential_threaded(void **state)
{
    const char *env = getenv("OFFLOAD_DIFF_THREADED_OPS");
    int total = env ? atoi(env) : 1000000;

    (void)state;
    for (unsigned seed = 1; total > 0; seed++) {
        int n = total < 4000 ? total : 4000;
        diff_run(seed, n, 1);
        total -= n;
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eager_match_and_unexpected),
        cmocka_unit_test(test_eager_truncated),
        cmocka_unit_test(test_rndv_two_completions),
        cmocka_unit_test(test_read_abandoned),
        cmocka_unit_test(test_read_done_room_kept),
        cmocka_unit_test(test_rndv_incomplete),
        cmocka_unit_test(test_rndv_header_too_big),
        cmocka_unit_test(test_stale_handle),
        cmocka_unit_test(test_del_while_reading),
        cmocka_unit_test(test_sync_by_any_operation),
        cmocka_unit_test(test_arrive_inline),
        cmocka_unit_test(test_arrive_unlisted),
        cmocka_unit_test(test_arrive_direct),
        cmocka_unit_test(test_no_tag_and_fin_go_to_host),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_del_racing_consume),
        cmocka_unit_test(test_race_every_position),
        cmocka_unit_test(test_differential),
        cmocka_unit_test(test_differential_inline),
        cmocka_unit_test(test_differential_threaded),
    };

    return UNIT_MAIN(argc, argv, tests);
}
