/*
 * The udp transport on its own, two interfaces of one process over
 * 127.0.0.1: where datagrams leave from and where replies go (a peer's
 * own connected socket, the header's reply port), and when UDP GRO is on.
 * The fault tests (tests/fault) cover loss, reordering and peers across
 * hosts; this covers what they cannot see from outside.
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit.h"
#include "unit_tl.h"

#include "tl/udp/udp.h"
#include "util/crc32c.h"

#define JOB_KEY 0x5eed
#define UUID_A 0xa11ceULL
#define UUID_B 0xb0bULL

typedef struct side {
    udp_iface_t *ui;
    size_t packets;              /* delivered to the layer above */
    size_t bytes;
    int failures;                /* peers reported failed */
    int clean;                   /* of which said they closed */
    const unsigned char *lent;   /* memory others may read (mem_check) */
    size_t lent_len;
    unsigned refused;            /* mem_check answers other than TMX_OK */
    uint64_t pub_uuid;           /* a process the layer above has an address */
    uint64_t pub_from, pub_to;   /* and the processes in [pub_from, pub_to) */
    udp_addr_t pub;              /* for (peer_addr), when pub_uuid != 0 */
} side_t;

static tmx_status_t on_peer_addr(void *arg, const tl_iface_t *iface, uint64_t uuid, const void **addr,
                                 size_t *len)
{
    side_t *s = arg;

    (void)iface;
    if ((s->pub_uuid == 0 || uuid != s->pub_uuid) && (uuid < s->pub_from || uuid >= s->pub_to))
        return TMX_ERR_NOT_FOUND;
    *addr = &s->pub;
    *len = sizeof(s->pub);
    return TMX_OK;
}

static void on_recv(void *arg, uint64_t src, const void *data, size_t len)
{
    side_t *s = arg;

    (void)src;
    (void)data;
    s->packets++;
    s->bytes += len;
}

static void on_fail(void *arg, uint64_t uuid, int clean)
{
    (void)uuid;
    ((side_t *)arg)->failures++;
    ((side_t *)arg)->clean += clean;
}

#define LENT_KEY 0x1e47
#define LENT_KEY2 0x2e47 /* the same memory, lent to a second read (a key serves one read at a time) */

static tmx_status_t on_mem_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    side_t *s = arg;
    uint64_t base = (uintptr_t)s->lent;

    if (s->lent == NULL || (rkey != LENT_KEY && rkey != LENT_KEY2)) {
        s->refused++;
        return TMX_ERR_NOT_FOUND;
    }
    if (addr < base || len > s->lent_len || addr - base > s->lent_len - len) {
        s->refused++;
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

typedef struct read_op {
    tl_get_op_t super;
    int done;
    tmx_status_t status;
} read_op_t;

static void read_done(tl_get_op_t *op, tmx_status_t status)
{
    read_op_t *r = (read_op_t *)op;

    r->done = 1;
    r->status = status;
}

static int read_finished(void *arg)
{
    return ((read_op_t *)arg)->done;
}

/* The transport's settings as a context would hand them down: the
 * environment's (set by main and by some cases), over the defaults. */
static void side_open(side_t *s, uint64_t uuid)
{
    tl_settings_t set;
    tl_iface_params_t p = {uuid, JOB_KEY, on_recv, on_fail, on_mem_check, s, NULL, 0, &set, s, NULL, NULL, NULL, 0,
                           on_peer_addr, 0, NULL};
    tl_iface_t *iface;

    assert_int_equal(unit_tl_settings(&set), TMX_OK);
    memset(s, 0, sizeof(*s));
    assert_int_equal(tl_udp_ops.iface_open(&p, &iface), TMX_OK);
    s->ui = (udp_iface_t *)iface;
}

static void side_close(side_t *s)
{
    assert_int_equal(s->failures, 0);
    tl_udp_ops.iface_close(&s->ui->super);
}

static void pair_open(side_t *a, side_t *b)
{
    side_open(a, UUID_A);
    side_open(b, UUID_B);
}

static void pair_close(side_t *a, side_t *b)
{
    side_close(a);
    side_close(b);
}

/* a's endpoint for b, made the way the core makes it: from b's address. */
static udp_ep_t *connect_to(side_t *a, side_t *b, uint64_t b_uuid)
{
    unsigned char addr[64];
    size_t len = sizeof(addr);
    tl_ep_t *ep;

    assert_int_equal(tl_udp_ops.address(&b->ui->super, addr, &len), TMX_OK);
    assert_int_equal(tl_udp_ops.ep_create(&a->ui->super, addr, len, 1, b_uuid, &ep), TMX_OK);
    return (udp_ep_t *)ep;
}

static void send_bytes(udp_ep_t *ep, size_t len)
{
    unsigned char *buf = calloc(1, len + 1);
    struct iovec iov = {buf, len};

    assert_non_null(buf);
    assert_int_equal(tl_udp_ops.send(&ep->super, &iov, 1), TMX_OK);
    free(buf);
}

/* Polls both sides until done(arg) or 2 s pass; returns done's verdict. */
static int poll_until(side_t *a, side_t *b, int (*done)(void *), void *arg)
{
    uint64_t end = udp_now_us() + 2000000;

    while (!done(arg) && udp_now_us() < end) {
        tl_udp_ops.progress(&a->ui->super);
        tl_udp_ops.progress(&b->ui->super);
    }
    return done(arg);
}

typedef struct want {
    side_t *side;
    size_t packets;
    udp_ep_t *ep;                /* for all_acked */
} want_t;

static int got_packets(void *arg)
{
    want_t *w = arg;

    return w->side->packets >= w->packets;
}

static int all_acked(void *arg)
{
    want_t *w = arg;
    udp_tx_t *tx = w->ep->has_flow ? &w->ep->flow->tx[UDP_CH_DATA] : NULL;

    return tx == NULL || tx->una == tx->next_seq;
}

/* Both endpoints of the pair are idle: their flows are gone. */
typedef struct idle_pair {
    udp_ep_t *ab, *ba;
} idle_pair_t;

static int flows_gone(void *arg)
{
    idle_pair_t *ip = arg;

    return !ip->ab->has_flow && !ip->ba->has_flow;
}

/* The sender's datagrams leave from its endpoint's own socket, so the
 * receiver, which has no endpoint for it yet, must send its ACKs to the
 * port the header names: without it every ACK would go to the connected
 * socket, which nobody reads, and the sender would never see one. */
static void test_acks_reach_a_connected_sender(void **state)
{
    side_t a, b;
    udp_ep_t *ab, *ba;
    want_t w;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    assert_true(udp_ep_fd(a.ui, ab) >= 0);
    for (int i = 0; i < 3; i++)
        send_bytes(ab, 100);
    w = (want_t){&b, 3, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    ba = udp_ep_find(b.ui, UUID_A);
    assert_non_null(ba);
    assert_false(ba->connected); /* made by the datagrams, not by a connect */
    assert_int_equal(udp_ep_conn(b.ui, ba)->sa.sin_port, a.ui->sock.self_sa.sin_port);
    assert_true(poll_until(&a, &b, all_acked, &w));
    assert_int_equal(b.ui->stats.dropped, 0);
    pair_close(&a, &b);
}

/* Both directions, each side with a socket of its own for the other. */
static void test_both_connected(void **state)
{
    side_t a, b;
    udp_ep_t *ab, *ba;
    want_t w;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    ba = connect_to(&b, &a, UUID_A);
    assert_true(udp_ep_fd(a.ui, ab) >= 0 && udp_ep_fd(b.ui, ba) >= 0);
    assert_int_equal(a.ui->sock.n_conn, 1);
    for (int i = 0; i < 10; i++) {
        send_bytes(ab, 8);
        w = (want_t){&b, (size_t)i + 1, ab};
        assert_true(poll_until(&a, &b, got_packets, &w));
        send_bytes(ba, 8);
        w = (want_t){&a, (size_t)i + 1, ba};
        assert_true(poll_until(&a, &b, got_packets, &w));
    }
    w = (want_t){&a, 0, ab};
    assert_true(poll_until(&a, &b, all_acked, &w));
    w.ep = ba;
    assert_true(poll_until(&a, &b, all_acked, &w));
    pair_close(&a, &b);
}

/* TMX_UDP_CONNECT_MAX bounds the sockets; beyond it the shared one sends. */
static void test_connect_max(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    want_t w;

    (void)state;
    setenv("TMX_UDP_CONNECT_MAX", "0", 1);
    side_open(&a, UUID_A);
    unsetenv("TMX_UDP_CONNECT_MAX");
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b, UUID_B);
    assert_int_equal(udp_ep_fd(a.ui, ab), -1);
    assert_int_equal(a.ui->sock.n_conn, 0);
    send_bytes(ab, 64);
    w = (want_t){&b, 1, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_true(poll_until(&a, &b, all_acked, &w));
    pair_close(&a, &b);
}

/* h into the head of buf (len bytes, the payload after it), with the
 * checksum over the whole datagram. */
static void dgram_seal(unsigned char *buf, size_t len, udp_hdr_t *h)
{
    h->csum = 0;
    memcpy(buf, h, sizeof(*h));
    h->csum = htole32(util_crc32c(0, buf, len));
    memcpy(buf, h, sizeof(*h));
}

/* A header that names port 0 names no place for replies: dropped. */
static void test_reply_port_zero_dropped(void **state)
{
    side_t b;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), 0,
                   htole64(JOB_KEY), htole64(UUID_A), htole64(UUID_B), 0, {0, 0}, 0, htole64(8), 0, 0, 0, 0, 0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9)};

    (void)state;
    side_open(&b, UUID_B);
    dgram_seal(buf, sizeof(buf), &h);
    b.ui->rx_now_us = udp_now_us();
    udp_dgram_input(b.ui, buf, sizeof(buf), &from);
    assert_int_equal(b.ui->stats.dropped, 1);
    assert_int_equal(b.packets, 0);
    assert_null(udp_ep_find(b.ui, UUID_A));
    /* the same datagram with a port is taken */
    h.port = htons(9);
    dgram_seal(buf, sizeof(buf), &h);
    udp_dgram_input(b.ui, buf, sizeof(buf), &from);
    assert_int_equal(b.ui->stats.dropped, 1);
    assert_int_equal(b.packets, 1);
    side_close(&b);
}

/* A datagram naming a process as its sender must come from that
 * process's host: the one the layer above published for it, or, for a
 * process it has no address for, the one its first datagram came from.
 * Anything else is dropped, made nothing and delivered nothing. */
static void test_forged_sender_dropped(void **state)
{
    side_t b;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    struct sockaddr_in home = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    struct sockaddr_in far = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000002)}};
    udp_ep_t *ep;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    /* UUID_A is published at 127.0.0.1, port 7, index 3 */
    b.pub_uuid = UUID_A;
    b.pub = (udp_addr_t){home.sin_addr.s_addr, htons(7), htons(3), htole64(JOB_KEY)};
    for (uint32_t seq = 0; seq < 2; seq++) {
        udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), htons(9),
                       htole64(JOB_KEY), htole64(UUID_A), htole64(UUID_B), htole32(seq), {0, 0}, 0, htole64(8),
                       0, 0, 0, 0, 0};
        dgram_seal(buf, sizeof(buf), &h);
        udp_dgram_input(b.ui, buf, sizeof(buf), &far); /* forged: from another host */
        assert_int_equal(b.ui->stats.forged, seq + 1);
        assert_int_equal(b.packets, seq);
        dgram_seal(buf, sizeof(buf), &h); /* the input zeroes the checksum */
        udp_dgram_input(b.ui, buf, sizeof(buf), &home);
        assert_int_equal(b.packets, seq + 1);
        ep = udp_ep_find(b.ui, UUID_A);
        assert_non_null(ep);
        assert_int_equal(udp_ep_conn(b.ui, ep)->sa.sin_addr.s_addr, home.sin_addr.s_addr);
        assert_int_equal(udp_ep_conn(b.ui, ep)->sa.sin_port, htons(7)); /* the published port, not the datagram's */
        assert_int_equal(ep->index, 3);
    }
    /* a notice that nobody holds UUID_A's index, from another host than
     * UUID_A's node: forged too, and the peer is not counted refused */
    {
        unsigned char nb[sizeof(udp_hdr_t)];
        udp_hdr_t n = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(UDP_FLAG_ACK_ONLY | UDP_FLAG_NOBODY), 0, htons(9),
                       htole64(JOB_KEY), htole64(UUID_A), htole64(UUID_B), 0, {0, 0}, 0, 0, 0, 0, 0, 0, 0};
        dgram_seal(nb, sizeof(nb), &n);
        udp_dgram_input(b.ui, nb, sizeof(nb), &far);
        assert_int_equal(b.ui->stats.forged, 3);
        assert_int_equal(udp_ep_refusals(udp_ep_find(b.ui, UUID_A)), 0);
    }
    /* a process without a published address is held to its first host */
    {
        udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), htons(9),
                       htole64(JOB_KEY), htole64(0xc0ffee), htole64(UUID_B), 0, {0, 0}, 0, htole64(8),
                       0, 0, 0, 0, 0};
        dgram_seal(buf, sizeof(buf), &h);
        udp_dgram_input(b.ui, buf, sizeof(buf), &far);
        assert_int_equal(b.packets, 3);
        h.seq = htole32(1);
        dgram_seal(buf, sizeof(buf), &h);
        udp_dgram_input(b.ui, buf, sizeof(buf), &home);
        assert_int_equal(b.packets, 3);
        assert_int_equal(b.ui->stats.forged, 4);
    }
    side_close(&b);
}

/* Datagrams naming a process the layer above has no address for yet are
 * taken from the host the first of them came from; if the address it is
 * then given names another host, they were someone else's (a process
 * writes from the host it publishes), and the sequence numbers they took
 * are forgotten: the process's first packets were taken for old
 * duplicates of the forger's, acknowledged and never delivered. */
static void test_forged_before_added_forgotten(void **state)
{
    const uint64_t x = 0xc0ffee;
    side_t b;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    struct sockaddr_in home = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    struct sockaddr_in far = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000002)}};
    udp_addr_t a = {home.sin_addr.s_addr, htons(9), 0, htole64(JOB_KEY)};
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), htons(9),
                   htole64(JOB_KEY), htole64(x), htole64(UUID_B), 0, {0, 0}, 0, htole64(8), 0, 0, 0, 0, 0};
    tl_ep_t *ep;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    for (uint32_t seq = 0; seq < 3; seq++) { /* from far, before x is added */
        h.seq = htole32(seq);
        dgram_seal(buf, sizeof(buf), &h);
        udp_dgram_input(b.ui, buf, sizeof(buf), &far);
    }
    assert_int_equal(b.packets, 3);
    udp_ack_flush(b.ui, UINT64_MAX); /* that exchange is over */
    assert_int_equal(tl_udp_ops.ep_create(&b.ui->super, &a, sizeof(a), 1, x, &ep), TMX_OK);
    assert_int_equal(udp_ep_conn(b.ui, (udp_ep_t *)ep)->sa.sin_addr.s_addr, home.sin_addr.s_addr);
    assert_int_equal(udp_ep_expected((udp_ep_t *)ep, UDP_CH_DATA), 0);
    h.seq = 0;
    dgram_seal(buf, sizeof(buf), &h);
    udp_dgram_input(b.ui, buf, sizeof(buf), &home); /* x's first, from its host */
    assert_int_equal(b.packets, 4);
    h.seq = htole32(3);
    dgram_seal(buf, sizeof(buf), &h);
    udp_dgram_input(b.ui, buf, sizeof(buf), &far); /* the forger's, now */
    assert_int_equal(b.packets, 4);
    side_close(&b);
}

/* A datagram naming a process as sender that this interface has no
 * endpoint for yet must not keep the process out once it is added: a bye
 * (from anyone: it names nothing we exchanged) makes no endpoint, and an
 * endpoint that datagrams from another host than the one the address
 * then names made (failed by a bye, or holding a segment kept early, its
 * sequence numbers moved on) is forgotten, not reused. */
static void test_forged_before_added_no_harm(void **state)
{
    static const uint64_t xs[3] = {0xc0ffee, 0xc0ffef, 0xc0fff0};
    side_t b;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    unsigned char bbuf[sizeof(udp_hdr_t)];
    struct sockaddr_in home = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    struct sockaddr_in far = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000002)}};
    udp_addr_t a = {home.sin_addr.s_addr, htons(9), 0, htole64(JOB_KEY)};
    tl_ep_t *ep;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    for (int k = 0; k < 3; k++) {
        udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8),
                       htons(9), htole64(JOB_KEY), htole64(xs[k]), htole64(UUID_B), 0, {0, 0}, 0, htole64(8),
                       0, 0, 0, 0, 0};
        udp_hdr_t bye = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(UDP_FLAG_ACK_ONLY | UDP_FLAG_BYE), 0, htons(9),
                         htole64(JOB_KEY), htole64(xs[k]), htole64(UUID_B), 0, {0, 0}, 0, 0, 0, 0, 0, 0, 0};
        size_t before = b.packets;
        if (k == 1) { /* a packet from far first, then its bye: an endpoint at far, failed */
            dgram_seal(buf, sizeof(buf), &h);
            udp_dgram_input(b.ui, buf, sizeof(buf), &far);
            bye.frag_id = htole32(1);
            before++;
        }
        if (k == 2) { /* packets 0 and 2 from far: 2 is kept early, the flow stays */
            for (uint32_t seq = 0; seq < 3; seq += 2) {
                h.seq = htole32(seq);
                dgram_seal(buf, sizeof(buf), &h);
                udp_dgram_input(b.ui, buf, sizeof(buf), &far);
            }
            udp_ack_flush(b.ui, UINT64_MAX);
            before++;
        } else {
            dgram_seal(bbuf, sizeof(bbuf), &bye);
            udp_dgram_input(b.ui, bbuf, sizeof(bbuf), &far);
        }
        assert_int_equal(b.packets, before);
        b.failures = 0; /* a stranger's end is no peer's: the layer above ignores it */
        assert_int_equal(tl_udp_ops.ep_create(&b.ui->super, &a, sizeof(a), 1, xs[k], &ep), TMX_OK);
        assert_false(((udp_ep_t *)ep)->failed);
        assert_int_equal(udp_ep_expected((udp_ep_t *)ep, UDP_CH_DATA), 0);
        for (uint32_t seq = 0; seq < 2; seq++) { /* x's own packets, from its host */
            h.seq = htole32(seq);
            dgram_seal(buf, sizeof(buf), &h);
            udp_dgram_input(b.ui, buf, sizeof(buf), &home);
        }
        assert_int_equal(b.packets, before + 2);
    }
    assert_int_equal(b.ui->reasm_bytes, 0);
    udp_ack_flush(b.ui, UINT64_MAX);
    side_close(&b);
}

/* Written data that no receive took (a key nobody lent) is dropped and
 * starts no wait for the writer's end: such a wait reports a stall every
 * few hundred microseconds until the writer's WDONE, which a process that
 * wrote into nothing never sends. */
static void test_refused_write_no_wait(void **state)
{
    side_t b;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_PUT_DATA), htole16(8), htons(9),
                   htole64(JOB_KEY), htole64(UUID_A), htole64(UUID_B), 0, {0, 0}, htole32(0x1234),
                   htole64(0x10000), 0, htole32(0x5678), 0, 0, 0};

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    dgram_seal(buf, sizeof(buf), &h);
    udp_dgram_input(b.ui, buf, sizeof(buf), &from);
    assert_non_null(udp_ep_find(b.ui, UUID_A));
    assert_false(udp_ep_find(b.ui, UUID_A)->put_rx);
    assert_int_equal(b.ui->n_put_rx, 0);
    side_close(&b);
}

/* One segment of a packet of several, from src at 127.0.0.1. */
static void seg_in(side_t *s, uint64_t src, uint32_t seq, uint16_t flags, uint64_t offset, size_t n)
{
    unsigned char buf[sizeof(udp_hdr_t) + 64] = {0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(flags), htole16((uint16_t)n), htons(9),
                   htole64(JOB_KEY), htole64(src), htole64(UUID_B), htole32(seq), {0, 0}, 0, htole64(offset),
                   0, 0, 0, 0, 0};

    dgram_seal(buf, sizeof(udp_hdr_t) + n, &h);
    udp_dgram_input(s->ui, buf, sizeof(udp_hdr_t) + n, &from);
}

/* Packets strangers start and never end hold at most UDP_REASM_MAX_BYTES
 * in all: past it a stranger's next waits (its first segment is not
 * taken, and comes again), a peer the core made an endpoint to is not
 * held up, and what a stranger that fails held is given back. */
static void test_reasm_strangers_bounded(void **state)
{
    side_t b;
    udp_addr_t a = {htonl(0x7f000001), htons(9), 0, htole64(JOB_KEY)};
    tl_ep_t *ep;
    uint32_t n = (64u << 20) / UDP_MAX_PACKET;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    for (uint32_t i = 0; i < n; i++)
        seg_in(&b, 0x5000 + i, 0, UDP_FLAG_FIRST, UDP_MAX_PACKET, 8); /* never ended */
    assert_int_equal(b.ui->reasm_bytes, (uint64_t)n * UDP_MAX_PACKET);
    seg_in(&b, 0x7000, 0, UDP_FLAG_FIRST, 16, 8); /* one stranger more: waits */
    seg_in(&b, 0x7000, 1, UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 0);
    assert_int_equal(tl_udp_ops.ep_create(&b.ui->super, &a, sizeof(a), 1, UUID_A, &ep), TMX_OK);
    seg_in(&b, UUID_A, 0, UDP_FLAG_FIRST, 16, 8); /* a peer: taken */
    seg_in(&b, UUID_A, 1, UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 1);
    for (uint32_t i = 0; i < n; i++)
        udp_ep_gone(b.ui, udp_ep_find(b.ui, 0x5000 + i)); /* they said bye: gone as a failure is */
    assert_int_equal(b.ui->reasm_bytes, 0);
    seg_in(&b, 0x7000, 0, UDP_FLAG_FIRST, 16, 8); /* sent again: now taken */
    seg_in(&b, 0x7000, 1, UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 2);
    b.failures = 0;
    side_close(&b);
}

/* The bound on strangers' unfinished packets holds for a first segment
 * that came early too: its room is asked when it is put together, not
 * only when it was kept, since others may have taken the room meanwhile.
 * One that finds none is given up (its sender resends it, as it resends
 * any segment not acknowledged), and taken once room comes back. */
static void test_reasm_strangers_bounded_early(void **state)
{
    side_t b;
    uint32_t n = 2 * ((64u << 20) / UDP_MAX_PACKET);

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    for (uint32_t i = 0; i < n; i++) /* each kept early: no packet was started yet */
        seg_in(&b, 0x5000 + i, 1, UDP_FLAG_FIRST, UDP_MAX_PACKET, 8);
    for (uint32_t i = 0; i < n; i++)
        seg_in(&b, 0x5000 + i, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, n);
    assert_true(b.ui->reasm_bytes <= (64u << 20));
    assert_int_equal(b.ui->reasm_bytes, (uint64_t)(n / 2) * UDP_MAX_PACKET);
    /* the first half holds the room; the second half's first segments
     * were given up and are taken when sent again, once there is room */
    for (uint32_t i = 0; i < n / 2; i++)
        udp_ep_gone(b.ui, udp_ep_find(b.ui, 0x5000 + i));
    assert_int_equal(b.ui->reasm_bytes, 0);
    seg_in(&b, 0x5000 + n - 1, 1, UDP_FLAG_FIRST, 16, 8);
    seg_in(&b, 0x5000 + n - 1, 2, UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, n + 1);
    b.failures = 0;
    side_close(&b);
}

static int admit_none(void *arg, uint64_t src, const void *data, size_t len)
{
    (void)arg;
    (void)src;
    (void)data;
    (void)len;
    return 0;
}

/* At the bound of unexpected memory (rx_full), a packet the layer above
 * will not take is not delivered, whether its first segment comes in
 * order or came early and waits behind a gap: packets kept early were
 * delivered when the gap filled, without asking, up to a window of them
 * past the bound. The one left is taken when it is sent again once the
 * bound is left, and the ones kept behind it with it. */
static void test_unexpected_bound_holds_for_early_packets(void **state)
{
    side_t b;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->super.admit_cb = admit_none;
    b.ui->rx_now_us = udp_now_us();
    seg_in(&b, UUID_A, 0, UDP_FLAG_FIRST, 16, 8); /* a packet begun below the bound */
    for (uint32_t seq = 2; seq < 6; seq++)
        seg_in(&b, UUID_A, seq, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8); /* early: seq 1 is late */
    assert_int_equal(b.packets, 0);
    b.ui->super.rx_full = 1;
    seg_in(&b, UUID_A, 1, UDP_FLAG_LAST, 8, 8); /* ends the packet begun: taken */
    assert_int_equal(b.packets, 1);
    assert_true(udp_ep_find(b.ui, UUID_A)->rx_left);
    b.ui->super.rx_full = 0;
    tl_udp_ops.progress(&b.ui->super); /* asks UUID_A to send again */
    seg_in(&b, UUID_A, 2, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 5);
    assert_int_equal(udp_ep_expected(udp_ep_find(b.ui, UUID_A), UDP_CH_DATA), 6);
    side_close(&b);
}

/* While a peer's data is left at the bound, what it sends behind is not
 * kept, but its number is noted, so that the peer can be asked for all of
 * it once the bound is left. A number no sender could have sent (past the
 * window) is not noted: it held the peer in that asking for ever, with no
 * early segment of it kept again and its flow never freed. */
static void test_left_data_notes_only_the_window(void **state)
{
    side_t b;
    udp_ep_t *ep;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->super.admit_cb = admit_none;
    b.ui->rx_now_us = udp_now_us();
    b.ui->super.rx_full = 1;
    seg_in(&b, UUID_A, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8); /* left */
    ep = udp_ep_find(b.ui, UUID_A);
    assert_true(ep->rx_left);
    seg_in(&b, UUID_A, 1u << 30, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8); /* no sender's */
    b.ui->super.rx_full = 0;
    tl_udp_ops.progress(&b.ui->super); /* asks for what was left */
    seg_in(&b, UUID_A, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 1);
    seg_in(&b, UUID_A, 2, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8); /* early again: kept */
    assert_int_equal(ep->flow->rx[UDP_CH_DATA].n_ooo, 1);
    seg_in(&b, UUID_A, 1, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 3);
    udp_ack_flush(b.ui, UINT64_MAX);
    assert_false(ep->has_flow); /* the exchange is over */
    side_close(&b);
}

/* An ACK of b's, carrying a SACK of n bits from base when n != 0, or a
 * stall report naming last when stall is set, into a as from b. */
static void ack_in(side_t *a, side_t *b, uint32_t ack, uint32_t base, uint32_t n, int stall, uint32_t last)
{
    unsigned char buf[sizeof(udp_hdr_t) + sizeof(udp_sack_t)] = {0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    uint16_t flags = UDP_FLAG_ACK_ONLY | (n != 0 ? UDP_FLAG_SACK : 0) | (stall ? UDP_FLAG_STALL : 0);
    size_t len = n != 0 ? offsetof(udp_sack_t, bits) + (n + 7) / 8 : 0;
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(flags), htole16((uint16_t)len),
                   b->ui->sock.self_sa.sin_port, htole64(JOB_KEY), htole64(UUID_B), htole64(UUID_A),
                   htole32(last), {htole32(udp_ep_expected(udp_ep_find(a->ui, UUID_B), UDP_CH_PRIO)),
                   htole32(ack)}, 0, 0, 0, 0, 0, 0, 0};
    udp_sack_t *s = (udp_sack_t *)(buf + sizeof(h));

    s->base = htole32(base);
    s->nbits = htole32(n);
    for (uint32_t i = 0; i < n; i++)
        s->bits[i / 8] |= (uint8_t)(1u << (i % 8));
    dgram_seal(buf, sizeof(h) + len, &h);
    a->ui->rx_now_us = udp_now_us();
    udp_dgram_input(a->ui, buf, sizeof(h) + len, &from);
}

/* A receiver may give up a segment it kept early and reported held (no
 * room to start its packet, or its layer above at the bound of
 * unexpected memory: see the cases above); its stall report then names
 * later segments while its ACK stops below that one, and the sender
 * resends it at once, not after a timeout. */
static void test_stall_resends_what_was_given_up(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    udp_tx_t *tx;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    for (int k = 0; k < 6; k++)
        send_bytes(ab, 64); /* b never reads them */
    tx = &ab->flow->tx[UDP_CH_DATA];
    assert_int_equal(tx->next_seq - tx->una, 6);
    ack_in(&a, &b, 1, 1, 4, 0, 0); /* b took 0 and holds 2 to 5 */
    ack_in(&a, &b, 2, 0, 0, 0, 0); /* took 1, gave 2 up */
    assert_int_equal(tx->una, 2);
    assert_false(tx->win[udp_tx_slot(tx, 2)]->resent);
    ab->flow->stall_handled_us = 0;
    ack_in(&a, &b, 2, 0, 0, 1, 5); /* b waits: its last arrival was 5 */
    assert_true(tx->win[udp_tx_slot(tx, 2)]->resent);
    pair_close(&a, &b);
}

/* Early segments hold at most UDP_OOO_MAX_BYTES of memory in all,
 * counted as what they take, not as the payload they carry: a segment of
 * one byte takes a segment buffer of a datagram's size, and the array
 * that holds a peer's early segments grows with the furthest one. Tiny
 * segments ahead of a gap that never fills, from a few made-up
 * identities, once held a thousand times the bound. */
static void test_early_segments_bounded(void **state)
{
    side_t b;
    uint64_t kept = 0, held, src;
    uint32_t win, tries;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    win = b.ui->cfg.window;
    tries = (uint32_t)(UDP_OOO_MAX_BYTES / (sizeof(udp_seg_t) + b.ui->seg_cap)) + 2 * win;
    for (src = 0x5000; tries > 0; src++) {
        for (uint32_t seq = 1; seq < win && tries > 0; seq++, tries--)
            seg_in(&b, src, seq, 0, 0, 1); /* seq 0 never comes */
    }
    for (uint64_t u = 0x5000; u < src; u++) {
        udp_ep_t *ep = udp_ep_find(b.ui, u);
        assert_non_null(ep);
        kept += ep->has_flow ? ep->flow->rx[UDP_CH_DATA].n_ooo : 0;
    }
    held = kept * (sizeof(udp_seg_t) + b.ui->seg_cap);
    assert_true(held <= UDP_OOO_MAX_BYTES);
    assert_true(b.ui->ooo_bytes <= UDP_OOO_MAX_BYTES);
    assert_true(b.ui->ooo_bytes >= held);
    assert_int_equal(b.packets, 0);
    side_close(&b);
}

/* Identities made up by whoever writes to our port fill the table of
 * peers (UDP_MAX_EPS) and cannot keep a new process out: a stranger is
 * forgotten in its place, never a peer the core made an endpoint to or
 * was given the address of, and what the stranger held goes with it. */
static void test_strangers_make_room(void **state)
{
    side_t b;
    udp_addr_t a = {htonl(0x7f000001), htons(9), 0, htole64(JOB_KEY)};
    tl_ep_t *ep;
    const uint64_t known = 0x4b4e4f57ULL; /* given to the layer above */

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    b.pub_uuid = known;
    b.pub = (udp_addr_t){htonl(0x7f000001), htons(9), 0, htole64(JOB_KEY)};
    assert_int_equal(tl_udp_ops.ep_create(&b.ui->super, &a, sizeof(a), 1, UUID_A, &ep), TMX_OK);
    seg_in(&b, known, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    seg_in(&b, 0x5000, 0, UDP_FLAG_FIRST, 16, 8); /* a stranger's unfinished packet */
    seg_in(&b, 0x5001, 1, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8); /* and one that came early */
    assert_int_equal(b.packets, 1);
    assert_int_not_equal(b.ui->ooo_bytes, 0);
    for (uint64_t i = 2; b.ui->n_eps < UDP_MAX_EPS; i++)
        seg_in(&b, 0x5000 + i, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 1 + (UDP_MAX_EPS - 4));
    assert_int_not_equal(b.ui->reasm_bytes, 0);
    /* 3 UDP_MAX_EPS newcomers: each takes a stranger's place */
    for (uint64_t i = 0; i < 3 * (uint64_t)UDP_MAX_EPS; i++)
        seg_in(&b, 0x100000000ULL + i, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 1 + (UDP_MAX_EPS - 4) + 3 * (uint64_t)UDP_MAX_EPS);
    assert_int_equal(b.ui->n_eps, UDP_MAX_EPS);
    assert_int_equal(b.ui->evicted, 3 * (uint64_t)UDP_MAX_EPS);
    assert_null(udp_ep_find(b.ui, 0x5000));
    assert_int_equal(b.ui->reasm_bytes, 0); /* the unfinished packet went with its stranger */
    assert_int_equal(b.ui->ooo_bytes, 0);   /* and the early segment with its own */
    assert_non_null(udp_ep_find(b.ui, UUID_A));
    assert_non_null(udp_ep_find(b.ui, known));
    seg_in(&b, UUID_A, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    seg_in(&b, known, 1, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 3 + (UDP_MAX_EPS - 4) + 3 * (uint64_t)UDP_MAX_EPS);
    assert_int_equal(b.failures, 0);
    side_close(&b);
}

/* When every endpoint is of a process the layer above knows (implicit
 * peers made up by HELLOs, say), a stranger finds no room, but a process
 * the layer above was given the address of still does. */
static void test_known_peer_past_the_bound(void **state)
{
    side_t b;
    const uint64_t base = 0x900000000ULL, late = 0x4b4e4f57ULL;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    b.pub = (udp_addr_t){htonl(0x7f000001), htons(9), 0, htole64(JOB_KEY)};
    b.pub_from = base;
    b.pub_to = base + UDP_MAX_EPS;
    for (uint64_t i = 0; i < UDP_MAX_EPS; i++)
        seg_in(&b, base + i, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.ui->n_eps, UDP_MAX_EPS);
    seg_in(&b, 0x5000, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8); /* a stranger: no room */
    assert_int_equal(b.packets, UDP_MAX_EPS);
    assert_null(udp_ep_find(b.ui, 0x5000));
    assert_int_equal(b.ui->no_room, 1);
    b.pub_uuid = late; /* added now */
    seg_in(&b, late, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, UDP_MAX_EPS + 1);
    assert_int_equal(b.ui->n_eps, UDP_MAX_EPS + 1);
    assert_int_equal(b.ui->evicted, 0);
    side_close(&b);
}

/* A bye that names fewer segments than have come from its sender cannot
 * be the sender's (it counts what it sent): ignored, the peer kept. */
static void test_bye_below_arrivals_ignored(void **state)
{
    side_t b;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), htons(9),
                   htole64(JOB_KEY), htole64(UUID_A), htole64(UUID_B), 0, {0, 0}, 0, htole64(8), 0, 0, 0, 0, 0};
    udp_hdr_t bye = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(UDP_FLAG_ACK_ONLY | UDP_FLAG_BYE), 0, htons(9),
                     htole64(JOB_KEY), htole64(UUID_A), htole64(UUID_B), 0, {0, 0}, 0, 0, 0, 0, 0, 0, 0};
    unsigned char bbuf[sizeof(udp_hdr_t)];

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    dgram_seal(buf, sizeof(buf), &h);
    udp_dgram_input(b.ui, buf, sizeof(buf), &from);
    assert_int_equal(b.packets, 1);
    dgram_seal(bbuf, sizeof(bbuf), &bye); /* data channel: next 0, but 1 came */
    udp_dgram_input(b.ui, bbuf, sizeof(bbuf), &from);
    assert_int_equal(b.failures, 0);
    assert_false(udp_ep_find(b.ui, UUID_A)->failed);
    bye.frag_id = htole32(1); /* the true count: it closed */
    dgram_seal(bbuf, sizeof(bbuf), &bye);
    udp_dgram_input(b.ui, bbuf, sizeof(bbuf), &from);
    assert_int_equal(b.failures, 1);
    assert_int_equal(b.clean, 1);
    b.failures = 0;
    side_close(&b);
}

/* Flags that contradict each other are dropped, whatever else is right:
 * an ACK with a segment's flags or an unexplained payload, a SACK, BYE or
 * NOBODY on a segment, a segment both read data and written data, read
 * data marked as a packet's first segment. */
static void test_contradictory_flags_dropped(void **state)
{
    static const uint16_t bad[] = {
        UDP_FLAG_ACK_ONLY | UDP_FLAG_FIRST | UDP_FLAG_LAST,
        UDP_FLAG_ACK_ONLY | UDP_FLAG_GET_DATA,
        UDP_FLAG_ACK_ONLY, /* with a payload, no SACK */
        UDP_FLAG_FIRST | UDP_FLAG_LAST | UDP_FLAG_SACK,
        UDP_FLAG_FIRST | UDP_FLAG_LAST | UDP_FLAG_BYE,
        UDP_FLAG_FIRST | UDP_FLAG_LAST | UDP_FLAG_NOBODY,
        UDP_FLAG_GET_DATA | UDP_FLAG_PUT_DATA,
        UDP_FLAG_GET_REQ | UDP_FLAG_GET_DATA | UDP_FLAG_FIRST,
        UDP_FLAG_GET_DATA | UDP_FLAG_FIRST,
        UDP_FLAG_PUT_DATA | UDP_FLAG_LAST,
    };
    side_t b;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9)};

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(bad[i]), htole16(8), htons(9), htole64(JOB_KEY),
                       htole64(UUID_A), htole64(UUID_B), 0, {0, 0}, 0, htole64(8), 0, 0, 0, 0, 0};
        dgram_seal(buf, sizeof(buf), &h);
        udp_dgram_input(b.ui, buf, sizeof(buf), &from);
        assert_int_equal(b.ui->stats.dropped, i + 1);
    }
    assert_int_equal(b.packets, 0);
    assert_null(udp_ep_find(b.ui, UUID_A));
    /* a NOBODY notice with more than its own flags, and a packet of one
     * segment whose length is not its payload's, are counted drops too */
    {
        unsigned char nb[sizeof(udp_hdr_t)];
        udp_hdr_t n = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(UDP_FLAG_ACK_ONLY | UDP_FLAG_NOBODY | UDP_FLAG_STALL),
                       0, htons(9), htole64(JOB_KEY), htole64(UUID_A), htole64(UUID_B), 0, {0, 0}, 0, 0, 0, 0,
                       0, 0, 0};
        uint64_t before = b.ui->stats.dropped;
        dgram_seal(nb, sizeof(nb), &n);
        udp_dgram_input(b.ui, nb, sizeof(nb), &from);
        assert_int_equal(b.ui->stats.dropped, before + 1);
        seg_in(&b, UUID_A, 0, UDP_FLAG_FIRST | UDP_FLAG_LAST, 16, 8);
        assert_int_equal(b.ui->stats.dropped, before + 2);
        assert_int_equal(b.packets, 0);
        udp_ack_flush(b.ui, UINT64_MAX);
    }
    side_close(&b);
}

/* A packet of several segments has more bytes than its first segment
 * carries, and every later segment carries some: a first segment that
 * holds the whole packet (or nothing of an empty one) and empty later
 * segments are no sender's, dropped, and nothing reaches the layer above
 * (an empty packet least of all). */
static void test_malformed_pieces_dropped(void **state)
{
    side_t b;
    udp_ep_t *ep;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    seg_in(&b, UUID_A, 0, UDP_FLAG_FIRST, 0, 0);       /* a packet of 0 bytes in several segments */
    seg_in(&b, UUID_A, 1, UDP_FLAG_LAST, 0, 0);
    seg_in(&b, UUID_A, 2, UDP_FLAG_FIRST, 8, 8);       /* all of it in the first, then more */
    seg_in(&b, UUID_A, 3, UDP_FLAG_LAST, 8, 0);
    seg_in(&b, UUID_A, 4, UDP_FLAG_FIRST, 16, 8);      /* an empty segment in the middle */
    seg_in(&b, UUID_A, 5, 0, 8, 0);
    seg_in(&b, UUID_A, 6, UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 0);
    assert_true(b.ui->stats.dropped >= 3);
    ep = udp_ep_find(b.ui, UUID_A);
    assert_non_null(ep);
    assert_true(!ep->has_flow || (ep->flow->rx[UDP_CH_DATA].reasm == NULL));
    assert_int_equal(b.ui->reasm_bytes, 0);
    seg_in(&b, UUID_A, 7, UDP_FLAG_FIRST, 16, 8);      /* a true one still comes through */
    seg_in(&b, UUID_A, 8, UDP_FLAG_LAST, 8, 8);
    assert_int_equal(b.packets, 1);
    assert_int_equal(b.bytes, 16);
    udp_ack_flush(b.ui, UINT64_MAX);
    side_close(&b);
}

/* GRO is off while messages come one at a time, on once data comes in
 * bulk, and off again UDP_GRO_IDLE_US after the last bulk read. */
static void test_gro_follows_bulk(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    want_t w;

    (void)state;
    pair_open(&a, &b);
    if (!b.ui->sock.gro_ok) {
        print_message("skipped: TMX_UDP_OFFLOAD is 0 here\n");
        pair_close(&a, &b);
        return;
    }
    ab = connect_to(&a, &b, UUID_B);
    for (int i = 0; i < 5; i++) {
        send_bytes(ab, 8);
        w = (want_t){&b, (size_t)i + 1, ab};
        assert_true(poll_until(&a, &b, got_packets, &w));
    }
    assert_false(b.ui->sock.gro_on);
    send_bytes(ab, 60000); /* many segments, sent with GSO where there is one */
    w = (want_t){&b, 6, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    if (!b.ui->sock.gro_ok) {
        print_message("skipped: the kernel refused UDP GRO\n");
    } else {
        assert_true(b.ui->sock.gro_on);
        b.ui->sock.gro_used_us -= 2 * 100000; /* as if the bulk read were long ago */
        tl_udp_ops.progress(&b.ui->super);
        tl_udp_ops.progress(&b.ui->super);
        assert_false(b.ui->sock.gro_on);
    }
    assert_int_equal(b.bytes, 5 * 8 + 60000);
    pair_close(&a, &b);
}

/* A packet may end in an empty piece with no buffer (an empty message:
 * the core sends its header and {NULL, 0}); the one-segment path, taken
 * from the second send on, must not touch it. */
static void test_empty_pieces(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    unsigned char hdr[16] = {1, 2, 3};
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {NULL, 0}};
    want_t w;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tl_udp_ops.send(&ab->super, iov, 2), TMX_OK);
    w = (want_t){&b, 3, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_int_equal(b.bytes, 3 * sizeof(hdr));
    pair_close(&a, &b);
}

/* A burst the kernel joined while GRO was on stays joined in the socket;
 * read after GRO went off it comes without the kernel's note of the
 * datagram size, and must still be cut, not dropped as one bad datagram. */
static void test_burst_read_after_gro_off(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    want_t w;
    uint64_t end;

    (void)state;
    pair_open(&a, &b);
    udp_gro_set(b.ui, 1);
    if (!b.ui->sock.gro_on || !a.ui->sock.gso) {
        print_message("skipped: no UDP GSO and GRO here\n");
        pair_close(&a, &b);
        return;
    }
    ab = connect_to(&a, &b, UUID_B);
    send_bytes(ab, 60000);
    end = udp_now_us() + 20000; /* let the kernel queue it, unread */
    while (udp_now_us() < end)
        ;
    udp_gro_set(b.ui, 0);
    w = (want_t){&b, 1, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_int_equal(b.bytes, 60000);
    assert_int_equal(b.ui->stats.dropped, 0);
    assert_int_equal(a.ui->stats.retransmits, 0);
    pair_close(&a, &b);
}

/* A segment sent again is the one sent first: its payload is where it
 * was, whatever the pooled buffer held before (a one-segment send takes
 * it from the pool itself). */
static void test_resend_is_the_same(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    udp_seg_t *seg;
    unsigned char *dirty;
    want_t w;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    send_bytes(ab, 8); /* the first send of a peer takes the general path */
    w = (want_t){&b, 1, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_true(poll_until(&a, &b, all_acked, &w));
    dirty = util_pool_get(&a.ui->segs); /* the next one-segment send gets it */
    memset(dirty, 0xbe, sizeof(udp_seg_t) + sizeof(udp_hdr_t) + 8);
    util_pool_put(&a.ui->segs, dirty);
    send_bytes(ab, 8);
    assert_non_null(udp_ep_flow(ab)); /* the segment is in flight */
    seg = ab->flow->tx[UDP_CH_DATA].win[udp_tx_slot(&ab->flow->tx[UDP_CH_DATA], ab->flow->tx[UDP_CH_DATA].una)];
    assert_ptr_equal(seg, dirty);
    udp_seg_retransmit(a.ui, ab, seg);
    assert_null(seg->ext);
    assert_int_equal(seg->len, sizeof(udp_hdr_t) + 8);
    assert_int_equal(le16toh(((udp_hdr_t *)seg->buf)->len), 8);
    w = (want_t){&b, 2, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_int_equal(b.bytes, 16);
    pair_close(&a, &b);
}

/* A pair whose side a lends len bytes of a pattern (*src), and a zeroed
 * buffer of as many for b to read them into (*dst). */
static void lent_pair_open(side_t *a, side_t *b, size_t len, unsigned char **src, unsigned char **dst)
{
    *src = malloc(len);
    *dst = calloc(1, len);
    assert_non_null(*src);
    assert_non_null(*dst);
    for (size_t i = 0; i < len; i++)
        (*src)[i] = (unsigned char)(i * 7 + 3);
    pair_open(a, b);
    a->lent = *src;
    a->lent_len = len;
}

/* A read is streamed from the owner's memory as it is, byte for byte. */
static void test_read_from_lent_memory(void **state)
{
    side_t a, b;
    udp_ep_t *ba;
    size_t len = 300000;
    unsigned char *src, *dst;
    read_op_t op = {{read_done}, 0, TMX_OK};

    (void)state;
    lent_pair_open(&a, &b, len, &src, &dst);
    ba = connect_to(&b, &a, UUID_A);
    assert_int_equal(tl_udp_ops.get(&ba->super, dst, len, (uintptr_t)src, LENT_KEY, TL_GET_COPY, &op.super), TMX_INPROGRESS);
    assert_true(poll_until(&a, &b, read_finished, &op));
    assert_int_equal(op.status, TMX_OK);
    assert_memory_equal(dst, src, len);
    pair_close(&a, &b);
    free(src);
    free(dst);
}

/* Connects a and b, has b hear data from a (so that b can name stalls
 * to it), starts b's read of len bytes of a's src into dst under
 * LENT_KEY, and waits for its first chunk; b's endpoint to a. */
static udp_ep_t *read_first_chunk(side_t *a, side_t *b, unsigned char *src, unsigned char *dst,
                                  size_t len, read_op_t *op)
{
    udp_ep_t *ab = connect_to(a, b, UUID_B), *ba = connect_to(b, a, UUID_A);
    want_t w = {b, 1, ab};
    uint64_t end;

    send_bytes(ab, 8);
    assert_true(poll_until(a, b, got_packets, &w));
    assert_int_equal(tl_udp_ops.get(&ba->super, dst, len, (uintptr_t)src, LENT_KEY, TL_GET_COPY,
                                    &op->super),
                     TMX_INPROGRESS);
    end = udp_now_us() + 2000000;
    while (dst[0] == 0 && udp_now_us() < end) {
        tl_udp_ops.progress(&a->ui->super);
        tl_udp_ops.progress(&b->ui->super);
    }
    assert_int_not_equal(dst[0], 0);
    return ba;
}

/* An owner that stops answering in the middle of a read (busy: it does
 * not call tmx for a while) is reported the stall at once, then at
 * intervals that grow with its silence, not every UDP_STALL_US for as
 * long as it is silent: a reader waiting on a busy owner for a second
 * sent it 5000 datagrams, which filled its socket buffer. */
static void test_read_stall_reports_back_off(void **state)
{
    side_t a, b;
    size_t len = 8u << 20;
    unsigned char *src, *dst;
    read_op_t op = {{read_done}, 0, TMX_OK};
    uint64_t t0, s0, stalls;

    (void)state;
    lent_pair_open(&a, &b, len, &src, &dst);
    (void)read_first_chunk(&a, &b, src, dst, len, &op);
    s0 = b.ui->stats.stalls_sent;
    t0 = udp_now_us();
    while (udp_now_us() - t0 < 500000) /* a is busy for half a second */
        tl_udp_ops.progress(&b.ui->super);
    stalls = b.ui->stats.stalls_sent - s0;
    assert_false(op.done);
    assert_true(stalls >= 1);
    assert_true(stalls <= 100);
    assert_true(poll_until(&a, &b, read_finished, &op)); /* a is back: the read ends whole */
    assert_int_equal(op.status, TMX_OK);
    assert_memory_equal(dst, src, len);
    pair_close(&a, &b);
    free(src);
    free(dst);
}

/* Reads whose owner goes silent are reported stalled to it at most once
 * per UDP_STALL_US, however often the reader polls and however many
 * reads wait on it, also when the reader's flow was freed meanwhile
 * (nothing in flight or owed between two chunks). Then the owner wakes
 * and the reads end whole. */
static void test_read_stall_reports_paced(void **state)
{
    side_t a, b;
    udp_ep_t *ba;
    size_t len = 8u << 20;
    unsigned char *src, *dst, *dst2 = calloc(1, 65536);
    read_op_t op = {{read_done}, 0, TMX_OK}, op2 = {{read_done}, 0, TMX_OK};
    uint64_t t0, s0, polls = 0, stalls;

    (void)state;
    lent_pair_open(&a, &b, len, &src, &dst);
    ba = read_first_chunk(&a, &b, src, dst, len, &op);
    assert_non_null(dst2); /* a second read, which waits as well */
    assert_int_equal(tl_udp_ops.get(&ba->super, dst2, 65536, (uintptr_t)src, LENT_KEY2, TL_GET_COPY, &op2.super), TMX_INPROGRESS);
    s0 = b.ui->stats.stalls_sent;
    t0 = udp_now_us();
    while (udp_now_us() - t0 < 20000) { /* a is silent for 20 ms */
        tl_udp_ops.progress(&b.ui->super);
        polls++;
    }
    stalls = b.ui->stats.stalls_sent - s0;
    assert_false(op.done);
    assert_false(op2.done);
    assert_true(stalls <= 20000 / UDP_STALL_US + 2);
    assert_true(polls > stalls);
    assert_true(poll_until(&a, &b, read_finished, &op));
    assert_true(poll_until(&a, &b, read_finished, &op2));
    assert_int_equal(op.status, TMX_OK);
    assert_int_equal(op2.status, TMX_OK);
    assert_memory_equal(dst, src, len);
    assert_memory_equal(dst2, src, 65536);
    free(dst2);
    pair_close(&a, &b);
    free(src);
    free(dst);
}

/* Segments of a read wait to be sent again when the owner takes its
 * memory back (its send failed by another path): what goes out then is
 * the refusal, never the memory, and the reader's read ends with it. The
 * core is asked once, not once per segment, and the rest of the read is
 * not cut into more refusals. */
static void test_read_ends_when_memory_is_taken_back(void **state)
{
    side_t a, b;
    udp_ep_t *ab, *ba;
    size_t len = 4 << 20;
    unsigned char *src = malloc(len), *dst = calloc(1, len);
    read_op_t op = {{read_done}, 0, TMX_OK};
    udp_tx_t *tx;
    uint64_t end;
    uint32_t waiting;
    want_t w;

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    memset(src, 0x42, len);
    setenv("TMX_UDP_WINDOW", "256", 1); /* the read is longer than the window */
    pair_open(&a, &b);
    unsetenv("TMX_UDP_WINDOW");
    a.lent = src;
    a.lent_len = len;
    ba = connect_to(&b, &a, UUID_A);
    ab = connect_to(&a, &b, UUID_B);
    a.ui->faults.drop = 1.0; /* everything the owner sends is lost */
    assert_int_equal(tl_udp_ops.get(&ba->super, dst, len, (uintptr_t)src, LENT_KEY, TL_GET_COPY, &op.super), TMX_INPROGRESS);
    end = udp_now_us() + 2000000;
    while ((!ab->has_flow || ab->flow->tx[UDP_CH_DATA].next_seq - ab->flow->tx[UDP_CH_DATA].una < 2) &&
           udp_now_us() < end) {
        tl_udp_ops.progress(&b.ui->super);
        tl_udp_ops.progress(&a.ui->super);
    }
    assert_non_null(udp_ep_flow(ab));
    tx = &ab->flow->tx[UDP_CH_DATA];
    assert_true(tx->next_seq - tx->una >= 2); /* the read's segments wait */
    waiting = tx->next_seq - tx->una;
    a.lent = NULL;                            /* the memory is the application's again */
    memset(src, 0x66, len);
    a.ui->faults.drop = 0;
    for (uint32_t s = tx->una; s != tx->next_seq; s++)
        udp_seg_retransmit(a.ui, ab, tx->win[udp_tx_slot(tx, s)]);
    assert_true(poll_until(&a, &b, read_finished, &op));
    assert_int_equal(op.status, TMX_ERR_NOT_FOUND);
    for (size_t i = 0; i < len; i++)
        assert_int_not_equal(dst[i], 0x66);
    w = (want_t){&b, 0, ab};
    assert_true(poll_until(&a, &b, all_acked, &w)); /* the serve ended: nothing more to send */
    assert_true(util_dlist_empty(&a.ui->emu.serves));
    assert_true(a.refused <= 2); /* the first resend, and the next chunk */
    /* the reader drops the refusals after the first: those that waited,
     * and at most one for the rest of the read (not one per segment) */
    assert_true(b.ui->stats.dropped <= waiting);
    assert_true(waiting <= 256);
    pair_close(&a, &b);
    free(src);
    free(dst);
}

/* A peer declared failed gives its socket back for the next one. */
static void test_failed_peer_gives_socket_back(void **state)
{
    side_t a, b;
    udp_ep_t *ab;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    assert_int_equal(a.ui->sock.n_conn, 1);
    udp_ep_fail(a.ui, ab, "the test says so");
    assert_int_equal(a.failures, 1);
    assert_int_equal(udp_ep_fd(a.ui, ab), -1);
    assert_int_equal(a.ui->sock.n_conn, 0);
    a.failures = 0;
    pair_close(&a, &b);
}

/* A peer that failed sends nothing more and is sent nothing more: what
 * its exchange held goes at once, the segments it sent early (which
 * count against UDP_OOO_MAX_BYTES, shared by every peer) and ours in
 * flight to it, not when the interface closes. */
static void test_failed_peer_holds_nothing(void **state)
{
    side_t b;
    udp_addr_t a = {htonl(0x7f000001), htons(9), 0, htole64(JOB_KEY)};
    tl_ep_t *tep;
    udp_ep_t *ep;

    (void)state;
    side_open(&b, UUID_B);
    b.ui->rx_now_us = udp_now_us();
    assert_int_equal(tl_udp_ops.ep_create(&b.ui->super, &a, sizeof(a), 1, UUID_A, &tep), TMX_OK);
    ep = (udp_ep_t *)tep;
    for (uint32_t seq = 1; seq < 4; seq++) /* seq 0 never comes */
        seg_in(&b, UUID_A, seq, UDP_FLAG_FIRST | UDP_FLAG_LAST, 1, 1);
    send_bytes(ep, 5000); /* in flight, never acknowledged */
    assert_true(ep->has_flow);
    assert_int_not_equal(b.ui->ooo_bytes, 0);
    udp_ep_fail(b.ui, ep, "the test says so");
    assert_int_equal(b.failures, 1);
    assert_int_equal(b.ui->ooo_bytes, 0);
    assert_true(!ep->has_flow || (ep->flow->tx[UDP_CH_DATA].win == NULL && ep->flow->rx[UDP_CH_DATA].ooo == NULL));
    assert_int_equal(b.ui->segs.in_use + b.ui->hsegs.in_use, 0); /* every segment buffer is back */
    tl_udp_ops.progress(&b.ui->super);
    b.failures = 0;
    side_close(&b);
}

static int failed_once(void *arg)
{
    return ((side_t *)arg)->failures == 1;
}

/* Progresses a alone, as a waiter does (check_peers too), until done. */
static int wait_alone(side_t *a, int (*done)(void *), void *arg)
{
    uint64_t end = udp_now_us() + 10000000;

    while (!done(arg) && udp_now_us() < end) {
        tl_udp_ops.progress(&a->ui->super);
        tl_udp_ops.check_peers(&a->ui->super);
        tl_udp_ops.wait(&a->ui->super, 1000);
    }
    return done(arg);
}

/* A peer whose process is gone is declared failed on the kernel's word,
 * long before the silence limit: its port refuses our next datagram, as
 * its own connected socket reports (connect_max 1) or the shared socket's
 * error queue names (connect_max 0). */
static void refused(const char *connect_max)
{
    side_t a, b;
    udp_ep_t *ab;
    want_t w;

    setenv("TMX_UDP_CONNECT_MAX", connect_max, 1);
    pair_open(&a, &b);
    unsetenv("TMX_UDP_CONNECT_MAX");
    ab = connect_to(&a, &b, UUID_B);
    assert_int_equal(udp_ep_fd(a.ui, ab) >= 0, connect_max[0] != '0');
    send_bytes(ab, 64);
    w = (want_t){&b, 1, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_true(poll_until(&a, &b, all_acked, &w));
    udp_ep_find(b.ui, UUID_A)->failed = 1; /* b dies: no goodbye */
    side_close(&b); /* its port closes */
    send_bytes(ab, 64);
    assert_true(wait_alone(&a, failed_once, &a));
    assert_true(ab->failed && udp_ep_refusals(ab) > 0);
    a.failures = 0;
    side_close(&a);
}

/* A window set smaller than the largest packet needs (TMX_UDP_WINDOW=16,
 * 1500-byte datagrams: a packet of UDP_MAX_PACKET bytes is 188 segments)
 * grows to take it: a packet is sent whole or not at all, and its sender
 * waited for ever. */
static void test_small_window_takes_largest_packet(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    want_t w;

    (void)state;
    setenv("TMX_UDP_WINDOW", "16", 1);
    pair_open(&a, &b);
    unsetenv("TMX_UDP_WINDOW");
    assert_true(a.ui->cfg.window >= 256);
    ab = connect_to(&a, &b, UUID_B);
    send_bytes(ab, UDP_MAX_PACKET);
    send_bytes(ab, 100);
    w = (want_t){&b, 2, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_int_equal(b.bytes, UDP_MAX_PACKET + 100);
    pair_close(&a, &b);
}

/* A packet is sent whole or not at all: with no memory for all of its
 * segments, not one goes (a part sent would leave the receiver half a
 * packet), the send says AGAIN and leaves no state; once memory is back,
 * it goes whole. */
static void test_packet_whole_or_not_at_all(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    unsigned char *buf = malloc(UDP_MAX_PACKET);
    struct iovec iov = {buf, UDP_MAX_PACKET};
    uint64_t sent;
    uint32_t seq;
    want_t w;

    (void)state;
    assert_non_null(buf);
    for (size_t i = 0; i < UDP_MAX_PACKET; i++)
        buf[i] = (unsigned char)(i * 7);
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    /* room for one chunk of segments: a packet of 256 KiB needs three */
    util_pool_set_limit(&a.ui->segs, a.ui->segs.n_chunks > 0 ? a.ui->segs.n_chunks : 1);
    sent = a.ui->stats.segs_sent;
    seq = udp_ep_next_seq(ab, UDP_CH_DATA);
    assert_int_equal(tl_udp_ops.send(&ab->super, &iov, 1), TMX_ERR_AGAIN);
    assert_true(a.ui->stats.segs_sent == sent);
    assert_int_equal(udp_ep_next_seq(ab, UDP_CH_DATA), seq);
    assert_null(udp_ep_flow(ab));
    /* a short packet still goes */
    send_bytes(ab, 100);
    util_pool_set_limit(&a.ui->segs, 0);
    assert_int_equal(tl_udp_ops.send(&ab->super, &iov, 1), TMX_OK);
    w = (want_t){&b, 2, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_int_equal(b.bytes, 100 + UDP_MAX_PACKET);
    pair_close(&a, &b);
    free(buf);
}

/* A burst grows a peer's send window; once all of it is acknowledged the
 * window is a first window's size again, and the next burst grows it
 * anew; the receiver's early-arrival array (filled by losses) goes too. */
static void test_window_shrinks_after_burst(void **state)
{
    side_t a, b;
    udp_ep_t *ab, *ba;
    want_t w;

    (void)state;
    setenv("TMX_UDP_FAULTS", "drop=0.1", 1);
    pair_open(&a, &b);
    unsetenv("TMX_UDP_FAULTS");
    ab = connect_to(&a, &b, UUID_B);
    for (int round = 1; round <= 2; round++) {
        for (int k = 0; k < 4; k++)
            send_bytes(ab, 100000);
        assert_true(ab->flow->tx[UDP_CH_DATA].win_mask + 1 >= 256);
        assert_true(a.ui->segs.n_chunks >= 2); /* the burst took more than one chunk */
        w = (want_t){&b, (size_t)(4 * round), ab};
        assert_true(poll_until(&a, &b, got_packets, &w));
        assert_true(poll_until(&a, &b, all_acked, &w));
        ba = udp_ep_find(b.ui, UUID_A);
        assert_non_null(ba);
        /* then, the exchange over, both flows go with their arrays */
        idle_pair_t ip = {ab, ba};
        assert_true(poll_until(&a, &b, flows_gone, &ip));
        assert_int_equal(a.ui->n_flows + b.ui->n_flows, 0);
        /* and the segment buffers the burst took: one chunk of each pool
         * stays, whatever the burst took */
        assert_true(a.ui->segs.n_chunks <= 1 && b.ui->segs.n_chunks <= 1);
        assert_true(a.ui->hsegs.n_chunks <= 1 && b.ui->hsegs.n_chunks <= 1);
    }
    assert_int_equal(b.bytes, 8 * 100000);
    pair_close(&a, &b);
}

/* An idle peer holds no flow (udp_flow_t): the flows of both ends are
 * freed once an exchange is over, made again by the next segment either
 * way, and the sequence numbers carry over: later packets are delivered,
 * once each and in order, and acknowledged; a segment from before that
 * comes again (a duplicate the network kept) is not delivered again. */
static void test_idle_peer_holds_no_flow(void **state)
{
    side_t a, b;
    udp_ep_t *ab, *ba;
    idle_pair_t ip;
    want_t w;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    ba = connect_to(&b, &a, UUID_A);
    ip = (idle_pair_t){ab, ba};
    for (int round = 1; round <= 3; round++) {
        send_bytes(ab, 100);          /* one segment */
        send_bytes(ab, 3 * 9000);     /* several */
        send_bytes(ba, 8);            /* and the other way */
        assert_non_null(udp_ep_flow(ab));
        w = (want_t){&b, (size_t)(2 * round), ab};
        assert_true(poll_until(&a, &b, got_packets, &w));
        w = (want_t){&a, (size_t)round, ba};
        assert_true(poll_until(&a, &b, got_packets, &w));
        assert_true(poll_until(&a, &b, flows_gone, &ip));
        assert_int_equal(ab->idle.next_seq[UDP_CH_DATA], ba->idle.expected[UDP_CH_DATA]);
        assert_int_equal(ba->idle.next_seq[UDP_CH_DATA], ab->idle.expected[UDP_CH_DATA]);
        assert_true(ab->idle.next_seq[UDP_CH_DATA] >= (uint32_t)(5 * round));
    }
    assert_int_equal(b.packets, 6);
    assert_int_equal(a.packets, 3);
    /* an old segment again: it is answered but not delivered, and the
     * flows go again */
    send_bytes(ab, 8);
    assert_non_null(udp_ep_flow(ab));
    {
        udp_tx_t *tx = &ab->flow->tx[UDP_CH_DATA];
        udp_seg_t *seg = tx->win[udp_tx_slot(tx, tx->una)];
        udp_hdr_t *h = (udp_hdr_t *)seg->buf;
        uint32_t seq = le32toh(h->seq);
        /* rewrite it as the segment before, already delivered */
        h->seq = htole32(seq - 1);
        h->csum = 0;
        h->csum = htole32(util_crc32c(0, seg->buf, seg->len));
        udp_datagram_send(a.ui, ab, seg->buf, seg->len);
        h->seq = htole32(seq);
    }
    w = (want_t){&b, 7, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_true(poll_until(&a, &b, flows_gone, &ip));
    assert_int_equal(b.packets, 7);
    pair_close(&a, &b);
}

/* A peer that closes its context says so: it is gone, cleanly, and its
 * port's refusal afterwards is no death. */
static void test_closing_peer_says_bye(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    want_t w;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    send_bytes(ab, 64);
    w = (want_t){&b, 1, ab};
    assert_true(poll_until(&a, &b, got_packets, &w));
    assert_true(poll_until(&a, &b, all_acked, &w));
    side_close(&b);
    assert_true(wait_alone(&a, failed_once, &a));
    assert_int_equal(a.clean, 1);
    assert_false(udp_ep_flow(ab) != NULL && ab->flow->refused);
    a.failures = a.clean = 0;
    side_close(&a);
}

static void test_refused_port_is_death(void **state)
{
    (void)state;
    refused("1");
    refused("0");
}

/* A process that died and whose port (or node index) another context
 * took since, as a process restarted at the same address does: the port
 * is alive, so no kernel refuses it, but its new holder answers what
 * comes for the context that held it before with a NOBODY notice, and
 * the peer is found dead as fast as by a refusal, not after the silence
 * limit. A NOBODY notice itself is never answered. */
static void test_restarted_at_same_address_is_death(void **state)
{
    const uint64_t ghost = 0x9057ULL; /* held b's address before b */
    side_t a, b;
    udp_ep_t *ag;
    unsigned char nb[sizeof(udp_hdr_t)];
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(0x7f000001)}};
    udp_hdr_t n = {UDP_WIRE_VERSION, UDP_CH_PRIO, htole16(UDP_FLAG_ACK_ONLY | UDP_FLAG_NOBODY), 0, htons(9),
                   htole64(JOB_KEY), htole64(UUID_A), htole64(ghost), 0, {0, 0}, 0, 0, 0, 0, 0, 0, 0};
    uint64_t dropped, sent;

    (void)state;
    pair_open(&a, &b);
    ag = connect_to(&a, &b, ghost);
    send_bytes(ag, 64);
    for (uint64_t end = udp_now_us() + 5000000; a.failures == 0 && udp_now_us() < end;) {
        tl_udp_ops.progress(&a.ui->super);
        tl_udp_ops.check_peers(&a.ui->super);
        tl_udp_ops.progress(&b.ui->super);
    }
    assert_int_equal(a.failures, 1);
    assert_true(ag->failed && udp_ep_refusals(ag) > 0);
    assert_int_equal(b.packets, 0);
    assert_null(udp_ep_find(b.ui, ghost));
    /* a notice for a context not here is dropped, not answered */
    assert_int_not_equal(b.ui->stats.nobody_sent, 0);
    dropped = b.ui->stats.dropped;
    sent = b.ui->stats.nobody_sent;
    dgram_seal(nb, sizeof(nb), &n);
    b.ui->rx_now_us = udp_now_us();
    udp_dgram_input(b.ui, nb, sizeof(nb), &from);
    assert_int_equal(b.ui->stats.dropped, dropped + 1);
    assert_int_equal(b.ui->stats.nobody_sent, sent);
    a.failures = 0;
    pair_close(&a, &b);
}

/* A peer that is alive but silent (busy: it never progresses) is probed,
 * and not declared failed. */
static void test_silent_peer_is_not_dead(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    uint64_t end;

    (void)state;
    pair_open(&a, &b);
    ab = connect_to(&a, &b, UUID_B);
    send_bytes(ab, 64);
    end = udp_now_us() + 1500000;
    while (udp_now_us() < end) {
        tl_udp_ops.progress(&a.ui->super);
        tl_udp_ops.check_peers(&a.ui->super);
        tl_udp_ops.wait(&a.ui->super, 1000);
    }
    assert_int_equal(a.failures, 0);
    assert_true(a.ui->stats.segs_sent >= 2); /* the data and a keepalive */
    pair_close(&a, &b);
}

/* ------------------------------------------------ one port per node */

#define NODE_SIDES 4

/* A job of its own per case (cases run at once in other processes), so
 * that each has a port and a node table of its own. */
static uint64_t node_job_key(void)
{
    return 0x6e0de000000ull ^ ((uint64_t)getpid() << 8) ^ udp_now_us();
}

static int lanes_setting = -1;  /* TMX_UDP_LANES for the next sides, if not -1 */
static double faults_setting;    /* their TMX_UDP_FAULTS drop rate */
static uint64_t rto_setting;     /* their TMX_UDP_RTO_MS, if not 0 */

static void side_open_job(side_t *s, uint64_t uuid, uint64_t job_key, int in_job)
{
    tl_settings_t set;
    tl_iface_params_t p = {uuid, job_key, on_recv, on_fail, on_mem_check, s, NULL, 0, &set, s, NULL, NULL, NULL, in_job,
                           NULL, 0,       NULL};
    tl_iface_t *iface;

    assert_int_equal(unit_tl_settings(&set), TMX_OK);
    if (lanes_setting >= 0)
        set.udp.lanes = (uint32_t)lanes_setting;
    if (rto_setting != 0)
        set.udp.rto_ms = rto_setting;
    set.udp.faults.drop = faults_setting;
    memset(s, 0, sizeof(*s));
    assert_int_equal(tl_udp_ops.iface_open(&p, &iface), TMX_OK);
    s->ui = (udp_iface_t *)iface;
}

/* Members of one job that share the node's port, and a sender (a port of
 * its own) with an endpoint for each. */
typedef struct node_case {
    uint64_t key;
    side_t tx;
    side_t m[NODE_SIDES + 1];    /* the last: a member that joins later */
    udp_ep_t *ep[NODE_SIDES + 1];
} node_case_t;

static void node_case_open(node_case_t *c, int n)
{
    memset(c, 0, sizeof(*c));
    c->key = node_job_key();
    side_open_job(&c->tx, 0x5e0d, c->key, 0);
    for (int i = 0; i < n; i++)
        side_open_job(&c->m[i], 0x1000 + (uint64_t)i, c->key, 1);
}

/* Sends k packets to each member listed in want (want[i] > 0) and polls
 * until each has its own: none reaches another, which would be counted
 * there as a packet too many or a misrouted datagram. */
static void node_exchange(node_case_t *c, int n, const long *want, const long *had)
{
    uint64_t end = udp_now_us() + 5000000;
    int ok = 0;

    for (int i = 0; i < n; i++) {
        for (long k = had[i]; k < want[i]; k++)
            send_bytes(c->ep[i], 100);
    }
    while (!ok && udp_now_us() < end) {
        ok = 1;
        tl_udp_ops.progress(&c->tx.ui->super);
        for (int i = 0; i < n; i++) {
            if (want[i] < 0)
                continue;
            tl_udp_ops.progress(&c->m[i].ui->super);
            ok &= c->m[i].packets >= (size_t)want[i];
        }
    }
    for (int i = 0; i < n; i++) {
        if (want[i] >= 0)
            assert_int_equal(c->m[i].packets, (size_t)want[i]);
    }
}

/* Four contexts of a job share the node's port, each with an index of its
 * own, and the kernel steers each datagram to its context. */
static void test_node_port_shared(void **state)
{
    node_case_t c;
    long want[NODE_SIDES], had[NODE_SIDES] = {0};

    (void)state;
    node_case_open(&c, NODE_SIDES);
    for (int i = 0; i < NODE_SIDES; i++) {
        assert_non_null(c.m[i].ui->node.tab);
        assert_int_equal(c.m[i].ui->sock.self_sa.sin_port, c.m[0].ui->sock.self_sa.sin_port);
        assert_int_equal(c.m[i].ui->sock.index, i);
        c.ep[i] = connect_to(&c.tx, &c.m[i], 0x1000 + (uint64_t)i);
        want[i] = 5 + i;
    }
    assert_null(c.tx.ui->node.tab); /* not in a job: a port of its own */
    assert_int_equal(c.tx.ui->sock.n_conn, 1); /* one connected socket for the node */
    for (int i = 0; i < NODE_SIDES; i++)
        assert_int_equal(udp_ep_fd(c.tx.ui, c.ep[i]), udp_ep_fd(c.tx.ui, c.ep[0]));
    assert_int_not_equal(c.tx.ui->sock.self_sa.sin_port, c.m[0].ui->sock.self_sa.sin_port);
    node_exchange(&c, NODE_SIDES, want, had);
    for (int i = 0; i < NODE_SIDES; i++)
        assert_int_equal(c.m[i].ui->stats.misrouted, 0);
    for (int i = 0; i < NODE_SIDES; i++)
        side_close(&c.m[i]);
    side_close(&c.tx);
}

/* A member that closes has the kernel move the group's last socket into
 * its slot: the others are still steered right, without a datagram
 * misrouted, and one that joins later takes the free index. */
static void test_node_member_closes(void **state)
{
    node_case_t c;
    long want[NODE_SIDES + 1], had[NODE_SIDES + 1] = {0};

    (void)state;
    node_case_open(&c, NODE_SIDES);
    for (int i = 0; i < NODE_SIDES; i++) {
        c.ep[i] = connect_to(&c.tx, &c.m[i], 0x1000 + (uint64_t)i);
        want[i] = 2;
    }
    node_exchange(&c, NODE_SIDES, want, had);
    side_close(&c.m[1]);
    want[1] = -1;
    for (int i = 0; i < NODE_SIDES; i++) {
        had[i] = want[i];
        want[i] = want[i] < 0 ? -1 : 6;
    }
    had[1] = 0;
    node_exchange(&c, NODE_SIDES, want, had);
    for (int i = 0; i < NODE_SIDES; i++)
        assert_true(i == 1 || c.m[i].ui->stats.misrouted == 0);
    side_open_job(&c.m[1], 0x1011, c.key, 1);
    assert_int_equal(c.m[1].ui->sock.index, 1);
    c.ep[1] = connect_to(&c.tx, &c.m[1], 0x1011);
    for (int i = 0; i < NODE_SIDES; i++) {
        had[i] = i == 1 ? 0 : want[i];
        want[i] = i == 1 ? 3 : want[i] + 1;
    }
    node_exchange(&c, NODE_SIDES, want, had);
    for (int i = 0; i < NODE_SIDES; i++)
        side_close(&c.m[i]);
    c.tx.failures = 0; /* the member that closed said bye */
    side_close(&c.tx);
}

/* A datagram that names another index is dropped and counted, whatever
 * else in it is right; one for an index nobody holds is answered with a
 * NOBODY notice, which its sender counts as a refusal. */
static void test_node_wrong_index_dropped(void **state)
{
    node_case_t c;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), htons(9),
                   0, htole64(0x5e0d), htole64(0x1000), 0, {0, 0}, 0, htole64(8), 0, 0, 0, htons(1), 0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    uint64_t end;

    (void)state;
    node_case_open(&c, 2);
    h.job_key = htole64(c.key);
    dgram_seal(buf, sizeof(buf), &h);
    c.m[0].ui->rx_now_us = udp_now_us();
    udp_dgram_input(c.m[0].ui, buf, sizeof(buf), &from);
    assert_int_equal(c.m[0].ui->stats.misrouted, 1);
    assert_int_equal(c.m[0].ui->stats.dropped, 1);
    assert_int_equal(c.m[0].packets, 0);
    /* through the kernel: an endpoint that names index 7, which nobody holds */
    c.ep[0] = connect_to(&c.tx, &c.m[0], 0x1000);
    c.ep[0]->index = 7;
    send_bytes(c.ep[0], 100);
    end = udp_now_us() + 3000000;
    while (udp_ep_refusals(c.ep[0]) == 0 && !c.ep[0]->failed && udp_now_us() < end) {
        tl_udp_ops.progress(&c.tx.ui->super);
        tl_udp_ops.progress(&c.m[0].ui->super);
        tl_udp_ops.progress(&c.m[1].ui->super);
    }
    assert_true(udp_ep_refusals(c.ep[0]) > 0 || c.ep[0]->failed);
    assert_int_equal(c.m[0].packets + c.m[1].packets, 0);
    assert_true(c.m[0].ui->stats.misrouted + c.m[1].ui->stats.misrouted >= 2);
    c.tx.failures = 0; /* the endpoint that named a wrong index may have been declared dead */
    for (int i = 0; i < 2; i++)
        side_close(&c.m[i]);
    side_close(&c.tx);
}

/* A datagram for a node-mate that reached us (a stale program, or UDP GRO
 * joining a flow's datagrams whoever they are for) is handed on through
 * the node's port and delivered there, once: one that came from the
 * node's port itself stops here. */
static void test_node_misrouted_handed_on(void **state)
{
    node_case_t c;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0}, copy[sizeof(buf)];
    udp_hdr_t h = {UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), htons(9),
                   0, htole64(0x5e0d), htole64(0x1001), 0, {0, 0}, 0, htole64(8), 0, 0, 0, htons(1), 0};
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    uint64_t end;

    (void)state;
    node_case_open(&c, 2);
    h.job_key = htole64(c.key);
    dgram_seal(buf, sizeof(buf), &h);
    memcpy(copy, buf, sizeof(buf));
    c.m[0].ui->rx_now_us = udp_now_us();
    udp_dgram_input(c.m[0].ui, buf, sizeof(buf), &from);
    assert_int_equal(c.m[0].ui->stats.misrouted, 1);
    assert_int_equal(c.m[0].ui->stats.handed_on, 1);
    assert_int_equal(c.m[0].packets, 0);
    end = udp_now_us() + 2000000;
    while (c.m[1].packets == 0 && udp_now_us() < end)
        tl_udp_ops.progress(&c.m[1].ui->super);
    assert_int_equal(c.m[1].packets, 1);
    assert_int_equal(c.m[1].bytes, 8);
    /* from the node's port: not handed on again */
    udp_dgram_input(c.m[0].ui, copy, sizeof(copy), &c.m[0].ui->sock.self_sa);
    assert_int_equal(c.m[0].ui->stats.misrouted, 2);
    assert_int_equal(c.m[0].ui->stats.handed_on, 1);
    for (int i = 0; i < 2; i++)
        side_close(&c.m[i]);
    side_close(&c.tx);
}

/* A port held by a socket without SO_REUSEPORT cannot be shared: the
 * context falls back to a port of its own, and still works. */
static void test_node_fallback_port_held(void **state)
{
    node_case_t c;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = {htonl(INADDR_LOOPBACK)}};
    long want[1] = {3}, had[1] = {0};
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    (void)state;
    c.key = node_job_key();
    sa.sin_port = htons(udp_node_port(c.key));
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    side_open_job(&c.tx, 0x5e0d, c.key, 0);
    side_open_job(&c.m[0], 0x1000, c.key, 1);
    assert_null(c.m[0].ui->node.tab);
    assert_int_not_equal(c.m[0].ui->sock.self_sa.sin_port, sa.sin_port);
    c.ep[0] = connect_to(&c.tx, &c.m[0], 0x1000);
    node_exchange(&c, 1, want, had);
    side_close(&c.m[0]);
    side_close(&c.tx);
    close(fd);
}

/* TMX_UDP_SHARED_PORT=0: a port per process in a job too. */
static void test_node_setting_off(void **state)
{
    side_t m;

    (void)state;
    setenv("TMX_UDP_SHARED_PORT", "0", 1);
    side_open_job(&m, 0x1000, node_job_key(), 1);
    unsetenv("TMX_UDP_SHARED_PORT");
    assert_null(m.ui->node.tab);
    side_close(&m);
}

/* Whether a node table whose name ends with suffix is in /dev/shm. */
static int node_table_exists(const char *suffix)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int found = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name), k = strlen(suffix);
        found |= strncmp(e->d_name, "tmx-udp-", 8) == 0 && n > k && strcmp(e->d_name + n - k, suffix) == 0;
    }
    closedir(d);
    return found;
}

/* A member killed between two others: the kernel moves the last socket
 * into its slot without telling anyone. The survivors find the death
 * (a datagram steered to the wrong one), follow the move, and get their
 * packets, at the cost of retransmissions; the dead one's index is
 * answered with NOBODY notices. */
static void test_node_member_dies(void **state)
{
    node_case_t c;
    long want[3] = {0}, had[3] = {0};
    int go[2];
    pid_t child;
    char b;
    uint64_t end;

    (void)state;
    c.key = node_job_key();
    side_open_job(&c.tx, 0x5e0d, c.key, 0);
    side_open_job(&c.m[0], 0x1000, c.key, 1);
    assert_int_equal(pipe(go), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        side_t m;
        side_open_job(&m, 0x1001, c.key, 1);
        if (write(go[1], "x", 1) != 1)
            _exit(1);
        for (;;) {
            tl_udp_ops.progress(&m.ui->super);
            tl_udp_ops.wait(&m.ui->super, 1000);
        }
    }
    assert_int_equal(read(go[0], &b, 1), 1);
    side_open_job(&c.m[2], 0x1002, c.key, 1);
    assert_int_equal(c.m[2].ui->sock.index, 2);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    c.ep[0] = connect_to(&c.tx, &c.m[0], 0x1000);
    c.ep[2] = connect_to(&c.tx, &c.m[2], 0x1002);
    want[0] = 10;
    want[1] = -1; /* the dead one */
    want[2] = 10;
    node_exchange(&c, 3, want, had);
    assert_int_equal(udp_node_slot(c.m[2].ui, 2), 1); /* the kernel's move, followed */
    assert_int_equal(udp_node_slot(c.m[2].ui, 1), -1);
    /* the dead one's index: a NOBODY notice */
    {
        unsigned char addr[64];
        size_t len = sizeof(addr);
        tl_ep_t *ep;
        udp_addr_t a;
        assert_int_equal(tl_udp_ops.address(&c.m[0].ui->super, addr, &len), TMX_OK);
        memcpy(&a, addr, sizeof(a)); /* the address blob is a udp_addr_t */
        a.index = htons(1);
        memcpy(addr, &a, sizeof(a));
        assert_int_equal(tl_udp_ops.ep_create(&c.tx.ui->super, addr, len, 2, 0x1001, &ep), TMX_OK);
        c.ep[1] = (udp_ep_t *)ep;
    }
    send_bytes(c.ep[1], 100);
    end = udp_now_us() + 3000000;
    while (udp_ep_refusals(c.ep[1]) == 0 && !c.ep[1]->failed && udp_now_us() < end) {
        tl_udp_ops.progress(&c.tx.ui->super);
        tl_udp_ops.progress(&c.m[0].ui->super);
        tl_udp_ops.progress(&c.m[2].ui->super);
    }
    assert_true(udp_ep_refusals(c.ep[1]) > 0 || c.ep[1]->failed);
    c.tx.failures = 0;
    side_close(&c.m[0]);
    side_close(&c.m[2]);
    side_close(&c.tx);
}

/* A child process that joins the node's port as context uuid and waits
 * to be killed. */
static pid_t node_child(uint64_t key, uint64_t uuid)
{
    int go[2];
    pid_t child;
    char b;

    assert_int_equal(pipe(go), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        side_t k;
        side_open_job(&k, uuid, key, 1);
        if (k.ui->node.tab == NULL || write(go[1], "x", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    assert_int_equal(read(go[0], &b, 1), 1);
    close(go[0]);
    close(go[1]);
    return child;
}

/* Two members die at once: which of the two last sockets the kernel moved
 * into which freed slot depends on the order their sockets closed, which
 * nobody knows. The survivors that were beyond the new count are marked
 * unsure and find their slots by probing; then everyone is steered right. */
static void test_node_two_members_die(void **state)
{
    node_case_t c;
    long want[5] = {0}, had[5] = {0};
    pid_t k1, k2;

    (void)state;
    c.key = node_job_key();
    side_open_job(&c.tx, 0x5e0d, c.key, 0);
    side_open_job(&c.m[0], 0x1000, c.key, 1);
    k1 = node_child(c.key, 0x1001);
    k2 = node_child(c.key, 0x1002);
    side_open_job(&c.m[3], 0x1003, c.key, 1);
    side_open_job(&c.m[4], 0x1004, c.key, 1);
    assert_int_equal(c.m[4].ui->sock.index, 4);
    kill(k1, SIGKILL);
    kill(k2, SIGKILL);
    waitpid(k1, NULL, 0);
    waitpid(k2, NULL, 0);
    udp_node_check(c.m[0].ui, udp_now_us(), 1); /* as its next check would */
    assert_int_equal(udp_node_slot(c.m[0].ui, 3), -2);
    assert_int_equal(udp_node_slot(c.m[0].ui, 4), -2);
    for (int i = 0; i < 5; i++) {
        if (i == 1 || i == 2) {
            want[i] = -1;
            continue;
        }
        c.ep[i] = connect_to(&c.tx, &c.m[i], 0x1000 + (uint64_t)i);
        want[i] = 8;
    }
    node_exchange(&c, 5, want, had);
    assert_true(udp_node_slot(c.m[0].ui, 3) >= 1 && udp_node_slot(c.m[0].ui, 3) <= 2);
    assert_true(udp_node_slot(c.m[0].ui, 4) >= 1 && udp_node_slot(c.m[0].ui, 4) <= 2);
    side_close(&c.m[0]);
    side_close(&c.m[3]);
    side_close(&c.m[4]);
    side_close(&c.tx);
}

/* A job killed whole leaves its node table behind; the next process to
 * join a port removes it. */
static void test_node_stale_table_swept(void **state)
{
    uint64_t key = node_job_key();
    char suffix[32];
    int go[2], found;
    pid_t child;
    char b;
    side_t m;

    (void)state;
    snprintf(suffix, sizeof(suffix), "-7f000001-%u", udp_node_port(key));
    assert_int_equal(pipe(go), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        side_t k;
        side_open_job(&k, 0x1000, key, 1);
        if (k.ui->node.tab == NULL || write(go[1], "x", 1) != 1)
            _exit(1);
        pause();
    }
    assert_int_equal(read(go[0], &b, 1), 1);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    found = node_table_exists(suffix);
    assert_true(found);
    side_open_job(&m, 0x2000, key ^ 0x10000, 1); /* another job, another port */
    assert_false(node_table_exists(suffix));
    side_close(&m);
}

/* Every member sends bulk packets (several datagrams each) to a context
 * outside the job; returns when all have arrived, checked by count and
 * size. */
static void lanes_send_bulk(node_case_t *c, int n, int per_member, size_t len)
{
    uint64_t end = udp_now_us() + 10000000;
    size_t had = c->tx.packets, bytes = c->tx.bytes;
    int done = 0;

    for (int i = 0; i < n; i++) {
        if (c->ep[i] == NULL)
            c->ep[i] = connect_to(&c->m[i], &c->tx, 0x5e0d);
        for (int k = 0; k < per_member; k++)
            send_bytes(c->ep[i], len);
    }
    while (!done && udp_now_us() < end) {
        tl_udp_ops.progress(&c->tx.ui->super);
        for (int i = 0; i < n; i++)
            tl_udp_ops.progress(&c->m[i].ui->super);
        done = c->tx.packets - had == (size_t)(n * per_member);
    }
    assert_int_equal(c->tx.packets - had, (size_t)(n * per_member));
    assert_int_equal(c->tx.bytes - bytes, (size_t)(n * per_member) * len);
}

static uint16_t local_port(int fd)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);

    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    return ntohs(sa.sin_port);
}

/* Lanes: the job's members on the node open TMX_UDP_LANES sockets as they
 * join, on the same ports, outside the kernel's ephemeral range; each
 * peer's bulk data leaves from its lane, the peers of a node spread over
 * the lanes, so the node has that many flows of bulk data to another node
 * however many members it has, while short packets leave from each
 * member's own socket (read here off the receiver's socket, with the
 * address each datagram came from). Nothing sent to a lane is kept. */
static void test_node_lanes_shared(void **state)
{
    node_case_t c;
    uint16_t port0[3], conn_port[NODE_SIDES];
    unsigned char *buf = malloc(65536);
    int pending = -1, probe, seen[3] = {0}, bulk = 0, shorts = 0;
    uint64_t end;

    (void)state;
    assert_non_null(buf);
    lanes_setting = 3;
    rto_setting = 5000; /* what is sent first is read: nothing sent again meanwhile */
    node_case_open(&c, NODE_SIDES);
    rto_setting = 0;
    for (int i = 0; i < NODE_SIDES; i++) {
        assert_int_equal(c.m[i].ui->sock.lanes, 3);
        for (unsigned l = 0; l < 3; l++) {
            uint16_t p = udp_node_lane_port(c.m[i].ui, l);
            if (i == 0)
                port0[l] = p;
            assert_int_equal(p, port0[l]);
            assert_true(p >= 14000 && p < 20000);
            assert_int_not_equal(p, ntohs(c.m[i].ui->sock.self_sa.sin_port));
            for (unsigned k = 0; k < l; k++)
                assert_int_not_equal(port0[l], port0[k]);
        }
    }
    assert_int_equal(udp_node_lane_port(c.m[0].ui, 3), 0);
    /* each member sends one bulk packet and one short one; the receiver's
     * datagrams are read raw, so nothing is acknowledged (and nothing sent
     * again within the long first timeout the members have) */
    for (int i = 0; i < NODE_SIDES; i++) {
        c.ep[i] = connect_to(&c.m[i], &c.tx, 0x5e0d);
        send_bytes(c.ep[i], 20000);
        send_bytes(c.ep[i], 100);
        assert_true(c.ep[i]->sock);
        conn_port[i] = local_port(udp_ep_conn(c.m[i].ui, c.ep[i])->fd);
        assert_int_equal(c.ep[i]->lane, 1 + (unsigned)i % 3); /* a node's first peers spread: index i, lane i */
    }
    end = udp_now_us() + 300000;
    while (udp_now_us() < end) {
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(c.tx.ui->sock.fd, buf, 65536, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        int lane = -1, member = -1;
        if (n < 0) {
            usleep(1000);
            continue;
        }
        for (int l = 0; l < 3; l++)
            lane = ntohs(from.sin_port) == port0[l] ? l : lane;
        for (int m = 0; m < NODE_SIDES; m++)
            member = ntohs(from.sin_port) == conn_port[m] ? m : member;
        if (n == (ssize_t)sizeof(udp_hdr_t) + 100) { /* a short packet: from the member's own socket */
            assert_true(member >= 0);
            shorts++;
        } else { /* a bulk segment: from a lane, never a member's own socket */
            assert_true(lane >= 0);
            seen[lane]++;
            bulk++;
        }
    }
    assert_int_equal(bulk, NODE_SIDES * 15); /* 20000 B in segments of 1400 */
    assert_int_equal(shorts, NODE_SIDES);
    for (int l = 0; l < 3; l++)
        assert_true(seen[l] > 0);
    /* a datagram sent to a lane's port is kept by no member */
    probe = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(probe >= 0);
    {
        struct sockaddr_in to = c.m[0].ui->sock.self_sa;
        char junk[64] = {0};
        to.sin_port = htons(port0[1]);
        for (int k = 0; k < 16; k++)
            assert_int_equal(sendto(probe, junk, sizeof(junk), 0, (struct sockaddr *)&to, sizeof(to)), sizeof(junk));
    }
    close(probe);
    usleep(20000);
    for (int i = 0; i < NODE_SIDES; i++) {
        for (unsigned l = 0; l < 3; l++) {
            assert_int_equal(ioctl(c.m[i].ui->sock.lane_fd[l], FIONREAD, &pending), 0);
            assert_int_equal(pending, 0);
        }
    }
    /* a member that joins later binds the same lanes */
    side_open_job(&c.m[NODE_SIDES], 0x1000 + NODE_SIDES, c.key, 1);
    lanes_setting = -1;
    for (unsigned l = 0; l < 3; l++)
        assert_int_equal(udp_node_lane_port(c.m[NODE_SIDES].ui, l), port0[l]);
    for (int i = 0; i <= NODE_SIDES; i++)
        side_close(&c.m[i]);
    c.tx.failures = 0; /* the members said bye */
    side_close(&c.tx);
    free(buf);
}

/* Bulk data on lanes arrives whole, also when a fifth of the datagrams
 * are lost and the repairs go on the lanes too (and a timer's resend
 * from the member's own socket). */
static void test_node_lanes_deliver(void **state)
{
    node_case_t c;
    double drop[2] = {0, 0.2};

    (void)state;
    for (int k = 0; k < 2; k++) {
        lanes_setting = 2;
        faults_setting = drop[k];
        node_case_open(&c, NODE_SIDES);
        lanes_setting = -1;
        faults_setting = 0;
        memset(c.ep, 0, sizeof(c.ep));
        lanes_send_bulk(&c, NODE_SIDES, 6, 30000);
        for (int i = 0; i < NODE_SIDES; i++) {
            assert_true(c.m[i].ui->stats.lane_segs >= 6 * 22);
            if (k == 1)
                assert_true(c.m[i].ui->stats.retransmits > 0);
        }
        for (int i = 0; i < NODE_SIDES; i++)
            side_close(&c.m[i]);
        c.tx.failures = 0; /* the members said bye */
        side_close(&c.tx);
    }
}

/* A peer whose port is gone while bulk data to it is in flight on a lane
 * is found dead on the kernel's word, as without lanes: the timer's
 * resend leaves from the member's own socket, which hears the refusal
 * (a lane's socket, the node's, does not), before any keepalive to a
 * silent peer. */
static void test_node_lanes_refused(void **state)
{
    node_case_t c;
    udp_ep_t *ep;
    want_t w;

    (void)state;
    lanes_setting = 3;
    node_case_open(&c, 1);
    lanes_setting = -1;
    ep = c.ep[0] = connect_to(&c.m[0], &c.tx, 0x5e0d);
    send_bytes(ep, 64);
    w = (want_t){&c.tx, 1, ep};
    assert_true(poll_until(&c.m[0], &c.tx, got_packets, &w));
    assert_true(poll_until(&c.m[0], &c.tx, all_acked, &w));
    udp_ep_find(c.tx.ui, 0x1000)->failed = 1; /* the peer dies: no goodbye */
    side_close(&c.tx);
    send_bytes(ep, 20000);
    assert_int_not_equal(ep->lane, 0);
    assert_true(wait_alone(&c.m[0], failed_once, &c.m[0]));
    assert_true(ep->failed && udp_ep_refusals(ep) > 0);
    /* before a keepalive to a silent peer would have gone out (1 s of
     * silence, udp_live.c): the refusals answered the data channel's own
     * resends */
    assert_true(udp_ep_silence(ep, udp_now_us()) < 1000000);
    c.m[0].failures = 0;
    side_close(&c.m[0]);
}

/* TMX_UDP_LANES=0, or a context with a port of its own: no lanes, bulk
 * data leaves from the context's socket. */
static void test_node_lanes_off(void **state)
{
    node_case_t c;

    (void)state;
    lanes_setting = 0;
    node_case_open(&c, 2);
    lanes_setting = -1;
    lanes_send_bulk(&c, 2, 2, 200000);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(c.m[i].ui->sock.lanes, 0);
        assert_int_equal(c.m[i].ui->stats.lane_segs, 0);
        side_close(&c.m[i]);
    }
    /* the context outside the job sends bulk data back: no lanes either */
    side_open_job(&c.m[0], 0x1000, c.key, 1);
    c.ep[0] = connect_to(&c.tx, &c.m[0], 0x1000);
    send_bytes(c.ep[0], 200000);
    {
        want_t w = {&c.m[0], 1, NULL};
        assert_true(poll_until(&c.tx, &c.m[0], got_packets, &w));
    }
    assert_int_equal(c.tx.ui->sock.lanes, 0);
    assert_int_equal(c.tx.ui->stats.lane_segs, 0);
    side_close(&c.m[0]);
    c.tx.failures = 0; /* the members said bye */
    side_close(&c.tx);
}

/* A peer on another host whose first datagram to m1 reached m0 (UDP GRO
 * joined it to one of m0's) and was handed on: m1's endpoint for it has
 * the peer's address, not the node's, and m1's ACK reaches the peer. */
static void test_node_handed_on_first_contact(void **state)
{
    node_case_t c;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    int peer = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in far = {.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(0x7f000002)}};
    socklen_t fl = sizeof(far);
    udp_hdr_t h;
    uint64_t end;
    udp_ep_t *ep;
    int got_ack = 0;

    (void)state;
    assert_true(peer >= 0);
    assert_int_equal(bind(peer, (struct sockaddr *)&far, sizeof(far)), 0); /* "another host": 127.0.0.2 */
    assert_int_equal(getsockname(peer, (struct sockaddr *)&far, &fl), 0);
    node_case_open(&c, 2);
    h = (udp_hdr_t){UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), far.sin_port,
                    htole64(c.key), htole64(0x7777), htole64(0x1001), 0, {0, 0}, 0, htole64(8), 0, 0, 0, htons(1), 0};
    dgram_seal(buf, sizeof(buf), &h);
    c.m[0].ui->rx_now_us = udp_now_us();
    udp_dgram_input(c.m[0].ui, buf, sizeof(buf), &far); /* as if GRO had joined it to one of m0's */
    assert_int_equal(c.m[0].ui->stats.handed_on, 1);
    end = udp_now_us() + 500000;
    while (udp_now_us() < end) {
        unsigned char r[2048];
        tl_udp_ops.progress(&c.m[1].ui->super);
        if (recv(peer, r, sizeof(r), MSG_DONTWAIT) >= (ssize_t)sizeof(udp_hdr_t))
            got_ack = 1;
        if (got_ack)
            break;
    }
    assert_int_equal(c.m[1].packets, 1);
    ep = udp_ep_find(c.m[1].ui, 0x7777);
    assert_non_null(ep);
    assert_int_equal(udp_ep_conn(c.m[1].ui, ep)->sa.sin_addr.s_addr, far.sin_addr.s_addr);
    assert_true(got_ack);
    close(peer);
    for (int i = 0; i < 2; i++)
        side_close(&c.m[i]);
    side_close(&c.tx);
}


/* As above, as on a real network: the far node's port is the same number
 * as ours (a hash of the job key), and the far peer's index (5) is held by
 * no process here. m1's ACKs must not come back to this node as NOBODY
 * notices that declare a live peer dead. */
static void test_node_handed_on_no_false_death(void **state)
{
    node_case_t c;
    unsigned char buf[sizeof(udp_hdr_t) + 8] = {0};
    int peer = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in far = {.sin_family = AF_INET, .sin_addr = {htonl(0x7f000002)}};
    udp_hdr_t h;
    uint64_t end, t0;
    udp_ep_t *ep;

    (void)state;
    assert_true(peer >= 0);
    node_case_open(&c, 2);
    far.sin_port = c.m[0].ui->sock.self_sa.sin_port;
    assert_int_equal(bind(peer, (struct sockaddr *)&far, sizeof(far)), 0);
    h = (udp_hdr_t){UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16(8), far.sin_port,
                    htole64(c.key), htole64(0x7777), htole64(0x1001), 0, {0, 0}, 0, htole64(8), 0, 0, htons(5), htons(1), 0};
    dgram_seal(buf, sizeof(buf), &h);
    c.m[0].ui->rx_now_us = udp_now_us();
    udp_dgram_input(c.m[0].ui, buf, sizeof(buf), &far);
    assert_int_equal(c.m[0].ui->stats.handed_on, 1);
    t0 = udp_now_us();
    end = t0 + 1000000; /* without the fix: declared dead after about 200 ms */
    while (c.m[1].failures == 0 && udp_now_us() < end) {
        tl_udp_ops.progress(&c.m[0].ui->super);
        tl_udp_ops.progress(&c.m[1].ui->super);
    }
    ep = udp_ep_find(c.m[1].ui, 0x7777);
    assert_non_null(ep);
    assert_false(ep->failed);
    assert_int_equal(udp_ep_refusals(ep), 0);
    assert_int_equal(c.m[1].failures, 0);
    close(peer);
    for (int i = 0; i < 2; i++)
        side_close(&c.m[i]);
    side_close(&c.tx);
}

/* Liveness stamps: ages right whatever the clock's value (a host up for
 * more than 25 days included), a stamp a little ahead reads as now, and
 * "never probed" reads as long ago. */
static void test_live_stamps(void **state)
{
    static const uint64_t nows[] = {5000000ull, 3000000000000ull /* 35 days */,
                                    (1ull << 42) - 1000 /* a stamp's wrap */, 1ull << 50};

    (void)state;
    for (size_t i = 0; i < sizeof(nows) / sizeof(nows[0]); i++) {
        uint64_t now = nows[i];
        uint64_t a = udp_live_age(now, udp_live_stamp(now - 2000000));
        assert_true(a >= 1990000 && a <= 2010000);
        assert_true(udp_live_age(now, udp_live_stamp(now)) < 1100);
        assert_int_equal(udp_live_age(now, udp_live_stamp(now + 500000)), 0);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_live_stamps),
        cmocka_unit_test(test_acks_reach_a_connected_sender),
        cmocka_unit_test(test_closing_peer_says_bye),
        cmocka_unit_test(test_small_window_takes_largest_packet),
        cmocka_unit_test(test_packet_whole_or_not_at_all),
        cmocka_unit_test(test_window_shrinks_after_burst),
        cmocka_unit_test(test_idle_peer_holds_no_flow),
        cmocka_unit_test(test_read_stall_reports_paced),
        cmocka_unit_test(test_read_stall_reports_back_off),
        cmocka_unit_test(test_refused_port_is_death),
        cmocka_unit_test(test_restarted_at_same_address_is_death),
        cmocka_unit_test(test_silent_peer_is_not_dead),
        cmocka_unit_test(test_both_connected),
        cmocka_unit_test(test_connect_max),
        cmocka_unit_test(test_reply_port_zero_dropped),
        cmocka_unit_test(test_contradictory_flags_dropped),
        cmocka_unit_test(test_malformed_pieces_dropped),
        cmocka_unit_test(test_forged_sender_dropped),
        cmocka_unit_test(test_forged_before_added_forgotten),
        cmocka_unit_test(test_forged_before_added_no_harm),
        cmocka_unit_test(test_bye_below_arrivals_ignored),
        cmocka_unit_test(test_refused_write_no_wait),
        cmocka_unit_test(test_reasm_strangers_bounded),
        cmocka_unit_test(test_reasm_strangers_bounded_early),
        cmocka_unit_test(test_unexpected_bound_holds_for_early_packets),
        cmocka_unit_test(test_stall_resends_what_was_given_up),
        cmocka_unit_test(test_left_data_notes_only_the_window),
        cmocka_unit_test(test_early_segments_bounded),
        cmocka_unit_test(test_strangers_make_room),
        cmocka_unit_test(test_known_peer_past_the_bound),
        cmocka_unit_test(test_gro_follows_bulk),
        cmocka_unit_test(test_empty_pieces),
        cmocka_unit_test(test_burst_read_after_gro_off),
        cmocka_unit_test(test_failed_peer_gives_socket_back),
        cmocka_unit_test(test_failed_peer_holds_nothing),
        cmocka_unit_test(test_resend_is_the_same),
        cmocka_unit_test(test_read_from_lent_memory),
        cmocka_unit_test(test_read_ends_when_memory_is_taken_back),
        cmocka_unit_test(test_node_port_shared),
        cmocka_unit_test(test_node_member_closes),
        cmocka_unit_test(test_node_wrong_index_dropped),
        cmocka_unit_test(test_node_misrouted_handed_on),
        cmocka_unit_test(test_node_handed_on_first_contact),
        cmocka_unit_test(test_node_handed_on_no_false_death),
        cmocka_unit_test(test_node_fallback_port_held),
        cmocka_unit_test(test_node_setting_off),
        cmocka_unit_test(test_node_member_dies),
        cmocka_unit_test(test_node_two_members_die),
        cmocka_unit_test(test_node_stale_table_swept),
        cmocka_unit_test(test_node_lanes_shared),
        cmocka_unit_test(test_node_lanes_deliver),
        cmocka_unit_test(test_node_lanes_refused),
        cmocka_unit_test(test_node_lanes_off),
    };

    setenv("TMX_UDP_ADDR", "127.0.0.1", 1);
    setenv("TMX_UDP_MTU", "1500", 1); /* segments as on a network, not loopback's 64 KiB */
    return UNIT_MAIN(argc, argv, tests);
}
