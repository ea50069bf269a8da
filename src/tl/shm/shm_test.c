/*
 * The shm transport's own cases, below what the conformance suite
 * (tests/tl/tl_conf.c) checks over every transport: the ring kept in order
 * through being full, cells a hostile or broken sender can publish, and a
 * sender that dies between claiming a cell and publishing it. Two
 * interfaces live in this process; the dying sender is a child.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "unit.h"
#include "unit_tl.h"

#include "tl/shm/shm.h"

#define UUID_A 0xa11ce0001ULL
#define UUID_B 0xb0b000002ULL
#define UUID_C 0xc0c000003ULL

typedef struct side {
    tl_iface_t *iface;
    uint64_t uuid;
    size_t packets;
    uint64_t next;              /* the counter the next packet must carry */
    int out_of_order;
    int corrupt;                /* packets whose bytes after the counter are wrong */
    int pieces;                 /* spans handed up as they came (stream) */
    int begun, broken;          /* spans begun, and ended unfinished */
    unsigned char *all;         /* the span streaming in */
    size_t all_len;
    int failures;
} side_t;

/* Whether the sides opened next send short packets through fast boxes
 * (TMX_SHM_FBOX): the cases of the ring turn them off, to know where each
 * packet goes. */
static int test_fbox;

/* Byte i of a packet that carries counter v, after the counter. */
static unsigned char pattern(uint64_t v, size_t i)
{
    return (unsigned char)(v * 31 + i * 7);
}

static void on_recv(void *arg, uint64_t src, const void *data, size_t len)
{
    side_t *s = arg;
    uint64_t v = 0;

    (void)src;
    if (len >= sizeof(v))
        memcpy(&v, data, sizeof(v));
    for (size_t i = sizeof(v); i < len; i++) {
        if (((const unsigned char *)data)[i] != pattern(v, i)) {
            s->corrupt++;
            break;
        }
    }
    s->out_of_order += v != s->next;
    s->next = v + 1;
    s->packets++;
}

/* A span streaming in, checked as one packet once whole. */
static uint64_t stream_src;

static void *on_begin(void *arg, uint64_t src, const void *first, size_t first_len, size_t total)
{
    static unsigned char all[SHM_MAX_PACKET];
    side_t *s = arg;

    assert_true(first_len >= 64 && first_len < total && total <= SHM_MAX_PACKET);
    s->all = all;
    memcpy(s->all, first, first_len);
    s->all_len = first_len;
    s->begun++;
    stream_src = src;
    return s;
}

static void on_more(void *arg, void *sink, const void *piece, size_t len)
{
    side_t *s = sink;

    assert_ptr_equal(sink, arg);
    assert_true(len > 0 && s->all_len + len <= SHM_MAX_PACKET);
    memcpy(s->all + s->all_len, piece, len);
    s->all_len += len;
}

static void on_end(void *arg, void *sink, int how)
{
    side_t *s = sink;

    assert_ptr_equal(sink, arg);
    if (how != TL_STREAM_WHOLE) {
        s->broken++;
        return;
    }
    s->pieces++;
    on_recv(arg, stream_src, s->all, s->all_len);
}

static const tl_stream_cb_t on_stream = {on_begin, on_more, on_end};

static void on_fail(void *arg, uint64_t uuid, int clean)
{
    (void)uuid;
    (void)clean;
    ((side_t *)arg)->failures++;
}

static tmx_status_t on_mem_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    (void)arg;
    (void)addr;
    (void)len;
    (void)rkey;
    return TMX_ERR_NOT_FOUND; /* nothing is lent */
}

static void side_open_stream(side_t *s, uint64_t uuid, const tl_stream_cb_t *stream)
{
    tl_settings_t set;
    tl_iface_params_t p = {uuid, 0x70b, on_recv, on_fail, on_mem_check, s, NULL, 0, &set, s, stream, NULL, NULL, 0,
                           NULL, 0,     NULL};

    memset(s, 0, sizeof(*s));
    s->uuid = uuid;
    assert_int_equal(unit_tl_settings(&set), TMX_OK);
    set.shm.fbox = test_fbox;
    assert_int_equal(tl_shm_ops.iface_open(&p, &s->iface), TMX_OK);
}

/* A layer above without stream callbacks: spans come gathered. */
static void side_open(side_t *s, uint64_t uuid)
{
    side_open_stream(s, uuid, NULL);
}

static shm_ep_t *connect_to(side_t *from, side_t *to)
{
    unsigned char addr[256];
    size_t len = sizeof(addr);
    tl_ep_t *ep;

    assert_int_equal(tl_shm_ops.address(to->iface, addr, &len), TMX_OK);
    assert_int_equal(tl_shm_ops.ep_create(from->iface, addr, len, 1, to->uuid, &ep), TMX_OK);
    return (shm_ep_t *)ep;
}

static void side_close(side_t *s, shm_ep_t *ep)
{
    tl_iface_mute(s->iface);
    if (ep != NULL)
        tl_shm_ops.ep_destroy(&ep->super);
    tl_shm_ops.iface_close(s->iface);
}

static tmx_status_t send_counter(shm_ep_t *ep, uint64_t v)
{
    struct iovec iov = {&v, sizeof(v)};

    return tl_shm_ops.send(&ep->super, &iov, 1);
}

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Progress b until it holds want packets or seconds pass. */
static void drain(side_t *b, size_t want, int seconds)
{
    uint64_t end = now_us() + (uint64_t)seconds * 1000000u;

    while (b->packets < want && now_us() < end)
        tl_shm_ops.progress(b->iface);
}

/* A sender fills the ring (TMX_ERR_AGAIN, nothing lost), the receiver
 * drains it in order, and sending goes on; several laps of the ring. */
static void full_ring_keeps_order(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    uint64_t v = 0;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    for (int lap = 0; lap < 5; lap++) {
        size_t before = b.packets, sent = 0;
        tmx_status_t st;
        while ((st = send_counter(ab, v)) == TMX_OK) {
            v++;
            sent++;
        }
        assert_int_equal(st, TMX_ERR_AGAIN);
        assert_int_equal(sent, lap == 0 ? SHM_N_CELLS : sent);
        assert_true(sent > 0);
        drain(&b, before + sent, 10);
        assert_int_equal(b.packets, before + sent);
    }
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(b.next, v);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* Publishes a cell of kind with len bytes of payload. */
static void publish_raw(shm_ep_t *ep, uint32_t kind, const void *payload, uint32_t len)
{
    uint64_t pos;
    shm_cell_t *cell = shm_cell_claim(ep, &pos);

    assert_non_null(cell);
    /* a cell is SHM_CELL_SIZE bytes; what link-time optimisation sees of
     * the segment's type says the cells end where its header does */
    unsigned char *volatile dst = cell->payload;
    if (len > 0)
        memcpy(dst, payload, len);
    assert_int_equal(shm_cell_publish(ep, cell, pos, kind, len), TMX_OK);
}

/* Cells that no honest sender publishes are dropped and counted, one by
 * one, and the packets behind them still arrive. */
static void hostile_cells_dropped(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    shm_iface_t *sb;
    unsigned char junk[256];
    shm_get_data_t d = {htole64(77), 0, 0, htole32(8)};
    shm_help_req_t h = {htole32(9999), 0, htole64(1), 0, 0, 0, 0};
    uint64_t pos;
    shm_cell_t *cell;

    (void)state;
    memset(junk, 0xee, sizeof(junk));
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    sb = (shm_iface_t *)b.iface;
    publish_raw(ab, SHM_KIND_GET_DATA, junk, 4);          /* shorter than its header */
    memcpy(junk, &d, sizeof(d));
    publish_raw(ab, SHM_KIND_GET_DATA, junk, sizeof(d) + 8); /* a read b never made */
    publish_raw(ab, SHM_KIND_GET_DATA, junk, sizeof(d) + 9); /* length disagrees */
    publish_raw(ab, SHM_KIND_GET_REQ, junk, 5);           /* not a request's size */
    memcpy(junk, &h, sizeof(h));
    publish_raw(ab, SHM_KIND_HELP, junk, sizeof(h));      /* no such job */
    /* a sender slot nobody holds */
    cell = shm_cell_claim(ab, &pos);
    assert_non_null(cell);
    assert_int_equal(shm_cell_publish(ab, cell, pos, SHM_KIND_PACKET, 8), TMX_OK);
    shm_cell_set_slot(cell, SHM_N_SENDERS - 1);
    assert_int_equal(send_counter(ab, 0), TMX_OK);
    drain(&b, 1, 10);
    assert_int_equal(b.packets, 1);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(sb->dropped, 6);
    assert_int_equal(b.failures, 0);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* A read request for memory nothing lends is answered with one refusal;
 * the asker, which made no such read, drops it. */
static void unlent_request_refused(void **state)
{
    side_t a, b;
    shm_ep_t *ab, *ba;
    shm_get_req_t r = {htole64(5), htole64(0x1000), htole64(42), htole64(1 << 20)};
    shm_iface_t *sa;
    uint64_t end;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    ba = connect_to(&b, &a);
    sa = (shm_iface_t *)a.iface;
    publish_raw(ab, SHM_KIND_GET_REQ, &r, sizeof(r));
    end = now_us() + 5000000;
    while (sa->dropped == 0 && now_us() < end) {
        tl_shm_ops.progress(b.iface);
        tl_shm_ops.progress(a.iface);
    }
    assert_int_equal(sa->dropped, 1); /* the refusal, for a read a never made */
    assert_int_equal(((shm_iface_t *)b.iface)->dropped, 0);
    side_close(&a, ab);
    side_close(&b, ba);
}

/* A sender killed after claiming a cell and before publishing it does not
 * block the ring: the receiver skips the cell once its claimant is gone,
 * and the live sender's packets arrive. */
static void dead_claimer_skipped(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    unsigned char addr[256];
    size_t len = sizeof(addr);
    pid_t child;
    int status;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    assert_int_equal(tl_shm_ops.address(b.iface, addr, &len), TMX_OK);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        side_t c;
        tl_ep_t *cb;
        uint64_t pos;
        side_open(&c, UUID_C);
        if (tl_shm_ops.ep_create(c.iface, addr, len, 1, UUID_B, &cb) != TMX_OK ||
            shm_cell_claim((shm_ep_t *)cb, &pos) == NULL)
            _exit(1);
        raise(SIGKILL); /* claimed, never published */
        _exit(2);
    }
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(send_counter(ab, 0), TMX_OK);
    assert_int_equal(send_counter(ab, 1), TMX_OK);
    drain(&b, 2, 10);
    assert_int_equal(b.packets, 2);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(((shm_iface_t *)b.iface)->skipped, 1);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* Packets too large or empty are refused at the sender, nothing sent. */
static void bad_sizes_refused(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    static unsigned char big[SHM_MAX_PACKET + 1];
    struct iovec iov = {big, sizeof(big)};

    (void)state;
    for (size_t i = 8; i < sizeof(big); i++)
        big[i] = pattern(0, i);
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    assert_int_equal(tl_shm_ops.send(&ab->super, &iov, 1), TMX_ERR_INVALID);
    iov.iov_len = 0;
    assert_int_equal(tl_shm_ops.send(&ab->super, &iov, 1), TMX_ERR_INVALID);
    iov.iov_len = SHM_MAX_PACKET;
    assert_int_equal(tl_shm_ops.send(&ab->super, &iov, 1), TMX_OK);
    drain(&b, 1, 10);
    assert_int_equal(b.packets, 1);
    assert_int_equal(b.corrupt, 0);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* Spans (packets longer than a cell) of every cell count, among one-cell
 * packets, over many laps of the ring and so across its end: each whole,
 * once and in order, gathered for a layer without stream callbacks; the ring
 * full of them answers TMX_ERR_AGAIN and loses nothing. */
static void spans_case(int pieces)
{
    side_t a, b;
    shm_ep_t *ab;
    static unsigned char buf[SHM_MAX_PACKET];
    uint64_t v = 0;
    size_t sent = 0;

    side_open(&a, UUID_A);
    side_open_stream(&b, UUID_B, pieces ? &on_stream : NULL);
    ab = connect_to(&a, &b);
    for (int i = 0; sent < 40 * SHM_N_CELLS; i++) {
        size_t len = i % 3 == 0 ? 8 + (size_t)i % 100
                                : SHM_CELL_PAYLOAD - 7 + ((size_t)i * 7919) % (SHM_MAX_PACKET - SHM_CELL_PAYLOAD + 7);
        struct iovec iov[2] = {{buf, 8}, {buf + 8, len - 8}};
        tmx_status_t st;
        memcpy(buf, &v, sizeof(v));
        for (size_t k = 8; k < len; k++)
            buf[k] = pattern(v, k);
        while ((st = tl_shm_ops.send(&ab->super, iov, 2)) == TMX_ERR_AGAIN)
            tl_shm_ops.progress(b.iface);
        assert_int_equal(st, TMX_OK);
        sent += len > SHM_CELL_PAYLOAD ? shm_span_cells(len) : 1;
        v++;
    }
    drain(&b, v, 10);
    assert_int_equal(b.packets, v);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(b.corrupt, 0);
    assert_int_equal(((shm_iface_t *)b.iface)->dropped, 0);
    assert_true(pieces ? b.pieces > 0 : b.pieces == 0);
    side_close(&a, ab);
    side_close(&b, NULL);
}

static void spans_in_order(void **state)
{
    (void)state;
    spans_case(0);
}

/* The same, handed up cell by cell as they come (stream callbacks). */
static void spans_in_pieces(void **state)
{
    (void)state;
    spans_case(1);
}

/* The bytes of a packet that carries counter v (on_recv's pattern). */
static void packet_fill(unsigned char *pkt, uint64_t total, uint64_t v)
{
    memcpy(pkt, &v, sizeof(v));
    for (uint64_t i = sizeof(v); i < total; i++)
        pkt[i] = pattern(v, i);
}

/* Writes cell j of the span at pos that carries the total bytes of pkt,
 * as span_send does, and returns its length; publishing is the caller's. */
static uint32_t span_cell_write(shm_ep_t *ep, uint64_t pos, uint32_t j, const unsigned char *pkt,
                                uint64_t total)
{
    uint32_t n = shm_span_cells(total), len = shm_span_part(total, n, j);
    shm_cell_t *cell = shm_cell(ep->seg, pos + j);
    shm_span_t head = {htole64(total)};
    uint64_t off = 0;

    for (uint32_t k = 0; k < j; k++)
        off += shm_span_part(total, n, k);
    if (j == 0) {
        memcpy(cell->payload, &head, sizeof(head));
        memcpy(cell->payload + sizeof(head), pkt, len - sizeof(head));
    } else {
        memcpy(cell->payload, pkt + off - sizeof(head), len);
    }
    return len;
}

/* Spans that do not hold together are dropped, each cell counted once,
 * and what follows still arrives: a later cell on its own, a first cell
 * whose length needs no span, a span broken off by a later cell of the
 * wrong length or of another sender (the span and that cell), a span
 * longer than any. A first cell published before the later ones is no
 * fault: nothing is handed up or dropped while the consumer waits, and
 * the span arrives whole once they come. */
static void hostile_spans_dropped(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    shm_iface_t *sb;
    static unsigned char junk[SHM_CELL_PAYLOAD], pkt[SHM_MAX_PACKET];
    uint64_t total = SHM_CELL_PAYLOAD + 100, pos;
    shm_span_t head = {htole64(100)};
    uint32_t len;

    (void)state;
    memset(junk, 0xee, sizeof(junk));
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    sb = (shm_iface_t *)b.iface;
    publish_raw(ab, SHM_KIND_CONT, junk, 64);                     /* on its own */
    memcpy(junk, &head, sizeof(head));
    publish_raw(ab, SHM_KIND_SPAN, junk, SHM_CELL_PAYLOAD);       /* 100 bytes: no span */
    packet_fill(pkt, total, 100);
    /* a later cell of the wrong length */
    assert_non_null(shm_cells_claim(ab, 2, &pos));
    len = span_cell_write(ab, pos, 0, pkt, total);
    assert_int_equal(shm_cell_publish(ab, shm_cell(ab->seg, pos), pos, SHM_KIND_SPAN, len), TMX_OK);
    assert_int_equal(shm_cell_publish(ab, shm_cell(ab->seg, pos + 1), pos + 1, SHM_KIND_CONT, 99), TMX_OK);
    /* longer than any span */
    head.len = htole64(SHM_MAX_PACKET + 1);
    memcpy(junk, &head, sizeof(head));
    publish_raw(ab, SHM_KIND_SPAN, junk, SHM_CELL_PAYLOAD);
    /* a later cell that names another sender */
    assert_non_null(shm_cells_claim(ab, 2, &pos));
    len = span_cell_write(ab, pos, 0, pkt, total);
    assert_int_equal(shm_cell_publish(ab, shm_cell(ab->seg, pos), pos, SHM_KIND_SPAN, len), TMX_OK);
    len = span_cell_write(ab, pos, 1, pkt, total);
    assert_int_equal(shm_cell_publish(ab, shm_cell(ab->seg, pos + 1), pos + 1, SHM_KIND_CONT, len), TMX_OK);
    shm_cell_set_slot(shm_cell(ab->seg, pos + 1), SHM_N_SENDERS - 1);
    assert_null(shm_cells_claim(ab, SHM_SPAN_CELLS + 1, &pos));
    assert_int_equal(send_counter(ab, 0), TMX_OK);
    drain(&b, 1, 10);
    assert_int_equal(b.packets, 1);
    assert_int_equal(b.out_of_order, 0);
    /* the lone cell; the short span; the span with a wrong later cell and
     * that cell; the long span; the span of two senders and the other's
     * cell */
    assert_int_equal(sb->dropped, 7);
    /* the first cell alone, for a while; then the other */
    packet_fill(pkt, total, 1);
    assert_non_null(shm_cells_claim(ab, 2, &pos));
    len = span_cell_write(ab, pos, 0, pkt, total);
    assert_int_equal(shm_cell_publish(ab, shm_cell(ab->seg, pos), pos, SHM_KIND_SPAN, len), TMX_OK);
    for (int i = 0; i < 100; i++)
        tl_shm_ops.progress(b.iface);
    assert_int_equal(b.packets, 1);
    assert_int_equal(sb->dropped, 7);
    len = span_cell_write(ab, pos, 1, pkt, total);
    assert_int_equal(shm_cell_publish(ab, shm_cell(ab->seg, pos + 1), pos + 1, SHM_KIND_CONT, len), TMX_OK);
    assert_int_equal(send_counter(ab, 2), TMX_OK);
    drain(&b, 3, 10);
    assert_int_equal(b.packets, 3);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(b.corrupt, 0);
    assert_int_equal(sb->dropped, 7);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* A sender killed after publishing the first cell of a span: the layer
 * above, which has that piece, is told the packet ended unfinished once
 * the receiver skips the dead sender's next cell, and the live sender's
 * packets arrive. */
static void dead_span_sender_unfinished(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    unsigned char addr[256];
    size_t len = sizeof(addr);
    pid_t child;
    int status;

    (void)state;
    side_open(&a, UUID_A);
    side_open_stream(&b, UUID_B, &on_stream);
    ab = connect_to(&a, &b);
    assert_int_equal(tl_shm_ops.address(b.iface, addr, &len), TMX_OK);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        static unsigned char pkt[SHM_MAX_PACKET];
        uint64_t total = 2 * SHM_CELL_PAYLOAD + 100, pos;
        side_t c;
        tl_ep_t *cb;
        side_open(&c, UUID_C);
        if (tl_shm_ops.ep_create(c.iface, addr, len, 1, UUID_B, &cb) != TMX_OK ||
            shm_cells_claim((shm_ep_t *)cb, shm_span_cells(total), &pos) == NULL)
            _exit(1);
        packet_fill(pkt, total, 77);
        if (shm_cell_publish((shm_ep_t *)cb, shm_cell(((shm_ep_t *)cb)->seg, pos), pos, SHM_KIND_SPAN,
                             span_cell_write((shm_ep_t *)cb, pos, 0, pkt, total)) != TMX_OK)
            _exit(1);
        raise(SIGKILL);
        _exit(2);
    }
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(send_counter(ab, 0), TMX_OK);
    assert_int_equal(send_counter(ab, 1), TMX_OK);
    drain(&b, 2, 10);
    assert_int_equal(b.packets, 2);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(b.begun, 1);
    assert_int_equal(b.broken, 1);
    assert_int_equal(((shm_iface_t *)b.iface)->skipped, 2);
    assert_int_equal(((shm_iface_t *)b.iface)->dropped, 1);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* A sender killed in the middle of publishing a span (one later cell
 * published, another not, the first not): the receiver skips the cells
 * it claimed once it is gone, drops the one published, and the live
 * sender's packets arrive. */
static void dead_span_claimer_skipped(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    unsigned char addr[256];
    size_t len = sizeof(addr);
    pid_t child;
    int status;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    assert_int_equal(tl_shm_ops.address(b.iface, addr, &len), TMX_OK);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        side_t c;
        tl_ep_t *cb;
        uint64_t pos;
        side_open(&c, UUID_C);
        if (tl_shm_ops.ep_create(c.iface, addr, len, 1, UUID_B, &cb) != TMX_OK ||
            shm_cells_claim((shm_ep_t *)cb, 3, &pos) == NULL ||
            shm_cell_publish((shm_ep_t *)cb, shm_cell(((shm_ep_t *)cb)->seg, pos + 1), pos + 1,
                             SHM_KIND_CONT, SHM_CELL_PAYLOAD) != TMX_OK)
            _exit(1);
        raise(SIGKILL);
        _exit(2);
    }
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(send_counter(ab, 0), TMX_OK);
    assert_int_equal(send_counter(ab, 1), TMX_OK);
    drain(&b, 2, 10);
    assert_int_equal(b.packets, 2);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(((shm_iface_t *)b.iface)->skipped, 2);
    assert_int_equal(((shm_iface_t *)b.iface)->dropped, 1);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* ------------------------------------------------------------ fast boxes */

/* Sends a packet of len bytes carrying counter v (on_recv's pattern),
 * progressing rx while the ring is full. */
static void send_packet(shm_ep_t *ep, side_t *rx, uint64_t v, size_t len)
{
    static unsigned char buf[SHM_MAX_PACKET];
    struct iovec iov[2] = {{buf, 8}, {buf + 8, len - 8}};
    tmx_status_t st;

    memcpy(buf, &v, sizeof(v));
    for (size_t k = 8; k < len; k++)
        buf[k] = pattern(v, k);
    while ((st = tl_shm_ops.send(&ep->super, iov, 2)) == TMX_ERR_AGAIN)
        tl_shm_ops.progress(rx->iface);
    assert_int_equal(st, TMX_OK);
}

/* The length of the i-th packet of a mixed stream: mostly short (a box's),
 * some of a cell, some spans, and runs of each. */
static size_t mixed_len(uint64_t i)
{
    uint64_t r = (i * 2654435761u) >> 7;

    if (i / 500 % 3 == 1) /* a run of short ones only */
        return 8 + r % (SHM_FBOX_MAX - 7);
    switch (r % 8) {
    case 0:
        return SHM_CELL_PAYLOAD + 1 + r % 20000;
    case 1:
    case 2:
        return SHM_FBOX_MAX + 1 + r % (SHM_CELL_PAYLOAD - SHM_FBOX_MAX);
    default:
        return 8 + r % (SHM_FBOX_MAX - 7);
    }
}

/* One sender's packets of every size, through its box and the ring, with
 * the receiver sometimes away (the box fills and the ring takes over,
 * and the other way round): all arrive once, whole and in order, and the
 * box carried most of the short ones. */
static void fbox_order_mixed(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    const uint64_t n = 30000;

    (void)state;
    test_fbox = 1;
    side_open(&a, UUID_A);
    side_open_stream(&b, UUID_B, &on_stream);
    ab = connect_to(&a, &b);
    for (uint64_t v = 0; v < n; v++) {
        send_packet(ab, &b, v, mixed_len(v));
        if (v % 97 < 40) /* away for a while, then progress at every send */
            tl_shm_ops.progress(b.iface);
    }
    drain(&b, n, 20);
    assert_int_equal(b.packets, n);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(b.corrupt, 0);
    assert_int_equal(((shm_iface_t *)b.iface)->dropped, 0);
    assert_int_not_equal(ab->fbox, SHM_FBOX_NONE);
    assert_true(ab->fb_write > (uint64_t)n / 4 * 16); /* most short ones went through the box */
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* Two senders with a box each, short and long packets, and the receiver
 * alternating: each sender's own order holds. */
static side_t *two_rx;
static uint64_t two_next[2], two_bad;

static void on_recv_two(void *arg, uint64_t src, const void *data, size_t len)
{
    uint64_t v;
    int k = src == UUID_C;

    (void)arg;
    assert_true(len >= 8);
    memcpy(&v, data, sizeof(v));
    two_bad += v != two_next[k];
    two_next[k] = v + 1;
    two_rx->packets++;
}

static void fbox_two_senders(void **state)
{
    side_t a, b, c;
    shm_ep_t *ab, *cb;
    const uint64_t n = 20000;

    (void)state;
    test_fbox = 1;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    side_open(&c, UUID_C);
    b.iface->recv_cb = on_recv_two;
    two_rx = &b;
    ab = connect_to(&a, &b);
    cb = connect_to(&c, &b);
    for (uint64_t v = 0; v < n; v++) {
        send_packet(ab, &b, v, mixed_len(v));
        send_packet(cb, &b, v, mixed_len(v + 7));
        if (v % 13 < 5)
            tl_shm_ops.progress(b.iface);
    }
    drain(&b, 2 * n, 20);
    assert_int_equal(b.packets, 2 * n);
    assert_int_equal(two_bad, 0);
    assert_int_equal(two_next[0], n);
    assert_int_equal(two_next[1], n);
    assert_int_not_equal(ab->fbox, cb->fbox);
    side_close(&a, ab);
    side_close(&c, cb);
    side_close(&b, NULL);
}

/* A sender that says goodbye frees its box once the receiver has taken
 * what it held; the next sender takes the same box and starts where the
 * first stopped (across the box's end), and its packets arrive whole. */
static void fbox_goodbye_frees(void **state)
{
    side_t a, b, c;
    shm_ep_t *ab, *cb;
    shm_iface_t *sb;
    uint8_t box;

    (void)state;
    test_fbox = 1;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    side_open(&c, UUID_C);
    sb = (shm_iface_t *)b.iface;
    ab = connect_to(&a, &b);
    for (uint64_t v = 0; v < 10; v++)
        send_packet(ab, &b, v, 8 + (size_t)v * 37);
    box = ab->fbox;
    assert_int_not_equal(box, SHM_FBOX_NONE);
    side_close(&a, ab); /* goodbye, with ten packets still in the box */
    drain(&b, 10, 10);
    assert_int_equal(b.packets, 10);
    assert_int_equal(b.out_of_order, 0);
    for (int k = 0; k < 100 && atomic_load(&sb->seg->fbox[box].owner) != 0; k++)
        tl_shm_ops.progress(b.iface);
    assert_int_equal(atomic_load(&sb->seg->fbox[box].owner), 0);
    assert_int_equal(atomic_load(&sb->seg->fbox_used) >> box & 1, 0);
    cb = connect_to(&c, &b);
    for (uint64_t v = 10; v < 10 + 3 * SHM_FBOX_SIZE / 64; v++) {
        send_packet(cb, &b, v, 8 + (size_t)v % 300);
        tl_shm_ops.progress(b.iface);
    }
    assert_int_equal(cb->fbox, box);
    assert_true(cb->fb_write > SHM_FBOX_SIZE);
    drain(&b, 10 + 3 * SHM_FBOX_SIZE / 64, 10);
    assert_int_equal(b.packets, 10 + 3 * SHM_FBOX_SIZE / 64);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(b.corrupt, 0);
    assert_int_equal(sb->dropped, 0);
    side_close(&c, cb);
    side_close(&b, NULL);
}

/* Headers no honest sender writes (too long, misplaced skips, other bits,
 * an entry past the box's end) break that box only: the receiver reads it
 * no more, counts it, and another sender's box and the ring go on. */
static void fbox_hostile_headers(void **state)
{
    (void)state;
    test_fbox = 1;
    for (int k = 0; k < 7; k++) {
        side_t a, b, c;
        shm_ep_t *ab, *cb;
        shm_iface_t *sb;
        uint64_t p, bad;
        side_open(&a, UUID_A);
        side_open(&b, UUID_B);
        side_open(&c, UUID_C);
        sb = (shm_iface_t *)b.iface;
        ab = connect_to(&a, &b);
        cb = connect_to(&c, &b);
        send_packet(ab, &b, 0, 16);
        drain(&b, 1, 10);
        p = ab->fb_write;
        switch (k) {
        case 0: bad = SHM_FBOX_VALID | SHM_FBOX_POS(p) | (SHM_FBOX_MAX + 1); break; /* too long */
        case 1: bad = SHM_FBOX_SKIP | SHM_FBOX_POS(p); break; /* to the start, where an old lap's header waits */
        case 2: bad = SHM_FBOX_VALID | SHM_FBOX_POS(p) | 1ull << 61 | 8; break; /* other bits */
        case 3: bad = SHM_FBOX_VALID | SHM_FBOX_POS(p); break; /* empty */
        case 4: bad = 1234; break; /* no flag */
        case 5: bad = SHM_FBOX_VALID | SHM_FBOX_POS(p + 8) | 16; break; /* another position */
        default: bad = SHM_FBOX_VALID | SHM_FBOX_POS(p - 24) | 16; break; /* the last lap's */
        }
        /* a's next header, written by hand */
        atomic_store(shm_fbox_word(shm_fbox_data(ab->seg, ab->fbox), p), bad);
        send_packet(cb, &b, 1, 16);
        send_packet(cb, &b, 2, 4000); /* through the ring */
        drain(&b, 3, 10);
        for (int i = 0; i < 10; i++)
            tl_shm_ops.progress(b.iface);
        assert_int_equal(b.packets, 3);
        assert_int_equal(sb->dropped, 1);
        assert_int_equal(atomic_load(&sb->fb_broken), 1ull << ab->fbox);
        tl_shm_ops.wait(b.iface, 1000); /* the broken box keeps no one awake */
        side_close(&c, cb);
        side_close(&a, ab); /* its goodbye frees the broken box */
        for (int i = 0; i < 10; i++)
            tl_shm_ops.progress(b.iface);
        assert_int_equal(atomic_load(&sb->seg->fbox_used), 0);
        assert_int_equal(atomic_load(&sb->fb_broken), 0);
        side_close(&b, NULL);
    }
    /* an entry that would run past the end of the box */
    {
        side_t a, b;
        shm_ep_t *ab;
        side_open(&a, UUID_A);
        side_open(&b, UUID_B);
        ab = connect_to(&a, &b);
        while (ab->fbox == SHM_FBOX_NONE || (ab->fb_write & (SHM_FBOX_SIZE - 1)) < SHM_FBOX_SIZE - 64) {
            send_packet(ab, &b, b.next, 8 + (size_t)b.next % 50);
            tl_shm_ops.progress(b.iface);
        }
        atomic_store(shm_fbox_word(shm_fbox_data(ab->seg, ab->fbox), ab->fb_write),
                     SHM_FBOX_VALID | SHM_FBOX_POS(ab->fb_write) | 200);
        for (int i = 0; i < 10; i++)
            tl_shm_ops.progress(b.iface);
        assert_int_equal(((shm_iface_t *)b.iface)->dropped, 1);
        assert_int_equal(b.out_of_order, 0);
        side_close(&a, ab);
        side_close(&b, NULL);
    }
}

/* A receiver asleep in wait is woken by a packet put into a box. */
static void *send_later(void *arg)
{
    usleep(100000);
    assert_int_equal(send_counter(arg, 0), TMX_OK);
    return NULL;
}

static void fbox_wakes_sleeper(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    pthread_t t;
    uint64_t t0;

    (void)state;
    test_fbox = 1;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    /* laps of the box first, each packet counted by progress */
    for (uint64_t v = 0; v < 3 * SHM_FBOX_SIZE / 16; v++) {
        assert_int_equal(send_counter(ab, v), TMX_OK);
        assert_int_equal(tl_shm_ops.progress(b.iface), 1);
    }
    assert_true(ab->fb_write > 2 * SHM_FBOX_SIZE);
    for (int k = 0; k < 3; k++) {
        b.next = 0;
        t0 = now_us();
        assert_int_equal(pthread_create(&t, NULL, send_later, ab), 0);
        tl_shm_ops.wait(b.iface, 10000000);
        assert_true(now_us() - t0 < 5000000);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_int_equal(tl_shm_ops.progress(b.iface), 1);
    }
    assert_int_equal(ab->ring_last, SHM_NO_CLAIM); /* all came through the box */
    assert_int_equal(b.packets, 3 * SHM_FBOX_SIZE / 16 + 3);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* A sleep beside other transports (tl.h: wait_arm): the wake socket
 * becomes readable when a packet comes, through a cell or a box, and an
 * arm that finds one there already says so instead of sleeping. */
static void armed_sleep_woken(void **state)
{
    for (int box = 0; box < 2; box++) {
        side_t a, b;
        shm_ep_t *ab;
        pthread_t t;
        struct pollfd pfd;
        int64_t cap = 0;

        (void)state;
        test_fbox = box;
        side_open(&a, UUID_A);
        side_open(&b, UUID_B);
        ab = connect_to(&a, &b);
        for (int k = 0; k < 3; k++) {
            b.next = 0;
            assert_int_equal(tl_shm_ops.wait_arm(b.iface, &pfd, &cap), TL_WAIT_ARMED);
            assert_true(cap < 0);
            assert_int_equal(pthread_create(&t, NULL, send_later, ab), 0);
            /* nothing else wakes it: without the sender's datagram this
             * sleeps the whole 10 s */
            assert_int_equal(poll(&pfd, 1, 10000), 1);
            assert_true(pfd.revents & POLLIN);
            tl_shm_ops.wait_done(b.iface, &pfd);
            assert_int_equal(pthread_join(t, NULL), 0);
            assert_int_equal(tl_shm_ops.progress(b.iface), 1);
        }
        b.next = 0;
        assert_int_equal(send_counter(ab, 0), TMX_OK);
        assert_int_equal(tl_shm_ops.wait_arm(b.iface, &pfd, &cap), TL_WAIT_READY);
        tl_shm_ops.wait_done(b.iface, &pfd);
        assert_int_equal(tl_shm_ops.progress(b.iface), 1);
        /* every sleeper counted itself out */
        assert_int_equal(atomic_load(&((shm_iface_t *)b.iface)->seg->fd_sleeping), 0);
        assert_int_equal(atomic_load(&((shm_iface_t *)b.iface)->seg->sleeping), 0);
        assert_int_equal(b.packets, 4);
        side_close(&a, ab);
        side_close(&b, NULL);
    }
}

/* The same context added twice (two endpoints): what one put into its
 * box is not overtaken by the other's packets, and neither boxes again. */
static void fbox_two_endpoints_one_order(void **state)
{
    side_t a, b;
    shm_ep_t *e1, *e2;
    uint64_t v = 0;
    tmx_status_t st;

    (void)state;
    test_fbox = 1;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    e1 = connect_to(&a, &b);
    for (; v < 20; v++)
        assert_int_equal(send_counter(e1, v), TMX_OK); /* into e1's box, not taken yet */
    e2 = connect_to(&a, &b);
    assert_int_equal(send_counter(e2, v), TMX_ERR_AGAIN); /* e1's box first */
    tl_shm_ops.progress(b.iface);
    for (int i = 0; i < 200; i++) {
        shm_ep_t *e = i % 3 == 0 ? e1 : e2;
        while ((st = send_counter(e, v)) == TMX_ERR_AGAIN)
            tl_shm_ops.progress(b.iface);
        assert_int_equal(st, TMX_OK);
        v++;
    }
    drain(&b, v, 10);
    assert_int_equal(b.packets, v);
    assert_int_equal(b.out_of_order, 0);
    assert_int_not_equal(e1->ring_last, SHM_NO_CLAIM); /* boxes no more */
    tl_shm_ops.ep_destroy(&e2->super);
    side_close(&a, e1);
    side_close(&b, NULL);
}

/* The box of a sender killed without a goodbye is freed once what it
 * published is taken, and another sender gets it. */
static void fbox_dead_sender_freed(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    shm_iface_t *sb;
    unsigned char addr[256];
    size_t len = sizeof(addr);
    pid_t child;
    int status;

    (void)state;
    test_fbox = 1;
    side_open(&b, UUID_B);
    sb = (shm_iface_t *)b.iface;
    assert_int_equal(tl_shm_ops.address(b.iface, addr, &len), TMX_OK);
    for (int round = 0; round < SHM_N_FBOX + 2; round++) {
        child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            side_t c;
            tl_ep_t *cb;
            side_open(&c, UUID_C);
            if (tl_shm_ops.ep_create(c.iface, addr, len, 1, UUID_B, &cb) != TMX_OK ||
                send_counter((shm_ep_t *)cb, (uint64_t)round) != TMX_OK || ((shm_ep_t *)cb)->fbox == SHM_FBOX_NONE)
                _exit(1);
            raise(SIGKILL);
            _exit(2);
        }
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        drain(&b, (size_t)round + 1, 10);
        tl_shm_ops.check_peers(b.iface);
        assert_int_equal(atomic_load(&sb->seg->fbox_used), 0);
    }
    assert_int_equal(b.packets, SHM_N_FBOX + 2);
    assert_int_equal(b.out_of_order, 0);
    side_open(&a, UUID_A);
    ab = connect_to(&a, &b);
    assert_int_equal(send_counter(ab, b.next), TMX_OK);
    assert_int_not_equal(ab->fbox, SHM_FBOX_NONE);
    drain(&b, SHM_N_FBOX + 3, 10);
    assert_int_equal(b.packets, SHM_N_FBOX + 3);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* More senders than boxes: the ones without a box use the ring, and
 * every sender's packets arrive in order. */
#define MANY (SHM_N_FBOX + 3)

static void fbox_all_taken(void **state)
{
    static side_t tx[MANY];
    shm_ep_t *ep[MANY];
    side_t b;
    int boxed = 0;

    (void)state;
    test_fbox = 1;
    side_open(&b, UUID_B);
    b.iface->recv_cb = on_recv_two; /* counts packets; the order is checked below by content */
    two_rx = &b;
    for (int k = 0; k < MANY; k++) {
        side_open(&tx[k], UUID_C + 1 + (uint64_t)k);
        ep[k] = connect_to(&tx[k], &b);
    }
    for (uint64_t v = 0; v < 50; v++)
        for (int k = 0; k < MANY; k++)
            send_packet(ep[k], &b, v, 16);
    for (int k = 0; k < MANY; k++)
        boxed += ep[k]->fbox != SHM_FBOX_NONE;
    assert_int_equal(boxed, SHM_N_FBOX);
    drain(&b, 50 * MANY, 10);
    assert_int_equal(b.packets, 50 * MANY);
    for (int k = 0; k < MANY; k++)
        side_close(&tx[k], ep[k]);
    side_close(&b, NULL);
}

/* The ring's words as a hostile or broken peer may leave them, then stop
 * writing: the tail moved back over cells already taken, the tail moved
 * on past a cell no sender claimed, the sequence of the receiver's next
 * cell made to look like an older lap's or a later lap's. A send does not
 * hang on them, the receiver gets past them, and the packets sent after
 * arrive, in order. */
static void hostile_ring_words(void **state)
{
    (void)state;
    for (int k = 0; k < 4; k++) {
        side_t a, b;
        shm_ep_t *ab;
        shm_seg_hdr_t *seg;
        uint64_t head;
        side_open(&a, UUID_A);
        side_open(&b, UUID_B);
        ab = connect_to(&a, &b);
        seg = ab->seg;
        assert_int_equal(send_counter(ab, 0), TMX_OK);
        assert_int_equal(send_counter(ab, 1), TMX_OK);
        if (k != 0)
            drain(&b, 2, 10);
        head = atomic_load(&seg->tail);
        switch (k) {
        case 0: atomic_store(&seg->tail, head - 2); break;    /* back over two published cells */
        case 1: atomic_store(&seg->tail, head + 1); break;    /* on past a cell nobody claimed */
        case 2: atomic_store(&shm_cell(seg, head)->seq, shm_seq(head - 1)); break; /* an older lap's */
        default: atomic_store(&shm_cell(seg, head)->seq, shm_seq(head + 3)); break; /* a later lap's */
        }
        alarm(20); /* a send that spins is a failure, not a hang */
        for (uint64_t v = 2; v < 2 + 3 * SHM_N_CELLS; v++) {
            uint64_t end = now_us() + 5000000;
            tmx_status_t st;
            while ((st = send_counter(ab, v)) == TMX_ERR_AGAIN && now_us() < end) {
                tl_shm_ops.progress(b.iface);
                tl_shm_ops.check_peers(b.iface);
            }
            assert_int_equal(st, TMX_OK);
        }
        drain(&b, 2 + 3 * SHM_N_CELLS, 10);
        alarm(0);
        assert_int_equal(b.packets, 2 + 3 * SHM_N_CELLS);
        assert_int_equal(b.out_of_order, 0);
        side_close(&a, ab);
        side_close(&b, NULL);
    }
}

/* Senders that die holding their slots (killed, or closed without a
 * goodbye) leave them to the receiver, which frees them once nothing of
 * theirs is left: more senders than there are slots come and go over
 * time, and a new one still finds a slot. */
#define SLOTS_PER_CHILD 100

static void dead_senders_slots_freed(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    unsigned char addr[256];
    size_t len = sizeof(addr);
    pid_t child;
    int status;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    assert_int_equal(tl_shm_ops.address(b.iface, addr, &len), TMX_OK);
    for (int round = 0; round * SLOTS_PER_CHILD < 2 * SHM_N_SENDERS; round++) {
        child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            tl_ep_t *cb;
            for (int k = 0; k < SLOTS_PER_CHILD; k++) {
                if (tl_shm_ops.ep_create(a.iface, addr, len, 1, UUID_B, &cb) != TMX_OK)
                    _exit(1);
            }
            if (send_counter((shm_ep_t *)cb, (uint64_t)round) != TMX_OK)
                _exit(1);
            raise(SIGKILL);
            _exit(2);
        }
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        drain(&b, (size_t)round + 1, 10);
        for (int i = 0; i < 100; i++)
            tl_shm_ops.check_peers(b.iface);
    }
    assert_int_equal(b.out_of_order, 0);
    ab = connect_to(&a, &b);
    assert_int_equal(send_counter(ab, b.next), TMX_OK);
    drain(&b, b.next + 1, 10);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(((shm_iface_t *)b.iface)->dropped, 0);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* Any local process can open a segment through /proc and try to cut it
 * short, which would kill its owner and its senders with SIGBUS at their
 * next touch of a cell; the segment is sealed at its size, and a peer
 * named by a file of another size (or one that can shrink) is not
 * reached. */
static void segment_size_sealed(void **state)
{
    side_t a, b;
    shm_ep_t *ab;
    char path[64];
    unsigned char addr[256];
    size_t len = sizeof(addr);
    shm_addr_t sa;
    tl_ep_t *ep;
    int fd, small;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", ((shm_iface_t *)b.iface)->fd);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    (void)!ftruncate(fd, 0);
    (void)!ftruncate(fd, SHM_SEG_SIZE * 2);
    close(fd);
    assert_int_equal(send_counter(ab, 0), TMX_OK);
    drain(&b, 1, 10);
    assert_int_equal(b.packets, 1);
    /* an address naming a file too short for a segment */
    small = memfd_create("small", MFD_CLOEXEC);
    assert_true(small >= 0);
    assert_int_equal(ftruncate(small, 4096), 0);
    assert_int_equal(tl_shm_ops.address(b.iface, addr, &len), TMX_OK);
    assert_int_equal(len, sizeof(sa));
    memcpy(&sa, addr, sizeof(sa));
    sa.fd = (int32_t)htole32((uint32_t)small);
    memcpy(addr, &sa, sizeof(sa));
    assert_int_equal(tl_shm_ops.ep_create(a.iface, addr, len, 2, UUID_B, &ep), TMX_ERR_UNREACHABLE);
    close(small);
    side_close(&a, ab);
    side_close(&b, NULL);
}

/* ------------------------------------------------------- shared copies */

/* What a shared copy's owner lends in lend_case: 100 bytes under key 42,
 * with more of its memory right after them. */
static unsigned char lent[3 * SHM_JOB_CHUNK];

static tmx_status_t on_lend_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    (void)arg;
    return addr == (uintptr_t)lent && len <= 100 && rkey == 42 ? TMX_OK : TMX_ERR_NOT_FOUND;
}

/* A helper asked for a shared copy writes the chunks of the length that
 * was lent and checked, and no more: a requester whose job word claims
 * chunks past the end (or keeps claiming) gets nothing else of the
 * helper's memory, and the helper's progress returns. */
static void hostile_help_bounded(void **state)
{
    static unsigned char sink[3 * SHM_JOB_CHUNK];
    side_t a, b;
    shm_ep_t *ab, *ba;
    shm_help_req_t h = {htole32(3), 0, htole64(1), htole64((uintptr_t)lent), htole64(42), htole64(100),
                        htole64((uintptr_t)sink)};
    uint64_t idx = SHM_JOB_IDX_BITS;

    (void)state;
    memset(lent, 0x5a, sizeof(lent));
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    a.iface->mem_check = on_lend_check;
    ab = connect_to(&a, &b);
    ba = connect_to(&b, &a);
    /* b's job word (in b's segment) offers chunks 0 to 2 of a job of 100 bytes */
    atomic_store(&ab->seg->jobs[3].claim, 1ull << (2 * idx) | 0ull << idx | 3);
    publish_raw(ba, SHM_KIND_HELP, &h, sizeof(h));
    for (int i = 0; i < 10; i++)
        tl_shm_ops.progress(a.iface);
    for (size_t i = 100; i < sizeof(sink); i++)
        assert_int_equal(sink[i], 0);
    /* the same job word as an honest reader leaves it: the 100 bytes */
    atomic_store(&ab->seg->jobs[3].claim, 2ull << (2 * idx) | 0ull << idx | 1);
    h.gen = htole64(2);
    publish_raw(ba, SHM_KIND_HELP, &h, sizeof(h));
    for (int i = 0; i < 10; i++)
        tl_shm_ops.progress(a.iface);
    assert_int_equal(memcmp(sink, lent, 100), 0);
    for (size_t i = 100; i < sizeof(sink); i++)
        assert_int_equal(sink[i], 0);
    assert_int_equal(atomic_load(&ab->seg->jobs[3].done), 1);
    assert_int_equal(b.failures, 0);
    side_close(&a, ab);
    side_close(&b, ba);
}

/* Receive offers' claim words: the receiver opens one; one take wins,
 * the sender's through its endpoint or the receiver's own; a closed word,
 * or a token of another generation, is taken by no one; every word open
 * at once, the next open waits; a hostile token names no word. */
static void offer_words(void **state)
{
    side_t a, b;
    shm_ep_t *ba;
    uint64_t t[SHM_N_OFFERS], u, extra;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ba = connect_to(&b, &a); /* b sends to a: a offers */
    assert_int_equal(tl_shm_ops.offer_open(a.iface, &t[0]), TMX_OK);
    assert_true(tl_shm_ops.offer_take(&ba->super, t[0]));
    assert_false(tl_shm_ops.offer_take_own(a.iface, t[0]));
    assert_false(tl_shm_ops.offer_take(&ba->super, t[0]));
    tl_shm_ops.offer_close(a.iface, t[0]);
    assert_int_equal(tl_shm_ops.offer_open(a.iface, &u), TMX_OK);
    assert_true(tl_shm_ops.offer_take_own(a.iface, u));
    assert_false(tl_shm_ops.offer_take(&ba->super, u));
    tl_shm_ops.offer_close(a.iface, u);
    assert_false(tl_shm_ops.offer_take(&ba->super, u)); /* closed */
    for (int i = 0; i < SHM_N_OFFERS; i++)
        assert_int_equal(tl_shm_ops.offer_open(a.iface, &t[i]), TMX_OK);
    assert_int_equal(tl_shm_ops.offer_open(a.iface, &extra), TMX_ERR_AGAIN);
    for (int i = 0; i < SHM_N_OFFERS; i++) /* no word twice, and each its own */
        for (int j = 0; j < i; j++)
            assert_true((t[i] & 0xff) != (t[j] & 0xff));
    tl_shm_ops.offer_close(a.iface, t[5]);
    assert_false(tl_shm_ops.offer_take(&ba->super, t[5]));
    assert_int_equal(tl_shm_ops.offer_open(a.iface, &u), TMX_OK);
    assert_true(u != t[5]);
    assert_false(tl_shm_ops.offer_take(&ba->super, t[5])); /* the old generation */
    assert_true(tl_shm_ops.offer_take(&ba->super, u));
    assert_false(tl_shm_ops.offer_take(&ba->super, UINT64_MAX)); /* no such word */
    assert_false(tl_shm_ops.offer_take(&ba->super, 200));
    side_close(&b, ba);
    side_close(&a, NULL);
}

/* The offload engine's thread (rare_thread) does not help a shared copy:
 * its application is away, computing, and the reader copies it all. The
 * application's thread helps. */
static void engine_thread_leaves_help(void **state)
{
    static unsigned char sink[SHM_JOB_CHUNK];
    side_t a, b;
    shm_ep_t *ab, *ba;
    shm_help_req_t h = {htole32(3), 0, htole64(1), htole64((uintptr_t)lent), htole64(42), htole64(100),
                        htole64((uintptr_t)sink)};
    uint64_t idx = SHM_JOB_IDX_BITS, offer = 1ull << (2 * idx) | 0ull << idx | 1;

    (void)state;
    memset(lent, 0x5a, sizeof(lent));
    memset(sink, 0, sizeof(sink));
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    a.iface->mem_check = on_lend_check;
    ab = connect_to(&a, &b);
    ba = connect_to(&b, &a);
    /* an honest reader's job word: its one chunk offered */
    atomic_store(&ab->seg->jobs[3].claim, offer);
    atomic_store(&a.iface->rare_thread, (uintptr_t)pthread_self());
    publish_raw(ba, SHM_KIND_HELP, &h, sizeof(h));
    for (int i = 0; i < 10; i++)
        tl_shm_ops.progress(a.iface);
    for (size_t i = 0; i < sizeof(sink); i++)
        assert_int_equal(sink[i], 0);
    assert_int_equal(atomic_load(&ab->seg->jobs[3].done), 0);
    assert_int_equal(atomic_load(&ab->seg->jobs[3].claim), offer);
    /* the same request on the application's thread: the chunk written */
    atomic_store(&a.iface->rare_thread, 0);
    publish_raw(ba, SHM_KIND_HELP, &h, sizeof(h));
    for (int i = 0; i < 10; i++)
        tl_shm_ops.progress(a.iface);
    assert_int_equal(memcmp(sink, lent, 100), 0);
    assert_int_equal(atomic_load(&ab->seg->jobs[3].done), 1);
    assert_int_equal(b.failures, 0);
    side_close(&a, ab);
    side_close(&b, ba);
}

/* A reader's job word rewritten while it reads (a chunk past the end
 * offered): the reader copies nothing outside its buffer. */
#define READ_CHUNKS 1024
static unsigned char read_src[(READ_CHUNKS + 1) * SHM_JOB_CHUNK], read_dst[(READ_CHUNKS + 1) * SHM_JOB_CHUNK];
static _Atomic uint64_t *read_claim;

static void *rewrite_claim(void *arg)
{
    uint64_t idx = SHM_JOB_IDX_BITS, mask = (1ull << idx) - 1;

    (void)arg;
    for (uint64_t end = now_us() + 5000000; now_us() < end;) {
        uint64_t v = atomic_load(read_claim);
        if (v >> (2 * idx) == 1 && (v & mask) < READ_CHUNKS && (v & mask) > (v >> idx & mask)) {
            atomic_compare_exchange_strong(read_claim, &v, (v & ~mask) | (READ_CHUNKS + 1));
            break;
        }
    }
    return NULL;
}

static void get_done(tl_get_op_t *op, tmx_status_t st)
{
    (void)op;
    (void)st;
}

static void hostile_job_word_read(void **state)
{
    size_t len = (size_t)READ_CHUNKS * SHM_JOB_CHUNK - 100;
    tl_get_op_t op = {get_done};
    side_t a, b;
    shm_ep_t *ab;
    pthread_t t;

    (void)state;
    memset(read_src, 0x5a, sizeof(read_src));
    memset(read_dst, 0, sizeof(read_dst));
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b);
    read_claim = &((shm_iface_t *)a.iface)->seg->jobs[0].claim;
    assert_int_equal(pthread_create(&t, NULL, rewrite_claim, NULL), 0);
    usleep(10000);
    tl_shm_ops.get(&ab->super, read_dst, len, (uintptr_t)read_src, 1, TL_GET_SHARED, &op);
    assert_int_equal(pthread_join(t, NULL), 0);
    for (size_t i = len; i < sizeof(read_dst); i++)
        assert_int_equal(read_dst[i], 0);
    side_close(&a, ab);
    side_close(&b, NULL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(full_ring_keeps_order),
        cmocka_unit_test(offer_words),
        cmocka_unit_test(hostile_cells_dropped),
        cmocka_unit_test(unlent_request_refused),
        cmocka_unit_test(dead_claimer_skipped),
        cmocka_unit_test(bad_sizes_refused),
        cmocka_unit_test(spans_in_order),
        cmocka_unit_test(spans_in_pieces),
        cmocka_unit_test(hostile_spans_dropped),
        cmocka_unit_test(dead_span_claimer_skipped),
        cmocka_unit_test(dead_span_sender_unfinished),
        cmocka_unit_test(fbox_order_mixed),
        cmocka_unit_test(fbox_two_senders),
        cmocka_unit_test(fbox_goodbye_frees),
        cmocka_unit_test(fbox_hostile_headers),
        cmocka_unit_test(fbox_wakes_sleeper),
        cmocka_unit_test(armed_sleep_woken),
        cmocka_unit_test(fbox_all_taken),
        cmocka_unit_test(fbox_two_endpoints_one_order),
        cmocka_unit_test(fbox_dead_sender_freed),
        cmocka_unit_test(hostile_help_bounded),
        cmocka_unit_test(hostile_job_word_read),
        cmocka_unit_test(engine_thread_leaves_help),
        cmocka_unit_test(dead_senders_slots_freed),
        cmocka_unit_test(hostile_ring_words),
        cmocka_unit_test(segment_size_sealed),
    };
    return UNIT_MAIN(argc, argv, tests);
}
