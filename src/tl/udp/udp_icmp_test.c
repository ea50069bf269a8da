/*
 * Hostile review: an ICMP "port unreachable" is no proof that a peer is
 * dead. It carries no job key and no secret: anyone who can put an IP
 * packet on the host's path (or a firewall REJECT rule on the way) and
 * knows two ports (published in the job's addresses, or seen on the wire)
 * can forge one. udp_live.c declares the peer failed on the first one,
 * whichever socket it reaches. Here the peer b is alive and answering the
 * whole time; a forged refusal quoting a datagram from a to b must not
 * make a declare b failed. Needs CAP_NET_RAW (skips otherwise).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <pthread.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit.h"
#include "unit_tl.h"

#include "tl/udp/udp.h"

#define JOB_KEY 0x5eed
#define UUID_A 0xa11ceULL
#define UUID_B 0xb0bULL

typedef struct side {
    udp_iface_t *ui;
    size_t packets;
    int failures;
    int clean;                   /* of which said they closed */
} side_t;

static void on_recv(void *arg, uint64_t src, const void *data, size_t len)
{
    (void)src, (void)data, (void)len;
    ((side_t *)arg)->packets++;
}

static void on_fail(void *arg, uint64_t uuid, int clean)
{
    (void)uuid;
    ((side_t *)arg)->failures++;
    ((side_t *)arg)->clean += clean;
}

static tmx_status_t on_mem_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    (void)arg, (void)addr, (void)len, (void)rkey;
    return TMX_ERR_NOT_FOUND;
}

/* The transport's settings as a context would hand them down: the
 * environment's (set by main and by some cases), over the defaults. */
static void side_open(side_t *s, uint64_t uuid)
{
    tl_settings_t set;
    tl_iface_params_t p = {uuid, JOB_KEY, on_recv, on_fail, on_mem_check, s, NULL, 0, &set, s, NULL, NULL, NULL, 0,
                           NULL, 0,       NULL};
    tl_iface_t *iface;

    assert_int_equal(unit_tl_settings(&set), TMX_OK);
    memset(s, 0, sizeof(*s));
    assert_int_equal(tl_udp_ops.iface_open(&p, &iface), TMX_OK);
    s->ui = (udp_iface_t *)iface;
}

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
    unsigned char buf[256] = {0};
    struct iovec iov = {buf, len};

    assert_int_equal(tl_udp_ops.send(&ep->super, &iov, 1), TMX_OK);
}

static uint16_t csum16(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t s = 0;

    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)(b[i] << 8 | b[i + 1]);
    if (n & 1)
        s += (uint32_t)b[n - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return htons((uint16_t)~s);
}

/* Sends 127.0.0.1 an ICMP port unreachable for a datagram from sport to
 * dport (both on 127.0.0.1), as the kernel of a host without dport would.
 * 0 if sent, -1 without CAP_NET_RAW. */
static int forge_refusal(uint16_t sport, uint16_t dport)
{
    unsigned char pkt[8 + 20 + 8 + 8] = {0};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    unsigned char *ip = pkt + 8, *udp = ip + 20;
    uint16_t c;
    int fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);

    if (fd < 0)
        return -1;
    pkt[0] = 3; /* destination unreachable */
    pkt[1] = 3; /* port unreachable */
    ip[0] = 0x45;
    ip[3] = 20 + 8 + 8; /* total length */
    ip[8] = 64;         /* ttl */
    ip[9] = IPPROTO_UDP;
    memcpy(ip + 12, &to.sin_addr, 4);
    memcpy(ip + 16, &to.sin_addr, 4);
    c = csum16(ip, 20);
    memcpy(ip + 10, &c, 2);
    memcpy(udp, &sport, 2);
    memcpy(udp + 2, &dport, 2);
    udp[5] = 8 + 8;
    c = csum16(pkt, sizeof(pkt));
    memcpy(pkt + 2, &c, 2);
    assert_int_equal(sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)sizeof(pkt));
    close(fd);
    return 0;
}

static uint16_t local_port(int fd)
{
    struct sockaddr_in sa;
    socklen_t l = sizeof(sa);

    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &l), 0);
    return sa.sin_port;
}


/* Whether this process may forge ICMP (a raw socket needs CAP_NET_RAW). */
static int can_forge(void)
{
    int fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);

    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

/* b stays alive and progresses throughout; a sends, gets a forged
 * refusal, and keeps talking to b for 0.5 s. */
static void forged(const char *connect_max)
{
    side_t a, b;
    udp_ep_t *ab;
    uint64_t end;
    int fd;

    if (!can_forge())
        unit_skip("no CAP_NET_RAW to forge ICMP (%s); run as root", strerror(errno));
    setenv("TMX_UDP_CONNECT_MAX", connect_max, 1);
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    unsetenv("TMX_UDP_CONNECT_MAX");
    ab = connect_to(&a, &b, UUID_B);
    send_bytes(ab, 64);
    end = udp_now_us() + 200000;
    while (udp_now_us() < end) {
        tl_udp_ops.progress(&a.ui->super);
        tl_udp_ops.progress(&b.ui->super);
    }
    assert_int_equal(b.packets, 1);
    fd = udp_ep_fd(a.ui, ab) >= 0 ? udp_ep_fd(a.ui, ab) : a.ui->sock.fd;
    assert_int_equal(forge_refusal(local_port(fd), b.ui->sock.self_sa.sin_port), 0);
    {
        end = udp_now_us() + 500000;
        while (udp_now_us() < end) {
            if (!ab->failed)
                send_bytes(ab, 64);
            tl_udp_ops.progress(&a.ui->super);
            tl_udp_ops.check_peers(&a.ui->super);
            tl_udp_ops.progress(&b.ui->super);
            tl_udp_ops.wait(&a.ui->super, 1000);
        }
        print_message("connect_max %s: a declared live b failed: %d; b got %zu packets\n", connect_max,
                      a.failures, b.packets);
    }
    ab->failed = 1; /* no bye either way: the verdict is a.failures */
    udp_ep_find(b.ui, UUID_A)->failed = 1;
    tl_udp_ops.iface_close(&a.ui->super);
    tl_udp_ops.iface_close(&b.ui->super);
    assert_int_equal(a.failures, 0);
}

static void test_forged_refusal_shared_socket(void **state)
{
    (void)state;
    forged("0");
}

static void test_forged_refusal_connected_socket(void **state)
{
    (void)state;
    forged("1");
}

/* A closing peer lingers at most UDP_LINGER_US for its last segments to
 * be acknowledged, then says bye anyway. A receiver that was busy (the
 * issue's rank computing for 7 s) and lost one of them (its socket
 * buffer overflowed, say) then reads the bye: a says it exited cleanly,
 * so b reports a clean exit, drops a's retransmissions of nothing, and
 * the message is gone without a death being reported (receives from any
 * source are not failed on a clean exit: they hang). */
/* b's network while b is busy: every data datagram is lost, until the
 * first that carries no data (the bye), which stays for b to read. */
static void *lose_data(void *arg)
{
    side_t *b = arg;
    unsigned char d[65536];
    uint64_t end = udp_now_us() + 3000000;

    while (udp_now_us() < end) {
        udp_hdr_t h;
        ssize_t n = recv(b->ui->sock.fd, d, sizeof(d), MSG_DONTWAIT | MSG_PEEK);
        if (n < (ssize_t)sizeof(h)) {
            usleep(100);
            continue;
        }
        memcpy(&h, d, sizeof(h));
        if (le16toh(h.flags) & UDP_FLAG_ACK_ONLY)
            break;
        recv(b->ui->sock.fd, d, sizeof(d), MSG_DONTWAIT);
    }
    return NULL;
}

static void test_bye_after_unacked_data(void **state)
{
    side_t a, b;
    udp_ep_t *ab;
    pthread_t t;

    (void)state;
    side_open(&a, UUID_A);
    side_open(&b, UUID_B);
    ab = connect_to(&a, &b, UUID_B);
    assert_int_equal(pthread_create(&t, NULL, lose_data, &b), 0);
    send_bytes(ab, 64);
    /* a closes: it lingers, resends (b is busy: every copy is lost), then
     * says bye */
    tl_udp_ops.iface_close(&a.ui->super);
    pthread_join(t, NULL);
    /* b comes back: the resends and the bye are in its socket */
    for (uint64_t end = udp_now_us() + 200000; udp_now_us() < end;)
        tl_udp_ops.progress(&b.ui->super);
    print_message("b: %zu of 1 packets delivered, %d failures reported, %d of them clean\n", b.packets,
                  b.failures, b.clean);
    tl_udp_ops.iface_close(&b.ui->super);
    /* a clean exit must mean nothing it sent is missing */
    assert_true(b.packets == 1 || b.clean == 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_refusal_shared_socket),
        cmocka_unit_test(test_forged_refusal_connected_socket),
        cmocka_unit_test(test_bye_after_unacked_data),
    };

    setenv("TMX_UDP_ADDR", "127.0.0.1", 1);
    setenv("TMX_UDP_MTU", "1500", 1);
    return UNIT_MAIN(argc, argv, tests);
}
