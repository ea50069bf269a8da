/* UDP ping-pong between two hosts (network namespaces): the least a
 * message over UDP sockets can cost one way, for bench/udp.sh.
 *
 *   udp_pingpong server PORT [-b] [-C] [-c CORE]
 *   udp_pingpong client ADDR PORT [-b] [-c CORE] [-s SIZE] [-n ITERS] [-w WARM]
 *
 * The server echoes every datagram to its sender until it gets an empty
 * one. The client sends SIZE bytes, waits for the echo, and so on ITERS
 * times after WARM untimed round trips, then prints the one-way time
 * (round trip / 2): mean, median, 99th percentile, min and max.
 *
 * -b: blocking recvfrom (the process sleeps until the datagram is there);
 *     without it both sides spin on a non-blocking recv (MSG_DONTWAIT).
 * -C: the server connects its socket to the first client and answers with
 *     send: like the client, it then has the route at hand instead of the
 *     kernel looking it up for every datagram (sendto on an unconnected
 *     socket, the usual echo server), so both ends take the quickest path.
 * A datagram lost on the way (nothing back within 1 s) ends the client
 * with an error rather than skewing the figures.
 */
#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXSZ 65507

static int blocking;

static void usage(void)
{
    fprintf(stderr, "usage: udp_pingpong server PORT [-b] [-C] [-c CORE]\n"
                    "       udp_pingpong client ADDR PORT [-b] [-c CORE] [-s SIZE] [-n ITERS] [-w WARM]\n");
    exit(2);
}

/* Receives one datagram into buf; spins unless blocking. Returns its
 * length, or -1 after timeout_s seconds without one. */
static ssize_t recv_one(int fd, void *buf, struct sockaddr_in *from, double timeout_s)
{
    socklen_t fl = sizeof(*from);
    double t0 = 0;
    unsigned spins = 0;

    for (;;) {
        ssize_t n = recvfrom(fd, buf, MAXSZ, blocking ? 0 : MSG_DONTWAIT, (struct sockaddr *)from,
                             from ? &fl : NULL);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            perror("recvfrom");
            exit(1);
        }
        /* blocking sockets get here through SO_RCVTIMEO */
        if (blocking)
            return -1;
        if ((++spins & 0xfff) == 0) {
            if (t0 == 0)
                t0 = now_s();
            else if (now_s() - t0 > timeout_s)
                return -1;
        }
    }
}

static int sock(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0), sz = 8 << 20;
    if (fd < 0) {
        perror("socket");
        exit(1);
    }
    /* same socket buffers as tmx's udp transport (8 MiB) */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    return fd;
}

static void set_rcvtimeo(int fd, double s)
{
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static int server(int argc, char **argv)
{
    static char buf[MAXSZ];
    struct sockaddr_in me = {.sin_family = AF_INET}, from;
    int fd, opt, core = -1, conn = 0;
    long echoed = 0;

    if (argc < 3)
        usage();
    me.sin_port = htons((uint16_t)atoi(argv[2]));
    optind = 3;
    while ((opt = getopt(argc, argv, "bCc:")) != -1) {
        if (opt == 'b')
            blocking = 1;
        else if (opt == 'C')
            conn = 1;
        else if (opt == 'c')
            core = atoi(optarg);
        else
            usage();
    }
    if (core >= 0)
        pin(core);
    fd = sock();
    if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0) {
        perror("bind");
        return 1;
    }
    if (blocking)
        set_rcvtimeo(fd, 120);
    printf("udp_pingpong server ready port=%d\n", ntohs(me.sin_port));
    fflush(stdout);
    for (;;) {
        ssize_t n = recv_one(fd, buf, &from, 120);
        if (n < 0) {
            fprintf(stderr, "udp_pingpong server: nothing for 120 s, giving up\n");
            return 1;
        }
        if (n == 0)
            break;
        if (conn == 1) {
            if (connect(fd, (struct sockaddr *)&from, sizeof(from)) != 0) {
                perror("connect");
                return 1;
            }
            conn = 2;
        }
        if ((conn ? send(fd, buf, (size_t)n, 0) : sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, sizeof(from))) != n) {
            perror("send");
            return 1;
        }
        echoed++;
    }
    printf("udp_pingpong server echoed=%ld\n", echoed);
    return 0;
}

static int client(int argc, char **argv)
{
    static char buf[MAXSZ], rbuf[MAXSZ];
    struct sockaddr_in peer = {.sin_family = AF_INET};
    int fd, opt, core = -1;
    long size = 8, iters = 100000, warm = -1;
    double *rt;

    if (argc < 4)
        usage();
    if (inet_pton(AF_INET, argv[2], &peer.sin_addr) != 1)
        usage();
    peer.sin_port = htons((uint16_t)atoi(argv[3]));
    optind = 4;
    while ((opt = getopt(argc, argv, "bc:s:n:w:")) != -1) {
        switch (opt) {
        case 'b': blocking = 1; break;
        case 'c': core = atoi(optarg); break;
        case 's': size = atol(optarg); break;
        case 'n': iters = atol(optarg); break;
        case 'w': warm = atol(optarg); break;
        default: usage();
        }
    }
    if (size < 1 || size > MAXSZ || iters < 1)
        usage();
    if (warm < 0)
        warm = iters / 10 + 1;
    if (core >= 0)
        pin(core);
    fd = sock();
    if (connect(fd, (struct sockaddr *)&peer, sizeof(peer)) != 0) {
        perror("connect");
        return 1;
    }
    if (blocking)
        set_rcvtimeo(fd, 1.0);
    rt = malloc((size_t)iters * sizeof(*rt));
    if (rt == NULL)
        return 1;
    memset(buf, 'x', (size_t)size);
    for (long i = -warm; i < iters; i++) {
        double t0 = now_s();
        ssize_t n;
        if (send(fd, buf, (size_t)size, 0) != size) {
            perror("send");
            return 1;
        }
        n = recv_one(fd, rbuf, NULL, 1.0);
        if (n != size) {
            fprintf(stderr, "udp_pingpong: %s at round trip %ld\n", n < 0 ? "no echo within 1 s" : "short echo", i);
            return 1;
        }
        if (i >= 0)
            rt[i] = (now_s() - t0) * 1e6 / 2.0;
    }
    for (int k = 0; k < 3; k++)
        send(fd, buf, 0, 0);
    {
        double sum = 0, med, p99;
        for (long i = 0; i < iters; i++)
            sum += rt[i];
        med = median(rt, (int)iters); /* sorts rt */
        p99 = rt[(long)((double)(iters - 1) * 0.99)];
        printf("udp_pingpong mode=%s size=%ld iters=%ld oneway_us_mean=%.3f oneway_us_median=%.3f "
               "oneway_us_p99=%.3f oneway_us_min=%.3f oneway_us_max=%.3f\n",
               blocking ? "blocking" : "spin", size, iters, sum / (double)iters, med, p99, rt[0], rt[iters - 1]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    if (strcmp(argv[1], "server") == 0)
        return server(argc, argv);
    if (strcmp(argv[1], "client") == 0)
        return client(argc, argv);
    usage();
    return 2;
}
