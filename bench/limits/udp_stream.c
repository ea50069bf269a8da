/* A raw UDP stream between two hosts (network namespaces): how many bytes
 * a receiver gets per second when a sender blasts datagrams at it, for
 * bench/udp.sh. No reliability, no flow control: what arrives counts.
 *
 *   udp_stream recv PORT SECONDS [-c CORE] [-G]
 *   udp_stream send ADDR PORT SIZE SECONDS [-c CORE] [-g SEGMENT]
 *
 * The receiver starts its clock at the first datagram, counts bytes and
 * datagrams for SECONDS, and prints the goodput (payload bytes per second
 * at the receiver, 10^6 B/s). The sender sends SIZE-byte datagrams as
 * fast as send() takes them for SECONDS (start it after the receiver and
 * give it a little longer than the receiver's window), and prints how
 * many it sent.
 *
 * -g SEGMENT: the sender hands the kernel SIZE bytes per send with
 *   UDP_SEGMENT (GSO), cut into SEGMENT-byte datagrams on the wire.
 * -G: the receiver turns on UDP_GRO (coalesced reads of such datagrams).
 * Both sockets get 8 MiB buffers, like tmx's udp transport.
 */
#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define MAXSZ 65507

static void usage(void)
{
    fprintf(stderr, "usage: udp_stream recv PORT SECONDS [-c CORE] [-G]\n"
                    "       udp_stream send ADDR PORT SIZE SECONDS [-c CORE] [-g SEGMENT]\n");
    exit(2);
}

static int sock(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0), sz = 8 << 20;
    if (fd < 0) {
        perror("socket");
        exit(1);
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    return fd;
}

static int do_recv(int argc, char **argv)
{
    static char buf[MAXSZ + 1];
    struct sockaddr_in me = {.sin_family = AF_INET};
    struct pollfd pfd;
    double secs, t0 = 0, t;
    long long bytes = 0, dgrams = 0;
    int fd, opt, core = -1, gro = 0, one = 1;

    if (argc < 4)
        usage();
    me.sin_port = htons((uint16_t)atoi(argv[2]));
    secs = atof(argv[3]);
    optind = 4;
    while ((opt = getopt(argc, argv, "c:G")) != -1) {
        if (opt == 'c')
            core = atoi(optarg);
        else if (opt == 'G')
            gro = 1;
        else
            usage();
    }
    if (secs <= 0)
        usage();
    if (core >= 0)
        pin(core);
    fd = sock();
    if (gro && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0)
        perror("setsockopt(UDP_GRO)");
    if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0) {
        perror("bind");
        return 1;
    }
    printf("udp_stream recv ready port=%d\n", ntohs(me.sin_port));
    fflush(stdout);
    /* wait (up to 30 s) for the first datagram, which starts the clock */
    pfd.fd = fd;
    pfd.events = POLLIN;
    if (poll(&pfd, 1, 30000) != 1) {
        fprintf(stderr, "udp_stream recv: nothing within 30 s\n");
        return 1;
    }
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("recv");
            return 1;
        }
        t = now_s();
        if (t0 == 0) {
            t0 = t; /* the first datagram starts the window, and is not counted */
            continue;
        }
        if (t - t0 >= secs)
            break;
        bytes += n;
        dgrams++;
    }
    t = now_s() - t0;
    printf("udp_stream recv seconds=%.3f datagrams=%lld bytes=%lld goodput_MBps=%.3f\n", t, dgrams, bytes,
           (double)bytes / t / 1e6);
    return 0;
}

static int do_send(int argc, char **argv)
{
    static char buf[MAXSZ];
    struct sockaddr_in peer = {.sin_family = AF_INET};
    long size;
    double secs, t0;
    long long sent = 0, failed = 0;
    int fd, opt, core = -1, seg = 0;

    if (argc < 6)
        usage();
    if (inet_pton(AF_INET, argv[2], &peer.sin_addr) != 1)
        usage();
    peer.sin_port = htons((uint16_t)atoi(argv[3]));
    size = atol(argv[4]);
    secs = atof(argv[5]);
    optind = 6;
    while ((opt = getopt(argc, argv, "c:g:")) != -1) {
        if (opt == 'c')
            core = atoi(optarg);
        else if (opt == 'g')
            seg = atoi(optarg);
        else
            usage();
    }
    if (size < 1 || size > MAXSZ || secs <= 0 || seg < 0)
        usage();
    if (core >= 0)
        pin(core);
    fd = sock();
    if (connect(fd, (struct sockaddr *)&peer, sizeof(peer)) != 0) {
        perror("connect");
        return 1;
    }
    if (seg > 0 && setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) != 0) {
        perror("setsockopt(UDP_SEGMENT)");
        return 1;
    }
    memset(buf, 'x', (size_t)size);
    t0 = now_s();
    for (unsigned k = 1;; k++) {
        /* ECONNREFUSED (the receiver has finished) and ENOBUFS are counted, not fatal */
        if (send(fd, buf, (size_t)size, 0) == size)
            sent++;
        else
            failed++;
        if ((k & 63) == 0 && now_s() - t0 >= secs)
            break;
    }
    printf("udp_stream send size=%ld segment=%d sends=%lld failed=%lld seconds=%.3f offered_MBps=%.3f\n", size, seg,
           sent, failed, now_s() - t0, (double)sent * (double)size / (now_s() - t0) / 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    if (strcmp(argv[1], "recv") == 0)
        return do_recv(argc, argv);
    if (strcmp(argv[1], "send") == 0)
        return do_send(argc, argv);
    usage();
    return 2;
}
